//! `repro store path|verify|gc` through the command line: a store this repro cannot read
//! (newer schema, damaged marker), every kind of inconsistency `verify` names, and
//! `gc --keep-last` keeping the newest builds of each recipe. Command recipes stand in for
//! a compiler, so these run without NVRTC.

use crate::common;

use std::path::Path;

use common::{git, repo_with, repro};
use repro::store::{SEAL, Store};
use serde_json::{Value, json};

fn run(tmp: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = repro(tmp).arg("-C").arg(root).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cmd_repo() -> (tempfile::TempDir, std::path::PathBuf) {
    repo_with(&[
        (
            "recipes/cmd.toml",
            "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"cp src/k.txt out.bin\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n",
        ),
        ("src/k.txt", "kernel bytes\n"),
        (".gitignore", "out.bin\n"),
    ])
}

fn build(tmp: &Path, root: &Path) -> String {
    let (code, out, err) = run(tmp, root, &["build", "--json", "cmd"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["builds"][0]["key"].as_str().unwrap().to_string()
}

#[test]
fn a_store_this_repro_cannot_read_is_named_with_a_remedy() {
    let (tmp, root) = repo_with(&[]);
    let (code, out, _) = run(tmp.path(), &root, &["store", "path", "--json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["exists"], false);
    assert!(v["path"].as_str().unwrap().ends_with("/.repro"), "{v}");

    let marker = root.join(".repro/store.json");
    std::fs::create_dir_all(marker.parent().unwrap()).unwrap();
    for (text, code, words) in [
        (r#"{"schema": 99}"#, 2, "upgrade repro"),
        // A marker that is not repro's: the directory is not taken for a store.
        ("not json", 2, "its store.json is not JSON"),
        (r#"{"version": 1}"#, 2, "no schema"),
    ] {
        std::fs::write(&marker, text).unwrap();
        for args in [&["store", "verify"][..], &["log"], &["store", "gc"]] {
            let (got, out, err) = run(tmp.path(), &root, args);
            assert_eq!(got, code, "{text} {args:?}: {out}{err}");
            assert!(err.contains(words), "{text} {args:?}: {err}");
        }
    }
}

#[test]
fn verify_names_every_kind_of_inconsistent_record() {
    let (tmp, root) = cmd_repo();
    let key = build(tmp.path(), &root);
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("ok: "), "{out}");
    let (code, out, _) = run(tmp.path(), &root, &["-q", "store", "verify"]);
    assert_eq!((code, out.as_str()), (0, ""));

    let store = Store::at(root.join(".repro"));
    // Sealed (so not merely truncated), but not what they claim to be.
    let mut b = store.get_record("builds", &key).unwrap().unwrap();
    b.as_object_mut().unwrap().remove(SEAL);
    b["inputs"]["files"]["src/k.txt"] = json!("ab".repeat(32));
    store.put_record("builds", &"12".repeat(32), &b).unwrap();
    store
        .put_record("results", &"34".repeat(32), &json!({"schema": 1}))
        .unwrap();
    // Recipe pointers are written as `build` writes them (unsealed: they are hints).
    for (name, key) in [("gone", "56".repeat(32)), ("keyless", "HEAD".to_string())] {
        std::fs::write(
            root.join(format!(".repro/recipes/{name}.json")),
            json!({"schema": 1, "recipe": name, "key": key}).to_string(),
        )
        .unwrap();
    }
    let mut step: Value =
        serde_json::from_str(include_str!("../fixtures/records/step.json")).unwrap();
    step["key"] = json!("9a".repeat(32));
    store.put_record("bisect", &"78".repeat(32), &step).unwrap();
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    for want in [
        "its inputs do not hash to its key",
        "its content does not hash to its ID (edited?)",
        "does not read as a result record",
        "names build 565656565656 that is not in the store",
        "has no valid `key`",
        "its `key` is 9a9a9a9a9a9a, but it is filed as 787878787878",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    assert!(
        out.lines()
            .all(|l| l.starts_with("CORRUPT  ") || l.starts_with("FAILED: ")),
        "{out}"
    );
    assert!(out.trim_end().ends_with("6 problems"), "{out}");
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify", "--json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["report"]["problems"].as_array().unwrap().len(), 6);
}

#[test]
fn gc_keeps_the_newest_builds_of_each_recipe() {
    let (tmp, root) = cmd_repo();
    let mut keys = Vec::new();
    for i in 0..3 {
        std::fs::write(root.join("src/k.txt"), format!("version {i}\n")).unwrap();
        git(&root, &["commit", "-qam", &format!("v{i}")]);
        keys.push(build(tmp.path(), &root));
        // Builds are ordered by their creation time, which has millisecond resolution.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, out, err) = run(tmp.path(), &root, &["store", "gc", "--keep-last", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("removed 2 records, 2 objects"), "{out}");
    let left: Vec<String> = std::fs::read_dir(root.join(".repro/builds"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, [format!("{}.json", keys[2])]);
    // Nothing more to remove; --json says so.
    let (code, out, _) = run(
        tmp.path(),
        &root,
        &["store", "gc", "--json", "--keep-last", "1"],
    );
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["report"]["records-removed"], 0, "{v}");
    // The kept build still replays.
    let (code, out, _) = run(tmp.path(), &root, &["replay", &keys[2][..12]]);
    assert_eq!(code, 0, "{out}");
}

/// A store on a read-only mount: it is read as ever, and `gc` says the file system is
/// read-only (it said "Bad file descriptor": an exclusive lock on a lock file it could only
/// open for reading). Mounting needs privileges a machine may lack.
#[test]
fn a_read_only_store_is_read_and_gc_says_why_it_cannot_change_it() {
    let (tmp, root) = cmd_repo();
    build(tmp.path(), &root);
    let store = root.join(".repro");
    let mount = |args: &[&str]| {
        std::process::Command::new("mount")
            .args(args)
            .arg(&store)
            .arg(&store)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !mount(&["--bind"]) {
        common::skip("needs CAP_SYS_ADMIN to mount a read-only bind mount");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(store.clone());
    let ro = std::process::Command::new("mount")
        .args(["-o", "remount,ro,bind"])
        .arg(&store)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ro, "remounting the bind mount read-only failed");
    let (code, out, err) = run(tmp.path(), &root, &["log"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run(tmp.path(), &root, &["store", "gc"]);
    assert!(!err.contains("Bad file descriptor"), "{out}{err}");
    assert!(code == 0 || code == 4, "{code}: {out}{err}");
    if code == 4 {
        assert!(err.contains("Read-only file system"), "{err}");
    }
}
