#!/usr/bin/env bash
# Every GPU test, on the GPU machine, with a table of results.
#
# GPU tests are `#[ignore = "needs a GPU: ..."]`, so that `cargo test` on a machine without
# one reports them as ignored rather than passed; a few more tests take a GPU branch when
# /proc/driver/nvidia/version exists (modules bench::cli, demo_cli, env::cli). The GPU machine has no
# cargo, so this runs in two steps:
#
#   benches/gpu_tests.sh prepare     # here: builds the test binaries and the repro binary
#                                    # and copies them, stripped, into .dev/tests/
#   benches/gpu_tests.sh run         # on the GPU machine, in the repository root, with
#                                    # .dev/tests carried along: runs the ignored tests
#                                    # and the GPU-branch modules, one row per test
#
# `prepare` copies every test binary that holds an ignored test (today the one integration
# binary, tests/tests.rs). `run`
# exits 1 if any test failed, and also when there is no GPU (the ignored tests then fail:
# they insist on one). NVRTC must be findable there (REPRO_NVRTC, a CUDA install, or a
# wheel in site-packages); REPRO_TEST_REQUIRE_NVRTC=1 makes its absence a failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.dev/tests"

# Test modules with a GPU branch besides the ignored tests (which are found by listing).
gpu_branch="bench::cli demo_cli env::cli"

prepare() {
  cd "$root"
  local json
  json="$(mktemp)"
  cargo build --locked --quiet --bin repro
  cargo test --locked --no-run --message-format=json >"$json"
  rm -rf "$dest"
  mkdir -p "$dest"
  # Integration-test executables (kind "test"), one per test file.
  python3 - "$json" >"$dest/.list" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["profile"].get("test") and "test" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])
EOF
  rm -f "$json"
  while read -r name exe; do
    local want=""
    # The listing is read whole first: `grep -q` would stop reading early, and under
    # pipefail the binary's SIGPIPE made the test look like it had no ignored tests.
    local listed
    listed="$("$exe" --list --ignored 2>/dev/null || true)"
    if grep -q ': test$' <<<"$listed"; then want=1; fi
    if [ -n "$want" ]; then
      cp "$exe" "$dest/$name"
      strip --strip-all "$dest/$name"
      echo "copied $name"
    fi
  done <"$dest/.list"
  rm -f "$dest/.list"
  cp target/debug/repro "$dest/repro"
  strip --strip-all "$dest/repro"
  du -sh "$dest"
  echo "now, on the GPU machine, with .dev/tests carried: bash benches/gpu_tests.sh run"
}

run() {
  cd "$root"
  [ -x "$dest/repro" ] || { echo "no $dest/repro: run 'benches/gpu_tests.sh prepare' first" >&2; exit 2; }
  if [ ! -e /proc/driver/nvidia/version ]; then
    echo "warning: no NVIDIA driver here (/proc/driver/nvidia/version): the GPU tests will fail" >&2
  fi
  # The test binaries were built elsewhere: point them at this checkout, this repro, and a
  # scratch directory here.
  export CARGO_BIN_EXE_repro="$dest/repro"
  export REPRO_TEST_CRATE_DIR="$root"
  export REPRO_TEST_TMPDIR="$root/.dev/tmp"
  mkdir -p "$REPRO_TEST_TMPDIR"
  local logs="$root/.dev/gpu-test-logs"
  rm -rf "$logs"
  mkdir -p "$logs"
  local status=0
  for t in "$dest"/*; do
    local name
    name="$(basename "$t")"
    [ "$name" = repro ] && continue
    echo "== $name" >&2
    # The ignored (GPU) tests, then the GPU branches of the modules that take one.
    # shellcheck disable=SC2086
    { "$t" --ignored --test-threads 2 || status=1
      "$t" $gpu_branch --test-threads 2 || status=1
    } >"$logs/$name.out" 2>"$logs/$name.err"
  done
  # One row per test: libtest's `test NAME ... ok|FAILED|ignored` lines, and the
  # `SKIPPED NAME: reason` lines tests print when a prerequisite is missing at run time.
  printf '%-12s %-80s %s\n' binary test result
  for t in "$dest"/*; do
    local name
    name="$(basename "$t")"
    [ "$name" = repro ] && continue
    awk -v bin="$name" -v err="$logs/$name.err" '
      FILENAME == err && /^SKIPPED / {
        line = $0; sub(/^SKIPPED /, "", line)
        n = index(line, ": "); skipped[substr(line, 1, n - 1)] = substr(line, n + 2); next
      }
      FILENAME != err && /^test .* \.\.\. / {
        t = $2; r = $0; sub(/^test .* \.\.\. /, "", r)
        if (r == "ok" && (t in skipped)) r = "skip: " skipped[t]
        else if (r == "ok") r = "pass"
        else if (r ~ /^FAILED/) r = "FAIL"
        printf "%-12s %-80s %s\n", bin, t, r
      }' "$logs/$name.err" "$logs/$name.out"
  done | tee "$logs/table.txt"
  awk '{ n++ } $3 == "pass" { p++ } $3 == "FAIL" { f++ } $3 ~ /^skip/ { s++ } $3 ~ /^ignored/ { i++ }
       END { printf "%d tests: %d passed, %d failed, %d skipped at run time, %d ignored\n", n, p, f, s, i }' \
    "$logs/table.txt"
  echo "logs: $logs" >&2
  exit "$status"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: benches/gpu_tests.sh prepare|run" >&2; exit 2 ;;
esac
