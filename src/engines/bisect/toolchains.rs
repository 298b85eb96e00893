//! Bisecting the toolchain: the commit (the working tree) is held fixed and the search runs
//! over the ordered releases of NVRTC or nvcc, for the first release whose build breaks
//! (or whose check fails). It answers "did the compiler upgrade do it?".
//!
//! Releases come from the wheels that exist: pip's index (`pip index versions`) or a local
//! wheel directory; NVRTC's CUDA 12 family is the `-cu12` package and comes before CUDA 13's
//! unsuffixed one. nvcc is several wheels per release, so nvcc releases are those the
//! project pins in repro.toml. Each release is installed on demand into the cache (NVRTC
//! releases nobody pinned are recorded with the sha256 they had, not checked against one).
//! Each step is a child `repro build` (or `repro bench`) with `--toolchain`, because NVRTC
//! is one library per process; its builds land in the same store, so a repeated bisection
//! answers from it. The search itself is [`super::search::Search`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use std::sync::{Mutex, PoisonError};

use git2::Oid;

use super::executor::{Executor, StepRequest};
use super::local::{self, StepFail};
use super::run::{self, BisectError, Event, Step as RunStep, StepError};
use super::search::{Answer, Next, Outcome, Search};
use crate::engines::toolchain::install::{self, Family, InstallError, Source, Spec};
use crate::foundation::config::Config;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::recipe::Recipe;
use crate::foundation::store::Store;

/// The record kind of a finished toolchain bisection in the store.
pub const RECORDS: &str = "bisections";

/// What counts as broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Question {
    /// The build fails.
    Build,
    /// The build or the correctness check fails (needs a GPU).
    Check,
    /// The kernel is slower (or faster, as asked) than with the good end's release by more
    /// than the threshold, decided statistically (needs a GPU).
    Bench,
}

impl Question {
    /// Its name, as records and `--mode` spell it.
    pub fn word(self) -> &'static str {
        match self {
            Question::Build => "build",
            Question::Check => "check",
            Question::Bench => "bench",
        }
    }
}

/// `FROM..TO`: `nvrtc@12.8.93..nvrtc@13.0.88` (the family may be left off TO).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    /// NVRTC or nvcc.
    pub family: Family,
    /// The good end.
    pub from: String,
    /// The bad end.
    pub to: String,
}

impl Range {
    /// Parses `FAMILY@FROM..[FAMILY@]TO`.
    pub fn parse(s: &str) -> Result<Range, RangeError> {
        let (a, b) = s.split_once("..").ok_or_else(|| RangeError::NotARange {
            text: s.to_string(),
        })?;
        let from = Spec::parse(a)?;
        let Spec::Release {
            family,
            release: from,
        } = from
        else {
            return Err(RangeError::System);
        };
        let to = if b.contains('@') {
            match Spec::parse(b)? {
                Spec::Release { family: f, release } if f == family => release,
                _ => {
                    return Err(RangeError::Mixed {
                        text: s.to_string(),
                        family: family.name(),
                    });
                }
            }
        } else {
            match Spec::parse(&format!("{}@{b}", family.name()))? {
                Spec::Release { release, .. } => release,
                Spec::System => unreachable!("a release spec"),
            }
        };
        if from == to {
            return Err(RangeError::Same {
                text: s.to_string(),
            });
        }
        Ok(Range { family, from, to })
    }
}

/// Why `--toolchains FROM..TO` is not a range of releases.
#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    /// No `..`.
    #[error("`{text}` is not a range: write FROM..TO, e.g. nvrtc@12.8.93..nvrtc@13.0.88")]
    NotARange {
        /// What was given.
        text: String,
    },
    /// An end is not a toolchain.
    #[error(transparent)]
    Spec(#[from] crate::foundation::toolchain_spec::SpecError),
    /// An end is `system`.
    #[error("a toolchain range runs between releases, not `system`")]
    System,
    /// The ends are of two families.
    #[error("both ends of `{text}` must be {family} releases")]
    Mixed {
        /// What was given.
        text: String,
        /// The first end's family.
        family: &'static str,
    },
    /// Both ends are one release.
    #[error("`{text}` has the same release at both ends")]
    Same {
        /// What was given.
        text: String,
    },
}

/// Why a toolchain bisection could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainBisectError {
    /// The range names a release that does not exist as wheels.
    #[error("{family}@{release} is not among the releases available as wheels ({where_})")]
    NotAvailable {
        /// nvcc or nvrtc.
        family: &'static str,
        /// The release.
        release: String,
        /// Where releases were listed from.
        where_: String,
        /// The releases that are available.
        available: Vec<String>,
    },
    /// FROM is newer than TO.
    #[error("{from} is newer than {to}: give the older (good) release first")]
    Backwards {
        /// The good end.
        from: String,
        /// The bad end.
        to: String,
    },
    /// Listing releases failed.
    #[error("could not list the releases of {package}")]
    List {
        /// The package.
        package: String,
        /// pip's failure.
        #[source]
        source: Box<ProcessError>,
    },
    /// Installing a release failed.
    #[error("could not install {spec}")]
    Install {
        /// The release.
        spec: String,
        /// Why.
        #[source]
        source: Box<InstallError>,
    },
    /// An end does not behave as its role says.
    #[error("the {which} end {spec} is {verdict} for {target}{}", .detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    BadEnd {
        /// `good` or `bad`.
        which: &'static str,
        /// The release.
        spec: String,
        /// What it answered.
        verdict: &'static str,
        /// The target.
        target: String,
        /// The evidence.
        detail: Option<String>,
    },
    /// The answers contradict each other.
    #[error("{0}")]
    Inconsistent(String),
    /// A check or bench search stopped (as a commit bisection would).
    #[error(transparent)]
    Driver(BisectError),
    /// The repro child could not be run, or answered nonsense.
    #[error("could not evaluate {spec}: {what}")]
    Step {
        /// The release.
        spec: String,
        /// What went wrong.
        what: String,
    },
}

/// The releases of `family` that exist as wheels, oldest first: from the wheel directory if
/// one is given, else pip's index. For nvcc, the releases repro.toml pins.
pub fn releases(
    cfg: &Config,
    family: Family,
    source: &Source,
) -> Result<(Vec<String>, String), ToolchainBisectError> {
    if family == Family::Nvcc {
        // Pinned releases, and every CUDA 13+ release (major.minor) nvidia-cuda-nvcc is
        // published for, installed unpinned (trust on first use).
        let mut v: Vec<String> = cfg.toolchain.nvcc.keys().cloned().collect();
        let published = install::available_versions("nvidia-cuda-nvcc", source).map_err(|e| {
            ToolchainBisectError::List {
                package: "nvidia-cuda-nvcc".into(),
                source: Box::new(e),
            }
        })?;
        v.extend(published.iter().filter_map(|p| install::major_minor(p)));
        let where_ = match &source.wheelhouse {
            Some(dir) => format!(
                "the nvcc releases pinned in repro.toml and in the wheel directory {}",
                dir.display()
            ),
            None => "the nvcc releases pinned in repro.toml and on pip's package index".into(),
        };
        return Ok((sorted(v), where_));
    }
    let mut v = Vec::new();
    let packages = ["nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc"];
    for p in packages {
        let found =
            install::available_versions(p, source).map_err(|e| ToolchainBisectError::List {
                package: p.into(),
                source: Box::new(e),
            })?;
        // The CUDA 13 package lists only CUDA 13 releases, and so on.
        v.extend(
            found
                .into_iter()
                .filter(|ver| install::nvrtc_package(ver) == p),
        );
    }
    let where_ = match &source.wheelhouse {
        Some(dir) => format!("the wheel directory {}", dir.display()),
        None => "pip's package index".into(),
    };
    Ok((sorted(v), where_))
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.retain(|r| Spec::parse(&format!("nvrtc@{r}")).is_ok());
    v.sort_by(|a, b| crate::foundation::version::compare(a, b));
    v.dedup();
    v
}

#[cfg(test)]
use crate::engines::toolchain::install::parse_index_versions;

pub use crate::foundation::records::ReleaseStep as Step;

/// A whole release's evaluation: per target.
#[derive(Clone, Debug)]
struct Evaluation {
    per_target: BTreeMap<String, (Answer, Step)>,
    wheels: Vec<install::InstalledWheel>,
}

pub use crate::foundation::records::TargetAnswer;

/// The result of a build bisection over toolchain releases.
pub use crate::foundation::records::ToolchainBuildBisectRecord as Report;

/// The plan of a toolchain bisection.
pub struct Plan<'a> {
    /// The project root (the fixed tree).
    pub root: &'a Path,
    /// The store directory, passed to the children.
    pub store: &'a Path,
    /// The project settings.
    pub cfg: &'a Config,
    /// The recipe name.
    pub recipe: String,
    /// Its targets (one search each).
    pub targets: Vec<String>,
    /// The range.
    pub range: Range,
    /// What counts as broken.
    pub question: Question,
    /// Where wheels come from.
    pub source: Source,
    /// Time limit of one child.
    pub timeout: Duration,
}

/// The releases FROM..TO (oldest first) and where the list came from.
pub fn range_releases(plan: &Plan) -> Result<(Vec<String>, String), ToolchainBisectError> {
    let fam = plan.range.family;
    let (all, releases_from) = releases(plan.cfg, fam, &plan.source)?;
    let pos = |r: &str| {
        all.iter()
            .position(|x| x == r)
            .ok_or_else(|| ToolchainBisectError::NotAvailable {
                family: fam.name(),
                release: r.to_string(),
                where_: releases_from.clone(),
                available: all.clone(),
            })
    };
    let (lo, hi) = (pos(&plan.range.from)?, pos(&plan.range.to)?);
    if lo > hi {
        return Err(ToolchainBisectError::Backwards {
            from: format!("{}@{}", fam.name(), plan.range.from),
            to: format!("{}@{}", fam.name(), plan.range.to),
        });
    }
    Ok((all[lo..=hi].to_vec(), releases_from))
}

/// Runs the bisection: lists releases, checks both ends, then searches each target.
pub fn bisect(plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Report, ToolchainBisectError> {
    let fam = plan.range.family;
    let (list, releases_from) = range_releases(plan)?;
    progress(&format!(
        "{} {} releases from {} to {} ({releases_from})",
        list.len(),
        fam.name(),
        plan.range.from,
        plan.range.to
    ));
    let mut evals: BTreeMap<usize, Evaluation> = BTreeMap::new();
    let mut order: Vec<usize> = Vec::new();
    let mut eval =
        |i: usize, progress: &mut dyn FnMut(&str)| -> Result<Evaluation, ToolchainBisectError> {
            if let Some(e) = evals.get(&i) {
                return Ok(e.clone());
            }
            let e = evaluate(plan, &list[i], progress)?;
            evals.insert(i, e.clone());
            order.push(i);
            Ok(e)
        };
    let last = list.len() - 1;
    let mut answers = Vec::new();
    let mut first_end_error = None;
    for target in &plan.targets {
        let (a0, s0) = eval(0, progress)?.per_target[target].clone();
        let (a1, s1) = eval(last, progress)?.per_target[target].clone();
        if (a0, a1) != (Answer::Good, Answer::Bad) {
            // With several targets, one that does not change is an answer too; the search
            // fails only when no target has a transition to find.
            let (which, step) = if a0 != Answer::Good {
                ("good", s0.clone())
            } else {
                ("bad", s1.clone())
            };
            let spec = format!("{}@{}", fam.name(), step.release);
            first_end_error.get_or_insert(ToolchainBisectError::BadEnd {
                which,
                spec,
                verdict: step.verdict.word(),
                target: target.clone(),
                detail: step.detail.clone(),
            });
            answers.push(TargetAnswer {
                target: target.clone(),
                first_bad: None,
                last_good: None,
                undecided: Vec::new(),
                unchanged: Some(format!(
                    "{} with {}@{} and {} with {}@{}",
                    s0.verdict,
                    fam.name(),
                    list[0],
                    s1.verdict,
                    fam.name(),
                    list[last]
                )),
            });
            continue;
        }
        let outcome = search(list.len(), &mut |i| {
            Ok(eval(i, progress)?.per_target[target].0)
        })?;
        answers.push(answer(target, &list, outcome));
    }
    if answers.iter().all(|a| a.unchanged.is_some())
        && let Some(e) = first_end_error
    {
        return Err(e);
    }
    Ok(report(plan, list, releases_from, answers, &evals, &order))
}

/// The search over releases for one target, asking `answer(i)` of release `i`.
fn search(
    n: usize,
    answer: &mut dyn FnMut(usize) -> Result<Answer, ToolchainBisectError>,
) -> Result<Outcome, ToolchainBisectError> {
    let mut search =
        Search::new(n).map_err(|e| ToolchainBisectError::Inconsistent(e.to_string()))?;
    loop {
        match search.next() {
            Next::Done(o) => return Ok(o),
            Next::Test(i) => {
                let a = answer(i)?;
                search
                    .record(i, a)
                    .map_err(|e| ToolchainBisectError::Inconsistent(e.to_string()))?;
            }
        }
    }
}

/// A target's answer from its search's outcome.
fn answer(target: &str, list: &[String], outcome: Outcome) -> TargetAnswer {
    match outcome {
        Outcome::FirstBad { index } => TargetAnswer {
            target: target.to_string(),
            first_bad: Some(list[index].clone()),
            last_good: Some(list[index - 1].clone()),
            undecided: Vec::new(),
            unchanged: None,
        },
        Outcome::Untestable { first, last } => TargetAnswer {
            target: target.to_string(),
            first_bad: None,
            last_good: Some(list[first - 1].clone()),
            undecided: list[first..=last].to_vec(),
            unchanged: None,
        },
    }
}

/// The report of a build-mode search: the answers, and the steps and wheels of the
/// releases evaluated, in the order they were.
fn report(
    plan: &Plan,
    list: Vec<String>,
    releases_from: String,
    answers: Vec<TargetAnswer>,
    evals: &BTreeMap<usize, Evaluation>,
    order: &[usize],
) -> Report {
    let fam = plan.range.family;
    let mut steps = Vec::new();
    let mut wheels = BTreeMap::new();
    for i in order {
        let e = &evals[i];
        steps.extend(e.per_target.values().map(|(_, s)| s.clone()));
        wheels.insert(list[*i].clone(), e.wheels.clone());
    }
    let commit = crate::foundation::git::head_commit(plan.root);
    let question = json!({
        "kind": "toolchain-bisection", "recipe": plan.recipe, "mode": plan.question,
        "family": fam, "releases": list, "commit": commit,
        "keys": steps.iter().map(|s| s.key.clone()).collect::<Vec<_>>(),
    });
    Report {
        schema: 1,
        kind: "toolchain-bisection".into(),
        recipe: plan.recipe.clone(),
        mode: plan.question.word().into(),
        family: fam.name().into(),
        releases: list,
        releases_from,
        commit,
        answers,
        steps,
        wheels,
        created_at: None,
        repro_version: None,
        key: crate::foundation::keys::key_of(&question),
    }
}

pub use crate::foundation::records::ToolchainBisectRecord as DrivenReport;

/// A check or bench bisection over releases, by the commit bisection's driver.
pub fn bisect_driven(
    plan: &Plan,
    recipe: Recipe,
    question: run::Question,
    keep_going: bool,
    device: usize,
    sized: &dyn Fn(usize),
    events: &(dyn Fn(Event<'_>) + Sync),
) -> Result<DrivenReport, ToolchainBisectError> {
    let fam = plan.range.family;
    let (list, releases_from) = range_releases(plan)?;
    sized(list.len());
    events(Event::Status(&format!(
        "{} {} releases from {} to {} ({releases_from})",
        list.len(),
        fam.name(),
        plan.range.from,
        plan.range.to
    )));
    let mode = match question {
        run::Question::Bench(_) => "bench",
        _ => "check",
    };
    let run_plan = driven_plan(plan, &recipe, &question, keep_going, device);
    let ex = ReleaseExecutor::new(plan, list.clone(), recipe, question, device);
    let ids = ex.ids().to_vec();
    let report = run::drive(&ex, &run_plan, &ids, events).map_err(|e| driver_error(e, plan))?;
    // Steps the driver made up itself (--keep-going) carry the made-up id: name them.
    let label = |id: &str| {
        ids.iter()
            .position(|x| x.to_string() == id)
            .map(|i| format!("{}@{}", fam.name(), list[i]))
    };
    let mut steps = report.steps;
    for s in &mut steps {
        if let Some(l) = label(&s.commit) {
            s.commit = l;
        }
    }
    let mut recheck = report.recheck;
    if let Some(r) = recheck.as_mut() {
        for c in [&mut r.culprit, &mut r.parent] {
            if let Some(l) = label(c) {
                *c = l;
            }
        }
    }
    let (first_bad, last_good, undecided) = match report.outcome {
        Outcome::FirstBad { index } => (
            Some(list[index].clone()),
            Some(list[index - 1].clone()),
            Vec::new(),
        ),
        Outcome::Untestable { first, last } => (
            None,
            Some(list[first - 1].clone()),
            list[first..=last].to_vec(),
        ),
    };
    Ok(DrivenReport {
        schema: 1,
        kind: "toolchain-bisection".into(),
        recipe: plan.recipe.clone(),
        mode: mode.into(),
        family: fam.name().into(),
        releases_from,
        commit: crate::foundation::git::head_commit(plan.root),
        outcome: report.outcome,
        first_bad,
        last_good,
        undecided,
        evaluated: report.evaluated,
        steps,
        recheck,
        wheels: ex.wheels(),
        releases: list,
        question: None,
        created_at: None,
        repro_version: None,
        key: None,
    })
}

/// The run plan of a driven search: the recipe held fixed, one step at a time on one GPU.
fn driven_plan(
    plan: &Plan,
    recipe: &Recipe,
    question: &run::Question,
    keep_going: bool,
    device: usize,
) -> run::Plan {
    run::Plan {
        recipe: Some(run::RecipeSource::Fixed(Box::new(recipe.clone()))),
        paths: Vec::new(),
        offline: false,
        question: question.clone(),
        nix: false,
        timeout: plan.timeout,
        find_fixed: false,
        jobs: 1,
        keep_going,
        devices: vec![device],
        pins: Default::default(),
        python: None,
    }
}

/// A driver's error in a release's terms.
fn driver_error(e: BisectError, plan: &Plan) -> ToolchainBisectError {
    match e {
        BisectError::BadEnd {
            which,
            commit,
            detail,
            ..
        } => ToolchainBisectError::BadEnd {
            which,
            spec: commit,
            verdict: if which == "good" {
                "not good"
            } else {
                "not bad"
            },
            target: plan.recipe.clone(),
            detail: Some(detail),
        },
        BisectError::Inconsistent(m) => ToolchainBisectError::Inconsistent(m),
        // A release, not a commit: said in the release's terms, with the whole cause.
        BisectError::Fatal { commit, source } => ToolchainBisectError::Step {
            spec: commit,
            what: crate::foundation::error::chain_text(&source),
        },
        other => ToolchainBisectError::Driver(other),
    }
}

/// Installs one release and asks a child repro about the recipe with it.
fn evaluate(
    plan: &Plan,
    release: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<Evaluation, ToolchainBisectError> {
    let spec = Spec::Release {
        family: plan.range.family,
        release: release.to_string(),
    };
    let install_err = |source| ToolchainBisectError::Install {
        spec: spec.to_string(),
        source: Box::new(source),
    };
    let p = install::plan_any(&plan.cfg.toolchain, &spec, &plan.source).map_err(install_err)?;
    let done = install::install(&p, &plan.source, false, &mut |m: &str| progress(m))
        .map_err(install_err)?;
    progress(&format!("evaluating {spec}"));
    // Check and bench questions go through [`bisect_driven`]; this path only builds.
    let out = build_child(plan, &spec);
    let (builds, out) = match out {
        Ok(o) => o,
        Err(ProcessError::Timeout { .. }) => {
            return Ok(all_targets(
                plan,
                release,
                Answer::Skip,
                None,
                false,
                Some(format!(
                    "timed out after {}",
                    humantime::format_duration(plan.timeout)
                )),
                done.installed.stamp.wheels,
            ));
        }
        Err(e) => {
            return Err(ToolchainBisectError::Step {
                spec: spec.to_string(),
                what: e.to_string(),
            });
        }
    };
    let code = out.status.code().unwrap_or(-1);
    let wheels = done.installed.stamp.wheels;
    if builds.is_empty() {
        // No build ran: the child failed before compiling (an environment problem).
        let why = first_line(&out.stderr_str())
            .unwrap_or_else(|| format!("repro build exited with {code}"));
        return Ok(all_targets(
            plan,
            release,
            Answer::Skip,
            None,
            false,
            Some(why),
            wheels,
        ));
    }
    let mut per_target = BTreeMap::new();
    for (t, b) in plan.targets.iter().zip(&builds) {
        let ok = b.status == "ok";
        let answer = if ok { Answer::Good } else { Answer::Bad };
        per_target.insert(
            t.clone(),
            (
                answer,
                Step {
                    release: release.to_string(),
                    target: t.clone(),
                    verdict: if ok { Answer::Good } else { Answer::Bad },
                    key: Some(b.key.clone()),
                    cached: b.cached,
                    detail: b.failure_reason(),
                },
            ),
        );
    }
    Ok(Evaluation { per_target, wheels })
}

fn all_targets(
    plan: &Plan,
    release: &str,
    answer: Answer,
    key: Option<String>,
    cached: bool,
    detail: Option<String>,
    wheels: Vec<install::InstalledWheel>,
) -> Evaluation {
    Evaluation {
        per_target: plan
            .targets
            .iter()
            .map(|t| {
                (
                    t.clone(),
                    (
                        answer,
                        Step {
                            release: release.to_string(),
                            target: t.clone(),
                            verdict: answer,
                            key: key.clone(),
                            cached,
                            detail: detail.clone(),
                        },
                    ),
                )
            })
            .collect(),
        wheels,
    }
}

fn first_line(s: &str) -> Option<String> {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// Check and bench questions over releases. Each release is a step of the driver commit
/// bisection uses ([`super::run::drive`]): the same statistical decision, re-check of the
/// culprit against its predecessor, step records and step lines. A release stands where a
/// commit would (the driver knows it by a made-up id; [`ReleaseExecutor::label`] names it).
/// Its build runs in a child `repro build --toolchain` (NVRTC is one library per process);
/// the check or the timing of the built module is the commit bisection's own
/// ([`super::local::answer_built`]).
pub struct ReleaseExecutor<'a> {
    plan: &'a Plan<'a>,
    list: Vec<String>,
    ids: Vec<Oid>,
    recipe: Recipe,
    question: run::Question,
    device: usize,
    store: Store,
    /// Each release's build (its outcome from the child, the wheels installed).
    builds: Mutex<BTreeMap<usize, Built>>,
    /// Bench: the good end's per-process medians.
    baselines: Mutex<BTreeMap<usize, Vec<f64>>>,
}

/// One release's build.
#[derive(Clone)]
enum Built {
    /// The child built (or failed to build) it.
    Done(
        Box<crate::engines::build::Outcome>,
        Vec<install::InstalledWheel>,
    ),
    /// It could not be built here at all (the child failed before compiling, timed out).
    Untestable(String, Vec<install::InstalledWheel>),
}

impl<'a> ReleaseExecutor<'a> {
    /// An executor over `list` (oldest first) for a check or bench question.
    pub fn new(
        plan: &'a Plan<'a>,
        list: Vec<String>,
        recipe: Recipe,
        question: run::Question,
        device: usize,
    ) -> Self {
        let ids = list
            .iter()
            .map(|r| {
                let h = crate::foundation::keys::sha256_hex(
                    format!("{}@{r}", plan.range.family.name()).as_bytes(),
                );
                Oid::from_str(&h[..40]).expect("40 hex digits")
            })
            .collect();
        ReleaseExecutor {
            plan,
            list,
            ids,
            recipe,
            question,
            device,
            store: Store::at(plan.store),
            builds: Mutex::new(BTreeMap::new()),
            baselines: Mutex::new(BTreeMap::new()),
        }
    }

    /// The ids the driver is given, one per release.
    pub fn ids(&self) -> &[Oid] {
        &self.ids
    }

    fn spec(&self, index: usize) -> Spec {
        Spec::Release {
            family: self.plan.range.family,
            release: self.list[index].clone(),
        }
    }

    fn index_of(&self, id: Oid) -> Option<usize> {
        self.ids.iter().position(|x| *x == id)
    }

    fn fatal(&self, index: usize, source: StepError) -> BisectError {
        BisectError::Fatal {
            commit: self.spec(index).to_string(),
            source,
        }
    }

    /// Installs the release and builds the recipe with it in a child repro (once).
    fn build(
        &self,
        index: usize,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Built, BisectError> {
        if let Some(b) = self
            .builds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&index)
        {
            return Ok(b.clone());
        }
        let spec = self.spec(index);
        let p = install::plan_any(&self.plan.cfg.toolchain, &spec, &self.plan.source)
            .map_err(|e| self.fatal(index, e.into()))?;
        let done = install::install(&p, &self.plan.source, false, &mut |m: &str| {
            events(Event::Status(m))
        })
        .map_err(|e| {
            self.fatal(
                index,
                StepError::Install {
                    spec: spec.to_string(),
                    source: Box::new(e),
                },
            )
        })?;
        events(Event::Status(&format!("building with {spec}")));
        let wheels = done.installed.stamp.wheels;
        let built = match build_child(self.plan, &spec) {
            Ok((builds, out)) => match builds.into_iter().next() {
                Some(o) => Built::Done(Box::new(o), wheels),
                None => Built::Untestable(
                    first_line(&out.stderr_str()).unwrap_or_else(|| {
                        format!(
                            "repro build exited with {}",
                            out.status.code().unwrap_or(-1)
                        )
                    }),
                    wheels,
                ),
            },
            Err(ProcessError::Timeout { .. }) => Built::Untestable(
                format!(
                    "the build timed out after {}",
                    humantime::format_duration(self.plan.timeout)
                ),
                wheels,
            ),
            Err(e) => return Err(self.fatal(index, e.into())),
        };
        self.builds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(index, built.clone());
        Ok(built)
    }

    /// The wheels each release evaluated so far was installed from.
    pub fn wheels(&self) -> BTreeMap<String, Vec<install::InstalledWheel>> {
        self.builds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(i, b)| {
                let w = match b {
                    Built::Done(_, w) | Built::Untestable(_, w) => w.clone(),
                };
                (self.list[*i].clone(), w)
            })
            .collect()
    }

    fn question_json(&self) -> Value {
        let q = match &self.question {
            run::Question::Bench(b) => json!({
                "mode": "bench", "threshold": b.threshold, "direction": b.direction,
                "params": b.params, "settings": b.settings,
            }),
            _ => json!({"mode": "check"}),
        };
        let mut v = json!({"schema": 1, "kind": "toolchain-step", "question": q,
               "recipe": {"path": self.recipe.path, "sha256": crate::foundation::keys::sha256_hex(self.recipe.text.as_bytes())}});
        // As a commit's step: another time limit asks another question.
        if self.plan.timeout != super::DEFAULT_STEP_TIMEOUT {
            v["timeout-ms"] = json!(self.plan.timeout.as_millis() as u64);
        }
        v
    }

    fn build_key(b: &Built) -> Option<String> {
        match b {
            Built::Done(o, _) => Some(o.key.clone()),
            Built::Untestable(..) => None,
        }
    }

    /// The good end's samples, measured (or read back) if this process has not yet.
    fn baseline(
        &self,
        index: usize,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Vec<f64>, BisectError> {
        if let Some(b) = self
            .baselines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&index)
        {
            return Ok(b.clone());
        }
        let quiet = |e: Event<'_>| {
            if let Event::Status(m) = e {
                events(Event::Status(m));
            }
        };
        let s = self.evaluate(index, None, &quiet)?;
        if s.verdict != Answer::Good || s.samples.is_empty() {
            return Err(self.fatal(
                index,
                StepError::Baseline {
                    device: None,
                    verdict: s.verdict,
                    detail: None,
                },
            ));
        }
        Ok(s.samples)
    }

    fn evaluate(
        &self,
        index: usize,
        baseline: Option<usize>,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<RunStep, BisectError> {
        let start = std::time::Instant::now();
        let spec = self.spec(index);
        let built = self.build(index, events)?;
        let bench = matches!(self.question, run::Question::Bench(_));
        let baseline_key = match baseline {
            Some(bi) if bench => Self::build_key(&self.build(bi, events)?),
            _ => None,
        };
        let mut step = RunStep::new(index, self.ids[index], self.subject_of(index, &built));
        step.commit = spec.to_string();
        let key = crate::foundation::keys::key_of(&json!({
            "q": self.question_json(),
            "build": Self::build_key(&built),
            "baseline": baseline_key,
            // An unbuildable release has no build key: its step is keyed by the release.
            "release": matches!(built, Built::Untestable(..)).then(|| spec.to_string()),
        }));
        let finish = |mut step: RunStep| {
            if bench {
                let place = format!("GPU {}", self.device);
                step.by_place = BTreeMap::from([(place.clone(), step.samples.clone())]);
                step.placement = Some(place);
                if baseline.is_none() && step.verdict == Answer::Good && !step.samples.is_empty() {
                    self.baselines
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(index, step.samples.clone());
                }
            }
            step
        };
        if let Some(rec) = local::stored_step(&self.store, &key) {
            local::fill_from_record(rec, &mut step);
            step.cached = true;
            step.ms = start.elapsed().as_secs_f64() * 1e3;
            let step = finish(step);
            events(Event::Step(&step));
            return Ok(step);
        }
        let outcome = match &built {
            Built::Done(o, _) => o,
            Built::Untestable(why, _) => {
                // Not stored: another run (with the cause fixed) may be able to test it.
                step.verdict = Answer::Skip;
                step.detail = Some(why.clone());
                step.ms = start.elapsed().as_secs_f64() * 1e3;
                let step = finish(step);
                events(Event::Step(&step));
                return Ok(step);
            }
        };
        let (answer, detail, keep) =
            self.answer_step(index, baseline, outcome, &mut step, events)?;
        step.verdict = answer;
        step.detail = detail;
        step.ms = start.elapsed().as_secs_f64() * 1e3;
        if keep {
            let rec = local::step_record(
                &key,
                &step,
                answer,
                self.question_json(),
                Some(&self.recipe.text),
            );
            self.store
                .put_record(run::STEPS, &key, &rec)
                .map_err(|e| self.fatal(index, e.into()))?;
        }
        let step = finish(step);
        events(Event::Step(&step));
        Ok(step)
    }

    /// Checks or times a built release: its answer, why, and whether the step is kept
    /// (a GPU that was not available keeps nothing).
    fn answer_step(
        &self,
        index: usize,
        baseline: Option<usize>,
        outcome: &crate::engines::build::Outcome,
        step: &mut RunStep,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<(Answer, Option<String>, bool), BisectError> {
        let bench = matches!(self.question, run::Question::Bench(_));
        let spec = self.spec(index);
        let mut base = match baseline {
            Some(bi) if bench => Some(self.baseline(bi, events)?),
            _ => None,
        };
        let mut question = self.question.clone();
        if let run::Question::Bench(b) = &mut question {
            b.settings.device = self.device;
        }
        events(Event::Status(&format!(
            "{} with {spec}",
            if bench { "timing" } else { "checking" }
        )));
        let mut r = self.recipe.clone();
        let exec = crate::engines::bench::ProcessExecutor::current()
            .map_err(|e| self.fatal(index, e.into()))?;
        Ok(
            match local::answer_built(
                &question,
                &mut r,
                outcome,
                &self.store,
                self.plan.timeout,
                &mut base,
                step,
                self.device,
                &exec,
            ) {
                Ok((a, why)) => (a, why, true),
                Err(StepFail::Answer(a, why)) => (a, Some(why), true),
                Err(StepFail::Unavailable(why)) => (Answer::Skip, Some(why), false),
                Err(StepFail::Fatal(e)) => return Err(self.fatal(index, e)),
                Err(StepFail::Abort(e)) => return Err(e),
            },
        )
    }

    fn subject_of(&self, index: usize, built: &Built) -> String {
        let wheels = match built {
            Built::Done(_, w) | Built::Untestable(_, w) => w,
        };
        let first = wheels
            .first()
            .map(|w| format!("{} {}", w.package, w.version))
            .unwrap_or_default();
        match wheels.len() {
            0 | 1 => {
                format!("{} {}", self.plan.range.family.name(), self.list[index])
                    + &if first.is_empty() {
                        String::new()
                    } else {
                        format!(" ({first})")
                    }
            }
            n => format!(
                "{} {} ({first} and {} more wheels)",
                self.plan.range.family.name(),
                self.list[index],
                n - 1
            ),
        }
    }
}

impl Executor for ReleaseExecutor<'_> {
    fn width(&self) -> usize {
        1
    }

    fn run(
        &self,
        req: &StepRequest,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<RunStep, BisectError> {
        self.evaluate(req.index, req.baseline.map(|(i, _)| i), events)
    }

    fn subject(&self, commit: Oid) -> String {
        self.index_of(commit)
            .map(|i| format!("{} {}", self.plan.range.family.name(), self.list[i]))
            .unwrap_or_default()
    }

    fn label(&self, commit: Oid) -> String {
        self.index_of(commit)
            .map(|i| self.spec(i).to_string())
            .unwrap_or_else(|| crate::foundation::git::short(commit))
    }
}

/// Runs `repro --json build --toolchain SPEC RECIPE` for the plan's tree and store, and reads
/// the outcome of each target's build from what it prints (none when it failed before
/// building: an environment problem, which its stderr names).
fn build_child(
    plan: &Plan,
    spec: &Spec,
) -> Result<
    (
        Vec<crate::engines::build::Outcome>,
        crate::foundation::process::Output,
    ),
    ProcessError,
> {
    let exe = std::env::current_exe().map_err(|e| ProcessError::Spawn {
        argv: "repro".into(),
        source: e,
    })?;
    let out = Cmd::new(exe)
        .arg("-C")
        .arg(plan.root)
        .arg("--store")
        .arg(plan.store)
        .args(["--json", "build", "--toolchain"])
        .arg(spec.to_string())
        .arg(&plan.recipe)
        // The release under test, never the NVRTC the environment names.
        .env_remove("REPRO_NVRTC")
        .timeout(plan.timeout)
        .output()?;
    #[derive(serde::Deserialize)]
    struct Reply {
        builds: Vec<crate::engines::build::Outcome>,
    }
    let builds = serde_json::from_slice::<Reply>(&out.stdout)
        .map(|r| r.builds)
        .unwrap_or_default();
    Ok((builds, out))
}

/// Where a toolchain bisection's wheels come from: the directory given, else
/// REPRO_WHEELHOUSE, else pip.
pub fn source(wheelhouse: Option<PathBuf>) -> Source {
    Source::new(wheelhouse, None)
}

impl Diagnose for ToolchainBisectError {
    fn exit_code(&self) -> u8 {
        match self {
            ToolchainBisectError::NotAvailable { .. } | ToolchainBisectError::Backwards { .. } => {
                exit::USAGE
            }
            ToolchainBisectError::List { .. } | ToolchainBisectError::Step { .. } => {
                exit::ENVIRONMENT
            }
            ToolchainBisectError::Install { source, .. } => source.exit_code(),
            ToolchainBisectError::BadEnd { .. } | ToolchainBisectError::Inconsistent(_) => {
                exit::MISMATCH
            }
            ToolchainBisectError::Driver(e) => e.exit_code(),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            ToolchainBisectError::NotAvailable { available, .. } => Some(format!(
                "releases available: {}",
                if available.is_empty() { "none".to_string() } else { available.join(", ") }
            )),
            ToolchainBisectError::Install { source, .. } => source.hint(),
            ToolchainBisectError::List { .. } => Some("check that pip can reach the package index, or pass --wheels DIR".into()),
            ToolchainBisectError::BadEnd { which: "good", .. } => Some("choose an older FROM that builds (`repro build --toolchain SPEC RECIPE` shows why it does not)".into()),
            ToolchainBisectError::BadEnd { .. } => Some("choose a TO where it is broken".into()),
            ToolchainBisectError::Inconsistent(_) => Some("the property is not monotone over these releases; narrow the range".into()),
            ToolchainBisectError::Driver(e) => e.hint(),
            ToolchainBisectError::Step { what, .. } if what.contains(crate::engines::fingerprint::cuda::NO_DRIVER) => {
                Some("check and bench modes run the kernel on a GPU: run it on a GPU machine, or use --mode build here".into())
            }
            ToolchainBisectError::Step { spec, .. } => Some(format!(
                "`repro build --toolchain {spec} RECIPE` runs the same step alone and shows what fails"
            )),
            ToolchainBisectError::Backwards { from, to } => {
                Some(format!("swap the ends: --toolchains {to}..{from}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        let r = Range::parse("nvrtc@12.8.93..nvrtc@13.0.88").unwrap();
        assert_eq!(
            (r.family, r.from.as_str(), r.to.as_str()),
            (Family::Nvrtc, "12.8.93", "13.0.88")
        );
        assert_eq!(Range::parse("nvcc@12.9..13.0").unwrap().to, "13.0");
        for bad in [
            "nvrtc@12.9",
            "nvrtc@12.9..nvcc@13.0",
            "system..nvcc@13.0",
            "nvcc@13.0..13.0",
            "nvrtc@1..x",
        ] {
            assert!(Range::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn range_errors_name_the_range() {
        let said = |s: &str| Range::parse(s).unwrap_err().to_string();
        assert_eq!(
            said("nvrtc@12.9"),
            "`nvrtc@12.9` is not a range: write FROM..TO, e.g. nvrtc@12.8.93..nvrtc@13.0.88"
        );
        assert_eq!(
            said("nvrtc@12.9..nvcc@13.0"),
            "both ends of `nvrtc@12.9..nvcc@13.0` must be nvrtc releases"
        );
        assert_eq!(
            said("nvcc@13.0..13.0"),
            "`nvcc@13.0..13.0` has the same release at both ends"
        );
        assert_eq!(
            said("system..nvcc@13.0"),
            "a toolchain range runs between releases, not `system`"
        );
    }

    #[test]
    fn pip_index_output_parses() {
        let t = "nvidia-cuda-nvrtc-cu12 (12.9.86)\nAvailable versions: 12.9.86, 12.9.41, 12.8.93\n";
        assert_eq!(parse_index_versions(t), ["12.9.86", "12.9.41", "12.8.93"]);
        let v = sorted(vec![
            "13.0.88".into(),
            "12.9.86".into(),
            "12.10.1".into(),
            "12.9.86".into(),
            "13.0.48".into(),
        ]);
        assert_eq!(v, ["12.9.86", "12.10.1", "13.0.48", "13.0.88"]);
    }
}
