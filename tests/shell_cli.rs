//! Shell completions and the man page are generated without error and cover the commands.

mod common;

use common::repro;

#[test]
fn completions_for_each_shell_name_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let out = repro(tmp.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        for cmd in [
            "env",
            "build",
            "bench",
            "bisect",
            "replay",
            "bundle",
            "toolchain",
            "store",
            "compare",
        ] {
            assert!(text.contains(cmd), "{shell} completion lacks {cmd}");
        }
    }
    let out = repro(tmp.path())
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_man_page_renders() {
    let tmp = tempfile::tempdir().unwrap();
    let out = repro(tmp.path()).arg("man").output().unwrap();
    assert!(out.status.success());
    let roff = String::from_utf8(out.stdout).unwrap();
    assert!(
        roff.starts_with(".ie") || roff.contains(".TH repro"),
        "{}",
        &roff[..200.min(roff.len())]
    );
    assert!(roff.contains("bisect"));
}
