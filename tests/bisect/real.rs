//! `repro bisect` on histories that never used repro: hundreds of commits in a tree of
//! thousands of files, the kernel in a subdirectory and renamed halfway, the recipe only an
//! uncommitted file, partial clones over `file://`, blobs deleted from the object store,
//! and nvcc kernels with runtime headers and C++ templates.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{git, nvrtc_available, repro};
use serde_json::Value;

/// A kernel of some length, so that a one-line edit keeps a rename recognisable.
fn kernel_text(i: usize, ok: bool) -> String {
    let mut s =
        String::from("// attention kernel, from a research repository\n#include \"common.cuh\"\n");
    for j in 0..20 {
        s.push_str(&format!(
            "// note {j}: tiling, online softmax, fp32 accumulation\n"
        ));
    }
    s.push_str(&format!(
        "extern \"C\" __global__ void attn(float* o, int n) {{\n  int t = threadIdx.x;\n  if (t < n) o[t] = scale({i}.0f){}\n}}\n",
        if ok { ";" } else { "" }
    ));
    s
}

const COMMON: &str = "#pragma once\n__device__ inline float scale(float x) { return x * 0.5f; }\n";

/// Writes a history with `git fast-import`: `files` unrelated files in a first commit, then
/// `n` commits each touching one unrelated file and the kernel. `ok(i)` says whether commit
/// i's kernel builds; `path(i)` where the kernel lives at commit i (a rename when it changes).
fn history(
    dir: &Path,
    files: usize,
    n: usize,
    ok: &dyn Fn(usize) -> bool,
    path: &dyn Fn(usize) -> String,
) -> PathBuf {
    let root = dir.join("src");
    std::fs::create_dir_all(&root).unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    let mut stream = Vec::new();
    let data = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(format!("data {}\n", bytes.len()).as_bytes());
        out.extend_from_slice(bytes);
        out.push(b'\n');
    };
    for i in 0..=n {
        let msg = if i == 0 {
            "import the project".to_string()
        } else {
            format!("commit {i}")
        };
        stream.extend_from_slice(
            format!(
                "commit refs/heads/main\nmark :{}\ncommitter T <t@example.com> {} +0000\n",
                i + 1,
                1_700_000_000 + i * 60
            )
            .as_bytes(),
        );
        data(&mut stream, msg.as_bytes());
        if i > 0 {
            stream.extend_from_slice(format!("from :{i}\n").as_bytes());
        }
        if i == 0 {
            for f in 0..files {
                stream.extend_from_slice(
                    format!("M 100644 inline data/d{:02}/f{f:05}.txt\n", f % 50).as_bytes(),
                );
                data(&mut stream, format!("unrelated file {f}\n").as_bytes());
            }
            stream.extend_from_slice(b"M 100644 inline include/common.cuh\n");
            data(&mut stream, COMMON.as_bytes());
        } else {
            stream.extend_from_slice(
                format!(
                    "M 100644 inline data/d{:02}/f{:05}.txt\n",
                    i % 50,
                    (i * 7919) % files.max(1)
                )
                .as_bytes(),
            );
            data(&mut stream, format!("edited in commit {i}\n").as_bytes());
        }
        if i > 0 && path(i) != path(i - 1) {
            stream.extend_from_slice(format!("D {}\n", path(i - 1)).as_bytes());
        }
        stream.extend_from_slice(format!("M 100644 inline {}\n", path(i)).as_bytes());
        data(&mut stream, kernel_text(i, ok(i)).as_bytes());
        // The kernel includes common.cuh from a sibling include/ directory.
    }
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(&root)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(child.wait().unwrap().success());
    git(&root, &["checkout", "-q", "main"]);
    root
}

/// The recipe, uncommitted, for the kernel at `source`.
fn recipe(source: &str) -> String {
    format!(
        "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"{source}\"\nentries = [\"attn\"]\ntarget = \"sm_90\"\noutputs = [\"ptx\"]\ninclude-dirs = [\"include\"]\n"
    )
}

fn bisect(cache: &Path, dir: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = repro(cache)
        .arg("-C")
        .arg(dir)
        .args(["bisect", "--json"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn culprit(v: &Value) -> String {
    v["culprit"]["subject"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// ⌈log2 n⌉ + 2: the evaluations a bisection of n commits may need, ends included.
fn bound(n: usize) -> usize {
    (usize::BITS - (n - 1).leading_zeros()) as usize + 2
}

/// A deterministic spread of positions in 2..n-1 (so each run tries the same places).
fn positions(n: usize, seed: u64) -> usize {
    let x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    2 + (x >> 33) as usize % (n - 3)
}

#[test]
fn an_uncommitted_recipe_finds_the_break_and_the_fix_in_a_large_history() {
    if !nvrtc_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let n = 300;
    let broke = positions(n, 7);
    let fixed = broke + 1 + positions(n - broke + 3, 11).min(n - broke - 2);
    let kpath = "cuda/kernels/attn.cu";
    let root = history(tmp.path(), 5000, n, &|i| i < broke || i >= fixed, &|_| {
        kpath.to_string()
    });
    std::fs::create_dir_all(root.join("recipes")).unwrap();
    std::fs::write(root.join("recipes/attn.toml"), recipe(kpath)).unwrap();
    let status_before = git(&root, &["status", "--porcelain"]);
    let commits = n + 1;

    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good",
            "HEAD~300",
            "--bad",
            &format!("HEAD~{}", n - broke),
            "--recipe",
            "attn",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), format!("commit {broke}"), "{v}");
    let range = broke + 1;
    assert!(
        v["evaluated"].as_u64().unwrap() as usize <= bound(range),
        "{} builds for {range} commits",
        v["evaluated"]
    );
    // Each step line names the commit, its subject, the outcome and the reason.
    assert!(
        err.contains("commit ") && err.contains(" bad ") || err.contains("bad  commit"),
        "{err}"
    );
    for s in v["steps"].as_array().unwrap() {
        assert!(
            s["subject"]
                .as_str()
                .is_some_and(|x| x.starts_with("commit") || x.starts_with("import"))
        );
        if s["verdict"] == "bad" {
            assert!(
                s["detail"].as_str().unwrap().contains("build failed"),
                "{s}"
            );
        }
    }

    // The fix, later in the history.
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good",
            "HEAD",
            "--bad",
            &format!("HEAD~{}", n - broke),
            "--recipe",
            "attn",
            "--find",
            "fixed",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), format!("commit {fixed}"), "{v}");
    assert!(v["evaluated"].as_u64().unwrap() as usize <= bound(commits - broke));
    // Nothing of the user's changed: the recipe is still only an uncommitted file.
    assert_eq!(git(&root, &["status", "--porcelain"]), status_before);
}

#[test]
fn a_kernel_renamed_halfway_is_followed() {
    if !nvrtc_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let n = 300;
    let (broke, moved) = (80, 150);
    let path = |i: usize| {
        if i < moved {
            "old/attention_kernel.cu".to_string()
        } else {
            "cuda/kernels/attn.cu".to_string()
        }
    };
    let root = history(tmp.path(), 5000, n, &|i| i < broke, &path);
    // The recipe names today's path; the break happened before the rename.
    let recipe_file = tmp.path().join("attn.toml");
    std::fs::write(&recipe_file, recipe("cuda/kernels/attn.cu")).unwrap();
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good",
            "HEAD~300",
            "--bad",
            "HEAD",
            "--recipe",
            recipe_file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), format!("commit {broke}"), "{v}");
    assert!(v["evaluated"].as_u64().unwrap() as usize <= bound(n + 1));
    let notes: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["note"].as_str())
        .collect();
    assert!(
        notes.contains(&"source here: old/attention_kernel.cu"),
        "{v}"
    );
    assert!(
        err.contains("source here: old/attention_kernel.cu"),
        "{err}"
    );
}

/// The number of objects `git rev-list --missing=print` reports missing.
fn missing(dir: &Path) -> usize {
    git(dir, &["rev-list", "--objects", "--all", "--missing=print"])
        .lines()
        .filter(|l| l.starts_with('?'))
        .count()
}

#[test]
fn a_partial_clone_fetches_only_what_steps_read() {
    if !nvrtc_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let n = 300;
    let broke = positions(n, 23);
    let kpath = "cuda/kernels/attn.cu";
    let src = history(tmp.path(), 5000, n, &|i| i < broke, &|_| kpath.to_string());
    git(&src, &["config", "uploadpack.allowFilter", "true"]);
    let blobs = git(&src, &["rev-list", "--objects", "--all"])
        .lines()
        .count()
        - git(&src, &["rev-list", "--all"]).lines().count();
    let url = format!("file://{}", src.display());
    let clone = |name: &str| {
        let dest = tmp.path().join(name);
        git(
            tmp.path(),
            &[
                "clone",
                "-q",
                "--no-checkout",
                "--filter=blob:none",
                &url,
                dest.to_str().unwrap(),
            ],
        );
        dest
    };
    let pc = clone("pc");
    let recipe_file = tmp.path().join("attn.toml");
    std::fs::write(&recipe_file, recipe(kpath)).unwrap();
    let config_before = std::fs::read(pc.join(".git/config")).unwrap();
    let refs_before = git(&pc, &["show-ref"]);
    let before = missing(&pc);
    let args = [
        "--good",
        "HEAD~300",
        "--bad",
        "HEAD",
        "--recipe",
        recipe_file.to_str().unwrap(),
    ];
    let (code, v, err) = bisect(tmp.path(), &pc, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), format!("commit {broke}"), "{v}");
    let fetched = before - missing(&pc);
    assert!(fetched > 0, "nothing was fetched");
    assert!(
        fetched * 100 < blobs * 5,
        "fetched {fetched} of {blobs} blobs: more than 5%"
    );
    assert!(
        v["steps"].as_array().unwrap().iter().any(|s| s["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("fetched "))),
        "{v}"
    );
    assert!(err.contains("[fetched "), "{err}");
    // A lazy fetch only adds objects: refs and config are as they were.
    assert_eq!(git(&pc, &["show-ref"]), refs_before);
    assert_eq!(
        std::fs::read(pc.join(".git/config")).unwrap(),
        config_before
    );

    // Offline, the blob is named instead.
    let off = clone("offline");
    let mut args = args.to_vec();
    args.push("--offline");
    let (code, _, err) = bisect(tmp.path(), &off, &args);
    assert_ne!(code, 0);
    assert!(err.contains("--offline: not fetched"), "{err}");
    assert!(
        regex_lite::Regex::new(r"blob [0-9a-f]{40}")
            .unwrap()
            .is_match(&err),
        "{err}"
    );
}

#[test]
fn paths_make_a_script_bisection_immune_to_a_missing_blob() {
    let tmp = tempfile::tempdir().unwrap();
    let (_keep, root) = common::repo_with(&[("kernels/k.txt", "fine 0\n"), ("README", "r\n")]);
    // A large data file, then its blob deleted from the object store (loose objects).
    let big: String = "x".repeat(1 << 20);
    std::fs::create_dir_all(root.join("data")).unwrap();
    std::fs::write(root.join("data/big.bin"), &big).unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "add data"]);
    let blob = git(&root, &["rev-parse", "HEAD:data/big.bin"]);
    for i in 1..=20 {
        let state = if i >= 13 { "failing" } else { "fine" };
        std::fs::write(root.join("kernels/k.txt"), format!("{state} {i}\n")).unwrap();
        git(&root, &["commit", "-q", "-am", &format!("commit {i}")]);
    }
    std::fs::remove_file(root.join(format!(".git/objects/{}/{}", &blob[..2], &blob[2..]))).unwrap();
    let script = "grep -q fine kernels/k.txt";
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good", "HEAD~20", "--bad", "HEAD", "--script", script, "--paths", "kernels/",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), "commit 13");
    // Without --paths, every step needs the missing blob, and says which.
    let (code, _, err) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~20", "--bad", "HEAD", "--script", script],
    );
    assert_ne!(code, 0);
    assert!(err.contains(&blob), "{err}");
    assert!(err.contains("data/big.bin"), "{err}");
    // A pathspec that matches nothing is an error before any step runs.
    let (code, _, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good", "HEAD~20", "--bad", "HEAD", "--script", script, "--paths", "kernel/",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--paths kernel/ matches no file"), "{err}");
}

#[test]
fn whole_tree_steps_do_not_see_what_the_last_step_left() {
    let tmp = tempfile::tempdir().unwrap();
    let (_keep, root) = common::repo_with(&[("k.txt", "fine 0\n")]);
    for i in 1..=16 {
        let state = if i >= 9 { "failing" } else { "fine" };
        std::fs::write(root.join("k.txt"), format!("{state} {i}\n")).unwrap();
        git(&root, &["commit", "-q", "-am", &format!("commit {i}")]);
    }
    // The script fails if an earlier step's output is still there, and leaves one behind;
    // it also edits a tracked file, which the next step must see restored.
    let script =
        "test ! -e out.o && touch out.o && grep -q fine k.txt; r=$?; echo junk > k.txt; exit $r";
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~16", "--bad", "HEAD", "--script", script],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), "commit 9", "{v}");
}

#[test]
fn bad_input_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (_keep, root) = common::repo_with(&[("k.txt", "ok\n")]);
    git(&root, &["commit", "-q", "--allow-empty", "-m", "two"]);
    let (code, _, err) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~1", "--bad", "HEAD", "--recipe", "nope"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no recipe `nope`") && err.contains("recipes/nope.toml"),
        "{err}"
    );
    let (code, _, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good",
            "HEAD~1",
            "--bad",
            "HEAD",
            "--recipe",
            "elsewhere/x.toml",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("elsewhere/x.toml"), "{err}");
    // A promisor remote that cannot be reached.
    let src = root.clone();
    std::fs::write(src.join("k.txt"), "changed\n").unwrap();
    git(&src, &["commit", "-q", "-am", "three"]);
    git(&src, &["config", "uploadpack.allowFilter", "true"]);
    let pc = tmp.path().join("pc");
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "--no-checkout",
            "--filter=blob:none",
            &format!("file://{}", src.display()),
            pc.to_str().unwrap(),
        ],
    );
    git(
        &pc,
        &["remote", "set-url", "origin", "file:///nonexistent/repo"],
    );
    let (code, _, err) = bisect(
        tmp.path(),
        &pc,
        &[
            "--good",
            "HEAD~2",
            "--bad",
            "HEAD",
            "--script",
            "grep -q ok k.txt",
        ],
    );
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("cannot fetch") && err.contains("origin") && err.contains("/nonexistent/repo"),
        "{err}"
    );
}

/// nvcc for the tests: `REPRO_TEST_NVCC` names an nvcc binary (CI unpacks NVIDIA's wheels).
/// On CI (`REPRO_TEST_REQUIRE_NVCC`) its absence is a failure, elsewhere the test skips.
fn test_nvcc() -> Option<PathBuf> {
    let nvcc = std::env::var_os("REPRO_TEST_NVCC")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if nvcc.is_none() {
        assert!(
            std::env::var_os("REPRO_TEST_REQUIRE_NVCC").is_none(),
            "nvcc is required here but REPRO_TEST_NVCC names none"
        );
        common::skip(
            "needs nvcc: set REPRO_TEST_NVCC to an nvcc (e.g. unpacked from NVIDIA's wheels)",
        );
    }
    nvcc
}

const TILE: &str =
    "#pragma once\n#include <cuda_fp16.h>\ntemplate <int N> struct Tile { __half v[N]; };\n";

/// A kernel as people write them: runtime headers, WMMA, cooperative groups, a relative
/// include, a template whose mangled name changes with its arguments and parameters.
fn nvcc_kernel(i: usize, ok: bool) -> String {
    // From commit 3 on the kernel takes one more parameter and other template arguments:
    // its mangled symbol changes, its name does not.
    let (s, extra_param, extra_arg) = if i >= 3 {
        (1024, ", int m", ", int")
    } else {
        (512, "", "")
    };
    format!(
        "#include <cuda_runtime.h>\n#include <cuda.h>\n#include <mma.h>\n#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n#include \"detail/tile.cuh\"\nnamespace cg = cooperative_groups;\nusing namespace nvcuda;\n// version {i}\ntemplate <int S, int D>\n__global__ void fa_s512_kernel(const __half* q, float* out, int n{extra_param}) {{\n  cg::thread_block block = cg::this_thread_block();\n  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;\n  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;\n  wmma::fill_fragment(c, 0.0f);\n  wmma::load_matrix_sync(a, q, 16);\n  block.sync();\n  Tile<D> t;\n  if (threadIdx.x < n) out[threadIdx.x] = __half2float(q[threadIdx.x]) * S + sizeof(t){}\n}}\ntemplate __global__ void fa_s512_kernel<{s}, 64>(const __half*, float*, int{extra_arg});\n",
        if ok { ";" } else { "" }
    )
}

#[test]
fn an_nvcc_kernel_with_runtime_headers_and_templates_bisects() {
    let Some(nvcc) = test_nvcc() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (_keep, root) = common::repo_with(&[
        ("csrc/kernels/detail/tile.cuh", TILE),
        ("csrc/kernels/attn.cu", &nvcc_kernel(0, true)),
    ]);
    for i in 1..=8 {
        std::fs::write(root.join("csrc/kernels/attn.cu"), nvcc_kernel(i, i < 6)).unwrap();
        git(&root, &["commit", "-q", "-am", &format!("commit {i}")]);
    }
    std::fs::create_dir_all(root.join("recipes")).unwrap();
    std::fs::write(
        root.join("recipes/fa.toml"),
        "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"csrc/kernels/attn.cu\"\nentries = [\"fa_s512_kernel\"]\ntarget = \"sm_90\"\noutputs = [\"cubin\"]\n",
    )
    .unwrap();
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("REPRO_NVCC", &nvcc)
        .args([
            "bisect", "--json", "--good", "HEAD~8", "--bad", "HEAD", "--recipe", "fa",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Commit 3 changed the kernel's signature (its mangled name) and is not blamed.
    assert_eq!(culprit(&v), "commit 6", "{v}");
    // The build of a good commit contains the mangled symbol and the recipe's own text.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .env("REPRO_NVCC", &nvcc)
        .args(["build", "--json", "fa"])
        .output()
        .unwrap();
    // HEAD is broken: the build fails and names the compiler's error.
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn builds_made_by_a_bisection_replay_with_the_recipe_they_were_made_with() {
    if !nvrtc_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let n = 12;
    let path = |i: usize| {
        if i < 6 {
            "old/k.cu".to_string()
        } else {
            "cuda/kernels/attn.cu".to_string()
        }
    };
    let root = history(tmp.path(), 20, n, &|i| i < 9, &path);
    std::fs::create_dir_all(root.join("recipes")).unwrap();
    std::fs::write(
        root.join("recipes/attn.toml"),
        recipe("cuda/kernels/attn.cu"),
    )
    .unwrap();
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~12", "--bad", "HEAD", "--recipe", "attn"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), "commit 9");
    // The recipe is gone from the working tree; the records still say what was built.
    std::fs::remove_file(root.join("recipes/attn.toml")).unwrap();
    let (mut replayed, mut renamed) = (0, 0);
    let mut seen: Vec<String> = Vec::new();
    for e in std::fs::read_dir(root.join(".repro/builds"))
        .unwrap()
        .flatten()
    {
        let rec: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        seen.push(format!(
            "{} {}",
            rec["status"], rec["inputs"]["build"]["source"]
        ));
        if rec["status"] != "ok" {
            continue;
        }
        let text = rec["recipe-text"].as_str().unwrap();
        assert!(text.contains("kind = \"nvrtc\""), "{text}");
        renamed += usize::from(text.contains("\"old/k.cu\""));
        let key = rec["key"].as_str().unwrap();
        let out = repro(tmp.path())
            .arg("-C")
            .arg(&root)
            .args(["replay", &key[..16]])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("reproduced"), "{text}");
        replayed += 1;
    }
    // Builds from before the rename (old/k.cu) are among them.
    assert!(replayed >= 2, "{replayed} builds replayed");
    assert!(
        renamed >= 1,
        "no build from before the rename was replayed: {seen:?} {v}"
    );
}

#[test]
fn a_recipes_bisect_paths_are_written_into_each_step() {
    let tmp = tempfile::tempdir().unwrap();
    // A command build whose script lives outside its declared inputs: the recipe's
    // `[bisect] paths` brings it into each sparse step.
    let (_keep, root) = common::repo_with(&[
        (
            "scripts/build.sh",
            "grep -q fine src/k.txt && cp src/k.txt out.bin\n",
        ),
        ("src/k.txt", "fine 0\n"),
        ("data/big.txt", "unrelated\n"),
    ]);
    for i in 1..=12 {
        let state = if i >= 7 { "failing" } else { "fine" };
        std::fs::write(root.join("src/k.txt"), format!("{state} {i}\n")).unwrap();
        git(&root, &["commit", "-q", "-am", &format!("commit {i}")]);
    }
    let recipe = |extra: &str| {
        format!(
            "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"scripts/build.sh\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n{extra}"
        )
    };
    let with = tmp.path().join("with.toml");
    std::fs::write(&with, recipe("[bisect]\npaths = [\"scripts/\"]\n")).unwrap();
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--good",
            "HEAD~12",
            "--bad",
            "HEAD",
            "--recipe",
            with.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), "commit 7", "{v}");
    // Without them the script is not in the step's tree, so the good end cannot build (a
    // fresh store: the builds above would answer from the store, their keys being equal).
    let without = tmp.path().join("without.toml");
    std::fs::write(&without, recipe("")).unwrap();
    let fresh = tmp.path().join("fresh-store");
    let (code, _, err) = bisect(
        tmp.path(),
        &root,
        &[
            "--store",
            fresh.to_str().unwrap(),
            "--good",
            "HEAD~12",
            "--bad",
            "HEAD",
            "--recipe",
            without.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("the good end"), "{err}");
}

/// The kept worktree a second bisection starts from (`.repro/tmp/kept/0/tree`).
fn kept_tree(root: &Path) -> PathBuf {
    root.join(".repro/tmp/kept/0/tree")
}

#[test]
fn a_second_bisection_starts_from_the_kept_worktree_and_trusts_none_of_it() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let (_keep, root) = common::repo_with(&[
        ("k.txt", "fine 0\n"),
        ("run.sh", "#!/bin/sh\nexit 0\n"),
        ("sub/data.txt", "data\n"),
    ]);
    std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("k.txt", root.join("link")).unwrap();
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "exec bit and link"]);
    for i in 1..=16 {
        let state = if i >= 9 { "failing" } else { "fine" };
        std::fs::write(root.join("k.txt"), format!("{state} {i}\n")).unwrap();
        git(&root, &["commit", "-q", "-am", &format!("commit {i}")]);
    }
    // Each step checks the executable bit, the link, an untouched file and the absence of
    // anything a step or a person left; it then leaves junk behind.
    let checks = "test -x run.sh && test -L link && test \"$(readlink link)\" = k.txt \
        && test \"$(cat sub/data.txt)\" = data && test ! -e out.o && test ! -e evil.txt";
    let leave = "echo junk > sub/data.txt; touch out.o; chmod -x run.sh";
    let script = |n: usize| {
        format!("{checks} || exit 128; grep -q fine k.txt; r=$?; {leave}; test {n} -ge 0; exit $r")
    };
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~16", "--bad", "HEAD", "--script", &script(1)],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), "commit 9", "{v}");
    let kept = kept_tree(&root);
    assert!(kept.join("k.txt").is_file(), "no kept worktree: {err}");
    assert!(root.join(".repro/tmp/kept/0/manifest.json").is_file());

    // Someone edits the kept tree between bisections, and the user's working tree is dirty:
    // neither may leak into a step.
    std::fs::write(kept.join("sub/data.txt"), "tampered\n").unwrap();
    std::fs::write(kept.join("evil.txt"), "x").unwrap();
    std::fs::remove_file(kept.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", kept.join("link")).unwrap();
    std::fs::write(root.join("k.txt"), "fine, uncommitted\n").unwrap();
    std::fs::write(root.join("sub/data.txt"), "uncommitted\n").unwrap();

    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~16", "--bad", "HEAD", "--script", &script(2)],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), "commit 9", "{v}");
    // Every step ran its script (nothing reused from the first bisection's answers).
    assert!(
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["cached"] != true),
        "{v}"
    );
    // The user's files are untouched.
    assert_eq!(
        std::fs::read_to_string(root.join("k.txt")).unwrap(),
        "fine, uncommitted\n"
    );

    // A manifest that names a path outside the tree is not believed: the tree is emptied
    // and written afresh, and nothing outside it is touched.
    let outside = tmp.path().join("outside.txt");
    std::fs::write(&outside, "keep me\n").unwrap();
    let manifest = root.join(".repro/tmp/kept/0/manifest.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    let rel = pathdiff(&outside, &kept);
    m["files"][0][0] = Value::from(rel);
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    let (code, v, err) = bisect(
        tmp.path(),
        &root,
        &["--good", "HEAD~16", "--bad", "HEAD", "--script", &script(3)],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(culprit(&v), "commit 9", "{v}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");

    // gc removes a kept worktree no bisection holds.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["store", "gc"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!kept.exists());
}

/// `to` relative to `from` (both absolute), with `..` as needed.
fn pathdiff(to: &Path, from: &Path) -> String {
    let up = from.components().count();
    let mut s = "../".repeat(up);
    s.push_str(to.to_str().unwrap().trim_start_matches('/'));
    s
}
