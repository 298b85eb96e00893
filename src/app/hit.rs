//! `repro build` cache hits answered from a stamp, before the command line is parsed.
//!
//! A warm hit re-reads repro.toml, the recipe and every source, hashes them into the build
//! key, and reads the record and the artifacts: about 1.5 ms of work in a process whose
//! start costs about as much. A hit that finds every input as it was is written down as a
//! stamp: the outcomes it printed, and the stat data of every path its answer depended on
//! ([`crate::foundation::stamp`]). The same command in the same place then checks those
//! paths' stat data, re-hashes the artifacts, and prints the same outcomes with its own
//! duration. Anything else takes the whole path, which writes the stamp again.
//!
//! A stamp is named by everything else a hit's answer can depend on: the repro binary
//! (its version and file), the user, the working directory, the whole command line, the
//! whole environment, and whether stdout and stderr are terminals (colour). Only a command
//! whose every recipe was a clean hit gets one: no `--force`, `--explain`, `--nix` or
//! internal flag, no repairs, no failure, no record whose dirty state a hit re-checks, and
//! only NVRTC and nvcc recipes whose compiler is found from files (not by running the
//! machine's nvcc). Stamps live in `$XDG_CACHE_HOME/repro/hits/`, at most [`MAX_STAMPS`].

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use crate::app::context::Globals;
use crate::engines::build::Outcome;
use crate::foundation::stamp::{self, Noted};

/// The schema of a stamp file.
const SCHEMA: u32 = 1;
/// The largest stamp file read.
const MAX_BYTES: u64 = 1 << 20;
/// The largest artifact re-hashed (the store's own bound on an object).
const MAX_BLOB: u64 = crate::foundation::store::MAX_OBJECT_BYTES;
/// How many stamps the cache keeps; the oldest go first.
pub const MAX_STAMPS: usize = 256;

/// A hit, written down.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Stamp {
    schema: u32,
    /// What the answer depended on.
    noted: Noted,
    /// How the outcomes were shown (`--json`, `-q`, `-v`).
    json: bool,
    quiet: bool,
    verbose: u8,
    /// The outcomes, as the whole path printed them.
    outcomes: Vec<Outcome>,
}

/// The command line and when this process started, for the stamp the command may write.
static BEGUN: OnceLock<(Vec<OsString>, SystemTime)> = OnceLock::new();

/// Answers a `repro build` from its stamp, if it has one that still holds: the options to
/// show them with, and the outcomes (with this answer's duration) to show.
pub fn answer(argv: &[OsString]) -> Option<(Globals, Vec<Outcome>)> {
    let start = Instant::now();
    if !may_build(argv) {
        return None;
    }
    let path = stamp_path(argv)?;
    let bytes = crate::foundation::fsutil::read_regular(&path, MAX_BYTES).ok()?;
    let stamp: Stamp = serde_json::from_slice(&bytes).ok()?;
    if stamp.schema != SCHEMA || stamp.noted.check().is_err() {
        return None;
    }
    // The artifacts are re-hashed, as the whole path re-hashes them.
    for b in &stamp.noted.blobs {
        let bytes = crate::foundation::fsutil::read_regular(&b.path, MAX_BLOB).ok()?;
        if crate::foundation::keys::sha256_hex(&bytes) != b.sha256 {
            return None;
        }
    }
    let g = Globals::new(
        std::env::current_dir().ok()?,
        stamp.json,
        stamp.quiet,
        stamp.verbose,
        None,
    );
    let mut outcomes = stamp.outcomes;
    for o in &mut outcomes {
        o.duration_ms = start.elapsed().as_secs_f64() * 1e3;
    }
    Some((g, outcomes))
}

/// Starts noting what a build's answer depends on, where the command may be a build.
pub fn begin(argv: &[OsString], started: SystemTime) {
    if may_build(argv) {
        let _ = BEGUN.set((argv.to_vec(), started));
        stamp::start();
    }
}

/// Writes the stamp of a command that was all clean hits (the caller judged that), unless
/// something it read cannot be trusted by its stat data. Says why not with `-vv`.
pub fn keep(g: &Globals, outcomes: &[Outcome]) {
    let Some((argv, started)) = BEGUN.get() else {
        return;
    };
    let written = stamp::finish(*started)
        .map_err(|e| e.to_string())
        .and_then(|noted| {
            let path = stamp_path(argv).ok_or("no cache directory")?;
            let stamp = Stamp {
                schema: SCHEMA,
                noted,
                json: g.json,
                quiet: g.quiet,
                verbose: g.verbose,
                outcomes: outcomes.to_vec(),
            };
            let text = serde_json::to_vec(&stamp).map_err(|e| e.to_string())?;
            if text.len() as u64 > MAX_BYTES {
                return Err("too large".into());
            }
            // The stamps name the user's files: a directory only its owner can read.
            if let Some(dir) = path.parent() {
                use std::os::unix::fs::DirBuilderExt;
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir);
            }
            crate::foundation::fsutil::write_atomic(&path, &text, true)
                .map_err(|e| e.to_string())?;
            if let Some(dir) = path.parent() {
                prune(dir);
            }
            Ok(())
        });
    if g.verbose > 1 {
        match written {
            Ok(()) => say!(
                "stamp: written; the same command answers from it while its inputs stay as they are"
            ),
            Err(why) => say!("stamp: none ({why})"),
        }
    }
}

/// Stops noting without a stamp (the command was not all clean hits); says so with `-vv`.
pub fn drop_stamp(g: &Globals) {
    let _ = stamp::finish(SystemTime::UNIX_EPOCH);
    if g.verbose > 1 {
        say!("stamp: none (only a command whose every recipe was a clean cache hit gets one)");
    }
}

/// Whether the command line can be a `repro build` (clap has not parsed it yet).
fn may_build(argv: &[OsString]) -> bool {
    argv.iter().skip(1).any(|a| a == "build")
}

/// Where the stamp of this command line, here and now, lives (worked out once a process:
/// the answer looks for it, and the whole path writes it).
fn stamp_path(argv: &[OsString]) -> Option<PathBuf> {
    static PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| stamp_path_of(argv)).clone()
}

fn stamp_path_of(argv: &[OsString]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    // Each part with its length: no two command lines or environments run together alike.
    let mut all = Vec::new();
    let mut part = |b: &[u8]| {
        all.extend_from_slice(&(b.len() as u64).to_le_bytes());
        all.extend_from_slice(b);
    };
    part(b"repro build hit");
    part(crate::foundation::records::VERSION.as_bytes());
    let exe = std::env::current_exe().ok()?;
    let m = std::fs::metadata(&exe).ok()?;
    part(exe.as_os_str().as_bytes());
    for n in [m.dev(), m.ino(), m.size()] {
        part(&n.to_le_bytes());
    }
    for n in [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()] {
        part(&n.to_le_bytes());
    }
    // SAFETY: getuid and isatty only read this process's state.
    let (uid, out, err) = unsafe { (libc::getuid(), libc::isatty(1), libc::isatty(2)) };
    part(&uid.to_le_bytes());
    part(&[u8::from(out == 1), u8::from(err == 1)]);
    part(std::env::current_dir().ok()?.as_os_str().as_bytes());
    part(&(argv.len() as u64).to_le_bytes());
    for a in argv {
        part(a.as_bytes());
    }
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    env.sort();
    part(&(env.len() as u64).to_le_bytes());
    for (k, v) in &env {
        part(k.as_bytes());
        part(v.as_bytes());
    }
    let key = crate::foundation::keys::sha256_hex(&all);
    Some(
        crate::foundation::fsutil::cache_dir()?
            .join("hits")
            .join(format!("{key}.json")),
    )
}

/// Keeps the newest [`MAX_STAMPS`] stamps.
fn prune(dir: &std::path::Path) {
    let mut stamps: Vec<(SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if stamps.len() <= MAX_STAMPS {
        return;
    }
    stamps.sort();
    for (_, p) in &stamps[..stamps.len() - MAX_STAMPS] {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_fixture_still_loads() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hit-stamp/v1.json"
        );
        let stamp: Stamp = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(stamp.schema, SCHEMA);
        assert_eq!(stamp.outcomes[0].recipe, "vector_add");
        assert!(stamp.outcomes[0].cached);
        assert!(!stamp.noted.seen.is_empty() && !stamp.noted.blobs.is_empty());
    }
}
