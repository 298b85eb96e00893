//! What changed under a directory tree between two moments, from the kernel's inotify
//! events, so that a caller need not `lstat` every file to find out (as git's fsmonitor
//! spares `git status` its scan).
//!
//! A [`TreeWatch`] watches directories of one tree (each by its path relative to the
//! root). Every event under them names a path as *touched*: a file opened (for reading
//! too: a file written through a memory mapping is found by its opening), written, closed
//! after writing, or whose attributes or links changed; an entry created, deleted or moved;
//! a watched directory deleted or moved. [`TreeWatch::touched`] gives those paths since the
//! last [`TreeWatch::settle`], or `None` when the kernel's answer is not complete (its queue
//! overflowed, a directory could not be watched, the root itself moved): the caller then
//! looks at everything, as it would without a watch. What no event reports, and the caller
//! must accept: a write through a memory mapping made before the last `settle`, or through
//! another hard link outside the tree made before it.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The events that can mean a path changed (and the opening that precedes any change).
const MASK: u32 = libc::IN_OPEN
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

/// Watches directories of one tree; see the module's documentation.
pub struct TreeWatch {
    fd: OwnedFd,
    root: PathBuf,
    /// Each watch's directory, relative to the root ("" for the root).
    dirs: HashMap<i32, String>,
    /// The directories watched, by relative path.
    watched: HashMap<String, i32>,
    touched: HashSet<String>,
    /// Something happened that no path in `touched` tells.
    lost: bool,
    /// Directories that could not be watched: until they are, nothing is known.
    blind: HashSet<String>,
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
            dirs: HashMap::new(),
            watched: HashMap::new(),
            touched: HashSet::new(),
            lost: false,
            blind: HashSet::new(),
        };
        w.watch(std::iter::empty());
        w.blind.is_empty().then_some(w)
    }

    /// Watches these directories (relative to the root) too, those not watched yet, and
    /// tries again those that could not be watched before. One that cannot be watched (gone,
    /// or the per-user limit of watches reached) leaves the answer unknown until it is.
    pub fn watch<'a>(&mut self, rels: impl Iterator<Item = &'a str>) {
        // The root always (a watch the kernel dropped is made again), and those that failed.
        let retry: Vec<String> = self.blind.drain().collect();
        let rels = std::iter::once(String::new())
            .chain(rels.map(str::to_string))
            .chain(retry)
            .collect::<Vec<String>>();
        for rel in rels {
            if self.watched.contains_key(&rel) {
                continue;
            }
            let path = if rel.is_empty() {
                self.root.clone()
            } else {
                self.root.join(&rel)
            };
            let wd = CString::new(path.as_os_str().as_bytes()).map_or(-1, |c| {
                // SAFETY: a valid descriptor and a NUL-terminated path.
                unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), MASK) }
            });
            if wd < 0 {
                self.blind.insert(rel);
                continue;
            }
            if let Some(old) = self.dirs.insert(wd, rel.clone()) {
                // The same directory under two names (a hard-linked or moved directory).
                self.watched.remove(&old);
                self.lost = true;
            }
            self.watched.insert(rel, wd);
        }
    }

    /// Reads the events so far and forgets them: what the caller itself just did. A
    /// directory that could not be watched still leaves the answer unknown.
    pub fn settle(&mut self) {
        self.read();
        self.touched.clear();
        self.lost = false;
    }

    /// The paths touched since the last [`TreeWatch::settle`] (relative to the root; a
    /// directory's path stands for everything under it), or `None` when that is not known.
    pub fn touched(&mut self) -> Option<Vec<String>> {
        self.read();
        if self.lost || !self.blind.is_empty() {
            return None;
        }
        let mut out: Vec<String> = self.touched.iter().cloned().collect();
        out.sort_unstable();
        Some(out)
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
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            // A watch already dropped: its directory was marked when it was.
            return;
        };
        if name.is_empty() {
            // The watched directory itself: opening or listing it changes nothing.
            let gone = mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0;
            if !gone && mask & libc::IN_ATTRIB == 0 {
                return;
            }
            if dir.is_empty() {
                // The root itself changed (its mode, or it moved): look at everything.
                self.lost = true;
            }
            if gone {
                // Moved away or gone: its watch would name another place's events by this
                // path, so it is dropped, and the directory watched again when it is made.
                self.unwatch(wd);
            }
            self.touched.insert(dir);
            return;
        }
        if mask & libc::IN_ISDIR != 0 && mask & (libc::IN_OPEN | libc::IN_CLOSE_WRITE) != 0 {
            // A subdirectory opened for reading (`ls`, `find`): nothing changed.
            return;
        }
        let Ok(name) = std::str::from_utf8(name) else {
            // A name no path of the tree can have: the directory is looked at whole.
            self.touched.insert(dir);
            return;
        };
        let path = if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        };
        self.touched.insert(path);
    }

    /// Drops one watch (the kernel may have dropped it already).
    fn unwatch(&mut self, wd: i32) {
        if let Some(rel) = self.dirs.remove(&wd) {
            self.watched.remove(&rel);
        }
        // SAFETY: a valid descriptor; removing a watch the kernel dropped only fails.
        unsafe { libc::inotify_rm_watch(self.fd.as_raw_fd(), wd) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, TreeWatch) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/b/f"), "f").unwrap();
        std::fs::write(d.path().join("top"), "t").unwrap();
        let mut w = TreeWatch::new(d.path()).unwrap();
        w.watch(["a", "a/b"].into_iter());
        w.settle();
        (d, w)
    }

    #[test]
    fn each_kind_of_change_names_its_path() {
        use std::io::Write as _;
        let (d, mut w) = tree();
        assert_eq!(w.touched(), Some(vec![]));
        let p = |s: &str| d.path().join(s);
        std::fs::OpenOptions::new()
            .append(true)
            .open(p("a/b/f"))
            .unwrap()
            .write_all(b"x")
            .unwrap();
        assert_eq!(w.touched(), Some(vec!["a/b/f".to_string()]));
        w.settle();
        std::fs::read(p("top")).unwrap();
        assert_eq!(w.touched(), Some(vec!["top".to_string()]), "opened to read");
        w.settle();
        std::fs::write(p("a/new"), "n").unwrap();
        std::fs::remove_file(p("top")).unwrap();
        assert_eq!(
            w.touched(),
            Some(vec!["a/new".to_string(), "top".to_string()])
        );
        w.settle();
        std::fs::rename(p("a/b"), p("moved")).unwrap();
        let t = w.touched().unwrap();
        assert!(
            t.contains(&"a/b".to_string()) && t.contains(&"moved".to_string()),
            "{t:?}"
        );
        w.settle();
        // The moved directory's watch was dropped: what happens in it now is not named
        // as a/b, and a/b is watched again once it exists.
        std::fs::write(p("moved/g"), "g").unwrap();
        assert_eq!(w.touched(), Some(vec![]));
        std::fs::create_dir(p("a/b")).unwrap();
        w.watch(["a/b"].into_iter());
        w.settle();
        std::fs::write(p("a/b/h"), "h").unwrap();
        assert_eq!(w.touched(), Some(vec!["a/b/h".to_string()]));
    }

    #[test]
    fn listing_a_directory_touches_nothing_and_removing_one_names_it() {
        let (d, mut w) = tree();
        let _ = std::fs::read_dir(d.path().join("a")).unwrap().count();
        let _ = std::fs::read_dir(d.path()).unwrap().count();
        assert_eq!(w.touched(), Some(vec![]));
        std::fs::remove_dir_all(d.path().join("a")).unwrap();
        let t = w.touched().unwrap();
        assert!(
            t.contains(&"a".to_string()) && t.contains(&"a/b".to_string()),
            "{t:?}"
        );
    }

    #[test]
    fn an_unwatchable_directory_or_a_moved_root_leaves_the_answer_unknown() {
        let (d, mut w) = tree();
        w.watch(["no/such/dir"].into_iter());
        assert_eq!(w.touched(), None);
        w.settle();
        assert_eq!(w.touched(), None, "still unwatched: still unknown");
        std::fs::create_dir_all(d.path().join("no/such/dir")).unwrap();
        w.watch(std::iter::empty());
        w.settle();
        assert_eq!(
            w.touched(),
            Some(vec![]),
            "watched at the retry: known again"
        );
        let moved = d.path().with_extension("moved");
        std::fs::rename(d.path(), &moved).unwrap();
        assert_eq!(w.touched(), None);
        std::fs::rename(&moved, d.path()).unwrap();
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
        assert_eq!(w.touched(), None);
    }
}
