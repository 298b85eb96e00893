//! Hostile and mistaken input: output paths that are links, devices, FIFOs or
//! directories; input files that are devices, FIFOs, links to them or directories; a
//! repro.toml that cannot be read; empty names; and `REPRO_*` limits that are not numbers.
//! Each test failed before the fix (a regular file put in place of the device, a hang, an
//! out-of-memory kill, an ignored value, a nameless record).

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{outcome, repo_with, repro, run_in};

/// A command recipe that needs no compiler.
const RECIPE: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"cp src/k.txt out.bin\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n";

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a plain mkfifo on a path of the test's own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A command bench with one export, as the user would write it.
fn bench_export(tmp: &Path, root: &Path, to: &str) -> (i32, String, String) {
    run_in(
        tmp,
        root,
        &[
            "bench",
            "--command",
            "echo '{\"ms\": 1.5}'",
            "--name",
            "k",
            "--metric",
            "json:ms",
            "--unit",
            "ms",
            "--runs",
            "3",
            "-q",
            "--export-json",
            to,
        ],
    )
}

#[test]
fn an_output_path_keeps_its_link_and_writes_into_devices_and_pipes() {
    let (tmp, root) = repo_with(&[("a.txt", "1")]);
    // /dev/stdout: the export is printed, and /dev/stdout is still the link it was.
    let (code, out, err) = bench_export(tmp.path(), &root, "/dev/stdout");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"median\""), "{out}");
    assert!(
        std::fs::symlink_metadata("/dev/stdout")
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // A link to a file: the file gets the export, the link stays.
    let real = root.join("real.json");
    std::fs::write(&real, "old").unwrap();
    std::os::unix::fs::symlink("real.json", root.join("link.json")).unwrap();
    let (code, out, err) = bench_export(tmp.path(), &root, "link.json");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        std::fs::read_to_string(&real)
            .unwrap()
            .contains("\"median\"")
    );
    assert!(
        std::fs::symlink_metadata(root.join("link.json"))
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // A FIFO with a reader: the reader gets it, and the FIFO is still a FIFO.
    let fifo = root.join("pipe");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let (code, out, err) = bench_export(tmp.path(), &root, "pipe");
    assert_eq!(code, 0, "{out}{err}");
    assert!(reader.join().unwrap().contains("\"median\""));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );

    // A directory: exit 2, naming it.
    std::fs::create_dir(root.join("outdir")).unwrap();
    let (code, _, err) = bench_export(tmp.path(), &root, "outdir");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("outdir is a directory"), "{err}");
}

/// An output never replaces what repro keeps or what the command reads: an export (or a
/// plot) inside the store, over a compare's nvbench operand or into its sample directory,
/// and two exports to one file are refused (exit 2, naming the option and the path) before
/// anything is written, and every record still checks.
#[test]
fn outputs_never_replace_the_stores_records_the_inputs_or_each_other() {
    let (tmp, root) = repo_with(&[("a.txt", "1")]);
    let (code, out, err) = bench_export(tmp.path(), &root, "first.json");
    assert_eq!(code, 0, "{out}{err}");
    let results: Vec<_> = std::fs::read_dir(root.join(".repro/results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let record = results[0].clone();
    let before = std::fs::read(&record).unwrap();
    let id = record.file_stem().unwrap().to_str().unwrap().to_string();
    let rel = format!(".repro/results/{id}.json");
    // Into the store: a record by its path, by a link to it, or a new file there.
    std::os::unix::fs::symlink(&rel, root.join("to-record")).unwrap();
    for to in [
        rel.as_str(),
        "to-record",
        ".repro/new.csv",
        "sub/../.repro/x.md",
    ] {
        let (code, _, err) = bench_export(tmp.path(), &root, to);
        assert_eq!(code, 2, "{to}: {err}");
        assert!(
            err.contains("--export-json") && err.contains("inside the repro store"),
            "{to}: {err}"
        );
        let (code, _, err) = run_in(
            tmp.path(),
            &root,
            &["compare", &id, &id, "--export-csv", to],
        );
        assert_eq!(code, 2, "{to}: {err}");
        assert!(
            err.contains("--export-csv") && err.contains("inside the repro store"),
            "{to}: {err}"
        );
    }
    let (code, _, err) = run_in(tmp.path(), &root, &["plot", "k", "-o", ".repro/p.svg"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("inside the repro store"), "{err}");
    assert_eq!(std::fs::read(&record).unwrap(), before);
    assert!(!root.join(".repro/new.csv").exists() && !root.join(".repro/p.svg").exists());
    // Over an nvbench operand, or into its sample directory.
    std::fs::write(root.join("nv.json"), "{}").unwrap();
    for to in ["nv.json", "./nv.json", "nv.json-bin/0.bin"] {
        let (code, _, err) = run_in(
            tmp.path(),
            &root,
            &["compare", "nv.json", &id, "--export-json", to],
        );
        assert_eq!(code, 2, "{to}: {err}");
        assert!(err.contains("which this command reads"), "{to}: {err}");
        assert_eq!(std::fs::read_to_string(root.join("nv.json")).unwrap(), "{}");
    }
    // Two exports to one file, however written.
    let (code, _, err) = run_in(
        tmp.path(),
        &root,
        &[
            "compare",
            &id,
            &id,
            "--export-json",
            "o.txt",
            "--export-markdown",
            "./o.txt",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--export-json and --export-markdown both name ./o.txt"),
        "{err}"
    );
    assert!(!root.join("o.txt").exists());
    let (code, out, err) = run_in(tmp.path(), &root, &["store", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// A stored result that does not read (edited under its seal, or cut short) is named by its
/// file wherever it is asked for by ID: show, compare and bundle create (which called it
/// absent).
#[test]
fn a_damaged_record_asked_for_is_named_by_its_file() {
    let (tmp, root) = repo_with(&[("a.txt", "1")]);
    let (code, out, err) = bench_export(tmp.path(), &root, "first.json");
    assert_eq!(code, 0, "{out}{err}");
    let path = std::fs::read_dir(root.join(".repro/results"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let id = path.file_stem().unwrap().to_str().unwrap().to_string();
    let text = std::fs::read_to_string(&path).unwrap();
    for (damage, says) in [
        (
            text.replacen("\"k\"", "\"k2\"", 1),
            "its fields do not hash to its record-sha256",
        ),
        (text[..text.len() / 2].to_string(), "not valid JSON"),
    ] {
        std::fs::write(&path, &damage).unwrap();
        let named = format!("results/{id}.json: {says}");
        for args in [
            vec!["show", &id[..12]],
            vec!["compare", &id[..12], &id[..12]],
            vec!["bundle", "create", &id[..12], "-o", "b.tar.zst"],
        ] {
            let (code, out, err) = run_in(tmp.path(), &root, &args);
            assert_eq!(code, 2, "{args:?}: {out}{err}");
            assert!(err.contains(&named), "{args:?}: {err}");
        }
    }
}

#[test]
fn inputs_that_are_devices_fifos_or_directories_are_refused_at_once() {
    let (tmp, root) = repo_with(&[
        ("recipes/ok.toml", RECIPE),
        ("src/k.txt", "k\n"),
        (".gitignore", "out.bin\n"),
    ]);
    std::fs::create_dir(root.join("somedir")).unwrap();
    mkfifo(&root.join("recipes/ff.toml"));
    std::os::unix::fs::symlink("/dev/zero", root.join("recipes/z.toml")).unwrap();
    std::fs::create_dir(root.join("lockfiles")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", root.join("lockfiles/zz.toml")).unwrap();
    let start = Instant::now();
    for (args, names) in [
        (
            &["plot", "--bisect", "/dev/zero", "-o", "x.svg"][..],
            "/dev/zero",
        ),
        (
            &["plot", "--bisect", "somedir/", "-o", "x.svg"][..],
            "somedir",
        ),
        (&["env", "check", "--lock", "/dev/zero"][..], "/dev/zero"),
        (&["build", "ff"][..], "recipes/ff.toml"),
        (&["build", "z"][..], "recipes/z.toml"),
        (&["bundle", "verify", "somedir"][..], "somedir"),
        (&["bundle", "verify", "."][..], "failed to verify ."),
    ] {
        let mut cmd = repro(tmp.path());
        cmd.arg("-C")
            .arg(&root)
            .args(args)
            .timeout(Duration::from_secs(60));
        let (code, out, err) = outcome(&mut cmd);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(err.contains("hint:"), "{args:?}: {err}");
    }
    // `build --all` meets the FIFO and the link among good recipes: it ends, with 2.
    let mut cmd = repro(tmp.path());
    cmd.arg("-C")
        .arg(&root)
        .args(["build", "--all"])
        .timeout(Duration::from_secs(60));
    let (code, out, err) = outcome(&mut cmd);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "nothing hung or read forever"
    );
}

#[test]
fn a_repro_toml_that_cannot_be_read_is_an_error_not_an_absence() {
    let (tmp, root) = repo_with(&[
        ("recipes/ok.toml", RECIPE),
        ("src/k.txt", "k\n"),
        (".gitignore", "out.bin\n"),
    ]);
    std::fs::write(root.join("repro.toml"), b"schema = 1\n# caf\xe9\n").unwrap();
    let (code, out, err) = run_in(tmp.path(), &root, &["build", "ok"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("repro.toml: not valid UTF-8 (line 2)"),
        "{err}"
    );
    std::fs::remove_file(root.join("repro.toml")).unwrap();
    std::fs::create_dir(root.join("repro.toml")).unwrap();
    let (code, out, err) = run_in(tmp.path(), &root, &["build", "ok"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("repro.toml: cannot be read"), "{err}");
}

#[test]
fn empty_names_are_usage_errors_naming_the_option() {
    let (tmp, root) = repo_with(&[("a.txt", "1")]);
    for (args, option) in [
        (&["bench", "--command", "", "--name", "x"][..], "--command"),
        (&["bench", "--command", "true", "--name", ""][..], "--name"),
        (&["plot", "", "-o", "x.svg"][..], "NAME"),
        (&["plot", "k", "-o", ""][..], "--output"),
        (&["log", "--recipe", ""][..], "--recipe"),
        (&["compare", "", "x"][..], "<A>"),
    ] {
        let (code, out, err) = run_in(tmp.path(), &root, args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(option), "{args:?}: {err}");
    }
    // Nothing was recorded.
    let (_, out, _) = run_in(tmp.path(), &root, &["--json", "log"]);
    assert!(!out.contains("\"id\""), "{out}");
}

#[test]
fn a_limit_that_is_not_a_number_is_named_with_its_value() {
    let (tmp, root) = repo_with(&[("a.txt", "1")]);
    std::fs::write(root.join("b.tar.zst"), b"not a bundle").unwrap();
    for value in ["abc", "-1"] {
        let mut cmd = repro(tmp.path());
        cmd.arg("-C")
            .arg(&root)
            .args(["bundle", "verify", "b.tar.zst"])
            .env("REPRO_BUNDLE_MAX_BYTES", value);
        let (code, out, err) = outcome(&mut cmd);
        assert_eq!(code, 2, "{out}{err}");
        assert!(
            err.contains(&format!("REPRO_BUNDLE_MAX_BYTES=\"{value}\"")),
            "{err}"
        );
    }
}
