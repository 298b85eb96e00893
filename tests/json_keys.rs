//! One spelling of JSON keys across every command: every key repro writes in `--json`
//! output and in the records it stores is kebab-case (`shared-mem`, `duration-ms`), except
//! inside maps whose keys are the user's data (parameters, file paths, output names,
//! environment variables) and inside documents another tool defines (hyperfine's export).
//! Needs no GPU and no NVRTC: command builds, command benches and a script bisection make
//! a record of each kind.

use crate::common;

use std::path::Path;

use common::{git, repo_with, repro};
use serde_json::Value;

const RECIPE: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"mkdir -p out && cat src.txt > out/a.bin\"]\ninputs = [\"src.txt\"]\noutputs = [\"out/a.bin\"]\n";

/// Keys whose values are maps of names that are data, not repro's keys: parameters, file
/// paths, output names, environment variables (`env`), and the probes of a fingerprint named
/// by the tool they ran (`tool:g++`).
const USER_MAPS: [&str; 7] = [
    "params",
    "files",
    "outputs",
    "parameters",
    "env",
    "probe-ms",
    // A profile's metrics, named as Nsight Compute names them.
    "metrics",
];

/// Every key (with its path) that is not kebab-case.
fn offending(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let here = format!("{path}.{k}");
                let kebab = k
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
                if !kebab {
                    out.push(here.clone());
                }
                if !USER_MAPS.contains(&k.as_str()) {
                    offending(x, &here, out);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                offending(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn json(tmp: &Path, root: &Path, args: &[&str]) -> Value {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn every_command_and_record_spells_its_keys_in_kebab_case() {
    let (tmp, root) = repo_with(&[("src.txt", "one\n"), ("recipes/cmd.toml", RECIPE)]);
    std::fs::write(root.join("src.txt"), "two\n").unwrap();
    git(&root, &["commit", "-qam", "two"]);
    let mut docs: Vec<(String, Value)> = Vec::new();
    let mut run = |args: &[&str]| {
        let v = json(tmp.path(), &root, args);
        docs.push((args.join(" "), v.clone()));
        v
    };
    run(&["env", "capture"]);
    run(&["build", "cmd"]);
    let bench = run(&["bench", "--command", "true", "--name", "t", "--runs", "3"]);
    let id = bench["results"][0]["id"].as_str().unwrap().to_string();
    run(&["bench", "--command", "true", "--name", "t", "--runs", "3"]);
    let log = run(&["log"]);
    let ids: Vec<String> = log["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    let script = root.join("check.sh");
    std::fs::write(&script, "grep -q one src.txt\n").unwrap();
    let report = run(&[
        "bisect",
        "--good",
        "HEAD~1",
        "--bad",
        "HEAD",
        "--script",
        &format!("sh {}", script.display()),
    ]);
    assert_eq!(report["outcome"]["kind"], "first-bad", "{report}");
    run(&["compare", &id[..8], &id[..8]]);
    for i in ids {
        run(&["show", &i]);
    }
    run(&["store", "verify"]);
    run(&["store", "gc"]);
    run(&["toolchain", "list"]);
    // What the store keeps: every record file of every kind.
    for dir in ["builds", "results", "bisections", "bisect"] {
        for e in std::fs::read_dir(root.join(".repro").join(dir))
            .unwrap()
            .flatten()
        {
            let v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
            docs.push((format!("{dir}/{}", e.file_name().to_string_lossy()), v));
        }
    }
    // A recipe result as a GPU writes it (the record types round-trip these samples exactly:
    // see src/records.rs).
    for e in std::fs::read_dir(common::crate_dir().join("tests/fixtures/records"))
        .unwrap()
        .flatten()
    {
        let v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        docs.push((format!("fixture {}", e.file_name().to_string_lossy()), v));
    }
    assert!(docs.len() > 12, "{} documents", docs.len());
    let mut bad = Vec::new();
    for (what, v) in &docs {
        let mut out = Vec::new();
        offending(v, "", &mut out);
        bad.extend(out.into_iter().map(|k| format!("{what}: {k}")));
    }
    assert!(
        bad.is_empty(),
        "keys not in kebab-case:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_checker_catches_a_snake_case_key() {
    let mut out = Vec::new();
    offending(
        &serde_json::json!({"launch": {"shared_mem": 0}, "params": {"seq_len": 4}}),
        "",
        &mut out,
    );
    assert_eq!(out, [".launch.shared_mem"]);
}
