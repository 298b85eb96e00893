//! What each kernel of a cubin costs the GPU, read from the cubin's ELF without a GPU.
//!
//! ptxas writes its resource figures into the cubin: `.nv.info` holds module-wide
//! attributes keyed by symbol (`EIATTR_REGCOUNT`, `EIATTR_FRAME_SIZE`, the stack sizes),
//! `.nv.info.KERNEL` the kernel's own (`__launch_bounds__` as `EIATTR_MAX_THREADS`,
//! `EIATTR_REQNTID`, `EIATTR_MAXREG_COUNT`, `EIATTR_NUM_BARRIERS`, and the addresses of
//! spill and refill instructions in `EIATTR_ANNOTATIONS`); section sizes give static shared
//! memory (`.nv.shared.KERNEL`), local memory (`.nv.local.KERNEL`) and constant banks
//! (`.nv.constantN.KERNEL`). These are the figures `cuobjdump --dump-resource-usage`
//! prints; the `-Xptxas -v` text is not a stable interface, the ELF is.
//!
//! One figure differs from the driver's. ptxas (12.8 and 13.0 checked), for sm_90 and later, maps the
//! 1 KB of shared memory the system reserves in every block into the kernel's window at
//! offset 0 and places the kernel's own shared data after it (its SASS addresses shared
//! memory from `0x400`): the cubin then refers to the undefined symbol
//! `.nv.reservedSmem.offset0`, and each `.nv.shared.KERNEL` section counts the reserve in
//! its size. cuobjdump prints that size; `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES` and the
//! occupancy calculator take the kernel's own bytes and add the reserve once, per block.
//! [`KernelResources::reserved_shared_bytes`] says how much of the section is the reserve.
//!
//! A fat binary holds several cubins (and PTX): [`fatbin_resources`] reads each cubin member
//! ([`crate::foundation::fatbin`] walks the container and unpacks compressed members), so
//! every target of an nvcc `-fatbin` build is reported.
//! Everything read here is hostile input: sizes are bounded, malformed bytes are errors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::foundation::elf::{self, Elf, ElfError, u16_at, u32_at, u64_at};

/// `EIATTR_*` codes this reader uses (NVIDIA's numbering, as `cuobjdump -elf` names them).
mod attr {
    pub const MAX_THREADS: u8 = 0x05;
    pub const REQNTID: u8 = 0x10;
    pub const FRAME_SIZE: u8 = 0x11;
    pub const MIN_STACK_SIZE: u8 = 0x12;
    pub const MAXREG_COUNT: u8 = 0x1b;
    pub const MAX_STACK_SIZE: u8 = 0x23;
    pub const REGCOUNT: u8 = 0x2f;
    pub const CUDA_API_VERSION: u8 = 0x37;
    pub const NUM_BARRIERS: u8 = 0x4c;
    pub const ANNOTATIONS: u8 = 0x55;
}

/// `EIFMT_*`: how an attribute's value is stored.
mod fmt {
    /// No value (two bytes of padding).
    pub const NVAL: u8 = 0x01;
    /// One byte (and one of padding).
    pub const BVAL: u8 = 0x02;
    /// A 16-bit value.
    pub const HVAL: u8 = 0x03;
    /// A 16-bit size followed by that many bytes.
    pub const SVAL: u8 = 0x04;
}

/// Why a cubin or fatbin cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CubinError {
    /// The ELF structure is broken.
    #[error(transparent)]
    Elf(#[from] ElfError),
    /// It is an ELF file but not a CUDA cubin.
    #[error("not a CUDA cubin (ELF machine {machine}, expected {})", elf::EM_CUDA)]
    NotCubin {
        /// `e_machine`.
        machine: u16,
    },
    /// A `.nv.info` section is cut short.
    #[error("{section}: attribute at byte {at} runs past the section's end")]
    Info {
        /// The section.
        section: String,
        /// Where.
        at: usize,
    },
    /// The cubin has kernels but no register counts: an old or stripped toolchain output.
    #[error(
        "the cubin has no resource attributes (no EIATTR_REGCOUNT for `{kernel}`); it was made by a toolchain this reader does not know"
    )]
    NoAttributes {
        /// The first kernel without them.
        kernel: String,
    },
    /// The fatbin container is malformed.
    #[error("malformed fat binary: {what}")]
    Fatbin {
        /// What is wrong.
        what: String,
    },
}

/// One `EIATTR` attribute: its code, format and raw value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    /// The `EIATTR_*` code.
    pub code: u8,
    /// The `EIFMT_*` format.
    pub format: u8,
    /// The value: the byte or 16-bit value for `BVAL`/`HVAL`, the bytes for `SVAL`.
    pub value: Vec<u8>,
}

impl Attribute {
    /// The value as a little-endian number (the first 8 bytes at most).
    fn number(&self) -> u64 {
        self.value
            .iter()
            .take(8)
            .rev()
            .fold(0, |acc, &b| (acc << 8) | u64::from(b))
    }
    /// `SVAL` attributes of `.nv.info` are (symbol index, u32 value) pairs.
    fn symbol_value(&self) -> Option<(u32, u32)> {
        (self.value.len() == 8).then(|| (u32_at(&self.value, 0), u32_at(&self.value, 4)))
    }
    /// Three u32 (x, y, z), as `EIATTR_MAX_THREADS` and `EIATTR_REQNTID` hold them.
    fn dims(&self) -> Option<[u32; 3]> {
        (self.value.len() == 12).then(|| {
            [
                u32_at(&self.value, 0),
                u32_at(&self.value, 4),
                u32_at(&self.value, 8),
            ]
        })
    }
}

/// The attributes of one `.nv.info*` section, in order.
pub fn parse_info(section: &str, b: &[u8]) -> Result<Vec<Attribute>, CubinError> {
    let mut out = Vec::new();
    let mut i = 0;
    let short = |at| CubinError::Info {
        section: section.to_string(),
        at,
    };
    while i < b.len() {
        let head = b.get(i..i + 4).ok_or_else(|| short(i))?;
        let (format, code) = (head[0], head[1]);
        let (value, len) = match format {
            fmt::SVAL => {
                let n = u16_at(head, 2) as usize;
                (
                    b.get(i + 4..i + 4 + n).ok_or_else(|| short(i))?.to_vec(),
                    4 + n,
                )
            }
            fmt::BVAL => (vec![head[2]], 4),
            fmt::HVAL => (head[2..4].to_vec(), 4),
            fmt::NVAL => (Vec::new(), 4),
            // A format this reader does not know: taken for a 4-byte attribute.
            _ => (Vec::new(), 4),
        };
        out.push(Attribute {
            code,
            format,
            value,
        });
        i += len;
    }
    Ok(out)
}

/// What one kernel of one target costs: the columns of `cuobjdump --dump-resource-usage`
/// and what ptxas reports about spills and limits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct KernelResources {
    /// The kernel's symbol (mangled for C++ kernels).
    pub name: String,
    /// Registers per thread (`EIATTR_REGCOUNT`; cuobjdump's REG).
    pub registers: u32,
    /// The stack the kernel needs per thread, callees included (`EIATTR_MIN_STACK_SIZE`,
    /// else its frame; cuobjdump's STACK).
    pub stack_bytes: u64,
    /// The kernel's own stack frame per thread (`EIATTR_FRAME_SIZE`).
    pub frame_bytes: u64,
    /// The largest stack with recursion, when ptxas could bound it (`EIATTR_MAX_STACK_SIZE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stack_bytes: Option<u64>,
    /// Static local memory outside the stack (`.nv.local.KERNEL`; cuobjdump's LOCAL).
    pub local_bytes: u64,
    /// Static shared memory per block (`.nv.shared.KERNEL`; cuobjdump's SHARED), the
    /// system's reserve included when the cubin maps it into the section.
    pub shared_bytes: u64,
    /// How much of `shared_bytes` is the system's per-block reserve that ptxas mapped into
    /// the section (1024 for CUDA 13's sm_90 and later, 0 before): the driver's static
    /// figure is `shared_bytes - reserved_shared_bytes`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reserved_shared_bytes: u64,
    /// Constant memory by bank (`.nv.constantN.KERNEL`; cuobjdump's CONSTANT[N]).
    pub constant_bytes: BTreeMap<u8, u64>,
    /// Bytes stored by register spills, counted from the spill instructions ptxas marks
    /// (`-Xptxas -v`'s "spill stores"); `None` when the cubin does not say.
    pub spill_store_bytes: Option<u64>,
    /// Bytes loaded by refills of spilled registers ("spill loads"); `None` when unknown.
    pub spill_load_bytes: Option<u64>,
    /// Named barriers used (`EIATTR_NUM_BARRIERS`).
    pub barriers: u32,
    /// `__launch_bounds__` maximum threads per block (`EIATTR_MAX_THREADS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<[u32; 3]>,
    /// A required block size (`.reqntid`, `EIATTR_REQNTID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_threads: Option<[u32; 3]>,
    /// The register cap ptxas compiled under (`EIATTR_MAXREG_COUNT`: `-maxrregcount` or
    /// the cap `__launch_bounds__` implies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register_cap: Option<u32>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The size of the system's shared-memory window that ptxas maps in front of a kernel's
/// own shared data when the cubin refers to [`RESERVED_SMEM_SYMBOL`] (the SASS of every such
/// kernel addresses its first shared byte at `0x400`, whatever the data's alignment).
pub const RESERVED_SMEM_WINDOW: u64 = 1024;

/// The undefined symbol through which a cubin asks the driver for the reserved window.
pub const RESERVED_SMEM_SYMBOL: &str = ".nv.reservedSmem.offset0";

impl KernelResources {
    /// Static shared memory the kernel itself declares: the driver's
    /// `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`, which occupancy adds the reserve to once.
    pub fn own_shared_bytes(&self) -> u64 {
        self.shared_bytes.saturating_sub(self.reserved_shared_bytes)
    }
    /// The kernel's name as written in the source (demangled), for display.
    pub fn source_name(&self) -> String {
        crate::foundation::symbols::source_name(&self.name).unwrap_or_else(|| self.name.clone())
    }
    /// Threads per block `__launch_bounds__` or `.reqntid` allow, if either is set.
    pub fn thread_limit(&self) -> Option<u64> {
        let product = |d: [u32; 3]| d.iter().map(|&v| u64::from(v)).product::<u64>();
        match (self.max_threads, self.required_threads) {
            (Some(m), _) => Some(product(m)),
            (None, Some(r)) => Some(product(r)),
            (None, None) => None,
        }
    }
}

/// The resources of one cubin: one target.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TargetResources {
    /// The build output it came from (`cubin`, `fatbin`, a declared file).
    pub output: String,
    /// The real architecture the code is for (`sm_90`).
    pub arch: String,
    /// The CUDA API version ptxas recorded (`EIATTR_CUDA_API_VERSION`, 130 for 13.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_api: Option<u32>,
    /// Module-scope global memory (`.nv.global*`; cuobjdump's Common GLOBAL).
    pub global_bytes: u64,
    /// Module-scope constant banks (`__constant__` data; cuobjdump's Common CONSTANT[N]).
    pub constant_bytes: BTreeMap<u8, u64>,
    /// Each kernel, in symbol-table order.
    pub kernels: Vec<KernelResources>,
}

/// The resource report of a build: every target of every output that holds device code,
/// and the outputs that could not be read (the build itself still counts).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ResourceReport {
    /// One entry per cubin (a fat binary gives one per architecture).
    pub targets: Vec<TargetResources>,
    /// Outputs whose resources could not be read, with why (`cubin: ...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// The occupancy of the recipe's `[run]` launch on each target, as the build saw it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub occupancy: Vec<crate::foundation::occupancy::LaunchOccupancy>,
}

impl ResourceReport {
    /// The report of a build's outputs (name, bytes).
    pub fn of_outputs<'a>(outputs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Self {
        let mut r = ResourceReport::default();
        for (name, bytes) in outputs {
            match output_resources(name, bytes) {
                Ok(t) => r.targets.extend(t),
                Err(e) => r.problems.push(format!("{name}: {e}")),
            }
        }
        r
    }

    /// One line per report: for each target, the kernel `entry` names (every kernel when it
    /// names none of them) with its registers, shared memory, spills and, when known, the
    /// occupancy of the recipe's launch: `sm_90 vector_add: 16 regs, 0 B shared, 0 B spilled,
    /// 100% occupancy`.
    pub fn summary(&self, entry: Option<&str>) -> String {
        let mut parts = Vec::new();
        for t in &self.targets {
            let chosen: Vec<&KernelResources> = match entry {
                Some(e)
                    if t.kernels
                        .iter()
                        .any(|k| crate::foundation::symbols::matches(e, &k.name)) =>
                {
                    t.kernels
                        .iter()
                        .filter(|k| crate::foundation::symbols::matches(e, &k.name))
                        .collect()
                }
                _ => t.kernels.iter().collect(),
            };
            for k in chosen {
                let spilled = match (k.spill_store_bytes, k.spill_load_bytes) {
                    (Some(s), Some(l)) => format!("{} B spilled", s + l),
                    _ => "spills unknown".to_string(),
                };
                let mut line = format!(
                    "{} {}: {} regs, {} B shared, {spilled}",
                    t.arch,
                    k.source_name(),
                    k.registers,
                    k.shared_bytes
                );
                if let Some(o) = self
                    .occupancy
                    .iter()
                    .find(|o| o.kernel == k.name && o.occupancy.arch == t.arch)
                {
                    line.push_str(&format!(
                        ", {:.0}% occupancy",
                        o.occupancy.occupancy * 100.0
                    ));
                }
                parts.push(line);
            }
        }
        parts.extend(self.problems.iter().cloned());
        parts.join("; ")
    }

    /// The report as text tables: one row per kernel and target (the columns of
    /// `cuobjdump --dump-resource-usage` and ptxas's spills), then the occupancy of the
    /// recipe's launch, then what could not be read.
    pub fn render(&self, indent: usize) -> String {
        use crate::foundation::output::{Table, printable};
        let pad = " ".repeat(indent);
        let mut t = Table::new();
        t.row([
            "TARGET",
            "KERNEL",
            "REGS",
            "STACK",
            "SPILL ST/LD",
            "SHARED",
            "LOCAL",
            "CONST",
            "MAX THREADS",
            "BARRIERS",
        ]);
        for target in &self.targets {
            for k in &target.kernels {
                let spills = match (k.spill_store_bytes, k.spill_load_bytes) {
                    (Some(s), Some(l)) => format!("{s}/{l}"),
                    _ => "?".into(),
                };
                let consts: Vec<String> = k
                    .constant_bytes
                    .iter()
                    .map(|(b, n)| format!("c{b}:{n}"))
                    .collect();
                t.row([
                    target.arch.clone(),
                    printable(&k.source_name()),
                    k.registers.to_string(),
                    k.stack_bytes.to_string(),
                    spills,
                    k.shared_bytes.to_string(),
                    k.local_bytes.to_string(),
                    consts.join(" "),
                    k.thread_limit().map_or("-".into(), |n| n.to_string()),
                    k.barriers.to_string(),
                ]);
            }
        }
        let mut out = t.render(indent);
        if let Some(k) = self
            .targets
            .iter()
            .flat_map(|t| &t.kernels)
            .find(|k| k.reserved_shared_bytes > 0)
        {
            out.push_str(&format!(
                "{pad}SHARED counts the {}-byte system reserve ptxas maps in front of a kernel's own shared data (sm_90 on); the driver and occupancy take the rest\n",
                k.reserved_shared_bytes
            ));
        }
        if !self.occupancy.is_empty() {
            out.push_str(&format!("{pad}occupancy of the [run] launch:\n"));
            out.push_str(&self.render_occupancy(indent));
        }
        for t in &self.targets {
            if crate::foundation::occupancy::limits(&t.arch).is_none() {
                out.push_str(&format!("{pad}no occupancy table for {}\n", t.arch));
            }
        }
        for p in &self.problems {
            out.push_str(&format!("{pad}unreadable: {}\n", printable(p)));
        }
        out
    }

    /// The occupancy table of the recipe's launch, one row per target, kernel and shape.
    fn render_occupancy(&self, indent: usize) -> String {
        use crate::foundation::output::{Table, printable};
        let mut o = Table::new();
        o.row([
            "TARGET",
            "KERNEL",
            "PARAMS",
            "THREADS",
            "DYN SHARED",
            "BLOCKS/SM",
            "WARPS/SM",
            "OCCUPANCY",
            "LIMITED BY",
        ]);
        for l in &self.occupancy {
            let x = &l.occupancy;
            o.row([
                x.arch.clone(),
                printable(
                    &crate::foundation::symbols::source_name(&l.kernel)
                        .unwrap_or_else(|| l.kernel.clone()),
                ),
                if l.params.is_empty() {
                    "-".into()
                } else {
                    l.params.clone()
                },
                x.threads.to_string(),
                x.dynamic_smem.to_string(),
                x.blocks_per_sm.to_string(),
                format!("{}/{}", x.warps_per_sm, x.max_warps_per_sm),
                format!("{:.1}%", x.occupancy * 100.0),
                x.limited_by
                    .iter()
                    .map(|w| w.word())
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        o.render(indent)
    }

    /// Whether it says nothing at all (no device code among the outputs).
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.problems.is_empty()
    }
}

/// The architecture a cubin's `e_flags` name (`sm_90`).
fn arch_of(e: &Elf) -> String {
    // ELF ABI version 8 and later (CUDA 12.8+) moved the SM number up a byte.
    let sm = if e.abi_version >= 8 {
        (e.flags >> 8) & 0xff
    } else {
        e.flags & 0xff
    };
    format!("sm_{sm}")
}

/// Reads the resources of every kernel of a cubin.
pub fn cubin_resources(output: &str, bytes: &[u8]) -> Result<TargetResources, CubinError> {
    let e = Elf::parse(bytes)?;
    if e.machine != elf::EM_CUDA {
        return Err(CubinError::NotCubin { machine: e.machine });
    }
    let symbols = e.symbols()?;
    let reserve_mapped = symbols.iter().any(|s| s.name == RESERVED_SMEM_SYMBOL);
    let by_index: BTreeMap<u32, &str> = symbols
        .iter()
        .map(|s| (s.index as u32, s.name.as_str()))
        .collect();
    // Module-wide attributes, keyed by the kernel's name.
    let mut per_symbol: BTreeMap<&str, BTreeMap<u8, u32>> = BTreeMap::new();
    if let Some(s) = e.section(".nv.info") {
        for a in parse_info(&s.name, e.data(s)?)? {
            if let Some((sym, v)) = a.symbol_value()
                && let Some(name) = by_index.get(&sym)
            {
                per_symbol.entry(name).or_default().insert(a.code, v);
            }
        }
    }
    let mut t = TargetResources {
        output: output.to_string(),
        arch: arch_of(&e),
        ..TargetResources::default()
    };
    for s in e.sections() {
        if let Some(bank) = constant_bank(&s.name, None) {
            *t.constant_bytes.entry(bank).or_default() += s.size;
        } else if s.name == ".nv.global" || s.name == ".nv.global.init" {
            t.global_bytes += s.size;
        }
    }
    // A kernel is a symbol with a `.nv.info.NAME` section; device functions have none.
    for s in &symbols {
        let Some(info) = e.section(&format!(".nv.info.{}", s.name)) else {
            continue;
        };
        if s.kind != elf::STT_FUNC {
            continue;
        }
        let attrs = parse_info(&info.name, e.data(info)?)?;
        if t.cuda_api.is_none() {
            t.cuda_api = attrs
                .iter()
                .find(|a| a.code == attr::CUDA_API_VERSION)
                .map(|a| a.number() as u32);
        }
        let global = per_symbol.get(s.name.as_str());
        let mut k = kernel(&e, &s.name, global, &attrs, t.cuda_api)?;
        if reserve_mapped {
            k.reserved_shared_bytes = k.shared_bytes.min(RESERVED_SMEM_WINDOW);
        }
        t.kernels.push(k);
    }
    Ok(t)
}

/// The bank of a `.nv.constantN` (module scope, `kernel` None) or `.nv.constantN.KERNEL`
/// section.
fn constant_bank(section: &str, kernel: Option<&str>) -> Option<u8> {
    let rest = section.strip_prefix(".nv.constant")?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let bank = rest[..digits].parse().ok()?;
    match (kernel, &rest[digits..]) {
        (None, "") => Some(bank),
        (Some(k), tail) if tail.strip_prefix('.') == Some(k) => Some(bank),
        _ => None,
    }
}

fn kernel(
    e: &Elf,
    name: &str,
    global: Option<&BTreeMap<u8, u32>>,
    attrs: &[Attribute],
    cuda_api: Option<u32>,
) -> Result<KernelResources, CubinError> {
    let g = |code| global.and_then(|m| m.get(&code)).copied();
    let own = |code| attrs.iter().find(|a| a.code == code);
    let registers = g(attr::REGCOUNT).ok_or_else(|| CubinError::NoAttributes {
        kernel: name.to_string(),
    })?;
    let frame = u64::from(g(attr::FRAME_SIZE).unwrap_or(0));
    let size_of = |sec: String| e.section(&sec).map_or(0, |s| s.size);
    let mut constant_bytes = BTreeMap::new();
    for s in e.sections() {
        if let Some(bank) = constant_bank(&s.name, Some(name)) {
            constant_bytes.insert(bank, s.size);
        }
    }
    let (spill_store_bytes, spill_load_bytes) =
        match spills(e, name, own(attr::ANNOTATIONS), frame, cuda_api) {
            Some((s, l)) => (Some(s), Some(l)),
            None => (None, None),
        };
    Ok(KernelResources {
        name: name.to_string(),
        registers,
        stack_bytes: g(attr::MIN_STACK_SIZE).map_or(frame, u64::from),
        frame_bytes: frame,
        max_stack_bytes: g(attr::MAX_STACK_SIZE).map(u64::from),
        local_bytes: size_of(format!(".nv.local.{name}")),
        shared_bytes: size_of(format!(".nv.shared.{name}")),
        reserved_shared_bytes: 0,
        constant_bytes,
        spill_store_bytes,
        spill_load_bytes,
        barriers: own(attr::NUM_BARRIERS).map_or(0, |a| a.number() as u32),
        max_threads: own(attr::MAX_THREADS).and_then(Attribute::dims),
        required_threads: own(attr::REQNTID).and_then(Attribute::dims),
        register_cap: own(attr::MAXREG_COUNT).map(|a| a.number() as u32),
    })
}

/// Spill stores and loads in bytes, from the instructions `EIATTR_ANNOTATIONS` marks as
/// spill/refill (kind 1), decoded as the 128-bit SASS of sm_70 and later: opcode `STL`
/// (0x387) or `LDL` (0x983) in bits 0..12, access size in bits 73..76. `None` when the
/// cubin does not say (an older toolchain with local memory in use, an instruction this
/// decoder does not know): never a guess.
fn spills(
    e: &Elf,
    name: &str,
    annotations: Option<&Attribute>,
    frame: u64,
    cuda_api: Option<u32>,
) -> Option<(u64, u64)> {
    let Some(a) = annotations else {
        // No local memory: nothing can have spilled. CUDA 13's ptxas marks every spill, so
        // no mark means none; older ones are not known to.
        return (frame == 0 || cuda_api.is_some_and(|v| v >= 130)).then_some((0, 0));
    };
    let text = e.data(e.section(&format!(".text.{name}"))?).ok()?;
    let (mut stores, mut loads) = (0, 0);
    for pair in a.value.chunks_exact(8) {
        if u32_at(pair, 0) != 1 {
            continue;
        }
        let off = u32_at(pair, 4) as usize;
        let insn = text.get(off..off + 16)?;
        let (lo, hi) = (u64_at(insn, 0), u64_at(insn, 8));
        let bytes = match (hi >> 9) & 7 {
            0 | 1 => 1,
            2 | 3 => 2,
            4 => 4,
            5 => 8,
            6 => 16,
            _ => return None,
        };
        match lo & 0xfff {
            0x387 => stores += bytes,
            0x983 => loads += bytes,
            _ => return None,
        }
    }
    Some((stores, loads))
}

/// The resources of every cubin of a fat binary (PTX entries have none until a driver
/// compiles them), in container order.
pub fn fatbin_resources(output: &str, bytes: &[u8]) -> Result<Vec<TargetResources>, CubinError> {
    let members = crate::foundation::fatbin::members(bytes).map_err(|e| CubinError::Fatbin {
        what: e.to_string(),
    })?;
    members
        .iter()
        .filter(|m| m.kind == crate::foundation::fatbin::Kind::Elf)
        .map(|m| cubin_resources(output, &m.payload))
        .collect()
}

/// The resources of one build output, whatever it holds: a cubin, a fat binary, or
/// something else (`Ok(vec![])`: PTX, a shared library, a declared file).
pub fn output_resources(output: &str, bytes: &[u8]) -> Result<Vec<TargetResources>, CubinError> {
    if crate::foundation::fatbin::is_fatbin(bytes) {
        return fatbin_resources(output, bytes);
    }
    match Elf::parse(bytes) {
        Ok(e) if e.machine == elf::EM_CUDA => Ok(vec![cubin_resources(output, bytes)?]),
        _ => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foundation::elf::tests::{build, sym};

    fn sval(code: u8, v: &[u8]) -> Vec<u8> {
        let mut out = vec![fmt::SVAL, code];
        out.extend_from_slice(&(v.len() as u16).to_le_bytes());
        out.extend_from_slice(v);
        out
    }
    fn pair(sym: u32, v: u32) -> Vec<u8> {
        [sym.to_le_bytes(), v.to_le_bytes()].concat()
    }

    /// A synthetic sm_89 cubin with one kernel `k` (symbol 1) of 40 registers, a 16-byte
    /// frame with one 8-byte spill store and one 4-byte refill, 4 KB of shared memory,
    /// `__launch_bounds__(256)` and one barrier.
    pub(crate) fn sample_cubin() -> Vec<u8> {
        let mut info = sval(attr::REGCOUNT, &pair(1, 40));
        info.extend(sval(attr::FRAME_SIZE, &pair(1, 16)));
        info.extend(sval(attr::MIN_STACK_SIZE, &pair(1, 16)));
        let mut own = sval(attr::CUDA_API_VERSION, &130u32.to_le_bytes());
        own.extend(sval(
            attr::MAX_THREADS,
            &[256u32, 1, 1].map(u32::to_le_bytes).concat(),
        ));
        own.extend([fmt::BVAL, attr::NUM_BARRIERS, 1, 0]);
        own.extend([fmt::HVAL, attr::MAXREG_COUNT, 0xff, 0]);
        own.extend([fmt::NVAL, 0x3e, 0, 0]);
        own.extend(sval(
            attr::ANNOTATIONS,
            &[pair(1, 16), pair(1, 32)].concat(),
        ));
        // Three instructions: a NOP-like word, an STL.64 and an LDL.32.
        let mut text = vec![0u8; 48];
        text[16..24].copy_from_slice(&0x387u64.to_le_bytes());
        text[24..32].copy_from_slice(&(5u64 << 9).to_le_bytes());
        text[32..40].copy_from_slice(&0x983u64.to_le_bytes());
        text[40..48].copy_from_slice(&(4u64 << 9).to_le_bytes());
        let mut symtab = sym(0, 0, 0, 0);
        symtab.extend(sym(1, (1 << 4) | elf::STT_FUNC, 5, 48));
        build(
            elf::EM_CUDA,
            89 << 8,
            &[
                (".strtab", 3, b"\0k\0".to_vec()),
                (".symtab", elf::SHT_SYMTAB, symtab),
                (".nv.info", 0x7000_0000, info),
                (".nv.info.k", 0x7000_0000, own),
                (".text.k", 1, text),
                (".nv.shared.k", elf::SHT_NOBITS, vec![0; 4096]),
                (".nv.constant0.k", 1, vec![0; 364]),
                (".nv.constant3", 1, vec![0; 1200]),
            ],
        )
    }

    #[test]
    fn a_kernel_and_its_figures() {
        let t = cubin_resources("cubin", &sample_cubin()).unwrap();
        assert_eq!(t.arch, "sm_89");
        assert_eq!(t.cuda_api, Some(130));
        assert_eq!(t.constant_bytes, BTreeMap::from([(3, 1200)]));
        let k = &t.kernels[0];
        assert_eq!(
            k,
            &KernelResources {
                name: "k".into(),
                registers: 40,
                stack_bytes: 16,
                frame_bytes: 16,
                max_stack_bytes: None,
                local_bytes: 0,
                shared_bytes: 4096,
                reserved_shared_bytes: 0,
                constant_bytes: BTreeMap::from([(0, 364)]),
                spill_store_bytes: Some(8),
                spill_load_bytes: Some(4),
                barriers: 1,
                max_threads: Some([256, 1, 1]),
                required_threads: None,
                register_cap: Some(255),
            }
        );
        assert_eq!(k.thread_limit(), Some(256));
    }

    /// Real cubins (tests/fixtures/cubin/README.md): where the cubin refers to the reserved
    /// window, its first 1024 bytes of each kernel's shared section are the system's, and
    /// the kernel's own figure (the driver's) is the rest; elsewhere the section is all its own.
    #[test]
    fn the_reserved_window_is_counted_once() {
        let own = |bytes: &[u8]| {
            let t = cubin_resources("cubin", bytes).unwrap();
            let k = &t.kernels[0];
            (
                t.arch.clone(),
                k.shared_bytes,
                k.reserved_shared_bytes,
                k.own_shared_bytes(),
            )
        };
        let sm89 = include_bytes!("../../tests/fixtures/cubin/small_sm_89.cubin");
        let sm90 = include_bytes!("../../tests/fixtures/cubin/small_sm_90.cubin");
        let dyn120 = include_bytes!("../../tests/fixtures/cubin/dyn_sm_120.cubin");
        assert_eq!(own(sm89), ("sm_89".into(), 128, 0, 128));
        assert_eq!(own(sm90), ("sm_90".into(), 1152, 1024, 128));
        assert_eq!(own(dyn120), ("sm_120".into(), 1024, 1024, 0));
        // The synthetic cubin has no such symbol: all 4096 bytes are the kernel's.
        let k = &cubin_resources("cubin", &sample_cubin()).unwrap().kernels[0];
        assert_eq!((k.reserved_shared_bytes, k.own_shared_bytes()), (0, 4096));
        // The same cubin with the symbol: the window is taken out of the section once.
        let k = &cubin_resources("cubin", &with_reserve_symbol())
            .unwrap()
            .kernels[0];
        assert_eq!(
            (k.reserved_shared_bytes, k.own_shared_bytes()),
            (1024, 3072)
        );
        // A kernel without shared memory has no section, so nothing to take out.
        let mut r = k.clone();
        (r.shared_bytes, r.reserved_shared_bytes) = (0, 0);
        assert_eq!(r.own_shared_bytes(), 0);
    }

    /// `sample_cubin` with the undefined `.nv.reservedSmem.offset0` symbol ptxas adds.
    fn with_reserve_symbol() -> Vec<u8> {
        let src = sample_cubin();
        let e = Elf::parse(&src).unwrap();
        let data = |n: &str| e.data(e.section(n).unwrap()).unwrap().to_vec();
        let mut strtab = b"\0k\0".to_vec();
        strtab.extend_from_slice(RESERVED_SMEM_SYMBOL.as_bytes());
        strtab.push(0);
        let mut symtab = sym(0, 0, 0, 0);
        symtab.extend(sym(1, (1 << 4) | elf::STT_FUNC, 5, 48));
        // Weak, undefined, 4 bytes: as ptxas writes it.
        symtab.extend(sym(3, (2 << 4) | 1, 0, 4));
        build(
            elf::EM_CUDA,
            90 << 8,
            &[
                (".strtab", 3, strtab),
                (".symtab", elf::SHT_SYMTAB, symtab),
                (".nv.info", 0x7000_0000, data(".nv.info")),
                (".nv.info.k", 0x7000_0000, data(".nv.info.k")),
                (".text.k", 1, data(".text.k")),
                (".nv.shared.k", elf::SHT_NOBITS, vec![0; 4096]),
            ],
        )
    }

    #[test]
    fn constant_sections() {
        assert_eq!(constant_bank(".nv.constant0.k", Some("k")), Some(0));
        assert_eq!(constant_bank(".nv.constant0.k", Some("kk")), None);
        assert_eq!(constant_bank(".nv.constant3", None), Some(3));
        assert_eq!(constant_bank(".nv.constant3.k", None), None);
        assert_eq!(constant_bank(".nv.constantx", None), None);
    }

    /// An instruction at a marked offset that is neither STL nor LDL makes the spill
    /// figures unknown, not wrong; so does a mark past the end of the code.
    #[test]
    fn unknown_spills_are_none() {
        let mut c = sample_cubin();
        let e = Elf::parse(&c).unwrap();
        let text = e.section(".text.k").unwrap().offset as usize;
        c[text + 16] = 0x55;
        let t = cubin_resources("cubin", &c).unwrap();
        assert_eq!(t.kernels[0].spill_store_bytes, None);
    }

    /// Every truncation of a cubin and of a fatbin is an error or a report, never a panic.
    #[test]
    fn truncated_inputs_do_not_panic() {
        let c = sample_cubin();
        for n in 0..c.len() {
            let _ = cubin_resources("cubin", &c[..n]);
        }
        let f = fatbin(&[(2, 89, c.clone(), false), (1, 89, b"ptx".to_vec(), true)]);
        for n in 0..f.len() {
            let _ = fatbin_resources("fatbin", &f[..n]);
        }
        assert!(matches!(
            cubin_resources("x", &build(62, 0, &[])),
            Err(CubinError::NotCubin { machine: 62 })
        ));
    }

    fn fatbin(entries: &[(u16, u32, Vec<u8>, bool)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, payload, compress) in entries {
            let stored = if *compress {
                zstd::bulk::compress(payload, 3).unwrap()
            } else {
                payload.clone()
            };
            let padded = stored.len().div_ceil(8) * 8;
            let mut h = [0u8; 64];
            h[..2].copy_from_slice(&kind.to_le_bytes());
            h[4..8].copy_from_slice(&64u32.to_le_bytes());
            h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
            h[16..20].copy_from_slice(&(stored.len() as u32).to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            let flags: u64 = 0x11 | if *compress { 0x8000 } else { 0 };
            h[40..48].copy_from_slice(&flags.to_le_bytes());
            h[56..64].copy_from_slice(&(payload.len() as u64).to_le_bytes());
            body.extend_from_slice(&h);
            body.extend_from_slice(&stored);
            body.resize(body.len() + padded - stored.len(), 0);
        }
        let mut out = 0xBA55_ED50u32.to_le_bytes().to_vec();
        out.extend(1u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend((body.len() as u64).to_le_bytes());
        out.extend(body);
        out
    }

    #[test]
    fn fatbin_entries_plain_and_compressed() {
        let c = sample_cubin();
        let f = fatbin(&[
            (2, 89, c.clone(), false),
            (2, 89, c.clone(), true),
            (1, 90, b".version 9.0".to_vec(), true),
        ]);
        let entries = crate::foundation::fatbin::members(&f).unwrap();
        assert_eq!(entries.len(), 3);
        assert_eq!(&entries[1].payload[..], &c[..]);
        assert_eq!(&entries[2].payload[..], b".version 9.0");
        let r = output_resources("fatbin", &f).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].kernels[0].registers, 40);
        assert!(output_resources("ptx", b".version 9.0").unwrap().is_empty());
    }

    #[test]
    fn a_cubin_without_register_counts_is_named() {
        let mut symtab = sym(0, 0, 0, 0);
        symtab.extend(sym(1, (1 << 4) | elf::STT_FUNC, 4, 0));
        let c = build(
            elf::EM_CUDA,
            0x5a,
            &[
                (".strtab", 3, b"\0k\0".to_vec()),
                (".symtab", elf::SHT_SYMTAB, symtab),
                (".nv.info.k", 0x7000_0000, Vec::new()),
                (".text.k", 1, vec![0; 16]),
            ],
        );
        let err = cubin_resources("cubin", &c).unwrap_err();
        assert!(err.to_string().contains("EIATTR_REGCOUNT for `k`"), "{err}");
    }
}
