//! Replaying a recorded result or build: re-create its tree (from the repository's object
//! database, or from a bundle), check that the recipe and sources are exactly those the
//! build record hashed, rebuild from scratch and compare the artifacts byte for byte,
//! compare the live environment with the recorded one, and, where a GPU is here and the
//! record has samples, re-time the kernel and compare the samples with rank tests.
//!
//! [`replay`] takes a typed [`Request`] and returns a typed [`Replay`] report; the app
//! layer (`app/replay.rs`) parses the arguments, prints the report and exits with
//! [`Verdict::exit_code`]. Nothing from a bundle is used before it is verified against its
//! manifest and each record is validated, and a bundle's command recipe runs only with
//! explicit consent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::engines::bench;
use crate::engines::build::{self, BuildError, Options};
use crate::engines::bundle::{self, BundleError, Checked};
use crate::engines::fingerprint::{self, Context, Demand, Fingerprint};
use crate::foundation::archive::ArchiveError;
use crate::foundation::config::ConfigError;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::git::{self, GitError};
use crate::foundation::keys;
use crate::foundation::output::sanitize;
use crate::foundation::recipe::{self, RecipeError};
use crate::foundation::records::{self, BuildRecord, ResultRecord};
use crate::foundation::store::{Store, StoreError};

/// What to replay, and from where.
pub struct Request<'a> {
    /// A result ID or a build key, or a unique prefix of at least 4 hex digits.
    pub id: &'a str,
    /// Take the records, sources and artifacts from this bundle (an absolute path)
    /// instead of the store and the repository.
    pub bundle: Option<&'a Path>,
    /// The directory the command runs in: the repository is found from it.
    pub cwd: &'a Path,
    /// The project's store (records when there is no bundle).
    pub store: &'a Store,
    /// The relative change in timing that counts as different.
    pub threshold: f64,
    /// Whether a bundle's `kind = "command"` recipe may run its command.
    pub allow_commands: bool,
    /// No progress bar.
    pub quiet: bool,
    /// `--python`: the interpreter of torch-extension rebuilds and Python calls.
    pub python: Option<&'a Path>,
}

/// Whether the replayed record is a result or a build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A result record (a benchmark's).
    Result,
    /// A build record.
    Build,
}

impl RecordKind {
    /// The word used in output: `result` or `build`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Result => "result",
            RecordKind::Build => "build",
        }
    }
}

/// One recorded output compared with its rebuild.
#[derive(Clone, Debug, PartialEq)]
pub struct ArtifactCheck {
    /// The output's name (`cubin`, `ptx`, …).
    pub output: String,
    /// Its recorded sha256.
    pub recorded: String,
    /// The rebuild's sha256, if the rebuild produced it.
    pub rebuilt: Option<String>,
}

impl ArtifactCheck {
    /// Whether the rebuild is byte-identical.
    pub fn identical(&self) -> bool {
        self.rebuilt.as_deref() == Some(self.recorded.as_str())
    }
}

/// The lockfile rule a field of the environment broke.
#[derive(Clone, Debug, PartialEq)]
pub struct LockRule {
    /// The lockfile's name.
    pub lockfile: String,
    /// What to do about it.
    pub hint: Option<String>,
}

/// A field of the live environment that differs from the recorded one.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvDiff {
    /// The fingerprint key.
    pub field: String,
    /// What was recorded (or what the lockfile expects).
    pub recorded: Value,
    /// What is here.
    pub live: Value,
    /// The lockfile whose policy was applied, when one was.
    pub rule: Option<LockRule>,
}

/// How the re-run's timing compares with the recorded samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingVerdict {
    /// Within the threshold.
    Same,
    /// Significantly slower, by more than the threshold.
    Slower,
    /// Significantly faster, by more than the threshold.
    Faster,
    /// Neither clearly the same nor clearly different.
    Inconclusive,
}

impl TimingVerdict {
    /// The word used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingVerdict::Same => "same",
            TimingVerdict::Slower => "slower",
            TimingVerdict::Faster => "faster",
            TimingVerdict::Inconclusive => "inconclusive",
        }
    }

    /// The verdict of a comparison (ratio of medians with its confidence interval, and the
    /// rank test's p) against a relative `threshold`. With thousands of samples a 0.05%
    /// drift is "significant"; a replay differs only when the change is also larger than
    /// the threshold.
    pub fn judge(p: f64, ratio: f64, ci: (f64, f64), threshold: f64) -> Self {
        let (lo, hi) = ci;
        if p <= 0.01 && (lo > 1.0 + threshold || hi < 1.0 - threshold) {
            if ratio > 1.0 {
                TimingVerdict::Slower
            } else {
                TimingVerdict::Faster
            }
        } else if lo >= 1.0 - threshold && hi <= 1.0 + threshold {
            TimingVerdict::Same
        } else {
            TimingVerdict::Inconclusive
        }
    }
}

/// The re-run's timing against the recorded samples.
#[derive(Clone, Debug, PartialEq)]
pub struct TimingCheck {
    /// Median of the re-run over median of the record.
    pub ratio: f64,
    /// The ratio's confidence interval.
    pub ratio_ci: (f64, f64),
    /// The rank test's p-value.
    pub p: f64,
    /// What that means.
    pub verdict: TimingVerdict,
    /// The threshold it was judged against.
    pub threshold: f64,
    /// How many samples the re-run took.
    pub samples: usize,
}

/// The replay's overall verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything compared is the same.
    Reproduced,
    /// Nothing could be compared (the recorded build failed, or recorded no output).
    NothingToCompare,
    /// A rebuilt artifact is not byte-identical.
    ArtifactDiffers,
    /// The live environment differs in a must-match field.
    EnvironmentMismatch,
    /// The timing differs from the recorded samples.
    TimingDiffers,
    /// The build was replayed but the timing could not be (no GPU, no usable samples).
    CannotRunHere,
}

impl Verdict {
    /// The words used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::NothingToCompare => "nothing to compare",
            Verdict::ArtifactDiffers => "artifact differs",
            Verdict::EnvironmentMismatch => "environment mismatch",
            Verdict::TimingDiffers => "timing differs",
            Verdict::CannotRunHere => "cannot run here",
        }
    }

    /// The exit code `repro replay` ends with.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Reproduced => exit::OK,
            Verdict::NothingToCompare | Verdict::ArtifactDiffers => exit::MISMATCH,
            Verdict::EnvironmentMismatch => exit::REPLAY_ENVIRONMENT,
            Verdict::TimingDiffers => exit::REPLAY_TIMING,
            Verdict::CannotRunHere => exit::ENVIRONMENT,
        }
    }

    /// The verdict from what was compared, the worst first: an artifact that differs
    /// outweighs an environment that differs, which outweighs timing.
    pub fn from_checks(
        artifacts: &[ArtifactCheck],
        rebuilt_identical: bool,
        environment: &[EnvDiff],
        timing: Option<&TimingCheck>,
        note: Option<&str>,
    ) -> Self {
        if artifacts.is_empty() && timing.is_none() {
            // Saying "reproduced" would claim what was not checked.
            Verdict::NothingToCompare
        } else if !rebuilt_identical {
            Verdict::ArtifactDiffers
        } else if !environment.is_empty() {
            Verdict::EnvironmentMismatch
        } else if timing.is_some_and(|t| t.verdict != TimingVerdict::Same) {
            Verdict::TimingDiffers
        } else if note.is_some() {
            Verdict::CannotRunHere
        } else {
            Verdict::Reproduced
        }
    }
}

/// What a replay found.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The record's full ID.
    pub id: String,
    /// Whether it is a result or a build.
    pub kind: RecordKind,
    /// The recorded commit.
    pub commit: String,
    /// The recipe's name.
    pub recipe: String,
    /// The overall verdict.
    pub verdict: Verdict,
    /// Each recorded output against its rebuild.
    pub artifacts: Vec<ArtifactCheck>,
    /// Why the rebuild's inputs differ from the recorded ones, when the artifact differs.
    pub explain: Vec<String>,
    /// The environment's differences.
    pub environment: Vec<EnvDiff>,
    /// The timing comparison, when the kernel was re-timed.
    pub timing: Option<TimingCheck>,
    /// Why something could not be checked here.
    pub note: Option<String>,
}

/// Why a replay could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The bundle could not be read to verify it.
    #[error("failed to verify {}", .path.display())]
    Verify {
        /// The bundle.
        path: PathBuf,
        /// Why.
        #[source]
        source: ArchiveError,
    },
    /// The bundle's files do not match its manifest.
    #[error("{} does not match its MANIFEST ({named})", .path.display())]
    NotAsManifest {
        /// The bundle.
        path: PathBuf,
        /// The first few files that differ, are missing or are extra.
        named: String,
    },
    /// The bundle could not be unpacked.
    #[error("failed to unpack {}", .path.display())]
    Unpack {
        /// The bundle.
        path: PathBuf,
        /// Why.
        #[source]
        source: ArchiveError,
    },
    /// A file could not be read or written.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A record file of the bundle is not JSON.
    #[error("{file} in the bundle is not a valid record: {reason}")]
    RecordNotJson {
        /// `results/ID.json` or `builds/KEY.json`.
        file: String,
        /// The parser's message.
        reason: String,
    },
    /// No record has the ID.
    #[error("no result or build with ID {id}")]
    NoSuchRecord {
        /// The ID as given.
        id: String,
    },
    /// The ID is shorter than 4 hex digits.
    #[error("`{id}` is too short: give at least 4 hex digits")]
    TooShort {
        /// The ID as given.
        id: String,
    },
    /// Several records match the prefix.
    #[error("{id} is ambiguous: {count} records match")]
    Ambiguous {
        /// The ID as given.
        id: String,
        /// How many match.
        count: usize,
    },
    /// The record names no recipe (a command bench).
    #[error("this record has no recipe to rebuild (a command bench)")]
    NoRecipe,
    /// The record names no commit.
    #[error("this record names no commit, so its tree cannot be re-created")]
    NoCommit,
    /// The bundle lacks the tree of the record's commit.
    #[error("the bundle holds no sources for commit {commit}")]
    NoSourcesInBundle {
        /// The commit.
        commit: String,
    },
    /// The repository lacks the record's commit.
    #[error("commit {commit} is not in this repository")]
    CommitNotHere {
        /// The commit.
        commit: String,
    },
    /// The commit's tree could not be written out.
    #[error("cannot re-create commit {commit}: cannot read {path}: {reason}")]
    Materialize {
        /// The commit.
        commit: String,
        /// The file that could not be written.
        path: String,
        /// Why.
        reason: String,
    },
    /// The recipe could not be loaded from the re-created tree.
    #[error("failed to load recipe `{name}` at commit {commit}")]
    Recipe {
        /// The recipe.
        name: String,
        /// The commit.
        commit: String,
        /// Why.
        #[source]
        source: Box<RecipeError>,
    },
    /// A result from a bundle without its build record: its sources cannot be checked.
    #[error("the bundle holds no build record for this result, so its sources cannot be checked")]
    NoBuildRecord,
    /// The recipe or source files do not hash to what the build record says.
    #[error("the sources do not match build record {build}: {} differ{}", .differs.join(", "), if *.count == 1 { "s" } else { "" })]
    SourcesDiffer {
        /// The build record's short key.
        build: String,
        /// The first few things that differ.
        differs: Vec<String>,
        /// How many differ.
        count: usize,
    },
    /// A bundle's recipe runs a command and no consent was given.
    #[error("recipe `{recipe}` of this bundle runs a command: {argv}")]
    CommandNeedsConsent {
        /// The recipe.
        recipe: String,
        /// Its command line (sanitised).
        argv: String,
    },
    /// The rebuild failed to run.
    #[error("failed to rebuild recipe `{name}`")]
    Rebuild {
        /// The recipe.
        name: String,
        /// Why.
        #[source]
        source: Box<BuildError>,
    },
    /// A result lacks what re-timing needs.
    #[error("result {id} records no {what}, so it cannot be re-timed")]
    CannotRetime {
        /// The result's short ID.
        id: String,
        /// `settings`, `launch` or `arguments`.
        what: &'static str,
    },
    /// A result's recorded launch or arguments are not what its recipe gives at its
    /// recorded parameters.
    #[error("result {id}: its `{what}` {detail}")]
    ClaimDiffers {
        /// The result's short ID.
        id: String,
        /// `params`, `launch` or `args`.
        what: String,
        /// How.
        detail: String,
    },
    /// A result's recorded timing settings are not ones a job may be timed with.
    #[error("result {id} records timing settings that do not read: {source}")]
    BadTimingSettings {
        /// The result's short ID.
        id: String,
        /// Which and why.
        #[source]
        source: crate::engines::gpurun::TimingSettingError,
    },
    /// The benchmark child could not be run.
    #[error(transparent)]
    Child(#[from] bench::ChildError),
    /// A record failed its checks, or records uncommitted changes.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The repository could not be read.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The tree's `repro.toml` is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The sources could not be hashed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The scratch store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Diagnose for ReplayError {
    fn exit_code(&self) -> u8 {
        match self {
            ReplayError::Verify { source, .. } | ReplayError::Unpack { source, .. } => {
                source.exit_code()
            }
            ReplayError::Recipe { source, .. } => source.exit_code(),
            ReplayError::Rebuild { source, .. } => source.exit_code(),
            ReplayError::Build(source) => source.exit_code(),
            ReplayError::Bundle(e) => e.exit_code(),
            ReplayError::Git(e) => e.exit_code(),
            ReplayError::Config(e) => e.exit_code(),
            ReplayError::Store(e) => e.exit_code(),
            ReplayError::NotAsManifest { .. }
            | ReplayError::RecordNotJson { .. }
            | ReplayError::NoBuildRecord
            | ReplayError::SourcesDiffer { .. }
            | ReplayError::CannotRetime { .. }
            | ReplayError::ClaimDiffers { .. }
            | ReplayError::BadTimingSettings { .. } => exit::MISMATCH,
            ReplayError::NoSuchRecord { .. }
            | ReplayError::TooShort { .. }
            | ReplayError::Ambiguous { .. }
            | ReplayError::NoRecipe
            | ReplayError::NoCommit
            | ReplayError::NoSourcesInBundle { .. }
            | ReplayError::CommitNotHere { .. }
            | ReplayError::CommandNeedsConsent { .. } => exit::USAGE,
            ReplayError::Io { .. } | ReplayError::Materialize { .. } => exit::IO,
            ReplayError::Child(_) => exit::ENVIRONMENT,
        }
    }

    fn hint(&self) -> Option<String> {
        let s = |h: &str| Some(h.to_string());
        match self {
            ReplayError::Verify { source, .. } | ReplayError::Unpack { source, .. } => {
                source.hint()
            }
            ReplayError::Recipe { source, .. } => source.hint(),
            ReplayError::Rebuild { source, .. } => source.hint(),
            ReplayError::Build(source) => source.hint(),
            ReplayError::Bundle(e) => e.hint(),
            ReplayError::Git(e) => e.hint(),
            ReplayError::Config(e) => e.hint(),
            ReplayError::Store(e) => e.hint(),
            ReplayError::NotAsManifest { .. } => {
                s("`repro bundle verify FILE` lists every difference")
            }
            ReplayError::RecordNotJson { .. } => {
                s("the bundle was edited or damaged; nothing was built or run")
            }
            ReplayError::NoSuchRecord { .. } => {
                s("`repro log` lists results; `repro bundle show FILE` lists a bundle's")
            }
            ReplayError::NoRecipe => s("re-run the command with `repro bench --command`"),
            ReplayError::CommitNotHere { .. } => {
                s("fetch it, or replay from a bundle with --bundle FILE")
            }
            ReplayError::NoBuildRecord => {
                s("nothing was built or run; ask for a bundle made by `repro bundle create`")
            }
            ReplayError::SourcesDiffer { .. } => {
                s("the bundle or record was edited; nothing was built or run")
            }
            ReplayError::CommandNeedsConsent { .. } => {
                s("read it; if you trust it, run again with --allow-commands")
            }
            ReplayError::CannotRetime { .. } => s(
                "a recipe bench records its settings, launch and arguments; this record was edited",
            ),
            ReplayError::BadTimingSettings { .. } => s(
                "repro records only the REPRO_TIMING_* settings it checked; this record was edited",
            ),
            ReplayError::ClaimDiffers { .. } => s(
                "the record was edited: the figures it holds are not of the experiment it names; nothing was run",
            ),
            ReplayError::TooShort { .. }
            | ReplayError::Ambiguous { .. }
            | ReplayError::NoCommit
            | ReplayError::NoSourcesInBundle { .. }
            | ReplayError::Io { .. }
            | ReplayError::Materialize { .. }
            | ReplayError::Child(_) => None,
        }
    }
}

/// A raw record with its ID and kind, not yet validated.
type RawRecord = (String, RecordKind, Value);

/// Where the records and sources come from.
struct Origin {
    records: Vec<RawRecord>,
    /// The bundle's `source/` directory (one tree per commit); `None` for the repository.
    sources: Option<PathBuf>,
    _unpacked: Option<tempfile::TempDir>,
}

fn tempdir() -> Result<tempfile::TempDir, ReplayError> {
    tempfile::tempdir().map_err(|source| ReplayError::Io {
        what: "failed to create a temporary directory".into(),
        source,
    })
}

fn from_bundle(path: &Path, quiet: bool) -> Result<Origin, ReplayError> {
    // Nothing from a bundle is trusted before every file matches its manifest.
    // One streaming pass: every member hashed as it is unpacked into a private directory,
    // which nothing reads before every file matches the manifest.
    let bar = crate::foundation::output::progress_bytes(quiet, 0, "verifying the bundle");
    let dir = tempdir()?;
    let (v, _) = crate::foundation::archive::extract_verified(path, dir.path(), &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .map_err(|source| match source {
        // A write that failed is this machine's trouble; anything else is the bundle's.
        crate::foundation::archive::ArchiveError::Write { .. } => ReplayError::Unpack {
            path: path.to_path_buf(),
            source,
        },
        source => ReplayError::Verify {
            path: path.to_path_buf(),
            source,
        },
    })?;
    bar.finish_and_clear();
    if !v.ok() {
        let named: Vec<&str> = v
            .differs
            .iter()
            .chain(&v.missing)
            .chain(&v.extra)
            .take(5)
            .map(String::as_str)
            .collect();
        return Err(ReplayError::NotAsManifest {
            path: path.to_path_buf(),
            named: named.join(", "),
        });
    }
    let mut records = Vec::new();
    for (sub, kind) in [
        ("results", RecordKind::Result),
        ("builds", RecordKind::Build),
    ] {
        for e in std::fs::read_dir(dir.path().join(sub))
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = e.file_name().to_string_lossy().into_owned();
            let name = file.strip_suffix(".json").unwrap_or(&file).to_string();
            let bytes = std::fs::read(e.path()).map_err(|source| ReplayError::Io {
                what: format!("cannot read {sub}/{} in the bundle", sanitize(&file)),
                source,
            })?;
            let v: Value =
                serde_json::from_slice(&bytes).map_err(|err| ReplayError::RecordNotJson {
                    file: format!("{sub}/{}", sanitize(&file)),
                    reason: err.to_string(),
                })?;
            // Every record is checked before any is used: a path, key or commit that is not
            // what it claims to be stops the replay here.
            bundle::validate_record(kind.as_str(), &name, &v)?;
            records.push((name, kind, v));
        }
    }
    // Profiles are not replayed, but a bundle is checked whole: a forged one stops it too.
    for e in std::fs::read_dir(dir.path().join("profiles"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let file = e.file_name().to_string_lossy().into_owned();
        let name = file.strip_suffix(".json").unwrap_or(&file).to_string();
        let v: Value = std::fs::read(e.path())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| ReplayError::RecordNotJson {
                file: format!("profiles/{}", sanitize(&file)),
                reason: "unreadable".into(),
            })?;
        bundle::validate_profile(&name, &v)?;
    }
    Ok(Origin {
        records,
        sources: Some(dir.path().join("source")),
        _unpacked: Some(dir),
    })
}

fn from_store(store: &Store) -> Origin {
    // Raw records: the one asked for is checked (as strictly as a bundle's) once chosen.
    let mut records = Vec::new();
    for (dir, kind) in [
        (records::RESULTS, RecordKind::Result),
        (records::BUILDS, RecordKind::Build),
    ] {
        records.extend(
            store
                .records(dir)
                .into_iter()
                .filter_map(|(k, _, r)| r.ok().map(|r| (k, kind, r))),
        );
    }
    Origin {
        records,
        sources: None,
        _unpacked: None,
    }
}

/// The one record that `id` (a prefix of at least 4 hex digits) names.
fn choose<'o>(records: &'o [RawRecord], id: &str) -> Result<&'o RawRecord, ReplayError> {
    let prefix = id.to_lowercase();
    let matches: Vec<&RawRecord> = records
        .iter()
        .filter(|(k, _, _)| k.starts_with(&prefix))
        .collect();
    match matches.as_slice() {
        [one] if prefix.len() >= 4 => Ok(one),
        [] => Err(ReplayError::NoSuchRecord { id: id.to_string() }),
        [_] => Err(ReplayError::TooShort { id: id.to_string() }),
        many => Err(ReplayError::Ambiguous {
            id: id.to_string(),
            count: many.len(),
        }),
    }
}

/// The recipe a record was built with: the text its build record keeps (`recipe-text` at
/// `recipe-path`, both validated), else the recipe file of the recorded tree.
fn replay_recipe(
    root: &Path,
    name: &str,
    build_rec: Option<&BuildRecord>,
) -> Result<recipe::Recipe, RecipeError> {
    let kept = build_rec.and_then(|b| {
        b.recipe_text
            .as_deref()
            .zip(Some(b.recipe_path.as_str()).filter(|p| keys::is_relative_path(p)))
    });
    match kept {
        Some((text, path)) => recipe::parse(root, path, text),
        None => recipe::load(root, name),
    }
}

/// Requires the tree's recipe and source files to hash to what the build record says
/// (`inputs.build` and `inputs.files`), computed without compiling or running anything.
/// From a bundle, a result without its build record cannot be checked and is refused.
fn check_sources(
    root: &Path,
    r: &recipe::Recipe,
    build_rec: Option<&BuildRecord>,
    from_bundle: bool,
) -> Result<(), ReplayError> {
    let Some(b) = build_rec else {
        return if from_bundle {
            Err(ReplayError::NoBuildRecord)
        } else {
            Ok(())
        };
    };
    let here = build::source_inputs(root, r)?;
    let recorded = &b.inputs;
    let mut differs: Vec<String> = Vec::new();
    if here.build != recorded.build {
        differs.push(format!("recipe `{}`", r.name));
    }
    let (hf, rf) = (&here.files, &recorded.files);
    let names: BTreeSet<&String> = hf.keys().chain(rf.keys()).collect();
    for n in names {
        if hf.get(n) != rf.get(n) {
            differs.push(format!("file {}", sanitize(n)));
        }
    }
    if differs.is_empty() {
        return Ok(());
    }
    Err(ReplayError::SourcesDiffer {
        build: keys::short(&b.key).to_string(),
        count: differs.len(),
        differs: differs.into_iter().take(5).collect(),
    })
}

/// Checks the live machine with the rules of the recorded tree's lockfile whose `gpu.name`
/// accepts the recorded GPU. Returns false when there is no such lockfile.
fn lock_policy(
    root: &Path,
    recorded: &Fingerprint,
    live: &Fingerprint,
    diffs: &mut Vec<EnvDiff>,
    gpu_here: &mut bool,
) -> bool {
    use crate::engines::check::{self, Status};
    let gpu = recorded.lookup("gpu.name");
    let lock = crate::engines::lockfile::list(&root.join("lockfiles"))
        .into_iter()
        .filter_map(|p| crate::engines::lockfile::load(&p).ok())
        .find(|l| {
            l.rules.iter().any(|r| {
                r.key == "gpu.name"
                    && check::evaluate(&r.policy, crate::foundation::fields::Kind::Text, &gpu)
                        == Status::Ok
            })
        });
    let Some(lock) = lock else { return false };
    let report = check::check(&lock.rules, |k| live.lookup(k));
    for row in report.rows.iter().filter(|r| r.status.is_fatal()) {
        if (row.field.starts_with("gpu.") || row.field.starts_with("driver."))
            && row.status == Status::Missing
        {
            *gpu_here = false;
            continue;
        }
        diffs.push(EnvDiff {
            field: row.field.clone(),
            recorded: Value::from(row.expected.clone()),
            live: Value::from(row.actual.clone()),
            rule: Some(LockRule {
                lockfile: lock.name.clone(),
                hint: row.hint.clone(),
            }),
        });
    }
    true
}

/// The recorded result and the build record it names (from the same origin, else the
/// store), both validated; or the build record alone.
fn records_of(
    origin: &Origin,
    store: &Store,
    kind: RecordKind,
    id: &str,
    rec: &Value,
) -> Result<(Option<ResultRecord>, Option<BuildRecord>), ReplayError> {
    // Records from the store are checked as strictly as those from a bundle.
    Ok(match bundle::validate_record(kind.as_str(), id, rec)? {
        Checked::Build(b) => (None, Some(*b)),
        Checked::Result(r) => {
            let key = r.build_key.clone().unwrap_or_default();
            let raw = origin
                .records
                .iter()
                .find(|(k, kd, _)| *kd == RecordKind::Build && *k == key)
                .map(|(_, _, v)| v.clone())
                .or_else(|| store.get_record(records::BUILDS, &key).ok().flatten());
            let b = match raw {
                Some(v) => match bundle::validate_record("build", &key, &v)? {
                    Checked::Build(b) => Some(*b),
                    Checked::Result(_) => None,
                },
                None => None,
            };
            (Some(*r), b)
        }
    })
}

/// Runs a replay. `say` is told what happens that the user should know of before the
/// report (a command about to run, a toolchain being provisioned).
pub fn replay(req: &Request, say: &dyn Fn(&str)) -> Result<Replay, ReplayError> {
    let origin = match req.bundle {
        Some(b) => from_bundle(b, req.quiet)?,
        None => from_store(req.store),
    };
    let (id, kind, rec) = choose(&origin.records, req.id)?;
    let (id, kind) = (id.as_str(), *kind);
    let (result, build_rec) = records_of(&origin, req.store, kind, id, rec)?;
    let (recipe_name, commit) = name_and_commit(kind, id, result.as_ref(), build_rec.as_ref())?;
    // A build that failed made nothing to compare with: nothing is rebuilt or run.
    if build_rec
        .as_ref()
        .is_some_and(|b| b.status != records::BuildStatus::Ok)
    {
        return Ok(Replay {
            id: id.to_string(),
            kind,
            commit,
            recipe: recipe_name,
            verdict: Verdict::NothingToCompare,
            artifacts: Vec::new(),
            explain: Vec::new(),
            environment: Vec::new(),
            timing: None,
            note: Some("the recorded build failed: there is no artifact to compare".into()),
        });
    }
    // The timing settings the re-timing will use, refused now rather than after a rebuild.
    if let Some(r) = &result {
        recorded_timing(r, id)?;
    }

    // The tree: from the bundle, or materialised from the repository's object database.
    let checkout = tempdir()?;
    let root = tree(&origin, &commit, req, &checkout)?;

    // Before anything runs: the recipe and the source files must be exactly those the
    // build record hashed, and a command recipe from a bundle needs explicit consent.
    let r = replay_recipe(&root, &recipe_name, build_rec.as_ref()).map_err(|source| {
        ReplayError::Recipe {
            name: recipe_name.clone(),
            commit: commit.clone(),
            source: Box::new(source),
        }
    })?;
    check_sources(&root, &r, build_rec.as_ref(), origin.sources.is_some())?;
    // What a rebuild would run of the recipe's own choosing: a command, or a torch
    // extension (its free-form compiler options, its `setup.py`, and the import of the
    // module it builds all run a stranger's code). From a bundle, only with consent.
    consent(&r, origin.sources.is_some(), req, &recipe_name, say)?;

    // The toolchain: the rebuild below resolves it from the recorded tree's pins as every
    // command does, and installs a pinned one that is missing (unless REPRO_OFFLINE).
    let cfg = crate::foundation::config::load(&root)?;
    // The environment: by the policy of the recorded tree's lockfile for the recorded GPU
    // when there is one, else against the recorded fingerprint's must-match fields.
    let (environment, gpu_here) = environment_diffs(&root, result.as_ref(), req.python);

    // Rebuild from scratch (a fresh store: the compiler really runs) and compare bytes.
    let scratch = tempdir()?;
    let fresh = Store::at(scratch.path().join("store"));
    let opts = Options {
        // The recreated tree is scratch: no project is noted as using the toolchain.
        pins: Some(crate::engines::toolchain::Pins::of(&cfg.toolchain)),
        python: req.python.map(Path::to_path_buf),
        ..Options::default()
    };
    let rebuilt =
        build::build(&root, &fresh, &r, &opts).map_err(|source| ReplayError::Rebuild {
            name: recipe_name.clone(),
            source: Box::new(source),
        })?;
    let artifacts = artifact_checks(build_rec.as_ref(), result.as_ref(), &rebuilt);
    let identical = rebuilt.status == "ok" && artifacts.iter().all(ArtifactCheck::identical);
    let rebuilt_rec = fresh
        .get_record(records::BUILDS, &rebuilt.key)?
        .and_then(|v| BuildRecord::from_json(&v, &rebuilt.key).ok());
    // Which key inputs differ: why an artifact differs, and, where the bytes are the same,
    // what the record claims of its build that this rebuild did not match.
    let explain = match (&build_rec, rebuilt_rec) {
        (Some(old), Some(new)) if old.inputs != new.inputs => old.inputs.explain(&new.inputs),
        _ => Vec::new(),
    };
    // A recipe bench's launch and arguments are what its recipe gives at its parameters:
    // a record that says otherwise claims one experiment and holds the figures of another.
    if let Some(res) = result
        .as_ref()
        .filter(|res| res.python.is_none() && res.launch.is_some())
    {
        check_claim(res, id, &r, &rebuilt)?;
    }

    // Timing, where the record has samples and what they ran on is here.
    let (timing, note) = match result.as_ref().filter(|r| r.samples.len() >= 2) {
        Some(r) if identical => retime_any(r, id, &rebuilt, &root, req, gpu_here)?,
        Some(r) if r.python.is_none() && !gpu_here => (None, Some(NO_GPU.to_string())),
        _ => (None, None),
    };
    let verdict = Verdict::from_checks(
        &artifacts,
        identical,
        &environment,
        timing.as_ref(),
        note.as_deref(),
    );
    Ok(Replay {
        id: id.to_string(),
        kind,
        commit,
        recipe: recipe_name,
        verdict,
        artifacts,
        explain,
        environment,
        timing,
        note,
    })
}

/// The rebuilt module a recipe bench loads: its cubin, else its PTX.
fn rebuilt_module(rebuilt: &build::Outcome) -> String {
    rebuilt
        .outputs
        .get("cubin")
        .or(rebuilt.outputs.get("ptx"))
        .map(|o| o.path.clone())
        .unwrap_or_default()
}

/// A result's recorded parameters as expression values (those that are numbers).
fn params_of(r: &ResultRecord) -> BTreeMap<String, crate::foundation::expr::Value> {
    r.params
        .iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::Number(n) if n.is_i64() => crate::foundation::expr::Value::Int(n.as_i64()?),
                Value::Number(n) => crate::foundation::expr::Value::Float(n.as_f64()?),
                _ => return None,
            };
            Some((k.clone(), v))
        })
        .collect()
}

/// Requires a recipe bench's recorded launch and arguments to be what the recipe's `[run]`
/// gives at the recorded parameters, with the rebuilt module's kernel names.
fn check_claim(
    r: &ResultRecord,
    id: &str,
    recipe: &recipe::Recipe,
    rebuilt: &build::Outcome,
) -> Result<(), ReplayError> {
    let differs = |what: &str, detail: String| ReplayError::ClaimDiffers {
        id: keys::short(id).to_string(),
        what: what.to_string(),
        detail,
    };
    let params = params_of(r);
    if let Some(k) = r.params.keys().find(|k| !params.contains_key(*k)) {
        return Err(differs(
            "params",
            format!("`{}` is not a number", sanitize(k)),
        ));
    }
    if params.keys().ne(recipe.sections.params.keys()) {
        return Err(differs(
            "params",
            format!(
                "name {} where the recipe's [params] name {}",
                sanitize(&params.keys().cloned().collect::<Vec<_>>().join(", ")),
                recipe
                    .sections
                    .params
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let module = rebuilt_module(rebuilt);
    let settings = r.settings.clone().ok_or_else(|| {
        differs(
            "settings",
            "are missing, which a recipe bench records".into(),
        )
    })?;
    let point = bench::resolve_at(&recipe.sections, Path::new(&module), &settings, params)
        .map_err(|e| differs("params", format!("the recipe cannot run at them: {e}")))?;
    if r.launch.as_ref() != Some(&point.job.kernel) {
        return Err(differs(
            "launch",
            format!(
                "is {}, where the recipe gives {}",
                sanitize(&serde_json::to_string(&r.launch).unwrap_or_default()),
                serde_json::to_string(&point.job.kernel).unwrap_or_default()
            ),
        ));
    }
    if r.args.as_ref() != Some(&point.job.args) {
        return Err(differs(
            "args",
            "are not what the recipe gives at the recorded parameters".into(),
        ));
    }
    Ok(())
}

/// Each recorded output against the rebuilt one of the same name.
fn artifact_checks(
    build_rec: Option<&BuildRecord>,
    result: Option<&ResultRecord>,
    rebuilt: &build::Outcome,
) -> Vec<ArtifactCheck> {
    let recorded_outputs: Vec<(String, String)> = match build_rec {
        Some(b) => b
            .outputs
            .iter()
            .map(|(k, v)| (k.clone(), v.sha256.clone()))
            .collect(),
        // No build record: the result's digest of the module its bench loaded. It is held
        // to the rebuilt output with that digest, else to the one `repro bench` loads (the
        // cubin, else the PTX).
        None => result
            .and_then(|r| r.artifact.clone())
            .map(|a| {
                let name = rebuilt
                    .outputs
                    .iter()
                    .find(|(_, o)| o.sha256 == a)
                    .map(|(k, _)| k.clone())
                    .or_else(|| {
                        ["cubin", "ptx"]
                            .into_iter()
                            .find(|k| rebuilt.outputs.contains_key(*k))
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| "cubin".to_string());
                vec![(name, a)]
            })
            .unwrap_or_default(),
    };
    recorded_outputs
        .into_iter()
        .map(|(output, recorded)| ArtifactCheck {
            rebuilt: rebuilt.outputs.get(&output).map(|o| o.sha256.clone()),
            output,
            recorded,
        })
        .collect()
}

/// The record's recipe and commit; a record of a dirty tree cannot be replayed.
fn name_and_commit(
    kind: RecordKind,
    id: &str,
    result: Option<&ResultRecord>,
    build_rec: Option<&BuildRecord>,
) -> Result<(String, String), ReplayError> {
    let dirty = [
        result.and_then(|r| r.dirty.then(|| "unknown".to_string())),
        build_rec.and_then(|b| b.dirty.clone()),
    ];
    if let Some(digest) = dirty.into_iter().flatten().next() {
        return Err(BundleError::Dirty {
            what: format!("{} {}", kind.as_str(), keys::short(id)),
            digest: keys::short(&digest).to_string(),
        }
        .into());
    }
    let recipe_name = match (result, build_rec) {
        (Some(r), _) => r.recipe.clone(),
        (None, b) => b.map(|b| b.recipe.clone()),
    }
    .ok_or(ReplayError::NoRecipe)?;
    let commit = match (result, build_rec) {
        (Some(r), _) => r.commit.clone(),
        (None, b) => b.and_then(|b| b.commit.clone()),
    }
    .ok_or(ReplayError::NoCommit)?;

    Ok((recipe_name, commit))
}

/// The recorded commit's tree: from the bundle, or materialised from the repository's
/// object database into `checkout`.
fn tree(
    origin: &Origin,
    commit: &str,
    req: &Request,
    checkout: &tempfile::TempDir,
) -> Result<PathBuf, ReplayError> {
    let commit = commit.to_string();
    Ok(match &origin.sources {
        Some(src) => {
            // The commit comes from a record: only a commit ID ever becomes a path.
            let is_id = matches!(commit.len(), 40 | 64)
                && commit
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            let dir = src.join(&commit);
            if !is_id || !dir.is_dir() {
                return Err(ReplayError::NoSourcesInBundle { commit });
            }
            dir
        }
        None => {
            let repo = git::open(req.cwd)?;
            let oid = git2::Oid::from_str(&commit)
                .ok()
                .filter(|o| repo.find_commit(*o).is_ok())
                .ok_or_else(|| ReplayError::CommitNotHere {
                    commit: commit.clone(),
                })?;
            let files = git::CommitFiles::new(&repo, oid)?;
            files
                .materialize(checkout.path())
                .map_err(|e| ReplayError::Materialize {
                    commit: commit.clone(),
                    path: e.path().to_string(),
                    reason: e.to_string(),
                })?;
            checkout.path().to_path_buf()
        }
    })
}

/// What a rebuild would run of the recipe's own choosing: a command, or a torch extension
/// (its free-form compiler options, its `setup.py`, and the import of the module it builds
/// all run a stranger's code; so does a Python call's re-timing). From a bundle, only with
/// consent.
fn consent(
    r: &recipe::Recipe,
    from_bundle: bool,
    req: &Request,
    recipe_name: &str,
    say: &dyn Fn(&str),
) -> Result<(), ReplayError> {
    let runs = match &r.build {
        recipe::Build::Command(c) => Some(
            crate::foundation::process::Cmd::new(&c.argv[0])
                .args(&c.argv[1..])
                .display(),
        ),
        recipe::Build::TorchExtension(t) => Some(match &t.setup {
            Some(setup) => format!("python3 {setup} build_ext, then import {}", t.module),
            None => format!(
                "c++ {} {}, then import {}",
                t.options.join(" "),
                t.sources.join(" "),
                t.module
            ),
        }),
        _ => None,
    };
    if let Some(argv) = runs {
        if from_bundle && !req.allow_commands {
            return Err(ReplayError::CommandNeedsConsent {
                recipe: recipe_name.to_string(),
                argv: sanitize(&argv),
            });
        }
        say(&format!(
            "running the recipe's command: {}",
            sanitize(&argv)
        ));
    }
    Ok(())
}

/// How this machine differs from the recorded one: by the policy of the recorded tree's
/// lockfile for the recorded GPU when there is one, else by the recorded fingerprint's
/// must-match fields; and whether a GPU is here to re-time on.
fn environment_diffs(
    root: &Path,
    result: Option<&ResultRecord>,
    python: Option<&Path>,
) -> (Vec<EnvDiff>, bool) {
    let live = fingerprint::capture(
        &Context {
            cwd: root.to_path_buf(),
            fresh: false,
            python: python.map(Path::to_path_buf),
        },
        &Demand::all(),
    );
    let mut environment = Vec::new();
    let mut gpu_here = live.get("gpu.count").value().is_some();
    if let Some(fp) = result.and_then(|r| r.fingerprint.as_ref())
        && !lock_policy(root, fp, &live, &mut environment, &mut gpu_here)
    {
        let (was, now) = (bench::must_match(fp), bench::must_match(&live));
        for (k, v) in was.as_object().into_iter().flatten() {
            let n = &now[k];
            let unavailable = n.as_array().is_some_and(|a| a.iter().all(Value::is_null));
            if (k.starts_with("gpu.") || k.starts_with("driver.")) && unavailable {
                gpu_here = false;
                continue;
            }
            if v != n && !unavailable {
                environment.push(EnvDiff {
                    field: k.clone(),
                    recorded: v.clone(),
                    live: n.clone(),
                    rule: None,
                });
            }
        }
    }
    (environment, gpu_here)
}

const NO_GPU: &str = "no GPU here: the build was replayed, the timing was not";

/// Re-times a result whose rebuild is identical: a kernel on the GPU, or a Python call in
/// this environment's interpreter (on the CPU even without a GPU).
fn retime_any(
    r: &ResultRecord,
    id: &str,
    rebuilt: &build::Outcome,
    root: &Path,
    req: &Request,
    gpu_here: bool,
) -> Result<(Option<TimingCheck>, Option<String>), ReplayError> {
    let retimed = match &r.python {
        Some(py) if py.device == "cuda" && !gpu_here => {
            return Ok((None, Some(NO_GPU.to_string())));
        }
        Some(_) => retime_python(r, id, rebuilt, root, req)?,
        None if !gpu_here => return Ok((None, Some(NO_GPU.to_string()))),
        None => retime(r, id, rebuilt_module(rebuilt), req.threshold)?,
    };
    Ok(match retimed {
        Retimed::Compared(t) => (Some(t), None),
        Retimed::NoSamples(why) => (None, Some(why)),
    })
}

/// What re-timing gave: a comparison, or why there is none.
enum Retimed {
    /// The samples were compared.
    Compared(TimingCheck),
    /// The re-run gave no usable samples (the note says why).
    NoSamples(String),
}

/// Re-times the result's kernel (the rebuilt `module`) in a child process and compares
/// the samples with the recorded ones.
fn retime(
    r: &ResultRecord,
    id: &str,
    module: String,
    threshold: f64,
) -> Result<Retimed, ReplayError> {
    let missing = |what| ReplayError::CannotRetime {
        id: keys::short(id).to_string(),
        what,
    };
    let settings = r.settings.clone().ok_or_else(|| missing("settings"))?;
    let job = crate::engines::gpurun::Job {
        schema: crate::engines::gpurun::SCHEMA,
        device: settings.device,
        module,
        kernel: r.launch.clone().ok_or_else(|| missing("launch"))?,
        reference: None,
        args: r.args.clone().ok_or_else(|| missing("arguments"))?,
        tolerances: Default::default(),
        // Timed as recorded: the record's timing settings, not this environment's.
        timing: Some(crate::engines::gpurun::Timing {
            settings: recorded_timing(r, id)?,
            ..bench::timing(&settings)
        }),
        time_on_failure: false,
    };
    // The same run-and-judge as `repro bench` and the bisection (bench::bench_job).
    let exec = bench::ProcessExecutor::current()?;
    let report = bench::bench_job(&exec, &job, std::time::Duration::from_secs(300))?.report;
    // A run with no usable samples says why (its error, or nothing after the colon).
    let why = report.error.map(|e| e.to_string()).unwrap_or_default();
    Ok(compared(
        (&r.samples, &r.burst_starts),
        (report.samples_us, report.burst_starts),
        threshold,
        Some(why),
    ))
}

/// The timing settings a result was recorded with (none: the defaults), checked. A
/// graph-mode result taken in one burst (by a repro from before bursts, or one that
/// stopped within its first) is re-timed in one burst: the defaults now take four.
fn recorded_timing(r: &ResultRecord, id: &str) -> Result<BTreeMap<String, String>, ReplayError> {
    let mut settings = r.timing_settings.clone().unwrap_or_default();
    crate::engines::gpurun::check_settings(&settings).map_err(|source| {
        ReplayError::BadTimingSettings {
            id: keys::short(id).to_string(),
            source,
        }
    })?;
    let graph = r
        .settings
        .as_ref()
        .is_some_and(|s| s.mode == crate::foundation::records::Mode::Graph);
    if graph && r.burst_starts.is_empty() && r.processes.is_none() {
        settings
            .entry(crate::engines::gpurun::BURSTS_SETTING.to_string())
            .or_insert_with(|| "1".to_string());
    }
    Ok(settings)
}

/// Re-times a Python call (the rebuilt torch extension's module on its path) in the
/// environment's interpreter, with the recorded settings, and compares the samples.
fn retime_python(
    r: &ResultRecord,
    id: &str,
    rebuilt: &build::Outcome,
    root: &Path,
    req: &Request,
) -> Result<Retimed, ReplayError> {
    let missing = |what| ReplayError::CannotRetime {
        id: keys::short(id).to_string(),
        what,
    };
    let settings = r.settings.clone().ok_or_else(|| missing("settings"))?;
    let recipe = replay_recipe(root, r.recipe.as_deref().unwrap_or_default(), None)
        .map_err(|_| missing("the recipe"))?;
    let (Some(call), recipe::Build::TorchExtension(t)) = (&recipe.sections.call, &recipe.build)
    else {
        return Err(missing("a Python call in the recipe"));
    };
    let env = build::torch::environment(&recipe.name, req.python, root, t).map_err(|source| {
        ReplayError::Rebuild {
            name: recipe.name.clone(),
            source: Box::new(source),
        }
    })?;
    let dir = tempdir()?;
    for (name, out) in &rebuilt.outputs {
        std::fs::copy(&out.path, dir.path().join(name)).map_err(|source| ReplayError::Io {
            what: format!("failed to copy the rebuilt module {name}"),
            source,
        })?;
    }
    let params = params_of(r);
    let args =
        crate::engines::pyrun::resolve_args(call, &params).map_err(|_| missing("arguments"))?;
    let job = crate::engines::pyrun::Job {
        schema: crate::engines::pyrun::SCHEMA,
        function: call.function.clone(),
        reference: None,
        device: call.device,
        cuda_device: settings.device,
        module_dir: Some(dir.path().display().to_string()),
        args,
        timing: bench::timing(&settings),
        check_only: false,
        time_anyway: false,
    };
    let samples = match crate::engines::pyrun::run(
        &env.located.interpreter,
        &job,
        std::time::Duration::from_secs(300),
    ) {
        Ok(rep) => rep.function.map(|f| f.samples_us).unwrap_or_default(),
        Err(e) => {
            return Ok(Retimed::NoSamples(format!(
                "the Python call did not run: {e}"
            )));
        }
    };
    Ok(compared(
        (&r.samples, &r.burst_starts),
        (samples, Vec::new()),
        req.threshold,
        None,
    ))
}

/// The recorded samples against the re-run's, each with where its bursts begin (their
/// medians' means are compared: [`crate::foundation::stats::compare_bursts`]); `why` is
/// added to the message when the re-run gave no usable samples.
fn compared(
    recorded: (&[f64], &[usize]),
    (samples, starts): (Vec<f64>, Vec<usize>),
    threshold: f64,
    why: Option<String>,
) -> Retimed {
    match crate::foundation::stats::compare_bursts(
        recorded,
        (&samples, &starts),
        0.01,
        threshold,
        17,
    ) {
        Some(c) => {
            let ci = (c.ratio_ci_low, c.ratio_ci_high);
            Retimed::Compared(TimingCheck {
                ratio: c.ratio,
                ratio_ci: ci,
                p: c.p,
                verdict: TimingVerdict::judge(c.p, c.ratio, ci, threshold),
                threshold,
                samples: samples.len(),
            })
        }
        None => Retimed::NoSamples(match why {
            Some(w) => format!("the re-run gave no usable samples: {w}"),
            None => "the re-run gave no usable samples".into(),
        }),
    }
}

impl Replay {
    /// The report as `--json` prints it (schema 1).
    pub fn to_json(&self) -> Value {
        let artifacts: Vec<Value> = self
            .artifacts
            .iter()
            .map(|a| {
                json!({"output": a.output, "recorded": a.recorded, "rebuilt": a.rebuilt, "identical": a.identical()})
            })
            .collect();
        let environment: Vec<Value> = self
            .environment
            .iter()
            .map(|d| match &d.rule {
                Some(rule) => {
                    json!({"field": d.field, "recorded": d.recorded, "live": d.live, "lockfile": rule.lockfile, "hint": rule.hint})
                }
                None => json!({"field": d.field, "recorded": d.recorded, "live": d.live}),
            })
            .collect();
        let timing = self.timing.as_ref().map(|t| {
            json!({"ratio": t.ratio, "ratio-ci": [t.ratio_ci.0, t.ratio_ci.1], "p": t.p, "verdict": t.verdict.as_str(), "threshold": t.threshold, "samples": t.samples})
        });
        json!({"schema": 1, "id": self.id, "kind": self.kind.as_str(), "commit": self.commit,
            "recipe": self.recipe, "verdict": self.verdict.as_str(), "artifacts": artifacts,
            "explain": self.explain, "environment": environment, "timing": timing, "note": self.note})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(recorded: &str, rebuilt: Option<&str>) -> ArtifactCheck {
        ArtifactCheck {
            output: "cubin".into(),
            recorded: recorded.into(),
            rebuilt: rebuilt.map(str::to_string),
        }
    }

    fn timing(verdict: TimingVerdict) -> TimingCheck {
        TimingCheck {
            ratio: 1.0,
            ratio_ci: (0.99, 1.01),
            p: 0.5,
            verdict,
            threshold: 0.02,
            samples: 100,
        }
    }

    #[test]
    fn the_worst_finding_decides_the_verdict_and_its_exit_code() {
        let same = [artifact("a", Some("a"))];
        let env = [EnvDiff {
            field: "driver.version".into(),
            recorded: json!(["580"]),
            live: json!(["575"]),
            rule: None,
        }];
        let v = |a: &[ArtifactCheck], id, e: &[EnvDiff], t: Option<TimingCheck>, n| {
            Verdict::from_checks(a, id, e, t.as_ref(), n)
        };
        assert_eq!(v(&[], true, &[], None, None), Verdict::NothingToCompare);
        assert_eq!(v(&same, true, &[], None, None), Verdict::Reproduced);
        assert_eq!(
            v(&[artifact("a", Some("b"))], false, &env, None, None),
            Verdict::ArtifactDiffers
        );
        assert_eq!(
            v(&same, true, &env, None, None),
            Verdict::EnvironmentMismatch
        );
        let slower = Some(timing(TimingVerdict::Slower));
        assert_eq!(v(&same, true, &[], slower, None), Verdict::TimingDiffers);
        assert_eq!(
            v(&same, true, &[], None, Some("no GPU here")),
            Verdict::CannotRunHere
        );
        let same_timing = Some(timing(TimingVerdict::Same));
        assert_eq!(v(&[], true, &[], same_timing, None), Verdict::Reproduced);
        let codes: Vec<u8> = [
            Verdict::Reproduced,
            Verdict::NothingToCompare,
            Verdict::ArtifactDiffers,
            Verdict::EnvironmentMismatch,
            Verdict::TimingDiffers,
            Verdict::CannotRunHere,
        ]
        .iter()
        .map(|v| v.exit_code())
        .collect();
        assert_eq!(
            codes,
            [
                exit::OK,
                exit::MISMATCH,
                exit::MISMATCH,
                exit::REPLAY_ENVIRONMENT,
                exit::REPLAY_TIMING,
                exit::ENVIRONMENT
            ]
        );
    }

    #[test]
    fn timing_differs_only_beyond_the_threshold() {
        let j = TimingVerdict::judge;
        // Significant and beyond 2% either way.
        assert_eq!(j(0.001, 1.10, (1.05, 1.15), 0.02), TimingVerdict::Slower);
        assert_eq!(j(0.001, 0.90, (0.85, 0.95), 0.02), TimingVerdict::Faster);
        // Significant but inside the threshold: the same.
        assert_eq!(j(0.001, 1.005, (1.001, 1.009), 0.02), TimingVerdict::Same);
        // Beyond the threshold but not significant, or straddling it: inconclusive.
        assert_eq!(
            j(0.2, 1.10, (1.05, 1.15), 0.02),
            TimingVerdict::Inconclusive
        );
        assert_eq!(
            j(0.001, 1.02, (1.0, 1.04), 0.02),
            TimingVerdict::Inconclusive
        );
    }

    #[test]
    fn an_id_must_name_one_record_by_at_least_four_digits() {
        let recs: Vec<RawRecord> = ["abcd01", "abcd02", "ef0123"]
            .iter()
            .map(|k| (k.to_string(), RecordKind::Result, Value::Null))
            .collect();
        assert_eq!(choose(&recs, "EF01").unwrap().0, "ef0123");
        let err = |id| choose(&recs, id).unwrap_err().to_string();
        assert_eq!(err("ef0"), "`ef0` is too short: give at least 4 hex digits");
        assert_eq!(err("abcd"), "abcd is ambiguous: 2 records match");
        assert_eq!(err("9999"), "no result or build with ID 9999");
        assert_eq!(choose(&recs, "9999").unwrap_err().exit_code(), exit::USAGE);
    }

    #[test]
    fn the_json_report_keeps_its_keys() {
        let r = Replay {
            id: "abc".into(),
            kind: RecordKind::Build,
            commit: "c".into(),
            recipe: "saxpy".into(),
            verdict: Verdict::EnvironmentMismatch,
            artifacts: vec![artifact("a", None)],
            explain: vec![],
            environment: vec![EnvDiff {
                field: "gpu.name".into(),
                recorded: json!("H100"),
                live: json!("A100"),
                rule: Some(LockRule {
                    lockfile: "h100".into(),
                    hint: None,
                }),
            }],
            timing: Some(timing(TimingVerdict::Same)),
            note: None,
        };
        let j = r.to_json();
        assert_eq!(j["verdict"], "environment mismatch");
        assert_eq!(j["kind"], "build");
        assert_eq!(
            j["artifacts"][0],
            json!({"output": "cubin", "recorded": "a", "rebuilt": null, "identical": false})
        );
        assert_eq!(
            j["environment"][0],
            json!({"field": "gpu.name", "recorded": "H100", "live": "A100", "lockfile": "h100", "hint": null})
        );
        assert_eq!(j["timing"]["ratio-ci"], json!([0.99, 1.01]));
        assert_eq!(j["timing"]["verdict"], "same");
    }
}
