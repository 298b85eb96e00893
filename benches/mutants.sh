#!/usr/bin/env bash
# Mutation testing of the pure modules with cargo-mutants, and a table of what the unit
# tests catch. Usage:
#
#   cargo install --locked cargo-mutants
#   bash benches/mutants.sh [MODULE...]        # default: all of them
#
# MODULE is one of: search decide stats check version archive expr. Each module's
# mutants are tested against that module's own unit tests only (`cargo test --lib
# NAME::tests`): a mutant caught only by another module's tests or by an integration test
# counts as missed. For archive, only the path validation (`is_safe`) is mutated.
#
# It mutates the tree in place (cargo-mutants --in-place: no copy of the 7 GB target
# directory; each mutant is reverted after its test), so src/ must have no uncommitted
# changes, and nothing else may edit src/ meanwhile. Each mutant is one incremental build of
# the library's test binary: about 5-10 s on an idle 2-core machine, 45 s on a loaded one.
# stats' tests are Monte-Carlo heavy (12 s a run unoptimized), so its mutants build this
# crate at opt-level 1 (`--config profile.test.package.repro.opt-level=1`; the dependencies
# are untouched): 8 s to build and 5 s to test a mutant instead of 5 and 12.
# MUTANTS_SHARD=k/n runs the k-th of n shards of each module, k from 0: every n-th mutant
# (round-robin, so the sample spreads over the whole file); MUTANTS_TIMEOUT
# (default 60) bounds each test run in seconds. MUTANTS_RE=REGEX keeps only the mutants
# whose names (`--list`: file:line:column: what) match it, e.g. `stats\.rs:[45][0-9][0-9]:`
# for lines 400-599, so that two copies of the tree can share a module; MUTANTS_TAG=T then
# files the results as MODULE-T. Results go to .dev/mutants/MODULE/, and
# .dev/mutants/table.txt holds the table.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/.dev/mutants"
mkdir -p "$out"

# module -> file glob (by file name, so that moving files between directories keeps it
# working), unit-test filter, an optional mutant-name filter, and an optional cargo --config.
spec() {
  case "$1" in
    search) echo '**/bisect/search.rs|search::tests|' ;;
    decide) echo '**/decide.rs|decide::tests|' ;;
    stats) echo '**/stats.rs|stats::tests||profile.test.package.repro.opt-level=1' ;;
    check) echo '**/check.rs|check::tests|' ;;
    version) echo '**/version.rs|version::tests|' ;;
    archive) echo '**/archive.rs|archive::tests|is_safe' ;;
    expr) echo '**/expr.rs|expr::tests|' ;;
    *) echo "unknown module $1 (search decide stats check version archive expr)" >&2; exit 2 ;;
  esac
}

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(search decide stats check version archive expr)

if ! git diff --quiet -- src; then
  echo "src/ has uncommitted changes; commit or stash them first (mutants run in place)" >&2
  exit 2
fi

for m in "${modules[@]}"; do
  IFS='|' read -r glob filter re config <<<"$(spec "$m")"
  name="$m${MUTANTS_TAG:+-$MUTANTS_TAG}"
  args=(--in-place --no-shuffle --baseline skip --timeout "${MUTANTS_TIMEOUT:-60}" -f "$glob" -o "$out/$name")
  [ -n "$re" ] && args+=(-F "$re")
  [ -n "${MUTANTS_RE:-}" ] && args+=(-F "$MUTANTS_RE")
  [ -n "$config" ] && args+=(-C "--config=$config")
  [ -n "${MUTANTS_SHARD:-}" ] && args+=(--shard "$MUTANTS_SHARD" --sharding round-robin)
  echo "== $name" >&2
  rm -rf "$out/$name"
  # --lib for every cargo call (-C): each mutant builds only the library's test binary,
  # not the binary and the integration tests it is not tested against.
  cargo mutants "${args[@]}" -C --lib -- "$filter" >"$out/$name.log" 2>&1 || true
done

# Lines in a file; 0 for an empty or absent one (grep -c prints 0 and fails on no match).
count() { if [ -f "$1" ]; then grep -c . "$1" || true; else echo 0; fi; }
{
  printf '%-12s %7s %7s %7s %7s %8s %8s\n' run mutants caught timeout missed unviable caught%
  # Every run in .dev/mutants: a module, or a module's tagged part (MUTANTS_TAG).
  for d in "$out"/*/mutants.out; do
    [ -d "$d" ] || continue
    m="$(basename "$(dirname "$d")")"
    c=$(count "$d/caught.txt"); t=$(count "$d/timeout.txt"); x=$(count "$d/missed.txt"); u=$(count "$d/unviable.txt")
    n=$((c + t + x + u))
    pct=$(awk -v c=$((c + t)) -v v=$((c + t + x)) 'BEGIN { if (v) printf "%.1f", 100 * c / v; else print "-" }')
    printf '%-12s %7d %7d %7d %7d %8d %8s\n' "$m" "$n" "$c" "$t" "$x" "$u" "$pct"
  done
  echo "caught% = (caught + timeout) / (caught + timeout + missed); unviable mutants do not build"
  echo "missed mutants (each explained in mutants.md):"
  for d in "$out"/*/mutants.out; do
    if [ -s "$d/missed.txt" ]; then sed 's/^/  /' "$d/missed.txt"; fi
  done
} | tee "$out/table.txt"
