#!/usr/bin/env python3
"""How fast a warm GPU goes cold when it idles: what a job may count of the job before.

`repro bench` counts the busy time of a worker's previous job toward the next job's warm-up
when the next starts less than 500 ms (`BUSY_LATELY_MS` in src/engines/gpurun.rs) after the
previous one sampled, and then warms up only 30 ms (`REPRO_TIMING_BUSY_MIN_MS`). This script
measures whether that holds: it keeps the GPU busy for `--busy` seconds, idles for a gap,
then reads the SM clock (NVML) and times a small kernel (an add over 1M floats)
launch by launch with CUDA events: with no warm-up (the first launch, and the median of the
first 10) and after 30 ms of launches (the median of the next 50, as a credited job samples).
Gaps are taken in a shuffled order, `--reps` times each; each figure is the median over the
repetitions, as a ratio to the same kernel's steady median (taken after 1 s of launches).

The SM clock is the column to trust: each launch is timed between events recorded from
Python, so the kernel-time columns include the host's gap between the start event and the
launch (a 1M-float add read 23.9 us on an H200), and they compare one median of launches
against another taken at another moment.

Needs python3 with a CUDA build of PyTorch (the GPU machine has one). Usage:

    python3 benches/gpu_idle_decay.py [--gaps 0,50,100,200,500,1000,2000] [--reps 3]
"""
import argparse
import ctypes
import random
import statistics
import time


def nvml_clock():
    """A function giving the SM clock of device 0 in MHz (None where NVML cannot)."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        if lib.nvmlInit_v2() != 0:
            return lambda: None
        h = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) != 0:
            return lambda: None
    except OSError:
        return lambda: None

    def read():
        v = ctypes.c_uint()
        return v.value if lib.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(v)) == 0 else None

    return read


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gaps", default="0,50,100,200,300,500,1000,2000",
                    help="idle gaps in ms, comma-separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--busy", type=float, default=0.8, help="seconds of work before each gap")
    a = ap.parse_args()
    import torch

    dev = torch.device("cuda")
    n = 1 << 20
    x = torch.rand(n, device=dev)
    y = torch.rand(n, device=dev)
    out = torch.empty_like(x)
    big = torch.rand(64 << 20, device=dev)
    big_out = torch.empty_like(big)
    clock = nvml_clock()

    def timed(count):
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(count)]
        for s, e in evs:
            s.record()
            torch.add(x, y, out=out)
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in evs]

    def busy(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(20):
                torch.add(big, big, out=big_out)
            torch.cuda.synchronize()

    def launches_for(ms):
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            torch.add(x, y, out=out)
            torch.cuda.synchronize()

    busy(1.0)
    launches_for(1000)
    steady = statistics.median(timed(200))
    print(f"steady median of the small kernel: {steady:.3f} us; SM clock {clock()} MHz")
    gaps = [float(g) for g in a.gaps.split(",")]
    order = [g for g in gaps for _ in range(a.reps)]
    random.Random(29).shuffle(order)
    rows = {g: [] for g in gaps}
    for g in order:
        busy(a.busy)
        time.sleep(g / 1e3)
        mhz = clock()
        cold = timed(10)
        launches_for(30)
        warm = statistics.median(timed(50))
        rows[g].append((mhz, cold[0] / steady, statistics.median(cold) / steady, warm / steady))
    print(f"\n{a.busy:g} s busy, then idle for the gap; ratios to the steady median "
          f"(medians of {a.reps} repetitions)\n")
    print(f"{'gap ms':>7} {'SM MHz':>7} {'1st launch':>11} {'first 10':>9} {'after 30 ms':>12}")
    for g in gaps:
        r = rows[g]
        mhz = [m for m, *_ in r if m is not None]
        med = lambda i: statistics.median(x[i] for x in r)
        print(f"{g:7.0f} {statistics.median(mhz) if mhz else float('nan'):7.0f} "
              f"{med(1):11.3f} {med(2):9.3f} {med(3):12.4f}")


if __name__ == "__main__":
    main()
