//! `repro pull` from a remote whose refs/repro namespace holds hostile refs (names that are
//! not keys, kinds repro does not share, trees where blobs belong, oversized and unsealed
//! records, records filed under another key), and `repro push`/`pull` of performance steps,
//! which stay on the card that measured them. Every rejected name is reported with why, the
//! exit code is 1, nothing rejected is filed, and the staging refs are removed.

use crate::common;
use common::run_in as run;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{git, repo_with};
use serde_json::Value;

/// Writes `bytes` as a blob into the repository at `repo` and returns its id.
fn blob(repo: &Path, bytes: &[u8]) -> String {
    let mut c = Command::new("git")
        .args(["hash-object", "-w", "--stdin"])
        .current_dir(repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A repository with a few commits and a bare remote it is pushed to: (temp, repo, remote).
fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (tmp, root) = repo_with(&[("state.txt", "fine\n")]);
    for i in 1..=6 {
        std::fs::write(
            root.join("state.txt"),
            if i >= 4 { "broken\n" } else { "fine\n" },
        )
        .unwrap();
        std::fs::write(root.join("n.txt"), format!("{i}\n")).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-qm", &format!("commit {i}")]);
    }
    let remote = tmp.path().join("remote.git");
    git(
        tmp.path(),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().unwrap(),
        ],
    );
    git(
        &root,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    git(&root, &["push", "-q", "origin", "main"]);
    (tmp, root, remote)
}

/// The sealed bytes a store files `rec` with under `kind/key`.
fn sealed(tmp: &Path, kind: &str, key: &str, rec: &Value) -> Vec<u8> {
    let store = repro::store::Store::at(tmp.join("sealer"));
    store.put_record(kind, key, rec).unwrap();
    store.record_bytes(kind, key).unwrap().unwrap()
}

#[test]
fn hostile_refs_on_the_remote_are_each_rejected_by_name_and_nothing_of_them_is_filed() {
    let (tmp, root, remote) = project();
    let t = tmp.path();
    let cache = t.join("cache");
    let key = |i: u8| format!("{i:02x}").repeat(32);
    let tree = git(&remote, &["mktree"]);
    let text = b"an object\n";
    let good_object = repro::keys::sha256_hex(text);
    // A result whose summary was edited and whose ID (its content's hash) recomputed.
    let mut forged: Value =
        serde_json::from_str(include_str!("../fixtures/records/result-command.json")).unwrap();
    forged["summary"]["median"] = serde_json::json!(-5.0);
    let forged_id = repro::keys::key_of(&forged);
    let refs: Vec<(String, String)> = vec![
        ("foo".into(), blob(&remote, b"x")),
        ("objects/notakey".into(), blob(&remote, b"x")),
        (format!("widgets/{}", key(1)), blob(&remote, b"x")),
        (format!("results/{}", key(2)), tree.clone()),
        (format!("objects/{}", key(3)), tree.clone()),
        (
            format!("builds/{}", key(4)),
            blob(&remote, &vec![b' '; (4 << 20) + 1]),
        ),
        (format!("results/{}", key(5)), blob(&remote, b"not json")),
        (
            format!("bisect/{}", key(6)),
            blob(
                &remote,
                &sealed(t, "bisect", &key(6), &{
                    let mut step: serde_json::Value =
                        serde_json::from_str(include_str!("../fixtures/records/step.json"))
                            .unwrap();
                    step["key"] = serde_json::json!(key(7));
                    step
                }),
            ),
        ),
        (
            format!("bisections/{}", key(8)),
            blob(&remote, b"{\"record-sha256\": \"0\", \"a\": 1}"),
        ),
        (format!("objects/{good_object}"), blob(&remote, text)),
        (
            format!("results/{forged_id}"),
            blob(&remote, &sealed(t, "results", &forged_id, &forged)),
        ),
    ];
    for (name, oid) in &refs {
        git(&remote, &["update-ref", &format!("refs/repro/{name}"), oid]);
    }
    let (code, out, err) = run(&cache, &root, &["pull"]);
    assert_eq!(code, 1, "{out}{err}");
    let says = |s: &str| assert!(out.contains(s), "missing `{s}` in:\n{out}");
    says("pulled 0 records and 1 objects from origin; 0 already the same there\n");
    says("rejected: foo: is not KIND/KEY\n");
    says("rejected: objects/notakey: its name is not a key\n");
    says(&format!(
        "rejected: widgets/{}: `widgets` is not a kind of record repro shares\n",
        key(1)
    ));
    says(&format!(
        "rejected: results/{}: is a tree, not a blob\n",
        key(2)
    ));
    says(&format!(
        "rejected: objects/{}: is a tree, not a blob\n",
        key(3)
    ));
    says(&format!(
        "rejected: builds/{}: is {} bytes, more than the 4194304 allowed\n",
        key(4),
        (4 << 20) + 1
    ));
    says(&format!("rejected: results/{}: not valid JSON", key(5)));
    says(&format!(
        "rejected: bisect/{}: its `key` is {}, but it is filed as {}\n",
        key(6),
        &key(7)[..12],
        &key(6)[..12]
    ));
    says(&format!(
        "rejected: bisections/{}: its fields do not hash to its record-sha256",
        key(8)
    ));
    says(&format!(
        "rejected: results/{forged_id}: does not read as a result record: {forged_id}: `summary` has median -5, but its samples give"
    ));
    assert_eq!(out.matches("rejected: ").count(), 10, "{out}");

    // Only the object that hashes to its name was filed, and only it is mirrored locally.
    let store = repro::store::Store::at(root.join(".repro"));
    assert_eq!(store.get_blob(&good_object).unwrap(), text);
    for kind in ["builds", "results", "bisect", "bisections"] {
        assert!(store.records(kind).is_empty(), "{kind}");
    }
    assert_eq!(
        git(
            &root,
            &["for-each-ref", "--format=%(refname)", "refs/repro"]
        ),
        format!("refs/repro/objects/{good_object}")
    );
    assert_eq!(
        git(&root, &["for-each-ref", "refs/repro-incoming"]),
        "",
        "the staging refs are removed"
    );
    // Pulled again, the object is already here.
    let (code, out, _) = run(&cache, &root, &["--json", "pull"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["unchanged"], 1, "{v}");
    assert_eq!(v["summary"]["objects"], 0, "{v}");
    assert_eq!(
        v["summary"]["rejected"].as_array().unwrap().len(),
        10,
        "{v}"
    );
}

#[test]
fn performance_steps_are_neither_pushed_nor_pulled() {
    let (tmp, root, remote) = project();
    let t = tmp.path();
    let cache = t.join("cache");
    let (code, _, err) = run(
        &cache,
        &root,
        &[
            "bisect",
            "--good",
            "HEAD~6",
            "--bad",
            "HEAD",
            "--script",
            "grep -q fine state.txt",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // One step record is made a bench step's (resealed, as the store files it).
    let store = repro::store::Store::at(root.join(".repro"));
    let steps = store.records("bisect");
    let n = steps.len();
    assert!(n >= 2, "{n}");
    let (key, _, rec) = steps.into_iter().next().unwrap();
    let mut rec = rec.unwrap();
    assert_eq!(rec["question"]["question"]["mode"], "script", "{rec}");
    rec["question"]["question"]["mode"] = Value::from("bench");
    store.put_record("bisect", &key, &rec).unwrap();

    let (code, out, err) = run(&cache, &root, &["push"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "pushed {} records (bisect {}, bisections 1)",
            n,
            n - 1
        )),
        "{out}"
    );
    assert!(
        out.contains("not shared: 1 performance steps (their samples compare only on the card that took them)"),
        "{out}"
    );
    let on_remote = git(
        &remote,
        &["for-each-ref", "--format=%(refname)", "refs/repro/bisect"],
    );
    assert_eq!(on_remote.lines().count(), n - 1, "{on_remote}");
    assert!(!on_remote.contains(&key), "{on_remote}");

    // Someone else's push of a performance step is not filed by a pull either.
    let bytes = store.record_bytes("bisect", &key).unwrap().unwrap();
    let oid = blob(&remote, &bytes);
    git(
        &remote,
        &["update-ref", &format!("refs/repro/bisect/{key}"), &oid],
    );
    let other = t.join("other");
    git(
        t,
        &[
            "clone",
            "-q",
            remote.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    let (code, out, err) = run(&cache, &other, &["pull"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("pulled {} records", n)), "{out}");
    assert!(out.contains("not shared: 1 performance steps"), "{out}");
    assert!(!other.join(format!(".repro/bisect/{key}.json")).exists());
    // A push with nothing to share sends nothing.
    let empty = t.join("empty");
    git(
        t,
        &[
            "clone",
            "-q",
            remote.to_str().unwrap(),
            empty.to_str().unwrap(),
        ],
    );
    let (code, out, err) = run(&cache, &empty, &["push", "/no/such/remote.git"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "pushed 0 records and 0 objects to /no/such/remote.git; 0 already the same there\n"
    );
}

#[test]
fn a_record_the_remote_holds_other_bytes_of_is_a_conflict_and_a_remote_git_cannot_speak_to_is_named()
 {
    let (tmp, root, remote) = project();
    let t = tmp.path();
    let cache = t.join("cache");
    let (code, _, err) = run(
        &cache,
        &root,
        &[
            "bisect",
            "--good",
            "HEAD~6",
            "--bad",
            "HEAD",
            "--script",
            "grep -q fine state.txt",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(run(&cache, &root, &["push"]).0, 0);
    // A second clone makes its own, different record under one of the same keys, without
    // having pulled: its push meets the remote's bytes under that name.
    let other = t.join("other");
    git(
        t,
        &[
            "clone",
            "-q",
            remote.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    let store = repro::store::Store::at(root.join(".repro"));
    let (key, _, rec) = store.records("bisect").into_iter().next().unwrap();
    let mut rec = rec.unwrap();
    rec["detail"] = Value::from("measured differently in the other clone");
    let theirs = repro::store::Store::at(other.join(".repro"));
    theirs.put_record("bisect", &key, &rec).unwrap();
    let before = git(&remote, &["rev-parse", &format!("refs/repro/bisect/{key}")]);
    let (code, out, err) = run(&cache, &other, &["push"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!(
            "conflict: bisect/{key}: the remote holds other bytes under this name ("
        )),
        "{out}"
    );
    assert!(
        out.contains("hint: nothing was replaced on either side"),
        "{out}"
    );
    // Neither side changed.
    assert_eq!(
        git(&remote, &["rev-parse", &format!("refs/repro/bisect/{key}")]),
        before
    );
    assert_eq!(
        theirs.get_record("bisect", &key).unwrap().unwrap()["detail"],
        "measured differently in the other clone"
    );

    // A remote through a transport git does not have: git's failure, named, for both verbs.
    for (verb, says) in [
        ("push", "git push foo::bar"),
        ("pull", "git fetch foo::bar"),
    ] {
        let (code, out, err) = run(&cache, &root, &[verb, "foo::bar"]);
        assert_eq!(code, 3, "{verb}: {out}{err}");
        assert!(err.contains("error: git failed"), "{verb}: {err}");
        assert!(err.contains(says), "{verb}: {err}");
        assert!(err.contains("hint: "), "{verb}: {err}");
    }
    // The local store is whole.
    let (code, out, _) = run(&cache, &root, &["store", "verify"]);
    assert_eq!(code, 0, "{out}");
}
