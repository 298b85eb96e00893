//! `repro replay ID [--bundle FILE]`: re-create a recorded result (or build) exactly: the
//! same tree, recipe and toolchain; a byte-identical artifact; on a GPU, timing that is
//! statistically the same as the recorded samples.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::bench;
use crate::engines::build::{self, Options};
use crate::engines::bundle::Checked;
use crate::engines::fingerprint::{self, Context, Demand, Fingerprint};
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::output::Style;
use crate::foundation::recipe;
use crate::foundation::records::{self, BuildRecord, ResultRecord};
use crate::foundation::store::Store;

/// Arguments of `repro replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A result ID or a build key (or a unique prefix of one).
    id: String,
    /// Take the record, the sources and the artifacts from this bundle instead of the store
    /// and the repository.
    #[arg(long, value_name = "FILE")]
    bundle: Option<PathBuf>,
    /// The relative change in timing that counts as different.
    #[arg(long, default_value = "2%", value_parser = crate::app::bench::parse_fraction)]
    threshold: f64,
    /// Let a bundle's `kind = "command"` recipe run its command (shown first). Without it,
    /// replaying such a bundle stops before anything runs.
    #[arg(long)]
    allow_commands: bool,
}

/// Where the records and sources come from.
struct Origin {
    records: Vec<(String, &'static str, Value)>,
    sources: Option<PathBuf>,
    _unpacked: Option<tempfile::TempDir>,
}

fn from_bundle(path: &Path, quiet: bool) -> anyhow::Result<Origin> {
    // Nothing from a bundle is trusted before every file matches its manifest.
    let bar = crate::foundation::output::progress_bytes(quiet, 0, "verifying the bundle");
    let v = crate::foundation::archive::verify_with(path, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .with_context(|| format!("failed to verify {}", path.display()))?;
    bar.finish_and_clear();
    if !v.ok() {
        let named: Vec<&String> = v
            .differs
            .iter()
            .chain(&v.missing)
            .chain(&v.extra)
            .take(5)
            .collect();
        return Err(UserError::with_code(
            exit::MISMATCH,
            format!(
                "{} does not match its MANIFEST ({})",
                path.display(),
                named
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .hint("`repro bundle verify FILE` lists every difference")
        .into());
    }
    let dir = tempfile::tempdir().context("failed to create a temporary directory")?;
    crate::foundation::archive::extract(path, dir.path())
        .with_context(|| format!("failed to unpack {}", path.display()))?;
    let mut records = Vec::new();
    for (kind, label) in [("results", "result"), ("builds", "build")] {
        for e in std::fs::read_dir(dir.path().join(kind))
            .into_iter()
            .flatten()
            .flatten()
        {
            let file = e.file_name().to_string_lossy().into_owned();
            let name = file.strip_suffix(".json").unwrap_or(&file).to_string();
            let v: Value = serde_json::from_slice(&std::fs::read(e.path())?).map_err(|err| {
                UserError::with_code(
                    exit::MISMATCH,
                    format!(
                        "{kind}/{} in the bundle is not a valid record: {err}",
                        crate::foundation::output::sanitize(&file)
                    ),
                )
                .hint("the bundle was edited or damaged; nothing was built or run")
            })?;
            // Every record is checked before any is used: a path, key or commit that is not
            // what it claims to be stops the replay here.
            crate::engines::bundle::validate_record(label, &name, &v)?;
            records.push((name, label, v));
        }
    }
    Ok(Origin {
        records,
        sources: Some(dir.path().join("source")),
        _unpacked: Some(dir),
    })
}

fn from_store(store: &Store) -> Origin {
    // Raw records: the one asked for is checked (as strictly as a bundle's) once chosen.
    let mut records = Vec::new();
    for (dir, kind) in [(records::RESULTS, "result"), (records::BUILDS, "build")] {
        records.extend(
            store
                .records(dir)
                .into_iter()
                .filter_map(|(k, _, r)| r.ok().map(|r| (k, kind, r))),
        );
    }
    Origin {
        records,
        sources: None,
        _unpacked: None,
    }
}

/// The recipe a record was built with: the text its build record keeps (`recipe-text` at
/// `recipe-path`, both validated), else the recipe file of the recorded tree.
fn replay_recipe(
    root: &Path,
    name: &str,
    build_rec: Option<&BuildRecord>,
) -> Result<recipe::Recipe, recipe::RecipeError> {
    let kept = build_rec.and_then(|b| {
        b.recipe_text
            .as_deref()
            .zip(Some(b.recipe_path.as_str()).filter(|p| keys::is_relative_path(p)))
    });
    match kept {
        Some((text, path)) => recipe::parse(root, path, text),
        None => recipe::load(root, name),
    }
}

/// Requires the tree's recipe and source files to hash to what the build record says
/// (`inputs.build` and `inputs.files`), computed without compiling or running anything.
/// From a bundle, a result without its build record cannot be checked and is refused.
fn check_sources(
    root: &Path,
    r: &recipe::Recipe,
    build_rec: Option<&BuildRecord>,
    from_bundle: bool,
) -> anyhow::Result<()> {
    let Some(b) = build_rec else {
        if from_bundle {
            return Err(UserError::with_code(
                exit::MISMATCH,
                "the bundle holds no build record for this result, so its sources cannot be checked",
            )
            .hint("nothing was built or run; ask for a bundle made by `repro bundle create`")
            .into());
        }
        return Ok(());
    };
    let here = build::source_inputs(root, r)?;
    let recorded = &b.inputs;
    let mut differs: Vec<String> = Vec::new();
    if here.build != recorded.build {
        differs.push(format!("recipe `{}`", r.name));
    }
    let (hf, rf) = (&here.files, &recorded.files);
    let names: std::collections::BTreeSet<&String> = hf.keys().chain(rf.keys()).collect();
    for n in names {
        if hf.get(n) != rf.get(n) {
            differs.push(format!("file {}", crate::foundation::output::sanitize(n)));
        }
    }
    if !differs.is_empty() {
        return Err(UserError::with_code(
            exit::MISMATCH,
            format!(
                "the sources do not match build record {}: {} differ{}",
                keys::short(&b.key),
                differs
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                if differs.len() == 1 { "s" } else { "" }
            ),
        )
        .hint("the bundle or record was edited; nothing was built or run")
        .into());
    }
    Ok(())
}

/// Checks the live machine with the rules of the recorded tree's lockfile whose `gpu.name`
/// accepts the recorded GPU. Returns false when there is no such lockfile.
fn lock_policy(
    root: &Path,
    recorded: &Fingerprint,
    live: &Fingerprint,
    diffs: &mut Vec<Value>,
    gpu_here: &mut bool,
) -> bool {
    let gpu = recorded.lookup("gpu.name");
    let lock = crate::engines::lockfile::list(&root.join("lockfiles"))
        .into_iter()
        .filter_map(|p| crate::engines::lockfile::load(&p).ok())
        .find(|l| {
            l.rules.iter().any(|r| {
                r.key == "gpu.name"
                    && crate::engines::check::evaluate(
                        &r.policy,
                        crate::foundation::fields::Kind::Text,
                        &gpu,
                    ) == crate::engines::check::Status::Ok
            })
        });
    let Some(lock) = lock else { return false };
    let report = crate::engines::check::check(&lock.rules, |k| live.lookup(k));
    for row in report.rows.iter().filter(|r| r.status.is_fatal()) {
        if (row.field.starts_with("gpu.") || row.field.starts_with("driver."))
            && row.status == crate::engines::check::Status::Missing
        {
            *gpu_here = false;
            continue;
        }
        diffs.push(json!({"field": row.field, "recorded": row.expected, "live": row.actual, "lockfile": lock.name, "hint": row.hint}));
    }
    true
}

/// Runs `repro replay`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let style = Style::for_stdout();
    let origin = match &a.bundle {
        Some(b) => from_bundle(&g.cwd.join(b), g.quiet || g.json)?,
        None => from_store(&g.store()),
    };
    let prefix = a.id.to_lowercase();
    let matches: Vec<&(String, &'static str, Value)> = origin
        .records
        .iter()
        .filter(|(id, _, _)| id.starts_with(&prefix))
        .collect();
    let (id, kind, rec) = match matches.as_slice() {
        [one] if prefix.len() >= 4 => *one,
        [] => {
            return Err(
                UserError::usage(format!("no result or build with ID {}", a.id))
                    .hint("`repro log` lists results; `repro bundle show FILE` lists a bundle's")
                    .into(),
            );
        }
        [_] => {
            return Err(UserError::usage(format!(
                "`{}` is too short: give at least 4 hex digits",
                a.id
            ))
            .into());
        }
        many => {
            return Err(UserError::usage(format!(
                "{} is ambiguous: {} records match",
                a.id,
                many.len()
            ))
            .into());
        }
    };
    // Records from the store are checked as strictly as those from a bundle.
    let (result, build_rec): (Option<ResultRecord>, Option<BuildRecord>) =
        match crate::engines::bundle::validate_record(kind, id, rec)? {
            Checked::Build(b) => (None, Some(*b)),
            Checked::Result(r) => {
                let key = r.build_key.clone().unwrap_or_default();
                let raw = origin
                    .records
                    .iter()
                    .find(|(k, kd, _)| *kd == "build" && *k == key)
                    .map(|(_, _, v)| v.clone())
                    .or_else(|| g.store().get_record(records::BUILDS, &key).ok().flatten());
                let b = match raw {
                    Some(v) => match crate::engines::bundle::validate_record("build", &key, &v)? {
                        Checked::Build(b) => Some(*b),
                        Checked::Result(_) => None,
                    },
                    None => None,
                };
                (Some(*r), b)
            }
        };
    let dirty = [
        result
            .as_ref()
            .and_then(|r| r.dirty.then(|| "unknown".to_string())),
        build_rec.as_ref().and_then(|b| b.dirty.clone()),
    ];
    if let Some(digest) = dirty.into_iter().flatten().next() {
        return Err(crate::engines::bundle::BundleError::Dirty {
            what: format!("{kind} {}", keys::short(id)),
            digest: keys::short(&digest).to_string(),
        }
        .into());
    }
    let recipe_name = match (&result, &build_rec) {
        (Some(r), _) => r.recipe.clone(),
        (None, b) => b.as_ref().map(|b| b.recipe.clone()),
    }
    .ok_or_else(|| {
        UserError::usage("this record has no recipe to rebuild (a command bench)")
            .hint("re-run the command with `repro bench --command`")
    })?;
    let commit = match (&result, &build_rec) {
        (Some(r), _) => r.commit.clone(),
        (None, b) => b.as_ref().and_then(|b| b.commit.clone()),
    }
    .ok_or_else(|| {
        UserError::usage("this record names no commit, so its tree cannot be re-created")
    })?;

    // The tree: from the bundle, or materialised from the repository's object database.
    let checkout = tempfile::tempdir().context("failed to create a temporary directory")?;
    let root: PathBuf = match &origin.sources {
        Some(src) => {
            let dir = src.join(&commit);
            if !dir.is_dir() {
                return Err(UserError::usage(format!(
                    "the bundle holds no sources for commit {commit}"
                ))
                .into());
            }
            dir
        }
        None => {
            let repo = crate::foundation::git::open(&g.cwd)?;
            let oid = git2::Oid::from_str(&commit)
                .ok()
                .filter(|o| repo.find_commit(*o).is_ok())
                .ok_or_else(|| {
                    UserError::usage(format!("commit {commit} is not in this repository"))
                        .hint("fetch it, or replay from a bundle with --bundle FILE")
                })?;
            let files = crate::foundation::git::CommitFiles::new(&repo, oid)?;
            files.materialize(checkout.path()).map_err(|e| {
                UserError::with_code(
                    exit::IO,
                    format!(
                        "cannot re-create commit {commit}: cannot read {}: {e}",
                        e.path()
                    ),
                )
            })?;
            checkout.path().to_path_buf()
        }
    };

    // Before anything runs: the recipe and the source files must be exactly those the
    // build record hashed, and a command recipe from a bundle needs explicit consent.
    let r = replay_recipe(&root, &recipe_name, build_rec.as_ref())
        .with_context(|| format!("failed to load recipe `{recipe_name}` at commit {commit}"))?;
    check_sources(&root, &r, build_rec.as_ref(), origin.sources.is_some())?;
    if let crate::foundation::recipe::Build::Command(c) = &r.build {
        let argv = crate::foundation::process::Cmd::new(&c.argv[0])
            .args(&c.argv[1..])
            .display();
        if origin.sources.is_some() && !a.allow_commands {
            return Err(UserError::usage(format!(
                "recipe `{recipe_name}` of this bundle runs a command: {}",
                crate::foundation::output::sanitize(&argv)
            ))
            .hint("read it; if you trust it, run again with --allow-commands")
            .into());
        }
        if !g.quiet && !g.json {
            eprintln!(
                "running the recipe's command: {}",
                crate::foundation::output::sanitize(&argv)
            );
        }
    }

    // The recorded toolchain: provision it if this machine lacks one and the tree pins it.
    let cfg = crate::foundation::config::load(&root)?;
    if let Some(pin) = &cfg.toolchain.nvrtc {
        crate::engines::toolchain::set_pin(&pin.version);
        if crate::engines::toolchain::find_nvrtc().is_err() {
            if !g.quiet && !g.json {
                eprintln!(
                    "provisioning the pinned NVRTC {} (repro toolchain install)",
                    pin.version
                );
            }
            let exe = std::env::current_exe()?;
            let _ = crate::foundation::process::Cmd::new(exe)
                .arg("-C")
                .arg(&root)
                .args(["toolchain", "install"])
                .timeout(std::time::Duration::from_secs(1800))
                .run();
        }
    }

    // The environment: by the policy of the recorded tree's lockfile for the recorded GPU
    // when there is one, else against the recorded fingerprint's must-match fields.
    let live = fingerprint::capture(
        &Context {
            cwd: root.clone(),
            fresh: false,
        },
        &Demand::all(),
    );
    let mut env_diffs = Vec::new();
    let mut gpu_here = live.get("gpu.count").value().is_some();
    if let Some(fp) = result
        .as_ref()
        .map(|r| &r.fingerprint)
        .filter(|f| f.is_object())
        .and_then(|f| Fingerprint::from_json(f).ok())
        && !lock_policy(&root, &fp, &live, &mut env_diffs, &mut gpu_here)
    {
        let (was, now) = (bench::must_match(&fp), bench::must_match(&live));
        for (k, v) in was.as_object().into_iter().flatten() {
            let n = &now[k];
            let unavailable = n.as_array().is_some_and(|a| a.iter().all(Value::is_null));
            if (k.starts_with("gpu.") || k.starts_with("driver.")) && unavailable {
                gpu_here = false;
                continue;
            }
            if v != n && !unavailable {
                env_diffs.push(json!({"field": k, "recorded": v, "live": n}));
            }
        }
    }

    // Rebuild from scratch (a fresh store: the compiler really runs) and compare bytes.
    let scratch = tempfile::tempdir().context("failed to create a temporary directory")?;
    let fresh = Store::at(scratch.path().join("store"));
    let rebuilt = build::build(&root, &fresh, &r, &Options::default())
        .with_context(|| format!("failed to rebuild recipe `{recipe_name}`"))?;
    let recorded_outputs: Vec<(String, String)> = match &build_rec {
        Some(b) => b
            .outputs
            .iter()
            .map(|(k, v)| (k.clone(), v.sha256.clone()))
            .collect(),
        None => result
            .as_ref()
            .and_then(|r| r.artifact.clone())
            .map(|a| vec![("cubin".to_string(), a)])
            .unwrap_or_default(),
    };
    let mut artifacts = Vec::new();
    let mut identical = rebuilt.status == "ok";
    for (k, want) in &recorded_outputs {
        let got = rebuilt.outputs.get(k).map(|o| o.sha256.clone());
        identical &= got.as_deref() == Some(want.as_str());
        artifacts.push(json!({"output": k, "recorded": want, "rebuilt": got, "identical": got.as_deref() == Some(want.as_str())}));
    }
    let rebuilt_rec = fresh
        .get_record(records::BUILDS, &rebuilt.key)?
        .and_then(|v| BuildRecord::from_json(&v, &rebuilt.key).ok());
    let explain = match (&build_rec, rebuilt_rec) {
        (Some(old), Some(new)) if !identical => old.inputs.explain(&new.inputs),
        _ => Vec::new(),
    };

    // Timing, where a GPU is here and the record has samples.
    let recorded_samples: Vec<f64> = result
        .as_ref()
        .map(|r| r.samples.clone())
        .unwrap_or_default();
    let mut timing = None;
    let mut cannot_run = None;
    if *kind == "result" && recorded_samples.len() >= 2 {
        if !gpu_here {
            cannot_run =
                Some("no GPU here: the build was replayed, the timing was not".to_string());
        } else if identical {
            let module = rebuilt
                .outputs
                .get("cubin")
                .or(rebuilt.outputs.get("ptx"))
                .map(|o| o.path.clone())
                .unwrap_or_default();
            let r = result.as_ref().expect("a result record has samples");
            let missing = |what: &str| {
                UserError::with_code(
                    exit::MISMATCH,
                    format!("result {} records no {what}, so it cannot be re-timed", keys::short(id)),
                )
                .hint("a recipe bench records its settings, launch and arguments; this record was edited")
            };
            let settings = r.settings.clone().ok_or_else(|| missing("settings"))?;
            let job = crate::engines::gpurun::Job {
                schema: crate::engines::gpurun::SCHEMA,
                device: settings.device,
                module,
                kernel: r.launch.clone().ok_or_else(|| missing("launch"))?,
                reference: None,
                args: r.args.clone().ok_or_else(|| missing("arguments"))?,
                tolerances: Default::default(),
                timing: Some(bench::timing(&settings)),
                time_on_failure: false,
            };
            let report = bench::run_child(&job, std::time::Duration::from_secs(300))
                .map_err(|e| UserError::with_code(exit::ENVIRONMENT, e))?;
            match crate::foundation::stats::compare(
                &recorded_samples,
                &report.samples_us,
                0.01,
                a.threshold,
                17,
            ) {
                Some(c) => {
                    // With thousands of samples a 0.05% drift is "significant"; a replay
                    // differs only when the change is also larger than the threshold.
                    let (lo, hi) = (c.ratio_ci_low, c.ratio_ci_high);
                    let verdict =
                        if c.p <= 0.01 && (lo > 1.0 + a.threshold || hi < 1.0 - a.threshold) {
                            if c.ratio > 1.0 { "slower" } else { "faster" }
                        } else if lo >= 1.0 - a.threshold && hi <= 1.0 + a.threshold {
                            "same"
                        } else {
                            "inconclusive"
                        };
                    timing = Some(
                        json!({"ratio": c.ratio, "ratio-ci": [lo, hi], "p": c.p, "verdict": verdict, "threshold": a.threshold, "samples": report.samples_us.len()}),
                    );
                }
                None => {
                    cannot_run = Some(format!(
                        "the re-run gave no usable samples: {}",
                        report.error.unwrap_or_default()
                    ))
                }
            }
        }
    }
    let timing_differs = timing.as_ref().is_some_and(|t| t["verdict"] != "same");
    let (verdict, code) = if artifacts.is_empty() && timing.is_none() {
        // Nothing was compared (the recorded build failed, or recorded no output): saying
        // "reproduced" would claim what was not checked.
        ("nothing to compare", exit::MISMATCH)
    } else if !identical {
        ("artifact differs", exit::MISMATCH)
    } else if !env_diffs.is_empty() {
        ("environment mismatch", exit::REPLAY_ENVIRONMENT)
    } else if timing_differs {
        ("timing differs", exit::REPLAY_TIMING)
    } else if cannot_run.is_some() {
        ("cannot run here", exit::ENVIRONMENT)
    } else {
        ("reproduced", exit::OK)
    };
    if g.json {
        emit_json(
            &json!({"schema": 1, "id": id, "kind": kind, "commit": commit, "recipe": recipe_name, "verdict": verdict,
            "artifacts": artifacts, "explain": explain, "environment": env_diffs, "timing": timing, "note": cannot_run}),
        )?;
    } else {
        let mut out = format!(
            "replaying {kind} {} ({recipe_name} at {})\n",
            keys::short(id),
            &commit[..12.min(commit.len())]
        );
        for a in &artifacts {
            let ok = a["identical"] == true;
            out.push_str(&format!(
                "  {:<6} {}  recorded {}  rebuilt {}\n",
                a["output"].as_str().unwrap_or_default(),
                if ok {
                    style.good("identical")
                } else {
                    style.error("DIFFERS")
                },
                keys::short(a["recorded"].as_str().unwrap_or_default()),
                a["rebuilt"]
                    .as_str()
                    .map_or("(not built)".to_string(), |s| keys::short(s).to_string())
            ));
        }
        for e in &explain {
            out.push_str(&format!("  {} {e}\n", style.hint("why:")));
        }
        for d in &env_diffs {
            out.push_str(&format!(
                "  {} {}: recorded {}, here {}\n",
                style.warn("environment:"),
                d["field"].as_str().unwrap_or_default(),
                d["recorded"],
                d["live"]
            ));
        }
        if let Some(t) = &timing {
            out.push_str(&format!(
                "  timing: ratio {:.4} [{:.4}, {:.4}] against the recorded samples, p = {:.1e}: {} (threshold ±{:.1}%)\n",
                t["ratio"].as_f64().unwrap_or(0.0),
                t["ratio-ci"][0].as_f64().unwrap_or(0.0),
                t["ratio-ci"][1].as_f64().unwrap_or(0.0),
                t["p"].as_f64().unwrap_or(1.0),
                t["verdict"].as_str().unwrap_or_default(),
                a.threshold * 100.0
            ));
        }
        if let Some(n) = &cannot_run {
            out.push_str(&format!("  {} {n}\n", style.warn("note:")));
        }
        let painted = if code == exit::OK {
            style.good(verdict)
        } else {
            style.error(verdict)
        };
        out.push_str(&format!("verdict: {painted}\n"));
        // -q: only a replay that did not reproduce prints its report.
        if !g.quiet || code != exit::OK {
            emit(&out)?;
        }
    }
    Ok(code)
}
