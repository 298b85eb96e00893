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
use crate::engines::demo::{BREAKS, COMMITS, Machine, SLOWER, WRONG, make_history};
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

/// Runs `repro ARGS --json` in `root` and returns its exit code, its JSON read as `T` (the
/// type of that command's output; `None` if it printed none that reads) and its stderr.
fn repro<T: serde::de::DeserializeOwned>(
    root: &Path,
    args: &[&str],
) -> anyhow::Result<(i32, Option<T>, String)> {
    let exe = std::env::current_exe().context("failed to find the repro executable")?;
    let out = Cmd::new(exe)
        .arg("-C")
        .arg(root)
        .args(args)
        .arg("--json")
        .timeout(Duration::from_secs(1800))
        .output()?;
    let v = serde_json::from_slice(&out.stdout).ok();
    Ok((out.status.code().unwrap_or(-1), v, out.stderr_str()))
}

/// A bisection's report as `repro bisect --json` printed it (`None` if it printed none),
/// and the command's stderr.
fn bisect(root: &Path, args: &[&str]) -> anyhow::Result<(Report, String)> {
    let (_, v, err) = repro::<Value>(root, &[&["bisect"], args].concat())?;
    Ok((
        v.and_then(|v| BisectRecord::from_report(&v, "the bisection's report").ok()),
        err,
    ))
}

/// A bisection's report, if there was one.
type Report = Option<BisectRecord>;

/// What `repro build --all --json` prints that the demo reads: each build's key.
#[derive(serde::Deserialize)]
struct BuiltAll {
    #[serde(default)]
    builds: Vec<Built>,
}

/// One build of `repro build --all --json`.
#[derive(serde::Deserialize)]
struct Built {
    key: Option<String>,
}

/// What `repro bundle create --json` prints that the demo reads.
#[derive(serde::Deserialize)]
struct Bundled {
    files: Option<u64>,
}

/// What `repro replay --json` prints that the demo reads.
#[derive(serde::Deserialize)]
struct Replayed {
    verdict: Option<String>,
}

/// The subject of a report's culprit, or `?`.
fn culprit_subject(r: &Report) -> &str {
    r.as_ref()
        .and_then(|r| r.culprit.as_ref())
        .map_or("?", |c| c.subject.as_str())
}

/// The short hash of a report's culprit, or `?`.
fn culprit_hash(r: &Report) -> &str {
    r.as_ref()
        .and_then(|r| r.culprit.as_ref())
        .map_or("?", |c| &c.hash[..12.min(c.hash.len())])
}

/// Prints each part's title and body (not with `--json`).
struct Narrator {
    json: bool,
    style: Style,
}

impl Narrator {
    fn say(&self, title: &str, body: &str) -> anyhow::Result<()> {
        if !self.json {
            emit(&format!("{} {title}\n{body}", self.style.bold("==>")))?;
        }
        Ok(())
    }
}

/// The demo repository and where it lives.
struct Demo {
    base: PathBuf,
    root: PathBuf,
    hashes: Vec<String>,
}

impl Demo {
    /// The short hash of commit `i` (1-based).
    fn short(&self, i: usize) -> String {
        self.hashes[i - 1][..12].to_string()
    }
}

/// Runs `repro demo`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let start = Instant::now();
    let n = Narrator {
        json: g.json,
        style: Style::for_stdout(),
    };
    let tmp = tempfile::tempdir()?;
    let demo = make_repository(&a, tmp.path())?;
    n.say(
        "a throwaway repository",
        &format!(
            "  {} commits of a small kernel project in {}\n",
            COMMITS,
            demo.root.display()
        ),
    )?;
    let machine = machine_part(g, &n, &demo)?;
    let toolchain = toolchain_part(&n, &demo, machine.nvrtc.as_deref())?;
    let (broke, fixed) = build_bisections(&n, &demo)?;
    let has_gpu = machine.gpu.is_some();
    let (wrong, slower) = gpu_bisections(&n, &demo, has_gpu)?;
    let bundled = bundle_part(&n, &demo)?;

    let secs = start.elapsed().as_secs_f64();
    let broke_subject = culprit_subject(&broke).to_string();
    let ok = broke_subject.contains("breaks the build") && bundled.verified && bundled.replayed;
    let kept = |p: &Path| {
        a.keep
            .as_ref()
            .map_or(Value::Null, |_| Value::from(p.display().to_string()))
    };
    let summary = json!({
        "schema": 1,
        "commits": COMMITS,
        "gpu": machine.gpu,
        "toolchain": toolchain,
        "build-break": broke.as_ref().and_then(|b| b.culprit.clone()),
        "build-fix": fixed.as_ref().and_then(|b| b.culprit.clone()),
        "wrong-result": wrong,
        "slowdown": slower,
        "bundle": {"path": kept(&bundled.path), "verified": bundled.verified},
        "replay": bundled.verdict,
        "repository": kept(&demo.root),
        "seconds": secs,
        "ok": ok,
    });
    if g.json {
        emit_json(&summary)?;
    } else {
        let kept = match &a.keep {
            Some(_) => format!(
                "  kept: repository {} and bundle {}\n",
                demo.root.display(),
                bundled.path.display()
            ),
            None => "  (pass --keep DIR to keep the repository and the bundle)\n".to_string(),
        };
        emit(&format!(
            "{} found the build break ({}), its fix ({}), {}; bundled, verified and replayed byte for byte, in {secs:.1} s\n{kept}",
            n.style.bold("summary:"),
            broke_subject,
            culprit_subject(&fixed),
            if has_gpu {
                "the wrong result and the slowdown"
            } else {
                "and showed what needs a GPU"
            },
        ))?;
    }
    Ok(if ok { exit::OK } else { exit::MISMATCH })
}

/// Makes the demo repository under `--keep DIR`, or in `tmp`.
fn make_repository(a: &Args, tmp: &Path) -> anyhow::Result<Demo> {
    let base = match &a.keep {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            std::path::absolute(d)?
        }
        None => tmp.to_path_buf(),
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
    Ok(Demo { base, root, hashes })
}

/// Part 1: the machine, and a lockfile for it (`env capture`, `env lock` and `env check`
/// as engine calls, not child commands).
fn machine_part(g: &Globals, n: &Narrator, demo: &Demo) -> anyhow::Result<Machine> {
    let m = crate::engines::demo::machine(&demo.root, g.python.clone())?;
    let lockfile = m.lockfile.strip_prefix(&demo.root).unwrap_or(&m.lockfile);
    n.say(
        "repro env capture / lock / check",
        &format!(
            "  GPU: {}; NVRTC: {}\n  wrote {} ({} exact, {} warn); check: {} ({} ok, {} warnings)\n",
            m.gpu.as_deref().unwrap_or("none (no NVIDIA driver here)"),
            m.nvrtc.as_deref().unwrap_or("not found"),
            lockfile.display(),
            m.policies.exact,
            m.policies.warn,
            if m.passed { "passed" } else { "failed" },
            m.counts.ok,
            m.counts.warn,
        ),
    )?;
    Ok(m)
}

/// Part 2: a compiler, provisioned if there is none; returns the summary's `toolchain`.
fn toolchain_part(n: &Narrator, demo: &Demo, nvrtc: Option<&str>) -> anyhow::Result<Value> {
    if nvrtc.is_some() {
        return Ok(json!({ "nvrtc": nvrtc }));
    }
    let (code, inst, err) = repro::<Value>(
        &demo.root,
        &[
            "toolchain",
            "install",
            "--nvrtc",
            "13.0.88",
            "--sha256",
            "ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575",
        ],
    )?;
    let first_line = err.lines().next().unwrap_or_default().to_string();
    let detail = if code == 0 {
        inst.unwrap_or(Value::Null)
    } else {
        Value::from(first_line.clone())
    };
    n.say(
        "repro toolchain install",
        &format!(
            "  {}\n",
            if code == 0 {
                "installed NVRTC 13.0.88 (sha256 verified)".to_string()
            } else {
                format!("could not install NVRTC: {first_line}")
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
    Ok(json!({"installed": true, "detail": detail}))
}

/// Part 3: which commit broke the build, and which fixed it.
fn build_bisections(n: &Narrator, demo: &Demo) -> anyhow::Result<(Report, Report)> {
    let (broke, err) = bisect(
        &demo.root,
        &[
            "--good",
            &demo.short(1),
            "--bad",
            &demo.short(BREAKS + 2),
            "--recipe",
            "vector_add",
        ],
    )?;
    let (fixed, _) = bisect(
        &demo.root,
        &[
            "--bad",
            &demo.short(BREAKS),
            "--good",
            &demo.short(COMMITS),
            "--recipe",
            "vector_add",
            "--find",
            "fixed",
        ],
    )?;
    n.say(
        "repro bisect --mode build (and --find fixed)",
        &format!(
            "  first bad build: {} {} ({} evaluations)\n  first fixed:     {} {}\n{}",
            culprit_hash(&broke),
            culprit_subject(&broke),
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
    Ok((broke, fixed))
}

/// Part 4: wrong results and slowdowns, which need a GPU; returns the summary's culprits.
fn gpu_bisections(n: &Narrator, demo: &Demo, has_gpu: bool) -> anyhow::Result<(Value, Value)> {
    let (first, last) = (demo.short(1), demo.short(COMMITS));
    if !has_gpu {
        n.say(
            "repro bisect --mode check / --mode bench",
            &format!(
                "  these need a GPU, and this machine has none. On a GPU machine the demo runs:\n    repro bisect --good {first} --bad {last} --recipe vector_add --mode check\n    repro bisect --good {first} --bad {last} --recipe spin --mode bench --threshold 2%\n  and finds commit {WRONG} (wrong last element) and commit {SLOWER} (3% slower).\n",
            ),
        )?;
        return Ok((json!("needs a GPU"), json!("needs a GPU")));
    }
    let ends = ["--good", first.as_str(), "--bad", last.as_str()];
    let check = ["--recipe", "vector_add", "--mode", "check"];
    let (w, _) = bisect(&demo.root, &[&ends[..], &check[..]].concat())?;
    let bench = [
        "--recipe",
        "spin",
        "--mode",
        "bench",
        "--threshold",
        "2%",
        "--min-time",
        "150ms",
    ];
    let (s, _) = bisect(&demo.root, &[&ends[..], &bench[..]].concat())?;
    n.say(
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
    let culprit = |r: &Report| json!(r.as_ref().and_then(|r| r.culprit.clone()));
    Ok((culprit(&w), culprit(&s)))
}

/// What part 5 did: the bundle, its verification and the replay from it.
struct Bundle {
    path: PathBuf,
    verified: bool,
    replayed: bool,
    verdict: Option<String>,
}

/// Part 5: records, a bundle, its verification, and a replay in an empty directory.
fn bundle_part(n: &Narrator, demo: &Demo) -> anyhow::Result<Bundle> {
    let (_, builds, _) = repro::<BuiltAll>(&demo.root, &["build", "--all"])?;
    let keys: Vec<String> = builds
        .map(|b| b.builds.into_iter().filter_map(|b| b.key).collect())
        .unwrap_or_default();
    let path = demo.base.join("demo-bundle.tar.zst");
    let bundle = path.to_str().unwrap_or("demo-bundle.tar.zst");
    let mut args: Vec<&str> = vec!["bundle", "create"];
    args.extend(keys.iter().map(String::as_str));
    args.extend(["-o", bundle, "--force"]);
    let (_, created, _) = repro::<Bundled>(&demo.root, &args)?;
    let (verify_code, _, _) = repro::<Value>(&demo.root, &["bundle", "verify", bundle])?;
    let empty = demo.base.join("empty");
    std::fs::create_dir_all(&empty)?;
    let first_key = keys.first().cloned().unwrap_or_default();
    let (replay_code, replay, _) =
        repro::<Replayed>(&empty, &["replay", &first_key, "--bundle", bundle])?;
    let verdict = replay.and_then(|r| r.verdict);
    n.say(
        "repro build --all / bundle create / bundle verify / replay",
        &format!(
            "  {} builds recorded; bundle {} ({} files), verify: {}\n  replay of build {} from the bundle in an empty directory: {}\n",
            keys.len(),
            path.display(),
            created
                .and_then(|c| c.files)
                .map_or("?".into(), |f| f.to_string()),
            if verify_code == 0 { "ok" } else { "FAILED" },
            &first_key[..12.min(first_key.len())],
            verdict.as_deref().unwrap_or("?"),
        ),
    )?;
    Ok(Bundle {
        path,
        verified: verify_code == 0,
        replayed: replay_code == 0,
        verdict,
    })
}
