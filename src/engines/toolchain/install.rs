//! Installing toolchains from NVIDIA's wheels into the cache, side by side.
//!
//! A toolchain is named by a spec (`nvcc@13.0`, `nvrtc@13.0.88`) and resolved against the
//! project's pins (`repro.toml`) into a [`Plan`]: the wheels to fetch, each with the sha256
//! it must have on this CPU architecture. [`install`] fetches them through pip (or from a
//! local wheel directory), verifies every digest, unpacks them into a staging directory,
//! sets run bits, proves the compiler starts, writes the completion stamp
//! (`toolchain.json`) last and only then renames the tree into place. An exclusive lock per
//! toolchain serialises concurrent installs; the second one finds the stamp and stops. A
//! tree without a valid stamp (an install killed part way, a tree from an older repro) is
//! never used and is removed by the next install.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::foundation::config::Toolchains;
use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::process::{Cmd, ProcessError};

/// The stamp file in every complete toolchain tree, written last.
pub const STAMP: &str = "toolchain.json";

/// The stamp schema this build writes.
pub const STAMP_SCHEMA: u32 = 2;

/// The CPU architecture names pins use (`x86_64`, `aarch64`).
pub fn arch() -> &'static str {
    std::env::consts::ARCH
}

pub use crate::foundation::toolchain_spec::{Family, Spec};

/// One wheel to fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wheel {
    /// The Python package.
    pub package: String,
    /// Its exact version.
    pub version: String,
    /// The sha256 it must have; `None` for a release the project does not pin (toolchain
    /// bisection over published releases), whose digest is recorded, not checked.
    pub sha256: Option<String>,
}

/// A resolved install: which tree, from which wheels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The toolchain.
    pub family: Family,
    /// Its release.
    pub release: String,
    /// The wheels, in the order they are unpacked.
    pub wheels: Vec<Wheel>,
}

impl Plan {
    /// The spec this plan installs.
    pub fn spec(&self) -> Spec {
        Spec::Release {
            family: self.family,
            release: self.release.clone(),
        }
    }
    /// The digest of the pin set: every wheel's package, version and sha256 (absent for an
    /// unpinned release), sorted by package. Two projects that call different wheel sets by
    /// the same release name get different digests, hence different trees.
    pub fn digest(&self) -> String {
        let mut wheels: Vec<serde_json::Value> = self
            .wheels
            .iter()
            .map(|w| serde_json::json!({"package": w.package, "version": w.version, "sha256": w.sha256}))
            .collect();
        wheels.sort_by_key(|w| w.to_string());
        crate::foundation::keys::key_of(&serde_json::json!({
            "family": self.family.name(),
            "wheels": wheels,
        }))
    }
    /// The tree's directory name: family, release and the first 16 hex digits of
    /// [`Plan::digest`] (`nvcc-13.0-3f9a0c1d2e4b5a69`).
    pub fn dir_name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.family.name(),
            self.release,
            &self.digest()[..16]
        )
    }
    /// Whether every wheel has a pinned digest (an install can be verified, so it may
    /// happen on first use).
    pub fn verifiable(&self) -> bool {
        self.wheels.iter().all(|w| w.sha256.is_some())
    }
}

/// The package that carries NVRTC of a given version: CUDA 13 wheels have no suffix, older
/// families carry `-cu12`, `-cu11`.
pub fn nvrtc_package(version: &str) -> String {
    match version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
    {
        Some(m) if m <= 12 => format!("nvidia-cuda-nvrtc-cu{m}"),
        _ => "nvidia-cuda-nvrtc".into(),
    }
}

/// Where the wheels come from.
#[derive(Clone, Debug, Default)]
pub struct Source {
    /// A directory of wheels, used as pip's `--find-links` with `--no-index`.
    pub wheelhouse: Option<PathBuf>,
    /// One wheel file (NVRTC installs only).
    pub wheel_file: Option<PathBuf>,
}

impl Source {
    /// From the command line, falling back to `REPRO_WHEELHOUSE`.
    pub fn new(wheelhouse: Option<PathBuf>, wheel_file: Option<PathBuf>) -> Source {
        let wheelhouse = wheelhouse.or_else(|| {
            std::env::var_os("REPRO_WHEELHOUSE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        Source {
            wheelhouse,
            wheel_file,
        }
    }
    fn origin(&self) -> String {
        match (&self.wheel_file, &self.wheelhouse) {
            (Some(f), _) => format!("wheel file {}", f.display()),
            (None, Some(d)) => format!("wheel directory {}", d.display()),
            (None, None) => "pip".into(),
        }
    }
}

/// Why a toolchain cannot be installed or used.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The spec does not parse.
    #[error("{0}")]
    BadSpec(String),
    /// No pin for this release in repro.toml.
    #[error("{spec} is not a release this project pins")]
    UnknownRelease {
        /// What was asked for.
        spec: String,
        /// The releases pinned, as specs.
        known: Vec<String>,
    },
    /// The release is pinned, but not for this CPU architecture.
    #[error("{spec} is not offered for {arch}: {package} {version} has no sha256 pinned for it")]
    NotForPlatform {
        /// The release.
        spec: String,
        /// This machine's architecture.
        arch: String,
        /// The first wheel without a pin here.
        package: String,
        /// Its version.
        version: String,
        /// The architectures it is pinned for.
        offered: Vec<String>,
    },
    /// pip failed to fetch the wheels.
    #[error("could not fetch the wheels of {spec} ({what})")]
    Download {
        /// The release.
        spec: String,
        /// Where from: pip or a wheel directory.
        what: String,
        /// pip's failure.
        #[source]
        source: Box<ProcessError>,
    },
    /// A wheel is not the pinned one.
    #[error("{wheel} has sha256 {actual}, but the pin is {expected}; refusing to install it")]
    Mismatch {
        /// The wheel file.
        wheel: String,
        /// The pinned digest.
        expected: String,
        /// Its digest.
        actual: String,
    },
    /// A wheel does not hold what it should.
    #[error("{wheel} does not look like a {family} wheel: {what}")]
    Layout {
        /// The wheel file, or the release.
        wheel: String,
        /// nvcc or nvrtc.
        family: &'static str,
        /// What is missing.
        what: String,
    },
    /// The disk filled up.
    #[error("no space left on the device while installing {spec} into {}", .dir.display())]
    DiskFull {
        /// The release.
        spec: String,
        /// The toolchains directory.
        dir: PathBuf,
    },
    /// A file operation failed.
    #[error("cannot {what} {}", .path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Neither XDG_CACHE_HOME nor HOME is set.
    #[error("cannot find a cache directory: neither XDG_CACHE_HOME nor HOME is set")]
    NoCache,
    /// A toolchain is needed, not installed, and `--offline` forbids installing it.
    #[error("{spec} is pinned but not installed{}, and --offline (or REPRO_OFFLINE) forbids installing it", .detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Offline {
        /// The release.
        spec: String,
        /// Why a tree there does not count.
        detail: Option<String>,
    },
    /// A release nobody pins by sha256 is not installed: repro installs only what it can
    /// verify on first use.
    #[error("{spec} is not installed, and no sha256 is pinned for it, so repro does not install it on first use{}", .detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Unverifiable {
        /// The release.
        spec: String,
        /// Why a tree there does not count.
        detail: Option<String>,
    },
    /// A pinned toolchain is not installed (builds and env check say so).
    #[error("{spec} is pinned but not installed")]
    NotInstalled {
        /// The release.
        spec: String,
        /// Why the tree there, if any, does not count.
        detail: Option<String>,
    },
}

impl InstallError {
    /// The command that installs `spec`.
    pub fn install_command(spec: &str) -> String {
        format!("repro toolchain install {spec}")
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// Resolves a spec against the project's pins. `unpinned_ok` lets releases the project
/// does not pin through (toolchain bisection over published NVRTC releases); their digests
/// are recorded, not checked. `sha256` is an explicit digest for a single-wheel NVRTC.
pub fn plan(
    cfg: &Toolchains,
    spec: &Spec,
    sha256: Option<&str>,
    unpinned_ok: bool,
) -> Result<Plan, InstallError> {
    let Spec::Release { family, release } = spec else {
        return Err(InstallError::BadSpec(
            "`system` is not something repro installs".into(),
        ));
    };
    let known = || known_specs(cfg);
    match family {
        Family::Nvcc => {
            let Some(r) = cfg.nvcc.get(release) else {
                return Err(InstallError::UnknownRelease {
                    spec: spec.to_string(),
                    known: known(),
                });
            };
            let mut wheels = Vec::new();
            for w in &r.wheels {
                let Some(sha) = w.sha256.get(arch()) else {
                    return Err(InstallError::NotForPlatform {
                        spec: spec.to_string(),
                        arch: arch().into(),
                        package: w.package.clone(),
                        version: w.version.clone(),
                        offered: w.sha256.keys().cloned().collect(),
                    });
                };
                wheels.push(Wheel {
                    package: w.package.clone(),
                    version: w.version.clone(),
                    sha256: Some(sha.to_lowercase()),
                });
            }
            Ok(Plan {
                family: Family::Nvcc,
                release: release.clone(),
                wheels,
            })
        }
        Family::Nvrtc => {
            let pin = cfg.nvrtc.as_ref().filter(|p| &p.version == release);
            let sha = match (sha256, pin) {
                (Some(s), _) => Some(s.to_lowercase()),
                (None, Some(p)) => match p.sha256.get(arch()) {
                    Some(s) => Some(s.to_lowercase()),
                    None => {
                        return Err(InstallError::NotForPlatform {
                            spec: spec.to_string(),
                            arch: arch().into(),
                            package: nvrtc_package(release),
                            version: release.clone(),
                            offered: p.sha256.keys().cloned().collect(),
                        });
                    }
                },
                (None, None) if unpinned_ok => None,
                (None, None) => {
                    return Err(InstallError::UnknownRelease {
                        spec: spec.to_string(),
                        known: known(),
                    });
                }
            };
            Ok(Plan {
                family: Family::Nvrtc,
                release: release.clone(),
                wheels: vec![Wheel {
                    package: nvrtc_package(release),
                    version: release.clone(),
                    sha256: sha,
                }],
            })
        }
    }
}

/// Every release the project pins, as specs.
pub fn known_specs(cfg: &Toolchains) -> Vec<String> {
    let mut v: Vec<String> = cfg.nvcc.keys().map(|r| format!("nvcc@{r}")).collect();
    if let Some(p) = &cfg.nvrtc {
        v.push(format!("nvrtc@{}", p.version));
    }
    v
}

/// The wheels a working nvcc tree is unpacked from, for CUDA 13 and later: the compiler
/// driver, NVVM (cicc, libnvvm), the CRT headers, the runtime headers and CCCL.
pub const NVCC_PACKAGES: [&str; 5] = [
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cccl",
];

/// The versions of `package` available as wheels for this platform: the wheel files in
/// the source's directory, else what pip's index lists (`pip index versions`).
pub fn available_versions(package: &str, source: &Source) -> Result<Vec<String>, ProcessError> {
    let mut v = Vec::new();
    if let Some(dir) = &source.wheelhouse {
        let prefix = format!("{}-", package.replace('-', "_"));
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".whl") || !name.contains(arch()) {
                continue;
            }
            if let Some(rest) = name.strip_prefix(&prefix)
                && let Some((version, _)) = rest.split_once('-')
            {
                v.push(version.to_string());
            }
        }
        return Ok(v);
    }
    let out = Cmd::new("python3")
        .args([
            "-m",
            "pip",
            "index",
            "versions",
            "--disable-pip-version-check",
            package,
        ])
        .timeout(Duration::from_secs(120))
        .run()?;
    Ok(parse_index_versions(&out.stdout_str()))
}

/// The versions in `pip index versions` output ("Available versions: 13.0.88, 13.0.48").
pub fn parse_index_versions(text: &str) -> Vec<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Available versions:"))
        .map(|rest| {
            rest.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// `13.1` of `13.1.115` (and of `13.1`).
pub fn major_minor(version: &str) -> Option<String> {
    let mut it = version.split('.');
    let (a, b) = (it.next()?, it.next()?);
    (a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok()).then(|| format!("{a}.{b}"))
}

/// The newest of `versions` in the release `mm` (major.minor), by version order.
fn newest_in(versions: &[String], mm: &str) -> Option<String> {
    versions
        .iter()
        .filter(|v| major_minor(v).as_deref() == Some(mm))
        .filter(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .max_by(|a, b| crate::foundation::version::compare(a, b))
        .cloned()
}

/// A plan for an nvcc release (major.minor) the project does not pin: each of
/// [`NVCC_PACKAGES`] at its newest version of that release, as pip (or the wheel directory)
/// offers them. Nothing is checked against a pin: the digests found are recorded in the
/// stamp and in the bisection record (trust on first use).
pub fn plan_unpinned_nvcc(release: &str, source: &Source) -> Result<Plan, InstallError> {
    let spec = format!("nvcc@{release}");
    let mm = major_minor(release)
        .filter(|mm| mm == release)
        .ok_or_else(|| {
            InstallError::BadSpec(format!(
                "{spec}: an nvcc release is named by major.minor (nvcc@13.1)"
            ))
        })?;
    let major: u32 = mm
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 13 {
        return Err(InstallError::Layout {
            wheel: spec,
            family: "nvcc",
            what: "CUDA 12's nvidia-cuda-nvcc-cu12 wheels carry ptxas, NVVM and headers but no nvcc driver; repro installs nvcc from CUDA 13 on".into(),
        });
    }
    let mut wheels = Vec::new();
    for package in NVCC_PACKAGES {
        let versions = available_versions(package, source).map_err(|e| InstallError::Download {
            spec: spec.clone(),
            what: match &source.wheelhouse {
                Some(d) => format!("listing {package} in the wheel directory {}", d.display()),
                None => format!("listing the versions of {package} through pip"),
            },
            source: Box::new(e),
        })?;
        let version = newest_in(&versions, &mm).ok_or_else(|| InstallError::UnknownRelease {
            spec: spec.clone(),
            known: Vec::new(),
        })?;
        wheels.push(Wheel {
            package: package.to_string(),
            version,
            sha256: None,
        });
    }
    Ok(Plan {
        family: Family::Nvcc,
        release: mm,
        wheels,
    })
}

/// A plan for `spec` from the pins, or, for a toolchain bisection (`unpinned_ok`), from what
/// the source offers: NVRTC releases by their version, nvcc releases by major.minor.
pub fn plan_any(cfg: &Toolchains, spec: &Spec, source: &Source) -> Result<Plan, InstallError> {
    match plan(cfg, spec, None, true) {
        Err(InstallError::UnknownRelease { .. })
            if matches!(
                spec,
                Spec::Release {
                    family: Family::Nvcc,
                    ..
                }
            ) =>
        {
            let Spec::Release { release, .. } = spec else {
                unreachable!("matched above")
            };
            plan_unpinned_nvcc(release, source)
        }
        other => other,
    }
}

pub use crate::foundation::records::InstalledWheel;

/// The completion stamp of a toolchain tree (`toolchain.json`), written last.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Stamp {
    /// Always [`STAMP_SCHEMA`].
    pub schema: u32,
    /// nvcc or nvrtc.
    pub family: Family,
    /// The release (`13.0`, `13.0.88`).
    pub release: String,
    /// The version the compiler reports (`13.0.88` from nvcc, `13.0` from NVRTC).
    pub reports: String,
    /// The compiler inside the tree, relative to it (`nvidia/cu13/bin/nvcc`, `lib`).
    pub compiler: String,
    /// The wheels the tree was unpacked from.
    pub wheels: Vec<InstalledWheel>,
    /// Where they came from: pip, a wheel directory, a wheel file.
    pub origin: String,
    /// The tree's size in bytes.
    pub bytes: u64,
    /// When it was installed (RFC 3339).
    pub installed_at: String,
    /// The digest of the pin set the tree was made from ([`Plan::digest`]).
    #[serde(default)]
    pub pins_digest: Option<String>,
    /// Include directories of component libraries (CUTLASS, cuDNN) inside the tree,
    /// relative to it, that nvcc builds add with `-I`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include_dirs: Vec<String>,
}

impl Stamp {
    /// Whether this tree is what `plan` asks for (every pinned digest equal).
    pub fn satisfies(&self, plan: &Plan) -> bool {
        self.family == plan.family
            && self.release == plan.release
            && self.wheels.len() == plan.wheels.len()
            && plan.wheels.iter().zip(&self.wheels).all(|(p, s)| {
                p.package == s.package
                    && p.version == s.version
                    && p.sha256.as_ref().is_none_or(|d| *d == s.sha256)
            })
    }

    /// The compiler identity for build keys: the release and every wheel's sha256, never
    /// the compiler's `--version` text or the tree's path.
    pub fn identity(&self) -> serde_json::Value {
        let wheels: std::collections::BTreeMap<&str, &str> = self
            .wheels
            .iter()
            .map(|w| (w.package.as_str(), w.sha256.as_str()))
            .collect();
        serde_json::json!({
            "name": self.family.name(),
            "release": self.release,
            "version": self.reports,
            "wheels": wheels,
        })
    }
}

/// The directory toolchains are installed in.
pub fn root() -> Result<PathBuf, InstallError> {
    super::managed_dir().ok_or(InstallError::NoCache)
}

/// Reads the stamp of the tree at `dir`; `Err` says why the tree does not count.
pub fn read_stamp(dir: &Path) -> Result<Stamp, StampError> {
    let path = dir.join(STAMP);
    crate::foundation::stamp::note(&path);
    let meta = std::fs::metadata(&path).map_err(|_| StampError::Missing)?;
    if meta.len() > 1 << 20 {
        return Err(StampError::TooLarge { path });
    }
    let bytes = std::fs::read(&path).map_err(|e| StampError::Read {
        path: path.clone(),
        cause: e.to_string(),
    })?;
    let stamp: Stamp = serde_json::from_slice(&bytes).map_err(|e| StampError::Foreign {
        cause: e.to_string(),
    })?;
    if stamp.schema != STAMP_SCHEMA {
        return Err(StampError::Schema {
            schema: stamp.schema,
        });
    }
    Ok(stamp)
}

/// Why a toolchain tree does not count as installed: its stamp says so.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StampError {
    /// No stamp: the install never finished.
    #[error("it has no completion stamp (an install was interrupted)")]
    Missing,
    /// A stamp too large to be one.
    #[error("its stamp {} is implausibly large", path.display())]
    TooLarge {
        /// The stamp file.
        path: PathBuf,
    },
    /// The stamp cannot be read.
    #[error("cannot read {}: {cause}", path.display())]
    Read {
        /// The stamp file.
        path: PathBuf,
        /// The system's words.
        cause: String,
    },
    /// The stamp is not JSON this repro writes.
    #[error("its stamp is not one this repro writes ({cause})")]
    Foreign {
        /// The parser's words.
        cause: String,
    },
    /// Another schema.
    #[error("its stamp has schema {schema}, not the one this repro writes")]
    Schema {
        /// The stamp's schema.
        schema: u32,
    },
}

/// An installed toolchain: its tree and stamp.
#[derive(Clone, Debug)]
pub struct Installed {
    /// The tree.
    pub dir: PathBuf,
    /// Its stamp.
    pub stamp: Stamp,
}

impl Installed {
    /// The compiler: nvcc's path, or NVRTC's library directory.
    pub fn compiler(&self) -> PathBuf {
        self.dir.join(&self.stamp.compiler)
    }
}

/// The installed tree of `plan`, if one is complete and made of exactly its wheels. Trees
/// are named by the digest of their pin set, so this never finds another project's wheels.
pub fn find(plan: &Plan) -> Result<Installed, InstallError> {
    let dir = root()?.join(plan.dir_name());
    let spec = plan.spec().to_string();
    if !crate::foundation::stamp::noted(&dir).exists() {
        return Err(InstallError::NotInstalled { spec, detail: None });
    }
    let stamp = read_stamp(&dir).map_err(|why| InstallError::NotInstalled {
        spec: spec.clone(),
        detail: Some(format!("{} does not count: {why}", dir.display())),
    })?;
    if !stamp.satisfies(plan) {
        return Err(InstallError::NotInstalled {
            spec,
            detail: Some(format!(
                "{} was made from other wheels than the pins",
                dir.display()
            )),
        });
    }
    Ok(Installed { dir, stamp })
}

/// The newest complete tree of `family` and `release`, for a build that names a release
/// its project does not pin (a toolchain bisection's unpinned trees, or another project's):
/// with no pin to hold it to, any tree of that release will do, and the build key records
/// exactly which wheels it was.
pub fn find_any(family: Family, release: &str) -> Option<Installed> {
    list()
        .into_iter()
        .filter_map(|e| {
            Some(Installed {
                stamp: e.stamp.ok()?,
                dir: e.dir,
            })
        })
        .filter(|t| t.stamp.family == family && t.stamp.release == release)
        .max_by(|a, b| a.stamp.installed_at.cmp(&b.stamp.installed_at))
}

/// What [`install`] did.
#[derive(Clone, Debug)]
pub struct Done {
    /// The tree.
    pub installed: Installed,
    /// False when a complete tree was already there.
    pub fresh: bool,
    /// What was found and removed first (an interrupted install, a stale tree).
    pub replaced: Option<String>,
}

/// What an install tells its caller as it goes: status lines, and bytes done in each long
/// phase (download, verification, unpacking), for a progress bar.
pub trait Progress {
    /// A status line.
    fn message(&mut self, m: &str);
    /// `done` bytes of `total` (when known) in `phase` ("downloading", "verifying",
    /// "unpacking"); a phase ends with `done == total`.
    fn bytes(&mut self, _phase: &'static str, _done: u64, _total: Option<u64>) {}
}

impl<F: FnMut(&str)> Progress for F {
    fn message(&mut self, m: &str) {
        self(m)
    }
}

/// Removes a staging directory unless the install succeeded.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Installs `plan` (or finds it installed). Safe to run concurrently and after a kill.
pub fn install(
    plan: &Plan,
    source: &Source,
    force: bool,
    progress: &mut dyn Progress,
) -> Result<Done, InstallError> {
    let root = root()?;
    let spec = plan.spec().to_string();
    let full =
        |e: std::io::Error, what: &'static str, path: &Path| full_or(e, what, path, &spec, &root);
    // The lock is released when `lock` is dropped, on every path out of here.
    let lock = lock_install(&root, plan, &spec, progress)?;
    let dest = root.join(plan.dir_name());
    let replaced = match existing(&dest, plan, force, progress)? {
        Ok(done) => return Ok(done),
        Err(replaced) => replaced,
    };
    // Staging directories left by killed installs are removed, best effort: a killed
    // install's unzip child may outlive it and still be writing there, which is why every
    // install stages in a directory of its own.
    let prefix = format!(".staging-{}-", plan.dir_name());
    for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    let staging_dir = tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(&root)
        .map_err(|e| full(e, "create a directory in", &root))?
        .keep();
    let staging = Staging(staging_dir);
    let files = fetch(plan, source, &staging.0, &spec, progress)?;
    let (wheels, total) = verify(plan, &files, progress)?;
    progress.message(&format!("unpacking {} wheel(s) of {spec}", files.len()));
    let tree = staging.0.join("tree");
    let unpacked = staging.0.join("unpacked");
    let target = match plan.family {
        Family::Nvcc => &tree,
        Family::Nvrtc => &unpacked,
    };
    let mut unpacked_bytes = 0u64;
    progress.bytes("unpacking", 0, Some(total));
    for file in &files {
        unzip(file, target).map_err(|e| disk_full_or(e, &spec, plan.family, file, &root))?;
        unpacked_bytes += std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        progress.bytes("unpacking", unpacked_bytes, Some(total));
    }
    let (compiler, reports) = match plan.family {
        Family::Nvcc => place_nvcc(&tree, &spec)?,
        Family::Nvrtc => place_nvrtc(&tree, &unpacked, &spec, &root)?,
    };
    let compiler_rel = compiler.clone();
    let stamp = Stamp {
        schema: STAMP_SCHEMA,
        family: plan.family,
        release: plan.release.clone(),
        reports,
        compiler,
        wheels,
        origin: source.origin(),
        bytes: tree_size(&tree),
        installed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        pins_digest: Some(plan.digest()),
        include_dirs: match plan.family {
            Family::Nvcc => component_include_dirs(&tree, &compiler_rel),
            Family::Nvrtc => Vec::new(),
        },
    };
    write_stamp(&tree, &stamp, &full)?;
    std::fs::rename(&tree, &dest).map_err(io("install into", &dest))?;
    drop(staging);
    drop(lock);
    Ok(Done {
        installed: Installed { dir: dest, stamp },
        fresh: true,
        replaced,
    })
}

/// A full disk as [`InstallError::DiskFull`] (naming the toolchain root), any other I/O
/// error as it is.
fn full_or(
    e: std::io::Error,
    what: &'static str,
    path: &Path,
    spec: &str,
    root: &Path,
) -> InstallError {
    if e.kind() == std::io::ErrorKind::StorageFull {
        InstallError::DiskFull {
            spec: spec.to_string(),
            dir: root.to_path_buf(),
        }
    } else {
        io(what, path)(e)
    }
}

/// Takes the install lock of this toolchain, waiting (and saying so) while another install
/// holds it.
fn lock_install(
    root: &Path,
    plan: &Plan,
    spec: &str,
    progress: &mut dyn Progress,
) -> Result<std::fs::File, InstallError> {
    use fs4::fs_std::FileExt as _;
    let locks = root.join(".locks");
    std::fs::create_dir_all(&locks).map_err(|e| full_or(e, "create", &locks, spec, root))?;
    let lock_path = locks.join(format!("{}.lock", plan.dir_name()));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io("open", &lock_path))?;
    if !lock.try_lock_exclusive().unwrap_or(false) {
        progress.message(&format!("waiting for another install of {spec} to finish"));
        lock.lock_exclusive().map_err(io("lock", &lock_path))?;
    }
    Ok(lock)
}

/// The tree already installed: `Ok(done)` when it satisfies the plan (and no `--force`),
/// else removed, with why (`Err(reason)`; `None` when there was none).
fn existing(
    dest: &Path,
    plan: &Plan,
    force: bool,
    progress: &mut dyn Progress,
) -> Result<Result<Done, Option<String>>, InstallError> {
    let mut replaced = None;
    if dest.exists() {
        match read_stamp(dest) {
            Ok(stamp) if !force && stamp.satisfies(plan) => {
                return Ok(Ok(Done {
                    installed: Installed {
                        dir: dest.to_path_buf(),
                        stamp,
                    },
                    fresh: false,
                    replaced: None,
                }));
            }
            Ok(_) if force => replaced = Some("reinstalling (--force)".to_string()),
            Ok(_) => {
                replaced = Some(
                    "the installed tree was made from other wheels than the pins; replacing it"
                        .to_string(),
                )
            }
            Err(why) => replaced = Some(format!("{} {why}; installing it again", dest.display())),
        }
        if let Some(r) = &replaced {
            progress.message(r);
        }
        std::fs::remove_dir_all(dest).map_err(io("remove", dest))?;
    }
    Ok(Err(replaced))
}

/// Checks each fetched wheel against its pin (the sha256 of each is recorded either way),
/// and returns them with their total size.
fn verify(
    plan: &Plan,
    files: &[PathBuf],
    progress: &mut dyn Progress,
) -> Result<(Vec<InstalledWheel>, u64), InstallError> {
    let mut wheels = Vec::new();
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let mut done = 0u64;
    for (w, file) in plan.wheels.iter().zip(files) {
        let actual = sha256_file_with(file, &mut |n| {
            done += n;
            progress.bytes("verifying", done, Some(total));
        })?;
        if let Some(expected) = &w.sha256
            && *expected != actual
        {
            return Err(InstallError::Mismatch {
                wheel: file
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                expected: expected.clone(),
                actual,
            });
        }
        wheels.push(InstalledWheel {
            package: w.package.clone(),
            version: w.version.clone(),
            file: file
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            sha256: actual,
            pinned: w.sha256.is_some(),
        });
    }
    Ok((wheels, total))
}

/// Finds nvcc in the unpacked wheels and proves it starts: its path in the tree and its
/// version.
fn place_nvcc(tree: &Path, spec: &str) -> Result<(String, String), InstallError> {
    let spec = spec.to_string();
    set_run_bits(tree)?;
    let rel = ["nvidia/cu13/bin/nvcc", "nvidia/cuda_nvcc/bin/nvcc"]
        .into_iter()
        .find(|r| tree.join(r).is_file())
        .ok_or_else(|| InstallError::Layout {
            wheel: spec.clone(),
            family: "nvcc",
            what: "no nvidia/cu13/bin/nvcc or nvidia/cuda_nvcc/bin/nvcc in the unpacked wheels"
                .into(),
        })?;
    // Prove the compiler starts before the tree is put in place.
    let out = Cmd::new(tree.join(rel))
        .arg("--version")
        .timeout(Duration::from_secs(30))
        .run()
        .map_err(|e| InstallError::Layout {
            wheel: spec.clone(),
            family: "nvcc",
            what: format!("its nvcc does not run: {e}"),
        })?;
    let v = super::parse_nvcc_version(&out.stdout_str()).unwrap_or_default();
    Ok((rel.to_string(), v))
}

/// Moves NVRTC's library directory into the tree and loads it: its path in the tree and
/// its version.
fn place_nvrtc(
    tree: &Path,
    unpacked: &Path,
    spec: &str,
    root: &Path,
) -> Result<(String, String), InstallError> {
    let spec = spec.to_string();
    let lib = ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"]
        .iter()
        .map(|s| unpacked.join(s))
        .find(|p| p.is_dir())
        .ok_or_else(|| InstallError::Layout {
            wheel: spec.clone(),
            family: "nvrtc",
            what: "no nvidia/cu13/lib or nvidia/cuda_nvrtc/lib".into(),
        })?;
    std::fs::create_dir_all(tree).map_err(|e| full_or(e, "create", tree, &spec, root))?;
    std::fs::rename(&lib, tree.join("lib")).map_err(io("move", &lib))?;
    let path = super::find_in(&tree.join("lib")).ok_or_else(|| InstallError::Layout {
        wheel: spec.clone(),
        family: "nvrtc",
        what: "no libnvrtc.so in it".into(),
    })?;
    let loaded = super::load_at(super::Found {
        path,
        source: "new install".into(),
    })
    .map_err(|e| InstallError::Layout {
        wheel: spec.clone(),
        family: "nvrtc",
        what: e.to_string(),
    })?;
    Ok(("lib".to_string(), loaded.version))
}

/// Writes the stamp, the last thing written into the tree; the rename then publishes it
/// whole.
fn write_stamp(
    tree: &Path,
    stamp: &Stamp,
    full: &dyn Fn(std::io::Error, &'static str, &Path) -> InstallError,
) -> Result<(), InstallError> {
    let text = serde_json::to_string_pretty(stamp).expect("a stamp serialises") + "\n";
    crate::foundation::fsutil::write_atomic(&tree.join(STAMP), text.as_bytes(), true).map_err(
        |e| match e {
            crate::foundation::fsutil::WriteError::Io { path, source } => {
                full(source, "write", &path)
            }
            other => InstallError::Io {
                what: "write",
                path: tree.join(STAMP),
                source: std::io::Error::other(other.to_string()),
            },
        },
    )?;
    Ok(())
}

/// The include directories of component libraries unpacked into an nvcc tree, relative to
/// it: every `nvidia/*/include` other than the compiler's own (which nvcc searches by
/// itself), and CUTLASS's headers (`cutlass_library/source/include` and its utilities).
pub fn component_include_dirs(tree: &Path, compiler: &str) -> Vec<String> {
    let own = Path::new(compiler)
        .parent()
        .and_then(Path::parent)
        .map(|p| p.join("include"));
    let mut dirs: Vec<String> = std::fs::read_dir(tree.join("nvidia"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| Path::new("nvidia").join(e.file_name()).join("include"))
        .filter(|rel| Some(rel) != own.as_ref() && tree.join(rel).is_dir())
        .map(|rel| rel.to_string_lossy().into_owned())
        .collect();
    for rel in [
        "cutlass_library/source/include",
        "cutlass_library/source/tools/util/include",
    ] {
        if tree.join(rel).is_dir() {
            dirs.push(rel.to_string());
        }
    }
    dirs.sort();
    dirs
}

fn disk_full_or(
    e: ProcessError,
    spec: &str,
    family: Family,
    wheel: &Path,
    root: &Path,
) -> InstallError {
    if e.to_string().contains("No space left on device") {
        InstallError::DiskFull {
            spec: spec.into(),
            dir: root.to_owned(),
        }
    } else {
        InstallError::Layout {
            wheel: wheel.display().to_string(),
            family: family.name(),
            what: format!("it does not unpack: {e}"),
        }
    }
}

/// Gets the plan's wheel files into `staging/download` (or names the given wheel file), in
/// plan order.
fn fetch(
    plan: &Plan,
    source: &Source,
    staging: &Path,
    spec: &str,
    progress: &mut dyn Progress,
) -> Result<Vec<PathBuf>, InstallError> {
    if let Some(file) = &source.wheel_file {
        if plan.wheels.len() != 1 {
            return Err(InstallError::BadSpec(format!(
                "{spec} is made of {} wheels; --wheel installs one (use --wheels DIR)",
                plan.wheels.len()
            )));
        }
        return Ok(vec![file.clone()]);
    }
    let dl = staging.join("download");
    let mut cmd = Cmd::new("python3").args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
    ]);
    cmd = cmd.arg(&dl);
    let what = match &source.wheelhouse {
        Some(dir) => {
            cmd = cmd.args(["--no-index", "--find-links"]).arg(dir);
            format!("from the wheel directory {}", dir.display())
        }
        None => "through pip".to_string(),
    };
    progress.message(&format!(
        "fetching {} wheel(s) of {spec} {what}",
        plan.wheels.len()
    ));
    cmd = cmd.args(
        plan.wheels
            .iter()
            .map(|w| format!("{}=={}", w.package, w.version)),
    );
    // pip writes each wheel into its temporary directory while it downloads: that
    // directory's size is the bytes so far. From a wheel directory the total is known too.
    let tmp = staging.join("pip-tmp");
    std::fs::create_dir_all(&tmp).map_err(io("create", &tmp))?;
    let total = source
        .wheelhouse
        .as_ref()
        .map(|dir| wheelhouse_bytes(plan, dir));
    let cmd = cmd.env("TMPDIR", &tmp).timeout(Duration::from_secs(1800));
    let result = run_watched(cmd, &tmp, &dl, total, progress);
    let got = tree_size(&dl);
    progress.bytes("downloading", got, Some(total.unwrap_or(got).max(got)));
    result.map_err(|source| {
        if source.to_string().contains("No space left on device") {
            InstallError::DiskFull {
                spec: spec.into(),
                dir: staging.parent().unwrap_or(staging).to_owned(),
            }
        } else {
            InstallError::Download {
                spec: spec.into(),
                what: what.clone(),
                source: Box::new(source),
            }
        }
    })?;
    downloaded(plan, &dl)
}

/// The bytes of the plan's wheels in a wheel directory (this machine's architecture).
fn wheelhouse_bytes(plan: &Plan, dir: &Path) -> u64 {
    let names: Vec<String> = plan
        .wheels
        .iter()
        .map(|w| format!("{}-{}-", w.package.replace(['-', '.'], "_"), w.version).to_lowercase())
        .collect();
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_lowercase();
            n.ends_with(".whl") && n.contains(arch()) && names.iter().any(|p| n.starts_with(p))
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum::<u64>()
}

/// Runs pip, telling `progress` the bytes so far: pip writes each wheel into its temporary
/// directory while it downloads, so that directory's size (and the destination's) is it.
fn run_watched(
    cmd: Cmd,
    tmp: &Path,
    dl: &Path,
    total: Option<u64>,
    progress: &mut dyn Progress,
) -> Result<crate::foundation::process::Output, ProcessError> {
    let finished = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !finished.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = tx.send(tree_size(tmp) + tree_size(dl));
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let runner = scope.spawn(move || {
            let r = cmd.run();
            let _ = done_tx.send(());
            r
        });
        // The caller's progress is not Send: it is told from this thread.
        loop {
            match done_rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(n) = rx.try_iter().last() {
                        progress.bytes("downloading", n, total);
                    }
                }
            }
        }
        finished.store(true, std::sync::atomic::Ordering::Relaxed);
        runner.join().expect("the pip runner does not panic")
    })
}

/// The wheel file pip fetched for each of the plan's wheels.
fn downloaded(plan: &Plan, dl: &Path) -> Result<Vec<PathBuf>, InstallError> {
    let names: Vec<PathBuf> = std::fs::read_dir(dl)
        .map_err(io("read", dl))?
        .flatten()
        .map(|e| e.path())
        .collect();
    plan.wheels
        .iter()
        .map(|w| {
            // Wheel file names normalise the package's dashes to underscores.
            let prefix = format!("{}-{}-", w.package.replace(['-', '.'], "_"), w.version);
            names
                .iter()
                .find(|p| {
                    p.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        n.to_lowercase().starts_with(&prefix.to_lowercase()) && n.ends_with(".whl")
                    })
                })
                .cloned()
                .ok_or_else(|| InstallError::Layout {
                    wheel: format!("{}=={}", w.package, w.version),
                    family: plan.family.name(),
                    what: "pip fetched no wheel file for it".into(),
                })
        })
        .collect()
}

/// The sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String, InstallError> {
    sha256_file_with(path, &mut |_| {})
}

/// The sha256 of a file, streamed, telling `read` of each chunk's size.
fn sha256_file_with(path: &Path, read: &mut dyn FnMut(u64)) -> Result<String, InstallError> {
    use sha2::Digest as _;
    let mut f = std::fs::File::open(path).map_err(io("read", path))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io("read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        read(n as u64);
    }
    Ok(hex::encode(h.finalize()))
}

fn unzip(wheel: &Path, into: &Path) -> Result<(), ProcessError> {
    Cmd::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(wheel)
        .arg(into)
        .timeout(Duration::from_secs(900))
        .run()
        .map(|_| ())
}

/// Zip archives unpacked by Python lose their modes: every file in a `bin` directory (nvcc,
/// ptxas, cicc under nvvm/bin, ...) gets its run bits back.
fn set_run_bits(tree: &Path) -> Result<(), InstallError> {
    use std::os::unix::fs::PermissionsExt as _;
    for e in walkdir::WalkDir::new(tree).into_iter().flatten() {
        let in_bin = e
            .path()
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|n| n == "bin");
        if e.file_type().is_file() && in_bin {
            let mut perm = e
                .metadata()
                .map_err(|err| io("stat", e.path())(err.into()))?
                .permissions();
            perm.set_mode(perm.mode() | 0o755);
            std::fs::set_permissions(e.path(), perm).map_err(io("chmod", e.path()))?;
        }
    }
    Ok(())
}

/// The size of the files under `dir`.
pub fn tree_size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// One entry of the toolchains directory, complete or not.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its directory.
    pub dir: PathBuf,
    /// The stamp, or why the tree does not count.
    pub stamp: Result<Stamp, StampError>,
}

/// Every toolchain tree in the cache, sorted by name (staging and lock directories aside).
pub fn list() -> Vec<Entry> {
    let Ok(root) = root() else {
        return Vec::new();
    };
    crate::foundation::stamp::note(&root);
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort_by(|a, b| {
        crate::foundation::version::compare(&a.to_string_lossy(), &b.to_string_lossy())
    });
    dirs.into_iter()
        .map(|dir| Entry {
            stamp: read_stamp(&dir),
            dir,
        })
        .collect()
}

/// The directory where each tree notes the projects that use it, one file per project.
const PROJECTS: &str = ".projects";

/// Notes that the project at `project` uses the tree `tree` (a directory name), so that
/// `toolchain list` can say whom a tree serves and `toolchain gc` keeps it. Best effort: a
/// cache that cannot be written does not stop a build.
pub fn note_project(tree: &str, project: &Path) {
    let Ok(root) = root() else { return };
    let text = project.display().to_string();
    let name = &crate::foundation::keys::sha256_hex(text.as_bytes())[..16];
    let file = root.join(PROJECTS).join(tree).join(name);
    if std::fs::read_to_string(crate::foundation::stamp::noted(&file)).is_ok_and(|t| t == text) {
        return;
    }
    let _ = std::fs::create_dir_all(file.parent().unwrap_or(&root));
    let _ = crate::foundation::fsutil::write_atomic(&file, text.as_bytes(), true);
}

/// The projects noted for the tree `tree`, as they were noted (they may be gone since).
pub fn noted_projects(tree: &str) -> Vec<PathBuf> {
    let Ok(root) = root() else { return Vec::new() };
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(PROJECTS).join(tree))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() < 4096))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(PathBuf::from)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Every plan a project's pins make on this machine (each nvcc release, the NVRTC pin),
/// leaving out those not offered for this CPU architecture.
pub fn pinned_plans(pins: &Toolchains) -> Vec<Plan> {
    let mut specs: Vec<Spec> = pins
        .nvcc
        .keys()
        .map(|r| Spec::Release {
            family: Family::Nvcc,
            release: r.clone(),
        })
        .collect();
    if let Some(p) = &pins.nvrtc {
        specs.push(Spec::Release {
            family: Family::Nvrtc,
            release: p.version.clone(),
        });
    }
    specs
        .iter()
        .filter_map(|s| plan(pins, s, None, false).ok())
        .collect()
}

/// The projects among those noted for `tree` whose repro.toml still pins exactly its
/// wheels.
pub fn serves(tree: &str) -> Vec<PathBuf> {
    noted_projects(tree)
        .into_iter()
        .filter(|p| {
            p.join(crate::foundation::config::FILE).is_file()
                && crate::foundation::config::load(p).is_ok_and(|c| {
                    pinned_plans(&c.toolchain)
                        .iter()
                        .any(|pl| pl.dir_name() == tree)
                })
        })
        .collect()
}

/// One tree `gc` removed (or would remove).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Collected {
    /// The tree's directory.
    pub dir: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Why it goes.
    pub reason: String,
}

/// Removes the trees no project's pins use any more: incomplete ones, trees whose noted
/// projects are gone or pin other wheels now, and trees nobody noted (toolchain bisections'
/// unpinned releases). A tree being installed or used under its lock is left alone.
/// `dry_run` only says what would go.
pub fn gc(dry_run: bool) -> Result<Vec<Collected>, InstallError> {
    use fs4::fs_std::FileExt as _;
    let root = root()?;
    let mut out = Vec::new();
    for e in list() {
        let name = e
            .dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let reason = match &e.stamp {
            Err(why) => format!("incomplete: {why}"),
            Ok(_) if !serves(&name).is_empty() => continue,
            Ok(_) if noted_projects(&name).is_empty() => {
                "no project's pins name it (installed for a toolchain bisection or by hand)".into()
            }
            Ok(_) => "the projects that used it are gone or pin other wheels now".into(),
        };
        let bytes = tree_size(&e.dir);
        if !dry_run {
            let lock_path = root.join(".locks").join(format!("{name}.lock"));
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path);
            let Ok(lock) = lock else { continue };
            if !lock.try_lock_exclusive().unwrap_or(false) {
                continue;
            }
            std::fs::remove_dir_all(&e.dir).map_err(io("remove", &e.dir))?;
            let _ = std::fs::remove_dir_all(root.join(PROJECTS).join(&name));
            drop(lock);
        }
        out.push(Collected {
            dir: e.dir,
            bytes,
            reason,
        });
    }
    Ok(out)
}

impl Diagnose for InstallError {
    fn exit_code(&self) -> u8 {
        match self {
            InstallError::BadSpec(_)
            | InstallError::UnknownRelease { .. }
            | InstallError::Layout { .. } => exit::USAGE,
            InstallError::Mismatch { .. } => exit::MISMATCH,
            InstallError::NotForPlatform { .. }
            | InstallError::Download { .. }
            | InstallError::NoCache
            | InstallError::NotInstalled { .. }
            | InstallError::Offline { .. }
            | InstallError::Unverifiable { .. } => exit::ENVIRONMENT,
            InstallError::DiskFull { .. } | InstallError::Io { .. } => exit::IO,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            InstallError::BadSpec(_) => Some("for example `repro toolchain install nvcc@13.0`".into()),
            InstallError::UnknownRelease { known, spec } if spec.starts_with("nvrtc@") => Some(format!(
                "pin it: `repro toolchain pin {spec}` (or pass --sha256 for this architecture, {}); pinned here: {}",
                arch(),
                if known.is_empty() { "none".into() } else { known.join(", ") }
            )),
            InstallError::UnknownRelease { known, spec } => {
                // nvcc is pinned by release (major.minor): `nvcc@13.3.73` is pinned as 13.3.
                let (family, release) = spec.split_once('@').unwrap_or((spec.as_str(), ""));
                if let Some(mm) = major_minor(release)
                    && known.contains(&format!("{family}@{mm}"))
                {
                    return Some(format!(
                        "{family} is pinned by release: `repro toolchain install {family}@{mm}`"
                    ));
                }
                let pin = match major_minor(release) {
                    Some(mm) => format!("`repro toolchain pin {family}@{mm}`"),
                    None => format!("`repro toolchain pin {family}@MAJOR.MINOR` (`repro toolchain pin --list` names them)"),
                };
                Some(format!(
                    "pin it: {pin} writes its wheels and their sha256 into repro.toml; pinned here: {}",
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                ))
            }
            InstallError::NotForPlatform { offered, arch, .. } => Some(format!(
                "it is pinned for {} only; add the sha256 of the {arch} wheels to repro.toml",
                if offered.is_empty() { "no architecture".into() } else { offered.join(", ") }
            )),
            InstallError::Download { what, .. } if what.starts_with("from the wheel directory") => Some(
                "put the pinned wheels in that directory (`python3 -m pip download --no-deps --only-binary=:all: -d DIR PKG==VERSION`)".into(),
            ),
            InstallError::Download { .. } => Some(
                "check that python3 and pip work and can reach the package index (or its mirror), or pass --wheels DIR with the wheels downloaded elsewhere".into(),
            ),
            InstallError::Mismatch { .. } => Some("the file differs from the one the project pinned; download it again, or update the pin if the change is intended".into()),
            InstallError::DiskFull { dir, .. } => Some(format!(
                "free some space under {} (an nvcc tree takes about 400 MB while unpacking); nothing half-installed was left",
                dir.display()
            )),
            InstallError::NotInstalled { spec, .. } => Some(format!("run `{}`", InstallError::install_command(spec))),
            InstallError::Offline { spec, .. } => Some(format!("run `{}` where the package index can be reached, or drop --offline", InstallError::install_command(spec))),
            InstallError::Unverifiable { spec, .. } => Some(format!("pin it first: `repro toolchain pin {spec}` writes its wheels and their sha256 into repro.toml")),
            InstallError::NoCache => Some("set XDG_CACHE_HOME".into()),
            InstallError::Layout { .. } => Some(
                "the wheels are not the NVIDIA packages the release names: fetch them again (`python3 -m pip download --no-deps --only-binary=:all: -d DIR PKG==VERSION`) and check the pins in repro.toml or the --sha256 given; nothing was installed".into(),
            ),
            InstallError::Io { path, .. } => Some(format!(
                "check the permissions of {} and the file system it is on (`df`, `ls -l`)",
                path.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_name_their_trees() {
        let s = Spec::parse("nvcc@13.0").unwrap();
        assert_eq!(s.dir_name().as_deref(), Some("nvcc-13.0"));
        assert_eq!(s.to_string(), "nvcc@13.0");
        assert_eq!(Spec::parse("system").unwrap(), Spec::System);
        for bad in [
            "nvcc",
            "gcc@13",
            "nvcc@",
            "nvcc@../x",
            "nvrtc@13.0-rc",
            "nvcc@-1",
        ] {
            assert!(Spec::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(nvrtc_package("12.9.86"), "nvidia-cuda-nvrtc-cu12");
        assert_eq!(nvrtc_package("13.0.88"), "nvidia-cuda-nvrtc");
    }

    #[test]
    fn plans_come_from_the_pins() {
        let text = format!(
            "schema = 1\n[toolchain.nvrtc]\nversion = \"13.0.88\"\nsha256 = {{ {a} = \"{s}\" }}\n[toolchain.nvcc.\"13.0\"]\nwheels = [{{ package = \"nvidia-cuda-nvcc\", version = \"13.0.88\", sha256 = {{ {a} = \"{s}\" }} }}]\n[toolchain.nvcc.\"12.9\"]\nwheels = [{{ package = \"nvidia-cuda-nvcc-cu12\", version = \"12.9.86\", sha256 = {{ sparc = \"{s}\" }} }}]\n",
            a = arch(),
            s = "ab".repeat(32)
        );
        let cfg: crate::foundation::config::Config = toml::from_str(&text).unwrap();
        let cfg = cfg.toolchain;
        let p = plan(&cfg, &Spec::parse("nvcc@13.0").unwrap(), None, false).unwrap();
        assert_eq!(
            p.wheels[0].sha256.as_deref(),
            Some("ab".repeat(32).as_str())
        );
        match plan(&cfg, &Spec::parse("nvcc@12.9").unwrap(), None, false) {
            Err(InstallError::NotForPlatform { offered, .. }) => assert_eq!(offered, ["sparc"]),
            other => panic!("{other:?}"),
        }
        match plan(&cfg, &Spec::parse("nvcc@11.8").unwrap(), None, true) {
            Err(InstallError::UnknownRelease { known, .. }) => {
                assert_eq!(known, ["nvcc@12.9", "nvcc@13.0", "nvrtc@13.0.88"])
            }
            other => panic!("{other:?}"),
        }
        // NVRTC releases nobody pinned: only for bisection, digest recorded not checked.
        assert!(plan(&cfg, &Spec::parse("nvrtc@12.9.86").unwrap(), None, false).is_err());
        let p = plan(&cfg, &Spec::parse("nvrtc@12.9.86").unwrap(), None, true).unwrap();
        assert_eq!(p.wheels[0].package, "nvidia-cuda-nvrtc-cu12");
        assert_eq!(p.wheels[0].sha256, None);
    }

    #[test]
    fn unpinned_nvcc_releases_take_the_newest_wheels_of_their_major_minor() {
        let v: Vec<String> = ["13.1.80", "13.1.115", "13.10.1", "13.0.88", "13.3.5.0.6"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(newest_in(&v, "13.1").as_deref(), Some("13.1.115"));
        assert_eq!(newest_in(&v, "13.3").as_deref(), Some("13.3.5.0.6"));
        assert_eq!(newest_in(&v, "13.2"), None);
        assert_eq!(major_minor("13.1.115").as_deref(), Some("13.1"));
        assert_eq!(major_minor("13"), None);
        // A wheel directory is read, not pip: the same choice from file names.
        let dir = tempfile::tempdir().unwrap();
        for p in NVCC_PACKAGES {
            for ver in ["13.1.80", "13.1.115", "13.0.88"] {
                let f = format!(
                    "{}-{ver}-py3-none-manylinux2014_{}.whl",
                    p.replace('-', "_"),
                    arch()
                );
                std::fs::write(dir.path().join(f), b"").unwrap();
            }
        }
        let src = Source {
            wheelhouse: Some(dir.path().to_path_buf()),
            wheel_file: None,
        };
        let plan = plan_unpinned_nvcc("13.1", &src).unwrap();
        assert_eq!(plan.wheels.len(), 5);
        assert!(
            plan.wheels
                .iter()
                .all(|w| w.version == "13.1.115" && w.sha256.is_none())
        );
        assert!(matches!(
            plan_unpinned_nvcc("13.2", &src),
            Err(InstallError::UnknownRelease { .. })
        ));
        assert!(matches!(
            plan_unpinned_nvcc("12.9", &src),
            Err(InstallError::Layout { .. })
        ));
        assert!(matches!(
            plan_unpinned_nvcc("13.1.115", &src),
            Err(InstallError::BadSpec(_))
        ));
    }

    #[test]
    fn the_stamp_fixture_still_loads() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/toolchain-stamp");
        let stamp = read_stamp(&dir).unwrap();
        assert_eq!(stamp.family, Family::Nvcc);
        assert_eq!(
            stamp.identity()["wheels"]["nvidia-cuda-nvcc"],
            stamp.wheels[0].sha256
        );
    }
}
