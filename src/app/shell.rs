//! `repro completions SHELL` and `repro man`: shell integration generated from the clap
//! definitions, so they can never disagree with the real command line.

use crate::app::context::{Globals, emit};
use crate::foundation::exit;

/// Arguments of `repro completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, required_unless_present = "candidates")]
    shell: Option<clap_complete::Shell>,
    /// Internal, for the scripts: print the recipe names of this project, or the IDs of
    /// the records in its store, one a line.
    #[arg(long, value_enum, hide = true, conflicts_with = "shell")]
    candidates: Option<Candidates>,
}

/// What `completions --candidates` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Candidates {
    /// `recipes/*.toml` at the project root, by name.
    Recipes,
    /// Every record in the store, by short ID.
    Records,
}

/// The completion scripts call `repro completions --candidates` for the arguments that name
/// things of this project: recipes (`build`, `bench`, `plot`, `--recipe`) and records
/// (`show`, `compare`, `replay`, `bundle create`). clap's static scripts cannot know them.
const BASH_NAMES: &str = r#"
_repro_with_names() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" sub="" i what=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            -C|--store) ((i++)) ;;
            -*) ;;
            *) sub="${COMP_WORDS[i]}"; break ;;
        esac
    done
    if [[ "$prev" == "--recipe" ]]; then
        what=recipes
    elif [[ "$cur" != -* && "$prev" != -* ]]; then
        case "$sub" in
            build|bench|plot) what=recipes ;;
            show|compare|replay) what=records ;;
            bundle) [[ "${COMP_WORDS[i+1]}" == create && $COMP_CWORD -gt $((i+1)) ]] && what=records ;;
        esac
    fi
    if [[ -n "$what" ]]; then
        COMPREPLY=($(compgen -W "$(repro completions --candidates "$what" 2>/dev/null)" -- "$cur"))
        [[ ${#COMPREPLY[@]} -gt 0 ]] && return 0
    fi
    _repro "$@"
}
complete -F _repro_with_names -o bashdefault -o default repro
"#;

const ZSH_NAMES: &str = r#"
_repro_with_names() {
    local what=""
    if [[ ${words[CURRENT-1]} == --recipe ]]; then
        what=recipes
    elif (( CURRENT > 2 )) && [[ ${words[CURRENT]} != -* ]]; then
        case ${words[2]} in
            build|bench|plot) what=recipes ;;
            show|compare|replay) what=records ;;
        esac
    fi
    if [[ -n $what ]]; then
        local -a names
        names=(${(f)"$(repro completions --candidates $what 2>/dev/null)"})
        (( ${#names} )) && compadd -a names && return 0
    fi
    _repro "$@"
}
compdef _repro_with_names repro
"#;

const FISH_NAMES: &str = r#"
complete -c repro -n "__fish_seen_subcommand_from build bench plot" -f -a "(repro completions --candidates recipes 2>/dev/null)"
complete -c repro -n "__fish_seen_subcommand_from show compare replay" -f -a "(repro completions --candidates records 2>/dev/null)"
complete -c repro -l recipe -f -a "(repro completions --candidates recipes 2>/dev/null)"
"#;

/// Arguments of `repro man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Print the page of this command (`repro man bisect`: repro-bisect(1); `repro man env
    /// check` or `repro man repro-env-check`: repro-env-check(1)).
    #[arg(value_name = "COMMAND", value_parser = crate::app::context::non_empty())]
    command: Vec<String>,
    /// Write every page, repro.1 and one repro-COMMAND.1 per command and subcommand, into DIR.
    #[arg(long, value_name = "DIR", conflicts_with = "command", value_parser = crate::app::context::non_empty_path())]
    out_dir: Option<std::path::PathBuf>,
}

/// Prints a completion script (`repro completions bash > /etc/bash_completion.d/repro`).
pub fn completions(g: &Globals, a: CompletionsArgs, cli: clap::Command) -> anyhow::Result<u8> {
    if let Some(what) = a.candidates {
        let names: Vec<String> = match what {
            Candidates::Recipes => recipe_names(&g.project_root()),
            Candidates::Records => crate::engines::catalog::list(&g.store(), &[])
                .into_iter()
                .map(|(e, _)| crate::foundation::keys::short(&e.id).to_string())
                .collect(),
        };
        let mut text = names.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        emit(&text)?;
        return Ok(exit::OK);
    }
    let shell = a.shell.expect("clap requires a shell without --candidates");
    let mut cmd = cli;
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "repro", &mut out);
    let mut text = String::from_utf8_lossy(&out).into_owned();
    text.push_str(match shell {
        clap_complete::Shell::Bash => BASH_NAMES,
        clap_complete::Shell::Zsh => ZSH_NAMES,
        clap_complete::Shell::Fish => FISH_NAMES,
        _ => "",
    });
    emit(&text)?;
    Ok(exit::OK)
}

/// The names of `recipes/*.toml` under `root`, sorted.
pub fn recipe_names(root: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("recipes"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

/// Prints a man page in roff (`repro man > repro.1; man ./repro.1`), or writes them all.
pub fn man(g: &Globals, a: ManArgs, cli: clap::Command) -> anyhow::Result<u8> {
    let pages = man_pages(cli);
    if let Some(dir) = &a.out_dir {
        let dir = g.cwd.join(dir);
        for page in &pages {
            let file = dir.join(format!("{}.1", page.name));
            crate::foundation::fsutil::write_output(&file, &render_page(page, &pages)?, true)?;
        }
        if !g.quiet {
            emit(&format!(
                "wrote {} man pages to {}\n",
                pages.len(),
                g.shown(&dir)
            ))?;
        }
        return Ok(exit::OK);
    }
    // `env check`, `"env check"`, `repro env check` and `repro-env-check` name one page.
    let words: Vec<&str> = a
        .command
        .iter()
        .flat_map(|w| w.split_whitespace())
        .collect();
    let wanted = match words.as_slice() {
        [] => "repro".to_string(),
        [one] if one.starts_with("repro") => one.to_string(),
        ["repro", rest @ ..] => format!("repro-{}", rest.join("-")),
        rest => format!("repro-{}", rest.join("-")),
    };
    let Some(page) = pages.iter().find(|p| p.name == wanted) else {
        return Err(crate::foundation::error::UserError::usage(format!(
            "no command `{}`",
            words.join(" ")
        ))
        .hint(format!(
            "commands with a page: {}",
            pages
                .iter()
                .filter_map(|p| p.name.strip_prefix("repro-"))
                .map(|n| n.replace('-', " "))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into());
    };
    emit(&String::from_utf8_lossy(&render_page(page, &pages)?))?;
    Ok(exit::OK)
}

/// One man page: a command a user sees, with its path of names.
struct Page {
    /// `repro-env-check`, the page's name (git's convention).
    name: String,
    /// `env check`; empty for `repro` itself.
    path: String,
    /// The command, built, so that its bin name (`repro env check`) and display name are set.
    cmd: clap::Command,
}

/// Every page: `repro` and each visible command and subcommand, depth first.
fn man_pages(cli: clap::Command) -> Vec<Page> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<Page>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let sub_path = format!("{path} {}", sub.get_name()).trim().to_string();
            out.push(Page {
                name: format!("repro-{}", sub_path.replace(' ', "-")),
                path: sub_path.clone(),
                cmd: sub.clone(),
            });
            walk(sub, &sub_path, out);
        }
    }
    let mut root = cli.disable_help_subcommand(true);
    root.build();
    let mut out = vec![Page {
        name: "repro".into(),
        path: String::new(),
        cmd: root.clone(),
    }];
    walk(&root, "", &mut out);
    out
}

/// A page in roff: clap_mangen's sections (name, synopsis, description, options,
/// subcommands, version), then EXIT STATUS from `foundation/exit.rs` and SEE ALSO.
fn render_page(page: &Page, pages: &[Page]) -> anyhow::Result<Vec<u8>> {
    use roff::{Roff, bold, roman};
    let cmd = page.cmd.clone().display_name(page.name.clone());
    let man = clap_mangen::Man::new(cmd.clone())
        .title(page.name.to_uppercase())
        .source(format!("repro {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    let codes = if page.path.is_empty() {
        let mut all = exit::ALL.to_vec();
        all.sort_by_key(|(c, _)| *c);
        all
    } else {
        exit::for_command(&page.path).unwrap_or_else(|| exit::ALL.to_vec())
    };
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in codes {
        roff.control("TP", []).text([bold(code.to_string())]);
        roff.text([roman(meaning)]);
    }
    // The page above this one and the pages below it.
    let parent = match page.path.rsplit_once(' ') {
        Some((up, _)) => format!("repro-{}", up.replace(' ', "-")),
        None => "repro".into(),
    };
    let mut see: Vec<String> = Vec::new();
    if !page.path.is_empty() {
        see.push(parent.clone());
    }
    see.extend(
        pages
            .iter()
            .filter(|p| {
                !p.path.is_empty() && p.path.rsplit_once(' ').map_or("", |(up, _)| up) == page.path
            })
            .map(|p| p.name.clone()),
    );
    roff.control("SH", ["SEE ALSO"]);
    let mut refs = Vec::new();
    for (i, name) in see.iter().enumerate() {
        if i > 0 {
            refs.push(roman(", "));
        }
        refs.push(bold(name.clone()));
        refs.push(roman("(1)"));
    }
    if !see.is_empty() {
        refs.push(roman(". "));
    }
    refs.push(roman(
        "The guide and the reference are the book in repro's source, docs/src/SUMMARY.md.",
    ));
    roff.text(refs);
    roff.to_writer(&mut out)?;
    man.render_version_section(&mut out)?;
    Ok(one_preamble(&out))
}

/// Each section clap_mangen renders on its own starts with the same two lines that define
/// the apostrophe string; a page needs them once, at the top.
fn one_preamble(roff: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(roff);
    let preamble = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";
    let mut rest = text.replacen(preamble, "", usize::MAX);
    if text.starts_with(preamble) {
        rest.insert_str(0, preamble);
    }
    rest.into_bytes()
}
