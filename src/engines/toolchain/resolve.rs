//! The one place that decides which compiler a recipe builds with, and that provisions it.
//!
//! Build, bench, bisect (commit and toolchain axes, local and Slurm steps), replay and
//! `env check` all call [`resolve`], so that a recipe gets the same compiler, hence the same
//! compiler identity in its build key, whichever command built it. The order:
//!
//! 1. `--toolchain` on the command line;
//! 2. the recipe's own `toolchain`;
//! 3. for NVRTC only, `REPRO_NVRTC` (the environment names a library: it wins over the
//!    project's pin as `RUSTUP_TOOLCHAIN` wins over `rust-toolchain.toml`);
//! 4. the project's pin in `repro.toml` (`nvcc-default`, `[toolchain.nvrtc]`);
//! 5. the machine's own compiler, found by the search order of `repro toolchain which`.
//!
//! A release repro installs resolves to a [`Plan`]: the exact wheels, whose digest names the
//! tree. [`ensure`] finds that tree or, when every wheel is pinned by sha256 and the user did
//! not ask for `--offline` (or `REPRO_OFFLINE=1`), installs it first, as rustup installs the
//! toolchain `rust-toolchain.toml` names.

use std::path::Path;

use crate::foundation::recipe::{Build, Recipe};

use super::Pins;
use super::install::{self, Family, InstallError, Installed, Plan, Source, Spec};

/// The rule of the resolution order that chose a compiler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `--toolchain` on the command line.
    Flag,
    /// The recipe's `toolchain`.
    Recipe,
    /// `REPRO_NVRTC`.
    Environment,
    /// The project's `repro.toml`.
    Project,
    /// No pin anywhere: the machine's own compiler.
    Search,
}

impl Rule {
    /// How the rule reads in messages.
    pub fn describe(self) -> &'static str {
        match self {
            Rule::Flag => "--toolchain",
            Rule::Recipe => "the recipe's toolchain",
            Rule::Environment => "REPRO_NVRTC",
            Rule::Project => "pinned in repro.toml",
            Rule::Search => "the machine's own (nothing pinned)",
        }
    }
}

/// What a recipe builds with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A toolchain repro installs: exactly these wheels.
    Managed(Plan),
    /// The machine's own compiler (`system`, `REPRO_NVRTC`, or nothing pinned).
    System,
    /// A command build: no compiler.
    None,
}

/// The answer of [`resolve`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The compiler chosen.
    pub choice: Choice,
    /// Why.
    pub rule: Rule,
}

impl Resolved {
    /// The spec of a managed choice (`nvcc@13.0`).
    pub fn spec(&self) -> Option<Spec> {
        match &self.choice {
            Choice::Managed(p) => Some(p.spec()),
            _ => None,
        }
    }
}

/// Why a recipe's toolchain cannot be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The recipe's `toolchain` does not parse.
    #[error("{path}: [build] `toolchain`: {message}")]
    BadSpec {
        /// The recipe file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The release cannot be planned (not pinned, not installed as an unpinned tree).
    #[error(transparent)]
    Plan(#[from] InstallError),
}

/// Decides which compiler `recipe` builds with, given the project's `pins` and the
/// command line's `over` (`--toolchain`).
pub fn resolve(
    pins: &Pins,
    recipe: &Recipe,
    over: Option<&Spec>,
) -> Result<Resolved, ResolveError> {
    let (toolchain, family) = match &recipe.build {
        Build::Nvcc(c) => (c.toolchain.as_deref(), Family::Nvcc),
        Build::Nvrtc(c) => (c.toolchain.as_deref(), Family::Nvrtc),
        // A torch extension's CUDA sources compile with nvcc, chosen as an nvcc recipe's is.
        Build::TorchExtension(t) if t.has_cuda() => (t.toolchain.as_deref(), Family::Nvcc),
        _ => {
            return Ok(Resolved {
                choice: Choice::None,
                rule: Rule::Search,
            });
        }
    };
    let from_recipe =
        toolchain
            .map(Spec::parse)
            .transpose()
            .map_err(|e| ResolveError::BadSpec {
                path: recipe.path.clone(),
                message: e.to_string(),
            })?;
    let (spec, rule) = match (over, from_recipe) {
        (Some(s), _) => (Some(s.clone()), Rule::Flag),
        (None, Some(s)) => (Some(s), Rule::Recipe),
        (None, None) => project_default(pins, family),
    };
    let choice = match spec {
        None | Some(Spec::System) => Choice::System,
        Some(spec) => Choice::Managed(plan_for(pins, &spec)?),
    };
    Ok(Resolved { choice, rule })
}

/// The project's default for `family`, or the search.
fn project_default(pins: &Pins, family: Family) -> (Option<Spec>, Rule) {
    match family {
        Family::Nvcc => match &pins.table.nvcc_default {
            Some(r) => (
                Some(Spec::Release {
                    family,
                    release: r.clone(),
                }),
                Rule::Project,
            ),
            None => (None, Rule::Search),
        },
        Family::Nvrtc => {
            if std::env::var_os("REPRO_NVRTC").is_some_and(|v| !v.is_empty()) {
                return (None, Rule::Environment);
            }
            match &pins.table.nvrtc {
                Some(p) => (
                    Some(Spec::Release {
                        family,
                        release: p.version.clone(),
                    }),
                    Rule::Project,
                ),
                None => (None, Rule::Search),
            }
        }
    }
}

/// The wheels of `spec`: the project's pins, else (a release the project does not pin) the
/// newest installed tree of that release, else for NVRTC the unpinned wheel of that version.
pub fn plan_for(pins: &Pins, spec: &Spec) -> Result<Plan, InstallError> {
    match install::plan(&pins.table, spec, None, false) {
        Err(InstallError::UnknownRelease { .. }) => {
            let Spec::Release { family, release } = spec else {
                unreachable!("`system` is never planned")
            };
            if let Some(t) = install::find_any(*family, release) {
                // The plan the tree was installed from: its pinned digests, none for its
                // unpinned wheels, so that it names the same directory.
                return Ok(Plan {
                    family: *family,
                    release: release.clone(),
                    wheels: t
                        .stamp
                        .wheels
                        .iter()
                        .map(|w| install::Wheel {
                            package: w.package.clone(),
                            version: w.version.clone(),
                            sha256: w.pinned.then(|| w.sha256.clone()),
                        })
                        .collect(),
                });
            }
            install::plan(&pins.table, spec, None, *family == Family::Nvrtc)
        }
        other => other,
    }
}

/// Whether this process must not touch the network for toolchains: `--offline` or
/// `REPRO_OFFLINE` set to anything but empty, `0` or `false`.
pub fn offline(flag: bool) -> bool {
    flag || std::env::var("REPRO_OFFLINE")
        .is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
}

/// Finds the tree of `plan` or installs it first (only when every wheel is pinned and the
/// network may be used), and notes that `project` uses it.
pub fn ensure(
    plan: &Plan,
    project: Option<&Path>,
    offline_flag: bool,
    progress: &mut dyn install::Progress,
) -> Result<Installed, InstallError> {
    let spec = plan.spec().to_string();
    let found = match install::find(plan) {
        Ok(t) => t,
        Err(InstallError::NotInstalled { detail, .. }) => {
            if !plan.verifiable() {
                return Err(InstallError::Unverifiable { spec, detail });
            }
            if offline(offline_flag) {
                return Err(InstallError::Offline { spec, detail });
            }
            progress.message(&format!(
                "{spec} is pinned but not installed: installing it now (--offline forbids this)"
            ));
            install::install(plan, &Source::new(None, None), false, progress)?.installed
        }
        Err(e) => return Err(e),
    };
    if let (Some(p), Some(name)) = (project, found.dir.file_name()) {
        install::note_project(&name.to_string_lossy(), p);
    }
    Ok(found)
}
