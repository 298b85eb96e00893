//! What changed under a directory tree between two moments, from the kernel's inotify
//! events, so that a caller need not `lstat` every file to find out (as git's fsmonitor
//! spares `git status` its scan).
//!
//! A [`TreeWatch`] watches directories and files of one tree, each by its path relative to
//! the root. A directory's watch names every entry created, deleted or moved in it and every
//! child opened, written or re-moded through it; a file's own watch names the file whatever
//! name it was reached by (a hard link made inside or outside the tree, written through), and
//! when its count of links changes. Every such event marks a path as *touched*.
//! [`TreeWatch::take`] gives the paths touched since the last take, or `None` when the
//! kernel's answer is not complete (its queue overflowed, something could not be watched,
//! the root itself changed): the caller then looks at everything, as it would without a
//! watch. Events keep coming between takes, the caller's own writes among them, so nothing
//! done while the caller works is lost. What no event reports: a write through a memory
//! mapping of a file opened before the last take.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a directory's watch reports: its entries created, deleted and moved, its children
/// opened, written and re-moded, and the directory itself deleted or moved.
const DIR_MASK: u32 = libc::IN_OPEN
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW
    | libc::IN_EXCL_UNLINK;

/// What a file's own watch reports: the file opened, written or re-moded by any of its
/// names, its links counted anew (a hard link made or removed), the file deleted or moved.
const FILE_MASK: u32 = libc::IN_OPEN
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_DONT_FOLLOW;

/// Watches directories and files of one tree; see the module's documentation.
pub struct TreeWatch {
    fd: OwnedFd,
    root: PathBuf,
    /// Each watch's path relative to the root ("" for the root), and whether it is a
    /// directory's.
    watches: HashMap<i32, (String, bool)>,
    /// The watch of each path watched.
    by_path: HashMap<String, i32>,
    touched: HashSet<String>,
    /// Something happened that no path in `touched` tells.
    lost: bool,
    /// Paths that could not be watched (and whether each is a directory): until they are,
    /// nothing is known.
    blind: HashMap<String, bool>,
}

impl TreeWatch {
    /// A watch on `root` and nothing below it yet, or `None` where inotify is not to be had
    /// (its per-user limit of instances, a kernel without it).
    pub fn new(root: &Path) -> Option<TreeWatch> {
        // SAFETY: inotify_init1 takes flags only; the descriptor it returns is ours.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut w = TreeWatch {
            fd,
            root: root.to_path_buf(),
            watches: HashMap::new(),
            by_path: HashMap::new(),
            touched: HashSet::new(),
            lost: false,
            blind: HashMap::new(),
        };
        w.watch_dirs(std::iter::empty());
        w.blind.is_empty().then_some(w)
    }

    /// Watches these directories (relative to the root) too, those not watched yet (and
    /// the root, always). One that is not there (no longer in the tree) is passed over; one
    /// that cannot be watched (the per-user limit of watches reached) leaves the answer
    /// unknown until a later call watches it.
    pub fn watch_dirs<'a>(&mut self, rels: impl Iterator<Item = &'a str>) {
        self.read();
        let rels: Vec<String> = std::iter::once(String::new())
            .chain(rels.map(str::to_string))
            .filter(|r| !self.by_path.contains_key(r))
            .collect();
        self.add_all(rels.into_iter().map(|r| (r, true)));
    }

    /// Watches these files (relative to the root), each as it is now: a file written anew is
    /// another inode, whose watch replaces the old one's.
    pub fn watch_files<'a>(&mut self, rels: impl Iterator<Item = &'a str>) {
        self.read();
        self.add_all(rels.map(|r| (r.to_string(), false)));
    }

    /// Adds these watches and tries again those refused before.
    fn add_all(&mut self, items: impl Iterator<Item = (String, bool)>) {
        let retry: Vec<(String, bool)> = self.blind.drain().collect();
        for (rel, dir) in items.chain(retry) {
            match self.add(&rel, dir) {
                Ok(()) => {}
                // Not there (any more): nothing of the tree to watch.
                Err(e) if e == libc::ENOENT || e == libc::ENOTDIR => {}
                Err(_) => {
                    self.blind.insert(rel, dir);
                }
            }
        }
    }

    /// Adds one watch (or finds the same inode's); the kernel's error if it refused.
    fn add(&mut self, rel: &str, dir: bool) -> Result<(), i32> {
        let path = if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        };
        let mask = if dir { DIR_MASK } else { FILE_MASK };
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)?;
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        if let Some(old) = self.by_path.insert(rel.to_string(), wd)
            && old != wd
        {
            // Another inode had this path: its watch would name that one's events here.
            self.forget(old);
        }
        if let Some((other, _)) = self.watches.insert(wd, (rel.to_string(), dir))
            && other != rel
        {
            // One inode under two paths (a hard link, a directory moved within the tree):
            // its events could not be told apart.
            self.by_path.remove(&other);
            self.lost = true;
        }
        Ok(())
    }

    /// The paths touched since the last take (relative to the root; a directory's path
    /// stands for everything under it), or `None` when that is not known. Either way the
    /// next take starts from here.
    pub fn take(&mut self) -> Option<Vec<String>> {
        self.read();
        let known = !self.lost && self.blind.is_empty();
        self.lost = false;
        let mut out: Vec<String> = self.touched.drain().collect();
        out.sort_unstable();
        known.then_some(out)
    }

    /// Drains the queue into `touched`.
    fn read(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: reading into a buffer we own, no longer than it.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n < 0 {
                let err = std::io::Error::last_os_error();
                match err.kind() {
                    std::io::ErrorKind::WouldBlock => return,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => {
                        self.lost = true;
                        return;
                    }
                }
            }
            let n = usize::try_from(n).unwrap_or(0);
            if n == 0 {
                return;
            }
            self.parse(&buf[..n]);
        }
    }

    /// One read's events.
    fn parse(&mut self, mut bytes: &[u8]) {
        const HEAD: usize = std::mem::size_of::<libc::inotify_event>();
        while bytes.len() >= HEAD {
            let int = |at: usize| {
                let mut b = [0u8; 4];
                b.copy_from_slice(&bytes[at..at + 4]);
                b
            };
            let wd = i32::from_ne_bytes(int(0));
            let mask = u32::from_ne_bytes(int(4));
            let len = u32::from_ne_bytes(int(12)) as usize;
            let Some(name) = bytes.get(HEAD..HEAD + len) else {
                self.lost = true;
                return;
            };
            let name = name.split(|b| *b == 0).next().unwrap_or_default();
            self.event(wd, mask, name);
            bytes = &bytes[HEAD + len..];
        }
    }

    /// What one event touched.
    fn event(&mut self, wd: i32, mask: u32, name: &[u8]) {
        if mask & (libc::IN_Q_OVERFLOW | libc::IN_UNMOUNT) != 0 {
            self.lost = true;
            return;
        }
        let Some((rel, dir)) = self.watches.get(&wd).cloned() else {
            // A watch already dropped: its path was marked when it was.
            return;
        };
        let gone = mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0;
        if !dir {
            // A file's own watch: whatever happened to it, by whatever name.
            if gone {
                self.forget(wd);
            }
            self.touched.insert(rel);
            return;
        }
        if name.is_empty() {
            // The watched directory itself: opening or listing it changes nothing.
            if !gone && mask & libc::IN_ATTRIB == 0 {
                return;
            }
            if rel.is_empty() {
                // The root itself changed (its mode, or it moved): look at everything.
                self.lost = true;
            }
            if gone {
                // Moved away or gone: its watch and those below it would name another
                // place's events by these paths, so they are dropped, and made again with
                // the directory.
                let prefix = format!("{rel}/");
                let below: Vec<i32> = self
                    .by_path
                    .iter()
                    .filter(|(p, _)| rel.is_empty() || p.starts_with(&prefix))
                    .map(|(_, wd)| *wd)
                    .collect();
                for w in below {
                    self.forget(w);
                }
                self.forget(wd);
            }
            self.touched.insert(rel);
            return;
        }
        if mask & libc::IN_ISDIR != 0 && mask & (libc::IN_OPEN | libc::IN_CLOSE_WRITE) != 0 {
            // A subdirectory opened for reading (`ls`, `find`): nothing changed.
            return;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            // A name no path of the tree can have: the directory is looked at whole.
            self.touched.insert(rel);
            return;
        };
        let path = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        self.touched.insert(path);
    }

    /// Drops one watch (the kernel may have dropped it already).
    fn forget(&mut self, wd: i32) {
        if let Some((rel, _)) = self.watches.remove(&wd)
            && self.by_path.get(&rel) == Some(&wd)
        {
            self.by_path.remove(&rel);
        }
        // SAFETY: a valid descriptor; removing a watch the kernel dropped only fails.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// a/b/f and top, every directory and file watched, nothing touched yet.
    fn tree() -> (tempfile::TempDir, TreeWatch) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/b/f"), "f").unwrap();
        std::fs::write(d.path().join("top"), "t").unwrap();
        let mut w = TreeWatch::new(d.path()).unwrap();
        w.watch_dirs(["a", "a/b"].into_iter());
        w.watch_files(["a/b/f", "top"].into_iter());
        assert_eq!(w.take(), Some(vec![]));
        (d, w)
    }

    fn append(p: &Path, b: &[u8]) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
        f.write_all(b).unwrap();
    }

    #[test]
    fn each_kind_of_change_names_its_path() {
        let (d, mut w) = tree();
        let p = |s: &str| d.path().join(s);
        append(&p("a/b/f"), b"x");
        assert_eq!(w.take(), Some(vec!["a/b/f".to_string()]));
        std::fs::read(p("top")).unwrap();
        assert_eq!(w.take(), Some(vec!["top".to_string()]), "opened to read");
        std::fs::write(p("a/new"), "n").unwrap();
        std::fs::remove_file(p("top")).unwrap();
        assert_eq!(w.take(), Some(vec!["a/new".to_string(), "top".to_string()]));
        std::fs::rename(p("a/b"), p("moved")).unwrap();
        let t = w.take().unwrap();
        assert!(
            t.contains(&"a/b".to_string()) && t.contains(&"moved".to_string()),
            "{t:?}"
        );
        // The moved directory's watches (its own and its file's) were dropped: what happens
        // in it now is not named as a/b, and a/b is watched again once it exists.
        std::fs::write(p("moved/g"), "g").unwrap();
        append(&p("moved/f"), b"y");
        assert_eq!(w.take(), Some(vec![]));
        std::fs::create_dir(p("a/b")).unwrap();
        w.watch_dirs(["a/b"].into_iter());
        assert_eq!(
            w.take(),
            Some(vec!["a/b".to_string()]),
            "made: its parent said so"
        );
        std::fs::write(p("a/b/h"), "h").unwrap();
        assert_eq!(w.take(), Some(vec!["a/b/h".to_string()]));
    }

    /// A file's own watch names it whatever name it is reached by: a hard link made
    /// (inside the tree or out of it) and written through, then removed again.
    #[test]
    fn a_file_written_through_another_name_is_named() {
        let (d, mut w) = tree();
        let outside = tempfile::tempdir().unwrap();
        for other in [d.path().join(".tmp"), outside.path().join("hl")] {
            std::fs::hard_link(d.path().join("a/b/f"), &other).unwrap();
            assert!(
                w.take().unwrap().contains(&"a/b/f".to_string()),
                "linked: {other:?}"
            );
            append(&other, b"evil");
            std::fs::remove_file(&other).unwrap();
            let t = w.take().unwrap();
            assert!(t.contains(&"a/b/f".to_string()), "{other:?}: {t:?}");
        }
    }

    #[test]
    fn listing_a_directory_touches_nothing_and_removing_one_names_it() {
        let (d, mut w) = tree();
        let _ = std::fs::read_dir(d.path().join("a")).unwrap().count();
        let _ = std::fs::read_dir(d.path()).unwrap().count();
        assert_eq!(w.take(), Some(vec![]));
        std::fs::remove_dir_all(d.path().join("a")).unwrap();
        let t = w.take().unwrap();
        assert!(
            t.contains(&"a".to_string()) && t.contains(&"a/b".to_string()),
            "{t:?}"
        );
    }

    #[test]
    fn a_directory_no_longer_there_is_passed_over_and_a_moved_root_is_unknown() {
        let (d, mut w) = tree();
        w.watch_dirs(["no/such/dir"].into_iter());
        assert_eq!(w.take(), Some(vec![]));
        let moved = d.path().with_extension("moved");
        std::fs::rename(d.path(), &moved).unwrap();
        assert_eq!(w.take(), None);
        std::fs::rename(&moved, d.path()).unwrap();
        // Everything under the root was dropped with it, and is watched again when asked.
        w.watch_dirs(["a", "a/b"].into_iter());
        w.watch_files(["a/b/f"].into_iter());
        let _ = w.take();
        append(&d.path().join("a/b/f"), b"z");
        assert_eq!(w.take(), Some(vec!["a/b/f".to_string()]));
    }

    #[test]
    fn a_full_queue_leaves_the_answer_unknown() {
        let (d, mut w) = tree();
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16384);
        if max > 100_000 {
            eprintln!("skipped: max_queued_events is {max}, too many events to overflow here");
            return;
        }
        // Two files in turn: the kernel folds an event into an identical one before it.
        let files = [d.path().join("top"), d.path().join("a/b/f")];
        for i in 0..max + 10 {
            std::fs::File::open(&files[i % 2]).unwrap();
        }
        assert_eq!(w.take(), None);
        assert_eq!(
            w.take(),
            Some(vec![]),
            "the caller looked at everything: known again"
        );
    }
}
