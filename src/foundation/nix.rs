//! Running build steps inside a flake's dev shell (`nix develop DIR#SHELL --command ...`).
//!
//! The flake is always the one in the directory being built: the working tree, or during
//! a bisection the checkout of the commit under test, so each commit builds with its own
//! pinned environment. The GPU driver never comes from Nix: it is the host's, and
//! `repro env check` verifies it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::process::{Cmd, ProcessError};

/// How long evaluating and entering a shell may take (a first entry may build it).
pub const TIMEOUT: Duration = Duration::from_secs(1800);

/// Why a Nix shell could not be used. For a search, the commit is untestable ("skip").
#[derive(Debug, thiserror::Error)]
pub enum NixError {
    /// `nix` is not installed.
    #[error("nix is not installed (needed for --nix)")]
    Missing,
    /// A nix command failed: broken flake, evaluation error, no network for an input.
    #[error("{what} failed")]
    Failed {
        /// What was being done.
        what: String,
        /// The command's failure, with its output tail (boxed: it carries both tails).
        #[source]
        source: Box<ProcessError>,
    },
}

impl Diagnose for NixError {
    fn exit_code(&self) -> u8 {
        exit::SKIP
    }
    fn hint(&self) -> Option<String> {
        match self {
            NixError::Missing => Some("install Nix, or build on the host without --nix".into()),
            NixError::Failed { .. } => Some(
                "fix the flake (`nix develop` shows the same error), or build on the host without --nix; \
                 extra nix options can be given in REPRO_NIX_FLAGS (for example --offline)"
                    .into(),
            ),
        }
    }
}

/// The nix command line prefix: flakes enabled, plus `REPRO_NIX_FLAGS`.
fn nix() -> Cmd {
    let mut c = Cmd::new("nix").args(["--extra-experimental-features", "nix-command flakes"]);
    if let Ok(extra) = std::env::var("REPRO_NIX_FLAGS") {
        c = c.args(extra.split_whitespace());
    }
    c.timeout(TIMEOUT)
}

/// Turns a failed nix command into the error a user sees: nix missing, or what failed.
pub fn classify(what: &str, e: ProcessError) -> NixError {
    match e {
        ProcessError::NotFound { .. } => NixError::Missing,
        source => NixError::Failed {
            what: what.to_string(),
            source: Box::new(source),
        },
    }
}

/// The current system as Nix names it (`x86_64-linux`).
pub fn system() -> String {
    format!("{}-linux", std::env::consts::ARCH)
}

/// What identifies a dev shell, for build keys and records.
#[derive(Clone, Debug, PartialEq)]
pub struct ShellInfo {
    /// The flake directory.
    pub dir: PathBuf,
    /// The shell's name (`devShells.<system>.<name>`).
    pub shell: String,
    /// sha256 of flake.lock, if there is one.
    pub flake_lock: Option<String>,
    /// The shell's derivation path.
    pub drv: String,
}

impl ShellInfo {
    /// The key part: what the build key covers of the shell (no machine paths but the
    /// store path, which is content-derived).
    pub fn key_json(&self) -> Value {
        json!({ "shell": self.shell, "flake-lock-sha256": self.flake_lock, "shell-drv": self.drv })
    }

    /// The flake reference of the shell.
    pub fn installable(&self) -> String {
        format!("{}#{}", flake_ref(&self.dir), self.shell)
    }
}

/// Whether `dir` has a flake.
pub fn has_flake(dir: &Path) -> bool {
    dir.join("flake.nix").is_file()
}

/// Evaluates the shell's derivation path and reads flake.lock's digest.
pub fn shell_info(dir: &Path, shell: &str) -> Result<ShellInfo, NixError> {
    let attr = format!("{}#devShells.{}.{shell}.drvPath", flake_ref(dir), system());
    let out = nix()
        .args(["eval", "--raw", &attr])
        .current_dir(dir)
        .run()
        .map_err(|e| {
            classify(
                &format!("evaluating the dev shell `{shell}` of {}", dir.display()),
                e,
            )
        })?;
    let flake_lock = crate::foundation::fsutil::read_bounded(&dir.join("flake.lock"), 16 << 20)
        .ok()
        .map(|b| keys::sha256_hex(&b));
    Ok(ShellInfo {
        dir: dir.to_path_buf(),
        shell: shell.to_string(),
        flake_lock,
        drv: out.stdout_str().trim().to_string(),
    })
}

/// How nix is to name the flake in `dir`: the directory itself when it is the root of a git
/// work tree or of no repository (nix then reads the files git tracks, or all of them), and
/// `path:DIR` when it lies inside some other repository without being its root, as a
/// bisection step's scratch tree does (nix would otherwise look for it among that
/// repository's tracked files, where it is not).
fn flake_ref(dir: &Path) -> String {
    let inside_other = crate::foundation::git::discover_root(dir)
        .is_some_and(|root| std::fs::canonicalize(&root).ok() != std::fs::canonicalize(dir).ok());
    if inside_other {
        format!("path:{}", dir.display())
    } else {
        dir.display().to_string()
    }
}

/// The command that runs `argv` inside the shell.
pub fn develop(info: &ShellInfo, argv: &[String]) -> Cmd {
    nix()
        .args(["develop", &info.installable(), "--command"])
        .args(argv)
        .current_dir(&info.dir)
}

/// Encodes shell info for the child repro inside the shell (`REPRO_NIX_SHELL`).
pub fn encode(info: &ShellInfo) -> String {
    json!({"dir": info.dir.display().to_string(), "shell": info.shell, "flake-lock-sha256": info.flake_lock, "shell-drv": info.drv})
        .to_string()
}

/// Decodes what [`encode`] wrote.
pub fn decode(text: &str) -> Option<ShellInfo> {
    let v: Value = serde_json::from_str(text).ok()?;
    Some(ShellInfo {
        dir: PathBuf::from(v["dir"].as_str()?),
        shell: v["shell"].as_str()?.to_string(),
        flake_lock: v["flake-lock-sha256"].as_str().map(str::to_string),
        drv: v["shell-drv"].as_str()?.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_info_round_trips_through_the_environment() {
        let info = ShellInfo {
            dir: "/x/y".into(),
            shell: "default".into(),
            flake_lock: None,
            drv: "/nix/store/a.drv".into(),
        };
        assert_eq!(decode(&encode(&info)), Some(info.clone()));
        assert_eq!(info.installable(), "/x/y#default");
        assert_eq!(info.key_json()["flake-lock-sha256"], Value::Null);
    }
}
