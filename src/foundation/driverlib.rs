//! Finding the host's NVIDIA driver libraries (`libcuda.so.1`, `libnvidia-ml.so.1`) where the
//! dynamic loader does not look.
//!
//! The driver always comes from the host. A repro built by Nix runs with Nix's loader, whose
//! search path holds no system directory, so on Ubuntu and other non-NixOS hosts
//! `dlopen("libcuda.so.1")` fails although the driver is installed. This is the job nixpkgs'
//! `autoAddDriverRunpath` and nixGL do for other programs: when loading by name fails, look in
//! the host's driver directories (`REPRO_DRIVER_LIB_DIRS`, NixOS's `/run/opengl-driver/lib`,
//! the distribution's library directories, and what `ldconfig -p` lists), and load the
//! library from there by absolute path. Once a library with that soname is loaded, cudarc's
//! and NVML's own `dlopen` by name resolve to it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::foundation::process::Cmd;

/// The libraries looked for, by soname.
pub const LIBRARIES: [&str; 2] = ["libcuda.so.1", "libnvidia-ml.so.1"];

/// How one driver library was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Located {
    /// The dynamic loader found it by name (the usual case).
    Loader,
    /// The loader did not; repro's search found it here, for this reason.
    Searched {
        /// The library file that was loaded.
        path: PathBuf,
        /// Which rule found the directory (`/run/opengl-driver/lib (NixOS)`...).
        rule: String,
    },
    /// Neither the loader nor the search found it.
    Missing {
        /// The directories searched.
        searched: Vec<PathBuf>,
    },
}

impl Located {
    /// One line for a fingerprint field: how the library was found.
    pub fn describe(&self) -> String {
        match self {
            Located::Loader => "the dynamic loader".into(),
            Located::Searched { path, rule } => {
                format!("repro's host search: {} ({rule})", path.display())
            }
            Located::Missing { searched } => format!(
                "not found by the loader nor in {}",
                searched
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// Distribution library directories where drivers are installed.
const DISTRO_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
];

/// The directories to search, in order, each with the rule that names it. `ldconfig` is
/// asked only when `with_ldconfig` (it costs a process).
pub fn search_dirs(soname: &str, with_ldconfig: bool) -> Vec<(PathBuf, String)> {
    let mut dirs: Vec<(PathBuf, String)> = Vec::new();
    if let Some(v) = std::env::var_os("REPRO_DRIVER_LIB_DIRS") {
        for d in std::env::split_paths(&v).filter(|d| !d.as_os_str().is_empty()) {
            dirs.push((d, "REPRO_DRIVER_LIB_DIRS".into()));
        }
        // An explicit list is the whole search: tests and unusual hosts rely on that.
        return dirs;
    }
    dirs.push((
        PathBuf::from("/run/opengl-driver/lib"),
        "NixOS driver directory".into(),
    ));
    for d in DISTRO_DIRS {
        dirs.push((PathBuf::from(d), "distribution library directory".into()));
    }
    if with_ldconfig {
        for d in ldconfig_dirs(soname) {
            if !dirs.iter().any(|(x, _)| *x == d) {
                dirs.push((d, "listed by ldconfig -p".into()));
            }
        }
    }
    dirs
}

/// The directories `ldconfig -p` lists `soname` in (the host's cache, which Nix's loader
/// does not read).
fn ldconfig_dirs(soname: &str) -> Vec<PathBuf> {
    // Both libraries may be searched for in one process (a machine without the driver):
    // `ldconfig -p` runs once for both.
    static LISTING: OnceLock<Option<String>> = OnceLock::new();
    let listing = LISTING.get_or_init(|| {
        let run = |prog: &str| {
            Cmd::new(prog)
                .arg("-p")
                .timeout(Duration::from_secs(5))
                .output()
                .ok()
                .filter(|o| o.status.success())
        };
        run("/sbin/ldconfig")
            .or_else(|| run("ldconfig"))
            .map(|out| out.stdout_str())
    });
    listing
        .as_deref()
        .map_or_else(Vec::new, |text| parse_ldconfig(text, soname))
}

/// Parses `ldconfig -p` lines such as
/// `\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1`.
pub fn parse_ldconfig(text: &str, soname: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().split_once(' ')?;
            let (_, path) = rest.split_once("=> ")?;
            (name == soname)
                .then(|| Path::new(path.trim()).parent().map(Path::to_path_buf))
                .flatten()
        })
        .collect()
}

fn loadable_by_name(soname: &str) -> bool {
    // SAFETY: loading the driver's library runs its initialisers, as cudarc's own load does.
    unsafe { libloading::Library::new(soname) }
        .map(std::mem::forget)
        .is_ok()
}

/// Loads `path` for good (RTLD_GLOBAL), so that later loads by soname find it.
fn load_for_good(path: &Path) -> bool {
    // SAFETY: as above; the handle is kept for the life of the process.
    unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
    }
    .map(std::mem::forget)
    .is_ok()
}

/// Finds one library: by name, else through the search, loading it from where it is.
pub fn locate(soname: &str) -> Located {
    if loadable_by_name(soname) {
        return Located::Loader;
    }
    let dirs = search_dirs(soname, true);
    for (dir, rule) in &dirs {
        let path = dir.join(soname);
        if path.is_file() && load_for_good(&path) {
            return Located::Searched {
                path,
                rule: rule.clone(),
            };
        }
    }
    Located::Missing {
        searched: dirs.into_iter().map(|(d, _)| d).collect(),
    }
}

/// Makes sure the driver libraries are loaded if the host has them, once per process, and
/// says how each was found (in [`LIBRARIES`] order). Call before the first CUDA or NVML call
/// that needs both; [`ensure_one`] loads only one of them.
pub fn ensure() -> Vec<(&'static str, &'static Located)> {
    LIBRARIES.iter().map(|l| (*l, ensure_one(l))).collect()
}

/// Makes sure one driver library (`libcuda.so.1` or `libnvidia-ml.so.1`) is loaded if the
/// host has it, once per process, and says how it was found. Each library is looked for
/// only when it is first needed: loading libcuda costs milliseconds that a command answered
/// from caches (`env check` with the per-boot device cache) should not pay, and NVML's
/// search (which may run `ldconfig -p`) is not paid by a command that only needs CUDA.
/// Any other name is looked for each time it is asked for (nothing in repro does that).
pub fn ensure_one(soname: &str) -> &'static Located {
    static CUDA: OnceLock<Located> = OnceLock::new();
    static NVML: OnceLock<Located> = OnceLock::new();
    match soname {
        "libcuda.so.1" => CUDA.get_or_init(|| locate(soname)),
        "libnvidia-ml.so.1" => NVML.get_or_init(|| locate(soname)),
        other => Box::leak(Box::new(locate(other))),
    }
}

/// How `soname` was found, looking for it first if that was not done yet.
pub fn located(soname: &str) -> Option<&'static Located> {
    LIBRARIES.contains(&soname).then(|| ensure_one(soname))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldconfig_lines_name_the_directories() {
        let text = "3 libs found in cache `/etc/ld.so.cache'\n\
            \tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n\
            \tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so\n\
            \tlibnvidia-ml.so.1 (libc6,x86-64) => /opt/nv/lib/libnvidia-ml.so.1\n";
        assert_eq!(
            parse_ldconfig(text, "libcuda.so.1"),
            [PathBuf::from("/usr/lib/x86_64-linux-gnu")]
        );
        assert_eq!(
            parse_ldconfig(text, "libnvidia-ml.so.1"),
            [PathBuf::from("/opt/nv/lib")]
        );
        assert!(parse_ldconfig(text, "libnvrtc.so.13").is_empty());
    }
}
