//! The catalogue of everything recorded in a store: builds, results and bisections, listed
//! together newest first (`repro log`) and found by a prefix of the name each is filed
//! under (`repro show`).
//!
//! Every kind of record keeps its own layout (see `build`, `bench` and `bisect`); this
//! module reads the few fields a listing needs from each into one [`Entry`], so that a
//! listing, a filter and a lookup treat all kinds alike.

use serde::Serialize;
use serde_json::{Value, json};

use crate::foundation::keys;
use crate::foundation::store::{Store, StoreError};

/// The directory of finished bisection reports in the store.
pub const BISECTIONS: &str = "bisections";

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
}

impl Kind {
    /// Every kind, in the order a listing's ties are broken.
    pub const ALL: [Kind; 3] = [Kind::Result, Kind::Build, Kind::Bisection];

    /// The store directory of this kind.
    pub fn dir(self) -> &'static str {
        match self {
            Kind::Build => "builds",
            Kind::Result => crate::engines::bench::RESULTS,
            Kind::Bisection => BISECTIONS,
        }
    }

    /// The word for it in listings.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Build => "build",
            Kind::Result => "result",
            Kind::Bisection => "bisection",
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
    #[error("`{0}` is not a record ID (at least 4 hex digits)")]
    NotAnId(String),
    /// No record matches.
    #[error("no record with ID {0}")]
    None(String),
    /// Several records match.
    #[error("{prefix} is ambiguous: {count} records match ({examples})")]
    Ambiguous {
        /// The prefix.
        prefix: String,
        /// How many matched.
        count: usize,
        /// A few of them, as `kind short-id`.
        examples: String,
    },
}

fn text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

/// Reads the listing's fields from a record of `kind`.
pub fn entry(kind: Kind, id: &str, r: &Value) -> Entry {
    let (name, commit, status, summary) = match kind {
        Kind::Build => {
            let mut parts: Vec<String> = r["outputs"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| {
                            format!("{k} {}", kib(v["bytes"].as_f64().unwrap_or_default()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            if let Some(ms) = r["duration-ms"].as_f64() {
                parts.push(format!("{ms:.1} ms"));
            }
            (
                text(&r["recipe"]).unwrap_or_default(),
                text(&r["commit"]),
                text(&r["status"]).unwrap_or_default(),
                parts.join(", "),
            )
        }
        Kind::Result => {
            let unit = r["unit"].as_str().unwrap_or("us");
            let s = &r["summary"];
            let median = s["median"].as_f64().map_or("-".to_string(), |m| {
                format!(
                    "median {} [{}, {}]",
                    crate::foundation::stats::fmt_value(m, unit),
                    crate::foundation::stats::fmt_value(s["ci-low"].as_f64().unwrap_or(m), unit),
                    crate::foundation::stats::fmt_value(s["ci-high"].as_f64().unwrap_or(m), unit)
                )
            });
            let params = crate::engines::bench::params_text(&r["params"]);
            let machine = r["machine"].as_str().unwrap_or_default();
            (
                text(&r["name"]).unwrap_or_default(),
                text(&r["commit"]),
                text(&r["verdict"]).unwrap_or_default(),
                [params, median, machine.to_string()]
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join("  "),
            )
        }
        Kind::Bisection => {
            let q = &r["question"];
            let found = r["outcome"]["kind"] == "first-bad";
            let culprit = text(&r["culprit"]["hash"]);
            let summary = format!(
                "{} {}..{}, {} of {} commits evaluated{}",
                q["mode"].as_str().unwrap_or("?"),
                q["good"].as_str().map_or("?", keys::short),
                q["bad"].as_str().map_or("?", keys::short),
                r["evaluated"],
                r["commits"],
                match (&culprit, r["find"].as_str()) {
                    (Some(c), Some("fixed")) => format!("; fixed by {}", keys::short(c)),
                    (Some(c), _) => format!("; first bad {}", keys::short(c)),
                    (None, _) => String::new(),
                }
            );
            (
                text(&q["name"]).unwrap_or_default(),
                culprit,
                if found { "found" } else { "untestable" }.to_string(),
                summary,
            )
        }
    };
    Entry {
        kind,
        id: id.to_string(),
        created_at: text(&r["created-at"]),
        name,
        commit,
        status,
        summary,
    }
}

/// Every record of the given kinds (all when empty), newest first; ties by kind, then ID.
/// Records that do not parse are left out (`store verify` reports them).
pub fn list(store: &Store, kinds: &[Kind]) -> Vec<(Entry, Value)> {
    let mut out = Vec::new();
    for kind in Kind::ALL {
        if !kinds.is_empty() && !kinds.contains(&kind) {
            continue;
        }
        for (id, _, parsed) in store.records(kind.dir()) {
            if let Ok(r) = parsed {
                out.push((entry(kind, &id, &r), r));
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

/// The one record of any kind whose ID starts with `prefix`.
pub fn find(store: &Store, prefix: &str) -> Result<(Entry, Value), FindError> {
    if prefix.len() < 4 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(FindError::NotAnId(prefix.to_string()));
    }
    let p = prefix.to_lowercase();
    let mut matches: Vec<(Entry, Value)> = list(store, &[])
        .into_iter()
        .filter(|(e, _)| e.id.starts_with(&p))
        .collect();
    match matches.len() {
        0 => Err(FindError::None(prefix.to_string())),
        1 => Ok(matches.remove(0)),
        count => Err(FindError::Ambiguous {
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
    question: Value,
    report: &Value,
) -> Result<String, StoreError> {
    let mut rec = report.clone();
    rec["kind"] = json!("bisection");
    rec["question"] = question;
    rec["created-at"] =
        json!(humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string());
    rec["repro-version"] = json!(env!("CARGO_PKG_VERSION"));
    let id = keys::key_of(&rec);
    rec["key"] = json!(id);
    store.put_record(BISECTIONS, &id, &rec)?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_newest_first_and_found_by_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::at(dir.path());
        let key = keys::key_of(&json!({"recipe": "k"}));
        let build = json!({"schema": 1, "kind": "build", "key": key, "recipe": "k", "status": "ok", "inputs": {"recipe": "k"},
            "outputs": {"ptx": {"bytes": 2048}}, "duration-ms": 5.0, "created-at": "2026-01-01T00:00:01.000Z", "commit": "c".repeat(40)});
        store.put_record("builds", &key, &build).unwrap();
        let result = json!({"schema": 1, "kind": "result", "name": "k", "verdict": "ok", "unit": "ms",
            "summary": {"median": 1.5}, "created-at": "2026-01-01T00:00:03.000Z"});
        let rid = crate::engines::bench::record(&store, result).unwrap();
        let report = json!({"outcome": {"kind": "first-bad", "index": 3}, "culprit": {"hash": "d".repeat(40)},
            "commits": 8, "evaluated": 5, "find": "broken"});
        let bid = record_bisection(
            &store,
            json!({"mode": "build", "name": "k", "good": "e".repeat(40), "bad": "f".repeat(40)}),
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
        assert!(matches!(find(&store, "zz"), Err(FindError::NotAnId(_))));
        assert!(matches!(find(&store, "0123456"), Err(FindError::None(_))));
        // The store still verifies with a bisection in it.
        let v = store.verify();
        assert!(v.problems.is_empty(), "{:?}", v.problems);
    }
}
