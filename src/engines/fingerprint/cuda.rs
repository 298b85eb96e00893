//! GPU and driver probes through the CUDA driver API (cudarc, loaded at run time).
//!
//! cudarc panics if libcuda is missing when a function is first called, so presence is
//! checked before any call; a machine without the driver gets an `unavailable` section
//! with the reason, never a panic.

use std::ffi::{CStr, c_char, c_int};

use cudarc::driver::sys::{self, CUdevice_attribute as Attr, CUresult};

use crate::foundation::fields::{Field, Fields};
use crate::foundation::fsutil;

/// Why there is no GPU section on machines without the driver.
pub const NO_DRIVER: &str = "no NVIDIA driver on this machine (libcuda.so.1 not found)";

/// Whether the host's CUDA driver library can be loaded (a GPU can be used at all).
pub fn driver_present() -> bool {
    // Where the loader cannot find the host's driver (a Nix-built repro on Ubuntu), load it
    // from the host's driver directories first.
    crate::foundation::driverlib::ensure_one("libcuda.so.1");
    // SAFETY: only tries to dlopen the library by its candidate names.
    unsafe { sys::is_culib_present() }
}

/// Why the driver could not answer: the field or the device list is then unavailable.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A driver call returned an error.
    #[error("{call} failed: {result:?}")]
    Call {
        /// The driver function.
        call: &'static str,
        /// What it returned.
        result: CUresult,
    },
    /// The driver sees no device.
    #[error("no CUDA device is visible (CUDA_ERROR_NO_DEVICE; check CUDA_VISIBLE_DEVICES)")]
    NoDevice,
}

fn check(r: CUresult, call: &'static str) -> Result<(), CudaError> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Call { call, result: r })
    }
}

/// Where the loaded kernel module states its version: `/proc/driver/nvidia/version`, or the
/// file `REPRO_NVIDIA_VERSION_FILE` names. That variable is a test seam: the tests that run
/// repro on a fake driver (tests/env/fakegpu.rs) stand in a kernel module with it, so that
/// the driver version and the device cache's key come from the fake, also on a GPU machine.
fn module_version_file() -> std::path::PathBuf {
    std::env::var_os("REPRO_NVIDIA_VERSION_FILE")
        .filter(|v| !v.is_empty())
        .map_or_else(|| "/proc/driver/nvidia/version".into(), Into::into)
}

/// Probes the driver: its version, the CUDA version it supports, the library's path.
pub fn probe_driver() -> Fields {
    let mut f = Fields::new();
    let proc_version = std::fs::read_to_string(module_version_file()).ok();
    let present = driver_present();
    if let Some(how) = crate::foundation::driverlib::located("libcuda.so.1") {
        f.insert("driver.found-by".into(), Field::Value(how.describe()));
    }
    if !present {
        let reason = match proc_version {
            Some(_) => "the NVIDIA kernel module is loaded but libcuda.so.1 was not found".into(),
            None => NO_DRIVER.to_string(),
        };
        f.insert("driver".into(), Field::Unavailable(reason));
        return f;
    }
    let mut v: c_int = 0;
    // SAFETY: the library is present; cuDriverGetVersion needs no cuInit.
    let cuda = unsafe { sys::cuDriverGetVersion(&mut v) };
    f.insert(
        "driver.cuda-version".into(),
        match check(cuda, "cuDriverGetVersion") {
            Ok(()) => Field::Value(format!("{}.{}", v / 1000, (v % 1000) / 10)),
            Err(e) => Field::Unavailable(e.to_string()),
        },
    );
    let library = loaded_library_path("libcuda.so");
    let version = proc_version
        .as_deref()
        .and_then(parse_proc_version)
        // Without /proc (some containers), the real file name carries the version:
        // libcuda.so.580.159.04. A file named by its soname (libcuda.so.1) carries none.
        .or_else(|| {
            library
                .as_deref()
                .and_then(|p| p.rsplit_once("libcuda.so."))
                .map(|(_, v)| v.to_string())
                .filter(|v| is_driver_version(v))
        });
    f.insert(
        "driver.version".into(),
        version.map_or_else(
            || Field::Unavailable("cannot read /proc/driver/nvidia/version".into()),
            Field::Value,
        ),
    );
    f.insert(
        "driver.library".into(),
        library.map_or_else(
            || Field::Unavailable("not found in /proc/self/maps".into()),
            Field::Value,
        ),
    );
    f
}

/// The driver probe from the per-boot cache, or probed (and cached) on a miss.
///
/// `cuDriverGetVersion` needs libcuda loaded, and loading it (tens of megabytes, relocated)
/// costs milliseconds that `env check` should not pay each time. Which library the loader
/// finds depends on the boot and the loaded driver ([`cache_key`]) and on the loader's
/// inputs: `LD_LIBRARY_PATH`, repro's own search list, the loader's cache
/// (`/etc/ld.so.cache`) and the program itself (a Nix-built repro has its own loader). The
/// answer is cached under all of them, and a hit is used only while the library file is
/// still the one that answered (path, size, modification time, inode).
pub fn probe_driver_cached(fresh: bool) -> Fields {
    let (Some(key), Some(path)) = (driver_cache_key(), cache_path_named("driver.json")) else {
        return probe_driver();
    };
    if !fresh
        && let Some(mut hit) = read_cache(&path, &key)
        && let Some(Field::Value(stamp)) = hit.remove("stamp")
        && hit
            .get("driver.library")
            .and_then(Field::value)
            .and_then(file_stamp)
            .is_some_and(|now| now == stamp)
    {
        return hit;
    }
    let fields = probe_driver();
    if let Some(stamp) = fields
        .get("driver.library")
        .and_then(Field::value)
        .and_then(file_stamp)
    {
        let mut stored = fields.clone();
        stored.insert("stamp".into(), Field::Value(stamp));
        write_cache(&path, &key, &stored);
    }
    fields
}

/// The driver cache's key: [`cache_key`] and what decides which libcuda the loader finds.
fn driver_cache_key() -> Option<String> {
    let var = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
    let ld_cache = std::fs::metadata("/etc/ld.so.cache")
        .ok()
        .and_then(|m| m.modified().ok())
        .map(|t| format!("{t:?}"));
    // The repro binary is in cache_key already.
    Some(format!(
        "{} LD_LIBRARY_PATH {:?} REPRO_DRIVER_LIB_DIRS {:?} ld.so.cache {ld_cache:?}",
        cache_key()?,
        var("LD_LIBRARY_PATH"),
        var("REPRO_DRIVER_LIB_DIRS"),
    ))
}

/// What identifies a file's content without reading it: path, size, mtime and inode.
fn file_stamp(path: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(format!(
        "{path}|{}|{}.{}|{}",
        m.len(),
        m.mtime(),
        m.mtime_nsec(),
        m.ino()
    ))
}

/// Whether `v` reads as a driver version: digits and dots, with a dot (`580.159.04`).
fn is_driver_version(v: &str) -> bool {
    v.contains('.') && v.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// The loaded kernel module's version (`580.159.04`), if a driver is loaded.
pub fn loaded_driver_version() -> Option<String> {
    parse_proc_version(&std::fs::read_to_string(module_version_file()).ok()?)
}

/// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..." → "580.159.04".
pub fn parse_proc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    line.split_whitespace()
        .find(|t| is_driver_version(t))
        .map(str::to_string)
}

/// The path of a loaded shared library whose file name starts with `prefix`.
pub fn loaded_library_path(prefix: &str) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            p.rsplit('/')
                .next()
                .is_some_and(|name| name.starts_with(prefix))
        })
        .map(str::to_string)
}

/// What identifies a valid cache of device attributes: the boot, the loaded driver, which
/// devices this process is given (the variables CUDA, the container runtime and Slurm set:
/// two jobs of one node each see their own GPU as device 0, but Slurm names it in
/// `SLURM_STEP_GPUS`; and the GPU device nodes it can see), and the repro binary that wrote
/// it (a replaced binary may probe otherwise). Not the control group: every terminal of a
/// desktop session can have its own, and the cache holds one answer.
pub fn cache_key() -> Option<String> {
    // Read once per process: a check asks for it from each cache it reads (driver, devices,
    // NVML, peaks), and nothing it depends on changes while repro runs.
    static KEY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    KEY.get_or_init(read_cache_key).clone()
}

fn read_cache_key() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let driver = loaded_driver_version()?;
    let var =
        |k: &str| std::env::var(k).map_or_else(|_| "<unset>".to_string(), |v| format!("={v}"));
    let vars: Vec<String> = [
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_VISIBLE_DEVICES",
        "SLURM_JOB_GPUS",
        "SLURM_STEP_GPUS",
        "GPU_DEVICE_ORDINAL",
    ]
    .iter()
    .map(|k| format!("{k}{}", var(k)))
    .collect();
    let mut nodes: Vec<String> = std::fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("nvidia"))
                .collect()
        })
        .unwrap_or_default();
    nodes.sort();
    let exe = std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| file_stamp(&p.to_string_lossy()));
    Some(format!(
        "boot {} driver {driver} {} dev {} exe {exe:?}",
        boot.trim(),
        vars.join(" "),
        nodes.join(","),
    ))
}

/// The device cache's key, for other facts that hold for as long as the device attributes
/// do (the measured peaks of `engines::roofline`).
pub fn device_cache_key() -> Option<String> {
    cache_key()
}

fn cache_path() -> Option<std::path::PathBuf> {
    cache_path_named("gpu-devices.json")
}

fn cache_path_named(name: &str) -> Option<std::path::PathBuf> {
    Some(fsutil::cache_dir()?.join(name))
}

/// The per-boot cache files' schema (`fsutil`'s keyed cache of field sets; 3 since the
/// container became the one all caches share, 2 was the same shape with `fields`).
const CACHE_SCHEMA: u32 = 3;

/// Reads cached fields if they were written under `key`.
pub fn read_cache(path: &std::path::Path, key: &str) -> Option<Fields> {
    let fields: std::collections::BTreeMap<String, String> =
        fsutil::read_keyed(path, CACHE_SCHEMA, key)?;
    Some(
        fields
            .into_iter()
            .map(|(k, v)| (k, Field::Value(v)))
            .collect(),
    )
}

/// Writes fields under `key`, first, keeping the most recent other keys. Only complete
/// answers (every field a value) are cached.
pub fn write_cache(path: &std::path::Path, key: &str, fields: &Fields) {
    let values: Option<std::collections::BTreeMap<String, String>> = fields
        .iter()
        .map(|(k, f)| Some((k.clone(), f.value()?.to_string())))
        .collect();
    if let Some(fields) = values {
        fsutil::write_keyed(path, CACHE_SCHEMA, key, fields);
    }
}

/// Device attributes from the per-boot cache, or probed (and cached) on a miss.
///
/// `cuInit` costs about 175 ms on an H200 while everything else `env check` needs costs
/// a few milliseconds. Device attributes (model, compute capability, SMs, memory, L2) cannot
/// change while the same driver stays loaded, so they are cached per boot and driver.
pub fn probe_devices_cached() -> Fields {
    let (Some(key), Some(path)) = (cache_key(), cache_path()) else {
        return probe_devices();
    };
    if let Some(hit) = read_cache(&path, &key) {
        return hit;
    }
    let fields = probe_devices();
    write_cache(&path, &key, &fields);
    fields
}

/// Probes every device CUDA can see (runs `cuInit`), refreshing the per-boot cache.
pub fn probe_devices_fresh() -> Fields {
    let fields = probe_devices();
    if let (Some(key), Some(path)) = (cache_key(), cache_path()) {
        write_cache(&path, &key, &fields);
    }
    fields
}

/// Probes every device CUDA can see.
fn probe_devices() -> Fields {
    let mut f = Fields::new();
    if !driver_present() {
        f.insert("gpu".into(), Field::Unavailable(NO_DRIVER.into()));
        return f;
    }
    match devices() {
        Ok(devs) => {
            f.insert("gpu.count".into(), Field::Value(devs.len().to_string()));
            for (i, dev) in devs.into_iter().enumerate() {
                for (k, v) in dev {
                    f.insert(format!("gpu.devices.{i}.{k}"), v);
                }
            }
        }
        Err(e) => {
            f.insert("gpu".into(), Field::Unavailable(e.to_string()));
        }
    }
    f
}

fn devices() -> Result<Vec<Vec<(&'static str, Field)>>, CudaError> {
    // SAFETY: the driver library is present (checked by the caller); every pointer passed
    // below points to a live local of the right type and size.
    unsafe {
        let r = sys::cuInit(0);
        if r == CUresult::CUDA_ERROR_NO_DEVICE {
            return Err(CudaError::NoDevice);
        }
        check(r, "cuInit")?;
        let mut count: c_int = 0;
        check(sys::cuDeviceGetCount(&mut count), "cuDeviceGetCount")?;
        let mut out = Vec::new();
        for ordinal in 0..count {
            let mut dev = 0;
            check(sys::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
            let attr = |a: Attr| -> Result<i64, CudaError> {
                let mut v: c_int = 0;
                check(
                    sys::cuDeviceGetAttribute(&mut v, a, dev),
                    "cuDeviceGetAttribute",
                )?;
                Ok(i64::from(v))
            };
            let field = |r: Result<String, CudaError>| {
                r.map_or_else(|e| Field::Unavailable(e.to_string()), Field::Value)
            };
            let mut d = Vec::new();
            let mut name = [0 as c_char; 256];
            d.push((
                "name",
                field(
                    check(
                        sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev),
                        "cuDeviceGetName",
                    )
                    .map(|()| CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned()),
                ),
            ));
            let cc = attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).and_then(|maj| {
                Ok(format!(
                    "{maj}.{}",
                    attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
                ))
            });
            d.push(("compute-capability", field(cc)));
            d.push((
                "sm-count",
                field(attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map(|v| v.to_string())),
            ));
            let mut bytes = 0usize;
            d.push((
                "memory-mib",
                field(
                    check(
                        sys::cuDeviceTotalMem_v2(&mut bytes, dev),
                        "cuDeviceTotalMem",
                    )
                    .map(|()| (bytes >> 20).to_string()),
                ),
            ));
            d.push((
                "l2-cache-kib",
                field(attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).map(|v| (v >> 10).to_string())),
            ));
            d.push((
                "max-shared-memory-per-block-kib",
                field(
                    attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                        .map(|v| (v >> 10).to_string()),
                ),
            ));
            let mut uuid: sys::CUuuid = std::mem::zeroed();
            d.push((
                "uuid",
                field(
                    check(sys::cuDeviceGetUuid_v2(&mut uuid, dev), "cuDeviceGetUuid")
                        .map(|()| format_uuid(&uuid.bytes.map(|b| b as u8))),
                ),
            ));
            let mut pci = [0 as c_char; 64];
            d.push((
                "pci-bus-id",
                field(
                    check(
                        sys::cuDeviceGetPCIBusId(pci.as_mut_ptr(), 64, dev),
                        "cuDeviceGetPCIBusId",
                    )
                    .map(|()| CStr::from_ptr(pci.as_ptr()).to_string_lossy().into_owned()),
                ),
            ));
            out.push(d);
        }
        Ok(out)
    }
}

/// Formats 16 bytes as NVML does: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn format_uuid(b: &[u8; 16]) -> String {
    let h = hex::encode(b);
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_version() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 2025\nGCC version:  gcc version 12.2.0\n";
        assert_eq!(parse_proc_version(text).as_deref(), Some("580.159.04"));
        assert_eq!(parse_proc_version("garbage"), None);
    }

    #[test]
    fn a_driver_version_has_digits_and_a_dot() {
        assert!(is_driver_version("580.159.04"));
        assert!(is_driver_version("535.104.05"));
        // The soname's number, a file name's leftovers: not a version.
        assert!(!is_driver_version("1"));
        assert!(!is_driver_version("580.159.04.bak-x"));
        assert!(!is_driver_version(""));
    }

    #[test]
    fn formats_uuid_like_nvml() {
        let b: [u8; 16] = core::array::from_fn(|i| i as u8);
        assert_eq!(format_uuid(&b), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
    }

    #[test]
    fn cache_hits_only_under_the_same_key_and_only_complete_answers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.json");
        let mut f = Fields::new();
        f.insert("gpu.count".into(), Field::Value("1".into()));
        write_cache(&path, "boot a", &f);
        assert_eq!(read_cache(&path, "boot a"), Some(f.clone()));
        assert_eq!(read_cache(&path, "boot b"), None);
        f.insert("gpu".into(), Field::Unavailable("no device".into()));
        write_cache(&path, "boot c", &f);
        assert_eq!(read_cache(&path, "boot c"), None);
    }

    #[test]
    fn no_driver_is_unavailable_not_a_panic() {
        // On CI there is no driver: both probes must say so cleanly. On a GPU machine they
        // must produce values instead; either way nothing panics.
        let d = probe_driver();
        let g = probe_devices();
        if driver_present() {
            assert!(g.contains_key("gpu.count"));
        } else {
            assert_eq!(d.get("driver").and_then(|f| f.value()), None);
            assert!(matches!(g.get("gpu"), Some(Field::Unavailable(_))));
        }
    }
}
