//! Check and bench steps of a bisection over a torch-extension recipe whose `[run]` calls a
//! Python function: the step's module is imported in the bisection's interpreter and the
//! call is checked against its reference (check) or timed, one runner process an attempt,
//! the median of each attempt a sample (bench), as kernel steps are.

use std::path::Path;
use std::time::Duration;

use super::{MeasureError, StepFail, judge};
use crate::engines::bisect::plan::{BenchQuestion, Question, Step, StepError};
use crate::engines::bisect::search::Answer;
use crate::engines::build;
use crate::engines::pyrun::{self, FailureKind, Job, PyRunError};
use crate::foundation::recipe::{Build, Recipe};
use crate::foundation::records::{Mode, ResultVerdict, Settings};

/// What a Python-call step needs beyond the build.
pub(crate) struct Context<'a> {
    /// The step's checked-out tree (its repro.toml names the interpreter, if any).
    pub root: &'a Path,
    /// `--python`.
    pub python: Option<&'a Path>,
    /// Kill a runner after this long.
    pub timeout: Duration,
    /// The CUDA device.
    pub device: usize,
}

fn fatal(e: impl std::error::Error + Send + Sync + 'static) -> StepFail {
    StepFail::Fatal(StepError::Executor(Box::new(e)))
}

/// Answers a check or bench step of a Python-call recipe whose build is `built`.
pub(crate) fn answer(
    question: &Question,
    r: &mut Recipe,
    built: &build::Outcome,
    cx: &Context,
    baseline: &mut Option<Vec<f64>>,
    step: &mut Step,
) -> Result<(Answer, Option<String>), StepFail> {
    let failed = built.status != "ok";
    match question {
        Question::Check if failed => {
            return Ok((
                Answer::Bad,
                Some(format!(
                    "build failed: {}",
                    built.failure_reason().unwrap_or_default()
                )),
            ));
        }
        Question::Bench(_) if failed => {
            return Ok((
                Answer::Skip,
                Some("the build fails here, so it cannot be timed".into()),
            ));
        }
        _ => {}
    }
    let Build::TorchExtension(t) = &r.build else {
        return Ok((
            Answer::Skip,
            Some("a Python call needs a torch-extension build".into()),
        ));
    };
    let env = build::torch::environment(&r.name, cx.python, cx.root, t).map_err(fatal)?;
    let dir = tempfile::tempdir().map_err(|e| StepFail::Fatal(e.into()))?;
    for (name, out) in &built.outputs {
        std::fs::copy(&out.path, dir.path().join(name)).map_err(|e| StepFail::Fatal(e.into()))?;
    }
    let call = r.sections.call.clone().expect("a Python call recipe");
    let interpreter = env.located.interpreter.clone();
    let job = |params: &std::collections::BTreeMap<String, crate::foundation::expr::Value>,
               settings: &Settings,
               check: bool|
     -> Result<Job, StepFail> {
        let args = pyrun::resolve_args(&call, params)
            .map_err(|e| StepFail::Answer(Answer::Skip, e.to_string()))?;
        Ok(pyrun::job(&call, args, dir.path(), settings, check, false))
    };
    match question {
        Question::Check => {
            let settings = check_settings(cx.device);
            for params in crate::foundation::runspec::combinations(&r.sections.params) {
                let j = job(&params, &settings, true)?;
                let report = match pyrun::run(&interpreter, &j, cx.timeout) {
                    Ok(report) => report,
                    Err(e) => return bad_or_fatal(e),
                };
                let (v, d) = crate::engines::bench::check_verdict(report.check.as_deref());
                if v != ResultVerdict::Ok {
                    return Ok((
                        Answer::Bad,
                        Some(format!(
                            "{} at {}: {}",
                            v.word(),
                            crate::foundation::records::params_text(
                                &crate::engines::bench::params_json(&params)
                            ),
                            d.unwrap_or_default()
                        )),
                    ));
                }
            }
            Ok((Answer::Good, None))
        }
        Question::Bench(b) => bench(r, b, &job, &interpreter, cx, baseline, step),
        _ => unreachable!("build and script steps are answered elsewhere"),
    }
}

#[expect(clippy::type_complexity, reason = "the step's job maker, a closure")]
fn bench(
    r: &mut Recipe,
    b: &BenchQuestion,
    job: &dyn Fn(
        &std::collections::BTreeMap<String, crate::foundation::expr::Value>,
        &Settings,
        bool,
    ) -> Result<Job, StepFail>,
    interpreter: &Path,
    cx: &Context,
    baseline: &mut Option<Vec<f64>>,
    step: &mut Step,
) -> Result<(Answer, Option<String>), StepFail> {
    if let Err(e) = crate::foundation::runspec::override_params(&mut r.sections.params, &b.params) {
        return Ok((Answer::Skip, Some(e.to_string())));
    }
    let points = crate::foundation::runspec::combinations(&r.sections.params);
    if points.len() != 1 {
        return Err(StepFail::Fatal(StepError::Points {
            points: points.len(),
        }));
    }
    let mut j = job(&points[0], &b.settings, false)?;
    // Timing alone: the check is a check step's question.
    j.reference = None;
    let mut measure = |n: usize| -> Result<Vec<f64>, MeasureError> {
        let mut out = Vec::new();
        for _ in 0..n {
            let report = pyrun::run(interpreter, &j, cx.timeout)
                .map_err(|e| MeasureError::CommandFailed { why: e.to_string() })?;
            let samples = report.function.map(|f| f.samples_us).unwrap_or_default();
            out.push(crate::foundation::stats::median(&samples).ok_or(MeasureError::NoSamples)?);
        }
        Ok(out)
    };
    judge(baseline, step, &mut measure, b)
}

fn bad_or_fatal(e: PyRunError) -> Result<(Answer, Option<String>), StepFail> {
    match &e {
        PyRunError::Failed { failure, .. }
            if matches!(failure.kind, FailureKind::NoTorch | FailureKind::NoCuda) =>
        {
            Err(fatal(e))
        }
        PyRunError::Io(_) | PyRunError::Invalid { .. } => Err(fatal(e)),
        _ => Ok((Answer::Bad, Some(e.to_string()))),
    }
}

fn check_settings(device: usize) -> Settings {
    Settings {
        mode: Mode::Hot,
        max_noise: 0.005,
        min_samples: 1,
        max_samples: 1,
        min_time_ms: 0.0,
        budget_ms: 0.0,
        warmup_ms: 0.0,
        device,
    }
}
