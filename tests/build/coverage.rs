//! `repro build` of command recipes: `-v` names where each output is stored, a failed build
//! is remembered (exit 5, the log on stderr, `FAILED (cached)` the second time) and rebuilt
//! with --force, and the internal `--in-nix-shell` refuses to run outside the Nix shell.

use crate::common;
use common::run_in as run;

use common::repo_with;

const OK: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"echo hi > out.txt\"]\ninputs = [\"recipes/*.toml\"]\noutputs = [\"out.txt\"]\n";
const BAD: &str = "schema = 1\n[build]\nkind = \"command\"\nargv = [\"sh\", \"-c\", \"echo broken >&2; exit 1\"]\ninputs = [\"recipes/*.toml\"]\noutputs = [\"out.txt\"]\n";

#[test]
fn verbose_builds_name_their_stored_outputs_and_failures_are_remembered() {
    let (tmp, root) = repo_with(&[("recipes/ok.toml", OK), ("recipes/bad.toml", BAD)]);
    let cache = tmp.path().join("cache");

    let (code, out, err) = run(&cache, &root, &["-v", "build", "ok"]);
    assert_eq!(code, 0, "{err}");
    let digest = repro::keys::sha256_hex(b"hi\n");
    let stored = root.join(format!(".repro/objects/{}/{}", &digest[..2], &digest[2..]));
    assert!(
        out.contains(&format!("  out.txt: {}\n", stored.display())),
        "{out}"
    );
    assert_eq!(std::fs::read(&stored).unwrap(), b"hi\n");
    // Without -v the path is not shown.
    let (_, out, _) = run(&cache, &root, &["build", "ok"]);
    assert!(out.starts_with("ok ") && out.contains(" cached "), "{out}");
    assert!(!out.contains("out.txt: "), "{out}");

    for (round, state) in [(1, "FAILED  "), (2, "FAILED (cached)  ")] {
        let (code, out, err) = run(&cache, &root, &["build", "bad"]);
        assert_eq!(code, 5, "round {round}: {err}");
        assert!(
            out.starts_with(&format!("bad              {state}key ")),
            "round {round}: {out}"
        );
        assert!(err.contains("  | broken\n"), "round {round}: {err}");
        assert!(err.contains("1 of 1 builds failed"), "round {round}: {err}");
    }
    // --force builds it again (and it fails again, not from the store).
    let (code, out, _) = run(&cache, &root, &["build", "--force", "bad"]);
    assert_eq!(code, 5);
    assert!(out.starts_with("bad              FAILED  key "), "{out}");
}

#[test]
fn the_nix_shell_child_flag_is_refused_outside_the_shell() {
    let (tmp, root) = repo_with(&[("recipes/ok.toml", OK)]);
    let (code, out, err) = run(tmp.path(), &root, &["build", "--in-nix-shell", "ok"]);
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("error: --in-nix-shell is internal to `repro build --nix`\nhint: run `repro build --nix RECIPE`"),
        "{err}"
    );
    assert!(!root.join(".repro/builds").exists());
}
