//! The `git` command line, for what libgit2 cannot do: fetching the blobs a partial clone
//! lacks, rename detection as `git log --follow` does it, and fetching or pushing refs.
//! Every `git` process of repro starts here (through `foundation::process`), never asking
//! for credentials on a terminal.

use std::path::Path;

use crate::foundation::process::Cmd;

/// `git --git-dir DIR`: a command on a repository's object database and refs, with no
/// working tree involved.
pub fn in_git_dir(git_dir: &Path) -> Cmd {
    Cmd::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .env("GIT_TERMINAL_PROMPT", "0")
}

/// `git -C DIR`: a command run as if in the working tree `dir`.
pub fn in_workdir(dir: &Path) -> Cmd {
    Cmd::new("git")
        .arg("-C")
        .arg(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
}
