//! `bundle::validate_record`, which every record from a bundle or a store passes before any
//! of its fields is used as a path, a key or a name: each refusal names the record, the
//! field and what is wrong with it.

use repro::keys::key_of;
use serde_json::{Value, json};

fn fixture() -> Value {
    serde_json::from_str(include_str!("../fixtures/records/result-recipe.json")).unwrap()
}

/// The refusal's message.
fn refused(kind: &str, id: &str, rec: &Value) -> String {
    match repro::bundle::validate_record(kind, id, rec) {
        Ok(_) => panic!("{kind} {id} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn records_that_are_not_objects_or_not_filed_under_a_key_are_refused() {
    let key = "ab".repeat(32);
    assert_eq!(
        refused("result", &key, &json!([1, 2])),
        "result abababababab: is not a JSON object"
    );
    assert_eq!(
        refused("build", "../../etc", &json!({})),
        "build ../../etc: `(file name)` is not a 64-digit hex key"
    );
}

#[test]
fn result_fields_are_checked_against_what_they_claim_to_be() {
    // The fixture is accepted as it is, under the ID its content hashes to.
    let good = fixture();
    let id = key_of(&good);
    assert!(repro::bundle::validate_record("result", &id, &good).is_ok());

    // A field of the wrong type: the record's shape is named.
    let mut rec = fixture();
    rec["samples"] = json!("many");
    let id = key_of(&rec);
    let msg = refused("result", &id, &rec);
    assert!(
        msg.starts_with(&format!("result {}: ", &id[..12])) && !msg.contains("(record)"),
        "{msg}"
    );
    assert!(
        msg.contains("samples") || msg.contains("invalid type"),
        "{msg}"
    );

    // Fields used as paths, keys and names.
    for (field, value, says) in [
        ("commit", "HEAD; rm -rf /", "not a 40-digit hex commit"),
        ("recipe", "../x", "not a recipe name"),
        ("recipe-path", "/etc/passwd", "not a relative path"),
        ("build-key", "xyz", "not a 64-digit hex key"),
        ("artifact", "xyz", "not a sha256"),
    ] {
        let mut rec = fixture();
        rec[field] = json!(value);
        let id = key_of(&rec);
        let msg = refused("result", &id, &rec);
        assert!(
            msg == format!("result {}: `{field}` is {value:?}, {says}", &id[..12]),
            "{field}: {msg}"
        );
    }

    // Content that does not hash to the ID it is filed under (an edit).
    let mut rec = fixture();
    rec["detail"] = json!("edited");
    assert_eq!(
        refused("result", &key_of(&fixture()), &rec),
        format!(
            "result {}: `(content)` does not hash to the result's ID",
            &key_of(&fixture())[..12]
        )
    );
}
