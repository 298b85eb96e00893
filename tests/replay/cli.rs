//! `repro replay` from the store, through the command line: how it picks the record (too
//! short, ambiguous, unknown), which records it refuses before anything runs (a command
//! bench, a dirty tree, no commit), and the verdict and exit code of a result recorded on
//! another machine: the artifact rebuilt and compared, the environment checked against the
//! recorded fingerprint, and the timing not re-run where there is no GPU. Command recipes
//! stand in for a compiler, so these run without NVRTC; the result records are those a
//! recipe bench on a GPU machine writes, made here from a real command bench's record (its
//! fingerprint is this machine's) and re-sealed through the store's own API.

use crate::common;

use std::path::{Path, PathBuf};

use common::{has_gpu, repo_with, repro};
use repro::keys::key_of;
use repro::store::Store;
use serde_json::{Value, json};

fn cmd_repo() -> (tempfile::TempDir, PathBuf) {
    repo_with(&[
        (
            "recipes/cmd.toml",
            "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"cp src/k.txt out.bin\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n",
        ),
        ("src/k.txt", "kernel bytes\n"),
        (".gitignore", "out.bin\n"),
    ])
}

fn run(tmp: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = repro(tmp).arg("-C").arg(root).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Builds recipe `cmd`; returns its key and the sha256 of its output.
fn build(tmp: &Path, root: &Path) -> (String, String) {
    let (code, out, err) = run(tmp, root, &["build", "--json", "cmd"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let b = &v["builds"][0];
    (
        b["key"].as_str().unwrap().to_string(),
        b["outputs"]["out.bin"]["sha256"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// A command bench's result record, as the store holds it (without its seal).
fn command_result(tmp: &Path, root: &Path) -> (String, Value) {
    let (code, out, err) = run(
        tmp,
        root,
        &["bench", "--json", "--command", "true", "--runs", "3"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let id = v["results"][0]["id"].as_str().unwrap().to_string();
    let rec = Store::at(root.join(".repro"))
        .get_record("results", &id)
        .unwrap()
        .unwrap();
    (id, rec)
}

/// Turns a command bench's record into the record of a recipe bench of `cmd` (as a GPU
/// machine writes it: recipe, build key, artifact, samples), applies `edit`, and files it
/// under the ID its content hashes to. Returns that ID.
fn recipe_result(
    root: &Path,
    command: &Value,
    build_key: &str,
    edit: impl Fn(&mut Value),
) -> String {
    let mut r = command.clone();
    let o = r.as_object_mut().unwrap();
    for k in [
        "id",
        "command",
        "metric",
        "prepare",
        "exit-codes",
        "user-s",
        "system-s",
        "wall-s",
        "warmup-runs",
        repro::store::SEAL,
    ] {
        o.remove(k);
    }
    o.insert("name".into(), json!("cmd"));
    o.insert("recipe".into(), json!("cmd"));
    o.insert("recipe-path".into(), json!("recipes/cmd.toml"));
    o.insert("build-key".into(), json!(build_key));
    o.insert("samples".into(), json!([10.0, 10.5, 9.5, 10.2]));
    edit(&mut r);
    // The summary of the samples as bench writes it: one its samples contradict is damage.
    let samples: Vec<f64> = serde_json::from_value(r["samples"].clone()).unwrap();
    r["summary"] = json!(repro::bench::summarize(&samples));
    let id = key_of(&r);
    Store::at(root.join(".repro"))
        .put_record("results", &id, &r)
        .unwrap();
    id
}

#[test]
fn replay_picks_one_record_or_says_why_not() {
    let (tmp, root) = cmd_repo();
    let (a, _) = build(tmp.path(), &root);
    std::fs::write(root.join("src/k.txt"), "other bytes\n").unwrap();
    common::git(&root, &["commit", "-qam", "second"]);
    let (b, _) = build(tmp.path(), &root);
    assert_ne!(a, b);

    // An empty prefix is the command line's error (a prefix two records share is
    // ambiguous: replay.rs's unit tests).
    let (code, _, err) = run(tmp.path(), &root, &["replay", ""]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a value is required for '<ID>'"), "{err}");

    // Three digits that name exactly one record are still refused.
    if a[..3] != b[..3] {
        let (code, _, err) = run(tmp.path(), &root, &["replay", &a[..3]]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&format!(
                "`{}` is too short: give at least 4 hex digits",
                &a[..3]
            )),
            "{err}"
        );
    }
    // Upper case is the same ID; an unknown one is named, with where to look.
    let (code, out, err) = run(tmp.path(), &root, &["replay", &a[..8].to_uppercase()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("verdict: reproduced"), "{out}");
    assert!(
        out.contains(&format!("replaying build {}", &a[..12])),
        "{out}"
    );
    let unknown = if a.starts_with("0000") {
        "ffff"
    } else {
        "0000"
    };
    let (code, _, err) = run(tmp.path(), &root, &["replay", unknown]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("no result or build with ID {unknown}")) && err.contains("repro log"),
        "{err}"
    );
    // -q: a replay that reproduced prints nothing at all.
    let (code, out, _) = run(tmp.path(), &root, &["-q", "replay", &b[..12]]);
    assert_eq!(code, 0);
    assert_eq!(out, "");
}

#[test]
fn replay_refuses_records_it_cannot_recreate_before_running_anything() {
    let (tmp, root) = cmd_repo();
    let (key, _) = build(tmp.path(), &root);
    let (bench_id, command) = command_result(tmp.path(), &root);

    // A command bench has no recipe to rebuild.
    let (code, out, err) = run(tmp.path(), &root, &["replay", &bench_id[..12]]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("has no recipe to rebuild (a command bench)"),
        "{err}"
    );
    assert!(err.contains("repro bench --command"), "{err}");

    // A result measured in a tree with uncommitted changes cannot be re-created.
    let dirty = recipe_result(&root, &command, &key, |r| r["dirty"] = json!(true));
    let (code, out, err) = run(tmp.path(), &root, &["replay", &dirty[..12]]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("uncommitted changes"), "{err}");

    // Nor one that names no commit.
    let nowhere = recipe_result(&root, &command, &key, |r| {
        r.as_object_mut().unwrap().remove("commit");
    });
    let (code, out, err) = run(tmp.path(), &root, &["replay", &nowhere[..12]]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("names no commit"), "{err}");

    // Nor one whose commit this repository lacks.
    let elsewhere = recipe_result(&root, &command, &key, |r| {
        r["commit"] = json!("1234567890abcdef1234567890abcdef12345678")
    });
    let (code, out, err) = run(tmp.path(), &root, &["replay", &elsewhere[..12]]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("commit 1234567890abcdef1234567890abcdef12345678 is not in this repository"),
        "{err}"
    );

    // A record edited after it was filed is refused by name, field and problem.
    let forged = recipe_result(&root, &command, &key, |r| {
        r["build-key"] = json!("../../etc")
    });
    let (code, out, err) = run(tmp.path(), &root, &["replay", &forged[..12]]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("build-key"), "{err}");
    assert!(err.contains("not a 64-digit hex key"), "{err}");
    // Nor one whose timing settings repro would not have recorded: a value outside the
    // setting's range, or a name that is no setting (the record sealed as repro seals).
    for (name, value, allowed) in [
        (
            "REPRO_TIMING_PLACEMENTS",
            "999",
            "a whole number from 1 to 64",
        ),
        ("REPRO_TIMING_PLACMENTS", "8", "a timing setting"),
    ] {
        let odd = recipe_result(&root, &command, &key, |r| {
            r["timing-settings"] = json!({ name: value })
        });
        let (code, out, err) = run(tmp.path(), &root, &["replay", &odd[..12]]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            err.contains(&format!("{name}={value:?} is not {allowed}")),
            "{err}"
        );
        assert!(err.contains("this record was edited"), "{err}");
    }
    // None of these rebuilt anything: the store holds the one build made above.
    let builds = std::fs::read_dir(root.join(".repro/builds"))
        .unwrap()
        .count();
    assert_eq!(builds, 1);
}

#[test]
fn a_result_from_another_machine_replays_its_build_and_checks_the_environment() {
    // The live fingerprint must name an NVRTC for the environment check below.
    if !common::nvrtc_available() {
        return;
    }
    let (tmp, root) = cmd_repo();
    let (key, sha) = build(tmp.path(), &root);
    let (_, command) = command_result(tmp.path(), &root);

    // Recorded here (the fingerprint is this machine's): the artifact is rebuilt and
    // identical; without a GPU the timing cannot be re-run, which is its own verdict.
    let same = recipe_result(&root, &command, &key, |_| {});
    let (code, out, err) = run(tmp.path(), &root, &["replay", &same[..12]]);
    if has_gpu() {
        // A GPU is here, so it re-times; this record holds no launch settings.
        assert_eq!(code, 1, "{out}{err}");
        assert!(err.contains("records no settings"), "{err}");
        return;
    }
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        err.contains("running the recipe's command: sh -c 'cp src/k.txt out.bin'"),
        "{err}"
    );
    assert!(
        out.contains(&format!("replaying result {}", &same[..12])),
        "{out}"
    );
    assert!(
        out.contains(&format!("out.bin identical  recorded {}", &sha[..12])),
        "{out}"
    );
    assert!(
        out.contains("note: no GPU here: the build was replayed, the timing was not"),
        "{out}"
    );
    assert!(out.contains("verdict: cannot run here"), "{out}");

    let (code, out, _) = run(tmp.path(), &root, &["replay", "--json", &same[..12]]);
    assert_eq!(code, 3);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kind"], "result");
    assert_eq!(v["verdict"], "cannot run here");
    assert_eq!(v["artifacts"][0]["identical"], true);
    assert_eq!(v["artifacts"][0]["rebuilt"], json!(sha));
    assert!(v["timing"].is_null());
    assert_eq!(v["environment"], json!([]));

    // Recorded with another NVRTC: the environment differs, which outranks the GPU note.
    let other = recipe_result(&root, &command, &key, |r| {
        r["fingerprint"]["toolchain"]["nvrtc"] = json!({"version": "11.1"});
    });
    let (code, out, err) = run(tmp.path(), &root, &["replay", "--json", &other[..12]]);
    assert_eq!(code, 6, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "environment mismatch");
    let diffs = v["environment"].as_array().unwrap();
    assert_eq!(diffs.len(), 1, "{v}");
    assert_eq!(diffs[0]["field"], "toolchain.nvrtc.version");
    assert_eq!(diffs[0]["recorded"], json!(["11.1"]));
    let (code, out, _) = run(tmp.path(), &root, &["replay", &other[..12]]);
    assert_eq!(code, 6);
    assert!(
        out.contains("environment: toolchain.nvrtc.version: recorded [\"11.1\"], here"),
        "{out}"
    );

    // Without its build record, the result's own artifact digest (of the module it
    // loaded, `cubin`) is what the rebuild is held to.
    let absent = "ab".repeat(32);
    let wrong = recipe_result(&root, &command, &absent, |r| {
        r["artifact"] = json!("cd".repeat(32))
    });
    let (code, out, _) = run(tmp.path(), &root, &["replay", "--json", &wrong[..12]]);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "artifact differs");
    assert_eq!(
        v["artifacts"],
        json!([{"output": "cubin", "recorded": "cd".repeat(32), "rebuilt": null, "identical": false}])
    );
    let (code, out, _) = run(tmp.path(), &root, &["replay", &wrong[..12]]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("cubin  DIFFERS  recorded cdcdcdcdcdcd  rebuilt (not built)"),
        "{out}"
    );
    assert!(out.contains("verdict: artifact differs"), "{out}");
    // A digest the rebuild does give is found under its own output's name (a command
    // recipe's output is not called `cubin`).
    let right = recipe_result(&root, &command, &absent, |r| r["artifact"] = json!(sha));
    let (code, out, _) = run(tmp.path(), &root, &["replay", "--json", &right[..12]]);
    assert_eq!(code, 3, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "cannot run here");
    assert_eq!(
        v["artifacts"],
        json!([{"output": "out.bin", "recorded": sha, "rebuilt": sha, "identical": true}])
    );
    // -q still prints a replay that did not reproduce.
    let (code, out, _) = run(tmp.path(), &root, &["-q", "replay", &wrong[..12]]);
    assert_eq!(code, 1);
    assert!(out.contains("verdict: artifact differs"), "{out}");
}

#[test]
fn replay_holds_the_tree_to_the_build_record_and_names_what_differs() {
    let (tmp, root) = cmd_repo();
    let (key, _) = build(tmp.path(), &root);
    // Edit the build record's hash of the source file and re-seal it under the key its
    // inputs now hash to: the record is well formed, but the tree is not what it says.
    let store = Store::at(root.join(".repro"));
    let mut rec = store.get_record("builds", &key).unwrap().unwrap();
    rec.as_object_mut().unwrap().remove(repro::store::SEAL);
    rec["inputs"]["files"]["src/k.txt"] = json!("ef".repeat(32));
    let edited = key_of(&rec["inputs"]);
    store.put_record("builds", &edited, &rec).unwrap();
    let (code, out, err) = run(tmp.path(), &root, &["replay", &edited[..12]]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "the sources do not match build record {}: file src/k.txt differs",
            // The key the record states (its file name is the key of the edited inputs).
            &key[..12]
        )),
        "{err}"
    );
    assert!(err.contains("nothing was built or run"), "{err}");
    assert_eq!(out, "");
}

#[test]
fn results_travel_in_a_bundle_and_replay_from_it_only_with_consent() {
    let (tmp, root) = cmd_repo();
    let (key, sha) = build(tmp.path(), &root);
    let (_, command) = command_result(tmp.path(), &root);
    // Two results of one recipe (a sweep): the bundle plots them.
    let one = recipe_result(&root, &command, &key, |_| {});
    let two = recipe_result(&root, &command, &key, |r| {
        r["samples"] = json!([11.0, 11.5, 10.5, 11.2]);
        r["params"] = json!({"n": 2});
    });
    let bundle = tmp.path().join("results.tar.zst");
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &[
            "bundle",
            "create",
            &one[..12],
            &two[..12],
            "-o",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let names: Vec<String> = repro::archive::read(&bundle)
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    for want in [
        format!("results/{one}.json"),
        format!("results/{two}.json"),
        format!("builds/{key}.json"),
        "plots/cmd.svg".to_string(),
    ] {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
    let commit = common::git(&root, &["rev-parse", "HEAD"]);
    assert!(
        names.contains(&format!("source/{commit}/src/k.txt")),
        "{names:?}"
    );

    // In a directory with no repository: the bundle's command recipe does not run unasked.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, out, err) = run(
        tmp.path(),
        &empty,
        &["replay", &one[..12], "--bundle", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("recipe `cmd` of this bundle runs a command: sh -c 'cp src/k.txt out.bin'"),
        "{err}"
    );
    assert!(err.contains("--allow-commands"), "{err}");
    assert!(!empty.join("out.bin").exists());
    let (code, out, err) = run(
        tmp.path(),
        &empty,
        &[
            "replay",
            &one[..12],
            "--json",
            "--allow-commands",
            "--bundle",
            bundle.to_str().unwrap(),
        ],
    );
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(v["artifacts"][0]["rebuilt"], json!(sha), "{v}");
    if has_gpu() {
        assert_eq!(code, 1, "{v}");
    } else {
        assert_eq!(code, 3, "{v}");
        assert_eq!(v["verdict"], "cannot run here");
    }

    // --inputs-only keeps the recipe and its inputs, nothing else of the tree.
    std::fs::write(root.join("NOTES.md"), "not an input\n").unwrap();
    common::git(&root, &["add", "NOTES.md"]);
    common::git(&root, &["commit", "-qm", "notes"]);
    let (key2, _) = build(tmp.path(), &root);
    let three = recipe_result(&root, &command, &key2, |r| {
        r["commit"] = json!(common::git(&root, &["rev-parse", "HEAD"]))
    });
    let small = tmp.path().join("small.tar.zst");
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &[
            "bundle",
            "create",
            &three[..12],
            "--inputs-only",
            "-o",
            small.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let sources: Vec<String> = repro::archive::read(&small)
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .filter(|p| p.starts_with("source/"))
        .collect();
    assert_eq!(sources.len(), 2, "{sources:?}");
    assert!(
        sources
            .iter()
            .all(|p| p.ends_with("/src/k.txt") || p.ends_with("/recipes/cmd.toml")),
        "{sources:?}"
    );

    // A result that names no commit cannot be bundled, and nothing is written.
    let nowhere = recipe_result(&root, &command, &key, |r| {
        r.as_object_mut().unwrap().remove("commit");
    });
    let refused = tmp.path().join("refused.tar.zst");
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &[
            "bundle",
            "create",
            &nowhere[..12],
            "-o",
            refused.to_str().unwrap(),
        ],
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains(&format!(
            "result {} records no commit, so its sources cannot be bundled",
            &nowhere[..12]
        )),
        "{err}"
    );
    assert!(!refused.exists());
}

/// An edit of a record.
type Edit = Box<dyn Fn(&mut Value)>;

#[test]
fn store_records_with_impossible_fields_are_refused_by_field() {
    let (tmp, root) = cmd_repo();
    let (key, _) = build(tmp.path(), &root);
    let store = Store::at(root.join(".repro"));
    let mut base = store.get_record("builds", &key).unwrap().unwrap();
    base.as_object_mut().unwrap().remove(repro::store::SEAL);
    // Each edit is filed under the key its inputs hash to, so only the field is wrong.
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "a path that leaves the tree",
            Box::new(|r: &mut Value| {
                let files = r["inputs"]["files"].as_object_mut().unwrap();
                let d = files.remove("src/k.txt").unwrap();
                files.insert("../k.txt".into(), d);
            }),
            "`inputs.files` names \"../k.txt\", not a relative path",
        ),
        (
            "a digest that is not one",
            Box::new(|r: &mut Value| r["inputs"]["files"]["src/k.txt"] = json!("zz")),
            "gives \"zz\" for src/k.txt, not a sha256",
        ),
        (
            "an output outside the tree",
            Box::new(|r: &mut Value| {
                let outs = r["outputs"].as_object_mut().unwrap();
                let o = outs.remove("out.bin").unwrap();
                outs.insert("/etc/out.bin".into(), o);
            }),
            "`outputs` names \"/etc/out.bin\", not a relative path",
        ),
        (
            "an output digest that is not one",
            Box::new(|r: &mut Value| r["outputs"]["out.bin"]["sha256"] = json!("0x1")),
            "gives \"0x1\" for out.bin, not a sha256",
        ),
        (
            "a commit that is not one",
            Box::new(|r: &mut Value| r["commit"] = json!("HEAD")),
            "`commit` is \"HEAD\", not a 40-digit hex commit",
        ),
    ];
    for (what, edit, message) in cases {
        let mut rec = base.clone();
        edit(&mut rec);
        let id = key_of(&rec["inputs"]);
        store.put_record("builds", &id, &rec).unwrap();
        let (code, out, err) = run(tmp.path(), &root, &["replay", &id[..12]]);
        assert_eq!(code, 1, "{what}: {out}{err}");
        assert!(err.contains(message), "{what}: {err}");
        std::fs::remove_file(root.join(format!(".repro/builds/{id}.json"))).unwrap();
    }
    // A record whose inputs do not hash to its file name is refused as such.
    let mut rec = base.clone();
    rec["inputs"]["files"]["src/k.txt"] = json!("ab".repeat(32));
    let wrong = "ef".repeat(32);
    store.put_record("builds", &wrong, &rec).unwrap();
    let (code, _, err) = run(tmp.path(), &root, &["replay", &wrong[..12]]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("do not hash to the record's key"), "{err}");
}

#[test]
fn a_bundle_missing_what_a_result_needs_is_refused_before_anything_runs() {
    let (tmp, root) = cmd_repo();
    let (key, _) = build(tmp.path(), &root);
    let (_, command) = command_result(tmp.path(), &root);
    let id = recipe_result(&root, &command, &key, |_| {});
    let bundle = tmp.path().join("b.tar.zst");
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &[
            "bundle",
            "create",
            &id[..12],
            "-o",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    // Rewritten the way an attacker (or a careless hand) would: a fresh, consistent MANIFEST.
    let without = |drop: &dyn Fn(&str) -> bool, name: &str| {
        let entries: Vec<repro::archive::Entry> = repro::archive::read(&bundle)
            .unwrap()
            .into_iter()
            .filter(|e| e.path != repro::archive::MANIFEST && !drop(&e.path))
            .collect();
        let to = tmp.path().join(name);
        repro::archive::write(&to, entries).unwrap();
        to
    };
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let replay = |b: &Path| {
        run(
            tmp.path(),
            &empty,
            &[
                "replay",
                &id[..12],
                "--allow-commands",
                "--bundle",
                b.to_str().unwrap(),
            ],
        )
    };
    let no_build = without(&|p| p.starts_with("builds/"), "no-build.tar.zst");
    let (code, out, err) = replay(&no_build);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(
            "the bundle holds no build record for this result, so its sources cannot be checked"
        ),
        "{err}"
    );
    let no_sources = without(&|p| p.starts_with("source/"), "no-sources.tar.zst");
    let (code, out, err) = replay(&no_sources);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("the bundle holds no sources for commit"),
        "{err}"
    );

    // A record that is not JSON at all.
    let mut entries: Vec<repro::archive::Entry> = repro::archive::read(&bundle)
        .unwrap()
        .into_iter()
        .filter(|e| e.path != repro::archive::MANIFEST)
        .collect();
    let rec = entries
        .iter_mut()
        .find(|e| e.path.starts_with("results/"))
        .unwrap();
    rec.bytes = b"{ not json".to_vec();
    let broken = tmp.path().join("broken.tar.zst");
    repro::archive::write(&broken, entries).unwrap();
    let (code, out, err) = replay(&broken);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "results/{id}.json in the bundle is not a valid record"
        )),
        "{err}"
    );
    assert!(err.contains("nothing was built or run"), "{err}");
    assert!(!empty.join("out.bin").exists());
}
