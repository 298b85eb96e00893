//! `repro bench RECIPE` and `repro bisect --mode bench|check` end to end on a fake NVIDIA
//! driver (tests/fakegpu/: how it is built and made the driver repro loads). The kernels are
//! really compiled by NVRTC; the fake loads the module, allocates host memory for device
//! memory, and times each launch by a token in the module: a `__device__` variable named
//! `fakegpu_ns_N` makes every kernel of the module take N ns (plus a jitter of 0.5% at most),
//! `fakegpu_wrong_K` makes kernel K write other values than its reference, `fakegpu_trap_K`
//! makes it fail as a trapping kernel does, `fakegpu_hang_K` makes it never finish. A commit
//! that changes the token is a commit that makes the kernel slower, wrong or broken.
//!
//! What this cannot show: anything about real kernels' speed or results (the fake runs no
//! code); it shows what repro does with what a driver answers.

use crate::common;
use crate::fakegpu;

use std::path::Path;

use common::git;
use fakegpu::{FakeGpu, stdout};
use serde_json::Value;

/// A kernel source whose module takes `ns` per launch, with `extra` device variables
/// (tokens) added.
fn kernel(ns: u64, extra: &str) -> String {
    format!(
        "__device__ int fakegpu_ns_{ns};\n{extra}\
         extern \"C\" __global__ void scale(float* a, const float* b, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 2.0f * b[i]; }}\n\
         extern \"C\" __global__ void scale_ref(float* a, const float* b, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = b[i] + b[i]; }}\n"
    )
}

/// A recipe for `scale` checked against `scale_ref`, built to PTX (the fake reads which
/// parameters are buffers from the PTX) or, with `cubin`, to a cubin and not checked.
fn recipe(cubin: bool) -> String {
    let (outputs, check) = if cubin {
        ("cubin", "")
    } else {
        ("ptx", "[check]\nkernel = \"scale_ref\"\n")
    };
    format!(
        "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"scale\", \"scale_ref\"]\n\
         target = \"sm_90\"\noutputs = [\"{outputs}\"]\n[params]\nn = 4096\n[run]\nkernel = \"scale\"\n\
         grid = \"ceil_div(n, 256)\"\nblock = 256\nargs = [\n\
           {{ name = \"a\", buffer = \"f32\", count = \"n\", output = true }},\n\
           {{ name = \"b\", buffer = \"f32\", count = \"n\", init = \"normal\" }},\n\
           {{ name = \"n\", scalar = \"i32\", value = \"n\" }},\n]\n{check}"
    )
}

/// A fake GPU and a repository with the kernel and its recipes, or `None` (skipped) without
/// a C compiler or NVRTC.
fn setup(source: &str) -> Option<(FakeGpu, tempfile::TempDir, std::path::PathBuf)> {
    if !common::nvrtc_available() {
        return None;
    }
    let gpu = FakeGpu::new("580.159.04")?;
    let (tmp, root) = common::repo_with(&[
        ("k.cu", source),
        ("recipes/scale.toml", &recipe(false)),
        ("recipes/scale_cubin.toml", &recipe(true)),
    ]);
    Some((gpu, tmp, root))
}

/// `repro -C ROOT bench --json RECIPE --min-time 30ms EXTRA...` on the fake: (exit code, the
/// first result).
fn bench(
    gpu: &FakeGpu,
    root: &Path,
    recipe: &str,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> (i32, Value) {
    let (code, v) = bench_all(gpu, root, recipe, extra, vars);
    (code, v["results"][0].clone())
}

/// [`bench`], with the whole JSON answer (every point's result).
fn bench_all(
    gpu: &FakeGpu,
    root: &Path,
    recipe: &str,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> (i32, Value) {
    let out = gpu
        .cmd(vars)
        .arg("-C")
        .arg(root)
        .args([
            "bench",
            "--json",
            recipe,
            "--min-time",
            "30ms",
            "--warmup",
            "10ms",
        ])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "repro panicked: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{stderr}", stdout(&out)));
    (out.status.code().unwrap(), v)
}

fn median(result: &Value) -> f64 {
    result["summary"]["median"]
        .as_f64()
        .unwrap_or_else(|| panic!("no median: {result}"))
}

#[test]
fn a_recipe_bench_checks_and_times_the_kernel_on_the_fake_gpu() {
    let Some((gpu, _tmp, root)) = setup(&kernel(160_000, "")) else {
        return;
    };
    for mode in ["cold", "hot", "graph"] {
        let (code, r) = bench(&gpu, &root, "scale", &["--mode", mode], &[]);
        assert_eq!(
            (code, &r["verdict"]),
            (0, &Value::from("ok")),
            "{mode}: {r}"
        );
        // Checked against the reference: every element of the output written and equal.
        let check = &r["check"][0];
        assert_eq!(check["name"], "a", "{mode}");
        assert_eq!(check["elements"], 4096, "{mode}");
        assert_eq!(
            (&check["mismatches"], &check["unwritten"]),
            (&0.into(), &0.into())
        );
        // Timed by the driver's events: 160 µs, within the fake's 0.5% jitter.
        let m = median(&r);
        assert!((159.2..=160.8).contains(&m), "{mode}: median {m} µs");
        assert_eq!(r["machine"], "NVIDIA Fake GPU");
        assert_eq!(r["settings"]["mode"], mode);
        let per_sample = r["launches-per-sample"].as_u64().unwrap();
        if mode == "graph" {
            // A graph of enough launches to make at most 2 ms (2000 / 160 = 12), rounded down
            // to a power of two, at least 16, less the fake's empty graph, which costs nothing.
            assert_eq!(per_sample, 16, "{r}");
            assert_eq!(r["graph-overhead-us"], 0.0, "{r}");
        } else {
            assert_eq!(per_sample, 1, "{r}");
        }
        assert!(r["warmup-launches"].as_u64().unwrap() >= 3, "{r}");
        assert_eq!(
            r["sm-clock-mhz"],
            serde_json::json!([1980, 1980, 1980]),
            "{r}"
        );
        assert_eq!(r["throttled"], false);
    }
    // A clock below 75% of its maximum during sampling is reported as throttled.
    let (code, r) = bench(
        &gpu,
        &root,
        "scale",
        &["--mode", "hot"],
        &[("FAKEGPU_SM_MHZ", "900")],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        r["sm-clock-mhz"],
        serde_json::json!([900, 900, 1980]),
        "{r}"
    );
    assert_eq!(r["throttled"], true);
    // On a second GPU the job sees only that card (CUDA_VISIBLE_DEVICES) and reads the
    // clocks of that card (by its UUID), not NVML's first device's.
    let two = [
        ("FAKEGPU_COUNT", "2"),
        ("FAKEGPU_SM_MHZ_1", "700"),
        ("FAKEGPU_TIME_SCALE_1", "2"),
    ];
    gpu.forget_devices();
    let (code, r) = bench(
        &gpu,
        &root,
        "scale",
        &["--mode", "hot", "--device", "1"],
        &two,
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        r["sm-clock-mhz"],
        serde_json::json!([700, 700, 1980]),
        "{r}"
    );
    let m = median(&r);
    assert!(
        (318.4..=321.6).contains(&m),
        "GPU 1 takes twice as long: median {m} µs"
    );
    let (code, r) = bench(
        &gpu,
        &root,
        "scale",
        &["--mode", "hot", "--device", "0"],
        &two,
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        r["sm-clock-mhz"],
        serde_json::json!([1980, 1980, 1980]),
        "{r}"
    );
    assert!((159.2..=160.8).contains(&median(&r)), "{r}");
    // A device that is not there is a usage error before anything runs.
    gpu.forget_devices();
    let out = gpu
        .cmd(&[])
        .arg("-C")
        .arg(&root)
        .args(["bench", "scale", "--device", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--device 1 is out of range: 1 GPU(s) visible"),
        "{stderr}"
    );
    // A cubin is loaded as it is (the fake finds the token in its symbol table).
    let (code, r) = bench(&gpu, &root, "scale_cubin", &["--mode", "hot"], &[]);
    assert_eq!(code, 0, "{r}");
    assert!(r["check"].is_null(), "{r}");
    let m = median(&r);
    assert!((159.2..=160.8).contains(&m), "cubin: median {m} µs");
    // The human line says the same.
    let out = gpu
        .cmd(&[])
        .arg("-C")
        .arg(&root)
        .args(["bench", "scale", "--min-time", "30ms", "--warmup", "10ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains(" ok  median 1") && text.contains(" µs"),
        "{text}"
    );
}

#[test]
fn wrong_trapping_and_hanging_kernels_get_verdicts() {
    let source = kernel(20_000, "__device__ int fakegpu_wrong_scale;\n");
    let Some((gpu, _tmp, root)) = setup(&source) else {
        return;
    };
    let (code, r) = bench(&gpu, &root, "scale", &[], &[]);
    assert_eq!((code, &r["verdict"]), (1, &Value::from("wrong")), "{r}");
    assert_eq!(r["check"][0]["mismatches"], 4096, "{r}");
    assert!(r["summary"].is_null(), "a wrong kernel is not timed: {r}");
    // --time-anyway times it all the same.
    let (_, r) = bench(&gpu, &root, "scale", &["--time-anyway"], &[]);
    assert_eq!(r["verdict"], "wrong", "{r}");
    let m = median(&r);
    assert!((19.9..=20.1).contains(&m), "median {m} µs");

    for (token, extra, verdict, detail) in [
        (
            "fakegpu_trap_scale",
            vec![],
            "crash",
            "CUDA_ERROR_LAUNCH_FAILED during running scale",
        ),
        (
            "fakegpu_hang_scale",
            vec!["--timeout", "3s"],
            "timeout",
            "TIMEOUT",
        ),
    ] {
        std::fs::write(
            root.join("k.cu"),
            kernel(20_000, &format!("__device__ int {token};\n")),
        )
        .unwrap();
        let (code, r) = bench(&gpu, &root, "scale", &extra, &[]);
        assert_eq!(
            (code, &r["verdict"]),
            (1, &Value::from(verdict)),
            "{token}: {r}"
        );
        let d = r["detail"].as_str().unwrap_or_default();
        assert!(d.contains(detail), "{token}: {d}");
    }

    // The driver refusing a call ends the job with the call's error and what was being done.
    std::fs::write(root.join("k.cu"), kernel(20_000, "")).unwrap();
    for (fail, detail) in [
        (
            "cuMemAlloc_v2=2",
            "CUDA_ERROR_OUT_OF_MEMORY during allocating a buffer",
        ),
        (
            "cuModuleLoadData=200",
            "CUDA_ERROR_INVALID_IMAGE during loading the module",
        ),
        (
            "cuModuleGetFunction=500",
            "CUDA_ERROR_NOT_FOUND during finding kernel scale",
        ),
        (
            "cuLaunchKernel=1",
            "CUDA_ERROR_INVALID_VALUE during launching scale_ref",
        ),
        (
            "cuEventCreate=2",
            "CUDA_ERROR_OUT_OF_MEMORY during creating an event",
        ),
        (
            "cuDevicePrimaryCtxRetain=2",
            "CUDA_ERROR_OUT_OF_MEMORY during creating the context",
        ),
    ] {
        let (code, r) = bench(&gpu, &root, "scale", &[], &[("FAKEGPU_FAIL", fail)]);
        assert_eq!(
            (code, &r["verdict"]),
            (1, &Value::from("crash")),
            "{fail}: {r}"
        );
        let d = r["detail"].as_str().unwrap_or_default();
        assert!(d.contains(detail), "{fail}: {d}");
    }
    // Buffers larger than the device's free memory are refused before any allocation.
    let (code, r) = bench(&gpu, &root, "scale", &[], &[("FAKEGPU_MEM_MIB", "0")]);
    assert_eq!((code, &r["verdict"]), (1, &Value::from("crash")), "{r}");
    let d = r["detail"].as_str().unwrap_or_default();
    assert!(d.contains("BUFFERS_TOO_LARGE"), "{d}");
}

/// A history of `scale` whose commit 4 (of 6 after the base) changes the kernel's module as
/// `change` says; returns the repository and the commit ids, oldest first.
fn history(root: &Path, change: impl Fn(&str) -> String) -> Vec<String> {
    let mut ids = vec![git(root, &["rev-parse", "HEAD"])];
    for i in 1..=6 {
        let path = root.join("k.cu");
        let mut text = std::fs::read_to_string(&path).unwrap();
        if i == 4 {
            text = change(&text);
        }
        text.push_str(&format!("// commit {i}\n"));
        std::fs::write(&path, text).unwrap();
        git(root, &["commit", "-qam", &format!("commit {i}")]);
        ids.push(git(root, &["rev-parse", "HEAD"]));
    }
    ids
}

/// `repro bisect --json` on the fake with `vars`: (exit code, report).
fn bisect(gpu: &FakeGpu, root: &Path, args: &[&str], vars: &[(&str, &str)]) -> (i32, Value) {
    let out = gpu
        .cmd(vars)
        .arg("-C")
        .arg(root)
        .args([
            "bisect", "--json", "--good", "HEAD~6", "--bad", "HEAD", "--recipe", "scale",
        ])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "repro panicked: {stderr}");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{stderr}", stdout(&out)));
    (out.status.code().unwrap(), v)
}

#[test]
fn bisect_bench_finds_the_commit_that_made_the_kernel_slower() {
    let Some((gpu, _tmp, root)) = setup(&kernel(160_000, "")) else {
        return;
    };
    let ids = history(&root, |t| {
        t.replace("fakegpu_ns_160000", "fakegpu_ns_200000")
    });
    let (code, v) = bisect(&gpu, &root, &["--mode", "bench", "--min-time", "30ms"], &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["outcome"]["kind"], "first-bad", "{v}");
    assert_eq!(v["culprit"]["hash"], ids[4].as_str(), "{v}");
    assert_eq!(v["parent"]["hash"], ids[3].as_str(), "{v}");
    // The evidence: the ends and the commits around the change, timed by the fake's events.
    let steps = v["steps"].as_array().unwrap();
    let step = |id: &str| {
        steps
            .iter()
            .find(|s| s["commit"] == id)
            .unwrap_or_else(|| panic!("{id} not evaluated: {v}"))
    };
    for (i, verdict, us) in [
        (0, "good", 160.0),
        (3, "good", 160.0),
        (4, "bad", 200.0),
        (6, "bad", 200.0),
    ] {
        let s = step(&ids[i]);
        assert_eq!(s["verdict"], verdict, "commit {i}: {s}");
        let m = s["median"].as_f64().unwrap();
        assert!(
            (m / us - 1.0).abs() < 0.005,
            "commit {i}: median {m} µs, not {us}"
        );
    }
    // Re-checked against its parent: 25% slower, confirmed.
    let recheck = &v["recheck"];
    assert_eq!(recheck["confirmed"], true, "{recheck}");
    let ratio = recheck["ratio"].as_f64().unwrap();
    assert!((1.24..1.26).contains(&ratio), "{recheck}");

    // A slowdown counts when its interval lies beyond the threshold itself: 25% is short of
    // 40% (0.6 times it, which the midpoint rule of old named), where the bad end is not bad
    // (exit 1, and the hint).
    let out = gpu
        .cmd(&[])
        .arg("-C")
        .arg(&root)
        .args([
            "bisect", "--good", "HEAD~6", "--bad", "HEAD", "--recipe", "scale",
        ])
        .args([
            "--mode",
            "bench",
            "--min-time",
            "30ms",
            "--threshold",
            "40%",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: the bad end {} is not bad: it is good",
            &ids[6][..12]
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("a threshold the change exceeds"),
        "{stderr}"
    );
}

/// Bench samples and step answers are the card's, the driver's and the timing method's: the
/// same bisection again reuses them all, but in a store carried to another machine (another
/// GPU, as a cache of device facts made there says) every commit is measured afresh.
#[test]
fn bench_samples_of_another_gpu_are_never_reused() {
    let Some((gpu, tmp, root)) = setup(&kernel(160_000, "")) else {
        return;
    };
    let ids = history(&root, |t| {
        t.replace("fakegpu_ns_160000", "fakegpu_ns_200000")
    });
    let args = ["--mode", "bench", "--min-time", "30ms"];
    let (code, first) = bisect(&gpu, &root, &args, &[]);
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["culprit"]["hash"], ids[4].as_str(), "{first}");
    assert!(first["evaluated"].as_u64().unwrap() > 0, "{first}");
    let (code, again) = bisect(&gpu, &root, &args, &[]);
    assert_eq!(code, 0, "{again}");
    assert_eq!(again["evaluated"], 0, "the same card: {again}");
    // Another machine: its own cache of device facts, another GPU.
    let elsewhere = tmp.path().join("other-machine-cache");
    let vars = [
        ("XDG_CACHE_HOME", elsewhere.to_str().unwrap()),
        ("FAKEGPU_UUID", "GPU-0123abcd-0000-0000-0000-000000000001"),
    ];
    let (code, other) = bisect(&gpu, &root, &args, &vars);
    assert_eq!(code, 0, "{other}");
    assert_eq!(other["culprit"]["hash"], ids[4].as_str(), "{other}");
    assert_eq!(
        other["evaluated"], first["evaluated"],
        "another card measures every step again: {other}"
    );
}

#[test]
fn bisect_check_finds_the_commit_that_made_the_kernel_wrong() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let ids = history(&root, |t| {
        format!("__device__ int fakegpu_wrong_scale;\n{t}")
    });
    let (code, v) = bisect(&gpu, &root, &["--mode", "check"], &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["outcome"]["kind"], "first-bad", "{v}");
    assert_eq!(v["culprit"]["hash"], ids[4].as_str(), "{v}");
    let wrong = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["commit"] == ids[4].as_str())
        .unwrap();
    assert!(
        wrong["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("wrong"),
        "{wrong}"
    );
    // Two GPUs check two commits at once; the answer is the same.
    let two = [("FAKEGPU_COUNT", "2")];
    gpu.forget_devices();
    let (code, v) = bisect(&gpu, &root, &["--mode", "check", "--devices", "0,1"], &two);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["culprit"]["hash"], ids[4].as_str(), "{v}");
}

/// A kernel that hangs from commit 4 on, in a check bisection: the hung steps are killed at
/// the timeout, say so ("timeout", not "crash": the child's fate is a typed failure, not a
/// string the check step would have to recognise), and the culprit is still found.
#[test]
fn a_hanging_kernel_in_a_check_bisection_is_a_timeout_verdict() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let ids = history(&root, |t| {
        format!("__device__ int fakegpu_hang_scale;\n{t}")
    });
    let (code, v) = bisect(&gpu, &root, &["--mode", "check", "--timeout", "3s"], &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["culprit"]["hash"], ids[4].as_str(), "{v}");
    let steps = v["steps"].as_array().unwrap();
    let hung: Vec<&Value> = steps.iter().filter(|s| s["verdict"] == "bad").collect();
    assert!(!hung.is_empty(), "{v}");
    for s in hung {
        let d = s["detail"].as_str().unwrap_or_default();
        assert!(d.starts_with("timeout at "), "{s}");
        assert!(d.contains("no answer within 3s"), "{s}");
    }
}

/// The functions the fake saw called in `log`, one a line.
fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A bench bisection runs its GPU jobs in one reused worker process: far fewer processes
/// use the driver than jobs are loaded (before: one process a job).
#[test]
fn a_bench_bisection_reuses_one_gpu_worker() {
    let Some((gpu, _tmp, root)) = setup(&kernel(160_000, "")) else {
        return;
    };
    let ids = history(&root, |t| {
        t.replace("fakegpu_ns_160000", "fakegpu_ns_200000")
    });
    let log = gpu.path("calls.log");
    let vars = [("FAKEGPU_LOG", log.to_str().unwrap())];
    let (code, v) = bisect(
        &gpu,
        &root,
        &["--mode", "bench", "--min-time", "30ms"],
        &vars,
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["culprit"]["hash"], ids[4].as_str(), "{v}");
    let seen = calls(&log);
    let processes = seen.iter().filter(|c| *c == "process").count();
    let jobs = seen.iter().filter(|c| *c == "cuModuleLoadData").count();
    // The bisection's own driver probe and one worker; every job's module is unloaded.
    assert!(jobs >= 10, "{jobs} jobs");
    assert!(processes <= 3, "{processes} processes for {jobs} jobs");
    let unloaded = seen.iter().filter(|c| *c == "cuModuleUnload").count();
    assert_eq!(unloaded, jobs, "every job's module is unloaded");
}

/// A recipe bench's sweep runs its points in one GPU worker (started before the fingerprint,
/// its context made at once): one process uses the driver for three points, each point's
/// module is loaded and unloaded, and every point is timed and checked. A trapping kernel
/// ends the worker with its own verdict (`wrong_trapping_and_hanging_kernels_get_verdicts`).
#[test]
fn a_recipe_bench_sweep_runs_in_one_gpu_worker() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let log = gpu.path("calls.log");
    let vars = [("FAKEGPU_LOG", log.to_str().unwrap())];
    let (code, v) = bench_all(
        &gpu,
        &root,
        "scale",
        &["--param", "n=1024,2048,4096"],
        &vars,
    );
    assert_eq!(code, 0, "{v}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{v}");
    for (r, n) in results.iter().zip([1024, 2048, 4096]) {
        assert_eq!(r["verdict"], "ok", "{r}");
        assert_eq!(r["check"][0]["elements"], n, "{r}");
        // The first point waited for the worker's start, the later ones for nothing.
        let phases = r["phases"].as_array().unwrap();
        assert!(phases.iter().any(|p| p["name"] == "process"), "{r}");
    }
    let seen = calls(&log);
    let processes = seen.iter().filter(|c| *c == "process").count();
    let jobs = seen.iter().filter(|c| *c == "cuModuleLoadData").count();
    let unloaded = seen.iter().filter(|c| *c == "cuModuleUnload").count();
    // The parent's own driver probe (when its per-boot cache misses) and one worker.
    assert!(processes <= 2, "{processes} processes: {seen:?}");
    assert!(jobs >= 3, "{jobs} modules loaded");
    assert_eq!(unloaded, jobs, "every point's module is unloaded");

    // A command bench starts no worker: its command is what uses the GPU (the per-boot
    // cache is warm now, so nothing of repro's own calls cuInit).
    std::fs::remove_file(&log).unwrap();
    let out = gpu
        .cmd(&vars)
        .arg("-C")
        .arg(&root)
        .args(["bench", "--command", "true", "--runs", "3", "--warmup", "0"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = calls(&log);
    assert!(
        !seen.iter().any(|c| c == "process"),
        "a command bench made a context: {seen:?}"
    );
}

/// Every copy, memset and ordinary launch of a job goes to the legacy default stream, and
/// only graph mode makes a stream, to capture its graphs on and to launch and time them
/// there: ordinary work on a created stream makes a real context's later kernels slower
/// (#29: a 2.6 us kernel 7% slower in every job of a reused worker after the first), graphs
/// on the legacy stream vary more between processes. The fake logs both; no mode does the
/// first, with repro's device helpers or on the CPU path through the pinned staging buffers.
#[test]
fn jobs_work_on_the_legacy_stream_and_run_graphs_on_their_own() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let log = gpu.path("calls.log");
    let cases: [(&str, &str, &str); 4] = [
        ("cold", "1024,2048", "1"),
        ("hot", "1024,2048", "1"),
        ("graph", "1024,2048", "1"),
        // Large enough (2 MiB a buffer) for the CPU path's pinned staging copies.
        ("graph", "524288", "0"),
    ];
    for (mode, n, helpers) in cases {
        let _ = std::fs::remove_file(&log);
        let vars = [
            ("FAKEGPU_LOG", log.to_str().unwrap()),
            ("REPRO_GPU_HELPERS", helpers),
        ];
        let (code, v) = bench_all(
            &gpu,
            &root,
            "scale",
            &["--param", &format!("n={n}"), "--mode", mode],
            &vars,
        );
        let case = format!("{mode}, n={n}, helpers {helpers}");
        assert_eq!(code, 0, "{case}: {v}");
        let seen = calls(&log);
        let count = |name: &str| seen.iter().filter(|c| *c == name).count();
        let jobs = count("cuModuleLoadData");
        assert!(count("cuLaunchKernel") > 4, "{case}: {seen:?}");
        assert_eq!(count("work on a created stream"), 0, "{case}: {seen:?}");
        if helpers == "0" {
            assert!(count("cuMemHostAlloc") > 0, "{case}: no staging: {seen:?}");
        }
        let (made, captured) = (count("cuStreamCreate"), count("cuStreamBeginCapture_v2"));
        let (launched, on_own) = (
            count("cuGraphLaunch"),
            count("graph launch on a created stream"),
        );
        // Nothing on the legacy stream, no free and no graph or stream destroyed while a
        // created stream runs graphs nobody waited for (the two do not wait for each other).
        let unordered: Vec<_> = seen.iter().filter(|c| c.starts_with("unordered")).collect();
        assert!(unordered.is_empty(), "{case}: {unordered:?} in {seen:?}");
        // One worker ran both points: it started NVML's handle of the device once.
        assert_eq!(count("nvmlDeviceGetHandleByUUID"), 1, "{case}: {seen:?}");
        if mode == "graph" {
            assert!(captured > 0 && made > 0 && made <= jobs, "{case}: {seen:?}");
            assert_eq!(count("cuStreamDestroy_v2"), made, "{case}: {seen:?}");
            assert_eq!(count("a non-blocking stream"), made, "{case}: {seen:?}");
            // Every graph runs, and is timed, on the stream it was captured on; the few
            // launches not timed (the chosen placement's first, which uploads its graph,
            // the settling graphs queued while it is instantiated, each chain's lead and
            // the graph each chain queued last, whose time nobody read) are there too.
            assert!(launched > 0 && on_own == launched, "{case}: {seen:?}");
            let timed = count("timed graph launch");
            let untimed = launched - timed.min(launched);
            assert!(
                untimed > 0 && untimed * 10 < launched,
                "{case}: {untimed} untimed"
            );
            // Graphs are timed back to back, from the event that ends the one before to
            // their own: an event after each graph queued, and one after the lead that
            // starts a chain of them. A job's seven chains (sizing, the empty graph's cost,
            // settling, and sampling's four bursts) add a lead's event each, and settling
            // and the last burst a graph queued but not read (the earlier bursts read theirs
            // before the next begins): nine events beyond the timed launches, per job (a
            // stream each).
            let events = count("event on a created stream");
            assert_eq!(
                events,
                timed + 9 * made,
                "{case}: {events} events, {launched} launches, {timed} timed, {made} jobs"
            );
        } else {
            assert_eq!((made, captured, launched), (0, 0, 0), "{case}: {seen:?}");
            assert_eq!(count("event on a created stream"), 0, "{case}: {seen:?}");
        }
    }
}

/// Graph mode sizes its batch by the time per launch inside a graph (a single launch's time
/// includes the CPU's launch latency): a 20 µs kernel gets 2000 / 20 = 100 launches, rounded
/// down to a power of two, for samples of at most 2 ms. The settling warm-up compares the
/// placements in graphs of an eighth of that, at least 16 launches (a graph's instantiation
/// costs by the launch): one graph of the whole batch is made, the chosen placement's.
#[test]
fn graph_mode_sizes_its_batch_by_the_time_per_launch_in_a_graph() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let log = gpu.path("calls.log");
    let vars = [("FAKEGPU_LOG", log.to_str().unwrap())];
    let (code, r) = bench(&gpu, &root, "scale", &["--mode", "graph"], &vars);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["launches-per-sample"], 64, "{r}");
    let seen = calls(&log);
    let graphs = |n: u32| {
        let line = format!("a graph of {n} launches");
        seen.iter().filter(|c| **c == line).count()
    };
    // The sizing graph and one per placement (16) of 16 launches, the empty graph, and
    // of 64 the four fastest placements', one for each of the four bursts.
    assert_eq!((graphs(16), graphs(0), graphs(64)), (17, 1, 4), "{seen:?}");
    let starts: Vec<usize> = serde_json::from_value(r["burst-starts"].clone()).unwrap();
    assert_eq!(starts.len(), 3, "{r}");
    // And the chains' lead: at least 100 us of the kernel (5 or 6 launches, by the time
    // per launch measured).
    let leads: Vec<_> = seen
        .iter()
        .filter_map(|c| c.strip_prefix("a graph of ")?.strip_suffix(" launches"))
        .filter(|n| !["0", "16", "64"].contains(n))
        .collect();
    assert!(matches!(leads[..], ["5"] | ["6"]), "{leads:?}");
    // Samples of the whole batch are divided by the whole batch.
    let median = r["summary"]["median"].as_f64().unwrap();
    assert!((19.9..=20.1).contains(&median), "{median} us: {r}");
    // Every graph instantiated is destroyed with the job.
    let count = |name: &str| seen.iter().filter(|c| *c == name).count();
    assert_eq!(
        count("cuGraphInstantiateWithFlags"),
        count("cuGraphExecDestroy"),
        "{seen:?}"
    );
}

/// Before each of graph mode's four bursts the burst's graph runs untimed for about
/// `REPRO_TIMING_BURST_REWARM_MS` of GPU time (25 ms by default), and at least once: for a
/// 20 us kernel in graphs of 64 launches (1.28 ms), 20 launches a burst (13 before the first,
/// sized by the longest sample before there are samples), against one with the setting 0.
#[test]
fn a_bursts_rewarm_takes_the_set_gpu_time_and_at_least_one_launch() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let log = gpu.path("calls.log");
    let mut launched = Vec::new();
    for rewarm in ["", "0"] {
        let _ = std::fs::remove_file(&log);
        let vars = [
            ("FAKEGPU_LOG", log.to_str().unwrap()),
            ("REPRO_TIMING_BURST_REWARM_MS", rewarm),
        ];
        let (code, r) = bench(&gpu, &root, "scale", &["--mode", "graph"], &vars);
        assert_eq!(code, 0, "{r}");
        assert_eq!(r["launches-per-sample"], 64, "{r}");
        let seen = calls(&log);
        let count = |name: &str| seen.iter().filter(|c| *c == name).count();
        launched.push((
            count("cuGraphLaunch"),
            count("timed graph launch"),
            r["samples"].as_array().map_or(0, Vec::len),
        ));
    }
    let [(all, timed, n), (all0, timed0, n0)] = launched[..] else {
        unreachable!()
    };
    // The launches neither timed nor re-warming (uploads, leads, settling) are the same in
    // both; the samples may differ in number, and each is one timed launch.
    let rewarm = (all - timed) as i64 - (all0 - timed0) as i64;
    assert!(
        (66..=72).contains(&rewarm),
        "{rewarm} more untimed launches by default ({all}, {timed} timed, {n} samples; \
         {all0}, {timed0}, {n0} with 0 ms)"
    );
}

/// `repro replay` of a result, its driver calls logged to `log`; it must re-time (exit 0,
/// or 7 where the times differ).
fn replay_logged(gpu: &FakeGpu, root: &Path, result: &Value, log: &Path) -> std::process::Output {
    let id = result["id"].as_str().unwrap();
    let out = gpu
        .cmd(&[("FAKEGPU_LOG", log.to_str().unwrap())])
        .arg("-C")
        .arg(root)
        .args(["replay", id, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 7),
        "{}\n{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A `REPRO_TIMING_*` setting reaches the worker in the job (not through its environment),
/// is recorded in the result and makes another experiment; a replay times as recorded.
#[test]
fn timing_settings_travel_with_the_job_into_the_record_and_its_replay() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let log = gpu.path("calls.log");
    // The pilot graphs (of 16 launches) made since the last look.
    let pilots = |log: &Path| {
        let n = calls(log)
            .iter()
            .filter(|c| *c == "a graph of 16 launches")
            .count();
        let _ = std::fs::remove_file(log);
        n
    };
    let vars = [("FAKEGPU_LOG", log.to_str().unwrap())];
    let (code, plain) = bench(&gpu, &root, "scale", &["--mode", "graph"], &vars);
    assert_eq!(code, 0, "{plain}");
    assert!(plain.get("timing-settings").is_none(), "{plain}");
    // The sizing graph and 16 placements' pilots.
    assert_eq!(pilots(&log), 17);
    let vars = [
        ("FAKEGPU_LOG", log.to_str().unwrap()),
        ("REPRO_TIMING_PLACEMENTS", "2"),
    ];
    let (code, two) = bench(&gpu, &root, "scale", &["--mode", "graph"], &vars);
    assert_eq!(code, 0, "{two}");
    assert_eq!(
        pilots(&log),
        3,
        "the sizing graph and two placements' pilots"
    );
    assert_eq!(
        two["timing-settings"],
        serde_json::json!({"REPRO_TIMING_PLACEMENTS": "2"}),
        "{two}"
    );
    assert_ne!(
        two["key"], plain["key"],
        "another way of timing, another experiment"
    );
    // The replay times as recorded, whatever this environment says.
    let out = replay_logged(&gpu, &root, &two, &log);
    assert_eq!(pilots(&log), 3, "{}", String::from_utf8_lossy(&out.stderr));
}

/// The two points' results of a graph-mode sweep of `scale` (n = 4096 and 8192), which
/// must succeed.
fn graph_sweep(gpu: &FakeGpu, root: &Path, vars: &[(&str, &str)]) -> Vec<Value> {
    let (code, sweep) = bench_all(
        gpu,
        root,
        "scale",
        &["--mode", "graph", "--param", "n=4096,8192"],
        vars,
    );
    assert_eq!(code, 0, "{sweep}");
    let results = sweep["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 2, "{sweep}");
    results
}

/// REPRO_TIMING_PROCESSES=3: the samples are taken in three worker processes, pooled into
/// one result that says so, recorded as another experiment, and replayed the same way; a
/// sweep's points reuse the three workers.
#[test]
fn a_measurement_split_between_processes_pools_them() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let log = gpu.path("calls.log");
    // Processes that started the driver since the last look.
    let processes = |log: &Path| {
        let n = calls(log).iter().filter(|c| *c == "process").count();
        let _ = std::fs::remove_file(log);
        n
    };
    let at = log.to_str().unwrap();
    let plain = |gpu: &FakeGpu| {
        let (code, one) = bench(
            gpu,
            &root,
            "scale",
            &["--mode", "graph"],
            &[("FAKEGPU_LOG", at)],
        );
        assert_eq!(code, 0, "{one}");
        one
    };
    // The first bench also fills the cache of device facts (starting the driver itself).
    plain(&gpu);
    processes(&log);
    let one = plain(&gpu);
    assert!(one.get("processes").is_none(), "{one}");
    let alone = processes(&log);
    let vars = [("FAKEGPU_LOG", at), ("REPRO_TIMING_PROCESSES", "3")];
    let (code, three) = bench(&gpu, &root, "scale", &["--mode", "graph"], &vars);
    assert_eq!(code, 0, "{three}");
    assert_eq!(three["processes"], 3, "{three}");
    assert_eq!(three["verdict"], "ok", "{three}");
    assert_eq!(processes(&log), alone + 2, "two more workers");
    assert_eq!(
        three["timing-settings"],
        serde_json::json!({"REPRO_TIMING_PROCESSES": "3"}),
        "{three}"
    );
    assert_ne!(three["key"], one["key"], "another way of timing");
    // Each process takes at least its share of the minimum samples.
    let n = three["samples"].as_array().unwrap().len();
    assert!(n >= 12, "{n} samples: {three}");
    let median = three["summary"]["median"].as_f64().unwrap();
    assert!((19.8..=20.2).contains(&median), "{median} us: {three}");
    // A sweep's two points: still three workers in all.
    let results = graph_sweep(&gpu, &root, &vars);
    assert!(results.iter().all(|r| r["processes"] == 3), "{results:?}");
    assert_eq!(
        processes(&log),
        alone + 2,
        "the same three workers for both points"
    );
    // The replay times as recorded, in three processes, whatever this environment says.
    let out = replay_logged(&gpu, &root, &three, &log);
    assert!(
        processes(&log) >= 3,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A device that takes one context at a time (exclusive-process compute mode) refuses
/// every worker a context but the one that made its own first: the others are ended and the
/// refused job runs again, and from then on each process of a split measurement starts
/// after the one before ends; nothing fails, and each point is still three processes.
#[test]
fn a_split_measurement_on_an_exclusive_device_takes_one_process() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let lock = gpu.path("exclusive.lock");
    let vars = [
        ("FAKEGPU_EXCLUSIVE", lock.to_str().unwrap()),
        ("REPRO_TIMING_PROCESSES", "3"),
    ];
    for r in graph_sweep(&gpu, &root, &vars) {
        assert_eq!(r["verdict"], "ok", "{r}");
        assert_eq!(r["processes"], 3, "{r}");
        assert!(!r["samples"].as_array().unwrap().is_empty(), "{r}");
    }
}

/// A CUDA call that fails while graph mode makes its graphs (a pilot's instantiation) or
/// samples them (a graph's launch) ends the job, and every graph instantiated until then is
/// destroyed: a reused worker keeps its context across jobs.
#[test]
fn graphs_made_before_a_failure_are_destroyed() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let log = gpu.path("calls.log");
    // The 5th instantiation is the 4th placement's pilot; the 60th graph launch is in the
    // settling warm-up, after every graph but the chosen one's was made. The 20th and 30th
    // launches are the empty graph's cost being taken (after the sizing graph's four
    // launches, eight leads and then 21 empty graphs queued at once): graphs still queued
    // when it fails are run before they are destroyed.
    for fail in [
        "cuGraphInstantiateWithFlags#5",
        "cuGraphLaunch#60",
        "cuGraphLaunch#20",
        "cuGraphLaunch#30",
    ] {
        let _ = std::fs::remove_file(&log);
        let vars = [
            ("FAKEGPU_LOG", log.to_str().unwrap()),
            ("FAKEGPU_FAIL", fail),
        ];
        let (code, r) = bench(&gpu, &root, "scale", &["--mode", "graph"], &vars);
        assert_ne!(code, 0, "{fail}: {r}");
        let seen = calls(&log);
        let count = |name: &str| seen.iter().filter(|c| *c == name).count();
        let made = count("cuGraphInstantiateWithFlags") - usize::from(fail.contains("Instantiate"));
        assert!(made >= 4, "{fail}: {seen:?}");
        assert_eq!(made, count("cuGraphExecDestroy"), "{fail}: {seen:?}");
        let unordered: Vec<_> = seen.iter().filter(|c| c.starts_with("unordered")).collect();
        assert!(unordered.is_empty(), "{fail}: {unordered:?} in {seen:?}");
    }
}

/// A sweep's later point counts the GPU time of the point before (its worker busy until
/// moments earlier) toward its warm-up: with `--warmup 1500ms` the first point warms up
/// for 1.5 s, the second for the least more, 30 ms.
#[test]
fn a_later_point_counts_the_point_befores_gpu_time_toward_its_warm_up() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let out = gpu
        .cmd(&[])
        .arg("-C")
        .arg(&root)
        .args(["bench", "--json", "scale", "--param", "n=1024,2048"])
        .args(["--mode", "cold", "--min-time", "30ms", "--warmup", "1500ms"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    let warm = |r: &Value| {
        r["phases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == "warm-up")
            .map(|p| p["ms"].as_f64().unwrap())
            .sum::<f64>()
    };
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{v}");
    let (first, second) = (warm(&results[0]), warm(&results[1]));
    assert!(first >= 1500.0, "first point warmed up {first} ms: {v}");
    assert!(second < 750.0, "second point warmed up {second} ms: {v}");
    // The record says how much was counted: the first point's whole busy time.
    assert!(results[0].get("warmup-credit-ms").is_none(), "{v}");
    let credit = results[1]["warmup-credit-ms"].as_f64().unwrap_or(0.0);
    assert!(credit >= 1500.0, "credit {credit} ms: {v}");
}

/// A kernel that traps leaves its context broken (the fake's error is sticky, as a real
/// GPU's is): in a reused worker that would make every later commit crash too. The trap is
/// a verdict for its own commit only; the next job starts in a fresh worker, so the good
/// commits after a trapping bad end are still good and the culprit is right.
#[test]
fn a_trap_in_a_reused_worker_is_a_verdict_for_its_commit_only() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let ids = history(&root, |t| {
        format!("__device__ int fakegpu_trap_scale;\n{t}")
    });
    let log = gpu.path("calls.log");
    let vars = [("FAKEGPU_LOG", log.to_str().unwrap())];
    for mode in ["check", "bench"] {
        let _ = std::fs::remove_file(&log);
        let args: &[&str] = if mode == "bench" {
            &["--mode", "bench", "--min-time", "30ms"]
        } else {
            &["--mode", "check"]
        };
        let (code, v) = bisect(&gpu, &root, args, &vars);
        assert_eq!(code, 0, "{mode}: {v}");
        assert_eq!(v["culprit"]["hash"], ids[4].as_str(), "{mode}: {v}");
        let steps = v["steps"].as_array().unwrap();
        let verdict = |i: usize| {
            steps
                .iter()
                .find(|s| s["commit"] == ids[i].as_str())
                .map(|s| s["verdict"].as_str().unwrap().to_string())
        };
        assert_eq!(verdict(3).as_deref(), Some("good"), "{mode}: {v}");
        assert_eq!(verdict(4).as_deref(), Some("bad"), "{mode}: {v}");
        for s in steps.iter().filter(|s| s["verdict"] == "bad") {
            let d = s["detail"].as_str().unwrap_or_default();
            assert!(d.contains("crash"), "{mode}: {s}");
        }
        // A fresh worker after each trapping job, one worker for the good ones.
        let seen = calls(&log);
        let processes = seen.iter().filter(|c| *c == "process").count();
        let bad = steps.iter().filter(|s| s["verdict"] == "bad").count();
        assert!(
            processes > bad,
            "{mode}: {processes} processes, {bad} traps"
        );
        assert!(
            processes <= bad + 3,
            "{mode}: {processes} processes, {bad} traps"
        );
    }
}

/// With two GPUs, each commit's processes are spread over both and each GPU judges its
/// samples against its own baseline of the good end: GPU 1 is 10% slower than GPU 0 here,
/// which must not read as a regression, while the commit that makes the kernel 25% slower
/// is found on both.
#[test]
fn bisect_bench_on_two_gpus_judges_each_against_its_own_baseline() {
    let Some((gpu, _tmp, root)) = setup(&kernel(160_000, "")) else {
        return;
    };
    let ids = history(&root, |t| {
        t.replace("fakegpu_ns_160000", "fakegpu_ns_200000")
    });
    let vars = [("FAKEGPU_COUNT", "2"), ("FAKEGPU_TIME_SCALE_1", "1.1")];
    let args = ["--mode", "bench", "--min-time", "30ms", "--devices", "0,1"];
    let (code, v) = bisect(&gpu, &root, &args, &vars);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["culprit"]["hash"], ids[4].as_str(), "{v}");
    let steps = v["steps"].as_array().unwrap();
    for s in steps {
        let m = s["median"].as_f64().unwrap_or_else(|| panic!("{s}"));
        let bad = s["verdict"] == "bad";
        // Both GPUs measured: the median of the medians lies between the two cards' times.
        let (fast, slow) = if bad { (200.0, 220.0) } else { (160.0, 176.0) };
        assert!(m > fast * 1.01 && m < slow * 0.99, "{s}");
        if bad {
            let d = s["detail"].as_str().unwrap();
            assert!(d.contains("GPU 0: bad") && d.contains("GPU 1: bad"), "{s}");
        }
    }
    let good_middle = steps
        .iter()
        .find(|s| s["commit"] == ids[3].as_str())
        .unwrap();
    assert_eq!(good_middle["verdict"], "good", "{good_middle}");
}

/// Every buffer type and initialisation, and every scalar type, reach the kernel: the inputs
/// filled, the outputs poisoned, written, read back and compared per type.
#[test]
fn every_buffer_and_scalar_type_is_filled_passed_and_compared() {
    let params = "void* a, void* b, void* c, void* d, void* e, void* o1, void* o2, void* o3, \
                  void* o4, void* o5, void* o6, void* o7, void* o8, void* o9, int s1, \
                  unsigned s2, long long s3, unsigned long long s4, float s5, double s6, \
                  unsigned char s7";
    let source = format!(
        "__device__ int fakegpu_ns_5000;\n\
         extern \"C\" __global__ void dt({params}) {{}}\n\
         extern \"C\" __global__ void dt_ref({params}) {{}}\n"
    );
    let Some((gpu, _tmp, root)) = setup(&source) else {
        return;
    };
    let mut args = vec![
        r#"{ name = "a", buffer = "f16", count = "n", init = "zeros" }"#.to_string(),
        r#"{ name = "b", buffer = "bf16", count = "n", init = "constant", mean = 1.5 }"#.into(),
        r#"{ name = "c", buffer = "f32", count = "n", init = "iota" }"#.into(),
        r#"{ name = "d", buffer = "f64", count = "n", init = "uniform", low = -1.0, high = 1.0 }"#
            .into(),
        r#"{ name = "e", buffer = "i32", count = "n", init = "normal", std = 3.0, seed = 7 }"#
            .into(),
    ];
    for (i, t) in [
        "f16", "bf16", "f32", "f64", "i32", "u32", "i64", "u64", "u8",
    ]
    .iter()
    .enumerate()
    {
        args.push(format!(
            r#"{{ name = "o{}", buffer = "{t}", count = "n", output = true }}"#,
            i + 1
        ));
    }
    for (i, t) in ["i32", "u32", "i64", "u64", "f32", "f64", "u8"]
        .iter()
        .enumerate()
    {
        args.push(format!(
            r#"{{ name = "s{}", scalar = "{t}", value = "n" }}"#,
            i + 1
        ));
    }
    let recipe = format!(
        "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"dt\", \"dt_ref\"]\n\
         target = \"sm_90\"\noutputs = [\"ptx\"]\n[params]\nn = 100\n[run]\nkernel = \"dt\"\n\
         grid = 1\nblock = 128\nargs = [\n  {}\n]\n[check]\nkernel = \"dt_ref\"\n",
        args.join(",\n  ")
    );
    std::fs::write(root.join("recipes/dt.toml"), recipe).unwrap();
    let (code, r) = bench(&gpu, &root, "dt", &["--mode", "hot"], &[]);
    assert_eq!((code, &r["verdict"]), (0, &Value::from("ok")), "{r}");
    let checks = r["check"].as_array().unwrap();
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8", "o9"]
    );
    for c in checks {
        assert_eq!(c["elements"], 100, "{c}");
        assert_eq!(
            (&c["mismatches"], &c["unwritten"]),
            (&0.into(), &0.into()),
            "{c}"
        );
    }
    let m = median(&r);
    assert!((4.97..=5.03).contains(&m), "median {m} µs");
    // Outputs the reference writes and the kernel writes otherwise: every type compared.
    std::fs::write(
        root.join("k.cu"),
        format!("__device__ int fakegpu_wrong_dt;\n{source}"),
    )
    .unwrap();
    let (code, r) = bench(&gpu, &root, "dt", &["--mode", "hot"], &[]);
    assert_eq!((code, &r["verdict"]), (1, &Value::from("wrong")), "{r}");
    for c in r["check"].as_array().unwrap() {
        assert_eq!(c["mismatches"], 100, "{c}");
        assert_eq!(c["unwritten"], 0, "{c}");
    }
}

/// Roofline figures on the fake: the first bench of a recipe with `[work]` calibrates the
/// device once (repro's copy and FMA kernels, compiled by NVRTC and run through the GPU
/// child; the fake times each launch of a module without a token at 10 µs), records the
/// fraction of the measured peak in the result and prints it in one line; the peaks are
/// cached for the boot (a second bench does not calibrate again) and `repro env capture`
/// shows them. A recipe without `[work]` never calibrates.
#[test]
fn bench_shows_the_fraction_of_the_measured_peak() {
    let Some((gpu, _tmp, root)) = setup(&kernel(100, "")) else {
        return;
    };
    let work = recipe(true).replace("n = 4096", "n = 40960")
        + "[work]\nbytes = \"8 * n\"\nflops = \"n\"\n";
    std::fs::write(root.join("recipes/work.toml"), work).unwrap();
    // 4 SMs and 4 MiB of L2: the copy moves 2 x 64 MiB in 10 µs (13422 GB/s), the FMA
    // kernel does 2 x 128 x 1024 FLOPs in each of 64 x 256 threads in 10 µs (429 TFLOP/s).
    let vars = [("FAKEGPU_SMS", "4"), ("FAKEGPU_L2_KIB", "4096")];
    let run = |args: &[&str]| {
        let out = gpu
            .cmd(&vars)
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        (stdout(&out), err)
    };
    let bench_args = ["bench", "work", "--min-time", "30ms", "--warmup", "10ms"];
    let (out, err) = run(&bench_args);
    assert!(err.contains("calibrating device 0"), "{err}");
    // 8 x 40960 bytes in 100 ns: 3277 GB/s, 24% of 13422.
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("memory-bound:"))
        .unwrap_or_else(|| panic!("no roofline line: {out}\n{err}"));
    assert_eq!(
        line.trim(),
        "memory-bound: 24% of measured peak DRAM bandwidth (3.3 of 13.4 TB/s)"
    );
    let mut json_args = bench_args.to_vec();
    json_args.insert(1, "--json");
    let (out, err) = run(&json_args);
    assert!(!err.contains("calibrating"), "calibrated twice: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = &v["results"][0]["throughput"]["roofline"];
    assert_eq!(r["bound"], "memory", "{v}");
    let fraction = r["fraction"].as_f64().unwrap();
    assert!((fraction - 3276.8 / 13421.77).abs() < 0.01, "{r}");
    let peak = r["peaks"]["dram-gb-per-s"].as_f64().unwrap();
    assert!((peak / 13421.77 - 1.0).abs() < 0.01, "{r}");
    let flops = r["peaks"]["fp32-tflops"].as_f64().unwrap();
    assert!((flops / 429.5 - 1.0).abs() < 0.01, "{r}");
    // The record keeps it: `show --json` of the result.
    let id = v["results"][0]["id"].as_str().unwrap().to_string();
    let (shown, _) = run(&["--json", "show", &id]);
    assert!(shown.contains("\"roofline\""), "{shown}");
    let (env, _) = run(&["env", "capture"]);
    assert!(env.contains("measured peaks [0]: DRAM 13"), "{env}");
    // No [work]: nothing to judge, no calibration asked for.
    gpu.forget_devices();
    let (_, err) = run(&[
        "bench",
        "scale_cubin",
        "--min-time",
        "30ms",
        "--warmup",
        "10ms",
    ]);
    assert!(!err.contains("calibrating"), "{err}");
}

/// A result whose parameters, launch or arguments are not what its recipe gives at them
/// (a claim of n = 1M holding the run of n = 4096) is refused by replay, naming the field,
/// before anything is re-timed; the true record still replays.
#[test]
fn a_record_whose_claim_is_not_its_recipes_run_is_refused_by_replay() {
    let Some((gpu, _tmp, root)) = setup(&kernel(20_000, "")) else {
        return;
    };
    let (code, res) = bench(&gpu, &root, "scale", &[], &[]);
    assert_eq!(code, 0, "{res}");
    let id = res["id"].as_str().unwrap().to_string();
    let store = repro::store::Store::at(root.join(".repro"));
    let rec = store.get_record("results", &id).unwrap().unwrap();
    let replay = |id: &str| {
        let out = gpu
            .cmd(&[])
            .arg("-C")
            .arg(&root)
            .args(["replay", id])
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let (code, text) = replay(&id);
    assert!(code == 0 || code == 7, "{text}");
    // Each forgery is filed under the ID its content hashes to, as anyone can.
    let forge = |edit: &dyn Fn(&mut Value)| {
        let mut r = rec.clone();
        let o = r.as_object_mut().unwrap();
        o.remove("id");
        o.remove(repro::store::SEAL);
        edit(&mut r);
        let forged = repro::keys::key_of(&r);
        store.put_record("results", &forged, &r).unwrap();
        forged
    };
    for (edit, says) in [
        (
            &(|r: &mut Value| r["params"]["n"] = serde_json::json!(1_048_576))
                as &dyn Fn(&mut Value),
            "its `launch` is",
        ),
        (
            &|r: &mut Value| r["launch"]["grid"] = serde_json::json!([1, 1, 1]),
            "its `launch` is",
        ),
        (
            &|r: &mut Value| r["args"][1]["count"] = serde_json::json!(8),
            "its `args` are not what the recipe gives",
        ),
        (
            &|r: &mut Value| r["params"]["m"] = serde_json::json!(3),
            "its `params` name m, n where the recipe's [params] name n",
        ),
    ] {
        let forged = forge(edit);
        let (code, text) = replay(&forged);
        assert_eq!(code, 1, "{says}: {text}");
        assert!(text.contains(says), "{says}: {text}");
        assert!(text.contains("nothing was run"), "{text}");
    }
}
