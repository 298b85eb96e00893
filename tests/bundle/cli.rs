//! `repro bundle` and `repro replay` end to end (CPU, real NVRTC): create, verify, tamper
//! with every kind of member, truncate, add a file, unsafe paths, replay from a bundle in a
//! directory with no repository, and determinism across runs and checkout paths.

use crate::common;

use std::io::Read;
use std::path::Path;

use common::{git, kernel_repo, nvrtc_available, repro};
use predicates::prelude::*;
use serde_json::Value;

fn build_key(tmp: &Path, root: &Path, recipe: &str) -> String {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(["build", "--json", recipe])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["builds"][0]["key"].as_str().unwrap().to_string()
}

/// The members of a bundle, as (path, bytes), in archive order.
fn members(bundle: &Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(bundle).unwrap();
    let mut ar = tar::Archive::new(zstd::Decoder::new(file).unwrap());
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let p = e.path().unwrap().to_string_lossy().into_owned();
            let mut b = Vec::new();
            e.read_to_end(&mut b).unwrap();
            (p, b)
        })
        .collect()
}

/// Rewrites a bundle member by member, keeping its MANIFEST as it was (a tampered copy).
fn rewrite(bundle: &Path, to: &Path, members: Vec<(String, Vec<u8>)>) {
    let file = std::fs::File::create(to).unwrap();
    let enc = zstd::Encoder::new(file, 3).unwrap();
    let mut b = tar::Builder::new(enc);
    for (p, bytes) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        // The name is written raw: the tar crate itself refuses `..`, and hostile archives
        // are exactly what this must be able to make.
        let name = &mut h.as_gnu_mut().unwrap().name;
        name[..p.len()].copy_from_slice(p.as_bytes());
        h.set_cksum();
        b.append(&h, bytes.as_slice()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap();
    let _ = bundle;
}

fn verify(tmp: &Path, bundle: &Path) -> (i32, String) {
    let out = repro(tmp)
        .args(["bundle", "verify"])
        .arg(bundle)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn a_bundle_verifies_and_names_every_kind_of_tampering() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let key = build_key(tmp.path(), &root, "flash_attention");
    let bundle = tmp.path().join("paper.tar.zst");
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bundle", "create", &key[..12], "-o"])
        .arg(&bundle)
        .assert()
        .success()
        .stdout(predicate::str::contains("1 builds"));
    assert_eq!(verify(tmp.path(), &bundle).0, 0);
    let all = members(&bundle);
    let names: Vec<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
    for want in [
        "README.md",
        "MANIFEST",
        "results.csv",
        "results.md",
        "results.svg",
    ] {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("builds/")));
    assert!(names.iter().any(|n| n.starts_with("artifacts/")));
    assert!(
        names
            .iter()
            .any(|n| n.ends_with("/kernels/flash_attention.cu") && n.starts_with("source/"))
    );
    let readme = String::from_utf8(
        all.iter()
            .find(|(p, _)| p == "README.md")
            .unwrap()
            .1
            .clone(),
    )
    .unwrap();
    assert!(
        readme.contains(&format!(
            "repro replay {} --bundle paper.tar.zst",
            &key[..12]
        )),
        "{readme}"
    );

    // Flip one byte in each kind of member: verify names exactly that member.
    for prefix in [
        "source/",
        "builds/",
        "artifacts/",
        "README.md",
        "results.csv",
        "results.svg",
    ] {
        let mut m = all.clone();
        let (path, bytes) = m.iter_mut().find(|(p, _)| p.starts_with(prefix)).unwrap();
        bytes[0] ^= 0x20;
        let path = path.clone();
        let bad = tmp.path().join("bad.tar.zst");
        rewrite(&bundle, &bad, m);
        let (code, out) = verify(tmp.path(), &bad);
        assert_eq!(code, 1, "{prefix}: {out}");
        assert!(out.contains(&format!("DIFFERS  {path}")), "{prefix}: {out}");
    }
    // An extra file and a missing one.
    let mut m = all.clone();
    m.push(("notes/extra.txt".into(), b"hello".to_vec()));
    let missing = m
        .iter()
        .position(|(p, _)| p.starts_with("artifacts/"))
        .unwrap();
    let gone = m.remove(missing).0;
    let bad = tmp.path().join("bad2.tar.zst");
    rewrite(&bundle, &bad, m);
    let (code, out) = verify(tmp.path(), &bad);
    assert_eq!(code, 1);
    assert!(out.contains("EXTRA    notes/extra.txt"), "{out}");
    assert!(out.contains(&format!("MISSING  {gone}")), "{out}");
    // A truncated archive is an error, not a panic.
    let bytes = std::fs::read(&bundle).unwrap();
    let cut = tmp.path().join("cut.tar.zst");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, out) = verify(tmp.path(), &cut);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("is not a readable bundle"), "{out}");
    // A member whose path escapes (parent, absolute, Windows forms), added to an otherwise
    // intact bundle: verify refuses the bundle naming that member, and replay, which
    // would extract it, refuses it before writing anything, in a directory of its own.
    for (i, escape) in [
        "../escape.txt",
        "source/../../escape.txt",
        "/tmp/repro-bundle-escape.txt",
        "..\\escape.txt",
        "C:/escape.txt",
    ]
    .into_iter()
    .enumerate()
    {
        let evil = tmp.path().join(format!("evil{i}.tar.zst"));
        let mut m = all.clone();
        m.push((escape.into(), b"gotcha".to_vec()));
        rewrite(&bundle, &evil, m);
        let (code, out) = verify(tmp.path(), &evil);
        assert_eq!(code, 1, "{escape}: {out}");
        assert!(
            out.contains(&format!("holds an unsafe path `{escape}`")),
            "{escape}: {out}"
        );
        let work = tmp.path().join(format!("replay{i}/work"));
        std::fs::create_dir_all(&work).unwrap();
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&work)
            .args(["replay", &key[..12], "--bundle"])
            .arg(&evil)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{escape}: {stderr}");
        assert!(
            stderr.contains(&format!("holds an unsafe path `{escape}`")),
            "{escape}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!tmp.path().join("escape.txt").exists(), "{escape}");
        assert!(!tmp.path().join(format!("replay{i}/escape.txt")).exists());
        assert!(!Path::new("/tmp/repro-bundle-escape.txt").exists());
        let written: Vec<_> = walkdir::WalkDir::new(tmp.path().join(format!("replay{i}")))
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .map(|e| e.path().to_owned())
            .collect();
        assert!(written.is_empty(), "{escape}: replay wrote {written:?}");
    }
    // The intact bundle replays (the refusals above are about the member, not replay).
    let work = tmp.path().join("replay-ok");
    std::fs::create_dir_all(&work).unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&work)
        .args(["replay", &key[..12], "--bundle"])
        .arg(&bundle)
        .assert()
        .success()
        .stdout(predicate::str::contains("verdict: reproduced"));
}

#[test]
fn replay_from_a_bundle_in_a_directory_without_a_repository_is_byte_identical() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let key = build_key(tmp.path(), &root, "sgemm");
    let bundle = tmp.path().join("b.tar.zst");
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bundle", "create", &key, "--inputs-only", "-o"])
        .arg(&bundle)
        .assert()
        .success();
    let sources: Vec<String> = members(&bundle)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with("source/"))
        .collect();
    assert!(
        sources
            .iter()
            .all(|p| p.contains("/kernels/sgemm.cu") || p.contains("/recipes/sgemm.toml")),
        "inputs only: {sources:?}"
    );
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&empty)
        .args(["replay", &key[..10], "--json", "--bundle"])
        .arg(&bundle)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["verdict"], "reproduced");
    for a in v["artifacts"].as_array().unwrap() {
        assert_eq!(a["identical"], true, "{a}");
    }
    // From the store and the repository it works too; from another repository it says
    // what is needed.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["replay", &key[..10]])
        .assert()
        .success()
        .stdout(predicate::str::contains("verdict: reproduced"));
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    git(&other, &["init", "-q"]);
    let store = root.join(".repro");
    repro(tmp.path())
        .arg("-C")
        .arg(&other)
        .arg("--store")
        .arg(&store)
        .args(["replay", &key[..10]])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not in this repository"))
        .stderr(predicate::str::contains("--bundle"));
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["replay", "ffffffff"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no result or build with ID"));
}

#[test]
fn bundles_are_deterministic_across_runs_and_checkout_paths() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let store = tmp.path().join("shared-store");
    let key = {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("--store")
            .arg(&store)
            .args(["build", "--json", "vector_add"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["builds"][0]["key"].as_str().unwrap().to_string()
    };
    let other = tmp.path().join("somewhere/else/clone");
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            root.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    let make = |dir: &Path, sub: &str| {
        // The same file name: the README names the bundle in its replay commands.
        std::fs::create_dir_all(tmp.path().join(sub)).unwrap();
        let out = tmp.path().join(sub).join("paper.tar.zst");
        repro(tmp.path())
            .arg("-C")
            .arg(dir)
            .arg("--store")
            .arg(&store)
            .args(["bundle", "create", &key, "-o"])
            .arg(&out)
            .assert()
            .success();
        std::fs::read(out).unwrap()
    };
    let a = make(&root, "a");
    let b = make(&root, "b");
    let c = make(&other, "c");
    assert_eq!(a, b, "two runs");
    assert_eq!(a, c, "two checkout paths");
}

#[test]
fn a_missing_bundle_is_an_input_error() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        &["bundle", "verify", "nope.tar.zst"][..],
        &["bundle", "show", "nope.tar.zst"],
        &["replay", "abcd", "--bundle", "nope.tar.zst"],
    ] {
        repro(tmp.path())
            .arg("-C")
            .arg(tmp.path())
            .args(args)
            .assert()
            .code(2)
            .stderr(predicates::str::contains("nope.tar.zst"))
            .stderr(predicates::str::contains(
                "hint: check the path of the bundle",
            ));
    }
}

/// A command bench of `sh NAME.sh` (which prints `{"ms": VALUE}`), its result ID.
fn command_result(tmp: &Path, root: &Path, name: &str) -> String {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .args(["bench", "--json", "--command"])
        .arg(format!("sh {name}.sh"))
        .args([
            "--name", name, "--metric", "json:ms", "--unit", "ms", "--runs", "5",
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{v}");
    v["results"][0]["id"].as_str().unwrap().to_string()
}

#[test]
fn a_bundle_of_benchmark_results_holds_each_claim_and_its_samples() {
    let (tmp, root) = common::repo_with(&[
        ("alpha.sh", "echo '{\"ms\": 1.5}'\n"),
        ("beta.sh", "echo '{\"ms\": 3.0}'\n"),
    ]);
    let commit = git(&root, &["rev-parse", "HEAD"]);
    let a = command_result(tmp.path(), &root, "alpha");
    let b = command_result(tmp.path(), &root, "beta");
    let bundle = tmp.path().join("r.tar.zst");
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bundle", "create", &a[..8], &b[..8], "-o"])
        .arg(&bundle)
        .assert()
        .success()
        .stdout(predicate::str::contains("(2 results, 0 builds, 9 files"));
    assert_eq!(verify(tmp.path(), &bundle).0, 0);
    let all = members(&bundle);
    let get = |p: &str| -> String {
        String::from_utf8(all.iter().find(|(q, _)| q == p).unwrap().1.clone()).unwrap()
    };
    let mut names: Vec<&str> = all.iter().map(|(p, _)| p.as_str()).collect();
    names.sort_unstable();
    let mut want = vec![
        "MANIFEST".to_string(),
        "README.md".into(),
        "results.csv".into(),
        "results.md".into(),
        "results.svg".into(),
        format!("results/{a}.json"),
        format!("results/{b}.json"),
        format!("source/{commit}/alpha.sh"),
        format!("source/{commit}/beta.sh"),
    ];
    want.sort_unstable();
    assert_eq!(names, want);
    // Every raw sample, and the table of claims in each form.
    let rec: Value = serde_json::from_str(&get(&format!("results/{a}.json"))).unwrap();
    assert_eq!(rec["samples"], serde_json::json!([1.5, 1.5, 1.5, 1.5, 1.5]));
    let csv = get("results.csv");
    assert!(
        csv.starts_with("id,name,params,verdict,n,median,ci_low,ci_high,"),
        "{csv}"
    );
    assert!(
        csv.contains(&format!("{a},alpha,,ok,5,1.5000,1.5000,1.5000,")),
        "{csv}"
    );
    assert!(
        csv.contains(&format!("{b},beta,,ok,5,3.0000,3.0000,3.0000,")),
        "{csv}"
    );
    let svg = get("results.svg");
    assert!(svg.contains(&format!("alpha  ({})", &a[..12])), "{svg}");
    assert!(svg.contains("3.000 ms"), "{svg}");
    let readme = get("README.md");
    for (id, name, median) in [(&a, "alpha", "1.5000 ms"), (&b, "beta", "3.0000 ms")] {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` | {name} |", &id[..12])))
            .unwrap_or_else(|| panic!("no claim for {name}: {readme}"));
        assert!(row.contains(median), "{row}");
        assert!(
            row.contains(&format!("`repro replay {} --bundle r.tar.zst`", &id[..12])),
            "{row}"
        );
    }
    assert!(get("results.md").contains("alpha"));
    // A changed sample is named by verify.
    let mut m = all.clone();
    let (path, bytes) = m
        .iter_mut()
        .find(|(p, _)| *p == format!("results/{a}.json"))
        .unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.contains("1.5"), "{text}");
    *bytes = text.replacen("1.5", "1.4", 1).into_bytes();
    let path = path.clone();
    let bad = tmp.path().join("bad.tar.zst");
    rewrite(&bundle, &bad, m);
    let (code, out) = verify(tmp.path(), &bad);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("DIFFERS  {path}")), "{out}");
    // A command bench has nothing to rebuild: replay says so rather than run the command.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&empty)
        .args(["replay", &a[..8], "--bundle"])
        .arg(&bundle)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "this record has no recipe to rebuild (a command bench)",
        ));
    // A result made from uncommitted changes cannot be bundled: its source is unknown.
    std::fs::write(root.join("alpha.sh"), "echo '{\"ms\": 2.5}'\n").unwrap();
    let dirty = command_result(tmp.path(), &root, "alpha");
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bundle", "create", &dirty[..8], "-o"])
        .arg(tmp.path().join("dirty.tar.zst"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("uncommitted changes"));
    assert!(!tmp.path().join("dirty.tar.zst").exists());
}

#[test]
fn data_after_the_tar_end_is_refused_by_verify() {
    let (tmp, root) = common::repo_with(&[("alpha.sh", "echo '{\"ms\": 1.5}'\n")]);
    let a = command_result(tmp.path(), &root, "alpha");
    let bundle = tmp.path().join("r.tar.zst");
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bundle", "create", &a[..8], "-o"])
        .arg(&bundle)
        .assert()
        .success();
    assert_eq!(verify(tmp.path(), &bundle).0, 0);
    let good = std::fs::read(&bundle).unwrap();
    let tar = zstd::decode_all(&good[..]).unwrap();
    let hostile = tmp.path().join("h.tar.zst");
    for (what, bytes) in [
        (
            "another tar appended",
            zstd::encode_all(&[&tar[..], &tar[..]].concat()[..], 3).unwrap(),
        ),
        (
            "random bytes appended",
            zstd::encode_all(&[&tar[..], &b"\x01\x02 not padding"[..]].concat()[..], 3).unwrap(),
        ),
        ("two bundles concatenated", [&good[..], &good[..]].concat()),
    ] {
        std::fs::write(&hostile, bytes).unwrap();
        let (code, out) = verify(tmp.path(), &hostile);
        assert_eq!(code, 1, "{what}: {out}");
        assert!(out.contains("after the archive"), "{what}: {out}");
    }
}

#[test]
fn of_concurrent_creates_without_force_exactly_one_writes() {
    let (tmp, root) = common::repo_with(&[("alpha.sh", "echo '{\"ms\": 1.5}'\n")]);
    let a = command_result(tmp.path(), &root, "alpha");
    let bundle = tmp.path().join("out.tar.zst");
    let outcomes: Vec<(i32, String)> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let out = repro(tmp.path())
                        .arg("-C")
                        .arg(&root)
                        .args(["bundle", "create", &a[..8], "-o"])
                        .arg(&bundle)
                        .output()
                        .unwrap();
                    (
                        out.status.code().unwrap(),
                        String::from_utf8_lossy(&out.stdout).into_owned()
                            + &String::from_utf8_lossy(&out.stderr),
                    )
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let won: Vec<_> = outcomes.iter().filter(|(c, _)| *c == 0).collect();
    assert_eq!(won.len(), 1, "{outcomes:?}");
    assert!(won[0].1.contains("wrote"), "{outcomes:?}");
    for (code, out) in outcomes.iter().filter(|(c, _)| *c != 0) {
        assert_eq!(*code, 2, "{out}");
        assert!(out.contains("already exists"), "{out}");
    }
    assert_eq!(verify(tmp.path(), &bundle).0, 0);
}
