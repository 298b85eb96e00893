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
    #[arg(long = "recipe", value_name = "FILE.cu")]
    recipes: Vec<PathBuf>,
    /// The nvcc release to pin [default: the newest repro knows].
    #[arg(long, value_name = "MAJOR.MINOR")]
    nvcc: Option<String>,
    /// The NVRTC release to pin [default: the newest repro knows].
    #[arg(long, value_name = "MAJOR.MINOR")]
    nvrtc: Option<String>,
    /// Component libraries for the nvcc tree, besides those the kernels' includes name:
    /// cublas, cudnn, cutlass.
    #[arg(long = "with", value_name = "COMPONENTS", value_delimiter = ',')]
    with: Vec<String>,
    /// The GPU target of the recipes written.
    #[arg(long, default_value = "sm_90", value_name = "SM")]
    target: String,
    /// Replace an existing repro.toml's pins and existing recipes.
    #[arg(long)]
    force: bool,
}

/// One file to write.
struct Planned {
    path: PathBuf,
    text: String,
    existed: bool,
    what: String,
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
    let kernels: Vec<KernelFile> = a
        .recipes
        .iter()
        .map(|f| init::read_kernel_file(&root, &g.cwd, f))
        .collect::<Result<_, _>>()?;
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
    let mut plan = vec![plan_config(&root, &nvcc, &nvrtc, a.force)?];
    for k in &kernels {
        plan.push(plan_recipe(&root, k, &a.target, a.force)?);
    }
    write_all(&plan)?;
    report(g, &plan, &kernels, &nvcc, &nvrtc)?;
    Ok(exit::OK)
}

fn valid_target(t: &str) -> bool {
    t.strip_prefix("sm_")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// repro.toml with both pins; an existing file only with `force` (its other settings kept).
fn plan_config(
    root: &Path,
    nvcc: &Resolved,
    nvrtc: &Resolved,
    force: bool,
) -> anyhow::Result<Planned> {
    let path = root.join(config::FILE);
    let old = match std::fs::read_to_string(&path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("failed to read {}", path.display())));
        }
    };
    if old.is_some() && !force {
        return Err(exists(&path));
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

fn exists(path: &Path) -> anyhow::Error {
    UserError::usage(format!("{} exists already", path.display()))
        .hint("pass --force to replace it (nothing was written)")
        .into()
}

fn plan_recipe(root: &Path, k: &KernelFile, target: &str, force: bool) -> anyhow::Result<Planned> {
    let stem = Path::new(&k.source)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = root
        .join(crate::foundation::recipe::DIR)
        .join(format!("{name}.toml"));
    let existed = path.exists();
    if existed && !force {
        return Err(exists(&path));
    }
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
    })
}

/// Writes every file atomically; when one fails, the files this run created are removed
/// and those it replaced are put back.
fn write_all(plan: &[Planned]) -> anyhow::Result<()> {
    let mut done: Vec<(&Planned, Option<Vec<u8>>)> = Vec::new();
    for p in plan {
        let before = if p.existed {
            std::fs::read(&p.path).ok()
        } else {
            None
        };
        let r = p
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(anyhow::Error::new)
            .and_then(|()| {
                crate::foundation::fsutil::write_atomic(&p.path, p.text.as_bytes(), true)
                    .map_err(anyhow::Error::new)
            });
        if let Err(e) = r {
            for (q, old) in done.into_iter().rev() {
                match old {
                    Some(bytes) => {
                        let _ = crate::foundation::fsutil::write_atomic(&q.path, &bytes, true);
                    }
                    None => {
                        let _ = std::fs::remove_file(&q.path);
                    }
                }
            }
            return Err(e.context(format!(
                "failed to write {} (nothing of this run was kept)",
                p.path.display()
            )));
        }
        done.push((p, before));
    }
    Ok(())
}

fn report(
    g: &Globals,
    plan: &[Planned],
    kernels: &[KernelFile],
    nvcc: &Resolved,
    nvrtc: &Resolved,
) -> anyhow::Result<()> {
    let next = match plan.get(1) {
        Some(p) => format!("repro build {}", g.shown(&p.path)),
        None => {
            "repro init --recipe FILE.cu (a recipe per kernel file), then repro build RECIPE".into()
        }
    };
    if g.json {
        emit_json(&json!({
            "schema": 1,
            "written": plan.iter().map(|p| json!({
                "path": g.shown(&p.path), "replaced": p.existed, "what": p.what,
            })).collect::<Vec<_>>(),
            "nvcc": nvcc.release, "nvrtc": nvrtc.release,
            "kernels": kernels.iter().map(|k| json!({
                "source": k.source, "kind": k.kind, "entries": k.kernels,
                "templates": k.templates, "include-dirs": k.include_dirs, "components": k.components,
            })).collect::<Vec<_>>(),
            "next": next,
        }))?;
        return Ok(());
    }
    if g.quiet {
        return Ok(());
    }
    let mut out = String::new();
    for p in plan {
        out.push_str(&format!(
            "{} {}: {}\n",
            if p.existed { "replaced" } else { "wrote" },
            g.shown(&p.path),
            p.what
        ));
    }
    out.push_str(&format!(
        "the toolchains install themselves on first use (every wheel checked by sha256)\nnext: {next}\n"
    ));
    emit(&out)?;
    Ok(())
}
