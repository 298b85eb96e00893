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
    /// Print the page of this subcommand (`repro man bisect`: repro-bisect(1)).
    #[arg(value_name = "SUBCOMMAND")]
    command: Option<String>,
    /// Write every page, repro.1 and one repro-SUBCOMMAND.1 per subcommand, into DIR.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
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

/// Prints the man page in roff (`repro man > repro.1; man ./repro.1`).
pub fn man(g: &Globals, a: ManArgs, cli: clap::Command) -> anyhow::Result<u8> {
    let root = cli;
    let page = |cmd: clap::Command| -> anyhow::Result<Vec<u8>> {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        Ok(out)
    };
    // A subcommand's page is named `repro-NAME`, as git's are.
    let sub_page = |sub: &clap::Command| {
        // clap takes a command's name as a static string; this process prints and exits.
        let name: &'static str = Box::leak(format!("repro-{}", sub.get_name()).into_boxed_str());
        sub.clone().name(name).bin_name(name)
    };
    let visible: Vec<&clap::Command> = root
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .collect();
    if let Some(dir) = &a.out_dir {
        let dir = g.cwd.join(dir);
        let mut n = 0;
        let mut pages = vec![("repro.1".to_string(), page(root.clone())?)];
        for sub in &visible {
            pages.push((format!("repro-{}.1", sub.get_name()), page(sub_page(sub))?));
        }
        for (file, bytes) in pages {
            crate::foundation::fsutil::write_atomic(&dir.join(&file), &bytes, true)?;
            n += 1;
        }
        if !g.quiet {
            emit(&format!("wrote {n} man pages to {}\n", g.shown(&dir)))?;
        }
        return Ok(exit::OK);
    }
    let bytes = match &a.command {
        None => page(root.clone())?,
        Some(name) => match visible.iter().find(|c| c.get_name() == name) {
            Some(sub) => page(sub_page(sub))?,
            None => {
                return Err(crate::foundation::error::UserError::usage(format!(
                    "no subcommand `{name}`"
                ))
                .hint(format!(
                    "subcommands: {}",
                    visible
                        .iter()
                        .map(|c| c.get_name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .into());
            }
        },
    };
    emit(&String::from_utf8_lossy(&bytes))?;
    Ok(exit::OK)
}
