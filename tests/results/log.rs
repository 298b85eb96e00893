//! `repro log` lists every kind of record, newest first, with filters; `repro show` opens
//! any of them by a prefix of its ID. Needs no GPU and no NVRTC: a command build, a command
//! bench and a script bisection make one record of each kind.

use crate::common;

use common::{git, repo_with, repro, run_in};
use predicates::prelude::*;
use serde_json::Value;

const RECIPE: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"mkdir -p out && cat src.txt > out/a.bin\"]\ninputs = [\"src.txt\"]\noutputs = [\"out/a.bin\"]\n";

fn json(tmp: &std::path::Path, root: &std::path::Path, args: &[&str]) -> Value {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn log_lists_builds_results_and_bisections_and_show_opens_each() {
    let (tmp, root) = repo_with(&[
        ("src.txt", "one\n"),
        ("recipes/cmd.toml", RECIPE),
        ("ok.sh", "exit 0\n"),
    ]);
    let first = git(&root, &["rev-parse", "HEAD"]);
    for i in 0..3 {
        std::fs::write(
            root.join("ok.sh"),
            if i < 1 { "exit 0\n" } else { "exit 1\n" },
        )
        .unwrap();
        std::fs::write(root.join("n.txt"), format!("{i}\n")).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    let head = git(&root, &["rev-parse", "HEAD"]);
    let t = tmp.path();
    json(t, &root, &["build", "cmd"]);
    json(
        t,
        &root,
        &[
            "bench",
            "--command",
            "true",
            "--name",
            "noop",
            "--runs",
            "3",
        ],
    );
    let b = json(
        t,
        &root,
        &[
            "bisect", "--good", &first, "--bad", "HEAD", "--script", "sh ok.sh",
        ],
    );
    let bisection_id = b["id"].as_str().unwrap().to_string();

    let all = json(t, &root, &["log"]);
    assert_eq!(all["schema"], 2);
    let recs = all["records"].as_array().unwrap();
    let kinds: Vec<&str> = recs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    // Newest first: the bisection, the result, the build.
    assert_eq!(kinds, ["bisection", "result", "build"], "{all}");
    assert_eq!(recs[0]["id"], bisection_id.as_str());
    assert_eq!(recs[0]["status"], "found");
    assert_eq!(recs[0]["name"], "sh ok.sh");
    assert_eq!(recs[2]["name"], "cmd");
    assert_eq!(recs[2]["status"], "ok");
    assert_eq!(recs[2]["commit"], head.as_str());

    // Filters: by kind (one or several), by recipe, by commit.
    let only = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["log"];
        a.extend_from_slice(args);
        json(t, &root, &a)["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(only(&["--kind", "build"]), ["build"]);
    assert_eq!(only(&["--kind", "build,bisection"]), ["bisection", "build"]);
    assert_eq!(only(&["--recipe", "noop"]), ["result"]);
    assert_eq!(only(&["--commit", &head[..8]]), ["result", "build"]);
    assert!(only(&["--commit", "0000000"]).is_empty());

    // The human listing has one row per record, with its kind.
    repro(t)
        .arg("-C")
        .arg(&root)
        .arg("log")
        .assert()
        .success()
        .stdout(
            predicate::str::is_match("(?m)^KIND +ID +DATE +NAME +STATUS +COMMIT +SUMMARY").unwrap(),
        )
        .stdout(predicate::str::is_match("(?m)^build +[0-9a-f]{12} ").unwrap())
        .stdout(predicate::str::is_match("(?m)^bisection +[0-9a-f]{12} ").unwrap());

    // `show` opens every kind by a prefix of its ID.
    for r in recs {
        let id = r["id"].as_str().unwrap();
        let shown = json(t, &root, &["show", &id[..10]]);
        assert_eq!(shown["id"], id);
        assert_eq!(shown["kind"], r["kind"]);
        repro(t)
            .arg("-C")
            .arg(&root)
            .args(["show", &id[..10]])
            .assert()
            .success()
            .stdout(predicate::str::contains(&id[..12]));
    }
    repro(t)
        .arg("-C")
        .arg(&root)
        .args(["show", &recs[2]["id"].as_str().unwrap()[..8]])
        .assert()
        .stdout(predicate::str::contains("output out/a.bin"));
    repro(t)
        .arg("-C")
        .arg(&root)
        .args(["show", &bisection_id[..8]])
        .assert()
        .stdout(predicate::str::contains("first bad commit"))
        .stdout(predicate::str::contains("commit 1"));
    // An unknown kind is a usage error.
    repro(t)
        .arg("-C")
        .arg(&root)
        .args(["log", "--kind", "nope"])
        .assert()
        .code(2);
}

#[test]
fn records_from_elsewhere_cannot_write_to_the_terminal() {
    // A toolchain build bisection record as a stranger's store could hold it, with
    // terminal escapes in every text it lists; `log` and `show` print them escaped.
    let (tmp, root) = repo_with(&[("src.txt", "one\n")]);
    let esc = "\u{1b}[2J\u{1b}]0;owned\u{7}";
    let key = "c".repeat(64);
    let rec = serde_json::json!({
        "schema": 1, "kind": "toolchain-bisection", "recipe": format!("va{esc}"), "mode": "build",
        "family": format!("nvrtc{esc}"), "releases": [format!("12.8{esc}"), "13.0.88"],
        "releases-from": format!("the wheel directory {esc}"), "commit": null,
        "answers": [{"target": format!("sm_70{esc}"), "first-bad": format!("13.0.88{esc}"),
                     "last-good": "12.8", "undecided": [], "unchanged": format!("x{esc}")}],
        "steps": [{"release": format!("13.0.88{esc}"), "target": "sm_70", "verdict": "bad",
                   "key": null, "cached": false, "detail": format!("error{esc}")}],
        "wheels": {}, "created-at": "2026-01-01T00:00:00.000Z", "key": key
    });
    let dir = root.join(".repro/bisections");
    std::fs::create_dir_all(&dir).unwrap();
    // Sealed and marked as repro writes them: a store from elsewhere, hostile in content.
    std::fs::write(
        root.join(".repro/store.json"),
        r#"{"kind":"repro-store","schema":1}"#,
    )
    .unwrap();
    std::fs::write(dir.join(format!("{key}.json")), repro::store::seal(&rec)).unwrap();
    for args in [&["log"][..], &["show", "cccccccc"][..]] {
        let (code, text, err) = run_in(tmp.path(), &root, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(text.contains("sm_70"), "{args:?}: {text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{args:?}: {text:?}"
        );
    }
}
