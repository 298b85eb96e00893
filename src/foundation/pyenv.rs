//! The Python environment a project uses, described from its files alone.
//!
//! Which interpreter: `--python`, else `[python] interpreter` in repro.toml, else the
//! active virtual environment (`VIRTUAL_ENV`) or conda environment (`CONDA_PREFIX`), else
//! `python3` on the PATH (a pyenv shim is followed to the version it selects). What it is:
//! its version and ABI tag, its prefix and site-packages, every installed distribution
//! (dist-info `METADATA`), and PyTorch's identity (`torch/version.py`, the CMake config it
//! ships, the CUDA architectures in its device code). Nothing here starts the interpreter or
//! imports anything: `python -c 'import torch'` takes seconds, these files take well under a
//! millisecond to read, so the fingerprint keeps its time budget.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// How the interpreter was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--python`.
    Flag,
    /// `[python] interpreter` in repro.toml.
    Config,
    /// The active virtual environment (`VIRTUAL_ENV`).
    VirtualEnv,
    /// The active conda environment (`CONDA_PREFIX`).
    Conda,
    /// `python3` on the PATH.
    Path,
}

impl Source {
    /// How it reads in the fingerprint (`python.found-by`) and in messages.
    pub fn describe(self) -> &'static str {
        match self {
            Source::Flag => "--python",
            Source::Config => "repro.toml [python] interpreter",
            Source::VirtualEnv => "VIRTUAL_ENV",
            Source::Conda => "CONDA_PREFIX",
            Source::Path => "python3 on PATH",
        }
    }
}

/// Why no Python environment can be described.
#[derive(Debug, thiserror::Error)]
pub enum PyEnvError {
    /// The chosen interpreter does not exist.
    #[error("no Python interpreter at {} (chosen by {})", .path.display(), .chosen_by.describe())]
    Missing {
        /// The path looked at.
        path: PathBuf,
        /// Who chose it.
        chosen_by: Source,
    },
    /// Nothing chose an interpreter and the PATH has none.
    #[error(
        "no Python interpreter: no --python, no [python] interpreter in repro.toml, no active environment, and no python3 on PATH"
    )]
    NoneFound,
    /// The interpreter exists but its installation cannot be read.
    #[error("cannot describe the Python at {}: {reason}", .path.display())]
    Unreadable {
        /// The interpreter.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
}

impl Diagnose for PyEnvError {
    fn exit_code(&self) -> u8 {
        match self {
            PyEnvError::Missing {
                chosen_by: Source::Flag,
                ..
            } => exit::USAGE,
            _ => exit::ENVIRONMENT,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            PyEnvError::Missing {
                chosen_by: Source::Config,
                ..
            } => "fix `[python] interpreter` in repro.toml, or pass --python PATH".into(),
            PyEnvError::Missing { .. } => {
                "pass the interpreter of the environment, e.g. --python .venv/bin/python".into()
            }
            PyEnvError::NoneFound => {
                "install Python 3, activate a virtual environment, or pass --python PATH".into()
            }
            PyEnvError::Unreadable { .. } => {
                "point --python at the interpreter of an installed environment (its bin/python3)"
                    .into()
            }
        })
    }
}

/// An interpreter and why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The interpreter as chosen (not resolved through symlinks: a venv's python links to
    /// the base interpreter, but its prefix is the venv).
    pub interpreter: PathBuf,
    /// Who chose it.
    pub source: Source,
}

/// Chooses the interpreter. `flag` and `config` are absolute paths (an environment's
/// directory is taken as its `bin/python3`); `var` reads the process environment.
pub fn locate(
    flag: Option<&Path>,
    config: Option<&Path>,
    var: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Located, PyEnvError> {
    let chosen = |p: &Path, source| {
        let p = if p.is_dir() {
            in_prefix(p)
        } else {
            p.to_owned()
        };
        if p.is_file() {
            Ok(Located {
                interpreter: p,
                source,
            })
        } else {
            Err(PyEnvError::Missing {
                path: p,
                chosen_by: source,
            })
        }
    };
    if let Some(p) = flag {
        return chosen(p, Source::Flag);
    }
    if let Some(p) = config {
        return chosen(p, Source::Config);
    }
    for (name, source) in [
        ("VIRTUAL_ENV", Source::VirtualEnv),
        ("CONDA_PREFIX", Source::Conda),
    ] {
        if let Some(prefix) = var(name).filter(|v| !v.is_empty()) {
            return chosen(Path::new(&prefix), source);
        }
    }
    let path = var("PATH").ok_or(PyEnvError::NoneFound)?;
    let found = std::env::split_paths(&path)
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .ok_or(PyEnvError::NoneFound)?;
    Ok(Located {
        interpreter: follow_pyenv_shim(&found, var).unwrap_or(found),
        source: Source::Path,
    })
}

/// The interpreter of an environment directory: `bin/python3`, else `bin/python`.
fn in_prefix(prefix: &Path) -> PathBuf {
    let p3 = prefix.join("bin/python3");
    if p3.is_file() {
        p3
    } else {
        prefix.join("bin/python")
    }
}

/// A pyenv shim (`…/.pyenv/shims/python3`, a script) stands for the interpreter of the
/// version pyenv selects: `PYENV_VERSION`, else the root's `version` file.
fn follow_pyenv_shim(shim: &Path, var: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let shims = shim.parent()?;
    if shims.file_name()? != "shims" {
        return None;
    }
    let root = shims.parent()?;
    let version = match var("PYENV_VERSION").filter(|v| !v.is_empty()) {
        Some(v) => v.to_string_lossy().into_owned(),
        None => read_bounded(&root.join("version"), 4096)?,
    };
    let version = version.split([':', '\n']).next()?.trim().to_string();
    if version.is_empty() || version == "system" || version.contains('/') {
        return None;
    }
    let p = root.join("versions").join(version).join("bin/python3");
    p.is_file().then_some(p)
}

/// Reads at most `max` bytes of a text file; `None` when it cannot be read.
fn read_bounded(path: &Path, max: u64) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(max)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// What an environment is, read from its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyEnv {
    /// The interpreter and why it was chosen.
    pub located: Located,
    /// `3.11.7` where the files say (pyvenv.cfg, patchlevel.h), else `3.11`.
    pub version: String,
    /// `major.minor`.
    pub minor: (u32, u32),
    /// `cp311` (`cp313t` for a free-threaded build).
    pub abi_tag: String,
    /// What extension modules' names end with: `.cpython-311-x86_64-linux-gnu.so`.
    pub ext_suffix: String,
    /// The environment's prefix (the venv's directory).
    pub prefix: PathBuf,
    /// The installation it is based on (the prefix itself outside a venv).
    pub base_prefix: PathBuf,
    /// Where packages are installed, in search order.
    pub site_packages: Vec<PathBuf>,
    /// The directory with `Python.h`, if the headers are installed.
    pub include_dir: Option<PathBuf>,
    /// Every installed distribution: normalised name → version (the first found wins, as
    /// for the interpreter's own search).
    pub dists: BTreeMap<String, String>,
    /// PyTorch, if installed.
    pub torch: Option<Torch>,
}

/// An installed PyTorch, from its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Torch {
    /// The package directory (`…/site-packages/torch`).
    pub dir: PathBuf,
    /// `torch/version.py`'s `__version__` (`2.5.1+cu124`).
    pub version: String,
    /// The CUDA it was built with (`12.4`); `None` for a CPU build.
    pub cuda: Option<String>,
    /// `git_version`.
    pub git_version: Option<String>,
    /// `_GLIBCXX_USE_CXX11_ABI` from the CMake config torch ships.
    pub cxx11_abi: Option<bool>,
    /// The cuDNN it uses: the `nvidia-cudnn-*` distribution, else the library it bundles.
    pub cudnn: Option<String>,
    /// The GPU architectures its device code was built for (`sm_80 sm_90`).
    pub cuda_archs: Option<Vec<String>>,
}

impl PyEnv {
    /// sha256 of every distribution's `name==version`, one a line, sorted.
    pub fn dists_digest(&self) -> String {
        let text: String = self
            .dists
            .iter()
            .map(|(n, v)| format!("{n}=={v}\n"))
            .collect();
        crate::foundation::keys::sha256_hex(text.as_bytes())
    }
}

/// `INTERPRETER -m pip install 'NAME==VERSION'`. A local version (`2.4.1+cu121`) is pinned
/// by its public part: the local part names the index the wheel came from.
pub fn pip_install_command(interpreter: &str, name: &str, version: &str) -> String {
    let public = version.split('+').next().unwrap_or(version);
    let mut cmd = format!("{interpreter} -m pip install '{name}=={public}'");
    if let Some(local) = version.split_once('+').map(|(_, l)| l) {
        cmd.push_str(&format!(
            " (the `+{local}` build: add the `--index-url` of PyTorch's {local} wheel index)"
        ));
    }
    cmd
}

/// Describes the environment of `located` from its files.
pub fn describe(located: Located) -> Result<PyEnv, PyEnvError> {
    let abs = std::path::absolute(&located.interpreter).unwrap_or(located.interpreter.clone());
    let unreadable = |reason: String| PyEnvError::Unreadable {
        path: abs.clone(),
        reason,
    };
    let bin = abs
        .parent()
        .ok_or_else(|| unreadable("no parent directory".into()))?;
    let prefix = bin
        .parent()
        .ok_or_else(|| unreadable("not in a bin directory".into()))?
        .to_owned();
    let cfg = read_bounded(&prefix.join("pyvenv.cfg"), 64 * 1024).map(|t| pyvenv_cfg(&t));
    let base_prefix = cfg
        .as_ref()
        .and_then(|c| c.get("home"))
        .and_then(|home| Path::new(home).parent().map(Path::to_owned))
        .unwrap_or_else(|| prefix.clone());
    let cfg_version = cfg.as_ref().and_then(|c| {
        c.get("version")
            .or_else(|| c.get("version_info"))
            .map(|v| v.split('.').take(3).collect::<Vec<_>>().join("."))
    });
    let minor = cfg_version
        .as_deref()
        .and_then(parse_minor)
        .or_else(|| minor_from_name(&abs))
        .or_else(|| minor_from_lib(&base_prefix))
        .ok_or_else(|| {
            unreadable(format!(
                "no pyvenv.cfg and no lib/python3.N under {}",
                base_prefix.display()
            ))
        })?;
    let mm = format!("{}.{}", minor.0, minor.1);
    let include_dir = [
        base_prefix.join(format!("include/python{mm}")),
        base_prefix.join(format!("include/python{mm}t")),
    ]
    .into_iter()
    .find(|d| d.join("Python.h").is_file());
    let version = cfg_version
        .or_else(|| include_dir.as_deref().and_then(patchlevel))
        .unwrap_or_else(|| mm.clone());
    let ext_suffix = ext_suffix(&base_prefix, &mm).unwrap_or_else(|| {
        format!(
            ".cpython-{}{}-{}-linux-gnu.so",
            minor.0,
            minor.1,
            std::env::consts::ARCH
        )
    });
    let abi_tag = abi_tag(&ext_suffix, minor);
    let system_site = cfg
        .as_ref()
        .and_then(|c| c.get("include-system-site-packages"))
        .is_none_or(|v| v.eq_ignore_ascii_case("true"));
    let mut site_packages = site_dirs(&prefix, &mm);
    if cfg.is_some() && system_site {
        site_packages.extend(site_dirs(&base_prefix, &mm));
    }
    site_packages.dedup();
    let dists = distributions(&site_packages);
    let torch = site_packages
        .iter()
        .map(|s| s.join("torch"))
        .find(|d| d.join("version.py").is_file())
        .map(|dir| torch_of(dir, &dists));
    Ok(PyEnv {
        located,
        version,
        minor,
        abi_tag,
        ext_suffix,
        prefix,
        base_prefix,
        site_packages,
        include_dir,
        dists,
        torch,
    })
}

/// `key = value` lines of a pyvenv.cfg.
fn pyvenv_cfg(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn parse_minor(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// `python3.11` (the interpreter's own name, or the file a `python3` link points to).
fn minor_from_name(interpreter: &Path) -> Option<(u32, u32)> {
    let from = |p: &Path| {
        p.file_name()?
            .to_str()?
            .strip_prefix("python")
            .and_then(parse_minor)
    };
    from(interpreter).or_else(|| {
        let target = std::fs::read_link(interpreter).ok()?;
        from(&target)
    })
}

/// The single `lib/python3.N` directory of an installation.
fn minor_from_lib(prefix: &Path) -> Option<(u32, u32)> {
    let mut found: Vec<(u32, u32)> = std::fs::read_dir(prefix.join("lib"))
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            parse_minor(name.strip_prefix("python")?.trim_end_matches('t'))
        })
        .collect();
    found.sort();
    found.dedup();
    (found.len() == 1).then(|| found[0])
}

/// `PY_VERSION` from `patchlevel.h`: the full version of an installation with headers.
fn patchlevel(include: &Path) -> Option<String> {
    let text = read_bounded(&include.join("patchlevel.h"), 64 * 1024)?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("#define PY_VERSION "))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
}

/// The extension suffix, from a compiled module of the standard library.
fn ext_suffix(base: &Path, mm: &str) -> Option<String> {
    let dirs = [
        base.join(format!("lib/python{mm}/lib-dynload")),
        base.join(format!("lib/python{mm}t/lib-dynload")),
        base.join(format!("lib64/python{mm}/lib-dynload")),
    ];
    dirs.iter().find_map(|d| {
        std::fs::read_dir(d).ok()?.flatten().find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let at = name.find(".cpython-")?;
            name.ends_with(".so").then(|| name[at..].to_string())
        })
    })
}

/// `cp311` from `.cpython-311-x86_64-linux-gnu.so` (`cp313t` for `-313t-`).
fn abi_tag(ext_suffix: &str, minor: (u32, u32)) -> String {
    ext_suffix
        .strip_prefix(".cpython-")
        .and_then(|r| r.split('-').next())
        .filter(|t| t.starts_with(|c: char| c.is_ascii_digit()))
        .map_or_else(|| format!("cp{}{}", minor.0, minor.1), |t| format!("cp{t}"))
}

/// The site directories of a prefix: `lib/pythonX.Y/site-packages`, and Debian's
/// `dist-packages` layout for a system interpreter.
fn site_dirs(prefix: &Path, mm: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = [
        format!("lib/python{mm}/site-packages"),
        format!("lib/python{mm}t/site-packages"),
        format!("lib64/python{mm}/site-packages"),
        format!("local/lib/python{mm}/dist-packages"),
        format!("lib/python{mm}/dist-packages"),
        "lib/python3/dist-packages".to_string(),
    ]
    .iter()
    .map(|rel| prefix.join(rel))
    .filter(|d| d.is_dir())
    .collect();
    out.dedup();
    out
}

/// PEP 503's normal form: lower case, runs of `-`, `_` and `.` as one `-`.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Every `*.dist-info` (and `*.egg-info`) in the site directories: name → version from
/// its METADATA's headers (bounded; a malformed one is skipped).
fn distributions(sites: &[PathBuf]) -> BTreeMap<String, String> {
    let mut metas: Vec<PathBuf> = Vec::new();
    for site in sites {
        let Ok(rd) = std::fs::read_dir(site) else {
            continue;
        };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for dir in entries {
            match dir.extension().and_then(|e| e.to_str()) {
                Some("dist-info") => metas.push(dir.join("METADATA")),
                Some("egg-info") if dir.is_dir() => metas.push(dir.join("PKG-INFO")),
                Some("egg-info") => metas.push(dir),
                _ => {}
            }
        }
    }
    // A large environment has hundreds of distributions: their headers are read on a few
    // threads (each is an open, a read or two and a close), then merged in the order above
    // so that the first of two with one name wins as before.
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(metas.len().div_ceil(32).max(1));
    let chunk = metas.len().div_ceil(threads).max(1);
    let found: Vec<Option<(String, String)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = metas
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|m| read_header(m).and_then(|t| name_version(&t)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut out = BTreeMap::new();
    for (name, version) in found.into_iter().flatten() {
        out.entry(name).or_insert(version);
    }
    out
}

/// The header block of a METADATA or PKG-INFO file (up to its first blank line, at most
/// 16 KiB), read a few KiB at a time: the description after it can be long and is not
/// needed. Bytes that are not UTF-8 are replaced, never a reason to skip the file.
fn read_header(path: &Path) -> Option<String> {
    const MAX: usize = 16 * 1024;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        let n = f.read(&mut buf[len..]).ok()?;
        len += n;
        let end = buf[..len].windows(2).position(|w| w == b"\n\n");
        if let Some(end) = end {
            len = end + 1;
            break;
        }
        if n == 0 || len >= MAX {
            break;
        }
        if len == buf.len() {
            buf.resize((buf.len() * 2).min(MAX), 0);
        }
    }
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

/// `Name` and `Version` from a METADATA's header block.
fn name_version(text: &str) -> Option<(String, String)> {
    let mut name = None;
    let mut version = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Name:") {
            name = Some(normalize_name(v));
        } else if let Some(v) = line.strip_prefix("Version:") {
            version = Some(v.trim().to_string());
        }
    }
    let (n, v) = (name?, version?);
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 200
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.+!".contains(c))
    };
    (ok(&n) && ok(&v)).then_some((n, v))
}

/// PyTorch's identity from its files.
fn torch_of(dir: PathBuf, dists: &BTreeMap<String, String>) -> Torch {
    let py = read_bounded(&dir.join("version.py"), 16 * 1024).unwrap_or_default();
    let var = |name: &str| version_py_value(&py, name);
    let version = var("__version__")
        .or_else(|| dists.get("torch").cloned())
        .unwrap_or_else(|| "unknown".into());
    let cmake = read_bounded(&dir.join("share/cmake/Torch/TorchConfig.cmake"), 256 * 1024);
    // Newer wheels (built with the C++11 ABI only) no longer state it in TorchConfig.cmake;
    // then the mangled names libc10 exports say it.
    let cxx11_abi = cmake
        .as_deref()
        .and_then(cxx11_abi_flag)
        .or_else(|| cxx11_abi_of_library(&dir.join("lib/libc10.so")));
    let cudnn = dists
        .iter()
        .find(|(n, _)| n.starts_with("nvidia-cudnn-cu"))
        .map(|(_, v)| v.clone())
        .or_else(|| bundled_cudnn(&dir.join("lib")));
    let cuda_archs = crate::foundation::solib::fatbin_archs(&dir.join("lib/libtorch_cuda.so"));
    Torch {
        version,
        cuda: var("cuda"),
        git_version: var("git_version"),
        cxx11_abi,
        cudnn,
        cuda_archs,
        dir,
    }
}

/// The string value of `name = '...'` (or `name: Optional[str] = '...'`) in version.py;
/// `None` for `None` or a missing name.
fn version_py_value(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        if !rest.starts_with([' ', ':', '=']) {
            return None;
        }
        let value = rest.split_once('=')?.1.trim();
        let q = value.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let inner = value[1..].split(q).next()?;
        Some(inner.to_string()).filter(|v| !v.is_empty() && v.len() < 200)
    })
}

/// `-D_GLIBCXX_USE_CXX11_ABI=N` in TorchConfig.cmake's `TORCH_CXX_FLAGS`.
fn cxx11_abi_flag(cmake: &str) -> Option<bool> {
    let at = cmake.find("_GLIBCXX_USE_CXX11_ABI=")? + "_GLIBCXX_USE_CXX11_ABI=".len();
    match cmake[at..].chars().next()? {
        '0' => Some(false),
        '1' => Some(true),
        _ => None,
    }
}

/// Whether a C++ library was built with the C++11 ABI, from the names it exports: functions
/// taking `std::string` mangle it as `std::__cxx11::basic_string` under the new ABI and as
/// `Ss` under the old one. `None` for a file that is not a readable ELF library or exports
/// no C++ function that names either.
pub fn cxx11_abi_of_library(path: &Path) -> Option<bool> {
    let syms = crate::foundation::solib::dynamic_symbols(path).ok()?;
    let cxx = || syms.defined.iter().filter(|n| n.starts_with("_Z"));
    if cxx().any(|n| n.contains("St7__cxx11")) {
        return Some(true);
    }
    // Old-ABI std::string is the abbreviation `Ss`, which demangles to `std::string`
    // (new-ABI names demangle to `std::__cxx11::basic_string<...>`). Checking the first
    // few thousand C++ names is enough: a C++ library passes strings everywhere.
    let old = cxx().take(20_000).any(|n| {
        n.contains("Ss")
            && cpp_demangle::Symbol::new(n.as_bytes())
                .ok()
                .and_then(|s| s.demangle().ok())
                .is_some_and(|d| d.contains("std::string"))
    });
    old.then_some(false)
}

/// The major version of a `libcudnn.so.N` bundled in torch/lib.
fn bundled_cudnn(lib: &Path) -> Option<String> {
    std::fs::read_dir(lib).ok()?.flatten().find_map(|e| {
        let name = e.file_name().into_string().ok()?;
        let rest = name.strip_prefix("libcudnn")?;
        let v = rest.split(".so.").nth(1)?;
        v.starts_with(|c: char| c.is_ascii_digit())
            .then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// A venv on disk as `python -m venv` lays it out, with torch, numpy and a base.
    fn venv(dir: &Path) -> PathBuf {
        let base = dir.join("base");
        write(&base.join("bin/python3.11"), "");
        write(&base.join("include/python3.11/Python.h"), "");
        write(
            &base.join("include/python3.11/patchlevel.h"),
            "#define PY_VERSION              \"3.11.7\"\n",
        );
        write(
            &base.join("lib/python3.11/lib-dynload/_struct.cpython-311-x86_64-linux-gnu.so"),
            "",
        );
        let env = dir.join("env");
        write(
            &env.join("pyvenv.cfg"),
            &format!(
                "home = {}\ninclude-system-site-packages = false\nversion = 3.11.7\n",
                base.join("bin").display()
            ),
        );
        write(&env.join("bin/python3"), "");
        let site = env.join("lib/python3.11/site-packages");
        write(
            &site.join("numpy-1.26.4.dist-info/METADATA"),
            "Metadata-Version: 2.1\nName: numpy\nVersion: 1.26.4\n\nName: not-this\n",
        );
        write(
            &site.join("Typing_Extensions-4.0.dist-info/METADATA"),
            "Name: Typing_Extensions\nVersion: 4.0\n",
        );
        write(
            &site.join("nvidia_cudnn_cu12-9.1.0.70.dist-info/METADATA"),
            "Name: nvidia-cudnn-cu12\nVersion: 9.1.0.70\n",
        );
        write(
            &site.join("torch/version.py"),
            "from typing import Optional\n__version__ = '2.4.1+cu121'\ndebug = False\ncuda: Optional[str] = '12.1'\ngit_version = '38b96d3'\nhip: Optional[str] = None\n",
        );
        write(
            &site.join("torch/share/cmake/Torch/TorchConfig.cmake"),
            "  set(TORCH_CXX_FLAGS \"-D_GLIBCXX_USE_CXX11_ABI=0\")\n",
        );
        env.join("bin/python3")
    }

    #[test]
    fn a_venv_is_described_from_its_files() {
        let d = tempfile::tempdir().unwrap();
        let py = venv(d.path());
        let env = describe(Located {
            interpreter: py,
            source: Source::Flag,
        })
        .unwrap();
        assert_eq!(env.version, "3.11.7");
        assert_eq!(env.abi_tag, "cp311");
        assert_eq!(env.ext_suffix, ".cpython-311-x86_64-linux-gnu.so");
        assert_eq!(env.prefix, d.path().join("env"));
        assert_eq!(env.base_prefix, d.path().join("base"));
        assert_eq!(
            env.include_dir.as_deref(),
            Some(d.path().join("base/include/python3.11").as_path())
        );
        assert_eq!(env.dists["numpy"], "1.26.4");
        assert_eq!(env.dists["typing-extensions"], "4.0");
        let t = env.torch.unwrap();
        assert_eq!(t.version, "2.4.1+cu121");
        assert_eq!(t.cuda.as_deref(), Some("12.1"));
        assert_eq!(t.git_version.as_deref(), Some("38b96d3"));
        assert_eq!(t.cxx11_abi, Some(false));
        assert_eq!(t.cudnn.as_deref(), Some("9.1.0.70"));
        assert_eq!(t.cuda_archs, None);
    }

    #[test]
    fn the_digest_covers_every_distribution() {
        let d = tempfile::tempdir().unwrap();
        let py = venv(d.path());
        let loc = Located {
            interpreter: py,
            source: Source::Flag,
        };
        let a = describe(loc.clone()).unwrap().dists_digest();
        write(
            &d.path()
                .join("env/lib/python3.11/site-packages/numpy-1.26.4.dist-info/METADATA"),
            "Name: numpy\nVersion: 2.1.0\n",
        );
        assert_ne!(describe(loc).unwrap().dists_digest(), a);
    }

    #[test]
    fn the_choice_follows_flag_config_venv_conda_path() {
        let d = tempfile::tempdir().unwrap();
        let py = venv(d.path());
        let env = d.path().join("env");
        let none = |_: &str| None;
        assert_eq!(locate(Some(&py), None, &none).unwrap().source, Source::Flag);
        // An environment's directory stands for its interpreter.
        assert_eq!(locate(Some(&env), None, &none).unwrap().interpreter, py);
        assert_eq!(
            locate(None, Some(&py), &none).unwrap().source,
            Source::Config
        );
        let venv_var = |k: &str| (k == "VIRTUAL_ENV").then(|| env.clone().into_os_string());
        assert_eq!(
            locate(None, None, &venv_var).unwrap().source,
            Source::VirtualEnv
        );
        let conda = |k: &str| (k == "CONDA_PREFIX").then(|| env.clone().into_os_string());
        assert_eq!(locate(None, None, &conda).unwrap().source, Source::Conda);
        let path = |k: &str| (k == "PATH").then(|| env.join("bin").into_os_string());
        assert_eq!(locate(None, None, &path).unwrap().interpreter, py);
        assert!(matches!(
            locate(None, None, &none),
            Err(PyEnvError::NoneFound)
        ));
        let missing = d.path().join("nope/bin/python3");
        let e = locate(Some(&missing), None, &none).unwrap_err();
        assert!(e.to_string().contains("--python"), "{e}");
        assert_eq!(e.exit_code(), exit::USAGE);
    }

    #[test]
    fn a_pyenv_shim_stands_for_the_selected_version() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join(".pyenv");
        write(&root.join("shims/python3"), "#!/bin/sh\n");
        write(&root.join("versions/3.11.7/bin/python3"), "");
        write(&root.join("version"), "3.11.7\n");
        let path = |k: &str| (k == "PATH").then(|| root.join("shims").into_os_string());
        assert_eq!(
            locate(None, None, &path).unwrap().interpreter,
            root.join("versions/3.11.7/bin/python3")
        );
    }

    #[test]
    fn many_distributions_and_long_or_odd_metadata_are_read() {
        let t = tempfile::tempdir().unwrap();
        let site = t.path().join("site-packages");
        for i in 0..150 {
            write(
                &site.join(format!("pkg{i}-1.{i}.dist-info/METADATA")),
                &format!("Metadata-Version: 2.1\nName: pkg{i}\nVersion: 1.{i}\n\nbody\n"),
            );
        }
        // A description of 40 KB whose 16 KiB cut falls inside a multi-byte character, and
        // bytes that are not UTF-8 after the header: the header still reads.
        let mut long = b"Name: long\nVersion: 2.0\n\n".to_vec();
        long.extend(std::iter::repeat_n("\u{e9}".as_bytes(), 20_000).flatten());
        long.extend([0xff, 0xfe]);
        std::fs::create_dir_all(site.join("long-2.0.dist-info")).unwrap();
        std::fs::write(site.join("long-2.0.dist-info/METADATA"), &long).unwrap();
        // Name and Version after 5 KB of other header lines (read past the first chunk).
        let mut late = "Metadata-Version: 2.1\n".to_string();
        late.push_str(&"Classifier: Programming Language :: Python\n".repeat(120));
        late.push_str("Name: late\nVersion: 3.0\n\nbody\n");
        write(&site.join("late-3.0.dist-info/METADATA"), &late);
        let d = distributions(std::slice::from_ref(&site));
        assert_eq!(d.len(), 152, "{d:?}");
        assert_eq!(d["pkg149"], "1.149");
        assert_eq!(d["long"], "2.0");
        assert_eq!(d["late"], "3.0");
    }

    #[test]
    fn metadata_and_version_py_parsing() {
        assert_eq!(normalize_name("Foo.Bar__baz"), "foo-bar-baz");
        assert_eq!(name_version("Name: x\n"), None);
        assert_eq!(name_version("Name: x\nVersion: 1 ; rm -rf\n"), None);
        assert_eq!(
            version_py_value("cuda = None\n", "cuda"),
            None,
            "a CPU build has no CUDA"
        );
        assert_eq!(
            version_py_value("__version__ = \"2.5.1\"\n", "__version__").as_deref(),
            Some("2.5.1")
        );
        assert_eq!(cxx11_abi_flag("-D_GLIBCXX_USE_CXX11_ABI=1"), Some(true));
        assert_eq!(cxx11_abi_flag("nothing"), None);
        assert_eq!(
            abi_tag(".cpython-313t-x86_64-linux-gnu.so", (3, 13)),
            "cp313t"
        );
    }

    #[test]
    fn pip_commands_pin_the_public_version() {
        assert_eq!(
            pip_install_command("/v/bin/python3", "numpy", "1.26.4"),
            "/v/bin/python3 -m pip install 'numpy==1.26.4'"
        );
        assert!(
            pip_install_command("python3", "torch", "2.4.1+cu121")
                .starts_with("python3 -m pip install 'torch==2.4.1' (the `+cu121` build")
        );
    }
}
