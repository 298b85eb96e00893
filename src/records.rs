//! The records repro keeps in its store, as types: a build ([`BuildRecord`]), a benchmark
//! result ([`ResultRecord`]), one evaluated commit of a bisection ([`StepRecord`]) and a
//! finished bisection's report ([`BisectRecord`]).
//!
//! This is the one module that reads and writes them. Everything else takes these types, so
//! that a field has one spelling and one meaning everywhere (`repro log`, `show`, `compare`,
//! the exporters, plots, replay and bundles), as hyperfine's exporters all take its
//! `BenchmarkResult`.
//!
//! Records are hostile input when they come from elsewhere (a bundle, a pulled ref): parsing
//! one checks its `schema` and `kind` and the type of every field it carries, and fails with
//! a message that names the field. A record's ID is the hash of the JSON that was written;
//! so that a typed round trip never changes an ID, every writer serialises exactly the
//! members it always wrote (a member that may be `null` stays present as `null`; a member
//! a kind of record does not have is left out).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::stats::Summary;

/// The schema of every record this build writes.
pub const SCHEMA: u32 = 1;

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record's `schema` is not one this build reads.
    #[error("{what} has schema {found}; this repro reads schema {SCHEMA}")]
    Schema {
        /// Which record.
        what: String,
        /// What it says.
        found: String,
    },
    /// It is not the kind of record expected.
    #[error("{what} is a {found} record, not a {expected} record")]
    Kind {
        /// Which record.
        what: String,
        /// What it says it is.
        found: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A field is missing or has the wrong type.
    #[error("{what}: {source}")]
    Shape {
        /// Which record.
        what: String,
        /// What serde found.
        #[source]
        source: serde_json::Error,
    },
}

/// The `schema` member: a record without one, or with another number, is refused.
fn check_schema(v: &Value, what: &str) -> Result<(), RecordError> {
    match v.get("schema").and_then(Value::as_u64) {
        Some(n) if n == u64::from(SCHEMA) => Ok(()),
        _ => Err(RecordError::Schema {
            what: what.to_string(),
            found: v
                .get("schema")
                .map_or_else(|| "none".to_string(), Value::to_string),
        }),
    }
}

/// The `kind` member, where a kind of record has one.
fn check_kind(v: &Value, what: &str, expected: &'static str) -> Result<(), RecordError> {
    match v.get("kind").and_then(Value::as_str) {
        Some(k) if k == expected => Ok(()),
        other => Err(RecordError::Kind {
            what: what.to_string(),
            found: other.unwrap_or("kind-less").to_string(),
            expected,
        }),
    }
}

fn shape<T: DeserializeOwned>(v: &Value, what: &str) -> Result<T, RecordError> {
    T::deserialize(v).map_err(|source| RecordError::Shape {
        what: what.to_string(),
        source,
    })
}

/// The JSON a record is written as (and hashed as).
pub fn to_json<T: Serialize>(record: &T) -> Value {
    serde_json::to_value(record).expect("records serialise: every map key is a string")
}

/// A member that may be absent (the kind of record lacks it) or present and `null`:
/// `None` is absent, `Some(None)` is `null`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Now, as records write it (RFC 3339, milliseconds, UTC).
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// This build's version, as records write it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

// ---------------------------------------------------------------------------------------
// Builds

/// A build's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuildStatus {
    /// The compiler produced every output and every entry point is in them.
    Ok,
    /// It did not; the log says why.
    Failed,
}

impl BuildStatus {
    /// The word records and listings use.
    pub fn word(self) -> &'static str {
        match self {
            BuildStatus::Ok => "ok",
            BuildStatus::Failed => "failed",
        }
    }
}

/// One output of a build: a blob in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OutputRef {
    /// The blob's sha256.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
}

/// Where a build ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnvironmentKind {
    /// On the host, with the host's tools.
    Host,
    /// Inside the project's Nix dev shell.
    Nix,
}

/// Where a build ran, and how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Environment {
    /// Host or Nix.
    pub kind: EnvironmentKind,
    /// Nix: the dev shell's installable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Nix: the dev shell's derivation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell_drv: Option<String>,
    /// Host, when Nix was asked for and not used: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl Environment {
    /// A build on the host.
    pub fn host(warning: Option<String>) -> Self {
        Environment {
            kind: EnvironmentKind::Host,
            shell: None,
            shell_drv: None,
            warning,
        }
    }
}

/// What a build key is the hash of: the recipe's build section, the digest of every input
/// file, the compiler's identity and, inside Nix, the shell. Hashed as written, so the
/// members that are themselves open-ended (`build`, `compiler`, `nix`) stay JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BuildInputs {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// The recipe's `[build]` section, canonical.
    pub build: Value,
    /// sha256 of every file read, by path relative to the repository root.
    pub files: BTreeMap<String, String>,
    /// The compiler's identity (name, version, the wheels' digests).
    pub compiler: Value,
    /// The Nix shell, for builds inside one (host builds have no member at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nix: Option<Value>,
}

/// A build record: `builds/KEY.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BuildRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// Always `build`.
    pub kind: String,
    /// The build key (the sha256 of `inputs`).
    pub key: String,
    /// The recipe's name.
    pub recipe: String,
    /// The recipe file, relative to the repository root.
    pub recipe_path: String,
    /// The recipe's text as the build read it.
    #[serde(default)]
    pub recipe_text: Option<String>,
    /// ok or failed.
    pub status: BuildStatus,
    /// What the key is the hash of.
    pub inputs: BuildInputs,
    /// The outputs by name (`ptx`, `cubin`, a declared file).
    pub outputs: BTreeMap<String, OutputRef>,
    /// The compiler's log.
    pub log: String,
    /// How long the compile took.
    pub duration_ms: f64,
    /// When.
    pub created_at: String,
    /// Which repro.
    pub repro_version: String,
    /// The commit the sources came from, if known.
    pub commit: Option<String>,
    /// The digest of inputs that differ from `commit` (uncommitted edits), if any.
    #[serde(default)]
    pub dirty: Option<String>,
    /// Host or Nix.
    pub environment: Environment,
}

impl BuildRecord {
    /// Reads a build record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "build")?;
        shape(v, what)
    }

    /// Whether it built.
    pub fn ok(&self) -> bool {
        self.status == BuildStatus::Ok
    }
}

// ---------------------------------------------------------------------------------------
// Results

/// What a benchmark found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResultVerdict {
    /// Ran (and, with a reference, matched it).
    Ok,
    /// Ran and did not match the reference.
    Wrong,
    /// Failed: a CUDA error, a fault, a non-zero exit.
    Crash,
    /// Did not finish in time.
    Timeout,
}

impl ResultVerdict {
    /// The word records and listings use.
    pub fn word(self) -> &'static str {
        match self {
            ResultVerdict::Ok => "ok",
            ResultVerdict::Wrong => "wrong",
            ResultVerdict::Crash => "crash",
            ResultVerdict::Timeout => "timeout",
        }
    }
}

/// Throughput at the median.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Throughput {
    /// GB/s, where the recipe's `[work]` gives bytes.
    pub gb_per_s: Option<f64>,
    /// TFLOP/s, where it gives FLOPs.
    pub tflops: Option<f64>,
}

/// A result record: `results/ID.json`, from a recipe bench (a kernel on a GPU) or a
/// command bench (a process, timed or its output read as a metric).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ResultRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// Always `result`.
    pub kind: String,
    /// The machine's fingerprint (its own schema: see the fingerprint module).
    pub fingerprint: Value,
    /// The GPU's name, or `no GPU`.
    pub machine: String,
    /// The commit of the tree, if in a repository.
    pub commit: Option<String>,
    /// Whether the tree had uncommitted changes.
    pub dirty: bool,
    /// When.
    pub created_at: String,
    /// Which repro.
    pub repro_version: String,
    /// The experiment key: what was measured, on what, how.
    pub key: String,
    /// The recipe's or the command bench's name.
    pub name: String,
    /// Recipe benches: the recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
    /// Recipe benches: the recipe file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe_path: Option<String>,
    /// Command benches: the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Command benches: `time` or the metric read from the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// The parameter point (name to value).
    pub params: BTreeMap<String, Value>,
    /// Recipe benches: the build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_key: Option<String>,
    /// Recipe benches: the sha256 of the module loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<String>,
    /// Recipe benches: how it was timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
    /// Recipe benches: the launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Value>,
    /// Recipe benches: the reference's launch (`null` without a check).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub reference: Option<Option<Value>>,
    /// Recipe benches: the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    /// ok, wrong, crash or timeout.
    pub verdict: ResultVerdict,
    /// Why, when not ok.
    pub detail: Option<String>,
    /// Recipe benches: the check of each output (`null` without a reference).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub check: Option<Option<Vec<Value>>>,
    /// The unit of the samples (`us`, `ms`, or a metric's).
    pub unit: String,
    /// The samples.
    pub samples: Vec<f64>,
    /// Their summary (`null` without samples).
    pub summary: Option<Summary>,
    /// Recipe benches: throughput at the median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    /// Recipe benches: launches per sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_sample: Option<u32>,
    /// Recipe benches: warm-up launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_launches: Option<u64>,
    /// Whether sampling stopped because the noise target was met.
    pub converged: bool,
    /// Recipe benches: SM clock before, after, maximum (`null` when unread).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub sm_clock_mhz: Option<Option<(u32, u32, u32)>>,
    /// Recipe benches: the clock fell below 75% of its maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<bool>,
    /// Command benches: warm-up runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_runs: Option<u64>,
    /// Command benches: the --prepare command (`null` without one).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub prepare: Option<Option<String>>,
    /// Command benches: wall time of each run (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<Vec<f64>>,
    /// Command benches: user time of each run (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_s: Option<Vec<f64>>,
    /// Command benches: system time of each run (s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_s: Option<Vec<f64>>,
    /// Command benches: each run's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_codes: Option<Vec<i32>>,
}

impl ResultRecord {
    /// Reads a result record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "result")?;
        shape(v, what)
    }

    /// The median, if there were samples.
    pub fn median(&self) -> Option<f64> {
        self.summary.as_ref().map(|s| s.median)
    }
}

// ---------------------------------------------------------------------------------------
// Bisections

/// What evaluating one commit said about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answer {
    /// The property holds (builds, check passes, benchmark not slower).
    Good,
    /// The property is broken.
    Bad,
    /// The commit cannot be evaluated (an unrelated build break, a missing file, ...).
    Skip,
}

impl Answer {
    /// The word records and step lines use.
    pub fn word(self) -> &'static str {
        match self {
            Answer::Good => "good",
            Answer::Bad => "bad",
            Answer::Skip => "skip",
        }
    }
}

/// A stored step: `bisect-steps/KEY.json`, one commit's answer to one question, reused by
/// every later bisection that asks the same question of the same tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StepRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// The step key (question and tree).
    pub key: String,
    /// The commit evaluated.
    pub commit: String,
    /// Its subject line.
    pub subject: String,
    /// good, bad or skip.
    pub verdict: Answer,
    /// Why, for bad and skip.
    pub detail: Option<String>,
    /// What the step had to do (a moved source, fetched blobs).
    #[serde(default)]
    pub note: Option<String>,
    /// Bench: the median of the per-process medians.
    #[serde(default)]
    pub median: Option<f64>,
    /// Bench: p-value against the baseline.
    #[serde(default)]
    pub p: Option<f64>,
    /// Bench: processes measured.
    #[serde(default)]
    pub attempts: usize,
    /// Bench: ratio to the baseline and its interval.
    #[serde(default)]
    pub ratio: Option<[f64; 3]>,
    /// Bench: the per-process medians.
    #[serde(default)]
    pub samples: Vec<f64>,
    /// The question asked (mode, recipe, settings).
    pub question: Value,
    /// The fixed recipe's text, when the bisection held one.
    #[serde(default)]
    pub recipe_text: Option<String>,
}

impl StepRecord {
    /// Reads a step record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        shape(v, what)
    }
}

/// What a bisection asked: `question` in its report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Question {
    /// build, check, bench or script.
    pub mode: String,
    /// The recipe, command or script.
    pub name: Option<String>,
    /// The good end's commit.
    pub good: Option<String>,
    /// The bad end's commit.
    pub bad: Option<String>,
}

/// A commit as a report names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommitInfo {
    /// The full hash.
    pub hash: String,
    /// The author's name and email.
    pub author: String,
    /// Author date (RFC 3339, UTC).
    pub date: String,
    /// The first line of the message.
    pub subject: String,
    /// Files changed, insertions and deletions against the first parent.
    pub diffstat: String,
}

/// How a finished search ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Outcome {
    /// `index` is the first bad commit: it answered Bad and `index - 1` answered Good.
    FirstBad {
        /// The first bad commit.
        index: usize,
    },
    /// The first bad commit is one of `first..=last`: `first - 1` answered Good, `last`
    /// answered Bad and every commit in between was skipped, so nothing can tell them apart
    /// (git bisect's "There are only 'skip'ped commits left to test").
    Untestable {
        /// The earliest candidate (the commit after the last good one).
        first: usize,
        /// The latest candidate (the earliest commit known bad).
        last: usize,
    },
}

/// Which change a bisection looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Find {
    /// The first commit where the property broke.
    Broken,
    /// The first commit where it was fixed.
    Fixed,
}

/// A finished bisection's report: `bisections/ID.json`, and `repro bisect --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct BisectRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// Broken or fixed.
    pub find: Find,
    /// How it ended.
    pub outcome: Outcome,
    /// The first bad (or fixing) commit.
    pub culprit: Option<CommitInfo>,
    /// Its parent.
    pub parent: Option<CommitInfo>,
    /// The candidates' range, as `A..B` hashes.
    pub range: Value,
    /// Commits in the range.
    pub commits: usize,
    /// Evaluations not answered from the store.
    pub evaluated: usize,
    /// Every evaluated step, in history order.
    pub steps: Vec<Value>,
    /// Bench: the culprit re-checked against its parent.
    pub recheck: Option<Value>,
    /// Always `bisection` once recorded (absent in `--json` before it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// What was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
    /// When it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Which repro recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro_version: Option<String>,
    /// Its ID (the sha256 of the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl BisectRecord {
    /// Reads a bisection record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "bisection")?;
        shape(v, what)
    }

    /// Whether a culprit was found.
    pub fn found(&self) -> bool {
        matches!(self.outcome, Outcome::FirstBad { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Value {
        let path = format!(
            "{}/tests/fixtures/records/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// A typed round trip writes back exactly what was read: IDs (hashes of the JSON)
    /// never change because a record went through its type.
    #[test]
    fn every_sample_round_trips_unchanged() {
        for name in ["build-ok.json", "build-failed.json"] {
            let v = fixture(name);
            let r = BuildRecord::from_json(&v, name).unwrap();
            assert_eq!(to_json(&r), v, "{name}");
        }
        for name in ["result-command.json", "result-recipe.json"] {
            let v = fixture(name);
            let r = ResultRecord::from_json(&v, name).unwrap();
            assert_eq!(to_json(&r), v, "{name}");
        }
        let v = fixture("bisection.json");
        assert_eq!(to_json(&BisectRecord::from_json(&v, "b").unwrap()), v);
        let v = fixture("step.json");
        assert_eq!(to_json(&StepRecord::from_json(&v, "s").unwrap()), v);
    }

    #[test]
    fn typed_fields_read_as_their_types() {
        let b = BuildRecord::from_json(&fixture("build-ok.json"), "b").unwrap();
        assert!(b.ok());
        assert!(b.outputs.contains_key("cubin") && b.outputs["ptx"].bytes > 0);
        let f = BuildRecord::from_json(&fixture("build-failed.json"), "b").unwrap();
        assert_eq!(f.status, BuildStatus::Failed);
        assert!(f.log.contains("error"));
        let r = ResultRecord::from_json(&fixture("result-recipe.json"), "r").unwrap();
        assert_eq!(r.verdict, ResultVerdict::Ok);
        assert_eq!(r.median(), Some(10.6));
        assert_eq!(r.reference, Some(None));
        assert_eq!(r.sm_clock_mhz, Some(Some((1980, 1980, 1980))));
        let c = ResultRecord::from_json(&fixture("result-command.json"), "r").unwrap();
        assert_eq!(c.reference, None);
        assert_eq!(c.prepare, Some(None));
        let b = BisectRecord::from_json(&fixture("bisection.json"), "b").unwrap();
        assert!(b.found());
        assert_eq!(b.question.unwrap().mode, "build");
        let s = StepRecord::from_json(&fixture("step.json"), "s").unwrap();
        assert_eq!(s.verdict, Answer::Good);
    }

    #[test]
    fn hostile_records_are_refused_naming_what_is_wrong() {
        let mut v = fixture("build-ok.json");
        v["schema"] = serde_json::json!(2);
        let e = BuildRecord::from_json(&v, "builds/x.json").unwrap_err().to_string();
        assert!(e.contains("builds/x.json has schema 2"), "{e}");
        let v = fixture("result-command.json");
        let e = BuildRecord::from_json(&v, "x").unwrap_err().to_string();
        assert!(e.contains("is a result record, not a build record"), "{e}");
        let mut v = fixture("result-command.json");
        v["verdict"] = serde_json::json!("great");
        let e = ResultRecord::from_json(&v, "r.json").unwrap_err().to_string();
        assert!(e.starts_with("r.json: unknown variant `great`"), "{e}");
        let mut v = fixture("build-ok.json");
        v["outputs"]["ptx"]["bytes"] = serde_json::json!(-1);
        assert!(BuildRecord::from_json(&v, "x").is_err());
        let mut v = fixture("bisection.json");
        v.as_object_mut().unwrap().remove("outcome");
        let e = BisectRecord::from_json(&v, "x").unwrap_err().to_string();
        assert!(e.contains("missing field `outcome`"), "{e}");
    }
}
