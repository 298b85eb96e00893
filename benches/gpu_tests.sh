#!/usr/bin/env bash
# Every GPU test, on the GPU machine, with a table of results.
#
# GPU tests are `#[ignore = "needs a GPU: ..."]`, so that `cargo test` on a machine without
# one reports them as ignored rather than passed; a few more tests take a GPU branch when
# /proc/driver/nvidia/version exists (modules bench::cli, demo_cli, env::cli). The GPU machine has no
# cargo, so this runs in two steps:
#
#   benches/gpu_tests.sh prepare     # here: builds the test binaries and the release repro
#                                    # binary and copies them, stripped, into .dev/tests/
#   benches/gpu_tests.sh run         # on the GPU machine, in the repository root, with
#                                    # .dev/tests carried along: runs the ignored tests
#                                    # and the GPU-branch modules, one row per test
#
# `prepare` copies every test binary that holds an ignored test (today the one integration
# binary, tests/tests.rs). `run` runs each test in a process of its own under a time limit
# (REPRO_GPU_TEST_LIMIT seconds, 300 by default: a test still running then is named TIMEOUT,
# with the processes it left in its log; every process a test started, found by a variable
# only its processes inherit, is killed after it), writes a log per test and the table to
# REPRO_GPU_TEST_LOGS (.dev/gpu-test-logs), and
# exits 1 if any test failed or ran out of time, and also when there is no GPU (the ignored
# tests then fail: they insist on one). NVRTC must be findable there (REPRO_NVRTC, a CUDA install, or a
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
  # The release binary users run (a debug one makes the CPU paths many times slower), found
  # where cargo put it (CARGO_TARGET_DIR included).
  local bin
  bin="$(cargo build --locked --release --bin repro --message-format=json-render-diagnostics | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "repro":
        print(m["executable"])')"
  [ -n "$bin" ] || { echo "cargo built no repro binary" >&2; exit 1; }
  cargo test --locked --no-run --message-format=json-render-diagnostics >"$json"
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
  cp "$bin" "$dest/repro"
  strip --strip-all "$dest/repro"
  du -sh "$dest"
  echo "now, on the GPU machine, with .dev/tests carried: bash benches/gpu_tests.sh run"
}

# The processes whose environment holds the variable assignment $1.
marked() {
  local env
  for env in /proc/[0-9]*/environ; do
    # A process that ended meanwhile, or one of another user, is not the test's.
    if { tr '\0' '\n' <"$env"; } 2>/dev/null | grep -qxF "$1"; then
      env="${env#/proc/}"
      echo "${env%/environ}"
    fi
  done
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
  local logs="${REPRO_GPU_TEST_LOGS:-$root/.dev/gpu-test-logs}"
  local limit="${REPRO_GPU_TEST_LIMIT:-300}"
  # Only a directory this script wrote before (its table) or an empty one is cleared.
  if [ -d "$logs" ] && [ ! -e "$logs/table.txt" ] && [ -n "$(ls -A "$logs")" ]; then
    echo "$logs holds files this script did not write: name an empty or new directory" >&2
    exit 2
  fi
  rm -rf "$logs"
  mkdir -p "$logs"
  local status=0
  # Each test in a process of its own, under a time limit: a test that does not end is named
  # (with the processes it left) and killed, and the others still run.
  printf '%-12s %-80s %-8s %s\n' binary test result seconds | tee "$logs/table.txt"
  for t in "$dest"/*; do
    local name
    name="$(basename "$t")"
    [ "$name" = repro ] && continue
    # Only the test executables `prepare` copied: anything else left in the directory (a
    # script, a note) would be run by the listing below.
    if [ "$(head -c 4 "$t" | od -An -c | tr -d ' ')" != '177ELF' ]; then
      echo "$name: not an executable test binary, skipped" >&2
      continue
    fi
    local listed
    # shellcheck disable=SC2086
    if ! listed="$("$t" --list --ignored && "$t" --list $gpu_branch)"; then
      echo "$name: cannot list its tests" >&2
      status=1
      continue
    fi
    sed -n 's/: test$//p' <<<"$listed" | awk '!seen[$0]++' >"$logs/$name.list"
    while read -r test; do
      local log start rc=0 result
      log="$logs/$name.$(tr -c 'A-Za-z0-9_.\n-' '_' <<<"$test" | tr -d '\n').log"
      start=$(date +%s)
      # stdin from /dev/null: the loop reads the list from its own. Every process the test
      # starts inherits the marker, also those in process groups of their own (repro's
      # children, a python or nvcc they start), which timeout's signal to its group misses.
      local marker="REPRO_GPU_TEST_RUN=$$.$start.$RANDOM"
      env "$marker" timeout -k 5 "$limit" "$t" --include-ignored --exact "$test" >"$log" 2>&1 </dev/null || rc=$?
      if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ $(( $(date +%s) - start )) -ge "$limit" ]; then
        result=TIMEOUT
        { echo "== past the time limit ($limit s); the test's processes still running (killed):"
          for pid in $(marked "$marker"); do
            ps -o pid=,ppid=,etime=,stat=,args= -p "$pid" | cut -c1-300
          done; } >>"$log" || true
      elif [ "$rc" != 0 ] || ! grep -q '^test result: ok. 1 passed' "$log"; then
        result=FAIL
      elif grep -q '^SKIPPED ' "$log"; then
        result="skip: $(sed -n 's/^SKIPPED [^:]*: //p' "$log" | head -1)"
      else
        result=pass
      fi
      # Whatever the test left running (after a time-out, or a test that leaked a child).
      for pid in $(marked "$marker"); do kill -KILL "$pid" 2>/dev/null || true; done
      [ "$result" = pass ] || [ "${result#skip}" != "$result" ] || status=1
      printf '%-12s %-80s %-8s %s\n' "$name" "$test" "$result" "$(( $(date +%s) - start ))" | tee -a "$logs/table.txt"
    done <"$logs/$name.list"
  done
  awk 'NR > 1 { n++ } $3 == "pass" { p++ } $3 == "FAIL" { f++ } $3 == "TIMEOUT" { h++ } $3 ~ /^skip/ { s++ }
       END { printf "%d tests: %d passed, %d failed, %d past the time limit, %d skipped at run time\n", n, p, f, h, s }' \
    "$logs/table.txt"
  echo "logs: $logs" >&2
  exit "$status"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: benches/gpu_tests.sh prepare|run" >&2; exit 2 ;;
esac
