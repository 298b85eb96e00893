//! Many GPUs, many machines: performance bisections over several devices judged within
//! each device, steps run as jobs of a real Slurm cluster, and records shared through a
//! git remote.

mod common;

use std::path::Path;

use common::{git, repo_with, repro};
use serde_json::Value;

/// A history of `n` commits; `extra(i)` are the files commit i (1-based) writes.
fn history(
    n: usize,
    extra: impl Fn(usize) -> Vec<(String, String)>,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, root) = repo_with(&[("README", "a project\n")]);
    for i in 1..=n {
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

fn bisect(tmp: &Path, root: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(["bisect", "--json"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A noisy "time" from base.txt; GPU 1 (`$REPRO_DEVICE`) is a card 8% slower than GPU 0,
/// as two cards of one model with different clocks can be.
const TWO_CARDS: &str = "r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' '); f=1; [ \"$REPRO_DEVICE\" = 1 ] && f=1.08; awk -v base=$(cat base.txt) -v f=$f -v r=$r 'BEGIN { printf \"{\\\"t\\\": %.4f}\\n\", base * f * (1 + (r / 65535 - 0.5) * 0.01) }'";

#[test]
fn two_devices_judge_each_against_its_own_baseline() {
    let bench = |back: &str| {
        vec![
            "--good".to_string(),
            back.to_string(),
            "--bad".into(),
            "HEAD".into(),
            "--mode".into(),
            "bench".into(),
            "--command".into(),
            TWO_CARDS.into(),
            "--metric".into(),
            "json:t".into(),
            "--threshold".into(),
            "5%".into(),
            "--devices".into(),
            "0,1".into(),
        ]
    };
    // A/A: nothing changes, but the second card is slower. Compared across cards the bad
    // end would be 8% slower; each card against itself finds nothing.
    let (tmp, root) = history(8, |_| vec![("base.txt".into(), "100\n".into())]);
    let args = bench("HEAD~7");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, stderr) = bisect(tmp.path(), &root, &args);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("the bad end") && stderr.contains("is not bad"),
        "{stderr}"
    );
    // The same history measured on GPU 1 against a baseline from GPU 0 is what the
    // comparison must never be: the store holds a good end for each card.
    let records: Vec<Value> = std::fs::read_dir(root.join(".repro/bisect"))
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    let good_end = git(&root, &["rev-parse", "HEAD~7"]);
    let devices: std::collections::BTreeSet<u64> = records
        .iter()
        .filter(|r| r["commit"] == good_end.as_str())
        .map(|r| {
            r["question"]["question"]["settings"]["device"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(devices, [0, 1].into(), "{records:?}");

    // A real 10% slowdown at commit 9 is found, on both cards, and re-checked on one.
    let (tmp, root) = history(16, |i| {
        vec![(
            "base.txt".into(),
            if i >= 9 { "110\n" } else { "100\n" }.into(),
        )]
    });
    let args = bench("HEAD~15");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, v, stderr) = bisect(tmp.path(), &root, &args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["culprit"]["subject"], "commit 9", "{v}");
    let culprit = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "commit 9")
        .unwrap();
    let detail = culprit["detail"].as_str().unwrap();
    assert!(
        detail.contains("GPU 0: bad") && detail.contains("GPU 1: bad"),
        "{detail}"
    );
    let ratio = culprit["ratio"][0].as_f64().unwrap();
    assert!((ratio - 1.10).abs() < 0.01, "{ratio}");
    assert_eq!(v["recheck"]["confirmed"], true, "{v}");
}
