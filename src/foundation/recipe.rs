//! Recipes (`recipes/NAME.toml`): how to build one kernel (and, later, run and time it).
//!
//! A recipe is parsed in two steps: TOML into raw structs that keep every span, then
//! validated against the repository into [`Recipe`], so every error names the file, line,
//! column and key. The schema grows by sections (`[build]` now; `[run]`, `[check]` later),
//! never by loosening what a section accepts.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use toml::Spanned;

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// The recipe schema this build reads.
pub const SCHEMA: i64 = 1;

/// Where recipes live, relative to the project root.
pub const DIR: &str = "recipes";

/// The largest recipe read (a recipe is a page of TOML).
pub const MAX_BYTES: u64 = 1 << 20;

/// A validated recipe.
#[derive(Clone, Debug, PartialEq)]
pub struct Recipe {
    /// Its name: the file stem (`vector_add`).
    pub name: String,
    /// The recipe file, relative to the project root.
    pub path: String,
    /// The recipe's text as read: records keep it, so that a later replay uses this recipe
    /// and not whatever file has its name by then.
    pub text: String,
    /// What it is, for listings.
    pub description: Option<String>,
    /// How to build it.
    pub build: Build,
    /// How to run, check and measure it (`[params]`, `[run]`, `[check]`, `[work]`).
    pub sections: crate::foundation::runspec::Sections,
    /// `[bisect] paths`: git pathspecs of files a bisection step writes out besides what
    /// the build reads (a command build's helper scripts, data files).
    pub bisect_paths: Vec<String>,
    /// `[build.limits]`: what each kernel may cost; a kernel over budget fails the build.
    pub limits: Limits,
}

/// `[build.limits]`: budgets on what a kernel costs the GPU, checked against the resource
/// report of every cubin a build makes. Not part of the build key: a budget judges an
/// artifact, it does not change it, so a cached build is judged again by today's budgets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// `max-registers`: registers per thread.
    pub max_registers: Option<u32>,
    /// `max-shared-bytes`: shared memory per block, static plus the launch's dynamic.
    pub max_shared_bytes: Option<u64>,
    /// `spills`: the most bytes of spill stores plus loads (`spills = 0`: none).
    pub spills: Option<u64>,
    /// `min-occupancy`: the least occupancy of the `[run]` launch, by target (`*` for a
    /// single number that applies to every target).
    pub min_occupancy: BTreeMap<String, f64>,
}

impl Limits {
    /// Whether no budget is set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// The minimum occupancy for a target (`sm_90`), if any: the budget written for it,
    /// or for the same SM under another suffix (a cubin built for `sm_90a` says `sm_90`),
    /// else the one for every target.
    pub fn min_occupancy_for(&self, arch: &str) -> Option<f64> {
        self.min_occupancy
            .get(arch)
            .or_else(|| {
                self.min_occupancy
                    .iter()
                    .find(|(k, _)| {
                        *k != "*"
                            && crate::foundation::occupancy::capability(k)
                                == crate::foundation::occupancy::capability(arch)
                    })
                    .map(|(_, v)| v)
            })
            .or_else(|| self.min_occupancy.get("*"))
            .copied()
    }
}

/// How a kernel is built.
#[derive(Clone, Debug, PartialEq)]
pub enum Build {
    /// In-process NVRTC.
    Nvrtc(Compile),
    /// nvcc, run as a child process.
    Nvcc(Compile),
    /// Any command, with declared inputs and outputs.
    Command(CommandBuild),
    /// A PyTorch C++/CUDA extension module, built against the environment's PyTorch.
    TorchExtension(TorchExtension),
}

/// A PyTorch extension: a Python module compiled from C++ (and CUDA) sources against the
/// headers and libraries of the PyTorch that the Python environment has, or built by the
/// project's own `setup.py`.
#[derive(Clone, Debug, PartialEq)]
pub struct TorchExtension {
    /// The Python module's name (`TORCH_EXTENSION_NAME`).
    pub module: String,
    /// The C++ (`.cpp`, `.cc`, `.cxx`) and CUDA (`.cu`) sources, relative to the root.
    pub sources: Vec<String>,
    /// Functions the module must have once imported.
    pub entries: Vec<String>,
    /// Include directories, relative to the project root.
    pub include_dirs: Vec<String>,
    /// Extra host C++ compiler options, in order.
    pub options: Vec<String>,
    /// Extra nvcc options for `.cu` sources, in order.
    pub nvcc_options: Vec<String>,
    /// GPU targets of `.cu` sources (`sm_90`); each goes into the one module.
    pub targets: Vec<String>,
    /// The nvcc toolchain for `.cu` sources (as for nvcc recipes).
    pub toolchain: Option<String>,
    /// Instead of `sources`: the project's `setup.py`, run as `python setup.py build_ext
    /// --inplace` (a command: a bundle's needs consent to run).
    pub setup: Option<String>,
    /// How long compiling (or setup.py) may take.
    pub timeout: Duration,
}

impl TorchExtension {
    /// Whether any source is CUDA.
    pub fn has_cuda(&self) -> bool {
        self.sources.iter().any(|s| s.ends_with(".cu"))
    }
}

/// A compiler build from one CUDA source.
#[derive(Clone, Debug, PartialEq)]
pub struct Compile {
    /// The main source file, relative to the project root.
    pub source: String,
    /// Kernel entry points the artifact must contain. Empty: a compile-only recipe, whose
    /// build checks only that the source compiles.
    pub entries: Vec<String>,
    /// `sm_90`, `sm_90a`, `compute_90`, ...
    pub target: String,
    /// What to produce, sorted.
    pub outputs: Vec<Output>,
    /// Extra compiler options, in order.
    pub options: Vec<String>,
    /// `-DNAME=value` macros.
    pub defines: BTreeMap<String, String>,
    /// Macros whose value comes from the build's environment: name → (variable, default).
    /// [`Recipe::resolve_env`] moves them into `defines` where the build runs.
    pub env_defines: BTreeMap<String, (String, Option<String>)>,
    /// Include directories, relative to the project root.
    pub include_dirs: Vec<String>,
    /// The toolchain the recipe pins (`nvcc@13.0`, `nvrtc@13.0.88`, `system`); `None` uses
    /// the project's default. Not part of the key: the compiler identity is.
    pub toolchain: Option<String>,
    /// Every target the recipe builds for (`targets = [...]`), in order; `target` is the
    /// first. Each target is its own build with its own key.
    pub targets: Vec<String>,
}

/// A kind of build output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Output {
    /// PTX assembly.
    Ptx,
    /// A CUBIN for one real architecture.
    Cubin,
    /// A fat binary (nvcc only).
    Fatbin,
    /// A host object with the device code embedded, as `nvcc -c` writes it (nvcc only).
    Object,
}

impl Output {
    /// The name used in recipes, records and file extensions.
    pub fn name(self) -> &'static str {
        match self {
            Output::Ptx => "ptx",
            Output::Cubin => "cubin",
            Output::Fatbin => "fatbin",
            Output::Object => "object",
        }
    }

    /// Whether one output holds every target of the recipe (a fat binary, an object), so
    /// that several targets are one compiler run, as opposed to one output per target.
    pub fn holds_every_target(self) -> bool {
        matches!(self, Output::Fatbin | Output::Object)
    }
    fn parse(s: &str) -> Option<Self> {
        match s {
            "ptx" => Some(Output::Ptx),
            "cubin" => Some(Output::Cubin),
            "fatbin" => Some(Output::Fatbin),
            "object" => Some(Output::Object),
            _ => None,
        }
    }
}

/// A build by an arbitrary command.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandBuild {
    /// The command line, run at the project root.
    pub argv: Vec<String>,
    /// Globs of the files the command reads, relative to the project root.
    pub inputs: Vec<String>,
    /// The files it produces, relative to the project root.
    pub outputs: Vec<String>,
    /// Kernel entry points the outputs must contain (may be empty).
    pub entries: Vec<String>,
    /// How long the command may run.
    pub timeout: Duration,
}

/// The default time limit of a command build.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

impl Compile {
    /// Whether every output holds every target: the build is then one compiler run over
    /// all the targets (`-gencode` per target), not one build per target.
    pub fn is_fat(&self) -> bool {
        !self.outputs.is_empty() && self.outputs.iter().all(|o| o.holds_every_target())
    }
}

impl Recipe {
    /// The build section in canonical form: what the build key covers of the recipe.
    /// The recipe's name and description are not part of it, so renaming a recipe or
    /// editing its description does not invalidate its builds.
    pub fn canonical_build(&self) -> serde_json::Value {
        match &self.build {
            Build::Nvrtc(c) | Build::Nvcc(c) => json!({
                "kind": if matches!(self.build, Build::Nvrtc(_)) { "nvrtc" } else { "nvcc" },
                "source": c.source,
                "entries": c.entries,
                "target": c.target,
                "outputs": c.outputs.iter().map(|o| o.name()).collect::<Vec<_>>(),
                "options": c.options,
                "defines": c.defines,
                "env-defines": c.env_defines,
                "include-dirs": c.include_dirs,
            }),
            Build::Command(c) => json!({
                "kind": "command",
                "argv": c.argv,
                "inputs": c.inputs,
                "outputs": c.outputs,
                "entries": c.entries,
                "timeout-s": c.timeout.as_secs_f64(),
            }),
            Build::TorchExtension(t) => json!({
                "kind": "torch-extension",
                "module": t.module,
                "sources": t.sources,
                "entries": t.entries,
                "include-dirs": t.include_dirs,
                "options": t.options,
                "nvcc-options": t.nvcc_options,
                "targets": t.targets,
                "setup": t.setup,
            }),
        }
    }

    /// Resolves `{ env = "VAR" }` defines from this process's environment (inside the dev
    /// shell when building with Nix). Their values then count in the build key like any
    /// other define.
    pub fn resolve_env(&mut self) -> Result<(), RecipeError> {
        if let Build::Nvrtc(c) | Build::Nvcc(c) = &mut self.build {
            for (name, (var, default)) in std::mem::take(&mut c.env_defines) {
                let value =
                    std::env::var(&var)
                        .ok()
                        .or(default)
                        .ok_or_else(|| RecipeError::EnvUnset {
                            path: self.path.clone(),
                            name: name.clone(),
                            var: var.clone(),
                        })?;
                c.defines.insert(name, value);
            }
        }
        Ok(())
    }

    /// The recipe once per target (`targets = [...]`): each copy builds one target and has
    /// its own key. A single-target recipe gives itself back.
    pub fn per_target(&self) -> Vec<Recipe> {
        match &self.build {
            Build::Nvrtc(c) | Build::Nvcc(c) if c.targets.len() > 1 && !c.is_fat() => c
                .targets
                .iter()
                .map(|t| {
                    let mut r = self.clone();
                    r.name = format!("{}@{t}", self.name);
                    if let Build::Nvrtc(c) | Build::Nvcc(c) = &mut r.build {
                        c.target = t.clone();
                        c.targets = vec![t.clone()];
                    }
                    r
                })
                .collect(),
            _ => vec![self.clone()],
        }
    }

    /// The copy of a several-target recipe whose target runs on a GPU of compute capability
    /// `cc` ("9.0"): the same major version and the highest minor not above the GPU's
    /// (a CUBIN runs on its own major only). `None` when no target fits.
    pub fn for_capability(&self, cc: &str) -> Option<Recipe> {
        let (maj, min) = cc.split_once('.')?;
        let want = (maj.parse::<u32>().ok()?, min.parse::<u32>().ok()?);
        let of = |t: &str| -> Option<(u32, u32)> {
            let digits: String = t
                .strip_prefix("sm_")?
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let n: u32 = digits.parse().ok()?;
            Some((n / 10, n % 10))
        };
        self.per_target()
            .into_iter()
            .filter_map(|r| {
                let t = of(&r.targets().first()?.clone())?;
                (t.0 == want.0 && t.1 <= want.1).then_some((t.1, r))
            })
            .max_by_key(|(m, _)| *m)
            .map(|(_, r)| r)
    }

    /// Every target the recipe names (one for `target = ...`; none for command builds).
    pub fn targets(&self) -> &[String] {
        match &self.build {
            Build::Nvrtc(c) | Build::Nvcc(c) => &c.targets,
            // One module carries every target of its CUDA sources.
            Build::Command(_) | Build::TorchExtension(_) => &[],
        }
    }

    /// Whether one build covers several targets (a fat binary or an object over
    /// `targets`), so that it is not split per target.
    pub fn is_fat(&self) -> bool {
        match &self.build {
            Build::Nvrtc(c) | Build::Nvcc(c) => c.targets.len() > 1 && c.is_fat(),
            Build::Command(_) | Build::TorchExtension(_) => false,
        }
    }

    /// Whether the build only checks that the source compiles (a compiler build that names
    /// no `entries`).
    pub fn compile_only(&self) -> bool {
        match &self.build {
            Build::Nvrtc(c) | Build::Nvcc(c) => c.entries.is_empty(),
            Build::Command(_) | Build::TorchExtension(_) => false,
        }
    }

    /// The kernel entry points the build must provide.
    pub fn entries(&self) -> &[String] {
        match &self.build {
            Build::Nvrtc(c) | Build::Nvcc(c) => &c.entries,
            Build::Command(c) => &c.entries,
            Build::TorchExtension(t) => &t.entries,
        }
    }
}

/// Why a recipe cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    /// No recipe by that name.
    #[error("no recipe `{name}` (looked for {path})")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The file that does not exist.
        path: String,
        /// The recipes that do exist.
        available: Vec<String>,
    },
    /// The file cannot be read.
    #[error("cannot read recipe {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The recipe is invalid at a known place.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong, naming the key.
        message: String,
        /// What to do.
        hint: Option<String>,
    },
    /// A define reads an environment variable that is not set and has no default.
    #[error("{path}: [build.defines] `{name}` reads ${var}, which is not set")]
    EnvUnset {
        /// The recipe file.
        path: String,
        /// The macro.
        name: String,
        /// The variable.
        var: String,
    },
    /// A `REPRO_*` limit the recipe's checks read (`REPRO_MAX_SWEEP_POINTS`) is set to
    /// something that is not a whole number: the environment's mistake, not the recipe's.
    #[error(transparent)]
    Limit(#[from] crate::foundation::limits::LimitError),
    /// Written by a newer repro.
    #[error("{path} has schema {found}, but this repro understands schema {SCHEMA} at most")]
    NewerSchema {
        /// The file.
        path: String,
        /// Its schema.
        found: i64,
    },
}

impl Diagnose for RecipeError {
    fn exit_code(&self) -> u8 {
        match self {
            RecipeError::Read { source, .. } => crate::foundation::fsutil::read_exit_code(source),
            _ => exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            RecipeError::NotFound { available, .. } if available.is_empty() => Some(format!(
                "write one in {DIR}/NAME.toml (repro's book has the reference: docs/src/reference/recipes.md)"
            )),
            RecipeError::NotFound { available, .. } => {
                Some(format!("recipes here: {}", available.join(", ")))
            }
            RecipeError::Read { source, .. } => {
                Some(crate::foundation::fsutil::read_hint(source).into())
            }
            RecipeError::Invalid { hint, .. } => hint.clone(),
            RecipeError::NewerSchema { .. } => Some("upgrade repro to read this recipe".into()),
            RecipeError::Limit(l) => l.hint(),
            RecipeError::EnvUnset { var, .. } => Some(format!(
                "set {var} (a Nix dev shell may set it: build with --nix), or give the define a default: {{ env = \"{var}\", default = \"...\" }}"
            )),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRecipe {
    #[expect(dead_code, reason = "checked before the strict parse")]
    schema: i64,
    description: Option<String>,
    build: Spanned<RawBuild>,
    params: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    run: Option<Spanned<crate::foundation::runspec::RawRun>>,
    check: Option<Spanned<crate::foundation::runspec::RawCheck>>,
    work: Option<Spanned<crate::foundation::runspec::RawWork>>,
    bisect: Option<Spanned<RawBisect>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawBisect {
    paths: Spanned<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawBuild {
    kind: Spanned<String>,
    source: Option<Spanned<String>>,
    entries: Option<Spanned<Vec<Spanned<String>>>>,
    target: Option<Spanned<String>>,
    outputs: Option<Spanned<Vec<Spanned<String>>>>,
    options: Option<Spanned<Vec<Spanned<String>>>>,
    defines: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    include_dirs: Option<Spanned<Vec<Spanned<String>>>>,
    toolchain: Option<Spanned<String>>,
    targets: Option<Spanned<Vec<Spanned<String>>>>,
    argv: Option<Spanned<Vec<String>>>,
    inputs: Option<Spanned<Vec<Spanned<String>>>>,
    timeout: Option<Spanned<String>>,
    limits: Option<Spanned<RawLimits>>,
    module: Option<Spanned<String>>,
    sources: Option<Spanned<Vec<Spanned<String>>>>,
    nvcc_options: Option<Spanned<Vec<String>>>,
    setup: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLimits {
    max_registers: Option<Spanned<i64>>,
    max_shared_bytes: Option<Spanned<i64>>,
    spills: Option<Spanned<i64>>,
    min_occupancy: Option<Spanned<toml::Value>>,
}

/// An error about the recipe text: where, what, and a hint.
type Invalid = (Option<Range<usize>>, String, Option<String>);

/// Validates `[build.limits]`.
fn limits(raw: Option<Spanned<RawLimits>>) -> Result<Limits, Invalid> {
    let Some(raw) = raw else {
        return Ok(Limits::default());
    };
    let r = raw.into_inner();
    let count = |v: &Option<Spanned<i64>>, key: &str, max: i64| match v {
        None => Ok(None),
        Some(n) if (0..=max).contains(n.get_ref()) => Ok(Some(*n.get_ref() as u64)),
        Some(n) => Err((
            Some(n.span()),
            format!(
                "[build.limits] `{key}`: {} is not between 0 and {max}",
                n.get_ref()
            ),
            None,
        )),
    };
    let mut out = Limits {
        max_registers: count(&r.max_registers, "max-registers", 255)?.map(|n| n as u32),
        max_shared_bytes: count(&r.max_shared_bytes, "max-shared-bytes", 1 << 30)?,
        spills: count(&r.spills, "spills", i64::MAX)?,
        min_occupancy: BTreeMap::new(),
    };
    let fraction = |v: &toml::Value, key: &str, span: Range<usize>| -> Result<f64, Invalid> {
        let x = match v {
            toml::Value::Float(f) => *f,
            toml::Value::Integer(i) => *i as f64,
            other => {
                return Err((
                    Some(span),
                    format!(
                        "[build.limits] `{key}` must be a number, not {}",
                        other.type_str()
                    ),
                    None,
                ));
            }
        };
        if x > 0.0 && x <= 1.0 {
            Ok(x)
        } else {
            Err((
                Some(span),
                format!("[build.limits] `{key}`: {x} is not an occupancy (a fraction in (0, 1])"),
                Some("0.5 means half of the SM's warp slots".into()),
            ))
        }
    };
    if let Some(m) = r.min_occupancy {
        let span = m.span();
        match m.get_ref() {
            toml::Value::Table(t) => {
                for (target, v) in t {
                    if crate::foundation::occupancy::limits(target).is_none() {
                        return Err((
                            Some(span),
                            format!(
                                "[build.limits] `min-occupancy`: no occupancy table for `{target}`"
                            ),
                            Some(format!(
                                "known: {}",
                                crate::foundation::occupancy::known().join(", ")
                            )),
                        ));
                    }
                    let x = fraction(v, &format!("min-occupancy.{target}"), span.clone())?;
                    out.min_occupancy.insert(target.clone(), x);
                }
            }
            v => {
                out.min_occupancy
                    .insert("*".into(), fraction(v, "min-occupancy", span)?);
            }
        }
    }
    Ok(out)
}

/// The names of the recipes under `root/recipes`, sorted.
pub fn list(root: &Path) -> Vec<String> {
    crate::foundation::stamp::note(&root.join(DIR));
    let mut v: Vec<String> = std::fs::read_dir(root.join(DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            if p.extension()? != "toml" {
                return None;
            }
            Some(p.file_stem()?.to_string_lossy().into_owned())
        })
        .collect();
    v.sort();
    v
}

/// Loads a recipe by name (`vector_add`) or by path (`recipes/vector_add.toml`).
pub fn load(root: &Path, name_or_path: &str) -> Result<Recipe, RecipeError> {
    // `NAME@sm_90` names one target of a several-target recipe, as builds and results do.
    if !name_or_path.ends_with(".toml")
        && let Some((name, target)) = name_or_path.split_once('@')
    {
        let r = load(root, name)?;
        return r
            .per_target()
            .into_iter()
            .find(|t| t.targets().len() == 1 && t.targets()[0] == target && r.targets().len() > 1)
            .ok_or_else(|| RecipeError::Invalid {
                path: r.path.clone(),
                line: 1,
                column: 1,
                message: format!(
                    "recipe `{name}` has no target `{target}` among several (`targets`: {})",
                    r.targets().join(", ")
                ),
                hint: Some(format!(
                    "name the recipe `{name}`, or one of its targets as `{name}@TARGET`"
                )),
            });
    }
    let rel = if name_or_path.ends_with(".toml") {
        name_or_path.trim_start_matches("./").to_string()
    } else {
        format!("{DIR}/{name_or_path}.toml")
    };
    let path = root.join(&rel);
    // Bounded and regular only: a FIFO at recipes/x.toml would hang `build --all`, a link
    // to /dev/zero would fill memory.
    let text = match crate::foundation::fsutil::read_input_text(&path, MAX_BYTES) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => {
            return Err(RecipeError::NotFound {
                name: name_or_path.to_string(),
                path: rel,
                available: list(root),
            });
        }
        Err(e) => {
            return Err(RecipeError::Read {
                path: rel,
                source: e.source,
            });
        }
    };
    parse(root, &rel, &text)
}

/// Parses and validates recipe text found at `rel` (relative to `root`).
pub fn parse(root: &Path, rel: &str, text: &str) -> Result<Recipe, RecipeError> {
    // Resolved once: every path the recipe names is held against it.
    let inside = root.canonicalize().ok();
    parse_in(
        &|p: &str, file: bool| {
            let full = root.join(p);
            crate::foundation::stamp::note(&full);
            // A link out of the repository names what another checkout would not have.
            if let (Ok(real), Some(inside)) = (full.canonicalize(), &inside)
                && !real.starts_with(inside)
            {
                return None;
            }
            Some(if file { full.is_file() } else { full.is_dir() })
        },
        rel,
        text,
    )
}

/// Parses and validates recipe text without looking at any tree: paths are checked for
/// form only. A bisection reads its recipe once this way and applies it to every commit,
/// where the paths are checked against that commit's tree.
pub fn parse_detached(rel: &str, text: &str) -> Result<Recipe, RecipeError> {
    parse_in(&|_, _| Some(true), rel, text)
}

/// Parses recipe text, asking `exists(path, is_file)` whether its paths exist (`None`: the
/// path is a symbolic link out of the repository, or under one).
fn parse_in(
    exists: &dyn Fn(&str, bool) -> Option<bool>,
    rel: &str,
    text: &str,
) -> Result<Recipe, RecipeError> {
    let invalid = |span: Option<Range<usize>>, message: String, hint: Option<&str>| {
        let (line, column) = crate::foundation::spans::locate(text, span);
        RecipeError::Invalid {
            path: rel.to_string(),
            line,
            column,
            message,
            hint: hint.map(str::to_string),
        }
    };
    let toml_err = |e: toml::de::Error| {
        invalid(
            e.span(),
            crate::foundation::spans::user_message_in(&e, text),
            None,
        )
    };
    let table: toml::Table = toml::from_str(text).map_err(toml_err)?;
    check_schema(&table, rel, &invalid)?;
    let raw: RawRecipe = toml::from_str(text).map_err(toml_err)?;
    let name = Path::new(rel)
        .file_stem()
        .map_or_else(|| "recipe".into(), |s| s.to_string_lossy().into_owned());
    let mut b = raw.build.into_inner();
    let limits = limits(b.limits.take())
        .map_err(|(span, message, hint)| invalid(span, message, hint.as_deref()))?;
    let kind = check_keys(&b, &invalid)?;
    let entries = entries(&b, &kind, &invalid)?;
    let relpath = |s: &Spanned<String>,
                   what: &str,
                   must_be_file: bool|
     -> Result<String, RecipeError> {
        let norm = normalize(s.get_ref()).ok_or_else(|| {
            invalid(
                Some(s.span()),
                format!(
                    "[build] `{what}`: `{}` is outside the repository",
                    s.get_ref()
                ),
                Some("paths are relative to the project root and stay inside it"),
            )
        })?;
        let Some(found) = exists(&norm, must_be_file) else {
            return Err(invalid(
                Some(s.span()),
                format!("[build] `{what}`: `{norm}` links outside the repository"),
                Some(
                    "copy it into the repository: another checkout would not have what the link points to, and the key could not cover it",
                ),
            ));
        };
        if !found {
            let kind = if must_be_file { "file" } else { "directory" };
            return Err(invalid(
                Some(s.span()),
                format!("[build] `{what}`: no {kind} `{norm}`"),
                Some("paths are relative to the project root"),
            ));
        }
        Ok(norm)
    };

    let build = match kind.as_str() {
        "torch-extension" => torch_extension(b, entries, &invalid, &relpath)?,
        "command" => command_build(b, entries, &invalid)?,
        _ => compile_build(b, entries, &kind, &invalid, &relpath)?,
    };
    // A budget for a target the recipe does not build for would never be judged.
    if let Build::Nvrtc(c) | Build::Nvcc(c) = &build
        && let Some(key) = limits.min_occupancy.keys().find(|k| {
            *k != "*"
                && !c.targets.iter().any(|t| {
                    crate::foundation::occupancy::capability(t)
                        == crate::foundation::occupancy::capability(k)
                })
        })
    {
        let span = text
            .find("min-occupancy")
            .map(|i| i..i + "min-occupancy".len());
        return Err(invalid(
            span,
            format!(
                "[build.limits] `min-occupancy` names `{key}`, which this recipe does not build for (its targets: {})",
                c.targets.join(", ")
            ),
            Some("name a target of the recipe, or give one number for every target"),
        ));
    }
    let entries: Vec<String> = match &build {
        Build::Nvrtc(c) | Build::Nvcc(c) => c.entries.clone(),
        Build::Command(c) => c.entries.clone(),
        Build::TorchExtension(t) => t.entries.clone(),
    };
    // Read before the sections are checked, so that a bad value is not blamed on a line of
    // the recipe.
    crate::foundation::runspec::max_sweep_points()?;
    let sections = crate::foundation::runspec::validate(
        crate::foundation::runspec::Raw {
            params: raw.params,
            run: raw.run,
            check: raw.check,
            work: raw.work,
        },
        &entries,
        text,
    )
    .map_err(|(span, message, hint)| invalid(span, message, hint.as_deref()))?;
    if !limits.min_occupancy.is_empty() {
        occupancy_launch(&sections, rel, text)?;
    }
    Ok(Recipe {
        limits,
        name,
        path: rel.to_string(),
        text: text.to_string(),
        bisect_paths: bisect_paths(raw.bisect, &invalid)?,
        description: raw.description,
        build,
        sections,
    })
}

/// A `min-occupancy` budget judges the `[run]` launch at every point of the sweep: there
/// must be one, and its block must be one a GPU can run (1 to 1024 threads) at every point.
/// Otherwise the budget could not be judged, and that is the recipe's mistake, not the
/// build's.
fn occupancy_launch(
    sections: &crate::foundation::runspec::Sections,
    rel: &str,
    text: &str,
) -> Result<(), RecipeError> {
    let at = |line_column: Option<(usize, usize)>, message: String, hint: &str| {
        let (line, column) = line_column.unwrap_or_else(|| {
            crate::foundation::spans::locate(
                text,
                text.find("min-occupancy")
                    .map(|i| i..i + "min-occupancy".len()),
            )
        });
        RecipeError::Invalid {
            path: rel.to_string(),
            line,
            column,
            message,
            hint: Some(hint.to_string()),
        }
    };
    let Some(run) = &sections.run else {
        return Err(at(
            None,
            "[build.limits] `min-occupancy` needs a [run] launch of a kernel: the occupancy judged is that launch's".into(),
            "add a [run] section with the kernel, grid and block, or drop min-occupancy",
        ));
    };
    for point in crate::foundation::runspec::combinations(&sections.params) {
        let mut threads: u64 = 1;
        for e in &run.launch.block {
            let n = e.eval_count(&point, "[run] block").map_err(|err| {
                at(
                    e.line_column(),
                    format!("[run] block: {err}"),
                    "fix the block",
                )
            })?;
            threads = threads.saturating_mul(n);
        }
        if threads == 0 || threads > 1024 {
            let params = point
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            return Err(at(
                run.launch.block.first().and_then(|e| e.line_column()),
                format!(
                    "[run] block has {threads} threads{}; a block holds 1 to 1024, so min-occupancy cannot be judged",
                    if params.is_empty() {
                        String::new()
                    } else {
                        format!(" at {params}")
                    }
                ),
                "give [run] a block of 1 to 1024 threads",
            ));
        }
    }
    Ok(())
}

/// The recipe's `schema`: present, a positive integer, and not newer than this repro's.
fn check_schema(table: &toml::Table, rel: &str, invalid: &InvalidFn) -> Result<(), RecipeError> {
    match table.get("schema") {
        None => {
            return Err(invalid(
                None,
                "missing `schema`".into(),
                Some("add `schema = 1` at the top"),
            ));
        }
        Some(toml::Value::Integer(n)) if *n > SCHEMA => {
            return Err(RecipeError::NewerSchema {
                path: rel.to_string(),
                found: *n,
            });
        }
        Some(toml::Value::Integer(n)) if *n >= 1 => {}
        Some(other) => {
            return Err(invalid(
                None,
                format!("`schema` must be a positive integer, not {other}"),
                None,
            ));
        }
    }
    Ok(())
}

/// The build's `kind`, once every key given is one that kind takes; anything else is
/// named, with where it belongs.
fn check_keys(b: &RawBuild, invalid: &InvalidFn) -> Result<String, RecipeError> {
    let kind = b.kind.get_ref().clone();
    let kind_span = b.kind.span();
    let given: Vec<(&str, Option<Range<usize>>)> = vec![
        ("source", b.source.as_ref().map(Spanned::span)),
        ("target", b.target.as_ref().map(Spanned::span)),
        ("outputs", b.outputs.as_ref().map(Spanned::span)),
        ("options", b.options.as_ref().map(Spanned::span)),
        ("defines", b.defines.as_ref().map(Spanned::span)),
        ("include-dirs", b.include_dirs.as_ref().map(Spanned::span)),
        ("toolchain", b.toolchain.as_ref().map(Spanned::span)),
        ("targets", b.targets.as_ref().map(Spanned::span)),
        ("argv", b.argv.as_ref().map(Spanned::span)),
        ("inputs", b.inputs.as_ref().map(Spanned::span)),
        ("timeout", b.timeout.as_ref().map(Spanned::span)),
        ("module", b.module.as_ref().map(Spanned::span)),
        ("sources", b.sources.as_ref().map(Spanned::span)),
        ("nvcc-options", b.nvcc_options.as_ref().map(Spanned::span)),
        ("setup", b.setup.as_ref().map(Spanned::span)),
    ];
    let allowed: &[&str] = match kind.as_str() {
        "nvrtc" | "nvcc" => &[
            "source",
            "target",
            "outputs",
            "options",
            "defines",
            "include-dirs",
            "toolchain",
            "targets",
        ],
        "command" => &["argv", "inputs", "outputs", "timeout"],
        "torch-extension" => &[
            "module",
            "sources",
            "include-dirs",
            "options",
            "nvcc-options",
            "targets",
            "toolchain",
            "setup",
            "timeout",
        ],
        other => {
            return Err(invalid(
                Some(kind_span),
                format!("[build] `kind`: unknown build kind `{other}`"),
                Some("kinds are nvrtc, nvcc, command and torch-extension"),
            ));
        }
    };
    for (key, span) in &given {
        if let Some(span) = span
            && !allowed.contains(key)
        {
            return Err(invalid(
                Some(span.clone()),
                format!("[build] `{key}` does not apply to kind `{kind}`"),
                Some(&format!("kind `{kind}` takes: {}", allowed.join(", "))),
            ));
        }
    }
    Ok(kind)
}

/// `entries`: the kernel names a build must hold. Without `entries` a compiler build is
/// compile-only: it checks that the source compiles. An empty list is more likely a slip
/// than that, so it is refused.
fn entries(b: &RawBuild, kind: &str, invalid: &InvalidFn) -> Result<Vec<String>, RecipeError> {
    let optional_entries = kind == "command" || kind == "torch-extension";
    Ok(match &b.entries {
        None => Vec::new(),
        Some(list) => {
            if list.get_ref().is_empty() && !optional_entries {
                return Err(invalid(
                    Some(list.span()),
                    "[build] `entries` is empty".into(),
                    Some(
                        "name the kernels, e.g. entries = [\"vector_add\"], or leave `entries` out for a recipe that only checks that the source compiles",
                    ),
                ));
            }
            let mut out = Vec::new();
            for e in list.get_ref() {
                if !is_entry_name(e.get_ref()) {
                    return Err(invalid(
                        Some(e.span()),
                        format!("[build] `entries`: `{}` is not a kernel name", e.get_ref()),
                        Some(
                            "name kernels as written in the source: `my_kernel` or `ns::my_kernel` (C++ kernels match their mangled symbols whatever their template arguments)",
                        ),
                    ));
                }
                if out.contains(e.get_ref()) {
                    return Err(invalid(
                        Some(e.span()),
                        format!("[build] `entries`: `{}` is named twice", e.get_ref()),
                        Some("name each kernel once"),
                    ));
                }
                out.push(e.get_ref().clone());
            }
            out
        }
    })
}

/// The `[build]` section of a `kind = "command"` recipe.
fn command_build(
    b: RawBuild,
    entries: Vec<String>,
    invalid: &InvalidFn,
) -> Result<Build, RecipeError> {
    let kind_span = b.kind.span();
    let require = |what: &str| {
        invalid(
            Some(kind_span.clone()),
            format!("[build] kind `command` needs `{what}`"),
            None,
        )
    };
    let argv = b.argv.ok_or_else(|| require("argv"))?;
    if argv.get_ref().is_empty() {
        return Err(invalid(
            Some(argv.span()),
            "[build] `argv` is empty: kind `command` runs its first word".into(),
            Some("for example argv = [\"make\", \"kernel.cubin\"]"),
        ));
    }
    let argv = argv.into_inner();
    let inputs = b.inputs.ok_or_else(|| require("inputs"))?;
    let mut globs = Vec::new();
    for g in inputs.get_ref() {
        if let Err(e) = globset::Glob::new(g.get_ref()) {
            return Err(invalid(
                Some(g.span()),
                format!("[build] `inputs`: bad glob `{}`: {}", g.get_ref(), e.kind()),
                None,
            ));
        }
        if normalize(g.get_ref()).is_none() {
            return Err(invalid(
                Some(g.span()),
                format!(
                    "[build] `inputs`: `{}` is outside the repository",
                    g.get_ref()
                ),
                None,
            ));
        }
        globs.push(g.get_ref().clone());
    }
    let outs = b.outputs.ok_or_else(|| require("outputs"))?;
    if outs.get_ref().is_empty() {
        return Err(invalid(
            Some(outs.span()),
            "[build] `outputs` is empty: kind `command` keeps the files it names".into(),
            Some("name the files the command writes, for example outputs = [\"kernel.cubin\"]"),
        ));
    }
    let mut outputs = Vec::new();
    for o in outs.get_ref() {
        let norm = normalize(o.get_ref()).ok_or_else(|| {
            invalid(
                Some(o.span()),
                format!(
                    "[build] `outputs`: `{}` is outside the repository",
                    o.get_ref()
                ),
                None,
            )
        })?;
        outputs.push(norm);
    }
    let timeout = timeout(b.timeout, invalid)?;
    Ok(Build::Command(CommandBuild {
        argv,
        inputs: globs,
        outputs,
        entries,
        timeout,
    }))
}

/// The `[build]` section of a `kind = "nvrtc"` or `kind = "nvcc"` recipe.
fn compile_build(
    b: RawBuild,
    entries: Vec<String>,
    kind: &str,
    invalid: &InvalidFn,
    relpath: &RelPath,
) -> Result<Build, RecipeError> {
    let kind_span = b.kind.span();
    let require = |what: &str| {
        invalid(
            Some(kind_span.clone()),
            format!("[build] kind `{kind}` needs `{what}`"),
            None,
        )
    };
    let source = relpath(
        b.source.as_ref().ok_or_else(|| require("source"))?,
        "source",
        true,
    )?;
    let targets = targets(b.target, b.targets, invalid, &require)?;
    let target = targets
        .iter()
        .map(|(t, _)| t.clone())
        .next()
        .expect("targets is never empty");
    // Outputs apply to every target: binaries need every target to be real.
    let real = targets.iter().all(|(_, r)| *r);
    let targets: Vec<String> = targets.into_iter().map(|(t, _)| t).collect();
    let toolchain = toolchain(b.toolchain.as_ref(), kind, invalid)?;
    let outputs = outputs(b.outputs, kind, &target, &targets, real, invalid)?;
    let options = options(b.options, kind, invalid)?;
    let (defines, env_defines) = defines(b.defines, invalid)?;
    let mut include_dirs = Vec::new();
    for d in b.include_dirs.map(Spanned::into_inner).unwrap_or_default() {
        include_dirs.push(relpath(&d, "include-dirs", false)?);
    }
    let c = Compile {
        source,
        entries,
        target,
        outputs,
        options,
        defines,
        env_defines,
        include_dirs,
        toolchain,
        targets,
    };
    if kind == "nvrtc" {
        Ok(Build::Nvrtc(c))
    } else {
        Ok(Build::Nvcc(c))
    }
}

/// `target` or `targets`: each a known target, none twice, with whether it is real.
fn targets(
    target: Option<Spanned<String>>,
    targets: Option<Spanned<Vec<Spanned<String>>>>,
    invalid: &InvalidFn,
    require: &dyn Fn(&str) -> RecipeError,
) -> Result<Vec<(String, bool)>, RecipeError> {
    let target_list: Vec<Spanned<String>> = match (target, targets) {
        (Some(_), Some(t)) => {
            return Err(invalid(
                Some(t.span()),
                "[build] give `target` or `targets`, not both".into(),
                Some("targets = [\"sm_89\", \"sm_90\"] builds each one"),
            ));
        }
        (Some(t), None) => vec![t],
        (None, Some(t)) if t.get_ref().is_empty() => {
            return Err(invalid(
                Some(t.span()),
                "[build] `targets` is empty".into(),
                None,
            ));
        }
        (None, Some(t)) => t.into_inner(),
        (None, None) => return Err(require("target")),
    };
    let mut targets: Vec<String> = Vec::new();
    let mut reals = Vec::new();
    for t in &target_list {
        let name = t.get_ref().clone();
        match parse_target(&name) {
            Some(_) if targets.contains(&name) => {
                return Err(invalid(
                    Some(t.span()),
                    format!("[build] `targets`: `{name}` is listed twice"),
                    None,
                ));
            }
            Some(real) => reals.push(real),
            None => {
                return Err(invalid(
                    Some(t.span()),
                    format!("[build] `target`: unknown target `{name}`"),
                    Some("for example sm_90 (CUBIN and PTX), sm_90a, or compute_90 (PTX only)"),
                ));
            }
        }
        targets.push(name);
    }
    Ok(targets.into_iter().zip(reals).collect())
}

/// `toolchain`: a spec, whose family (if a release) is the build's kind.
fn toolchain(
    t: Option<&Spanned<String>>,
    kind: &str,
    invalid: &InvalidFn,
) -> Result<Option<String>, RecipeError> {
    Ok(match t {
        None => None,
        Some(t) => {
            let spec = crate::foundation::toolchain_spec::Spec::parse(t.get_ref())
                .map_err(|m| invalid(Some(t.span()), format!("[build] `toolchain`: {m}"), None))?;
            if let crate::foundation::toolchain_spec::Spec::Release { family, .. } = &spec
                && family.name() != kind
            {
                return Err(invalid(
                    Some(t.span()),
                    format!(
                        "[build] `toolchain`: a {} toolchain cannot build kind `{kind}`",
                        family.name()
                    ),
                    Some(&format!(
                        "write toolchain = \"{kind}@RELEASE\" or \"system\""
                    )),
                ));
            }
            Some(spec.to_string())
        }
    })
}

/// `outputs`: those the kind makes, binaries only of real targets, and with several
/// targets either one file for all or one per target.
fn outputs(
    outputs: Option<Spanned<Vec<Spanned<String>>>>,
    kind: &str,
    target: &str,
    targets: &[String],
    real: bool,
    invalid: &InvalidFn,
) -> Result<Vec<Output>, RecipeError> {
    let allowed_outputs: &[Output] = if kind == "nvrtc" {
        &[Output::Ptx, Output::Cubin]
    } else {
        &[Output::Ptx, Output::Cubin, Output::Fatbin, Output::Object]
    };
    Ok(match outputs {
        None if real => vec![Output::Ptx, Output::Cubin],
        None => vec![Output::Ptx],
        Some(list) => {
            let mut v = Vec::new();
            for o in list.get_ref() {
                let out = Output::parse(o.get_ref())
                    .filter(|x| allowed_outputs.contains(x))
                    .ok_or_else(|| {
                        let names: Vec<&str> = allowed_outputs.iter().map(|o| o.name()).collect();
                        invalid(
                            Some(o.span()),
                            format!(
                                "[build] `outputs`: `{}` is not an output of kind `{kind}`",
                                o.get_ref()
                            ),
                            Some(&format!("choose from {}", names.join(", "))),
                        )
                    })?;
                // An object may carry PTX alone; the other binaries need machine code.
                if !matches!(out, Output::Ptx | Output::Object) && !real {
                    return Err(invalid(
                        Some(o.span()),
                        format!(
                            "[build] `outputs`: a {} needs a real architecture, and `{target}` is virtual",
                            out.name()
                        ),
                        Some(&format!(
                            "use target = \"{}\"",
                            target.replacen("compute_", "sm_", 1)
                        )),
                    ));
                }
                v.push(out);
            }
            if v.is_empty() {
                return Err(invalid(
                    Some(list.span()),
                    "[build] `outputs` is empty".into(),
                    None,
                ));
            }
            v.sort();
            v.dedup();
            if targets.len() > 1
                && v.iter().any(|o| o.holds_every_target())
                && !v.iter().all(|o| o.holds_every_target())
            {
                return Err(invalid(
                    Some(list.span()),
                    format!(
                        "[build] `outputs`: {} holds every target in one file, but {} is one file per target; with several `targets` a recipe builds one or the other",
                        v.iter()
                            .filter(|o| o.holds_every_target())
                            .map(|o| o.name())
                            .collect::<Vec<_>>()
                            .join(" and "),
                        v.iter()
                            .filter(|o| !o.holds_every_target())
                            .map(|o| o.name())
                            .collect::<Vec<_>>()
                            .join(" and "),
                    ),
                    Some(
                        "split it into two recipes: one with outputs = [\"fatbin\"] (one nvcc run with a -gencode per target), one with the per-target outputs",
                    ),
                ));
            }
            v
        }
    })
}

/// `options`: an allow-list, not a deny-list: a recipe from elsewhere must not choose the
/// programs nvcc runs or the files either compiler reads and writes.
fn options(
    options: Option<Spanned<Vec<Spanned<String>>>>,
    kind: &str,
    invalid: &InvalidFn,
) -> Result<Vec<String>, RecipeError> {
    let spanned = options.map(Spanned::into_inner).unwrap_or_default();
    let options: Vec<String> = spanned.iter().map(|o| o.get_ref().clone()).collect();
    let compiler = if kind == "nvrtc" {
        crate::foundation::cuda_options::Compiler::Nvrtc
    } else {
        crate::foundation::cuda_options::Compiler::Nvcc
    };
    if let Err(r) = crate::foundation::cuda_options::check(compiler, &options) {
        return Err(invalid(
            Some(spanned[r.index].span()),
            format!("[build] `options`: {}", r.message),
            Some(&r.hint),
        ));
    }
    Ok(options)
}

/// The `[build.defines]` of a compiler build: fixed values, and those read from the
/// environment (`{ env = "VAR", default = ... }`).
#[expect(
    clippy::type_complexity,
    reason = "the two maps of a compile's defines"
)]
fn defines(
    d: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    invalid: &InvalidFn,
) -> Result<
    (
        BTreeMap<String, String>,
        BTreeMap<String, (String, Option<String>)>,
    ),
    RecipeError,
> {
    let mut defines = BTreeMap::new();
    let mut env_defines = BTreeMap::new();
    if let Some(d) = d {
        for (k, v) in d.into_inner() {
            if !is_identifier(&k) {
                return Err(invalid(
                    Some(v.span()),
                    format!("[build.defines] `{k}` is not a macro name"),
                    None,
                ));
            }
            let span = v.span();
            match v.into_inner() {
                toml::Value::Table(t) => {
                    let var = t.get("env").and_then(|e| e.as_str());
                    let default = t.get("default").map(crate::foundation::spans::scalar);
                    let unknown = t.keys().find(|k| *k != "env" && *k != "default");
                    match (var, default.clone(), unknown) {
                        (Some(var), None | Some(Some(_)), None) => {
                            env_defines.insert(k, (var.to_string(), default.flatten()));
                        }
                        _ => {
                            return Err(invalid(
                                Some(span),
                                format!(
                                    "[build.defines] `{k}`: a table must be {{ env = \"VAR\" }} with an optional `default`"
                                ),
                                None,
                            ));
                        }
                    }
                }
                other => {
                    let text = crate::foundation::spans::scalar(&other).ok_or_else(|| {
                        invalid(Some(span.clone()), format!("[build.defines] `{k}` must be a string, number, boolean or {{ env = \"VAR\" }}"), None)
                    })?;
                    defines.insert(k, text);
                }
            }
        }
    }
    Ok((defines, env_defines))
}

/// `[bisect] paths`: git pathspecs relative to the root.
fn bisect_paths(
    raw: Option<Spanned<RawBisect>>,
    invalid: &InvalidFn,
) -> Result<Vec<String>, RecipeError> {
    let mut bisect_paths = Vec::new();
    if let Some(b) = raw {
        for p in b.into_inner().paths.into_inner() {
            let spec = p.get_ref();
            if spec.trim().is_empty()
                || spec.starts_with('/')
                || git2::Pathspec::new([spec.as_str()]).is_err()
            {
                return Err(invalid(
                    Some(p.span()),
                    format!("[bisect] `paths`: `{spec}` is not a pathspec relative to the root"),
                    Some("use git pathspecs such as \"kernels/\" or \"scripts/*.sh\""),
                ));
            }
            bisect_paths.push(spec.clone());
        }
    }
    Ok(bisect_paths)
}

type InvalidFn<'a> = dyn Fn(Option<Range<usize>>, String, Option<&str>) -> RecipeError + 'a;
type RelPath<'a> = dyn Fn(&Spanned<String>, &str, bool) -> Result<String, RecipeError> + 'a;

/// The `[build]` section of a `kind = "torch-extension"` recipe.
fn torch_extension(
    b: RawBuild,
    entries: Vec<String>,
    invalid: &InvalidFn,
    relpath: &RelPath,
) -> Result<Build, RecipeError> {
    let kind_span = b.kind.span();
    let module = b.module.ok_or_else(|| {
        invalid(
            Some(kind_span.clone()),
            "[build] kind `torch-extension` needs `module`".into(),
            Some("the Python module's name, e.g. module = \"my_ext\""),
        )
    })?;
    if !is_identifier(module.get_ref()) {
        return Err(invalid(
            Some(module.span()),
            format!(
                "[build] `module`: `{}` is not a Python module name",
                module.get_ref()
            ),
            Some("letters, digits and underscores, not starting with a digit"),
        ));
    }
    for e in &entries {
        if !is_identifier(e) {
            return Err(invalid(
                Some(kind_span.clone()),
                format!("[build] `entries`: `{e}` is not a Python function name"),
                Some("name the module's functions, e.g. entries = [\"forward\"]"),
            ));
        }
    }
    let (setup, sources) = torch_sources(b.setup, b.sources, kind_span, invalid, relpath)?;
    let mut targets = Vec::new();
    for t in b.targets.map(Spanned::into_inner).unwrap_or_default() {
        if parse_target(t.get_ref()).is_none() || targets.contains(t.get_ref()) {
            return Err(invalid(
                Some(t.span()),
                format!(
                    "[build] `targets`: `{}` is unknown or listed twice",
                    t.get_ref()
                ),
                Some("for example sm_90 or compute_90"),
            ));
        }
        targets.push(t.into_inner());
    }
    let options: Vec<String> = b
        .options
        .map(|o| {
            o.into_inner()
                .into_iter()
                .map(Spanned::into_inner)
                .collect()
        })
        .unwrap_or_default();
    let nvcc_options = b.nvcc_options.map(Spanned::into_inner).unwrap_or_default();
    for opt in options.iter().chain(&nvcc_options) {
        if opt == "-o" || opt.starts_with("-I") || opt.starts_with("-arch") {
            return Err(invalid(
                None,
                format!("[build] `{opt}` is set by the recipe's module, include-dirs or targets"),
                Some("use those keys, so repro can hash them and keep paths relative"),
            ));
        }
    }
    let mut include_dirs = Vec::new();
    for d in b.include_dirs.map(Spanned::into_inner).unwrap_or_default() {
        include_dirs.push(relpath(&d, "include-dirs", false)?);
    }
    let timeout = timeout(b.timeout, invalid)?;
    Ok(Build::TorchExtension(TorchExtension {
        module: module.into_inner(),
        sources,
        entries,
        include_dirs,
        options,
        nvcc_options,
        targets,
        toolchain: torch_toolchain(b.toolchain, invalid)?,
        setup,
        timeout,
    }))
}

/// A build's `timeout`, a duration such as "90s" (by default [`DEFAULT_COMMAND_TIMEOUT`]).
fn timeout(t: Option<Spanned<String>>, invalid: &InvalidFn) -> Result<Duration, RecipeError> {
    Ok(match t {
        None => DEFAULT_COMMAND_TIMEOUT,
        Some(t) => match humantime::parse_duration(t.get_ref()) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                return Err(invalid(
                    Some(t.span()),
                    format!(
                        "[build] `timeout`: `{}` would stop the build at once",
                        t.get_ref()
                    ),
                    Some("give a positive duration, for example \"90s\" or \"10m\""),
                ));
            }
            Err(e) => {
                return Err(invalid(
                    Some(t.span()),
                    format!("[build] `timeout`: `{}`: {e}", t.get_ref()),
                    Some("for example \"90s\" or \"10m\""),
                ));
            }
        },
    })
}

/// A torch extension's `setup` script or its C++ and CUDA `sources` (one or the other).
fn torch_sources(
    setup: Option<Spanned<String>>,
    raw_sources: Option<Spanned<Vec<Spanned<String>>>>,
    kind_span: Range<usize>,
    invalid: &InvalidFn,
    relpath: &RelPath,
) -> Result<(Option<String>, Vec<String>), RecipeError> {
    let setup = setup
        .as_ref()
        .map(|s| relpath(s, "setup", true))
        .transpose()?;
    let mut sources = Vec::new();
    for s in raw_sources.map(Spanned::into_inner).unwrap_or_default() {
        let rel = relpath(&s, "sources", true)?;
        let known = [".cpp", ".cc", ".cxx", ".cu"];
        if !known.iter().any(|x| rel.ends_with(x)) {
            return Err(invalid(
                Some(s.span()),
                format!("[build] `sources`: `{rel}` is neither C++ nor CUDA"),
                Some(
                    "sources end in .cpp, .cc, .cxx (the host compiler) or .cu (nvcc); headers are found through their includes",
                ),
            ));
        }
        sources.push(rel);
    }
    match (&setup, sources.is_empty()) {
        (None, true) => {
            return Err(invalid(
                Some(kind_span),
                "[build] kind `torch-extension` needs `sources` (or a `setup` script)".into(),
                Some("sources = [\"ext/my_ext.cpp\"]"),
            ));
        }
        (Some(_), false) => {
            return Err(invalid(
                Some(kind_span),
                "[build] give `sources` or `setup`, not both".into(),
                Some("with `setup`, setup.py names the sources"),
            ));
        }
        _ => {}
    }
    Ok((setup, sources))
}

/// A torch extension's `toolchain`: its CUDA sources build with nvcc.
fn torch_toolchain(
    t: Option<Spanned<String>>,
    invalid: &InvalidFn,
) -> Result<Option<String>, RecipeError> {
    Ok(match t {
        None => None,
        Some(t) => {
            let spec = crate::foundation::toolchain_spec::Spec::parse(t.get_ref())
                .map_err(|m| invalid(Some(t.span()), format!("[build] `toolchain`: {m}"), None))?;
            if let crate::foundation::toolchain_spec::Spec::Release { family, .. } = &spec
                && family.name() != "nvcc"
            {
                return Err(invalid(
                    Some(t.span()),
                    "[build] `toolchain`: a torch extension's CUDA sources build with nvcc".into(),
                    Some("write toolchain = \"nvcc@RELEASE\" or \"system\""),
                ));
            }
            Some(spec.to_string())
        }
    })
}

/// `sm_90` → Some(true) (real), `compute_90` → Some(false) (virtual), anything else → None.
pub fn parse_target(t: &str) -> Option<bool> {
    let (real, rest) = if let Some(r) = t.strip_prefix("sm_") {
        (true, r)
    } else {
        (false, t.strip_prefix("compute_")?)
    };
    let digits = rest.trim_end_matches(['a', 'f']);
    let ok = (2..=3).contains(&digits.len())
        && digits.chars().all(|c| c.is_ascii_digit())
        && rest.len() - digits.len() <= 1;
    ok.then_some(real)
}

/// A kernel name as written in the source: a C identifier, or a C++ qualified name
/// (`ns::kernel`).
fn is_entry_name(s: &str) -> bool {
    s.split("::").all(is_identifier)
}

fn is_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// Normalises a relative path lexically (`./a/../b` → `b`); `None` if it is absolute or
/// climbs out of the root.
pub fn normalize(p: &str) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for c in Path::new(p).components() {
        match c {
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("kernels/inc")).unwrap();
        std::fs::write(d.path().join("kernels/a.cu"), "").unwrap();
        d
    }

    fn err(text: &str) -> String {
        let d = repo();
        parse(d.path(), "recipes/r.toml", text)
            .unwrap_err()
            .to_string()
    }

    const HEAD: &str = "schema = 1\n[build]\n";

    /// A `min-occupancy` budget applies to its SM whatever the suffix (`sm_90a` builds a cubin
    /// that says `sm_90`), and one for a target the recipe does not build for is refused
    /// where it is written: it would never be judged.
    #[test]
    fn occupancy_budgets_match_their_targets_suffix_or_not() {
        let d = repo();
        let text = |target: &str, budget: &str| {
            format!(
                "{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"{target}\"\n[build.limits]\nmin-occupancy = {budget}\n[run]\nkernel = \"k\"\ngrid = 1\nblock = 128\n"
            )
        };
        let r = parse(
            d.path(),
            "recipes/r.toml",
            &text("sm_90a", "{ sm_90a = 0.5 }"),
        )
        .unwrap();
        assert_eq!(r.limits.min_occupancy_for("sm_90"), Some(0.5));
        let r = parse(d.path(), "recipes/r.toml", &text("sm_90", "0.25")).unwrap();
        assert_eq!(r.limits.min_occupancy_for("sm_90"), Some(0.25));
        let e = parse(
            d.path(),
            "recipes/r.toml",
            &text("sm_90", "{ sm_80 = 0.5 }"),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("recipes/r.toml:8:1: [build.limits] `min-occupancy` names `sm_80`, which this recipe does not build for (its targets: sm_90)"),
            "{e}"
        );
        // The budget judges the [run] launch: without one, or with a block no GPU runs,
        // it cannot be judged, and the recipe says so where it is written.
        let no_run = text("sm_90", "0.5");
        let no_run = &no_run[..no_run.find("[run]").unwrap()];
        let e = parse(d.path(), "recipes/r.toml", no_run).unwrap_err();
        assert!(
            e.to_string().contains(
                "recipes/r.toml:8:1: [build.limits] `min-occupancy` needs a [run] launch"
            ),
            "{e}"
        );
        let sweep = text("sm_90", "0.5").replace("block = 128", "block = \"b\"")
            + "[params]\nb = [256, 2048]\n";
        let e = parse(d.path(), "recipes/r.toml", &sweep).unwrap_err();
        assert!(e.to_string().contains("recipes/r.toml:12:9: [run] block has 2048 threads at b=2048; a block holds 1 to 1024"), "{e}");
        assert_eq!(e.exit_code(), exit::USAGE);
    }

    /// A source or include directory that is a symbolic link out of the repository is the
    /// recipe's mistake (file:line:column, key), not a failed build.
    #[test]
    fn a_path_that_links_outside_the_repository_is_refused_where_it_is_written() {
        let d = repo();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("x.cu"), "").unwrap();
        std::os::unix::fs::symlink(outside.path().join("x.cu"), d.path().join("k2.cu")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("ext")).unwrap();
        for (text, says) in [
            (
                "kind = \"nvrtc\"\nsource = \"k2.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n",
                "recipes/r.toml:4:10: [build] `source`: `k2.cu` links outside the repository",
            ),
            (
                "kind = \"nvrtc\"\nsource = \"ext/x.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n",
                "recipes/r.toml:4:10: [build] `source`: `ext/x.cu` links outside the repository",
            ),
            (
                "kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\ninclude-dirs = [\"ext\"]\n",
                "[build] `include-dirs`: `ext` links outside the repository",
            ),
        ] {
            let e = parse(d.path(), "recipes/r.toml", &format!("{HEAD}{text}")).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
            assert_eq!(crate::foundation::error::Diagnose::exit_code(&e), 2, "{e}");
        }
    }

    #[test]
    fn parses_each_kind() {
        let d = repo();
        let r = parse(d.path(), "recipes/r.toml", "schema = 1\ndescription = \"x\"\n[build]\nkind = \"nvrtc\"\nsource = \"./kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\ninclude-dirs = [\"kernels/inc\"]\n[build.defines]\nBLOCK = 256\n").unwrap();
        let Build::Nvrtc(c) = &r.build else { panic!() };
        assert_eq!(c.source, "kernels/a.cu");
        assert_eq!(c.outputs, [Output::Ptx, Output::Cubin]);
        assert_eq!(c.defines["BLOCK"], "256");
        assert_eq!(r.name, "r");
        let r = parse(d.path(), "recipes/r.toml", "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"compute_90\"\n").unwrap();
        let Build::Nvcc(c) = &r.build else { panic!() };
        assert_eq!(c.outputs, [Output::Ptx]);
        let r = parse(d.path(), "recipes/r.toml", "schema = 1\n[build]\nkind = \"command\"\nargv = [\"make\"]\ninputs = [\"kernels/**/*.cu\"]\noutputs = [\"build/k.cubin\"]\ntimeout = \"90s\"\n").unwrap();
        let Build::Command(c) = &r.build else {
            panic!()
        };
        assert_eq!(c.timeout, Duration::from_secs(90));
    }

    #[test]
    fn torch_extensions_parse_and_refuse_what_does_not_fit() {
        let d = repo();
        std::fs::write(d.path().join("kernels/b.cpp"), "").unwrap();
        let r = parse(d.path(), "recipes/r.toml", "schema = 1\n[build]\nkind = \"torch-extension\"\nmodule = \"ext\"\nsources = [\"kernels/b.cpp\", \"kernels/a.cu\"]\nentries = [\"forward\"]\ntargets = [\"sm_90\"]\nnvcc-options = [\"-lineinfo\"]\ninclude-dirs = [\"kernels/inc\"]\n").unwrap();
        let Build::TorchExtension(t) = &r.build else {
            panic!()
        };
        assert_eq!(t.module, "ext");
        assert!(t.has_cuda());
        assert_eq!(t.targets, ["sm_90"]);
        assert!(r.targets().is_empty(), "one module carries every target");
        assert_eq!(r.canonical_build()["kind"], "torch-extension");
        let te = "kind = \"torch-extension\"\n";
        for (body, words) in [
            ("sources = [\"kernels/a.cu\"]\n", "needs `module`"),
            (
                "module = \"my-ext\"\nsources = [\"kernels/a.cu\"]\n",
                "is not a Python module name",
            ),
            ("module = \"e\"\n", "needs `sources` (or a `setup` script)"),
            (
                "module = \"e\"\nsources = [\"kernels/a.cu\"]\nsetup = \"kernels/a.cu\"\n",
                "give `sources` or `setup`, not both",
            ),
            (
                "module = \"e\"\nsources = [\"kernels/a.cu\"]\noptions = [\"-Ifoo\"]\n",
                "`-Ifoo` is set by the recipe",
            ),
            (
                "module = \"e\"\nsources = [\"kernels/a.cu\"]\ntoolchain = \"nvrtc@13.0\"\n",
                "build with nvcc",
            ),
            (
                "module = \"e\"\nsources = [\"kernels/a.cu\"]\ntarget = \"sm_90\"\n",
                "`target` does not apply to kind `torch-extension`",
            ),
        ] {
            let e = err(&format!("{HEAD}{te}{body}"));
            assert!(e.contains(words), "{body}: {e}");
        }
    }

    #[test]
    fn several_targets_split_into_one_recipe_each() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("kernels")).unwrap();
        std::fs::create_dir_all(d.path().join(DIR)).unwrap();
        std::fs::write(d.path().join("kernels/a.cu"), "").unwrap();
        let text = "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntargets = [\"sm_89\", \"sm_90\"]\ntoolchain = \"nvcc@13.0\"\n";
        std::fs::write(d.path().join("recipes/m.toml"), text).unwrap();
        let r = load(d.path(), "m").unwrap();
        let parts = r.per_target();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].name, "m@sm_90");
        // A target's build is the build of the same recipe written with that one target.
        let single = parse(
            d.path(),
            "recipes/m.toml",
            &text.replace("targets = [\"sm_89\", \"sm_90\"]", "target = \"sm_90\""),
        )
        .unwrap();
        assert_eq!(parts[1].canonical_build(), single.canonical_build());
        assert_eq!(load(d.path(), "m@sm_89").unwrap().targets(), ["sm_89"]);
        assert!(
            load(d.path(), "m@sm_80")
                .unwrap_err()
                .to_string()
                .contains("has no target `sm_80`")
        );
        assert_eq!(r.for_capability("9.0").unwrap().name, "m@sm_90");
        assert_eq!(r.for_capability("8.9").unwrap().name, "m@sm_89");
        assert!(r.for_capability("8.0").is_none());
        assert!(r.for_capability("10.0").is_none());
        for (bad, says) in [
            ("toolchain = \"nvcc@13.0\"", "toolchain = \"nvrtc@13.0.88\""),
            (
                "targets = [\"sm_89\", \"sm_90\"]",
                "targets = [\"sm_90\", \"sm_90\"]",
            ),
            ("targets = [\"sm_89\", \"sm_90\"]", "targets = []"),
            (
                "targets = [\"sm_89\", \"sm_90\"]",
                "target = \"sm_90\"\ntargets = [\"sm_89\"]",
            ),
        ]
        .iter()
        .map(|(a, b)| (text.replace(a, b), *b))
        {
            let e = parse(d.path(), "recipes/m.toml", &bad)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("recipes/m.toml:"), "{says}: {e}");
        }
    }

    #[test]
    fn errors_name_the_place_and_the_key() {
        let nv =
            "kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n";
        assert_eq!(
            err(&format!("{HEAD}{nv}colour = 1\n")),
            "recipes/r.toml:7:1: unknown field `colour`, expected one of `kind`, `source`, `entries`, `target`, `outputs`, `options`, `defines`, `include-dirs`, `toolchain`, `targets`, `argv`, `inputs`, `timeout`, `limits`, `module`, `sources`, `nvcc-options`, `setup`"
        );
        assert_eq!(
            err(&format!("{HEAD}kind = \"clang\"\n")),
            "recipes/r.toml:3:8: [build] `kind`: unknown build kind `clang`"
        );
        assert!(
            err(&format!("{HEAD}{nv}argv = [\"x\"]\n"))
                .contains("`argv` does not apply to kind `nvrtc`")
        );
        assert!(err(&format!("{HEAD}kind = \"nvrtc\"\nsource = \"kernels/missing.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n")).contains("recipes/r.toml:4:10: [build] `source`: no file `kernels/missing.cu`"));
        assert!(err(&format!("{HEAD}kind = \"nvrtc\"\nsource = \"../etc/passwd\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n")).contains("outside the repository"));
        assert!(err(&format!("{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"sm_9x\"\n")).contains("unknown target `sm_9x`"));
        assert!(err(&format!("{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"compute_90\"\noutputs = [\"cubin\"]\n")).contains("needs a real architecture"));
        assert!(err(&format!("{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\noutputs = [\"fatbin\"]\n")).contains("not an output of kind `nvrtc`"));
        assert!(err(&format!("{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"1k\"]\ntarget = \"sm_90\"\n")).contains("is not a kernel name"));
        let empty = parse(
            repo().path(),
            "recipes/r.toml",
            &format!("{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = []\ntarget = \"sm_90\"\n"),
        )
        .unwrap_err();
        assert!(empty.to_string().contains("`entries` is empty"), "{empty}");
        assert!(
            empty
                .hint()
                .unwrap_or_default()
                .contains("leave `entries` out")
        );
        assert!(
            err(&format!(
                "{HEAD}kind = \"nvcc\"\nsource = \"kernels/a.cu\"\ntargets = [\"sm_89\", \"sm_90\"]\noutputs = [\"fatbin\", \"cubin\"]\n"
            ))
            .contains("recipes/r.toml:6:11: [build] `outputs`: fatbin holds every target in one file, but cubin is one file per target")
        );
        assert!(
            err(&format!(
                "{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\ntarget = \"sm_90\"\noutputs = [\"object\"]\n"
            ))
            .contains("not an output of kind `nvrtc`")
        );
        assert!(
            err(&format!("{HEAD}{nv}options = [\"-arch=sm_80\"]\n"))
                .contains("set by the recipe's `target`")
        );
        assert!(err(&format!("{HEAD}{nv}options = [\"-Ifoo\"]\n")).contains("`include-dirs`"));
        assert!(err("schema = 2\n").contains("schema 2"));
        assert!(err("[build]\n").contains("missing `schema`"));
    }

    #[test]
    fn compile_only_and_fat_recipes() {
        let d = repo();
        let r = parse(d.path(), "recipes/r.toml", "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/a.cu\"\ntarget = \"sm_90\"\n").unwrap();
        assert!(r.compile_only() && r.entries().is_empty());
        let r = parse(d.path(), "recipes/o.toml", "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"kernels/a.cu\"\ntarget = \"compute_90\"\noutputs = [\"object\"]\n").unwrap();
        let Build::Nvcc(c) = &r.build else { panic!() };
        assert_eq!(c.outputs, [Output::Object]);
        assert!(!r.is_fat(), "one target is not a fat build");
        let text = "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntargets = [\"sm_89\", \"sm_90\"]\noutputs = [\"fatbin\", \"object\"]\n";
        let r = parse(d.path(), "recipes/f.toml", text).unwrap();
        assert!(r.is_fat() && !r.compile_only());
        // A fat build is one build over every target, never split.
        assert_eq!(r.per_target(), std::slice::from_ref(&r));
        assert_eq!(r.targets(), ["sm_89", "sm_90"]);
        // The same targets with per-target outputs are one build each.
        let r = parse(
            d.path(),
            "recipes/f.toml",
            &text.replace("\"fatbin\", \"object\"", "\"cubin\""),
        )
        .unwrap();
        assert_eq!(r.per_target().len(), 2);
        // [run] needs a kernel, which a compile-only recipe does not name.
        let e = parse(d.path(), "recipes/r.toml", &format!("{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\ntarget = \"sm_90\"\n[run]\nkernel = \"k\"\ngrid = 1\nblock = 1\n")).unwrap_err();
        assert!(
            e.to_string()
                .contains("`k` is not one of the build's entries"),
            "{e}"
        );
        assert!(
            e.hint().unwrap_or_default().contains("compile-only"),
            "{e:?}"
        );
    }

    #[test]
    fn env_defines_resolve_from_the_environment() {
        let d = repo();
        let text = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[build.defines]\nA = { env = \"REPRO_TEST_UNSET_VAR_X\", default = 3 }\nB = { env = \"REPRO_TEST_UNSET_VAR_Y\" }\n";
        let mut r = parse(d.path(), "recipes/r.toml", text).unwrap();
        let err = r.clone().resolve_env().unwrap_err().to_string();
        assert_eq!(
            err,
            "recipes/r.toml: [build.defines] `B` reads $REPRO_TEST_UNSET_VAR_Y, which is not set"
        );
        let Build::Nvrtc(c) = &mut r.build else {
            panic!()
        };
        c.env_defines.remove("B");
        r.resolve_env().unwrap();
        let Build::Nvrtc(c) = &r.build else { panic!() };
        assert_eq!(c.defines["A"], "3");
        assert!(c.env_defines.is_empty());
        assert!(err_text("A = { env = 3 }").contains("a table must be"));
    }

    fn err_text(define: &str) -> String {
        err(&format!(
            "{HEAD}kind = \"nvrtc\"\nsource = \"kernels/a.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[build.defines]\n{define}\n"
        ))
    }

    #[test]
    fn targets() {
        assert_eq!(parse_target("sm_90"), Some(true));
        assert_eq!(parse_target("sm_90a"), Some(true));
        assert_eq!(parse_target("sm_100f"), Some(true));
        assert_eq!(parse_target("compute_90"), Some(false));
        assert_eq!(parse_target("sm_9"), None);
        assert_eq!(parse_target("sm_90ab"), None);
        assert_eq!(parse_target("gfx90a"), None);
    }

    #[test]
    fn normalization() {
        assert_eq!(normalize("./a/../b/c.cu").as_deref(), Some("b/c.cu"));
        assert_eq!(normalize("../x"), None);
        assert_eq!(normalize("/etc/x"), None);
    }
}
