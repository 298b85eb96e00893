//! Toolchain names as recipes, the configuration and the command line write them:
//! `nvcc@13.0`, `nvrtc@13.0.88` or `system`. Installing and finding them is the toolchain
//! engine's job; parsing the name is here so that recipes can validate it.

use serde::{Deserialize, Serialize};

/// Which compiler a toolchain provides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// The NVRTC library (in-process builds).
    Nvrtc,
    /// nvcc with its headers and NVVM.
    Nvcc,
}

impl Family {
    /// `nvrtc` or `nvcc`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Nvrtc => "nvrtc",
            Family::Nvcc => "nvcc",
        }
    }
}

/// Why a toolchain name does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// No `@` and not `system`.
    #[error("`{0}` is not a toolchain: write nvcc@RELEASE, nvrtc@VERSION or system")]
    NotASpec(String),
    /// A compiler other than nvcc or nvrtc.
    #[error("`{0}` is not a compiler repro installs (nvcc or nvrtc)")]
    UnknownCompiler(String),
    /// A release that is not digits and dots.
    #[error("`{0}` is not a release: digits and dots, e.g. 13.0 or 13.0.88")]
    BadRelease(String),
}

/// A toolchain asked for by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A release installed by repro: `nvcc@13.0`, `nvrtc@13.0.88`.
    Release {
        /// The compiler.
        family: Family,
        /// The release (digits and dots).
        release: String,
    },
    /// Whatever the machine has (REPRO_NVCC, PATH, CUDA_HOME; for NVRTC the usual search).
    System,
}

impl Spec {
    /// Parses `nvcc@13.0`, `nvrtc@13.0.88` or `system`.
    pub fn parse(s: &str) -> Result<Spec, SpecError> {
        if s == "system" {
            return Ok(Spec::System);
        }
        let (family, release) = s
            .split_once('@')
            .ok_or_else(|| SpecError::NotASpec(s.to_string()))?;
        let family = match family {
            "nvcc" => Family::Nvcc,
            "nvrtc" => Family::Nvrtc,
            other => return Err(SpecError::UnknownCompiler(other.to_string())),
        };
        let ok = !release.is_empty()
            && release.starts_with(|c: char| c.is_ascii_digit())
            && release.chars().all(|c| c.is_ascii_digit() || c == '.');
        if !ok {
            return Err(SpecError::BadRelease(release.to_string()));
        }
        Ok(Spec::Release {
            family,
            release: release.to_string(),
        })
    }

    /// The directory name of its tree (`nvcc-13.0`), for a release.
    pub fn dir_name(&self) -> Option<String> {
        match self {
            Spec::Release { family, release } => Some(format!("{}-{release}", family.name())),
            Spec::System => None,
        }
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Spec::Release { family, release } => write!(f, "{}@{release}", family.name()),
            Spec::System => f.write_str("system"),
        }
    }
}
