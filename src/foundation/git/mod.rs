//! Every access to git: the one module that reads repositories and starts `git`.
//!
//! This file holds the repository probe (root, HEAD, branch, tree and uncommitted changes,
//! read with git2; nothing is written). The submodules hold the rest of the plumbing:
//! - [`repo`]: opening a repository, resolving revisions, walking ranges, describing
//!   commits (git2, read-only);
//! - [`tree`]: a commit's files read from the object database ([`CommitFiles`]);
//! - [`log`]: following a file's renames (`git log --follow`);
//! - [`worktree`]: writing a commit's files into scratch directories, sparse or whole and
//!   kept up to date from step to step ([`Worktree`]);
//! - [`fetch`]: fetching the blobs a partial clone lacks from its promisor remote;
//! - [`command`]: the `git` command line, for what libgit2 cannot do (lazy fetches,
//!   rename detection, pushing and fetching refs).
//!
//! The user's working tree, index, HEAD, refs and config are never changed here. What
//! a caller does with history (a bisection's range, a bundle's commits) is its own policy.

use std::path::{Path, PathBuf};

use git2::{Repository, Status, StatusOptions};
use sha2::{Digest, Sha256};

use crate::foundation::fields::{Field, Fields};

pub mod command;
pub mod fetch;
pub mod log;
pub mod repo;
pub mod tree;
pub mod worktree;

pub use fetch::Fetcher;
pub use log::{Rename, follow_renames, name_at};
pub use repo::{GitError, describe, open, resolve, short, subject};
pub use tree::{CommitFiles, Entry, MISSING_BLOB};
pub use worktree::{CheckoutError, Worktree, write_sparse};

/// Internal: the project root a child repro must use instead of discovering one (set by
/// bisection steps, whose scratch trees lie inside the user's repository).
pub const PROJECT_ROOT_VAR: &str = "REPRO_PROJECT_ROOT";

/// The working-tree root of the repository containing `dir`, if any.
pub fn discover_root(dir: &Path) -> Option<PathBuf> {
    note_discovery(dir);
    let repo = Repository::discover(dir).ok()?;
    // git2 gives the working directory with a trailing slash; normalise it away.
    repo.workdir().map(|p| p.components().collect())
}

/// Notes (for a build hit's stamp) what libgit2's discovery from `dir` reads: the `.git`
/// of every directory up to `/` (libgit2 passes over one that is no repository, so all of
/// them, not only up to the first), each one's config, and the user's and the system's
/// config (which may mark a repository safe for another owner). A `.git` file (a linked
/// worktree, a submodule) leads further: no stamp then.
fn note_discovery(dir: &Path) {
    use crate::foundation::stamp;
    if !stamp::on() {
        return;
    }
    let mut configs = Vec::new();
    // libgit2 walks up from the path with its links resolved: both ways up are noted.
    let real = dir.canonicalize().ok();
    for d in dir
        .ancestors()
        .chain(real.iter().flat_map(|r| r.ancestors()))
    {
        let g = stamp::noted(&d.join(".git")).to_path_buf();
        match std::fs::symlink_metadata(&g) {
            Ok(m) if m.is_dir() => {
                // What makes a directory a repository to libgit2, and its settings.
                for entry in ["HEAD", "objects", "refs", "commondir"] {
                    stamp::note(&g.join(entry));
                }
                configs.push(g.join("config"));
            }
            Ok(_) => return stamp::refuse("a .git on the way is not a directory"),
            Err(_) => {}
        }
    }
    configs.push(PathBuf::from("/etc/gitconfig"));
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(home) = env("HOME") {
        configs.push(home.join(".gitconfig"));
        configs.push(home.join(".config/git/config"));
    }
    if let Some(xdg) = env("XDG_CONFIG_HOME") {
        configs.push(xdg.join("git/config"));
    }
    for c in configs {
        // A config that includes others (`[include]`, `[includeIf]`) reaches files this
        // does not follow; one that cannot be read is not vouched for either. (The bounded
        // read notes it, and follows a link, as dotfile managers make them.)
        match crate::foundation::fsutil::read_bounded(&c, 1 << 20) {
            Ok(text)
                if !String::from_utf8_lossy(&text)
                    .to_ascii_lowercase()
                    .contains("[include") => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => return stamp::refuse("a git config includes other files, or cannot be read"),
        }
    }
}

/// The first file that the index of the repository containing `dir` tracks under `dir`,
/// if any. A store committed to a repository holds records made by whoever made the
/// commit, sealed by a checksum anyone can recompute.
pub fn tracked_under(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let parent = dir.parent()?.canonicalize().ok()?;
    let repo = Repository::discover(&parent).ok()?;
    let workdir = repo.workdir()?.canonicalize().ok()?;
    let abs = parent.join(dir.file_name()?);
    let rel = abs.strip_prefix(&workdir).ok()?.to_path_buf();
    let index = repo.index().ok()?;
    index.iter().find_map(|e| {
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(&e.path));
        p.starts_with(&rel).then(|| workdir.join(p))
    })
}

/// [`tracked_under`], answered from this user's cache while the repository's index file is
/// the same file, unchanged (its device, inode, size, modification and change times): on a
/// warm `repro build` hit, discovering the repository and reading its index took about a
/// third of the command's own time. Only a "nothing tracked" answer is kept.
pub fn tracked_under_cached(dir: &Path) -> Option<PathBuf> {
    let cache = crate::foundation::fsutil::cache_dir().map(|d| d.join("untracked-stores.json"));
    tracked_under_cached_in(dir, cache.as_deref())
}

/// [`tracked_under_cached`] with the cache file `cache` (None: no cache).
fn tracked_under_cached_in(dir: &Path, cache: Option<&Path>) -> Option<PathBuf> {
    use crate::foundation::fsutil::{read_keyed, write_keyed};
    let key = || index_stamp(dir).map(|s| format!("{}|{s}", dir.display()));
    let before = cache.and(key());
    if let (Some(cache), Some(k)) = (cache, &before)
        && read_keyed::<bool>(cache, UNTRACKED_SCHEMA, k) == Some(true)
    {
        return None;
    }
    let found = tracked_under(dir);
    // Kept only when the index did not change while it was read.
    if let (None, Some(cache), Some(k)) = (&found, cache, &before)
        && key().as_ref() == Some(k)
    {
        write_keyed(cache, UNTRACKED_SCHEMA, k, true);
    }
    found
}

/// The schema of the cache file of stores found untracked.
const UNTRACKED_SCHEMA: u32 = 1;

/// The index file of the repository whose working tree holds `dir`'s parent (found as
/// libgit2's discovery finds it: the nearest `.git` directory, or `.git` file naming one)
/// and its identity: the path, device, inode, size, and modification and change times.
/// None where the environment redirects git (GIT_DIR and its kin), where no index exists,
/// or where `.git` is anything else: the caller then asks libgit2.
fn index_stamp(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    const REDIRECTS: [&str; 6] = [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_CEILING_DIRECTORIES",
        "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    ];
    // Where libgit2 alone answers (from files a build hit's stamp does not note), the
    // command gets no stamp.
    let by_libgit2 = |why: &str| {
        crate::foundation::stamp::refuse(why);
        None
    };
    if REDIRECTS.iter().any(|v| std::env::var_os(v).is_some()) {
        return by_libgit2("git is redirected by the environment");
    }
    let Some(start) = dir.parent().and_then(|p| p.canonicalize().ok()) else {
        return by_libgit2("the store's parent cannot be resolved");
    };
    // No `.git` anywhere up: no repository, which the noted absences stand for.
    let (top, dotgit, meta) = start.ancestors().find_map(|d| {
        let g = crate::foundation::stamp::noted(&d.join(".git")).to_path_buf();
        let m = std::fs::symlink_metadata(&g).ok()?;
        Some((d.to_path_buf(), g, m))
    })?;
    let gitdir = if meta.is_dir() {
        dotgit
    } else if meta.is_file() {
        // A linked worktree's or a submodule's `.git` file: `gitdir: PATH`.
        let target = crate::foundation::fsutil::read_regular(&dotgit, 4096)
            .ok()
            .and_then(|t| String::from_utf8(t).ok())
            .and_then(|t| Some(top.join(t.strip_prefix("gitdir:")?.trim())));
        match target {
            Some(t) => t,
            None => return by_libgit2("a .git file names no git directory"),
        }
    } else {
        return by_libgit2("a .git is neither a directory nor a file");
    };
    let index = gitdir.join("index");
    let m = std::fs::metadata(crate::foundation::stamp::noted(&index)).ok()?;
    Some(format!(
        "{}|{}:{}:{}:{}.{}:{}.{}",
        index.display(),
        m.dev(),
        m.ino(),
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// Whether the working tree has changes (ignored files and repro's store excluded).
pub fn is_dirty(dir: &Path) -> bool {
    let Ok(repo) = Repository::discover(dir) else {
        return false;
    };
    let Some(root) = repo.workdir().map(Path::to_path_buf) else {
        return false;
    };
    matches!(dirty_digest(&repo, &root), Ok(Some(_)))
}

/// The digest of the files of `files` (paths relative to `dir`, with their bytes) that
/// differ from HEAD's version or are not in HEAD, or `None` when all are as committed (or
/// `dir` is not in a repository). Only these files are compared, so a build is marked dirty
/// when what it read is uncommitted, not when some other file is, and no status scan of
/// the whole tree is paid for.
pub fn changed_from_head(
    dir: &Path,
    files: &std::collections::BTreeMap<String, Vec<u8>>,
) -> Option<String> {
    let repo = Repository::discover(dir).ok()?;
    let workdir = repo.workdir()?.canonicalize().ok()?;
    let prefix = dir
        .canonicalize()
        .ok()?
        .strip_prefix(&workdir)
        .ok()?
        .to_path_buf();
    let tree = repo.head().ok()?.peel_to_tree().ok();
    let mut h = Sha256::new();
    let mut any = false;
    for (rel, bytes) in files {
        let path = prefix.join(rel);
        let committed = tree
            .as_ref()
            .and_then(|t| t.get_path(&path).ok())
            .map(|e| e.id());
        let here = git2::Oid::hash_object(git2::ObjectType::Blob, bytes).ok();
        if committed.is_none() || committed != here {
            any = true;
            h.update(rel.as_bytes());
            h.update([0]);
            h.update(Sha256::digest(bytes));
        }
    }
    any.then(|| hex::encode(h.finalize()))
}

/// The HEAD commit of the repository containing `dir`, if there is one.
pub fn head_commit(dir: &Path) -> Option<String> {
    let repo = Repository::discover(dir).ok()?;
    let id = repo.head().ok()?.peel_to_commit().ok()?.id();
    Some(id.to_string())
}

/// Probes the repository containing `dir`.
pub fn probe(dir: &Path) -> Fields {
    let mut f = Fields::new();
    let repo = match Repository::discover(dir) {
        Ok(r) => r,
        Err(_) => {
            f.insert(
                "repo".into(),
                Field::Unavailable(format!("{} is not inside a git repository", dir.display())),
            );
            return f;
        }
    };
    let Some(root) = repo
        .workdir()
        .map(|p| p.components().collect::<std::path::PathBuf>())
    else {
        f.insert(
            "repo".into(),
            Field::Unavailable("a bare repository has no working tree".into()),
        );
        return f;
    };
    f.insert("repo.root".into(), Field::Value(root.display().to_string()));
    match repo.head() {
        Ok(head) => {
            let branch = if head.is_branch() {
                head.shorthand().unwrap_or("(non-UTF-8 name)")
            } else {
                "(detached)"
            };
            f.insert("repo.branch".into(), Field::Value(branch.into()));
            match head.peel_to_commit() {
                Ok(c) => {
                    f.insert("repo.head".into(), Field::Value(c.id().to_string()));
                    f.insert("repo.tree".into(), Field::Value(c.tree_id().to_string()));
                }
                Err(e) => {
                    f.insert(
                        "repo.head".into(),
                        Field::Unavailable(e.message().to_string()),
                    );
                }
            }
        }
        Err(_) => {
            let why = Field::Unavailable("no commits yet".into());
            f.insert("repo.head".into(), why.clone());
            f.insert("repo.tree".into(), why);
            f.insert(
                "repo.branch".into(),
                Field::Unavailable("no commits yet".into()),
            );
        }
    }
    match dirty_digest(&repo, &root) {
        Ok(None) => {
            f.insert("repo.dirty".into(), Field::Value("false".into()));
            f.insert(
                "repo.dirty-digest".into(),
                Field::Unavailable("the tree is clean".into()),
            );
        }
        Ok(Some(d)) => {
            f.insert("repo.dirty".into(), Field::Value("true".into()));
            f.insert("repo.dirty-digest".into(), Field::Value(d));
        }
        Err(e) => {
            f.insert(
                "repo.dirty".into(),
                Field::Unavailable(format!("git status failed: {}", e.message())),
            );
        }
    }
    f
}

/// The sha256 of every uncommitted change (path, status, current content), or `None` when
/// the tree is clean. Ignored files do not count.
fn dirty_digest(repo: &Repository, root: &Path) -> Result<Option<String>, git2::Error> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    let statuses = repo.statuses(Some(&mut opts))?;
    let mut changes: Vec<(String, Status)> = statuses
        .iter()
        .filter(|s| s.status() != Status::CURRENT && !s.status().contains(Status::IGNORED))
        // repro's own store is not a change to the sources.
        .filter(|s| !s.path_bytes().starts_with(b".repro/"))
        .map(|s| {
            (
                String::from_utf8_lossy(s.path_bytes()).into_owned(),
                s.status(),
            )
        })
        .collect();
    if changes.is_empty() {
        return Ok(None);
    }
    changes.sort();
    let mut h = Sha256::new();
    for (path, status) in changes {
        h.update(path.as_bytes());
        h.update([0]);
        h.update(status.bits().to_le_bytes());
        match std::fs::read(root.join(&path)) {
            Ok(bytes) => h.update(Sha256::digest(&bytes)),
            Err(_) => h.update(b"<absent>"),
        }
    }
    Ok(Some(hex::encode(h.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store found untracked is not looked up in the index again while the index file is
    /// unchanged; once the index changes (the store committed), it is, and is refused.
    #[test]
    fn an_untracked_store_is_cached_until_the_index_changes() {
        let d = tempfile::tempdir().unwrap();
        let repo = Repository::init(d.path()).unwrap();
        std::fs::write(d.path().join("a.txt"), "a").unwrap();
        let mut index = repo.index().unwrap();
        index.add_path(Path::new("a.txt")).unwrap();
        index.write().unwrap();
        let store = d.path().join(".repro");
        std::fs::create_dir(&store).unwrap();
        std::fs::write(store.join("store.json"), "{}").unwrap();
        let cache = d.path().join("cache.json");
        assert_eq!(tracked_under_cached_in(&store, Some(&cache)), None);
        let key = format!("{}|{}", store.display(), index_stamp(&store).unwrap());
        assert_eq!(
            crate::foundation::fsutil::read_keyed::<bool>(&cache, UNTRACKED_SCHEMA, &key),
            Some(true)
        );
        assert_eq!(tracked_under_cached_in(&store, Some(&cache)), None);
        let mut index = repo.index().unwrap();
        index.add_path(Path::new(".repro/store.json")).unwrap();
        index.write().unwrap();
        assert_ne!(
            format!("{}|{}", store.display(), index_stamp(&store).unwrap()),
            key
        );
        let found = tracked_under_cached_in(&store, Some(&cache));
        assert!(found.is_some_and(|f| f.ends_with(".repro/store.json")));
    }

    /// A linked worktree's `.git` file names its index's directory.
    #[test]
    fn a_worktrees_index_is_found_through_its_git_file() {
        let d = tempfile::tempdir().unwrap();
        let gitdir = d.path().join("main.git/worktrees/w");
        std::fs::create_dir_all(&gitdir).unwrap();
        std::fs::write(gitdir.join("index"), "DIRC").unwrap();
        let tree = d.path().join("w");
        std::fs::create_dir_all(tree.join(".repro")).unwrap();
        std::fs::write(tree.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
        let stamp = index_stamp(&tree.join(".repro")).unwrap();
        assert!(
            stamp.starts_with(&format!("{}|", gitdir.join("index").display())),
            "{stamp}"
        );
    }
}
