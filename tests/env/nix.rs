//! Builds inside Nix dev shells, with a real `nix` and flakes that need no network (their
//! shells are raw derivations), and the project's own flake checked offline.

use crate::common;

use std::path::Path;

use common::{crate_dir, git, nix_available, nvrtc_available, offline_nix_flags, repo_with, repro};
use predicates::prelude::*;
use serde_json::Value;

/// A flake whose dev shell sets KERNEL_TAG, a variable nothing else sets.
fn flake(tag: &str) -> String {
    format!(
        r#"{{
  outputs = {{ self }}: {{
    devShells.x86_64-linux.default = derivation {{
      name = "tag-shell"; system = "x86_64-linux"; builder = "/bin/bash"; outputs = [ "out" ];
      args = [ "-c" "echo > $out" ];
      KERNEL_TAG = "{tag}";
    }};
  }};
}}
"#
    )
}

const KERNEL: &str = "extern \"C\" __global__ void k(int* a) { a[0] = TAG; }\n";
const RECIPE: &str = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\n[build.defines]\nTAG = { env = \"KERNEL_TAG\", default = 7 }\n";

fn ready() -> bool {
    nix_available() && nvrtc_available()
}

fn build(tmp: &Path, root: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(tmp)
        .arg("-C")
        .arg(root)
        .env("REPRO_NIX_FLAGS", offline_nix_flags(tmp))
        .args(["build", "k", "--json"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap(), v, stderr)
}

fn ptx(v: &Value) -> String {
    std::fs::read_to_string(v["builds"][0]["outputs"]["ptx"]["path"].as_str().unwrap()).unwrap()
}

fn record(root: &Path, v: &Value) -> Value {
    let key = v["builds"][0]["key"].as_str().unwrap();
    serde_json::from_slice(&std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap())
        .unwrap()
}

fn commit(root: &Path, msg: &str) {
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", msg]);
}

#[test]
fn the_build_runs_inside_the_shell_and_its_variable_reaches_the_compiler() {
    if !ready() {
        return;
    }
    let (tmp, root) = repo_with(&[
        ("flake.nix", &flake("42")),
        ("kernels/k.cu", KERNEL),
        ("recipes/k.toml", RECIPE),
    ]);
    let (code, host, _) = build(tmp.path(), &root, &[]);
    assert_eq!(code, 0);
    assert!(ptx(&host).contains("mov.u32 \t%r1, 7;"), "{}", ptx(&host));
    let (code, shell, stderr) = build(tmp.path(), &root, &["--nix"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        ptx(&shell).contains("mov.u32 \t%r1, 42;"),
        "{}",
        ptx(&shell)
    );
    assert_ne!(host["builds"][0]["key"], shell["builds"][0]["key"]);
    let rec = record(&root, &shell);
    assert_eq!(rec["environment"]["kind"], "nix");
    assert!(
        rec["inputs"]["nix"]["shell-drv"]
            .as_str()
            .unwrap()
            .ends_with("-tag-shell.drv")
    );
    // repro.toml can ask for Nix instead of the flag, and --no-nix overrides it.
    std::fs::write(root.join("repro.toml"), "schema = 1\n[nix]\nbuild = true\n").unwrap();
    let (_, via_config, _) = build(tmp.path(), &root, &[]);
    assert_eq!(via_config["builds"][0]["key"], shell["builds"][0]["key"]);
    assert_eq!(via_config["builds"][0]["cached"], true);
    let (_, forced_host, _) = build(tmp.path(), &root, &["--no-nix"]);
    assert_eq!(forced_host["builds"][0]["key"], host["builds"][0]["key"]);
}

#[test]
fn each_commit_builds_with_its_own_flake_and_no_flake_falls_back_to_the_host() {
    if !ready() {
        return;
    }
    let (tmp, root) = repo_with(&[
        ("flake.nix", &flake("42")),
        ("kernels/k.cu", KERNEL),
        ("recipes/k.toml", RECIPE),
    ]);
    let (_, a, _) = build(tmp.path(), &root, &["--nix"]);
    std::fs::write(root.join("flake.nix"), flake("43")).unwrap();
    commit(&root, "flake 43");
    let (_, b, _) = build(tmp.path(), &root, &["--nix", "--explain"]);
    assert!(ptx(&b).contains("%r1, 43;"));
    assert_ne!(
        record(&root, &a)["inputs"]["nix"]["shell-drv"],
        record(&root, &b)["inputs"]["nix"]["shell-drv"]
    );
    let why = b["builds"][0]["explain"].as_array().unwrap();
    assert!(
        why.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("build environment changed: the Nix shell")),
        "{why:?}"
    );

    std::fs::remove_file(root.join("flake.nix")).unwrap();
    commit(&root, "no flake");
    let (code, c, stderr) = build(tmp.path(), &root, &["--nix"]);
    assert_eq!(code, 0);
    assert!(stderr.contains("warning: no flake.nix in"), "{stderr}");
    assert!(ptx(&c).contains("%r1, 7;"));
    let rec = record(&root, &c);
    assert_eq!(rec["environment"]["kind"], "host");
    assert!(
        rec["environment"]["warning"]
            .as_str()
            .unwrap()
            .contains("no flake.nix")
    );
}

#[test]
fn the_flake_lock_digest_is_part_of_the_key() {
    if !ready() {
        return;
    }
    let lock =
        "{\n  \"nodes\": {\n    \"root\": {}\n  },\n  \"root\": \"root\",\n  \"version\": 7\n}\n";
    let (tmp, root) = repo_with(&[
        ("flake.nix", &flake("42")),
        ("flake.lock", lock),
        ("kernels/k.cu", KERNEL),
        ("recipes/k.toml", RECIPE),
    ]);
    let (_, a, _) = build(tmp.path(), &root, &["--nix"]);
    std::fs::write(root.join("flake.lock"), lock.replace("  ", "    ")).unwrap();
    commit(&root, "relock");
    let (_, b, _) = build(tmp.path(), &root, &["--nix", "--explain"]);
    assert_ne!(a["builds"][0]["key"], b["builds"][0]["key"]);
    assert_eq!(b["builds"][0]["explain"][0], "flake.lock changed");
    let digest = repro::keys::sha256_hex(&std::fs::read(root.join("flake.lock")).unwrap());
    assert_eq!(
        record(&root, &b)["inputs"]["nix"]["flake-lock-sha256"],
        digest.as_str()
    );
}

#[test]
fn a_broken_flake_or_missing_nix_is_untestable_not_a_failed_build() {
    if !nix_available() {
        return;
    }
    let broken = flake("42").replace("KERNEL_TAG = \"42\";", "KERNEL_TAG = ;");
    let (tmp, root) = repo_with(&[
        ("flake.nix", &broken),
        ("kernels/k.cu", KERNEL),
        ("recipes/k.toml", RECIPE),
    ]);
    let (code, _, stderr) = build(tmp.path(), &root, &["--nix"]);
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains("error: evaluating the dev shell `default`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("eval --raw"),
        "the failing command is shown: {stderr}"
    );
    assert!(
        stderr.contains("syntax error"),
        "nix's own message is shown: {stderr}"
    );
    assert!(stderr.contains("hint: fix the flake"), "{stderr}");

    let empty = tmp.path().join("empty-path");
    std::fs::create_dir(&empty).unwrap();
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("PATH", &empty)
        .args(["build", "k", "--nix"])
        .assert()
        .code(125)
        .stderr(predicate::str::contains("nix is not installed"))
        .stderr(predicate::str::contains("hint: install Nix"));
}

#[test]
fn the_project_flake_parses_and_has_its_outputs() {
    let ok = std::process::Command::new("nix-instantiate")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("REPRO_TEST_REQUIRE_NIX").is_none(),
            "nix-instantiate is required here"
        );
        common::skip("needs nix-instantiate (install nix, e.g. Debian's nix-bin)");
        return;
    }
    let dir = crate_dir();
    let parse = std::process::Command::new("nix-instantiate")
        .args(["--parse", "flake.nix"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        parse.status.success(),
        "{}",
        String::from_utf8_lossy(&parse.stderr)
    );

    // Evaluate the outputs with a stub nixpkgs: the structure is checked without fetching.
    let stub = tempfile::tempdir().unwrap();
    std::fs::write(
        stub.path().join("default.nix"),
        r#"{ system, config ? { } }:
let drv = name: attrs: attrs // { type = "derivation"; inherit name system; outPath = "/nix/store/stub-${name}"; };
in {
  rustPlatform.buildRustPackage = a: drv "repro" a;
  mkShell = a: drv "shell" a;
  rustc = drv "rustc" { }; cargo = drv "cargo" { }; clippy = drv "clippy" { }; rustfmt = drv "rustfmt" { };
  git = drv "git" { }; python3 = drv "python3" { };
  lib.getInclude = p: p.include or p;
  cudaPackages_13_0 = { cuda_nvcc = drv "cuda_nvcc" { }; cuda_nvrtc = drv "cuda_nvrtc" { lib = drv "cuda_nvrtc-lib" { }; };
    cuda_cudart = drv "cuda_cudart" { include = drv "cuda_cudart-include" { }; }; cuda_cccl = drv "cuda_cccl" { }; };
}
"#,
    )
    .unwrap();
    let expr = format!(
        r#"let flake = import ./flake.nix; outs = flake.outputs {{ self = outs // {{ outPath = ./.; }}; nixpkgs = {stub}; }};
           sh = outs.devShells.x86_64-linux.default; pkg = outs.packages.x86_64-linux.default;
        in {{ systems = builtins.attrNames outs.devShells; pkg = pkg.pname; lock = builtins.baseNameOf (toString pkg.cargoLock.lockFile);
              app = outs.apps.x86_64-linux.default.program; nvrtc = sh.REPRO_NVRTC; nvcc = sh.REPRO_NVCC;
              ld = sh ? LD_LIBRARY_PATH; packages = map (p: p.name) sh.packages; nvcc_flags = sh.NVCC_PREPEND_FLAGS; }}"#,
        stub = stub.path().display()
    );
    let out = std::process::Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "-E", &expr])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["systems"],
        serde_json::json!(["aarch64-linux", "x86_64-linux"])
    );
    assert_eq!(v["pkg"], "repro");
    assert_eq!(v["lock"], "Cargo.lock");
    assert_eq!(v["app"], "/nix/store/stub-repro/bin/repro");
    assert_eq!(v["nvrtc"], "/nix/store/stub-cuda_nvrtc-lib/lib");
    assert_eq!(v["nvcc"], "/nix/store/stub-cuda_nvcc/bin/nvcc");
    // No global LD_LIBRARY_PATH: it would shadow the host's driver.
    assert_eq!(v["ld"], false);
    // nvcc finds cuda_runtime.h (cuda_cudart's headers) and CCCL's.
    assert_eq!(
        v["nvcc_flags"],
        "-I/nix/store/stub-cuda_cudart-include/include -I/nix/store/stub-cuda_cccl/include"
    );
    for p in [
        "rustc",
        "cargo",
        "clippy",
        "rustfmt",
        "git",
        "python3",
        "cuda_nvcc",
        "cuda_cudart",
        "cuda_cccl",
    ] {
        assert!(
            v["packages"].as_array().unwrap().iter().any(|x| x == p),
            "{p} missing from the shell"
        );
    }
}

#[test]
fn the_project_flake_lock_locks_every_input() {
    let lock: Value =
        serde_json::from_slice(&std::fs::read(crate_dir().join("flake.lock")).unwrap()).unwrap();
    assert_eq!(lock["version"], 7);
    let root = lock["root"].as_str().unwrap();
    let nodes = lock["nodes"].as_object().unwrap();
    let inputs = nodes[root]["inputs"].as_object().unwrap();
    assert!(inputs.contains_key("nixpkgs"));
    for (name, node) in nodes.iter().filter(|(n, _)| *n != root) {
        let locked = &node["locked"];
        let rev = locked["rev"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no locked rev"));
        assert_eq!(rev.len(), 40, "{name}: rev {rev}");
        assert!(rev.chars().all(|c| c.is_ascii_hexdigit()));
        let nar = locked["narHash"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no narHash"));
        assert!(
            nar.starts_with("sha256-") && nar.len() == 51,
            "{name}: narHash {nar}"
        );
    }
    for target in inputs.values() {
        assert!(
            nodes.contains_key(target.as_str().unwrap()),
            "input {target} names no node"
        );
    }
}

/// A bisection with `--nix` builds each commit's own tree in that commit's shell: the
/// scratch tree lies inside the repository (under its store), and neither repro nor nix may
/// mistake it for the working tree around it (which here holds the broken kernel).
#[test]
fn a_nix_bisection_builds_each_commit_and_not_the_working_tree() {
    if !ready() {
        common::skip("needs nix and NVRTC");
        return;
    }
    let (tmp, root) = repo_with(&[
        ("flake.nix", &flake("42")),
        ("kernels/k.cu", KERNEL),
        ("recipes/k.toml", RECIPE),
    ]);
    std::fs::write(root.join("kernels/k.cu"), format!("{KERNEL}// two\n")).unwrap();
    commit(&root, "two");
    std::fs::write(
        root.join("kernels/k.cu"),
        format!("{KERNEL}// two\nbroken\n"),
    )
    .unwrap();
    commit(&root, "three breaks the build");
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("REPRO_NIX_FLAGS", offline_nix_flags(tmp.path()))
        .args([
            "bisect", "--good", "HEAD~2", "--bad", "HEAD", "--recipe", "k", "--nix", "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["culprit"]["subject"], "three breaks the build", "{v}");
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps[0]["verdict"], "good", "{v}");
    assert!(
        steps[2]["detail"]
            .as_str()
            .unwrap()
            .contains("build failed inside the commit's Nix shell: kernels/k.cu"),
        "{v}"
    );
}

/// A commit whose flake does not evaluate cannot be tested: the bisection skips it, saying
/// why in nix's words, and reports the commits it could not tell apart.
#[test]
fn a_nix_bisection_skips_a_commit_whose_flake_is_broken() {
    if !ready() {
        common::skip("needs nix and NVRTC");
        return;
    }
    let (tmp, root) = repo_with(&[
        ("flake.nix", &flake("42")),
        ("kernels/k.cu", KERNEL),
        ("recipes/k.toml", RECIPE),
    ]);
    let broken = flake("42").replace("KERNEL_TAG = \"42\";", "KERNEL_TAG = ;");
    std::fs::write(root.join("flake.nix"), &broken).unwrap();
    commit(&root, "two breaks the flake");
    std::fs::write(root.join("flake.nix"), flake("42")).unwrap();
    std::fs::write(root.join("kernels/k.cu"), format!("{KERNEL}broken\n")).unwrap();
    commit(&root, "three mends it and breaks the build");
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("REPRO_NIX_FLAGS", offline_nix_flags(tmp.path()))
        .args([
            "bisect", "--good", "HEAD~2", "--bad", "HEAD", "--recipe", "k", "--nix", "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let two = git(&root, &["rev-parse", "HEAD~1"]);
    let steps = v["steps"].as_array().unwrap();
    let step = steps
        .iter()
        .find(|s| s["commit"] == two.as_str())
        .unwrap_or_else(|| panic!("commit two was not tried: {v}"));
    assert_eq!(step["verdict"], "skip", "{v}");
    let detail = step["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("untestable: ") && detail.contains("dev shell"),
        "{detail}"
    );
    // The bad end failed to build in its shell, and is said so.
    let bad = steps
        .iter()
        .find(|s| s["subject"] == "three mends it and breaks the build")
        .unwrap();
    assert_eq!(bad["verdict"], "bad", "{v}");
    assert!(
        bad["detail"]
            .as_str()
            .unwrap()
            .starts_with("build failed inside the commit's Nix shell: "),
        "{v}"
    );
    assert!(v["culprit"].is_null(), "{v}");
    assert_eq!(
        v["outcome"],
        serde_json::json!({"kind": "untestable", "first": 1, "last": 2}),
        "{v}"
    );
}
