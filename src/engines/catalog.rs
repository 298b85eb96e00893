//! The catalogue of everything recorded in a store: builds, results and bisections, listed
//! together newest first (`repro log`) and found by a prefix of the name each is filed
//! under (`repro show`).
//!
//! Every kind of record keeps its own layout (see `build`, `bench` and `bisect`); this
//! module reads the few fields a listing needs from each into one [`Entry`], so that a
//! listing, a filter and a lookup treat all kinds alike.

use serde::Serialize;
use serde_json::Value;

use crate::foundation::keys;
use crate::foundation::records::{self, BisectRecord, BuildRecord, RecordError, ResultRecord};
use crate::foundation::store::{Store, StoreError};

/// A kind of record that `repro log` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A build record (`builds/KEY.json`).
    Build,
    /// A result of `repro bench` (`results/ID.json`).
    Result,
    /// A finished bisection's report (`bisections/ID.json`).
    Bisection,
    /// A profile under Nsight Compute (`profiles/ID.json`).
    Profile,
}

impl Kind {
    /// Every kind, in the order a listing's ties are broken.
    pub const ALL: [Kind; 4] = [Kind::Result, Kind::Build, Kind::Bisection, Kind::Profile];

    /// The store directory of this kind.
    pub fn dir(self) -> &'static str {
        match self {
            Kind::Build => records::BUILDS,
            Kind::Result => records::RESULTS,
            Kind::Bisection => records::BISECTIONS,
            Kind::Profile => records::PROFILES,
        }
    }

    /// The word for it in listings.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Build => "build",
            Kind::Result => "result",
            Kind::Bisection => "bisection",
            Kind::Profile => "profile",
        }
    }
}

/// One record, as a listing shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Entry {
    /// What it is.
    pub kind: Kind,
    /// The name it is filed under: a build's key, a result's ID, a bisection's ID.
    pub id: String,
    /// When it was recorded (RFC 3339), if the record says.
    pub created_at: Option<String>,
    /// The recipe or command-bench name (a bisection: its recipe, command or script).
    pub name: String,
    /// The commit: where a build or result was made; a bisection's first bad (or fixing) commit.
    pub commit: Option<String>,
    /// A build's `ok` / `failed`, a result's verdict, a bisection's `found` / `untestable`.
    pub status: String,
    /// One line about it.
    pub summary: String,
}

/// Why a lookup by prefix failed.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// The prefix is not hex or too short.
    #[error("`{prefix}` is not a {noun} ID (at least 4 hex digits)")]
    NotAnId {
        /// `record` or `result`.
        noun: &'static str,
        /// The prefix.
        prefix: String,
    },
    /// No record matches.
    #[error("no {noun} with ID {prefix}")]
    None {
        /// `record` or `result`.
        noun: &'static str,
        /// The prefix.
        prefix: String,
    },
    /// No readable record matches, but a stored one does that does not read (a hostile
    /// or damaged file): why, naming the file and the member.
    #[error("{reason}")]
    Unreadable {
        /// The record's error (`results/ID.json: fingerprint: ...`).
        reason: String,
    },
    /// Several records match.
    #[error("{prefix} is ambiguous: {count} {nouns} match ({examples})")]
    Ambiguous {
        /// `records` or `results`.
        nouns: &'static str,
        /// The prefix.
        prefix: String,
        /// How many matched.
        count: usize,
        /// A few of them, as `kind short-id`.
        examples: String,
    },
}

impl crate::foundation::error::Diagnose for FindError {
    fn exit_code(&self) -> u8 {
        crate::foundation::exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        let noun = match self {
            FindError::NotAnId { noun, .. } | FindError::None { noun, .. } => *noun,
            FindError::Ambiguous { nouns, .. } => nouns.trim_end_matches('s'),
            FindError::Unreadable { .. } => {
                return Some(
                    "`repro store verify` lists every record that does not read; remove the file, or pull or unpack it again from where it came".into(),
                );
            }
        };
        Some(if noun == "result" {
            "`repro log` lists results with their IDs".into()
        } else {
            "`repro log` lists every record with its ID".into()
        })
    }
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// A record of any kind, read.
#[derive(Clone, Debug)]
pub enum Record {
    /// A build.
    Build(Box<BuildRecord>),
    /// A benchmark result.
    Result(Box<ResultRecord>),
    /// A finished bisection.
    Bisection(Box<BisectRecord>),
    /// A finished check or bench bisection over toolchain releases (filed with the
    /// bisections).
    ToolchainBisection(Box<records::ToolchainBisectRecord>),
    /// A finished build bisection over toolchain releases (filed with the bisections).
    ToolchainBuildBisection(Box<records::ToolchainBuildBisectRecord>),
    /// A profile under Nsight Compute.
    Profile(Box<records::ProfileRecord>),
}

impl Record {
    /// Reads a record of `kind` filed as `id`.
    pub fn from_json(kind: Kind, id: &str, v: &Value) -> Result<Record, RecordError> {
        let what = format!("{}/{id}.json", kind.dir());
        Ok(match kind {
            Kind::Build => Record::Build(Box::new(BuildRecord::from_json(v, &what)?)),
            Kind::Result => Record::Result(Box::new(ResultRecord::from_json(v, &what)?)),
            Kind::Bisection if records::ToolchainBuildBisectRecord::is_build(v) => {
                Record::ToolchainBuildBisection(Box::new(
                    records::ToolchainBuildBisectRecord::from_json(v, &what)?,
                ))
            }
            Kind::Bisection
                if v.get("kind").and_then(Value::as_str) == Some("toolchain-bisection") =>
            {
                Record::ToolchainBisection(Box::new(records::ToolchainBisectRecord::from_json(
                    v, &what,
                )?))
            }
            Kind::Bisection => Record::Bisection(Box::new(BisectRecord::from_json(v, &what)?)),
            Kind::Profile => {
                Record::Profile(Box::new(records::ProfileRecord::from_json(v, &what)?))
            }
        })
    }

    /// The JSON it was written as.
    pub fn to_json(&self) -> Value {
        match self {
            Record::Build(r) => records::to_json(r),
            Record::Result(r) => records::to_json(r),
            Record::Bisection(r) => records::to_json(r),
            Record::ToolchainBisection(r) => records::to_json(r),
            Record::ToolchainBuildBisection(r) => records::to_json(r),
            Record::Profile(r) => records::to_json(r),
        }
    }

    /// The recipe it is about, if any.
    pub fn recipe(&self) -> Option<&str> {
        match self {
            Record::Build(b) => Some(&b.recipe),
            Record::Result(r) => r.recipe.as_deref(),
            Record::Bisection(b) => b.question.as_ref().and_then(|q| q.name.as_deref()),
            Record::ToolchainBisection(b) => Some(&b.recipe),
            Record::ToolchainBuildBisection(b) => Some(&b.recipe),
            Record::Profile(p) => Some(&p.recipe),
        }
    }

    /// The GPU a result was measured on (other kinds have none).
    pub fn machine(&self) -> Option<&str> {
        match self {
            Record::Result(r) => Some(&r.machine),
            Record::Profile(p) => Some(&p.machine),
            _ => None,
        }
    }
}

/// Reads the listing's fields from a record.
pub fn entry(id: &str, record: &Record) -> Entry {
    let (kind, created_at, name, commit, status, summary) = match record {
        Record::Build(r) => (
            Kind::Build,
            Some(r.created_at.clone()),
            r.recipe.clone(),
            r.commit.clone(),
            r.status.word().to_string(),
            build_summary(r),
        ),
        Record::Result(r) => (
            Kind::Result,
            Some(r.created_at.clone()),
            r.name.clone(),
            r.commit.clone(),
            r.verdict.word().to_string(),
            result_summary(r),
        ),
        Record::Bisection(r) => {
            let (q, culprit, summary) = bisection_summary(r);
            (
                Kind::Bisection,
                r.created_at.clone(),
                q.name.unwrap_or_default(),
                culprit,
                if r.found() { "found" } else { "untestable" }.to_string(),
                summary,
            )
        }
        Record::ToolchainBisection(r) => {
            let found = matches!(r.outcome, records::Outcome::FirstBad { .. });
            let first_bad: Vec<String> = r
                .first_bad
                .iter()
                .map(|b| format!("{}@{b}", r.family))
                .collect();
            let summary =
                releases_summary(&r.mode, &r.family, &r.releases, r.evaluated, &first_bad);
            (
                Kind::Bisection,
                r.created_at.clone(),
                r.recipe.clone(),
                r.commit.clone(),
                if found { "found" } else { "untestable" }.to_string(),
                summary,
            )
        }
        Record::Profile(p) => (
            Kind::Profile,
            Some(p.created_at.clone()),
            p.recipe.clone(),
            p.commit.clone(),
            "ok".to_string(),
            profile_summary(p),
        ),
        Record::ToolchainBuildBisection(r) => {
            let found: Vec<String> = r
                .answers
                .iter()
                .filter_map(|a| {
                    let bad = a.first_bad.as_deref()?;
                    Some(format!("{} {}@{bad}", a.target, r.family))
                })
                .collect();
            let summary = releases_summary(&r.mode, &r.family, &r.releases, r.wheels.len(), &found);
            (
                Kind::Bisection,
                r.created_at.clone(),
                r.recipe.clone(),
                r.commit.clone(),
                if r.found() { "found" } else { "untestable" }.to_string(),
                summary,
            )
        }
    };
    Entry {
        kind,
        id: id.to_string(),
        created_at,
        name,
        commit,
        status,
        summary,
    }
}

/// A build's summary: its outputs' sizes and how long it took.
fn build_summary(r: &BuildRecord) -> String {
    let mut parts: Vec<String> = r
        .outputs
        .iter()
        .map(|(k, v)| format!("{k} {}", kib(v.bytes)))
        .collect();
    parts.push(format!("{:.1} ms", r.duration_ms));
    parts.join(", ")
}

/// A result's summary: its parameters, median with interval, and machine.
fn result_summary(r: &ResultRecord) -> String {
    let unit = &r.unit;
    let median = r.summary.as_ref().map_or("-".to_string(), |s| {
        format!(
            "median {} [{}, {}]",
            crate::foundation::stats::fmt_value(s.median, unit),
            crate::foundation::stats::fmt_value(s.ci_low, unit),
            crate::foundation::stats::fmt_value(s.ci_high, unit)
        )
    });
    [r.params_text(), median, r.machine.clone()]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("  ")
}

/// A commit bisection's question, culprit and summary.
fn bisection_summary(r: &records::BisectRecord) -> (records::Question, Option<String>, String) {
    let q = r.question.clone().unwrap_or(records::Question {
        mode: "?".into(),
        name: None,
        good: None,
        bad: None,
    });
    let culprit = r.culprit.as_ref().map(|c| c.hash.clone());
    let summary = format!(
        "{} {}..{}, {} of {} commits evaluated{}",
        q.mode,
        q.good.as_deref().map_or("?", keys::short),
        q.bad.as_deref().map_or("?", keys::short),
        r.evaluated,
        r.commits,
        match (&culprit, r.find) {
            (Some(c), records::Find::Fixed) => format!("; fixed by {}", keys::short(c)),
            (Some(c), records::Find::Broken) => format!("; first bad {}", keys::short(c)),
            (None, _) => String::new(),
        }
    );
    (q, culprit, summary)
}

/// A profile's summary: its parameters, DRAM throughput, ncu and machine.
fn profile_summary(p: &records::ProfileRecord) -> String {
    let mut parts = vec![crate::foundation::records::params_text(&p.params)];
    if let Some(d) = p.value("dram__bytes.sum.per_second") {
        parts.push(format!("DRAM {:.1} GB/s", d / 1e9));
    }
    parts.push(format!("ncu {}", p.ncu_version));
    parts.push(p.machine.clone());
    parts
        .into_iter()
        .filter(|x| !x.is_empty())
        .collect::<Vec<_>>()
        .join("  ")
}

/// A bisection over releases in one line: `build nvrtc 12.8.93..13.0.88, 3 of 3 releases
/// evaluated; first bad sm_70 nvrtc@13.0.88`.
fn releases_summary(
    mode: &str,
    family: &str,
    releases: &[String],
    evaluated: usize,
    first_bad: &[String],
) -> String {
    format!(
        "{mode} {family} {}..{}, {evaluated} of {} releases evaluated{}",
        releases.first().map_or("?", String::as_str),
        releases.last().map_or("?", String::as_str),
        releases.len(),
        if first_bad.is_empty() {
            String::new()
        } else {
            format!("; first bad {}", first_bad.join(", "))
        }
    )
}

/// Every record of the given kinds (all when empty), newest first; ties by kind, then ID.
/// Records that do not read are left out (`store verify` reports them).
pub fn list(store: &Store, kinds: &[Kind]) -> Vec<(Entry, Record)> {
    let mut out = Vec::new();
    for kind in Kind::ALL {
        if !kinds.is_empty() && !kinds.contains(&kind) {
            continue;
        }
        for (id, _, parsed) in store.records(kind.dir()) {
            if let Some(r) = parsed
                .ok()
                .and_then(|v| Record::from_json(kind, &id, &v).ok())
            {
                out.push((entry(&id, &r), r));
            }
        }
    }
    let rank = |k: Kind| Kind::ALL.iter().position(|x| *x == k);
    out.sort_by(|(a, _), (b, _)| {
        b.created_at
            .cmp(&a.created_at)
            .then(rank(a.kind).cmp(&rank(b.kind)))
            .then(a.id.cmp(&b.id))
    });
    out
}

/// The error of the first stored record of `kinds` whose ID starts with `prefix` that does
/// not read, if there is one: what `find` says instead of "no record" about a file that is
/// there but hostile or damaged.
pub fn unreadable(store: &Store, kinds: &[Kind], prefix: &str) -> Option<FindError> {
    kinds.iter().find_map(|kind| {
        store
            .records(kind.dir())
            .into_iter()
            .filter(|(id, _, _)| id.starts_with(prefix))
            .find_map(|(id, path, parsed)| {
                let reason = match parsed {
                    // The store's own check (not JSON, a broken seal) names no file: say which.
                    Err(e) => format!(
                        "{}/{}: {e}",
                        kind.dir(),
                        path.file_name()?.to_string_lossy()
                    ),
                    Ok(v) => Record::from_json(*kind, &id, &v).err()?.to_string(),
                };
                Some(FindError::Unreadable { reason })
            })
    })
}

/// Writes a result record; its ID is the sha256 of its content.
pub fn put_result(store: &Store, rec: &ResultRecord) -> Result<String, StoreError> {
    let v = records::to_json(rec);
    let id = keys::key_of(&v);
    store.put_record(records::RESULTS, &id, &v)?;
    Ok(id)
}

/// Every result record that reads, newest first: (ID, record). Those that do not read are
/// left out (`repro store verify` names them).
pub fn results(store: &Store) -> Vec<(String, ResultRecord)> {
    let mut v: Vec<(String, ResultRecord)> = store
        .records(records::RESULTS)
        .into_iter()
        .filter_map(|(k, _, r)| {
            let r = ResultRecord::from_json(&r.ok()?, &k).ok()?;
            Some((k, r))
        })
        .collect();
    v.sort_by(|a, b| b.1.created_at.cmp(&a.1.created_at).then(a.0.cmp(&b.0)));
    v
}

/// Every build record that reads: (key, record), by key. Those that do not read are left
/// out (`repro store verify` names them).
pub fn builds(store: &Store) -> Vec<(String, BuildRecord)> {
    store
        .records(records::BUILDS)
        .into_iter()
        .filter_map(|(k, _, r)| {
            let r = BuildRecord::from_json(&r.ok()?, &k).ok()?;
            Some((k, r))
        })
        .collect()
}

/// Finds one result by ID prefix; errors say whether none or several matched.
pub fn find_result(store: &Store, prefix: &str) -> Result<(String, ResultRecord), FindError> {
    if prefix.len() < 4 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(FindError::NotAnId {
            noun: "result",
            prefix: prefix.to_string(),
        });
    }
    let mut matches: Vec<(String, ResultRecord)> = results(store)
        .into_iter()
        .filter(|(id, _)| id.starts_with(&prefix.to_lowercase()))
        .collect();
    match matches.len() {
        0 => Err(
            unreadable(store, &[Kind::Result], &prefix.to_lowercase()).unwrap_or(FindError::None {
                noun: "result",
                prefix: prefix.to_string(),
            }),
        ),
        1 => Ok(matches.remove(0)),
        count => Err(FindError::Ambiguous {
            nouns: "results",
            prefix: prefix.to_string(),
            count,
            examples: matches
                .iter()
                .take(5)
                .map(|(id, _)| keys::short(id))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The one record of any kind whose ID starts with `prefix`.
pub fn find(store: &Store, prefix: &str) -> Result<(Entry, Record), FindError> {
    if prefix.len() < 4 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(FindError::NotAnId {
            noun: "record",
            prefix: prefix.to_string(),
        });
    }
    let p = prefix.to_lowercase();
    let mut matches: Vec<(Entry, Record)> = list(store, &[])
        .into_iter()
        .filter(|(e, _)| e.id.starts_with(&p))
        .collect();
    match matches.len() {
        0 => Err(
            unreadable(store, &Kind::ALL, &p).unwrap_or(FindError::None {
                noun: "record",
                prefix: prefix.to_string(),
            }),
        ),
        1 => Ok(matches.remove(0)),
        count => Err(FindError::Ambiguous {
            nouns: "records",
            prefix: prefix.to_string(),
            count,
            examples: matches
                .iter()
                .take(5)
                .map(|(e, _)| format!("{} {}", e.kind.word(), keys::short(&e.id)))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Records a finished bisection's report (`question` says what was asked: mode, name, good
/// and bad ends) and returns its ID, the sha256 of its content.
pub fn record_bisection(
    store: &Store,
    question: records::Question,
    report: &BisectRecord,
) -> Result<String, StoreError> {
    let mut rec = report.clone();
    rec.kind = Some("bisection".into());
    rec.question = Some(question);
    rec.created_at = Some(records::now());
    rec.repro_version = Some(records::VERSION.into());
    rec.key = None;
    file_report(store, records::to_json(&rec))
}

/// Records a finished toolchain bisection's report (`question` says what was asked: mode,
/// recipe, the releases' range) and returns its ID, the sha256 of its content.
pub fn record_toolchain_bisection(
    store: &Store,
    question: Value,
    report: &records::ToolchainBisectRecord,
) -> Result<String, StoreError> {
    let mut rec = report.clone();
    rec.question = Some(question);
    rec.created_at = Some(records::now());
    rec.repro_version = Some(records::VERSION.into());
    rec.key = None;
    file_report(store, records::to_json(&rec))
}

/// Files a report under its ID, the sha256 of its content, which it then carries as `key`
/// (the member both report types end with, absent until now).
fn file_report(store: &Store, mut rec: Value) -> Result<String, StoreError> {
    let id = keys::key_of(&rec);
    rec["key"] = Value::String(id.clone());
    store.put_record(records::BISECTIONS, &id, &rec)?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_is_listed_newest_first_and_found_by_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::at(dir.path());
        let fixture = |name: &str| -> Value {
            let p = format!(
                "{}/tests/fixtures/records/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        let mut build = fixture("build-ok.json");
        let key = build["key"].as_str().unwrap().to_string();
        let blob = store.put_blob(&[0u8; 2048]).unwrap();
        build["outputs"] = json!({"ptx": {"sha256": blob, "bytes": 2048}});
        build["duration-ms"] = json!(5.0);
        build["created-at"] = json!("2026-01-01T00:00:01.000Z");
        build["commit"] = json!("c".repeat(40));
        store.put_record("builds", &key, &build).unwrap();
        let mut result = fixture("result-command.json");
        result["created-at"] = json!("2026-01-01T00:00:03.000Z");
        let result = ResultRecord::from_json(&result, "r").unwrap();
        let rid = put_result(&store, &result).unwrap();
        let mut report = fixture("bisection.json");
        report["outcome"] = json!({"kind": "first-bad", "index": 3});
        report["culprit"]["hash"] = json!("d".repeat(40));
        report["commits"] = json!(8);
        report["evaluated"] = json!(5);
        report["kind"] = json!("bisection");
        let report = BisectRecord::from_json(&report, "b").unwrap();
        let bid = record_bisection(
            &store,
            records::Question {
                mode: "build".into(),
                name: Some("k".into()),
                good: Some("e".repeat(40)),
                bad: Some("f".repeat(40)),
            },
            &report,
        )
        .unwrap();
        let all = list(&store, &[]);
        let kinds: Vec<Kind> = all.iter().map(|(e, _)| e.kind).collect();
        // The bisection was recorded now, the result and the build in 2026, in that order.
        assert_eq!(kinds, [Kind::Bisection, Kind::Result, Kind::Build]);
        assert_eq!(all[2].0.summary, "ptx 2.0 KiB, 5.0 ms");
        assert_eq!(all[0].0.status, "found");
        assert_eq!(all[0].0.commit.as_deref(), Some("d".repeat(40).as_str()));
        assert!(all[0].0.summary.contains("first bad dddddddddddd"));
        assert_eq!(list(&store, &[Kind::Build]).len(), 1);
        assert_eq!(find(&store, &rid[..6]).unwrap().0.kind, Kind::Result);
        assert_eq!(find(&store, &bid[..8]).unwrap().0.kind, Kind::Bisection);
        assert_eq!(find(&store, &key[..5]).unwrap().0.kind, Kind::Build);
        assert!(matches!(find(&store, "zz"), Err(FindError::NotAnId { .. })));
        assert!(matches!(
            find(&store, "0123456"),
            Err(FindError::None { .. })
        ));
        // The store still verifies with a bisection in it.
        let v = store.verify();
        assert!(v.problems.is_empty(), "{:?}", v.problems);
    }

    #[test]
    fn a_build_bisection_over_releases_reads_as_one_and_is_listed() {
        let rec = json!({
            "schema": 1, "kind": "toolchain-bisection", "recipe": "va", "mode": "build",
            "family": "nvrtc", "releases": ["12.8.93", "12.9.86", "13.0.88"],
            "releases-from": "the wheel directory /w", "commit": "a".repeat(40),
            "answers": [
                {"target": "sm_70", "first-bad": "13.0.88", "last-good": "12.9.86", "undecided": []},
                {"target": "sm_90", "first-bad": null, "last-good": null, "undecided": [],
                 "unchanged": "good with nvrtc@12.8.93 and good with nvrtc@13.0.88"}
            ],
            "steps": [{"release": "13.0.88", "target": "sm_70", "verdict": "bad",
                       "key": "b".repeat(64), "cached": false, "detail": "error"}],
            "wheels": {}, "created-at": "2026-01-01T00:00:00.000Z", "key": "c".repeat(64)
        });
        let r = Record::from_json(Kind::Bisection, "c", &rec).unwrap();
        let Record::ToolchainBuildBisection(b) = &r else {
            panic!("read as {r:?}");
        };
        assert!(b.found());
        assert_eq!(r.to_json(), rec);
        let e = entry("c", &r);
        assert_eq!(e.status, "found");
        assert_eq!(
            e.summary,
            "build nvrtc 12.8.93..13.0.88, 0 of 3 releases evaluated; first bad sm_70 nvrtc@13.0.88"
        );
        // A target that changes but is not pinned down is not found.
        let mut undecided = rec.clone();
        undecided["answers"][0]["first-bad"] = Value::Null;
        let r = Record::from_json(Kind::Bisection, "c", &undecided).unwrap();
        assert_eq!(entry("c", &r).status, "untestable");
        // Hostile records are refused, not half-read.
        for (path, bad) in [
            ("/steps/0/verdict", json!("maybe")),
            ("/answers/0/target", json!(7)),
            ("/schema", json!(99)),
        ] {
            let mut v = rec.clone();
            *v.pointer_mut(path).unwrap() = bad;
            assert!(
                Record::from_json(Kind::Bisection, "c", &v).is_err(),
                "{path}"
            );
        }
        let mut extra = rec.clone();
        extra["steps"][0]["run"] = json!("rm -rf /");
        assert!(Record::from_json(Kind::Bisection, "c", &extra).is_err());
    }
}
