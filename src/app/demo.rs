//! `repro demo [--keep DIR] [--json]`: the whole tool on a throwaway repository, with no setup.
//!
//! The repository is made from data embedded in the binary: about 60 commits of a small kernel
//! project in which one commit breaks the build (fixed some commits later), one makes a kernel
//! return a wrong result, one makes a kernel measurably slower, and most change nothing that
//! matters (documentation, other files). Every step runs the real `repro` commands on it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::demo::{BREAKS, COMMITS, SLOWER, WRONG, make_history};
use crate::foundation::exit;
use crate::foundation::output::Style;
use crate::foundation::process::Cmd;
use crate::foundation::records::BisectRecord;

/// Arguments of `repro demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep the demo repository (and its bundle) in DIR instead of a temporary directory.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
}

/// Commits in the demo history, and where things happen in it.
/// Runs `repro ARGS --json` in `root` and returns its exit code and JSON.
fn repro(root: &Path, args: &[&str]) -> anyhow::Result<(i32, Value, String)> {
    let exe = std::env::current_exe().context("failed to find the repro executable")?;
    let out = Cmd::new(exe)
        .arg("-C")
        .arg(root)
        .args(args)
        .arg("--json")
        .timeout(Duration::from_secs(1800))
        .output()?;
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    Ok((out.status.code().unwrap_or(-1), v, out.stderr_str()))
}

/// A bisection's report as `repro bisect --json` printed it (`None` if it printed none).
fn report(v: &Value) -> Option<BisectRecord> {
    BisectRecord::from_report(v, "the bisection's report").ok()
}

/// The subject of a report's culprit, or `?`.
fn culprit_subject(r: &Option<BisectRecord>) -> &str {
    r.as_ref()
        .and_then(|r| r.culprit.as_ref())
        .map_or("?", |c| c.subject.as_str())
}

/// The short hash of a report's culprit, or `?`.
fn culprit_hash(r: &Option<BisectRecord>) -> &str {
    r.as_ref()
        .and_then(|r| r.culprit.as_ref())
        .map_or("?", |c| &c.hash[..12.min(c.hash.len())])
}

/// Runs `repro demo`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let start = Instant::now();
    let style = Style::for_stdout();
    let say = |title: &str, body: &str| -> anyhow::Result<()> {
        if !g.json {
            emit(&format!("{} {title}\n{body}", style.bold("==>")))?;
        }
        Ok(())
    };
    let tmp = tempfile::tempdir()?;
    let base = match &a.keep {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            std::path::absolute(d)?
        }
        None => tmp.path().to_path_buf(),
    };
    let root = base.join("demo-repo");
    if root.exists() {
        return Err(crate::foundation::error::UserError::usage(format!(
            "{} already exists",
            root.display()
        ))
        .hint("choose another --keep DIR")
        .into());
    }
    let hashes = make_history(&root)?;
    let short = |i: usize| hashes[i - 1][..12].to_string();
    say(
        "a throwaway repository",
        &format!(
            "  {} commits of a small kernel project in {}\n",
            COMMITS,
            root.display()
        ),
    )?;

    // 1. The machine, and a lockfile for it.
    let (_, fp, _) = repro(&root, &["env", "capture"])?;
    let gpu = fp["gpu"]["devices"][0]["name"].as_str().map(str::to_string);
    let nvrtc = fp["toolchain"]["nvrtc"]["version"]
        .as_str()
        .map(str::to_string);
    let (_, lock, _) = repro(&root, &["env", "lock", "--name", "demo"])?;
    let (check_code, check, _) = repro(&root, &["env", "check", "--lock", "lockfiles/demo.toml"])?;
    say(
        "repro env capture / lock / check",
        &format!(
            "  GPU: {}; NVRTC: {}\n  wrote {} ({} exact, {} warn); check: {} ({} ok, {} warnings)\n",
            gpu.as_deref().unwrap_or("none (no NVIDIA driver here)"),
            nvrtc.as_deref().unwrap_or("not found"),
            lock["lockfile"].as_str().unwrap_or("?"),
            lock["policies"]["exact"],
            lock["policies"]["warn"],
            if check_code == 0 { "passed" } else { "failed" },
            check["counts"]["ok"],
            check["counts"]["warn"],
        ),
    )?;

    // 2. A compiler, provisioned if there is none.
    let mut toolchain = json!({"nvrtc": nvrtc});
    if nvrtc.is_none() {
        let (code, inst, err) = repro(
            &root,
            &[
                "toolchain",
                "install",
                "--nvrtc",
                "13.0.88",
                "--sha256",
                "ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575",
            ],
        )?;
        toolchain = json!({"installed": code == 0, "detail": if code == 0 { inst } else { Value::from(err.lines().next().unwrap_or_default()) }});
        say(
            "repro toolchain install",
            &format!(
                "  {}\n",
                if code == 0 {
                    "installed NVRTC 13.0.88 (sha256 verified)".to_string()
                } else {
                    format!(
                        "could not install NVRTC: {}",
                        err.lines().next().unwrap_or_default()
                    )
                }
            ),
        )?;
        if code != 0 {
            return Err(crate::foundation::error::UserError::with_code(
                exit::ENVIRONMENT,
                "the demo needs NVRTC to build kernels",
            )
            .hint("run `repro toolchain install`, or set REPRO_NVRTC")
            .into());
        }
    }

    // 3. Which commit broke the build, and which fixed it.
    let (_, broke, err) = repro(
        &root,
        &[
            "bisect",
            "--good",
            &short(1),
            "--bad",
            &short(BREAKS + 2),
            "--recipe",
            "vector_add",
        ],
    )?;
    let broke = report(&broke);
    let broke_subject = culprit_subject(&broke).to_string();
    let (_, fixed, _) = repro(
        &root,
        &[
            "bisect",
            "--bad",
            &short(BREAKS),
            "--good",
            &short(COMMITS),
            "--recipe",
            "vector_add",
            "--find",
            "fixed",
        ],
    )?;
    let fixed = report(&fixed);
    say(
        "repro bisect --mode build (and --find fixed)",
        &format!(
            "  first bad build: {} {} ({} evaluations)\n  first fixed:     {} {}\n{}",
            culprit_hash(&broke),
            broke_subject,
            broke
                .as_ref()
                .map_or("?".into(), |b| b.evaluated.to_string()),
            culprit_hash(&fixed),
            culprit_subject(&fixed),
            if broke.is_none() {
                format!("  {err}\n")
            } else {
                String::new()
            },
        ),
    )?;

    // 4. Wrong results and slowdowns need a GPU.
    let has_gpu = gpu.is_some();
    let (wrong, slower) = if has_gpu {
        let (_, w, _) = repro(
            &root,
            &[
                "bisect",
                "--good",
                &short(1),
                "--bad",
                &short(COMMITS),
                "--recipe",
                "vector_add",
                "--mode",
                "check",
            ],
        )?;
        let w = report(&w);
        let (_, s, _) = repro(
            &root,
            &[
                "bisect",
                "--good",
                &short(1),
                "--bad",
                &short(COMMITS),
                "--recipe",
                "spin",
                "--mode",
                "bench",
                "--threshold",
                "2%",
                "--min-time",
                "150ms",
            ],
        )?;
        let s = report(&s);
        say(
            "repro bisect --mode check / --mode bench",
            &format!(
                "  first wrong result: {}\n  first slower:       {} (ratio {})\n",
                culprit_subject(&w),
                culprit_subject(&s),
                s.as_ref()
                    .and_then(BisectRecord::recheck_ratio)
                    .map_or("?".into(), |r| format!("{r:.4}")),
            ),
        )?;
        let culprit = |r: &Option<BisectRecord>| json!(r.as_ref().and_then(|r| r.culprit.clone()));
        (culprit(&w), culprit(&s))
    } else {
        say(
            "repro bisect --mode check / --mode bench",
            &format!(
                "  these need a GPU, and this machine has none. On a GPU machine the demo runs:\n    repro bisect --good {} --bad {} --recipe vector_add --mode check\n    repro bisect --good {} --bad {} --recipe spin --mode bench --threshold 2%\n  and finds commit {WRONG} (wrong last element) and commit {SLOWER} (3% slower).\n",
                short(1),
                short(COMMITS),
                short(1),
                short(COMMITS),
            ),
        )?;
        (json!("needs a GPU"), json!("needs a GPU"))
    };

    // 5. Records, a bundle, its verification, and a replay in an empty directory.
    let (_, builds, _) = repro(&root, &["build", "--all"])?;
    let keys: Vec<String> = builds["builds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["key"].as_str().map(str::to_string))
        .collect();
    let bundle = base.join("demo-bundle.tar.zst");
    let mut args: Vec<&str> = vec!["bundle", "create"];
    args.extend(keys.iter().map(String::as_str));
    args.extend([
        "-o",
        bundle.to_str().unwrap_or("demo-bundle.tar.zst"),
        "--force",
    ]);
    let (_, created, _) = repro(&root, &args)?;
    let (verify_code, _, _) = repro(
        &root,
        &["bundle", "verify", bundle.to_str().unwrap_or_default()],
    )?;
    let empty = base.join("empty");
    std::fs::create_dir_all(&empty)?;
    let first_key = keys.first().cloned().unwrap_or_default();
    let (replay_code, replay, _) = repro(
        &empty,
        &[
            "replay",
            &first_key,
            "--bundle",
            bundle.to_str().unwrap_or_default(),
        ],
    )?;
    say(
        "repro build --all / bundle create / bundle verify / replay",
        &format!(
            "  {} builds recorded; bundle {} ({} files), verify: {}\n  replay of build {} from the bundle in an empty directory: {}\n",
            keys.len(),
            bundle.display(),
            created["files"],
            if verify_code == 0 { "ok" } else { "FAILED" },
            &first_key[..12.min(first_key.len())],
            replay["verdict"].as_str().unwrap_or("?"),
        ),
    )?;

    let secs = start.elapsed().as_secs_f64();
    let ok = broke_subject.contains("breaks the build") && verify_code == 0 && replay_code == 0;
    let summary = json!({
        "schema": 1,
        "commits": COMMITS,
        "gpu": gpu,
        "toolchain": toolchain,
        "build-break": broke.as_ref().and_then(|b| b.culprit.clone()),
        "build-fix": fixed.as_ref().and_then(|b| b.culprit.clone()),
        "wrong-result": wrong,
        "slowdown": slower,
        "bundle": {"path": if a.keep.is_some() { Value::from(bundle.display().to_string()) } else { Value::Null }, "verified": verify_code == 0},
        "replay": replay["verdict"],
        "repository": if a.keep.is_some() { Value::from(root.display().to_string()) } else { Value::Null },
        "seconds": secs,
        "ok": ok,
    });
    if g.json {
        emit_json(&summary)?;
    } else {
        let kept = match &a.keep {
            Some(_) => format!(
                "  kept: repository {} and bundle {}\n",
                root.display(),
                bundle.display()
            ),
            None => "  (pass --keep DIR to keep the repository and the bundle)\n".to_string(),
        };
        emit(&format!(
            "{} found the build break ({}), its fix ({}), {}; bundled, verified and replayed byte for byte, in {secs:.1} s\n{kept}",
            style.bold("summary:"),
            broke_subject,
            culprit_subject(&fixed),
            if has_gpu {
                "the wrong result and the slowdown".to_string()
            } else {
                "and showed what needs a GPU".to_string()
            },
        ))?;
    }
    Ok(if ok { exit::OK } else { exit::MISMATCH })
}
