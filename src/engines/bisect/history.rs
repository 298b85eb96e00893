//! Reading history for a bisection, strictly read-only: resolving revisions, listing the
//! commits between the ends, describing commits, and materialising a commit's files into
//! a temporary directory. The user's working tree, index, HEAD, refs and stash are never
//! touched: everything comes from the object database through git2.

use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository, Sort, TreeWalkMode, TreeWalkResult};

use crate::engines::build::inputs::{FileSource, InputError};
use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// What every message about a blob that the object database lacks says.
pub const MISSING_BLOB: &str = "is missing from the repository";

/// Why history cannot be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
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
    /// A git operation failed.
    #[error("git: {0}")]
    Git(#[from] git2::Error),
}

/// Opens the repository containing `dir`.
pub fn open(dir: &Path) -> Result<Repository, HistoryError> {
    Repository::discover(dir).map_err(|_| HistoryError::NotARepository {
        dir: dir.to_path_buf(),
    })
}

/// Resolves a revision (`HEAD~3`, a tag, a hash prefix) to a commit.
pub fn resolve(repo: &Repository, rev: &str) -> Result<Oid, HistoryError> {
    let obj = repo
        .revparse_single(rev)
        .map_err(|_| HistoryError::UnknownRevision {
            rev: rev.to_string(),
        })?;
    let commit = obj
        .peel_to_commit()
        .map_err(|_| HistoryError::UnknownRevision {
            rev: rev.to_string(),
        })?;
    Ok(commit.id())
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
            commit: short(older),
        });
    }
    if !repo.graph_descendant_of(newer, older)? {
        let merge_base = repo
            .merge_base(older, newer)
            .map(|b| format!(", their merge base is {}", short(b)))
            .unwrap_or_default();
        return Err(HistoryError::NotAncestor {
            older: short(older),
            newer: short(newer),
            merge_base,
        });
    }
    let mut walk = repo.revwalk()?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE)?;
    if first_parent {
        walk.simplify_first_parent()?;
    }
    walk.push(newer)?;
    walk.hide(older)?;
    let mut list = vec![older];
    for oid in walk {
        list.push(oid?);
    }
    Ok(list)
}

/// A 12-digit abbreviation.
pub fn short(oid: Oid) -> String {
    oid.to_string()[..12].to_string()
}

pub use crate::foundation::records::CommitInfo;

/// A commit's subject line, without the cost of a diffstat.
pub fn subject(repo: &Repository, oid: Oid) -> Result<String, HistoryError> {
    Ok(repo
        .find_commit(oid)?
        .summary()
        .unwrap_or_default()
        .to_string())
}

/// Describes a commit.
pub fn describe(repo: &Repository, oid: Oid) -> Result<CommitInfo, HistoryError> {
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

/// A commit's files, read from the object database.
pub struct CommitFiles<'r> {
    repo: &'r Repository,
    tree: git2::Tree<'r>,
}

impl<'r> CommitFiles<'r> {
    /// The files of `commit`.
    pub fn new(repo: &'r Repository, commit: Oid) -> Result<Self, HistoryError> {
        let tree = repo.find_commit(commit)?.tree()?;
        Ok(CommitFiles { repo, tree })
    }

    /// The tree id (commits with the same tree have the same files).
    pub fn tree_id(&self) -> Oid {
        self.tree.id()
    }

    /// The repository.
    pub fn repo(&self) -> &'r Repository {
        self.repo
    }

    /// Every file path in the tree (names only; no blob is read).
    pub fn paths(&self) -> Vec<String> {
        self.all_entries().into_iter().map(|e| e.path).collect()
    }

    /// Every file in the tree with its blob id and mode, from one walk (no blob is read).
    pub fn all_entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        let _ = self.tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(ObjectType::Blob) {
                out.push(Entry {
                    path: format!("{dir}{}", entry.name().unwrap_or_default()),
                    id: entry.id(),
                    mode: entry.filemode(),
                });
            }
            TreeWalkResult::Ok
        });
        out
    }

    /// The entries of the given paths; a path that is not a file here is an error.
    pub fn entries_of(&self, paths: &[String]) -> Result<Vec<Entry>, InputError> {
        paths
            .iter()
            .map(|rel| {
                self.tree
                    .get_path(Path::new(rel))
                    .ok()
                    .filter(|e| e.kind() == Some(ObjectType::Blob))
                    .map(|e| Entry {
                        path: rel.clone(),
                        id: e.id(),
                        mode: e.filemode(),
                    })
                    .ok_or_else(|| InputError::Read {
                        path: rel.clone(),
                        reason: "not in this commit".into(),
                    })
            })
            .collect()
    }

    /// The files that a pathspec (git's rules) matches.
    pub fn entries_matching(&self, spec: &git2::Pathspec) -> Vec<Entry> {
        // Only subtrees the pathspec can reach are walked when it is a plain prefix list,
        // but a tree walk is cheap next to writing files: filter the full listing.
        self.all_entries()
            .into_iter()
            .filter(|e| spec.matches_path(Path::new(&e.path), git2::PathspecFlags::DEFAULT))
            .collect()
    }
}

/// One file of a commit's tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its path, relative to the root.
    pub path: String,
    /// Its blob.
    pub id: Oid,
    /// Its git file mode.
    pub mode: i32,
}

/// One rename of a followed file: at `commit`, `old` became `new`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    /// The commit that renamed it.
    pub commit: Oid,
    /// The name before.
    pub old: String,
    /// The name after.
    pub new: String,
}

/// The renames of `path` in the history of `start`, newest first, found as `git log
/// --follow` finds them (git's similarity detection). With `offline`, git is told not to
/// fetch blobs lazily (a partial clone then finds exact renames only).
pub fn follow_renames(
    repo: &Repository,
    start: Oid,
    path: &str,
    offline: bool,
) -> Result<Vec<Rename>, crate::foundation::process::ProcessError> {
    let mut cmd = crate::foundation::process::Cmd::new("git")
        .arg("--git-dir")
        .arg(repo.path())
        .args([
            "-c",
            "maintenance.auto=false",
            "log",
            "--follow",
            "-M",
            "--name-status",
            "--format=%x01%H",
        ])
        .arg(start.to_string())
        .arg("--")
        .arg(path)
        .env("GIT_TERMINAL_PROMPT", "0")
        .timeout(std::time::Duration::from_secs(600));
    if offline {
        cmd = cmd.env("GIT_NO_LAZY_FETCH", "1");
    }
    let out = cmd.run()?;
    Ok(parse_follow(&out.stdout_str()))
}

/// Reads the renames out of `git log --follow --name-status --format=%x01%H`.
fn parse_follow(text: &str) -> Vec<Rename> {
    let mut out = Vec::new();
    let mut commit = None;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix('\u{1}') {
            commit = Oid::from_str(h.trim()).ok();
            continue;
        }
        let mut parts = line.split('\t');
        let status = parts.next().unwrap_or_default();
        if let (true, Some(old), Some(new), Some(c)) =
            (status.starts_with('R'), parts.next(), parts.next(), commit)
        {
            out.push(Rename {
                commit: c,
                old: old.to_string(),
                new: new.to_string(),
            });
        }
    }
    out
}

/// The name that a file called `path` in newer history had at `commit`, given the renames
/// of `path` (newest first): every rename made after `commit` is undone.
pub fn name_at(repo: &Repository, renames: &[Rename], path: &str, commit: Oid) -> String {
    let mut name = path.to_string();
    for r in renames {
        if r.commit == commit || repo.graph_descendant_of(commit, r.commit).unwrap_or(false) {
            // This rename is already in `commit`'s history, and so are the older ones.
            break;
        }
        if r.new == name {
            name = r.old.clone();
        }
    }
    name
}

impl FileSource for CommitFiles<'_> {
    fn is_file(&self, rel: &str) -> bool {
        self.tree
            .get_path(Path::new(rel))
            .is_ok_and(|e| e.kind() == Some(ObjectType::Blob))
    }
    fn read(&self, rel: &str) -> Result<Vec<u8>, InputError> {
        let entry = self
            .tree
            .get_path(Path::new(rel))
            .map_err(|_| InputError::Read {
                path: rel.to_string(),
                reason: "not in this commit".into(),
            })?;
        let blob = self
            .repo
            .find_blob(entry.id())
            .map_err(|e| InputError::Read {
                path: rel.to_string(),
                reason: format!("its blob {} {MISSING_BLOB} ({})", entry.id(), e.message()),
            })?;
        Ok(blob.content().to_vec())
    }
}

impl Diagnose for HistoryError {
    fn exit_code(&self) -> u8 {
        match self {
            HistoryError::Git(_) => exit::IO,
            _ => exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            HistoryError::UnknownRevision { .. } => Some("use a commit hash, a branch, a tag, or HEAD~N".into()),
            HistoryError::NotAncestor { .. } => Some("--good must be an ancestor of --bad (with --find fixed, --bad an ancestor of --good)".into()),
            HistoryError::SameCommit { .. } => Some("give two different commits".into()),
            HistoryError::NotARepository { .. } => Some("run it inside the repository, or pass -C DIR".into()),
            HistoryError::Git(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_are_read_from_git_log_follow() {
        let text = "\u{1}1111111111111111111111111111111111111111\n\nM\tk/new.cu\n\u{1}2222222222222222222222222222222222222222\n\nR092\told/a.cu\tk/new.cu\n\u{1}3333333333333333333333333333333333333333\n\nA\told/a.cu\n";
        let r = parse_follow(text);
        assert_eq!(
            r,
            [Rename {
                commit: Oid::from_str("2222222222222222222222222222222222222222").unwrap(),
                old: "old/a.cu".into(),
                new: "k/new.cu".into()
            }]
        );
    }
}
