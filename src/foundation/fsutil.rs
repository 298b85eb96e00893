//! Atomic file writes: a temporary file in the same directory, fsync, then rename.
//!
//! A reader (or a crash) never sees a half-written lockfile, fingerprint or store object:
//! either the old file is there or the complete new one is. Files get the mode a plain
//! `open(2)` would give them (0666 less the umask), not the temporary file's 0600, since
//! bundles and lockfiles are written to be shared.
//!
//! A file a user names (`-o`, `--export-json`, a lockfile, repro.toml) goes through
//! [`write_output`], which keeps what is at the path: a symbolic link stays a link (its
//! target is replaced), and a device, FIFO or socket (`/dev/stdout`, `/dev/null`, a pipe a
//! reader waits on) is written to in place, since renaming over it would replace the
//! device node or strand the reader. [`write_atomic`] is for repro's own files (the store,
//! caches), where whatever is at the path is replaced and a link is never followed.

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
    /// The target is a directory (or a link to one): there is no file to replace.
    #[error("{} is a directory", .path.display())]
    IsDirectory {
        /// The directory.
        path: PathBuf,
    },
    /// The target lies inside a repro store, whose records only repro writes: an output
    /// there would replace a record or be taken for one.
    #[error("{} is inside the repro store {}", .path.display(), .store.display())]
    InsideStore {
        /// The path asked for.
        path: PathBuf,
        /// The store's directory.
        store: PathBuf,
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
            WriteError::Exists { .. }
            | WriteError::DanglingSymlink { .. }
            | WriteError::IsDirectory { .. }
            | WriteError::InsideStore { .. } => exit::USAGE,
            WriteError::Io { .. } => exit::IO,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            WriteError::Exists { .. } => Some("pass --force to overwrite it".into()),
            WriteError::DanglingSymlink { .. } => {
                Some("remove the link or write to another path".into())
            }
            WriteError::IsDirectory { .. } => {
                Some("name a file, not a directory (for example DIR/out.json)".into())
            }
            WriteError::InsideStore { .. } => Some(
                "write it outside the store: only repro writes the store's records (`repro store verify` checks them)".into(),
            ),
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

/// A text file's bytes without a leading UTF-8 byte-order mark, which the compilers skip:
/// a scan of its lines (an include on the first, a namespace) must skip it too.
pub fn without_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes)
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
    read_cache(path, KEYED_CACHE_BYTES)
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

/// Writes `bytes` to a file a user named, keeping what is at the path. A symbolic link is
/// resolved and the file it leads to is replaced atomically (the link stays); a path that
/// is, or leads to, a device, FIFO or socket is opened and written in place, with no
/// temporary file and no rename (`-o /dev/stdout` prints); a directory is refused. A
/// regular file, or no file, is written as [`write_atomic`] writes it. `overwrite` guards
/// regular files only: writing to a device or a pipe replaces nothing.
pub fn write_output(path: &Path, bytes: &[u8], overwrite: bool) -> Result<(), WriteError> {
    let io = |source| WriteError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(store) = store_around(path) {
        return Err(WriteError::InsideStore {
            path: path.to_owned(),
            store,
        });
    }
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m.file_type().is_symlink(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return write_atomic(path, bytes, overwrite);
        }
        Err(e) => return Err(io(e)),
    };
    // stat follows the link, /proc's magic links included: `/dev/stdout` leads to
    // `/proc/self/fd/1`, which leads to a pipe or a terminal no path names.
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if link && e.kind() == std::io::ErrorKind::NotFound => {
            return Err(WriteError::DanglingSymlink {
                path: path.to_owned(),
                target: std::fs::read_link(path).unwrap_or_default(),
            });
        }
        Err(e) => return Err(io(e)),
    };
    if meta.is_dir() {
        return Err(WriteError::IsDirectory {
            path: path.to_owned(),
        });
    }
    if meta.is_file() {
        // The link's target, by its resolved name, so the rename replaces the file and
        // leaves the link where it is. Errors still name the path the user gave.
        let target = if link {
            std::fs::canonicalize(path).map_err(io)?
        } else {
            path.to_owned()
        };
        return write_atomic(&target, bytes, overwrite).map_err(|e| match e {
            WriteError::Io { source, .. } => io(source),
            WriteError::Exists { .. } => WriteError::Exists {
                path: path.to_owned(),
            },
            other => other,
        });
    }
    // A device, FIFO or socket: written in place. No O_CREAT, so that a node removed in
    // the meantime is not recreated as a regular file; no fsync, which pipes and
    // terminals refuse.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.flush().map_err(io)
}

/// The file that makes a directory a repro store (`store::MARKER`).
pub const STORE_MARKER: &str = "store.json";

/// The repro store (a directory holding [`STORE_MARKER`]) that a file written at `path`
/// would lie in, if any: the path's directories ([`resolve`]d), up to the root.
pub fn store_around(path: &Path) -> Option<PathBuf> {
    store_holding(&resolve(path))
}

/// [`store_around`] for a path [`resolve`] gave already.
pub fn store_holding(resolved: &Path) -> Option<PathBuf> {
    // A file at the path itself is what is written, not a directory it could hold.
    resolved
        .ancestors()
        .skip(1)
        .find(|d| d.join(STORE_MARKER).is_file())
        .map(Path::to_path_buf)
}

/// `path` made absolute and resolved as the operating system would open or create it:
/// component by component, each link that exists followed, each `..` the parent of what
/// came before (also where a directory before it does not exist yet, as creating the
/// directories would make it). Two paths that name one file resolve alike.
pub fn resolve(path: &Path) -> PathBuf {
    let Ok(abs) = std::path::absolute(path) else {
        return path.to_path_buf();
    };
    let mut at = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                at.pop();
            }
            std::path::Component::CurDir => {}
            other => {
                at.push(other);
                if let Ok(real) = std::fs::canonicalize(&at) {
                    at = real;
                }
            }
        }
    }
    at
}

/// Whether [`write_output`] to `path` would replace a file: the path is, or leads to, a
/// regular file. A device or a pipe is written to, not replaced, so `--force` is not
/// needed for `-o /dev/stdout`.
pub fn would_replace(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Writes `bytes` to `path` atomically, creating parent directories: whatever is at the
/// path (a link included, which is replaced, not followed) gives way to the new file. For
/// repro's own files; a path a user named goes through [`write_output`].
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

/// Reads a regular file of at most `max` bytes, following symbolic links: the file a
/// user or a repository names (`lockfiles/x.toml -> ../shared/x.toml` is fine). Anything
/// that is not a regular file once resolved (a directory, FIFO, socket or device such as
/// `/dev/zero`) is refused (`InvalidInput`) without blocking on it, and a larger file
/// (`InvalidData`), so a hostile or mistaken input can neither hang repro nor exhaust its
/// memory.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    crate::foundation::stamp::note(path);
    let (file, len) = open_checked(path, max, true)?;
    let mut out = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_large(path, max));
    }
    Ok(out)
}

/// Opens a regular file for reading, following links, for a reader that streams it with
/// its own bound (a bundle): a directory, FIFO, socket or device is refused
/// (`InvalidInput`) without blocking on it.
pub fn open_input(path: &Path) -> std::io::Result<std::fs::File> {
    crate::foundation::stamp::note(path);
    open_checked(path, u64::MAX, true).map(|(f, _)| f)
}

/// Why a file a user, a repository or another machine supplied could not be read.
#[derive(Debug, thiserror::Error)]
#[error("could not read {}", .path.display())]
pub struct ReadError {
    /// The file.
    pub path: PathBuf,
    /// The reason: the operating system's, or that it is not a regular file
    /// (`InvalidInput`), too large or not text (`InvalidData`).
    #[source]
    pub source: std::io::Error,
}

impl ReadError {
    /// Whether the file is missing.
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == std::io::ErrorKind::NotFound
    }
}

impl Diagnose for ReadError {
    fn exit_code(&self) -> u8 {
        read_exit_code(&self.source)
    }
    fn hint(&self) -> Option<String> {
        Some(read_hint(&self.source).into())
    }
}

/// The exit code of a failed [`read_bounded`]: the input is wrong (missing, not a regular
/// file, too large, not text) and the user's to fix, or the operating system refused.
pub fn read_exit_code(e: &std::io::Error) -> u8 {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound | K::InvalidInput | K::InvalidData => exit::USAGE,
        _ => exit::IO,
    }
}

/// The hint for a failed [`read_bounded`].
pub fn read_hint(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::NotFound => "check the path",
        K::InvalidInput => "name a regular file: a directory, FIFO, socket or device is never read",
        K::InvalidData => "check that it is the file you meant; it is not one repro reads",
        K::PermissionDenied => "the file is not readable; check its permissions",
        _ => "check the path and the file system it is on (`ls -l`, `df`)",
    }
}

/// [`read_bounded`], with an error that names the file and knows its exit code: for an
/// input a user named or a repository holds.
pub fn read_input(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    read_bounded(path, max).map_err(|source| ReadError {
        path: path.to_owned(),
        source,
    })
}

/// [`read_input`] as UTF-8 text; other bytes are `InvalidData` naming the first bad line.
pub fn read_input_text(path: &Path, max: u64) -> Result<String, ReadError> {
    let bytes = read_input(path, max)?;
    String::from_utf8(bytes).map_err(|e| ReadError {
        path: path.to_owned(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            not_utf8(e.as_bytes(), e.utf8_error()),
        ),
    })
}

/// "not valid UTF-8 (line N)": where in `bytes` the first invalid sequence is.
pub fn not_utf8(bytes: &[u8], e: std::str::Utf8Error) -> String {
    let line = 1 + bytes[..e.valid_up_to()]
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    format!("not valid UTF-8 (line {line})")
}

/// Reads a regular file of at most `max` bytes without following a symbolic link at its
/// last component and without blocking on a FIFO or a device: anything but a regular file
/// is refused (`InvalidInput`), a larger one too (`InvalidData`). Every file under a store
/// is read through this, so a planted FIFO, `/dev/zero` or a link out of the store is
/// refused rather than hung on, read forever, or followed.
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    crate::foundation::stamp::note(path);
    read_cache(path, max)
}

/// [`read_regular`] of one of repro's own cache files, whose every answer is kept under a
/// key made of other files' stat data (an NVRTC library's, a git index's): a build hit's
/// stamp notes those files, not the cache (which other commands rewrite as they go).
pub fn read_cache(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, len) = open_checked(path, max, false)?;
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
    crate::foundation::stamp::note(path);
    let (file, _) = open_checked(path, max, false)?;
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

/// Opens a regular file of at most `max` bytes for reading (a link at the last component
/// followed only with `follow`, no FIFO waited on), with its length. O_NONBLOCK makes the
/// open of a FIFO return at once, so that it can be refused; it changes nothing for a
/// regular file.
/// (The public readers note the path for a build hit's stamp, [`read_cache`] excepted.)
fn open_checked(path: &Path, max: u64, follow: bool) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nofollow | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if !follow && e.raw_os_error() == Some(libc::ELOOP) {
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

    /// An output is refused inside a store, through links and `..`, where the directories
    /// exist or not; a path beside it is not.
    #[test]
    fn a_path_inside_a_store_is_found_however_it_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("st");
        std::fs::create_dir_all(store.join("results")).unwrap();
        std::fs::write(store.join(STORE_MARKER), "{}").unwrap();
        std::os::unix::fs::symlink(store.join("results"), tmp.path().join("ln")).unwrap();
        let real = std::fs::canonicalize(&store).unwrap();
        for inside in [
            "st/results/x.json",
            "st/new/deeper/x",
            "ln/x.json",
            "missing/../st/x",
            "st/./results/../y",
        ] {
            assert_eq!(
                store_around(&tmp.path().join(inside)),
                Some(real.clone()),
                "{inside}"
            );
        }
        for outside in ["st", "x.json", "st/results/../../x", "ln/../../x", "stx/y"] {
            assert_eq!(store_around(&tmp.path().join(outside)), None, "{outside}");
        }
        let e = write_output(&tmp.path().join("ln/r.json"), b"x", true).unwrap_err();
        assert!(matches!(e, WriteError::InsideStore { .. }), "{e}");
        assert!(!store.join("results/r.json").exists());
        assert_eq!(
            resolve(&tmp.path().join("a/./b/../c")),
            std::fs::canonicalize(tmp.path()).unwrap().join("a/c")
        );
    }

    /// A user's output path keeps what is there: a link stays a link and its target gets
    /// the bytes, a device or FIFO is written in place (never replaced by a regular
    /// file), and a directory is an input error.
    #[test]
    fn write_output_follows_links_and_writes_into_special_files() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, b"old").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_output(&link, b"new", true).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        // Without overwrite, a link to a regular file is an existing file.
        assert!(matches!(
            write_output(&link, b"x", false),
            Err(WriteError::Exists { .. })
        ));
        // A relative link resolves from its own directory.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::os::unix::fs::symlink("../real.json", sub.join("rel")).unwrap();
        write_output(&sub.join("rel"), b"rel", true).unwrap();
        assert_eq!(std::fs::read(&real).unwrap(), b"rel");

        // /dev/null stays a character device, even without overwrite.
        write_output(Path::new("/dev/null"), b"x", false).unwrap();
        assert!(
            std::fs::symlink_metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device()
        );
        // /dev/full: the device's own error, not a regular file put in its place.
        let e = write_output(Path::new("/dev/full"), b"x", true).unwrap_err();
        assert!(
            matches!(&e, WriteError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
            "{e:?}"
        );
        assert!(
            std::fs::symlink_metadata("/dev/full")
                .unwrap()
                .file_type()
                .is_char_device()
        );

        // A FIFO with a reader: the reader gets the bytes and the FIFO stays.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain mkfifo on a path of our own temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        write_output(&fifo, b"through the pipe", true).unwrap();
        assert_eq!(reader.join().unwrap(), b"through the pipe");
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );

        // A directory, or a link to one: refused, exit 2, nothing created inside.
        for d in [sub.clone(), dir.path().join("dirlink")] {
            if d.ends_with("dirlink") {
                std::os::unix::fs::symlink(&sub, &d).unwrap();
            }
            let e = write_output(&d, b"x", true).unwrap_err();
            assert!(matches!(e, WriteError::IsDirectory { .. }), "{e:?}");
            assert_eq!(e.exit_code(), exit::USAGE);
        }
        assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 1);
        // A dangling link is still refused, and nothing is created where it points.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("gone/x"), &dangling).unwrap();
        assert!(matches!(
            write_output(&dangling, b"x", true),
            Err(WriteError::DanglingSymlink { .. })
        ));
        // No path at all: a new regular file, as write_atomic writes it.
        let fresh = dir.path().join("a/b.json");
        write_output(&fresh, b"f", false).unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"f");
        assert!(would_replace(&fresh) && would_replace(&link));
        assert!(!would_replace(Path::new("/dev/null")) && !would_replace(&sub));
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
