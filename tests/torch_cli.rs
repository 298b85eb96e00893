//! The Python environment and PyTorch extensions end to end: real PyTorch from its wheels in
//! virtual environments the tests make (tests/common `torch_venv`), the real binary, no GPU.

mod common;

use std::path::Path;

use common::{TORCH_NEW, TORCH_OLD, repo_with, repro, torch_venvs};
use serde_json::Value;

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).expect("stdout is JSON")
}

fn capture(cache: &Path, root: &Path, python: &Path) -> Value {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .arg("--python")
        .arg(python)
        .args(["env", "capture", "--json"])
        .assert()
        .success();
    json_of(&out.get_output().stdout)
}

#[test]
fn the_fingerprint_reads_pytorch_numpy_and_every_distribution_from_files() {
    let Some((old, new)) = torch_venvs() else {
        return;
    };
    let (tmp, root) = repo_with(&[("README", "x\n")]);
    let fp = capture(tmp.path(), &root, &old);
    let py = &fp["python"];
    assert_eq!(py["interpreter"], old.display().to_string());
    assert_eq!(py["found-by"], "--python");
    assert!(py["abi-tag"].as_str().unwrap().starts_with("cp3"), "{py}");
    assert_eq!(py["torch"]["version"], format!("{}+cu121", TORCH_OLD.0));
    assert_eq!(py["torch"]["cuda"], "12.1");
    assert_eq!(py["torch"]["cxx11-abi"], false);
    assert_eq!(py["torch"]["cudnn"], "9.1.0.70");
    let archs = py["torch"]["cuda-archs"].as_str().unwrap();
    assert!(archs.contains("sm_90"), "{archs}");
    assert_eq!(py["numpy"]["version"], TORCH_OLD.1);
    assert_eq!(py["dist"]["numpy"], TORCH_OLD.1);
    assert!(py["dist"]["nvidia-cublas-cu12"].is_string(), "{py}");
    assert_eq!(
        py["distributions"].as_u64().unwrap() as usize,
        py["dist"].as_object().unwrap().len()
    );

    let fp2 = capture(tmp.path(), &root, &new);
    assert_eq!(
        fp2["python"]["torch"]["version"],
        format!("{}+cu124", TORCH_NEW.0)
    );
    assert_ne!(
        fp2["python"]["distributions-digest"],
        py["distributions-digest"]
    );

    // VIRTUAL_ENV chooses the interpreter when --python does not.
    let venv = old.parent().unwrap().parent().unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("VIRTUAL_ENV", venv)
        .args(["env", "capture", "--json"])
        .assert()
        .success();
    let fp3 = json_of(&out.get_output().stdout);
    assert_eq!(fp3["python"]["found-by"], "VIRTUAL_ENV");
    assert_eq!(fp3["python"]["prefix"], venv.display().to_string());
}

#[test]
fn env_check_names_the_distribution_and_gives_the_pip_command() {
    let Some((old, new)) = torch_venvs() else {
        return;
    };
    let (tmp, root) = repo_with(&[("README", "x\n")]);
    // Locked with NumPy 1.x and torch 2.4; checked in an environment with NumPy 2.x.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&old)
        .args(["env", "lock", "--name", "box"])
        .assert()
        .success();
    let lock = std::fs::read_to_string(root.join("lockfiles/box.toml")).unwrap();
    assert!(
        lock.contains(&format!(
            "\"python.numpy.version\" = {{ policy = \"exact\", value = \"{}\" }}",
            TORCH_OLD.1
        )),
        "{lock}"
    );
    assert!(
        lock.contains("\"python.dist.sympy\" = { policy = \"warn\""),
        "{lock}"
    );
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&new)
        .args(["env", "check"])
        .assert()
        .code(1);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains("MISMATCH  python.numpy.version"), "{text}");
    assert!(text.contains("MISMATCH  python.torch.version"), "{text}");
    let want = format!(
        "numpy {} is installed, the lockfile has {}: run `{} -m pip install 'numpy=={}'`",
        TORCH_NEW.1,
        TORCH_OLD.1,
        new.display(),
        TORCH_OLD.1
    );
    assert!(text.contains(&want), "{text}");
    // A distribution without a field of its own is named with its pip command as a warning.
    assert!(text.contains("python.dist.nvidia-cublas-cu12"), "{text}");
    assert!(
        text.contains("-m pip install 'nvidia-cublas-cu12=="),
        "{text}"
    );
    // The same environment passes.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&old)
        .args(["env", "check"])
        .assert()
        .success();
}

#[test]
fn an_environment_without_pytorch_or_without_python_says_so() {
    let (tmp, root) = repo_with(&[("README", "x\n")]);
    let venv = tmp.path().join("bare");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        common::skip("needs python3 with venv");
        return;
    }
    let fp = capture(tmp.path(), &root, &venv.join("bin/python3"));
    let why = fp["python"]["torch"]["unavailable"].as_str().unwrap();
    assert!(why.starts_with("torch is not installed in "), "{why}");
    assert!(fp["python"]["version"].is_string());
    // A missing --python is a usage error naming the path, in the fingerprint...
    let fp = capture(tmp.path(), &root, &tmp.path().join("nope/bin/python3"));
    let why = fp["python"]["unavailable"].as_str().unwrap();
    assert!(
        why.contains("nope/bin/python3 (chosen by --python)"),
        "{why}"
    );
}
