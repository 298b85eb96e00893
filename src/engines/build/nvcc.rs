//! Compilation with nvcc, as a child process run at the project root with relative paths.

use std::path::Path;
use std::time::Duration;

use super::CompileError;
use super::nvrtc::Artifacts;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::recipe::{Compile, Output};

/// How long one nvcc invocation may take.
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// Runs nvcc once per requested output. `Err` carries the compiler's messages.
pub fn compile(nvcc: &Path, root: &Path, c: &Compile) -> Result<Artifacts, CompileError> {
    let tmp = tempfile::tempdir().map_err(|cause| CompileError::TempDir { cause })?;
    let mut outputs = Vec::new();
    let mut log = String::new();
    for out in &c.outputs {
        let file = tmp.path().join(format!("out.{}", out.name()));
        let arch = match out {
            // PTX is for the virtual architecture of the target.
            Output::Ptx => format!("-arch={}", c.target.replacen("sm_", "compute_", 1)),
            _ => format!("-arch={}", c.target),
        };
        let mut cmd = Cmd::new(nvcc)
            .current_dir(root)
            .arg(format!("-{}", out.name()))
            .arg(arch);
        cmd = cmd.args(c.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        cmd = cmd.args(c.include_dirs.iter().map(|d| format!("-I{d}")));
        cmd = cmd
            .args(&c.options)
            .arg("-o")
            .arg(&file)
            .arg(&c.source)
            .timeout(TIMEOUT);
        match cmd.output() {
            Ok(o) if o.status.success() => {
                log.push_str(o.stderr_str().trim_end());
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
