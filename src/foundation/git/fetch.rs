//! Fetching the blobs a partial clone lacks from its promisor remote, in one batch,
//! through the git command line (libgit2 cannot fetch lazily). With `offline`, nothing is
//! fetched and a missing blob is an error naming the path and the blob.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use git2::Repository;

use super::command;
use super::tree::Entry;
use super::worktree::CheckoutError;

/// The promisor remote of a partial clone: its name and URL.
pub fn promisor_remote(repo: &Repository) -> Option<(String, String)> {
    let cfg = repo.config().ok()?.snapshot().ok()?;
    let name = cfg.get_string("extensions.partialclone").ok().or_else(|| {
        let mut found = None;
        if let Ok(mut entries) = cfg.entries(Some(r"remote\..*\.promisor")) {
            while let Some(Ok(e)) = entries.next() {
                if e.value() == Some("true") {
                    found = e
                        .name()
                        .and_then(|n| n.strip_prefix("remote."))
                        .and_then(|n| n.strip_suffix(".promisor"))
                        .map(str::to_string);
                    break;
                }
            }
        }
        found
    })?;
    let url = cfg
        .get_string(&format!("remote.{name}.url"))
        .unwrap_or_default();
    Some((name, url))
}

/// How missing blobs are got.
#[derive(Clone, Debug)]
pub struct Fetcher {
    /// The repository's git directory.
    pub git_dir: PathBuf,
    /// The promisor remote, if this is a partial clone.
    pub remote: Option<(String, String)>,
    /// Never fetch.
    pub offline: bool,
    /// How long one batch may take.
    pub timeout: Duration,
}

impl Fetcher {
    /// A fetcher for `repo`.
    pub fn new(repo: &Repository, offline: bool) -> Self {
        Fetcher {
            git_dir: repo.path().to_path_buf(),
            remote: promisor_remote(repo),
            offline,
            timeout: Duration::from_secs(600),
        }
    }

    /// Makes sure every blob of `entries` is in the object database: fetches the missing
    /// ones in one batch, or says which is missing. Returns how many were fetched.
    pub fn ensure(
        &self,
        repo: &Repository,
        entries: &[Entry],
        progress: &dyn Fn(&str),
    ) -> Result<usize, CheckoutError> {
        let odb = repo.odb().map_err(|e| CheckoutError::Write {
            path: self.git_dir.display().to_string(),
            source: std::io::Error::other(e.message().to_string()),
        })?;
        let missing = |odb: &git2::Odb| -> Vec<&Entry> {
            let mut seen = HashSet::new();
            entries
                .iter()
                .filter(|e| !odb.exists(e.id) && seen.insert(e.id))
                .collect()
        };
        let gone = missing(&odb);
        if gone.is_empty() {
            return Ok(0);
        }
        let why = match (&self.remote, self.offline) {
            (_, true) => Some(" (--offline: not fetched)".to_string()),
            (None, _) => Some(
                " (the repository has no promisor remote to fetch it from: not a partial clone)"
                    .to_string(),
            ),
            (Some(_), false) => None,
        };
        if let Some(why) = why {
            return Err(CheckoutError::MissingBlob {
                path: gone[0].path.clone(),
                blob: gone[0].id,
                more: gone.len() - 1,
                why,
            });
        }
        let (remote, url) = self.remote.clone().expect("checked above");
        progress(&format!(
            "fetching {} missing blob{} from `{remote}`",
            gone.len(),
            if gone.len() == 1 { "" } else { "s" }
        ));
        let ids: String = gone.iter().map(|e| format!("{}\n", e.id)).collect();
        // As git's own lazy fetch does: a noop negotiation, no tags, no FETCH_HEAD, no
        // refs updated; only objects are added. Automatic maintenance stays off.
        command::in_git_dir(&self.git_dir)
            .args([
                "-c",
                "fetch.negotiationAlgorithm=noop",
                "-c",
                "maintenance.auto=false",
                "-c",
                "gc.auto=0",
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--recurse-submodules=no",
                "--filter=blob:none",
                "--stdin",
            ])
            .arg(&remote)
            .stdin_bytes(ids.into_bytes())
            .timeout(self.timeout)
            .run()
            .map_err(|source| CheckoutError::Fetch {
                remote: remote.clone(),
                url: url.clone(),
                count: gone.len(),
                source: Box::new(source),
            })?;
        let _ = odb.refresh();
        let still = missing(&odb);
        if let Some(first) = still.first() {
            return Err(CheckoutError::MissingBlob {
                path: first.path.clone(),
                blob: first.id,
                more: still.len() - 1,
                why: format!(" (the promisor remote `{remote}` does not have it)"),
            });
        }
        Ok(gone.len())
    }
}
