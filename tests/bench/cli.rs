//! `repro bench`, `log`, `show` and `compare` end to end. On CI there is no GPU, so the
//! records, statistics and exports are exercised through the command bench with synthetic
//! samples; recipe errors (expressions, arity) are caught before anything needs a GPU.

use crate::common;

use std::path::Path;

use common::{has_gpu, kernel_repo, nvrtc_available, repo_with, repro};
use predicates::prelude::*;
use serde_json::Value;

/// A script that prints the next value of `values` on each run (a synthetic sample stream).
fn sample_script(root: &Path, name: &str, values: &[f64]) -> String {
    let list = values
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    std::fs::write(root.join(format!("{name}.values")), list).unwrap();
    let script = format!(
        "#!/bin/sh\nset -e\nf={name}.values\nv=$(head -n 1 $f)\ntail -n +2 $f > $f.tmp && mv $f.tmp $f\necho \"{{\\\"ms\\\": $v}}\"\n"
    );
    std::fs::write(root.join(format!("{name}.sh")), script).unwrap();
    format!("sh {name}.sh")
}

/// Deterministic noisy values around `center` (relative spread `spread`).
fn noisy(center: f64, spread: f64, n: usize, seed: u64) -> Vec<f64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x % 10_000) as f64 / 10_000.0 - 0.5;
            (center * (1.0 + spread * u) * 1000.0).round() / 1000.0
        })
        .collect()
}

fn bench(tmp: &Path, root: &Path, cmd: &str, name: &str, extra: &[&str]) -> (i32, Value) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args([
            "bench",
            "--json",
            "--command",
            cmd,
            "--name",
            name,
            "--metric",
            "json:ms",
            "--unit",
            "ms",
        ])
        .args(extra)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

#[test]
fn a_command_bench_records_every_sample_and_its_statistics() {
    let (tmp, root) = repo_with(&[]);
    let values = noisy(100.0, 0.02, 25, 7);
    let cmd = sample_script(&root, "a", &values);
    let (code, v) = bench(tmp.path(), &root, &cmd, "synthetic", &["--runs", "25"]);
    assert_eq!(code, 0, "{v}");
    let r = &v["results"][0];
    assert_eq!(r["verdict"], "ok");
    let got: Vec<f64> = r["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(got, values, "every sample is recorded, in order");
    let mut sorted = values.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(r["summary"]["median"].as_f64().unwrap(), sorted[12]);
    assert_eq!(r["summary"]["min"].as_f64().unwrap(), sorted[0]);
    assert!(
        r["summary"]["ci-low"].as_f64().unwrap() <= sorted[12]
            && sorted[12] <= r["summary"]["ci-high"].as_f64().unwrap()
    );
    assert_eq!(r["fingerprint"]["schema"], 1);
    assert!(r["key"].as_str().unwrap().len() == 64);

    // The record is in the store under its ID, and the store verifies.
    let id = r["id"].as_str().unwrap();
    assert!(root.join(format!(".repro/results/{id}.json")).exists());
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["store", "verify"])
        .assert()
        .success();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["show", &id[..8]])
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("id              {id}")))
        .stdout(predicate::str::contains("samples         25"));
}

#[test]
fn compare_tells_a_slowdown_from_noise() {
    let (tmp, root) = repo_with(&[]);
    let a = sample_script(&root, "a", &noisy(100.0, 0.02, 30, 1));
    let same = sample_script(&root, "same", &noisy(100.0, 0.02, 30, 2));
    let slow = sample_script(&root, "slow", &noisy(110.0, 0.02, 30, 3));
    let id = |cmd: &str, name: &str| {
        bench(tmp.path(), &root, cmd, name, &["--runs", "30"]).1["results"][0]["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (ia, isame, islow) = (id(&a, "k"), id(&same, "k"), id(&slow, "k"));
    let cmp = |x: &str, y: &str| -> Value {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["compare", "--json", "--threshold", "5%", x, y])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let c = cmp(&ia, &islow);
    assert_eq!(c["comparison"]["verdict"], "slower", "{c}");
    assert!((c["comparison"]["ratio"].as_f64().unwrap() - 1.10).abs() < 0.02);
    assert!(c["comparison"]["p"].as_f64().unwrap() < 0.01);
    let c = cmp(&islow, &ia);
    assert_eq!(c["comparison"]["verdict"], "faster");
    let c = cmp(&ia, &isame);
    assert_eq!(c["comparison"]["verdict"], "same", "{c}");

    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args([
            "compare",
            &ia[..10],
            &islow[..10],
            "--export-csv",
            "cmp.csv",
            "--export-markdown",
            "cmp.md",
            "--export-json",
            "cmp.json",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("B is 1.1"))
        .stdout(predicate::str::contains("verdict: slower"));
    let csv = std::fs::read_to_string(root.join("cmp.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3);
    assert!(csv.starts_with("id,name,params,verdict,n,median"));
    assert_eq!(
        std::fs::read_to_string(root.join("cmp.md"))
            .unwrap()
            .lines()
            .count(),
        4
    );
    let j: Value = serde_json::from_slice(&std::fs::read(root.join("cmp.json")).unwrap()).unwrap();
    assert_eq!(j["results"].as_array().unwrap().len(), 2);
}

#[test]
fn log_lists_newest_first_and_filters() {
    let (tmp, root) = repo_with(&[]);
    for (name, c) in [("first", 1.0), ("second", 2.0)] {
        let cmd = sample_script(&root, name, &[c, c, c]);
        bench(tmp.path(), &root, &cmd, name, &["--runs", "3"]);
    }
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["log", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["second", "first"]);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["log", "--json", "--recipe", "first"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["records"].as_array().unwrap().len(), 1);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["log"])
        .assert()
        .success()
        .stdout(predicate::str::is_match("(?m)^KIND +ID +DATE +NAME").unwrap());
    // Prefixes must be unique and hex.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["show", "zzzz"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not a record ID"));
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["show", "0000000"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no record with ID 0000000"));
}

#[test]
fn failing_and_hanging_commands_get_verdicts() {
    let (tmp, root) = repo_with(&[]);
    let (code, v) = bench(
        tmp.path(),
        &root,
        "echo oops >&2; exit 3",
        "fails",
        &["--runs", "3"],
    );
    assert_eq!(code, 1);
    assert_eq!(v["results"][0]["verdict"], "crash");
    assert!(
        v["results"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("exited with code 3: oops")
    );
    let (code, v) = bench(
        tmp.path(),
        &root,
        "sleep 5",
        "hangs",
        &["--runs", "3", "--timeout", "200ms"],
    );
    assert_eq!(code, 1);
    assert_eq!(v["results"][0]["verdict"], "timeout");
    let (code, v) = bench(
        tmp.path(),
        &root,
        "echo not-json",
        "nometric",
        &["--runs", "2"],
    );
    assert_eq!(code, 1);
    assert!(
        v["results"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("stdout is not JSON")
    );
}

#[test]
fn recipe_bench_errors_come_before_the_gpu() {
    let (tmp, root) = repo_with(&[
        (
            "k.cu",
            "extern \"C\" __global__ void k(float* a, int n) { if (threadIdx.x < n) a[threadIdx.x] = 1; }\n",
        ),
        (
            "recipes/r.toml",
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[params]\nn = 256\n[run]\nkernel = \"k\"\ngrid = 1\nblock = \"n\"\nargs = [{ name = \"a\", buffer = \"f32\", count = \"n\", output = true }]\n",
        ),
        (
            "recipes/bad_expr.toml",
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[params]\nn = 256\n[run]\nkernel = \"k\"\ngrid = \"ceil_div(m, 128)\"\nblock = 128\n",
        ),
        (
            "recipes/bad_kernel.toml",
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[run]\nkernel = \"nope\"\ngrid = 1\nblock = 1\n",
        ),
        (
            "recipes/no_run.toml",
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n",
        ),
    ]);
    let run = |args: &[&str]| {
        repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("bench")
            .args(args)
            .assert()
    };
    run(&["bad_expr"])
        .code(2)
        .stderr(predicate::str::contains(
            "recipes/bad_expr.toml:11:8: `[run] grid` uses `m`, which is not a parameter",
        ))
        .stderr(predicate::str::contains("hint: parameters are: n"));
    run(&["bad_kernel"])
        .code(2)
        .stderr(predicate::str::contains(
            "`nope` is not one of the build's entries",
        ));
    run(&["no_run"])
        .code(2)
        .stderr(predicate::str::contains("has no [run] section"));
    // A timing setting that does not read is refused before anything runs, by every
    // command that times a GPU.
    for (cmd, var, value, hint) in [
        (
            vec!["bench", "r"],
            "REPRO_TIMING_PLACEMENTS",
            "abc",
            "hint: set REPRO_TIMING_PLACEMENTS to a whole number from 1 to 64",
        ),
        (
            vec!["bench", "r"],
            "REPRO_TIMING_SETTLE",
            "yes",
            "hint: set REPRO_TIMING_SETTLE to 1 (settle) or 0 (do not)",
        ),
        (
            vec!["bisect", "--recipe", "r", "--mode", "bench"],
            "REPRO_TIMING_GRAPH_US",
            "10",
            "hint: set REPRO_TIMING_GRAPH_US to a number from 100 to 1000000",
        ),
        (
            vec!["replay", "nothing"],
            "REPRO_TIMING_GAP_MS",
            "-5",
            "hint: set REPRO_TIMING_GAP_MS to a number from 0 to 10000",
        ),
        (
            vec!["demo"],
            "REPRO_TIMING_PLACMENTS",
            "8",
            "REPRO_TIMING_DIAG: unset REPRO_TIMING_PLACMENTS",
        ),
    ] {
        repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(&cmd)
            .env(var, value)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!("{var}={value:?} is not ")))
            .stderr(predicate::str::contains(hint));
    }
    // Other commands do not read them.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["log"])
        .env("REPRO_TIMING_PLACEMENTS", "abc")
        .assert()
        .success();
    run(&["r", "--param", "x=3"])
        .code(2)
        .stderr(predicate::str::contains(
            "--param `x`: not a parameter of this recipe (parameters: n)",
        ));
    run(&["r", "--param", "n=2000"])
        .code(2)
        .stderr(predicate::str::contains("block has 2000 threads"));
    if !nvrtc_available() {
        return;
    }
    // The kernel takes (float*, int) and the recipe passes one buffer: caught from the PTX.
    run(&["r"]).code(2).stderr(predicate::str::contains(
        "kernel `k` takes 2 parameters but [run] args gives 1",
    ));
    if !has_gpu() {
        std::fs::write(
            root.join("recipes/r.toml"),
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[params]\nn = 256\n[run]\nkernel = \"k\"\ngrid = 1\nblock = \"n\"\nargs = [{ name = \"a\", buffer = \"f32\", count = \"n\", output = true }, { name = \"n\", scalar = \"i32\", value = \"n\" }]\n",
        )
        .unwrap();
        run(&["r"])
            .code(3)
            .stderr(predicate::str::contains("no NVIDIA driver on this machine"))
            .stderr(predicate::str::contains("--command"));
    }
}

#[test]
fn every_example_recipe_has_a_valid_run_section() {
    if !nvrtc_available() {
        return;
    }
    // Resolving every parameter point, building, and checking arity all happen before the
    // GPU; on a machine without one the bench stops exactly at the driver check.
    let (tmp, root) = kernel_repo();
    for r in [
        "vector_add",
        "reduction",
        "sgemm",
        "softmax",
        "flash_attention",
    ] {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["bench", r, "--check-only"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if has_gpu() {
            assert_eq!(out.status.code(), Some(0), "{r}: {stderr}");
        } else {
            assert_eq!(out.status.code(), Some(3), "{r}: {stderr}");
            assert!(stderr.contains("no NVIDIA driver"), "{r}: {stderr}");
        }
    }
}

#[test]
#[ignore = "needs a GPU: run with --ignored on a GPU machine (benches/gpu_tests.sh)"]
fn gpu_a_trapping_or_hanging_kernel_is_a_verdict_and_the_gpu_stays_usable() {
    common::require_gpu();
    if !nvrtc_available() {
        return;
    }
    let kernel = "extern \"C\" __global__ void good(float* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 2.0f * i; }\n\
                  extern \"C\" __global__ void traps(float* a, int n) { asm(\"trap;\"); }\n\
                  extern \"C\" __global__ void hangs(float* a, int n) { for (;;) { asm volatile(\"nanosleep.u32 1000;\"); } }\n\
                  extern \"C\" __global__ void wrong(float* a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n - 1) a[i] = 2.0f * i; }\n";
    let recipe = |k: &str| {
        format!(
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"good\", \"traps\", \"hangs\", \"wrong\"]\ntarget = \"sm_90\"\n[params]\nn = 4096\n[run]\nkernel = \"{k}\"\ngrid = \"ceil_div(n, 256)\"\nblock = 256\nargs = [{{ name = \"a\", buffer = \"f32\", count = \"n\", output = true }}, {{ name = \"n\", scalar = \"i32\", value = \"n\" }}]\n[check]\nkernel = \"good\"\n"
        )
    };
    let (tmp, root) = repo_with(&[
        ("k.cu", kernel),
        ("recipes/good.toml", &recipe("good")),
        ("recipes/traps.toml", &recipe("traps")),
        ("recipes/hangs.toml", &recipe("hangs")),
        ("recipes/wrong.toml", &recipe("wrong")),
    ]);
    let run = |r: &str, extra: &[&str]| -> (i32, Value) {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["bench", "--json", r, "--min-time", "50ms"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        )
    };
    let (code, v) = run("traps", &[]);
    assert_eq!(code, 1);
    assert_eq!(v["results"][0]["verdict"], "crash", "{v}");
    assert!(
        v["results"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("CUDA_ERROR"),
        "{v}"
    );
    let (code, v) = run("hangs", &["--timeout", "5s"]);
    assert_eq!(code, 1);
    assert_eq!(v["results"][0]["verdict"], "timeout", "{v}");
    let (code, v) = run("wrong", &[]);
    assert_eq!(code, 1);
    assert_eq!(v["results"][0]["verdict"], "wrong", "{v}");
    assert_eq!(
        v["results"][0]["check"][0]["unwritten"], 1,
        "the unwritten last element is caught by the poison"
    );
    // The GPU is still usable after a trap and a killed hang.
    let (code, v) = run("good", &[]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["results"][0]["verdict"], "ok");
    assert!(v["results"][0]["summary"]["median"].as_f64().unwrap() > 0.0);
}

/// Writes an nvbench `--jsonbin` output: one benchmark `copy` with two states whose sample
/// times (seconds, little-endian float32) are `values` µs, in `dir/NAME.json-bin/`.
fn nvbench_file(dir: &Path, name: &str, values: &[f64]) -> String {
    let bin = dir.join(format!("{name}.json-bin"));
    std::fs::create_dir_all(&bin).unwrap();
    let mut states = Vec::new();
    for (i, n) in ["2^10", "2^20"].iter().enumerate() {
        let bytes: Vec<u8> = values
            .iter()
            .flat_map(|v| ((v * 1e-6) as f32).to_le_bytes())
            .collect();
        std::fs::write(bin.join(format!("{i}.bin")), bytes).unwrap();
        states.push(serde_json::json!({
            "name": format!("Device=0 Elements={n}"), "device": 0,
            "axis_values": [{"name": "Elements", "type": "int64", "value": n}],
            "summaries": [{"tag": "nv/json/bin:nv/cold/sample_times", "hint": "file/sample_times",
                "data": [{"name": "filename", "type": "string", "value": format!("{name}.json-bin/{i}.bin")},
                         {"name": "size", "type": "int64", "value": values.len().to_string()}]}],
            "is_skipped": false}));
    }
    let doc = serde_json::json!({"devices": [{"id": 0, "name": "NVIDIA H200"}],
        "benchmarks": [{"name": "copy", "index": 0, "axes": [], "states": states}]});
    std::fs::write(dir.join(format!("{name}.json")), doc.to_string()).unwrap();
    format!("{name}.json")
}

#[test]
fn compare_gates_ci_prints_markdown_and_reads_nvbench() {
    let (tmp, root) = repo_with(&[]);
    let a = sample_script(&root, "a", &noisy(100.0, 0.02, 30, 1));
    let same = sample_script(&root, "same", &noisy(100.0, 0.02, 30, 2));
    let slow = sample_script(&root, "slow", &noisy(110.0, 0.02, 30, 3));
    let id = |cmd: &str| {
        bench(tmp.path(), &root, cmd, "k", &["--runs", "30"]).1["results"][0]["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (ia, isame, islow) = (id(&a), id(&same), id(&slow));
    let compare = |args: &[&str]| {
        repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("compare")
            .args(args)
            .assert()
    };
    // A 10% slowdown fails --fail-on slower at 5%, not at 20%, and not --fail-on faster.
    compare(&[&ia, &islow, "--fail-on", "slower", "--threshold", "5%"])
        .code(1)
        .stdout(predicate::str::contains(
            "FAILED: B is significantly slower",
        ));
    compare(&[&ia, &islow, "--fail-on", "any", "--threshold", "5%"]).code(1);
    compare(&[&ia, &islow, "--fail-on", "slower", "--threshold", "20%"])
        .code(0)
        .stdout(predicate::str::contains("passed"));
    compare(&[&ia, &islow, "--fail-on", "faster"]).code(0);
    compare(&[&islow, &ia, "--fail-on", "faster", "--threshold", "5%"]).code(1);
    compare(&[&ia, &isame, "--fail-on", "any"]).code(0);
    // Without --fail-on a slowdown is reported, not failed.
    compare(&[&ia, &islow]).code(0);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["compare", "--json", &ia, &islow, "--fail-on", "slower"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["failed"], true);
    assert_eq!(v["fail-on"], "slower");
    // Markdown for a pull request: a table with both rows, then the verdict in bold.
    compare(&[&ia, &islow, "--format", "md"])
        .code(0)
        .stdout(predicate::str::starts_with(
            "| | result | name | params | median | 95% CI | n |\n|---|",
        ))
        .stdout(predicate::str::is_match(r"(?m)^\| A \| `[0-9a-f]{12}` \| k \|").unwrap())
        .stdout(predicate::str::contains("**slower**: B is 1.1"));
    compare(&[&ia, &isame, "--format", "nope"]).code(2);

    // nvbench output: two files, one state each picked by name, 10% apart.
    let base = nvbench_file(&root, "base", &noisy(10.0, 0.02, 40, 4));
    let cand = nvbench_file(&root, "cand", &noisy(11.0, 0.02, 40, 5));
    let pick = |f: &str| format!("{f}@Elements=2^20");
    compare(&[&pick(&base), &pick(&cand), "--fail-on", "slower"])
        .code(1)
        .stdout(predicate::str::contains("base.json@Elements=2^20"))
        .stdout(predicate::str::contains("verdict: slower"));
    // Against a result of repro's own (a command bench reporting µs).
    let ours = sample_script(&root, "ours", &noisy(10.0, 0.02, 30, 6));
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args([
            "bench",
            "--json",
            "--command",
            &ours,
            "--name",
            "copy",
            "--metric",
            "json:ms",
            "--unit",
            "us",
            "--runs",
            "30",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours_id = v["results"][0]["id"].as_str().unwrap().to_string();
    compare(&[&pick(&base), &ours_id, "--fail-on", "any"])
        .code(0)
        .stdout(predicate::str::contains("verdict: same"));
    // Several states and no selector; a file that is not nvbench; no sample times.
    compare(&[&base, &ours_id])
        .code(2)
        .stderr(predicate::str::contains("2 states match"))
        .stderr(predicate::str::contains("`copy Device=0 Elements=2^10`"));
    std::fs::write(root.join("other.json"), "{\"results\": []}").unwrap();
    compare(&["other.json", &ours_id])
        .code(2)
        .stderr(predicate::str::contains("is not nvbench JSON output"));
    compare(&["missing.json", &ours_id]).code(2);
}

#[test]
fn command_benches_take_hyperfines_options_and_export_its_json() {
    let (tmp, root) = repo_with(&[]);
    let run = |args: &[&str]| {
        repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("bench")
            .args(args)
            .assert()
    };
    let lines = |f: &str| {
        std::fs::read_to_string(root.join(f))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    // 2 warm-ups and 3 timed runs, each after --prepare.
    run(&[
        "--command",
        "echo x >> count.txt",
        "--name",
        "count",
        "--warmup",
        "2",
        "--runs",
        "3",
        "--prepare",
        "echo p >> prep.txt",
        "--export-json",
        "h.json",
    ])
    .success();
    assert_eq!(lines("count.txt"), 5);
    assert_eq!(lines("prep.txt"), 5);
    let h: Value = serde_json::from_slice(&std::fs::read(root.join("h.json")).unwrap()).unwrap();
    let r = &h["results"][0];
    assert_eq!(r["command"], "echo x >> count.txt");
    assert_eq!(r["times"].as_array().unwrap().len(), 3);
    assert_eq!(r["exit_codes"], serde_json::json!([0, 0, 0]));
    for k in ["mean", "stddev", "median", "user", "system", "min", "max"] {
        assert!(r[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {r}");
    }
    // Times are in seconds: a shell that appends a line takes well under a second.
    assert!(r["mean"].as_f64().unwrap() < 1.0, "{r}");
    assert_eq!(r["repro"]["name"], "count");

    // --min-runs/--max-runs bound the adaptive count.
    std::fs::remove_file(root.join("count.txt")).unwrap();
    run(&[
        "--command",
        "echo x >> count.txt",
        "--min-runs",
        "4",
        "--max-runs",
        "4",
    ])
    .success();
    assert_eq!(lines("count.txt"), 4);

    // A failing --prepare is the bench's failure, named.
    run(&["--command", "true", "--runs", "2", "--prepare", "exit 7"])
        .code(1)
        .stdout(predicate::str::contains("CRASH"));

    // Options that do not apply are errors, not ignored.
    run(&["--command", "true", "--min-runs", "5", "--max-runs", "3"])
        .code(2)
        .stderr(predicate::str::contains("need 2 <= min-runs <= max-runs"));
    run(&["--command", "true", "--warmup", "100ms"])
        .code(2)
        .stderr(predicate::str::contains("a number of runs, not a time"));
    run(&["--command", "true", "--runs", "3", "--min-runs", "2"]).code(2);
    for gpu_only in [
        ["--budget", "1s"],
        ["--min-time", "1s"],
        ["--max-samples", "5"],
        ["--device", "1"],
        ["--mode", "hot"],
    ] {
        run(&["--command", "true", gpu_only[0], gpu_only[1]])
            .code(2)
            .stderr(predicate::str::contains("cannot be used with"));
    }
    run(&["somerecipe", "--min-runs", "3"]).code(2);
    run(&["somerecipe", "--prepare", "true"]).code(2);

    // The same command through hyperfine: every key hyperfine writes, ours writes too.
    let hf = std::process::Command::new("hyperfine")
        .current_dir(&root)
        .args(["--runs", "3", "--export-json", "hf.json", "true"])
        .output();
    match hf {
        Ok(o) if o.status.success() => {
            let theirs: Value =
                serde_json::from_slice(&std::fs::read(root.join("hf.json")).unwrap()).unwrap();
            let keys = |v: &Value| -> Vec<String> {
                v["results"][0]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect()
            };
            let ours = keys(&h);
            for k in keys(&theirs) {
                assert!(
                    ours.contains(&k),
                    "hyperfine writes `{k}`; we do not: {ours:?}"
                );
            }
        }
        _ => common::skip(
            "needs hyperfine for the side-by-side key check (apt-get install hyperfine)",
        ),
    }
}

/// A comparison of two nvbench states of 1M samples each is bounded (it took minutes): it
/// ends in seconds and says that its intervals were bootstrapped from a subsample; a state
/// whose sample file lies outside the JSON's directory is refused with what is wrong.
#[test]
fn compare_of_a_million_nvbench_samples_is_bounded_and_sample_files_stay_beside_the_json() {
    let (tmp, root) = common::repo_with(&[]);
    let a: Vec<f64> = (0..1_000_000)
        .map(|i| 10.0 + f64::from(i % 97) * 0.01)
        .collect();
    let b: Vec<f64> = a.iter().map(|x| x * 1.002).collect();
    let base = nvbench_file(&root, "base", &a);
    let cand = nvbench_file(&root, "cand", &b);
    let start = std::time::Instant::now();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["compare", &format!("{base}@2^20"), &format!("{cand}@2^20")])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
    assert!(
        text.contains("bootstrapped from 10000 of its samples, evenly spaced"),
        "{text}"
    );

    // The sample file named as an absolute path, or out of the directory.
    let doc = std::fs::read_to_string(root.join(&base)).unwrap();
    for (name, says) in [
        ("/proc/self/status", "is not a relative path"),
        (
            "../base.json-bin/1.bin",
            "climbs out of the JSON's directory",
        ),
    ] {
        std::fs::write(
            root.join("evil.json"),
            doc.replace("base.json-bin/1.bin", name),
        )
        .unwrap();
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["compare", "evil.json@2^20", &format!("{cand}@2^20")])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(!err.contains("crash"), "{name}: {err}");
    }
}
