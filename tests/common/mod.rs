//! Helpers shared by the integration tests: the binary with a clean environment, and
//! throwaway git repositories that ignore the user's git configuration.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repro binary, with an isolated cache and no colour.
pub fn repro(cache: &Path) -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("repro").unwrap();
    c.env("XDG_CACHE_HOME", cache)
        .env("NO_COLOR", "1")
        .env_remove("CUDA_VISIBLE_DEVICES");
    c
}

/// Runs git in `dir` with the user's and the system's configuration shut out.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A new repository with one commit containing `files`.
pub fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "initial", "--allow-empty"]);
    (dir, root)
}

/// Whether this machine has an NVIDIA driver (GPU tests skip cleanly without one).
pub fn has_gpu() -> bool {
    Path::new("/proc/driver/nvidia/version").exists()
}

/// The crate's own directory (for fixtures).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether NVRTC can be found. On CI (`REPRO_TEST_REQUIRE_NVRTC`) its absence is a
/// failure, elsewhere the tests that need it skip with a message.
pub fn nvrtc_available() -> bool {
    let tmp = tempfile::tempdir().unwrap();
    let ok = repro(tmp.path())
        .args(["toolchain", "which"])
        .output()
        .unwrap()
        .status
        .success();
    if !ok {
        assert!(
            std::env::var_os("REPRO_TEST_REQUIRE_NVRTC").is_none(),
            "NVRTC is required here but was not found"
        );
        eprintln!("skipping: no NVRTC on this machine (set REPRO_NVRTC)");
    }
    ok
}

/// A repository holding a copy of the project's kernels and recipes.
pub fn kernel_repo() -> (tempfile::TempDir, PathBuf) {
    let (tmp, root) = repo_with(&[]);
    for dir in ["kernels", "recipes"] {
        copy_dir(&crate_dir().join(dir), &root.join(dir));
    }
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "kernels"]);
    (tmp, root)
}

/// Copies a directory tree.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Whether a usable `nix` is installed. On CI (`REPRO_TEST_REQUIRE_NIX`) its absence is a
/// failure, elsewhere the tests that need it skip with a message.
pub fn nix_available() -> bool {
    let ok = Command::new("nix")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("REPRO_TEST_REQUIRE_NIX").is_none(),
            "nix is required here but was not found"
        );
        eprintln!("skipping: nix is not installed");
    }
    ok
}

/// Options that make nix work offline, with an empty flake registry written under `dir`.
pub fn offline_nix_flags(dir: &Path) -> String {
    let registry = dir.join("flake-registry.json");
    std::fs::write(&registry, r#"{"flakes":[],"version":2}"#).unwrap();
    format!("--offline --option flake-registry {}", registry.display())
}
