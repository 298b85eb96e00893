//! What one bisection step makes of a script or bench command that does not simply exit:
//! one that runs past `--timeout` (a bad commit, with the reason), one killed by a signal
//! or exiting above 127 (git bisect's abort: the search stops, naming the commit), and a
//! bench command that fails or hangs at some commits (bad there, not a crash of the
//! search). Real git, real processes; no compiler needed.

use crate::common;

use std::path::{Path, PathBuf};

use common::{git, repo_with, repro};
use serde_json::Value;

/// Eight commits; `state.txt` says `fine` before commit 5 and `broken` from it on.
fn history() -> (tempfile::TempDir, PathBuf) {
    let (tmp, root) = repo_with(&[("state.txt", "fine\n")]);
    for i in 1..=8 {
        let state = if i >= 5 { "broken" } else { "fine" };
        std::fs::write(root.join("state.txt"), format!("{state}\n")).unwrap();
        std::fs::write(root.join("NOTES.md"), format!("note {i}\n")).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    (tmp, root)
}

fn bisect(tmp: &Path, root: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(["bisect", "--json", "--good", "HEAD~7", "--bad", "HEAD"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The details of the steps with this verdict.
fn details(v: &Value, verdict: &str) -> Vec<String> {
    v["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps: {v}"))
        .iter()
        .filter(|s| s["verdict"] == verdict)
        .map(|s| s["detail"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_script_past_its_timeout_makes_the_commit_bad_with_the_reason() {
    let (tmp, root) = history();
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--script",
            "grep -q fine state.txt || sleep 30",
            "--timeout",
            "1s",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["culprit"]["subject"], "commit 5", "{v}");
    let bad = details(&v, "bad");
    assert!(!bad.is_empty(), "{v}");
    for d in &bad {
        assert_eq!(d, "timeout: the script ran longer than 1s", "{v}");
    }
}

#[test]
fn a_script_killed_by_a_signal_or_exiting_above_127_aborts_the_search() {
    let (tmp, root) = history();
    let head = git(&root, &["rev-parse", "--short=12", "HEAD"]);
    for (script, how) in [
        (
            "grep -q fine state.txt || kill -KILL $$",
            "was killed by SIGKILL (signal 9)",
        ),
        ("grep -q fine state.txt || exit 200", "exited with code 200"),
    ] {
        let (code, v, err) = bisect(tmp.path(), &root, &["--script", script]);
        assert_eq!(code, 1, "{script}: {err}");
        assert!(v.is_null(), "{script}: no report on stdout: {v}");
        assert!(
            err.contains("the script aborted the bisection at "),
            "{script}: {err}"
        );
        assert!(err.contains(how), "{script}: {err}");
        // The bad end is evaluated first, so it is where the search stops.
        assert!(err.contains(&head[..7]), "{script}: {err}");
    }
}

#[test]
fn a_bench_command_that_fails_or_hangs_makes_the_commit_bad() {
    let (tmp, root) = history();
    for (command, reason) in [
        (
            "grep -q fine state.txt && echo '{\"t\": 100}'",
            "the bench command failed",
        ),
        (
            "grep -q fine state.txt || sleep 30; echo '{\"t\": 100}'",
            "the bench command timed out",
        ),
    ] {
        let (code, v, err) = bisect(
            tmp.path(),
            &root,
            &[
                "--mode",
                "bench",
                "--command",
                command,
                "--metric",
                "json:t",
                "--attempts",
                "3",
                "--timeout",
                "2s",
            ],
        );
        assert_eq!(code, 0, "{command}: {err}");
        assert_eq!(v["culprit"]["subject"], "commit 5", "{command}: {v}");
        let bad = details(&v, "bad");
        assert!(!bad.is_empty(), "{command}: {v}");
        assert!(
            bad.iter().all(|d| d.starts_with(reason)),
            "{command}: {bad:?}"
        );
    }
}
