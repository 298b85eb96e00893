//! What a failure knows about itself: its exit code and a hint.
//!
//! Modules return their own typed errors (thiserror enums with data; never
//! `Result<_, String>`, and no anyhow below the app layer: `tests/layering.rs` checks).
//! Each of those that a user can cause implements [`Diagnose`] next to its definition,
//! saying which exit code it maps to and what to try next. The app layer wraps them in
//! `anyhow` with context naming the object, and `app::report` (the one place that turns
//! errors into messages and exit codes) prints them.

use std::fmt;

use crate::foundation::exit;

/// What a user-facing error knows about itself.
pub trait Diagnose: std::error::Error {
    /// The exit code this error should end the process with.
    fn exit_code(&self) -> u8;
    /// What the user could do about it, if anything useful can be said.
    fn hint(&self) -> Option<String> {
        None
    }
}

/// An error with its causes, joined by ": " (what `{:#}` prints for an `anyhow::Error`),
/// for messages that carry a whole chain as text (a step's detail, a job's result).
pub fn chain_text(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// A user-facing error raised directly by a command: a message, a code and a hint.
#[derive(Debug)]
pub struct UserError {
    message: String,
    code: u8,
    hint: Option<String>,
}

impl UserError {
    /// A usage or input error (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: exit::USAGE,
            hint: None,
        }
    }

    /// An error with an explicit exit code.
    pub fn with_code(code: u8, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code,
            hint: None,
        }
    }

    /// Adds a hint telling the user what to do.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UserError {}

impl Diagnose for UserError {
    fn exit_code(&self) -> u8 {
        self.code
    }
    fn hint(&self) -> Option<String> {
        self.hint.clone()
    }
}

/// A typed error with the hint of the command that met it: the message, the causes and the
/// exit code stay the error's own (a caller can still tell it apart by type); only the hint
/// is the caller's, which knows what to point at (`repro log` for an unknown ID, say).
#[derive(Debug)]
pub struct Hinted {
    error: Box<dyn Diagnose + Send + Sync>,
    hint: String,
}

impl Hinted {
    /// `error`, with `hint` in place of its own.
    pub fn new(error: impl Diagnose + Send + Sync + 'static, hint: impl Into<String>) -> Self {
        Self {
            error: Box::new(error),
            hint: hint.into(),
        }
    }
}

impl fmt::Display for Hinted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for Hinted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl Diagnose for Hinted {
    fn exit_code(&self) -> u8 {
        self.error.exit_code()
    }
    fn hint(&self) -> Option<String> {
        Some(self.hint.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn chain_text_joins_every_cause() {
        let e = Outer(std::io::Error::other("inner"));
        assert_eq!(chain_text(&e), "outer: inner");
        assert_eq!(chain_text(&std::io::Error::other("alone")), "alone");
    }
}
