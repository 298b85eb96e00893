//! Benchmarks: resolve a recipe into GPU jobs, run each in a child process with a timeout,
//! and record every result (verdict, raw samples, statistics, fingerprint) in the store.
//! Also the command bench: time any command, or read a metric from its output, over
//! separate processes, with the same statistics and records.
//!
//! A result record is immutable and named by the sha256 of its content (its ID); the
//! *experiment key* inside it hashes what must be equal for two results to be comparable
//! (build key, the must-match part of the fingerprint, parameters, settings), so repeated
//! measurements of one experiment accumulate under one key.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::engines::fingerprint::Fingerprint;
use crate::engines::gpurun::{Failure, Job, Phase, Report, Timing};
use crate::foundation::expr::Value as ExprValue;
use crate::foundation::fields::{SPECS, Tier};
use crate::foundation::process::{Cmd, Output, ProcessError};
use crate::foundation::records::{ArgSpec, LaunchSpec, ResultRecord, ResultVerdict, Settings};
use crate::foundation::runspec::{Arg, DType, Launch, Sections};
use crate::foundation::stats;

mod command;
mod executor;
mod params;
mod resolve;

pub use command::*;
pub use executor::*;
pub use params::*;
pub use resolve::*;

/// The result-record schema.
pub const SCHEMA: u64 = 1;

/// Why a recipe's `[run]`, `[check]` and `[work]` sections do not resolve into jobs. The
/// messages name the section and key (and, for an expression, its line and column).
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The recipe cannot be benchmarked.
    #[error("the recipe has no [run] section")]
    NoRun,
    /// An expression failed to evaluate (the message locates and quotes it).
    #[error("{explanation}")]
    Expr {
        /// `LINE:COLUMN: what: why`, from the expression.
        explanation: String,
    },
    /// A grid or block dimension does not fit 32 bits.
    #[error("{place} `{expr}` is {value}, too large")]
    DimTooLarge {
        /// Where: `LINE:COLUMN: [run] grid`.
        place: String,
        /// The expression.
        expr: String,
        /// Its value.
        value: u64,
    },
    /// A block with no threads or more than a GPU allows.
    #[error("{place} has {threads} threads; a block holds 1 to 1024")]
    BlockThreads {
        /// Where: `LINE:COLUMN: [run] block`, and the section that inherits it.
        place: String,
        /// Threads per block.
        threads: u64,
    },
    /// A grid with a zero dimension.
    #[error("{place} {grid:?} has a zero dimension")]
    ZeroGrid {
        /// Where: `LINE:COLUMN: [run] grid`, and the section that inherits it.
        place: String,
        /// The grid.
        grid: [u32; 3],
    },
    /// Dynamic shared memory beyond 32 bits.
    #[error("{place} {value} is too large")]
    SharedMem {
        /// Where: `LINE:COLUMN: [run] shared-mem`.
        place: String,
        /// The value.
        value: u64,
    },
    /// The kernel's name matches no symbol of the module, or several.
    #[error(transparent)]
    Symbol(#[from] crate::foundation::symbols::ResolveError),
    /// The parameter sweep is too large or malformed.
    #[error("{0}")]
    Sweep(String),
    /// The buffers of one point are larger than the bound.
    #[error(
        "{place} `{expr}` = {count} makes the buffers larger than {max} bytes (REPRO_MAX_BUFFER_BYTES)"
    )]
    Buffers {
        /// Where: `LINE:COLUMN: [run] args[0] (a) `count``.
        place: String,
        /// Its count expression.
        expr: String,
        /// Its count.
        count: u64,
        /// The bound.
        max: u64,
    },
    /// A scalar argument is NaN.
    #[error("{place}: the value is NaN")]
    ScalarNan {
        /// Where: `LINE:COLUMN: [run] args[2] (n) `value``.
        place: String,
    },
    /// A scalar argument does not fit its type.
    #[error("{place}: {value} does not fit a {dtype}")]
    ScalarRange {
        /// Where: `LINE:COLUMN: [run] args[2] (n) `value``.
        place: String,
        /// Its value, as shown.
        value: String,
        /// Its type, lower-case (`i32`).
        dtype: String,
    },
    /// `[work]` bytes or flops that are negative or not finite.
    #[error("{place} is {value}: work is a count, finite and not negative")]
    Work {
        /// Where: `LINE:COLUMN: [work] bytes`.
        place: String,
        /// Its value, as shown.
        value: String,
    },
}

impl SpecError {
    fn expr(e: &crate::foundation::expr::Expr, err: &crate::foundation::expr::ExprError) -> Self {
        SpecError::Expr {
            explanation: e.explain(err),
        }
    }
}

/// Why the arguments of `[run] args` do not fit a kernel's parameters (read from its PTX).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArityError {
    /// Not as many arguments as parameters.
    #[error("kernel `{kernel}` takes {params} parameters but [run] args gives {args}")]
    Count {
        /// The kernel.
        kernel: String,
        /// Its parameters.
        params: usize,
        /// The arguments given.
        args: usize,
    },
    /// An argument of the wrong size.
    #[error(
        "kernel `{kernel}` parameter {index} is {size} bytes but argument `{name}` is {want} bytes"
    )]
    Size {
        /// The kernel.
        kernel: String,
        /// The parameter's position.
        index: usize,
        /// The parameter's size.
        size: usize,
        /// The argument.
        name: String,
        /// The argument's size.
        want: usize,
    },
}

/// Why the GPU child could not be run at all (a child that ran and failed gives a report
/// with its error instead).
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// This executable cannot be found to start it again.
    #[error("cannot find the repro executable: {0}")]
    NoExecutable(#[source] std::io::Error),
    /// The child could not be started.
    #[error(transparent)]
    Start(#[from] ProcessError),
}

/// Why `--metric` does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MetricError {
    /// A regular expression that does not compile.
    #[error("--metric regex `{regex}`: {reason}")]
    Regex {
        /// The expression.
        regex: String,
        /// The compiler's message.
        reason: String,
    },
    /// Neither `time`, `json:` nor `regex:`.
    #[error("--metric `{0}`: expected time, json:PATH or regex:RE")]
    Unknown(String),
}

impl crate::foundation::error::Diagnose for MetricError {
    fn exit_code(&self) -> u8 {
        crate::foundation::exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        Some(
            "for example --metric time, --metric json:ms or --metric 'regex:took ([0-9.]+) ms'"
                .into(),
        )
    }
}

impl crate::foundation::error::Diagnose for ArityError {
    fn exit_code(&self) -> u8 {
        crate::foundation::exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        Some("make [run] args match the kernel's parameters, in order".into())
    }
}

/// Why a run's output holds no value of the metric.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExtractError {
    /// Stdout is not JSON.
    #[error("stdout is not JSON: {0}")]
    NotJson(String),
    /// The path names nothing in the JSON.
    #[error("no `{0}` in the JSON on stdout")]
    NoPath(String),
    /// The path names something that is not a number.
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// The regular expression does not compile.
    #[error("{0}")]
    Regex(String),
    /// The regular expression matches nothing.
    #[error("regex `{0}` does not match stdout")]
    NoMatch(String),
    /// The match is not a number.
    #[error("regex `{regex}` matched `{matched}`, not a number")]
    MatchNotANumber {
        /// The expression.
        regex: String,
        /// What it matched.
        matched: String,
    },
}

/// Why `--prepare` ended a command bench.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// It ran out of time.
    #[error("--prepare `{command}` before {label} took longer than {}", humantime::format_duration(*.after))]
    Timeout {
        /// The prepare command.
        command: String,
        /// Which run it prepared.
        label: String,
        /// The limit.
        after: Duration,
    },
    /// It failed.
    #[error("--prepare before {label} failed: {why}")]
    Failed {
        /// Which run it prepared.
        label: String,
        /// How.
        why: String,
    },
}

/// The child's timing settings.
pub fn timing(s: &Settings) -> Timing {
    Timing {
        mode: s.mode,
        warmup_ms: s.warmup_ms,
        max_noise: s.max_noise,
        min_samples: s.min_samples,
        min_time_ms: s.min_time_ms,
        max_samples: s.max_samples,
        budget_ms: s.budget_ms,
        settings: crate::engines::gpurun::timing_settings_from_env(),
        after: None,
    }
}

/// The verdict of one result.
pub fn verdict(report: &Report) -> (ResultVerdict, Option<String>) {
    if let Some(e) = &report.error {
        let v = match e {
            Failure::Timeout { .. } => ResultVerdict::Timeout,
            Failure::Driver { .. } | Failure::Exit { .. } | Failure::Signal { .. } => {
                ResultVerdict::Crash
            }
        };
        return (v, Some(e.to_string()));
    }
    check_verdict(report.check.as_deref())
}

/// The verdict of output checks: wrong, naming the first output outside its tolerance.
pub fn check_verdict(
    check: Option<&[crate::foundation::records::OutputCheck]>,
) -> (ResultVerdict, Option<String>) {
    if let Some(checks) = check
        && let Some(bad) = checks.iter().find(|c| c.mismatches > 0)
    {
        let first = bad
            .first_mismatch
            .as_ref()
            .map(|(i, g, w)| format!("; first at [{i}]: {g} vs {w}"))
            .unwrap_or_default();
        return (
            ResultVerdict::Wrong,
            Some(format!(
                "{}: {} of {} elements outside atol {} + rtol {} ({} unwritten; max abs err {:.3e}, max rel err {:.3e}){first}",
                bad.name,
                bad.mismatches,
                bad.elements,
                bad.atol,
                bad.rtol,
                bad.unwritten,
                bad.max_abs_err,
                bad.max_rel_err
            )),
        );
    }
    (ResultVerdict::Ok, None)
}

/// The sections whose must-match fields a result is only comparable under: the machine and
/// toolchain. The project's own must-match fields (the flake.lock digest) are covered by the
/// commit and the build key instead.
const COMPARABLE_SECTIONS: [&str; 3] = ["gpu.", "driver.", "toolchain."];

/// The must-match part of a fingerprint: what results are only comparable under.
pub fn must_match(fp: &Fingerprint) -> Value {
    let mut m = serde_json::Map::new();
    for spec in SPECS.iter().filter(|s| {
        s.tier == Tier::Must && COMPARABLE_SECTIONS.iter().any(|p| s.key.starts_with(p))
    }) {
        let v: Vec<Value> = fp
            .lookup(spec.key)
            .into_iter()
            .map(|f| f.value().map_or(Value::Null, Value::from))
            .collect();
        m.insert(spec.key.to_string(), Value::from(v));
    }
    Value::Object(m)
}

/// One GPU job, run and judged: the report of its child and what it means.
#[derive(Debug)]
pub struct JobRun {
    /// The child's report.
    pub report: Report,
    /// Its verdict (a timeout and a crash are told apart by the failure's variant).
    pub verdict: ResultVerdict,
    /// Why it is not ok.
    pub detail: Option<String>,
    /// The samples' statistics.
    pub summary: Option<stats::Summary>,
    /// The wall time of the child process, from its start to its report (ms); of all of
    /// them, for a measurement split between processes.
    pub process_ms: f64,
    /// The worker processes whose samples were pooled (1 but for a split measurement).
    pub processes: usize,
}

impl JobRun {
    /// The phases of the job: the child's own, then `process` (starting the child and
    /// reading its report: the rest of the child's wall time).
    pub fn phases(&self) -> Vec<Phase> {
        let mut v = self.report.phases.clone();
        let inside: f64 = v.iter().map(|p| p.ms).sum();
        v.push(Phase::new("process", (self.process_ms - inside).max(0.0)));
        v
    }
}

/// Benches one resolved job: runs the GPU child through `exec` with a timeout and judges
/// its report. `repro bench`, replay and the bisection's check and bench steps all run
/// their jobs through this one function.
/// A job whose timing asks for several processes ([`Timing::processes`]) is split
/// between them ([`run_split`]).
pub fn bench_job(exec: &dyn Executor, job: &Job, timeout: Duration) -> Result<JobRun, ChildError> {
    let t = Instant::now();
    let (report, processes) = match job.timing.as_ref().filter(|t| t.processes() > 1) {
        Some(timing) => run_split(exec, job, timing, timeout)?,
        None => (run_child_with(exec, job, timeout)?, 1),
    };
    let process_ms = t.elapsed().as_secs_f64() * 1e3;
    let (verdict, detail) = verdict(&report);
    let summary = summarize_bursts(&report.samples_us, &report.burst_starts);
    Ok(JobRun {
        report,
        verdict,
        detail,
        summary,
        process_ms,
        processes,
    })
}

/// Runs `job` as [`Timing::processes`] jobs, one after the other, each in a worker process
/// of its own ([`run_child_in`]) with its share of the time and of the samples still to
/// take ([`Timing::share`]), each told what the one before left (its GPU time, for the
/// warm-up, and its batch), and pools their reports ([`pool`]). Each checks its outputs.
/// The first that fails, or whose check fails (unless the job times anyway), ends it: the
/// pooled report so far, with that failure, is the answer; so does reaching the most
/// samples. The count of processes pooled comes back with it.
pub fn run_split(
    exec: &dyn Executor,
    job: &Job,
    timing: &Timing,
    timeout: Duration,
) -> Result<(Report, usize), ChildError> {
    let k = timing.processes();
    let mut reports: Vec<Report> = Vec::new();
    let mut after = None;
    let mut taken = 0;
    for worker in 0..k {
        let share = timing.share(k - worker, taken, after);
        let part = Job {
            timing: Some(share),
            ..job.clone()
        };
        let report = run_child_in(exec, &part, timeout, worker)?;
        after = report.busy_ms.map(|busy_ms| crate::engines::gpurun::After {
            busy_ms,
            batch: report.launches_per_sample,
        });
        taken += report.samples_us.len();
        let wrong = check_verdict(report.check.as_deref()).0 != ResultVerdict::Ok;
        let ended = report.error.is_some() || (wrong && !job.time_on_failure);
        reports.push(report);
        if ended || taken >= timing.max_samples {
            break;
        }
    }
    let n = reports.len();
    Ok((pool(reports), n))
}

/// Whether the child could not make its context because another process holds the
/// device's only one (CUDA_ERROR_DEVICE_UNAVAILABLE, 46: exclusive-process or prohibited
/// compute mode).
pub(crate) fn refused_context(report: &Report) -> bool {
    matches!(&report.error, Some(Failure::Driver { name, .. }) if name == "CUDA_ERROR_DEVICE_UNAVAILABLE")
}

/// The reports of a measurement's processes as one: the samples in order (each process's a
/// burst of its own, as well as its own bursts), the first
/// failed check (else the first check), the warm-up launches and the GPU time summed, the
/// clocks from the first's before to the last's after, converged only where all were,
/// throttled where any was, the mean empty-graph cost, the last failure, and each phase's
/// time summed by its name (in the order they first came).
pub fn pool(reports: Vec<Report>) -> Report {
    let failed = |c: &Option<Vec<crate::foundation::records::OutputCheck>>| {
        check_verdict(c.as_deref()).0 != ResultVerdict::Ok
    };
    let overheads: Vec<f64> = reports.iter().filter_map(|r| r.graph_overhead_us).collect();
    let mut all = reports.into_iter();
    let mut a = all.next().unwrap_or_default();
    for b in all {
        if !failed(&a.check) && failed(&b.check) {
            a.check = b.check;
        }
        // Each process's samples are bursts of their own: a new context on a GPU that
        // went idle meanwhile comes back at a level of its own.
        let offset = a.samples_us.len();
        if offset > 0 && !b.samples_us.is_empty() {
            a.burst_starts.push(offset);
        }
        a.burst_starts
            .extend(b.burst_starts.iter().map(|s| s + offset));
        a.samples_us.extend(b.samples_us);
        a.warmup_launches += b.warmup_launches;
        a.busy_ms = match (a.busy_ms, b.busy_ms) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        a.converged &= b.converged;
        a.sm_clock_mhz = match (a.sm_clock_mhz, b.sm_clock_mhz) {
            (Some((before, _, m1)), Some((_, after, m2))) => Some((before, after, m1.max(m2))),
            (x, y) => x.or(y),
        };
        a.throttled |= b.throttled;
        if b.error.is_some() {
            a.error = b.error;
        }
        for p in b.phases {
            match a.phases.iter_mut().find(|q| q.name == p.name) {
                Some(q) => q.ms += p.ms,
                None => a.phases.push(p),
            }
        }
    }
    a.graph_overhead_us =
        (!overheads.is_empty()).then(|| overheads.iter().sum::<f64>() / overheads.len() as f64);
    a
}

/// Why no recipe can be run on a GPU here.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No driver library.
    #[error("no NVIDIA driver on this machine: `repro bench RECIPE` runs kernels on a GPU")]
    NoDriver,
    /// The device asked for is not there.
    #[error("--device {device} is out of range: {count} GPU(s) visible")]
    NoDevice {
        /// The ordinal asked for.
        device: usize,
        /// How many the fingerprint saw.
        count: usize,
    },
}

impl crate::foundation::error::Diagnose for GpuError {
    fn exit_code(&self) -> u8 {
        match self {
            GpuError::NoDriver => crate::foundation::exit::ENVIRONMENT,
            GpuError::NoDevice { .. } => crate::foundation::exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            GpuError::NoDriver => "run it on a GPU machine, use `--command` to benchmark a command, or `repro build` to only build".into(),
            GpuError::NoDevice { .. } => "devices are numbered from 0; check CUDA_VISIBLE_DEVICES".into(),
        })
    }
}

/// Whether recipes can run on `device` here: a driver, and that device in the fingerprint.
pub fn gpu_ready(fp: &Fingerprint, device: usize) -> Result<(), GpuError> {
    if !crate::engines::fingerprint::cuda::driver_present() {
        return Err(GpuError::NoDriver);
    }
    let count: usize = fp
        .get("gpu.count")
        .value()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if device >= count {
        return Err(GpuError::NoDevice { device, count });
    }
    Ok(())
}

/// A result record's common part: the fingerprint, the GPU, the commit, the experiment.
pub fn base_record(
    fp: &Fingerprint,
    root: &Path,
    key: String,
    name: String,
    unit: &str,
) -> ResultRecord {
    ResultRecord::new(
        Some(fp.clone()),
        fp.lookup("gpu.name")
            .first()
            .and_then(|f| f.value().map(str::to_string))
            .unwrap_or_else(|| "no GPU".into()),
        crate::foundation::git::head_commit(root),
        fp.get("repo.dirty").value() == Some("true"),
        key,
        name,
        unit,
    )
}

/// What every result of one recipe bench shares.
pub struct RecipeBench<'a> {
    /// The machine.
    pub fp: &'a Fingerprint,
    /// The project root (for the commit).
    pub root: &'a Path,
    /// The recipe's name and path.
    pub recipe: (&'a str, &'a str),
    /// The build's key and the loaded artifact's digest.
    pub build: (&'a str, &'a str),
    /// How it was measured.
    pub settings: &'a Settings,
    /// `--check-only`.
    pub check_only: bool,
    /// The device's measured peaks, when the recipe states its work (roofline figures).
    pub peaks: Option<&'a crate::foundation::roofline::Peaks>,
}

/// Adds to an experiment's key the bursts `timing` samples in, where more than one: a
/// median of several bursts' medians is another estimate than one burst's, so results and
/// measurements of repros that sampled graph mode in one burst are not this experiment.
pub fn key_bursts(experiment: &mut Value, timing: Option<&crate::engines::gpurun::Timing>) {
    let bursts = timing.map_or(1, crate::engines::gpurun::bursts);
    if bursts > 1 {
        experiment["bursts"] = json!(bursts);
    }
}

/// The result record of one point of a recipe bench.
pub fn recipe_record(b: &RecipeBench<'_>, p: &Point, run: &JobRun) -> ResultRecord {
    let (gbps, tflops) = run
        .summary
        .as_ref()
        .map_or((None, None), |s| throughput(s.median, p.bytes, p.flops));
    let mut experiment = json!({
        "build-key": b.build.0, "must-match": must_match(b.fp), "params": params_json(&p.params),
        "settings": b.settings, "check-only": b.check_only, "kernel": p.job.kernel, "reference": p.job.reference,
    });
    // Settings other than the defaults time another way: another experiment (the key of a
    // result timed with the defaults is as before).
    let timing_settings = p
        .job
        .timing
        .as_ref()
        .map(|t| t.settings.clone())
        .filter(|m| !m.is_empty());
    if let Some(m) = &timing_settings {
        experiment["timing-settings"] = json!(m);
    }
    key_bursts(&mut experiment, p.job.timing.as_ref());
    let (name, path) = b.recipe;
    let mut rec = base_record(
        b.fp,
        b.root,
        crate::foundation::keys::key_of(&experiment),
        name.to_string(),
        "us",
    );
    let report = &run.report;
    rec.recipe = Some(name.to_string());
    rec.recipe_path = Some(path.to_string());
    rec.params = params_json(&p.params);
    rec.build_key = Some(b.build.0.to_string());
    rec.artifact = Some(b.build.1.to_string());
    rec.settings = Some(b.settings.clone());
    rec.launch = Some(p.job.kernel.clone());
    rec.reference = Some(p.job.reference.clone());
    rec.args = Some(p.job.args.clone());
    rec.verdict = run.verdict;
    rec.detail = run.detail.clone();
    rec.check = Some(report.check.clone());
    rec.samples = report.samples_us.clone();
    rec.burst_starts = report.burst_starts.clone();
    rec.summary = run.summary.clone();
    rec.throughput = Some(crate::foundation::records::Throughput {
        gb_per_s: gbps,
        tflops,
        roofline: b
            .peaks
            .and_then(|pk| crate::foundation::roofline::Roofline::judge(gbps, tflops, pk)),
    });
    rec.launches_per_sample = Some(report.launches_per_sample);
    rec.processes = (run.processes > 1).then_some(run.processes);
    rec.graph_overhead_us = report.graph_overhead_us;
    rec.warmup_launches = Some(report.warmup_launches);
    rec.warmup_credit_ms = report.warmup_credit_ms;
    rec.timing_settings = timing_settings;
    rec.converged = report.converged;
    rec.sm_clock_mhz = Some(report.sm_clock_mhz);
    rec.throttled = Some(report.throttled);
    rec
}

/// The summary statistics of samples (seeded by the samples themselves: deterministic).
pub fn summarize(samples: &[f64]) -> Option<stats::Summary> {
    summarize_bursts(samples, &[])
}

/// The summary statistics of samples taken in bursts that begin at `starts` (after the
/// first): the median is the mean of the bursts' medians
/// ([`stats::summarize_bursts`]).
pub fn summarize_bursts(samples: &[f64], starts: &[usize]) -> Option<stats::Summary> {
    let seed = samples
        .iter()
        .fold(0u64, |h, s| h.rotate_left(5) ^ s.to_bits());
    stats::summarize_bursts(samples, starts, seed)
}

/// Throughput from a median time in microseconds: (GB/s, TFLOP/s).
pub fn throughput(
    median_us: f64,
    bytes: Option<f64>,
    flops: Option<f64>,
) -> (Option<f64>, Option<f64>) {
    let s = median_us * 1e-6;
    (bytes.map(|b| b / s / 1e9), flops.map(|f| f / s / 1e12))
}

/// Parameters as JSON.
pub fn params_json(params: &BTreeMap<String, ExprValue>) -> BTreeMap<String, Value> {
    params
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                match v {
                    ExprValue::Int(i) => json!(i),
                    ExprValue::Float(f) => json!(f),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_processes_are_bursts_of_their_own() {
        let report = |samples: &[f64], starts: &[usize]| Report {
            samples_us: samples.to_vec(),
            burst_starts: starts.to_vec(),
            ..Report::default()
        };
        let p = pool(vec![
            report(&[1.0, 1.1, 2.0], &[2]),
            report(&[], &[]),
            report(&[3.0, 3.1], &[]),
            report(&[4.0, 5.0, 5.1], &[1]),
        ]);
        assert_eq!(p.samples_us.len(), 8);
        assert_eq!(p.burst_starts, vec![2, 3, 5, 6]);
        // Five levels, each a burst's median: 1.05, 2, 3.05, 4, 5.05.
        let s = summarize_bursts(&p.samples_us, &p.burst_starts).unwrap();
        assert!((s.median - 3.03).abs() < 1e-12, "{s:?}");
        assert_eq!(
            pool(vec![report(&[1.0], &[])]).burst_starts,
            Vec::<usize>::new()
        );
    }

    #[test]
    fn ptx_parameters_and_arity() {
        let ptx = ".visible .entry k(\n\t.param .u64 .ptr .align 1 k_param_0,\n\t.param .u32 k_param_1,\n\t.param .align 8 .b8 k_param_2[16]\n)\n{";
        assert_eq!(ptx_params(ptx, "k"), Some(vec![8, 4, 16]));
        let l = LaunchSpec {
            kernel: "k".into(),
            grid: [1; 3],
            block: [1; 3],
            shared_mem: 0,
        };
        let buf = ArgSpec::Buffer {
            name: "a".into(),
            dtype: crate::foundation::runspec::DType::F32,
            count: 1,
            init: None,
            seed: 0,
            output: true,
        };
        let n = ArgSpec::Scalar {
            name: "n".into(),
            dtype: crate::foundation::runspec::DType::I32,
            value: 1.0,
        };
        assert_eq!(
            check_arity(ptx, &l, &[buf.clone(), n.clone()])
                .unwrap_err()
                .to_string(),
            "kernel `k` takes 3 parameters but [run] args gives 2"
        );
        let ptx2 = ".entry k(\n.param .u64 a,\n.param .u32 b\n)";
        assert!(check_arity(ptx2, &l, &[buf.clone(), n]).is_ok());
        let wide = ArgSpec::Scalar {
            name: "n".into(),
            dtype: crate::foundation::runspec::DType::I64,
            value: 1.0,
        };
        assert_eq!(
            check_arity(ptx2, &l, &[buf, wide]).unwrap_err().to_string(),
            "kernel `k` parameter 1 is 4 bytes but argument `n` is 8 bytes"
        );
    }

    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    /// What the scripted executor answers to one run.
    enum Fate {
        /// The process exits with `code` after `ms` milliseconds, printing `stdout`/`stderr`.
        Exit {
            code: i32,
            ms: u64,
            stdout: String,
            stderr: String,
        },
        /// The process is killed by a signal.
        Killed(i32),
        /// The process runs past the timeout.
        Timeout,
        /// The process cannot be started.
        Missing,
    }

    fn ok(ms: u64) -> Fate {
        Fate::Exit {
            code: 0,
            ms,
            stdout: "".into(),
            stderr: "".into(),
        }
    }

    /// An executor that answers from a script, in order, and records what it was asked to
    /// run, as hyperfine's `MockExecutor` stands in for processes in its tests.
    struct MockExecutor {
        script: RefCell<VecDeque<Fate>>,
        calls: RefCell<Vec<String>>,
    }

    impl MockExecutor {
        fn new(script: impl IntoIterator<Item = Fate>) -> Self {
            MockExecutor {
                script: RefCell::new(script.into_iter().collect()),
                calls: RefCell::new(Vec::new()),
            }
        }

        fn calls(&self) -> Vec<String> {
            self.calls.borrow().clone()
        }

        fn next(&self, what: String, timeout: Duration) -> Result<Measured, ProcessError> {
            self.calls.borrow_mut().push(what.clone());
            let fate = self
                .script
                .borrow_mut()
                .pop_front()
                .unwrap_or_else(|| panic!("not scripted: run {}", self.calls.borrow().len()));
            let exited = |status: ExitStatus, ms: u64, stdout: &str, stderr: &str| Measured {
                output: Output {
                    status,
                    stdout: stdout.as_bytes().to_vec(),
                    stderr: stderr.as_bytes().to_vec(),
                    elapsed: Duration::from_millis(ms),
                    stdout_dropped: 0,
                    stderr_dropped: 0,
                },
                user_s: ms as f64 * 1e-3 / 2.0,
                system_s: ms as f64 * 1e-3 / 4.0,
            };
            match fate {
                Fate::Exit {
                    code,
                    ms,
                    stdout,
                    stderr,
                } => Ok(exited(
                    ExitStatus::from_raw(code << 8),
                    ms,
                    &stdout,
                    &stderr,
                )),
                Fate::Killed(sig) => Ok(exited(ExitStatus::from_raw(sig), 1, "", "")),
                Fate::Timeout => Err(ProcessError::Timeout {
                    argv: what,
                    timeout,
                    stdout: String::new(),
                    stderr: String::new(),
                }),
                Fate::Missing => Err(ProcessError::NotFound { program: what }),
            }
        }
    }

    impl Executor for MockExecutor {
        fn run_shell(
            &self,
            _root: &Path,
            command: &str,
            timeout: Duration,
            _device: Option<usize>,
        ) -> Result<Measured, ProcessError> {
            self.next(command.to_string(), timeout)
        }

        fn run_gpu_job_in(
            &self,
            job: &[u8],
            visible: Option<&str>,
            timeout: Duration,
            _worker: usize,
        ) -> Result<Output, ProcessError> {
            let job: Job = serde_json::from_slice(job).expect("the child is sent a job");
            let seeing = visible.map(|v| format!(" seeing {v}")).unwrap_or_default();
            self.next(
                format!("gpu-job {} on {}{seeing}", job.kernel.kernel, job.device),
                timeout,
            )
            .map(|m| m.output)
        }
    }

    fn bench_of<'a>(metric: &'a Metric, prepare: Option<&'a str>) -> CommandBench<'a> {
        CommandBench {
            root: Path::new("/nonexistent"),
            command: "./run",
            metric,
            prepare,
            warmup_runs: 0,
            min_runs: 3,
            max_runs: 3,
            max_noise: 0.02,
            timeout: Duration::from_secs(2),
        }
    }

    /// Runs a bench through the mock, returning the outcome and the progress events.
    fn drive(exec: &MockExecutor, b: &CommandBench) -> (CommandBenchOutcome, Vec<BenchProgress>) {
        let events = RefCell::new(Vec::new());
        let out = run_command_bench(exec, b, &|p| events.borrow_mut().push(p));
        (out, events.into_inner())
    }

    #[test]
    fn warm_ups_run_first_with_prepare_and_are_not_counted() {
        let metric = Metric::Time;
        let b = CommandBench {
            warmup_runs: 2,
            ..bench_of(&metric, Some("make"))
        };
        // prepare, run: twice as warm-ups (slow, as a cold cache is), three times timed.
        let exec = MockExecutor::new([
            ok(1),
            ok(50),
            ok(1),
            ok(40),
            ok(1),
            ok(10),
            ok(1),
            ok(11),
            ok(1),
            ok(12),
        ]);
        let (out, events) = drive(&exec, &b);
        assert_eq!(out.verdict, ResultVerdict::Ok);
        assert_eq!(out.detail, None);
        assert_eq!(out.samples, [10.0, 11.0, 12.0]);
        assert_eq!(
            out.runs.iter().map(|r| r.wall_s).collect::<Vec<_>>(),
            [0.010, 0.011, 0.012]
        );
        assert_eq!(out.runs[0].user_s, 0.005);
        assert_eq!(out.runs[0].system_s, 0.0025);
        assert_eq!(exec.calls(), ["make", "./run"].repeat(5));
        assert_eq!(
            events,
            [
                BenchProgress::Warmup { n: 1, of: 2 },
                BenchProgress::Warmup { n: 2, of: 2 },
                BenchProgress::Timing,
                BenchProgress::Ran,
                BenchProgress::Ran,
                BenchProgress::Ran,
            ]
        );
    }

    #[test]
    fn timing_stops_once_the_median_is_quiet_or_at_the_most_runs() {
        let metric = Metric::Time;
        let b = CommandBench {
            min_runs: 3,
            max_runs: 8,
            ..bench_of(&metric, None)
        };
        let exec = MockExecutor::new((0..8).map(|_| ok(10)));
        let (out, _) = drive(&exec, &b);
        assert_eq!(
            out.samples.len(),
            3,
            "identical runs converge at --min-runs"
        );
        let exec = MockExecutor::new((0..8).map(|i| ok(if i % 2 == 0 { 10 } else { 20 })));
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.samples.len(), 8, "noisy runs go on to --max-runs");
        assert_eq!(out.verdict, ResultVerdict::Ok);
    }

    #[test]
    fn a_failed_warm_up_ends_the_bench_as_a_crash_naming_it() {
        let metric = Metric::Time;
        let b = CommandBench {
            warmup_runs: 3,
            ..bench_of(&metric, None)
        };
        let exec = MockExecutor::new([
            ok(5),
            Fate::Exit {
                code: 3,
                ms: 5,
                stdout: "".into(),
                stderr: "one\ntwo\nthree\nfour\n".into(),
            },
        ]);
        let (out, events) = drive(&exec, &b);
        assert_eq!(out.verdict, ResultVerdict::Crash);
        assert_eq!(
            out.detail.as_deref(),
            Some("warm-up run 2: `./run` exited with code 3: two | three | four")
        );
        assert!(out.samples.is_empty());
        assert_eq!(exec.calls().len(), 2, "nothing runs after the failure");
        assert_eq!(events.last(), Some(&BenchProgress::Timing));
    }

    #[test]
    fn a_timeout_or_a_signal_ends_the_bench_with_what_was_measured() {
        let metric = Metric::Time;
        let b = bench_of(&metric, None);
        let exec = MockExecutor::new([ok(10), Fate::Timeout]);
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.verdict, ResultVerdict::Timeout);
        assert_eq!(out.detail.as_deref(), Some("a run took longer than 2s"));
        assert_eq!(out.samples, [10.0]);
        let exec = MockExecutor::new([ok(10), ok(10), Fate::Killed(libc::SIGSEGV)]);
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.verdict, ResultVerdict::Crash);
        assert_eq!(
            out.detail.as_deref(),
            Some("`./run` was killed by SIGSEGV (signal 11)")
        );
        assert_eq!(out.samples.len(), 2);
        let exec = MockExecutor::new([Fate::Missing]);
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.verdict, ResultVerdict::Crash);
        assert_eq!(out.detail.as_deref(), Some("`./run` was not found"));
    }

    #[test]
    fn a_failed_prepare_names_the_run_it_came_before() {
        let metric = Metric::Time;
        let b = CommandBench {
            warmup_runs: 1,
            ..bench_of(&metric, Some("make"))
        };
        let exec = MockExecutor::new([Fate::Timeout]);
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.verdict, ResultVerdict::Crash);
        assert_eq!(
            out.detail.as_deref(),
            Some("--prepare `make` before warm-up run 1 took longer than 2s")
        );
        let exec = MockExecutor::new([
            ok(1),
            ok(10),
            ok(1),
            ok(10),
            Fate::Exit {
                code: 2,
                ms: 1,
                stdout: "".into(),
                stderr: "".into(),
            },
        ]);
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.verdict, ResultVerdict::Crash);
        assert_eq!(
            out.detail.as_deref(),
            Some("--prepare before run 2 failed: `make` exited with code 2")
        );
        assert_eq!(out.samples, [10.0]);
    }

    #[test]
    fn the_metric_is_read_from_each_run_and_a_bad_one_is_a_failure() {
        let metric = Metric::parse("json:t").unwrap();
        let b = bench_of(&metric, None);
        let json = |stdout: &str| Fate::Exit {
            code: 0,
            ms: 100,
            stdout: stdout.into(),
            stderr: "".into(),
        };
        let exec = MockExecutor::new([
            json(r#"{"t": 1.5}"#),
            json(r#"{"t": 2}"#),
            json(r#"{"t": 1.75}"#),
        ]);
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.samples, [1.5, 2.0, 1.75]);
        assert_eq!(
            out.runs[1].wall_s, 0.1,
            "wall time is kept beside the metric"
        );
        let exec = MockExecutor::new([json(r#"{"u": 1}"#)]);
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.detail.as_deref(), Some("no `t` in the JSON on stdout"));
        let regex = Metric::parse(r"regex:took (\S+)").unwrap();
        let exec = MockExecutor::new([json("took inf")]);
        let (out, _) = drive(&exec, &bench_of(&regex, None));
        assert_eq!(out.verdict, ResultVerdict::Crash);
        assert_eq!(out.detail.as_deref(), Some("the metric is inf"));
    }

    #[test]
    fn statistics_come_from_the_timed_samples_with_outliers_counted() {
        let metric = Metric::Time;
        let b = CommandBench {
            warmup_runs: 1,
            min_runs: 10,
            max_runs: 10,
            ..bench_of(&metric, None)
        };
        let ms = [900, 10, 11, 9, 10, 12, 10, 9, 11, 500, 10];
        let exec = MockExecutor::new(ms.map(ok));
        let (out, _) = drive(&exec, &b);
        assert_eq!(out.samples.len(), 10);
        let s = summarize(&out.samples).unwrap();
        assert_eq!(s.n, 10);
        assert_eq!(
            s.median, 10.0,
            "the warm-up and the outlier do not move the median"
        );
        assert_eq!(s.max, 500.0, "the warm-up is not a sample");
        assert_eq!(s.outliers, 1, "{s:?}");
        assert!(s.mean > s.median);
    }

    /// A job for `kernel` on `device`, checked and timed by nothing.
    fn job_of(kernel: &str, device: usize) -> Job {
        Job {
            schema: crate::engines::gpurun::SCHEMA,
            device,
            module: "k.cubin".into(),
            kernel: LaunchSpec {
                kernel: kernel.into(),
                grid: [1; 3],
                block: [32, 1, 1],
                shared_mem: 0,
            },
            reference: None,
            args: vec![],
            tolerances: BTreeMap::new(),
            timing: None,
            time_on_failure: false,
        }
    }

    #[test]
    fn the_gpu_child_fate_becomes_a_report() {
        let job = job_of("saxpy", 0);
        let t = Duration::from_secs(5);
        let sent = Report {
            samples_us: vec![1.0, 2.0],
            ..Report::default()
        };
        let exec = MockExecutor::new([
            Fate::Exit {
                code: 0,
                ms: 1,
                stdout: serde_json::to_string(&sent).unwrap(),
                stderr: "".into(),
            },
            Fate::Exit {
                code: 4,
                ms: 1,
                stdout: "".into(),
                stderr: "CUDA_ERROR_NO_DEVICE\n".into(),
            },
            Fate::Exit {
                code: 0,
                ms: 1,
                stdout: "{not json".into(),
                stderr: "".into(),
            },
            Fate::Killed(libc::SIGABRT),
            Fate::Timeout,
            Fate::Missing,
        ]);
        let run = || run_child_seeing(&exec, &job, None, t);
        assert_eq!(run().unwrap(), sent);
        let text = |r: Report| r.error.map(|e| e.to_string());
        assert_eq!(
            text(run().unwrap()).as_deref(),
            Some("the benchmark process exited with code 4 without a report: CUDA_ERROR_NO_DEVICE")
        );
        let e = text(run().unwrap()).unwrap();
        assert!(
            e.starts_with(
                "the benchmark process exited with code 0 but its report could not be read ("
            ),
            "{e}"
        );
        let killed = run().unwrap();
        assert_eq!(
            text(killed.clone()).as_deref(),
            Some("the benchmark process was killed by SIGABRT (signal 6): ")
        );
        assert_eq!(verdict(&killed).0, ResultVerdict::Crash);
        // A timeout is its own variant, and its own verdict, whoever reads it.
        let late = run().unwrap();
        assert_eq!(late.error, Some(Failure::Timeout { after_ms: 5000 }));
        assert_eq!(
            verdict(&late),
            (
                ResultVerdict::Timeout,
                Some("TIMEOUT: no answer within 5s".into())
            )
        );
        assert_eq!(
            run().unwrap_err().to_string(),
            "`gpu-job saxpy on 0 seeing 0` was not found"
        );
        assert_eq!(exec.calls(), ["gpu-job saxpy on 0 seeing 0"].repeat(6));
    }

    /// An executor for split measurements: answers each GPU job with the next scripted
    /// report and records the worker, the share of the time and what was handed over.
    /// What a split measurement's process was sent: its worker, its share of the minimum
    /// time, its own count of processes, and what the one before handed over.
    type SplitCall = (usize, f64, usize, Option<crate::engines::gpurun::After>);

    struct SplitExecutor {
        script: RefCell<VecDeque<Report>>,
        calls: RefCell<Vec<SplitCall>>,
        max_samples: RefCell<Vec<usize>>,
    }

    impl SplitExecutor {
        fn new(script: impl IntoIterator<Item = Report>) -> Self {
            SplitExecutor {
                script: RefCell::new(script.into_iter().collect()),
                calls: RefCell::new(Vec::new()),
                max_samples: RefCell::new(Vec::new()),
            }
        }
    }

    impl Executor for SplitExecutor {
        fn run_shell(
            &self,
            _root: &Path,
            _command: &str,
            _timeout: Duration,
            _device: Option<usize>,
        ) -> Result<Measured, ProcessError> {
            unreachable!("no commands here")
        }

        fn run_gpu_job_in(
            &self,
            job: &[u8],
            _visible: Option<&str>,
            _timeout: Duration,
            worker: usize,
        ) -> Result<Output, ProcessError> {
            let job: Job = serde_json::from_slice(job).expect("the child is sent a job");
            let t = job.timing.expect("timed");
            self.max_samples.borrow_mut().push(t.max_samples);
            self.calls
                .borrow_mut()
                .push((worker, t.min_time_ms, t.processes(), t.after));
            let report = self.script.borrow_mut().pop_front().expect("scripted");
            Ok(Output {
                status: ExitStatus::from_raw(0),
                stdout: serde_json::to_vec(&report).unwrap(),
                stderr: Vec::new(),
                elapsed: Duration::from_millis(1),
                stdout_dropped: 0,
                stderr_dropped: 0,
            })
        }
    }

    fn part(samples: &[f64], busy_ms: f64, overhead: f64) -> Report {
        Report {
            samples_us: samples.to_vec(),
            launches_per_sample: 512,
            warmup_launches: 3,
            converged: true,
            sm_clock_mhz: Some((1980, 1975, 1980)),
            graph_overhead_us: Some(overhead),
            busy_ms: Some(busy_ms),
            phases: vec![Phase::new("settle", 100.0), Phase::new("sampling", 200.0)],
            ..Report::default()
        }
    }

    /// The check of an output `c` of four elements with `mismatches` outside its tolerance.
    fn output_check(mismatches: u64) -> crate::foundation::records::OutputCheck {
        crate::foundation::records::OutputCheck {
            name: "c".into(),
            elements: 4,
            mismatches,
            unwritten: 0,
            max_abs_err: 1.0,
            max_rel_err: 1.0,
            atol: 0.0,
            rtol: 0.0,
            first_mismatch: None,
        }
    }

    fn split_job(processes: usize) -> Job {
        Job {
            timing: Some(Timing {
                min_time_ms: 600.0,
                settings: [("REPRO_TIMING_PROCESSES".to_string(), processes.to_string())].into(),
                ..Timing::quick(crate::foundation::records::Mode::Graph)
            }),
            ..job_of("k", 0)
        }
    }

    /// A job timed in three processes: each in a worker of its own with a third of the
    /// time, each told the GPU time and the batch of the one before, and one report of all.
    #[test]
    fn a_split_measurement_pools_its_processes_in_order() {
        let exec = SplitExecutor::new([
            part(&[2.0, 2.1], 300.0, 1.0),
            Report {
                converged: false,
                sm_clock_mhz: Some((1980, 1900, 1980)),
                ..part(&[2.2], 250.0, 2.0)
            },
            part(&[2.3, 2.4], 260.0, 3.0),
        ]);
        let run = bench_job(&exec, &split_job(3), Duration::from_secs(5)).unwrap();
        let after = |busy_ms| {
            Some(crate::engines::gpurun::After {
                busy_ms,
                batch: 512,
            })
        };
        assert_eq!(
            *exec.calls.borrow(),
            [
                (0, 200.0, 1, None),
                (1, 200.0, 1, after(300.0)),
                (2, 200.0, 1, after(250.0))
            ]
        );
        assert_eq!(run.processes, 3);
        assert_eq!(run.verdict, ResultVerdict::Ok);
        let r = &run.report;
        assert_eq!(r.samples_us, [2.0, 2.1, 2.2, 2.3, 2.4]);
        // Each process a burst: the mean of 2.05, 2.2 and 2.35.
        assert_eq!(r.burst_starts, [2, 3]);
        let median = run.summary.as_ref().map_or(0.0, |s| s.median);
        assert!((median - 2.2).abs() < 1e-12, "{median}");
        assert_eq!(r.graph_overhead_us, Some(2.0));
        assert_eq!((r.warmup_launches, r.busy_ms), (9, Some(810.0)));
        assert!(!r.converged);
        assert_eq!(r.sm_clock_mhz, Some((1980, 1975, 1980)));
        let settle: Vec<_> = r.phases.iter().map(|p| (p.name.as_str(), p.ms)).collect();
        assert_eq!(settle, [("settle", 300.0), ("sampling", 600.0)]);
        // One process: one job, all the time, nothing split.
        let exec = SplitExecutor::new([part(&[2.0], 300.0, 1.0)]);
        let run = bench_job(&exec, &split_job(1), Duration::from_secs(5)).unwrap();
        assert_eq!(*exec.calls.borrow(), [(0, 600.0, 1, None)]);
        assert_eq!(run.processes, 1);
    }

    /// The first process that fails, or whose check fails, ends the measurement: its
    /// failure is the answer, and no later process runs.
    #[test]
    fn a_split_measurement_ends_at_its_first_failure() {
        let (wrong, right) = (output_check(1), output_check(0));
        let exec = SplitExecutor::new([
            Report {
                check: Some(vec![right]),
                ..part(&[2.0], 300.0, 1.0)
            },
            Report {
                check: Some(vec![wrong]),
                ..part(&[9.0], 300.0, 1.0)
            },
        ]);
        let run = bench_job(&exec, &split_job(4), Duration::from_secs(5)).unwrap();
        assert_eq!(exec.calls.borrow().len(), 2);
        assert_eq!((run.verdict, run.processes), (ResultVerdict::Wrong, 2));
        let exec = SplitExecutor::new([
            part(&[2.0], 300.0, 1.0),
            Report {
                error: Some(Failure::Driver {
                    name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                    during: "sampling".into(),
                }),
                ..Report::default()
            },
        ]);
        let run = bench_job(&exec, &split_job(4), Duration::from_secs(5)).unwrap();
        assert_eq!((run.verdict, run.processes), (ResultVerdict::Crash, 2));
        assert_eq!(run.report.samples_us, [2.0]);
    }

    /// A job that times anyway goes on through a failed check, and keeps the first
    /// failed check; the processes together take at most the most samples asked for.
    #[test]
    fn a_split_measurement_times_anyway_and_keeps_to_the_most_samples() {
        let check = output_check;
        let with = |c, samples: &[f64]| Report {
            check: Some(vec![c]),
            ..part(samples, 300.0, 1.0)
        };
        let exec = SplitExecutor::new([
            with(check(2), &[9.0]),
            with(check(0), &[9.1]),
            with(check(1), &[9.2]),
        ]);
        let job = Job {
            time_on_failure: true,
            ..split_job(3)
        };
        let run = bench_job(&exec, &job, Duration::from_secs(5)).unwrap();
        assert_eq!((run.verdict, run.processes), (ResultVerdict::Wrong, 3));
        assert_eq!(run.report.check.as_ref().unwrap()[0].mismatches, 2);
        assert_eq!(run.report.samples_us, [9.0, 9.1, 9.2]);
        // At most 5 samples in three processes: 2, then 2 of the 3 left, then 1.
        let mut job = split_job(3);
        if let Some(t) = job.timing.as_mut() {
            (t.min_samples, t.max_samples) = (1, 5);
        }
        let exec = SplitExecutor::new([
            part(&[1.0, 1.0], 300.0, 1.0),
            part(&[1.0, 1.0], 300.0, 1.0),
            part(&[1.0], 300.0, 1.0),
        ]);
        let run = bench_job(&exec, &job, Duration::from_secs(5)).unwrap();
        assert_eq!(run.report.samples_us.len(), 5);
        assert_eq!(*exec.max_samples.borrow(), [2, 2, 1]);
        // Once the most are taken, no process more.
        let exec = SplitExecutor::new([part(&[1.0; 5], 300.0, 1.0)]);
        let run = bench_job(&exec, &job, Duration::from_secs(5)).unwrap();
        assert_eq!((run.processes, exec.calls.borrow().len()), (1, 1));
    }

    #[test]
    fn the_gpu_child_sees_only_its_device() {
        // The parent sees every GPU: the child gets the ordinal, and opens it as 0.
        assert_eq!(only_device(None, 1).as_deref(), Some("1"));
        // The parent sees a list (Slurm's, or the user's): the child gets its entry.
        assert_eq!(only_device(Some("2,3"), 1).as_deref(), Some("3"));
        assert_eq!(
            only_device(Some("GPU-aaaa, MIG-bbbb"), 1).as_deref(),
            Some("MIG-bbbb")
        );
        // No such entry, or no GPU visible: the child sees what the parent sees.
        assert_eq!(only_device(Some("2,3"), 2), None);
        assert_eq!(only_device(Some(""), 0), None);
        let job = |device| job_of("k", device);
        let report = serde_json::to_string(&Report::default()).unwrap();
        let ok = || Fate::Exit {
            code: 0,
            ms: 1,
            stdout: report.clone(),
            stderr: "".into(),
        };
        let exec = MockExecutor::new([ok(), ok(), ok()]);
        let t = Duration::from_secs(5);
        run_child_seeing(&exec, &job(1), None, t).unwrap();
        run_child_seeing(&exec, &job(1), Some("4,6"), t).unwrap();
        run_child_seeing(&exec, &job(3), Some("4,6"), t).unwrap();
        assert_eq!(
            exec.calls(),
            [
                "gpu-job k on 0 seeing 1",
                "gpu-job k on 0 seeing 6",
                "gpu-job k on 3"
            ]
        );
    }

    #[test]
    fn metrics() {
        assert_eq!(
            Metric::parse("time").unwrap().extract("", 3.5).unwrap(),
            3.5
        );
        let j = Metric::parse("json:results.0.median").unwrap();
        assert_eq!(
            j.extract(r#"{"results":[{"median":1.25}]}"#, 0.0).unwrap(),
            1.25
        );
        assert!(
            j.extract("not json", 0.0)
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        let r = Metric::parse(r"regex:time: ([0-9.]+) us").unwrap();
        assert_eq!(r.extract("warmup\ntime: 12.5 us\n", 0.0).unwrap(), 12.5);
        assert!(Metric::parse("regex:(").is_err());
        assert!(Metric::parse("bogus").is_err());
    }
}
