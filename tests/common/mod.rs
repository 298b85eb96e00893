//! Helpers shared by the integration tests: the binary with a clean environment, and
//! throwaway git repositories that ignore the user's git configuration.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repro binary, with an isolated cache and no colour.
pub fn repro(cache: &Path) -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("repro").unwrap();
    c.env("XDG_CACHE_HOME", cache)
        .env("NO_COLOR", "1")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("REPRO_PYTHON")
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX");
    // The NVRTC this test binary provisioned, if it had to (see `nvrtc_available`).
    if let Some(Ok(dir)) = PROVISIONED.get() {
        c.env("REPRO_NVRTC", dir);
    }
    c
}

/// Reports a test as skipped at run time, with the reason. The line goes straight to the
/// process's stderr, past libtest's capture, so it shows in `cargo test`'s output however
/// the test ends; `.ci/run` counts these lines and lists them.
pub fn skip(reason: &str) {
    use std::io::Write as _;
    let name = std::thread::current()
        .name()
        .unwrap_or("unknown test")
        .to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {name}: {reason}");
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

/// Whether this machine has an NVIDIA driver (tests whose expectations differ on a GPU
/// machine branch on it).
pub fn has_gpu() -> bool {
    Path::new("/proc/driver/nvidia/version").exists()
}

/// The first line of a GPU test, which is `#[ignore = "needs a GPU: ..."]` so that libtest
/// reports it as ignored (not passed) on a machine without one: run with `--ignored` (as
/// `benches/gpu_tests.sh` does) where there is no GPU, it fails instead of passing unseen.
pub fn require_gpu() {
    assert!(
        has_gpu(),
        "this test needs an NVIDIA GPU (no /proc/driver/nvidia/version): it is #[ignore]d \
         for that reason; run it on a GPU machine (benches/gpu_tests.sh)"
    );
}

/// The crate's own directory (for fixtures). `REPRO_TEST_CRATE_DIR` overrides the path
/// compiled in, for test binaries copied to another machine (benches/gpu_tests.sh).
pub fn crate_dir() -> PathBuf {
    std::env::var_os("REPRO_TEST_CRATE_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The NVRTC directory this process provisioned, or why it could not.
static PROVISIONED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();

/// Whether NVRTC can be found, provisioning it if not. An NVRTC the machine has
/// (`REPRO_NVRTC`, a CUDA install, a wheel in site-packages) is used as it is; otherwise the
/// version `repro.toml` pins is downloaded once through pip into cargo's target directory
/// and installed there with `repro toolchain install --wheel` (which checks the sha256 pin),
/// so that `cargo test` on a fresh machine with only Rust and Python runs the NVRTC tests.
/// Where even that fails (no network), the test is reported as skipped with the reason.
pub fn nvrtc_available() -> bool {
    if PROVISIONED.get().is_none() && found_nvrtc() {
        return true;
    }
    match PROVISIONED.get_or_init(provision_nvrtc) {
        Ok(_) => true,
        Err(why) => {
            assert!(
                std::env::var_os("REPRO_TEST_REQUIRE_NVRTC").is_none(),
                "NVRTC is required here but could not be provisioned: {why}"
            );
            skip(&format!("needs NVRTC: {why}"));
            false
        }
    }
}

/// The NVRTC directory `nvrtc_available` provisioned, if it had to (for tests that start
/// repro without [`repro`]).
pub fn provisioned_nvrtc() -> Option<PathBuf> {
    PROVISIONED.get().and_then(|r| r.as_ref().ok().cloned())
}

/// Whether `repro toolchain which` finds an NVRTC without help.
fn found_nvrtc() -> bool {
    let tmp = tempfile::tempdir().unwrap();
    repro(tmp.path())
        .args(["toolchain", "which"])
        .output()
        .unwrap()
        .status
        .success()
}

/// The NVRTC version `repro.toml` pins.
pub fn pinned_nvrtc_version() -> String {
    let text = std::fs::read_to_string(crate_dir().join("repro.toml")).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    v["toolchain"]["nvrtc"]["version"]
        .as_str()
        .expect("repro.toml pins an NVRTC version")
        .to_string()
}

/// Where provisioned test dependencies live: cargo's per-target scratch directory, shared
/// by every test binary and kept between runs.
fn deps_dir() -> PathBuf {
    std::env::var_os("REPRO_TEST_TMPDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
        .join("repro-test-deps")
}

/// Runs `f` holding an exclusive lock on `deps_dir()/NAME.lock`, so that test binaries
/// running at once download and install only once.
fn locked<T>(name: &str, f: impl FnOnce() -> T) -> T {
    std::fs::create_dir_all(deps_dir()).unwrap();
    let file = std::fs::File::create(deps_dir().join(format!("{name}.lock"))).unwrap();
    fs4::fs_std::FileExt::lock_exclusive(&file).unwrap();
    let out = f();
    drop(file);
    out
}

/// Downloads the wheels `specs` name (`package==version`) through pip's ordinary client into
/// a directory of their own (a download cut short leaves no partial wheel where the next run
/// would take it for whole), and returns that directory; the caller moves the wheels into
/// place. Errors carry pip's last lines.
fn pip_download(specs: &[String]) -> Result<PathBuf, String> {
    let part = deps_dir().join(format!(".download-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&part);
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
        ])
        .arg(&part)
        .args(specs)
        .output()
        .map_err(|e| format!("cannot run python3 -m pip: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&part);
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(2).collect();
        return Err(format!(
            "pip could not download {}: {}",
            specs.join(" "),
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(part)
}

/// The pinned `nvidia-cuda-nvrtc` wheel, downloaded through pip once.
pub fn nvrtc_wheel() -> Result<PathBuf, String> {
    let version = pinned_nvrtc_version();
    let dir = deps_dir().join(format!("wheels-nvrtc-{version}"));
    let find = |dir: &Path| {
        std::fs::read_dir(dir).ok().and_then(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == "whl"))
        })
    };
    locked("wheel", || {
        if let Some(w) = find(&dir) {
            return Ok(w);
        }
        let part = pip_download(&[format!("nvidia-cuda-nvrtc=={version}")])?;
        std::fs::rename(&part, &dir).map_err(|e| e.to_string())?;
        find(&dir).ok_or_else(|| "pip downloaded no wheel".to_string())
    })
}

/// Installs the pinned NVRTC from its wheel with `repro toolchain install` into a cache
/// under the target directory and returns its library directory.
fn provision_nvrtc() -> Result<PathBuf, String> {
    let version = pinned_nvrtc_version();
    let cache = deps_dir().join("cache");
    let toolchains = cache.join("repro/toolchains");
    // Trees are named by the digest of their wheels: `nvrtc-VERSION-DIGEST`.
    let lib = || {
        std::fs::read_dir(&toolchains)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name().is_some_and(|n| {
                    n.to_string_lossy()
                        .starts_with(&format!("nvrtc-{version}-"))
                }) && p.join("toolchain.json").is_file()
            })
            .map(|p| p.join("lib"))
    };
    let wheel = nvrtc_wheel()?;
    locked("nvrtc", || {
        if let Some(lib) = lib() {
            return Ok(lib);
        }
        let out = assert_cmd::Command::cargo_bin("repro")
            .unwrap()
            .arg("-C")
            .arg(crate_dir())
            .args(["-q", "toolchain", "install", "--wheel"])
            .arg(&wheel)
            .env("XDG_CACHE_HOME", &cache)
            .env_remove("REPRO_NVRTC")
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(format!(
                "`repro toolchain install --wheel {}` failed: {}",
                wheel.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        lib().ok_or_else(|| "the NVRTC install left no tree".to_string())
    })
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
        skip("needs nix: `nix --version` does not run (install nix, e.g. Debian's nix-bin)");
    }
    ok
}

/// Options that make nix work offline, with an empty flake registry written under `dir`.
pub fn offline_nix_flags(dir: &Path) -> String {
    let registry = dir.join("flake-registry.json");
    std::fs::write(&registry, r#"{"flakes":[],"version":2}"#).unwrap();
    format!("--offline --option flake-registry {}", registry.display())
}

/// The nvcc 13.0 wheels `repro.toml` pins (`[toolchain.nvcc."13.0"]`), as (package, version).
pub fn pinned_nvcc_wheels() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(crate_dir().join("repro.toml")).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    v["toolchain"]["nvcc"]["13.0"]["wheels"]
        .as_array()
        .expect("repro.toml pins nvcc 13.0")
        .iter()
        .map(|w| {
            (
                w["package"].as_str().unwrap().to_string(),
                w["version"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A directory holding the wheels `need` names (package, version), downloaded through
/// pip's ordinary client into cargo's target directory once and kept between runs (nvcc
/// wheels are tens of MB each). `repro toolchain install` checks the sha256 pins of
/// repro.toml when it installs from here, so a wrong file fails the test that uses it.
/// `Err` says why a wheel could not be had (no network, no pip).
pub fn wheels(need: &[(String, String)]) -> Result<PathBuf, String> {
    let dir = deps_dir().join("wheelhouse");
    locked("wheelhouse", || {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let have = |package: &str, version: &str| {
            let prefix = format!("{}-{version}-", package.replace('-', "_"));
            std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with(&prefix) && n.ends_with(".whl")
                })
        };
        let missing: Vec<String> = need
            .iter()
            .filter(|(p, v)| !have(p, v))
            .map(|(p, v)| format!("{p}=={v}"))
            .collect();
        if missing.is_empty() {
            return Ok(dir.clone());
        }
        let part = pip_download(&missing)?;
        for e in std::fs::read_dir(&part)
            .map_err(|e| e.to_string())?
            .flatten()
        {
            std::fs::rename(e.path(), dir.join(e.file_name())).map_err(|e| e.to_string())?;
        }
        let _ = std::fs::remove_dir_all(&part);
        Ok(dir.clone())
    })
}

/// `repro -C ROOT ARGS` with an isolated cache: (exit code, stdout, stderr).
pub fn run_in(cache: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    outcome(repro(cache).arg("-C").arg(root).args(args))
}

/// Runs `cmd` to its end: (exit code, or -1 when killed; stdout; stderr).
pub fn outcome(cmd: &mut assert_cmd::Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The PyTorch and NumPy pairs the torch tests use: two PyTorch releases (so that an
/// extension built against one can be loaded under the other) and both NumPy majors.
pub const TORCH_OLD: (&str, &str) = ("2.4.1", "1.26.4");
/// The newer pair (see [`TORCH_OLD`]).
pub const TORCH_NEW: (&str, &str) = ("2.5.1", "2.1.3");

/// The interpreter of a virtual environment with `torch==TORCH` and `numpy==NUMPY` from
/// their wheels, with their dependencies (PyPI's Linux torch wheels import only with their
/// `nvidia-*` libraries installed, even without a GPU), made once per target directory
/// through pip's ordinary client: its download cache (`PIP_CACHE_DIR`, kept between CI
/// runs) means a wheel crosses the network once. `REPRO_TEST_TORCH_WHEELS` may name a
/// directory of wheels to install from first. `Err` says why there is none; with
/// `REPRO_TEST_REQUIRE_TORCH` set (CI) that fails the test instead.
pub fn torch_venv((torch, numpy): (&str, &str)) -> Result<PathBuf, String> {
    let dir = deps_dir().join(format!("venv-torch-{torch}-numpy-{numpy}"));
    let python = dir.join("bin/python3");
    let made = locked(&format!("venv-torch-{torch}"), || {
        if dir.join(".complete").is_file() {
            return Ok(());
        }
        let part = deps_dir().join(format!("venv-torch-{torch}-numpy-{numpy}.part"));
        let _ = std::fs::remove_dir_all(&part);
        let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
            let out = cmd
                .output()
                .map_err(|e| format!("cannot run {what}: {e}"))?;
            if out.status.success() {
                return Ok(());
            }
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            Err(format!(
                "{what} failed: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ))
        };
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&part),
            "python3 -m venv",
        )?;
        let mut pip = Command::new(part.join("bin/python3"));
        pip.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--only-binary=:all:",
        ]);
        if let Some(w) = std::env::var_os("REPRO_TEST_TORCH_WHEELS").filter(|w| !w.is_empty()) {
            pip.arg("--find-links").arg(w);
        }
        pip.arg(format!("torch=={torch}"))
            .arg(format!("numpy=={numpy}"));
        // A failed install (a full disk, say) leaves gigabytes behind: they go at once, so
        // that the next environment has the room.
        let installed = run(
            &mut pip,
            &format!("pip install torch=={torch} numpy=={numpy}"),
        )
        .and_then(|()| std::fs::write(part.join(".complete"), "").map_err(|e| e.to_string()))
        .and_then(|()| std::fs::rename(&part, &dir).map_err(|e| e.to_string()));
        if installed.is_err() {
            let _ = std::fs::remove_dir_all(&part);
        }
        installed
    });
    match made {
        Ok(()) => Ok(python),
        Err(why) => {
            assert!(
                std::env::var_os("REPRO_TEST_REQUIRE_TORCH").is_none(),
                "PyTorch {torch} is required here but could not be installed: {why}"
            );
            Err(why)
        }
    }
}

/// Both torch environments, or `None` after printing why the test is skipped.
pub fn torch_venvs() -> Option<(PathBuf, PathBuf)> {
    match (torch_venv(TORCH_OLD), torch_venv(TORCH_NEW)) {
        (Ok(a), Ok(b)) => Some((a, b)),
        (Err(why), _) | (_, Err(why)) => {
            skip(&format!("needs PyTorch in a venv: {why}"));
            None
        }
    }
}

/// The `nvidia-cuda-cuobjdump` wheel's release the resource tests compare against (NVIDIA
/// publishes cuobjdump wheels from 13.2 on; it reads the cubins of 13.0's compilers).
pub const CUOBJDUMP_VERSION: &str = "13.2.78";

/// `cuobjdump` from NVIDIA's wheel, downloaded through pip once into cargo's target
/// directory and unpacked with Python's zipfile module. `Err` says why it cannot be had.
pub fn cuobjdump() -> Result<PathBuf, String> {
    let dir = deps_dir().join(format!("cuobjdump-{CUOBJDUMP_VERSION}"));
    let exe = dir.join("nvidia/cu13/bin/cuobjdump");
    locked("cuobjdump", || {
        if exe.is_file() {
            return Ok(exe.clone());
        }
        let part = pip_download(&[format!("nvidia-cuda-cuobjdump=={CUOBJDUMP_VERSION}")])?;
        let wheel = std::fs::read_dir(&part)
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
            .ok_or("pip downloaded no cuobjdump wheel")?;
        let unpack = deps_dir().join(format!(".cuobjdump-{}", std::process::id()));
        let out = Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&unpack)
            .output()
            .map_err(|e| format!("cannot run python3 -m zipfile: {e}"))?;
        let _ = std::fs::remove_dir_all(&part);
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        use std::os::unix::fs::PermissionsExt as _;
        let unpacked = unpack.join("nvidia/cu13/bin/cuobjdump");
        std::fs::set_permissions(&unpacked, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        std::fs::rename(&unpack, &dir).map_err(|e| e.to_string())?;
        Ok(exe.clone())
    })
}

/// A wheel directory holding `need`, or `None` (with the reason printed) when the wheels
/// cannot be had here.
pub fn wheelhouse(need: &[(String, String)]) -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("REPRO_TEST_WHEELHOUSE").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(d));
    }
    match wheels(need) {
        Ok(d) => Some(d),
        Err(why) => {
            assert!(
                std::env::var_os("REPRO_TEST_REQUIRE_WHEELHOUSE").is_none(),
                "the wheels are required here but could not be had: {why}"
            );
            skip(&format!("needs NVIDIA's wheels through pip: {why}"));
            None
        }
    }
}
