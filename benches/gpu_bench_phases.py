#!/usr/bin/env python3
"""#29 goals 1 and 3 on the GPU machine: before/after tables for `repro bench` (run there).

1. Wall time of `repro bench vector_add` at one sweep point (n = 64M and n = 1M floats), in
   separate invocations, against the kernel's own timed runs (the sum of its samples times
   the launches per sample): goal 1 is at most 1 s beyond them. For a binary that reports
   them (`--json` results carry `phases`), the phase table of its last invocation. Then the
   recipe's whole sweep (both points in one invocation), the binaries in turn.
2. A small kernel (vector_add over 1M floats, about 7.6 us on an H200): the median of N
   separate invocations per mode (cold, graph), their coefficient of variation (goal 3:
   at most 0.2%), the launches per sample, the empty-graph cost subtracted, and the
   resolution (CUDA events tick in 0.5 us at best: tick / (launches x median)).

3. With --investigate (the last binary only): what moves the small kernel's median between
   invocations. Graph mode under the runner's timing settings (REPRO_TIMING_PLACEMENTS: the
   buffers copied to K placements, sampled in turn; REPRO_TIMING_SETTLE=1: warm up with graph
   samples until two windows' medians agree; REPRO_TIMING_GRAPH_US: the sample's length;
   REPRO_TIMING_GAP_MS: the GPU left idle before the samples),
   each over N invocations, with the figures each job appends to REPRO_TIMING_DIAG: the
   spread of the placements' medians inside one invocation, the first samples' median
   against the whole (clock ramp), the empty graph's cost and its share of a sample, the SM
   clock before and after sampling.

4. With --placements 8,16,32: graph mode's CV of medians by the number of buffer placements
   it samples the fastest of (REPRO_TIMING_PLACEMENTS); with --graph-us 5000,20000, by the
   sample's length (REPRO_TIMING_GRAPH_US); with --variants "NAME:K=V,K=V;NAME:...", under
   each named set of the runner's settings (an empty set is the defaults). Invocations
   interleaved.

5. With --worker-jobs N: one point (n = 1M) as N jobs of one GPU worker (a sweep over a
   parameter the launch ignores), in graph and cold mode: the first job's median against the
   later jobs' (a reused worker must time every job alike; #29 found the later ones 7% slower
   while jobs launched on a created stream), and the later jobs' phases (the median of each,
   for a binary that reports them): what a bisection's run costs beyond its sampling.

7. With --interleaved N: the small kernel's point (graph mode, or --interleaved-mode), one
   invocation of each binary in turn, N of each: each binary's CV of medians and its variance
   over the first binary's (an F ratio), so that two timing methods meet the same GPU.

With --cpu-path, table 1 also runs the last binary with REPRO_GPU_HELPERS=0 (inputs and the
check on the CPU, through its pinned staging buffers).

Usage: python3 benches/gpu_bench_phases.py --binary before=PATH --binary after=PATH [--runs N]
       [--small-runs N] [--investigate] [--cpu-path] [--gap SECONDS] [--placements 8,16]
       [--graph-us 5000,20000] [--variants SPEC] [--worker-jobs N] [--interleaved N]
Each binary runs in a throwaway project holding only vector_add (no toolchain pin: NVRTC
from the machine's CUDA), with its own store.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TICK_US = 0.5  # cuEventElapsedTime's resolution, as NVIDIA documents it


def project(base):
    root = os.path.join(base, "proj")
    os.makedirs(os.path.join(root, "recipes"))
    os.makedirs(os.path.join(root, "kernels"))
    shutil.copy(os.path.join(ROOT, "recipes/vector_add.toml"), os.path.join(root, "recipes"))
    for k in ["vector_add.cu", "common.cuh"]:
        shutil.copy(os.path.join(ROOT, "kernels", k), os.path.join(root, "kernels"))
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="b",
               GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "vector_add"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True)
    return root


# Each binary's own cache directory (XDG_CACHE_HOME, set in main): binaries used in turn
# would otherwise share per-boot cache files (device facts, roofline peaks) whose key names
# the binary, as two versions of repro on one machine do; each is timed as a user of that
# one binary runs it.
CACHES = {}


def bench(repro, root, store, *args, env=None, recipe="vector_add"):
    t = time.perf_counter()
    own = {"XDG_CACHE_HOME": CACHES[repro]} if repro in CACHES else {}
    r = subprocess.run([repro, "-C", root, "--store", store, "bench", recipe, "--json", *args],
                       capture_output=True, text=True, env=dict(os.environ, **own, **(env or {})))
    wall = time.perf_counter() - t
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"{repro} bench {recipe} {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return wall, out


def kernel_s(res):
    return sum(res.get("samples") or []) * (res.get("launches-per-sample") or 1) / 1e6


def table1(binaries, base, runs, cpu_path, gap):
    print("\n1. one sweep point of vector_add: wall time against the kernel's own timed runs"
          + (f", {gap:g} s idle before each invocation" if gap else ", invocations back to back"))
    print(f"{'binary':8} {'n':>9} {'run':>3} {'verdict':7} {'samples':>7} {'wall s':>7} {'kernel s':>8} {'beyond s':>8}")
    summary = {}
    variants = [(label, repro, {}) for label, repro in binaries]
    if cpu_path:
        variants.append((binaries[-1][0] + "-cpu", binaries[-1][1], {"REPRO_GPU_HELPERS": "0"}))
    for label, repro, env in variants:
        root = project(os.path.join(base, label))
        store = os.path.join(base, label, "store")
        bench(repro, root, store, "--param", "n=1024", env=env)  # builds once, outside the timings
        for n in [67108864, 1048576]:
            beyond = []
            last = None
            for run in range(runs):
                time.sleep(gap)
                wall, out = bench(repro, root, store, "--param", f"n={n}", env=env)
                res = out["results"][0]
                k = kernel_s(res)
                beyond.append(wall - k)
                last = (out, res)
                print(f"{label:8} {n:9} {run:3} {res['verdict']:7} {len(res.get('samples') or []):7} {wall:7.2f} {k:8.3f} {wall - k:8.2f}", flush=True)
            summary[(label, n)] = statistics.median(beyond)
            out, res = last
            if res.get("phases"):
                print(f"   phases of the last run (ms): " + ", ".join(
                    f"{p['name']} {p['ms']:.0f}" + (f" [{p['path']}]" if p.get("path") else "")
                    for p in out.get("phases", []) + res["phases"]))
    print("\nmedian time beyond the kernel's timed runs (goal: <= 1 s)")
    for (label, n), v in summary.items():
        print(f"  {label:8} n={n:<9} {v:6.2f} s")
    # The recipe's whole sweep (both points in one invocation), the binaries taken in turn
    # run by run so that a drift of the machine touches each alike.
    walls = {label: [] for label, _, _ in variants}
    for _ in range(runs):
        for label, repro, env in variants:
            root = os.path.join(base, label, "proj")
            store = os.path.join(base, label, "store")
            time.sleep(gap)
            wall, _ = bench(repro, root, store, env=env)
            walls[label].append(wall)
    print(f"\nthe whole sweep (n = 1M and 64M in one `repro bench vector_add`), {runs} runs")
    for label, xs in walls.items():
        print(f"  {label:8} median {statistics.median(xs):6.2f} s  (" + " ".join(f"{x:.2f}" for x in xs) + ")")


def drift(xs):
    """Whether the invocations' medians wander or scatter: the CV from successive differences
    (von Neumann's estimator, blind to a slow drift), the lag-1 autocorrelation, and the
    medians in the order they were taken."""
    if len(xs) < 3:
        return
    mean = statistics.mean(xs)
    succ = (sum((b - a) ** 2 for a, b in zip(xs, xs[1:])) / (2 * (len(xs) - 1))) ** 0.5 / mean
    dev = [x - mean for x in xs]
    r1 = sum(a * b for a, b in zip(dev, dev[1:])) / sum(d * d for d in dev) if any(dev) else 0.0
    print(f"{'':15} CV from successive differences {100 * succ:.3f}%, lag-1 autocorrelation {r1:+.2f};"
          f" in order: " + " ".join(f"{x:.4f}" for x in xs), flush=True)


def table2(binaries, base, runs):
    print(f"\n2. a small kernel (vector_add, n = 1M): medians of {runs} separate invocations")
    print(f"{'binary':8} {'mode':6} {'median us':>10} {'min':>8} {'max':>8} {'CV':>7} {'launches':>8} {'overhead us':>11} {'resolution':>10}")
    for label, repro in binaries:
        root = os.path.join(base, label, "proj")
        store = os.path.join(base, label, "store")
        for mode in ["cold", "graph"]:
            meds, launches, over = [], 1, None
            for _ in range(runs):
                _, out = bench(repro, root, store, "--param", "n=1048576", "--mode", mode)
                res = out["results"][0]
                meds.append(res["summary"]["median"])
                launches = res.get("launches-per-sample") or 1
                over = res.get("graph-overhead-us")
            m = statistics.median(meds)
            cv = statistics.stdev(meds) / statistics.mean(meds) if len(meds) > 1 else float("nan")
            reso = TICK_US / (launches * m)
            print(f"{label:8} {mode:6} {m:10.4f} {min(meds):8.4f} {max(meds):8.4f} {100 * cv:6.3f}% {launches:8} "
                  f"{'-' if over is None else f'{over:.3f}':>11} {100 * reso:9.3f}%", flush=True)
            drift(meds)


def table3(binaries, base, runs):
    label, repro = binaries[-1]
    root = os.path.join(base, label, "proj")
    store = os.path.join(base, label, "store")
    print(f"\n3. what moves the small kernel's median ({label}, vector_add n = 1M, graph mode, {runs} invocations each)")
    print(f"{'variant':24} {'median us':>9} {'CV':>7} {'in-run spread':>13} {'early/all':>9} {'launches':>8} "
          f"{'overhead us':>11} {'its CV':>7} {'share':>7} {'SM MHz before-after':>19}")
    variants = [
        ("default", "graph", {}),
        ("1 placement", "graph", {"REPRO_TIMING_PLACEMENTS": "1"}),
        ("no settling", "graph", {"REPRO_TIMING_SETTLE": "0"}),
        ("1 placement, no settle", "graph", {"REPRO_TIMING_PLACEMENTS": "1", "REPRO_TIMING_SETTLE": "0"}),
        ("20 ms idle before", "graph", {"REPRO_TIMING_GAP_MS": "20"}),
        ("hot", "hot", {}),
    ]
    for name, mode, env in variants:
        diag = os.path.join(base, f"diag-{len(name)}-{abs(hash(name))}.jsonl")
        meds, series = [], []
        for _ in range(runs):
            _, out = bench(repro, root, store, "--param", "n=1048576", "--mode", mode,
                           env=dict(env, REPRO_TIMING_DIAG=diag))
            res = out["results"][0]
            meds.append(res["summary"]["median"])
            xs = res.get("samples") or []
            # The run's samples in five consecutive parts: each part's median over the whole's.
            k = max(1, len(xs) // 5)
            series.append(" ".join(f"{statistics.median(xs[i:i + k]) / meds[-1]:.3f}"
                                   for i in range(0, k * 5, k) if xs[i:i + k]))
        lines = [json.loads(l) for l in open(diag)] if os.path.exists(diag) else []
        cv = statistics.stdev(meds) / statistics.mean(meds) if len(meds) > 1 else float("nan")
        spread = [(max(d["placement-medians"]) - min(d["placement-medians"])) / d["median"]
                  for d in lines if d.get("median")]
        early = [d["early-median"] / d["median"] for d in lines if d.get("median")]
        over = [statistics.median(d["overhead-costs"]) for d in lines if d.get("overhead-costs")]
        share = [o / (d["launches"] * d["median"]) for o, d in zip(over, lines) if d.get("median")]
        clocks = [d["sm-clock"] for d in lines if d.get("sm-clock")]
        ocv = statistics.stdev(over) / statistics.mean(over) if len(over) > 1 else float("nan")
        clk = f"{min(c[0] for c in clocks)}-{max(c[0] for c in clocks)}/{min(c[1] for c in clocks)}-{max(c[1] for c in clocks)}" if clocks else "-"
        print(f"{name:24} {statistics.median(meds):9.4f} {100 * cv:6.3f}% {100 * statistics.mean(spread or [0]):12.3f}% "
              f"{statistics.mean(early or [0]):9.4f} {lines[-1]['launches'] if lines else '-':>8} "
              f"{statistics.mean(over or [0]):11.3f} {100 * ocv:6.2f}% {100 * statistics.mean(share or [0]):6.3f}% {clk:>19}",
              flush=True)
        print("   medians: " + " ".join(f"{m:.4f}" for m in meds))
        print("   fifths of each run, over its median: " + " | ".join(series))
        print("   throttle reasons after, memory clock: " + " ".join(
            f"{d.get('throttle-reasons-after')}/{d.get('memory-clock-after')}" for d in lines))


def table4(binaries, base, runs, variants, title):
    """Graph mode's CV of medians under each (name, settings) of `variants` (the runner's
    REPRO_TIMING_* settings; empty settings are the defaults), invocations interleaved."""
    label, repro = binaries[-1]
    root = os.path.join(base, label, "proj")
    store = os.path.join(base, label, "store")
    print(f"\n4. graph mode by {title} ({label}, vector_add n = 1M, {runs} invocations each, interleaved)")
    meds = {name: [] for name, _ in variants}
    launches = {}
    for _ in range(runs):
        for name, env in variants:
            _, out = bench(repro, root, store, "--param", "n=1048576", "--mode", "graph", env=env)
            res = out["results"][0]
            meds[name].append(res["summary"]["median"])
            launches[name] = res.get("launches-per-sample")
    print(f"{title:14} {'median us':>9} {'min':>8} {'max':>8} {'CV':>7} {'launches':>8}  settings")
    for name, env in variants:
        xs = meds[name]
        cv = statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else float("nan")
        print(f"{name:14} {statistics.median(xs):9.4f} {min(xs):8.4f} {max(xs):8.4f} {100 * cv:6.3f}% "
              f"{launches[name] or '-':>8}  {' '.join(f'{k}={v}' for k, v in env.items()) or 'defaults'}", flush=True)


def table6(binaries, base, runs, min_times):
    """Goal 3: whether a longer sampling averages the spread away. For each --min-time, `runs`
    invocations of graph mode (n = 1M), the settings taken in turn; the CV of their medians,
    and inside each invocation the CV of the medians of eight consecutive blocks of its
    samples (the mean over invocations): a spread that moves inside a run (blocks as far
    apart as invocations) is averaged by sampling longer, one each process draws is not."""
    label, repro = binaries[-1]
    root = os.path.join(base, label, "proj")
    store = os.path.join(base, label, "store")
    print(f"\n6. sampling time ({label}, vector_add n = 1M, graph mode, {runs} invocations each, in turn)")
    print(f"{'--min-time':>10} {'median us':>9} {'CV':>7} {'CV of 8 blocks in a run':>23} {'samples':>8}")
    meds = {t: [] for t in min_times}
    blocks = {t: [] for t in min_times}
    counts = {t: [] for t in min_times}
    for _ in range(runs):
        for t in min_times:
            _, out = bench(repro, root, store, "--param", "n=1048576", "--mode", "graph", "--min-time", t)
            res = out["results"][0]
            meds[t].append(res["summary"]["median"])
            xs = res.get("samples") or []
            counts[t].append(len(xs))
            k = len(xs) // 8
            if k >= 3:
                bm = [statistics.median(xs[i * k:(i + 1) * k]) for i in range(8)]
                blocks[t].append(statistics.stdev(bm) / statistics.mean(bm))
    for t in min_times:
        xs = meds[t]
        cv = statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else float("nan")
        b = statistics.mean(blocks[t]) if blocks[t] else float("nan")
        print(f"{t:>10} {statistics.median(xs):9.4f} {100 * cv:6.3f}% {100 * b:22.3f}% "
              f"{statistics.median(counts[t]):8.0f}", flush=True)
        drift(xs)


def table5(binaries, base, runs, jobs):
    """The same point as `jobs` jobs of one worker (a sweep over a parameter the launch
    ignores): each job's median against the first job's, per mode and binary."""
    print(f"\n5. one point as {jobs} jobs of one worker (vector_add n = 1M; a sweep over an unused "
          f"parameter), {runs} invocations: later jobs' medians over the first job's")
    print(f"{'binary':8} {'mode':6} {'first us':>9} {'later us':>9} {'later/first':>11} {'later min-max':>17}")
    for label, repro in binaries:
        root = os.path.join(base, label, "proj")
        store = os.path.join(base, label, "store")
        with open(os.path.join(root, "recipes/vector_add.toml")) as f:
            recipe = f.read()
        reps = ", ".join(str(i) for i in range(1, jobs + 1))
        recipe = recipe.replace("n = [1048576, 67108864]", f"n = [1048576]\nrep = [{reps}]")
        recipe = recipe.replace('grid = "ceil_div(n, 1024)"', 'grid = "ceil_div(n, 1024) + 0 * rep"')
        with open(os.path.join(root, "recipes/va_jobs.toml"), "w") as f:
            f.write(recipe)
        for mode in ["graph", "cold"]:
            first, later = [], []
            phases = {}  # the later jobs' phases: name -> [ms]
            for _ in range(runs):
                _, out = bench(repro, root, store, "--mode", mode, recipe="va_jobs")
                meds = [x["summary"]["median"] for x in out["results"]]
                first.append(meds[0])
                later += meds[1:]
                for x in out["results"][1:]:
                    job = {}
                    for p in x.get("phases") or []:
                        job[p["name"]] = job.get(p["name"], 0.0) + p["ms"]
                    for name, ms in job.items():
                        phases.setdefault(name, []).append(ms)
            f0, l0 = statistics.median(first), statistics.median(later)
            print(f"{label:8} {mode:6} {f0:9.4f} {l0:9.4f} {l0 / f0:11.4f} {min(later):8.4f}-{max(later):.4f}", flush=True)
            if phases:
                print("         later jobs' phases, median ms: " + ", ".join(
                    f"{n} {statistics.median(ms):.1f}" for n, ms in phases.items()), flush=True)


def table7(binaries, base, runs, mode):
    """The small kernel's point, one invocation of each binary in turn (so that whatever the
    GPU does over the minutes of the run falls on every binary alike): each binary's CV of
    medians, and the ratio of its variance to the first binary's."""
    print(f"\n7. a small kernel (vector_add, n = 1M, {mode} mode): {runs} invocations of each binary, "
          f"taken in turn")
    meds = {label: [] for label, _ in binaries}
    for _ in range(runs):
        for label, repro in binaries:
            root = os.path.join(base, label, "proj")
            store = os.path.join(base, label, "store")
            _, out = bench(repro, root, store, "--param", "n=1048576", "--mode", mode)
            meds[label].append(out["results"][0]["summary"]["median"])
    print(f"{'binary':8} {'median us':>10} {'min':>8} {'max':>8} {'CV':>7} {'variance / first':>16}")
    first = statistics.variance(meds[binaries[0][0]])
    for label, _ in binaries:
        xs = meds[label]
        cv = statistics.stdev(xs) / statistics.mean(xs)
        ratio = statistics.variance(xs) / first if first else float("nan")
        print(f"{label:8} {statistics.median(xs):10.4f} {min(xs):8.4f} {max(xs):8.4f} {100 * cv:6.3f}% "
              f"{ratio:16.2f}", flush=True)
        drift(xs)


def one_setting(var, values):
    """Variants that differ in one setting: `var` at each of the comma-separated `values`."""
    return [(v, {var: v}) for v in values.split(",")]


def named_settings(spec):
    """Variants from `NAME:K=V,K=V;NAME:...`."""
    variants = []
    for part in spec.split(";"):
        name, _, envs = part.partition(":")
        variants.append((name, dict(kv.split("=", 1) for kv in envs.split(",") if kv)))
    return variants


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True, help="LABEL=PATH")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small-runs", type=int, default=5)
    ap.add_argument("--investigate", action="store_true")
    ap.add_argument("--cpu-path", action="store_true")
    ap.add_argument("--skip-table1", action="store_true")
    ap.add_argument("--gap", type=float, default=0.0,
                    help="seconds of idle before each invocation of table 1 (0: back to back, where "
                         "an invocation's start can overlap the end of the one before)")
    ap.add_argument("--placements", default="",
                    help="comma-separated placement counts: table 4 (graph mode's CV by placements)")
    ap.add_argument("--graph-us", default="",
                    help="comma-separated graph sample lengths in us: table 4 by REPRO_TIMING_GRAPH_US")
    ap.add_argument("--worker-jobs", type=int, default=0,
                    help="table 5: the same point as this many jobs of one worker, first against later")
    ap.add_argument("--skip-table2", action="store_true")
    ap.add_argument("--min-times", default="",
                    help="T1,T2,...: table 6, the spread of medians at each --min-time (e.g. 500ms,2s)")
    ap.add_argument("--variants", default="",
                    help="NAME:K=V,K=V;NAME:...: table 4 under each named set of settings")
    ap.add_argument("--interleaved", type=int, default=0,
                    help="table 7: this many invocations of each binary taken in turn (graph mode)")
    ap.add_argument("--interleaved-mode", default="graph", choices=["graph", "cold", "hot"],
                    help="table 7's mode (default graph)")
    a = ap.parse_args()
    if a.interleaved == 1:
        ap.error("--interleaved needs at least 2 invocations, for a CV")
    binaries = [(b.split("=", 1)[0], os.path.abspath(b.split("=", 1)[1])) for b in a.binary]
    base = tempfile.mkdtemp(prefix="repro-phases-")
    for label, repro in binaries:
        CACHES.setdefault(repro, os.path.join(base, "cache-" + label))
    try:
        if a.skip_table1:
            for label, _ in binaries:
                project(os.path.join(base, label))
        else:
            table1(binaries, base, a.runs, a.cpu_path, a.gap)
        if not a.skip_table2:
            table2(binaries, base, a.small_runs)
        if a.investigate:
            table3(binaries, base, a.small_runs)
        if a.placements:
            table4(binaries, base, a.small_runs,
                   one_setting("REPRO_TIMING_PLACEMENTS", a.placements), "placements")
        if a.graph_us:
            table4(binaries, base, a.small_runs,
                   one_setting("REPRO_TIMING_GRAPH_US", a.graph_us), "sample us")
        if a.variants:
            table4(binaries, base, a.small_runs, named_settings(a.variants), "variant")
        if a.worker_jobs:
            table5(binaries, base, a.small_runs, a.worker_jobs)
        if a.interleaved:
            table7(binaries, base, a.interleaved, a.interleaved_mode)
        if a.min_times:
            table6(binaries, base, a.small_runs, a.min_times.split(","))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
