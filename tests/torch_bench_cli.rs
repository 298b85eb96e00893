//! `repro bench` of a Python call (`[run] function`) against a reference, end to end with
//! real PyTorch in the venvs tests/common makes, on the CPU: a C++ extension's attention
//! checked against `scaled_dot_product_attention` and timed beside it by wall clock; the
//! bad inputs of issue #27 each with its message and exit code and nothing recorded.

mod common;

use std::path::Path;

use common::{repo_with, repro, torch_venvs};
use serde_json::Value;

/// Attention written with PyTorch's C++ operators, and a function whose output has another
/// shape than attention's (the scores).
pub const MYATTN_CPP: &str = r#"#include <torch/extension.h>
#include <cmath>
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  auto s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt((double)q.size(-1));
  return torch::matmul(torch::softmax(s, -1), v);
}
torch::Tensor scores(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return torch::matmul(q, k.transpose(-2, -1));
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attention", &attention);
  m.def("scores", &scores);
}
"#;

/// A recipe calling `myattn.FUNCTION` on DEVICE, checked against REFERENCE.
pub fn call_recipe(function: &str, device: &str, reference: &str) -> String {
    format!(
        r#"schema = 1
[build]
kind = "torch-extension"
module = "myattn"
sources = ["ext/myattn.cpp"]
entries = ["attention"]

[params]
s = [32]

[run]
function = "{function}"
device = "{device}"
args = [
  {{ name = "q", tensor = "f32", shape = [1, 2, "s", 16], init = "normal" }},
  {{ name = "k", tensor = "f32", shape = [1, 2, "s", 16], init = "normal" }},
  {{ name = "v", tensor = "f32", shape = [1, 2, "s", 16], init = "normal" }},
]

[check]
function = "{reference}"
atol = 1e-5
rtol = 1e-4
"#
    )
}

const SDPA: &str = "torch.nn.functional.scaled_dot_product_attention";

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

fn bench(cache: &Path, root: &Path, python: &Path, args: &[&str]) -> std::process::Output {
    repro(cache)
        .arg("-C")
        .arg(root)
        .arg("--python")
        .arg(python)
        .arg("bench")
        .args(args)
        .args(["--min-time", "50ms", "--warmup", "20ms", "--budget", "2s"])
        .output()
        .unwrap()
}

fn results(cache: &Path, root: &Path) -> Vec<Value> {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .args(["log", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let list = v["records"].as_array().cloned().unwrap_or_default();
    list.iter()
        .filter(|r| r["kind"] == "result")
        .map(|r| show(cache, root, r["id"].as_str().unwrap()))
        .collect()
}

/// The whole record, as `repro show --json` gives it.
pub fn show(cache: &Path, root: &Path, id: &str) -> Value {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .args(["--json", "show", id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_python_call_is_checked_against_its_reference_and_timed_beside_it() {
    let Some((old, _)) = torch_venvs() else {
        return;
    };
    let (tmp, root) = repo_with(&[
        ("ext/myattn.cpp", MYATTN_CPP),
        (
            "recipes/attn.toml",
            &call_recipe("myattn.attention", "cpu", SDPA),
        ),
        (
            "recipes/nope.toml",
            &call_recipe("myattn.nope", "cpu", SDPA),
        ),
        (
            "recipes/noref.toml",
            &call_recipe("myattn.attention", "cpu", "torch.nn.functional.nope"),
        ),
        (
            "recipes/shape.toml",
            &call_recipe("myattn.scores", "cpu", SDPA),
        ),
        (
            "recipes/gpu.toml",
            &call_recipe("myattn.attention", "cuda", SDPA),
        ),
    ]);
    let out = bench(tmp.path(), &root, &old, &["attn"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(
            "myattn.attention on cpu (cpu), timed by cpu-wall-clock (time.perf_counter_ns)"
        ),
        "{said}"
    );
    assert!(
        said.contains(&format!("reference {SDPA}: median")),
        "{said}"
    );
    assert!(said.contains("x of the reference (interval "), "{said}");
    let recs = results(tmp.path(), &root);
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!(r["verdict"], "ok");
    let py = &r["python"];
    assert_eq!(py["function"], "myattn.attention");
    assert_eq!(py["reference"], SDPA);
    assert_eq!(py["device"], "cpu");
    assert_eq!(py["timer"], "cpu-wall-clock (time.perf_counter_ns)");
    assert_eq!(py["torch"], format!("{}+cu121", common::TORCH_OLD.0));
    assert_eq!(py["interpreter"], old.display().to_string());
    let check = &r["check"][0];
    assert_eq!(check["name"], "out");
    assert_eq!(check["elements"], 2 * 32 * 16);
    assert_eq!(check["mismatches"], 0);
    assert!(check["max-abs-err"].as_f64().unwrap() < 1e-5, "{check}");
    let n = r["samples"].as_array().unwrap().len();
    assert!(n >= 10, "{n} samples");
    assert!(py["reference-samples"].as_array().unwrap().len() >= 10);
    let s = &py["speedup"];
    let (ratio, low, high) = (
        s["ratio"].as_f64().unwrap(),
        s["low"].as_f64().unwrap(),
        s["high"].as_f64().unwrap(),
    );
    assert!(low <= ratio && ratio <= high && low > 0.0, "{s}");
    let fm = r["summary"]["median"].as_f64().unwrap();
    let rm = py["reference-summary"]["median"].as_f64().unwrap();
    assert!(
        (ratio - rm / fm).abs() < 1e-9 * ratio.max(1.0),
        "{s} {fm} {rm}"
    );
    // `show` prints the call, its reference and the speedup.
    let id = r["id"].as_str().unwrap().to_string();
    let shown = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["show", &id])
        .output()
        .unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown));
    let shown = text(&shown);
    assert!(
        shown.contains("x of the reference (interval") && shown.contains(SDPA),
        "{shown}"
    );

    // A tighter tolerance than float32 attention meets is a wrong result, not a success.
    let strict = call_recipe("myattn.attention", "cpu", SDPA)
        .replace("atol = 1e-5\nrtol = 1e-4", "atol = 0.0\nrtol = 0.0");
    std::fs::write(root.join("recipes/strict.toml"), strict).unwrap();
    let out = bench(tmp.path(), &root, &old, &["strict"]);
    let said = text(&out);
    if out.status.code() == Some(1) {
        assert!(said.contains("WRONG") && said.contains("out: "), "{said}");
    } else {
        // Bit-identical with SDPA's math path: then it passes, and says so.
        assert_eq!(out.status.code(), Some(0), "{said}");
    }

    let before = results(tmp.path(), &root).len();
    for (recipe, code, words) in [
        ("nope", 2, "`myattn.nope` does not exist: function's module myattn has no attribute nope (it has: attention, scores)".to_string()),
        ("noref", 2, "`torch.nn.functional.nope` does not exist: reference's module torch.nn.functional has no attribute nope".to_string()),
        ("shape", 2, format!("the reference `{SDPA}` does not match: myattn.scores returns out of shape [1, 2, 32, 32], the reference {SDPA} returns shape [1, 2, 32, 16]")),
        ("gpu", 3, format!("recipe `gpu`: the recipe runs on \"cuda\", and in {} torch {}+cu121 is built for CUDA 12.1, but no GPU or driver is usable", old.display(), common::TORCH_OLD.0)),
    ] {
        let out = bench(tmp.path(), &root, &old, &[recipe]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(code), "{recipe}: {said}");
        assert!(said.contains(&words), "{recipe}: {said}");
        assert!(said.contains("hint:"), "{recipe}: {said}");
    }
    assert_eq!(
        results(tmp.path(), &root).len(),
        before,
        "a failure was recorded"
    );
}

#[test]
fn no_interpreter_or_one_without_pytorch_is_named() {
    let (tmp, root) = repo_with(&[
        ("ext/myattn.cpp", MYATTN_CPP),
        (
            "recipes/attn.toml",
            &call_recipe("myattn.attention", "cpu", SDPA),
        ),
    ]);
    let out = bench(tmp.path(), &root, Path::new("nope/bin/python3"), &["attn"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("nope/bin/python3 (chosen by --python)"),
        "{said}"
    );
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
    let out = bench(tmp.path(), &root, &bare, &["attn"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(3), "{said}");
    assert!(
        said.contains(&format!(
            "in the environment of {} PyTorch is not installed",
            bare.display()
        )),
        "{said}"
    );
    assert!(results(tmp.path(), &root).is_empty());
}

#[test]
fn a_call_recipe_is_validated_with_file_line_and_key() {
    let bad = [
        (
            call_recipe("myattn", "cpu", SDPA),
            "is not `module.function`",
        ),
        (
            call_recipe("myattn.attention", "tpu", SDPA),
            "[run] `device`: `tpu` is neither",
        ),
        (
            call_recipe("myattn.attention", "cpu", SDPA).replace(
                "function = \"myattn.attention\"",
                "function = \"myattn.attention\"\ngrid = 1",
            ),
            "[run] `grid` is for a kernel",
        ),
        (
            call_recipe("myattn.attention", "cpu", SDPA).replace(
                "tensor = \"f32\", shape = [1, 2, \"s\", 16]",
                "buffer = \"f32\", count = 4",
            ),
            "a Python call takes `tensor` and `shape`",
        ),
        (
            call_recipe("myattn.attention", "cpu", SDPA)
                .replace("[1, 2, \"s\", 16]", "[1, 2, \"t\", 16]"),
            "uses `t`, which is not a parameter",
        ),
        (
            call_recipe("myattn.attention", "cpu", SDPA).replace("[1, 2, \"s\", 16]", "[]"),
            "takes one to 8 dimensions",
        ),
    ];
    for (recipe, words) in bad {
        let (tmp, root) = repo_with(&[("recipes/x.toml", &recipe), ("ext/myattn.cpp", MYATTN_CPP)]);
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["bench", "x"])
            .output()
            .unwrap();
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{words}: {said}");
        assert!(
            said.contains("recipes/x.toml:") && said.contains(words),
            "{words}: {said}"
        );
    }
}
