//! The README documents every exit code and every fingerprint field.

use repro::{exit, fields};

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

#[test]
fn every_exit_code_is_documented() {
    let text = readme();
    for (code, meaning) in exit::ALL {
        assert!(
            text.contains(&format!("| {code} | {meaning} |")),
            "exit code {code} is not in the README"
        );
    }
    // And the other way: every row of the README's table is a code repro has.
    let table = text
        .split("## Exit codes")
        .nth(1)
        .expect("an exit codes section");
    let rows: Vec<u8> = table
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| l.strip_prefix("| ")?.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(rows.len(), exit::ALL.len(), "README rows {rows:?}");
}

#[test]
fn every_field_is_documented() {
    let text = readme();
    for spec in fields::SPECS {
        assert!(
            text.contains(&format!("| `{}` |", spec.key)),
            "{} is not in the README",
            spec.key
        );
    }
}

/// Splits a shell command line into words (single and double quotes, no expansions).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

/// Every `repro ...` command line the README shows: in code blocks (`$ repro ...`,
/// `repro ...`, `target/release/repro ...`, `cargo run --release -- ...`) and inline in
/// backticks, without usage synopses (`[...]`, `A|B`).
fn readme_commands(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            let l = line.trim_start().trim_start_matches("$ ");
            let l = l.split("  #").next().unwrap_or(l).trim();
            for prefix in ["repro ", "target/release/repro ", "cargo run --release -- "] {
                if let Some(rest) = l.strip_prefix(prefix) {
                    out.push((format!("repro {rest}"), true));
                }
            }
        } else {
            for (i, chunk) in line.split('`').enumerate() {
                if i % 2 == 1
                    && chunk.starts_with("repro ")
                    && !chunk.contains('[')
                    && !chunk.contains('|')
                    && !chunk.contains("...")
                {
                    out.push((chunk.to_string(), false));
                }
            }
        }
    }
    out
}

#[test]
fn every_command_line_in_the_readme_parses() {
    use clap::Parser;
    let text = readme();
    let commands = readme_commands(&text);
    assert!(
        commands.len() > 60,
        "found only {} commands",
        commands.len()
    );
    let placeholders = [
        ("RECIPE", "vector_add"),
        ("ID...", "abcd1234"),
        ("ID", "abcd1234"),
        ("HASH", "abcd1234"),
        ("FILE.tar.zst", "b.tar.zst"),
        ("FILE", "file"),
        ("NAME", "name"),
        ("REV", "HEAD"),
        ("CMD", "true"),
        ("DIR", "."),
        ("K=V", "n=1"),
        ("SHELL", "bash"),
        ("VERSION", "13.0.88"),
        ("HEX", "ab"),
        ("LIST", "0,1"),
        ("PARAM", "n"),
        ("PATH", "a.b"),
        ("RE", "x"),
        ("N", "2"),
    ];
    let mut failures = Vec::new();
    // A chain (`repro a && repro b`) is two commands.
    let commands: Vec<(String, bool)> = commands
        .into_iter()
        .flat_map(|(c, full)| {
            c.split("&&")
                .map(|p| (p.trim().to_string(), full))
                .collect::<Vec<_>>()
        })
        .filter(|(c, _)| c.starts_with("repro "))
        .collect();
    for (cmd, full) in &commands {
        let argv: Vec<String> = words(cmd)
            .into_iter()
            .map(|w| {
                let mut w = w;
                for (p, v) in placeholders {
                    if w == p || w.ends_with(&format!("={p}")) || w.ends_with(&format!(":{p}")) {
                        w = format!("{}{v}", &w[..w.len() - p.len()]);
                        break;
                    }
                }
                w
            })
            .collect();
        if *full {
            // A command line shown in a code block must parse as it stands.
            if let Err(e) = repro::cli::Cli::try_parse_from(&argv) {
                failures.push(format!(
                    "{cmd}\n    {}",
                    e.to_string().lines().next().unwrap_or_default()
                ));
            }
        } else {
            // An inline mention (`repro bench`, `repro store verify`) must name real commands.
            let mut names: Vec<String> = argv
                .iter()
                .take_while(|w| !w.starts_with('-'))
                .cloned()
                .collect();
            names.push("--help".into());
            match repro::cli::Cli::try_parse_from(&names) {
                Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {}
                other => failures.push(format!(
                    "{cmd}\n    names no command: {:?}",
                    other.err().map(|e| e.kind())
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "README commands that do not parse:\n{}",
        failures.join("\n")
    );
}

/// CI runs the README's test command, word for word, in a fresh clone with an empty home
/// and cache, and sets none of the variables a test could depend on.
#[test]
fn ci_runs_the_readme_test_command_in_a_fresh_clone() {
    let text = readme();
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    let readme_test = text
        .lines()
        .find_map(|l| {
            let cmd = l.split('#').next().unwrap().trim();
            cmd.starts_with("cargo test").then(|| cmd.to_string())
        })
        .expect("the README gives a test command");
    assert!(
        ci.lines()
            .any(|l| l.trim().starts_with(&format!("{readme_test} 2>&1 |"))
                || l.trim() == readme_test),
        "CI does not run `{readme_test}`"
    );
    for needed in [
        "git clone",
        "export HOME=",
        "XDG_CACHE_HOME=",
        "unset REPRO_NVRTC",
    ] {
        assert!(ci.contains(needed), "CI lacks `{needed}`");
    }
    for var in ["REPRO_NVRTC=", "REPRO_TEST_NVRTC_WHEEL="] {
        assert!(
            !ci.lines()
                .any(|l| l.trim_start().starts_with("export") && l.contains(var)),
            "CI exports {var}, which a fresh machine lacks"
        );
    }
}

/// Every repository file the README names in backquotes exists.
#[test]
fn the_readme_names_only_files_that_exist() {
    let text = readme();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let prefixes = [
        "src/",
        "tests/",
        "benches/",
        "kernels/",
        "recipes/",
        "lockfiles/",
        ".ci/",
    ];
    let mut missing = Vec::new();
    for (i, chunk) in text.split('`').enumerate() {
        // Odd chunks are inside backquotes: a lone path, or a command that runs a script
        // (`python3 benches/x.py ...`). Quoted messages (`file kernels/x.cuh is a new input`)
        // name example files and are left alone.
        let all: Vec<&str> = chunk.split_whitespace().collect();
        let words: Vec<&str> = match all.as_slice() {
            _ if i % 2 == 0 => Vec::new(),
            [one] => vec![*one],
            [run, script, ..] if ["python3", "bash", "sh"].contains(run) => vec![*script],
            _ => Vec::new(),
        };
        for w in words {
            let w = w.trim_end_matches([',', '.', ':', ')']);
            if !prefixes.iter().any(|p| w.starts_with(p))
                || w.contains(['*', '<', '{', '$', ':', '(', '?'])
                || w.contains("NAME")
                || w.contains("KEY")
                || w.contains("ID")
            {
                continue;
            }
            if !root.join(w).exists() {
                missing.push(w.to_string());
            }
        }
    }
    // Paths in the layout block and in prose lists outside backquotes.
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        let first = first.trim_end_matches([',', ':']);
        if prefixes.iter().any(|p| first.starts_with(p))
            && !first.contains(['*', '<', '{'])
            && line.starts_with(first)
            && !root.join(first).exists()
        {
            missing.push(first.to_string());
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "the README names files that do not exist: {missing:?}"
    );
}

/// A bench script that takes `--repro PATH` runs that binary everywhere: the default path
/// appears only as the option's default.
#[test]
fn bench_scripts_use_their_repro_option_throughout() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches");
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "py") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("\"--repro\"") {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if line.contains("target/release/repro\"") || line.contains("target/release/repro'") {
                assert!(
                    line.contains("add_argument(\"--repro\""),
                    "{}:{}: runs target/release/repro instead of --repro: {line}",
                    path.display(),
                    i + 1
                );
            }
        }
    }
}
