#!/usr/bin/env python3
"""Where NVML's start-up goes on a GPU machine: each phase of what `repro env check` asks
NVML for, timed in fresh processes (ctypes; no repro involved).

Phases: loading libnvidia-ml.so.1, starting NVML (`nvmlInit_v2`, or
`nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH)` with `--no-attach`), the device count, the
first device handle, its UUID, persistence mode, MIG mode, the enforced power limit, ECC
mode, and `nvmlShutdown`. Prints one row per run (ms per phase) and the medians; with
`--no-attach` a run that lists no device says so and stops there.

Usage: python3 benches/nvml_start.py [--runs N] [--no-attach]
"""
import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import time
from ctypes import byref, c_uint, c_void_p, create_string_buffer


def one(no_attach):
    marks = [("start", time.perf_counter())]

    def mark(name):
        marks.append((name, time.perf_counter()))

    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        return {"error": f"no NVML here ({e})"}
    mark("dlopen")
    rc = lib.nvmlInitWithFlags(c_uint(2)) if no_attach else lib.nvmlInit_v2()
    mark("init")
    if rc != 0:
        return {"error": f"init returned {rc}"}
    n = c_uint()
    lib.nvmlDeviceGetCount_v2(byref(n))
    mark("count")
    if n.value == 0:
        return {"error": "NVML lists no device", "ms": phases(marks)}
    h = c_void_p()
    if lib.nvmlDeviceGetHandleByIndex_v2(0, byref(h)) != 0:
        return {"error": "no handle for device 0", "ms": phases(marks)}
    mark("handle")
    u = create_string_buffer(96)
    lib.nvmlDeviceGetUUID(h, u, 96)
    mark("uuid")
    v, w = c_uint(), c_uint()
    lib.nvmlDeviceGetPersistenceMode(h, byref(v))
    mark("persistence")
    lib.nvmlDeviceGetMigMode(h, byref(v), byref(w))
    mark("mig")
    lib.nvmlDeviceGetEnforcedPowerLimit(h, byref(v))
    mark("power-limit")
    lib.nvmlDeviceGetEccMode(h, byref(v), byref(w))
    mark("ecc")
    lib.nvmlShutdown()
    mark("shutdown")
    return {"ms": phases(marks)}


def phases(marks):
    return {marks[i][0]: (marks[i][1] - marks[i - 1][1]) * 1e3 for i in range(1, len(marks))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-attach", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.no_attach)))
        return
    rows = []
    for _ in range(a.runs):
        argv = [sys.executable, __file__, "--child"] + (["--no-attach"] if a.no_attach else [])
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"run failed ({r.returncode}): {r.stderr[-300:]}")
            continue
        out = json.loads(r.stdout)
        if "error" in out:
            print(out["error"], {k: round(v, 2) for k, v in out.get("ms", {}).items()})
            continue
        rows.append(out["ms"])
        print(" ".join(f"{k}={v:.2f}" for k, v in out["ms"].items()))
    if rows:
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print("median ms: " + " ".join(f"{k}={v:.2f}" for k, v in med.items()),
              f"(total {sum(med.values()):.1f})")


if __name__ == "__main__":
    main()
