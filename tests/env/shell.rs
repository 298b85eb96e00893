//! Shell completions and the man page are generated without error and cover the commands.

use crate::common;

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
    // The internal commands (the child of `repro bench`, a Slurm job's step) are offered by
    // no shell, nor by `repro help`.
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = repro(tmp.path())
            .args(["completions", shell])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        for internal in ["gpu-job", "bisect-step", "gpu_job", "bisect_step"] {
            assert!(
                !text.contains(internal),
                "{shell} completion offers the internal `{internal}`"
            );
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

/// Every command and subcommand a user sees (`env check`), by its path of names.
fn command_paths() -> Vec<String> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            let name = format!("{path}{}", sub.get_name());
            out.push(name.clone());
            walk(sub, &format!("{name} "), out);
        }
    }
    let mut out = Vec::new();
    walk(&repro::cli::command(), "", &mut out);
    out
}

#[test]
fn every_command_and_subcommand_has_its_own_man_page() {
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
    repro(tmp.path())
        .args(["man", "env", "nope"])
        .assert()
        .code(2);
    repro(tmp.path()).args(["man", "gpu-job"]).assert().code(2);
    let dir = tmp.path().join("man");
    repro(tmp.path())
        .arg("man")
        .arg("--out-dir")
        .arg(&dir)
        .assert()
        .success();
    let paths = command_paths();
    assert!(paths.contains(&"env check".to_string()), "{paths:?}");
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    let mut expected: Vec<String> = paths
        .iter()
        .map(|p| format!("repro-{}.1", p.replace(' ', "-")))
        .chain(["repro.1".to_string()])
        .collect();
    expected.sort();
    assert_eq!(written, expected, "one page per command, no hidden one");
    for (i, file) in written.iter().enumerate() {
        let page = std::fs::read_to_string(dir.join(file)).unwrap();
        let name = file.trim_end_matches(".1");
        // Each page has an EXIT STATUS section with the codes `--help` lists.
        // A page's name joins the words of its command with `-`, and a subcommand's own name
        // may hold one (`env why-import`): the command is the one whose page name this is.
        let dashed = name.trim_start_matches("repro").trim_start_matches('-');
        let path = repro::exit::BY_COMMAND
            .iter()
            .map(|(c, _)| *c)
            .find(|c| c.replace(' ', "-") == dashed)
            .map_or_else(|| dashed.replace('-', " "), str::to_string);
        let codes = if path.is_empty() {
            repro::exit::ALL
                .iter()
                .map(|(c, _)| *c)
                .collect::<Vec<u8>>()
        } else {
            repro::exit::for_command(&path)
                .unwrap_or_else(|| panic!("{path} has no exit codes"))
                .iter()
                .map(|(c, _)| *c)
                .collect()
        };
        let status = page
            .split(".SH \"EXIT STATUS\"\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{file} has no EXIT STATUS"));
        let status = status.split("\n.SH").next().unwrap();
        for code in codes {
            assert!(
                status.contains(&format!(".TP\n\\fB{code}\\fR\n")),
                "{file}: EXIT STATUS lacks {code}:\n{status}"
            );
        }
        // Every page it refers to (`repro\\-env\\-check(1)`, bold or not) is one that was
        // written.
        for (at, _) in page.match_indices("(1)") {
            let before = page[..at].trim_end_matches("\\fR");
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '\\' || c == '-'))
                .map_or(0, |i| i + 1);
            let referred = before[start..]
                .trim_start_matches("\\fB")
                .replace("\\-", "-");
            assert!(
                written.contains(&format!("{referred}.1")),
                "{file} refers to {referred}(1), which is not written"
            );
        }
        // `repro man` prints the same page, whichever way the command is named.
        if i % 3 == 0 && !path.is_empty() {
            let words: Vec<&str> = path.split(' ').collect();
            for args in [
                words.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
                vec![path.clone()],
                vec![name.to_string()],
            ] {
                let out = repro(tmp.path()).arg("man").args(&args).output().unwrap();
                assert!(out.status.success(), "repro man {args:?}");
                assert_eq!(
                    String::from_utf8(out.stdout).unwrap(),
                    page,
                    "repro man {args:?}"
                );
            }
        }
    }
}

/// `repro COMMAND --help` ends with the command's exit codes, for every command.
#[test]
fn every_help_ends_with_its_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    for path in command_paths() {
        let out = repro(tmp.path())
            .args(path.split(' '))
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{path} --help");
        let text = String::from_utf8(out.stdout).unwrap();
        let tail = text
            .split("\nExit status:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("`repro {path} --help` names no exit codes:\n{text}"));
        let listed: Vec<u8> = tail
            .lines()
            .filter_map(|l| l.strip_prefix("  ")?.split(' ').next()?.parse().ok())
            .collect();
        let want: Vec<u8> = repro::exit::for_command(&path)
            .unwrap()
            .iter()
            .map(|(c, _)| *c)
            .collect();
        assert_eq!(listed, want, "`repro {path} --help`");
    }
}

/// The top-level help: every command a user sees (no internal one) and every exit code.
#[test]
fn top_level_help_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let out = repro(tmp.path()).arg("--help").output().unwrap();
    assert!(out.status.success());
    insta::assert_snapshot!("repro_help", String::from_utf8(out.stdout).unwrap());
}
