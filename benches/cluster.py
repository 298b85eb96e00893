#!/usr/bin/env python3
"""Several devices, a Slurm cluster and shared records, on a CPU machine.

1. Devices: a 64-commit history whose "GPU work" is emulated by a command that holds its
   device for 0.2 s and prints a noisy time (commit 41 makes it 10% slower). A performance
   bisection with `--devices 0` against `--devices 0,1` (each step's processes spread over
   both devices, each judged against its own baseline). The speed-up here is that of the
   scheduling alone; benches/gpu_multi.py measures it on real GPUs.
2. Slurm: a 100-commit script history (each step sleeps 0.5 s); local `--jobs 1`, local
   `--jobs 4`, and `--executor slurm --jobs 4` (srun) on the cluster that .ci/slurm-up starts (one
   node, two fake GPUs: at most two jobs run at once).
3. Records through git: push the first clone's records to a bare remote, pull them into a
   fresh clone, and repeat the bisection there.

Usage: python3 benches/cluster.py [--repro target/release/repro] [--runs 3]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="b",
           GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")

DEVICE_CMD = ("sleep 0.2; r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' '); "
              "awk -v base=$(cat base.txt) -v r=$r 'BEGIN { printf \"{\\\"t\\\": %.4f}\\n\", base * (1 + (r / 65535 - 0.5) * 0.01) }'")


def git(root, *args):
    subprocess.run(["git", *args], cwd=root, env=ENV, check=True, capture_output=True)


def history(base, name, n, files):
    root = os.path.join(base, name)
    os.makedirs(root)
    git(root, "init", "-q", "-b", "main")
    for i in range(1, n + 1):
        for path, text in dict(files(i), **{"NOTES.md": f"note {i}\n"}).items():
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"commit {i}")
    return root


def repro(exe, root, args, store=None):
    cmd = [exe, "-C", root] + (["--store", store] if store else []) + args
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    secs = time.time() - t
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError:
        out = None
    return r.returncode, out, r.stderr, secs


def slurm_up():
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        return r.returncode == 0 and r.stdout.strip() != ""
    except FileNotFoundError:
        return False


def row(cells, widths):
    print("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    exe = os.path.abspath(a.repro)
    base = tempfile.mkdtemp(prefix="repro-cluster-bench-")
    widths = [34, 10, 10, 10, 9]
    try:
        print("1. performance bisection, 64 commits, emulated devices (0.2 s per process, 10 processes per step)")
        row(["devices", "culprit", "evaluated", "median s", "speed-up"], widths)
        dev = history(base, "devices", 64, lambda i: {"base.txt": "110\n" if i >= 41 else "100\n"})
        args = ["bisect", "--json", "--good", "HEAD~63", "--bad", "HEAD", "--mode", "bench", "--command", DEVICE_CMD,
                "--metric", "json:t", "--threshold", "5%"]
        medians = {}
        for devices in ["0", "0,1"]:
            times, culprits, evals = [], set(), set()
            for run in range(a.runs):
                code, out, err, secs = repro(exe, dev, args + ["--devices", devices], os.path.join(base, f"s-{devices}-{run}"))
                culprits.add(out["culprit"]["subject"] if out and out.get("culprit") else f"exit {code}")
                evals.add(out["evaluated"] if out else "-")
                times.append(secs)
            medians[devices] = statistics.median(times)
            row([f"--devices {devices}", "/".join(sorted(culprits)), "/".join(map(str, sorted(evals))),
                 f"{medians[devices]:.1f}", f"{medians['0'] / medians[devices]:.2f}x"], widths)

        print("\n2. script bisection, 100 commits, 0.5 s per step")
        row(["executor", "culprit", "evaluated", "median s", "vs jobs 1"], widths)
        scr = history(base, "script", 100, lambda i: {"state.txt": "broken\n" if i >= 73 else "fine\n"})
        sargs = ["bisect", "--json", "--good", "HEAD~99", "--bad", "HEAD", "--script", "sleep 0.5; grep -q fine state.txt"]
        cases = [("local --jobs 1", ["--jobs", "1"]), ("local --jobs 4", ["--jobs", "4"])]
        if slurm_up():
            cases.append(("slurm --jobs 4 (2 fake GPUs)", ["--executor", "slurm", "--jobs", "4"]))
        else:
            print("   (no Slurm cluster answers: the slurm row is left out; .ci/slurm-up starts one)")
        ref = None
        for label, extra in cases:
            times, culprits, evals = [], set(), set()
            for run in range(a.runs):
                code, out, err, secs = repro(exe, scr, sargs + extra, os.path.join(base, f"s-{label.split()[0]}-{extra[-1]}-{run}"))
                culprits.add(out["culprit"]["subject"] if out and out.get("culprit") else f"exit {code}: {err.strip()[-80:]}")
                evals.add(out["evaluated"] if out else "-")
                times.append(secs)
            m = statistics.median(times)
            ref = ref or m
            row([label, "/".join(sorted(culprits)), "/".join(map(str, sorted(evals))), f"{m:.1f}", f"{ref / m:.2f}x"], widths)

        print("\n3. records through a git remote (the 100-commit script bisection)")
        row(["step", "result", "", "seconds", ""], widths)
        remote = os.path.join(base, "remote.git")
        git(base, "init", "-q", "--bare", "-b", "main", remote)
        git(scr, "remote", "add", "origin", remote)
        git(scr, "push", "-q", "origin", "main")
        store_a = os.path.join(scr, ".repro")
        code, out, err, secs = repro(exe, scr, sargs, store_a)
        row(["bisect in clone A", out["culprit"]["subject"] if out else err[-60:], f"{out['evaluated'] if out else '-'} run", f"{secs:.2f}", ""], widths)
        code, out, err, secs = repro(exe, scr, ["push", "--json"])
        n = sum(out["summary"]["records"].values()) if out else err[-60:]
        row(["repro push", f"{n} records", "", f"{secs:.2f}", ""], widths)
        clone = os.path.join(base, "clone-b")
        git(base, "clone", "-q", remote, clone)
        code, out, err, secs = repro(exe, clone, ["pull", "--json"])
        n = sum(out["summary"]["records"].values()) if out else err[-60:]
        row(["repro pull (fresh clone B)", f"{n} records", "", f"{secs:.2f}", ""], widths)
        code, out, err, secs = repro(exe, clone, sargs)
        row(["the same bisection in clone B", out["culprit"]["subject"] if out else err[-60:], f"{out['evaluated'] if out else '-'} run", f"{secs:.2f}", ""], widths)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
