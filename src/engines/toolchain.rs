//! Finding the CUDA compilers that builds use: the NVRTC library and nvcc.
//!
//! NVRTC is looked for in a fixed, documented order, and the fingerprint records both the
//! library chosen and why. The NVRTC in NVIDIA's `nvidia-cuda-nvrtc` 13.0 wheel has no
//! RPATH, so it can only find `libnvrtc-builtins` if that is already loaded: we load the
//! builtins from the same directory first, by absolute path. Once loaded by absolute path,
//! later `dlopen("libnvrtc.so.13")` calls (cudarc's) resolve to the same library by soname.

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::foundation::fields::{Field, Fields};
use crate::foundation::process::{Cmd, ProcessError};

pub mod install;
pub mod progress;
pub mod releases;
pub mod resolve;

/// Where an NVRTC library was found, and why that one was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The library file.
    pub path: PathBuf,
    /// Which rule of the search order found it.
    pub source: String,
}

/// The search order, as documented in the book (docs/src/guide/toolchain.md).
pub const NVRTC_SEARCH_ORDER: &str = "REPRO_NVRTC, toolchains installed by repro, CUDA_HOME/CUDA_PATH, \
/usr/local/cuda*, Python site-packages (nvidia/cu13/lib), LD_LIBRARY_PATH";

/// The directory where repro keeps toolchains it installs (`$XDG_CACHE_HOME/repro/toolchains`).
pub fn managed_dir() -> Option<PathBuf> {
    Some(crate::foundation::fsutil::cache_dir()?.join("toolchains"))
}

/// The toolchains a project pins in `repro.toml` (its whole `[toolchain]` table) and the
/// project they belong to. The resolver ([`resolve::resolve`]) and the searches below take
/// them as an argument: the NVRTC search prefers the pinned release when it is installed,
/// and the nvcc probe reports the pinned nvcc.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pins {
    /// The `[toolchain]` table.
    pub table: crate::foundation::config::Toolchains,
    /// The project root, noted in the trees it uses (`toolchain list`, `toolchain gc`).
    pub project: Option<PathBuf>,
}

impl Pins {
    /// The pins of a project's `[toolchain]` table.
    pub fn of(toolchains: &crate::foundation::config::Toolchains) -> Pins {
        Pins {
            table: toolchains.clone(),
            project: None,
        }
    }

    /// The pins of the project at `root` (its `repro.toml`).
    pub fn of_project(toolchains: &crate::foundation::config::Toolchains, root: &Path) -> Pins {
        Pins {
            table: toolchains.clone(),
            project: Some(root.to_path_buf()),
        }
    }

    /// The tree directory of the pinned NVRTC, when one is pinned for this architecture.
    pub fn nvrtc_dir(&self) -> Option<PathBuf> {
        let p = self.table.nvrtc.as_ref()?;
        let spec = install::Spec::Release {
            family: install::Family::Nvrtc,
            release: p.version.clone(),
        };
        let plan = install::plan(&self.table, &spec, None, false).ok()?;
        Some(managed_dir()?.join(plan.dir_name()))
    }
}

/// Why the NVRTC library cannot be found, loaded or identified. Cloned: a process loads
/// NVRTC once and every later caller gets the same answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NvrtcError {
    /// The toolchain chosen with `--toolchain` holds no library.
    #[error("{} holds no libnvrtc.so", dir.display())]
    ChosenEmpty {
        /// The toolchain's library directory.
        dir: PathBuf,
    },
    /// `REPRO_NVRTC` names no library.
    #[error("REPRO_NVRTC is set to {}, which holds no libnvrtc.so", path.display())]
    EnvEmpty {
        /// What the variable says.
        path: PathBuf,
    },
    /// No rule of the search order found a library.
    #[error("NVRTC not found (searched {NVRTC_SEARCH_ORDER})")]
    NotFound,
    /// The library cannot be loaded.
    #[error("cannot load {}: {cause}", path.display())]
    Load {
        /// The library.
        path: PathBuf,
        /// The loader's words.
        cause: String,
    },
    /// The library has no `nvrtcVersion`.
    #[error("{} is not NVRTC: {cause}", path.display())]
    NotNvrtc {
        /// The library.
        path: PathBuf,
        /// The loader's words.
        cause: String,
    },
    /// `nvrtcVersion` returned an error.
    #[error("nvrtcVersion failed in {}", path.display())]
    Version {
        /// The library.
        path: PathBuf,
    },
    /// The library file cannot be read for its identity.
    #[error("cannot {action} {}: {cause}", path.display())]
    Read {
        /// `stat` or `read`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's words.
        cause: String,
    },
    /// The library lacks a function a compile calls.
    #[error("{} lacks {function}: {cause}", path.display())]
    Lacks {
        /// The library.
        path: PathBuf,
        /// The function.
        function: &'static str,
        /// The loader's words.
        cause: String,
    },
}

/// Why nvcc cannot be identified.
#[derive(Debug, thiserror::Error)]
pub enum NvccError {
    /// No rule of the search order found nvcc.
    #[error("nvcc not found (searched REPRO_NVCC, PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda*)")]
    NotFound,
    /// `nvcc --version` failed.
    #[error(transparent)]
    Run(#[from] ProcessError),
}

/// The NVRTC library a build with `--toolchain nvrtc@VERSION` (or a recipe's NVRTC
/// toolchain) chose. NVRTC is one library per process, so this is not configuration but
/// the process's commitment: once chosen, no other directory can be.
static CHOSEN: OnceLock<PathBuf> = OnceLock::new();

/// Makes this process use the NVRTC library in `dir` (a toolchain installed by repro, named
/// with `--toolchain nvrtc@VERSION`), before REPRO_NVRTC and every other rule. Call before
/// the first search; a later call for another directory returns false.
pub fn choose_nvrtc(dir: PathBuf) -> bool {
    CHOSEN.get_or_init(|| dir.clone()) == &dir
}

/// The candidate directories in search order, each with its reason.
fn nvrtc_candidates(pins: &Pins) -> Vec<(PathBuf, String)> {
    let mut c = Vec::new();
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = pins.nvrtc_dir()
        && crate::foundation::stamp::noted(&d.join(install::STAMP)).is_file()
    {
        c.push((
            d.join("lib"),
            "pinned in repro.toml, installed by repro".into(),
        ));
    }
    if let Some(dir) = managed_dir() {
        // Only complete trees: an install killed part way has no stamp.
        for d in sorted_desc(&dir, "nvrtc-")
            .into_iter()
            .filter(|d| crate::foundation::stamp::noted(&d.join(install::STAMP)).is_file())
        {
            c.push((d.join("lib"), "installed by repro toolchain install".into()));
        }
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = env(var) {
            for sub in [
                "lib64",
                "lib",
                "targets/x86_64-linux/lib",
                "targets/sbsa-linux/lib",
            ] {
                c.push((root.join(sub), var.to_string()));
            }
        }
    }
    for root in std::iter::once(PathBuf::from("/usr/local/cuda"))
        .chain(sorted_desc(Path::new("/usr/local"), "cuda-"))
    {
        for sub in [
            "lib64",
            "targets/x86_64-linux/lib",
            "targets/sbsa-linux/lib",
        ] {
            c.push((root.join(sub), format!("{}", root.display())));
        }
    }
    for site in site_packages() {
        for sub in ["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"] {
            c.push((site.join(sub), "python site-packages".into()));
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        for p in std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()) {
            c.push((p, "LD_LIBRARY_PATH".into()));
        }
    }
    c
}

/// Entries of `dir` whose names start with `prefix`, newest version first.
pub(crate) fn sorted_desc(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    crate::foundation::stamp::note(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort_by(|a, b| {
        crate::foundation::version::compare(&b.to_string_lossy(), &a.to_string_lossy())
    });
    v
}

/// Python site-packages directories, found on disk without starting Python.
fn site_packages() -> Vec<PathBuf> {
    let mut bases: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            bases.push(PathBuf::from(v).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        bases.push(home.join(".local/lib"));
        bases.extend(
            sorted_desc(&home.join(".pyenv/versions"), "")
                .into_iter()
                .map(|p| p.join("lib")),
        );
    }
    bases.extend(["/usr/local/lib", "/usr/lib"].map(PathBuf::from));
    let mut out = Vec::new();
    for base in bases {
        for py in sorted_desc(&base, "python3") {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    out
}

/// The NVRTC library file in `dir` (or `dir` itself if it is a file), preferring the
/// CUDA 13 soname and never picking the builtins or the `.alt` variant.
fn library_in(dir: &Path) -> Option<PathBuf> {
    // The directory's entries decide which library is found.
    crate::foundation::stamp::note(dir);
    if dir.is_file() {
        return Some(dir.to_owned());
    }
    let preferred = dir.join("libnvrtc.so.13");
    if preferred.is_file() {
        return Some(preferred);
    }
    last_named(dir, "libnvrtc.so")
}

/// The last file (by name) in `dir` whose name starts with `prefix`, skipping NVIDIA's `.alt.`
/// variants.
fn last_named(dir: &Path, prefix: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
        })
        .max()
}

/// The NVRTC library in a directory, if there is one.
pub fn find_in(dir: &Path) -> Option<PathBuf> {
    library_in(dir)
}

/// Finds the NVRTC library builds would use, or says what was searched. An explicit
/// `REPRO_NVRTC` that holds no library is an error, never a reason to pick another NVRTC.
pub fn find_nvrtc(pins: &Pins) -> Result<Found, NvrtcError> {
    if let Some(dir) = CHOSEN.get() {
        return library_in(dir)
            .map(|path| Found {
                path,
                source: "--toolchain, installed by repro".into(),
            })
            .ok_or_else(|| NvrtcError::ChosenEmpty { dir: dir.clone() });
    }
    if let Some(p) = std::env::var_os("REPRO_NVRTC").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return library_in(&p)
            .map(|path| Found {
                path,
                source: "REPRO_NVRTC".into(),
            })
            .ok_or(NvrtcError::EnvEmpty { path: p });
    }
    nvrtc_candidates(pins)
        .into_iter()
        .find_map(|(dir, source)| library_in(&dir).map(|path| Found { path, source }))
        .ok_or(NvrtcError::NotFound)
}

/// A loaded NVRTC: the library stays loaded for the life of the process.
pub struct Loaded {
    /// Where it was found.
    pub found: Found,
    /// Its version, `major.minor`.
    pub version: String,
    _builtins: Option<libloading::Library>,
    _lib: libloading::Library,
}

/// The NVRTC this process loaded: a library stays loaded, so the first search that finds
/// one decides. A failed search is not kept: a process that installs NVRTC after one
/// (`repro demo` fingerprints the machine, then installs the pinned NVRTC and builds, all
/// in one process) finds it on the next search.
static NVRTC: OnceLock<Loaded> = OnceLock::new();

/// Held while a search loads NVRTC, so that two threads never load two libraries.
static LOADING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Finds (with the project's `pins`) and loads NVRTC once per process. The error says what
/// was searched.
pub fn nvrtc(pins: &Pins) -> Result<&'static Loaded, NvrtcError> {
    if let Some(l) = NVRTC.get() {
        return Ok(l);
    }
    let _held = LOADING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(l) = NVRTC.get() {
        return Ok(l);
    }
    let loaded = find_nvrtc(pins).and_then(load_at)?;
    Ok(NVRTC.get_or_init(|| loaded))
}

/// Loads the NVRTC at `found` (its builtins first) and asks its version.
pub fn load_at(found: Found) -> Result<Loaded, NvrtcError> {
    let dir = found.path.parent().unwrap_or(Path::new("."));
    // SAFETY: loading a shared library runs its initialisers; NVRTC's are benign.
    let builtins = builtins_in(dir).and_then(|p| unsafe { libloading::Library::new(p) }.ok());
    // SAFETY: as above.
    let lib = unsafe { libloading::Library::new(&found.path) }.map_err(|e| NvrtcError::Load {
        path: found.path.clone(),
        cause: e.to_string(),
    })?;
    // SAFETY: nvrtcVersion has this signature in every NVRTC release.
    let version = unsafe {
        let f: libloading::Symbol<unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int> = lib
            .get(b"nvrtcVersion\0")
            .map_err(|e| NvrtcError::NotNvrtc {
                path: found.path.clone(),
                cause: e.to_string(),
            })?;
        let (mut major, mut minor) = (0, 0);
        if f(&mut major, &mut minor) != 0 {
            return Err(NvrtcError::Version {
                path: found.path.clone(),
            });
        }
        format!("{major}.{minor}")
    };
    Ok(Loaded {
        found,
        version,
        _builtins: builtins,
        _lib: lib,
    })
}

impl Loaded {
    /// The function `name` of this NVRTC library (a C function pointer type `F`), so that
    /// every call goes to the library repro chose, never to another NVRTC the loader's
    /// search would find by name (a system CUDA beside a wheel's release).
    pub fn function<F: Copy>(&self, name: &'static str) -> Result<F, NvrtcError> {
        let mut sym = name.as_bytes().to_vec();
        sym.push(0);
        // SAFETY: the caller names the C signature of `name` as `F`; the library stays
        // loaded for the process (`Loaded` lives in a static), so the pointer stays valid.
        unsafe { self._lib.get::<F>(&sym) }
            .map(|s| *s)
            .map_err(|e| NvrtcError::Lacks {
                path: self.found.path.clone(),
                function: name,
                cause: e.to_string(),
            })
    }
}

/// The fingerprint probe for NVRTC: the library builds with these `pins` would use.
pub fn probe_nvrtc(pins: &Pins) -> Fields {
    let mut f = Fields::new();
    match nvrtc(pins) {
        Ok(l) => {
            f.insert(
                "toolchain.nvrtc.version".into(),
                Field::Value(l.version.clone()),
            );
            f.insert(
                "toolchain.nvrtc.path".into(),
                Field::Value(l.found.path.display().to_string()),
            );
            f.insert(
                "toolchain.nvrtc.source".into(),
                Field::Value(l.found.source.clone()),
            );
        }
        Err(e) => {
            f.insert("toolchain.nvrtc".into(), Field::Unavailable(e.to_string()));
        }
    }
    f
}

/// The nvcc fields of the project's pinned nvcc, when it is installed (from its install
/// stamp: no process is started).
pub fn probe_pinned_nvcc(pins: &Pins) -> Option<Fields> {
    let r = pins.table.nvcc_default.as_ref()?;
    let spec = install::Spec::Release {
        family: install::Family::Nvcc,
        release: r.clone(),
    };
    let t = resolve::plan_for(pins, &spec)
        .and_then(|p| install::find(&p))
        .ok()?;
    let mut f = Fields::new();
    f.insert(
        "toolchain.nvcc.path".into(),
        Field::Value(t.compiler().display().to_string()),
    );
    f.insert(
        "toolchain.nvcc.version".into(),
        Field::Value(t.stamp.reports.clone()),
    );
    Some(f)
}

/// Finds nvcc: REPRO_NVCC, the PATH, CUDA_HOME/CUDA_PATH, /usr/local/cuda*.
pub fn find_nvcc() -> Option<PathBuf> {
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("REPRO_NVCC").filter(|v| !v.is_empty()) {
        c.push(PathBuf::from(p));
    }
    if let Some(paths) = std::env::var_os("PATH") {
        c.extend(std::env::split_paths(&paths).map(|d| d.join("nvcc")));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            c.push(PathBuf::from(root).join("bin/nvcc"));
        }
    }
    c.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
    c.extend(
        sorted_desc(Path::new("/usr/local"), "cuda-")
            .into_iter()
            .map(|d| d.join("bin/nvcc")),
    );
    c.into_iter().find(|p| p.is_file())
}

/// "Cuda compilation tools, release 13.0, V13.0.88" → "13.0.88".
pub fn parse_nvcc_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.contains("release"))?;
    line.split([' ', ','])
        .find_map(|t| {
            t.strip_prefix('V')
                .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// The fingerprint probe for nvcc: the project's pinned nvcc when it is installed, else the
/// machine's.
pub fn probe_nvcc(pins: &Pins) -> Fields {
    if let Some(f) = probe_pinned_nvcc(pins) {
        return f;
    }
    let mut f = Fields::new();
    let Some(path) = find_nvcc() else {
        f.insert(
            "toolchain.nvcc".into(),
            Field::Unavailable("nvcc not found".into()),
        );
        return f;
    };
    f.insert(
        "toolchain.nvcc.path".into(),
        Field::Value(path.display().to_string()),
    );
    let v = match Cmd::new(&path)
        .arg("--version")
        .timeout(Duration::from_secs(5))
        .run()
    {
        Ok(out) => parse_nvcc_version(&out.stdout_str()).map_or_else(
            || Field::Unavailable("no version in `nvcc --version`".into()),
            Field::Value,
        ),
        Err(ProcessError::NotFound { .. }) => Field::Unavailable("nvcc not found".into()),
        Err(e) => Field::Unavailable(e.to_string().lines().next().unwrap_or_default().into()),
    };
    f.insert("toolchain.nvcc.version".into(), v);
    f
}

/// The identity of the NVRTC builds would use, for build keys: its version and the
/// sha256 of the library and its builtins. Hashing 100 MB costs a tenth of a second, so
/// the answer is cached per library file (path, size, mtime, inode); a warm build never
/// loads NVRTC.
pub fn nvrtc_identity(pins: &Pins) -> Result<serde_json::Value, NvrtcError> {
    use std::os::unix::fs::MetadataExt;
    let found = find_nvrtc(pins)?;
    let dir = found.path.parent().unwrap_or(Path::new("."));
    let builtins = builtins_in(dir);
    // The library, its builtins and the directory that holds them decide the identity.
    crate::foundation::stamp::note(&found.path);
    crate::foundation::stamp::note(dir);
    if let Some(b) = &builtins {
        crate::foundation::stamp::note(b);
    }
    let meta = std::fs::metadata(&found.path).map_err(|e| NvrtcError::Read {
        action: "stat",
        path: found.path.clone(),
        cause: e.to_string(),
    })?;
    // The cache's key: both libraries' stat data, change times included (a rewrite in
    // place that restores the modification time still shows).
    let stat_id = |m: &std::fs::Metadata| {
        format!(
            "{}|{}|{}|{}.{}",
            m.len(),
            m.mtime_nsec() + m.mtime() * 1_000_000_000,
            m.ino(),
            m.ctime(),
            m.ctime_nsec()
        )
    };
    let builtins_id = builtins
        .as_deref()
        .and_then(|b| std::fs::metadata(b).ok())
        .map_or_else(|| "-".to_string(), |m| stat_id(&m));
    let stamp = format!("{}|{}|{builtins_id}", found.path.display(), stat_id(&meta));
    let cache = crate::foundation::fsutil::cache_dir().map(|d| d.join("nvrtc-identity.json"));
    // The user's own cache, still read only if a regular file of at most 1 MiB.
    let mut entries: serde_json::Map<String, serde_json::Value> = cache
        .as_ref()
        .and_then(|p| crate::foundation::fsutil::read_cache(p, 1 << 20).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if let Some(hit) = entries.get(&stamp) {
        return Ok(hit.clone());
    }
    let loaded = nvrtc(pins)?;
    let digest = |p: &Path| -> Result<String, NvrtcError> {
        std::fs::read(p)
            .map(|b| crate::foundation::keys::sha256_hex(&b))
            .map_err(|e| NvrtcError::Read {
                action: "read",
                path: p.to_path_buf(),
                cause: e.to_string(),
            })
    };
    let id = serde_json::json!({
        "name": "nvrtc",
        "version": loaded.version,
        "library-sha256": digest(&found.path)?,
        "builtins-sha256": builtins.as_deref().map(digest).transpose()?,
    });
    if let Some(p) = cache {
        // Keep the cache small: a handful of NVRTC installs at most.
        if entries.len() >= 16 {
            entries.clear();
        }
        entries.insert(stamp, id.clone());
        let _ = crate::foundation::fsutil::write_atomic(
            &p,
            serde_json::Value::Object(entries).to_string().as_bytes(),
            true,
        );
    }
    Ok(id)
}

/// The builtins library beside an NVRTC library, if any.
fn builtins_in(dir: &Path) -> Option<PathBuf> {
    last_named(dir, "libnvrtc-builtins.so")
}

/// The identity of nvcc, for build keys: its `--version` text (release and build id).
pub fn nvcc_identity() -> Result<(PathBuf, serde_json::Value), NvccError> {
    // What the machine's nvcc says of itself is not in any file's stat data.
    crate::foundation::stamp::refuse("the machine's nvcc is asked its version");
    let path = find_nvcc().ok_or(NvccError::NotFound)?;
    let out = Cmd::new(&path)
        .arg("--version")
        .timeout(Duration::from_secs(10))
        .run()?;
    let text = out.stdout_str();
    let version = parse_nvcc_version(&text).unwrap_or_default();
    // The first line names the program; the rest (release, build id) identifies it.
    let ident: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("release") || l.starts_with("Build"))
        .collect();
    Ok((
        path,
        serde_json::json!({ "name": "nvcc", "version": version, "build": ident.join("\n") }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvcc_version() {
        let t = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(parse_nvcc_version(t).as_deref(), Some("13.0.88"));
    }

    #[test]
    fn picks_the_library_not_the_builtins() {
        let dir = tempfile::tempdir().unwrap();
        for n in [
            "libnvrtc-builtins.so.13.0",
            "libnvrtc.alt.so.13",
            "libnvrtc.so.12",
        ] {
            std::fs::write(dir.path().join(n), b"").unwrap();
        }
        assert_eq!(
            library_in(dir.path()),
            Some(dir.path().join("libnvrtc.so.12"))
        );
        std::fs::write(dir.path().join("libnvrtc.so.13"), b"").unwrap();
        assert_eq!(
            library_in(dir.path()),
            Some(dir.path().join("libnvrtc.so.13"))
        );
    }
}
