//! Building a recipe: collect its inputs, compute its key, reuse the store or compile,
//! and record the result (a failed build is a record too).
//!
//! The build key is the sha256 of a canonical JSON of everything that can change the
//! artifact: the recipe's build section, the bytes of every file the build reads, and the
//! compiler's identity. Nothing volatile and no absolute path goes into it.

pub mod budget;
pub mod command;
pub mod entries;
pub mod inputs;
pub mod nvcc;
pub mod nvrtc;
pub mod torch;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::recipe::{Build, Recipe};
use crate::foundation::records::{self, BuildInputs, BuildRecord, BuildStatus};
use crate::foundation::store::{Store, StoreError};
use inputs::InputError;

/// How to build.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Rebuild even if the store has this key.
    pub force: bool,
    /// Say which input changed since the recipe's last build.
    pub explain: bool,
    /// The Nix dev shell this process runs in, when building with `--nix`.
    pub nix: Option<crate::foundation::nix::ShellInfo>,
    /// Why a `--nix` build fell back to the host (no flake at this commit), for the record.
    pub nix_fallback: Option<String>,
    /// The commit whose files are being built, when the root is not that commit's checkout
    /// (a bisection's scratch tree); otherwise the root's HEAD is recorded.
    pub commit: Option<String>,
    /// `--toolchain`: overrides the recipe's and the project's toolchain.
    pub toolchain: Option<crate::engines::toolchain::install::Spec>,
    /// The project's pinned toolchains (`[toolchain]` in its repro.toml), which decide the
    /// compiler a build without a toolchain of its own uses. `None`: those of the repro.toml
    /// at the root being built.
    pub pins: Option<crate::engines::toolchain::Pins>,
    /// No network: a pinned toolchain that is not installed is an error instead of
    /// installing itself (`--offline`; `REPRO_OFFLINE` is read as well).
    pub offline: bool,
    /// No progress lines while a toolchain installs itself.
    pub quiet: bool,
    /// `--python`: the interpreter whose PyTorch torch extensions build against (absolute);
    /// `None` chooses as the fingerprint does (repro.toml, the active environment, PATH).
    pub python: Option<std::path::PathBuf>,
}

/// One stored output.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OutputInfo {
    /// Its sha256 (the store object's name).
    pub sha256: String,
    /// Its size.
    pub bytes: usize,
    /// Where it is in the store.
    pub path: String,
}

/// What happened to one recipe.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Outcome {
    /// The recipe's name.
    pub recipe: String,
    /// The build key.
    pub key: String,
    /// `ok` or `failed`.
    pub status: std::borrow::Cow<'static, str>,
    /// Whether the store already had it (no compiler ran).
    pub cached: bool,
    /// The outputs, by kind (`ptx`, `cubin`) or by path for command builds.
    pub outputs: BTreeMap<String, OutputInfo>,
    /// The compiler's log.
    pub log: String,
    /// Wall time of this build (or lookup), in milliseconds.
    pub duration_ms: f64,
    /// With `--explain`: what changed since the recipe's last build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<String>>,
    /// Corrupt store objects found and rebuilt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repaired: Vec<String>,
    /// What each kernel of each target costs, and the `[run]` launch's occupancy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<crate::foundation::cubin::ResourceReport>,
    /// The `[build.limits]` budgets the kernels break; the build is then `failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub over_budget: Vec<String>,
    /// What the build checked of its artifact: its entries, or only that the source
    /// compiles (`compile-only`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<records::Checked>,
    /// A failed build's reason in one line: the compiler's first error line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Outcome {
    /// Why it failed, in one line (`None` when it built): its reason, or for an outcome
    /// from an older repro, the first error line of its log.
    pub fn failure_reason(&self) -> Option<String> {
        (self.status != "ok").then(|| {
            self.reason
                .clone()
                .unwrap_or_else(|| crate::foundation::diagnostics::reason(&self.log))
        })
    }
}

/// The resource report of a build's outputs (none when they hold no device code), with the
/// recipe's launch occupancy, and the budgets it breaks.
fn judge(
    recipe: &Recipe,
    report: Option<crate::foundation::cubin::ResourceReport>,
) -> (
    Option<crate::foundation::cubin::ResourceReport>,
    Vec<String>,
) {
    // A build that failed has nothing to judge: its log says why.
    let Some(mut report) = report else {
        return (None, Vec::new());
    };
    budget::add_occupancy(recipe, &mut report);
    let over = budget::violations(recipe, &report);
    ((!report.is_empty()).then_some(report), over)
}

/// The reason of a build that compiled but is over budget: its first broken budget.
fn budget_reason(over: &[String]) -> Option<String> {
    over.first().map(|v| format!("over budget: {v}"))
}

/// The status and log of a build once its budgets are judged: over budget is failed, and
/// the log says which budgets.
fn with_budget(status: BuildStatus, log: String, over: &[String]) -> (BuildStatus, String) {
    if over.is_empty() || status != BuildStatus::Ok {
        return (status, log);
    }
    let mut text = log;
    if !text.is_empty() {
        text.push('\n');
    }
    text.push_str("over budget ([build.limits]):");
    for v in over {
        text.push_str("\n  ");
        text.push_str(v);
    }
    (BuildStatus::Failed, text)
}

/// Why a recipe could not be built at all (as opposed to a build that failed).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The build's inputs cannot be read or resolved.
    #[error("cannot determine the inputs of recipe `{recipe}`")]
    Inputs {
        /// The recipe.
        recipe: String,
        /// What is wrong.
        #[source]
        source: InputError,
    },
    /// The recipe's toolchain cannot be planned or installed.
    #[error("cannot provide the toolchain of recipe `{recipe}`")]
    Toolchain {
        /// The recipe.
        recipe: String,
        /// Why.
        #[source]
        source: Box<crate::engines::toolchain::install::InstallError>,
    },
    /// The pinned toolchain is not installed, or repro.toml cannot be read.
    #[error("recipe `{recipe}` pins {spec}, which is not installed{}", .detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    NotInstalled {
        /// The recipe.
        recipe: String,
        /// The toolchain.
        spec: String,
        /// Why a tree there does not count.
        detail: Option<String>,
    },
    /// repro.toml is invalid.
    #[error(transparent)]
    Config(#[from] crate::foundation::config::ConfigError),
    /// The compiler is not on this machine.
    #[error("{reason}")]
    NoCompiler {
        /// Which compiler.
        compiler: &'static str,
        /// What was looked for.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No Python environment for a torch extension.
    #[error("recipe `{recipe}` is a torch extension and needs a Python environment with PyTorch")]
    Python {
        /// The recipe.
        recipe: String,
        /// Why there is no environment.
        source: crate::foundation::pyenv::PyEnvError,
    },
    /// The Python environment cannot build a torch extension.
    #[error(
        "recipe `{recipe}` is a torch extension, and in the environment of {interpreter} {problem}"
    )]
    Torch {
        /// The recipe.
        recipe: String,
        /// The interpreter.
        interpreter: String,
        /// What is wrong.
        problem: torch::TorchProblem,
    },
    /// The recipe cannot be resolved where the build runs.
    #[error(transparent)]
    Recipe {
        /// What is wrong.
        source: crate::foundation::recipe::RecipeError,
    },
}

impl Diagnose for BuildError {
    fn exit_code(&self) -> u8 {
        match self {
            BuildError::Inputs { .. } => exit::BUILD_FAILED,
            BuildError::NoCompiler { .. } | BuildError::NotInstalled { .. } => exit::ENVIRONMENT,
            BuildError::Config(c) => c.exit_code(),
            BuildError::Toolchain { source, .. } => source.exit_code(),
            BuildError::Store(s) => s.exit_code(),
            BuildError::Recipe { source } => source.exit_code(),
            BuildError::Python { source, .. } => source.exit_code(),
            BuildError::Torch { .. } => exit::ENVIRONMENT,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            BuildError::Inputs { source: InputError::Missing { name, .. }, .. } => Some(format!("paths are relative to the including file or to the recipe's include-dirs; a header of the host or of a library outside the repository is included as <{name}>, and a generated one must exist before the build")),
            BuildError::Inputs { source: InputError::Escapes { .. }, .. } => Some("builds read only files inside the repository".into()),
            BuildError::Inputs { source: InputError::LinksOut { .. }, .. } => Some("copy the file into the repository: another checkout would not have what the link points to, and the key could not cover it".into()),
            BuildError::Inputs { source: InputError::Absolute { .. }, .. } => Some("include toolkit headers by name (<cuda_fp16.h>) and copy other files into the repository, so that the key covers them".into()),
            BuildError::Inputs { source: InputError::Computed { .. }, .. } => Some("write the header's name in the #include (\"name.h\" or <name.h>), so that the key covers the file it reads".into()),
            BuildError::Inputs { source: InputError::NoMatch { .. }, .. } => Some("the recipe's `inputs` globs are relative to the project root; check the pattern, or whether the files exist at this commit".into()),
            BuildError::Inputs { .. } => Some("paths are relative to the including file or to the recipe's include-dirs".into()),
            BuildError::NoCompiler { compiler: "nvrtc", .. } => {
                Some("run `repro toolchain install`, or set REPRO_NVRTC to a libnvrtc.so".into())
            }
            BuildError::NoCompiler { .. } => Some("enter the pinned shell (`nix develop`), install the CUDA toolkit, or set REPRO_NVCC".into()),
            BuildError::NotInstalled { spec, .. } => Some(format!("install it: `{}` (or build with --toolchain system)", crate::engines::toolchain::install::InstallError::install_command(spec))),
            BuildError::Config(c) => c.hint(),
            BuildError::Toolchain { source, .. } => source.hint(),
            BuildError::Store(s) => s.hint(),
            BuildError::Recipe { source } => source.hint(),
            BuildError::Python { source, .. } => source.hint(),
            BuildError::Torch { interpreter, problem, .. } => Some(match problem {
                torch::TorchProblem::NotInstalled { .. } => format!("install it there (`{interpreter} -m pip install torch`), or point --python at an environment that has it"),
                torch::TorchProblem::NoHeaders { .. } => "install Python's development headers (Debian and Ubuntu: python3-dev), or use an interpreter that has them".into(),
                torch::TorchProblem::NoCuda { .. } => "install a CUDA build of PyTorch, or build only the C++ sources".into(),
            }),
        }
    }
}

/// Why a compiler (or a build command) produced no artifacts. This is not a failure of
/// repro's: the build is recorded as failed, with the message as its log.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The compiler or the command rejected its input: its own messages.
    #[error("{log}")]
    Rejected {
        /// What it said, with the command line and how it ended.
        log: String,
    },
    /// NVRTC cannot be loaded.
    #[error(transparent)]
    Nvrtc(#[from] crate::engines::toolchain::NvrtcError),
    /// A call into NVRTC failed.
    #[error("{call} failed: {message}")]
    Call {
        /// The NVRTC function.
        call: &'static str,
        /// NVRTC's name for the result.
        message: String,
    },
    /// A string handed to NVRTC contains a NUL byte.
    #[error("{what} contains a NUL byte")]
    Nul {
        /// The source file, header or option.
        what: String,
    },
    /// The compiler succeeded but left out an output.
    #[error("{compiler} produced no {output}: {cause}")]
    NoOutput {
        /// `NVRTC` or `nvcc`.
        compiler: &'static str,
        /// The output kind.
        output: &'static str,
        /// Why.
        cause: String,
    },
    /// A build command succeeded but did not write a declared output.
    #[error("{}", with_log(.log, &format!("the command succeeded but did not produce the declared output {path}")))]
    MissingOutput {
        /// The command's log.
        log: String,
        /// The declared output.
        path: String,
    },
    /// The artifact lacks an entry point the recipe names.
    #[error("{}", with_log(.log, &missing_entries_message(.missing, .found, .unreadable)))]
    MissingEntries {
        /// The compiler's log.
        log: String,
        /// The entries not found.
        missing: Vec<String>,
        /// The kernels the artifact has, as symbols.
        found: Vec<String>,
        /// Device code that could not be read (a compressed fat binary member).
        unreadable: Vec<String>,
    },
    /// No scratch directory for the compiler's outputs.
    #[error("cannot create a temporary directory: {cause}")]
    TempDir {
        /// The system's words.
        cause: std::io::Error,
    },
    /// The compiler or the command ran out of time.
    #[error("{program} timed out after {}", humantime::format_duration(*.after))]
    Timeout {
        /// `nvcc`, or the command line in backquotes.
        program: String,
        /// The limit.
        after: std::time::Duration,
    },
    /// The compiler or the command could not be run.
    #[error(transparent)]
    Process(crate::foundation::process::ProcessError),
    /// A torch extension built but does not import.
    #[error(
        "the extension built but `import {module}` fails in {interpreter} (PyTorch imported first): {message}"
    )]
    Import {
        /// The module.
        module: String,
        /// The interpreter.
        interpreter: String,
        /// The loader's message.
        message: String,
    },
}

/// What to do about a failed build whose compiler said something repro recognises: code
/// written for another toolkit or build mode than the recipe's.
pub fn compiler_hint(log: &str) -> Option<String> {
    if log.contains("requires separate compilation mode") {
        return Some(
            "a kernel launches kernels from the device: add \"-rdc=true\" to the recipe's `options` (the cubin is then relocatable: loading it needs a device link with cudadevrt)".into(),
        );
    }
    // Runtime calls CUDA 13 (and 12 before it) removed. nvcc: `identifier
    // "cudaThreadSynchronize" is undefined`.
    const REMOVED: [&str; 16] = [
        "cudaThreadSynchronize",
        "cudaThreadExit",
        "cudaThreadSetLimit",
        "cudaThreadGetLimit",
        "cudaThreadSetCacheConfig",
        "cudaThreadGetCacheConfig",
        "cudaSetDoubleForDevice",
        "cudaSetDoubleForHost",
        "cudaBindTexture",
        "cudaBindTexture2D",
        "cudaBindTextureToArray",
        "cudaUnbindTexture",
        "cudaGetTextureReference",
        "cudaBindSurfaceToArray",
        "cudaConfigureCall",
        "cudaSetupArgument",
    ];
    let removed = log.lines().find_map(|l| {
        let name = l.split("identifier \"").nth(1)?.split('"').next()?;
        (REMOVED.contains(&name) && l.contains("is undefined")).then_some(name)
    })?;
    Some(format!(
        "`{removed}` is not in this toolkit's CUDA API (CUDA 13 removed several runtime calls, such as cudaThreadSynchronize): update the call, or build with a toolkit that has it (`--toolchain system`)"
    ))
}

/// What a build that lacks entry points says, after the compiler's log.
fn missing_entries_message(missing: &[String], found: &[String], unreadable: &[String]) -> String {
    // A name several symbols answer to (overloads, or instantiations of a template): the
    // name as written is the problem, and each symbol is the remedy.
    let ambiguous: Vec<(String, Vec<&String>)> = missing
        .iter()
        .filter_map(|e| {
            let many: Vec<&String> = found
                .iter()
                .filter(|f| crate::foundation::symbols::matches(e, f))
                .collect();
            (many.len() > 1).then(|| (e.clone(), many))
        })
        .collect();
    if ambiguous.len() == missing.len() && !ambiguous.is_empty() {
        let mut m = ambiguous
            .iter()
            .map(|(e, many)| {
                format!(
                    "`{e}` names {} kernels (overloads or instantiations): put the symbol of each one the build should have in `entries` instead ({})",
                    many.len(),
                    many.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        for u in unreadable {
            m.push_str(&format!("\n{u}"));
        }
        return m;
    }
    let mut m = format!(
        "the artifact has no entry point {} (it has: {}); name each kernel as written in the source, or fix `entries`",
        missing
            .iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", "),
        if found.is_empty() {
            "none found".to_string()
        } else {
            found
                .iter()
                .map(|f| entries::shown(f))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    for u in unreadable {
        m.push_str(&format!("\n{u}"));
    }
    m
}

impl CompileError {
    /// The failure in one line: the compiler's first error line, or repro's own conclusion
    /// (a missing entry point, a missing output, a time-out), never a warning.
    pub fn reason(&self) -> String {
        match self {
            CompileError::Rejected { log } => crate::foundation::diagnostics::reason(log),
            CompileError::MissingEntries {
                missing,
                found,
                unreadable,
                ..
            } => missing_entries_message(missing, found, unreadable)
                .lines()
                .next()
                .unwrap_or_default()
                .to_string(),
            CompileError::MissingOutput { path, .. } => {
                format!("the command succeeded but did not produce the declared output {path}")
            }
            other => crate::foundation::diagnostics::reason(&other.to_string()),
        }
    }
}

/// A message after a log, the log left out when empty.
fn with_log(log: &str, message: &str) -> String {
    format!("{log}\n{message}").trim_start().to_string()
}

/// A build's named outputs and its log, or why it failed.
type Compiled = Result<(Vec<(String, Vec<u8>)>, String), CompileError>;

/// What a build reads, hashed: the files by relative path, and for NVRTC the headers.
struct Inputs {
    files: BTreeMap<String, Vec<u8>>,
    closure: Option<inputs::Closure>,
}

fn collect(root: &Path, recipe: &Recipe) -> Result<Inputs, BuildError> {
    let err = |source| BuildError::Inputs {
        recipe: recipe.name.clone(),
        source,
    };
    match &recipe.build {
        Build::Nvrtc(c) | Build::Nvcc(c) => {
            let closure = inputs::include_closure(root, &c.source, &c.include_dirs).map_err(err)?;
            Ok(Inputs {
                files: closure.files.clone(),
                closure: Some(closure),
            })
        }
        Build::Command(c) => Ok(Inputs {
            files: inputs::glob_inputs(root, &c.inputs).map_err(err)?,
            closure: None,
        }),
        Build::TorchExtension(t) => {
            let mut files = BTreeMap::new();
            for src in &t.sources {
                let closure = inputs::include_closure(root, src, &t.include_dirs).map_err(err)?;
                files.extend(closure.files);
            }
            if let Some(setup) = &t.setup {
                // setup.py names its sources: every C++, CUDA and Python file beside it.
                let dir = Path::new(setup)
                    .parent()
                    .map(|d| d.to_string_lossy().into_owned())
                    .filter(|d| !d.is_empty());
                // One glob, which matches at least setup.py itself.
                let exts = "{cpp,cc,cxx,cu,h,hpp,cuh,py}";
                let globs = vec![match &dir {
                    Some(d) => format!("{d}/**/*.{exts}"),
                    None => format!("**/*.{exts}"),
                }];
                files.extend(inputs::glob_inputs(root, &globs).map_err(err)?);
            }
            Ok(Inputs {
                files,
                closure: None,
            })
        }
    }
}

/// The compiler a recipe builds with: its identity for the build key, nvcc's path, and the
/// include directories of the toolchain's component libraries. The choice is the
/// resolver's ([`crate::engines::toolchain::resolve`]), the same for every command; a
/// pinned toolchain that is not installed installs itself first unless `opts.offline`.
struct Compiler {
    identity: Value,
    nvcc: Option<std::path::PathBuf>,
    include_dirs: Vec<String>,
}

fn compiler(
    recipe: &Recipe,
    opts: &Options,
    pins: &crate::engines::toolchain::Pins,
) -> Result<Compiler, BuildError> {
    let Build::TorchExtension(t) = &recipe.build else {
        return source_compiler(recipe, opts, pins);
    };
    // A torch extension builds with the host C++ compiler, and its CUDA sources with the
    // nvcc the resolver chooses, as for an nvcc recipe: both are in its identity.
    let mut identity = torch::cxx_identity(&torch::host_cxx())?;
    if !t.has_cuda() {
        return Ok(Compiler {
            identity,
            nvcc: None,
            include_dirs: Vec::new(),
        });
    }
    let c = source_compiler(recipe, opts, pins)?;
    identity["nvcc"] = c.identity;
    Ok(Compiler { identity, ..c })
}

/// The compiler of a recipe's CUDA sources (see [`compiler`]).
fn source_compiler(
    recipe: &Recipe,
    opts: &Options,
    pins: &crate::engines::toolchain::Pins,
) -> Result<Compiler, BuildError> {
    use crate::engines::toolchain::install::{Family, InstallError};
    use crate::engines::toolchain::resolve::{self, Choice, ResolveError};
    let resolved =
        resolve::resolve(pins, recipe, opts.toolchain.as_ref()).map_err(|e| match e {
            ResolveError::BadSpec { message, .. } => BuildError::Recipe {
                source: crate::foundation::recipe::RecipeError::Invalid {
                    path: recipe.path.clone(),
                    line: 1,
                    column: 1,
                    message,
                    hint: None,
                },
            },
            // A release nobody pins and nothing installed: not installed, as before pins.
            ResolveError::Plan(InstallError::UnknownRelease { spec, .. }) => {
                BuildError::NotInstalled {
                    recipe: recipe.name.clone(),
                    detail: Some(format!(
                        "repro.toml does not pin it; `repro toolchain pin {spec}` writes its wheels"
                    )),
                    spec,
                }
            }
            ResolveError::Plan(e) => BuildError::Toolchain {
                recipe: recipe.name.clone(),
                source: Box::new(e),
            },
        })?;
    let plan = match resolved.choice {
        Choice::Managed(plan) => plan,
        Choice::System | Choice::None => return system_compiler(recipe, pins),
    };
    let mut progress = crate::engines::toolchain::progress::InstallProgress::new(opts.quiet);
    let t = resolve::ensure(&plan, pins.project.as_deref(), opts.offline, &mut progress);
    progress.finish();
    let t = t.map_err(|e| match e {
        InstallError::NotInstalled { spec, detail } => BuildError::NotInstalled {
            recipe: recipe.name.clone(),
            spec,
            detail,
        },
        e => BuildError::Toolchain {
            recipe: recipe.name.clone(),
            source: Box::new(e),
        },
    })?;
    crate::foundation::stamp::note(&t.compiler());
    if plan.family == Family::Nvcc {
        let include_dirs = t
            .stamp
            .include_dirs
            .iter()
            .map(|d| t.dir.join(d).display().to_string())
            .collect();
        return Ok(Compiler {
            identity: t.stamp.identity(),
            nvcc: Some(t.compiler()),
            include_dirs,
        });
    }
    // NVRTC is one library per process: make it this one, unless another is in use.
    if !crate::engines::toolchain::choose_nvrtc(t.compiler()) {
        return Err(BuildError::NoCompiler {
            compiler: "nvrtc",
            reason: format!(
                "{} cannot be used in a process that already uses another NVRTC; build this recipe on its own",
                plan.spec()
            ),
        });
    }
    Ok(Compiler {
        identity: t.stamp.identity(),
        nvcc: None,
        include_dirs: Vec::new(),
    })
}

/// The machine's own compiler (nothing pinned, `system`, or `REPRO_NVRTC`).
fn system_compiler(
    recipe: &Recipe,
    pins: &crate::engines::toolchain::Pins,
) -> Result<Compiler, BuildError> {
    let (identity, nvcc) = match &recipe.build {
        Build::Nvrtc(_) => crate::engines::toolchain::nvrtc_identity(pins)
            .map(|id| (id, None))
            .map_err(|e| BuildError::NoCompiler {
                compiler: "nvrtc",
                reason: e.to_string(),
            })?,
        Build::Nvcc(_) => crate::engines::toolchain::nvcc_identity()
            .map(|(p, id)| (id, Some(p)))
            .map_err(|e| BuildError::NoCompiler {
                compiler: "nvcc",
                reason: e.to_string(),
            })?,
        // A torch extension's CUDA sources: the machine's nvcc (its C++ compiler is added
        // by `compiler`).
        Build::TorchExtension(t) if t.has_cuda() => crate::engines::toolchain::nvcc_identity()
            .map(|(p, id)| (id, Some(p)))
            .map_err(|e| BuildError::NoCompiler {
                compiler: "nvcc",
                reason: e.to_string(),
            })?,
        Build::Command(_) | Build::TorchExtension(_) => (json!({"name": "command"}), None),
    };
    Ok(Compiler {
        identity,
        nvcc,
        include_dirs: Vec::new(),
    })
}

/// The recipe's compile settings with the toolchain's component include directories after
/// its own (they are not part of the recipe's key: the toolchain's identity covers them).
fn with_includes(
    c: &crate::foundation::recipe::Compile,
    extra: &[String],
) -> crate::foundation::recipe::Compile {
    let mut c = c.clone();
    c.include_dirs.extend(extra.iter().cloned());
    c
}

/// The part of a build key that comes from the tree and the recipe alone (its `build` and
/// `files` members), computed without compiling or running anything: replay compares it
/// with a record's before it lets any compiler or command near the tree.
pub fn source_inputs(root: &Path, recipe: &Recipe) -> Result<BuildInputs, BuildError> {
    let mut recipe = recipe.clone();
    recipe
        .resolve_env()
        .map_err(|source| BuildError::Recipe { source })?;
    let inputs = collect(root, &recipe)?;
    Ok(key_inputs(&recipe, &inputs.files, &Value::Null, None))
}

/// The JSON whose canonical hash is the build key.
pub fn key_inputs(
    recipe: &Recipe,
    files: &BTreeMap<String, Vec<u8>>,
    compiler: &Value,
    nix: Option<&crate::foundation::nix::ShellInfo>,
) -> BuildInputs {
    BuildInputs {
        schema: records::SCHEMA,
        build: recipe.canonical_build(),
        files: files
            .iter()
            .map(|(k, v)| (k.clone(), keys::sha256_hex(v)))
            .collect(),
        compiler: compiler.clone(),
        // Host builds have no "nix" member at all, so their keys do not depend on Nix.
        nix: nix.map(crate::foundation::nix::ShellInfo::key_json),
        // Set by the build for torch extensions, which are built for one PyTorch.
        torch: None,
    }
}

fn output_info(store: &Store, name: &str, digest: &str, bytes: usize) -> (String, OutputInfo) {
    (
        name.to_string(),
        OutputInfo {
            sha256: digest.to_string(),
            bytes,
            path: store
                .blob_path(digest)
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        },
    )
}

/// Builds one recipe (or finds it in the store).
pub fn build(
    root: &Path,
    store: &Store,
    recipe: &Recipe,
    opts: &Options,
) -> Result<Outcome, BuildError> {
    let start = Instant::now();
    if !matches!(recipe.build, Build::Nvrtc(_) | Build::Nvcc(_)) {
        // A command's or a torch extension's inputs reach past the files noted here.
        crate::foundation::stamp::refuse("only NVRTC and nvcc builds are stamped");
    }
    store.check_schema()?;
    one_target(recipe)?;
    // Shared with other builds, exclusive of gc: the objects this build writes stay until
    // the record that references them is written.
    let _lock = store.lock_shared()?;
    let mut recipe = recipe.clone();
    recipe
        .resolve_env()
        .map_err(|source| BuildError::Recipe { source })?;
    let recipe = &recipe;
    let inputs = collect(root, recipe)?;
    let pins = match &opts.pins {
        Some(p) => p.clone(),
        None => crate::engines::toolchain::Pins::of_project(
            &crate::foundation::config::load(root)?.toolchain,
            root,
        ),
    };
    let compiler = compiler(recipe, opts, &pins)?;
    let mut key_in = key_inputs(recipe, &inputs.files, &compiler.identity, opts.nix.as_ref());
    let python = python(root, recipe, opts, &mut key_in)?;
    let key = keys::key_of(&records::to_json(&key_in));
    let explanation = opts
        .explain
        .then(|| explain(store, &recipe.name, &key, &key_in));
    let mut repaired = Vec::new();
    let existing = existing(store, &key, &mut repaired)?;
    if !opts.force
        && let Some(rec) = existing
        && let Some(mut hit) = cache_hit(store, recipe, &key, &rec, &mut repaired)
    {
        if rec.dirty.is_some() {
            // Whether the tree is clean again is asked of git on every hit.
            crate::foundation::stamp::refuse("the record was built from uncommitted edits");
        }
        cleaned(store, root, opts, &inputs, rec);
        hit.duration_ms = start.elapsed().as_secs_f64() * 1e3;
        hit.explain = explanation;
        hit.repaired = repaired;
        return Ok(hit);
    }
    let how = How {
        root,
        pins: &pins,
        inputs: &inputs,
        compiler: &compiler,
        python: python.as_ref(),
    };
    let stored = store_outputs(store, compile(recipe, &how))?;
    let (resources, over_budget) = judge(recipe, stored.report);
    let record = BuildRecord {
        resources: resources.clone(),
        over_budget: over_budget.clone(),
        schema: records::SCHEMA,
        kind: "build".into(),
        key: key.clone(),
        recipe: recipe.name.clone(),
        recipe_path: recipe.path.clone(),
        recipe_text: Some(recipe.text.clone()),
        status: stored.status,
        inputs: key_in,
        outputs: stored.refs,
        log: stored.log.clone(),
        duration_ms: start.elapsed().as_secs_f64() * 1e3,
        created_at: records::now(),
        repro_version: records::VERSION.into(),
        commit: opts
            .commit
            .clone()
            .or_else(|| crate::foundation::git::head_commit(root)),
        dirty: dirty(root, store, opts, &inputs),
        environment: environment(opts),
        checked: checked(recipe),
        reason: stored.reason.clone(),
    };
    store.put_record(records::BUILDS, &key, &records::to_json(&record))?;
    store.set_last(&recipe.name, &key)?;
    let (status, log) = with_budget(stored.status, stored.log, &over_budget);
    let reason = stored.reason.or_else(|| budget_reason(&over_budget));
    Ok(Outcome {
        recipe: recipe.name.clone(),
        key,
        status: status.word().into(),
        cached: false,
        outputs: stored.outputs,
        log,
        duration_ms: record.duration_ms,
        explain: explanation,
        repaired,
        resources,
        over_budget,
        checked: record.checked,
        reason,
    })
}

/// A torch extension is built for one PyTorch ABI: its Python environment, whose identity
/// is part of the key.
fn python(
    root: &Path,
    recipe: &Recipe,
    opts: &Options,
    key_in: &mut BuildInputs,
) -> Result<Option<crate::foundation::pyenv::PyEnv>, BuildError> {
    Ok(match &recipe.build {
        Build::TorchExtension(t) => {
            let env = torch::environment(&recipe.name, opts.python.as_deref(), root, t)?;
            key_in.torch = Some(torch::identity(&env));
            Some(env)
        }
        _ => None,
    })
}

/// One build is one target (a fat binary or object over `targets` excepted); callers split
/// a several-target recipe with `Recipe::per_target`. Building only the first target would
/// be a silent lie.
fn one_target(recipe: &Recipe) -> Result<(), BuildError> {
    if recipe.targets().len() > 1 && !recipe.is_fat() {
        return Err(BuildError::Recipe {
            source: crate::foundation::recipe::RecipeError::Invalid {
                path: recipe.path.clone(),
                line: 1,
                column: 1,
                message: format!(
                    "[build] `targets`: {} targets, but this command builds one recipe target at a time",
                    recipe.targets().len()
                ),
                hint: Some("`repro build` and `repro bisect --toolchains` build each target; for a commit bisection, use a recipe with one `target`".into()),
            },
        });
    }
    Ok(())
}

/// `--explain`: what changed since the recipe's last build.
fn explain(store: &Store, name: &str, key: &str, key_in: &BuildInputs) -> Vec<String> {
    match store.get_last(name) {
        None => vec!["no earlier build of this recipe to compare with".to_string()],
        Some(last) if last == key => vec!["nothing changed since the last build".to_string()],
        Some(last) => match store
            .get_record(records::BUILDS, &last)
            .map(|r| r.and_then(|v| BuildRecord::from_json(&v, &last).ok()))
        {
            Ok(Some(rec)) => {
                let changes = rec.inputs.explain(key_in);
                if changes.is_empty() {
                    vec!["the key differs but no input does (a record from another repro?)".into()]
                } else {
                    changes
                }
            }
            _ => vec![format!(
                "the last build ({}) is no longer in the store",
                keys::short(&last)
            )],
        },
    }
}

/// The stored record of this key, if any and readable.
fn existing(
    store: &Store,
    key: &str,
    repaired: &mut Vec<String>,
) -> Result<Option<BuildRecord>, BuildError> {
    let existing = match store.get_record(records::BUILDS, key) {
        // A damaged record (truncated by a crash, edited by hand) is moved aside and the
        // build runs again, rather than blocking this key until someone passes --force.
        Err(StoreError::Corrupt { path, what }) => {
            let moved = store.quarantine(&path)?;
            repaired.push(format!(
                "build record {}: {what}; moved to {}",
                keys::short(key),
                moved.display()
            ));
            None
        }
        other => other?,
    };
    // A record this repro cannot read (another schema, a field of the wrong type) is built
    // again and replaced.
    Ok(existing.and_then(|v| BuildRecord::from_json(&v, key).ok()))
}

/// A hit on a record made from uncommitted changes, now that the user's tree holds them
/// committed (the same key: the same inputs): the record names the commit and is no longer
/// dirty, so bundle and replay take it (their refusal says "commit the changes and build
/// again"). Only a build in the user's own tree tells that: a bisection's step (a commit
/// given, or a checkout inside the store) leaves the record as it is, since its commit is
/// not the user's HEAD and its tree is not the one the record was built from.
fn cleaned(store: &Store, root: &Path, opts: &Options, inputs: &Inputs, mut rec: BuildRecord) {
    if rec.dirty.is_none()
        || !in_users_tree(root, store, opts)
        || dirty(root, store, opts, inputs).is_some()
    {
        return;
    }
    let Some(head) = crate::foundation::git::head_commit(root) else {
        return;
    };
    rec.dirty = None;
    rec.commit = Some(head);
    // A read-only store still serves the hit; the record stays as it was.
    let _ = store.put_record(records::BUILDS, &rec.key.clone(), &records::to_json(&rec));
}

/// A cache hit: the stored record's outcome, when every output it names is intact (the
/// caller fills in the duration, the explanation and the repairs).
fn cache_hit(
    store: &Store,
    recipe: &Recipe,
    key: &str,
    rec: &BuildRecord,
    repaired: &mut Vec<String>,
) -> Option<Outcome> {
    let mut outputs = BTreeMap::new();
    let mut intact = true;
    let mut blobs = Vec::new();
    for (name, o) in &rec.outputs {
        let digest = o.sha256.as_str();
        match store.get_blob(digest) {
            Ok(b) => {
                outputs.insert(name.clone(), output_info(store, name, digest, b.len()).1);
                blobs.push((name.clone(), b));
            }
            Err(e) => {
                // Never use a corrupt object: rebuild, which rewrites it.
                repaired.push(e.to_string());
                intact = false;
            }
        }
    }
    if !intact {
        return None;
    }
    // Only a hint for --explain: a read-only store still serves cache hits.
    let _ = store.set_last(&recipe.name, key);
    // Records of older repros carry no report: read it from the artifacts.
    let report = rec.resources.clone().or_else(|| {
        rec.ok().then(|| {
            crate::foundation::cubin::ResourceReport::of_outputs(
                blobs.iter().map(|(n, b)| (n.as_str(), b.as_slice())),
            )
        })
    });
    let (resources, over_budget) = judge(recipe, report);
    let (status, log) = with_budget(rec.status, rec.log.clone(), &over_budget);
    Some(Outcome {
        recipe: recipe.name.clone(),
        key: key.to_string(),
        status: status.word().into(),
        cached: true,
        outputs,
        log,
        duration_ms: 0.0,
        explain: None,
        repaired: Vec::new(),
        reason: rec.failure_reason().or_else(|| budget_reason(&over_budget)),
        resources,
        over_budget,
        checked: rec.checked,
    })
}

/// What a compilation needs besides the recipe.
struct How<'a> {
    root: &'a Path,
    pins: &'a crate::engines::toolchain::Pins,
    inputs: &'a Inputs,
    compiler: &'a Compiler,
    python: Option<&'a crate::foundation::pyenv::PyEnv>,
}

/// Compiles (or runs) the recipe's build, and checks that its entries are in what it built.
fn compile(recipe: &Recipe, how: &How) -> Compiled {
    let named = |outputs: Vec<(crate::foundation::recipe::Output, Vec<u8>)>| {
        outputs
            .into_iter()
            .map(|(k, v)| (k.name().to_string(), v))
            .collect::<Vec<_>>()
    };
    let compiled: Compiled = match &recipe.build {
        Build::Nvrtc(c) => nvrtc::compile(
            c,
            how.pins,
            how.inputs
                .closure
                .as_ref()
                .expect("nvrtc builds have a closure"),
        )
        .map(|a| (named(a.outputs), a.log)),
        Build::Nvcc(c) => nvcc::compile(
            how.compiler.nvcc.as_deref().expect("nvcc builds know nvcc"),
            how.root,
            &with_includes(c, &how.compiler.include_dirs),
        )
        .map(|a| (named(a.outputs), a.log)),
        Build::Command(c) => command::run(how.root, c).map(|a| (a.outputs, a.log)),
        Build::TorchExtension(t) => torch::build(
            how.root,
            t,
            how.python.expect("torch extensions have an environment"),
            &torch::host_cxx(),
            how.compiler.nvcc.as_deref(),
        ),
    };
    compiled.and_then(|(outputs, log)| {
        // A torch extension's entries are Python functions, checked by importing it.
        if recipe.entries().is_empty() || matches!(recipe.build, Build::TorchExtension(_)) {
            return Ok((outputs, log));
        }
        let listing = entries::list(&outputs);
        let missing = listing.missing(recipe.entries());
        if missing.is_empty() {
            Ok((outputs, log))
        } else {
            Err(CompileError::MissingEntries {
                log,
                missing,
                found: listing.kernels(),
                unreadable: listing.unreadable,
            })
        }
    })
}

/// A compilation's outputs, put in the store.
struct Stored {
    status: BuildStatus,
    log: String,
    reason: Option<String>,
    outputs: BTreeMap<String, OutputInfo>,
    refs: BTreeMap<String, records::OutputRef>,
    report: Option<crate::foundation::cubin::ResourceReport>,
}

/// Puts a compilation's outputs in the store (a failure stores nothing).
fn store_outputs(store: &Store, compiled: Compiled) -> Result<Stored, BuildError> {
    let mut stored = Stored {
        status: BuildStatus::Ok,
        log: String::new(),
        reason: None,
        outputs: BTreeMap::new(),
        refs: BTreeMap::new(),
        report: None,
    };
    match compiled {
        Ok((arts, log)) => {
            stored.report = Some(crate::foundation::cubin::ResourceReport::of_outputs(
                arts.iter().map(|(n, b)| (n.as_str(), b.as_slice())),
            ));
            for (name, bytes) in arts {
                let digest = store.put_blob(&bytes)?;
                stored.refs.insert(
                    name.clone(),
                    records::OutputRef {
                        sha256: digest.clone(),
                        bytes: bytes.len() as u64,
                    },
                );
                let (n, info) = output_info(store, &name, &digest, bytes.len());
                stored.outputs.insert(n, info);
            }
            stored.log = log;
        }
        Err(e) => {
            stored.status = BuildStatus::Failed;
            stored.log = e.to_string();
            stored.reason = Some(e.reason());
        }
    }
    Ok(stored)
}

/// What the build checked of its outputs.
fn checked(recipe: &Recipe) -> Option<records::Checked> {
    if recipe.compile_only() {
        Some(records::Checked::CompileOnly)
    } else if recipe.entries().is_empty() {
        None
    } else {
        Some(records::Checked::Entries)
    }
}

/// The digest of the build's inputs that differ from `commit` (uncommitted edits): the
/// sources are then not those of `commit`, and bundle and replay refuse the record. (A
/// checkout of a given commit, or one in the store's scratch space, is not the user's tree.)
/// `repro.toml` counts as an input here: its pins choose the compiler, and a replay reads
/// them at the record's commit (the recipe itself is recorded whole, so it need not).
fn dirty(root: &Path, store: &Store, opts: &Options, inputs: &Inputs) -> Option<String> {
    use crate::foundation::git::changed_from_head;
    if !in_users_tree(root, store, opts) {
        return None;
    }
    let sources = changed_from_head(root, &inputs.files);
    let config = match crate::foundation::fsutil::read_bounded(
        &root.join(crate::foundation::config::FILE),
        crate::foundation::config::MAX_BYTES,
    ) {
        Ok(bytes) => changed_from_head(
            root,
            &[(crate::foundation::config::FILE.to_string(), bytes)].into(),
        ),
        Err(_) => None,
    };
    match (sources, config) {
        (None, None) => None,
        (Some(d), None) | (None, Some(d)) => Some(d),
        (Some(a), Some(b)) => Some(crate::foundation::keys::sha256_hex(
            format!("{a}{b}").as_bytes(),
        )),
    }
}

/// Whether a build runs in the user's working tree: not a bisection's step, which names its
/// commit or builds in a checkout inside the store.
fn in_users_tree(root: &Path, store: &Store, opts: &Options) -> bool {
    opts.commit.is_none() && !root.starts_with(store.root())
}

/// The environment the build ran in: a Nix shell, or the host (with why not Nix).
fn environment(opts: &Options) -> records::Environment {
    match (&opts.nix, &opts.nix_fallback) {
        (Some(info), _) => records::Environment {
            kind: records::EnvironmentKind::Nix,
            shell: Some(info.installable()),
            shell_drv: Some(info.drv.clone()),
            warning: None,
        },
        (None, why) => records::Environment::host(why.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed build's log reads as it did when it was built by hand: the compiler's
    /// words first, an empty log left out.
    #[test]
    fn compiler_messages_for_another_toolkit_or_mode_get_a_hint() {
        let rdc = "k.cu(9): error: kernel launch from __device__ or __global__ functions requires separate compilation mode";
        assert!(compiler_hint(rdc).unwrap().contains("-rdc=true"));
        let gone = "m.cu(60): error: identifier \"cudaThreadSynchronize\" is undefined";
        assert!(
            compiler_hint(gone)
                .unwrap()
                .starts_with("`cudaThreadSynchronize` is not")
        );
        assert_eq!(
            compiler_hint("k.cu(3): error: identifier \"foo\" is undefined"),
            None
        );
        assert_eq!(
            compiler_hint("k.cu(3): error: identifier \"cudaCheckError\" is undefined"),
            None
        );
        assert_eq!(compiler_hint("anything else"), None);
    }

    #[test]
    fn compile_errors_read_as_logs() {
        let e = CompileError::MissingEntries {
            log: "k.cu(3): warning #177-D: variable \"error\" was declared but never referenced"
                .into(),
            missing: vec!["k".into()],
            found: vec![],
            unreadable: vec![],
        };
        // The reason is repro's conclusion, not the warning before it.
        assert_eq!(
            e.reason(),
            "the artifact has no entry point `k` (it has: none found); name each kernel as written in the source, or fix `entries`"
        );
        let e = CompileError::MissingEntries {
            log: String::new(),
            missing: vec!["k".into()],
            found: vec![],
            unreadable: vec![],
        };
        assert_eq!(
            e.to_string(),
            "the artifact has no entry point `k` (it has: none found); name each kernel as written in the source, or fix `entries`"
        );
        // A name that several symbols answer to is said to be one, with its symbols.
        let e = CompileError::MissingEntries {
            log: String::new(),
            missing: vec!["g".into()],
            found: vec!["_Z1gPf".into(), "_Z1gPi".into(), "_Z1hv".into()],
            unreadable: vec![],
        };
        assert_eq!(
            e.to_string(),
            "`g` names 2 kernels (overloads or instantiations): put the symbol of each one the build should have in `entries` instead (_Z1gPf, _Z1gPi)"
        );
        let e = CompileError::MissingOutput {
            log: "warning: x".into(),
            path: "out.so".into(),
        };
        assert_eq!(
            e.to_string(),
            "warning: x\nthe command succeeded but did not produce the declared output out.so"
        );
        let e = CompileError::Timeout {
            program: "nvcc".into(),
            after: std::time::Duration::from_secs(600),
        };
        assert_eq!(e.to_string(), "nvcc timed out after 10m");
    }

    #[test]
    fn entries_from_ptx_and_binaries() {
        let ptx = ".visible .entry vector_add(\n\t.param .u64 a\n)\n.entry other_k (\n";
        assert_eq!(
            crate::foundation::symbols::ptx_entries(ptx),
            ["vector_add", "other_k"]
        );
        let outs = vec![("ptx".to_string(), ptx.as_bytes().to_vec())];
        assert_eq!(
            entries::list(&outs).missing(&["vector_add".into(), "nope".into()]),
            ["nope"]
        );
        let bin = vec![(
            "k.cubin".to_string(),
            b"\x7fELF\0\0my_kernel\0.text".to_vec(),
        )];
        // Not a readable ELF file: its string table's names are searched, as before.
        assert!(
            entries::list(&bin)
                .missing(&["my_kernel".into()])
                .is_empty()
        );
        assert_eq!(
            entries::list(&bin).missing(&["my_kern".into()]),
            ["my_kern"]
        );
    }
}
