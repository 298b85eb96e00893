#!/usr/bin/env bash
# #29 goals 1-3 on the GPU machine, before and after in one run: the phase/overhead and
# small-kernel tables (benches/gpu_bench_phases.py) for both binaries, then the acceptance
# bisections (benches/gpu_bisect.py --acceptance) for each binary given in BISECT (default:
# the after binary only; RUNS histories of each kind (1.5x, 0.6x the threshold, A/A) per
# kernel; BISECT_ARGS passes more options, e.g. --shared-builds or --time-limit SECONDS).
#
#   benches/gpu_perf29.sh BEFORE_BINARY AFTER_BINARY
#
# NVRTC comes from the machine's CUDA (CUDA_HOME), as the throwaway projects pin nothing.
set -euo pipefail
before="$1"
after="$2"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda-13.0}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader || true
python3 benches/gpu_bench_phases.py --binary before="$before" --binary after="$after" \
  --runs "${PHASE_RUNS:-3}" --small-runs "${SMALL_RUNS:-5}"
for b in ${BISECT:-$after}; do
  echo "== acceptance bisections with $b"
  python3 benches/gpu_bisect.py --repro "$b" --acceptance --runs "${RUNS:-20}" ${BISECT_ARGS:-}
done
