//! What a kernel costs, end to end: every example recipe's resource report equals what
//! NVIDIA's `cuobjdump --dump-resource-usage` prints for the same cubin (real NVRTC, the
//! pinned nvcc from its wheels, cuobjdump from its wheel), a register cap that forces
//! spills shows them (and equals ptxas's own count), budgets fail a build with exit 5, and
//! a build bisection finds the commit whose shared-memory tile blew the budget.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{git, kernel_repo, nvrtc_available, repo_with, repro};
use serde_json::Value;

/// One function's figures as cuobjdump prints them: REG, STACK, SHARED, LOCAL and the
/// constant banks.
type Figures = BTreeMap<String, u64>;

/// Parses `cuobjdump --dump-resource-usage`: (arch, function) → figures. A plain cubin's
/// listing names no architecture: `arch` is taken for it.
fn parse_cuobjdump(text: &str, arch: &str) -> BTreeMap<(String, String), Figures> {
    let mut out = BTreeMap::new();
    let mut arch = arch.to_string();
    let mut function: Option<String> = None;
    for line in text.lines() {
        let l = line.trim();
        if let Some(a) = l.strip_prefix("arch = ") {
            arch = a.to_string();
        } else if let Some(f) = l.strip_prefix("Function ") {
            function = Some(f.trim_end_matches(':').to_string());
        } else if let Some(f) = function.take() {
            let figures: Figures = l
                .split_whitespace()
                .filter_map(|kv| {
                    let (k, v) = kv.split_once(':')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect();
            out.insert((arch.clone(), f), figures);
        }
    }
    out
}

fn cuobjdump_figures(
    cuobjdump: &Path,
    file: &Path,
    arch: &str,
) -> BTreeMap<(String, String), Figures> {
    let out = std::process::Command::new(cuobjdump)
        .arg("--dump-resource-usage")
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_cuobjdump(&String::from_utf8_lossy(&out.stdout), arch)
}

/// Our figures of a build outcome's report, in cuobjdump's terms.
fn our_figures(build: &Value) -> BTreeMap<(String, String), Figures> {
    let mut out = BTreeMap::new();
    for t in build["resources"]["targets"].as_array().unwrap() {
        for k in t["kernels"].as_array().unwrap() {
            let mut f = Figures::new();
            f.insert("REG".into(), k["registers"].as_u64().unwrap());
            f.insert("STACK".into(), k["stack-bytes"].as_u64().unwrap());
            f.insert("SHARED".into(), k["shared-bytes"].as_u64().unwrap());
            f.insert("LOCAL".into(), k["local-bytes"].as_u64().unwrap());
            for (bank, n) in k["constant-bytes"].as_object().unwrap() {
                f.insert(format!("CONSTANT[{bank}]"), n.as_u64().unwrap());
            }
            let arch = t["arch"].as_str().unwrap().to_string();
            out.insert((arch, k["name"].as_str().unwrap().to_string()), f);
        }
    }
    out
}

/// Compares the two, figure by figure (cuobjdump's TEXTURE/SURFACE/SAMPLER columns are
/// not reported: no example uses them, and they are checked to be 0).
fn assert_same(
    what: &str,
    ours: &BTreeMap<(String, String), Figures>,
    theirs: &BTreeMap<(String, String), Figures>,
) {
    assert!(!theirs.is_empty(), "{what}: cuobjdump listed no function");
    let ours_keys: Vec<_> = ours.keys().collect();
    let their_keys: Vec<_> = theirs.keys().collect();
    assert_eq!(ours_keys, their_keys, "{what}: the kernels differ");
    for (k, t) in theirs {
        let o = &ours[k];
        for (name, v) in t {
            match name.as_str() {
                "TEXTURE" | "SURFACE" | "SAMPLER" => assert_eq!(*v, 0, "{what} {k:?} {name}"),
                _ => assert_eq!(
                    o.get(name),
                    Some(v),
                    "{what} {k:?} {name}: ours {o:?}, cuobjdump {t:?}"
                ),
            }
        }
        for name in o.keys() {
            assert!(
                t.contains_key(name),
                "{what} {k:?}: cuobjdump has no {name}"
            );
        }
    }
}

fn json_of(cache: &Path, root: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(cache)
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap(), v, stderr)
}

fn tool_or_skip(r: Result<PathBuf, String>, what: &str) -> Option<PathBuf> {
    match r {
        Ok(p) => Some(p),
        Err(why) => {
            assert!(
                std::env::var_os("REPRO_TEST_REQUIRE_WHEELHOUSE").is_none(),
                "{what} is required here but could not be had: {why}"
            );
            common::skip(&format!("needs {what} through pip: {why}"));
            None
        }
    }
}

/// Installs the pinned nvcc 13.0 into `cache` from its wheels.
fn install_nvcc(cache: &Path, root: &Path) -> Option<()> {
    let wh = tool_or_skip(
        common::wheels(&common::pinned_nvcc_wheels()),
        "the nvcc wheels",
    )?;
    let (code, _, err) = json_of(
        cache,
        root,
        &[
            "toolchain",
            "install",
            "nvcc@13.0",
            "--wheels",
            wh.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    Some(())
}

#[test]
fn every_example_recipe_reports_what_cuobjdump_reports() {
    if !nvrtc_available() {
        return;
    }
    let Some(cuobjdump) = tool_or_skip(common::cuobjdump(), "cuobjdump's wheel") else {
        return;
    };
    let (tmp, root) = kernel_repo();
    std::fs::copy(
        common::crate_dir().join("repro.toml"),
        root.join("repro.toml"),
    )
    .unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "pins"]);
    let cache = tmp.path().join("cache");
    if install_nvcc(&cache, &root).is_none() {
        return;
    }
    let (code, v, err) = json_of(&cache, &root, &["build", "--all", "--json"]);
    assert_eq!(code, 0, "{err}");
    let builds = v["builds"].as_array().unwrap();
    let recipes = std::fs::read_dir(root.join("recipes")).unwrap().count();
    // Every recipe, and every target of the several-target ones.
    assert!(
        builds.len() >= recipes,
        "{} builds of {recipes} recipes",
        builds.len()
    );
    let mut archs = std::collections::BTreeSet::new();
    for b in builds {
        let what = b["recipe"].as_str().unwrap();
        let cubin = PathBuf::from(b["outputs"]["cubin"]["path"].as_str().unwrap());
        let ours = our_figures(b);
        let arch = b["resources"]["targets"][0]["arch"].as_str().unwrap();
        assert_same(what, &ours, &cuobjdump_figures(&cuobjdump, &cubin, arch));
        for t in b["resources"]["targets"].as_array().unwrap() {
            archs.insert(t["arch"].as_str().unwrap().to_string());
            for k in t["kernels"].as_array().unwrap() {
                // No example spills, and ptxas's marks say so.
                assert_eq!(k["spill-store-bytes"], 0, "{what}: {k}");
                assert_eq!(k["spill-load-bytes"], 0, "{what}: {k}");
            }
        }
        // The [run] launch's occupancy is there for each recipe that has one.
        let stem = what.split('@').next().unwrap();
        let text = std::fs::read_to_string(root.join(format!("recipes/{stem}.toml"))).unwrap();
        if text.contains("\n[run]") {
            let occ = b["resources"]["occupancy"].as_array();
            assert!(
                occ.is_some_and(|o| !o.is_empty()),
                "{what}: {}",
                b["resources"]
            );
        }
    }
    assert!(
        archs.contains("sm_89") && archs.contains("sm_90"),
        "{archs:?}"
    );
    // A second build is a cache hit with the same report.
    let (_, again, _) = json_of(&cache, &root, &["build", "--all", "--json"]);
    assert_eq!(again["builds"][0]["cached"], true);
    assert_eq!(again["builds"][0]["resources"], builds[0]["resources"]);
    // `show` and `build -v` print it.
    let key = builds[0]["key"].as_str().unwrap();
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["show", key])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("resources:") && text.contains("REGS"),
        "{text}"
    );
    assert!(text.contains("occupancy of the [run] launch"), "{text}");
    let (_, shown, _) = json_of(&cache, &root, &["show", "--json", key]);
    assert_eq!(shown["resources"], builds[0]["resources"]);
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["build", "-v", "vector_add"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("resources:") && text.contains("vector_add"),
        "{text}"
    );
    assert!(text.contains("LIMITED BY"), "{text}");
}

const SPILL_KERNEL: &str = r#"extern "C" __global__ void spill(float* out, int n) {
  float acc[64];
  for (int j = 0; j < 64; ++j) acc[j] = out[j * n + threadIdx.x];
  for (int r = 0; r < 16; ++r)
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j * 7 + r) % 64] + 1.0f;
  float s = 0;
  for (int j = 0; j < 64; ++j) s += acc[j];
  out[threadIdx.x] = s;
}
"#;

fn spill_recipe(kind: &str, options: &str, outputs: &str, limits: &str) -> String {
    format!(
        "schema = 1\n[build]\nkind = \"{kind}\"\nsource = \"kernels/spill.cu\"\nentries = [\"spill\"]\ntarget = \"sm_90\"\noutputs = [{outputs}]\noptions = [{options}]\n{limits}\n"
    )
}

/// `-maxrregcount=32` forces this kernel to spill: the report says so, with the bytes ptxas
/// itself prints under `-Xptxas -v`, for a cubin and for a fat binary (whose PTX entry is
/// zstd-compressed); cuobjdump agrees on the rest.
#[test]
fn a_register_cap_that_forces_spills_shows_them() {
    if !nvrtc_available() {
        return;
    }
    let Some(cuobjdump) = tool_or_skip(common::cuobjdump(), "cuobjdump's wheel") else {
        return;
    };
    let (tmp, root) = repo_with(&[
        ("kernels/spill.cu", SPILL_KERNEL),
        (
            "recipes/nvrtc_spill.toml",
            &spill_recipe("nvrtc", "\"--maxrregcount=32\"", "\"cubin\"", ""),
        ),
        (
            "recipes/nvcc_spill.toml",
            &spill_recipe(
                "nvcc",
                "\"-maxrregcount=32\", \"-Xptxas\", \"-v\"",
                "\"cubin\", \"fatbin\"",
                "",
            ),
        ),
        (
            "repro.toml",
            &std::fs::read_to_string(common::crate_dir().join("repro.toml")).unwrap(),
        ),
    ]);
    let cache = tmp.path().join("cache");
    let (code, v, err) = json_of(&cache, &root, &["build", "--json", "nvrtc_spill"]);
    assert_eq!(code, 0, "{err}");
    let k = &v["builds"][0]["resources"]["targets"][0]["kernels"][0];
    assert_eq!(k["registers"], 32, "{k}");
    assert!(k["spill-store-bytes"].as_u64().unwrap() > 0, "{k}");
    assert!(k["spill-load-bytes"].as_u64().unwrap() > 0, "{k}");
    assert!(k["stack-bytes"].as_u64().unwrap() > 0, "{k}");
    let cubin = PathBuf::from(v["builds"][0]["outputs"]["cubin"]["path"].as_str().unwrap());
    assert_same(
        "nvrtc_spill",
        &our_figures(&v["builds"][0]),
        &cuobjdump_figures(&cuobjdump, &cubin, "sm_90"),
    );

    if install_nvcc(&cache, &root).is_none() {
        return;
    }
    let (code, v, err) = json_of(&cache, &root, &["build", "--json", "nvcc_spill"]);
    assert_eq!(code, 0, "{err}");
    let b = &v["builds"][0];
    // ptxas: "704 bytes stack frame, 824 bytes spill stores, 892 bytes spill loads".
    let log = b["log"].as_str().unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("bytes spill stores"))
        .expect(log);
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    let targets = b["resources"]["targets"].as_array().unwrap();
    // The cubin and the fat binary's cubin.
    assert_eq!(targets.len(), 2, "{targets:?}");
    for t in targets {
        let k = &t["kernels"][0];
        assert_eq!(
            [
                k["frame-bytes"].as_u64().unwrap(),
                k["spill-store-bytes"].as_u64().unwrap(),
                k["spill-load-bytes"].as_u64().unwrap()
            ],
            [nums[0], nums[1], nums[2]],
            "{line} vs {k}"
        );
    }
    for out in ["cubin", "fatbin"] {
        let file = PathBuf::from(b["outputs"][out]["path"].as_str().unwrap());
        let theirs = cuobjdump_figures(&cuobjdump, &file, "sm_90");
        let ours: BTreeMap<_, _> = our_figures(b).into_iter().collect();
        assert_same(out, &ours, &theirs);
    }
}

/// A kernel over a budget is a failed build (exit 5) whose message names the kernel, the
/// target, the figure and the limit; within budget it builds.
#[test]
fn a_kernel_over_budget_fails_the_build() {
    if !nvrtc_available() {
        return;
    }
    let limits = "[build.limits]\nmax-registers = 24\nspills = 0\nmax-shared-bytes = 40000";
    // No [run]: min-occupancy has no launch to judge, and that is the recipe's mistake,
    // said where it is written, before anything is built.
    let (tmp, root) = repo_with(&[
        ("kernels/spill.cu", SPILL_KERNEL),
        (
            "recipes/k.toml",
            &spill_recipe(
                "nvrtc",
                "\"--maxrregcount=32\"",
                "\"cubin\"",
                &format!("{limits}\nmin-occupancy = {{ sm_90 = 0.9 }}"),
            ),
        ),
    ]);
    let cache = tmp.path().join("cache");
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["build", "k"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("recipes/k.toml:13:1: [build.limits] `min-occupancy` needs a [run] launch"),
        "{stderr}"
    );
    std::fs::write(
        root.join("recipes/k.toml"),
        spill_recipe("nvrtc", "\"--maxrregcount=32\"", "\"cubin\"", limits),
    )
    .unwrap();
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args(["build", "k"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "over budget: kernel `spill` on sm_90: 32 registers per thread, over max-registers = 24"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("bytes of spill loads, over spills = 0"),
        "{stdout}"
    );
    // Shared memory is within its budget.
    assert!(!stdout.contains("shared memory per block"), "{stdout}");
    // The record keeps the report and the broken budgets.
    let (_, v, _) = json_of(&cache, &root, &["build", "--json", "k"]);
    assert_eq!(v["builds"][0]["status"], "failed");
    assert_eq!(v["builds"][0]["over-budget"].as_array().unwrap().len(), 2);
    let key = v["builds"][0]["key"].as_str().unwrap();
    let (_, shown, _) = json_of(&cache, &root, &["show", "--json", key]);
    assert_eq!(shown["over-budget"].as_array().unwrap().len(), 2, "{shown}");
    // Raising the budgets makes the same artifact pass, from the store.
    std::fs::write(
        root.join("recipes/k.toml"),
        spill_recipe(
            "nvrtc",
            "\"--maxrregcount=32\"",
            "\"cubin\"",
            "[build.limits]\nmax-registers = 32\nspills = 100000",
        ),
    )
    .unwrap();
    let (code, v, err) = json_of(&cache, &root, &["build", "--json", "k"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["builds"][0]["cached"], true);
    assert_eq!(v["builds"][0]["status"], "ok");
}

/// A kernel whose shared tile is `floats` floats, launched with 256 threads.
fn tile_kernel(i: usize, floats: usize) -> String {
    format!(
        "// version {i}\nextern \"C\" __global__ void k(float* a) {{\n  __shared__ float tile[{floats}];\n  tile[threadIdx.x] = a[threadIdx.x];\n  __syncthreads();\n  a[threadIdx.x] = tile[({floats} - 1) - threadIdx.x];\n}}\n"
    )
}

const TILE_RECIPE: &str = "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"kernels/k.cu\"\nentries = [\"k\"]\ntarget = \"sm_89\"\noutputs = [\"cubin\"]\n[build.limits]\nmax-shared-bytes = 32768\n[run]\nkernel = \"k\"\ngrid = 1\nblock = 256\nargs = [{ name = \"a\", buffer = \"f32\", count = 256, init = \"normal\" }]\n";

/// A history where commit 6 grows a shared tile from 16 KB to 40 KB (over the recipe's
/// 32 KB budget), commit 9 past 48 KB (ptxas refuses it), and commit 12 shrinks it back:
/// a build bisection finds commit 6 (commit 9 without the budget), and `--find fixed`
/// commit 12.
#[test]
fn a_build_bisection_finds_the_commit_that_blew_the_shared_memory_budget() {
    if !nvrtc_available() {
        return;
    }
    // `k48` has no budget: only ptxas's 48 KB limit.
    let no_budget = TILE_RECIPE.replace("[build.limits]\nmax-shared-bytes = 32768\n", "");
    let (tmp, root) = repo_with(&[
        ("recipes/k.toml", TILE_RECIPE),
        ("recipes/k48.toml", &no_budget),
    ]);
    for i in 1..=14 {
        let floats = match i {
            6..=8 => 10 * 1024,
            9..=11 => 13 * 1024,
            _ => 4 * 1024,
        };
        std::fs::create_dir_all(root.join("kernels")).unwrap();
        std::fs::write(root.join("kernels/k.cu"), tile_kernel(i, floats)).unwrap();
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", &format!("commit {i}")]);
    }
    let cache = tmp.path().join("cache");
    let (code, v, err) = json_of(
        &cache,
        &root,
        &[
            "bisect", "--json", "--mode", "build", "--good", "HEAD~13", "--bad", "HEAD~5",
            "--recipe", "k",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["culprit"]["subject"], "commit 6", "{v}");
    let bad = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "commit 6")
        .unwrap();
    let detail = bad["detail"].as_str().unwrap();
    assert!(
        detail.contains("over budget: kernel `k` on sm_89: 40960 bytes of shared memory per block (static), over max-shared-bytes = 32768"),
        "{detail}"
    );
    assert!(
        bad["resources"].as_str().unwrap().contains("sm_89 k:"),
        "{bad}"
    );
    // The human evidence table shows each commit's resources.
    let out = repro(&cache)
        .arg("-C")
        .arg(&root)
        .args([
            "bisect", "--mode", "build", "--good", "HEAD~13", "--bad", "HEAD~5", "--recipe", "k",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("resources of each evaluated commit's build"),
        "{text}"
    );
    assert!(text.contains("40960 B shared"), "{text}");
    // Past 48 KB ptxas itself refuses: still bad, and the step says ptxas's words.
    let (_, v, _) = json_of(
        &cache,
        &root,
        &[
            "bisect", "--json", "--mode", "build", "--good", "HEAD~13", "--bad", "HEAD~3",
            "--recipe", "k",
        ],
    );
    for s in v["steps"].as_array().unwrap() {
        let n: usize = s["subject"].as_str().unwrap()[7..].parse().unwrap();
        let d = s["detail"].as_str().unwrap_or_default();
        match n {
            6..=8 => assert!(d.contains("over budget"), "{s}"),
            9..=11 => assert!(
                d.contains("build failed") && !d.contains("over budget"),
                "{s}"
            ),
            _ => assert_eq!(s["verdict"], "good", "{s}"),
        }
    }
    // Without a budget, the commit that first blew the 48 KB static limit.
    let (code, v, err) = json_of(
        &cache,
        &root,
        &[
            "bisect", "--json", "--mode", "build", "--good", "HEAD~13", "--bad", "HEAD~3",
            "--recipe", "k48",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["culprit"]["subject"], "commit 9", "{v}");
    let bad = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == "commit 9")
        .unwrap();
    assert!(
        bad["detail"]
            .as_str()
            .unwrap()
            .contains("too much shared data"),
        "{bad}"
    );
    // Which commit came back under?
    let (code, v, err) = json_of(
        &cache,
        &root,
        &[
            "bisect", "--json", "--mode", "build", "--bad", "HEAD~8", "--good", "HEAD", "--recipe",
            "k", "--find", "fixed",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["culprit"]["subject"], "commit 12", "{v}");
}

/// The occupancy table against the driver: for every kernel of every NVRTC example recipe
/// built for this GPU's architecture, at block sizes from 32 to the kernel's limit and
/// three dynamic shared-memory sizes, `cuOccupancyMaxActiveBlocksPerMultiprocessor`'s
/// answer equals ours; the driver's registers and static shared memory equal the report's.
/// Prints a table (`--nocapture`); `benches/gpu_tests.sh run` runs it on the GPU machine.
#[test]
#[ignore = "needs a GPU: compares the occupancy table with the driver's answer"]
fn occupancy_equals_the_drivers_answer() {
    use cudarc::driver::result as cu;
    use cudarc::driver::sys;
    common::require_gpu();
    assert!(nvrtc_available(), "NVRTC is needed to build the examples");
    cu::init().unwrap();
    let dev = cu::device::get(0).unwrap();
    let attr = |a| unsafe { cu::device::get_attribute(dev, a).unwrap() };
    let arch = format!(
        "sm_{}{}",
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    );
    let limits = repro::occupancy::limits(&arch).expect("the table knows this GPU");
    let ctx = unsafe { cu::primary_ctx::retain(dev).unwrap() };
    unsafe { cu::ctx::set_current(ctx).unwrap() };
    let (tmp, root) = kernel_repo();
    let cache = tmp.path().join("cache");
    let mut rows = vec![format!(
        "{:<10} {:<24} {:>5} {:>7} {:>6} {:>8} {:>7} {:>7}",
        "arch", "kernel", "regs", "shared", "block", "dynamic", "driver", "repro"
    )];
    let mut mismatches = Vec::new();
    for recipe in [
        "vector_add",
        "reduction",
        "softmax",
        "sgemm",
        "flash_attention",
    ] {
        let text = std::fs::read_to_string(root.join(format!("recipes/{recipe}.toml"))).unwrap();
        std::fs::write(
            root.join(format!("recipes/{recipe}.toml")),
            text.replace("target = \"sm_90\"", &format!("target = \"{arch}\"")),
        )
        .unwrap();
        let (code, v, err) = json_of(&cache, &root, &["build", "--json", recipe]);
        assert_eq!(code, 0, "{err}");
        let b = &v["builds"][0];
        let cubin = std::fs::read(b["outputs"]["cubin"]["path"].as_str().unwrap()).unwrap();
        let mut image = cubin.clone();
        image.push(0);
        let module = unsafe { cu::module::load_data(image.as_ptr().cast()).unwrap() };
        for k in b["resources"]["targets"][0]["kernels"].as_array().unwrap() {
            let name = std::ffi::CString::new(k["name"].as_str().unwrap()).unwrap();
            let f = unsafe { cu::module::get_function(module, name.clone()).unwrap() };
            let fattr = |a| unsafe { cu::function::get_function_attribute(f, a).unwrap() };
            use sys::CUfunction_attribute_enum as A;
            let regs = fattr(A::CU_FUNC_ATTRIBUTE_NUM_REGS) as u64;
            let shared = fattr(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) as u64;
            let max_threads = fattr(A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) as u64;
            assert_eq!(regs, k["registers"].as_u64().unwrap(), "{name:?} registers");
            // The report's SHARED is cuobjdump's (the section, the system reserve included
            // where ptxas mapped it in); the driver's static figure is the kernel's own.
            let reserved = k["reserved-shared-bytes"].as_u64().unwrap_or(0);
            assert_eq!(
                shared,
                k["shared-bytes"].as_u64().unwrap() - reserved,
                "{name:?} static shared"
            );
            for threads in (32..=max_threads)
                .step_by(32)
                .filter(|t| t.is_power_of_two() || t % 96 == 0)
            {
                for dynamic in [0u64, 8192, 32768] {
                    let driver = unsafe {
                        cu::occupancy::max_active_block_per_multiprocessor(
                            f,
                            threads as i32,
                            dynamic as usize,
                        )
                    };
                    let ours = repro::occupancy::occupancy(
                        &arch,
                        &limits,
                        repro::occupancy::Demand {
                            registers: regs as u32,
                            static_smem: k["shared-bytes"].as_u64().unwrap() - reserved,
                            dynamic_smem: dynamic,
                            threads,
                            barriers: k["barriers"].as_u64().unwrap() as u32,
                        },
                    );
                    let driver = driver.map_or(-1, i64::from);
                    rows.push(format!(
                        "{arch:<10} {:<24} {regs:>5} {shared:>7} {threads:>6} {dynamic:>8} {driver:>7} {:>7}{}",
                        k["name"].as_str().unwrap(),
                        ours.blocks_per_sm,
                        if driver == i64::from(ours.blocks_per_sm) { "" } else { "  MISMATCH" }
                    ));
                    if driver != i64::from(ours.blocks_per_sm) {
                        mismatches.push(rows.last().unwrap().clone());
                    }
                }
            }
        }
    }
    println!("{}", rows.join("\n"));
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

/// Bad cubins through `repro build`: a command build that declares a cubin (a real NVRTC
/// sm_90 cubin, patched) whose `.nv.info` is gone (an old or stripped toolchain's output) has
/// no resource report, says why under `build -v`, and fails any `[build.limits]` budget (exit
/// 5) naming the attribute; one whose architecture the occupancy table does not know (sm_61)
/// fails `min-occupancy` (exit 5) listing the architectures it knows.
#[test]
fn cubins_without_attributes_or_with_unknown_architectures_are_named() {
    let real =
        std::fs::read(common::crate_dir().join("tests/fixtures/cubin/small_sm_90.cubin")).unwrap();
    let patch = |from: &[u8], to: &[u8]| {
        let mut c = real.clone();
        let at = c.windows(from.len()).position(|w| w == from).unwrap();
        c[at..at + to.len()].copy_from_slice(to);
        c
    };
    let no_info = patch(b"\0.nv.info\0", b"\0.nv.infx\0");
    // e_flags (offset 48): the SM number is its second byte in ELF ABI 8 and later.
    let mut sm61 = real.clone();
    assert_eq!(sm61[49], 90);
    sm61[49] = 61;
    let recipe = |file: &str, limits: &str| {
        format!(
            "schema = 1\n[build]\nkind = \"command\"\nargv = [\"cp\", \"{file}\", \"out.cubin\"]\ninputs = [\"{file}\"]\noutputs = [\"out.cubin\"]\n{limits}\n"
        )
    };
    let (tmp, root) = repo_with(&[
        ("recipes/plain.toml", &recipe("bad.cubin", "")),
        (
            "recipes/capped.toml",
            &recipe("bad.cubin", "[build.limits]\nmax-registers = 64"),
        ),
        (
            "recipes/old.toml",
            &recipe(
                "sm61.cubin",
                "entries = [\"k\"]\n[build.limits]\nmin-occupancy = 0.5\n[run]\nkernel = \"k\"\ngrid = 1\nblock = 128\nargs = []",
            ),
        ),
    ]);
    std::fs::write(root.join("bad.cubin"), &no_info).unwrap();
    std::fs::write(root.join("sm61.cubin"), &sm61).unwrap();
    common::git(&root, &["add", "-A"]);
    common::git(&root, &["commit", "-qm", "cubins"]);
    let cache = tmp.path().join("cache");
    let build = |args: &[&str]| {
        let out = repro(&cache)
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap(), text)
    };
    let why = "out.cubin: the cubin has no resource attributes (no EIATTR_REGCOUNT for `k`)";
    let (code, text) = build(&["build", "-v", "plain"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("unreadable: {why}")), "{text}");
    let (code, text) = build(&["build", "capped"]);
    assert_eq!(code, 5, "{text}");
    assert!(
        text.contains(&format!("over budget: cannot check [build.limits]: {why}")),
        "{text}"
    );
    let (code, text) = build(&["build", "old"]);
    assert_eq!(code, 5, "{text}");
    assert!(
        text.contains("out.cubin: no occupancy table for sm_61 (known: sm_70, sm_72, sm_75"),
        "{text}"
    );
}
