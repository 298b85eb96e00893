//! `repro push` / `repro pull`: records shared through a git remote (a local bare
//! repository here), between clones that then answer bisections without running a step.

use crate::common;

use std::path::{Path, PathBuf};

use common::{git, nvrtc_available, repo_with, repro};
use serde_json::Value;

const RECIPE: &str = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n";

/// A project whose state breaks at commit 27 of 40 (and whose kernel stops compiling at
/// commit 31), pushed to a bare remote: (temp dir, clone A, the remote).
fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (tmp, root) = repo_with(&[("recipes/k.toml", RECIPE)]);
    for i in 1..=40 {
        std::fs::create_dir_all(root.join("kernels")).unwrap();
        std::fs::write(
            root.join("kernels/k.cu"),
            format!(
                "// version {i}\nextern \"C\" __global__ void k(float* a) {{ a[0] = {i}{} }}\n",
                if i < 31 { ";" } else { "" }
            ),
        )
        .unwrap();
        std::fs::write(
            root.join("state.txt"),
            if i >= 27 { "broken\n" } else { "fine\n" },
        )
        .unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
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

fn clone(tmp: &Path, remote: &Path, name: &str) -> PathBuf {
    let dest = tmp.join(name);
    git(
        tmp,
        &[
            "clone",
            "-q",
            remote.to_str().unwrap(),
            dest.to_str().unwrap(),
        ],
    );
    dest
}

fn run(tmp: &Path, root: &Path, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let mut c = repro(tmp);
    c.arg("-C").arg(root).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The script leaves a line in $MARK each time it runs.
const SCRIPT: &str = "echo ran >> \"$MARK\"; grep -q fine state.txt";

fn script_bisect(tmp: &Path, root: &Path, script: &str, mark: &Path) -> Value {
    let (code, out, err) = run(
        tmp,
        root,
        &[
            "bisect", "--json", "--good", "HEAD~39", "--bad", "HEAD", "--script", script,
        ],
        &[("MARK", mark)],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["culprit"]["subject"], "commit 27", "{v}");
    v
}

#[test]
fn a_clone_that_pulls_answers_a_repeated_bisection_without_running_a_step() {
    let (tmp, a, remote) = project();
    let t = tmp.path();
    let mark_a = t.join("mark-a");
    let first = script_bisect(t, &a, SCRIPT, &mark_a);
    assert!(first["evaluated"].as_u64().unwrap() > 2);
    assert!(mark_a.exists());
    let build_range = [
        "bisect", "--json", "--good", "HEAD~39", "--bad", "HEAD", "--recipe", "k",
    ];
    let builds = nvrtc_available();
    if builds {
        let (code, out, err) = run(t, &a, &build_range, &[]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["culprit"]["subject"], "commit 31");
    } else {
        eprintln!("build records not shared in this run: no NVRTC (set REPRO_NVRTC)");
    }
    let (code, out, err) = run(t, &a, &["push"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("pushed "), "{out}");
    assert!(out.contains("bisect "), "{out}");
    if builds {
        assert!(
            out.contains("builds ") && !out.contains(" 0 objects"),
            "{out}"
        );
    }
    // Pushing again sends nothing new.
    let (code, out, _) = run(t, &a, &["push", "--json"], &[]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["records"], serde_json::json!({}), "{v}");
    assert!(v["summary"]["unchanged"].as_u64().unwrap() > 0);

    // Clone B pulls, then the same bisection runs no step: the script never runs.
    let b = clone(t, &remote, "b");
    let (code, out, err) = run(t, &b, &["pull"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("pulled "), "{out}");
    // A's bisection reports came too.
    let names = |root: &Path| -> std::collections::BTreeSet<std::ffi::OsString> {
        std::fs::read_dir(root.join(".repro/bisections"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default()
    };
    assert!(!names(&a).is_empty());
    assert!(
        names(&a).is_subset(&names(&b)),
        "{:?} {:?}",
        names(&a),
        names(&b)
    );
    let mark_b = t.join("mark-b");
    let again = script_bisect(t, &b, SCRIPT, &mark_b);
    assert_eq!(again["evaluated"], 0, "{again}");
    assert!(!mark_b.exists(), "a step ran in the clone that pulled");
    assert!(
        again["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["cached"] == true)
    );
    if builds {
        let (code, out, err) = run(t, &b, &build_range, &[]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["culprit"]["subject"], "commit 31");
        assert_eq!(v["evaluated"], 0, "{v}");
        // The pulled artifacts are whole: the store verifies.
        let (code, out, err) = run(t, &b, &["store", "verify"], &[]);
        assert_eq!(code, 0, "{out}{err}");
    }

    // Two clones push different records at once: both succeed, and each then pulls the
    // other's.
    let s1 = "grep -q fine state.txt && echo one";
    let s2 = "grep -q fine state.txt && echo two";
    script_bisect(t, &a, s1, &mark_a);
    script_bisect(t, &b, s2, &mark_b);
    let (ta, tb) = (t.to_path_buf(), t.to_path_buf());
    let (a2, b2) = (a.clone(), b.clone());
    let ha = std::thread::spawn(move || run(&ta, &a2, &["push"], &[]));
    let hb = std::thread::spawn(move || run(&tb, &b2, &["push"], &[]));
    let (ra, rb) = (ha.join().unwrap(), hb.join().unwrap());
    assert_eq!(ra.0, 0, "{ra:?}");
    assert_eq!(rb.0, 0, "{rb:?}");
    for (root, other, mark) in [(&a, s2, t.join("mark-a2")), (&b, s1, t.join("mark-b2"))] {
        let (code, out, err) = run(t, root, &["pull"], &[]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(!out.starts_with("pulled 0 records"), "{out}");
        let v = script_bisect(t, root, other, &mark);
        assert_eq!(v["evaluated"], 0);
    }
}

#[test]
fn conflicts_unreachable_remotes_and_hostile_records_are_named() {
    let (tmp, a, remote) = project();
    let t = tmp.path();
    script_bisect(t, &a, SCRIPT, &t.join("mark"));
    assert_eq!(run(t, &a, &["push"], &[]).0, 0);
    let b = clone(t, &remote, "b");
    assert_eq!(run(t, &b, &["pull"], &[]).0, 0);

    // B's record of one step is replaced by a different, well-formed one.
    let store = repro::store::Store::at(b.join(".repro"));
    let (key, _, rec) = store.records("bisect").into_iter().next().unwrap();
    let mut rec = rec.unwrap();
    rec["detail"] = Value::String("edited in clone b".into());
    store.put_record("bisect", &key, &rec).unwrap();
    let (code, out, _) = run(t, &b, &["push"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("conflict: bisect/{key}")), "{out}");
    // Nothing was replaced: the remote still gives A's record, B keeps its own.
    let (code, out, _) = run(t, &b, &["pull"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "conflict: bisect/{key}: this store holds other bytes"
        )),
        "{out}"
    );
    let kept = store.get_record("bisect", &key).unwrap().unwrap();
    assert_eq!(kept["detail"], "edited in clone b");
    let (code, out, _) = run(t, &a, &["pull"], &[]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run(t, &b, &["store", "verify"], &[]);
    assert_eq!(code, 0, "{out}");

    // A record on the remote that is not sealed, and an object that does not hash to its
    // name, are rejected and not filed.
    let garbage = format!("{:064x}", 7);
    let blob = {
        let out = std::process::Command::new("git")
            .args(["hash-object", "-w", "--stdin"])
            .current_dir(&remote)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(b"{\"verdict\": \"good\"}")?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    git(
        &remote,
        &["update-ref", &format!("refs/repro/bisect/{garbage}"), &blob],
    );
    git(
        &remote,
        &[
            "update-ref",
            &format!("refs/repro/objects/{garbage}"),
            &blob,
        ],
    );
    let (code, out, _) = run(t, &a, &["pull"], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("rejected: bisect/{garbage}: has no record-sha256")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "rejected: objects/{garbage}: its content does not hash"
        )),
        "{out}"
    );
    assert!(!a.join(format!(".repro/bisect/{garbage}.json")).exists());

    // Remotes that cannot be reached.
    for r in ["nowhere", "/no/such/repository.git"] {
        for verb in ["push", "pull"] {
            let (code, _, err) = run(t, &a, &[verb, r], &[]);
            assert_eq!(code, 3, "{err}");
            assert!(
                err.contains(&format!("cannot reach the remote `{r}`")) && err.contains("hint:"),
                "{err}"
            );
        }
    }
    // The local store is still whole.
    let (code, out, _) = run(t, &a, &["store", "verify"], &[]);
    assert_eq!(code, 0, "{out}");
}
