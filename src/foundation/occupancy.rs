//! Occupancy per architecture: how many blocks of a kernel fit on one SM, and what limits
//! them, computed as NVIDIA's occupancy calculator (`cuda_occupancy.h`,
//! `cudaOccMaxActiveBlocksPerMultiprocessor`) computes it, from a table of per-architecture
//! limits. No GPU is needed: a kernel's registers, static shared memory and barriers come
//! from its cubin ([`crate::foundation::cubin`]), the block size and dynamic shared memory
//! from the recipe's launch.
//!
//! The launch is taken as repro makes it: the default shared-memory carveout and no
//! opt-in to more than 48 KB per block (`cuFuncSetAttribute` is never called), so a block
//! over 48 KB of static plus dynamic shared memory cannot launch at all.

use serde::{Deserialize, Serialize};

/// The limits of one architecture (compute capability), as the occupancy calculator and
/// the CUDA programming guide's "technical specifications" table give them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchLimits {
    /// Compute capability major.
    pub major: u32,
    /// Compute capability minor.
    pub minor: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Threads per block.
    pub max_threads_per_block: u32,
    /// Resident warps per SM.
    pub max_warps_per_sm: u32,
    /// Resident blocks per SM.
    pub max_blocks_per_sm: u32,
    /// 32-bit registers per SM.
    pub regs_per_sm: u32,
    /// 32-bit registers one block may hold.
    pub regs_per_block: u32,
    /// Registers one thread may use (the calculator's check).
    pub max_regs_per_thread: u32,
    /// Registers are allocated per warp in units of this many.
    pub reg_alloc_unit: u32,
    /// Register file partitions (warp schedulers) per SM.
    pub sub_partitions: u32,
    /// Shared memory per SM in its largest configuration, bytes.
    pub smem_per_sm: u64,
    /// Shared memory a block may use without opting in (48 KB everywhere).
    pub smem_per_block: u64,
    /// Shared memory a block may use after `cuFuncSetAttribute` opt-in.
    pub smem_per_block_optin: u64,
    /// Shared memory is allocated per block in units of this many bytes.
    pub smem_alloc_unit: u64,
    /// Shared memory the driver reserves for itself in every block (1 KB from sm_80 on).
    pub reserved_smem_per_block: u64,
    /// The shared-memory carveouts the SM supports, KB, ascending.
    pub smem_configs_kb: &'static [u64],
    /// Barrier slots per resident block (the calculator's barrier limit, sm_90 on).
    pub barriers_per_block_slot: u32,
}

const KB: u64 = 1024;
const VOLTA: &[u64] = &[0, 8, 16, 32, 64, 96];
const TURING: &[u64] = &[32, 64];
const AMPERE_100: &[u64] = &[0, 8, 16, 32, 64, 100, 132, 164];
const AMPERE_86: &[u64] = &[0, 8, 16, 32, 64, 100];
const HOPPER: &[u64] = &[0, 8, 16, 32, 64, 100, 132, 164, 196, 228];

/// One row of the table: (major, minor, warps/SM, blocks/SM, shared KB/SM, opt-in KB,
/// carveouts, barrier slots per block).
type Row = (u32, u32, u32, u32, u64, u64, &'static [u64], u32);

/// The architectures known here, sm_70 to sm_121.
const TABLE: &[Row] = &[
    (7, 0, 64, 32, 96, 96, VOLTA, 2),
    (7, 2, 64, 32, 96, 96, VOLTA, 2),
    (7, 5, 32, 16, 64, 64, TURING, 2),
    (8, 0, 64, 32, 164, 163, AMPERE_100, 2),
    (8, 6, 48, 16, 100, 99, AMPERE_86, 1),
    (8, 7, 48, 16, 164, 163, AMPERE_100, 1),
    (8, 9, 48, 24, 100, 99, AMPERE_86, 1),
    (9, 0, 64, 32, 228, 227, HOPPER, 2),
    (10, 0, 64, 32, 228, 227, HOPPER, 2),
    (10, 3, 64, 32, 228, 227, HOPPER, 2),
    (11, 0, 48, 24, 228, 227, HOPPER, 1),
    (12, 0, 48, 24, 100, 99, AMPERE_86, 1),
    (12, 1, 48, 24, 100, 99, AMPERE_86, 1),
];

fn row(r: &Row) -> ArchLimits {
    let &(major, minor, warps, blocks, smem, optin, configs, bars) = r;
    ArchLimits {
        major,
        minor,
        warp_size: 32,
        max_threads_per_block: 1024,
        max_warps_per_sm: warps,
        max_blocks_per_sm: blocks,
        regs_per_sm: 65536,
        regs_per_block: 65536,
        max_regs_per_thread: 255,
        reg_alloc_unit: 256,
        sub_partitions: 4,
        smem_per_sm: smem * KB,
        smem_per_block: 48 * KB,
        smem_per_block_optin: optin * KB,
        smem_alloc_unit: if major >= 8 { 128 } else { 256 },
        reserved_smem_per_block: if major >= 8 { KB } else { 0 },
        smem_configs_kb: configs,
        barriers_per_block_slot: bars,
    }
}

/// The compute capability an architecture name stands for: `sm_90`, `sm_90a`, `sm_100f`,
/// `compute_89` → (9, 0), (9, 0), (10, 0), (8, 9).
pub fn capability(arch: &str) -> Option<(u32, u32)> {
    let digits = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))?
        .trim_end_matches(['a', 'f']);
    let n: u32 = digits.parse().ok()?;
    (digits.len() >= 2).then_some((n / 10, n % 10))
}

/// The limits of an architecture, or `None` when the table does not know it.
pub fn limits(arch: &str) -> Option<ArchLimits> {
    let (major, minor) = capability(arch)?;
    TABLE.iter().find(|r| r.0 == major && r.1 == minor).map(row)
}

/// Every architecture of the table (`sm_70`, ...), for messages.
pub fn known() -> Vec<String> {
    TABLE.iter().map(|r| format!("sm_{}{}", r.0, r.1)).collect()
}

/// What limits the number of resident blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limiter {
    /// Registers per SM (or per block: then nothing fits).
    Registers,
    /// Shared memory per SM (or per block).
    SharedMemory,
    /// Resident warps per SM (or threads per block).
    Warps,
    /// Resident blocks per SM.
    Blocks,
    /// Block barriers per SM (sm_90 on).
    Barriers,
}

impl Limiter {
    /// Its name in tables and messages.
    pub fn word(self) -> &'static str {
        match self {
            Limiter::Registers => "registers",
            Limiter::SharedMemory => "shared memory",
            Limiter::Warps => "warps",
            Limiter::Blocks => "blocks",
            Limiter::Barriers => "barriers",
        }
    }
}

/// What a kernel's launch asks of an SM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory per block (the cubin's `.nv.shared.KERNEL`).
    pub static_smem: u64,
    /// Dynamic shared memory per block (the launch's).
    pub dynamic_smem: u64,
    /// Threads per block.
    pub threads: u64,
    /// Block barriers the kernel uses.
    pub barriers: u32,
}

/// Resident blocks and warps per SM for one kernel, launch and architecture.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Occupancy {
    /// The architecture (`sm_90`).
    pub arch: String,
    /// Threads per block.
    pub threads: u64,
    /// Dynamic shared memory per block.
    pub dynamic_smem: u64,
    /// Resident blocks per SM.
    pub blocks_per_sm: u32,
    /// Resident warps per SM.
    pub warps_per_sm: u32,
    /// The architecture's maximum.
    pub max_warps_per_sm: u32,
    /// `warps_per_sm / max_warps_per_sm`.
    pub occupancy: f64,
    /// What limits it (several when they tie).
    pub limited_by: Vec<Limiter>,
    /// Shared memory one block is allocated, reserve and rounding included.
    pub smem_per_block: u64,
}

/// The occupancy of a recipe's `[run]` launch of one kernel on one target, at one set of
/// parameters (a sweep point whose block size or dynamic shared memory differs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct LaunchOccupancy {
    /// The kernel's symbol.
    pub kernel: String,
    /// The parameters of the sweep point (`n=1024`), empty without `[params]`.
    pub params: String,
    /// Blocks and warps per SM.
    pub occupancy: Occupancy,
}

fn round_up(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

/// Blocks per SM by registers, as `cudaOccMaxBlocksPerSMRegsLimit` (no partitioned global
/// caching: none of the architectures of the table has it).
fn by_registers(l: &ArchLimits, registers: u32, warps: u64) -> u64 {
    let per_warp = round_up(
        u64::from(registers) * u64::from(l.warp_size),
        u64::from(l.reg_alloc_unit),
    );
    let per_block = per_warp * warps;
    let assumed = per_warp * round_up(warps, u64::from(l.sub_partitions));
    if u64::from(l.regs_per_block) < assumed.max(per_block) || registers > l.max_regs_per_thread + 1
    {
        return 0;
    }
    if per_warp == 0 {
        return u64::MAX;
    }
    let per_partition = u64::from(l.regs_per_sm / l.sub_partitions) / per_warp;
    per_partition * u64::from(l.sub_partitions) / warps
}

/// Blocks per SM by shared memory, as `cudaOccMaxBlocksPerSMSmemLimit` with the default
/// carveout and no opt-in; also the bytes one block is allocated.
fn by_shared(l: &ArchLimits, static_smem: u64, dynamic: u64) -> (u64, u64) {
    let total = static_smem + l.reserved_smem_per_block + dynamic;
    let allocated = round_up(total, l.smem_alloc_unit);
    if allocated > l.smem_per_block + l.reserved_smem_per_block {
        return (0, allocated);
    }
    if allocated == 0 {
        return (u64::MAX, 0);
    }
    (l.smem_per_sm / allocated, allocated)
}

/// The occupancy of a launch on an architecture.
pub fn occupancy(arch: &str, l: &ArchLimits, d: Demand) -> Occupancy {
    let warps = d.threads.div_ceil(u64::from(l.warp_size)).max(1);
    let by_warps = if d.threads > u64::from(l.max_threads_per_block) || d.threads == 0 {
        0
    } else {
        u64::from(l.max_warps_per_sm) / warps
    };
    let by_blocks = u64::from(l.max_blocks_per_sm);
    let by_regs = by_registers(l, d.registers, warps);
    let (by_smem, smem_per_block) = by_shared(l, d.static_smem, d.dynamic_smem);
    let mut limits = vec![
        (Limiter::Warps, by_warps),
        (Limiter::Registers, by_regs),
        (Limiter::SharedMemory, by_smem),
        (Limiter::Blocks, by_blocks),
    ];
    if l.major >= 9 && d.barriers > 0 {
        let slots = by_blocks * u64::from(l.barriers_per_block_slot);
        limits.push((Limiter::Barriers, slots / u64::from(d.barriers)));
    }
    let blocks = limits.iter().map(|&(_, n)| n).min().unwrap_or(0);
    let mut limited_by: Vec<Limiter> = limits
        .iter()
        .filter(|&&(_, n)| n == blocks)
        .map(|&(w, _)| w)
        .collect();
    limited_by.sort();
    let warps_per_sm = (blocks * warps) as u32;
    Occupancy {
        arch: arch.to_string(),
        threads: d.threads,
        dynamic_smem: d.dynamic_smem,
        blocks_per_sm: blocks as u32,
        warps_per_sm,
        max_warps_per_sm: l.max_warps_per_sm,
        occupancy: f64::from(warps_per_sm) / f64::from(l.max_warps_per_sm),
        limited_by,
        smem_per_block,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(registers: u32, threads: u64, static_smem: u64, dynamic_smem: u64) -> Demand {
        Demand {
            registers,
            static_smem,
            dynamic_smem,
            threads,
            barriers: 1,
        }
    }

    fn run(arch: &str, dm: Demand) -> (u32, u32, Vec<Limiter>) {
        let o = occupancy(arch, &limits(arch).unwrap(), dm);
        (o.blocks_per_sm, o.warps_per_sm, o.limited_by)
    }

    /// Worked by hand from the calculator's rules.
    ///
    /// sm_90 (64 warps, 32 blocks, 228 KB, 1 KB reserved per block, 128-byte units):
    /// - 32 regs × 256 threads: 1024 regs per warp, 16 warps per partition, 64 per SM →
    ///   8 blocks by registers and 8 by warps: 8 blocks, 64 warps.
    /// - 72 regs × 128 threads, 40 KB static: 2304 regs per warp → 7 warps per partition
    ///   → 28 warps → 7 blocks; shared 41 KB per block → 233472 / 41984 = 5 blocks.
    /// - 255 regs × 1024 threads: 8192 regs per warp × 32 warps > 65536 per block → 0.
    ///
    /// sm_89 (48 warps, 24 blocks, 100 KB):
    /// - 32 regs × 256 threads: 8 blocks by registers, 48 / 8 = 6 by warps → 6, 48 warps.
    /// - 72 regs × 128 threads, 40 KB static: 102400 / 41984 = 2 blocks, 8 warps.
    /// - 48 KB static: 49152 + 1024 fits the 48 KB + 1 KB per-block limit; 2 blocks.
    /// - one byte more of dynamic shared memory: over the limit without opt-in → 0.
    #[test]
    fn hand_computed_sm_89_and_sm_90() {
        use Limiter::*;
        assert_eq!(
            run("sm_90", d(32, 256, 0, 0)),
            (8, 64, vec![Registers, Warps])
        );
        assert_eq!(
            run("sm_90", d(72, 128, 40 * 1024, 0)),
            (5, 20, vec![SharedMemory])
        );
        assert_eq!(run("sm_90", d(255, 1024, 0, 0)), (0, 0, vec![Registers]));
        assert_eq!(run("sm_90", d(16, 32, 0, 0)), (32, 32, vec![Blocks]));
        assert_eq!(run("sm_89", d(32, 256, 0, 0)), (6, 48, vec![Warps]));
        assert_eq!(
            run("sm_89", d(72, 128, 40 * 1024, 0)),
            (2, 8, vec![SharedMemory])
        );
        assert_eq!(
            run("sm_89", d(32, 256, 48 * 1024, 0)),
            (2, 16, vec![SharedMemory])
        );
        assert_eq!(
            run("sm_89", d(32, 256, 48 * 1024, 1)),
            (0, 0, vec![SharedMemory])
        );
        assert_eq!(run("sm_89", d(16, 32, 0, 0)), (24, 24, vec![Blocks]));
        assert_eq!(run("sm_89", d(16, 64, 0, 0)), (24, 48, vec![Warps, Blocks]));
        assert_eq!(run("sm_89", d(32, 2048, 0, 0)), (0, 0, vec![Warps]));
        let o = occupancy("sm_89", &limits("sm_89").unwrap(), d(72, 128, 40 * 1024, 0));
        assert_eq!(o.smem_per_block, 41984);
        assert!((o.occupancy - 8.0 / 48.0).abs() < 1e-12);
    }

    /// The registers rule in detail: allocation rounds each warp up to 256 registers, and
    /// a block's warps are spread over the four partitions.
    #[test]
    fn register_granularity() {
        let l = limits("sm_90").unwrap();
        // 33 regs → 1056 per warp → 1280; 16384 / 1280 = 12 warps per partition, 48 per SM.
        assert_eq!(by_registers(&l, 33, 1), 48);
        assert_eq!(by_registers(&l, 33, 8), 6);
        // 128 regs × 512 threads = 65536: fits once.
        assert_eq!(by_registers(&l, 128, 16), 1);
        assert_eq!(by_registers(&l, 0, 4), u64::MAX);
    }

    /// On sm_90 and later a kernel's barriers bound the blocks too.
    #[test]
    fn barriers_bound_blocks_from_sm_90() {
        let mut dm = d(16, 64, 0, 0);
        dm.barriers = 16;
        let o = occupancy("sm_90", &limits("sm_90").unwrap(), dm);
        assert_eq!(
            (o.blocks_per_sm, o.limited_by.clone()),
            (4, vec![Limiter::Barriers])
        );
        let o = occupancy("sm_89", &limits("sm_89").unwrap(), dm);
        assert_eq!(o.blocks_per_sm, 24);
    }

    #[test]
    fn architecture_names() {
        assert_eq!(capability("sm_90a"), Some((9, 0)));
        assert_eq!(capability("sm_100f"), Some((10, 0)));
        assert_eq!(capability("compute_89"), Some((8, 9)));
        assert_eq!(capability("sm_9"), None);
        assert_eq!(capability("gfx90a"), None);
        assert!(limits("sm_61").is_none());
        assert!(limits("sm_120").is_some());
        assert_eq!(known().first().map(String::as_str), Some("sm_70"));
        // Every row's shared memory per SM is its largest carveout.
        for r in TABLE {
            let l = row(r);
            assert_eq!(l.smem_per_sm, l.smem_configs_kb.last().unwrap() * KB);
            assert!(l.smem_per_block_optin <= l.smem_per_sm);
        }
    }
}
