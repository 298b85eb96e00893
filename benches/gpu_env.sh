#!/usr/bin/env bash
# GPU-machine run for `repro env`: capture, lock, check, then the timing table.
# Usage: benches/gpu_env.sh REPRO_BINARY OUT_DIR
set -u
repro=${1:-target/release/repro}
out=${2:-/tmp/repro-gpu-env}
mkdir -p "$out"
echo "== env capture -v"; "$repro" env capture -v
"$repro" env capture --json -o "$out/fingerprint.json" >/dev/null
echo "== env lock"; "$repro" env lock --name h200 -o "$out/h200.toml" --force
echo "== env check (against the lock just written)"; "$repro" env check --lock "$out/h200.toml" -v; echo "exit=$?"
echo "== env check --json"; "$repro" env check --lock "$out/h200.toml" --json > "$out/check.json"; echo "exit=$?"
echo "== CUDA_VISIBLE_DEVICES= (no device visible)"; CUDA_VISIBLE_DEVICES= "$repro" env check --lock "$out/h200.toml" -q; echo "exit=$?"
echo "== timings"; python3 benches/env_check.py --repro "$repro" --lock "$out/h200.toml" --runs 20 --slow-runs 5
