//! `repro toolchain install | list | which`: provision the pinned NVRTC without root or a
//! CUDA install, and say which compilers builds would use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::cli::{Globals, emit, emit_json};
use crate::error::{Diagnose, UserError};
use crate::exit;
use crate::keys;
use crate::process::{Cmd, ProcessError};
use crate::toolchain;

/// The Python package that carries NVRTC.
pub const NVRTC_PACKAGE: &str = "nvidia-cuda-nvrtc";

/// Arguments of `repro toolchain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ToolchainCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ToolchainCommand {
    /// Download (through pip) and install the pinned NVRTC, verified by sha256.
    Install(InstallArgs),
    /// List the toolchains repro has installed.
    List,
    /// Say which NVRTC and nvcc builds would use, and why.
    Which,
}

#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// The nvidia-cuda-nvrtc version [default: the one pinned in repro.toml].
    #[arg(long, value_name = "VERSION")]
    nvrtc: Option<String>,
    /// Install from this wheel file instead of downloading one.
    #[arg(long, value_name = "FILE")]
    wheel: Option<PathBuf>,
    /// The wheel's expected sha256 [default: the pin in repro.toml for this architecture].
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
    /// Reinstall even if that version is installed.
    #[arg(long)]
    force: bool,
}

/// Why a toolchain could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// No sha256 to verify against.
    #[error("no sha256 is pinned for {NVRTC_PACKAGE} {version} on {arch}")]
    NoPin {
        /// The version asked for.
        version: String,
        /// This machine's architecture.
        arch: String,
    },
    /// pip failed.
    #[error("could not download {NVRTC_PACKAGE} {version}")]
    Download {
        /// The version.
        version: String,
        /// pip's failure.
        #[source]
        source: ProcessError,
    },
    /// The wheel is not the pinned one.
    #[error("{wheel} has sha256 {actual}, but the pin is {expected}; refusing to install it")]
    Mismatch {
        /// The wheel file.
        wheel: String,
        /// The pinned digest.
        expected: String,
        /// Its digest.
        actual: String,
    },
    /// The wheel does not contain an NVRTC library where one is expected.
    #[error("{wheel} does not look like an NVRTC wheel: {what}")]
    Layout {
        /// The wheel file.
        wheel: String,
        /// What is missing.
        what: String,
    },
    /// A file operation failed.
    #[error("cannot {what} {}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Diagnose for InstallError {
    fn exit_code(&self) -> u8 {
        match self {
            InstallError::NoPin { .. } | InstallError::Layout { .. } => exit::USAGE,
            InstallError::Mismatch { .. } => exit::MISMATCH,
            InstallError::Download { .. } => exit::ENVIRONMENT,
            InstallError::Io { .. } => exit::IO,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            InstallError::NoPin { arch, .. } => Some(format!(
                "pin it in repro.toml ([toolchain.nvrtc] sha256 = {{ {arch} = \"...\" }}) or pass --sha256"
            )),
            InstallError::Download { .. } => Some("check that python3 and pip work and can reach the package index, or pass --wheel FILE".into()),
            InstallError::Mismatch { .. } => Some("the file differs from the one the project pinned; download it again, or update the pin if the change is intended".into()),
            _ => None,
        }
    }
}

/// Runs `repro toolchain ...`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let cfg = g.config()?;
    match a.command {
        ToolchainCommand::Install(i) => install(g, &cfg, i),
        ToolchainCommand::List => list(g),
        ToolchainCommand::Which => which(g),
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

fn install(g: &Globals, cfg: &crate::config::Config, a: InstallArgs) -> anyhow::Result<u8> {
    let pin = cfg.toolchain.nvrtc.as_ref();
    let version = match (&a.nvrtc, pin) {
        (Some(v), _) => v.clone(),
        (None, Some(p)) => p.version.clone(),
        (None, None) => {
            return Err(UserError::usage("no NVRTC version given and none pinned")
                .hint("pass --nvrtc VERSION, or pin one in repro.toml under [toolchain.nvrtc]")
                .into());
        }
    };
    let arch = std::env::consts::ARCH.to_string();
    let expected = match (&a.sha256, pin) {
        (Some(s), _) => s.to_lowercase(),
        (None, Some(p)) if p.version == version => match p.sha256.get(&arch) {
            Some(s) => s.to_lowercase(),
            None => return Err(InstallError::NoPin { version, arch }.into()),
        },
        _ => return Err(InstallError::NoPin { version, arch }.into()),
    };
    let managed = toolchain::managed_dir().ok_or_else(|| {
        UserError::with_code(
            exit::ENVIRONMENT,
            "cannot find a cache directory: neither XDG_CACHE_HOME nor HOME is set",
        )
    })?;
    let dest = managed.join(format!("nvrtc-{version}"));
    let installed_sha = std::fs::read(dest.join("toolchain.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["wheel-sha256"].as_str().map(str::to_string));
    if !a.force && installed_sha.as_deref() == Some(expected.as_str()) {
        let out = json!({"schema": 1, "version": version, "path": dest.display().to_string(), "installed": false, "already-installed": true});
        if g.json {
            emit_json(&out)?;
        } else if !g.quiet {
            emit(&format!(
                "NVRTC {version} is already installed at {}\n",
                dest.display()
            ))?;
        }
        return Ok(exit::OK);
    }

    std::fs::create_dir_all(&managed).map_err(io("create", &managed))?;
    let staging = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(&managed)
        .map_err(io("create a directory in", &managed))?;
    let wheel = match &a.wheel {
        Some(w) => g.cwd.join(w),
        None => {
            let dl = staging.path().join("download");
            if !g.quiet && !g.json {
                eprintln!("downloading {NVRTC_PACKAGE}=={version} through pip...");
            }
            Cmd::new("python3")
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
                .arg(&dl)
                .arg(format!("{NVRTC_PACKAGE}=={version}"))
                .timeout(Duration::from_secs(1800))
                .run()
                .map_err(|source| InstallError::Download {
                    version: version.clone(),
                    source,
                })?;
            std::fs::read_dir(&dl)
                .map_err(io("read", &dl))?
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == "whl"))
                .ok_or_else(|| InstallError::Layout {
                    wheel: dl.display().to_string(),
                    what: "pip downloaded no wheel".into(),
                })?
        }
    };
    let bytes = std::fs::read(&wheel).map_err(io("read", &wheel))?;
    let actual = keys::sha256_hex(&bytes);
    drop(bytes);
    if actual != expected {
        return Err(InstallError::Mismatch {
            wheel: g.shown(&wheel),
            expected,
            actual,
        }
        .into());
    }
    let unpacked = staging.path().join("wheel");
    Cmd::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&unpacked)
        .timeout(Duration::from_secs(600))
        .run()
        .map_err(|e| InstallError::Layout {
            wheel: g.shown(&wheel),
            what: format!("it did not unpack: {e}"),
        })?;
    let lib = ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"]
        .iter()
        .map(|s| unpacked.join(s))
        .find(|p| p.is_dir())
        .ok_or_else(|| InstallError::Layout {
            wheel: g.shown(&wheel),
            what: "no nvidia/cu13/lib or nvidia/cuda_nvrtc/lib".into(),
        })?;
    let out = staging.path().join("toolchain");
    std::fs::create_dir_all(&out).map_err(io("create", &out))?;
    std::fs::rename(&lib, out.join("lib")).map_err(io("move", &lib))?;
    let found = toolchain::Found {
        path: toolchain::find_in(&out.join("lib")).ok_or_else(|| InstallError::Layout {
            wheel: g.shown(&wheel),
            what: "no libnvrtc.so in it".into(),
        })?,
        source: "new install".into(),
    };
    // Prove the library loads and answers before it is put in place.
    let nvrtc_version = toolchain::load_at(found)
        .map_err(|what| InstallError::Layout {
            wheel: g.shown(&wheel),
            what,
        })?
        .version;
    let meta = json!({
        "schema": 1,
        "package": NVRTC_PACKAGE,
        "version": version,
        "nvrtc-version": nvrtc_version,
        "wheel": wheel.file_name().map(|n| n.to_string_lossy().into_owned()),
        "wheel-sha256": actual,
        "installed-at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    });
    crate::fsutil::write_atomic(
        &out.join("toolchain.json"),
        serde_json::to_string_pretty(&meta)?.as_bytes(),
        true,
    )?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(io("remove", &dest))?;
    }
    std::fs::rename(&out, &dest).map_err(io("install into", &dest))?;
    if g.json {
        emit_json(
            &json!({"schema": 1, "version": version, "nvrtc-version": nvrtc_version, "path": dest.display().to_string(), "wheel-sha256": actual, "installed": true}),
        )?;
    } else if !g.quiet {
        emit(&format!(
            "installed NVRTC {version} (reports {nvrtc_version}) at {}; sha256 {} verified\n",
            dest.display(),
            keys::short(&actual)
        ))?;
    }
    Ok(exit::OK)
}

fn list(g: &Globals) -> anyhow::Result<u8> {
    let used = toolchain::find_nvrtc().ok();
    let mut rows = Vec::new();
    if let Some(dir) = toolchain::managed_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for p in entries {
            let Ok(bytes) = std::fs::read(p.join("toolchain.json")) else {
                continue;
            };
            let Ok(meta) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
                continue;
            };
            let in_use = used.as_ref().is_some_and(|u| u.path.starts_with(&p));
            rows.push(json!({
                "name": p.file_name().map(|n| n.to_string_lossy().into_owned()),
                "version": meta["version"], "nvrtc-version": meta["nvrtc-version"],
                "wheel-sha256": meta["wheel-sha256"], "path": p.display().to_string(), "used-by-builds": in_use,
            }));
        }
    }
    if g.json {
        emit_json(&json!({"schema": 1, "toolchains": rows}))?;
    } else if rows.is_empty() {
        emit("no toolchains installed by repro (`repro toolchain install` adds one)\n")?;
    } else {
        let mut t = crate::output::Table::new();
        for r in &rows {
            t.row([
                r["name"].as_str().unwrap_or_default().to_string(),
                r["version"].as_str().unwrap_or_default().to_string(),
                format!(
                    "sha256 {}",
                    keys::short(r["wheel-sha256"].as_str().unwrap_or_default())
                ),
                r["path"].as_str().unwrap_or_default().to_string(),
                if r["used-by-builds"] == true {
                    "(used by builds)".into()
                } else {
                    String::new()
                },
            ]);
        }
        emit(&t.render(0))?;
    }
    Ok(exit::OK)
}

fn which(g: &Globals) -> anyhow::Result<u8> {
    let nvrtc = toolchain::nvrtc();
    let nvcc = toolchain::find_nvcc();
    let nvcc_version = nvcc
        .as_ref()
        .and_then(|_| toolchain::nvcc_identity().ok())
        .map(|(_, id)| id["version"].as_str().unwrap_or_default().to_string());
    if g.json {
        emit_json(&json!({
            "schema": 1,
            "nvrtc": match &nvrtc {
                Ok(l) => json!({"path": l.found.path.display().to_string(), "version": l.version, "source": l.found.source}),
                Err(e) => json!({"unavailable": e.clone()}),
            },
            "nvcc": match &nvcc {
                Some(p) => json!({"path": p.display().to_string(), "version": nvcc_version}),
                None => json!({"unavailable": "nvcc not found"}),
            },
        }))?;
    } else {
        match &nvrtc {
            Ok(l) => emit(&format!(
                "nvrtc  {}  {}  ({})\n",
                l.version,
                l.found.path.display(),
                l.found.source
            ))?,
            Err(e) => emit(&format!(
                "nvrtc  not found: {e}\n       hint: run `repro toolchain install`, or set REPRO_NVRTC\n"
            ))?,
        }
        match &nvcc {
            Some(p) => emit(&format!(
                "nvcc   {}  {}\n",
                nvcc_version.unwrap_or_default(),
                p.display()
            ))?,
            None => emit(
                "nvcc   not found (REPRO_NVCC, PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda*)\n",
            )?,
        }
    }
    Ok(if nvrtc.is_ok() {
        exit::OK
    } else {
        exit::ENVIRONMENT
    })
}
