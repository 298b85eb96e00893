#!/usr/bin/env bash
# #29 goal 3: is the level a small kernel's median takes the process's, or the GPU's state
# since it last went idle? On the GPU machine:
#
#   bash benches/gpu_level_idle.sh [PROCESSES] [ROUNDS] [SAMPLES] [IDLE_MS ...]
#
# For each IDLE_MS (default: 0 and 1000), PROCESSES processes of level_idle/level_idle.c (the
# variants taken in turn, process by process), each timing one graph of the vector add in
# ROUNDS rounds of SAMPLES samples with IDLE_MS of idle GPU between rounds. Prints, per
# variant: the CV across processes of the first round's median (what one invocation
# reports), of each process's mean over its rounds, and the spread of rounds inside a
# process (pooled standard deviation, % of the mean). If idling redraws the level, the
# rounds of a process spread as much as processes do, and the mean over rounds narrows.
set -euo pipefail
processes="${1:-12}"; rounds="${2:-6}"; samples="${3:-100}"
idles=("${@:4}")
[ "${#idles[@]}" -gt 0 ] || idles=(0 1000)
if [ "$processes" -lt 2 ] || [ "$rounds" -lt 2 ]; then
  echo "gpu_level_idle.sh: at least 2 processes and 2 rounds, to compare them" >&2
  exit 2
fi
. "$(dirname "$0")/stream_state/build.sh"
build_program level_idle/level_idle.c level_idle
for p in $(seq "$processes"); do
  for idle in "${idles[@]}"; do
    ./level_idle "$rounds" "$idle" "$samples" >> "idle$idle.txt"
  done
done
nvidia-smi --query-gpu=uuid --format=csv,noheader
python3 - "${idles[@]}" <<'PY'
import statistics as st, sys
print(f"{'idle ms':>8} {'first round CV':>15} {'mean of rounds CV':>18} {'rounds inside a process':>24} {'median us':>10}")
for idle in sys.argv[1:]:
    runs = [[float(x) for x in l.split()] for l in open(f"idle{idle}.txt")]
    cv = lambda xs: 100 * st.stdev(xs) / st.mean(xs)
    grand = st.mean(x for r in runs for x in r)
    within = (sum((x - st.mean(r)) ** 2 for r in runs for x in r) / sum(len(r) - 1 for r in runs)) ** 0.5
    print(f"{idle:>8} {cv([r[0] for r in runs]):14.3f}% {cv([st.mean(r) for r in runs]):17.3f}% {100 * within / grand:23.3f}% {st.median(x for r in runs for x in r):10.4f}")
for idle in sys.argv[1:]:
    print(f"idle {idle} ms, each process's rounds:")
    for l in open(f"idle{idle}.txt"):
        print("  " + l.strip())
PY
