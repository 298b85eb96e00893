//! The local executor: evaluates a bisection step on this machine, in a temporary
//! directory or a kept worktree, with the store as its memory.
//!
//! A step is answered from the store when its step key (the question, the commit's tree,
//! the baseline's tree) is known; otherwise the commit's files are written out, the recipe
//! built, checked, timed or the script run, and the answer stored. On several GPUs each
//! device measures its own baseline of the good end, so that every statistical decision
//! compares samples taken on one card.

pub(crate) mod pycall;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use git2::{Oid, Repository};
use serde_json::{Value, json};

use super::decide::{self, Decision};
use super::executor::{Executor, StepRequest};
use super::run::{
    BenchQuestion, BisectError, Event, Plan, Question, RecipeSource, SAMPLES, STEPS, Step,
    StepError,
};
use super::search::Answer;
use crate::engines::bench;
use crate::engines::build::inputs::{self, InputError};
use crate::engines::build::{self, BuildError, Options};
use crate::foundation::git::{self, CheckoutError, CommitFiles, Entry, Fetcher, Rename, Worktree};
use crate::foundation::keys;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::recipe::{self, Build, Recipe};
use crate::foundation::records::{SamplesRecord, Settings, StepRecord};
use crate::foundation::store::Store;

/// State the workers of one bisection share: how blobs are fetched, the whole-tree
/// checkouts kept from step to step (one per worker), and the renames of the recipe's
/// source, found once.
struct Shared {
    fetcher: Fetcher,
    worktrees: Vec<Mutex<Option<Worktree>>>,
    renames: OnceLock<Vec<Rename>>,
    /// The newest commit of the range: renames are followed back from there.
    newest: git2::Oid,
    /// The GPU worker processes that check and bench steps reuse (one per device), started
    /// on the first GPU job and ended with the bisection.
    gpu: OnceLock<bench::WorkerExecutor>,
    /// Commits whose speculative build runs now: a step of one of them waits for it (and
    /// then finds the build in the store) instead of building it a second time at once.
    prefetching: (Mutex<std::collections::BTreeSet<Oid>>, std::sync::Condvar),
    /// One step only (a cluster job): worktrees are not watched for a next step.
    one_step: bool,
}

impl Shared {
    /// Waits while a speculative build of `oid` runs; returns how long it waited.
    fn wait_for_prefetch(&self, oid: Oid) -> std::time::Duration {
        let start = std::time::Instant::now();
        let (set, cv) = &self.prefetching;
        let mut held = set.lock().unwrap_or_else(|e| e.into_inner());
        while held.contains(&oid) {
            held = cv.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        start.elapsed()
    }

    /// Marks a speculative build of `oid` as running (`true`) or done.
    fn prefetching(&self, oid: Oid, running: bool) {
        let (set, cv) = &self.prefetching;
        let mut held = set.lock().unwrap_or_else(|e| e.into_inner());
        if running {
            held.insert(oid);
        } else {
            held.remove(&oid);
            cv.notify_all();
        }
    }

    /// The reused GPU workers (see [`bench::WorkerExecutor`]).
    fn gpu(&self) -> Result<&bench::WorkerExecutor, StepFail> {
        if let Some(g) = self.gpu.get() {
            return Ok(g);
        }
        let g = bench::WorkerExecutor::current().map_err(|e| StepFail::Fatal(e.into()))?;
        Ok(self.gpu.get_or_init(|| g))
    }
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
    /// Bench steps run where no store may share samples with another place (a cluster
    /// job): this names the place, and it goes into every key.
    salt: Option<&'a str>,
    events: &'a (dyn Fn(Event<'_>) + Sync),
    /// Blobs fetched for the step being evaluated.
    fetched: std::cell::Cell<usize>,
}

/// A step's files, written out: a fresh sparse directory, or a worker's worktree.
enum StepDir<'a> {
    Fresh(crate::foundation::scratch::Scratch),
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
                "machine": machine(b.settings.device),
            }),
        };
        let mut v = json!({"schema": 1, "question": q, "recipe": self.plan.recipe.as_ref().map(RecipeSource::key_json), "nix": self.plan.nix});
        // Only present when given, so keys of whole-tree steps stay as they were.
        if !self.plan.paths.is_empty() {
            v["paths"] = json!(self.plan.paths);
        }
        if let Some(salt) = self.salt {
            v["placement"] = json!(salt);
        }
        // A step that ran into its time limit answers for that limit only: another limit
        // asks another question. Only present when not the default, so that keys of steps
        // under the default stay as they were.
        if self.plan.timeout != super::DEFAULT_STEP_TIMEOUT {
            v["timeout-ms"] = json!(self.plan.timeout.as_millis() as u64);
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
    ) -> Result<(Recipe, Option<String>), RecipeFailure> {
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
                    return Err(RecipeFailure::new(
                        Answer::Skip,
                        format!("{rel} does not exist at this commit"),
                    ));
                }
                let text = inputs::FileSource::read(files, &rel)
                    .map_err(|e| RecipeFailure::new(Answer::Skip, e.to_string()))?;
                let r =
                    recipe::parse_detached(&rel, &String::from_utf8_lossy(&text)).map_err(|e| {
                        RecipeFailure::new(
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
            git::follow_renames(self.repo, start, &c.source, self.plan.offline).unwrap_or_default()
        });
        let here = git::name_at(self.repo, renames, &c.source, oid);
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
        Err(RecipeFailure::new(
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
        out.map_err(|RecipeFailure { answer: a, why }| {
            if why.contains(git::MISSING_BLOB) {
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
            StepFail::Fatal(StepError::Scratch {
                dir: self.store.scratch(),
                source: e,
            })
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
            git::write_sparse(files.repo(), dir.path(), &entries)?;
            return Ok(StepDir::Fresh(dir));
        }
        let shared: &'a Shared = self.shared;
        let mut guard = shared.worktrees[self.slot % shared.worktrees.len()]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            // A whole-tree bisection starts from the store's kept worktree when one is free:
            // what the last bisection wrote is checked and kept, not written again.
            // The store lock (shared) makes the store first, and keeps gc out meanwhile.
            let kept = if self.plan.paths.is_empty() {
                let _lock = self
                    .store
                    .lock_shared()
                    .map_err(|e| io(std::io::Error::other(e.to_string())))?;
                Worktree::adopt(&self.store.scratch()).unwrap_or(None)
            } else {
                None
            };
            let wt = match kept {
                Some(wt) => wt,
                None => Worktree::new(self.store.scratch_dir("bisecttree").map_err(io)?),
            };
            *guard = Some(if shared.one_step { wt.unwatched() } else { wt });
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

    /// The step's answer from the store, if it is known there.
    fn stored(&self, index: usize, oid: Oid) -> Result<Option<Step>, BisectError> {
        let start = Instant::now();
        let files = CommitFiles::new(self.repo, oid).map_err(|e| BisectError::Fatal {
            commit: git::short(oid),
            source: e.into(),
        })?;
        let key = self.step_key(files.tree_id());
        let Some(rec) = stored_step(&self.store, &key) else {
            return Ok(None);
        };
        let subject = git::subject(self.repo, oid).map_err(|e| BisectError::Fatal {
            commit: git::short(oid),
            source: e.into(),
        })?;
        let mut step = Step::new(index, oid, subject);
        fill_from_record(rec, &mut step);
        step.cached = true;
        step.ms = start.elapsed().as_secs_f64() * 1e3;
        Ok(Some(step))
    }

    fn evaluate(&mut self, index: usize, oid: Oid) -> Result<Step, BisectError> {
        if let Some(step) = self.stored(index, oid)? {
            (self.events)(Event::Step(&step));
            return Ok(step);
        }
        let start = Instant::now();
        let subject = git::subject(self.repo, oid).map_err(|e| BisectError::Fatal {
            commit: git::short(oid),
            source: e.into(),
        })?;
        let files = CommitFiles::new(self.repo, oid).map_err(|e| BisectError::Fatal {
            commit: git::short(oid),
            source: e.into(),
        })?;
        let key = self.step_key(files.tree_id());
        let mut step = Step::new(index, oid, subject);
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
                    commit: git::short(oid),
                    source,
                });
            }
            Err(StepFail::Abort(e)) => return Err(e),
        };
        step.verdict = answer;
        step.detail = detail;
        step.ms = start.elapsed().as_secs_f64() * 1e3;
        let recipe_text = match &self.plan.recipe {
            Some(RecipeSource::Fixed(r)) => Some(r.text.as_str()),
            _ => None,
        };
        let rec = step_record(&key, &step, answer, self.question_json(), recipe_text);
        if keep {
            self.store
                .put_record(STEPS, &key, &rec)
                .map_err(|e| BisectError::Fatal {
                    commit: git::short(oid),
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
            let answer = match Cmd::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(root)
                .keep_tail(crate::foundation::process::STEP_KEEP)
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
                        commit: git::short(oid),
                        detail: crate::foundation::process::describe_status(o.status),
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
            return still_there(&dir, answer);
        }
        if let Question::Bench(b) = &self.plan.question
            && let Some((cmd, metric)) = &b.command
        {
            let b = b.clone();
            let (cmd, metric) = (cmd.clone(), metric.clone());
            let timeout = self.plan.timeout;
            let device = b.settings.device;
            let dir = self.checkout(files, None)?;
            let root = dir.path().to_path_buf();
            let answer = self.judge(
                step,
                |n| {
                    let mut v = Vec::new();
                    for _ in 0..n {
                        match bench::run_command_once(&root, &cmd, &metric, timeout, Some(device)) {
                            bench::CommandRun::Sample(x) => v.push(x),
                            bench::CommandRun::Failed(w) => {
                                return Err(MeasureError::CommandFailed { why: w });
                            }
                            bench::CommandRun::Timeout => {
                                return Err(MeasureError::CommandTimeout);
                            }
                        }
                    }
                    Ok(v)
                },
                &b,
            );
            return still_there(&dir, answer);
        }
        // Recipe questions: the recipe as it applies here, then its files, then the build.
        let (mut r, note) = self.recipe_at(files, oid).map_err(StepFail::from)?;
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
            let answer = self.build_in_nix(dir.path(), &r.path, oid);
            return still_there(&dir, Ok(answer));
        }
        let needed = self.recipe_files(files, &r)?;
        let dir = self.checkout(files, Some(&needed))?;
        let root = dir.path();
        let opts = Options {
            commit: Some(oid.to_string()),
            pins: Some(self.plan.pins.clone()),
            offline: self.plan.offline,
            // The bisection installed the toolchain before its first step; a step that
            // still has to (a Slurm node's own cache) does it without a progress bar.
            quiet: true,
            python: self.plan.python.clone(),
            ..Options::default()
        };
        // A speculative build is itself a build question, which never waits (for itself).
        if !matches!(self.plan.question, Question::Build) {
            step.times.wait_ms = self.shared.wait_for_prefetch(oid).as_secs_f64() * 1e3;
        }
        let build_start = std::time::Instant::now();
        let built = build::build(root, &self.store, &r, &opts);
        step.times.build_ms = build_start.elapsed().as_secs_f64() * 1e3;
        let measure_start = std::time::Instant::now();
        let built = match built {
            Ok(b) => b,
            Err(BuildError::Inputs { source, .. }) => {
                return Ok((Answer::Bad, Some(source.to_string())));
            }
            Err(BuildError::Recipe { source }) => {
                return Ok((Answer::Skip, Some(source.to_string())));
            }
            Err(e) => return Err(StepFail::Fatal(e.into())),
        };
        let timeout = self.plan.timeout;
        let question = self.plan.question.clone();
        let store = self.store.clone();
        if r.sections.call.is_some() && matches!(question, Question::Check | Question::Bench(_)) {
            let cx = pycall::Context {
                root,
                python: self.plan.python.as_deref(),
                timeout,
                device: self.plan.devices.first().copied().unwrap_or(0),
            };
            let answer = pycall::answer(&question, &mut r, &built, &cx, &mut self.baseline, step);
            return still_there(&dir, answer);
        }
        let gpu = match self.shared.gpu() {
            Ok(g) => g,
            Err(e) => return still_there(&dir, Err(e)),
        };
        let answer = answer_built(
            &question,
            &mut r,
            &built,
            &store,
            timeout,
            &mut self.baseline,
            step,
            // A check runs on this worker's GPU (`--devices`), as bench steps do.
            self.plan.devices.first().copied().unwrap_or(0),
            gpu,
        );
        step.times.measure_ms = measure_start.elapsed().as_secs_f64() * 1e3;
        still_there(&dir, answer)
    }

    /// Measures a commit (see [`judge`]) against this context's baseline.
    fn judge(
        &mut self,
        step: &mut Step,
        measure: impl FnMut(usize) -> Result<Vec<f64>, MeasureError>,
        b: &BenchQuestion,
    ) -> Result<(Answer, Option<String>), StepFail> {
        judge(&mut self.baseline, step, measure, b)
    }

    fn build_in_nix(&self, root: &Path, name: &str, commit: Oid) -> (Answer, Option<String>) {
        let Ok(exe) = std::env::current_exe() else {
            return (
                Answer::Skip,
                Some("cannot find the repro executable".into()),
            );
        };
        // The scratch tree lies inside the user's repository: the child is told it is the
        // project (else it finds the repository around it and builds the working tree), and
        // which commit it holds. The store is named absolutely, as `-C` moves the child.
        let store = std::path::absolute(self.store.root())
            .unwrap_or_else(|_| self.store.root().to_path_buf());
        let out = Cmd::new(exe)
            .arg("-C")
            .arg(root)
            .arg("--store")
            .arg(store)
            .env(git::PROJECT_ROOT_VAR, root)
            .args(["build", "--nix", "--json", name])
            .arg(format!("--at-commit={commit}"))
            .timeout(self.plan.timeout)
            .output();
        match out {
            Ok(o) => match o.status.code() {
                Some(0) => (Answer::Good, None),
                Some(5) => {
                    // Say why, as a build step does: the compiler's first error.
                    #[derive(serde::Deserialize)]
                    struct Reply {
                        builds: Vec<build::Outcome>,
                    }
                    let why = serde_json::from_slice::<Reply>(&o.stdout)
                        .ok()
                        .and_then(|r| r.builds.into_iter().find(|b| b.status != "ok"))
                        .and_then(|b| b.failure_reason())
                        .unwrap_or_else(|| {
                            o.stderr_str()
                                .lines()
                                .next()
                                .unwrap_or_default()
                                .to_string()
                        });
                    (
                        Answer::Bad,
                        Some(format!("build failed inside the commit's Nix shell: {why}")),
                    )
                }
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

/// A step's answer stands only if its tree outlived the step: a tree removed while the step
/// ran (by hand, or by a cleanup that misjudged it) may have made the build or the script
/// fail for a reason that is not the commit's, so the answer is never stored.
fn still_there(
    dir: &StepDir<'_>,
    answer: Result<(Answer, Option<String>), StepFail>,
) -> Result<(Answer, Option<String>), StepFail> {
    if dir.path().is_dir() {
        answer
    } else {
        Err(StepFail::Unavailable(format!(
            "the step's scratch tree {} vanished while it ran; its answer is not stored",
            dir.path().display()
        )))
    }
}

/// The store record of an evaluated step (under [`STEPS`], by step key).
pub(crate) fn step_record(
    key: &str,
    step: &Step,
    answer: Answer,
    question: Value,
    recipe_text: Option<&str>,
) -> Value {
    crate::foundation::records::to_json(&StepRecord {
        schema: crate::foundation::records::SCHEMA,
        key: key.to_string(),
        commit: step.commit.clone(),
        subject: step.subject.clone(),
        verdict: answer,
        detail: step.detail.clone(),
        note: step.note.clone(),
        resources: step.resources.clone(),
        median: step.median,
        p: step.p,
        attempts: step.attempts,
        ratio: step.ratio.map(|r| [r.0, r.1, r.2]),
        samples: step.samples.clone(),
        question,
        recipe_text: recipe_text.map(str::to_string),
    })
}

/// A stored step's record, if there is one that reads (another schema, or damage: the step
/// is evaluated again).
pub(crate) fn stored_step(
    store: &crate::foundation::store::Store,
    key: &str,
) -> Option<StepRecord> {
    store
        .get_record(STEPS, key)
        .ok()
        .flatten()
        .and_then(|v| StepRecord::from_json(&v, key).ok())
}

/// A step's answer read back from its store record.
pub(crate) fn fill_from_record(rec: StepRecord, step: &mut Step) {
    step.verdict = rec.verdict;
    step.detail = rec.detail;
    step.note = rec.note;
    step.resources = rec.resources;
    step.median = rec.median;
    step.p = rec.p;
    step.attempts = rec.attempts;
    step.ratio = rec.ratio.map(|[a, b, c]| (a, b, c));
    step.samples = rec.samples;
}

/// What a check or bench step makes of a finished build (its own, or one a child process
/// made with another toolchain): the check run on the GPU, or the kernel timed in separate
/// processes and judged against `baseline` (which the good end's step fills). A build
/// question only looks at the build's status. A check runs on `check_device`; a bench step
/// on its settings' device. GPU jobs go through `exec` (a bisection's reused workers).
#[expect(
    clippy::too_many_arguments,
    reason = "one step's context: a commit's or a release's, from different executors"
)]
pub(crate) fn answer_built(
    question: &Question,
    r: &mut Recipe,
    built: &build::Outcome,
    store: &Store,
    timeout: std::time::Duration,
    baseline: &mut Option<Vec<f64>>,
    step: &mut Step,
    check_device: usize,
    exec: &dyn bench::Executor,
) -> Result<(Answer, Option<String>), StepFail> {
    let build_failed = built.status != "ok";
    let run_entry = r.sections.run.as_ref().map(|x| x.launch.kernel.clone());
    step.resources = built
        .resources
        .as_ref()
        .map(|rep| rep.summary(run_entry.as_deref()));
    // Repro's conclusion about budgets, else the compiler's first error line (never a
    // warning before it).
    let first_error = match built.over_budget.first() {
        Some(v) => format!("over budget: {v}"),
        None => built.failure_reason().unwrap_or_default(),
    };
    // What check and bench steps load: the CUBIN, else the PTX.
    let module = built
        .outputs
        .get("cubin")
        .or(built.outputs.get("ptx"))
        .map(|o| PathBuf::from(&o.path));
    // Check and bench steps run kernels: without a driver no commit or release can be
    // answered, so that stops the search (exit 3), never a verdict on the step.
    if matches!(question, Question::Check | Question::Bench(_))
        && built.status == "ok"
        && !crate::engines::fingerprint::cuda::driver_present()
    {
        return Err(StepFail::Fatal(StepError::NoDriver));
    }
    match question {
        Question::Build => Ok(if build_failed {
            (Answer::Bad, Some(format!("build failed: {first_error}")))
        } else {
            (Answer::Good, None)
        }),
        Question::Check => {
            if build_failed {
                return Ok((Answer::Bad, Some(format!("build failed: {first_error}"))));
            }
            let Some(module) = module else {
                return Ok((Answer::Skip, Some("no loadable artifact".into())));
            };
            let settings = Settings::once(check_device);
            let points = match bench::resolve(&r.sections, &module, &settings, true, false) {
                Ok(p) => p,
                Err(e) => return Ok((Answer::Skip, Some(e.to_string()))),
            };
            check_points(exec, &points, timeout).map_err(|e| StepFail::Fatal(e.into()))
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
            if let Err(e) =
                crate::foundation::runspec::override_params(&mut r.sections.params, &b.params)
            {
                return Ok((Answer::Skip, Some(e.to_string())));
            }
            let Some(module) = module else {
                return Ok((Answer::Skip, Some("no loadable artifact".into())));
            };
            let points = match bench::resolve(&r.sections, &module, &b.settings, false, false) {
                Ok(p) if p.len() == 1 => p,
                Ok(p) => {
                    return Err(StepFail::Fatal(StepError::Points { points: p.len() }));
                }
                Err(e) => return Ok((Answer::Skip, Some(e.to_string()))),
            };
            let job = points.into_iter().next().expect("one point").job;
            measure_job(exec, &job, built, store, timeout, baseline, step, b)
        }
        Question::Script(_) => unreachable!("handled above"),
    }
}

/// How samples are taken: raised whenever what a sample means changes (graph mode's
/// settling and fastest placement, say), so that samples of another method are never
/// compared with new ones.
const TIMING_METHOD: u32 = 3;

/// What a bench step's samples depend on beyond the experiment: the GPU that took them (by
/// UUID, from the per-boot device cache), the driver, and the timing method. A store copied
/// or pulled to another machine, or kept across a driver or repro upgrade, never hands back
/// samples or step answers of another card, driver or method.
fn machine(device: usize) -> Value {
    use crate::engines::fingerprint::cuda;
    use crate::foundation::fields::Field;
    // Asked once per process and device: every step key of a bisection needs it.
    static SEEN: OnceLock<Mutex<BTreeMap<usize, Value>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Mutex::default);
    let mut seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    seen.entry(device)
        .or_insert_with(|| {
            let devices = cuda::probe_devices_cached();
            let uuid = match devices.get(&format!("gpu.devices.{device}.uuid")) {
                Some(Field::Value(v)) => Some(v.clone()),
                _ => None,
            };
            json!({"gpu": uuid, "driver": cuda::loaded_driver_version(), "timing-method": TIMING_METHOD})
        })
        .clone()
}

/// A bench step's answer: the job measured in separate processes (each giving its median,
/// kept in the store per experiment, so commits whose builds are identical share them) and
/// judged against `baseline` (see [`judge`]).
#[expect(
    clippy::too_many_arguments,
    reason = "one bench step's context, as answer_built received it"
)]
fn measure_job(
    exec: &dyn bench::Executor,
    job: &crate::engines::gpurun::Job,
    built: &build::Outcome,
    store: &Store,
    timeout: std::time::Duration,
    baseline: &mut Option<Vec<f64>>,
    step: &mut Step,
    b: &BenchQuestion,
) -> Result<(Answer, Option<String>), StepFail> {
    // Commits whose builds are identical share measurements: the samples are
    // kept per experiment (build key, launch, settings), not per commit.
    let mut exp = json!({
        "build-key": built.key, "job": job.kernel, "args": job.args, "settings": b.settings,
        "machine": machine(b.settings.device),
    });
    // Timed another way (a `REPRO_TIMING_*` setting), another experiment; the defaults
    // keep the key they had.
    if let Some(t) = job.timing.as_ref().filter(|t| !t.settings.is_empty()) {
        exp["timing-settings"] = json!(t.settings);
    }
    bench::key_bursts(&mut exp, job.timing.as_ref());
    let exp = keys::key_of(&exp);
    let mut taken = 0usize;
    judge(
        baseline,
        step,
        |n| {
            let mut cached: Vec<f64> = store
                .get_record(SAMPLES, &exp)
                .ok()
                .flatten()
                .and_then(|v| SamplesRecord::from_json(&v, &exp).ok())
                .map(|r| r.samples)
                .unwrap_or_default();
            while cached.len() < taken + n {
                let ran = bench::bench_job(exec, job, timeout)?;
                // A run whose check failed, crashed or timed out gives no sample.
                if ran.verdict != crate::foundation::records::ResultVerdict::Ok {
                    return Err(MeasureError::Verdict {
                        verdict: ran.verdict,
                        detail: ran.detail.unwrap_or_default(),
                    });
                }
                // The process's median as its result would give it: the mean of its
                // bursts' medians where it sampled in bursts.
                cached.push(
                    ran.summary
                        .as_ref()
                        .map(|s| s.median)
                        .ok_or(MeasureError::NoSamples)?,
                );
                let _ = store.put_record(
                    SAMPLES,
                    &exp,
                    &crate::foundation::records::to_json(&SamplesRecord {
                        schema: crate::foundation::records::SCHEMA,
                        experiment: exp.clone(),
                        samples: cached.clone(),
                    }),
                );
            }
            let out = cached[taken..taken + n].to_vec();
            taken += n;
            Ok(out)
        },
        b,
    )
}

/// A check step's answer: every point run through `exec` (the one engine function that
/// `repro bench` uses too) and judged by its verdict, which names a timeout as a timeout
/// and a crash as a crash. The first point that is not ok makes the commit bad.
pub(crate) fn check_points(
    exec: &dyn bench::Executor,
    points: &[bench::Point],
    timeout: std::time::Duration,
) -> Result<(Answer, Option<String>), bench::ChildError> {
    for p in points {
        let ran = bench::bench_job(exec, &p.job, timeout)?;
        if ran.verdict != crate::foundation::records::ResultVerdict::Ok {
            return Ok((
                Answer::Bad,
                Some(format!(
                    "{} at {}: {}",
                    ran.verdict.word(),
                    crate::foundation::records::params_text(&bench::params_json(&p.params)),
                    ran.detail.unwrap_or_default()
                )),
            ));
        }
    }
    Ok((Answer::Good, None))
}

/// Measures a commit and judges it against the baseline, stopping as soon as the verdict
/// is certain: at the looks of [`decide::Looks`] (a few processes first, then a quarter
/// more at a time, up to `max_attempts`), each on the interval that keeps the error rates
/// of the rule of old (`first_attempts` processes, doubled while undecided; the argument
/// is on `Looks`). The good end itself is measured in `first_attempts` processes and
/// becomes the baseline.
pub(crate) fn judge(
    baseline: &mut Option<Vec<f64>>,
    step: &mut Step,
    mut measure: impl FnMut(usize) -> Result<Vec<f64>, MeasureError>,
    b: &BenchQuestion,
) -> Result<(Answer, Option<String>), StepFail> {
    let Some(base) = baseline.clone() else {
        // This is the good end itself: it becomes the baseline.
        let samples = match measure(b.first_attempts) {
            Ok(s) => s,
            Err(e) => return Ok((Answer::Bad, Some(e.to_string()))),
        };
        step.median = crate::foundation::stats::median(&samples);
        step.attempts = samples.len();
        step.samples = samples.clone();
        *baseline = Some(samples);
        return Ok((Answer::Good, Some("the baseline".into())));
    };
    let looks = decide::Looks::new(b.first_attempts, b.max_attempts);
    let mut samples: Vec<f64> = Vec::new();
    for &n in &looks.at {
        match measure(n - samples.len()) {
            Ok(s) => samples.extend(s),
            Err(e) => return Ok((Answer::Bad, Some(e.to_string()))),
        }
        let seed = samples.len() as u64;
        let j = decide::decide_at(
            &base,
            &samples,
            b.threshold,
            b.direction,
            0.01,
            looks.level,
            seed,
        );
        step.median = crate::foundation::stats::median(&samples);
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
    }
    Ok((
        Answer::Skip,
        Some(format!(
            "undecided after {} processes: the difference is near the threshold or the noise too large",
            samples.len()
        )),
    ))
}

/// Why a commit's samples could not be taken: the commit is then bad, for this reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MeasureError {
    /// The bench command failed.
    #[error("the bench command failed: {why}")]
    CommandFailed {
        /// How.
        why: String,
    },
    /// The bench command ran out of time.
    #[error("the bench command timed out")]
    CommandTimeout,
    /// The benchmark's child process could not be run.
    #[error(transparent)]
    Child(#[from] bench::ChildError),
    /// The kernel ran but its run was not ok (wrong, crashed, timed out).
    #[error("{}: {detail}", .verdict.word())]
    Verdict {
        /// The run's verdict.
        verdict: crate::foundation::records::ResultVerdict,
        /// Why.
        detail: String,
    },
    /// The run gave no samples.
    #[error("no samples")]
    NoSamples,
}

/// Why a commit cannot be tested with the recipe, as its answer: untestable (a skip: the
/// recipe's source or an include directory is not in the commit, a blob cannot be read)
/// or broken (bad: a missing or cyclic include), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct RecipeFailure {
    /// The answer the commit gets.
    pub answer: Answer,
    /// Why, for the step's detail.
    pub why: String,
}

impl RecipeFailure {
    /// The answer, and why.
    pub fn new(answer: Answer, why: impl Into<String>) -> Self {
        RecipeFailure {
            answer,
            why: why.into(),
        }
    }
}

impl From<RecipeFailure> for StepFail {
    fn from(f: RecipeFailure) -> Self {
        StepFail::Answer(f.answer, f.why)
    }
}

/// Why a step could not give an answer of its own.
pub(crate) enum StepFail {
    /// The commit gets this answer, for this reason (an untestable commit is a skip).
    Answer(Answer, String),
    /// The commit cannot be tested here and now (a blob this clone lacks): a skip that is
    /// not stored, since another clone, or this one after a fetch, can test it.
    Unavailable(String),
    /// Something that stops every step (no compiler, a broken store, a full disk).
    Fatal(StepError),
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
) -> Result<Vec<String>, RecipeFailure> {
    let mut need: Vec<String> = Vec::new();
    if own_recipe {
        need.push(r.path.clone());
    }
    if files.is_file_in_tree(crate::foundation::config::FILE) {
        need.push(crate::foundation::config::FILE.to_string());
    }
    let (sources, include_dirs): (Vec<String>, &[String]) = match &r.build {
        Build::Nvrtc(c) | Build::Nvcc(c) => (vec![c.source.clone()], &c.include_dirs),
        Build::TorchExtension(t) => (t.sources.clone(), &t.include_dirs),
        Build::Command(_) => (Vec::new(), &[]),
    };
    match &r.build {
        Build::Nvrtc(_) | Build::Nvcc(_) | Build::TorchExtension(_) => {
            for source in &sources {
                source_closure(files, source, include_dirs, fetch, &mut need)?;
            }
            if let Build::TorchExtension(t) = &r.build
                && let Some(setup) = &t.setup
            {
                // setup.py names its sources: everything in its directory.
                let dir = Path::new(setup).parent().unwrap_or(Path::new(""));
                need.extend(
                    files
                        .paths()
                        .into_iter()
                        .filter(|p| Path::new(p).starts_with(dir)),
                );
            }
            // Include directories must exist for the build to use them.
            for d in include_dirs {
                match files.paths_under(d).into_iter().next() {
                    Some(p) => need.push(p),
                    None => {
                        return Err(RecipeFailure::new(
                            Answer::Skip,
                            format!("include directory {d} does not exist at this commit"),
                        ));
                    }
                }
            }
        }
        Build::Command(cb) => {
            // The recipe's globs were validated when it was parsed.
            let globs: Vec<globset::GlobMatcher> = cb
                .inputs
                .iter()
                .filter_map(|g| inputs::glob_matcher(g).ok())
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
            RecipeFailure::new(
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

/// Adds a source and every file it includes to `need`, fetching blobs a partial clone
/// lacks.
fn source_closure(
    files: &CommitFiles,
    source: &str,
    include_dirs: &[String],
    fetch: &mut dyn FnMut(&str) -> bool,
    need: &mut Vec<String>,
) -> Result<(), RecipeFailure> {
    if !files.is_file_in_tree(source) {
        return Err(RecipeFailure::new(
            Answer::Skip,
            format!("the recipe's source {source} is not in this commit"),
        ));
    }
    loop {
        match inputs::include_closure_in(files, source, include_dirs) {
            Ok(closure) => {
                need.extend(closure.files.into_keys());
                return Ok(());
            }
            Err(InputError::Read { path, .. }) if files.is_file_in_tree(&path) && fetch(&path) => {}
            // A blob that cannot be read makes the commit untestable.
            Err(e @ InputError::Read { .. }) => {
                return Err(RecipeFailure::new(Answer::Skip, e.to_string()));
            }
            // A missing or cyclic include is a broken build.
            Err(e) => return Err(RecipeFailure::new(Answer::Bad, e.to_string())),
        }
    }
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

/// Builds a commit's recipe into the store, ahead of its evaluation (the speculative builds
/// of both possible next midpoints while the current one is measured). Failures are ignored:
/// the real evaluation will meet and report them.
fn prefetch_build(repo_path: &Path, store: &Store, plan: &Plan, shared: &Shared, oid: Oid) {
    if plan.nix
        || plan.recipe.is_none()
        || !matches!(plan.question, Question::Bench(_) | Question::Check)
    {
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
        salt: None,
        events: &|_| {},
        fetched: std::cell::Cell::new(0),
    };
    let Ok(files) = CommitFiles::new(&repo, oid) else {
        return;
    };
    let mut scratch = Step::new(0, oid, String::new());
    // Build questions only ever write sparse trees, so the shared worktrees stay untouched.
    // The answer is thrown away: only the build lands in the store (under its own lock),
    // never a step, so nothing not asked for is recorded as a commit's answer.
    struct Running<'a>(&'a Shared, Oid);
    impl Drop for Running<'_> {
        fn drop(&mut self) {
            self.0.prefetching(self.1, false);
        }
    }
    shared.prefetching(oid, true);
    let _running = Running(shared, oid);
    let _ = ctx.evaluate_fresh(&files, oid, &mut scratch);
}

/// Runs steps on this machine: today's behaviour of `repro bisect`. Each worker slot has
/// its own kept worktree and, for bench and check steps, its own GPU (`--devices`); a bench
/// step is judged against a baseline of the good end measured on that same GPU.
pub struct LocalExecutor {
    repo_path: PathBuf,
    store: Store,
    plan: Plan,
    shared: Shared,
    /// Baselines measured so far: (device, baseline commit) -> per-process medians.
    baselines: Mutex<BTreeMap<(usize, Oid), Vec<f64>>>,
    salt: Option<String>,
}

impl LocalExecutor {
    /// An executor for `plan` over the range ending at `newest`.
    pub fn new(repo: &Repository, store: Store, plan: &Plan, newest: Oid) -> Self {
        LocalExecutor {
            repo_path: repo.path().to_path_buf(),
            store,
            plan: plan.clone(),
            shared: Shared {
                fetcher: Fetcher::new(repo, plan.offline),
                worktrees: (0..plan.width().max(plan.devices.len()))
                    .map(|_| Mutex::new(None))
                    .collect(),
                renames: OnceLock::new(),
                newest,
                gpu: OnceLock::new(),
                prefetching: Default::default(),
                one_step: false,
            },
            baselines: Mutex::new(BTreeMap::new()),
            salt: None,
        }
    }

    /// An executor that evaluates one step and ends (a cluster job's): its worktree is not
    /// watched for a next step that never comes (watching a 20,000-file tree costs tens of
    /// milliseconds).
    pub fn one_step(mut self) -> Self {
        self.shared.one_step = true;
        self
    }

    /// Bench samples taken by this executor are keyed by `salt` (a cluster job's place),
    /// so that no other place's samples are reused and none of these leak to another.
    pub fn with_salt(mut self, salt: Option<String>) -> Self {
        self.salt = salt;
        self
    }

    fn device(&self, slot: usize) -> usize {
        self.plan
            .devices
            .get(slot % self.plan.devices.len().max(1))
            .copied()
            .unwrap_or(0)
    }

    fn open(&self, commit: Oid) -> Result<Repository, BisectError> {
        Repository::open(&self.repo_path).map_err(|e| BisectError::Fatal {
            commit: git::short(commit),
            source: e.into(),
        })
    }

    fn tree_of(repo: &Repository, commit: Oid) -> Result<Oid, BisectError> {
        CommitFiles::new(repo, commit)
            .map(|f| f.tree_id())
            .map_err(|e| BisectError::Fatal {
                commit: git::short(commit),
                source: e.into(),
            })
    }

    /// The baseline samples of `commit` on `device`: remembered, from the store, or
    /// measured now (the step of the baseline commit with no baseline of its own).
    #[expect(
        clippy::too_many_arguments,
        reason = "one evaluation's context, as Ctx holds it"
    )]
    fn baseline_on(
        &self,
        repo: &Repository,
        plan: &Plan,
        device: usize,
        slot: usize,
        index: usize,
        commit: Oid,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Vec<f64>, BisectError> {
        if let Some(b) = self
            .baselines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(device, commit))
        {
            return Ok(b.clone());
        }
        events(Event::Status(&format!(
            "measuring the baseline {} on GPU {device}",
            git::short(commit)
        )));
        // Its step line was shown when the good end was evaluated; here it is only the
        // means to a fair comparison, so only status messages get through.
        let quiet = |e: Event<'_>| {
            if let Event::Status(m) = e {
                events(Event::Status(m));
            }
        };
        let mut ctx = Ctx {
            repo,
            store: self.store.clone(),
            plan,
            baseline: None,
            baseline_tree: Some(Self::tree_of(repo, commit)?),
            shared: &self.shared,
            slot,
            salt: self.salt.as_deref(),
            events: &quiet,
            fetched: std::cell::Cell::new(0),
        };
        let s = ctx.evaluate(index, commit)?;
        if s.verdict != Answer::Good || s.samples.is_empty() {
            return Err(BisectError::Fatal {
                commit: git::short(commit),
                source: StepError::Baseline {
                    device: Some(device),
                    verdict: s.verdict,
                    detail: s.detail,
                },
            });
        }
        self.baselines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((device, commit), s.samples.clone());
        Ok(s.samples)
    }

    /// A build, check or script step's answer if the store knows it, without evaluating
    /// anything (a remote executor asks this before it submits a job). Performance steps
    /// are measured where they run, so they are never answered this way.
    pub fn stored(&self, req: &StepRequest) -> Result<Option<Step>, BisectError> {
        if matches!(self.plan.question, Question::Bench(_)) {
            return Ok(None);
        }
        let repo = self.open(req.commit)?;
        let plan = self.plan.on_device(self.device(req.slot));
        let ctx = Ctx {
            repo: &repo,
            store: self.store.clone(),
            plan: &plan,
            baseline: None,
            baseline_tree: None,
            shared: &self.shared,
            slot: req.slot,
            salt: None,
            events: &|_| {},
            fetched: std::cell::Cell::new(0),
        };
        ctx.stored(req.index, req.commit)
    }

    /// One step on one device, from worker slot `slot`.
    fn run_on(
        &self,
        req: &StepRequest,
        device: usize,
        slot: usize,
        plan: Plan,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Step, BisectError> {
        let repo = self.open(req.commit)?;
        let bench = matches!(plan.question, Question::Bench(_));
        let (baseline, baseline_tree) = if bench {
            match req.baseline {
                Some((bi, boid)) => (
                    Some(self.baseline_on(&repo, &plan, device, slot, bi, boid, events)?),
                    Some(Self::tree_of(&repo, boid)?),
                ),
                None => (None, Some(Self::tree_of(&repo, req.commit)?)),
            }
        } else {
            (None, None)
        };
        let mut ctx = Ctx {
            repo: &repo,
            store: self.store.clone(),
            plan: &plan,
            baseline,
            baseline_tree,
            shared: &self.shared,
            slot,
            salt: self.salt.as_deref(),
            events,
            fetched: std::cell::Cell::new(0),
        };
        let mut s = ctx.evaluate(req.index, req.commit)?;
        if bench {
            s.placement = Some(match &self.salt {
                Some(salt) => salt.clone(),
                None => format!("GPU {device}"),
            });
            if let Some(place) = &s.placement {
                s.by_place = BTreeMap::from([(place.clone(), s.samples.clone())]);
            }
            if req.baseline.is_none() && s.verdict == Answer::Good && !s.samples.is_empty() {
                self.baselines
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert((device, req.commit), s.samples.clone());
            }
        }
        Ok(s)
    }

    /// A performance step on several GPUs: its processes are spread over every device
    /// (each measures its share, at once), and each device judges its samples against its
    /// own baseline of the good end. The step's verdict is theirs when they agree; when they
    /// do not, the commit is a skip (untestable here), never a verdict one card made
    /// against another.
    fn run_split(
        &self,
        req: &StepRequest,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Step, BisectError> {
        let devices = self.plan.devices.clone();
        let k = devices.len();
        let quiet = |e: Event<'_>| {
            if let Event::Status(m) = e {
                events(Event::Status(m));
            }
        };
        let quiet = &quiet;
        let results: Vec<Result<Step, BisectError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(pos, &device)| {
                    let mut plan = self.plan.on_device(device);
                    if let Question::Bench(b) = &mut plan.question {
                        b.first_attempts = b.first_attempts.div_ceil(k).max(2);
                        b.max_attempts = b.max_attempts.div_ceil(k).max(b.first_attempts);
                    }
                    scope.spawn(move || self.run_on(req, device, pos, plan, quiet))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(BisectError::Inconsistent("a GPU's worker panicked".into()))
                    })
                })
                .collect()
        });
        let parts = results.into_iter().collect::<Result<Vec<Step>, _>>()?;
        let step = combine(req, &parts);
        events(Event::Step(&step));
        Ok(step)
    }
}

impl Executor for LocalExecutor {
    fn width(&self) -> usize {
        self.plan.width()
    }

    fn run(
        &self,
        req: &StepRequest,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Step, BisectError> {
        if matches!(self.plan.question, Question::Bench(_)) && self.plan.devices.len() > 1 {
            return self.run_split(req, events);
        }
        let device = self.device(req.slot);
        self.run_on(req, device, req.slot, self.plan.on_device(device), events)
    }

    fn prefetch(&self, commit: Oid) {
        prefetch_build(
            &self.repo_path,
            &self.store,
            &self.plan,
            &self.shared,
            commit,
        );
    }

    fn subject(&self, commit: Oid) -> String {
        Repository::open(&self.repo_path)
            .ok()
            .and_then(|r| git::subject(&r, commit).ok())
            .unwrap_or_default()
    }
}

/// One step's verdict from the per-device parts of a split performance step.
fn combine(req: &StepRequest, parts: &[Step]) -> Step {
    let first = &parts[0];
    let mut s = Step::new(req.index, req.commit, first.subject.clone());
    s.note = first.note.clone();
    s.cached = parts.iter().all(|p| p.cached);
    s.attempts = parts.iter().map(|p| p.attempts).sum();
    s.ms = parts.iter().map(|p| p.ms).fold(0.0, f64::max);
    s.samples = parts
        .iter()
        .flat_map(|p| p.samples.iter().copied())
        .collect();
    s.by_place = parts
        .iter()
        .flat_map(|p| p.by_place.iter().map(|(k, v)| (k.clone(), v.clone())))
        .collect();
    s.median = crate::foundation::stats::median(&s.samples);
    // For display: the geometric mean of the per-device ratios, the widest interval, and
    // the largest p-value. The decisions were each device's own.
    let ratios: Vec<(f64, f64, f64)> = parts.iter().filter_map(|p| p.ratio).collect();
    if ratios.len() == parts.len() {
        let g = (ratios.iter().map(|r| r.0.ln()).sum::<f64>() / ratios.len() as f64).exp();
        let lo = ratios.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().map(|r| r.2).fold(f64::NEG_INFINITY, f64::max);
        s.ratio = Some((g, lo, hi));
    }
    s.p = parts
        .iter()
        .filter_map(|p| p.p)
        .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.max(p))));
    let each = |p: &Step| {
        format!(
            "{}: {}{}",
            p.placement.as_deref().unwrap_or("?"),
            p.verdict,
            p.detail
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )
    };
    if parts.iter().all(|p| p.verdict == first.verdict) {
        s.verdict = first.verdict;
        s.detail = match first.verdict {
            Answer::Good if req.baseline.is_none() => Some("the baseline, on each GPU".into()),
            Answer::Good => None,
            _ => Some(parts.iter().map(each).collect::<Vec<_>>().join("; ")),
        };
    } else {
        s.verdict = Answer::Skip;
        s.detail = Some(format!(
            "the GPUs disagree, each against its own baseline: {}",
            parts.iter().map(each).collect::<Vec<_>>().join("; ")
        ));
    }
    // Samples of several cards are never compared as one: `by_place` keeps them apart.
    s.placement = None;
    s
}
