//! Issue 14: a stranger's bundle cannot hurt you, and the store survives faults and hostile
//! input. One test (or more) per numbered finding of the issue; each failed before the fix.
//! Command recipes are used where a compiler is not the point, so these run without NVRTC.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{git, repo_with, repro};
use repro::archive::{self, Entry};
use serde_json::Value;

/// A command recipe that copies one input to one output; `extra` is appended to the script.
fn command_recipe(extra: &str) -> String {
    format!(
        "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"cp src/k.txt out.bin{extra}\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n"
    )
}

fn cmd_repo() -> (tempfile::TempDir, PathBuf) {
    repo_with(&[
        ("recipes/cmd.toml", &command_recipe("")),
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

fn build_key(tmp: &Path, root: &Path) -> String {
    let (code, out, err) = run(tmp, root, &["build", "--json", "cmd"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["builds"][0]["key"].as_str().unwrap().to_string()
}

fn make_bundle(tmp: &Path, root: &Path, id: &str) -> PathBuf {
    let bundle = tmp.join("paper.tar.zst");
    let (code, out, err) = run(
        tmp,
        root,
        &["bundle", "create", id, "-o", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}{err}");
    bundle
}

/// `repro replay ID --bundle BUNDLE --allow-commands`, run in `dir`.
fn replay_bundle(tmp: &Path, dir: &Path, id: &str, bundle: &Path) -> (i32, String, String) {
    run(
        tmp,
        dir,
        &[
            "replay",
            id,
            "--bundle",
            bundle.to_str().unwrap(),
            "--allow-commands",
        ],
    )
}

/// The members of a bundle without its MANIFEST.
fn members(bundle: &Path) -> Vec<Entry> {
    archive::read(bundle)
        .unwrap()
        .into_iter()
        .filter(|e| e.path != archive::MANIFEST)
        .collect()
}

/// Writes a tampered bundle the way an attacker would: a fresh, consistent MANIFEST.
fn rewrite(to: &Path, entries: Vec<Entry>) {
    archive::write(to, entries).unwrap();
}

fn replace_in(entries: &mut [Entry], path_suffix: &str, from: &str, to: &str) {
    let e = entries
        .iter_mut()
        .find(|e| e.path.ends_with(path_suffix))
        .unwrap_or_else(|| panic!("no member ending in {path_suffix}"));
    let text = String::from_utf8(e.bytes.clone()).unwrap();
    assert!(text.contains(from), "{} lacks {from}", e.path);
    e.bytes = text.replace(from, to).into_bytes();
}

// 1. Code execution -------------------------------------------------------------------

#[test]
fn finding_1_a_bundles_command_never_runs_unchecked_or_without_consent() {
    let (tmp, root) = cmd_repo();
    let key = build_key(tmp.path(), &root);
    let bundle = make_bundle(tmp.path(), &root, &key[..12]);
    let elsewhere = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("pwned");

    // The attacker edits the bundled recipe (the file, and the text the build record keeps)
    // to run something else, and re-makes MANIFEST.
    let evil_cmd = format!("touch {}; cp src/k.txt out.bin", marker.display());
    let mut entries = members(&bundle);
    replace_in(
        &mut entries,
        "recipes/cmd.toml",
        "cp src/k.txt out.bin",
        &evil_cmd,
    );
    let rec = entries
        .iter_mut()
        .find(|e| e.path == format!("builds/{key}.json"))
        .unwrap();
    let mut v: Value = serde_json::from_slice(&rec.bytes).unwrap();
    if let Some(t) = v["recipe-text"].as_str() {
        v["recipe-text"] = t.replace("cp src/k.txt out.bin", &evil_cmd).into();
    }
    rec.bytes = serde_json::to_vec_pretty(&v).unwrap();
    let evil = tmp.path().join("evil.tar.zst");
    rewrite(&evil, entries.clone());
    assert_eq!(
        run(
            tmp.path(),
            elsewhere.path(),
            &["bundle", "verify", evil.to_str().unwrap()]
        )
        .0,
        0
    );
    let (code, out, err) = replay_bundle(tmp.path(), elsewhere.path(), &key[..12], &evil);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("do not match build record") && err.contains("recipe `cmd`"),
        "{err}"
    );
    assert!(!marker.exists(), "the edited command ran");

    // The same edit made in the record's key inputs too: the key no longer recomputes.
    replace_in(
        &mut entries,
        &format!("builds/{key}.json"),
        "cp src/k.txt out.bin",
        &evil_cmd,
    );
    rewrite(&evil, entries);
    let (code, out, err) = replay_bundle(tmp.path(), elsewhere.path(), &key[..12], &evil);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("do not hash to the record's key"), "{err}");
    assert!(!marker.exists(), "the edited command ran");

    // An honest bundle's command runs only with --allow-commands, after it is shown.
    let (code, out, err) = run(
        tmp.path(),
        elsewhere.path(),
        &["replay", &key[..12], "--bundle", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("runs a command: sh -c 'cp src/k.txt out.bin'"),
        "{err}"
    );
    assert!(err.contains("--allow-commands"), "{err}");
    let (code, out, err) = replay_bundle(tmp.path(), elsewhere.path(), &key[..12], &bundle);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("running the recipe's command: sh -c"), "{err}");
    assert!(out.contains("verdict: reproduced"), "{out}");
}

/// A bundle whose sources are not what its build record was built from (a source file
/// swapped, or removed, under a fresh MANIFEST) fails `bundle verify`, naming the record
/// and the file, as `replay` refuses it: verify said ok and replay then failed.
#[test]
fn bundle_verify_checks_the_sources_against_the_build_record() {
    let (tmp, root) = cmd_repo();
    let key = build_key(tmp.path(), &root);
    let bundle = make_bundle(tmp.path(), &root, &key[..12]);
    let commit = git(&root, &["rev-parse", "HEAD"]);
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &["bundle", "verify", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}{err}");
    let member = format!("builds/{key}.json");
    let source = format!("source/{commit}/src/k.txt");
    let mut swapped = members(&bundle);
    replace_in(&mut swapped, &source, "kernel bytes", "other bytes");
    let mut removed = members(&bundle);
    removed.retain(|e| e.path != source);
    for (name, entries, says) in [
        ("swapped", swapped, "(not the sources it was built from)"),
        ("removed", removed, "which the bundle lacks"),
    ] {
        let evil = tmp.path().join(format!("{name}.tar.zst"));
        rewrite(&evil, entries);
        let (code, out, err) = run(
            tmp.path(),
            &root,
            &["bundle", "verify", evil.to_str().unwrap()],
        );
        assert_eq!(code, 1, "{name}: {out}{err}");
        assert!(
            out.contains(&format!("INVALID  {member}: ")),
            "{name}: {out}"
        );
        assert!(out.contains(&source) && out.contains(says), "{name}: {out}");
        assert!(
            out.contains("0 differ, 0 missing, 0 extra, 1 invalid records"),
            "{name}: {out}"
        );
    }
}

// 2. Paths from records -----------------------------------------------------------------

#[test]
fn finding_2_record_fields_are_validated_before_use() {
    let (tmp, root) = cmd_repo();
    let key = build_key(tmp.path(), &root);
    let bundle = make_bundle(tmp.path(), &root, &key[..12]);
    let commit = git(&root, &["rev-parse", "HEAD"]);
    let elsewhere = tempfile::tempdir().unwrap();

    // The sources moved outside `source/`, and the record pointing there with `../x`.
    let mut entries = members(&bundle);
    for e in entries.iter_mut() {
        if let Some(rest) = e.path.strip_prefix(&format!("source/{commit}/")) {
            e.path = format!("x/{rest}");
        }
    }
    replace_in(&mut entries, &format!("builds/{key}.json"), &commit, "../x");
    let evil = tmp.path().join("evil.tar.zst");
    rewrite(&evil, entries);
    let (code, out, err) = replay_bundle(tmp.path(), elsewhere.path(), &key[..12], &evil);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("`commit` is \"../x\", not a 40-digit hex commit"),
        "{err}"
    );
    assert!(!out.contains("reproduced"), "{out}");

    // A record whose key does not hash from its inputs, and a result name that is no key.
    for (from, to) in [
        ("\"src/k.txt\"", "\"src/../../k.txt\""),
        ("\"recipe\": \"cmd\"", "\"recipe\": \"../cmd\""),
    ] {
        let mut entries = members(&bundle);
        replace_in(&mut entries, &format!("builds/{key}.json"), from, to);
        rewrite(&evil, entries);
        let (code, out, err) = run(
            tmp.path(),
            elsewhere.path(),
            &[
                "replay",
                &key[..12],
                "--bundle",
                evil.to_str().unwrap(),
                "--allow-commands",
            ],
        );
        assert_eq!(code, 1, "{from}: {out}{err}");
        assert!(err.contains("nothing was built or run"), "{err}");
    }
}

// 3. Resource bombs ---------------------------------------------------------------------

#[test]
fn finding_3_bundle_bombs_and_huge_sweeps_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bomb = tmp.path().join("bomb.tar.zst");
    archive::write(
        &bomb,
        vec![Entry {
            path: "zeros".into(),
            bytes: vec![0; 32 << 20],
            executable: false,
        }],
    )
    .unwrap();
    assert!(std::fs::metadata(&bomb).unwrap().len() < 64 << 10);
    let out = repro(tmp.path())
        .env("REPRO_BUNDLE_MAX_BYTES", "1000000")
        .args(["bundle", "verify"])
        .arg(&bomb)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unpacks to more than 1000000 bytes"), "{err}");
    assert!(err.contains("REPRO_BUNDLE_MAX_BYTES"), "{err}");

    // Three lists of 100 values: a million points.
    let list = (1..=100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let recipe = format!(
        "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[params]\na = [{list}]\nb = [{list}]\nc = [{list}]\n"
    );
    let (tmp, root) = repo_with(&[
        ("recipes/r.toml", &recipe),
        ("k.cu", "extern \"C\" __global__ void k() {}\n"),
    ]);
    let (code, out, err) = run(tmp.path(), &root, &["build", "r"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("recipes/r.toml:7:1") && err.contains("sweep of 1000000 points"),
        "{err}"
    );
}

// 4. Store races, and the acceptance's concurrency test, are in tests/store/concurrency.rs.

// 5. Stuck states -----------------------------------------------------------------------

#[test]
fn finding_5_a_truncated_record_is_quarantined_and_rebuilt_without_force() {
    let (tmp, root) = cmd_repo();
    let key = build_key(tmp.path(), &root);
    let rec = root.join(format!(".repro/builds/{key}.json"));
    let bytes = std::fs::read(&rec).unwrap();
    std::fs::write(&rec, &bytes[..bytes.len() / 2]).unwrap();
    let (code, out, err) = run(tmp.path(), &root, &["build", "cmd"]);
    assert_eq!(code, 0, "{out}{err}");
    let quarantined: Vec<_> = std::fs::read_dir(root.join(".repro/quarantine/builds"))
        .unwrap()
        .collect();
    assert_eq!(quarantined.len(), 1);
    assert!(std::fs::read(&rec).unwrap().len() > bytes.len() / 2);
    assert_eq!(run(tmp.path(), &root, &["store", "verify"]).0, 0);

    // gc moves a damaged record aside instead of keeping it and deleting its artifact.
    std::fs::write(&rec, b"{").unwrap();
    let (code, out, err) = run(tmp.path(), &root, &["store", "gc"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("1 damaged records moved to quarantine/"),
        "{out}"
    );
    assert!(!rec.exists());
    assert_eq!(run(tmp.path(), &root, &["build", "cmd"]).0, 0);
    assert_eq!(run(tmp.path(), &root, &["store", "verify"]).0, 0);
}

// 6. Blind spots ------------------------------------------------------------------------

#[test]
fn finding_6_store_verify_covers_results_and_recipes() {
    let (tmp, root) = cmd_repo();
    build_key(tmp.path(), &root);
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &["bench", "--command", "true", "--runs", "3"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(run(tmp.path(), &root, &["store", "verify"]).0, 0);
    let results: Vec<PathBuf> = std::fs::read_dir(root.join(".repro/results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(results.len(), 1);
    let text = std::fs::read_to_string(&results[0]).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let median = v["summary"]["median"].as_f64().unwrap();
    v["summary"]["median"] = (median / 2.0).into();
    std::fs::write(&results[0], serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("results/") && out.contains("edited"), "{out}");

    std::fs::write(&results[0], &text[..text.len() / 3]).unwrap();
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("damaged record"), "{out}");
    std::fs::write(&results[0], &text).unwrap();

    std::fs::write(
        root.join(".repro/recipes/cmd.json"),
        format!(
            "{{\"schema\": 1, \"recipe\": \"cmd\", \"key\": \"{}\"}}",
            "0".repeat(64)
        ),
    )
    .unwrap();
    let (code, out, _) = run(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("recipes/cmd.json") && out.contains("not in the store"),
        "{out}"
    );
}

// 7. Errors -----------------------------------------------------------------------------

#[test]
fn finding_7_errors_are_user_errors_with_locations() {
    let tmp = tempfile::tempdir().unwrap();
    // A duplicate member: a hand-made bundle, not a bug (was exit 70).
    let dup = tmp.path().join("dup.tar.zst");
    let mut b = tar::Builder::new(Vec::new());
    for _ in 0..2 {
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        b.append_data(&mut h, "a.txt", &b"x"[..]).unwrap();
    }
    std::fs::write(
        &dup,
        zstd::encode_all(b.into_inner().unwrap().as_slice(), 3).unwrap(),
    )
    .unwrap();
    let out = repro(tmp.path())
        .args(["bundle", "verify"])
        .arg(&dup)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("given twice") && !err.contains("bug"), "{err}");

    // Serde's names for repro's internals do not reach the user.
    let lock = tmp.path().join("l.toml");
    std::fs::write(&lock, "schema = 1\n[fields]\n\"gpu.name\" = 5\n").unwrap();
    let out = repro(tmp.path())
        .args(["env", "check", "--lock"])
        .arg(&lock)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("l.toml:3:") && !err.contains("RawRule"),
        "{err}"
    );

    // NaN and negative tolerances, low > high: refused with file, line and key.
    let base = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[params]\nn = 4\n[run]\nkernel = \"k\"\ngrid = 1\nblock = 1\n";
    for (tail, want) in [
        (
            "args = [{ name = \"a\", buffer = \"f32\", count = \"n\", output = true }]\n[check]\nkernel = \"k\"\natol = nan\n",
            "`atol` is NaN",
        ),
        (
            "args = [{ name = \"a\", buffer = \"f32\", count = \"n\", output = true }]\n[check]\nkernel = \"k\"\nrtol = -1.0\n",
            "`rtol` is -1",
        ),
        (
            "args = [{ name = \"a\", buffer = \"f32\", count = \"n\", init = \"uniform\", low = 2.0, high = 1.0 }]\n",
            "must not exceed `high`",
        ),
    ] {
        let (tmp, root) = repo_with(&[("recipes/r.toml", &format!("{base}{tail}")), ("k.cu", "x")]);
        let (code, out, err) = run(tmp.path(), &root, &["build", "r"]);
        assert_eq!(code, 2, "{tail}: {out}{err}");
        assert!(
            err.contains("recipes/r.toml:") && err.contains(want),
            "{err}"
        );
    }

    // An expression that fails only when evaluated names the file, line, column and key.
    let (tmp, root) = repo_with(&[
        (
            "recipes/r.toml",
            &format!(
                "{}args = [{{ name = \"a\", buffer = \"f32\", count = \"n\", output = true }}]\n",
                base.replace("grid = 1", "grid = \"ceil_div(n, 0)\"")
            ),
        ),
        ("k.cu", "x"),
    ]);
    let (code, out, err) = run(tmp.path(), &root, &["bench", "r"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("recipes/r.toml:11:8: [run] grid: in `ceil_div(n, 0)`: division by zero"),
        "{err}"
    );

    // A 200 KB expression is quoted shortened.
    let long = format!("n{}", " + 1".repeat(50_000));
    let (tmp, root) = repo_with(&[
        (
            "recipes/r.toml",
            &format!(
                "{base}args = [{{ name = \"a\", buffer = \"f32\", count = \"{long} + m\", init = \"zeros\" }}]\n"
            ),
        ),
        ("k.cu", "x"),
    ]);
    let (code, out, err) = run(tmp.path(), &root, &["build", "r"]);
    assert_eq!(code, 2, "{out}");
    assert!(err.len() < 2000, "{} bytes of error", err.len());
    assert!(
        err.contains("recipes/r.toml:13:") && err.contains("…"),
        "{err}"
    );
}

// 8. Processes --------------------------------------------------------------------------

#[test]
fn finding_8_no_child_is_left_behind() {
    let (tmp, root) = cmd_repo();
    // A backgrounded grandchild no longer holds repro for its whole life.
    let start = Instant::now();
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &[
            "bench",
            "--command",
            "sleep 6 & true",
            "--runs",
            "2",
            "--timeout",
            "3s",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    // After repro is SIGKILLed, its child's children die too.
    let pidfile = tmp.path().join("pid");
    let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("repro"))
        .env("XDG_CACHE_HOME", tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["bench", "--command", &script, "--runs", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid = loop {
        if let Ok(p) = std::fs::read_to_string(&pidfile)
            && let Ok(p) = p.trim().parse::<u32>()
        {
            break p;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Path::new(&format!("/proc/{pid}")).exists() {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.contains(") Z ") {
            break; // dead, waiting for its new parent to reap it
        }
        assert!(
            Instant::now() < deadline,
            "the grandchild {pid} outlived repro"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// 9. Leftovers and modes ----------------------------------------------------------------

#[test]
fn finding_9_store_ignored_modes_umask_show_fails_and_no_dangling_writes() {
    let (tmp, root) = cmd_repo();
    let key = build_key(tmp.path(), &root);
    let status = git(&root, &["status", "--porcelain"]);
    assert!(!status.contains(".repro"), "{status}");

    let bundle = make_bundle(tmp.path(), &root, &key[..12]);
    let mode = std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode,
        0o666 & !repro::fsutil::umask(),
        "bundle mode {mode:o}"
    );

    // `bundle show` on a tampered bundle: a warning and exit 1.
    let mut b = tar::Builder::new(Vec::new());
    for e in archive::read(&bundle).unwrap() {
        let mut h = tar::Header::new_gnu();
        let bytes = if e.path == "README.md" {
            b"# all claims verified\n".to_vec()
        } else {
            e.bytes
        };
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, &e.path, bytes.as_slice()).unwrap();
    }
    let tampered = tmp.path().join("t.tar.zst");
    std::fs::write(
        &tampered,
        zstd::encode_all(b.into_inner().unwrap().as_slice(), 3).unwrap(),
    )
    .unwrap();
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &["bundle", "show", tampered.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("does not match its MANIFEST"), "{err}");

    // -o through a dangling symlink is refused; nothing appears at its target.
    let link = tmp.path().join("link.tar.zst");
    let target = tmp.path().join("elsewhere.tar.zst");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &["bundle", "create", &key[..12], "-o", link.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(!target.exists());
}

// 10. Dirty trees -----------------------------------------------------------------------

#[test]
fn finding_10_dirty_builds_are_marked_and_not_bundled_or_replayed() {
    let (tmp, root) = cmd_repo();
    // A file the build does not read (an untracked lockfile, notes) does not make it dirty.
    std::fs::write(root.join("NOTES-untracked.md"), "scratch\n").unwrap();
    let key = build_key(tmp.path(), &root);
    let rec: Value = serde_json::from_slice(
        &std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap(),
    )
    .unwrap();
    assert!(rec["dirty"].is_null(), "{rec}");
    std::fs::write(root.join("src/k.txt"), "uncommitted\n").unwrap();
    let key = build_key(tmp.path(), &root);
    let rec: Value = serde_json::from_slice(
        &std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap(),
    )
    .unwrap();
    assert!(
        rec["dirty"].as_str().is_some_and(|d| d.len() == 64),
        "{rec}"
    );
    let bundle = tmp.path().join("b.tar.zst");
    let (code, _, err) = run(
        tmp.path(),
        &root,
        &[
            "bundle",
            "create",
            &key[..12],
            "-o",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("uncommitted changes"), "{err}");
    assert!(!bundle.exists());
    let (code, out, err) = run(tmp.path(), &root, &["replay", &key[..12]]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("uncommitted changes"), "{err}");
    // The refusal's hint, followed: commit, build again (a cache hit, the same key), bundle.
    git(&root, &["commit", "-qam", "the change"]);
    assert_eq!(build_key(tmp.path(), &root), key);
    let rec: Value = serde_json::from_slice(
        &std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap(),
    )
    .unwrap();
    assert!(rec["dirty"].is_null(), "{rec}");
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &[
            "bundle",
            "create",
            &key[..12],
            "-o",
            bundle.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    // repro.toml chooses the compiler and a replay reads it at the commit: an uncommitted
    // one makes the build dirty, as an uncommitted source does.
    std::fs::write(root.join("repro.toml"), "schema = 1\n").unwrap();
    std::fs::write(root.join("src/k.txt"), "committed again\n").unwrap();
    git(&root, &["commit", "-qm", "source", "--", "src/k.txt"]);
    let key = build_key(tmp.path(), &root);
    let rec: Value = serde_json::from_slice(
        &std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap(),
    )
    .unwrap();
    assert!(rec["dirty"].is_string(), "{rec}");

    // A failed build replays as "nothing to compare", never as "reproduced".
    let (tmp, root) = repo_with(&[
        ("recipes/cmd.toml", &command_recipe("; exit 3")),
        ("src/k.txt", "x\n"),
        (".gitignore", "out.bin\n"),
    ]);
    let (code, out, _) = run(tmp.path(), &root, &["build", "--json", "cmd"]);
    assert_ne!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    let key = v["builds"][0]["key"].as_str().unwrap().to_string();
    let (code, out, err) = run(tmp.path(), &root, &["replay", &key[..12]]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("verdict: nothing to compare"), "{out}");
}

/// `bundle verify` checks every record as replay would (fields, schema, ID against content),
/// not only the files against MANIFEST, and `bundle show` warns of the same; a failed build
/// record replays as "nothing to compare", never as reproduced.
#[test]
fn bundle_verify_checks_every_record_and_a_failed_build_is_not_reproduced() {
    let (tmp, root) = cmd_repo();
    let key = build_key(tmp.path(), &root);
    let bundle = make_bundle(tmp.path(), &root, &key[..12]);
    let (code, out, err) = run(
        tmp.path(),
        &root,
        &["bundle", "verify", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 invalid records"), "{out}");
    let evil = tmp.path().join("evil.tar.zst");
    let member = format!("builds/{key}.json");
    let commit = git(&root, &["rev-parse", "HEAD"]);
    for (from, to, says) in [
        (
            commit.trim().to_string(),
            "HEAD~1".to_string(),
            "`commit` is \"HEAD~1\", not a 40-digit hex commit",
        ),
        (
            "\"schema\": 1".to_string(),
            "\"schema\": 9".to_string(),
            "has schema 9; this repro reads schema 1",
        ),
    ] {
        let mut entries = members(&bundle);
        replace_in(&mut entries, &member, &from, &to);
        rewrite(&evil, entries);
        let (code, out, err) = run(
            tmp.path(),
            &root,
            &["bundle", "verify", evil.to_str().unwrap()],
        );
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains(&format!("INVALID  {member}: ")), "{out}");
        assert!(out.contains(says), "{says}: {out}");
        assert!(
            out.contains("FAILED: ") && out.contains("1 invalid records"),
            "{out}"
        );
        let (code, out, err) = run(
            tmp.path(),
            &root,
            &["bundle", "show", evil.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{out}{err}");
        assert!(err.contains("records that fail their checks"), "{err}");
        let (code, out, err) = run(
            tmp.path(),
            &root,
            &["--json", "bundle", "verify", evil.to_str().unwrap()],
        );
        assert_eq!(code, 1, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["invalid-records"][0]["path"], member.as_str());
    }
    // Not JSON at all.
    let mut entries = members(&bundle);
    entries.iter_mut().find(|e| e.path == member).unwrap().bytes = b"{ not json".to_vec();
    rewrite(&evil, entries);
    let (code, out, _) = run(
        tmp.path(),
        &root,
        &["bundle", "verify", evil.to_str().unwrap()],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("is not JSON"), "{out}");

    // A build record marked failed (its key covers only its inputs, so it still checks).
    let mut entries = members(&bundle);
    replace_in(
        &mut entries,
        &member,
        "\"status\": \"ok\"",
        "\"status\": \"failed\"",
    );
    rewrite(&evil, entries);
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, out, err) = replay_bundle(tmp.path(), elsewhere.path(), &key[..12], &evil);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("the recorded build failed"), "{out}");
    assert!(out.contains("verdict: nothing to compare"), "{out}");
}
