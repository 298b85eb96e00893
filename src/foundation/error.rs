//! How failures reach the user: one line, an optional hint, and an exit code.
//!
//! Library modules return their own typed errors. Each of those that a user can cause
//! implements [`Diagnose`], which says which exit code it maps to and what to try next.
//! The command layer wraps them in `anyhow` with context naming the object; `report` walks
//! the chain, finds the first error that knows its diagnosis, and prints accordingly.
//! Anything that does not know its diagnosis is treated as an internal bug and printed with
//! its whole chain.

use std::fmt;
use std::io::Write;

use crate::foundation::exit;

/// What a user-facing error knows about itself.
pub trait Diagnose: std::error::Error {
    /// The exit code this error should end the process with.
    fn exit_code(&self) -> u8;
    /// What the user could do about it, if anything useful can be said.
    fn hint(&self) -> Option<String> {
        None
    }
}

/// A user-facing error raised directly by a command: a message, a code and a hint.
#[derive(Debug)]
pub struct UserError {
    message: String,
    code: u8,
    hint: Option<String>,
}

impl UserError {
    /// A usage or input error (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: exit::USAGE,
            hint: None,
        }
    }

    /// An error with an explicit exit code.
    pub fn with_code(code: u8, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code,
            hint: None,
        }
    }

    /// Adds a hint telling the user what to do.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UserError {}

impl Diagnose for UserError {
    fn exit_code(&self) -> u8 {
        self.code
    }
    fn hint(&self) -> Option<String> {
        self.hint.clone()
    }
}

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
            UserError,
            crate::engines::lockfile::LockfileError,
            crate::engines::fingerprint::FingerprintFileError,
            crate::foundation::process::ProcessError,
            crate::foundation::fsutil::WriteError,
            crate::foundation::recipe::RecipeError,
            crate::foundation::store::StoreError,
            crate::engines::build::BuildError,
            crate::foundation::config::ConfigError,
            crate::foundation::nix::NixError,
            crate::engines::bisect::history::HistoryError,
            crate::engines::bisect::run::BisectError,
            crate::engines::bisect::slurm::SlurmError,
            crate::engines::share::ShareError,
            crate::engines::bundle::BundleError,
            crate::foundation::archive::ArchiveError,
            crate::engines::toolchain::install::InstallError,
            crate::engines::bisect::toolchains::ToolchainBisectError,
            crate::engines::nvbench::NvbenchError,
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
