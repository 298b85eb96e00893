//! The bisection's view of history: the range between the two ends, with the rules a
//! bisection puts on it (two different commits, one an ancestor of the other), and a
//! commit's files as the inputs of a build. Reading git itself is `foundation::git`'s.

use git2::{Oid, Repository};

use crate::engines::build::inputs::{FileSource, InputError};
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::git::{self, CommitFiles, GitError};

/// Why the range of a bisection cannot be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// Good and bad are the same commit.
    #[error("the two ends are the same commit ({commit})")]
    SameCommit {
        /// The commit.
        commit: String,
    },
    /// The older end is not an ancestor of the newer one.
    #[error("{older} is not an ancestor of {newer}{merge_base}")]
    NotAncestor {
        /// The older end.
        older: String,
        /// The newer end.
        newer: String,
        /// ", their merge base is X" when there is one.
        merge_base: String,
    },
    /// Reading the repository failed.
    #[error(transparent)]
    Git(#[from] GitError),
}

/// The commits from `older` to `newer`, both included, oldest first. With `first_parent`,
/// only the first-parent chain of `newer` is followed (merged branches count as one step).
pub fn commits_between(
    repo: &Repository,
    older: Oid,
    newer: Oid,
    first_parent: bool,
) -> Result<Vec<Oid>, HistoryError> {
    if older == newer {
        return Err(HistoryError::SameCommit {
            commit: git::short(older),
        });
    }
    if !git::repo::descends_from(repo, newer, older)? {
        let merge_base = git::repo::merge_base(repo, older, newer)
            .map(|b| format!(", their merge base is {}", git::short(b)))
            .unwrap_or_default();
        return Err(HistoryError::NotAncestor {
            older: git::short(older),
            newer: git::short(newer),
            merge_base,
        });
    }
    let mut list = vec![older];
    list.extend(git::repo::rev_list(repo, older, newer, first_parent)?);
    Ok(list)
}

/// A commit's files are what a step's build reads (its recipe and include closure), and
/// what `--recipe-at` and bundles read recipes from.
impl FileSource for CommitFiles<'_> {
    fn is_file(&self, rel: &str) -> bool {
        self.has_file(rel)
    }
    fn read(&self, rel: &str) -> Result<Vec<u8>, InputError> {
        self.blob_at(rel).map_err(|e| InputError::Read {
            path: e.path().to_string(),
            reason: e.reason(),
        })
    }
}

impl Diagnose for HistoryError {
    fn exit_code(&self) -> u8 {
        match self {
            HistoryError::Git(e) => e.exit_code(),
            _ => exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            HistoryError::NotAncestor { .. } => Some("--good must be an ancestor of --bad (with --find fixed, --bad an ancestor of --good)".into()),
            HistoryError::SameCommit { .. } => Some("give two different commits".into()),
            HistoryError::Git(e) => e.hint(),
        }
    }
}
