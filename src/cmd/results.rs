//! `repro log`, `repro show ID`, `repro compare A B`: list, inspect and compare results.

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::bench;
use crate::catalog;
use crate::cli::{Globals, emit, emit_json};
use crate::cmd::bench::{fmt_value, parse_fraction};
use crate::error::UserError;
use crate::exit;
use crate::export;
use crate::keys;
use crate::output::{Style, Table};
use crate::stats::{self, Verdict};

/// Arguments of `repro log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Only records of these kinds (repeat or separate with commas) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    kind: Vec<catalog::Kind>,
    /// Only records of this recipe (or command-bench name, or a bisection's recipe).
    #[arg(long, value_name = "NAME")]
    recipe: Option<String>,
    /// Only records at a commit starting with this (a bisection's: its first bad commit).
    #[arg(long, value_name = "PREFIX")]
    commit: Option<String>,
    /// Only results from machines whose GPU name contains this (other kinds have none).
    #[arg(long)]
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
    #[arg(value_name = "ID")]
    id: String,
}

/// Arguments of `repro compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The baseline result (ID or unique prefix).
    a: String,
    /// The candidate result.
    b: String,
    /// Call a change "same" only if the ratio's interval lies within ±THRESHOLD.
    #[arg(long, default_value = "2%", value_parser = parse_fraction)]
    threshold: f64,
    /// Significance level of the rank tests.
    #[arg(long, default_value_t = 0.01)]
    alpha: f64,
    #[command(flatten)]
    export: export::ExportArgs,
}

fn find(g: &Globals, id: &str) -> anyhow::Result<(String, Value)> {
    bench::find_result(&g.store(), id).map_err(|e| {
        UserError::usage(e)
            .hint("`repro log` lists results with their IDs")
            .into()
    })
}

/// Runs `repro log`.
pub fn log(g: &Globals, a: LogArgs) -> anyhow::Result<u8> {
    let store = g.store();
    store.check_schema()?;
    let records: Vec<(catalog::Entry, Value)> = catalog::list(&store, &a.kind)
        .into_iter()
        .filter(|(e, r)| {
            a.recipe
                .as_deref()
                .is_none_or(|n| e.name == n || r["recipe"] == n)
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
                r["machine"]
                    .as_str()
                    .is_some_and(|x| x.to_lowercase().contains(&m.to_lowercase()))
            })
        })
        .take(a.limit)
        .collect();
    if g.json {
        let list: Vec<Value> = records
            .iter()
            .map(|(e, r)| {
                let mut v = serde_json::to_value(e).expect("entries serialise");
                if e.kind == catalog::Kind::Result {
                    let s = &r["summary"];
                    for (k, x) in [
                        ("key", &r["key"]),
                        ("params", &r["params"]),
                        ("median", &s["median"]),
                        ("ci-low", &s["ci-low"]),
                        ("ci-high", &s["ci-high"]),
                        ("unit", &r["unit"]),
                        ("machine", &r["machine"]),
                    ] {
                        v[k] = x.clone();
                    }
                }
                v
            })
            .collect();
        emit_json(&json!({ "schema": 2, "records": list }))?;
        return Ok(exit::OK);
    }
    if records.is_empty() {
        if !g.quiet {
            emit("nothing recorded (`repro build`, `repro bench` and `repro bisect` record)\n")?;
        }
        return Ok(exit::OK);
    }
    let mut t = Table::new();
    t.row(["KIND", "ID", "DATE", "NAME", "STATUS", "COMMIT", "SUMMARY"]);
    for (e, _) in &records {
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
            crate::output::printable(&e.name.chars().take(40).collect::<String>()),
            e.status.clone(),
            e.commit
                .as_deref()
                .map_or("-".into(), |c| c.chars().take(10).collect()),
            crate::output::printable(&e.summary),
        ]);
    }
    emit(&t.render(0))?;
    Ok(exit::OK)
}

/// Runs `repro show`: any record, by a prefix of its ID.
pub fn show(g: &Globals, a: ShowArgs) -> anyhow::Result<u8> {
    let store = g.store();
    store.check_schema()?;
    let (entry, r) = catalog::find(&store, &a.id).map_err(|e| {
        UserError::usage(e.to_string()).hint("`repro log` lists every record with its ID")
    })?;
    let id = entry.id.clone();
    if g.json {
        let mut r = r;
        r["id"] = json!(id);
        r["kind"] = json!(entry.kind.word());
        emit_json(&r)?;
        return Ok(exit::OK);
    }
    match entry.kind {
        catalog::Kind::Result => {}
        catalog::Kind::Build => return show_build(&id, &r),
        catalog::Kind::Bisection => return show_bisection(&id, &entry, &r),
    }
    let unit = r["unit"].as_str().unwrap_or("us");
    let mut t = Table::new();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    t.row(["id".to_string(), id.clone()]);
    t.row(["experiment key".to_string(), text(&r["key"])]);
    for k in [
        "name",
        "command",
        "metric",
        "recipe-path",
        "verdict",
        "detail",
        "created-at",
        "commit",
        "machine",
        "build-key",
        "artifact",
    ] {
        if !r[k].is_null() {
            t.row([k.to_string(), text(&r[k])]);
        }
    }
    t.row(["params".to_string(), bench::params_text(&r["params"])]);
    if let Some(l) = r["launch"].as_object() {
        t.row([
            "launch".to_string(),
            format!(
                "{} grid {} block {} shared {} B",
                text(&l["kernel"]),
                l["grid"],
                l["block"],
                l["shared_mem"]
            ),
        ]);
    }
    if !r["settings"].is_null() {
        let s = &r["settings"];
        t.row([
            "settings".to_string(),
            format!(
                "mode {}, max noise {}%, warm-up {} ms, device {}",
                text(&s["mode"]),
                s["max-noise"].as_f64().unwrap_or(0.0) * 100.0,
                s["warmup-ms"],
                s["device"]
            ),
        ]);
    }
    let s = &r["summary"];
    if let Some(m) = s["median"].as_f64() {
        t.row([
            "median".to_string(),
            format!(
                "{} [{}, {}] (95% bootstrap interval)",
                fmt_value(m, unit),
                fmt_value(s["ci-low"].as_f64().unwrap_or(m), unit),
                fmt_value(s["ci-high"].as_f64().unwrap_or(m), unit)
            ),
        ]);
        t.row([
            "mean ± stdev".to_string(),
            format!(
                "{} ± {}",
                fmt_value(s["mean"].as_f64().unwrap_or(0.0), unit),
                fmt_value(s["stdev"].as_f64().unwrap_or(0.0), unit)
            ),
        ]);
        t.row([
            "min … max".to_string(),
            format!(
                "{} … {}",
                fmt_value(s["min"].as_f64().unwrap_or(0.0), unit),
                fmt_value(s["max"].as_f64().unwrap_or(0.0), unit)
            ),
        ]);
        t.row([
            "samples".to_string(),
            format!(
                "{} ({} outliers by modified z-score; relative noise {:.3}%)",
                s["n"],
                s["outliers"],
                s["rel-noise"].as_f64().unwrap_or(0.0) * 100.0
            ),
        ]);
    }
    for (k, label) in [("gb-per-s", "GB/s"), ("tflops", "TFLOP/s")] {
        if let Some(v) = r["throughput"][k].as_f64() {
            t.row([label.to_string(), format!("{v:.2}")]);
        }
    }
    if let Some(c) = r["sm-clock-mhz"].as_array() {
        t.row([
            "SM clock".to_string(),
            format!(
                "{} MHz before, {} after, max {}{}",
                c[0],
                c[1],
                c[2],
                if r["throttled"] == true {
                    " (THROTTLED)"
                } else {
                    ""
                }
            ),
        ]);
    }
    if let Some(checks) = r["check"].as_array() {
        for c in checks {
            t.row([
                format!("check {}", text(&c["name"])),
                format!(
                    "{} of {} outside atol {} + rtol {}; max abs err {:.3e}, max rel err {:.3e}",
                    c["mismatches"],
                    c["elements"],
                    c["atol"],
                    c["rtol"],
                    c["max-abs-err"].as_f64().unwrap_or(0.0),
                    c["max-rel-err"].as_f64().unwrap_or(0.0)
                ),
            ]);
        }
    }
    emit(&t.render(0))?;
    Ok(exit::OK)
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => crate::output::printable(s),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// `repro show` of a build record.
fn show_build(id: &str, r: &Value) -> anyhow::Result<u8> {
    let mut t = Table::new();
    t.row(["kind".to_string(), "build".to_string()]);
    t.row(["key".to_string(), id.to_string()]);
    for k in [
        "recipe",
        "recipe-path",
        "status",
        "created-at",
        "commit",
        "dirty",
        "duration-ms",
        "repro-version",
    ] {
        if !r[k].is_null() {
            t.row([k.to_string(), plain(&r[k])]);
        }
    }
    if let Some(env) = r["environment"].as_object() {
        let mut parts: Vec<String> = env
            .iter()
            .map(|(k, v)| format!("{k} {}", plain(v)))
            .collect();
        parts.sort();
        t.row(["environment".to_string(), parts.join(", ")]);
    }
    if !r["inputs"]["compiler"].is_null() {
        t.row(["compiler".to_string(), plain(&r["inputs"]["compiler"])]);
    }
    if let Some(files) = r["inputs"]["files"].as_object() {
        t.row(["input files".to_string(), files.len().to_string()]);
    }
    if let Some(outs) = r["outputs"].as_object() {
        for (name, o) in outs {
            t.row([
                format!("output {name}"),
                format!(
                    "{} bytes, sha256 {}",
                    o["bytes"],
                    o["sha256"].as_str().unwrap_or("-")
                ),
            ]);
        }
    }
    let mut out = t.render(0);
    if let Some(log) = r["log"].as_str().filter(|l| !l.trim().is_empty()) {
        out.push_str("compiler log:\n");
        for l in log.lines() {
            out.push_str(&format!("  | {}\n", crate::output::printable(l)));
        }
    }
    emit(&out)?;
    Ok(exit::OK)
}

/// `repro show` of a bisection's report.
fn show_bisection(id: &str, e: &catalog::Entry, r: &Value) -> anyhow::Result<u8> {
    let mut t = Table::new();
    t.row(["kind".to_string(), "bisection".to_string()]);
    t.row(["id".to_string(), id.to_string()]);
    t.row(["created-at".to_string(), plain(&r["created-at"])]);
    let q = &r["question"];
    t.row([
        "question".to_string(),
        format!("{} {}", plain(&q["mode"]), plain(&q["name"])),
    ]);
    t.row(["good end".to_string(), plain(&q["good"])]);
    t.row(["bad end".to_string(), plain(&q["bad"])]);
    t.row(["outcome".to_string(), e.summary.clone()]);
    if r["culprit"].is_object() {
        let c = &r["culprit"];
        let word = if r["find"] == "fixed" {
            "first fixed commit"
        } else {
            "first bad commit"
        };
        t.row([
            word.to_string(),
            format!("{} {}", plain(&c["hash"]), plain(&c["subject"])),
        ]);
    }
    let mut out = t.render(0);
    if let Some(steps) = r["steps"].as_array() {
        out.push_str("\nsteps:\n");
        let mut s = Table::new();
        s.row(["COMMIT", "VERDICT", "SUBJECT / DETAIL"]);
        for step in steps {
            let mut what = plain(&step["subject"]);
            if let Some(d) = step["detail"].as_str() {
                what.push_str(&format!(" ({})", crate::output::printable(d)));
            }
            s.row([
                step["commit"]
                    .as_str()
                    .map_or("-".into(), |c| keys::short(c).to_string()),
                plain(&step["verdict"]),
                what,
            ]);
        }
        out.push_str(&s.render(2));
    }
    emit(&out)?;
    Ok(exit::OK)
}

fn samples(r: &Value) -> Vec<f64> {
    r["samples"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// Runs `repro compare`.
pub fn compare(g: &Globals, a: CompareArgs) -> anyhow::Result<u8> {
    let (ida, ra) = find(g, &a.a)?;
    let (idb, rb) = find(g, &a.b)?;
    let (sa, sb) = (samples(&ra), samples(&rb));
    if sa.len() < 2 || sb.len() < 2 {
        return Err(
            UserError::usage("both results need at least two samples to be compared")
                .hint("a result with a failed check or a crash has no samples; see `repro show`")
                .into(),
        );
    }
    if ra["unit"] != rb["unit"] {
        return Err(UserError::usage(format!(
            "the results measure different things ({} vs {})",
            ra["unit"], rb["unit"]
        ))
        .into());
    }
    let seed = keys::key_of(&json!([ida, idb]))
        .bytes()
        .fold(0u64, |h, b| h.rotate_left(8) ^ u64::from(b));
    let c = stats::compare(&sa, &sb, a.alpha, a.threshold, seed)
        .context("failed to compare the samples")?;
    let rows = vec![
        export::Row::from_record(&ida, &ra),
        export::Row::from_record(&idb, &rb),
    ];
    a.export
        .write(&g.cwd, &rows)
        .context("failed to write an export")?;
    let mut warnings = Vec::new();
    if ra["key"] != rb["key"] && ra["name"] != rb["name"] {
        warnings.push(
            "the two results are of different experiments (recipe, parameters or settings differ)"
                .to_string(),
        );
    }
    if ra["fingerprint"].is_object() && ra["machine"] != rb["machine"] {
        warnings.push(format!(
            "measured on different GPUs ({} vs {})",
            ra["machine"], rb["machine"]
        ));
    }
    if g.json {
        emit_json(
            &json!({ "schema": 1, "a": ida, "b": idb, "comparison": c, "threshold": a.threshold, "alpha": a.alpha, "warnings": warnings }),
        )?;
        return Ok(exit::OK);
    }
    let style = Style::for_stdout();
    let unit = ra["unit"].as_str().unwrap_or("us");
    let mut t = Table::new();
    t.row(["", "RESULT", "NAME", "PARAMS", "MEDIAN", "95% CI", "N"]);
    for (label, id, r) in [("A", &ida, &ra), ("B", &idb, &rb)] {
        let s = &r["summary"];
        let m = s["median"].as_f64().unwrap_or(0.0);
        t.row([
            label.to_string(),
            keys::short(id).to_string(),
            r["name"].as_str().unwrap_or_default().to_string(),
            bench::params_text(&r["params"]),
            fmt_value(m, unit),
            format!(
                "[{}, {}]",
                fmt_value(s["ci-low"].as_f64().unwrap_or(m), unit),
                fmt_value(s["ci-high"].as_f64().unwrap_or(m), unit)
            ),
            s["n"].to_string(),
        ]);
    }
    let mut out = t.render(0);
    let times = matches!(unit, "us" | "ms" | "s");
    let (word, factor) = if c.ratio >= 1.0 {
        (if times { "slower" } else { "larger" }, c.ratio)
    } else {
        (if times { "faster" } else { "smaller" }, 1.0 / c.ratio)
    };
    out.push_str(&format!(
        "\nB is {factor:.3}x {word} than A (ratio B/A {:.4}, 95% CI [{:.4}, {:.4}])\n",
        c.ratio, c.ratio_ci_low, c.ratio_ci_high
    ));
    out.push_str(&format!(
        "p = {:.2e} (Mann-Whitney U {:.2e}, Kolmogorov-Smirnov {:.2e}; alpha {})\n",
        c.p, c.p_mann_whitney, c.p_ks, a.alpha
    ));
    let v = match c.verdict {
        Verdict::Faster => style.good(if times { "faster" } else { "smaller" }),
        Verdict::Slower => style.error(if times { "slower" } else { "larger" }),
        Verdict::Same => style.good("same"),
        Verdict::Unknown => style.warn("unknown"),
    };
    let why = match c.verdict {
        Verdict::Same => format!(" (the interval lies within ±{:.1}%)", a.threshold * 100.0),
        Verdict::Unknown => format!(
            " (not significant, but the interval is wider than ±{:.1}%: take more samples)",
            a.threshold * 100.0
        ),
        _ => String::new(),
    };
    out.push_str(&format!("verdict: {v}{why}\n"));
    for w in warnings {
        out.push_str(&format!("{} {w}\n", style.warn("warning:")));
    }
    emit(&out)?;
    Ok(exit::OK)
}
