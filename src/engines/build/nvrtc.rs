//! In-process compilation with NVRTC (through cudarc).
//!
//! Headers are handed to NVRTC in memory under the names the sources include them by, and
//! the program is named by its repository-relative path, so no absolute path of this
//! machine can reach the compiler: two checkouts at different paths give identical bytes.

use std::ffi::{CStr, CString, c_char};

use cudarc::nvrtc::sys::{self, nvrtcResult};

use super::inputs::Closure;
use crate::foundation::recipe::{Compile, Output};

/// NVRTC's pair of calls for one output: its size, then its bytes.
type Getter = (
    unsafe fn(sys::nvrtcProgram, *mut usize) -> nvrtcResult,
    unsafe fn(sys::nvrtcProgram, *mut c_char) -> nvrtcResult,
);

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

fn error_string(r: nvrtcResult) -> String {
    // SAFETY: nvrtcGetErrorString returns a static string for any result code.
    unsafe {
        CStr::from_ptr(sys::nvrtcGetErrorString(r))
            .to_string_lossy()
            .into_owned()
    }
}

/// Compiles `c.source` with the headers of `closure`. `Err` carries the compiler's log.
pub fn compile(c: &Compile, closure: &Closure) -> Result<Artifacts, String> {
    crate::engines::toolchain::nvrtc_for_cudarc()?;
    let cstr =
        |s: &[u8], what: &str| CString::new(s).map_err(|_| format!("{what} contains a NUL byte"));
    let src = cstr(&closure.files[&c.source], &c.source)?;
    let name = cstr(c.source.as_bytes(), "the source path")?;
    let mut header_names = Vec::new();
    let mut header_srcs = Vec::new();
    for (include, rel) in &closure.headers {
        header_names.push(cstr(include.as_bytes(), include)?);
        header_srcs.push(cstr(&closure.files[rel], rel)?);
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
        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        let r = sys::nvrtcCreateProgram(
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
        if r != nvrtcResult::NVRTC_SUCCESS {
            return Err(format!("nvrtcCreateProgram failed: {}", error_string(r)));
        }
        let compiled = sys::nvrtcCompileProgram(prog, opt_ptrs.len() as i32, opt_ptrs.as_ptr());
        let mut log_len = 0usize;
        sys::nvrtcGetProgramLogSize(prog, &mut log_len);
        let mut log = vec![0u8; log_len];
        if log_len > 0 {
            sys::nvrtcGetProgramLog(prog, log.as_mut_ptr().cast());
        }
        let log = String::from_utf8_lossy(&log)
            .trim_end_matches('\0')
            .trim_end()
            .to_string();
        let result = if compiled != nvrtcResult::NVRTC_SUCCESS {
            Err(if log.is_empty() {
                error_string(compiled)
            } else {
                log
            })
        } else {
            let mut outputs = Vec::new();
            let mut failure = None;
            for out in &c.outputs {
                let (size_fn, get_fn): Getter = match out {
                    Output::Ptx => (sys::nvrtcGetPTXSize, sys::nvrtcGetPTX),
                    Output::Cubin => (sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN),
                    Output::Fatbin => unreachable!("recipes never ask NVRTC for a fatbin"),
                };
                let mut n = 0usize;
                let r = size_fn(prog, &mut n);
                if r != nvrtcResult::NVRTC_SUCCESS || n == 0 {
                    failure = Some(format!(
                        "NVRTC produced no {}: {}",
                        out.name(),
                        error_string(r)
                    ));
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
                None => Ok(Artifacts { outputs, log }),
            }
        };
        sys::nvrtcDestroyProgram(&mut prog);
        result
    }
}
