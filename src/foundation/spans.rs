//! Turning byte offsets in a TOML file into the line and column a user can find.

use std::ops::Range;

/// The 1-based line and column of a byte offset in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The start of a span as line and column, or the file's start when there is no span.
pub fn locate(text: &str, span: Option<Range<usize>>) -> (usize, usize) {
    span.map_or((1, 1), |s| line_col(text, s.start))
}

/// A TOML scalar as canonical text; `None` for tables and arrays.
pub fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based() {
        let t = "a = 1\nbb = ü2\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, 6), (2, 1));
        assert_eq!(line_col(t, 11), (2, 6));
        assert_eq!(line_col(t, 1000), (3, 1));
    }
}

/// A TOML parser's message in the user's terms: the names of repro's internal structs
/// (`expected struct RawRule`) mean "a table" to someone editing the file.
pub fn user_message(e: &toml::de::Error) -> String {
    let m = e.message().trim();
    // `invalid type: integer `99999999999999999999` as i128, expected any valid TOML value`
    let big = regex_lite::Regex::new(r"^invalid type: integer `([-0-9]+)` as i128")
        .expect("a valid regex");
    if let Some(c) = big.captures(m) {
        return format!(
            "integer `{}` is out of range (TOML integers are 64-bit: at most 9223372036854775807)",
            &c[1]
        );
    }
    let re = regex_lite::Regex::new(r"struct (Raw[A-Za-z]*|Spanned)").expect("a valid regex");
    re.replace_all(m, "a table").into_owned()
}

/// [`user_message`], naming what the error's span covers in `text` where the parser's
/// message does not: the key of a `duplicate key`.
pub fn user_message_in(e: &toml::de::Error, text: &str) -> String {
    let m = user_message(e);
    if m == "duplicate key"
        && let Some(key) = e.span().and_then(|s| text.get(s))
    {
        let key: String = key
            .chars()
            .take(64)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        return format!("duplicate key `{key}`: each key (and table) may appear once");
    }
    m
}

#[cfg(test)]
mod message_tests {
    #[test]
    fn internal_struct_names_are_not_shown() {
        #[derive(Debug, serde::Deserialize)]
        #[expect(dead_code, reason = "only the error matters")]
        struct RawRule {
            policy: String,
        }
        let e = toml::from_str::<std::collections::BTreeMap<String, RawRule>>("a = 5").unwrap_err();
        let m = super::user_message(&e);
        assert!(
            !m.contains("RawRule") && m.contains("expected a table"),
            "{m}"
        );
    }

    #[test]
    fn duplicate_keys_and_huge_integers_are_named() {
        let t = "a = 1\nb = 2\na = 3\n";
        let e = toml::from_str::<toml::Value>(t).unwrap_err();
        assert_eq!(
            super::user_message_in(&e, t),
            "duplicate key `a`: each key (and table) may appear once"
        );
        let t = "[x]\ny = 1\n[x]\nz = 2\n";
        let e = toml::from_str::<toml::Value>(t).unwrap_err();
        assert!(super::user_message_in(&e, t).starts_with("duplicate key `x`"));
        let t = "schema = 99999999999999999999\n";
        let e = toml::from_str::<toml::Value>(t).unwrap_err();
        assert!(
            super::user_message_in(&e, t)
                .starts_with("integer `99999999999999999999` is out of range"),
        );
    }
}
