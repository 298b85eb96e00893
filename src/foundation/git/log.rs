//! Following a file through renames, as `git log --follow` does (git's similarity
//! detection, which libgit2 lacks).

use git2::{Oid, Repository};

use super::command;
use crate::foundation::process::ProcessError;

/// One rename of a followed file: at `commit`, `old` became `new`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    /// The commit that renamed it.
    pub commit: Oid,
    /// The name before.
    pub old: String,
    /// The name after.
    pub new: String,
}

/// The renames of `path` in the history of `start`, newest first, found as `git log
/// --follow` finds them (git's similarity detection). With `offline`, git is told not to
/// fetch blobs lazily (a partial clone then finds exact renames only).
pub fn follow_renames(
    repo: &Repository,
    start: Oid,
    path: &str,
    offline: bool,
) -> Result<Vec<Rename>, ProcessError> {
    let mut cmd = command::in_git_dir(repo.path())
        .args([
            "-c",
            "maintenance.auto=false",
            "log",
            "--follow",
            "-M",
            "--name-status",
            "--format=%x01%H",
        ])
        .arg(start.to_string())
        .arg("--")
        .arg(path)
        .timeout(std::time::Duration::from_secs(600));
    if offline {
        cmd = cmd.env("GIT_NO_LAZY_FETCH", "1");
    }
    let out = cmd.run()?;
    Ok(parse_follow(&out.stdout_str()))
}

/// Reads the renames out of `git log --follow --name-status --format=%x01%H`.
fn parse_follow(text: &str) -> Vec<Rename> {
    let mut out = Vec::new();
    let mut commit = None;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix('\u{1}') {
            commit = Oid::from_str(h.trim()).ok();
            continue;
        }
        let mut parts = line.split('\t');
        let status = parts.next().unwrap_or_default();
        if let (true, Some(old), Some(new), Some(c)) =
            (status.starts_with('R'), parts.next(), parts.next(), commit)
        {
            out.push(Rename {
                commit: c,
                old: old.to_string(),
                new: new.to_string(),
            });
        }
    }
    out
}

/// The name that a file called `path` in newer history had at `commit`, given the renames
/// of `path` (newest first): every rename made after `commit` is undone.
pub fn name_at(repo: &Repository, renames: &[Rename], path: &str, commit: Oid) -> String {
    let mut name = path.to_string();
    for r in renames {
        if r.commit == commit || repo.graph_descendant_of(commit, r.commit).unwrap_or(false) {
            // This rename is already in `commit`'s history, and so are the older ones.
            break;
        }
        if r.new == name {
            name = r.old.clone();
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_are_read_from_git_log_follow() {
        let text = "\u{1}1111111111111111111111111111111111111111\n\nM\tk/new.cu\n\u{1}2222222222222222222222222222222222222222\n\nR092\told/a.cu\tk/new.cu\n\u{1}3333333333333333333333333333333333333333\n\nA\told/a.cu\n";
        let r = parse_follow(text);
        assert_eq!(
            r,
            [Rename {
                commit: Oid::from_str("2222222222222222222222222222222222222222").unwrap(),
                old: "old/a.cu".into(),
                new: "k/new.cu".into()
            }]
        );
    }
}
