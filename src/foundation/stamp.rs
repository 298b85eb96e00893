//! What a command's answer depended on, as the file system's stat data: the record behind
//! a build cache hit's stamp (`src/app/hit.rs`), which answers the same command again
//! without re-reading and re-hashing its inputs while none of these paths has changed, as
//! git's index trusts a file's stat data and cargo's fingerprints trust modification times.
//!
//! While noting is on, the reads that decide a build hit say what they looked at: every
//! bounded read ([`crate::foundation::fsutil::open_checked`]), the include closure's look-ups,
//! the compiler search, the repository discovery and the store. Each path is kept with both
//! its own stat data and its target's (`lstat` and `stat`), so a replaced link shows too; a
//! path that was absent is kept as absent, and a directory whose entries were listed is kept
//! as a directory (creating or removing an entry changes its times). A noting that missed a
//! path would let a stale hit
//! through: `tests/build/hits.rs` runs a hit under strace and checks that every file it
//! opened or looked up was noted.
//!
//! Stat data can be trusted only for files that were not changed around the time they were
//! read: file times tick coarsely (a few milliseconds on Linux), so a file rewritten twice in
//! one tick, same size, keeps its stat data. [`Noted::seen`] refuses a set where any path
//! changed less than [`SETTLE`] before the command started (as git calls such an entry
//! "racily clean"); a change during the command is younger still.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

/// How long before a command's start a path must have last changed for its stat data to
/// stand for its content.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// At most this many paths are noted; a command that reads more gets no stamp.
const MAX_PATHS: usize = 4096;

static ON: AtomicBool = AtomicBool::new(false);
static NOTED: Mutex<Option<Noting>> = Mutex::new(None);

#[derive(Default)]
struct Noting {
    /// Each path with its stat data when first noted (as the command read it).
    paths: BTreeMap<PathBuf, Seen>,
    blobs: BTreeMap<PathBuf, String>,
    refused: Option<String>,
}

/// Starts noting (for the rest of the process: one command per process).
pub fn start() {
    if let Ok(mut n) = NOTED.lock() {
        *n = Some(Noting::default());
        ON.store(true, Ordering::Release);
    }
}

/// Whether noting is on.
pub fn on() -> bool {
    ON.load(Ordering::Acquire)
}

/// Notes that the answer depends on what `path` is (its content, or its absence).
pub fn note(path: &Path) {
    if !ON.load(Ordering::Acquire) {
        return;
    }
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        match std::env::current_dir() {
            Ok(d) => d.join(path),
            Err(_) => return refuse("the current directory cannot be read"),
        }
    };
    if let Ok(mut n) = NOTED.lock()
        && let Some(n) = n.as_mut()
    {
        if n.paths.contains_key(&abs) {
            return;
        }
        if n.paths.len() >= MAX_PATHS {
            n.refused.get_or_insert_with(|| "too many paths".into());
            return;
        }
        let seen = Seen::of(&abs);
        n.paths.insert(abs, seen);
    }
}

/// [`note`]s `path` and gives it back, for a look-up written as one expression.
pub fn noted(path: &Path) -> &Path {
    note(path);
    path
}

/// Notes a stored object whose content a hit re-hashes (it is named by its sha256).
pub fn note_blob(path: &Path, sha256: &str) {
    if !ON.load(Ordering::Acquire) {
        return;
    }
    note(path);
    if let Ok(mut n) = NOTED.lock()
        && let Some(n) = n.as_mut()
    {
        n.blobs.insert(path.to_path_buf(), sha256.to_string());
    }
}

/// Says that this command's answer depends on something stat data cannot stand for: it
/// gets no stamp.
pub fn refuse(why: &str) {
    if !ON.load(Ordering::Acquire) {
        return;
    }
    if let Ok(mut n) = NOTED.lock()
        && let Some(n) = n.as_mut()
    {
        n.refused.get_or_insert_with(|| why.to_string());
    }
}

/// Why a command gets no stamp.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum NoStamp {
    /// Noting was never started.
    #[error("nothing was noted")]
    NotNoting,
    /// The answer depended on something stat data cannot stand for.
    #[error("{0}")]
    Refused(String),
    /// A path changed while the command ran.
    #[error("{} changed while the command ran", .0.display())]
    ChangedWhileRead(PathBuf),
    /// A path changed too shortly before the command for its stat data to be trusted.
    #[error("{} changed too recently to be trusted by its stat data", .0.display())]
    TooRecent(PathBuf),
}

/// Stops noting and returns what was noted: the paths with their stat data now, and the
/// objects to re-hash; or why there can be no stamp.
pub fn finish(started: SystemTime) -> Result<Noted, NoStamp> {
    ON.store(false, Ordering::Release);
    let n = NOTED
        .lock()
        .ok()
        .and_then(|mut n| n.take())
        .ok_or(NoStamp::NotNoting)?;
    if let Some(why) = n.refused {
        return Err(NoStamp::Refused(why));
    }
    // An absent path is checked for being absent still, which is exact; a directory whose
    // entries were listed is noted itself (its times change with every entry made or
    // removed). A path that changed while the command ran (a file deleted, a link
    // re-pointed) leaves the answer without a stamp: what was read is not what is there.
    let mut seen = Vec::with_capacity(n.paths.len());
    // The file system is asked once per device.
    let mut kinds: BTreeMap<Option<u64>, Option<&str>> = BTreeMap::new();
    for (p, then) in n.paths {
        let now = Seen::of(&p);
        if now != then {
            return Err(NoStamp::ChangedWhileRead(p));
        }
        let dev = now.own.as_ref().map(|m| m.dev);
        let kind = match dev {
            Some(_) => *kinds.entry(dev).or_insert_with(|| network_fs(&p)),
            None => network_fs(&p),
        };
        if let Some(fs) = kind {
            return Err(NoStamp::Refused(format!(
                "{} is on a network file system ({fs}), whose stat data may be another host's, cached",
                p.display()
            )));
        }
        seen.push(now);
    }
    let limit = started
        .checked_sub(SETTLE)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let limit_ns = limit
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    if let Some(young) = seen.iter().find(|s| s.changed_after(limit_ns)) {
        return Err(NoStamp::TooRecent(young.path.clone()));
    }
    Ok(Noted {
        seen,
        blobs: n
            .blobs
            .into_iter()
            .map(|(p, d)| Blob { path: p, sha256: d })
            .collect(),
    })
}

/// The network or user-space file system `path` (or, where it is absent, its nearest
/// existing directory) is on, if any: there `lstat` may answer from attributes cached for
/// up to a minute after another host's edit (NFS's `acregmax`), where a read revalidates.
fn network_fs(path: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    const KINDS: [(i64, &str); 14] = [
        (0x6969, "NFS"),
        (0x517B, "SMB"),
        (0xFF53_4D42, "CIFS"),
        (0xFE53_4D42, "SMB2"),
        (0x0BD0_0BD0, "Lustre"),
        (0x4750_4653, "GPFS"),
        (0x00C3_6400, "Ceph"),
        (0x5346_414F, "AFS"),
        (0x0102_1997, "9P"),
        (0x1983_0326, "BeeGFS"),
        (0x6573_5546, "FUSE"),
        (0x7461_636F, "OCFS2"),
        (0x0116_1970, "GFS2"),
        (0xAAD7_AAEA, "PanFS"),
    ];
    let existing = path
        .ancestors()
        .find(|a| std::fs::symlink_metadata(a).is_ok())?;
    let c = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `st` a properly sized, writable statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    // f_type is a signed word on glibc and another type elsewhere: compared as i64.
    let kind = st.f_type as i64;
    KINDS.iter().find(|(k, _)| *k == kind).map(|(_, n)| *n)
}

/// What was noted, with each path's stat data.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Noted {
    /// Every path, as it was.
    pub seen: Vec<Seen>,
    /// The stored objects to re-hash.
    pub blobs: Vec<Blob>,
}

impl Noted {
    /// Whether every path is as it was; the first path that differs otherwise. (The
    /// objects' digests are the caller's to check, with a bounded read.)
    pub fn check(&self) -> Result<(), PathBuf> {
        match self.seen.iter().find(|s| Seen::of(&s.path) != **s) {
            Some(s) => Err(s.path.clone()),
            None => Ok(()),
        }
    }
}

/// A stored object a hit re-hashes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Blob {
    /// Where it is.
    pub path: PathBuf,
    /// The sha256 of its content.
    pub sha256: String,
}

/// One path's stat data: of the path itself (`lstat`) and, where it is a symbolic link, of
/// what it leads to (`stat`); `None` where there is nothing (or no link).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Seen {
    /// The path, absolute.
    pub path: PathBuf,
    /// Its own stat data.
    pub own: Option<Meta>,
    /// Its target's, where it is a link.
    pub target: Option<Meta>,
}

impl Seen {
    /// The path's stat data now: its target's only where it is a link (one system call
    /// for every other path).
    pub fn of(path: &Path) -> Seen {
        let own = std::fs::symlink_metadata(path).ok();
        let target = match &own {
            Some(m) if m.file_type().is_symlink() => std::fs::metadata(path).ok(),
            _ => None,
        };
        Seen {
            path: path.to_path_buf(),
            own: own.map(|m| Meta::of(&m)),
            target: target.map(|m| Meta::of(&m)),
        }
    }

    fn changed_after(&self, limit_ns: i128) -> bool {
        [&self.own, &self.target]
            .into_iter()
            .flatten()
            .any(|m| m.mtime_ns >= limit_ns || m.ctime_ns >= limit_ns)
    }
}

/// The stat data that changes when a file's content, type, owner or place does.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Meta {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, in nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Status change time, in nanoseconds since the epoch (no user can set it).
    pub ctime_ns: i128,
}

impl Meta {
    fn of(m: &std::fs::Metadata) -> Meta {
        Meta {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            uid: m.uid(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: noting is for the whole process, and tests run on threads of one.
    #[test]
    fn noted_paths_hold_until_a_file_a_link_or_a_directory_changes() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "one").unwrap();
        let old = SystemTime::now() + SETTLE + std::time::Duration::from_secs(1);
        start();
        note(&f);
        note(&d.path().join("absent/x"));
        note_blob(&f, "digest");
        let noted = finish(old).unwrap();
        assert_eq!(noted.blobs[0].path, f);
        assert_eq!(noted.check(), Ok(()));
        // A path that was absent and is there now.
        std::fs::create_dir(d.path().join("absent")).unwrap();
        std::fs::write(d.path().join("absent/x"), "").unwrap();
        assert_eq!(noted.check(), Err(d.path().join("absent/x")));
        std::fs::remove_dir_all(d.path().join("absent")).unwrap();
        assert_eq!(noted.check(), Ok(()));
        // A rewrite shows (one of another size: two writes of one size in one tick of the
        // file clock look alike, which is what the settling time is for).
        std::fs::write(&f, "three").unwrap();
        assert_eq!(noted.check(), Err(f.clone()));
        // Freshly changed files are refused.
        start();
        note(&f);
        // (Other tests of this process may note and refuse at the same time: only that
        // some reason is given is certain.)
        assert!(finish(SystemTime::now()).is_err());
        start();
        refuse("why");
        assert!(matches!(finish(old), Err(NoStamp::Refused(_))));
        // A path that changes between its noting and the end is refused.
        start();
        note(&f);
        std::fs::remove_file(&f).unwrap();
        assert_eq!(finish(old), Err(NoStamp::ChangedWhileRead(f.clone())));
        std::fs::write(&f, "three").unwrap();
        // A link's target is seen through it.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let through = Seen::of(&link);
        assert!(through.target.is_some() && Seen::of(&f).target.is_none());
        std::fs::write(&f, "four!").unwrap();
        assert_ne!(Seen::of(&link), through);
        // Noting off: nothing is kept.
        note(&f);
        assert_eq!(finish(old), Err(NoStamp::NotNoting));
    }
}
