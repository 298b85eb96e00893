#!/usr/bin/env python3
"""repro bisect against git bisect run on a large tree (CPU only); prints a table.

A 50,000-file repository with 128 commits, each changing one unrelated file and the state
file a trivial script reads; one transition at a fixed place. Measured side by side on the
same repository, script and commits, 5 runs each, medians:

- `git bisect run SCRIPT` in a clone (it checks commits out into the working tree);
- `git checkout` between the commits the search visits (the floor for a whole-tree step);
- `repro bisect --script SCRIPT --paths state/` (only the named paths are written);
- `repro bisect --script SCRIPT` (the whole tree, in a worktree kept from step to step).

Per-step overhead is (wall time - time spent in the script) / steps; the script itself
(`grep`) is timed alone and subtracted for every tool alike.

Usage: python3 benches/bisect_real.py [--repro PATH] [--files N] [--runs K]
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
COMMITS = 128
BREAK = 77
SCRIPT = "grep -q fine state/s.txt"


def fast_import(root, files):
    os.makedirs(root)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, env=ENV, check=True)
    out = []
    for i in range(COMMITS):
        msg = f"commit {i}".encode()
        out.append(f"commit refs/heads/main\nmark :{i + 1}\ncommitter b <b@b> {1700000000 + i} +0000\n".encode())
        out.append(f"data {len(msg)}\n".encode() + msg + b"\n")
        if i:
            out.append(f"from :{i}\n".encode())
        changes = {"state/s.txt": ("failing" if i >= BREAK else "fine") + f" {i}\n",
                   f"data/d{(i * 37) % 100:03}/f{(i * 7919) % files:06}.txt": f"edited {i}\n"}
        if i == 0:
            changes.update({f"data/d{k % 100:03}/f{k:06}.txt": f"file {k}\n" for k in range(files)})
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


def git_bisect(root):
    """git bisect run in a clone; returns (seconds, steps, commits visited). git takes the ends'
    answers on trust; repro evaluates them too, so its step counts are two higher."""
    subprocess.run(["git", "bisect", "reset", "-q"], cwd=root, env=ENV, capture_output=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=root, env=ENV, check=True)
    subprocess.run(["git", "bisect", "start", "HEAD", f"HEAD~{COMMITS - 1}"], cwd=root, env=ENV, check=True,
                   capture_output=True)
    secs, r = timed(["git", "bisect", "run", "sh", "-c", SCRIPT], root)
    log = subprocess.run(["git", "bisect", "log"], cwd=root, env=ENV, capture_output=True, text=True).stdout
    commits = [l.split()[3] for l in log.splitlines()
               if l.startswith("git bisect good ") or l.startswith("git bisect bad ")]
    subprocess.run(["git", "bisect", "reset", "-q"], cwd=root, env=ENV, capture_output=True)
    assert f"    commit {BREAK}\n" in r.stdout, r.stdout + r.stderr
    return secs, len(commits), commits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--files", type=int, default=50000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    repro = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-bisect-real-")
    try:
        root = os.path.join(base, "repo")
        fast_import(root, a.files)
        gitrepo = os.path.join(base, "gitrepo")
        subprocess.run(["git", "clone", "-q", root, gitrepo], env=ENV, check=True)
        # The script alone.
        script_s = statistics.median(timed(["sh", "-c", SCRIPT], root)[0] for _ in range(20))

        g_total, g_steps, visited = [], 0, []
        for _ in range(a.runs):
            s, g_steps, visited = git_bisect(gitrepo)
            g_total.append(s)
        # git checkout between the commits the search visited, in the order it did.
        co = []
        for _ in range(a.runs):
            subprocess.run(["git", "checkout", "-q", visited[0]], cwd=gitrepo, env=ENV, check=True)
            t = time.perf_counter()
            for c in visited[1:]:
                subprocess.run(["git", "checkout", "-q", c], cwd=gitrepo, env=ENV, check=True)
            co.append((time.perf_counter() - t) / max(1, len(visited) - 1))
        subprocess.run(["git", "checkout", "-q", "main"], cwd=gitrepo, env=ENV, check=True)

        def repro_runs(extra):
            totals, steps, later = [], 0, []
            for k in range(a.runs):
                store = os.path.join(base, f"store-{len(extra)}-{k}")
                s, r = timed([repro, "-C", root, "--store", store, "bisect", "--json", "-q", "--good",
                              f"HEAD~{COMMITS - 1}", "--bad", "HEAD", "--script", SCRIPT, *extra], root)
                out = json.loads(r.stdout)
                assert out["culprit"]["subject"] == f"commit {BREAK}", out
                steps = out["evaluated"]
                totals.append(s)
                # Steps after the first: the first writes the worktree out once, as the
                # clone git bisect runs in was checked out once.
                later.extend(st["ms"] for st in out["steps"][1:])
            return totals, steps, later

        p_total, p_steps, p_later = repro_runs(["--paths", "state/"])
        w_total, w_steps, w_later = repro_runs([])

        def row(name, totals, steps):
            med = statistics.median(totals)
            per = (med - steps * script_s) / steps * 1e3
            print(f"{name:<44} {steps:>5} {med * 1e3:>10.1f} {per:>16.2f}")
            return per

        print(f"{a.files} files, {COMMITS} commits, transition at commit {BREAK}; medians of {a.runs} runs; "
              f"the script alone: {script_s * 1e3:.2f} ms")
        print(f"{'':<44} {'steps':>5} {'total ms':>10} {'ms/step (-script)':>16}")
        g = row("git bisect run", g_total, g_steps)
        print(f"{'git checkout between the visited commits':<44} {len(visited) - 1:>5} {'':>10} "
              f"{statistics.median(co) * 1e3:>16.2f}")
        p = row("repro bisect --script --paths state/", p_total, p_steps)
        w = row("repro bisect --script (whole tree)", w_total, w_steps)
        co_ms = statistics.median(co) * 1e3
        wl = statistics.median(w_later) - script_s * 1e3
        pl = statistics.median(p_later) - script_s * 1e3
        print(f"\nsteps after the first (median of the step records, script subtracted):")
        print(f"  repro --paths state/: {pl:.1f} ms per step (target: at most 100 ms beyond the script)")
        print(f"  repro whole tree:     {wl:.1f} ms per step = {wl / co_ms:.2f}x git checkout's {co_ms:.1f} ms "
              f"(target: at most 2x)")
        print(f"  including the first step's full write-out: --paths {p:.1f} ms, whole tree {w:.1f} ms per step; "
              f"git bisect run {g:.1f} ms per step")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
