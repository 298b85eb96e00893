//! Limits a user may raise or lower through `REPRO_*` environment variables (the size of
//! a bundle, the points of a sweep, a buffer's bytes).
//!
//! A value that is set but is not a whole number (`abc`, `-1`, `1e9`) is an error naming
//! the variable and the value: ignoring it would leave the default in force while the
//! user believes their limit holds. An unset or empty variable means the default.

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// A `REPRO_*` limit set to something that is not a whole number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is not a whole number")]
pub struct LimitError {
    /// The variable.
    pub name: String,
    /// What it was set to.
    pub value: String,
}

impl Diagnose for LimitError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        Some(format!(
            "set {} to a whole number such as 1000000 (no sign, unit or exponent), or unset it for the default",
            self.name
        ))
    }
}

/// The limit `name` sets, or `default` where it is unset or empty.
pub fn from_env(name: &str, default: u64) -> Result<u64, LimitError> {
    parse(name, std::env::var_os(name).as_deref(), default)
}

/// [`from_env`] over a given value, for tests.
fn parse(name: &str, value: Option<&std::ffi::OsStr>, default: u64) -> Result<u64, LimitError> {
    let Some(raw) = value.filter(|v| !v.is_empty()) else {
        return Ok(default);
    };
    let err = || LimitError {
        name: name.to_string(),
        value: raw.to_string_lossy().into_owned(),
    };
    let text = raw.to_str().ok_or_else(err)?.trim();
    // `u64::from_str` takes a leading `+`; a limit is written as plain digits.
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    text.parse().map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn whole_numbers_are_read_and_anything_else_is_named() {
        let p = |v: Option<&str>| parse("REPRO_X", v.map(OsStr::new), 7);
        assert_eq!(p(None), Ok(7));
        assert_eq!(p(Some("")), Ok(7));
        assert_eq!(p(Some("42")), Ok(42));
        assert_eq!(p(Some(" 42\n")), Ok(42));
        assert_eq!(p(Some("0")), Ok(0));
        for bad in [
            "abc",
            "-1",
            "+5",
            "1e9",
            "1.5",
            "1GiB",
            "99999999999999999999999",
            " ",
        ] {
            let e = p(Some(bad)).unwrap_err();
            assert_eq!(e.name, "REPRO_X");
            assert_eq!(e.value, bad);
            assert!(e.to_string().contains("REPRO_X="), "{e}");
            assert_eq!(e.exit_code(), exit::USAGE);
        }
    }
}
