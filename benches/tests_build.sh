#!/usr/bin/env bash
# How long the crate's tests take to build, before and after the integration tests became one
# binary (issue #30 item 3): a worktree of BEFORE (default 6694adb, 46 test binaries) and this
# checkout (one binary), each in its own target directory with the dependencies already built
# (one warm-up `cargo test --no-run` each), then `cargo clean -p repro` and a timed
# `cargo test --no-run` of the crate alone (library, binary, unit tests, integration tests).
#
#   bash benches/tests_build.sh [BEFORE] [ROUNDS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
before="${1:-6694adb}"
rounds="${2:-1}"
work="$(mktemp -d "${TMPDIR:-/tmp}/repro-tests-build.XXXXXX")"
trap 'git -C "$root" worktree remove --force "$work/before" 2>/dev/null; rm -rf "$work"' EXIT
git -C "$root" worktree add -q --detach "$work/before" "$before"
export CARGO_PROFILE_DEV_DEBUG=0
measure() { # label dir target
  (cd "$2" && CARGO_TARGET_DIR="$3" cargo clean -p repro -q &&
    CARGO_TARGET_DIR="$3" /usr/bin/time -f "$1: %e s wall, %U s user, %S s sys" \
      cargo test --locked --no-run -q 2>&1 | tail -1)
}
for d in "$work/before" "$root"; do
  (cd "$d" && CARGO_TARGET_DIR="$work/target-$(basename "$d")" cargo test --locked --no-run -q >/dev/null 2>&1)
done
for _ in $(seq "$rounds"); do
  measure "before ($before, $(ls "$work/before/tests"/*.rs | wc -l) test files at the top)" "$work/before" "$work/target-before"
  measure "after (one integration binary)" "$root" "$work/target-$(basename "$root")"
done
du -sh "$work/target-before/debug/deps" "$work/target-$(basename "$root")/debug/deps" | sed 's/^/deps directory: /'
