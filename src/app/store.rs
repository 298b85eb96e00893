//! `repro store path | verify | gc`: where the store is, whether it is intact, cleaning it.

use serde_json::json;

use crate::app::context::{Globals, emit, emit_json};
use crate::foundation::exit;

/// Arguments of `repro store`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Debug, clap::Subcommand)]
enum StoreCommand {
    /// Print where the store is.
    Path,
    /// Re-hash every object and check every record; exit 1 if anything is wrong.
    Verify,
    /// Remove corrupt and unreferenced objects and leftover temporary files.
    Gc {
        /// Also remove all but the newest N build records of each recipe.
        #[arg(long, value_name = "N")]
        keep_last: Option<usize>,
    },
}

/// Runs `repro store ...`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let store = g.store();
    store.check_schema()?;
    match a.command {
        StoreCommand::Path => {
            if g.json {
                emit_json(
                    &json!({"schema": 1, "path": store.root().display().to_string(), "exists": store.root().exists()}),
                )?;
            } else {
                emit(&format!("{}\n", store.root().display()))?;
            }
            Ok(exit::OK)
        }
        StoreCommand::Verify => {
            // Shared, like builds: verify never sees gc half-way.
            let _lock = store.lock_shared()?;
            let r = store.verify();
            if g.json {
                emit_json(&json!({"schema": 1, "ok": r.problems.is_empty(), "report": r}))?;
            } else {
                for p in &r.problems {
                    emit(&format!("CORRUPT  {}: {}\n", p.path, p.what))?;
                }
                if !g.quiet || !r.problems.is_empty() {
                    emit(&format!(
                        "{}: {} objects and {} records checked, {} problems\n",
                        if r.problems.is_empty() {
                            "ok"
                        } else {
                            "FAILED"
                        },
                        r.objects,
                        r.records,
                        r.problems.len()
                    ))?;
                }
            }
            Ok(if r.problems.is_empty() {
                exit::OK
            } else {
                exit::MISMATCH
            })
        }
        StoreCommand::Gc { keep_last } => {
            let r = store.gc(keep_last)?;
            if g.json {
                emit_json(&json!({"schema": 1, "report": r}))?;
            } else if !g.quiet {
                emit(&format!(
                    "removed {} records, {} objects and {} temporary files; {} bytes freed{}{}\n",
                    r.records_removed,
                    r.objects_removed,
                    r.temporaries_removed,
                    r.bytes_freed,
                    if r.records_quarantined > 0 {
                        format!(
                            "; {} damaged records moved to quarantine/",
                            r.records_quarantined
                        )
                    } else {
                        String::new()
                    },
                    if r.objects_quarantined > 0 {
                        format!(
                            "; {} files where objects belong moved to quarantine/",
                            r.objects_quarantined
                        )
                    } else {
                        String::new()
                    }
                ))?;
            }
            Ok(exit::OK)
        }
    }
}
