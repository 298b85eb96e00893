//! `repro toolchain install | list | which`: provision pinned toolchains (NVRTC, nvcc) from
//! NVIDIA's wheels without root or a CUDA install, and say which compilers builds would use.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::json;

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::toolchain;
use crate::engines::toolchain::install::{self, Family, InstallError, Source, Spec};
use crate::engines::toolchain::progress::InstallProgress;
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::keys;

/// Arguments of `repro toolchain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ToolchainCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ToolchainCommand {
    /// Fetch (through pip), verify by sha256 and install a pinned toolchain: nvcc@RELEASE or
    /// nvrtc@VERSION [default: the NVRTC pinned in repro.toml].
    Install(InstallArgs),
    /// List the toolchains repro has installed: size, origin, wheels, and the projects
    /// whose pins each tree serves.
    List,
    /// Remove installed toolchains that no project's pins use any more.
    Gc(GcArgs),
    /// Pin a release in repro.toml, every wheel with its sha256, from the table of releases
    /// built into repro or through pip: nvcc@13.0 [--with cublas,curand,nvtx] or
    /// nvrtc@12.8.
    Pin(PinArgs),
    /// Say which NVRTC and nvcc builds would use, and why.
    Which,
}

#[derive(Debug, clap::Args)]
struct PinArgs {
    /// The release: nvcc@MAJOR.MINOR or nvrtc@MAJOR.MINOR (or nvrtc@FULL.VERSION).
    #[arg(value_name = "SPEC", required_unless_present = "list", value_parser = crate::app::context::non_empty())]
    spec: Option<String>,
    /// Component libraries installed into the same tree, part of its identity: cublas,
    /// cudnn, cutlass, nvtx, profiler (cuda_profiler_api.h), curand, nccl.
    #[arg(long = "with", value_name = "COMPONENTS", value_delimiter = ',', value_parser = crate::app::context::non_empty())]
    with: Vec<String>,
    /// Make this nvcc release the one nvcc recipes use (`nvcc-default`); the first nvcc
    /// pinned becomes the default anyway.
    #[arg(long)]
    default: bool,
    /// Replace a pin of the same release that names other wheels.
    #[arg(long)]
    force: bool,
    /// List the releases built into repro and exit.
    #[arg(long, conflicts_with = "spec")]
    list: bool,
}

#[derive(Debug, clap::Args)]
struct GcArgs {
    /// Only say what would be removed.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// The toolchain: nvcc@13.0 (a [toolchain.nvcc."13.0"] release of repro.toml) or
    /// nvrtc@13.0.88.
    #[arg(value_name = "SPEC", conflicts_with = "nvrtc", value_parser = crate::app::context::non_empty())]
    spec: Option<String>,
    /// The nvidia-cuda-nvrtc version (the same as nvrtc@VERSION).
    #[arg(long, value_name = "VERSION", value_parser = crate::app::context::non_empty())]
    nvrtc: Option<String>,
    /// Install NVRTC from this wheel file instead of fetching one.
    #[arg(long, value_name = "FILE", conflicts_with = "wheels", value_parser = crate::app::context::non_empty_path())]
    wheel: Option<PathBuf>,
    /// Fetch the wheels from this directory only (pip --no-index --find-links DIR); also
    /// REPRO_WHEELHOUSE.
    #[arg(long, value_name = "DIR", value_parser = crate::app::context::non_empty_path())]
    wheels: Option<PathBuf>,
    /// The NVRTC wheel's expected sha256 [default: the pin in repro.toml for this architecture].
    #[arg(long, value_name = "HEX", value_parser = crate::app::context::non_empty())]
    sha256: Option<String>,
    /// Reinstall even if it is installed.
    #[arg(long)]
    force: bool,
}

/// Runs `repro toolchain ...`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let cfg = g.config()?;
    match a.command {
        ToolchainCommand::Install(i) => install_cmd(g, &cfg, i),
        ToolchainCommand::List => list(g, &toolchain::Pins::of(&cfg.toolchain)),
        ToolchainCommand::Which => which(g, &cfg),
        ToolchainCommand::Gc(a) => gc(g, &a),
        ToolchainCommand::Pin(a) => pin(g, &a),
    }
}

fn install_cmd(
    g: &Globals,
    cfg: &crate::foundation::config::Config,
    a: InstallArgs,
) -> anyhow::Result<u8> {
    let (spec, plan, done) = install_toolchain(g, cfg, a)?;
    let t = &done.installed;
    let label = match plan.family {
        Family::Nvrtc => format!("NVRTC {}", plan.release),
        Family::Nvcc => format!("nvcc {}", plan.release),
    };
    if g.json {
        emit_json(&install_json(&spec, &done))?;
    } else if !g.quiet {
        if done.fresh {
            let n = t.stamp.wheels.len();
            emit(&format!(
                "installed {label} (reports {}) at {}; {n} wheel{} verified by sha256 ({})\n",
                t.stamp.reports,
                t.dir.display(),
                if n == 1 { "" } else { "s" },
                t.stamp
                    .wheels
                    .iter()
                    .map(|w| keys::short(&w.sha256))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))?;
        } else {
            emit(&format!(
                "{label} is already installed at {}\n",
                t.dir.display()
            ))?;
        }
    }
    Ok(exit::OK)
}

/// `repro toolchain install ...` in this process, without printing: its `--json` report
/// (`repro demo`'s toolchain step).
pub(crate) fn install_report(g: &Globals, a: Args) -> anyhow::Result<serde_json::Value> {
    let ToolchainCommand::Install(i) = a.command else {
        anyhow::bail!("not a `repro toolchain install` command line");
    };
    let (spec, _, done) = install_toolchain(g, &g.config()?, i)?;
    Ok(install_json(&spec, &done))
}

/// What `repro toolchain install --json` prints.
fn install_json(spec: &Spec, done: &install::Done) -> serde_json::Value {
    let t = &done.installed;
    json!({
        "schema": 1, "toolchain": spec.to_string(), "path": t.dir.display().to_string(),
        "installed": done.fresh, "already-installed": !done.fresh, "replaced": done.replaced,
        "reports": t.stamp.reports, "wheels": t.stamp.wheels, "bytes": t.stamp.bytes,
        "compiler": t.compiler().display().to_string(),
    })
}

/// Installs what `a` names (a spec, an NVRTC version, or the pinned NVRTC), with the
/// progress bar unless `--json` or `-q`, and notes the project the tree serves.
fn install_toolchain(
    g: &Globals,
    cfg: &crate::foundation::config::Config,
    a: InstallArgs,
) -> anyhow::Result<(Spec, install::Plan, install::Done)> {
    let spec = match (&a.spec, &a.nvrtc, &cfg.toolchain.nvrtc) {
        (Some(s), _, _) => Spec::parse(s).map_err(|e| InstallError::BadSpec(e.to_string()))?,
        (None, Some(v), _) => {
            Spec::parse(&format!("nvrtc@{v}")).map_err(|e| InstallError::BadSpec(e.to_string()))?
        }
        (None, None, Some(p)) => Spec::Release {
            family: Family::Nvrtc,
            release: p.version.clone(),
        },
        (None, None, None) => {
            return Err(UserError::usage("no toolchain given and no NVRTC pinned")
                .hint("name one (`repro toolchain install nvcc@13.0`), or pin NVRTC in repro.toml under [toolchain.nvrtc]")
                .into());
        }
    };
    let plan = install::plan(&cfg.toolchain, &spec, a.sha256.as_deref(), false)?;
    if a.wheel.is_some() && plan.family == Family::Nvcc {
        return Err(UserError::usage("--wheel installs one NVRTC wheel")
            .hint("an nvcc release is several wheels: pass --wheels DIR")
            .into());
    }
    let source = Source::new(
        a.wheels.map(|d| g.cwd.join(d)),
        a.wheel.map(|w| g.cwd.join(w)),
    );
    // Without local wheels an install asks pip's index: the network --offline forbids.
    if crate::engines::toolchain::resolve::offline(g.offline)
        && source.wheelhouse.is_none()
        && source.wheel_file.is_none()
    {
        return Err(UserError::with_code(exit::ENVIRONMENT, format!(
            "{spec} would be fetched from pip's package index, and --offline (or REPRO_OFFLINE) forbids the network"
        ))
        .hint("install from local files with --wheels DIR (or REPRO_WHEELHOUSE) or --wheel FILE, or drop --offline")
        .into());
    }
    let mut progress = InstallProgress::new(g.quiet || g.json);
    let done = install::install(&plan, &source, a.force, &mut progress);
    progress.finish();
    let done = done?;
    let t = &done.installed;
    if let Some(name) = t.dir.file_name() {
        install::note_project(&name.to_string_lossy(), &g.project_root());
    }
    Ok((spec, plan, done))
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn list(g: &Globals, pins: &toolchain::Pins) -> anyhow::Result<u8> {
    let used = toolchain::find_nvrtc(pins).ok();
    let entries = install::list();
    if g.json {
        let rows: Vec<_> = entries
            .iter()
            .map(|e| match &e.stamp {
                Ok(s) => json!({
                    "name": e.dir.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "family": s.family, "release": s.release, "reports": s.reports,
                    "path": e.dir.display().to_string(), "bytes": s.bytes, "origin": s.origin,
                    "wheels": s.wheels, "complete": true, "pins-digest": s.pins_digest,
                    "serves": install::serves(&e.dir.file_name().unwrap_or_default().to_string_lossy())
                        .iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                    "used-by-builds": used.as_ref().is_some_and(|u| u.path.starts_with(&e.dir)),
                }),
                Err(why) => json!({
                    "name": e.dir.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "path": e.dir.display().to_string(), "complete": false, "problem": why.to_string(),
                }),
            })
            .collect();
        emit_json(&json!({"schema": 2, "toolchains": rows}))?;
        return Ok(exit::OK);
    }
    if entries.is_empty() {
        emit("no toolchains installed by repro (`repro toolchain install nvcc@13.0` adds one)\n")?;
        return Ok(exit::OK);
    }
    let mut out = String::new();
    for e in &entries {
        let name = e
            .dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        match &e.stamp {
            Ok(s) => {
                let in_use = used.as_ref().is_some_and(|u| u.path.starts_with(&e.dir));
                out.push_str(&format!(
                    "{name}  {}  {}  from {}{}\n  {}\n",
                    s.release,
                    mib(s.bytes),
                    s.origin,
                    if in_use {
                        "  (used by NVRTC builds)"
                    } else {
                        ""
                    },
                    e.dir.display()
                ));
                let serves = install::serves(&name);
                out.push_str(&format!(
                    "  serves: {}\n",
                    if serves.is_empty() {
                        "no project's pins (`repro toolchain gc` removes it)".to_string()
                    } else {
                        serves
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ));
                let mut t = crate::foundation::output::Table::new();
                for w in &s.wheels {
                    t.row([
                        w.file.clone(),
                        format!("sha256 {}", w.sha256),
                        if w.pinned {
                            "pinned".into()
                        } else {
                            "unpinned (recorded)".to_string()
                        },
                    ]);
                }
                out.push_str(&t.render(4));
            }
            Err(why) => out.push_str(&format!(
                "{name}  INCOMPLETE: {why}; builds do not use it (reinstall it)\n  {}\n",
                e.dir.display()
            )),
        }
    }
    emit(&out)?;
    Ok(exit::OK)
}

fn pin(g: &Globals, a: &PinArgs) -> anyhow::Result<u8> {
    use crate::engines::toolchain::releases;
    if a.list {
        let rows = [Family::Nvcc, Family::Nvrtc].map(|f| (f, releases::known(f)));
        if g.json {
            emit_json(&json!({
                "schema": 1,
                "nvcc": rows[0].1, "nvrtc": rows[1].1, "components": releases::COMPONENTS,
            }))?;
        } else {
            let mut out = String::new();
            for (f, v) in &rows {
                out.push_str(&format!("{:<6} {}\n", f.name(), v.join(", ")));
            }
            out.push_str(&format!("with   {}\n", releases::COMPONENTS.join(", ")));
            emit(&out)?;
        }
        return Ok(exit::OK);
    }
    let text = a.spec.as_deref().unwrap_or_default();
    let Spec::Release { family, release } =
        Spec::parse(text).map_err(|e| InstallError::BadSpec(e.to_string()))?
    else {
        return Err(UserError::usage("`system` is not pinned")
            .hint("name a release: `repro toolchain pin nvcc@13.0`")
            .into());
    };
    let resolved = releases::resolve_pin(family, &release, &a.with, g.offline)?;
    let root = g.project_root();
    let written = write_pin(&root, &resolved, a.default, a.force)?;
    report_pin(g, &resolved, &written)?;
    Ok(exit::OK)
}

/// What a pin did to repro.toml.
pub struct Written {
    /// The file.
    pub path: std::path::PathBuf,
    /// Whether it changed.
    pub changed: bool,
}

/// Writes `resolved` into the project's repro.toml, atomically (a failure leaves the old
/// file as it was).
pub fn write_pin(
    root: &std::path::Path,
    resolved: &crate::engines::toolchain::releases::Resolved,
    make_default: bool,
    force: bool,
) -> anyhow::Result<Written> {
    use crate::foundation::config::{self, NvrtcPin, PinEdit};
    let path = root.join(config::FILE);
    let old = config::read_text(root)?.unwrap_or_default();
    let edit = match resolved.family {
        Family::Nvcc => PinEdit::Nvcc {
            release: resolved.release.clone(),
            wheels: resolved.wheels.clone(),
            make_default,
        },
        Family::Nvrtc => PinEdit::Nvrtc(NvrtcPin {
            version: resolved.wheels[0].version.clone(),
            sha256: resolved.wheels[0].sha256.clone(),
        }),
    };
    let new = config::with_pin(&old, &edit, force)?;
    let changed = new != old;
    if changed {
        crate::foundation::fsutil::write_output(&path, new.as_bytes(), true)
            .with_context(|| format!("failed to write {}", path.display()))?;
    }
    Ok(Written { path, changed })
}

fn report_pin(
    g: &Globals,
    r: &crate::engines::toolchain::releases::Resolved,
    w: &Written,
) -> anyhow::Result<()> {
    use crate::engines::toolchain::releases::Origin;
    let spec = Spec::Release {
        family: r.family,
        release: r.release.clone(),
    };
    let origin = match r.origin {
        Origin::Table => "the table built into repro",
        Origin::Pip => "pip's index",
    };
    if g.json {
        emit_json(&json!({
            "schema": 1, "toolchain": spec.to_string(), "file": w.path.display().to_string(),
            "changed": w.changed, "origin": origin,
            "wheels": r.wheels.iter().map(|p| json!({"package": p.package, "version": p.version, "sha256": p.sha256})).collect::<Vec<_>>(),
        }))?;
        return Ok(());
    }
    if g.quiet {
        return Ok(());
    }
    let mut out = format!(
        "{} {spec} in {} ({} wheel{}, sha256 for {} from {origin})\n",
        if w.changed {
            "pinned"
        } else {
            "already pinned:"
        },
        g.shown(&w.path),
        r.wheels.len(),
        if r.wheels.len() == 1 { "" } else { "s" },
        r.wheels
            .first()
            .map(|p| p.sha256.keys().cloned().collect::<Vec<_>>().join(" and "))
            .unwrap_or_default(),
    );
    for p in &r.wheels {
        out.push_str(&format!("  {} {}\n", p.package, p.version));
    }
    out.push_str(&format!(
        "next: `repro build RECIPE` installs it on first use (or `repro toolchain install {spec}` now)\n"
    ));
    emit(&out)?;
    Ok(())
}

fn gc(g: &Globals, a: &GcArgs) -> anyhow::Result<u8> {
    let gone = install::gc(a.dry_run)?;
    let bytes: u64 = gone.iter().map(|c| c.bytes).sum();
    if g.json {
        emit_json(&json!({
            "schema": 1, "dry-run": a.dry_run, "removed": gone, "bytes": bytes,
        }))?;
        return Ok(exit::OK);
    }
    if g.quiet {
        return Ok(exit::OK);
    }
    let verb = if a.dry_run { "would remove" } else { "removed" };
    let mut out = String::new();
    for c in &gone {
        out.push_str(&format!(
            "{verb} {} ({}): {}\n",
            c.dir.display(),
            mib(c.bytes),
            c.reason
        ));
    }
    out.push_str(&format!(
        "{verb} {} toolchain tree{}, {}\n",
        gone.len(),
        if gone.len() == 1 { "" } else { "s" },
        mib(bytes)
    ));
    emit(&out)?;
    Ok(exit::OK)
}

fn which(g: &Globals, cfg: &crate::foundation::config::Config) -> anyhow::Result<u8> {
    let nvrtc = toolchain::nvrtc(&toolchain::Pins::of(&cfg.toolchain));
    // The project's nvcc pin, when there is one and it is installed, is what nvcc builds use.
    let pinned_nvcc = cfg.toolchain.nvcc_default.as_ref().map(|r| {
        let spec = Spec::Release {
            family: Family::Nvcc,
            release: r.clone(),
        };
        let pins = toolchain::Pins::of(&cfg.toolchain);
        let found = toolchain::resolve::plan_for(&pins, &spec).and_then(|p| install::find(&p));
        (spec.clone(), found)
    });
    let nvcc = match &pinned_nvcc {
        Some((_, Ok(t))) => Some(t.compiler()),
        _ => toolchain::find_nvcc(),
    };
    let nvcc_version = match &pinned_nvcc {
        Some((_, Ok(t))) => Some(t.stamp.reports.clone()),
        _ => nvcc
            .as_ref()
            .and_then(|_| toolchain::nvcc_identity().ok())
            .map(|(_, id)| id["version"].as_str().unwrap_or_default().to_string()),
    };
    let nvcc_source = match &pinned_nvcc {
        Some((spec, Ok(_))) => format!("{spec}, pinned in repro.toml, installed by repro"),
        Some((spec, Err(_))) => format!(
            "{spec} is pinned but not installed: nvcc builds fail until `{}`",
            InstallError::install_command(&spec.to_string())
        ),
        None => "the machine's own (no nvcc pinned in repro.toml)".into(),
    };
    if g.json {
        emit_json(&json!({
            "schema": 1,
            "nvrtc": match &nvrtc {
                Ok(l) => json!({"path": l.found.path.display().to_string(), "version": l.version, "source": l.found.source}),
                Err(e) => json!({"unavailable": e.to_string()}),
            },
            "nvcc": match &nvcc {
                Some(p) => json!({"path": p.display().to_string(), "version": nvcc_version, "source": nvcc_source}),
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
        // Builds use the pinned NVRTC (the resolver's choice), installing it on first use.
        if let Some(p) = &cfg.toolchain.nvrtc
            && std::env::var_os("REPRO_NVRTC").is_none_or(|v| v.is_empty())
            && toolchain::Pins::of(&cfg.toolchain)
                .nvrtc_dir()
                .is_some_and(|d| !d.join(install::STAMP).is_file())
        {
            emit(&format!(
                "       note: nvrtc@{} is pinned in repro.toml but not installed; NVRTC builds install it on first use\n",
                p.version
            ))?;
        }
        match &nvcc {
            Some(p) => emit(&format!(
                "nvcc   {}  {}  ({nvcc_source})\n",
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
