//! `repro bench --command` input errors: each is refused before anything runs (exit 2),
//! with the value named, and no result is recorded.

use crate::common;

use common::{repo_with, repro};

#[test]
fn command_bench_values_that_cannot_be_used_are_refused_before_anything_runs() {
    let (tmp, root) = repo_with(&[]);
    let mark = tmp.path().join("ran");
    let bench = |extra: &[&str]| {
        let cmd = format!("echo x >> {}; echo '{{\"ms\": 1}}'", mark.display());
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["bench", "--command", &cmd, "--name", "k"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["--runs", "0"],
            &[
                "error: --runs must be at least 1",
                "hint: --runs N runs the command exactly N times",
            ],
        ),
        (
            &["--metric", "bogus"],
            &[
                "error: --metric `bogus`: expected time, json:PATH or regex:RE",
                "hint: for example --metric time",
            ],
        ),
        (
            &["--min-runs", "5", "--max-runs", "3"],
            &[
                "error: --min-runs 5 --max-runs 3: need 2 <= min-runs <= max-runs",
                "hint: or pass --runs N",
            ],
        ),
        (
            &["--max-noise", "150%"],
            &["`150%` must be between 0 and 100%"],
        ),
        (&["--max-noise", "lots"], &["lots"]),
        (&["--warmup", "a while"], &["a while"]),
    ];
    for (args, says) in cases {
        let (code, err) = bench(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        for s in says {
            assert!(err.contains(s), "{args:?}: missing `{s}` in {err}");
        }
        assert!(!mark.exists(), "{args:?}: the command ran");
        assert!(!root.join(".repro/results").exists(), "{args:?}");
    }
}
