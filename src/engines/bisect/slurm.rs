//! The Slurm executor: each bisection step is a Slurm job with one GPU.
//!
//! A step travels as a small request file (the commit id, the recipe's text and the
//! question, [`JobRequest`]) in the store, which must be on a filesystem the cluster's nodes
//! share; the job runs `repro bisect-step` on it, which evaluates the step with the local
//! executor on the node and writes the step record into the same store and a result file
//! ([`JobResult`]) beside the request. `srun` (one task, the job's GPU from `--gres`) returns
//! when the job has ended.
//!
//! A job that ends without a result (preempted, cancelled, out of time, its node lost) is
//! submitted again, up to a limit; it never becomes a verdict. Every job of a bisection
//! carries one job name, and all of them are cancelled (`scancel --name`) when repro stops,
//! by Ctrl-C, a signal or an error. A performance step measures its own baseline of the
//! good end inside the job, on the job's GPU, and keys its samples by the job, so that no
//! comparison spans two cards.

use std::path::{Path, PathBuf};
use std::time::Duration;

use git2::Oid;
use serde::{Deserialize, Serialize};

use super::decide::Direction;
use super::executor::{Executor, StepRequest};
use super::run::{
    BenchQuestion, BisectError, Event, Plan, Question, RecipeSource, Step, StepError,
};
use crate::engines::bench::Metric;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::records::Settings;
use crate::foundation::store::Store;

/// The schema of request and result files.
pub const SCHEMA: u64 = 1;

/// The largest request or result file read.
pub const MAX_BYTES: u64 = 4 << 20;

/// How the jobs are submitted.
#[derive(Clone, Debug)]
pub struct SlurmOptions {
    /// `--partition`, or the cluster's default.
    pub partition: Option<String>,
    /// `--gres` per job (`gpu:1`); empty for none.
    pub gres: String,
    /// `--time` per job, in Slurm's syntax (`30`, `1:00:00`).
    pub time_limit: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// Submissions of one step after the first, for jobs that end without a result.
    pub retries: usize,
    /// The repro executable the jobs run (it must be reachable from the nodes).
    pub repro: PathBuf,
}

/// A bisection's plan as it travels to a job: plain data, the recipe as its text.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PlanSpec {
    recipe: Option<RecipeSpec>,
    paths: Vec<String>,
    offline: bool,
    question: QuestionSpec,
    nix: bool,
    timeout_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
enum RecipeSpec {
    /// The recipe held fixed: its path (a label) and its text.
    Fixed { path: String, text: String },
    /// Each commit's own recipes/NAME.toml.
    PerCommit { name: String },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
enum QuestionSpec {
    Build,
    Check,
    Script {
        script: String,
    },
    Bench {
        threshold: f64,
        direction: Direction,
        command: Option<String>,
        metric: Option<String>,
        params: Vec<String>,
        settings: Settings,
        first_attempts: usize,
        max_attempts: usize,
    },
}

impl PlanSpec {
    /// The parts of `plan` a job needs (one job is one step on one GPU).
    pub fn of(plan: &Plan) -> Self {
        PlanSpec {
            recipe: plan.recipe.as_ref().map(|r| match r {
                RecipeSource::Fixed(r) => RecipeSpec::Fixed {
                    path: r.path.clone(),
                    text: r.text.clone(),
                },
                RecipeSource::PerCommit(name) => RecipeSpec::PerCommit { name: name.clone() },
            }),
            paths: plan.paths.clone(),
            offline: plan.offline,
            question: match &plan.question {
                Question::Build => QuestionSpec::Build,
                Question::Check => QuestionSpec::Check,
                Question::Script(s) => QuestionSpec::Script { script: s.clone() },
                Question::Bench(b) => QuestionSpec::Bench {
                    threshold: b.threshold,
                    direction: b.direction,
                    command: b.command.as_ref().map(|c| c.0.clone()),
                    metric: b.command.as_ref().map(|c| c.1.text()),
                    params: b.params.clone(),
                    settings: Settings {
                        device: 0,
                        ..b.settings.clone()
                    },
                    first_attempts: b.first_attempts,
                    max_attempts: b.max_attempts,
                },
            },
            nix: plan.nix,
            timeout_ms: u64::try_from(plan.timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The plan of one job: the recipe parsed again from its text, one worker, GPU 0 (the
    /// one Slurm gave the job).
    pub fn plan(&self) -> Result<Plan, PlanSpecError> {
        let recipe = match &self.recipe {
            None => None,
            Some(RecipeSpec::Fixed { path, text }) => Some(RecipeSource::Fixed(Box::new(
                crate::foundation::recipe::parse_detached(path, text)?,
            ))),
            Some(RecipeSpec::PerCommit { name }) => Some(RecipeSource::PerCommit(name.clone())),
        };
        let question = match &self.question {
            QuestionSpec::Build => Question::Build,
            QuestionSpec::Check => Question::Check,
            QuestionSpec::Script { script } => Question::Script(script.clone()),
            QuestionSpec::Bench {
                threshold,
                direction,
                command,
                metric,
                params,
                settings,
                first_attempts,
                max_attempts,
            } => Question::Bench(BenchQuestion {
                threshold: *threshold,
                direction: *direction,
                command: match (command, metric) {
                    (Some(c), Some(m)) => Some((c.clone(), Metric::parse(m)?)),
                    (None, None) => None,
                    _ => return Err(PlanSpecError::Incomplete),
                },
                params: params.clone(),
                settings: settings.clone(),
                first_attempts: *first_attempts,
                max_attempts: *max_attempts,
            }),
        };
        Ok(Plan {
            recipe,
            paths: self.paths.clone(),
            offline: self.offline,
            question,
            nix: self.nix,
            timeout: Duration::from_millis(self.timeout_ms),
            find_fixed: false,
            jobs: 1,
            keep_going: false,
            devices: vec![0],
            // A job reads no repro.toml: its builds use the node's NVRTC search order.
            pins: Default::default(),
        })
    }
}

/// One step, as a job reads it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JobRequest {
    /// [`SCHEMA`].
    pub schema: u64,
    /// The repository's git directory (on the shared filesystem).
    pub repo: PathBuf,
    /// The store (on the shared filesystem).
    pub store: PathBuf,
    /// The question and the recipe.
    pub plan: PlanSpec,
    /// The commit's position in the range.
    pub index: usize,
    /// The commit.
    pub commit: String,
    /// Bench: the commit to judge against, measured in this job first.
    pub baseline: Option<(usize, String)>,
    /// The newest commit of the range (renames of the recipe's source are followed back
    /// from there).
    pub newest: String,
    /// Where the job writes its [`JobResult`].
    pub result: PathBuf,
}

/// What a job reports: its step, or why it could not evaluate one.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JobResult {
    /// [`SCHEMA`].
    pub schema: u64,
    /// The step record.
    pub step: Option<Step>,
    /// Its samples (the step record's serialisation leaves them out).
    pub samples: Vec<f64>,
    /// Where it ran ("slurm job 12 on node7").
    pub placement: Option<String>,
    /// Why there is no step.
    pub error: Option<JobError>,
}

/// A step's error, carried back from a job.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum JobError {
    /// [`BisectError::Fatal`].
    Fatal {
        /// The commit.
        commit: String,
        /// The cause, with its chain.
        message: String,
    },
    /// [`BisectError::Aborted`].
    Aborted {
        /// The commit.
        commit: String,
        /// How.
        detail: String,
    },
    /// [`BisectError::Input`].
    Input {
        /// What.
        message: String,
        /// What to do.
        hint: String,
    },
    /// Anything else.
    Other {
        /// The message.
        message: String,
    },
}

impl JobError {
    /// The error as the job saw it.
    pub fn of(e: &BisectError) -> Self {
        match e {
            BisectError::Fatal { commit, source } => JobError::Fatal {
                commit: commit.clone(),
                message: crate::foundation::error::chain_text(source),
            },
            BisectError::Aborted { commit, detail } => JobError::Aborted {
                commit: commit.clone(),
                detail: detail.clone(),
            },
            BisectError::Input { message, hint } => JobError::Input {
                message: message.clone(),
                hint: hint.clone(),
            },
            other => JobError::Other {
                message: other.to_string(),
            },
        }
    }

    fn into_error(self, job: &str) -> BisectError {
        match self {
            JobError::Fatal { commit, message } => BisectError::Fatal {
                commit,
                source: StepError::Executor(Box::new(JobFailure::Remote {
                    message,
                    job: job.to_string(),
                })),
            },
            JobError::Aborted { commit, detail } => BisectError::Aborted { commit, detail },
            JobError::Input { message, hint } => BisectError::Input { message, hint },
            JobError::Other { message } => BisectError::Inconsistent(message),
        }
    }
}

/// Why the cluster cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// `srun` is not on the PATH.
    #[error("--executor slurm needs Slurm's `srun`, and it is not on the PATH")]
    NoSrun,
    /// Slurm refused the job options (a partition that does not exist, a GRES no node
    /// has, a malformed time limit).
    #[error("Slurm refuses these job options ({options}): {reason}")]
    Refused {
        /// The options, as given to srun.
        options: String,
        /// What srun said.
        reason: String,
        /// The partitions there are.
        partitions: Vec<String>,
    },
    /// srun could not be asked at all (the controller is down).
    #[error("cannot reach the Slurm controller")]
    Unreachable {
        /// The failure.
        #[source]
        source: ProcessError,
    },
}

/// Why a job's plan cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PlanSpecError {
    /// The recipe's text does not parse.
    #[error(transparent)]
    Recipe(#[from] crate::foundation::recipe::RecipeError),
    /// The metric does not parse.
    #[error(transparent)]
    Metric(#[from] crate::engines::bench::MetricError),
    /// A command bench without its metric, or the reverse.
    #[error("a command bench needs both its command and metric")]
    Incomplete,
}

/// Why a step sent to Slurm has no answer: the cause of its [`BisectError::Fatal`].
#[derive(Debug, thiserror::Error)]
pub enum JobFailure {
    /// The job's request file cannot be written.
    #[error("cannot write the job's request: {error}")]
    Request {
        /// Why.
        error: crate::foundation::fsutil::WriteError,
    },
    /// srun cannot be run.
    #[error("cannot start a Slurm job: {error}")]
    Start {
        /// Why.
        error: ProcessError,
    },
    /// srun ran but no job was allocated.
    #[error("srun did not start the job ({status}): {said}")]
    NotStarted {
        /// How srun ended.
        status: String,
        /// Its error lines.
        said: String,
    },
    /// The job's result has no step.
    #[error("Slurm job {job} reported no step")]
    NoStep {
        /// The job id.
        job: String,
    },
    /// The job answered for a commit it was not asked about.
    #[error("Slurm job {job} answered for another commit ({commit})")]
    OtherCommit {
        /// The job id.
        job: String,
        /// The commit it names.
        commit: String,
    },
    /// The job's result file cannot be read.
    #[error("Slurm job {job} left a bad result: {}: {cause}", path.display())]
    BadResult {
        /// The job id.
        job: String,
        /// The result file.
        path: PathBuf,
        /// What is wrong with it.
        cause: String,
    },
    /// Every job for the step ended without a result.
    #[error("{} Slurm jobs for this step ended without a result ({}){}", .lost.len(), .lost.join(", "), if .tail.is_empty() { String::new() } else { format!("; the last job's log ends: {}", .tail.join(" | ")) })]
    Lost {
        /// Each job and how it ended.
        lost: Vec<String>,
        /// The last lines of the last job's log.
        tail: Vec<String>,
    },
    /// The step failed inside its job.
    #[error("{message} (in Slurm job {job})")]
    Remote {
        /// The job's error, with its chain.
        message: String,
        /// The job id.
        job: String,
    },
}

/// Runs steps as Slurm batch jobs.
pub struct SlurmExecutor {
    /// Answers steps the store already knows, so that no job is submitted for them.
    known: super::local::LocalExecutor,
    repo: PathBuf,
    store: Store,
    spec: PlanSpec,
    width: usize,
    newest: Oid,
    opts: SlurmOptions,
    /// The job name every job of this bisection carries: what Ctrl-C cancels.
    name: String,
    /// Requests, results and job logs.
    dir: crate::foundation::scratch::Scratch,
}

impl SlurmExecutor {
    /// Checks that Slurm is there and accepts the job options (`srun --test-only`), and
    /// makes an executor that runs `plan`'s steps as jobs, `plan.jobs` at once.
    pub fn new(
        repo: &git2::Repository,
        store: Store,
        plan: &Plan,
        newest: Oid,
        opts: SlurmOptions,
    ) -> Result<Self, SlurmError> {
        let test = Cmd::new("srun")
            .arg("--test-only")
            .args(Self::job_options(&opts))
            .arg("true")
            .timeout(Duration::from_secs(60));
        match test.output() {
            Err(ProcessError::NotFound { .. }) => return Err(SlurmError::NoSrun),
            Err(source) => return Err(SlurmError::Unreachable { source }),
            Ok(o) if !o.status.success() => {
                let reason = o
                    .stderr_str()
                    .lines()
                    .map(|l| l.trim_start_matches("srun: error: ").trim())
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ");
                let partitions = Cmd::new("sinfo")
                    .args(["-h", "-o", "%R"])
                    .timeout(Duration::from_secs(30))
                    .run()
                    .map(|o| {
                        let mut v: Vec<String> =
                            o.stdout_str().lines().map(str::to_string).collect();
                        v.sort();
                        v.dedup();
                        v
                    })
                    .unwrap_or_default();
                return Err(SlurmError::Refused {
                    options: Self::job_options(&opts).join(" "),
                    reason,
                    partitions,
                });
            }
            Ok(_) => {}
        }
        let dir = store
            .scratch_dir("slurm")
            .map_err(|e| SlurmError::Unreachable {
                source: ProcessError::Io {
                    argv: format!("mkdir in {}", store.scratch().display()),
                    source: e,
                },
            })?;
        let token = keys_token(dir.path());
        let name = format!("repro-bisect-{token}");
        // Ctrl-C, SIGTERM or SIGKILL of repro: the process guardian cancels the jobs.
        crate::foundation::process::cancel_slurm_jobs_on_exit(&name);
        Ok(SlurmExecutor {
            known: super::local::LocalExecutor::new(repo, store.clone(), plan, newest),
            repo: repo.path().to_path_buf(),
            store,
            spec: PlanSpec::of(plan),
            width: plan.jobs.max(1),
            newest,
            opts,
            name,
            dir,
        })
    }

    fn job_options(opts: &SlurmOptions) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(p) = &opts.partition {
            v.push(format!("--partition={p}"));
        }
        if !opts.gres.is_empty() {
            v.push(format!("--gres={}", opts.gres));
        }
        if let Some(t) = &opts.time_limit {
            v.push(format!("--time={t}"));
        }
        if let Some(a) = &opts.account {
            v.push(format!("--account={a}"));
        }
        v
    }

    /// The job's final state as the controller remembers it ("CANCELLED", "TIMEOUT",
    /// ...), waiting a few seconds for a job that is still completing.
    fn job_state(job: &str) -> String {
        let mut state = Self::job_state_now(job);
        for _ in 0..20 {
            if !matches!(
                state.as_str(),
                "COMPLETING" | "RUNNING" | "CONFIGURING" | "PENDING" | "STAGE_OUT"
            ) {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
            state = Self::job_state_now(job);
        }
        state
    }

    fn job_state_now(job: &str) -> String {
        Cmd::new("scontrol")
            .args(["show", "job", job])
            .timeout(Duration::from_secs(30))
            .run()
            .ok()
            .and_then(|o| {
                o.stdout_str()
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("JobState=").map(str::to_string))
            })
            .unwrap_or_else(|| "unknown".into())
    }

    fn read_result(path: &Path, job: &str) -> Result<Option<JobResult>, JobFailure> {
        let bad = |cause: String| JobFailure::BadResult {
            job: job.to_string(),
            path: path.to_path_buf(),
            cause,
        };
        // The result lies in the store's scratch space, which other hosts write: only a
        // regular file of bounded size is read (a FIFO there would block the driver).
        match crate::foundation::fsutil::read_regular(path, MAX_BYTES) {
            Ok(bytes) => serde_json::from_slice::<JobResult>(&bytes)
                .map(Some)
                .map_err(|e| bad(e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(bad(e.to_string())),
        }
    }
}

/// The job id in `srun -v`'s messages ("srun: jobid 107: nodes(1)...", "srun: job 107
/// queued and waiting for resources").
fn job_id(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|l| {
        let rest = l
            .strip_prefix("srun: jobid ")
            .or_else(|| l.strip_prefix("srun: job "))?;
        let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (!id.is_empty()).then_some(id)
    })
}

/// A short token naming this bisection's jobs: the scratch directory's unique suffix.
fn keys_token(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::foundation::keys::sha256_hex(name.as_bytes())[..12].to_string()
}

impl Drop for SlurmExecutor {
    fn drop(&mut self) {
        // Nothing of this bisection may keep running on the cluster (a step stopped by an
        // error elsewhere); cancelling finished jobs does nothing.
        let _ = Cmd::new("scancel")
            .arg(format!("--name={}", self.name))
            .timeout(Duration::from_secs(30))
            .output();
    }
}

impl Executor for SlurmExecutor {
    fn width(&self) -> usize {
        self.width
    }

    fn run(
        &self,
        req: &StepRequest,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Step, BisectError> {
        let short = crate::foundation::git::short(req.commit);
        let fatal = |f: JobFailure| BisectError::Fatal {
            commit: short.clone(),
            source: StepError::Executor(Box::new(f)),
        };
        if let Some(step) = self.known.stored(req)? {
            events(Event::Step(&step));
            return Ok(step);
        }
        let mut lost: Vec<String> = Vec::new();
        let mut last_log: Option<PathBuf> = None;
        for attempt in 0..=self.opts.retries {
            let tag = format!("{}-{}-{attempt}", req.index, &req.commit.to_string()[..12]);
            let request_path = self.dir.path().join(format!("{tag}.request.json"));
            let result_path = self.dir.path().join(format!("{tag}.result.json"));
            let log_path = self.dir.path().join(format!("{tag}.log"));
            last_log = Some(log_path.clone());
            let request = JobRequest {
                schema: SCHEMA,
                repo: self.repo.clone(),
                store: self.store.root().to_path_buf(),
                plan: self.spec.clone(),
                index: req.index,
                commit: req.commit.to_string(),
                baseline: req.baseline.map(|(i, c)| (i, c.to_string())),
                newest: self.newest.to_string(),
                result: result_path.clone(),
            };
            let text = serde_json::to_vec_pretty(&request).expect("a request serialises");
            crate::foundation::fsutil::write_atomic(&request_path, &text, true)
                .map_err(|error| fatal(JobFailure::Request { error }))?;
            // srun returns as soon as the job ends (sbatch --wait polls every few seconds,
            // longer than many steps take); -v makes it say the job's id.
            let out = Cmd::new("srun")
                .args(["-v", "--ntasks=1"])
                .arg(format!("--job-name={}", self.name))
                .arg(format!("--chdir={}", self.dir.path().display()))
                .args(Self::job_options(&self.opts))
                .arg(&self.opts.repro)
                .arg("--store")
                .arg(self.store.root())
                .arg("bisect-step")
                .arg(&request_path)
                .output()
                .map_err(|error| fatal(JobFailure::Start { error }))?;
            let mut log = out.stdout.clone();
            log.extend_from_slice(&out.stderr);
            let _ = std::fs::write(&log_path, &log);
            let job = job_id(&out.stderr_str());
            let Some(job) = job else {
                // Not even allocated: the options or the controller; retrying will not help.
                let stderr = out.stderr_str();
                let said: Vec<&str> = stderr
                    .lines()
                    .filter(|l| l.contains("error"))
                    .map(str::trim)
                    .collect();
                return Err(fatal(JobFailure::NotStarted {
                    status: crate::foundation::process::describe_status(out.status),
                    said: said.join("; "),
                }));
            };
            match Self::read_result(&result_path, &job) {
                Ok(Some(r)) => {
                    if let Some(e) = r.error {
                        return Err(e.into_error(&job));
                    }
                    let Some(mut step) = r.step else {
                        return Err(fatal(JobFailure::NoStep { job }));
                    };
                    if step.index != req.index || step.commit != req.commit.to_string() {
                        return Err(fatal(JobFailure::OtherCommit {
                            job,
                            commit: step.commit,
                        }));
                    }
                    step.placement = r.placement;
                    if let Some(place) = &step.placement {
                        step.by_place.insert(place.clone(), r.samples.clone());
                    }
                    step.samples = r.samples;
                    if !lost.is_empty() {
                        let note = format!("after {} lost jobs", lost.len());
                        step.note = Some(match step.note.take() {
                            Some(n) => format!("{n}; {note}"),
                            None => note,
                        });
                    }
                    events(Event::Step(&step));
                    return Ok(step);
                }
                Ok(None) => {}
                Err(e) => return Err(fatal(e)),
            }
            // No result: the job was preempted, cancelled, ran out of time or lost its node.
            let state = Self::job_state(&job);
            lost.push(format!("job {job} {state}"));
            if attempt < self.opts.retries {
                events(Event::Status(&format!(
                    "Slurm job {job} for {short} ended {state} without a result; resubmitting ({} of {})",
                    attempt + 1,
                    self.opts.retries
                )));
            }
        }
        let log = last_log
            .and_then(|p| crate::foundation::fsutil::read_regular(&p, 64 << 20).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let mut tail: Vec<String> = log.lines().rev().take(5).map(str::to_string).collect();
        tail.reverse();
        Err(fatal(JobFailure::Lost { lost, tail }))
    }

    fn subject(&self, commit: Oid) -> String {
        git2::Repository::open(&self.repo)
            .ok()
            .and_then(|r| crate::foundation::git::subject(&r, commit).ok())
            .unwrap_or_default()
    }
}

impl Diagnose for SlurmError {
    fn exit_code(&self) -> u8 {
        match self {
            SlurmError::Refused { .. } => exit::USAGE,
            SlurmError::NoSrun | SlurmError::Unreachable { .. } => exit::ENVIRONMENT,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            SlurmError::NoSrun => "run it where Slurm's client commands (srun, scancel, sinfo, scontrol) are installed, such as a login node, or use --executor local".into(),
            SlurmError::Refused { partitions, .. } if partitions.is_empty() => {
                "check --partition, --gres, --time-limit and --account against `sinfo`".into()
            }
            SlurmError::Refused { partitions, .. } => format!(
                "the partitions here are: {}; check --gres, --time-limit and --account against `sinfo`",
                partitions.join(", ")
            ),
            SlurmError::Unreachable { .. } => "check that slurmctld is up (`sinfo`)".into(),
        })
    }
}
