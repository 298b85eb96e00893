//! `repro toolchain install nvcc@13.0`, builds with the pinned nvcc, `repro env check` of the
//! pin, and `repro bisect --toolchains`, end to end with NVIDIA's real wheels.
//!
//! The tests fetch the wheels they need themselves, through pip's ordinary client, into
//! cargo's target directory, once (tests/common `wheels`); REPRO_TEST_WHEELHOUSE names a
//! directory to use instead. Where pip cannot reach a package index they print why they skip;
//! with REPRO_TEST_REQUIRE_WHEELHOUSE set (CI) that is a failure.

use crate::common;
use common::wheelhouse;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{crate_dir, repo_with, repro};
use predicates::prelude::*;
use serde_json::Value;

/// The pinned nvcc 13.0 wheels.
fn nvcc_set() -> Vec<(String, String)> {
    common::pinned_nvcc_wheels()
}

/// The three NVRTC releases of the NVRTC toolchain bisection.
fn nvrtc_set() -> Vec<(String, String)> {
    [
        ("nvidia-cuda-nvrtc-cu12", "12.8.93"),
        ("nvidia-cuda-nvrtc-cu12", "12.9.86"),
        ("nvidia-cuda-nvrtc", "13.0.88"),
    ]
    .iter()
    .map(|(p, v)| (p.to_string(), v.to_string()))
    .collect()
}

/// A repository with the project's repro.toml and the WMMA nvcc recipe.
fn nvcc_repo() -> (tempfile::TempDir, PathBuf) {
    let read = |p: &str| std::fs::read_to_string(crate_dir().join(p)).unwrap();
    let files = [
        ("repro.toml", read("repro.toml")),
        (
            "kernels/wmma_gemm_nvcc.cu",
            read("kernels/wmma_gemm_nvcc.cu"),
        ),
        (
            "recipes/wmma_gemm_nvcc.toml",
            read("recipes/wmma_gemm_nvcc.toml"),
        ),
    ];
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (*a, b.as_str())).collect();
    repo_with(&refs)
}

fn toolchains(cache: &Path) -> PathBuf {
    cache.join("repro/toolchains")
}

/// The entries of the toolchains directory, locks aside.
fn entries(cache: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(toolchains(cache))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".locks" && n != ".projects")
        // Trees are named by release and the digest of their wheels: keep the release.
        .map(|n| match n.rsplit_once('-') {
            Some((name, digest)) if digest.len() == 16 => name.to_string(),
            _ => n,
        })
        .collect();
    v.sort();
    v
}

/// The tree directory of `release` (`nvcc-13.0`): its name carries the digest of its
/// wheels, which the install's lock file names as soon as an install starts.
fn tree_dir(cache: &Path, release: &str) -> PathBuf {
    let locks = toolchains(cache).join(".locks");
    let name = std::fs::read_dir(&locks)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with(&format!("{release}-")) && n.ends_with(".lock"))
        .unwrap_or_else(|| panic!("no install of {release} started in {}", locks.display()));
    toolchains(cache).join(name.trim_end_matches(".lock"))
}

/// `repro -C ROOT ARGS` exits with `code` and says each of `says` on stderr.
fn refused(cache: &Path, root: &Path, args: &[&str], code: i32, says: &[&str]) {
    let mut a = cmd(cache, root).args(args).assert().code(code);
    for s in says {
        a = a.stderr(predicate::str::contains(*s));
    }
}

fn cmd(cache: &Path, root: &Path) -> assert_cmd::Command {
    let mut c = repro(cache);
    c.arg("-C").arg(root).env_remove("REPRO_WHEELHOUSE");
    c
}

#[test]
fn install_nvcc_from_wheels_then_build_a_wmma_kernel_with_it() {
    let Some(wh) = wheelhouse(&nvcc_set()) else {
        return;
    };
    let (tmp, root) = nvcc_repo();
    let cache = tmp.path().join("cache");
    // Not installed yet, and --offline: the build refuses to fall back to another nvcc or
    // to install it, and says how to fix it.
    refused(
        &cache,
        &root,
        &["--offline", "build", "wmma_gemm_nvcc"],
        3,
        &[
            "nvcc@13.0 is pinned but not installed, and --offline (or REPRO_OFFLINE) forbids installing it",
            "`repro toolchain install nvcc@13.0`",
        ],
    );
    // `toolchain install` itself with --offline and no local wheels: pip's index is the
    // network, so it is refused before pip runs; with local wheels it installs.
    refused(
        &cache,
        &root,
        &["--offline", "toolchain", "install", "nvcc@13.0"],
        3,
        &[
            "nvcc@13.0 would be fetched from pip's package index, and --offline (or REPRO_OFFLINE) forbids the network",
            "--wheels DIR",
        ],
    );
    cmd(&cache, &root)
        .args(["--offline", "toolchain", "install", "nvcc@13.0", "--wheels"])
        .arg(&wh)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "installed nvcc 13.0 (reports 13.0.88)",
        ))
        .stdout(predicate::str::contains("5 wheels verified by sha256"));
    // Idempotent, and the environment variable works as the option does.
    cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0"])
        .env("REPRO_WHEELHOUSE", &wh)
        .assert()
        .success()
        .stdout(predicate::str::contains("already installed"));
    let nvcc = tree_dir(&cache, "nvcc-13.0").join("nvidia/cu13/bin/nvcc");
    assert!(nvcc.is_file());
    let list = cmd(&cache, &root)
        .args(["toolchain", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("nvcc-13.0-") && text.contains("  13.0  "),
        "{text}"
    );
    assert!(text.contains("from wheel directory"), "{text}");
    assert!(
        text.contains("sha256 56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03")
            || std::env::consts::ARCH != "x86_64",
        "{text}"
    );

    // The recipe includes <cuda_runtime.h> and <mma.h>, and names two targets.
    let out = cmd(&cache, &root)
        .args(["build", "--json", "wmma_gemm_nvcc"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let builds = v["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 2, "{v}");
    assert_eq!(builds[0]["recipe"], "wmma_gemm_nvcc@sm_89");
    assert_eq!(builds[1]["recipe"], "wmma_gemm_nvcc@sm_90");
    assert_ne!(builds[0]["key"], builds[1]["key"]);
    assert_ne!(
        builds[0]["outputs"]["cubin"]["sha256"],
        builds[1]["outputs"]["cubin"]["sha256"]
    );
    for b in builds {
        assert!(
            b["outputs"]["cubin"]["bytes"].as_u64().unwrap() > 1000,
            "{b}"
        );
    }
    // The key holds the wheels' digests, not nvcc's --version text or its path.
    let key = builds[1]["key"].as_str().unwrap();
    let rec: Value = serde_json::from_slice(
        &std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap(),
    )
    .unwrap();
    let compiler = &rec["inputs"]["compiler"];
    assert_eq!(compiler["release"], "13.0");
    assert_eq!(
        compiler["wheels"].as_object().unwrap().len(),
        5,
        "{compiler}"
    );
    assert!(compiler.get("build").is_none(), "{compiler}");
    assert!(!compiler.to_string().contains(cache.to_str().unwrap()));
    // `--toolchain system` asks for the machine's own nvcc: with none on the PATH it fails
    // instead of quietly using the pinned one.
    cmd(&cache, &root)
        .args(["build", "wmma_gemm_nvcc", "--toolchain", "system"])
        .env("PATH", "/usr/bin:/bin")
        .env_remove("REPRO_NVCC")
        .env_remove("CUDA_HOME")
        .env_remove("CUDA_PATH")
        .assert()
        .code(3)
        .stderr(predicate::str::contains("nvcc not found"));
}

#[test]
fn a_flipped_byte_is_refused_with_both_digests_and_nothing_is_installed() {
    let Some(wh) = wheelhouse(&nvcc_set()) else {
        return;
    };
    let (tmp, root) = nvcc_repo();
    let cache = tmp.path().join("cache");
    let bad = tmp.path().join("tampered");
    std::fs::create_dir(&bad).unwrap();
    let mut expected = String::new();
    let mut actual = String::new();
    for e in std::fs::read_dir(&wh).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("nvidia_cuda_crt-13.0.88-") && name.contains(std::env::consts::ARCH) {
            let mut bytes = std::fs::read(e.path()).unwrap();
            expected = repro::keys::sha256_hex(&bytes);
            let n = bytes.len();
            bytes[n / 2] ^= 0x01;
            actual = repro::keys::sha256_hex(&bytes);
            std::fs::write(bad.join(&name), bytes).unwrap();
        } else {
            std::os::unix::fs::symlink(e.path(), bad.join(&name)).unwrap();
        }
    }
    assert!(!expected.is_empty(), "no crt wheel in {}", wh.display());
    cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0", "--wheels"])
        .arg(&bad)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(format!(
            "has sha256 {actual}, but the pin is {expected}; refusing to install it"
        )));
    assert!(entries(&cache).is_empty(), "{:?}", entries(&cache));
}

#[test]
fn an_interrupted_install_is_detected_and_redone() {
    let Some(wh) = wheelhouse(&nvcc_set()) else {
        return;
    };
    let (tmp, root) = nvcc_repo();
    let cache = tmp.path().join("cache");
    // A real install, killed while it unpacks.
    let exe = assert_cmd::cargo::cargo_bin("repro");
    let mut child = std::process::Command::new(&exe)
        .arg("-C")
        .arg(&root)
        .args(["toolchain", "install", "nvcc@13.0", "--wheels"])
        .arg(&wh)
        .env("XDG_CACHE_HOME", &cache)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let unpacking = || {
        std::fs::read_dir(toolchains(&cache))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".staging-nvcc-13.0-")
                    && e.path().join("tree/nvidia").exists()
            })
    };
    let start = Instant::now();
    while !unpacking() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the install never started unpacking"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the install finished before it could be interrupted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Nothing a build would use: the staging tree is not the toolchain.
    assert!(!tree_dir(&cache, "nvcc-13.0").exists());
    refused(
        &cache,
        &root,
        &["--offline", "build", "wmma_gemm_nvcc"],
        3,
        &["not installed"],
    );

    // A tree in place without its stamp (say, from a crash in an older repro) is named as
    // incomplete, never used, and replaced.
    let fake = tree_dir(&cache, "nvcc-13.0").join("nvidia/cu13/bin");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::write(fake.join("nvcc"), "#!/bin/sh\nexit 0\n").unwrap();
    cmd(&cache, &root)
        .args(["toolchain", "list"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "INCOMPLETE: it has no completion stamp",
        ));
    cmd(&cache, &root)
        .args(["build", "wmma_gemm_nvcc"])
        .env("REPRO_OFFLINE", "1")
        .assert()
        .code(3)
        .stderr(predicate::str::contains("it has no completion stamp"));
    cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0", "--wheels"])
        .arg(&wh)
        .assert()
        .success()
        .stderr(predicate::str::contains("installing it again"))
        .stdout(predicate::str::contains("installed nvcc 13.0"));
    // The killed install's unzip child may outlive it and refill its own staging directory
    // for a moment; that directory is never a toolchain, and the next install removes it.
    let trees: Vec<String> = entries(&cache)
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(trees, ["nvcc-13.0"]);
    cmd(&cache, &root)
        .args(["build", "wmma_gemm_nvcc"])
        .assert()
        .success();
}

#[test]
fn two_concurrent_installs_leave_one_good_tree() {
    let Some(wh) = wheelhouse(&nvcc_set()) else {
        return;
    };
    let (tmp, root) = nvcc_repo();
    let cache = tmp.path().join("cache");
    let exe = assert_cmd::cargo::cargo_bin("repro");
    let spawn = || {
        std::process::Command::new(&exe)
            .arg("-C")
            .arg(&root)
            .args(["--json", "toolchain", "install", "nvcc@13.0", "--wheels"])
            .arg(&wh)
            .env("XDG_CACHE_HOME", &cache)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let mut fresh = 0;
    for o in &outs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        fresh += usize::from(v["installed"] == true);
    }
    assert_eq!(fresh, 1, "exactly one of the two installs does the work");
    assert_eq!(entries(&cache), ["nvcc-13.0"]);
    let out = cmd(&cache, &root)
        .args(["--json", "toolchain", "list"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["toolchains"][0]["complete"], true, "{v}");
    cmd(&cache, &root)
        .args(["build", "wmma_gemm_nvcc"])
        .assert()
        .success();
}

#[test]
fn bad_requests_get_clear_errors() {
    let (tmp, root) = nvcc_repo();
    let cache = tmp.path().join("cache");
    refused(
        &cache,
        &root,
        &["toolchain", "install", "nvcc@12.4"],
        2,
        &[
            "nvcc@12.4 is not a release this project pins",
            "pinned here: nvcc@13.0, nvrtc@13.0.88",
        ],
    );
    refused(
        &cache,
        &root,
        &["toolchain", "install", "gcc@13"],
        2,
        &["`gcc` is not a compiler repro installs"],
    );
    // A package index that cannot be reached: pip's own error, and nothing left behind.
    cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0"])
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
        .env("PIP_RETRIES", "0")
        .env("PIP_TIMEOUT", "2")
        .env_remove("PIP_FIND_LINKS")
        .env_remove("PIP_EXTRA_INDEX_URL")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .assert()
        .code(3)
        .stderr(predicate::str::contains(
            "could not fetch the wheels of nvcc@13.0 (through pip)",
        ))
        .stderr(predicate::str::contains(
            "hint: check that python3 and pip work",
        ));
    assert!(entries(&cache).is_empty(), "{:?}", entries(&cache));
    // A release pinned only for another CPU architecture.
    let other = if std::env::consts::ARCH == "x86_64" {
        "aarch64"
    } else {
        "x86_64"
    };
    std::fs::write(
        root.join("repro.toml"),
        format!(
            "schema = 1\n[toolchain.nvcc.\"13.0\"]\nwheels = [{{ package = \"nvidia-cuda-nvcc\", version = \"13.0.88\", sha256 = {{ {other} = \"{}\" }} }}]\n",
            "0".repeat(64)
        ),
    )
    .unwrap();
    cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "nvcc@13.0 is not offered for {}",
            std::env::consts::ARCH
        )))
        .stderr(predicate::str::contains(format!(
            "it is pinned for {other} only"
        )));
}

#[test]
fn env_check_warns_until_the_pinned_toolchain_is_installed_and_fails_only_when_strict() {
    let Some(wh) = wheelhouse(&nvcc_set()) else {
        return;
    };
    let (tmp, root) = nvcc_repo();
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(root.join("lockfiles")).unwrap();
    std::fs::write(
        root.join("lockfiles/cpu.toml"),
        format!(
            "schema = 1\nname = \"cpu\"\n[fields]\n\"host.arch\" = {{ policy = \"exact\", value = \"{}\" }}\n",
            std::env::consts::ARCH
        ),
    )
    .unwrap();
    // Pinned by sha256, so a build installs it on first use: a warning.
    cmd(&cache, &root)
        .args(["env", "check"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "toolchain nvcc@13.0: WARN not installed; installs on first use",
        ));
    let out = cmd(&cache, &root)
        .args(["--json", "env", "check"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["toolchains"][0]["installs-on-first-use"], true, "{v}");
    // A lockfile that wants nvcc: its missing row's hint is to install the pin.
    std::fs::write(
        root.join("lockfiles/nvcc.toml"),
        "schema = 1\nname = \"nvcc\"\n[fields]\n\"toolchain.nvcc.version\" = { policy = \"exact\", value = \"13.0\" }\n",
    )
    .unwrap();
    let out = cmd(&cache, &root)
        .args(["--json", "env", "check", "--lock", "lockfiles/nvcc.toml"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &v["rows"][0];
    assert_eq!(
        (&row["field"], &row["status"]),
        (
            &serde_json::json!("toolchain.nvcc.version"),
            &serde_json::json!("missing")
        ),
        "{v}"
    );
    assert_eq!(
        row["hint"],
        "nvcc@13.0 is pinned in repro.toml but not installed: run `repro toolchain install nvcc@13.0` (a build installs it on first use)",
        "{v}"
    );
    // A failure with --strict, which neither the summary nor the JSON calls passed.
    refused(
        &cache,
        &root,
        &["env", "check", "--strict"],
        3,
        &["hint: run `repro toolchain install nvcc@13.0`"],
    );
    let out = cmd(&cache, &root)
        .args(["env", "check", "--strict"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FAILED: ") && !text.contains("passed: "),
        "{text}"
    );
    let out = cmd(&cache, &root)
        .args(["--json", "env", "check", "--strict"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&v["passed"], &v["exit-code"]),
        (&serde_json::json!(false), &serde_json::json!(3)),
        "{v}"
    );
    cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0", "--wheels"])
        .arg(&wh)
        .assert()
        .success();
    cmd(&cache, &root)
        .args(["env", "check"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "toolchain nvcc@13.0: installed at",
        ));
}

#[test]
fn toolchain_bisection_names_the_nvrtc_release_that_dropped_sm_70() {
    let Some(wh) = wheelhouse(&nvrtc_set()) else {
        return;
    };
    // NVRTC 13.0 removed the pre-Turing targets: sm_70 builds with 12.9 and fails with 13.0,
    // while sm_90 builds with every release. One recipe with both targets.
    let kernel = std::fs::read_to_string(crate_dir().join("kernels/vector_add.cu")).unwrap();
    let recipe = std::fs::read_to_string(crate_dir().join("recipes/vector_add.toml"))
        .unwrap()
        .replace("target = \"sm_90\"", "targets = [\"sm_70\", \"sm_90\"]");
    let (tmp, root) = repo_with(&[
        ("kernels/vector_add.cu", &kernel),
        ("recipes/va.toml", &recipe),
    ]);
    let cache = tmp.path().join("cache");
    let out = cmd(&cache, &root)
        .args([
            "--json",
            "bisect",
            "--toolchains",
            "nvrtc@12.8.93..nvrtc@13.0.88",
            "--recipe",
            "va",
            "--wheels",
        ])
        .arg(&wh)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["releases"],
        serde_json::json!(["12.8.93", "12.9.86", "13.0.88"]),
        "{v}"
    );
    let sm70 = &v["answers"][0];
    assert_eq!(sm70["target"], "sm_70");
    assert_eq!(sm70["first-bad"], "13.0.88", "{v}");
    assert_eq!(sm70["last-good"], "12.9.86", "{v}");
    let sm90 = &v["answers"][1];
    assert_eq!(sm90["target"], "sm_90");
    assert!(sm90["first-bad"].is_null(), "{v}");
    assert!(
        sm90["unchanged"].as_str().unwrap().starts_with("good with"),
        "{v}"
    );
    let bad_step = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["release"] == "13.0.88" && s["target"] == "sm_70")
        .unwrap();
    assert!(
        bad_step["detail"]
            .as_str()
            .unwrap()
            .contains("--gpu-architecture"),
        "{bad_step}"
    );
    // Unpinned releases are installed on demand with their digests recorded.
    assert_eq!(v["wheels"]["12.9.86"][0]["pinned"], false);
    assert_eq!(
        v["wheels"]["12.9.86"][0]["sha256"].as_str().unwrap().len(),
        64
    );
    // Recorded like any bisection, and a second run answers every step from the store.
    let key = v["key"].as_str().unwrap();
    assert!(root.join(format!(".repro/bisections/{key}.json")).is_file());
    // The ID it prints is one that `show`, `log` and `plot --bisect` know.
    let short = &key[..12];
    cmd(&cache, &root)
        .args(["show", short])
        .assert()
        .success()
        .stdout(predicate::str::contains("toolchain bisection"))
        .stdout(predicate::str::contains(
            "build nvrtc 12.8.93..13.0.88, 3 of 3 releases evaluated; first bad sm_70 nvrtc@13.0.88",
        ))
        .stdout(predicate::str::is_match(r"(?m)^\s*sm_70\s+13\.0\.88\s+12\.9\.86\s*$").unwrap())
        .stdout(predicate::str::is_match(r"(?m)^\s*sm_90\s+-\s+-\s+no change: good with").unwrap())
        .stdout(predicate::str::is_match(r"(?m)^\s*13\.0\.88\s+sm_70\s+bad\s+no\s").unwrap());
    let shown: Value = serde_json::from_slice(
        &cmd(&cache, &root)
            .args(["--json", "show", short])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(shown["answers"], v["answers"], "{shown}");
    assert_eq!(shown["steps"], v["steps"], "{shown}");
    assert!(shown["created-at"].is_string(), "{shown}");
    cmd(&cache, &root)
        .args(["log", "--kind", "bisection"])
        .assert()
        .success()
        .stdout(predicate::str::contains(&key[..8]))
        .stdout(predicate::str::contains("found"));
    refused(
        &cache,
        &root,
        &["plot", "--output", "b.svg", "--bisect", short],
        2,
        &["is a bisection over toolchain releases, which is not plotted"],
    );
    assert!(!root.join("b.svg").exists());
    let again = cmd(&cache, &root)
        .args([
            "--json",
            "bisect",
            "--toolchains",
            "nvrtc@12.8.93..13.0.88",
            "--recipe",
            "va",
            "--wheels",
        ])
        .arg(&wh)
        .output()
        .unwrap();
    let w: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert!(
        w["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["cached"] == true),
        "{w}"
    );
    // A release that is not among the wheels is named with the ones that are.
    cmd(&cache, &root)
        .args([
            "bisect",
            "--toolchains",
            "nvrtc@12.7.1..nvrtc@13.0.88",
            "--recipe",
            "va",
            "--wheels",
        ])
        .arg(&wh)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "nvrtc@12.7.1 is not among the releases available",
        ))
        .stderr(predicate::str::contains("12.8.93, 12.9.86, 13.0.88"));
}

/// Unmounts a test's small file system, also when the test fails.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_is_a_clear_error_and_leaves_no_tree() {
    let Some(wh) = wheelhouse(&nvcc_set()) else {
        return;
    };
    let (tmp, root) = nvcc_repo();
    // A 150 MB file system holds the downloaded wheels but not the unpacked tree, so the
    // install fails while unpacking. Mounting one needs privileges this machine may lack.
    let cache = tmp.path().join("small");
    std::fs::create_dir(&cache).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=150m", "tmpfs"])
        .arg(&cache)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        common::skip("needs CAP_SYS_ADMIN to mount a small tmpfs");
        return;
    }
    let _guard = Mounted(cache.clone());
    cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0", "--wheels"])
        .arg(&wh)
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "no space left on the device while installing nvcc@13.0",
        ))
        .stderr(predicate::str::contains("nothing half-installed was left"));
    assert!(entries(&cache).is_empty(), "{:?}", entries(&cache));
    refused(
        &cache,
        &root,
        &["--offline", "build", "wmma_gemm_nvcc"],
        3,
        &["not installed"],
    );
}

#[test]
fn toolchain_bisection_options_that_do_not_apply_are_refused() {
    // Refused before any release is listed or installed: no wheels needed.
    let kernel = std::fs::read_to_string(crate_dir().join("kernels/vector_add.cu")).unwrap();
    let recipe = std::fs::read_to_string(crate_dir().join("recipes/vector_add.toml")).unwrap();
    let two = recipe.replace("target = \"sm_90\"", "targets = [\"sm_89\", \"sm_90\"]");
    let (tmp, root) = repo_with(&[
        ("kernels/vector_add.cu", &kernel),
        ("recipes/va.toml", &recipe),
        ("recipes/va2.toml", &two),
    ]);
    let cache = tmp.path().join("cache");
    let run = |args: &[&str]| {
        cmd(&cache, &root)
            .args(["bisect", "--toolchains", "nvrtc@12.9.86..nvrtc@13.0.88"])
            .args(args)
            .assert()
    };
    run(&["--recipe", "va", "--find", "fixed"])
        .code(2)
        .stderr(predicate::str::contains(
            "--toolchains searches for the first broken release",
        ));
    run(&["--recipe", "va", "--mode", "bench", "--devices", "0,1"])
        .code(2)
        .stderr(predicate::str::contains("hint: leave out --find fixed"));
    run(&["--recipe", "va2", "--mode", "check"])
        .code(2)
        .stderr(predicate::str::contains(
            "recipe `va2` has 2 targets; a check or bench bisection over toolchains runs one kernel",
        ));
    run(&["--recipe", "va", "--mode", "bench", "--threshold", "x"]).code(2);
    // Nothing was installed or recorded.
    assert!(entries(&cache).is_empty());
    assert!(!root.join(".repro/bisections").exists());
}

#[test]
fn check_and_bench_bisections_over_toolchains_build_each_release_then_need_the_gpu() {
    if common::has_gpu() {
        common::skip(
            "needs a machine without a GPU (on a GPU machine benches/gpu_toolchains.py runs these modes for real)",
        );
        return;
    }
    let need: Vec<(String, String)> = nvrtc_set().into_iter().skip(1).collect();
    let Some(wh) = wheelhouse(&need) else { return };
    let kernel = std::fs::read_to_string(crate_dir().join("kernels/vector_add.cu")).unwrap();
    let recipe = std::fs::read_to_string(crate_dir().join("recipes/vector_add.toml")).unwrap();
    let (tmp, root) = repo_with(&[
        ("kernels/vector_add.cu", &kernel),
        ("recipes/va.toml", &recipe),
    ]);
    let cache = tmp.path().join("cache");
    for mode in ["check", "bench"] {
        let out = bisect_releases(
            &cache,
            &root,
            &wh,
            &["--recipe", "va", "--param", "n=4096", "--mode", mode],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The good end was installed and built with its own release; the GPU stage is
        // where it stops, with the documented exit code for a missing driver.
        assert_eq!(out.status.code(), Some(3), "{mode}: {stderr}");
        assert!(
            stderr.contains("bisect: checking the good end nvrtc@12.9.86"),
            "{mode}: {stderr}"
        );
        assert!(
            stderr.contains(
                "error: could not evaluate nvrtc@12.9.86: no NVIDIA driver on this machine"
            ),
            "{mode}: {stderr}"
        );
        assert!(
            stderr.contains("hint: check and bench modes run the kernel on a GPU"),
            "{stderr}"
        );
        // No verdict was recorded for a step that never ran.
        assert!(!root.join(".repro/bisect").exists(), "{mode}");
        assert!(!root.join(".repro/bisections").exists(), "{mode}");
    }
    // The release's build is in the store, under a key that holds its wheel's digest.
    let builds: Vec<Value> = std::fs::read_dir(root.join(".repro/builds"))
        .unwrap()
        .flatten()
        .map(|e| serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect();
    assert_eq!(builds.len(), 1, "one build, reused by the second mode");
    assert_eq!(builds[0]["status"], "ok");
    assert!(
        builds[0]["inputs"]["compiler"].to_string().contains("12.9"),
        "{}",
        builds[0]["inputs"]["compiler"]
    );
}

#[test]
fn nvcc_releases_nobody_pinned_are_fetched_through_pip_and_bisected() {
    // About 110 MB of nvcc 13.1 wheels: opt-in (REPRO_TEST_UNPINNED_NVCC=1), so that CI's
    // time stays within bounds; the download is kept under target/ once made.
    if std::env::var_os("REPRO_TEST_UNPINNED_NVCC").is_none() {
        common::skip(
            "opt-in: set REPRO_TEST_UNPINNED_NVCC=1 (downloads nvcc 13.1's five wheels, about 110 MB, once)",
        );
        return;
    }
    let mut need = nvcc_set();
    need.extend(
        [
            ("nvidia-cuda-nvcc", "13.1.115"),
            ("nvidia-nvvm", "13.1.115"),
            ("nvidia-cuda-crt", "13.1.115"),
            ("nvidia-cuda-runtime", "13.1.80"),
            ("nvidia-cuda-cccl", "13.1.115"),
        ]
        .iter()
        .map(|(p, v)| (p.to_string(), v.to_string())),
    );
    let Some(wh) = wheelhouse(&need) else { return };
    let read = |p: &str| std::fs::read_to_string(crate_dir().join(p)).unwrap();
    let (tmp, root) = repo_with(&[
        ("repro.toml", &read("repro.toml")),
        (
            "kernels/popcount_cccl.cu",
            &read("kernels/popcount_cccl.cu"),
        ),
        (
            "recipes/popcount_cccl.toml",
            &read("recipes/popcount_cccl.toml"),
        ),
    ]);
    let cache = tmp.path().join("cache");
    let out = cmd(&cache, &root)
        .args([
            "--json",
            "bisect",
            "--toolchains",
            "nvcc@13.0..nvcc@13.1",
            "--recipe",
            "popcount_cccl",
            "--wheels",
        ])
        .arg(&wh)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // 13.1 is published (here: in the wheel directory) but not pinned.
    assert_eq!(v["releases"], serde_json::json!(["13.0", "13.1"]), "{v}");
    let a = &v["answers"][0];
    assert_eq!(a["first-bad"], "13.1", "{v}");
    assert_eq!(a["last-good"], "13.0", "{v}");
    let bad = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["release"] == "13.1")
        .unwrap();
    assert!(
        bad["detail"].as_str().unwrap().contains("__cccl_popc"),
        "{bad}"
    );
    // Every wheel of the unpinned release: the newest of its major.minor, digest recorded.
    let w = v["wheels"]["13.1"].as_array().unwrap();
    assert_eq!(w.len(), 5, "{v}");
    for x in w {
        assert_eq!(x["pinned"], false, "{x}");
        assert_eq!(x["sha256"].as_str().unwrap().len(), 64, "{x}");
    }
    assert!(
        v["wheels"]["13.0"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["pinned"] == true)
    );
    // The stamp of the side-by-side tree holds the same digests.
    let stamp: Value = serde_json::from_slice(
        &std::fs::read(tree_dir(&cache, "nvcc-13.1").join("toolchain.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(stamp["wheels"], v["wheels"]["13.1"]);
    assert_eq!(entries(&cache), ["nvcc-13.0", "nvcc-13.1"]);
    // Human output says that the release was trusted on first use.
    let human = cmd(&cache, &root)
        .args([
            "bisect",
            "--toolchains",
            "nvcc@13.0..13.1",
            "--recipe",
            "popcount_cccl",
            "--wheels",
        ])
        .arg(&wh)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&human.stderr);
    assert!(
        err.contains("note: 13.1 is not pinned in repro.toml")
            && err.contains("trust on first use"),
        "{err}"
    );
    // CUDA 12's nvcc wheels carry no nvcc driver: said, not attempted.
    refused(
        &cache,
        &root,
        &["toolchain", "install", "nvcc@12.9"],
        2,
        &["nvcc@12.9 is not a release this project pins"],
    );
}

/// Runs `repro ARGS` on a terminal (util-linux `script`), returning what the terminal showed,
/// or `None` where `script` cannot give one.
fn on_terminal(cache: &Path, root: &Path, args: &str) -> Option<(bool, String)> {
    let bin = assert_cmd::cargo::cargo_bin("repro");
    let o = std::process::Command::new("script")
        .current_dir(root)
        .env("XDG_CACHE_HOME", cache)
        .env("TERM", "xterm")
        .env_remove("REPRO_WHEELHOUSE")
        .args(["-qec", &format!("{} {args}", bin.display()), "/dev/null"])
        .output()
        .ok()?;
    Some((
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    ))
}

#[test]
fn install_and_bisection_progress_shows_on_a_terminal_only() {
    let Some(wh) = wheelhouse(&nvcc_set()) else {
        return;
    };
    let (tmp, root) = nvcc_repo();
    let cache = tmp.path().join("cache");
    // Off a terminal: status lines, no bar.
    let out = cmd(&cache, &root)
        .args(["toolchain", "install", "nvcc@13.0", "--wheels"])
        .arg(&wh)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("unpacking 5 wheel(s) of nvcc@13.0"), "{err}");
    assert!(!err.contains("ETA") && !err.contains('\x1b'), "{err}");
    // On a terminal: bars of bytes with an ETA for verifying and unpacking.
    let cache2 = tmp.path().join("cache2");
    let Some((ok, text)) = on_terminal(
        &cache2,
        &root,
        &format!("toolchain install nvcc@13.0 --wheels {}", wh.display()),
    ) else {
        common::skip("needs util-linux `script` to give repro a terminal");
        return;
    };
    assert!(ok, "{text}");
    assert!(
        text.contains("verifying") && text.contains("unpacking") && text.contains("ETA"),
        "no byte progress on a terminal: {text}"
    );
    assert!(text.contains("MiB"), "{text}");
    // -q on a terminal: nothing at all.
    let cache3 = tmp.path().join("cache3");
    let (ok, text) = on_terminal(
        &cache3,
        &root,
        &format!("-q toolchain install nvcc@13.0 --wheels {}", wh.display()),
    )
    .unwrap();
    assert!(
        ok && !text.contains("ETA") && !text.contains("verifying"),
        "{text}"
    );

    // A bisection shows a bar of steps with an ETA: a script bisection over 8 commits.
    for i in 1..=8 {
        std::fs::write(root.join("n.txt"), format!("{i}\n")).unwrap();
        common::git(&root, &["add", "-A"]);
        common::git(&root, &["commit", "-qm", &format!("c{i}")]);
    }
    let (ok, text) = on_terminal(
        &cache,
        &root,
        "bisect --good HEAD~7 --bad HEAD --script 'test $(cat n.txt) -lt 6'",
    )
    .unwrap();
    assert!(ok, "{text}");
    assert!(
        text.contains("/5 steps") && text.contains("left]"),
        "no bar of steps: {text}"
    );
}

/// A repository with vector_add as `va` (sm_70 and sm_90), `v90` (sm_90 only) and `broken`
/// (sm_90, a kernel that does not compile with any release).
fn bisection_repo() -> (tempfile::TempDir, PathBuf) {
    let kernel = std::fs::read_to_string(crate_dir().join("kernels/vector_add.cu")).unwrap();
    let recipe = std::fs::read_to_string(crate_dir().join("recipes/vector_add.toml")).unwrap();
    let two = recipe.replace("target = \"sm_90\"", "targets = [\"sm_70\", \"sm_90\"]");
    let broken = recipe.replace("kernels/vector_add.cu", "kernels/broken.cu");
    assert_ne!(broken, recipe, "the recipe names its source");
    repo_with(&[
        ("kernels/vector_add.cu", &kernel),
        ("kernels/broken.cu", "__global__ void vector_add( { }\n"),
        ("recipes/va.toml", &two),
        ("recipes/v90.toml", &recipe),
        ("recipes/broken.toml", &broken),
    ])
}

/// `repro bisect --toolchains nvrtc@12.9.86..nvrtc@13.0.88 ARGS --wheels WHEELS`: the
/// release range every toolchain bisection test searches.
fn bisect_releases(
    cache: &Path,
    root: &Path,
    wheels: &Path,
    args: &[&str],
) -> std::process::Output {
    cmd(cache, root)
        .args(["bisect", "--toolchains", "nvrtc@12.9.86..nvrtc@13.0.88"])
        .args(args)
        .arg("--wheels")
        .arg(wheels)
        .output()
        .unwrap()
}

/// The records of toolchain bisections under `root`.
fn bisection_records(root: &Path) -> usize {
    std::fs::read_dir(root.join(".repro/bisections"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn toolchain_bisection_reports_each_target_and_its_evidence_to_a_person() {
    let need: Vec<(String, String)> = nvrtc_set().into_iter().skip(1).collect();
    let Some(wh) = wheelhouse(&need) else { return };
    let (tmp, root) = bisection_repo();
    let cache = tmp.path().join("cache");
    let run = |recipe: &str| bisect_releases(&cache, &root, &wh, &["--recipe", recipe]);
    let out = run("va");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0], "first bad release for sm_70: nvrtc@13.0.88 (last good: nvrtc@12.9.86)",
        "{stdout}"
    );
    assert_eq!(
        lines[1], "no change for sm_90: good with nvrtc@12.9.86 and good with nvrtc@13.0.88",
        "{stdout}"
    );
    assert!(
        lines[3].starts_with("evidence (2 of 2 releases evaluated; record "),
        "{stdout}"
    );
    // One row per release and target, in order, with the verdict and the evidence.
    let rows: Vec<Vec<&str>> = lines[5..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    let head: Vec<[&str; 4]> = rows.iter().map(|r| [r[0], r[1], r[2], r[3]]).collect();
    assert_eq!(
        head,
        [
            ["12.9.86", "sm_70", "good", "no"],
            ["12.9.86", "sm_90", "good", "no"],
            ["13.0.88", "sm_70", "bad", "no"],
            ["13.0.88", "sm_90", "good", "no"],
        ],
        "{stdout}"
    );
    assert!(
        lines[7].contains("invalid value for --gpu-architecture"),
        "{stdout}"
    );
    // Neither release is pinned (the repository has no repro.toml): the note says so.
    assert!(
        stderr.contains("note: 12.9.86, 13.0.88 are not pinned in repro.toml"),
        "{stderr}"
    );
    assert_eq!(bisection_records(&root), 1);
    // The same question again: the same answers, every step from the store.
    let again = run("va");
    let stdout2 = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(0), "{stdout2}");
    assert_eq!(stdout2.lines().take(4).collect::<Vec<_>>(), lines[..4]);
    let cached: Vec<&str> = stdout2
        .lines()
        .skip(5)
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(cached, ["yes"; 4], "{stdout2}");
    assert_eq!(bisection_records(&root), 1, "the same record");

    // A recipe whose only target builds with both ends has no change to find: an error
    // naming the end and the target, and no record.
    let out = run("v90");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("error: the bad end nvrtc@13.0.88 is good for sm_90"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: choose a TO where it is broken"),
        "{stderr}"
    );
    assert_eq!(bisection_records(&root), 1);
}

#[test]
fn toolchain_bisection_whose_good_end_does_not_build_is_refused_in_every_mode() {
    let need: Vec<(String, String)> = nvrtc_set().into_iter().skip(1).collect();
    let Some(wh) = wheelhouse(&need) else { return };
    let (tmp, root) = bisection_repo();
    let cache = tmp.path().join("cache");
    let run =
        |mode: &str| bisect_releases(&cache, &root, &wh, &["--recipe", "broken", "--mode", mode]);
    // Build mode: the good end is bad for the target, with the compiler's first error.
    let out = run("build");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: the good end nvrtc@12.9.86 is bad for sm_90: kernels/broken.cu(1): error"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: choose an older FROM that builds"),
        "{stderr}"
    );
    // Check mode stops at the good end's build, before any kernel would run (so also on a
    // machine without a GPU), with the step's verdict and why.
    let out = run("check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: the good end nvrtc@12.9.86 is not good for broken: it is bad (build failed: kernels/broken.cu(1): error"),
        "{stderr}"
    );
    assert!(!stderr.contains("no NVIDIA driver"), "{stderr}");
    assert_eq!(bisection_records(&root), 0);
}

#[test]
fn a_release_whose_wheel_is_damaged_stops_the_bisection_and_installs_nothing_of_it() {
    let need: Vec<(String, String)> = nvrtc_set().into_iter().skip(1).collect();
    let Some(wh) = wheelhouse(&need) else { return };
    let (tmp, root) = bisection_repo();
    let cache = tmp.path().join("cache");
    // A wheel directory with 12.9.86 intact and 13.0.88 cut short.
    let damaged = tmp.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    let mut found = 0;
    for e in std::fs::read_dir(&wh).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("nvidia_cuda_nvrtc_cu12-12.9.86-") {
            std::fs::copy(e.path(), damaged.join(&name)).unwrap();
            found += 1;
        } else if name.starts_with("nvidia_cuda_nvrtc-13.0.88-") {
            let bytes = std::fs::read(e.path()).unwrap();
            std::fs::write(damaged.join(&name), &bytes[..bytes.len() / 4]).unwrap();
            found += 1;
        }
    }
    assert_eq!(found, 2, "both wheels in {}", wh.display());
    let out = bisect_releases(&cache, &root, &damaged, &["--recipe", "va"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains("error: could not install nvrtc@13.0.88"),
        "{stderr}"
    );
    assert!(stderr.contains("is invalid"), "{stderr}");
    // The good end was installed; the damaged release left nothing behind; no record.
    assert_eq!(entries(&cache), ["nvrtc-12.9.86"]);
    assert_eq!(bisection_records(&root), 0);
}
