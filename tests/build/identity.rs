//! One resolver: build, bench (on the fake GPU), bisect and replay of one recipe in a project
//! that pins NVRTC record the same compiler identity, the pinned wheel's, which the first of
//! them installs (the cache starts empty and nothing names an NVRTC in the environment).

use crate::common;
use crate::fakegpu;

use std::path::{Path, PathBuf};

use serde_json::Value;

const KERNEL: &str = "__device__ int fakegpu_ns_20000;\n\
    extern \"C\" __global__ void scale(float* a, const float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = 2.0f * b[i]; }\n\
    extern \"C\" __global__ void scale_ref(float* a, const float* b, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = b[i] + b[i]; }\n";

const RECIPE: &str = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"scale\", \"scale_ref\"]\n\
    target = \"sm_90\"\noutputs = [\"ptx\"]\n[params]\nn = 4096\n[run]\nkernel = \"scale\"\n\
    grid = \"ceil_div(n, 256)\"\nblock = 256\nargs = [\n\
      { name = \"a\", buffer = \"f32\", count = \"n\", output = true },\n\
      { name = \"b\", buffer = \"f32\", count = \"n\", init = \"normal\" },\n\
      { name = \"n\", scalar = \"i32\", value = \"n\" },\n]\n[check]\nkernel = \"scale_ref\"\n";

/// The compiler identity of every build record in the store at `root`.
fn identities(root: &Path) -> Vec<(String, Value)> {
    std::fs::read_dir(root.join(".repro/builds"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| {
            let v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                v["inputs"]["compiler"].clone(),
            )
        })
        .collect()
}

#[test]
fn build_bench_bisect_and_replay_record_the_same_compiler_identity() {
    let wheel = match common::nvrtc_wheel() {
        Ok(w) => w,
        Err(why) => {
            common::skip(&format!("needs the NVRTC wheel through pip: {why}"));
            return;
        }
    };
    let house: PathBuf = wheel.parent().unwrap().to_path_buf();
    let Some(gpu) = fakegpu::FakeGpu::new("580.159.04") else {
        return;
    };
    // The project pins NVRTC as this repository does; the pin is committed (replay reads the
    // recorded tree's), and a second commit changes only a comment.
    let pins = std::fs::read_to_string(common::crate_dir().join("repro.toml")).unwrap();
    let (_tmp, root) = common::repo_with(&[
        ("k.cu", KERNEL),
        ("recipes/scale.toml", RECIPE),
        ("repro.toml", &pins),
    ]);
    let first = common::git(&root, &["rev-parse", "HEAD"]);
    std::fs::write(root.join("k.cu"), format!("// a comment\n{KERNEL}")).unwrap();
    common::git(&root, &["commit", "-qam", "a comment"]);
    let run = |args: &[&str]| {
        let mut c = gpu.cmd(&[]);
        c.arg("-C")
            .arg(&root)
            .args(args)
            .env_remove("REPRO_NVRTC")
            .env_remove("REPRO_OFFLINE")
            .env("REPRO_WHEELHOUSE", &house);
        let (code, out, err) = common::outcome(&mut c);
        assert!(!err.contains("panicked"), "{err}");
        (code, out, err)
    };

    let (code, out, err) = run(&["build", "scale"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("installing it now"),
        "the build installs the pin: {err}"
    );
    let (code, out, err) = run(&["--json", "build", "scale"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let key = v["builds"][0]["key"].as_str().unwrap().to_string();
    let (_, want) = identities(&root)
        .into_iter()
        .find(|(f, _)| f.starts_with(&key))
        .unwrap();
    assert_eq!(want["name"], "nvrtc", "{want}");
    assert_eq!(want["release"], common::pinned_nvrtc_version(), "{want}");
    assert!(want["wheels"].is_object(), "{want}");

    let (code, out, err) = run(&[
        "bench",
        "--json",
        "scale",
        "--min-time",
        "30ms",
        "--warmup",
        "10ms",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["results"][0]["build-key"], key.as_str(), "{v}");

    // A break, then the bisection: every step builds with the pinned NVRTC.
    std::fs::write(
        root.join("k.cu"),
        format!("// a comment\n{KERNEL}\nbroken here\n"),
    )
    .unwrap();
    common::git(&root, &["commit", "-qam", "a break"]);
    let (code, out, err) = run(&[
        "--json", "bisect", "--good", &first, "--bad", "HEAD", "--recipe", "scale",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["culprit"]["subject"], "a break", "{v}");

    let (code, out, err) = run(&["--json", "replay", &key]);
    assert!(code == 0 || code == 6, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["artifacts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["identical"] == true),
        "{v}"
    );
    assert!(
        v["explain"].as_array().is_none_or(Vec::is_empty),
        "the rebuild's key differs: {v}"
    );

    let all = identities(&root);
    assert!(all.len() >= 3, "the three commits' builds: {all:?}");
    for (file, id) in &all {
        assert_eq!(id, &want, "{file}");
    }
}
