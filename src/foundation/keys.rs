//! Canonical hashing: every stored thing is named by the sha256 of a canonical
//! serialisation of its inputs.
//!
//! Canonical means: JSON with object keys sorted at every level, no insignificant
//! whitespace, and (by the callers' discipline) no timestamps and no absolute paths of this
//! machine. The same inputs give the same key on any machine, in any checkout.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical bytes of a JSON value: keys sorted recursively, compact.
pub fn canonical(v: &Value) -> Vec<u8> {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                // serde_json's map keeps insertion order when `preserve_order` is on (a
                // dependency may turn it on); inserting in sorted order is canonical either way.
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_vec(&sorted(v)).expect("a JSON value always serialises")
}

/// The key of a JSON value: sha256 of its canonical bytes, in hex.
pub fn key_of(v: &Value) -> String {
    sha256_hex(&canonical(v))
}

/// The sha256 of bytes, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A key shortened for display (12 hex digits, like git's short hashes but longer).
pub fn short(key: &str) -> &str {
    // By characters, not bytes: a key read from a hostile record may not be hex at all.
    match key.char_indices().nth(12) {
        Some((i, _)) => &key[..i],
        None => key,
    }
}

/// Whether `s` is a key or sha256 digest as repro writes them: 64 lowercase hex digits.
pub fn is_key(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `s` is a full git commit ID: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
pub fn is_commit(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `s` is a relative, normalised, `/`-separated path that stays below its base:
/// no empty, `.` or `..` component, no leading `/`, no backslash or control character.
pub fn is_relative_path(s: &str) -> bool {
    !s.is_empty()
        && !s.chars().any(|c| c.is_control() || c == '\\')
        && s.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Whether `s` can name a recipe (`recipes/NAME.toml`) or a store file: a non-empty
/// run of letters, digits, `_`, `-` and `.`, not starting with a dot.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validators_accept_what_repro_writes_and_nothing_else() {
        let key = "a".repeat(64);
        assert!(is_key(&key) && !is_key(&"A".repeat(64)) && !is_key("abc"));
        assert!(is_commit(&"0f".repeat(20)) && !is_commit("../x") && !is_commit(&"g".repeat(40)));
        for good in ["a", "src/k.cu", "a.b/c"] {
            assert!(is_relative_path(good), "{good}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a\\b",
            "a\nb",
        ] {
            assert!(!is_relative_path(bad), "{bad:?}");
        }
        assert!(
            is_name("flash_attention")
                && !is_name("../x")
                && !is_name("a/b")
                && !is_name(".hidden")
        );
        assert_eq!(short("ééééééééééééééé"), "éééééééééééé");
    }

    #[test]
    fn key_order_does_not_matter_but_content_does() {
        let a = json!({"b": 1, "a": {"y": [1, 2], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, 2]}, "b": 1});
        assert_eq!(key_of(&a), key_of(&b));
        assert_eq!(canonical(&a), br#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_ne!(
            key_of(&a),
            key_of(&json!({"a": {"x": "s", "y": [2, 1]}, "b": 1}))
        );
    }
}
