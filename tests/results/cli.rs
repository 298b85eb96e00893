//! `repro show`, `repro compare` and `repro log` over records a GPU machine writes: the
//! recipe result kept under `tests/fixtures/records/` (launch, settings, throughput, clocks),
//! filed in a store through the store's own API, and variants of it (a failed output check,
//! another unit, one sample, another machine). Everything here runs without a GPU.

use crate::common;

use std::path::Path;

use common::{repo_with, repro};
use repro::keys::key_of;
use repro::store::Store;
use serde_json::{Value, json};

fn fixture() -> Value {
    serde_json::from_str(include_str!("../fixtures/records/result-recipe.json")).unwrap()
}

/// Files `rec` in the store at `root/.repro` under the ID its content hashes to.
fn file(root: &Path, rec: &Value) -> String {
    let id = key_of(rec);
    Store::at(root.join(".repro"))
        .put_record("results", &id, rec)
        .unwrap();
    id
}

fn run(tmp: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = repro(tmp).arg("-C").arg(root).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value column of `show`'s row `key` (rows are `key  value`, padded).
fn row<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| {
            l.strip_prefix(key)
                .filter(|rest| rest.starts_with("  "))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no row {key}:\n{out}"))
}

#[test]
fn show_prints_every_part_of_a_recipe_result() {
    let (tmp, root) = repo_with(&[]);
    let mut rec = fixture();
    rec["throttled"] = json!(true);
    rec["sm-clock-mhz"] = json!([1980, 1755, 1980]);
    rec["check"] = json!([{
        "name": "c", "elements": 1048576, "mismatches": 3, "unwritten": 0,
        "max-abs-err": 0.5, "max-rel-err": 0.25, "atol": 0.5, "rtol": 0.25,
        "first-mismatch": null
    }]);
    let id = file(&root, &rec);
    let (code, out, err) = run(tmp.path(), &root, &["show", &id[..8]]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(row(&out, "id"), id);
    assert_eq!(row(&out, "name"), "vector_add");
    assert_eq!(row(&out, "recipe-path"), "recipes/vector_add.toml");
    assert_eq!(row(&out, "machine"), "no GPU");
    assert_eq!(row(&out, "artifact"), "ab".repeat(32));
    assert_eq!(row(&out, "params"), "n=1048576");
    assert_eq!(
        row(&out, "launch"),
        "vector_add grid [4096,1,1] block [256,1,1] shared 0 B"
    );
    assert_eq!(
        row(&out, "settings"),
        "mode cold, max noise 0.5%, warm-up 100.0 ms, device 0"
    );
    assert!(
        row(&out, "median").ends_with("(95% bootstrap interval)"),
        "{out}"
    );
    assert_eq!(
        row(&out, "samples"),
        "3 (0 outliers by modified z-score; relative noise 1.012%)"
    );
    assert_eq!(row(&out, "GB/s"), "1180.20");
    assert!(!out.contains("TFLOP/s"), "no TFLOP/s was recorded: {out}");
    assert_eq!(
        row(&out, "SM clock"),
        "1980 MHz before, 1755 after, max 1980 (THROTTLED)"
    );
    assert_eq!(
        row(&out, "check c"),
        "3 of 1048576 outside atol 0.5 + rtol 0.25; max abs err 5.000e-1, max rel err 2.500e-1"
    );
    // A command bench has none of these rows.
    assert!(!out.contains("\ncommand "), "{out}");

    let (code, out, _) = run(tmp.path(), &root, &["show", "--json", &id[..8]]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["id"], json!(id));
    assert_eq!(v["kind"], "result");
    assert_eq!(v["launch"], rec["launch"]);

    // Not throttled: the clock row says nothing of it.
    let mut calm = fixture();
    calm["throttled"] = json!(false);
    calm["machine"] = json!("calm box");
    let calm = file(&root, &calm);
    let (_, out, _) = run(tmp.path(), &root, &["show", &calm[..8]]);
    assert_eq!(
        row(&out, "SM clock"),
        "1980 MHz before, 1980 after, max 1980"
    );
}

#[test]
fn compare_refuses_what_it_cannot_compare_and_warns_about_what_differs() {
    let (tmp, root) = repo_with(&[]);
    let a = file(&root, &fixture());
    let mut ms = fixture();
    ms["unit"] = json!("ms");
    let ms = file(&root, &ms);
    let (code, _, err) = run(tmp.path(), &root, &["compare", &a[..8], &ms[..8]]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the results measure different things (\"us\" vs \"ms\")"),
        "{err}"
    );

    let mut one = fixture();
    one["samples"] = json!([10.6]);
    one["summary"] = json!(repro::bench::summarize(&[10.6]));
    let one = file(&root, &one);
    let (code, _, err) = run(tmp.path(), &root, &["compare", &one[..8], &a[..8]]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("both results need at least two samples to be compared"),
        "{err}"
    );

    // Another experiment on another machine compares, with both warnings.
    let mut other = fixture();
    other["name"] = json!("other_kernel");
    other["key"] = json!("cd".repeat(32));
    other["machine"] = json!("H200 box");
    let other = file(&root, &other);
    let (code, out, err) = run(tmp.path(), &root, &["compare", &a[..8], &other[..8]]);
    assert_eq!(code, 0, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("different experiments"), "{all}");
    assert!(all.contains("H200 box"), "{all}");

    // An ID that names nothing is a usage error that says where IDs come from.
    let (code, _, err) = run(tmp.path(), &root, &["compare", &a[..8], "ffffffff"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("repro log"), "{err}");
}

#[test]
fn log_says_when_nothing_is_recorded_and_filters_by_machine() {
    let (tmp, root) = repo_with(&[]);
    let (code, out, _) = run(tmp.path(), &root, &["log"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "nothing recorded (`repro build`, `repro bench` and `repro bisect` record)\n"
    );
    let (code, out, _) = run(tmp.path(), &root, &["-q", "log"]);
    assert_eq!((code, out.as_str()), (0, ""));

    let here = file(&root, &fixture());
    let mut there = fixture();
    there["machine"] = json!("H200 box");
    let there = file(&root, &there);
    let (code, out, _) = run(tmp.path(), &root, &["log", "--machine", "h200"]);
    assert_eq!(code, 0);
    assert!(out.contains(&there[..12]), "{out}");
    assert!(!out.contains(&here[..12]), "{out}");
    let (_, out, _) = run(tmp.path(), &root, &["log", "--json", "--machine", "NO gpu"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [here.as_str()]);
}

#[test]
fn show_of_a_build_prints_the_compilers_log() {
    let (tmp, root) = repo_with(&[
        (
            "recipes/cmd.toml",
            "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"echo 'warning: narrowing in k.cu' >&2; cp src/k.txt out.bin\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n",
        ),
        ("src/k.txt", "kernel bytes\n"),
        (".gitignore", "out.bin\n"),
    ]);
    let (code, out, err) = run(tmp.path(), &root, &["build", "--json", "cmd"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let key = v["builds"][0]["key"].as_str().unwrap().to_string();
    let (code, out, err) = run(tmp.path(), &root, &["show", &key[..10]]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("compiler log:\n  | warning: narrowing in k.cu\n"),
        "{out}"
    );
}

#[test]
fn an_id_prefix_two_results_share_is_ambiguous_and_names_both() {
    let (tmp, root) = repo_with(&[]);
    // Results that differ only in a parameter, until two IDs share their first 4 digits
    // (a few hundred tries: 65,536 prefixes).
    let mut seen = std::collections::BTreeMap::new();
    let (a, b) = (1..100_000)
        .find_map(|n| {
            let mut r = fixture();
            r["params"] = json!({ "n": n });
            let id = key_of(&r);
            seen.insert(id[..4].to_string(), r.clone())
                .map(|other| (other, r))
        })
        .unwrap();
    let (ida, idb) = (file(&root, &a), file(&root, &b));
    let prefix = &ida[..4];
    assert_eq!(&idb[..4], prefix);
    let (code, _, err) = run(tmp.path(), &root, &["compare", prefix, &ida[..12]]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{prefix} is ambiguous: 2 results match")),
        "{err}"
    );
    assert!(
        err.contains(&ida[..12]) && err.contains(&idb[..12]),
        "{err}"
    );
    let (code, _, err) = run(tmp.path(), &root, &["show", prefix]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("result {}", &ida[..12])), "{err}");
    assert!(err.contains(&format!("result {}", &idb[..12])), "{err}");
    // Five digits tell them apart (unless they share those too).
    if ida[..5] != idb[..5] {
        let (code, out, err) = run(tmp.path(), &root, &["compare", &ida[..5], &idb[..5]]);
        assert_eq!(code, 0, "{out}{err}");
    }
    // Not hex, or too short, is not an ID at all.
    for bad in ["zz12", "ab1"] {
        let (code, _, err) = run(tmp.path(), &root, &["compare", bad, &ida[..12]]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!(
                "`{bad}` is not a result ID (at least 4 hex digits)"
            )),
            "{err}"
        );
    }
}

/// An ID that names nothing (or is no ID) is the lookup's own typed error, with its exit
/// code (2) and hint, whichever command met it (issue #30: these were re-wrapped as strings).
#[test]
fn an_unknown_id_is_a_usage_error_with_a_hint_in_show_and_compare() {
    let (tmp, root) = repo_with(&[]);
    file(&root, &fixture());
    for (args, message, hint) in [
        (
            &["show", "abcd0000"][..],
            "error: no record with ID abcd0000",
            "hint: `repro log` lists every record with its ID",
        ),
        (
            &["show", "zz"][..],
            "error: `zz` is not a record ID (at least 4 hex digits)",
            "hint: `repro log` lists every record with its ID",
        ),
        (
            &["compare", "abcd0000", "abcd1111"][..],
            "error: no result with ID abcd0000",
            "hint: `repro log` lists results with their IDs",
        ),
    ] {
        let (code, _, err) = run(tmp.path(), &root, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(err.contains(hint), "{args:?}: {err}");
    }
}

/// A result taken in bursts: `show` says its median is the mean of the bursts' medians,
/// `compare` and the hyperfine-style export take that median, and a bundle of one stored
/// with whole-number samples (its ID the hash of that JSON) verifies: the stored JSON goes
/// into the bundle as it is.
#[test]
fn results_in_bursts_are_shown_compared_exported_and_bundled_by_their_burst_median() {
    let (tmp, root) = repo_with(&[("README", "x\n")]);
    let head = common::git(&root, &["rev-parse", "HEAD"]);
    let bursts: Value =
        serde_json::from_str(include_str!("../fixtures/records/result-bursts.json")).unwrap();
    let a = file(&root, &bursts);
    // The same machine and experiment, each sample 2% slower.
    let mut slower = bursts.clone();
    let scaled: Vec<f64> = bursts["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() * 1.02)
        .collect();
    slower["samples"] = json!(scaled);
    slower["summary"] =
        serde_json::to_value(repro::bench::summarize_bursts(&scaled, &[3, 6]).unwrap()).unwrap();
    let b = file(&root, &slower);
    let (code, out, err) = run(tmp.path(), &root, &["show", &a]);
    assert_eq!(code, 0, "{err}");
    assert!(
        row(&out, "median")
            .contains("the mean of 3 bursts' medians, which begin at samples 0, 3, 6"),
        "{out}"
    );
    let export = tmp.path().join("x.json");
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &[
            "compare",
            &a,
            &b,
            "--json",
            "--export-json",
            export.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let ratio = v["comparison"]["ratio"].as_f64().unwrap();
    assert!((ratio - 1.02).abs() < 1e-9, "{v}");
    let x: Value = serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    let median = bursts["summary"]["median"].as_f64().unwrap();
    // hyperfine's `median` is in seconds: the burst median, not the pooled samples'.
    assert!(
        (x["results"][0]["median"].as_f64().unwrap() - median * 1e-6).abs() < 1e-15,
        "{x}"
    );
    // A record stored with whole-number samples bundles and verifies.
    let mut whole = fixture();
    whole["commit"] = json!(head.trim());
    whole["samples"] = json!([3, 4, 5]);
    whole["summary"] =
        serde_json::to_value(repro::bench::summarize_bursts(&[3.0, 4.0, 5.0], &[]).unwrap())
            .unwrap();
    let id = file(&root, &whole);
    let bundle = tmp.path().join("b.tar.zst");
    let (code, _, err) = run(
        tmp.path(),
        &root,
        &["bundle", "create", &id, "-o", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &["bundle", "verify", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}{err}");
}
