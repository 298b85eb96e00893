//! `repro bench RECIPE` (check, then time a kernel on the GPU) and `repro bench --command`
//! (time any command, or read a metric from its output, over separate processes).

pub mod pybench;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::bench::{self, Metric};
use crate::engines::build::{self, Options};
use crate::engines::catalog;
use crate::engines::export;
use crate::engines::fingerprint::{self, Demand};
use crate::engines::gpurun::Phase;
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::output::Style;
use crate::foundation::recipe;
use crate::foundation::records::{self, ResultRecord, ResultVerdict};
use crate::foundation::records::{Mode, Settings};

/// Arguments of `repro bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recipe to benchmark (by name or path).
    #[arg(value_name = "RECIPE", required_unless_present = "command", value_parser = crate::app::context::non_empty())]
    recipe: Option<String>,
    /// Benchmark a shell command instead of a recipe (each run a separate process).
    #[arg(long, value_name = "CMD", conflicts_with_all = ["recipe", "param", "check_only", "time_anyway", "mode"], value_parser = crate::app::context::non_empty())]
    command: Option<String>,
    /// Name of a command bench in records and tables [default: the command].
    #[arg(long, requires = "command", value_parser = crate::app::context::non_empty())]
    name: Option<String>,
    /// What a command bench measures: time (wall, ms), json:PATH or regex:RE on stdout.
    #[arg(long, default_value = "time", requires = "command", value_parser = crate::app::context::non_empty())]
    metric: String,
    /// The unit of a json: or regex: metric (us, ms or s make it a time: lower is faster).
    #[arg(long, requires = "command", value_parser = crate::app::context::non_empty())]
    unit: Option<String>,
    /// Exactly N runs of the command (otherwise --min-runs, until --max-noise, up to --max-runs).
    #[arg(long, value_name = "N", requires = "command", conflicts_with_all = ["min_runs", "max_runs"])]
    runs: Option<usize>,
    /// A command bench runs at least this many times (hyperfine's --min-runs).
    #[arg(long, value_name = "N", requires = "command")]
    min_runs: Option<usize>,
    /// A command bench runs at most this many times (hyperfine's --max-runs).
    #[arg(long, value_name = "N", requires = "command")]
    max_runs: Option<usize>,
    /// A command run before each run of a command bench, warm-ups included, and not timed
    /// (hyperfine's --prepare), e.g. to clear a cache.
    #[arg(long, value_name = "CMD", requires = "command", value_parser = crate::app::context::non_empty())]
    prepare: Option<String>,
    /// Override a parameter: NAME=VALUE or NAME=V1,V2 (a sweep; a comma inside a call's
    /// parentheses, as in `n=ceil_div(1000, 3)`, is the call's).
    #[arg(long = "param", value_name = "K=V", value_parser = crate::app::context::non_empty())]
    param: Vec<String>,
    /// cold: L2 flushed before each sample; hot: back to back; graph: CUDA-graph batches.
    #[arg(long, value_enum, default_value = "cold")]
    mode: Mode,
    // The GPU runner's sampling options do not apply to a command bench: they conflict with
    // --command, so that a hyperfine user's habit is an error, not silently ignored.
    /// Stop when the relative noise of the median is at most this (e.g. 0.5% or 0.005).
    #[arg(long, default_value = "0.5%", value_parser = parse_fraction)]
    max_noise: f64,
    /// At least this many samples.
    #[arg(long, default_value_t = 10, conflicts_with = "command")]
    min_samples: usize,
    /// At most this many samples.
    #[arg(long, default_value_t = 100_000, conflicts_with = "command")]
    max_samples: usize,
    /// Sample for at least this long.
    #[arg(long, default_value = "500ms", value_parser = humantime::parse_duration, conflicts_with = "command")]
    min_time: Duration,
    /// Stop sampling after this long even if the noise target is not met.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, conflicts_with = "command")]
    budget: Duration,
    /// Warm up: a recipe for this long (default 100ms; in `--mode graph`, 20 ms of single
    /// launches and the rest, at least 100 ms, in graph samples until they settle; a worker's
    /// later jobs (a sweep's points, a bisection's runs) count the GPU time of the job before
    /// on the same GPU, if it ended less than 0.5 s earlier, and warm up at least 30 ms more); a command
    /// bench this many untimed runs first (hyperfine's --warmup N; default 0).
    #[arg(long, value_name = "TIME|N", value_parser = parse_warmup)]
    warmup: Option<Warmup>,
    /// Kill a benchmark process (or command run) that takes longer than this.
    #[arg(long, default_value = "120s", value_parser = crate::app::context::time_limit)]
    timeout: Duration,
    /// Build with this toolchain (nvcc@RELEASE, nvrtc@VERSION, system) instead of the pin.
    #[arg(long, value_name = "SPEC", value_parser = crate::app::build::parse_spec)]
    toolchain: Option<crate::engines::toolchain::install::Spec>,
    /// The CUDA device to run on.
    #[arg(long, default_value_t = 0, conflicts_with = "command")]
    device: usize,
    /// Check against the reference only; do not time.
    #[arg(long)]
    check_only: bool,
    /// Time even when the check fails.
    #[arg(long)]
    time_anyway: bool,
    #[command(flatten)]
    export: export::ExportArgs,
}

/// `--warmup`: a duration for the GPU runner, or a number of runs for a command bench.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Warmup {
    /// Warm up for this long.
    Time(Duration),
    /// Run this many times untimed.
    Runs(usize),
}

/// Why an option's value does not parse (clap prints it after the option's name).
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// `--warmup` is neither a count nor a duration.
    #[error("`{text}` is neither a number of runs nor a duration: {error}")]
    Warmup {
        /// What was given.
        text: String,
        /// Why it is not a duration.
        error: humantime::DurationError,
    },
    /// Not a number or a percentage.
    #[error("`{text}` is not a fraction (e.g. 0.5% or 0.005)")]
    NotAFraction {
        /// What was given.
        text: String,
    },
    /// A fraction outside [0, 1).
    #[error("`{text}` must be between 0 and 100%")]
    FractionRange {
        /// What was given.
        text: String,
    },
}

/// Parses `--warmup`: `3` (runs) or `100ms` (a duration).
fn parse_warmup(s: &str) -> Result<Warmup, ValueError> {
    match s.trim().parse::<usize>() {
        Ok(n) => Ok(Warmup::Runs(n)),
        Err(_) => humantime::parse_duration(s.trim())
            .map(Warmup::Time)
            .map_err(|error| ValueError::Warmup {
                text: s.to_string(),
                error,
            }),
    }
}

/// Parses `0.5%` or `0.005`.
pub fn parse_fraction(s: &str) -> Result<f64, ValueError> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| ValueError::NotAFraction {
        text: s.to_string(),
    })?;
    if !(0.0..1.0).contains(&v) {
        return Err(ValueError::FractionRange {
            text: s.to_string(),
        });
    }
    Ok(v)
}

/// Runs `repro bench`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let started = Instant::now();
    // Two exports to one file are refused before anything runs.
    a.export.check(&g.cwd, &[])?;
    let root = g.project_root();
    // A kernel recipe's points (and its roofline calibration) run in one reused GPU worker
    // (one process start, one driver start, one context for them all), started first, so
    // that the driver starts while the fingerprint is taken and the kernel builds. A job
    // that fails ends its worker, and the next point starts a fresh one; a worker that was
    // not needed (a recipe error, a failed build) is ended unused. Command benches and
    // Python-call recipes start none: their own processes use the GPU, which may take one
    // context at a time. A recipe that does not read is reported after the configuration
    // and the fingerprint, as before the worker.
    let recipe = a.command.is_none().then(|| bench_recipe(&a, &root));
    let exec = bench::WorkerExecutor::current()
        .map_err(|e| UserError::with_code(exit::ENVIRONMENT, e.to_string()))?;
    if matches!(&recipe, Some(Ok(r)) if r.sections.call.is_none())
        && crate::engines::fingerprint::cuda::driver_present()
    {
        // A measurement split between processes (REPRO_TIMING_PROCESSES) starts them alike.
        let workers = if a.check_only {
            1
        } else {
            crate::engines::gpurun::processes_from_env()
        };
        exec.prestart(a.device, workers);
    }
    g.config()?;
    let fp = fingerprint::capture(&g.fingerprint_context(false), &Demand::all());
    let store = g.store();
    store.check_schema()?;
    let mut timed = Timed {
        run: vec![Phase::new(
            "fingerprint",
            started.elapsed().as_secs_f64() * 1e3,
        )],
        points: Vec::new(),
    };
    let results = match (&a.command, recipe) {
        (Some(cmd), _) => command_bench(g, &a, cmd, &fp, &store)?,
        (None, r) => {
            let r = r.expect("a recipe is read whenever there is no --command")?;
            recipe_bench(g, &a, r, &fp, &store, &exec, &mut timed)?
        }
    };
    let rows: Vec<export::Row> = results
        .iter()
        .map(|(id, rec)| export::Row::from_record(id, rec))
        .collect();
    a.export
        .write(&g.cwd, &rows)
        .context("failed to write an export")?;
    if g.json {
        let list: Vec<Value> = results
            .iter()
            .enumerate()
            .map(|(i, (id, rec))| {
                let mut r = records::to_json(rec);
                r["id"] = json!(id);
                if let Some(p) = timed.points.get(i) {
                    r["phases"] = json!(p);
                }
                r
            })
            .collect();
        emit_json(&json!({ "schema": 1, "results": list, "phases": timed.run }))?;
    }
    let bad = results.iter().any(|(_, r)| r.verdict != ResultVerdict::Ok);
    Ok(if bad { exit::MISMATCH } else { exit::OK })
}

/// Where a bench's wall time went: the run's own phases (fingerprint, build, resolving),
/// and each point's (the child's phases and the process around them).
struct Timed {
    run: Vec<Phase>,
    points: Vec<Vec<Phase>>,
}

/// The phase table `-v` prints for one point: the run's phases, the point's, their total
/// and how much of it was not the kernel's own timed runs.
fn phase_table(name: &str, run: &[Phase], point: &[Phase], rec: &ResultRecord) -> String {
    let mut out = format!("phases of {name} {} (ms):\n", rec.params_text());
    for p in run.iter().chain(point) {
        let on = p
            .path
            .as_deref()
            .map(|w| format!("  ({w})"))
            .unwrap_or_default();
        out.push_str(&format!("  {:<12} {:>9.1}{on}\n", p.name, p.ms));
    }
    let total: f64 = run.iter().chain(point).map(|p| p.ms).sum();
    let launches = f64::from(rec.launches_per_sample.unwrap_or(1));
    let kernel: f64 = rec.samples.iter().sum::<f64>() * launches / 1e3;
    out.push_str(&format!(
        "  {:<12} {total:>9.1}  (kernel's timed runs {kernel:.1}, the rest {:.1})\n",
        "total",
        total - kernel
    ));
    out
}

fn settings(a: &Args) -> Settings {
    Settings {
        mode: a.mode,
        max_noise: a.max_noise,
        min_samples: a.min_samples,
        max_samples: a.max_samples.max(a.min_samples),
        min_time_ms: a.min_time.as_secs_f64() * 1e3,
        budget_ms: a.budget.as_secs_f64() * 1e3,
        warmup_ms: match a.warmup {
            Some(Warmup::Time(d)) => d.as_secs_f64() * 1e3,
            _ => 100.0,
        },
        device: a.device,
    }
}

/// The recipe `repro bench RECIPE` names, with `--param` applied, checked for what a
/// bench needs before anything is built.
fn bench_recipe(a: &Args, root: &std::path::Path) -> anyhow::Result<recipe::Recipe> {
    let name = a
        .recipe
        .as_deref()
        .expect("clap requires a recipe without --command");
    let mut r = recipe::load(root, name)?;
    if r.sections.run.is_none() && r.sections.call.is_none() {
        return Err(UserError::usage(format!(
            "recipe `{}` has no [run] section, so there is nothing to launch",
            r.name
        ))
        .hint("add [run] (the run section in repro's book, docs/src/reference/recipes.md), or use --command")
        .into());
    }
    crate::foundation::runspec::override_params(&mut r.sections.params, &a.param)?;
    if let Some(Warmup::Runs(n)) = a.warmup {
        return Err(UserError::usage(format!(
            "--warmup {n}: a recipe bench warms up for a time, not a number of runs"
        ))
        .hint("give a duration (`--warmup 200ms`); a count of runs is for --command")
        .into());
    }
    if r.sections.call.is_some() {
        // A Python call: resolved and run by `pybench` (no kernel launch to resolve).
        return Ok(r);
    }
    // Resolve every point once before building, with no module to read symbols from, so that
    // a recipe's own mistakes are reported even on a machine without a compiler.
    bench::resolve(
        &r.sections,
        std::path::Path::new(""),
        &settings(a),
        a.check_only,
        a.time_anyway,
    )
    .map_err(|e| UserError::usage(located(&r.path, &e.to_string())))?;
    Ok(r)
}

/// The one build of a multi-target recipe that this GPU can load, and a note saying which.
fn pick_target(
    g: &Globals,
    a: &Args,
    fp: &fingerprint::Fingerprint,
    r: recipe::Recipe,
) -> anyhow::Result<recipe::Recipe> {
    if r.targets().len() <= 1 {
        return Ok(r);
    }
    let cc_key = format!("gpu.devices.{}.compute-capability", a.device);
    let cc = fp.get(&cc_key).value().map(str::to_string);
    let picked = cc.as_deref().and_then(|cc| r.for_capability(cc));
    match (picked, cc) {
        (Some(p), Some(cc)) => {
            if !g.quiet {
                say!(
                    "note: recipe `{}` builds for {}; GPU {} has compute capability {cc}, so this runs the {} build",
                    r.name,
                    r.targets().join(", "),
                    a.device,
                    p.targets()[0]
                );
            }
            Ok(p)
        }
        (_, cc) => Err(UserError::with_code(
            exit::ENVIRONMENT,
            format!(
                "recipe `{}` builds for {}, and none of them runs on GPU {} (compute capability {})",
                r.name,
                r.targets().join(", "),
                a.device,
                cc.as_deref().unwrap_or("unknown")
            ),
        )
        .hint("add this GPU's target to `targets`")
        .into()),
    }
}

/// Builds the recipe for a bench with `--toolchain`'s choice; a failed build is exit 5 with
/// the compiler's log (the kernel and the Python-call bench alike).
pub(crate) fn build_for_bench(
    g: &Globals,
    toolchain: Option<crate::foundation::toolchain_spec::Spec>,
    root: &std::path::Path,
    store: &crate::foundation::store::Store,
    r: &recipe::Recipe,
) -> anyhow::Result<build::Outcome> {
    let opts = Options {
        toolchain,
        pins: Some(g.pins()?),
        offline: g.offline,
        quiet: g.quiet || g.json,
        python: g.python.clone(),
        ..Options::default()
    };
    let built = build::build(root, store, r, &opts)
        .with_context(|| format!("failed to build recipe `{}`", r.name))?;
    if built.status != "ok" {
        let log: Vec<String> = built.log.lines().map(|l| format!("  | {l}")).collect();
        say!("{}", log.join("\n"));
        return Err(UserError::with_code(
            exit::BUILD_FAILED,
            format!(
                "recipe `{}` does not build (key {})",
                r.name,
                keys::short(&built.key)
            ),
        )
        .into());
    }
    Ok(built)
}

/// Builds the recipe; the build and the module to load (a CUBIN, else PTX).
fn build_module(
    g: &Globals,
    a: &Args,
    root: &std::path::Path,
    store: &crate::foundation::store::Store,
    r: &recipe::Recipe,
) -> anyhow::Result<(build::Outcome, build::OutputInfo)> {
    let built = build_for_bench(g, a.toolchain.clone(), root, store, r)?;
    let module = built
        .outputs
        .get("cubin")
        .or_else(|| built.outputs.get("ptx"))
        .cloned()
        .ok_or_else(|| UserError::usage("the build produced neither a cubin nor PTX to load"))?;
    Ok((built, module))
}

/// The sweep's points against the built module, each checked against the kernel's PTX
/// parameters when there is PTX.
fn points(
    a: &Args,
    r: &recipe::Recipe,
    built: &build::Outcome,
    module: &build::OutputInfo,
) -> anyhow::Result<Vec<bench::Point>> {
    let ptx = built
        .outputs
        .get("ptx")
        .and_then(|p| std::fs::read_to_string(&p.path).ok());
    let points = bench::resolve(
        &r.sections,
        std::path::Path::new(&module.path),
        &settings(a),
        a.check_only,
        a.time_anyway,
    )
    .map_err(|e| UserError::usage(located(&r.path, &e.to_string())))?;
    if let Some(ptx) = &ptx {
        for p in &points {
            // The error's own hint says to match the parameters.
            bench::check_arity(ptx, &p.job.kernel, &p.job.args)?;
            if let Some(rl) = &p.job.reference {
                bench::check_arity(ptx, rl, &p.job.args).map_err(|e| {
                    crate::foundation::error::Hinted::new(
                        e,
                        "the reference kernel takes the same arguments as the kernel",
                    )
                })?;
            }
        }
    }
    Ok(points)
}

fn recipe_bench(
    g: &Globals,
    a: &Args,
    r: recipe::Recipe,
    fp: &fingerprint::Fingerprint,
    store: &crate::foundation::store::Store,
    exec: &bench::WorkerExecutor,
    timed: &mut Timed,
) -> anyhow::Result<Vec<(String, ResultRecord)>> {
    let mut laps = Instant::now();
    let mut lap = |name: &str, timed: &mut Timed| {
        let now = Instant::now();
        timed
            .run
            .push(Phase::new(name, (now - laps).as_secs_f64() * 1e3));
        laps = now;
    };
    let root = &g.project_root();
    if r.sections.call.is_some() {
        let base = |key: String, name: String| bench::base_record(fp, root, key, name, "us");
        let o = crate::app::bench::pybench::CallOptions {
            settings: settings(a),
            check_only: a.check_only,
            time_anyway: a.time_anyway,
            timeout: a.timeout,
            toolchain: a.toolchain.clone(),
            base: &base,
        };
        return crate::app::bench::pybench::run(g, root, fp, store, &r, &o);
    }
    let r = pick_target(g, a, fp, r)?;
    let (built, module) = build_module(g, a, root, store, &r)?;
    lap("build", timed);
    let points = points(a, &r, &built, &module)?;
    // Everything above works without a GPU: recipe, build and argument errors come first.
    bench::gpu_ready(fp, a.device)?;
    lap("resolve", timed);
    let s = settings(a);
    let peaks = roofline_peaks(g, fp, a.device, &points, exec);
    gpu_helpers(g, fp, a.device);
    let ctx = bench::RecipeBench {
        fp,
        root,
        recipe: (&r.name, &r.path),
        build: (&built.key, &module.sha256),
        settings: &s,
        check_only: a.check_only,
        peaks: peaks.as_ref(),
    };
    let mut out = Vec::new();
    // A sweep's points each take seconds on the GPU: a bar with an ETA on a terminal.
    let bar = crate::foundation::output::progress(g.quiet || g.json, points.len() as u64, "points");
    for p in points {
        bar.set_message(format!(
            "{} {}",
            r.name,
            crate::foundation::records::params_text(&bench::params_json(&p.params))
        ));
        let ran = bench::bench_job(exec, &p.job, a.timeout)
            .map_err(|e| UserError::with_code(exit::ENVIRONMENT, e.to_string()))?;
        let rec = bench::recipe_record(&ctx, &p, &ran);
        let t = Instant::now();
        let id = catalog::put_result(store, &rec)?;
        let mut phases = ran.phases();
        phases.push(Phase::new("record", t.elapsed().as_secs_f64() * 1e3));
        // -q prints only problems: a result that is not ok.
        if !g.json && (!g.quiet || rec.verdict != ResultVerdict::Ok) {
            bar.suspend(|| emit(&render(&id, &rec, g)))?;
        }
        if g.verbose > 0 {
            let run = if out.is_empty() { &timed.run[..] } else { &[] };
            bar.suspend(|| eprint!("{}", phase_table(&r.name, run, &phases, &rec)));
        }
        timed.points.push(phases);
        bar.inc(1);
        out.push((id, rec));
    }
    bar.finish_and_clear();
    Ok(out)
}

fn command_bench(
    g: &Globals,
    a: &Args,
    cmd: &str,
    fp: &fingerprint::Fingerprint,
    store: &crate::foundation::store::Store,
) -> anyhow::Result<Vec<(String, ResultRecord)>> {
    let root = g.project_root();
    // The error's own hint gives examples.
    let metric = Metric::parse(&a.metric)?;
    let (min_runs, max_runs) = match (a.runs, a.min_runs, a.max_runs) {
        (Some(0), _, _) => {
            return Err(UserError::usage("--runs must be at least 1")
                .hint("--runs N runs the command exactly N times; leave it out to stop when the median is stable")
                .into());
        }
        (Some(n), _, _) => (n, n),
        (None, min, max) => {
            let min = min.unwrap_or(10);
            let max = max.unwrap_or(200.max(min));
            if min < 2 || max < min {
                return Err(UserError::usage(format!(
                    "--min-runs {min} --max-runs {max}: need 2 <= min-runs <= max-runs"
                ))
                .hint("or pass --runs N for exactly N runs")
                .into());
            }
            (min, max)
        }
    };
    let warmup_runs = match a.warmup {
        None => 0,
        Some(Warmup::Runs(n)) => n,
        Some(Warmup::Time(d)) => {
            return Err(UserError::usage(format!(
                "--warmup {}: a command bench warms up for a number of runs, not a time",
                humantime::format_duration(d)
            ))
            .hint("give a count, as hyperfine does: `--warmup 3`")
            .into());
        }
    };
    let bar = crate::foundation::output::progress(g.quiet || g.json, max_runs as u64, "runs");
    let outcome = bench::run_command_bench(
        &bench::ProcessExecutor::default(),
        &bench::CommandBench {
            root: &root,
            command: cmd,
            metric: &metric,
            prepare: a.prepare.as_deref(),
            warmup_runs,
            min_runs,
            max_runs,
            max_noise: a.max_noise,
            timeout: a.timeout,
        },
        &|p| match p {
            bench::BenchProgress::Warmup { n, of } => bar.set_message(format!("warm-up {n}/{of}")),
            bench::BenchProgress::Timing => bar.set_message("timing"),
            bench::BenchProgress::Ran => bar.inc(1),
        },
    );
    bar.finish_and_clear();
    let bench::CommandBenchOutcome {
        samples,
        runs,
        verdict,
        detail,
    } = outcome;
    let name = a.name.clone().unwrap_or_else(|| cmd.to_string());
    let unit = match (&metric, a.unit.as_deref()) {
        (Metric::Time, _) => "ms",
        (_, Some(u)) => u,
        (_, None) => "",
    };
    let experiment = json!({ "command": cmd, "metric": metric.text(), "must-match": bench::must_match(fp), "commit": crate::foundation::git::head_commit(&root) });
    let mut rec = bench::base_record(fp, &root, keys::key_of(&experiment), name, unit);
    rec.command = Some(cmd.to_string());
    rec.metric = Some(metric.text().to_string());
    rec.verdict = verdict;
    rec.detail = detail;
    rec.summary = bench::summarize(&samples);
    rec.converged = crate::foundation::stats::median_rel_noise(&samples) <= a.max_noise;
    rec.samples = samples;
    rec.warmup_runs = Some(warmup_runs as u64);
    rec.prepare = Some(a.prepare.clone());
    rec.wall_s = Some(runs.iter().map(|r| r.wall_s).collect());
    rec.user_s = Some(runs.iter().map(|r| r.user_s).collect());
    rec.system_s = Some(runs.iter().map(|r| r.system_s).collect());
    rec.exit_codes = Some(runs.iter().map(|_| 0).collect());
    let id = catalog::put_result(store, &rec)?;
    if !g.json && (!g.quiet || rec.verdict != ResultVerdict::Ok) {
        emit(&render(&id, &rec, g))?;
    }
    Ok(vec![(id, rec)])
}

pub use crate::foundation::stats::fmt_value;

/// One result as a line (or a few) of text.
pub fn render(id: &str, rec: &ResultRecord, g: &Globals) -> String {
    let style = Style::for_stdout();
    let unit = rec.unit.as_str();
    let verdict = rec.verdict.word();
    let painted = if rec.verdict == ResultVerdict::Ok {
        style.good(verdict)
    } else {
        style.error(&verdict.to_uppercase())
    };
    let mut line = format!("{:<16} {:<24} {painted}", rec.name, rec.params_text());
    if let Some(s) = &rec.summary {
        line.push_str(&format!(
            "  median {} ± {:.2}% [{}, {}]  n={}",
            fmt_value(s.median, unit),
            if s.rel_noise.is_finite() {
                s.rel_noise
            } else {
                0.0
            } * 100.0,
            fmt_value(s.ci_low, unit),
            fmt_value(s.ci_high, unit),
            s.n
        ));
        if let Some(k) = rec.processes {
            line.push_str(&format!(" in {k} processes"));
        }
        if !rec.burst_starts.is_empty() {
            // The median is the mean of the bursts' medians: say so where it is shown.
            line.push_str(&format!(" in {} bursts", rec.burst_starts.len() + 1));
        }
    }
    if let Some(t) = &rec.throughput {
        if let Some(b) = t.gb_per_s {
            line.push_str(&format!("  {b:.1} GB/s"));
        }
        if let Some(t) = t.tflops {
            line.push_str(&format!("  {t:.2} TFLOP/s"));
        }
    }
    let roofline = rec
        .throughput
        .as_ref()
        .and_then(|t| t.roofline.as_ref().map(|r| r.line(t.gb_per_s, t.tflops)));
    line.push_str(&format!("  id {}\n", keys::short(id)));
    if let Some(r) = roofline {
        line.push_str(&format!("  {r}\n"));
    }
    if let Some(py) = &rec.python {
        line.push_str(&crate::app::bench::pybench::render(py));
    }
    if let Some(d) = &rec.detail {
        line.push_str(&format!("  {} {d}\n", style.warn("detail:")));
    }
    if rec.throttled == Some(true) {
        line.push_str(&format!(
            "  {} the SM clock fell below 75% of its maximum while sampling\n",
            style.warn("warning:")
        ));
    }
    if !rec.converged && rec.verdict == ResultVerdict::Ok {
        line.push_str(&format!(
            "  {} the noise target was not reached within the budget\n",
            style.warn("note:")
        ));
    }
    if g.verbose > 0
        && let Some(Some(checks)) = &rec.check
    {
        for c in checks {
            line.push_str(&format!(
                "  check {}: {} mismatches of {}, max abs err {:.3e}, max rel err {:.3e}\n",
                c.name, c.mismatches, c.elements, c.max_abs_err, c.max_rel_err
            ));
        }
    }
    line
}

/// Arguments of the internal `repro gpu-job`.
#[derive(Debug, clap::Args)]
pub struct GpuJobArgs {
    /// Answer jobs one per line until stdin closes, in one process and one CUDA context
    /// (the reused worker of a bisection); exits after a job whose report holds an error.
    #[arg(long)]
    serve: bool,
    /// With `--serve`: create this device's context before the first job arrives, so that
    /// the driver's start overlaps whatever the parent does before it sends one.
    #[arg(long, requires = "serve", value_name = "ORDINAL")]
    warm: Option<usize>,
}

/// Runs one GPU job read from stdin and prints its report (the child of `repro bench`),
/// or with `--serve` one job per line.
pub fn gpu_job(_g: &Globals, a: GpuJobArgs) -> anyhow::Result<u8> {
    if a.serve {
        need_driver()?;
        return serve_gpu_jobs(a.warm);
    }
    let mut input = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut input)?;
    let job = read_gpu_job(&input)?;
    need_driver()?;
    let report = crate::engines::gpurun::run(&job);
    crate::app::context::emit_json_text(&serde_json::to_string(&report)?)?;
    Ok(if report.error.is_some() {
        exit::MISMATCH
    } else {
        exit::OK
    })
}

/// Finds the driver library, or says that there is none (exit 3).
fn need_driver() -> anyhow::Result<()> {
    crate::foundation::driverlib::ensure();
    // SAFETY: only probes for the library by name.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(
            UserError::with_code(exit::ENVIRONMENT, "no NVIDIA driver on this machine").into(),
        );
    }
    Ok(())
}

/// A job as `repro bench` writes it; anything else (timing settings that do not read
/// among it) is a usage error.
fn read_gpu_job(input: &[u8]) -> anyhow::Result<crate::engines::gpurun::Job> {
    let job: crate::engines::gpurun::Job = serde_json::from_slice(input).map_err(|e| {
        UserError::usage(format!(
            "the job on stdin does not read as a GPU job: {e} (`repro gpu-job` is the child `repro bench` starts, not a command to run by hand)"
        ))
    })?;
    job.check()?;
    Ok(job)
}

/// At most this many bytes of one job line: a job is a few kilobytes.
const JOB_LINE_LIMIT: u64 = 16 << 20;

/// The worker loop: a report line per job line. The device's primary context is retained
/// across jobs (each job's own context is then the same one, not created again); a job's
/// module and buffers go with the job. After a job whose report holds an error the context
/// may be broken (a trap makes it unusable), so the worker ends and its parent starts a
/// new one for the next job.
fn serve_gpu_jobs(warm: Option<usize>) -> anyhow::Result<u8> {
    use std::io::{BufRead, Read, Write};
    let mut stdin = std::io::stdin().lock();
    // The answers go to a private copy of stdout, and stdout itself becomes stderr: a
    // kernel's printf (flushed to stdout at a synchronisation) can never be read as an
    // answer or put the parent one answer behind.
    // SAFETY: dup and dup2 on the process's own standard descriptors; the new descriptor
    // is owned by the File alone.
    let mut out = unsafe {
        let fd = libc::dup(1);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            anyhow::bail!(
                "cannot set up the worker's output: {}",
                std::io::Error::last_os_error()
            );
        }
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd)
    };
    // A device that cannot be opened now fails the first job that asks for it, with the
    // job's own report.
    let mut kept: Option<(usize, std::sync::Arc<cudarc::driver::CudaContext>)> =
        warm.and_then(|d| cudarc::driver::CudaContext::new(d).ok().map(|c| (d, c)));
    loop {
        let mut line = Vec::new();
        (&mut stdin)
            .take(JOB_LINE_LIMIT)
            .read_until(b'\n', &mut line)?;
        if line.is_empty() {
            return Ok(exit::OK);
        }
        let job = read_gpu_job(&line)?;
        if kept.as_ref().is_none_or(|(d, _)| *d != job.device) {
            // A failure here is the job's own to report, when it creates its context.
            kept = cudarc::driver::CudaContext::new(job.device)
                .ok()
                .map(|c| (job.device, c));
        }
        let report = crate::engines::gpurun::run(&job);
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
        out.flush()?;
        if report.error.is_some() {
            return Ok(exit::MISMATCH);
        }
    }
}

/// `path: message`, or `path:line:column: ...` when the message starts with a location.
fn located(path: &str, message: &str) -> String {
    if message.starts_with(|c: char| c.is_ascii_digit()) && message.contains(": ") {
        format!("{path}:{message}")
    } else {
        format!("{path}: {message}")
    }
}

/// Makes sure repro's own fill and compare kernels are compiled for the device (once per
/// architecture, into the cache), so the GPU child generates inputs and compares outputs on
/// the device. Without them it does both on the CPU and says so in the phase table: a
/// failure here costs time, never the bench.
fn gpu_helpers(g: &Globals, fp: &fingerprint::Fingerprint, device: usize) {
    let field = fp.get(&format!("gpu.devices.{device}.compute-capability"));
    let Some(cc) = field.value() else {
        return;
    };
    let arch = format!("sm_{}", cc.replace('.', ""));
    if crate::engines::gpurun::ondevice::module_path(&arch).is_some_and(|p| p.is_file()) {
        return;
    }
    if let Ok(pins) = g.pins()
        && let Err(e) = crate::engines::gpurun::ondevice::ensure_module(&arch, &pins)
        && g.verbose > 0
    {
        say!("note: inputs and checks on the CPU: repro's GPU helpers did not compile: {e}");
    }
}

/// The measured peaks of the device, for roofline figures: cached per boot, or measured
/// once now (two short kernels) when a point has `[work]` bytes or FLOPs. A calibration that
/// fails costs the figures, never the bench: it is said on stderr.
fn roofline_peaks(
    g: &Globals,
    fp: &crate::engines::fingerprint::Fingerprint,
    device: usize,
    points: &[bench::Point],
    exec: &bench::WorkerExecutor,
) -> Option<crate::foundation::roofline::Peaks> {
    if points
        .iter()
        .all(|p| p.bytes.is_none() && p.flops.is_none())
    {
        return None;
    }
    let pins = g.pins().ok()?;
    let uuid = fp
        .get(&format!("gpu.devices.{device}.uuid"))
        .value()?
        .to_string();
    if let Some(c) = crate::engines::roofline::cached(&uuid) {
        return Some(c.peaks);
    }
    if !g.quiet {
        say!("calibrating device {device} for roofline figures (once per boot)");
    }
    // Through the bench's own worker: a second process could not make a context on a GPU
    // in exclusive-process mode while the worker holds one.
    match crate::engines::roofline::peaks_for(&fp.fields, device, &pins, exec) {
        Ok(c) => Some(c.peaks),
        Err(e) => {
            say!("warning: no roofline figures: {e}");
            None
        }
    }
}
