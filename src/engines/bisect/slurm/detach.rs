//! Detached bisections (`repro bisect --detach`): the driver itself is submitted as a
//! Slurm job (`sbatch`), so that nothing of the bisection lives in the submitting shell
//! (an SSH logout loses nothing). It gets an ID at once, `detached/ID.json` in the store;
//! the driver writes its step lines to the log the record names, and when it ends it
//! writes the finished bisection's record ID (or its error) into the same file.
//! `repro show ID` and `repro log` read them.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use crate::foundation::keys;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::records::{self, DetachedRecord};
use crate::foundation::store::{self, Store, StoreError};

use super::{SlurmError, accounting, site};

/// The store directory of detached bisections.
pub const DIR: &str = "detached";

/// The hidden option the driver is run with: the detached bisection it reports to.
pub const ID_OPTION: &str = "--detached-id";

/// Submits `argv` (a `repro ... bisect ...` command line without `--detach`) as a batch
/// job in `cwd`, with the partition, account and QOS of `args` (the driver needs no GPU),
/// and records it. Returns its record.
pub fn submit(
    store: &Store,
    argv: &[OsString],
    cwd: &Path,
    args: &[String],
    export: &[String],
) -> Result<DetachedRecord, SlurmError> {
    let submitted_at = records::now();
    let id = keys::sha256_hex(
        format!(
            "{submitted_at} {} {:?}",
            std::process::id(),
            argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>()
        )
        .as_bytes(),
    );
    let log = store.root().join(DIR).join(format!("{id}.log"));
    // The store is made one (marker, lock, .gitignore) before its `detached/` directory
    // exists: a bare directory holding only `detached/` would not be recognised as a store.
    let mkdir_failed = |e: String| SlurmError::Unreachable {
        source: ProcessError::Io {
            argv: format!("mkdir {}", store.root().join(DIR).display()),
            source: std::io::Error::other(e),
        },
    };
    let lock = store
        .lock_shared()
        .map_err(|e| mkdir_failed(e.to_string()))?;
    store
        .real_dir(&store.root().join(DIR))
        .map_err(|e| mkdir_failed(e.to_string()))?;
    drop(lock);
    let mut command: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    command.push(ID_OPTION.into());
    command.push(id.clone());
    let wrap = command
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Cmd::new("sbatch");
    for k in site::inherited_job_vars() {
        cmd = cmd.env_remove(k);
    }
    let out = cmd
        .arg("--parsable")
        .arg(format!("--job-name=repro-driver-{}", &id[..12]))
        .arg(format!("--chdir={}", cwd.display()))
        .arg(format!("--output={}", log.display()))
        .arg(format!("--export={}", export.join(",")))
        .args(args.iter().filter(|a| {
            ["--partition=", "--account=", "--qos="]
                .iter()
                .any(|p| a.starts_with(p))
        }))
        .arg(format!("--wrap={wrap}"))
        .timeout(Duration::from_secs(60))
        .output()
        .map_err(|source| match source {
            ProcessError::NotFound { .. } => SlurmError::NoSrun,
            source => SlurmError::Unreachable { source },
        })?;
    let job: String = out
        .stdout_str()
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    if !out.status.success() || job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SlurmError::Refused {
            options: "sbatch (the detached driver)".into(),
            reason: out.stderr_str().trim().replace('\n', "; "),
            partitions: Vec::new(),
            gres: Vec::new(),
        });
    }
    let rec = DetachedRecord {
        schema: records::SCHEMA,
        id,
        job,
        submitted_at,
        command,
        log: log.display().to_string(),
        record: None,
        exit: None,
        error: None,
    };
    write(store, &rec).map_err(|e| SlurmError::Unreachable {
        source: ProcessError::Io {
            argv: format!("write {}", store.root().join(DIR).display()),
            source: std::io::Error::other(e.to_string()),
        },
    })?;
    Ok(rec)
}

/// Writes (or rewrites) a detached bisection's record.
pub fn write(store: &Store, rec: &DetachedRecord) -> Result<(), StoreError> {
    let v = serde_json::to_value(rec).expect("a detached record serialises");
    store.put_record(DIR, &rec.id, &v)
}

/// Reads one, by its full ID.
pub fn read(store: &Store, id: &str) -> Option<DetachedRecord> {
    let mut v = store.get_record(DIR, id).ok()??;
    if let Some(o) = v.as_object_mut() {
        o.remove(store::SEAL);
    }
    serde_json::from_value(v).ok()
}

/// Every detached bisection of the store, newest first.
pub fn list(store: &Store) -> Vec<DetachedRecord> {
    let Ok(dir) = std::fs::read_dir(store.root().join(DIR)) else {
        return Vec::new();
    };
    let mut v: Vec<DetachedRecord> = dir
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let id = name.strip_suffix(".json")?;
            (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| read(store, id))?
        })
        .collect();
    v.sort_by(|a, b| b.submitted_at.cmp(&a.submitted_at));
    v
}

/// The detached bisection whose ID starts with `prefix` (at least 4 characters), if
/// exactly one does.
pub fn find(store: &Store, prefix: &str) -> Option<DetachedRecord> {
    if prefix.len() < 4 {
        return None;
    }
    let p = prefix.to_lowercase();
    let mut found: Vec<DetachedRecord> = list(store)
        .into_iter()
        .filter(|r| r.id.starts_with(&p))
        .collect();
    (found.len() == 1).then(|| found.remove(0))
}

/// The driver job's state now (`PENDING`, `RUNNING`, `COMPLETED`, ...), or `unknown`.
pub fn state(rec: &DetachedRecord) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    accounting::facts(&rec.job, deadline).map_or_else(|| "unknown".into(), |f| f.state)
}

/// The step lines the driver has logged so far (bounded: the last 200).
pub fn progress(rec: &DetachedRecord) -> Vec<String> {
    let text = crate::foundation::fsutil::read_bounded(Path::new(&rec.log), 8 << 20)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<String> = text
        .lines()
        .filter(|l| {
            let w = l.trim_start();
            l.starts_with("  ")
                && w.len() > 13
                && w.as_bytes()[..12].iter().all(u8::is_ascii_hexdigit)
                && w.as_bytes()[12] == b' '
        })
        .map(crate::foundation::output::printable)
        .collect();
    lines[lines.len().saturating_sub(200)..].to_vec()
}

/// The driver's last log lines (its error, if it ended with one).
pub fn log_tail(rec: &DetachedRecord, n: usize) -> Vec<String> {
    let text = crate::foundation::fsutil::read_bounded(Path::new(&rec.log), 8 << 20)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<String> = text
        .lines()
        .map(crate::foundation::output::printable)
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Records how the driver ended: the finished bisection's ID, or its error.
pub fn finish(
    store: &Store,
    id: &str,
    record: Option<String>,
    exit: u8,
    error: Option<String>,
) -> Result<(), StoreError> {
    let Some(mut rec) = read(store, id) else {
        return Ok(());
    };
    rec.record = record;
    rec.exit = Some(exit);
    rec.error = error;
    write(store, &rec)
}
