//! `repro toolchain install | list | which`: provision pinned toolchains (NVRTC, nvcc) from
//! NVIDIA's wheels without root or a CUDA install, and say which compilers builds would use.

use std::path::PathBuf;

use serde_json::json;

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::toolchain;
use crate::engines::toolchain::install::{self, Family, InstallError, Source, Spec};
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
    /// List the toolchains repro has installed, with size and origin.
    List,
    /// Say which NVRTC and nvcc builds would use, and why.
    Which,
}

#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// The toolchain: nvcc@13.0 (a [toolchain.nvcc."13.0"] release of repro.toml) or
    /// nvrtc@13.0.88.
    #[arg(value_name = "SPEC", conflicts_with = "nvrtc")]
    spec: Option<String>,
    /// The nvidia-cuda-nvrtc version (the same as nvrtc@VERSION).
    #[arg(long, value_name = "VERSION")]
    nvrtc: Option<String>,
    /// Install NVRTC from this wheel file instead of fetching one.
    #[arg(long, value_name = "FILE", conflicts_with = "wheels")]
    wheel: Option<PathBuf>,
    /// Fetch the wheels from this directory only (pip --no-index --find-links DIR); also
    /// REPRO_WHEELHOUSE.
    #[arg(long, value_name = "DIR")]
    wheels: Option<PathBuf>,
    /// The NVRTC wheel's expected sha256 [default: the pin in repro.toml for this architecture].
    #[arg(long, value_name = "HEX")]
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
    }
}

fn install_cmd(
    g: &Globals,
    cfg: &crate::foundation::config::Config,
    a: InstallArgs,
) -> anyhow::Result<u8> {
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
    let plan = install::plan(cfg, &spec, a.sha256.as_deref(), false)?;
    if a.wheel.is_some() && plan.family == Family::Nvcc {
        return Err(UserError::usage("--wheel installs one NVRTC wheel")
            .hint("an nvcc release is several wheels: pass --wheels DIR")
            .into());
    }
    let source = Source::new(
        a.wheels.map(|d| g.cwd.join(d)),
        a.wheel.map(|w| g.cwd.join(w)),
    );
    let mut progress = InstallProgress::new(g.quiet || g.json);
    let done = install::install(&plan, &source, a.force, &mut progress);
    progress.finish();
    let done = done?;
    let t = &done.installed;
    let label = match plan.family {
        Family::Nvrtc => format!("NVRTC {}", plan.release),
        Family::Nvcc => format!("nvcc {}", plan.release),
    };
    if g.json {
        emit_json(&json!({
            "schema": 1, "toolchain": spec.to_string(), "path": t.dir.display().to_string(),
            "installed": done.fresh, "already-installed": !done.fresh, "replaced": done.replaced,
            "reports": t.stamp.reports, "wheels": t.stamp.wheels, "bytes": t.stamp.bytes,
            "compiler": t.compiler().display().to_string(),
        }))?;
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
                    "wheels": s.wheels, "complete": true,
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

fn which(g: &Globals, cfg: &crate::foundation::config::Config) -> anyhow::Result<u8> {
    let nvrtc = toolchain::nvrtc(&toolchain::Pins::of(&cfg.toolchain));
    // The project's nvcc pin, when there is one and it is installed, is what nvcc builds use.
    let pinned_nvcc = cfg.toolchain.nvcc_default.as_ref().map(|r| {
        let spec = Spec::Release {
            family: Family::Nvcc,
            release: r.clone(),
        };
        (spec.clone(), install::find(&spec))
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

/// `repro toolchain install`'s progress: status lines on stderr, and for downloading,
/// verifying and unpacking a bar of bytes with an ETA (a byte count and rate while pip
/// downloads, whose total is not known ahead). Bars show on a terminal only; `-q` and
/// `--json` show nothing.
struct InstallProgress {
    quiet: bool,
    bar: Option<(&'static str, indicatif::ProgressBar)>,
}

impl InstallProgress {
    fn new(quiet: bool) -> Self {
        InstallProgress { quiet, bar: None }
    }

    fn finish(&mut self) {
        if let Some((_, b)) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

impl install::Progress for InstallProgress {
    fn message(&mut self, m: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some((_, b)) if !b.is_hidden() => b.println(crate::foundation::output::sanitize(m)),
            _ => say!("{m}"),
        }
    }

    fn bytes(&mut self, phase: &'static str, done: u64, total: Option<u64>) {
        if self.bar.as_ref().is_none_or(|(p, _)| *p != phase) {
            self.finish();
            let bar = match total {
                Some(t) => crate::foundation::output::progress_bytes(self.quiet, t, phase),
                None if self.quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) => {
                    indicatif::ProgressBar::hidden()
                }
                None => {
                    let b = indicatif::ProgressBar::new_spinner();
                    b.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{spinner} downloading {bytes} ({bytes_per_sec}, {elapsed})",
                        )
                        .expect("a valid template"),
                    );
                    b.enable_steady_tick(std::time::Duration::from_millis(120));
                    b
                }
            };
            self.bar = Some((phase, bar));
        }
        if let Some((_, b)) = &self.bar {
            if let Some(t) = total
                && b.length() != Some(t)
            {
                b.set_length(t);
            }
            b.set_position(done);
        }
    }
}
