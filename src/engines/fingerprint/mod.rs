//! Fingerprints: a versioned record of the machine and the repository, in milliseconds.
//!
//! A fingerprint is a flat map of dotted keys (see [`crate::foundation::fields`]) to values. Each probe
//! (one per source: GPU, driver, toolchain, host, git, nix, environment) runs in its own
//! thread with its own time budget, and a probe that cannot answer records why
//! (`unavailable`) instead of failing the capture. The JSON form nests the keys into
//! sections and is the stable, versioned machine form (`schema = 1`).

pub mod cuda;
pub mod host;
pub mod nix;
pub mod nvml;
pub mod python;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;

use crate::foundation::fields::{self, Probe};
pub use crate::foundation::fields::{Field, Fields};
use crate::foundation::git;
#[cfg(test)]
use crate::foundation::version::version_token;

// The type, its JSON form and its checks live in foundation, so that records (results,
// bundles, replay) hold a typed fingerprint; capturing one is this module's.
pub use crate::foundation::fingerprint::{Fingerprint, FingerprintFileError};

/// Everything a capture needs to know about where it runs.
#[derive(Clone, Debug)]
pub struct Context {
    /// The directory repro acts in (after `-C`).
    pub cwd: PathBuf,
    /// Probe GPU devices afresh (`cuInit`) instead of using the per-boot cache.
    pub fresh: bool,
    /// `--python`: the interpreter to describe (absolute); `None` chooses as
    /// [`crate::foundation::pyenv::locate`] does.
    pub python: Option<PathBuf>,
}

/// Which probes to run, and which NVML fields to ask for (each NVML query costs about a
/// millisecond on Hopper, so a check asks only for the fields its lockfile checks).
#[derive(Clone, Debug, Default)]
pub struct Demand {
    probes: BTreeSet<Probe>,
    nvml: BTreeSet<&'static str>,
    /// GPU settings ([`nvml::SETTINGS`]) that a recent reading may answer.
    reuse: BTreeSet<&'static str>,
}

impl Demand {
    /// Every probe: what `env capture` and `env lock` run.
    pub fn all() -> Self {
        Demand {
            probes: fields::SPECS
                .iter()
                .map(|s| s.probe)
                .chain([Probe::Env])
                .collect(),
            nvml: nvml::all_names().into_iter().collect(),
            reuse: BTreeSet::new(),
        }
    }
    /// Only the probes needed to answer these lockfile keys.
    pub fn for_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut d = Demand::default();
        for key in keys {
            let probe = fields::probe_of(key);
            if probe == Probe::Nvml
                && let Some(spec) = fields::lookup(key)
            {
                d.nvml.insert(&spec.key["gpu.".len()..]);
            }
            d.probes.insert(probe);
        }
        // NVML results are matched to CUDA devices by UUID, so NVML needs the CUDA probe.
        if d.probes.contains(&Probe::Nvml) {
            d.probes.insert(Probe::CudaDevices);
        }
        d
    }
    /// Lets a reading of these GPU settings (lockfile keys such as `gpu.ecc`; others are
    /// left out) at most [`nvml::SETTINGS_MAX_AGE`] old answer instead of NVML, when
    /// nothing else needs NVML started.
    pub fn reusing_settings<'a>(mut self, keys: impl IntoIterator<Item = &'a str>) -> Self {
        self.reuse
            .extend(keys.into_iter().filter_map(nvml::setting_of));
        self
    }
    /// Whether a probe is demanded.
    pub fn has(&self, p: Probe) -> bool {
        self.probes.contains(&p)
    }
    /// The NVML fields demanded (names under `gpu.`).
    pub fn nvml_fields(&self) -> Vec<&'static str> {
        self.nvml.iter().copied().collect()
    }
}

/// A probe to run: its name (`probe-ms`'s key) and the work.
type Job<'a> = (String, Box<dyn FnOnce() -> Fields + Send + 'a>);

/// Runs the demanded probes in parallel and assembles the fingerprint.
pub fn capture(ctx: &Context, demand: &Demand) -> Fingerprint {
    capture_noting_reuse(ctx, demand).0
}

/// [`capture`], and when the GPU settings in it were read if a recent reading answered
/// for them ([`Demand::reusing_settings`]); `None` when they were read now or not at all.
pub fn capture_noting_reuse(
    ctx: &Context,
    demand: &Demand,
) -> (Fingerprint, Option<std::time::SystemTime>) {
    let nvml_wanted = demand.nvml_fields();
    let (mut fields, probe_ms, nvml_fields) = run_jobs(probe_jobs(ctx, demand));
    let mut read_at = None;
    if let Some(mut nvml) = nvml_fields {
        read_at = nvml::take_settings_read_at(&mut nvml);
        nvml::merge(&mut fields, nvml, &nvml_wanted);
    }
    let fp = Fingerprint {
        repro_version: env!("CARGO_PKG_VERSION").to_string(),
        captured_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        probe_ms,
        fields,
    };
    (fp, read_at)
}

/// The demanded probes, each as a job.
fn probe_jobs<'a>(ctx: &'a Context, demand: &'a Demand) -> Vec<Job<'a>> {
    let repo_root = git::discover_root(&ctx.cwd);
    let project_root = repo_root.clone().unwrap_or_else(|| ctx.cwd.clone());
    // The toolchain fields report what this project's builds would use, which its pins
    // decide. A repro.toml that cannot be read pins nothing here; the commands that use
    // the pins report it.
    let config = crate::foundation::config::load(&project_root).unwrap_or_default();
    let pins = crate::engines::toolchain::Pins::of(&config.toolchain);
    let python_config = config.python.interpreter_at(&project_root);
    let mut jobs: Vec<Job<'a>> = Vec::new();
    let d = |p| demand.has(p);

    // The CUDA device probe and NVML both take tens of milliseconds on a real GPU machine;
    // they run side by side and are merged by UUID afterwards.
    if d(Probe::CudaDevices) {
        if ctx.fresh {
            jobs.push(("cuda".into(), Box::new(cuda::probe_devices_fresh)));
        } else {
            jobs.push(("cuda".into(), Box::new(cuda::probe_devices_cached)));
        }
    }
    if d(Probe::Driver) {
        let fresh = ctx.fresh;
        jobs.push((
            "driver".into(),
            Box::new(move || cuda::probe_driver_cached(fresh)),
        ));
    }
    if d(Probe::Nvml) {
        let wanted = demand.nvml_fields();
        let reuse: Vec<&str> = demand.reuse.iter().copied().collect();
        let fresh = ctx.fresh;
        jobs.push((
            "nvml".into(),
            Box::new(move || nvml::probe(&wanted, &reuse, fresh)),
        ));
    }
    if d(Probe::Nvrtc) {
        let pins = pins.clone();
        jobs.push(("nvrtc".into(), Box::new(move || probe_nvrtc_cached(&pins))));
    }
    if d(Probe::Nvcc) {
        let pins = pins.clone();
        jobs.push(("nvcc".into(), Box::new(move || probe_nvcc_cached(&pins))));
    }
    if d(Probe::Host) {
        jobs.push(("host".into(), Box::new(host::probe)));
    }
    for spec in fields::SPECS {
        if let Probe::Tool(tool) = spec.probe
            && d(spec.probe)
        {
            let key = spec.key;
            jobs.push((
                format!("tool:{tool}"),
                Box::new(move || host::probe_tool_cached(key, tool)),
            ));
        }
    }
    if d(Probe::Git) {
        let cwd = ctx.cwd.clone();
        jobs.push(("git".into(), Box::new(move || git::probe(&cwd))));
    }
    if d(Probe::Nix) {
        let root = project_root.clone();
        jobs.push(("nix".into(), Box::new(move || nix::probe(&root))));
    }
    if d(Probe::NixVersion) {
        jobs.push(("nix-version".into(), Box::new(nix::probe_version)));
    }
    if d(Probe::Env) {
        jobs.push(("env".into(), Box::new(probe_env)));
    }
    if d(Probe::Python) {
        let flag = ctx.python.clone();
        jobs.push((
            "python".into(),
            Box::new(move || python::probe(flag.as_deref(), python_config.as_deref())),
        ));
    }

    jobs
}

/// Runs the jobs side by side: the fields of all but NVML, each probe's milliseconds, and
/// NVML's answers (merged onto the CUDA devices by UUID afterwards).
fn run_jobs(jobs: Vec<Job<'_>>) -> (Fields, BTreeMap<String, f64>, Option<Fields>) {
    let mut fields = Fields::new();
    let mut probe_ms = BTreeMap::new();
    let mut nvml_fields = None;
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(name, job)| {
                let h = scope.spawn(move || {
                    let start = Instant::now();
                    let out = job();
                    (out, start.elapsed().as_secs_f64() * 1e3)
                });
                (name, h)
            })
            .collect();
        for (name, h) in handles {
            let (out, ms) = h.join().unwrap_or_else(|_| {
                let mut f = Fields::new();
                f.insert(
                    format!("probe.{name}"),
                    Field::Unavailable("the probe panicked".into()),
                );
                (f, 0.0)
            });
            probe_ms.insert(name.clone(), (ms * 1000.0).round() / 1000.0);
            if name == "nvml" {
                nvml_fields = Some(out);
            } else {
                fields.extend(out);
            }
        }
    });
    (fields, probe_ms, nvml_fields)
}

/// The NVRTC fields, without loading NVRTC when the same library answered before: loading
/// it (about 100 MB with its builtins) costs more than the rest of `env check`. The answer
/// is cached under the library's path, size, modification time and inode (the stamp build
/// keys use for its identity), so another or a replaced library is loaded and asked again.
fn probe_nvrtc_cached(pins: &crate::engines::toolchain::Pins) -> Fields {
    use std::os::unix::fs::MetadataExt;
    let stamp = crate::engines::toolchain::find_nvrtc(pins)
        .ok()
        .and_then(|found| {
            let meta = std::fs::metadata(&found.path).ok()?;
            Some(format!(
                "{}|{}|{}|{}|{}",
                found.path.display(),
                found.source,
                meta.len(),
                meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
                meta.ino()
            ))
        });
    let path = crate::foundation::fsutil::cache_dir().map(|d| d.join("nvrtc-version.json"));
    let (Some(stamp), Some(path)) = (stamp, path) else {
        return crate::engines::toolchain::probe_nvrtc(pins);
    };
    if let Some(hit) = cuda::read_cache(&path, &stamp) {
        return hit;
    }
    let fields = crate::engines::toolchain::probe_nvrtc(pins);
    cuda::write_cache(&path, &stamp, &fields);
    fields
}

/// The nvcc fields. The project's pinned nvcc, when installed, answers from its install
/// stamp; otherwise the machine's nvcc would be started (`nvcc --version`, a few
/// milliseconds), so its answer is cached under the binary found (its path, the file it
/// resolves to, size, times and inode): another or a replaced nvcc is asked again.
fn probe_nvcc_cached(pins: &crate::engines::toolchain::Pins) -> Fields {
    if let Some(f) = crate::engines::toolchain::probe_pinned_nvcc(pins) {
        return f;
    }
    let found = crate::engines::toolchain::find_nvcc();
    let stamp = found.as_deref().and_then(host::file_stamp);
    let path = crate::foundation::fsutil::cache_dir().map(|d| d.join("nvcc-version.json"));
    let (Some(found), Some(stamp), Some(path)) = (found, stamp, path) else {
        return crate::engines::toolchain::probe_nvcc(pins);
    };
    let at = Field::Value(found.display().to_string());
    if let Some(hit) = cuda::read_cache(&path, &stamp)
        && hit.get("toolchain.nvcc.path") == Some(&at)
    {
        return hit;
    }
    let fields = crate::engines::toolchain::probe_nvcc(pins);
    // Only the answer of the nvcc the stamp names, and only a version (a failed or timed
    // out run is asked again next time).
    if fields.get("toolchain.nvcc.path") == Some(&at)
        && fields
            .get("toolchain.nvcc.version")
            .is_some_and(|v| v.value().is_some())
    {
        cuda::write_cache(&path, &stamp, &fields);
    }
    fields
}

fn probe_env() -> Fields {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let k = k.into_string().ok()?;
            fields::env_allowed(&k).then(|| {
                (
                    format!("env.{k}"),
                    Field::Value(v.to_string_lossy().into_owned()),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foundation::fingerprint::SCHEMA;
    use serde_json::Value;

    fn sample() -> Fingerprint {
        let mut fields = Fields::new();
        for (k, v) in [
            ("gpu.count", "2"),
            ("gpu.devices.0.name", "NVIDIA H200"),
            ("gpu.devices.1.name", "NVIDIA H200"),
            ("gpu.devices.0.ecc", "true"),
            ("driver.version", "580.159.04"),
            ("env.CUDA_VISIBLE_DEVICES", "0,1"),
        ] {
            fields.insert(k.into(), Field::Value(v.into()));
        }
        fields.insert("nix".into(), Field::Unavailable("no flake here".into()));
        Fingerprint {
            repro_version: "0.1.0".into(),
            captured_at: "2026-01-01T00:00:00Z".into(),
            probe_ms: [("gpu".to_string(), 1.5)].into_iter().collect(),
            fields,
        }
    }

    #[test]
    fn json_round_trips_and_is_typed() {
        let fp = sample();
        let json = fp.to_json();
        assert_eq!(json["gpu"]["count"], Value::from(2));
        assert_eq!(
            json["gpu"]["devices"][1]["name"],
            Value::from("NVIDIA H200")
        );
        assert_eq!(json["gpu"]["devices"][0]["ecc"], Value::Bool(true));
        assert_eq!(json["nix"]["unavailable"], Value::from("no flake here"));
        assert_eq!(json["env"]["CUDA_VISIBLE_DEVICES"], Value::from("0,1"));
        assert_eq!(Fingerprint::from_json(&json).unwrap(), fp);
    }

    #[test]
    fn newer_schema_is_refused() {
        let mut json = sample().to_json();
        json["schema"] = Value::from(SCHEMA + 1);
        assert!(
            Fingerprint::from_json(&json)
                .unwrap_err()
                .to_string()
                .contains("newer")
        );
    }

    #[test]
    fn lookup_expands_devices_and_explains_sections() {
        let fp = sample();
        assert_eq!(fp.lookup("gpu.name").len(), 2);
        assert_eq!(
            fp.lookup("nix.flake-lock-digest"),
            vec![Field::Unavailable("no flake here".into())]
        );
        assert_eq!(
            fp.lookup("host.kernel"),
            vec![Field::Unavailable("not probed".into())]
        );
    }

    #[test]
    fn version_tokens() {
        assert_eq!(
            version_token("gcc (Debian 12.2.0-14+deb12u1) 12.2.0").as_deref(),
            Some("12.2.0-14+deb12u1")
        );
        assert_eq!(
            version_token("rustc 1.95.0 (59807616e 2026-04-14)").as_deref(),
            Some("1.95.0")
        );
        assert_eq!(version_token("Python 3.11.7").as_deref(), Some("3.11.7"));
        assert_eq!(
            version_token("Cuda compilation tools, release 13.0, V13.0.88").as_deref(),
            Some("13.0")
        );
        assert_eq!(version_token("nix (Nix) 2.8.0").as_deref(), Some("2.8.0"));
        assert_eq!(version_token("no version here"), None);
    }
}
