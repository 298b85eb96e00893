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
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::engines::fingerprint::Fingerprint;
use crate::engines::gpurun::{Job, Report, Timing};
use crate::foundation::expr::Value as ExprValue;
use crate::foundation::fields::{SPECS, Tier};
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::records::{ArgSpec, LaunchSpec, ResultVerdict, Settings};
use crate::foundation::runspec::{Arg, DType, Launch, Sections};
use crate::foundation::stats;

/// The result-record schema.
pub const SCHEMA: u64 = 1;

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
    }
}

/// One parameter point of a recipe, resolved.
#[derive(Clone, Debug)]
pub struct Point {
    /// The parameter values.
    pub params: BTreeMap<String, ExprValue>,
    /// The job for the child.
    pub job: Job,
    /// Bytes moved per launch, if the recipe says.
    pub bytes: Option<f64>,
    /// FLOPs per launch, if the recipe says.
    pub flops: Option<f64>,
}

fn dims(
    exprs: &[crate::foundation::expr::Expr],
    params: &BTreeMap<String, ExprValue>,
    what: &str,
) -> Result<[u32; 3], String> {
    let mut d = [1u32; 3];
    for (i, e) in exprs.iter().enumerate() {
        let c = e.eval_count(params, what).map_err(|err| e.explain(&err))?;
        d[i] = u32::try_from(c).map_err(|_| format!("{what} `{}` is {c}, too large", e.text()))?;
    }
    Ok(d)
}

fn launch(
    l: &Launch,
    params: &BTreeMap<String, ExprValue>,
    section: &str,
) -> Result<LaunchSpec, String> {
    let grid = dims(&l.grid, params, &format!("[{section}] grid"))?;
    let block = dims(&l.block, params, &format!("[{section}] block"))?;
    let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
    if threads == 0 || threads > 1024 {
        return Err(format!(
            "[{section}] block has {threads} threads; a block holds 1 to 1024"
        ));
    }
    if grid.contains(&0) {
        return Err(format!("[{section}] grid {grid:?} has a zero dimension"));
    }
    let smem = l
        .shared_mem
        .eval_count(params, &format!("[{section}] shared-mem"))
        .map_err(|e| l.shared_mem.explain(&e))?;
    Ok(LaunchSpec {
        kernel: l.kernel.clone(),
        grid,
        block,
        shared_mem: u32::try_from(smem)
            .map_err(|_| format!("[{section}] shared-mem {smem} is too large"))?,
    })
}

/// Default bound on the device memory one point's buffers may ask for: 256 GiB, beyond any
/// single GPU (`REPRO_MAX_BUFFER_BYTES` overrides). It catches a mistyped count before the
/// child tries to allocate it.
pub const DEFAULT_MAX_BUFFER_BYTES: u64 = 256 << 30;

fn max_buffer_bytes() -> u64 {
    std::env::var("REPRO_MAX_BUFFER_BYTES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_BUFFER_BYTES)
}

/// Checks that a scalar's value is representable in its type (no silent wrap or cast).
fn scalar_fits(name: &str, dtype: DType, v: f64) -> Result<(), String> {
    let (lo, hi) = match dtype {
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::U32 => (0.0, f64::from(u32::MAX)),
        DType::I64 => (-(2f64.powi(63)), 2f64.powi(63) - 1.0),
        DType::U64 => (0.0, 2f64.powi(64) - 1.0),
        DType::U8 => (0.0, 255.0),
        _ => {
            return if v.is_nan() {
                Err(format!("[run] args `{name}` value is NaN"))
            } else {
                Ok(())
            };
        }
    };
    if v.is_finite() && v.fract() == 0.0 && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(format!(
            "[run] args `{name}` value {v} does not fit a {}",
            format!("{dtype:?}").to_lowercase()
        ))
    }
}

/// Resolves a recipe's sections at every parameter point into jobs.
pub fn resolve(
    sections: &Sections,
    module: &Path,
    settings: &Settings,
    check_only: bool,
    time_on_failure: bool,
) -> Result<Vec<Point>, String> {
    let run = sections
        .run
        .as_ref()
        .ok_or("the recipe has no [run] section")?;
    // Kernels are named as written in the source; a C++ kernel is launched by its mangled
    // symbol, whatever its template arguments.
    let symbols = std::fs::read(module)
        .map(|b| crate::foundation::symbols::module_symbols(&b))
        .unwrap_or_default();
    let symbol = |mut l: LaunchSpec| -> Result<LaunchSpec, String> {
        if !symbols.is_empty() {
            l.kernel = crate::foundation::symbols::resolve(&l.kernel, &symbols)
                .map_err(|e| e.to_string())?
                .to_string();
        }
        Ok(l)
    };
    crate::foundation::runspec::sweep_points(&sections.params)?;
    let max_bytes = max_buffer_bytes();
    let mut points = Vec::new();
    for params in crate::foundation::runspec::combinations(&sections.params) {
        let mut args = Vec::new();
        let mut total: u64 = 0;
        for a in &run.args {
            args.push(match a {
                Arg::Buffer {
                    name,
                    dtype,
                    count,
                    init,
                    seed,
                    output,
                } => {
                    let n = count
                        .eval_count(&params, &format!("[run] args `{name}` count"))
                        .map_err(|e| count.explain(&e))?;
                    let bytes = n
                        .checked_mul(dtype.size() as u64)
                        .and_then(|b| total.checked_add(b))
                        .filter(|t| *t <= max_bytes)
                        .ok_or_else(|| {
                            format!(
                                "[run] args `{name}` count `{}` = {n} makes the buffers larger than {max_bytes} bytes (REPRO_MAX_BUFFER_BYTES)",
                                count.text()
                            )
                        })?;
                    total = bytes;
                    ArgSpec::Buffer {
                        name: name.clone(),
                        dtype: *dtype,
                        count: n,
                        init: init.clone(),
                        seed: *seed,
                        output: *output,
                    }
                }
                Arg::Scalar { name, dtype, value } => {
                    let v = value.eval(&params).map_err(|e| value.explain(&e))?.as_f64();
                    scalar_fits(name, *dtype, v)?;
                    ArgSpec::Scalar {
                        name: name.clone(),
                        dtype: *dtype,
                        value: v,
                    }
                }
            });
        }
        let (reference, tolerances) = match &sections.check {
            Some(c) => {
                let mut tol = BTreeMap::new();
                for a in &run.args {
                    if let Arg::Buffer {
                        name, output: true, ..
                    } = a
                    {
                        tol.insert(
                            name.clone(),
                            c.per_output.get(name).copied().unwrap_or((c.atol, c.rtol)),
                        );
                    }
                }
                (Some(symbol(launch(&c.launch, &params, "check")?)?), tol)
            }
            None => (None, BTreeMap::new()),
        };
        let eval = |e: &Option<crate::foundation::expr::Expr>| -> Result<Option<f64>, String> {
            e.as_ref()
                .map(|e| {
                    e.eval(&params)
                        .map(|v| v.as_f64())
                        .map_err(|err| e.explain(&err))
                })
                .transpose()
        };
        let job = Job {
            schema: crate::engines::gpurun::SCHEMA,
            device: settings.device,
            module: module.display().to_string(),
            kernel: symbol(launch(&run.launch, &params, "run")?)?,
            reference,
            args,
            tolerances,
            timing: (!check_only).then(|| timing(settings)),
            time_on_failure,
        };
        points.push(Point {
            bytes: eval(&sections.work.bytes)?,
            flops: eval(&sections.work.flops)?,
            params,
            job,
        });
    }
    Ok(points)
}

/// The parameter sizes (bytes) of an entry point, from its PTX `.param` list.
pub fn ptx_params(ptx: &str, entry: &str) -> Option<Vec<usize>> {
    let start = ptx.find(&format!(".entry {entry}("))?;
    let rest = &ptx[start..];
    let body = &rest[rest.find('(')? + 1..rest.find(')')?];
    Some(
        body.split(',')
            .filter(|p| p.contains(".param"))
            .map(|p| {
                let p = p.trim();
                if p.contains('[') {
                    // `.param .align 8 .b8 name[16]`: an aggregate of the bracketed size.
                    p.rsplit_once('[')
                        .and_then(|(_, n)| n.trim_end_matches(']').parse().ok())
                        .unwrap_or(0)
                } else if p.contains(".u64")
                    || p.contains(".s64")
                    || p.contains(".f64")
                    || p.contains(".b64")
                {
                    8
                } else if p.contains(".u16")
                    || p.contains(".s16")
                    || p.contains(".f16")
                    || p.contains(".b16")
                {
                    2
                } else if p.contains(".u8") || p.contains(".s8") || p.contains(".b8") {
                    1
                } else {
                    4
                }
            })
            .collect(),
    )
}

/// Checks the arguments against the kernel's parameters before anything is launched.
pub fn check_arity(ptx: &str, launch: &LaunchSpec, args: &[ArgSpec]) -> Result<(), String> {
    let Some(params) = ptx_params(ptx, &launch.kernel) else {
        return Ok(());
    };
    if params.len() != args.len() {
        return Err(format!(
            "kernel `{}` takes {} parameters but [run] args gives {}",
            launch.kernel,
            params.len(),
            args.len()
        ));
    }
    for (i, (size, a)) in params.iter().zip(args).enumerate() {
        let (name, want) = match a {
            ArgSpec::Buffer { name, .. } => (name, 8),
            ArgSpec::Scalar { name, dtype, .. } => (name, dtype.size()),
        };
        if *size != want {
            return Err(format!(
                "kernel `{}` parameter {i} is {size} bytes but argument `{name}` is {want} bytes",
                launch.kernel
            ));
        }
    }
    Ok(())
}

/// The verdict of one result.
pub fn verdict(report: &Report) -> (ResultVerdict, Option<String>) {
    if let Some(e) = &report.error {
        return (ResultVerdict::Crash, Some(e.clone()));
    }
    if let Some(checks) = &report.check
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

/// Runs the child `repro gpu-job` with a timeout and turns its fate into a report.
pub fn run_child(job: &Job, timeout: Duration) -> Result<Report, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the repro executable: {e}"))?;
    let input = serde_json::to_vec(job).expect("a job serialises");
    match Cmd::new(exe)
        .arg("gpu-job")
        .stdin_bytes(input)
        .timeout(timeout)
        .output()
    {
        Ok(out) => {
            let parsed = serde_json::from_slice::<Report>(&out.stdout);
            if let Ok(report) = parsed {
                return Ok(report);
            }
            let why = match out.status.code() {
                Some(c) if !out.stdout.is_empty() => format!(
                    "the benchmark process exited with code {c} but its report could not be read ({})",
                    parsed.err().map(|e| e.to_string()).unwrap_or_default()
                ),
                Some(c) => format!("the benchmark process exited with code {c} without a report"),
                None => format!(
                    "the benchmark process {}",
                    crate::foundation::process::describe_status(out.status)
                ),
            };
            let stderr = out.stderr_str();
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            Ok(Report {
                error: Some(format!(
                    "{why}: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )),
                ..Report::default()
            })
        }
        Err(ProcessError::Timeout { .. }) => Ok(Report {
            error: Some(format!(
                "TIMEOUT: no answer within {}",
                humantime::format_duration(timeout)
            )),
            ..Report::default()
        }),
        Err(e) => Err(e.to_string()),
    }
}

/// The summary statistics of samples (seeded by the samples themselves: deterministic).
pub fn summarize(samples: &[f64]) -> Option<stats::Summary> {
    let seed = samples
        .iter()
        .fold(0u64, |h, s| h.rotate_left(5) ^ s.to_bits());
    stats::summarize(samples, seed)
}

/// How a command bench takes its metric from each run.
#[derive(Clone, Debug, PartialEq)]
pub enum Metric {
    /// The process's wall time (ms).
    Time,
    /// A number at a dotted path in the JSON on stdout (`results.0.median`).
    Json(String),
    /// The first capture group (or the whole match) of a regular expression on stdout.
    Regex(String),
}

impl Metric {
    /// Parses `time`, `json:PATH` or `regex:RE`.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == "time" {
            Ok(Metric::Time)
        } else if let Some(p) = s.strip_prefix("json:") {
            Ok(Metric::Json(p.to_string()))
        } else if let Some(r) = s.strip_prefix("regex:") {
            regex_lite::Regex::new(r).map_err(|e| format!("--metric regex `{r}`: {e}"))?;
            Ok(Metric::Regex(r.to_string()))
        } else {
            Err(format!(
                "--metric `{s}`: expected time, json:PATH or regex:RE"
            ))
        }
    }
    /// The metric's text form.
    pub fn text(&self) -> String {
        match self {
            Metric::Time => "time".into(),
            Metric::Json(p) => format!("json:{p}"),
            Metric::Regex(r) => format!("regex:{r}"),
        }
    }
    /// Extracts the metric from one run.
    pub fn extract(&self, stdout: &str, wall_ms: f64) -> Result<f64, String> {
        match self {
            Metric::Time => Ok(wall_ms),
            Metric::Json(path) => {
                let v: Value = serde_json::from_str(stdout.trim())
                    .map_err(|e| format!("stdout is not JSON: {e}"))?;
                let mut cur = &v;
                for part in path.split('.') {
                    cur = match cur {
                        Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
                        Value::Object(o) => o.get(part),
                        _ => None,
                    }
                    .ok_or_else(|| format!("no `{path}` in the JSON on stdout"))?;
                }
                cur.as_f64()
                    .ok_or_else(|| format!("`{path}` is not a number"))
            }
            Metric::Regex(r) => {
                let re = regex_lite::Regex::new(r).map_err(|e| e.to_string())?;
                let caps = re
                    .captures(stdout)
                    .ok_or_else(|| format!("regex `{r}` does not match stdout"))?;
                let m = caps
                    .get(1)
                    .or_else(|| caps.get(0))
                    .expect("a match has group 0");
                m.as_str()
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| format!("regex `{r}` matched `{}`, not a number", m.as_str()))
            }
        }
    }
}

/// One command-bench run's outcome.
pub enum CommandRun {
    /// A sample.
    Sample(f64),
    /// The command failed (non-zero exit, signal) or its metric was missing.
    Failed(String),
    /// It ran past the timeout.
    Timeout,
}

/// One run of a command bench, with what hyperfine also reports.
#[derive(Clone, Copy, Debug)]
pub struct TimedRun {
    /// The metric's value.
    pub value: f64,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// User CPU time of the run's processes, seconds.
    pub user_s: f64,
    /// System CPU time of the run's processes, seconds.
    pub system_s: f64,
}

/// CPU time (user, system) of every child this process has waited for, seconds.
fn children_cpu() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (secs(u.ru_utime), secs(u.ru_stime))
}

/// Runs the command once (`sh -c`) at `root`.
pub fn run_command_once(
    root: &Path,
    command: &str,
    metric: &Metric,
    timeout: Duration,
    device: Option<usize>,
) -> CommandRun {
    match run_command_timed_on(root, command, metric, timeout, device) {
        Ok(r) => CommandRun::Sample(r.value),
        Err(e) => e,
    }
}

/// Runs the command once (`sh -c`) at `root`, measuring its CPU time as hyperfine does:
/// the growth of this process's children's resource usage across the run (runs are
/// sequential, and every child is waited for).
pub fn run_command_timed(
    root: &Path,
    command: &str,
    metric: &Metric,
    timeout: Duration,
) -> Result<TimedRun, CommandRun> {
    run_command_timed_on(root, command, metric, timeout, None)
}

/// [`run_command_timed`] for one GPU: the command finds it in `REPRO_DEVICE` and selects
/// it with `CUDA_VISIBLE_DEVICES=$REPRO_DEVICE`.
pub fn run_command_timed_on(
    root: &Path,
    command: &str,
    metric: &Metric,
    timeout: Duration,
    device: Option<usize>,
) -> Result<TimedRun, CommandRun> {
    let mut cmd = Cmd::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .timeout(timeout);
    if let Some(d) = device {
        cmd = cmd.env("REPRO_DEVICE", d.to_string());
    }
    let (u0, s0) = children_cpu();
    let result = cmd.output();
    let (u1, s1) = children_cpu();
    match result {
        Ok(out) if out.status.success() => {
            match metric.extract(&out.stdout_str(), out.elapsed.as_secs_f64() * 1e3) {
                Ok(v) if v.is_finite() => Ok(TimedRun {
                    value: v,
                    wall_s: out.elapsed.as_secs_f64(),
                    user_s: (u1 - u0).max(0.0),
                    system_s: (s1 - s0).max(0.0),
                }),
                Ok(v) => Err(CommandRun::Failed(format!("the metric is {v}"))),
                Err(e) => Err(CommandRun::Failed(e)),
            }
        }
        Ok(out) => {
            let tail: Vec<String> = out
                .stderr_str()
                .lines()
                .rev()
                .take(3)
                .map(str::to_string)
                .collect();
            let tail = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
            let status = crate::foundation::process::describe_status(out.status);
            Err(CommandRun::Failed(if tail.is_empty() {
                format!("`{command}` {status}")
            } else {
                format!("`{command}` {status}: {tail}")
            }))
        }
        Err(ProcessError::Timeout { .. }) => Err(CommandRun::Timeout),
        Err(e) => Err(CommandRun::Failed(e.to_string())),
    }
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
            check_arity(ptx, &l, &[buf.clone(), n.clone()]).unwrap_err(),
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
            check_arity(ptx2, &l, &[buf, wide]).unwrap_err(),
            "kernel `k` parameter 1 is 4 bytes but argument `n` is 8 bytes"
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
        assert!(j.extract("not json", 0.0).unwrap_err().contains("not JSON"));
        let r = Metric::parse(r"regex:time: ([0-9.]+) us").unwrap();
        assert_eq!(r.extract("warmup\ntime: 12.5 us\n", 0.0).unwrap(), 12.5);
        assert!(Metric::parse("regex:(").is_err());
        assert!(Metric::parse("bogus").is_err());
    }
}
