//! Compilation with nvcc, as a child process run at the project root with relative paths.

use std::path::Path;
use std::time::Duration;

use super::CompileError;
use super::nvrtc::Artifacts;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::recipe::{Compile, Output};

/// How long one nvcc invocation may take.
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// The flag that makes nvcc write `out`.
fn output_flag(out: Output) -> &'static str {
    match out {
        Output::Ptx => "-ptx",
        Output::Cubin => "-cubin",
        Output::Fatbin => "-fatbin",
        Output::Object => "-c",
    }
}

/// The architecture options for one output. One target: `-arch` (PTX for the target's
/// virtual architecture). Several targets, for an output that holds them all (a fat binary,
/// an object): one `-gencode` per target, machine code for a real target and PTX for a
/// virtual one, in the recipe's order.
pub fn arch_args(out: Output, c: &Compile) -> Vec<String> {
    let virtual_of = |t: &str| t.replacen("sm_", "compute_", 1);
    if c.targets.len() > 1 && out.holds_every_target() {
        return c
            .targets
            .iter()
            .flat_map(|t| {
                [
                    "-gencode".to_string(),
                    format!("arch={},code={t}", virtual_of(t)),
                ]
            })
            .collect();
    }
    match out {
        // PTX is for the virtual architecture of the target.
        Output::Ptx => vec![format!("-arch={}", virtual_of(&c.target))],
        _ => vec![format!("-arch={}", c.target)],
    }
}

/// nvcc chooses a file's language by its extension and compiles only a `.cu` file as CUDA
/// (a header, `.cuh` or `.h`, is "Don't know what to do with"): kernels that live in any
/// other file are compiled as CUDA by saying so. A `.cu` source gets no option, as before.
pub fn language_args(source: &str) -> &'static [&'static str] {
    match Path::new(source).extension().and_then(|e| e.to_str()) {
        Some("cu") => &[],
        _ => &["-x", "cu"],
    }
}

/// Runs nvcc once per requested output. `Err` carries the compiler's messages.
pub fn compile(nvcc: &Path, root: &Path, c: &Compile) -> Result<Artifacts, CompileError> {
    let tmp = tempfile::tempdir().map_err(|cause| CompileError::TempDir { cause })?;
    let mut outputs = Vec::new();
    let mut log = String::new();
    for out in &c.outputs {
        let file = tmp.path().join(format!("out.{}", out.name()));
        let mut cmd = Cmd::new(nvcc)
            .current_dir(root)
            .arg(output_flag(*out))
            .args(arch_args(*out, c));
        cmd = cmd.args(c.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        cmd = cmd.args(c.include_dirs.iter().map(|d| format!("-I{d}")));
        cmd = cmd
            .args(&c.options)
            .args(language_args(&c.source))
            .arg("-o")
            .arg(&file)
            .arg(&c.source)
            .timeout(TIMEOUT);
        match cmd.output() {
            Ok(o) if o.status.success() => {
                let said = o.stderr_str();
                if !said.trim().is_empty() {
                    if !log.is_empty() {
                        log.push('\n');
                    }
                    log.push_str(said.trim_end());
                }
                let bytes = std::fs::read(&file).map_err(|e| CompileError::NoOutput {
                    compiler: "nvcc",
                    output: out.name(),
                    cause: e.to_string(),
                })?;
                outputs.push((*out, bytes));
            }
            Ok(o) => {
                let mut msg = o.stderr_str();
                msg.push_str(&o.stdout_str());
                return Err(CompileError::Rejected {
                    log: format!(
                        "{}\n{} {}",
                        msg.trim_end(),
                        cmd.display(),
                        crate::foundation::process::describe_status(o.status)
                    ),
                });
            }
            Err(ProcessError::Timeout { .. }) => {
                return Err(CompileError::Timeout {
                    program: "nvcc".into(),
                    after: TIMEOUT,
                });
            }
            Err(e) => return Err(CompileError::Process(e)),
        }
    }
    Ok(Artifacts { outputs, log })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile_of(targets: &[&str], outputs: &[Output]) -> Compile {
        Compile {
            source: "k.cu".into(),
            entries: vec![],
            target: targets[0].into(),
            outputs: outputs.to_vec(),
            options: vec![],
            defines: Default::default(),
            env_defines: Default::default(),
            include_dirs: vec![],
            toolchain: None,
            targets: targets.iter().map(|t| t.to_string()).collect(),
        }
    }

    #[test]
    fn a_source_that_is_not_a_cu_file_is_compiled_as_cuda() {
        assert!(language_args("kernels/k.cu").is_empty());
        for source in [
            "src/kernels/1_naive.cuh",
            "k.h",
            "k.hpp",
            "k.cpp",
            "k.inl",
            "k",
        ] {
            assert_eq!(language_args(source), ["-x", "cu"], "{source}");
        }
    }

    #[test]
    fn one_gencode_per_target_for_outputs_that_hold_them_all() {
        let c = compile_of(&["sm_89", "sm_90a", "compute_100"], &[Output::Fatbin]);
        assert_eq!(
            arch_args(Output::Fatbin, &c),
            [
                "-gencode",
                "arch=compute_89,code=sm_89",
                "-gencode",
                "arch=compute_90a,code=sm_90a",
                "-gencode",
                "arch=compute_100,code=compute_100"
            ]
        );
        assert_eq!(arch_args(Output::Object, &c).len(), 6);
        // One target keeps the -arch it always had, so existing artifacts do not change.
        let one = compile_of(&["sm_90"], &[Output::Fatbin, Output::Ptx]);
        assert_eq!(arch_args(Output::Fatbin, &one), ["-arch=sm_90"]);
        assert_eq!(arch_args(Output::Ptx, &one), ["-arch=compute_90"]);
        assert_eq!(output_flag(Output::Object), "-c");
    }
}
