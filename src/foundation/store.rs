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

/// Directories of the store that hold no records.
const NOT_RECORDS: &[&str] = &["objects", "tmp", "quarantine"];

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
        }
    }
}

/// A store at a directory.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
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
        Store { root: root.into() }
    }

    /// Where the store is.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Checks that the store (if it exists) is one this repro understands.
    pub fn check_schema(&self) -> Result<(), StoreError> {
        let path = self.root.join("store.json");
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(());
        };
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            what: e.to_string(),
        })?;
        match v["schema"].as_u64() {
            Some(n) if n > SCHEMA => Err(StoreError::NewerSchema {
                path: self.root.clone(),
                found: n,
            }),
            Some(_) => Ok(()),
            None => Err(StoreError::Corrupt {
                path,
                what: "no schema".into(),
            }),
        }
    }

    fn ensure(&self) -> Result<(), StoreError> {
        let marker = self.root.join("store.json");
        if !marker.exists() {
            fsutil::write_atomic(
                &marker,
                json!({"schema": SCHEMA}).to_string().as_bytes(),
                true,
            )?;
        }
        let ignore = self.root.join(".gitignore");
        if !ignore.exists() {
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

    /// Takes the store lock shared (builds, benchmarks, verify): many holders at once.
    pub fn lock_shared(&self) -> Result<StoreLock, StoreError> {
        self.lock(false)
    }

    /// Takes the store lock exclusively (gc): waits for every shared holder to finish.
    pub fn lock_exclusive(&self) -> Result<StoreLock, StoreError> {
        self.lock(true)
    }

    fn lock(&self, exclusive: bool) -> Result<StoreLock, StoreError> {
        let read_only = |e: &std::io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)
            )
        };
        let path = self.root.join("lock");
        let write_err = |source| {
            StoreError::Write(WriteError::Io {
                path: path.clone(),
                source,
            })
        };
        match std::fs::create_dir_all(&self.root) {
            Ok(()) => {}
            Err(e) if read_only(&e) => return Ok(StoreLock { _file: None }),
            Err(e) => return Err(write_err(e)),
        }
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => f,
            // flock works on a descriptor opened for reading, so a store whose lock file
            // exists but is not writable by us is still locked properly.
            Err(e) if read_only(&e) => match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(_) => return Ok(StoreLock { _file: None }),
            },
            Err(e) => return Err(write_err(e)),
        };
        // fcntl (OFD) locks, which NFS and Lustre honour without the flock mount option.
        fsutil::lock_file(&file, exclusive, true).map_err(write_err)?;
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
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        match std::fs::rename(path, &dest) {
            Ok(()) => Ok(dest),
            // Another process quarantined or replaced it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(dest),
            Err(e) => Err(io(e)),
        }
    }

    /// The path of the blob with this digest.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.root
            .join("objects")
            .join(&digest[..2])
            .join(&digest[2..])
    }

    /// Stores bytes and returns their sha256. An existing, intact copy is kept.
    pub fn put_blob(&self, bytes: &[u8]) -> Result<String, StoreError> {
        self.ensure()?;
        let digest = keys::sha256_hex(bytes);
        let path = self.blob_path(&digest);
        if self.get_blob(&digest).is_ok() {
            return Ok(digest);
        }
        fsutil::write_atomic(&path, bytes, true)?;
        Ok(digest)
    }

    /// Reads a blob, checking that it still hashes to its name.
    pub fn get_blob(&self, digest: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.blob_path(digest);
        let bytes = std::fs::read(&path).map_err(|source| StoreError::Read {
            path: path.clone(),
            source,
        })?;
        let actual = keys::sha256_hex(&bytes);
        if actual != digest {
            return Err(StoreError::Corrupt {
                path,
                what: format!("its content hashes to {}", keys::short(&actual)),
            });
        }
        Ok(bytes)
    }

    fn record_path(&self, kind: &str, key: &str) -> PathBuf {
        self.root.join(kind).join(format!("{key}.json"))
    }

    /// Writes a record (`kind` is its directory: `builds`, `results`, `bisect`...), sealed
    /// with [`SEAL`].
    pub fn put_record(&self, kind: &str, key: &str, record: &Value) -> Result<(), StoreError> {
        self.ensure()?;
        let mut record = record.clone();
        if let Some(o) = record.as_object_mut() {
            o.remove(SEAL);
            let seal = keys::key_of(&Value::Object(o.clone()));
            o.insert(SEAL.into(), Value::String(seal));
        }
        let text = serde_json::to_string_pretty(&record).expect("JSON serialises") + "\n";
        fsutil::write_atomic(&self.record_path(kind, key), text.as_bytes(), true)?;
        Ok(())
    }

    /// Reads a record, or `None` if there is none under that key. A record that does not
    /// parse or whose seal does not match is [`StoreError::Corrupt`].
    pub fn get_record(&self, kind: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let path = self.record_path(kind, key);
        match std::fs::read(&path) {
            Ok(bytes) => parse_record(&bytes)
                .map(Some)
                .map_err(|e| StoreError::Corrupt {
                    path,
                    what: e.to_string(),
                }),
            // Under a path that is not a directory no record can exist; the first write will
            // then fail with a message about the store's location.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                Ok(None)
            }
            Err(source) => Err(StoreError::Read { path, source }),
        }
    }

    /// Remembers `key` as the last build of `recipe`.
    pub fn set_last(&self, recipe: &str, key: &str) -> Result<(), StoreError> {
        // A cache hit of the same recipe finds it so already: no write, no fsync.
        if self.get_last(recipe).as_deref() == Some(key) {
            return Ok(());
        }
        let v = LastBuild {
            schema: SCHEMA,
            recipe: recipe.to_string(),
            key: key.to_string(),
        };
        fsutil::write_atomic(
            &self.root.join("recipes").join(format!("{recipe}.json")),
            serde_json::to_string(&v).expect("serialises").as_bytes(),
            true,
        )?;
        Ok(())
    }

    /// Every directory of records (`builds`, `results`, `bisect`, `recipes`...).
    pub fn record_kinds(&self) -> Vec<String> {
        Self::files_in(&self.root)
            .into_iter()
            .filter(|p| p.is_dir())
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| !NOT_RECORDS.contains(&n.as_str()))
            .collect()
    }

    /// The key of the last build of `recipe`, if any.
    pub fn get_last(&self, recipe: &str) -> Option<String> {
        let bytes = std::fs::read(self.root.join("recipes").join(format!("{recipe}.json"))).ok()?;
        serde_json::from_slice::<LastBuild>(&bytes)
            .ok()
            .map(|l| l.key)
    }

    fn files_in(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        v.sort();
        v
    }

    /// Scratch space for checkouts: `tmp/` in the store.
    pub fn scratch(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// A fresh scratch directory `tmp/<purpose>-<pid>-*` (`purpose` has no `-`), removed when dropped. One left by a
    /// killed process is removed by [`Store::clean_stale_scratch`] and by `gc`.
    pub fn scratch_dir(&self, purpose: &str) -> std::io::Result<tempfile::TempDir> {
        std::fs::create_dir_all(self.scratch())?;
        tempfile::Builder::new()
            .prefix(&format!("{purpose}-{}-", std::process::id()))
            .tempdir_in(self.scratch())
    }

    /// Scratch directories whose process is gone.
    fn stale_scratch(&self) -> Vec<PathBuf> {
        Self::files_in(&self.scratch())
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.split('-').nth(1))
                    .and_then(|pid| pid.parse::<u32>().ok())
                    .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            })
            .collect()
    }

    /// Removes scratch directories left by processes that were killed.
    pub fn clean_stale_scratch(&self) {
        for d in self.stale_scratch() {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    fn objects(&self) -> Vec<(String, PathBuf)> {
        let mut out = Vec::new();
        for sub in Self::files_in(&self.root.join("objects")) {
            let prefix = sub
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            for f in Self::files_in(&sub) {
                // A write in flight (or a killed one's leftover, which gc removes).
                if f.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(".repro-tmp-"))
                {
                    continue;
                }
                let rest = f
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                out.push((format!("{prefix}{rest}"), f));
            }
        }
        out
    }

    /// Every record of a kind: (key, path, parsed record or parse error).
    pub fn records(&self, kind: &str) -> Vec<(String, PathBuf, Result<Value, RecordError>)> {
        Self::files_in(&self.root.join(kind))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .map(|p| {
                let key = p
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                let parsed = std::fs::read(&p)
                    .map_err(RecordError::Read)
                    .and_then(|b| parse_record(&b));
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

    /// Re-hashes every object and checks every record of every kind: it parses, its seal
    /// matches, a build's key recomputes from its inputs, a result's ID from its content,
    /// and every object or build it references exists.
    pub fn verify(&self) -> VerifyReport {
        let mut report = VerifyReport::default();
        let mut present = BTreeSet::new();
        for (name, path) in self.objects() {
            report.objects += 1;
            match std::fs::read(&path) {
                Ok(bytes) => {
                    let actual = keys::sha256_hex(&bytes);
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

    /// What is wrong with one parsed record filed as `kind/key`: a build's inputs must hash
    /// to its key and its objects exist (`has_object`), a result's content to its ID, a
    /// recipe pointer must name a stored build, and any record's own `key` its file name.
    pub fn check_record(
        &self,
        kind: &str,
        key: &str,
        rec: &Value,
        has_object: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        match kind {
            "builds" => {
                match BuildRecord::from_json(rec, key) {
                    Ok(b) if keys::key_of(&records::to_json(&b.inputs)) != key => {
                        problems.push("its inputs do not hash to its key".into());
                    }
                    Ok(_) => {}
                    Err(e) => problems.push(format!("does not read as a build record: {e}")),
                }
                for digest in records::referenced_blobs(rec) {
                    if !has_object(&digest) {
                        problems.push(format!(
                            "references object {} that is missing or corrupt",
                            keys::short(&digest)
                        ));
                    }
                }
            }
            "results" => {
                let mut content = rec.clone();
                if let Some(o) = content.as_object_mut() {
                    o.remove("id");
                }
                if keys::key_of(&content) != key {
                    problems.push("its content does not hash to its ID (edited?)".into());
                }
                if let Err(e) = ResultRecord::from_json(&content, key) {
                    problems.push(format!("does not read as a result record: {e}"));
                }
            }
            "recipes" => match serde_json::from_value::<LastBuild>(rec.clone()) {
                Ok(LastBuild { key: k, .. }) if keys::is_key(&k) => {
                    let k = k.as_str();
                    if !self.record_path("builds", k).exists() {
                        problems.push(format!(
                            "names build {} that is not in the store",
                            keys::short(k)
                        ));
                    }
                }
                _ => problems.push("has no valid `key`".into()),
            },
            _ => {
                if let Some(k) = rec.get("key").and_then(Value::as_str)
                    && k != key
                {
                    problems.push(format!(
                        "says key {}, but is filed as {}",
                        keys::short(k),
                        keys::short(key)
                    ));
                }
            }
        }
        problems
    }

    /// The bytes of the record `kind/key`, if there is one.
    pub fn record_bytes(&self, kind: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.record_path(kind, key);
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(StoreError::Read { path, source }),
        }
    }

    /// Files a record from elsewhere exactly as it is (its seal kept), never replacing one
    /// already filed under that key. The caller has checked it.
    pub fn import_record(&self, kind: &str, key: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.ensure()?;
        fsutil::write_atomic(&self.record_path(kind, key), bytes, false)?;
        Ok(())
    }

    /// Removes leftover temporary files, corrupt objects, objects no record references,
    /// and with `keep_last`, all but the newest `keep_last` build records of each recipe
    /// (the last build of each recipe is always kept).
    ///
    /// Takes the store lock exclusively: it waits for builds in flight to finish, and
    /// builds wait for it. Damaged records are moved to `quarantine/`, not deleted.
    pub fn gc(&self, keep_last: Option<usize>) -> Result<GcReport, StoreError> {
        let _lock = self.lock_exclusive()?;
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
        let remove = |p: &Path, report: &mut GcReport| -> Result<(), StoreError> {
            let len = tree_len(p);
            let removed = if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            };
            removed.map_err(|source| {
                StoreError::Write(WriteError::Io {
                    path: p.to_owned(),
                    source,
                })
            })?;
            report.bytes_freed += len;
            Ok(())
        };
        let records = self.records("builds");
        if let Some(keep) = keep_last {
            let lasts: BTreeSet<String> = Self::files_in(&self.root.join("recipes"))
                .iter()
                .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .filter_map(|r| self.get_last(&r))
                .collect();
            let mut by_recipe: std::collections::BTreeMap<String, Vec<(String, String, PathBuf)>> =
                Default::default();
            // A record that does not read is kept: it is not known to be an old build.
            for (key, path, parsed) in &records {
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
                        remove(&path, &mut report)?;
                        report.records_removed += 1;
                    }
                }
            }
        }
        let mut live = BTreeSet::new();
        for (_, _, parsed) in self.records("builds") {
            if let Ok(rec) = parsed {
                live.extend(records::referenced_blobs(&rec));
            }
        }
        for (name, path) in self.objects() {
            let intact = std::fs::read(&path).is_ok_and(|b| keys::sha256_hex(&b) == name);
            if !intact || !live.contains(&name) {
                remove(&path, &mut report)?;
                report.objects_removed += 1;
            }
        }
        // Temporary files and scratch checkouts left by a process that was killed: in the
        // store's root, every record directory and every object shard.
        for d in self.stale_scratch() {
            remove(&d, &mut report)?;
            report.temporaries_removed += 1;
        }
        let mut dirs = vec![self.root.clone()];
        for d in Self::files_in(&self.root) {
            if d.is_dir() && d != self.scratch() {
                dirs.extend(Self::files_in(&d).into_iter().filter(|p| p.is_dir()));
                dirs.push(d);
            }
        }
        for dir in dirs {
            for f in Self::files_in(&dir) {
                if f.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(".repro-tmp-"))
                {
                    remove(&f, &mut report)?;
                    report.temporaries_removed += 1;
                }
            }
        }
        Ok(report)
    }
}

/// Parses a record's bytes and checks its seal (when it has one, as every record this
/// repro writes does); returns the record without the seal, or what is wrong with it.
pub fn parse_record(bytes: &[u8]) -> Result<Value, RecordError> {
    let mut v: Value = serde_json::from_slice(bytes).map_err(RecordError::NotJson)?;
    let Some(o) = v.as_object_mut() else {
        return Err(RecordError::NotAnObject);
    };
    if let Some(seal) = o.remove(SEAL) {
        let actual = keys::key_of(&Value::Object(o.clone()));
        if seal.as_str() != Some(actual.as_str()) {
            return Err(RecordError::Seal);
        }
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
}

/// The bytes under a path (a file's length, or a directory's files summed; links not followed).
fn tree_len(p: &Path) -> u64 {
    match p.symlink_metadata() {
        Ok(m) if m.is_dir() => Store::files_in(p).iter().map(|c| tree_len(c)).sum(),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
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
        std::fs::write(s.blob_path(&digest), b"hellO").unwrap();
        assert!(matches!(
            s.get_blob(&digest),
            Err(StoreError::Corrupt { .. })
        ));
        // Putting it again repairs it.
        s.put_blob(b"hello").unwrap();
        assert_eq!(s.get_blob(&digest).unwrap(), b"hello");
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
        let p = s.blob_path(&used);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        let r = s.verify();
        assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
        assert!(r.problems[0].path.starts_with("objects/"));

        let g = s.gc(None).unwrap();
        assert_eq!(g.objects_removed, 2);
        assert!(!s.blob_path(&orphan).exists());

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
        assert!(s.blob_path(&kept).exists());
    }

    #[test]
    fn gc_removes_leftovers_everywhere_but_live_scratch() {
        let (_d, s) = store();
        s.put_record("results", "r1", &json!({})).unwrap();
        let leftovers = [
            s.root().join(".repro-tmp-a"),
            s.root().join("results/.repro-tmp-b"),
            s.root().join("bisect-samples/.repro-tmp-c"),
        ];
        for p in &leftovers {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"half").unwrap();
        }
        // A checkout of a process that is gone (pid beyond pid_max), and one of ours.
        let dead = s.scratch().join("bisect-4194305-x");
        std::fs::create_dir_all(dead.join("src")).unwrap();
        std::fs::write(dead.join("src/a.cu"), b"kernel").unwrap();
        let live = s.scratch_dir("bisect").unwrap();

        let g = s.gc(None).unwrap();
        assert_eq!(g.temporaries_removed, 4);
        assert_eq!(g.bytes_freed, 3 * 4 + 6);
        assert!(leftovers.iter().all(|p| !p.exists()));
        assert!(!dead.exists());
        assert!(live.path().exists());
        assert!(s.get_record("results", "r1").unwrap().is_some());
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
