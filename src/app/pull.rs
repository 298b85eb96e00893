//! `repro pull [REMOTE]`: file the records a git remote holds (refs/repro/…) in the store.

use serde_json::json;

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::share::{self, Summary};
use crate::foundation::exit;
use crate::foundation::git;

/// Arguments of `repro pull`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A remote of this repository, or a URL.
    #[arg(default_value = "origin", value_parser = crate::app::context::non_empty())]
    remote: String,
}

/// Runs `repro pull`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    share(g, &a.remote, false)
}

/// A push (`push` true) or a pull, reported; exit 1 when some name conflicts or a record
/// from the remote failed its checks.
pub fn share(g: &Globals, remote: &str, push: bool) -> anyhow::Result<u8> {
    let store = g.store();
    store.check_schema()?;
    let repo = git::open(&g.cwd)?;
    let summary = if push {
        share::push(&repo, &store, remote)?
    } else {
        share::pull(&repo, &store, remote)?
    };
    if g.json {
        emit_json(&json!({"schema": 1, "remote": remote, "push": push, "summary": summary}))?;
    } else {
        emit(&render(&summary, remote, push))?;
    }
    Ok(
        if summary.conflicts.is_empty() && summary.rejected.is_empty() {
            exit::OK
        } else {
            exit::MISMATCH
        },
    )
}

fn render(s: &Summary, remote: &str, push: bool) -> String {
    let n: usize = s.records.values().sum();
    let kinds = s
        .records
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = format!(
        "{} {n} records{} and {} objects {} {remote}; {} already the same there\n",
        if push { "pushed" } else { "pulled" },
        if kinds.is_empty() {
            String::new()
        } else {
            format!(" ({kinds})")
        },
        s.objects,
        if push { "to" } else { "from" },
        s.unchanged
    );
    if s.not_shared > 0 {
        out.push_str(&format!(
            "not shared: {} performance steps (their samples compare only on the card that took them)\n",
            s.not_shared
        ));
    }
    for c in &s.conflicts {
        out.push_str(&format!("conflict: {}: {}\n", c.name, c.what));
    }
    for c in &s.rejected {
        out.push_str(&format!("rejected: {}: {}\n", c.name, c.what));
    }
    if !s.conflicts.is_empty() {
        out.push_str("hint: nothing was replaced on either side; `repro store verify` checks this store, and the two records of a key can be compared with `git cat-file -p`\n");
    }
    out
}
