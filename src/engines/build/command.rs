//! Builds by an arbitrary command (setup.py, CMake, make), with declared inputs and outputs.

use std::path::Path;

use super::CompileError;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::recipe::CommandBuild;

/// What a successful command build produced: each declared output with its bytes.
pub struct CommandArtifacts {
    /// Output path (relative) → bytes.
    pub outputs: Vec<(String, Vec<u8>)>,
    /// The command's stdout and stderr.
    pub log: String,
}

/// Runs the command at the project root and collects its declared outputs.
pub fn run(root: &Path, c: &CommandBuild) -> Result<CommandArtifacts, CompileError> {
    let cmd = Cmd::new(&c.argv[0])
        .args(&c.argv[1..])
        .current_dir(root)
        .keep_tail(crate::foundation::process::STEP_KEEP)
        .timeout(c.timeout);
    let out = match cmd.output() {
        Ok(o) => o,
        Err(ProcessError::Timeout { .. }) => {
            return Err(CompileError::Timeout {
                program: format!("`{}`", cmd.display()),
                after: c.timeout,
            });
        }
        Err(e) => return Err(CompileError::Process(e)),
    };
    let mut log = out.stdout_str();
    log.push_str(&out.stderr_str());
    let log = log.trim_end().to_string();
    if !out.status.success() {
        return Err(CompileError::Rejected {
            log: format!(
                "{log}\n`{}` {}",
                cmd.display(),
                crate::foundation::process::describe_status(out.status)
            )
            .trim_start()
            .to_string(),
        });
    }
    let mut outputs = Vec::new();
    for rel in &c.outputs {
        match std::fs::read(root.join(rel)) {
            Ok(bytes) => outputs.push((rel.clone(), bytes)),
            Err(_) => {
                return Err(CompileError::MissingOutput {
                    log,
                    path: rel.clone(),
                });
            }
        }
    }
    Ok(CommandArtifacts { outputs, log })
}
