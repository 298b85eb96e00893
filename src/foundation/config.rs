//! The project's settings file, `repro.toml` at the project root (optional).
//!
//! ```toml
//! schema = 1
//! [toolchain.nvrtc]
//! version = "13.0.88"                       # the nvidia-cuda-nvrtc wheel version
//! sha256 = { x86_64 = "ad9b6d2e..." }       # the wheel's sha256, per CPU architecture
//!
//! [toolchain]
//! nvcc-default = "13.0"                     # the nvcc release nvcc recipes use
//!
//! [python]
//! interpreter = ".venv/bin/python"          # the environment torch extensions build for
//!
//! [toolchain.nvcc."13.0"]                   # one nvcc release: the wheels of one tree
//! wheels = [
//!   { package = "nvidia-cuda-nvcc", version = "13.0.88", sha256 = { x86_64 = "...", aarch64 = "..." } },
//!   # ... nvvm, crt, runtime, cccl
//! ]
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// The config schema this build reads.
pub const SCHEMA: i64 = 1;

/// The file name at the project root.
pub const FILE: &str = "repro.toml";

/// The project's settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    /// Always 1 for now; a file that leaves it out is read as 1.
    #[serde(default = "default_schema")]
    pub schema: i64,
    /// Pinned toolchains.
    #[serde(default)]
    pub toolchain: Toolchains,
    /// Building inside the project's Nix dev shell.
    #[serde(default)]
    pub nix: NixSettings,
    /// The site's Slurm options, for `--executor slurm`.
    #[serde(default)]
    pub slurm: SlurmSettings,
    /// The Python environment the project uses.
    #[serde(default)]
    pub python: PythonSettings,
}

fn default_schema() -> i64 {
    SCHEMA
}

impl Default for Config {
    fn default() -> Self {
        Config {
            schema: SCHEMA,
            toolchain: Toolchains::default(),
            nix: NixSettings::default(),
            slurm: SlurmSettings::default(),
            python: PythonSettings::default(),
        }
    }
}

/// `[slurm]`: what every job of `--executor slurm` is submitted with.
///
/// ```toml
/// [slurm]
/// options = ["--partition=gpu", "--qos=normal", "--constraint=h100", "--gres=gpu:h100:1"]
/// export = ["HF_HOME"]     # variables passed to jobs besides repro's own list
/// ```
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SlurmSettings {
    /// sbatch/srun options, each one `--name=value` (or `--flag`).
    #[serde(default)]
    pub options: Vec<String>,
    /// Environment variables jobs get, besides repro's own list.
    #[serde(default)]
    pub export: Vec<String>,
}

/// The options of sbatch/srun that repro sets itself for each job (or must not be set:
/// they would change how repro waits for or reads the job).
pub const SLURM_OWN_OPTIONS: &[&str] = &[
    "job-name",
    "chdir",
    "output",
    "error",
    "input",
    "export",
    "export-file",
    "ntasks",
    "test-only",
    "wrap",
    "parsable",
    "wait",
    "array",
    "pty",
    "verbose",
    "quiet",
    "time",
    "exact",
    "overlap",
    "unbuffered",
    "label",
    "kill-on-bad-exit",
    "hold",
    "help",
    "usage",
];

/// Why a site option cannot be passed to Slurm as given: one `--name=value` or `--flag`
/// per entry, not an option repro sets itself. `None` when it can.
pub fn slurm_option_problem(opt: &str) -> Option<String> {
    let Some(body) = opt.strip_prefix("--") else {
        return Some(format!(
            "`{opt}` is not a long option: write each as --name=value (e.g. --partition=gpu)"
        ));
    };
    let name = body.split_once('=').map_or(body, |(n, _)| n);
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return Some(format!("`{opt}` does not name an option"));
    }
    if opt.chars().any(|c| c.is_control()) {
        return Some(format!(
            "`{}` holds a control character",
            opt.escape_debug()
        ));
    }
    if SLURM_OWN_OPTIONS.contains(&name) {
        return Some(if name == "time" {
            format!("`{opt}`: the time limit is --time-limit (checked against --timeout)")
        } else if name == "export" || name == "export-file" {
            format!(
                "`{opt}`: repro passes an explicit export list; add names to `[slurm] export` or --slurm-export"
            )
        } else {
            format!("`{opt}`: repro sets --{name} itself")
        });
    }
    None
}

/// Whether `name` can be an environment variable's name.
pub fn env_name_ok(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `[python]`: which interpreter the fingerprint describes and torch extensions build for.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PythonSettings {
    /// The interpreter (or an environment's directory), relative to the project root;
    /// `--python` overrides it.
    pub interpreter: Option<String>,
}

impl PythonSettings {
    /// The interpreter as an absolute path, if one is set.
    pub fn interpreter_at(&self, root: &Path) -> Option<std::path::PathBuf> {
        self.interpreter.as_ref().map(|p| root.join(p))
    }
}

/// `[nix]`: whether builds run inside the flake's dev shell, and which shell.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NixSettings {
    /// Run builds inside `nix develop` (as `--nix` does) unless `--no-nix` is given.
    #[serde(default)]
    pub build: bool,
    /// The dev shell: `devShells.<system>.<shell>`.
    #[serde(default = "default_shell")]
    pub shell: String,
}

fn default_shell() -> String {
    "default".into()
}

impl Default for NixSettings {
    fn default() -> Self {
        NixSettings {
            build: false,
            shell: default_shell(),
        }
    }
}

/// Pinned toolchains.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Toolchains {
    /// The NVRTC wheel that `repro toolchain install` provisions.
    pub nvrtc: Option<NvrtcPin>,
    /// nvcc releases by name (`13.0`): the wheels that make up each one's tree.
    #[serde(default)]
    pub nvcc: BTreeMap<String, NvccRelease>,
    /// The nvcc release (a key of `nvcc`) that nvcc recipes use unless they name one.
    pub nvcc_default: Option<String>,
}

/// One pinned nvcc release: every wheel its tree is unpacked from.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NvccRelease {
    /// The wheels, each pinned by version and sha256 per CPU architecture.
    pub wheels: Vec<WheelPin>,
}

/// One wheel of a toolchain, pinned.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WheelPin {
    /// The Python package (`nvidia-cuda-nvcc`).
    pub package: String,
    /// Its exact version.
    pub version: String,
    /// The wheel's sha256 per CPU architecture (`x86_64`, `aarch64`).
    pub sha256: BTreeMap<String, String>,
}

/// A pinned NVRTC wheel.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NvrtcPin {
    /// The `nvidia-cuda-nvrtc` version.
    pub version: String,
    /// The wheel's sha256 per CPU architecture (`x86_64`, `aarch64`).
    #[serde(default)]
    pub sha256: BTreeMap<String, String>,
}

/// A settings file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", located(.path, *.line, *.column))]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// 1-based line; 0 when the error is the whole file's (it cannot be read).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// What to do, where the general pointer to the reference does not say it.
    pub hint: Option<String>,
    /// Why the file could not be read, when it could not (boxed: this error travels
    /// inside build and replay errors, which are kept small).
    #[source]
    pub source: Option<Box<std::io::Error>>,
}

/// `repro.toml:3:7`, or `repro.toml` for an error about the whole file.
fn located(path: &str, line: usize, column: usize) -> String {
    if line == 0 {
        path.to_string()
    } else {
        format!("{path}:{line}:{column}")
    }
}

impl Diagnose for ConfigError {
    fn exit_code(&self) -> u8 {
        match &self.source {
            Some(e) => crate::foundation::fsutil::read_exit_code(e),
            None => exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        if let (None, Some(e)) = (&self.hint, &self.source) {
            return Some(crate::foundation::fsutil::read_hint(e).into());
        }
        Some(self.hint.clone().unwrap_or_else(|| {
            "repro's book documents repro.toml (docs/src/reference/repro-toml.md)".into()
        }))
    }
}

/// The largest `repro.toml` read (it is a page of TOML).
pub const MAX_BYTES: u64 = 1 << 20;

/// `repro.toml`'s text, or `None` when there is no such file. Only a missing file means
/// "no settings": one that cannot be read (not UTF-8, a directory, EACCES) is an error,
/// since treating it as absent would drop its pins and build unpinned.
pub fn read_text(root: &Path) -> Result<Option<String>, ConfigError> {
    let whole = |message: String, source: Option<Box<std::io::Error>>| ConfigError {
        path: FILE.into(),
        line: 0,
        column: 0,
        message,
        hint: None,
        source,
    };
    let bytes = match crate::foundation::fsutil::read_bounded(&root.join(FILE), MAX_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(whole("cannot be read".into(), Some(Box::new(e)))),
    };
    String::from_utf8(bytes).map(Some).map_err(|e| ConfigError {
        hint: Some(format!("save {FILE} as UTF-8")),
        ..whole(
            crate::foundation::fsutil::not_utf8(e.as_bytes(), e.utf8_error()),
            None,
        )
    })
}

/// Loads `repro.toml` from the project root; no file means default settings.
pub fn load(root: &Path) -> Result<Config, ConfigError> {
    let Some(text) = read_text(root)? else {
        return Ok(Config::default());
    };
    let err = |span, message: String| {
        let (line, column) = crate::foundation::spans::locate(&text, span);
        ConfigError {
            path: FILE.into(),
            line,
            column,
            message,
            hint: None,
            source: None,
        }
    };
    let newer = |n: i64| {
        let mut e = err(
            schema_key(&text),
            format!("written by a newer repro (schema {n}; this repro reads {SCHEMA})"),
        );
        e.hint = Some("upgrade repro".into());
        e
    };
    let cfg: Config = match toml::from_str(&text) {
        Ok(cfg) => cfg,
        Err(e) => {
            // A file from a newer repro is named as such, not by a key this build does not
            // know: read its `schema` alone (only on this path, so a good file is parsed once).
            let declared = text
                .parse::<toml::Table>()
                .ok()
                .and_then(|t| t.get("schema").and_then(toml::Value::as_integer));
            return Err(match declared.filter(|n| *n > SCHEMA) {
                Some(n) => newer(n),
                None => err(
                    e.span(),
                    crate::foundation::spans::user_message_in(&e, &text),
                ),
            });
        }
    };
    if cfg.schema > SCHEMA {
        return Err(newer(cfg.schema));
    }
    if let Some((span, message)) = validate(&text, &cfg) {
        return Err(err(span, message));
    }
    if cfg.schema != SCHEMA {
        return Err(err(
            schema_key(&text),
            format!("`schema` must be {SCHEMA} (found {})", cfg.schema),
        ));
    }
    Ok(cfg)
}

/// Where the top-level `schema` key is written (its line's first non-blank byte), if it is.
fn schema_key(text: &str) -> Option<std::ops::Range<usize>> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let key = line.trim_start();
        if key.starts_with('[') {
            // Keys below a table header are not the top-level one.
            return None;
        }
        if key
            .strip_prefix("schema")
            .is_some_and(|r| r.trim_start().starts_with('='))
        {
            let start = at + (line.len() - key.len());
            return Some(start..start + "schema".len());
        }
        at += line.len();
    }
    None
}

/// Names that reach pip's command line or the file system must be plain: a package or a
/// version that starts with `-` would be read as an option.
fn plain(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
}

/// Checks what serde cannot: names, versions and digests of the toolchain pins.
fn validate(text: &str, cfg: &Config) -> Option<(Option<std::ops::Range<usize>>, String)> {
    // Spans of nested keys are not kept by serde here; point at the release's table.
    let at = |needle: &str| text.find(needle).map(|i| i..i + needle.len());
    // A wheel's digest per CPU architecture: the architectures wheels are made for, each
    // with 64 hex digits (a digest that cannot be one would only fail at install time).
    let digest_problem = |arch: &str, sha: &str| -> Option<String> {
        if !matches!(arch, "x86_64" | "aarch64") {
            Some(format!(
                "names CPU architecture `{arch}`; wheels are pinned for x86_64 and aarch64"
            ))
        } else if sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
            Some(format!("sha256 for {arch} is not 64 hex digits"))
        } else {
            None
        }
    };
    if let Some(p) = &cfg.toolchain.nvrtc {
        if !plain(&p.version) {
            return Some((
                at(&p.version),
                format!(
                    "[toolchain.nvrtc] `version` `{}` is not a plain version",
                    p.version
                ),
            ));
        }
        for (arch, sha) in &p.sha256 {
            if let Some(problem) = digest_problem(arch, sha) {
                return Some((at(sha), format!("[toolchain.nvrtc] `sha256` {problem}")));
            }
        }
    }
    for (release, r) in &cfg.toolchain.nvcc {
        let here = at(&format!("nvcc.\"{release}\"")).or_else(|| at(&format!("nvcc.{release}")));
        if !release.chars().all(|c| c.is_ascii_digit() || c == '.') || release.is_empty() {
            return Some((
                here,
                format!(
                    "[toolchain.nvcc] release `{release}` must be digits and dots, e.g. \"13.0\""
                ),
            ));
        }
        if r.wheels.is_empty() {
            return Some((
                here,
                format!("[toolchain.nvcc.\"{release}\"] `wheels` is empty"),
            ));
        }
        for w in &r.wheels {
            if !plain(&w.package) || !plain(&w.version) {
                return Some((
                    at(&w.package),
                    format!(
                        "[toolchain.nvcc.\"{release}\"] wheel `{}=={}`: package and version must be letters, digits, `.`, `-`, `_` or `+`",
                        w.package, w.version
                    ),
                ));
            }
            for (arch, sha) in &w.sha256 {
                if let Some(problem) = digest_problem(arch, sha) {
                    return Some((
                        at(sha),
                        format!("[toolchain.nvcc.\"{release}\"] `{}` {problem}", w.package),
                    ));
                }
            }
        }
    }
    for o in &cfg.slurm.options {
        if let Some(problem) = slurm_option_problem(o) {
            return Some((at(o), format!("[slurm] options: {problem}")));
        }
    }
    for n in &cfg.slurm.export {
        if !env_name_ok(n) {
            return Some((
                at(n),
                format!("[slurm] export: `{n}` is not an environment variable's name"),
            ));
        }
    }
    if let Some(d) = &cfg.toolchain.nvcc_default
        && !cfg.toolchain.nvcc.contains_key(d)
    {
        return Some((
            at("nvcc-default"),
            format!(
                "[toolchain] `nvcc-default` names release `{d}`, which no [toolchain.nvcc.\"{d}\"] table pins"
            ),
        ));
    }
    None
}

/// A pin to write into repro.toml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PinEdit {
    /// `[toolchain.nvcc."RELEASE"]`, and `nvcc-default` when `make_default`.
    Nvcc {
        /// The release (major.minor).
        release: String,
        /// Its wheels, compiler first.
        wheels: Vec<WheelPin>,
        /// Make it the release nvcc recipes use.
        make_default: bool,
    },
    /// `[toolchain.nvrtc]`.
    Nvrtc(NvrtcPin),
}

/// Why a pin cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum PinWriteError {
    /// The existing file is not TOML repro can edit.
    #[error("{FILE} cannot be edited: {message}")]
    Unparsable {
        /// The parser's words.
        message: String,
    },
    /// The release is pinned already, to other wheels.
    #[error("{FILE} already pins {what} with other wheels")]
    Pinned {
        /// `nvcc@13.0`.
        what: String,
    },
    /// The edit would make a file that does not load (a bug, or a hostile file).
    #[error("the edited {FILE} does not load: {0}")]
    Invalid(#[source] ConfigError),
}

impl Diagnose for PinWriteError {
    fn exit_code(&self) -> u8 {
        exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        match self {
            PinWriteError::Unparsable { .. } => Some(format!("fix {FILE} first")),
            PinWriteError::Pinned { .. } => {
                Some("pass --force to replace its wheels (builds keyed on the old ones keep their records)".into())
            }
            PinWriteError::Invalid(e) => e.hint(),
        }
    }
}

fn wheel_array(wheels: &[WheelPin]) -> toml_edit::Array {
    let mut arr = toml_edit::Array::new();
    for w in wheels {
        let mut sha = toml_edit::InlineTable::new();
        for (arch, d) in &w.sha256 {
            sha.insert(arch, d.as_str().into());
        }
        let mut t = toml_edit::InlineTable::new();
        t.insert("package", w.package.as_str().into());
        t.insert("version", w.version.as_str().into());
        t.insert("sha256", toml_edit::Value::InlineTable(sha));
        let mut v = toml_edit::Value::InlineTable(t);
        v.decor_mut().set_prefix("\n  ");
        arr.push_formatted(v);
    }
    arr.set_trailing("\n");
    arr.set_trailing_comma(true);
    arr
}

/// `text` (the current repro.toml, empty for none) with `edit` applied, comments and
/// everything else kept. Unchanged text when the same pin is there already; an error when
/// the release is pinned to other wheels and not `force`.
pub fn with_pin(text: &str, edit: &PinEdit, force: bool) -> Result<String, PinWriteError> {
    let mut doc: toml_edit::DocumentMut = if text.trim().is_empty() {
        "schema = 1\n".parse().expect("a constant parses")
    } else {
        text.parse()
            .map_err(|e: toml_edit::TomlError| PinWriteError::Unparsable {
                message: e.to_string(),
            })?
    };
    let current: Config = if text.trim().is_empty() {
        Config::default()
    } else {
        toml::from_str(text).map_err(|e| PinWriteError::Unparsable {
            message: crate::foundation::spans::user_message_in(&e, text),
        })?
    };
    let tc = doc
        .entry("toolchain")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(false);
            toml_edit::Item::Table(t)
        })
        .as_table_mut()
        .ok_or_else(|| PinWriteError::Unparsable {
            message: "`toolchain` is not a table".into(),
        })?;
    match edit {
        PinEdit::Nvcc {
            release,
            wheels,
            make_default,
        } => pin_nvcc(tc, &current, release, wheels, *make_default, force)?,
        PinEdit::Nvrtc(pin) => match &current.toolchain.nvrtc {
            Some(p) if p == pin => {}
            Some(_) if !force => {
                return Err(PinWriteError::Pinned {
                    what: "nvrtc".into(),
                });
            }
            _ => {
                let mut sha = toml_edit::InlineTable::new();
                for (arch, d) in &pin.sha256 {
                    sha.insert(arch, d.as_str().into());
                }
                let mut t = toml_edit::Table::new();
                t.insert("version", toml_edit::value(pin.version.as_str()));
                t.insert(
                    "sha256",
                    toml_edit::value(toml_edit::Value::InlineTable(sha)),
                );
                tc.insert("nvrtc", toml_edit::Item::Table(t));
            }
        },
    }
    let out = doc.to_string();
    let cfg: Config = toml::from_str(&out).map_err(|e| {
        PinWriteError::Invalid(ConfigError {
            path: FILE.into(),
            line: 1,
            column: 1,
            message: crate::foundation::spans::user_message(&e),
            hint: None,
            source: None,
        })
    })?;
    if let Some((_, message)) = validate(&out, &cfg) {
        return Err(PinWriteError::Invalid(ConfigError {
            path: FILE.into(),
            line: 1,
            column: 1,
            message,
            hint: None,
            source: None,
        }));
    }
    Ok(out)
}

/// Pins an nvcc release in the `[toolchain]` table (refusing to replace other wheels
/// without `force`), and makes it the default when asked or when there is none.
fn pin_nvcc(
    tc: &mut toml_edit::Table,
    current: &Config,
    release: &str,
    wheels: &[WheelPin],
    make_default: bool,
    force: bool,
) -> Result<(), PinWriteError> {
    match current.toolchain.nvcc.get(release) {
        Some(r) if r.wheels == *wheels => {}
        Some(_) if !force => {
            return Err(PinWriteError::Pinned {
                what: format!("nvcc@{release}"),
            });
        }
        _ => {
            let nvcc = tc
                .entry("nvcc")
                .or_insert_with(|| {
                    let mut t = toml_edit::Table::new();
                    t.set_implicit(true);
                    toml_edit::Item::Table(t)
                })
                .as_table_mut()
                .ok_or_else(|| PinWriteError::Unparsable {
                    message: "`toolchain.nvcc` is not a table".into(),
                })?;
            let mut r = toml_edit::Table::new();
            r.insert("wheels", toml_edit::value(wheel_array(wheels)));
            nvcc.insert(release, toml_edit::Item::Table(r));
        }
    }
    if make_default || current.toolchain.nvcc_default.is_none() {
        tc.insert("nvcc-default", toml_edit::value(release));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file without `schema` reads as schema 1; one from a newer repro is named as such
    /// (even with keys this build does not know) with the hint to upgrade; any other
    /// value is refused where it is written.
    #[test]
    fn schema_absent_newer_or_wrong() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(FILE), "[nix]\nbuild = true\n").unwrap();
        let cfg = load(d.path()).unwrap();
        assert_eq!(cfg.schema, SCHEMA);
        assert!(cfg.nix.build);
        std::fs::write(
            d.path().join(FILE),
            "# schema notes\n\n  schema = 3\n[future]\nkey = 1\n",
        )
        .unwrap();
        let e = load(d.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "repro.toml:3:3: written by a newer repro (schema 3; this repro reads 1)"
        );
        assert_eq!(e.hint().as_deref(), Some("upgrade repro"));
        std::fs::write(d.path().join(FILE), "schema = 0\n").unwrap();
        let e = load(d.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "repro.toml:1:1: `schema` must be 1 (found 0)"
        );
        assert!(e.hint().unwrap().contains("repro-toml.md"));
    }

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(load(d.path()).unwrap(), Config::default());
        std::fs::write(
            d.path().join(FILE),
            format!("schema = 1\n[toolchain.nvrtc]\nversion = \"13.0.88\"\nsha256 = {{ x86_64 = \"{}\" }}\n", "ab".repeat(32)),
        )
        .unwrap();
        assert_eq!(
            load(d.path()).unwrap().toolchain.nvrtc.unwrap().sha256["x86_64"],
            "ab".repeat(32)
        );
        // A digest that cannot be one, or an architecture no wheel is made for, is the
        // file's mistake, named where it is written.
        for (pin, says) in [
            (
                "{ x86_64 = \"zz\" }",
                "repro.toml:4:22: [toolchain.nvrtc] `sha256` sha256 for x86_64 is not 64 hex digits",
            ),
            (
                &format!("{{ sparc = \"{}\" }}", "ab".repeat(32)),
                "`sha256` names CPU architecture `sparc`",
            ),
        ] {
            std::fs::write(
                d.path().join(FILE),
                format!("schema = 1\n[toolchain.nvrtc]\nversion = \"13.0.88\"\nsha256 = {pin}\n"),
            )
            .unwrap();
            let e = load(d.path()).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
        std::fs::write(
            d.path().join(FILE),
            "schema = 1\n[toolchain.nvrtc]\nversoin = \"1\"\n",
        )
        .unwrap();
        assert!(
            load(d.path())
                .unwrap_err()
                .to_string()
                .starts_with("repro.toml:3:1: unknown field `versoin`")
        );
    }

    #[test]
    fn nvcc_releases_are_validated() {
        let d = tempfile::tempdir().unwrap();
        let sha = "a".repeat(64);
        let good = format!(
            "schema = 1\n[toolchain]\nnvcc-default = \"13.0\"\n[toolchain.nvcc.\"13.0\"]\nwheels = [{{ package = \"nvidia-cuda-nvcc\", version = \"13.0.88\", sha256 = {{ x86_64 = \"{sha}\" }} }}]\n"
        );
        std::fs::write(d.path().join(FILE), &good).unwrap();
        let cfg = load(d.path()).unwrap();
        assert_eq!(cfg.toolchain.nvcc["13.0"].wheels[0].version, "13.0.88");
        assert_eq!(cfg.toolchain.nvcc_default.as_deref(), Some("13.0"));
        for (bad, says) in [
            (
                good.replace("nvidia-cuda-nvcc", "--index-url=x"),
                "package and version must be",
            ),
            (good.replace(&sha, "abc"), "is not 64 hex digits"),
            (
                good.replace("nvcc-default = \"13.0\"", "nvcc-default = \"12.9\""),
                "which no [toolchain.nvcc.\"12.9\"] table pins",
            ),
            (good.replace("sha256 =", "sha = "), "unknown field `sha`"),
        ] {
            std::fs::write(d.path().join(FILE), &bad).unwrap();
            let e = load(d.path()).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn pins_are_written_keeping_the_rest_and_refusing_to_replace_silently() {
        let sha = |c: &str| c.repeat(64);
        let w = |p: &str, c: &str| WheelPin {
            package: p.into(),
            version: "13.0.88".into(),
            sha256: [
                ("x86_64".to_string(), sha(c)),
                ("aarch64".to_string(), sha("f")),
            ]
            .into(),
        };
        let edit = PinEdit::Nvcc {
            release: "13.0".into(),
            wheels: vec![w("nvidia-cuda-nvcc", "a"), w("nvidia-cublas", "b")],
            make_default: false,
        };
        let text = with_pin("", &edit, false).unwrap();
        let cfg: Config = toml::from_str(&text).unwrap();
        assert_eq!(cfg.schema, 1);
        assert_eq!(cfg.toolchain.nvcc_default.as_deref(), Some("13.0"));
        assert_eq!(
            cfg.toolchain.nvcc["13.0"].wheels[1].package,
            "nvidia-cublas"
        );
        // Idempotent, and comments elsewhere survive an edit.
        assert_eq!(with_pin(&text, &edit, false).unwrap(), text);
        let commented = format!("# mine\n{text}[nix]\nbuild = false # keep\n");
        let nvrtc = PinEdit::Nvrtc(NvrtcPin {
            version: "12.8.93".into(),
            sha256: [("x86_64".to_string(), sha("c"))].into(),
        });
        let out = with_pin(&commented, &nvrtc, false).unwrap();
        assert!(out.contains("# mine") && out.contains("# keep"), "{out}");
        let cfg: Config = toml::from_str(&out).unwrap();
        assert_eq!(cfg.toolchain.nvrtc.unwrap().version, "12.8.93");
        // Other wheels under the same release: only with force.
        let other = PinEdit::Nvcc {
            release: "13.0".into(),
            wheels: vec![w("nvidia-cuda-nvcc", "d")],
            make_default: false,
        };
        assert!(matches!(
            with_pin(&out, &other, false),
            Err(PinWriteError::Pinned { .. })
        ));
        let replaced: Config = toml::from_str(&with_pin(&out, &other, true).unwrap()).unwrap();
        assert_eq!(replaced.toolchain.nvcc["13.0"].wheels.len(), 1);
        assert!(matches!(
            with_pin("schema = [", &other, false),
            Err(PinWriteError::Unparsable { .. })
        ));
    }
}
