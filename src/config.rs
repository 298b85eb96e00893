//! The project's settings file, `repro.toml` at the project root (optional).
//!
//! ```toml
//! schema = 1
//! [toolchain.nvrtc]
//! version = "13.0.88"                       # the nvidia-cuda-nvrtc wheel version
//! sha256 = { x86_64 = "ad9b6d2e..." }       # the wheel's sha256, per CPU architecture
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::Diagnose;
use crate::exit;

/// The config schema this build reads.
pub const SCHEMA: i64 = 1;

/// The file name at the project root.
pub const FILE: &str = "repro.toml";

/// The project's settings.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Always 1 for now.
    #[serde(default)]
    pub schema: i64,
    /// Pinned toolchains.
    #[serde(default)]
    pub toolchain: Toolchains,
    /// Building inside the project's Nix dev shell.
    #[serde(default)]
    pub nix: NixSettings,
}

/// `[nix]`: whether builds run inside the flake's dev shell, and which shell.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NixSettings {
    /// Run builds inside `nix develop` (as `--nix` does) unless `--no-nix` is given.
    #[serde(default)]
    pub build: bool,
    /// The dev shell: `devShells.<system>.<shell>`.
    #[serde(default = "default_shell")]
    pub shell: String,
}

fn default_shell() -> String {
    "default".into()
}

impl Default for NixSettings {
    fn default() -> Self {
        NixSettings {
            build: false,
            shell: default_shell(),
        }
    }
}

/// Pinned toolchains.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Toolchains {
    /// The NVRTC wheel that `repro toolchain install` provisions.
    pub nvrtc: Option<NvrtcPin>,
}

/// A pinned NVRTC wheel.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NvrtcPin {
    /// The `nvidia-cuda-nvrtc` version.
    pub version: String,
    /// The wheel's sha256 per CPU architecture (`x86_64`, `aarch64`).
    #[serde(default)]
    pub sha256: BTreeMap<String, String>,
}

/// A settings file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}:{column}: {message}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl Diagnose for ConfigError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        Some("the README documents repro.toml".into())
    }
}

/// Loads `repro.toml` from the project root; no file means default settings.
pub fn load(root: &Path) -> Result<Config, ConfigError> {
    let Ok(text) = std::fs::read_to_string(root.join(FILE)) else {
        return Ok(Config::default());
    };
    let err = |span, message: String| {
        let (line, column) = crate::spans::locate(&text, span);
        ConfigError {
            path: FILE.into(),
            line,
            column,
            message,
        }
    };
    let cfg: Config =
        toml::from_str(&text).map_err(|e| err(e.span(), crate::spans::user_message(&e)))?;
    if cfg.schema != SCHEMA {
        return Err(err(
            None,
            format!("`schema` must be {SCHEMA} (found {})", cfg.schema),
        ));
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(load(d.path()).unwrap(), Config::default());
        std::fs::write(
            d.path().join(FILE),
            "schema = 1\n[toolchain.nvrtc]\nversion = \"13.0.88\"\nsha256 = { x86_64 = \"ab\" }\n",
        )
        .unwrap();
        assert_eq!(
            load(d.path()).unwrap().toolchain.nvrtc.unwrap().sha256["x86_64"],
            "ab"
        );
        std::fs::write(
            d.path().join(FILE),
            "schema = 1\n[toolchain.nvrtc]\nversoin = \"1\"\n",
        )
        .unwrap();
        assert!(
            load(d.path())
                .unwrap_err()
                .to_string()
                .starts_with("repro.toml:3:1: unknown field `versoin`")
        );
    }
}
