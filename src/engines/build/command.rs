//! Builds by an arbitrary command (setup.py, CMake, make), with declared inputs and outputs.

use std::path::Path;

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
pub fn run(root: &Path, c: &CommandBuild) -> Result<CommandArtifacts, String> {
    let cmd = Cmd::new(&c.argv[0])
        .args(&c.argv[1..])
        .current_dir(root)
        .timeout(c.timeout);
    let out = match cmd.output() {
        Ok(o) => o,
        Err(ProcessError::Timeout { .. }) => {
            return Err(format!(
                "`{}` timed out after {}",
                cmd.display(),
                humantime::format_duration(c.timeout)
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut log = out.stdout_str();
    log.push_str(&out.stderr_str());
    let log = log.trim_end().to_string();
    if !out.status.success() {
        return Err(format!(
            "{log}\n`{}` {}",
            cmd.display(),
            crate::foundation::process::describe_status(out.status)
        )
        .trim_start()
        .to_string());
    }
    let mut outputs = Vec::new();
    for rel in &c.outputs {
        match std::fs::read(root.join(rel)) {
            Ok(bytes) => outputs.push((rel.clone(), bytes)),
            Err(_) => {
                return Err(format!(
                    "{log}\nthe command succeeded but did not produce the declared output {rel}"
                )
                .trim_start()
                .to_string());
            }
        }
    }
    Ok(CommandArtifacts { outputs, log })
}
