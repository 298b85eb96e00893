//! `repro build [RECIPE...|--all]`: build kernels, reusing the store by build key.
//!
//! With `--nix` (or `[nix] build = true` in repro.toml) the builds run inside the dev
//! shell of the flake in the directory being built: this process evaluates the shell, then
//! runs a child `repro build --in-nix-shell` inside `nix develop`, which compiles with the
//! shell's compilers (in-process NVRTC included) and reports back through a result file.

use std::path::Path;

use anyhow::Context as _;
use serde_json::json;

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::build::{self, Options, Outcome};
use crate::foundation::error::UserError;
use crate::foundation::exit;
use crate::foundation::keys;
use crate::foundation::nix;
use crate::foundation::output::Style;
use crate::foundation::process::ProcessError;
use crate::foundation::recipe;

/// The variable that carries the shell's identity to the child inside it.
const SHELL_VAR: &str = "REPRO_NIX_SHELL";
/// The variable naming the file where the child writes its result.
const RESULT_VAR: &str = "REPRO_NIX_RESULT";

/// What the child inside the dev shell writes for the parent: its exit code, and the
/// builds' outcomes when it got as far as building.
#[derive(serde::Serialize, serde::Deserialize)]
struct ShellReply {
    code: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    builds: Option<Vec<Outcome>>,
}

/// Arguments of `repro build`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recipes to build: names (`vector_add`) or paths (`recipes/vector_add.toml`).
    #[arg(value_name = "RECIPE", value_parser = crate::app::context::non_empty())]
    recipes: Vec<String>,
    /// Build every recipe in recipes/; those that cannot be built are reported at the end.
    #[arg(long, conflicts_with = "recipes")]
    all: bool,
    /// Say which input changed since each recipe's last build.
    #[arg(long)]
    explain: bool,
    /// Rebuild even when the store has the key.
    #[arg(long)]
    force: bool,
    /// Build inside the flake's dev shell (`nix develop`), as repro.toml's [nix] build = true.
    #[arg(long, conflicts_with = "no_nix")]
    nix: bool,
    /// Build on the host even if repro.toml asks for Nix.
    #[arg(long)]
    no_nix: bool,
    /// Build with this toolchain instead of the recipe's or the project's pin: nvcc@RELEASE,
    /// nvrtc@VERSION (installed by `repro toolchain install`), or `system` for the machine's own.
    #[arg(long, value_name = "SPEC", value_parser = parse_spec)]
    toolchain: Option<crate::engines::toolchain::install::Spec>,
    /// Internal: this process runs inside the dev shell for a parent `repro build --nix`.
    #[arg(long, hide = true)]
    in_nix_shell: bool,
    /// Internal: the tree is this commit's, written out by a bisection step; build records
    /// name it.
    #[arg(long, hide = true, value_name = "COMMIT", value_parser = crate::app::context::non_empty())]
    at_commit: Option<String>,
}

/// Parses a toolchain spec for clap.
pub fn parse_spec(
    s: &str,
) -> Result<crate::engines::toolchain::install::Spec, crate::foundation::toolchain_spec::SpecError>
{
    crate::engines::toolchain::install::Spec::parse(s)
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
    if a.in_nix_shell {
        return run_in_shell_child(g, &a);
    }
    let root = g.project_root();
    let cfg = g.config()?;
    let recipes = load_recipes(&root, &a)?;
    let use_nix = (a.nix || cfg.nix.build) && !a.no_nix;
    let mut opts = options(g, &a)?;
    if use_nix {
        if nix::has_flake(&root) {
            return run_through_shell(g, &root, &cfg.nix.shell, &a);
        }
        let why = format!("no flake.nix in {}; built on the host", root.display());
        if !g.quiet {
            say!("warning: {why}");
        }
        opts.nix_fallback = Some(why);
    }
    let (recipes, mut unbuilt) = recipes;
    let (outcomes, failures) = build_all(g, &root, &recipes, &opts);
    unbuilt.extend(failures);
    // A command that was all clean hits is written down, to be answered from its stamp
    // next time (see `app::hit`).
    let clean = !a.force && !a.explain && a.at_commit.is_none() && opts.nix_fallback.is_none();
    if clean && unbuilt.is_empty() && !outcomes.is_empty() && outcomes.iter().all(clean_hit) {
        crate::app::hit::keep(g, &outcomes);
    } else {
        crate::app::hit::drop_stamp(g);
    }
    finish(g, outcomes, unbuilt)
}

/// Whether an outcome is a hit that says nothing but that it is one.
fn clean_hit(o: &Outcome) -> bool {
    o.cached && o.status == "ok" && o.repaired.is_empty() && o.explain.is_none()
}

/// Shows outcomes as `repro build` does (each in turn, then the summary), for hits
/// answered from their stamp: the exit code.
pub(crate) fn report_hits(g: &Globals, outcomes: Vec<Outcome>) -> anyhow::Result<u8> {
    for o in &outcomes {
        show(o, g);
    }
    finish(g, outcomes, Vec::new())
}

/// Prints one outcome as it comes, unless `--json` prints them all at the end. `-q` prints
/// only problems: a failed build. A closed stdout ends the printing, not the building.
fn show(o: &Outcome, g: &Globals) {
    if !g.json && (!g.quiet || o.status != "ok") {
        let _ = emit_outcome(o, g);
    }
}

/// The build options of a command line.
fn options(g: &Globals, a: &Args) -> anyhow::Result<Options> {
    Ok(Options {
        force: a.force,
        explain: a.explain,
        toolchain: a.toolchain.clone(),
        commit: a.at_commit.clone(),
        pins: Some(g.pins()?),
        offline: g.offline,
        quiet: g.quiet || g.json,
        python: g.python.clone(),
        ..Options::default()
    })
}

/// `repro build ...` in this process, without printing: the outcome of every build that
/// ran (`repro demo`'s build step); recipes that could not be built are left out, as the
/// `builds` of `--json` leaves them out. A build inside the Nix dev shell needs a process
/// of its own (it runs in `nix develop`), so it is refused here.
pub(crate) fn build_outcomes(g: &Globals, a: Args) -> anyhow::Result<Vec<Outcome>> {
    let root = g.project_root();
    if (a.nix || g.config()?.nix.build) && !a.no_nix {
        anyhow::bail!("a build inside the Nix dev shell runs as its own command");
    }
    let (recipes, _) = load_recipes(&root, &a)?;
    Ok(build_all(g, &root, &recipes, &options(g, &a)?).0)
}

/// A recipe that could not be built at all (its toolchain is missing, it does not parse
/// under `--all`), as opposed to a build that ran and failed.
struct Unbuilt {
    recipe: String,
    error: anyhow::Error,
}

/// The recipes to build, each several-target recipe as one build per target (a fat binary
/// over its targets excepted). Named recipes are all parsed before any is built, so a typo
/// fails fast and builds nothing; with `--all`, a recipe that does not parse is reported at
/// the end with the others that could not be built, and the rest are built.
fn load_recipes(root: &Path, a: &Args) -> anyhow::Result<(Vec<recipe::Recipe>, Vec<Unbuilt>)> {
    let names = if a.all {
        recipe::list(root)
    } else {
        a.recipes.clone()
    };
    if names.is_empty() {
        let available = recipe::list(root);
        let hint = if available.is_empty() {
            format!(
                "no recipes in {}/ yet; repro's book shows how to write one (docs/src/reference/recipes.md)",
                recipe::DIR
            )
        } else {
            format!("recipes here: {} (or --all)", available.join(", "))
        };
        return Err(UserError::usage("name a recipe to build").hint(hint).into());
    }
    let mut loaded = Vec::new();
    let mut unbuilt = Vec::new();
    for n in &names {
        match recipe::load(root, n) {
            Ok(r) => loaded.push(r),
            Err(e) if a.all => unbuilt.push(Unbuilt {
                recipe: n.clone(),
                error: anyhow::Error::new(e).context(format!("failed to load recipe `{n}`")),
            }),
            Err(e) => return Err(e.into()),
        }
    }
    let per_target = loaded.iter().flat_map(recipe::Recipe::per_target).collect();
    Ok((per_target, unbuilt))
}

/// Builds every recipe it can: one that cannot be built (its toolchain is missing) does
/// not stop the others; it is returned, to be reported at the end.
fn build_all(
    g: &Globals,
    root: &Path,
    recipes: &[recipe::Recipe],
    opts: &Options,
) -> (Vec<Outcome>, Vec<Unbuilt>) {
    let store = g.store();
    let mut outcomes = Vec::new();
    let mut unbuilt = Vec::new();
    for r in recipes {
        let o = match build::build(root, &store, r, opts) {
            Ok(o) => o,
            Err(e) => {
                unbuilt.push(Unbuilt {
                    recipe: r.name.clone(),
                    error: anyhow::Error::new(e)
                        .context(format!("failed to build recipe `{}`", r.name)),
                });
                continue;
            }
        };
        // Inside the Nix dev shell the parent prints.
        if opts.nix.is_none() {
            show(&o, g);
        }
        outcomes.push(o);
    }
    (outcomes, unbuilt)
}

/// Reports what could not be built, each with its message and hint, and returns the exit
/// code: that of the worst failure (see [`exit::worst`]), 0 when every recipe built.
fn report_unbuilt(unbuilt: &[Unbuilt], outcomes: &[Outcome]) -> u8 {
    let failed = outcomes.iter().any(|o| o.status != "ok");
    let codes: Vec<u8> = unbuilt
        .iter()
        .map(|u| crate::app::report::report(&u.error))
        .collect();
    exit::worst(
        codes
            .into_iter()
            .chain(failed.then_some(exit::BUILD_FAILED)),
    )
}

fn finish(g: &Globals, outcomes: Vec<Outcome>, unbuilt: Vec<Unbuilt>) -> anyhow::Result<u8> {
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.status != "ok")
        .map(|o| o.recipe.as_str())
        .collect();
    let code = report_unbuilt(&unbuilt, &outcomes);
    if g.json {
        let errors: Vec<_> = unbuilt
            .iter()
            .map(|u| {
                json!({
                    "recipe": u.recipe,
                    "error": u.error.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": "),
                })
            })
            .collect();
        let mut doc = json!({ "schema": 1, "builds": outcomes });
        if !errors.is_empty() {
            doc["not-built"] = errors.into();
        }
        emit_json(&doc)?;
    } else if (!failed.is_empty() || !unbuilt.is_empty()) && !g.quiet {
        let total = outcomes.len() + unbuilt.len();
        let mut parts = Vec::new();
        if !failed.is_empty() {
            parts.push(format!(
                "{} of {total} builds failed ({})",
                failed.len(),
                failed.join(", ")
            ));
        }
        if !unbuilt.is_empty() {
            let names: Vec<&str> = unbuilt.iter().map(|u| u.recipe.as_str()).collect();
            parts.push(format!(
                "{} of {total} recipes could not be built ({})",
                unbuilt.len(),
                names.join(", ")
            ));
        }
        say!("{}", parts.join("; "));
    }
    Ok(code)
}

/// The parent side of a Nix build: evaluate the shell, run the child in it, relay.
fn run_through_shell(g: &Globals, root: &Path, shell: &str, a: &Args) -> anyhow::Result<u8> {
    let info = nix::shell_info(root, shell)?;
    let exe = std::env::current_exe().context("failed to find the repro executable")?;
    let result = tempfile::NamedTempFile::new().context("failed to create a temporary file")?;
    let mut argv = vec![
        exe.display().to_string(),
        "-C".into(),
        root.display().to_string(),
        "--store".into(),
        g.store().root().display().to_string(),
        "build".into(),
        "--in-nix-shell".into(),
    ];
    if a.all {
        argv.push("--all".into());
    }
    argv.extend(a.recipes.iter().cloned());
    if let Some(t) = &a.toolchain {
        argv.push(format!("--toolchain={t}"));
    }
    if let Some(c) = &a.at_commit {
        argv.push(format!("--at-commit={c}"));
    }
    for (on, flag) in [(a.force, "--force"), (a.explain, "--explain")] {
        if on {
            argv.push(flag.into());
        }
    }
    let cmd = nix::develop(&info, &argv)
        .env(SHELL_VAR, nix::encode(&info))
        .env(RESULT_VAR, result.path());
    let entering = format!("entering the dev shell {}", info.installable());
    let out = cmd.output().map_err(|e| nix::classify(&entering, e))?;
    let reply: Option<ShellReply> = std::fs::read(result.path())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(reply) = reply else {
        // The child never ran: nix could not evaluate or build the shell.
        let failure = ProcessError::Failed {
            argv: cmd.display(),
            status: crate::foundation::process::describe_status(out.status),
            code: out.status.code(),
            stdout: tail(&out.stdout_str()),
            stderr: tail(&out.stderr_str()),
        };
        return Err(nix::classify(&entering, failure).into());
    };
    // The child's own diagnostics (warnings, errors) are the user's to see.
    let stderr = out.stderr_str();
    for line in stderr.lines().filter(|l| {
        l.starts_with("warning: repro")
            || l.starts_with("error:")
            || l.starts_with("hint:")
            || l.starts_with("warning: no flake")
    }) {
        say!("{line}");
    }
    let code = reply.code;
    if let Some(builds) = reply.builds {
        if g.json {
            emit_json(&json!({ "schema": 1, "builds": builds }))?;
        } else {
            for o in &builds {
                if !g.quiet || o.status != "ok" {
                    emit_outcome(o, g)?;
                }
            }
            if !g.quiet {
                emit(&format!("  (built inside {})\n", info.installable()))?;
            }
        }
    }
    Ok(code)
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The child side: build inside the shell and write the outcome (or the error) for the parent.
fn run_in_shell_child(g: &Globals, a: &Args) -> anyhow::Result<u8> {
    let info = std::env::var(SHELL_VAR).ok().and_then(|s| nix::decode(&s));
    let result_path = std::env::var_os(RESULT_VAR);
    let (Some(info), Some(result_path)) = (info, result_path) else {
        return Err(
            UserError::usage("--in-nix-shell is internal to `repro build --nix`")
                .hint("run `repro build --nix RECIPE`, which starts the shell and builds inside it")
                .into(),
        );
    };
    let run = || -> anyhow::Result<(u8, Vec<Outcome>)> {
        let root = g.project_root();
        let (recipes, mut unbuilt) = load_recipes(&root, a)?;
        let opts = Options {
            nix: Some(info.clone()),
            ..options(g, a)?
        };
        let (outcomes, failures) = build_all(g, &root, &recipes, &opts);
        unbuilt.extend(failures);
        // The child reports what it could not build on its stderr (the parent relays
        // error and hint lines) and answers with the worst failure's code.
        Ok((report_unbuilt(&unbuilt, &outcomes), outcomes))
    };
    let reply = match run() {
        Ok((code, outcomes)) => ShellReply {
            code,
            builds: Some(outcomes),
        },
        Err(e) => ShellReply {
            code: crate::app::report::report(&e),
            builds: None,
        },
    };
    let code = reply.code;
    crate::foundation::fsutil::write_atomic(
        Path::new(&result_path),
        serde_json::to_string(&reply)
            .expect("outcomes serialise")
            .as_bytes(),
        true,
    )?;
    Ok(code)
}

fn render(o: &Outcome, g: &Globals) -> String {
    let style = Style::for_stdout();
    let state = match (o.status.as_ref(), o.cached) {
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
    let compile_only = if o.checked == Some(crate::foundation::records::Checked::CompileOnly) {
        "  (compile-only)"
    } else {
        ""
    };
    let mut s = format!(
        "{:<16} {state}  key {}  {}  {:.1} ms{compile_only}\n",
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
        if let Some(r) = &o.resources {
            s.push_str("  resources:\n");
            s.push_str(&r.render(4));
        }
    }
    for v in &o.over_budget {
        s.push_str(&format!("  {} {v}\n", style.error("over budget:")));
    }
    s
}

/// Prints a build's line on stdout and, for a failed build (or with -v), the compiler's
/// log on stderr, where diagnostics belong: `repro build > list.txt` keeps only the lines.
fn emit_outcome(o: &Outcome, g: &Globals) -> anyhow::Result<()> {
    emit(&render(o, g))?;
    if o.status != "ok" || (g.verbose > 0 && !o.log.is_empty()) {
        if let Some(reason) = o.failure_reason() {
            say!("  reason: {reason}");
        }
        for line in o.log.lines() {
            say!("  | {line}");
        }
        if o.status != "ok"
            && let Some(hint) = crate::engines::build::compiler_hint(&o.log)
        {
            say!("  hint: {hint}");
        }
    }
    Ok(())
}
