//! `repro bench RECIPE` for a recipe whose `[run]` calls a Python function: build the
//! torch extension, then check the function against its reference and time both in the
//! fingerprinted interpreter (engines::pyrun), recording each and the speedup.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;

use crate::app::context::{Globals, emit};
use crate::engines::bench;
use crate::engines::build;
use crate::engines::catalog;
use crate::engines::fingerprint::Fingerprint;
use crate::engines::pyrun::{self, Job};
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::recipe::{Build, Recipe};
use crate::foundation::records::{Mode, PyCall, ResultRecord, ResultVerdict, Settings};
use crate::foundation::runspec::call::{Call, CallDevice};
use crate::foundation::store::Store;

/// What `repro bench` passes on for a Python call.
pub struct CallOptions<'a> {
    /// Sampling settings.
    pub settings: Settings,
    /// Check only.
    pub check_only: bool,
    /// Time even when the check fails.
    pub time_anyway: bool,
    /// Kill the runner after this long.
    pub timeout: Duration,
    /// `--toolchain`.
    pub toolchain: Option<crate::engines::toolchain::install::Spec>,
    /// Records each result as a base record (bench.rs's).
    pub base: &'a dyn Fn(String, String) -> ResultRecord,
}

/// The interpreter, with PyTorch, that a recipe's Python call runs in.
fn environment(
    g: &Globals,
    root: &Path,
    r: &Recipe,
    call: &Call,
) -> anyhow::Result<crate::foundation::pyenv::PyEnv> {
    let Build::TorchExtension(t) = &r.build else {
        return Err(UserError::usage(format!(
            "recipe `{}`: [run] calls a Python function, and its build is not `kind = \"torch-extension\"`",
            r.name
        ))
        .hint("a Python call runs in a torch-extension recipe, whose module is on its path")
        .into());
    };
    let env = build::torch::environment(&r.name, g.python.as_deref(), root, t)?;
    let torch = env.torch.as_ref().expect("environment() requires PyTorch");
    if call.device == CallDevice::Cuda && torch.cuda.is_none() {
        return Err(UserError::with_code(
            exit::ENVIRONMENT,
            format!(
                "recipe `{}` runs on \"cuda\", and PyTorch {} in {} is a CPU-only build",
                r.name,
                torch.version,
                env.located.interpreter.display()
            ),
        )
        .hint("install a CUDA build of PyTorch there, or set `device = \"cpu\"` in [run]")
        .into());
    }
    Ok(env)
}

/// Runs the bench of a recipe whose `[run]` names a `function`.
pub fn run(
    g: &Globals,
    root: &Path,
    fp: &Fingerprint,
    store: &Store,
    r: &Recipe,
    o: &CallOptions,
) -> anyhow::Result<Vec<(String, ResultRecord)>> {
    let call = r.sections.call.as_ref().expect("a Python call recipe");
    if o.settings.mode == Mode::Graph {
        return Err(UserError::usage(
            "--mode graph times CUDA-graph batches of a kernel; a Python call is timed cold or hot",
        )
        .hint("use --mode cold (the default) or --mode hot")
        .into());
    }
    let mut points = Vec::new();
    for params in crate::foundation::runspec::combinations(&r.sections.params) {
        let args = pyrun::resolve_args(call, &params)
            .map_err(|e| UserError::usage(format!("{}: {e}", r.path)))?;
        points.push((params, args));
    }
    let env = environment(g, root, r, call)?;
    let built = super::build_for_bench(g, o.toolchain.clone(), root, store, r)?;
    let (dir, artifact) = module_dir(&built)?;
    let must = bench::must_match(fp);
    let mut results = Vec::new();
    for (params, args) in points {
        let job = pyrun::job(
            call,
            args,
            dir.path(),
            &o.settings,
            o.check_only,
            o.time_anyway,
        );
        let report = pyrun::run(&env.located.interpreter, &job, o.timeout)
            .with_context(|| format!("recipe `{}`", r.name))?;
        let experiment = json!({
            "build-key": built.key, "must-match": must, "params": bench::params_json(&params),
            "settings": o.settings, "check-only": o.check_only, "function": call.function,
            "reference": call.reference.as_ref().map(|c| &c.function), "device": call.device.name(),
            "interpreter": env.located.interpreter, "torch": report.torch,
        });
        let mut rec = (o.base)(keys::key_of(&experiment), r.name.clone());
        rec.recipe = Some(r.name.clone());
        rec.recipe_path = Some(r.path.clone());
        rec.params = bench::params_json(&params);
        rec.build_key = Some(built.key.clone());
        rec.artifact = artifact.clone();
        rec.settings = Some(o.settings.clone());
        fill(
            &mut rec,
            &report,
            &job,
            &env.located.interpreter.display().to_string(),
        );
        let id = catalog::put_result(store, &rec)?;
        if !g.json && (!g.quiet || rec.verdict != ResultVerdict::Ok) {
            emit(&crate::app::bench::render(&id, &rec, g))?;
        }
        results.push((id, rec));
    }
    Ok(results)
}

/// The built module copied under its own file name, as Python imports it, and its digest.
fn module_dir(built: &build::Outcome) -> anyhow::Result<(tempfile::TempDir, Option<String>)> {
    let dir = tempfile::tempdir().context("failed to make a directory for the module")?;
    let mut artifact = None;
    for (name, out) in &built.outputs {
        std::fs::copy(&out.path, dir.path().join(name))
            .with_context(|| format!("failed to copy the built module {name}"))?;
        artifact = Some(out.sha256.clone());
    }
    Ok((dir, artifact))
}

/// Fills a result from the runner's validated report.
fn fill(rec: &mut ResultRecord, report: &pyrun::Report, job: &Job, interpreter: &str) {
    let (verdict, detail) = bench::check_verdict(report.check.as_deref());
    rec.verdict = verdict;
    rec.detail = detail;
    rec.check = Some(report.check.clone());
    let timing = &job.timing;
    let samples = report
        .function
        .as_ref()
        .map(|t| t.samples_us.clone())
        .unwrap_or_default();
    rec.summary = bench::summarize(&samples);
    rec.converged = report
        .function
        .as_ref()
        .is_some_and(|t| pyrun::converged(t, timing));
    rec.samples = samples;
    let reference_samples = report
        .reference
        .as_ref()
        .map(|t| t.samples_us.clone())
        .unwrap_or_default();
    rec.python = Some(PyCall {
        function: job.function.clone(),
        reference: job.reference.as_ref().map(|r| r.function.clone()),
        device: job.device.name().to_string(),
        device_name: report.device_name.clone(),
        interpreter: interpreter.to_string(),
        torch: report.torch.clone(),
        timer: report.timer.clone(),
        flush_bytes: report.flush_bytes,
        warmup_calls: report.function.as_ref().map(|t| t.warmup_calls),
        reference_summary: bench::summarize(&reference_samples),
        reference_converged: report
            .reference
            .as_ref()
            .is_some_and(|t| pyrun::converged(t, timing)),
        speedup: pyrun::speedup(&rec.samples, &reference_samples),
        reference_samples,
    });
}

/// The lines `repro bench` prints under a Python call's result.
pub fn render(py: &PyCall) -> String {
    let mut out = format!(
        "  {} on {} ({}), timed by {}\n",
        py.function,
        crate::foundation::output::printable(&py.device_name),
        py.device,
        py.timer.as_deref().unwrap_or("nothing (check only)")
    );
    if let (Some(reference), Some(s)) = (&py.reference, &py.reference_summary) {
        out.push_str(&format!(
            "  reference {reference}: median {}  n={}\n",
            crate::foundation::stats::fmt_value(s.median, "us"),
            s.n
        ));
    }
    if let Some(s) = &py.speedup {
        out.push_str(&format!(
            "  {:.2}x of the reference (interval {:.2}x to {:.2}x, {:.0}%)\n",
            s.ratio,
            s.low,
            s.high,
            s.level * 100.0
        ));
    }
    out
}

/// The rows `repro show` adds for a Python call.
pub fn show_rows(py: &PyCall) -> Vec<[String; 2]> {
    let p = crate::foundation::output::printable;
    let mut rows = vec![
        ["function".to_string(), p(&py.function)],
        [
            "interpreter".to_string(),
            format!("{} (PyTorch {})", p(&py.interpreter), p(&py.torch)),
        ],
        [
            "device".to_string(),
            format!("{} ({})", p(&py.device), p(&py.device_name)),
        ],
        [
            "timer".to_string(),
            format!(
                "{}, {} bytes overwritten before each sample",
                p(py.timer.as_deref().unwrap_or("none")),
                py.flush_bytes
            ),
        ],
    ];
    if let Some(r) = &py.reference {
        let median = py
            .reference_summary
            .as_ref()
            .map_or("not timed".to_string(), |s| {
                format!(
                    "median {} n={}",
                    crate::foundation::stats::fmt_value(s.median, "us"),
                    s.n
                )
            });
        rows.push(["reference".to_string(), format!("{} ({median})", p(r))]);
    }
    if let Some(s) = &py.speedup {
        rows.push([
            "speedup".to_string(),
            format!(
                "{:.2}x of the reference (interval {:.2}x to {:.2}x, {:.0}%)",
                s.ratio,
                s.low,
                s.high,
                s.level * 100.0
            ),
        ]);
    }
    rows
}
