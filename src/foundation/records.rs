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

use crate::foundation::fingerprint::Fingerprint;
use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::foundation::runspec::{DType, Init};
use crate::foundation::stats::Summary;

/// The store directory of build records.
pub const BUILDS: &str = "builds";
/// The store directory of result records.
pub const RESULTS: &str = "results";
/// The store directory of finished bisections' reports.
pub const BISECTIONS: &str = "bisections";
/// The store directory of profiles (`repro profile`).
pub const PROFILES: &str = "profiles";

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
    #[error("{what}: {at}{source}")]
    Shape {
        /// Which record.
        what: String,
        /// Where in it, as `` `burst-starts[0]`: `` (empty at the top, or where unknown).
        at: String,
        /// What serde found.
        #[source]
        source: serde_json::Error,
    },
    /// A field reads as its type but holds what no honest writer produces: a summary its
    /// samples contradict, a date that is no date, a negative or non-finite duration.
    #[error("{what}: `{field}` {problem}")]
    Invalid {
        /// Which record.
        what: String,
        /// The field (dotted for nested ones).
        field: String,
        /// What is wrong with it.
        problem: String,
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

/// The checks of a record's values beyond their types, in the one place every reader passes
/// through (`from_json`: the store, pull, `store verify`, bundles): a forged record whose ID
/// was recomputed reads as its type, so only its values can give it away.
struct Values<'a> {
    what: &'a str,
}

impl Values<'_> {
    fn bad(&self, field: &str, problem: impl Into<String>) -> RecordError {
        RecordError::Invalid {
            what: self.what.to_string(),
            field: field.to_string(),
            problem: problem.into(),
        }
    }

    /// A time as records write it ([`now`]: RFC 3339, UTC).
    fn timestamp(&self, field: &str, t: &str) -> Result<(), RecordError> {
        humantime::parse_rfc3339(t)
            .map(|_| ())
            .map_err(|e| self.bad(field, format!("is {t:?}, not an RFC 3339 time ({e})")))
    }

    /// A commit, where one is named: a full git commit ID (a replay checks it out).
    fn commit(&self, field: &str, c: Option<&str>) -> Result<(), RecordError> {
        match c {
            Some(c) if !crate::foundation::keys::is_commit(c) => Err(self.bad(
                field,
                format!(
                    "is {:?}, not a 40-digit hex commit",
                    c.chars().take(80).collect::<String>()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// A key repro computed: 64 hex digits.
    fn key(&self, field: &str, k: &str) -> Result<(), RecordError> {
        if crate::foundation::keys::is_key(k) {
            Ok(())
        } else {
            Err(self.bad(
                field,
                format!(
                    "is {:?}, not a 64-digit hex key",
                    k.chars().take(80).collect::<String>()
                ),
            ))
        }
    }

    /// A duration, count or rate: finite and not negative.
    fn amount(&self, field: &str, x: f64) -> Result<(), RecordError> {
        if x.is_finite() && x >= 0.0 {
            Ok(())
        } else {
            Err(self.bad(field, format!("is {x}, not a finite amount of at least 0")))
        }
    }

    fn amounts(&self, field: &str, xs: &[f64]) -> Result<(), RecordError> {
        xs.iter().try_for_each(|&x| self.amount(field, x))
    }

    /// Measurements: finite and positive (compare and the ratios divide by them).
    fn samples(&self, field: &str, xs: &[f64]) -> Result<(), RecordError> {
        match xs.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
            Some(x) => Err(self.bad(
                field,
                format!("has a sample of {x}: samples are positive measurements"),
            )),
            None => Ok(()),
        }
    }

    /// A summary recomputed from its samples ([`crate::foundation::stats::summary_problem`]).
    /// The samples' bursts are checked even without a summary: a record whose bursts do
    /// not cut its samples says so under `burst-starts`.
    fn summary(
        &self,
        field: &str,
        xs: &[f64],
        starts: &[usize],
        s: Option<&Summary>,
    ) -> Result<(), RecordError> {
        if !starts.is_empty()
            && let Some(problem) = crate::foundation::stats::bursts_problem(starts, xs.len())
        {
            return Err(self.bad("burst-starts", problem));
        }
        let Some(s) = s else {
            // Every sample set repro records is summarised; one without its summary was
            // edited (readers would show a median of nothing).
            return match xs.len() {
                0 => Ok(()),
                n => Err(self.bad(field, format!("is missing, with {n} samples to summarise"))),
            };
        };
        match crate::foundation::stats::summary_problem(xs, starts, s) {
            Some(problem) => Err(self.bad(field, problem)),
            None => Ok(()),
        }
    }

    fn p_value(&self, field: &str, p: Option<f64>) -> Result<(), RecordError> {
        match p {
            Some(p) if !(0.0..=1.0).contains(&p) => {
                Err(self.bad(field, format!("is {p}, not a p-value in [0, 1]")))
            }
            _ => Ok(()),
        }
    }

    /// A ratio with its interval: finite, positive, low <= high.
    fn ratio(&self, field: &str, [r, low, high]: [f64; 3]) -> Result<(), RecordError> {
        if [r, low, high].iter().all(|x| x.is_finite() && *x > 0.0) && low <= high {
            Ok(())
        } else {
            Err(self.bad(
                field,
                format!("is {r} in [{low}, {high}], not a positive ratio and interval"),
            ))
        }
    }

    /// A bisection's steps (commit or release).
    fn steps(&self, steps: &[Step]) -> Result<(), RecordError> {
        for s in steps {
            if let Some(m) = s.median {
                self.samples("steps.median", &[m])?;
            }
            self.p_value("steps.p", s.p)?;
            if let Some((r, lo, hi)) = s.ratio {
                self.ratio("steps.ratio", [r, lo, hi])?;
            }
            self.amount("steps.ms", s.ms)?;
            self.samples("steps.samples", &s.samples)?;
            for xs in s.by_place.values() {
                self.samples("steps.by-place", xs)?;
            }
        }
        Ok(())
    }

    fn recheck(&self, r: Option<&Recheck>) -> Result<(), RecordError> {
        match r {
            Some(r) => {
                self.ratio("recheck.ratio", [r.ratio, r.ratio_ci[0], r.ratio_ci[1]])?;
                self.p_value("recheck.p", Some(r.p))
            }
            None => Ok(()),
        }
    }

    fn created(&self, t: Option<&str>) -> Result<(), RecordError> {
        t.map_or(Ok(()), |t| self.timestamp("created-at", t))
    }
}

/// `v` read as a `T`; a field of the wrong type is named by its path in the record.
fn shape<T: DeserializeOwned>(v: &Value, what: &str) -> Result<T, RecordError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let source = e.into_inner();
        // serde_path_to_error writes the top as `.` (a missing field's error names it), and
        // a field's own reader may have named it already (`fingerprint: ...`).
        let named = path == "." || source.to_string().starts_with(&format!("{path}:"));
        RecordError::Shape {
            what: what.to_string(),
            at: if named {
                String::new()
            } else {
                format!("`{path}`: ")
            },
            source,
        }
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

/// Every blob digest a stored record references, read from its JSON as it is (so that a
/// record this build cannot type, an older one, still keeps its blobs from `gc`) (`"sha256"` fields anywhere under `outputs` and
/// `log-sha256`).
pub fn referenced_blobs(rec: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(outputs) = rec["outputs"].as_object() {
        for o in outputs.values() {
            if let Some(d) = o["sha256"].as_str() {
                out.push(d.to_string());
            }
        }
    }
    if let Some(d) = rec["log-sha256"].as_str() {
        out.push(d.to_string());
    }
    out
}

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

/// What a build checked of its artifact besides that the compiler succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Checked {
    /// Every entry point the recipe names is in the artifact.
    Entries,
    /// The recipe names no entry points: the build checked only that the source compiles.
    CompileOnly,
}

impl Checked {
    /// The words listings use.
    pub fn word(self) -> &'static str {
        match self {
            Checked::Entries => "entries",
            Checked::CompileOnly => "compile-only",
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
    /// A torch extension's PyTorch ABI identity: PyTorch's version, CUDA, C++ ABI, pybind11
    /// ABI and the Python ABI tag (other builds have no member at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<Value>,
}

impl BuildInputs {
    /// Lists what differs between two sets of key inputs, in words.
    pub fn explain(&self, new: &BuildInputs) -> Vec<String> {
        let (old, new) = (&to_json(self), &to_json(new));
        let mut out = Vec::new();
        let (ob, nb) = (&old["build"], &new["build"]);
        let fields: std::collections::BTreeSet<&String> = ob
            .as_object()
            .into_iter()
            .chain(nb.as_object())
            .flat_map(|m| m.keys())
            .collect();
        for f in fields {
            if ob[f] != nb[f] {
                out.push(format!("recipe: `{f}` changed from {} to {}", ob[f], nb[f]));
            }
        }
        let (of, nf) = (&old["files"], &new["files"]);
        let names: std::collections::BTreeSet<&String> = of
            .as_object()
            .into_iter()
            .chain(nf.as_object())
            .flat_map(|m| m.keys())
            .collect();
        for n in names {
            match (of.get(n), nf.get(n)) {
                (Some(a), Some(b)) if a != b => out.push(format!("file {n} changed")),
                (None, Some(_)) => out.push(format!("file {n} is a new input")),
                (Some(_), None) => out.push(format!("file {n} is no longer an input")),
                _ => {}
            }
        }
        let (oc, nc) = (&old["compiler"], &new["compiler"]);
        if oc != nc {
            let describe = |c: &Value| {
                let lib = c["library-sha256"]
                    .as_str()
                    .map(|s| format!(", library {}", crate::foundation::keys::short(s)))
                    .unwrap_or_default();
                format!(
                    "{} {}{lib}",
                    c["name"].as_str().unwrap_or("?"),
                    c["version"].as_str().unwrap_or("")
                )
            };
            out.push(format!(
                "compiler changed: {} -> {}",
                describe(oc),
                describe(nc)
            ));
        }
        let (ot, nt) = (&old["torch"], &new["torch"]);
        if ot != nt {
            let keys: std::collections::BTreeSet<&String> = ot
                .as_object()
                .into_iter()
                .chain(nt.as_object())
                .flat_map(|m| m.keys())
                .collect();
            for k in keys {
                if ot[k] != nt[k] {
                    out.push(format!(
                        "PyTorch (the Python environment's torch): `{k}` changed from {} to {}",
                        ot[k], nt[k]
                    ));
                }
            }
        }
        if old["nix"] != new["nix"] {
            let describe = |n: &Value| match n {
                Value::Null => "the host".to_string(),
                n => format!("the Nix shell {}", n["shell-drv"].as_str().unwrap_or("?")),
            };
            let lock_changed = !old["nix"].is_null()
                && !new["nix"].is_null()
                && old["nix"]["flake-lock-sha256"] != new["nix"]["flake-lock-sha256"];
            if lock_changed {
                out.push("flake.lock changed".into());
            }
            if old["nix"]["shell-drv"] != new["nix"]["shell-drv"] {
                out.push(format!(
                    "build environment changed: {} -> {}",
                    describe(&old["nix"]),
                    describe(&new["nix"])
                ));
            }
        }
        if old["schema"] != new["schema"] {
            out.push("the build-key schema changed (a newer repro)".into());
        }
        out
    }

    /// A string field of the compiler's identity (`name`, `version`).
    pub fn compiler_field(&self, field: &str) -> Option<&str> {
        self.compiler.get(field)?.as_str()
    }
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
    /// What each kernel of each target costs (registers, shared and local memory, spills),
    /// read from the cubins; absent in records of older repros and of builds without device
    /// code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<crate::foundation::cubin::ResourceReport>,
    /// The budgets (`[build.limits]`) the build broke: it is then `failed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub over_budget: Vec<String>,
    /// What the build checked of its artifact (absent in records written before repro
    /// said so, and for command builds that name no entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<Checked>,
    /// A failed build's reason in one line: the compiler's first error line (the whole
    /// output is `log`). Absent for builds that succeeded and in older records, whose
    /// reason [`crate::foundation::diagnostics::reason`] reads from the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl BuildRecord {
    /// Reads a build record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "build")?;
        let r: Self = shape(v, what)?;
        let values = Values { what };
        values.timestamp("created-at", &r.created_at)?;
        values.amount("duration-ms", r.duration_ms)?;
        values.commit("commit", r.commit.as_deref())?;
        values.key("key", &r.key)?;
        Ok(r)
    }

    /// Whether it built.
    pub fn ok(&self) -> bool {
        self.status == BuildStatus::Ok
    }

    /// Why it failed, in one line (`None` when it built).
    pub fn failure_reason(&self) -> Option<String> {
        (!self.ok()).then(|| {
            self.reason
                .clone()
                .unwrap_or_else(|| crate::foundation::diagnostics::reason(&self.log))
        })
    }
}

// ---------------------------------------------------------------------------------------
// Results

/// How samples are taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// L2 flushed (a memset over twice its size) before every sample.
    Cold,
    /// Back-to-back launches, caches warm.
    Hot,
    /// A CUDA graph of many launches per sample, for kernels of a few microseconds.
    Graph,
}

/// How to measure, as given on the command line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Settings {
    /// Cold, hot or graph.
    pub mode: Mode,
    /// Target relative noise of the median.
    pub max_noise: f64,
    /// Minimum samples.
    pub min_samples: usize,
    /// Maximum samples.
    pub max_samples: usize,
    /// Minimum sampling time (ms).
    pub min_time_ms: f64,
    /// Sampling budget (ms).
    pub budget_ms: f64,
    /// Warm-up (ms).
    pub warmup_ms: f64,
    /// Device ordinal.
    pub device: usize,
}

impl Settings {
    /// The settings of a job that runs once and times nothing that counts: a check, or a
    /// profiler's run, on `device`.
    pub fn once(device: usize) -> Settings {
        Settings {
            mode: Mode::Cold,
            max_noise: 0.005,
            min_samples: 1,
            max_samples: 1,
            min_time_ms: 0.0,
            budget_ms: 0.0,
            warmup_ms: 0.0,
            device,
        }
    }
}

/// One launch, resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LaunchSpec {
    /// The entry point.
    pub kernel: String,
    /// Grid.
    pub grid: [u32; 3],
    /// Block.
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes.
    #[serde(alias = "shared_mem")]
    pub shared_mem: u32,
}

/// One argument, resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ArgSpec {
    /// A device buffer.
    Buffer {
        /// Name.
        name: String,
        /// Element type.
        dtype: DType,
        /// Element count.
        count: u64,
        /// Fill (`None`: an output poisoned before every run).
        init: Option<Init>,
        /// Fill seed.
        seed: u64,
        /// Compared by the check.
        output: bool,
    },
    /// A scalar.
    Scalar {
        /// Name.
        name: String,
        /// Type.
        dtype: DType,
        /// Value (integers are exact up to 2^53).
        value: f64,
    },
}

/// How one output compared with the reference.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct OutputCheck {
    /// The output.
    pub name: String,
    /// Elements compared.
    pub elements: u64,
    /// Elements outside the tolerance (NaN always is).
    pub mismatches: u64,
    /// Elements the kernel left poisoned (never written).
    pub unwritten: u64,
    /// Largest absolute error among finite pairs.
    pub max_abs_err: f64,
    /// Largest relative error among finite pairs.
    pub max_rel_err: f64,
    /// The tolerance used.
    pub atol: f64,
    /// The tolerance used.
    pub rtol: f64,
    /// The first mismatch: index, kernel value, reference value. The values are text
    /// because they may be NaN (an unwritten, poisoned element), which JSON cannot hold.
    pub first_mismatch: Option<(u64, String, String)>,
}

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
    /// Against the device's measured peaks (`repro env calibrate`), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roofline: Option<crate::foundation::roofline::Roofline>,
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
    /// The machine's fingerprint (its own schema: see the fingerprint module); `null` for a
    /// measurement read from another tool's output.
    pub fingerprint: Option<Fingerprint>,
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
    pub settings: Option<Settings>,
    /// Recipe benches: the launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<LaunchSpec>,
    /// Recipe benches: the reference's launch (`null` without a check).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub reference: Option<Option<LaunchSpec>>,
    /// Recipe benches: the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<ArgSpec>>,
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
    pub check: Option<Option<Vec<OutputCheck>>>,
    /// The unit of the samples (`us`, `ms`, or a metric's).
    pub unit: String,
    /// The samples.
    pub samples: Vec<f64>,
    /// Where the second, third, ... burst of samples begins (indices into `samples`), for
    /// samples taken in bursts (graph mode; the processes of a split measurement); absent
    /// for one burst. The summary's median is then the mean of the bursts' medians.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub burst_starts: Vec<usize>,
    /// Their summary (`null` without samples).
    pub summary: Option<Summary>,
    /// Recipe benches: throughput at the median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
    /// Recipe benches: launches per sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launches_per_sample: Option<u32>,
    /// Recipe benches: the worker processes whose samples were pooled, where more than one
    /// (absent: one): `REPRO_TIMING_PROCESSES`, or fewer where one failed (or its check
    /// did) or the most samples were taken before the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<usize>,
    /// Graph-mode recipe benches: the median GPU time (µs) of an empty graph timed behind
    /// queued work, subtracted from each sample before it was divided by its launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_overhead_us: Option<f64>,
    /// Recipe benches: warm-up launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_launches: Option<u64>,
    /// Recipe benches: the time (ms) the same worker's previous job kept this GPU busy
    /// until moments before, counted toward the warm-up (absent: none was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_credit_ms: Option<f64>,
    /// Recipe benches: the `REPRO_TIMING_*` settings it was timed with, where any was set
    /// (absent: the defaults); part of the experiment key, and what its replay times with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_settings: Option<BTreeMap<String, String>>,
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
    /// Python-call benches (`[run] function`): the call, its reference's timing, the speedup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PyCall>,
}

/// A Python call timed against its reference (`[run] function` in a torch-extension recipe).
/// The record's own `samples` are the function's; the reference's are here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PyCall {
    /// `module.function` timed.
    pub function: String,
    /// `module.function` it was checked against and timed beside, if any.
    pub reference: Option<String>,
    /// "cuda" or "cpu".
    pub device: String,
    /// The device's name as PyTorch gives it ("cpu" on the CPU).
    pub device_name: String,
    /// The interpreter that ran it.
    pub interpreter: String,
    /// PyTorch's version in that interpreter.
    pub torch: String,
    /// How samples were timed ("cuda-events", "cpu-wall-clock (time.perf_counter_ns)").
    pub timer: Option<String>,
    /// Bytes overwritten before each sample (0 in hot mode).
    pub flush_bytes: u64,
    /// Warm-up calls of the function before its samples.
    pub warmup_calls: Option<u64>,
    /// The reference's samples (us).
    pub reference_samples: Vec<f64>,
    /// Their summary.
    pub reference_summary: Option<Summary>,
    /// Whether the reference's timing met the noise target.
    pub reference_converged: bool,
    /// The function's speed relative to the reference's (reference median / function
    /// median: above 1 is faster than the reference).
    pub speedup: Option<Speedup>,
}

/// A ratio of medians with its bootstrap interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Speedup {
    /// Reference median / function median.
    pub ratio: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
    /// Its confidence level (0.95).
    pub level: f64,
}

impl ResultRecord {
    /// A measurement read from another tool's output (`kind` names the tool, such as
    /// `nvbench`), so that `compare` and the exporters treat it as a result.
    pub fn external(
        kind: &str,
        name: String,
        params: BTreeMap<String, Value>,
        unit: &str,
        samples: Vec<f64>,
        summary: Option<Summary>,
        machine: String,
    ) -> Self {
        let mut r = ResultRecord::new(None, machine, None, false, String::new(), name, unit);
        r.kind = kind.to_string();
        r.created_at = String::new();
        r.repro_version = String::new();
        r.params = params;
        r.samples = samples;
        r.summary = summary;
        r.converged = true;
        r
    }

    /// A result measured now by this repro, with nothing measured yet: the caller fills in
    /// what its kind of bench has (recipe or command).
    pub fn new(
        fingerprint: Option<Fingerprint>,
        machine: String,
        commit: Option<String>,
        dirty: bool,
        key: String,
        name: String,
        unit: &str,
    ) -> Self {
        ResultRecord {
            schema: SCHEMA,
            kind: "result".to_string(),
            fingerprint,
            machine,
            commit,
            dirty,
            created_at: now(),
            repro_version: VERSION.to_string(),
            key,
            name,
            recipe: None,
            recipe_path: None,
            command: None,
            metric: None,
            params: BTreeMap::new(),
            build_key: None,
            artifact: None,
            settings: None,
            launch: None,
            reference: None,
            args: None,
            verdict: ResultVerdict::Ok,
            detail: None,
            check: None,
            unit: unit.to_string(),
            samples: Vec::new(),
            burst_starts: Vec::new(),
            summary: None,
            throughput: None,
            launches_per_sample: None,
            processes: None,
            graph_overhead_us: None,
            warmup_launches: None,
            warmup_credit_ms: None,
            timing_settings: None,
            converged: false,
            sm_clock_mhz: None,
            throttled: None,
            warmup_runs: None,
            prepare: None,
            wall_s: None,
            user_s: None,
            system_s: None,
            exit_codes: None,
            python: None,
        }
    }

    /// Parameters as `n=4096, m=8` for display.
    pub fn params_text(&self) -> String {
        params_text(&self.params)
    }

    /// Reads a result record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "result")?;
        let r: Self = shape(v, what)?;
        r.check_values(&Values { what })?;
        Ok(r)
    }

    fn check_values(&self, values: &Values) -> Result<(), RecordError> {
        values.timestamp("created-at", &self.created_at)?;
        values.commit("commit", self.commit.as_deref())?;
        values.key("key", &self.key)?;
        values.samples("samples", &self.samples)?;
        values.summary(
            "summary",
            &self.samples,
            &self.burst_starts,
            self.summary.as_ref(),
        )?;
        for (field, x) in [
            ("graph-overhead-us", self.graph_overhead_us),
            ("warmup-credit-ms", self.warmup_credit_ms),
        ] {
            x.map_or(Ok(()), |x| values.amount(field, x))?;
        }
        // The settings' own values are checked where they are used (a replay); here, that
        // they are a few short `REPRO_TIMING_` entries.
        let settings = self.timing_settings.iter().flatten();
        if self.timing_settings.as_ref().is_some_and(|m| m.len() > 16) {
            return Err(values.bad("timing-settings", "has more than 16 entries"));
        }
        for (k, v) in settings {
            if !k.starts_with("REPRO_TIMING_") || k.len() > 64 || v.len() > 256 {
                return Err(values.bad(
                    "timing-settings",
                    format!(
                        "holds {:?}, not a REPRO_TIMING_ setting of at most 256 bytes",
                        k.chars().take(64).collect::<String>()
                    ),
                ));
            }
        }
        for (field, xs) in [
            ("wall-s", &self.wall_s),
            ("user-s", &self.user_s),
            ("system-s", &self.system_s),
        ] {
            values.amounts(field, xs.as_deref().unwrap_or_default())?;
        }
        if let Some(t) = &self.throughput {
            for (field, x) in [
                ("throughput.gb-per-s", t.gb_per_s),
                ("throughput.tflops", t.tflops),
            ] {
                x.map_or(Ok(()), |x| values.amount(field, x))?;
            }
        }
        if let Some(py) = &self.python {
            values.samples("python.reference-samples", &py.reference_samples)?;
            values.summary(
                "python.reference-summary",
                &py.reference_samples,
                &[],
                py.reference_summary.as_ref(),
            )?;
            if let Some(sp) = &py.speedup {
                values.ratio("python.speedup", [sp.ratio, sp.low, sp.high])?;
            }
        }
        Ok(())
    }

    /// A field of the machine's fingerprint (`driver.version`), if it was probed.
    pub fn fingerprint_field(&self, key: &str) -> Option<&str> {
        self.fingerprint.as_ref()?.value(key)
    }

    /// The median, if there were samples.
    pub fn median(&self) -> Option<f64> {
        self.summary.as_ref().map(|s| s.median)
    }
}

/// Parameters as `n=4096, m=8` for display.
pub fn params_text(params: &BTreeMap<String, Value>) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
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

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
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
    /// What the kernels of the step's build cost, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<String>,
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
    /// The question's mode (`build`, `check`, `bench`, `script`).
    pub fn mode(&self) -> Option<&str> {
        self.question.get("question")?.get("mode")?.as_str()
    }

    /// Reads a step record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        let r: Self = shape(v, what)?;
        let values = Values { what };
        if let Some(m) = r.median {
            values.samples("median", &[m])?;
        }
        values.p_value("p", r.p)?;
        r.ratio.map_or(Ok(()), |x| values.ratio("ratio", x))?;
        values.samples("samples", &r.samples)?;
        Ok(r)
    }
}

/// The per-process medians a bisection measured for one experiment (a build, a kernel, its
/// arguments and settings): `bisect-samples/KEY.json`, so that a later step or a resumed
/// bisection takes more samples rather than starting again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SamplesRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// The experiment's key.
    pub experiment: String,
    /// The medians, in the order they were taken.
    pub samples: Vec<f64>,
}

impl SamplesRecord {
    /// Reads a samples record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        let r: Self = shape(v, what)?;
        Values { what }.samples("samples", &r.samples)?;
        Ok(r)
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

/// A performance bisection's culprit measured again against its parent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Recheck {
    /// The culprit.
    pub culprit: String,
    /// Its parent.
    pub parent: String,
    /// Culprit over parent (the geometric mean over the places that measured both).
    pub ratio: f64,
    /// Its interval.
    pub ratio_ci: [f64; 2],
    /// The largest p-value of the places.
    pub p: f64,
    /// Whether every place found the culprit worse.
    pub confirmed: bool,
}

/// A wheel as installed, in the stamp.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct InstalledWheel {
    /// The Python package.
    pub package: String,
    /// Its version.
    pub version: String,
    /// The wheel's file name.
    pub file: String,
    /// Its sha256, as verified (or, for an unpinned release, as found).
    pub sha256: String,
    /// Whether the digest was checked against a pin.
    pub pinned: bool,
}

/// A check or bench bisection over toolchain releases, recorded under `bisections/` (its
/// `kind` is `toolchain-bisection`) and printed by `repro bisect --toolchains --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ToolchainBisectRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// `toolchain-bisection`.
    pub kind: String,
    /// The recipe.
    pub recipe: String,
    /// check or bench.
    pub mode: String,
    /// nvrtc or nvcc.
    pub family: String,
    /// The releases searched, oldest first (FROM..TO).
    pub releases: Vec<String>,
    /// Where the release list came from.
    pub releases_from: String,
    /// The commit held fixed (HEAD; the working tree is what is built).
    pub commit: Option<String>,
    /// The search's outcome (indices into `releases`).
    pub outcome: Outcome,
    /// The first release that fails the check or is slower, when pinned down.
    pub first_bad: Option<String>,
    /// The release before it.
    pub last_good: Option<String>,
    /// Releases that could not be told apart (all skipped), when not pinned down.
    pub undecided: Vec<String>,
    /// Steps not answered from the store.
    pub evaluated: usize,
    /// Every step, oldest release first (`commit` holds the release's spec).
    pub steps: Vec<Step>,
    /// Bench: the first bad release measured against the one before it.
    pub recheck: Option<Recheck>,
    /// The wheels each evaluated release was installed from, with their sha256.
    pub wheels: BTreeMap<String, Vec<InstalledWheel>>,
    /// What was asked (once recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Value>,
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

impl ToolchainBisectRecord {
    /// Reads a toolchain bisection's record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "toolchain-bisection")?;
        let r: Self = shape(v, what)?;
        let values = Values { what };
        values.created(r.created_at.as_deref())?;
        values.steps(&r.steps)?;
        values.recheck(r.recheck.as_ref())?;
        Ok(r)
    }
}

/// One release's build verdict for one target, in a build bisection over toolchain
/// releases.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ReleaseStep {
    /// The release.
    pub release: String,
    /// Build target (or the recipe name for a single-target recipe).
    pub target: String,
    /// good, bad or skip.
    pub verdict: Answer,
    /// The build key.
    pub key: Option<String>,
    /// Whether the store had the build already.
    pub cached: bool,
    /// The compiler's first error line, or why the step was skipped.
    pub detail: Option<String>,
}

/// What a build bisection over toolchain releases found for one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TargetAnswer {
    /// The target.
    pub target: String,
    /// The first bad release, when pinned down.
    pub first_bad: Option<String>,
    /// The last good release before it.
    pub last_good: Option<String>,
    /// Releases that could not be told apart (all skipped), when not pinned down.
    pub undecided: Vec<String>,
    /// When this target has no transition in the range: what it does at both ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<String>,
}

/// A build bisection over toolchain releases (one search per target), recorded under
/// `bisections/` with `kind` `toolchain-bisection` and `mode` `build`, filed under its
/// `key`, and printed by `repro bisect --toolchains --mode build --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ToolchainBuildBisectRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// `toolchain-bisection`.
    pub kind: String,
    /// The recipe.
    pub recipe: String,
    /// `build`.
    pub mode: String,
    /// nvrtc or nvcc.
    pub family: String,
    /// The releases searched, oldest first (FROM..TO).
    pub releases: Vec<String>,
    /// Where the release list came from.
    pub releases_from: String,
    /// The commit held fixed (HEAD; the working tree is what is built).
    pub commit: Option<String>,
    /// Per target.
    pub answers: Vec<TargetAnswer>,
    /// Every evaluation, in order.
    pub steps: Vec<ReleaseStep>,
    /// The wheels each evaluated release was installed from, with their sha256.
    pub wheels: BTreeMap<String, Vec<InstalledWheel>>,
    /// When it was recorded (absent from records written before repro recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Which repro recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repro_version: Option<String>,
    /// Its ID: the sha256 of the question (recipe, mode, family, releases, commit and
    /// the steps' build keys), so that the same bisection asked again is filed once.
    pub key: String,
}

impl ToolchainBuildBisectRecord {
    /// Reads a build bisection over toolchain releases.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "toolchain-bisection")?;
        let r: Self = shape(v, what)?;
        Values { what }.created(r.created_at.as_deref())?;
        Ok(r)
    }

    /// Whether a record of `kind` `toolchain-bisection` is a build bisection (the check
    /// and bench ones are [`ToolchainBisectRecord`]s).
    pub fn is_build(v: &Value) -> bool {
        v.get("kind").and_then(Value::as_str) == Some("toolchain-bisection")
            && v.get("mode").and_then(Value::as_str) == Some("build")
    }

    /// Whether every target that changes in the range has its first bad release.
    pub fn found(&self) -> bool {
        self.answers
            .iter()
            .all(|a| a.unchanged.is_some() || a.first_bad.is_some())
    }
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

/// One evaluated commit, as a bisection's report lists it and an executor returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Step {
    /// Its position (0 = the older end).
    pub index: usize,
    /// The commit.
    pub commit: String,
    /// Its subject line.
    pub subject: String,
    /// good, bad or skip (in the terms of the question: for --find fixed, "bad" is the old state).
    pub verdict: Answer,
    /// Why, for bad and skip.
    pub detail: Option<String>,
    /// What the step had to do to test this commit (a moved source, fetched blobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Whether the answer came from the store.
    pub cached: bool,
    /// Bench: the median of the per-process medians.
    pub median: Option<f64>,
    /// Bench: ratio to the baseline and its interval.
    pub ratio: Option<(f64, f64, f64)>,
    /// Bench: p-value against the baseline.
    pub p: Option<f64>,
    /// Bench: processes measured.
    pub attempts: usize,
    /// Wall time of this step (ms).
    pub ms: f64,
    /// What the kernels of the step's build cost, in one line (`sm_90 k: 40 regs, ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<String>,
    /// Bench: where the samples were taken, as the executor names it ("GPU 1"). Two
    /// steps' samples are compared directly only when they name the same place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// Bench: the per-process medians (kept in the step record; the good end's are the
    /// baseline of every comparison, also when the bisection is resumed).
    #[serde(skip)]
    pub samples: Vec<f64>,
    /// Bench: the samples by the place that took them (one place, or one per GPU of a
    /// step spread over several): only samples of one place are ever compared.
    #[serde(skip)]
    pub by_place: BTreeMap<String, Vec<f64>>,
    /// Where the step ran as a cluster job: its id, queue wait, run time and GPU-hours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobUsage>,
    /// Where the step's time went (shown with `-v`; not stored).
    #[serde(skip)]
    pub times: StepTimes,
}

/// Where one step's wall time went: waiting for the build of the same commit that a
/// speculative build had begun, building (or finding the build in the store), and
/// measuring or checking on the GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepTimes {
    /// Waiting for a speculative build of this commit to finish, ms.
    pub wait_ms: f64,
    /// Building (a store hit included), ms.
    pub build_ms: f64,
    /// Running the check or the timing, ms.
    pub measure_ms: f64,
}

/// What a cluster job of one step cost, as the cluster's accounting (or, without it, its
/// controller) reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct JobUsage {
    /// The job id.
    pub id: String,
    /// Its final state (COMPLETED, ...).
    pub state: String,
    /// Where the figures come from: `sacct` or `scontrol`.
    pub source: String,
    /// Seconds from submission to start.
    pub queue_wait_s: f64,
    /// Seconds from start to end.
    pub run_s: f64,
    /// GPUs allocated.
    pub gpus: u64,
    /// GPUs × run time, in hours.
    pub gpu_hours: f64,
}

impl Step {
    /// A step not yet evaluated.
    pub fn new(index: usize, commit: git2::Oid, subject: String) -> Self {
        Step {
            index,
            commit: commit.to_string(),
            subject,
            verdict: Answer::Skip,
            detail: None,
            note: None,
            cached: false,
            median: None,
            ratio: None,
            p: None,
            attempts: 0,
            ms: 0.0,
            resources: None,
            placement: None,
            samples: Vec::new(),
            by_place: BTreeMap::new(),
            job: None,
            times: StepTimes::default(),
        }
    }
}

/// How a bisection's steps ran on a cluster: the part of its record that says where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ClusterRecord {
    /// `slurm`.
    pub executor: String,
    /// Jobs of their own, or steps of an allocation (in words).
    pub placement: String,
    /// The options every job was submitted with (the site's included).
    pub options: Vec<String>,
    /// The environment variables jobs were given (names).
    pub export: Vec<String>,
    /// What the jobs cost, all of them (the steps' and the lost ones'), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ClusterUsage>,
}

/// The cost of a bisection's jobs in total.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ClusterUsage {
    /// Jobs accounted.
    pub jobs: usize,
    /// `sacct`, `scontrol`, or both (`sacct+scontrol`).
    pub source: String,
    /// Seconds all jobs waited in the queue.
    pub queue_wait_s: f64,
    /// Seconds all jobs ran.
    pub run_s: f64,
    /// GPU-hours all jobs held.
    pub gpu_hours: f64,
}

impl ClusterUsage {
    /// The total of `jobs`; `None` when there are none.
    pub fn of<'a>(jobs: impl IntoIterator<Item = &'a JobUsage>) -> Option<ClusterUsage> {
        let mut sources = std::collections::BTreeSet::new();
        let mut u = ClusterUsage {
            jobs: 0,
            source: String::new(),
            queue_wait_s: 0.0,
            run_s: 0.0,
            gpu_hours: 0.0,
        };
        for j in jobs {
            u.jobs += 1;
            u.queue_wait_s += j.queue_wait_s;
            u.run_s += j.run_s;
            u.gpu_hours += j.gpu_hours;
            sources.insert(j.source.as_str());
        }
        u.source = sources.into_iter().collect::<Vec<_>>().join("+");
        (u.jobs > 0).then_some(u)
    }
}

/// A bisection whose driver was submitted as a Slurm job (`repro bisect --detach`):
/// `detached/ID.json`, written when it is submitted and again when it ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct DetachedRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// Its ID, given at submission (the finished bisection's record has its own).
    pub id: String,
    /// The driver's Slurm job.
    pub job: String,
    /// When it was submitted.
    pub submitted_at: String,
    /// The command the driver runs.
    pub command: Vec<String>,
    /// The driver's output (its step lines as they come).
    pub log: String,
    /// The finished bisection's record ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    /// The driver's exit code, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<u8>,
    /// Why it ended without a record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
    pub steps: Vec<Step>,
    /// Bench: the culprit re-checked against its parent.
    pub recheck: Option<Recheck>,
    /// Where the steps ran, for a bisection run on a cluster (`--executor slurm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterRecord>,
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
        let r: Self = shape(v, what)?;
        let values = Values { what };
        values.created(r.created_at.as_deref())?;
        values.steps(&r.steps)?;
        values.recheck(r.recheck.as_ref())?;
        Ok(r)
    }

    /// Reads a report as `repro bisect --json` writes it (not yet recorded: no `kind`).
    pub fn from_report(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        shape(v, what)
    }

    /// Bench: the ratio of the culprit's re-check against its parent.
    pub fn recheck_ratio(&self) -> Option<f64> {
        self.recheck.as_ref().map(|r| r.ratio)
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

    /// A result taken in bursts (graph mode) loads, its median the mean of its bursts'
    /// medians; bursts that do not cut its samples, or a summary of other bursts, are
    /// refused, naming the field.
    #[test]
    fn a_result_taken_in_bursts_loads_and_its_bursts_are_checked() {
        let v = fixture("result-bursts.json");
        let r = ResultRecord::from_json(&v, "r").unwrap();
        assert_eq!(r.burst_starts, [3, 6]);
        let want = (2.61 + 2.64 + 2.595) / 3.0;
        assert!(
            (r.median().unwrap() - want).abs() < 1e-12,
            "{:?}",
            r.median()
        );
        assert_eq!(to_json(&r), v);
        for (starts, field) in [
            (serde_json::json!([3, 9]), "burst-starts"),
            (serde_json::json!([6, 3]), "burst-starts"),
            (serde_json::json!([0]), "burst-starts"),
            (serde_json::json!([4, 6]), "summary"),
            (serde_json::json!([]), "summary"),
        ] {
            let mut v = fixture("result-bursts.json");
            v["burst-starts"] = starts.clone();
            let e = ResultRecord::from_json(&v, "results/x.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("`{field}`")), "{starts}: {e}");
        }
        // A value of the wrong type is named by its place in the record.
        for (starts, place) in [
            (serde_json::json!([1.5]), "`burst-starts[0]`: invalid type"),
            (
                serde_json::json!([3, -3]),
                "`burst-starts[1]`: invalid value",
            ),
            (serde_json::json!("3"), "`burst-starts`: invalid type"),
        ] {
            let mut v = fixture("result-bursts.json");
            v["burst-starts"] = starts.clone();
            let e = ResultRecord::from_json(&v, "results/x.json")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("results/x.json: {place}")),
                "{starts}: {e}"
            );
        }
    }

    /// A result whose fingerprint is another machine's hostile file is refused, naming the
    /// record and the fingerprint's key; one from another tool (`null`) reads as none.
    #[test]
    fn a_result_with_a_hostile_fingerprint_is_refused_naming_file_and_key() {
        let mut v = fixture("result-recipe.json");
        v["fingerprint"]["host"]["cpu"] = Value::from("x".repeat(100_000));
        let e = ResultRecord::from_json(&v, "results/0123abcd.json").unwrap_err();
        let e = format!("{e}");
        assert!(
            e.starts_with("results/0123abcd.json: fingerprint: `host.cpu` is 100000 bytes long"),
            "{e}"
        );
        let mut v = fixture("result-recipe.json");
        v["fingerprint"]["schema"] = Value::from("one");
        let e = ResultRecord::from_json(&v, "results/0123abcd.json").unwrap_err();
        assert!(
            format!("{e}").contains("results/0123abcd.json: fingerprint: missing `schema`"),
            "{e}"
        );
        let mut v = fixture("result-recipe.json");
        v["fingerprint"] = Value::Null;
        let r = ResultRecord::from_json(&v, "r").unwrap();
        assert!(r.fingerprint.is_none());
        assert_eq!(to_json(&r), v);
        let r = ResultRecord::from_json(&fixture("result-recipe.json"), "r").unwrap();
        assert_eq!(r.fingerprint_field("host.arch"), Some("x86_64"));
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
        for name in ["bisection.json", "bisection-slurm.json"] {
            let v = fixture(name);
            assert_eq!(
                to_json(&BisectRecord::from_json(&v, name).unwrap()),
                v,
                "{name}"
            );
        }
        let v = fixture("step.json");
        assert_eq!(to_json(&StepRecord::from_json(&v, "s").unwrap()), v);
        // A build with its resource report and broken budgets, and a profile.
        let v = fixture("build-resources.json");
        let b = BuildRecord::from_json(&v, "b").unwrap();
        assert_eq!(to_json(&b), v);
        let res = b.resources.unwrap();
        assert_eq!(res.targets[0].arch, "sm_90");
        assert!(
            res.targets[0]
                .kernels
                .iter()
                .any(|k| k.name == "vector_add" && k.registers > 0)
        );
        assert_eq!(res.occupancy[0].occupancy.warps_per_sm, 64);
        assert_eq!(b.over_budget.len(), 1);
        let v = fixture("profile.json");
        let p = ProfileRecord::from_json(&v, "p").unwrap();
        assert_eq!(to_json(&p), v);
        assert_eq!(p.value("dram__bytes.sum.per_second"), Some(4301755321321.5));
        assert_eq!(
            p.value("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"),
            None
        );
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
        assert_eq!(r.launch.as_ref().unwrap().shared_mem, 0);
        // Records written before the launch's keys were kebab-case still read.
        let mut old = fixture("result-recipe.json");
        old["launch"] = serde_json::json!({"kernel": "k", "grid": [1, 1, 1], "block": [1, 1, 1], "shared_mem": 96});
        let o = ResultRecord::from_json(&old, "old").unwrap();
        assert_eq!(o.launch.unwrap().shared_mem, 96);
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
    fn explanations_name_what_changed() {
        let old: BuildInputs = serde_json::from_value(serde_json::json!({"schema": 1, "build": {"options": ["-O3"], "target": "sm_90"}, "files": {"a.cu": "1", "b.h": "2"}, "compiler": {"name": "nvrtc", "version": "13.0"}})).unwrap();
        let new: BuildInputs = serde_json::from_value(serde_json::json!({"schema": 1, "build": {"options": [], "target": "sm_90"}, "files": {"a.cu": "1", "b.h": "3", "c.h": "4"}, "compiler": {"name": "nvrtc", "version": "13.1"}})).unwrap();
        assert_eq!(
            old.explain(&new),
            [
                "recipe: `options` changed from [\"-O3\"] to []",
                "file b.h changed",
                "file c.h is a new input",
                "compiler changed: nvrtc 13.0 -> nvrtc 13.1",
            ]
        );
    }

    #[test]
    fn hostile_records_are_refused_naming_what_is_wrong() {
        let mut v = fixture("build-ok.json");
        v["schema"] = serde_json::json!(2);
        let e = BuildRecord::from_json(&v, "builds/x.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("builds/x.json has schema 2"), "{e}");
        let v = fixture("result-command.json");
        let e = BuildRecord::from_json(&v, "x").unwrap_err().to_string();
        assert!(e.contains("is a result record, not a build record"), "{e}");
        let mut v = fixture("result-command.json");
        v["verdict"] = serde_json::json!("great");
        let e = ResultRecord::from_json(&v, "r.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("r.json: `verdict`: unknown variant `great`"),
            "{e}"
        );
        let mut v = fixture("build-ok.json");
        v["outputs"]["ptx"]["bytes"] = serde_json::json!(-1);
        assert!(BuildRecord::from_json(&v, "x").is_err());
        let mut v = fixture("bisection.json");
        v.as_object_mut().unwrap().remove("outcome");
        let e = BisectRecord::from_json(&v, "x").unwrap_err().to_string();
        assert!(e.contains("missing field `outcome`"), "{e}");
    }

    #[test]
    fn forged_values_are_refused_naming_the_field() {
        let refused = |file: &str, edit: &dyn Fn(&mut Value)| {
            let mut v = fixture(file);
            edit(&mut v);
            let e = match file {
                f if f.starts_with("result") => ResultRecord::from_json(&v, "r").map(|_| ()),
                f if f.starts_with("build") => BuildRecord::from_json(&v, "r").map(|_| ()),
                "step.json" => StepRecord::from_json(&v, "r").map(|_| ()),
                _ => BisectRecord::from_json(&v, "r").map(|_| ()),
            };
            match e {
                Err(e @ RecordError::Invalid { .. }) => e.to_string(),
                other => panic!("{file}: {other:?}"),
            }
        };
        for file in ["result-recipe.json", "result-command.json"] {
            let e = refused(file, &|v| v["summary"]["median"] = serde_json::json!(-5.0));
            assert!(e.contains("`summary` has median -5"), "{e}");
            let e = refused(file, &|v| {
                v["summary"]["ci-low"] = serde_json::json!(-1e300)
            });
            assert!(e.contains("`summary` has the interval"), "{e}");
            let e = refused(file, &|v| v["created-at"] = serde_json::json!("9999-99-99"));
            assert!(
                e.contains("`created-at` is \"9999-99-99\", not an RFC 3339"),
                "{e}"
            );
            let e = refused(file, &|v| v["samples"][0] = serde_json::json!(-1.0));
            assert!(e.contains("`samples` has a sample of -1"), "{e}");
            let e = refused(file, &|v| {
                v.as_object_mut().unwrap().remove("summary");
            });
            assert!(e.contains("`summary` is missing, with"), "{e}");
            let e = refused(file, &|v| v["commit"] = serde_json::json!("../../etc"));
            assert!(
                e.contains("`commit` is \"../../etc\", not a 40-digit hex commit"),
                "{e}"
            );
            let e = refused(file, &|v| {
                v["key"] = serde_json::json!("../../../etc/passwd")
            });
            assert!(
                e.contains("`key` is \"../../../etc/passwd\", not a 64-digit"),
                "{e}"
            );
        }
        let e = refused("result-command.json", &|v| {
            v["wall-s"][0] = serde_json::json!(-2.0)
        });
        assert!(e.contains("`wall-s` is -2"), "{e}");
        let e = refused("result-recipe.json", &|v| {
            v["timing-settings"] = serde_json::json!({"LD_PRELOAD": "/tmp/x.so"})
        });
        assert!(e.contains("`timing-settings` holds \"LD_PRELOAD\""), "{e}");
        let e = refused("result-recipe.json", &|v| {
            v["timing-settings"] = serde_json::json!({"REPRO_TIMING_DIAG": "x".repeat(300)})
        });
        assert!(e.contains("`timing-settings`"), "{e}");
        let many: serde_json::Map<String, Value> = (0..17)
            .map(|i| (format!("REPRO_TIMING_{i}"), serde_json::json!("1")))
            .collect();
        let e = refused("result-recipe.json", &|v| {
            v["timing-settings"] = Value::Object(many.clone())
        });
        assert!(e.contains("more than 16 entries"), "{e}");
        let e = refused("build-ok.json", &|v| {
            v["duration-ms"] = serde_json::json!(-1.0)
        });
        assert!(e.contains("`duration-ms` is -1"), "{e}");
        let e = refused("build-ok.json", &|v| {
            v["created-at"] = serde_json::json!("yesterday")
        });
        assert!(e.contains("`created-at`"), "{e}");
        let e = refused("step.json", &|v| v["p"] = serde_json::json!(7.0));
        assert!(e.contains("`p` is 7"), "{e}");
        let e = refused("bisection.json", &|v| {
            v["created-at"] = serde_json::json!("2026-13-01T00:00:00Z")
        });
        assert!(e.contains("`created-at`"), "{e}");
    }
}

// ---------------------------------------------------------------------------------------
// Profiles

/// One metric Nsight Compute measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ProfileMetric {
    /// Its value, when it is a number.
    pub value: Option<f64>,
    /// Its text, when it is not (`n/a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its unit as ncu names it (`byte/second`, `%`, `nsecond`).
    pub unit: String,
}

/// A profile: `profiles/ID.json`, the recipe's checked launch run once under Nsight Compute,
/// keyed like a result (build key, must-match fingerprint, parameters) and by ncu's version,
/// section set, metrics and cache control; the `.ncu-rep` report is an output in the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ProfileRecord {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// Always `profile`.
    pub kind: String,
    /// The experiment key: the sha256 of what was profiled, on what, how.
    pub key: String,
    /// The recipe.
    pub recipe: String,
    /// The recipe file.
    pub recipe_path: String,
    /// The build.
    pub build_key: String,
    /// The kernel profiled (its symbol).
    pub kernel: String,
    /// The parameter point.
    pub params: BTreeMap<String, Value>,
    /// The must-match part of the fingerprint.
    pub must_match: Value,
    /// The GPU's name.
    pub machine: String,
    /// ncu's version.
    pub ncu_version: String,
    /// `--set`, if given.
    pub set: Option<String>,
    /// `--cache-control`.
    pub cache_control: String,
    /// The metrics asked for, in order.
    pub requested: Vec<String>,
    /// What ncu measured, by metric name.
    pub metrics: BTreeMap<String, ProfileMetric>,
    /// The report file (`ncu-rep`) in the store.
    pub outputs: BTreeMap<String, OutputRef>,
    /// The commit of the tree.
    pub commit: Option<String>,
    /// When.
    pub created_at: String,
    /// Which repro.
    pub repro_version: String,
}

impl ProfileRecord {
    /// Reads a profile record.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, RecordError> {
        check_schema(v, what)?;
        check_kind(v, what, "profile")?;
        shape(v, what)
    }

    /// A metric's value, if it is a number.
    pub fn value(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).and_then(|m| m.value)
    }
}
