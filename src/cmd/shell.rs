//! `repro completions SHELL` and `repro man`: shell integration generated from the clap
//! definitions, so they can never disagree with the real command line.

use clap::CommandFactory;

use crate::cli::{Cli, Globals, emit};
use crate::exit;

/// Arguments of `repro completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `repro man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {}

/// Prints a completion script (`repro completions bash > /etc/bash_completion.d/repro`).
pub fn completions(_g: &Globals, a: CompletionsArgs) -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "repro", &mut out);
    emit(&String::from_utf8_lossy(&out))?;
    Ok(exit::OK)
}

/// Prints the man page in roff (`repro man > repro.1; man ./repro.1`).
pub fn man(_g: &Globals, _a: ManArgs) -> anyhow::Result<u8> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    emit(&String::from_utf8_lossy(&out))?;
    Ok(exit::OK)
}
