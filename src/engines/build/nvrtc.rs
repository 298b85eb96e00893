//! In-process compilation with NVRTC, called through the library repro found and loaded
//! (`toolchain::nvrtc`), so that a release chosen by path (a wheel's, `REPRO_NVRTC`) is
//! the one that compiles even where a system CUDA puts another NVRTC on the loader's path.
//!
//! Headers are handed to NVRTC in memory under the names the sources include them by, and
//! the program is named by its repository-relative path, so no absolute path of this
//! machine can reach the compiler: two checkouts at different paths give identical bytes.

use std::ffi::{CStr, CString, c_char, c_int, c_void};

use super::CompileError;
use super::inputs::Closure;
use crate::engines::toolchain::Pins;
use crate::foundation::recipe::{Compile, Output};

type Program = *mut c_void;
/// `nvrtcResult`: 0 is success.
type Status = c_int;
const SUCCESS: Status = 0;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> Status;
type BytesFn = unsafe extern "C" fn(Program, *mut c_char) -> Status;

/// The NVRTC functions a compile calls, taken from the loaded library.
struct Api {
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    log_size: SizeFn,
    log: BytesFn,
    ptx_size: SizeFn,
    ptx: BytesFn,
    cubin_size: SizeFn,
    cubin: BytesFn,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
}

impl Api {
    fn load(pins: &Pins) -> Result<Api, crate::engines::toolchain::NvrtcError> {
        let l = crate::engines::toolchain::nvrtc(pins)?;
        Ok(Api {
            create: l.function("nvrtcCreateProgram")?,
            compile: l.function("nvrtcCompileProgram")?,
            log_size: l.function("nvrtcGetProgramLogSize")?,
            log: l.function("nvrtcGetProgramLog")?,
            ptx_size: l.function("nvrtcGetPTXSize")?,
            ptx: l.function("nvrtcGetPTX")?,
            cubin_size: l.function("nvrtcGetCUBINSize")?,
            cubin: l.function("nvrtcGetCUBIN")?,
            destroy: l.function("nvrtcDestroyProgram")?,
            error_string: l.function("nvrtcGetErrorString")?,
        })
    }

    fn error_string(&self, r: Status) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string (or NULL) for any code.
        unsafe {
            let p = (self.error_string)(r);
            if p.is_null() {
                format!("NVRTC error {r}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }
}

/// What a successful compile produced.
pub struct Artifacts {
    /// Output kind → bytes.
    pub outputs: Vec<(Output, Vec<u8>)>,
    /// The compiler's log (warnings), possibly empty.
    pub log: String,
}

/// The options NVRTC is given: target, macros in name order, then the recipe's options.
pub fn options(c: &Compile) -> Vec<String> {
    let mut o = vec![format!("-arch={}", c.target)];
    o.extend(c.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    o.extend(c.options.iter().cloned());
    o
}

/// Whether a header says `#pragma once`.
fn pragma_once(bytes: &[u8]) -> bool {
    String::from_utf8_lossy(bytes).lines().any(|l| {
        let l = l.trim_start();
        l.strip_prefix('#')
            .map(str::trim_start)
            .and_then(|l| l.strip_prefix("pragma"))
            .is_some_and(|l| l.split_whitespace().next() == Some("once"))
    })
}

/// A `#pragma once` header's text inside an include guard named after its file (`rel`), the
/// line numbers and the name in diagnostics kept as they are (`#line 1 "include"`).
fn guarded(include: &str, rel: &str, bytes: &[u8]) -> Vec<u8> {
    let id = &crate::foundation::keys::sha256_hex(rel.as_bytes())[..16];
    let mut out = format!(
        "#ifndef __repro_once_{id}\n#define __repro_once_{id}\n#line 1 \"{}\"\n",
        include.replace('\\', "\\\\").replace('"', "\\\"")
    )
    .into_bytes();
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\n#endif\n");
    out
}

/// Compiles `c.source` with the headers of `closure`, with the NVRTC the project's `pins`
/// choose. `Err` carries the compiler's log.
pub fn compile(c: &Compile, pins: &Pins, closure: &Closure) -> Result<Artifacts, CompileError> {
    let api = Api::load(pins)?;
    let cstr = |s: &[u8], what: &str| {
        CString::new(s).map_err(|_| CompileError::Nul {
            what: what.to_string(),
        })
    };
    // NVRTC takes a byte-order mark for a token; the key still covers the file as it is.
    let src = cstr(
        crate::foundation::fsutil::without_bom(&closure.files[&c.source]),
        &c.source,
    )?;
    let name = cstr(c.source.as_bytes(), "the source path")?;
    let mut header_names = Vec::new();
    let mut header_srcs = Vec::new();
    // NVRTC knows a header by the name it is included by, so `#pragma once` keeps out a
    // second inclusion only under the same name: a header included as "inc/a.h" from one
    // file and as "a.h" from another would be read twice (nvcc, reading files, reads it
    // once). Such a header is handed to NVRTC inside a guard of its own file's path.
    let mut spellings: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for rel in closure.headers.values() {
        *spellings.entry(rel.as_str()).or_default() += 1;
    }
    for (include, rel) in &closure.headers {
        header_names.push(cstr(include.as_bytes(), include)?);
        let bytes = crate::foundation::fsutil::without_bom(&closure.files[rel]);
        if spellings[rel.as_str()] > 1 && pragma_once(bytes) {
            header_srcs.push(cstr(&guarded(include, rel, bytes), rel)?);
        } else {
            header_srcs.push(cstr(bytes, rel)?);
        }
    }
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
    let src_ptrs: Vec<*const c_char> = header_srcs.iter().map(|s| s.as_ptr()).collect();
    let opts: Vec<CString> = options(c)
        .into_iter()
        .map(|o| cstr(o.as_bytes(), "an option"))
        .collect::<Result<_, _>>()?;
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();

    // SAFETY: every pointer passed to NVRTC points into a CString or Vec that outlives the
    // program, and the program is destroyed on every path out of this block.
    unsafe {
        let mut prog: Program = std::ptr::null_mut();
        let r = (api.create)(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            name_ptrs.len() as i32,
            if src_ptrs.is_empty() {
                std::ptr::null()
            } else {
                src_ptrs.as_ptr()
            },
            if name_ptrs.is_empty() {
                std::ptr::null()
            } else {
                name_ptrs.as_ptr()
            },
        );
        if r != SUCCESS {
            return Err(CompileError::Call {
                call: "nvrtcCreateProgram",
                message: api.error_string(r),
            });
        }
        let compiled = (api.compile)(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        let log = repo_relative(&program_log(&api, prog), &closure.headers);
        let result = if compiled != SUCCESS {
            Err(CompileError::Rejected {
                log: if log.is_empty() {
                    api.error_string(compiled)
                } else {
                    log
                },
            })
        } else {
            program_outputs(&api, prog, &c.outputs).map(|outputs| Artifacts { outputs, log })
        };
        (api.destroy)(&mut prog);
        result
    }
}

/// A compilation log with each header named by its path in the repository: NVRTC names a
/// header as it was included (`h.cuh(2): error`), which says nothing about where it is when
/// an include directory found it (`include/h.cuh(2): error`).
fn repo_relative(log: &str, headers: &std::collections::BTreeMap<String, String>) -> String {
    let renamed = |line: &str| -> Option<String> {
        // The longest spelling that names the line's file: `a/h.cuh(2)` before `h.cuh(2)`.
        let (include, rel) = headers
            .iter()
            .filter(|(include, rel)| include != rel)
            .filter(|(include, _)| {
                line.strip_prefix(include.as_str())
                    .and_then(|r| r.strip_prefix('('))
                    .and_then(|r| r.split_once(')'))
                    .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
            .max_by_key(|(include, _)| include.len())?;
        Some(format!("{rel}{}", &line[include.len()..]))
    };
    log.lines()
        .map(|l| renamed(l).unwrap_or_else(|| l.to_string()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The program's compilation log, as text.
///
/// # Safety
/// `prog` is a live program of `api`.
unsafe fn program_log(api: &Api, prog: Program) -> String {
    // SAFETY: the buffer is as long as NVRTC says the log is, and `prog` is live.
    unsafe {
        let mut log_len = 0usize;
        (api.log_size)(prog, &mut log_len);
        let mut log = vec![0u8; log_len];
        if log_len > 0 {
            (api.log)(prog, log.as_mut_ptr().cast());
        }
        String::from_utf8_lossy(&log)
            .trim_end_matches('\0')
            .trim_end()
            .to_string()
    }
}

/// The outputs asked for, read from a compiled program.
///
/// # Safety
/// `prog` is a live, compiled program of `api`.
unsafe fn program_outputs(
    api: &Api,
    prog: Program,
    wanted: &[Output],
) -> Result<Vec<(Output, Vec<u8>)>, CompileError> {
    // SAFETY: each buffer is as long as NVRTC says the output is, and `prog` is live.
    unsafe {
        let mut outputs = Vec::new();
        let mut failure = None;
        for out in wanted {
            let (size_fn, get_fn) = match out {
                Output::Ptx => (api.ptx_size, api.ptx),
                Output::Cubin => (api.cubin_size, api.cubin),
                // Recipe validation refuses these for NVRTC; a recipe built some
                // other way still gets an answer, not a panic.
                Output::Fatbin | Output::Object => {
                    failure = Some(CompileError::NoOutput {
                        compiler: "NVRTC",
                        output: out.name(),
                        cause: "NVRTC writes only PTX and cubins".into(),
                    });
                    break;
                }
            };
            let mut n = 0usize;
            let r = size_fn(prog, &mut n);
            if r != SUCCESS || n == 0 {
                failure = Some(CompileError::NoOutput {
                    compiler: "NVRTC",
                    output: out.name(),
                    cause: api.error_string(r),
                });
                break;
            }
            let mut bytes = vec![0u8; n];
            get_fn(prog, bytes.as_mut_ptr().cast());
            // PTX comes NUL-terminated; the artifact is the text.
            if *out == Output::Ptx {
                while bytes.last() == Some(&0) {
                    bytes.pop();
                }
            }
            outputs.push((*out, bytes));
        }
        match failure {
            Some(f) => Err(f),
            None => Ok(outputs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header found through an include directory is named by its repository path in the
    /// log; the source, a header included by its path, and other lines stay as they are.
    #[test]
    fn log_lines_name_headers_by_their_repository_paths() {
        let headers: std::collections::BTreeMap<String, String> = [
            ("h.cuh".to_string(), "include/h.cuh".to_string()),
            ("a/h.cuh".to_string(), "lib/a/h.cuh".to_string()),
            ("k/same.h".to_string(), "k/same.h".to_string()),
        ]
        .into();
        let log = "h.cuh(2): error: x\na/h.cuh(10): warning: y\nk.cu(3): error: z\nk/same.h(1): note\nh.cuh: not a place\n  detected during instantiation";
        assert_eq!(
            repo_relative(log, &headers),
            "include/h.cuh(2): error: x\nlib/a/h.cuh(10): warning: y\nk.cu(3): error: z\nk/same.h(1): note\nh.cuh: not a place\n  detected during instantiation"
        );
    }
}
