//! A commit's files, read from the object database: listing a tree (as `git ls-tree -r`)
//! and reading blobs (as `git cat-file blob`), without a working tree.

use std::path::Path;

use git2::{ObjectType, Oid, Repository};

use super::repo::GitError;

/// What every message about a blob that the object database lacks says.
pub const MISSING_BLOB: &str = "is missing from the repository";

/// Why a file of a commit cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// The path is not a file of the commit.
    #[error("cannot read {path}: not in this commit")]
    NotInCommit {
        /// The path, relative to the root.
        path: String,
    },
    /// The file's blob is not in the object database (a partial clone).
    #[error("cannot read {path}: its blob {blob} {MISSING_BLOB} ({detail})")]
    MissingBlob {
        /// The path, relative to the root.
        path: String,
        /// Its blob.
        blob: Oid,
        /// libgit2's message.
        detail: String,
    },
}

impl TreeError {
    /// The path that could not be read.
    pub fn path(&self) -> &str {
        match self {
            TreeError::NotInCommit { path } | TreeError::MissingBlob { path, .. } => path,
        }
    }

    /// Why, without the path.
    pub fn reason(&self) -> String {
        match self {
            TreeError::NotInCommit { .. } => "not in this commit".into(),
            TreeError::MissingBlob { blob, detail, .. } => {
                format!("its blob {blob} {MISSING_BLOB} ({detail})")
            }
        }
    }
}

/// A commit's files, read from the object database.
pub struct CommitFiles<'r> {
    repo: &'r Repository,
    tree: git2::Tree<'r>,
}

impl<'r> CommitFiles<'r> {
    /// The files of `commit`.
    pub fn new(repo: &'r Repository, commit: Oid) -> Result<Self, GitError> {
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
    /// A name that is not UTF-8 is given with U+FFFD in place of its bad bytes (libgit2's
    /// own walk stopped at the first such directory, leaving the rest of the tree out).
    pub fn all_entries(&self) -> Vec<Entry> {
        fn walk(repo: &Repository, tree: &git2::Tree, dir: &str, out: &mut Vec<Entry>) {
            for entry in tree.iter() {
                let name = String::from_utf8_lossy(entry.name_bytes());
                let path = format!("{dir}{name}");
                match entry.kind() {
                    Some(ObjectType::Blob) => out.push(Entry {
                        path,
                        id: entry.id(),
                        mode: entry.filemode(),
                    }),
                    Some(ObjectType::Tree) => {
                        if let Ok(sub) = repo.find_tree(entry.id()) {
                            walk(repo, &sub, &format!("{path}/"), out);
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut out = Vec::new();
        walk(self.repo, &self.tree, "", &mut out);
        out
    }

    /// The entries of the given paths; a path that is not a file here is an error.
    pub fn entries_of(&self, paths: &[String]) -> Result<Vec<Entry>, TreeError> {
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
                    .ok_or_else(|| TreeError::NotInCommit { path: rel.clone() })
            })
            .collect()
    }

    /// The files that a pathspec (git's rules) matches.
    pub fn entries_matching(&self, spec: &git2::Pathspec) -> Vec<Entry> {
        // A tree walk is cheap next to writing files: filter the full listing.
        self.all_entries()
            .into_iter()
            .filter(|e| spec.matches_path(Path::new(&e.path), git2::PathspecFlags::DEFAULT))
            .collect()
    }

    /// Whether `rel` is a file (a blob) of this commit.
    pub fn has_file(&self, rel: &str) -> bool {
        self.tree
            .get_path(Path::new(rel))
            .is_ok_and(|e| e.kind() == Some(ObjectType::Blob))
    }

    /// The bytes of the file `rel` of this commit.
    pub fn blob_at(&self, rel: &str) -> Result<Vec<u8>, TreeError> {
        let entry = self
            .tree
            .get_path(Path::new(rel))
            .map_err(|_| TreeError::NotInCommit {
                path: rel.to_string(),
            })?;
        let blob = self
            .repo
            .find_blob(entry.id())
            .map_err(|e| TreeError::MissingBlob {
                path: rel.to_string(),
                blob: entry.id(),
                detail: e.message().to_string(),
            })?;
        Ok(blob.content().to_vec())
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
