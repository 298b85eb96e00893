//! Scratch trees under a store's `tmp/`, each held by a lease.
//!
//! A tree `tmp/<purpose>-<pid>-<random>` has a lease file beside it,
//! `tmp/<purpose>-<pid>-<random>.lease`, which its owner holds locked (`flock`, exclusive)
//! for as long as the tree lives and which names the owner's host and process (information
//! for a person, never used to decide). Cleanup takes a tree's lease lock before it removes
//! anything: a lock that cannot be taken means the owner is alive, whatever host or PID
//! namespace it runs in (a process ID seen from elsewhere says nothing). A lock is released
//! by the kernel when its holder dies, so a killed owner's tree is removed on the next
//! cleanup.
//!
//! A lease is created and locked just after its tree; a tree without a lease is one being
//! created this instant or one left by a repro from before leases: it is removed only when
//! it is a day old. An unlocked lease that does not yet name its owner is being created and
//! is left alone for a minute.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A lease's file name: the tree's, with this suffix.
const LEASE_SUFFIX: &str = ".lease";

/// How old a tree without a lease must be before cleanup removes it.
const UNLEASED_AGE: Duration = Duration::from_secs(24 * 3600);

/// How old an unlocked lease that names no owner must be before cleanup takes it as stale.
const NEW_LEASE_AGE: Duration = Duration::from_secs(60);

/// A scratch directory, removed when dropped; under a store it holds its lease until then.
#[derive(Debug)]
pub struct Scratch {
    dir: Option<tempfile::TempDir>,
    lease: Option<(std::fs::File, PathBuf)>,
}

impl Scratch {
    /// A scratch directory outside any store (no lease: nothing else cleans it).
    pub fn unleased(dir: tempfile::TempDir) -> Self {
        Scratch {
            dir: Some(dir),
            lease: None,
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        self.dir.as_ref().expect("present until dropped").path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // The tree first, then the lease, whose lock is released last (on close).
        drop(self.dir.take());
        if let Some((file, path)) = self.lease.take() {
            let _ = std::fs::remove_file(&path);
            drop(file);
        }
    }
}

/// Creates a leased scratch tree `<purpose>-<pid>-<random>` in `parent` (`purpose` is
/// lowercase letters only).
pub fn create(parent: &Path, purpose: &str) -> std::io::Result<Scratch> {
    std::fs::create_dir_all(parent)?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("{purpose}-{}-", std::process::id()))
        .tempdir_in(parent)?;
    let path = lease_path(dir.path());
    let mut file = open(&path, true)?;
    fs4::fs_std::FileExt::lock_exclusive(&file)?;
    // Written only once locked: a lease that names its owner and can be locked is stale.
    writeln!(file, "host {}\npid {}", hostname(), std::process::id())?;
    Ok(Scratch {
        dir: Some(dir),
        lease: Some((file, path)),
    })
}

/// A stale tree (or an orphaned lease), its lease lock held until it is removed.
#[derive(Debug)]
pub struct Stale {
    /// The tree (it may be gone already, when only its lease was left).
    pub tree: PathBuf,
    lease: Option<(std::fs::File, PathBuf)>,
}

impl Stale {
    /// Removes the tree and then its lease; returns the bytes freed.
    pub fn remove(self) -> std::io::Result<u64> {
        let mut freed = 0;
        if std::fs::symlink_metadata(&self.tree).is_ok() {
            freed += tree_len(&self.tree);
            std::fs::remove_dir_all(&self.tree)?;
        }
        if let Some((file, path)) = self.lease {
            freed += std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            drop(file);
        }
        Ok(freed)
    }
}

/// Every tree in `parent` whose owner is gone, each with its lease lock taken. Only names
/// of the scratch shape are considered; everything else is left alone.
pub fn stale(parent: &Path) -> Vec<Stale> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(parent) else {
        return out;
    };
    let mut names: Vec<(String, std::fs::FileType)> = entries
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.file_type().ok()?)))
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in &names {
        if kind.is_dir() && is_tree_name(name) {
            let tree = parent.join(name);
            let lease = lease_path(&tree);
            if std::fs::symlink_metadata(&lease).is_ok() {
                if let Some(held) = take_if_stale(&lease) {
                    out.push(Stale {
                        tree,
                        lease: Some(held),
                    });
                }
            } else if older_than(&tree, UNLEASED_AGE) {
                out.push(Stale { tree, lease: None });
            }
        } else if kind.is_file()
            && let Some(tree_name) = name.strip_suffix(LEASE_SUFFIX)
            && is_tree_name(tree_name)
            && !names.iter().any(|(n, _)| n == tree_name)
        {
            // A lease whose tree is gone: its owner died between removing the two.
            let lease = parent.join(name);
            if let Some(held) = take_if_stale(&lease) {
                out.push(Stale {
                    tree: parent.join(tree_name),
                    lease: Some(held),
                });
            }
        }
    }
    out
}

/// The lease, locked, if nobody holds it and it is not one being created.
fn take_if_stale(lease: &Path) -> Option<(std::fs::File, PathBuf)> {
    let file = open(lease, false).ok()?;
    if !fs4::fs_std::FileExt::try_lock_exclusive(&file).unwrap_or(false) {
        return None;
    }
    let named = file.metadata().is_ok_and(|m| m.len() > 0);
    if !named && !older_than(lease, NEW_LEASE_AGE) {
        return None;
    }
    Some((file, lease.to_path_buf()))
}

/// Whether a name is of the scratch shape `<letters>-<digits>-<letters and digits>`.
pub fn is_tree_name(name: &str) -> bool {
    let mut parts = name.splitn(3, '-');
    let (Some(purpose), Some(pid), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    !purpose.is_empty()
        && purpose.bytes().all(|b| b.is_ascii_lowercase())
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && !rest.is_empty()
        && rest.bytes().all(|b| b.is_ascii_alphanumeric())
}

fn lease_path(tree: &Path) -> PathBuf {
    let mut name = tree.file_name().unwrap_or_default().to_os_string();
    name.push(LEASE_SUFFIX);
    tree.with_file_name(name)
}

fn open(path: &Path, create: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(create)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
}

fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|e| e > age)
}

/// A kept tree: `kept/<n>/` under a store's `tmp/`, held by the lock of `kept/<n>.lock`
/// while one process uses it. Unlike a scratch tree it outlives its process, so that the
/// next bisection of the same repository starts from the files the last one wrote instead
/// of writing every file again (see [`crate::foundation::git::Worktree::adopt`]). Nothing
/// in it is trusted: its user checks every file against what it wrote.
#[derive(Debug)]
pub struct Kept {
    /// `kept/<n>/`: the tree in `tree/`, what was written into it in `manifest.json`.
    pub dir: PathBuf,
    _lock: std::fs::File,
}

/// How many kept trees a store holds at most (one per bisection running at once).
pub const MAX_KEPT: usize = 4;

/// Claims a kept tree that no other process holds, creating its directory if needed;
/// `None` when all [`MAX_KEPT`] are in use.
pub fn claim_kept(scratch: &Path) -> std::io::Result<Option<Kept>> {
    let parent = scratch.join("kept");
    std::fs::create_dir_all(&parent)?;
    if !std::fs::symlink_metadata(&parent)?.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            parent.display()
        )));
    }
    for n in 0..MAX_KEPT {
        let lock_path = parent.join(format!("{n}.lock"));
        let file = match open(&lock_path, true) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => open(&lock_path, false)?,
            Err(e) => return Err(e),
        };
        if !fs4::fs_std::FileExt::try_lock_exclusive(&file).unwrap_or(false) {
            continue;
        }
        let dir = parent.join(n.to_string());
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                std::fs::remove_file(&dir)?;
                std::fs::create_dir(&dir)?;
            }
            Err(_) => std::fs::create_dir(&dir)?,
        }
        return Ok(Some(Kept { dir, _lock: file }));
    }
    Ok(None)
}

/// Every kept tree no process holds, its lock taken (for `gc`).
pub fn stale_kept(scratch: &Path) -> Vec<Stale> {
    let parent = scratch.join("kept");
    (0..MAX_KEPT)
        .filter_map(|n| {
            let lease = parent.join(format!("{n}.lock"));
            let file = open(&lease, false).ok()?;
            fs4::fs_std::FileExt::try_lock_exclusive(&file)
                .unwrap_or(false)
                .then(|| Stale {
                    tree: parent.join(n.to_string()),
                    lease: Some((file, lease)),
                })
        })
        .collect()
}

/// This host's name, for a person reading a lease.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The bytes under a path (a file's length, or a directory's files summed; links not followed).
pub fn tree_len(p: &Path) -> u64 {
    match p.symlink_metadata() {
        Ok(m) if m.is_dir() => std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| tree_len(&e.path()))
            .sum(),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lease_keeps_its_tree_and_a_released_one_does_not() {
        let d = tempfile::tempdir().unwrap();
        let live = create(d.path(), "bisect").unwrap();
        std::fs::write(live.path().join("a.cu"), b"k").unwrap();
        // The same PID as ours, and a PID that exists nowhere: neither matters, only the
        // lock does.
        assert!(stale(d.path()).is_empty());
        let dead = d.path().join("bisect-4194305-abc");
        std::fs::create_dir_all(dead.join("src")).unwrap();
        std::fs::write(lease_path(&dead), b"host elsewhere\npid 4194305\n").unwrap();
        let found = stale(d.path());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].tree, dead);
        for s in found {
            s.remove().unwrap();
        }
        assert!(!dead.exists() && !lease_path(&dead).exists());
        assert!(live.path().exists());
        let p = live.path().to_path_buf();
        drop(live);
        assert!(!p.exists() && !lease_path(&p).exists());
    }

    #[test]
    fn unleased_and_foreign_names_are_left_alone() {
        let d = tempfile::tempdir().unwrap();
        // A tree without a lease (being created, or from before leases) younger than a day.
        std::fs::create_dir(d.path().join("bisect-1-abc")).unwrap();
        // Names not of the scratch shape.
        for n in ["photos", "Bisect-1-x", "bisect-x-y", "bisect-1-a.b"] {
            std::fs::create_dir(d.path().join(n)).unwrap();
        }
        // A lease being created: unlocked, naming nobody yet.
        std::fs::create_dir(d.path().join("slurm-2-abc")).unwrap();
        std::fs::write(d.path().join("slurm-2-abc.lease"), b"").unwrap();
        assert!(stale(d.path()).is_empty());
        assert!(is_tree_name("bisecttree-12-AbC9"));
        assert!(!is_tree_name("bisect-12-"));
    }
}
