//! The command line parsed against the named command's definitions alone.
//!
//! Building clap's whole tree (every command's arguments, the global options copied into
//! each, every command's exit-code table) is most of a short command's start-up: a warm
//! `repro build` hit spends more there than in finding its artifact. [`parse`] builds only
//! the global options and the one command the command line names, and answers only when
//! that parses; anything else (help, `--version`, a mistake, an unknown or internal command)
//! is left to the whole tree, so users see the same help and the same errors.

use std::ffi::OsString;

use clap::Args;

use super::context::GlobalArgs;

/// The command line's matches, when the named command's tree alone parses it (`Cli` reads
/// them as it reads the whole tree's).
pub fn matches(argv: &[OsString]) -> Option<clap::ArgMatches> {
    let root = root();
    let name = command_name(argv, &root)?;
    let sub = command(name)?;
    root.subcommand(sub)
        .subcommand_required(true)
        .try_get_matches_from(argv)
        .ok()
}

/// The top of the tree: the global options, and `--version` as `Cli` gives every command.
pub(super) fn root() -> clap::Command {
    GlobalArgs::augment_args(clap::Command::new("repro"))
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
}

/// The command a command line names: its first word that is neither a global option nor
/// a global option's value. None where that is not certain (`--`, an option only a command
/// takes, an option without its value). `globals`: the top of the tree, whose options are the global ones.
fn command_name<'a>(argv: &'a [OsString], globals: &clap::Command) -> Option<&'a str> {
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    let mut words = argv.iter().skip(1);
    while let Some(word) = words.next() {
        let word = word.to_str()?;
        if word == "--" || word == "-" {
            return None;
        }
        if let Some(long) = word.strip_prefix("--") {
            let (long, inline) = match long.split_once('=') {
                Some((l, _)) => (l, true),
                None => (long, false),
            };
            let arg = globals
                .get_arguments()
                .find(|a| a.get_long() == Some(long))?;
            if takes_value(arg) && !inline {
                words.next()?;
            }
            continue;
        }
        if let Some(shorts) = word.strip_prefix('-') {
            for (i, c) in shorts.char_indices() {
                let arg = globals.get_arguments().find(|a| a.get_short() == Some(c))?;
                if takes_value(arg) {
                    // `-C DIR`, `-CDIR`, `-vC DIR`: the value is the rest or the next word.
                    if i + c.len_utf8() == shorts.len() {
                        words.next()?;
                    }
                    break;
                }
            }
            continue;
        }
        return Some(word);
    }
    None
}

/// One command's tree, as `Command`'s derive builds it for the whole one.
pub(super) fn command(name: &str) -> Option<clap::Command> {
    use super::{
        bench, bisect, build, bundle, demo, env, init, plot, profile, pull, push, replay, results,
        store, toolchain,
    };
    type Augment = fn(clap::Command) -> clap::Command;
    // completions and man print the whole tree anyway.
    const COMMANDS: [(&str, Augment); 17] = [
        ("init", init::Args::augment_args),
        ("env", env::Args::augment_args),
        ("build", build::Args::augment_args),
        ("toolchain", toolchain::Args::augment_args),
        ("store", store::Args::augment_args),
        ("bench", bench::Args::augment_args),
        ("profile", profile::Args::augment_args),
        ("log", results::LogArgs::augment_args),
        ("show", results::ShowArgs::augment_args),
        ("compare", results::CompareArgs::augment_args),
        ("bisect", bisect::Args::augment_args),
        ("push", push::Args::augment_args),
        ("pull", pull::Args::augment_args),
        ("replay", replay::Args::augment_args),
        ("bundle", bundle::Args::augment_args),
        ("plot", plot::Args::augment_args),
        ("demo", demo::Args::augment_args),
    ];
    let (name, augment) = COMMANDS.iter().find(|(n, _)| *n == name)?;
    Some(augment(clap::Command::new(*name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &str) -> Vec<OsString> {
        words.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_command_name_skips_global_options_and_their_values() {
        let cases = [
            ("repro build vector_add", Some("build")),
            ("repro --store build build", Some("build")),
            ("repro --store=x -v env check", Some("env")),
            ("repro -C dir --json log", Some("log")),
            ("repro -vC dir show", Some("show")),
            ("repro -Cdir show", Some("show")),
            ("repro -vvq --offline bench", Some("bench")),
            ("repro --python py --store s plot", Some("plot")),
            ("repro --store", None),
            ("repro -C", None),
            ("repro --", None),
            ("repro --lock x env", None),
            ("repro -x build", None),
            ("repro", None),
        ];
        for (line, want) in cases {
            assert_eq!(command_name(&argv(line), &root()), want, "{line}");
        }
    }
}
