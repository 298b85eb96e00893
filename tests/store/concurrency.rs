//! Issue 14, finding 4 and the acceptance's concurrency test: eight processes build at
//! once, repeatedly, while `store gc` and `store verify` run in loops beside them. No build
//! may fail, no verify may report a problem, and every record must be whole afterwards.
//! `REPRO_TEST_CONCURRENCY_ROUNDS` sets the number of rounds (default 20).

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use common::{repo_with, repro};
use serde_json::Value;

const PROCESSES: usize = 8;

fn recipe(i: usize) -> String {
    format!(
        "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"mkdir -p out && cat src/k{i}.txt src/k{i}.txt > out/r{i}.bin\"]\ninputs = [\"src/k{i}.txt\"]\noutputs = [\"out/r{i}.bin\"]\n"
    )
}

fn run(cache: &Path, root: &Path, args: &[&str]) -> std::process::Output {
    repro(cache)
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn eight_builders_with_gc_and_verify_running_never_fail_or_tear() {
    let rounds: usize = std::env::var("REPRO_TEST_CONCURRENCY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let mut files: Vec<(String, String)> = (0..PROCESSES)
        .flat_map(|i| {
            [
                (format!("recipes/r{i}.toml"), recipe(i)),
                (format!("src/k{i}.txt"), format!("round 0 of {i}\n")),
            ]
        })
        .collect();
    files.push((".gitignore".into(), "out/\n".into()));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let (tmp, root) = repo_with(&refs);
    let cache = tmp.path();
    let (gcs, verifies) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Instant::now();
    for round in 0..rounds {
        // New contents every round: every build writes new objects that no record references
        // yet, which is exactly what an unlocked gc deletes.
        for i in 0..PROCESSES {
            std::fs::write(
                root.join(format!("src/k{i}.txt")),
                format!("round {round} of {i}\n"),
            )
            .unwrap();
        }
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let gc = s.spawn(|| {
                let mut failures = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    let out = run(cache, &root, &["store", "gc"]);
                    gcs.fetch_add(1, Ordering::SeqCst);
                    if !out.status.success() {
                        failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                    }
                }
                failures
            });
            let verify = s.spawn(|| {
                let mut failures = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    let out = run(cache, &root, &["store", "verify"]);
                    verifies.fetch_add(1, Ordering::SeqCst);
                    if !out.status.success() {
                        failures.push(String::from_utf8_lossy(&out.stdout).into_owned());
                    }
                }
                failures
            });
            let builders: Vec<_> = (0..PROCESSES)
                .map(|i| {
                    let root = &root;
                    s.spawn(move || run(cache, root, &["build", "--json", &format!("r{i}")]))
                })
                .collect();
            let outs: Vec<_> = builders.into_iter().map(|b| b.join().unwrap()).collect();
            done.store(true, Ordering::SeqCst);
            for (i, out) in outs.iter().enumerate() {
                assert!(
                    out.status.success(),
                    "round {round}: build r{i} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                let key = v["builds"][0]["key"].as_str().unwrap();
                let rec = std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap();
                let rec: Value = serde_json::from_slice(&rec).expect("a whole record");
                assert_eq!(rec["status"], "ok");
            }
            let gc_failures = gc.join().unwrap();
            assert!(
                gc_failures.is_empty(),
                "round {round}: gc failed: {gc_failures:?}"
            );
            let verify_failures = verify.join().unwrap();
            assert!(
                verify_failures.is_empty(),
                "round {round}: verify failed: {verify_failures:?}"
            );
        });
        let out = run(cache, &root, &["store", "verify"]);
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    eprintln!(
        "{rounds} rounds of {PROCESSES} concurrent builds; {} gc and {} verify runs beside them; {:.1} s",
        gcs.load(Ordering::SeqCst),
        verifies.load(Ordering::SeqCst),
        start.elapsed().as_secs_f64()
    );
}

/// Issue 26, item 5's acceptance: four `repro bench --command` loops, a bisection loop and
/// a `store gc` loop share one store. Every result a bench reports must be in the store
/// afterwards (0 lost), every gc must succeed (0 failed), and every bisection must name the
/// right commit (a step whose scratch tree gc removed would have been stored as an answer,
/// and answered wrongly "from the store" ever after). `REPRO_TEST_CONCURRENCY_ROUNDS` sets
/// the number of bench runs per loop (default 6).
#[test]
fn bench_bisect_and_gc_loops_share_a_store_losing_nothing() {
    const BENCHES: usize = 4;
    let rounds: usize = std::env::var("REPRO_TEST_CONCURRENCY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let (tmp, root) = repo_with(&[("state.txt", "fine\n")]);
    for i in 1..=6 {
        let state = if i >= 4 { "broken\n" } else { "fine\n" };
        std::fs::write(root.join("state.txt"), state).unwrap();
        std::fs::write(root.join("n.txt"), format!("{i}\n")).unwrap();
        common::git(&root, &["add", "-A"]);
        common::git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    let cache = tmp.path();
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let (ids, gc_failures, bisections) = std::thread::scope(|s| {
        let gc = s.spawn(|| {
            let (mut runs, mut failures) = (0usize, Vec::new());
            while !done.load(Ordering::SeqCst) {
                let out = run(cache, &root, &["store", "gc"]);
                runs += 1;
                if !out.status.success() {
                    failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                }
            }
            (runs, failures)
        });
        let bisect = s.spawn(|| {
            let mut answers = Vec::new();
            let mut i = 0;
            while !done.load(Ordering::SeqCst) {
                i += 1;
                // A new script each time: every step is evaluated, none comes from the store.
                let script = format!("sleep 0.05; : round {i}; grep -q fine state.txt");
                let out = run(
                    cache,
                    &root,
                    &[
                        "bisect", "--json", "--good", "HEAD~6", "--bad", "HEAD", "--script",
                        &script,
                    ],
                );
                answers.push((
                    out.status.code(),
                    serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                ));
            }
            answers
        });
        let benches: Vec<_> = (0..BENCHES)
            .map(|b| {
                let root = &root;
                s.spawn(move || {
                    let mut ids = Vec::new();
                    for r in 0..rounds {
                        let cmd = format!("echo '{{\"ms\": {}.5}}'", 10 + b * 100 + r);
                        let out = run(
                            cache,
                            root,
                            &[
                                "bench",
                                "--json",
                                "--command",
                                &cmd,
                                "--name",
                                &format!("b{b}"),
                                "--metric",
                                "json:ms",
                                "--unit",
                                "ms",
                                "--runs",
                                "3",
                            ],
                        );
                        assert!(
                            out.status.success(),
                            "bench b{b} round {r} failed: {}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                        ids.push(v["results"][0]["id"].as_str().unwrap().to_string());
                    }
                    ids
                })
            })
            .collect();
        let ids: Vec<String> = benches
            .into_iter()
            .flat_map(|b| b.join().unwrap())
            .collect();
        // The bisection running now finishes before its loop stops: at least one ran.
        done.store(true, Ordering::SeqCst);
        (ids, gc.join().unwrap(), bisect.join().unwrap())
    });
    let lost: Vec<&String> = ids
        .iter()
        .filter(|id| !root.join(format!(".repro/results/{id}.json")).is_file())
        .collect();
    assert_eq!(ids.len(), BENCHES * rounds);
    assert!(lost.is_empty(), "{} results lost: {lost:?}", lost.len());
    assert!(gc_failures.1.is_empty(), "gc failed: {:?}", gc_failures.1);
    assert!(!bisections.is_empty());
    for (code, v, stderr) in &bisections {
        assert_eq!(*code, Some(0), "a bisection failed: {stderr}");
        assert_eq!(
            v["culprit"]["subject"].as_str(),
            Some("commit 4"),
            "a bisection named the wrong commit: {v}"
        );
    }
    let out = run(cache, &root, &["store", "verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    eprintln!(
        "{} results from {BENCHES} bench loops, {} bisections and {} gc runs beside them: 0 lost, 0 failed gc; {:.1} s",
        ids.len(),
        bisections.len(),
        gc_failures.0,
        start.elapsed().as_secs_f64()
    );
}
