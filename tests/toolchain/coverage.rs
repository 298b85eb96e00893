//! `repro toolchain install`, `list` and `which` given damaged, partial or made-up wheels:
//! each refusal names the file or release with a hint and exits with the documented code, and no
//! tree, staging directory or stamp is left behind by a refused install.
//!
//! The nvcc "releases" here are made up: small wheels built by the test (a valid wheel's
//! metadata around an `nvidia/cu13/bin/nvcc` shell script), pinned by their sha256 in the
//! test's own repro.toml and fetched by pip from a local directory (`--no-index`), so the
//! whole install path runs without NVIDIA's packages. The NVRTC cases use the pinned
//! NVRTC wheel (tests/common `nvrtc_wheel`, fetched once through pip).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{outcome, repo_with, repro};
use serde_json::Value;

/// Writes a zip archive holding `files` (name, text) with Python's zipfile (the module
/// repro unpacks wheels with).
fn zip(path: &Path, files: &[(&str, &str)]) {
    let spec = serde_json::to_string(files).unwrap();
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, zipfile\n\
             with zipfile.ZipFile(sys.argv[1], 'w') as z:\n\
             \x20   for name, text in json.loads(sys.argv[2]):\n\
             \x20       z.writestr(name, text)\n",
        ])
        .arg(path)
        .arg(spec)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A wheel of package `fake-nvcc` at `version` that pip accepts, holding `files` besides
/// its metadata, written into `dir`; returns its path.
fn fake_wheel(dir: &Path, version: &str, files: &[(&str, &str)]) -> PathBuf {
    wheel_of(dir, "fake-nvcc", version, files)
}

/// A wheel of `package` at `version` that pip accepts, holding `files` besides its
/// metadata, written into `dir`; returns its path.
fn wheel_of(dir: &Path, package: &str, version: &str, files: &[(&str, &str)]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let under = package.replace('-', "_");
    let path = dir.join(format!(
        "{under}-{version}-py3-none-manylinux2014_{}.whl",
        std::env::consts::ARCH
    ));
    let info = format!("{under}-{version}.dist-info");
    let metadata = format!("Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n");
    let wheel = format!(
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-manylinux2014_{}\n",
        std::env::consts::ARCH
    );
    let mut all: Vec<(String, String)> = files
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    all.push((format!("{info}/METADATA"), metadata));
    all.push((format!("{info}/WHEEL"), wheel));
    all.push((format!("{info}/RECORD"), String::new()));
    let refs: Vec<(&str, &str)> = all.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    zip(&path, &refs);
    path
}

/// The files of a zip archive: (name, text).
type Files<'a> = &'a [(&'a str, &'a str)];

fn sha256(path: &Path) -> String {
    repro::toolchain::install::sha256_file(path).unwrap()
}

/// A repro.toml pinning nvcc "99.0" as the one wheel `fake-nvcc==VERSION` with `sha`, the
/// project's default nvcc.
fn nvcc_pin(version: &str, sha: &str) -> String {
    format!(
        "schema = 1\n[toolchain]\nnvcc-default = \"99.0\"\n[toolchain.nvcc.\"99.0\"]\nwheels = [{{ package = \"fake-nvcc\", version = \"{version}\", sha256 = {{ {} = \"{sha}\" }} }}]\n",
        std::env::consts::ARCH
    )
}

/// A nvcc that reports release 99.0.
const NVCC_OK: &str = "#!/bin/sh\necho 'Cuda compilation tools, release 99.0, V99.0.7'\n";

/// `repro -C ROOT ARGS` with the cache in `cache` and no NVRTC from the environment:
/// (exit code, stdout, stderr).
fn run(cache: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    outcome(
        repro(cache)
            .env_remove("REPRO_NVRTC")
            .env_remove("REPRO_WHEELHOUSE")
            .env_remove("REPRO_NVCC")
            .arg("-C")
            .arg(root)
            .args(args),
    )
}

/// Every name in the toolchains directory but the lock directory (staging directories
/// included).
fn leftovers(cache: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(cache.join("repro/toolchains"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".locks" && n != ".projects")
        // Trees are named by release and the digest of their wheels: keep the release.
        .map(|n| match n.rsplit_once('-') {
            Some((name, digest)) if digest.len() == 16 => name.to_string(),
            _ => n,
        })
        .collect();
    v.sort();
    v
}

/// The one installed tree whose name starts with `prefix-` (`nvcc-99.0`).
fn tree(cache: &Path, prefix: &str) -> std::path::PathBuf {
    let found: Vec<_> = std::fs::read_dir(cache.join("repro/toolchains"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{prefix}-"))
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

#[test]
fn made_up_nvcc_wheels_that_lack_or_break_the_compiler_are_refused_and_leave_nothing() {
    let (tmp, root) = repo_with(&[]);
    let cache = tmp.path().join("cache");
    let house = tmp.path().join("house");
    let install = ["toolchain", "install", "nvcc@99.0", "--wheels", "../house"];

    // A wheel with no compiler in it.
    let w = fake_wheel(&house, "1.0", &[("nvidia/cu13/include/x.h", "")]);
    std::fs::write(root.join("repro.toml"), nvcc_pin("1.0", &sha256(&w))).unwrap();
    let (code, _, err) = run(&cache, &root, &install);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error: nvcc@99.0 does not look like a nvcc wheel: no nvidia/cu13/bin/nvcc"),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    assert_eq!(leftovers(&cache), Vec::<String>::new());

    // A compiler that does not start.
    std::fs::remove_file(&w).unwrap();
    let w = fake_wheel(
        &house,
        "1.0",
        &[(
            "nvidia/cu13/bin/nvcc",
            "#!/bin/sh\necho broken >&2\nexit 9\n",
        )],
    );
    std::fs::write(root.join("repro.toml"), nvcc_pin("1.0", &sha256(&w))).unwrap();
    let (code, _, err) = run(&cache, &root, &install);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error: nvcc@99.0 does not look like a nvcc wheel: its nvcc does not run"),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    assert_eq!(leftovers(&cache), Vec::<String>::new());

    // The pinned version is not in the directory: pip's refusal, with the directory named.
    std::fs::write(root.join("repro.toml"), nvcc_pin("2.0", &"0".repeat(64))).unwrap();
    let (code, _, err) = run(&cache, &root, &install);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(&format!(
            "error: could not fetch the wheels of nvcc@99.0 (from the wheel directory {})",
            root.join("../house").display()
        )),
        "{err}"
    );
    assert!(
        err.contains("hint: put the pinned wheels in that directory"),
        "{err}"
    );
    assert_eq!(leftovers(&cache), Vec::<String>::new());

    // One wheel file is for NVRTC only.
    let (code, _, err) = run(
        &cache,
        &root,
        &["toolchain", "install", "nvcc@99.0", "--wheel", "x.whl"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error: --wheel installs one NVRTC wheel")
            && err.contains("hint: an nvcc release is several wheels: pass --wheels DIR"),
        "{err}"
    );

    // `which` shows the machine's nvcc and says that the pin is not installed, and how to
    // install it.
    let system = tmp.path().join("system-nvcc");
    std::fs::write(
        &system,
        "#!/bin/sh
echo 'Cuda compilation tools, release 98.0, V98.0.1'
",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&system, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = repro(&cache)
        .env_remove("REPRO_NVRTC")
        .env("REPRO_NVCC", &system)
        .arg("-C")
        .arg(&root)
        .args(["toolchain", "which"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains(&format!(
            "nvcc   98.0.1  {}  (nvcc@99.0 is pinned but not installed: nvcc builds fail until `repro toolchain install nvcc@99.0`)",
            system.display()
        )),
        "{out}"
    );
}

#[test]
fn a_made_up_nvcc_installs_is_listed_used_and_a_new_pin_gets_a_tree_of_its_own() {
    let (tmp, root) = repo_with(&[]);
    let cache = tmp.path().join("cache");
    let house = tmp.path().join("house");
    let w1 = fake_wheel(
        &house,
        "1.0",
        &[
            ("nvidia/cu13/bin/nvcc", NVCC_OK),
            ("nvidia/cu13/bin/ptxas", "#!/bin/sh\n"),
        ],
    );
    std::fs::write(root.join("repro.toml"), nvcc_pin("1.0", &sha256(&w1))).unwrap();
    let install = ["toolchain", "install", "nvcc@99.0", "--wheels", "../house"];
    let (code, out, err) = run(&cache, &root, &install);
    assert_eq!(code, 0, "{err}");
    let dir = tree(&cache, "nvcc-99.0");
    assert!(
        out.contains(&format!(
            "installed nvcc 99.0 (reports 99.0.7) at {}; 1 wheel verified by sha256",
            dir.display()
        )),
        "{out}"
    );
    assert_eq!(leftovers(&cache), ["nvcc-99.0"]);
    // Unpacked files under bin/ got their run bits back.
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(dir.join("nvidia/cu13/bin/ptxas"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "{mode:o}");

    // `which` names the pinned, installed nvcc; `list` shows the tree and its pinned wheel.
    let (_, out, _) = run(&cache, &root, &["toolchain", "which"]);
    assert!(
        out.contains(&format!(
            "nvcc   99.0.7  {}  (nvcc@99.0, pinned in repro.toml, installed by repro)",
            dir.join("nvidia/cu13/bin/nvcc").display()
        )),
        "{out}"
    );
    let (_, out, _) = run(&cache, &root, &["--json", "toolchain", "which"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nvcc"]["version"], "99.0.7", "{v}");
    let (code, out, _) = run(&cache, &root, &["toolchain", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!(
            "{}  99.0  0 MiB  from wheel directory",
            dir.file_name().unwrap().to_string_lossy()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("  serves: {}\n", root.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("sha256 {}", sha256(&w1))) && out.contains("pinned"),
        "{out}"
    );

    // Installing again finds it; --force replaces it and says so.
    let (code, out, _) = run(&cache, &root, &install);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!(
            "nvcc 99.0 is already installed at {}",
            dir.display()
        )),
        "{out}"
    );
    let mut forced = install.to_vec();
    forced.extend(["--force", "--json"]);
    let (code, out, err) = run(&cache, &root, &forced);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["installed"], true, "{v}");
    assert_eq!(v["replaced"], "reinstalling (--force)", "{v}");

    // A new pin (another wheel) under the same release name is another tree: the first
    // stays as it was (another project may pin it), and `gc` removes it once nobody does.
    let w2 = fake_wheel(
        &house,
        "1.1",
        &[(
            "nvidia/cu13/bin/nvcc",
            "#!/bin/sh\necho 'Cuda compilation tools, release 99.0, V99.0.8'\n",
        )],
    );
    std::fs::write(root.join("repro.toml"), nvcc_pin("1.1", &sha256(&w2))).unwrap();
    let (code, out, err) = run(&cache, &root, &install);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(reports 99.0.8)"), "{out}");
    assert_eq!(leftovers(&cache), ["nvcc-99.0", "nvcc-99.0"]);
    assert!(dir.join("nvidia/cu13/bin/ptxas").exists());
    let (_, out, _) = run(&cache, &root, &["toolchain", "which"]);
    assert!(out.contains("nvcc   99.0.8  "), "{out}");
    let (code, out, _) = run(&cache, &root, &["toolchain", "gc", "--dry-run"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!(
            "would remove {} (0 MiB): the projects that used it are gone or pin other wheels now",
            dir.display()
        )) && out.contains("would remove 1 toolchain tree"),
        "{out}"
    );
    assert!(dir.exists());
    let (code, out, _) = run(&cache, &root, &["--json", "toolchain", "gc"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["removed"].as_array().unwrap().len(), 1, "{v}");
    assert!(!dir.exists());
    assert_eq!(leftovers(&cache), ["nvcc-99.0"]);
    // The tree the project pins now is kept.
    let (_, out, _) = run(&cache, &root, &["toolchain", "gc"]);
    assert!(out.contains("removed 0 toolchain trees"), "{out}");
}

#[test]
fn install_without_a_spec_needs_an_nvrtc_pin() {
    let (tmp, root) = repo_with(&[("repro.toml", "schema = 1\n")]);
    let cache = tmp.path().join("cache");
    let (code, _, err) = run(&cache, &root, &["toolchain", "install"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error: no toolchain given and no NVRTC pinned")
            && err.contains("hint: name one (`repro toolchain install nvcc@13.0`)"),
        "{err}"
    );
    // `--nvrtc VERSION` names a release; one nobody pinned needs --sha256.
    let (code, _, err) = run(
        &cache,
        &root,
        &["toolchain", "install", "--nvrtc", "12.1.0"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error: nvrtc@12.1.0 is not a release this project pins")
            && err.contains("hint: pin it: `repro toolchain pin nvrtc@12.1.0` (or pass --sha256")
            && err.contains("pinned here: none"),
        "{err}"
    );
    // `list` with nothing installed says how to install.
    let (code, out, _) = run(&cache, &root, &["toolchain", "list"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "no toolchains installed by repro (`repro toolchain install nvcc@13.0` adds one)\n"
    );
    assert_eq!(leftovers(&cache), Vec::<String>::new());
}

#[test]
fn nvrtc_files_that_are_not_nvrtc_wheels_are_refused_and_leave_nothing() {
    let (tmp, root) = repo_with(&[("repro.toml", "schema = 1\n")]);
    let cache = tmp.path().join("cache");
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    let cases: [(&str, Option<Files>, &str); 4] = [
        (
            "text.whl",
            None,
            "text.whl does not look like a nvrtc wheel: it does not unpack",
        ),
        (
            "empty.whl",
            Some(&[("README", "nothing here")]),
            "no nvidia/cu13/lib or nvidia/cuda_nvrtc/lib",
        ),
        (
            "nolib.whl",
            Some(&[("nvidia/cu13/lib/README", "no library")]),
            "no libnvrtc.so in it",
        ),
        (
            "garbage.whl",
            Some(&[("nvidia/cu13/lib/libnvrtc.so.13", "not an ELF file")]),
            "nvrtc@12.1.0 does not look like a nvrtc wheel: ",
        ),
    ];
    for (name, content, says) in cases {
        let f = files.join(name);
        match content {
            Some(entries) => zip(&f, entries),
            None => std::fs::write(&f, "this is not a zip archive\n").unwrap(),
        }
        let (code, _, err) = run(
            &cache,
            &root,
            &[
                "toolchain",
                "install",
                "nvrtc@12.1.0",
                "--wheel",
                f.to_str().unwrap(),
                "--sha256",
                &sha256(&f).to_uppercase(),
            ],
        );
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(err.contains("hint: "), "{name}: {err}");
        assert_eq!(leftovers(&cache), Vec::<String>::new(), "{name}");
        // The file given is left as it was.
        assert!(f.is_file(), "{name}");
    }
    // A digest that is not the file's: refused before anything is unpacked.
    let f = files.join("empty.whl");
    let (code, _, err) = run(
        &cache,
        &root,
        &[
            "toolchain",
            "install",
            "nvrtc@12.1.0",
            "--wheel",
            f.to_str().unwrap(),
            "--sha256",
            &"ab".repeat(32),
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "error: empty.whl has sha256 {}, but the pin is {}; refusing to install it",
            sha256(&f),
            "ab".repeat(32)
        )),
        "{err}"
    );
    assert_eq!(leftovers(&cache), Vec::<String>::new());
}

/// A made-up nvcc of `release`: `--version` reports it; compiling writes an object naming
/// the kernel `k`, unless `how` says to refuse sm_70 (`drops-sm70`) or to hang (`hangs`).
fn fake_nvcc(release: &str, how: &str) -> String {
    format!(
        r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release {release}, V{release}.0"; exit 0; fi
out=""; arch=""; prev=""
for a in "$@"; do
  case "$a" in -arch=*) arch="${{a#-arch=}}";; esac
  if [ "$prev" = "-o" ]; then out="$a"; fi
  prev="$a"
done
how="{how}"
if [ "$how" = hangs ]; then exec sleep 60; fi
if [ "$how" = drops-sm70 ] && [ "$arch" = sm_70 ]; then
  echo "nvcc fatal   : Unsupported gpu architecture 'compute_70'" >&2; exit 1
fi
printf '\177ELF\000\000k\000' > "$out"
"#
    )
}

#[test]
fn an_nvcc_bisection_over_unpinned_releases_of_a_wheel_directory_names_the_release_that_dropped_a_target()
 {
    let (tmp, root) = repo_with(&[
        ("repro.toml", "schema = 1\n"),
        ("kernels/k.cu", "extern \"C\" __global__ void k() {}\n"),
        (
            "recipes/k.toml",
            "schema = 1\n[build]\nkind = \"nvcc\"\nsource = \"kernels/k.cu\"\nentries = [\"k\"]\ntargets = [\"sm_70\", \"sm_90\"]\noutputs = [\"cubin\"]\n",
        ),
    ]);
    let cache = tmp.path().join("cache");
    let house = tmp.path().join("house");
    // Five releases of the five nvcc packages: 13.3 hangs, 13.4 and 13.5 refuse sm_70.
    for (minor, how) in [
        (1, "ok"),
        (2, "ok"),
        (3, "hangs"),
        (4, "drops-sm70"),
        (5, "drops-sm70"),
    ] {
        let release = format!("13.{minor}");
        let version = format!("13.{minor}.7");
        let nvcc = fake_nvcc(&release, how);
        for package in [
            "nvidia-cuda-nvcc",
            "nvidia-nvvm",
            "nvidia-cuda-crt",
            "nvidia-cuda-runtime",
            "nvidia-cuda-cccl",
        ] {
            let files: Vec<(&str, &str)> = if package == "nvidia-cuda-nvcc" {
                vec![("nvidia/cu13/bin/nvcc", nvcc.as_str())]
            } else {
                vec![("nvidia/cu13/include/empty.h", "")]
            };
            wheel_of(&house, package, &version, &files);
        }
    }
    let bisect = |args: &[&str]| {
        let mut all = vec![
            "--json",
            "bisect",
            "--toolchains",
            "nvcc@13.1..nvcc@13.5",
            "--recipe",
            "k",
            "--timeout",
            "3s",
            "--wheels",
            "../house",
        ];
        all.extend(args);
        run(&cache, &root, &all)
    };
    // Exit 1: for sm_70 only an untested release separates good from bad.
    let (code, out, err) = bisect(&[]);
    assert_eq!(code, 1, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let targets = v["answers"].as_array().expect("per-target answers");
    let of = |t: &str| {
        targets
            .iter()
            .find(|x| x["target"] == t)
            .unwrap_or_else(|| panic!("no {t} in {v}"))
            .clone()
    };
    // sm_70: broken from 13.4 or 13.3; 13.3 could not be tested (it timed out).
    let sm70 = of("sm_70");
    assert_eq!(sm70["last-good"], "13.2", "{v}");
    assert_eq!(sm70["first-bad"], Value::Null, "{v}");
    assert_eq!(
        sm70["undecided"],
        serde_json::json!(["13.3", "13.4"]),
        "{v}"
    );
    let sm90 = of("sm_90");
    assert_eq!(sm90["first-bad"], Value::Null, "{v}");
    assert_eq!(
        sm90["unchanged"], "good with nvcc@13.1 and good with nvcc@13.5",
        "{v}"
    );
    assert_eq!(
        v["releases"],
        serde_json::json!(["13.1", "13.2", "13.3", "13.4", "13.5"]),
        "{v}"
    );
    let steps = v["steps"].as_array().unwrap();
    let hung: Vec<&Value> = steps.iter().filter(|s| s["release"] == "13.3").collect();
    assert!(!hung.is_empty(), "{v}");
    assert_eq!(hung.len(), 2, "{v}");
    for s in hung {
        assert_eq!(s["verdict"], "skip", "{v}");
        assert_eq!(s["detail"], "timed out after 3s", "{v}");
    }
    // Where the releases came from, and the digests of the wheels trusted on first use.
    let wheels = v["wheels"]["13.2"].as_array().unwrap();
    assert_eq!(wheels.len(), 5, "{v}");
    assert!(wheels.iter().all(|w| w["pinned"] == false), "{v}");
    let nvcc_wheel = house.join(format!(
        "nvidia_cuda_nvcc-13.2.7-py3-none-manylinux2014_{}.whl",
        std::env::consts::ARCH
    ));
    assert_eq!(wheels[0]["sha256"], sha256(&nvcc_wheel), "{v}");
    assert!(
        v["releases-from"]
            .as_str()
            .unwrap()
            .starts_with("the nvcc releases pinned in repro.toml and in the wheel directory"),
        "{v}"
    );
    // A release the directory does not hold, and a range the wrong way round.
    let (code, _, err) = run(
        &cache,
        &root,
        &[
            "bisect",
            "--toolchains",
            "nvcc@13.5..nvcc@13.1",
            "--recipe",
            "k",
            "--wheels",
            "../house",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "error: nvcc@13.5 is newer than nvcc@13.1: give the older (good) release first\nhint: swap the ends: --toolchains nvcc@13.1..nvcc@13.5"
        ),
        "{err}"
    );
    let (code, _, err) = run(
        &cache,
        &root,
        &[
            "bisect",
            "--toolchains",
            "nvcc@13.1..nvcc@13.9",
            "--recipe",
            "k",
            "--wheels",
            "../house",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("13.9"), "{err}");
    assert!(err.contains("13.1, 13.2, 13.3, 13.4, 13.5"), "{err}");
    assert!(err.contains("hint: "), "{err}");
}

#[test]
fn trees_whose_stamps_are_missing_damaged_or_foreign_are_listed_as_incomplete_with_why() {
    let (tmp, root) = repo_with(&[("repro.toml", "schema = 1\n")]);
    let cache = tmp.path().join("cache");
    let trees = cache.join("repro/toolchains");
    let fixture = std::fs::read_to_string(
        common::crate_dir().join("tests/fixtures/toolchain-stamp/toolchain.json"),
    )
    .unwrap();
    let stamp = |name: &str, text: Option<&str>| {
        let dir = trees.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(t) = text {
            std::fs::write(dir.join("toolchain.json"), t).unwrap();
        }
        dir
    };
    stamp("nvcc-1.0", None);
    stamp("nvcc-2.0", Some(&" ".repeat((1 << 20) + 1)));
    stamp("nvcc-3.0", Some("{\"schema\": 2"));
    stamp(
        "nvcc-4.0",
        Some(&fixture.replace("\"schema\": 2", "\"schema\": 1")),
    );
    std::fs::create_dir_all(stamp("nvcc-5.0", None).join("toolchain.json")).unwrap();
    let whole = stamp("nvcc-13.0", Some(&fixture));
    // Staging and lock directories are not trees.
    std::fs::create_dir_all(trees.join(".staging-nvcc-9.0-x")).unwrap();

    let (code, out, err) = run(&cache, &root, &["toolchain", "list"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with(' ')).collect();
    let dir = |n: &str| trees.join(n).display().to_string();
    assert_eq!(
        lines,
        [
            "nvcc-1.0  INCOMPLETE: it has no completion stamp (an install was interrupted); builds do not use it (reinstall it)".to_string(),
            format!(
                "nvcc-2.0  INCOMPLETE: its stamp {}/toolchain.json is implausibly large; builds do not use it (reinstall it)",
                dir("nvcc-2.0")
            ),
            "nvcc-3.0  INCOMPLETE: its stamp is not one this repro writes (EOF while parsing an object at line 1 column 12); builds do not use it (reinstall it)".to_string(),
            "nvcc-4.0  INCOMPLETE: its stamp has schema 1, not the one this repro writes; builds do not use it (reinstall it)".to_string(),
            format!(
                "nvcc-5.0  INCOMPLETE: cannot read {}/toolchain.json: Is a directory (os error 21); builds do not use it (reinstall it)",
                dir("nvcc-5.0")
            ),
            "nvcc-13.0  13.0  266 MiB  from wheel directory /tmp/whl".to_string(),
        ],
        "{out}"
    );
    assert!(out.contains(&whole.display().to_string()), "{out}");
    let (code, out, _) = run(&cache, &root, &["--json", "toolchain", "list"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    let rows = v["toolchains"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "{v}");
    assert_eq!(rows[3]["complete"], false, "{v}");
    assert_eq!(
        rows[3]["problem"], "its stamp has schema 1, not the one this repro writes",
        "{v}"
    );
    assert_eq!(rows[5]["complete"], true, "{v}");
    assert_eq!(rows[5]["release"], "13.0", "{v}");
    assert_eq!(rows[5]["used-by-builds"], false, "{v}");
}

#[test]
fn releases_that_repro_does_not_install_are_refused() {
    let other = if std::env::consts::ARCH == "x86_64" {
        "aarch64"
    } else {
        "x86_64"
    };
    let (tmp, root) = repo_with(&[(
        "repro.toml",
        &format!(
            "schema = 1\n[toolchain.nvrtc]\nversion = \"13.0.88\"\nsha256 = {{ {other} = \"{}\" }}\n",
            "0".repeat(64)
        ),
    )]);
    let cache = tmp.path().join("cache");
    // The pinned NVRTC is pinned for another CPU architecture only.
    let (code, _, err) = run(&cache, &root, &["toolchain", "install"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(&format!(
            "error: nvrtc@13.0.88 is not offered for {}: nvidia-cuda-nvrtc 13.0.88 has no sha256 pinned for it",
            std::env::consts::ARCH
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("hint: it is pinned for {other} only")),
        "{err}"
    );
    // `system` is the machine's own compiler.
    let (code, _, err) = run(&cache, &root, &["toolchain", "install", "system"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("error: `system` is not something repro installs")
            && err.contains("hint: for example `repro toolchain install nvcc@13.0`"),
        "{err}"
    );
    assert_eq!(leftovers(&cache), Vec::<String>::new());
}
