//! Exit codes, as documented constants.
//!
//! They follow `git bisect run` where that applies (0 good, 1 bad, 125 skip), so that
//! `repro` can itself serve as a `git bisect run` script, and clap's convention of 2 for
//! usage errors. docs/src/reference/exit-codes.md lists every one of them.

/// Everything asked for succeeded (for `env check`: every must-match field matches).
pub const OK: u8 = 0;
/// The thing checked is bad: a must-match field differs (`env check`), or, with `--strict`,
/// a warning was raised.
pub const MISMATCH: u8 = 1;
/// A usage or input error: bad arguments, a malformed lockfile or recipe, a missing file.
pub const USAGE: u8 = 2;
/// The environment lacks something the command needs: no GPU, no driver, no NVRTC.
pub const ENVIRONMENT: u8 = 3;
/// A build failed (a compile error, a missing include, an entry point the artifact lacks).
/// Like every code from 1 to 127 but 125, `git bisect run` reads it as "bad".
pub const BUILD_FAILED: u8 = 5;
/// An operating-system error outside the user's input: a full disk, a read-only directory.
pub const IO: u8 = 4;
/// `replay`: the live environment differs from the recorded one in a must-match field.
pub const REPLAY_ENVIRONMENT: u8 = 6;
/// `replay`: the re-run's timing differs statistically from the recorded samples.
pub const REPLAY_TIMING: u8 = 7;
/// The thing cannot be tested here: its environment could not be set up (Nix missing, a
/// broken flake). `git bisect run` skips such a commit.
pub const SKIP: u8 = 125;
/// A bug in repro itself. Please report it with the whole error chain.
pub const INTERNAL: u8 = 70;

/// Every documented code with its meaning, for the documentation test and `--help` text.
pub const ALL: &[(u8, &str)] = &[
    (
        OK,
        "success; for `env check`, every must-match field matches",
    ),
    (
        MISMATCH,
        "bad: a must-match field differs (with `--strict`, also a warning); a bench verdict is `wrong`, `crash` or `timeout`; `store verify` found a problem; `compare --fail-on` found a significant change in that direction beyond `--threshold`",
    ),
    (
        USAGE,
        "usage or input error: bad arguments, malformed lockfile, missing file",
    ),
    (
        ENVIRONMENT,
        "the machine lacks what the command needs (GPU, driver, NVRTC)",
    ),
    (
        IO,
        "an operating-system error: disk full, permission denied, read-only store",
    ),
    (
        BUILD_FAILED,
        "a build failed: compile error, missing include, missing entry point",
    ),
    (
        REPLAY_ENVIRONMENT,
        "replay: the environment differs from the recorded one in a must-match field",
    ),
    (
        REPLAY_TIMING,
        "replay: the timing differs from the recorded samples (rank tests)",
    ),
    (
        SKIP,
        "untestable here: the environment could not be set up (Nix missing, broken flake)",
    ),
    (INTERNAL, "a bug in repro; the whole error chain is printed"),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code constant of this file is in [`ALL`] once: the documentation test and `--help`
    /// see them all.
    #[test]
    fn all_lists_every_code_once() {
        let src = include_str!("exit.rs");
        let mut consts: Vec<u8> = src
            .lines()
            .filter_map(|l| l.strip_prefix("pub const "))
            .filter_map(|l| l.split_once(": u8 = "))
            .map(|(_, v)| v.trim_end_matches(';').parse().expect("a code"))
            .collect();
        consts.sort_unstable();
        assert!(consts.len() >= 10, "code constants found: {consts:?}");
        let mut codes: Vec<u8> = ALL.iter().map(|(c, _)| *c).collect();
        codes.sort_unstable();
        assert_eq!(
            codes, consts,
            "ALL must list every code constant exactly once"
        );
    }
}
