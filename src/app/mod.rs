//! The command line: global options, the subcommand dispatch, and the process's exit.

/// `eprintln!` through the one escaping function ([`context::say`]): every line the app
/// writes to stderr.
macro_rules! say {
    ($($t:tt)*) => {
        $crate::app::context::say(&format!($($t)*))
    };
}

pub mod bench;
pub mod bisect;
pub mod build;
pub mod bundle;
pub mod context;
pub mod demo;
pub mod env;
pub mod hit;
pub mod init;
mod lean;
pub mod plot;
pub mod probe;
pub mod profile;
pub mod pull;
pub mod push;
pub mod replay;
pub mod report;
pub mod results;
pub mod shell;
pub mod store;
pub mod toolchain;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::foundation::exit;
pub use context::GlobalArgs;
use context::globals;

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
    /// The options every command takes.
    #[command(flatten)]
    pub globals: GlobalArgs,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands repro runs itself, as its own child processes: not for users, so not in
/// [`Cli`], its help, completions or man pages. `main` parses them only when `Cli` does
/// not know the subcommand.
#[derive(Debug, Parser)]
#[command(name = "repro", version)]
pub struct Internal {
    /// The options every command takes.
    #[command(flatten)]
    pub globals: GlobalArgs,
    /// The internal command.
    #[command(subcommand)]
    pub command: InternalCommand,
}

/// The internal commands.
#[derive(Debug, Subcommand)]
pub enum InternalCommand {
    /// Run one GPU job from stdin (the child process of `repro bench`).
    GpuJob(bench::GpuJobArgs),
    /// Evaluate one bisection step from a request file (a Slurm job's command).
    BisectStep(bisect::StepArgs),
    /// Check on a node what a Slurm bisection's steps need (its probe job).
    BisectProbe(probe::Args),
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start in any git repository: pin toolchains in repro.toml and write a recipe per
    /// kernel file.
    Init(init::Args),
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
    /// Run a recipe's checked launch once under Nsight Compute and record its metrics.
    Profile(profile::Args),
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
    /// Print the man page of repro or of a command (roff), or write them all.
    Man(shell::ManArgs),
}

/// The command line as users see it: [`Cli`]'s definitions, with each command's exit codes
/// (from `foundation/exit.rs`) at the end of its `--help` and in its man page.
pub fn command() -> clap::Command {
    let mut all = exit::ALL.to_vec();
    all.sort_by_key(|(code, _)| *code);
    with_exit_status(Cli::command().after_help(exit_status(&all)), "")
}

/// Adds the exit codes of every subcommand below `cmd` (whose path is `path`) to its help.
fn with_exit_status(mut cmd: clap::Command, path: &str) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let sub_path = format!("{path}{name}");
        cmd = cmd.mut_subcommand(&name, |sub| {
            let sub = match exit::for_command(&sub_path) {
                Some(codes) => sub.after_help(exit_status(&codes)),
                None => sub,
            };
            with_exit_status(sub, &format!("{sub_path} "))
        });
    }
    cmd
}

/// The `Exit status:` block of a command's help: a code a line, long meanings wrapped under
/// themselves within the help's 100 columns.
pub fn exit_status(codes: &[(u8, &str)]) -> String {
    const INDENT: usize = 7;
    const WIDTH: usize = 100;
    let mut text = String::from("Exit status:");
    for (code, meaning) in codes {
        let mut line = format!("  {code:<4} ");
        for word in meaning.split_whitespace() {
            if line.len() + 1 + word.len() > WIDTH && line.len() > INDENT {
                text.push('\n');
                text.push_str(line.trim_end());
                line = " ".repeat(INDENT);
            } else if line.len() > INDENT {
                line.push(' ');
            }
            line.push_str(word);
        }
        text.push('\n');
        text.push_str(&line);
    }
    text
}

/// Runs the parsed command line and returns the exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    let globals = globals(cli.globals)?;
    // A command that times a GPU refuses a timing setting it would otherwise ignore.
    if cli.command.times_gpu() {
        crate::engines::gpurun::check_timing_settings()?;
    }
    match cli.command {
        Command::Init(args) => init::run(&globals, args),
        Command::Env(args) => env::run(&globals, args),
        Command::Build(args) => build::run(&globals, args),
        Command::Toolchain(args) => toolchain::run(&globals, args),
        Command::Store(args) => store::run(&globals, args),
        Command::Bench(args) => bench::run(&globals, args),
        Command::Profile(args) => profile::run(&globals, args),
        Command::Log(args) => results::log(&globals, args),
        Command::Show(args) => results::show(&globals, args),
        Command::Compare(args) => results::compare(&globals, args),
        Command::Bisect(args) => bisect::run(&globals, args),
        Command::Push(args) => push::run(&globals, args),
        Command::Pull(args) => pull::run(&globals, args),
        Command::Replay(args) => replay::run(&globals, args),
        Command::Completions(args) => shell::completions(&globals, args, command()),
        Command::Demo(args) => demo::run(&globals, args),
        Command::Plot(args) => plot::run(&globals, args),
        Command::Man(args) => shell::man(&globals, args, command()),
        Command::Bundle(args) => bundle::run(&globals, args),
    }
}

impl Command {
    /// Whether the command may time kernels on a GPU (and so reads `REPRO_TIMING_*`).
    /// Every command says, so that a new one decides.
    fn times_gpu(&self) -> bool {
        match self {
            Command::Bench(_) | Command::Bisect(_) | Command::Replay(_) | Command::Demo(_) => true,
            Command::Init(_)
            | Command::Env(_)
            | Command::Build(_)
            | Command::Toolchain(_)
            | Command::Store(_)
            | Command::Profile(_)
            | Command::Log(_)
            | Command::Show(_)
            | Command::Compare(_)
            | Command::Push(_)
            | Command::Pull(_)
            | Command::Completions(_)
            | Command::Plot(_)
            | Command::Man(_)
            | Command::Bundle(_) => false,
        }
    }
}

/// Runs an internal command and returns the exit code.
fn run_internal(internal: Internal) -> anyhow::Result<u8> {
    let globals = globals(internal.globals)?;
    // The GPU worker and a Slurm node's bisection step time too, with settings that came
    // to them from elsewhere (a job script's exports): checked there as well.
    if matches!(
        internal.command,
        InternalCommand::GpuJob(_) | InternalCommand::BisectStep(_)
    ) {
        crate::engines::gpurun::check_timing_settings()?;
    }
    match internal.command {
        InternalCommand::GpuJob(args) => bench::gpu_job(&globals, args),
        InternalCommand::BisectStep(args) => bisect::run_step(&globals, args),
        InternalCommand::BisectProbe(args) => probe::run(&globals, args),
    }
}

/// The whole program: parse, run, report, exit.
pub fn main() -> ExitCode {
    let started = std::time::SystemTime::now();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some((globals, outcomes)) = hit::answer(&argv) {
        return match build::report_hits(&globals, outcomes) {
            Ok(code) => ExitCode::from(code),
            Err(e) => ExitCode::from(report::report(&e)),
        };
    }
    hit::begin(&argv, started);
    let parsed = match lean::matches(&argv).and_then(|m| Cli::from_arg_matches(&m).ok()) {
        Some(cli) => Ok(cli),
        None => command()
            .try_get_matches_from(&argv)
            .and_then(|m| Cli::from_arg_matches(&m)),
    };
    let result = match parsed {
        Ok(cli) => run(cli),
        Err(e) => match Internal::try_parse_from(&argv) {
            // Only a subcommand `Cli` does not know can be an internal one.
            Ok(internal) if e.kind() == ErrorKind::InvalidSubcommand => run_internal(internal),
            // An internal command with arguments it cannot use: say what is wrong with them.
            Err(ie)
                if e.kind() == ErrorKind::InvalidSubcommand
                    && ie.kind() != ErrorKind::InvalidSubcommand =>
            {
                let _ = ie.print();
                return ExitCode::from(if ie.use_stderr() {
                    exit::USAGE
                } else {
                    exit::OK
                });
            }
            _ => {
                let _ = e.print();
                return ExitCode::from(if e.use_stderr() {
                    exit::USAGE
                } else {
                    exit::OK
                });
            }
        },
    };
    match result {
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
        Internal::command().debug_assert();
        command().debug_assert();
    }

    /// No option or argument takes an empty string: each names something (a recipe, a
    /// result, a command, a file), and an empty one named nothing yet was accepted (a
    /// nameless result, a plot of nothing, a filter matching nothing). Walks every
    /// command, the internal ones too, so a new option cannot forget the parser.
    #[test]
    fn no_option_takes_an_empty_string() {
        // Empty in the environment means unset (see `globals`).
        const UNSET_WHEN_EMPTY: &[&str] = &["store", "python"];
        fn walk(cmd: &clap::Command, path: &str, accepted: &mut Vec<String>) {
            let mut cmd = cmd.clone().no_binary_name(true);
            cmd.build();
            for arg in cmd.get_arguments() {
                if !arg.get_action().takes_values()
                    || UNSET_WHEN_EMPTY.contains(&arg.get_id().as_str())
                {
                    continue;
                }
                // The option with an empty value, or the positional argument empty after
                // placeholders for those before it. Values are checked as they are
                // parsed, before required options and conflicts, so a refusal shows.
                let argv: Vec<String> = match (arg.get_long(), arg.get_index()) {
                    (Some(long), _) => vec![format!("--{long}"), String::new()],
                    (None, Some(i)) => {
                        let mut v = vec!["x".to_string(); i - 1];
                        v.push(String::new());
                        v
                    }
                    (None, None) => continue,
                };
                let refused = cmd.clone().try_get_matches_from(&argv).is_err_and(|e| {
                    use clap::error::ErrorKind as K;
                    matches!(e.kind(), K::InvalidValue | K::ValueValidation)
                });
                if !refused {
                    accepted.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                walk(sub, &format!("{path} {}", sub.get_name()), accepted);
            }
        }
        let mut accepted = Vec::new();
        walk(&command(), "repro", &mut accepted);
        walk(&Internal::command(), "repro", &mut accepted);
        assert!(accepted.is_empty(), "options that take \"\": {accepted:?}");
    }

    /// Every command a user sees ends its help with its exit codes, which
    /// `foundation/exit.rs` documents for each; the internal commands are not among them.
    #[test]
    fn every_command_has_its_exit_codes() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let name = format!("{path}{}", sub.get_name());
                match exit::for_command(&name) {
                    Some(codes) => assert_eq!(
                        sub.get_after_help().map(|h| h.to_string()),
                        Some(exit_status(&codes)),
                        "{name}"
                    ),
                    None => missing.push(name.clone()),
                }
                walk(sub, &format!("{name} "), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&command(), "", &mut missing);
        assert!(
            missing.is_empty(),
            "commands without a row in exit::BY_COMMAND: {missing:?}"
        );
        let names: Vec<String> = command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .collect();
        assert!(!names.contains(&"gpu-job".to_string()), "{names:?}");
        assert!(!names.contains(&"bisect-step".to_string()), "{names:?}");
    }

    /// Every argument of a command and of the commands below it, as clap describes it
    /// once built, by path.
    fn shape(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            out.push(format!("{path}: {a:?}"));
        }
        for s in cmd.get_subcommands() {
            out.push(format!(
                "{path} {}: required {} args-conflict {}",
                s.get_name(),
                s.is_subcommand_required_set(),
                s.is_args_conflicts_with_subcommands_set()
            ));
            shape(s, &format!("{path} {}", s.get_name()), out);
        }
    }

    /// Each command's lean tree has the arguments the whole tree gives it, so a command
    /// added to [`Command`] or changed there cannot parse differently here
    /// (one not listed in `command` only goes the slow way).
    #[test]
    fn each_lean_tree_is_the_whole_trees_command() {
        let mut whole = Cli::command();
        whole.build();
        let mut listed = 0;
        for sub in whole.get_subcommands() {
            let name = sub.get_name();
            let Some(lean) = lean::command(name) else {
                assert!(
                    ["completions", "man", "help"].contains(&name),
                    "`{name}` has no lean tree in app/lean.rs"
                );
                continue;
            };
            let mut root = lean::root().subcommand(lean);
            root.build();
            let lean = root.find_subcommand(name).unwrap();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            shape(sub, name, &mut a);
            shape(lean, name, &mut b);
            assert_eq!(a, b, "{name}");
            listed += 1;
        }
        assert!(listed >= 17, "{listed}");
    }

    fn argv(words: &str) -> Vec<std::ffi::OsString> {
        words
            .split_whitespace()
            .map(std::ffi::OsString::from)
            .collect()
    }

    /// What parses lean parses as the whole tree does; what does not is left to it.
    #[test]
    fn lean_parses_agree_with_the_whole_tree() {
        for line in [
            "repro build vector_add",
            "repro -v --store s build vector_add --json",
            "repro env check --lock l.toml",
            "repro -C /tmp log",
            "repro --store build build build",
            "repro bench vector_add -p n=1024",
        ] {
            let a = argv(line);
            let whole = Cli::try_parse_from(&a).map(|c| format!("{c:?}"));
            let lean = lean::matches(&a)
                .and_then(|m| Cli::from_arg_matches(&m).ok())
                .map(|c| format!("{c:?}"));
            match whole {
                Ok(w) => assert_eq!(lean.as_deref(), Some(w.as_str()), "{line}"),
                Err(_) => assert!(lean.is_none(), "{line}"),
            }
        }
        for line in [
            "repro build --help",
            "repro --version",
            "repro build --version",
            "repro help build",
            "repro biuld vector_add",
            "repro gpu-job",
            "repro completions bash",
            "repro build --no-such-flag",
        ] {
            assert!(lean::matches(&argv(line)).is_none(), "{line}");
        }
    }
}
