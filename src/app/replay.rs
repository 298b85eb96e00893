//! `repro replay ID [--bundle FILE]`: re-create a recorded result (or build) exactly: the
//! same tree, recipe and toolchain; a byte-identical artifact; on a GPU, timing that is
//! statistically the same as the recorded samples. The work is `engines::replay`'s; this
//! file parses the arguments and prints the report.

use std::path::PathBuf;

use crate::app::context::{Globals, emit, emit_json};
use crate::engines::replay::{self, Request, Verdict};
use crate::foundation::keys;
use crate::foundation::output::Style;

/// Arguments of `repro replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A result ID or a build key (or a unique prefix of one).
    #[arg(value_parser = crate::app::context::non_empty())]
    id: String,
    /// Take the record, the sources and the artifacts from this bundle instead of the store
    /// and the repository.
    #[arg(long, value_name = "FILE", value_parser = crate::app::context::non_empty_path())]
    bundle: Option<PathBuf>,
    /// The relative change in timing that counts as different.
    #[arg(long, default_value = "2%", value_parser = crate::app::bench::parse_fraction)]
    threshold: f64,
    /// Let a bundle's `kind = "command"` recipe run its command (shown first). Without it,
    /// replaying such a bundle stops before anything runs.
    #[arg(long)]
    allow_commands: bool,
}

/// Runs `repro replay`.
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let style = Style::for_stdout();
    let say = |m: &str| {
        if !g.quiet && !g.json {
            say!("{m}");
        }
    };
    let rep = replay_with(g, &a, &say)?;
    let code = rep.verdict.exit_code();
    if g.json {
        emit_json(&rep.to_json())?;
    } else {
        print_report(&rep, &style, g.quiet)?;
    }
    Ok(code)
}

/// `repro replay ...` in this process, without printing (`repro demo`'s replay step): the
/// report, whose verdict gives the exit code.
pub(crate) fn replay_quietly(g: &Globals, a: Args) -> anyhow::Result<replay::Replay> {
    replay_with(g, &a, &|_| {})
}

/// Replays what `a` names; `say` hears the notes on the way.
fn replay_with(g: &Globals, a: &Args, say: &dyn Fn(&str)) -> anyhow::Result<replay::Replay> {
    let bundle = a.bundle.as_ref().map(|b| g.cwd.join(b));
    let store = g.store();
    let req = Request {
        id: &a.id,
        bundle: bundle.as_deref(),
        cwd: &g.cwd,
        store: &store,
        threshold: a.threshold,
        allow_commands: a.allow_commands,
        quiet: g.quiet || g.json,
        python: g.python.as_deref(),
    };
    Ok(replay::replay(&req, say)?)
}

/// Prints the report as text; with `-q` only a replay that did not reproduce prints it.
fn print_report(rep: &replay::Replay, style: &Style, quiet: bool) -> anyhow::Result<()> {
    let mut out = format!(
        "replaying {} {} ({} at {})\n",
        rep.kind.as_str(),
        keys::short(&rep.id),
        rep.recipe,
        &rep.commit[..12.min(rep.commit.len())]
    );
    for a in &rep.artifacts {
        out.push_str(&format!(
            "  {:<6} {}  recorded {}  rebuilt {}\n",
            a.output,
            if a.identical() {
                style.good("identical")
            } else {
                style.error("DIFFERS")
            },
            keys::short(&a.recorded),
            a.rebuilt
                .as_deref()
                .map_or("(not built)".to_string(), |s| keys::short(s).to_string())
        ));
    }
    for e in &rep.explain {
        out.push_str(&format!(
            "  {} {}\n",
            style.hint("why:"),
            crate::foundation::output::sanitize(e)
        ));
    }
    for d in &rep.environment {
        out.push_str(&format!(
            "  {} {}: recorded {}, here {}\n",
            style.warn("environment:"),
            d.field,
            d.recorded,
            d.live
        ));
    }
    if let Some(t) = &rep.timing {
        out.push_str(&format!(
            "  timing: ratio {:.4} [{:.4}, {:.4}] against the recorded samples, p = {:.1e}: {} (threshold ±{:.1}%)\n",
            t.ratio,
            t.ratio_ci.0,
            t.ratio_ci.1,
            t.p,
            t.verdict.as_str(),
            t.threshold * 100.0
        ));
    }
    if let Some(n) = &rep.note {
        out.push_str(&format!("  {} {n}\n", style.warn("note:")));
    }
    let verdict = rep.verdict.as_str();
    let reproduced = rep.verdict == Verdict::Reproduced;
    let painted = if reproduced {
        style.good(verdict)
    } else {
        style.error(verdict)
    };
    out.push_str(&format!("verdict: {painted}\n"));
    if !quiet || !reproduced {
        emit(&out)?;
    }
    Ok(())
}
