//! `repro build`, `repro store` and `repro toolchain` end to end, with the real NVRTC.

use crate::common;

use std::path::Path;

use common::{git, kernel_repo, nvrtc_available, repo_with, repro};
use predicates::prelude::*;
use serde_json::Value;

fn build_json(cache: &Path, root: &Path, args: &[&str]) -> (i32, Value) {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .args(["build", "--json"])
        .args(args)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

fn key(v: &Value) -> String {
    v["builds"][0]["key"].as_str().unwrap().to_string()
}

#[test]
fn every_example_recipe_builds_and_a_second_build_is_a_cache_hit() {
    if !nvrtc_available() {
        return;
    }
    // The NVRTC recipes; the nvcc one (wmma_gemm_nvcc) needs its pinned toolchain
    // installed, which tests/toolchain/cli.rs does.
    const NVRTC: [&str; 5] = [
        "flash_attention",
        "reduction",
        "sgemm",
        "softmax",
        "vector_add",
    ];
    let (tmp, root) = kernel_repo();
    let (code, first) = build_json(tmp.path(), &root, &NVRTC);
    assert_eq!(code, 0, "{first}");
    let builds = first["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 5);
    for b in builds {
        assert_eq!(b["status"], "ok", "{b}");
        assert_eq!(b["cached"], false);
        assert!(b["outputs"]["cubin"]["bytes"].as_u64().unwrap() > 1000);
        assert!(b["outputs"]["ptx"]["bytes"].as_u64().unwrap() > 1000);
    }
    let (_, second) = build_json(tmp.path(), &root, &NVRTC);
    for (a, b) in builds.iter().zip(second["builds"].as_array().unwrap()) {
        assert_eq!(b["cached"], true);
        assert_eq!(a["key"], b["key"]);
        assert_eq!(a["outputs"], b["outputs"]);
    }
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "vector_add"])
        .assert()
        .success()
        .stdout(predicate::str::contains("cached"));
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["store", "verify"])
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 10 objects and 10 records"));
}

#[test]
fn two_checkouts_at_different_paths_give_identical_keys_and_bytes() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let other = tmp.path().join("elsewhere/deeper/clone");
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
    let (_, a) = build_json(tmp.path(), &root, &["flash_attention"]);
    let (_, b) = build_json(tmp.path(), &other, &["flash_attention"]);
    assert_eq!(key(&a), key(&b));
    // Each checkout has its own store, so the second was compiled, not copied.
    assert_eq!(b["builds"][0]["cached"], false);
    for kind in ["ptx", "cubin"] {
        let pa = a["builds"][0]["outputs"][kind]["path"].as_str().unwrap();
        let pb = b["builds"][0]["outputs"][kind]["path"].as_str().unwrap();
        assert_ne!(pa, pb);
        assert_eq!(
            std::fs::read(pa).unwrap(),
            std::fs::read(pb).unwrap(),
            "{kind} differs"
        );
    }
}

#[test]
fn mtimes_do_not_change_the_key_but_one_header_byte_does() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let (_, a) = build_json(tmp.path(), &root, &["softmax"]);
    // Touch every input: rewrite it with the same bytes (a new mtime).
    for f in ["kernels/softmax.cu", "kernels/common.cuh"] {
        let bytes = std::fs::read(root.join(f)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(root.join(f), bytes).unwrap();
    }
    let (_, b) = build_json(tmp.path(), &root, &["softmax"]);
    assert_eq!(key(&a), key(&b));
    assert_eq!(b["builds"][0]["cached"], true);

    // One byte of an included header (a comment) changes the key, and --explain says so.
    let header = root.join("kernels/common.cuh");
    let mut text = std::fs::read_to_string(&header).unwrap();
    text.push_str("// x\n");
    std::fs::write(&header, text).unwrap();
    let (_, c) = build_json(tmp.path(), &root, &["softmax", "--explain"]);
    assert_ne!(key(&a), key(&c));
    assert_eq!(
        c["builds"][0]["explain"],
        serde_json::json!(["file kernels/common.cuh changed"])
    );

    // A recipe option change is explained too.
    let recipe = root.join("recipes/softmax.toml");
    let t = std::fs::read_to_string(&recipe).unwrap().replace(
        "options = [\"--std=c++17\"]",
        "options = [\"--std=c++17\", \"-lineinfo\"]",
    );
    std::fs::write(&recipe, t).unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "softmax", "--explain"])
        .assert()
        .success()
        .stdout(predicate::str::contains("why: recipe: `options` changed from [\"--std=c++17\"] to [\"--std=c++17\",\"-lineinfo\"]"));
}

const BAD_KERNEL: &str = "extern \"C\" __global__ void k(float* a) {\n  a[0] = 1\n}\n";

fn recipe(source: &str, entries: &str) -> String {
    format!(
        "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"{source}\"\nentries = [{entries}]\ntarget = \"sm_90\"\n"
    )
}

#[test]
fn a_compile_error_is_shown_relative_recorded_and_reused() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = repo_with(&[
        ("kernels/bad.cu", BAD_KERNEL),
        ("recipes/bad.toml", &recipe("kernels/bad.cu", "\"k\"")),
    ]);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "bad"])
        .assert()
        .code(5);
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stdout.contains("bad              FAILED"), "{stdout}");
    // NVRTC reports the missing semicolon where it notices it: at the closing brace. The
    // compiler's log is a diagnostic: on stderr, not mixed into the list on stdout.
    assert!(
        stderr.contains("| kernels/bad.cu(3): error: expected a \";\""),
        "{stderr}"
    );
    assert!(!stdout.contains("error: expected"), "{stdout}");
    assert!(
        !stderr.contains(root.to_str().unwrap()),
        "absolute paths leak: {stderr}"
    );
    // The failure is a record: the second run does not compile again.
    let (code, v) = build_json(tmp.path(), &root, &["bad"]);
    assert_eq!(code, 5);
    assert_eq!(v["builds"][0]["cached"], true);
    assert_eq!(v["builds"][0]["status"], "failed");
    assert!(v["builds"][0]["log"].as_str().unwrap().contains("error"));
}

/// A source and a header that start with a UTF-8 byte-order mark build with NVRTC (which
/// takes the mark for a token), and the header on the source's first line is in the key.
#[test]
fn a_byte_order_mark_builds_with_nvrtc_and_hides_no_include() {
    if !nvrtc_available() {
        return;
    }
    let bom = "\u{feff}";
    let (tmp, root) = repo_with(&[
        (
            "kernels/b.cu",
            &format!(
                "{bom}#include \"b.h\"\nnamespace bomns {{\nextern \"C\" __global__ void bk(float* x) {{ x[0] = SCALE; }}\n}}\n"
            ),
        ),
        ("kernels/b.h", &format!("{bom}#define SCALE 2.0f\n")),
        ("recipes/b.toml", &recipe("kernels/b.cu", "\"bk\"")),
    ]);
    let (code, v) = build_json(tmp.path(), &root, &["b"]);
    assert_eq!(code, 0, "{v}");
    let before = key(&v);
    std::fs::write(
        root.join("kernels/b.h"),
        format!("{bom}#define SCALE 3.0f\n"),
    )
    .unwrap();
    let (code, v) = build_json(tmp.path(), &root, &["b"]);
    assert_eq!(code, 0, "{v}");
    assert_ne!(key(&v), before, "the header behind the mark is an input");
}

#[test]
fn a_missing_entry_point_fails_the_build() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = repo_with(&[
        (
            "k.cu",
            "extern \"C\" __global__ void real_one(float* a) { a[0] = 1; }\n",
        ),
        (
            "recipes/r.toml",
            &recipe("k.cu", "\"real_one\", \"imaginary\""),
        ),
    ]);
    let (code, v) = build_json(tmp.path(), &root, &["r"]);
    assert_eq!(code, 5);
    let log = v["builds"][0]["log"].as_str().unwrap();
    assert!(
        log.contains("no entry point `imaginary` (it has: real_one)"),
        "{log}"
    );
}

/// What code written for nvcc does, and NVRTC builds: headers that include each other behind
/// `#pragma once` and include guards. (A toolkit header included with quotes is left to the
/// compiler as `<...>` is: `inputs.rs`'s tests; NVRTC's wheel has no `cuda_fp16.h` to find.)
#[test]
fn guarded_include_cycles_build() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = repo_with(&[
        (
            "k.cu",
            "#include \"inc/a.h\"\nextern \"C\" __global__ void k(A* a, B* b) { a->v = b->w; }\n",
        ),
        (
            "inc/a.h",
            "#pragma once\n#include \"b.h\"\nstruct A { int v; };\n",
        ),
        (
            "inc/b.h",
            "#ifndef B_H\n#define B_H\n#include \"a.h\"\nstruct B { int w; };\n#endif\n",
        ),
        ("recipes/r.toml", &recipe("k.cu", "\"k\"")),
    ]);
    let (code, v) = build_json(tmp.path(), &root, &["r"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["builds"][0]["status"], "ok", "{v}");
}

#[test]
fn bad_inputs_get_clear_errors() {
    type Files<'a> = &'a [(&'a str, &'a str)];
    let cases: &[(Files, &str, i32)] = &[
        (
            &[("a.cu", "#include \"/etc/passwd\"\n")],
            "a.cu:1: include </etc/passwd> is an absolute path",
            5,
        ),
        (
            &[("a.cu", "#include \"../../../etc/passwd\"\n")],
            "a.cu:1: include \"../../../etc/passwd\" is outside the repository",
            5,
        ),
        (
            &[("a.cu", "\n\n#include \"nowhere.h\"\n")],
            "a.cu:3: include \"nowhere.h\" not found",
            5,
        ),
    ];
    for (files, message, code) in cases {
        let mut all = files.to_vec();
        let r = recipe("a.cu", "\"k\"");
        all.push(("recipes/r.toml", &r));
        let (tmp, root) = repo_with(&all);
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["build", "r"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{stderr}");
        assert!(stderr.contains(message), "{stderr}");
        assert!(stderr.contains("hint:"), "{stderr}");
    }
    // Recipe errors name the file, line, column and key.
    let (tmp, root) = repo_with(&[(
        "recipes/r.toml",
        "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"missing.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n",
    )]);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "r"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "recipes/r.toml:4:10: [build] `source`: no file `missing.cu`",
        ));
    let (tmp, root) = repo_with(&[
        ("a.cu", ""),
        (
            "recipes/r.toml",
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"a.cu\"\nentries = [\"k\"]\ntarget = \"sm_99x\"\n",
        ),
    ]);
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "r"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("unknown target `sm_99x`"));
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "nope"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no recipe `nope`"))
        .stderr(predicate::str::contains("recipes here: r"));
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("name a recipe"));
}

#[test]
fn nvrtc_not_found_says_how_to_get_it() {
    let (tmp, root) = repo_with(&[("a.cu", ""), ("recipes/r.toml", &recipe("a.cu", "\"k\""))]);
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("REPRO_NVRTC", &empty)
        .args(["build", "r"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("REPRO_NVRTC is set to"))
        .stderr(predicate::str::contains(
            "hint: run `repro toolchain install`",
        ));
}

/// A machine with a system CUDA has another NVRTC on the loader's path than the one repro
/// chose (a wheel's release in a toolchain bisection, `REPRO_NVRTC`). Every NVRTC call must
/// go to the chosen library: here the loader's path holds decoys named as NVRTC (copies of
/// libz), which a lookup by name would load.
#[test]
fn the_chosen_nvrtc_compiles_even_with_another_on_the_loaders_path() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let which = repro(tmp.path())
        .args(["--json", "toolchain", "which"])
        .output()
        .unwrap();
    let which: Value = serde_json::from_slice(&which.stdout).unwrap();
    let chosen = which["nvrtc"]["path"].as_str().unwrap().to_string();
    let zlib = [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists());
    let Some(zlib) = zlib else {
        common::skip("needs libz.so.1 as a decoy library");
        return;
    };
    let decoys = tmp.path().join("decoys");
    std::fs::create_dir(&decoys).unwrap();
    for name in ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"] {
        std::fs::copy(zlib, decoys.join(name)).unwrap();
    }
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("REPRO_NVRTC", &chosen)
        .env("LD_LIBRARY_PATH", &decoys)
        .args(["--json", "build", "--force", "vector_add"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        v["builds"][0]["status"],
        "ok",
        "{v}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        v["builds"][0]["outputs"]["cubin"]["bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn concurrent_builds_of_one_recipe_share_one_object() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let children: Vec<_> = (0..4)
        .map(|_| {
            let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("repro"));
            if let Some(dir) = common::provisioned_nvrtc() {
                c.env("REPRO_NVRTC", dir);
            }
            c.arg("-C")
                .arg(&root)
                .args(["build", "--json", "reduction"])
                .env("XDG_CACHE_HOME", tmp.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut keys = Vec::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        keys.push(key(&v));
    }
    keys.dedup();
    assert_eq!(keys.len(), 1);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["store", "verify", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["report"]["objects"], 2);
    // The build record and the recipe's last-build record.
    assert_eq!(v["report"]["records"], 2);
    // No temporary files are left behind.
    let leftovers = walkdir::WalkDir::new(root.join(".repro"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".repro-tmp"))
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn store_verify_catches_a_flipped_byte_and_the_build_repairs_it() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let (_, v) = build_json(tmp.path(), &root, &["vector_add"]);
    let cubin = v["builds"][0]["outputs"]["cubin"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let mut bytes = std::fs::read(&cubin).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&cubin, &bytes).unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["store", "verify"])
        .assert()
        .code(1);
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(stdout.contains("CORRUPT  objects/"), "{stdout}");
    assert!(stdout.contains("not to its name"), "{stdout}");
    // A build never uses the corrupt object: it says so and rebuilds it.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "vector_add"])
        .assert()
        .success()
        .stdout(predicate::str::contains("repaired: corrupt store object"))
        .stdout(predicate::str::contains("built"));
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["store", "verify"])
        .assert()
        .success();
}

#[test]
fn an_unwritable_store_is_a_clear_error() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let blocker = tmp.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--store")
        .arg(blocker.join("store"))
        .args(["build", "vector_add"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "failed to build recipe `vector_add`",
        ))
        .stderr(predicate::str::contains("hint:"));
}

#[test]
fn command_builds_hash_declared_inputs_and_check_declared_outputs() {
    let (tmp, root) = repo_with(&[
        ("src/k.txt", "kernel v1"),
        ("src/unrelated.md", "docs"),
        (
            "recipes/cmd.toml",
            "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"mkdir -p out && cat src/k.txt > out/k.bin\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out/k.bin\"]\n",
        ),
    ]);
    let (code, a) = build_json(tmp.path(), &root, &["cmd"]);
    assert_eq!(code, 0, "{a}");
    assert_eq!(a["builds"][0]["outputs"]["out/k.bin"]["bytes"], 9);
    // A file outside the declared inputs does not change the key.
    std::fs::write(root.join("src/unrelated.md"), "other docs").unwrap();
    let (_, b) = build_json(tmp.path(), &root, &["cmd"]);
    assert_eq!(key(&a), key(&b));
    assert_eq!(b["builds"][0]["cached"], true);
    std::fs::write(root.join("src/k.txt"), "kernel v2").unwrap();
    let (_, c) = build_json(tmp.path(), &root, &["cmd", "--explain"]);
    assert_ne!(key(&a), key(&c));
    assert_eq!(
        c["builds"][0]["explain"],
        serde_json::json!(["file src/k.txt changed"])
    );

    std::fs::write(root.join("recipes/cmd.toml"), "schema = 1\n[build]\nkind = \"command\"\nargv = [\"true\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out/missing.bin\"]\n").unwrap();
    let (code, d) = build_json(tmp.path(), &root, &["cmd"]);
    assert_eq!(code, 5);
    assert!(
        d["builds"][0]["log"]
            .as_str()
            .unwrap()
            .contains("did not produce the declared output out/missing.bin")
    );
}

#[test]
fn toolchain_install_verifies_the_pin() {
    // The wheel the tests provision for themselves (downloaded once through pip).
    let wheel = match common::nvrtc_wheel() {
        Ok(w) => w,
        Err(why) => {
            common::skip(&format!("needs the NVRTC wheel: {why}"));
            return;
        }
    };
    let sha = repro::keys::sha256_hex(&std::fs::read(&wheel).unwrap());
    let (tmp, root) = repo_with(&[(
        "repro.toml",
        &format!(
            "schema = 1\n[toolchain.nvrtc]\nversion = \"13.0.88\"\nsha256 = {{ {} = \"{sha}\" }}\n",
            std::env::consts::ARCH
        ),
    )]);
    let cache = tmp.path().join("cache");
    let run = || {
        let mut c = repro(&cache);
        c.arg("-C").arg(&root).env_remove("REPRO_NVRTC");
        c
    };
    // A tampered wheel is refused and nothing is installed.
    let bad = tmp.path().join("nvidia_cuda_nvrtc-13.0.88-tampered.whl");
    let mut bytes = std::fs::read(&wheel).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 1;
    std::fs::write(&bad, bytes).unwrap();
    run()
        .args(["toolchain", "install", "--wheel"])
        .arg(&bad)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("refusing to install it"));
    assert!(!has_tree(&cache, "nvrtc-13.0.88"));

    run()
        .args(["toolchain", "install", "--wheel"])
        .arg(&wheel)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "installed NVRTC 13.0.88 (reports 13.0)",
        ));
    run()
        .args(["toolchain", "install", "--wheel"])
        .arg(&wheel)
        .assert()
        .success()
        .stdout(predicate::str::contains("already installed"));
    run()
        .args(["toolchain", "which"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "(pinned in repro.toml, installed by repro)",
        ));
    run()
        .args(["toolchain", "list"])
        .assert()
        .success()
        .stdout(predicate::str::contains("nvrtc-13.0.88-"))
        .stdout(predicate::str::contains("  13.0.88  "));
    // The fingerprint reports the toolchain builds use.
    let out = run().args(["env", "capture", "--json"]).output().unwrap();
    let fp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        fp["toolchain"]["nvrtc"]["source"],
        "pinned in repro.toml, installed by repro"
    );
    // An unpinned version needs an explicit sha256.
    run()
        .args(["toolchain", "install", "--nvrtc", "13.1.0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "nvrtc@13.1.0 is not a release this project pins",
        ));
}

#[test]
fn a_build_reads_nothing_outside_its_inputs() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    // Reading a FIFO with no writer blocks forever: if a build opened anything beyond its
    // inputs, this test would hang (and the timeout below fail it).
    let status = std::process::Command::new("mkfifo")
        .arg(root.join("kernels/trap.fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(
        root.join("recipes/cmd.toml"),
        "schema = 1\n[build]\nkind = \"command\"\nargv = [\"cp\", \"kernels/vector_add.cu\", \"out.cu\"]\ninputs = [\"kernels/*.cu\"]\noutputs = [\"out.cu\"]\n",
    )
    .unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "vector_add", "cmd"])
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .success();
}

#[test]
fn nvcc_builds_produce_the_declared_outputs() {
    // nvcc exists on the GPU machine (and in the Nix shell), not on CI.
    let has_nvcc = repro::toolchain::find_nvcc().is_some();
    if !has_nvcc {
        common::skip("needs nvcc: none on PATH, CUDA_HOME or /usr/local/cuda");
        return;
    }
    let (tmp, root) = kernel_repo();
    std::fs::write(
        root.join("recipes/fa_nvcc.toml"),
        "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"kernels/flash_attention.cu\"\nentries = [\"flash_attn_fwd\", \"flash_attn_ref\"]\ntarget = \"sm_90\"\noutputs = [\"ptx\", \"cubin\", \"fatbin\"]\noptions = [\"--std=c++17\"]\n",
    )
    .unwrap();
    let (code, v) = build_json(tmp.path(), &root, &["fa_nvcc"]);
    assert_eq!(code, 0, "{v}");
    for kind in ["ptx", "cubin", "fatbin"] {
        assert!(
            v["builds"][0]["outputs"][kind]["bytes"].as_u64().unwrap() > 1000,
            "{kind}: {v}"
        );
    }
    let (_, again) = build_json(tmp.path(), &root, &["fa_nvcc"]);
    assert_eq!(again["builds"][0]["cached"], true);
}

/// Whether the toolchain cache holds a tree of `release` (`nvrtc-13.0.88`): trees are named
/// by release and the digest of their wheels.
fn has_tree(cache: &Path, release: &str) -> bool {
    std::fs::read_dir(cache.join("repro/toolchains"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{release}-"))
                && e.path().is_dir()
        })
}
