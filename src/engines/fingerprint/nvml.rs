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
    crate::foundation::driverlib::ensure();
    Nvml::builder()
        .lib_path("libnvidia-ml.so.1".as_ref())
        .init()
}

/// Probes every NVML device; keys are `nvml.<uuid>.<field>`, or `nvml` when unavailable.
pub fn probe() -> Fields {
    let mut f = Fields::new();
    let nvml = match open() {
        Ok(n) => n,
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
    let own_pid = std::process::id();
    for i in 0..count {
        let Ok(dev) = nvml.device_by_index(i) else {
            continue;
        };
        let Ok(uuid) = dev.uuid() else { continue };
        let field = |r: Result<String, nvml_wrapper::error::NvmlError>| {
            r.map_or_else(|e| Field::Unavailable(e.to_string()), Field::Value)
        };
        let mut put = |k: &str, v: Field| {
            f.insert(format!("nvml.{uuid}.{k}"), v);
        };
        put(
            "ecc",
            field(
                dev.is_ecc_enabled()
                    .map(|s| s.currently_enabled.to_string()),
            ),
        );
        put(
            "persistence-mode",
            field(dev.is_in_persistent_mode().map(|b| b.to_string())),
        );
        put(
            "mig-mode",
            field(dev.mig_mode().map(|m| (m.current == 1).to_string())),
        );
        put(
            "power-limit-w",
            field(dev.enforced_power_limit().map(|mw| (mw / 1000).to_string())),
        );
        put(
            "max-sm-clock-mhz",
            field(dev.max_clock_info(Clock::SM).map(|v| v.to_string())),
        );
        put(
            "max-mem-clock-mhz",
            field(dev.max_clock_info(Clock::Memory).map(|v| v.to_string())),
        );
        put("vbios", field(dev.vbios_version()));
        put(
            "sm-clock-mhz",
            field(dev.clock_info(Clock::SM).map(|v| v.to_string())),
        );
        put(
            "mem-clock-mhz",
            field(dev.clock_info(Clock::Memory).map(|v| v.to_string())),
        );
        put(
            "temperature-c",
            field(
                dev.temperature(TemperatureSensor::Gpu)
                    .map(|v| v.to_string()),
            ),
        );
        put(
            "other-processes",
            field(
                dev.running_compute_processes()
                    .map(|ps| ps.iter().filter(|p| p.pid != own_pid).count().to_string()),
            ),
        );
    }
    f
}

/// Moves NVML answers onto the CUDA devices with the same UUID. Devices NVML did not
/// report (or all of them, when NVML is unavailable) get each NVML field as unavailable.
pub fn merge(fields: &mut Fields, nvml: Fields) {
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
        merge(&mut fields, nvml);
        assert_eq!(fields["gpu.devices.0.ecc"], Field::Value("false".into()));
        assert_eq!(fields["gpu.devices.1.ecc"], Field::Value("true".into()));
    }

    #[test]
    fn unavailable_nvml_marks_every_device() {
        let mut fields = Fields::new();
        fields.insert("gpu.count".into(), Field::Value("1".into()));
        let mut nvml = Fields::new();
        nvml.insert("nvml".into(), Field::Unavailable("NVML not found".into()));
        merge(&mut fields, nvml);
        assert_eq!(
            fields["gpu.devices.0.vbios"],
            Field::Unavailable("NVML not found".into())
        );
    }
}
