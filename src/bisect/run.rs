//! Running a bisection: evaluate the ends, then ask the pure search which commit to test
//! next until it is done, evaluating each commit in a temporary directory.
//!
//! Every evaluation goes through the store: builds by build key, measurements as result
//! records, and each step's answer under a step key (the question, the commit's tree, the
//! baseline), so re-running or widening a bisection, or resuming one that was interrupted,
//! re-evaluates nothing it already knows, and commits whose inputs did not change share work.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{Oid, Repository};
use serde_json::{Value, json};

use super::decide::{self, Decision, Direction};
use super::history::{self, CommitFiles};
use super::search::{Answer, Next, Outcome, Search};
use crate::bench::{self, Metric, Settings};
use crate::build::inputs::{self, InputError};
use crate::build::{self, BuildError, Options};
use crate::keys;
use crate::process::{Cmd, ProcessError};
use crate::recipe;
use crate::store::Store;

/// The store directory of step answers.
pub const STEPS: &str = "bisect";

/// The store directory of per-process medians, by experiment.
pub const SAMPLES: &str = "bisect-samples";

/// What is being searched for.
#[derive(Clone, Debug)]
pub enum Question {
    /// The first commit whose build fails.
    Build,
    /// The first commit whose build or correctness check fails (needs a GPU).
    Check,
    /// The first commit whose benchmark is worse than the good end's.
    Bench(BenchQuestion),
    /// `git bisect run` semantics: 0 good, 125 skip, 1-127 bad, above 127 abort.
    Script(String),
}

/// How a performance step measures and decides.
#[derive(Clone, Debug)]
pub struct BenchQuestion {
    /// Relative change that counts (0.05 = 5%).
    pub threshold: f64,
    /// Which way is worse.
    pub direction: Direction,
    /// A command bench instead of the recipe's kernel.
    pub command: Option<(String, Metric)>,
    /// Parameter overrides (the bench must resolve to one point).
    pub params: Vec<String>,
    /// Per-process timing settings.
    pub settings: Settings,
    /// Processes measured first, doubled while undecided...
    pub first_attempts: usize,
    /// ...up to this many.
    pub max_attempts: usize,
}

/// Everything a bisection needs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The recipe (all questions but `Script`).
    pub recipe: Option<String>,
    /// The question.
    pub question: Question,
    /// Build inside each commit's Nix dev shell.
    pub nix: bool,
    /// Time limit per step (a build, a run of the script, one benchmark process).
    pub timeout: Duration,
    /// `--find fixed`: the older end is bad, the newer good.
    pub find_fixed: bool,
    /// Commits evaluated at once (multisection) for builds and scripts.
    pub jobs: usize,
    /// A step that fails for reasons outside the commit (no compiler, an infrastructure
    /// error) is a skip instead of the end of the search.
    pub keep_going: bool,
    /// GPUs for bench and check steps; one commit is measured on each at once.
    pub devices: Vec<usize>,
}

impl Plan {
    /// How many commits one round evaluates at once.
    pub fn width(&self) -> usize {
        match self.question {
            Question::Bench(_) | Question::Check => self.devices.len().max(1),
            _ => self.jobs.max(1),
        }
    }

    /// This plan with its GPU work on `device`.
    fn on_device(&self, device: usize) -> Plan {
        let mut p = self.clone();
        if let Question::Bench(b) = &mut p.question {
            b.settings.device = device;
        }
        p.devices = vec![device];
        p
    }
}

/// One evaluated commit.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Step {
    /// Its position (0 = the older end).
    pub index: usize,
    /// The commit.
    pub commit: String,
    /// Its subject line.
    pub subject: String,
    /// good, bad or skip (in the terms of the question: for --find fixed, "bad" is the old state).
    pub verdict: String,
    /// Why, for bad and skip.
    pub detail: Option<String>,
    /// Whether the answer came from the store.
    pub cached: bool,
    /// Bench: the median of the per-process medians.
    pub median: Option<f64>,
    /// Bench: ratio to the baseline and its interval.
    pub ratio: Option<(f64, f64, f64)>,
    /// Bench: p-value against the baseline.
    pub p: Option<f64>,
    /// Bench: processes measured.
    pub attempts: usize,
    /// Wall time of this step (ms).
    pub ms: f64,
    /// Bench: the per-process medians (kept in the step record; the good end's are the
    /// baseline of every comparison, also when the bisection is resumed).
    #[serde(skip)]
    pub samples: Vec<f64>,
}

impl Step {
    /// A step not yet evaluated.
    fn new(index: usize, commit: Oid, subject: String) -> Self {
        Step {
            index,
            commit: commit.to_string(),
            subject,
            verdict: String::new(),
            detail: None,
            cached: false,
            median: None,
            ratio: None,
            p: None,
            attempts: 0,
            ms: 0.0,
            samples: Vec::new(),
        }
    }
}

/// Why a bisection stopped without a result.
#[derive(Debug, thiserror::Error)]
pub enum BisectError {
    /// An end does not have the state it should.
    #[error("the {which} end {commit} is not {expected}: {detail}")]
    BadEnd {
        /// "good" or "bad".
        which: &'static str,
        /// The commit.
        commit: String,
        /// What it should be.
        expected: &'static str,
        /// What it is.
        detail: String,
    },
    /// The script exited above 127 (git bisect's abort).
    #[error("the script aborted the bisection at {commit}: {detail}")]
    Aborted {
        /// The commit.
        commit: String,
        /// How.
        detail: String,
    },
    /// Something that stops every step (no compiler, a broken store).
    #[error("cannot evaluate commit {commit}")]
    Fatal {
        /// The commit.
        commit: String,
        /// The cause.
        #[source]
        source: anyhow::Error,
    },
    /// The answers contradict each other.
    #[error("{0}")]
    Inconsistent(String),
}

/// The whole result.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    /// The search's outcome.
    pub outcome: Outcome,
    /// The commits in the range, oldest first.
    pub commits: usize,
    /// Evaluated steps, in history order.
    pub steps: Vec<Step>,
    /// Evaluations that were not answered from the store.
    pub evaluated: usize,
    /// Bench: the culprit re-checked against its parent.
    pub recheck: Option<Value>,
}

struct Ctx<'a> {
    repo: &'a Repository,
    store: Store,
    plan: &'a Plan,
    baseline: Option<Vec<f64>>,
    baseline_tree: Option<Oid>,
}

impl Ctx<'_> {
    fn question_json(&self) -> Value {
        let q = match &self.plan.question {
            Question::Build => json!({"mode": "build"}),
            Question::Check => json!({"mode": "check"}),
            Question::Script(s) => json!({"mode": "script", "script": s}),
            Question::Bench(b) => json!({
                "mode": "bench", "threshold": b.threshold, "direction": b.direction, "params": b.params,
                "command": b.command.as_ref().map(|(c, m)| json!([c, m.text()])), "settings": b.settings,
            }),
        };
        json!({"schema": 1, "question": q, "recipe": self.plan.recipe, "nix": self.plan.nix})
    }

    fn step_key(&self, tree: Oid) -> String {
        keys::key_of(
            &json!({"q": self.question_json(), "tree": tree.to_string(), "baseline": self.baseline_tree.map(|t| t.to_string())}),
        )
    }

    /// Which files a step needs: the recipe's inputs when they can be known from the
    /// commit's tree, else (scripts, Nix, command benches) every file.
    fn needed(&self, files: &CommitFiles) -> Result<Option<Vec<String>>, (Answer, String)> {
        if self.plan.nix || matches!(self.plan.question, Question::Script(_)) {
            return Ok(None);
        }
        if let Question::Bench(b) = &self.plan.question
            && b.command.is_some()
        {
            return Ok(None);
        }
        let name = self
            .plan
            .recipe
            .as_deref()
            .expect("recipe questions have a recipe");
        recipe_paths(files, name).map(Some)
    }

    fn evaluate(&mut self, index: usize, oid: Oid) -> Result<Step, BisectError> {
        let start = Instant::now();
        let subject = history::subject(self.repo, oid).map_err(|e| BisectError::Fatal {
            commit: history::short(oid),
            source: e.into(),
        })?;
        let files = CommitFiles::new(self.repo, oid).map_err(|e| BisectError::Fatal {
            commit: history::short(oid),
            source: e.into(),
        })?;
        let key = self.step_key(files.tree_id());
        let mut step = Step::new(index, oid, subject);
        if let Ok(Some(rec)) = self.store.get_record(STEPS, &key) {
            step.verdict = rec["verdict"].as_str().unwrap_or("skip").to_string();
            step.detail = rec["detail"].as_str().map(str::to_string);
            step.median = rec["median"].as_f64();
            step.p = rec["p"].as_f64();
            step.attempts = rec["attempts"].as_u64().unwrap_or(0) as usize;
            step.ratio = rec["ratio"].as_array().map(|a| {
                (
                    a[0].as_f64().unwrap_or(0.0),
                    a[1].as_f64().unwrap_or(0.0),
                    a[2].as_f64().unwrap_or(0.0),
                )
            });
            step.samples = rec["samples"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            step.cached = true;
            step.ms = start.elapsed().as_secs_f64() * 1e3;
            if index == 0
                && matches!(self.plan.question, Question::Bench(_))
                && self.baseline.is_none()
                && !step.samples.is_empty()
            {
                self.baseline = Some(step.samples.clone());
            }
            return Ok(step);
        }
        let (answer, detail) = self.evaluate_fresh(&files, oid, &mut step)?;
        step.verdict = match answer {
            Answer::Good => "good",
            Answer::Bad => "bad",
            Answer::Skip => "skip",
        }
        .into();
        step.detail = detail;
        step.ms = start.elapsed().as_secs_f64() * 1e3;
        let rec = json!({"schema": 1, "key": key, "commit": step.commit, "verdict": step.verdict, "detail": step.detail,
            "median": step.median, "p": step.p, "attempts": step.attempts, "ratio": step.ratio.map(|r| [r.0, r.1, r.2]), "samples": step.samples,
            "question": self.question_json()});
        self.store
            .put_record(STEPS, &key, &rec)
            .map_err(|e| BisectError::Fatal {
                commit: history::short(oid),
                source: e.into(),
            })?;
        Ok(step)
    }

    fn checkout(
        &self,
        files: &CommitFiles,
        only: Option<&[String]>,
    ) -> Result<tempfile::TempDir, InputError> {
        let dir = self
            .store
            .scratch_dir("bisect")
            .map_err(|e| InputError::Read {
                path: self.store.scratch().display().to_string(),
                reason: e.to_string(),
            })?;
        files.materialize(dir.path(), only)?;
        Ok(dir)
    }

    fn evaluate_fresh(
        &mut self,
        files: &CommitFiles,
        oid: Oid,
        step: &mut Step,
    ) -> Result<(Answer, Option<String>), BisectError> {
        let fatal = |e: anyhow::Error| BisectError::Fatal {
            commit: history::short(oid),
            source: e,
        };
        let needed = match self.needed(files) {
            Ok(n) => n,
            Err((a, why)) => return Ok((a, Some(why))),
        };
        let dir = match self.checkout(files, needed.as_deref()) {
            Ok(d) => d,
            Err(e) => {
                return Ok((
                    Answer::Skip,
                    Some(format!("cannot materialise the commit: {e}")),
                ));
            }
        };
        let root = dir.path();
        if let Question::Script(script) = &self.plan.question {
            return match Cmd::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(root)
                .timeout(self.plan.timeout)
                .output()
            {
                Ok(o) => match o.status.code() {
                    Some(0) => Ok((Answer::Good, None)),
                    Some(125) => Ok((Answer::Skip, Some("the script exited 125 (skip)".into()))),
                    Some(c) if (1..=127).contains(&c) => {
                        Ok((Answer::Bad, Some(format!("the script exited {c}"))))
                    }
                    _ => Err(BisectError::Aborted {
                        commit: history::short(oid),
                        detail: crate::process::describe_status(o.status),
                    }),
                },
                Err(ProcessError::Timeout { .. }) => Ok((
                    Answer::Bad,
                    Some(format!(
                        "timeout: the script ran longer than {}",
                        humantime::format_duration(self.plan.timeout)
                    )),
                )),
                Err(e) => Err(fatal(e.into())),
            };
        }
        if let Question::Bench(b) = &self.plan.question
            && let Some((cmd, metric)) = &b.command
        {
            let b = b.clone();
            let (cmd, metric) = (cmd.clone(), metric.clone());
            return self.judge(
                step,
                |n| {
                    let mut v = Vec::new();
                    for _ in 0..n {
                        match bench::run_command_once(root, &cmd, &metric, self.plan.timeout) {
                            bench::CommandRun::Sample(x) => v.push(x),
                            bench::CommandRun::Failed(w) => {
                                return Err(format!("the bench command failed: {w}"));
                            }
                            bench::CommandRun::Timeout => {
                                return Err("the bench command timed out".into());
                            }
                        }
                    }
                    Ok(v)
                },
                &b,
            );
        }
        // Recipe questions: build first.
        let name = self
            .plan
            .recipe
            .clone()
            .expect("recipe questions have a recipe");
        if self.plan.nix {
            return Ok(self.build_in_nix(root, &name));
        }
        let mut r = match recipe::load(root, &name) {
            Ok(r) => r,
            Err(e) => {
                return Ok((
                    Answer::Skip,
                    Some(format!("the recipe cannot be used at this commit: {e}")),
                ));
            }
        };
        let built = match build::build(root, &self.store, &r, &Options::default()) {
            Ok(b) => b,
            Err(BuildError::Inputs { source, .. }) => {
                return Ok((Answer::Bad, Some(source.to_string())));
            }
            Err(BuildError::Recipe { source }) => {
                return Ok((Answer::Skip, Some(source.to_string())));
            }
            Err(e) => return Err(fatal(e.into())),
        };
        let build_failed = built.status != "ok";
        let first_error = built
            .log
            .lines()
            .find(|l| l.contains("error"))
            .or(built.log.lines().next())
            .unwrap_or("")
            .to_string();
        match &self.plan.question {
            Question::Build => Ok(if build_failed {
                (Answer::Bad, Some(format!("build failed: {first_error}")))
            } else {
                (Answer::Good, None)
            }),
            Question::Check => {
                if build_failed {
                    return Ok((Answer::Bad, Some(format!("build failed: {first_error}"))));
                }
                let module = built
                    .outputs
                    .get("cubin")
                    .or(built.outputs.get("ptx"))
                    .map(|o| PathBuf::from(&o.path));
                let Some(module) = module else {
                    return Ok((Answer::Skip, Some("no loadable artifact".into())));
                };
                let settings = Settings {
                    mode: crate::gpurun::Mode::Cold,
                    max_noise: 0.005,
                    min_samples: 1,
                    max_samples: 1,
                    min_time_ms: 0.0,
                    budget_ms: 0.0,
                    warmup_ms: 0.0,
                    device: 0,
                };
                let points = match bench::resolve(&r.sections, &module, &settings, true, false) {
                    Ok(p) => p,
                    Err(e) => return Ok((Answer::Skip, Some(e))),
                };
                for p in points {
                    let report = bench::run_child(&p.job, self.plan.timeout)
                        .map_err(|e| fatal(anyhow::anyhow!(e)))?;
                    let (v, d) = bench::verdict(&report);
                    if v != "ok" {
                        return Ok((
                            Answer::Bad,
                            Some(format!(
                                "{v} at {}: {}",
                                bench::params_text(&bench::params_json(&p.params)),
                                d.unwrap_or_default()
                            )),
                        ));
                    }
                }
                Ok((Answer::Good, None))
            }
            Question::Bench(b) => {
                if build_failed {
                    return Ok((
                        Answer::Skip,
                        Some(format!(
                            "the build fails here, so it cannot be timed: {first_error}"
                        )),
                    ));
                }
                if let Err(e) = crate::runspec::override_params(&mut r.sections.params, &b.params) {
                    return Ok((Answer::Skip, Some(e)));
                }
                let module = built
                    .outputs
                    .get("cubin")
                    .or(built.outputs.get("ptx"))
                    .map(|o| PathBuf::from(&o.path));
                let Some(module) = module else {
                    return Ok((Answer::Skip, Some("no loadable artifact".into())));
                };
                let points = match bench::resolve(&r.sections, &module, &b.settings, false, false) {
                    Ok(p) if p.len() == 1 => p,
                    Ok(p) => {
                        return Err(fatal(anyhow::anyhow!(
                            "the recipe has {} parameter points; a performance bisection needs one (pass --param)",
                            p.len()
                        )));
                    }
                    Err(e) => return Ok((Answer::Skip, Some(e))),
                };
                let job = points.into_iter().next().expect("one point").job;
                let b = b.clone();
                let timeout = self.plan.timeout;
                // Commits whose builds are identical share measurements: the samples are
                // kept per experiment (build key, launch, settings), not per commit.
                let exp = keys::key_of(
                    &json!({"build-key": built.key, "job": job.kernel, "args": job.args, "settings": b.settings}),
                );
                let store = self.store.clone();
                let mut taken = 0usize;
                self.judge(
                    step,
                    |n| {
                        let mut cached: Vec<f64> = store
                            .get_record(SAMPLES, &exp)
                            .ok()
                            .flatten()
                            .and_then(|r| {
                                r["samples"]
                                    .as_array()
                                    .map(|a| a.iter().filter_map(Value::as_f64).collect())
                            })
                            .unwrap_or_default();
                        while cached.len() < taken + n {
                            let report = bench::run_child(&job, timeout)?;
                            let (verdict, detail) = bench::verdict(&report);
                            if verdict != "ok" {
                                return Err(format!("{verdict}: {}", detail.unwrap_or_default()));
                            }
                            cached.push(
                                crate::stats::median(&report.samples_us).ok_or("no samples")?,
                            );
                            let _ = store.put_record(
                                SAMPLES,
                                &exp,
                                &json!({"schema": 1, "experiment": exp, "samples": cached}),
                            );
                        }
                        let out = cached[taken..taken + n].to_vec();
                        taken += n;
                        Ok(out)
                    },
                    &b,
                )
            }
            Question::Script(_) => unreachable!("handled above"),
        }
    }

    /// Measures a commit in `first_attempts` processes, doubling while the decision against
    /// the baseline is unknown, up to `max_attempts`.
    fn judge(
        &mut self,
        step: &mut Step,
        mut measure: impl FnMut(usize) -> Result<Vec<f64>, String>,
        b: &BenchQuestion,
    ) -> Result<(Answer, Option<String>), BisectError> {
        let mut samples = match measure(b.first_attempts) {
            Ok(s) => s,
            Err(e) => return Ok((Answer::Bad, Some(e))),
        };
        let Some(base) = self.baseline.clone() else {
            // This is the good end itself: it becomes the baseline.
            step.median = crate::stats::median(&samples);
            step.attempts = samples.len();
            step.samples = samples.clone();
            self.baseline = Some(samples);
            return Ok((Answer::Good, Some("the baseline".into())));
        };
        loop {
            let seed = samples.len() as u64;
            let j = decide::decide(&base, &samples, b.threshold, b.direction, 0.01, seed);
            step.median = crate::stats::median(&samples);
            step.attempts = samples.len();
            step.samples = samples.clone();
            if let Some(j) = &j {
                step.ratio = Some((j.ratio, j.ratio_ci.0, j.ratio_ci.1));
                step.p = Some(j.p);
                match j.decision {
                    Decision::Good => return Ok((Answer::Good, None)),
                    Decision::Bad => {
                        return Ok((
                            Answer::Bad,
                            Some(format!(
                                "{:+.2}% (p = {:.1e})",
                                (j.ratio - 1.0) * 100.0,
                                j.p
                            )),
                        ));
                    }
                    Decision::Unknown => {}
                }
            }
            if samples.len() >= b.max_attempts {
                return Ok((
                    Answer::Skip,
                    Some(format!(
                        "undecided after {} processes: the difference is near the threshold or the noise too large",
                        samples.len()
                    )),
                ));
            }
            let more = samples.len().min(b.max_attempts - samples.len());
            match measure(more) {
                Ok(s) => samples.extend(s),
                Err(e) => return Ok((Answer::Bad, Some(e))),
            }
        }
    }

    fn build_in_nix(&self, root: &Path, name: &str) -> (Answer, Option<String>) {
        let Ok(exe) = std::env::current_exe() else {
            return (
                Answer::Skip,
                Some("cannot find the repro executable".into()),
            );
        };
        let out = Cmd::new(exe)
            .arg("-C")
            .arg(root)
            .arg("--store")
            .arg(self.store.root())
            .args(["build", "--nix", "--json", name])
            .timeout(self.plan.timeout)
            .output();
        match out {
            Ok(o) => match o.status.code() {
                Some(0) => (Answer::Good, None),
                Some(5) => (
                    Answer::Bad,
                    Some("build failed inside the commit's Nix shell".into()),
                ),
                _ => (
                    Answer::Skip,
                    Some(format!(
                        "untestable: {}",
                        o.stderr_str()
                            .lines()
                            .next()
                            .unwrap_or("the Nix shell could not be used")
                    )),
                ),
            },
            Err(e) => (Answer::Skip, Some(e.to_string())),
        }
    }
}

/// The files a recipe reads at a commit, read from the commit's tree: the recipe, repro.toml,
/// and the include closure (or the command's input globs). `Err` says whether the commit is
/// untestable (skip) or its build is broken (bad), and why.
pub fn recipe_paths(files: &CommitFiles, name: &str) -> Result<Vec<String>, (Answer, String)> {
    let rel = format!("{}/{name}.toml", recipe::DIR);
    if !files.is_file_in_tree(&rel) {
        return Err((Answer::Skip, format!("{rel} does not exist at this commit")));
    }
    let text = inputs::FileSource::read(files, &rel).map_err(|e| (Answer::Skip, e.to_string()))?;
    let table: toml::Table = toml::from_str(&String::from_utf8_lossy(&text)).map_err(|e| {
        (
            Answer::Skip,
            format!("{rel} is not valid TOML at this commit: {}", e.message()),
        )
    })?;
    let build = table
        .get("build")
        .and_then(|b| b.as_table())
        .ok_or_else(|| (Answer::Skip, format!("{rel} has no [build] at this commit")))?;
    let strings = |k: &str| -> Vec<String> {
        build
            .get(k)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut need = vec![rel.clone()];
    if files.is_file_in_tree(crate::config::FILE) {
        need.push(crate::config::FILE.to_string());
    }
    match build.get("kind").and_then(|k| k.as_str()) {
        Some("nvrtc") | Some("nvcc") => {
            let source = build
                .get("source")
                .and_then(|s| s.as_str())
                .and_then(recipe::normalize)
                .ok_or_else(|| {
                    (
                        Answer::Skip,
                        format!("{rel} names no source at this commit"),
                    )
                })?;
            let dirs: Vec<String> = strings("include-dirs")
                .iter()
                .filter_map(|d| recipe::normalize(d))
                .collect();
            match inputs::include_closure_in(files, &source, &dirs) {
                Ok(c) => need.extend(c.files.into_keys()),
                // A missing object is untestable; a missing or cyclic include is a broken build.
                Err(e @ InputError::Read { .. }) => return Err((Answer::Skip, e.to_string())),
                Err(e) => return Err((Answer::Bad, e.to_string())),
            }
            // Directories must exist for the recipe to validate.
            for d in dirs {
                need.extend(files.paths_under(&d).into_iter().take(1));
            }
        }
        Some("command") => {
            let globs: Vec<globset::GlobMatcher> = strings("inputs")
                .iter()
                .filter_map(|g| {
                    globset::GlobBuilder::new(g)
                        .literal_separator(true)
                        .build()
                        .ok()
                })
                .map(|g| g.compile_matcher())
                .collect();
            need.extend(
                files
                    .paths()
                    .into_iter()
                    .filter(|p| globs.iter().any(|g| g.is_match(p))),
            );
        }
        _ => {}
    }
    need.sort();
    need.dedup();
    Ok(need)
}

impl CommitFiles<'_> {
    /// Whether `rel` is a file in this commit.
    pub fn is_file_in_tree(&self, rel: &str) -> bool {
        inputs::FileSource::is_file(self, rel)
    }
    /// Files under a directory.
    pub fn paths_under(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{}/", dir.trim_end_matches('/'));
        self.paths()
            .into_iter()
            .filter(|p| p.starts_with(&prefix))
            .collect()
    }
}

/// Evaluates one commit in a thread of its own (git2 repositories are not shared across
/// threads, so each worker opens its own).
fn evaluate_in_worker(
    repo_path: &Path,
    store: &Store,
    plan: &Plan,
    baseline: Option<Vec<f64>>,
    baseline_tree: Option<Oid>,
    index: usize,
    oid: Oid,
) -> Result<Step, BisectError> {
    let repo = Repository::open(repo_path).map_err(|e| BisectError::Fatal {
        commit: history::short(oid),
        source: e.into(),
    })?;
    let mut ctx = Ctx {
        repo: &repo,
        store: store.clone(),
        plan,
        baseline,
        baseline_tree,
    };
    ctx.evaluate(index, oid)
}

/// Builds a commit's recipe into the store, ahead of its evaluation (the speculative builds
/// of both possible next midpoints while the current one is measured). Failures are ignored:
/// the real evaluation will meet and report them.
fn prefetch_build(repo_path: &Path, store: &Store, plan: &Plan, oid: Oid) {
    let Ok(repo) = Repository::open(repo_path) else {
        return;
    };
    let mut build_plan = plan.clone();
    build_plan.question = Question::Build;
    let ctx = Ctx {
        repo: &repo,
        store: store.clone(),
        plan: &build_plan,
        baseline: None,
        baseline_tree: None,
    };
    let Ok(files) = CommitFiles::new(&repo, oid) else {
        return;
    };
    let Ok(needed) = ctx.needed(&files) else {
        return;
    };
    let Ok(dir) = ctx.checkout(&files, needed.as_deref()) else {
        return;
    };
    if let (Some(name), false) = (plan.recipe.as_deref(), plan.nix)
        && let Ok(r) = recipe::load(dir.path(), name)
    {
        let _ = build::build(dir.path(), store, &r, &Options::default());
    }
}

/// Chooses up to `k` commits strictly inside the bracket that split it evenly, skipping
/// commits already answered.
fn multisection_points(search: &Search, k: usize) -> Vec<usize> {
    let (lo, hi) = search.bracket();
    let free: Vec<usize> = (lo + 1..hi)
        .filter(|i| search.answer(*i).is_none())
        .collect();
    if free.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<usize> = (1..=k)
        .map(|j| {
            let target = lo + (hi - lo) * j / (k + 1);
            *free
                .iter()
                .min_by_key(|i| i.abs_diff(target))
                .expect("non-empty")
        })
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

/// Runs a bisection over `commits` (oldest first). `progress` is told about each step.
pub fn bisect(
    repo: &Repository,
    store: Store,
    plan: &Plan,
    commits: &[Oid],
    progress: &mut dyn FnMut(&str),
) -> Result<Report, BisectError> {
    store.clean_stale_scratch();
    let baseline_tree = match &plan.question {
        Question::Bench(_) => Some(
            CommitFiles::new(repo, commits[0])
                .map_err(|e| BisectError::Fatal {
                    commit: history::short(commits[0]),
                    source: e.into(),
                })?
                .tree_id(),
        ),
        _ => None,
    };
    let mut ctx = Ctx {
        repo,
        store,
        plan,
        baseline: None,
        baseline_tree,
    };
    let n = commits.len();
    // In search terms the older end answers Good and the newer Bad; --find fixed flips the
    // raw answers so that the first "bad" commit is the first fixed one.
    let flip = |a: Answer| {
        if plan.find_fixed {
            match a {
                Answer::Good => Answer::Bad,
                Answer::Bad => Answer::Good,
                s => s,
            }
        } else {
            a
        }
    };
    let raw = |s: &Step| match s.verdict.as_str() {
        "good" => Answer::Good,
        "bad" => Answer::Bad,
        _ => Answer::Skip,
    };
    let mut steps: BTreeMap<usize, Step> = BTreeMap::new();
    let mut evaluated = 0;

    // The ends first: the good end must be good and the bad end bad, or the search means nothing.
    let (older_state, newer_state) = if plan.find_fixed {
        ("bad", "good")
    } else {
        ("good", "bad")
    };
    for (i, expected, which) in [
        (0, Answer::Good, older_state),
        (n - 1, Answer::Bad, newer_state),
    ] {
        progress(&format!(
            "checking the {which} end {}",
            history::short(commits[i])
        ));
        let s = ctx.evaluate(i, commits[i])?;
        evaluated += usize::from(!s.cached);
        if flip(raw(&s)) != expected {
            let expected_word = if which == "good" { "good" } else { "bad" };
            return Err(BisectError::BadEnd {
                which,
                commit: history::short(commits[i]),
                expected: expected_word,
                detail: format!(
                    "it is {}{}",
                    s.verdict,
                    s.detail
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                ),
            });
        }
        steps.insert(i, s);
    }
    let mut search = Search::new(n).map_err(BisectError::Inconsistent)?;
    loop {
        match search.next() {
            Next::Done(outcome) => {
                // The culprit is compared with its parent directly, not only with the good end:
                // a slow drift over many commits would otherwise be blamed on one of them.
                let recheck = match (&outcome, &plan.question) {
                    (Outcome::FirstBad { index }, Question::Bench(b)) => {
                        let parent = if index - 1 == 0 {
                            ctx.baseline.clone()
                        } else {
                            steps.get(&(index - 1)).map(|s| s.samples.clone())
                        };
                        let culprit = steps.get(index).map(|s| s.samples.clone());
                        match (parent, culprit) {
                            (Some(p), Some(c)) if p.len() >= 2 && c.len() >= 2 => decide::decide(&p, &c, b.threshold, b.direction, 0.01, 11).map(|j| {
                                json!({"culprit": commits[*index].to_string(), "parent": commits[index - 1].to_string(),
                                       "ratio": j.ratio, "ratio-ci": [j.ratio_ci.0, j.ratio_ci.1], "p": j.p,
                                       "confirmed": j.decision == Decision::Bad})
                            }),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                return Ok(Report {
                    outcome,
                    commits: n,
                    steps: steps.into_values().collect(),
                    evaluated,
                    recheck,
                });
            }
            Next::Test(i) => {
                let (lo, hi) = search.bracket();
                let width = plan.width();
                let repo_path = repo.path().to_path_buf();
                if width > 1 {
                    // Multisection: several commits of the bracket at once, one per worker.
                    let points = multisection_points(&search, width);
                    progress(&format!(
                        "testing {} ({} commits left, about {} rounds)",
                        points
                            .iter()
                            .map(|p| history::short(commits[*p]))
                            .collect::<Vec<_>>()
                            .join(", "),
                        hi - lo - 1,
                        search.steps_left().div_ceil(width.ilog2().max(1) as usize)
                    ));
                    let devices = plan.devices.clone();
                    let results: Vec<Result<Step, BisectError>> = std::thread::scope(|scope| {
                        let handles: Vec<_> = points
                            .iter()
                            .enumerate()
                            .map(|(slot, &p)| {
                                let worker_plan = plan.on_device(
                                    devices
                                        .get(slot % devices.len().max(1))
                                        .copied()
                                        .unwrap_or(0),
                                );
                                let (store, baseline, tree, oid, path) = (
                                    ctx.store.clone(),
                                    ctx.baseline.clone(),
                                    ctx.baseline_tree,
                                    commits[p],
                                    repo_path.clone(),
                                );
                                scope.spawn(move || {
                                    evaluate_in_worker(
                                        &path,
                                        &store,
                                        &worker_plan,
                                        baseline,
                                        tree,
                                        p,
                                        oid,
                                    )
                                })
                            })
                            .collect();
                        handles
                            .into_iter()
                            .map(|h| {
                                h.join().unwrap_or_else(|_| {
                                    Err(BisectError::Inconsistent("a worker panicked".into()))
                                })
                            })
                            .collect()
                    });
                    for r in results {
                        let s = r?;
                        evaluated += usize::from(!s.cached);
                        search
                            .record(s.index, flip(raw(&s)))
                            .map_err(BisectError::Inconsistent)?;
                        steps.insert(s.index, s);
                    }
                    continue;
                }
                progress(&format!(
                    "testing {} ({} commits left, about {} steps)",
                    history::short(commits[i]),
                    hi - lo - 1,
                    search.steps_left()
                ));
                // While this commit is measured (GPU work), build both possible next midpoints.
                let speculative: Vec<std::thread::JoinHandle<()>> =
                    if matches!(plan.question, Question::Bench(_) | Question::Check)
                        && plan.recipe.is_some()
                    {
                        let (if_good, if_bad) = search.speculate();
                        [if_good, if_bad]
                            .into_iter()
                            .flatten()
                            .map(|j| {
                                let (store, plan, oid, path) = (
                                    ctx.store.clone(),
                                    plan.clone(),
                                    commits[j],
                                    repo_path.clone(),
                                );
                                std::thread::spawn(move || {
                                    prefetch_build(&path, &store, &plan, oid)
                                })
                            })
                            .collect()
                    } else {
                        Vec::new()
                    };
                let s = ctx.evaluate(i, commits[i]);
                for h in speculative {
                    let _ = h.join();
                }
                let s = match s {
                    Err(BisectError::Fatal { commit, source }) if plan.keep_going => Step {
                        verdict: "skip".into(),
                        detail: Some(format!("cannot evaluate {commit}: {source:#}")),
                        ..Step::new(
                            i,
                            commits[i],
                            history::subject(repo, commits[i]).unwrap_or_default(),
                        )
                    },
                    other => other?,
                };
                evaluated += usize::from(!s.cached);
                search
                    .record(i, flip(raw(&s)))
                    .map_err(BisectError::Inconsistent)?;
                steps.insert(i, s);
            }
        }
    }
}
