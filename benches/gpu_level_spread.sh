#!/usr/bin/env bash
# #29 goal 3: split a small kernel's spread between invocations by level (outside repro):
# processes, contexts in a process, module loads in a context, graphs of a module
# (level_spread/level_spread.c says what one process does). On the GPU machine:
#
#   bash benches/gpu_level_spread.sh [PROCESSES] [CONTEXTS] [MODULES] [GRAPHS] [SAMPLES]
#
# Prints every process's medians, then, across the processes, the coefficient of variation of
# what one process would report if it averaged (mean of medians) over: its first measurement
# only (one context, module and graph: one measurement, as repro takes it, though repro uses
# the primary context), the first module's graphs, the first context's modules and graphs, and
# everything; and the spread within each level (the standard deviation of the level's means
# inside its parent, as a percent of the grand mean).
set -euo pipefail
processes="${1:-8}"; contexts="${2:-4}"; modules="${3:-4}"; graphs="${4:-2}"; samples="${5:-100}"
if [ "$processes" -lt 2 ]; then
  echo "gpu_level_spread.sh: at least 2 processes, to compare them" >&2
  exit 2
fi
. "$(dirname "$0")/stream_state/build.sh"
build_program level_spread/level_spread.c level_spread
for p in $(seq "$processes"); do
  ./level_spread "$contexts" "$modules" "$graphs" "$samples" > "p$p.txt"
  echo "process $p:"; sed 's/^/  /' "p$p.txt"
done
python3 - "$processes" "$modules" "$graphs" <<'PY'
import statistics as st, sys
P, M, G = (int(x) for x in sys.argv[1:])
runs = []  # runs[p][c][m][g]
for p in range(1, P + 1):
    ctxs = []
    for line in open(f"p{p}.txt"):
        xs = [float(x) for x in line.split()]
        ctxs.append([xs[m * G:(m + 1) * G] for m in range(M)])
    runs.append(ctxs)
mean = st.mean
grand = mean(x for r in runs for c in r for m in c for x in m)
def cv(xs):
    return 100 * st.stdev(xs) / mean(xs)
est = {
    "first measurement": [r[0][0][0] for r in runs],
    "mean of 1st module's graphs": [mean(r[0][0]) for r in runs],
    "mean of 1st context": [mean(x for m in r[0] for x in m) for r in runs],
    "mean of all contexts": [mean(x for c in r for m in c for x in m) for r in runs],
}
print(f"\n{P} processes x {len(runs[0])} contexts x {M} modules x {G} graphs; grand mean {grand:.4f} us")
print(f"{'estimator (what a process reports)':36} {'CV across processes':>20}")
for k, xs in est.items():
    print(f"{k:36} {cv(xs):19.3f}%")
def sd_within(groups):
    """Pooled SD of members around their group's mean, as % of the grand mean."""
    ss = sum((x - mean(g)) ** 2 for g in groups for x in g)
    df = sum(len(g) - 1 for g in groups)
    return 100 * (ss / df) ** 0.5 / grand if df else float("nan")
print(f"\n{'level':36} {'SD within its parent':>20}")
print(f"{'graphs of a module':36} {sd_within([m for r in runs for c in r for m in c]):19.3f}%")
print(f"{'modules of a context (their means)':36} {sd_within([[mean(m) for m in c] for r in runs for c in r]):19.3f}%")
print(f"{'contexts of a process (their means)':36} {sd_within([[mean(x for m in c for x in m) for c in r] for r in runs]):19.3f}%")
print(f"{'processes (their means)':36} {cv([mean(x for c in r for m in c for x in m) for r in runs]):19.3f}%")
PY
