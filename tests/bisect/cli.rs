//! `repro bisect` end to end on throwaway repositories: build mode with the real NVRTC,
//! script mode with git bisect's exit codes, bench mode through a command bench with
//! noisy synthetic samples; the user's repository checked byte for byte.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{git, nvrtc_available, repo_with, repro, run_in};
use predicates::prelude::*;
use serde_json::Value;

const RECIPE: &str = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n";

/// A history of `n` commits; `kernel(i)` is the kernel source at commit i (1-based), and
/// every commit also changes an unrelated file.
fn history(
    n: usize,
    kernel: impl Fn(usize) -> String,
    extra: impl Fn(usize) -> Vec<(String, String)>,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, root) = repo_with(&[("recipes/k.toml", RECIPE)]);
    for i in 1..=n {
        std::fs::create_dir_all(root.join("kernels")).unwrap();
        std::fs::write(root.join("kernels/k.cu"), kernel(i)).unwrap();
        std::fs::write(root.join("NOTES.md"), format!("note {i}\n")).unwrap();
        for (p, t) in extra(i) {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        }
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    (tmp, root)
}

/// `n` commits of a kernel that always builds, whose `state.txt` says `fine` before commit
/// `breaks` and `broken` from it on (what `grep -q fine state.txt` bisects).
fn state_history(n: usize, breaks: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    history(
        n,
        |i| kernel(true, i),
        |i| {
            vec![(
                "state.txt".into(),
                if i >= breaks { "broken\n" } else { "fine\n" }.into(),
            )]
        },
    )
}

/// Commit `i`'s `state.txt` for the skip tests: `broken` from commit 11 on, and a second
/// line `untestable` where `untestable(i)` (the script exits 125 there).
fn state_with_untestable(i: usize, untestable: impl Fn(usize) -> bool) -> Vec<(String, String)> {
    vec![(
        "state.txt".into(),
        format!(
            "{}\n{}\n",
            if i >= 11 { "broken" } else { "fine" },
            if untestable(i) { "untestable" } else { "ok" }
        ),
    )]
}

fn kernel(ok: bool, i: usize) -> String {
    format!(
        "// version {i}\nextern \"C\" __global__ void k(float* a) {{ a[0] = {i}{} }}\n",
        if ok { ";" } else { "" }
    )
}

fn bisect(tmp: &Path, root: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(["bisect", "--json"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        stderr,
    )
}

fn subject_of(v: &Value) -> String {
    v["culprit"]["subject"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Everything about the user's repository that a bisection must not change.
fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    for e in walkdir::WalkDir::new(root).into_iter().flatten() {
        let rel = e
            .path()
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.starts_with(".repro")
            || !e.file_type().is_file()
            || rel.starts_with(".git/objects")
            || rel.starts_with(".git/logs")
        {
            continue;
        }
        m.insert(rel, std::fs::read(e.path()).unwrap());
    }
    m
}

#[test]
fn build_mode_finds_the_break_and_the_fix_and_resumes_from_the_store() {
    if !nvrtc_available() {
        return;
    }
    // Commit 8 breaks the build; commit 14 fixes it.
    let (tmp, root) = history(20, |i| kernel(!(8..14).contains(&i), i), |_| vec![]);
    std::fs::write(root.join("NOTES.md"), "uncommitted edit\n").unwrap();
    let before = snapshot(&root);
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~19", "--bad", "HEAD~8", "--recipe", "k"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subject_of(&v), "commit 8");
    assert_eq!(v["parent"]["subject"], "commit 7");
    assert!(
        v["culprit"]["diffstat"]
            .as_str()
            .unwrap()
            .contains("kernels/k.cu")
    );
    let evaluated = v["evaluated"].as_u64().unwrap();
    // 12 commits: the two ends and at most ceil(log2 11) = 4 steps.
    assert!(evaluated <= 6, "{evaluated} evaluations");
    let bad_step = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["verdict"] == "bad")
        .unwrap();
    assert!(
        bad_step["detail"]
            .as_str()
            .unwrap()
            .contains("expected a \";\""),
        "{bad_step}"
    );
    assert_eq!(
        snapshot(&root),
        before,
        "the working tree, index, HEAD and refs are untouched"
    );

    // Running it again re-evaluates nothing.
    let (_, again, _) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~19", "--bad", "HEAD~8", "--recipe", "k"],
    );
    assert_eq!(again["evaluated"], 0);
    assert_eq!(subject_of(&again), "commit 8");

    // Which commit made it build again?
    let (code, v, _) = bisect(
        tmp.path(),
        &root,
        &[
            "--bad", "HEAD~12", "--good", "HEAD", "--recipe", "k", "--find", "fixed",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(subject_of(&v), "commit 14");
    assert_eq!(snapshot(&root), before);
}

#[test]
fn the_human_report_names_the_culprit_and_the_last_working_build() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = history(6, |i| kernel(i < 4, i), |_| vec![]);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args([
            "bisect", "--good", "HEAD~5", "--bad", "HEAD", "--recipe", "k",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("first bad commit:"))
        .stdout(predicate::str::contains("subject  commit 4"))
        .stdout(predicate::str::contains("last working build:"))
        .stdout(predicate::str::is_match(r"(?m)^  #\s+COMMIT\s+VERDICT").unwrap())
        .stderr(predicate::str::contains("bisect: testing"));
}

#[test]
fn script_mode_follows_git_bisect_run_exit_codes() {
    // The "bug" appears in commit 11; commits 8 (the first midpoint) and 13 cannot be tested (exit 125).
    let (tmp, root) = history(
        16,
        |i| kernel(true, i),
        |i| state_with_untestable(i, |i| [8, 13].contains(&i)),
    );
    let script = "grep -q untestable state.txt && exit 125; grep -q fine state.txt";
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~15", "--bad", "HEAD", "--script", script],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subject_of(&v), "commit 11");
    let skipped: Vec<&Value> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["verdict"] == "skip")
        .collect();
    assert!(
        !skipped.is_empty(),
        "the skips were met and searched around"
    );

    // When every commit around the transition is untestable, the range is reported.
    let script = "grep -q untestable state.txt && exit 125; grep -q fine state.txt";
    let (tmp2, root2) = history(
        16,
        |i| kernel(true, i),
        |i| state_with_untestable(i, |i| (9..=12).contains(&i)),
    );
    let (code, v, _) = bisect(
        tmp2.path(),
        &root2,
        &["--good", "HEAD~15", "--bad", "HEAD", "--script", script],
    );
    assert_eq!(code, 1);
    assert_eq!(v["outcome"]["kind"], "untestable");
    assert_eq!(
        v["range"].as_array().unwrap().len(),
        5,
        "commits 9 to 13 may hold it: {v}"
    );
    drop(tmp);

    // Above 127 aborts, like git bisect run.
    let (code, _, stderr) = bisect(
        tmp2.path(),
        &root2,
        &[
            "--good",
            "HEAD~15",
            "--bad",
            "HEAD",
            "--script",
            "grep -q broken state.txt && exit 1; exit 200",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("aborted the bisection"), "{stderr}");
}

#[test]
fn bench_mode_finds_a_ten_percent_slowdown_among_noise_and_not_in_an_aa_history() {
    // Every commit prints a noisy "time"; commit 9 makes it 10% slower.
    let script = "r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' '); awk -v base=$(cat base.txt) -v r=$r 'BEGIN { printf \"{\\\"t\\\": %.4f}\\n\", base * (1 + (r / 65535 - 0.5) * 0.01) }'";
    let (tmp, root) = history(
        16,
        |i| kernel(true, i),
        |i| {
            vec![(
                "base.txt".into(),
                if i >= 9 {
                    "110\n".into()
                } else {
                    "100\n".into()
                },
            )]
        },
    );
    let args = [
        "--good",
        "HEAD~15",
        "--bad",
        "HEAD",
        "--mode",
        "bench",
        "--command",
        script,
        "--metric",
        "json:t",
        "--threshold",
        "5%",
    ];
    let (code, v, stderr) = bisect(tmp.path(), &root, &args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subject_of(&v), "commit 9", "{v}");
    let bad = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["verdict"] == "bad" && s["index"].as_u64() != Some(15))
        .unwrap();
    let ratio = bad["ratio"][0].as_f64().unwrap();
    assert!((ratio - 1.10).abs() < 0.01, "{ratio}");
    assert!(bad["p"].as_f64().unwrap() <= 0.01);
    assert_eq!(
        v["recheck"]["confirmed"], true,
        "the culprit is slower than its own parent: {v}"
    );

    // An A/A history: the bad end is not slower, so there is nothing to find.
    let (tmp2, root2) = history(
        8,
        |i| kernel(true, i),
        |_| vec![("base.txt".into(), "100\n".into())],
    );
    let (code, _, stderr) = bisect(
        tmp2.path(),
        &root2,
        &[
            "--good",
            "HEAD~7",
            "--bad",
            "HEAD",
            "--mode",
            "bench",
            "--command",
            script,
            "--metric",
            "json:t",
        ],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("the bad end") && stderr.contains("is not bad"),
        "{stderr}"
    );
}

#[test]
fn bad_input_is_explained() {
    let (tmp, root) = history(4, |i| kernel(true, i), |_| vec![]);
    let run = |args: &[&str]| {
        repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("bisect")
            .args(args)
            .assert()
    };
    run(&["--good", "nope", "--bad", "HEAD", "--script", "true"])
        .code(2)
        .stderr(predicate::str::contains("unknown revision `nope`"));
    run(&["--good", "HEAD", "--bad", "HEAD", "--script", "true"])
        .code(2)
        .stderr(predicate::str::contains("the two ends are the same commit"));
    run(&["--good", "HEAD", "--bad", "HEAD~2", "--script", "true"])
        .code(2)
        .stderr(predicate::str::contains("is not an ancestor of"))
        .stderr(predicate::str::contains("hint:"));
    run(&["--good", "HEAD~3", "--bad", "HEAD"])
        .code(2)
        .stderr(predicate::str::contains("say what to test"));
    // --param outside a recipe bench was ignored; in one, a name the recipe lacks or a
    // value that does not parse was a skip at every step. Both are said before any step.
    for mode in [
        &["--recipe", "k"][..],
        &["--script", "true"],
        &["--recipe", "k", "--mode", "check"],
    ] {
        let mut args = vec!["--good", "HEAD~3", "--bad", "HEAD", "--param", "n=4"];
        args.extend_from_slice(mode);
        run(&args).code(2).stderr(predicate::str::contains(
            "it applies to --recipe NAME --mode bench only",
        ));
    }
    let bench = [
        "--good", "HEAD~3", "--bad", "HEAD", "--recipe", "k", "--mode", "bench",
    ];
    run(&[&bench[..], &["--param", "bogus=1"]].concat())
        .code(2)
        .stderr(predicate::str::contains(
            "--param `bogus`: not a parameter of this recipe",
        ));
    // Without NVRTC a build step cannot run at all: that stops the search (exit 3), and
    // --keep-going is for infrastructure failures in the middle, not at the ends.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("REPRO_NVRTC", &empty)
        .args([
            "bisect", "--good", "HEAD~3", "--bad", "HEAD", "--recipe", "k",
        ])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("cannot evaluate commit"));
    // The good end must be good.
    run(&["--good", "HEAD~3", "--bad", "HEAD", "--script", "false"])
        .code(1)
        .stderr(predicate::str::contains("the good end"))
        .stderr(predicate::str::contains("is not good"));
}

/// A build record made from uncommitted edits stays as it was when a bisection's step
/// builds a commit with the same inputs: the step's hit must not mark it clean at the
/// user's HEAD (it did, and replay then refused the record: "the sources do not match").
#[test]
fn a_bisection_step_leaves_a_dirty_build_record_as_it_was() {
    const CMD: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"grep -q fine src/k.txt && cp src/k.txt out.bin\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n";
    let (tmp, root) = repo_with(&[("recipes/c.toml", CMD), ("src/k.txt", "fine 1\n")]);
    let first = git(&root, &["rev-parse", "HEAD"]);
    // Built from an edit not yet committed: the record names HEAD and is dirty.
    std::fs::write(root.join("src/k.txt"), "fine 2\n").unwrap();
    let (code, out, err) = run_in(tmp.path(), &root, &["build", "c", "--json"]);
    assert_eq!(code, 0, "{err}");
    let show = |id: &str| -> Value {
        let (_, out, _) = run_in(tmp.path(), &root, &["--json", "show", id]);
        serde_json::from_str(&out).unwrap()
    };
    let built: Value = serde_json::from_str(&out).unwrap();
    let id = built["builds"][0]["key"].as_str().unwrap().to_string();
    let before = show(&id[..12]);
    assert_eq!(before["commit"], first.as_str(), "{before}");
    assert!(before["dirty"].is_string(), "{before}");
    // The edit committed (commit 2), then a break and one more commit.
    git(&root, &["commit", "-qam", "commit 2"]);
    let two = git(&root, &["rev-parse", "HEAD"]);
    std::fs::write(root.join("src/k.txt"), "broken\n").unwrap();
    git(&root, &["commit", "-qam", "commit 3"]);
    std::fs::write(root.join("NOTES"), "x\n").unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "commit 4"]);
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &["--good", &two, "--bad", "HEAD~1", "--recipe", "c"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subject_of(&v), "commit 3", "{v}");
    let after = show(&id[..12]);
    assert_eq!(after["commit"], before["commit"], "{after}");
    assert_eq!(after["dirty"], before["dirty"], "{after}");
}

#[test]
fn a_recipe_that_did_not_exist_or_a_missing_blob_is_a_skip_with_a_reason() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = history(12, |i| kernel(i < 9, i), |_| vec![]);
    // The recipe did not exist at commit 0 (the repository's first commit): start there,
    // with each commit's own recipe.
    let first = git(&root, &["rev-list", "--max-parents=0", "HEAD"]);
    std::fs::remove_file(root.join("recipes/k.toml")).ok();
    let (code, _, stderr) = bisect(
        tmp.path(),
        &root,
        &[
            "--good",
            &first,
            "--bad",
            "HEAD",
            "--recipe",
            "k",
            "--recipe-per-commit",
        ],
    );
    // The initial commit has the recipe but no kernel: its build cannot even find the source.
    assert_ne!(code, 0);
    assert!(stderr.contains("the good end"), "{stderr}");
    // By default the recipe is read from the working tree, where it is now missing.
    let (code, _, stderr) = bisect(
        tmp.path(),
        &root,
        &["--good", &first, "--bad", "HEAD", "--recipe", "k"],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no recipe `k` (looked for recipes/k.toml)"),
        "{stderr}"
    );
    git(&root, &["checkout", "--", "recipes/k.toml"]);

    // Delete the blob of commit 6's kernel (as in a partial clone): the search goes around
    // it and still finds commit 9.
    let delete = |rev: &str| {
        let blob = git(&root, &["rev-parse", &format!("{rev}:kernels/k.cu")]);
        let obj = root.join(".git/objects").join(&blob[..2]).join(&blob[2..]);
        std::fs::remove_file(&obj).unwrap();
        blob
    };
    let blob6 = delete("HEAD~6");
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~11", "--bad", "HEAD", "--recipe", "k"],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subject_of(&v), "commit 9");
    // The search met commit 6 (the first midpoint of 1..12 at any width), could not read
    // it, and went around it.
    let step6 = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "commit 6")
        .unwrap_or_else(|| panic!("commit 6 is not evaluated: {v}"));
    assert_eq!(step6["verdict"], "skip", "{step6}");
    assert!(
        step6["detail"].as_str().unwrap().contains(&blob6),
        "{step6}"
    );
    // Commit 8, the last good one, cannot be read either: the search must test it, cannot,
    // and says which file and blob are missing.
    let blob = delete("HEAD~4");
    // Step answers already stored would answer for commit 8: forget them.
    std::fs::remove_dir_all(root.join(".repro/bisect")).unwrap();
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~11", "--bad", "HEAD", "--recipe", "k"],
    );
    assert_eq!(code, 1, "{stderr}");
    let skip = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "commit 8")
        .expect("commit 8 is evaluated");
    assert_eq!(skip["verdict"], "skip", "{skip}");
    let detail = skip["detail"].as_str().unwrap();
    assert!(
        detail.contains("kernels/k.cu") && detail.contains(&blob),
        "{detail}"
    );
}

#[test]
fn killing_a_bisection_leaves_the_repository_alone_and_the_rerun_resumes() {
    let (tmp, root) = state_history(24, 17);
    let before = snapshot(&root);
    let script = "sleep 0.4; grep -q fine state.txt";
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("repro"))
        .arg("-C")
        .arg(&root)
        .args([
            "bisect", "--good", "HEAD~23", "--bad", "HEAD", "--script", script,
        ])
        .env("XDG_CACHE_HOME", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Long enough for the ends and a step or two, not for the whole search.
    std::thread::sleep(std::time::Duration::from_millis(1600));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        snapshot(&root),
        before,
        "a killed bisection changed the repository"
    );
    let (code, v, stderr) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~23", "--bad", "HEAD", "--script", script],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subject_of(&v), "commit 17");
    let cached = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["cached"] == true)
        .count();
    assert!(
        cached >= 2,
        "the steps finished before the kill are reused: {v}"
    );
    // Temporary checkouts of the killed run are cleaned up by the next one; what stays is
    // `kept/`, the whole-tree worktrees a later bisection takes over (at most 4).
    let leftovers: Vec<String> = std::fs::read_dir(root.join(".repro/tmp"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "kept")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(leftovers, Vec::<String>::new());
    let kept = std::fs::read_dir(root.join(".repro/tmp/kept"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert!(kept <= 4, "at most 4 kept worktrees, found {kept}");
    assert_eq!(snapshot(&root), before);
}

#[test]
fn multisection_with_several_jobs_finds_the_same_commit_in_fewer_rounds() {
    let (tmp, root) = state_history(40, 27);
    let script = "grep -q fine state.txt";
    let (code, one, _) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~39", "--bad", "HEAD", "--script", script],
    );
    assert_eq!(code, 0);
    let (tmp4, root4) = state_history(40, 27);
    // Each step writes when it ran (start and end, seconds) to a log outside the
    // repository; sleeping 1 s, steps of one round overlap, and the log shows how many
    // workers there really were.
    let log = tmp4.path().join("steps.log");
    let timed = format!(
        "s=$(date +%s.%N); sleep 1; echo \"$s $(date +%s.%N)\" >> '{}'; {script}",
        log.display()
    );
    let (code, four, stderr) = bisect(
        tmp4.path(),
        &root4,
        &[
            "--good", "HEAD~39", "--bad", "HEAD", "--script", &timed, "--jobs", "4",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subject_of(&one), "commit 27");
    assert_eq!(subject_of(&four), "commit 27");
    let spans: Vec<(f64, f64)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert_eq!(spans.len() as u64, four["evaluated"].as_u64().unwrap());
    let most_at_once = spans
        .iter()
        .map(|&(start, _)| {
            spans
                .iter()
                .filter(|&&(a, b)| a <= start && start < b)
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(most_at_once, 4, "steps at once with --jobs 4: {spans:?}");
    // Rounds: the steps' starts fall into groups a second apart; 39 commits take at most
    // 2 (the ends) + log5(39) ~ 3 rounds at width 4, against about 6 one at a time.
    let mut starts: Vec<f64> = spans.iter().map(|s| s.0).collect();
    starts.sort_by(f64::total_cmp);
    let rounds = 1 + starts.windows(2).filter(|w| w[1] - w[0] > 0.5).count();
    assert!(rounds <= 5, "{rounds} rounds: {spans:?}");
    // Four at a time narrows 39 commits in about log5(39) ~ 3 rounds of up to 4 evaluations.
    let evaluated = four["evaluated"].as_u64().unwrap();
    assert!(
        evaluated >= one["evaluated"].as_u64().unwrap(),
        "multisection trades evaluations for rounds"
    );
    if nvrtc_available() {
        let (tmp, root) = history(24, |i| kernel(i < 15, i), |_| vec![]);
        let (code, v, stderr) = bisect(
            tmp.path(),
            &root,
            &[
                "--good", "HEAD~23", "--bad", "HEAD", "--recipe", "k", "--jobs", "3",
            ],
        );
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(subject_of(&v), "commit 15");
    }
}

/// A step that ran into its time limit answers for that limit only: run again with a longer
/// `--timeout`, it is evaluated again (not answered from the store), while a run with the
/// same limit reuses it. A time limit of zero is refused.
#[test]
fn a_step_that_timed_out_is_not_reused_under_a_longer_timeout() {
    let (tmp, root) = state_history(4, 3);
    // Slow on the good commits: the good end takes 0.6 s.
    let script = "grep -q fine state.txt || exit 1; sleep 0.6";
    let args = |t: &'static str| {
        [
            "--good",
            "HEAD~3",
            "--bad",
            "HEAD",
            "--script",
            script,
            "--timeout",
            t,
        ]
    };
    let (code, _, stderr) = bisect(tmp.path(), &root, &args("200ms"));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("is bad (timeout: the script ran longer than 200ms)"),
        "{stderr}"
    );
    assert!(!stderr.contains("[from the store]"), "{stderr}");
    // The same limit: answered from the store.
    let (code, _, stderr) = bisect(tmp.path(), &root, &args("200ms"));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("longer than 200ms) [from the store]"),
        "{stderr}"
    );
    let steps = |v: &Value| v["steps"].as_array().cloned().unwrap_or_default();
    // A longer limit: evaluated again, and the culprit found.
    let (code, v, stderr) = bisect(tmp.path(), &root, &args("30s"));
    assert_eq!(code, 0, "{v}{stderr}");
    assert_eq!(subject_of(&v), "commit 3");
    assert!(steps(&v).iter().all(|s| s["cached"] != true), "{v}");
    let (code, _, stderr) = bisect(tmp.path(), &root, &args("0s"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("a time limit of zero"), "{stderr}");
}
