#!/usr/bin/env python3
"""GPU validation of `repro bench` (run on the H200 machine). Prints three tables:

1. every example recipe at every parameter point: check verdict, median, interval, noise,
   and achieved GB/s or TFLOP/s against the machine's measured ceilings;
2. stability: the median of each of N separate `repro bench` invocations, and their
   coefficient of variation (target: at most 0.5% for kernels of at least 50 us);
3. agreement: the same CUBIN launched through the driver API from Python and timed with
   triton.testing.do_bench (median, with its L2 flush), against repro's cold median
   (target: within 2%).

Usage: python3 benches/gpu_bench.py [--repro PATH] [--stability-runs N]
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys

COPY_GBPS = 4300.0   # device-to-device copy, read + write (ANCHORS.md, measured here)
BF16_TFLOPS = 790.0  # dense bf16 on the tensor cores (ANCHORS.md, measured here)

RECIPES = ["vector_add", "reduction", "sgemm", "softmax", "flash_attention"]


def repro_json(repro, *args):
    r = subprocess.run([repro, *args, "--json"], capture_output=True, text=True)
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        sys.exit(f"repro {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")


def table1(repro):
    print("\n1. every example recipe (cold L2, noise target 0.5%)")
    print(f"{'recipe':16} {'params':30} {'check':6} {'median us':>11} {'95% CI':>21} {'noise':>7} {'n':>6} {'GB/s':>8} {'%copy':>6} {'TFLOP/s':>8}")
    results = []
    for r in RECIPES:
        code, out = repro_json(repro, "bench", r)
        for res in out["results"]:
            s = res.get("summary") or {}
            t = res.get("throughput") or {}
            p = ", ".join(f"{k}={v}" for k, v in res["params"].items())
            gb, tf = t.get("gb-per-s"), t.get("tflops")
            print(f"{r:16} {p:30} {res['verdict']:6} {s.get('median', float('nan')):11.3f} "
                  f"[{s.get('ci-low', 0):9.3f}, {s.get('ci-high', 0):9.3f}] {100 * s.get('rel-noise', 0):6.2f}% {s.get('n', 0):6} "
                  f"{gb or 0:8.1f} {100 * (gb or 0) / COPY_GBPS:5.1f}% {tf or 0:8.2f}")
            if res["verdict"] != "ok":
                print(f"    detail: {res.get('detail')}")
            results.append(res)
    print(f"ceilings: device copy {COPY_GBPS:.0f} GB/s (read + write); dense bf16 {BF16_TFLOPS:.0f} TFLOP/s "
          f"(the examples are fp32 SIMT and fp16 mma.sync kernels, not tuned to reach it)")
    return results


def table2(repro, runs):
    print(f"\n2. stability: {runs} separate `repro bench` invocations per kernel")
    print(f"{'kernel':40} {'median of medians us':>21} {'min':>10} {'max':>10} {'CV':>8}")
    for recipe, param in [("vector_add", "n=67108864"), ("flash_attention", "seq_len=4096"), ("sgemm", "m=2048")]:
        meds = []
        for _ in range(runs):
            _, out = repro_json(repro, "bench", recipe, "--param", param)
            meds.append(out["results"][0]["summary"]["median"])
        cv = statistics.stdev(meds) / statistics.mean(meds)
        print(f"{recipe + ' ' + param:40} {statistics.median(meds):21.3f} {min(meds):10.3f} {max(meds):10.3f} {100 * cv:7.3f}%")


def table3(repro, results):
    try:
        import torch
        import triton
    except ImportError as e:
        print(f"\n3. agreement with triton.testing.do_bench: skipped ({e})")
        return
    print("\n3. agreement with triton.testing.do_bench (median; both flush L2 before each sample)")
    print(f"{'recipe':16} {'params':30} {'repro us':>10} {'do_bench us':>12} {'ratio':>7}")
    torch.zeros(1, device="cuda")
    cuda = ctypes.CDLL("libcuda.so.1")
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
                   "i32": torch.int32, "u8": torch.uint8, "i64": torch.int64}
    scalar_ct = {"i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
                 "f32": ctypes.c_float, "f64": ctypes.c_double, "u8": ctypes.c_uint8}
    for res in results:
        if res["verdict"] != "ok":
            continue
        store = subprocess.run([repro, "store", "path"], capture_output=True, text=True).stdout.strip()
        sha = res["artifact"]
        image = open(os.path.join(store, "objects", sha[:2], sha[2:]), "rb").read()
        mod = ctypes.c_void_p()
        assert cuda.cuModuleLoadData(ctypes.byref(mod), image) == 0
        fn = ctypes.c_void_p()
        launch = res["launch"]
        assert cuda.cuModuleGetFunction(ctypes.byref(fn), mod, launch["kernel"].encode()) == 0
        keep, params = [], []
        for a in res["args"]:
            if a["kind"] == "buffer":
                t = torch.randn(a["count"], device="cuda").to(torch_dtype[a["dtype"]]) if a["dtype"] in ("f16", "bf16", "f32", "f64") \
                    else torch.zeros(a["count"], device="cuda", dtype=torch_dtype[a["dtype"]])
                keep.append(t)
                params.append(ctypes.c_uint64(t.data_ptr()))
            else:
                params.append(scalar_ct[a["dtype"]](int(a["value"]) if a["dtype"] not in ("f32", "f64") else a["value"]))
        ptrs = (ctypes.c_void_p * len(params))(*[ctypes.cast(ctypes.byref(p), ctypes.c_void_p) for p in params])
        g, b = launch["grid"], launch["block"]

        def run():
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            cuda.cuLaunchKernel(fn, g[0], g[1], g[2], b[0], b[1], b[2], launch["shared_mem"], stream, ptrs, None)

        us = triton.testing.do_bench(run, warmup=100, rep=500, return_mode="median") * 1e3
        ours = res["summary"]["median"]
        p = ", ".join(f"{k}={v}" for k, v in res["params"].items())
        print(f"{res['name']:16} {p:30} {ours:10.3f} {us:12.3f} {ours / us:7.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repro", default="target/release/repro")
    ap.add_argument("--stability-runs", type=int, default=10)
    a = ap.parse_args()
    results = table1(a.repro)
    table2(a.repro, a.stability_runs)
    table3(a.repro, results)


if __name__ == "__main__":
    main()
