//! `repro plot` refusals: a name with no results, a sweep over a parameter no result has,
//! results from another history, an ID that is not a bisection's, files that are not
//! bisection reports, and an output that cannot be written. Each names the thing, with a
//! hint, exits with the documented code, and writes no SVG.

use crate::common;
use common::run_in as run;

use std::path::Path;

use common::{git, repo_with};

/// Records a command bench result named `k` at the current commit; returns its ID.
fn bench(cache: &Path, root: &Path) -> String {
    let (code, out, err) = run(
        cache,
        root,
        &[
            "--json",
            "bench",
            "--command",
            "echo '{\"ms\": 2.5}'",
            "--name",
            "k",
            "--metric",
            "json:ms",
            "--unit",
            "ms",
            "--runs",
            "3",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["results"][0]["id"]
        .as_str()
        .expect("bench --json names its result")
        .to_string()
}

/// Asserts a refusal: the code, the error line's text, a hint, and no SVG written.
fn refused(root: &Path, got: (i32, String, String), code: i32, says: &str) {
    let (c, _, err) = got;
    assert_eq!(c, code, "{err}");
    assert!(err.contains(&format!("error: {says}")), "{err}");
    assert!(err.contains("\nhint: "), "{err}");
    assert!(!root.join("x.svg").exists(), "{err}");
}

#[test]
fn plots_that_cannot_be_drawn_are_refused_by_name_and_write_nothing() {
    let (tmp, root) = repo_with(&[("a.txt", "a\n")]);
    let cache = tmp.path().join("cache");
    let id = bench(&cache, &root);

    refused(
        &root,
        run(&cache, &root, &["plot", "nothing", "-o", "x.svg"]),
        2,
        "no recorded results named `nothing`",
    );
    refused(
        &root,
        run(&cache, &root, &["plot", "k", "--sweep", "n", "-o", "x.svg"]),
        2,
        "no result of `k` has the parameter `n`",
    );
    // A result ID is not a bisection.
    refused(
        &root,
        run(
            &cache,
            &root,
            &["plot", "--bisect", &id[..12], "-o", "x.svg"],
        ),
        2,
        &format!("{} is a result, not a bisection", &id[..12]),
    );
    // An ID nothing has.
    refused(
        &root,
        run(
            &cache,
            &root,
            &["plot", "--bisect", "abcdef12", "-o", "x.svg"],
        ),
        2,
        "",
    );
    // Files that are not bisection reports.
    std::fs::write(root.join("notjson.json"), "not json at all").unwrap();
    refused(
        &root,
        run(
            &cache,
            &root,
            &["plot", "--bisect", "notjson.json", "-o", "x.svg"],
        ),
        2,
        "",
    );
    let (_, _, err) = run(
        &cache,
        &root,
        &["plot", "--bisect", "notjson.json", "-o", "x.svg"],
    );
    assert!(
        err.contains("it is not a bisection report")
            && err.contains("hint: write one with `repro bisect ... --json > FILE`"),
        "{err}"
    );
    std::fs::write(root.join("empty.json"), "{}").unwrap();
    let got = run(
        &cache,
        &root,
        &["plot", "--bisect", "empty.json", "-o", "x.svg"],
    );
    assert!(
        got.2.contains("empty.json") && got.2.contains("it is not a bisection report"),
        "{}",
        got.2
    );
    refused(&root, got, 2, "");
    // A directory where the report should be is an input error (2), as /dev/zero or a
    // FIFO is: the user named something that is not a report file.
    std::fs::create_dir(root.join("reports")).unwrap();
    refused(
        &root,
        run(
            &cache,
            &root,
            &["plot", "--bisect", "reports", "-o", "x.svg"],
        ),
        2,
        "cannot read reports: ",
    );

    // An output under a file: nothing is written, and the file stays as it was.
    let (code, _, err) = run(&cache, &root, &["plot", "k", "-o", "a.txt/x.svg"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("error: failed to write a.txt/x.svg"), "{err}");
    assert!(err.contains("hint: "), "{err}");
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "a\n");

    // The results are from a history that is no longer checked out.
    git(&root, &["checkout", "-q", "--orphan", "other"]);
    git(&root, &["commit", "-q", "-m", "another history"]);
    refused(
        &root,
        run(&cache, &root, &["plot", "k", "-o", "x.svg"]),
        2,
        "no result of `k` is at a commit of the current history",
    );
    // Back on the history of the result, it plots.
    git(&root, &["checkout", "-q", "main"]);
    let (code, out, err) = run(&cache, &root, &["plot", "k", "-o", "x.svg"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "wrote x.svg (1 points)\n");
    assert!(
        std::fs::read_to_string(root.join("x.svg"))
            .unwrap()
            .starts_with("<svg")
    );
}
