//! `repro demo [--keep DIR] [--json]`: the whole tool on a throwaway repository, with no setup.
//!
//! The repository is made from data embedded in the binary: about 60 commits of a small kernel
//! project in which one commit breaks the build (fixed some commits later), one makes a kernel
//! return a wrong result, one makes a kernel measurably slower, and most change nothing that
//! matters (documentation, other files). Every step runs what the real `repro` command runs,
//! in this process: its command line parsed as the command parses it, the work done by the
//! same functions, the typed outcome read instead of the command's printed JSON.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser as _;
use serde_json::{Value, json};

use crate::app::bundle::Done as BundleDone;
use crate::app::context::{GlobalArgs, Globals, emit, emit_json, globals};
use crate::engines::demo::{BREAKS, COMMITS, Machine, SLOWER, WRONG, make_history};
use crate::foundation::exit;
use crate::foundation::output::Style;
use crate::foundation::records::BisectRecord;

/// Arguments of `repro demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep the demo repository (and its bundle) in DIR instead of a temporary directory.
    #[arg(long, value_name = "DIR", value_parser = crate::app::context::non_empty_path())]
    keep: Option<PathBuf>,
}

/// The options and arguments of `repro -C ROOT COMMAND ARGS --json` (`T` the command's
/// arguments, `args` what follows the command's name), parsed as that command line would be (REPRO_STORE, REPRO_PYTHON and REPRO_OFFLINE from the environment included), so
/// that each step runs in this process as the command would run on its own. No step needs
/// a process of its own: the GPU work of a check or bench bisection runs in the GPU
/// children the bisection itself starts (`repro gpu-job`), so a kernel that faults or hangs
/// is a verdict there, not the end of the demo.
fn step<T: clap::Args>(root: &Path, args: &[&str]) -> anyhow::Result<(Globals, T)> {
    /// One command's global options and arguments.
    #[derive(clap::Parser)]
    struct Step<T: clap::Args> {
        #[command(flatten)]
        globals: GlobalArgs,
        #[command(flatten)]
        args: T,
    }
    let argv = ["repro".as_ref(), "-C".as_ref(), root.as_os_str()]
        .into_iter()
        .chain(args.iter().map(std::ffi::OsStr::new))
        .chain(["--json".as_ref()]);
    let step = Step::<T>::try_parse_from(argv).context("the demo's step does not parse")?;
    let mut g = globals(step.globals)?;
    // What the step would say on stderr (a bisection's step lines, notes) is not the demo's
    // story, which tells each step's outcome itself.
    g.quiet = true;
    Ok((g, step.args))
}

/// A bisection's record as `repro bisect` stores it (`None` if it failed), and why it
/// failed (the error, as the command would print it).
fn bisect(root: &Path, args: &[&str]) -> anyhow::Result<(Report, String)> {
    let (g, a) = step(root, args)?;
    Ok(match crate::app::bisect::bisect_quietly(&g, a) {
        Ok(done) => (Some(done.doc), String::new()),
        Err(e) => (None, format!("error: {e:#}")),
    })
}

/// A bisection's report, if there was one.
type Report = Option<BisectRecord>;

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
    let (g, a) = step(
        &demo.root,
        &[
            "install",
            "--nvrtc",
            "13.0.88",
            "--sha256",
            "ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575",
        ],
    )?;
    let installed = crate::app::toolchain::install_report(&g, a);
    let code = i32::from(installed.is_err());
    let first_line = match &installed {
        Ok(_) => String::new(),
        Err(e) => format!("error: {e}"),
    };
    let detail = match installed {
        Ok(v) => v,
        Err(_) => Value::from(first_line.clone()),
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

/// What the wrong-result bisection asks, after its ends.
const CHECK: [&str; 4] = ["--recipe", "vector_add", "--mode", "check"];
/// What the slowdown bisection asks, after its ends.
const BENCH: [&str; 8] = [
    "--recipe",
    "spin",
    "--mode",
    "bench",
    "--threshold",
    "2%",
    "--min-time",
    "150ms",
];

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
    let (w, _) = bisect(&demo.root, &[&ends[..], &CHECK[..]].concat())?;
    let (s, _) = bisect(&demo.root, &[&ends[..], &BENCH[..]].concat())?;
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

/// `repro bundle create ...` or `bundle verify ...` in this process.
fn bundle_step(root: &Path, args: &[&str]) -> anyhow::Result<BundleDone> {
    let (g, a) = step(root, args)?;
    crate::app::bundle::run_quietly(&g, a)
}

/// Part 5: records, a bundle, its verification, and a replay in an empty directory.
fn bundle_part(n: &Narrator, demo: &Demo) -> anyhow::Result<Bundle> {
    let (g, a) = step(&demo.root, &["--all"])?;
    let keys: Vec<String> = crate::app::build::build_outcomes(&g, a)
        .map(|b| b.into_iter().map(|o| o.key).collect())
        .unwrap_or_default();
    let path = demo.base.join("demo-bundle.tar.zst");
    let bundle = path.to_str().unwrap_or("demo-bundle.tar.zst");
    let mut args: Vec<&str> = vec!["create"];
    args.extend(keys.iter().map(String::as_str));
    args.extend(["-o", bundle, "--force"]);
    let created = match bundle_step(&demo.root, &args) {
        Ok(BundleDone::Created(c)) => Some(c),
        _ => None,
    };
    let verified = matches!(
        bundle_step(&demo.root, &["verify", bundle]),
        Ok(BundleDone::Verified(v)) if v.ok()
    );
    let empty = demo.base.join("empty");
    std::fs::create_dir_all(&empty)?;
    let first_key = keys.first().cloned().unwrap_or_default();
    let (g, a) = step(&empty, &[&first_key, "--bundle", bundle])?;
    let replay = crate::app::replay::replay_quietly(&g, a).ok();
    let replayed = replay
        .as_ref()
        .is_some_and(|r| r.verdict.exit_code() == exit::OK);
    let verdict = replay.map(|r| r.verdict.as_str().to_string());
    n.say(
        "repro build --all / bundle create / bundle verify / replay",
        &format!(
            "  {} builds recorded; bundle {} ({} files), verify: {}\n  replay of build {} from the bundle in an empty directory: {}\n",
            keys.len(),
            path.display(),
            created.map_or("?".into(), |c| c.files.to_string()),
            if verified { "ok" } else { "FAILED" },
            &first_key[..12.min(first_key.len())],
            verdict.as_deref().unwrap_or("?"),
        ),
    )?;
    Ok(Bundle {
        path,
        verified,
        replayed,
        verdict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step's command line parses as its command's (a global option and an argument
    /// of the same name would panic in clap's checks), the GPU steps' too.
    #[test]
    fn every_steps_command_line_parses() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let ends = ["--good", "a", "--bad", "b"];
        for extra in [
            &["--recipe", "vector_add"][..],
            &["--recipe", "vector_add", "--find", "fixed"],
            &CHECK,
            &BENCH,
        ] {
            let (g, _) = step::<crate::app::bisect::Args>(root, &[&ends[..], extra].concat())
                .unwrap_or_else(|e| panic!("{extra:?}: {e:#}"));
            assert!(g.json && g.quiet);
            assert_eq!(g.cwd, root);
        }
        step::<crate::app::toolchain::Args>(root, &["install", "--nvrtc", "13.0.88"]).unwrap();
        step::<crate::app::build::Args>(root, &["--all"]).unwrap();
        step::<crate::app::bundle::Args>(root, &["create", "k", "-o", "b.tar.zst", "--force"])
            .unwrap();
        step::<crate::app::bundle::Args>(root, &["verify", "b.tar.zst"]).unwrap();
        step::<crate::app::replay::Args>(root, &["k", "--bundle", "b.tar.zst"]).unwrap();
        assert!(step::<crate::app::build::Args>(root, &["--no-such-flag"]).is_err());
    }
}
