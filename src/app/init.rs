//! `repro init`: start in any git repository. Writes `repro.toml` with the nvcc and NVRTC
//! releases pinned (every wheel with its sha256 for x86_64 and aarch64, from the table built
//! into repro or through pip) and, for each `--recipe FILE.cu`, a recipe with the kernels
//! found in the file, the kind it needs and its include directories. Nothing is overwritten
//! without `--force`, and nothing is half-written: every file is checked and composed before
//! the first is written, each write is atomic, and a failed write removes what this run wrote.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::init::{self, KernelFile};
use crate::engines::toolchain::install::Family;
use crate::engines::toolchain::releases::{self, Resolved};
use crate::foundation::config::{self, NvrtcPin, PinEdit};
use crate::foundation::error::UserError;
use crate::foundation::exit;

/// Arguments of `repro init`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write a recipe for this kernel file (repeatable): recipes/STEM.toml with its
    /// kernels, kind (nvrtc when it needs no host headers, else nvcc) and include dirs.
    #[arg(long = "recipe", value_name = "FILE.cu", value_parser = crate::app::context::non_empty_path())]
    recipes: Vec<PathBuf>,
    /// The nvcc release to pin [default: the newest repro knows].
    #[arg(long, value_name = "MAJOR.MINOR", value_parser = crate::app::context::non_empty())]
    nvcc: Option<String>,
    /// The NVRTC release to pin [default: the newest repro knows].
    #[arg(long, value_name = "MAJOR.MINOR", value_parser = crate::app::context::non_empty())]
    nvrtc: Option<String>,
    /// Component libraries for the nvcc tree, besides those the kernels' includes name:
    /// cublas, cudnn, cutlass, nvtx, profiler, curand, nccl.
    #[arg(long = "with", value_name = "COMPONENTS", value_delimiter = ',', value_parser = crate::app::context::non_empty())]
    with: Vec<String>,
    /// The GPU target of the recipes written.
    #[arg(long, default_value = "sm_90", value_name = "SM", value_parser = crate::app::context::non_empty())]
    target: String,
    /// Replace existing recipes; and an existing repro.toml's pins when no --recipe is
    /// given or --nvcc, --nvrtc or --with say what to pin (otherwise repro.toml is kept as
    /// it is).
    #[arg(long)]
    force: bool,
}

/// One file to write.
struct Planned {
    path: PathBuf,
    text: String,
    existed: bool,
    what: String,
    /// A recipe (not repro.toml).
    recipe: bool,
}

/// Runs `repro init`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let Some(root) = crate::foundation::git::discover_root(&g.cwd) else {
        return Err(UserError::usage(format!(
            "{} is not inside a git repository; `repro init` starts repro in one",
            g.cwd.display()
        ))
        .hint("run `git init` (and commit your sources) first, or pass -C with a repository")
        .into());
    };
    if !valid_target(&a.target) {
        return Err(
            UserError::usage(format!("--target `{}` is not a GPU target", a.target))
                .hint("for example --target sm_90")
                .into(),
        );
    }
    let kernels = read_kernels(&root, &g.cwd, &a.recipes)?;
    let mut plan = match config_mode(&root, &a)? {
        ConfigMode::Write => plan_with_pins(g, &root, &a, &kernels)?,
        ConfigMode::Keep(config) => plan_recipes_only(&root, &a, &kernels, &config)?,
    };
    if kernels.iter().any(|k| k.torch.is_some()) {
        plan.notes.extend(torch_note(g));
    }
    plan.notes
        .extend(kernels.iter().flat_map(|k| k.warnings.iter().cloned()));
    write_all(&plan.files)?;
    report(g, &plan, &kernels)?;
    Ok(exit::OK)
}

/// What a torch-extension recipe needs of the Python environment that builds it: PyTorch,
/// and an nvcc of PyTorch's CUDA major (NVIDIA's nvcc wheels start at 13.0; PyTorch's
/// headers of a CUDA 12 build do not compile with nvcc 13).
fn torch_note(g: &Globals) -> Option<String> {
    let env = match super::env::python_env(g) {
        Ok(env) => env,
        Err(e) => {
            return Some(format!(
                "the torch-extension recipes build against the Python environment's PyTorch, and none was found ({e:#}): pass --python or set [python] interpreter in repro.toml"
            ));
        }
    };
    let interpreter = env.located.interpreter.display().to_string();
    let Some(torch) = env.torch else {
        return Some(format!(
            "{interpreter} has no PyTorch, which the torch-extension recipes build against: install it there, or pass --python"
        ));
    };
    let cuda = torch.cuda?;
    let major: u32 = cuda.split('.').next()?.parse().ok()?;
    (major < 13).then(|| {
        format!(
            "PyTorch {} in {interpreter} was built with CUDA {cuda}: its headers need nvcc {major}.x, which NVIDIA's wheels do not carry (they start at 13.0); build with the machine's CUDA {major} toolkit: `repro build NAME --toolchain system`",
            torch.version
        )
    })
}

/// The kernel files named by `--recipe`, each read once (a file named twice is one recipe);
/// two files that would write the same recipe are refused before anything is written.
fn read_kernels(root: &Path, cwd: &Path, files: &[PathBuf]) -> anyhow::Result<Vec<KernelFile>> {
    let mut kernels: Vec<KernelFile> = Vec::new();
    for f in files {
        let k = init::read_kernel_file(root, cwd, f)?;
        if kernels.iter().any(|o| o.source == k.source) {
            continue;
        }
        if let Some(o) = kernels
            .iter()
            .find(|o| recipe_name(&o.source) == recipe_name(&k.source))
        {
            return Err(UserError::usage(format!(
                "{} and {} would both be written as {}/{}.toml",
                o.source,
                k.source,
                crate::foundation::recipe::DIR,
                recipe_name(&k.source)
            ))
            .hint("write one recipe per run and rename it before writing the other (nothing was written)")
            .into());
        }
        kernels.push(k);
    }
    Ok(kernels)
}

/// What `repro init` does with repro.toml.
enum ConfigMode {
    /// Write it (there is none, or `--force` replaces its pins).
    Write,
    /// Leave it as it is (it exists and only recipes are asked for); its settings, checked.
    Keep(Box<config::Config>),
}

/// Whether to write repro.toml. An existing one is kept byte for byte when recipes are all
/// that is asked for; its pins are replaced only with `--force`, and only when no recipe is
/// asked for or a pin option (`--nvcc`, `--nvrtc`, `--with`) says what to pin.
fn config_mode(root: &Path, a: &Args) -> anyhow::Result<ConfigMode> {
    let path = root.join(config::FILE);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ConfigMode::Write),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("failed to read {}", path.display())));
        }
        Ok(_) => {}
    }
    let pin_options = a.nvcc.is_some() || a.nvrtc.is_some() || !a.with.is_empty();
    if a.recipes.is_empty() || pin_options {
        if a.force {
            return Ok(ConfigMode::Write);
        }
        let (what, hint) = if a.recipes.is_empty() {
            (
                format!("{} exists already", path.display()),
                "pass --force to replace its pins, or --recipe FILE.cu to write a recipe beside it (nothing was written)",
            )
        } else {
            (
                format!(
                    "{} exists already, and --nvcc, --nvrtc and --with change its pins",
                    path.display()
                ),
                "pass --force to replace its pins, or leave those options out to write only the recipes (nothing was written)",
            )
        };
        return Err(UserError::usage(what).hint(hint).into());
    }
    // Recipes beside an existing file: it is read and checked (a broken one is named with
    // its line and key), never written.
    Ok(ConfigMode::Keep(Box::new(config::load(root)?)))
}

/// What one run writes, and what it reports.
struct Plan {
    /// The files to write, repro.toml first when it is written.
    files: Vec<Planned>,
    /// The nvcc release and NVRTC release pinned (written now, or already in repro.toml).
    nvcc: Option<String>,
    nvrtc: Option<String>,
    /// repro.toml when it was left as it was.
    kept: Option<PathBuf>,
    /// What the user should know about the pins the recipes will use.
    notes: Vec<String>,
    /// A command to run before the recipes can build (the pin that adds their components),
    /// its words after `repro`.
    before: Option<String>,
}

/// repro.toml with both pins resolved (from the table or pip), then the recipes.
fn plan_with_pins(
    g: &Globals,
    root: &Path,
    a: &Args,
    kernels: &[KernelFile],
) -> anyhow::Result<Plan> {
    let mut components: Vec<String> = a.with.clone();
    components.extend(kernels.iter().flat_map(|k| k.components.iter().cloned()));
    components.sort();
    components.dedup();
    let nvcc_release = a
        .nvcc
        .clone()
        .unwrap_or_else(|| releases::newest(Family::Nvcc));
    let nvrtc_release = a
        .nvrtc
        .clone()
        .unwrap_or_else(|| releases::newest(Family::Nvrtc));
    let nvcc = releases::resolve_pin(Family::Nvcc, &nvcc_release, &components, g.offline)?;
    let nvrtc = releases::resolve_pin(Family::Nvrtc, &nvrtc_release, &[], g.offline)?;
    let mut files = vec![plan_config(root, &nvcc, &nvrtc, a.force)?];
    files.extend(plan_recipes(root, kernels, &a.target, a.force)?);
    Ok(Plan {
        files,
        nvcc: Some(nvcc.release),
        nvrtc: Some(nvrtc.release),
        kept: None,
        notes: Vec::new(),
        before: None,
    })
}

/// Only the recipes, beside an existing repro.toml that stays as it is: no pin is resolved,
/// so this works offline. A kernel whose includes name a component the pinned nvcc release
/// lacks gets a note naming the command that adds it.
fn plan_recipes_only(
    root: &Path,
    a: &Args,
    kernels: &[KernelFile],
    config: &config::Config,
) -> anyhow::Result<Plan> {
    let files = plan_recipes(root, kernels, &a.target, a.force)?;
    let t = &config.toolchain;
    let nvcc = t.nvcc_default.clone();
    let pinned = nvcc.as_ref().and_then(|r| t.nvcc.get(r));
    let mut notes = Vec::new();
    let carries = |c: &str| pinned.is_some_and(|p| p.wheels.iter().any(|w| w.package.contains(c)));
    // `--with` names the whole set a pin carries: the command keeps the components pinned
    // already and adds every one this run's kernels lack.
    let mut with: Vec<&str> = crate::engines::toolchain::releases::COMPONENTS
        .iter()
        .copied()
        .filter(|c| carries(c))
        .collect();
    let lacking: Vec<(&KernelFile, Vec<&str>)> = kernels
        .iter()
        .filter(|k| k.kind != "nvrtc")
        .map(|k| {
            let missing = k
                .components
                .iter()
                .map(String::as_str)
                .filter(|c| !carries(c))
                .collect::<Vec<_>>();
            (k, missing)
        })
        .filter(|(_, missing)| !missing.is_empty())
        .collect();
    for c in lacking.iter().flat_map(|(_, m)| m) {
        if !with.contains(c) {
            with.push(c);
        }
    }
    for (k, missing) in &lacking {
        let (Some(release), Some(_)) = (&nvcc, pinned) else {
            continue;
        };
        notes.push(format!(
            "{} includes {} headers, which the pinned nvcc {release} does not carry: `repro toolchain pin nvcc@{release} --with {} --force` adds them",
            k.source,
            missing.join(", "),
            with.join(",")
        ));
    }
    let before = nvcc
        .as_ref()
        .filter(|_| !lacking.is_empty() && pinned.is_some())
        .map(|r| format!("toolchain pin nvcc@{r} --with {} --force", with.join(",")));
    let nvrtc = t.nvrtc.as_ref().map(|p| {
        let mut parts = p.version.split('.');
        match (parts.next(), parts.next()) {
            (Some(a), Some(b)) => format!("{a}.{b}"),
            _ => p.version.clone(),
        }
    });
    Ok(Plan {
        files,
        nvcc,
        nvrtc,
        kept: Some(root.join(config::FILE)),
        before,
        notes,
    })
}

/// A recipe per kernel file; every existing one is named at once, and none is replaced
/// without `force`.
fn plan_recipes(
    root: &Path,
    kernels: &[KernelFile],
    target: &str,
    force: bool,
) -> anyhow::Result<Vec<Planned>> {
    let planned: Vec<Planned> = kernels
        .iter()
        .map(|k| plan_recipe(root, k, target))
        .collect::<anyhow::Result<_>>()?;
    let existing: Vec<String> = planned
        .iter()
        .filter(|p| p.existed)
        .map(|p| p.path.display().to_string())
        .collect();
    if !existing.is_empty() && !force {
        return Err(UserError::usage(format!(
            "{} {} already",
            existing.join(", "),
            if existing.len() == 1 {
                "exists"
            } else {
                "exist"
            }
        ))
        .hint(if existing.len() == 1 {
            "pass --force to replace it (nothing was written)"
        } else {
            "pass --force to replace them (nothing was written)"
        })
        .into());
    }
    Ok(planned)
}

/// A real GPU target as recipes take it (`sm_90`, `sm_90a`): what the recipes init writes
/// will hold, checked here so that the mistake is named as the option's.
fn valid_target(t: &str) -> bool {
    crate::foundation::recipe::parse_target(t) == Some(true)
}

/// repro.toml with both pins; an existing file only with `force` (its other settings kept).
fn plan_config(
    root: &Path,
    nvcc: &Resolved,
    nvrtc: &Resolved,
    force: bool,
) -> anyhow::Result<Planned> {
    let path = root.join(config::FILE);
    let old = config::read_text(root)?;
    if old.is_some() && !force {
        return Err(
            UserError::usage(format!("{} exists already", path.display()))
                .hint("pass --force to replace it (nothing was written)")
                .into(),
        );
    }
    let text = config::with_pin(
        old.as_deref().unwrap_or_default(),
        &PinEdit::Nvcc {
            release: nvcc.release.clone(),
            wheels: nvcc.wheels.clone(),
            make_default: true,
        },
        force,
    )?;
    let text = config::with_pin(
        &text,
        &PinEdit::Nvrtc(NvrtcPin {
            version: nvrtc.wheels[0].version.clone(),
            sha256: nvrtc.wheels[0].sha256.clone(),
        }),
        force,
    )?;
    let header = "# repro's project settings, written by `repro init`: the toolchains builds use,\n# each wheel pinned by sha256. They install themselves on first use.\n";
    let text = if old.is_none() {
        format!("{header}{text}")
    } else {
        text
    };
    Ok(Planned {
        recipe: false,
        existed: old.is_some(),
        what: format!(
            "nvcc {} ({}), NVRTC {}",
            nvcc.release,
            wheel_names(nvcc),
            nvrtc.release
        ),
        path,
        text,
    })
}

fn wheel_names(r: &Resolved) -> String {
    r.wheels
        .iter()
        .map(|w| format!("{} {}", w.package, w.version))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The recipe name of a kernel file: its stem, with anything but letters, digits (of any
/// script: `ядро.cu` is recipe `ядро`), `_` and `-` made `_`.
fn recipe_name(source: &str) -> String {
    Path::new(source)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn plan_recipe(root: &Path, k: &KernelFile, target: &str) -> anyhow::Result<Planned> {
    let name = recipe_name(&k.source);
    let path = root
        .join(crate::foundation::recipe::DIR)
        .join(format!("{name}.toml"));
    // A link or a directory in the way counts as existing: it is not replaced silently.
    let existed = std::fs::symlink_metadata(&path).is_ok();
    let text = init::recipe_text(k, target);
    // What is written must load as a recipe: a check against a bug here, not a user error.
    crate::foundation::recipe::parse_detached(
        &format!("{}/{name}.toml", crate::foundation::recipe::DIR),
        &text,
    )?;
    let mut what = format!("{} recipe for {}", k.kind, k.source);
    if !k.kernels.is_empty() {
        what.push_str(&format!(", kernels {}", k.kernels.join(", ")));
    }
    if !k.conditional.is_empty() {
        what.push_str(&format!(
            " (under a preprocessor condition, not listed: {})",
            k.conditional
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !k.templates.is_empty() {
        what.push_str(&format!(
            " (templates not listed: {})",
            k.templates.join(", ")
        ));
    }
    Ok(Planned {
        path,
        text,
        existed,
        what,
        recipe: true,
    })
}

/// Writes every file atomically; when one fails, the files this run created are removed
/// and those it replaced are put back.
fn write_all(plan: &[Planned]) -> anyhow::Result<()> {
    // A folder to write into that is something else (a file named `recipes`) is the
    // repository's state, said before anything is written.
    for p in plan {
        if let Some(dir) = p.path.parent().filter(|d| d.exists() && !d.is_dir()) {
            return Err(UserError::usage(format!(
                "cannot write {}: {} is not a directory",
                p.path.display(),
                dir.display()
            ))
            .hint("init writes recipes into the recipes/ directory: move or rename that file, then run init again")
            .into());
        }
    }
    let mut done: Vec<(&Planned, Option<Vec<u8>>)> = Vec::new();
    for p in plan {
        let before = if p.existed {
            // Bounded: a file to put back is repro.toml or a recipe.
            crate::foundation::fsutil::read_bounded(&p.path, 16 << 20).ok()
        } else {
            None
        };
        let r = p
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(anyhow::Error::new)
            .and_then(|()| {
                // A file that was not there when planned is written without clobbering:
                // one another process created since then is kept, and this run undone.
                crate::foundation::fsutil::write_output(&p.path, p.text.as_bytes(), p.existed)
                    .map_err(anyhow::Error::new)
            });
        if let Err(e) = r {
            for (q, old) in done.into_iter().rev() {
                match old {
                    Some(bytes) => {
                        let _ = crate::foundation::fsutil::write_output(&q.path, &bytes, true);
                    }
                    None => {
                        let _ = std::fs::remove_file(&q.path);
                    }
                }
            }
            // The file system's refusal (permissions, a full disk, a file created since the
            // plan): an I/O error, not a bug.
            return Err(UserError::with_code(
                crate::foundation::exit::IO,
                format!(
                    "failed to write {} (nothing of this run was kept): {}",
                    p.path.display(),
                    crate::foundation::error::chain_text(e.as_ref())
                ),
            )
            .hint("check that the repository is writable and has space, then run init again")
            .into());
        }
        done.push((p, before));
    }
    Ok(())
}

fn report(g: &Globals, plan: &Plan, kernels: &[KernelFile]) -> anyhow::Result<()> {
    // Started outside the repository (`-C DIR`), the commands say where to run.
    let root = g.project_root();
    let outside = std::env::current_dir()
        .ok()
        .and_then(|d| d.canonicalize().ok())
        .zip(root.canonicalize().ok())
        .is_some_and(|(here, r)| !here.starts_with(r));
    let quote = |p: &Path| crate::foundation::process::shell_quote(&p.to_string_lossy());
    let repro = if outside {
        format!("repro -C {}", quote(&root))
    } else {
        "repro".to_string()
    };
    // Recipes by name, which works from anywhere in the repository.
    let names: Vec<String> = plan
        .files
        .iter()
        .filter(|p| p.recipe)
        .filter_map(|p| Some(p.path.file_stem()?.to_string_lossy().into_owned()))
        .collect();
    // A torch-extension builds against the environment `--python` chose here too.
    let repro = match &g.python {
        Some(py) if kernels.iter().any(|k| k.torch.is_some()) => {
            format!("{repro} --python {}", quote(py))
        }
        _ => repro,
    };
    let build = match names.len() {
        0 => format!(
            "{repro} init --recipe FILE.cu (a recipe per kernel file), then {repro} build RECIPE"
        ),
        1..=4 => format!("{repro} build {}", names.join(" ")),
        _ => format!("{repro} build --all"),
    };
    let next = match &plan.before {
        Some(cmd) if !names.is_empty() => format!("{repro} {cmd}, then {build}"),
        _ => build,
    };
    if g.json {
        emit_json(&json!({
            "schema": 1,
            "written": plan.files.iter().map(|p| json!({
                "path": g.shown(&p.path), "replaced": p.existed, "what": p.what,
            })).collect::<Vec<_>>(),
            "kept": plan.kept.iter().map(|p| g.shown(p)).collect::<Vec<_>>(),
            "nvcc": plan.nvcc, "nvrtc": plan.nvrtc,
            "kernels": kernels.iter().map(|k| json!({
                "source": k.source, "kind": k.kind, "entries": k.kernels,
                "torch": k.torch.as_ref().map(|t| json!({
                    "module": t.module, "sources": t.sources, "functions": t.functions,
                    "bindings": t.bindings, "operators": t.operators, "headers": t.headers,
                })),
                "templates": k.templates, "include-dirs": k.include_dirs, "components": k.components,
                "conditional": k.conditional.iter().map(|(n, c)| serde_json::json!({"name": n, "condition": c})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "notes": plan.notes,
            "next": next,
        }))?;
        return Ok(());
    }
    if g.quiet {
        return Ok(());
    }
    let mut out = String::new();
    if let Some(kept) = &plan.kept {
        out.push_str(&format!(
            "kept {}: its pins are unchanged (nvcc {}, NVRTC {})\n",
            g.shown(kept),
            plan.nvcc.as_deref().unwrap_or("not pinned"),
            plan.nvrtc.as_deref().unwrap_or("not pinned"),
        ));
    }
    for p in &plan.files {
        out.push_str(&format!(
            "{} {}: {}\n",
            if p.existed { "replaced" } else { "wrote" },
            g.shown(&p.path),
            p.what
        ));
    }
    for n in &plan.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    if plan.kept.is_none() {
        out.push_str(
            "the toolchains install themselves on first use (every wheel checked by sha256)\n",
        );
    }
    out.push_str(&format!("next: {next}\n"));
    emit(&out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::recipe_name;

    /// A file's stem keeps its letters and digits in any script: files named in another
    /// language get recipes of their own names, not one `_` each.
    #[test]
    fn recipe_names_keep_letters_of_any_script() {
        assert_eq!(recipe_name("k/ядро.cu"), "ядро");
        assert_eq!(recipe_name("k/核函数.cu"), "核函数");
        assert_eq!(recipe_name("k/my kernel+v2.cu"), "my_kernel_v2");
        assert_ne!(recipe_name("k/ядро.cu"), recipe_name("k/核.cu"));
    }
}
