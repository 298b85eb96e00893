//! `repro env` end to end: the real binary against throwaway git repositories.

use crate::common;

use common::{crate_dir, git, has_gpu, repo_with, repro};
use predicates::prelude::*;
use serde_json::Value;

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).expect("stdout is JSON")
}

#[test]
fn capture_json_describes_the_repository() {
    let (tmp, root) = repo_with(&[("kernels/a.cu", "__global__ void k() {}\n")]);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "capture", "--json"])
        .assert()
        .success();
    let fp = json_of(&out.get_output().stdout);
    assert_eq!(fp["schema"], 1);
    assert_eq!(
        fp["repo"]["head"].as_str().unwrap(),
        git(&root, &["rev-parse", "HEAD"])
    );
    assert_eq!(
        fp["repo"]["tree"].as_str().unwrap(),
        git(&root, &["rev-parse", "HEAD^{tree}"])
    );
    assert_eq!(fp["repo"]["branch"], "main");
    assert_eq!(fp["repo"]["dirty"], false);
    assert_eq!(fp["nix"]["flake"], false);
    assert!(fp["host"]["kernel"].is_string());
    if !has_gpu() {
        // No GPU: the section says so cleanly and everything else is still there.
        let why = fp["gpu"]["unavailable"].as_str().unwrap();
        assert!(why.contains("no NVIDIA driver"), "{why}");
        assert!(fp["driver"]["unavailable"].is_string());
    }
    if std::env::var_os("REPRO_TEST_REQUIRE_NVRTC").is_some() {
        assert_eq!(
            fp["toolchain"]["nvrtc"]["version"], "13.0",
            "{}",
            fp["toolchain"]
        );
    }

    // A change makes the tree dirty, with a digest that follows the content.
    std::fs::write(root.join("kernels/a.cu"), "__global__ void k() { }\n").unwrap();
    let d1 = json_of(
        &repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["env", "capture", "--json"])
            .output()
            .unwrap()
            .stdout,
    );
    assert_eq!(d1["repo"]["dirty"], true);
    std::fs::write(root.join("kernels/a.cu"), "__global__ void k() {  }\n").unwrap();
    let d2 = json_of(
        &repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["env", "capture", "--json"])
            .output()
            .unwrap()
            .stdout,
    );
    assert_ne!(d1["repo"]["dirty-digest"], d2["repo"]["dirty-digest"]);
}

#[test]
fn capture_outside_a_repository_still_works() {
    let tmp = tempfile::tempdir().unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(tmp.path())
        .args(["env", "capture", "--json"])
        .assert()
        .success();
    let fp = json_of(&out.get_output().stdout);
    assert!(
        fp["repo"]["unavailable"]
            .as_str()
            .unwrap()
            .contains("not inside a git repository")
    );
    assert!(fp["host"]["os"].is_string());
}

#[test]
fn capture_human_output_is_a_grouped_table_and_writes_a_file() {
    let (tmp, root) = repo_with(&[]);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "capture", "-o", "fp.json"])
        .assert()
        .success()
        .stderr(predicate::str::contains("wrote fp.json"));
    let saved: Value =
        serde_json::from_slice(&std::fs::read(root.join("fp.json")).unwrap()).unwrap();
    assert_eq!(saved["schema"], 1);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "capture"])
        .assert()
        .success()
        .stdout(predicate::str::is_match(r"(?m)^host\s+arch\s+\S+").unwrap())
        .stdout(predicate::str::contains("captured in"));
}

#[test]
fn lock_then_check_passes_and_refuses_to_overwrite() {
    let (tmp, root) = repo_with(&[]);
    let run = || {
        let mut c = repro(tmp.path());
        c.arg("-C").arg(&root);
        c
    };
    run()
        .args(["env", "lock", "--name", "ci"])
        .assert()
        .success()
        .stdout(predicate::str::contains("wrote lockfiles/ci.toml"));
    let text = std::fs::read_to_string(root.join("lockfiles/ci.toml")).unwrap();
    assert!(text.starts_with("# repro environment lockfile"));
    assert!(text.contains("schema = 1"));
    // The lockfile is the project's: committing it keeps the tree clean for the check.
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "lock"]);
    run()
        .args(["env", "check"])
        .assert()
        .code(0)
        .stdout(predicate::str::contains("passed:"));

    run()
        .args(["env", "lock", "--name", "ci"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("lockfiles/ci.toml already exists"))
        .stderr(predicate::str::contains("hint: pass --force"));
    run()
        .args(["env", "lock", "--name", "ci", "--force"])
        .assert()
        .success();
}

#[test]
fn check_fails_on_must_match_and_warns_on_warn_fields() {
    let (tmp, root) = repo_with(&[]);
    std::fs::create_dir(root.join("lockfiles")).unwrap();
    std::fs::write(
        root.join("lockfiles/other.toml"),
        "schema = 1\n[fields]\n\"host.arch\" = { policy = \"exact\", value = \"riscv64\" }\n",
    )
    .unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "check"])
        .assert()
        .code(1);
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(stdout.contains("MISMATCH  host.arch"), "{stdout}");
    assert!(stdout.contains("hint: this machine differs"), "{stdout}");
    assert!(stdout.contains("FAILED: 0 ok, 1 mismatched"), "{stdout}");

    std::fs::write(
        root.join("lockfiles/other.toml"),
        "schema = 1\n[fields]\n\"host.arch\" = { policy = \"warn\", value = \"riscv64\" }\n",
    )
    .unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "check"])
        .assert()
        .code(0);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "check", "--strict"])
        .assert()
        .code(1);

    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "check", "--strict", "--json"])
        .assert()
        .code(1);
    let report = json_of(&out.get_output().stdout);
    assert_eq!(report["passed"], false);
    assert_eq!(report["counts"]["warn"], 1);
    assert_eq!(report["rows"][0]["status"], "warn");
}

#[test]
fn bad_lockfiles_get_one_clear_line_and_exit_2() {
    let (tmp, root) = repo_with(&[]);
    let cases = [
        (
            "schema = 1\n[fields]\n\"gpu.nmae\" = { policy = \"exact\", value = \"x\" }\n",
            "bad.toml:3:1: unknown field `gpu.nmae`",
            "did you mean `gpu.name`?",
        ),
        (
            "schema = 1\n[fields]\n\"gpu.name\" = { policy = \"exact\", value = \"x\", extra = 1 }\n",
            "bad.toml:3:",
            "unknown field `extra`",
        ),
        (
            "schema = 1\n[fields]\n\"gpu.name\" = { policy = \"ex",
            "bad.toml:3:28: unclosed inline table",
            "expected `}`",
        ),
        (
            "schema = 9\n[whatever]\n",
            "has schema 9, but this repro understands schema 1",
            "upgrade repro",
        ),
        ("", "missing `schema`", "schema = 1"),
    ];
    for (text, message, hint) in cases {
        std::fs::write(root.join("bad.toml"), text).unwrap();
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["env", "check", "--lock", "bad.toml"])
            .assert()
            .code(2);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(stderr.contains(message), "{text:?}: {stderr}");
        assert!(stderr.contains(hint), "{text:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
    }
}

#[test]
fn missing_and_ambiguous_lockfiles_are_explained() {
    let (tmp, root) = repo_with(&[]);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "check"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no lockfile found in"))
        .stderr(predicate::str::contains("repro env lock"));
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "check", "--lock", "nope.toml"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot read lockfile"));
    std::fs::create_dir(root.join("lockfiles")).unwrap();
    for n in ["a", "b"] {
        std::fs::write(
            root.join(format!("lockfiles/{n}.toml")),
            "schema = 1\n[fields]\n\"gpu.name\" = { policy = \"exact\", value = \"Imaginary GPU\" }\n",
        )
        .unwrap();
    }
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "check"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("2 lockfiles in"))
        .stderr(predicate::str::contains("a.toml, b.toml"))
        .stderr(predicate::str::contains("--lock FILE"));
}

#[test]
fn a_missing_directory_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    repro(tmp.path())
        .args(["-C", "/nonexistent/dir", "env", "capture"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot use -C /nonexistent/dir"));
}

#[test]
fn an_unwritable_lockfile_leaves_nothing_behind() {
    let (tmp, root) = repo_with(&[]);
    // A file where the directory should be: creating the lockfile must fail cleanly.
    std::fs::write(root.join("lockfiles"), "not a directory").unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "lock", "--name", "x"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "failed to write lockfile lockfiles/x.toml",
        ));
    assert_eq!(
        std::fs::read_to_string(root.join("lockfiles")).unwrap(),
        "not a directory"
    );
    // The lockfile's path is a non-empty directory: an input error (2) found before any
    // temporary file is written, so none is left behind and the directory is untouched.
    std::fs::remove_file(root.join("lockfiles")).unwrap();
    std::fs::create_dir_all(root.join("lockfiles/x.toml")).unwrap();
    std::fs::write(root.join("lockfiles/x.toml/keep"), "mine").unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["env", "lock", "--name", "x", "--force"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "failed to write lockfile lockfiles/x.toml",
        ));
    let names: Vec<String> = std::fs::read_dir(root.join("lockfiles"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["x.toml"], "leftovers in lockfiles/");
    assert_eq!(
        std::fs::read_to_string(root.join("lockfiles/x.toml/keep")).unwrap(),
        "mine"
    );
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("repro"))
        .args(["env", "capture", "--json"])
        .env("XDG_CACHE_HOME", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// Runs `env check` on the H200 fixture, from the crate directory so paths are relative.
fn fixture_check(extra: &[&str]) -> (i32, String) {
    let tmp = tempfile::tempdir().unwrap();
    let out = repro(tmp.path())
        .current_dir(crate_dir())
        .args([
            "env",
            "check",
            "--lock",
            "tests/fixtures/lockfile-v1.toml",
            "--fingerprint",
            "tests/fixtures/fingerprint-v1.json",
        ])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn check_report_snapshot() {
    let (code, stdout) = fixture_check(&[]);
    assert_eq!(code, 1);
    insta::assert_snapshot!("check_human", stdout);
    let (_, verbose) = fixture_check(&["-v"]);
    assert!(verbose.contains("ignored   host.cpu"), "{verbose}");
    let (_, quiet) = fixture_check(&["-q"]);
    assert!(!quiet.contains("ok       gpu.name"));
    assert!(quiet.contains("MISMATCH  driver.version"));
}

#[test]
fn check_json_snapshot() {
    let (code, stdout) = fixture_check(&["--json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    insta::assert_json_snapshot!("check_json", v);
}

#[test]
fn fixtures_of_every_schema_still_load() {
    let tmp = tempfile::tempdir().unwrap();
    // The fingerprint round-trips through capture's JSON form unchanged.
    let out = repro(tmp.path())
        .current_dir(crate_dir())
        .args([
            "env",
            "check",
            "--lock",
            "lockfiles/h200.toml",
            "--fingerprint",
            "tests/fixtures/fingerprint-v1.json",
            "--json",
        ])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The committed H200 lockfile accepts the H200 fingerprint on every must-match field.
    let fatal: Vec<&Value> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "mismatch" || r["status"] == "missing")
        .collect();
    assert!(fatal.is_empty(), "{fatal:?}");
}

#[test]
fn help_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let out = repro(tmp.path())
        .args(["env", "check", "--help"])
        .output()
        .unwrap();
    insta::assert_snapshot!("env_check_help", String::from_utf8(out.stdout).unwrap());
}

#[test]
fn env_check_with_two_lockfiles_says_which_it_used_and_why() {
    let (tmp, root) = repo_with(&[(
        "lockfiles/other.toml",
        "schema = 1\nname = \"other\"\n\n[fields]\n\"gpu.name\" = { policy = \"exact\", value = \"No Such GPU 9000\" }\n",
    )]);
    let run = |args: &[&str]| {
        repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap()
    };
    // `env lock` names this machine's lockfile (cpu.toml here, h200.toml on an H200).
    let out = run(&["env", "lock"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["env", "check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("chosen of 2 lockfiles in lockfiles"),
        "{text}"
    );
    assert!(!text.contains("other.toml"), "{text}");
    let out = run(&["--json", "env", "check"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["lockfile-choice"]
            .as_str()
            .unwrap()
            .contains("chosen of 2"),
        "{v}"
    );
    // A third that nothing singles out: the error names them all and says what to do.
    std::fs::copy(
        root.join("lockfiles/other.toml"),
        root.join("lockfiles/another.toml"),
    )
    .unwrap();
    std::fs::remove_file(
        std::fs::read_dir(root.join("lockfiles"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| !p.ends_with("other.toml") && !p.ends_with("another.toml"))
            .unwrap(),
    )
    .unwrap();
    let out = run(&["env", "check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another.toml, other.toml"), "{err}");
    assert!(err.contains("hint: choose one with --lock FILE"), "{err}");
    assert!(
        err.ends_with('\n'),
        "the hint line ends with a newline: {err:?}"
    );
}

/// A repro whose loader cannot find libcuda (as a Nix-built one on Ubuntu: here there is no
/// libcuda on the loader's path at all) finds it in the host's driver directories and says
/// where. The driver is a stand-in built with the C compiler: libcuda.so.1 with
/// cuDriverGetVersion, in a directory only the search names.
#[test]
fn a_driver_the_loader_cannot_find_is_found_in_the_host_directories() {
    if has_gpu() {
        common::skip("needs a machine without a GPU: a real libcuda would be found by the loader");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("driver-lib");
    std::fs::create_dir(&dir).unwrap();
    let src = tmp.path().join("fake.c");
    std::fs::write(
        &src,
        "int cuDriverGetVersion(int *v) { *v = 13000; return 0; }\nint cuInit(unsigned f) { (void)f; return 100; }\n",
    )
    .unwrap();
    let cc = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .arg(&src)
        .output();
    match cc {
        Ok(o) if o.status.success() => {}
        _ => {
            common::skip("needs a C compiler (cc) to build a stand-in libcuda");
            return;
        }
    }
    let capture = |dirs: &std::path::Path| {
        let out = repro(tmp.path())
            .args(["env", "capture", "--json"])
            .env("REPRO_DRIVER_LIB_DIRS", dirs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let fp = capture(&dir);
    let found = fp["driver"]["found-by"].as_str().unwrap_or_default();
    let lib = dir.join("libcuda.so.1");
    assert!(
        found.starts_with("repro's host search: ") && found.contains(lib.to_str().unwrap()),
        "{fp}"
    );
    assert!(found.contains("REPRO_DRIVER_LIB_DIRS"), "{found}");
    assert_eq!(fp["driver"]["library"], lib.to_str().unwrap(), "{fp}");
    assert_eq!(fp["driver"]["cuda-version"], "13.0", "{fp}");
    // env check says where the driver came from.
    let lock = tmp.path().join("lock.toml");
    std::fs::write(
        &lock,
        "schema = 1\nname = \"t\"\n\n[fields]\n\"driver.cuda-version\" = { policy = \"exact\", value = \"13.0\" }\n",
    )
    .unwrap();
    let out = repro(tmp.path())
        .args(["env", "check", "--lock"])
        .arg(&lock)
        .env("REPRO_DRIVER_LIB_DIRS", &dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "driver: libcuda.so.1 from repro's host search: {}",
            lib.display()
        )),
        "{text}"
    );
    // A search that finds nothing leaves the driver unavailable, and says where it looked.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let fp = capture(&empty);
    assert!(fp["driver"]["unavailable"].is_string(), "{fp}");
}

/// The machine's nvcc answers `env check` from a cache keyed by its binary: asked once,
/// asked again when the binary is replaced or another one is found.
#[test]
fn nvcc_version_is_cached_under_its_binary_and_a_changed_one_is_asked_again() {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let calls = tmp.path().join("calls");
    let nvcc = |dir: &str, version: &str| {
        let bin = tmp.path().join(dir).join("nvcc");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        let script = format!(
            "#!/bin/sh\necho run >> '{}'\necho 'Cuda compilation tools, release 12.4, V{version}'\n",
            calls.display()
        );
        // Written beside and renamed over, as an upgrade replaces a binary.
        let next = bin.with_extension("new");
        std::fs::write(&next, script).unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&next, &bin).unwrap();
        bin
    };
    let lock = project.join("lock.toml");
    std::fs::write(
        &lock,
        "schema = 1\n[fields]\n\"toolchain.nvcc.version\" = { policy = \"exact\", value = \"12.4.131\" }\n",
    )
    .unwrap();
    let runs = || {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let check = |bin: &Path| {
        let out = repro(&cache)
            .current_dir(&project)
            .env("REPRO_NVCC", bin)
            .args(["env", "check", "--lock", lock.to_str().unwrap()])
            .output()
            .unwrap();
        out.status.code().unwrap()
    };
    let a = nvcc("a", "12.4.131");
    assert_eq!((check(&a), runs()), (0, 1));
    assert_eq!(
        (check(&a), runs()),
        (0, 1),
        "the second check is answered by the cache"
    );
    // The same path, another binary: asked again, and the change is caught.
    let a = nvcc("a", "12.6.20");
    assert_eq!((check(&a), runs()), (1, 2));
    // Another nvcc found: asked too.
    let b = nvcc("b", "12.4.131");
    assert_eq!((check(&b), runs()), (0, 3));
    assert_eq!((check(&b), runs()), (0, 3));
}

/// `env check` never writes the repository's index: a touched file is clean, an edit after
/// that is caught, the user's staging and the index are left as they were, and a locked
/// index does not stop the check. (Letting libgit2 write refreshed stat data back, as `git
/// status` does, was tried: it recorded an edited file's new stat data under its old blob,
/// so git itself no longer saw the edit. This test caught it.)
#[test]
fn repo_dirty_never_writes_the_index_and_catches_edits_to_touched_files() {
    let (_tmp, root) = repo_with(&[("a.txt", "one\n"), ("b.txt", "two\n")]);
    let cache = tempfile::tempdir().unwrap();
    let lock = root.join("../lock.toml");
    std::fs::write(
        &lock,
        "schema = 1\n[fields]\n\"repo.dirty\" = { policy = \"exact\", value = \"false\" }\n",
    )
    .unwrap();
    let check = || {
        repro(cache.path())
            .current_dir(&root)
            .args(["env", "check", "--json", "--lock", lock.to_str().unwrap()])
            .output()
            .unwrap()
            .status
            .code()
            .unwrap()
    };
    let touch = |name: &str, secs: u64| {
        let f = std::fs::File::options()
            .write(true)
            .open(root.join(name))
            .unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
            .unwrap();
    };
    let index = || std::fs::read(root.join(".git/index")).unwrap();
    let before = index();
    // Touched, not changed: clean, twice.
    touch("a.txt", 1_600_000_000);
    touch("b.txt", 1_600_000_000);
    assert_eq!(check(), 0);
    assert_eq!(check(), 0);
    // The same size and modification time as at the last check: still caught.
    std::fs::write(root.join("a.txt"), "One\n").unwrap();
    touch("a.txt", 1_600_000_000);
    assert_eq!(check(), 1, "an edit after a check is a dirty tree");
    assert_eq!(index(), before, "the index is never written");
    assert_eq!(git(&root, &["status", "--porcelain"]).trim(), "M a.txt");
    // Staging is left as the user made it.
    git(&root, &["add", "a.txt"]);
    std::fs::write(root.join("b.txt"), "TWO\n").unwrap();
    assert_eq!(check(), 1);
    assert_eq!(
        git(&root, &["diff", "--cached", "--name-only"]).trim(),
        "a.txt"
    );
    assert_eq!(git(&root, &["diff", "--name-only"]).trim(), "b.txt");
    // A locked index (a git command running): answered without writing it.
    git(&root, &["checkout", "--", "b.txt"]);
    git(&root, &["reset", "-q", "--hard"]);
    std::fs::write(root.join(".git/index.lock"), "").unwrap();
    touch("b.txt", 1_600_000_001);
    assert_eq!(check(), 0);
    std::fs::write(root.join("b.txt"), "twO\n").unwrap();
    assert_eq!(check(), 1);
    assert_eq!(std::fs::read(root.join(".git/index.lock")).unwrap(), b"");
}
