//! On the GPU: inputs generated on the device are the CPU generator's bytes for every dtype
//! and init kind (the child compares them itself under `REPRO_GPU_SELFCHECK=1`), and the
//! device's check reports exactly what the CPU's check reports (`REPRO_GPU_HELPERS=0`).

use crate::common;

use common::{nvrtc_available, repo_with, repro};
use serde_json::Value;

const DTYPES: [&str; 9] = [
    "f16", "bf16", "f32", "f64", "i32", "u32", "i64", "u64", "u8",
];

/// A recipe whose kernel takes five buffers of `dtype`, one per init kind, and does nothing.
fn sink_recipe(dtype: &str, n: u64) -> String {
    // Each fill with values the type holds (a recipe with others is refused): negative
    // and fractional where it can, up to 300 where it can.
    let (constant, low, high) = match dtype {
        "u8" => ("3.0", "0.0", "200.0"),
        "u32" | "u64" => ("3.0", "0.0", "300.0"),
        "i32" | "i64" => ("-3.0", "-3.0", "300.0"),
        _ => ("-2.75", "-3.0", "300.0"),
    };
    let inits = [
        "init = \"zeros\"".to_string(),
        format!("init = \"constant\", mean = {constant}"),
        "init = \"iota\"".to_string(),
        format!("init = \"uniform\", low = {low}, high = {high}"),
        "init = \"normal\", mean = 0.25, std = 3.0".to_string(),
    ];
    let args: Vec<String> = inits
        .iter()
        .enumerate()
        .map(|(k, i)| {
            format!(
                "{{ name = \"b{k}\", buffer = \"{dtype}\", count = \"n\", {i}, seed = {} }}",
                7 + k
            )
        })
        .collect();
    format!(
        "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"sink\"]\ntarget = \"sm_90\"\n\
         [params]\nn = {n}\n[run]\nkernel = \"sink\"\ngrid = 1\nblock = 32\nargs = [{}, {{ name = \"n\", scalar = \"i32\", value = \"n\" }}]\n",
        args.join(", ")
    )
}

fn bench(
    tmp: &std::path::Path,
    root: &std::path::Path,
    recipe: &str,
    env: &[(&str, &str)],
) -> (i32, Value) {
    let mut c = repro(tmp);
    c.arg("-C")
        .arg(root)
        .args(["--json", "bench", recipe, "--min-time", "10ms"]);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(v != Value::Null, "{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap(), v)
}

fn phase_path(v: &Value, name: &str) -> String {
    v["results"][0]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["path"].as_str())
        .unwrap_or("")
        .to_string()
}

#[test]
#[ignore = "needs a GPU: compares the device's generated inputs with the CPU generator's bytes"]
fn gpu_inputs_generated_on_the_device_are_the_cpus_bytes() {
    common::require_gpu();
    assert!(nvrtc_available());
    let sink = "extern \"C\" __global__ void sink(void* a, void* b, void* c, void* d, void* e, int n) {}\n";
    let mut files = vec![("k.cu".to_string(), sink.to_string())];
    for d in DTYPES {
        // An odd count above the staging size of the copies, so chunk edges are crossed.
        files.push((format!("recipes/{d}.toml"), sink_recipe(d, 5_000_011)));
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let (tmp, root) = repo_with(&refs);
    for d in DTYPES {
        let (code, v) = bench(tmp.path(), &root, d, &[("REPRO_GPU_SELFCHECK", "1")]);
        assert_eq!(code, 0, "{d}: {v}");
        assert_eq!(v["results"][0]["verdict"], "ok", "{d}: {v}");
        // Normal f64 draws carry libm's last bit: generated on the CPU.
        let want = if d == "f64" { "gpu+cpu" } else { "gpu" };
        assert_eq!(phase_path(&v, "inputs"), want, "{d}: {v}");
    }
}

#[test]
#[ignore = "needs a GPU: the device's check against the CPU's on the same outputs"]
fn gpu_the_devices_check_reports_what_the_cpus_reports() {
    common::require_gpu();
    assert!(nvrtc_available());
    let kernel = "extern \"C\" __global__ void ref(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * 1.5f; }\n\
                  extern \"C\" __global__ void off(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n - 1) { float v = x[i] * 1.5f; if (i % 1000 == 7) v += 1e-3f * fabsf(v) + 1e-6f; if (i % 1000 == 9) v += 1e-5f * fabsf(v); if (i == n / 2) v = __int_as_float(0x7fc00000); y[i] = v; } }\n";
    let recipe = |k: &str| {
        format!(
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"ref\", \"off\"]\ntarget = \"sm_90\"\n\
             [params]\nn = 3000001\n[run]\nkernel = \"{k}\"\ngrid = \"ceil_div(n, 256)\"\nblock = 256\n\
             args = [{{ name = \"x\", buffer = \"f32\", count = \"n\", init = \"normal\" }}, {{ name = \"y\", buffer = \"f32\", count = \"n\", output = true }}, {{ name = \"n\", scalar = \"i32\", value = \"n\" }}]\n\
             [check]\nkernel = \"ref\"\natol = 1e-6\nrtol = 1e-4\n"
        )
    };
    let (tmp, root) = repo_with(&[
        ("k.cu", kernel),
        ("recipes/off.toml", &recipe("off")),
        ("recipes/same.toml", &recipe("ref")),
    ]);
    for r in ["off", "same"] {
        let (code_gpu, gpu) = bench(tmp.path(), &root, r, &[]);
        let (code_cpu, cpu) = bench(tmp.path(), &root, r, &[("REPRO_GPU_HELPERS", "0")]);
        assert_eq!(phase_path(&gpu, "check"), "gpu", "{gpu}");
        assert!(phase_path(&cpu, "check").starts_with("cpu"), "{cpu}");
        assert_eq!(code_gpu, code_cpu);
        assert_eq!(
            gpu["results"][0]["check"], cpu["results"][0]["check"],
            "{r}"
        );
        assert_eq!(
            gpu["results"][0]["verdict"], cpu["results"][0]["verdict"],
            "{r}"
        );
    }
    let (_, v) = bench(tmp.path(), &root, "off", &[]);
    let c = &v["results"][0]["check"][0];
    assert_eq!(v["results"][0]["verdict"], "wrong", "{v}");
    assert_eq!(c["unwritten"], 1, "{c}");
    assert_eq!(c["first-mismatch"][0], 7, "{c}");
}
