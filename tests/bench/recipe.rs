//! `repro bench RECIPE` errors that come before any kernel runs, so they hold on a machine
//! without a GPU too: a warm-up given as a count, a recipe built for several targets where
//! this GPU's is unknown, [run] args that do not match the kernel's parameters (read from
//! the real PTX NVRTC writes), and a kernel that does not compile (exit 5, with the
//! compiler's log).

use crate::common;

use std::path::Path;

use common::{git, kernel_repo, nvrtc_available, repro};

fn bench(tmp: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn edit(root: &Path, path: &str, from: &str, to: &str) {
    let p = root.join(path);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.contains(from), "{path} lacks {from}");
    std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    git(root, &["commit", "-qam", &format!("edit {path}")]);
}

#[test]
fn a_recipe_bench_refuses_a_warmup_count_and_an_unknown_target() {
    let (tmp, root) = kernel_repo();
    let (code, out, err) = bench(tmp.path(), &root, &["vector_add", "--warmup", "3"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("--warmup 3: a recipe bench warms up for a time, not a number of runs"),
        "{err}"
    );
    assert!(err.contains("`--warmup 200ms`"), "{err}");

    // Two targets, and no GPU here (or one of neither kind) to pick one by.
    if common::has_gpu() {
        return;
    }
    let (code, out, err) = bench(tmp.path(), &root, &["wmma_gemm_nvcc"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains(
            "recipe `wmma_gemm_nvcc` builds for sm_89, sm_90, and none of them runs on GPU 0 (compute capability unknown)"
        ),
        "{err}"
    );
    assert!(err.contains("add this GPU's target to `targets`"), "{err}");
}

#[test]
fn run_args_that_do_not_match_the_kernel_are_named_after_the_build() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    // Drop the scalar `n`: the kernel takes four parameters, [run] now passes three.
    edit(
        &root,
        "recipes/vector_add.toml",
        "  { name = \"n\", scalar = \"i32\", value = \"n\" },\n",
        "",
    );
    let (code, out, err) = bench(tmp.path(), &root, &["vector_add", "--param", "n=1048576"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("vector_add"), "{err}");
    assert!(
        err.contains("make [run] args match the kernel's parameters, in order"),
        "{err}"
    );
    // Nothing was measured or recorded.
    assert!(!root.join(".repro/results").exists());
}

#[test]
fn a_kernel_that_does_not_compile_is_exit_5_with_the_compilers_log() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    edit(
        &root,
        "kernels/vector_add.cu",
        "extern \"C\" __global__ void vector_add_ref",
        "this is not CUDA;\nextern \"C\" __global__ void vector_add_ref",
    );
    let (code, out, err) = bench(tmp.path(), &root, &["vector_add"]);
    assert_eq!(code, 5, "{out}{err}");
    assert!(
        err.contains("recipe `vector_add` does not build (key "),
        "{err}"
    );
    let log: Vec<&str> = err.lines().filter(|l| l.starts_with("  | ")).collect();
    assert!(
        log.iter()
            .any(|l| l.contains("vector_add.cu") && l.contains("error")),
        "{err}"
    );
    assert!(!root.join(".repro/results").exists());
}

#[test]
fn a_recipe_bench_without_a_gpu_builds_checks_its_args_then_stops_at_the_driver() {
    if common::has_gpu() {
        common::skip("needs a machine without a GPU: on one this bench runs");
        return;
    }
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let (code, out, err) = bench(tmp.path(), &root, &["vector_add", "--param", "n=4096"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains(
            "error: no NVIDIA driver on this machine: `repro bench RECIPE` runs kernels on a GPU"
        ),
        "{err}"
    );
    assert!(
        err.contains("hint: run it on a GPU machine, use `--command` to benchmark a command, or `repro build` to only build"),
        "{err}"
    );
    // The build came first and is in the store; no result was recorded.
    let builds = std::fs::read_dir(root.join(".repro/builds"))
        .unwrap()
        .count();
    assert!(builds >= 1, "no build record");
    assert!(!root.join(".repro/results").exists());
}

/// `repro gpu-job` reads the job `repro bench` writes; anything else is a usage error that
/// says what the command is, not an internal error.
#[test]
fn a_gpu_job_that_is_not_one_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    for input in ["{garbage", "", "{\"kernel\": 3}"] {
        let out = common::repro(tmp.path())
            .arg("gpu-job")
            .write_stdin(input)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{input:?}: {err}");
        assert!(
            err.contains("the job on stdin does not read as a GPU job"),
            "{input:?}: {err}"
        );
        assert!(!err.contains("bug in repro"), "{input:?}: {err}");
    }
}
