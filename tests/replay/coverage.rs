//! `repro replay --bundle` of a bundle whose files do not match its MANIFEST (edited after
//! it was written, the MANIFEST kept): refused before anything is unpacked or run, naming
//! the files that differ.

use crate::common;

use std::io::Write as _;
use std::path::Path;

use common::{repo_with, repro};
use repro::archive;
use serde_json::Value;

fn run(tmp: &Path, root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = repro(tmp).arg("-C").arg(root).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `entries` (MANIFEST included, as given) as a tar.zst, the way a hand-edited
/// bundle would be packed again.
fn pack(to: &Path, entries: &[archive::Entry]) {
    let mut tar = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(e.bytes.len() as u64);
        h.set_mode(if e.executable { 0o755 } else { 0o644 });
        h.set_cksum();
        tar.append_data(&mut h, &e.path, e.bytes.as_slice())
            .unwrap();
    }
    let bytes = zstd::encode_all(tar.into_inner().unwrap().as_slice(), 3).unwrap();
    std::fs::File::create(to)
        .unwrap()
        .write_all(&bytes)
        .unwrap();
}

#[test]
fn a_bundle_edited_after_its_manifest_was_written_is_not_replayed() {
    let recipe = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"cp src/k.txt out.bin; echo ran >> ../ran\"]\ninputs = [\"src/*.txt\"]\noutputs = [\"out.bin\"]\n";
    let (tmp, root) = repo_with(&[
        ("recipes/cmd.toml", recipe),
        ("src/k.txt", "kernel bytes\n"),
        (".gitignore", "out.bin\n"),
    ]);
    let t = tmp.path();
    let (code, out, err) = run(t, &root, &["build", "--json", "cmd"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let key = v["builds"][0]["key"].as_str().unwrap().to_string();
    let bundle = t.join("paper.tar.zst");
    let (code, _, err) = run(
        t,
        &root,
        &["bundle", "create", &key, "-o", bundle.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::remove_file(t.join("ran")).unwrap();

    // One source file edited, the MANIFEST left as it was.
    let mut entries = archive::read(&bundle).unwrap();
    let edited = entries
        .iter_mut()
        .find(|e| e.path.ends_with("src/k.txt"))
        .expect("the bundle holds the source");
    edited.bytes = b"other bytes\n".to_vec();
    let edited_path = edited.path.clone();
    let tampered = t.join("tampered.tar.zst");
    pack(&tampered, &entries);

    let (code, out, err) = run(
        t,
        &root,
        &[
            "replay",
            &key[..12],
            "--bundle",
            tampered.to_str().unwrap(),
            "--allow-commands",
        ],
    );
    // Exit 1, as for `repro bundle verify` of such a bundle (README "Bundles").
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "error: {} does not match its MANIFEST ({edited_path})\nhint: `repro bundle verify FILE` lists every difference",
            tampered.display()
        )),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    // Nothing ran.
    assert!(!t.join("ran").exists());
}
