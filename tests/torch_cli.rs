//! The Python environment and PyTorch extensions end to end: real PyTorch from its wheels in
//! virtual environments the tests make (tests/common `torch_venv`), the real binary, no GPU.

use crate::common;

use std::path::Path;

use common::{TORCH_NEW, TORCH_OLD, repo_with, repro, torch_venvs};
use serde_json::Value;

fn json_of(out: &[u8]) -> Value {
    serde_json::from_slice(out).expect("stdout is JSON")
}

fn capture(cache: &Path, root: &Path, python: &Path) -> Value {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .arg("--python")
        .arg(python)
        .args(["env", "capture", "--json"])
        .assert()
        .success();
    json_of(&out.get_output().stdout)
}

#[test]
fn the_fingerprint_reads_pytorch_numpy_and_every_distribution_from_files() {
    let Some((old, new)) = torch_venvs() else {
        return;
    };
    let (tmp, root) = repo_with(&[("README", "x\n")]);
    let fp = capture(tmp.path(), &root, &old);
    let py = &fp["python"];
    assert_eq!(py["interpreter"], old.display().to_string());
    assert_eq!(py["found-by"], "--python");
    assert!(py["abi-tag"].as_str().unwrap().starts_with("cp3"), "{py}");
    assert_eq!(py["torch"]["version"], format!("{}+cu121", TORCH_OLD.0));
    assert_eq!(py["torch"]["cuda"], "12.1");
    assert_eq!(py["torch"]["cxx11-abi"], false);
    assert_eq!(py["torch"]["cudnn"], "9.1.0.70");
    let archs = py["torch"]["cuda-archs"].as_str().unwrap();
    assert!(archs.contains("sm_90"), "{archs}");
    assert_eq!(py["numpy"]["version"], TORCH_OLD.1);
    assert_eq!(py["dist"]["numpy"], TORCH_OLD.1);
    assert!(py["dist"]["nvidia-cublas-cu12"].is_string(), "{py}");
    assert_eq!(
        py["distributions"].as_u64().unwrap() as usize,
        py["dist"].as_object().unwrap().len()
    );

    let fp2 = capture(tmp.path(), &root, &new);
    assert_eq!(
        fp2["python"]["torch"]["version"],
        format!("{}+cu124", TORCH_NEW.0)
    );
    assert_ne!(
        fp2["python"]["distributions-digest"],
        py["distributions-digest"]
    );

    // VIRTUAL_ENV chooses the interpreter when --python does not.
    let venv = old.parent().unwrap().parent().unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("VIRTUAL_ENV", venv)
        .args(["env", "capture", "--json"])
        .assert()
        .success();
    let fp3 = json_of(&out.get_output().stdout);
    assert_eq!(fp3["python"]["found-by"], "VIRTUAL_ENV");
    assert_eq!(fp3["python"]["prefix"], venv.display().to_string());
}

#[test]
fn env_check_names_the_distribution_and_gives_the_pip_command() {
    let Some((old, new)) = torch_venvs() else {
        return;
    };
    let (tmp, root) = repo_with(&[("README", "x\n")]);
    // Locked with NumPy 1.x and torch 2.4; checked in an environment with NumPy 2.x.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&old)
        .args(["env", "lock", "--name", "box"])
        .assert()
        .success();
    let lock = std::fs::read_to_string(root.join("lockfiles/box.toml")).unwrap();
    assert!(
        lock.contains(&format!(
            "\"python.numpy.version\" = {{ policy = \"exact\", value = \"{}\" }}",
            TORCH_OLD.1
        )),
        "{lock}"
    );
    assert!(
        lock.contains("\"python.dist.sympy\" = { policy = \"warn\""),
        "{lock}"
    );
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&new)
        .args(["env", "check"])
        .assert()
        .code(1);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains("MISMATCH  python.numpy.version"), "{text}");
    assert!(text.contains("MISMATCH  python.torch.version"), "{text}");
    let want = format!(
        "numpy {} is installed, the lockfile has {}: run `{} -m pip install 'numpy=={}'`",
        TORCH_NEW.1,
        TORCH_OLD.1,
        new.display(),
        TORCH_OLD.1
    );
    assert!(text.contains(&want), "{text}");
    // A distribution without a field of its own is named with its pip command as a warning.
    assert!(text.contains("python.dist.nvidia-cublas-cu12"), "{text}");
    assert!(
        text.contains("-m pip install 'nvidia-cublas-cu12=="),
        "{text}"
    );
    // The same environment passes.
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&old)
        .args(["env", "check"])
        .assert()
        .success();
}

#[test]
fn an_environment_without_pytorch_or_without_python_says_so() {
    let (tmp, root) = repo_with(&[("README", "x\n")]);
    let venv = tmp.path().join("bare");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        common::skip("needs python3 with venv");
        return;
    }
    let fp = capture(tmp.path(), &root, &venv.join("bin/python3"));
    let why = fp["python"]["torch"]["unavailable"].as_str().unwrap();
    assert!(why.starts_with("torch is not installed in "), "{why}");
    assert!(fp["python"]["version"].is_string());
    // A missing --python is a usage error naming the path, in the fingerprint...
    let fp = capture(tmp.path(), &root, &tmp.path().join("nope/bin/python3"));
    let why = fp["python"]["unavailable"].as_str().unwrap();
    assert!(
        why.contains("nope/bin/python3 (chosen by --python)"),
        "{why}"
    );
}

/// An extension that calls PyTorch's composite attention kernel: a symbol of libtorch_cpu
/// whose signature changed between PyTorch 2.4 and 2.5 (`enable_gqa` was added), so a
/// module built against one does not load under the other.
const ATTN_CPP: &str = r#"#include <torch/extension.h>
#include <ATen/ops/scaled_dot_product_attention_compositeimplicitautograd_dispatch.h>
#include "attn.h"
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return at::compositeimplicitautograd::scaled_dot_product_attention(q, k, v) * SCALE;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("attention", &attention, "softmax(q k^T / sqrt(d)) v"); }
"#;

const ATTN_RECIPE: &str = r#"schema = 1
[build]
kind = "torch-extension"
module = "attn_ext"
sources = ["ext/attn.cpp"]
entries = ["attention"]
"#;

fn attn_repo() -> (tempfile::TempDir, std::path::PathBuf) {
    repo_with(&[
        ("ext/attn.cpp", ATTN_CPP),
        ("ext/attn.h", "#pragma once\n#define SCALE 1.0\n"),
        ("recipes/attn.toml", ATTN_RECIPE),
    ])
}

fn build_json(cache: &Path, root: &Path, python: &Path, extra: &[&str]) -> (i32, Value) {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .arg("--python")
        .arg(python)
        .args(["--json", "build", "attn"])
        .args(extra)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "no JSON: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), v)
}

fn first_build(v: &Value) -> &Value {
    let list = v["builds"].as_array().or_else(|| v.as_array());
    list.and_then(|l| l.first()).unwrap_or(v)
}

#[test]
fn a_cpu_extension_builds_imports_is_cached_and_is_explained_across_pytorch_versions() {
    let Some((old, new)) = torch_venvs() else {
        return;
    };
    let (tmp, root) = attn_repo();
    let (code, v) = build_json(tmp.path(), &root, &old, &[]);
    let b = first_build(&v);
    assert_eq!(code, 0, "{v}");
    assert_eq!(b["status"], "ok", "{v}");
    assert_eq!(b["cached"], false);
    assert!(
        b["log"].as_str().unwrap().contains("imported attn_ext in"),
        "{v}"
    );
    let so = b["outputs"]
        .as_object()
        .unwrap()
        .keys()
        .find(|k| k.starts_with("attn_ext.cpython-"))
        .cloned()
        .expect("the module is an output");
    let key = b["key"].clone();

    // The same environment: a cache hit, nothing compiled.
    let (code, v) = build_json(tmp.path(), &root, &old, &[]);
    assert_eq!(code, 0);
    assert_eq!(first_build(&v)["cached"], true, "{v}");
    assert_eq!(first_build(&v)["key"], key);

    // Under the other PyTorch the module built for the first does not import, and the
    // diagnosis names the symbol, its other signature and both versions.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&new)
        .args(["env", "why-import", "attn"])
        .assert()
        .code(1);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains("attn_ext does NOT import"), "{text}");
    assert!(
        text.contains(
            "undefined symbol: _ZN2at25compositeimplicitautograd28scaled_dot_product_attention"
        ),
        "{text}"
    );
    assert!(text.contains("the extension needs:  at::compositeimplicitautograd::scaled_dot_product_attention(at::Tensor const&, at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, double, bool, std::optional<double>)"), "{text}");
    assert!(text.contains("this PyTorch has:     at::compositeimplicitautograd::scaled_dot_product_attention(at::Tensor const&, at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&, double, bool, std::optional<double>, bool)  (libtorch_cpu.so)"), "{text}");
    let short = &key.as_str().unwrap()[..12];
    assert!(
        text.contains(&format!(
            "differs: PyTorch: built against {}+cu121 (record {short}), this environment has {}+cu124",
            TORCH_OLD.0, TORCH_NEW.0
        )),
        "{text}"
    );
    assert!(text.contains("hint: `repro build attn --python"), "{text}");
    // The same file in the environment it was built for imports.
    let stored = root.join(".repro/objects");
    assert!(stored.is_dir());
    repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&old)
        .args(["env", "why-import", "attn"])
        .assert()
        .success()
        .stdout(predicates::str::contains("attn_ext imports in"));

    // The other PyTorch is another key, and --explain says that torch changed.
    let (code, v) = build_json(tmp.path(), &root, &new, &["--explain"]);
    let b = first_build(&v);
    assert_eq!(code, 0, "{v}");
    assert_eq!(b["cached"], false);
    assert_ne!(b["key"], key);
    let explain = b["explain"].to_string();
    assert!(
        explain.contains(&format!(
            "PyTorch (the Python environment's torch): `version` changed from \\\"{}+cu121\\\" to \\\"{}+cu124\\\"",
            TORCH_OLD.0, TORCH_NEW.0
        )),
        "{explain}"
    );
    assert!(b["outputs"].as_object().unwrap().contains_key(&so));
}

/// A module with pybind11 alone (PyTorch's copy of it): quick to compile.
const TINY_CPP: &str = r#"#include <pybind11/pybind11.h>
int add(int a, int b) { return a + b; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add", &add); }
"#;

fn tiny_recipe(extra: &str) -> String {
    format!(
        "schema = 1\n[build]\nkind = \"torch-extension\"\nmodule = \"tiny\"\nsources = [\"ext/tiny.cpp\"]\n{extra}"
    )
}

#[test]
fn a_function_the_module_lacks_fails_the_build_with_what_it_has() {
    let Some((old, _)) = torch_venvs() else {
        return;
    };
    let (tmp, root) = repo_with(&[
        ("ext/tiny.cpp", TINY_CPP),
        (
            "recipes/tiny.toml",
            &tiny_recipe("entries = [\"add\", \"nope\"]\n"),
        ),
    ]);
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&old)
        .args(["build", "tiny"])
        .assert()
        .code(5);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned()
        + &String::from_utf8_lossy(&out.get_output().stderr);
    assert!(
        text.contains("`import tiny` fails in")
            && text.contains("module tiny has no function nope (it has: add)"),
        "{text}"
    );
    // Nothing is recorded as a success.
    let log = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["--json", "build", "tiny"])
        .arg("--python")
        .arg(&old)
        .output()
        .unwrap();
    let v = json_of(&log.stdout);
    assert_eq!(v["builds"][0]["status"], "failed", "{v}");
}

#[test]
fn bad_environments_and_setup_scripts_are_named_with_their_exit_codes() {
    let (tmp, root) = repo_with(&[
        ("ext/tiny.cpp", TINY_CPP),
        ("recipes/tiny.toml", &tiny_recipe("")),
        (
            "recipes/bad.toml",
            &tiny_recipe("").replace("ext/tiny.cpp", "README"),
        ),
        (
            "recipes/fails.toml",
            "schema = 1\n[build]\nkind = \"torch-extension\"\nmodule = \"tiny\"\nsetup = \"ext/setup.py\"\n",
        ),
        (
            "ext/setup.py",
            "raise SystemExit('setup.py: no compiler for you')\n",
        ),
        (
            "recipes/nothing.toml",
            "schema = 1\n[build]\nkind = \"torch-extension\"\nmodule = \"tiny\"\nsetup = \"other/setup.py\"\n",
        ),
        ("other/setup.py", "print('did nothing')\n"),
        ("README", "x\n"),
    ]);
    // No interpreter where --python points.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["--python", "nope/bin/python3", "build", "tiny"])
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("nope/bin/python3 (chosen by --python)"),
        "{err}"
    );
    // A recipe source that is neither C++ nor CUDA.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["build", "bad"])
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("recipes/bad.toml:") && err.contains("`README` is neither C++ nor CUDA"),
        "{err}"
    );
    // An interpreter without PyTorch.
    let venv = tmp.path().join("bare");
    let made = std::process::Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        common::skip("needs python3 with venv");
        return;
    }
    let bare = venv.join("bin/python3");
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .arg("--python")
        .arg(&bare)
        .args(["build", "tiny"])
        .assert()
        .code(3);
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains(&format!(
            "in the environment of {} PyTorch is not installed in {}",
            bare.display(),
            venv.display()
        )),
        "{err}"
    );
    assert!(err.contains("-m pip install torch"), "{err}");
    // setup.py builds need PyTorch too; with it, a failing setup.py and one that makes no
    // module are failed builds with their logs.
    let Some((old, _)) = torch_venvs() else {
        return;
    };
    for (recipe, words) in [
        ("fails", "setup.py: no compiler for you"),
        (
            "nothing",
            "did not produce the declared output tiny.cpython-",
        ),
    ] {
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .arg("--python")
            .arg(&old)
            .args(["build", recipe])
            .assert()
            .code(5);
        let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned()
            + &String::from_utf8_lossy(&out.get_output().stderr);
        assert!(text.contains(words), "{recipe}: {text}");
    }
}

/// The files (a code block whose first line is `// PATH` or `# PATH`) and the `$ repro ...`
/// commands (with `# exits N` where one fails) of a guide page, in order.
/// A page's files (path, text) and commands (argv after `repro`, expected exit code).
type Script = (Vec<(String, String)>, Vec<(String, i32)>);

fn page_script(text: &str) -> Script {
    let (mut files, mut commands) = (Vec::new(), Vec::new());
    let mut block: Option<Vec<&str>> = None;
    for line in text.lines() {
        if line.starts_with("```") {
            match block.take() {
                Some(lines) => {
                    let first = lines.first().copied().unwrap_or_default();
                    let path = first
                        .strip_prefix("// ")
                        .or_else(|| first.strip_prefix("# "))
                        .filter(|p| p.contains('/') && p.contains('.') && !p.contains(' '));
                    if let Some(path) = path {
                        files.push((path.to_string(), lines[1..].join("\n") + "\n"));
                    }
                }
                None => block = Some(Vec::new()),
            }
            continue;
        }
        if let Some(b) = block.as_mut() {
            b.push(line);
            if let Some(cmd) = line.strip_prefix("$ repro ") {
                let (cmd, note) = cmd.split_once("  #").unwrap_or((cmd, ""));
                let code = note
                    .trim()
                    .strip_prefix("exits ")
                    .map_or(0, |n| n.parse().unwrap());
                commands.push((cmd.trim().to_string(), code));
            }
        }
    }
    (files, commands)
}

#[test]
fn the_pytorch_guide_runs_as_written() {
    let text =
        std::fs::read_to_string(common::crate_dir().join("docs/src/guide/pytorch.md")).unwrap();
    let (files, commands) = page_script(&text);
    assert!(
        files.len() >= 2 && commands.len() >= 7,
        "{files:?} {commands:?}"
    );
    let Some((old, new)) = torch_venvs() else {
        return;
    };
    let file_refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let (tmp, root) = repo_with(&file_refs);
    // The page's environments, beside the repository's files and out of git's sight.
    for (link, venv) in [(".venv-2.4", &old), (".venv-2.5", &new)] {
        std::os::unix::fs::symlink(venv.parent().unwrap().parent().unwrap(), root.join(link))
            .unwrap();
    }
    std::fs::write(root.join(".git/info/exclude"), ".venv-*\n").unwrap();
    for (cmd, code) in &commands {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let out = repro(tmp.path())
            .current_dir(&root)
            .args(&words)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(*code),
            "repro {cmd}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
