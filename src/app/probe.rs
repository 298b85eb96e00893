//! `repro bisect-probe` (hidden): what a Slurm bisection's probe job runs on a node before
//! any step, after its shell has checked that the node sees every path: it opens the
//! repository, takes the store's lock and writes into the bisection's scratch directory,
//! and says on stdout which of these failed (`repro-probe: WHAT PATH: WHY`), or
//! `repro-probe: ok`. The submitting repro reads those lines
//! (`engines::bisect::slurm::probe`).

use crate::app::context::Globals;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// Arguments of `repro bisect-probe`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The repository's git directory.
    #[arg(value_parser = crate::app::context::non_empty_path())]
    repo: std::path::PathBuf,
    /// The bisection's scratch directory in the store (requests and results).
    #[arg(value_parser = crate::app::context::non_empty_path())]
    dir: std::path::PathBuf,
}

/// Runs the probe; exit 0 when every check passed, 3 otherwise (the line says which).
pub fn run(g: &Globals, a: Args) -> anyhow::Result<u8> {
    let store = g.store();
    let said = |what: &str, path: &std::path::Path, why: String| {
        println!(
            "repro-probe: {what} {}: {}",
            path.display(),
            why.replace('\n', " ")
        );
        Ok(exit::ENVIRONMENT)
    };
    if let Err(e) = git2::Repository::open(&a.repo) {
        return said("repository", &a.repo, e.message().to_string());
    }
    match store.lock_shared() {
        Ok(lock) => drop(lock),
        Err(e) => {
            let why = match e.hint() {
                Some(h) => format!("{}; hint: {h}", crate::foundation::error::chain_text(&e)),
                None => crate::foundation::error::chain_text(&e),
            };
            return said("lock", &store.root().join("lock"), why);
        }
    }
    let probe = a.dir.join(format!("probe-{}.txt", std::process::id()));
    if let Err(e) = crate::foundation::fsutil::write_atomic(&probe, b"probe\n", true) {
        return said("write", &a.dir, crate::foundation::error::chain_text(&e));
    }
    let _ = std::fs::remove_file(&probe);
    println!("repro-probe: ok");
    Ok(exit::OK)
}
