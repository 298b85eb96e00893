//! `repro profile RECIPE`: the recipe's checked launch, run once under Nsight Compute, its
//! metrics recorded like a result, the `.ncu-rep` report kept in the store.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Value, json};

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::bench;
use crate::engines::build::{self, Options};
use crate::engines::fingerprint::{self, Demand};
use crate::engines::profile::{self, ProfileError};
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::output::Table;
use crate::foundation::recipe;
use crate::foundation::records::{self, OutputRef, ProfileRecord, Settings};

/// `repro profile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recipe (a name under recipes/, or a path).
    #[arg(value_parser = crate::app::context::non_empty())]
    recipe: String,
    /// An Nsight Compute section set to collect as well (`basic`, `detailed`, `full`);
    /// the report keeps it, the record keeps the metrics.
    #[arg(long, value_name = "NAME", value_parser = crate::app::context::non_empty())]
    set: Option<String>,
    /// The metrics to record (repeat or separate with commas) [default: SOL compute and
    /// memory, DRAM throughput, duration, achieved occupancy, registers, warp stalls].
    #[arg(long, value_delimiter = ',', value_name = "METRIC", value_parser = crate::app::context::non_empty())]
    metrics: Vec<String>,
    /// Override a parameter (NAME=VALUE); the first point of the sweep is profiled.
    #[arg(long = "param", value_name = "K=V", value_parser = crate::app::context::non_empty())]
    param: Vec<String>,
    /// Caches before each replay pass: `all` flushes them (ncu's default), `none` keeps
    /// them warm.
    #[arg(long, value_parser = ["all", "none"], default_value = "all")]
    cache_control: String,
    /// The GPU to use.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Time limit of the profiled run.
    #[arg(long, value_parser = crate::app::context::time_limit, default_value = "10m")]
    timeout: Duration,
}

/// Runs `repro profile`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let root = g.project_root();
    let cfg = g.config()?;
    let store = g.store();
    store.check_schema()?;
    let mut r = recipe::load(&root, &a.recipe)?;
    if r.sections.run.is_none() {
        return Err(UserError::usage(format!(
            "recipe `{}` has no [run] section, so there is nothing to profile",
            r.name
        ))
        .into());
    }
    if r.targets().len() > 1 {
        r = r.per_target().remove(0);
    }
    crate::foundation::runspec::override_params(&mut r.sections.params, &a.param)?;
    let opts = Options {
        pins: Some(crate::engines::toolchain::Pins::of(&cfg.toolchain)),
        ..Options::default()
    };
    let built = build::build(&root, &store, &r, &opts)
        .with_context(|| format!("failed to build recipe `{}`", r.name))?;
    if built.status != "ok" {
        return Err(UserError::with_code(
            exit::BUILD_FAILED,
            format!(
                "recipe `{}` does not build (key {})",
                r.name,
                keys::short(&built.key)
            ),
        )
        .hint(format!("`repro build {}` shows why", r.name))
        .into());
    }
    let module = built
        .outputs
        .get("cubin")
        .or_else(|| built.outputs.get("ptx"))
        .ok_or_else(|| UserError::usage("the build produced neither a cubin nor PTX to load"))?;
    let settings = Settings::once(a.device);
    let point = bench::resolve(
        &r.sections,
        std::path::Path::new(&module.path),
        &settings,
        true,
        false,
    )
    .map_err(|e| UserError::usage(format!("{}: {e}", r.path)))?
    .into_iter()
    .next()
    .ok_or_else(|| UserError::usage("the recipe's [params] make no point to profile"))?;
    let ncu = profile::find_ncu().ok_or(ProfileError::NotFound)?;
    let ncu_version = profile::version(&ncu)?;
    let metrics: Vec<String> = if a.metrics.is_empty() {
        profile::DEFAULT_METRICS
            .iter()
            .map(|m| m.to_string())
            .collect()
    } else {
        a.metrics.clone()
    };
    let tmp = tempfile::tempdir().context("failed to create a temporary directory")?;
    let report = tmp.path().join("profile.ncu-rep");
    let mut job = point.job.clone();
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    if visible.is_none() {
        job.device = a.device;
    }
    let req = profile::Request {
        ncu,
        repro: std::env::current_exe().context("failed to find the repro executable")?,
        job: serde_json::to_vec(&job).expect("a job serialises"),
        kernel: job.kernel.kernel.clone(),
        visible,
        set: a.set.clone(),
        metrics: metrics.clone(),
        cache_control: a.cache_control.clone(),
        report: report.clone(),
    };
    let measured = profile::profile(&req)?;
    let bytes = std::fs::read(&report).context("failed to read ncu's report")?;
    let fp = fingerprint::capture(&g.fingerprint_context(false), &Demand::all());
    let must = bench::must_match(&fp);
    let params = bench::params_json(&point.params);
    let experiment = json!({
        "build-key": built.key, "must-match": must, "params": params, "kernel": job.kernel.kernel,
        "ncu": ncu_version, "set": a.set, "metrics": metrics, "cache-control": a.cache_control,
    });
    let digest = store.put_blob(&bytes)?;
    let rec = ProfileRecord {
        schema: records::SCHEMA,
        kind: "profile".into(),
        key: keys::key_of(&experiment),
        recipe: r.name.clone(),
        recipe_path: r.path.clone(),
        build_key: built.key.clone(),
        kernel: job.kernel.kernel.clone(),
        params,
        must_match: must,
        machine: fp
            .lookup("gpu.name")
            .first()
            .and_then(|f| f.value().map(str::to_string))
            .unwrap_or_else(|| "no GPU".into()),
        ncu_version,
        set: a.set.clone(),
        cache_control: a.cache_control.clone(),
        requested: metrics,
        metrics: measured,
        outputs: BTreeMap::from([(
            "ncu-rep".to_string(),
            OutputRef {
                sha256: digest,
                bytes: bytes.len() as u64,
            },
        )]),
        commit: crate::foundation::git::head_commit(&root),
        created_at: records::now(),
        repro_version: records::VERSION.into(),
    };
    let v = records::to_json(&rec);
    let id = keys::key_of(&v);
    store.put_record(records::PROFILES, &id, &v)?;
    if g.json {
        let mut out: Value = v;
        out["id"] = json!(id);
        emit_json(&out)?;
    } else if !g.quiet {
        emit(&render(&id, &rec))?;
    }
    Ok(exit::OK)
}

fn render(id: &str, p: &ProfileRecord) -> String {
    let mut out = format!(
        "{} {}  profile {}  ncu {}  {}\n",
        p.recipe,
        records::params_text(&p.params),
        keys::short(id),
        p.ncu_version,
        p.machine
    );
    let mut t = Table::new();
    for (name, m) in &p.metrics {
        let v = match (m.value, &m.text) {
            (Some(v), _) => format!("{v} {}", m.unit),
            (None, Some(t)) => t.clone(),
            _ => "-".into(),
        };
        t.row([name.clone(), v]);
    }
    out.push_str(&t.render(2));
    out
}
