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

#[cfg(test)]
mod tests {
    use super::*;

    /// An executor that overrides only what it must.
    struct Bare;

    impl Executor for Bare {
        fn width(&self) -> usize {
            1
        }
        fn run(
            &self,
            req: &StepRequest,
            _events: &(dyn Fn(Event<'_>) + Sync),
        ) -> Result<Step, BisectError> {
            Ok(Step::new(req.index, req.commit, self.subject(req.commit)))
        }
    }

    #[test]
    fn an_executor_names_commits_by_short_hash_and_knows_no_subject_unless_told() {
        let commit = Oid::from_str("0123456789abcdef0123456789abcdef01234567").unwrap();
        let e = Bare;
        assert_eq!(e.label(commit), "0123456789ab");
        assert_eq!(e.subject(commit), "");
        e.prefetch(commit);
        let step = e
            .run(
                &StepRequest {
                    index: 3,
                    commit,
                    slot: 0,
                    baseline: None,
                },
                &|_| {},
            )
            .unwrap();
        assert_eq!(
            (step.index, step.commit.as_str(), step.subject.as_str()),
            (3, "0123456789abcdef0123456789abcdef01234567", "")
        );
    }
}
