//! `repro plot`: SVG plots of recorded results (across commits, or over a parameter sweep),
//! of one metric of recorded profiles (`--metric`, the same two ways), and of bisection
//! reports (`repro bisect --json > report.json`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::Value;

use crate::app::context::{Globals, emit};
use crate::engines::catalog;
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::plot::{self, Marker, Point};
use crate::foundation::records::{self, BisectRecord, RecordError, ResultRecord};

/// Arguments of `repro plot`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recipe (or command-bench name) whose recorded results to plot.
    #[arg(required_unless_present = "bisect", value_parser = crate::app::context::non_empty())]
    name: Option<String>,
    /// Plot a bisection instead: its report (the JSON of `repro bisect --json`), or the ID
    /// of a recorded bisection (`repro log --kind bisection`).
    #[arg(long, value_name = "FILE|ID", conflicts_with_all = ["name", "sweep"], value_parser = crate::app::context::non_empty_path())]
    bisect: Option<PathBuf>,
    /// Plot the results over this parameter (the newest result at each value).
    #[arg(long, value_name = "PARAM", value_parser = crate::app::context::non_empty())]
    sweep: Option<String>,
    /// Plot this metric of the recipe's recorded profiles (`repro profile`) instead of
    /// the results' medians (an ncu metric name, e.g. `dram__bytes.sum.per_second`).
    #[arg(long, value_name = "METRIC", conflicts_with = "bisect", value_parser = crate::app::context::non_empty())]
    metric: Option<String>,
    /// The SVG file to write.
    #[arg(short, long, value_name = "FILE", value_parser = crate::app::context::non_empty_path())]
    output: PathBuf,
}

/// A bisection report: a file written by `repro bisect --json`, or a recorded bisection's ID.
fn load_bisection(g: &Globals, path: &std::path::Path) -> anyhow::Result<BisectRecord> {
    let file = g.cwd.join(path);
    let text = path.to_string_lossy();
    Ok(
        if !file.exists() && text.len() >= 4 && text.chars().all(|c| c.is_ascii_hexdigit()) {
            // A recorded bisection, by ID.
            match crate::engines::catalog::find(&g.store(), &text) {
                Ok((_, crate::engines::catalog::Record::Bisection(r))) => *r,
                Ok((
                    _,
                    crate::engines::catalog::Record::ToolchainBisection(_)
                    | crate::engines::catalog::Record::ToolchainBuildBisection(_),
                )) => {
                    return Err(UserError::usage(format!(
                        "{text} is a bisection over toolchain releases, which is not plotted"
                    ))
                    .hint("`repro show ID` lists its steps")
                    .into());
                }
                Ok((e, _)) => {
                    return Err(UserError::usage(format!(
                        "{text} is a {}, not a bisection",
                        e.kind.word()
                    ))
                    .hint("`repro log --kind bisection` lists recorded bisections")
                    .into());
                }
                Err(e) => {
                    return Err(crate::foundation::error::Hinted::new(
                        e,
                        "`repro log --kind bisection` lists recorded bisections",
                    )
                    .into());
                }
            }
        } else {
            // A report is another run's output, perhaps another machine's: bounded like a
            // record in the store, and a directory, FIFO or device is refused (exit 2).
            let bytes = crate::foundation::fsutil::read_bounded(
                &file,
                crate::foundation::store::MAX_RECORD_BYTES,
            )
            .map_err(|e| {
                UserError::with_code(
                    crate::foundation::fsutil::read_exit_code(&e),
                    format!("cannot read {}: {e}", path.display()),
                )
                .hint(
                    "pass a report written by `repro bisect ... --json > FILE`, or a recorded bisection's ID",
                )
            })?;
            let what = path.display().to_string();
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|e| RecordError::Shape {
                    what: what.clone(),
                    at: String::new(),
                    source: e,
                })
                .and_then(|v| BisectRecord::from_report(&v, &what))
                .map_err(|e| {
                    UserError::usage(format!("{e}; it is not a bisection report"))
                        .hint("write one with `repro bisect ... --json > FILE`")
                })?
        },
    )
}

/// A bisection's steps: its report file, or a recorded bisection's ID.
fn plot_bisection(g: &Globals, path: &std::path::Path) -> anyhow::Result<(String, usize)> {
    let report = load_bisection(g, path)?;
    let points: Vec<Point> = report
        .steps
        .iter()
        .map(|s| {
            // The interval of the ratio, carried over to the median.
            let ci = match (s.median, s.ratio) {
                (Some(m), Some((r0, lo, hi))) if r0 > 0.0 => Some((m * lo / r0, m * hi / r0)),
                _ => None,
            };
            Point {
                x: s.index as f64,
                label: s.commit.chars().take(8).collect(),
                y: s.median,
                ci,
                verdict: s.verdict.to_string(),
            }
        })
        .collect();
    let last = report.commits.max(1) as f64 - 1.0;
    let mut markers = vec![
        Marker {
            x: 0.0,
            label: "good end".into(),
            colour: "#2e7d32",
        },
        Marker {
            x: last,
            label: "bad end".into(),
            colour: "#c62828",
        },
    ];
    if let records::Outcome::FirstBad { index } = report.outcome {
        markers.push(Marker {
            x: index as f64,
            label: format!(
                "culprit {}",
                report.culprit.as_ref().map_or("", |c| c.subject.as_str())
            ),
            colour: "#6a1b9a",
        });
    }
    let title = format!(
        "bisection: {} commits, {} evaluated",
        report.commits, report.evaluated
    );
    Ok((
        plot::render(
            &title,
            "commit (position in the range)",
            // Build, check and script bisections are not timed: their points are verdicts.
            if points.iter().any(|p| p.y.is_some()) {
                "median of per-process medians"
            } else {
                "verdict only (this mode is not timed)"
            },
            &points,
            &markers,
            false,
        ),
        points.len(),
    ))
}

/// One recorded measurement to plot: a result's median or a profile's metric.
struct Item {
    commit: Option<String>,
    params: BTreeMap<String, Value>,
    y: Option<f64>,
    ci: Option<(f64, f64)>,
    verdict: String,
}

/// The results named `name`, newest first, and the y axis's label.
fn result_items(g: &Globals, name: &str) -> anyhow::Result<(Vec<Item>, String)> {
    let results: Vec<(String, ResultRecord)> = catalog::results(&g.store())
        .into_iter()
        .filter(|(_, r)| r.name == name)
        .collect();
    if results.is_empty() {
        return Err(
            UserError::usage(format!("no recorded results named `{name}`"))
                .hint("`repro log` lists results; record some with `repro bench`")
                .into(),
        );
    }
    let unit = results[0].1.unit.clone();
    let items = results
        .into_iter()
        .map(|(_, r)| Item {
            commit: r.commit.clone(),
            params: r.params.clone(),
            y: r.summary.as_ref().map(|s| s.median),
            ci: r.summary.as_ref().map(|s| (s.ci_low, s.ci_high)),
            verdict: r.verdict.word().to_string(),
        })
        .collect();
    Ok((items, format!("median ({unit})")))
}

/// The profiles of recipe `name` that measured `metric`, newest first, and the y axis's
/// label (the metric and its unit).
fn profile_items(g: &Globals, name: &str, metric: &str) -> anyhow::Result<(Vec<Item>, String)> {
    let store = g.store();
    let mut profiles: Vec<records::ProfileRecord> = store
        .records(records::PROFILES)
        .into_iter()
        .filter_map(|(id, _, v)| records::ProfileRecord::from_json(&v.ok()?, &id).ok())
        .filter(|p| p.recipe == name)
        .collect();
    if profiles.is_empty() {
        return Err(
            UserError::usage(format!("no recorded profiles of `{name}`"))
                .hint("`repro log --kind profile` lists profiles; record some with `repro profile`")
                .into(),
        );
    }
    profiles.sort_by(|a, b| b.created_at.cmp(&a.created_at));
    let with: Vec<&records::ProfileRecord> = profiles
        .iter()
        .filter(|p| p.metrics.get(metric).is_some_and(|m| m.value.is_some()))
        .collect();
    let Some(first) = with.first() else {
        let mut known: Vec<&str> = profiles
            .iter()
            .flat_map(|p| p.metrics.keys().map(String::as_str))
            .collect();
        known.sort_unstable();
        known.dedup();
        return Err(UserError::usage(format!(
            "no profile of `{name}` has a numeric `{}`",
            crate::foundation::output::sanitize(metric)
        ))
        .hint(format!(
            "its profiles measured: {}",
            crate::foundation::output::sanitize(&known.join(", "))
        ))
        .into());
    };
    let unit = first.metrics[metric].unit.clone();
    let items = with
        .iter()
        .map(|p| Item {
            commit: p.commit.clone(),
            params: p.params.clone(),
            y: p.value(metric),
            ci: None,
            verdict: "ok".into(),
        })
        .collect();
    let label = if unit.is_empty() {
        metric.to_string()
    } else {
        format!("{metric} ({unit})")
    };
    Ok((items, crate::foundation::output::sanitize(&label)))
}

fn item_point(x: f64, label: String, i: &Item) -> Point {
    Point {
        x,
        label,
        y: i.y,
        ci: i.ci,
        verdict: i.verdict.clone(),
    }
}

/// Items (newest first) over a parameter, or across the commits of the current history.
fn plot_items(
    g: &Globals,
    name: &str,
    items: &[Item],
    sweep: Option<&str>,
    ylabel: &str,
) -> anyhow::Result<(String, usize)> {
    match sweep {
        Some(param) => {
            // The newest item at each value of the parameter.
            let mut by_value: BTreeMap<String, (f64, &Item)> = BTreeMap::new();
            for i in items {
                if let Some(x) = i.params.get(param)
                    && let Some(v) = x.as_f64()
                {
                    by_value.entry(x.to_string()).or_insert((v, i));
                }
            }
            if by_value.is_empty() {
                return Err(UserError::usage(format!(
                    "no result of `{name}` has the parameter `{param}`"
                ))
                .hint("`repro show ID` lists a result's parameters; sweep over one of them")
                .into());
            }
            let mut points: Vec<Point> = by_value
                .into_iter()
                .map(|(label, (v, i))| item_point(v, label, i))
                .collect();
            points.sort_by(|a, b| a.x.total_cmp(&b.x));
            let (lo, hi) = (points[0].x, points[points.len() - 1].x);
            let log_x = lo > 0.0 && hi / lo > 8.0;
            let what = ylabel.split(" (").next().unwrap_or(ylabel);
            Ok((
                plot::render(
                    &format!("{name}: {what} over {param}"),
                    param,
                    ylabel,
                    &points,
                    &[],
                    log_x,
                ),
                points.len(),
            ))
        }
        None => plot_commits(g, name, items, ylabel),
    }
}

/// The newest item at each commit, in history order (oldest first).
fn plot_commits(
    g: &Globals,
    name: &str,
    items: &[Item],
    ylabel: &str,
) -> anyhow::Result<(String, usize)> {
    let mut by_commit: BTreeMap<String, &Item> = BTreeMap::new();
    for i in items {
        if let Some(c) = &i.commit {
            by_commit.entry(c.clone()).or_insert(i);
        }
    }
    let order: Vec<String> = match crate::foundation::git::open(&g.cwd) {
        Ok(repo) => crate::foundation::git::repo::head_history(&repo)?
            .into_iter()
            .map(|o| o.to_string())
            .filter(|c| by_commit.contains_key(c))
            .collect(),
        Err(_) => by_commit.keys().cloned().collect(),
    };
    let points: Vec<Point> = order
        .iter()
        .enumerate()
        .map(|(i, c)| item_point(i as f64, c.chars().take(8).collect(), by_commit[c]))
        .collect();
    if points.is_empty() {
        return Err(UserError::usage(format!(
            "no result of `{name}` is at a commit of the current history"
        ))
        .hint("check out the branch the results were recorded on (`repro log` shows their commits)")
        .into());
    }
    let what = ylabel.split(" (").next().unwrap_or(ylabel);
    Ok((
        plot::render(
            &format!("{name}: {what} across commits"),
            "commit",
            ylabel,
            &points,
            &[],
            false,
        ),
        points.len(),
    ))
}

/// Runs `repro plot`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let (svg, n) = if let Some(path) = &a.bisect {
        plot_bisection(g, path)?
    } else {
        let name = a
            .name
            .clone()
            .expect("clap requires a name without --bisect");
        let (items, label) = match &a.metric {
            Some(metric) => profile_items(g, &name, metric)?,
            None => result_items(g, &name)?,
        };
        plot_items(g, &name, &items, a.sweep.as_deref(), &label)?
    };
    let out = g.cwd.join(&a.output);
    crate::foundation::fsutil::write_output(&out, svg.as_bytes(), true)
        .with_context(|| format!("failed to write {}", g.shown(&out)))?;
    if g.json {
        crate::app::context::emit_json(&serde_json::json!({
            "schema": 1,
            "output": g.shown(&out),
            "points": n,
            "kind": if a.bisect.is_some() { "bisection" } else if a.sweep.is_some() { "sweep" } else { "commits" },
        }))?;
    } else if !g.quiet {
        emit(&format!("wrote {} ({n} points)\n", g.shown(&out)))?;
    }
    Ok(exit::OK)
}
