//! The command line: global options, the subcommand dispatch, and the process's exit.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};

use crate::cmd;
use crate::error::{self, UserError};
use crate::exit;

/// Reproducible GPU-kernel work: fingerprint the machine and check it against a pinned
/// lockfile, build kernels hermetically, bisect, replay and archive results.
#[derive(Debug, Parser)]
#[command(
    name = "repro",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// Act as if started in DIR (like `git -C`).
    #[arg(short = 'C', value_name = "DIR", global = true)]
    pub dir: Option<PathBuf>,
    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print less: only problems.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print more (repeat for even more).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fingerprint this machine and check it against a lockfile.
    Env(cmd::env::Args),
}

/// Options every command sees.
#[derive(Clone, Debug)]
pub struct Globals {
    /// The directory to act in (after `-C`).
    pub cwd: PathBuf,
    /// `--json`.
    pub json: bool,
    /// `-q`.
    pub quiet: bool,
    /// `-v` count.
    pub verbose: u8,
}

/// Runs the parsed command line and returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    let cwd = match &cli.dir {
        Some(dir) => {
            let meta = std::fs::metadata(dir);
            if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                let why = match meta {
                    Err(e) => e.to_string(),
                    Ok(_) => "not a directory".into(),
                };
                return Err(
                    UserError::usage(format!("cannot use -C {}: {why}", dir.display()))
                        .hint("pass an existing directory")
                        .into(),
                );
            }
            std::path::absolute(dir)?
        }
        None => std::env::current_dir()?,
    };
    let globals = Globals {
        cwd,
        json: cli.json,
        quiet: cli.quiet,
        verbose: cli.verbose,
    };
    match cli.command {
        Command::Env(args) => cmd::env::run(&globals, args),
    }
}

/// The whole program: parse, run, report, exit.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => ExitCode::from(error::report(&e)),
    }
}

/// Writes to stdout; a closed stdout (`repro ... | head`) is not an error.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes a JSON value to stdout, pretty-printed.
pub fn emit_json(value: &serde_json::Value) -> anyhow::Result<()> {
    emit(&format!("{}\n", serde_json::to_string_pretty(value)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_well_formed() {
        Cli::command().debug_assert();
    }
}
