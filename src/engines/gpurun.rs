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

pub mod ondevice;

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
    /// The `REPRO_TIMING_*` settings to time with (all but `REPRO_TIMING_DIAG`), where
    /// set: what the parent's environment said ([`timing_settings_from_env`]), or a
    /// recorded result's, for its replay. The rest are the defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    /// What the previous process of a measurement split between processes left for the
    /// next one ([`Timing::processes`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<After>,
}

/// What one process of a split measurement hands to the next ([`Timing::processes`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct After {
    /// It kept the GPU busy this long (ms), until moments before: the next one's warm-up
    /// counts it, as a worker counts its own previous job's.
    pub busy_ms: f64,
    /// Graph mode: the launches per sample it timed, which the next one keeps (unless its
    /// own launches are more than twice as fast or slow), so that the pooled samples are
    /// alike.
    pub batch: u32,
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
    /// The time (ms) this worker's previous job kept the same GPU busy until moments
    /// before, counted toward the warm-up (a bisection's or a sweep's later jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_credit_ms: Option<f64>,
    /// Whether sampling stopped because the noise target was met.
    pub converged: bool,
    /// SM clock (MHz) before and after sampling, and the maximum.
    pub sm_clock_mhz: Option<(u32, u32, u32)>,
    /// The clock after sampling was below 75% of the maximum.
    pub throttled: bool,
    /// Graph mode: the median GPU time (µs) of an empty graph timed behind queued work,
    /// subtracted from each sample before it is divided by the launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_overhead_us: Option<f64>,
    /// How long (ms) the job kept the GPU busy, from its warm-up to its last sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_ms: Option<f64>,
    /// Where the second, third, ... burst of samples begins (indices into `samples_us`):
    /// graph mode samples in bursts, each of another placement after a re-warm
    /// ([`Knobs::bursts`]), and the job's median is the mean of the bursts' medians
    /// ([`crate::foundation::stats::summarize_bursts`]). Empty for one burst.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub burst_starts: Vec<usize>,
    /// What ended the job early, if anything.
    pub error: Option<Failure>,
    /// The wall time of each phase of the job, in order.
    #[serde(default)]
    pub phases: Vec<Phase>,
}

/// The wall time of one phase of a job (creating the context, filling inputs, sampling).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Phase {
    /// What ran.
    pub name: String,
    /// For how long, in milliseconds.
    pub ms: f64,
    /// Where it ran, for phases that can run on the GPU or the CPU (`gpu`, `cpu`,
    /// `gpu+cpu`), with the reason when the GPU could not (`cpu: no helper module`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl Phase {
    /// A phase without a path.
    pub fn new(name: &str, ms: f64) -> Phase {
        Phase {
            name: name.into(),
            ms,
            path: None,
        }
    }
}

/// Why a GPU job ended without a full report: a CUDA call that failed in the child (it
/// reports that itself), or how the child process ended, as its parent saw it. Callers
/// tell these apart by variant (a timeout is a verdict of its own), never by the text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Failure {
    /// A CUDA call failed (a trapping kernel, a refused allocation).
    Driver {
        /// The CUDA error's name (`CUDA_ERROR_ILLEGAL_ADDRESS`).
        name: String,
        /// What was being done.
        during: String,
    },
    /// The child exited without a report that could be read.
    Exit {
        /// Its exit code.
        code: i32,
        /// Why the report it printed could not be read, if it printed one.
        unreadable: Option<String>,
        /// The last lines of its stderr.
        tail: String,
    },
    /// The child was killed by a signal.
    Signal {
        /// The signal's number.
        signal: i32,
        /// The last lines of its stderr.
        tail: String,
    },
    /// The child gave no answer in time and was killed.
    Timeout {
        /// The limit, in milliseconds.
        after_ms: u64,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Driver { name, during } => write!(f, "{name} during {during}"),
            Failure::Exit {
                code,
                unreadable: Some(why),
                tail,
            } => write!(
                f,
                "the benchmark process exited with code {code} but its report could not be read ({why}): {tail}"
            ),
            Failure::Exit {
                code,
                unreadable: None,
                tail,
            } => write!(
                f,
                "the benchmark process exited with code {code} without a report: {tail}"
            ),
            Failure::Signal { signal, tail } => write!(
                f,
                "the benchmark process was killed by {} (signal {signal}): {tail}",
                crate::foundation::process::signal_name(*signal)
            ),
            Failure::Timeout { after_ms } => write!(
                f,
                "TIMEOUT: no answer within {}",
                humantime::format_duration(std::time::Duration::from_millis(*after_ms))
            ),
        }
    }
}

impl std::error::Error for Failure {}

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
    /// Skips `n` draws: the generator is a counter, so element `i` of a fill can be drawn
    /// without drawing the ones before it (fills are split over threads).
    pub fn skip(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
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

/// Fills and comparisons of at least this many elements are split over threads.
const PARALLEL_FROM: usize = 1 << 16;

/// How many threads to split `n` elements over (one below [`PARALLEL_FROM`]).
fn threads_for(n: usize) -> usize {
    if n < PARALLEL_FROM {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    cores.clamp(1, 32).min(n / (PARALLEL_FROM / 4)).max(1)
}

/// The host bytes of a buffer filled as `init` says. Large fills are split over threads;
/// the bytes are the same as one thread's (each element's draws are found by
/// [`Rng::skip`]).
pub fn fill(dtype: DType, count: u64, init: &Init, seed: u64) -> Vec<u8> {
    let size = dtype.size();
    let mut out = vec![0u8; count as usize * size];
    let per = (count as usize)
        .div_ceil(threads_for(count as usize))
        .max(1);
    std::thread::scope(|s| {
        for (c, chunk) in out.chunks_mut(per * size).enumerate() {
            s.spawn(move || fill_range(dtype, init, seed, (c * per) as u64, chunk));
        }
    });
    out
}

/// Fills `out` with elements `first..` of a fill.
fn fill_range(dtype: DType, init: &Init, seed: u64, first: u64, out: &mut [u8]) {
    let draws = match init {
        Init::Uniform { .. } => 1,
        Init::Normal { .. } => 2,
        Init::Zeros | Init::Constant { .. } | Init::Iota => 0,
    };
    let mut rng = Rng::new(seed);
    rng.skip(first * draws);
    let mut one = Vec::with_capacity(8);
    for (k, dst) in out.chunks_exact_mut(dtype.size()).enumerate() {
        let i = first + k as u64;
        let v = match init {
            Init::Zeros => 0.0,
            Init::Constant { value } => *value,
            Init::Iota => i as f64,
            Init::Uniform { low, high } => low + (high - low) * rng.uniform(),
            Init::Normal { mean, std } => mean + std * rng.normal(),
        };
        one.clear();
        encode(dtype, v, &mut one);
        dst.copy_from_slice(&one);
    }
}

/// The poison byte for outputs: 0xFF makes every float type NaN and every integer type
/// its all-ones value, so unwritten elements are found.
pub const POISON: u8 = 0xFF;

/// Compares kernel output with reference output (large outputs split over threads; the
/// result is the same as one thread's).
pub fn compare_output(
    name: &str,
    dtype: DType,
    got: &[u8],
    want: &[u8],
    atol: f64,
    rtol: f64,
) -> OutputCheck {
    let n = got.len() / dtype.size();
    let per = n.div_ceil(threads_for(n)).max(1);
    let parts: Vec<OutputCheck> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n.div_ceil(per))
            .map(|c| {
                let range = c * per..((c + 1) * per).min(n);
                s.spawn(move || compare_range(name, dtype, got, want, (atol, rtol), range))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a comparison does not panic"))
            .collect()
    });
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
    for p in parts {
        c.mismatches += p.mismatches;
        c.unwritten += p.unwritten;
        c.max_abs_err = c.max_abs_err.max(p.max_abs_err);
        c.max_rel_err = c.max_rel_err.max(p.max_rel_err);
        if c.first_mismatch.is_none() {
            c.first_mismatch = p.first_mismatch;
        }
    }
    c
}

/// [`compare_output`] over the elements in `range`.
fn compare_range(
    name: &str,
    dtype: DType,
    got: &[u8],
    want: &[u8],
    (atol, rtol): (f64, f64),
    range: std::ops::Range<usize>,
) -> OutputCheck {
    let poisoned = |bytes: &[u8], i: usize| {
        bytes[i * dtype.size()..(i + 1) * dtype.size()]
            .iter()
            .all(|b| *b == POISON)
    };
    let mut c = OutputCheck {
        name: name.into(),
        elements: range.len() as u64,
        mismatches: 0,
        unwritten: 0,
        max_abs_err: 0.0,
        max_rel_err: 0.0,
        atol,
        rtol,
        first_mismatch: None,
    };
    for i in range {
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

/// Device buffers, freed when dropped.
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
fn nvml_clocks(uuid: Option<&str>) -> Option<(u32, u32)> {
    use nvml_wrapper::enum_wrappers::device::Clock;
    with_nvml_device(uuid?, |dev| {
        Some((
            dev.clock_info(Clock::SM).ok()?,
            dev.max_clock_info(Clock::SM).ok()?,
        ))
    })
    .flatten()
}

/// NVML, started once per process: a reused worker's later jobs find it started (its start
/// costs about 9 ms on Hopper). A start that failed is tried again by the next job.
fn worker_nvml() -> Option<&'static nvml_wrapper::Nvml> {
    static NVML: std::sync::OnceLock<nvml_wrapper::Nvml> = std::sync::OnceLock::new();
    if let Some(nvml) = NVML.get() {
        return Some(nvml);
    }
    let started = crate::engines::fingerprint::nvml::open().ok()?;
    // Two threads that both started it keep the first; the other is shut down.
    let _ = NVML.set(started);
    NVML.get()
}

/// Calls `f` with NVML's handle of the device with this UUID, kept for the life of the
/// process (a device's first handle costs about 7 ms on Hopper, every job of a worker asks).
fn with_nvml_device<R>(
    uuid: &str,
    f: impl FnOnce(&nvml_wrapper::Device<'static>) -> R,
) -> Option<R> {
    type Devices = Vec<(String, nvml_wrapper::Device<'static>)>;
    static DEVICES: std::sync::Mutex<Devices> = std::sync::Mutex::new(Vec::new());
    let nvml = worker_nvml()?;
    let mut devices = DEVICES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let i = match devices.iter().position(|(u, _)| u == uuid) {
        Some(i) => i,
        None => {
            devices.push((uuid.to_string(), nvml.device_by_uuid(uuid).ok()?));
            devices.len() - 1
        }
    };
    Some(f(&devices[i].1))
}

/// The wall time of a job's phases, in order: each lap closes the phase that ran since the
/// previous one.
struct Laps {
    phases: Vec<Phase>,
    at: Instant,
}

impl Laps {
    fn new() -> Self {
        Laps {
            phases: Vec::new(),
            at: Instant::now(),
        }
    }
    fn lap(&mut self, name: &str) {
        self.lap_on(name, None);
    }
    /// A lap that says where the phase ran.
    fn lap_on(&mut self, name: &str, path: Option<String>) {
        let now = Instant::now();
        self.phases.push(Phase {
            name: name.to_string(),
            ms: (now - self.at).as_secs_f64() * 1e3,
            path,
        });
        self.at = now;
    }
}

/// Runs a job on the GPU. A CUDA error ends it and is reported in [`Report::error`]; the
/// phases run until then are reported either way.
pub fn run(job: &Job) -> Report {
    let mut report = Report::default();
    let mut laps = Laps::new();
    if let Err(f) = run_inner(job, &mut report, &mut laps) {
        report.error = Some(Failure::Driver {
            name: f.name,
            during: f.during,
        });
    }
    report.phases = laps.phases;
    report
}

/// Inputs of at most this many bytes in all are generated while the context is created;
/// larger ones only after the device's free memory was checked, so that a job the device
/// cannot hold never fills the host's memory first.
const EARLY_FILL_BYTES: u64 = 8 << 30;

/// Whether the device may generate inputs and compare outputs (`REPRO_GPU_HELPERS=0` keeps
/// both on the CPU, to compare the two paths).
fn helpers_wanted() -> bool {
    std::env::var_os("REPRO_GPU_HELPERS").is_none_or(|v| v != "0")
}

/// Each argument's initial host bytes: `None` for scalars, uninitialised buffers, and (with
/// `leave_to_device`) buffers the device can generate itself.
fn host_inputs(job: &Job, leave_to_device: bool) -> Vec<Option<Vec<u8>>> {
    job.args
        .iter()
        .map(|a| match a {
            ArgSpec::Buffer {
                dtype,
                count,
                init: Some(i),
                seed,
                ..
            } if !(leave_to_device && ondevice::cpu_only(*dtype, i).is_none()) => {
                Some(fill(*dtype, *count, i, *seed))
            }
            _ => None,
        })
        .collect()
}

fn run_inner(job: &Job, report: &mut Report, laps: &mut Laps) -> Result<(), CudaFailure> {
    let input_bytes: u64 = job
        .args
        .iter()
        .map(|a| match a {
            ArgSpec::Buffer {
                dtype,
                count,
                init: Some(_),
                ..
            } => count * dtype.size() as u64,
            _ => 0,
        })
        .sum();
    // The device generates what it can once its helper module is loaded; the rest is
    // generated on the CPU while the driver creates the context and loads the module.
    let leave = helpers_wanted() && ondevice::any_cached();
    std::thread::scope(|s| {
        let early = (input_bytes <= EARLY_FILL_BYTES).then(|| s.spawn(|| host_inputs(job, leave)));
        // NVML's start (it opens every GPU of the machine) overlaps the context's, rather
        // than leaving the GPU idle between the warm-up and the samples (once a process).
        let nvml = job.timing.is_some().then(|| s.spawn(worker_nvml));
        let mut g = Loaded::load(job, laps)?;
        g.check_memory()?;
        let inputs = match early {
            Some(h) => h.join().expect("filling inputs does not panic"),
            None => host_inputs(job, leave),
        };
        let path = g.alloc(inputs)?;
        laps.lap_on("inputs", path);
        if let Some(h) = nvml {
            let _ = h.join();
        }
        g.run(report, laps)?;
        drop(g);
        laps.lap("release");
        Ok(())
    })
}

impl Loaded<'_> {
    /// Checks, then times (as the job says).
    fn run(&mut self, report: &mut Report, laps: &mut Laps) -> Result<(), CudaFailure> {
        if !self.check(report, laps)? {
            return Ok(());
        }
        let Some(t) = &self.job.timing else {
            return Ok(());
        };
        self.time(t, report, laps)
    }
}

/// How a buffer's initial bytes are made, and made again before each run of an output.
#[derive(Default)]
enum Fill {
    /// A scalar, or a buffer without an init.
    #[default]
    None,
    /// Bytes generated on the host.
    Host(Vec<u8>),
    /// Generated on the device by the fill kernel; then the host wrote these elements
    /// (index, bytes) from the CPU generator.
    Device {
        dtype: DType,
        count: u64,
        init: Init,
        seed: u64,
        patches: Vec<(u64, Vec<u8>)>,
    },
}

/// Where every copy, fill and ordinary launch of a job goes: the legacy default stream;
/// graph mode captures, launches and times its graphs on a stream of its own
/// (`Loaded::capture`). Ordinary launches and memsets on a created stream make the context's
/// later launches slower, from about a second on and for as long as the context lives: a
/// 2.6 us kernel's graph samples 7% slower and its cold samples 2%, in every job of a reused
/// worker after the first (H200, #29; `benches/gpu_bench_phases.py`, table 5). Launches on
/// the legacy stream, and graphs launched anywhere, leave every job timed as the first one
/// is; graphs launched on the legacy stream vary more between processes than on a created
/// one (`benches/gpu_level_spread.sh`).
const STREAM: sys::CUstream = std::ptr::null_mut();

/// A job on the GPU: its context, capture stream, kernels and buffers.
struct Loaded<'j> {
    job: &'j Job,
    /// Dropped before the context (fields drop in order).
    bufs: Buffers,
    /// Pinned host buffers for the copies that remain, freed when dropped.
    staging: ondevice::Staging,
    /// Per argument, its buffer's index in `bufs` (`None` for a scalar).
    slot: Vec<Option<usize>>,
    /// Per argument, how its initial bytes are made.
    inits: Vec<Fill>,
    /// The kernel parameters' bytes; `arg_ptrs` points into them, so they never change.
    params: Vec<Vec<u8>>,
    arg_ptrs: Vec<*mut c_void>,
    /// The parameters' bytes of the extra placements' buffers (graph mode); the pointers
    /// into them stay valid, the inner vectors never change.
    extra_params: Vec<Vec<u8>>,
    /// Graph mode's stream of the job's own, made when the first graph is captured (the
    /// legacy stream cannot be captured on); the graphs run there, nothing else does.
    capture: Option<sys::CUstream>,
    /// Unloaded when the job ends (a reused worker runs many jobs).
    module: sys::CUmodule,
    kernel: sys::CUfunction,
    reference: Option<sys::CUfunction>,
    /// repro's fill and compare kernels, or why they are not loaded.
    helpers: Result<ondevice::Helpers, ondevice::HelperError>,
    ctx: std::sync::Arc<cudarc::driver::CudaContext>,
}

impl Drop for Loaded<'_> {
    /// The job's work is waited for, and its capture stream and module go with it, so that
    /// a worker that runs many jobs in one context does not collect them (its buffers are
    /// freed by `Buffers` after this).
    fn drop(&mut self) {
        // SAFETY: the capture stream and the module were created by this job and are
        // released once; a failure (a context broken by a trap) changes nothing the report
        // has not said.
        unsafe {
            let _ = cu::stream::synchronize(STREAM);
            if let Some(capture) = self.capture.take() {
                // It does not wait for the legacy stream, nor the legacy stream for it.
                let _ = cu::stream::synchronize(capture);
                let _ = cu::stream::destroy(capture);
            }
            let _ = cu::module::unload(self.module);
        }
    }
}

impl<'j> Loaded<'j> {
    /// Creates the context and loads the module's kernels.
    fn load(job: &'j Job, laps: &mut Laps) -> Result<Self, CudaFailure> {
        let ctx = ck(
            cudarc::driver::CudaContext::new(job.device),
            "creating the context",
        )?;
        ck(ctx.bind_to_thread(), "binding the context")?;
        laps.lap("context");
        let mut image = std::fs::read(&job.module).map_err(|e| CudaFailure {
            name: "MODULE_UNREADABLE".into(),
            during: format!("reading {}: {e}", job.module),
        })?;
        // PTX must be NUL-terminated for cuModuleLoadData; a CUBIN is ignored past its end.
        image.push(0);
        // SAFETY: the image is a live, NUL-terminated buffer.
        let module = ck(
            unsafe { cu::module::load_data(image.as_ptr().cast()) },
            "loading the module",
        )?;
        let func = |name: &str| {
            ck(
                // SAFETY: the module was loaded above and is unloaded only when the job ends.
                unsafe {
                    cu::module::get_function(
                        module,
                        CString::new(name).expect("entry names are identifiers"),
                    )
                },
                &format!("finding kernel {name}"),
            )
        };
        let found = func(&job.kernel.kernel).and_then(|kernel| {
            let reference = job.reference.as_ref().map(|r| func(&r.kernel));
            Ok((kernel, reference.transpose()?))
        });
        let (kernel, reference) = match found {
            Ok(k) => k,
            Err(e) => {
                // SAFETY: loaded above, used by nothing else (a worker runs its next job in
                // the same context).
                let _ = unsafe { cu::module::unload(module) };
                return Err(e);
            }
        };
        let helpers = if helpers_wanted() {
            ondevice::Helpers::load(&ctx)
        } else {
            Err(ondevice::HelperError::Off)
        };
        laps.lap("module");
        Ok(Loaded {
            job,
            bufs: Buffers { ptrs: Vec::new() },
            staging: ondevice::Staging::default(),
            slot: Vec::new(),
            inits: Vec::new(),
            params: Vec::new(),
            arg_ptrs: Vec::new(),
            extra_params: Vec::new(),
            capture: None,
            module,
            kernel,
            reference,
            helpers,
            ctx,
        })
    }

    /// Refuses buffers larger than the device's free memory before any allocation.
    fn check_memory(&self) -> Result<(), CudaFailure> {
        let size = |a: &ArgSpec, outputs_only: bool| match a {
            ArgSpec::Buffer {
                dtype,
                count,
                output,
                ..
            } if *output || !outputs_only => count * dtype.size() as u64,
            _ => 0,
        };
        let total: u64 = self.job.args.iter().map(|a| size(a, false)).sum();
        let outputs_twice: u64 = self.job.args.iter().map(|a| size(a, true)).sum();
        let (free, _) = ck(cu::mem_get_info(), "querying memory")?;
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
        Ok(())
    }

    /// Allocates every buffer and gives the inputs their initial bytes: `inputs` (per
    /// argument) where the host generated them, else the device's fill kernel where it
    /// can, else the CPU now. Where the inputs were made, for the phase table.
    fn alloc(&mut self, inputs: Vec<Option<Vec<u8>>>) -> Result<Option<String>, CudaFailure> {
        let (mut on_gpu, mut on_cpu) = (0, 0);
        for (a, data) in self.job.args.iter().zip(inputs) {
            match a {
                ArgSpec::Buffer {
                    dtype,
                    count,
                    init,
                    seed,
                    ..
                } => {
                    let bytes = (*count as usize * dtype.size()).max(1);
                    // SAFETY: the context is current; the pointer is freed by `bufs`.
                    let p = ck(unsafe { cu::malloc_sync(bytes) }, "allocating a buffer")?;
                    self.slot.push(Some(self.bufs.ptrs.len()));
                    self.bufs.ptrs.push(p);
                    let fill = match (data, init) {
                        (Some(d), _) => Fill::Host(d),
                        (None, Some(i)) => self.fill_on_device(p, *dtype, *count, i, *seed)?,
                        (None, None) => Fill::None,
                    };
                    match &fill {
                        Fill::Host(d) if !d.is_empty() => {
                            on_cpu += 1;
                            self.copy_in(p, d, "copying inputs")?;
                        }
                        Fill::Device { .. } => on_gpu += 1,
                        _ => {}
                    }
                    self.inits.push(fill);
                    self.params.push(p.to_le_bytes().to_vec());
                }
                ArgSpec::Scalar { dtype, value, .. } => {
                    let mut v = Vec::new();
                    encode(*dtype, *value, &mut v);
                    self.slot.push(None);
                    self.inits.push(Fill::None);
                    self.params.push(v);
                }
            }
        }
        self.arg_ptrs = self
            .params
            .iter_mut()
            .map(|p| p.as_mut_ptr().cast())
            .collect();
        self.sync("generating inputs")?;
        Ok(match (on_gpu, on_cpu) {
            (0, 0) => None,
            (_, 0) => Some("gpu".into()),
            (0, _) => Some(self.cpu_path()),
            _ => Some("gpu+cpu".into()),
        })
    }

    /// `cpu`, with the reason the helpers are not loaded, if they are not.
    fn cpu_path(&self) -> String {
        match &self.helpers {
            Ok(_) => "cpu".into(),
            Err(why) => format!("cpu: {why}"),
        }
    }

    /// The output arguments: (argument index, name, dtype, element count).
    fn outputs(&self) -> impl Iterator<Item = (usize, &'j str, DType, u64)> + 'j {
        self.job
            .args
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match a {
                ArgSpec::Buffer {
                    name,
                    dtype,
                    count,
                    output: true,
                    ..
                } => Some((i, name.as_str(), *dtype, *count)),
                _ => None,
            })
    }

    fn buffer(&self, arg: usize) -> sys::CUdeviceptr {
        self.bufs.ptrs[self.slot[arg].expect("an output is a buffer")]
    }

    /// Poisons (or re-initialises) every output before a run.
    fn reset_outputs(&mut self, poison: bool) -> Result<(), CudaFailure> {
        let outputs: Vec<_> = self.outputs().collect();
        for (i, _, dtype, count) in outputs {
            let p = self.buffer(i);
            let bytes = count as usize * dtype.size();
            match &self.inits[i] {
                Fill::Host(d) if !d.is_empty() => {
                    let d = std::mem::take(&mut self.inits[i]);
                    if let Fill::Host(d) = &d {
                        self.copy_in(p, d, "resetting an output")?;
                    }
                    self.inits[i] = d;
                }
                Fill::Device { .. } => self.refill(i, p)?,
                _ => ck(
                    // SAFETY: the buffer holds `bytes` bytes, on this job's stream.
                    unsafe {
                        cu::memset_d8_async(p, if poison { POISON } else { 0 }, bytes, STREAM)
                    },
                    "poisoning an output",
                )?,
            }
        }
        Ok(())
    }

    fn launch(&self, f: sys::CUfunction, l: &LaunchSpec) -> Result<(), CudaFailure> {
        self.launch_with(f, l, &self.arg_ptrs)
    }

    /// Launches `f` with these parameter pointers (a placement's buffers).
    fn launch_with(
        &self,
        f: sys::CUfunction,
        l: &LaunchSpec,
        args: &[*mut c_void],
    ) -> Result<(), CudaFailure> {
        self.launch_on(STREAM, f, l, args)
    }

    /// Launches `f` on `stream` (the job's, or the capture stream while capturing).
    fn launch_on(
        &self,
        stream: sys::CUstream,
        f: sys::CUfunction,
        l: &LaunchSpec,
        args: &[*mut c_void],
    ) -> Result<(), CudaFailure> {
        let mut args = args.to_vec();
        ck(
            // SAFETY: the parameters match the kernel's (checked against its PTX by the
            // parent) and point at live buffers and scalars.
            unsafe {
                cu::launch_kernel(
                    f,
                    (l.grid[0], l.grid[1], l.grid[2]),
                    (l.block[0], l.block[1], l.block[2]),
                    l.shared_mem,
                    stream,
                    &mut args,
                )
            },
            &format!("launching {}", l.kernel),
        )
    }

    fn sync(&self, during: &str) -> Result<(), CudaFailure> {
        // SAFETY: the stream is live.
        ck(unsafe { cu::stream::synchronize(STREAM) }, during)
    }

    fn read_outputs(&mut self) -> Result<Vec<Vec<u8>>, CudaFailure> {
        let mut out = Vec::new();
        let outputs: Vec<_> = self.outputs().collect();
        for (i, _, dtype, count) in outputs {
            let mut host = vec![0u8; count as usize * dtype.size()];
            self.copy_out(&mut host, self.buffer(i))?;
            out.push(host);
        }
        Ok(out)
    }

    /// The (atol, rtol) of an output.
    fn tolerance(&self, name: &str) -> (f64, f64) {
        self.job.tolerances.get(name).copied().unwrap_or((
            crate::foundation::runspec::DEFAULT_ATOL,
            crate::foundation::runspec::DEFAULT_RTOL,
        ))
    }

    /// Runs the reference and the kernel and compares their outputs: on the device where
    /// the helpers are loaded, else on the CPU. `false` when the job ends here (a failed
    /// check that is not to be timed).
    fn check(&mut self, report: &mut Report, laps: &mut Laps) -> Result<bool, CudaFailure> {
        let (Some(rf), Some(rl)) = (self.reference, self.job.reference.as_ref()) else {
            return Ok(true);
        };
        let checks = if self.helpers.is_ok() {
            self.check_on_device(rf, rl, laps)?
        } else {
            self.reset_outputs(true)?;
            self.launch(rf, rl)?;
            self.sync(&format!("running the reference {}", rl.kernel))?;
            let want = self.read_outputs()?;
            laps.lap_on("reference", Some(self.cpu_path()));
            self.reset_outputs(true)?;
            self.launch(self.kernel, &self.job.kernel)?;
            self.sync(&format!("running {}", self.job.kernel.kernel))?;
            let got = self.read_outputs()?;
            let mut checks = Vec::new();
            for ((_, name, dtype, _), (g, w)) in self.outputs().zip(got.iter().zip(&want)) {
                let (atol, rtol) = self.tolerance(name);
                checks.push(compare_output(name, dtype, g, w, atol, rtol));
            }
            laps.lap_on("check", Some(self.cpu_path()));
            checks
        };
        let passed = checks.iter().all(|c| c.mismatches == 0);
        report.check = Some(checks);
        Ok(passed || self.job.time_on_failure)
    }
}

/// A pair of events around what is timed.
struct Events {
    start: sys::CUevent,
    end: sys::CUevent,
}

impl Drop for Events {
    fn drop(&mut self) {
        // SAFETY: created by `events` and destroyed once; a reused worker runs many jobs in
        // one context, so nothing of a job may outlive it.
        unsafe {
            let _ = cu::event::destroy(self.start);
            let _ = cu::event::destroy(self.end);
        }
    }
}

impl Loaded<'_> {
    fn events(&self) -> Result<Events, CudaFailure> {
        let ev = || {
            ck(
                cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
                "creating an event",
            )
        };
        Ok(Events {
            start: ev()?,
            end: ev()?,
        })
    }

    /// Times `what` (work put on the legacy stream) between the events, in microseconds.
    fn timed(
        &self,
        ev: &Events,
        what: impl FnOnce() -> Result<(), CudaFailure>,
    ) -> Result<f64, CudaFailure> {
        // SAFETY: the events and the stream are live.
        unsafe {
            ck(cu::event::record(ev.start, STREAM), "recording an event")?;
            what()?;
            ck(cu::event::record(ev.end, STREAM), "recording an event")?;
            ck(cu::event::synchronize(ev.end), &self.running())?;
            Ok(f64::from(ck(
                cu::event::elapsed(ev.start, ev.end),
                "reading an event",
            )?) * 1e3)
        }
    }

    /// The job's capture stream, made on first use.
    fn capture_stream(&mut self) -> Result<sys::CUstream, CudaFailure> {
        if let Some(s) = self.capture {
            return Ok(s);
        }
        let s = ck(
            cu::stream::create(cu::stream::StreamKind::NonBlocking),
            "creating a capture stream",
        )?;
        self.capture = Some(s);
        Ok(s)
    }

    /// Captures `launches` launches of the kernel (none: the empty graph) into a graph on
    /// `capture`, with the parameters `args` (a placement's buffers).
    fn graph(
        &self,
        capture: sys::CUstream,
        launches: u32,
        args: &[*mut c_void],
    ) -> Result<sys::CUgraphExec, CudaFailure> {
        // SAFETY: the capture stream is live and only ever captured on.
        unsafe {
            ck(
                cu::stream::begin_capture(
                    capture,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                ),
                "capturing a graph",
            )?;
            for _ in 0..launches {
                if let Err(e) = self.launch_on(capture, self.kernel, &self.job.kernel, args) {
                    // An open capture forbids this thread the calls that free the job's
                    // memory: it is closed before the failure is reported.
                    if let Ok(g) = cu::stream::end_capture(capture) {
                        let _ = cu::graph::destroy(g);
                    }
                    return Err(e);
                }
            }
            let g = ck(cu::stream::end_capture(capture), "capturing a graph")?;
            let exec = ck(
                cu::graph::instantiate(g, sys::CUgraphInstantiate_flags(0)),
                "instantiating a graph",
            );
            // The executable graph does not need the captured one (a reused worker would
            // otherwise keep every job's graphs).
            let _ = cu::graph::destroy(g);
            exec
        }
    }

    /// Warms up, then samples until the noise target (or a limit) is met.
    fn time(
        &mut self,
        t: &Timing,
        report: &mut Report,
        laps: &mut Laps,
    ) -> Result<(), CudaFailure> {
        let ev = self.events()?;
        let knobs = Knobs::for_job(t);
        report.warmup_credit_ms = gpu_busy_lately(self.job.device).or(t.after.map(|a| a.busy_ms));
        let (single_ms, settle_min_ms) = warm_up_plan(
            t.mode == Mode::Graph && knobs.settle,
            t.warmup_ms,
            report.warmup_credit_ms,
            knobs.busy_min_ms,
        );
        self.reset_outputs(false)?;
        let warm_start = Instant::now();
        let busy_from = warm_start;
        while warm_start.elapsed().as_secs_f64() * 1e3 < single_ms || report.warmup_launches < 3 {
            self.timed(&ev, || self.launch(self.kernel, &self.job.kernel))?;
            report.warmup_launches += 1;
        }
        laps.lap("warm-up");
        let mut method = self.method(t, report, &knobs)?;
        laps.lap("set-up");
        let uuid = {
            // SAFETY: a plain query into a local.
            let mut u: sys::CUuuid = unsafe { std::mem::zeroed() };
            (unsafe { sys::cuDeviceGetUuid_v2(&mut u, self.ctx.cu_device()) }
                == sys::CUresult::CUDA_SUCCESS)
                .then(|| crate::engines::fingerprint::cuda::format_uuid(&u.bytes.map(|b| b as u8)))
        };
        let before = nvml_clocks(uuid.as_deref());
        laps.lap("clocks");
        // The settling warm-up runs last, so nothing leaves the GPU idle before the samples.
        let settled = self.settle(
            &mut method,
            report,
            &knobs,
            settle_min_ms,
            t.after.is_some(),
        )?;
        if settled > 0 {
            laps.lap("settle");
        }
        if knobs.gap_ms > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(knobs.gap_ms / 1e3));
        }
        self.sample(t, &mut method, &ev, report, &knobs)?;
        note_gpu_busy(self.job.device, busy_from);
        report.busy_ms = Some(busy_from.elapsed().as_secs_f64() * 1e3);
        laps.lap("sampling");
        let after = nvml_clocks(uuid.as_deref());
        let reasons = knobs.diag.as_ref().and_then(|_| {
            with_nvml_device(uuid.as_deref()?, |dev| {
                let mem = dev
                    .clock_info(nvml_wrapper::enum_wrappers::device::Clock::Memory)
                    .ok();
                Some((dev.current_throttle_reasons().ok()?.bits(), mem))
            })?
        });
        if let (Some((b, max)), Some((a, _))) = (before, after) {
            report.sm_clock_mhz = Some((b, a, max));
            report.throttled = f64::from(a) < 0.75 * f64::from(max);
        }
        laps.lap("clocks");
        if let Some(path) = &knobs.diag {
            diagnose(path, &method, report, settled, reasons);
        }
        Ok(())
    }

    /// Graph mode with [`Knobs::settle`]: takes samples (not kept), the placements in turn
    /// ([`PILOT_RUN`] samples of each in a row, the last counted), until the median of the
    /// last window of counted samples is within [`SETTLE_TOLERANCE`] of the window before
    /// (and `min_ms` passed), or for at most [`SETTLE_MAX_MS`] beyond `min_ms`; then
    /// chooses the placement whose counted samples' median is the lowest, for every sample
    /// after. How many samples it took, counted or not. A later process of a split
    /// measurement (`handed`: the process before kept the GPU busy until moments ago, and
    /// settled) only ranks its placements: one window of counted samples, all of them
    /// ranked, and `min_ms`.
    fn settle(
        &self,
        method: &mut Sampling,
        report: &mut Report,
        knobs: &Knobs,
        min_ms: f64,
        handed: bool,
    ) -> Result<usize, CudaFailure> {
        let Sampling::Graph {
            batch, pilot_batch, ..
        } = method
        else {
            return Ok(0);
        };
        let launches = *pilot_batch;
        // A window of counted samples spans as much GPU time as SETTLE_WINDOW samples of
        // the whole batch, and takes PILOT_RUN times that.
        let window = SETTLE_WINDOW * (*batch / *pilot_batch).max(1) as usize;
        if !knobs.settle {
            // Without a pilot to choose by, the job's own buffers.
            self.choose(method, 0, Vec::new())?;
            return Ok(0);
        }
        let start = Instant::now();
        let mut seen = Vec::new();
        let mut chain = Self::graph_chain(method)?;
        let mut taken = 0;
        while start.elapsed().as_secs_f64() * 1e3 < min_ms + SETTLE_MAX_MS {
            let us = self.graph_sample(method, &mut chain, taken)?;
            taken += 1;
            report.warmup_launches += u64::from(launches);
            // A placement's samples come PILOT_RUN in a row, the last kept: the ones before
            // bring its buffers back into L2 (the placement before evicted them), where
            // the samples after the choice find them. Ranked by their first sample, the
            // placements were ranked by how they read from DRAM: one that came first in
            // most processes measured 0.5% slower than another once chosen (H200).
            if taken % PILOT_RUN != 0 {
                continue;
            }
            seen.push(us);
            let n = seen.len();
            if handed {
                if n >= window && start.elapsed().as_secs_f64() * 1e3 >= min_ms {
                    break;
                }
                continue;
            }
            if n >= 2 * window {
                let med = |s: &[f64]| crate::foundation::stats::median(s).unwrap_or(0.0);
                let (a, b) = (
                    med(&seen[n - 2 * window..n - window]),
                    med(&seen[n - window..]),
                );
                if (b - a).abs() <= SETTLE_TOLERANCE * b
                    && start.elapsed().as_secs_f64() * 1e3 >= min_ms
                {
                    break;
                }
            }
        }
        // Which pages a buffer gets moves an L2-resident kernel by up to 3% (H100, #29),
        // and each process gets others: the fastest of several placements is the one that
        // the next invocation finds again.
        // The choice is made on the settled half of the samples (a whole number of rounds
        // over the placements): the first samples of a job are the GPU still warming up,
        // and whichever placements they fell on would look slower for it.
        let k = method.placements();
        let from = if handed { 0 } else { (seen.len() / 2) / k * k };
        let pilot: Vec<f64> = (0..k)
            .map(|p| {
                let s: Vec<f64> = seen[from..].iter().skip(p).step_by(k).copied().collect();
                crate::foundation::stats::median(&s).unwrap_or(f64::INFINITY)
            })
            .collect();
        let mut ranked: Vec<usize> = (0..k).collect();
        ranked.sort_by(|a, b| pilot[*a].total_cmp(&pilot[*b]));
        let best = ranked
            .get(knobs.rank.min(k.saturating_sub(1)))
            .copied()
            .unwrap_or(0);
        self.choose(method, best, pilot)?;
        Ok(taken)
    }

    /// The time per launch (µs) inside a graph of [`SIZING_LAUNCHES`] launches on the job's
    /// own buffers, launched on `capture` (the median of three timed back to back behind a
    /// fourth, so that no CPU launch latency is in them).
    fn per_launch_us(&self, capture: sys::CUstream) -> Result<f64, CudaFailure> {
        let graph = self.graph(capture, SIZING_LAUNCHES, &self.arg_ptrs)?;
        let times = Chain::times(capture, (graph, 1), graph, 3, &self.running());
        // SAFETY: instantiated above and used no more once its launches are done (waited
        // for here).
        unsafe {
            let _ = cu::stream::synchronize(capture);
            let _ = cu::graph::exec_destroy(graph);
        }
        let median = crate::foundation::stats::median(&times?).unwrap_or(1.0);
        Ok(median / f64::from(SIZING_LAUNCHES))
    }

    /// What a failed wait for the job's kernel says.
    fn running(&self) -> String {
        format!("running {}", self.job.kernel.kernel)
    }

    /// The graph of graph-mode sample `k` and its launches: the chosen placement's graph
    /// once chosen, before that the pilot graph of the placements' `k / PILOT_RUN`-th in
    /// turn.
    fn graph_for(method: &Sampling, k: usize) -> (sys::CUgraphExec, u32) {
        let Sampling::Graph {
            pilots,
            pilot_batch,
            graph,
            batch,
            chosen,
            ..
        } = method
        else {
            unreachable!("graph samples come from graph mode");
        };
        match (chosen, graph) {
            (Some(_), Some(g)) => (*g, *batch),
            (Some(c), None) => (pilots[*c], *pilot_batch),
            (None, _) => (pilots[(k / PILOT_RUN) % pilots.len()], *pilot_batch),
        }
    }

    /// Graph-mode samples, timed back to back on the sampling's stream: the chain, its
    /// lead launched and the first sample queued. Once a placement is chosen its own graph
    /// leads (a sample's time at least, and its buffers in L2 for the first sample).
    fn graph_chain(method: &Sampling) -> Result<Chain, CudaFailure> {
        let Sampling::Graph {
            stream,
            lead,
            chosen,
            ..
        } = method
        else {
            unreachable!("graph samples come from graph mode");
        };
        let first = Self::graph_for(method, 0).0;
        let mut chain = Chain::new(*stream, 2)?;
        chain.lead(if chosen.is_some() { first } else { *lead }, 1)?;
        chain.push(first)?;
        Ok(chain)
    }

    /// Samples the placement at `rank` (wrapping) in the settling warm-up's ranking from
    /// now on, where the warm-up ranked them.
    fn burst_placement(&self, method: &mut Sampling, rank: usize) -> Result<(), CudaFailure> {
        let Sampling::Graph { pilot, chosen, .. } = &*method else {
            return Ok(());
        };
        if pilot.is_empty() {
            return Ok(());
        }
        let mut ranked: Vec<usize> = (0..pilot.len()).collect();
        ranked.sort_by(|a, b| pilot[*a].total_cmp(&pilot[*b]));
        let which = ranked[rank % ranked.len()];
        if *chosen == Some(which) {
            return Ok(());
        }
        let medians = pilot.clone();
        self.choose(method, which, medians)
    }

    /// Before a burst: [`Knobs::burst_idle_ms`] of idle GPU (once the work queued has run),
    /// then the chosen graph launched, untimed, for about [`Knobs::burst_rewarm_ms`] of the
    /// GPU's time, at least once (sized by the samples so far, µs per launch; before any, by
    /// the longest a graph sample takes).
    fn idle_and_rewarm(
        &self,
        method: &Sampling,
        samples_us: &[f64],
        knobs: &Knobs,
    ) -> Result<(), CudaFailure> {
        let Sampling::Graph { stream, .. } = method else {
            return Ok(());
        };
        // SAFETY: the live stream.
        ck(unsafe { cu::stream::synchronize(*stream) }, &self.running())?;
        std::thread::sleep(std::time::Duration::from_secs_f64(
            knobs.burst_idle_ms / 1e3,
        ));
        let (graph, launches) = Self::graph_for(method, samples_us.len());
        let per_graph_us = crate::foundation::stats::median(samples_us)
            .map_or(GRAPH_SAMPLE_US, |us| us * f64::from(launches));
        let n = (knobs.burst_rewarm_ms * 1e3 / per_graph_us.max(1.0))
            .ceil()
            .clamp(1.0, 10_000.0) as u32;
        // SAFETY: a live graph on its live stream.
        unsafe {
            for _ in 0..n {
                ck(cu::graph::launch(graph, *stream), "launching a graph")?;
            }
        }
        Ok(())
    }

    /// Graph-mode sample `k` (µs per launch) from `chain`, which has it queued: sample
    /// `k + 1` is queued first, so that the GPU goes on to it without waiting.
    fn graph_sample(
        &self,
        method: &Sampling,
        chain: &mut Chain,
        k: usize,
    ) -> Result<f64, CudaFailure> {
        let Sampling::Graph { overhead, .. } = method else {
            unreachable!("graph samples come from graph mode");
        };
        chain.push(Self::graph_for(method, k + 1).0)?;
        let us = chain.pop(&self.running())?;
        let launches = Self::graph_for(method, k).1;
        Ok((us - overhead).max(0.0) / f64::from(launches))
    }

    /// Parameter pointers for `k` placements of the job's buffers: the job's own, and
    /// `k - 1` copies of every buffer at other addresses (scalars are shared). Fewer where
    /// the copies would take more than a quarter of the free memory or [`PLACEMENT_BYTES`].
    fn placements(&mut self, k: usize) -> Result<Vec<Vec<*mut c_void>>, CudaFailure> {
        let mut sets = vec![self.arg_ptrs.clone()];
        let bytes: u64 = self
            .job
            .args
            .iter()
            .map(|a| match a {
                ArgSpec::Buffer { dtype, count, .. } => count * dtype.size() as u64,
                ArgSpec::Scalar { .. } => 0,
            })
            .sum();
        let (free, _) = ck(cu::mem_get_info(), "querying memory")?;
        let fit = (free as u64 / 4).min(PLACEMENT_BYTES) / bytes.max(1);
        for _ in 1..k.min(fit as usize + 1) {
            let mut set = Vec::new();
            for (i, a) in self.job.args.iter().enumerate() {
                let ArgSpec::Buffer { dtype, count, .. } = a else {
                    set.push(self.arg_ptrs[i]);
                    continue;
                };
                let n = (*count as usize * dtype.size()).max(1);
                // SAFETY: freed by `bufs`; the copy stays inside both buffers.
                let p = unsafe {
                    let p = ck(cu::malloc_sync(n), "allocating a placement")?;
                    self.bufs.ptrs.push(p);
                    ck(
                        cu::memcpy_dtod_async(p, self.buffer_of(i), n, STREAM),
                        "copying a placement",
                    )?;
                    p
                };
                self.extra_params.push(p.to_le_bytes().to_vec());
                let last = self.extra_params.last_mut().expect("pushed");
                set.push(last.as_mut_ptr().cast());
            }
            sets.push(set);
        }
        self.sync("copying a placement")?;
        Ok(sets)
    }

    fn buffer_of(&self, arg: usize) -> sys::CUdeviceptr {
        self.bufs.ptrs[self.slot[arg].expect("a buffer")]
    }

    /// How samples are taken in this mode: the L2 flush buffer (cold), or the graph of a
    /// batch of launches and the GPU time of an empty graph behind queued work, which each
    /// sample's time has subtracted before it is divided by the batch (graph, as nvbench's
    /// batch measurements are meant to exclude launch costs).
    fn method(
        &mut self,
        t: &Timing,
        report: &mut Report,
        knobs: &Knobs,
    ) -> Result<Sampling, CudaFailure> {
        match t.mode {
            Mode::Hot => {
                report.launches_per_sample = 1;
                Ok(Sampling::Single { flush: None })
            }
            Mode::Cold => {
                // Cold samples flush L2 with a memset over twice its size between samples.
                let l2 = {
                    let v = self
                        .ctx
                        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
                        .unwrap_or(1 << 20);
                    (v.max(1 << 20) as usize) * 2
                };
                // SAFETY: freed by `bufs`.
                let p = ck(
                    unsafe { cu::malloc_sync(l2) },
                    "allocating the L2 flush buffer",
                )?;
                self.bufs.ptrs.push(p);
                report.launches_per_sample = 1;
                Ok(Sampling::Single {
                    flush: Some((p, l2)),
                })
            }
            Mode::Graph => {
                // Enough launches per sample to make the sample at most GRAPH_SAMPLE_US long
                // and more than half of it, so that an event tick (0.5 µs at worst) is at
                // most 0.05% of it.
                // A power of two, so that invocations whose launch times differ a little
                // still time the same batch. The time per launch is taken inside a graph:
                // a single launch's time includes the CPU's launch latency, which moved one
                // kernel's batch between 64 and 512 from one process to the next (H100).
                let capture = self.capture_stream()?;
                let per_launch = self.per_launch_us(capture)?;
                let batch = ((knobs.graph_us / per_launch.max(0.5)) as u32).clamp(16, 8192);
                let batch = 1u32 << (31 - batch.leading_zeros());
                let batch = steady_batch(
                    format!(
                        "{}|{:?}|{:?}",
                        self.job.device, self.job.kernel, self.job.args
                    ),
                    batch,
                    t.after.map(|a| a.batch),
                );
                report.launches_per_sample = batch;
                // The settling warm-up compares the placements in short graphs (a graph's
                // instantiation costs about 3 us a launch: 17 graphs of 512 took 23 to 33
                // ms of a 0.28 s job on an H200, 17 of 64 launches 2.7 ms;
                // `benches/gpu_graph_build.sh`); only the chosen placement gets a graph of
                // the whole batch.
                let pilot_batch = (batch / PILOT_DIVISOR).max(SIZING_LAUNCHES).min(batch);
                let sets = self.placements(knobs.placements)?;
                // Until the sampling owns them, the graphs made are destroyed on an error.
                let mut made = GraphExecs(Vec::new(), capture);
                for set in &sets {
                    made.0.push(self.graph(capture, pilot_batch, set)?);
                }
                let empty = self.graph(capture, 0, &[])?;
                made.0.push(empty);
                // What is launched before a chain of timed graphs, to keep the GPU busy
                // while they are queued: at least LEAD_US of the kernel's launches.
                let lead_launches =
                    ((LEAD_US / per_launch.max(0.01)).ceil() as u32).clamp(1, batch);
                let lead = self.graph(capture, lead_launches, &self.arg_ptrs)?;
                made.0.push(lead);
                // The legacy stream's work is done (the warm-up and the placements' copies
                // were waited for): the capture stream, which does not wait for it, runs
                // the graphs from here on. The empty graph's cost is its GPU time behind
                // the lead, as the samples' are.
                // The lead is launched several times: the CPU queues all the empty graphs
                // behind it.
                let costs = Chain::times(
                    capture,
                    (lead, OVERHEAD_LEADS),
                    empty,
                    GRAPH_OVERHEAD_RUNS,
                    &self.running(),
                )?;
                let overhead = crate::foundation::stats::median(&costs).unwrap_or(0.0);
                report.graph_overhead_us = Some(overhead);
                // The sampling owns them from here (`made`): the pilots, less the last two
                // (`empty` and `lead`).
                let pilots = made.0[..made.0.len() - 2].to_vec();
                Ok(Sampling::Graph {
                    owned: made,
                    pilots,
                    pilot_batch,
                    sets,
                    graph: None,
                    lead,
                    stream: capture,
                    batch,
                    overhead,
                    costs,
                    chosen: None,
                    pilot: Vec::new(),
                })
            }
        }
    }

    /// Samples placement `which` of graph mode from now on (`medians`: the settling
    /// warm-up's, one per placement): its graph of the whole batch is made (the pilot's
    /// graph, where that is the whole batch), while the pilot's graphs keep the GPU busy.
    fn choose(
        &self,
        method: &mut Sampling,
        which: usize,
        medians: Vec<f64>,
    ) -> Result<(), CudaFailure> {
        let Sampling::Graph {
            owned,
            pilots,
            pilot_batch,
            sets,
            graph,
            stream,
            batch,
            chosen,
            pilot,
            ..
        } = method
        else {
            return Ok(());
        };
        *chosen = Some(which);
        *pilot = medians;
        if *pilot_batch == *batch {
            return Ok(());
        }
        // Enough of the pilot's graphs queued to cover the instantiation (about 3 us a
        // launch), so that the GPU does not idle and cool down before the samples.
        let pilot_us = pilot.get(which).copied().unwrap_or(f64::INFINITY) * f64::from(*pilot_batch);
        let cover = if pilot_us.is_finite() {
            (INSTANTIATE_US_PER_LAUNCH * f64::from(*batch) / pilot_us.max(1.0)).ceil() as u32
        } else {
            0
        };
        for _ in 0..cover.min(4096) {
            // SAFETY: a live graph on the live capture stream.
            ck(
                unsafe { cu::graph::launch(pilots[which], *stream) },
                "launching a graph",
            )?;
        }
        let g = self.graph(*stream, *batch, &sets[which])?;
        owned.0.push(g);
        *graph = Some(g);
        // Its first launch uploads it: not a sample.
        // SAFETY: as above.
        ck(
            unsafe { cu::graph::launch(g, *stream) },
            "launching a graph",
        )
    }

    /// Takes samples until the noise target is met with enough samples and time, or a limit.
    fn sample(
        &self,
        t: &Timing,
        method: &mut Sampling,
        ev: &Events,
        report: &mut Report,
        knobs: &Knobs,
    ) -> Result<(), CudaFailure> {
        let graph = matches!(method, Sampling::Graph { .. });
        // Graph mode's bursts: the idle between them is not sampling time.
        let bursts = if graph { knobs.bursts } else { 1 };
        if bursts > 1 {
            // The first burst comes after the same idle and re-warm as every later one: with
            // 100 ms of idle, a GPU busy for the whole warm-up ran 0.4-0.6% slower than one
            // woken 25 ms before (H200), so a first burst straight after the warm-up would
            // stand apart.
            self.idle_and_rewarm(method, &report.samples_us, knobs)?;
        }
        let sampling = Instant::now();
        let mut flush_byte = 0u8;
        let (mut chain, flush) = match *method {
            Sampling::Graph { .. } => (Some(Self::graph_chain(method)?), None),
            Sampling::Single { flush } => (None, flush),
        };
        let mut burst = 1;
        let mut idle = std::time::Duration::ZERO;
        let mut burst_begins = false;
        loop {
            let us = match chain.as_mut() {
                Some(chain) => self.graph_sample(method, chain, report.samples_us.len())?,
                None => {
                    if let Some((p, l2)) = flush {
                        flush_byte = flush_byte.wrapping_add(1);
                        // SAFETY: the flush buffer holds `l2` bytes.
                        ck(
                            unsafe { cu::memset_d8_async(p, flush_byte, l2, STREAM) },
                            "flushing L2",
                        )?;
                    }
                    self.timed(ev, || self.launch(self.kernel, &self.job.kernel))?
                }
            };
            if burst_begins {
                // Marked at its first sample, so that a burst is never empty.
                report.burst_starts.push(report.samples_us.len());
                burst_begins = false;
            }
            report.samples_us.push(us);
            let n = report.samples_us.len();
            let spent = (sampling.elapsed() - idle).as_secs_f64() * 1e3;
            if burst < bursts
                && n * bursts >= t.min_samples * burst
                && spent * bursts as f64 >= t.min_time_ms * burst as f64
                && let Some(c) = chain.as_mut()
            {
                // The sample queued behind the last one is not kept; the GPU goes idle.
                c.pop(&self.running())?;
                let pause = Instant::now();
                if knobs.burst_placements {
                    self.burst_placement(method, knobs.rank + burst)?;
                }
                self.idle_and_rewarm(method, &report.samples_us, knobs)?;
                idle += pause.elapsed();
                chain = Some(Self::graph_chain(method)?);
                burst += 1;
                burst_begins = true;
                continue;
            }
            if burst == bursts
                && n >= t.min_samples
                && spent >= t.min_time_ms
                && crate::foundation::stats::median_rel_noise(&report.samples_us) <= t.max_noise
            {
                report.converged = true;
                return Ok(());
            }
            if n >= t.max_samples || spent >= t.budget_ms {
                return Ok(());
            }
        }
    }
}

/// The timing setting of graph mode's bursts ([`Knobs::bursts`]).
pub const BURSTS_SETTING: &str = "REPRO_TIMING_BURSTS";

/// The bursts `t` samples in: [`Knobs::bursts`] in graph mode (its setting, or the
/// default), one in the others.
pub fn bursts(t: &Timing) -> usize {
    match t.mode {
        Mode::Graph => Knobs::for_job(t).bursts,
        Mode::Cold | Mode::Hot => 1,
    }
}

/// The longest graph-mode sample (µs): samples are 1 to 2 ms (the batch is a power of two),
/// a 0.5 µs event tick at most 0.05% of one. (Until the batch was sized inside a graph this
/// was 5 ms of single launches, whose CPU launch latency made the samples of a 3 us kernel
/// about 1.4 ms.)
const GRAPH_SAMPLE_US: f64 = 2000.0;

/// Graph mode's bursts of samples by default (see [`Knobs::bursts`]), each of the next
/// placement in the settling warm-up's ranking ([`Knobs::burst_placements`]): the mean of
/// the four fastest placements' medians had a CV between invocations of 0.200% and 0.167%
/// (without idle) where the fastest one's had 0.370% (`benches/gpu_processes.py`, one
/// H200, 30 invocations each); a rare placement 1% faster than the rest had made a whole
/// invocation an outlier.
const BURSTS: usize = 4;

/// The idle GPU time before each burst (ms) by default: none. An idle GPU comes back at a
/// level of its own (`benches/gpu_level_idle.sh`), but bursts of one placement after
/// 100 ms of idle did not narrow the spread between invocations (0.308% against 0.280%,
/// 20 invocations), nor did idle help bursts over placements.
const BURST_IDLE_MS: f64 = 0.0;

/// The GPU time a burst's re-warm takes (ms) by default, as level_idle's 20 graph launches. With
/// no idle, 2 ms or one launch saved 0.3 s a small-kernel bisection and moved no median, but
/// the spread between invocations was no narrower (`benches/gpu_processes.py`, two H200s).
const REWARM_MS: f64 = 25.0;

/// The settling warm-up's samples of a placement in a row; the last is the one kept.
const PILOT_RUN: usize = 2;

/// Launches in the graph whose time per launch sizes graph mode's batch.
const SIZING_LAUNCHES: u32 = 16;

/// The settling warm-up's graphs (one per placement) hold this fraction of the batch, at
/// least [`SIZING_LAUNCHES`]: 64 launches for a batch of 512.
const PILOT_DIVISOR: u32 = 8;

/// About how long capturing and instantiating a graph take per launch in it (µs; 2.7 to
/// 3.8 on an H200, `benches/gpu_graph_build.sh`, rounded up).
const INSTANTIATE_US_PER_LAUNCH: f64 = 4.0;

/// Launches of the empty graph whose median time is a graph sample's fixed cost.
const GRAPH_OVERHEAD_RUNS: usize = 21;

/// How one sample is taken.
enum Sampling {
    /// One launch, after an L2 flush (buffer, bytes) when cold.
    Single {
        flush: Option<(sys::CUdeviceptr, usize)>,
    },
    /// Graphs of `batch` launches of the chosen placement of the buffers, less the empty
    /// graph's `overhead` (µs, the median of `costs`); before the choice (the settling
    /// warm-up), graphs of `pilot_batch` launches, one per placement, taken in turn
    /// ([`PILOT_RUN`] of a placement in a row).
    Graph {
        /// Every graph below, destroyed with the sampling (also where it ended in an
        /// error: a reused child keeps its context across jobs).
        owned: GraphExecs,
        /// One per placement (`sets`: its parameters), of `pilot_batch` launches.
        pilots: Vec<sys::CUgraphExec>,
        pilot_batch: u32,
        sets: Vec<Vec<*mut c_void>>,
        /// The chosen placement's graph of `batch` launches, once chosen (None while
        /// `pilot_batch` is the whole batch: its pilot is sampled).
        graph: Option<sys::CUgraphExec>,
        /// Launched before a [`Chain`] of samples (not timed): at least [`LEAD_US`] of the
        /// kernel's launches.
        lead: sys::CUgraphExec,
        /// The capture stream, where the graphs run and are timed.
        stream: sys::CUstream,
        batch: u32,
        overhead: f64,
        costs: Vec<f64>,
        /// The placement sampled once the settling warm-up chose it by the medians of its
        /// `pilot` samples, one per placement.
        chosen: Option<usize>,
        pilot: Vec<f64>,
    },
}

impl Sampling {
    /// How many placements the settling warm-up compares (none but in graph mode).
    fn placements(&self) -> usize {
        match self {
            Sampling::Graph { pilots, .. } => pilots.len(),
            Sampling::Single { .. } => 0,
        }
    }
}

/// Graphs timed back to back on one stream: each is timed from the event that ends the one
/// before it to its own, and the next is queued before the time of one is read, so the GPU
/// never waits for the CPU between two of them and a time is the GPU's alone. Timed one at a
/// time, a sample's start event ran on an idle GPU while the CPU was still launching the
/// graph, and that launch latency, which moves with the CPU's state from one process to the
/// next, was in every sample (nvbench holds its launches behind a blocking kernel for the
/// same reason). A lead, launched before the first event and not timed, keeps the GPU busy
/// while the first ones are queued.
struct Chain {
    /// Reused in turn: at most `events.len() - 1` graphs in flight.
    events: Vec<sys::CUevent>,
    stream: sys::CUstream,
    /// Graphs queued so far; `events[i % events.len()]` starts graph `i`.
    queued: usize,
    /// Graphs whose time was read so far.
    read: usize,
}

impl Chain {
    /// A chain on `stream` that keeps at most `in_flight` graphs queued and unread.
    fn new(stream: sys::CUstream, in_flight: usize) -> Result<Chain, CudaFailure> {
        let mut chain = Chain {
            events: Vec::with_capacity(in_flight + 1),
            stream,
            queued: 0,
            read: 0,
        };
        for _ in 0..=in_flight {
            // Pushed as made: the drop destroys those made before a failure.
            chain.events.push(ck(
                cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
                "creating an event",
            )?);
        }
        Ok(chain)
    }

    /// The times (µs) of `n` launches of `graph` queued at once behind `lead` launched so
    /// many times (`during`: what a failure to wait for them says).
    fn times(
        stream: sys::CUstream,
        (lead, leads): (sys::CUgraphExec, u32),
        graph: sys::CUgraphExec,
        n: usize,
        during: &str,
    ) -> Result<Vec<f64>, CudaFailure> {
        let mut chain = Chain::new(stream, n)?;
        chain.lead(lead, leads)?;
        for _ in 0..n {
            chain.push(graph)?;
        }
        (0..n).map(|_| chain.pop(during)).collect()
    }

    /// Launches `lead` (not timed) `times` times and starts the chain after it; every
    /// graph queued before must have been read.
    fn lead(&mut self, lead: sys::CUgraphExec, times: u32) -> Result<(), CudaFailure> {
        debug_assert_eq!(self.queued, self.read, "a chain restarts once read");
        // SAFETY: a live graph and event on a live stream.
        unsafe {
            for _ in 0..times {
                ck(cu::graph::launch(lead, self.stream), "launching a graph")?;
            }
            ck(
                cu::event::record(self.events[self.queued % self.events.len()], self.stream),
                "recording an event",
            )
        }
    }

    /// Queues `graph` and the event that ends it.
    fn push(&mut self, graph: sys::CUgraphExec) -> Result<(), CudaFailure> {
        debug_assert!(
            self.queued - self.read < self.events.len() - 1,
            "too many in flight"
        );
        // SAFETY: as above.
        unsafe {
            ck(cu::graph::launch(graph, self.stream), "launching a graph")?;
            ck(
                cu::event::record(
                    self.events[(self.queued + 1) % self.events.len()],
                    self.stream,
                ),
                "recording an event",
            )?;
        }
        self.queued += 1;
        Ok(())
    }

    /// The time (µs) of the oldest graph queued and not yet read, once it has run
    /// (`during`: what a failure to wait for it says).
    fn pop(&mut self, during: &str) -> Result<f64, CudaFailure> {
        debug_assert!(self.read < self.queued, "nothing queued");
        let (a, b) = (
            self.events[self.read % self.events.len()],
            self.events[(self.read + 1) % self.events.len()],
        );
        // SAFETY: both events were recorded on the live stream.
        let ms = unsafe {
            ck(cu::event::synchronize(b), during)?;
            ck(cu::event::elapsed(a, b), "reading an event")?
        };
        self.read += 1;
        Ok(f64::from(ms) * 1e3)
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        for e in &self.events {
            // SAFETY: created by `new` and destroyed once; an event still pending is
            // released by the driver once it completes.
            let _ = unsafe { cu::event::destroy(*e) };
        }
    }
}

/// The least GPU time (µs) of a [`Chain`]'s lead: longer than the CPU takes to queue the
/// graph after it and its events (a few µs).
const LEAD_US: f64 = 100.0;

/// Leads launched before the empty graphs whose cost is measured, which are queued at once
/// (21 graph launches and events, about 3 µs each on the CPU, behind 800 µs of the GPU's).
const OVERHEAD_LEADS: u32 = 8;

/// Executable graphs destroyed when dropped, once the stream that runs them has run them
/// (an error may leave some queued there).
struct GraphExecs(Vec<sys::CUgraphExec>, sys::CUstream);

impl Drop for GraphExecs {
    fn drop(&mut self) {
        // SAFETY: the stream is live (the job's drop destroys it); each graph was
        // instantiated once, and nothing launches it any more.
        unsafe {
            let _ = cu::stream::synchronize(self.1);
            for g in &self.0 {
                let _ = cu::graph::exec_destroy(*g);
            }
        }
    }
}

/// How a job warms up: the single launches' time and graph mode's least settling (ms),
/// for a warm-up of `warmup_ms` (`settles`: graph mode with its settling). Warm-up is
/// launching until warmup_ms has passed (clocks ramp up, caches and TLBs fill). Graph
/// mode's settling warms up better (graphs back to back, not single launches with a wait
/// after each): after [`GRAPH_SIZING_MS`] of single launches, the rest of the warm-up is
/// settled, at least [`SETTLE_MIN_MS`]. Where this worker's last job kept the GPU busy
/// until moments ago for `busy` ms (a bisection's or a sweep's later jobs), that time
/// counts toward the warm-up, which lasts at least `busy_min_ms` more: the clocks have not
/// gone back to idle. Graph mode then needs only the 3 single launches every job makes (its
/// settling's two windows must agree besides); the single launches of the other modes never last longer than the
/// warm-up asked for (`--warmup 0ms` has none).
fn warm_up_plan(settles: bool, warmup_ms: f64, busy: Option<f64>, busy_min_ms: f64) -> (f64, f64) {
    match (settles, busy) {
        (true, Some(busy_ms)) => (0.0, (warmup_ms - busy_ms).max(busy_min_ms)),
        (true, None) => {
            let single = warmup_ms.min(GRAPH_SIZING_MS);
            (single, (warmup_ms - single).max(SETTLE_MIN_MS))
        }
        (false, Some(busy_ms)) => (
            (warmup_ms - busy_ms).max(busy_min_ms.min(warmup_ms)),
            SETTLE_MIN_MS,
        ),
        (false, None) => (warmup_ms, SETTLE_MIN_MS),
    }
}

/// The device this process last finished sampling on, when, and for how long (ms) it had
/// kept that GPU busy before (from its warm-up on).
static LAST_BUSY: std::sync::Mutex<Option<(usize, Instant, f64)>> = std::sync::Mutex::new(None);

/// Notes that `device` was kept busy from `from` (the job's warm-up) until now.
fn note_gpu_busy(device: usize, from: Instant) {
    if let Ok(mut last) = LAST_BUSY.lock() {
        *last = Some((device, Instant::now(), from.elapsed().as_secs_f64() * 1e3));
    }
}

/// How long (ms) this process's last job kept `device` busy (its warm-up to the end of its
/// sampling), where that job ran on `device` and ended less than [`BUSY_LATELY_MS`] ago.
fn gpu_busy_lately(device: usize) -> Option<f64> {
    let (on, at, ms) = (*LAST_BUSY.lock().ok()?)?;
    (on == device && at.elapsed().as_secs_f64() * 1e3 < BUSY_LATELY_MS).then_some(ms)
}

/// How recent a worker's last sampling must be to count toward the next job's warm-up
/// (ms): a bisection's next job starts within tens of milliseconds.
const BUSY_LATELY_MS: f64 = 500.0;

/// The batch for graph mode's samples of a launch (`key`: the device, the kernel and its
/// launch and arguments) whose single launches suggest `natural`: the batch this process
/// used for the same launch before, where `natural` is within a power of two of it. A
/// launch time near a power of two's boundary would otherwise time the same kernel in
/// batches of 256 in one job and 512 in the next (vector_add over 1M floats on an H100,
/// #29), and a batch's size moves the time per launch: a bisection's worker times every
/// commit in the batch of its first, unless a commit's kernel is more than twice as fast
/// or slow.
///
/// `handed`: the batch another process of the same measurement timed (this process has
/// none of its own for the launch yet), kept as this process's own would be.
fn steady_batch(key: String, natural: u32, handed: Option<u32>) -> u32 {
    static BATCHES: std::sync::Mutex<Vec<(String, u32)>> = std::sync::Mutex::new(Vec::new());
    let mut batches = BATCHES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let i = batches.iter().position(|(k, _)| *k == key);
    let batch = kept_batch(i.map(|i| batches[i].1).or(handed), natural);
    match i {
        Some(i) => batches[i].1 = batch,
        None => batches.push((key, batch)),
    }
    batch
}

/// `before` where `natural` is within a factor of two of it, else `natural`.
fn kept_batch(before: Option<u32>, natural: u32) -> u32 {
    match before {
        Some(b) if natural / 2 <= b && b <= natural.saturating_mul(2) => b,
        _ => natural,
    }
}

/// How graph-mode samples are taken: settings that benches/gpu_bench_phases.py varies to
/// find what moves a small kernel's median between invocations (#29), from the
/// environment (`REPRO_TIMING_PLACEMENTS`, `REPRO_TIMING_PLACEMENT_RANK`,
/// `REPRO_TIMING_GRAPH_US`, `REPRO_TIMING_SETTLE`,
/// `REPRO_TIMING_BUSY_MIN_MS`, `REPRO_TIMING_GAP_MS`, `REPRO_TIMING_PROCESSES`, and
/// `REPRO_TIMING_DIAG`, a file each job appends a line of its figures to).
struct Knobs {
    placements: usize,
    /// Which placement the settling warm-up chooses, by the rank of its median: 0 the
    /// fastest (`REPRO_TIMING_PLACEMENT_RANK`).
    rank: usize,
    graph_us: f64,
    settle: bool,
    /// The least warm-up (ms: graph mode's settling, the other modes' single launches) of a
    /// job whose worker kept the GPU busy until moments ago (`REPRO_TIMING_BUSY_MIN_MS`).
    busy_min_ms: f64,
    gap_ms: f64,
    /// [`Timing::processes`] (`REPRO_TIMING_PROCESSES`).
    processes: usize,
    /// Graph mode's samples come in this many bursts (`REPRO_TIMING_BURSTS`, [`BURSTS`]),
    /// each after `burst_idle_ms` of idle GPU (`REPRO_TIMING_BURST_IDLE_MS`,
    /// [`BURST_IDLE_MS`]) and a re-warm, and the job's median is the mean of the bursts'
    /// medians.
    bursts: usize,
    burst_idle_ms: f64,
    /// The GPU time a burst's re-warm takes (ms; `REPRO_TIMING_BURST_REWARM_MS`,
    /// [`REWARM_MS`]): at least one graph of the burst's placement.
    burst_rewarm_ms: f64,
    /// Each burst after the first samples the next placement in the settling warm-up's
    /// ranking (`REPRO_TIMING_BURST_PLACEMENTS`: 1, the default, or 0 for the chosen one
    /// throughout), so that a rare placement faster than the rest weighs as one burst of
    /// several, not as the whole job.
    burst_placements: bool,
    diag: Option<String>,
}

/// The timing settings there are (any other `REPRO_TIMING_*` name is a mistake).
const TIMING_SETTINGS: [&str; 12] = [
    "REPRO_TIMING_PLACEMENTS",
    "REPRO_TIMING_BURSTS",
    "REPRO_TIMING_BURST_IDLE_MS",
    "REPRO_TIMING_BURST_REWARM_MS",
    "REPRO_TIMING_BURST_PLACEMENTS",
    "REPRO_TIMING_PLACEMENT_RANK",
    "REPRO_TIMING_GRAPH_US",
    "REPRO_TIMING_SETTLE",
    "REPRO_TIMING_BUSY_MIN_MS",
    "REPRO_TIMING_GAP_MS",
    "REPRO_TIMING_PROCESSES",
    "REPRO_TIMING_DIAG",
];

impl Knobs {
    /// The settings a job is timed with: its own ([`Timing::settings`]), and where this
    /// worker writes its figures (`REPRO_TIMING_DIAG`). The worker checked the job's with
    /// [`Job::check`] when it read it; were one not to read here, the job would time with
    /// every default.
    fn for_job(t: &Timing) -> Knobs {
        let mut vars = vars_of(&t.settings);
        vars.retain(|(k, _)| k != "REPRO_TIMING_DIAG");
        if let Some(d) = std::env::var_os("REPRO_TIMING_DIAG") {
            vars.push(("REPRO_TIMING_DIAG".into(), d));
        }
        Self::read(&vars).unwrap_or_else(|_| Self::read(&[]).expect("the defaults read"))
    }

    fn from_env() -> Result<Knobs, TimingSettingError> {
        Self::read(&env_settings())
    }

    /// The settings `vars` (the `REPRO_TIMING_*` variables set) give, unset or empty ones
    /// the default; a value that is not one of the setting's, or a name that is no setting,
    /// is an error naming it.
    fn read(vars: &[(String, std::ffi::OsString)]) -> Result<Knobs, TimingSettingError> {
        let fail = |name: &str, value: &std::ffi::OsStr, allowed: &str| TimingSettingError {
            name: name.to_string(),
            value: value.to_string_lossy().into_owned(),
            allowed: allowed.to_string(),
        };
        if let Some((name, value)) = vars
            .iter()
            .find(|(k, _)| !TIMING_SETTINGS.contains(&k.as_str()))
        {
            return Err(fail(name, value, "a timing setting"));
        }
        // The setting's text, where set to something; not UTF-8 is not any setting's value.
        let get = |name: &str, allowed: &str| -> Result<Option<String>, TimingSettingError> {
            let Some((_, v)) = vars.iter().find(|(k, _)| k == name) else {
                return Ok(None);
            };
            let text = v.to_str().ok_or_else(|| fail(name, v, allowed))?.trim();
            Ok((!text.is_empty()).then(|| text.to_string()))
        };
        let number = |name: &str, lo: f64, hi: f64, dflt: f64| -> Result<f64, TimingSettingError> {
            let allowed = format!("a number from {lo} to {hi}");
            match get(name, &allowed)? {
                None => Ok(dflt),
                Some(t) => match t.parse::<f64>() {
                    Ok(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(x),
                    _ => Err(fail(name, t.as_ref(), &allowed)),
                },
            }
        };
        // A whole number in `lo..=hi`, written in digits only (no sign, point or exponent).
        let whole = |name: &str, lo: usize, hi: usize, dflt: usize| {
            let allowed = format!("a whole number from {lo} to {hi}");
            match get(name, &allowed)? {
                None => Ok(dflt),
                Some(t) => t
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| t.parse::<usize>().ok())
                    .flatten()
                    .filter(|n| (lo..=hi).contains(n))
                    .ok_or_else(|| fail(name, t.as_ref(), &allowed)),
            }
        };
        let placements = whole("REPRO_TIMING_PLACEMENTS", 1, 64, PLACEMENTS)?;
        let rank = whole("REPRO_TIMING_PLACEMENT_RANK", 0, 63, 0)?;
        let settle = match get("REPRO_TIMING_SETTLE", "1 (settle) or 0 (do not)")?.as_deref() {
            None => SETTLE,
            Some("1") => true,
            Some("0") => false,
            Some(other) => {
                return Err(fail(
                    "REPRO_TIMING_SETTLE",
                    other.as_ref(),
                    "1 (settle) or 0 (do not)",
                ));
            }
        };
        Ok(Knobs {
            placements,
            rank,
            graph_us: number("REPRO_TIMING_GRAPH_US", 100.0, 1e6, GRAPH_SAMPLE_US)?,
            settle,
            busy_min_ms: number("REPRO_TIMING_BUSY_MIN_MS", 0.0, 10_000.0, BUSY_MIN_MS)?,
            gap_ms: number("REPRO_TIMING_GAP_MS", 0.0, 10_000.0, 0.0)?,
            processes: whole("REPRO_TIMING_PROCESSES", 1, 16, 1)?,
            bursts: whole("REPRO_TIMING_BURSTS", 1, 16, BURSTS)?,
            burst_idle_ms: number("REPRO_TIMING_BURST_IDLE_MS", 0.0, 10_000.0, BURST_IDLE_MS)?,
            burst_rewarm_ms: number("REPRO_TIMING_BURST_REWARM_MS", 0.0, 1_000.0, REWARM_MS)?,
            burst_placements: whole("REPRO_TIMING_BURST_PLACEMENTS", 0, 1, 1)? == 1,
            diag: get("REPRO_TIMING_DIAG", "a file's path")?,
        })
    }
}

impl Timing {
    /// In how many worker processes, one after the other, the samples are taken
    /// (`REPRO_TIMING_PROCESSES`, default 1): each process a share of the time and the
    /// samples ([`Timing::share`]), all pooled (`engines::bench::run_split`). The child
    /// never splits a job; its parent does.
    pub fn processes(&self) -> usize {
        Knobs::for_job(self).processes
    }

    /// The timing of the next of `left` processes still to run, of [`Timing::processes`]
    /// in all, once `taken` samples were: an equal share of the sampling time and the
    /// budget, and of the samples still to take (the least and the most, rounded up), as
    /// one process, after what the one before left (`None` for the first).
    pub fn share(&self, left: usize, taken: usize, after: Option<After>) -> Timing {
        let (k, left) = (self.processes() as f64, left.max(1));
        let min_samples = self.min_samples.saturating_sub(taken).div_ceil(left);
        let mut settings = self.settings.clone();
        settings.remove("REPRO_TIMING_PROCESSES");
        Timing {
            min_samples,
            max_samples: self
                .max_samples
                .saturating_sub(taken)
                .div_ceil(left)
                .max(min_samples),
            min_time_ms: self.min_time_ms / k,
            budget_ms: self.budget_ms / k,
            settings,
            after,
            ..self.clone()
        }
    }
}

#[cfg(test)]
impl Timing {
    /// A short timing in `mode` with every setting at its default, for unit tests.
    pub(crate) fn quick(mode: Mode) -> Timing {
        Timing {
            mode,
            warmup_ms: 1.0,
            max_noise: 0.005,
            min_samples: 10,
            min_time_ms: 1.0,
            max_samples: 100,
            budget_ms: 100.0,
            settings: BTreeMap::new(),
            after: None,
        }
    }
}

/// A `REPRO_TIMING_*` setting that is not one of the values it may take: ignoring it
/// would time with the default while its user believes the setting holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is not {allowed}")]
pub struct TimingSettingError {
    /// The variable.
    pub name: String,
    /// What it was set to.
    pub value: String,
    /// What it may be.
    pub allowed: String,
}

impl crate::foundation::error::Diagnose for TimingSettingError {
    fn exit_code(&self) -> u8 {
        crate::foundation::exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        Some(if TIMING_SETTINGS.contains(&self.name.as_str()) {
            format!(
                "set {} to {}, or unset it for the default",
                self.name, self.allowed
            )
        } else {
            format!(
                "the timing settings are {}: unset {}",
                TIMING_SETTINGS.join(", "),
                self.name
            )
        })
    }
}

/// The processes a timing with this environment's settings is split between
/// ([`Timing::processes`]; 1 where the settings do not read).
pub fn processes_from_env() -> usize {
    Knobs::from_env().map_or(1, |k| k.processes)
}

/// Checks the `REPRO_TIMING_*` settings before a command times anything on a GPU.
pub fn check_timing_settings() -> Result<(), TimingSettingError> {
    Knobs::from_env().map(|_| ())
}

/// The `REPRO_TIMING_*` settings this process's environment sets (not empty), but
/// `REPRO_TIMING_DIAG` (where figures go, not how a job is timed): what a job is sent
/// ([`Timing::settings`]) and a result records. Checked by [`check_timing_settings`].
pub fn timing_settings_from_env() -> BTreeMap<String, String> {
    env_settings()
        .into_iter()
        .filter(|(k, _)| k != "REPRO_TIMING_DIAG")
        .filter_map(|(k, v)| Some((k, v.into_string().ok()?.trim().to_string())))
        .filter(|(_, v)| !v.is_empty())
        .collect()
}

/// The `REPRO_TIMING_*` variables of this process's environment, as set.
fn env_settings() -> Vec<(String, std::ffi::OsString)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
        .filter(|(k, _)| k.starts_with("REPRO_TIMING_"))
        .collect()
}

/// Settings as [`Knobs::read`] takes them.
fn vars_of(settings: &BTreeMap<String, String>) -> Vec<(String, std::ffi::OsString)> {
    settings
        .iter()
        .map(|(k, v)| (k.clone(), v.into()))
        .collect()
}

/// Checks a set of timing settings (a job's, or a recorded result's for its replay): each
/// a setting, and a value it may take.
pub fn check_settings(settings: &BTreeMap<String, String>) -> Result<(), TimingSettingError> {
    if let Some(k) = settings.keys().find(|k| *k == "REPRO_TIMING_DIAG") {
        return Err(TimingSettingError {
            name: k.clone(),
            value: settings[k].clone(),
            allowed: "a setting a job or a record carries (it names a file)".into(),
        });
    }
    Knobs::read(&vars_of(settings)).map(|_| ())
}

impl Job {
    /// What must hold of a job before it runs (its timing settings, where it has any).
    pub fn check(&self) -> Result<(), TimingSettingError> {
        self.timing
            .as_ref()
            .map_or(Ok(()), |t| check_settings(&t.settings))
    }
}

/// Graph mode's placements of the buffers by default: the medians of one small kernel on
/// different buffers differ by up to 3% (H100, #29), and a new process gets new ones. The
/// fastest of 16 varied less between invocations than the fastest of 8 (H200, 10
/// invocations each, interleaved: CV 0.30 and 0.22% against 0.28 to 0.52% in four runs;
/// `benches/gpu_bench_phases.py --placements`); 32 was worse (0.51%: too few settling samples
/// per placement to choose by).
const PLACEMENTS: usize = 16;
/// The most device memory the extra placements take: a kernel whose buffers are larger
/// streams them from DRAM, where their addresses matter less.
const PLACEMENT_BYTES: u64 = 1 << 30;
/// Whether graph mode settles by default.
const SETTLE: bool = true;
/// Samples per window of the settling warm-up.
const SETTLE_WINDOW: usize = 16;
/// How close two windows' medians must be for the settling warm-up to end.
const SETTLE_TOLERANCE: f64 = 0.001;
/// The settling warm-up's least length (ms): the GPU runs faster for a while after idling.
/// A longer `--warmup` lengthens it.
const SETTLE_MIN_MS: f64 = 100.0;
/// The least warm-up (ms) where the worker's last job kept the GPU busy until moments ago:
/// graph mode's settling, whose two windows (128 counted samples of 64 launches each for a
/// 2.6 us kernel, 256 taken: about 90 ms) must agree besides, or the single launches of the
/// other modes.
const BUSY_MIN_MS: f64 = 30.0;
/// How much longer than its least length the settling warm-up may run (ms).
const SETTLE_MAX_MS: f64 = 1000.0;
/// Graph mode's single launches before the settling warm-up (ms): long enough for the
/// clocks to leave idle before the batch is sized. The rest of `--warmup` is spent
/// settling, at least [`SETTLE_MIN_MS`].
const GRAPH_SIZING_MS: f64 = 20.0;

/// Appends a line of a graph-mode job's figures to `path` (for the bench script): each
/// placement's median, the empty graph's costs, the clocks, the settling samples.
fn diagnose(
    path: &str,
    method: &Sampling,
    report: &Report,
    settled: usize,
    reasons: Option<(u64, Option<u32>)>,
) {
    let Sampling::Graph {
        costs,
        pilot,
        chosen,
        ..
    } = method
    else {
        return;
    };
    let medians = if pilot.is_empty() {
        vec![crate::foundation::stats::median(&report.samples_us).unwrap_or(f64::NAN)]
    } else {
        pilot.clone()
    };
    let line = serde_json::json!({
        "placement-medians": medians,
        "overhead-costs": costs,
        "sm-clock": report.sm_clock_mhz,
        "settle-samples": settled,
        "chosen-placement": chosen,
        "median": crate::foundation::stats::median(&report.samples_us),
        "early-median": crate::foundation::stats::median(&report.samples_us[..report.samples_us.len().min(8)]),
        "launches": report.launches_per_sample,
        "throttle-reasons-after": reasons.map(|r| r.0),
        "memory-clock-after": reasons.and_then(|r| r.1),
        "samples": report.samples_us.len(),
    });
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first job warms up for --warmup (graph mode: 20 ms of single launches, then at least
    /// 100 ms settling); a later job of a worker whose GPU was busy until moments ago counts
    /// that time, and warms up at least 30 ms more, never more than asked for.
    #[test]
    fn a_busy_gpus_time_counts_toward_the_warm_up() {
        assert_eq!(
            warm_up_plan(false, 100.0, None, 30.0),
            (100.0, SETTLE_MIN_MS)
        );
        assert_eq!(warm_up_plan(false, 100.0, Some(600.0), 30.0).0, 30.0);
        assert_eq!(warm_up_plan(false, 2000.0, Some(600.0), 30.0).0, 1400.0);
        assert_eq!(warm_up_plan(false, 0.0, Some(600.0), 30.0).0, 0.0);
        assert_eq!(warm_up_plan(false, 10.0, Some(600.0), 30.0).0, 10.0);
        assert_eq!(warm_up_plan(true, 100.0, None, 30.0), (20.0, 100.0));
        assert_eq!(warm_up_plan(true, 1000.0, None, 30.0), (20.0, 980.0));
        assert_eq!(warm_up_plan(true, 100.0, Some(600.0), 30.0), (0.0, 30.0));
        assert_eq!(warm_up_plan(true, 2000.0, Some(600.0), 30.0), (0.0, 1400.0));
    }

    #[test]
    fn timing_settings_are_read_or_refused_by_name() {
        use std::os::unix::ffi::OsStrExt;
        let read = |pairs: &[(&str, &str)]| {
            let vars: Vec<(String, std::ffi::OsString)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.into()))
                .collect();
            Knobs::read(&vars)
        };
        let d = read(&[]).unwrap();
        assert_eq!(
            (d.placements, d.rank, d.graph_us, d.settle),
            (PLACEMENTS, 0, GRAPH_SAMPLE_US, SETTLE)
        );
        assert_eq!(
            (d.busy_min_ms, d.gap_ms, d.diag.as_deref()),
            (BUSY_MIN_MS, 0.0, None)
        );
        assert_eq!(
            (
                d.bursts,
                d.burst_idle_ms,
                d.burst_rewarm_ms,
                d.burst_placements
            ),
            (BURSTS, BURST_IDLE_MS, REWARM_MS, true)
        );
        let b = read(&[
            ("REPRO_TIMING_BURSTS", "8"),
            ("REPRO_TIMING_BURST_IDLE_MS", "100"),
            ("REPRO_TIMING_BURST_REWARM_MS", "0"),
            ("REPRO_TIMING_BURST_PLACEMENTS", "0"),
        ])
        .unwrap();
        assert_eq!(
            (
                b.bursts,
                b.burst_idle_ms,
                b.burst_rewarm_ms,
                b.burst_placements
            ),
            (8, 100.0, 0.0, false)
        );
        for (name, bad) in [
            ("REPRO_TIMING_BURSTS", "0"),
            ("REPRO_TIMING_BURSTS", "17"),
            ("REPRO_TIMING_BURST_IDLE_MS", "-1"),
            ("REPRO_TIMING_BURST_REWARM_MS", "1001"),
            ("REPRO_TIMING_BURST_PLACEMENTS", "2"),
        ] {
            let Err(e) = read(&[(name, bad)]) else {
                panic!("{name}={bad} was taken");
            };
            assert_eq!(e.name, name);
        }
        // Graph mode samples in bursts; the others in one.
        let graph = Timing::quick(Mode::Graph);
        assert_eq!(bursts(&graph), BURSTS);
        assert_eq!(bursts(&Timing::quick(Mode::Cold)), 1);
        let one = Timing {
            settings: [("REPRO_TIMING_BURSTS".to_string(), "1".to_string())].into(),
            ..graph
        };
        assert_eq!(bursts(&one), 1);
        let k = read(&[
            ("REPRO_TIMING_PLACEMENTS", "8"),
            ("REPRO_TIMING_PLACEMENT_RANK", "3"),
            ("REPRO_TIMING_GRAPH_US", " 8000 "),
            ("REPRO_TIMING_SETTLE", "0"),
            ("REPRO_TIMING_BUSY_MIN_MS", "0"),
            ("REPRO_TIMING_GAP_MS", "20.5"),
            ("REPRO_TIMING_DIAG", "/tmp/d.jsonl"),
        ])
        .unwrap();
        assert_eq!(
            (k.placements, k.rank, k.graph_us, k.settle),
            (8, 3, 8000.0, false)
        );
        assert_eq!((k.busy_min_ms, k.gap_ms), (0.0, 20.5));
        assert_eq!(k.diag.as_deref(), Some("/tmp/d.jsonl"));
        // Empty is unset.
        assert_eq!(
            read(&[("REPRO_TIMING_PLACEMENTS", "")]).unwrap().placements,
            PLACEMENTS
        );
        for (name, bad, allowed) in [
            (
                "REPRO_TIMING_PLACEMENTS",
                "abc",
                "a whole number from 1 to 64",
            ),
            (
                "REPRO_TIMING_PLACEMENTS",
                "0",
                "a whole number from 1 to 64",
            ),
            (
                "REPRO_TIMING_PLACEMENTS",
                "65",
                "a whole number from 1 to 64",
            ),
            (
                "REPRO_TIMING_PLACEMENTS",
                "2.5",
                "a whole number from 1 to 64",
            ),
            (
                "REPRO_TIMING_PLACEMENTS",
                "+8",
                "a whole number from 1 to 64",
            ),
            (
                "REPRO_TIMING_PLACEMENTS",
                "1e1",
                "a whole number from 1 to 64",
            ),
            (
                "REPRO_TIMING_PLACEMENT_RANK",
                "64",
                "a whole number from 0 to 63",
            ),
            (
                "REPRO_TIMING_PLACEMENT_RANK",
                "-1",
                "a whole number from 0 to 63",
            ),
            (
                "REPRO_TIMING_GRAPH_US",
                "50",
                "a number from 100 to 1000000",
            ),
            (
                "REPRO_TIMING_GRAPH_US",
                "inf",
                "a number from 100 to 1000000",
            ),
            (
                "REPRO_TIMING_GRAPH_US",
                "NaN",
                "a number from 100 to 1000000",
            ),
            ("REPRO_TIMING_SETTLE", "yes", "1 (settle) or 0 (do not)"),
            ("REPRO_TIMING_SETTLE", "true", "1 (settle) or 0 (do not)"),
            ("REPRO_TIMING_BUSY_MIN_MS", "-1", "a number from 0 to 10000"),
            ("REPRO_TIMING_GAP_MS", "1e9", "a number from 0 to 10000"),
            ("REPRO_TIMING_PLACMENTS", "8", "a timing setting"),
        ] {
            let e = read(&[(name, bad)])
                .err()
                .unwrap_or_else(|| panic!("{name}={bad} was read"));
            assert_eq!(
                (e.name.as_str(), e.value.as_str(), e.allowed.as_str()),
                (name, bad, allowed)
            );
            assert_eq!(e.to_string(), format!("{name}={bad:?} is not {allowed}"));
        }
        // A value that is not UTF-8 is no setting's.
        let vars = vec![(
            "REPRO_TIMING_GRAPH_US".to_string(),
            std::ffi::OsStr::from_bytes(b"8\xff").to_owned(),
        )];
        assert!(Knobs::read(&vars).is_err());
    }

    /// A job's (or a recorded result's) settings are checked as the environment's are, and
    /// may not name where figures go.
    #[test]
    fn a_jobs_timing_settings_are_checked() {
        let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(check_settings(&set(&[])).is_ok());
        assert!(check_settings(&set(&[("REPRO_TIMING_PLACEMENTS", "2")])).is_ok());
        for bad in [
            set(&[("REPRO_TIMING_PLACEMENTS", "abc")]),
            set(&[("REPRO_TIMING_DIAG", "/etc/passwd")]),
            set(&[("LD_PRELOAD", "/tmp/x.so")]),
        ] {
            assert!(check_settings(&bad).is_err(), "{bad:?}");
        }
        let t = Timing {
            settings: set(&[("REPRO_TIMING_SETTLE", "maybe")]),
            ..Timing::quick(Mode::Graph)
        };
        // The job's settings decide, not the worker's environment: a bad one falls back
        // to every default rather than half of them.
        let k = Knobs::for_job(&t);
        assert_eq!((k.placements, k.settle), (PLACEMENTS, SETTLE));
        let ok = Timing {
            settings: set(&[("REPRO_TIMING_PLACEMENTS", "3")]),
            ..t.clone()
        };
        assert_eq!(Knobs::for_job(&ok).placements, 3);
    }

    /// Each of several processes gets an equal share of the time and the budget, and of
    /// the samples still to take (rounded up), and is one process itself.
    #[test]
    fn a_share_of_a_timing() {
        let t = Timing {
            min_samples: 10,
            max_samples: 100,
            min_time_ms: 500.0,
            budget_ms: 15_000.0,
            settings: [
                ("REPRO_TIMING_PROCESSES".to_string(), "4".to_string()),
                ("REPRO_TIMING_PLACEMENTS".to_string(), "8".to_string()),
            ]
            .into(),
            ..Timing::quick(Mode::Graph)
        };
        assert_eq!(t.processes(), 4);
        let after = After {
            busy_ms: 250.0,
            batch: 512,
        };
        let s = t.share(4, 0, Some(after));
        assert_eq!(
            (s.min_samples, s.max_samples, s.min_time_ms, s.budget_ms),
            (3, 25, 125.0, 3750.0)
        );
        // The last of four, after 95 samples: what is left of the most, in full.
        let last = t.share(1, 95, None);
        assert_eq!((last.min_samples, last.max_samples), (0, 5));
        assert_eq!(last.min_time_ms, 125.0);
        assert_eq!(
            (s.processes(), s.after, s.mode),
            (1, Some(after), Mode::Graph)
        );
        // The other settings go with each share.
        assert_eq!(Knobs::for_job(&s).placements, 8);
        let tiny = Timing {
            min_samples: 3,
            max_samples: 3,
            ..t
        };
        assert_eq!(
            (
                tiny.share(4, 0, None).min_samples,
                tiny.share(4, 0, None).max_samples
            ),
            (1, 1)
        );
        // A batch handed over is kept as the process's own would be.
        assert_eq!(steady_batch("handed".into(), 256, Some(512)), 512);
        assert_eq!(steady_batch("handed".into(), 1024, None), 512);
        assert_eq!(steady_batch("handed-far".into(), 64, Some(512)), 64);
    }

    #[test]
    fn a_batch_is_kept_within_a_power_of_two() {
        assert_eq!(kept_batch(None, 512), 512);
        assert_eq!(kept_batch(Some(512), 256), 512);
        assert_eq!(kept_batch(Some(512), 512), 512);
        assert_eq!(kept_batch(Some(512), 1024), 512);
        assert_eq!(kept_batch(Some(512), 128), 128);
        assert_eq!(kept_batch(Some(512), 2048), 2048);
        // Per launch: the first job's batch is kept, another launch has its own.
        let (a, b) = ("test|a".to_string(), "test|b".to_string());
        assert_eq!(steady_batch(a.clone(), 512, None), 512);
        assert_eq!(steady_batch(a.clone(), 256, None), 512);
        assert_eq!(steady_batch(b, 256, None), 256);
        assert_eq!(steady_batch(a.clone(), 64, None), 64);
        assert_eq!(steady_batch(a, 128, None), 64);
    }

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
    fn threaded_fills_and_comparisons_equal_one_threads() {
        // One thread's fill, element by element, against the split one, across chunk edges.
        let serial = |dtype: DType, count: u64, init: &Init, seed: u64| {
            let mut out = Vec::new();
            fill_range(dtype, init, seed, 0, {
                out.resize(count as usize * dtype.size(), 0);
                &mut out
            });
            out
        };
        let n = (PARALLEL_FROM * 3 + 17) as u64;
        for init in [
            Init::Normal {
                mean: 1.0,
                std: 2.0,
            },
            Init::Uniform {
                low: -1.0,
                high: 3.0,
            },
            Init::Iota,
        ] {
            for dtype in [DType::F32, DType::F16, DType::F64, DType::I32] {
                assert_eq!(
                    fill(dtype, n, &init, 5),
                    serial(dtype, n, &init, 5),
                    "{init:?}"
                );
            }
        }
        // The first draws of a split fill are the old sequential generator's.
        let mut rng = Rng::new(9);
        let first: Vec<u8> = (0..4)
            .flat_map(|_| (rng.uniform() as f32).to_le_bytes())
            .collect();
        assert_eq!(
            &fill(
                DType::F32,
                n,
                &Init::Uniform {
                    low: 0.0,
                    high: 1.0
                },
                9
            )[..16],
            &first[..]
        );
        // A split comparison finds the same first mismatch, counts and maxima.
        let want = fill(DType::F32, n, &Init::Iota, 0);
        let mut got = want.clone();
        for i in [70_000usize, 150_000, 5] {
            got[i * 4..i * 4 + 4].copy_from_slice(&(-1.0f32).to_le_bytes());
        }
        got[(n as usize - 1) * 4..].fill(POISON);
        let c = compare_output("x", DType::F32, &got, &want, 1e-6, 0.0);
        assert_eq!((c.mismatches, c.unwritten), (4, 1));
        assert_eq!(c.first_mismatch, Some((5, "-1".into(), "5".into())));
        assert_eq!(c.max_abs_err, 150_001.0);
        assert_eq!(c.elements, n);
    }

    #[test]
    fn failures_read_as_before_and_round_trip() {
        for (f, text) in [
            (
                Failure::Timeout { after_ms: 5000 },
                "TIMEOUT: no answer within 5s",
            ),
            (
                Failure::Driver {
                    name: "CUDA_ERROR_LAUNCH_FAILED".into(),
                    during: "running k".into(),
                },
                "CUDA_ERROR_LAUNCH_FAILED during running k",
            ),
            (
                Failure::Signal {
                    signal: 6,
                    tail: "".into(),
                },
                "the benchmark process was killed by SIGABRT (signal 6): ",
            ),
        ] {
            assert_eq!(f.to_string(), text);
            let back: Failure = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
            assert_eq!(back, f);
        }
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
