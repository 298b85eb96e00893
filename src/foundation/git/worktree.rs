//! Writing a commit's files out of the object database into scratch directories, as few
//! as the caller needs.
//!
//! A caller gets either a sparse tree (the files it names) written into a fresh directory
//! ([`write_sparse`], [`CommitFiles::materialize`]), or the whole tree in a scratch
//! directory kept from use to use ([`Worktree`]) and brought up to date the way `git
//! checkout` does: only files whose blob changed are written again, and whatever was
//! created or changed in it since is removed or restored first. Nothing here fetches: a
//! blob the object database lacks is [`CheckoutError::MissingBlob`] (see [`super::fetch`]).

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::tree::{CommitFiles, Entry};
use crate::foundation::process::ProcessError;

/// Why a commit's files could not be written out.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// Blobs that are needed are not in the object database (and were not fetched).
    #[error("{path}: its blob {blob} {}{}{why}", super::tree::MISSING_BLOB, if *.more > 0 { format!(" (and {} more blobs)", .more) } else { String::new() })]
    MissingBlob {
        /// The first path whose blob is missing.
        path: String,
        /// Its blob.
        blob: Oid,
        /// How many other needed blobs are missing.
        more: usize,
        /// Why it was not fetched.
        why: String,
    },
    /// The promisor remote could not give the blobs.
    #[error("cannot fetch {count} missing blobs from the promisor remote `{remote}` ({url})")]
    Fetch {
        /// The remote's name.
        remote: String,
        /// Its URL.
        url: String,
        /// How many blobs were asked for.
        count: usize,
        /// git's failure.
        #[source]
        source: Box<ProcessError>,
    },
    /// Writing into the scratch directory failed.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl CheckoutError {
    /// The path (or, for a failed fetch, the remote) the error is about.
    pub fn path(&self) -> &str {
        match self {
            CheckoutError::MissingBlob { path, .. } | CheckoutError::Write { path, .. } => path,
            CheckoutError::Fetch { remote, .. } => remote,
        }
    }

    /// Whether this makes only the one commit untestable (a missing blob), rather than
    /// every one (an unreachable remote, a full disk).
    pub fn is_untestable(&self) -> bool {
        matches!(self, CheckoutError::MissingBlob { .. })
    }
}

fn write_entry(
    repo: &Repository,
    dest: &Path,
    e: &Entry,
    made_dirs: &mut HashSet<PathBuf>,
) -> Result<(), CheckoutError> {
    let target = dest.join(&e.path);
    let io = |source: std::io::Error| CheckoutError::Write {
        path: e.path.clone(),
        source,
    };
    let blob = repo
        .find_blob(e.id)
        .map_err(|err| CheckoutError::MissingBlob {
            path: e.path.clone(),
            blob: e.id,
            more: 0,
            why: format!(" ({})", err.message()),
        })?;
    if let Some(parent) = target.parent()
        && made_dirs.insert(parent.to_path_buf())
    {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    remove_path(&target).map_err(io)?;
    if e.mode == 0o120000 {
        let link = String::from_utf8_lossy(blob.content()).into_owned();
        std::os::unix::fs::symlink(link, &target).map_err(io)?;
    } else {
        std::fs::write(&target, blob.content()).map_err(io)?;
        if e.mode == 0o100755 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                .map_err(io)?;
        }
    }
    Ok(())
}

/// Writes `entries` under `dest` (a fresh directory).
pub fn write_sparse(
    repo: &Repository,
    dest: &Path,
    entries: &[Entry],
) -> Result<usize, CheckoutError> {
    let mut made = HashSet::new();
    for e in entries {
        write_entry(repo, dest, e, &mut made)?;
    }
    Ok(entries.len())
}

/// What a file looked like right after it was written: any later change (a script that
/// edited or replaced it) shows in one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Self {
        Stamp {
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
            ino: m.ino(),
        }
    }
}

/// Every file a worktree wrote: its blob, mode and stamp, by path.
type Written = HashMap<String, (Oid, i32, Stamp)>;

/// A whole-tree scratch checkout kept from use to use (a bisection worker keeps one
/// across its steps, and a kept one across bisections: [`Worktree::adopt`]).
pub struct Worktree {
    dir: Home,
    /// Every file written, with its blob, mode and stamp.
    files: Written,
    /// The tree it holds in full, when the last update wrote a whole tree.
    tree: Option<Oid>,
    /// An update began and did not finish: what is on disk is not what `files` says, so
    /// nothing is kept for a later process.
    torn: bool,
    /// What touched the tree since the last whole-tree update ended (None: not watched, so
    /// the next one looks at every file).
    watch: Option<crate::foundation::fswatch::TreeWatch>,
    /// Whether to watch at all (`REPRO_WORKTREE_WATCH=0` says not).
    watching: bool,
    /// How the last whole-tree update found what the last use did: the number of touched
    /// paths the watch named, or `None` for a walk of every file.
    last_touched: Option<usize>,
    /// Every directory of the files written while watched (some may be gone since).
    dirs: HashSet<String>,
}

/// The most files and directories a worktree watches: a larger tree is walked at each
/// update rather than take much of the user's inotify watches (8,192 to about a million in
/// all, by the kernel's version and memory), which editors and file watchers need too.
const MAX_WATCHES: usize = 65_536;

/// Whether worktrees watch for what touched them (`REPRO_WORKTREE_WATCH=0`: no).
fn watching() -> bool {
    std::env::var_os("REPRO_WORKTREE_WATCH").is_none_or(|v| v != "0")
}

/// Where a worktree's files live.
enum Home {
    /// A scratch tree, removed when the worktree is dropped.
    Scratch(crate::foundation::scratch::Scratch),
    /// A kept tree (`tree/` in it), whose manifest is written when the worktree is dropped.
    Kept(crate::foundation::scratch::Kept, PathBuf),
}

impl Home {
    fn path(&self) -> &Path {
        match self {
            Home::Scratch(s) => s.path(),
            Home::Kept(_, tree) => tree,
        }
    }
}

/// What a kept worktree holds, written when its user is done with it: the tree and every
/// file written with its stamp. Read back by [`Worktree::adopt`], which trusts none of it
/// beyond "this is what was written": each file is checked against its stamp before it is
/// kept, and a path that could leave the tree is refused.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Manifest {
    schema: u32,
    tree: String,
    /// (path, blob, mode, length, mtime ns, ctime ns, inode).
    files: Vec<(String, String, i32, u64, i64, i64, u64)>,
}

/// The largest manifest read back (about 150 bytes a file: over a million files).
const MAX_MANIFEST_BYTES: u64 = 256 << 20;

impl Manifest {
    fn of(tree: Oid, files: &Written) -> Self {
        let mut files: Vec<_> = files
            .iter()
            .map(|(p, (id, mode, st))| {
                (
                    p.clone(),
                    id.to_string(),
                    *mode,
                    st.len,
                    i64::try_from(st.mtime_ns).unwrap_or(i64::MAX),
                    i64::try_from(st.ctime_ns).unwrap_or(i64::MAX),
                    st.ino,
                )
            })
            .collect();
        files.sort();
        Manifest {
            schema: 1,
            tree: tree.to_string(),
            files,
        }
    }

    /// The tree and files, if every path stays inside the tree and every id reads.
    fn into_state(self) -> Option<(Oid, Written)> {
        if self.schema != 1 {
            return None;
        }
        let tree = Oid::from_str(&self.tree).ok()?;
        let mut files = HashMap::with_capacity(self.files.len());
        for (path, id, mode, len, mtime_ns, ctime_ns, ino) in self.files {
            let inside = !path.is_empty()
                && Path::new(&path)
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if !inside {
                return None;
            }
            let stamp = Stamp {
                len,
                mtime_ns: i128::from(mtime_ns),
                ctime_ns: i128::from(ctime_ns),
                ino,
            };
            files.insert(path, (Oid::from_str(&id).ok()?, mode, stamp));
        }
        Some((tree, files))
    }
}

impl Worktree {
    /// A kept worktree of the store whose scratch space is `scratch` (its `tmp/`), with what
    /// the last bisection left in it, or `None` when every kept tree is in use. The next
    /// whole-tree update writes only what differs from the tree it held and what was
    /// touched since (each file is checked against its stamp: size, times, inode), so a
    /// second bisection of a large repository does not write every file again. A kept tree
    /// whose manifest is missing or does not read (its last user was killed mid-update) is
    /// emptied first. The manifest is removed while the tree is in use and written again
    /// when the worktree is dropped after a finished update.
    pub fn adopt(scratch: &Path) -> std::io::Result<Option<Worktree>> {
        let Some(kept) = crate::foundation::scratch::claim_kept(scratch)? else {
            return Ok(None);
        };
        let tree_dir = kept.dir.join("tree");
        let manifest_path = kept.dir.join("manifest.json");
        let state = crate::foundation::fsutil::read_regular(&manifest_path, MAX_MANIFEST_BYTES)
            .ok()
            .and_then(|b| serde_json::from_slice::<Manifest>(&b).ok())
            .and_then(Manifest::into_state)
            .filter(|_| std::fs::symlink_metadata(&tree_dir).is_ok_and(|m| m.is_dir()));
        match std::fs::remove_file(&manifest_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if state.is_none() {
            match std::fs::symlink_metadata(&tree_dir) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&tree_dir)?,
                Ok(_) => std::fs::remove_file(&tree_dir)?,
                Err(_) => {}
            }
            std::fs::create_dir(&tree_dir)?;
        }
        let (tree, files) = state.map_or((None, HashMap::new()), |(t, f)| (Some(t), f));
        Ok(Some(Worktree {
            dir: Home::Kept(kept, tree_dir),
            files,
            tree,
            torn: false,
            watch: None,
            watching: watching(),
            last_touched: None,
            dirs: HashSet::new(),
        }))
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        if let (Home::Kept(kept, _), Some(tree), false) = (&self.dir, self.tree, self.torn) {
            let manifest = Manifest::of(tree, &self.files);
            if let Ok(bytes) = serde_json::to_vec(&manifest) {
                // A manifest that cannot be written only costs the next bisection a full
                // write-out: the tree is emptied when it is adopted without one.
                let _ = crate::foundation::fsutil::write_atomic(
                    &kept.dir.join("manifest.json"),
                    &bytes,
                    true,
                );
            }
        }
    }
}

/// What bringing a worktree up to date did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// Files written.
    pub written: usize,
    /// Files and directories removed (gone from the tree, or left by the last use).
    pub removed: usize,
}

impl Worktree {
    /// An empty worktree in `dir`.
    pub fn new(dir: crate::foundation::scratch::Scratch) -> Self {
        Worktree {
            dir: Home::Scratch(dir),
            files: HashMap::new(),
            tree: None,
            torn: false,
            watch: None,
            watching: watching(),
            last_touched: None,
            dirs: HashSet::new(),
        }
    }

    /// The same worktree, never watched: for a single update, whose next one is in another
    /// process (a cluster job's step).
    pub fn unwatched(mut self) -> Self {
        self.watching = false;
        self.watch = None;
        self
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The entries whose blob this worktree does not already hold at that path: the only
    /// ones an update may need to read from the object database.
    pub fn new_blobs(&self, entries: &[Entry]) -> Vec<Entry> {
        entries
            .iter()
            .filter(|e| self.files.get(&e.path).is_none_or(|(id, _, _)| *id != e.id))
            .cloned()
            .collect()
    }

    /// Makes the directory hold exactly `entries` of `files`' commit: files whose blob or
    /// mode changed, or that the last use touched, are written again; everything else
    /// that is there (build outputs, files the last use created) is removed.
    pub fn update(
        &mut self,
        files: &CommitFiles,
        entries: &[Entry],
    ) -> Result<Update, CheckoutError> {
        let repo = files.repo();
        let root = self.dir.path().to_path_buf();
        // A sparse update leaves no whole tree to diff against later, and its own writes
        // would read as a script's.
        self.tree = None;
        self.torn = true;
        self.watch = None;
        let want: HashMap<&str, &Entry> = entries.iter().map(|e| (e.path.as_str(), e)).collect();
        let mut dirs_wanted: HashSet<&str> = HashSet::new();
        for e in entries {
            let mut p = e.path.as_str();
            while let Some((parent, _)) = p.rsplit_once('/') {
                if !dirs_wanted.insert(parent) {
                    break;
                }
                p = parent;
            }
        }
        let mut up = Update::default();
        let mut intact: HashSet<String> = HashSet::new();
        let io = |path: &Path, source: std::io::Error| CheckoutError::Write {
            path: path.display().to_string(),
            source,
        };
        // What is on disk now: keep what is wanted and untouched, remove the rest.
        let mut walk = walkdir::WalkDir::new(&root).min_depth(1).into_iter();
        while let Some(item) = walk.next() {
            let Ok(item) = item else { continue };
            let Ok(rel) = item.path().strip_prefix(&root) else {
                continue;
            };
            let rel = rel.to_string_lossy().into_owned();
            if item.file_type().is_dir() {
                if !dirs_wanted.contains(rel.as_str()) {
                    std::fs::remove_dir_all(item.path()).map_err(|e| io(item.path(), e))?;
                    walk.skip_current_dir();
                    up.removed += 1;
                }
                continue;
            }
            let keep = match (want.get(rel.as_str()), self.files.get(&rel)) {
                (Some(e), Some((id, mode, stamp))) => {
                    *id == e.id
                        && *mode == e.mode
                        && item
                            .path()
                            .symlink_metadata()
                            .is_ok_and(|m| Stamp::of(&m) == *stamp)
                }
                _ => false,
            };
            if keep {
                intact.insert(rel);
            } else {
                std::fs::remove_file(item.path()).map_err(|e| io(item.path(), e))?;
                if !want.contains_key(rel.as_str()) {
                    up.removed += 1;
                }
            }
        }
        self.files.retain(|k, _| intact.contains(k));
        // Everything not kept was removed above: what is left to write is absent.
        let todo: Vec<&Entry> = entries
            .iter()
            .filter(|e| !intact.contains(&e.path))
            .collect();
        for (e, stamp) in write_absent(repo, &root, &todo)? {
            self.files.insert(e.path.clone(), (e.id, e.mode, stamp));
            up.written += 1;
        }
        self.torn = false;
        Ok(up)
    }
}

/// Below this many files, writing on one thread is as fast.
const PARALLEL_WRITE_MIN: usize = 256;

/// Writes `entries`, none of which exists under `root` yet, and returns each one's stamp.
/// Their directories are made first; the files are then written on a few threads (each
/// with its own handle on the object database, as a handle is not shared between threads),
/// each file one open, one write and one close, its stamp taken from the open file. A whole
/// tree of tens of thousands of files (a bisection's first step) is bound by these calls.
fn write_absent<'e>(
    repo: &Repository,
    root: &Path,
    entries: &[&'e Entry],
) -> Result<Vec<(&'e Entry, Stamp)>, CheckoutError> {
    let mut dirs: Vec<&Path> = entries
        .iter()
        .filter_map(|e| Path::new(&e.path).parent())
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    dirs.sort_unstable();
    dirs.dedup();
    for d in dirs {
        std::fs::create_dir_all(root.join(d)).map_err(|source| CheckoutError::Write {
            path: d.display().to_string(),
            source,
        })?;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    if threads == 1 || entries.len() < PARALLEL_WRITE_MIN {
        return write_part(repo, root, entries);
    }
    let chunk = entries.len().div_ceil(threads);
    let git_dir = repo.path().to_path_buf();
    std::thread::scope(|scope| {
        let handles: Vec<_> = entries
            .chunks(chunk)
            .map(|part| {
                let git_dir = &git_dir;
                scope.spawn(move || {
                    let repo = Repository::open(git_dir).map_err(|err| CheckoutError::Write {
                        path: git_dir.display().to_string(),
                        source: std::io::Error::other(err.message().to_string()),
                    })?;
                    write_part(&repo, root, part)
                })
            })
            .collect();
        let mut out = Vec::with_capacity(entries.len());
        for h in handles {
            let part = h.join().map_err(|_| CheckoutError::Write {
                path: root.display().to_string(),
                source: std::io::Error::other("a writing thread panicked"),
            })??;
            out.extend(part);
        }
        Ok(out)
    })
}

/// Writes absent `entries` one after another (see [`write_absent`]).
fn write_part<'e>(
    repo: &Repository,
    root: &Path,
    entries: &[&'e Entry],
) -> Result<Vec<(&'e Entry, Stamp)>, CheckoutError> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let io = |source: std::io::Error| CheckoutError::Write {
            path: e.path.clone(),
            source,
        };
        let blob = repo
            .find_blob(e.id)
            .map_err(|err| CheckoutError::MissingBlob {
                path: e.path.clone(),
                blob: e.id,
                more: 0,
                why: format!(" ({})", err.message()),
            })?;
        let target = root.join(&e.path);
        let meta = if e.mode == 0o120000 {
            let link = String::from_utf8_lossy(blob.content()).into_owned();
            std::os::unix::fs::symlink(link, &target).map_err(io)?;
            target.symlink_metadata().map_err(io)?
        } else {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(io)?;
            f.write_all(blob.content()).map_err(io)?;
            if e.mode == 0o100755 {
                f.set_permissions(std::fs::Permissions::from_mode(0o755))
                    .map_err(io)?;
            }
            f.metadata().map_err(io)?
        };
        out.push((*e, Stamp::of(&meta)));
    }
    Ok(out)
}

impl Worktree {
    /// Makes the directory hold the whole tree of `files`' commit. When it holds a whole
    /// tree already, only what differs between the two trees is read (unchanged subtrees
    /// are skipped by id, as `git checkout` does), and one `lstat` per file finds what the
    /// last use (a step's script) created, edited or deleted. `fetch` is given the entries whose
    /// blobs will be read, before any is.
    pub fn update_tree<E: From<CheckoutError>>(
        &mut self,
        files: &CommitFiles,
        fetch: &mut dyn FnMut(&[Entry]) -> Result<(), E>,
    ) -> Result<Update, E> {
        let new_id = files.tree_id();
        let Some(old_id) = self.tree else {
            let entries = files.all_entries();
            fetch(&self.new_blobs(&entries))?;
            let up = self.update(files, &entries)?;
            self.tree = Some(new_id);
            self.arm(None);
            return Ok(up);
        };
        let repo = files.repo();
        let git = |e: git2::Error| {
            E::from(CheckoutError::Write {
                path: self.dir.path().display().to_string(),
                source: std::io::Error::other(e.message().to_string()),
            })
        };
        let new_tree = repo.find_tree(new_id).map_err(git)?;
        let (mut changed, removed) = if old_id == new_id {
            (Vec::new(), Vec::new())
        } else {
            let old_tree = repo.find_tree(old_id).map_err(git)?;
            tree_changes(repo, &old_tree, &new_tree).map_err(git)?
        };
        self.torn = true;
        let (stale, touched) = match self.watch.as_mut().and_then(|w| w.take()) {
            Some(touched) => match self.stale_among(&touched) {
                Some(stale) => (stale, Some(touched)),
                None => (self.stale_files(), None),
            },
            None => (self.stale_files(), None),
        };
        self.last_touched = touched.as_ref().map(Vec::len);
        let root = self.dir.path().to_path_buf();
        let mut up = Update::default();
        let io = |path: &Path, source: std::io::Error| {
            E::from(CheckoutError::Write {
                path: path.display().to_string(),
                source,
            })
        };
        let pending: HashSet<String> = changed.iter().map(|e| e.path.clone()).collect();
        let mut restore: Vec<Entry> = Vec::new();
        for rel in &stale {
            let at = root.join(rel);
            remove_path(&at).map_err(|e| io(&at, e))?;
            let known = self.files.remove(rel).is_some();
            match new_tree.get_path(Path::new(rel)) {
                Ok(e) if e.kind() == Some(git2::ObjectType::Blob) && !pending.contains(rel) => {
                    restore.push(Entry {
                        path: rel.clone(),
                        id: e.id(),
                        mode: e.filemode(),
                    });
                }
                Ok(_) => {}
                Err(_) if !known => up.removed += 1,
                Err(_) => {}
            }
        }
        for rel in &removed {
            let at = root.join(rel);
            remove_path(&at).map_err(|e| io(&at, e))?;
            self.files.remove(rel);
            up.removed += 1;
        }
        changed.extend(restore);
        fetch(&changed)?;
        up.written = self.write_all(repo, &changed).map_err(E::from)?;
        if !stale.is_empty() || !removed.is_empty() {
            up.removed += match &touched {
                Some(touched) => {
                    remove_empty_dirs_near(&root, touched, stale.iter().chain(&removed))
                }
                None => remove_empty_dirs(&root),
            };
        }
        self.tree = Some(new_id);
        self.torn = false;
        self.arm(Some(&changed));
        Ok(up)
    }

    /// Watches every directory and file of the tree now written, so the next update learns
    /// what the step's script touched from the kernel instead of an `lstat` of every file.
    /// `written`: the files this update wrote (each a new inode, watched anew; `None`: every
    /// file). The update's own events stay: the next update checks those few paths too,
    /// and misses nothing another process did meanwhile. `REPRO_WORKTREE_WATCH=0` turns
    /// this off.
    fn arm(&mut self, written: Option<&[Entry]>) {
        if !self.watching {
            self.watch = None;
            return;
        }
        let root = self.dir.path().to_path_buf();
        let fresh = self.watch.is_none();
        if fresh {
            self.watch = crate::foundation::fswatch::TreeWatch::new(&root);
            self.dirs.clear();
        }
        if self.watch.is_none() {
            return;
        }
        let files: Vec<&str> = match written {
            Some(entries) if !fresh => entries.iter().map(|e| e.path.as_str()).collect(),
            _ => self.files.keys().map(String::as_str).collect(),
        };
        for mut p in files.iter().copied() {
            while let Some((parent, _)) = p.rsplit_once('/') {
                if !self.dirs.insert(parent.to_string()) {
                    break;
                }
                p = parent;
            }
        }
        if self.dirs.len() + self.files.len() > MAX_WATCHES {
            // Watches are a per-user budget that editors and file watchers share.
            self.watch = None;
            return;
        }
        let Some(w) = self.watch.as_mut() else { return };
        w.watch_dirs(self.dirs.iter().map(String::as_str));
        w.watch_files(files.into_iter());
    }

    /// What the last use did, from the paths it touched ([`TreeWatch`]'s answer): as
    /// [`Worktree::stale_files`], looking only under those paths. `None` when a touched
    /// path lies under something that is not a directory (the answer would be read through
    /// a link the script made): the caller then walks the whole tree.
    ///
    /// [`TreeWatch`]: crate::foundation::fswatch::TreeWatch
    fn stale_among(&mut self, touched: &[String]) -> Option<Vec<String>> {
        if touched.iter().any(String::is_empty) {
            // The root stands for everything: the walk of every file is the answer.
            return None;
        }
        let root = self.dir.path().to_path_buf();
        let set: HashSet<&str> = touched.iter().map(String::as_str).collect();
        let covered = |p: &str| {
            let mut at = p;
            while let Some((parent, _)) = at.rsplit_once('/') {
                if set.contains(parent) {
                    return true;
                }
                at = parent;
            }
            false
        };
        let mut stale: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for t in touched.iter().filter(|t| !covered(t)) {
            // Every directory above it must still be one (not a link the script put there).
            let mut at = t.as_str();
            while let Some((parent, _)) = at.rsplit_once('/') {
                if !root
                    .join(parent)
                    .symlink_metadata()
                    .is_ok_and(|m| m.is_dir())
                {
                    return None;
                }
                at = parent;
            }
            for item in walkdir::WalkDir::new(root.join(t))
                .follow_root_links(false)
                .into_iter()
                .flatten()
            {
                let Some(rel) = tree_path(&root, &item) else {
                    continue;
                };
                let meta = item.path().symlink_metadata().ok();
                if meta.as_ref().is_some_and(|m| m.is_file() && m.nlink() > 1) {
                    // A second name for a file (a hard link the script made): what was
                    // written through it changed the other name, which no event named.
                    return None;
                }
                match self.files.get(&rel) {
                    Some((_, _, stamp)) if meta.is_some_and(|m| Stamp::of(&m) == *stamp) => {}
                    _ => stale.push(rel.clone()),
                }
                seen.insert(rel);
            }
        }
        // Known files at or under a touched path that are not there now were deleted. Only
        // a touched path that was a directory can have known files under it.
        let mut gone: Vec<String> = touched
            .iter()
            .filter(|t| !seen.contains(*t) && self.files.contains_key(*t))
            .cloned()
            .collect();
        if touched.iter().any(|t| self.dirs.contains(t)) {
            gone.extend(
                self.files
                    .keys()
                    .filter(|k| !seen.contains(*k) && !set.contains(k.as_str()) && covered(k))
                    .cloned(),
            );
        }
        for p in gone {
            self.files.remove(&p);
            stale.push(p);
        }
        Some(stale)
    }

    /// What the last use did to the worktree: files it edited, replaced, created or
    /// deleted (relative paths). Known files that still look as written are not listed.
    fn stale_files(&mut self) -> Vec<String> {
        let root = self.dir.path().to_path_buf();
        let mut stale: Vec<String> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for item in walkdir::WalkDir::new(&root)
            .min_depth(1)
            .into_iter()
            .flatten()
        {
            let Some(rel) = tree_path(&root, &item) else {
                continue;
            };
            match self.files.get(&rel) {
                Some((_, _, stamp))
                    if item
                        .path()
                        .symlink_metadata()
                        .is_ok_and(|m| Stamp::of(&m) == *stamp) =>
                {
                    seen.insert(rel);
                }
                Some(_) => {
                    seen.insert(rel.clone());
                    stale.push(rel);
                }
                None => stale.push(rel),
            }
        }
        if seen.len() < self.files.len() {
            // The script deleted some (or replaced a directory by a link, which the walk does
            // not follow): they are written again if the new tree has them.
            let gone: Vec<String> = self
                .files
                .keys()
                .filter(|p| !seen.contains(*p))
                .cloned()
                .collect();
            for p in gone {
                self.files.remove(&p);
                stale.push(p);
            }
        }
        stale
    }

    /// Writes `entries` and records what each looks like; returns how many.
    fn write_all(&mut self, repo: &Repository, entries: &[Entry]) -> Result<usize, CheckoutError> {
        let root = self.dir.path().to_path_buf();
        let mut made = HashSet::new();
        for e in entries {
            write_entry(repo, &root, e, &mut made)?;
            let at = root.join(&e.path);
            let meta = at
                .symlink_metadata()
                .map_err(|source| CheckoutError::Write {
                    path: e.path.clone(),
                    source,
                })?;
            self.files
                .insert(e.path.clone(), (e.id, e.mode, Stamp::of(&meta)));
        }
        Ok(entries.len())
    }
}

/// The files that differ between two trees: (added or changed, removed). Submodules
/// (gitlinks) are not files and are left out, as a checkout without `--recurse-submodules`
/// leaves them.
fn tree_changes(
    repo: &Repository,
    old: &git2::Tree,
    new: &git2::Tree,
) -> Result<(Vec<Entry>, Vec<String>), git2::Error> {
    let mut changed: Vec<Entry> = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    diff_level(repo, Some(old), Some(new), "", &mut changed, &mut removed)?;
    Ok((changed, removed))
}

/// One level of [`tree_changes`]: the entries of two trees (either may be absent) by name;
/// a subtree whose id did not change is not read.
fn diff_level(
    repo: &Repository,
    old: Option<&git2::Tree>,
    new: Option<&git2::Tree>,
    prefix: &str,
    changed: &mut Vec<Entry>,
    removed: &mut Vec<String>,
) -> Result<(), git2::Error> {
    const TREE: i32 = 0o040000;
    const GITLINK: i32 = 0o160000;
    let entries = |t: Option<&git2::Tree>| -> HashMap<Vec<u8>, (Oid, i32)> {
        t.map(|t| {
            t.iter()
                .map(|e| (e.name_bytes().to_vec(), (e.id(), e.filemode())))
                .collect()
        })
        .unwrap_or_default()
    };
    let (o, n) = (entries(old), entries(new));
    let path = |name: &[u8]| {
        let name = String::from_utf8_lossy(name);
        if prefix.is_empty() {
            name.into_owned()
        } else {
            format!("{prefix}/{name}")
        }
    };
    // Everything under an old entry that the new tree does not keep as it was.
    let drop_old = |name: &[u8],
                    (id, mode): (Oid, i32),
                    changed: &mut Vec<Entry>,
                    removed: &mut Vec<String>| {
        if mode == TREE {
            diff_level(
                repo,
                Some(&repo.find_tree(id)?),
                None,
                &path(name),
                changed,
                removed,
            )
        } else {
            if mode != GITLINK {
                removed.push(path(name));
            }
            Ok(())
        }
    };
    for (name, &(nid, nmode)) in &n {
        let before = o.get(name).copied();
        match before {
            Some((oid, omode)) if oid == nid && omode == nmode => continue,
            Some((oid, TREE)) if nmode == TREE => {
                let (ot, nt) = (repo.find_tree(oid)?, repo.find_tree(nid)?);
                diff_level(repo, Some(&ot), Some(&nt), &path(name), changed, removed)?;
                continue;
            }
            // A file that stays a file is written over; anything else goes first.
            Some((_, omode))
                if omode != TREE && omode != GITLINK && nmode != TREE && nmode != GITLINK => {}
            Some(was) => drop_old(name, was, changed, removed)?,
            None => {}
        }
        if nmode == TREE {
            diff_level(
                repo,
                None,
                Some(&repo.find_tree(nid)?),
                &path(name),
                changed,
                removed,
            )?;
        } else if nmode != GITLINK {
            changed.push(Entry {
                path: path(name),
                id: nid,
                mode: nmode,
            });
        }
    }
    for (name, &was) in &o {
        if !n.contains_key(name) {
            drop_old(name, was, changed, removed)?;
        }
    }
    Ok(())
}

/// Removes directories left empty (by a deletion, or made by a script); returns how many.
fn remove_empty_dirs(root: &Path) -> usize {
    walkdir::WalkDir::new(root)
        .min_depth(1)
        .contents_first(true)
        .into_iter()
        .flatten()
        .filter(|item| item.file_type().is_dir() && std::fs::remove_dir(item.path()).is_ok())
        .count()
}

/// A walked file's path in the tree, or `None` for a directory and for a name that is not
/// UTF-8, which no path of the tree has: such a file or directory (a step's script made it)
/// is removed here, by its own name.
fn tree_path(root: &Path, item: &walkdir::DirEntry) -> Option<String> {
    let rel = item.path().strip_prefix(root).ok()?;
    match rel.to_str() {
        Some(_) if item.file_type().is_dir() => None,
        Some(rel) => Some(rel.to_string()),
        None => {
            let _ = remove_path(item.path());
            None
        }
    }
}

/// Removes whatever is at `at`: a file, a link (not what it points to), or a directory
/// that a step's script put where a file was, with everything in it; nothing there is fine.
fn remove_path(at: &Path) -> std::io::Result<()> {
    match at.symlink_metadata() {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(at),
        Ok(_) => std::fs::remove_file(at),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// [`remove_empty_dirs`] where a watch says what changed: the directories at or under the
/// touched paths, and those above the files removed; returns how many were removed.
fn remove_empty_dirs_near<'a>(
    root: &Path,
    touched: &[String],
    removed: impl Iterator<Item = &'a String>,
) -> usize {
    let mut dirs: HashSet<PathBuf> = HashSet::new();
    for t in touched {
        for item in walkdir::WalkDir::new(root.join(t))
            .follow_root_links(false)
            .into_iter()
            .flatten()
        {
            if item.file_type().is_dir() {
                dirs.insert(item.into_path());
            }
        }
    }
    for r in removed {
        let mut at = r.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            dirs.insert(root.join(parent));
            at = parent;
        }
    }
    // Deepest first, so a directory emptied by removing its empty children goes too.
    let mut dirs: Vec<PathBuf> = dirs.into_iter().filter(|d| d != root).collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs.iter()
        .filter(|d| std::fs::remove_dir(d).is_ok())
        .count()
}

impl CommitFiles<'_> {
    /// Writes every file of the commit under `dest` (a fresh directory), keeping executable
    /// bits and symbolic links. A blob missing from the object database (a partial clone)
    /// is an error naming the path.
    pub fn materialize(&self, dest: &Path) -> Result<usize, CheckoutError> {
        write_sparse(self.repo(), dest, &self.all_entries())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index entry for a blob at `path` (bytes: any name git allows).
    fn index_entry(path: &[u8], id: Oid, mode: u32, size: usize) -> git2::IndexEntry {
        git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode,
            uid: 0,
            gid: 0,
            file_size: size as u32,
            id,
            flags: (path.len() as u16) & 0xfff,
            flags_extended: 0,
            path: path.to_vec(),
        }
    }

    fn commit(repo: &Repository, files: &[(&str, &str)], parent: Option<Oid>) -> Oid {
        let mut tb = repo.treebuilder(None).unwrap();
        // Nested paths need subtrees: build them with an index instead.
        let _ = &mut tb;
        let mut index = git2::Index::new().unwrap();
        for (p, text) in files {
            let id = repo.blob(text.as_bytes()).unwrap();
            index
                .add(&index_entry(p.as_bytes(), id, 0o100644, text.len()))
                .unwrap();
        }
        let tree = index.write_tree_to(repo).unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let parents: Vec<git2::Commit> = parent
            .map(|p| repo.find_commit(p).unwrap())
            .into_iter()
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "c", &tree, &refs).unwrap()
    }

    /// A bare repository with two commits: files changed, removed and added between them.
    fn two_commits() -> (tempfile::TempDir, Repository, Oid, Oid) {
        let d = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(d.path().join("r.git")).unwrap();
        let a = commit(
            &repo,
            &[("a/x.txt", "1"), ("a/y.txt", "2"), ("b.txt", "3")],
            None,
        );
        let b = commit(
            &repo,
            &[("a/x.txt", "1"), ("a/y.txt", "22"), ("c/z.txt", "4")],
            Some(a),
        );
        (d, repo, a, b)
    }

    #[test]
    fn a_worktree_is_brought_up_to_date_like_a_checkout() {
        let (_d, repo, a, b) = two_commits();
        let mut wt = Worktree::new(crate::foundation::scratch::Scratch::unleased(
            tempfile::tempdir().unwrap(),
        ));
        let fa = CommitFiles::new(&repo, a).unwrap();
        let up = wt.update(&fa, &fa.all_entries()).unwrap();
        assert_eq!(
            up,
            Update {
                written: 3,
                removed: 0
            }
        );
        // A step's leftovers and edits.
        std::fs::write(wt.path().join("a/out.o"), "junk").unwrap();
        std::fs::create_dir_all(wt.path().join("build/deep")).unwrap();
        std::fs::write(wt.path().join("build/deep/f"), "junk").unwrap();
        std::fs::write(wt.path().join("a/x.txt"), "edited").unwrap();
        let fb = CommitFiles::new(&repo, b).unwrap();
        let up = wt.update(&fb, &fb.all_entries()).unwrap();
        // x restored, y changed, z new; out.o, build/ and b.txt removed.
        assert_eq!(up.written, 3);
        assert_eq!(up.removed, 3);
        let read = |p: &str| std::fs::read_to_string(wt.path().join(p)).ok();
        assert_eq!(read("a/x.txt").as_deref(), Some("1"));
        assert_eq!(read("a/y.txt").as_deref(), Some("22"));
        assert_eq!(read("c/z.txt").as_deref(), Some("4"));
        assert_eq!(read("b.txt"), None);
        assert!(!wt.path().join("build").exists());
        assert!(!wt.path().join("a/out.o").exists());
        // Nothing changed: nothing written.
        let up = wt.update(&fb, &fb.all_entries()).unwrap();
        assert_eq!(up, Update::default());
    }

    #[test]
    fn a_kept_worktree_is_adopted_and_checked_file_by_file() {
        let (_d, repo, a, b) = two_commits();
        let store_tmp = tempfile::tempdir().unwrap();
        let mut none = |_: &[Entry]| -> Result<(), CheckoutError> { Ok(()) };
        let fa = CommitFiles::new(&repo, a).unwrap();
        let fb = CommitFiles::new(&repo, b).unwrap();
        let dir = {
            let mut wt = Worktree::adopt(store_tmp.path()).unwrap().unwrap();
            assert_eq!(wt.update_tree(&fa, &mut none).unwrap().written, 3);
            // A second user while this one holds it gets another kept tree.
            let other = Worktree::adopt(store_tmp.path()).unwrap().unwrap();
            assert_ne!(other.path(), wt.path());
            wt.path().to_path_buf()
        };
        // Between uses: an edit, a new file.
        std::fs::write(dir.join("a/x.txt"), "edited").unwrap();
        std::fs::write(dir.join("junk"), "junk").unwrap();
        let mut wt = Worktree::adopt(store_tmp.path()).unwrap().unwrap();
        assert_eq!(wt.path(), dir);
        let up = wt.update_tree(&fb, &mut none).unwrap();
        // y changed, z new, x restored; b.txt, junk and the emptied b/ gone: nothing else.
        assert_eq!(up.written, 3);
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).ok();
        assert_eq!(read("a/x.txt").as_deref(), Some("1"));
        assert_eq!(read("a/y.txt").as_deref(), Some("22"));
        assert_eq!(read("c/z.txt").as_deref(), Some("4"));
        assert_eq!(read("junk"), None);
        assert_eq!(read("b.txt"), None);
        drop(wt);
        // A torn update (killed) leaves no manifest: the next user starts from empty.
        std::fs::remove_file(dir.parent().unwrap().join("manifest.json")).unwrap();
        let mut wt = Worktree::adopt(store_tmp.path()).unwrap().unwrap();
        assert_eq!(std::fs::read_dir(wt.path()).unwrap().count(), 0);
        assert_eq!(wt.update_tree(&fb, &mut none).unwrap().written, 3);
    }

    #[test]
    fn a_manifest_path_that_leaves_the_tree_empties_it() {
        let (_d, repo, a, _) = two_commits();
        let store_tmp = tempfile::tempdir().unwrap();
        let mut none = |_: &[Entry]| -> Result<(), CheckoutError> { Ok(()) };
        let fa = CommitFiles::new(&repo, a).unwrap();
        let dir = {
            let mut wt = Worktree::adopt(store_tmp.path()).unwrap().unwrap();
            wt.update_tree(&fa, &mut none).unwrap();
            wt.path().to_path_buf()
        };
        let manifest = dir.parent().unwrap().join("manifest.json");
        let text = std::fs::read_to_string(&manifest).unwrap();
        std::fs::write(&manifest, text.replacen("a/x.txt", "../../../x.txt", 1)).unwrap();
        let wt = Worktree::adopt(store_tmp.path()).unwrap().unwrap();
        assert!(wt.files.is_empty() && wt.tree.is_none());
        assert_eq!(std::fs::read_dir(wt.path()).unwrap().count(), 0);
    }

    #[test]
    fn whole_tree_updates_read_only_the_differences() {
        let (_d, repo, a, b) = two_commits();
        let mut wt = Worktree::new(crate::foundation::scratch::Scratch::unleased(
            tempfile::tempdir().unwrap(),
        ));
        let asked: std::cell::RefCell<Vec<Vec<String>>> = Default::default();
        let mut fetch = |e: &[Entry]| -> Result<(), CheckoutError> {
            asked
                .borrow_mut()
                .push(e.iter().map(|e| e.path.clone()).collect());
            Ok(())
        };
        let fa = CommitFiles::new(&repo, a).unwrap();
        assert_eq!(wt.update_tree(&fa, &mut fetch).unwrap().written, 3);
        // The step's leftovers: an output, a new directory, an edit and a deletion.
        std::fs::write(wt.path().join("a/out.o"), "junk").unwrap();
        std::fs::create_dir_all(wt.path().join("build/deep")).unwrap();
        std::fs::write(wt.path().join("build/deep/f"), "junk").unwrap();
        std::fs::write(wt.path().join("a/x.txt"), "edited").unwrap();
        let fb = CommitFiles::new(&repo, b).unwrap();
        let up = wt.update_tree(&fb, &mut fetch).unwrap();
        let dir = wt.path().to_path_buf();
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).ok();
        assert_eq!(read("a/x.txt").as_deref(), Some("1"));
        assert_eq!(read("a/y.txt").as_deref(), Some("22"));
        assert_eq!(read("c/z.txt").as_deref(), Some("4"));
        assert_eq!(read("b.txt"), None);
        assert!(!wt.path().join("build").exists());
        assert!(!wt.path().join("a/out.o").exists());
        assert_eq!(up.written, 3);
        // Only the changed files and the restored one were asked for, not the whole tree.
        let mut last = asked.borrow().last().unwrap().clone();
        last.sort();
        assert_eq!(last, ["a/x.txt", "a/y.txt", "c/z.txt"]);
        std::fs::remove_file(wt.path().join("c/z.txt")).unwrap();
        let up = wt.update_tree(&fb, &mut fetch).unwrap();
        assert_eq!(up.written, 1);
        assert_eq!(read("c/z.txt").as_deref(), Some("4"));
        assert_eq!(wt.update_tree(&fb, &mut fetch).unwrap(), Update::default());
    }

    /// Every file under `dir` with its text (or link target) and executable bit.
    fn on_disk(dir: &Path) -> Vec<(String, String, bool)> {
        use std::os::unix::fs::PermissionsExt;
        let mut out: Vec<_> = walkdir::WalkDir::new(dir)
            .min_depth(1)
            .into_iter()
            .flatten()
            .filter(|i| !i.file_type().is_dir())
            .map(|i| {
                let rel = i
                    .path()
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let m = i.path().symlink_metadata().unwrap();
                let text = if m.file_type().is_symlink() {
                    format!("-> {}", std::fs::read_link(i.path()).unwrap().display())
                } else {
                    std::fs::read_to_string(i.path()).unwrap()
                };
                (rel, text, m.permissions().mode() & 0o111 != 0)
            })
            .collect();
        out.sort();
        out
    }

    /// What `on_disk` gives for a fresh directory holding the commit's files.
    fn committed(f: &CommitFiles) -> Vec<(String, String, bool)> {
        let d = tempfile::tempdir().unwrap();
        f.materialize(d.path()).unwrap();
        on_disk(d.path())
    }

    fn append(path: &Path, bytes: &[u8]) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    }

    /// What a step's script may do to the tree, each checked with the watch and without:
    /// the next update leaves exactly the next commit's files, nothing outside the tree
    /// is touched, and with the watch only the touched paths were looked at.
    #[test]
    fn whatever_a_script_did_the_next_update_leaves_exactly_the_commit() {
        type Act = fn(&Path, &Path);
        let acts: [(&str, Act); 14] = [
            ("append", |t, _| append(&t.join("a/x.txt"), b"more")),
            ("truncate", |t, _| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(t.join("a/x.txt"))
                    .unwrap()
                    .set_len(0)
                    .unwrap();
            }),
            ("delete", |t, _| {
                std::fs::remove_file(t.join("a/x.txt")).unwrap()
            }),
            ("create", |t, _| {
                std::fs::write(t.join("a/new.o"), "o").unwrap()
            }),
            ("nested", |t, _| {
                std::fs::create_dir_all(t.join("build/x/y")).unwrap();
                std::fs::write(t.join("build/x/y/f"), "f").unwrap();
                std::fs::create_dir_all(t.join("a/empty/dir")).unwrap();
            }),
            ("remove a directory", |t, _| {
                std::fs::remove_dir_all(t.join("a")).unwrap()
            }),
            ("rename a directory", |t, _| {
                std::fs::rename(t.join("a"), t.join("a2")).unwrap()
            }),
            ("file becomes a directory", |t, _| {
                std::fs::remove_file(t.join("a/x.txt")).unwrap();
                std::fs::create_dir(t.join("a/x.txt")).unwrap();
                std::fs::write(t.join("a/x.txt/in"), "i").unwrap();
            }),
            ("directory becomes a link out", |t, out| {
                std::fs::remove_dir_all(t.join("a")).unwrap();
                std::os::unix::fs::symlink(out, t.join("a")).unwrap();
            }),
            ("chmod", |t, _| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(t.join("a/x.txt"), std::fs::Permissions::from_mode(0o755))
                    .unwrap();
            }),
            ("hard link written through", |t, _| {
                std::fs::hard_link(t.join("a/x.txt"), t.join("hl")).unwrap();
                append(&t.join("hl"), b"via link");
            }),
            ("names that are not UTF-8", |t, _| {
                use std::os::unix::ffi::OsStrExt;
                let name = |b: &[u8]| std::ffi::OsStr::from_bytes(b).to_os_string();
                std::fs::write(t.join("a").join(name(b"junk\xff")), "j").unwrap();
                std::fs::create_dir(t.join(name(b"d\xfe"))).unwrap();
                std::fs::write(t.join(name(b"d\xfe")).join("f"), "f").unwrap();
            }),
            ("the root's mode", |t, _| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::write(t.join("a/new"), "n").unwrap();
                std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o750)).unwrap();
            }),
            ("memory-mapped write", |t, _| {
                use std::os::fd::AsRawFd;
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(t.join("a/x.txt"))
                    .unwrap();
                // SAFETY: a one-byte shared mapping of a one-byte file, unmapped at once.
                unsafe {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        1,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        f.as_raw_fd(),
                        0,
                    );
                    assert_ne!(p, libc::MAP_FAILED);
                    *(p.cast::<u8>()) = b'9';
                    libc::munmap(p, 1);
                }
            }),
        ];
        let (_d, repo, a, b) = two_commits();
        let mut none = |_: &[Entry]| -> Result<(), CheckoutError> { Ok(()) };
        let fa = CommitFiles::new(&repo, a).unwrap();
        let fb = CommitFiles::new(&repo, b).unwrap();
        let (want_a, want_b) = (committed(&fa), committed(&fb));
        for watching in [true, false] {
            for (name, act) in &acts {
                for (next, want_next) in [(&fb, &want_b), (&fa, &want_a)] {
                    let outside = tempfile::tempdir().unwrap();
                    std::fs::write(outside.path().join("x.txt"), "outside").unwrap();
                    let mut wt = Worktree::new(crate::foundation::scratch::Scratch::unleased(
                        tempfile::tempdir().unwrap(),
                    ));
                    wt.watching = watching;
                    wt.update_tree(&fa, &mut none).unwrap();
                    assert_eq!(on_disk(wt.path()), want_a);
                    act(wt.path(), outside.path());
                    wt.update_tree(next, &mut none).unwrap();
                    let case = format!(
                        "{name}, watching {watching}, then {}",
                        if std::ptr::eq(next, &fb) {
                            "b"
                        } else {
                            "a again"
                        }
                    );
                    assert_eq!(&on_disk(wt.path()), want_next, "{case}");
                    assert_eq!(
                        on_disk(outside.path()),
                        [("x.txt".into(), "outside".into(), false)],
                        "{case}"
                    );
                    let looked = wt.last_touched;
                    // Walked in full: a second name of a file, the root itself touched (its
                    // mode; an entry of it whose name is not UTF-8).
                    let walked = [
                        "hard link written through",
                        "the root's mode",
                        "names that are not UTF-8",
                    ];
                    if !watching || walked.contains(name) {
                        assert_eq!(looked, None, "{case}: a walk of every file");
                    } else {
                        // The watch's answer, not a walk of every file.
                        assert!(looked.is_some(), "{case}: {looked:?}");
                    }
                    // And nothing done: nothing to write.
                    assert_eq!(
                        wt.update_tree(next, &mut none).unwrap(),
                        Update::default(),
                        "{case}"
                    );
                    // (Removing the root's entry whose name is not UTF-8 touched the root
                    // once more: walked again.)
                    if watching && *name != "names that are not UTF-8" {
                        assert!(wt.last_touched.is_some(), "{case}");
                    }
                }
            }
        }
    }

    /// libgit2's tree diff, as `tree_changes` answered before it skipped unchanged subtrees.
    fn libgit2_changes(
        repo: &Repository,
        old: &git2::Tree,
        new: &git2::Tree,
    ) -> (Vec<Entry>, Vec<String>) {
        let mut changed: Vec<Entry> = Vec::new();
        let mut removed: Vec<String> = Vec::new();
        let diff = repo.diff_tree_to_tree(Some(old), Some(new), None).unwrap();
        for d in diff.deltas() {
            let path = |f: git2::DiffFile| f.path().map(|p| p.to_string_lossy().into_owned());
            match d.status() {
                git2::Delta::Deleted => removed.extend(path(d.old_file())),
                _ => changed.push(Entry {
                    path: path(d.new_file()).unwrap(),
                    id: d.new_file().id(),
                    mode: i32::from(d.new_file().mode()),
                }),
            }
        }
        (changed, removed)
    }

    /// Random pairs of trees (files, executables and links, a file where a directory was and
    /// the other way round, whole directories added and removed): the same changes as
    /// libgit2's diff finds.
    #[test]
    fn tree_changes_agree_with_libgit2s_diff() {
        let d = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(d.path().join("r.git")).unwrap();
        let pool = [
            "a", "a/x", "a/y", "a/d/z", "a/d/w", "b", "b/q", "c", "d/e/f", "d/e/g", "a.b", "a-",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let tree = |next: &mut dyn FnMut() -> u64| {
            let mut chosen: Vec<&str> = pool
                .iter()
                .copied()
                .filter(|_| next().is_multiple_of(2))
                .collect();
            // A path cannot be a file and hold others.
            let files = chosen.clone();
            chosen.retain(|p| !files.iter().any(|f| p.starts_with(&format!("{f}/"))));
            let mut index = git2::Index::new().unwrap();
            for p in &chosen {
                let text = ["one", "two", "three"][(next() % 3) as usize];
                let mode = [0o100644, 0o100755, 0o120000][(next() % 3) as usize];
                let id = repo.blob(text.as_bytes()).unwrap();
                index
                    .add(&index_entry(p.as_bytes(), id, mode, text.len()))
                    .unwrap();
            }
            index.write_tree_to(&repo).unwrap()
        };
        // libgit2 splits a file's change of kind (a link now) into a deletion and an
        // addition; either way the file is written anew.
        let sorted = |(mut c, mut r): (Vec<Entry>, Vec<String>)| {
            c.sort_by(|x, y| x.path.cmp(&y.path));
            r.retain(|p| !c.iter().any(|e| e.path == *p));
            r.sort();
            (
                c.into_iter()
                    .map(|e| (e.path, e.id, e.mode))
                    .collect::<Vec<_>>(),
                r,
            )
        };
        for case in 0..300 {
            let (a, b) = (tree(&mut next), tree(&mut next));
            let (a, b) = (repo.find_tree(a).unwrap(), repo.find_tree(b).unwrap());
            assert_eq!(
                sorted(tree_changes(&repo, &a, &b).unwrap()),
                sorted(libgit2_changes(&repo, &a, &b)),
                "case {case}"
            );
        }
    }

    /// Over several steps: a directory the script removed, or that history removed and
    /// brought back, is watched again once it is written again; a file written through a
    /// hard link that is gone again (in the tree or outside it) is restored.
    #[test]
    fn what_later_steps_do_is_seen_after_directories_come_and_go() {
        let (_d, repo, a, b) = two_commits();
        let mut none = |_: &[Entry]| -> Result<(), CheckoutError> { Ok(()) };
        let fa = CommitFiles::new(&repo, a).unwrap();
        let fb = CommitFiles::new(&repo, b).unwrap();
        let (want_a, want_b) = (committed(&fa), committed(&fb));
        let outside = tempfile::tempdir().unwrap();
        let mut wt = Worktree::new(crate::foundation::scratch::Scratch::unleased(
            tempfile::tempdir().unwrap(),
        ));
        let t = wt.path().to_path_buf();
        // Each step: what its script does, then the commit the worktree is made next.
        type Step<'s> = (
            &'s CommitFiles<'s>,
            &'s Vec<(String, String, bool)>,
            &'s dyn Fn(),
        );
        let steps: [Step; 8] = [
            (&fa, &want_a, &|| {
                std::fs::remove_dir_all(t.join("a")).unwrap()
            }),
            // a/ is written again: what is done in it next is seen.
            (&fa, &want_a, &|| append(&t.join("a/x.txt"), b"after")),
            // c/ comes with b, goes with a, comes again with b.
            (&fb, &want_b, &|| {}),
            (&fa, &want_a, &|| {}),
            (&fb, &want_b, &|| {}),
            (&fb, &want_b, &|| append(&t.join("c/z.txt"), b"build")),
            (&fb, &want_b, &|| {
                std::fs::hard_link(t.join("a/y.txt"), t.join(".tmp")).unwrap();
                append(&t.join(".tmp"), b"evil");
                std::fs::remove_file(t.join(".tmp")).unwrap();
            }),
            (&fb, &want_b, &|| {
                std::fs::hard_link(t.join("a/x.txt"), outside.path().join("hl")).unwrap();
                append(&outside.path().join("hl"), b"evil");
            }),
        ];
        wt.update_tree(&fa, &mut none).unwrap();
        for (i, (next, want_next, act)) in steps.iter().enumerate() {
            eprintln!("step {i}: {:?}", on_disk(&t));
            act();
            wt.update_tree(next, &mut none).unwrap();
            assert_eq!(&on_disk(&t), *want_next, "step {i}");
        }
        // The outside name keeps what was written through it; the tree's file is new.
        assert_eq!(
            std::fs::read_to_string(outside.path().join("hl")).unwrap(),
            "1evil"
        );
    }

    /// A tree whose names are not all UTF-8 is listed whole (libgit2's walk stopped at such
    /// a directory, and a whole-tree step then saw an empty tree), the bad bytes as U+FFFD.
    #[test]
    fn every_file_is_listed_when_a_name_is_not_utf8() {
        let d = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(d.path().join("r.git")).unwrap();
        let mut index = git2::Index::new().unwrap();
        for p in [&b"a/x"[..], b"d\xfe/f", b"n\xff", b"z"] {
            let id = repo.blob(b"t").unwrap();
            index.add(&index_entry(p, id, 0o100644, 1)).unwrap();
        }
        let tree = index.write_tree_to(&repo).unwrap();
        let tree = repo.find_tree(tree).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let c = repo.commit(None, &sig, &sig, "c", &tree, &[]).unwrap();
        let files = CommitFiles::new(&repo, c).unwrap();
        assert_eq!(files.paths(), ["a/x", "d\u{fffd}/f", "n\u{fffd}", "z"]);
        let out = tempfile::tempdir().unwrap();
        assert_eq!(files.materialize(out.path()).unwrap(), 4);
    }
}
