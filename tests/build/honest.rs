//! Compile-only recipes, kernels listed from nvcc's cubins, honest failure reasons, `build
//! --all` that builds what it can, and fat binaries over several targets, end to end with
//! the real nvcc from NVIDIA's wheels (fetched through pip once, as tests/toolchain/cli.rs
//! does; REPRO_TEST_WHEELHOUSE names a directory to use instead).

use crate::common;
use common::wheelhouse;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{crate_dir, git, repo_with, repro};
use serde_json::Value;

/// The pinned nvcc 13.0 wheels.
fn nvcc_set() -> Vec<(String, String)> {
    common::pinned_nvcc_wheels()
}

/// A cache (XDG_CACHE_HOME) with nvcc 13.0 installed from its wheels by `repro toolchain
/// install`, shared by this file's tests and kept between runs; `None` when the wheels
/// cannot be had.
fn nvcc_cache() -> Option<PathBuf> {
    static CACHE: OnceLock<Option<PathBuf>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            let wh = wheelhouse(&nvcc_set())?;
            let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("honest-build-cache");
            let (_tmp, root) = repo_with(&[("repro.toml", &read("repro.toml"))]);
            let out = repro(&cache)
                .arg("-C")
                .arg(&root)
                .args(["-q", "toolchain", "install", "nvcc@13.0", "--wheels"])
                .arg(&wh)
                .env_remove("REPRO_WHEELHOUSE")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "installing nvcc 13.0: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(cache)
        })
        .clone()
}

fn read(p: &str) -> String {
    std::fs::read_to_string(crate_dir().join(p)).unwrap()
}

/// An nvcc recipe pinned to the installed release, with the given extra `[build]` lines.
fn nvcc_recipe(source: &str, extra: &str) -> String {
    format!(
        "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"{source}\"\ntoolchain = \"nvcc@13.0\"\n{extra}"
    )
}

/// `repro -C ROOT --json ARGS`: (exit code, stdout as JSON, stderr). REPRO_OFFLINE keeps a
/// build from fetching a toolchain it lacks.
fn json(cache: &Path, root: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .arg("--json")
        .args(args)
        .env("REPRO_OFFLINE", "1")
        .env_remove("REPRO_WHEELHOUSE")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A kernel file whose only kernel is a template that a host template launches; nothing
/// instantiates it, so its cubin holds no kernel at all. A defaulted `__host__` constructor
/// makes nvcc warn (#20012-D) before anything else; from commit `breaks` on, an undefined
/// name after that warning is an error.
fn template_kernel(i: usize, breaks: usize) -> String {
    let broken = if i >= breaks {
        "int broken = undefined_symbol;\n"
    } else {
        ""
    };
    format!(
        "// version {i}\n#include <cuda_runtime.h>\nstruct S {{ __host__ S() = default; }};\n{broken}template <int N> __global__ void tk(float *a) {{ a[threadIdx.x] += N * {i}; }}\ntemplate <int N> void launch(float *a) {{ tk<N><<<1, 32>>>(a); }}\n"
    )
}

#[test]
fn a_compile_only_recipe_bisects_the_break_of_a_template_kernel_nothing_instantiates() {
    let Some(cache) = nvcc_cache() else {
        return;
    };
    let (_tmp, root) = repo_with(&[
        ("repro.toml", &read("repro.toml")),
        (
            "recipes/k.toml",
            &nvcc_recipe(
                "kernels/k.cu",
                "target = \"sm_90\"\noutputs = [\"object\"]\n",
            ),
        ),
    ]);
    std::fs::create_dir_all(root.join("kernels")).unwrap();
    // The break lands on commit 7 of 12.
    for i in 1..=12 {
        std::fs::write(root.join("kernels/k.cu"), template_kernel(i, 7)).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    let (code, v, stderr) = json(
        &cache,
        &root,
        &[
            "bisect",
            "--good",
            "HEAD~11",
            "--bad",
            "HEAD",
            "--recipe",
            "recipes/k.toml",
            "--mode",
            "build",
        ],
    );
    assert_eq!(code, 0, "{stderr}\n{v}");
    assert_eq!(v["culprit"]["subject"], "commit 7", "{v}");
    // A failing step's reason is nvcc's error line, not the warning printed before it.
    let bad: Vec<&Value> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["verdict"] == "bad")
        .collect();
    assert!(!bad.is_empty(), "{v}");
    for s in bad {
        let detail = s["detail"].as_str().unwrap();
        assert!(
            detail.contains("error: identifier \"undefined_symbol\" is undefined"),
            "{detail}"
        );
        assert!(!detail.contains("warning"), "{detail}");
    }
    // A good step's build says it checked only that the source compiles, in its record.
    let (code, b, stderr) = json(&cache, &root, &["build", "k", "--force"]);
    assert_eq!(code, 5, "{stderr}");
    assert!(
        b["builds"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("error: identifier \"undefined_symbol\" is undefined"),
        "{b}"
    );
    // `repro show` of the failed build's record says why it failed, and what it checked.
    let failed_key = b["builds"][0]["key"].as_str().unwrap().to_string();
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["show", &failed_key])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("reason")
            && l.contains("error: identifier \"undefined_symbol\" is undefined")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("checked") && l.contains("compile-only")),
        "{text}"
    );
    git(&root, &["checkout", "-q", "HEAD~6"]);
    let (code, b, stderr) = json(&cache, &root, &["build", "k"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(b["builds"][0]["checked"], "compile-only", "{b}");
    assert!(
        b["builds"][0]["outputs"]["object"]["bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let key = b["builds"][0]["key"].as_str().unwrap();
    let record: Value = serde_json::from_slice(
        &std::fs::read(root.join(format!(".repro/builds/{key}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(record["checked"], "compile-only");
    // The human line says so too.
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["build", "k"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(compile-only)"), "{text}");
}

const KERNELS: &str = r#"#include <cuda_runtime.h>
__device__ __noinline__ float helper(float x) { return x * 2.0f; }
extern "C" __global__ void plain(float *a) { a[threadIdx.x] = helper(a[threadIdx.x]); }
template <int N> __global__ void tk(float *a) { a[threadIdx.x] += N; }
namespace ns { __global__ void inner(int *p) { p[0] = 1; } }
template <int N> void launch(float *a) { tk<N><<<1, 32>>>(a); }
void go(float *a) { launch<4>(a); }
"#;

#[test]
fn entries_are_listed_from_an_nvcc_cubin() {
    let Some(cache) = nvcc_cache() else {
        return;
    };
    let (_tmp, root) = repo_with(&[
        ("repro.toml", &read("repro.toml")),
        ("kernels/k.cu", KERNELS),
        (
            "recipes/good.toml",
            &nvcc_recipe(
                "kernels/k.cu",
                "target = \"sm_90\"\noutputs = [\"cubin\"]\nentries = [\"plain\", \"tk\", \"ns::inner\"]\n",
            ),
        ),
        (
            "recipes/wrong.toml",
            &nvcc_recipe(
                "kernels/k.cu",
                "target = \"sm_90\"\noutputs = [\"cubin\"]\nentries = [\"plain\", \"helper\"]\n",
            ),
        ),
    ]);
    let (code, v, stderr) = json(&cache, &root, &["build", "good"]);
    assert_eq!(code, 0, "{stderr}\n{v}");
    assert_eq!(v["builds"][0]["checked"], "entries");
    // A device function is not a kernel: the message lists the cubin's kernels, as
    // readelf shows them, with their source names.
    let (code, v, stderr) = json(&cache, &root, &["build", "wrong"]);
    assert_eq!(code, 5, "{stderr}\n{v}");
    let reason = v["builds"][0]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        "the artifact has no entry point `helper` (it has: _Z2tkILi4EEvPf (tk), _ZN2ns5innerEPi (ns::inner), plain); name each kernel as written in the source, or fix `entries`"
    );
}

/// Kernels that live in a header (`.cuh`, `.h`), as in many repositories, build with nvcc,
/// which compiles only a `.cu` file as CUDA unless told; `repro init --recipe` of such a
/// header writes a recipe that builds.
#[test]
fn kernels_in_headers_build_with_nvcc() {
    let Some(cache) = nvcc_cache() else {
        return;
    };
    let header = format!("#pragma once\n{KERNELS}");
    let (_tmp, root) = repo_with(&[
        ("repro.toml", &read("repro.toml")),
        ("kernels/k.cuh", &header),
        ("kernels/plain.h", &header),
        (
            "recipes/cuh.toml",
            &nvcc_recipe(
                "kernels/k.cuh",
                "target = \"sm_90\"\noutputs = [\"cubin\", \"ptx\"]\nentries = [\"plain\", \"tk\"]\n",
            ),
        ),
        (
            "recipes/h.toml",
            &nvcc_recipe(
                "kernels/plain.h",
                "target = \"sm_90\"\noutputs = [\"cubin\"]\nentries = [\"plain\"]\n",
            ),
        ),
    ]);
    for recipe in ["cuh", "h"] {
        let (code, v, stderr) = json(&cache, &root, &["build", recipe]);
        assert_eq!(code, 0, "{recipe}: {stderr}\n{v}");
        assert_eq!(v["builds"][0]["checked"], "entries", "{recipe}: {v}");
    }
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["init", "--recipe", "kernels/k.cuh"])
        .env("REPRO_OFFLINE", "1")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    let written = std::fs::read_to_string(root.join("recipes/k.toml")).unwrap();
    assert!(written.contains("kind = \"nvcc\""), "{written}");
    let (code, v, stderr) = json(&cache, &root, &["build", "k"]);
    assert_eq!(code, 0, "{said}\n{written}\n{stderr}\n{v}");
}

/// `repro init` on kernel files shaped as other people write them, then `repro build` of
/// what it wrote, with the real NVRTC and nvcc: kernels declared through a macro standing
/// for `__global__`; overloaded kernels, whose entries init writes as the symbols the
/// compilers give them (checked against the artifacts' own symbols by the build); a file
/// with a host function declaration, which NVRTC refuses and init gives to nvcc; and one
/// whose device functions are marked through a macro, which stays with NVRTC.
#[test]
fn init_writes_recipes_that_build_for_macro_kernels_overloads_and_host_declarations() {
    let Some(cache) = nvcc_cache() else {
        return;
    };
    let overloads = "struct P { int n; };\n\
        __global__ void ovl(float* x) { x[0] = 1; }\n\
        __global__ void ovl(int* x) { x[0] = 2; }\n\
        __global__ void ovl(const float* __restrict__ a, const float* __restrict__ b, float* c, int n) { c[0] = a[0] + b[n]; }\n\
        __global__ void ovl(unsigned long long n, size_t m, P p, float4 v) { }\n\
        __global__ void ovl(const P& p, P* q, const P* r, double** d) { }\n\
        namespace ns {\n\
        __global__ void o2(float* a, float* b) { a[0] = b[0]; }\n\
        __global__ void o2(double* a) { a[0] = 1; }\n\
        }\n";
    let half = "#include <cuda_fp16.h>\n\
        __global__ void h(__half* a, __half* b) { a[0] = b[0]; }\n\
        __global__ void h(const __nv_bfloat16* a, int n) { }\n\
        __global__ void h(short2 s, unsigned char c, signed char d, char4 e) { }\n";
    let (_tmp, root) = repo_with(&[
        ("repro.toml", &read("repro.toml")),
        ("kernels/ovl.cu", overloads),
        ("kernels/half.cu", half),
        (
            "kernels/mac.cu",
            "#define KERNEL extern \"C\" __global__\nKERNEL void via_macro(float* x) { x[0] = 6; }\n",
        ),
        (
            "kernels/cls.cu",
            "struct Q { int n; static Q make(); };\n__global__ void k2(Q q, float* x) { x[0] = q.n; }\n",
        ),
        (
            "kernels/hd.cu",
            "#include \"hd.h\"\nstruct V { HD float get() const { return 1.f; } };\n__global__ void k3(float* x) { V v; x[0] = v.get(); }\n",
        ),
        (
            "kernels/hd.h",
            "#pragma once\n#define HD __host__ __device__\n",
        ),
    ]);
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["init", "--target", "sm_90"])
        .args(["--recipe", "kernels/ovl.cu", "--recipe", "kernels/half.cu"])
        .args(["--recipe", "kernels/mac.cu", "--recipe", "kernels/cls.cu"])
        .args(["--recipe", "kernels/hd.cu"])
        .env("REPRO_OFFLINE", "1")
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    let recipe =
        |name: &str| std::fs::read_to_string(root.join(format!("recipes/{name}.toml"))).unwrap();
    for (name, kind) in [
        ("ovl", "nvrtc"),
        ("half", "nvcc"),
        ("mac", "nvrtc"),
        ("cls", "nvcc"),
        ("hd", "nvrtc"),
    ] {
        assert!(
            recipe(name).contains(&format!("kind = \"{kind}\"")),
            "{name}:\n{}",
            recipe(name)
        );
    }
    assert!(
        recipe("cls").contains("it declares a host function or variable (`make`, line 1)"),
        "{}",
        recipe("cls")
    );
    assert!(
        recipe("mac").contains("entries = [\"via_macro\"]"),
        "{}",
        recipe("mac")
    );
    let ovl = recipe("ovl");
    for symbol in [
        "_Z3ovlPf",
        "_Z3ovlPi",
        "_Z3ovlPKfS0_Pfi",
        "_Z3ovlym1P6float4",
        "_Z3ovlRK1PPS_PS0_PPd",
        "_ZN2ns2o2EPfS0_",
        "_ZN2ns2o2EPd",
    ] {
        assert!(ovl.contains(&format!("\"{symbol}\"")), "{symbol}:\n{ovl}");
    }
    // Each recipe builds, its entries found in its artifacts.
    for name in ["ovl", "half", "mac", "cls", "hd"] {
        let (code, v, stderr) = json(&cache, &root, &["build", name]);
        assert_eq!(code, 0, "{name}: {stderr}\n{v}\n{}", recipe(name));
        assert_eq!(v["builds"][0]["checked"], "entries", "{name}: {v}");
    }
}

#[test]
fn a_fatbin_over_two_targets_holds_both() {
    let Some(cache) = nvcc_cache() else {
        return;
    };
    let (_tmp, root) = repo_with(&[
        ("repro.toml", &read("repro.toml")),
        ("kernels/k.cu", KERNELS),
        (
            "recipes/fat.toml",
            &nvcc_recipe(
                "kernels/k.cu",
                "targets = [\"sm_89\", \"sm_90\"]\noutputs = [\"fatbin\"]\nentries = [\"plain\", \"tk\"]\n",
            ),
        ),
    ]);
    let (code, v, stderr) = json(&cache, &root, &["build", "fat"]);
    assert_eq!(code, 0, "{stderr}\n{v}");
    let builds = v["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 1, "one nvcc run for both targets: {v}");
    let path = builds[0]["outputs"]["fatbin"]["path"].as_str().unwrap();
    let bytes = std::fs::read(path).unwrap();
    let members = repro::fatbin::members(&bytes).unwrap();
    let targets: Vec<String> = members.iter().map(|m| m.target()).collect();
    assert_eq!(targets, ["sm_89", "sm_90"]);
    for m in &members {
        // Kernels are the functions marked as entry points (st_other 0x10).
        let elf = repro::elf::Elf::parse(&m.payload).unwrap();
        let mut kernels: Vec<String> = elf
            .symbols()
            .unwrap()
            .into_iter()
            .filter(|s| s.kind == repro::elf::STT_FUNC && s.other & 0x10 != 0)
            .map(|s| s.name)
            .collect();
        kernels.sort();
        assert_eq!(kernels, ["_Z2tkILi4EEvPf", "_ZN2ns5innerEPi", "plain"]);
    }
    // NVIDIA's cuobjdump agrees, where its wheel can be had.
    if let Some(cuobjdump) = cuobjdump() {
        let out = std::process::Command::new(cuobjdump)
            .args(["-lelf", path])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("sm_89.cubin") && text.contains("sm_90.cubin"),
            "{text}"
        );
    }
    // The same targets with per-target outputs are still one build per target.
    std::fs::write(
        root.join("recipes/per.toml"),
        nvcc_recipe(
            "kernels/k.cu",
            "targets = [\"sm_89\", \"sm_90\"]\noutputs = [\"cubin\"]\nentries = [\"plain\"]\n",
        ),
    )
    .unwrap();
    let (code, v, stderr) = json(&cache, &root, &["build", "per"]);
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<&str> = v["builds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["recipe"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["per@sm_89", "per@sm_90"]);
}

/// NVIDIA's cuobjdump, unpacked from its wheel; `None` where pip cannot fetch it.
fn cuobjdump() -> Option<PathBuf> {
    let dir = common::wheels(&[("nvidia-cuda-cuobjdump".into(), "13.2.51".into())]).ok()?;
    let wheel = std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy()
                    .starts_with("nvidia_cuda_cuobjdump-13.2.51")
            })
        })?;
    let into = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuobjdump-13.2.51");
    let bin = into.join("nvidia/cu13/bin/cuobjdump");
    if !bin.is_file() {
        let ok = std::process::Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&into)
            .status()
            .ok()?
            .success();
        if !ok {
            return None;
        }
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).ok()?;
    }
    Some(bin)
}

#[test]
fn build_all_builds_every_recipe_it_can_and_exits_with_the_worst_failure() {
    let Some(cache) = nvcc_cache() else {
        return;
    };
    let (_tmp, root) = repo_with(&[
        ("repro.toml", &read("repro.toml")),
        ("kernels/k.cu", KERNELS),
        (
            "kernels/bad.cu",
            "__global__ void k(float *a) { a[0] = nope; }\n",
        ),
        (
            "recipes/a_ok.toml",
            &nvcc_recipe(
                "kernels/k.cu",
                "target = \"sm_90\"\noutputs = [\"cubin\"]\n",
            ),
        ),
        (
            "recipes/b_missing.toml",
            "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"kernels/k.cu\"\ntoolchain = \"nvcc@11.8\"\ntarget = \"sm_90\"\n",
        ),
        (
            "recipes/c_broken.toml",
            &nvcc_recipe(
                "kernels/bad.cu",
                "target = \"sm_90\"\noutputs = [\"cubin\"]\n",
            ),
        ),
        (
            "recipes/d_ok.toml",
            &nvcc_recipe("kernels/k.cu", "target = \"sm_90\"\noutputs = [\"ptx\"]\n"),
        ),
    ]);
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["build", "--all"])
        .env("REPRO_OFFLINE", "1")
        .env_remove("REPRO_WHEELHOUSE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The missing toolchain is an environment problem (3), worse than a failed build (5).
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    for (name, word) in [("a_ok", "built"), ("c_broken", "FAILED"), ("d_ok", "built")] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(name) && l.contains(word)),
            "{name}: {stdout}"
        );
    }
    assert!(
        stderr.contains("error: failed to build recipe `b_missing`: recipe `b_missing` pins nvcc@11.8, which is not installed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("reason: kernels/bad.cu(1): error: identifier \"nope\" is undefined"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "1 of 4 builds failed (c_broken); 1 of 4 recipes could not be built (b_missing)"
        ),
        "{stderr}"
    );
    // --json lists what was not built beside the builds.
    let (code, v, _) = json(&cache, &root, &["build", "--all"]);
    assert_eq!(code, 3);
    assert_eq!(v["builds"].as_array().unwrap().len(), 3, "{v}");
    assert_eq!(v["not-built"][0]["recipe"], "b_missing", "{v}");
    // Without the missing toolchain, the failed build decides: 5.
    std::fs::remove_file(root.join("recipes/b_missing.toml")).unwrap();
    let (code, _, stderr) = json(&cache, &root, &["build", "--all"]);
    assert_eq!(code, 5, "{stderr}");
}
