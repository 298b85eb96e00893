//! GPU state through NVML (`libnvidia-ml.so.1`, loaded at run time): ECC, persistence,
//! MIG, power limit, clocks, temperature, VBIOS and other processes.
//!
//! NVML numbers devices by PCI order and ignores `CUDA_VISIBLE_DEVICES`, so its answers are
//! keyed by UUID and merged into the CUDA device list afterwards.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};

use crate::foundation::fields::{Field, Fields};
use crate::foundation::fields::{Probe, SPECS};

/// Opens NVML by its versioned name: machines with only the driver have no unversioned symlink.
pub fn open() -> Result<Nvml, nvml_wrapper::error::NvmlError> {
    crate::foundation::driverlib::ensure_one("libnvidia-ml.so.1");
    Nvml::builder()
        .lib_path("libnvidia-ml.so.1".as_ref())
        .init()
}

/// Every NVML field, by its name under `gpu.` (`ecc`, `vbios`, ...), in registry order.
pub fn all_names() -> Vec<&'static str> {
    SPECS
        .iter()
        .filter(|s| s.probe == Probe::Nvml)
        .map(|s| &s.key["gpu.".len()..])
        .collect()
}

/// NVML fields that cannot change while the same driver stays loaded on the same boot:
/// the VBIOS and the hardware's maximum clocks are the board's. They are cached per boot
/// like the CUDA device attributes; the ECC mode (a new one takes effect at a GPU reset,
/// which no cheap signal tells), the settings an administrator can change at any time
/// (persistence mode, MIG mode, the power limit) and the volatile readings are always asked
/// afresh. On Hopper every NVML query is a call into the GPU's firmware that
/// costs about a millisecond, so `env check` asks only for what its lockfile checks.
pub const PER_BOOT: [&str; 3] = ["max-sm-clock-mhz", "max-mem-clock-mhz", "vbios"];

/// Probes every NVML device for the fields named in `wanted` (names under `gpu.`); keys are
/// `nvml.<uuid>.<field>`, or `nvml` when unavailable. Fields in [`PER_BOOT`] come from the
/// per-boot cache unless `fresh`; NVML is not opened at all when the cache answers every
/// wanted field.
pub fn probe(wanted: &[&str], fresh: bool) -> Fields {
    let cache = if fresh {
        None
    } else {
        super::cuda::cache_key()
            .zip(crate::foundation::fsutil::cache_dir().map(|d| d.join("gpu-nvml.json")))
    };
    let wants_boot = wanted.iter().any(|n| PER_BOOT.contains(n));
    let live: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|n| !PER_BOOT.contains(n))
        .collect();
    let hit = cache
        .as_ref()
        .filter(|_| wants_boot)
        .and_then(|(key, path)| super::cuda::read_cache(path, key));
    if let Some(hit) = &hit
        && live.is_empty()
    {
        return only(hit.clone(), wanted);
    }
    // Ask NVML for the live fields, and for the per-boot ones (all of them, to fill the
    // cache) only when the cache did not answer.
    let asked: Vec<&str> = if hit.is_some() || !wants_boot {
        live
    } else {
        live.into_iter().chain(PER_BOOT).collect()
    };
    let mut f = query(&asked);
    match hit {
        Some(hit) => f.extend(hit),
        None if wants_boot && !f.contains_key("nvml") => {
            if let Some((key, path)) = &cache {
                let boot: Fields = f
                    .iter()
                    .filter(|(k, _)| PER_BOOT.iter().any(|n| k.ends_with(&format!(".{n}"))))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                super::cuda::write_cache(path, key, &boot);
            }
        }
        None => {}
    }
    only(f, wanted)
}

/// The fields of `f` that are wanted (and the whole-probe `nvml` marker).
fn only(f: Fields, wanted: &[&str]) -> Fields {
    f.into_iter()
        .filter(|(k, _)| {
            k == "nvml"
                || k.rsplit_once('.')
                    .is_some_and(|(_, name)| wanted.contains(&name))
        })
        .collect()
}

/// Opens NVML and asks every device for the named fields. NVML is not shut down afterwards
/// (`nvmlShutdown` detaches every GPU: 3.5 ms of a 25 ms start-up on an H100): the handle is
/// kept for the life of the process, whose exit releases it, and a later start in the same
/// process only counts one more user of the already started library.
/// (Starting it with `NVML_INIT_FLAG_NO_ATTACH` was measured there too: NVML then lists no
/// device, so the live fields could not be read.)
fn query(names: &[&str]) -> Fields {
    let mut f = Fields::new();
    let nvml = match open() {
        Ok(n) => std::mem::ManuallyDrop::new(n),
        Err(e) => {
            let reason = match e {
                nvml_wrapper::error::NvmlError::LibloadingError(_) => {
                    "NVML not found (libnvidia-ml.so.1)".to_string()
                }
                other => format!("NVML failed to start: {other}"),
            };
            f.insert("nvml".into(), Field::Unavailable(reason));
            return f;
        }
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            f.insert(
                "nvml".into(),
                Field::Unavailable(format!("NVML device count failed: {e}")),
            );
            return f;
        }
    };
    let nvml: &Nvml = &nvml;
    let device = |i: u32| -> Fields {
        let mut f = Fields::new();
        let Ok(dev) = nvml.device_by_index(i) else {
            return f;
        };
        let Ok(uuid) = dev.uuid() else { return f };
        for name in names {
            f.insert(format!("nvml.{uuid}.{name}"), field(&dev, name));
        }
        f
    };
    // Each device's first handle and its fields are calls into that GPU's firmware (about
    // 12 ms a device on an H200), which the driver answers for two devices side by side:
    // a thread per device (two H200s: 24.8 -> 18.4 ms, `benches/nvml_start.py
    // --every-device [--parallel]`). A device whose thread cannot start is asked on this
    // one; a thread that panicked leaves NVML's answer unavailable as a whole (and so
    // uncached), not one device silently unlisted.
    if count <= 1 {
        (0..count).for_each(|i| f.extend(device(i)));
        return f;
    }
    let mut failed = false;
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..count)
            .map(|i| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || device(i))
                    .map_err(|_| i)
            })
            .collect();
        for t in threads {
            match t {
                Ok(handle) => match handle.join() {
                    Ok(one) => f.extend(one),
                    Err(_) => failed = true,
                },
                Err(i) => f.extend(device(i)),
            }
        }
    });
    if failed {
        f.insert(
            "nvml".into(),
            Field::Unavailable("NVML's probe of a device failed (a thread panicked)".into()),
        );
    }
    f
}

/// One NVML field of one device.
fn field(dev: &nvml_wrapper::Device, name: &str) -> Field {
    let r = match name {
        "ecc" => dev
            .is_ecc_enabled()
            .map(|s| s.currently_enabled.to_string()),
        "persistence-mode" => dev.is_in_persistent_mode().map(|b| b.to_string()),
        "mig-mode" => dev.mig_mode().map(|m| (m.current == 1).to_string()),
        "power-limit-w" => dev.enforced_power_limit().map(|mw| (mw / 1000).to_string()),
        "max-sm-clock-mhz" => dev.max_clock_info(Clock::SM).map(|v| v.to_string()),
        "max-mem-clock-mhz" => dev.max_clock_info(Clock::Memory).map(|v| v.to_string()),
        "vbios" => dev.vbios_version(),
        "sm-clock-mhz" => dev.clock_info(Clock::SM).map(|v| v.to_string()),
        "mem-clock-mhz" => dev.clock_info(Clock::Memory).map(|v| v.to_string()),
        "temperature-c" => dev
            .temperature(TemperatureSensor::Gpu)
            .map(|v| v.to_string()),
        "other-processes" => {
            let own_pid = std::process::id();
            dev.running_compute_processes()
                .map(|ps| ps.iter().filter(|p| p.pid != own_pid).count().to_string())
        }
        other => return Field::Unavailable(format!("no NVML field `{other}`")),
    };
    r.map_or_else(|e| Field::Unavailable(e.to_string()), Field::Value)
}

/// Moves NVML answers onto the CUDA devices with the same UUID. Devices NVML did not
/// report (or all of them, when NVML is unavailable) get each NVML field as unavailable.
pub fn merge(fields: &mut Fields, nvml: Fields, wanted: &[&str]) {
    let whole = nvml.get("nvml").cloned();
    let count = fields
        .get("gpu.count")
        .and_then(|c| c.value()?.parse::<usize>().ok())
        .unwrap_or(0);
    for i in 0..count {
        let uuid = fields
            .get(&format!("gpu.devices.{i}.uuid"))
            .and_then(|u| u.value().map(str::to_string));
        for spec in SPECS.iter().filter(|s| s.probe == Probe::Nvml) {
            let name = &spec.key["gpu.".len()..];
            if !wanted.contains(&name) {
                continue;
            }
            let value = match (&whole, &uuid) {
                (Some(w), _) => w.clone(),
                (None, Some(u)) => nvml
                    .get(&format!("nvml.{u}.{name}"))
                    .cloned()
                    .unwrap_or_else(|| Field::Unavailable("NVML does not list this device".into())),
                (None, None) => Field::Unavailable("the device's UUID is unknown".into()),
            };
            fields.insert(spec.device_key(i), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_by_uuid_not_by_index() {
        let mut fields = Fields::new();
        fields.insert("gpu.count".into(), Field::Value("2".into()));
        fields.insert("gpu.devices.0.uuid".into(), Field::Value("GPU-b".into()));
        fields.insert("gpu.devices.1.uuid".into(), Field::Value("GPU-a".into()));
        let mut nvml = Fields::new();
        nvml.insert("nvml.GPU-a.ecc".into(), Field::Value("true".into()));
        nvml.insert("nvml.GPU-b.ecc".into(), Field::Value("false".into()));
        merge(&mut fields, nvml, &all_names());
        assert_eq!(fields["gpu.devices.0.ecc"], Field::Value("false".into()));
        assert_eq!(fields["gpu.devices.1.ecc"], Field::Value("true".into()));
    }

    #[test]
    fn unavailable_nvml_marks_every_device() {
        let mut fields = Fields::new();
        fields.insert("gpu.count".into(), Field::Value("1".into()));
        let mut nvml = Fields::new();
        nvml.insert("nvml".into(), Field::Unavailable("NVML not found".into()));
        merge(&mut fields, nvml, &all_names());
        assert_eq!(
            fields["gpu.devices.0.vbios"],
            Field::Unavailable("NVML not found".into())
        );
    }
}
