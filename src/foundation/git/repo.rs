//! Reading a repository's history with git2, strictly read-only: opening it, resolving
//! revisions, walking the commits between two ends, and describing commits.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository, Sort};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
pub use crate::foundation::records::CommitInfo;

/// Why a repository or a revision cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// Not in a repository.
    #[error("{} is not inside a git repository", .dir.display())]
    NotARepository {
        /// Where we looked.
        dir: PathBuf,
    },
    /// A revision that names nothing.
    #[error("unknown revision `{rev}`")]
    UnknownRevision {
        /// The revision as given.
        rev: String,
    },
    /// A git operation failed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

impl Diagnose for GitError {
    fn exit_code(&self) -> u8 {
        match self {
            GitError::Git(_) => exit::IO,
            _ => exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            GitError::UnknownRevision { .. } => {
                Some("use a commit hash, a branch, a tag, or HEAD~N".into())
            }
            GitError::NotARepository { .. } => {
                Some("run it inside the repository, or pass -C DIR".into())
            }
            GitError::Git(_) => None,
        }
    }
}

/// Opens the repository containing `dir`.
pub fn open(dir: &Path) -> Result<Repository, GitError> {
    Repository::discover(dir).map_err(|_| GitError::NotARepository {
        dir: dir.to_path_buf(),
    })
}

/// Resolves a revision (`HEAD~3`, a tag, a hash prefix) to a commit.
pub fn resolve(repo: &Repository, rev: &str) -> Result<Oid, GitError> {
    let unknown = |_| GitError::UnknownRevision {
        rev: rev.to_string(),
    };
    let obj = repo.revparse_single(rev).map_err(unknown)?;
    let commit = obj.peel_to_commit().map_err(unknown)?;
    Ok(commit.id())
}

/// Whether `newer` descends from `older` (a commit is not its own descendant).
pub fn descends_from(repo: &Repository, newer: Oid, older: Oid) -> Result<bool, GitError> {
    Ok(repo.graph_descendant_of(newer, older)?)
}

/// The merge base of two commits, if they have one.
pub fn merge_base(repo: &Repository, a: Oid, b: Oid) -> Option<Oid> {
    repo.merge_base(a, b).ok()
}

/// The commits reachable from `newer` but not from `older`, oldest first (`git rev-list
/// --topo-order --reverse older..newer`). With `first_parent`, only the first-parent chain
/// of `newer` is followed.
pub fn rev_list(
    repo: &Repository,
    older: Oid,
    newer: Oid,
    first_parent: bool,
) -> Result<Vec<Oid>, GitError> {
    let mut walk = repo.revwalk()?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE)?;
    if first_parent {
        walk.simplify_first_parent()?;
    }
    walk.push(newer)?;
    walk.hide(older)?;
    let mut list = Vec::new();
    for oid in walk {
        list.push(oid?);
    }
    Ok(list)
}

/// Every commit reachable from HEAD, oldest first (`git rev-list --topo-order --reverse
/// HEAD`).
pub fn head_history(repo: &Repository) -> Result<Vec<Oid>, GitError> {
    let mut walk = repo.revwalk()?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE)?;
    walk.push_head()?;
    Ok(walk.filter_map(Result::ok).collect())
}

/// A 12-digit abbreviation.
pub fn short(oid: Oid) -> String {
    oid.to_string()[..12].to_string()
}

/// A commit's subject line, without the cost of a diffstat.
pub fn subject(repo: &Repository, oid: Oid) -> Result<String, GitError> {
    Ok(repo
        .find_commit(oid)?
        .summary()
        .unwrap_or_default()
        .to_string())
}

/// Describes a commit.
pub fn describe(repo: &Repository, oid: Oid) -> Result<CommitInfo, GitError> {
    let c = repo.find_commit(oid)?;
    let a = c.author();
    let secs = u64::try_from(a.when().seconds()).unwrap_or(0);
    let date = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
    )
    .to_string();
    let diffstat = diffstat(repo, &c).unwrap_or_else(|e| format!("(no diffstat: {})", e.message()));
    Ok(CommitInfo {
        hash: oid.to_string(),
        author: format!("{} <{}>", a.name().unwrap_or("?"), a.email().unwrap_or("?")),
        date,
        subject: c.summary().unwrap_or_default().to_string(),
        diffstat,
    })
}

/// Files changed against the first parent, with insertions and deletions. It needs the
/// blobs of both commits, which a partial clone may lack: then the caller says so.
fn diffstat(repo: &Repository, c: &git2::Commit) -> Result<String, git2::Error> {
    let tree = c.tree()?;
    let parent_tree = c.parent(0).ok().map(|p| p.tree()).transpose()?;
    let diff = repo.diff_tree_to_tree(parent_tree.as_ref(), Some(&tree), None)?;
    let stats = diff.stats()?;
    let mut files: Vec<String> = Vec::new();
    for d in diff.deltas() {
        if let Some(p) = d.new_file().path().or(d.old_file().path()) {
            files.push(p.display().to_string());
        }
    }
    Ok(format!(
        "{} file{} changed, {} insertion{}(+), {} deletion{}(-): {}",
        stats.files_changed(),
        if stats.files_changed() == 1 { "" } else { "s" },
        stats.insertions(),
        if stats.insertions() == 1 { "" } else { "s" },
        stats.deletions(),
        if stats.deletions() == 1 { "" } else { "s" },
        files.join(", ")
    ))
}
