//! The project's settings file, `repro.toml` at the project root (optional).
//!
//! ```toml
//! schema = 1
//! [toolchain.nvrtc]
//! version = "13.0.88"                       # the nvidia-cuda-nvrtc wheel version
//! sha256 = { x86_64 = "ad9b6d2e..." }       # the wheel's sha256, per CPU architecture
//!
//! [toolchain]
//! nvcc-default = "13.0"                     # the nvcc release nvcc recipes use
//!
//! [python]
//! interpreter = ".venv/bin/python"          # the environment torch extensions build for
//!
//! [toolchain.nvcc."13.0"]                   # one nvcc release: the wheels of one tree
//! wheels = [
//!   { package = "nvidia-cuda-nvcc", version = "13.0.88", sha256 = { x86_64 = "...", aarch64 = "..." } },
//!   # ... nvvm, crt, runtime, cccl
//! ]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

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
    /// The Python environment the project uses.
    #[serde(default)]
    pub python: PythonSettings,
}

/// `[python]`: which interpreter the fingerprint describes and torch extensions build for.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PythonSettings {
    /// The interpreter (or an environment's directory), relative to the project root;
    /// `--python` overrides it.
    pub interpreter: Option<String>,
}

impl PythonSettings {
    /// The interpreter as an absolute path, if one is set.
    pub fn interpreter_at(&self, root: &Path) -> Option<std::path::PathBuf> {
        self.interpreter.as_ref().map(|p| root.join(p))
    }
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
    /// nvcc releases by name (`13.0`): the wheels that make up each one's tree.
    #[serde(default)]
    pub nvcc: BTreeMap<String, NvccRelease>,
    /// The nvcc release (a key of `nvcc`) that nvcc recipes use unless they name one.
    pub nvcc_default: Option<String>,
}

/// One pinned nvcc release: every wheel its tree is unpacked from.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NvccRelease {
    /// The wheels, each pinned by version and sha256 per CPU architecture.
    pub wheels: Vec<WheelPin>,
}

/// One wheel of a toolchain, pinned.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WheelPin {
    /// The Python package (`nvidia-cuda-nvcc`).
    pub package: String,
    /// Its exact version.
    pub version: String,
    /// The wheel's sha256 per CPU architecture (`x86_64`, `aarch64`).
    pub sha256: BTreeMap<String, String>,
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
        Some("repro's book documents repro.toml (docs/src/reference/repro-toml.md)".into())
    }
}

/// Loads `repro.toml` from the project root; no file means default settings.
pub fn load(root: &Path) -> Result<Config, ConfigError> {
    let Ok(text) = std::fs::read_to_string(root.join(FILE)) else {
        return Ok(Config::default());
    };
    let err = |span, message: String| {
        let (line, column) = crate::foundation::spans::locate(&text, span);
        ConfigError {
            path: FILE.into(),
            line,
            column,
            message,
        }
    };
    let cfg: Config = toml::from_str(&text)
        .map_err(|e| err(e.span(), crate::foundation::spans::user_message(&e)))?;
    if let Some((span, message)) = validate(&text, &cfg) {
        return Err(err(span, message));
    }
    if cfg.schema != SCHEMA {
        return Err(err(
            None,
            format!("`schema` must be {SCHEMA} (found {})", cfg.schema),
        ));
    }
    Ok(cfg)
}

/// Names that reach pip's command line or the file system must be plain: a package or a
/// version that starts with `-` would be read as an option.
fn plain(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
}

/// Checks what serde cannot: names, versions and digests of the toolchain pins.
fn validate(text: &str, cfg: &Config) -> Option<(Option<std::ops::Range<usize>>, String)> {
    // Spans of nested keys are not kept by serde here; point at the release's table.
    let at = |needle: &str| text.find(needle).map(|i| i..i + needle.len());
    for (release, r) in &cfg.toolchain.nvcc {
        let here = at(&format!("nvcc.\"{release}\"")).or_else(|| at(&format!("nvcc.{release}")));
        if !release.chars().all(|c| c.is_ascii_digit() || c == '.') || release.is_empty() {
            return Some((
                here,
                format!(
                    "[toolchain.nvcc] release `{release}` must be digits and dots, e.g. \"13.0\""
                ),
            ));
        }
        if r.wheels.is_empty() {
            return Some((
                here,
                format!("[toolchain.nvcc.\"{release}\"] `wheels` is empty"),
            ));
        }
        for w in &r.wheels {
            if !plain(&w.package) || !plain(&w.version) {
                return Some((
                    at(&w.package),
                    format!(
                        "[toolchain.nvcc.\"{release}\"] wheel `{}=={}`: package and version must be letters, digits, `.`, `-`, `_` or `+`",
                        w.package, w.version
                    ),
                ));
            }
            for (arch, sha) in &w.sha256 {
                if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Some((
                        at(sha),
                        format!(
                            "[toolchain.nvcc.\"{release}\"] `{}` sha256 for {arch} is not 64 hex digits",
                            w.package
                        ),
                    ));
                }
            }
        }
    }
    if let Some(d) = &cfg.toolchain.nvcc_default
        && !cfg.toolchain.nvcc.contains_key(d)
    {
        return Some((
            at("nvcc-default"),
            format!(
                "[toolchain] `nvcc-default` names release `{d}`, which no [toolchain.nvcc.\"{d}\"] table pins"
            ),
        ));
    }
    if let Some(p) = &cfg.toolchain.nvrtc
        && !plain(&p.version)
    {
        return Some((
            at(&p.version),
            format!(
                "[toolchain.nvrtc] `version` `{}` is not a plain version",
                p.version
            ),
        ));
    }
    None
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

    #[test]
    fn nvcc_releases_are_validated() {
        let d = tempfile::tempdir().unwrap();
        let sha = "a".repeat(64);
        let good = format!(
            "schema = 1\n[toolchain]\nnvcc-default = \"13.0\"\n[toolchain.nvcc.\"13.0\"]\nwheels = [{{ package = \"nvidia-cuda-nvcc\", version = \"13.0.88\", sha256 = {{ x86_64 = \"{sha}\" }} }}]\n"
        );
        std::fs::write(d.path().join(FILE), &good).unwrap();
        let cfg = load(d.path()).unwrap();
        assert_eq!(cfg.toolchain.nvcc["13.0"].wheels[0].version, "13.0.88");
        assert_eq!(cfg.toolchain.nvcc_default.as_deref(), Some("13.0"));
        for (bad, says) in [
            (
                good.replace("nvidia-cuda-nvcc", "--index-url=x"),
                "package and version must be",
            ),
            (good.replace(&sha, "abc"), "is not 64 hex digits"),
            (
                good.replace("nvcc-default = \"13.0\"", "nvcc-default = \"12.9\""),
                "which no [toolchain.nvcc.\"12.9\"] table pins",
            ),
            (good.replace("sha256 =", "sha = "), "unknown field `sha`"),
        ] {
            std::fs::write(d.path().join(FILE), &bad).unwrap();
            let e = load(d.path()).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
