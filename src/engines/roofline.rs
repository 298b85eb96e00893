//! The one-time calibration behind roofline figures: two kernels of repro's own, built with
//! the project's NVRTC for the device's architecture and run through the GPU runner (the
//! same `repro gpu-job` child that times every bench), give the device's measured peak DRAM
//! bandwidth (the better of a streaming float4 copy, bytes read plus written, and a pure
//! read; four loads in flight per thread, over buffers sixteen times the L2 cache) and peak FP32 throughput (eight independent FMA chains per thread, 2 FLOPs per
//! FMA, enough blocks to fill every SM). The peaks are cached beside the device attributes,
//! under the same key (boot, loaded driver, visible devices) and the device's UUID, so a
//! device is calibrated once per boot; `repro env` shows them and `repro bench` judges each
//! result against them ([`crate::foundation::roofline`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engines::bench;
use crate::engines::build::{self, inputs::Closure};
use crate::engines::gpurun::{Job, SCHEMA, Timing};
use crate::engines::toolchain::Pins;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::fields::{Field, Fields};
use crate::foundation::records::{ArgSpec, LaunchSpec, Mode};
use crate::foundation::roofline::Peaks;
use crate::foundation::runspec::{DType, Init};

/// The calibration kernels. Each result is stored only where a condition no input meets
/// holds, so the compiler keeps the work and the kernels write (almost) nothing.
pub const SOURCE: &str = r#"
extern "C" __global__ void repro_peak_copy(const float4* __restrict__ in, float4* __restrict__ out, long long n) {
    // Four independent 16-byte loads in flight per thread before any store, coalesced.
    long long base = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        long long i = base + (long long)k * blockDim.x;
        if (i < n) v[k] = in[i];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        long long i = base + (long long)k * blockDim.x;
        if (i < n) out[i] = v[k];
    }
}
extern "C" __global__ void repro_peak_read(const float4* __restrict__ in, float* out, long long n) {
    long long base = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        long long i = base + (long long)k * blockDim.x;
        if (i < n) { float4 v = in[i]; s += (v.x + v.y) + (v.z + v.w); }
    }
    if (s == -1.0f) out[threadIdx.x] = s;
}
extern "C" __global__ void repro_peak_fma(float* out, int iters, float seed) {
    float a0 = seed + threadIdx.x, a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
    float a4 = a0 + 4.f, a5 = a0 + 5.f, a6 = a0 + 6.f, a7 = a0 + 7.f;
    const float b = 0.999999f, c = 1e-7f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            a0 = fmaf(a0, b, c); a1 = fmaf(a1, b, c); a2 = fmaf(a2, b, c); a3 = fmaf(a3, b, c);
            a4 = fmaf(a4, b, c); a5 = fmaf(a5, b, c); a6 = fmaf(a6, b, c); a7 = fmaf(a7, b, c);
        }
    }
    float s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
    if (s == -1.0f) out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"#;

/// FMAs per thread per iteration of `repro_peak_fma`'s loop (8 chains, unrolled 16 times).
const FMA_PER_ITER: u64 = 8 * 16;
/// Iterations of the FMA loop.
const FMA_ITERS: u64 = 1024;
/// Threads per block of both kernels.
const THREADS: u32 = 256;
/// Blocks per SM of the FMA kernel (enough to keep every scheduler issuing).
const FMA_BLOCKS_PER_SM: u32 = 16;
/// The bandwidth kernels' buffers: sixteen times the L2 cache, at least this many bytes each.
const MIN_COPY_BYTES: u64 = 64 << 20;

/// The calibration of one device, as cached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Calibration {
    /// The device's model.
    pub device: String,
    /// Its UUID (the cache's identity for the device).
    pub uuid: String,
    /// The peaks.
    pub peaks: Peaks,
    /// Bytes the copy kernel moves per launch (read plus written).
    pub copy_bytes: u64,
    /// Its median time, microseconds.
    pub copy_median_us: f64,
    /// Bytes the read kernel reads per launch (it writes nothing).
    pub read_bytes: u64,
    /// Its median time, microseconds.
    pub read_median_us: f64,
    /// FLOPs the FMA kernel does per launch.
    pub fma_flops: u64,
    /// Its median time, microseconds.
    pub fma_median_us: f64,
    /// When it was measured (RFC 3339).
    pub measured_at: String,
}

/// Why a device cannot be calibrated. Nothing is cached for any of these.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The fingerprint has no such device, or lacks an attribute the kernels are sized by.
    #[error("device {device}: {what}")]
    Device {
        /// The ordinal.
        device: usize,
        /// What is missing.
        what: String,
    },
    /// The calibration kernels did not compile.
    #[error("the calibration kernels did not compile for {arch}: {detail}")]
    Compile {
        /// The architecture.
        arch: String,
        /// NVRTC's error.
        detail: String,
    },
    /// The GPU child failed or gave no samples.
    #[error("the calibration kernel `{kernel}` failed: {detail}")]
    Run {
        /// The kernel.
        kernel: String,
        /// What the child said.
        detail: String,
    },
}

impl Diagnose for CalibrationError {
    fn exit_code(&self) -> u8 {
        exit::ENVIRONMENT
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            CalibrationError::Device { .. } => "`repro env capture` shows the devices CUDA sees".into(),
            CalibrationError::Compile { .. } => "`repro env check` says which NVRTC is used; `repro toolchain install` provisions the pinned one".into(),
            CalibrationError::Run { .. } => "run the bench again on an idle GPU; nothing was cached".into(),
        })
    }
}

/// One device's attributes from the fingerprint's device fields.
struct Device {
    name: String,
    uuid: String,
    arch: String,
    sms: u32,
    l2_bytes: u64,
    memory_bytes: u64,
}

fn device(fields: &Fields, ordinal: usize) -> Result<Device, CalibrationError> {
    let get = |k: &str| match fields.get(&format!("gpu.devices.{ordinal}.{k}")) {
        Some(Field::Value(v)) => Ok(v.clone()),
        _ => Err(CalibrationError::Device {
            device: ordinal,
            what: format!("no `{k}` (is there such a device?)"),
        }),
    };
    let num = |k: &str| {
        get(k)?
            .parse::<u64>()
            .map_err(|_| CalibrationError::Device {
                device: ordinal,
                what: format!("`{k}` is not a number"),
            })
    };
    Ok(Device {
        name: get("name")?,
        uuid: get("uuid")?,
        arch: format!("sm_{}", get("compute-capability")?.replace('.', "")),
        sms: num("sm-count")?.clamp(1, 4096) as u32,
        l2_bytes: num("l2-cache-kib")? << 10,
        memory_bytes: num("memory-mib")? << 20,
    })
}

/// Compiles [`SOURCE`] for `arch` with the project's NVRTC into a cubin file.
fn compile(arch: &str, pins: &Pins) -> Result<tempfile::NamedTempFile, CalibrationError> {
    let c = crate::foundation::recipe::Compile {
        source: "repro_peak.cu".into(),
        entries: vec![
            "repro_peak_copy".into(),
            "repro_peak_read".into(),
            "repro_peak_fma".into(),
        ],
        target: arch.to_string(),
        outputs: vec![crate::foundation::recipe::Output::Cubin],
        options: vec!["--std=c++17".into()],
        defines: BTreeMap::new(),
        env_defines: BTreeMap::new(),
        include_dirs: Vec::new(),
        toolchain: None,
        targets: Vec::new(),
    };
    let closure = Closure {
        files: BTreeMap::from([(c.source.clone(), SOURCE.as_bytes().to_vec())]),
        headers: BTreeMap::new(),
    };
    let failed = |detail: String| CalibrationError::Compile {
        arch: arch.to_string(),
        detail,
    };
    let art = build::nvrtc::compile(&c, pins, &closure).map_err(|e| failed(e.to_string()))?;
    let cubin = art
        .outputs
        .into_iter()
        .find(|(o, _)| *o == crate::foundation::recipe::Output::Cubin)
        .ok_or_else(|| failed("NVRTC gave no cubin".into()))?;
    let file = tempfile::NamedTempFile::new().map_err(|e| failed(e.to_string()))?;
    std::fs::write(file.path(), &cubin.1).map_err(|e| failed(e.to_string()))?;
    Ok(file)
}

fn timing() -> Timing {
    Timing {
        mode: Mode::Hot,
        warmup_ms: 50.0,
        max_noise: 0.005,
        min_samples: 10,
        min_time_ms: 100.0,
        max_samples: 200,
        budget_ms: 2000.0,
        // The calibration is timed alike on every machine, whatever the bench's settings.
        settings: Default::default(),
        after: None,
    }
}

/// Times one calibration kernel through `exec`'s GPU child (the bench's own worker, which
/// may hold the device's only context); its median in microseconds.
fn median_us(exec: &dyn bench::Executor, job: &Job) -> Result<f64, CalibrationError> {
    let failed = |detail: String| CalibrationError::Run {
        kernel: job.kernel.kernel.clone(),
        detail,
    };
    let report = bench::run_child_with(exec, job, Duration::from_secs(120))
        .map_err(|e| failed(e.to_string()))?;
    if let Some(e) = report.error {
        return Err(failed(e.to_string()));
    }
    bench::summarize(&report.samples_us)
        .map(|s| s.median)
        .filter(|m| m.is_finite() && *m > 0.0)
        .ok_or_else(|| failed("no samples".into()))
}

fn job(ordinal: usize, module: &str, kernel: &str, grid: u32, args: Vec<ArgSpec>) -> Job {
    Job {
        schema: SCHEMA,
        device: ordinal,
        module: module.to_string(),
        kernel: LaunchSpec {
            kernel: kernel.to_string(),
            grid: [grid, 1, 1],
            block: [THREADS, 1, 1],
            shared_mem: 0,
        },
        reference: None,
        args,
        tolerances: BTreeMap::new(),
        timing: Some(timing()),
        time_on_failure: true,
    }
}

fn buffer(name: &str, count: u64) -> ArgSpec {
    ArgSpec::Buffer {
        name: name.to_string(),
        dtype: DType::F32,
        count,
        init: Some(Init::Zeros),
        seed: 0,
        output: false,
    }
}

fn scalar(name: &str, dtype: DType, value: f64) -> ArgSpec {
    ArgSpec::Scalar {
        name: name.to_string(),
        dtype,
        value,
    }
}

/// Measures the peaks of device `ordinal` (described by the fingerprint's device fields).
pub fn calibrate(
    fields: &Fields,
    ordinal: usize,
    pins: &Pins,
    exec: &dyn bench::Executor,
) -> Result<Calibration, CalibrationError> {
    let d = device(fields, ordinal)?;
    let cubin = compile(&d.arch, pins)?;
    let module = cubin.path().to_string_lossy().into_owned();
    // Float4 elements, each buffer 16x L2 (at least 64 MiB, at most an eighth of the
    // memory): on an H100, buffers of 4x L2 (200 MB, 70 µs a launch) read 2921 GB/s where a
    // 768 MB vector add reached 2994, the launch's ramp and tail weighing 2-3%.
    let bytes_each = (16 * d.l2_bytes)
        .max(MIN_COPY_BYTES)
        .min(d.memory_bytes / 8)
        / 64
        * 64;
    let n4 = bytes_each / 16;
    // One block per 4 x 256 float4 elements: the whole buffer in one wave of launches.
    let copy_grid = n4
        .div_ceil(4 * u64::from(THREADS))
        .min(u64::from(i32::MAX as u32)) as u32;
    let copy = job(
        ordinal,
        &module,
        "repro_peak_copy",
        copy_grid,
        vec![
            buffer("in", n4 * 4),
            buffer("out", n4 * 4),
            scalar("n", DType::I64, n4 as f64),
        ],
    );
    let copy_median_us = median_us(exec, &copy)?;
    let read = job(
        ordinal,
        &module,
        "repro_peak_read",
        copy_grid,
        vec![
            buffer("in", n4 * 4),
            buffer("out", u64::from(THREADS)),
            scalar("n", DType::I64, n4 as f64),
        ],
    );
    let read_median_us = median_us(exec, &read)?;
    let fma_grid = d.sms * FMA_BLOCKS_PER_SM;
    let threads = u64::from(fma_grid) * u64::from(THREADS);
    let fma = job(
        ordinal,
        &module,
        "repro_peak_fma",
        fma_grid,
        vec![
            buffer("out", threads),
            scalar("iters", DType::I32, FMA_ITERS as f64),
            scalar("seed", DType::F32, 1.0),
        ],
    );
    let fma_median_us = median_us(exec, &fma)?;
    let copy_bytes = 2 * bytes_each;
    let fma_flops = 2 * FMA_PER_ITER * FMA_ITERS * threads;
    Ok(Calibration {
        device: d.name,
        uuid: d.uuid,
        peaks: Peaks {
            // HBM turns between reads and writes; a kernel's mix decides which it reaches,
            // so the peak is the better of a copy (1:1) and a pure read.
            dram_gb_per_s: (copy_bytes as f64 / copy_median_us)
                .max(bytes_each as f64 / read_median_us)
                / 1e3,
            fp32_tflops: fma_flops as f64 / (fma_median_us * 1e-6) / 1e12,
        },
        copy_bytes,
        copy_median_us,
        read_bytes: bytes_each,
        read_median_us,
        fma_flops,
        fma_median_us,
        measured_at: crate::foundation::records::now(),
    })
}

fn cache_path() -> Option<PathBuf> {
    Some(crate::foundation::fsutil::cache_dir()?.join("gpu-peaks.json"))
}

/// The calibration cache's schema (`fsutil`'s keyed cache: the devices' calibrations by
/// UUID under each device cache key; schema 1 held one key).
const CACHE_SCHEMA: u32 = 2;

/// Every device's calibration cached under `key`, by UUID.
fn read_cache(key: &str) -> BTreeMap<String, Calibration> {
    cache_path()
        .and_then(|p| crate::foundation::fsutil::read_keyed(&p, CACHE_SCHEMA, key))
        .unwrap_or_default()
}

/// The cached calibration of a device (by UUID) for this boot and driver, if any.
pub fn cached(uuid: &str) -> Option<Calibration> {
    let key = crate::engines::fingerprint::cuda::device_cache_key()?;
    read_cache(&key).remove(uuid)
}

/// Keeps a calibration for this boot and driver. A cache that cannot be written only costs
/// the next bench another calibration.
pub fn remember(c: &Calibration) {
    let (Some(key), Some(path)) = (
        crate::engines::fingerprint::cuda::device_cache_key(),
        cache_path(),
    ) else {
        return;
    };
    let mut devices = read_cache(&key);
    devices.insert(c.uuid.clone(), c.clone());
    crate::foundation::fsutil::write_keyed(&path, CACHE_SCHEMA, &key, devices);
}

/// The device's calibration: cached, or measured now and cached.
pub fn peaks_for(
    fields: &Fields,
    ordinal: usize,
    pins: &Pins,
    exec: &dyn bench::Executor,
) -> Result<Calibration, CalibrationError> {
    let d = device(fields, ordinal)?;
    if let Some(c) = cached(&d.uuid) {
        return Ok(c);
    }
    let c = calibrate(fields, ordinal, pins, exec)?;
    remember(&c);
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Fields {
        let mut f = Fields::new();
        for (k, v) in [
            ("name", "NVIDIA H200"),
            ("uuid", "GPU-1"),
            ("compute-capability", "9.0"),
            ("sm-count", "132"),
            ("l2-cache-kib", "61440"),
            ("memory-mib", "143771"),
        ] {
            f.insert(format!("gpu.devices.0.{k}"), Field::Value(v.into()));
        }
        f
    }

    #[test]
    fn devices_from_the_fingerprint() {
        let d = device(&fields(), 0).unwrap();
        assert_eq!(
            (d.arch.as_str(), d.sms, d.l2_bytes),
            ("sm_90", 132, 61440 << 10)
        );
        let e = device(&fields(), 1).err().unwrap();
        assert!(e.to_string().contains("device 1: no `name`"), "{e}");
        let mut f = fields();
        f.insert("gpu.devices.0.sm-count".into(), Field::Value("many".into()));
        assert!(
            device(&f, 0)
                .err()
                .unwrap()
                .to_string()
                .contains("not a number")
        );
    }
}
