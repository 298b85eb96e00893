//! What every subcommand shares: the global options (`-C`, `--json`, `-q`, `-v`,
//! `--store`), the project root and store they lead to, and writing to stdout.

use std::io::Write;
use std::path::PathBuf;

/// Options every command sees.
#[derive(Clone, Debug)]
pub struct Globals {
    /// The directory to act in (after `-C`).
    pub cwd: PathBuf,
    /// `--json`.
    pub json: bool,
    /// `-q`.
    pub quiet: bool,
    /// `-v` count.
    pub verbose: u8,
    /// `--store` / `REPRO_STORE`.
    pub store: Option<PathBuf>,
    /// `--offline` / `REPRO_OFFLINE`: no network (no toolchain installs on first use, no
    /// promisor fetches).
    pub offline: bool,
    /// `--python` / `REPRO_PYTHON`, absolute.
    pub python: Option<PathBuf>,
    /// The project root, found on first use (git discovery opens the repository).
    root: std::sync::OnceLock<PathBuf>,
}

impl Globals {
    /// The options as parsed, with the project root not yet looked for.
    pub fn new(cwd: PathBuf, json: bool, quiet: bool, verbose: u8, store: Option<PathBuf>) -> Self {
        Globals {
            cwd,
            json,
            quiet,
            verbose,
            store,
            offline: crate::engines::toolchain::resolve::offline(false),
            python: None,
            root: Default::default(),
        }
    }

    /// The same options with `--python` set.
    pub fn with_python(mut self, python: Option<PathBuf>) -> Self {
        self.python = python;
        self
    }

    /// The fingerprint's view of where this command runs.
    pub fn fingerprint_context(&self, fresh: bool) -> crate::engines::fingerprint::Context {
        crate::engines::fingerprint::Context {
            cwd: self.cwd.clone(),
            fresh,
            python: self.python.clone(),
        }
    }

    /// The project root: the repository's working tree, or the current directory.
    pub fn project_root(&self) -> PathBuf {
        self.root
            .get_or_init(|| {
                // Internal: a bisection step's scratch tree lies inside the user's repository
                // (under the store); the step's child repro is told that the tree is the
                // project, or it would find the repository around it and build that.
                if let Some(root) = std::env::var_os(crate::foundation::git::PROJECT_ROOT_VAR) {
                    return PathBuf::from(root);
                }
                crate::foundation::git::discover_root(&self.cwd).unwrap_or_else(|| self.cwd.clone())
            })
            .clone()
    }

    /// The store: `--store`, `REPRO_STORE`, or `.repro` at the project root.
    pub fn store(&self) -> crate::foundation::store::Store {
        match &self.store {
            Some(p) if p.is_absolute() => crate::foundation::store::Store::at(p),
            Some(p) => crate::foundation::store::Store::at(self.cwd.join(p)),
            None => crate::foundation::store::Store::at(self.project_root().join(".repro")),
        }
    }

    /// A path for messages: relative to the current directory when inside it.
    pub fn shown(&self, p: &std::path::Path) -> String {
        match p.strip_prefix(&self.cwd) {
            // The working directory itself: `.`, never an empty name.
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.display().to_string(),
            Err(_) => p.display().to_string(),
        }
    }

    /// The project's settings (`repro.toml` at the project root). Commands pass what the
    /// engines need of them explicitly (the toolchain pins as `toolchain::Pins`).
    pub fn config(
        &self,
    ) -> Result<crate::foundation::config::Config, crate::foundation::config::ConfigError> {
        crate::foundation::config::load(&self.project_root())
    }

    /// The project's toolchain pins, with the project they belong to.
    pub fn pins(
        &self,
    ) -> Result<crate::engines::toolchain::Pins, crate::foundation::config::ConfigError> {
        let root = self.project_root();
        Ok(crate::engines::toolchain::Pins::of_project(
            &crate::foundation::config::load(&root)?.toolchain,
            &root,
        ))
    }
}

/// Writes to stdout; a closed stdout (`repro ... | head`) is not an error.
pub fn emit(text: &str) -> anyhow::Result<()> {
    // Every byte of human output passes the one escaping function: records, commit subjects
    // and logs from elsewhere cannot reach the terminal as escape sequences.
    let colour = crate::foundation::output::Style::for_stdout().colour();
    write_stdout(&crate::foundation::output::terminal_safe(text, colour))
}

fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes one line to stderr through the one escaping function (colour kept only where
/// stderr shows it): what `eprintln!` would print, made safe. Use through `say!`.
pub fn say(text: &str) {
    use std::io::Write as _;
    let colour = crate::foundation::output::Style::for_stderr().colour();
    let text = crate::foundation::output::terminal_safe(text, colour);
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Writes a JSON value to stdout, pretty-printed.
pub fn emit_json(value: &serde_json::Value) -> anyhow::Result<()> {
    emit_json_text(&format!("{}\n", serde_json::to_string_pretty(value)?))
}

/// Writes serialised JSON to stdout, made terminal-safe without changing its meaning.
pub fn emit_json_text(text: &str) -> anyhow::Result<()> {
    write_stdout(&crate::foundation::output::json_safe(text))
}

/// The value parser of every option and argument that names something (a recipe, a
/// result, a command, a metric): an empty string names nothing, so it is a usage error
/// naming the option (exit 2), not a nameless record or a filter that matches nothing.
pub fn non_empty() -> clap::builder::NonEmptyStringValueParser {
    clap::builder::NonEmptyStringValueParser::new()
}

/// The value parser of a time limit (`--timeout`): a duration as humantime reads it, and
/// not zero: a limit of nothing would kill every run (or not, by a race) and record that.
pub fn time_limit(s: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(s.trim()) {
        Ok(d) if d.is_zero() => Err("a time limit of zero would stop every run at once; give a positive duration such as 10m".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// [`non_empty`] for paths: an empty path is refused, any other (not UTF-8 included) is
/// taken as it is.
pub fn non_empty_path() -> NonEmptyPath {
    NonEmptyPath
}

/// The value parser [`non_empty_path`] returns.
#[derive(Clone, Copy, Debug)]
pub struct NonEmptyPath;

impl clap::builder::TypedValueParser for NonEmptyPath {
    type Value = PathBuf;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<PathBuf, clap::Error> {
        if value.is_empty() {
            // The same error clap gives an empty string: "a value is required for
            // '--output <FILE>' but none was supplied".
            return clap::builder::NonEmptyStringValueParser::new()
                .parse_ref(cmd, arg, value)
                .map(PathBuf::from);
        }
        Ok(PathBuf::from(value))
    }
}

/// The options every command takes, before or after the subcommand.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// Act as if started in DIR (like `git -C`).
    #[arg(short = 'C', value_name = "DIR", global = true, value_parser = crate::app::context::non_empty_path())]
    pub dir: Option<PathBuf>,
    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print less: only problems.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print more (repeat for even more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Use no network: a pinned toolchain that is not installed is an error instead of
    /// installing itself, and a partial clone's missing blobs are not fetched (also
    /// REPRO_OFFLINE=1).
    #[arg(long, global = true)]
    pub offline: bool,
    /// The store directory [default: .repro at the project root].
    #[arg(long, global = true, value_name = "DIR", env = "REPRO_STORE")]
    pub store: Option<PathBuf>,
    /// The Python interpreter (or environment directory) to describe and build torch
    /// extensions for [default: repro.toml's [python] interpreter, the active venv or conda
    /// environment, python3 on PATH].
    #[arg(long, global = true, value_name = "PATH", env = "REPRO_PYTHON")]
    pub python: Option<PathBuf>,
}

/// The global options, checked: `-C DIR` must be a directory.
pub(crate) fn globals(g: GlobalArgs) -> anyhow::Result<Globals> {
    let cwd = match &g.dir {
        Some(dir) => {
            let meta = std::fs::metadata(dir);
            if !meta.as_ref().is_ok_and(|m| m.is_dir()) {
                let why = match meta {
                    Err(e) => e.to_string(),
                    Ok(_) => "not a directory".into(),
                };
                return Err(crate::foundation::error::UserError::usage(format!(
                    "cannot use -C {}: {why}",
                    dir.display()
                ))
                .hint("pass an existing directory")
                .into());
            }
            std::path::absolute(dir)?
        }
        None => std::env::current_dir()?,
    };
    // An empty REPRO_STORE or REPRO_PYTHON is unset, as an empty XDG_CACHE_HOME is (clap
    // hands the empty value on); so these two take no non-empty parser.
    let set = |p: Option<PathBuf>| p.filter(|p| !p.as_os_str().is_empty());
    let python = set(g.python).map(|p| cwd.join(p));
    let mut globals =
        Globals::new(cwd, g.json, g.quiet, g.verbose, set(g.store)).with_python(python);
    globals.offline |= g.offline;
    Ok(globals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_limit_is_a_positive_duration_and_bisects_default_is_the_engines() {
        assert_eq!(
            time_limit("10m"),
            Ok(crate::engines::bisect::DEFAULT_STEP_TIMEOUT)
        );
        assert_eq!(time_limit(" 90s "), Ok(std::time::Duration::from_secs(90)));
        for bad in ["0s", "0", "0ms", "-1s", "5 parsecs", ""] {
            assert!(time_limit(bad).is_err(), "{bad}");
        }
    }
}
