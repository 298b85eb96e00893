#!/usr/bin/env bash
# #29 goal 3: does the level a small kernel's median takes in a process follow the process's
# address-space layout? The CUDA driver places device memory in the process's unified virtual
# address space, which the kernel randomises per process. On the GPU machine:
#
#   bash benches/gpu_level_aslr.sh [PROCESSES] [REPRO]
#
# Runs level_spread (one context, module and graph, 100 samples) PROCESSES times as usual and
# PROCESSES times under `setarch -R` (address randomisation off: every process gets the same
# addresses), taken in turn; prints each variant's medians, their CV and how many distinct
# device addresses the first buffer had. With REPRO (a release binary), then compares
# `repro bench vector_add` invocations the same two ways (gpu_processes.py).
set -euo pipefail
processes="${1:-30}"; repro="${2:+$(realpath "$2")}"
here="$(cd "$(dirname "$0")" && pwd)"
if [ "$processes" -lt 2 ]; then
  echo "gpu_level_aslr.sh: at least 2 processes, to compare them" >&2
  exit 2
fi
arch="$(uname -m)"
if ! setarch "$arch" -R true; then
  echo "gpu_level_aslr.sh: setarch -R is refused here (seccomp?); nothing to compare" >&2
  exit 1
fi
. "$here/stream_state/build.sh"
build_program level_spread/level_spread.c level_spread
for _ in $(seq "$processes"); do
  LEVEL_SHOW_VA=1 ./level_spread 1 1 1 100 >> usual.txt 2>> usual.va
  LEVEL_SHOW_VA=1 setarch "$arch" -R ./level_spread 1 1 1 100 >> fixed.txt 2>> fixed.va
done
python3 - <<'PY'
import statistics as st
print(f"{'addresses':10} {'median us':>10} {'CV':>8} {'distinct device addresses':>26}")
for k in ("usual", "fixed"):
    xs = [float(l) for l in open(k + ".txt")]
    vas = {l.split()[1] for l in open(k + ".va")}
    print(f"{k:10} {st.median(xs):10.4f} {100 * st.stdev(xs) / st.mean(xs):7.3f}% {len(vas):26}")
for k in ("usual", "fixed"):
    print(f"{k}: medians in order:", " ".join(f"{float(l):.4f}" for l in open(k + ".txt")))
PY
if [ -n "$repro" ]; then
  printf '#!/bin/sh\nexec setarch "%s" -R "%s" "$@"\n' "$arch" "$repro" > fixed-repro
  chmod +x fixed-repro
  cd "$here"
  python3 gpu_processes.py --variant usual="$repro" --variant fixed="$work/fixed-repro" --runs "$processes"
fi
