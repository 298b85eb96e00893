//! `repro bisect`: find the first commit whose build breaks, whose check fails, whose
//! benchmark got slower, or for which a script fails, without touching the working tree.

use std::time::Duration;

use anyhow::Context as _;

use serde_json::json;

use crate::app::bench::{fmt_value, parse_fraction};
use crate::app::context::{Globals, emit, emit_json};
use crate::engines::bench::Metric;
use crate::engines::bisect::decide::Direction;
use crate::engines::bisect::history;
use crate::engines::bisect::run::{self, BenchQuestion, Plan, Question, RecipeSource};
use crate::engines::bisect::search::Outcome;
use crate::engines::bisect::slurm::{SlurmExecutor, SlurmOptions, detach};
use crate::engines::toolchain::install::Family;
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::git::{self, GitError};
use crate::foundation::keys;
use crate::foundation::output::{Style, Table};
use crate::foundation::records;
use crate::foundation::records::Settings;
use std::path::PathBuf;

/// What the search looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The first commit whose build fails.
    Build,
    /// The first commit whose build or correctness check fails (needs a GPU).
    Check,
    /// The first commit whose benchmark is worse than the good end's by --threshold.
    Bench,
}

/// Where the steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    /// On this machine (its GPUs: --devices).
    Local,
    /// As Slurm jobs with one GPU each (srun); the store must be on a filesystem the nodes
    /// share.
    Slurm,
}

/// Which transition to find.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Find {
    /// The first commit that broke it (the good end is older).
    Broken,
    /// The first commit that fixed it (the bad end is older).
    Fixed,
}

/// Arguments of `repro bisect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A commit where all is well (the older end, or with --find fixed the newer). Needed,
    /// with --bad, unless --toolchains is given (checked by `run`, whose message says both
    /// ways to ask).
    #[arg(long, value_name = "REV", value_parser = crate::app::context::non_empty())]
    good: Option<String>,
    /// A commit where it is broken (the newer end, or with --find fixed the older).
    #[arg(long, value_name = "REV", value_parser = crate::app::context::non_empty())]
    bad: Option<String>,
    /// Hold the commit fixed and search compiler releases instead: FROM..TO, e.g.
    /// nvrtc@12.8.93..nvrtc@13.0.88 (NVRTC wheels) or nvcc@12.9..nvcc@13.0 (pinned releases).
    #[arg(long, value_name = "RANGE", conflicts_with_all = ["good", "bad", "script", "command"], requires = "recipe", value_parser = crate::app::context::non_empty())]
    toolchains: Option<String>,
    /// With --toolchains: fetch wheels from this directory only (or REPRO_WHEELHOUSE).
    #[arg(long, value_name = "DIR", requires = "toolchains", value_parser = crate::app::context::non_empty_path())]
    wheels: Option<std::path::PathBuf>,
    /// The recipe to build, check or benchmark: a name (recipes/NAME.toml in the working
    /// tree) or a path; read once, committed or not, and applied to every commit.
    #[arg(long, value_name = "NAME|PATH", conflicts_with = "script", value_parser = crate::app::context::non_empty())]
    recipe: Option<String>,
    /// Read the recipe from this commit instead of the working tree.
    #[arg(
        long,
        value_name = "REV",
        requires = "recipe",
        conflicts_with = "recipe_per_commit",
        value_parser = crate::app::context::non_empty()
    )]
    recipe_at: Option<String>,
    /// Use each commit's own recipes/NAME.toml (for histories whose recipe evolved).
    #[arg(long, requires = "recipe")]
    recipe_per_commit: bool,
    /// Script and --command modes: write only these paths (git pathspecs) into each
    /// step's tree instead of the whole tree.
    #[arg(long, value_name = "PATHSPEC", num_args = 1.., conflicts_with = "recipe", value_parser = crate::app::context::non_empty())]
    paths: Vec<String>,
    /// What counts as broken.
    #[arg(long, value_enum, default_value = "build")]
    mode: Mode,
    /// Any command, run in each commit's checkout with `git bisect run`'s exit codes.
    #[arg(long, value_name = "CMD", value_parser = crate::app::context::non_empty())]
    script: Option<String>,
    /// Bench mode without a recipe: time this command (or read --metric from it) in each checkout.
    #[arg(long, value_name = "CMD", conflicts_with_all = ["script", "recipe"], value_parser = crate::app::context::non_empty())]
    command: Option<String>,
    /// With --command: time, json:PATH or regex:RE.
    #[arg(long, default_value = "time", value_parser = crate::app::context::non_empty())]
    metric: String,
    /// Find the first broken commit (default), or the first fixed one.
    #[arg(long, value_enum, default_value = "broken")]
    find: Find,
    /// Bench mode: the relative change that counts as a regression.
    #[arg(long, default_value = "5%", value_parser = parse_fraction)]
    threshold: f64,
    /// Bench mode: which way is worse.
    #[arg(long, value_enum, default_value = "slower")]
    direction: Direction,
    /// Bench mode: parameter overrides (the bench must come to one point).
    #[arg(long = "param", value_name = "K=V", value_parser = crate::app::context::non_empty())]
    param: Vec<String>,
    /// Bench mode: runs measuring the good end; a commit stops once certain, after 3 runs or more.
    #[arg(long, default_value_t = 10)]
    attempts: usize,
    /// Bench mode: at most this many runs per commit.
    #[arg(long, default_value_t = 40)]
    max_attempts: usize,
    /// Bench mode: each process samples for at least this long.
    #[arg(long, default_value = "300ms", value_parser = humantime::parse_duration)]
    min_time: Duration,
    /// Bench mode: how each process samples, as `repro bench --mode` (graph: CUDA-graph
    /// batches, for kernels of a few microseconds).
    #[arg(long, value_enum, default_value = "cold")]
    timing: crate::foundation::records::Mode,
    /// Follow only the first parent of merges.
    #[arg(long)]
    first_parent: bool,
    /// Time limit of one step (a build, one benchmark process, one run of the script).
    #[arg(long, default_value = "10m", value_parser = crate::app::context::time_limit)]
    timeout: Duration,
    /// Build inside each commit's own Nix dev shell.
    #[arg(long)]
    nix: bool,
    /// Treat a step that fails for reasons outside the commit (no compiler, an
    /// infrastructure error) as a skip and go on.
    #[arg(long)]
    keep_going: bool,
    /// Evaluate this many commits at once (build and script modes): a multisection.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    jobs: u16,
    /// GPUs for check and bench modes, e.g. 0,1: a check runs one commit on each at once;
    /// a performance step spreads its processes over all of them, each GPU judged against
    /// its own baseline of the good end.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "0")]
    devices: Vec<usize>,
    /// Where steps run: here, or as Slurm jobs (--jobs of them at once).
    #[arg(long, value_enum, default_value = "local")]
    executor: ExecutorKind,
    /// Slurm: the partition [default: the cluster's default].
    #[arg(long, value_name = "NAME", value_parser = crate::app::context::non_empty())]
    partition: Option<String>,
    /// Slurm: the generic resources of each job, e.g. gpu:h100:1 ("" for none) [default:
    /// a --gres of --slurm-opt or [slurm] options, else gpu:1].
    #[arg(long, value_name = "GRES", value_parser = crate::app::context::non_empty())]
    gres: Option<String>,
    /// Slurm: each job's time limit, in Slurm's syntax (minutes, or HH:MM:SS) [default:
    /// derived from --timeout: every timeout a step can meet, plus a minute]. A limit a
    /// hanging step would meet before its own --timeout is refused.
    #[arg(long, value_name = "TIME", value_parser = crate::app::context::non_empty())]
    time_limit: Option<String>,
    /// Slurm: the account to charge.
    #[arg(long, value_name = "NAME", value_parser = crate::app::context::non_empty())]
    account: Option<String>,
    /// Slurm: submissions of a step again when its job ends without a result (preempted,
    /// cancelled, out of time, its node lost).
    #[arg(long, value_name = "N", default_value_t = 3)]
    retries: usize,
    /// Slurm: run each step as a job step of the allocation repro runs in (inside
    /// `sbatch`/`salloc`), sharing its GPUs, instead of as a job of its own (the default,
    /// also inside an allocation).
    #[arg(long)]
    slurm_steps: bool,
    /// Slurm: any sbatch/srun option for every job, as --name=value (e.g.
    /// --slurm-opt=--qos=high, --slurm-opt=--constraint=h100); after `[slurm] options` of
    /// repro.toml, the last of each name wins. Checked with the controller before any job.
    #[arg(long, value_name = "OPTION", allow_hyphen_values = true, value_parser = crate::app::context::non_empty())]
    slurm_opt: Vec<String>,
    /// Slurm: an environment variable jobs get, besides repro's own list (PATH,
    /// LD_LIBRARY_PATH, HOME, REPRO_*, ...) and `[slurm] export`.
    #[arg(long, value_name = "NAME", value_parser = crate::app::context::non_empty())]
    slurm_export: Vec<String>,
    /// Slurm: submit the driver itself as a job and return its ID at once; `repro show
    /// ID` and `repro log` follow it, and closing the shell loses nothing.
    #[arg(long)]
    detach: bool,
    /// Internal: the detached bisection this driver reports to.
    #[arg(long, value_name = "ID", hide = true, value_parser = crate::app::context::non_empty())]
    detached_id: Option<String>,
}

/// Arguments of the hidden `repro bisect-step`.
#[derive(Debug, clap::Args)]
pub struct StepArgs {
    /// The request file a Slurm job was given.
    #[arg(value_parser = crate::app::context::non_empty_path())]
    request: std::path::PathBuf,
}

/// The hint of a step request `repro bisect-step` cannot use.
const STEP_HINT: &str = "step requests are written by `repro bisect --executor slurm` for its jobs; run the same repro on the nodes as on the submitting machine, with the request file on a shared filesystem";

/// Runs `repro bisect-step`: one step of a bisection, as a Slurm job runs it. The result
/// (the step, or its error) goes to the file the request names; the exit code says only
/// whether that file was written.
pub fn run_step(_g: &Globals, a: StepArgs) -> anyhow::Result<u8> {
    use crate::engines::bisect::executor::{Executor, StepRequest};
    use crate::engines::bisect::slurm::{JobError, JobRequest, JobResult, MAX_BYTES, SCHEMA};
    let bytes = crate::foundation::fsutil::read_bounded(&a.request, MAX_BYTES).map_err(|e| {
        UserError::usage(format!(
            "cannot read the step request {}: {e}",
            a.request.display()
        ))
        .hint(STEP_HINT)
    })?;
    let req: JobRequest = serde_json::from_slice(&bytes).map_err(|e| {
        UserError::usage(format!(
            "the step request {} is malformed: {e}",
            a.request.display()
        ))
        .hint(STEP_HINT)
    })?;
    if req.schema != SCHEMA {
        return Err(UserError::usage(format!(
            "the step request {} has schema {}; this repro reads {SCHEMA}",
            a.request.display(),
            req.schema
        ))
        .hint("run the same repro on the nodes as on the submitting machine")
        .into());
    }
    let plan = req.plan.plan().map_err(|e| {
        UserError::usage(format!("the step request's plan cannot be used: {e}")).hint(STEP_HINT)
    })?;
    let oid = |s: &str| {
        git2::Oid::from_str(s).map_err(|_| {
            UserError::usage(format!("the step request names a bad commit `{s}`")).hint(STEP_HINT)
        })
    };
    let commit = oid(&req.commit)?;
    let newest = oid(&req.newest)?;
    let baseline = match &req.baseline {
        Some((i, c)) => Some((*i, oid(c)?)),
        None => None,
    };
    let repo = git2::Repository::open(&req.repo)
        .map_err(GitError::Git)
        .with_context(|| format!("cannot open the repository {}", req.repo.display()))?;
    let store = crate::foundation::store::Store::at(&req.store);
    // A job's GPU is whichever Slurm gave it: its samples are its own, and never reused
    // for a comparison in another job.
    let place = format!(
        "slurm job {} on {}",
        std::env::var("SLURM_JOB_ID").unwrap_or_else(|_| "?".into()),
        std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| "?".into())
    );
    let bench = matches!(plan.question, Question::Bench(_));
    let executor = crate::engines::bisect::local::LocalExecutor::new(&repo, store, &plan, newest)
        .with_salt(bench.then(|| place.clone()))
        .one_step();
    let events = |e: run::Event<'_>| {
        if let run::Event::Status(m) = e {
            say!("bisect-step: {m}");
        }
    };
    let out = executor.run(
        &StepRequest {
            index: req.index,
            commit,
            slot: 0,
            baseline,
        },
        &events,
    );
    let result = match out {
        Ok(step) => JobResult {
            schema: SCHEMA,
            samples: step.samples.clone(),
            placement: step.placement.clone(),
            step: Some(step),
            error: None,
        },
        Err(e) => JobResult {
            schema: SCHEMA,
            step: None,
            samples: Vec::new(),
            placement: Some(place),
            error: Some(JobError::of(&e)),
        },
    };
    let text = serde_json::to_vec_pretty(&result).expect("a result serialises");
    crate::foundation::fsutil::write_atomic(&req.result, &text, true)?;
    Ok(exit::OK)
}

/// Runs `repro bisect`; a detached driver also records how it ended.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let detached = a.detached_id.clone();
    let out = run_bisection(g, a);
    if let (Some(id), Err(e)) = (detached, &out) {
        let store = absolute_store(g);
        let _ = detach::finish(&store, &id, None, exit::OK, Some(format!("{e:#}")));
    }
    out
}

/// The store as an absolute path: jobs run elsewhere.
fn absolute_store(g: &Globals) -> crate::foundation::store::Store {
    let store = g.store();
    crate::foundation::store::Store::at(
        std::path::absolute(store.root()).unwrap_or_else(|_| store.root().to_path_buf()),
    )
}

/// `--detach`: checks the options, submits this command line (without `--detach`) as the
/// driver's job and prints the bisection's ID.
fn detach_driver(g: &Globals, a: &Args, plan: &Plan) -> anyhow::Result<u8> {
    let opts = slurm_options(g, a)?;
    let (args, export) = SlurmExecutor::check(&opts, plan)?;
    let store = absolute_store(g);
    let argv: Vec<std::ffi::OsString> = std::iter::once(opts.repro.clone().into_os_string())
        .chain(std::env::args_os().skip(1).filter(|x| x != "--detach"))
        .collect();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let rec = detach::submit(&store, &argv, &cwd, &args, &export)?;
    if g.json {
        emit_json(
            &json!({"schema": records::SCHEMA, "id": rec.id, "job": rec.job, "log": rec.log, "detached": true}),
        )?;
    } else {
        emit(&format!(
            "{}\nsubmitted as Slurm job {}; follow it with `repro show {}` or `repro log`\n",
            rec.id,
            rec.job,
            &rec.id[..12]
        ))?;
    }
    Ok(exit::OK)
}

/// Runs `repro bisect`.
fn run_bisection(g: &Globals, a: Args) -> anyhow::Result<u8> {
    g.config()?;
    if let (Some(range), Some(recipe)) = (&a.toolchains, &a.recipe) {
        return toolchains_of(g, &a, range, recipe);
    }
    let (Some(good), Some(bad)) = (&a.good, &a.bad) else {
        let missing = match (&a.good, &a.bad) {
            (None, None) => "--good and --bad",
            (None, Some(_)) => "--good",
            _ => "--bad",
        };
        return Err(UserError::usage(format!("give {missing} (or --toolchains)"))
            .hint("for example `repro bisect --good v1.0 --bad HEAD --script CMD`, or `--toolchains nvrtc@12.8.93..nvrtc@13.0.88 --recipe NAME` to search compiler releases")
            .into());
    };
    let prepared = prepare(g, &a, good, bad)?;
    if a.detach {
        if a.executor != ExecutorKind::Slurm {
            return Err(
                UserError::usage("--detach submits the bisection's driver as a Slurm job")
                    .hint("add --executor slurm")
                    .into(),
            );
        }
        return detach_driver(g, &a, &prepared.plan);
    }
    let done = drive_and_record(g, &a, &prepared)?;
    if g.json {
        let mut doc = records::to_json(&done.doc);
        doc["id"] = json!(done.id);
        emit_json(&doc)?;
    } else if !g.quiet {
        // -q: the exit code says whether a culprit was found.
        let mut text = render(
            &done.report,
            &prepared.commits,
            done.culprit.as_ref(),
            done.parent.as_ref(),
            &a,
        );
        if let Some(c) = &done.doc.cluster {
            text.push('\n');
            text.push_str(&cluster_text(c, &done.doc.steps));
        }
        emit(&text)?;
    }
    Ok(done.code)
}

/// A commit bisection about to run: the repository, the candidate commits, the plan.
struct Prepared {
    repo: git2::Repository,
    commits: Vec<git2::Oid>,
    plan: Plan,
}

/// A commit bisection run and recorded.
pub(crate) struct Bisected {
    /// The driver's report.
    report: run::Report,
    /// The culprit and its parent, described.
    culprit: Option<git::repo::CommitInfo>,
    parent: Option<git::repo::CommitInfo>,
    /// The record stored.
    pub doc: records::BisectRecord,
    /// Its ID in the store.
    pub id: String,
    /// The exit code: OK with a culprit, MISMATCH without.
    pub code: u8,
}

/// `repro bisect --good A --bad B ...` in this process, without printing (`repro demo`'s
/// bisection steps): the bisection run and recorded as the command runs and records it.
pub(crate) fn bisect_quietly(g: &Globals, a: Args) -> anyhow::Result<Bisected> {
    g.config()?;
    let (Some(good), Some(bad)) = (&a.good, &a.bad) else {
        anyhow::bail!("a commit bisection needs --good and --bad");
    };
    if a.detach || a.toolchains.is_some() {
        anyhow::bail!("--detach and --toolchains are not run in process");
    }
    let prepared = prepare(g, &a, good, bad)?;
    drive_and_record(g, &a, &prepared)
}

/// The commits between `good` and `bad`, the plan, and the held-fixed recipe's toolchain
/// installed.
fn prepare(g: &Globals, a: &Args, good: &str, bad: &str) -> anyhow::Result<Prepared> {
    let question = question(a)?;
    refuse_slurm_only(a)?;
    let repo = git::open(&g.cwd)?;
    let good = git::resolve(&repo, good)?;
    let bad = git::resolve(&repo, bad)?;
    let (older, newer) = if a.find == Find::Fixed {
        (bad, good)
    } else {
        (good, bad)
    };
    let commits = history::commits_between(&repo, older, newer, a.first_parent)?;
    // Checking a large working tree costs a status scan: only when the note would be shown.
    if !g.quiet && !g.json && git::is_dirty(&g.cwd) {
        say!(
            "note: the working tree has uncommitted changes; the bisection reads committed trees only and leaves them alone"
        );
    }
    let recipe = recipe_source(g, &repo, a)?;
    // A recipe held fixed takes the parameters the same at every commit: a wrong name or
    // value is the user's, said now rather than as a skip at every step.
    if let Some(RecipeSource::Fixed(r)) = &recipe {
        let mut params = r.sections.params.clone();
        crate::foundation::runspec::override_params(&mut params, &a.param)?;
    }
    let plan = plan(g, a, recipe, question)?;
    provision_toolchain(g, &plan)?;
    Ok(Prepared {
        repo,
        commits,
        plan,
    })
}

/// Runs the prepared bisection (here, or through Slurm with `--executor slurm`) and records
/// its report in the store.
fn drive_and_record(g: &Globals, a: &Args, p: &Prepared) -> anyhow::Result<Bisected> {
    let Prepared {
        repo,
        commits,
        plan,
    } = p;
    // Slurm: the options are checked, and the plan told, before any step runs.
    let slurm = match a.executor {
        ExecutorKind::Local => None,
        ExecutorKind::Slurm => Some(slurm_executor(repo, g, a, plan, commits)?),
    };
    if let Some(e) = &slurm
        && !g.quiet
    {
        say!(
            "note: plan: {}, submitted with {}",
            e.placement().describe(),
            e.job_args().join(" ")
        );
    }
    let progress = Progress::new(g, expected_steps(commits.len()));
    let events = |e: run::Event<'_>| progress.event(e);
    let report = match &slurm {
        None => crate::engines::bisect::bisect(repo, g.store(), plan, commits, &events),
        Some(executor) => run::drive(executor, plan, commits, &events),
    };
    progress.finish();
    let report = report?;
    let describe = |i: usize| git::describe(repo, commits[i]).ok();
    let (culprit, parent) = match &report.outcome {
        Outcome::FirstBad { index } => (describe(*index), describe(index - 1)),
        Outcome::Untestable { .. } => (None, None),
    };
    let doc = bisect_record(a, &report, commits, (&culprit, &parent), slurm.as_ref());
    let question = question_record(a, commits);
    let id = crate::engines::catalog::record_bisection(&g.store(), question, &doc)
        .context("failed to record the bisection's report")?;
    let code = match report.outcome {
        Outcome::FirstBad { .. } => exit::OK,
        Outcome::Untestable { .. } => exit::MISMATCH,
    };
    if let Some(d) = &a.detached_id {
        detach::finish(&absolute_store(g), d, Some(id.clone()), code, None)
            .context("failed to record the detached bisection's end")?;
    }
    Ok(Bisected {
        report,
        culprit,
        parent,
        doc,
        id,
        code,
    })
}

/// The plan of a commit bisection: what each step asks, and how steps run.
fn plan(
    g: &Globals,
    a: &Args,
    recipe: Option<RecipeSource>,
    question: Question,
) -> anyhow::Result<Plan> {
    Ok(Plan {
        recipe,
        paths: a.paths.clone(),
        offline: g.offline,
        question,
        nix: a.nix,
        timeout: a.timeout,
        find_fixed: a.find == Find::Fixed,
        jobs: usize::from(a.jobs),
        keep_going: a.keep_going,
        devices: a.devices.clone(),
        pins: g.pins()?,
        python: g.python.clone(),
    })
}

/// `--toolchains RANGE --recipe NAME`: a search of compiler releases, on one GPU, here.
fn toolchains_of(g: &Globals, a: &Args, range: &str, recipe: &str) -> anyhow::Result<u8> {
    if a.find == Find::Fixed || a.devices.len() > 1 || a.executor != ExecutorKind::Local {
        return Err(UserError::usage(
            "--toolchains searches for the first broken release, on one GPU, here",
        )
        .hint("leave out --find fixed, --executor and a --devices list of several")
        .into());
    }
    let driven = match a.mode {
        Mode::Build => None,
        Mode::Check => Some(Question::Check),
        Mode::Bench => Some(Question::Bench(bench_question(a, None))),
    };
    bisect_toolchains(
        g,
        BisectArgs {
            range,
            recipe,
            driven,
            timeout: a.timeout,
            wheels: a.wheels.clone(),
            keep_going: a.keep_going,
            device: a.devices.first().copied().unwrap_or(0),
        },
    )
}

/// What a commit bisection asks of each commit: a script, a command's metric, or the recipe
/// built, checked or benched.
fn question(a: &Args) -> anyhow::Result<Question> {
    // Parameters choose a recipe bench's point; nothing else reads them.
    let recipe_bench = a.script.is_none() && a.command.is_none() && a.mode == Mode::Bench;
    if !a.param.is_empty() && !recipe_bench {
        return Err(UserError::usage(
            "--param sets a recipe bench's parameters: it applies to --recipe NAME --mode bench only",
        )
        .hint("add --mode bench to time the recipe at that point, or leave --param out")
        .into());
    }
    Ok(match (&a.script, &a.command, a.mode) {
        (Some(s), _, _) => Question::Script(s.clone()),
        (None, Some(cmd), _) => Question::Bench(bench_question(
            a,
            Some((
                cmd.clone(),
                // The error's own hint gives examples.
                Metric::parse(&a.metric)?,
            )),
        )),
        (None, None, _) if a.recipe.is_none() => {
            return Err(UserError::usage("say what to test: --recipe NAME [--mode build|check|bench], --script CMD, or --command CMD")
                .hint("for example --script 'make test' (exit 0 is good, 125 skips the commit), or --recipe NAME --mode check")
                .into());
        }
        (None, None, Mode::Build) => Question::Build,
        (None, None, Mode::Check) => Question::Check,
        (None, None, Mode::Bench) => Question::Bench(bench_question(a, None)),
    })
}

/// The Slurm options, refused without `--executor slurm`.
fn refuse_slurm_only(a: &Args) -> anyhow::Result<()> {
    let slurm_only = [
        ("--partition", a.partition.is_some()),
        ("--gres", a.gres.is_some()),
        ("--time-limit", a.time_limit.is_some()),
        ("--account", a.account.is_some()),
        ("--slurm-steps", a.slurm_steps),
        ("--slurm-opt", !a.slurm_opt.is_empty()),
        ("--slurm-export", !a.slurm_export.is_empty()),
    ];
    let given: Vec<&str> = slurm_only
        .iter()
        .filter(|(_, g)| *g)
        .map(|(f, _)| *f)
        .collect();
    if a.executor == ExecutorKind::Local && !given.is_empty() {
        return Err(UserError::usage(format!(
            "{} {} of --executor slurm",
            given.join(", "),
            if given.len() == 1 {
                "is an option"
            } else {
                "are options"
            }
        ))
        .hint("add --executor slurm, or leave them out to run the steps here")
        .into());
    }
    Ok(())
}

/// The recipe each step uses: none (a script or a command), each commit's own, or one
/// held fixed.
fn recipe_source(
    g: &Globals,
    repo: &git2::Repository,
    a: &Args,
) -> anyhow::Result<Option<RecipeSource>> {
    Ok(match &a.recipe {
        None => None,
        Some(_) if a.command.is_some() || a.script.is_some() => None,
        Some(name) if a.recipe_per_commit => {
            if name.contains('/') || name.ends_with(".toml") {
                return Err(UserError::usage(format!(
                    "--recipe-per-commit takes a recipe name, not the path `{name}`"
                ))
                .hint("each commit's recipes/NAME.toml is read: pass --recipe NAME")
                .into());
            }
            Some(RecipeSource::PerCommit(name.clone()))
        }
        Some(name) => Some(RecipeSource::Fixed(Box::new(fixed_recipe(
            g,
            repo,
            name,
            a.recipe_at.as_deref(),
        )?))),
    })
}

/// The bisection's report as a record.
fn bisect_record(
    a: &Args,
    report: &run::Report,
    commits: &[git2::Oid],
    (culprit, parent): (
        &Option<git::repo::CommitInfo>,
        &Option<git::repo::CommitInfo>,
    ),
    slurm: Option<&SlurmExecutor>,
) -> records::BisectRecord {
    records::BisectRecord {
        schema: records::SCHEMA,
        find: if a.find == Find::Fixed {
            records::Find::Fixed
        } else {
            records::Find::Broken
        },
        outcome: report.outcome.clone(),
        culprit: culprit.clone(),
        parent: parent.clone(),
        range: json!(report.outcome_range(commits)),
        commits: report.commits,
        evaluated: report.evaluated,
        steps: report.steps.clone(),
        recheck: report.recheck.clone(),
        cluster: slurm.map(|e| records::ClusterRecord {
            executor: "slurm".into(),
            placement: e.placement().describe(),
            options: e.job_args().to_vec(),
            export: e.exported().to_vec(),
            usage: e.usage(),
        }),
        kind: None,
        question: None,
        created_at: None,
        repro_version: None,
        key: None,
    }
}

/// What was asked, for the record: the mode, the name, and the range's good and bad ends.
fn question_record(a: &Args, commits: &[git2::Oid]) -> records::Question {
    // The report is a record too: `repro log` lists it and `repro show ID` opens it.
    records::Question {
        mode: if a.script.is_some() {
            "script".to_string()
        } else {
            clap::ValueEnum::to_possible_value(&a.mode)
                .map_or_else(String::new, |v| v.get_name().to_string())
        },
        name: a
            .recipe
            .as_deref()
            .or(a.command.as_deref())
            .or(a.script.as_deref())
            .map(str::to_string),
        good: if a.find == Find::Fixed {
            commits.last()
        } else {
            commits.first()
        }
        .map(|c| c.to_string()),
        bad: if a.find == Find::Fixed {
            commits.first()
        } else {
            commits.last()
        }
        .map(|c| c.to_string()),
    }
}

/// The Slurm executor of a bisection: the store made absolute (jobs run elsewhere), the
/// steps' store prepared, the options checked with the controller.
fn slurm_executor(
    repo: &git2::Repository,
    g: &Globals,
    a: &Args,
    plan: &Plan,
    commits: &[git2::Oid],
) -> anyhow::Result<SlurmExecutor> {
    let store = absolute_store(g);
    run::prepare(repo, &store, plan, commits)?;
    let newest = *commits.last().expect("a range has two ends");
    let opts = slurm_options(g, a)?;
    Ok(SlurmExecutor::new(repo, store, plan, newest, opts)?)
}

/// The Slurm options of the command line and `repro.toml`, each checked.
fn slurm_options(g: &Globals, a: &Args) -> anyhow::Result<SlurmOptions> {
    for o in &a.slurm_opt {
        if let Some(problem) = crate::foundation::config::slurm_option_problem(o) {
            return Err(UserError::usage(format!("--slurm-opt: {problem}"))
                .hint("pass one option per --slurm-opt, as --slurm-opt=--name=value")
                .into());
        }
    }
    for n in &a.slurm_export {
        if !crate::foundation::config::env_name_ok(n) {
            return Err(UserError::usage(format!(
                "--slurm-export: `{n}` is not an environment variable's name"
            ))
            .hint("pass a name, such as --slurm-export HF_HOME")
            .into());
        }
    }
    let site = &g.config()?.slurm;
    Ok(SlurmOptions {
        partition: a.partition.clone(),
        gres: a.gres.clone(),
        site: [&site.options[..], &a.slurm_opt[..]].concat(),
        export: [&site.export[..], &a.slurm_export[..]].concat(),
        time_limit: a.time_limit.clone(),
        account: a.account.clone(),
        retries: a.retries,
        steps: a.slurm_steps,
        repro: std::env::current_exe().context("cannot find the repro executable")?,
    })
}

/// What a cluster bisection's jobs cost: one row per step that ran as a job (its id,
/// queue wait, run time, GPUs, GPU-hours) and the total of every job, the probe's and
/// lost ones' included.
pub(crate) fn cluster_text(c: &records::ClusterRecord, steps: &[run::Step]) -> String {
    let mut out = format!("cluster: {}\n", c.placement);
    let Some(total) = &c.usage else {
        out.push_str("  (the cluster reported no job times)\n");
        return out;
    };
    let mut t = Table::new();
    t.row(
        [
            "JOB",
            "COMMIT",
            "STATE",
            "QUEUED",
            "RAN",
            "GPUS",
            "GPU-HOURS",
        ]
        .map(String::from),
    );
    for s in steps {
        let Some(j) = &s.job else { continue };
        t.row([
            j.id.clone(),
            keys::short(&s.commit).to_string(),
            crate::foundation::output::printable(&j.state),
            format!("{:.0} s", j.queue_wait_s),
            format!("{:.0} s", j.run_s),
            j.gpus.to_string(),
            format!("{:.4}", j.gpu_hours),
        ]);
    }
    t.row([
        format!("all {} jobs", total.jobs),
        String::new(),
        String::new(),
        format!("{:.0} s", total.queue_wait_s),
        format!("{:.0} s", total.run_s),
        String::new(),
        format!("{:.4}", total.gpu_hours),
    ]);
    out.push_str(&t.render(2));
    out.push_str(&format!(
        "  (from {}; times in whole seconds, as Slurm keeps them)\n",
        total.source
    ));
    out
}

/// The steps a bisection over `n` candidates is expected to take: both ends, then about
/// log2 of what lies between (more when steps are skipped).
pub(crate) fn expected_steps(n: usize) -> u64 {
    let inner = n.saturating_sub(2) as u64;
    2 + if inner == 0 {
        0
    } else {
        u64::from((inner + 1).next_power_of_two().ilog2())
    }
}

/// How a bisection shows its progress: on a terminal, a bar of steps done out of the
/// expected number, with the elapsed time and an estimate of what is left, and each step's
/// line printed above it; off a terminal, plain status and step lines on stderr; with -q
/// nothing, and with --json only the step lines (the evidence as it comes).
pub(crate) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
    steps_hidden: bool,
    /// `-v`: each step's line says where its time went.
    times: bool,
    style: Style,
}

impl Progress {
    /// A progress display for a bisection expected to take `expected` steps.
    pub(crate) fn new(g: &Globals, expected: u64) -> Progress {
        let quiet = g.quiet || g.json;
        let bar = (!quiet && std::io::IsTerminal::is_terminal(&std::io::stderr())).then(|| {
            let b = indicatif::ProgressBar::new(expected.max(1));
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "bisect {bar:24} {pos}/{len} steps [{elapsed_precise}, about {eta} left] {msg}",
                )
                .expect("a valid template"),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        Progress {
            bar,
            quiet,
            steps_hidden: g.quiet,
            times: g.verbose > 0,
            style: Style::for_stderr(),
        }
    }

    /// Shows one event of the bisection.
    pub(crate) fn event(&self, e: run::Event<'_>) {
        match e {
            run::Event::Status(msg) => match &self.bar {
                Some(b) => b.set_message(crate::foundation::output::sanitize(msg)),
                None if !self.quiet => say!("{} {msg}", self.style.dim("bisect:")),
                None => {}
            },
            run::Event::Step(s) if !self.steps_hidden => {
                let mut line = step_line(s, &self.style);
                if self.times && !s.cached {
                    line.push_str(&step_times(s));
                }
                match &self.bar {
                    Some(b) => {
                        // A skipped step costs one more than expected: the bar grows.
                        if b.position() >= b.length().unwrap_or(0) {
                            b.set_length(b.position() + 1);
                        }
                        b.inc(1);
                        b.println(crate::foundation::output::terminal_safe(
                            &line,
                            self.style.colour(),
                        ));
                    }
                    None => say!("{line}"),
                }
            }
            run::Event::Step(_) => {}
        }
    }

    /// Sets the number of steps expected, once it is known.
    pub(crate) fn set_expected(&self, expected: u64) {
        if let Some(b) = &self.bar {
            b.set_length(expected.max(b.position()).max(1));
        }
    }

    /// Clears the bar.
    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// One line per evaluated commit: commit, outcome, subject, and why.
pub(crate) fn step_line(s: &run::Step, style: &Style) -> String {
    let verdict = match s.verdict.word() {
        "good" => style.good("good"),
        "bad" => style.error("bad"),
        v => style.warn(v),
    };
    let pad = " ".repeat(4usize.saturating_sub(s.verdict.word().len()));
    // A commit shows as its short hash; a compiler release (toolchain bisection) whole.
    let name = if s.commit.len() == 40 && s.commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        &s.commit[..12]
    } else {
        s.commit.as_str()
    };
    let mut line = format!(
        "  {name}  {verdict}{pad}  {}",
        crate::foundation::output::printable(&s.subject)
    );
    if let Some(d) = &s.detail {
        line.push_str(&format!(" ({})", crate::foundation::output::printable(d)));
    }
    if let Some(n) = &s.note {
        line.push_str(&format!(" [{n}]"));
    }
    if s.cached {
        line.push_str(" [from the store]");
    }
    line
}

/// Where a step's time went, for `-v`: ` [wait 0.00 s, build 0.12 s, measure 0.81 s in
/// 3 runs, 1.02 s in all]` (a run: one GPU job, one process's median).
pub(crate) fn step_times(s: &run::Step) -> String {
    let t = &s.times;
    let processes = if s.attempts > 0 {
        format!(" in {} runs", s.attempts)
    } else {
        String::new()
    };
    format!(
        " [wait {:.2} s, build {:.2} s, measure {:.2} s{processes}, {:.2} s in all]",
        t.wait_ms / 1e3,
        t.build_ms / 1e3,
        t.measure_ms / 1e3,
        s.ms / 1e3
    )
}

/// Reads the recipe a bisection holds fixed: by name from the working tree's recipes/, by
/// path (relative to the current directory), or from one commit with `--recipe-at`.
fn fixed_recipe(
    g: &Globals,
    repo: &git2::Repository,
    name: &str,
    at: Option<&str>,
) -> anyhow::Result<crate::foundation::recipe::Recipe> {
    use crate::foundation::recipe::{self, RecipeError};
    let root = repo
        .workdir()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| g.cwd.clone());
    let is_path = name.contains('/') || name.ends_with(".toml");
    if let Some(rev) = at {
        let oid = git::resolve(repo, rev)?;
        let rel = if is_path {
            recipe::normalize(name).unwrap_or_else(|| name.to_string())
        } else {
            format!("{}/{name}.toml", recipe::DIR)
        };
        let files = git::CommitFiles::new(repo, oid)?;
        let text = crate::engines::build::inputs::FileSource::read(&files, &rel).map_err(|e| {
            UserError::usage(format!("cannot read the recipe {rel} at {rev}: {e}"))
                .hint("--recipe-at reads the recipe from that commit; name a commit that has it")
        })?;
        return Ok(recipe::parse_detached(
            &rel,
            &String::from_utf8_lossy(&text),
        )?);
    }
    let (path, rel) = if is_path {
        let path = g.cwd.join(name);
        // The recipe's label: its path in the repository when it is inside it.
        let rel = path
            .canonicalize()
            .ok()
            .and_then(|p| {
                root.canonicalize().ok().and_then(|r| {
                    p.strip_prefix(r)
                        .ok()
                        .map(|x| x.to_string_lossy().into_owned())
                })
            })
            .unwrap_or_else(|| {
                let stem = std::path::Path::new(name)
                    .file_stem()
                    .map_or_else(|| "recipe".into(), |s| s.to_string_lossy().into_owned());
                format!("{}/{stem}.toml", recipe::DIR)
            });
        (path, rel)
    } else {
        let rel = format!("{}/{name}.toml", recipe::DIR);
        (root.join(&rel), rel)
    };
    let text = match crate::foundation::fsutil::read_input_text(&path, recipe::MAX_BYTES) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => {
            return Err(RecipeError::NotFound {
                name: name.to_string(),
                path: g.shown(&path),
                available: recipe::list(&root),
            }
            .into());
        }
        Err(e) => {
            return Err(RecipeError::Read {
                path: g.shown(&path),
                source: e.source,
            }
            .into());
        }
    };
    Ok(recipe::parse_detached(&rel, &text)?)
}

fn bench_question(a: &Args, command: Option<(String, Metric)>) -> BenchQuestion {
    BenchQuestion {
        threshold: a.threshold,
        direction: a.direction,
        command,
        params: a.param.clone(),
        settings: Settings {
            mode: a.timing,
            max_noise: 0.005,
            min_samples: 10,
            max_samples: 100_000,
            min_time_ms: a.min_time.as_secs_f64() * 1e3,
            budget_ms: 15_000.0,
            warmup_ms: 100.0,
            device: 0,
        },
        first_attempts: a.attempts.max(2),
        max_attempts: a.max_attempts.max(a.attempts.max(2)),
    }
}

impl run::Report {
    /// The commits that may hold the transition, for an untestable outcome.
    pub fn outcome_range(&self, commits: &[git2::Oid]) -> Vec<String> {
        match self.outcome {
            Outcome::FirstBad { index } => vec![commits[index].to_string()],
            Outcome::Untestable { first, last } => {
                (first..=last).map(|i| commits[i].to_string()).collect()
            }
        }
    }
}

/// The answer of a commit bisection: the culprit and its parent, or the commits it is
/// one of.
fn answer_text(
    report: &run::Report,
    commits: &[git2::Oid],
    culprit: Option<&git::repo::CommitInfo>,
    parent: Option<&git::repo::CommitInfo>,
    a: &Args,
) -> String {
    let style = Style::for_stdout();
    let mut out = String::new();
    let what = if a.find == Find::Fixed {
        "first fixed commit"
    } else {
        "first bad commit"
    };
    match (&report.outcome, culprit) {
        (Outcome::FirstBad { .. }, Some(c)) => {
            out.push_str(&format!("{} {}\n", style.bold(&format!("{what}:")), c.hash));
            out.push_str(&format!(
                "  author   {}\n  date     {}\n  subject  {}\n  changes  {}\n",
                c.author, c.date, c.subject, c.diffstat
            ));
            if let Some(p) = parent {
                let label = match (a.find, a.mode, &a.script) {
                    (Find::Broken, Mode::Build, None) if a.command.is_none() => {
                        "last working build"
                    }
                    (Find::Broken, _, _) => "its parent (good)",
                    (Find::Fixed, _, _) => "its parent (still broken)",
                };
                out.push_str(&format!("{label}: {} {}\n", &p.hash[..12], p.subject));
            }
            if let Some(r) = &report.recheck {
                out.push_str(&format!(
                    "re-checked against its parent: ratio {:.4} [{:.4}, {:.4}], p = {:.1e}: {}\n",
                    r.ratio,
                    r.ratio_ci[0],
                    r.ratio_ci[1],
                    r.p,
                    if r.confirmed {
                        style.good("confirmed")
                    } else {
                        style.warn("NOT confirmed: the change may be spread over several commits")
                    }
                ));
            }
        }
        (Outcome::Untestable { first, last }, _) => {
            out.push_str(&format!("{} the {what} could not be pinned down: it is one of these commits, and all but the last could not be tested:\n", style.warn("undecided:")));
            for (i, commit) in commits.iter().enumerate().take(*last + 1).skip(*first) {
                let d = report
                    .steps
                    .iter()
                    .find(|s| s.index == i)
                    .and_then(|s| s.detail.clone())
                    .unwrap_or_default();
                out.push_str(&format!("  {}  {}\n", git::short(*commit), d));
            }
        }
        _ => {}
    }
    out
}

/// The evidence of a bisection, one row per step: the columns that name the step (`lead`),
/// then what every step measured, then `last` (a subject or a detail). Commit and
/// toolchain bisections share it.
fn step_table(
    lead_head: &[&str],
    last_head: &str,
    steps: &[run::Step],
    unit: &str,
    lead: &dyn Fn(&run::Step) -> Vec<String>,
    last: &dyn Fn(&run::Step) -> String,
) -> String {
    let mut t = Table::new();
    let mut head: Vec<&str> = lead_head.to_vec();
    head.extend([
        "VERDICT",
        "MEDIAN",
        "RATIO [95% CI]",
        "P",
        "RUNS",
        "CACHED",
        last_head,
    ]);
    t.row(head);
    for s in steps {
        let mut row = lead(s);
        row.extend([
            s.verdict.to_string(),
            s.median.map_or("-".into(), |m| fmt_value(m, unit)),
            s.ratio.map_or("-".into(), |(r, lo, hi)| {
                format!("{r:.4} [{lo:.4}, {hi:.4}]")
            }),
            s.p.map_or("-".into(), |p| format!("{p:.1e}")),
            if s.attempts > 0 {
                s.attempts.to_string()
            } else {
                "-".into()
            },
            if s.cached { "yes".into() } else { "no".into() },
            last(s),
        ]);
        t.row(row);
    }
    t.render(2)
}

fn render(
    report: &run::Report,
    commits: &[git2::Oid],
    culprit: Option<&git::repo::CommitInfo>,
    parent: Option<&git::repo::CommitInfo>,
    a: &Args,
) -> String {
    let mut out = answer_text(report, commits, culprit, parent, a);
    out.push_str(&format!(
        "\nevidence ({} of {} commits evaluated, {} answered from the store):\n",
        report.steps.len(),
        report.commits,
        report.steps.len() - report.evaluated.min(report.steps.len())
    ));
    let unit = if a.command.is_some() { "" } else { "us" };
    out.push_str(&step_table(
        &["#", "COMMIT"],
        "SUBJECT / DETAIL",
        &report.steps,
        unit,
        &|s| vec![s.index.to_string(), s.commit[..12].to_string()],
        &|s| match &s.detail {
            Some(d) => format!("{} ({d})", s.subject),
            None => s.subject.clone(),
        },
    ));
    if report.steps.iter().any(|s| s.resources.is_some()) {
        out.push_str("\nresources of each evaluated commit's build:\n");
        let mut r = Table::new();
        r.row(["#", "COMMIT", "RESOURCES"]);
        for s in &report.steps {
            r.row([
                s.index.to_string(),
                s.commit[..12].to_string(),
                s.resources.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        out.push_str(&r.render(2));
    }
    out
}

/// What `repro bisect --toolchains` was asked.
pub struct BisectArgs<'a> {
    /// FROM..TO.
    pub range: &'a str,
    /// The recipe name or path.
    pub recipe: &'a str,
    /// Check and bench questions (build: `None`).
    pub driven: Option<crate::engines::bisect::run::Question>,
    /// Time limit of one child.
    pub timeout: std::time::Duration,
    /// `--wheels DIR`.
    pub wheels: Option<PathBuf>,
    /// `--keep-going`.
    pub keep_going: bool,
    /// The GPU of check and bench steps.
    pub device: usize,
}

/// `repro bisect --toolchains FROM..TO --recipe X`: the commit held fixed, the compiler
/// release searched.
/// Refuses a recipe that its compiler releases cannot bisect: a torch extension, a
/// command build, or one built by another compiler than the range's.
fn check_family(r: &crate::foundation::recipe::Recipe, range_family: Family) -> anyhow::Result<()> {
    let family = match &r.build {
        crate::foundation::recipe::Build::Nvrtc(_) => Family::Nvrtc,
        crate::foundation::recipe::Build::Nvcc(_) => Family::Nvcc,
        crate::foundation::recipe::Build::TorchExtension(_) => {
            return Err(UserError::usage(format!(
                "recipe `{}` is a torch extension; bisecting its compiler releases is not supported",
                r.name
            ))
            .hint("to search commits instead, give --good and --bad")
            .into());
        }
        crate::foundation::recipe::Build::Command(_) => {
            return Err(UserError::usage(format!(
                "recipe `{}` is a command build; it has no compiler release to search",
                r.name
            ))
            .hint("--toolchains needs an nvrtc or nvcc recipe; to search commits instead, give --good and --bad")
            .into());
        }
    };
    if family != range_family {
        return Err(UserError::usage(format!(
            "recipe `{}` is built by {}, but the range is of {} releases",
            r.name,
            family.name(),
            range_family.name()
        ))
        .hint(format!(
            "give a range of {0} releases (--toolchains {0}@FROM..{0}@TO) or a recipe built by {1}",
            family.name(),
            range_family.name()
        ))
        .into());
    }
    Ok(())
}

/// The targets a toolchain bisection searches: a fat binary over several targets is one
/// build, so one search, named by them all.
fn toolchain_targets(
    r: &crate::foundation::recipe::Recipe,
    driven: bool,
) -> anyhow::Result<Vec<String>> {
    let targets = if r.is_fat() {
        vec![r.targets().join("+")]
    } else if r.targets().len() > 1 {
        r.targets().to_vec()
    } else {
        vec![r.targets()[0].clone()]
    };
    if driven && targets.len() > 1 {
        return Err(UserError::usage(format!(
            "recipe `{}` has {} targets; a check or bench bisection over toolchains runs one kernel",
            r.name,
            targets.len()
        ))
        .hint("use a recipe with one `target` (the GPU's), or --mode build, which answers per target")
        .into());
    }
    Ok(targets)
}

/// The answers and evidence of a toolchain bisection (build mode), for a person.
fn toolchains_text(report: &crate::engines::bisect::toolchains::Report) -> String {
    let mut out = String::new();
    for a in &report.answers {
        if let Some(u) = &a.unchanged {
            out.push_str(&format!("no change for {}: {u}\n", a.target));
            continue;
        }
        match (&a.first_bad, &a.last_good) {
            (Some(bad), Some(good)) => out.push_str(&format!(
                "first bad release for {}: {}@{bad} (last good: {}@{good})\n",
                a.target,
                report.family,
                report.family
            )),
            _ => out.push_str(&format!(
                "undecided for {}: the first bad release is one of these, and all but the last could not be tested: {}\n",
                a.target,
                a.undecided.join(", ")
            )),
        }
    }
    out.push_str(&format!(
        "\nevidence ({} of {} releases evaluated; record {}):\n",
        report.wheels.len(),
        report.releases.len(),
        keys::short(&report.key)
    ));
    let mut t = crate::foundation::output::Table::new();
    t.row(["RELEASE", "TARGET", "VERDICT", "CACHED", "KEY", "DETAIL"]);
    for s in &report.steps {
        t.row([
            s.release.clone(),
            s.target.clone(),
            s.verdict.to_string(),
            if s.cached { "yes".into() } else { "no".into() },
            s.key.as_deref().map(keys::short).unwrap_or("-").to_string(),
            s.detail.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&t.render(2));
    out
}

fn bisect_toolchains(g: &Globals, a: BisectArgs<'_>) -> anyhow::Result<u8> {
    use crate::engines::bisect::toolchains::{self as tb, Question};
    let cfg = g.config()?;
    let BisectArgs {
        range,
        recipe,
        driven,
        timeout,
        wheels,
        keep_going,
        device,
    } = a;
    let range = tb::Range::parse(range).map_err(|m| {
        UserError::usage(m.to_string())
            .hint("for example --toolchains nvrtc@12.8.93..nvrtc@13.0.88")
    })?;
    let question = match &driven {
        None => Question::Build,
        Some(crate::engines::bisect::run::Question::Bench(_)) => Question::Bench,
        Some(_) => Question::Check,
    };
    let root = g.project_root();
    let r = crate::foundation::recipe::load(&root, recipe)?;
    check_family(&r, range.family)?;
    let targets = toolchain_targets(&r, driven.is_some())?;
    let store = g.store();
    let plan = tb::Plan {
        root: &root,
        store: store.root(),
        cfg: &cfg,
        recipe: recipe.to_string(),
        targets,
        range,
        question,
        source: tb::source(wheels.map(|w| g.cwd.join(w))),
        timeout,
    };
    if let Some(q) = driven {
        return bisect_driven(g, &plan, r, q, keep_going, device);
    }
    let quiet = g.quiet || g.json;
    let mut progress = |m: &str| {
        if !quiet {
            say!("bisect: {m}");
        }
    };
    let mut report = tb::bisect(&plan, &mut progress)?;
    report.created_at = Some(crate::foundation::records::now());
    report.repro_version = Some(crate::foundation::records::VERSION.into());
    let rec = crate::foundation::records::to_json(&report);
    store.put_record(tb::RECORDS, &report.key, &rec)?;
    if g.json {
        emit_json(&rec)?;
    } else {
        emit(&toolchains_text(&report))?;
        if let Some(n) = trust_note(&report.wheels) {
            say!("{n}");
        }
    }
    let decided = report.answers.iter().all(|a| a.undecided.is_empty());
    Ok(if decided { exit::OK } else { exit::MISMATCH })
}

/// Check and bench bisections over releases: the commit bisection's driver, progress, step
/// lines, record and report, with releases where commits would be.
fn bisect_driven(
    g: &Globals,
    plan: &crate::engines::bisect::toolchains::Plan<'_>,
    recipe: crate::foundation::recipe::Recipe,
    question: crate::engines::bisect::run::Question,
    keep_going: bool,
    device: usize,
) -> anyhow::Result<u8> {
    use crate::app::bisect::{Progress, expected_steps};
    use crate::engines::bisect::search::Outcome;
    use crate::engines::bisect::toolchains as tb;
    // The range's size is known once the releases are listed; the bar starts from a guess.
    let progress = Progress::new(g, expected_steps(4));
    let events = |e: crate::engines::bisect::run::Event<'_>| progress.event(e);
    let sized = |n: usize| progress.set_expected(expected_steps(n));
    let report = tb::bisect_driven(plan, recipe, question, keep_going, device, &sized, &events);
    progress.finish();
    let report = report?;
    let fam = report.family.as_str();
    let question = json!({
        "mode": report.mode, "name": plan.recipe,
        "toolchains": format!("{fam}@{}..{fam}@{}", plan.range.from, plan.range.to),
    });
    let id = crate::engines::catalog::record_toolchain_bisection(&g.store(), question, &report)
        .map_err(anyhow::Error::from)?;
    if g.json {
        let mut doc = crate::foundation::records::to_json(&report);
        doc["id"] = json!(id);
        emit_json(&doc)?;
    } else if !g.quiet {
        let mut out = String::new();
        match (&report.first_bad, &report.last_good) {
            (Some(bad), Some(good)) => out.push_str(&format!(
                "first bad release: {fam}@{bad} (last good: {fam}@{good})\n"
            )),
            _ => out.push_str(&format!(
                "undecided: the first bad release is one of these, and all but the last could not be tested: {}\n",
                report.undecided.join(", ")
            )),
        }
        if let Some(r) = &report.recheck {
            out.push_str(&format!(
                "re-checked against {}: ratio {:.4} [{:.4}, {:.4}], p = {:.1e}: {}\n",
                r.parent,
                r.ratio,
                r.ratio_ci[0],
                r.ratio_ci[1],
                r.p,
                if r.confirmed {
                    "confirmed"
                } else {
                    "NOT confirmed: the change may be spread over several releases"
                }
            ));
        }
        out.push_str(&format!(
            "\nevidence ({} of {} releases evaluated, {} answered from the store; record {}):\n",
            report.steps.len(),
            report.releases.len(),
            report.steps.len() - report.evaluated.min(report.steps.len()),
            keys::short(&id)
        ));
        out.push_str(&step_table(
            &["RELEASE"],
            "DETAIL",
            &report.steps,
            "us",
            &|s| vec![s.commit.clone()],
            &|s| s.detail.clone().unwrap_or_default(),
        ));
        emit(&out)?;
        if let Some(n) = trust_note(&report.wheels) {
            say!("{n}");
        }
    }
    Ok(match report.outcome {
        Outcome::FirstBad { .. } => exit::OK,
        Outcome::Untestable { .. } => exit::MISMATCH,
    })
}

/// The note a bisection prints when it installed releases the project does not pin.
fn trust_note(
    wheels: &std::collections::BTreeMap<
        String,
        Vec<crate::engines::toolchain::install::InstalledWheel>,
    >,
) -> Option<String> {
    let unpinned: Vec<&str> = wheels
        .iter()
        .filter(|(_, w)| w.iter().any(|w| !w.pinned))
        .map(|(r, _)| r.as_str())
        .collect();
    (!unpinned.is_empty()).then(|| {
        format!(
            "note: {} {} not pinned in repro.toml: {} wheels were trusted as they came, from pip or --wheels (trust on first use); every wheel's sha256 is in this bisection's record and in the tree's toolchain.json",
            unpinned.join(", "),
            if unpinned.len() == 1 { "is" } else { "are" },
            if unpinned.len() == 1 { "its" } else { "their" },
        )
    })
}

/// Installs the toolchain the held-fixed recipe resolves to before the first step, with
/// the install's progress, so that steps (several at once with `--jobs`) find it in place.
/// Per-commit recipes resolve in each step.
fn provision_toolchain(g: &Globals, plan: &Plan) -> anyhow::Result<()> {
    use crate::engines::toolchain::resolve;
    let Some(RecipeSource::Fixed(r)) = &plan.recipe else {
        return Ok(());
    };
    // An unresolvable toolchain is the first step's error, reported as steps report it.
    let Ok(resolve::Resolved {
        choice: resolve::Choice::Managed(p),
        ..
    }) = resolve::resolve(&plan.pins, r, None)
    else {
        return Ok(());
    };
    let mut progress = crate::engines::toolchain::progress::InstallProgress::new(g.quiet || g.json);
    let done = resolve::ensure(
        &p,
        plan.pins.project.as_deref(),
        plan.offline,
        &mut progress,
    );
    progress.finish();
    done.with_context(|| format!("failed to provide the toolchain of recipe `{}`", r.name))?;
    Ok(())
}
