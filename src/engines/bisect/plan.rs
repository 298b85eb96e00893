//! What a bisection asks and what each step answers: the question, the plan every
//! executor works from, the typed step record, the events a caller is told about, and the
//! bisection's errors. The driver ([`super::run`]) and the executors ([`super::local`],
//! [`super::slurm`]) share these types; none of them is defined by another's module.

use std::time::Duration;

use serde_json::{Value, json};

use super::decide::Direction;
use crate::engines::bench::Metric;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::recipe::Recipe;
use crate::foundation::records::Settings;

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
    pub(crate) fn key_json(&self) -> Value {
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
    /// The project's pinned toolchains, for the builds the steps run in this process.
    pub pins: crate::engines::toolchain::Pins,
    /// `--python`: the interpreter of torch-extension builds and Python-call steps.
    pub python: Option<std::path::PathBuf>,
}

impl Plan {
    /// How many commits one round evaluates at once on this machine. A performance step
    /// is one commit at a time, its processes spread over every GPU (each judged against
    /// its own baseline); a check is one commit per GPU; builds and scripts `--jobs`.
    pub fn width(&self) -> usize {
        match self.question {
            Question::Bench(_) => 1,
            Question::Check => self.devices.len().max(1),
            _ => self.jobs.max(1),
        }
    }

    /// This plan with its GPU work on `device`.
    pub(crate) fn on_device(&self, device: usize) -> Plan {
        let mut p = self.clone();
        if let Question::Bench(b) = &mut p.question {
            b.settings.device = device;
        }
        p.devices = vec![device];
        p
    }
}

pub use crate::foundation::records::{Recheck, Step};

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
        source: StepError,
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

/// Why a step cannot be evaluated at all, whatever the commit: the cause of
/// [`BisectError::Fatal`]. An executor's own failures (a Slurm job lost) are its own
/// types, carried as [`StepError::Executor`]: this module is below the executors.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The repository cannot be read.
    #[error(transparent)]
    Repository(Box<crate::foundation::git::GitError>),
    /// git refused a request (a pathspec, opening the repository).
    #[error(transparent)]
    Git(#[from] git2::Error),
    /// The step's tree cannot be written.
    #[error(transparent)]
    Checkout(Box<crate::foundation::git::CheckoutError>),
    /// A scratch directory cannot be made in the store.
    #[error("cannot create a scratch directory in {}", dir.display())]
    Scratch {
        /// The store's scratch space.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file of the step cannot be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The build could not be attempted (no compiler, an unreadable store).
    #[error(transparent)]
    Build(Box<crate::engines::build::BuildError>),
    /// The store failed.
    #[error(transparent)]
    Store(Box<crate::foundation::store::StoreError>),
    /// A child process could not be run.
    #[error(transparent)]
    Process(Box<crate::foundation::process::ProcessError>),
    /// A toolchain release cannot be planned for install.
    #[error(transparent)]
    InstallPlan(Box<crate::engines::toolchain::install::InstallError>),
    /// A toolchain release failed to install.
    #[error("could not install {spec}")]
    Install {
        /// The release.
        spec: String,
        /// Why.
        #[source]
        source: Box<crate::engines::toolchain::install::InstallError>,
    },
    /// Kernels cannot run: there is no GPU driver.
    #[error(
        "{}: check and bench steps run the kernel on a GPU",
        crate::engines::fingerprint::cuda::NO_DRIVER
    )]
    NoDriver,
    /// The benchmark's child process could not be run.
    #[error(transparent)]
    Child(Box<crate::engines::bench::ChildError>),
    /// A performance bisection needs one parameter point.
    #[error(
        "the recipe has {points} parameter points; a performance bisection needs one (pass --param)"
    )]
    Points {
        /// How many the recipe has.
        points: usize,
    },
    /// The baseline of a performance step gave no samples.
    #[error("the baseline could not be measured{}: it is {verdict}{}", .device.map(|d| format!(" on GPU {d}")).unwrap_or_default(), .detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Baseline {
        /// The GPU, where the step ran on one of several.
        device: Option<usize>,
        /// What the baseline's step answered.
        verdict: crate::foundation::records::Answer,
        /// Why.
        detail: Option<String>,
    },
    /// An executor's own failure.
    #[error(transparent)]
    Executor(Box<dyn std::error::Error + Send + Sync>),
}

/// The large causes are boxed, so that a step's result stays small.
macro_rules! boxed_from {
    ($($variant:ident($t:ty)),* $(,)?) => {
        $(impl From<$t> for StepError {
            fn from(e: $t) -> Self {
                StepError::$variant(Box::new(e))
            }
        })*
    };
}
boxed_from!(
    Repository(crate::foundation::git::GitError),
    Checkout(crate::foundation::git::CheckoutError),
    Build(crate::engines::build::BuildError),
    Store(crate::foundation::store::StoreError),
    Process(crate::foundation::process::ProcessError),
    InstallPlan(crate::engines::toolchain::install::InstallError),
    Child(crate::engines::bench::ChildError),
);

/// What a bisection tells its caller as it goes.
pub enum Event<'a> {
    /// What it is doing now.
    Status(&'a str),
    /// A commit was evaluated.
    Step(&'a Step),
}

impl Diagnose for BisectError {
    fn exit_code(&self) -> u8 {
        match self {
            BisectError::Fatal { .. } => exit::ENVIRONMENT,
            BisectError::Input { .. } => exit::USAGE,
            _ => exit::MISMATCH,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            BisectError::BadEnd { which: "good", .. } => Some("choose an older --good where the property holds (repro build/bench at that commit shows why it does not)".into()),
            BisectError::BadEnd { .. } => Some("choose a --bad where it is broken; for performance, a threshold the change exceeds".into()),
            BisectError::Inconsistent(_) => Some("the property is not monotone over this range (flaky test or noise?); narrow the range".into()),
            BisectError::Input { hint, .. } => Some(hint.clone()),
            _ => None,
        }
    }
}
