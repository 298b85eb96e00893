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
    &key[..key.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
