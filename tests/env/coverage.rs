//! `repro env`: lockfile names that cannot be files are refused, `-v` shows probe times, and
//! a check that fails while a pinned toolchain is missing says how to install it (text and
//! JSON).

use crate::common;

use std::path::Path;

use common::{outcome, repo_with, repro};
use serde_json::Value;

/// `repro -C ROOT ARGS` with an empty toolchain cache: (exit code, stdout, stderr).
fn run(cache: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    outcome(
        repro(cache)
            .env_remove("REPRO_NVCC")
            .arg("-C")
            .arg(root)
            .args(args),
    )
}

#[test]
fn lockfile_names_that_are_not_plain_names_are_refused_and_nothing_is_written() {
    let (tmp, root) = repo_with(&[]);
    // An empty name is the command line's error, before anything runs.
    let (code, _, err) = run(tmp.path(), &root, &["env", "lock", "--name", ""]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'--name <NAME>'"), "{err}");
    for name in ["a/b", "..\\x", ".hidden"] {
        let (code, _, err) = run(tmp.path(), &root, &["env", "lock", "--name", name]);
        assert_eq!(code, 2, "{name:?}: {err}");
        assert!(
            err.contains(&format!("error: `{name}` is not a usable lockfile name"))
                && err.contains("hint: use letters, digits and dashes"),
            "{name:?}: {err}"
        );
    }
    assert!(!root.join("lockfiles").exists());
    assert!(!root.join("a").exists());
}

#[test]
fn verbose_capture_shows_how_long_each_probe_took() {
    let (tmp, root) = repo_with(&[]);
    let (code, out, err) = run(tmp.path(), &root, &["-v", "env", "capture"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("probe times (ms): "))
        .unwrap_or_else(|| panic!("no probe times in {out}"));
    // Every probe is named with a duration.
    for probe in line["probe times (ms): ".len()..].split(' ') {
        let (name, ms) = probe.split_once('=').expect(probe);
        assert!(!name.is_empty(), "{line}");
        assert!(ms.parse::<f64>().is_ok(), "{line}");
    }
    let (_, out, _) = run(tmp.path(), &root, &["env", "capture"]);
    assert!(!out.contains("probe times"), "{out}");
}

#[test]
fn a_failing_check_with_a_missing_pinned_toolchain_says_how_to_install_it() {
    let toml = format!(
        "schema = 1\n[toolchain]\nnvcc-default = \"13.0\"\n[toolchain.nvcc.\"13.0\"]\nwheels = [{{ package = \"nvidia-cuda-nvcc\", version = \"13.0.88\", sha256 = {{ x86_64 = \"{0}\", aarch64 = \"{0}\" }} }}]\n",
        "0".repeat(64)
    );
    let lock = "schema = 1\nname = \"t\"\n\n[fields]\n\"host.arch\" = { policy = \"exact\", value = \"riscv64\" }\n";
    let (tmp, root) = repo_with(&[("repro.toml", &toml), ("lockfiles/t.toml", lock)]);
    let cache = tmp.path().join("cache");
    let (code, out, err) = run(
        &cache,
        &root,
        &["env", "check", "--lock", "lockfiles/t.toml"],
    );
    assert_eq!(code, 1, "{out}{err}");
    // A fully pinned toolchain installs itself on first use: a warning here (a failure
    // only with --strict), which names the command that installs it now.
    assert!(
        out.contains("toolchain nvcc@13.0: WARN not installed; installs on first use\n"),
        "{out}{err}"
    );
    let (code, out, _) = run(
        &cache,
        &root,
        &["--json", "env", "check", "--lock", "lockfiles/t.toml"],
    );
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["passed"], false, "{v}");
    assert_eq!(
        v["toolchains"],
        serde_json::json!([{
            "toolchain": "nvcc@13.0", "installed": false, "path": null,
            "installs-on-first-use": true,
            "install-command": "repro toolchain install nvcc@13.0",
        }]),
        "{v}"
    );
}

#[test]
fn the_repository_section_says_why_a_field_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = |dir: &Path| -> Value {
        let (code, out, err) = run(tmp.path(), dir, &["--json", "env", "capture"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["repo"].clone()
    };
    // No commits yet.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    common::git(&empty, &["init", "-q"]);
    let repo = capture(&empty);
    for field in ["head", "tree", "branch"] {
        assert_eq!(
            repo[field],
            serde_json::json!({"unavailable": "no commits yet"}),
            "{field}: {repo}"
        );
    }
    // A detached HEAD has no branch.
    let (_t, root) = repo_with(&[("a.txt", "a\n")]);
    common::git(&root, &["checkout", "-q", "--detach"]);
    assert_eq!(capture(&root)["branch"], "(detached)");
    // A bare repository has no working tree.
    let bare = tmp.path().join("bare.git");
    common::git(
        tmp.path(),
        &["init", "-q", "--bare", bare.to_str().unwrap()],
    );
    assert_eq!(
        capture(&bare),
        serde_json::json!({"unavailable": "a bare repository has no working tree"})
    );
}
