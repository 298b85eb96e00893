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
/// like the CUDA device attributes; the [`SETTINGS`] (which no cheap signal says have
/// changed) are reused for at most [`SETTINGS_MAX_AGE`], and only where a check allows it,
/// and the volatile readings are always asked afresh. On Hopper every NVML query is a call
/// into the GPU's firmware that costs about a millisecond, so `env check` asks only for
/// what its lockfile checks.
pub const PER_BOOT: [&str; 3] = ["max-sm-clock-mhz", "max-mem-clock-mhz", "vbios"];

/// The GPU settings: the ECC mode (a new one takes effect at a GPU reset) and what an
/// administrator can change at any time (persistence mode, MIG mode, the power limit).
pub const SETTINGS: [&str; 4] = ["ecc", "persistence-mode", "mig-mode", "power-limit-w"];

/// The setting a lockfile key names (`gpu.ecc` -> `ecc`), if it names one of [`SETTINGS`].
pub fn setting_of(key: &str) -> Option<&'static str> {
    let name = key.strip_prefix("gpu.")?;
    SETTINGS.iter().copied().find(|s| *s == name)
}

/// How old a reading of [`SETTINGS`] a check may reuse instead of starting NVML, which
/// costs about 25 ms before the first field on an H200 (`benches/nvml_start.py`). A
/// setting changed since then shows after this long, or at once with `--fresh`; bench
/// records and `env capture` always read them afresh.
pub const SETTINGS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(300);

/// The key, in a probe's answer, that says when reused settings were read (seconds since
/// the Unix epoch); [`take_settings_read_at`] removes it before the answer is merged.
const READ_AT_KEY: &str = "nvml-settings-read-at";

/// The last reading of [`SETTINGS`], cached under the device cache's key (the boot, the
/// driver, the devices this process is given, the binary) in `gpu-settings.json`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct SettingsReading {
    /// When it was read, in seconds since the Unix epoch (said in the report).
    read_at: u64,
    /// When it was read, in seconds since the boot (the key names the boot): its age, which
    /// a wall clock set back or forward does not change.
    boot_s: u64,
    /// The settings read (names under `gpu.`).
    names: Vec<String>,
    /// `nvml.<uuid>.<name>` to value, for each device NVML listed and answered for. A
    /// device missing from it is unavailable in the fingerprint, so the check warns and
    /// reads the settings again.
    fields: std::collections::BTreeMap<String, String>,
}

/// The seconds since the Unix epoch now.
fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The whole seconds since the boot now (`/proc/uptime`), if they can be read.
fn boot_now() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs = text.split_whitespace().next()?.parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then_some(secs as u64)
}

/// The reading's fields, if it holds every one of `names` and was read at most
/// [`SETTINGS_MAX_AGE`] before `boot` (seconds since the boot) and not after it.
fn reusable(reading: &SettingsReading, names: &[&str], boot: u64) -> Option<Fields> {
    let fresh_enough =
        reading.boot_s <= boot && boot - reading.boot_s <= SETTINGS_MAX_AGE.as_secs();
    let covers = names.iter().all(|n| reading.names.iter().any(|r| r == n));
    (fresh_enough && covers).then(|| {
        let all = reading
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), Field::Value(v.clone())));
        only(all.collect(), names)
    })
}

/// The settings among `asked` that NVML answered, as a reading to cache: only an answer
/// whose every field is a value, of at least one device, and NVML as a whole answered.
fn reading_of(f: &Fields, asked: &[&str], now: u64, boot: u64) -> Option<SettingsReading> {
    let names: Vec<String> = asked
        .iter()
        .filter(|n| SETTINGS.contains(n))
        .map(|n| n.to_string())
        .collect();
    if names.is_empty() || f.contains_key("nvml") {
        return None;
    }
    let fields: Option<std::collections::BTreeMap<String, String>> = f
        .iter()
        .filter(|(k, _)| {
            k.rsplit_once('.')
                .is_some_and(|(_, n)| names.iter().any(|m| m == n))
        })
        .map(|(k, v)| Some((k.clone(), v.value()?.to_string())))
        .collect();
    let fields = fields.filter(|m| !m.is_empty())?;
    Some(SettingsReading {
        read_at: now,
        boot_s: boot,
        names,
        fields,
    })
}

/// Removes the marker of reused settings from a probe's answer: when they were read, if
/// they came from the cache.
pub fn take_settings_read_at(f: &mut Fields) -> Option<std::time::SystemTime> {
    let secs = f.remove(READ_AT_KEY)?.value()?.parse::<u64>().ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// Probes every NVML device for the fields named in `wanted` (names under `gpu.`); keys are
/// `nvml.<uuid>.<field>`, or `nvml` when unavailable. Fields in [`PER_BOOT`] come from the
/// per-boot cache unless `fresh`; NVML is not opened at all when the cache answers every
/// wanted field. When every other wanted field is a setting named in `reuse`, a reading
/// of them at most [`SETTINGS_MAX_AGE`] old answers instead of NVML (and the answer says
/// when it was read); once NVML is started, everything is asked of it.
pub fn probe(wanted: &[&str], reuse: &[&str], fresh: bool) -> Fields {
    // The device cache's key names both caches; `fresh` reads (but still writes) settings.
    let key = super::cuda::cache_key();
    let dir = crate::foundation::fsutil::cache_dir();
    let boot_cache = key
        .clone()
        .filter(|_| !fresh)
        .zip(dir.as_ref().map(|d| d.join("gpu-nvml.json")));
    let settings_cache = key.zip(dir.map(|d| d.join("gpu-settings.json")));
    let wants_boot = wanted.iter().any(|n| PER_BOOT.contains(n));
    let live: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|n| !PER_BOOT.contains(n))
        .collect();
    let hit = boot_cache
        .as_ref()
        .filter(|_| wants_boot)
        .and_then(|(key, path)| super::cuda::read_cache(path, key));
    if let Some(hit) = &hit
        && live.is_empty()
    {
        return only(hit.clone(), wanted);
    }
    if !fresh
        && !live.is_empty()
        && live.iter().all(|n| reuse.contains(n))
        && (hit.is_some() || !wants_boot)
        && let Some((key, path)) = &settings_cache
        && let Some(reading) =
            crate::foundation::fsutil::read_keyed::<SettingsReading>(path, CACHE_SCHEMA, key)
        && let Some(boot) = boot_now()
        && let Some(settings) = reusable(&reading, &live, boot)
    {
        let mut f = only(hit.clone().unwrap_or_default(), wanted);
        f.extend(settings);
        f.insert(
            READ_AT_KEY.into(),
            Field::Value(reading.read_at.to_string()),
        );
        return f;
    }
    // Ask NVML for the live fields, and for the per-boot ones (all of them, to fill the
    // cache) only when the cache did not answer.
    let asked: Vec<&str> = if hit.is_some() || !wants_boot {
        live
    } else {
        live.into_iter().chain(PER_BOOT).collect()
    };
    let mut f = query(&asked);
    if let Some((key, path)) = &settings_cache
        && let Some(boot) = boot_now()
        && let Some(reading) = reading_of(&f, &asked, now_s(), boot)
    {
        crate::foundation::fsutil::write_keyed(path, CACHE_SCHEMA, key, reading);
    }
    match hit {
        Some(hit) => f.extend(hit),
        None if wants_boot && !f.contains_key("nvml") => {
            if let Some((key, path)) = &boot_cache {
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

/// The settings cache's schema (`fsutil`'s keyed cache of [`SettingsReading`]s).
const CACHE_SCHEMA: u32 = 1;

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

    fn reading(boot_s: u64) -> SettingsReading {
        SettingsReading {
            read_at: 1_700_000_000,
            boot_s,
            names: vec!["ecc".into(), "power-limit-w".into()],
            fields: [
                ("nvml.GPU-a.ecc", "true"),
                ("nvml.GPU-a.power-limit-w", "700"),
                ("nvml.GPU-b.ecc", "false"),
                ("nvml.GPU-b.power-limit-w", "700"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }
    }

    #[test]
    fn a_settings_reading_is_reused_only_young_and_whole() {
        let max = SETTINGS_MAX_AGE.as_secs();
        let r = reading(1_000_000);
        let got = reusable(&r, &["ecc"], 1_000_000 + max).unwrap();
        assert_eq!(got.len(), 2, "both devices, only the names asked: {got:?}");
        assert_eq!(got["nvml.GPU-b.ecc"], Field::Value("false".into()));
        assert_eq!(reusable(&r, &["ecc"], 1_000_000 + max + 1), None, "too old");
        assert_eq!(reusable(&r, &["ecc"], 999_999), None, "read in the future");
        assert_eq!(
            reusable(&r, &["ecc", "mig-mode"], 1_000_000),
            None,
            "a setting the reading does not hold"
        );
    }

    #[test]
    fn only_a_whole_answer_of_settings_becomes_a_reading() {
        let mut f = Fields::new();
        f.insert("nvml.GPU-a.ecc".into(), Field::Value("true".into()));
        f.insert("nvml.GPU-a.vbios".into(), Field::Value("96".into()));
        f.insert(
            "nvml.GPU-a.power-limit-w".into(),
            Field::Value("700".into()),
        );
        let r = reading_of(&f, &["ecc", "power-limit-w", "vbios"], 7, 3).unwrap();
        assert_eq!(r.names, vec!["ecc", "power-limit-w"]);
        assert_eq!(r.fields.len(), 2, "{r:?}");
        assert_eq!((r.read_at, r.boot_s), (7, 3));
        assert_eq!(reading_of(&f, &["vbios"], 7, 3), None, "no setting asked");
        f.insert(
            "nvml.GPU-b.ecc".into(),
            Field::Unavailable("not supported".into()),
        );
        assert_eq!(
            reading_of(&f, &["ecc"], 7, 3),
            None,
            "a device did not answer"
        );
        let whole = [(
            "nvml".to_string(),
            Field::Unavailable("NVML not found".into()),
        )];
        assert_eq!(
            reading_of(&whole.into_iter().collect(), &["ecc"], 7, 3),
            None
        );
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
