//! Build cache hits answered from their stamp (`src/app/hit.rs`): the same answer as the
//! whole path, and never once anything the hit read has changed.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{git, nvrtc_available, repo_with, repro};

const RECIPE: &str = r#"schema = 1
[build]
kind = "nvrtc"
source = "kernels/k.cu"
entries = ["scale"]
target = "sm_90"
outputs = ["cubin"]
include-dirs = ["include", "vendor"]
"#;

const KERNEL: &str =
    "#include \"util.h\"\n__global__ void scale(float* x) { x[threadIdx.x] *= FACTOR; }\n";

/// A repository with one NVRTC recipe whose kernel includes a header from `include/`, and
/// the cache directory of its tests.
fn project() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (tmp, root) = repo_with(&[
        ("recipes/k.toml", RECIPE),
        ("kernels/k.cu", KERNEL),
        ("include/util.h", "#define FACTOR 2.0f\n"),
        (
            "vendor/notes.txt",
            "an include directory no header comes from\n",
        ),
    ]);
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    (tmp, root, cache)
}

/// `repro -vv build k` run from `dir`, with the store in `cache/store` (the whole path says
/// on stderr whether it wrote a stamp; an answer from the stamp says nothing there): exit
/// code, stdout without the durations, stderr.
fn build_in(cache: &Path, dir: &Path, extra: Option<(&str, &str)>) -> (i32, String, String) {
    let mut cmd = repro(cache);
    cmd.current_dir(dir)
        .env("REPRO_STORE", cache.join("store"))
        .args(["-vv", "build", "k"]);
    if let Some((k, v)) = extra {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    // "...  3.2 ms" ends an outcome's line.
    let stdout = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| match l.rfind("  ") {
            Some(at) if l.ends_with(" ms") => l[..at].to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    (
        out.status.code().unwrap(),
        stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn from_stamp(r: &(i32, String, String)) -> bool {
    r.0 == 0 && !r.2.contains("stamp:")
}

/// How long a test waits for the files it wrote to be trusted by their stat data
/// (`foundation::stamp::SETTLE`, and a margin).
const SETTLE: Duration = Duration::from_millis(2300);

type Change = fn(&Path, &Path);

#[test]
fn a_hit_answered_from_its_stamp_is_the_whole_paths_answer_until_anything_it_read_changes() {
    if !nvrtc_available() {
        return;
    }
    // Each change on a project of its own, all stamped after one wait. The last column is
    // what the command after the change must show.
    let changes: Vec<(&str, Change, &str)> = vec![
        (
            "a header rewritten, same size",
            |root, _| std::fs::write(root.join("include/util.h"), "#define FACTOR 3.0f\n").unwrap(),
            "built",
        ),
        (
            "a header made nearer the kernel, shadowing the one used",
            |root, _| std::fs::write(root.join("kernels/util.h"), "#define FACTOR 4.0f\n").unwrap(),
            "built",
        ),
        (
            "the recipe edited",
            |root, _| {
                let r = RECIPE.replace("outputs = [\"cubin\"]", "outputs = [\"cubin\", \"ptx\"]");
                std::fs::write(root.join("recipes/k.toml"), r).unwrap()
            },
            "built",
        ),
        (
            "repro.toml written",
            |root, _| std::fs::write(root.join("repro.toml"), "# nothing pinned\n").unwrap(),
            "cached",
        ),
        (
            "an include directory the recipe names, that no header came from, removed",
            |root, _| std::fs::remove_dir_all(root.join("vendor")).unwrap(),
            "include-dirs",
        ),
        (
            "the artifact corrupted, same size",
            |_, cache| corrupt_one_object(cache),
            "repaired",
        ),
        (
            "the record removed",
            |_, cache| {
                for p in walk(&cache.join("store/builds")) {
                    std::fs::remove_file(p).unwrap();
                }
            },
            "built",
        ),
        (
            "a repository made around the working directory, inside the project",
            |root, _| {
                git(&root.join("kernels"), &["init", "-q"]);
            },
            "recipe",
        ),
    ];
    let projects: Vec<_> = changes.iter().map(|_| project()).collect();
    for (_, root, cache) in &projects {
        let first = build_in(cache, &root.join("kernels"), None);
        assert_eq!(first.0, 0, "{first:?}");
        assert!(first.1.contains("built"), "{first:?}");
    }
    std::thread::sleep(SETTLE);
    for ((what, change, then), (_, root, cache)) in changes.iter().zip(&projects) {
        let dir = root.join("kernels");
        // (Tried again after the files settle where another test of this run wrote in a
        // directory the hit notes.)
        let mut slow = build_in(cache, &dir, None);
        for _ in 0..2 {
            if slow.2.contains("stamp: written") {
                break;
            }
            std::thread::sleep(SETTLE);
            slow = build_in(cache, &dir, None);
        }
        assert!(slow.2.contains("stamp: written"), "{what}: {slow:?}");
        let fast = build_in(cache, &dir, None);
        assert!(from_stamp(&fast), "{what}: {fast:?}");
        assert_eq!(fast.1, slow.1, "{what}: the stamp's answer differs");
        // Another environment is another command: the whole path.
        let other = build_in(cache, &dir, Some(("REPRO_HIT_TEST", "1")));
        assert!(!from_stamp(&other), "{what}: {other:?}");
        change(root, cache);
        let after = build_in(cache, &dir, None);
        assert!(
            !from_stamp(&after),
            "{what}: answered from a stale stamp: {after:?}"
        );
        let shown = format!("{}\n{}", after.1, after.2);
        assert!(shown.contains(then), "{what}: expected `{then}`: {after:?}");
    }
}

/// Flips one byte of the largest object in the store, keeping its size.
fn corrupt_one_object(cache: &Path) {
    let mut files = walk(&cache.join("store/objects"));
    files.sort_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0));
    let p = files.last().expect("an object");
    let mut b = std::fs::read(p).unwrap();
    b[100] ^= 0xFF;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(p, b).unwrap();
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

#[test]
fn every_file_a_hit_looks_at_is_noted_in_its_stamp() {
    if !nvrtc_available() {
        return;
    }
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_err()
    {
        common::skip("strace is not installed");
        return;
    }
    let (tmp, root, cache) = project();
    let first = build_in(&cache, &root, None);
    assert_eq!(first.0, 0, "{first:?}");
    std::thread::sleep(SETTLE);
    // The hit that writes the stamp, under strace, with the environment `repro()` sets. A
    // directory it notes that other tests of this run write in (a shared NVRTC, a system
    // directory) may void one stamp: tried again after the files settle.
    let trace = tmp.path().join("trace");
    let bin = assert_cmd::cargo::cargo_bin("repro");
    let mut stderr = String::new();
    for _ in 0..3 {
        let mut cmd = std::process::Command::new("strace");
        cmd.args(["-f", "-qq", "-e", "trace=%file", "-o"])
            .arg(&trace)
            .arg(&bin)
            .args(["-vv", "build", "k"])
            .current_dir(&root)
            .env("XDG_CACHE_HOME", &cache)
            .env("NO_COLOR", "1")
            .env("REPRO_STORE", cache.join("store"));
        for var in [
            "CUDA_VISIBLE_DEVICES",
            "REPRO_PYTHON",
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
        ] {
            cmd.env_remove(var);
        }
        if let Some(p) = common::provisioned_nvrtc() {
            cmd.env("REPRO_NVRTC", p);
        }
        let traced = cmd.output().unwrap();
        stderr = String::from_utf8_lossy(&traced.stderr).into_owned();
        if stderr.contains("stamp: written") {
            break;
        }
        std::thread::sleep(SETTLE);
    }
    assert!(stderr.contains("stamp: written"), "{stderr}");
    let stamps = walk(&cache.join("repro/hits"));
    assert_eq!(stamps.len(), 1, "{stamps:?}");
    let stamp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&stamps[0]).unwrap()).unwrap();
    let noted: Vec<PathBuf> = stamp["noted"]["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| PathBuf::from(s["path"].as_str().unwrap()))
        .collect();
    let store = cache.join("store");
    let mut missed = Vec::new();
    for line in std::fs::read_to_string(&trace).unwrap().lines() {
        // `123 openat(AT_FDCWD, "/path", ...) = 3`: the first quoted string is the path.
        let Some(path) = line.split('"').nth(1).filter(|p| !p.is_empty()) else {
            continue;
        };
        let p = root.join(path);
        // A file opened must be noted itself (its content is read). Otherwise: a path
        // noted; one inside a directory noted (its entries' names and kinds change the
        // directory's times); a directory on the way to one noted (a noted path's stat
        // data are its target's, wherever the way leads); anything libgit2 reads inside a
        // noted `.git` to open the repository, whose answers (its working tree, its index)
        // are noted; and libgit2's look for a bare repository in a directory on the way up
        // (a bare one has no working tree, so it changes no answer).
        let bare_probe = ["HEAD", "commondir", "gitdir", "objects", "refs"]
            .iter()
            .any(|n| p.file_name().is_some_and(|f| f == *n))
            && p.parent()
                .is_some_and(|d| noted.iter().any(|n| n.starts_with(d)));
        let opened = line.contains("open") && !line.contains("O_DIRECTORY");
        let covered = if opened {
            noted.contains(&p)
                || p.ancestors()
                    .any(|a| a.ends_with(".git") && noted.iter().any(|n| n == a))
        } else {
            bare_probe
                || noted.iter().any(|n| {
                    *n == p
                        || p.parent() == Some(n.as_path())
                        || n.starts_with(&p)
                        || (n.ends_with(".git") && p.starts_with(n))
                })
        };
        if !covered && !allowed(&p, &bin, &cache, &store) {
            missed.push(line.to_string());
        }
    }
    assert!(
        missed.is_empty(),
        "looked at but not noted:\n{}",
        missed.join("\n")
    );
}

/// What a hit may look at without noting it: the loader's and the C library's files (and
/// the loader's search of `LD_LIBRARY_PATH`, which `cargo test` sets), the process's own,
/// the binary, the stamps' directory, the store's lock (a mechanism, not an input), and
/// repro's caches whose answers are keyed by files that are noted (the NVRTC library's stat
/// data, the git index's).
fn allowed(p: &Path, bin: &Path, cache: &Path, store: &Path) -> bool {
    let s = p.to_string_lossy();
    let loader_search = std::env::var_os("LD_LIBRARY_PATH").is_some_and(|v| {
        std::env::split_paths(&v).any(|d| !d.as_os_str().is_empty() && p.starts_with(d))
    });
    loader_search
        || p == bin
        || ["/etc/ld.so", "/lib", "/usr/lib", "/proc/", "/sys/", "/dev/"]
            .iter()
            .any(|pre| s.starts_with(pre))
        || p.starts_with(cache.join("repro/hits"))
        || p == store.join("lock")
        || p == cache.join("repro/nvrtc-identity.json")
        || p == cache.join("repro/untracked-stores.json")
}
