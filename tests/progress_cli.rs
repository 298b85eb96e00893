//! Progress bars show on a terminal only, and `-q` leaves a successful command silent.

use crate::common;

use common::{git, repo_with, repro};
use serde_json::Value;

const RECIPE: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"mkdir -p out && cat src.txt > out/a.bin\"]\ninputs = [\"src.txt\"]\noutputs = [\"out/a.bin\"]\n";

#[test]
fn quiet_commands_print_nothing_when_all_is_well() {
    let (tmp, root) = repo_with(&[
        ("src.txt", "one\n"),
        ("recipes/cmd.toml", RECIPE),
        ("ok.sh", "exit 0\n"),
    ]);
    std::fs::write(root.join("ok.sh"), "exit 1\n").unwrap();
    git(&root, &["commit", "-qam", "break"]);
    let quiet = |args: &[&str]| {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("-q")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "-q {args:?} printed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    quiet(&["build", "cmd"]);
    quiet(&["bench", "--command", "true", "--runs", "2"]);
    quiet(&[
        "bisect", "--good", "HEAD~1", "--bad", "HEAD", "--script", "sh ok.sh",
    ]);
    quiet(&["store", "verify"]);
    quiet(&["store", "gc"]);
    quiet(&["env", "lock", "--name", "q"]);
    quiet(&["plot", "true", "-o", "p.svg"]);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["log", "--kind", "build", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let build = v["records"][0]["id"].as_str().unwrap().to_string();
    quiet(&["bundle", "create", &build, "-o", "b.tar.zst"]);
    quiet(&["bundle", "verify", "b.tar.zst"]);
    quiet(&["replay", &build]);
    // A problem still shows under -q: a failed bench run.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["-q", "bench", "--command", "exit 3", "--runs", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("CRASH"));
}

#[test]
fn progress_shows_on_a_terminal_only() {
    let (tmp, root) = repo_with(&[]);
    // Not a terminal (the test's pipes): no bar, no control characters.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bench", "--command", "sleep 0.2", "--runs", "3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("ETA") && !err.contains('\x1b'), "{err}");
    // On a terminal (util-linux `script` gives one): a bar with a count and an ETA.
    let bin = assert_cmd::cargo::cargo_bin("repro");
    let on_tty = |extra: &str| {
        std::process::Command::new("script")
            .current_dir(&root)
            .env("XDG_CACHE_HOME", tmp.path())
            // A terminal that says what it is: CI runs with no TERM at all.
            .env("TERM", "xterm")
            .args([
                "-qec",
                &format!(
                    "{} {extra} bench --command 'sleep 0.3' --runs 4",
                    bin.display()
                ),
                "/dev/null",
            ])
            .output()
    };
    match on_tty("") {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("/4 runs") && text.contains("ETA"),
                "no progress bar on a terminal: {text}"
            );
            let q = on_tty("-q").unwrap();
            let text = String::from_utf8_lossy(&q.stdout);
            assert!(!text.contains("ETA"), "-q showed a bar: {text}");
        }
        _ => common::skip("needs util-linux `script` to give repro a terminal"),
    }
}
