//! `repro demo` end to end: CI runs the whole pipeline on the embedded history.

use crate::common;

use common::{has_gpu, nvrtc_available, repro};
use predicates::prelude::*;
use serde_json::Value;

#[test]
fn the_demo_finds_what_its_history_hides() {
    if !nvrtc_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let keep = tmp.path().join("kept");
    let out = repro(tmp.path())
        .args(["demo", "--json", "--keep"])
        .arg(&keep)
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["ok"], true);
    assert_eq!(
        v["build-break"]["subject"],
        "Tidy vector_add (breaks the build)"
    );
    assert_eq!(
        v["build-fix"]["subject"],
        "Fix the missing semicolon in vector_add"
    );
    assert_eq!(v["bundle"]["verified"], true);
    assert_eq!(v["replay"], "reproduced");
    if has_gpu() {
        assert_eq!(
            v["wrong-result"]["subject"],
            "Shorten vector_add's bounds check (wrong last element)"
        );
        assert_eq!(
            v["slowdown"]["subject"],
            "More iterations in spin (3% slower)"
        );
    } else {
        assert_eq!(v["wrong-result"], "needs a GPU");
    }
    // Kept: the repository and the bundle are there, and the repository is a real one.
    assert!(keep.join("demo-repo/.git").is_dir());
    assert!(keep.join("demo-bundle.tar.zst").is_file());
    repro(tmp.path())
        .arg("-C")
        .arg(keep.join("demo-repo"))
        .args(["log"])
        .assert()
        .success();
    repro(tmp.path())
        .args(["bundle", "verify"])
        .arg(keep.join("demo-bundle.tar.zst"))
        .assert()
        .success();
    // A second demo into the same place refuses to overwrite it.
    repro(tmp.path())
        .args(["demo", "--keep"])
        .arg(&keep)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already exists"));
}

#[test]
fn the_human_demo_narrates_each_step_and_ends_with_a_summary() {
    if !nvrtc_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    repro(tmp.path())
        .arg("demo")
        .timeout(std::time::Duration::from_secs(600))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "==> repro env capture / lock / check",
        ))
        .stdout(predicate::str::contains("==> repro bisect --mode build"))
        .stdout(predicate::str::contains("first bad build:"))
        .stdout(predicate::str::contains("replay of build"))
        .stdout(predicate::str::contains("summary: found the build break"));
}

#[test]
fn the_demo_summary_snapshot() {
    // The narration differs on a GPU machine (it runs the GPU bisections there).
    if has_gpu() {
        common::skip("needs a machine without a GPU: the snapshot is of the CPU narration");
        return;
    }
    if !nvrtc_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = repro(tmp.path())
        .arg("demo")
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    insta::with_settings!({filters => vec![
        (r"[0-9a-f]{12}", "[hash]"),
        (r"/[^\s]*/(demo-repo|demo-bundle\.tar\.zst)", "[dir]/$1"),
        (r"in [0-9.]+ s", "in [secs] s"),
        (r"NVRTC: [0-9.]+", "NVRTC: [version]"),
        // The counts depend on the machine; the check's verdict does not.
        (r"\(\d+ exact, \d+ warn\)", "([n] exact, [n] warn)"),
        (r"\(\d+ ok, \d+ warnings\)", "([n] ok, [n] warnings)"),
        (r"\(\d+ files\)", "([n] files)"),
        (r"\(\d+ evaluations\)", "([n] evaluations)"),
    ]}, {
        insta::assert_snapshot!("demo_human", text);
    });
}

/// The demo on a machine without NVRTC: it installs the pinned NVRTC itself (here from a
/// wheel directory, `REPRO_WHEELHOUSE`) and goes on; where the wheel cannot be had it stops
/// with the environment's exit code and says what to do.
#[test]
fn the_demo_installs_nvrtc_where_there_is_none_or_says_it_cannot() {
    let tmp = tempfile::tempdir().unwrap();
    let bare = |cache: &std::path::Path| {
        let mut c = repro(cache);
        c.env_remove("REPRO_NVRTC")
            .env_remove("CUDA_HOME")
            .env_remove("CUDA_PATH")
            .env_remove("LD_LIBRARY_PATH");
        c
    };
    let cache = tmp.path().join("cache");
    if bare(&cache)
        .args(["toolchain", "which"])
        .output()
        .unwrap()
        .status
        .success()
    {
        common::skip("needs a machine where NVRTC cannot be found without REPRO_NVRTC");
        return;
    }
    // No wheel to be had: the demo stops after the environment step.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = bare(&cache)
        .arg("demo")
        .env("REPRO_WHEELHOUSE", &empty)
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert!(stdout.contains("NVRTC: not found"), "{stdout}");
    assert!(
        stdout.contains("==> repro toolchain install\n  could not install NVRTC: "),
        "{stdout}"
    );
    assert!(!stdout.contains("==> repro bisect"), "{stdout}");
    assert!(
        stderr.contains("error: the demo needs NVRTC to build kernels")
            && stderr.contains("hint: run `repro toolchain install`, or set REPRO_NVRTC"),
        "{stderr}"
    );
    // With the pinned wheel at hand: installed (its digest checked), and the demo finds the
    // build break with it.
    let need = [("nvidia-cuda-nvrtc".to_string(), "13.0.88".to_string())];
    let wh = match common::wheels(&need) {
        Ok(d) => d,
        Err(why) => {
            assert!(
                std::env::var_os("REPRO_TEST_REQUIRE_WHEELHOUSE").is_none(),
                "{why}"
            );
            common::skip(&format!("needs NVIDIA's NVRTC wheel through pip: {why}"));
            return;
        }
    };
    let out = bare(&cache)
        .args(["demo", "--json"])
        .env("REPRO_WHEELHOUSE", &wh)
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["toolchain"]["installed"], true, "{v}");
    assert_eq!(
        v["toolchain"]["detail"]["toolchain"], "nvrtc@13.0.88",
        "{v}"
    );
    assert_eq!(v["toolchain"]["detail"]["wheels"][0]["pinned"], true, "{v}");
    assert_eq!(
        v["build-break"]["subject"], "Tidy vector_add (breaks the build)",
        "{v}"
    );
    assert!(has_tree(&cache, "nvrtc-13.0.88"));
}

/// Whether the toolchain cache holds a tree of `release` (`nvrtc-13.0.88`): trees are named
/// by release and the digest of their wheels.
fn has_tree(cache: &std::path::Path, release: &str) -> bool {
    std::fs::read_dir(cache.join("repro/toolchains"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{release}-"))
                && e.path().is_dir()
        })
}

/// The demo runs each step's work in its own process (parsed as the command line, typed
/// outcomes), never `repro` again as a child whose printed JSON it reads back; the GPU
/// children the bisection itself starts are the bisection's business.
#[test]
fn the_demo_starts_no_repro_commands_of_its_own() {
    let src = std::fs::read_to_string(common::crate_dir().join("src/app/demo.rs")).unwrap();
    for banned in [
        "current_exe",
        "process::Cmd",
        "Cmd::new",
        "serde_json::from_",
    ] {
        assert!(!src.contains(banned), "src/app/demo.rs uses {banned}");
    }
}
