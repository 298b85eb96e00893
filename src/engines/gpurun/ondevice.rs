//! Inputs generated and outputs compared on the GPU, by two small kernels of repro's own
//! ([`SOURCE`], compiled once per device architecture by the project's NVRTC and cached).
//!
//! The generator must give the bytes the CPU's [`super::fill`] gives, for every dtype and
//! init kind, so that recorded results and replays keep their inputs. Zeros, constants, iota
//! and uniform draws use only integer arithmetic and correctly rounded IEEE operations, so the
//! two agree exactly. A normal draw goes through `ln` and `cos`, whose last bit differs between
//! the host's libm and CUDA's (each is within a few ulps of the true value): the kernel
//! computes the value and a bound on that difference, and where an element's encoding could
//! change within the bound (it lies that close to a rounding boundary of its dtype) it lists
//! the element's index; the host then writes those elements from the CPU generator. A dtype
//! whose every element would be listed (f64) is generated on the CPU.
//!
//! The comparison follows [`super::compare_output`]'s rules element for element; it counts
//! mismatches and unwritten elements, keeps the largest errors (non-negative doubles ordered
//! by their bits) and the first mismatch's index, and the host reads back the two elements at
//! that index to report them in the CPU's words.

use crate::foundation::records::OutputCheck;
use crate::foundation::runspec::{DType, Init};

/// The kernels. Every floating-point operation whose rounding matters is written with an
/// explicit round-to-nearest intrinsic, so no contraction into an FMA can change a result.
pub const SOURCE: &str = r#"
typedef unsigned long long u64;
typedef long long i64;
#define GOLDEN 0x9e3779b97f4a7c15ULL
#define INF __longlong_as_double(0x7ff0000000000000LL)

// f16 conversions in PTX, so no header is needed.
__device__ unsigned short f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ unsigned short f64_to_f16(double d) { unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }
__device__ float f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }

__device__ u64 mix(u64 z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
// Draw k (from 0) of the generator seeded with `seed` (Rust's Rng: state += GOLDEN, then mix).
__device__ double uniform(u64 seed, u64 k) {
    u64 s = (seed ^ GOLDEN) + (k + 1) * GOLDEN;
    return (double)(mix(s) >> 11) * 0x1p-53;
}
// half's f64 -> bf16 (truncates the low word, then rounds), ported bit for bit.
__device__ unsigned short bf16_bits(double v) {
    u64 val = (u64)__double_as_longlong(v);
    unsigned int x = (unsigned int)(val >> 32);
    unsigned int sign = x & 0x80000000u, exp = x & 0x7FF00000u, man = x & 0x000FFFFFu;
    if (exp == 0x7FF00000u) {
        unsigned int nan_bit = (man == 0 && (unsigned int)val == 0) ? 0u : 0x0040u;
        return (unsigned short)((sign >> 16) | 0x7F80u | nan_bit | (man >> 13));
    }
    unsigned int half_sign = sign >> 16;
    i64 half_exp = (i64)(exp >> 20) - 1023 + 127;
    if (half_exp >= 0xFF) return (unsigned short)(half_sign | 0x7F80u);
    if (half_exp <= 0) {
        if (7 - half_exp > 21) return (unsigned short)half_sign;
        unsigned int m = man | 0x00100000u;
        unsigned int half_man = m >> (14 - half_exp);
        unsigned int round_bit = 1u << (13 - half_exp);
        if ((m & round_bit) != 0 && (m & (3 * round_bit - 1)) != 0) half_man += 1;
        return (unsigned short)(half_sign | half_man);
    }
    unsigned int he = ((unsigned int)half_exp) << 7;
    unsigned int half_man = man >> 13;
    unsigned int round_bit = 0x00001000u;
    unsigned int r = half_sign | he | half_man;
    if ((man & round_bit) != 0 && (man & (3 * round_bit - 1)) != 0) r += 1;
    return (unsigned short)r;
}
// Rust's saturating `as` casts: NaN is 0, out-of-range values clamp, the rest truncate.
__device__ u64 encode(int dtype, int f16mode, double v) {
    switch (dtype) {
    case 0: return f16mode == 0 ? (u64)f32_to_f16(__double2float_rn(v)) : (u64)f64_to_f16(v);
    case 1: return (u64)bf16_bits(v);
    case 2: return (u64)__float_as_uint(__double2float_rn(v));
    case 3: return (u64)__double_as_longlong(v);
    case 4: return v != v ? 0 : v >= 2147483647.0 ? 0x7fffffffULL : v <= -2147483648.0 ? 0x80000000ULL
                                : (u64)(unsigned int)(int)v;
    case 5: return v != v || v <= 0.0 ? 0 : v >= 4294967295.0 ? 0xffffffffULL : (u64)(unsigned int)v;
    case 6: return v != v ? 0 : v >= 9223372036854775807.0 ? 0x7fffffffffffffffULL
                                : v <= -9223372036854775808.0 ? 0x8000000000000000ULL : (u64)(i64)v;
    case 7: return v != v || v <= 0.0 ? 0 : v >= 18446744073709551615.0 ? ~0ULL : (u64)v;
    default: return v != v || v <= 0.0 ? 0 : v >= 255.0 ? 255 : (u64)(unsigned int)v;
    }
}
__device__ void store(unsigned char* out, int size, u64 i, u64 bits) {
    switch (size) {
    case 1: out[i] = (unsigned char)bits; break;
    case 2: ((unsigned short*)out)[i] = (unsigned short)bits; break;
    case 4: ((unsigned int*)out)[i] = (unsigned int)bits; break;
    default: ((u64*)out)[i] = bits; break;
    }
}
// kind: 0 zeros, 1 constant a, 2 iota, 3 uniform [a, b), 4 normal (mean a, std b).
// fix[0] counts the elements listed in fix[1..=cap] for the host to write.
extern "C" __global__ void repro_fill(unsigned char* out, u64 n, int dtype, int size, int kind,
                                      double a, double b, u64 seed, int f16mode, u64* fix, u64 cap) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        double v;
        if (kind == 0) v = 0.0;
        else if (kind == 1) v = a;
        else if (kind == 2) v = __ull2double_rn(i);
        else if (kind == 3) v = __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), uniform(seed, i)));
        else {
            double u1 = fmax(uniform(seed, 2 * i), 2.2250738585072014e-308);
            double u2 = uniform(seed, 2 * i + 1);
            double z = __dmul_rn(__dsqrt_rn(-2.0 * log(u1)), cos(__dmul_rn(6.283185307179586, u2)));
            double t = __dmul_rn(b, z);
            v = __dadd_rn(a, t);
            // libm's ln and cos and CUDA's differ by a few ulps: 2^-44 of |t| is 256 of them.
            double e = __dadd_rn(__dadd_rn(fabs(t) * 0x1p-44, fabs(v) * 0x1p-50), 0x1p-1060);
            u64 bits = encode(dtype, f16mode, v);
            if (encode(dtype, f16mode, __dsub_rn(v, e)) != bits || encode(dtype, f16mode, __dadd_rn(v, e)) != bits) {
                u64 slot = atomicAdd(fix, 1ULL);
                if (slot < cap) fix[1 + slot] = i;
            }
            store(out, size, i, bits);
            continue;
        }
        store(out, size, i, encode(dtype, f16mode, v));
    }
}
__device__ double decode(int dtype, const unsigned char* p, u64 i) {
    switch (dtype) {
    case 0: return (double)f16_to_f32(((const unsigned short*)p)[i]);
    case 1: return (double)__uint_as_float(((unsigned int)((const unsigned short*)p)[i]) << 16);
    case 2: return (double)((const float*)p)[i];
    case 3: return ((const double*)p)[i];
    case 4: return (double)((const int*)p)[i];
    case 5: return (double)((const unsigned int*)p)[i];
    case 6: return __ll2double_rn(((const i64*)p)[i]);
    case 7: return __ull2double_rn(((const u64*)p)[i]);
    default: return (double)p[i];
    }
}
__device__ bool poisoned(const unsigned char* p, int size, u64 i) {
    for (int k = 0; k < size; ++k) if (p[i * size + k] != 0xFF) return false;
    return true;
}
__device__ u64 warp_sum(u64 v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ u64 warp_max(u64 v) {
    for (int o = 16; o > 0; o >>= 1) { u64 w = __shfl_down_sync(0xffffffffu, v, o); v = w > v ? w : v; }
    return v;
}
__device__ u64 warp_min(u64 v) {
    for (int o = 16; o > 0; o >>= 1) { u64 w = __shfl_down_sync(0xffffffffu, v, o); v = w < v ? w : v; }
    return v;
}
// out: mismatches, unwritten, max abs err (bits), max rel err (bits), first mismatch (or ~0).
extern "C" __global__ void repro_compare(const unsigned char* got, const unsigned char* want, u64 n,
                                         int dtype, int size, double atol, double rtol, u64* out) {
    u64 mism = 0, unwr = 0, max_abs = 0, max_rel = 0, first = ~0ULL;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        double g = decode(dtype, got, i), w = decode(dtype, want, i);
        bool un = poisoned(got, size, i) && !poisoned(want, size, i);
        if (un) unwr += 1;
        bool ok;
        if (g != g || w != w || un) ok = false;
        else if (fabs(g) == INF || fabs(w) == INF) ok = g == w;
        else {
            double ab = fabs(__dsub_rn(g, w));
            double rel = w != 0.0 ? __ddiv_rn(ab, fabs(w)) : (ab == 0.0 ? 0.0 : INF);
            u64 ab_bits = (u64)__double_as_longlong(ab);
            if (ab_bits > max_abs) max_abs = ab_bits;
            if (rel != INF) { u64 rb = (u64)__double_as_longlong(rel); if (rb > max_rel) max_rel = rb; }
            ok = ab <= __dadd_rn(atol, __dmul_rn(rtol, fabs(w)));
        }
        if (!ok) { mism += 1; if (i < first) first = i; }
    }
    mism = warp_sum(mism); unwr = warp_sum(unwr);
    max_abs = warp_max(max_abs); max_rel = warp_max(max_rel); first = warp_min(first);
    if ((threadIdx.x & 31) == 0) {
        if (mism) atomicAdd(&out[0], mism);
        if (unwr) atomicAdd(&out[1], unwr);
        if (max_abs) atomicMax(&out[2], max_abs);
        if (max_rel) atomicMax(&out[3], max_rel);
        if (first != ~0ULL) atomicMin(&out[4], first);
    }
}
"#;

/// The kernels' names, in the order [`SOURCE`] defines them.
pub const ENTRIES: [&str; 2] = ["repro_fill", "repro_compare"];

/// How this host's `half` converts an f64 to f16, which the device must do alike: through
/// f32 (x86's F16C), directly (aarch64's FP16), or by the crate's own code (truncating the
/// low word first), which the device does not do. Found by converting two values on which
/// the three ways differ.
pub fn f16_mode() -> Option<i32> {
    let conv = |v: f64| half::f16::from_f64(v).to_bits();
    // 1 + 2^-11 is halfway between two f16s; a bit far below it is lost by f32 and by the
    // low word's truncation, a bit at 2^-22 only by the truncation.
    let far = conv(1.0 + 2f64.powi(-11) + 2f64.powi(-40));
    let near = conv(1.0 + 2f64.powi(-11) + 2f64.powi(-22));
    let (down, up) = (half::f16::ONE.to_bits(), half::f16::ONE.to_bits() + 1);
    match (far, near) {
        (f, n) if f == down && n == up => Some(0),
        (f, n) if f == up && n == up => Some(1),
        _ => None,
    }
}

/// The kernel's dtype code.
pub fn dtype_code(d: DType) -> i32 {
    match d {
        DType::F16 => 0,
        DType::Bf16 => 1,
        DType::F32 => 2,
        DType::F64 => 3,
        DType::I32 => 4,
        DType::U32 => 5,
        DType::I64 => 6,
        DType::U64 => 7,
        DType::U8 => 8,
    }
}

/// The kernel's init code and its two parameters.
pub fn init_code(init: &Init) -> (i32, f64, f64) {
    match *init {
        Init::Zeros => (0, 0.0, 0.0),
        Init::Constant { value } => (1, value, 0.0),
        Init::Iota => (2, 0.0, 0.0),
        Init::Uniform { low, high } => (3, low, high),
        Init::Normal { mean, std } => (4, mean, std),
    }
}

/// Why a buffer is generated on the CPU although helpers are loaded, or `None` when the
/// device can generate it.
pub fn cpu_only(dtype: DType, init: &Init) -> Option<&'static str> {
    if matches!(init, Init::Normal { .. }) && dtype == DType::F64 {
        return Some("normal f64 draws carry libm's last bit");
    }
    if dtype == DType::F16 && f16_mode().is_none() {
        return Some("this host converts to f16 in a way the device does not");
    }
    None
}

/// At most this many elements of one buffer are written from the CPU after the device's
/// fill; more, and the buffer is generated on the CPU.
pub const FIXUP_CAP: u64 = 4096;

/// The bounds on a normal draw's last-ulp difference the kernel allows, as it computes them.
fn normal_bound(t: f64, v: f64) -> f64 {
    t.abs() * 2f64.powi(-44) + v.abs() * 2f64.powi(-50) + 2f64.powi(-1060)
}

/// The CPU definition of the device's fill, with `ln` and `cos` replaced by `ln_cos` (which
/// may differ from libm's by a few ulps, as CUDA's do): the elements and the indices it lists
/// for the host. Used by the tests to show that the device's bytes, patched, are the CPU's.
pub fn fill_like_device(
    dtype: DType,
    count: u64,
    init: &Init,
    seed: u64,
    ln_cos: &dyn Fn(u64, f64, f64) -> (f64, f64),
) -> (Vec<u8>, Vec<u64>) {
    let mut out = Vec::with_capacity(count as usize * dtype.size());
    let mut fix = Vec::new();
    // The kernel's formula for draw k: the state after k + 1 steps, mixed.
    let draw = |k: u64| {
        let golden = 0x9e37_79b9_7f4a_7c15u64;
        let mut z = (seed ^ golden).wrapping_add(k.wrapping_add(1).wrapping_mul(golden));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) >> 11
    };
    let draw = |k: u64| draw(k) as f64 * 2f64.powi(-53);
    for i in 0..count {
        let v = match *init {
            Init::Zeros => 0.0,
            Init::Constant { value } => value,
            Init::Iota => i as f64,
            Init::Uniform { low, high } => low + (high - low) * draw(i),
            Init::Normal { mean, std } => {
                let u1 = draw(2 * i).max(f64::MIN_POSITIVE);
                let u2 = draw(2 * i + 1);
                let (l, c) = ln_cos(i, u1, 2.0 * std::f64::consts::PI * u2);
                let t = std * ((-2.0 * l).sqrt() * c);
                let v = mean + t;
                let e = normal_bound(t, v);
                let enc = |x: f64| {
                    let mut b = Vec::new();
                    super::encode(dtype, x, &mut b);
                    b
                };
                if enc(v - e) != enc(v) || enc(v + e) != enc(v) {
                    fix.push(i);
                }
                v
            }
        };
        super::encode(dtype, v, &mut out);
    }
    (out, fix)
}

/// Writes the CPU generator's element `i` over `bytes` (the host's patch of a listed element).
pub fn patch(dtype: DType, init: &Init, seed: u64, i: u64, bytes: &mut [u8]) {
    let s = dtype.size();
    super::fill_range(
        dtype,
        init,
        seed,
        i,
        &mut bytes[i as usize * s..(i as usize + 1) * s],
    );
}

/// The device comparison's result words, combined as the kernel's atomics combine them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Words(pub [u64; 5]);

impl Words {
    /// The words before any thread has added to them.
    pub const START: Words = Words([0, 0, 0, 0, u64::MAX]);

    /// Folds one thread's partial result in (sums, bit maxima, index minimum).
    pub fn merge(&mut self, o: &Words) {
        self.0[0] += o.0[0];
        self.0[1] += o.0[1];
        self.0[2] = self.0[2].max(o.0[2]);
        self.0[3] = self.0[3].max(o.0[3]);
        self.0[4] = self.0[4].min(o.0[4]);
    }

    /// The [`OutputCheck`] these words say, with the first mismatch's elements read by
    /// `at(i)` as (kernel's, reference's) values.
    pub fn check(
        &self,
        name: &str,
        elements: u64,
        (atol, rtol): (f64, f64),
        at: impl FnOnce(u64) -> Option<(f64, f64)>,
    ) -> OutputCheck {
        OutputCheck {
            name: name.into(),
            elements,
            mismatches: self.0[0],
            unwritten: self.0[1],
            max_abs_err: f64::from_bits(self.0[2]),
            max_rel_err: f64::from_bits(self.0[3]),
            atol,
            rtol,
            first_mismatch: (self.0[4] != u64::MAX)
                .then(|| at(self.0[4]))
                .flatten()
                .map(|(g, w)| (self.0[4], g.to_string(), w.to_string())),
        }
    }
}

/// The CPU definition of the device's comparison: elements dealt to `threads` threads
/// round-robin (a grid-stride loop), each thread's words from [`super::compare_range`]'s
/// rules, merged as the kernel merges them.
pub fn compare_like_device(
    name: &str,
    dtype: DType,
    got: &[u8],
    want: &[u8],
    tol: (f64, f64),
    threads: usize,
) -> OutputCheck {
    let n = got.len() / dtype.size();
    let mut all = Words::START;
    for t in 0..threads {
        let mut w = Words::START;
        for i in (t..n).step_by(threads) {
            let c = super::compare_range(name, dtype, got, want, tol, i..i + 1);
            w.merge(&Words([
                c.mismatches,
                c.unwritten,
                c.max_abs_err.to_bits(),
                c.max_rel_err.to_bits(),
                if c.mismatches > 0 { i as u64 } else { u64::MAX },
            ]));
        }
        all.merge(&w);
    }
    all.check(name, n as u64, tol, |i| {
        Some((
            super::decode(dtype, got, i as usize),
            super::decode(dtype, want, i as usize),
        ))
    })
}

/// Why repro's helper kernels are not there: it never reaches the user as an error (the
/// job runs on the CPU path instead), but says why in the phase table or with `-v`.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// `REPRO_GPU_HELPERS=0`.
    #[error("REPRO_GPU_HELPERS=0")]
    Off,
    /// Neither XDG_CACHE_HOME nor HOME is set.
    #[error("no cache directory (set XDG_CACHE_HOME)")]
    NoCache,
    /// Nothing compiled for this architecture yet.
    #[error("no helper module for {arch}")]
    NotCached {
        /// The device's architecture.
        arch: String,
    },
    /// NVRTC refused, or the module could not be written.
    #[error("the helper kernels did not compile for {arch}: {detail}")]
    Compile {
        /// The architecture.
        arch: String,
        /// NVRTC's or the file system's words.
        detail: String,
    },
    /// The driver refused the module, a kernel in it, or memory for it.
    #[error("helper module: {name}")]
    Driver {
        /// The CUDA error's name.
        name: String,
    },
}

/// The compiled kernels' file for `arch` (`sm_90`) in repro's cache, named by the source's
/// digest, so a changed source is compiled again. `None` without a cache directory.
pub fn module_path(arch: &str) -> Option<std::path::PathBuf> {
    let key = &crate::foundation::keys::sha256_hex(SOURCE.as_bytes())[..16];
    Some(
        crate::foundation::fsutil::cache_dir()?
            .join("gpu-helpers")
            .join(format!("{key}-{arch}.cubin")),
    )
}

/// Whether any compiled helper module of this source is cached (for any architecture): the
/// runner then leaves the inputs the device can generate to the device, before it knows
/// the device's architecture.
pub fn any_cached() -> bool {
    let Some(p) = module_path("sm") else {
        return false;
    };
    let prefix = p
        .file_name()
        .map(|n| n.to_string_lossy().replace("-sm.cubin", "-"));
    let (Some(dir), Some(prefix)) = (p.parent(), prefix) else {
        return false;
    };
    std::fs::read_dir(dir).is_ok_and(|mut d| {
        d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&prefix)))
    })
}

/// Compiles [`SOURCE`] for `arch` with the project's NVRTC into the cache, unless it is
/// there already; its path. Done by the parent, once per architecture and source.
pub fn ensure_module(
    arch: &str,
    pins: &crate::engines::toolchain::Pins,
) -> Result<std::path::PathBuf, HelperError> {
    let path = module_path(arch).ok_or(HelperError::NoCache)?;
    let failed = |detail: String| HelperError::Compile {
        arch: arch.to_string(),
        detail,
    };
    if path.is_file() {
        return Ok(path);
    }
    let c = crate::foundation::recipe::Compile {
        source: "repro_helpers.cu".into(),
        entries: ENTRIES.iter().map(|e| e.to_string()).collect(),
        target: arch.to_string(),
        outputs: vec![crate::foundation::recipe::Output::Cubin],
        options: vec!["--std=c++17".into()],
        defines: std::collections::BTreeMap::new(),
        env_defines: std::collections::BTreeMap::new(),
        include_dirs: Vec::new(),
        toolchain: None,
        targets: Vec::new(),
    };
    let closure = crate::engines::build::inputs::Closure {
        files: std::collections::BTreeMap::from([(c.source.clone(), SOURCE.as_bytes().to_vec())]),
        headers: std::collections::BTreeMap::new(),
    };
    let art = crate::engines::build::nvrtc::compile(&c, pins, &closure)
        .map_err(|e| failed(e.to_string()))?;
    let cubin = art
        .outputs
        .into_iter()
        .find(|(o, _)| *o == crate::foundation::recipe::Output::Cubin)
        .ok_or_else(|| failed("NVRTC gave no cubin".into()))?;
    crate::foundation::fsutil::write_atomic(&path, &cubin.1, true)
        .map_err(|e| failed(e.to_string()))?;
    Ok(path)
}

use std::ffi::{CString, c_void};

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::{CudaFailure, Fill, Laps, Loaded, ck, decode, fill};

/// repro's kernels, loaded into a job's context, and the device words the fill kernel lists
/// the elements the host must write in.
pub struct Helpers {
    /// The loaded module: unloaded with the job, since a reused worker runs many jobs in
    /// one context.
    module: sys::CUmodule,
    fill: sys::CUfunction,
    compare: sys::CUfunction,
    /// `1 + FIXUP_CAP` words: a count, then indices.
    fix: sys::CUdeviceptr,
    f16mode: i32,
}

impl Drop for Helpers {
    fn drop(&mut self) {
        // SAFETY: allocated and loaded by `load`, freed and unloaded once, before the
        // context goes; no launch of its kernels is pending (the job synchronised).
        unsafe {
            let _ = cu::free_sync(self.fix);
            let _ = cu::module::unload(self.module);
        }
    }
}

/// The most bytes of a cached helper module read (a cubin of these kernels is about 40 kB).
const MODULE_MAX_BYTES: u64 = 16 << 20;

impl Helpers {
    /// Loads the cached module for this context's device. `Err` says why not (no module
    /// cached for the architecture, or the driver refused it), for the phase table.
    pub fn load(ctx: &cudarc::driver::CudaContext) -> Result<Helpers, HelperError> {
        use std::io::Read;
        use sys::CUdevice_attribute as A;
        let err = |e: cu::DriverError| HelperError::Driver {
            name: format!("{:?}", e.0),
        };
        let cc = |a| ctx.attribute(a).map_err(err);
        let arch = format!(
            "sm_{}{}",
            cc(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            cc(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
        );
        let path = module_path(&arch).ok_or(HelperError::NoCache)?;
        let mut image = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MODULE_MAX_BYTES).read_to_end(&mut image))
            .map_err(|_| HelperError::NotCached { arch: arch.clone() })?;
        image.push(0);
        // SAFETY: a live, NUL-terminated image; unloaded by Drop, or below on failure.
        let module = unsafe { cu::module::load_data(image.as_ptr().cast()) }.map_err(err)?;
        let func = |name: &str| {
            // SAFETY: the module was loaded above.
            unsafe { cu::module::get_function(module, CString::new(name).expect("identifier")) }
                .map_err(err)
        };
        let rest = || -> Result<_, HelperError> {
            let (fill, compare) = (func(ENTRIES[0])?, func(ENTRIES[1])?);
            // SAFETY: freed by Drop.
            let fix = unsafe { cu::malloc_sync(((1 + FIXUP_CAP) * 8) as usize) }.map_err(err)?;
            Ok((fill, compare, fix))
        };
        match rest() {
            Ok((fill, compare, fix)) => Ok(Helpers {
                module,
                fill,
                compare,
                fix,
                f16mode: f16_mode().unwrap_or(0),
            }),
            Err(e) => {
                // SAFETY: loaded above, not used after.
                unsafe {
                    let _ = cu::module::unload(module);
                }
                Err(e)
            }
        }
    }
}

/// Launches `f` over `n` elements (a grid-stride kernel of 256 threads a block).
fn launch(
    f: sys::CUfunction,
    n: u64,
    stream: sys::CUstream,
    args: &mut [*mut c_void],
    what: &str,
) -> Result<(), CudaFailure> {
    let blocks = n.div_ceil(256).clamp(1, 8192) as u32;
    // SAFETY: `args` point at locals of the caller matching the kernel's parameters.
    ck(
        unsafe { cu::launch_kernel(f, (blocks, 1, 1), (256, 1, 1), 0, stream, args) },
        what,
    )
}

/// Host copies of at least this many bytes go through the pinned staging buffers.
const STAGE_FROM: usize = 1 << 20;
/// The size of each of the two pinned staging buffers.
const STAGE_BYTES: usize = 16 << 20;

/// Two pinned (page-locked) host buffers and their events: a copy is cut into chunks, and the
/// host's copy of one chunk into (or out of) one buffer overlaps the device's copy of the other.
#[derive(Default)]
pub struct Staging {
    bufs: Vec<(*mut u8, sys::CUevent)>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        for (p, e) in self.bufs.drain(..) {
            // SAFETY: each came from malloc_host / event::create and is freed once.
            unsafe {
                let _ = cu::free_host(p.cast());
                let _ = cu::event::destroy(e);
            }
        }
    }
}

impl Staging {
    /// The two buffers, allocated on first use; `None` where pinned memory is refused.
    fn get(&mut self) -> Option<[(*mut u8, sys::CUevent); 2]> {
        while self.bufs.len() < 2 {
            // SAFETY: freed by Drop.
            let p = unsafe { cu::malloc_host(STAGE_BYTES, 0) }.ok()?;
            let e = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
            let Ok(e) = e else {
                // SAFETY: just allocated.
                unsafe {
                    let _ = cu::free_host(p);
                }
                return None;
            };
            self.bufs.push((p.cast(), e));
        }
        Some([self.bufs[0], self.bufs[1]])
    }
}

impl Loaded<'_> {
    /// Copies host bytes to the device: large ones through the pinned staging buffers.
    pub(super) fn copy_in(
        &mut self,
        dst: sys::CUdeviceptr,
        src: &[u8],
        during: &str,
    ) -> Result<(), CudaFailure> {
        let stage = (src.len() >= STAGE_FROM)
            .then(|| self.staging.get())
            .flatten();
        let Some(stage) = stage else {
            if src.is_empty() {
                return Ok(());
            }
            // SAFETY: the buffer holds at least `src.len()` bytes.
            return ck(unsafe { cu::memcpy_htod_sync(dst, src) }, during);
        };
        for (k, chunk) in src.chunks(STAGE_BYTES).enumerate() {
            let (buf, ev) = stage[k % 2];
            // SAFETY: the event was recorded after this buffer's last copy (or never), the
            // buffer holds STAGE_BYTES, and the device range lies inside `dst`'s buffer.
            unsafe {
                if k >= 2 {
                    ck(cu::event::synchronize(ev), during)?;
                }
                std::ptr::copy_nonoverlapping(chunk.as_ptr(), buf, chunk.len());
                let pinned = std::slice::from_raw_parts(buf, chunk.len());
                let at = dst + (k * STAGE_BYTES) as u64;
                ck(cu::memcpy_htod_async(at, pinned, super::STREAM), during)?;
                ck(cu::event::record(ev, super::STREAM), during)?;
            }
        }
        self.sync(during)
    }

    /// Copies device bytes to the host: large ones through the pinned staging buffers.
    pub(super) fn copy_out(
        &mut self,
        dst: &mut [u8],
        src: sys::CUdeviceptr,
    ) -> Result<(), CudaFailure> {
        let during = "reading an output";
        let stage = (dst.len() >= STAGE_FROM)
            .then(|| self.staging.get())
            .flatten();
        let Some(stage) = stage else {
            if dst.is_empty() {
                return Ok(());
            }
            // SAFETY: the buffer holds at least `dst.len()` bytes.
            return ck(unsafe { cu::memcpy_dtoh_sync(dst, src) }, during);
        };
        let n = dst.len().div_ceil(STAGE_BYTES);
        // Chunk k is asked for, then chunk k - 1 (already asked for) is waited on and copied.
        for k in 0..=n {
            // SAFETY: as in copy_in; each buffer is read by the host only after its event.
            unsafe {
                if k < n {
                    let (buf, ev) = stage[k % 2];
                    let len = STAGE_BYTES.min(dst.len() - k * STAGE_BYTES);
                    let pinned = std::slice::from_raw_parts_mut(buf, len);
                    let at = src + (k * STAGE_BYTES) as u64;
                    ck(cu::memcpy_dtoh_async(pinned, at, super::STREAM), during)?;
                    ck(cu::event::record(ev, super::STREAM), during)?;
                }
                if k > 0 {
                    let (buf, ev) = stage[(k - 1) % 2];
                    ck(cu::event::synchronize(ev), during)?;
                    let out = &mut dst[(k - 1) * STAGE_BYTES..];
                    let len = STAGE_BYTES.min(out.len());
                    std::ptr::copy_nonoverlapping(buf, out.as_mut_ptr(), len);
                }
            }
        }
        Ok(())
    }

    /// Gives buffer `p` its initial bytes on the device, or says the CPU must ([`Fill::Host`],
    /// generated here) when the helpers are not loaded, the dtype and init need the CPU, or
    /// too many elements lie at a rounding boundary.
    pub(super) fn fill_on_device(
        &mut self,
        p: sys::CUdeviceptr,
        dtype: DType,
        count: u64,
        init: &Init,
        seed: u64,
    ) -> Result<Fill, CudaFailure> {
        if self.helpers.is_err() || cpu_only(dtype, init).is_some() || count == 0 {
            return Ok(Fill::Host(fill(dtype, count, init, seed)));
        }
        let listed = self.device_fill(p, dtype, count, init, seed)?;
        if listed > FIXUP_CAP {
            return Ok(Fill::Host(fill(dtype, count, init, seed)));
        }
        let fix = self.helpers.as_ref().map(|h| h.fix).expect("checked above");
        let mut idx = vec![0u64; listed as usize];
        if listed > 0 {
            // SAFETY: the fix buffer holds 1 + FIXUP_CAP words.
            ck(
                unsafe { cu::memcpy_dtoh_sync(&mut idx, fix + 8) },
                "reading the fill's list",
            )?;
        }
        let mut patches = Vec::new();
        for i in idx {
            let mut b = vec![0u8; dtype.size()];
            super::fill_range(dtype, init, seed, i, &mut b);
            patches.push((i, b));
        }
        let f = Fill::Device {
            dtype,
            count,
            init: init.clone(),
            seed,
            patches,
        };
        self.patch(p, &f)?;
        if std::env::var_os("REPRO_GPU_SELFCHECK").is_some_and(|v| v == "1") {
            self.self_check(p, dtype, count, init, seed)?;
        }
        Ok(f)
    }

    /// Runs the fill kernel into `p`; how many elements it listed for the host.
    fn device_fill(
        &self,
        p: sys::CUdeviceptr,
        dtype: DType,
        count: u64,
        init: &Init,
        seed: u64,
    ) -> Result<u64, CudaFailure> {
        let h = self.helpers.as_ref().expect("loaded");
        let (mut out, mut n, mut seed, mut fix, mut cap) = (p, count, seed, h.fix, FIXUP_CAP);
        let (mut dt, mut size, mut f16) = (dtype_code(dtype), dtype.size() as i32, h.f16mode);
        let (mut kind, mut a, mut b) = init_code(init);
        // On the job's stream, so the kernel sees the count's reset (a synchronous copy
        // from pageable memory may still be in flight when it returns).
        // SAFETY: the fix buffer holds at least one word.
        ck(
            unsafe { cu::memset_d8_async(fix, 0, 8, super::STREAM) },
            "generating inputs",
        )?;
        let mut args: Vec<*mut c_void> = vec![
            (&raw mut out).cast(),
            (&raw mut n).cast(),
            (&raw mut dt).cast(),
            (&raw mut size).cast(),
            (&raw mut kind).cast(),
            (&raw mut a).cast(),
            (&raw mut b).cast(),
            (&raw mut seed).cast(),
            (&raw mut f16).cast(),
            (&raw mut fix).cast(),
            (&raw mut cap).cast(),
        ];
        launch(h.fill, count, super::STREAM, &mut args, "generating inputs")?;
        let mut listed = [0u64];
        self.sync("generating inputs")?;
        // SAFETY: one word.
        ck(
            unsafe { cu::memcpy_dtoh_sync(&mut listed, h.fix) },
            "generating inputs",
        )?;
        Ok(listed[0])
    }

    /// Writes a device fill's patches over its buffer.
    fn patch(&self, p: sys::CUdeviceptr, f: &Fill) -> Result<(), CudaFailure> {
        if let Fill::Device { dtype, patches, .. } = f {
            for (i, b) in patches {
                // SAFETY: element `i` lies inside the buffer; a pageable source is staged
                // before the call returns, and the copy is ordered on the job's stream.
                ck(
                    unsafe { cu::memcpy_htod_async(p + i * dtype.size() as u64, b, super::STREAM) },
                    "writing an input's element",
                )?;
            }
        }
        Ok(())
    }

    /// Makes output `arg` (generated on the device) its initial bytes again.
    pub(super) fn refill(&mut self, arg: usize, p: sys::CUdeviceptr) -> Result<(), CudaFailure> {
        let Fill::Device {
            dtype,
            count,
            init,
            seed,
            ..
        } = &self.inits[arg]
        else {
            return Ok(());
        };
        self.device_fill(p, *dtype, *count, init, *seed)?;
        self.patch(p, &self.inits[arg])
    }

    /// `REPRO_GPU_SELFCHECK=1`: the device's bytes against the CPU generator's (for the GPU
    /// tests); a difference ends the job, naming the first element that differs.
    fn self_check(
        &mut self,
        p: sys::CUdeviceptr,
        dtype: DType,
        count: u64,
        init: &Init,
        seed: u64,
    ) -> Result<(), CudaFailure> {
        let mut got = vec![0u8; count as usize * dtype.size()];
        self.copy_out(&mut got, p)?;
        let want = fill(dtype, count, init, seed);
        if let Some(i) = got.iter().zip(&want).position(|(g, w)| g != w) {
            return Err(CudaFailure {
                name: "DEVICE_FILL_MISMATCH".into(),
                during: format!(
                    "generating {dtype:?} {init:?} seed {seed}: byte {i} (element {}) differs from the CPU's",
                    i / dtype.size()
                ),
            });
        }
        Ok(())
    }

    /// The device comparison: runs the reference, keeps its outputs on the device, runs the
    /// kernel, and compares each output there.
    pub(super) fn check_on_device(
        &mut self,
        rf: sys::CUfunction,
        rl: &crate::foundation::records::LaunchSpec,
        laps: &mut Laps,
    ) -> Result<Vec<OutputCheck>, CudaFailure> {
        self.reset_outputs(true)?;
        self.launch(rf, rl)?;
        let outs: Vec<_> = self.outputs().collect();
        let mut want = super::Buffers { ptrs: Vec::new() };
        for (i, _, dtype, count) in &outs {
            let bytes = (*count as usize * dtype.size()).max(1);
            // SAFETY: freed by `want`; the copy stays inside both buffers.
            unsafe {
                want.ptrs
                    .push(ck(cu::malloc_sync(bytes), "allocating a buffer")?);
                let w = *want.ptrs.last().expect("pushed");
                ck(
                    cu::memcpy_dtod_async(w, self.buffer(*i), bytes, super::STREAM),
                    "keeping the reference's output",
                )?;
            }
        }
        self.sync(&format!("running the reference {}", rl.kernel))?;
        laps.lap_on("reference", Some("gpu".into()));
        self.reset_outputs(true)?;
        self.launch(self.kernel, &self.job.kernel)?;
        self.sync(&format!("running {}", self.job.kernel.kernel))?;
        let words = self.compare_words(&outs, &want)?;
        let mut checks = Vec::new();
        for (k, (i, name, dtype, count)) in outs.iter().enumerate() {
            let w = Words(words[k * 5..k * 5 + 5].try_into().expect("five words"));
            let got = self.buffer(*i);
            let at = |idx: u64| {
                let s = dtype.size();
                let (mut g, mut r) = (vec![0u8; s], vec![0u8; s]);
                // SAFETY: element `idx` lies inside both buffers.
                unsafe {
                    cu::memcpy_dtoh_sync(&mut g, got + idx * s as u64).ok()?;
                    cu::memcpy_dtoh_sync(&mut r, want.ptrs[k] + idx * s as u64).ok()?;
                }
                Some((decode(*dtype, &g, 0), decode(*dtype, &r, 0)))
            };
            checks.push(w.check(name, *count, self.tolerance(name), at));
        }
        laps.lap_on("check", Some("gpu".into()));
        Ok(checks)
    }

    /// Runs the compare kernel on each output against its kept reference; five words each.
    fn compare_words(
        &self,
        outs: &[(usize, &str, DType, u64)],
        want: &super::Buffers,
    ) -> Result<Vec<u64>, CudaFailure> {
        let h = self.helpers.as_ref().expect("loaded");
        let mut start = Vec::new();
        for _ in outs {
            start.extend(Words::START.0);
        }
        let during = "comparing outputs";
        // SAFETY: freed below; every range lies inside the allocation.
        let words = ck(unsafe { cu::malloc_sync(start.len().max(1) * 8) }, during)?;
        let _free = super::Buffers { ptrs: vec![words] };
        // SAFETY: as above; ordered before the kernels on the job's stream.
        ck(
            unsafe { cu::memcpy_htod_async(words, &start, super::STREAM) },
            during,
        )?;
        for (k, (i, name, dtype, count)) in outs.iter().enumerate() {
            let (atol, rtol) = self.tolerance(name);
            let (mut got, mut w, mut n) = (self.buffer(*i), want.ptrs[k], *count);
            let (mut dt, mut size) = (dtype_code(*dtype), dtype.size() as i32);
            let (mut atol, mut rtol, mut out) = (atol, rtol, words + (k * 40) as u64);
            let mut args: Vec<*mut c_void> = vec![
                (&raw mut got).cast(),
                (&raw mut w).cast(),
                (&raw mut n).cast(),
                (&raw mut dt).cast(),
                (&raw mut size).cast(),
                (&raw mut atol).cast(),
                (&raw mut rtol).cast(),
                (&raw mut out).cast(),
            ];
            launch(h.compare, n, super::STREAM, &mut args, during)?;
        }
        self.sync(during)?;
        let mut back = vec![0u64; start.len()];
        // SAFETY: as above.
        ck(unsafe { cu::memcpy_dtoh_sync(&mut back, words) }, during)?;
        Ok(back)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every dtype and init kind the recipes know, with parameters that reach the integer
    /// types' saturation and the floats' rounding boundaries.
    fn cases() -> Vec<(DType, Init)> {
        let inits = [
            Init::Zeros,
            Init::Constant { value: 1.5 },
            Init::Constant { value: -7.25e5 },
            Init::Iota,
            Init::Uniform {
                low: -3.0,
                high: 300.0,
            },
            Init::Normal {
                mean: 0.25,
                std: 3.0,
            },
            Init::Normal {
                mean: 100.0,
                std: 1e3,
            },
        ];
        let dtypes = [
            DType::F16,
            DType::Bf16,
            DType::F32,
            DType::F64,
            DType::I32,
            DType::U32,
            DType::I64,
            DType::U64,
            DType::U8,
        ];
        dtypes
            .iter()
            .flat_map(|d| inits.iter().map(move |i| (*d, i.clone())))
            .collect()
    }

    /// libm's ln and cos, moved by up to `ulps` units in the last place (as CUDA's may be),
    /// differently for each element.
    fn moved(ulps: i64) -> impl Fn(u64, f64, f64) -> (f64, f64) {
        move |i, u1, x| {
            let shift = |v: f64, k: i64| f64::from_bits((v.to_bits() as i64 + k) as u64);
            let k = (i as i64 * 7919) % (2 * ulps + 1) - ulps;
            (shift(u1.ln(), k), shift(x.cos(), -k))
        }
    }

    #[test]
    fn the_devices_fill_patched_is_the_cpus_fill_for_every_dtype_and_init() {
        let n = 20_000u64;
        for (dtype, init) in cases() {
            for ulps in [0, 4] {
                let (mut got, fix) = fill_like_device(dtype, n, &init, 11, &moved(ulps));
                let want = fill(dtype, n, &init, 11);
                if cpu_only(dtype, &init).is_some() {
                    // f64 normal draws: every element is listed, so the CPU makes them.
                    assert_eq!(fix.len() as u64, n, "{dtype:?} {init:?}");
                    continue;
                }
                assert!(
                    (fix.len() as u64) < FIXUP_CAP,
                    "{dtype:?} {init:?}: {}",
                    fix.len()
                );
                if !matches!(init, Init::Normal { .. }) {
                    assert!(fix.is_empty(), "{dtype:?} {init:?}");
                }
                for i in &fix {
                    patch(dtype, &init, 11, *i, &mut got);
                }
                assert_eq!(got, want, "{dtype:?} {init:?} ulps {ulps}");
            }
        }
    }

    #[test]
    fn an_element_at_a_rounding_boundary_is_listed_and_patched() {
        // ln moved so far that many f32 encodings change: each changed one must be listed.
        let init = Init::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let far = |_: u64, u1: f64, x: f64| (u1.ln() * (1.0 + 1e-9), x.cos());
        let (got, fix) = fill_like_device(DType::F32, 5000, &init, 3, &far);
        let want = fill(DType::F32, 5000, &init, 3);
        let differ: Vec<u64> = (0..5000u64)
            .filter(|i| {
                got[*i as usize * 4..*i as usize * 4 + 4]
                    != want[*i as usize * 4..*i as usize * 4 + 4]
            })
            .collect();
        assert!(!differ.is_empty(), "the test must move some encodings");
        // A bound of 2^-44 does not cover a 1e-9 error: the listing is only as good as the
        // bound, which is why the bound is 256 times CUDA's and libm's documented errors.
        assert!(differ.iter().any(|i| !fix.contains(i)));
        let (_, fix_exact) = fill_like_device(DType::F32, 5000, &init, 3, &moved(0));
        assert!(fix_exact.len() < 5, "{}", fix_exact.len());
    }

    #[test]
    fn the_host_converts_f16_in_a_way_the_device_can() {
        // x86 with F16C (through f32) or aarch64 with FP16 (directly): both are modes 0 and 1.
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            assert_eq!(f16_mode(), Some(0));
        }
        #[cfg(target_arch = "aarch64")]
        assert_eq!(f16_mode(), Some(1));
    }

    #[test]
    fn the_devices_comparison_reports_what_compare_output_reports() {
        let n = 3000usize;
        for dtype in [
            DType::F32,
            DType::F16,
            DType::Bf16,
            DType::F64,
            DType::I32,
            DType::U8,
        ] {
            let want = fill(dtype, n as u64, &Init::Iota, 0);
            let mut got = want.clone();
            let s = dtype.size();
            let put = |got: &mut Vec<u8>, i: usize, v: f64| {
                let mut b = Vec::new();
                super::super::encode(dtype, v, &mut b);
                got[i * s..(i + 1) * s].copy_from_slice(&b);
            };
            put(&mut got, 2999, 0.0);
            put(&mut got, 1234, 1234.0 + 3.0);
            put(&mut got, 17, f64::NAN);
            put(&mut got, 40, f64::INFINITY);
            got[100 * s..101 * s].fill(super::super::POISON);
            for tol in [(0.0, 0.0), (1.0, 1e-3), (4.0, 0.0)] {
                let cpu = super::super::compare_output("y", dtype, &got, &want, tol.0, tol.1);
                for threads in [1, 7, 256] {
                    let dev = compare_like_device("y", dtype, &got, &want, tol, threads);
                    assert_eq!(dev, cpu, "{dtype:?} {tol:?} {threads}");
                }
            }
            let same = compare_like_device("y", dtype, &want, &want, (0.0, 0.0), 33);
            assert_eq!((same.mismatches, same.first_mismatch), (0, None));
        }
    }

    #[test]
    fn words_merge_as_the_kernels_atomics_do() {
        let mut w = Words::START;
        w.merge(&Words([2, 1, 5f64.to_bits(), 0.5f64.to_bits(), 9]));
        w.merge(&Words([1, 0, 3f64.to_bits(), 2f64.to_bits(), 4]));
        let c = w.check("o", 10, (0.0, 0.0), |i| Some((i as f64, -1.0)));
        assert_eq!((c.mismatches, c.unwritten), (3, 1));
        assert_eq!((c.max_abs_err, c.max_rel_err), (5.0, 2.0));
        assert_eq!(c.first_mismatch, Some((4, "4".into(), "-1".into())));
    }
}
