#!/usr/bin/env bash
# GPU-machine run for issue 3: the test suite (GPU branches included) and the build
# benchmarks with nvcc. Usage: benches/gpu_build.sh DIR_WITH_TEST_BINARIES
set -u
tests=${1:-.dev/tests}
export REPRO_TEST_REQUIRE_NVRTC=1
for t in "$tests"/*; do
  echo "== $(basename "$t")"
  "$t" --test-threads 4 2>&1 | grep -E "^test result|FAILED|panicked|skipping" 
done
echo "== toolchain which"; target/release/repro toolchain which
echo "== build benchmarks"; python3 benches/build.py --repro target/release/repro --runs 20 --cold-runs 10
