//! Starting in a repository that never heard of repro: `repro init`, `repro toolchain pin`,
//! toolchains that install themselves on first use, content-addressed toolchain trees, and
//! one compiler identity for every command, end to end with NVIDIA's real wheels fetched
//! through pip (tests/common `wheels`, kept in cargo's target directory between runs).
//!
//! The toolchain cache (XDG_CACHE_HOME) of every test starts empty: what a command needs, it
//! installs itself from the wheels, verified by the sha256 `repro init` wrote.

use crate::common;
use common::wheelhouse;

use std::path::Path;

use common::{git, repo_with, repro};
use serde_json::Value;

/// The wheels of the nvcc release `repro.toml` at `root` makes the default.
fn default_nvcc_wheels(root: &Path) -> Vec<(String, String)> {
    let v: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("repro.toml")).unwrap()).unwrap();
    let release = v["toolchain"]["nvcc-default"].as_str().unwrap().to_string();
    v["toolchain"]["nvcc"][&release]["wheels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["package"].as_str().unwrap().to_string(),
                w["version"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `repro -C ROOT ARGS` with the cache `cache`, wheels from `wh` (pip's `--find-links`, as a
/// mirror would be), and no NVRTC or nvcc from the machine: (code, stdout, stderr).
fn run(cache: &Path, root: &Path, wh: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut c = repro(cache);
    c.arg("-C")
        .arg(root)
        .args(args)
        .env_remove("REPRO_NVRTC")
        .env_remove("REPRO_NVCC")
        .env_remove("REPRO_OFFLINE");
    match wh {
        Some(d) => c.env("REPRO_WHEELHOUSE", d),
        None => c.env_remove("REPRO_WHEELHOUSE"),
    };
    common::outcome(&mut c)
}

/// The toolchain trees in `cache`.
fn trees(cache: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(cache.join("repro/toolchains"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

const KERNEL: &str = r#"// A kernel file from someone else's repository: it includes the CUDA runtime and cuBLAS.
#include <cuda_runtime.h>
#include <cublas_v2.h>

__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

// The host side, as such files have it.
void launch_scale(float* x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"#;

/// A pseudo-random number below `n` (the break's place differs from run to run).
fn random_below(n: usize) -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize;
    (nanos ^ (std::process::id() as usize).wrapping_mul(2_654_435_761)) % n
}

/// The words of a command, borrowed.
fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The commands of the first `sh` block under `heading` in the documentation file `rel`, as
/// argument lists without the leading `repro`.
fn documented(rel: &str, heading: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(common::crate_dir().join(rel)).unwrap();
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("{rel} lacks {heading}"));
    let block = text[at..]
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("no sh block under {heading} in {rel}"));
    block
        .lines()
        .map(|l| {
            let words: Vec<String> = l
                .split(" #")
                .next()
                .unwrap()
                .split_whitespace()
                .map(str::to_string)
                .collect();
            assert_eq!(words[0], "repro", "{rel}: {l}");
            words[1..].to_vec()
        })
        .collect()
}

/// The README's "Starting in your own repository" (and the guide page's), command for
/// command: init, build, and the bisection that names a break at a random place.
#[test]
fn init_then_bisect_names_the_culprit_with_nothing_installed_or_written_by_hand() {
    let commands = documented("README.md", "## Starting in your own repository");
    assert_eq!(
        commands,
        documented(
            "docs/src/guide/start.md",
            "# Starting in your own repository"
        )
    );
    let [init, build, bisect] = &commands[..] else {
        panic!("three commands: {commands:?}");
    };
    assert_eq!(args(init), ["init", "--recipe", "kernels/k.cu"]);
    let (tmp, root) = repo_with(&[("kernels/k.cu", KERNEL), ("README.md", "a project\n")]);
    git(&root, &["tag", "v1.0"]);
    let cache = tmp.path().join("cache");

    // `repro init --recipe kernels/k.cu`: no wheels are fetched yet (the pins come from the
    // table built into repro), and the kernel's includes choose nvcc and cuBLAS.
    let (code, out, err) = run(&cache, &root, None, &args(init));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote repro.toml: nvcc "), "{out}");
    assert!(out.contains("nvidia-cublas "), "{out}");
    assert!(
        out.contains("wrote recipes/k.toml: nvcc recipe for kernels/k.cu, kernels scale"),
        "{out}"
    );
    // Run from outside the repository (`-C`), the next command says where.
    assert!(
        out.contains(&format!("next: repro -C {} build k\n", root.display())),
        "{out}"
    );
    assert!(trees(&cache).is_empty());
    let recipe = std::fs::read_to_string(root.join("recipes/k.toml")).unwrap();
    assert!(recipe.contains("kind = \"nvcc\""), "{recipe}");
    assert!(
        recipe.contains("<cuda_runtime.h>, <cublas_v2.h>"),
        "{recipe}"
    );

    let Some(wh) = wheelhouse(&default_nvcc_wheels(&root)) else {
        return;
    };
    // `repro build recipes/k.toml`: the pinned nvcc (with cuBLAS) installs itself first.
    let (code, out, err) = run(&cache, &root, Some(&wh), &args(build));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("is pinned but not installed: installing it now"),
        "{err}"
    );
    assert_eq!(trees(&cache).len(), 1, "{:?}", trees(&cache));

    // Later history, with a break at a random place among unrelated commits.
    let n = 9;
    let breaks_at = 1 + random_below(n - 1);
    for i in 1..=n {
        if i == breaks_at {
            let broken = KERNEL.replace("x[i] *= a;", "x[i] *= a + undeclared_scale;");
            std::fs::write(root.join("kernels/k.cu"), broken).unwrap();
            git(&root, &["commit", "-qam", "break the kernel"]);
        } else {
            std::fs::write(root.join("README.md"), format!("a project, take {i}\n")).unwrap();
            git(&root, &["commit", "-qam", &format!("docs {i}")]);
        }
    }
    let culprit = git(
        &root,
        &["rev-list", "-1", "--grep", "break the kernel", "main"],
    );

    // A fresh cache: the bisection installs the toolchain itself too.
    let cache = tmp.path().join("fresh-cache");
    let (code, out, err) = run(&cache, &root, Some(&wh), &args(bisect));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&culprit[..12]),
        "culprit {culprit}:\n{out}{err}"
    );
    assert!(out.contains("break the kernel"), "{out}");
    assert_eq!(trees(&cache).len(), 1);
}

/// Two projects that call different wheel sets "13.0" keep their own trees and build keys.
#[test]
fn two_projects_pinning_different_wheels_under_one_release_keep_their_own_trees_and_keys() {
    let kernel = "extern \"C\" __global__ void k(float* a) { a[0] = 1.0f; }\n";
    let recipe = "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_90\"\noutputs = [\"cubin\"]\n";
    let (tmp_a, a) = repo_with(&[("k.cu", kernel), ("recipes/k.toml", recipe)]);
    let (_tmp_b, b) = repo_with(&[("k.cu", kernel), ("recipes/k.toml", recipe)]);
    let cache = tmp_a.path().join("cache");
    // The same release name, pinned without hand-written digests; B adds CUTLASS's headers.
    let (code, out, err) = run(&cache, &a, None, &["toolchain", "pin", "nvcc@13.0"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("pinned nvcc@13.0 in repro.toml (5 wheels"),
        "{out}"
    );
    let (code, out, err) = run(
        &cache,
        &b,
        None,
        &["toolchain", "pin", "nvcc@13.0", "--with", "cutlass"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(6 wheels"), "{out}");
    let mut need = default_nvcc_wheels(&a);
    need.extend(default_nvcc_wheels(&b));
    need.sort();
    need.dedup();
    let Some(wh) = wheelhouse(&need) else {
        return;
    };
    let build = |root: &Path| {
        let (code, out, err) = run(&cache, root, Some(&wh), &["--json", "build", "k"]);
        assert_eq!(code, 0, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        v["builds"][0]["key"].as_str().unwrap().to_string()
    };
    let key_a = build(&a);
    let key_b = build(&b);
    assert_ne!(key_a, key_b, "the wheel sets differ, so do the compilers");
    let t = trees(&cache);
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(t.iter().all(|n| n.starts_with("nvcc-13.0-")), "{t:?}");
    // B's install changed nothing for A: the same key again, even forced, and `which` and
    // `list` name A's own tree.
    let (code, out, err) = run(&cache, &a, Some(&wh), &["--json", "build", "--force", "k"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["builds"][0]["key"], key_a.as_str());
    let (_, list, _) = run(&cache, &a, None, &["--json", "toolchain", "list"]);
    let v: Value = serde_json::from_str(&list).unwrap();
    let serving: Vec<(String, Vec<String>)> = v["toolchains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["serves"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(serving.len(), 2, "{v}");
    for (name, projects) in &serving {
        assert_eq!(projects.len(), 1, "{name} serves {projects:?}");
    }
    let (_, which_a, _) = run(&cache, &a, None, &["toolchain", "which"]);
    let tree_a = serving
        .iter()
        .find(|(_, p)| p[0] == a.display().to_string())
        .unwrap();
    assert!(which_a.contains(&tree_a.0), "{which_a}");
    // Nothing is unused yet; once A drops its pin, its tree is.
    let (_, out, _) = run(&cache, &a, None, &["toolchain", "gc"]);
    assert!(out.contains("removed 0 toolchain trees"), "{out}");
    std::fs::write(a.join("repro.toml"), "schema = 1\n").unwrap();
    let (_, out, _) = run(&cache, &a, None, &["toolchain", "gc"]);
    assert!(out.contains("removed 1 toolchain tree"), "{out}");
    assert_eq!(trees(&cache).len(), 1);
}

/// A kernel file that includes NVTX's markers (`<nvtx3/nvToolsExt.h>`, as karpathy/llm.c's
/// kernels do through their common header) builds with the pinned nvcc once NVTX is pinned
/// beside it, as `repro init` says.
#[test]
fn a_kernel_that_includes_nvtx_builds_once_nvtx_is_pinned_as_init_says() {
    let kernel = "#include <nvtx3/nvToolsExt.h>\nextern \"C\" __global__ void k(float* a) { a[0] = 1.0f; }\nvoid mark() { nvtxRangePushA(\"k\"); nvtxRangePop(); }\n";
    let (tmp, root) = repo_with(&[("k.cu", kernel)]);
    let cache = tmp.path().join("cache");
    // A pin that carries CUTLASS already: the command the note gives keeps it.
    let (code, _, err) = run(
        &cache,
        &root,
        None,
        &["toolchain", "pin", "nvcc@13.0", "--with", "cutlass"],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(
        &cache,
        &root,
        None,
        &["--offline", "--json", "init", "--recipe", "k.cu"],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["kernels"][0]["components"],
        serde_json::json!(["nvtx"]),
        "{v}"
    );
    let note = v["notes"][0].as_str().unwrap_or_default();
    assert!(
        note.contains("k.cu includes nvtx headers") && note.contains("--with cutlass,nvtx --force"),
        "{v}"
    );
    let (code, out, err) = run(
        &cache,
        &root,
        None,
        &["toolchain", "pin", "nvcc@13.0", "--with", "nvtx", "--force"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(6 wheels"), "{out}");
    let pinned = default_nvcc_wheels(&root);
    assert!(pinned.iter().any(|(p, _)| p == "nvidia-nvtx"), "{pinned:?}");
    let Some(wh) = wheelhouse(&pinned) else {
        return;
    };
    let (code, out, err) = run(&cache, &root, Some(&wh), &["--json", "build", "k"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["builds"][0]["status"], "ok", "{v}");
}

#[test]
fn bad_input_gets_a_clear_message_its_exit_code_and_leaves_nothing_half_written() {
    let cache = tempfile::tempdir().unwrap();
    // Not a git repository.
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("k.cu"), KERNEL).unwrap();
    let (code, _, err) = run(
        cache.path(),
        plain.path(),
        None,
        &["init", "--recipe", "k.cu"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not inside a git repository"), "{err}");
    assert!(err.contains("hint: run `git init`"), "{err}");
    assert!(!plain.path().join("repro.toml").exists());

    let (_tmp, root) = repo_with(&[("k.cu", KERNEL), ("notes.cu", "// no kernel\n")]);
    // A file without kernels, and one outside the repository: nothing is written.
    for (file, says) in [
        ("notes.cu", "defines no __global__ kernel"),
        ("../elsewhere.cu", "is not a file inside the repository"),
    ] {
        let (code, _, err) = run(cache.path(), &root, None, &["init", "--recipe", file]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!root.join("repro.toml").exists());
    }
    // A target that is none, named as the option's mistake, before any lookup.
    let (code, _, err) = run(
        cache.path(),
        &root,
        None,
        &["init", "--recipe", "k.cu", "--target", "sm_9x"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--target `sm_9x` is not a GPU target"),
        "{err}"
    );
    assert!(!root.join("repro.toml").exists());
    // A file named `recipes` where init writes its recipes: said before anything is
    // written, as the repository's state (exit 2), not as a bug.
    std::fs::write(root.join("recipes"), "not a directory\n").unwrap();
    let (code, _, err) = run(cache.path(), &root, None, &["init", "--recipe", "k.cu"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("recipes is not a directory"), "{err}");
    assert!(
        err.contains("hint: init writes recipes into the recipes/ directory"),
        "{err}"
    );
    assert!(!root.join("repro.toml").exists());
    std::fs::remove_file(root.join("recipes")).unwrap();
    // Releases repro cannot resolve: CUDA 12's nvcc (no driver in its wheels), and one
    // neither the table nor (offline) pip has.
    let (code, _, err) = run(cache.path(), &root, None, &["init", "--nvcc", "12.8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no nvcc driver"), "{err}");
    assert!(err.contains("hint: pin one of nvcc@13.0"), "{err}");
    let (code, _, err) = run(
        cache.path(),
        &root,
        None,
        &["--offline", "toolchain", "pin", "nvcc@13.99"],
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("nvcc@13.99 is not a release repro knows, and --offline"),
        "{err}"
    );
    assert!(err.contains("releases built into repro: 13.0"), "{err}");
    let (code, _, err) = run(
        cache.path(),
        &root,
        None,
        &["toolchain", "pin", "nvcc@13.0", "--with", "mkl"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("`mkl` is not a component"), "{err}");
    assert!(!root.join("repro.toml").exists());

    // init writes once; a second run without --force changes nothing: neither repro.toml
    // (its pins are replaced only by `init --force` without recipes) nor the recipe.
    let (code, out, err) = run(cache.path(), &root, None, &["init", "--recipe", "k.cu"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote repro.toml"), "{out}");
    let before = std::fs::read(root.join("repro.toml")).unwrap();
    let (code, _, err) = run(cache.path(), &root, None, &["init"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("repro.toml exists already"), "{err}");
    assert!(err.contains("hint: pass --force"), "{err}");
    let (code, _, err) = run(cache.path(), &root, None, &["init", "--recipe", "k.cu"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("recipes/k.toml exists already"), "{err}");
    assert!(err.contains("hint: pass --force"), "{err}");
    assert_eq!(std::fs::read(root.join("repro.toml")).unwrap(), before);
    let (code, out, err) = run(
        cache.path(),
        &root,
        None,
        &["init", "--recipe", "k.cu", "--force"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replaced recipes/k.toml"), "{out}");
    assert!(out.contains("kept repro.toml"), "{out}");
    assert_eq!(std::fs::read(root.join("repro.toml")).unwrap(), before);
    let (code, out, err) = run(cache.path(), &root, None, &["init", "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replaced repro.toml"), "{out}");

    // Offline, a pinned toolchain that is not installed is an error naming the command
    // that installs it, and nothing is installed.
    let (code, _, err) = run(cache.path(), &root, None, &["--offline", "build", "k"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("forbids installing it"), "{err}");
    assert!(
        err.contains("hint: run `repro toolchain install nvcc@"),
        "{err}"
    );
    assert!(trees(cache.path()).is_empty());
}

/// A pin whose digest is not what the wheel has: the install that a build starts refuses
/// it, names both digests, and leaves no tree.
#[test]
fn a_pinned_digest_that_does_not_match_the_wheel_is_refused_on_first_use() {
    // Host headers make it an nvcc recipe.
    let (tmp, root) = repo_with(&[(
        "k.cu",
        "#include <cuda_runtime.h>\nextern \"C\" __global__ void k(float* a) { a[0] = 1.0f; }\n",
    )]);
    let cache = tmp.path().join("cache");
    let (code, _, err) = run(
        &cache,
        &root,
        None,
        &["init", "--nvcc", "13.0", "--recipe", "k.cu"],
    );
    assert_eq!(code, 0, "{err}");
    let Some(wh) = wheelhouse(&default_nvcc_wheels(&root)) else {
        return;
    };
    let text = std::fs::read_to_string(root.join("repro.toml")).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    let real = v["toolchain"]["nvcc"]["13.0"]["wheels"][2]["sha256"][std::env::consts::ARCH]
        .as_str()
        .unwrap()
        .to_string();
    let wrong = "0".repeat(64);
    std::fs::write(root.join("repro.toml"), text.replace(&real, &wrong)).unwrap();
    let (code, _, err) = run(&cache, &root, Some(&wh), &["build", "k"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "has sha256 {real}, but the pin is {wrong}; refusing to install it"
        )),
        "{err}"
    );
    assert!(trees(&cache).is_empty(), "{:?}", trees(&cache));
}

/// A release the built-in table lacks is resolved through pip (versions from `pip index
/// versions`, digests for both architectures from a resolving dry run); one pip does not
/// have either is refused with the versions it does have; one with no wheel for the other
/// architecture is pinned for this one.
#[test]
fn pin_resolves_a_release_the_table_lacks_through_pip() {
    let (tmp, root) = repo_with(&[]);
    let cache = tmp.path().join("cache");
    let (code, out, err) = run(&cache, &root, None, &["toolchain", "pin", "nvrtc@12.4.99"]);
    if code == 3 && err.contains("cannot ask pip") {
        assert!(
            std::env::var_os("REPRO_TEST_REQUIRE_WHEELHOUSE").is_none(),
            "pip is required here: {err}"
        );
        common::skip(&format!("needs pip's index: {err}"));
        return;
    }
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("from pip's index"), "{out}");
    let cfg: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("repro.toml")).unwrap()).unwrap();
    let pin = &cfg["toolchain"]["nvrtc"];
    assert_eq!(pin["version"].as_str(), Some("12.4.99"), "{cfg}");
    for arch in ["x86_64", "aarch64"] {
        assert_eq!(pin["sha256"][arch].as_str().unwrap().len(), 64, "{cfg}");
    }
    let (code, _, err) = run(&cache, &root, None, &["toolchain", "pin", "nvrtc@12.4.1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("nvrtc@12.4.1 is not a release repro knows, and pip's index has no nvidia-cuda-nvrtc-cu12 of that release (it has: "),
        "{err}"
    );
    assert!(err.contains("12.4.99"), "{err}");
    // NVIDIA published NVRTC 12.2.140 for x86_64 only: it pins with that architecture's
    // digest, and the lockfile says which architectures it offers.
    if std::env::consts::ARCH == "x86_64" {
        let (code, _, err) = run(
            &cache,
            &root,
            None,
            &["toolchain", "pin", "--force", "nvrtc@12.2.140"],
        );
        assert_eq!(code, 0, "{err}");
        let cfg: toml::Value =
            toml::from_str(&std::fs::read_to_string(root.join("repro.toml")).unwrap()).unwrap();
        let sha = cfg["toolchain"]["nvrtc"]["sha256"].as_table().unwrap();
        assert_eq!(sha.keys().collect::<Vec<_>>(), ["x86_64"], "{cfg}");
    }
}

/// The recipe text at `root/recipes/NAME.toml`, checked to be a recipe with these entries.
fn recipe_with_entries(root: &Path, name: &str, entries: &[&str]) -> String {
    let text = std::fs::read_to_string(root.join(format!("recipes/{name}.toml"))).unwrap();
    let v: toml::Value = toml::from_str(&text).unwrap();
    let got: Vec<&str> = v["build"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(got, entries, "{text}");
    text
}

/// After `repro init`, its own "next:" line followed word for word (`FILE.cu` a file of the
/// repository) writes the recipe beside repro.toml and leaves repro.toml byte for byte as it
/// was, as do several files at once, offline (no pin is resolved). An existing recipe, a
/// file that does not exist, two files that would share a recipe, pin options and a
/// broken repro.toml are refused, each named, and nothing is written.
#[test]
fn init_recipe_beside_an_existing_repro_toml_keeps_it_byte_for_byte() {
    let nvrtc_kernel = "extern \"C\" __global__ void k(float* a) { a[0] = 1.0f; }\n";
    let (tmp, root) = repo_with(&[
        ("kernels/a.cu", nvrtc_kernel),
        ("kernels/b.cu", &nvrtc_kernel.replace("void k(", "void b1(")),
        ("src/c.cu", KERNEL),
        ("x/k.cu", nvrtc_kernel),
        ("y/k.cu", nvrtc_kernel),
    ]);
    let cache = tmp.path().join("cache");
    let (code, out, err) = run(&cache, &root, None, &["init"]);
    assert_eq!(code, 0, "{err}");
    let next = out
        .lines()
        .find_map(|l| l.strip_prefix("next: "))
        .unwrap_or_else(|| panic!("no next line: {out}"));
    let hinted = next.split(" (").next().unwrap();
    let outside = format!("repro -C {} ", root.display());
    assert!(hinted.starts_with(&outside), "{out}");
    let hinted = hinted.replacen(&outside, "repro ", 1);
    assert_eq!(hinted, "repro init --recipe FILE.cu", "{out}");
    // The user's own additions to repro.toml must survive too.
    let mut text = std::fs::read_to_string(root.join("repro.toml")).unwrap();
    text.push_str("\n# our site's settings\n[slurm]\noptions = [\"--partition=gpu\"]\n");
    std::fs::write(root.join("repro.toml"), &text).unwrap();
    let before = std::fs::read(root.join("repro.toml")).unwrap();
    let unchanged = || assert_eq!(std::fs::read(root.join("repro.toml")).unwrap(), before);

    // The hint, word for word, with a file of this repository for FILE.cu.
    let words: Vec<String> = hinted
        .replace("FILE.cu", "kernels/a.cu")
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    let (code, out, err) = run(&cache, &root, None, &args(&words));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kept repro.toml: its pins are unchanged (nvcc "),
        "{out}"
    );
    assert!(
        out.contains("wrote recipes/a.toml: nvrtc recipe for kernels/a.cu, kernels k"),
        "{out}"
    );
    assert!(out.contains(&format!("{outside}build a\n")), "{out}");
    assert!(!out.contains("wrote repro.toml") && !out.contains("replaced repro.toml"));
    unchanged();
    recipe_with_entries(&root, "a", &["k"]);

    // Several files at once, offline, with --json: nothing is resolved, only recipes written.
    let (code, out, err) = run(
        &cache,
        &root,
        None,
        &[
            "--offline",
            "--json",
            "init",
            "--recipe",
            "kernels/b.cu",
            "--recipe",
            "src/c.cu",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let written: Vec<&str> = v["written"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["path"].as_str().unwrap())
        .collect();
    assert_eq!(written, ["recipes/b.toml", "recipes/c.toml"], "{v}");
    assert_eq!(v["kept"], serde_json::json!(["repro.toml"]), "{v}");
    assert!(v["nvcc"].is_string() && v["nvrtc"].is_string(), "{v}");
    // c.cu includes cuBLAS, which the nvcc pinned by a plain `repro init` does not carry.
    let note = v["notes"][0].as_str().unwrap_or_default();
    assert!(note.contains("src/c.cu includes cublas headers"), "{v}");
    assert!(note.contains("--with cublas --force"), "{v}");
    unchanged();
    recipe_with_entries(&root, "b", &["b1"]);
    assert!(recipe_with_entries(&root, "c", &["scale"]).contains("kind = \"nvcc\""));

    // Refusals: each names what is wrong, exits 2 and writes nothing.
    let refused = |argv: &[&str], says: &[&str]| {
        let (code, out, err) = run(&cache, &root, None, argv);
        assert_eq!(code, 2, "{argv:?}: {out}{err}");
        for s in says {
            assert!(err.contains(s), "{argv:?}: wanted {s:?} in {err}");
        }
        assert!(err.contains("hint: "), "{err}");
        assert!(!root.join("recipes/k.toml").exists(), "{argv:?}");
        unchanged();
    };
    let a_before = std::fs::read(root.join("recipes/a.toml")).unwrap();
    refused(
        &["init", "--recipe", "x/k.cu", "--recipe", "kernels/a.cu"],
        &[
            "recipes/a.toml exists already",
            "pass --force to replace it",
        ],
    );
    refused(
        &[
            "init",
            "--recipe",
            "kernels/a.cu",
            "--recipe",
            "kernels/b.cu",
        ],
        &[
            "recipes/a.toml, ",
            "recipes/b.toml exist already",
            "replace them",
        ],
    );
    refused(
        &["init", "--recipe", "kernels/nope.cu"],
        &["kernels/nope.cu does not exist", "name a .cu file"],
    );
    refused(
        &["init", "--recipe", "x/k.cu", "--recipe", "y/k.cu"],
        &["x/k.cu and y/k.cu would both be written as recipes/k.toml"],
    );
    refused(
        &["init", "--recipe", "x/k.cu", "--nvcc", "13.0"],
        &["repro.toml exists already, and --nvcc, --nvrtc and --with change its pins"],
    );
    assert_eq!(
        std::fs::read(root.join("recipes/a.toml")).unwrap(),
        a_before
    );

    // --force replaces the existing recipe, and still not repro.toml.
    let (code, out, err) = run(
        &cache,
        &root,
        None,
        &[
            "init",
            "--recipe",
            "kernels/a.cu",
            "--recipe",
            "x/k.cu",
            "--force",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("replaced recipes/a.toml"), "{out}");
    assert!(out.contains("wrote recipes/k.toml"), "{out}");
    unchanged();

    // A broken repro.toml is named with its line and key, and nothing is written.
    let broken = "schema = 1\n\n[toolchain]\nnvcc-defualt = \"13.0\"\n";
    std::fs::write(root.join("repro.toml"), broken).unwrap();
    let (code, _, err) = run(&cache, &root, None, &["init", "--recipe", "y/k.cu"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("repro.toml:4:1"), "{err}");
    assert!(err.contains("nvcc-defualt"), "{err}");
    assert!(err.contains("hint: "), "{err}");
    assert_eq!(
        std::fs::read_to_string(root.join("repro.toml")).unwrap(),
        broken
    );
    let recipes: Vec<_> = std::fs::read_dir(root.join("recipes")).unwrap().collect();
    assert_eq!(recipes.len(), 4, "a, b, c and k only");
}

/// The guide's "Recipes for a repository that has `repro.toml`", command for command.
#[test]
fn the_guides_init_then_recipes_sequence_runs() {
    let commands = documented(
        "docs/src/guide/start.md",
        "## Recipes for a repository that has",
    );
    let reduce = "extern \"C\" __global__ void reduce(float* a) { a[0] += 1.0f; }\n";
    let (tmp, root) = repo_with(&[("kernels/k.cu", KERNEL), ("kernels/reduce.cu", reduce)]);
    let cache = tmp.path().join("cache");
    let [init, recipes] = &commands[..] else {
        panic!("two commands: {commands:?}");
    };
    let (code, _, err) = run(&cache, &root, None, &args(init));
    assert_eq!(code, 0, "{err}");
    let before = std::fs::read(root.join("repro.toml")).unwrap();
    let (code, out, err) = run(&cache, &root, None, &args(recipes));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kept repro.toml"), "{out}");
    assert!(
        out.contains("note: kernels/k.cu includes cublas headers"),
        "{out}"
    );
    recipe_with_entries(&root, "k", &["scale"]);
    recipe_with_entries(&root, "reduce", &["reduce"]);
    assert_eq!(std::fs::read(root.join("repro.toml")).unwrap(), before);
}
