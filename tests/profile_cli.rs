//! `repro profile` without a GPU: a fake `ncu` (REPRO_NCU) that prints Nsight Compute's
//! `--csv --page raw` format, and its refusals (no permission for the counters, an unknown
//! metric, no ncu at all), each with its message, exit code and nothing recorded. The real
//! profile on a GPU is `profile_dram_throughput_matches_bench`, ignored here.

use crate::common;

use std::path::{Path, PathBuf};

use common::{kernel_repo, nvrtc_available, repro};
use serde_json::Value;

/// A stand-in for ncu: `--version`, a profiling run that writes the report named by
/// `--export` (and logs its arguments), and `--import REPORT --csv --page raw --metrics M`
/// that prints a header, a units row and one row, each metric's value `1000 * SCALE`
/// (`FAKE_NCU_SCALE`, default 1). `FAKE_NCU_MODE=perm` or `=unknown` makes it refuse as
/// ncu does; `=crash` prints the report of a child whose launch crashed.
const FAKE_NCU: &str = r#"#!/bin/sh
if [ "$1" = "--version" ]; then
  printf 'NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2025 NVIDIA Corporation\nVersion 2025.3.1.0 (build 36398880) (public-release)\n'
  exit 0
fi
if [ "$1" = "--import" ]; then
  metrics=""
  while [ $# -gt 0 ]; do
    if [ "$1" = "--metrics" ]; then metrics="$2"; fi
    shift
  done
  scale="${FAKE_NCU_SCALE:-1}"
  header='"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC"'
  units='"","","","","","","","","","",""'
  row='"0","4242","repro","127.0.0.1","vector_add","1","7","(256, 1, 1)","(1024, 1, 1)","0","9.0"'
  old_ifs="$IFS"; IFS=','
  for m in $metrics; do
    header="$header,\"$m\""
    case "$m" in
      *per_second) units="$units,\"byte/second\"" ;;
      *pct*) units="$units,\"%\"" ;;
      *) units="$units,\"\"" ;;
    esac
    row="$row,\"$((1000 * scale)).5\""
  done
  IFS="$old_ifs"
  printf '%s\n%s\n%s\n' "$header" "$units" "$row"
  exit 0
fi
echo "$@" >> "${FAKE_NCU_LOG:-/dev/null}"
case "$FAKE_NCU_MODE" in
  perm)
    echo "==PROF== Connected to process 4242"
    echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions on enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
    exit 1 ;;
  unknown)
    echo "==ERROR== Failed to find metric regex:^bogus__metric$"
    exit 1 ;;
  crash)
    echo '{"check":null,"samples-us":[],"launches-per-sample":1,"warmup-launches":0,"converged":false,"sm-clock-mhz":null,"throttled":false,"error":"CUDA_ERROR_ILLEGAL_ADDRESS during launching vector_add"}'
    exit 1 ;;
esac
while [ $# -gt 0 ]; do
  if [ "$1" = "--export" ]; then printf 'NCU-REPORT' > "$2"; fi
  shift
done
echo "==PROF== Report: profile.ncu-rep"
"#;

fn fake_ncu(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.join("ncu");
    std::fs::write(&p, FAKE_NCU).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn profile(
    cache: &Path,
    root: &Path,
    ncu: &Path,
    envs: &[(&str, &str)],
    args: &[&str],
) -> (i32, String, String) {
    let mut c = repro(cache);
    c.arg("-C")
        .arg(root)
        .arg("profile")
        .args(args)
        .env("REPRO_NCU", ncu);
    for (k, v) in envs {
        c.env(k, v);
    }
    common::outcome(&mut c)
}

fn profiles_in(root: &Path) -> usize {
    std::fs::read_dir(root.join(".repro/profiles")).map_or(0, |d| d.count())
}

#[test]
fn a_profile_is_recorded_shown_listed_and_compared() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let cache = tmp.path().join("cache");
    let ncu = fake_ncu(tmp.path());
    let log = tmp.path().join("ncu.log");
    let log_s = log.to_str().unwrap();
    let (code, out, err) = profile(
        &cache,
        &root,
        &ncu,
        &[("FAKE_NCU_LOG", log_s)],
        &["--json", "vector_add"],
    );
    assert_eq!(code, 0, "{err}");
    let a: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(a["kind"], "profile");
    assert_eq!(a["ncu-version"], "2025.3.1.0");
    assert_eq!(a["kernel"], "vector_add");
    assert_eq!(a["params"]["n"], 1048576);
    assert_eq!(a["cache-control"], "all");
    assert_eq!(a["metrics"]["dram__bytes.sum.per_second"]["value"], 1000.5);
    assert_eq!(
        a["metrics"]["dram__bytes.sum.per_second"]["unit"],
        "byte/second"
    );
    assert!(
        a["metrics"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.contains("stalled_long_scoreboard"))
    );
    assert_eq!(a["outputs"]["ncu-rep"]["bytes"], 10);
    // ncu was asked for one launch of the kernel, through `repro gpu-job`.
    let args = std::fs::read_to_string(&log).unwrap();
    assert!(
        args.contains("--launch-count 1 --kernel-name regex:^vector_add$"),
        "{args}"
    );
    assert!(args.contains("--cache-control all"), "{args}");
    assert!(args.trim_end().ends_with("gpu-job"), "{args}");
    // The report is in the store, and the record names it.
    let digest = a["outputs"]["ncu-rep"]["sha256"].as_str().unwrap();
    let blob =
        std::fs::read(root.join(format!(".repro/objects/{}/{}", &digest[..2], &digest[2..])));
    assert_eq!(blob.ok().as_deref(), Some(&b"NCU-REPORT"[..]));
    let id_a = a["id"].as_str().unwrap().to_string();

    // Show, log.
    let (code, shown, _) = common::run_in(&cache, &root, &["show", &id_a[..12]]);
    assert_eq!(code, 0);
    assert!(
        shown.contains("kind           profile") || shown.contains("profile"),
        "{shown}"
    );
    assert!(
        shown.contains("dram__bytes.sum.per_second") && shown.contains("1000.50 byte/second"),
        "{shown}"
    );
    let (_, listed, _) = common::run_in(&cache, &root, &["log", "--kind", "profile"]);
    assert!(
        listed.contains("vector_add") && listed.contains("ncu 2025.3.1.0"),
        "{listed}"
    );

    // A second profile whose figures doubled: compare shows each metric and B/A.
    let (code, out, err) = profile(
        &cache,
        &root,
        &ncu,
        &[("FAKE_NCU_SCALE", "2"), ("FAKE_NCU_LOG", log_s)],
        &[
            "--json",
            "vector_add",
            "--param",
            "n=4096",
            "--cache-control",
            "none",
            "--metrics",
            "dram__bytes.sum.per_second,gpu__time_duration.sum",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let b: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(b["metrics"].as_object().unwrap().len(), 2);
    assert_ne!(
        a["key"], b["key"],
        "another experiment: parameters, metrics, cache control"
    );
    let id_b = b["id"].as_str().unwrap();
    let (code, cmp, err) = common::run_in(&cache, &root, &["compare", &id_a[..12], &id_b[..12]]);
    assert_eq!(code, 0, "{err}");
    let line = cmp
        .lines()
        .find(|l| l.starts_with("dram__bytes.sum.per_second"))
        .expect(&cmp);
    assert!(
        line.contains("1000.50 byte/second")
            && line.contains("2000.50 byte/second")
            && line.contains("2.000"),
        "{line}"
    );
    let (_, cmp_json, _) = common::run_in(
        &cache,
        &root,
        &["--json", "compare", &id_a[..12], &id_b[..12]],
    );
    let v: Value = serde_json::from_str(&cmp_json).unwrap();
    assert_eq!(v["kind"], "profile-comparison");
    assert_eq!(profiles_in(&root), 2);
}

#[test]
fn refusals_say_why_and_record_nothing() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let cache = tmp.path().join("cache");
    let ncu = fake_ncu(tmp.path());
    let (code, _, err) = profile(
        &cache,
        &root,
        &ncu,
        &[("FAKE_NCU_MODE", "perm")],
        &["vector_add"],
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("ERR_NVGPUCTRPERM"), "{err}");
    assert!(
        err.contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{err}"
    );
    let (code, _, err) = profile(
        &cache,
        &root,
        &ncu,
        &[("FAKE_NCU_MODE", "unknown")],
        &["vector_add", "--metrics", "bogus__metric"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ncu does not know the metric `bogus__metric`"),
        "{err}"
    );
    assert!(err.contains("--query-metrics"), "{err}");
    let (code, _, err) = profile(
        &cache,
        &root,
        &ncu,
        &[("FAKE_NCU_MODE", "crash")],
        &["vector_add"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the profiled launch of `vector_add` is crash: CUDA_ERROR_ILLEGAL_ADDRESS"),
        "{err}"
    );
    let (code, _, err) = profile(
        &cache,
        &root,
        &tmp.path().join("no-such-ncu"),
        &[],
        &["vector_add"],
    );
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("Nsight Compute (ncu) not found"), "{err}");
    assert!(err.contains("REPRO_NCU"), "{err}");
    assert_eq!(profiles_in(&root), 0);
}

/// On the GPU machine (driver 580, CUDA 13.0 with ncu): `repro profile vector_add` records
/// a DRAM throughput within 5% of what `repro bench` computes for the same point.
#[test]
#[ignore = "needs a GPU and Nsight Compute: compares ncu's DRAM throughput with repro bench"]
fn profile_dram_throughput_matches_bench() {
    common::require_gpu();
    assert!(nvrtc_available());
    let (tmp, root) = kernel_repo();
    let cache = tmp.path().join("cache");
    let n = "n=67108864";
    // One command's --json document, the command having succeeded.
    let json_ok = |args: &[&str]| -> Value {
        let out = repro(&cache)
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let p = json_ok(&["--json", "profile", "vector_add", "--param", n]);
    let dram = p["metrics"]["dram__bytes.sum.per_second"]["value"]
        .as_f64()
        .unwrap();
    let b = json_ok(&["--json", "bench", "vector_add", "--param", n]);
    let gbps = b["results"][0]["throughput"]["gb-per-s"].as_f64().unwrap();
    let ratio = dram / 1e9 / gbps;
    println!(
        "ncu DRAM {:.1} GB/s, repro bench {gbps:.1} GB/s, ratio {ratio:.4}",
        dram / 1e9
    );
    assert!(
        (ratio - 1.0).abs() <= 0.05,
        "ncu {:.1} GB/s vs bench {gbps:.1} GB/s",
        dram / 1e9
    );
}
