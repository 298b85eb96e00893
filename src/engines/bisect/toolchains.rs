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

use super::search::{Answer, Next, Outcome, Search};
use crate::engines::toolchain::install::{self, Family, InstallError, Source, Spec};
use crate::foundation::config::Config;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::process::{Cmd, ProcessError};

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
    pub fn parse(s: &str) -> Result<Range, String> {
        let (a, b) = s.split_once("..").ok_or_else(|| {
            format!("`{s}` is not a range: write FROM..TO, e.g. nvrtc@12.8.93..nvrtc@13.0.88")
        })?;
        let from = Spec::parse(a).map_err(|e| e.to_string())?;
        let Spec::Release {
            family,
            release: from,
        } = from
        else {
            return Err("a toolchain range runs between releases, not `system`".into());
        };
        let to = if b.contains('@') {
            match Spec::parse(b).map_err(|e| e.to_string())? {
                Spec::Release { family: f, release } if f == family => release,
                _ => {
                    return Err(format!(
                        "both ends of `{s}` must be {} releases",
                        family.name()
                    ));
                }
            }
        } else {
            match Spec::parse(&format!("{}@{b}", family.name())).map_err(|e| e.to_string())? {
                Spec::Release { release, .. } => release,
                Spec::System => unreachable!("a release spec"),
            }
        };
        if from == to {
            return Err(format!("`{s}` has the same release at both ends"));
        }
        Ok(Range { family, from, to })
    }
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
    let mut v: Vec<String> = match family {
        Family::Nvcc => {
            return Ok((
                sorted(cfg.toolchain.nvcc.keys().cloned().collect()),
                "the nvcc releases pinned in repro.toml".into(),
            ));
        }
        Family::Nvrtc => Vec::new(),
    };
    let packages = ["nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc"];
    let where_ = match &source.wheelhouse {
        Some(dir) => {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".whl") || !name.contains(install::arch()) {
                    continue;
                }
                for p in packages {
                    if let Some(rest) = name.strip_prefix(&format!("{}-", p.replace('-', "_")))
                        && let Some((version, _)) = rest.split_once('-')
                        && install::nvrtc_package(version) == p
                    {
                        v.push(version.to_string());
                    }
                }
            }
            format!("the wheel directory {}", dir.display())
        }
        None => {
            for p in packages {
                let out = Cmd::new("python3")
                    .args([
                        "-m",
                        "pip",
                        "index",
                        "versions",
                        "--disable-pip-version-check",
                        p,
                    ])
                    .timeout(Duration::from_secs(120))
                    .run()
                    .map_err(|source| ToolchainBisectError::List {
                        package: p.into(),
                        source: Box::new(source),
                    })?;
                v.extend(parse_index_versions(&out.stdout_str()));
            }
            "pip's package index".into()
        }
    };
    Ok((sorted(v), where_))
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.retain(|r| Spec::parse(&format!("nvrtc@{r}")).is_ok());
    v.sort_by(|a, b| crate::foundation::version::compare(a, b));
    v.dedup();
    v
}

/// The versions in `pip index versions` output ("Available versions: 13.0.88, 13.0.48").
pub fn parse_index_versions(text: &str) -> Vec<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Available versions:"))
        .map(|rest| {
            rest.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// One evaluated release: per target, its verdict.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Step {
    /// The release.
    pub release: String,
    /// Build target (or the recipe name for a single-target recipe).
    pub target: String,
    /// good, bad or skip.
    pub verdict: &'static str,
    /// The build key.
    pub key: Option<String>,
    /// Whether the store had the build already.
    pub cached: bool,
    /// The compiler's first error line, or why the step was skipped.
    pub detail: Option<String>,
}

/// A whole release's evaluation: per target.
#[derive(Clone, Debug)]
struct Evaluation {
    per_target: BTreeMap<String, (Answer, Step)>,
    wheels: Vec<install::InstalledWheel>,
}

/// What the search found for one target.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct TargetAnswer {
    /// The target.
    pub target: String,
    /// The first bad release, when pinned down.
    pub first_bad: Option<String>,
    /// The last good release before it.
    pub last_good: Option<String>,
    /// Releases that could not be told apart (all skipped), when not pinned down.
    pub undecided: Vec<String>,
    /// When this target has no transition in the range: what it does at both ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<String>,
}

/// The result of a toolchain bisection.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    /// Always 1.
    pub schema: u32,
    /// `toolchain-bisection`.
    pub kind: &'static str,
    /// The recipe.
    pub recipe: String,
    /// build or check.
    pub mode: Question,
    /// nvrtc or nvcc.
    pub family: Family,
    /// The releases searched, oldest first (FROM..TO).
    pub releases: Vec<String>,
    /// Where the release list came from.
    pub releases_from: String,
    /// The commit held fixed (HEAD) and whether the working tree differed from it.
    pub commit: Option<String>,
    /// Per target.
    pub answers: Vec<TargetAnswer>,
    /// Every evaluation, in order.
    pub steps: Vec<Step>,
    /// The wheels each evaluated release was installed from.
    pub wheels: BTreeMap<String, Vec<install::InstalledWheel>>,
    /// The store key of this record.
    pub key: String,
}

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

/// Runs the bisection: lists releases, checks both ends, then searches each target.
pub fn bisect(plan: &Plan, progress: &mut dyn FnMut(&str)) -> Result<Report, ToolchainBisectError> {
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
    let list: Vec<String> = all[lo..=hi].to_vec();
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
                verdict: step.verdict,
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
        let mut search = Search::new(list.len()).map_err(ToolchainBisectError::Inconsistent)?;
        let outcome = loop {
            match search.next() {
                Next::Done(o) => break o,
                Next::Test(i) => {
                    let (a, _) = eval(i, progress)?.per_target[target].clone();
                    search
                        .record(i, a)
                        .map_err(ToolchainBisectError::Inconsistent)?;
                }
            }
        };
        answers.push(match outcome {
            Outcome::FirstBad { index } => TargetAnswer {
                target: target.clone(),
                first_bad: Some(list[index].clone()),
                last_good: Some(list[index - 1].clone()),
                undecided: Vec::new(),
                unchanged: None,
            },
            Outcome::Untestable { first, last } => TargetAnswer {
                target: target.clone(),
                first_bad: None,
                last_good: Some(list[first - 1].clone()),
                undecided: list[first..=last].to_vec(),
                unchanged: None,
            },
        });
    }
    if answers.iter().all(|a| a.unchanged.is_some())
        && let Some(e) = first_end_error
    {
        return Err(e);
    }
    let mut steps = Vec::new();
    let mut wheels = BTreeMap::new();
    for i in &order {
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
    Ok(Report {
        schema: 1,
        kind: "toolchain-bisection",
        recipe: plan.recipe.clone(),
        mode: plan.question,
        family: fam,
        releases: list,
        releases_from,
        commit,
        answers,
        steps,
        wheels,
        key: crate::foundation::keys::key_of(&question),
    })
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
    let p = install::plan(plan.cfg, &spec, None, true).map_err(install_err)?;
    let done = install::install(&p, &plan.source, false, &mut |m: &str| progress(m))
        .map_err(install_err)?;
    progress(&format!("evaluating {spec}"));
    let exe = std::env::current_exe().map_err(|e| ToolchainBisectError::Step {
        spec: spec.to_string(),
        what: format!("cannot find the repro executable: {e}"),
    })?;
    let verb = match plan.question {
        Question::Build => "build",
        Question::Check => "bench",
    };
    let out = Cmd::new(exe)
        .arg("-C")
        .arg(plan.root)
        .arg("--store")
        .arg(plan.store)
        .args(["--json", verb, "--toolchain"])
        .arg(spec.to_string())
        .arg(&plan.recipe)
        // The release under test, never the NVRTC the environment names.
        .env_remove("REPRO_NVRTC")
        .timeout(plan.timeout)
        .output();
    let out = match out {
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
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let wheels = done.installed.stamp.wheels;
    match plan.question {
        Question::Build => {
            let builds = reply["builds"].as_array().cloned().unwrap_or_default();
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
                let ok = b["status"] == "ok";
                let answer = if ok { Answer::Good } else { Answer::Bad };
                per_target.insert(
                    t.clone(),
                    (
                        answer,
                        Step {
                            release: release.to_string(),
                            target: t.clone(),
                            verdict: if ok { "good" } else { "bad" },
                            key: b["key"].as_str().map(str::to_string),
                            cached: b["cached"] == true,
                            detail: (!ok)
                                .then(|| first_error(b["log"].as_str().unwrap_or_default())),
                        },
                    ),
                );
            }
            Ok(Evaluation { per_target, wheels })
        }
        Question::Check => {
            let (answer, detail) = match code {
                0 => (Answer::Good, None),
                1 | 5 => (Answer::Bad, first_line(&out.stderr_str())),
                _ => (Answer::Skip, first_line(&out.stderr_str())),
            };
            Ok(all_targets(
                plan, release, answer, None, false, detail, wheels,
            ))
        }
    }
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
    let verdict = match answer {
        Answer::Good => "good",
        Answer::Bad => "bad",
        Answer::Skip => "skip",
    };
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
                            verdict,
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

/// The compiler's first error line, else its first line.
fn first_error(log: &str) -> String {
    log.lines()
        .map(str::trim)
        .find(|l| l.contains("error"))
        .or_else(|| log.lines().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("the build failed")
        .to_string()
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
            _ => None,
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
