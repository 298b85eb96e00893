//! Records shared through a git remote: `repro push` and `repro pull`.
//!
//! Each record of the store (`builds/KEY.json`, `results/ID.json`, `bisect/KEY.json`,
//! `bisections/ID.json`) is a git blob under its own ref, `refs/repro/KIND/KEY`, and each
//! object a build references
//! under `refs/repro/objects/SHA256`. Names are keys of content, so two people pushing at
//! once touch different refs, or the same ref with the same blob: pushes never need a merge.
//! The same key with different bytes is a conflict; it is reported and both sides are
//! left as they are.
//!
//! The refs live in the local repository too (the namespace mirrors what was pushed and
//! pulled); no other ref, no branch, the index and the working tree are never touched.
//! What comes from the remote is hostile until checked: names must be keys, sizes are
//! bounded, every object must hash to its name, every record must parse, carry its seal and
//! pass the store's own check, and objects are filed before the records that name them.
//! Performance steps (`bisect` records of bench questions) are not shared: their samples
//! are comparable only with samples taken on the same card.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use git2::{ObjectType, Oid, Repository};
use serde_json::Value;

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::process::ProcessError;
use crate::foundation::store::{self, Store, StoreError};

/// The ref namespace.
pub const NAMESPACE: &str = "refs/repro";

/// Where `pull` fetches to before checking (removed afterwards).
const INCOMING: &str = "refs/repro-incoming";

/// The kinds of records shared.
pub const KINDS: &[&str] = &["builds", "results", "bisect", "bisections"];

/// The largest record taken from a remote.
const MAX_RECORD: usize = 4 << 20;

/// The largest object taken from a remote.
const MAX_OBJECT: usize = 512 << 20;

/// How long one `git push` or `git fetch` may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Why records could not be shared.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// The remote could not be reached or is not a repository.
    #[error("cannot reach the remote `{remote}`: {detail}")]
    Unreachable {
        /// The remote's name or URL.
        remote: String,
        /// What git said.
        detail: String,
    },
    /// Git could not be run.
    #[error("git failed")]
    Git {
        /// The failure.
        #[source]
        source: ProcessError,
    },
    /// The local repository's object database or refs.
    #[error("cannot update the repository's refs/repro namespace")]
    Repository {
        /// The cause.
        #[source]
        source: git2::Error,
    },
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Diagnose for ShareError {
    fn exit_code(&self) -> u8 {
        match self {
            ShareError::Unreachable { .. } | ShareError::Git { .. } => exit::ENVIRONMENT,
            ShareError::Repository { .. } => exit::IO,
            ShareError::Store(e) => e.exit_code(),
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            ShareError::Unreachable { remote, .. } => Some(format!(
                "name a remote of this repository (`git remote -v`) or a URL, and check that `git fetch {remote}` works"
            )),
            ShareError::Git { source } => source.hint().or_else(|| {
                Some("git's own message is above; check that the same `git push` or `git fetch` of the remote works by hand".into())
            }),
            ShareError::Repository { .. } => {
                Some("check that the repository is writable (`git update-ref` works)".into())
            }
            ShareError::Store(e) => e.hint(),
        }
    }
}

/// A record or object that differs between here and the remote under one name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Conflict {
    /// `builds/KEY`, `objects/SHA256`...
    pub name: String,
    /// Why it is a conflict.
    pub what: String,
}

/// What a push or a pull did.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Summary {
    /// Records sent or filed, by kind.
    pub records: BTreeMap<String, usize>,
    /// Objects sent or filed.
    pub objects: usize,
    /// Names that were already the same on both sides.
    pub unchanged: usize,
    /// Records not shared (performance steps).
    pub not_shared: usize,
    /// Names whose two sides differ (nothing was replaced).
    pub conflicts: Vec<Conflict>,
    /// Records from the remote that failed their checks (not filed).
    pub rejected: Vec<Conflict>,
}

fn git_err(e: git2::Error) -> ShareError {
    ShareError::Repository { source: e }
}

/// Runs `git` in the repository; a failure that says the remote cannot be read is
/// [`ShareError::Unreachable`].
fn git(
    workdir: &Path,
    remote: &str,
    args: &[&str],
) -> Result<crate::foundation::process::Output, ShareError> {
    let out = crate::foundation::git::command::in_workdir(workdir)
        .args(args)
        .timeout(GIT_TIMEOUT)
        .output()
        .map_err(|source| ShareError::Git { source })?;
    let err = out.stderr_str();
    if !out.status.success()
        && (err.contains("does not appear to be a git repository")
            || err.contains("Could not read from remote repository")
            || err.contains("unable to access")
            || err.contains("Could not resolve host")
            || err.contains("Connection refused")
            || err.contains("No such file or directory"))
    {
        let detail = err
            .lines()
            .find(|l| l.starts_with("fatal:"))
            .unwrap_or(err.lines().next().unwrap_or("git failed"))
            .trim_start_matches("fatal: ")
            .to_string();
        return Err(ShareError::Unreachable {
            remote: remote.to_string(),
            detail,
        });
    }
    Ok(out)
}

/// Whether a bisection step record is a performance step's (not shared).
fn is_bench_step(key: &str, rec: &Value) -> bool {
    crate::foundation::records::StepRecord::from_json(rec, key)
        .is_ok_and(|s| s.mode() == Some("bench"))
}

/// The directory git runs in: the working tree, or the git directory of a bare repository.
fn workdir(repo: &Repository) -> PathBuf {
    repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf()
}

/// Sends every shareable record of `store`, and the objects its builds reference, to
/// `remote` (a remote's name or a URL).
pub fn push(repo: &Repository, store: &Store, remote: &str) -> Result<Summary, ShareError> {
    let mut summary = Summary::default();
    let _lock = store.lock_shared()?;
    let mut sent: BTreeMap<String, Oid> = BTreeMap::new();
    for kind in KINDS {
        for (key, _, parsed) in store.records(kind) {
            // Damaged records stay home (`repro store verify` names them).
            let Ok(rec) = parsed else { continue };
            if !keys::is_key(&key) {
                continue;
            }
            if *kind == "bisect" && is_bench_step(&key, &rec) {
                summary.not_shared += 1;
                continue;
            }
            let Some(bytes) = store.record_bytes(kind, &key)? else {
                continue;
            };
            if *kind == "builds" {
                for digest in crate::foundation::records::referenced_blobs(&rec) {
                    if let Ok(b) = store.get_blob(&digest) {
                        let oid = repo.blob(&b).map_err(git_err)?;
                        sent.insert(format!("objects/{digest}"), oid);
                    }
                }
            }
            let oid = repo.blob(&bytes).map_err(git_err)?;
            sent.insert(format!("{kind}/{key}"), oid);
        }
    }
    // The local namespace mirrors the store; a name whose bytes changed here (a record
    // rebuilt after a quarantine) is a conflict with what was shared, not an update.
    for (name, oid) in &sent {
        let refname = format!("{NAMESPACE}/{name}");
        match repo.refname_to_id(&refname) {
            Ok(old) if old == *oid => {}
            Ok(_) => summary.conflicts.push(Conflict {
                name: name.clone(),
                what: "differs from the copy shared before from this repository".into(),
            }),
            Err(_) => {
                repo.reference(&refname, *oid, false, "repro push")
                    .map_err(git_err)?;
            }
        }
    }
    if sent.is_empty() {
        return Ok(summary);
    }
    let out = git(
        &workdir(repo),
        remote,
        &[
            "push",
            "--porcelain",
            "--no-verify",
            remote,
            &format!("{NAMESPACE}/*:{NAMESPACE}/*"),
        ],
    )?;
    let answered = tally(&out.stdout_str(), &mut summary);
    if !out.status.success() && answered == 0 {
        return Err(ShareError::Git {
            source: ProcessError::Failed {
                argv: format!("git push {remote} {NAMESPACE}/*"),
                status: crate::foundation::process::describe_status(out.status),
                code: out.status.code(),
                stdout: out.stdout_str(),
                stderr: out.stderr_str(),
            },
        });
    }
    Ok(summary)
}

/// Counts git push's porcelain answer into the summary: how many refs it answered.
fn tally(stdout: &str, summary: &mut Summary) -> usize {
    let mut answered = 0usize;
    for line in stdout.lines() {
        // "<flag>\t<from>:<to>\t<summary>"
        let mut parts = line.splitn(3, '\t');
        let (Some(flag), Some(refs), rest) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Some(name) = refs
            .split(':')
            .nth(1)
            .and_then(|r| r.strip_prefix(&format!("{NAMESPACE}/")))
        else {
            continue;
        };
        answered += 1;
        match flag {
            "*" => {
                if let Some(kind) = name.split('/').next() {
                    if kind == "objects" {
                        summary.objects += 1;
                    } else {
                        *summary.records.entry(kind.to_string()).or_default() += 1;
                    }
                }
            }
            "=" => summary.unchanged += 1,
            "!" => summary.conflicts.push(Conflict {
                name: name.to_string(),
                what: format!(
                    "the remote holds other bytes under this name ({}); `repro pull` shows both",
                    rest.unwrap_or("rejected").trim()
                ),
            }),
            _ => {}
        }
    }
    answered
}

/// Reads a blob of at most `max` bytes from the repository.
fn read_blob(repo: &Repository, oid: Oid, max: usize) -> Result<Vec<u8>, BlobError> {
    let odb = repo.odb()?;
    let (size, kind) = odb.read_header(oid)?;
    if kind != ObjectType::Blob {
        return Err(BlobError::NotABlob { kind });
    }
    if size > max {
        return Err(BlobError::TooLarge { size, max });
    }
    Ok(odb.read(oid)?.data().to_vec())
}

/// Why a fetched object is rejected before it is read.
#[derive(Debug, thiserror::Error)]
enum BlobError {
    /// The object database cannot be read.
    #[error(transparent)]
    Git(#[from] git2::Error),
    /// A tree or commit where a file was expected.
    #[error("is a {kind}, not a blob")]
    NotABlob {
        /// What it is.
        kind: ObjectType,
    },
    /// Larger than such a file can be.
    #[error("is {size} bytes, more than the {max} allowed")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The bound.
        max: usize,
    },
}

/// Fetches the remote's records and files every one that passes its checks and is not
/// already here; one that differs from this store's record of the same name is a conflict
/// and the local record stays.
pub fn pull(repo: &Repository, store: &Store, remote: &str) -> Result<Summary, ShareError> {
    let mut summary = Summary::default();
    let out = git(
        &workdir(repo),
        remote,
        &[
            "fetch",
            "--no-tags",
            "--no-write-fetch-head",
            remote,
            &format!("+{NAMESPACE}/*:{INCOMING}/*"),
        ],
    )?;
    if !out.status.success() {
        return Err(ShareError::Git {
            source: ProcessError::Failed {
                argv: format!("git fetch {remote} {NAMESPACE}/*"),
                status: crate::foundation::process::describe_status(out.status),
                code: out.status.code(),
                stdout: out.stdout_str(),
                stderr: out.stderr_str(),
            },
        });
    }
    let mut incoming: Vec<(String, Oid)> = Vec::new();
    for r in repo
        .references_glob(&format!("{INCOMING}/*"))
        .map_err(git_err)?
        .flatten()
    {
        if let (Some(name), Some(oid)) = (r.name(), r.target()) {
            incoming.push((name.to_string(), oid));
        }
    }
    let result = file_incoming(repo, store, &incoming, &mut summary);
    // The staging refs go, whatever happened.
    for (name, _) in &incoming {
        if let Ok(mut r) = repo.find_reference(name) {
            let _ = r.delete();
        }
    }
    result?;
    Ok(summary)
}

fn file_incoming(
    repo: &Repository,
    store: &Store,
    incoming: &[(String, Oid)],
    summary: &mut Summary,
) -> Result<(), ShareError> {
    let _lock = store.lock_shared()?;
    let mut mirror: Vec<(String, Oid)> = Vec::new();
    // Objects first, so that no filed record names a missing one.
    let records = file_objects(repo, store, incoming, summary, &mut mirror)?;
    let has_object = |d: &str| keys::is_key(d) && store.get_blob(d).is_ok();
    for (kind, key, oid) in records {
        let name = format!("{kind}/{key}");
        let bytes = match read_blob(repo, oid, MAX_RECORD) {
            Ok(b) => b,
            Err(e) => {
                reject(summary, &name, e.to_string());
                continue;
            }
        };
        let sealed = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .is_some_and(|v| v.get(store::SEAL).is_some());
        let rec = match store::parse_record(&bytes) {
            Ok(r) if sealed => r,
            Ok(_) => {
                reject(summary, &name, format!("has no {}", store::SEAL));
                continue;
            }
            Err(e) => {
                reject(summary, &name, e.to_string());
                continue;
            }
        };
        let problems = store.check_record(&kind, &key, &rec, &has_object);
        if !problems.is_empty() {
            reject(summary, &name, problems.join("; "));
            continue;
        }
        if kind == "bisect" && is_bench_step(&key, &rec) {
            summary.not_shared += 1;
            continue;
        }
        match store.record_bytes(&kind, &key)? {
            Some(local) if local == bytes => summary.unchanged += 1,
            Some(_) => {
                summary.conflicts.push(Conflict {
                    name: name.clone(),
                    what: "this store holds other bytes under this key; kept this store's".into(),
                });
                continue;
            }
            None => {
                store.import_record(&kind, &key, &bytes)?;
                *summary.records.entry(kind.clone()).or_default() += 1;
            }
        }
        mirror.push((name, oid));
    }
    // The local namespace records what this store shares with the remote.
    for (name, oid) in mirror {
        let refname = format!("{NAMESPACE}/{name}");
        if repo.refname_to_id(&refname).is_err() {
            repo.reference(&refname, oid, false, "repro pull")
                .map_err(git_err)?;
        }
    }
    Ok(())
}

/// A refused ref, and why.
fn reject(summary: &mut Summary, name: &str, what: String) {
    summary.rejected.push(Conflict {
        name: name.to_string(),
        what,
    })
}

/// Files the incoming objects whose content hashes to their names, and returns the
/// incoming records (kind, key, blob) to file after them.
fn file_objects(
    repo: &Repository,
    store: &Store,
    incoming: &[(String, Oid)],
    summary: &mut Summary,
    mirror: &mut Vec<(String, Oid)>,
) -> Result<Vec<(String, String, Oid)>, ShareError> {
    let mut records: Vec<(String, String, Oid)> = Vec::new();
    for (refname, oid) in incoming {
        let name = refname
            .strip_prefix(&format!("{INCOMING}/"))
            .unwrap_or(refname);
        let mut parts = name.splitn(2, '/');
        let (Some(kind), Some(key)) = (parts.next(), parts.next()) else {
            reject(summary, name, "is not KIND/KEY".into());
            continue;
        };
        if !keys::is_key(key) {
            reject(summary, name, "its name is not a key".into());
            continue;
        }
        if kind == "objects" {
            let bytes = match read_blob(repo, *oid, MAX_OBJECT) {
                Ok(b) => b,
                Err(e) => {
                    reject(summary, name, e.to_string());
                    continue;
                }
            };
            if keys::sha256_hex(&bytes) != key {
                reject(
                    summary,
                    name,
                    "its content does not hash to its name".into(),
                );
                continue;
            }
            if store.get_blob(key).is_ok() {
                summary.unchanged += 1;
            } else {
                store.put_blob(&bytes)?;
                summary.objects += 1;
            }
            mirror.push((name.to_string(), *oid));
        } else if KINDS.contains(&kind) {
            records.push((kind.to_string(), key.to_string(), *oid));
        } else {
            reject(
                summary,
                name,
                format!("`{kind}` is not a kind of record repro shares"),
            );
        }
    }
    Ok(records)
}
