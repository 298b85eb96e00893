//! The command bench: time any command, or read a metric from its output, over separate
//! processes, until the median is quiet.

use super::*;

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
    pub fn parse(s: &str) -> Result<Self, MetricError> {
        if s == "time" {
            Ok(Metric::Time)
        } else if let Some(p) = s.strip_prefix("json:") {
            Ok(Metric::Json(p.to_string()))
        } else if let Some(r) = s.strip_prefix("regex:") {
            regex_lite::Regex::new(r).map_err(|e| MetricError::Regex {
                regex: r.to_string(),
                reason: e.to_string(),
            })?;
            Ok(Metric::Regex(r.to_string()))
        } else {
            Err(MetricError::Unknown(s.to_string()))
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
    pub fn extract(&self, stdout: &str, wall_ms: f64) -> Result<f64, ExtractError> {
        match self {
            Metric::Time => Ok(wall_ms),
            Metric::Json(path) => {
                let v: Value = serde_json::from_str(stdout.trim())
                    .map_err(|e| ExtractError::NotJson(e.to_string()))?;
                let mut cur = &v;
                for part in path.split('.') {
                    cur = match cur {
                        Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
                        Value::Object(o) => o.get(part),
                        _ => None,
                    }
                    .ok_or_else(|| ExtractError::NoPath(path.clone()))?;
                }
                cur.as_f64()
                    .ok_or_else(|| ExtractError::NotANumber(path.clone()))
            }
            Metric::Regex(r) => {
                let re =
                    regex_lite::Regex::new(r).map_err(|e| ExtractError::Regex(e.to_string()))?;
                let caps = re
                    .captures(stdout)
                    .ok_or_else(|| ExtractError::NoMatch(r.clone()))?;
                let m = caps
                    .get(1)
                    .or_else(|| caps.get(0))
                    .expect("a match has group 0");
                m.as_str()
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| ExtractError::MatchNotANumber {
                        regex: r.clone(),
                        matched: m.as_str().to_string(),
                    })
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
pub(super) fn children_cpu() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (secs(u.ru_utime), secs(u.ru_stime))
}

/// Runs the command once (`sh -c`) at `root`, on `device` when given (the command finds
/// it in `REPRO_DEVICE` and selects it with `CUDA_VISIBLE_DEVICES=$REPRO_DEVICE`).
pub fn run_command_once(
    root: &Path,
    command: &str,
    metric: &Metric,
    timeout: Duration,
    device: Option<usize>,
) -> CommandRun {
    match run_command_timed(
        &ProcessExecutor::default(),
        root,
        command,
        metric,
        timeout,
        device,
    ) {
        Ok(r) => CommandRun::Sample(r.value),
        Err(e) => e,
    }
}

/// Runs the command once through `exec` and reads its metric: a non-zero exit, a signal,
/// a missing or non-finite metric is [`CommandRun::Failed`] with the reason (and the tail
/// of stderr), a run past the timeout [`CommandRun::Timeout`].
pub fn run_command_timed(
    exec: &dyn Executor,
    root: &Path,
    command: &str,
    metric: &Metric,
    timeout: Duration,
    device: Option<usize>,
) -> Result<TimedRun, CommandRun> {
    match exec.run_shell(root, command, timeout, device) {
        Ok(m) if m.output.status.success() => {
            let out = &m.output;
            match metric.extract(&out.stdout_str(), out.elapsed.as_secs_f64() * 1e3) {
                // Every comparison repro makes is a ratio of positive measurements (times,
                // throughputs): a zero or negative metric is refused where it is read.
                Ok(v) if v.is_finite() && v > 0.0 => Ok(TimedRun {
                    value: v,
                    wall_s: out.elapsed.as_secs_f64(),
                    user_s: m.user_s,
                    system_s: m.system_s,
                }),
                Ok(v) if !v.is_finite() => Err(CommandRun::Failed(format!("the metric is {v}"))),
                Ok(v) => Err(CommandRun::Failed(format!(
                    "the metric is {v}; repro compares ratios of positive measurements, so a metric must be greater than 0"
                ))),
                Err(e) => Err(CommandRun::Failed(e.to_string())),
            }
        }
        Ok(m) => {
            let out = &m.output;
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

/// A command bench: what to run, how often, and when to stop.
#[derive(Clone, Debug)]
pub struct CommandBench<'a> {
    /// Where the command runs.
    pub root: &'a Path,
    /// The command (`sh -c`).
    pub command: &'a str,
    /// What each run measures.
    pub metric: &'a Metric,
    /// A command run before every run, warm-ups included; its failure ends the bench.
    pub prepare: Option<&'a str>,
    /// Runs before timing, not counted.
    pub warmup_runs: usize,
    /// Timing stops once this many runs are in and the noise is below `max_noise`…
    pub min_runs: usize,
    /// …or at this many runs.
    pub max_runs: usize,
    /// The relative noise of the median that counts as converged.
    pub max_noise: f64,
    /// How long one run (or one `prepare`) may take.
    pub timeout: Duration,
}

/// Where a command bench is, for a progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchProgress {
    /// Warm-up run `n` (from 1) of `of` is starting.
    Warmup {
        /// This warm-up.
        n: usize,
        /// How many there are.
        of: usize,
    },
    /// The warm-ups are over; timing starts.
    Timing,
    /// One timed run finished.
    Ran,
}

/// What a command bench measured and how it ended.
#[derive(Clone, Debug)]
pub struct CommandBenchOutcome {
    /// The metric of each timed run.
    pub samples: Vec<f64>,
    /// Each timed run in full.
    pub runs: Vec<TimedRun>,
    /// `ok`, `crash` (a failed run or `prepare`) or `timeout`.
    pub verdict: ResultVerdict,
    /// Why it is not `ok`.
    pub detail: Option<String>,
}

/// Runs a command bench through `exec`: the warm-ups (not counted), then timed runs until
/// `min_runs` are in and the median's noise is at most `max_noise`, or `max_runs` are.
/// The first failure or timeout ends it, and the outcome says which run it was.
pub fn run_command_bench(
    exec: &dyn Executor,
    b: &CommandBench,
    progress: &dyn Fn(BenchProgress),
) -> CommandBenchOutcome {
    let mut samples = Vec::new();
    let mut runs: Vec<TimedRun> = Vec::new();
    let mut failure = None;
    let mut timed_out = false;
    let run = |command: &str, metric: &Metric| {
        run_command_timed(exec, b.root, command, metric, b.timeout, None)
    };
    // `prepare` before every run, warm-ups included; its failure ends the bench.
    let prepare = |label: &str| -> Result<(), PrepareError> {
        let Some(p) = b.prepare else { return Ok(()) };
        match run(p, &Metric::Time) {
            Ok(_) | Err(CommandRun::Sample(_)) => Ok(()),
            Err(CommandRun::Timeout) => Err(PrepareError::Timeout {
                command: p.to_string(),
                label: label.to_string(),
                after: b.timeout,
            }),
            Err(CommandRun::Failed(why)) => Err(PrepareError::Failed {
                label: label.to_string(),
                why,
            }),
        }
    };
    for i in 0..b.warmup_runs {
        progress(BenchProgress::Warmup {
            n: i + 1,
            of: b.warmup_runs,
        });
        if let Err(why) = prepare(&format!("warm-up run {}", i + 1)) {
            failure = Some(why.to_string());
            break;
        }
        match run(b.command, b.metric) {
            Ok(_) | Err(CommandRun::Sample(_)) => {}
            Err(CommandRun::Timeout) => {
                timed_out = true;
                break;
            }
            Err(CommandRun::Failed(why)) => {
                failure = Some(format!("warm-up run {}: {why}", i + 1));
                break;
            }
        }
    }
    progress(BenchProgress::Timing);
    while failure.is_none() && !timed_out && samples.len() < b.max_runs {
        if let Err(why) = prepare(&format!("run {}", samples.len() + 1)) {
            failure = Some(why.to_string());
            break;
        }
        match run(b.command, b.metric) {
            Ok(r) => {
                samples.push(r.value);
                runs.push(r);
            }
            Err(CommandRun::Failed(why)) => {
                failure = Some(why);
                break;
            }
            Err(CommandRun::Timeout) => {
                timed_out = true;
                break;
            }
            Err(CommandRun::Sample(v)) => samples.push(v),
        }
        progress(BenchProgress::Ran);
        if samples.len() >= b.min_runs && stats::median_rel_noise(&samples) <= b.max_noise {
            break;
        }
    }
    let (verdict, detail) = if timed_out {
        (
            ResultVerdict::Timeout,
            Some(format!(
                "a run took longer than {}",
                humantime::format_duration(b.timeout)
            )),
        )
    } else if let Some(f) = failure {
        (ResultVerdict::Crash, Some(f))
    } else {
        (ResultVerdict::Ok, None)
    };
    CommandBenchOutcome {
        samples,
        runs,
        verdict,
        detail,
    }
}
