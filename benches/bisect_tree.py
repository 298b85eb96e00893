#!/usr/bin/env python3
"""Whole-tree script bisection, first step included: repro against `git bisect run` (CPU only).

A generated repository of N files (default 20,000) and C commits (default 24), each commit
changing one unrelated file and the state file a trivial script reads; one transition. Both
tools answer the same question with the same script on the same repository, timed as whole
commands (the first step included), medians of K runs:

- `git bisect run sh -c SCRIPT` in a clone that is checked out (as a user's is);
- `repro bisect --script SCRIPT` (the whole tree) with an empty store each run: its first
  step writes the scratch worktree out;
- `repro bisect --script SCRIPT` again on a store that held an earlier bisection of other
  commits (answers not reused: a different script), to show the cost once a kept worktree
  exists.

Usage: python3 benches/bisect_tree.py [--repro PATH] [--files N] [--commits C] [--runs K]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1",
           GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")


def fast_import(root, files, commits, brk):
    os.makedirs(root)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, env=ENV, check=True)
    out = []
    for i in range(commits):
        msg = f"commit {i}".encode()
        out.append(f"commit refs/heads/main\nmark :{i + 1}\ncommitter b <b@b> {1700000000 + i} +0000\n".encode())
        out.append(f"data {len(msg)}\n".encode() + msg + b"\n")
        if i:
            out.append(f"from :{i}\n".encode())
        changes = {"state/s.txt": ("failing" if i >= brk else "fine") + f" {i}\n",
                   f"data/d{(i * 37) % 100:03}/f{(i * 7919) % files:06}.txt": f"edited {i}\n"}
        if i == 0:
            changes.update({f"data/d{k % 100:03}/f{k:06}.txt": f"file {k}\n" * 8 for k in range(files)})
        for path, text in changes.items():
            data = text.encode()
            out.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, env=ENV, input=b"".join(out), check=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=root, env=ENV, check=True)


def timed(cmd, cwd):
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"{cmd} failed ({r.returncode}): {r.stderr[-2000:]}")
    return time.perf_counter() - t, r


def git_bisect(root, commits, script):
    subprocess.run(["git", "bisect", "reset", "-q"], cwd=root, env=ENV, capture_output=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=root, env=ENV, check=True)
    t = time.perf_counter()
    subprocess.run(["git", "bisect", "start", "HEAD", f"HEAD~{commits - 1}"], cwd=root, env=ENV, check=True,
                   capture_output=True)
    _, r = timed(["git", "bisect", "run", "sh", "-c", script], root)
    secs = time.perf_counter() - t
    subprocess.run(["git", "bisect", "reset", "-q"], cwd=root, env=ENV, capture_output=True)
    return secs, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--commits", type=int, default=24)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    brk = a.commits * 2 // 3
    script = "grep -q fine state/s.txt"
    base = tempfile.mkdtemp(prefix="repro-bisect-tree-")
    try:
        root = os.path.join(base, "repo")
        fast_import(root, a.files, a.commits, brk)
        gitrepo = os.path.join(base, "gitrepo")
        subprocess.run(["git", "clone", "-q", root, gitrepo], env=ENV, check=True)

        g = []
        for _ in range(a.runs):
            s, r = git_bisect(gitrepo, a.commits, script)
            assert f"    commit {brk}\n" in r.stdout, r.stdout + r.stderr
            g.append(s)

        def repro_run(store, extra_script=""):
            s, r = timed([repro, "-C", root, "--store", store, "bisect", "--json", "-q", "--good",
                          f"HEAD~{a.commits - 1}", "--bad", "HEAD", "--script", script + extra_script], root)
            out = json.loads(r.stdout)
            assert out["culprit"]["subject"] == f"commit {brk}", out
            return s, out

        cold, warm, first_ms, steps = [], [], [], 0
        for k in range(a.runs):
            store = os.path.join(base, f"store-{k}")
            s, out = repro_run(store)
            cold.append(s)
            steps = out["evaluated"]
            first_ms.append(out["steps"][0]["ms"])
            # The same store again, a different script (no answer is reused).
            s, _ = repro_run(store, f" && test {k} -ge 0")
            warm.append(s)

        gm = statistics.median(g)
        print(f"{a.files} files, {a.commits} commits, transition at commit {brk}; medians of {a.runs} runs, "
              f"whole commands (the first step included)")
        print(f"{'':<52} {'total ms':>9} {'x git':>7}")
        print(f"{'git bisect run (checked-out clone)':<52} {gm * 1e3:>9.1f} {1.0:>7.2f}")
        for name, xs in [(f"repro bisect --script, new store ({steps} steps)", cold),
                         ("repro bisect --script, store of an earlier bisection", warm)]:
            m = statistics.median(xs)
            print(f"{name:<52} {m * 1e3:>9.1f} {m / gm:>7.2f}")
        print(f"repro's first step alone (new store): {statistics.median(first_ms):.1f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
