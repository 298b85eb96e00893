#!/usr/bin/env python3
"""`repro bench --command` side by side with hyperfine on the same commands, and the cost of
`repro compare`, for this build of repro and, optionally, an earlier one (`--before`).

For each command, each tool runs ROUNDS benchmarks of RUNS runs (after WARMUP untimed runs;
an earlier repro without `--warmup N` runs none). The table gives the median over rounds of
each tool's reported median time of the command, the spread of those medians across rounds
(max/min - 1), and the median wall time of one whole benchmark invocation. hyperfine runs
with its defaults (through a shell whose start-up it measures and subtracts); repro runs
`sh -c CMD` and subtracts nothing, so for commands of a few milliseconds its figure includes
the shell's start (about 1 ms).

The compare section times `repro compare A B` on two recorded results (30 samples each) and,
for this build only, on two nvbench `--jsonbin` files of 10,000 samples each. Usage:

    python3 benches/hyperfine.py [--repro PATH] [--before PATH] [--runs N] [--rounds R]
"""
import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

COMMANDS = ["true", "sleep 0.02", "python3 -c pass"]


def wall(argv, cwd):
    start = time.perf_counter()
    out = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()}")
    return took, out.stdout


def hyperfine_median(path):
    return json.load(open(path))["results"][0]["median"] * 1e3


def repro_median(path):
    r = json.load(open(path))["results"][0]
    if "times" in r:  # hyperfine's layout (this build): seconds
        return r["median"] * 1e3
    return r["median"]  # the earlier layout: the result's unit (ms for a timed command)


def repo(tmp):
    root = os.path.join(tmp, "repo")
    os.makedirs(root)
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(["git", "init", "-q", root], check=True, env=env)
    subprocess.run(["git", "-C", root, "-c", "user.name=b", "-c", "user.email=b@b", "commit",
                    "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    return root


def nvbench_file(root, name, center_us, n, seed):
    import random
    rng = random.Random(seed)
    os.makedirs(os.path.join(root, name + ".json-bin"), exist_ok=True)
    with open(os.path.join(root, name + ".json-bin", "0.bin"), "wb") as f:
        for _ in range(n):
            f.write(struct.pack("<f", center_us * (1 + rng.uniform(-0.01, 0.01)) * 1e-6))
    doc = {"devices": [{"id": 0, "name": "GPU"}], "benchmarks": [{"name": "copy", "states": [{
        "name": "Device=0", "device": 0, "axis_values": [], "is_skipped": False,
        "summaries": [{"tag": "nv/json/bin:nv/cold/sample_times",
                       "data": [{"name": "filename", "type": "string", "value": name + ".json-bin/0.bin"}]}]}]}]}
    json.dump(doc, open(os.path.join(root, name + ".json"), "w"))
    return name + ".json"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--before", default=None, help="an earlier repro binary to compare with")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not shutil.which("hyperfine"):
        sys.exit("hyperfine is not installed (apt-get install hyperfine)")
    repro = os.path.abspath(args.repro)
    before = os.path.abspath(args.before) if args.before else None
    tools = [("hyperfine", None), ("repro (this build)", repro)]
    if before:
        tools.append(("repro (before)", before))

    with tempfile.TemporaryDirectory() as tmp:
        root = repo(tmp)
        env_cache = os.path.join(tmp, "cache")
        os.environ["XDG_CACHE_HOME"] = env_cache
        rows = []
        for cmd in COMMANDS:
            for label, binary in tools:
                medians, walls = [], []
                for r in range(args.rounds):
                    out = os.path.join(tmp, f"out-{r}.json")
                    if binary is None:
                        argv = ["hyperfine", "--style", "none", "--runs", str(args.runs),
                                "--warmup", str(args.warmup), "--export-json", out, cmd]
                    else:
                        argv = [binary, "-q", "--store", os.path.join(tmp, "store-" + label[7:11]),
                                "bench", "--command", cmd, "--runs", str(args.runs), "--export-json", out]
                        if binary == repro:
                            argv += ["--warmup", str(args.warmup)]
                    took, _ = wall(argv, root)
                    walls.append(took * 1e3)
                    medians.append(hyperfine_median(out) if binary is None else repro_median(out))
                m = statistics.median(medians)
                spread = max(medians) / min(medians) - 1 if min(medians) > 0 else None
                rows.append((cmd, label, m, spread, statistics.median(walls)))

        print(f"command benches: {args.rounds} rounds of {args.runs} runs "
              f"(+{args.warmup} warm-up runs where supported); medians over rounds\n")
        print("| command | tool | median of the command | spread across rounds | wall time of one benchmark |")
        print("| --- | --- | --- | --- | --- |")
        for cmd, label, m, spread, w in rows:
            sp = "n/a (a median <= 0)" if spread is None else f"{spread * 100:.1f}%"
            print(f"| `{cmd}` | {label} | {m:.2f} ms | {sp} | {w:.0f} ms |")

        # compare: two recorded results of 30 samples each.
        print("\ncompare (median of 20 invocations)\n")
        print("| case | tool | time |")
        print("| --- | --- | --- |")
        for label, binary in tools[1:]:
            store = os.path.join(tmp, "cmp-" + label[7:11])
            ids = []
            for ms in (10, 11):
                _, out = wall([binary, "--json", "--store", store, "bench", "--command",
                               f"echo '{{\"ms\": {ms}}}'", "--metric", "json:ms", "--unit", "ms",
                               "--runs", "30"], root)
                ids.append(json.loads(out)["results"][0]["id"])
            times = [wall([binary, "--store", store, "compare", ids[0], ids[1]], root)[0] * 1e3
                     for _ in range(20)]
            print(f"| two results, 30 samples each | {label} | {statistics.median(times):.1f} ms |")
        a = nvbench_file(root, "base", 10.0, 10000, 1)
        b = nvbench_file(root, "cand", 10.5, 10000, 2)
        times = []
        for _ in range(20):
            start = time.perf_counter()
            code = subprocess.run([repro, "compare", a, b, "--fail-on", "slower"], cwd=root,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
            times.append((time.perf_counter() - start) * 1e3)
        print(f"| two nvbench files, 10,000 samples each, `--fail-on slower` (exit {code}) "
              f"| repro (this build) | {statistics.median(times):.1f} ms |")
        if before:
            code = subprocess.run([before, "compare", a, b], cwd=root, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode
            print(f"| two nvbench files | repro (before) | not supported (exit {code}) |")


if __name__ == "__main__":
    main()
