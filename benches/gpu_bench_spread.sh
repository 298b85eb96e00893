#!/usr/bin/env bash
# The spread of a small kernel's median between invocations under `repro bench` options:
# vector_add over 1M floats in graph mode, N invocations of each variant back to back (a
# variant's block after the other's), then the CV of the medians. Goal 3 of #29.
#
# Usage: benches/gpu_bench_spread.sh REPRO_BINARY N 'LABEL:ARGS' ['LABEL:ARGS' ...]
#   e.g. benches/gpu_bench_spread.sh target/release/repro 10 'default:' 'warmup1s:--warmup 1s' 'default2:'
set -euo pipefail
repro=$(realpath "$1"); n=$2; shift 2
[ "$#" -ge 1 ] || { echo "usage: $0 REPRO_BINARY N 'LABEL:ARGS' ..." >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/proj/recipes" "$work/proj/kernels"
cp "$root/recipes/vector_add.toml" "$work/proj/recipes/"
cp "$root/kernels/vector_add.cu" "$root/kernels/common.cuh" "$work/proj/kernels/"
(cd "$work/proj" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm v)
median() {
  # shellcheck disable=SC2086
  "$repro" -C "$work/proj" --store "$work/store" bench vector_add --json --param n=1048576 \
    --mode graph $1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["results"][0]["summary"]["median"])'
}
median "" >/dev/null  # builds, and calibrates once per boot, outside the timings
for variant in "$@"; do
  label=${variant%%:*}; args=${variant#*:}
  for _ in $(seq "$n"); do median "$args"; done >"$work/$label.txt"
  python3 - "$label" "$work/$label.txt" <<'PY'
import statistics as st, sys
xs = [float(l) for l in open(sys.argv[2])]
print(f"{sys.argv[1]:12} {len(xs):3} invocations  median {st.median(xs):.4f} us  CV {100 * st.stdev(xs) / st.mean(xs):.3f}%  "
      + " ".join(f"{x:.4f}" for x in xs))
PY
done
