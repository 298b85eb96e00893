//! The command line: global options, the subcommand dispatch, and the process's exit.

pub mod bench;
pub mod bisect;
pub mod build;
pub mod bundle;
pub mod demo;
pub mod env;
pub mod plot;
pub mod pull;
pub mod push;
pub mod replay;
pub mod results;
pub mod shell;
pub mod store;
pub mod toolchain;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};

use crate::foundation::error::{self, UserError};
use crate::foundation::exit;

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
    /// `--store` / `REPRO_STORE`.
    pub store: Option<PathBuf>,
    /// The project root, found on first use (git discovery opens the repository).
    root: std::sync::OnceLock<PathBuf>,
}

impl Globals {
    /// The project root: the repository's working tree, or the current directory.
    pub fn project_root(&self) -> PathBuf {
        self.root
            .get_or_init(|| {
                crate::foundation::git::discover_root(&self.cwd).unwrap_or_else(|| self.cwd.clone())
            })
            .clone()
    }

    /// The store: `--store`, `REPRO_STORE`, or `.repro` at the project root.
    pub fn store(&self) -> crate::foundation::store::Store {
        match &self.store {
            Some(p) if p.is_absolute() => crate::foundation::store::Store::at(p),
            Some(p) => crate::foundation::store::Store::at(self.cwd.join(p)),
            None => crate::foundation::store::Store::at(self.project_root().join(".repro")),
        }
    }

    /// A path for messages: relative to the current directory when inside it.
    pub fn shown(&self, p: &std::path::Path) -> String {
        p.strip_prefix(&self.cwd).unwrap_or(p).display().to_string()
    }

    /// The project's settings, with the NVRTC pin registered for the toolchain search.
    pub fn config(
        &self,
    ) -> Result<crate::foundation::config::Config, crate::foundation::config::ConfigError> {
        let cfg = crate::foundation::config::load(&self.project_root())?;
        if let Some(pin) = &cfg.toolchain.nvrtc {
            crate::engines::toolchain::set_pin(&pin.version);
        }
        if let Some(r) = &cfg.toolchain.nvcc_default {
            crate::engines::toolchain::set_nvcc_pin(r);
        }
        Ok(cfg)
    }
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
        store: cli.store,
        root: Default::default(),
    };
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
        Command::Completions(args) => shell::completions(&globals, args),
        Command::Demo(args) => demo::run(&globals, args),
        Command::Plot(args) => plot::run(&globals, args),
        Command::Man(args) => shell::man(&globals, args),
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
