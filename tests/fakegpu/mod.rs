//! The fake NVIDIA driver for the tests (tests/env/fakegpu.rs, tests/bench/fakegpu.rs): the C
//! library in this directory (fakegpu.c), built for each test with the C compiler, and the
//! repro commands that run on it.
//!
//! Each fake is compiled with `cc -shared -fPIC` into a temporary directory, twice, as a real
//! driver installs it: `libcuda.so.VERSION` (soname `libcuda.so.1`; repro reads the driver
//! version from this file name when there is no kernel module) and `libnvidia-ml.so.VERSION`
//! (soname `libnvidia-ml.so.1`), with the names cudarc and NVML load (`libcuda.so`,
//! `libcuda.so.1`, `libnvidia-ml.so.1`) as symlinks, and that directory is put first on the
//! `LD_LIBRARY_PATH` of the repro the test runs. Both cudarc (feature `dynamic-loading`) and
//! nvml-wrapper `dlopen` these names, and repro's own driver search
//! (src/foundation/driverlib.rs) also loads them by name first, so the loader finds the fake
//! before any driver the host has. The tests check that it did: the fingerprint's
//! `driver.library` is the fake's file. The kernel module's version file
//! (`/proc/driver/nvidia/version`) is stood in for by `REPRO_NVIDIA_VERSION_FILE`, so that the
//! driver version and the device cache's key come from the fake on any machine.
//!
//! The fake answers from `FAKEGPU_*` variables (see fakegpu.c's head): two runs with
//! different variables are two different machines.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

/// A fake driver installed in a temporary directory.
pub struct FakeGpu {
    pub tmp: tempfile::TempDir,
    /// The directory put on `LD_LIBRARY_PATH`.
    pub dir: PathBuf,
    /// The library file (what `driver.library` must name).
    pub lib: PathBuf,
    /// The stand-in for `/proc/driver/nvidia/version`.
    pub version_file: PathBuf,
    /// `XDG_CACHE_HOME` of the runs (the device cache lives under it).
    pub cache: PathBuf,
}

/// Compiles the fake into `dir/NAME` with this soname; `None` (the test is skipped) without
/// a C compiler.
pub fn compile(dir: &Path, name: &str, soname: &str) -> Option<PathBuf> {
    let src = crate::common::crate_dir().join("tests/fakegpu/fakegpu.c");
    let out = dir.join(name);
    let run = std::process::Command::new("cc")
        .args([
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            &format!("-Wl,-soname,{soname}"),
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .output();
    match run {
        Err(e) => {
            crate::common::skip(&format!(
                "needs a C compiler (cc) to build the fake driver: {e}"
            ));
            None
        }
        Ok(o) => {
            assert!(
                o.status.success(),
                "cc could not build {}: {}",
                src.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            Some(out)
        }
    }
}

impl FakeGpu {
    /// A fake driver of this version (`580.159.04`), with its library in a directory of
    /// its own under the names the loader is asked for.
    pub fn new(version: &str) -> Option<FakeGpu> {
        FakeGpu::with_files(
            version,
            &format!("libcuda.so.{version}"),
            &format!("libnvidia-ml.so.{version}"),
        )
    }

    /// A fake driver of this version whose library files have these names (`libcuda.so.1`
    /// itself, or a name the loader's names link to); a symlink is made for each name the
    /// loader is asked for that is not a file already.
    pub fn with_files(version: &str, cuda_file: &str, nvml_file: &str) -> Option<FakeGpu> {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("driver");
        std::fs::create_dir(&dir).unwrap();
        let lib = compile(&dir, cuda_file, "libcuda.so.1")?;
        let nvml = compile(&dir, nvml_file, "libnvidia-ml.so.1")?;
        for (name, to) in [
            ("libcuda.so", &lib),
            ("libcuda.so.1", &lib),
            ("libnvidia-ml.so.1", &nvml),
        ] {
            if !dir.join(name).exists() {
                std::os::unix::fs::symlink(to.file_name().unwrap(), dir.join(name)).unwrap();
            }
        }
        let version_file = tmp.path().join("nvidia-version");
        std::fs::write(
            &version_file,
            format!(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Thu Oct  2 2025\n\
                 GCC version:  gcc version 12.2.0\n"
            ),
        )
        .unwrap();
        let cache = tmp.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        Some(FakeGpu {
            tmp,
            dir,
            lib,
            version_file,
            cache,
        })
    }

    /// repro on this fake, in its temporary directory (no repository), with `vars` set.
    pub fn cmd(&self, vars: &[(&str, &str)]) -> assert_cmd::Command {
        let mut c = crate::common::repro(&self.cache);
        c.current_dir(self.tmp.path())
            .env("LD_LIBRARY_PATH", &self.dir)
            .env("REPRO_NVIDIA_VERSION_FILE", &self.version_file);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("FAKEGPU_") {
                c.env_remove(k);
            }
        }
        for (k, v) in vars {
            c.env(k, v);
        }
        c
    }

    pub fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        self.cmd(vars).args(args).output().unwrap()
    }

    /// `env capture --json` on this fake: the fingerprint, after checking that repro ran
    /// cleanly and loaded the fake (not a driver the host may have).
    pub fn capture(&self, vars: &[(&str, &str)]) -> Value {
        let out = self.run(&["env", "capture", "--json"], vars);
        let fp = ok_json(&out);
        self.assert_loaded(&fp);
        fp
    }

    pub fn assert_loaded(&self, fp: &Value) {
        assert_eq!(
            fp["driver"]["library"],
            self.lib.to_str().unwrap(),
            "repro did not load the fake driver: {}",
            fp["driver"]
        );
    }

    /// Forgets the devices repro cached for this boot and driver: the next run is another
    /// machine (other GPUs cannot appear without a reboot or a driver reload on a real one).
    pub fn forget_devices(&self) {
        let _ = std::fs::remove_file(self.cache.join("repro/gpu-devices.json"));
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
}

/// stdout as JSON, after checking that repro exited 0 without a panic.
pub fn ok_json(out: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "repro panicked: {stderr}");
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}
