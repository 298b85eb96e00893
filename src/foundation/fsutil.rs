//! Atomic file writes: a temporary file in the same directory, fsync, then rename.
//!
//! A reader (or a crash) never sees a half-written lockfile, fingerprint or store object:
//! either the old file is there or the complete new one is. Files get the mode a plain
//! `open(2)` would give them (0666 less the umask), not the temporary file's 0600, since
//! bundles and lockfiles are written to be shared.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// Why a file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The target exists and overwriting was not asked for.
    #[error("{} already exists", .path.display())]
    Exists {
        /// The file that exists.
        path: PathBuf,
    },
    /// The target is a symbolic link to nothing: writing would create a file wherever it
    /// points, or silently replace the link.
    #[error("{} is a symbolic link to {}, which does not exist", .path.display(), .target.display())]
    DanglingSymlink {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
    /// The operating system refused.
    #[error("could not write {}", .path.display())]
    Io {
        /// The file being written.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
}

impl Diagnose for WriteError {
    fn exit_code(&self) -> u8 {
        match self {
            WriteError::Exists { .. } | WriteError::DanglingSymlink { .. } => exit::USAGE,
            WriteError::Io { .. } => exit::IO,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            WriteError::Exists { .. } => Some("pass --force to overwrite it".into()),
            WriteError::DanglingSymlink { .. } => {
                Some("remove the link or write to another path".into())
            }
            WriteError::Io { source, .. } => match source.raw_os_error() {
                Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
                    Some("the disk is full; free some space and try again".into())
                }
                Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => {
                    Some("the location is not writable; choose another with -o".into())
                }
                Some(libc::ENOLCK) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => Some(
                    "the file system refuses file locks (Lustre mounted without -o flock, NFS without a lock manager); put the store on one that locks (--store DIR or REPRO_STORE), or ask for the flock mount option".into(),
                ),
                Some(libc::EEXIST) | Some(libc::ENOTDIR) | Some(libc::EISDIR) => Some(
                    "a file is in the way: part of the path is a file where a directory belongs, or the path is a directory; choose another path".into(),
                ),
                _ => Some("check the path and the file system it is on (`ls -ld`, `df`)".into()),
            },
        }
    }
}

/// Locks a whole file, shared or exclusive, waiting for it (`wait`) or failing with
/// `WouldBlock`. Open-file-description locks (`F_OFD_SETLKW`): owned by the open file like
/// `flock`'s (two opens in one process exclude each other, closing another descriptor of
/// the file releases nothing), and, being POSIX byte-range locks to the file system, they
/// work on NFS (through its lock manager) and on Lustre without the `flock` mount option
/// where `flock` does not. Where a file system has no OFD locks either, `flock` is tried;
/// where it refuses both, the error says so (ENOLCK, ENOSYS or EOPNOTSUPP, whose hint
/// names the cause). A shared lock needs the file open for reading, an exclusive one for
/// writing.
pub fn lock_file(file: &std::fs::File, exclusive: bool, wait: bool) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero `struct flock` is a valid value (l_start = l_len = 0: the whole
    // file), and fcntl/flock only read it and the descriptor, which `file` keeps open.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = if exclusive {
        libc::F_WRLCK
    } else {
        libc::F_RDLCK
    } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    loop {
        // SAFETY: see above.
        if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &fl) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) => {
                return Err(std::io::Error::from(std::io::ErrorKind::WouldBlock));
            }
            // A kernel or file system without OFD locks: flock, as before.
            Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => break,
            _ => return Err(e),
        }
    }
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    } | if wait { 0 } else { libc::LOCK_NB };
    loop {
        // SAFETY: flock only reads the descriptor, which `file` keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => {
                return Err(std::io::Error::from(std::io::ErrorKind::WouldBlock));
            }
            _ => return Err(e),
        }
    }
}

/// repro's cache directory: `$XDG_CACHE_HOME/repro`, else `~/.cache/repro`.
pub fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("repro"))
}

/// A cache file of values each valid under a key (a boot, a driver, a binary), the most
/// recently written first. Several keys are kept, so that two repro binaries used in turn,
/// or terminals that see other GPUs, do not evict each other at every run.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyedFile<T> {
    entries: Vec<KeyedEntry<T>>,
    schema: u32,
}

/// One key's value.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyedEntry<T> {
    key: String,
    value: T,
}

/// The most keys a keyed cache file keeps.
pub const KEYED_CACHE_KEYS: usize = 4;

/// The largest keyed cache file read back.
const KEYED_CACHE_BYTES: u64 = 1 << 20;

/// A keyed cache file's entries: none if it is missing, not a regular file, too large,
/// unreadable or of another schema (a cache is this user's own file, but it is still read
/// with a bound and checked).
fn keyed_entries<T: serde::de::DeserializeOwned>(path: &Path, schema: u32) -> Vec<KeyedEntry<T>> {
    read_regular(path, KEYED_CACHE_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<KeyedFile<T>>(&b).ok())
        .filter(|f| f.schema == schema)
        .map(|f| f.entries)
        .unwrap_or_default()
}

/// The value cached under `key` in the keyed cache file `path` of `schema`, if any.
pub fn read_keyed<T: serde::de::DeserializeOwned>(
    path: &Path,
    schema: u32,
    key: &str,
) -> Option<T> {
    keyed_entries(path, schema)
        .into_iter()
        .find(|e| e.key == key)
        .map(|e| e.value)
}

/// Writes `value` under `key`, first, keeping the [`KEYED_CACHE_KEYS`] most recent keys in
/// all. A cache that cannot be written only costs a later run the work again.
pub fn write_keyed<T: serde::Serialize + serde::de::DeserializeOwned>(
    path: &Path,
    schema: u32,
    key: &str,
    value: T,
) {
    let mut entries = vec![KeyedEntry {
        key: key.to_string(),
        value,
    }];
    entries.extend(
        keyed_entries::<T>(path, schema)
            .into_iter()
            .filter(|e| e.key != key),
    );
    entries.truncate(KEYED_CACHE_KEYS);
    if let Ok(bytes) = serde_json::to_vec(&KeyedFile { entries, schema }) {
        let _ = write_atomic(path, &bytes, true);
    }
}

/// Writes `bytes` to `path` atomically, creating parent directories.
/// With `overwrite` false, an existing file is left alone and reported.
pub fn write_atomic(path: &Path, bytes: &[u8], overwrite: bool) -> Result<(), WriteError> {
    let io = |source| WriteError::Io {
        path: path.to_owned(),
        source,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    if let Ok(m) = std::fs::symlink_metadata(path)
        && m.file_type().is_symlink()
        && !path.exists()
    {
        return Err(WriteError::DanglingSymlink {
            path: path.to_owned(),
            target: std::fs::read_link(path).unwrap_or_default(),
        });
    }
    if !overwrite && path.exists() {
        return Err(WriteError::Exists {
            path: path.to_owned(),
        });
    }
    std::fs::create_dir_all(&dir).map_err(io)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".repro-tmp-")
        .tempfile_in(&dir)
        .map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o666 & !umask()))
            .map_err(io)?;
    }
    tmp.as_file().sync_all().map_err(io)?;
    if overwrite {
        tmp.persist(path).map_err(|e| io(e.error))?;
    } else {
        // Another process may have created the file since the check above; never clobber it:
        // tempfile publishes with renameat2(RENAME_NOREPLACE), falling back to link(2) and
        // unlink, so of concurrent writers exactly one wins and the others get EEXIST.
        tmp.persist_noclobber(path).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                WriteError::Exists {
                    path: path.to_owned(),
                }
            } else {
                io(e.error)
            }
        })?;
    }
    // Make the rename itself durable.
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The process's umask, read from `/proc/self/status` (reading it with `umask(2)` would
/// change it for a moment under other threads); 022 where the kernel does not say.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// Reads a file of at most `max` bytes; a larger one is an error (`InvalidData`), so a
/// hostile or mistaken input cannot exhaust memory.
pub fn read_bounded(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(out)
}

/// Reads a regular file of at most `max` bytes without following a symbolic link at its
/// last component and without blocking on a FIFO or a device: anything but a regular file
/// is refused (`InvalidInput`), a larger one too (`InvalidData`). Every file under a store
/// is read through this, so a planted FIFO, `/dev/zero` or a link out of the store is
/// refused rather than hung on, read forever, or followed.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, len) = open_regular(path, max)?;
    let mut out = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_large(path, max));
    }
    Ok(out)
}

/// The sha256 (lowercase hex) of a regular file of at most `max` bytes, read in blocks:
/// what [`read_regular`] refuses, this refuses, but a 1 GiB object costs a block of memory,
/// not a gigabyte.
pub fn hash_regular(path: &Path, max: u64) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let (file, _) = open_regular(path, max)?;
    let mut reader = file.take(max + 1);
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buf[..n]);
    }
    if total > max {
        return Err(too_large(path, max));
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Opens a regular file of at most `max` bytes for reading (no link followed, no FIFO
/// waited on), with its length.
fn open_regular(path: &Path, max: u64) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                not_regular(path, "a symbolic link")
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "a FIFO, socket or device"
        };
        return Err(not_regular(path, what));
    }
    if meta.len() > max {
        return Err(too_large(path, max));
    }
    Ok((file, meta.len()))
}

fn not_regular(path: &Path, what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{} is {what}, not a regular file", path.display()),
    )
}

fn too_large(path: &Path, max: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{} is larger than {max} bytes", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_locks_exclude_between_opens_of_one_process_and_end_with_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap()
        };
        let (a, b) = (open(), open());
        lock_file(&a, false, false).unwrap();
        lock_file(&b, false, false).unwrap();
        let c = open();
        let blocked = lock_file(&c, true, false).unwrap_err();
        assert_eq!(blocked.kind(), std::io::ErrorKind::WouldBlock);
        // Another descriptor of the file closing releases nothing (unlike plain POSIX
        // locks): only the holders' own ends do.
        drop(open());
        assert!(lock_file(&c, true, false).is_err());
        drop(a);
        drop(b);
        lock_file(&c, true, false).unwrap();
        let d = open();
        assert!(lock_file(&d, false, false).is_err());
        drop(c);
        lock_file(&d, false, true).unwrap();
    }

    #[test]
    fn files_get_the_umask_mode_and_dangling_links_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomic(&p, b"x", false).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666 & !umask());
        assert_ne!(mode, 0o600, "not the temporary file's private mode");

        let link = dir.path().join("link");
        let target = dir.path().join("nowhere/else");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for overwrite in [false, true] {
            assert!(matches!(
                write_atomic(&link, b"x", overwrite),
                Err(WriteError::DanglingSymlink { .. })
            ));
        }
        assert!(!target.exists());
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    /// A keyed cache keeps the most recent keys, newest first, each with its own value, and
    /// reads nothing from a file of another schema, a broken one or a FIFO planted there.
    #[test]
    fn a_keyed_cache_keeps_several_keys_and_reads_only_its_own_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        assert_eq!(read_keyed::<u32>(&path, 1, "a"), None);
        // Two binaries used in turn: each finds its own value every time.
        for round in 0..3u32 {
            write_keyed(&path, 1, "a", round);
            write_keyed(&path, 1, "b", 100 + round);
            assert_eq!(read_keyed::<u32>(&path, 1, "a"), Some(round));
            assert_eq!(read_keyed::<u32>(&path, 1, "b"), Some(100 + round));
        }
        for k in ["c", "d", "e"] {
            write_keyed(&path, 1, k, 7u32);
        }
        // Five keys written: the oldest ("a") is gone, the newest four stay.
        assert_eq!(read_keyed::<u32>(&path, 1, "a"), None);
        for k in ["b", "c", "d", "e"] {
            assert!(read_keyed::<u32>(&path, 1, k).is_some(), "{k}");
        }
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(file["entries"][0]["key"], "e");
        assert_eq!(file["entries"].as_array().unwrap().len(), KEYED_CACHE_KEYS);
        // Another schema, another type, or no JSON at all: a miss, and the next write
        // replaces it.
        assert_eq!(read_keyed::<u32>(&path, 2, "e"), None);
        assert_eq!(read_keyed::<String>(&path, 1, "e"), None);
        std::fs::write(&path, "{ not json").unwrap();
        assert_eq!(read_keyed::<u32>(&path, 1, "e"), None);
        write_keyed(&path, 1, "e", 8u32);
        assert_eq!(read_keyed::<u32>(&path, 1, "e"), Some(8));
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a plain mkfifo on a path of our own temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read_keyed::<u32>(&path, 1, "e"), None);
    }

    #[test]
    fn writes_and_refuses_to_clobber() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.toml");
        write_atomic(&p, b"one", false).unwrap();
        assert!(matches!(
            write_atomic(&p, b"two", false),
            Err(WriteError::Exists { .. })
        ));
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_atomic(&p, b"two", true).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        // No temporary files are left behind.
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }
    #[test]
    fn read_regular_refuses_links_fifos_devices_and_big_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_regular(&f, 5).unwrap(), b"12345");
        assert_eq!(
            read_regular(&f, 4).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = read_regular(&link, 100).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Would block forever with a plain open.
        let e = read_regular(&fifo, 100).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_regular(Path::new("/dev/zero"), 100).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_regular(dir.path(), 100).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
    }
}
