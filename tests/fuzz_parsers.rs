//! Issue 14's fuzz target: hostile recipes, lockfiles, records, expressions and bundles, for
//! a time budget, must never panic (every one is either accepted or refused with an error).
//!
//! Inputs are proptest-generated: mutations (byte flips, cuts, splices, token insertions)
//! of valid seeds from this repository, plus free-form text built from each format's own
//! tokens. `REPRO_FUZZ_SECONDS` sets the budget (default 10; CI sets 60); the test prints
//! how many inputs of each kind it tried.

use crate::common;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use repro::archive::{self, Entry};

/// One edit of a seed.
#[derive(Clone, Debug)]
enum Edit {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, String),
    Delete(usize, usize),
    Duplicate(usize, usize),
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for e in edits {
        let n = b.len().max(1);
        match e {
            Edit::Flip(i, x) => {
                if !b.is_empty() {
                    b[i % n] ^= x | 1;
                }
            }
            Edit::Cut(i) => b.truncate(i % n),
            Edit::Insert(i, s) => {
                let at = (i % n).min(b.len());
                b.splice(at..at, s.bytes());
            }
            Edit::Delete(i, len) => {
                let at = (i % n).min(b.len());
                let end = (at + len % 64).min(b.len());
                b.drain(at..end);
            }
            Edit::Duplicate(i, len) => {
                let at = (i % n).min(b.len());
                let end = (at + len % 256).min(b.len());
                let part = b[at..end].to_vec();
                b.splice(at..at, part);
            }
        }
    }
    b
}

/// Tokens that matter to the formats: TOML syntax, keys repro reads, numbers at the edges,
/// expression operators, JSON punctuation, hostile paths.
const TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    "=",
    ",",
    "\"",
    "'",
    "\n",
    "[[",
    "]]",
    ".",
    "#",
    ":",
    "schema",
    "schema = 1\n",
    "schema = 99\n",
    "[build]\n",
    "[run]\n",
    "[check]\n",
    "[params]\n",
    "[work]\n",
    "[fields]\n",
    "kind",
    "\"nvrtc\"",
    "\"command\"",
    "\"nvcc\"",
    "source",
    "entries",
    "target",
    "\"sm_90\"",
    "argv",
    "inputs",
    "outputs",
    "grid",
    "block",
    "args",
    "count",
    "buffer",
    "scalar",
    "\"f32\"",
    "\"i32\"",
    "atol",
    "rtol",
    "low",
    "high",
    "init",
    "\"uniform\"",
    "policy",
    "\"exact\"",
    "\"any\"",
    "value",
    "values",
    "nan",
    "inf",
    "-inf",
    "-0.0",
    "1e308",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "2147483648",
    "0",
    "-1",
    "1",
    "ceil_div(",
    "max(",
    "min(",
    "**",
    "//",
    "%",
    "/",
    "*",
    "+",
    "-",
    "(",
    ")",
    "n",
    "x",
    "../",
    "/etc/passwd",
    "a//b",
    "\\",
    "\u{1b}[2J",
    "\u{0}",
    "é",
    "null",
    "true",
    "false",
    "\"commit\": ",
    "\"key\": ",
    "\"inputs\": ",
    "\"outputs\": ",
    "\"sha256\": ",
    "\"record-sha256\": ",
    "\"samples\": ",
    "\"recipe\": ",
];

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let token = prop::sample::select(TOKENS).prop_map(str::to_string);
    let edit = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, x)| Edit::Flip(i, x)),
        any::<usize>().prop_map(Edit::Cut),
        (any::<usize>(), token.clone()).prop_map(|(i, s)| Edit::Insert(i, s)),
        (any::<usize>(), "\\PC{0,8}").prop_map(|(i, s)| Edit::Insert(i, s)),
        (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Edit::Delete(i, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Edit::Duplicate(i, n)),
    ];
    prop::collection::vec(edit, 0..8)
}

fn free_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..40).prop_map(|t| t.concat())
}

/// Runs `check` on inputs from `strategy` until the deadline; a panic fails the test with
/// the input that caused it. Returns how many inputs were tried.
fn fuzz<S: Strategy>(name: &str, deadline: Instant, strategy: S, check: impl Fn(&S::Value)) -> usize
where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(Config::default());
    let mut n = 0;
    while Instant::now() < deadline {
        let input = strategy.new_tree(&mut runner).unwrap().current();
        if catch_unwind(AssertUnwindSafe(|| check(&input))).is_err() {
            panic!("{name}: panicked on input {input:?}");
        }
        n += 1;
    }
    n
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn hostile_inputs_never_panic() {
    let secs: u64 = std::env::var("REPRO_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    // Split between the seven targets.
    let slice = Duration::from_secs(secs).div_f64(7.0);
    let root_dir = tempfile::tempdir().unwrap();
    let root = root_dir.path();
    common::copy_dir(&common::crate_dir().join("kernels"), &root.join("kernels"));
    common::copy_dir(&common::crate_dir().join("recipes"), &root.join("recipes"));
    let mut tried = BTreeMap::new();

    // Recipes: parse, validate against the tree, and resolve every parameter point.
    let recipe_seeds: Vec<Vec<u8>> = std::fs::read_dir(root.join("recipes"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    let settings = repro::records::Settings {
        mode: repro::records::Mode::Cold,
        max_noise: 0.005,
        min_samples: 10,
        max_samples: 100,
        min_time_ms: 10.0,
        budget_ms: 100.0,
        warmup_ms: 1.0,
        device: 0,
    };
    let check_recipe = |b: &Vec<u8>| {
        if let Ok(r) = repro::recipe::parse(root, "recipes/fuzz.toml", &text(b))
            && r.sections.run.is_some()
        {
            let _ =
                repro::bench::resolve(&r.sections, Path::new("m.cubin"), &settings, false, false);
        }
    };
    let deadline = Instant::now() + slice;
    let seeds = recipe_seeds.clone();
    tried.insert(
        "recipes",
        fuzz(
            "recipe",
            deadline,
            (prop::sample::select(seeds), edits()).prop_map(|(s, e)| apply(&s, &e)),
            check_recipe,
        ) + fuzz(
            "recipe",
            deadline + slice / 4,
            free_text().prop_map(String::into_bytes),
            check_recipe,
        ),
    );

    // Lockfiles.
    let lock_seed =
        std::fs::read(common::crate_dir().join("tests/fixtures/lockfile-v1.toml")).unwrap();
    let check_lock = |b: &Vec<u8>| {
        let _ = repro::lockfile::parse(Path::new("lockfiles/fuzz.toml"), &text(b));
    };
    let deadline = Instant::now() + slice;
    tried.insert(
        "lockfiles",
        fuzz(
            "lockfile",
            deadline,
            edits().prop_map(move |e| apply(&lock_seed, &e)),
            check_lock,
        ) + fuzz(
            "lockfile",
            deadline + slice / 4,
            free_text().prop_map(String::into_bytes),
            check_lock,
        ),
    );

    // Records: the store's parser and the bundle's validation of every field.
    // A real build record (its key is the hash of its inputs), so that edits start from
    // something every check accepts.
    let record = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/records/build-ok.json"),
    )
    .unwrap();
    let key = serde_json::from_slice::<serde_json::Value>(&record).unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        repro::bundle::validate_record("build", &key, &serde_json::from_slice(&record).unwrap())
            .is_ok(),
        "the seed record is valid"
    );
    let check_record = |b: &Vec<u8>| {
        if let Ok(v) = repro::store::parse_record(b) {
            let _ = repro::bundle::validate_record("build", &key, &v);
            let _ = repro::bundle::validate_record("result", &key, &v);
            let _ = repro::records::BuildRecord::from_json(&v, "fuzz");
            let _ = repro::records::ResultRecord::from_json(&v, "fuzz");
            let _ = repro::records::referenced_blobs(&v);
        }
    };
    let deadline = Instant::now() + slice;
    tried.insert(
        "records",
        fuzz(
            "record",
            deadline,
            edits().prop_map(move |e| apply(&record, &e)),
            check_record,
        ),
    );

    // Expressions, parsed and evaluated with a parameter.
    let params: BTreeMap<String, repro::expr::Value> =
        [("n".to_string(), repro::expr::Value::Int(1024))].into();
    let deadline = Instant::now() + slice;
    tried.insert(
        "expressions",
        fuzz(
            "expression",
            deadline,
            prop::collection::vec(prop::sample::select(TOKENS), 0..30).prop_map(|t| t.concat()),
            |s: &String| {
                if let Ok(e) = repro::expr::Expr::parse(s) {
                    let _ = e.eval(&params);
                    let _ = e.eval_count(&params, "count");
                }
            },
        ),
    );

    // Bundles: a valid one, mutated at the byte level (mostly refused by zstd's checksum)
    // and at the member level (re-compressed, so the tar and manifest parsers see it).
    let dir = tempfile::tempdir().unwrap();
    let seed_path = dir.path().join("seed.tar.zst");
    let entries = vec![
        Entry {
            path: "README.md".into(),
            bytes: b"# claims\n".to_vec(),
            executable: false,
        },
        Entry {
            path: format!("builds/{key}.json"),
            bytes: b"{}\n".to_vec(),
            executable: false,
        },
        Entry {
            path: "source/x/recipes/cmd.toml".into(),
            bytes: recipe_seeds[0].clone(),
            executable: false,
        },
    ];
    archive::write(&seed_path, entries).unwrap();
    let zst = std::fs::read(&seed_path).unwrap();
    let tar = zstd::decode_all(zst.as_slice()).unwrap();
    let target = dir.path().join("fuzz.tar.zst");
    let limits = archive::Limits {
        max_bytes: 1 << 20,
        max_entries: 64,
    };
    let check_bundle = |b: &Vec<u8>| {
        std::fs::write(&target, b).unwrap();
        let _ = archive::read_with(&target, limits);
        let _ = archive::verify(&target);
    };
    let deadline = Instant::now() + slice;
    let n = fuzz(
        "bundle",
        deadline,
        edits().prop_map(move |e| apply(&zst, &e)),
        check_bundle,
    );
    let n = n + fuzz(
        "bundle",
        deadline + slice / 2,
        edits().prop_map(move |e| zstd::encode_all(apply(&tar, &e).as_slice(), 1).unwrap()),
        check_bundle,
    );
    tried.insert("bundles", n);

    // Stores and bundles whose fields are paths, devices and FIFOs (issue 26): a record's
    // digests, keys and names set to hostile paths, record and object files replaced by
    // FIFOs, links to devices and directories, bundle members that are devices, FIFOs, links
    // or paths under other members. Every store operation must answer (no panic, no hang
    // on a FIFO, no read of a device) and gc must touch nothing outside the store.
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"keep").unwrap();
    let fifo = dir.path().join("a-fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let hostile_values: Vec<String> = vec![
        "a".into(),
        String::new(),
        "../../../../../../etc/hostname".into(),
        "/dev/zero".into(),
        fifo.display().to_string(),
        outside.join("precious").display().to_string(),
        format!("../../{}", "f".repeat(62)),
        "A".repeat(64),
        format!("{}/..", "0".repeat(61)),
    ];
    let build_seed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(common::crate_dir().join("tests/fixtures/records/build-ok.json")).unwrap(),
    )
    .unwrap();
    let store_case = (
        prop::sample::select(vec![
            "builds",
            "results",
            "bisect",
            "bisect-samples",
            "bisections",
        ]),
        prop::sample::select(hostile_values.clone()),
        prop::sample::select(vec!["sha256", "key", "experiment", "log", "recipe", "id"]),
        0u8..6,
    );
    let deadline = Instant::now() + slice;
    let n = fuzz(
        "store",
        deadline,
        store_case,
        |(kind, value, field, file_kind)| {
            let sd = tempfile::tempdir().unwrap();
            let store = repro::store::Store::at(sd.path().join(".repro"));
            let blob = store.put_blob(b"artifact").unwrap();
            let mut rec = build_seed.clone();
            rec["outputs"] = serde_json::json!({"ptx": {"sha256": blob, "bytes": 8}});
            if *field == "sha256" {
                rec["outputs"]["ptx"]["sha256"] = serde_json::json!(value);
            } else {
                rec[*field] = serde_json::json!(value);
            }
            let key = "7".repeat(64);
            let _ = store.put_record(kind, &key, &rec);
            let _ = store.put_record(kind, value, &rec);
            let path = sd.path().join(format!(".repro/{kind}/{key}.json"));
            let object = store.blob_path(&blob).unwrap();
            // The file under the record's (or the object's) name becomes something hostile.
            let victim = if file_kind % 2 == 0 { &path } else { &object };
            let _ = std::fs::remove_file(victim);
            match file_kind / 2 {
                0 => std::os::unix::fs::symlink(&fifo, victim).unwrap(),
                1 => std::os::unix::fs::symlink("/dev/zero", victim).unwrap(),
                _ => {
                    let c = std::ffi::CString::new(victim.to_str().unwrap()).unwrap();
                    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
                }
            }
            let _ = store.get_record(kind, &key);
            let _ = store.get_record(kind, value);
            let _ = store.get_blob(value);
            let _ = store.get_blob(&blob);
            let _ = store.records(kind);
            let _ = store.check_record(kind, &key, &rec, &|_| true);
            let _ = repro::bundle::validate_record("build", &key, &rec);
            let _ = repro::bundle::validate_record("result", &key, &rec);
            let _ = store.verify();
            let _ = store.gc(Some(0));
            assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep");
        },
    );
    tried.insert("stores", n);

    // Bundle members that are devices, FIFOs, links, or paths under another member.
    let member_case = (
        prop::sample::select(vec![
            tar::EntryType::Regular,
            tar::EntryType::Fifo,
            tar::EntryType::Char,
            tar::EntryType::Block,
            tar::EntryType::Symlink,
            tar::EntryType::Link,
            tar::EntryType::Directory,
        ]),
        prop::sample::select(vec![
            "a",
            "a/b",
            "MANIFEST/x",
            "MANIFEST",
            "dev/zero",
            "builds/x.json",
            "../x",
            "/dev/zero",
        ]),
        prop::sample::select(vec!["a", "a/b", "README.md", "x"]),
    );
    let target2 = dir.path().join("members.tar.zst");
    let deadline = Instant::now() + slice;
    let n = fuzz(
        "bundle members",
        deadline,
        member_case,
        |(kind, name, other)| {
            let mut b = tar::Builder::new(Vec::new());
            let mut h = tar::Header::new_gnu();
            let data: &[u8] = if *kind == tar::EntryType::Regular {
                b"x"
            } else {
                b""
            };
            h.set_entry_type(*kind);
            h.set_mode(0o755);
            h.set_size(data.len() as u64);
            if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
                let _ = h.set_link_name("/dev/zero");
            }
            {
                let gnu = h.as_gnu_mut().unwrap();
                let n = name.len().min(gnu.name.len());
                gnu.name[..n].copy_from_slice(&name.as_bytes()[..n]);
            }
            h.set_cksum();
            b.append(&h, data).unwrap();
            let mut h2 = tar::Header::new_gnu();
            h2.set_size(1);
            h2.set_mode(0o644);
            h2.set_cksum();
            let _ = b.append_data(&mut h2, other, &b"y"[..]);
            let manifest = format!(
                "{}  {name}\n{}  {other}\n",
                repro::keys::sha256_hex(b"x"),
                repro::keys::sha256_hex(b"y")
            );
            let mut h3 = tar::Header::new_gnu();
            h3.set_size(manifest.len() as u64);
            h3.set_mode(0o644);
            h3.set_cksum();
            let _ = b.append_data(&mut h3, "MANIFEST", manifest.as_bytes());
            let tar = b.into_inner().unwrap();
            std::fs::write(&target2, zstd::encode_all(tar.as_slice(), 1).unwrap()).unwrap();
            let verified = archive::verify(&target2);
            let out = dir.path().join("out");
            let _ = std::fs::remove_dir_all(&out);
            let extracted = archive::extract(&target2, &out);
            // What verify accepts, extraction writes: never the other way round.
            if verified.as_ref().is_ok_and(|v| v.ok()) {
                assert!(
                    extracted.is_ok(),
                    "{name} {other} {kind:?}: verify passed, extract failed: {extracted:?}"
                );
            }
        },
    );
    tried.insert("bundle members", n);

    let total: usize = tried.values().sum();
    eprintln!("fuzz: {total} hostile inputs in {secs} s, none panicked: {tried:?}");
    assert!(tried.values().all(|&n| n > 0));
}

/// Device code is hostile input too: a compiler's (or a command build's) cubin, fat binary
/// or object, mutated, is read by the ELF and fat binary readers without a panic. Seeds are
/// nvcc 13.0's own output (tests/fixtures/device).
#[test]
fn hostile_device_code_never_panics() {
    let secs: u64 = std::env::var("REPRO_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let dir = common::crate_dir().join("tests/fixtures/device");
    let seeds: Vec<Vec<u8>> = ["k.sm_90.cubin", "k.fatbin", "k.zstd.fatbin"]
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    let check = |b: &Vec<u8>| {
        if let Ok(e) = repro::elf::Elf::parse(b) {
            let _ = e.symbols();
            for s in e.sections() {
                let _ = e.data(s);
            }
        }
        if let Ok(members) = repro::fatbin::members(b) {
            for m in members {
                let _ = repro::elf::Elf::parse(&m.payload).and_then(|e| e.symbols());
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(secs).div_f64(5.0);
    let n = fuzz(
        "device code",
        deadline,
        (prop::sample::select(seeds), edits()).prop_map(|(s, e)| apply(&s, &e)),
        check,
    );
    eprintln!("device code: {n} inputs");
    assert!(n > 0);
}
