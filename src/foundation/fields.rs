//! The registry of fingerprint fields: their names, what probes them, their kind and tier.
//!
//! A fingerprint is a flat map from dotted keys to values. Keys in a lockfile name the same
//! fields, except that per-device GPU fields are written once (`gpu.name`) and apply to every
//! visible device (`gpu.devices.0.name`, `gpu.devices.1.name`, ...). The tier of a field only
//! chooses the policy that `repro env lock` writes; the lockfile's policy is what is enforced.

/// Which probe produces a field. `env check` runs only the probes its lockfile needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Probe {
    /// The CUDA driver API: device names, compute capability, sizes (needs `cuInit`).
    CudaDevices,
    /// The driver's version, the CUDA version it supports, and where libcuda came from.
    Driver,
    /// NVML: ECC, persistence, MIG, power, clocks, temperature, VBIOS, processes.
    Nvml,
    /// The NVRTC library that builds would use.
    Nvrtc,
    /// nvcc, if present.
    Nvcc,
    /// OS, kernel, CPU, memory, virtualisation: read from files.
    Host,
    /// One host tool's `--version`.
    Tool(&'static str),
    /// The git repository.
    Git,
    /// flake.nix / flake.lock and the Nix shell.
    Nix,
    /// `nix --version`.
    NixVersion,
    /// Allowlisted environment variables.
    Env,
    /// The Python environment (interpreter, PyTorch, installed distributions): read from
    /// its files, never by starting it.
    Python,
}

/// How values of a field compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Free text, compared exactly.
    Text,
    /// A dotted version, comparable with `min`.
    Version,
    /// An integer or decimal number, comparable with `min`.
    Number,
    /// `true` or `false`.
    Bool,
}

/// The default strength of a field, from DESIGN.md's three tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Differences make results incomparable: locked with `exact`.
    Must,
    /// Differences may change results: locked with `warn`.
    Warn,
    /// Recorded for the record: locked with `ignore`.
    Record,
}

/// One known field.
#[derive(Debug)]
pub struct Spec {
    /// The key as written in a lockfile.
    pub key: &'static str,
    /// The probe that produces it.
    pub probe: Probe,
    /// How values compare.
    pub kind: Kind,
    /// Its default tier.
    pub tier: Tier,
    /// A short description for help and for the lockfile's comments.
    pub about: &'static str,
}

impl Spec {
    /// Whether this field exists once per GPU.
    pub fn per_device(&self) -> bool {
        self.key.starts_with("gpu.") && self.key != "gpu.count"
    }
    /// The fingerprint key of this field for device `index`.
    pub fn device_key(&self, index: usize) -> String {
        format!("gpu.devices.{index}.{}", &self.key["gpu.".len()..])
    }
}

use Kind::*;
use Probe::*;
use Tier::*;

const fn spec(
    key: &'static str,
    probe: Probe,
    kind: Kind,
    tier: Tier,
    about: &'static str,
) -> Spec {
    Spec {
        key,
        probe,
        kind,
        tier,
        about,
    }
}

/// Every known field, in display order.
pub static SPECS: &[Spec] = &[
    spec(
        "gpu.count",
        CudaDevices,
        Number,
        Warn,
        "number of GPUs visible to CUDA",
    ),
    spec("gpu.name", CudaDevices, Text, Must, "GPU model"),
    spec(
        "gpu.compute-capability",
        CudaDevices,
        Version,
        Must,
        "compute capability (major.minor)",
    ),
    spec(
        "gpu.sm-count",
        CudaDevices,
        Number,
        Warn,
        "streaming multiprocessors",
    ),
    spec(
        "gpu.memory-mib",
        CudaDevices,
        Number,
        Warn,
        "total device memory in MiB",
    ),
    spec(
        "gpu.l2-cache-kib",
        CudaDevices,
        Number,
        Warn,
        "L2 cache size in KiB",
    ),
    spec(
        "gpu.max-shared-memory-per-block-kib",
        CudaDevices,
        Number,
        Record,
        "opt-in shared memory per block in KiB",
    ),
    spec(
        "gpu.uuid",
        CudaDevices,
        Text,
        Record,
        "device UUID (differs between instances)",
    ),
    spec("gpu.pci-bus-id", CudaDevices, Text, Record, "PCI bus id"),
    spec("gpu.ecc", Nvml, Bool, Warn, "ECC memory enabled"),
    spec(
        "gpu.persistence-mode",
        Nvml,
        Bool,
        Warn,
        "persistence mode enabled",
    ),
    spec("gpu.mig-mode", Nvml, Bool, Warn, "MIG mode enabled"),
    spec(
        "gpu.power-limit-w",
        Nvml,
        Number,
        Warn,
        "enforced power limit in watts",
    ),
    spec(
        "gpu.max-sm-clock-mhz",
        Nvml,
        Number,
        Warn,
        "maximum SM clock in MHz",
    ),
    spec(
        "gpu.max-mem-clock-mhz",
        Nvml,
        Number,
        Warn,
        "maximum memory clock in MHz",
    ),
    spec("gpu.vbios", Nvml, Text, Warn, "VBIOS version"),
    spec(
        "gpu.sm-clock-mhz",
        Nvml,
        Number,
        Record,
        "current SM clock in MHz (volatile)",
    ),
    spec(
        "gpu.mem-clock-mhz",
        Nvml,
        Number,
        Record,
        "current memory clock in MHz (volatile)",
    ),
    spec(
        "gpu.temperature-c",
        Nvml,
        Number,
        Record,
        "temperature in degrees Celsius (volatile)",
    ),
    spec(
        "gpu.other-processes",
        Nvml,
        Number,
        Record,
        "other processes using the GPU (volatile)",
    ),
    spec(
        "driver.version",
        Driver,
        Version,
        Must,
        "NVIDIA driver version",
    ),
    spec(
        "driver.cuda-version",
        Driver,
        Version,
        Must,
        "newest CUDA version the driver supports (cuDriverGetVersion)",
    ),
    spec(
        "driver.library",
        Driver,
        Text,
        Record,
        "where libcuda was loaded from",
    ),
    spec(
        "driver.found-by",
        Driver,
        Text,
        Record,
        "how libcuda was found: the dynamic loader, or repro's search of the host's driver directories",
    ),
    spec(
        "toolchain.nvrtc.version",
        Nvrtc,
        Version,
        Must,
        "NVRTC version that builds use",
    ),
    spec(
        "toolchain.nvrtc.path",
        Nvrtc,
        Text,
        Record,
        "NVRTC library path",
    ),
    spec(
        "toolchain.nvrtc.source",
        Nvrtc,
        Text,
        Record,
        "why that NVRTC was chosen",
    ),
    spec(
        "toolchain.nvcc.version",
        Nvcc,
        Version,
        Must,
        "nvcc version",
    ),
    spec("toolchain.nvcc.path", Nvcc, Text, Record, "nvcc path"),
    spec("host.os", Host, Text, Warn, "operating system (os-release)"),
    spec("host.kernel", Host, Text, Warn, "kernel release"),
    spec("host.arch", Host, Text, Record, "CPU architecture"),
    spec("host.cpu", Host, Text, Record, "CPU model"),
    spec("host.cores", Host, Number, Record, "logical CPUs available"),
    spec(
        "host.memory-mib",
        Host,
        Number,
        Record,
        "total memory in MiB",
    ),
    spec(
        "host.virtualization",
        Host,
        Text,
        Warn,
        "virtual machine or container, where it can be told",
    ),
    spec(
        "host.gcc",
        Tool("gcc"),
        Version,
        Warn,
        "gcc version (nvcc's host compiler)",
    ),
    spec("host.gxx", Tool("g++"), Version, Record, "g++ version"),
    spec(
        "host.clang",
        Tool("clang"),
        Version,
        Record,
        "clang version",
    ),
    spec(
        "host.rustc",
        Tool("rustc"),
        Version,
        Record,
        "rustc version",
    ),
    spec(
        "host.cargo",
        Tool("cargo"),
        Version,
        Record,
        "cargo version",
    ),
    spec(
        "host.python",
        Tool("python3"),
        Version,
        Record,
        "python3 version",
    ),
    spec(
        "python.interpreter",
        Python,
        Text,
        Record,
        "the Python interpreter repro describes and builds extensions for",
    ),
    spec(
        "python.found-by",
        Python,
        Text,
        Record,
        "how it was chosen: --python, repro.toml, VIRTUAL_ENV, CONDA_PREFIX or PATH",
    ),
    spec("python.version", Python, Version, Warn, "Python version"),
    spec(
        "python.abi-tag",
        Python,
        Text,
        Must,
        "Python ABI tag of extension modules (cp311)",
    ),
    spec(
        "python.prefix",
        Python,
        Text,
        Record,
        "the environment's prefix (a venv's directory)",
    ),
    spec(
        "python.distributions",
        Python,
        Number,
        Record,
        "number of installed distributions",
    ),
    spec(
        "python.distributions-digest",
        Python,
        Text,
        Record,
        "sha256 of every installed distribution's name==version (each is also python.dist.NAME)",
    ),
    spec(
        "python.torch.version",
        Python,
        Version,
        Must,
        "PyTorch version with its build tag (torch/version.py)",
    ),
    spec(
        "python.torch.cuda",
        Python,
        Version,
        Must,
        "CUDA version PyTorch was built with",
    ),
    spec(
        "python.torch.cudnn",
        Python,
        Version,
        Warn,
        "cuDNN version PyTorch uses",
    ),
    spec(
        "python.torch.cxx11-abi",
        Python,
        Bool,
        Must,
        "PyTorch's C++ ABI (_GLIBCXX_USE_CXX11_ABI in its CMake config)",
    ),
    spec(
        "python.torch.cuda-archs",
        Python,
        Text,
        Warn,
        "GPU architectures PyTorch's device code was built for",
    ),
    spec(
        "python.torch.git-version",
        Python,
        Text,
        Record,
        "PyTorch's source commit",
    ),
    spec(
        "python.numpy.version",
        Python,
        Version,
        Must,
        "NumPy version",
    ),
    spec(
        "python.triton.version",
        Python,
        Version,
        Warn,
        "Triton version",
    ),
    spec("repo.root", Git, Text, Record, "repository root"),
    spec("repo.head", Git, Text, Record, "HEAD commit"),
    spec("repo.branch", Git, Text, Record, "current branch"),
    spec("repo.tree", Git, Text, Record, "tree id of HEAD"),
    spec(
        "repo.dirty",
        Git,
        Bool,
        Warn,
        "uncommitted changes in the working tree",
    ),
    spec(
        "repo.dirty-digest",
        Git,
        Text,
        Record,
        "sha256 of the uncommitted changes",
    ),
    spec("nix.version", NixVersion, Version, Record, "nix version"),
    spec("nix.flake", Nix, Bool, Record, "flake.nix exists"),
    spec("nix.flake-lock", Nix, Bool, Record, "flake.lock exists"),
    spec(
        "nix.flake-lock-digest",
        Nix,
        Text,
        Must,
        "sha256 of flake.lock",
    ),
    spec(
        "nix.nixpkgs-rev",
        Nix,
        Text,
        Record,
        "locked nixpkgs revision",
    ),
    spec(
        "nix.nixpkgs-nar-hash",
        Nix,
        Text,
        Record,
        "locked nixpkgs narHash",
    ),
    spec(
        "nix.in-shell",
        Nix,
        Text,
        Record,
        "inside a Nix shell (IN_NIX_SHELL)",
    ),
];

/// Environment variables that matter for CUDA work, recorded as `env.NAME`.
pub const ENV_ALLOWLIST: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_MODULE_LOADING",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_CACHE_DISABLE",
    "CUDA_CACHE_PATH",
    "CUDA_CACHE_MAXSIZE",
    "CUDA_FORCE_PTX_JIT",
    "CUDA_DISABLE_PTX_JIT",
    "CUBLAS_WORKSPACE_CONFIG",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "TORCH_CUDA_ARCH_LIST",
    "PYTORCH_CUDA_ALLOC_CONF",
    "REPRO_NVRTC",
    "REPRO_NVCC",
];

/// Prefixes of environment variables that are recorded too.
pub const ENV_PREFIXES: &[&str] = &["NVIDIA_", "NCCL_"];

/// Whether an environment variable belongs in the fingerprint.
pub fn env_allowed(name: &str) -> bool {
    ENV_ALLOWLIST.contains(&name) || ENV_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The prefix of the per-distribution fields: `python.dist.NAME` (PEP 503 normal names).
pub const DIST_PREFIX: &str = "python.dist.";

/// The distribution a `python.dist.NAME` key names, if it is one.
pub fn dist_name(key: &str) -> Option<&str> {
    key.strip_prefix(DIST_PREFIX).filter(|n| {
        !n.is_empty()
            && n.len() <= 100
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !n.starts_with('-')
            && !n.ends_with('-')
    })
}

/// The spec for a lockfile key, or `None` for `env.NAME` keys and unknown keys.
pub fn lookup(key: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.key == key)
}

/// What a lockfile key names: a registered field, an environment variable, or nothing known.
pub fn is_valid_key(key: &str) -> bool {
    lookup(key).is_some()
        || dist_name(key).is_some()
        || key.strip_prefix("env.").is_some_and(|n| {
            !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        })
}

/// The kind of values a lockfile key holds.
pub fn kind_of(key: &str) -> Kind {
    if dist_name(key).is_some() {
        return Version;
    }
    lookup(key).map_or(Text, |s| s.kind)
}

/// The probe that answers a lockfile key.
pub fn probe_of(key: &str) -> Probe {
    if dist_name(key).is_some() {
        return Python;
    }
    lookup(key).map_or(Env, |s| s.probe)
}

/// The registered key closest to `key`, for "did you mean" hints.
pub fn suggest(key: &str) -> Option<&'static str> {
    SPECS
        .iter()
        .map(|s| (levenshtein(key, s.key), s.key))
        .filter(|(d, k)| *d <= 3.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// One probed value, or the reason it could not be probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// The value, as canonical text (numbers in decimal, booleans as `true`/`false`).
    Value(String),
    /// Why there is no value.
    Unavailable(String),
}

impl Field {
    /// The value, if there is one.
    pub fn value(&self) -> Option<&str> {
        match self {
            Field::Value(v) => Some(v),
            Field::Unavailable(_) => None,
        }
    }
}

/// What a probe returns: fields keyed by their fingerprint key.
pub type Fields = std::collections::BTreeMap<String, Field>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_valid() {
        let mut seen = std::collections::BTreeSet::new();
        for s in SPECS {
            assert!(seen.insert(s.key), "duplicate {}", s.key);
            assert!(is_valid_key(s.key));
        }
        assert!(is_valid_key("env.CUDA_VISIBLE_DEVICES"));
        assert!(!is_valid_key("env."));
        assert!(!is_valid_key("gpu.nmae"));
        assert!(is_valid_key("python.dist.nvidia-cudnn-cu12"));
        assert!(!is_valid_key("python.dist.Bad_Name"));
        assert!(!is_valid_key("python.dist."));
        assert_eq!(probe_of("python.dist.numpy"), Python);
        assert_eq!(kind_of("python.dist.numpy"), Version);
    }

    #[test]
    fn suggests_near_misses() {
        assert_eq!(suggest("gpu.nmae"), Some("gpu.name"));
        assert_eq!(suggest("driver.verison"), Some("driver.version"));
        assert_eq!(suggest("completely.different.thing"), None);
    }
}
