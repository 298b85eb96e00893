//! PyTorch extensions (`kind = "torch-extension"`): a Python module compiled from C++ and
//! CUDA sources against the headers and libraries of the PyTorch installed in the Python
//! environment (found from files, see [`crate::foundation::pyenv`]), with the host C++
//! compiler and nvcc, as `torch.utils.cpp_extension` would, but without its JIT and under a
//! key that covers PyTorch's ABI identity. After each build the module is imported in a
//! fresh interpreter (PyTorch first); a module that does not import is a failed build.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{BuildError, CompileError};
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::pyenv::{self, PyEnv, Torch};
use crate::foundation::recipe::TorchExtension;

/// The Python environment a torch extension builds for: `--python`, else repro.toml's,
/// else the active one; it must have PyTorch and Python's headers (and a CUDA build of
/// PyTorch for CUDA sources).
pub fn environment(
    recipe: &str,
    python: Option<&Path>,
    root: &Path,
    t: &TorchExtension,
) -> Result<PyEnv, BuildError> {
    let config = crate::foundation::config::load(root)?
        .python
        .interpreter_at(root);
    let var = |k: &str| std::env::var_os(k);
    let env = pyenv::locate(python, config.as_deref(), &var)
        .and_then(pyenv::describe)
        .map_err(|source| BuildError::Python {
            recipe: recipe.to_string(),
            source,
        })?;
    let problem = |what: TorchProblem| BuildError::Torch {
        recipe: recipe.to_string(),
        interpreter: env.located.interpreter.display().to_string(),
        problem: what,
    };
    let Some(torch) = &env.torch else {
        return Err(problem(TorchProblem::NotInstalled {
            prefix: env.prefix.display().to_string(),
        }));
    };
    if env.include_dir.is_none() && t.setup.is_none() {
        return Err(problem(TorchProblem::NoHeaders {
            version: env.version.clone(),
        }));
    }
    if t.has_cuda() && torch.cuda.is_none() {
        return Err(problem(TorchProblem::NoCuda {
            version: torch.version.clone(),
        }));
    }
    Ok(env)
}

/// What is wrong with the environment for a torch extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TorchProblem {
    /// No PyTorch in the environment.
    NotInstalled {
        /// The environment's prefix.
        prefix: String,
    },
    /// No `Python.h`.
    NoHeaders {
        /// The Python version.
        version: String,
    },
    /// A CPU-only PyTorch, and the recipe has CUDA sources.
    NoCuda {
        /// PyTorch's version.
        version: String,
    },
}

impl std::fmt::Display for TorchProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TorchProblem::NotInstalled { prefix } => {
                write!(f, "PyTorch is not installed in {prefix}")
            }
            TorchProblem::NoHeaders { version } => {
                write!(
                    f,
                    "the headers of Python {version} (Python.h) are not installed"
                )
            }
            TorchProblem::NoCuda { version } => write!(
                f,
                "PyTorch {version} is a CPU-only build, and the recipe has CUDA sources"
            ),
        }
    }
}

/// PyTorch's ABI identity, the part of a torch extension's key that the environment gives:
/// an extension built for one of these values may not load under another.
pub fn identity(env: &PyEnv) -> Value {
    let t = env.torch.as_ref();
    json!({
        "version": t.map(|t| t.version.clone()),
        "cuda": t.and_then(|t| t.cuda.clone()),
        "cxx11-abi": t.and_then(|t| t.cxx11_abi),
        "pybind11-abi": t.map(pybind11_abi),
        "python-abi": env.abi_tag,
        "ext-suffix": env.ext_suffix,
    })
}

/// The pybind11 internals id PyTorch was built with (`v4_gcc_libstdcpp_cxxabi1011`), from
/// the string pybind11 compiles into `libtorch_python.so`. An extension must be built with
/// the same, or objects cannot cross between it and PyTorch.
pub fn pybind11_abi(t: &Torch) -> String {
    crate::foundation::solib::find_in_section(
        &t.dir.join("lib/libtorch_python.so"),
        ".rodata",
        b"__pybind11_internals_",
    )
    .map(|s| s.trim_end_matches('_').to_string())
    .unwrap_or_else(|| "unknown".into())
}

/// The `-DPYBIND11_*` flags that give an extension PyTorch's pybind11 ABI
/// (`v4_gcc_libstdcpp_cxxabi1011` → compiler `_gcc`, stdlib `_libstdcpp`, ABI `_cxxabi1011`).
fn pybind11_flags(abi: &str) -> Vec<String> {
    let parts: Vec<&str> = abi.split('_').collect();
    match parts.as_slice() {
        [_, compiler, stdlib, build] => vec![
            format!("-DPYBIND11_COMPILER_TYPE=\"_{compiler}\""),
            format!("-DPYBIND11_STDLIB=\"_{stdlib}\""),
            format!("-DPYBIND11_BUILD_ABI=\"_{build}\""),
        ],
        _ => Vec::new(),
    }
}

/// The host C++ compiler: `CXX`, else `c++`.
pub fn host_cxx() -> PathBuf {
    std::env::var_os("CXX")
        .filter(|c| !c.is_empty())
        .map_or_else(|| PathBuf::from("c++"), PathBuf::from)
}

/// The host C++ compiler's identity (its `--version` banner), for the key.
pub fn cxx_identity(cxx: &Path) -> Result<Value, BuildError> {
    let out = Cmd::new(cxx)
        .arg("--version")
        .timeout(std::time::Duration::from_secs(20))
        .run()
        .map_err(|e| BuildError::NoCompiler {
            compiler: "c++",
            reason: format!("cannot run the host C++ compiler {}: {e}", cxx.display()),
        })?;
    let banner = out
        .stdout_str()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    Ok(json!({
        "name": "c++",
        "version": crate::foundation::version::version_token(&banner).unwrap_or_default(),
        "banner": banner,
    }))
}

/// The module's file name: `MODULE.cpython-311-x86_64-linux-gnu.so`.
pub fn file_name(t: &TorchExtension, env: &PyEnv) -> String {
    format!("{}{}", t.module, env.ext_suffix)
}

/// Builds the module and imports it; the output is its file name and bytes.
pub fn build(
    root: &Path,
    t: &TorchExtension,
    env: &PyEnv,
    cxx: &Path,
    nvcc: Option<&Path>,
) -> super::Compiled {
    let (bytes, mut log) = match &t.setup {
        Some(setup) => run_setup(root, t, env, setup)?,
        None => compile(root, t, env, cxx, nvcc)?,
    };
    let name = file_name(t, env);
    let said = import_check(env, &t.module, &name, &bytes, &t.entries)?;
    if !said.is_empty() {
        log.push_str(&format!("\n{said}"));
    }
    Ok((vec![(name, bytes)], log.trim().to_string()))
}

/// Runs one compiler or linker command; its messages are the build's log.
fn run(cmd: &Cmd, program: &str, timeout: std::time::Duration) -> Result<String, CompileError> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(o.stderr_str().trim_end().to_string()),
        Ok(o) => {
            let mut msg = o.stderr_str();
            msg.push_str(&o.stdout_str());
            Err(CompileError::Rejected {
                log: format!(
                    "{}\n{} {}",
                    msg.trim_end(),
                    cmd.display(),
                    crate::foundation::process::describe_status(o.status)
                )
                .trim_start()
                .to_string(),
            })
        }
        Err(ProcessError::Timeout { .. }) => Err(CompileError::Timeout {
            program: program.into(),
            after: timeout,
        }),
        Err(e) => Err(CompileError::Process(e)),
    }
}

/// Compiles each source (C++ with the host compiler, CUDA with nvcc) at the project root
/// with relative paths, and links the module against PyTorch's libraries.
fn compile(
    root: &Path,
    t: &TorchExtension,
    env: &PyEnv,
    cxx: &Path,
    nvcc: Option<&Path>,
) -> Result<(Vec<u8>, String), CompileError> {
    let torch = env.torch.as_ref().expect("checked by environment()");
    let tmp = tempfile::tempdir().map_err(|cause| CompileError::TempDir { cause })?;
    let inc = torch.dir.join("include");
    let mut common: Vec<String> = vec![
        format!("-I{}", inc.display()),
        format!("-I{}", inc.join("torch/csrc/api/include").display()),
    ];
    if let Some(py) = &env.include_dir {
        common.push(format!("-I{}", py.display()));
    }
    // C++ sources of a CUDA extension include PyTorch's CUDA headers, which include the
    // CUDA runtime's: the host compiler gets the toolkit's include directory beside nvcc.
    if t.has_cuda()
        && let Some(dir) = nvcc.and_then(|n| Some(n.parent()?.parent()?.join("include")))
        && dir.is_dir()
    {
        common.push(format!("-I{}", dir.display()));
    }
    common.extend(t.include_dirs.iter().map(|d| format!("-I{d}")));
    common.push(format!("-DTORCH_EXTENSION_NAME={}", t.module));
    common.push("-DTORCH_API_INCLUDE_EXTENSION_H".into());
    if let Some(abi) = torch.cxx11_abi {
        common.push(format!("-D_GLIBCXX_USE_CXX11_ABI={}", u8::from(abi)));
    }
    common.extend(pybind11_flags(&pybind11_abi(torch)));
    let mut log = String::new();
    let mut objects = Vec::new();
    for (i, src) in t.sources.iter().enumerate() {
        let obj = tmp.path().join(format!("{i}.o"));
        let cmd = if src.ends_with(".cu") {
            let nvcc = nvcc.ok_or_else(|| CompileError::Rejected {
                log: format!("{src} is CUDA and no nvcc was found"),
            })?;
            Cmd::new(nvcc)
                .args(&common)
                .args([
                    "-c",
                    "-std=c++17",
                    "-O3",
                    "-Xcompiler",
                    "-fPIC",
                    "--expt-relaxed-constexpr",
                    "-D__CUDA_NO_HALF_OPERATORS__",
                    "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
                    "-D__CUDA_NO_HALF2_OPERATORS__",
                ])
                .args(t.targets.iter().map(|g| gencode(g)))
                .args(&t.nvcc_options)
        } else {
            Cmd::new(cxx)
                .args(&common)
                .args(["-c", "-std=c++17", "-O2", "-fPIC"])
                .args(&t.options)
        };
        let cmd = cmd
            .arg(src)
            .arg("-o")
            .arg(&obj)
            .current_dir(root)
            .timeout(t.timeout);
        let program = if src.ends_with(".cu") { "nvcc" } else { "c++" };
        push_log(&mut log, &run(&cmd, program, t.timeout)?);
        objects.push(obj);
    }
    let out = tmp.path().join(file_name(t, env));
    let lib = torch.dir.join("lib");
    let mut link = Cmd::new(cxx)
        .arg("-shared")
        .args(&objects)
        .arg(format!("-L{}", lib.display()))
        .args(["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]);
    if t.has_cuda() {
        link = link.args(["-lc10_cuda", "-ltorch_cuda"]);
        if let Some(dir) = nvcc.and_then(cuda_lib_dir) {
            link = link.arg(format!("-L{}", dir.display()));
        }
        link = link.arg("-lcudart");
    }
    let link = link
        .args(&t.options)
        .arg("-o")
        .arg(&out)
        .current_dir(root)
        .timeout(t.timeout);
    push_log(&mut log, &run(&link, "c++", t.timeout)?);
    let bytes = std::fs::read(&out).map_err(|e| CompileError::NoOutput {
        compiler: "c++",
        output: "extension module",
        cause: e.to_string(),
    })?;
    Ok((bytes, log))
}

fn push_log(log: &mut String, more: &str) {
    if !more.is_empty() {
        log.push_str(more);
        log.push('\n');
    }
}

/// `sm_90` → `-gencode=arch=compute_90,code=sm_90`; `compute_90` → PTX for it.
fn gencode(target: &str) -> String {
    let virt = target.replacen("sm_", "compute_", 1);
    format!("-gencode=arch={virt},code={target}")
}

/// The CUDA runtime's library directory beside an nvcc (`bin/../lib64` or `bin/../lib`).
fn cuda_lib_dir(nvcc: &Path) -> Option<PathBuf> {
    let top = nvcc.parent()?.parent()?;
    ["lib64", "lib"]
        .iter()
        .map(|d| top.join(d))
        .find(|d| d.join("libcudart.so").exists() || d.is_dir())
}

/// Runs the project's `setup.py build_ext --inplace` with the environment's interpreter and
/// takes the module it leaves beside setup.py (or at the root).
fn run_setup(
    root: &Path,
    t: &TorchExtension,
    env: &PyEnv,
    setup: &str,
) -> Result<(Vec<u8>, String), CompileError> {
    let dir = root.join(Path::new(setup).parent().unwrap_or(Path::new("")));
    let script = Path::new(setup)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cmd = Cmd::new(&env.located.interpreter)
        .arg(&script)
        .args(["build_ext", "--inplace"])
        .current_dir(&dir)
        .timeout(t.timeout);
    let log = run(&cmd, &format!("`{}`", cmd.display()), t.timeout)?;
    let wanted = file_name(t, env);
    let found = [dir.join(&wanted), root.join(&wanted)]
        .into_iter()
        .find(|p| p.is_file());
    match found.map(std::fs::read) {
        Some(Ok(bytes)) => Ok((bytes, log)),
        _ => Err(CompileError::MissingOutput { log, path: wanted }),
    }
}

/// The script of the import check: PyTorch first, then the module from the directory it
/// was written to; every entry must be a function of it.
const IMPORT_CHECK: &str = r#"import sys
dirname, module, entries = sys.argv[1], sys.argv[2], sys.argv[3:]
import torch
sys.path.insert(0, dirname)
import importlib
m = importlib.import_module(module)
missing = [e for e in entries if not callable(getattr(m, e, None))]
if missing:
    have = sorted(n for n in dir(m) if not n.startswith('_'))
    sys.stderr.write('module %s has no function %s (it has: %s)\n' % (module, ', '.join(missing), ', '.join(have) or 'nothing'))
    sys.exit(3)
"#;

/// Imports the built module in a fresh interpreter of the environment, PyTorch first.
/// `Err` carries the loader's message (an `ImportError` with its undefined symbol).
pub fn import_check(
    env: &PyEnv,
    module: &str,
    file: &str,
    bytes: &[u8],
    entries: &[String],
) -> Result<String, CompileError> {
    let tmp = tempfile::tempdir().map_err(|cause| CompileError::TempDir { cause })?;
    std::fs::write(tmp.path().join(file), bytes)
        .map_err(|cause| CompileError::TempDir { cause })?;
    let timeout = std::time::Duration::from_secs(300);
    let cmd = Cmd::new(&env.located.interpreter)
        .args(["-c", IMPORT_CHECK])
        .arg(tmp.path())
        .arg(module)
        .args(entries)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(tmp.path())
        .timeout(timeout);
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(format!(
            "imported {module} in {} (PyTorch first)",
            env.located.interpreter.display()
        )),
        Ok(o) => Err(CompileError::Import {
            module: module.to_string(),
            interpreter: env.located.interpreter.display().to_string(),
            message: loader_message(&o.stderr_str()),
        }),
        Err(ProcessError::Timeout { .. }) => Err(CompileError::Timeout {
            program: format!("importing {module}"),
            after: timeout,
        }),
        Err(e) => Err(CompileError::Process(e)),
    }
}

/// The line of a traceback that says what went wrong (`ImportError: …: undefined symbol:
/// …`), or the whole tail when there is no such line.
pub fn loader_message(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.contains("Error:") || l.starts_with("module "))
        .map_or_else(
            || {
                lines[lines.len().saturating_sub(5)..]
                    .join("\n")
                    .trim()
                    .to_string()
            },
            |l| l.trim().to_string(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pybind11_flags_follow_torchs_internals_id() {
        assert_eq!(
            pybind11_flags("pybind11_internals_v4_gcc_libstdcpp_cxxabi1011"),
            Vec::<String>::new(),
            "only the id without its prefix is split"
        );
        assert_eq!(
            pybind11_flags("v4_gcc_libstdcpp_cxxabi1011"),
            [
                "-DPYBIND11_COMPILER_TYPE=\"_gcc\"",
                "-DPYBIND11_STDLIB=\"_libstdcpp\"",
                "-DPYBIND11_BUILD_ABI=\"_cxxabi1011\""
            ]
        );
    }

    #[test]
    fn gencode_flags() {
        assert_eq!(gencode("sm_90"), "-gencode=arch=compute_90,code=sm_90");
        assert_eq!(
            gencode("compute_90"),
            "-gencode=arch=compute_90,code=compute_90"
        );
    }

    #[test]
    fn the_loader_message_is_the_error_line() {
        let tb = "Traceback (most recent call last):\n  File \"<string>\", line 6\nImportError: /tmp/x/ext.so: undefined symbol: _ZN3c104impl3cow11cow_deleterEPv\n";
        assert_eq!(
            loader_message(tb),
            "ImportError: /tmp/x/ext.so: undefined symbol: _ZN3c104impl3cow11cow_deleterEPv"
        );
        assert_eq!(loader_message("killed\n"), "killed");
    }
}
