//! Fingerprints: a versioned record of the machine and the repository, in milliseconds.
//!
//! A fingerprint is a flat map of dotted keys (see [`crate::foundation::fields`]) to values. Each probe
//! (one per source: GPU, driver, toolchain, host, git, nix, environment) runs in its own
//! thread with its own time budget, and a probe that cannot answer records why
//! (`unavailable`) instead of failing the capture. The JSON form nests the keys into
//! sections and is the stable, versioned machine form (`schema = 1`).

pub mod cuda;
pub mod host;
pub mod nix;
pub mod nvml;
pub mod python;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Map, Value};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::fields::{self, Kind, Probe};
pub use crate::foundation::fields::{Field, Fields};
use crate::foundation::git;
#[cfg(test)]
use crate::foundation::version::version_token;

/// The fingerprint schema this build writes and reads.
pub const SCHEMA: u64 = 1;

/// A fingerprint of this machine and repository.
#[derive(Clone, Debug, PartialEq)]
pub struct Fingerprint {
    /// The repro version that captured it.
    pub repro_version: String,
    /// When it was captured (RFC 3339, UTC). Volatile: never part of a key.
    pub captured_at: String,
    /// Wall time of each probe in milliseconds. Volatile: never part of a key.
    pub probe_ms: BTreeMap<String, f64>,
    /// The fields. A key naming a whole section (`gpu`) marks it unavailable.
    pub fields: Fields,
}

/// Everything a capture needs to know about where it runs.
#[derive(Clone, Debug)]
pub struct Context {
    /// The directory repro acts in (after `-C`).
    pub cwd: PathBuf,
    /// Probe GPU devices afresh (`cuInit`) instead of using the per-boot cache.
    pub fresh: bool,
    /// `--python`: the interpreter to describe (absolute); `None` chooses as
    /// [`crate::foundation::pyenv::locate`] does.
    pub python: Option<PathBuf>,
}

/// Which probes to run, and which NVML fields to ask for (each NVML query costs about a
/// millisecond on Hopper, so a check asks only for the fields its lockfile checks).
#[derive(Clone, Debug, Default)]
pub struct Demand {
    probes: BTreeSet<Probe>,
    nvml: BTreeSet<&'static str>,
}

impl Demand {
    /// Every probe: what `env capture` and `env lock` run.
    pub fn all() -> Self {
        Demand {
            probes: fields::SPECS
                .iter()
                .map(|s| s.probe)
                .chain([Probe::Env])
                .collect(),
            nvml: nvml::all_names().into_iter().collect(),
        }
    }
    /// Only the probes needed to answer these lockfile keys.
    pub fn for_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut d = Demand::default();
        for key in keys {
            let probe = fields::probe_of(key);
            if probe == Probe::Nvml
                && let Some(spec) = fields::lookup(key)
            {
                d.nvml.insert(&spec.key["gpu.".len()..]);
            }
            d.probes.insert(probe);
        }
        // NVML results are matched to CUDA devices by UUID, so NVML needs the CUDA probe.
        if d.probes.contains(&Probe::Nvml) {
            d.probes.insert(Probe::CudaDevices);
        }
        d
    }
    /// Whether a probe is demanded.
    pub fn has(&self, p: Probe) -> bool {
        self.probes.contains(&p)
    }
    /// The NVML fields demanded (names under `gpu.`).
    pub fn nvml_fields(&self) -> Vec<&'static str> {
        self.nvml.iter().copied().collect()
    }
}

/// A probe to run: its name (`probe-ms`'s key) and the work.
type Job<'a> = (String, Box<dyn FnOnce() -> Fields + Send + 'a>);

/// Runs the demanded probes in parallel and assembles the fingerprint.
pub fn capture(ctx: &Context, demand: &Demand) -> Fingerprint {
    let nvml_wanted = demand.nvml_fields();
    let (mut fields, probe_ms, nvml_fields) = run_jobs(probe_jobs(ctx, demand));
    if let Some(nvml) = nvml_fields {
        nvml::merge(&mut fields, nvml, &nvml_wanted);
    }
    Fingerprint {
        repro_version: env!("CARGO_PKG_VERSION").to_string(),
        captured_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        probe_ms,
        fields,
    }
}

/// The demanded probes, each as a job.
fn probe_jobs<'a>(ctx: &'a Context, demand: &'a Demand) -> Vec<Job<'a>> {
    let repo_root = git::discover_root(&ctx.cwd);
    let project_root = repo_root.clone().unwrap_or_else(|| ctx.cwd.clone());
    // The toolchain fields report what this project's builds would use, which its pins
    // decide. A repro.toml that cannot be read pins nothing here; the commands that use
    // the pins report it.
    let config = crate::foundation::config::load(&project_root).unwrap_or_default();
    let pins = crate::engines::toolchain::Pins::of(&config.toolchain);
    let python_config = config.python.interpreter_at(&project_root);
    let mut jobs: Vec<Job<'a>> = Vec::new();
    let d = |p| demand.has(p);

    // The CUDA device probe and NVML both take tens of milliseconds on a real GPU machine;
    // they run side by side and are merged by UUID afterwards.
    if d(Probe::CudaDevices) {
        if ctx.fresh {
            jobs.push(("cuda".into(), Box::new(cuda::probe_devices_fresh)));
        } else {
            jobs.push(("cuda".into(), Box::new(cuda::probe_devices_cached)));
        }
    }
    if d(Probe::Driver) {
        let fresh = ctx.fresh;
        jobs.push((
            "driver".into(),
            Box::new(move || cuda::probe_driver_cached(fresh)),
        ));
    }
    if d(Probe::Nvml) {
        let wanted = demand.nvml_fields();
        let fresh = ctx.fresh;
        jobs.push(("nvml".into(), Box::new(move || nvml::probe(&wanted, fresh))));
    }
    if d(Probe::Nvrtc) {
        let pins = pins.clone();
        jobs.push(("nvrtc".into(), Box::new(move || probe_nvrtc_cached(&pins))));
    }
    if d(Probe::Nvcc) {
        let pins = pins.clone();
        jobs.push(("nvcc".into(), Box::new(move || probe_nvcc_cached(&pins))));
    }
    if d(Probe::Host) {
        jobs.push(("host".into(), Box::new(host::probe)));
    }
    for spec in fields::SPECS {
        if let Probe::Tool(tool) = spec.probe
            && d(spec.probe)
        {
            let key = spec.key;
            jobs.push((
                format!("tool:{tool}"),
                Box::new(move || host::probe_tool_cached(key, tool)),
            ));
        }
    }
    if d(Probe::Git) {
        let cwd = ctx.cwd.clone();
        jobs.push(("git".into(), Box::new(move || git::probe(&cwd))));
    }
    if d(Probe::Nix) {
        let root = project_root.clone();
        jobs.push(("nix".into(), Box::new(move || nix::probe(&root))));
    }
    if d(Probe::NixVersion) {
        jobs.push(("nix-version".into(), Box::new(nix::probe_version)));
    }
    if d(Probe::Env) {
        jobs.push(("env".into(), Box::new(probe_env)));
    }
    if d(Probe::Python) {
        let flag = ctx.python.clone();
        jobs.push((
            "python".into(),
            Box::new(move || python::probe(flag.as_deref(), python_config.as_deref())),
        ));
    }

    jobs
}

/// Runs the jobs side by side: the fields of all but NVML, each probe's milliseconds, and
/// NVML's answers (merged onto the CUDA devices by UUID afterwards).
fn run_jobs(jobs: Vec<Job<'_>>) -> (Fields, BTreeMap<String, f64>, Option<Fields>) {
    let mut fields = Fields::new();
    let mut probe_ms = BTreeMap::new();
    let mut nvml_fields = None;
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(name, job)| {
                let h = scope.spawn(move || {
                    let start = Instant::now();
                    let out = job();
                    (out, start.elapsed().as_secs_f64() * 1e3)
                });
                (name, h)
            })
            .collect();
        for (name, h) in handles {
            let (out, ms) = h.join().unwrap_or_else(|_| {
                let mut f = Fields::new();
                f.insert(
                    format!("probe.{name}"),
                    Field::Unavailable("the probe panicked".into()),
                );
                (f, 0.0)
            });
            probe_ms.insert(name.clone(), (ms * 1000.0).round() / 1000.0);
            if name == "nvml" {
                nvml_fields = Some(out);
            } else {
                fields.extend(out);
            }
        }
    });
    (fields, probe_ms, nvml_fields)
}

/// The NVRTC fields, without loading NVRTC when the same library answered before: loading
/// it (about 100 MB with its builtins) costs more than the rest of `env check`. The answer
/// is cached under the library's path, size, modification time and inode (the stamp build
/// keys use for its identity), so another or a replaced library is loaded and asked again.
fn probe_nvrtc_cached(pins: &crate::engines::toolchain::Pins) -> Fields {
    use std::os::unix::fs::MetadataExt;
    let stamp = crate::engines::toolchain::find_nvrtc(pins)
        .ok()
        .and_then(|found| {
            let meta = std::fs::metadata(&found.path).ok()?;
            Some(format!(
                "{}|{}|{}|{}|{}",
                found.path.display(),
                found.source,
                meta.len(),
                meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
                meta.ino()
            ))
        });
    let path = crate::foundation::fsutil::cache_dir().map(|d| d.join("nvrtc-version.json"));
    let (Some(stamp), Some(path)) = (stamp, path) else {
        return crate::engines::toolchain::probe_nvrtc(pins);
    };
    if let Some(hit) = cuda::read_cache(&path, &stamp) {
        return hit;
    }
    let fields = crate::engines::toolchain::probe_nvrtc(pins);
    cuda::write_cache(&path, &stamp, &fields);
    fields
}

/// The nvcc fields. The project's pinned nvcc, when installed, answers from its install
/// stamp; otherwise the machine's nvcc would be started (`nvcc --version`, a few
/// milliseconds), so its answer is cached under the binary found (its path, the file it
/// resolves to, size, times and inode): another or a replaced nvcc is asked again.
fn probe_nvcc_cached(pins: &crate::engines::toolchain::Pins) -> Fields {
    if let Some(f) = crate::engines::toolchain::probe_pinned_nvcc(pins) {
        return f;
    }
    let found = crate::engines::toolchain::find_nvcc();
    let stamp = found.as_deref().and_then(host::file_stamp);
    let path = crate::foundation::fsutil::cache_dir().map(|d| d.join("nvcc-version.json"));
    let (Some(found), Some(stamp), Some(path)) = (found, stamp, path) else {
        return crate::engines::toolchain::probe_nvcc(pins);
    };
    let at = Field::Value(found.display().to_string());
    if let Some(hit) = cuda::read_cache(&path, &stamp)
        && hit.get("toolchain.nvcc.path") == Some(&at)
    {
        return hit;
    }
    let fields = crate::engines::toolchain::probe_nvcc(pins);
    // Only the answer of the nvcc the stamp names, and only a version (a failed or timed
    // out run is asked again next time).
    if fields.get("toolchain.nvcc.path") == Some(&at)
        && fields
            .get("toolchain.nvcc.version")
            .is_some_and(|v| v.value().is_some())
    {
        cuda::write_cache(&path, &stamp, &fields);
    }
    fields
}

fn probe_env() -> Fields {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.into_string().ok()?;
            fields::env_allowed(&k).then(|| {
                (
                    format!("env.{k}"),
                    Field::Value(v.to_string_lossy().into_owned()),
                )
            })
        })
        .collect()
}

impl Fingerprint {
    /// The values of a lockfile key: one per GPU for per-device fields, else one.
    /// A field that was not probed, or whose section is unavailable, is `Unavailable`.
    pub fn lookup(&self, lock_key: &str) -> Vec<Field> {
        if let Some(spec) = fields::lookup(lock_key)
            && spec.per_device()
        {
            let count = self.fields.get("gpu.count").and_then(Field::value);
            return match count.and_then(|c| c.parse::<usize>().ok()) {
                Some(n) if n > 0 => (0..n).map(|i| self.get(&spec.device_key(i))).collect(),
                Some(_) => vec![Field::Unavailable("no GPU is visible to CUDA".into())],
                None => vec![self.get(lock_key)],
            };
        }
        if let Some(name) = fields::dist_name(lock_key)
            && !self.fields.contains_key(lock_key)
            && self.fields.contains_key("python.prefix")
        {
            return vec![Field::Unavailable(format!("{name} is not installed"))];
        }
        if let Some(name) = lock_key.strip_prefix("env.")
            && !self.fields.contains_key(lock_key)
            && self.probed("env")
        {
            return vec![Field::Unavailable(format!("{name} is not set"))];
        }
        vec![self.get(lock_key)]
    }

    fn probed(&self, probe: &str) -> bool {
        self.probe_ms.contains_key(probe)
    }

    /// One field by fingerprint key; a missing key is explained by the nearest unavailable
    /// section above it, or as not probed.
    pub fn get(&self, key: &str) -> Field {
        if let Some(f) = self.fields.get(key) {
            return f.clone();
        }
        let mut prefix = key;
        while let Some((head, _)) = prefix.rsplit_once('.') {
            if let Some(Field::Unavailable(r)) = self.fields.get(head) {
                return Field::Unavailable(r.clone());
            }
            prefix = head;
        }
        Field::Unavailable("not probed".into())
    }

    /// The JSON form: `schema`, metadata, then sections nested from the dotted keys.
    pub fn to_json(&self) -> Value {
        let mut root = Map::new();
        root.insert("schema".into(), Value::from(SCHEMA));
        root.insert(
            "repro-version".into(),
            Value::from(self.repro_version.clone()),
        );
        root.insert("captured-at".into(), Value::from(self.captured_at.clone()));
        root.insert(
            "probe-ms".into(),
            Value::Object(
                self.probe_ms
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from(*v)))
                    .collect(),
            ),
        );
        let mut tree = Value::Object(Map::new());
        for (key, field) in &self.fields {
            let leaf = match field {
                Field::Value(v) => typed_json(key, v),
                Field::Unavailable(r) => Value::Object(
                    [("unavailable".to_string(), Value::from(r.clone()))]
                        .into_iter()
                        .collect(),
                ),
            };
            insert_path(&mut tree, key, leaf);
        }
        if let Value::Object(sections) = arrays_from_indices(tree) {
            root.extend(sections);
        }
        Value::Object(root)
    }

    /// Reads the JSON form back, checking its schema.
    pub fn from_json(value: &Value) -> Result<Self, FingerprintJsonError> {
        let obj = value.as_object().ok_or(FingerprintJsonError::NotAnObject)?;
        let schema = obj
            .get("schema")
            .and_then(Value::as_u64)
            .ok_or(FingerprintJsonError::NoSchema)?;
        if schema > SCHEMA {
            return Err(FingerprintJsonError::Newer { schema });
        }
        let text = |k: &str| {
            obj.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let probe_ms = obj
            .get("probe-ms")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                    .collect()
            })
            .unwrap_or_default();
        let mut fields = Fields::new();
        for (k, v) in obj {
            if !["schema", "repro-version", "captured-at", "probe-ms"].contains(&k.as_str()) {
                flatten_json(k, v, &mut fields)?;
            }
        }
        Ok(Fingerprint {
            repro_version: text("repro-version"),
            captured_at: text("captured-at"),
            probe_ms,
            fields,
        })
    }

    /// Loads a fingerprint written by `repro env capture -o FILE`.
    pub fn load(path: &Path) -> Result<Self, FingerprintFileError> {
        let err = |reason: String| FingerprintFileError {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| err(format!("line {}, column {}: {e}", e.line(), e.column())))?;
        Self::from_json(&value).map_err(|e| err(e.to_string()))
    }
}

impl serde::Serialize for Fingerprint {
    /// The JSON form ([`Fingerprint::to_json`]): a fingerprint is a type wherever it is
    /// written, with one serialisation.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Fingerprint {
    /// Reads the JSON form back with its checks ([`Fingerprint::from_json`]).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Fingerprint::from_json(&v).map_err(serde::de::Error::custom)
    }
}

/// Why a JSON value is not a fingerprint.
#[derive(Debug, thiserror::Error)]
pub enum FingerprintJsonError {
    /// Not an object.
    #[error("expected a JSON object")]
    NotAnObject,
    /// No `schema`.
    #[error("missing `schema`")]
    NoSchema,
    /// Written by a newer repro.
    #[error("schema {schema} is newer than this repro understands ({SCHEMA}); upgrade repro")]
    Newer {
        /// The value's schema.
        schema: u64,
    },
    /// A field is null.
    #[error("`{key}` is null")]
    Null {
        /// The field's key.
        key: String,
    },
}

/// A fingerprint file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read fingerprint {}: {reason}", .path.display())]
pub struct FingerprintFileError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

impl Diagnose for FingerprintFileError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        Some("write one with `repro env capture -o FILE`".into())
    }
}

/// The registry kind of a fingerprint key (device keys map back to their lockfile key).
fn kind_of_fingerprint_key(key: &str) -> Kind {
    if let Some(rest) = key.strip_prefix("gpu.devices.")
        && let Some((_, field)) = rest.split_once('.')
    {
        return fields::kind_of(&format!("gpu.{field}"));
    }
    fields::kind_of(key)
}

fn typed_json(key: &str, v: &str) -> Value {
    match kind_of_fingerprint_key(key) {
        Kind::Number => v
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| v.parse::<f64>().map(Value::from))
            .unwrap_or_else(|_| Value::from(v)),
        Kind::Bool => match v {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => Value::from(v),
        },
        _ => Value::from(v),
    }
}

fn insert_path(tree: &mut Value, key: &str, leaf: Value) {
    // Environment variable names are leaves of their own and never split.
    let parts: Vec<&str> = match key.strip_prefix("env.") {
        Some(name) => vec!["env", name],
        None => key.split('.').collect(),
    };
    let mut node = tree;
    for (i, part) in parts.iter().enumerate() {
        let map = match node {
            Value::Object(m) => m,
            other => {
                // A section marked unavailable that also has children cannot happen; keep
                // the children and drop the marker rather than lose data.
                *other = Value::Object(Map::new());
                other.as_object_mut().expect("just made an object")
            }
        };
        if i + 1 == parts.len() {
            map.insert(part.to_string(), leaf);
            return;
        }
        node = map
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Turns objects whose keys are exactly 0..n into arrays (the device list).
fn arrays_from_indices(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let is_list = !m.is_empty() && (0..m.len()).all(|i| m.contains_key(&i.to_string()));
            if is_list {
                let mut m = m;
                Value::Array(
                    (0..m.len())
                        .map(|i| arrays_from_indices(m.remove(&i.to_string()).expect("checked")))
                        .collect(),
                )
            } else {
                Value::Object(
                    m.into_iter()
                        .map(|(k, v)| (k, arrays_from_indices(v)))
                        .collect(),
                )
            }
        }
        other => other,
    }
}

fn flatten_json(prefix: &str, v: &Value, out: &mut Fields) -> Result<(), FingerprintJsonError> {
    match v {
        Value::Object(m) if m.len() == 1 && m.get("unavailable").is_some_and(Value::is_string) => {
            let r = m["unavailable"].as_str().expect("checked").to_string();
            out.insert(prefix.to_string(), Field::Unavailable(r));
        }
        Value::Object(m) => {
            for (k, v) in m {
                flatten_json(&format!("{prefix}.{k}"), v, out)?;
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten_json(&format!("{prefix}.{i}"), v, out)?;
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), Field::Value(s.clone()));
        }
        Value::Number(n) => {
            out.insert(prefix.to_string(), Field::Value(n.to_string()));
        }
        Value::Bool(b) => {
            out.insert(prefix.to_string(), Field::Value(b.to_string()));
        }
        Value::Null => {
            return Err(FingerprintJsonError::Null {
                key: prefix.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Fingerprint {
        let mut fields = Fields::new();
        for (k, v) in [
            ("gpu.count", "2"),
            ("gpu.devices.0.name", "NVIDIA H200"),
            ("gpu.devices.1.name", "NVIDIA H200"),
            ("gpu.devices.0.ecc", "true"),
            ("driver.version", "580.159.04"),
            ("env.CUDA_VISIBLE_DEVICES", "0,1"),
        ] {
            fields.insert(k.into(), Field::Value(v.into()));
        }
        fields.insert("nix".into(), Field::Unavailable("no flake here".into()));
        Fingerprint {
            repro_version: "0.1.0".into(),
            captured_at: "2026-01-01T00:00:00Z".into(),
            probe_ms: [("gpu".to_string(), 1.5)].into_iter().collect(),
            fields,
        }
    }

    #[test]
    fn json_round_trips_and_is_typed() {
        let fp = sample();
        let json = fp.to_json();
        assert_eq!(json["gpu"]["count"], Value::from(2));
        assert_eq!(
            json["gpu"]["devices"][1]["name"],
            Value::from("NVIDIA H200")
        );
        assert_eq!(json["gpu"]["devices"][0]["ecc"], Value::Bool(true));
        assert_eq!(json["nix"]["unavailable"], Value::from("no flake here"));
        assert_eq!(json["env"]["CUDA_VISIBLE_DEVICES"], Value::from("0,1"));
        assert_eq!(Fingerprint::from_json(&json).unwrap(), fp);
    }

    #[test]
    fn newer_schema_is_refused() {
        let mut json = sample().to_json();
        json["schema"] = Value::from(SCHEMA + 1);
        assert!(
            Fingerprint::from_json(&json)
                .unwrap_err()
                .to_string()
                .contains("newer")
        );
    }

    #[test]
    fn lookup_expands_devices_and_explains_sections() {
        let fp = sample();
        assert_eq!(fp.lookup("gpu.name").len(), 2);
        assert_eq!(
            fp.lookup("nix.flake-lock-digest"),
            vec![Field::Unavailable("no flake here".into())]
        );
        assert_eq!(
            fp.lookup("host.kernel"),
            vec![Field::Unavailable("not probed".into())]
        );
    }

    #[test]
    fn version_tokens() {
        assert_eq!(
            version_token("gcc (Debian 12.2.0-14+deb12u1) 12.2.0").as_deref(),
            Some("12.2.0-14+deb12u1")
        );
        assert_eq!(
            version_token("rustc 1.95.0 (59807616e 2026-04-14)").as_deref(),
            Some("1.95.0")
        );
        assert_eq!(version_token("Python 3.11.7").as_deref(), Some("3.11.7"));
        assert_eq!(
            version_token("Cuda compilation tools, release 13.0, V13.0.88").as_deref(),
            Some("13.0")
        );
        assert_eq!(version_token("nix (Nix) 2.8.0").as_deref(), Some("2.8.0"));
        assert_eq!(version_token("no version here"), None);
    }
}
