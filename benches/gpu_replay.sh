#!/usr/bin/env bash
# GPU-machine check of `repro replay`: record a timed result, replay it from the store and from
# a bundle in an empty directory (no repository), and print the verdicts and timing comparisons.
set -u
repro=$(realpath "${1:-target/release/repro}")
work=$(mktemp -d)
export GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b
mkdir -p "$work/repo" && cp -r kernels recipes "$work/repo/" && cd "$work/repo" && git init -q && git add -A && git commit -qm snapshot
for spec in "vector_add n=67108864" "flash_attention seq_len=4096"; do
  set -- $spec
  id=$("$repro" bench "$1" --param "$2" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['results'][0]['id'])")
  echo "== $1 $2: result ${id:0:12}"
  "$repro" replay "${id:0:12}"; echo "exit=$?"
  "$repro" bundle create "${id:0:12}" -o "$work/paper.tar.zst" --force -q
  mkdir -p "$work/empty" && (cd "$work/empty" && "$repro" replay "${id:0:12}" --bundle "$work/paper.tar.zst"; echo "exit=$?")
done
"$repro" bundle show "$work/paper.tar.zst" | sed -n '1,40p'
