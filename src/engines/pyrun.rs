//! Runs a recipe's Python call (`[run] function`): repro ships a small runner script
//! (`pyrun.py`, embedded), runs it in the fingerprinted interpreter with the built extension
//! on its path, and reads back one bounded line of JSON that is validated field by field
//! before anything of it is recorded. The runner checks the function against its reference
//! and times both the way the kernel runner does (warm-up, L2 flush, CUDA events or the CPU's
//! wall clock, the same noise stop).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engines::gpurun::Timing;
use crate::foundation::expr::Value as ExprValue;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::records::OutputCheck;
use crate::foundation::runspec::call::{Call, CallArg, CallDevice};
use crate::foundation::runspec::{DType, Init};

/// The runner script, run as `python -I? pyrun.py JOB`.
pub const SCRIPT: &str = include_str!("pyrun.py");

/// The marker of the runner's answer line.
const MARK: &str = "REPRO-PYRUN ";

/// The most bytes of the runner's output kept (the answer is the last line).
const MAX_OUTPUT: usize = 16 << 20;

/// The job schema the script reads.
pub const SCHEMA: u32 = 1;

/// A tensor or scalar argument with its numbers resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobArg {
    /// Its name.
    pub name: String,
    /// The tensor's type (absent for a scalar).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<DType>,
    /// The tensor's shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// Its fill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init: Option<Init>,
    /// Its seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Whether it is an output.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub output: bool,
    /// The scalar's type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scalar: Option<DType>,
    /// The scalar's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

/// The reference as the script reads it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobReference {
    /// `module.function`.
    pub function: String,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

/// One call of the runner.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Job {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// `module.function`.
    pub function: String,
    /// The reference, if checked.
    pub reference: Option<JobReference>,
    /// Where tensors live.
    pub device: CallDevice,
    /// The CUDA device ordinal.
    pub cuda_device: usize,
    /// The directory holding the built extension (put first on `sys.path`).
    pub module_dir: Option<String>,
    /// The arguments.
    pub args: Vec<JobArg>,
    /// How to time.
    pub timing: Timing,
    /// Check only.
    pub check_only: bool,
    /// Time even when the check fails.
    pub time_anyway: bool,
}

/// The job of one call: `call` with its resolved `args`, the module in `dir`.
pub fn job(
    call: &Call,
    args: Vec<JobArg>,
    dir: &Path,
    s: &crate::foundation::records::Settings,
    check_only: bool,
    time_anyway: bool,
) -> Job {
    Job {
        schema: SCHEMA,
        function: call.function.clone(),
        reference: call.reference.as_ref().map(|c| JobReference {
            function: c.function.clone(),
            atol: c.atol,
            rtol: c.rtol,
        }),
        device: call.device,
        cuda_device: s.device,
        module_dir: Some(dir.display().to_string()),
        args,
        timing: crate::engines::bench::timing(s),
        check_only,
        time_anyway,
    }
}

/// Why a call's arguments do not resolve at a parameter point.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// An expression failed.
    #[error("[run] args `{arg}`: {error}")]
    Expr {
        /// The argument.
        arg: String,
        /// Why.
        error: crate::foundation::expr::ExprError,
    },
    /// A dimension that is not a whole number from 1 to 2^40.
    #[error(
        "[run] args `{arg}`: dimension {dim} of its shape is {value}, not a whole number from 1 to 2^40"
    )]
    Dimension {
        /// The argument.
        arg: String,
        /// Which dimension.
        dim: usize,
        /// Its value.
        value: f64,
    },
    /// A tensor too large.
    #[error(
        "[run] args `{arg}`: {bytes} bytes is more than the {max} allowed (REPRO_MAX_BUFFER_BYTES)"
    )]
    TooLarge {
        /// The argument.
        arg: String,
        /// Its size.
        bytes: u128,
        /// The limit.
        max: u64,
    },
    /// `REPRO_MAX_BUFFER_BYTES` is not a number.
    #[error(transparent)]
    Limit(#[from] crate::foundation::limits::LimitError),
}

/// Resolves a call's arguments at one parameter point.
pub fn resolve_args(
    call: &Call,
    params: &BTreeMap<String, ExprValue>,
) -> Result<Vec<JobArg>, ResolveError> {
    let max = crate::engines::bench::max_buffer_bytes()?;
    let eval = |arg: &str, e: &crate::foundation::expr::Expr| {
        e.eval(params)
            .map(|v| v.as_f64())
            .map_err(|error| ResolveError::Expr {
                arg: arg.to_string(),
                error,
            })
    };
    let mut out = Vec::new();
    for a in &call.args {
        out.push(match a {
            CallArg::Tensor {
                name,
                dtype,
                shape,
                init,
                seed,
                output,
            } => {
                let mut dims = Vec::new();
                for (dim, e) in shape.iter().enumerate() {
                    let v = eval(name, e)?;
                    if !(v.fract() == 0.0 && (1.0..=(1u64 << 40) as f64).contains(&v)) {
                        return Err(ResolveError::Dimension {
                            arg: name.clone(),
                            dim,
                            value: v,
                        });
                    }
                    dims.push(v as u64);
                }
                let bytes = dims.iter().fold(dtype.size() as u128, |b, d| {
                    b.saturating_mul(u128::from(*d))
                });
                if bytes > u128::from(max) {
                    return Err(ResolveError::TooLarge {
                        arg: name.clone(),
                        bytes,
                        max,
                    });
                }
                JobArg {
                    name: name.clone(),
                    tensor: Some(*dtype),
                    shape: Some(dims),
                    init: init.clone(),
                    seed: Some(*seed),
                    output: *output,
                    scalar: None,
                    value: None,
                }
            }
            CallArg::Scalar { name, dtype, value } => JobArg {
                name: name.clone(),
                tensor: None,
                shape: None,
                init: None,
                seed: None,
                output: false,
                scalar: Some(*dtype),
                value: Some(eval(name, value)?),
            },
        });
    }
    Ok(out)
}

/// How one timed callable fared.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Timed {
    /// Samples in microseconds.
    pub samples_us: Vec<f64>,
    /// Untimed warm-up calls.
    pub warmup_calls: u64,
    /// Whether the runner said the noise target was met (repro checks it again).
    pub converged: bool,
}

/// What the runner reports when it could not do the job.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The interpreter, module, function or argument it concerns.
    pub what: String,
    /// Python's message.
    pub message: String,
}

/// The runner's failure kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// `import torch` failed.
    NoTorch,
    /// CUDA is not usable by this PyTorch.
    NoCuda,
    /// A module does not import.
    Import,
    /// The module has no such attribute.
    NoFunction,
    /// The attribute is not callable.
    NotCallable,
    /// An argument cannot be made.
    BadArgument,
    /// A call raised.
    Call,
    /// A call returned something other than tensors.
    BadReturn,
    /// The reference's outputs have another shape or count.
    OutputShape,
}

/// The runner's answer line.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Answer {
    schema: u32,
    #[serde(default)]
    error: Option<Failure>,
    #[serde(default)]
    torch: Option<String>,
    #[serde(default)]
    device: Option<String>,
    #[serde(default)]
    device_name: Option<String>,
    #[serde(default)]
    timer: Option<String>,
    #[serde(default)]
    flush_bytes: u64,
    #[serde(default)]
    check: Option<Vec<OutputCheck>>,
    #[serde(default)]
    function: Option<Timed>,
    #[serde(default)]
    reference: Option<Timed>,
}

/// A validated report of the runner.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// PyTorch's version.
    pub torch: String,
    /// The device's name.
    pub device_name: String,
    /// How it was timed (None when nothing was timed).
    pub timer: Option<String>,
    /// Bytes overwritten before each sample.
    pub flush_bytes: u64,
    /// The check of each output, if checked.
    pub check: Option<Vec<OutputCheck>>,
    /// The function's timing.
    pub function: Option<Timed>,
    /// The reference's timing.
    pub reference: Option<Timed>,
}

/// Why the runner gave no report.
#[derive(Debug, thiserror::Error)]
pub enum PyRunError {
    /// The runner reported a failure.
    #[error("{}", failure_text(.interpreter, .failure))]
    Failed {
        /// The interpreter.
        interpreter: String,
        /// What it said.
        failure: Failure,
    },
    /// The runner could not be started or timed out.
    #[error("running the Python call in {interpreter}: {source}")]
    Process {
        /// The interpreter.
        interpreter: String,
        /// Why.
        #[source]
        source: Box<ProcessError>,
    },
    /// The runner ended without an answer (a crash in the extension, for one).
    #[error("the Python call in {interpreter} ended without an answer ({status}): {tail}")]
    NoAnswer {
        /// The interpreter.
        interpreter: String,
        /// How it ended.
        status: String,
        /// The end of its output.
        tail: String,
    },
    /// The answer is not what the runner writes.
    #[error("the Python call in {interpreter} answered something invalid: {why}")]
    Invalid {
        /// The interpreter.
        interpreter: String,
        /// What is wrong.
        why: String,
    },
    /// The job file could not be written.
    #[error("writing the Python call's job: {0}")]
    Io(#[from] std::io::Error),
}

fn failure_text(interpreter: &str, f: &Failure) -> String {
    let p = crate::foundation::output::printable;
    let what = p(&f.what);
    let msg = p(&f.message);
    match f.kind {
        FailureKind::NoTorch => format!("PyTorch does not import in {interpreter}: {msg}"),
        FailureKind::NoCuda => format!("the recipe runs on \"cuda\", and in {interpreter} {msg}"),
        FailureKind::Import => format!("module {what} does not import in {interpreter}: {msg}"),
        FailureKind::NoFunction => format!("`{what}` does not exist: {msg}"),
        FailureKind::NotCallable => format!("`{what}` cannot be called: {msg}"),
        FailureKind::BadArgument => format!("argument `{what}`: {msg}"),
        FailureKind::Call => format!("calling `{what}` raised {msg}"),
        FailureKind::BadReturn => format!("`{what}`: {msg}"),
        FailureKind::OutputShape => format!("the reference `{what}` does not match: {msg}"),
    }
}

impl crate::foundation::error::Diagnose for PyRunError {
    /// The exit code: a missing function or a reference of another shape is the recipe's
    /// mistake (usage, 2); PyTorch or CUDA missing is the environment's (3); the extension
    /// failing at run time is a mismatch (1).
    fn exit_code(&self) -> u8 {
        use crate::foundation::exit;
        match self {
            PyRunError::Failed { failure, .. } => match failure.kind {
                FailureKind::NoTorch | FailureKind::NoCuda => exit::ENVIRONMENT,
                FailureKind::NoFunction
                | FailureKind::NotCallable
                | FailureKind::BadArgument
                | FailureKind::OutputShape
                | FailureKind::BadReturn => exit::USAGE,
                FailureKind::Import | FailureKind::Call => exit::MISMATCH,
            },
            PyRunError::Process { .. } | PyRunError::NoAnswer { .. } => exit::MISMATCH,
            PyRunError::Invalid { .. } => exit::INTERNAL,
            PyRunError::Io(_) => exit::IO,
        }
    }

    /// What to do about it.
    fn hint(&self) -> Option<String> {
        let PyRunError::Failed {
            failure,
            interpreter,
        } = self
        else {
            return None;
        };
        Some(match failure.kind {
            FailureKind::NoTorch => format!("install it (`{interpreter} -m pip install torch`) or point --python at an environment that has it"),
            FailureKind::NoCuda => "run it on a GPU machine with a CUDA build of PyTorch, or set `device = \"cpu\"` in [run]".into(),
            FailureKind::NoFunction | FailureKind::NotCallable => "fix `function` in [run] or [check] (module.function)".into(),
            FailureKind::OutputShape => "give [check] a reference that computes the same outputs, or change the arguments' shapes".into(),
            FailureKind::BadReturn => "return a tensor or a tuple of tensors, or None with `output = true` tensors".into(),
            FailureKind::BadArgument => "use a type this PyTorch has".into(),
            FailureKind::Import | FailureKind::Call => "`repro env why-import` diagnoses a module that does not import".into(),
        })
    }
}

/// Runs the job in `interpreter`.
pub fn run(interpreter: &Path, job: &Job, timeout: Duration) -> Result<Report, PyRunError> {
    let who = interpreter.display().to_string();
    let tmp = tempfile::tempdir()?;
    let script = tmp.path().join("repro_pyrun.py");
    std::fs::write(&script, SCRIPT)?;
    let job_file = tmp.path().join("job.json");
    std::fs::write(
        &job_file,
        serde_json::to_vec(job).expect("a job serializes"),
    )?;
    let out = Cmd::new(interpreter)
        .arg(&script)
        .arg(&job_file)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(tmp.path())
        .keep_tail(MAX_OUTPUT)
        .timeout(timeout)
        .output()
        .map_err(|source| PyRunError::Process {
            interpreter: who.clone(),
            source: Box::new(source),
        })?;
    let stdout = out.stdout_str();
    let Some(line) = stdout.lines().rev().find_map(|l| l.strip_prefix(MARK)) else {
        let text = format!("{}{}", out.stderr_str(), stdout);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        return Err(PyRunError::NoAnswer {
            interpreter: who,
            status: crate::foundation::process::describe_status(out.status),
            tail: crate::foundation::output::printable(
                &lines[lines.len().saturating_sub(3)..].join(" | "),
            ),
        });
    };
    parse(line, job, &who)
}

/// Parses and validates the answer line.
fn parse(line: &str, job: &Job, who: &str) -> Result<Report, PyRunError> {
    let invalid = |why: String| PyRunError::Invalid {
        interpreter: who.to_string(),
        why,
    };
    let a: Answer = serde_json::from_str(line).map_err(|e| invalid(e.to_string()))?;
    if a.schema != SCHEMA {
        return Err(invalid(format!(
            "schema {} (this repro reads {SCHEMA})",
            a.schema
        )));
    }
    if let Some(failure) = a.error {
        return Err(PyRunError::Failed {
            interpreter: who.to_string(),
            failure,
        });
    }
    let short = |s: Option<String>, what: &str| {
        s.filter(|s| s.len() <= 200)
            .map(|s| crate::foundation::output::printable(&s))
            .ok_or_else(|| invalid(format!("`{what}` is missing or longer than 200 bytes")))
    };
    if a.device.as_deref() != Some(job.device.name()) {
        return Err(invalid(format!(
            "it ran on {:?}, not {}",
            a.device,
            job.device.name()
        )));
    }
    validate_checks(a.check.as_deref(), job).map_err(|w| invalid(w.0))?;
    for (t, name) in [(&a.function, "function"), (&a.reference, "reference")] {
        if let Some(t) = t {
            validate_timed(t, &job.timing).map_err(|w| invalid(format!("{name}: {}", w.0)))?;
        }
    }
    let timed = !job.check_only && a.function.is_some();
    if timed && (a.reference.is_some() != job.reference.is_some() || a.timer.is_none()) {
        return Err(invalid("timings do not match the job".into()));
    }
    Ok(Report {
        torch: short(a.torch, "torch")?,
        device_name: short(a.device_name, "device-name")?,
        timer: a.timer.map(|t| short(Some(t), "timer")).transpose()?,
        flush_bytes: a.flush_bytes,
        check: a.check,
        function: a.function,
        reference: a.reference,
    })
}

fn validate_checks(check: Option<&[OutputCheck]>, job: &Job) -> Result<(), Invalid> {
    let Some(list) = check else {
        return match job.reference {
            Some(_) => Err(Invalid("no check, and the job has a reference".into())),
            None => Ok(()),
        };
    };
    let Some(r) = &job.reference else {
        return Err(Invalid("a check, and the job has no reference".into()));
    };
    if list.is_empty() || list.len() > 64 {
        return Err(Invalid(format!(
            "{} outputs checked (1 to 64 expected)",
            list.len()
        )));
    }
    for c in list {
        let ok_name = c.name.len() <= 64
            && c.name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        let finite = [c.max_abs_err, c.max_rel_err]
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0);
        if !ok_name || !finite || c.mismatches > c.elements || c.unwritten > c.elements {
            return Err(Invalid(format!(
                "output check `{}` is not consistent",
                crate::foundation::output::printable(&c.name)
            )));
        }
        if c.atol != r.atol || c.rtol != r.rtol {
            return Err(Invalid("tolerances differ from the job's".into()));
        }
        if let Some((i, x, y)) = &c.first_mismatch
            && (*i >= c.elements || x.len() > 64 || y.len() > 64)
        {
            return Err(Invalid("a first mismatch outside the output".into()));
        }
    }
    Ok(())
}

fn validate_timed(t: &Timed, timing: &Timing) -> Result<(), Invalid> {
    if t.samples_us.is_empty() || t.samples_us.len() > timing.max_samples {
        return Err(Invalid(format!(
            "{} samples (1 to {} expected)",
            t.samples_us.len(),
            timing.max_samples
        )));
    }
    if !t.samples_us.iter().all(|s| s.is_finite() && *s >= 0.0) {
        return Err(Invalid("a sample is negative or not finite".into()));
    }
    Ok(())
}

/// What is wrong with the runner's answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Invalid(String);

/// Whether the samples met the noise target by repro's own rule (the runner's word is
/// not taken for it).
pub fn converged(t: &Timed, timing: &Timing) -> bool {
    t.samples_us.len() >= timing.min_samples
        && crate::foundation::stats::median_rel_noise(&t.samples_us) <= timing.max_noise
}

/// The function's speed relative to the reference: reference median / function median,
/// with a 95% bootstrap interval.
pub fn speedup(function: &[f64], reference: &[f64]) -> Option<crate::foundation::records::Speedup> {
    let f = crate::foundation::stats::median(function)?;
    let r = crate::foundation::stats::median(reference)?;
    if f <= 0.0 || r <= 0.0 {
        return None;
    }
    let seed = function
        .iter()
        .chain(reference)
        .fold(0u64, |h, s| h.rotate_left(5) ^ s.to_bits());
    let (low, high) =
        crate::foundation::stats::bootstrap_ratio_ci(function, reference, 2000, 0.95, seed)?;
    Some(crate::foundation::records::Speedup {
        ratio: r / f,
        low,
        high,
        level: 0.95,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foundation::error::Diagnose as _;

    fn job() -> Job {
        Job {
            schema: SCHEMA,
            function: "m.f".into(),
            reference: Some(JobReference {
                function: "torch.add".into(),
                atol: 0.0,
                rtol: 0.0,
            }),
            device: CallDevice::Cpu,
            cuda_device: 0,
            module_dir: None,
            args: vec![],
            timing: Timing::quick(crate::foundation::records::Mode::Cold),
            check_only: false,
            time_anyway: false,
        }
    }

    const GOOD: &str = r#"{"schema": 1, "torch": "2.4.1", "device": "cpu", "device-name": "cpu", "timer": "cpu-wall-clock", "flush-bytes": 67108864, "check": [{"name": "out", "elements": 4, "mismatches": 0, "unwritten": 0, "max-abs-err": 0.0, "max-rel-err": 0.0, "atol": 0.0, "rtol": 0.0, "first-mismatch": null}], "function": {"samples-us": [1.0, 2.0], "warmup-calls": 3, "converged": true}, "reference": {"samples-us": [2.0, 4.0], "warmup-calls": 3, "converged": false}}"#;

    #[test]
    fn a_good_answer_parses_and_hostile_ones_are_refused() {
        let r = parse(GOOD, &job(), "py").unwrap();
        assert_eq!(r.function.unwrap().samples_us, vec![1.0, 2.0]);
        for (from, to) in [
            ("\"schema\": 1", "\"schema\": 2"),
            ("[1.0, 2.0]", "[-1.0, 2.0]"),
            ("\"mismatches\": 0", "\"mismatches\": 9"),
            ("\"name\": \"out\"", "\"name\": \"\\u001b[31m\""),
            ("\"atol\": 0.0", "\"atol\": 1.0"),
            ("\"device\": \"cpu\"", "\"device\": \"cuda\""),
            ("\"flush-bytes\"", "\"extra\": 1, \"flush-bytes\""),
            (
                ", \"reference\": {\"samples-us\": [2.0, 4.0], \"warmup-calls\": 3, \"converged\": false}",
                "",
            ),
        ] {
            let bad = GOOD.replacen(from, to, 1);
            assert_ne!(bad, GOOD, "{from}");
            assert!(
                parse(&bad, &job(), "py").is_err(),
                "accepted {from} -> {to}"
            );
        }
        let mut many = job();
        many.timing.max_samples = 1;
        assert!(parse(GOOD, &many, "py").is_err());
    }

    #[test]
    fn a_failure_names_what_and_has_an_exit_code() {
        let line = r#"{"schema": 1, "error": {"kind": "no-function", "what": "m.nope", "message": "function's module m has no attribute nope (it has: f)"}}"#;
        let e = parse(line, &job(), "/v/bin/python3").unwrap_err();
        assert_eq!(e.exit_code(), crate::foundation::exit::USAGE);
        assert!(e.to_string().contains("`m.nope` does not exist"), "{e}");
    }

    #[test]
    fn the_speedup_is_the_reference_over_the_function() {
        let s = speedup(&[2.0, 2.0, 2.0], &[1.0, 1.0, 1.0]).unwrap();
        assert_eq!(s.ratio, 0.5);
        assert!(s.low <= 0.5 && s.high >= 0.5);
    }
}
