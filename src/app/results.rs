//! `repro log`, `repro show ID`, `repro compare A B`: list, inspect and compare results.

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::app::bench::{fmt_value, parse_fraction};
use crate::app::context::{Globals, emit, emit_json};
use crate::engines::bisect::slurm::detach;
use crate::engines::catalog;
use crate::engines::export;
use crate::foundation::error::{Hinted, UserError};
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::output::{Style, Table};
use crate::foundation::records::{self, BisectRecord, BuildRecord, ResultRecord};
use crate::foundation::stats::{self, Verdict};

/// Arguments of `repro log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Only records of these kinds (repeat or separate with commas) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    kind: Vec<catalog::Kind>,
    /// Only records of this recipe (or command-bench name, or a bisection's recipe).
    #[arg(long, value_name = "NAME", value_parser = crate::app::context::non_empty())]
    recipe: Option<String>,
    /// Only records at a commit starting with this (a bisection's: its first bad commit).
    #[arg(long, value_name = "PREFIX", value_parser = crate::app::context::non_empty())]
    commit: Option<String>,
    /// Only results from machines whose GPU name contains this (other kinds have none).
    #[arg(long, value_parser = crate::app::context::non_empty())]
    machine: Option<String>,
    /// At most this many records.
    #[arg(short = 'n', long, default_value_t = 50)]
    limit: usize,
}

/// Arguments of `repro show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// A record's ID (a result's ID, a build's key, a bisection's ID) or a unique prefix
    /// of at least 4 hex digits.
    #[arg(value_name = "ID", value_parser = crate::app::context::non_empty())]
    id: String,
}

/// Arguments of `repro compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The baseline: a result ID (or unique prefix), or an nvbench JSON file
    /// (`out.json`, `out.json@STATE` to pick one of its states).
    #[arg(value_parser = crate::app::context::non_empty())]
    a: String,
    /// The candidate, likewise.
    #[arg(value_parser = crate::app::context::non_empty())]
    b: String,
    /// Call a change "same" only if the ratio's interval lies within ±THRESHOLD; with
    /// --fail-on, a significant change smaller than this does not fail.
    #[arg(long, default_value = "2%", value_parser = parse_fraction)]
    threshold: f64,
    /// Significance level of the rank tests.
    #[arg(long, default_value_t = 0.01)]
    alpha: f64,
    /// Exit 1 when B is significantly slower (or faster, or either) than A by more than
    /// --threshold, for CI.
    #[arg(long, value_enum, value_name = "DIRECTION")]
    fail_on: Option<FailOn>,
    /// Output format: text, or a Markdown table for pull-request comments.
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    #[command(flatten)]
    export: export::ExportArgs,
}

/// Which significant change fails `compare --fail-on`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// B is slower (larger) than A.
    Slower,
    /// B is faster (smaller) than A.
    Faster,
    /// Either.
    Any,
}

/// `compare`'s output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text.
    Text,
    /// A Markdown table and verdict.
    Md,
}

/// Whether a comparison fails the gate: significant (p ≤ alpha) and the ratio of medians
/// beyond 1 ± threshold in a failing direction, as `asv compare --factor` does.
pub fn fails(c: &stats::Comparison, fail_on: FailOn, threshold: f64) -> bool {
    let slower = c.verdict == Verdict::Slower && c.ratio > 1.0 + threshold;
    let faster = c.verdict == Verdict::Faster && c.ratio < 1.0 - threshold;
    match fail_on {
        FailOn::Slower => slower,
        FailOn::Faster => faster,
        FailOn::Any => slower || faster,
    }
}

/// A compare operand: a result by ID prefix, or a state of an nvbench JSON file.
fn operand(g: &Globals, text: &str) -> anyhow::Result<(String, ResultRecord)> {
    if let Some(file) = operand_file(text) {
        let selector = text.split_once(".json@").map(|(_, sel)| sel);
        let r = crate::engines::nvbench::load(&g.cwd.join(&file), selector)?;
        return Ok((text.to_string(), r));
    }
    find(g, text)
}

/// The nvbench JSON file an operand names (`FILE.json` or `FILE.json@STATE`), if it names
/// one rather than a result ID.
fn operand_file(text: &str) -> Option<String> {
    let file = match text.split_once(".json@") {
        Some((f, _)) => format!("{f}.json"),
        None => text.to_string(),
    };
    file.ends_with(".json").then_some(file)
}

fn find(g: &Globals, id: &str) -> anyhow::Result<(String, ResultRecord)> {
    // The error's own hint points at `repro log`.
    Ok(catalog::find_result(&g.store(), id)?)
}

/// Runs `repro log`.
pub fn log(g: &Globals, a: LogArgs) -> anyhow::Result<u8> {
    let store = g.store();
    store.check_schema()?;
    let records = log_records(&store, &a);
    let detached = detached_lines(&store);
    if g.json {
        emit_json(&log_json(&records, &detached))?;
        return Ok(exit::OK);
    }
    if !detached.is_empty() {
        emit(&detached_table(&detached))?;
        emit("\n")?;
    }
    if records.is_empty() {
        if !g.quiet {
            emit("nothing recorded (`repro build`, `repro bench` and `repro bisect` record)\n")?;
        }
        return Ok(exit::OK);
    }
    emit(&log_table(&records))?;
    Ok(exit::OK)
}

/// The records `repro log` lists: those of the kind asked for that pass its filters, newest first.
fn log_records(
    store: &crate::foundation::store::Store,
    a: &LogArgs,
) -> Vec<(catalog::Entry, catalog::Record)> {
    catalog::list(store, &a.kind)
        .into_iter()
        .filter(|(e, r)| {
            a.recipe
                .as_deref()
                .is_none_or(|n| e.name == n || r.recipe() == Some(n))
        })
        .filter(|(e, _)| {
            a.commit.as_deref().is_none_or(|c| {
                e.commit
                    .as_deref()
                    .is_some_and(|x| x.starts_with(&c.to_lowercase()))
            })
        })
        .filter(|(_, r)| {
            a.machine.as_deref().is_none_or(|m| {
                r.machine()
                    .is_some_and(|x| x.to_lowercase().contains(&m.to_lowercase()))
            })
        })
        .take(a.limit)
        .collect()
}

/// `repro log --json`: the records, with a result's figures beside its entry.
fn log_json(
    records: &[(catalog::Entry, catalog::Record)],
    detached: &[(records::DetachedRecord, String)],
) -> Value {
    let list: Vec<Value> = records
        .iter()
        .map(|(e, r)| {
            let mut v = serde_json::to_value(e).expect("entries serialise");
            if let catalog::Record::Result(r) = r {
                let s = r.summary.as_ref();
                for (k, x) in [
                    ("key", json!(r.key)),
                    ("params", json!(r.params)),
                    ("median", json!(s.map(|s| s.median))),
                    ("ci-low", json!(s.map(|s| s.ci_low))),
                    ("ci-high", json!(s.map(|s| s.ci_high))),
                    ("unit", json!(r.unit)),
                    ("machine", json!(r.machine)),
                ] {
                    v[k] = x;
                }
            }
            v
        })
        .collect();
    let mut doc = json!({ "schema": 2, "records": list });
    if !detached.is_empty() {
        doc["detached"] = detached
            .iter()
            .map(|(d, state)| json!({"id": d.id, "job": d.job, "state": state, "submitted-at": d.submitted_at}))
            .collect();
    }
    doc
}

/// The detached bisections still under way, as a table.
fn detached_table(detached: &[(records::DetachedRecord, String)]) -> String {
    let mut t = Table::new();
    t.row(["DETACHED", "JOB", "STATE", "SUBMITTED", "STEPS SO FAR"].map(String::from));
    for (d, state) in detached {
        t.row([
            keys::short(&d.id).to_string(),
            d.job.clone(),
            plain(state),
            d.submitted_at
                .chars()
                .take(19)
                .collect::<String>()
                .replace('T', " "),
            detach::progress(d).len().to_string(),
        ]);
    }
    t.render(0)
}

/// The records, one line each.
fn log_table(records: &[(catalog::Entry, catalog::Record)]) -> String {
    let mut t = Table::new();
    t.row(["KIND", "ID", "DATE", "NAME", "STATUS", "COMMIT", "SUMMARY"]);
    for (e, _) in records {
        t.row([
            e.kind.word().to_string(),
            keys::short(&e.id).to_string(),
            e.created_at
                .as_deref()
                .unwrap_or_default()
                .chars()
                .take(19)
                .collect::<String>()
                .replace('T', " "),
            crate::foundation::output::printable(&e.name.chars().take(40).collect::<String>()),
            e.status.clone(),
            e.commit
                .as_deref()
                .map_or("-".into(), |c| c.chars().take(10).collect()),
            crate::foundation::output::printable(&e.summary),
        ]);
    }
    t.render(0)
}

/// Runs `repro show`: any record, by a prefix of its ID.
pub fn show(g: &Globals, a: ShowArgs) -> anyhow::Result<u8> {
    let store = g.store();
    store.check_schema()?;
    let found = catalog::find(&store, &a.id);
    if found.is_err()
        && let Some(d) = detach::find(&store, &a.id)
    {
        return show_detached(g, &store, &d);
    }
    let (entry, r) = found.map_err(|e| match e {
        // A record that is there but does not read has its own hint.
        catalog::FindError::Unreadable { .. } => anyhow::Error::new(e),
        e => Hinted::new(e, "`repro log` lists every record with its ID").into(),
    })?;
    let id = entry.id.clone();
    if g.json {
        let mut v = r.to_json();
        v["id"] = json!(id);
        v["kind"] = json!(entry.kind.word());
        // The links `show` prints as rows: a result's profiles, a profile's results (full IDs).
        match &r {
            catalog::Record::Result(res) => {
                v["profiles"] = json!(crate::engines::profile::profiles_of_result(&store, res));
            }
            catalog::Record::Profile(p) => {
                v["results"] = json!(crate::engines::profile::results_of_profile(&store, p));
            }
            _ => {}
        }
        emit_json(&v)?;
        return Ok(exit::OK);
    }
    let r = match r {
        catalog::Record::Result(r) => r,
        catalog::Record::Build(b) => return show_build(&id, &b),
        catalog::Record::Bisection(b) => return show_bisection(&id, &entry, &b),
        catalog::Record::ToolchainBisection(b) => return show_toolchain_bisection(&id, &entry, &b),
        catalog::Record::ToolchainBuildBisection(b) => {
            return show_toolchain_build_bisection(&id, &entry, &b);
        }
        catalog::Record::Profile(p) => return show_profile(&store, &id, &p),
    };
    show_result(&store, &id, &r)
}

/// `repro show` of a result: what it measured and how, then its figures.
fn show_result(
    store: &crate::foundation::store::Store,
    id: &str,
    r: &ResultRecord,
) -> anyhow::Result<u8> {
    let mut t = Table::new();
    t.row(["id".to_string(), id.to_string()]);
    t.row(["experiment key".to_string(), r.key.clone()]);
    let flat = |x: Option<&str>| x.map(str::to_string);
    for (k, v) in [
        ("name", Some(r.name.clone())),
        ("command", flat(r.command.as_deref())),
        ("metric", flat(r.metric.as_deref())),
        ("recipe-path", flat(r.recipe_path.as_deref())),
        ("verdict", Some(r.verdict.word().to_string())),
        ("detail", flat(r.detail.as_deref())),
        ("created-at", Some(r.created_at.clone())),
        ("commit", flat(r.commit.as_deref())),
        ("machine", Some(r.machine.clone())),
        ("build-key", flat(r.build_key.as_deref())),
        ("artifact", flat(r.artifact.as_deref())),
    ] {
        if let Some(v) = v {
            t.row([k.to_string(), v]);
        }
    }
    t.row(["params".to_string(), r.params_text()]);
    let profiles = crate::engines::profile::profiles_of_result(store, r);
    if !profiles.is_empty() {
        let ids: Vec<&str> = profiles.iter().map(|p| keys::short(p)).collect();
        t.row(["profiles".to_string(), ids.join(" ")]);
    }
    if let Some(py) = &r.python {
        for row in crate::app::bench::pybench::show_rows(py) {
            t.row(row);
        }
    }
    if let Some(l) = &r.launch {
        t.row([
            "launch".to_string(),
            format!(
                "{} grid {} block {} shared {} B",
                l.kernel,
                json!(l.grid),
                json!(l.block),
                l.shared_mem
            ),
        ]);
    }
    if let Some(s) = &r.settings {
        t.row([
            "settings".to_string(),
            format!(
                "mode {}, max noise {}%, warm-up {} ms, device {}",
                json!(s.mode).as_str().unwrap_or_default(),
                s.max_noise * 100.0,
                json!(s.warmup_ms),
                s.device
            ),
        ]);
    }
    if let Some(m) = &r.timing_settings {
        let set: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        t.row(["timing settings".to_string(), set.join(" ")]);
    }
    figure_rows(&mut t, r);
    emit(&t.render(0))?;
    Ok(exit::OK)
}

/// A result's figures: the summary, throughput, clocks and checks.
fn figure_rows(t: &mut Table, r: &ResultRecord) {
    let unit = r.unit.as_str();
    if let Some(s) = &r.summary {
        let m = s.median;
        let how = if r.burst_starts.is_empty() {
            String::new()
        } else {
            format!(
                "; the mean of {} bursts' medians, which begin at samples 0, {}",
                r.burst_starts.len() + 1,
                r.burst_starts
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        t.row([
            "median".to_string(),
            format!(
                "{} [{}, {}] (95% bootstrap interval{how})",
                fmt_value(m, unit),
                fmt_value(s.ci_low, unit),
                fmt_value(s.ci_high, unit)
            ),
        ]);
        t.row([
            "mean ± stdev".to_string(),
            format!("{} ± {}", fmt_value(s.mean, unit), fmt_value(s.stdev, unit)),
        ]);
        t.row([
            "min … max".to_string(),
            format!("{} … {}", fmt_value(s.min, unit), fmt_value(s.max, unit)),
        ]);
        t.row([
            "samples".to_string(),
            format!(
                "{} ({} outliers by modified z-score; relative noise {:.3}%)",
                s.n,
                s.outliers,
                if s.rel_noise.is_finite() {
                    s.rel_noise
                } else {
                    0.0
                } * 100.0
            ),
        ]);
    }
    if let Some(tp) = &r.throughput {
        for (v, label) in [(tp.gb_per_s, "GB/s"), (tp.tflops, "TFLOP/s")] {
            if let Some(v) = v {
                t.row([label.to_string(), format!("{v:.2}")]);
            }
        }
    }
    if let Some(Some((before, after, max))) = r.sm_clock_mhz {
        t.row([
            "SM clock".to_string(),
            format!(
                "{before} MHz before, {after} after, max {max}{}",
                if r.throttled == Some(true) {
                    " (THROTTLED)"
                } else {
                    ""
                }
            ),
        ]);
    }
    if let Some(Some(checks)) = &r.check {
        for c in checks {
            t.row([
                format!("check {}", c.name),
                format!(
                    "{} of {} outside atol {} + rtol {}; max abs err {:.3e}, max rel err {:.3e}",
                    c.mismatches,
                    c.elements,
                    json!(c.atol),
                    json!(c.rtol),
                    c.max_abs_err,
                    c.max_rel_err
                ),
            ]);
        }
    }
}

fn plain(v: &str) -> String {
    crate::foundation::output::printable(v)
}

fn or_dash(v: Option<&str>) -> String {
    v.map_or_else(|| "-".to_string(), plain)
}

/// `repro show` of a build record.
fn show_build(id: &str, r: &BuildRecord) -> anyhow::Result<u8> {
    let mut t = Table::new();
    t.row(["kind".to_string(), "build".to_string()]);
    t.row(["key".to_string(), id.to_string()]);
    for (k, v) in [
        ("recipe", Some(r.recipe.clone())),
        ("recipe-path", Some(r.recipe_path.clone())),
        ("status", Some(r.status.word().to_string())),
        ("created-at", Some(r.created_at.clone())),
        ("commit", r.commit.clone()),
        ("dirty", r.dirty.clone()),
        ("duration-ms", Some(json!(r.duration_ms).to_string())),
        ("repro-version", Some(r.repro_version.clone())),
    ] {
        if let Some(v) = v {
            t.row([k.to_string(), plain(&v)]);
        }
    }
    let env = &r.environment;
    let mut parts: Vec<String> = [
        Some((
            "kind",
            json!(env.kind).as_str().unwrap_or_default().to_string(),
        )),
        env.shell.clone().map(|v| ("shell", v)),
        env.shell_drv.clone().map(|v| ("shell-drv", v)),
        env.warning.clone().map(|v| ("warning", v)),
    ]
    .into_iter()
    .flatten()
    .map(|(k, v)| format!("{k} {}", plain(&v)))
    .collect();
    parts.sort();
    t.row(["environment".to_string(), parts.join(", ")]);
    if !r.inputs.compiler.is_null() {
        t.row([
            "compiler".to_string(),
            plain(&r.inputs.compiler.to_string()),
        ]);
    }
    t.row(["input files".to_string(), r.inputs.files.len().to_string()]);
    if let Some(c) = r.checked {
        t.row(["checked".to_string(), c.word().to_string()]);
    }
    // A record from elsewhere (a bundle, a pull) is hostile: its reason is shown as text.
    if let Some(reason) = r.failure_reason() {
        t.row([
            "reason".to_string(),
            crate::foundation::output::printable(&reason),
        ]);
    }
    for (name, o) in &r.outputs {
        t.row([
            format!("output {name}"),
            format!("{} bytes, sha256 {}", o.bytes, o.sha256),
        ]);
    }
    for v in &r.over_budget {
        t.row(["over budget".to_string(), plain(v)]);
    }
    let mut out = t.render(0);
    match &r.resources {
        Some(res) => {
            out.push_str("resources:\n");
            out.push_str(&res.render(2));
        }
        None if r.ok() => out
            .push_str("resources: not recorded (a record of an older repro, or no device code)\n"),
        None => {}
    }
    if !r.log.trim().is_empty() {
        out.push_str("compiler log:\n");
        for l in r.log.lines() {
            out.push_str(&format!(
                "  | {}\n",
                crate::foundation::output::printable(l)
            ));
        }
    }
    emit(&out)?;
    Ok(exit::OK)
}

/// `repro show` of a detached bisection: its driver job's state and the steps it has
/// logged so far; once it has ended, the finished bisection's record (or its error).
fn show_detached(
    g: &Globals,
    store: &crate::foundation::store::Store,
    d: &records::DetachedRecord,
) -> anyhow::Result<u8> {
    let state = detach::state(d);
    let progress = detach::progress(d);
    let finished = d
        .record
        .as_deref()
        .and_then(|id| catalog::find(store, id).ok());
    if g.json {
        let mut v = serde_json::to_value(d).expect("a detached record serialises");
        v["kind"] = json!("detached-bisection");
        v["state"] = json!(state);
        v["progress"] = json!(progress);
        v["bisection"] = finished.as_ref().map_or(Value::Null, |(_, r)| r.to_json());
        emit_json(&v)?;
        return Ok(exit::OK);
    }
    let mut t = Table::new();
    t.row(["kind".to_string(), "detached bisection".to_string()]);
    t.row(["id".to_string(), d.id.clone()]);
    t.row([
        "driver".to_string(),
        format!("Slurm job {} ({})", d.job, plain(&state)),
    ]);
    t.row(["submitted-at".to_string(), plain(&d.submitted_at)]);
    t.row(["log".to_string(), plain(&d.log)]);
    if let Some(id) = &d.record {
        t.row(["record".to_string(), id.clone()]);
    }
    if let Some(e) = &d.error {
        t.row(["error".to_string(), plain(e)]);
    }
    let mut out = t.render(0);
    let ended = !crate::engines::bisect::slurm::accounting::UNFINISHED.contains(&state.as_str());
    if d.record.is_none() && d.error.is_none() && ended && state != "unknown" {
        out.push_str(&format!(
            "the driver ended {state} without a result; its log ends:\n"
        ));
        for l in detach::log_tail(d, 5) {
            out.push_str(&format!("  {l}\n"));
        }
    }
    match &finished {
        Some((e, catalog::Record::Bisection(b))) => {
            emit(&out)?;
            emit("\n")?;
            return show_bisection(&e.id, e, b);
        }
        _ => {
            out.push_str(&format!("\nsteps so far ({}):\n", progress.len()));
            for l in &progress {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    emit(&out)?;
    Ok(exit::OK)
}

/// The lines `repro log` shows first: detached bisections not yet finished.
fn detached_lines(
    store: &crate::foundation::store::Store,
) -> Vec<(records::DetachedRecord, String)> {
    detach::list(store)
        .into_iter()
        .filter(|d| d.record.is_none() && d.error.is_none())
        .map(|d| {
            let state = detach::state(&d);
            (d, state)
        })
        .collect()
}

/// `repro show` of a bisection's report.
fn show_bisection(id: &str, e: &catalog::Entry, r: &BisectRecord) -> anyhow::Result<u8> {
    let mut t = Table::new();
    t.row(["kind".to_string(), "bisection".to_string()]);
    t.row(["id".to_string(), id.to_string()]);
    t.row(["created-at".to_string(), or_dash(r.created_at.as_deref())]);
    let q = r.question.as_ref();
    t.row([
        "question".to_string(),
        format!(
            "{} {}",
            or_dash(q.map(|q| q.mode.as_str())),
            or_dash(q.and_then(|q| q.name.as_deref()))
        ),
    ]);
    t.row([
        "good end".to_string(),
        or_dash(q.and_then(|q| q.good.as_deref())),
    ]);
    t.row([
        "bad end".to_string(),
        or_dash(q.and_then(|q| q.bad.as_deref())),
    ]);
    t.row(["outcome".to_string(), plain(&e.summary)]);
    if let Some(c) = &r.culprit {
        let word = if r.find == records::Find::Fixed {
            "first fixed commit"
        } else {
            "first bad commit"
        };
        t.row([
            word.to_string(),
            format!("{} {}", plain(&c.hash), plain(&c.subject)),
        ]);
    }
    if let Some(c) = &r.cluster {
        t.row(["executor".to_string(), plain(&c.executor)]);
        t.row(["placement".to_string(), plain(&c.placement)]);
        t.row(["job options".to_string(), plain(&c.options.join(" "))]);
        t.row(["job environment".to_string(), plain(&c.export.join(" "))]);
    }
    let mut out = t.render(0);
    out.push_str("\nsteps:\n");
    let mut s = Table::new();
    s.row(["COMMIT", "VERDICT", "SUBJECT / DETAIL"]);
    for step in &r.steps {
        let mut what = plain(&step.subject);
        if let Some(d) = &step.detail {
            what.push_str(&format!(" ({})", crate::foundation::output::printable(d)));
        }
        s.row([
            keys::short(&step.commit).to_string(),
            plain(step.verdict.word()),
            what,
        ]);
    }
    out.push_str(&s.render(2));
    if let Some(c) = &r.cluster {
        out.push('\n');
        out.push_str(&crate::app::bisect::cluster_text(c, &r.steps));
    }
    emit(&out)?;
    Ok(exit::OK)
}

/// The first rows of `repro show` for a bisection over toolchain releases.
fn toolchain_header(id: &str, created_at: Option<&str>, mode: &str, recipe: &str) -> Table {
    let mut t = Table::new();
    t.row(["kind".to_string(), "toolchain bisection".to_string()]);
    t.row(["id".to_string(), id.to_string()]);
    t.row(["created-at".to_string(), or_dash(created_at)]);
    t.row([
        "question".to_string(),
        format!("{} {}", plain(mode), plain(recipe)),
    ]);
    t
}

/// `repro show` of a toolchain bisection's report.
fn show_toolchain_bisection(
    id: &str,
    e: &catalog::Entry,
    r: &records::ToolchainBisectRecord,
) -> anyhow::Result<u8> {
    let mut t = toolchain_header(id, r.created_at.as_deref(), &r.mode, &r.recipe);
    t.row(["commit".to_string(), or_dash(r.commit.as_deref())]);
    t.row(["outcome".to_string(), plain(&e.summary)]);
    let mut out = t.render(0);
    out.push_str("\nsteps:\n");
    let mut s = Table::new();
    s.row(["RELEASE", "VERDICT", "DETAIL"]);
    for step in &r.steps {
        s.row([
            plain(&step.commit),
            plain(step.verdict.word()),
            or_dash(step.detail.as_deref()),
        ]);
    }
    out.push_str(&s.render(2));
    emit(&out)?;
    Ok(exit::OK)
}

/// `repro show` of a build bisection over toolchain releases: per target what it found,
/// then every step.
fn show_toolchain_build_bisection(
    id: &str,
    e: &catalog::Entry,
    r: &records::ToolchainBuildBisectRecord,
) -> anyhow::Result<u8> {
    let mut t = toolchain_header(id, r.created_at.as_deref(), &r.mode, &r.recipe);
    t.row(["commit".to_string(), or_dash(r.commit.as_deref())]);
    t.row(["releases from".to_string(), plain(&r.releases_from)]);
    t.row(["outcome".to_string(), plain(&e.summary)]);
    let mut out = t.render(0);
    out.push_str("\nper target:\n");
    let mut a = Table::new();
    a.row(["TARGET", "FIRST BAD", "LAST GOOD", "NOTE"]);
    for ans in &r.answers {
        let note = match (&ans.unchanged, ans.undecided.is_empty()) {
            (Some(u), _) => format!("no change: {}", plain(u)),
            (None, false) => format!("undecided among {}", plain(&ans.undecided.join(", "))),
            (None, true) => String::new(),
        };
        a.row([
            plain(&ans.target),
            or_dash(ans.first_bad.as_deref()),
            or_dash(ans.last_good.as_deref()),
            note,
        ]);
    }
    out.push_str(&a.render(2));
    out.push_str("\nsteps:\n");
    let mut s = Table::new();
    s.row(["RELEASE", "TARGET", "VERDICT", "CACHED", "KEY", "DETAIL"]);
    for step in &r.steps {
        s.row([
            plain(&step.release),
            plain(&step.target),
            step.verdict.word().to_string(),
            if step.cached { "yes" } else { "no" }.to_string(),
            step.key
                .as_deref()
                .map_or("-".to_string(), |k| plain(keys::short(k))),
            or_dash(step.detail.as_deref()),
        ]);
    }
    out.push_str(&s.render(2));
    emit(&out)?;
    Ok(exit::OK)
}

/// Runs `repro compare`.
pub fn compare(g: &Globals, a: CompareArgs) -> anyhow::Result<u8> {
    if let Some((pa, pb)) = profiles(g, &a.a, &a.b)? {
        return compare_profiles(g, &pa, &pb);
    }
    let files: Vec<std::path::PathBuf> = [&a.a, &a.b]
        .into_iter()
        .filter_map(|t| operand_file(t).map(Into::into))
        .collect();
    a.export.check(&g.cwd, &files)?;
    let (ida, ra) = operand(g, &a.a)?;
    let (idb, rb) = operand(g, &a.b)?;
    comparable(&ida, &ra, &idb, &rb)?;
    let seed = keys::key_of(&json!([ida, idb]))
        .bytes()
        .fold(0u64, |h, b| h.rotate_left(8) ^ u64::from(b));
    let c = stats::compare_bursts(
        (&ra.samples, &ra.burst_starts),
        (&rb.samples, &rb.burst_starts),
        a.alpha,
        a.threshold,
        seed,
    )
    .context("failed to compare the samples")?;
    let rows = vec![
        export::Row::from_record(&ida, &ra),
        export::Row::from_record(&idb, &rb),
    ];
    a.export
        .write(&g.cwd, &rows)
        .context("failed to write an export")?;
    let mut warnings = compare_warnings(&ra, &rb);
    if let Some(k) = c.bootstrap_subsample {
        // The bound keeps a comparison of millions of samples to seconds; say what it did.
        warnings.push(format!(
            "a side has more than {k} samples: the 95% intervals were bootstrapped from {k} of its samples, evenly spaced (wider than a full bootstrap; the medians, the ratio and the rank tests use every sample)"
        ));
    }
    let failed = a.fail_on.is_some_and(|f| fails(&c, f, a.threshold));
    let code = if failed { exit::MISMATCH } else { exit::OK };
    if g.json {
        emit_json(
            &json!({ "schema": 1, "a": ida, "b": idb, "comparison": c, "threshold": a.threshold, "alpha": a.alpha,
                "fail-on": a.fail_on.map(|f| format!("{f:?}").to_lowercase()), "failed": failed, "warnings": warnings }),
        )?;
        return Ok(code);
    }
    let view = CompareView {
        sides: [("A", &ida, &ra), ("B", &idb, &rb)],
        c: &c,
        args: &a,
        failed,
        warnings,
    };
    let out = if a.format == Format::Md {
        view.markdown()
    } else {
        view.text()
    };
    emit(&out)?;
    Ok(code)
}

/// Refuses two results that cannot be compared: too few samples, a sample that is not a
/// positive measurement, or different units.
fn comparable(ida: &str, ra: &ResultRecord, idb: &str, rb: &ResultRecord) -> anyhow::Result<()> {
    if ra.samples.len() < 2 || rb.samples.len() < 2 {
        return Err(
            UserError::usage("both results need at least two samples to be compared")
                .hint("a result with a failed check or a crash has no samples; see `repro show`")
                .into(),
        );
    }
    for (id, samples) in [(ida, &ra.samples), (idb, &rb.samples)] {
        if let Some(x) = samples.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
            return Err(UserError::usage(format!(
                "result {} has a sample of {x}: compare judges ratios of positive measurements",
                keys::short(id)
            ))
            .hint("`repro store verify` reports such a result; record a metric that is greater than 0 (a time, a throughput)")
            .into());
        }
    }
    if ra.unit != rb.unit {
        return Err(UserError::usage(format!(
            "the results measure different things ({} vs {})",
            json!(ra.unit),
            json!(rb.unit)
        ))
        .into());
    }
    Ok(())
}

/// What the comparison holds but does not judge: different experiments, different GPUs.
fn compare_warnings(ra: &ResultRecord, rb: &ResultRecord) -> Vec<String> {
    let mut warnings = Vec::new();
    if ra.key != rb.key && ra.name != rb.name {
        warnings.push(
            "the two results are of different experiments (recipe, parameters or settings differ)"
                .to_string(),
        );
    }
    if !ra.machine.is_empty() && !rb.machine.is_empty() && ra.machine != rb.machine {
        warnings.push(format!(
            "measured on different GPUs ({} vs {})",
            json!(ra.machine),
            json!(rb.machine)
        ));
    }
    warnings
}

/// A comparison to render for a person: both sides, the statistics and the gate.
struct CompareView<'a> {
    sides: [(&'static str, &'a String, &'a ResultRecord); 2],
    c: &'a stats::Comparison,
    args: &'a CompareArgs,
    failed: bool,
    warnings: Vec<String>,
}

/// The words of a comparison: the direction and factor, the verdict, why, and the gate.
struct CompareWords {
    word: &'static str,
    factor: f64,
    verdict: &'static str,
    why: String,
    gate: Option<String>,
}

impl CompareView<'_> {
    fn unit(&self) -> &str {
        self.sides[0].2.unit.as_str()
    }

    fn words(&self) -> CompareWords {
        let (c, a) = (self.c, self.args);
        let times = matches!(self.unit(), "us" | "ms" | "s");
        let (word, factor) = if c.ratio >= 1.0 {
            (if times { "slower" } else { "larger" }, c.ratio)
        } else {
            (if times { "faster" } else { "smaller" }, 1.0 / c.ratio)
        };
        let verdict = match c.verdict {
            Verdict::Faster => {
                if times {
                    "faster"
                } else {
                    "smaller"
                }
            }
            Verdict::Slower => {
                if times {
                    "slower"
                } else {
                    "larger"
                }
            }
            Verdict::Same => "same",
            Verdict::Unknown => "unknown",
        };
        let why = match c.verdict {
            Verdict::Same => format!(" (the interval lies within ±{:.1}%)", a.threshold * 100.0),
            Verdict::Unknown => format!(
                " (not significant, but the interval is wider than ±{:.1}%: take more samples)",
                a.threshold * 100.0
            ),
            _ => String::new(),
        };
        let gate = a.fail_on.map(|f| {
            let dir = format!("{f:?}").to_lowercase();
            if self.failed {
                format!(
                    "FAILED: B is significantly {word} than A by more than {:.1}% (--fail-on {dir})",
                    a.threshold * 100.0
                )
            } else {
                format!(
                    "passed: no significant {dir} change beyond {:.1}% (--fail-on {dir})",
                    a.threshold * 100.0
                )
            }
        });
        CompareWords {
            word,
            factor,
            verdict,
            why,
            gate,
        }
    }

    /// A side's label: an nvbench operand by its full name, a result by its short ID.
    fn label(id: &str, r: &ResultRecord) -> String {
        if r.kind == "nvbench" {
            id.to_string()
        } else {
            keys::short(id).to_string()
        }
    }

    /// A side's median, interval and sample count.
    fn ci(&self, r: &ResultRecord) -> (String, String, String) {
        let unit = self.unit();
        match &r.summary {
            Some(s) => (
                fmt_value(s.median, unit),
                format!(
                    "[{}, {}]",
                    fmt_value(s.ci_low, unit),
                    fmt_value(s.ci_high, unit)
                ),
                s.n.to_string(),
            ),
            None => (
                fmt_value(0.0, unit),
                format!("[{0}, {0}]", fmt_value(0.0, unit)),
                "null".into(),
            ),
        }
    }

    /// `--format md`.
    fn markdown(&self) -> String {
        let (c, w) = (self.c, self.words());
        let mut out = String::from(
            "| | result | name | params | median | 95% CI | n |\n|---|---|---|---|---:|---|---:|\n",
        );
        for (l, id, r) in self.sides {
            let (m, interval, n) = self.ci(r);
            out.push_str(&format!(
                "| {l} | `{}` | {} | {} | {m} | {interval} | {n} |\n",
                Self::label(id, r).replace('|', "\\|"),
                r.name.replace('|', "\\|"),
                r.params_text().replace('|', "\\|")
            ));
        }
        out.push_str(&format!(
            "\n**{}**{}: B is {:.3}x {} than A (ratio B/A {:.4}, 95% CI [{:.4}, {:.4}]; p = {:.2e}, alpha {})\n",
            w.verdict, w.why, w.factor, w.word, c.ratio, c.ratio_ci_low, c.ratio_ci_high, c.p, self.args.alpha
        ));
        if let Some(gate) = &w.gate {
            out.push_str(&format!("\n{gate}\n"));
        }
        for warning in &self.warnings {
            out.push_str(&format!("\n> warning: {warning}\n"));
        }
        out
    }

    /// The table for a terminal.
    fn text(&self) -> String {
        let (c, w) = (self.c, self.words());
        let style = Style::for_stdout();
        let mut t = Table::new();
        t.row(["", "RESULT", "NAME", "PARAMS", "MEDIAN", "95% CI", "N"]);
        for (l, id, r) in self.sides {
            let (m, interval, n) = self.ci(r);
            t.row([
                l.to_string(),
                Self::label(id, r),
                r.name.clone(),
                r.params_text(),
                m,
                interval,
                n,
            ]);
        }
        let mut out = t.render(0);
        out.push_str(&format!(
            "\nB is {:.3}x {} than A (ratio B/A {:.4}, 95% CI [{:.4}, {:.4}])\n",
            w.factor, w.word, c.ratio, c.ratio_ci_low, c.ratio_ci_high
        ));
        out.push_str(&format!(
            "p = {:.2e} (Mann-Whitney U {:.2e}, Kolmogorov-Smirnov {:.2e}; alpha {})\n",
            c.p, c.p_mann_whitney, c.p_ks, self.args.alpha
        ));
        let v = match c.verdict {
            Verdict::Faster | Verdict::Same => style.good(w.verdict),
            Verdict::Slower => style.error(w.verdict),
            Verdict::Unknown => style.warn(w.verdict),
        };
        out.push_str(&format!("verdict: {v}{}\n", w.why));
        if let Some(gate) = w.gate {
            out.push_str(&format!(
                "{}\n",
                if self.failed {
                    style.error(&gate)
                } else {
                    style.good(&gate)
                }
            ));
        }
        for warning in &self.warnings {
            out.push_str(&format!("{} {warning}\n", style.warn("warning:")));
        }
        out
    }
}

/// Both operands as profiles, when the first names one (`None`: compare results).
fn profiles(
    g: &Globals,
    a: &str,
    b: &str,
) -> anyhow::Result<Option<(records::ProfileRecord, records::ProfileRecord)>> {
    let store = g.store();
    let profile = |id: &str| match catalog::find(&store, id) {
        Ok((_, catalog::Record::Profile(p))) => Some(*p),
        _ => None,
    };
    match (profile(a), profile(b)) {
        (Some(pa), Some(pb)) => Ok(Some((pa, pb))),
        (None, None) => Ok(None),
        _ => Err(
            UserError::usage("one operand is a profile and the other is not")
                .hint("compare two profiles (`repro log --kind profile`), or two results")
                .into(),
        ),
    }
}

/// A metric's value as text.
fn metric_text(m: Option<&records::ProfileMetric>) -> String {
    match m {
        Some(records::ProfileMetric {
            value: Some(v),
            unit,
            ..
        }) => format!("{} {unit}", fmt_number(*v)),
        Some(records::ProfileMetric { text: Some(t), .. }) => plain(t),
        _ => "-".into(),
    }
}

fn fmt_number(v: f64) -> String {
    if v.abs() >= 1e6 || (v != 0.0 && v.abs() < 1e-2) {
        format!("{v:.4e}")
    } else {
        format!("{v:.2}")
    }
}

/// `repro compare` of two profiles: every metric side by side, with B/A.
fn compare_profiles(
    g: &Globals,
    a: &records::ProfileRecord,
    b: &records::ProfileRecord,
) -> anyhow::Result<u8> {
    let names: std::collections::BTreeSet<&String> =
        a.metrics.keys().chain(b.metrics.keys()).collect();
    if g.json {
        let rows: Vec<Value> = names
            .iter()
            .map(|n| {
                json!({"metric": n, "a": a.metrics.get(*n), "b": b.metrics.get(*n),
                "ratio": a.value(n).zip(b.value(n)).filter(|(x, _)| *x != 0.0).map(|(x, y)| y / x)})
            })
            .collect();
        emit_json(
            &json!({"schema": 1, "kind": "profile-comparison", "a": a.key, "b": b.key, "metrics": rows}),
        )?;
        return Ok(exit::OK);
    }
    let mut t = Table::new();
    t.row(["METRIC", "A", "B", "B/A"]);
    for n in names {
        let ratio = match (a.value(n), b.value(n)) {
            (Some(x), Some(y)) if x != 0.0 => format!("{:.3}", y / x),
            _ => "-".into(),
        };
        t.row([
            n.clone(),
            metric_text(a.metrics.get(n)),
            metric_text(b.metrics.get(n)),
            ratio,
        ]);
    }
    let mut out = format!(
        "A: {} {} ({})\nB: {} {} ({})\n",
        a.recipe,
        records::params_text(&a.params),
        keys::short(&a.key),
        b.recipe,
        records::params_text(&b.params),
        keys::short(&b.key)
    );
    if a.machine != b.machine {
        out.push_str(&format!(
            "warning: profiled on different GPUs ({} vs {})\n",
            a.machine, b.machine
        ));
    }
    out.push_str(&t.render(0));
    emit(&out)?;
    Ok(exit::OK)
}

/// `repro show` of a profile.
fn show_profile(
    store: &crate::foundation::store::Store,
    id: &str,
    p: &records::ProfileRecord,
) -> anyhow::Result<u8> {
    let mut t = Table::new();
    t.row(["kind".to_string(), "profile".to_string()]);
    t.row(["id".to_string(), id.to_string()]);
    for (k, v) in [
        ("recipe", Some(p.recipe.clone())),
        ("kernel", Some(p.kernel.clone())),
        ("params", Some(records::params_text(&p.params))),
        ("build-key", Some(p.build_key.clone())),
        ("machine", Some(p.machine.clone())),
        ("ncu", Some(p.ncu_version.clone())),
        ("set", p.set.clone()),
        ("cache-control", Some(p.cache_control.clone())),
        ("commit", p.commit.clone()),
        ("created-at", Some(p.created_at.clone())),
    ] {
        if let Some(v) = v {
            t.row([k.to_string(), plain(&v)]);
        }
    }
    let results = crate::engines::profile::results_of_profile(store, p);
    if !results.is_empty() {
        let ids: Vec<&str> = results.iter().map(|r| keys::short(r)).collect();
        t.row(["results".to_string(), ids.join(" ")]);
    }
    for (name, o) in &p.outputs {
        t.row([
            format!("output {name}"),
            format!("{} bytes, sha256 {}", o.bytes, o.sha256),
        ]);
    }
    let mut out = t.render(0);
    out.push_str("metrics:\n");
    let mut m = Table::new();
    for (name, metric) in &p.metrics {
        m.row([plain(name), metric_text(Some(metric))]);
    }
    out.push_str(&m.render(2));
    emit(&out)?;
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comparison(ratio: f64, verdict: Verdict) -> stats::Comparison {
        stats::Comparison {
            bootstrap_subsample: None,
            ratio,
            ratio_ci_low: ratio * 0.99,
            ratio_ci_high: ratio * 1.01,
            p_mann_whitney: 1e-6,
            p_ks: 1e-6,
            p: 1e-6,
            verdict,
        }
    }

    #[test]
    fn the_gate_fails_only_significant_changes_beyond_the_threshold_in_its_direction() {
        let slow = comparison(1.10, Verdict::Slower);
        let fast = comparison(0.90, Verdict::Faster);
        let small = comparison(1.01, Verdict::Slower);
        let unknown = comparison(1.10, Verdict::Unknown);
        assert!(fails(&slow, FailOn::Slower, 0.05));
        assert!(!fails(&slow, FailOn::Faster, 0.05));
        assert!(fails(&slow, FailOn::Any, 0.05));
        assert!(fails(&fast, FailOn::Faster, 0.05));
        assert!(!fails(&fast, FailOn::Slower, 0.05));
        assert!(!fails(&small, FailOn::Slower, 0.05));
        assert!(fails(&small, FailOn::Slower, 0.0));
        assert!(!fails(&unknown, FailOn::Any, 0.0));
    }
}
