//! Issue 14, finding 4 and the acceptance's concurrency test: eight processes build at
//! once, repeatedly, while `store gc` and `store verify` run in loops beside them. No build
//! may fail, no verify may report a problem, and every record must be whole afterwards.
//! `REPRO_TEST_CONCURRENCY_ROUNDS` sets the number of rounds (default 20).

mod common;

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
