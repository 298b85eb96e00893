#!/usr/bin/env python3
"""Latency of the driver calls a fingerprint can use, each in a fresh process (median of N)."""
import ctypes, statistics, subprocess, sys, time

CHILD = r'''
import ctypes, time, sys, json
t = {}
def tm(name, f):
    s = time.perf_counter(); r = f(); t[name] = (time.perf_counter() - s) * 1e3; return r
which = sys.argv[1]
if which == "cuda":
    lib = tm("dlopen libcuda", lambda: ctypes.CDLL("libcuda.so.1"))
    v = ctypes.c_int()
    tm("cuDriverGetVersion", lambda: lib.cuDriverGetVersion(ctypes.byref(v)))
    tm("cuInit", lambda: lib.cuInit(0))
    n = ctypes.c_int(); tm("cuDeviceGetCount", lambda: lib.cuDeviceGetCount(ctypes.byref(n)))
    a = ctypes.c_int(); tm("cuDeviceGetAttribute", lambda: lib.cuDeviceGetAttribute(ctypes.byref(a), 16, 0))
elif which == "nvml":
    lib = tm("dlopen nvml", lambda: ctypes.CDLL("libnvidia-ml.so.1"))
    tm("nvmlInit_v2", lambda: lib.nvmlInit_v2())
    h = ctypes.c_void_p(); tm("GetHandleByIndex", lambda: lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)))
    e = ctypes.c_int(); p = ctypes.c_int()
    tm("GetEccMode", lambda: lib.nvmlDeviceGetEccMode(h, ctypes.byref(e), ctypes.byref(p)))
    tm("GetPersistenceMode", lambda: lib.nvmlDeviceGetPersistenceMode(h, ctypes.byref(e)))
    u = ctypes.c_uint(); tm("GetEnforcedPowerLimit", lambda: lib.nvmlDeviceGetEnforcedPowerLimit(h, ctypes.byref(u)))
    tm("GetMaxClockInfo", lambda: lib.nvmlDeviceGetMaxClockInfo(h, 1, ctypes.byref(u)))
    b = ctypes.create_string_buffer(64); tm("GetVbiosVersion", lambda: lib.nvmlDeviceGetVbiosVersion(h, b, 64))
    tm("GetMigMode", lambda: lib.nvmlDeviceGetMigMode(h, ctypes.byref(e), ctypes.byref(p)))
    tm("GetCudaComputeCapability", lambda: lib.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(e), ctypes.byref(p)))
    tm("nvmlShutdown", lambda: lib.nvmlShutdown())
print(json.dumps(t))
'''
import json
for which in ["cuda", "nvml"]:
    runs = [json.loads(subprocess.run([sys.executable, "-c", CHILD, which], capture_output=True, text=True).stdout) for _ in range(7)]
    for k in runs[0]:
        print(f"{which:5} {k:28} median {statistics.median(r[k] for r in runs):8.2f} ms")
