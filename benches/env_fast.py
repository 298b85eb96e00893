#!/usr/bin/env python3
"""`repro env check` and a warm `repro build` cache hit, two repro binaries side by side.

Each case runs as a fresh process, the binaries interleaved run by run (so load drifts hit
both alike), each binary with a cache directory of its own (XDG_CACHE_HOME) after warm-up
runs that fill its per-boot caches; prints medians, min and max in ms, and each binary's
warm `env check -v` probe line (where the time goes). Usage:

    python3 benches/env_fast.py --before OLD_BINARY --after NEW_BINARY [--lock FILE] [--runs N]

A checkout copied without git has stale stat data in its index, which makes every check hash
every tracked file (repro never writes the index): where the script finds that, it times one
row as found, then refreshes the index (`git update-index --refresh`, as `git status` would).

The build case builds recipes/vector_add.toml into a temporary store once (untimed), then
times `repro build vector_add` hits, then the same in the checkout's default store (`.repro`,
which repro checks the repository does not track); it is left out where the build fails (no
NVRTC).
Two floor rows follow: `/bin/true` (what this script's fork, exec and wait cost) and
`repro --version` (repro's own start-up: loading and relocating the binary, parsing the
command line); `--hello PATH` adds a third, a hello-world binary (what starting any Rust
program costs: the floor of a build hit). `--also LABEL=PATH` (repeatable) times more binaries
beside the two. `--no-live` adds env check rows against a copy of the lockfile whose fields
NVML answers live (ECC, persistence, MIG, power limit) are `ignore`d: the check without NVML.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time


# Each binary's own cache directory (set in main): two binaries share no per-boot cache
# file, whose schema or key (the binary is part of it) the other would not read, so each
# case is timed warm, as a user of that one binary runs it.
CACHES = {}


def once(argv):
    env = dict(os.environ, XDG_CACHE_HOME=CACHES[argv[0]]) if argv[0] in CACHES else None
    t = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return (time.perf_counter() - t) * 1e3, r.returncode


def interleaved(cases, runs):
    """cases: {name: argv}; returns {name: [ms]} with the cases alternating each run."""
    for argv in cases.values():
        for _ in range(3):
            once(argv)
    out = {k: [] for k in cases}
    for _ in range(runs):
        for k, argv in cases.items():
            out[k].append(once(argv)[0])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--lock", default="lockfiles/h200.toml")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--also", action="append", default=[], metavar="LABEL=PATH")
    ap.add_argument("--hello", metavar="PATH")
    ap.add_argument("--no-live", action="store_true")
    a = ap.parse_args()
    bins = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    for spec in a.also:
        label, _, path = spec.partition("=")
        bins[label] = os.path.abspath(path)
    caches = tempfile.mkdtemp(prefix="repro-env-fast-cache-")
    for k, b in bins.items():
        CACHES.setdefault(b, os.path.join(caches, k))
    for label, b in bins.items():
        env = dict(os.environ, XDG_CACHE_HOME=CACHES[b])
        for _ in range(2):  # the second run is warm
            r = subprocess.run([b, "-v", "env", "check", "--lock", a.lock], capture_output=True,
                               text=True, env=env)
        line = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("checked in")]
        print(f"{label}: {line[-1] if line else '(no -v line)'}")
    rows = {}
    # A checkout copied without git (rsync, a container's COPY, this script's GPU machine)
    # has stale stat data in its index: repro never writes the index, so libgit2 hashes
    # every tracked file at each check until a git command (`git status`) refreshes it.
    # Timed once as found, then refreshed for the rows that follow.
    stale = subprocess.run(["git", "diff-files", "--name-only"], capture_output=True, text=True)
    if stale.returncode == 0 and stale.stdout.strip():
        n = len(stale.stdout.split())
        rows.update(interleaved({f"repro env check, {n} stale index entries (after)":
                                 [bins["after"], "env", "check", "--lock", a.lock]}, a.runs))
        subprocess.run(["git", "update-index", "-q", "--refresh"])
        print(f"the index had stale stat data for {n} files: refreshed (git update-index --refresh)")
    rows.update(interleaved({f"repro env check ({k})": [b, "env", "check", "--lock", a.lock]
                             for k, b in bins.items()}, a.runs))
    if a.no_live:
        live = ("ecc", "persistence-mode", "mig-mode", "power-limit-w")
        quiet = tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False)
        with open(a.lock) as f:
            for line in f:
                if any(line.startswith(f'"gpu.{n}"') for n in live):
                    line = line.replace('policy = "warn"', 'policy = "ignore"').replace(
                        'policy = "exact"', 'policy = "ignore"')
                quiet.write(line)
        quiet.close()
        rows.update(interleaved({f"env check, no live NVML field ({k})":
                                 [b, "env", "check", "--lock", quiet.name]
                                 for k, b in bins.items()}, a.runs))
        os.unlink(quiet.name)
    store = tempfile.mkdtemp(prefix="repro-env-fast-")
    try:
        built = all(once([b, "--store", os.path.join(store, k), "build", "vector_add"])[1] == 0
                    for k, b in bins.items())
        # A warm hit is one whose inputs and records have stood for a while: repro answers
        # a hit from its stamp only where every file it read changed at least 2 s before
        # (younger stat data may hide a change; see src/foundation/stamp.rs).
        time.sleep(2.5)
        if built:
            rows.update(interleaved({f"repro build vector_add, cache hit ({k})":
                                     [b, "--store", os.path.join(store, k), "build", "vector_add"]
                                     for k, b in bins.items()}, a.runs))
            # The default store, `.repro` at the repository's root: repro checks that the
            # repository does not track it (the index is read, or its answer cached).
            defaults = all(once([b, "build", "vector_add"])[1] == 0 for b in bins.values())
            if defaults:
                time.sleep(2.5)
                rows.update(interleaved({f"the same hit, default store .repro ({k})":
                                         [b, "build", "vector_add"] for k, b in bins.items()}, a.runs))
        else:
            print("repro build vector_add failed here (no NVRTC?): build rows left out")
    finally:
        shutil.rmtree(store, ignore_errors=True)
    # What starting any process costs from here (Python's fork, exec and wait are in every
    # row above), and what starting repro itself costs: the floor under every repro row.
    floors = {"/bin/true (process start-up)": ["/bin/true"]}
    if a.hello:
        floors["hello-world binary (--hello)"] = [os.path.abspath(a.hello)]
    floors.update({f"repro --version ({k})": [b, "--version"] for k, b in bins.items()})
    rows.update(interleaved(floors, a.runs))
    print(f"\n{'case':52} {'runs':>4} {'median ms':>10} {'min':>8} {'max':>8}")
    for name, xs in rows.items():
        print(f"{name:52} {len(xs):>4} {statistics.median(xs):10.1f} {min(xs):8.1f} {max(xs):8.1f}")
    shutil.rmtree(caches, ignore_errors=True)


if __name__ == "__main__":
    main()
