//! `repro profile` without a GPU: a fake `ncu` (REPRO_NCU) that prints Nsight Compute's
//! `--csv --page raw` format, and its refusals (no permission for the counters, an unknown
//! metric, no ncu at all), each with its message, exit code and nothing recorded. The real
//! profile on a GPU is `profile_dram_throughput_matches_bench`, ignored here.

use crate::common;
use crate::fakegpu;

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
    echo '{"check":null,"samples-us":[],"launches-per-sample":1,"warmup-launches":0,"converged":false,"sm-clock-mhz":null,"throttled":false,"error":{"kind":"driver","name":"CUDA_ERROR_ILLEGAL_ADDRESS","during":"launching vector_add"}}'
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

    // Plot a metric of the profiles: over the parameter (two points), across commits (one:
    // both are at HEAD, the newest wins); a metric no profile has is named, with those they have.
    let svg = tmp.path().join("p.svg");
    let svg_s = svg.to_str().unwrap();
    let metric = "dram__bytes.sum.per_second";
    let (code, out, err) = common::run_in(
        &cache,
        &root,
        &[
            "--json",
            "plot",
            "vector_add",
            "--metric",
            metric,
            "--sweep",
            "n",
            "-o",
            svg_s,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["points"].as_u64(), v["kind"].as_str()),
        (Some(2), Some("sweep"))
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg") || text.starts_with("<?xml"),
        "{text}"
    );
    assert!(
        text.contains("dram__bytes.sum.per_second (byte/second)"),
        "{text}"
    );
    let (code, out, err) = common::run_in(
        &cache,
        &root,
        &[
            "--json",
            "plot",
            "vector_add",
            "--metric",
            metric,
            "-o",
            svg_s,
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["points"], 1);
    let (code, _, err) = common::run_in(
        &cache,
        &root,
        &[
            "plot",
            "vector_add",
            "--metric",
            "no__such.metric",
            "-o",
            svg_s,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no profile of `vector_add` has a numeric `no__such.metric`"),
        "{err}"
    );
    assert!(err.contains("gpu__time_duration.sum"), "{err}");
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

/// Profiles travel through `repro push` and `repro pull` with their `.ncu-rep` report, and
/// arrive whole (the clone shows the profile and holds the report); a profile on the remote
/// whose content does not hash to its ID (a metric edited and the seal recomputed, as anyone
/// can) is rejected, named, and not filed.
#[test]
fn profiles_are_pushed_and_pulled_with_their_reports() {
    if !nvrtc_available() {
        return;
    }
    let (tmp, root) = kernel_repo();
    let cache = tmp.path().join("cache");
    let ncu = fake_ncu(tmp.path());
    let (code, out, err) = profile(&cache, &root, &ncu, &[], &["--json", "vector_add"]);
    assert_eq!(code, 0, "{err}");
    let a: Value = serde_json::from_str(&out).unwrap();
    let id = a["id"].as_str().unwrap().to_string();
    let digest = a["outputs"]["ncu-rep"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let remote = tmp.path().join("remote.git");
    let remote_s = remote.to_str().unwrap();
    common::git(tmp.path(), &["init", "-q", "--bare", remote_s]);
    common::git(&root, &["remote", "add", "origin", remote_s]);
    common::git(&root, &["push", "-q", "origin", "HEAD"]);
    let (code, out, err) = common::run_in(&cache, &root, &["push"]);
    assert_eq!(code, 0, "{out}{err}");
    let b = tmp.path().join("b");
    common::git(tmp.path(), &["clone", "-q", remote_s, b.to_str().unwrap()]);
    let (code, out, err) = common::run_in(&cache, &b, &["pull"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, shown, err) = common::run_in(&cache, &b, &["--json", "show", &id[..12]]);
    assert_eq!(code, 0, "{err}");
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["kind"], "profile");
    let report = std::fs::read(b.join(format!(".repro/objects/{}/{}", &digest[..2], &digest[2..])));
    assert_eq!(report.ok().as_deref(), Some(&b"NCU-REPORT"[..]));
    let (code, out, _) = common::run_in(&cache, &b, &["store", "verify"]);
    assert_eq!(code, 0, "{out}");

    // A forged profile: a metric raised, the seal recomputed, filed under another ID.
    let text = std::fs::read(root.join(format!(".repro/profiles/{id}.json"))).unwrap();
    let mut v: Value = serde_json::from_slice(&text).unwrap();
    v.as_object_mut().unwrap().remove("record-sha256");
    v["metrics"]["dram__bytes.sum.per_second"]["value"] = serde_json::json!(9999.5);
    let forged = repro::store::seal(&v);
    let path = tmp.path().join("forged.json");
    std::fs::write(&path, forged).unwrap();
    let blob = common::git(&remote, &["hash-object", "-w", path.to_str().unwrap()]);
    let other = format!("{:064x}", 9);
    common::git(
        &remote,
        &[
            "update-ref",
            &format!("refs/repro/profiles/{other}"),
            blob.trim(),
        ],
    );
    let (code, out, _) = common::run_in(&cache, &b, &["pull"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "rejected: profiles/{other}: its content does not hash to its ID"
        )),
        "{out}"
    );
    assert!(!b.join(format!(".repro/profiles/{other}.json")).exists());
}

/// A bench result and a profile of the same experiment (build, parameters, GPU model) point
/// to each other: `repro show RESULT` lists the profile, `repro show PROFILE` the result. On
/// the fake GPU (tests/fakegpu) with the fake ncu.
#[test]
fn a_bench_result_and_its_profile_point_to_each_other() {
    if !nvrtc_available() {
        return;
    }
    let Some(gpu) = fakegpu::FakeGpu::new("580.159.04") else {
        return;
    };
    let (tmp, root) = kernel_repo();
    let ncu = fake_ncu(tmp.path());
    // A small L2 keeps the roofline calibration's buffers (16x L2) small on the fake.
    let vars = [
        ("FAKEGPU_L2_KIB", "4096"),
        ("REPRO_NCU", ncu.to_str().unwrap()),
    ];
    // The fake runs no code: a cubin's launches write nothing, so vector_add's check reads
    // `wrong` (exit 1). The verdict is not what this test is about; the record is kept.
    let run = |args: &[&str]| {
        let out = gpu
            .cmd(&vars)
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let code = out.status.code();
        assert!(
            code == Some(0) || (args.contains(&"bench") && code == Some(1)),
            "{args:?}: {err}"
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let n = "n=1048576";
    let b: Value = serde_json::from_str(&run(&[
        "--json",
        "bench",
        "vector_add",
        "--param",
        n,
        "--min-time",
        "30ms",
        "--warmup",
        "10ms",
    ]))
    .unwrap();
    let result = b["results"][0]["id"].as_str().unwrap().to_string();
    let p: Value =
        serde_json::from_str(&run(&["--json", "profile", "vector_add", "--param", n])).unwrap();
    let profile = p["id"].as_str().unwrap().to_string();
    let shown = run(&["show", &result[..12]]);
    let row = shown
        .lines()
        .find(|l| l.starts_with("profiles"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(row.contains(&profile[..12]), "{row}");
    let shown = run(&["show", &profile[..12]]);
    let row = shown
        .lines()
        .find(|l| l.starts_with("results"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(row.contains(&result[..12]), "{row}");
    // `show --json` carries the same links, as full IDs.
    let shown: Value = serde_json::from_str(&run(&["--json", "show", &result[..12]])).unwrap();
    assert_eq!(shown["profiles"], serde_json::json!([profile]), "{shown}");
    let shown: Value = serde_json::from_str(&run(&["--json", "show", &profile[..12]])).unwrap();
    assert_eq!(shown["results"], serde_json::json!([result]), "{shown}");
    // A bundle of the result carries its profile and the profile's report.
    let bundle = tmp.path().join("b.tar.zst");
    let bundle_s = bundle.to_str().unwrap();
    let made: Value = serde_json::from_str(&run(&[
        "--json",
        "bundle",
        "create",
        &result[..12],
        "-o",
        bundle_s,
    ]))
    .unwrap();
    assert_eq!(made["profiles"], serde_json::json!([profile]), "{made}");
    let listed: Value =
        serde_json::from_str(&run(&["--json", "bundle", "show", bundle_s])).unwrap();
    let files: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let rep = p["outputs"]["ncu-rep"]["sha256"].as_str().unwrap();
    assert!(
        files.contains(&format!("profiles/{profile}.json").as_str()),
        "{files:?}"
    );
    assert!(
        files.contains(&format!("artifacts/{rep}").as_str()),
        "{files:?}"
    );
    run(&["bundle", "verify", bundle_s]);
    // Another point is another experiment: no link.
    let p2: Value = serde_json::from_str(&run(&[
        "--json",
        "profile",
        "vector_add",
        "--param",
        "n=4096",
    ]))
    .unwrap();
    let shown = run(&["show", &p2["id"].as_str().unwrap()[..12]]);
    assert!(!shown.lines().any(|l| l.starts_with("results")), "{shown}");
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

/// On the GPU machine: the first `repro bench` of a recipe with `[work]` calibrates the
/// device through repro's GPU runner, and a large vector add (64 Mi elements, 768 MiB moved
/// per launch) is judged memory-bound at a fraction of the measured peak DRAM bandwidth
/// between 50% and 110%; the peaks are plausible for a data-centre GPU and `repro env
/// capture` shows them. Prints the figures (`--nocapture`).
#[test]
#[ignore = "needs a GPU: calibrates the device's peaks and judges vector_add against them"]
fn roofline_of_vector_add_on_the_gpu() {
    common::require_gpu();
    assert!(nvrtc_available());
    let (tmp, root) = kernel_repo();
    let cache = tmp.path().join("cache");
    let run = |args: &[&str]| {
        let out = repro(&cache)
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), err)
    };
    let (out, err) = run(&["bench", "vector_add", "--param", "n=67108864"]);
    println!("{err}{out}");
    assert!(err.contains("calibrating device 0"), "{err}");
    assert!(out.contains("memory-bound: "), "{out}");
    let (out, _) = run(&["--json", "bench", "vector_add", "--param", "n=67108864"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let t = &v["results"][0]["throughput"];
    let r = &t["roofline"];
    let (dram, fp32) = (
        r["peaks"]["dram-gb-per-s"].as_f64().unwrap(),
        r["peaks"]["fp32-tflops"].as_f64().unwrap(),
    );
    let fraction = r["fraction"].as_f64().unwrap();
    println!(
        "peaks: DRAM {dram:.0} GB/s, FP32 {fp32:.1} TFLOP/s; vector_add {:.0} GB/s = {:.1}% of peak",
        t["gb-per-s"].as_f64().unwrap(),
        fraction * 100.0
    );
    assert_eq!(r["bound"], "memory", "{t}");
    assert!((0.5..=1.1).contains(&fraction), "{t}");
    assert!(dram > 500.0 && fp32 > 5.0, "{r}");
    let (env, _) = run(&["env", "capture"]);
    assert!(env.contains("measured peaks [0]: DRAM"), "{env}");
}
