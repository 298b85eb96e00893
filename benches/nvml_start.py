#!/usr/bin/env python3
"""Where NVML's start-up goes on a GPU machine: each phase of what `repro env check` asks
NVML for, timed in fresh processes (ctypes; no repro involved).

Phases: loading libnvidia-ml.so.1, starting NVML (`nvmlInit_v2`, or
`nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH)` with `--no-attach`), the device count, the
first device handle, its UUID, persistence mode, MIG mode, the enforced power limit, ECC
mode, and `nvmlShutdown`. Prints one row per run (ms per phase) and the medians; with
`--no-attach` a run that lists no device says so and stops there.

`--handle uuid` or `--handle pci` looks the device up by its UUID or PCI bus id (taken from
a first run) instead of by index; `--parallel` asks for the four fields each on its own thread
(one phase, `fields`: whether the driver answers them side by side); `--no-shutdown` leaves
NVML started, as `repro env check` does, and adds the phase `exit`: from the child's last
step to its parent's wait returning (the process's exit releasing the GPU).

`--every-device` asks every device NVML lists for its handle, UUID and the four fields, one
device after another (one phase, `devices(N)`), or with `--parallel` a thread per device.
`--field-values` asks for ECC and the power limit in one `nvmlDeviceGetFieldValues` call (and
prints its values beside the single calls' answers). `--no-attach` with `--handle uuid|pci`
looks the device up although NVML, started without attaching, lists none.

Usage: python3 benches/nvml_start.py [--runs N] [--no-attach] [--handle index|uuid|pci]
       [--parallel] [--no-shutdown] [--every-device] [--field-values]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from ctypes import byref, c_uint, c_void_p, create_string_buffer


def device(lib, i):
    """Handle, UUID and the four fields of device i."""
    h = c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(i, byref(h))
    u = create_string_buffer(96)
    lib.nvmlDeviceGetUUID(h, u, 96)
    v, w = c_uint(), c_uint()
    lib.nvmlDeviceGetPersistenceMode(h, byref(v))
    lib.nvmlDeviceGetMigMode(h, byref(v), byref(w))
    lib.nvmlDeviceGetEnforcedPowerLimit(h, byref(v))
    lib.nvmlDeviceGetEccMode(h, byref(v), byref(w))


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", c_uint), ("scopeId", c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int),
                ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_ulonglong)]


def one(no_attach, handle="index", key=None, parallel=False, shutdown=True, every=False,
        batch=False):
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
    if n.value == 0 and not (no_attach and handle != "index"):
        return {"error": "NVML lists no device", "ms": phases(marks)}
    if every:
        # Every device's handle, UUID and fields: one after another, or a thread each.
        if parallel:
            ts = [threading.Thread(target=device, args=(lib, i)) for i in range(n.value)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        else:
            for i in range(n.value):
                device(lib, i)
        mark(f"devices({n.value})")
        if shutdown:
            lib.nvmlShutdown()
            mark("shutdown")
        return {"ms": phases(marks), "end": time.time()}
    h = c_void_p()
    if handle == "uuid":
        rc = lib.nvmlDeviceGetHandleByUUID(key.encode(), byref(h))
    elif handle == "pci":
        rc = lib.nvmlDeviceGetHandleByPciBusId_v2(key.encode(), byref(h))
    else:
        rc = lib.nvmlDeviceGetHandleByIndex_v2(0, byref(h))
    if rc != 0:
        return {"error": f"no handle for device 0 by {handle} ({rc})", "ms": phases(marks)}
    mark("handle")
    u = create_string_buffer(96)
    lib.nvmlDeviceGetUUID(h, u, 96)
    mark("uuid")
    queries = [
        ("persistence", lambda v, w: lib.nvmlDeviceGetPersistenceMode(h, byref(v))),
        ("mig", lambda v, w: lib.nvmlDeviceGetMigMode(h, byref(v), byref(w))),
        ("power-limit", lambda v, w: lib.nvmlDeviceGetEnforcedPowerLimit(h, byref(v))),
        ("ecc", lambda v, w: lib.nvmlDeviceGetEccMode(h, byref(v), byref(w))),
    ]
    if batch:
        # ECC and the power limit in one nvmlDeviceGetFieldValues call (persistence and MIG
        # as above): whether one call into the firmware answers both.
        q = dict(queries)
        q["persistence"](c_uint(), c_uint())
        q["mig"](c_uint(), c_uint())
        vals = (FieldValue * 2)()
        vals[0].fieldId, vals[1].fieldId = 1, 190  # NVML_FI_DEV_ECC_CURRENT, _POWER_CURRENT_LIMIT
        lib.nvmlDeviceGetFieldValues(h, 2, vals)
        mark("fields")
        v, w = c_uint(), c_uint()
        lib.nvmlDeviceGetEnforcedPowerLimit(h, byref(v))
        lib.nvmlDeviceGetEccMode(h, byref(v2 := c_uint()), byref(w))
        same = (vals[0].nvmlReturn, vals[0].value, vals[1].nvmlReturn, vals[1].value, v2.value, v.value)
    elif parallel:
        # ctypes releases the GIL around each foreign call: the four run side by side.
        ts = [threading.Thread(target=q, args=(c_uint(), c_uint())) for _, q in queries]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        mark("fields")
    else:
        for name, q in queries:
            q(c_uint(), c_uint())
            mark(name)
    if shutdown:
        lib.nvmlShutdown()
        mark("shutdown")
    out = {"ms": phases(marks), "uuid": u.value.decode(), "end": time.time()}
    if batch:
        out["values"] = same
    return out


def phases(marks):
    return {marks[i][0]: (marks[i][1] - marks[i - 1][1]) * 1e3 for i in range(1, len(marks))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-attach", action="store_true")
    ap.add_argument("--handle", choices=["index", "uuid", "pci"], default="index")
    ap.add_argument("--parallel", action="store_true")
    ap.add_argument("--no-shutdown", action="store_true")
    ap.add_argument("--every-device", action="store_true")
    ap.add_argument("--field-values", action="store_true")
    ap.add_argument("--key", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        out = one(a.no_attach, a.handle, a.key, a.parallel, not a.no_shutdown, a.every_device,
                  a.field_values)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        os._exit(0)
    if a.every_device and a.handle != "index":
        raise SystemExit("--every-device looks devices up by index: leave --handle out")
    key = None
    if a.handle != "index":
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader",
                                "-i", "0"], capture_output=True, text=True)
            fields = [x.strip() for x in r.stdout.split(",")[:2]] if r.returncode == 0 else []
        except OSError:
            fields = []
        uuid, pci = (fields + ["", ""])[:2]
        key = uuid if a.handle == "uuid" else pci
        if not key:
            raise SystemExit(f"--handle {a.handle} needs nvidia-smi to tell device 0's {a.handle}")
    rows = []
    for _ in range(a.runs):
        argv = [sys.executable, __file__, "--child", "--handle", a.handle]
        argv += ["--no-attach"] if a.no_attach else []
        argv += ["--parallel"] if a.parallel else []
        argv += ["--no-shutdown"] if a.no_shutdown else []
        argv += ["--every-device"] if a.every_device else []
        argv += ["--field-values"] if a.field_values else []
        argv += ["--key", key] if key else []
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        err = p.stderr.read()
        p.wait()
        waited = time.time()
        if p.returncode != 0 or not line:
            print(f"run failed ({p.returncode}): {err[-300:]}")
            continue
        out = json.loads(line)
        if "error" in out:
            print(out["error"], {k: round(v, 2) for k, v in out.get("ms", {}).items()})
            continue
        if a.no_shutdown:
            out["ms"]["exit"] = (waited - out["end"]) * 1e3
        rows.append(out["ms"])
        if "values" in out:
            print("field values (ecc rc, ecc, power rc, power mW) and the calls' (ecc, power mW):",
                  out["values"])
        print(" ".join(f"{k}={v:.2f}" for k, v in out["ms"].items()))
    if rows:
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print("median ms: " + " ".join(f"{k}={v:.2f}" for k, v in med.items()),
              f"(total {sum(med.values()):.1f})")


if __name__ == "__main__":
    main()
