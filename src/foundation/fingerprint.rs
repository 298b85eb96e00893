//! A fingerprint as data: the type every record that holds one uses (results, bundles,
//! replay), its versioned JSON form (`schema = 1`: sections nested from the dotted keys of
//! [`crate::foundation::fields`]), and the checks that make a fingerprint from another
//! machine's file safe to use: every member of the right type, no null, bounded strings,
//! keys and field counts, each problem named with its key. Capturing one is
//! `engines::fingerprint`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::fields::{self, Field, Fields, Kind};

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

    /// The value of a field that was probed and answered (`driver.version`).
    pub fn value(&self, key: &str) -> Option<&str> {
        match self.fields.get(key) {
            Some(Field::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// The Python distributions recorded (`python.dist.NAME`), as (name, version).
    pub fn python_dists(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().filter_map(|(k, f)| match f {
            Field::Value(v) => Some((k.strip_prefix("python.dist.")?, v.as_str())),
            Field::Unavailable(_) => None,
        })
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
        let text = |k: &str| -> Result<String, FingerprintJsonError> {
            match obj.get(k) {
                None => Ok(String::new()),
                Some(Value::String(t)) => bounded(k, t).map(str::to_string),
                Some(other) => Err(wrong_type(k, other, "a string")),
            }
        };
        let probe_ms = match obj.get("probe-ms") {
            None => BTreeMap::new(),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| {
                    let key = format!("probe-ms.{k}");
                    bounded(&key, k)?;
                    match v.as_f64() {
                        Some(ms) if ms.is_finite() => Ok((k.clone(), ms)),
                        _ => Err(wrong_type(&key, v, "a number")),
                    }
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err(wrong_type("probe-ms", other, "an object")),
        };
        let mut fields = Fields::new();
        for (k, v) in obj {
            if !["schema", "repro-version", "captured-at", "probe-ms"].contains(&k.as_str()) {
                flatten_json(k, v, 0, &mut fields)?;
            }
        }
        Ok(Fingerprint {
            repro_version: text("repro-version")?,
            captured_at: text("captured-at")?,
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
        // Every field at its longest, with room for the JSON around it.
        let bytes = crate::foundation::fsutil::read_bounded(path, 64 << 20)
            .map_err(|e| err(e.to_string()))?;
        let value: Value = serde_json::from_slice(&bytes)
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
        Fingerprint::from_json(&v)
            .map_err(|e| serde::de::Error::custom(format!("fingerprint: {e}")))
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
    /// A member has the wrong type.
    #[error("`{key}` is {found}, not {expected}")]
    Type {
        /// The member's key.
        key: String,
        /// What it is (`a number`).
        found: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A key or a value is longer than any fingerprint writes.
    #[error("`{key}` is {len} bytes long; a fingerprint's keys and values are at most {max}")]
    TooLong {
        /// The key (its first 64 bytes when the key itself is too long).
        key: String,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// More fields, or deeper nesting, than any fingerprint has.
    #[error("more than {max} fields or {depth} levels of sections (at `{key}`)")]
    TooBig {
        /// Where the bound was met.
        key: String,
        /// The bound on fields.
        max: usize,
        /// The bound on depth.
        depth: usize,
    },
}

/// The longest key or value read (a whole environment variable's value fits).
pub const MAX_TEXT: usize = 64 << 10;
/// The most fields read (a machine with 64 GPUs and 2,000 Python distributions has far
/// fewer).
pub const MAX_FIELDS: usize = 20_000;
/// The deepest nesting of sections read (`gpu.devices.0.name` is 4).
pub const MAX_DEPTH: usize = 8;

/// `t`, the key or value at `key`, if it is within [`MAX_TEXT`].
fn bounded<'a>(key: &str, t: &'a str) -> Result<&'a str, FingerprintJsonError> {
    if key.len() > MAX_TEXT || t.len() > MAX_TEXT {
        let shown: String = key.chars().take(64).collect();
        return Err(FingerprintJsonError::TooLong {
            key: shown,
            len: key.len().max(t.len()),
            max: MAX_TEXT,
        });
    }
    Ok(t)
}

/// The error for a member at `key` that is not what it must be.
fn wrong_type(key: &str, v: &Value, expected: &'static str) -> FingerprintJsonError {
    let found = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    FingerprintJsonError::Type {
        key: key.chars().take(64).collect(),
        found,
        expected,
    }
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

fn flatten_json(
    prefix: &str,
    v: &Value,
    depth: usize,
    out: &mut Fields,
) -> Result<(), FingerprintJsonError> {
    bounded(prefix, "")?;
    if depth > MAX_DEPTH || out.len() >= MAX_FIELDS {
        return Err(FingerprintJsonError::TooBig {
            key: prefix.chars().take(64).collect(),
            max: MAX_FIELDS,
            depth: MAX_DEPTH,
        });
    }
    let leaf = match v {
        Value::Object(m) if m.len() == 1 && m.get("unavailable").is_some_and(Value::is_string) => {
            let r = m
                .get("unavailable")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Field::Unavailable(bounded(prefix, r)?.to_string())
        }
        Value::Object(m) => {
            for (k, v) in m {
                flatten_json(&format!("{prefix}.{k}"), v, depth + 1, out)?;
            }
            return Ok(());
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten_json(&format!("{prefix}.{i}"), v, depth + 1, out)?;
            }
            return Ok(());
        }
        Value::String(s) => Field::Value(bounded(prefix, s)?.to_string()),
        Value::Number(n) => Field::Value(n.to_string()),
        Value::Bool(b) => Field::Value(b.to_string()),
        Value::Null => {
            return Err(FingerprintJsonError::Null {
                key: prefix.to_string(),
            });
        }
    };
    out.insert(prefix.to_string(), leaf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> Value {
        json!({
            "schema": 1, "repro-version": "0.1.0", "captured-at": "2026-01-01T00:00:00Z",
            "probe-ms": {"gpu": 1.5},
            "gpu": {"count": 1, "devices": [{"name": "NVIDIA H100", "ecc": true}]},
            "driver": {"version": "580.159.04"},
            "python": {"dist": {"torch": "2.4.1", "numpy": "2.1.0"}},
        })
    }

    #[test]
    fn a_fingerprint_reads_typed_and_writes_back_unchanged() {
        let fp = Fingerprint::from_json(&minimal()).unwrap();
        assert_eq!(fp.value("driver.version"), Some("580.159.04"));
        assert_eq!(fp.value("gpu.devices.0.name"), Some("NVIDIA H100"));
        assert_eq!(fp.value("gpu.nothing"), None);
        let dists: Vec<_> = fp.python_dists().collect();
        assert_eq!(dists, [("numpy", "2.1.0"), ("torch", "2.4.1")]);
        assert_eq!(fp.to_json(), minimal());
    }

    /// Another machine's file: every wrong type, oversized string or key, too many fields,
    /// too deep a nesting and null is refused with the key it was found at.
    #[test]
    fn hostile_fingerprints_are_refused_naming_the_key() {
        let huge = "x".repeat(MAX_TEXT + 1);
        let mut many = serde_json::Map::new();
        for i in 0..=MAX_FIELDS {
            many.insert(format!("f{i}"), json!("v"));
        }
        let mut deep = json!("leaf");
        for _ in 0..=MAX_DEPTH + 1 {
            deep = json!({ "d": deep });
        }
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "repro-version",
                json!(5),
                "`repro-version` is a number, not a string",
            ),
            (
                "captured-at",
                json!(["a"]),
                "`captured-at` is an array, not a string",
            ),
            (
                "probe-ms",
                json!("slow"),
                "`probe-ms` is a string, not an object",
            ),
            (
                "probe-ms",
                json!({"gpu": "1"}),
                "`probe-ms.gpu` is a string, not a number",
            ),
            (
                "driver",
                json!({"version": huge}),
                "`driver.version` is 65537 bytes long",
            ),
            (
                "driver",
                json!({"version": null}),
                "`driver.version` is null",
            ),
            (
                "gpu",
                json!({"unavailable": huge}),
                "`gpu` is 65537 bytes long",
            ),
            ("many", Value::Object(many), "more than 20000 fields"),
            ("deep", deep, "(at `deep.d.d.d.d.d.d.d.d"),
        ];
        for (key, v, says) in cases {
            let mut fp = minimal();
            fp[key] = v;
            let e = Fingerprint::from_json(&fp).unwrap_err().to_string();
            assert!(e.contains(says), "{key}: {e}");
        }
        let mut fp = minimal();
        fp["gpu"][huge.as_str()] = json!("v");
        let e = Fingerprint::from_json(&fp).unwrap_err().to_string();
        assert!(
            e.contains("65541 bytes long") && e.contains("`gpu.xxxx"),
            "{e}"
        );
        for bad in [json!("fp"), json!({"schema": "1"}), json!({"schema": 99})] {
            assert!(Fingerprint::from_json(&bad).is_err(), "{bad}");
        }
    }

    /// A fingerprint file that is not one is named with its path and the reason.
    #[test]
    fn a_bad_fingerprint_file_is_named() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fp.json");
        let mut v = minimal();
        v["driver"]["version"] = json!(false);
        v["probe-ms"]["gpu"] = json!(null);
        std::fs::write(&p, v.to_string()).unwrap();
        let e = Fingerprint::load(&p).unwrap_err().to_string();
        assert!(
            e.contains("fp.json") && e.contains("`probe-ms.gpu` is null, not a number"),
            "{e}"
        );
    }
}
