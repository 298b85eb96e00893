//! Bisection: find the first commit whose build breaks, whose check fails, or whose
//! benchmark got slower, without touching the user's working tree.

pub mod decide;
pub mod executor;
pub mod history;
pub mod local;
pub mod plan;
pub mod run;
pub mod search;
pub mod slurm;
pub mod toolchains;

use git2::{Oid, Repository};

/// A step's time limit unless `--timeout` gives another (`repro bisect`'s default, 10m).
/// A step's key names its limit only where it is another: steps that ran into a limit
/// answer for that limit alone.
pub const DEFAULT_STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

use crate::foundation::store::Store;
use local::LocalExecutor;
use run::{BisectError, Event, Plan, Report};

/// Runs a bisection over `commits` (oldest first) on this machine. `events` is told about
/// each step.
pub fn bisect(
    repo: &Repository,
    store: Store,
    plan: &Plan,
    commits: &[Oid],
    events: &(dyn Fn(Event<'_>) + Sync),
) -> Result<Report, BisectError> {
    run::prepare(repo, &store, plan, commits)?;
    let newest = *commits.last().expect("a range has two ends");
    let executor = LocalExecutor::new(repo, store, plan, newest);
    run::drive(&executor, plan, commits, events)
}
