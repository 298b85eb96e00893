# repro's Python-call runner (embedded in the repro binary, run in the fingerprinted
# interpreter). It reads one job (JSON) from the file named by argv[1], calls the function
# and its reference on the same tensors, compares their outputs, times both, and writes one
# line `REPRO-PYRUN <json>` on stdout. Anything else it or the called code prints is not
# part of the answer: repro reads only that line, bounded, and validates every field.
import importlib
import json
import math
import sys
import time

MARK = "REPRO-PYRUN "


def emit(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj, allow_nan=False) + "\n")
    sys.stdout.flush()


def fail(kind, what, message):
    emit({"schema": 1, "error": {"kind": kind, "what": what, "message": str(message)[-2000:]}})
    sys.exit(0)


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def rel_noise(xs):
    # repro's stats::median_rel_noise: 1.2533 * 1.4826 * MAD / sqrt(n) / |median|.
    n = len(xs)
    if n < 2:
        return math.inf
    m = median(xs)
    if m == 0:
        return math.inf
    mad = median([abs(x - m) for x in xs])
    spread = 1.4826 * mad
    if spread == 0:
        mean = sum(xs) / n
        spread = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return 1.2533 * spread / math.sqrt(n) / abs(m)


def resolve(path, role):
    parts = path.split(".")
    mod = None
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
                continue
            fail("import", name, "%s: %s" % (type(e).__name__, e))
        except BaseException as e:
            fail("import", name, "%s: %s" % (type(e).__name__, e))
        obj, where = mod, name
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                have = sorted(n for n in dir(obj) if not n.startswith("_"))[:40]
                fail("no-function", path, "%s %s has no attribute %s (it has: %s)" % (
                    role, where, attr, ", ".join(have) or "nothing"))
            obj, where = getattr(obj, attr), where + "." + attr
        if not callable(obj):
            fail("not-callable", path, "%s %s is a %s, not a function" % (role, path, type(obj).__name__))
        return obj
    fail("import", parts[0], "no module named %s" % parts[0])


def main():
    job = json.load(open(sys.argv[1]))
    if job.get("module-dir"):
        sys.path.insert(0, job["module-dir"])
    try:
        import torch
    except BaseException as e:
        fail("no-torch", sys.executable, "%s: %s" % (type(e).__name__, e))
    dev = job["device"]
    if dev == "cuda":
        if not torch.cuda.is_available():
            why = "a CPU-only build" if torch.version.cuda is None else "built for CUDA %s, but no GPU or driver is usable" % torch.version.cuda
            fail("no-cuda", sys.executable, "torch %s is %s: torch.cuda.is_available() is False" % (torch.__version__, why))
        torch.cuda.set_device(job["cuda-device"])
    fn = resolve(job["function"], "function's module")
    ref = resolve(job["reference"]["function"], "reference's module") if job.get("reference") else None
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
              "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8,
              "u32": getattr(torch, "uint32", None), "u64": getattr(torch, "uint64", None)}

    def tensor(a):
        dt = dtypes[a["tensor"]]
        if dt is None:
            fail("bad-argument", a["name"], "torch %s has no %s tensors" % (torch.__version__, a["tensor"]))
        shape = a["shape"]
        init = a.get("init")
        g = torch.Generator().manual_seed(a["seed"])
        if init is None:
            t = torch.full(shape, float("nan"), dtype=torch.float64) if dt.is_floating_point else torch.zeros(shape, dtype=torch.float64)
        elif init["kind"] == "zeros":
            t = torch.zeros(shape, dtype=torch.float64)
        elif init["kind"] == "constant":
            t = torch.full(shape, init["value"], dtype=torch.float64)
        elif init["kind"] == "iota":
            t = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape)
        elif init["kind"] == "uniform":
            t = torch.rand(shape, generator=g, dtype=torch.float64) * (init["high"] - init["low"]) + init["low"]
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64) * init["std"] + init["mean"]
        if not dt.is_floating_point:
            t = t.floor()
        return t.to(dt).to(dev).contiguous()

    def make_args():
        out = []
        for a in job["args"]:
            if "tensor" in a:
                out.append(tensor(a))
            else:
                out.append(float(a["value"]) if a["scalar"] in ("f32", "f64") else int(a["value"]))
        return out

    def outputs(result, args, who):
        if result is None:
            return [(a["name"], t) for a, t in zip(job["args"], args) if a.get("output")]
        if isinstance(result, torch.Tensor):
            return [("out", result)]
        if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
            return [("out%d" % i, t) for i, t in enumerate(result)]
        fail("bad-return", who, "%s returned a %s, not a tensor, a tuple of tensors or None" % (who, type(result).__name__))

    def call(f, who):
        args = make_args()
        try:
            r = f(*args)
        except BaseException as e:
            fail("call", who, "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[-1] if str(e).strip() else ""))
        if dev == "cuda":
            torch.cuda.synchronize()
        return outputs(r, args, who), args

    report = {"schema": 1, "torch": torch.__version__, "device": dev,
              "device-name": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
              "timer": None, "flush-bytes": 0, "check": None, "function": None, "reference": None}
    mine, _ = call(fn, job["function"])
    passed = True
    if ref is not None:
        theirs, _ = call(ref, job["reference"]["function"])
        report["check"], passed = compare(torch, mine, theirs, job)
    if job["check-only"] or (not passed and not job["time-anyway"]):
        emit(report)
        return
    timer = Timer(torch, job)
    report["timer"], report["flush-bytes"] = timer.method, timer.flush_bytes
    report["function"] = timer.time(fn, make_args())
    if ref is not None:
        report["reference"] = timer.time(ref, make_args())
    emit(report)


def compare(torch, mine, theirs, job):
    who, rwho = job["function"], job["reference"]["function"]
    if len(mine) != len(theirs):
        fail("output-shape", rwho, "%s returns %d output(s), the reference %s returns %d" % (who, len(mine), rwho, len(theirs)))
    atol, rtol = job["reference"]["atol"], job["reference"]["rtol"]
    checks, passed = [], True
    for (name, a), (_, b) in zip(mine, theirs):
        if tuple(a.shape) != tuple(b.shape):
            fail("output-shape", rwho, "%s returns %s of shape %s, the reference %s returns shape %s" % (
                who, name, list(a.shape), rwho, list(b.shape)))
        x = a.detach().to("cpu", torch.float64).flatten()
        y = b.detach().to("cpu", torch.float64).flatten()
        both = torch.isfinite(x) & torch.isfinite(y)
        err = (x - y).abs()
        bad = ~(err <= atol + rtol * y.abs())
        bad = bad | (torch.isnan(x) != torch.isnan(y))
        bad = bad & ~(torch.isnan(x) & torch.isnan(y))
        unwritten = int((torch.isnan(x) & ~torch.isnan(y)).sum())
        fe = err[both]
        rel = (fe / y[both].abs().clamp_min(1e-30)) if fe.numel() else fe
        n_bad = int(bad.sum())
        first = None
        if n_bad:
            i = int(bad.nonzero()[0][0])
            first = [i, repr(float(x[i])), repr(float(y[i]))]
        checks.append({"name": name, "elements": int(x.numel()), "mismatches": n_bad, "unwritten": unwritten,
                       "max-abs-err": float(fe.max()) if fe.numel() else 0.0,
                       "max-rel-err": float(rel.max()) if fe.numel() else 0.0,
                       "atol": atol, "rtol": rtol, "first-mismatch": first})
        passed = passed and n_bad == 0
    return checks, passed


class Timer:
    """Times calls the way repro's kernel runner does: warm-up, then samples (CUDA events
    with L2 flushed before each in cold mode, or the wall clock on the CPU with the caches
    overwritten), until the median's relative noise is at most max-noise with the minimum
    samples and time, or a limit is reached."""

    def __init__(self, torch, job):
        self.torch, self.job, self.t = torch, job, job["timing"]
        self.cold = self.t["mode"] == "cold"
        if job["device"] == "cuda":
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
            self.flush_bytes = 2 * l2 if self.cold else 0
            self.method = "cuda-events"
            self.buf = torch.empty(max(self.flush_bytes, 1), dtype=torch.uint8, device="cuda")
        else:
            self.flush_bytes = (64 << 20) if self.cold else 0
            self.method = "cpu-wall-clock (time.perf_counter_ns)"
            self.buf = torch.empty(max(self.flush_bytes, 1), dtype=torch.uint8)

    def once(self, f, args, i):
        torch = self.torch
        if self.cold:
            self.buf.fill_(i & 0xFF)
        if self.job["device"] == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            f(*args)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3
        t0 = time.perf_counter_ns()
        f(*args)
        return (time.perf_counter_ns() - t0) / 1e3

    def time(self, f, args):
        t, calls = self.t, 0
        t0 = time.perf_counter()
        while calls == 0 or (time.perf_counter() - t0) * 1e3 < t["warmup-ms"]:
            self.once(f, args, calls)
            calls += 1
        samples, converged = [], False
        t0 = time.perf_counter()
        while True:
            samples.append(self.once(f, args, len(samples)))
            spent = (time.perf_counter() - t0) * 1e3
            if len(samples) >= t["min-samples"] and spent >= t["min-time-ms"] and rel_noise(samples) <= t["max-noise"]:
                converged = True
                break
            if len(samples) >= t["max-samples"] or spent >= t["budget-ms"]:
                break
        return {"samples-us": samples, "warmup-calls": calls, "converged": converged}


if __name__ == "__main__":
    main()
