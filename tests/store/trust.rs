//! Issue 26 ("trust boundaries, round two"), items 2-5 and 9: what a store, a record or a
//! bundle from elsewhere can still do. Each test here failed on main before the fix: gc
//! deleting what is not its own, a store that is a symbolic link, record fields used as
//! paths (a panic, a read outside the store), unsealed records trusted, scratch trees judged
//! by PID, the store's `.gitignore` missing, `compare` exiting 70 on samples of 0.

use crate::common;

use std::path::Path;

use common::{git, repo_with, repro};
use serde_json::{Value, json};

const RECIPE: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"mkdir -p out && cat src/k.txt > out/k.bin\"]\ninputs = [\"src/k.txt\"]\noutputs = [\"out/k.bin\"]\n";

fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    repo_with(&[
        ("recipes/k.toml", RECIPE),
        ("src/k.txt", "kernel\n"),
        (".gitignore", "out/\n"),
    ])
}

fn run(cache: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Builds `k` and returns its build key and the record's path.
fn build(cache: &Path, root: &Path) -> (Value, String, std::path::PathBuf) {
    let (code, out, err) = run(cache, root, &["build", "--json", "k"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let key = v["builds"][0]["key"].as_str().unwrap().to_string();
    let path = root.join(format!(".repro/builds/{key}.json"));
    (v["builds"][0].clone(), key, path)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// The sample command result of tests/fixtures.
fn command_result() -> Value {
    serde_json::from_str(include_str!("../fixtures/records/result-command.json")).unwrap()
}

/// Files `rec` as a result in the store of `root`, under the ID its content hashes to.
fn put_result(root: &Path, rec: &Value) -> String {
    let id = repro::keys::key_of(rec);
    repro::store::Store::at(root.join(".repro"))
        .put_record("results", &id, rec)
        .unwrap();
    id
}

/// Writes a record as the store files it (sealed), or without its seal.
fn write_record(path: &Path, mut rec: Value, sealed: bool) {
    rec.as_object_mut().unwrap().remove("record-sha256");
    let text = if sealed {
        repro::store::seal(&rec)
    } else {
        serde_json::to_string_pretty(&rec).unwrap()
    };
    std::fs::write(path, text).unwrap();
}

#[test]
fn gc_of_a_directory_that_is_not_a_store_deletes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("D");
    let files = [
        "objects/ab/cdef.txt",
        "photos/index.json",
        "builds/0000000000000000000000000000000000000000000000000000000000000000.json",
    ];
    for f in files {
        std::fs::create_dir_all(d.join(f).parent().unwrap()).unwrap();
        std::fs::write(d.join(f), b"mine").unwrap();
    }
    for args in [&["store", "gc"][..], &["store", "verify"], &["log"]] {
        let out = repro(tmp.path())
            .arg("--store")
            .arg(&d)
            .args(args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("is not a repro store"), "{err}");
        assert!(err.contains("photos"), "{err}");
    }
    for f in files {
        assert_eq!(std::fs::read(d.join(f)).unwrap(), b"mine", "{f}");
    }
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 3, "nothing added: {names:?}");
}

#[test]
fn a_store_committed_as_a_symlink_is_refused() {
    let (tmp, root) = project();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("precious.txt"), b"x").unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join(".repro")).unwrap();
    git(&root, &["add", ".repro"]);
    git(&root, &["commit", "-q", "-m", "a store link"]);
    for args in [&["build", "k"][..], &["store", "gc"], &["store", "verify"]] {
        let (code, _, err) = run(tmp.path(), &root, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("is a symbolic link"), "{err}");
        assert!(err.contains("a store is never a link"), "{err}");
    }
    let names: Vec<_> = std::fs::read_dir(&elsewhere).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "nothing was written through the link");
}

#[test]
fn record_digests_that_are_not_keys_never_become_paths() {
    let (tmp, root) = project();
    let (_, _, path) = build(tmp.path(), &root);
    let original = read_json(&path);
    for (digest, sealed) in [
        ("a", false),
        ("a", true),
        ("../../../../../../etc/hostname", true),
        ("../../../../../../etc/hostname", false),
    ] {
        let mut rec = original.clone();
        let outputs = rec["outputs"].as_object_mut().unwrap();
        for o in outputs.values_mut() {
            o["sha256"] = json!(digest);
        }
        write_record(&path, rec, sealed);
        let (code, out, err) = run(tmp.path(), &root, &["build", "--json", "k"]);
        // Exit 101 (a panic in store.rs) before; now the build runs again.
        assert_eq!(code, 0, "{digest} sealed={sealed}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["builds"][0]["cached"], false, "{v}");
        let (code, _, _) = run(tmp.path(), &root, &["store", "verify"]);
        assert_eq!(code, 0, "the rebuild repaired it");
    }
    // verify names such a field, and gc keeps going.
    let mut rec = original.clone();
    for o in rec["outputs"].as_object_mut().unwrap().values_mut() {
        o["sha256"] = json!("../../../../../../etc/hostname");
    }
    write_record(&path, rec, true);
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("is not a store key"), "{out}");
    let (code, _, err) = run(tmp.path(), &root, &["store", "gc"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn an_unsealed_record_is_damaged_never_a_cache_hit() {
    let (tmp, root) = project();
    let (_, key, path) = build(tmp.path(), &root);
    let mut rec = read_json(&path);
    rec["log"] = json!("edited by someone");
    write_record(&path, rec, false);
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "verify reports it: {out}");
    assert!(out.contains("no record-sha256"), "{out}");
    let (code, out, err) = run(tmp.path(), &root, &["build", "--json", "k"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["builds"][0]["cached"], false, "{v}");
    assert_eq!(v["builds"][0]["key"], key);
    assert_ne!(read_json(&path)["log"], "edited by someone");
    assert!(root.join(".repro/quarantine/builds").is_dir());
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn every_record_kind_is_checked_against_its_seal() {
    let (tmp, root) = project();
    let store = repro::store::Store::at(root.join(".repro"));
    let step: Value = serde_json::from_str(include_str!("../fixtures/records/step.json")).unwrap();
    let report: Value =
        serde_json::from_str(include_str!("../fixtures/records/bisection.json")).unwrap();
    let exp = "5".repeat(64);
    let samples = json!({"schema": 1, "experiment": exp, "samples": [1.5, 2.5]});
    let cases = [
        (
            "bisect",
            step["key"].as_str().unwrap().to_string(),
            step.clone(),
        ),
        (
            "bisections",
            report["key"].as_str().unwrap().to_string(),
            report,
        ),
        ("bisect-samples", exp.clone(), samples),
    ];
    for (kind, key, rec) in &cases {
        store.put_record(kind, key, rec).unwrap();
        let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
        assert_eq!(code, 0, "{kind} as written: {out}");
        // One field edited, the seal kept; then the seal removed as well.
        let p = root.join(format!(".repro/{kind}/{key}.json"));
        let mut v = read_json(&p);
        v["schema"] = json!(1);
        v["edited"] = json!(true);
        std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
        let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
        assert_eq!(code, 1, "{kind}: {out}");
        assert!(
            out.contains(&format!("{kind}/{key}.json")) && out.contains("record-sha256"),
            "{out}"
        );
        v.as_object_mut().unwrap().remove("record-sha256");
        v.as_object_mut().unwrap().remove("edited");
        std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
        let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
        assert_eq!(code, 1, "{kind} unsealed: {out}");
        assert!(out.contains("no record-sha256"), "{out}");
        std::fs::remove_file(&p).unwrap();
    }
    // A sealed step filed under another key than its own says so.
    let other = "6".repeat(64);
    store.put_record("bisect", &other, &step).unwrap();
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("but it is filed as"), "{out}");
}

#[test]
fn a_live_scratch_tree_from_another_pid_namespace_survives_gc() {
    let (tmp, root) = project();
    build(tmp.path(), &root);
    // A tree as a bisection on another node (or in another PID namespace) makes it: its
    // PID does not exist here, but its lease is held.
    let scratch = root.join(".repro/tmp");
    let tree = scratch.join("bisect-4194305-abc123");
    std::fs::create_dir_all(tree.join("src")).unwrap();
    std::fs::write(tree.join("src/k.txt"), b"kernel").unwrap();
    let lease = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(scratch.join("bisect-4194305-abc123.lease"))
        .unwrap();
    fs4::fs_std::FileExt::lock_exclusive(&lease).unwrap();
    std::fs::write(
        scratch.join("bisect-4194305-abc123.lease"),
        b"host node7\npid 4194305\n",
    )
    .unwrap();
    let (code, _, err) = run(tmp.path(), &root, &["store", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert!(tree.join("src/k.txt").is_file(), "gc removed a live tree");
    // A bisection's own cleanup at its start leaves it too.
    let (code, _, err) = run(
        tmp.path(),
        &root,
        &[
            "bisect", "--good", "HEAD", "--bad", "HEAD", "--script", "true",
        ],
    );
    assert_ne!(code, 101, "{err}");
    assert!(
        tree.join("src/k.txt").is_file(),
        "a bisection's cleanup removed a live tree"
    );
    // Once its owner is gone (the lock released), the tree is stale.
    drop(lease);
    let (code, out, err) = run(tmp.path(), &root, &["store", "gc", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(!tree.exists(), "{out}");
    assert!(!scratch.join("bisect-4194305-abc123.lease").exists());
}

#[test]
fn every_command_that_opens_a_store_keeps_it_out_of_git_status() {
    for args in [&["store", "verify"][..], &["store", "gc"], &["build", "k"]] {
        let (tmp, root) = project();
        // A store that exists (as an early-killed command leaves it) but has no .gitignore.
        let (code, _, err) = run(tmp.path(), &root, args);
        assert!(code == 0, "{args:?}: {err}");
        let status = git(&root, &["status", "--porcelain", "--untracked-files=all"]);
        assert!(!status.contains(".repro"), "{args:?}: {status}");
        if root.join(".repro").exists() {
            assert!(root.join(".repro/.gitignore").is_file(), "{args:?}");
        }
    }
    // A store left by a bisection killed before it wrote anything but its scratch tree.
    let (tmp, root) = project();
    let store = repro::store::Store::at(root.join(".repro"));
    let scratch = store.scratch_dir("bisect").unwrap();
    std::mem::forget(scratch);
    let status = git(&root, &["status", "--porcelain", "--untracked-files=all"]);
    assert!(!status.contains(".repro"), "{status}");
    drop(tmp);
}

#[test]
fn a_forged_summary_or_date_is_damage_that_verify_names_and_compare_refuses() {
    let (tmp, root) = project();
    let honest = put_result(&root, &command_result());
    let mut forged = command_result();
    forged["summary"]["median"] = json!(-5.0);
    forged["summary"]["ci-low"] = json!(-1e300);
    let forged = put_result(&root, &forged);
    let mut dated = command_result();
    dated["created-at"] = json!("9999-99-99");
    let dated = put_result(&root, &dated);
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&forged[..12]) && out.contains("`summary` has median -5"),
        "{out}"
    );
    assert!(
        out.contains(&dated[..12]) && out.contains("`created-at` is \"9999-99-99\""),
        "{out}"
    );
    assert!(!out.contains(&honest[..12]), "{out}");
    let (code, _, err) = run(tmp.path(), &root, &["compare", &honest, &forged]);
    assert_ne!(code, 0, "{err}");
    assert_ne!(code, 70, "not a bug: {err}");
    assert!(err.contains("`summary` has median -5"), "{err}");
    let (_, out, _) = run(tmp.path(), &root, &["log"]);
    assert!(!out.contains("-5"), "log shows no forged median: {out}");
}

#[test]
fn compare_refuses_samples_that_are_not_positive_as_verify_does() {
    let (tmp, root) = project();
    let fixture = command_result();
    let mut ids = Vec::new();
    for samples in [json!([0.0, 0.0, 0.0]), json!([-1.0, -2.0, -3.0])] {
        let mut rec = fixture.clone();
        rec["samples"] = samples;
        ids.push(put_result(&root, &rec));
    }
    let (code, _, err) = run(tmp.path(), &root, &["compare", &ids[0], &ids[1]]);
    assert_eq!(code, 2, "not 70 (looks like a bug): {err}");
    assert!(err.contains("has a sample of"), "{err}");
    assert!(err.contains("positive"), "{err}");
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("has a sample of 0"), "{out}");
    // And bench never records one.
    let (code, out, _) = run(
        tmp.path(),
        &root,
        &[
            "bench",
            "--command",
            "echo '{\"ms\": 0}'",
            "--name",
            "zero",
            "--metric",
            "json:ms",
            "--runs",
            "3",
        ],
    );
    assert_ne!(code, 0);
    assert!(out.contains("greater than 0"), "{out}");
}

#[test]
fn a_step_whose_tree_vanished_is_never_stored_as_an_answer() {
    let (tmp, root) = project();
    for i in 1..=3 {
        std::fs::write(root.join("n.txt"), format!("{i}\n")).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    // The script removes its own tree (as a cleanup that misjudged it would) and fails.
    let (code, _, err) = run(
        tmp.path(),
        &root,
        &[
            "bisect",
            "--good",
            "HEAD~3",
            "--bad",
            "HEAD",
            "--script",
            "d=$(pwd); cd /; rm -rf \"$d\"; exit 1",
        ],
    );
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("vanished while it ran"), "{err}");
    let stored = std::fs::read_dir(root.join(".repro/bisect"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(stored, 0, "a step of a vanished tree was stored: {err}");
}

/// A stored result whose fingerprint is hostile (a huge string, a wrong type) is named with
/// its file and the fingerprint's key by `show`, and by `store verify`; the same record
/// with its fingerprint intact shows.
#[test]
fn a_result_with_a_hostile_fingerprint_is_named_with_its_file_and_key() {
    let (tmp, root) = project();
    let fixture = command_result();
    let id = put_result(&root, &fixture);
    let (code, out, err) = run(tmp.path(), &root, &["show", &id]);
    assert_eq!(code, 0, "{out}{err}");
    for (key, value, says) in [
        (
            "host",
            json!({"cpu": "x".repeat(1 << 20)}),
            "`host.cpu` is 1048576 bytes long",
        ),
        (
            "probe-ms",
            json!({"gpu": "fast"}),
            "`probe-ms.gpu` is a string, not a number",
        ),
        (
            "repro-version",
            json!({"a": 1}),
            "`repro-version` is an object, not a string",
        ),
    ] {
        let mut rec = fixture.clone();
        rec["fingerprint"][key] = value;
        let id = put_result(&root, &rec);
        let (code, _, err) = run(tmp.path(), &root, &["show", &id]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("results/{id}.json: fingerprint: {says}")),
            "{err}"
        );
        assert!(err.contains("hint: `repro store verify` lists"), "{err}");
        assert!(err.len() < 4096, "the message stays short: {}", err.len());
        // compare finds results through its own look-up: the same message.
        let (code, _, err) = run(tmp.path(), &root, &["compare", &id, &id[..8]]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!("results/{id}.json: fingerprint: {says}")),
            "{err}"
        );
        let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains(says), "{out}");
        std::fs::remove_file(root.join(format!(".repro/results/{id}.json"))).unwrap();
    }
}

/// A directory where a record or an object file belongs: verify names it, gc moves it to
/// quarantine/, and a build over it recovers (it failed with "Is a directory" on every run).
#[test]
fn a_directory_where_a_store_file_belongs_is_damage_that_gc_quarantines() {
    let (tmp, root) = project();
    let (rec, _, _) = build(tmp.path(), &root);
    let digest = rec["outputs"]["out/k.bin"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let object = root.join(format!(".repro/objects/{}/{}", &digest[..2], &digest[2..]));
    let replace_with_dir = |p: &Path| {
        std::fs::remove_file(p).unwrap();
        std::fs::create_dir(p).unwrap();
        std::fs::write(p.join("x"), "x").unwrap();
    };
    let result = put_result(&root, &command_result());
    let result_path = root.join(format!(".repro/results/{result}.json"));
    replace_with_dir(&object);
    replace_with_dir(&result_path);
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("results/{result}.json")), "{out}");
    assert!(
        out.contains(&format!("objects/{}/{}", &digest[..2], &digest[2..])),
        "{out}"
    );
    assert!(out.contains("not a regular file"), "{out}");

    // A build over the directory recovers (it is moved aside), as over a corrupt object.
    let (code, _, err) = run(tmp.path(), &root, &["build", "k"]);
    assert_eq!(code, 0, "{err}");
    assert!(object.is_file(), "the object was written again");

    replace_with_dir(&object);
    let (code, out, err) = run(tmp.path(), &root, &["store", "gc"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 damaged records moved to quarantine/"),
        "{out}"
    );
    assert!(
        out.contains("1 files where objects belong moved to quarantine/"),
        "{out}"
    );
    assert!(!object.exists() && !result_path.exists());
    let quarantine = root.join(".repro/quarantine");
    assert!(quarantine.join("results").is_dir() && quarantine.join("objects").is_dir());
    let (code, _, err) = run(tmp.path(), &root, &["build", "k"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 0, "{out}");
}
