//! `repro bisect`'s report to a person (no --json): the undecided range with each commit's
//! reason, the first fixed commit with its still-broken parent; the input errors of commit
//! and toolchain bisections; and the hidden `repro bisect-step`'s refusal of bad requests.

use crate::common;

use std::path::{Path, PathBuf};

use common::{git, repo_with, repro};

/// A history of 8 commits; commit i writes n.txt = i.
fn numbered() -> (tempfile::TempDir, PathBuf) {
    let (tmp, root) = repo_with(&[("README", "a project\n")]);
    for i in 1..=8 {
        std::fs::write(root.join("n.txt"), format!("{i}\n")).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    (tmp, root)
}

/// `repro bisect ARGS` without --json: (exit code, stdout, stderr).
fn bisect(tmp: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .env("NO_COLOR", "1")
        .arg("bisect")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn short(root: &Path, rev: &str) -> String {
    git(root, &["rev-parse", "--short=12", rev])
}

#[test]
fn an_undecided_bisection_lists_the_commits_it_could_not_test_and_why() {
    let (tmp, root) = numbered();
    // Commits 3 to 5 cannot be tested (exit 125); 6 is the first bad one.
    let (code, out, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good",
            "HEAD~7",
            "--bad",
            "HEAD",
            "--script",
            "n=$(cat n.txt); [ $n -ge 3 ] && [ $n -le 5 ] && exit 125; test $n -lt 6",
        ],
    );
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "undecided: the first bad commit could not be pinned down: it is one of these commits, and all but the last could not be tested:",
        "{out}"
    );
    // Commits 3, 4 and 5 (skipped) and 6 (the first one known bad), oldest first.
    let listed: Vec<String> = lines[1..5].iter().map(|l| l.trim().to_string()).collect();
    let expect: Vec<String> = [
        ("HEAD~5", "the script exited 125 (skip)"),
        ("HEAD~4", "the script exited 125 (skip)"),
        ("HEAD~3", "the script exited 125 (skip)"),
        ("HEAD~2", "the script exited 1"),
    ]
    .iter()
    .map(|(r, d)| format!("{}  {d}", short(&root, r)))
    .collect();
    assert_eq!(listed, expect, "{out}");
    assert_eq!(lines[5], "", "{out}");
    assert!(lines[6].starts_with("evidence ("), "{out}");
    assert!(!out.contains("first bad commit:"), "{out}");
}

#[test]
fn a_fixed_search_names_the_first_fixed_commit_and_its_still_broken_parent() {
    let (tmp, root) = numbered();
    let (code, out, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--find",
            "fixed",
            "--good",
            "HEAD",
            "--bad",
            "HEAD~7",
            "--script",
            "test $(cat n.txt) -ge 4",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let full = git(&root, &["rev-parse", "HEAD~4"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("first fixed commit: {full}"), "{out}");
    assert_eq!(lines[3], "  subject  commit 4", "{out}");
    assert_eq!(
        lines[5],
        format!(
            "its parent (still broken): {} commit 3",
            short(&root, "HEAD~5")
        ),
        "{out}"
    );
    assert!(!out.contains("first bad commit"), "{out}");
}

#[test]
fn commit_bisection_input_errors_are_named_before_anything_runs() {
    let (tmp, root) = numbered();
    let range = ["--good", "HEAD~7", "--bad", "HEAD"];
    let refused = |args: &[&str], says: &[&str]| {
        let (code, out, err) = bisect(tmp.path(), &root, &[&range[..], args].concat());
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        for s in says {
            assert!(err.contains(s), "{args:?}: {err}");
        }
    };
    refused(
        &[],
        &[
            "error: say what to test: --recipe NAME [--mode build|check|bench], --script CMD, or --command CMD",
            "hint: for example --script 'make test'",
        ],
    );
    refused(
        &["--script", "true", "--partition", "gpu"],
        &[
            "error: --partition is an option of --executor slurm",
            "hint: add --executor slurm, or leave them out",
        ],
    );
    refused(
        &["--command", "true", "--metric", "bogus"],
        &[
            "error: --metric `bogus`: expected time, json:PATH or regex:RE",
            "hint: for example --metric time",
        ],
    );
    refused(
        &["--command", "true", "--metric", "regex:("],
        &[
            "error: --metric regex `(`: ",
            "hint: for example --metric time",
        ],
    );
    refused(
        &["--recipe", "recipes/k.toml", "--recipe-per-commit"],
        &[
            "error: --recipe-per-commit takes a recipe name, not the path `recipes/k.toml`",
            "hint: each commit's recipes/NAME.toml is read: pass --recipe NAME",
        ],
    );
    refused(
        &["--recipe", "k", "--recipe-at", "HEAD~3"],
        &[
            "error: cannot read the recipe recipes/k.toml at HEAD~3",
            "not in this commit",
            "hint: --recipe-at reads the recipe from that commit",
        ],
    );
    // Without both ends: which one is missing, and both ways to ask.
    for (args, missing) in [
        (&["--script", "true"][..], "--good and --bad"),
        (&["--good", "HEAD~7", "--script", "true"][..], "--bad"),
        (&["--bad", "HEAD", "--script", "true"][..], "--good"),
    ] {
        let (code, out, err) = bisect(tmp.path(), &root, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(
            err.contains(&format!("error: give {missing} (or --toolchains)\n")),
            "{args:?}: {err}"
        );
        assert!(err.contains("hint: for example `repro bisect --good v1.0 --bad HEAD --script CMD`, or `--toolchains"), "{err}");
    }
    // Nothing was run or recorded.
    assert!(!root.join(".repro/bisect").exists());
    assert!(!root.join(".repro/bisections").exists());
}

#[test]
fn toolchain_bisection_input_errors_are_named_before_anything_is_installed() {
    let kernel = "extern \"C\" __global__ void k(float* a) { a[0] = 1; }\n";
    let nvrtc = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n";
    let command = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"cp\", \"kernels/k.cu\", \"out.cu\"]\ninputs = [\"kernels/*.cu\"]\noutputs = [\"out.cu\"]\n";
    let (tmp, root) = repo_with(&[
        ("kernels/k.cu", kernel),
        ("recipes/k.toml", nvrtc),
        ("recipes/cmd.toml", command),
    ]);
    let cache = tmp.path().join("cache");
    let refused = |args: &[&str], says: &[&str]| {
        let (code, out, err) = bisect(&cache, &root, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        for s in says {
            assert!(err.contains(s), "{args:?}: {err}");
        }
    };
    refused(
        &["--toolchains", "nvrtc12..13", "--recipe", "k"],
        &[
            "error: `nvrtc12` is not a toolchain",
            "hint: for example --toolchains nvrtc@12.8.93..nvrtc@13.0.88",
        ],
    );
    refused(
        &["--toolchains", "nvcc@12.9..nvcc@13.0", "--recipe", "k"],
        &[
            "error: recipe `k` is built by nvrtc, but the range is of nvcc releases",
            "hint: give a range of nvrtc releases (--toolchains nvrtc@FROM..nvrtc@TO) or a recipe built by nvcc",
        ],
    );
    refused(
        &[
            "--toolchains",
            "nvrtc@12.9.86..nvrtc@13.0.88",
            "--recipe",
            "cmd",
        ],
        &[
            "error: recipe `cmd` is a command build; it has no compiler release to search",
            "hint: --toolchains needs an nvrtc or nvcc recipe",
        ],
    );
    // Nothing was installed or recorded.
    assert!(!cache.join("repro/toolchains").exists());
    assert!(!root.join(".repro/bisections").exists());
}

#[test]
fn a_step_request_that_cannot_be_read_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let step = |path: &Path| {
        let out = repro(tmp.path())
            .arg("bisect-step")
            .arg(path)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let missing = tmp.path().join("missing.json");
    let (code, err) = step(&missing);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "error: cannot read the step request {}",
            missing.display()
        )),
        "{err}"
    );
    let cut = tmp.path().join("cut.json");
    std::fs::write(&cut, "{\"schema\": 1, \"repo\": ").unwrap();
    let (code, err) = step(&cut);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "error: the step request {} is malformed",
            cut.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("\nhint: step requests are written by `repro bisect --executor slurm`"),
        "{err}"
    );
    let partial = tmp.path().join("partial.json");
    std::fs::write(&partial, "{\"schema\": 1}").unwrap();
    let (code, err) = step(&partial);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("missing field `repo`"), "{err}");
}
