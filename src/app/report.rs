//! The one place that turns errors into messages and exit codes.
//!
//! Commands wrap the typed errors of engines and foundation modules in `anyhow` with
//! context naming the object. [`report`] walks the chain, finds the first error that
//! knows its diagnosis ([`Diagnose`], implemented by each module for its own errors), and
//! prints the chain with the hint. Anything that does not know its diagnosis is treated as
//! an internal bug and printed with its whole chain. The list below names every error
//! type that implements [`Diagnose`]; `tests/layering.rs` fails when one is missing.

use std::io::Write;

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// Finds the diagnosis of an error chain: the first error in it that implements [`Diagnose`].
fn diagnosis(err: &anyhow::Error) -> Option<(u8, Option<String>)> {
    for cause in err.chain() {
        macro_rules! try_type {
            ($($t:ty),* $(,)?) => {
                $(if let Some(d) = cause.downcast_ref::<$t>() {
                    return Some((d.exit_code(), d.hint()));
                })*
            };
        }
        try_type!(
            crate::foundation::error::UserError,
            crate::engines::lockfile::LockfileError,
            crate::engines::fingerprint::FingerprintFileError,
            crate::foundation::process::ProcessError,
            crate::foundation::fsutil::WriteError,
            crate::foundation::recipe::RecipeError,
            crate::foundation::store::StoreError,
            crate::engines::build::BuildError,
            crate::foundation::config::ConfigError,
            crate::foundation::nix::NixError,
            crate::foundation::git::GitError,
            crate::engines::bisect::history::HistoryError,
            crate::engines::bisect::run::BisectError,
            crate::engines::bisect::slurm::SlurmError,
            crate::engines::share::ShareError,
            crate::engines::bundle::BundleError,
            crate::foundation::archive::ArchiveError,
            crate::engines::toolchain::install::InstallError,
            crate::engines::bisect::toolchains::ToolchainBisectError,
            crate::engines::nvbench::NvbenchError,
            crate::engines::replay::ReplayError,
        );
    }
    None
}

/// Prints an error to stderr and returns the exit code it maps to.
pub fn report(err: &anyhow::Error) -> u8 {
    let mut stderr = std::io::stderr().lock();
    let style = crate::foundation::output::Style::for_stderr();
    let chain: Vec<String> = err.chain().map(|c| c.to_string()).collect();
    let (code, hint) = match diagnosis(err) {
        Some(d) => d,
        None => {
            let _ = writeln!(stderr, "{} {}", style.error("error:"), chain.join(": "));
            let _ = writeln!(
                stderr,
                "{} this looks like a bug in repro; please report it with the message above",
                style.dim("note:")
            );
            return exit::INTERNAL;
        }
    };
    let _ = writeln!(stderr, "{} {}", style.error("error:"), chain.join(": "));
    if let Some(hint) = hint {
        let _ = writeln!(stderr, "{} {hint}", style.hint("hint:"));
    }
    code
}
