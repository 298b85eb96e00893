//! The GPU side of `repro bench`: one job (check and time one kernel at one parameter
//! point), run in a child process so that a kernel that faults, traps or hangs costs a
//! verdict, not the search.
//!
//! The parent resolves a recipe into a [`Job`] (plain numbers, no expressions), starts
//! `repro gpu-job` with the job as JSON on stdin and a timeout, and reads a [`Report`]
//! from stdout. Everything here talks to the CUDA driver through cudarc's thin `result`
//! layer, so the timing loop does no bookkeeping of its own between launches.

use std::collections::BTreeMap;
use std::ffi::{CString, c_void};
use std::time::Instant;

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use serde::{Deserialize, Serialize};

use crate::foundation::records::{ArgSpec, LaunchSpec, Mode, OutputCheck};
use crate::foundation::runspec::{DType, Init};

/// The job schema.
pub const SCHEMA: u32 = 1;

/// How to time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Timing {
    /// Cold, hot or graph.
    pub mode: Mode,
    /// Warm-up before sampling, in milliseconds of launches.
    pub warmup_ms: f64,
    /// Stop once the relative noise of the median is at most this...
    pub max_noise: f64,
    /// ...and at least this many samples were taken...
    pub min_samples: usize,
    /// ...and at least this much time (ms) was spent sampling.
    pub min_time_ms: f64,
    /// Stop anyway after this many samples.
    pub max_samples: usize,
    /// Stop anyway after this long sampling (ms).
    pub budget_ms: f64,
}

/// A whole job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Job {
    /// Always [`SCHEMA`].
    pub schema: u32,
    /// CUDA device ordinal.
    pub device: usize,
    /// The module file (CUBIN or PTX) to load.
    pub module: String,
    /// The kernel under test.
    pub kernel: LaunchSpec,
    /// The reference, if checked.
    pub reference: Option<LaunchSpec>,
    /// Arguments in order.
    pub args: Vec<ArgSpec>,
    /// Per-output (atol, rtol).
    pub tolerances: BTreeMap<String, (f64, f64)>,
    /// How to time; `None` checks only.
    pub timing: Option<Timing>,
    /// Time even when the check fails.
    pub time_on_failure: bool,
}

/// What the job found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    /// The check, if there was a reference.
    pub check: Option<Vec<OutputCheck>>,
    /// Kernel times in microseconds, one per sample.
    pub samples_us: Vec<f64>,
    /// Launches per sample (above 1 in graph mode).
    pub launches_per_sample: u32,
    /// Warm-up launches.
    pub warmup_launches: u64,
    /// Whether sampling stopped because the noise target was met.
    pub converged: bool,
    /// SM clock (MHz) before and after sampling, and the maximum.
    pub sm_clock_mhz: Option<(u32, u32, u32)>,
    /// The clock after sampling was below 75% of the maximum.
    pub throttled: bool,
    /// A CUDA error that ended the job (its name), if any.
    pub error: Option<String>,
}

/// A CUDA failure with the call that produced it.
#[derive(Debug)]
pub struct CudaFailure {
    /// The CUDA error name (`CUDA_ERROR_ILLEGAL_ADDRESS`).
    pub name: String,
    /// What was being done.
    pub during: String,
}

fn ck<T>(r: Result<T, cu::DriverError>, during: &str) -> Result<T, CudaFailure> {
    r.map_err(|e| CudaFailure {
        name: format!("{:?}", e.0),
        during: during.to_string(),
    })
}

/// A deterministic generator (splitmix64): the same seed gives the same data everywhere.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Encodes one value as `dtype` (little-endian).
pub fn encode(dtype: DType, v: f64, out: &mut Vec<u8>) {
    match dtype {
        DType::F16 => out.extend(half::f16::from_f64(v).to_le_bytes()),
        DType::Bf16 => out.extend(half::bf16::from_f64(v).to_le_bytes()),
        DType::F32 => out.extend((v as f32).to_le_bytes()),
        DType::F64 => out.extend(v.to_le_bytes()),
        DType::I32 => out.extend((v as i32).to_le_bytes()),
        DType::U32 => out.extend((v as u32).to_le_bytes()),
        DType::I64 => out.extend((v as i64).to_le_bytes()),
        DType::U64 => out.extend((v as u64).to_le_bytes()),
        DType::U8 => out.push(v as u8),
    }
}

/// Decodes element `i` of a buffer of `dtype`.
pub fn decode(dtype: DType, bytes: &[u8], i: usize) -> f64 {
    let s = dtype.size();
    let b = &bytes[i * s..(i + 1) * s];
    match dtype {
        DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::F32 => f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes"))),
        DType::F64 => f64::from_le_bytes(b.try_into().expect("8 bytes")),
        DType::I32 => f64::from(i32::from_le_bytes(b.try_into().expect("4 bytes"))),
        DType::U32 => f64::from(u32::from_le_bytes(b.try_into().expect("4 bytes"))),
        DType::I64 => i64::from_le_bytes(b.try_into().expect("8 bytes")) as f64,
        DType::U64 => u64::from_le_bytes(b.try_into().expect("8 bytes")) as f64,
        DType::U8 => f64::from(b[0]),
    }
}

/// The host bytes of a buffer filled as `init` says.
pub fn fill(dtype: DType, count: u64, init: &Init, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(count as usize * dtype.size());
    for i in 0..count {
        let v = match init {
            Init::Zeros => 0.0,
            Init::Constant { value } => *value,
            Init::Iota => i as f64,
            Init::Uniform { low, high } => low + (high - low) * rng.uniform(),
            Init::Normal { mean, std } => mean + std * rng.normal(),
        };
        encode(dtype, v, &mut out);
    }
    out
}

/// The poison byte for outputs: 0xFF makes every float type NaN and every integer type
/// its all-ones value, so unwritten elements are found.
pub const POISON: u8 = 0xFF;

/// Compares kernel output with reference output.
pub fn compare_output(
    name: &str,
    dtype: DType,
    got: &[u8],
    want: &[u8],
    atol: f64,
    rtol: f64,
) -> OutputCheck {
    let n = got.len() / dtype.size();
    let poisoned = |bytes: &[u8], i: usize| {
        bytes[i * dtype.size()..(i + 1) * dtype.size()]
            .iter()
            .all(|b| *b == POISON)
    };
    let mut c = OutputCheck {
        name: name.into(),
        elements: n as u64,
        mismatches: 0,
        unwritten: 0,
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        atol,
        rtol,
        first_mismatch: None,
    };
    for i in 0..n {
        let (g, w) = (decode(dtype, got, i), decode(dtype, want, i));
        let unwritten = poisoned(got, i) && !poisoned(want, i);
        if unwritten {
            c.unwritten += 1;
        }
        let ok = if g.is_nan() || w.is_nan() || unwritten {
            false
        } else if g.is_infinite() || w.is_infinite() {
            g == w
        } else {
            let abs = (g - w).abs();
            let rel = if w != 0.0 {
                abs / w.abs()
            } else if abs == 0.0 {
                0.0
            } else {
                f64::INFINITY
            };
            c.max_abs_err = c.max_abs_err.max(abs);
            if rel.is_finite() {
                c.max_rel_err = c.max_rel_err.max(rel);
            }
            abs <= atol + rtol * w.abs()
        };
        if !ok {
            c.mismatches += 1;
            if c.first_mismatch.is_none() {
                c.first_mismatch = Some((i as u64, g.to_string(), w.to_string()));
            }
        }
    }
    c
}

struct Buffers {
    ptrs: Vec<sys::CUdeviceptr>,
}

impl Drop for Buffers {
    fn drop(&mut self) {
        for p in &self.ptrs {
            // SAFETY: each pointer came from malloc_sync and is freed once.
            unsafe {
                let _ = cu::free_sync(*p);
            }
        }
    }
}

/// The SM clock and its maximum (MHz) of the device with this UUID. NVML numbers devices
/// by PCI order and ignores `CUDA_VISIBLE_DEVICES` (the child sees only its own device, as
/// ordinal 0), so the device is found by its UUID, never by an ordinal.
fn nvml_clocks(nvml: Option<&nvml_wrapper::Nvml>, uuid: Option<&str>) -> Option<(u32, u32)> {
    use nvml_wrapper::enum_wrappers::device::Clock;
    let dev = nvml?.device_by_uuid(uuid?).ok()?;
    Some((
        dev.clock_info(Clock::SM).ok()?,
        dev.max_clock_info(Clock::SM).ok()?,
    ))
}

/// Runs a job on the GPU. A CUDA error ends it and is reported in [`Report::error`].
pub fn run(job: &Job) -> Report {
    let mut report = Report::default();
    if let Err(f) = run_inner(job, &mut report) {
        report.error = Some(format!("{} during {}", f.name, f.during));
    }
    report
}

fn run_inner(job: &Job, report: &mut Report) -> Result<(), CudaFailure> {
    // SAFETY: the driver is present (the parent checked); every raw call below gets
    // pointers to live locals or device allocations owned by `bufs`.
    unsafe {
        let ctx = ck(
            cudarc::driver::CudaContext::new(job.device),
            "creating the context",
        )?;
        ck(ctx.bind_to_thread(), "binding the context")?;
        let stream = ck(
            cu::stream::create(cu::stream::StreamKind::NonBlocking),
            "creating a stream",
        )?;
        let mut image = std::fs::read(&job.module).map_err(|e| CudaFailure {
            name: "MODULE_UNREADABLE".into(),
            during: format!("reading {}: {e}", job.module),
        })?;
        // PTX must be NUL-terminated for cuModuleLoadData; a CUBIN is ignored past its end.
        image.push(0);
        let module = ck(
            cu::module::load_data(image.as_ptr().cast()),
            "loading the module",
        )?;
        let func = |name: &str| {
            ck(
                cu::module::get_function(
                    module,
                    CString::new(name).expect("entry names are identifiers"),
                ),
                &format!("finding kernel {name}"),
            )
        };
        let kernel = func(&job.kernel.kernel)?;
        let reference = job
            .reference
            .as_ref()
            .map(|r| func(&r.kernel))
            .transpose()?;

        // Inputs are filled once; outputs are (re)set before every run.
        let total: u64 = job
            .args
            .iter()
            .map(|a| match a {
                ArgSpec::Buffer { dtype, count, .. } => count * dtype.size() as u64,
                ArgSpec::Scalar { .. } => 0,
            })
            .sum();
        let (free, _) = ck(cu::mem_get_info(), "querying memory")?;
        let outputs_twice: u64 = job
            .args
            .iter()
            .map(|a| match a {
                ArgSpec::Buffer {
                    dtype,
                    count,
                    output: true,
                    ..
                } => count * dtype.size() as u64,
                _ => 0,
            })
            .sum();
        if total + outputs_twice > free as u64 {
            return Err(CudaFailure {
                name: "BUFFERS_TOO_LARGE".into(),
                during: format!(
                    "allocating {:.2} GiB of buffers with {:.2} GiB free on the device",
                    (total + outputs_twice) as f64 / (1u64 << 30) as f64,
                    free as f64 / (1u64 << 30) as f64
                ),
            });
        }
        let mut bufs = Buffers { ptrs: Vec::new() };
        let mut host_init: Vec<Option<Vec<u8>>> = Vec::new();
        let mut params: Vec<Vec<u8>> = Vec::new();
        for a in &job.args {
            match a {
                ArgSpec::Buffer {
                    dtype,
                    count,
                    init,
                    seed,
                    ..
                } => {
                    let bytes = (*count as usize * dtype.size()).max(1);
                    let p = ck(cu::malloc_sync(bytes), "allocating a buffer")?;
                    bufs.ptrs.push(p);
                    let data = init.as_ref().map(|i| fill(*dtype, *count, i, *seed));
                    if let Some(d) = &data
                        && !d.is_empty()
                    {
                        ck(cu::memcpy_htod_sync(p, d), "copying inputs")?;
                    }
                    host_init.push(data);
                    params.push(p.to_le_bytes().to_vec());
                }
                ArgSpec::Scalar { dtype, value, .. } => {
                    let mut v = Vec::new();
                    encode(*dtype, *value, &mut v);
                    host_init.push(None);
                    params.push(v);
                }
            }
        }
        let mut arg_ptrs: Vec<*mut c_void> =
            params.iter_mut().map(|p| p.as_mut_ptr().cast()).collect();
        let buffer_of = |i: usize| -> Option<sys::CUdeviceptr> {
            let mut b = 0;
            for (j, a) in job.args.iter().enumerate() {
                if matches!(a, ArgSpec::Buffer { .. }) {
                    if j == i {
                        return Some(bufs.ptrs[b]);
                    }
                    b += 1;
                }
            }
            None
        };
        // Poison (or re-initialise) every output before a run.
        let reset_outputs = |poison: bool| -> Result<(), CudaFailure> {
            for (i, a) in job.args.iter().enumerate() {
                if let ArgSpec::Buffer {
                    dtype,
                    count,
                    output: true,
                    ..
                } = a
                {
                    let p = buffer_of(i).expect("a buffer");
                    let bytes = *count as usize * dtype.size();
                    match &host_init[i] {
                        Some(d) if !d.is_empty() => {
                            ck(cu::memcpy_htod_sync(p, d), "resetting an output")?
                        }
                        _ => ck(
                            cu::memset_d8_async(p, if poison { POISON } else { 0 }, bytes, stream),
                            "poisoning an output",
                        )?,
                    }
                }
            }
            Ok(())
        };
        let launch = |f: sys::CUfunction,
                      l: &LaunchSpec,
                      args: &mut [*mut c_void]|
         -> Result<(), CudaFailure> {
            ck(
                cu::launch_kernel(
                    f,
                    (l.grid[0], l.grid[1], l.grid[2]),
                    (l.block[0], l.block[1], l.block[2]),
                    l.shared_mem,
                    stream,
                    args,
                ),
                &format!("launching {}", l.kernel),
            )
        };
        let read_outputs = || -> Result<Vec<Vec<u8>>, CudaFailure> {
            let mut out = Vec::new();
            for (i, a) in job.args.iter().enumerate() {
                if let ArgSpec::Buffer {
                    dtype,
                    count,
                    output: true,
                    ..
                } = a
                {
                    let mut host = vec![0u8; *count as usize * dtype.size()];
                    if !host.is_empty() {
                        ck(
                            cu::memcpy_dtoh_sync(&mut host, buffer_of(i).expect("a buffer")),
                            "reading an output",
                        )?;
                    }
                    out.push(host);
                }
            }
            Ok(out)
        };

        if let (Some(rf), Some(rl)) = (reference, &job.reference) {
            reset_outputs(true)?;
            launch(rf, rl, &mut arg_ptrs)?;
            ck(
                cu::stream::synchronize(stream),
                &format!("running the reference {}", rl.kernel),
            )?;
            let want = read_outputs()?;
            reset_outputs(true)?;
            launch(kernel, &job.kernel, &mut arg_ptrs)?;
            ck(
                cu::stream::synchronize(stream),
                &format!("running {}", job.kernel.kernel),
            )?;
            let got = read_outputs()?;
            let mut checks = Vec::new();
            let outputs = job.args.iter().filter_map(|a| match a {
                ArgSpec::Buffer {
                    name,
                    dtype,
                    output: true,
                    ..
                } => Some((name, *dtype)),
                _ => None,
            });
            for ((name, dtype), (g, w)) in outputs.zip(got.iter().zip(&want)) {
                let (atol, rtol) = job.tolerances.get(name).copied().unwrap_or((
                    crate::foundation::runspec::DEFAULT_ATOL,
                    crate::foundation::runspec::DEFAULT_RTOL,
                ));
                checks.push(compare_output(name, dtype, g, w, atol, rtol));
            }
            let passed = checks.iter().all(|c| c.mismatches == 0);
            report.check = Some(checks);
            if !passed && !job.time_on_failure {
                return Ok(());
            }
        }

        let Some(t) = &job.timing else { return Ok(()) };
        let ev = |during: &str| {
            ck(
                cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
                during,
            )
        };
        let (start, end) = (ev("creating an event")?, ev("creating an event")?);
        let elapsed_us = |start: sys::CUevent, end: sys::CUevent| -> Result<f64, CudaFailure> {
            ck(
                cu::event::synchronize(end),
                &format!("running {}", job.kernel.kernel),
            )?;
            Ok(f64::from(ck(cu::event::elapsed(start, end), "reading an event")?) * 1e3)
        };

        // Warm-up: launch until warmup_ms has passed (clocks ramp up, caches and TLBs fill).
        reset_outputs(false)?;
        let warm_start = Instant::now();
        let mut single_us = 0.0;
        while warm_start.elapsed().as_secs_f64() * 1e3 < t.warmup_ms || report.warmup_launches < 3 {
            ck(cu::event::record(start, stream), "recording an event")?;
            launch(kernel, &job.kernel, &mut arg_ptrs)?;
            ck(cu::event::record(end, stream), "recording an event")?;
            single_us = elapsed_us(start, end)?;
            report.warmup_launches += 1;
        }

        // Cold samples flush L2 with a memset over twice its size between samples.
        let l2 = {
            let v = ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
                .unwrap_or(1 << 20);
            (v.max(1 << 20) as usize) * 2
        };
        let flush = if t.mode == Mode::Cold {
            let p = ck(cu::malloc_sync(l2), "allocating the L2 flush buffer")?;
            bufs.ptrs.push(p);
            Some(p)
        } else {
            None
        };
        // Graph mode: enough launches per sample to make the sample about a millisecond.
        let batch = if t.mode == Mode::Graph {
            ((1000.0 / single_us.max(0.5)) as u32).clamp(10, 1000)
        } else {
            1
        };
        report.launches_per_sample = batch;
        let graph = if t.mode == Mode::Graph {
            ck(
                cu::stream::begin_capture(
                    stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                ),
                "capturing a graph",
            )?;
            for _ in 0..batch {
                launch(kernel, &job.kernel, &mut arg_ptrs)?;
            }
            let g = ck(cu::stream::end_capture(stream), "capturing a graph")?;
            Some(ck(
                cu::graph::instantiate(g, sys::CUgraphInstantiate_flags(0)),
                "instantiating a graph",
            )?)
        } else {
            None
        };

        // One NVML session for both readings: its start opens every GPU of the machine.
        let nvml = crate::engines::fingerprint::nvml::open().ok();
        let uuid = {
            let mut u: sys::CUuuid = std::mem::zeroed();
            (sys::cuDeviceGetUuid_v2(&mut u, ctx.cu_device()) == sys::CUresult::CUDA_SUCCESS)
                .then(|| crate::engines::fingerprint::cuda::format_uuid(&u.bytes.map(|b| b as u8)))
        };
        let before = nvml_clocks(nvml.as_ref(), uuid.as_deref());
        let sampling = Instant::now();
        let mut flush_byte = 0u8;
        loop {
            if let Some(p) = flush {
                flush_byte = flush_byte.wrapping_add(1);
                ck(
                    cu::memset_d8_async(p, flush_byte, l2, stream),
                    "flushing L2",
                )?;
            }
            ck(cu::event::record(start, stream), "recording an event")?;
            match graph {
                Some(g) => ck(cu::graph::launch(g, stream), "launching the graph")?,
                None => launch(kernel, &job.kernel, &mut arg_ptrs)?,
            }
            ck(cu::event::record(end, stream), "recording an event")?;
            report
                .samples_us
                .push(elapsed_us(start, end)? / f64::from(batch));
            let n = report.samples_us.len();
            let spent = sampling.elapsed().as_secs_f64() * 1e3;
            if n >= t.min_samples
                && spent >= t.min_time_ms
                && crate::foundation::stats::median_rel_noise(&report.samples_us) <= t.max_noise
            {
                report.converged = true;
                break;
            }
            if n >= t.max_samples || spent >= t.budget_ms {
                break;
            }
        }
        let after = nvml_clocks(nvml.as_ref(), uuid.as_deref());
        if let (Some((b, max)), Some((a, _))) = (before, after) {
            report.sm_clock_mhz = Some((b, a, max));
            report.throttled = f64::from(a) < 0.75 * f64::from(max);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_are_deterministic_and_typed() {
        let a = fill(
            DType::F32,
            1000,
            &Init::Normal {
                mean: 0.0,
                std: 1.0,
            },
            7,
        );
        assert_eq!(
            a,
            fill(
                DType::F32,
                1000,
                &Init::Normal {
                    mean: 0.0,
                    std: 1.0
                },
                7
            )
        );
        assert_ne!(
            a,
            fill(
                DType::F32,
                1000,
                &Init::Normal {
                    mean: 0.0,
                    std: 1.0
                },
                8
            )
        );
        let mean: f64 = (0..1000).map(|i| decode(DType::F32, &a, i)).sum::<f64>() / 1000.0;
        assert!(mean.abs() < 0.15, "{mean}");
        let h = fill(DType::F16, 3, &Init::Iota, 0);
        assert_eq!(
            (0..3)
                .map(|i| decode(DType::F16, &h, i))
                .collect::<Vec<_>>(),
            [0.0, 1.0, 2.0]
        );
        let u = fill(
            DType::Bf16,
            100,
            &Init::Uniform {
                low: -1.0,
                high: 1.0,
            },
            1,
        );
        assert!((0..100).all(|i| (-1.0..=1.0).contains(&decode(DType::Bf16, &u, i))));
    }

    #[test]
    fn poison_is_nan_for_every_float_type() {
        for d in [DType::F16, DType::Bf16, DType::F32, DType::F64] {
            assert!(decode(d, &[POISON; 8], 0).is_nan(), "{d:?}");
        }
    }

    #[test]
    fn comparisons_catch_nan_unwritten_and_tolerance() {
        let mut want = Vec::new();
        let mut got = Vec::new();
        for v in [1.0, 2.0, 3.0, 4.0] {
            encode(DType::F32, v, &mut want);
        }
        for v in [1.0, 2.0 + 1e-7, 3.5, f64::NAN] {
            encode(DType::F32, v, &mut got);
        }
        got[12..16].fill(POISON);
        let c = compare_output("c", DType::F32, &got, &want, 1e-5, 1e-5);
        assert_eq!(c.mismatches, 2);
        assert_eq!(c.unwritten, 1);
        assert_eq!(c.first_mismatch, Some((2, "3.5".into(), "3".into())));
        assert!((c.max_abs_err - 0.5).abs() < 1e-9);
        // NaN never passes, even against NaN.
        let nan = {
            let mut v = Vec::new();
            encode(DType::F32, f64::NAN, &mut v);
            v
        };
        assert_eq!(
            compare_output("x", DType::F32, &nan, &nan, 1.0, 1.0).mismatches,
            1
        );
    }
}
