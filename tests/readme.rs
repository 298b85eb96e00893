//! The README documents every exit code and every fingerprint field.

use repro::{exit, fields};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

#[test]
fn every_exit_code_is_documented() {
    let text = readme();
    for (code, meaning) in exit::ALL {
        assert!(
            text.contains(&format!("| {code} | {meaning} |")),
            "exit code {code} is not in the README"
        );
    }
}

#[test]
fn every_field_is_documented() {
    let text = readme();
    for spec in fields::SPECS {
        assert!(
            text.contains(&format!("| `{}` |", spec.key)),
            "{} is not in the README",
            spec.key
        );
    }
}
