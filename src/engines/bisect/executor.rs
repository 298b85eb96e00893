//! The executor boundary: where a bisection step runs.
//!
//! The driver ([`super::run`]) asks an [`Executor`] to evaluate one commit and gets back
//! the typed step record ([`Step`]); it never learns where the step ran. The local executor
//! ([`super::local::LocalExecutor`]) evaluates on this machine, the Slurm executor
//! ([`super::slurm::SlurmExecutor`]) as a cluster job with one GPU; a new engine is a new
//! executor.

use git2::Oid;

use super::plan::{BisectError, Event, Step};

/// One step the driver wants evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepRequest {
    /// The commit's position in the range (0 = the older end).
    pub index: usize,
    /// The commit.
    pub commit: Oid,
    /// Which of the executor's parallel workers runs it (`0..width()`); steps of one round
    /// have distinct slots.
    pub slot: usize,
    /// Bench: the commit (and its index) to judge against, measured where this step runs;
    /// `None` for the good end itself, whose samples become the baseline.
    pub baseline: Option<(usize, Oid)>,
}

/// Runs bisection steps somewhere and returns their records.
pub trait Executor: Sync {
    /// How many steps may run at once.
    fn width(&self) -> usize;

    /// Evaluates one step. Errors stop the bisection (or, with `--keep-going`, a fatal
    /// error makes the commit a skip); they never stand for a verdict.
    fn run(
        &self,
        req: &StepRequest,
        events: &(dyn Fn(Event<'_>) + Sync),
    ) -> Result<Step, BisectError>;

    /// Prepares a commit that may be asked for next (a speculative build). Optional.
    fn prefetch(&self, _commit: Oid) {}

    /// The commit's subject line, for steps the driver makes up itself.
    fn subject(&self, _commit: Oid) -> String {
        String::new()
    }

    /// How progress lines and errors name the commit (a short hash; a compiler release
    /// for a toolchain bisection, whose "commits" are releases).
    fn label(&self, commit: Oid) -> String {
        crate::foundation::git::short(commit)
    }
}
