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
        "a build failed: compile error, missing include, missing entry point, a kernel over a [build.limits] budget",
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

/// Which code a command that ran many independent tasks (`build --all`) exits with when
/// several failed: the worst, in this order: a bug in repro, an operating-system error, a
/// missing environment (a toolchain not installed), an input error, then a failed build.
/// A failed build is the least bad: the tool did its job and the code is what broke. Codes
/// not in this order rank below a failed build; `OK` only when every task succeeded.
pub fn worst(codes: impl IntoIterator<Item = u8>) -> u8 {
    const ORDER: &[u8] = &[INTERNAL, IO, ENVIRONMENT, USAGE, BUILD_FAILED];
    let rank = |c: u8| ORDER.iter().position(|o| *o == c).unwrap_or(ORDER.len());
    codes
        .into_iter()
        .filter(|c| *c != OK)
        .min_by_key(|c| rank(*c))
        .unwrap_or(OK)
}

/// What a command's own exit codes mean there, for its `--help` and its man page (EXIT
/// STATUS). Every command can also end with [`COMMON`]'s codes, which [`for_command`] adds.
/// A parent command (`env`, `toolchain`, ...) lists the union of its subcommands'.
pub const BY_COMMAND: &[(&str, &[(u8, &str)])] = &[
    (
        "env capture",
        &[(
            OK,
            "the fingerprint was printed; a probe that could not answer says why",
        )],
    ),
    (
        "init",
        &[
            (OK, "repro.toml and the recipes were written"),
            (
                USAGE,
                "not in a git repository, a file that exists already (without --force), a kernel file outside the repository or without kernels, or a release repro cannot pin",
            ),
            (
                ENVIRONMENT,
                "pip could not be asked, or --offline kept it from being asked for a release the table lacks",
            ),
        ],
    ),
    (
        "env check",
        &[
            (OK, "every must-match field matches (warnings are shown)"),
            (
                MISMATCH,
                "a must-match field differs or is missing; with --strict, also a warning",
            ),
            (
                ENVIRONMENT,
                "a toolchain the project uses is not installed and cannot install itself (no sha256 pinned), or, with --strict, any that is not installed",
            ),
        ],
    ),
    ("env lock", &[(OK, "the lockfile was written")]),
    (
        "env why-import",
        &[
            (OK, "the module imports in the Python environment"),
            (
                MISMATCH,
                "it does not import; the loader's message and what differs are printed",
            ),
            (ENVIRONMENT, "no Python environment to import it in"),
        ],
    ),
    (
        "build",
        &[
            (OK, "every recipe built, or was found in the store"),
            (
                MISMATCH,
                "a pinned toolchain installing itself on first use met a wheel whose sha256 differs from its pin",
            ),
            (
                ENVIRONMENT,
                "no NVRTC or nvcc, or a pinned toolchain that is not installed and may not install itself (--offline, or no sha256 pinned) or cannot be fetched (the other recipes are built first)",
            ),
            (
                BUILD_FAILED,
                "a build failed: compile error, missing include, missing entry point, or a kernel over a [build.limits] budget; with several recipes, the worst failure's code wins (70, 4, 3, 2, then 5)",
            ),
            (
                SKIP,
                "--nix: the dev shell could not be set up (nix missing, broken flake)",
            ),
        ],
    ),
    (
        "toolchain install",
        &[
            (OK, "installed, or already installed"),
            (MISMATCH, "a wheel's sha256 differs from its pin"),
            (
                ENVIRONMENT,
                "the release is not offered for this CPU architecture, or pip cannot fetch the wheels",
            ),
        ],
    ),
    (
        "toolchain list",
        &[(OK, "the installed toolchains were listed")],
    ),
    (
        "toolchain gc",
        &[(
            OK,
            "the toolchain trees no project's pins use were removed (or, with --dry-run, listed)",
        )],
    ),
    (
        "toolchain pin",
        &[
            (
                OK,
                "the pin was written into repro.toml, or was there already",
            ),
            (
                USAGE,
                "a release repro cannot pin (CUDA 12's nvcc, one neither the table nor pip has), an unknown component, or a release pinned already with other wheels (without --force)",
            ),
            (
                ENVIRONMENT,
                "pip could not be asked, or --offline kept it from being asked for a release the table lacks",
            ),
        ],
    ),
    (
        "toolchain which",
        &[
            (OK, "builds would find an NVRTC"),
            (ENVIRONMENT, "no NVRTC was found"),
        ],
    ),
    ("store path", &[(OK, "the store's path was printed")]),
    (
        "store verify",
        &[
            (OK, "every object and record is intact"),
            (MISMATCH, "a problem was found (each is listed)"),
        ],
    ),
    ("store gc", &[(OK, "the store was cleaned")]),
    (
        "bench",
        &[
            (OK, "every point's verdict is `ok`"),
            (MISMATCH, "a verdict is `wrong`, `crash` or `timeout`"),
            (
                ENVIRONMENT,
                "no GPU or driver, no NVRTC, or no build for this GPU's compute capability",
            ),
            (BUILD_FAILED, "the recipe's build failed"),
        ],
    ),
    (
        "profile",
        &[
            (OK, "the launch was profiled and its metrics recorded"),
            (
                MISMATCH,
                "the profiled launch failed its check or crashed, or ncu profiled no launch of the kernel",
            ),
            (
                USAGE,
                "a metric or section set ncu does not know; a recipe without [run]",
            ),
            (
                ENVIRONMENT,
                "no ncu, no permission for the GPU's performance counters (ERR_NVGPUCTRPERM), or ncu failed",
            ),
            (BUILD_FAILED, "the recipe's build failed or is over budget"),
        ],
    ),
    ("log", &[(OK, "the records were listed")]),
    ("show", &[(OK, "the record was printed")]),
    (
        "compare",
        &[
            (
                OK,
                "compared; with --fail-on, no significant change in that direction beyond --threshold",
            ),
            (
                MISMATCH,
                "--fail-on found a significant change in that direction beyond --threshold",
            ),
        ],
    ),
    (
        "bisect",
        &[
            (OK, "the first bad (or fixed) commit or release was found"),
            (
                MISMATCH,
                "an end does not behave as its role says, or only untestable commits separate them",
            ),
            (
                ENVIRONMENT,
                "a step cannot run here: no GPU, no srun, a promisor remote that cannot be reached, wheels that cannot be fetched",
            ),
        ],
    ),
    (
        "push",
        &[
            (OK, "the records were sent"),
            (ENVIRONMENT, "the remote cannot be reached"),
        ],
    ),
    (
        "pull",
        &[
            (OK, "the remote's records were filed"),
            (
                MISMATCH,
                "a record conflicts with a local one, or was rejected (each is listed)",
            ),
            (ENVIRONMENT, "the remote cannot be reached"),
        ],
    ),
    (
        "replay",
        &[
            (
                OK,
                "reproduced: identical artifacts, same environment, same timing",
            ),
            (
                MISMATCH,
                "an artifact differs, nothing could be compared, or the bundle or record fails a check",
            ),
            (
                ENVIRONMENT,
                "cannot run here: no GPU (the build part is still replayed and reported)",
            ),
            (
                REPLAY_ENVIRONMENT,
                "the environment differs from the recorded one in a must-match field",
            ),
            (
                REPLAY_TIMING,
                "the timing differs from the recorded samples, or is inconclusive",
            ),
        ],
    ),
    ("bundle create", &[(OK, "the bundle was written")]),
    (
        "bundle verify",
        &[
            (OK, "every file matches the MANIFEST"),
            (
                MISMATCH,
                "a file differs, is missing or is extra, or a member is refused",
            ),
        ],
    ),
    (
        "bundle show",
        &[
            (OK, "the bundle's files and README were printed"),
            (MISMATCH, "the bundle does not match its MANIFEST"),
        ],
    ),
    ("plot", &[(OK, "the plot was written")]),
    (
        "demo",
        &[
            (OK, "every step of the demo found what it should"),
            (MISMATCH, "a step did not find what it should"),
            (ENVIRONMENT, "no NVRTC could be found or installed"),
        ],
    ),
    ("completions", &[(OK, "the script was printed")]),
    (
        "man",
        &[(OK, "the page was printed, or the pages were written")],
    ),
];

/// The codes every command can end with.
pub const COMMON: &[u8] = &[USAGE, IO, INTERNAL];

/// The exit codes of one command (`"env check"`, or a parent such as `"env"`) with what each
/// means there, in numeric order: its own rows of [`BY_COMMAND`] (a parent's are its
/// subcommands', the first meaning of each code), then [`COMMON`]'s with their meaning in
/// [`ALL`]. `None` for a command [`BY_COMMAND`] does not know.
pub fn for_command(path: &str) -> Option<Vec<(u8, &'static str)>> {
    let prefix = format!("{path} ");
    let own: Vec<(u8, &'static str)> = BY_COMMAND
        .iter()
        .filter(|(name, _)| *name == path || name.starts_with(&prefix))
        .flat_map(|(_, codes)| codes.iter().copied())
        .collect();
    if own.is_empty() {
        return None;
    }
    let mut out: Vec<(u8, &'static str)> = Vec::new();
    for (code, meaning) in own {
        if !out.iter().any(|(c, _)| *c == code) {
            out.push((code, meaning));
        }
    }
    for code in COMMON {
        if !out.iter().any(|(c, _)| c == code) {
            out.push((*code, meaning(*code)));
        }
    }
    out.sort_by_key(|(c, _)| *c);
    Some(out)
}

/// The meaning of a code in [`ALL`].
pub fn meaning(code: u8) -> &'static str {
    ALL.iter()
        .find(|(c, _)| *c == code)
        .map(|(_, m)| *m)
        .unwrap_or("an undocumented code")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_failure_wins() {
        assert_eq!(worst([]), OK);
        assert_eq!(worst([OK, OK]), OK);
        assert_eq!(worst([BUILD_FAILED, OK]), BUILD_FAILED);
        assert_eq!(
            worst([BUILD_FAILED, ENVIRONMENT, BUILD_FAILED]),
            ENVIRONMENT
        );
        assert_eq!(worst([USAGE, ENVIRONMENT]), ENVIRONMENT);
        assert_eq!(worst([ENVIRONMENT, IO]), IO);
        assert_eq!(worst([IO, INTERNAL, USAGE]), INTERNAL);
        assert_eq!(worst([MISMATCH, BUILD_FAILED]), BUILD_FAILED);
    }

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

    /// Every code a command documents is a code repro has.
    #[test]
    fn commands_document_only_known_codes() {
        for (name, codes) in BY_COMMAND {
            for (code, meaning) in *codes {
                assert!(
                    ALL.iter().any(|(c, _)| c == code),
                    "{name}: code {code} is not in ALL"
                );
                assert!(!meaning.is_empty(), "{name}: code {code} has no meaning");
            }
        }
    }

    #[test]
    fn a_parent_lists_its_subcommands_codes_once_in_order() {
        let env: Vec<u8> = for_command("env")
            .unwrap()
            .iter()
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(env, [OK, MISMATCH, USAGE, ENVIRONMENT, IO, INTERNAL]);
        let check = for_command("env check").unwrap();
        assert_eq!(
            check[0],
            (OK, "every must-match field matches (warnings are shown)")
        );
        assert!(check.contains(&(USAGE, meaning(USAGE))));
        assert_eq!(
            for_command("en"),
            None,
            "a prefix of a name is not a command"
        );
        assert_eq!(for_command("nothing"), None);
    }
}
