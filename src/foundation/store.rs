//! The store: a content-addressed directory of artifacts and records (default `.repro/`
//! at the repository root).
//!
//! Layout (schema 1):
//! ```text
//! .repro/store.json          {"schema": 1}
//! .repro/objects/ab/cdef...  blobs (artifacts, logs), named by the sha256 of their bytes
//! .repro/builds/KEY.json     build records, named by their build key
//! .repro/recipes/NAME.json   the key of the last build of each recipe (for --explain)
//! ```
//! Every write is atomic (temporary file, fsync, rename), so concurrent `repro` processes
//! never see or leave a torn object; two processes writing the same object write the same
//! bytes. Every read of a blob re-hashes it: a corrupt object is named and never used.
//!
//! Concurrency: `.repro/lock` is an advisory file lock. Builds and benchmarks hold it shared
//! while they write (blobs first, then the record that references them); `gc` holds it
//! exclusively, so it never removes the temporary files or the not-yet-referenced objects
//! of a build in flight. Every record carries `record-sha256`, the hash of its other
//! fields: a truncated or edited record is corrupt, is moved to `quarantine/` (never
//! deleted) and rebuilt. The store writes its own `.gitignore` so that it never shows up in
//! `git status`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::fsutil::{self, WriteError};
use crate::foundation::keys;
use crate::foundation::records::{self, BuildRecord, ResultRecord};
use crate::foundation::scratch::{self, Scratch};

/// `recipes/NAME.json`: the key of the recipe's last build (for `build --explain`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct LastBuild {
    schema: u64,
    recipe: String,
    key: String,
}

/// The store schema this build reads and writes.
pub const SCHEMA: u64 = 1;

/// The field of every record that holds the hash of its other fields.
pub const SEAL: &str = "record-sha256";

/// The file that makes a directory a store: `{"schema": N, "kind": "repro-store"}`. A
/// store written before the marker named its kind holds `{"schema": 1}` alone, which is
/// still recognised (and completed on the next write).
pub const MARKER: &str = fsutil::STORE_MARKER;

/// What [`MARKER`] says a store is.
const MARKER_KIND: &str = "repro-store";

/// The directories of records a store holds: builds, results, bisection reports, bisection
/// steps, bisection samples, profiles and the recipes' last builds. Nothing else is read or
/// removed as a record.
pub const RECORD_KINDS: &[&str] = &[
    "builds",
    "results",
    "bisections",
    "bisect",
    "bisect-samples",
    "profiles",
    "detached",
    "recipes",
];

/// Every name a store's root may hold: a directory holding only these (and no marker) is a
/// store written before the marker existed.
const OWN_NAMES: &[&str] = &[
    MARKER,
    ".gitignore",
    "lock",
    "objects",
    "tmp",
    "quarantine",
    "builds",
    "results",
    "bisections",
    "bisect",
    "bisect-samples",
    "profiles",
    "detached",
    "recipes",
];

/// The largest record read from a store (a bench step's samples are the largest, far less).
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// The largest object read from a store (artifacts and logs).
pub const MAX_OBJECT_BYTES: u64 = 4 << 30;

/// The prefix of every temporary file [`fsutil::write_atomic`] leaves if it is killed.
const TMP_PREFIX: &str = ".repro-tmp-";

/// Why the store could not do something.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A file could not be read.
    #[error("cannot read {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A stored object does not hash to its name, or a record does not parse.
    #[error("corrupt store object {}: {what}", .path.display())]
    Corrupt {
        /// The object.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The store's directory is a symbolic link: every write and `gc` would go wherever
    /// it points (a repository can commit `.repro` as one).
    #[error("the store {} is a symbolic link (to {}); a store is never a link", .path.display(), .target.display())]
    Symlink {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },
    /// The directory exists, holds other things and has no store marker.
    #[error("{} is not a repro store: {found}", .path.display())]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// The first name in it that is not the store's own, or why the marker is not one.
        found: String,
    },
    /// The store is committed to the repository: its records (sealed by a checksum anyone
    /// can recompute) come from whoever made the commit.
    #[error("the store {} is committed to the repository ({} is tracked by git): its records come from whoever made the commit, and repro does not build on them", .path.display(), .file.display())]
    Committed {
        /// The store.
        path: PathBuf,
        /// A tracked file in it.
        file: PathBuf,
    },
    /// A name taken from a record (a digest, a key) is not of the store's shape, so it
    /// never becomes a path.
    #[error("`{value}` ({what}) is not a store key: 64 lowercase hexadecimal digits")]
    BadKey {
        /// What the name is (an object's digest, a build key).
        what: String,
        /// The name, as found (shortened when long).
        value: String,
    },
    /// The store was written by a newer repro.
    #[error("the store at {} has schema {found}; this repro understands {SCHEMA}", .path.display())]
    NewerSchema {
        /// The store.
        path: PathBuf,
        /// Its schema.
        found: u64,
    },
}

impl Diagnose for StoreError {
    fn exit_code(&self) -> u8 {
        match self {
            StoreError::Write(w) => w.exit_code(),
            StoreError::Read { .. } => exit::IO,
            StoreError::Corrupt { .. } => exit::IO,
            StoreError::NewerSchema { .. } => exit::USAGE,
            StoreError::Symlink { .. }
            | StoreError::NotAStore { .. }
            | StoreError::Committed { .. } => exit::USAGE,
            StoreError::BadKey { .. } => exit::IO,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            StoreError::Write(WriteError::Io { source, .. })
                if matches!(source.raw_os_error(), Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)) =>
            {
                Some("the store is not writable: choose another with --store DIR or REPRO_STORE (reading a read-only store works)".into())
            }
            StoreError::Write(w) => w.hint().or_else(|| Some("choose another store with --store DIR or REPRO_STORE".into())),
            StoreError::Corrupt { .. } => {
                Some("run `repro store verify`; `repro store gc` moves damaged records to quarantine/ and removes damaged objects, and the next build rebuilds them".into())
            }
            StoreError::NewerSchema { .. } => Some("upgrade repro, or use another store with --store".into()),
            StoreError::Read { .. } => Some("check the store's location and permissions (--store, REPRO_STORE)".into()),
            StoreError::Symlink { .. } => Some("remove the link (a repository must not commit `.repro`), or point --store or REPRO_STORE at a real directory".into()),
            StoreError::Committed { .. } => Some("take it out of the repository (`git rm -r --cached .repro`; repro rebuilds what it needs), or point --store or REPRO_STORE elsewhere".into()),
            StoreError::NotAStore { .. } => Some("point --store or REPRO_STORE at a repro store, or at an empty or new directory; repro never writes into or cleans a directory it did not create".into()),
            StoreError::BadKey { .. } => Some("the record was edited or comes from elsewhere: run `repro store verify`, and `repro store gc` to move damaged records to quarantine/".into()),
        }
    }
}

/// A store at a directory.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
    /// A file of the store that git tracks, looked up once (see [`Store::check_schema`]).
    committed: std::sync::OnceLock<Option<PathBuf>>,
}

/// One problem `verify` found.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Problem {
    /// The file, relative to the store.
    pub path: String,
    /// What is wrong.
    pub what: String,
}

/// What `verify` checked and found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    /// Blobs re-hashed.
    pub objects: usize,
    /// Records parsed and checked, of every kind.
    pub records: usize,
    /// Everything that is wrong.
    pub problems: Vec<Problem>,
}

/// What `gc` removed.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GcReport {
    /// Build records removed by `--keep-last`.
    pub records_removed: usize,
    /// Unreferenced or corrupt blobs removed.
    pub objects_removed: usize,
    /// Leftover temporary files removed.
    pub temporaries_removed: usize,
    /// Damaged records moved to `quarantine/`.
    pub records_quarantined: usize,
    /// Links, FIFOs and directories where objects belong, moved to `quarantine/`.
    pub objects_quarantined: usize,
    /// Bytes freed.
    pub bytes_freed: u64,
}

/// A held store lock (shared or exclusive); released when dropped. A store that cannot be
/// written (a read-only mount) is not locked: nothing can change it through this process.
#[derive(Debug)]
pub struct StoreLock {
    _file: Option<std::fs::File>,
}

impl Store {
    /// A store at `root` (nothing is created until something is written).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let root: PathBuf = root.into();
        // `link/` (a trailing slash, as tab completion writes it) or `link/.` would make
        // every no-follow check on the root follow the link: keep the path's components only.
        let normal: PathBuf = root.components().collect();
        Store {
            root: if normal.as_os_str().is_empty() {
                root
            } else {
                normal
            },
            committed: Default::default(),
        }
    }

    /// Where the store is.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks that the store (if it exists) is one this repro understands: a real
    /// directory (never a symbolic link) holding repro's [`MARKER`] of a schema this repro
    /// reads, or a store from before the marker (repro's names only, with its `lock`), or
    /// an empty directory. Anything else is [`StoreError::NotAStore`]: nothing is read,
    /// written or removed there.
    pub fn check_schema(&self) -> Result<(), StoreError> {
        self.identify().map(|_| ())
    }

    /// What the store's directory is (see [`Store::check_schema`]).
    fn identify(&self) -> Result<Identity, StoreError> {
        // What the directory holds decides what it is.
        crate::foundation::stamp::note(&self.root);
        match std::fs::symlink_metadata(&self.root) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(StoreError::Symlink {
                    path: self.root.clone(),
                    target: std::fs::read_link(&self.root).unwrap_or_default(),
                });
            }
            Ok(m) if !m.is_dir() => {
                return Err(StoreError::NotAStore {
                    path: self.root.clone(),
                    found: "it is a file, not a directory".into(),
                });
            }
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                return Ok(Identity::Absent);
            }
            Err(source) => {
                return Err(StoreError::Read {
                    path: self.root.clone(),
                    source,
                });
            }
        }
        let entries = dir_entries(&self.root);
        // A link among the store's own names would send reads, writes and gc elsewhere.
        if let Some((p, _)) = entries.iter().find(|(_, t)| t.is_symlink()) {
            return Err(StoreError::Symlink {
                path: p.clone(),
                target: std::fs::read_link(p).unwrap_or_default(),
            });
        }
        if let Some(file) = self
            .committed
            .get_or_init(|| crate::foundation::git::tracked_under_cached(&self.root))
        {
            return Err(StoreError::Committed {
                path: self.root.clone(),
                file: file.clone(),
            });
        }
        let marker = self.root.join(MARKER);
        match fsutil::read_regular(&marker, 4096) {
            Ok(bytes) => return self.read_marker(&marker, &bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::NotAStore {
                    path: self.root.clone(),
                    found: format!("its {MARKER} cannot be read ({e})"),
                });
            }
        }
        // A marker being written right now by another process shows as its temporary file.
        let names: Vec<String> = entries
            .iter()
            .filter_map(|(p, _)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| !n.starts_with(TMP_PREFIX))
            .collect();
        if names.is_empty() {
            return Ok(Identity::Empty);
        }
        if let Some(foreign) = names.iter().find(|n| !OWN_NAMES.contains(&n.as_str())) {
            return Err(StoreError::NotAStore {
                path: self.root.clone(),
                found: format!(
                    "it has no {MARKER} and holds `{foreign}`, which is not the store's"
                ),
            });
        }
        // Every command that wrote into a store took its lock first, which left `lock`.
        if !names.iter().any(|n| n == "lock") {
            return Err(StoreError::NotAStore {
                path: self.root.clone(),
                found: format!("it has neither {MARKER} nor the store's `lock`"),
            });
        }
        Ok(Identity::Unmarked)
    }

    fn read_marker(&self, path: &Path, bytes: &[u8]) -> Result<Identity, StoreError> {
        let not = |why: &str| StoreError::NotAStore {
            path: self.root.clone(),
            found: format!("its {MARKER} {why}"),
        };
        let v: Value = serde_json::from_slice(bytes).map_err(|_| not("is not JSON"))?;
        let o = v.as_object().ok_or_else(|| not("is not a JSON object"))?;
        let schema = o
            .get("schema")
            .and_then(Value::as_u64)
            .ok_or_else(|| not("has no schema"))?;
        let identity = match o.get("kind").and_then(Value::as_str) {
            Some(MARKER_KIND) => Identity::Marked,
            // The marker of stores written before it named its kind: exactly `{"schema": N}`.
            None if o.len() == 1 => Identity::Unmarked,
            _ => return Err(not("is not repro's (no \"kind\": \"repro-store\")")),
        };
        if schema > SCHEMA {
            return Err(StoreError::NewerSchema {
                path: path.parent().unwrap_or(path).to_path_buf(),
                found: schema,
            });
        }
        Ok(identity)
    }

    /// Makes the directory a store before anything is written: creates it with its marker
    /// and `.gitignore`, adopts an empty directory, completes the marker of a store from
    /// before the marker, and refuses anything else.
    fn ensure(&self) -> Result<(), StoreError> {
        let identity = self.identify()?;
        if identity != Identity::Marked {
            fsutil::write_atomic(
                &self.root.join(MARKER),
                json!({"schema": SCHEMA, "kind": MARKER_KIND})
                    .to_string()
                    .as_bytes(),
                true,
            )?;
        }
        let ignore = self.root.join(".gitignore");
        if std::fs::symlink_metadata(&ignore).is_err() {
            // Everything in the store is repro's own: keep it out of `git status` wherever
            // the store is (at a repository's root by default).
            fsutil::write_atomic(
                &ignore,
                b"# written by repro: the store is not source\n*\n",
                true,
            )?;
        }
        Ok(())
    }

    /// Takes the store lock shared (builds, benchmarks, verify, and every single write):
    /// many holders at once.
    pub fn lock_shared(&self) -> Result<StoreLock, StoreError> {
        self.lock(false)
    }

    /// Takes the store lock exclusively (gc): waits for every shared holder to finish.
    pub fn lock_exclusive(&self) -> Result<StoreLock, StoreError> {
        self.lock(true)
    }

    fn lock(&self, exclusive: bool) -> Result<StoreLock, StoreError> {
        let path = self.root.join("lock");
        let write_err = |source| {
            StoreError::Write(WriteError::Io {
                path: path.clone(),
                source,
            })
        };
        // What the directory is, before anything is written there.
        self.identify()?;
        match std::fs::create_dir_all(&self.root) {
            Ok(()) => {}
            // A store that cannot be written (a read-only mount) is read unlocked.
            Err(e) if read_only(&e) => return Ok(StoreLock { _file: None }),
            Err(e) => return Err(write_err(e)),
        }
        let (file, writable) = match open_nofollow(&path, true) {
            Ok(f) => (f, true),
            // A shared lock works on a descriptor opened for reading, so a store whose lock
            // file exists but is not writable by us is still locked properly.
            Err(e) if read_only(&e) => match open_nofollow(&path, false) {
                Ok(f) => (f, false),
                Err(_) => return Ok(StoreLock { _file: None }),
            },
            Err(e) => return Err(write_err(e)),
        };
        // fcntl (OFD) locks, which NFS and Lustre honour without the flock mount option. An
        // exclusive one needs a descriptor open for writing (EBADF, "Bad file descriptor",
        // otherwise): where the lock file cannot be written, neither can the store, so the
        // shared lock keeps writers out while the first change says why it cannot be made.
        fsutil::lock_file(&file, exclusive && writable, true).map_err(write_err)?;
        // The marker and `.gitignore` are written under the lock, so that gc (which holds
        // it exclusively) never removes their temporary files while they are written.
        match self.ensure() {
            Ok(()) => {}
            Err(StoreError::Write(WriteError::Io { source, .. })) if read_only(&source) => {}
            Err(e) => return Err(e),
        }
        Ok(StoreLock { _file: Some(file) })
    }

    /// Moves a damaged file into `quarantine/` (kept for inspection, out of every lookup)
    /// and returns where it went.
    pub fn quarantine(&self, path: &Path) -> Result<PathBuf, StoreError> {
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dest = self
            .root
            .join("quarantine")
            .join(format!("{}.{stamp}", rel.display()));
        let io = |source| {
            StoreError::Write(WriteError::Io {
                path: dest.clone(),
                source,
            })
        };
        if let Some(parent) = dest.parent() {
            self.real_dir(parent)?;
        }
        match std::fs::rename(path, &dest) {
            Ok(()) => Ok(dest),
            // Another process quarantined or replaced it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(dest),
            Err(e) => Err(io(e)),
        }
    }

    /// Writes one file under the store atomically, once every directory between the
    /// store's root and it is a real directory (see [`Store::real_dir`]).
    fn write_file(&self, path: &Path, bytes: &[u8], overwrite: bool) -> Result<(), StoreError> {
        if let Some(parent) = path.parent() {
            self.real_dir(parent)?;
        }
        // A directory where the file belongs would fail every rename onto it ("Is a
        // directory") on every run: it is damage, moved aside as gc moves it, so that the
        // write that replaces a damaged file recovers here too.
        if overwrite && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && !m.is_symlink())
        {
            self.quarantine(path)?;
        }
        fsutil::write_atomic(path, bytes, overwrite)?;
        Ok(())
    }

    /// Makes `dir` (the root or a directory under it) exist as real directories, one
    /// component at a time from the root, never through a symbolic link or a file: a link
    /// committed at `quarantine/builds` or `objects/0c` would otherwise send a write, a
    /// rename or a file of a stranger's choosing anywhere on the file system.
    pub fn real_dir(&self, dir: &Path) -> Result<PathBuf, StoreError> {
        let rel = dir
            .strip_prefix(&self.root)
            .map_err(|_| StoreError::BadKey {
                what: "a directory of the store".into(),
                value: dir.display().to_string(),
            })?;
        let mut cur = self.root.clone();
        let check = |cur: &Path| -> Result<(), StoreError> {
            match std::fs::symlink_metadata(cur) {
                Ok(m) if m.file_type().is_symlink() => Err(StoreError::Symlink {
                    path: cur.to_path_buf(),
                    target: std::fs::read_link(cur).unwrap_or_default(),
                }),
                Ok(m) if m.is_dir() => Ok(()),
                Ok(_) => Err(StoreError::NotAStore {
                    path: self.root.clone(),
                    found: format!("{} is a file where a directory belongs", cur.display()),
                }),
                Err(source) => Err(StoreError::Read {
                    path: cur.to_path_buf(),
                    source,
                }),
            }
        };
        let mkdir = |cur: &Path| match std::fs::create_dir(cur) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(source) => Err(StoreError::Write(WriteError::Io {
                path: cur.to_path_buf(),
                source,
            })),
        };
        // The root itself was made (with its parents) and identified when the lock was taken.
        check(&cur)?;
        for c in rel.components() {
            match c {
                std::path::Component::Normal(name) => cur.push(name),
                _ => {
                    return Err(StoreError::BadKey {
                        what: "a directory of the store".into(),
                        value: dir.display().to_string(),
                    });
                }
            }
            mkdir(&cur)?;
            check(&cur)?;
        }
        Ok(cur)
    }

    /// Checks that a directory the store lists before deleting (`objects/`, a record
    /// directory, a shard) is absent or a real directory that can be listed to its end: a
    /// listing that silently came back short would make gc delete every object the
    /// unlisted records reference, and verify pass what it never read.
    fn listable(&self, dir: &Path) -> Result<(), StoreError> {
        let read_err = |source| StoreError::Read {
            path: dir.to_path_buf(),
            source,
        };
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(read_err(e)),
            Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {
                for entry in std::fs::read_dir(dir).map_err(read_err)? {
                    entry.and_then(|e| e.file_type()).map_err(read_err)?;
                }
                Ok(())
            }
            Ok(_) => Err(read_err(std::io::Error::other(
                "it is not a directory (a store's record and object directories are directories)",
            ))),
        }
    }

    /// Every directory [`Store::gc`] and [`Store::verify`] list: `objects/`, its shards and
    /// every record directory, each checked with [`Store::listable`].
    fn check_listings(&self) -> Result<(), StoreError> {
        let objects = self.root.join("objects");
        self.listable(&objects)?;
        for (shard, t) in dir_entries(&objects) {
            if t.is_dir() {
                self.listable(&shard)?;
            }
        }
        for kind in RECORD_KINDS {
            self.listable(&self.root.join(kind))?;
        }
        Ok(())
    }

    /// The path of the blob with this digest, once the digest is checked to be a key.
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf, StoreError> {
        check_key("an object's digest", digest)?;
        Ok(self
            .root
            .join("objects")
            .join(&digest[..2])
            .join(&digest[2..]))
    }

    /// Stores bytes and returns their sha256. An existing, intact copy is kept.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError> {
        let _lock = self.lock_shared()?;
        let digest = keys::sha256_hex(bytes);
        let path = self.blob_path(&digest)?;
        if self.get_blob(&digest).is_ok() {
            return Ok(digest);
        }
        self.write_file(&path, bytes, true)?;
        Ok(digest)
    }

    /// Reads a blob (a regular file of bounded size, never a link, FIFO or device),
    /// checking that it still hashes to its name.
    pub fn get_blob(&self, digest: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.blob_path(digest)?;
        let bytes = read_store_file(&path, MAX_OBJECT_BYTES)?;
        let actual = keys::sha256_hex(&bytes);
        if actual != digest {
            return Err(StoreError::Corrupt {
                path,
                what: format!("its content hashes to {}", keys::short(&actual)),
            });
        }
        crate::foundation::stamp::note_blob(&path, digest);
        Ok(bytes)
    }

    /// The path of the record `kind/key`: `kind` is one of [`RECORD_KINDS`] and `key` a key
    /// (checked here, as it often comes from another record).
    fn record_path(&self, kind: &str, key: &str) -> Result<PathBuf, StoreError> {
        if !RECORD_KINDS.contains(&kind) || kind == "recipes" {
            return Err(StoreError::BadKey {
                what: "a kind of record".into(),
                value: kind.escape_debug().to_string(),
            });
        }
        check_key(&format!("the key of a record in {kind}/"), key)?;
        Ok(self.root.join(kind).join(format!("{key}.json")))
    }

    /// Writes a record (`kind` is its directory: `builds`, `results`, `bisect`...), sealed
    /// with [`SEAL`], holding the store lock shared while it writes.
    pub fn put_record(&self, kind: &str, key: &str, record: &Value) -> Result<(), StoreError> {
        let path = self.record_path(kind, key)?;
        let _lock = self.lock_shared()?;
        let text = seal(record);
        self.write_file(&path, text.as_bytes(), true)?;
        Ok(())
    }

    /// Reads a record, or `None` if there is none under that key. A record that does not
    /// parse, has no seal or whose seal does not match is [`StoreError::Corrupt`]; so is
    /// anything under its name that is not a regular file of bounded size.
    pub fn get_record(&self, kind: &str, key: &str) -> Result<Option<Value>, StoreError> {
        match self.record_bytes(kind, key)? {
            Some(bytes) => {
                let path = self.record_path(kind, key)?;
                parse_record(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        path,
                        what: e.to_string(),
                    })
            }
            None => Ok(None),
        }
    }

    /// Remembers `key` as the last build of `recipe`.
    pub fn set_last(&self, recipe: &str, key: &str) -> Result<(), StoreError> {
        check_key("a build key", key)?;
        // A cache hit of the same recipe finds it so already: no write, no fsync.
        if self.get_last(recipe).as_deref() == Some(key) {
            return Ok(());
        }
        let _lock = self.lock_shared()?;
        let v = LastBuild {
            schema: SCHEMA,
            recipe: recipe.to_string(),
            key: key.to_string(),
        };
        self.write_file(
            &self.root.join("recipes").join(format!("{recipe}.json")),
            serde_json::to_string(&v).expect("serialises").as_bytes(),
            true,
        )?;
        Ok(())
    }

    /// Every directory of records there is (of [`RECORD_KINDS`], real directories only).
    pub fn record_kinds(&self) -> Vec<String> {
        dir_entries(&self.root)
            .into_iter()
            .filter(|(_, t)| t.is_dir())
            .filter_map(|(p, _)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| RECORD_KINDS.contains(&n.as_str()))
            .collect()
    }

    /// The key of the last build of `recipe`, if any.
    pub fn get_last(&self, recipe: &str) -> Option<String> {
        let bytes = read_store_file(
            &self.root.join("recipes").join(format!("{recipe}.json")),
            MAX_RECORD_BYTES,
        )
        .ok()?;
        serde_json::from_slice::<LastBuild>(&bytes)
            .ok()
            .map(|l| l.key)
            .filter(|k| keys::is_key(k))
    }

    /// Scratch space for checkouts: `tmp/` in the store.
    pub fn scratch(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// A fresh scratch tree `tmp/<purpose>-<pid>-*` (`purpose` is lowercase letters), held
    /// by a lease until it is dropped (see [`crate::foundation::scratch`]). One left by a
    /// killed process is removed by [`Store::clean_stale_scratch`] and by `gc`.
    pub fn scratch_dir(&self, purpose: &str) -> std::io::Result<Scratch> {
        // The store is made one (with its `.gitignore`) before anything is put in it, so a
        // bisection killed early leaves nothing for `git status` to show; the lock keeps gc
        // out while the tree and its lease are made.
        let _lock = self.lock_shared().map_err(|e| match e {
            StoreError::Write(WriteError::Io { source, .. }) => source,
            other => std::io::Error::other(other.to_string()),
        })?;
        scratch::create(&self.scratch(), purpose)
    }

    /// Removes scratch trees whose owners are gone (their lease lock can be taken).
    pub fn clean_stale_scratch(&self) {
        if self.identify().is_err() {
            return;
        }
        for s in scratch::stale(&self.scratch()) {
            let _ = s.remove();
        }
    }

    /// Every object of the store's shape, `objects/<2 hex>/<62 hex>` (real directories,
    /// regular files): (digest, path). Nothing else under `objects/` is the store's.
    fn objects(&self) -> Vec<(String, PathBuf)> {
        let mut out = Vec::new();
        for (sub, t) in dir_entries(&self.root.join("objects")) {
            let prefix = sub
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if !t.is_dir() || !is_hex(&prefix, 2) {
                continue;
            }
            for (f, t) in dir_entries(&sub) {
                let rest = f
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if t.is_file() && is_hex(&rest, 62) {
                    out.push((format!("{prefix}{rest}"), f));
                }
            }
        }
        out
    }

    /// Whatever lies where a store file belongs but is not one (links, FIFOs and directories
    /// named as objects; anything but a directory named as a shard of `objects/`): each is
    /// damage for verify and moved to `quarantine/` by gc. Record directories need no such
    /// list: [`Store::records`] reads whatever is under a record's name and fails on it.
    fn misplaced_objects(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let name = |p: &Path| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        };
        for (sub, t) in dir_entries(&self.root.join("objects")) {
            if !is_hex(&name(&sub), 2) {
                continue;
            }
            if !t.is_dir() {
                out.push(sub);
                continue;
            }
            for (f, t) in dir_entries(&sub) {
                if !t.is_file() && is_hex(&name(&f), 62) {
                    out.push(f);
                }
            }
        }
        out
    }

    /// Every record of a kind (of [`RECORD_KINDS`]) whose file name is of the store's shape
    /// (`<key>.json`; for `recipes`, `<name>.json`): (key, path, parsed record or why not).
    /// A record is read only if it is a regular file of bounded size.
    pub fn records(&self, kind: &str) -> Vec<(String, PathBuf, Result<Value, RecordError>)> {
        if !RECORD_KINDS.contains(&kind) {
            return Vec::new();
        }
        dir_entries(&self.root.join(kind))
            .into_iter()
            .filter_map(|(p, _)| {
                let key = p.file_name()?.to_str()?.strip_suffix(".json")?.to_string();
                let own = if kind == "recipes" {
                    !key.is_empty() && !key.starts_with('.')
                } else {
                    keys::is_key(&key)
                };
                // A directory or a link under a record's name is damage, reported as such
                // (reading it below fails): left out, it would hide from verify and gc
                // while every write of that record fails.
                own.then_some((key, p))
            })
            .map(|(key, p)| {
                let bytes = fsutil::read_regular(&p, MAX_RECORD_BYTES).map_err(RecordError::Read);
                let parsed = if kind == "recipes" {
                    bytes.and_then(|b| {
                        serde_json::from_slice::<Value>(&b).map_err(RecordError::NotJson)
                    })
                } else {
                    bytes.and_then(|b| parse_record(&b))
                };
                (key, p, parsed)
            })
            .collect()
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.root)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    /// Re-hashes every object and checks every record of every kind: it parses, it has its
    /// seal and the seal matches every other field, it reads as its kind's type, a build's
    /// key recomputes from its inputs, a result's ID from its content, and every object or
    /// build it references exists.
    pub fn verify(&self) -> VerifyReport {
        let mut report = VerifyReport::default();
        if let Err(e) = self.check_listings() {
            report.problems.push(Problem {
                path: match &e {
                    StoreError::Read { path, .. } => self.rel(path),
                    _ => ".".into(),
                },
                what: format!("cannot be checked: {e}"),
            });
        }
        for path in self.misplaced_objects() {
            report.problems.push(Problem {
                path: self.rel(&path),
                what: "is not a regular file where the store keeps an object (`repro store gc` moves it to quarantine/)".into(),
            });
        }
        let mut present = BTreeSet::new();
        for (name, path) in self.objects() {
            report.objects += 1;
            match fsutil::hash_regular(&path, MAX_OBJECT_BYTES) {
                Ok(actual) => {
                    if actual == name {
                        present.insert(name);
                    } else {
                        report.problems.push(Problem {
                            path: self.rel(&path),
                            what: format!(
                                "content hashes to {}, not to its name",
                                keys::short(&actual)
                            ),
                        });
                    }
                }
                Err(e) => report.problems.push(Problem {
                    path: self.rel(&path),
                    what: format!("unreadable: {e}"),
                }),
            }
        }
        // An object written after the listing above (by a build running now) is looked up
        // again rather than reported missing.
        let has_object =
            |d: &str| present.contains(d) || (keys::is_key(d) && self.get_blob(d).is_ok());
        for kind in self.record_kinds() {
            for (key, path, parsed) in self.records(&kind) {
                report.records += 1;
                let mut problem = |what: String| {
                    report.problems.push(Problem {
                        path: self.rel(&path),
                        what,
                    })
                };
                let rec = match parsed {
                    Ok(r) => r,
                    Err(e) => {
                        problem(format!("damaged record: {e}"));
                        continue;
                    }
                };
                for what in self.check_record(&kind, &key, &rec, &has_object) {
                    problem(what);
                }
            }
        }
        report
    }

    /// What is wrong with one parsed (and sealed) record filed as `kind/key`: it must read
    /// as its kind's type; a build's inputs must hash to its key and its objects exist
    /// (`has_object`), a result's content to its ID, a step's and a report's own `key` and
    /// a sample set's `experiment` must be its file name, and a recipe pointer must name a
    /// stored build.
    pub fn check_record(
        &self,
        kind: &str,
        key: &str,
        rec: &Value,
        has_object: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let mut named = |field: &str, found: Option<&str>| {
            if found != Some(key) {
                problems.push(format!(
                    "its `{field}` is {}, but it is filed as {}",
                    found.map_or_else(|| "missing".into(), |k| keys::short(k).to_string()),
                    keys::short(key)
                ));
            }
        };
        match kind {
            "builds" => return self.check_build(key, rec, has_object),
            "results" => {
                let mut content = rec.clone();
                if let Some(o) = content.as_object_mut() {
                    o.remove("id");
                }
                if keys::key_of(&content) != key {
                    problems.push("its content does not hash to its ID (edited?)".into());
                }
                // Reading it checks its values too: samples, the summary against them,
                // its dates (records::ResultRecord::from_json).
                if let Err(e) = ResultRecord::from_json(&content, key) {
                    problems.push(format!("does not read as a result record: {e}"));
                }
            }
            "bisect" => match records::StepRecord::from_json(rec, key) {
                Ok(r) => named("key", Some(&r.key)),
                Err(e) => problems.push(format!("does not read as a bisection step: {e}")),
            },
            "bisect-samples" => match records::SamplesRecord::from_json(rec, key) {
                Ok(r) => named("experiment", Some(&r.experiment)),
                Err(e) => problems.push(format!("does not read as a sample set: {e}")),
            },
            "bisections" => {
                let read = if records::ToolchainBuildBisectRecord::is_build(rec) {
                    records::ToolchainBuildBisectRecord::from_json(rec, key).map(|_| ())
                } else if rec.get("kind").and_then(Value::as_str) == Some("toolchain-bisection") {
                    records::ToolchainBisectRecord::from_json(rec, key).map(|_| ())
                } else {
                    records::BisectRecord::from_json(rec, key).map(|_| ())
                };
                match read {
                    Ok(()) => named("key", rec.get("key").and_then(Value::as_str)),
                    Err(e) => problems.push(format!("does not read as a bisection report: {e}")),
                }
            }
            "profiles" => problems.extend(check_profile(key, rec, has_object)),
            // A bisection submitted with --detach: what `show ID` follows until it ends.
            "detached" => named("id", rec.get("id").and_then(Value::as_str)),
            "recipes" => match serde_json::from_value::<LastBuild>(rec.clone()) {
                Ok(LastBuild { key: k, .. }) if keys::is_key(&k) => {
                    if !self.root.join("builds").join(format!("{k}.json")).is_file() {
                        problems.push(format!(
                            "names build {} that is not in the store",
                            keys::short(&k)
                        ));
                    }
                }
                _ => problems.push("has no valid `key`".into()),
            },
            other => problems.push(format!("`{other}` is not a kind of record")),
        }
        problems
    }

    fn check_build(
        &self,
        key: &str,
        rec: &Value,
        has_object: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        match BuildRecord::from_json(rec, key) {
            Ok(b) if keys::key_of(&records::to_json(&b.inputs)) != key => {
                problems.push("its inputs do not hash to its key".into());
            }
            Ok(_) => {}
            Err(e) => problems.push(format!("does not read as a build record: {e}")),
        }
        for digest in records::referenced_blobs(rec) {
            if let Err(e) = check_key("an output's sha256", &digest) {
                problems.push(format!("references {e}"));
            } else if !has_object(&digest) {
                problems.push(format!(
                    "references object {} that is missing or corrupt",
                    keys::short(&digest)
                ));
            }
        }
        problems
    }

    /// The bytes of the record `kind/key`, if there is one (a regular file of bounded
    /// size: anything else under its name is [`StoreError::Corrupt`]).
    pub fn record_bytes(&self, kind: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.record_path(kind, key)?;
        match fsutil::read_regular(&path, MAX_RECORD_BYTES) {
            Ok(b) => Ok(Some(b)),
            // Under a path that is not a directory no record can exist; the first write will
            // then fail with a message about the store's location.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                Ok(None)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
                ) =>
            {
                Err(StoreError::Corrupt {
                    path,
                    what: e.to_string(),
                })
            }
            Err(source) => Err(StoreError::Read { path, source }),
        }
    }

    /// Files a record from elsewhere exactly as it is (its seal kept), never replacing one
    /// already filed under that key. The caller has checked it.
    pub fn import_record(&self, kind: &str, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.record_path(kind, key)?;
        let _lock = self.lock_shared()?;
        self.write_file(&path, bytes, false)?;
        Ok(())
    }

    /// Removes leftover temporary files, corrupt objects, objects no record references,
    /// scratch trees whose owners are gone, and with `keep_last`, all but the newest
    /// `keep_last` build records of each recipe (the last build of each recipe is always
    /// kept).
    ///
    /// Only a store is cleaned ([`Store::check_schema`]: a directory that is not one is
    /// refused and nothing in it is touched), and in it only names of the store's own shape.
    /// Takes the store lock exclusively: it waits for every write in flight to finish, and
    /// writes wait for it. Damaged records are moved to `quarantine/`, not deleted.
    pub fn gc(&self, keep_last: Option<usize>) -> Result<GcReport, StoreError> {
        if self.identify()? == Identity::Absent {
            return Ok(GcReport::default());
        }
        let _lock = self.lock_exclusive()?;
        self.check_listings()?;
        let mut report = GcReport::default();
        for kind in self.record_kinds() {
            if kind == "recipes" {
                continue;
            }
            for (_, path, parsed) in self.records(&kind) {
                if parsed.is_err() {
                    self.quarantine(&path)?;
                    report.records_quarantined += 1;
                }
            }
        }
        if let Some(keep) = keep_last {
            self.gc_old_builds(keep, &mut report)?;
        }
        for path in self.misplaced_objects() {
            self.quarantine(&path)?;
            report.objects_quarantined += 1;
        }
        let mut live = BTreeSet::new();
        for kind in ["builds", records::PROFILES] {
            for (_, _, parsed) in self.records(kind) {
                if let Ok(rec) = parsed {
                    live.extend(records::referenced_blobs(&rec));
                }
            }
        }
        for (name, path) in self.objects() {
            let intact = fsutil::hash_regular(&path, MAX_OBJECT_BYTES).is_ok_and(|h| h == name);
            if !intact || !live.contains(&name) {
                remove(&path, &mut report)?;
                report.objects_removed += 1;
            }
        }
        // Scratch trees whose owners are gone: their lease is taken before anything goes.
        for s in scratch::stale(&self.scratch()) {
            let tree = s.tree.clone();
            report.bytes_freed += s
                .remove()
                .map_err(|source| StoreError::Write(WriteError::Io { path: tree, source }))?;
            report.temporaries_removed += 1;
        }
        // Kept bisection worktrees that no bisection holds: caches of checked-out files.
        for s in scratch::stale_kept(&self.scratch()) {
            let tree = s.tree.clone();
            report.bytes_freed += s
                .remove()
                .map_err(|source| StoreError::Write(WriteError::Io { path: tree, source }))?;
            report.temporaries_removed += 1;
        }
        // Temporary files left by a write that was killed: in the store's root, every record
        // directory and every object shard (regular files named by `write_atomic` only).
        let mut dirs = vec![self.root.clone()];
        dirs.extend(self.record_kinds().iter().map(|k| self.root.join(k)));
        for (shard, t) in dir_entries(&self.root.join("objects")) {
            if t.is_dir()
                && shard
                    .file_name()
                    .is_some_and(|n| is_hex(&n.to_string_lossy(), 2))
            {
                dirs.push(shard);
            }
        }
        for dir in dirs {
            for (f, t) in dir_entries(&dir) {
                if t.is_file()
                    && f.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(TMP_PREFIX))
                {
                    remove(&f, &mut report)?;
                    report.temporaries_removed += 1;
                }
            }
        }
        Ok(report)
    }

    /// `gc --keep-last`: all but the newest `keep` build records of each recipe go, except
    /// each recipe's last build. A record that does not read is kept: it is not known to be
    /// an old build.
    fn gc_old_builds(&self, keep: usize, report: &mut GcReport) -> Result<(), StoreError> {
        let lasts: BTreeSet<String> = self
            .records("recipes")
            .iter()
            .filter_map(|(r, _, _)| self.get_last(r))
            .collect();
        let mut by_recipe: std::collections::BTreeMap<String, Vec<(String, String, PathBuf)>> =
            Default::default();
        for (key, path, parsed) in &self.records("builds") {
            if let Some(rec) = parsed
                .as_ref()
                .ok()
                .and_then(|v| BuildRecord::from_json(v, key).ok())
            {
                by_recipe.entry(rec.recipe).or_default().push((
                    rec.created_at,
                    key.clone(),
                    path.clone(),
                ));
            }
        }
        for (_, mut builds) in by_recipe {
            builds.sort_by(|a, b| b.0.cmp(&a.0));
            for (_, key, path) in builds.into_iter().skip(keep) {
                if !lasts.contains(&key) {
                    remove(&path, report)?;
                    report.records_removed += 1;
                }
            }
        }
        Ok(())
    }
}

/// Removes one file of the store (never a directory: gc removes trees only through their
/// leases) and counts its bytes.
fn remove(p: &Path, report: &mut GcReport) -> Result<(), StoreError> {
    let len = std::fs::symlink_metadata(p).map_or(0, |m| m.len());
    match std::fs::remove_file(p) {
        Ok(()) => {}
        // Another gc removed it first.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StoreError::Write(WriteError::Io {
                path: p.to_owned(),
                source,
            }));
        }
    }
    report.bytes_freed += len;
    Ok(())
}

/// A record's text as the store files it: its fields and [`SEAL`], the hash of the others.
pub fn seal(record: &Value) -> String {
    let mut record = record.clone();
    if let Some(o) = record.as_object_mut() {
        o.remove(SEAL);
        let seal = keys::key_of(&Value::Object(o.clone()));
        o.insert(SEAL.into(), Value::String(seal));
    }
    serde_json::to_string_pretty(&record).expect("JSON serialises") + "\n"
}

/// Reads a file under the store: a regular file of at most `max` bytes (a link, FIFO or
/// device there is damage, reported as [`StoreError::Corrupt`]).
fn read_store_file(path: &Path, max: u64) -> Result<Vec<u8>, StoreError> {
    fsutil::read_regular(path, max).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => StoreError::Corrupt {
            path: path.to_owned(),
            what: e.to_string(),
        },
        _ => StoreError::Read {
            path: path.to_owned(),
            source: e,
        },
    })
}

/// Parses a record's bytes and checks its seal (every record this repro writes has one: a
/// record without it is damaged, never trusted); returns the record without the seal, or
/// what is wrong with it.
pub fn parse_record(bytes: &[u8]) -> Result<Value, RecordError> {
    let mut v: Value = serde_json::from_slice(bytes).map_err(RecordError::NotJson)?;
    let Some(o) = v.as_object_mut() else {
        return Err(RecordError::NotAnObject);
    };
    let Some(seal) = o.remove(SEAL) else {
        return Err(RecordError::Unsealed);
    };
    let actual = keys::key_of(&Value::Object(o.clone()));
    if seal.as_str() != Some(actual.as_str()) {
        return Err(RecordError::Seal);
    }
    Ok(v)
}

/// What is wrong with a stored record's file.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file cannot be read.
    #[error("{0}")]
    Read(std::io::Error),
    /// The bytes are not JSON.
    #[error("not valid JSON ({0})")]
    NotJson(serde_json::Error),
    /// The JSON is not an object.
    #[error("not a JSON object")]
    NotAnObject,
    /// The seal does not match the fields.
    #[error("its fields do not hash to its {SEAL} (edited or damaged)")]
    Seal,
    /// There is no seal: every record repro writes has one.
    #[error("has no {SEAL} (edited or damaged: every record repro writes is sealed)")]
    Unsealed,
}

/// What a store's directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Identity {
    /// Nothing there yet.
    Absent,
    /// An empty directory (adopted on the first write).
    Empty,
    /// A store from before the marker named its kind (completed on the next write).
    Unmarked,
    /// A store with repro's marker.
    Marked,
}

fn read_only(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)
    )
}

/// Opens (creating, when writable) a file of the store without following a link.
fn open_nofollow(path: &Path, write: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .create(write)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A directory's entries with their types (links not followed), sorted by name.
fn dir_entries(dir: &Path) -> Vec<(PathBuf, std::fs::FileType)> {
    let mut v: Vec<(PathBuf, std::fs::FileType)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.path(), e.file_type().ok()?)))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// Whether `s` is `n` lowercase hexadecimal digits.
fn is_hex(s: &str, n: usize) -> bool {
    s.len() == n
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks that a name taken from a record is a key before it becomes a path.
pub fn check_key(what: &str, value: &str) -> Result<(), StoreError> {
    if keys::is_key(value) {
        return Ok(());
    }
    let mut shown: String = value.chars().take(80).collect();
    if shown.len() < value.len() {
        shown.push('…');
    }
    Err(StoreError::BadKey {
        what: what.to_string(),
        value: shown.escape_debug().to_string(),
    })
}

/// A profile's problems: its ID is the hash of its content (as a result's is), the fields
/// repro uses as names are what they claim, every metric value is finite, and its report
/// (`.ncu-rep`) is an object of the store.
fn check_profile(key: &str, rec: &Value, has_object: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut problems = Vec::new();
    let mut content = rec.clone();
    if let Some(o) = content.as_object_mut() {
        o.remove("id");
    }
    if keys::key_of(&content) != key {
        problems.push("its content does not hash to its ID (edited?)".into());
    }
    match records::ProfileRecord::from_json(&content, key) {
        Ok(p) => {
            if !keys::is_key(&p.build_key) {
                problems.push("its `build-key` is not a key".into());
            }
            if !keys::is_name(&p.recipe) || !keys::is_relative_path(&p.recipe_path) {
                problems.push("its recipe is not a recipe name and relative path".into());
            }
            if p.commit.as_deref().is_some_and(|c| !keys::is_commit(c)) {
                problems.push("its `commit` is not a commit".into());
            }
            if let Some((m, _)) = p
                .metrics
                .iter()
                .find(|(_, v)| v.value.is_some_and(|x| !x.is_finite()))
            {
                problems.push(format!(
                    "its metric `{}` is not a finite number",
                    crate::foundation::output::sanitize(m)
                ));
            }
        }
        Err(e) => problems.push(format!("does not read as a profile: {e}")),
    }
    for digest in records::referenced_blobs(rec) {
        if let Err(e) = check_key("a report's sha256", &digest) {
            problems.push(format!("references {e}"));
        } else if !has_object(&digest) {
            problems.push(format!(
                "references report {} that is not in the store",
                keys::short(&digest)
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::at(d.path().join(".repro"));
        (d, s)
    }

    #[test]
    fn blobs_round_trip_and_corruption_is_caught() {
        let (_d, s) = store();
        let digest = s.put_blob(b"hello").unwrap();
        assert_eq!(digest, keys::sha256_hex(b"hello"));
        assert_eq!(s.get_blob(&digest).unwrap(), b"hello");
        std::fs::write(s.blob_path(&digest).unwrap(), b"hellO").unwrap();
        assert!(matches!(
            s.get_blob(&digest),
            Err(StoreError::Corrupt { .. })
        ));
        // Putting it again repairs it.
        s.put_blob(b"hello").unwrap();
        assert_eq!(s.get_blob(&digest).unwrap(), b"hello");
    }

    /// A store whose `quarantine/builds` and `objects/<shard>` are links a repository
    /// committed: neither gc's quarantine nor a build's write goes through them.
    #[test]
    fn links_below_the_store_root_are_never_written_through() {
        let (d, s) = store();
        let victim = d.path().join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        s.put_blob(b"seed").unwrap();
        // gc quarantines a damaged record: through a linked quarantine/builds it would
        // drop a file of the attacker's choosing into `victim`.
        std::fs::create_dir_all(s.root().join("quarantine")).unwrap();
        std::os::unix::fs::symlink(&victim, s.root().join("quarantine/builds")).unwrap();
        std::fs::create_dir_all(s.root().join("builds")).unwrap();
        std::fs::write(
            s.root()
                .join("builds")
                .join(format!("{}.json", "a".repeat(64))),
            b"echo PWNED\n",
        )
        .unwrap();
        let err = s.gc(None).unwrap_err();
        assert!(matches!(err, StoreError::Symlink { .. }), "{err}");
        // A linked object shard: the blob would be written into `victim`.
        let digest = keys::sha256_hex(b"payload");
        std::os::unix::fs::symlink(&victim, s.root().join("objects").join(&digest[..2])).unwrap();
        let err = s.put_blob(b"payload").unwrap_err();
        assert!(matches!(err, StoreError::Symlink { .. }), "{err}");
        assert_eq!(
            std::fs::read_dir(&victim).unwrap().count(),
            0,
            "written through a link"
        );
        // A file where a directory belongs is refused, not followed or replaced.
        let (_d2, s2) = store();
        s2.put_blob(b"x").unwrap();
        std::fs::write(s2.root().join("results"), b"").unwrap();
        assert!(
            s2.put_record("results", &"b".repeat(64), &json!({}))
                .is_err()
        );
    }

    /// A store a repository commits (forced past its `.gitignore`) holds records sealed by
    /// a checksum anyone can recompute: a forged build record would hand back a stranger's
    /// cubin as a cache hit. Such a store is refused before anything in it is read.
    #[test]
    fn a_store_committed_to_the_repository_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(d.path()).unwrap();
        let s = Store::at(d.path().join(".repro"));
        s.put_blob(b"x").unwrap();
        assert!(
            s.check_schema().is_ok(),
            "an ignored store is the user's own"
        );
        let mut index = repo.index().unwrap();
        index.add_path(Path::new(".repro/store.json")).unwrap();
        index.write().unwrap();
        let s = Store::at(d.path().join(".repro"));
        let err = s.check_schema().unwrap_err();
        assert!(matches!(err, StoreError::Committed { .. }), "{err}");
        assert_eq!(err.exit_code(), exit::USAGE);
        assert!(s.gc(None).is_err() && s.put_blob(b"y").is_err());
    }

    /// `--store link/` names the link itself: a trailing slash must not get a link past
    /// the no-follow checks.
    #[test]
    fn a_trailing_slash_does_not_make_a_linked_store_real() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        Store::at(&real).put_blob(b"x").unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        for spelling in ["link/", "link/.", "link//"] {
            let s = Store::at(format!("{}/{spelling}", d.path().display()));
            assert!(
                matches!(s.check_schema(), Err(StoreError::Symlink { .. })),
                "{spelling}"
            );
            assert!(s.gc(None).is_err(), "{spelling}");
        }
    }

    /// A record directory gc cannot list (no permission, or a file in its place) stops gc
    /// before it deletes an object, and verify reports it: a short listing would make every
    /// object the unlisted records reference look unreferenced.
    #[test]
    fn a_record_directory_that_cannot_be_listed_stops_gc_and_fails_verify() {
        let (_d, s) = store();
        let blob = s.put_blob(b"artifact").unwrap();
        std::fs::write(s.root().join("builds"), b"not a directory").unwrap();
        assert!(matches!(s.gc(None), Err(StoreError::Read { .. })));
        assert!(s.blob_path(&blob).unwrap().exists(), "gc deleted an object");
        let r = s.verify();
        assert!(
            r.problems
                .iter()
                .any(|p| p.path == "builds" && p.what.contains("cannot be checked")),
            "{:?}",
            r.problems
        );
    }

    #[test]
    fn verify_and_gc() {
        let (_d, s) = store();
        let used = s.put_blob(b"artifact").unwrap();
        let orphan = s.put_blob(b"orphan").unwrap();
        let path = format!(
            "{}/tests/fixtures/records/build-ok.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut rec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        rec["outputs"] = json!({"ptx": {"sha256": used, "bytes": 8}});
        let key = rec["key"].as_str().unwrap().to_string();
        s.put_record("builds", &key, &rec).unwrap();
        let r = s.verify();
        assert_eq!((r.objects, r.records, r.problems.len()), (2, 1, 0));

        // A flipped byte in a referenced object is reported twice: as corrupt, and as a
        // record whose artifact is not intact.
        let p = s.blob_path(&used).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        let r = s.verify();
        assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
        assert!(r.problems[0].path.starts_with("objects/"));

        let g = s.gc(None).unwrap();
        assert_eq!(g.objects_removed, 2);
        assert!(!s.blob_path(&orphan).unwrap().exists());

        // A build record that does not read as one is reported, and keeps its objects.
        let kept = s.put_blob(b"kept").unwrap();
        let odd = json!({"inputs": {"x": 1}, "recipe": "r", "outputs": {"ptx": {"sha256": kept}}});
        let odd_key = keys::key_of(&odd["inputs"]);
        s.put_record("builds", &odd_key, &odd).unwrap();
        let r = s.verify();
        assert!(
            r.problems
                .iter()
                .any(|p| p.what.contains("does not read as a build record")),
            "{:?}",
            r.problems
        );
        s.gc(None).unwrap();
        assert!(s.blob_path(&kept).unwrap().exists());
    }

    #[test]
    fn gc_removes_leftovers_everywhere_but_live_scratch() {
        let (_d, s) = store();
        let key = "1".repeat(64);
        s.put_record("results", &key, &json!({})).unwrap();
        let leftovers = [
            s.root().join(".repro-tmp-a"),
            s.root().join("results/.repro-tmp-b"),
            s.root().join("bisect-samples/.repro-tmp-c"),
        ];
        for p in &leftovers {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"half").unwrap();
        }
        // A checkout whose owner is gone (its lease is not held), and one of ours.
        let dead = s.scratch().join("bisect-4194305-x");
        std::fs::create_dir_all(dead.join("src")).unwrap();
        std::fs::write(dead.join("src/a.cu"), b"kernel").unwrap();
        std::fs::write(
            s.scratch().join("bisect-4194305-x.lease"),
            b"host h\npid 4194305\n",
        )
        .unwrap();
        let live = s.scratch_dir("bisect").unwrap();

        let g = s.gc(None).unwrap();
        assert_eq!(g.temporaries_removed, 4);
        assert_eq!(g.bytes_freed, 3 * 4 + 6 + 19);
        assert!(leftovers.iter().all(|p| !p.exists()));
        assert!(!dead.exists());
        assert!(live.path().exists());
        assert!(s.get_record("results", &key).unwrap().is_some());
    }

    #[test]
    fn gc_refuses_a_directory_that_is_not_a_store_and_touches_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("D");
        let files = [
            "objects/ab/cdef.txt",
            "photos/index.json",
            "builds/notes.json",
        ];
        for f in files {
            std::fs::create_dir_all(dir.join(f).parent().unwrap()).unwrap();
            std::fs::write(dir.join(f), b"mine").unwrap();
        }
        let s = Store::at(&dir);
        let e = s.gc(None).unwrap_err();
        assert!(matches!(e, StoreError::NotAStore { .. }), "{e}");
        assert!(e.to_string().contains("photos"), "{e}");
        assert_eq!(e.exit_code(), exit::USAGE);
        for f in files {
            assert_eq!(std::fs::read(dir.join(f)).unwrap(), b"mine");
        }
        assert!(!dir.join("quarantine").exists() && !dir.join(MARKER).exists());
        assert!(s.put_blob(b"x").is_err());
        assert!(!dir.join(MARKER).exists());
    }

    #[test]
    fn a_symlinked_store_or_store_member_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("precious"), b"x").unwrap();
        let link = d.path().join(".repro");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let s = Store::at(&link);
        for e in [
            s.check_schema().unwrap_err(),
            s.gc(None).unwrap_err(),
            s.put_blob(b"x").unwrap_err(),
            s.lock_shared().unwrap_err(),
        ] {
            assert!(matches!(e, StoreError::Symlink { .. }), "{e}");
        }
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1);
        // A real store whose `objects` is a link.
        let (_d2, s) = store();
        s.put_blob(b"x").unwrap();
        std::fs::remove_dir_all(s.root().join("objects")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, s.root().join("objects")).unwrap();
        assert!(matches!(s.gc(None), Err(StoreError::Symlink { .. })));
        assert!(elsewhere.join("precious").exists());
    }

    #[test]
    fn stores_from_before_the_marker_are_recognised_and_completed() {
        // Only the old marker `{"schema": 1}`.
        let (_d, s) = store();
        s.put_blob(b"x").unwrap();
        std::fs::write(s.root().join(MARKER), r#"{"schema": 1}"#).unwrap();
        s.check_schema().unwrap();
        s.gc(None).unwrap();
        let m: Value =
            serde_json::from_slice(&std::fs::read(s.root().join(MARKER)).unwrap()).unwrap();
        assert_eq!(m["kind"], MARKER_KIND);
        // No marker at all, repro's names and its lock only: adopted.
        let (_d, s) = store();
        let key = "2".repeat(64);
        s.put_record("results", &key, &json!({"a": 1})).unwrap();
        std::fs::remove_file(s.root().join(MARKER)).unwrap();
        s.check_schema().unwrap();
        assert!(s.get_record("results", &key).unwrap().is_some());
        s.gc(None).unwrap();
        assert!(s.root().join(MARKER).exists());
        // A foreign marker is not repro's.
        std::fs::write(s.root().join(MARKER), r#"{"schema": 1, "kind": "photos"}"#).unwrap();
        assert!(matches!(s.gc(None), Err(StoreError::NotAStore { .. })));
        // An empty directory becomes a store.
        let d = tempfile::tempdir().unwrap();
        let s = Store::at(d.path());
        s.put_blob(b"y").unwrap();
        assert!(d.path().join(MARKER).exists() && d.path().join(".gitignore").exists());
    }

    #[test]
    fn record_fields_never_become_paths_unless_they_are_keys() {
        let (_d, s) = store();
        s.put_blob(b"x").unwrap();
        for bad in [
            "a",
            "",
            "../../../../../../etc/hostname",
            "ab/../../x",
            &"A".repeat(64),
        ] {
            assert!(
                matches!(s.get_blob(bad), Err(StoreError::BadKey { .. })),
                "{bad}"
            );
            assert!(matches!(s.blob_path(bad), Err(StoreError::BadKey { .. })));
            assert!(matches!(
                s.get_record("builds", bad),
                Err(StoreError::BadKey { .. })
            ));
            assert!(s.put_record("results", bad, &json!({})).is_err());
        }
        assert!(s.get_record("../x", &"1".repeat(64)).is_err());
    }

    #[test]
    fn only_regular_files_are_read_from_the_store() {
        let (_d, s) = store();
        let key = "3".repeat(64);
        s.put_record("builds", &key, &json!({"a": 1})).unwrap();
        let path = s.root().join(format!("builds/{key}.json"));
        std::fs::remove_file(&path).unwrap();
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A FIFO would block a plain read forever.
        assert!(matches!(
            s.get_record("builds", &key),
            Err(StoreError::Corrupt { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert!(matches!(
            s.get_record("builds", &key),
            Err(StoreError::Corrupt { .. })
        ));
        let digest = keys::sha256_hex(b"zeros");
        let blob = s.blob_path(&digest).unwrap();
        std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &blob).unwrap();
        assert!(matches!(
            s.get_blob(&digest),
            Err(StoreError::Corrupt { .. })
        ));
        let r = s.verify();
        assert!(!r.problems.is_empty());
    }

    #[test]
    fn an_unsealed_record_is_damaged() {
        let (_d, s) = store();
        let key = "4".repeat(64);
        s.put_record("bisect", &key, &json!({"a": 1})).unwrap();
        let path = s.root().join(format!("bisect/{key}.json"));
        std::fs::write(&path, r#"{"a": 2}"#).unwrap();
        assert!(matches!(
            s.get_record("bisect", &key),
            Err(StoreError::Corrupt { .. })
        ));
        let r = s.verify();
        assert!(
            r.problems
                .iter()
                .any(|p| p.what.contains("no record-sha256")),
            "{:?}",
            r.problems
        );
        assert_eq!(s.gc(None).unwrap().records_quarantined, 1);
        assert!(!path.exists());
    }

    #[test]
    fn newer_store_schema_is_refused() {
        let (_d, s) = store();
        s.put_blob(b"x").unwrap();
        std::fs::write(s.root().join("store.json"), r#"{"schema": 99}"#).unwrap();
        assert!(matches!(
            s.check_schema(),
            Err(StoreError::NewerSchema { found: 99, .. })
        ));
    }
}
