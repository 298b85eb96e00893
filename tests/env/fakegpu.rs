//! The GPU side of `repro env` on a fake NVIDIA driver: the real binary, with a small C
//! library (tests/fakegpu/fakegpu.c) standing in for libcuda and NVML, as a test double of
//! a server stands in for the server. How the fake is built and made to be the driver repro
//! loads (and how each test checks that it was): tests/fakegpu/mod.rs.

use crate::common;
use crate::fakegpu;

use std::path::{Path, PathBuf};

use fakegpu::{FakeGpu, ok_json, stdout};
use serde_json::Value;

/// A machine unlike the fake's defaults in every field the driver answers.
const A100: &[(&str, &str)] = &[
    ("FAKEGPU_CUDA_VERSION", "12020"),
    ("FAKEGPU_NAME", "NVIDIA A100-SXM4-80GB"),
    ("FAKEGPU_CC", "8.0"),
    ("FAKEGPU_SMS", "108"),
    ("FAKEGPU_MEM_MIB", "81920"),
    ("FAKEGPU_L2_KIB", "40960"),
    ("FAKEGPU_SMEM_KIB", "163"),
    ("FAKEGPU_UUID", "GPU-0123abcd-4567-89ef-0011-223344556677"),
    ("FAKEGPU_PCI", "0000:07:00.0"),
    ("FAKEGPU_ECC", "0"),
    ("FAKEGPU_PERSISTENCE", "0"),
    ("FAKEGPU_MIG", "1"),
    ("FAKEGPU_POWER_W", "400"),
    ("FAKEGPU_MAX_SM_MHZ", "1410"),
    ("FAKEGPU_MAX_MEM_MHZ", "1593"),
    ("FAKEGPU_SM_MHZ", "1005"),
    ("FAKEGPU_MEM_MHZ", "1512"),
    ("FAKEGPU_TEMP_C", "44"),
    ("FAKEGPU_VBIOS", "92.00.36.00.01"),
    ("FAKEGPU_OTHER_PROCS", "2"),
    // repro's own process on the GPU is not "another process".
    ("FAKEGPU_OWN_PROC", "1"),
];

#[test]
fn capture_shows_every_field_the_fake_driver_answers() {
    let Some(gpu) = FakeGpu::new("535.104.05") else {
        return;
    };
    let out = gpu.run(&["env", "capture"], A100);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    let row = |section: &str, name: &str, value: &str| {
        let found = text.lines().any(|l| {
            let l = l.strip_prefix(section).unwrap_or(l).trim_start();
            l.strip_prefix(name)
                .is_some_and(|rest| rest.trim() == value && rest.starts_with(' '))
        });
        assert!(found, "no row `{name}  {value}` in:\n{text}");
    };
    row("driver", "version", "535.104.05");
    row("driver", "cuda-version", "12.2");
    row("driver", "library", gpu.lib.to_str().unwrap());
    row("driver", "found-by", "the dynamic loader");
    row("gpu", "count", "1");
    for (name, value) in [
        ("name", "NVIDIA A100-SXM4-80GB"),
        ("compute-capability", "8.0"),
        ("sm-count", "108"),
        ("memory-mib", "81920"),
        ("l2-cache-kib", "40960"),
        ("max-shared-memory-per-block-kib", "163"),
        ("uuid", "GPU-0123abcd-4567-89ef-0011-223344556677"),
        ("pci-bus-id", "0000:07:00.0"),
        ("ecc", "false"),
        ("persistence-mode", "false"),
        ("mig-mode", "true"),
        ("power-limit-w", "400"),
        ("max-sm-clock-mhz", "1410"),
        ("max-mem-clock-mhz", "1593"),
        ("sm-clock-mhz", "1005"),
        ("mem-clock-mhz", "1512"),
        ("temperature-c", "44"),
        ("vbios", "92.00.36.00.01"),
        ("other-processes", "2"),
    ] {
        row("", &format!("[0] {name}"), value);
    }
    assert!(!text.contains("unavailable: no NVIDIA driver"), "{text}");
}

#[test]
fn capture_json_types_each_device_and_keeps_devices_apart() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    // Two devices that differ; NVML lists them in the other order (it numbers by PCI bus),
    // so its answers must be matched by UUID, not by index.
    let fp = gpu.capture(&[
        ("FAKEGPU_COUNT", "2"),
        ("FAKEGPU_NAME_1", "NVIDIA H100 80GB HBM3"),
        ("FAKEGPU_CC_1", "9.0"),
        ("FAKEGPU_MAX_SM_MHZ_1", "1755"),
        ("FAKEGPU_ECC_1", "0"),
        ("FAKEGPU_NVML_REVERSE", "1"),
    ]);
    assert_eq!(fp["driver"]["version"], "580.159.04");
    assert_eq!(fp["driver"]["cuda-version"], "13.0");
    let gpus = &fp["gpu"];
    assert_eq!(gpus["count"], 2, "{gpus}");
    let d = gpus["devices"].as_array().unwrap();
    assert_eq!(d.len(), 2);
    assert_eq!(d[0]["name"], "NVIDIA Fake GPU");
    assert_eq!(d[1]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(d[0]["uuid"], "GPU-face0000-0000-0000-0000-000000000000");
    assert_eq!(d[1]["uuid"], "GPU-face0000-0000-0000-0000-000000000001");
    assert_eq!(d[0]["pci-bus-id"], "0000:01:00.0");
    assert_eq!(d[1]["pci-bus-id"], "0000:02:00.0");
    // Typed: numbers are numbers, booleans booleans, versions strings.
    assert_eq!(d[0]["max-sm-clock-mhz"], 1980);
    assert_eq!(d[1]["max-sm-clock-mhz"], 1755);
    assert_eq!(d[0]["ecc"], true);
    assert_eq!(d[1]["ecc"], false);
    assert_eq!(d[0]["memory-mib"], 143155);
    assert_eq!(d[0]["l2-cache-kib"], 61440);
    assert_eq!(d[1]["compute-capability"], "9.0");
    assert_eq!(d[1]["other-processes"], 0);
}

/// A node of eight, listed by NVML in the other order, gets every device's own answers
/// (matched by UUID; one device's failure stays its own), as NVML asks each device on a
/// thread of its own. (The fake answers every call from the environment, so this holds the
/// answers to their devices; whether the threads overlap is measured on a GPU machine, by
/// `benches/nvml_start.py --every-device --parallel`.)
#[test]
fn eight_devices_each_keep_their_own_nvml_answers() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let mut vars: Vec<(String, String)> = vec![
        ("FAKEGPU_COUNT".into(), "8".into()),
        ("FAKEGPU_NVML_REVERSE".into(), "1".into()),
        ("FAKEGPU_FAIL".into(), "nvmlDeviceGetEccMode@5=3".into()),
    ];
    for i in 0..8 {
        vars.push((format!("FAKEGPU_POWER_W_{i}"), format!("{}", 300 + 10 * i)));
        vars.push((format!("FAKEGPU_VBIOS_{i}"), format!("96.00.00.00.{i:02}")));
    }
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let fp = gpu.capture(&vars);
    let d = fp["gpu"]["devices"].as_array().unwrap();
    assert_eq!(d.len(), 8, "{fp}");
    for (i, dev) in d.iter().enumerate() {
        assert_eq!(
            dev["power-limit-w"],
            300 + 10 * i as u64,
            "device {i}: {dev}"
        );
        assert_eq!(dev["vbios"], format!("96.00.00.00.{i:02}"), "device {i}");
        if i == 5 {
            assert!(unavailable(&dev["ecc"]).contains("not available"), "{dev}");
        } else {
            assert_eq!(dev["ecc"], true, "device {i}: {dev}");
        }
    }
}

/// CUDA numbers only the devices `CUDA_VISIBLE_DEVICES` lists, in its order (by index or
/// UUID prefix); the cache is kept per value of it; NVML's answers follow each device by UUID.
#[test]
fn cuda_visible_devices_choose_and_order_the_devices() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let three = [
        ("FAKEGPU_COUNT", "3"),
        ("FAKEGPU_NAME_2", "NVIDIA Third"),
        ("FAKEGPU_VBIOS_2", "3.3.3"),
    ];
    for visible in [
        "2,0",
        "GPU-face0000-0000-0000-0000-000000000002,0",
        "2,0,7,1",
    ] {
        let mut vars = three.to_vec();
        vars.push(("CUDA_VISIBLE_DEVICES", visible));
        let fp = gpu.capture(&vars);
        let g = &fp["gpu"];
        // An entry that names no device ends the list, as with the real driver.
        assert_eq!(g["count"], 2, "{visible}: {g}");
        let d = &g["devices"];
        assert_eq!(d[0]["name"], "NVIDIA Third", "{visible}");
        assert_eq!(d[0]["uuid"], "GPU-face0000-0000-0000-0000-000000000002");
        assert_eq!(d[0]["vbios"], "3.3.3", "{visible}");
        assert_eq!(d[1]["name"], "NVIDIA Fake GPU", "{visible}");
        assert_eq!(d[1]["vbios"], "96.00.FA.CE.00", "{visible}");
    }
    let mut vars = three.to_vec();
    vars.push(("CUDA_VISIBLE_DEVICES", "5"));
    let fp = gpu.capture(&vars);
    assert!(
        unavailable(&fp["gpu"]).contains("CUDA_ERROR_NO_DEVICE"),
        "{fp}"
    );
}

/// Runs `env check --json --lock LOCK` with `vars` and returns (exit code, report).
fn check(gpu: &FakeGpu, lock: &Path, extra: &[&str], vars: &[(&str, &str)]) -> (i32, Value) {
    let mut args = vec!["env", "check", "--json", "--lock", lock.to_str().unwrap()];
    args.extend(extra);
    let out = gpu.run(&args, vars);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "repro panicked: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{stderr}", stdout(&out)));
    (out.status.code().unwrap(), report)
}

/// The rows of a check report that are not `ok` or `ignored`, as `field status`.
fn problems(report: &Value) -> Vec<String> {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] != "ok" && r["status"] != "ignored")
        .map(|r| {
            format!(
                "{} {}",
                r["field"].as_str().unwrap(),
                r["status"].as_str().unwrap()
            )
        })
        .collect()
}

/// `env lock` on the fake with `vars`, into `name` in the fake's directory.
fn lock(gpu: &FakeGpu, name: &str, vars: &[(&str, &str)]) -> PathBuf {
    let path = gpu.path(name);
    let out = gpu.run(&["env", "lock", "-o", path.to_str().unwrap()], vars);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    path
}

#[test]
fn a_lock_taken_on_the_fake_machine_passes_there() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let path = lock(&gpu, "lock.toml", A100);
    let text = std::fs::read_to_string(&path).unwrap();
    // The fake's answers are in the lockfile with their tier's policy.
    for line in [
        r#""gpu.name" = { policy = "exact", value = "NVIDIA A100-SXM4-80GB" }"#,
        r#""gpu.compute-capability" = { policy = "exact", value = "8.0" }"#,
        r#""gpu.max-sm-clock-mhz" = { policy = "warn", value = "1410" }"#,
        r#""gpu.ecc" = { policy = "warn", value = "false" }"#,
        r#""driver.version" = { policy = "exact", value = "580.159.04" }"#,
        r#""driver.cuda-version" = { policy = "exact", value = "12.2" }"#,
        r#""gpu.uuid" = { policy = "ignore", value = "GPU-0123abcd-4567-89ef-0011-223344556677" }"#,
    ] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
    let (code, report) = check(&gpu, &path, &["--strict"], A100);
    assert_eq!(problems(&report), Vec::<String>::new(), "{report}");
    assert_eq!((code, &report["passed"]), (0, &Value::Bool(true)));
    let ok: Vec<&str> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "ok")
        .map(|r| r["field"].as_str().unwrap())
        .collect();
    for f in [
        "gpu.name",
        "gpu.compute-capability",
        "driver.version",
        "gpu.vbios",
    ] {
        assert!(ok.contains(&f), "{f} not checked ok: {ok:?}");
    }
    // The human report says so too, with the exit code README documents.
    let out = gpu.run(&["env", "check", "--lock", path.to_str().unwrap()], A100);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "ok",
                    "gpu.name",
                    "NVIDIA",
                    "A100-SXM4-80GB",
                    "NVIDIA",
                    "A100-SXM4-80GB"
                ]),
        "{text}"
    );
}

/// What differs, the variables that make it differ, the exit code of `env check`, the rows
/// that are not ok (`field status`), and the exit code with `--strict`.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    i32,
    Vec<&'static str>,
    i32,
);

#[test]
fn check_names_the_field_another_fake_machine_differs_in() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let path = lock(&gpu, "lock.toml", &[]);
    let with = |k: &'static str, v: &'static str| vec![(k, v)];
    let cases: Vec<Case> = vec![
        (
            "another GPU model",
            with("FAKEGPU_NAME", "NVIDIA H100 80GB HBM3"),
            1,
            vec!["gpu.name mismatch"],
            1,
        ),
        (
            "another compute capability",
            with("FAKEGPU_CC", "10.0"),
            1,
            vec!["gpu.compute-capability mismatch"],
            1,
        ),
        (
            "a driver supporting another CUDA version",
            with("FAKEGPU_CUDA_VERSION", "12080"),
            1,
            vec!["driver.cuda-version mismatch"],
            1,
        ),
        (
            "a lower maximum SM clock",
            with("FAKEGPU_MAX_SM_MHZ", "1500"),
            0,
            vec!["gpu.max-sm-clock-mhz warn"],
            1,
        ),
        (
            "ECC off and persistence off",
            vec![("FAKEGPU_ECC", "0"), ("FAKEGPU_PERSISTENCE", "0")],
            0,
            vec!["gpu.ecc warn", "gpu.persistence-mode warn"],
            1,
        ),
        (
            "a second GPU of the same model",
            with("FAKEGPU_COUNT", "2"),
            0,
            vec!["gpu.count warn"],
            1,
        ),
        (
            "a second GPU of another model",
            vec![("FAKEGPU_COUNT", "2"), ("FAKEGPU_NAME_1", "NVIDIA L4")],
            1,
            vec!["gpu.count warn", "gpu.name mismatch"],
            1,
        ),
        (
            "only the record-only fields",
            vec![
                ("FAKEGPU_TEMP_C", "80"),
                ("FAKEGPU_SM_MHZ", "345"),
                ("FAKEGPU_UUID", "GPU-99999999-9999-9999-9999-999999999999"),
            ],
            0,
            vec![],
            0,
        ),
    ];
    // Another machine has another boot, so the device cache of this one never answers
    // for it: `--fresh` stands in for that here (the cache has its own test below).
    for (what, vars, code, rows, strict) in cases {
        let (got, report) = check(&gpu, &path, &["--fresh"], &vars);
        let mut want: Vec<String> = rows.iter().map(|s| s.to_string()).collect();
        want.sort();
        let mut found = problems(&report);
        found.sort();
        assert_eq!(found, want, "{what}: {report}");
        assert_eq!(got, code, "{what}: {report}");
        assert_eq!(report["exit-code"], code, "{what}");
        let (got, _) = check(&gpu, &path, &["--fresh", "--strict"], &vars);
        assert_eq!(got, strict, "{what} with --strict");
    }
    // The mismatch row shows both sides, per device where the devices differ.
    let (_, report) = check(
        &gpu,
        &path,
        &["--fresh"],
        &[("FAKEGPU_COUNT", "2"), ("FAKEGPU_NAME_1", "NVIDIA L4")],
    );
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["field"] == "gpu.name")
        .unwrap();
    assert_eq!(row["expected"], "NVIDIA Fake GPU");
    assert_eq!(
        row["actual"], "gpu 0: NVIDIA Fake GPU; gpu 1: NVIDIA L4",
        "{row}"
    );
}

#[test]
fn another_driver_version_is_a_mismatch() {
    let (Some(old), Some(new)) = (FakeGpu::new("580.159.04"), FakeGpu::new("590.10.02")) else {
        return;
    };
    let path = lock(&old, "lock.toml", &[]);
    let fp = new.capture(&[]);
    assert_eq!(fp["driver"]["version"], "590.10.02");
    let (code, report) = check(&new, &path, &[], &[]);
    assert_eq!(problems(&report), ["driver.version mismatch"], "{report}");
    assert_eq!(code, 1);
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["field"] == "driver.version")
        .unwrap();
    assert_eq!(row["expected"], "580.159.04");
    assert_eq!(row["actual"], "590.10.02");
    // Without the kernel module's version file (a container without /proc/driver), the
    // version comes from the library's file name.
    let out = new
        .cmd(&[])
        .env("REPRO_NVIDIA_VERSION_FILE", new.path("absent"))
        .args(["env", "capture", "--json"])
        .output()
        .unwrap();
    let fp = ok_json(&out);
    new.assert_loaded(&fp);
    assert_eq!(fp["driver"]["version"], "590.10.02", "{}", fp["driver"]);
}

/// A library whose file name carries no version (`libcuda.so.1` itself, as a stand-in
/// installs it) says nothing of the driver's version: without the kernel module's file the
/// version is unavailable, not the soname's "1". A library file not named `libcuda.so*` at
/// all cannot be found in the process's maps.
#[test]
fn the_driver_version_comes_only_from_a_versioned_file_name() {
    let Some(gpu) = FakeGpu::with_files("580.159.04", "libcuda.so.1", "libnvidia-ml.so.1") else {
        return;
    };
    let no_module = gpu.path("absent");
    let out = gpu
        .cmd(&[])
        .env("REPRO_NVIDIA_VERSION_FILE", &no_module)
        .args(["env", "capture", "--json"])
        .output()
        .unwrap();
    let fp = ok_json(&out);
    gpu.assert_loaded(&fp);
    assert_eq!(
        fp["driver"]["version"]["unavailable"], "cannot read /proc/driver/nvidia/version",
        "{}",
        fp["driver"]
    );
    // With the kernel module's file, its version.
    let fp = gpu.capture(&[]);
    assert_eq!(fp["driver"]["version"], "580.159.04");

    let Some(odd) = FakeGpu::with_files("580.159.04", "fakecuda.so", "fakenvml.so") else {
        return;
    };
    let fp = ok_json(&odd.run(&["env", "capture", "--json"], &[]));
    assert_eq!(
        fp["driver"]["library"]["unavailable"], "not found in /proc/self/maps",
        "{}",
        fp["driver"]
    );
    // It was loaded all the same: the devices are the fake's.
    assert_eq!(fp["gpu"]["devices"][0]["name"], "NVIDIA Fake GPU");
    assert_eq!(fp["driver"]["version"], "580.159.04");
}

/// A whole section's reason, or one field's.
fn unavailable(v: &Value) -> String {
    v["unavailable"]
        .as_str()
        .unwrap_or_else(|| panic!("not unavailable: {v}"))
        .to_string()
}

#[test]
fn driver_errors_are_unavailable_fields_never_a_panic() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    // Whole-probe failures: (FAKEGPU_FAIL, the gpu section's reason).
    for (fail, why) in [
        ("cuInit", "cuInit failed: CUDA_ERROR_UNKNOWN"),
        (
            "cuInit=100",
            "no CUDA device is visible (CUDA_ERROR_NO_DEVICE",
        ),
        (
            "cuDeviceGetCount",
            "cuDeviceGetCount failed: CUDA_ERROR_UNKNOWN",
        ),
        (
            "cuDeviceGet@0=101",
            "cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE",
        ),
    ] {
        let fp = gpu.capture(&[("FAKEGPU_FAIL", fail)]);
        let got = unavailable(&fp["gpu"]);
        assert!(got.starts_with(why), "{fail}: {got}");
        // The driver section does not need cuInit and still answers.
        assert_eq!(fp["driver"]["cuda-version"], "13.0", "{fail}");
    }
    // No device at all: the real driver's cuInit says CUDA_ERROR_NO_DEVICE.
    let fp = gpu.capture(&[("FAKEGPU_COUNT", "0")]);
    assert!(
        unavailable(&fp["gpu"]).contains("CUDA_ERROR_NO_DEVICE"),
        "{fp}"
    );

    let fp = gpu.capture(&[("FAKEGPU_FAIL", "cuDriverGetVersion")]);
    assert_eq!(
        unavailable(&fp["driver"]["cuda-version"]),
        "cuDriverGetVersion failed: CUDA_ERROR_UNKNOWN"
    );
    assert_eq!(fp["gpu"]["devices"][0]["name"], "NVIDIA Fake GPU");

    // One query of one device fails: that field, on that device only.
    for (fail, field, why) in [
        (
            "cuDeviceGetName@1",
            "name",
            "cuDeviceGetName failed: CUDA_ERROR_UNKNOWN",
        ),
        (
            "cuDeviceGetAttribute@1",
            "compute-capability",
            "cuDeviceGetAttribute failed: CUDA_ERROR_UNKNOWN",
        ),
        (
            "cuDeviceTotalMem_v2@1=2",
            "memory-mib",
            "cuDeviceTotalMem failed: CUDA_ERROR_OUT_OF_MEMORY",
        ),
        (
            "cuDeviceGetPCIBusId@1",
            "pci-bus-id",
            "cuDeviceGetPCIBusId failed: CUDA_ERROR_UNKNOWN",
        ),
        (
            "cuDeviceGetUuid_v2@1",
            "uuid",
            "cuDeviceGetUuid failed: CUDA_ERROR_UNKNOWN",
        ),
        (
            "nvmlDeviceGetEccMode@1=3",
            "ecc",
            "the requested operation is not available on the target device",
        ),
        (
            "nvmlDeviceGetPersistenceMode@1=3",
            "persistence-mode",
            "not available",
        ),
        ("nvmlDeviceGetMigMode@1=3", "mig-mode", "not available"),
        (
            "nvmlDeviceGetEnforcedPowerLimit@1=4",
            "power-limit-w",
            "permission",
        ),
        (
            "nvmlDeviceGetMaxClockInfo@1=3",
            "max-sm-clock-mhz",
            "not available",
        ),
        (
            "nvmlDeviceGetClockInfo@1=3",
            "mem-clock-mhz",
            "not available",
        ),
        ("nvmlDeviceGetVbiosVersion@1=3", "vbios", "not available"),
        (
            "nvmlDeviceGetTemperature@1=3",
            "temperature-c",
            "not available",
        ),
        (
            "nvmlDeviceGetComputeRunningProcesses_v3@1=3",
            "other-processes",
            "not available",
        ),
    ] {
        let fp = gpu.capture(&[("FAKEGPU_COUNT", "2"), ("FAKEGPU_FAIL", fail)]);
        let d = &fp["gpu"]["devices"];
        let got = unavailable(&d[1][field]);
        assert!(got.contains(why), "{fail}: {got}");
        assert!(
            d[0][field].get("unavailable").is_none(),
            "{fail}: device 0 must still answer: {}",
            d[0]
        );
        assert_eq!(fp["gpu"]["count"], 2, "{fail}");
    }
    // A device whose UUID CUDA cannot tell cannot be matched to NVML's answers.
    let fp = gpu.capture(&[("FAKEGPU_FAIL", "cuDeviceGetUuid_v2")]);
    assert_eq!(
        unavailable(&fp["gpu"]["devices"][0]["vbios"]),
        "the device's UUID is unknown"
    );
}

#[test]
fn nvml_errors_mark_its_fields_and_leave_cuda_s() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let two = ("FAKEGPU_COUNT", "2");
    for (fail, why) in [
        ("nvmlInit_v2=9", "NVML failed to start: "),
        ("nvmlDeviceGetCount_v2", "NVML device count failed: "),
    ] {
        let fp = gpu.capture(&[two, ("FAKEGPU_FAIL", fail)]);
        for i in 0..2 {
            let d = &fp["gpu"]["devices"][i];
            for field in ["ecc", "vbios", "max-sm-clock-mhz", "other-processes"] {
                let got = unavailable(&d[field]);
                assert!(got.starts_with(why), "{fail}: {field}: {got}");
            }
            assert_eq!(d["name"], "NVIDIA Fake GPU", "{fail}");
        }
    }
    // NVML does not list device 1 (fewer devices, or one it cannot open or name).
    for vars in [
        vec![two, ("FAKEGPU_NVML_COUNT", "1")],
        vec![two, ("FAKEGPU_FAIL", "nvmlDeviceGetHandleByIndex_v2@1")],
        vec![two, ("FAKEGPU_FAIL", "nvmlDeviceGetUUID@1")],
    ] {
        let fp = gpu.capture(&vars);
        let d = &fp["gpu"]["devices"];
        assert_eq!(
            unavailable(&d[1]["ecc"]),
            "NVML does not list this device",
            "{vars:?}"
        );
        assert_eq!(d[0]["ecc"], true, "{vars:?}");
    }
    // NVML missing altogether (no libnvidia-ml.so.1 next to libcuda).
    std::fs::remove_file(gpu.dir.join("libnvidia-ml.so.1")).unwrap();
    // An empty explicit search list: repro's own search finds no other NVML either.
    let empty = gpu.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = gpu
        .cmd(&[])
        .env("REPRO_DRIVER_LIB_DIRS", &empty)
        .args(["env", "capture", "--json"])
        .output()
        .unwrap();
    let fp = ok_json(&out);
    gpu.assert_loaded(&fp);
    assert_eq!(
        unavailable(&fp["gpu"]["devices"][0]["ecc"]),
        "NVML not found (libnvidia-ml.so.1)"
    );
}

/// The functions the fake saw called (with `FAKEGPU_LOG`), and empties the log.
fn calls(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    text.lines().map(str::to_string).collect()
}

#[test]
fn env_check_reads_device_attributes_from_the_per_boot_cache() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let log = gpu.path("calls.log");
    let log_s = log.to_str().unwrap();
    let cache_file = gpu.cache.join("repro/gpu-devices.json");
    let lock_path = lock(&gpu, "lock.toml", &[("FAKEGPU_LOG", log_s)]);
    // `env lock` queried the driver and wrote the cache under the boot and driver.
    assert!(calls(&log).contains(&"cuInit".to_string()));
    let cached: Value = serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
    assert_eq!(
        cached["entries"][0]["value"]["gpu.devices.0.name"],
        "NVIDIA Fake GPU"
    );
    let key = cached["entries"][0]["key"].as_str().unwrap();
    assert!(key.contains("driver 580.159.04"), "{key}");

    // The model changes but the boot and the driver do not: `check` trusts the cache and
    // never calls cuInit (the real driver cannot change its devices without a reload)...
    let other = [("FAKEGPU_NAME", "NVIDIA L4"), ("FAKEGPU_LOG", log_s)];
    let (code, report) = check(&gpu, &lock_path, &[], &other);
    assert_eq!((code, problems(&report)), (0, vec![]), "{report}");
    let seen = calls(&log);
    assert!(!seen.iter().any(|c| c == "cuInit"), "{seen:?}");
    // ...but NVML state is read live every time.
    assert!(seen.iter().any(|c| c == "nvmlInit_v2"), "{seen:?}");
    // `--fresh` asks the driver and refreshes the cache.
    let (code, report) = check(&gpu, &lock_path, &["--fresh"], &other);
    assert_eq!(
        (code, problems(&report)),
        (1, vec!["gpu.name mismatch".to_string()])
    );
    assert!(calls(&log).contains(&"cuInit".to_string()));
    let (code, _) = check(&gpu, &lock_path, &[], &other);
    assert_eq!(code, 1, "the refreshed cache holds the new model");
    assert!(!calls(&log).contains(&"cuInit".to_string()));

    // Another driver loaded is another key: a miss, so the driver is asked.
    std::fs::write(
        &gpu.version_file,
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.200.01  Thu Oct  2 2025\n",
    )
    .unwrap();
    let (_, report) = check(&gpu, &lock_path, &[], &[("FAKEGPU_LOG", log_s)]);
    assert!(calls(&log).contains(&"cuInit".to_string()));
    assert!(problems(&report).contains(&"driver.version mismatch".to_string()));
    // Other CUDA_VISIBLE_DEVICES is another key too.
    check(
        &gpu,
        &lock_path,
        &[],
        &[("FAKEGPU_LOG", log_s), ("CUDA_VISIBLE_DEVICES", "0")],
    );
    assert!(calls(&log).contains(&"cuInit".to_string()));
    check(
        &gpu,
        &lock_path,
        &[],
        &[("FAKEGPU_LOG", log_s), ("CUDA_VISIBLE_DEVICES", "0")],
    );
    assert!(!calls(&log).contains(&"cuInit".to_string()), "now cached");
    // The cache keeps several keys: going back to the whole machine's view is still a hit.
    check(&gpu, &lock_path, &[], &[("FAKEGPU_LOG", log_s)]);
    assert!(
        !calls(&log).contains(&"cuInit".to_string()),
        "the earlier key is kept beside the new one"
    );
    // A container runtime's choice of GPUs (the same CUDA_VISIBLE_DEVICES, another
    // NVIDIA_VISIBLE_DEVICES) is another key: two containers sharing a cache directory
    // never take each other's device. So is Slurm's: each job of a node sees its own GPU
    // as device 0, which Slurm names.
    for (var, value) in [
        ("NVIDIA_VISIBLE_DEVICES", "1"),
        ("SLURM_STEP_GPUS", "2"),
        ("SLURM_STEP_GPUS", "3"),
    ] {
        check(
            &gpu,
            &lock_path,
            &[],
            &[
                ("FAKEGPU_LOG", log_s),
                ("CUDA_VISIBLE_DEVICES", "0"),
                (var, value),
            ],
        );
        assert!(calls(&log).contains(&"cuInit".to_string()), "{var}={value}");
    }

    // An incomplete answer is never cached: the next check asks again.
    std::fs::remove_file(&cache_file).unwrap();
    let failing = [("FAKEGPU_FAIL", "cuDeviceGetName"), ("FAKEGPU_LOG", log_s)];
    let (code, report) = check(&gpu, &lock_path, &[], &failing);
    assert_eq!(code, 1);
    assert!(
        problems(&report).contains(&"gpu.name missing".to_string()),
        "{report}"
    );
    assert!(!cache_file.exists());
    assert!(calls(&log).contains(&"cuInit".to_string()));

    // A cache that is not JSON is a miss, not an error, and is replaced.
    std::fs::write(&cache_file, "{ not json").unwrap();
    let (code, _) = check(&gpu, &lock_path, &[], &[("FAKEGPU_LOG", log_s)]);
    assert_eq!(code, 1, "driver.version still differs from the lock");
    assert!(calls(&log).contains(&"cuInit".to_string()));
    let cached: Value = serde_json::from_slice(&std::fs::read(&cache_file).unwrap()).unwrap();
    assert!(
        cached["entries"][0]["key"]
            .as_str()
            .unwrap()
            .contains("driver 580.200.01")
    );

    // Without the kernel module's version there is no key, hence no cache.
    std::fs::remove_file(&cache_file).unwrap();
    let out = gpu
        .cmd(&[])
        .env("REPRO_NVIDIA_VERSION_FILE", gpu.path("absent"))
        .args(["env", "capture", "--json"])
        .output()
        .unwrap();
    ok_json(&out);
    assert!(!cache_file.exists());
}

#[test]
fn lockfiles_are_named_and_chosen_by_the_fake_gpu_model() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let (_repo_tmp, root) = common::repo_with(&[("README", "x\n")]);
    let root_s = root.to_str().unwrap();
    let h100 = [("FAKEGPU_NAME", "NVIDIA H100 80GB HBM3")];
    let l4 = [("FAKEGPU_NAME", "NVIDIA L4")];
    for vars in [&h100, &l4] {
        let out = gpu.run(&["-C", root_s, "env", "lock"], vars);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    assert!(root.join("lockfiles/h100-80gb-hbm3.toml").is_file());
    assert!(root.join("lockfiles/l4.toml").is_file());
    // With two lockfiles, `check` takes the one whose gpu.name accepts this GPU, and says so.
    for (vars, file) in [(&h100, "h100-80gb-hbm3.toml"), (&l4, "l4.toml")] {
        let out = gpu.run(&["-C", root_s, "env", "check", "--fresh"], vars);
        let text = stdout(&out);
        assert!(
            text.contains(&format!("lockfiles/{file}"))
                && text.contains("its gpu.name accepts this GPU"),
            "{text}"
        );
        // The lockfiles are untracked files: the tree is dirty, a warning only.
        assert_eq!(out.status.code(), Some(0), "{text}");
    }
    // Where the chosen lockfile checks no GPU setting, the report says nothing of a reading
    // of them, though another candidate let one answer.
    let l4_lock = root.join("lockfiles/l4.toml");
    let text = std::fs::read_to_string(&l4_lock).unwrap();
    let text: String = text
        .lines()
        .filter(|l| {
            !["ecc", "persistence-mode", "mig-mode", "power-limit-w"]
                .iter()
                .any(|n| l.starts_with(&format!("\"gpu.{n}\"")))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&l4_lock, text).unwrap();
    for _ in 0..2 {
        let out = gpu.run(&["-C", root_s, "env", "check", "--json"], &l4);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(report["lockfile"].as_str().unwrap().ends_with("l4.toml"));
        assert!(report["settings-read-at"].is_null(), "{report}");
        let out = gpu.run(&["-C", root_s, "env", "check"], &l4);
        assert!(!stdout(&out).contains("as read"), "{}", stdout(&out));
    }
    // A third model has no lockfile: which one is ambiguous (exit 2).
    let out = gpu.run(
        &["-C", root_s, "env", "check", "--fresh"],
        &[("FAKEGPU_NAME", "NVIDIA B200")],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// A repro whose loader cannot find the driver (as a Nix-built one on Ubuntu) finds the
/// fake in the directories it searches itself, both libcuda and NVML, and the whole GPU
/// section is there.
#[test]
fn the_fake_found_by_repro_s_own_driver_search_answers_everything() {
    if common::has_gpu() {
        common::skip("needs a machine without a GPU: a real libcuda would be found by the loader");
        return;
    }
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let out = gpu
        .cmd(&[("FAKEGPU_NAME", "NVIDIA Searched")])
        .env_remove("LD_LIBRARY_PATH")
        .env("REPRO_DRIVER_LIB_DIRS", &gpu.dir)
        .args(["env", "capture", "--json"])
        .output()
        .unwrap();
    let fp = ok_json(&out);
    gpu.assert_loaded(&fp);
    let found = fp["driver"]["found-by"].as_str().unwrap();
    assert!(found.starts_with("repro's host search: "), "{found}");
    assert!(found.contains("(REPRO_DRIVER_LIB_DIRS)"), "{found}");
    assert_eq!(fp["gpu"]["devices"][0]["name"], "NVIDIA Searched");
    // NVML was found the same way: its fields are answered.
    assert_eq!(
        fp["gpu"]["devices"][0]["vbios"], "96.00.FA.CE.00",
        "{}",
        fp["gpu"]
    );

    // A kernel module (its version file) but no libcuda the loader or the search can find:
    // the driver section says which half is missing.
    let empty = gpu.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = gpu
        .cmd(&[])
        .env_remove("LD_LIBRARY_PATH")
        .env("REPRO_DRIVER_LIB_DIRS", &empty)
        .args(["env", "capture", "--json"])
        .output()
        .unwrap();
    let fp = ok_json(&out);
    assert_eq!(
        fp["driver"]["unavailable"],
        "the NVIDIA kernel module is loaded but libcuda.so.1 was not found",
        "{}",
        fp["driver"]
    );
    assert!(
        fp["gpu"]["unavailable"]
            .as_str()
            .unwrap()
            .contains("no NVIDIA driver"),
        "{}",
        fp["gpu"]
    );
}

#[test]
fn env_check_loads_no_driver_and_asks_nvml_only_what_its_lock_checks() {
    let Some(gpu) = FakeGpu::new("580.159.04") else {
        return;
    };
    let log = gpu.path("calls.log");
    let log_s = log.to_str().unwrap();
    let vars = [("FAKEGPU_LOG", log_s)];
    let lock_path = lock(&gpu, "lock.toml", &vars);
    let seen = calls(&log);
    assert!(seen.iter().any(|c| c == "cuDriverGetVersion"), "{seen:?}");
    let has = |seen: &[String], f: &str| seen.iter().any(|c| c == f);

    // The first check: devices and driver facts come from the per-boot caches (no cuInit,
    // no cuDriverGetVersion); NVML is asked for the live settings and, once, for the
    // per-boot fields, but never for what the lockfile ignores.
    let (code, report) = check(&gpu, &lock_path, &[], &vars);
    assert_eq!((code, problems(&report)), (0, vec![]), "{report}");
    let seen = calls(&log);
    for never in [
        "cuInit",
        "cuDriverGetVersion",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    ] {
        assert!(!has(&seen, never), "{never} in {seen:?}");
    }
    for asked in [
        "nvmlDeviceGetVbiosVersion",
        "nvmlDeviceGetEnforcedPowerLimit",
    ] {
        assert!(has(&seen, asked), "{asked} not in {seen:?}");
    }
    // The second: the per-boot NVML fields are cached too, and the settings the lockfile
    // checks with `warn` come from the first check's reading: NVML is not started.
    let (code, report) = check(&gpu, &lock_path, &[], &vars);
    assert_eq!(code, 0);
    let seen = calls(&log);
    assert!(
        !seen
            .iter()
            .any(|c| c.starts_with("nvml") || c.starts_with("cu")),
        "{seen:?}"
    );
    assert!(report["settings-read-at"].is_string(), "{report}");
    // `--fresh` asks every setting of NVML again (and the per-boot fields of the driver).
    let (code, report) = check(&gpu, &lock_path, &["--fresh"], &vars);
    assert_eq!(code, 0);
    let seen = calls(&log);
    for asked in [
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetEnforcedPowerLimit",
    ] {
        assert!(has(&seen, asked), "{asked} not in {seen:?}");
    }
    assert!(report["settings-read-at"].is_null(), "{report}");
    // An administrator's change of a setting shows with `--fresh`; until the reading is
    // older than its limit, a check without it reuses the reading, which passed.
    let power = [("FAKEGPU_LOG", log_s), ("FAKEGPU_POWER_W", "300")];
    let (code, report) = check(&gpu, &lock_path, &[], &power);
    assert_eq!((code, problems(&report)), (0, vec![]), "{report}");
    // Under `--strict` a warning fails the check: the settings are read now.
    let warned = vec!["gpu.power-limit-w warn".to_string()];
    let (code, report) = check(&gpu, &lock_path, &["--strict"], &power);
    assert_eq!((code, problems(&report)), (1, warned.clone()), "{report}");
    assert!(report["settings-read-at"].is_null(), "{report}");
    let (code, report) = check(&gpu, &lock_path, &["--fresh"], &power);
    assert_eq!((code, problems(&report)), (0, warned.clone()));
    // A reading that would warn is never reused: the check asks NVML again, so the setting
    // put back shows at once.
    calls(&log);
    let (code, report) = check(&gpu, &lock_path, &[], &power);
    assert_eq!((code, problems(&report)), (0, warned.clone()));
    assert!(report["settings-read-at"].is_null(), "{report}");
    assert!(has(&calls(&log), "nvmlDeviceGetEnforcedPowerLimit"));
    let (code, report) = check(&gpu, &lock_path, &[], &vars);
    assert_eq!((code, problems(&report)), (0, vec![]), "{report}");
    assert!(report["settings-read-at"].is_null(), "{report}");
    assert!(has(&calls(&log), "nvmlDeviceGetEnforcedPowerLimit"));
    let (_, report) = check(&gpu, &lock_path, &[], &vars);
    assert!(report["settings-read-at"].is_string(), "{report}");
    assert!(!has(&calls(&log), "nvmlInit_v2"));
    // The report says which settings it reused, how old they are, and how to read them now.
    let out = gpu.run(
        &["env", "check", "--lock", lock_path.to_str().unwrap()],
        &vars,
    );
    let text = stdout(&out);
    assert!(
        text.contains(
            "\n  gpu.ecc, gpu.persistence-mode, gpu.mig-mode, gpu.power-limit-w as read "
        ) && text.contains("`--fresh` reads them now"),
        "{text}"
    );
    // A reading older than five minutes (counted from the boot, which a wall clock set back
    // does not change), or from a later time since the boot, is not reused.
    let settings_file = gpu.cache.join("repro/gpu-settings.json");
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap();
    let now: f64 = uptime.split_whitespace().next().unwrap().parse().unwrap();
    let now = now as u64;
    for read_at in [now - 301, now + 3600] {
        let mut cached: Value =
            serde_json::from_slice(&std::fs::read(&settings_file).unwrap()).unwrap();
        cached["entries"][0]["value"]["boot-s"] = Value::from(read_at);
        std::fs::write(&settings_file, cached.to_string()).unwrap();
        let (code, report) = check(&gpu, &lock_path, &[], &vars);
        assert_eq!(code, 0);
        assert!(report["settings-read-at"].is_null(), "{read_at}: {report}");
        assert!(
            has(&calls(&log), "nvmlDeviceGetEnforcedPowerLimit"),
            "{read_at}"
        );
    }
    // A cache that is not a reading is a miss, not an error.
    std::fs::write(
        &settings_file,
        "{\"schema\": 1, \"entries\": [{\"key\": 1}]}",
    )
    .unwrap();
    let (code, report) = check(&gpu, &lock_path, &[], &vars);
    assert_eq!(code, 0);
    assert!(report["settings-read-at"].is_null(), "{report}");
    assert!(has(&calls(&log), "nvmlInit_v2"));
    // A setting the lockfile can fail on (`exact`) is read afresh at every check.
    let text = std::fs::read_to_string(&lock_path).unwrap();
    let strict_lock = gpu.path("strict.toml");
    let line = text
        .lines()
        .find(|l| l.starts_with("\"gpu.power-limit-w\""))
        .unwrap();
    std::fs::write(
        &strict_lock,
        text.replace(line, &line.replace("\"warn\"", "\"exact\"")),
    )
    .unwrap();
    for _ in 0..2 {
        let (code, report) = check(&gpu, &strict_lock, &[], &vars);
        assert_eq!((code, problems(&report)), (0, vec![]), "{report}");
        assert!(report["settings-read-at"].is_null(), "{report}");
        assert!(has(&calls(&log), "nvmlDeviceGetEnforcedPowerLimit"));
    }
    let (code, _) = check(&gpu, &strict_lock, &[], &power);
    assert_eq!(code, 1, "an exact power limit that changed fails at once");
    calls(&log);

    // A replaced driver library (same path, other file) is asked again.
    let bytes = std::fs::read(&gpu.lib).unwrap();
    std::fs::remove_file(&gpu.lib).unwrap();
    std::fs::write(&gpu.lib, &bytes).unwrap();
    let (code, report) = check(
        &gpu,
        &lock_path,
        &[],
        &[("FAKEGPU_LOG", log_s), ("FAKEGPU_CUDA_VERSION", "12080")],
    );
    assert!(has(&calls(&log), "cuDriverGetVersion"));
    assert_eq!(
        (code, problems(&report)),
        (1, vec!["driver.cuda-version mismatch".to_string()])
    );
    // Another LD_LIBRARY_PATH is another key: asked again.
    let out = gpu
        .cmd(&vars)
        .env(
            "LD_LIBRARY_PATH",
            format!("{}:/nonexistent", gpu.dir.display()),
        )
        .args([
            "env",
            "check",
            "--json",
            "--lock",
            lock_path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.code().is_some());
    assert!(has(&calls(&log), "cuDriverGetVersion"));

    // Another driver loaded (a reboot or reload): the per-boot NVML fields are asked again.
    std::fs::write(
        &gpu.version_file,
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.200.01  Thu Oct  2 2025\n",
    )
    .unwrap();
    check(&gpu, &lock_path, &[], &vars);
    assert!(has(&calls(&log), "nvmlDeviceGetVbiosVersion"));

    // A lockfile that checks no NVML field never starts NVML.
    let only_name = gpu.path("name.toml");
    std::fs::write(
        &only_name,
        "schema = 1\n[fields]\n\"gpu.name\" = { policy = \"exact\", value = \"NVIDIA Fake GPU\" }\n",
    )
    .unwrap();
    let (code, report) = check(&gpu, &only_name, &[], &vars);
    assert_eq!(code, 0, "{report}");
    let seen = calls(&log);
    assert!(
        !has(&seen, "nvmlInit_v2") && !has(&seen, "nvmlInitWithFlags"),
        "{seen:?}"
    );
}
