//! What a build reads: the include closure of a CUDA source, or the files a command
//! build's input globs match.
//!
//! Only those files are read and hashed, so a build key never depends on (or pays for)
//! the rest of the repository.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::foundation::recipe::normalize;

/// Why a build's inputs cannot be determined.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum InputError {
    /// A quoted include that exists neither beside the including file nor in an include dir.
    #[error(
        "{from}:{line}: include \"{name}\" not found (looked beside the file and in the include dirs)"
    )]
    Missing {
        /// The including file.
        from: String,
        /// Its line.
        line: usize,
        /// The include as written.
        name: String,
    },
    /// An include resolving outside the repository.
    #[error("{from}:{line}: include \"{name}\" is outside the repository")]
    Escapes {
        /// The including file.
        from: String,
        /// Its line.
        line: usize,
        /// The include as written.
        name: String,
    },
    /// An absolute include: a file of this machine that no key covers.
    #[error(
        "{from}:{line}: include <{name}> is an absolute path, outside the repository and the toolchain"
    )]
    Absolute {
        /// The including file.
        from: String,
        /// Its line.
        line: usize,
        /// The include as written.
        name: String,
    },
    /// An include whose file a macro names (`#include HEADER`).
    #[error(
        "{from}:{line}: `#include {spec}` is a computed include: the file it names is not known before preprocessing"
    )]
    Computed {
        /// The including file.
        from: String,
        /// Its line.
        line: usize,
        /// What follows `#include`, as written.
        spec: String,
    },
    /// One include name that resolves to two different files from two places.
    #[error("include \"{name}\" means {first} in one place and {second} in another")]
    Ambiguous {
        /// The include as written.
        name: String,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
    /// A file that is a symbolic link out of the repository (or under one).
    #[error("cannot read {path}: it links outside the repository")]
    LinksOut {
        /// The file, relative to the root.
        path: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file, relative to the root.
        path: String,
        /// Why.
        reason: String,
    },
    /// A glob that matches nothing.
    #[error("input glob `{glob}` matches no file")]
    NoMatch {
        /// The glob.
        glob: String,
    },
}

/// The files a CUDA build reads.
#[derive(Debug, Default, Clone)]
pub struct Closure {
    /// Every file read, by repository-relative path, with its bytes.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Headers as NVRTC needs them: the include name as written, and the file it means.
    pub headers: BTreeMap<String, String>,
}

/// The `#include` directives of a source: (line, name, quoted).
#[cfg(test)]
fn includes(text: &str) -> Vec<(usize, String, bool)> {
    directives(text)
        .into_iter()
        .filter_map(|(line, d)| match d {
            Directive::Literal { name, quoted } => Some((line, name, quoted)),
            Directive::Computed(_) => None,
        })
        .collect()
}

/// One `#include` (or `#include_next`) directive.
#[derive(Debug, PartialEq)]
enum Directive {
    /// `"name"` (quoted) or `<name>`.
    Literal { name: String, quoted: bool },
    /// Anything else: a macro the preprocessor expands (`#include HEADER`), as written.
    Computed(String),
}

/// Every include directive of a source, with its line, outside comments.
fn directives(text: &str) -> Vec<(usize, Directive)> {
    let mut out = Vec::new();
    let mut in_block = false;
    for (i, raw) in text.lines().enumerate() {
        // Drop comments, keeping track of block comments across lines.
        let mut line = String::new();
        let mut rest = raw;
        loop {
            if in_block {
                match rest.find("*/") {
                    Some(p) => {
                        rest = &rest[p + 2..];
                        in_block = false;
                    }
                    None => break,
                }
            } else {
                let block = rest.find("/*");
                let comment = rest.find("//");
                match (block, comment) {
                    (Some(b), c) if c.is_none_or(|c| b < c) => {
                        line.push_str(&rest[..b]);
                        rest = &rest[b + 2..];
                        in_block = true;
                    }
                    (_, Some(c)) => {
                        line.push_str(&rest[..c]);
                        break;
                    }
                    _ => {
                        line.push_str(rest);
                        break;
                    }
                }
            }
        }
        let t = line.trim_start();
        let Some(after_hash) = t.strip_prefix('#') else {
            continue;
        };
        let directive = after_hash.trim_start();
        let Some(spec) = directive
            .strip_prefix("include_next")
            .or_else(|| directive.strip_prefix("include"))
        else {
            continue;
        };
        // `#includes` or `#include_foo` is another directive (or none), not an include.
        if spec.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let spec = spec.trim();
        let parsed = if let Some(s) = spec.strip_prefix('"') {
            s.find('"').map(|e| (s[..e].to_string(), true))
        } else if let Some(s) = spec.strip_prefix('<') {
            s.find('>').map(|e| (s[..e].to_string(), false))
        } else {
            None
        };
        out.push((
            i + 1,
            match parsed {
                Some((name, quoted)) => Directive::Literal { name, quoted },
                None => Directive::Computed(spec.to_string()),
            },
        ));
    }
    out
}

/// Where build inputs are read from: a directory, or a commit's tree in the object database.
pub trait FileSource {
    /// Whether `rel` is a regular file.
    fn is_file(&self, rel: &str) -> bool;
    /// The bytes of `rel`.
    fn read(&self, rel: &str) -> Result<Vec<u8>, InputError>;
}

/// Files under a directory on disk.
pub struct Dir {
    root: PathBuf,
    canonical_root: PathBuf,
}

impl Dir {
    /// The files under `root`.
    pub fn new(root: &Path) -> Self {
        Dir {
            root: root.to_path_buf(),
            canonical_root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
        }
    }
}

impl FileSource for Dir {
    fn is_file(&self, rel: &str) -> bool {
        let path = self.root.join(rel);
        crate::foundation::stamp::note(&path);
        path.is_file()
    }
    fn read(&self, rel: &str) -> Result<Vec<u8>, InputError> {
        read(&self.root, &self.canonical_root, rel)
    }
}

/// Reads `source` and every repository file it includes, transitively, each once (files that
/// include each other are legal C++ with include guards or `#pragma once`; a cycle without
/// them is the compiler's to report).
///
/// A quoted include is looked for beside the including file, then in `include_dirs`; an
/// angle include only in `include_dirs`. An angle include found in neither, and a quoted one
/// that names a toolkit or standard header ([`toolkit_header`]: `"cuda_runtime.h"`), is left
/// to the compiler, whose identity covers it.
pub fn include_closure(
    root: &Path,
    source: &str,
    include_dirs: &[String],
) -> Result<Closure, InputError> {
    include_closure_in(&Dir::new(root), source, include_dirs)
}

/// [`include_closure`] over any file source.
pub fn include_closure_in(
    src: &dyn FileSource,
    source: &str,
    include_dirs: &[String],
) -> Result<Closure, InputError> {
    let mut closure = Closure::default();
    // Depth first, in the order of the includes, without recursion (a hostile chain of
    // thousands of headers needs no stack).
    let mut todo = vec![source.to_string()];
    while let Some(file) = todo.pop() {
        if closure.files.contains_key(&file) {
            continue;
        }
        let found = visit(src, &file, include_dirs, &mut closure)?;
        todo.extend(found.into_iter().rev());
    }
    Ok(closure)
}

fn read(root: &Path, canonical_root: &Path, rel: &str) -> Result<Vec<u8>, InputError> {
    let path = root.join(rel);
    // Each directory on the way too: where a link among them leads decides whether the
    // file is in the repository.
    for p in path.ancestors().take_while(|p| p.starts_with(root)) {
        crate::foundation::stamp::note(p);
    }
    // A symbolic link may point out of the repository; what it points to is not an input
    // that another checkout would have.
    if let Ok(real) = path.canonicalize()
        && !real.starts_with(canonical_root)
    {
        return Err(InputError::LinksOut {
            path: rel.to_string(),
        });
    }
    std::fs::read(&path).map_err(|e| InputError::Read {
        path: rel.to_string(),
        reason: e.to_string(),
    })
}

/// Reads `file` into the closure and returns the repository files it includes, in order.
fn visit(
    src: &dyn FileSource,
    file: &str,
    include_dirs: &[String],
    closure: &mut Closure,
) -> Result<Vec<String>, InputError> {
    let bytes = src.read(file)?;
    // A byte-order mark would hide a first-line `#include` from the scan (the compilers
    // skip it): the key would miss that header.
    let text = String::from_utf8_lossy(crate::foundation::fsutil::without_bom(&bytes)).into_owned();
    closure.files.insert(file.to_string(), bytes);
    let mut found = Vec::new();
    let dir = Path::new(file)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    for (line, directive) in directives(&text) {
        let Some((name, rel)) = resolve(src, file, &dir, include_dirs, line, directive)? else {
            continue;
        };
        if let Some(prev) = closure.headers.get(&name)
            && *prev != rel
        {
            return Err(InputError::Ambiguous {
                name,
                first: prev.clone(),
                second: rel,
            });
        }
        closure.headers.insert(name, rel.clone());
        found.push(rel);
    }
    Ok(found)
}

/// Whether a header name is the CUDA toolkit's (its runtime, intrinsics and libraries:
/// `cuda_runtime.h`, `mma.h`, `cublas_v2.h`, `cub/...`) or the C and C++ standard library's
/// (`stdio.h`, `cstdint`): what a quoted include that the repository lacks means, as nvcc
/// finds it.
pub fn toolkit_header(name: &str) -> bool {
    // Directories only the toolkit and its libraries have.
    const DIRS: [&str; 11] = [
        "cuda/",
        "cub/",
        "thrust/",
        "cooperative_groups/",
        "crt/",
        "nv/",
        "nvtx3/",
        "cutlass/",
        "cute/",
        "cudnn/",
        "sys/",
    ];
    // The libraries' own names (`cublas_v2.h`, `curand_kernel.h`).
    const LIBRARIES: [&str; 14] = [
        "cublas",
        "cudnn",
        "cufft",
        "curand",
        "cusparse",
        "cusolver",
        "cutensor",
        "nccl",
        "npp",
        "nvrtc",
        "nvJitLink",
        "nvml",
        "cupti",
        "nvToolsExt",
    ];
    // The runtime's and the intrinsics' headers, by name: a repository's `cuda_utils.h` or
    // `math_helpers.h` is not the toolkit's, and a missing one stays an error.
    const NAMES: [&str; 58] = [
        "cuda.h",
        "cuda_runtime.h",
        "cuda_runtime_api.h",
        "cuda_fp16.h",
        "cuda_fp16.hpp",
        "cuda_bf16.h",
        "cuda_bf16.hpp",
        "cuda_fp8.h",
        "cuda_fp8.hpp",
        "cuda_fp6.h",
        "cuda_fp4.h",
        "cuda_pipeline.h",
        "cuda_pipeline_primitives.h",
        "cuda_awbarrier.h",
        "cuda_awbarrier_primitives.h",
        "cuda_occupancy.h",
        "cuda_profiler_api.h",
        "cuda_texture_types.h",
        "cuda_surface_types.h",
        "cuda_device_runtime_api.h",
        "cudaTypedefs.h",
        "cuda_gl_interop.h",
        "cuda_egl_interop.h",
        "cuda_stdint.h",
        "cuComplex.h",
        "cudaProfiler.h",
        "mma.h",
        "cooperative_groups.h",
        "vector_types.h",
        "vector_functions.h",
        "vector_functions.hpp",
        "driver_types.h",
        "driver_functions.h",
        "library_types.h",
        "builtin_types.h",
        "channel_descriptor.h",
        "common_functions.h",
        "surface_types.h",
        "texture_types.h",
        "surface_functions.h",
        "texture_fetch_functions.h",
        "texture_indirect_functions.h",
        "surface_indirect_functions.h",
        "fatbinary_section.h",
        "nvfunctional",
        "device_launch_parameters.h",
        "device_functions.h",
        "device_atomic_functions.h",
        "device_double_functions.h",
        "device_types.h",
        "host_defines.h",
        "host_config.h",
        "math_constants.h",
        "math_functions.h",
        "sm_20_intrinsics.h",
        "sm_32_intrinsics.h",
        "sm_60_atomic_functions.h",
        "sm_61_intrinsics.h",
    ];
    const STD: [&str; 22] = [
        "assert.h",
        "float.h",
        "limits.h",
        "math.h",
        "stdint.h",
        "stdio.h",
        "stdlib.h",
        "string.h",
        "stddef.h",
        "stdbool.h",
        "time.h",
        "ctype.h",
        "errno.h",
        "inttypes.h",
        "signal.h",
        "stdarg.h",
        "unistd.h",
        "malloc.h",
        "memory.h",
        "iso646.h",
        "wchar.h",
        "locale.h",
    ];
    // The C++ library's names have no extension.
    const CXX: [&str; 48] = [
        "algorithm",
        "array",
        "atomic",
        "bit",
        "bitset",
        "cassert",
        "cfloat",
        "chrono",
        "cinttypes",
        "climits",
        "cmath",
        "complex",
        "concepts",
        "cstddef",
        "cstdint",
        "cstdio",
        "cstdlib",
        "cstring",
        "ctime",
        "functional",
        "initializer_list",
        "iomanip",
        "iostream",
        "iterator",
        "limits",
        "list",
        "map",
        "memory",
        "mutex",
        "numeric",
        "optional",
        "random",
        "ratio",
        "set",
        "span",
        "sstream",
        "stdexcept",
        "string",
        "string_view",
        "thread",
        "tuple",
        "type_traits",
        "unordered_map",
        "unordered_set",
        "utility",
        "variant",
        "vector",
        "numbers",
    ];
    DIRS.iter().any(|d| name.starts_with(d))
        || (!name.contains('/') && LIBRARIES.iter().any(|p| name.starts_with(p)))
        || NAMES.contains(&name)
        || STD.contains(&name)
        || CXX.contains(&name)
}

/// Where one `#include` of `file` (in directory `dir`) leads: the name as written and the
/// file it resolves to, or `None` for a system header left to the compiler.
fn resolve(
    src: &dyn FileSource,
    file: &str,
    dir: &str,
    include_dirs: &[String],
    line: usize,
    directive: Directive,
) -> Result<Option<(String, String)>, InputError> {
    let (name, quoted) = match directive {
        Directive::Literal { name, quoted } => (name, quoted),
        // The file a macro names is known only after preprocessing, with the recipe's
        // defines: no key could cover it, so it is refused like an absolute include.
        Directive::Computed(spec) => {
            return Err(InputError::Computed {
                from: file.to_string(),
                line,
                spec,
            });
        }
    };
    // An absolute include names a file of this machine that no key covers and another
    // checkout lacks (or has different): refused, whatever it points to. The toolchain's
    // own headers are included by name and covered by the compiler's identity.
    if name.starts_with('/') {
        return Err(InputError::Absolute {
            from: file.to_string(),
            line,
            name,
        });
    }
    let climbs = Path::new(&name)
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    let mut candidates: Vec<String> = Vec::new();
    if quoted {
        candidates.push(if dir.is_empty() {
            name.clone()
        } else {
            format!("{dir}/{name}")
        });
    }
    // An include dir of the root itself is `.` as written and `` once normalised.
    candidates.extend(include_dirs.iter().map(|d| match d.trim_end_matches('/') {
        "" | "." => name.clone(),
        d => format!("{d}/{name}"),
    }));
    let mut found = None;
    for c in candidates {
        match normalize(&c) {
            None => {
                return Err(InputError::Escapes {
                    from: file.to_string(),
                    line,
                    name,
                });
            }
            Some(rel) if src.is_file(&rel) => {
                found = Some(rel);
                break;
            }
            Some(_) => {}
        }
    }
    let Some(rel) = found else {
        if quoted && !toolkit_header(&name) {
            return Err(InputError::Missing {
                from: file.to_string(),
                line,
                name,
            });
        }
        // Left to the compiler, `<../../x.h>` would climb out of its own include
        // directories to a file no key covers.
        if climbs {
            return Err(InputError::Escapes {
                from: file.to_string(),
                line,
                name,
            });
        }
        return Ok(None);
    };
    Ok(Some((name, rel)))
}

/// The literal directory prefix of a glob (`kernels/**/*.cu` → `kernels`), where a walk
/// can start instead of at the root.
fn literal_prefix(glob: &str) -> PathBuf {
    let mut p = PathBuf::new();
    let parts: Vec<&str> = glob.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if part.contains(['*', '?', '[', '{']) {
            break;
        }
        p.push(part);
    }
    p
}

/// The matcher of one input glob, as every command build reads it: `*` does not cross `/`.
pub fn glob_matcher(glob: &str) -> Result<globset::GlobMatcher, globset::Error> {
    Ok(globset::GlobBuilder::new(glob)
        .literal_separator(true)
        .build()?
        .compile_matcher())
}

/// Reads every file matching the globs (relative to `root`), skipping `.git` and `.repro`.
pub fn glob_inputs(root: &Path, globs: &[String]) -> Result<BTreeMap<String, Vec<u8>>, InputError> {
    let canonical_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut files = BTreeMap::new();
    for g in globs {
        let matcher = glob_matcher(g).map_err(|e| InputError::NoMatch {
            glob: format!("{g} ({e})"),
        })?;
        let start = root.join(literal_prefix(g));
        crate::foundation::stamp::note(&start);
        let mut matched = false;
        for entry in walkdir::WalkDir::new(&start)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| !matches!(e.file_name().to_str(), Some(".git" | ".repro")))
            .flatten()
        {
            if entry.file_type().is_dir() {
                // What a directory holds decides what the glob matches.
                crate::foundation::stamp::note(entry.path());
            }
            if !entry.file_type().is_file() {
                continue;
            }
            let Ok(rel) = entry.path().strip_prefix(root) else {
                continue;
            };
            let rel = rel.to_string_lossy().replace('\\', "/");
            if matcher.is_match(&rel) {
                matched = true;
                if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(rel) {
                    let bytes = read(root, &canonical_root, slot.key())?;
                    slot.insert(bytes);
                }
            }
        }
        if !matched {
            return Err(InputError::NoMatch { glob: g.clone() });
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, t) in files {
            let path = d.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        }
        d
    }

    #[test]
    fn finds_includes_outside_comments() {
        let src = "#include \"a.h\"\n  #  include <b.h>\n// #include \"c.h\"\n/* #include \"d.h\"\n#include \"e.h\" */ #include \"f.h\"\n";
        let names: Vec<String> = includes(src).into_iter().map(|(_, n, _)| n).collect();
        assert_eq!(names, ["a.h", "b.h", "f.h"]);
    }

    #[test]
    fn closure_follows_quoted_and_dir_includes() {
        let d = tree(&[
            (
                "k/main.cu",
                "#include \"common.cuh\"\n#include <lib.cuh>\n#include <cuda_fp16.h>\n",
            ),
            ("k/common.cuh", "#include \"sub/x.cuh\"\n"),
            ("k/sub/x.cuh", "// leaf\n"),
            ("inc/lib.cuh", ""),
            ("unrelated.cu", "never read"),
        ]);
        let c = include_closure(d.path(), "k/main.cu", &["inc".into()]).unwrap();
        let files: Vec<&str> = c.files.keys().map(String::as_str).collect();
        assert_eq!(
            files,
            ["inc/lib.cuh", "k/common.cuh", "k/main.cu", "k/sub/x.cuh"]
        );
        assert_eq!(c.headers["sub/x.cuh"], "k/sub/x.cuh");
    }

    #[test]
    fn absolute_and_climbing_includes_are_refused_with_their_line() {
        for (text, want) in [
            (
                "#include </etc/hostname>\n",
                "k/a.cu:1: include </etc/hostname> is an absolute path",
            ),
            (
                "\n#include \"/tmp/x.h\"\n",
                "k/a.cu:2: include </tmp/x.h> is an absolute path",
            ),
            (
                "#include <../../../x.h>\n",
                "k/a.cu:1: include \"../../../x.h\" is outside the repository",
            ),
            (
                "#include <cuda/../../x.h>\n",
                "k/a.cu:1: include \"cuda/../../x.h\" is outside",
            ),
        ] {
            let d = tree(&[("k/a.cu", text)]);
            let err = include_closure(d.path(), "k/a.cu", &[]).unwrap_err();
            assert!(err.to_string().contains(want), "{text}: {err}");
        }
        // A toolkit header by name is still the compiler's.
        let d = tree(&[(
            "k/a.cu",
            "#include <cuda_fp16.h>\n#include <cuda/std/cmath>\n",
        )]);
        assert!(include_closure(d.path(), "k/a.cu", &[]).is_ok());
    }

    #[test]
    fn computed_includes_are_refused_with_their_line() {
        // A macro (from the source or from the recipe's defines) could name any file of
        // this machine; nothing before preprocessing knows which, so no key could cover it.
        for text in [
            "#include HEADER\n",
            "#define H \"/etc/hostname\"\n\n  #  include   H\n",
            "#include_next MACRO(x)\n",
        ] {
            let d = tree(&[("k/a.cu", text)]);
            let err = include_closure(d.path(), "k/a.cu", &[]).unwrap_err();
            assert!(
                matches!(err, InputError::Computed { ref from, .. } if from == "k/a.cu"),
                "{text:?}: {err}"
            );
            assert!(err.to_string().contains("computed include"), "{err}");
        }
        let d = tree(&[("k/a.cu", "\n\n#include HDR\n")]);
        let err = include_closure(d.path(), "k/a.cu", &[]).unwrap_err();
        assert!(
            err.to_string().starts_with("k/a.cu:3: `#include HDR`"),
            "{err}"
        );
        // `#include_next` with a literal name is an include like any other; a directive
        // that only starts with the word is not one.
        let names: Vec<String> = includes("#include_next <b.h>\n#includes x\n#include_x y\n")
            .into_iter()
            .map(|(_, n, _)| n)
            .collect();
        assert_eq!(names, ["b.h"]);
    }

    #[test]
    fn bad_includes_are_named() {
        let d = tree(&[("k/a.cu", "\n#include \"missing.h\"\n")]);
        assert_eq!(
            include_closure(d.path(), "k/a.cu", &[])
                .unwrap_err()
                .to_string(),
            "k/a.cu:2: include \"missing.h\" not found (looked beside the file and in the include dirs)"
        );
        let d = tree(&[("k/a.cu", "#include \"../../etc/passwd\"\n")]);
        assert!(matches!(
            include_closure(d.path(), "k/a.cu", &[]),
            Err(InputError::Escapes { .. })
        ));
        let d = tree(&[
            ("a.cu", "#include \"b.h\"\n"),
            ("b.h", "#include \"c.h\"\n"),
            ("c.h", "#include \"b.h\"\n"),
        ]);
        // Files that include each other (with guards, as real code has them) are read once
        // each; a quoted toolkit or standard header the repository lacks is the compiler's.
        let c = include_closure(d.path(), "a.cu", &[]).unwrap();
        let names: Vec<&str> = c.files.keys().map(String::as_str).collect();
        assert_eq!(names, ["a.cu", "b.h", "c.h"]);
        let d = tree(&[(
            "a.cu",
            "#include \"cuda_runtime.h\"\n#include \"cublas_v2.h\"\n#include \"cuda/std/array\"\n\
             #include \"stdio.h\"\n#include \"cstdint\"\n#include \"mma.h\"\n#include \"util.h\"\n",
        )]);
        assert_eq!(
            include_closure(d.path(), "a.cu", &[])
                .unwrap_err()
                .to_string(),
            "a.cu:7: include \"util.h\" not found (looked beside the file and in the include dirs)"
        );
        // A repository's own header named like the toolkit's is no toolkit header.
        let d = tree(&[(
            "a.cu",
            "#include \"math_helpers.h\"\n#include \"cuda_utils.h\"\n",
        )]);
        assert!(matches!(
            include_closure(d.path(), "a.cu", &[]),
            Err(InputError::Missing { name, .. }) if name == "math_helpers.h"
        ));
        // The root as an include dir, as `repro init` writes it (`.`).
        let d = tree(&[("k/a.cu", "#include \"top.h\"\n"), ("top.h", "")]);
        for root in [".", ""] {
            let c = include_closure(d.path(), "k/a.cu", &[root.to_string()]).unwrap();
            assert!(c.files.contains_key("top.h"), "{root:?}");
        }
        // A chain of thousands of headers needs no deep stack.
        let chain: Vec<(String, String)> = (0..5000)
            .map(|i| (format!("h{i}.h"), format!("#include \"h{}.h\"\n", i + 1)))
            .chain([("h5000.h".to_string(), String::new())])
            .collect();
        let files: Vec<(&str, &str)> = chain
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let d = tree(&files);
        assert_eq!(
            include_closure(d.path(), "h0.h", &[]).unwrap().files.len(),
            5001
        );
    }

    #[test]
    fn globs_match_only_what_they_say() {
        let d = tree(&[
            ("src/a.cu", "a"),
            ("src/deep/b.cu", "b"),
            ("src/c.h", "c"),
            ("Makefile", "m"),
        ]);
        let f = glob_inputs(d.path(), &["src/**/*.cu".into(), "Makefile".into()]).unwrap();
        let names: Vec<&str> = f.keys().map(String::as_str).collect();
        assert_eq!(names, ["Makefile", "src/a.cu", "src/deep/b.cu"]);
        assert!(matches!(
            glob_inputs(d.path(), &["*.rs".into()]),
            Err(InputError::NoMatch { .. })
        ));
    }
}
