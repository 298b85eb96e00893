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

pub mod accounting;
pub mod detach;
pub mod probe;
pub mod site;

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

/// How long a job that has ended may take to show as ended in the cluster's answers
/// (its epilog, accounting's lag), the commands that ask included (each given at least
/// a second).
const SETTLE_WAIT: Duration = Duration::from_secs(15);

/// How the jobs are submitted.
#[derive(Clone, Debug)]
pub struct SlurmOptions {
    /// `--partition`, or the cluster's default.
    pub partition: Option<String>,
    /// `--gres` per job (`gpu:h100:1`); empty for none; `None` for the site option's, or
    /// else `gpu:1`.
    pub gres: Option<String>,
    /// The site's options (`[slurm] options`, then `--slurm-opt`), each validated.
    pub site: Vec<String>,
    /// Variables jobs get besides repro's list.
    pub export: Vec<String>,
    /// `--time` per job, in Slurm's syntax (`30`, `1:00:00`).
    pub time_limit: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// Submissions of one step after the first, for jobs that end without a result.
    pub retries: usize,
    /// Run each step as a job step of the allocation repro runs in (`--slurm-steps`),
    /// instead of as a job of its own.
    pub steps: bool,
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
    /// The project's `[toolchain]` table: a job's builds resolve their compiler from the
    /// same pins as the bisection's (the node reads no repro.toml).
    #[serde(default)]
    toolchains: crate::foundation::config::Toolchains,
    /// The project the pins belong to.
    #[serde(default)]
    project: Option<PathBuf>,
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
            toolchains: plan.pins.table.clone(),
            project: plan.pins.project.clone(),
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
            pins: crate::engines::toolchain::Pins {
                table: self.toolchains.clone(),
                project: self.project.clone(),
            },
            // A node finds its interpreter itself (repro.toml, VIRTUAL_ENV, python3).
            python: None,
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
        /// The GRES the nodes have.
        gres: Vec<String>,
    },
    /// `--slurm-steps` outside an allocation.
    #[error(
        "--slurm-steps runs each step as a job step of the allocation repro runs in, and repro runs in none (SLURM_JOB_ID is not set)"
    )]
    NoAllocation,
    /// The allocation repro runs in lacks the GPUs each step asks for.
    #[error("allocation {job} holds {held}; steps asking for --gres={gres} cannot run in it")]
    AllocationGres {
        /// The allocation.
        job: String,
        /// What a step asks for.
        gres: String,
        /// What it holds.
        held: String,
    },
    /// `--time-limit` is not in Slurm's syntax.
    #[error("--time-limit `{given}` is not a Slurm time limit")]
    BadTime {
        /// What was given.
        given: String,
        /// The limit repro would derive.
        derived: String,
    },
    /// `--time-limit` is shorter than a step's `--timeout` (plus start-up): a hanging step
    /// would be killed by Slurm before its own timeout judged it.
    #[error("--time-limit {given} is shorter than a step needs: its --timeout is {}, so a job needs at least {shortest}", humantime::format_duration(*.timeout))]
    TimeLimit {
        /// What was given.
        given: String,
        /// The step's timeout.
        timeout: Duration,
        /// The shortest limit accepted.
        shortest: String,
        /// The limit repro would derive.
        derived: String,
    },
    /// A node cannot see (or use) a path the steps need.
    #[error("the probe job{} on node {node} cannot use the {what} {}{}", .job.as_ref().map(|j| format!(" {j}")).unwrap_or_default(), .path.display(), .why.as_ref().map(|w| format!(": {w}")).unwrap_or_default())]
    NodeCannotUse {
        /// The probe's job id.
        job: Option<String>,
        /// The node.
        node: String,
        /// What the path is.
        what: String,
        /// The path.
        path: PathBuf,
        /// Why, as the node said.
        why: Option<String>,
    },
    /// The probe job ended without saying what it found.
    #[error("the probe job{} ended without an answer ({status}){}", .job.as_ref().map(|j| format!(" {j}")).unwrap_or_default(), if .said.is_empty() { String::new() } else { format!(": {}", .said) })]
    ProbeFailed {
        /// The probe's job id.
        job: Option<String>,
        /// How srun ended.
        status: String,
        /// The last lines it printed.
        said: String,
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
    /// The job reached its time or memory limit: the limit is too tight for the step, and
    /// another submission would reach it again.
    #[error(
        "Slurm job {job} ended {state} before its step did (it was submitted with {options}); raise the limit (--time-limit, or --slurm-opt=--mem=...) or lower --timeout"
    )]
    Exceeded {
        /// The job id.
        job: String,
        /// TIMEOUT, OUT_OF_MEMORY or DEADLINE.
        state: String,
        /// The options it was submitted with.
        options: String,
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
    /// The options every job is submitted with.
    args: Vec<String>,
    /// Jobs of their own, or steps of the enclosing allocation.
    placement: site::Placement,
    /// The variables jobs get.
    export: Vec<String>,
    /// What each job ended so far cost.
    jobs: std::sync::Mutex<Vec<crate::foundation::records::JobUsage>>,
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
        let args = Self::job_options(&opts, plan)?;
        let export = site::export_list(&opts.export);
        let placement = match (opts.steps, site::enclosing_job()) {
            (true, None) => return Err(SlurmError::NoAllocation),
            (true, Some(job)) => {
                Self::check_allocation(&job, &Self::gres(&args))?;
                site::Placement::Steps { job }
            }
            (false, inside) => {
                Self::test_options(&args)?;
                site::Placement::Jobs { inside }
            }
        };
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
        let probe = Self::probe(
            &placement,
            &args,
            &name,
            repo,
            &store,
            dir.path(),
            &opts.repro,
        )?;
        let jobs = probe
            .and_then(|j| Self::settled(&j).usage)
            .into_iter()
            .collect();
        Ok(SlurmExecutor {
            known: super::local::LocalExecutor::new(repo, store.clone(), plan, newest),
            repo: repo.path().to_path_buf(),
            store,
            spec: PlanSpec::of(plan),
            width: plan.jobs.max(1),
            newest,
            opts,
            export,
            jobs: std::sync::Mutex::new(jobs),
            args,
            placement,
            name,
            dir,
        })
    }

    /// Runs the probe job (see [`probe`]) on a node the steps could get, with their
    /// options, and turns what it found into an error naming the path.
    fn probe(
        placement: &site::Placement,
        args: &[String],
        name: &str,
        repo: &git2::Repository,
        store: &Store,
        dir: &Path,
        repro: &Path,
    ) -> Result<Option<String>, SlurmError> {
        let arg = |what: &str, p: &Path| format!("{what}={}", p.display());
        let out = Self::srun(placement)
            .args(["-v", "--ntasks=1"])
            .arg(format!("--job-name={name}"))
            .arg(format!("--export={}", site::export_list(&[]).join(",")))
            .args(Self::placed_args(placement, args))
            .args(["sh", "-c", probe::SCRIPT, "sh"])
            .arg(repro)
            .arg(store.root())
            .arg(dir)
            .arg(repo.path())
            .args([
                arg("repository", repo.path()),
                arg("store", store.root()),
                arg("scratch directory", dir),
                arg("repro binary", repro),
            ])
            .timeout(Duration::from_secs(3600))
            .output()
            .map_err(|source| match source {
                ProcessError::NotFound { .. } => SlurmError::NoSrun,
                source => SlurmError::Unreachable { source },
            })?;
        let stdout = out.stdout_str();
        let job = job_id(&out.stderr_str());
        match probe::finding(&stdout) {
            probe::Finding::Ok => Ok(job),
            probe::Finding::Path { what, path, why } => Err(SlurmError::NodeCannotUse {
                job,
                node: probe::node(&stdout).unwrap_or_else(|| "?".into()),
                what,
                path,
                why,
            }),
            probe::Finding::Silent => {
                let text = format!("{stdout}{}", out.stderr_str());
                let mut tail: Vec<&str> = text.lines().rev().take(4).collect();
                tail.reverse();
                Err(SlurmError::ProbeFailed {
                    job,
                    status: crate::foundation::process::describe_status(out.status),
                    said: tail.join(" | "),
                })
            }
        }
    }

    /// The job options as `placement` takes them: a job step belongs to its allocation's
    /// partition, account and QOS.
    fn placed_args<'a>(
        placement: &'a site::Placement,
        args: &'a [String],
    ) -> impl Iterator<Item = &'a String> + 'a {
        args.iter().filter(move |a| match placement {
            site::Placement::Steps { .. } => !["--partition=", "--account=", "--qos="]
                .iter()
                .any(|p| a.starts_with(p)),
            site::Placement::Jobs { .. } => true,
        })
    }

    /// Checks the options as [`SlurmExecutor::new`] does, without the probe and without
    /// submitting anything: for a detached bisection, whose driver job makes the executor.
    /// Returns the job options and the export list.
    pub fn check(
        opts: &SlurmOptions,
        plan: &Plan,
    ) -> Result<(Vec<String>, Vec<String>), SlurmError> {
        let args = Self::job_options(opts, plan)?;
        match (opts.steps, site::enclosing_job()) {
            (true, None) => return Err(SlurmError::NoAllocation),
            (true, Some(job)) => Self::check_allocation(&job, &Self::gres(&args))?,
            (false, _) => Self::test_options(&args)?,
        }
        Ok((args, site::export_list(&opts.export)))
    }

    /// Where the steps run, as the plan line and the record say it.
    pub fn placement(&self) -> &site::Placement {
        &self.placement
    }

    /// The options each job is submitted with (the time limit derived or given included).
    pub fn job_args(&self) -> &[String] {
        &self.args
    }

    /// `srun` as this executor runs it: for jobs of their own, without the variables of
    /// an allocation repro may itself run in (they would make each job a step of it, or
    /// change what it asks for).
    fn srun(placement: &site::Placement) -> Cmd {
        let mut cmd = Cmd::new("srun");
        if matches!(placement, site::Placement::Jobs { .. }) {
            for k in site::inherited_job_vars() {
                cmd = cmd.env_remove(k);
            }
        }
        cmd
    }

    /// Asks the controller whether it would run a job with `args` (`srun --test-only`), as
    /// a job of its own: an unknown partition or GRES, a limit above the partition's.
    fn test_options(args: &[String]) -> Result<(), SlurmError> {
        let test = Self::srun(&site::Placement::Jobs { inside: None })
            .arg("--test-only")
            .args(args)
            .arg("true")
            .timeout(Duration::from_secs(60));
        let o = match test.output() {
            Err(ProcessError::NotFound { .. }) => return Err(SlurmError::NoSrun),
            Err(source) => return Err(SlurmError::Unreachable { source }),
            Ok(o) if o.status.success() => return Ok(()),
            Ok(o) => o,
        };
        let reason = o
            .stderr_str()
            .lines()
            .map(|l| l.trim_start_matches("srun: error: ").trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        let sinfo = |format: &str| {
            Cmd::new("sinfo")
                .args(["-h", "-o", format])
                .timeout(Duration::from_secs(30))
                .run()
                .map(|o| {
                    let mut v: Vec<String> = o
                        .stdout_str()
                        .lines()
                        .map(|l| l.trim().to_string())
                        .filter(|l| !l.is_empty() && l != "(null)")
                        .collect();
                    v.sort();
                    v.dedup();
                    v
                })
                .unwrap_or_default()
        };
        Err(SlurmError::Refused {
            options: args.join(" "),
            reason,
            partitions: sinfo("%R"),
            gres: sinfo("%G"),
        })
    }

    /// Steps of an allocation get only what it holds: a GPU it does not have would leave
    /// every step waiting or failing.
    fn check_allocation(job: &str, gres: &str) -> Result<(), SlurmError> {
        let Some((kind, asked)) = site::gpus_asked(gres) else {
            return Ok(());
        };
        let shown = match Cmd::new("scontrol")
            .args(["-o", "show", "job", job])
            .timeout(Duration::from_secs(30))
            .run()
        {
            Ok(o) => o.stdout_str(),
            Err(ProcessError::NotFound { .. }) => return Err(SlurmError::NoSrun),
            Err(source) => return Err(SlurmError::Unreachable { source }),
        };
        let (total, typed) = site::gpus_held(&shown);
        let held = match &kind {
            Some(t) => typed.iter().find(|(k, _)| k == t).map_or(0, |(_, n)| *n),
            None => total,
        };
        if held < asked {
            return Err(SlurmError::AllocationGres {
                job: job.to_string(),
                gres: gres.to_string(),
                held: if typed.is_empty() {
                    format!("{total} GPUs")
                } else {
                    format!(
                        "{total} GPUs ({})",
                        typed
                            .iter()
                            .map(|(t, n)| format!("{n} {t}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            });
        }
        Ok(())
    }

    /// The options every job of `plan` is submitted with. The time limit is the one given
    /// (refused when a hanging step would meet it before its own `--timeout`), or derived
    /// from the step's timeouts.
    fn job_options(opts: &SlurmOptions, plan: &Plan) -> Result<Vec<String>, SlurmError> {
        let mut v = Vec::new();
        let mut dedicated = vec!["time"];
        if let Some(p) = &opts.partition {
            v.push(format!("--partition={p}"));
            dedicated.push("partition");
        }
        let site_gres = opts.site.iter().any(|o| site::option_name(o) == "gres");
        match &opts.gres {
            Some(g) => {
                dedicated.push("gres");
                if !g.is_empty() {
                    v.push(format!("--gres={g}"));
                }
            }
            None if site_gres => {}
            None => v.push("--gres=gpu:1".into()),
        }
        if opts.account.is_some() {
            dedicated.push("account");
        }
        match &opts.time_limit {
            Some(t) => {
                let given = site::parse_time(t).map_err(|e| SlurmError::BadTime {
                    given: e.given,
                    derived: site::minutes_arg(site::derived_limit(plan)),
                })?;
                let shortest = site::shortest_limit(plan);
                if given.is_some_and(|g| g < shortest) {
                    return Err(SlurmError::TimeLimit {
                        given: t.clone(),
                        timeout: plan.timeout,
                        shortest: site::minutes_arg(shortest),
                        derived: site::minutes_arg(site::derived_limit(plan)),
                    });
                }
                v.push(format!("--time={t}"));
            }
            None => v.push(site::minutes_arg(site::derived_limit(plan))),
        }
        if let Some(a) = &opts.account {
            v.push(format!("--account={a}"));
        }
        v.extend(site::merge_options(&opts.site, &dedicated));
        Ok(v)
    }

    /// The GRES each job asks for, as submitted.
    fn gres(args: &[String]) -> String {
        args.iter()
            .rev()
            .find_map(|a| a.strip_prefix("--gres="))
            .unwrap_or("")
            .to_string()
    }

    /// The `--export=` option of every job.
    fn export_arg(&self) -> String {
        format!("--export={}", self.export.join(","))
    }

    /// The variables each job gets (names), as submitted.
    pub fn exported(&self) -> &[String] {
        &self.export
    }

    /// How the job ended and what it cost (see [`accounting::prefer_ended`]), waiting up
    /// to [`SETTLE_WAIT`] for a job that is still completing (its epilog runs) or that
    /// neither source has seen end yet; the usage is kept for the bisection's totals. A step
    /// of the enclosing allocation (`--slurm-steps`) has no job of its own to ask about:
    /// `job` is the allocation's, running until the bisection ends.
    fn job_facts(&self, job: &str) -> accounting::JobFacts {
        if matches!(self.placement, site::Placement::Steps { .. }) {
            return accounting::JobFacts {
                state: "unknown".into(),
                usage: None,
            };
        }
        let facts = Self::settled(job);
        if let Some(u) = &facts.usage {
            self.jobs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(u.clone());
        }
        facts
    }

    fn settled(job: &str) -> accounting::JobFacts {
        let unknown = || accounting::JobFacts {
            state: "unknown".into(),
            usage: None,
        };
        // The job is over when this is asked (its srun returned): an unfinished state is
        // the cluster catching up, which costs nothing where it has already. The wait,
        // commands included, ends at the deadline.
        let deadline = std::time::Instant::now() + SETTLE_WAIT;
        let mut facts = accounting::facts(job, deadline).unwrap_or_else(unknown);
        while !facts.ended()
            && deadline.saturating_duration_since(std::time::Instant::now())
                > Duration::from_millis(250)
        {
            std::thread::sleep(Duration::from_millis(250));
            facts = accounting::facts(job, deadline).unwrap_or_else(unknown);
        }
        facts
    }

    /// What every job of this bisection cost so far (the probe's, the steps', the lost
    /// ones'), where the cluster said.
    pub fn usage(&self) -> Option<crate::foundation::records::ClusterUsage> {
        let jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        crate::foundation::records::ClusterUsage::of(jobs.iter())
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
            let result_path = self.dir.path().join(format!("{tag}.result.json"));
            let log_path = self.dir.path().join(format!("{tag}.log"));
            last_log = Some(log_path.clone());
            let job = self.submit(req, &tag, &result_path, &log_path, &fatal)?;
            match Self::read_result(&result_path, &job) {
                Ok(Some(r)) => {
                    let step = self.accept(req, r, job, &lost, &fatal)?;
                    events(Event::Step(&step));
                    return Ok(step);
                }
                Ok(None) => {}
                Err(e) => return Err(fatal(e)),
            }
            // No result: the job was preempted, cancelled or lost its node, and is submitted
            // again; or it reached a limit of its own (time, memory), which another
            // submission would reach again: the step's own timeout lies below the time
            // limit, so only a limit set too tight gets here.
            let state = self.job_facts(&job).state;
            if matches!(state.as_str(), "TIMEOUT" | "OUT_OF_MEMORY" | "DEADLINE") {
                return Err(fatal(JobFailure::Exceeded {
                    job,
                    state,
                    options: self.args.join(" "),
                }));
            }
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

impl SlurmExecutor {
    /// Writes a step's request and runs its job with srun: the job's id.
    fn submit(
        &self,
        req: &StepRequest,
        tag: &str,
        result_path: &Path,
        log_path: &Path,
        fatal: &dyn Fn(JobFailure) -> BisectError,
    ) -> Result<String, BisectError> {
        let request_path = self.dir.path().join(format!("{tag}.request.json"));
        let request = JobRequest {
            schema: SCHEMA,
            repo: self.repo.clone(),
            store: self.store.root().to_path_buf(),
            plan: self.spec.clone(),
            index: req.index,
            commit: req.commit.to_string(),
            baseline: req.baseline.map(|(i, c)| (i, c.to_string())),
            newest: self.newest.to_string(),
            result: result_path.to_path_buf(),
        };
        let text = serde_json::to_vec_pretty(&request).expect("a request serialises");
        crate::foundation::fsutil::write_atomic(&request_path, &text, true)
            .map_err(|error| fatal(JobFailure::Request { error }))?;
        // srun returns as soon as the job ends (sbatch --wait polls every few seconds,
        // longer than many steps take); -v makes it say the job's id.
        let out = Self::srun(&self.placement)
            .args(["-v", "--ntasks=1"])
            .args(match self.placement {
                // A step takes only its share of the allocation, so that several
                // run side by side.
                site::Placement::Steps { .. } => &["--exact"][..],
                site::Placement::Jobs { .. } => &[][..],
            })
            .arg(format!("--job-name={}", self.name))
            .arg(format!("--chdir={}", self.dir.path().display()))
            .arg(self.export_arg())
            .args(self.args.iter().filter(|a| {
                match self.placement {
                    // A step belongs to its allocation's partition, account and QOS.
                    site::Placement::Steps { .. } => !["--partition=", "--account=", "--qos="]
                        .iter()
                        .any(|p| a.starts_with(p)),
                    site::Placement::Jobs { .. } => true,
                }
            }))
            .arg(&self.opts.repro)
            .arg("--store")
            .arg(self.store.root())
            .arg("bisect-step")
            .arg(&request_path)
            .output()
            .map_err(|error| fatal(JobFailure::Start { error }))?;
        let mut log = out.stdout.clone();
        log.extend_from_slice(&out.stderr);
        let _ = std::fs::write(log_path, &log);
        let Some(job) = job_id(&out.stderr_str()) else {
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
        Ok(job)
    }

    /// A job's result, checked against its request, as the step.
    fn accept(
        &self,
        req: &StepRequest,
        r: JobResult,
        job: String,
        lost: &[String],
        fatal: &dyn Fn(JobFailure) -> BisectError,
    ) -> Result<Step, BisectError> {
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
        step.job = self.job_facts(&job).usage;
        if !lost.is_empty() {
            let note = format!("after {} lost jobs", lost.len());
            step.note = Some(match step.note.take() {
                Some(n) => format!("{n}; {note}"),
                None => note,
            });
        }
        Ok(step)
    }
}

impl Diagnose for SlurmError {
    fn exit_code(&self) -> u8 {
        match self {
            SlurmError::Refused { .. }
            | SlurmError::NoAllocation
            | SlurmError::AllocationGres { .. }
            | SlurmError::BadTime { .. }
            | SlurmError::TimeLimit { .. } => exit::USAGE,
            SlurmError::NoSrun
            | SlurmError::Unreachable { .. }
            | SlurmError::NodeCannotUse { .. }
            | SlurmError::ProbeFailed { .. } => exit::ENVIRONMENT,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            SlurmError::NoSrun => "run it where Slurm's client commands (srun, scancel, sinfo, scontrol) are installed, such as a login node, or use --executor local".into(),
            SlurmError::Refused { partitions, gres, .. } => {
                let mut h = String::new();
                if !partitions.is_empty() {
                    h.push_str(&format!("the partitions here are: {}; ", partitions.join(", ")));
                }
                if !gres.is_empty() {
                    h.push_str(&format!("the nodes' GRES are: {}; ", gres.join(", ")));
                }
                h.push_str("check --partition, --gres, --time-limit, --account and --slurm-opt against `sinfo`");
                h
            }
            SlurmError::NodeCannotUse { what, .. } if what == "lock" => "the store's file system refuses locks on the nodes: put the store (--store) on a file system that locks (NFS with its lock manager; Lustre mounted with -o flock)".into(),
            SlurmError::NodeCannotUse { .. } => "the repository, the store (--store) and repro itself must be on a file system the nodes mount at the same path, such as your home or a project directory; the login node's /tmp is not".into(),
            SlurmError::ProbeFailed { .. } => "run the probe's command by hand on a node (srun --pty bash) to see why; the job's options may need a --slurm-opt the site requires".into(),
            SlurmError::NoAllocation => "leave out --slurm-steps (each step is then a job of its own), or run repro inside `salloc`/`sbatch`".into(),
            SlurmError::AllocationGres { .. } => "ask the allocation for the GPUs (sbatch --gres=gpu:N), or leave out --slurm-steps so that each step is a job of its own".into(),
            SlurmError::Unreachable { .. } => "check that slurmctld is up (`sinfo`)".into(),
            SlurmError::BadTime { derived, .. } => format!(
                "give minutes (30), HH:MM:SS or D-HH:MM:SS, or leave it out: repro derives {derived} from --timeout"
            ),
            SlurmError::TimeLimit { derived, .. } => format!(
                "leave --time-limit out (repro derives {derived} from --timeout), or lower --timeout"
            ),
        })
    }
}

#[cfg(test)]
mod plan_spec_tests {
    use super::*;

    /// A job's plan carries the project's toolchain pins through its JSON, so a step on a
    /// node resolves the same compiler as a local step (earlier, the pins were dropped and
    /// the node searched for whatever nvcc it had).
    #[test]
    fn a_job_plan_carries_the_pins() {
        let toolchains: crate::foundation::config::Toolchains = toml::from_str(&format!(
            "nvcc-default = \"13.0\"\n[nvcc.\"13.0\"]\nwheels = [{{ package = \"nvidia-cuda-nvcc\", version = \"13.0.88\", sha256 = {{ x86_64 = \"{}\" }} }}]\n",
            "a".repeat(64)
        ))
        .unwrap();
        let plan = Plan {
            recipe: None,
            paths: Vec::new(),
            offline: true,
            question: Question::Build,
            nix: false,
            timeout: Duration::from_secs(1),
            find_fixed: false,
            jobs: 1,
            keep_going: false,
            devices: vec![0],
            pins: crate::engines::toolchain::Pins {
                table: toolchains.clone(),
                project: Some(PathBuf::from("/shared/project")),
            },
            python: None,
        };
        let text = serde_json::to_string(&PlanSpec::of(&plan)).unwrap();
        let back: PlanSpec = serde_json::from_str(&text).unwrap();
        let job = back.plan().unwrap();
        assert_eq!(job.pins, plan.pins);
        assert!(job.offline);
        assert_eq!(job.pins.table.nvcc_default.as_deref(), Some("13.0"));
    }
}
