//! `repro bundle create | verify | show`: archive results for a paper, check an archive
//! against its manifest, and list what it claims.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::bundle::{self, Contents};
use crate::foundation::archive;
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::keys;

/// Arguments of `repro bundle`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: BundleCommand,
}

#[derive(Debug, clap::Subcommand)]
enum BundleCommand {
    /// Write a bundle of results (IDs from `repro log`) or builds (keys), with their sources.
    Create {
        /// Result IDs or build keys (unique prefixes are fine).
        #[arg(required = true, value_name = "ID", value_parser = crate::app::context::non_empty())]
        ids: Vec<String>,
        /// The archive to write (.tar.zst).
        #[arg(short, long, value_name = "FILE", value_parser = crate::app::context::non_empty_path())]
        output: PathBuf,
        /// Only the recipes' inputs (and the pinned environment), not the whole tree.
        #[arg(long)]
        inputs_only: bool,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Re-hash every file against MANIFEST; exit 1 naming any file that differs, is missing or extra.
    Verify {
        /// The archive.
        #[arg(value_parser = crate::app::context::non_empty_path())]
        file: PathBuf,
    },
    /// List the claims (results and builds) of a bundle; exit 1 if it does not match its MANIFEST.
    Show {
        /// The archive.
        #[arg(value_parser = crate::app::context::non_empty_path())]
        file: PathBuf,
    },
}

/// Runs `repro bundle ...`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    match a.command {
        BundleCommand::Create {
            ids,
            output,
            inputs_only,
            force,
        } => create(g, &ids, &g.cwd.join(output), inputs_only, force),
        BundleCommand::Verify { file } => verify(g, &g.cwd.join(file)),
        BundleCommand::Show { file } => show(g, &g.cwd.join(file)),
    }
}

/// A bundle written: what it holds, its digest and sizes.
pub(crate) struct Created {
    /// The results, builds and profiles it holds.
    pub contents: Contents,
    /// The archive's sha256.
    pub digest: String,
    /// Files in it, MANIFEST included.
    pub files: usize,
    /// Bytes before compression.
    pub bytes_in: usize,
    /// The archive's size.
    pub bytes: u64,
}

/// What `repro bundle create ...` or `bundle verify ...` did, run in this process without
/// printing (`repro demo`'s bundle step).
pub(crate) enum Done {
    /// `create`: the bundle written.
    Created(Created),
    /// `verify`: the check against MANIFEST and of every record.
    Verified(Box<crate::engines::bundle::Inspection>),
}

/// Runs `repro bundle create` or `verify` in this process, without printing.
pub(crate) fn run_quietly(g: &Globals, a: Args) -> anyhow::Result<Done> {
    match a.command {
        BundleCommand::Create {
            ids,
            output,
            inputs_only,
            force,
        } => create_bundle(g, &ids, &g.cwd.join(output), inputs_only, force).map(Done::Created),
        BundleCommand::Verify { file } => {
            verify_bundle(g, &g.cwd.join(file)).map(|i| Done::Verified(Box::new(i)))
        }
        BundleCommand::Show { .. } => anyhow::bail!("`repro bundle show` only prints"),
    }
}

fn create(
    g: &Globals,
    ids: &[String],
    output: &std::path::Path,
    inputs_only: bool,
    force: bool,
) -> anyhow::Result<u8> {
    let Created {
        contents,
        digest,
        files,
        bytes_in: bytes,
        bytes: size,
    } = create_bundle(g, ids, output, inputs_only, force)?;
    let count = files - 1;
    if g.json {
        emit_json(
            &json!({"schema": 1, "bundle": g.shown(output), "sha256": digest, "files": count + 1, "bytes-in": bytes, "bytes": size,
            "results": contents.results.keys().collect::<Vec<_>>(), "builds": contents.builds.keys().collect::<Vec<_>>(),
            "profiles": contents.profiles.keys().collect::<Vec<_>>()}),
        )?;
    } else if !g.quiet {
        let profiles = match contents.profiles.len() {
            0 => String::new(),
            n => format!(", {n} profiles"),
        };
        emit(&format!(
            "wrote {} ({} results, {} builds{profiles}, {} files, {:.1} KiB from {:.1} KiB; sha256 {})\n",
            g.shown(output),
            contents.results.len(),
            contents.builds.len(),
            count + 1,
            size as f64 / 1024.0,
            bytes as f64 / 1024.0,
            keys::short(&digest)
        ))?;
    }
    Ok(exit::OK)
}

/// Writes the bundle of `ids` to `output`, with the progress bar unless `--json` or `-q`.
fn create_bundle(
    g: &Globals,
    ids: &[String],
    output: &std::path::Path,
    inputs_only: bool,
    force: bool,
) -> anyhow::Result<Created> {
    if crate::foundation::fsutil::would_replace(output) && !force {
        return Err(crate::foundation::fsutil::WriteError::Exists {
            path: output.to_path_buf(),
        }
        .into());
    }
    let store = g.store();
    store.check_schema()?;
    let results = crate::engines::catalog::results(&store);
    let builds = crate::engines::catalog::builds(&store);
    let profiles = bundle_profiles(&store);
    let mut contents = Contents::default();
    for id in ids {
        let p = id.to_lowercase();
        let r: Vec<_> = results.iter().filter(|(k, _)| k.starts_with(&p)).collect();
        let b: Vec<_> = builds.iter().filter(|(k, _)| k.starts_with(&p)).collect();
        let pr: Vec<_> = profiles.iter().filter(|(k, _)| k.starts_with(&p)).collect();
        match (r.as_slice(), b.as_slice(), pr.as_slice()) {
            ([one], [], []) if p.len() >= 4 => {
                // A result brings the profiles of its experiment along.
                for linked in crate::engines::profile::profiles_of_result(&store, &one.1) {
                    if let Some((_, rec)) = profiles.iter().find(|(k, _)| *k == linked) {
                        contents.profiles.insert(linked, rec.clone());
                    }
                }
                contents.results.insert(one.0.clone(), one.1.clone());
            }
            ([], [one], []) if p.len() >= 4 => {
                contents.builds.insert(one.0.clone(), one.1.clone());
            }
            ([], [], [one]) if p.len() >= 4 => {
                contents.profiles.insert(one.0.clone(), one.1.clone());
            }
            ([], [], []) => {
                use crate::engines::catalog::{Kind, unreadable};
                // A record there that does not read is named, not called absent.
                if p.len() >= 4
                    && let Some(e) =
                        unreadable(&store, &[Kind::Result, Kind::Build, Kind::Profile], &p)
                {
                    return Err(e.into());
                }
                return Err(
                    UserError::usage(format!("no result, build or profile with ID {id}"))
                        .hint("`repro log` lists results")
                        .into(),
                );
            }
            _ => {
                return Err(UserError::usage(format!("{id} is ambiguous or too short"))
                    .hint("give more hex digits")
                    .into());
            }
        }
    }
    bundle::complete(&store, &mut contents)?;
    let repo = crate::foundation::git::open(&g.cwd)?;
    let name = output.file_name().map_or_else(
        || "bundle.tar.zst".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let entries = bundle::entries(&repo, &store, &contents, inputs_only, &name)?;
    let count = entries.len();
    let bytes: usize = entries.iter().map(|e| e.bytes.len()).sum();
    let bar =
        crate::foundation::output::progress_bytes(g.quiet || g.json, 0, "compressing the bundle");
    // The check above only saves the work; the write itself never clobbers without --force
    // (another `bundle create` may publish the same path meanwhile).
    let digest = archive::write_with(output, entries, force, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .with_context(|| format!("failed to write bundle {}", g.shown(output)))?;
    bar.finish_and_clear();
    let size = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Ok(Created {
        contents,
        digest,
        files: count + 1,
        bytes_in: bytes,
        bytes: size,
    })
}

/// Every profile of the store, by ID (damaged ones are left out: `repro store verify` names them).
fn bundle_profiles(
    store: &crate::foundation::store::Store,
) -> Vec<(String, crate::foundation::records::ProfileRecord)> {
    store
        .records(crate::foundation::records::PROFILES)
        .into_iter()
        .filter_map(|(id, _, v)| {
            let p = crate::foundation::records::ProfileRecord::from_json(&v.ok()?, &id).ok()?;
            Some((id, p))
        })
        .collect()
}

fn verify(g: &Globals, file: &std::path::Path) -> anyhow::Result<u8> {
    let i = verify_bundle(g, file)?;
    let v = &i.scan.verification;
    if g.json {
        let invalid: Vec<Value> = i
            .invalid
            .iter()
            .map(|(path, problem)| json!({"path": path, "problem": problem}))
            .collect();
        emit_json(&json!({
            "schema": 1, "bundle": g.shown(file), "ok": i.ok(), "verification": v,
            "invalid-records": invalid,
        }))?;
    } else {
        let mut out = String::new();
        for (label, list) in [
            ("DIFFERS", &v.differs),
            ("MISSING", &v.missing),
            ("EXTRA", &v.extra),
        ] {
            for p in list {
                out.push_str(&format!("{label:<8} {p}\n"));
            }
        }
        for (path, problem) in &i.invalid {
            out.push_str(&format!(
                "{:<8} {}: {}\n",
                "INVALID",
                crate::foundation::output::sanitize(path),
                crate::foundation::output::sanitize(problem)
            ));
        }
        out.push_str(&format!(
            "{}: {} files in MANIFEST, {} differ, {} missing, {} extra, {} invalid records\n",
            if i.ok() { "ok" } else { "FAILED" },
            v.files,
            v.differs.len(),
            v.missing.len(),
            v.extra.len(),
            i.invalid.len()
        ));
        if !g.quiet || !i.ok() {
            emit(&out)?;
        }
    }
    Ok(if i.ok() { exit::OK } else { exit::MISMATCH })
}

/// Verifies the bundle `file` against its MANIFEST and checks every record in it, with the
/// progress bar unless `--json` or `-q`.
fn verify_bundle(
    g: &Globals,
    file: &std::path::Path,
) -> anyhow::Result<crate::engines::bundle::Inspection> {
    let bar =
        crate::foundation::output::progress_bytes(g.quiet || g.json, 0, "verifying the bundle");
    let i = crate::engines::bundle::inspect(
        file,
        &|done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
        None,
    )
    .with_context(|| format!("failed to verify {}", g.shown(file)))?;
    bar.finish_and_clear();
    Ok(i)
}

fn show(g: &Globals, file: &std::path::Path) -> anyhow::Result<u8> {
    // One streaming pass: the list, the check against MANIFEST and the README's first MiB.
    let inspection = crate::engines::bundle::inspect(file, &|_, _| {}, Some("README.md"))
        .with_context(|| format!("failed to read {}", g.shown(file)))?;
    let scan = &inspection.scan;
    let v = &scan.verification;
    // The README is someone else's text: no terminal escape sequences reach the screen.
    let readme = scan.kept.as_ref().map(|bytes| {
        let mut text = crate::foundation::output::sanitize(&String::from_utf8_lossy(bytes));
        if scan
            .members
            .iter()
            .any(|(p, n)| p == "README.md" && *n > archive::SCAN_KEEP_BYTES)
        {
            text.push_str("\n[... README.md continues past its first MiB]\n");
        }
        text
    });
    if g.json {
        let list: Vec<Value> = scan
            .members
            .iter()
            .map(|(path, bytes)| json!({"path": path, "bytes": bytes}))
            .collect();
        emit_json(
            &json!({"schema": 1, "bundle": g.shown(file), "ok": inspection.ok(), "files": list}),
        )?;
    } else {
        if !v.ok() {
            say!(
                "warning: {} does not match its MANIFEST ({} differ, {} missing, {} extra): what it claims below is not to be trusted; `repro bundle verify` lists them",
                g.shown(file),
                v.differs.len(),
                v.missing.len(),
                v.extra.len()
            );
        }
        if !inspection.invalid.is_empty() {
            say!(
                "warning: {} holds {} records that fail their checks (the first: {}): what it claims below is not to be trusted; `repro bundle verify` lists them",
                g.shown(file),
                inspection.invalid.len(),
                crate::foundation::output::sanitize(&inspection.invalid[0].0)
            );
        }
        let total: u64 = scan.members.iter().map(|(_, n)| n).sum();
        emit(&format!(
            "{}: {} files, {:.1} KiB unpacked\n\n",
            g.shown(file),
            scan.members.len(),
            total as f64 / 1024.0
        ))?;
        if let Some(r) = readme {
            emit(&r)?;
        }
    }
    Ok(if v.ok() { exit::OK } else { exit::MISMATCH })
}
