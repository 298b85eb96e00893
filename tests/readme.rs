//! The documentation against the code: the README, the book under `docs/` (guide and
//! reference), CONTRIBUTING.md and benches/README.md.
//!
//! The reference documents every exit code and every fingerprint field; every command line
//! the pages show parses with the real command line, and every flag they name exists on the
//! command they name it for; every subcommand and flag clap knows is in the command-line
//! reference, which is regenerated from clap and compared; the transcripts they show (`$ repro
//! ...` and its output) that can run here are run and their output compared, and the others
//! say why not; every file and link they name exists; the README stays a front door.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use repro::{exit, fields};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn readme() -> String {
    read("README.md")
}

/// The book's pages, relative to the repository root, sorted.
fn book_pages() -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                let rel = p.strip_prefix(root()).unwrap();
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// Every documentation file: the README, the book, CONTRIBUTING.md, benches/README.md.
fn doc_files() -> Vec<String> {
    let mut v = vec![
        "README.md".to_string(),
        "CONTRIBUTING.md".into(),
        "benches/README.md".into(),
    ];
    v.extend(book_pages());
    v
}

/// The text of a page from its `# TITLE` line up to the next heading of that level or above.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .find(&format!("{heading}\n"))
        .unwrap_or_else(|| panic!("no section `{heading}`"));
    let body = &text[start + heading.len() + 1..];
    let mut end = body.len();
    let mut offset = 0;
    for line in body.split_inclusive('\n') {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            end = offset;
            break;
        }
        offset += line.len();
    }
    &body[..end]
}

#[test]
fn every_exit_code_is_documented() {
    let page = read("docs/src/reference/exit-codes.md");
    for (code, meaning) in exit::ALL {
        assert!(
            page.contains(&format!("| {code} | {meaning} |")),
            "exit code {code} is not in docs/src/reference/exit-codes.md"
        );
    }
    // And the other way: every row of the table is a code repro has.
    let rows: Vec<u8> = section(&page, "# Exit codes")
        .lines()
        .filter_map(|l| l.strip_prefix("| ")?.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(rows.len(), exit::ALL.len(), "table rows {rows:?}");
}

#[test]
fn every_field_is_documented() {
    let page = read("docs/src/reference/fields.md");
    for spec in fields::SPECS {
        assert!(
            page.contains(&format!("| `{}` |", spec.key)),
            "{} is not in docs/src/reference/fields.md",
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

/// A command line a page shows.
#[derive(Debug)]
enum Shown {
    /// In a code block (`$ repro ...`, `repro ...`, `target/release/repro ...`,
    /// `cargo run --release -- ...`): it must parse as it stands.
    Full(String),
    /// Inline in backquotes without synopsis marks: it must name real commands and flags.
    Mention(String),
    /// Inline, a usage synopsis (`repro build [RECIPE...|--all] [--json]`): its flags must
    /// exist on the command it names.
    Synopsis(String),
}

/// Every `repro ...` command line a page shows.
fn shown_commands(text: &str) -> Vec<Shown> {
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
                    out.push(Shown::Full(format!("repro {rest}")));
                }
            }
        } else {
            for (i, chunk) in line.split('`').enumerate() {
                if i % 2 == 0 || !chunk.starts_with("repro ") {
                    continue;
                }
                if chunk.contains('[') || chunk.contains('|') || chunk.contains("...") {
                    out.push(Shown::Synopsis(chunk.to_string()));
                } else {
                    out.push(Shown::Mention(chunk.to_string()));
                }
            }
        }
    }
    // A chain (`repro a && repro b`) is two commands.
    out.into_iter()
        .flat_map(|s| {
            let (text, make): (String, fn(String) -> Shown) = match s {
                Shown::Full(t) => (t, Shown::Full),
                Shown::Mention(t) => (t, Shown::Mention),
                Shown::Synopsis(t) => (t, Shown::Synopsis),
            };
            text.split("&&")
                .map(|p| p.trim().to_string())
                .filter(|p| p.starts_with("repro "))
                .map(make)
                .collect::<Vec<_>>()
        })
        .collect()
}

const PLACEHOLDERS: [(&str, &str); 19] = [
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

/// The words of a command line with placeholders (`RECIPE`, `--lock FILE`) made concrete.
fn argv(cmd: &str) -> Vec<String> {
    words(cmd)
        .into_iter()
        .map(|mut w| {
            for (p, v) in PLACEHOLDERS {
                if w == p || w.ends_with(&format!("={p}")) || w.ends_with(&format!(":{p}")) {
                    w = format!("{}{v}", &w[..w.len() - p.len()]);
                    break;
                }
            }
            w
        })
        .collect()
}

/// The subcommand a command line names (`repro env check ...` -> `env check`), and the
/// flags (long and short) it accepts, global options included.
fn command_of(line: &[String]) -> (String, Vec<String>) {
    // The internal commands (`repro gpu-job --serve`) are checked against their own
    // definitions.
    let first = line.iter().skip(1).find(|w| !w.starts_with('-'));
    let public = repro::cli::Cli::command();
    let mut cmd = match first {
        Some(w) if public.find_subcommand(w).is_none() => {
            let internal = repro::cli::Internal::command();
            if internal.find_subcommand(w).is_some() {
                internal
            } else {
                public
            }
        }
        _ => public,
    };
    cmd.build();
    let mut flags = flags_of(&cmd);
    let mut names = Vec::new();
    let mut words = line.iter().skip(1);
    while let Some(w) = words.next() {
        if w.starts_with('-') {
            // An option before the subcommand (`repro -C DIR build`): skip its value too.
            let takes = cmd.get_arguments().any(|a| {
                (a.get_long().is_some_and(|l| *w == format!("--{l}"))
                    || a.get_short().is_some_and(|s| *w == format!("-{s}")))
                    && a.get_num_args().is_some_and(|n| n.takes_values())
            });
            if takes {
                words.next();
            }
            continue;
        }
        match cmd.find_subcommand(w) {
            Some(sub) => {
                let sub = sub.clone();
                flags.extend(flags_of(&sub));
                names.push(w.clone());
                cmd = sub;
            }
            None => break,
        }
    }
    (names.join(" "), flags)
}

fn flags_of(cmd: &clap::Command) -> Vec<String> {
    let mut v = vec!["--help".to_string(), "-h".into(), "--version".into()];
    for a in cmd.get_arguments() {
        if let Some(l) = a.get_long() {
            v.push(format!("--{l}"));
        }
        for l in a.get_all_aliases().unwrap_or_default() {
            v.push(format!("--{l}"));
        }
        if let Some(s) = a.get_short() {
            v.push(format!("-{s}"));
        }
    }
    v
}

/// The flags a synopsis or mention names: `--lock`, `-o`, `--wheels` (values and
/// placeholders left out).
fn named_flags(cmd: &str) -> Vec<String> {
    cmd.split(|c: char| c.is_whitespace() || "[]|(),".contains(c))
        .filter(|w| {
            (w.starts_with("--") && w.len() > 2)
                || (w.len() == 2 && w.starts_with('-') && w[1..].chars().all(char::is_alphabetic))
        })
        .map(|w| w.split('=').next().unwrap().to_string())
        .collect()
}

#[test]
fn every_command_line_in_the_docs_parses() {
    use clap::Parser;
    let mut failures = Vec::new();
    let mut count = 0;
    // The command-line reference is generated from the definitions (its usage lines hold
    // `<VALUE>` placeholders); `the_cli_reference_is_current` checks it.
    for file in doc_files()
        .into_iter()
        .filter(|f| !f.ends_with("reference/cli.md"))
    {
        for shown in shown_commands(&read(&file)) {
            count += 1;
            match &shown {
                Shown::Full(cmd) => {
                    if let Err(e) = repro::cli::Cli::try_parse_from(argv(cmd)) {
                        let first = e.to_string().lines().next().unwrap_or_default().to_string();
                        failures.push(format!("{file}: {cmd}\n    {first}"));
                    }
                }
                Shown::Mention(cmd) | Shown::Synopsis(cmd) => {
                    let words = argv(cmd);
                    let (sub, flags) = command_of(&words);
                    if let Shown::Mention(_) = shown {
                        // The words before the first flag name real commands.
                        let mut names: Vec<String> = words
                            .iter()
                            .take_while(|w| !w.starts_with('-'))
                            .cloned()
                            .collect();
                        if names.get(1).is_none_or(|n| n != "help") {
                            names.push("--help".into());
                        }
                        // The internal commands (`repro bisect-step`) may be named too.
                        let internal = repro::cli::Internal::try_parse_from(&names);
                        match repro::cli::Cli::try_parse_from(&names) {
                            Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {}
                            Err(_)
                                if internal.as_ref().is_err_and(|e| {
                                    e.kind() == clap::error::ErrorKind::DisplayHelp
                                }) => {}
                            other => failures.push(format!(
                                "{file}: {cmd}\n    names no command: {:?}",
                                other.err().map(|e| e.kind())
                            )),
                        }
                    }
                    for flag in named_flags(cmd) {
                        if !flags.contains(&flag) {
                            failures.push(format!(
                                "{file}: {cmd}\n    `repro {sub}` has no option {flag}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(count > 100, "found only {count} command lines");
    assert!(
        failures.is_empty(),
        "command lines in the documentation that do not parse:\n{}",
        failures.join("\n")
    );
}

/// The command-line reference, generated from clap: every visible command with its usage,
/// its arguments and options with their help, and its subcommands.
fn cli_reference() -> String {
    let mut cmd = repro::cli::Cli::command();
    cmd.build();
    let mut out = String::from(
        "# Command-line reference\n\n\
         Every command and option, as `repro COMMAND --help` prints them (this page is generated \
         from the command-line definitions; `tests/readme.rs` checks that it is current, and \
         `REPRO_BLESS_DOCS=1 cargo test --test integration readme::` rewrites it). The guide explains what \
         each command does; the [global options](global-options.md) apply to every command, \
         and the [exit codes](exit-codes.md) are explained in full on their page.\n",
    );
    fn walk(cmd: &clap::Command, path: &str, out: &mut String) {
        for sub in visible(cmd) {
            let name = format!("{path} {}", sub.get_name());
            out.push_str(&format!("\n## `{name}`\n\n"));
            if let Some(about) = sub.get_long_about().or(sub.get_about()) {
                out.push_str(&format!("{about}\n\n"));
            }
            let mut sub_cmd = sub.clone();
            let usage = sub_cmd.render_usage().to_string();
            let usage = usage.trim_start_matches("Usage: ").trim();
            out.push_str(&format!("```text\n{usage}\n```\n"));
            let args: Vec<&clap::Arg> = sub
                .get_arguments()
                .filter(|a| !a.is_hide_set() && !a.is_global_set())
                .filter(|a| a.get_id() != "help" && a.get_id() != "version")
                .collect();
            if !args.is_empty() {
                out.push_str("\n| argument | meaning |\n| --- | --- |\n");
                for a in args {
                    out.push_str(&format!("| {} | {} |\n", arg_name(a), arg_help(a)));
                }
            }
            let codes = repro::exit::for_command(name.trim_start_matches("repro "))
                .expect("every command has its exit codes");
            out.push_str("\n| exit status | meaning |\n| --- | --- |\n");
            for (code, meaning) in codes {
                out.push_str(&format!("| {code} | {} |\n", meaning.replace('|', "\\|")));
            }
            walk(sub, &name, out);
        }
    }
    walk(&cmd, "repro", &mut out);
    out
}

/// The subcommands a user sees: not the hidden internal ones, not clap's `help`.
fn visible(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
}

fn arg_name(a: &clap::Arg) -> String {
    let value = a
        .get_value_names()
        .map(|v| {
            v.iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| a.get_id().to_string().to_uppercase());
    let takes = a.get_num_args().is_some_and(|n| n.takes_values());
    match (a.get_short(), a.get_long()) {
        (Some(s), Some(l)) if takes => format!("`-{s}`, `--{l} {value}`"),
        (Some(s), Some(l)) => format!("`-{s}`, `--{l}`"),
        (None, Some(l)) if takes => format!("`--{l} {value}`"),
        (None, Some(l)) => format!("`--{l}`"),
        (Some(s), None) => format!("`-{s}`"),
        (None, None) => format!("`{value}`"),
    }
}

fn arg_help(a: &clap::Arg) -> String {
    let mut help = a
        .get_help()
        .map(|h| h.to_string())
        .unwrap_or_default()
        .replace('\n', " ")
        .replace('|', "\\|");
    let possible: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !possible.is_empty() && a.get_num_args().is_some_and(|n| n.takes_values()) {
        help.push_str(&format!(" (one of {})", possible.join(", ")));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let takes = a.get_num_args().is_some_and(|n| n.takes_values());
    if !defaults.is_empty() && takes && !a.is_hide_default_value_set() {
        help.push_str(&format!(" [default: {}]", defaults.join(", ")));
    }
    help
}

/// Every subcommand and flag clap knows is in the command-line reference, which must be what
/// the definitions generate now; `REPRO_BLESS_DOCS=1` rewrites it.
#[test]
fn the_cli_reference_is_current() {
    let rel = "docs/src/reference/cli.md";
    let want = cli_reference();
    if std::env::var_os("REPRO_BLESS_DOCS").is_some() {
        std::fs::write(root().join(rel), &want).unwrap();
    }
    let have = read(rel);
    if have != want {
        let diff: Vec<String> = have
            .lines()
            .zip(want.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}:\n  have {a}\n  want {b}", i + 1))
            .collect();
        panic!(
            "{rel} is not what the command-line definitions generate (run \
             `REPRO_BLESS_DOCS=1 cargo test --test integration readme::the_cli_reference_is_current`):\n{}",
            diff.join("\n")
        );
    }
    // What the page promises, checked directly too: every visible command and long flag.
    let mut cmd = repro::cli::Cli::command();
    cmd.build();
    let mut missing = Vec::new();
    fn walk(cmd: &clap::Command, path: &str, page: &str, missing: &mut Vec<String>) {
        for sub in visible(cmd) {
            let name = format!("{path} {}", sub.get_name());
            let Some(at) = page.find(&format!("## `{name}`\n")) else {
                missing.push(name);
                continue;
            };
            let body = section(&page[at..], &format!("## `{name}`"));
            for a in sub.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(l) = a.get_long()
                    && !a.is_global_set()
                    && !body.contains(&format!("`--{l}"))
                    && l != "help"
                    && l != "version"
                {
                    missing.push(format!("{name} --{l}"));
                }
            }
            walk(sub, &name, page, missing);
        }
    }
    walk(&cmd, "repro", &have, &mut missing);
    assert!(missing.is_empty(), "{rel} lacks {missing:?}");
    let globals = read("docs/src/reference/global-options.md");
    for a in cmd.get_arguments().filter(|a| a.is_global_set()) {
        let flag = match (a.get_long(), a.get_short()) {
            (Some(l), _) => format!("--{l}"),
            (None, Some(s)) => format!("-{s}"),
            _ => continue,
        };
        assert!(
            globals.contains(&format!("`{flag}")),
            "the global option {flag} is not in docs/src/reference/global-options.md"
        );
    }
}

/// CI runs the README's test command, word for word, in a fresh clone with an empty home
/// and cache, and sets none of the variables a test could depend on.
#[test]
fn ci_runs_the_readme_test_command_in_a_fresh_clone() {
    let text = readme();
    let ci = read(".ci/run");
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

/// Every repository file a page names in backquotes exists.
#[test]
fn the_docs_name_only_files_that_exist() {
    let prefixes = [
        "src/",
        "tests/",
        "benches/",
        "kernels/",
        "recipes/",
        "lockfiles/",
        ".ci/",
        "docs/",
    ];
    let mut missing = Vec::new();
    for file in doc_files() {
        let text = read(&file);
        for (i, chunk) in text.split('`').enumerate() {
            // Odd chunks are inside backquotes: a lone path, or a command that runs a script
            // (`python3 benches/x.py ...`). Quoted messages (`file kernels/x.cuh is a new
            // input`) name example files and are left alone.
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
                if !root().join(w).exists() {
                    missing.push(format!("{file}: {w}"));
                }
            }
        }
        // Paths in layout blocks and in prose lists outside backquotes.
        for line in text.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            let first = first.trim_end_matches([',', ':']);
            if prefixes.iter().any(|p| first.starts_with(p))
                && !first.contains(['*', '<', '{'])
                && line.starts_with(first)
                && !root().join(first).exists()
            {
                missing.push(format!("{file}: {first}"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "the documentation names files that do not exist: {missing:?}"
    );
}

/// The anchor mdBook and GitHub give a heading: lower case, letters, digits, `-` and `_`
/// kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
        } else if !in_block && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Every relative link of every page leads to a file that exists, and to a heading of it
/// where it names one.
#[test]
fn every_link_in_the_docs_leads_somewhere() {
    let mut broken = Vec::new();
    for file in doc_files() {
        let text = read(&file);
        let dir = Path::new(&file).parent().unwrap_or(Path::new(""));
        for part in text.split("](").skip(1) {
            let target = part.split(')').next().unwrap_or("");
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target, None),
            };
            let dest: PathBuf = if path.is_empty() {
                PathBuf::from(&file)
            } else {
                normalize(&dir.join(path))
            };
            if !root().join(&dest).exists() {
                broken.push(format!("{file}: ({target}): no file {}", dest.display()));
                continue;
            }
            if let Some(anchor) = anchor
                && dest.extension().is_some_and(|x| x == "md")
                && !anchors(&read(&dest.to_string_lossy())).contains(anchor)
            {
                broken.push(format!("{file}: ({target}): no heading #{anchor}"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `a/b/../c` -> `a/c`, relative to the repository root.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// The book's table of contents lists every page, and every page it lists exists.
#[test]
fn the_summary_lists_every_page() {
    let summary = read("docs/src/SUMMARY.md");
    let listed: BTreeSet<String> = summary
        .split("](")
        .skip(1)
        .map(|p| format!("docs/src/{}", p.split(')').next().unwrap()))
        .collect();
    let pages: BTreeSet<String> = book_pages()
        .into_iter()
        .filter(|p| p != "docs/src/SUMMARY.md")
        .collect();
    let unlisted: Vec<_> = pages.difference(&listed).collect();
    let absent: Vec<_> = listed.difference(&pages).collect();
    assert!(unlisted.is_empty(), "pages not in SUMMARY.md: {unlisted:?}");
    assert!(
        absent.is_empty(),
        "SUMMARY.md lists missing pages: {absent:?}"
    );
    let book = read("docs/book.toml");
    assert!(book.contains("src = \"src\""), "docs/book.toml: {book}");
}

/// The README is a front door: what repro is, how to install and start, one example per
/// main command, and where to read on; the rest lives in the book.
#[test]
fn the_readme_is_short_and_links_the_book() {
    let text = readme();
    let lines = text.lines().count();
    assert!(lines <= 400, "README.md has {lines} lines (at most 400)");
    for heading in [
        "## Install",
        "## Quick start",
        "## Starting in your own repository",
    ] {
        assert!(
            text.contains(&format!("{heading}\n")),
            "README lacks {heading}"
        );
    }
    assert!(
        text.find("## Quick start") < text.find("## Starting in your own repository"),
        "starting in your own repository comes right after the quick start"
    );
    // One example per main command, in a code block.
    let full: Vec<String> = shown_commands(&text)
        .into_iter()
        .filter_map(|s| match s {
            Shown::Full(c) => Some(c),
            _ => None,
        })
        .collect();
    for command in [
        "env", "build", "bench", "compare", "bisect", "bundle", "replay", "plot", "demo",
    ] {
        assert!(
            full.iter()
                .any(|c| c == &format!("repro {command}")
                    || c.starts_with(&format!("repro {command} "))),
            "the README shows no example of `repro {command}`"
        );
    }
    assert!(text.contains("docs/src/SUMMARY.md"));
}

/// The README states the minimum Rust version Cargo.toml declares, and CI builds with it.
#[test]
fn the_readme_states_the_rust_version_ci_checks() {
    let manifest = read("Cargo.toml");
    let msrv = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("Cargo.toml states a rust-version");
    assert!(
        readme().contains(&format!("Rust {msrv} or newer")),
        "the README does not say `Rust {msrv} or newer`"
    );
    let ci = read(".ci/run");
    assert!(
        ci.contains("cargo \"+$msrv\" check --all-targets --locked"),
        "CI does not build with the stated rust-version"
    );
}

/// A command a page shows with its output: a `$ repro ...` line in a code block and the lines
/// after it, up to the next `$` line or the end of the block.
#[derive(Debug)]
struct Transcript {
    file: String,
    command: String,
    output: Vec<String>,
}

fn transcripts(file: &str, text: &str) -> Vec<Transcript> {
    let mut out: Vec<Transcript> = Vec::new();
    let mut in_block = false;
    let mut open = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            open = false;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ ") {
            open = cmd.starts_with("repro ");
            if open {
                out.push(Transcript {
                    file: file.to_string(),
                    command: cmd.to_string(),
                    output: Vec::new(),
                });
            }
        } else if open && let Some(t) = out.last_mut() {
            t.output.push(line.to_string());
        }
    }
    out
}

/// How a transcript is run here.
enum Run {
    /// In the repository as it is (the command reads only committed fixtures).
    InRepo,
    /// In a copy of the example kernels and recipes, with the pinned NVRTC, after one build
    /// of the recipe (so that the build shown is the cached one).
    Kernels(&'static str),
    /// Not here, and why.
    Not(&'static str),
}

/// Every transcript the documentation shows, by its command, with how it runs here. A new
/// transcript must be added: run, or say why it cannot be.
const TRANSCRIPTS: &[(&str, Run)] = &[
    (
        "repro env check --lock tests/fixtures/lockfile-v1.toml --fingerprint tests/fixtures/fingerprint-v1.json",
        Run::InRepo,
    ),
    ("repro build vector_add", Run::Kernels("vector_add")),
    ("repro build -v vector_add", Run::Kernels("vector_add")),
    (
        "repro build k",
        Run::Not("a recipe over its [build.limits]; tests/build/resources.rs runs it"),
    ),
    (
        "repro bisect --mode build --good v1.2 --bad HEAD --recipe flash_attention",
        Run::Not("needs a history tagged v1.2; tests/build/resources.rs bisects over budgets"),
    ),
    (
        "repro bisect --mode build --bad v1.3 --good HEAD --recipe flash_attention --find fixed",
        Run::Not("needs a history tagged v1.3; tests/build/resources.rs runs --find fixed"),
    ),
    (
        "repro profile vector_add --param n=67108864",
        Run::Not("needs a GPU and ncu; tests/profile_cli.rs runs it with a fake ncu"),
    ),
    (
        "repro profile vector_add --set full --metrics dram__bytes.sum.per_second,gpu__time_duration.sum",
        Run::Not("needs a GPU and ncu; tests/profile_cli.rs runs it with a fake ncu"),
    ),
    (
        "repro compare 3f9a1c2e 7b41d0aa",
        Run::Not("needs two profiles; tests/profile_cli.rs compares two"),
    ),
    (
        "repro push",
        Run::Not("needs a remote; tests/profile_cli.rs pushes and pulls profiles"),
    ),
    (
        "repro show 3f9a1c2e",
        Run::Not("needs a profile; tests/profile_cli.rs shows a result and its profile"),
    ),
    (
        "repro plot vector_add --metric dram__bytes.sum.per_second --sweep n -o dram.svg",
        Run::Not("needs profiles; tests/profile_cli.rs plots a metric of two"),
    ),
    (
        "repro bench vector_add --param n=67108864",
        Run::Not("needs a GPU; tests/bench/fakegpu.rs runs the roofline on the fake driver"),
    ),
    (
        "repro build --all",
        Run::Not(
            "needs nvcc installed (`toolchain install nvcc@13.0`, 266 MiB) for two of the recipes; tests/toolchain/cli.rs builds them",
        ),
    ),
    (
        "repro build softmax --explain",
        Run::Not("needs a changed kernels/common.cuh; tests/build/cli.rs tests --explain"),
    ),
    (
        "repro build attention",
        Run::Not(
            "needs nvcc installed and a kernel that warns before its error; tests/build/honest.rs builds one and checks the reason line",
        ),
    ),
    ("repro bench vector_add", Run::Not("needs a GPU")),
    (
        "repro log",
        Run::Not("needs a store with records made at those times"),
    ),
    ("repro env capture", Run::Not("shows the H200 machine")),
    (
        "repro toolchain install nvcc@13.0",
        Run::Not("downloads 266 MiB of wheels; CI runs it (.ci/run)"),
    ),
    (
        "repro build wmma_gemm_nvcc",
        Run::Not("needs nvcc installed; CI runs it (.ci/run)"),
    ),
    ("repro toolchain list", Run::Not("needs nvcc installed")),
    (
        "repro bisect --good v1.2 --bad main --recipe flash_attention",
        Run::Not("needs a history tagged v1.2; tests/bisect/cli.rs runs bisections"),
    ),
    (
        "repro bisect --toolchains nvrtc@12.8.93..nvrtc@13.0.88 --recipe va",
        Run::Not("downloads three NVRTC releases; tests/toolchain/cli.rs runs it"),
    ),
    (
        "repro bisect --toolchains nvcc@13.0..nvcc@13.1 --recipe popcount_cccl",
        Run::Not("downloads nvcc 13.1 (110 MB); opt-in test in tests/toolchain/cli.rs"),
    ),
    (
        "repro --python .venv-2.4/bin/python3 env capture",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
    (
        "repro --python .venv-2.4/bin/python3 env lock --name box",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
    (
        "repro --python .venv-2.5/bin/python3 env check   # exits 1",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
    (
        "repro --python .venv-2.4/bin/python3 bench attn-bench",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
    (
        "repro --python .venv-2.4/bin/python3 build attn",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
    (
        "repro --python .venv-2.4/bin/python3 build attn   # cached: nothing compiles",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
    (
        "repro --python .venv-2.5/bin/python3 env why-import attn   # exits 1",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
    (
        "repro --python .venv-2.5/bin/python3 build attn --explain",
        Run::Not(
            "needs PyTorch in two venvs; tests/torch_cli.rs runs the page's commands as written",
        ),
    ),
];

/// A line as compared: words, with every word that holds a digit (times, sizes, keys,
/// versions, abridged hashes such as `94ee72a0c5...`) reduced to `#`.
fn shape(line: &str) -> String {
    line.split_whitespace()
        .map(|w| {
            if w.chars().any(|c| c.is_ascii_digit()) {
                "#"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether every line a transcript shows is in the actual output, in order; a line `...`
/// stands for lines left out.
fn shows(expected: &[String], actual: &str) -> Result<(), String> {
    let actual: Vec<String> = actual.lines().map(shape).collect();
    let mut at = 0;
    for line in expected.iter().map(|l| shape(l)) {
        if line.is_empty() || line == "..." {
            continue;
        }
        match actual[at..].iter().position(|a| *a == line) {
            Some(i) => at += i + 1,
            None => return Err(format!("`{line}` is not in the output, in this order")),
        }
    }
    Ok(())
}

/// The transcripts of the documentation that can run here are run, and print what the page
/// shows (numbers and hashes aside); the others are listed with the reason.
#[test]
fn the_transcripts_in_the_docs_run() {
    let mut failures = Vec::new();
    let (mut ran, mut built) = (0, 0);
    for file in doc_files() {
        for t in transcripts(&file, &read(&file)) {
            let Some((_, how)) = TRANSCRIPTS.iter().find(|(c, _)| *c == t.command) else {
                failures.push(format!(
                    "{}: `{}` is not in TRANSCRIPTS: run it or say why not",
                    t.file, t.command
                ));
                continue;
            };
            let args: Vec<String> = words(&t.command).into_iter().skip(1).collect();
            let cache = tempfile::tempdir().unwrap();
            let (_keep, dir) = match how {
                Run::Not(why) => {
                    assert!(!why.is_empty(), "{}: say why", t.command);
                    continue;
                }
                Run::InRepo => (None, root().to_path_buf()),
                Run::Kernels(recipe) => {
                    if !common::nvrtc_available() {
                        continue;
                    }
                    let (tmp, kernels) = common::kernel_repo();
                    common::repro(cache.path())
                        .arg("-C")
                        .arg(&kernels)
                        .args(["build", recipe])
                        .assert()
                        .success();
                    built += 1;
                    (Some(tmp), kernels)
                }
            };
            let out = common::repro(cache.path())
                .arg("-C")
                .arg(&dir)
                .args(&args)
                .output()
                .unwrap();
            ran += 1;
            let text = String::from_utf8_lossy(&out.stdout);
            if let Err(why) = shows(&t.output, &text) {
                failures.push(format!(
                    "{}: `{}`: {why}\n--- it printed:\n{text}{}",
                    t.file,
                    t.command,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(ran >= 2, "ran only {ran} transcripts");
    // The build transcripts ran, unless NVRTC could not be provisioned (which says so).
    assert!(
        built >= 2 || !common::nvrtc_available(),
        "ran {built} builds"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn shapes_compare_words_not_numbers() {
    let shown = [
        "a  key 49a4d06a2f9a  1.3 ms".to_string(),
        "...".into(),
        "end".into(),
    ];
    assert!(shows(&shown, "x\na key 661bb896691c 0.2 ms\nmore\nend\n").is_ok());
    assert!(
        shows(&shown, "a key 661bb896691c 0.2 ms\n").is_err(),
        "a line is missing"
    );
    assert!(
        shows(&shown, "end\na key 1 2 ms\n").is_err(),
        "out of order"
    );
    assert!(
        shows(&shown, "a built 1 2 ms\nend\n").is_err(),
        "another word"
    );
}

/// The rows of the JSON reference: each command a row names, and the top-level keys the row
/// lists (backquoted words outside parentheses).
fn json_rows() -> Vec<(String, BTreeSet<String>)> {
    let page = read("docs/src/reference/json.md");
    let mut out = Vec::new();
    for line in page.lines().filter(|l| l.starts_with("| `repro ")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let mut depth = 0;
        let mut outside = String::new();
        for c in cells[1].chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                c if depth == 0 => outside.push(c),
                _ => {}
            }
        }
        let keys: BTreeSet<String> = outside
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        for cmd in cells[0].trim_start_matches("| ").split(", ") {
            out.push((cmd.trim_matches('`').to_string(), keys.clone()));
        }
    }
    out
}

/// What `--json` prints for the commands that run without a GPU or a compiler: every
/// top-level key is in the JSON reference's row for the command, and every key the row
/// lists is printed (where it is printed only sometimes, the row says when).
#[test]
fn the_json_reference_names_every_key_the_commands_print() {
    let (tmp, repo) = common::repo_with(&[("README", "a project\n")]);
    let cache = tmp.path().join("cache");
    let json = |args: &[&str]| -> serde_json::Value {
        let (code, out, err) = common::run_in(&cache, &repo, &[&["--json"], args].concat());
        // A report that says no (1) or that this machine lacks something (3) is JSON too.
        assert!([0, 1, 3].contains(&code), "repro {args:?}: {code}\n{err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("repro {args:?}: {e}\n{out}"))
    };
    let bench = json(&["bench", "--command", "true", "--name", "t", "--runs", "3"]);
    let a = bench["results"][0]["id"].as_str().unwrap().to_string();
    let b = json(&["bench", "--command", "true", "--name", "t", "--runs", "3"])["results"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let bundle = tmp.path().join("b.tar.zst");
    let bundle = bundle.to_str().unwrap();
    let lock = tmp.path().join("l.toml");
    let fixtures = root().join("tests/fixtures");
    let (fl, ff) = (
        fixtures.join("lockfile-v1.toml"),
        fixtures.join("fingerprint-v1.json"),
    );
    let svg = tmp.path().join("p.svg");
    let printed: Vec<(&str, serde_json::Value)> = vec![
        ("repro bench", bench),
        (
            "repro env check",
            json(&[
                "env",
                "check",
                "--lock",
                fl.to_str().unwrap(),
                "--fingerprint",
                ff.to_str().unwrap(),
            ]),
        ),
        (
            "repro env lock",
            json(&["env", "lock", "-o", lock.to_str().unwrap()]),
        ),
        ("repro toolchain list", json(&["toolchain", "list"])),
        ("repro toolchain which", json(&["toolchain", "which"])),
        ("repro store path", json(&["store", "path"])),
        ("repro store verify", json(&["store", "verify"])),
        ("repro store gc", json(&["store", "gc"])),
        ("repro log", json(&["log"])),
        ("repro show", json(&["show", &a])),
        ("repro compare", json(&["compare", &a, &b])),
        (
            "repro bundle create",
            json(&["bundle", "create", &a, "-o", bundle]),
        ),
        ("repro bundle verify", json(&["bundle", "verify", bundle])),
        ("repro bundle show", json(&["bundle", "show", bundle])),
        (
            "repro plot",
            json(&["plot", "t", "-o", svg.to_str().unwrap()]),
        ),
    ];
    // Keys a row lists that these runs need not print, and why.
    let sometimes = [
        ("repro env check", "toolchains"), // only when the project pins toolchains
    ];
    let rows = json_rows();
    let mut problems = Vec::new();
    for (cmd, v) in &printed {
        let Some((_, documented)) = rows.iter().find(|(c, _)| c == cmd) else {
            problems.push(format!("{cmd}: no row in docs/src/reference/json.md"));
            continue;
        };
        let keys: BTreeSet<String> = v.as_object().unwrap().keys().cloned().collect();
        assert!(keys.contains("schema"), "{cmd} prints no schema: {v}");
        if documented.is_empty() {
            // The row says it prints a stored record, whose layout is the record's.
            continue;
        }
        for k in keys.iter().filter(|k| *k != "schema") {
            if !documented.contains(k) {
                problems.push(format!("{cmd}: prints `{k}`, which its row does not list"));
            }
        }
        for k in documented {
            let is_key = k.chars().all(|c| c.is_ascii_lowercase() || c == '-');
            if is_key && !keys.contains(k) && !sometimes.contains(&(*cmd, k.as_str())) {
                problems.push(format!(
                    "{cmd}: its row lists `{k}`, which it does not print"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A bench script that takes `--repro PATH` runs that binary everywhere: the default path
/// appears only as the option's default.
#[test]
fn bench_scripts_use_their_repro_option_throughout() {
    let dir = root().join("benches");
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
