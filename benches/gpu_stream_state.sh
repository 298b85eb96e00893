#!/usr/bin/env bash
# #29: what ordinary work on a created CUDA stream does to a context's later kernels, outside
# repro (stream_state/stream_state.c says what each mode does). On the GPU machine:
#
#   bash benches/gpu_stream_state.sh [ITERATIONS] [REPEATS]
#
# Builds the program with the machine's CUDA (CUDA_HOME, default /usr/local/cuda) into a
# temporary folder, runs each mode REPEATS times (each a fresh process of ITERATIONS
# iterations), and prints every iteration's median per launch (us), then per mode the mean of
# the first two iterations, of the last half, and their ratio.
set -euo pipefail
iterations="${1:-8}"
repeats="${2:-2}"
. "$(dirname "$0")/stream_state/build.sh"
build_program stream_state/stream_state.c stream_state
for r in $(seq "$repeats"); do
  for mode in none stream memset legacy captured; do
    ./stream_state "$mode" "$iterations"
  done
done | tee runs.txt
python3 - runs.txt <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, *xs = line.split()
    rows.setdefault(mode, []).append([float(x) for x in xs])
print(f"\n{'mode':9} {'first two us':>12} {'last half us':>12} {'ratio':>7}")
for mode, runs in rows.items():
    first = statistics.mean(x for r in runs for x in r[:2])
    last = statistics.mean(x for r in runs for x in r[len(r) // 2:])
    print(f"{mode:9} {first:12.4f} {last:12.4f} {last / first:7.4f}")
PY
