//! The command line: global options, the subcommand dispatch, and the process's exit.

pub mod bench;
pub mod bisect;
pub mod build;
pub mod bundle;
pub mod context;
pub mod demo;
pub mod env;
pub mod plot;
pub mod pull;
pub mod push;
pub mod replay;
pub mod report;
pub mod results;
pub mod shell;
pub mod store;
pub mod toolchain;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory, Parser, Subcommand};

use crate::foundation::error::UserError;
use crate::foundation::exit;
use context::Globals;

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
    /// The store directory [default: .repro at the project root].
    #[arg(long, global = true, value_name = "DIR", env = "REPRO_STORE")]
    pub store: Option<PathBuf>,
    /// The Python interpreter (or environment directory) to describe and build torch
    /// extensions for [default: repro.toml's [python] interpreter, the active venv or conda
    /// environment, python3 on PATH].
    #[arg(long, global = true, value_name = "PATH", env = "REPRO_PYTHON")]
    pub python: Option<PathBuf>,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fingerprint this machine and check it against a lockfile.
    Env(env::Args),
    /// Build kernels from recipes, cached by the hash of every input.
    Build(build::Args),
    /// Install, list and locate the CUDA compilers builds use.
    Toolchain(toolchain::Args),
    /// Inspect, verify and clean the store of artifacts and records.
    Store(store::Args),
    /// Check a kernel against its reference and time it on the GPU (or time a command).
    Bench(bench::Args),
    /// List recorded results, newest first.
    Log(results::LogArgs),
    /// Show one recorded result in full.
    Show(results::ShowArgs),
    /// Compare two results: ratio of medians with its interval and a rank-test verdict.
    Compare(results::CompareArgs),
    /// Find the commit that broke a build, a check or a benchmark (or fixed it).
    Bisect(bisect::Args),
    /// Send the store's records (builds, results, bisection steps) to a git remote.
    Push(push::Args),
    /// File the records a git remote holds in the store.
    Pull(pull::Args),
    /// Re-create a recorded result or build exactly: same tree, recipe and toolchain.
    Replay(replay::Args),
    /// Archive results for a paper, and verify or inspect such archives.
    Bundle(bundle::Args),
    /// Write an SVG plot of results across commits, over a parameter, or of a bisection.
    Plot(plot::Args),
    /// Run the whole tool on a throwaway repository (no setup, no GPU needed).
    Demo(demo::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(shell::CompletionsArgs),
    /// Print the man page (roff).
    Man(shell::ManArgs),
    /// Internal: run one GPU job from stdin (the child process of `repro bench`).
    #[command(hide = true)]
    GpuJob(bench::GpuJobArgs),
    /// Internal: evaluate one bisection step from a request file (a Slurm job's command).
    #[command(hide = true)]
    BisectStep(bisect::StepArgs),
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
    let python = cli.python.map(|p| cwd.join(p));
    let globals =
        Globals::new(cwd, cli.json, cli.quiet, cli.verbose, cli.store).with_python(python);
    match cli.command {
        Command::Env(args) => env::run(&globals, args),
        Command::Build(args) => build::run(&globals, args),
        Command::Toolchain(args) => toolchain::run(&globals, args),
        Command::Store(args) => store::run(&globals, args),
        Command::Bench(args) => bench::run(&globals, args),
        Command::Log(args) => results::log(&globals, args),
        Command::Show(args) => results::show(&globals, args),
        Command::Compare(args) => results::compare(&globals, args),
        Command::GpuJob(args) => bench::gpu_job(&globals, args),
        Command::BisectStep(args) => bisect::run_step(&globals, args),
        Command::Bisect(args) => bisect::run(&globals, args),
        Command::Push(args) => push::run(&globals, args),
        Command::Pull(args) => pull::run(&globals, args),
        Command::Replay(args) => replay::run(&globals, args),
        Command::Completions(args) => shell::completions(&globals, args, Cli::command()),
        Command::Demo(args) => demo::run(&globals, args),
        Command::Plot(args) => plot::run(&globals, args),
        Command::Man(args) => shell::man(&globals, args, Cli::command()),
        Command::Bundle(args) => bundle::run(&globals, args),
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
        Err(e) => ExitCode::from(report::report(&e)),
    }
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
