//! Running a bisection: evaluate the ends, then ask the pure search which commit to test
//! next until it is done, evaluating each commit in a temporary directory.
//!
//! Every evaluation goes through the store: builds by build key, measurements as result
//! records, and each step's answer under a step key (the question, the commit's tree, the
//! baseline), so re-running or widening a bisection, or resuming one that was interrupted,
//! re-evaluates nothing it already knows, and commits whose inputs did not change share work.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use git2::{Oid, Repository};
use serde_json::{Value, json};

use super::checkout::{CheckoutError, Fetcher, Worktree};
use super::decide::{self, Decision, Direction};
use super::history::{self, CommitFiles, Entry, Rename};
use super::search::{Answer, Next, Outcome, Search};
use crate::bench::{self, Metric, Settings};
use crate::build::inputs::{self, InputError};
use crate::build::{self, BuildError, Options};
use crate::keys;
use crate::process::{Cmd, ProcessError};
use crate::recipe::{self, Build, Recipe};
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

/// Where a bisection's recipe comes from.
#[derive(Clone, Debug)]
pub enum RecipeSource {
    /// Read once (from the working tree, a file, or one commit) and applied to every commit.
    Fixed(Box<Recipe>),
    /// Each commit's own `recipes/NAME.toml` (for histories whose recipes evolved).
    PerCommit(String),
}

impl RecipeSource {
    /// What the step key and the records say of it: the fixed recipe's path and the
    /// sha256 of its text, or the per-commit recipe's name.
    fn key_json(&self) -> Value {
        match self {
            RecipeSource::Fixed(r) => {
                json!({"path": r.path, "sha256": keys::sha256_hex(r.text.as_bytes())})
            }
            RecipeSource::PerCommit(name) => json!(name),
        }
    }
}

/// Everything a bisection needs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The recipe (all questions but `Script` and command benches).
    pub recipe: Option<RecipeSource>,
    /// Script and command modes: only these paths (git pathspecs) are written into a
    /// step's tree; empty means the whole tree.
    pub paths: Vec<String>,
    /// Never fetch missing blobs from a partial clone's promisor remote.
    pub offline: bool,
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
    /// What the step had to do to test this commit (a moved source, fetched blobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
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
            note: None,
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
    /// The bisection was asked something that cannot be answered (a pathspec that
    /// matches nothing at an end).
    #[error("{message}")]
    Input {
        /// What is wrong, naming the thing.
        message: String,
        /// What to do.
        hint: String,
    },
}

/// What a bisection tells its caller as it goes.
pub enum Event<'a> {
    /// What it is doing now.
    Status(&'a str),
    /// A commit was evaluated.
    Step(&'a Step),
}

/// State the workers of one bisection share: how blobs are fetched, the whole-tree
/// checkouts kept from step to step (one per worker), and the renames of the recipe's
/// source, found once.
struct Shared {
    fetcher: Fetcher,
    worktrees: Vec<Mutex<Option<Worktree>>>,
    renames: OnceLock<Vec<Rename>>,
    /// The newest commit of the range: renames are followed back from there.
    newest: git2::Oid,
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
    shared: &'a Shared,
    /// Which of the shared worktrees this evaluation uses.
    slot: usize,
    events: &'a (dyn Fn(Event<'_>) + Sync),
    /// Blobs fetched for the step being evaluated.
    fetched: std::cell::Cell<usize>,
}

/// A step's files, written out: a fresh sparse directory, or a worker's worktree.
enum StepDir<'a> {
    Fresh(tempfile::TempDir),
    Kept(std::sync::MutexGuard<'a, Option<Worktree>>),
}

impl StepDir<'_> {
    fn path(&self) -> &Path {
        match self {
            StepDir::Fresh(d) => d.path(),
            StepDir::Kept(w) => w.as_ref().expect("a kept worktree exists").path(),
        }
    }
}

impl<'a> Ctx<'a> {
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
        let mut v = json!({"schema": 1, "question": q, "recipe": self.plan.recipe.as_ref().map(RecipeSource::key_json), "nix": self.plan.nix});
        // Only present when given, so keys of whole-tree steps stay as they were.
        if !self.plan.paths.is_empty() {
            v["paths"] = json!(self.plan.paths);
        }
        v
    }

    fn step_key(&self, tree: Oid) -> String {
        keys::key_of(
            &json!({"q": self.question_json(), "tree": tree.to_string(), "baseline": self.baseline_tree.map(|t| t.to_string())}),
        )
    }

    /// The recipe to apply at this commit, with a note when its source had to be found
    /// under an earlier name. `Err` says why the commit cannot be tested with it.
    fn recipe_at(
        &self,
        files: &CommitFiles,
        oid: Oid,
    ) -> Result<(Recipe, Option<String>), (Answer, String)> {
        let fixed = match self
            .plan
            .recipe
            .as_ref()
            .expect("recipe questions have a recipe")
        {
            RecipeSource::Fixed(r) => (**r).clone(),
            RecipeSource::PerCommit(name) => {
                let rel = format!("{}/{name}.toml", recipe::DIR);
                if !files.is_file_in_tree(&rel) {
                    return Err((Answer::Skip, format!("{rel} does not exist at this commit")));
                }
                let text = inputs::FileSource::read(files, &rel)
                    .map_err(|e| (Answer::Skip, e.to_string()))?;
                let r =
                    recipe::parse_detached(&rel, &String::from_utf8_lossy(&text)).map_err(|e| {
                        (
                            Answer::Skip,
                            format!("the recipe cannot be used at this commit: {e}"),
                        )
                    })?;
                return Ok((r, None));
            }
        };
        let mut r = fixed;
        let (Build::Nvrtc(c) | Build::Nvcc(c)) = &mut r.build else {
            return Ok((r, None));
        };
        if files.is_file_in_tree(&c.source) {
            return Ok((r, None));
        }
        // The source moved: follow it back as `git log --follow` would.
        let renames = self.shared.renames.get_or_init(|| {
            let start = [self.shared.newest]
                .into_iter()
                .chain(self.repo.head().ok().and_then(|h| h.target()))
                .find(|c2| {
                    CommitFiles::new(self.repo, *c2).is_ok_and(|f| f.is_file_in_tree(&c.source))
                })
                .unwrap_or(self.shared.newest);
            history::follow_renames(self.repo, start, &c.source, self.plan.offline)
                .unwrap_or_default()
        });
        let here = history::name_at(self.repo, renames, &c.source, oid);
        if here != c.source && files.is_file_in_tree(&here) {
            let note = format!("source here: {here}");
            // The text that records keep says what was built: the recipe as applied here.
            let quoted = format!("\"{}\"", c.source);
            if r.text.matches(&quoted).count() == 1 {
                r.text = format!(
                    "# applied by repro bisect at {oid}: the source, followed back through a rename\n{}",
                    r.text.replacen(&quoted, &format!("\"{here}\""), 1)
                );
            }
            c.source = here;
            return Ok((r, Some(note)));
        }
        Err((
            Answer::Skip,
            format!(
                "the recipe's source {} is not in this commit{}",
                c.source,
                if here != c.source {
                    format!(" (nor its earlier name {here})")
                } else {
                    String::new()
                }
            ),
        ))
    }

    /// The files a recipe reads at this commit ([`recipe_paths`]), fetching the blobs a
    /// partial clone lacks as the include closure is discovered.
    fn recipe_files(&self, files: &CommitFiles, r: &Recipe) -> Result<Vec<String>, StepFail> {
        let own = matches!(self.plan.recipe, Some(RecipeSource::PerCommit(_)));
        let can_fetch = self.shared.fetcher.remote.is_some() && !self.plan.offline;
        let mut failed: Option<StepFail> = None;
        let mut fetch = |path: &str| -> bool {
            if !can_fetch || failed.is_some() {
                return false;
            }
            let entries = match files.entries_of(&[path.to_string()]) {
                Ok(e) => e,
                Err(_) => return false,
            };
            match self.fetch(files, &entries) {
                Ok(n) => n > 0,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        };
        let out = recipe_paths(files, r, own, &mut fetch);
        if let Some(f) = failed {
            return Err(f);
        }
        out.map_err(|(a, why)| {
            if why.contains(history::MISSING_BLOB) {
                let how = if self.plan.offline {
                    " (--offline: not fetched)"
                } else if self.shared.fetcher.remote.is_none() {
                    " (not a partial clone: there is no promisor remote to fetch it from)"
                } else {
                    ""
                };
                StepFail::Unavailable(format!("{why}{how}"))
            } else {
                StepFail::Answer(a, why)
            }
        })
    }

    /// Fetches the missing blobs of `entries` (a partial clone), saying so.
    fn fetch(&self, files: &CommitFiles, entries: &[Entry]) -> Result<usize, StepFail> {
        let events = self.events;
        let n = self
            .shared
            .fetcher
            .ensure(files.repo(), entries, &|m| events(Event::Status(m)))
            .map_err(StepFail::from)?;
        self.fetched.set(self.fetched.get() + n);
        Ok(n)
    }

    /// Writes out what a step needs: `Some(paths)` into a fresh directory, `None` (the
    /// whole tree, or the `--paths` selection) into this worker's kept worktree.
    fn checkout(
        &self,
        files: &CommitFiles,
        only: Option<&[String]>,
    ) -> Result<StepDir<'a>, StepFail> {
        let io = |e: std::io::Error| {
            StepFail::Fatal(anyhow::Error::new(e).context(format!(
                "cannot create a scratch directory in {}",
                self.store.scratch().display()
            )))
        };
        let entries = match only {
            Some(list) => files
                .entries_of(list)
                .map_err(|e| StepFail::Answer(Answer::Skip, e.to_string()))?,
            // The whole tree: read from the differences to what the worktree holds.
            None if self.plan.paths.is_empty() => Vec::new(),
            None => {
                let spec = git2::Pathspec::new(self.plan.paths.iter())
                    .map_err(|e| StepFail::Fatal(e.into()))?;
                files.entries_matching(&spec)
            }
        };
        if only.is_some() {
            self.fetch(files, &entries)?;
            let dir = self.store.scratch_dir("bisect").map_err(io)?;
            super::checkout::write_sparse(files.repo(), dir.path(), &entries)?;
            return Ok(StepDir::Fresh(dir));
        }
        let shared: &'a Shared = self.shared;
        let mut guard = shared.worktrees[self.slot % shared.worktrees.len()]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(Worktree::new(
                self.store.scratch_dir("bisecttree").map_err(io)?,
            ));
        }
        let wt = guard.as_mut().expect("just made");
        if self.plan.paths.is_empty() {
            wt.update_tree(files, &mut |need: &[Entry]| {
                self.fetch(files, need).map(|_| ())
            })?;
        } else {
            // Only blobs the worktree does not hold yet can be missing: fetch just those.
            self.fetch(files, &wt.new_blobs(&entries))?;
            wt.update(files, &entries)?;
        }
        Ok(StepDir::Kept(guard))
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
            step.note = rec["note"].as_str().map(str::to_string);
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
            (self.events)(Event::Step(&step));
            return Ok(step);
        }
        let mut keep = true;
        self.fetched.set(0);
        let result = self.evaluate_fresh(&files, oid, &mut step);
        if self.fetched.get() > 0 {
            let fetched = format!("fetched {} blobs", self.fetched.get());
            step.note = Some(match step.note.take() {
                Some(n) => format!("{n}; {fetched}"),
                None => fetched,
            });
        }
        let (answer, detail) = match result {
            Ok(a) => a,
            Err(StepFail::Answer(a, why)) => (a, Some(why)),
            Err(StepFail::Unavailable(why)) => {
                keep = false;
                (Answer::Skip, Some(why))
            }
            Err(StepFail::Fatal(source)) => {
                return Err(BisectError::Fatal {
                    commit: history::short(oid),
                    source,
                });
            }
            Err(StepFail::Abort(e)) => return Err(e),
        };
        step.verdict = match answer {
            Answer::Good => "good",
            Answer::Bad => "bad",
            Answer::Skip => "skip",
        }
        .into();
        step.detail = detail;
        step.ms = start.elapsed().as_secs_f64() * 1e3;
        let recipe_text = match &self.plan.recipe {
            Some(RecipeSource::Fixed(r)) => Some(r.text.as_str()),
            _ => None,
        };
        let rec = json!({"schema": 1, "key": key, "commit": step.commit, "subject": step.subject, "verdict": step.verdict, "detail": step.detail,
            "note": step.note, "median": step.median, "p": step.p, "attempts": step.attempts, "ratio": step.ratio.map(|r| [r.0, r.1, r.2]), "samples": step.samples,
            "question": self.question_json(), "recipe-text": recipe_text});
        if keep {
            self.store
                .put_record(STEPS, &key, &rec)
                .map_err(|e| BisectError::Fatal {
                    commit: history::short(oid),
                    source: e.into(),
                })?;
        }
        (self.events)(Event::Step(&step));
        Ok(step)
    }

    fn evaluate_fresh(
        &mut self,
        files: &CommitFiles,
        oid: Oid,
        step: &mut Step,
    ) -> Result<(Answer, Option<String>), StepFail> {
        if let Question::Script(script) = &self.plan.question {
            let dir = self.checkout(files, None)?;
            let root = dir.path();
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
                    _ => Err(StepFail::Abort(BisectError::Aborted {
                        commit: history::short(oid),
                        detail: crate::process::describe_status(o.status),
                    })),
                },
                Err(ProcessError::Timeout { .. }) => Ok((
                    Answer::Bad,
                    Some(format!(
                        "timeout: the script ran longer than {}",
                        humantime::format_duration(self.plan.timeout)
                    )),
                )),
                Err(e) => Err(StepFail::Fatal(e.into())),
            };
        }
        if let Question::Bench(b) = &self.plan.question
            && let Some((cmd, metric)) = &b.command
        {
            let b = b.clone();
            let (cmd, metric) = (cmd.clone(), metric.clone());
            let timeout = self.plan.timeout;
            let dir = self.checkout(files, None)?;
            let root = dir.path().to_path_buf();
            return self.judge(
                step,
                |n| {
                    let mut v = Vec::new();
                    for _ in 0..n {
                        match bench::run_command_once(&root, &cmd, &metric, timeout) {
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
        // Recipe questions: the recipe as it applies here, then its files, then the build.
        let (mut r, note) = self
            .recipe_at(files, oid)
            .map_err(|(a, why)| StepFail::Answer(a, why))?;
        step.note = note;
        if self.plan.nix {
            let dir = self.checkout(files, None)?;
            // The recipe applied is the fixed one, whatever the commit has under its name.
            if matches!(self.plan.recipe, Some(RecipeSource::Fixed(_))) {
                let at = dir.path().join(&r.path);
                if let Some(parent) = at.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| StepFail::Fatal(e.into()))?;
                }
                std::fs::write(&at, &r.text).map_err(|e| StepFail::Fatal(e.into()))?;
            }
            return Ok(self.build_in_nix(dir.path(), &r.path));
        }
        let needed = self.recipe_files(files, &r)?;
        let dir = self.checkout(files, Some(&needed))?;
        let root = dir.path();
        let opts = Options {
            commit: Some(oid.to_string()),
            ..Options::default()
        };
        let built = match build::build(root, &self.store, &r, &opts) {
            Ok(b) => b,
            Err(BuildError::Inputs { source, .. }) => {
                return Ok((Answer::Bad, Some(source.to_string())));
            }
            Err(BuildError::Recipe { source }) => {
                return Ok((Answer::Skip, Some(source.to_string())));
            }
            Err(e) => return Err(StepFail::Fatal(e.into())),
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
                        .map_err(|e| StepFail::Fatal(anyhow::anyhow!(e)))?;
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
                        return Err(StepFail::Fatal(anyhow::anyhow!(
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
    ) -> Result<(Answer, Option<String>), StepFail> {
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

/// Why a step could not give an answer of its own.
enum StepFail {
    /// The commit gets this answer, for this reason (an untestable commit is a skip).
    Answer(Answer, String),
    /// The commit cannot be tested here and now (a blob this clone lacks): a skip that is
    /// not stored, since another clone, or this one after a fetch, can test it.
    Unavailable(String),
    /// Something that stops every step (no compiler, a broken store, a full disk).
    Fatal(anyhow::Error),
    /// The bisection must stop (the script's abort).
    Abort(BisectError),
}

impl From<CheckoutError> for StepFail {
    fn from(e: CheckoutError) -> Self {
        if e.is_untestable() {
            StepFail::Unavailable(format!("cannot materialise the commit: {e}"))
        } else {
            StepFail::Fatal(e.into())
        }
    }
}

/// The files a recipe reads at a commit, from the commit's tree: repro.toml, the include
/// closure (or the command's input globs), the recipe's `[bisect] paths`, and with
/// `own_recipe` the recipe file itself. `fetch(path)` may bring a missing blob in (a partial
/// clone) and says whether it did, so the closure is read again. `Err` says whether the
/// commit is untestable (skip) or its build is broken (bad), and why.
pub fn recipe_paths(
    files: &CommitFiles,
    r: &Recipe,
    own_recipe: bool,
    fetch: &mut dyn FnMut(&str) -> bool,
) -> Result<Vec<String>, (Answer, String)> {
    let mut need: Vec<String> = Vec::new();
    if own_recipe {
        need.push(r.path.clone());
    }
    if files.is_file_in_tree(crate::config::FILE) {
        need.push(crate::config::FILE.to_string());
    }
    match &r.build {
        Build::Nvrtc(c) | Build::Nvcc(c) => {
            if !files.is_file_in_tree(&c.source) {
                return Err((
                    Answer::Skip,
                    format!("the recipe's source {} is not in this commit", c.source),
                ));
            }
            loop {
                match inputs::include_closure_in(files, &c.source, &c.include_dirs) {
                    Ok(closure) => {
                        need.extend(closure.files.into_keys());
                        break;
                    }
                    Err(InputError::Read { path, .. })
                        if files.is_file_in_tree(&path) && fetch(&path) => {}
                    // A blob that cannot be read makes the commit untestable.
                    Err(e @ InputError::Read { .. }) => return Err((Answer::Skip, e.to_string())),
                    // A missing or cyclic include is a broken build.
                    Err(e) => return Err((Answer::Bad, e.to_string())),
                }
            }
            // Include directories must exist for the build to use them.
            for d in &c.include_dirs {
                match files.paths_under(d).into_iter().next() {
                    Some(p) => need.push(p),
                    None => {
                        return Err((
                            Answer::Skip,
                            format!("include directory {d} does not exist at this commit"),
                        ));
                    }
                }
            }
        }
        Build::Command(cb) => {
            let globs: Vec<globset::GlobMatcher> = cb
                .inputs
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
    }
    if !r.bisect_paths.is_empty() {
        let spec = git2::Pathspec::new(r.bisect_paths.iter()).map_err(|e| {
            (
                Answer::Skip,
                format!("{}: [bisect] paths: {}", r.path, e.message()),
            )
        })?;
        need.extend(files.entries_matching(&spec).into_iter().map(|e| e.path));
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
#[expect(
    clippy::too_many_arguments,
    reason = "one worker's whole context, passed by value into its thread"
)]
fn evaluate_in_worker(
    repo_path: &Path,
    store: &Store,
    plan: &Plan,
    shared: &Shared,
    events: &(dyn Fn(Event<'_>) + Sync),
    slot: usize,
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
        shared,
        slot,
        events,
        fetched: std::cell::Cell::new(0),
    };
    ctx.evaluate(index, oid)
}

/// Builds a commit's recipe into the store, ahead of its evaluation (the speculative builds
/// of both possible next midpoints while the current one is measured). Failures are ignored:
/// the real evaluation will meet and report them.
fn prefetch_build(repo_path: &Path, store: &Store, plan: &Plan, shared: &Shared, oid: Oid) {
    if plan.nix || plan.recipe.is_none() {
        return;
    }
    let Ok(repo) = Repository::open(repo_path) else {
        return;
    };
    let mut build_plan = plan.clone();
    build_plan.question = Question::Build;
    let mut ctx = Ctx {
        repo: &repo,
        store: store.clone(),
        plan: &build_plan,
        baseline: None,
        baseline_tree: None,
        shared,
        slot: 0,
        events: &|_| {},
        fetched: std::cell::Cell::new(0),
    };
    let Ok(files) = CommitFiles::new(&repo, oid) else {
        return;
    };
    let mut scratch = Step::new(0, oid, String::new());
    // Build questions only ever write sparse trees, so the shared worktrees stay untouched.
    let _ = ctx.evaluate_fresh(&files, oid, &mut scratch);
}

/// Checks `--paths` against both ends before any step runs: a pathspec that cannot be
/// parsed, one that selects no file at an end, or an element that matches nothing at
/// either end (a typo) is an error naming it.
fn check_paths(repo: &Repository, paths: &[String], commits: &[Oid]) -> Result<(), BisectError> {
    let hint = "pathspecs follow git's rules, relative to the repository root: `kernels/`, `src/*.cu`, `:(exclude)data/`".to_string();
    let bad = |message: String| BisectError::Input {
        message,
        hint: hint.clone(),
    };
    let spec =
        git2::Pathspec::new(paths.iter()).map_err(|e| bad(format!("--paths: {}", e.message())))?;
    let ends = [commits[0], *commits.last().expect("two ends")];
    let mut used = vec![false; paths.len()];
    for end in ends {
        let files = CommitFiles::new(repo, end).map_err(|e| BisectError::Fatal {
            commit: history::short(end),
            source: e.into(),
        })?;
        let entries = files.all_entries();
        if !entries
            .iter()
            .any(|e| spec.matches_path(Path::new(&e.path), git2::PathspecFlags::DEFAULT))
        {
            return Err(bad(format!(
                "--paths {} matches no file at commit {}",
                paths.join(" "),
                history::short(end)
            )));
        }
        for (i, p) in paths.iter().enumerate() {
            if used[i] || p.starts_with(":(exclude)") || p.starts_with(":!") || p.starts_with(":^")
            {
                used[i] = true;
                continue;
            }
            let one = git2::Pathspec::new([p.as_str()])
                .map_err(|e| bad(format!("--paths `{p}`: {}", e.message())))?;
            used[i] = entries
                .iter()
                .any(|e| one.matches_path(Path::new(&e.path), git2::PathspecFlags::DEFAULT));
        }
    }
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(bad(format!(
            "--paths `{}` matches no file at either end ({} or {})",
            paths[i],
            history::short(ends[0]),
            history::short(ends[1])
        )));
    }
    Ok(())
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
    events: &(dyn Fn(Event<'_>) + Sync),
) -> Result<Report, BisectError> {
    store.clean_stale_scratch();
    let progress = |m: &str| events(Event::Status(m));
    if !plan.paths.is_empty() {
        check_paths(repo, &plan.paths, commits)?;
    }
    let shared = Shared {
        fetcher: Fetcher::new(repo, plan.offline),
        worktrees: (0..plan.width()).map(|_| Mutex::new(None)).collect(),
        renames: OnceLock::new(),
        newest: *commits.last().expect("a range has two ends"),
    };
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
        shared: &shared,
        slot: 0,
        events,
        fetched: std::cell::Cell::new(0),
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
                                let shared = &shared;
                                scope.spawn(move || {
                                    evaluate_in_worker(
                                        &path,
                                        &store,
                                        &worker_plan,
                                        shared,
                                        events,
                                        slot,
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
                let speculate = matches!(plan.question, Question::Bench(_) | Question::Check)
                    && plan.recipe.is_some();
                let s = std::thread::scope(|scope| {
                    if speculate {
                        let (if_good, if_bad) = search.speculate();
                        for j in [if_good, if_bad].into_iter().flatten() {
                            let (store, oid, path, shared) =
                                (ctx.store.clone(), commits[j], repo_path.clone(), &shared);
                            scope.spawn(move || prefetch_build(&path, &store, plan, shared, oid));
                        }
                    }
                    ctx.evaluate(i, commits[i])
                });
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
