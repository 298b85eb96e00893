//! `repro build [RECIPE...|--all]`: build kernels, reusing the store by build key.

use anyhow::Context as _;
use serde_json::json;

use crate::build::{self, Options, Outcome};
use crate::cli::{Globals, emit, emit_json};
use crate::error::UserError;
use crate::exit;
use crate::keys;
use crate::output::Style;
use crate::recipe;

/// Arguments of `repro build`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recipes to build: names (`vector_add`) or paths (`recipes/vector_add.toml`).
    #[arg(value_name = "RECIPE")]
    recipes: Vec<String>,
    /// Build every recipe in recipes/.
    #[arg(long, conflicts_with = "recipes")]
    all: bool,
    /// Say which input changed since each recipe's last build.
    #[arg(long)]
    explain: bool,
    /// Rebuild even when the store has the key.
    #[arg(long)]
    force: bool,
}

fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

/// Runs `repro build`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let root = g.project_root();
    let cfg = g.config()?;
    let names = if a.all {
        recipe::list(&root)
    } else {
        a.recipes.clone()
    };
    if names.is_empty() {
        let available = recipe::list(&root);
        let hint = if available.is_empty() {
            format!(
                "no recipes in {}/ yet; the README shows how to write one",
                recipe::DIR
            )
        } else {
            format!("recipes here: {} (or --all)", available.join(", "))
        };
        return Err(UserError::usage("name a recipe to build").hint(hint).into());
    }
    // Parse every recipe before building any, so a typo fails fast and builds nothing.
    let recipes: Vec<recipe::Recipe> = names
        .iter()
        .map(|n| recipe::load(&root, n))
        .collect::<Result<_, _>>()?;
    if let Some(pin) = &cfg.toolchain.nvrtc
        && !g.quiet
        && recipes
            .iter()
            .any(|r| matches!(r.build, recipe::Build::Nvrtc(_)))
        && crate::toolchain::managed_nvrtc_dir(&pin.version).is_none_or(|d| !d.exists())
    {
        eprintln!(
            "warning: repro.toml pins NVRTC {} but it is not installed; run `repro toolchain install` (building with the NVRTC found instead)",
            pin.version
        );
    }
    let store = g.store();
    let opts = Options {
        force: a.force,
        explain: a.explain,
    };
    let mut outcomes: Vec<Outcome> = Vec::new();
    for r in &recipes {
        let o = build::build(&root, &store, r, opts)
            .with_context(|| format!("failed to build recipe `{}`", r.name))?;
        if !g.json {
            emit(&render(&o, g))?;
        }
        outcomes.push(o);
    }
    let failed = outcomes.iter().filter(|o| o.status == "failed").count();
    if g.json {
        emit_json(&json!({ "schema": 1, "builds": outcomes }))?;
    } else if failed > 0 && !g.quiet {
        eprintln!("{failed} of {} builds failed", outcomes.len());
    }
    Ok(if failed > 0 {
        exit::BUILD_FAILED
    } else {
        exit::OK
    })
}

fn render(o: &Outcome, g: &Globals) -> String {
    let style = Style::for_stdout();
    let state = match (o.status, o.cached) {
        ("ok", false) => style.good("built "),
        ("ok", true) => style.good("cached"),
        (_, false) => style.error("FAILED"),
        (_, true) => style.error("FAILED (cached)"),
    };
    let outputs: Vec<String> = o
        .outputs
        .iter()
        .map(|(k, v)| format!("{k} {} {}", size(v.bytes), keys::short(&v.sha256)))
        .collect();
    let mut s = format!(
        "{:<16} {state}  key {}  {}  {:.1} ms\n",
        o.recipe,
        keys::short(&o.key),
        outputs.join("  "),
        o.duration_ms
    );
    for r in &o.repaired {
        s.push_str(&format!("  {} {r}; rebuilt\n", style.warn("repaired:")));
    }
    for why in o.explain.iter().flatten() {
        s.push_str(&format!("  {} {why}\n", style.hint("why:")));
    }
    if g.verbose > 0 {
        for (k, v) in &o.outputs {
            s.push_str(&format!("  {k}: {}\n", v.path));
        }
    }
    if o.status != "ok" || (g.verbose > 0 && !o.log.is_empty()) {
        for line in o.log.lines() {
            s.push_str(&format!("  | {line}\n"));
        }
    }
    s
}
