//! Environment lockfiles (`lockfiles/NAME.toml`): what a machine must look like.
//!
//! A lockfile is parsed in two steps: TOML into raw structs that keep every span, then
//! validated into [`Lock`], so that every error names the file, line, column and key.
//! `repro env lock` writes one from a fingerprint with the default policy of each field's
//! tier; the user edits the policies from there.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::engines::check::{Policy, Rule};
use crate::engines::fingerprint::{Field, Fingerprint};
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::fields::{self, Kind, SPECS, Tier};

/// The lockfile schema this build writes and reads.
pub const SCHEMA: i64 = 1;

/// A validated lockfile.
#[derive(Clone, Debug, PartialEq)]
pub struct Lock {
    /// The machine's name (`h200`).
    pub name: String,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

/// How many rules of a lockfile have each policy (`env lock --json`'s `policies`). Fields
/// are in the order of their JSON keys, so the JSON is the same as before it was a type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PolicyCounts {
    /// Rules that must match exactly.
    pub exact: usize,
    /// Rules recorded only.
    pub ignore: usize,
    /// Rules that accept one of several values.
    pub one_of: usize,
    /// Rules whose difference is a warning.
    pub warn: usize,
}

/// What `repro env lock --json` prints: the lockfile written and its policies.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Written {
    /// The file written (as the user would name it).
    pub lockfile: String,
    /// The machine's name in it.
    pub name: String,
    /// How many rules have each policy.
    pub policies: PolicyCounts,
    /// Always 1.
    pub schema: u32,
}

impl Lock {
    /// How many rules have each policy.
    pub fn policy_counts(&self) -> PolicyCounts {
        let count = |n: &str| self.rules.iter().filter(|r| r.policy.name() == n).count();
        PolicyCounts {
            exact: count("exact"),
            ignore: count("ignore"),
            one_of: count("one-of"),
            warn: count("warn"),
        }
    }
}

/// Writes the lockfile `repro env lock` makes for `fp` (each field's default policy) to
/// `path`, atomically; an existing file is replaced only with `force`.
pub fn write(
    path: &Path,
    name: &str,
    fp: &Fingerprint,
    force: bool,
) -> Result<Lock, LockfileError> {
    let lock = from_fingerprint(name, fp);
    let text = to_toml(&lock, fp);
    crate::foundation::fsutil::write_output(path, text.as_bytes(), force).map_err(|source| {
        LockfileError::Write {
            path: path.to_owned(),
            source,
        }
    })?;
    Ok(lock)
}

/// Why a lockfile cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LockfileError {
    /// The file cannot be read.
    #[error("cannot read lockfile {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid, or not a valid lockfile, at a known place.
    #[error("{}:{line}:{column}: {message}", .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong, naming the key.
        message: String,
        /// What to do.
        hint: Option<String>,
    },
    /// The lockfile was written by a newer repro.
    #[error("{} has schema {found}, but this repro understands schema {SCHEMA} at most", .path.display())]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// The schema it declares.
        found: i64,
    },
    /// The lockfile could not be written.
    #[error("failed to write lockfile {}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::foundation::fsutil::WriteError,
    },
    /// No lockfile was given and none was found.
    #[error("no lockfile found in {}", .dir.display())]
    NoneFound {
        /// Where we looked.
        dir: PathBuf,
    },
    /// No lockfile was given and several could apply.
    #[error("{count} lockfiles in {} and none is the only one matching this GPU: {}", .dir.display(), .names.join(", "))]
    Ambiguous {
        /// Where we looked.
        dir: PathBuf,
        /// How many there are.
        count: usize,
        /// Their file names.
        names: Vec<String>,
    },
}

impl Diagnose for LockfileError {
    fn exit_code(&self) -> u8 {
        match self {
            LockfileError::Write { source, .. } => source.exit_code(),
            LockfileError::Read { source, .. } => crate::foundation::fsutil::read_exit_code(source),
            _ => exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            LockfileError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Some("create one with `repro env lock`, or pass another with --lock".into())
            }
            LockfileError::Read { source, .. } => {
                Some(crate::foundation::fsutil::read_hint(source).into())
            }
            LockfileError::Write { source, .. } => source.hint(),
            LockfileError::Invalid { hint, .. } => hint.clone(),
            LockfileError::NewerSchema { .. } => Some("upgrade repro to read this lockfile".into()),
            LockfileError::NoneFound { .. } => {
                Some("create one with `repro env lock`, or pass one with --lock FILE".into())
            }
            LockfileError::Ambiguous { .. } => Some("choose one with --lock FILE, or keep this machine's as the name `repro env lock` gives it (h200.toml, cpu.toml without a GPU)".into()),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLock {
    #[expect(dead_code, reason = "checked before the strict parse")]
    schema: i64,
    name: Option<String>,
    #[expect(dead_code, reason = "informational only")]
    created_by: Option<String>,
    #[serde(default)]
    fields: BTreeMap<Spanned<String>, Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRule {
    policy: Spanned<String>,
    value: Option<Spanned<toml::Value>>,
    values: Option<Spanned<Vec<toml::Value>>>,
}

/// Parses and validates lockfile text; `path` is used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Lock, LockfileError> {
    let invalid = |span: Option<Range<usize>>, message: String, hint: Option<String>| {
        let (line, column) = crate::foundation::spans::locate(text, span);
        LockfileError::Invalid {
            path: path.to_owned(),
            line,
            column,
            message,
            hint,
        }
    };
    let toml_err = |e: toml::de::Error| {
        invalid(
            e.span(),
            crate::foundation::spans::user_message_in(&e, text),
            None,
        )
    };

    // The schema is read first and alone, so that a newer lockfile gets "upgrade repro"
    // rather than a confusing complaint about fields this version has not heard of.
    let table: toml::Table = toml::from_str(text).map_err(toml_err)?;
    match table.get("schema") {
        None => {
            return Err(invalid(
                None,
                "missing `schema`".into(),
                Some("add `schema = 1` at the top".into()),
            ));
        }
        Some(toml::Value::Integer(n)) if *n > SCHEMA => {
            return Err(LockfileError::NewerSchema {
                path: path.to_owned(),
                found: *n,
            });
        }
        Some(toml::Value::Integer(n)) if *n >= 1 => {}
        Some(other) => {
            let span = text.find("schema").map(|s| s..s);
            return Err(invalid(
                span,
                format!("`schema` must be a positive integer, not {other}"),
                None,
            ));
        }
    }
    let raw: RawLock = toml::from_str(text).map_err(toml_err)?;
    let name = raw.name.unwrap_or_else(|| {
        path.file_stem()
            .map_or_else(|| "unnamed".into(), |s| s.to_string_lossy().into_owned())
    });

    let mut rules = Vec::new();
    for (key, rule) in raw.fields {
        let key_span = key.span();
        let key = key.into_inner();
        if !fields::is_valid_key(&key) {
            let hint = fields::suggest(&key).map(|s| format!("did you mean `{s}`?")).or_else(|| {
                Some("known fields are listed in repro's book (docs/src/reference/fields.md); environment variables are `env.NAME`".into())
            });
            return Err(invalid(
                Some(key_span),
                format!("unknown field `{key}`"),
                hint,
            ));
        }
        let policy = policy_of(&key, rule.into_inner(), &invalid)?;
        rules.push(Rule { key, policy });
    }
    // BTreeMap iteration is by key; present rules in registry order for readable reports.
    rules.sort_by_key(|r| {
        (
            SPECS
                .iter()
                .position(|s| s.key == r.key)
                .unwrap_or(usize::MAX),
            r.key.clone(),
        )
    });
    Ok(Lock { name, rules })
}

/// Validates one rule of a lockfile: its policy and the value(s) that policy needs.
fn policy_of(
    key: &str,
    rule: RawRule,
    invalid: &dyn Fn(Option<Range<usize>>, String, Option<String>) -> LockfileError,
) -> Result<Policy, LockfileError> {
    let value = |v: Option<Spanned<toml::Value>>| -> Result<Option<String>, LockfileError> {
        v.map(|v| {
            let span = v.span();
            scalar(v.get_ref()).ok_or_else(|| {
                invalid(
                    Some(span),
                    format!("`{key}`: `value` must be a string, number or boolean"),
                    None,
                )
            })
        })
        .transpose()
    };
    let policy_span = rule.policy.span();
    let need = |what: &str| {
        invalid(
            Some(policy_span.clone()),
            format!("`{key}`: policy `{}` needs `{what}`", rule.policy.get_ref()),
            None,
        )
    };
    let forbid = |what: &str, span: Range<usize>| {
        invalid(
            Some(span),
            format!(
                "`{key}`: policy `{}` takes no `{what}`",
                rule.policy.get_ref()
            ),
            None,
        )
    };
    let values_span = rule.values.as_ref().map(Spanned::span);
    let value_span = rule
        .value
        .as_ref()
        .map_or(policy_span.clone(), Spanned::span);
    let v = value(rule.value)?;
    let policy = match rule.policy.get_ref().as_str() {
        "exact" | "warn" | "min" => {
            if let Some(s) = values_span {
                return Err(forbid("values", s));
            }
            let v = v.ok_or_else(|| need("value"))?;
            match rule.policy.get_ref().as_str() {
                "exact" => Policy::Exact(v),
                "warn" => Policy::Warn(v),
                _ => {
                    let kind = fields::kind_of(key);
                    if !matches!(kind, Kind::Version | Kind::Number) {
                        return Err(invalid(
                            Some(policy_span),
                            format!(
                                "`{key}`: policy `min` needs a version or number, and this field holds {}",
                                if kind == Kind::Bool {
                                    "a boolean"
                                } else {
                                    "text"
                                }
                            ),
                            Some("use `exact`, `one-of` or `warn` for text fields".into()),
                        ));
                    }
                    if !min_value_ok(kind, &v) {
                        let (what, example) = if kind == Kind::Number {
                            ("a number written in digits", "8 or 1.5")
                        } else {
                            ("a version", "580.95 or 6.8.0-45-generic")
                        };
                        return Err(invalid(
                            Some(value_span),
                            format!(
                                "`{key}`: the bound of policy `min` must be {what}, and `{v}` is not"
                            ),
                            Some(format!("write it as, for example, {example}")),
                        ));
                    }
                    Policy::Min(v)
                }
            }
        }
        "one-of" => {
            let list = rule.values.ok_or_else(|| need("values"))?;
            let span = list.span();
            let list: Option<Vec<String>> = list.into_inner().iter().map(scalar).collect();
            match list {
                Some(l) if !l.is_empty() => Policy::OneOf(l),
                _ => {
                    return Err(invalid(
                        Some(span),
                        format!(
                            "`{key}`: `values` must be a non-empty list of strings, numbers or booleans"
                        ),
                        None,
                    ));
                }
            }
        }
        "ignore" => {
            if let Some(s) = values_span {
                return Err(forbid("values", s));
            }
            Policy::Ignore(v)
        }
        other => {
            return Err(invalid(
                Some(policy_span),
                format!("`{key}`: unknown policy `{other}`"),
                Some("policies are exact, min, one-of, warn and ignore".into()),
            ));
        }
    };
    Ok(policy)
}

use crate::foundation::spans::scalar;

/// The largest lockfile read: a few hundred fields take a few kilobytes.
pub const MAX_BYTES: u64 = 1 << 20;

/// Reads and validates a lockfile: a regular file (a link to one is followed) of at most
/// [`MAX_BYTES`]; a FIFO or a device in `lockfiles/` is refused, not waited on or read
/// forever.
pub fn load(path: &Path) -> Result<Lock, LockfileError> {
    let text = crate::foundation::fsutil::read_input_text(path, MAX_BYTES).map_err(|e| {
        LockfileError::Read {
            path: e.path,
            source: e.source,
        }
    })?;
    parse(path, &text)
}

/// The lockfiles in a directory, sorted by name.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

/// Builds a lockfile from a fingerprint with each field's default policy: must-match
/// fields `exact`, warn fields `warn`, record-only fields `ignore`, and any field this
/// machine cannot report `ignore`.
pub fn from_fingerprint(name: &str, fp: &Fingerprint) -> Lock {
    let mut rules = Vec::new();
    for spec in SPECS {
        let values = fp.lookup(spec.key);
        let mut distinct: Vec<String> = values
            .iter()
            .filter_map(|f| f.value().map(str::to_string))
            .collect();
        distinct.dedup();
        let all_available =
            !values.is_empty() && values.iter().all(|f| matches!(f, Field::Value(_)));
        let policy = match (all_available, distinct.as_slice(), spec.tier) {
            // A lock states the desired state: a clean tree, whatever the tree was when locked.
            (true, _, _) if spec.key == "repo.dirty" => Policy::Warn("false".into()),
            (true, [one], Tier::Must) => Policy::Exact(one.clone()),
            (true, [one], Tier::Warn) => Policy::Warn(one.clone()),
            // Devices that differ from each other: accept exactly the set seen.
            (true, many, Tier::Must) if many.len() > 1 => Policy::OneOf(many.to_vec()),
            (_, [one, ..], _) => Policy::Ignore(Some(one.clone())),
            _ => Policy::Ignore(None),
        };
        rules.push(Rule {
            key: spec.key.to_string(),
            policy,
        });
    }
    // Every installed distribution is locked with `warn`: a difference is named, with the
    // pip command that installs the locked version, without failing the check. Those with
    // fields of their own (torch, numpy, triton) are locked there, by their tier.
    for (k, f) in &fp.fields {
        if let (Some(name), Some(v)) = (fields::dist_name(k), f.value())
            && !["torch", "numpy", "triton"].contains(&name)
        {
            rules.push(Rule {
                key: k.clone(),
                policy: Policy::Warn(v.to_string()),
            });
        }
    }
    for (k, f) in &fp.fields {
        if k.starts_with("env.") {
            rules.push(Rule {
                key: k.clone(),
                policy: Policy::Ignore(f.value().map(str::to_string)),
            });
        }
    }
    Lock {
        name: name.to_string(),
        rules,
    }
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Writes a lockfile as TOML, grouped by section, with each field's meaning as a comment.
pub fn to_toml(lock: &Lock, fp: &Fingerprint) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# repro environment lockfile: what a machine must look like to reproduce results."
    );
    let _ = writeln!(
        out,
        "# Policies: exact (must equal), min (version at least), one-of (values = [...]),"
    );
    let _ = writeln!(
        out,
        "# warn (differences reported, never fatal), ignore (recorded only). Edit to taste."
    );
    let _ = writeln!(out, "schema = {SCHEMA}");
    let _ = writeln!(out, "name = {}", quote(&lock.name));
    let _ = writeln!(
        out,
        "created-by = {}",
        quote(&format!("repro {}", fp.repro_version))
    );
    let _ = writeln!(out, "\n[fields]");
    let mut section = "";
    for rule in &lock.rules {
        let sect = rule.key.split('.').next().unwrap_or_default();
        if sect != section {
            section = sect;
            let _ = writeln!(out, "\n# {sect}");
        }
        let about = match fields::lookup(&rule.key) {
            Some(s) => s.about,
            None if fields::dist_name(&rule.key).is_some() => "an installed Python distribution",
            None => "environment variable",
        };
        let unavailable = fp.lookup(&rule.key).into_iter().find_map(|f| match f {
            Field::Unavailable(r) => Some(r),
            Field::Value(_) => None,
        });
        let note = match unavailable {
            Some(r) => format!("{about}; unavailable when locked: {r}"),
            None => about.to_string(),
        };
        let body = match &rule.policy {
            Policy::Exact(v) | Policy::Warn(v) | Policy::Min(v) => {
                format!(
                    "policy = {}, value = {}",
                    quote(rule.policy.name()),
                    quote(v)
                )
            }
            Policy::OneOf(vs) => format!(
                "policy = \"one-of\", values = [{}]",
                vs.iter().map(|v| quote(v)).collect::<Vec<_>>().join(", ")
            ),
            Policy::Ignore(Some(v)) => format!("policy = \"ignore\", value = {}", quote(v)),
            Policy::Ignore(None) => "policy = \"ignore\"".into(),
        };
        let _ = writeln!(
            out,
            "{} = {{ {body} }}  # {}",
            quote(&rule.key),
            note.replace('\n', " ")
        );
    }
    out
}

/// A lockfile name derived from the GPU model: "NVIDIA H200" → "h200"; "cpu" without a GPU.
pub fn default_name(fp: &Fingerprint) -> String {
    let gpu = fp
        .lookup("gpu.name")
        .into_iter()
        .find_map(|f| f.value().map(str::to_string));
    let Some(gpu) = gpu else { return "cpu".into() };
    let lower = gpu.to_lowercase();
    let trimmed = lower.trim_start_matches("nvidia").trim();
    let mut name = String::new();
    for c in trimmed.chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_matches('-').to_string();
    if name.is_empty() { "gpu".into() } else { name }
}

/// Whether `v` can be a `min` policy's bound for a field of `kind`: a number written in
/// digits (`8`, `1.5`) for a number field; for a version field, numbers separated by dots
/// (`580.95`, `1.95.0`), then at most a suffix after `-`, `+` or `~` (`6.8.0-45-generic`).
/// `1e5`, `0x10` or `1x` are none: compared as versions they would read as 1 or 0.
fn min_value_ok(kind: Kind, v: &str) -> bool {
    let dotted = |s: &str| {
        !s.is_empty()
            && s.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    match kind {
        Kind::Number => dotted(v) && v.matches('.').count() <= 1,
        _ => {
            let (head, tail) = match v.find(['-', '+', '~']) {
                Some(i) => (&v[..i], Some(&v[i + 1..])),
                None => (v, None),
            };
            dotted(head)
                && tail.is_none_or(|t| {
                    t.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"._+~-".contains(&b))
                })
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_min_bound_is_a_number_or_version_written_as_one() {
        for ok in ["8", "1.5", "580.95"] {
            assert!(min_value_ok(Kind::Number, ok), "{ok}");
        }
        for bad in ["1e5", "1x", "0x10", "1.2.3", "", "-1", "1."] {
            assert!(!min_value_ok(Kind::Number, bad), "{bad}");
        }
        for ok in ["580.95", "1.95.0", "6.8.0-45-generic", "2.5.1+cu124", "13"] {
            assert!(min_value_ok(Kind::Version, ok), "{ok}");
        }
        for bad in ["1e5", "1x", "0x10", "v6", "", "1..2", "6.8 generic"] {
            assert!(!min_value_ok(Kind::Version, bad), "{bad}");
        }
        // The message says what the field holds and points at the value.
        let rule = |key: &str, v: &str| {
            format!(
                "schema = 1\nname = \"x\"\n[fields]\n\"{key}\" = {{ policy = \"min\", value = \"{v}\" }}\n"
            )
        };
        let e = err(&rule("host.cores", "1x"));
        assert!(
            e.contains("t.toml:4:42: `host.cores`: the bound of policy `min` must be a number written in digits, and `1x` is not"),
            "{e}"
        );
        let e = err(&rule("driver.version", "v580"));
        assert!(
            e.contains(
                "`driver.version`: the bound of policy `min` must be a version, and `v580` is not"
            ),
            "{e}"
        );
        let e = err(&rule("host.cpu", "5"));
        assert!(
            e.contains("policy `min` needs a version or number, and this field holds text"),
            "{e}"
        );
    }

    use super::*;

    fn p() -> PathBuf {
        PathBuf::from("lockfiles/t.toml")
    }

    fn err(text: &str) -> String {
        parse(&p(), text).unwrap_err().to_string()
    }

    fn sample_fp() -> Fingerprint {
        let mut fields = crate::foundation::fields::Fields::new();
        fields.insert("gpu.count".into(), Field::Value("1".into()));
        fields.insert(
            "gpu.devices.0.name".into(),
            Field::Value("NVIDIA H200".into()),
        );
        fields.insert("driver.version".into(), Field::Value("580.159.04".into()));
        fields.insert("host.kernel".into(), Field::Value("6.1".into()));
        Fingerprint {
            repro_version: "0.1.0".into(),
            captured_at: "2026-01-01T00:00:00Z".into(),
            probe_ms: Default::default(),
            fields,
        }
    }

    #[test]
    fn written_lockfiles_and_their_counts_are_types_with_the_old_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lockfiles/m.toml");
        let lock = write(&path, "m", &sample_fp(), false).unwrap();
        assert_eq!(load(&path).unwrap(), lock);
        let counts = lock.policy_counts();
        assert_eq!(
            counts.exact + counts.one_of + counts.warn + counts.ignore,
            lock.rules.len()
        );
        let written = Written {
            lockfile: "lockfiles/m.toml".into(),
            name: "m".into(),
            policies: counts,
            schema: 1,
        };
        // The JSON `env lock --json` printed before it was a type, key for key.
        let old = serde_json::json!({
            "schema": 1,
            "lockfile": "lockfiles/m.toml",
            "name": "m",
            "policies": {
                "exact": counts.exact, "one-of": counts.one_of,
                "warn": counts.warn, "ignore": counts.ignore,
            },
        });
        assert_eq!(serde_json::to_value(&written).unwrap(), old);
        assert_eq!(
            serde_json::to_string(&written).unwrap(),
            serde_json::to_string(&old).unwrap()
        );
        let back: Written = serde_json::from_value(old).unwrap();
        assert_eq!(back, written);
    }

    #[test]
    fn a_lockfile_that_cannot_be_written_is_a_typed_error_with_its_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        write(&path, "m", &sample_fp(), false).unwrap();
        // Exists, no --force: a usage error that says how to overwrite.
        let e = write(&path, "m", &sample_fp(), false).unwrap_err();
        assert!(matches!(e, LockfileError::Write { .. }), "{e:?}");
        assert_eq!(e.exit_code(), exit::USAGE);
        assert!(e.hint().unwrap().contains("--force"), "{:?}", e.hint());
        assert!(e.to_string().contains("m.toml"), "{e}");
        // With --force it is replaced.
        write(&path, "m", &sample_fp(), true).unwrap();
        // A parent that is a file: an I/O failure, exit code IO, nothing half-written.
        let blocked = dir.path().join("file");
        std::fs::write(&blocked, "x").unwrap();
        let e = write(&blocked.join("m.toml"), "m", &sample_fp(), false).unwrap_err();
        assert_eq!(e.exit_code(), exit::IO, "{e:?}");
        assert_eq!(std::fs::read_to_string(&blocked).unwrap(), "x");
    }

    #[test]
    fn parses_every_policy() {
        let text = r#"
schema = 1
name = "h200"
[fields]
"gpu.name" = { policy = "exact", value = "NVIDIA H200" }
"driver.version" = { policy = "min", value = "580.95" }
"toolchain.nvrtc.version" = { policy = "one-of", values = ["13.0", 13.1] }
"gpu.ecc" = { policy = "warn", value = true }
"host.cpu" = { policy = "ignore" }
"env.CUDA_VISIBLE_DEVICES" = { policy = "exact", value = 0 }
"#;
        let lock = parse(&p(), text).unwrap();
        assert_eq!(lock.name, "h200");
        let keys: Vec<&str> = lock.rules.iter().map(|r| r.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "gpu.name",
                "gpu.ecc",
                "driver.version",
                "toolchain.nvrtc.version",
                "host.cpu",
                "env.CUDA_VISIBLE_DEVICES"
            ]
        );
        assert_eq!(lock.rules[1].policy, Policy::Warn("true".into()));
        assert_eq!(
            lock.rules[3].policy,
            Policy::OneOf(vec!["13.0".into(), "13.1".into()])
        );
    }

    #[test]
    fn errors_name_line_column_and_key() {
        assert_eq!(
            err("schema = 1\n[fields]\n\"gpu.nmae\" = { policy = \"exact\", value = \"x\" }\n"),
            "lockfiles/t.toml:3:1: unknown field `gpu.nmae`"
        );
        assert!(
            err("schema = 1\n[fields]\n\"gpu.name\" = { polcy = \"exact\" }\n")
                .starts_with("lockfiles/t.toml:3:")
        );
        assert_eq!(
            err("schema = 1\n[fields]\n\"gpu.name\" = { policy = \"sometimes\", value = \"x\" }\n"),
            "lockfiles/t.toml:3:25: `gpu.name`: unknown policy `sometimes`"
        );
        assert!(
            err("schema = 1\n[fields]\n\"gpu.name\" = { policy = \"exact\" }\n")
                .contains("needs `value`")
        );
        assert!(
            err("schema = 1\n[fields]\n\"gpu.name\" = { policy = \"min\", value = \"H200\" }\n")
                .contains("policy `min` needs a version")
        );
        assert!(
            err("schema = 1\n[fields]\n\"gpu.name\" = { policy = \"one-of\", values = [] }\n")
                .contains("non-empty")
        );
        assert!(err("schema = 1\nbogus = 3\n").contains("unknown field `bogus`"));
        assert!(err("[fields]\n").contains("missing `schema`"));
        assert!(err("schema = 1\n[fields\n").starts_with("lockfiles/t.toml:2:"));
    }

    #[test]
    fn newer_schema_says_upgrade() {
        let e = parse(&p(), "schema = 2\nsomething-new = true\n").unwrap_err();
        assert!(matches!(e, LockfileError::NewerSchema { found: 2, .. }));
        assert_eq!(e.hint().unwrap(), "upgrade repro to read this lockfile");
    }

    #[test]
    fn unknown_key_suggests() {
        let e = parse(
            &p(),
            "schema = 1\n[fields]\n\"gpu.nmae\" = { policy = \"ignore\" }\n",
        )
        .unwrap_err();
        assert_eq!(e.hint().unwrap(), "did you mean `gpu.name`?");
    }

    #[test]
    fn default_names() {
        let mut fp = Fingerprint {
            repro_version: "0".into(),
            captured_at: String::new(),
            probe_ms: Default::default(),
            fields: Default::default(),
        };
        assert_eq!(default_name(&fp), "cpu");
        fp.fields
            .insert("gpu.count".into(), Field::Value("1".into()));
        fp.fields.insert(
            "gpu.devices.0.name".into(),
            Field::Value("NVIDIA H200 NVL".into()),
        );
        assert_eq!(default_name(&fp), "h200-nvl");
    }

    #[test]
    fn written_lockfile_parses_back_to_the_same_rules() {
        let mut fp = Fingerprint {
            repro_version: "0".into(),
            captured_at: String::new(),
            probe_ms: Default::default(),
            fields: Default::default(),
        };
        fp.fields
            .insert("gpu.count".into(), Field::Value("2".into()));
        fp.fields.insert(
            "gpu.devices.0.name".into(),
            Field::Value("NVIDIA H200".into()),
        );
        fp.fields.insert(
            "gpu.devices.1.name".into(),
            Field::Value("NVIDIA H100 \"x\"".into()),
        );
        fp.fields
            .insert("driver.version".into(), Field::Value("580.159.04".into()));
        fp.fields.insert(
            "toolchain.nvrtc".into(),
            Field::Unavailable("NVRTC not found".into()),
        );
        fp.fields.insert(
            "env.CUDA_HOME".into(),
            Field::Value("/usr/local/cuda".into()),
        );
        let lock = from_fingerprint("t", &fp);
        let text = to_toml(&lock, &fp);
        let back = parse(&p(), &text).unwrap();
        let mut want = lock.rules.clone();
        want.sort_by_key(|r| {
            (
                SPECS
                    .iter()
                    .position(|s| s.key == r.key)
                    .unwrap_or(usize::MAX),
                r.key.clone(),
            )
        });
        assert_eq!(back.rules, want);
        let rule = |k: &str| {
            back.rules
                .iter()
                .find(|r| r.key == k)
                .unwrap()
                .policy
                .clone()
        };
        assert_eq!(
            rule("gpu.name"),
            Policy::OneOf(vec!["NVIDIA H200".into(), "NVIDIA H100 \"x\"".into()])
        );
        assert_eq!(rule("driver.version"), Policy::Exact("580.159.04".into()));
        assert_eq!(rule("toolchain.nvrtc.version"), Policy::Ignore(None));
        assert!(text.contains("unavailable when locked: NVRTC not found"));
    }
}
