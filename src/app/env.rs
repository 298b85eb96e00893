//! `repro env capture | check | lock`: fingerprint the machine and compare it with a lockfile.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use serde_json::json;

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::check::{self, Policy, Report, Status};
use crate::engines::fingerprint::{self, Demand, Field, Fingerprint};
use crate::engines::lockfile::{self, Lock, LockfileError};
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::fsutil;
use crate::foundation::output::{Style, Table};

/// Arguments of `repro env`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: EnvCommand,
}

#[derive(Debug, clap::Subcommand)]
enum EnvCommand {
    /// Print this machine's fingerprint (GPU, driver, toolchain, host, repository, Nix).
    Capture(CaptureArgs),
    /// Compare this machine with a lockfile; exit 1 if a must-match field differs.
    Check(CheckArgs),
    /// Write a lockfile from this machine's fingerprint.
    Lock(LockArgs),
    /// Import an extension module in the Python environment and, if it fails, explain why.
    WhyImport(WhyImportArgs),
}

#[derive(Debug, clap::Args)]
struct WhyImportArgs {
    /// The extension: a module file (`ext.cpython-311-x86_64-linux-gnu.so`), a recipe whose
    /// last build made one, or a module installed in the environment.
    #[arg(value_parser = crate::app::context::non_empty())]
    target: String,
}

#[derive(Debug, clap::Args)]
struct CaptureArgs {
    /// Also write the fingerprint as JSON to FILE.
    #[arg(short, long, value_name = "FILE", value_parser = crate::app::context::non_empty_path())]
    output: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The lockfile [default: the only one in lockfiles/, or the one matching this GPU].
    #[arg(long, value_name = "FILE", value_parser = crate::app::context::non_empty_path())]
    lock: Option<PathBuf>,
    /// Fail on warnings too.
    #[arg(long)]
    strict: bool,
    /// Check a saved fingerprint (from `env capture -o`) instead of this machine.
    #[arg(long, value_name = "FILE", conflicts_with = "fresh", value_parser = crate::app::context::non_empty_path())]
    fingerprint: Option<PathBuf>,
    /// Query the GPUs through cuInit instead of the per-boot cache of device attributes,
    /// and read the GPU settings (ECC, persistence, MIG, power limit) now.
    #[arg(long)]
    fresh: bool,
}

#[derive(Debug, clap::Args)]
struct LockArgs {
    /// Where to write [default: lockfiles/NAME.toml at the project root].
    #[arg(short, long, value_name = "FILE", value_parser = crate::app::context::non_empty_path())]
    output: Option<PathBuf>,
    /// The machine's name [default: from the GPU model, e.g. h200; "cpu" without a GPU].
    #[arg(long, value_parser = crate::app::context::non_empty())]
    name: Option<String>,
    /// Overwrite an existing lockfile.
    #[arg(long)]
    force: bool,
}

/// Runs `repro env ...`.
pub fn run(g: &Globals, args: Args) -> anyhow::Result<u8> {
    // The fingerprint reports the NVRTC builds would use, which a pin in repro.toml decides.
    g.config()?;
    match args.command {
        EnvCommand::Capture(a) => capture(g, a),
        EnvCommand::Check(a) => check(g, a),
        EnvCommand::Lock(a) => lock(g, a),
        EnvCommand::WhyImport(a) => why_import(g, a),
    }
}

fn resolve(g: &Globals, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        g.cwd.join(p)
    }
}

fn capture(g: &Globals, a: CaptureArgs) -> anyhow::Result<u8> {
    let start = Instant::now();
    let fp = fingerprint::capture(&g.fingerprint_context(true), &Demand::all());
    let elapsed = start.elapsed();
    let json = fp.to_json();
    if let Some(out) = &a.output {
        let path = resolve(g, out);
        let text = serde_json::to_string_pretty(&json)? + "\n";
        fsutil::write_output(&path, text.as_bytes(), true)
            .with_context(|| format!("failed to write fingerprint {}", g.shown(&path)))?;
        if !g.quiet && !g.json {
            say!("wrote {}", g.shown(&path));
        }
    }
    if g.json {
        emit_json(&json)?;
    } else if a.output.is_none() || g.verbose > 0 {
        emit(&render_fingerprint(&fp, g.verbose > 0))?;
        emit(&render_peaks(&fp))?;
        if !g.quiet {
            emit(&format!(
                "captured in {:.1} ms\n",
                elapsed.as_secs_f64() * 1e3
            ))?;
        }
    }
    Ok(exit::OK)
}

/// The measured peaks of each device that `repro bench` calibrated this boot (roofline
/// figures), one line each; nothing for a device not yet calibrated.
fn render_peaks(fp: &Fingerprint) -> String {
    let count: usize = fp
        .get("gpu.count")
        .value()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut out = String::new();
    for i in 0..count {
        let field = fp.get(&format!("gpu.devices.{i}.uuid"));
        let Some(uuid) = field.value() else {
            continue;
        };
        if let Some(c) = crate::engines::roofline::cached(uuid) {
            out.push_str(&format!(
                "measured peaks [{i}]: DRAM {:.0} GB/s, FP32 {:.1} TFLOP/s (calibrated {})\n",
                c.peaks.dram_gb_per_s, c.peaks.fp32_tflops, c.measured_at
            ));
        }
    }
    out
}

/// Cuts a value for a human table; `--json` always has the whole value.
fn cell(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(MAX - 1).collect::<String>())
    }
}

/// The human form of a fingerprint: one table, grouped by section.
pub fn render_fingerprint(fp: &Fingerprint, with_timings: bool) -> String {
    let style = Style::for_stdout();
    let mut table = Table::new();
    let mut last_section = String::new();
    for (key, field) in &fp.fields {
        let (section, rest) = key.split_once('.').unwrap_or((key.as_str(), ""));
        let shown_section = if section != last_section {
            section.to_string()
        } else {
            String::new()
        };
        last_section = section.to_string();
        let name = match rest.strip_prefix("devices.") {
            Some(dev) => {
                let (i, f) = dev.split_once('.').unwrap_or((dev, ""));
                format!("[{i}] {f}")
            }
            None => rest.to_string(),
        };
        let (plain, painted) = match field {
            Field::Value(v) => (cell(v), cell(v)),
            Field::Unavailable(r) => {
                let t = cell(&format!("unavailable: {r}"));
                (t.clone(), style.dim(&t))
            }
        };
        table.styled_row(vec![
            (shown_section.clone(), style.bold(&shown_section)),
            (name.clone(), name),
            (plain, painted),
        ]);
    }
    let mut out = table.render(0);
    if with_timings {
        out.push_str("\nprobe times (ms):");
        for (probe, ms) in &fp.probe_ms {
            out.push_str(&format!(" {probe}={ms:.1}"));
        }
        out.push('\n');
    }
    out
}

/// The lockfile to check against, the fingerprint (with when its GPU settings were read,
/// if a recent reading answered for them), and, when it was picked from several, why that
/// one (shown under the report's first line, so two lockfiles never leave the user
/// guessing).
type Chosen = (PathBuf, Lock, Captured, Option<String>);

/// A fingerprint, and when its GPU settings were read if they were not read now.
type Captured = (Fingerprint, Option<std::time::SystemTime>);

/// The GPU settings (`gpu.ecc`, ...) that a recent reading may answer for: the ones these
/// lockfiles check with `warn` and none checks with a policy it can fail on; none under
/// `--strict`, where a warning fails the check. A setting whose reading would warn is read
/// again before the warning is shown (see `check`).
fn reusable_settings<'a>(locks: &[&'a Lock], strict: bool) -> Vec<&'a str> {
    if strict {
        return Vec::new();
    }
    let rules = || locks.iter().flat_map(|l| l.rules.iter());
    let fatal = |key: &str| {
        rules().any(|r| r.key == key && !matches!(r.policy, Policy::Warn(_) | Policy::Ignore(_)))
    };
    rules()
        .filter(|r| matches!(r.policy, Policy::Warn(_)) && !fatal(&r.key))
        .map(|r| r.key.as_str())
        .collect()
}

fn choose_lock(g: &Globals, a: &CheckArgs) -> anyhow::Result<Chosen> {
    let saved = a
        .fingerprint
        .as_ref()
        .map(|p| Fingerprint::load(&resolve(g, p)))
        .transpose()?;
    let get_fp = |demand: Demand| -> Captured {
        match &saved {
            Some(fp) => (fp.clone(), None),
            None => fingerprint::capture_noting_reuse(&g.fingerprint_context(a.fresh), &demand),
        }
    };
    if let Some(p) = &a.lock {
        let path = resolve(g, p);
        let lock = lockfile::load(&path)?;
        let demand = Demand::for_keys(checked_keys(&lock))
            .reusing_settings(reusable_settings(&[&lock], a.strict));
        let fp = get_fp(demand);
        return Ok((path, lock, fp, None));
    }
    let dir = g.project_root().join("lockfiles");
    let candidates = lockfile::list(&dir);
    match candidates.len() {
        0 => Err(LockfileError::NoneFound { dir }.into()),
        1 => {
            let lock = lockfile::load(&candidates[0])?;
            let demand = Demand::for_keys(checked_keys(&lock))
                .reusing_settings(reusable_settings(&[&lock], a.strict));
            let fp = get_fp(demand);
            Ok((candidates[0].clone(), lock, fp, None))
        }
        _ => {
            let locks: Vec<(PathBuf, Lock)> = candidates
                .iter()
                .map(|p| lockfile::load(p).map(|l| (p.clone(), l)))
                .collect::<Result<_, _>>()?;
            // One capture answers every candidate: the union of what they check, plus the GPU.
            let keys = locks
                .iter()
                .flat_map(|(_, l)| checked_keys(l))
                .chain(["gpu.name"]);
            let demand = Demand::for_keys(keys).reusing_settings(reusable_settings(
                &locks.iter().map(|(_, l)| l).collect::<Vec<_>>(),
                a.strict,
            ));
            let fp = get_fp(demand);
            let gpu = fp.0.lookup("gpu.name");
            let matching: Vec<&(PathBuf, Lock)> = locks
                .iter()
                .filter(|(_, l)| {
                    l.rules.iter().any(|r| {
                        r.key == "gpu.name"
                            && !matches!(r.policy, Policy::Ignore(_))
                            && check::evaluate(
                                &r.policy,
                                crate::foundation::fields::Kind::Text,
                                &gpu,
                            ) == Status::Ok
                    })
                })
                .collect();
            let gpu_text = gpu
                .first()
                .and_then(|f| f.value().map(str::to_string))
                .unwrap_or_else(|| "none".into());
            let file_name = |p: &PathBuf| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            };
            // With no lockfile for this GPU, the one `repro env lock` names after this machine
            // (lockfiles/cpu.toml without a GPU) is the one its user wrote for it.
            let own = format!("{}.toml", lockfile::default_name(&fp.0));
            let by_name = locks.iter().find(|(p, _)| file_name(p) == own);
            match (matching.as_slice(), by_name) {
                ([(path, lock)], _) => Ok((
                    path.clone(),
                    lock.clone(),
                    fp,
                    Some(format!(
                        "chosen of {} lockfiles in {}: its gpu.name accepts this GPU ({gpu_text})",
                        locks.len(),
                        g.shown(&dir)
                    )),
                )),
                ([], Some((path, lock))) => Ok((
                    path.clone(),
                    lock.clone(),
                    fp,
                    Some(format!(
                        "chosen of {} lockfiles in {}: none accepts this GPU ({gpu_text}) by gpu.name, and {own} is the name `repro env lock` gives this machine",
                        locks.len(),
                        g.shown(&dir)
                    )),
                )),
                _ => Err(LockfileError::Ambiguous {
                    dir,
                    count: candidates.len(),
                    names: candidates
                        .iter()
                        .map(|p| {
                            p.file_name()
                                .unwrap_or_default()
                                .to_string_lossy()
                                .into_owned()
                        })
                        .collect(),
                }
                .into()),
            }
        }
    }
}

fn checked_keys(lock: &Lock) -> impl Iterator<Item = &str> {
    lock.rules
        .iter()
        .filter(|r| !matches!(r.policy, Policy::Ignore(_)))
        .map(|r| r.key.as_str())
}

fn check(g: &Globals, a: CheckArgs) -> anyhow::Result<u8> {
    let start = Instant::now();
    let (path, lock, (mut fp, mut settings_read_at), why) = choose_lock(g, &a)?;
    // The settings the chosen lockfile checks with `warn` (another candidate may have let
    // a reading answer for settings this one does not check).
    let setting = |key: &str| fingerprint::nvml::setting_of(key).is_some();
    let reused: Vec<&str> = lock
        .rules
        .iter()
        .filter(|r| setting(&r.key) && matches!(r.policy, Policy::Warn(_)))
        .map(|r| r.key.as_str())
        .collect();
    if reused.is_empty() {
        settings_read_at = None;
    }
    let mut report = check::check(&lock.rules, |k| fp.lookup(k));
    // A reused reading of the GPU settings only ever confirms them: a setting it would
    // warn about is read now (the user may have just changed it), and the check is made
    // again with that reading.
    if settings_read_at.is_some()
        && report
            .rows
            .iter()
            .any(|r| setting(&r.field) && !matches!(r.status, Status::Ok | Status::Ignored))
    {
        let (now, _) = fingerprint::capture_noting_reuse(
            &g.fingerprint_context(a.fresh),
            &Demand::for_keys(reused.iter().copied()),
        );
        fp.fields.retain(|k, _| !is_setting_field(k));
        fp.fields
            .extend(now.fields.into_iter().filter(|(k, _)| is_setting_field(k)));
        settings_read_at = None;
        report = check::check(&lock.rules, |k| fp.lookup(k));
    }
    let passed = report.passes(a.strict);
    // The toolchains the project pins are part of this machine's readiness (not of a saved
    // fingerprint from elsewhere).
    let pins = if a.fingerprint.is_none() {
        pinned_toolchains(g)
    } else {
        Vec::new()
    };
    // A compiler the lockfile wants and this machine lacks, which repro.toml pins: the fix
    // is to install the pin (the general hint speaks of shells and the PATH).
    for row in report
        .rows
        .iter_mut()
        .filter(|r| r.status == Status::Missing)
    {
        let family = match row.field.as_str() {
            "toolchain.nvcc.version" => "nvcc@",
            "toolchain.nvrtc.version" => "nvrtc@",
            _ => continue,
        };
        if let Some(t) = pins
            .iter()
            .find(|t| t.path.is_none() && t.spec.starts_with(family))
        {
            row.hint = Some(format!(
                "{} is pinned in repro.toml but not installed: run `{}`{}",
                t.spec,
                crate::engines::toolchain::install::InstallError::install_command(&t.spec),
                if t.installs_itself {
                    " (a build installs it on first use)"
                } else {
                    ""
                }
            ));
        }
    }
    // A missing toolchain that installs itself on first use is a warning, a failure only
    // with --strict; one that cannot (nothing pinned to verify it by) is a failure.
    let missing: Vec<&PinnedToolchain> = pins
        .iter()
        .filter(|t| t.path.is_none() && (a.strict || !t.installs_itself))
        .collect();
    let elapsed = start.elapsed();
    let code = match (passed, missing.is_empty()) {
        (true, true) => exit::OK,
        (true, false) => exit::ENVIRONMENT,
        (false, _) => exit::MISMATCH,
    };
    if g.json {
        let mut v = json!({
            "schema": 1,
            "lockfile": g.shown(&path),
            "lockfile-choice": why,
            "driver-found-by": fp.get("driver.found-by").value(),
            "settings-read-at": settings_read_at
                .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            "name": lock.name,
            "strict": a.strict,
            // The whole check: a pinned toolchain missing under --strict fails it too.
            "passed": code == exit::OK,
            "exit-code": code,
            "counts": counts_json(&report),
            "rows": report.rows,
        });
        // A saved fingerprint is another machine: its toolchains are not checked here.
        if a.fingerprint.is_none() {
            v["toolchains"] = pins
                .iter()
                .map(|t| {
                    json!({
                        "toolchain": t.spec, "installed": t.path.is_some(), "path": t.path,
                        "installs-on-first-use": t.path.is_none() && t.installs_itself,
                        "install-command": crate::engines::toolchain::install::InstallError::install_command(&t.spec),
                    })
                })
                .collect();
        }
        emit_json(&v)?;
    } else {
        let mut text = render_report(&g.shown(&path), &lock, &report, code == exit::OK, g);
        // Right under the `lockfile PATH (NAME)` line: which lockfile and why, and where the
        // driver came from when the loader could not find it.
        let mut notes = String::new();
        if let Some(why) = &why {
            notes.push_str(&format!("  {why}\n"));
        }
        if let Some(how) = fp.get("driver.found-by").value()
            && how.starts_with("repro's host search")
        {
            notes.push_str(&format!("  driver: libcuda.so.1 from {how}\n"));
        }
        if let Some(t) = settings_read_at {
            let age = std::time::SystemTime::now()
                .duration_since(t)
                .map_or(0, |d| d.as_secs());
            notes.push_str(&format!(
                "  {} as read {} ago (reused for up to {} min; `--fresh` reads them now)\n",
                reused.join(", "),
                short_age(age),
                fingerprint::nvml::SETTINGS_MAX_AGE.as_secs() / 60
            ));
        }
        let at = text.find('\n').map_or(text.len(), |i| i + 1);
        text.insert_str(at, &notes);
        emit(&text)?;
        for t in &pins {
            let spec = &t.spec;
            match &t.path {
                Some(p) => emit(&format!("toolchain {spec}: installed at {p}\n"))?,
                None if t.installs_itself => emit(&format!(
                    "toolchain {spec}: WARN not installed; installs on first use\n"
                ))?,
                None => emit(&format!("toolchain {spec}: pinned but NOT installed\n"))?,
            }
        }
        if g.verbose > 0 {
            let probes: Vec<String> = fp
                .probe_ms
                .iter()
                .map(|(p, ms)| format!("{p}={ms:.1}"))
                .collect();
            emit(&format!(
                "checked in {:.1} ms (probes, ms: {})\n",
                elapsed.as_secs_f64() * 1e3,
                probes.join(" ")
            ))?;
        }
    }
    if code == exit::MISMATCH && !missing.is_empty() && !g.quiet {
        for t in &missing {
            say!(
                "hint: run `{}`",
                crate::engines::toolchain::install::InstallError::install_command(&t.spec)
            );
        }
    }
    if code == exit::ENVIRONMENT {
        let specs: Vec<&str> = missing.iter().map(|t| t.spec.as_str()).collect();
        return Err(UserError::with_code(
            exit::ENVIRONMENT,
            format!("the pinned toolchain {} is not installed", specs.join(", ")),
        )
        .hint(format!(
            "run `{}`",
            specs
                .iter()
                .map(|s| crate::engines::toolchain::install::InstallError::install_command(s))
                .collect::<Vec<_>>()
                .join("` and `")
        ))
        .into());
    }
    Ok(code)
}

/// Whether a fingerprint key is a device's GPU setting (`gpu.devices.0.ecc`).
fn is_setting_field(key: &str) -> bool {
    key.strip_prefix("gpu.devices.")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(_, name)| fingerprint::nvml::SETTINGS.contains(&name))
}

/// An age in whole seconds, as `45 s` or `3 min 20 s`.
fn short_age(secs: u64) -> String {
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s} s"),
        (m, 0) => format!("{m} min"),
        (m, s) => format!("{m} min {s} s"),
    }
}

/// One toolchain the project's builds use, as the resolver plans it.
struct PinnedToolchain {
    /// `nvcc@13.0`.
    spec: String,
    /// Its installed tree, if a complete one holds exactly its wheels.
    path: Option<String>,
    /// Whether every wheel is pinned by sha256, so that a build installs it on first use.
    installs_itself: bool,
}

/// The toolchains the project's builds use (repro.toml's defaults and every recipe's
/// choice, through the same resolver builds call), each with its installed tree if any.
fn pinned_toolchains(g: &Globals) -> Vec<PinnedToolchain> {
    use crate::engines::toolchain::install::{self, Family, Spec};
    use crate::engines::toolchain::resolve;
    let root = g.project_root();
    let Ok(pins) = g.pins() else {
        return Vec::new();
    };
    let mut specs: std::collections::BTreeMap<String, Option<install::Plan>> = Default::default();
    if let Some(r) = &pins.table.nvcc_default {
        let spec = Spec::Release {
            family: Family::Nvcc,
            release: r.clone(),
        };
        specs.insert(spec.to_string(), resolve::plan_for(&pins, &spec).ok());
    }
    for name in crate::foundation::recipe::list(&root) {
        // A recipe that does not parse is `repro build`'s to report, not this check's.
        let Ok(r) = crate::foundation::recipe::load(&root, &name) else {
            continue;
        };
        match resolve::resolve(&pins, &r, None) {
            Ok(resolved) => {
                if let resolve::Choice::Managed(plan) = resolved.choice {
                    specs.insert(plan.spec().to_string(), Some(plan));
                }
            }
            Err(_) => {
                if let crate::foundation::recipe::Build::Nvrtc(c)
                | crate::foundation::recipe::Build::Nvcc(c) = &r.build
                    && let Some(t) = &c.toolchain
                {
                    specs.insert(t.clone(), None);
                }
            }
        }
    }
    specs
        .into_iter()
        .map(|(spec, plan)| PinnedToolchain {
            path: plan
                .as_ref()
                .and_then(|p| install::find(p).ok())
                .map(|t| t.dir.display().to_string()),
            installs_itself: plan.as_ref().is_some_and(install::Plan::verifiable),
            spec,
        })
        .collect()
}

fn counts_json(r: &Report) -> serde_json::Value {
    json!(r.counts())
}

/// The human form of a check: a row per checked field, hints under failures, a summary.
pub fn render_report(
    path: &str,
    lock: &Lock,
    report: &Report,
    passed: bool,
    g: &Globals,
) -> String {
    let style = Style::for_stdout();
    let mut out = format!("lockfile {path} ({})\n", lock.name);
    let mut table = Table::new();
    let head = |s: &str| (s.to_string(), style.dim(s));
    table.styled_row(vec![
        head("STATUS"),
        head("FIELD"),
        head("EXPECTED"),
        head("ACTUAL"),
    ]);
    for row in &report.rows {
        let show = match row.status {
            Status::Ignored => g.verbose > 0,
            Status::Ok => !g.quiet,
            _ => true,
        };
        if !show {
            continue;
        }
        let label = match row.status {
            Status::Ok => "ok",
            Status::Ignored => "ignored",
            Status::Warn => "warn",
            Status::Missing => "MISSING",
            Status::Mismatch => "MISMATCH",
        };
        let painted = match row.status {
            Status::Ok => style.good(label),
            Status::Ignored => style.dim(label),
            Status::Warn => style.warn(label),
            _ => style.error(label),
        };
        table.styled_row(vec![
            (label.into(), painted),
            (row.field.clone(), row.field.clone()),
            (cell(&row.expected), cell(&row.expected)),
            (cell(&row.actual), cell(&row.actual)),
        ]);
        if let Some(h) = &row.hint {
            let text = format!("hint: {h}");
            table.note(style.hint(&text));
        }
    }
    out.push_str(&table.render(2));
    let verdict = if passed {
        style.good("passed")
    } else {
        style.error("FAILED")
    };
    out.push_str(&format!(
        "{verdict}: {} ok, {} mismatched, {} missing, {} warnings, {} ignored\n",
        report.count(Status::Ok),
        report.count(Status::Mismatch),
        report.count(Status::Missing),
        report.count(Status::Warn),
        report.count(Status::Ignored),
    ));
    out
}

fn lock(g: &Globals, a: LockArgs) -> anyhow::Result<u8> {
    let fp = fingerprint::capture(&g.fingerprint_context(true), &Demand::all());
    let name = match a.name {
        Some(n) if n.is_empty() || n.contains(['/', '\\']) || n.starts_with('.') => {
            return Err(
                UserError::usage(format!("`{n}` is not a usable lockfile name"))
                    .hint("use letters, digits and dashes, e.g. --name h200")
                    .into(),
            );
        }
        Some(n) => n,
        None => lockfile::default_name(&fp),
    };
    let path = match &a.output {
        Some(p) => resolve(g, p),
        None => g
            .project_root()
            .join("lockfiles")
            .join(format!("{name}.toml")),
    };
    let lock = lockfile::from_fingerprint(&name, &fp);
    let text = lockfile::to_toml(&lock, &fp);
    fsutil::write_output(&path, text.as_bytes(), a.force)
        .with_context(|| format!("failed to write lockfile {}", g.shown(&path)))?;
    let counts = lock.policy_counts();
    if g.json {
        emit_json(&serde_json::to_value(lockfile::Written {
            lockfile: g.shown(&path),
            name,
            policies: counts,
            schema: 1,
        })?)?;
    } else if !g.quiet {
        emit(&format!(
            "wrote {} ({} exact, {} one-of, {} warn, {} ignored); edit its policies to taste\n",
            g.shown(&path),
            counts.exact,
            counts.one_of,
            counts.warn,
            counts.ignore,
        ))?;
    }
    Ok(exit::OK)
}

/// The Python environment the global options and repro.toml choose.
pub(super) fn python_env(g: &Globals) -> anyhow::Result<crate::foundation::pyenv::PyEnv> {
    use crate::foundation::pyenv;
    let config = g.config()?.python.interpreter_at(&g.project_root());
    let var = |k: &str| std::env::var_os(k);
    Ok(pyenv::describe(pyenv::locate(
        g.python.as_deref(),
        config.as_deref(),
        &var,
    )?)?)
}

/// The module file `repro env why-import TARGET` means, and the scratch directory that
/// holds it when it comes from the store.
fn extension_file(
    g: &Globals,
    target: &str,
    env: &crate::foundation::pyenv::PyEnv,
) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    let as_path = resolve(g, Path::new(target));
    if as_path.is_file() {
        return Ok((as_path, None));
    }
    let root = g.project_root();
    if let Ok(recipe) = crate::foundation::recipe::load(&root, target) {
        let store = g.store();
        let record = store.get_last(&recipe.name).and_then(|key| {
            let v = store
                .get_record(crate::foundation::records::BUILDS, &key)
                .ok()??;
            crate::foundation::records::BuildRecord::from_json(&v, &key).ok()
        });
        if let Some(rec) = record
            && let Some((name, out)) = rec.outputs.iter().find(|(n, _)| n.ends_with(".so"))
        {
            let dir = tempfile::tempdir()?;
            let path = dir.path().join(name);
            std::fs::write(&path, store.get_blob(&out.sha256)?)?;
            return Ok((path, Some(dir)));
        }
        return Err(UserError::usage(format!(
            "recipe `{}` has no built extension module in the store",
            recipe.name
        ))
        .hint(format!("build it first: `repro build {}`", recipe.name))
        .into());
    }
    for site in &env.site_packages {
        let found = std::fs::read_dir(site)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.ends_with(".so") && n.split('.').next() == Some(target)
            });
        if let Some(e) = found {
            return Ok((e.path(), None));
        }
    }
    Err(UserError::usage(format!(
        "no extension `{target}`: not a file, not a recipe, and no module of that name in {}",
        env.site_packages
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .hint("give the module's file (`path/ext.cpython-311-x86_64-linux-gnu.so`), a recipe name, or an installed module's name")
    .into())
}

fn why_import(g: &Globals, a: WhyImportArgs) -> anyhow::Result<u8> {
    let env = python_env(g)?;
    let (file, _scratch) = extension_file(g, &a.target, &env)?;
    let store = g.store();
    let d = crate::engines::abi::diagnose(&env, &file, Some(&store))
        .with_context(|| format!("failed to read {}", g.shown(&file)))?;
    let code = if d.imports { exit::OK } else { exit::MISMATCH };
    if g.json {
        let mut v = serde_json::to_value(&d)?;
        v["schema"] = json!(1);
        emit_json(&v)?;
        return Ok(code);
    }
    emit(&render_diagnosis(&d))?;
    Ok(code)
}

/// The human form of a diagnosis.
fn render_diagnosis(d: &crate::engines::abi::Diagnosis) -> String {
    let style = Style::for_stdout();
    if d.imports {
        return format!(
            "{} imports in {} (PyTorch imported first)\n",
            d.module, d.interpreter
        );
    }
    let mut out = format!(
        "{} does {} in {} (PyTorch imported first)\n  {}\n",
        d.module,
        style.error("NOT import"),
        d.interpreter,
        d.message.as_deref().unwrap_or("")
    );
    if let Some(u) = &d.undefined {
        out.push_str(&format!("  the extension needs:  {}\n", u.demangled));
        for c in &d.candidates {
            out.push_str(&format!(
                "  this PyTorch has:     {}  ({})\n",
                c.symbol.demangled, c.library
            ));
        }
        if d.candidates.is_empty() {
            out.push_str("  this PyTorch has no symbol of that name\n");
        }
    }
    for diff in &d.differences {
        out.push_str(&format!("  differs: {diff}\n"));
    }
    if let Some(r) = &d.remedy {
        out.push_str(&format!("  {}\n", style.hint(&format!("hint: {r}"))));
    }
    out
}
