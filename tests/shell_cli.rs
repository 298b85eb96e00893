//! Shell completions and the man page are generated without error and cover the commands.

mod common;

use common::repro;

#[test]
fn completions_for_each_shell_name_every_command() {
    use clap::CommandFactory;
    let tmp = tempfile::tempdir().unwrap();
    // Every visible subcommand, as each shell's script offers it after `repro` (not merely
    // the word somewhere: `--store` alone would satisfy "store").
    let cli = repro::cli::Cli::command();
    let commands: Vec<&str> = cli
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name())
        .collect();
    for cmd in [
        "env", "build", "bench", "bisect", "replay", "bundle", "store",
    ] {
        assert!(
            commands.contains(&cmd),
            "{cmd} is not a command: {commands:?}"
        );
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = repro(tmp.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        for cmd in &commands {
            let offered = match shell {
                "bash" => text.contains(&format!("repro,{cmd})")),
                "zsh" => text.lines().any(|l| l.starts_with(&format!("'{cmd}:"))),
                _ => text.contains(&format!(
                    "-n \"__fish_repro_needs_command\" -f -a \"{cmd}\""
                )),
            };
            assert!(offered, "{shell} completion does not offer `repro {cmd}`");
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

#[test]
fn completions_complete_recipe_names_and_record_ids() {
    let (tmp, root) = common::repo_with(&[
        ("recipes/alpha.toml", "schema = 1\n"),
        ("recipes/beta.toml", "schema = 1\n"),
    ]);
    // A record to complete: a command-bench result.
    let out = repro(tmp.path())
        .arg("-C")
        .arg(&root)
        .args(["--json", "bench", "--command", "true", "--runs", "2"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["results"][0]["id"].as_str().unwrap().to_string();
    let bin_dir = assert_cmd::cargo::cargo_bin("repro")
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let complete = |words: &str| -> Vec<String> {
        let script = format!(
            "source <(repro completions bash); COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _repro_with_names repro \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(&root)
            .env("PATH", &path)
            .env("XDG_CACHE_HOME", tmp.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    };
    assert_eq!(complete("repro build ''"), ["alpha", "beta"]);
    assert_eq!(complete("repro bench al"), ["alpha"]);
    assert_eq!(complete("repro log --recipe b"), ["beta"]);
    assert_eq!(complete("repro show ''"), [id[..12].to_string()]);
    // Anything else falls through to clap's completions: subcommands.
    assert!(complete("repro bis").contains(&"bisect".to_string()));
    // zsh and fish scripts carry the same hooks.
    for shell in ["zsh", "fish"] {
        let out = repro(tmp.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("repro completions --candidates"), "{shell}");
    }
}

#[test]
fn every_subcommand_has_its_own_man_page() {
    let tmp = tempfile::tempdir().unwrap();
    let out = repro(tmp.path()).args(["man", "bisect"]).output().unwrap();
    assert!(out.status.success());
    let roff = String::from_utf8(out.stdout).unwrap();
    assert!(
        roff.contains("repro\\-bisect"),
        "{}",
        &roff[..300.min(roff.len())]
    );
    assert!(roff.contains("\\-\\-good"));
    repro(tmp.path()).args(["man", "nope"]).assert().code(2);
    let dir = tmp.path().join("man");
    repro(tmp.path())
        .arg("man")
        .arg("--out-dir")
        .arg(&dir)
        .assert()
        .success();
    for page in [
        "repro.1",
        "repro-bisect.1",
        "repro-log.1",
        "repro-compare.1",
        "repro-env.1",
    ] {
        assert!(dir.join(page).is_file(), "{page}");
    }
    assert!(
        !dir.join("repro-gpu-job.1").exists(),
        "hidden commands have no page"
    );
}
