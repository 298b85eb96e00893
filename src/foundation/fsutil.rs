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
                Some(libc::EEXIST) | Some(libc::ENOTDIR) | Some(libc::EISDIR) => Some(
                    "a file is in the way: part of the path is a file where a directory belongs, or the path is a directory; choose another path".into(),
                ),
                _ => Some("check the path and the file system it is on (`ls -ld`, `df`)".into()),
            },
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
        // Another process may have created the file since the check above; never clobber it.
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
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_large(path, max));
    }
    Ok(out)
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
