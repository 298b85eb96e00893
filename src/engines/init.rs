//! `repro init`'s reading of a kernel file: the `__global__` kernels it defines, what it
//! includes, whether NVRTC can compile it or it needs nvcc (host headers, host code), the
//! include directories its quoted includes need, and the component libraries (cuBLAS,
//! cuDNN, CUTLASS) its angle includes name. Reading only: nothing here runs a compiler.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::foundation::error::Diagnose;
use crate::foundation::exit;

/// The largest kernel file read (the scan is one pass; a larger file's recipe is written by
/// hand).
const MAX_SOURCE: u64 = 16 << 20;

/// The most repository entries the include search walks (a bound for huge trees).
const MAX_WALK: usize = 200_000;

/// What a kernel file holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelFile {
    /// The file, relative to the repository root.
    pub source: String,
    /// Kernels with a symbol of their own (not templates), in source order.
    pub kernels: Vec<String>,
    /// Template kernels: no symbol until something instantiates them.
    pub templates: Vec<String>,
    /// Kernels inside a preprocessor condition repro cannot tell is true (`#ifdef
    /// ENABLE_CUDNN`): (name, the condition). They are compiled only where the condition
    /// holds, so they are not in `entries`.
    pub conditional: Vec<(String, String)>,
    /// `nvrtc`, `nvcc` or `torch-extension`.
    pub kind: &'static str,
    /// Why that kind.
    pub why: String,
    /// Include directories, relative to the root, that quoted includes need.
    pub include_dirs: Vec<String>,
    /// Components its includes name (`cublas`, `cudnn`, `cutlass`).
    pub components: Vec<String>,
    /// Whether it has more `__global__`s than are read ([`MAX_KERNELS`]).
    pub more: bool,
    /// What it is built as where it includes PyTorch's headers.
    pub torch: Option<TorchExt>,
    /// What its build will refuse that the recipe cannot change: a header it includes that
    /// links outside the repository.
    pub warnings: Vec<String>,
    /// Overloaded kernels: (name, each overload's symbol and parameters). Their entries are
    /// the symbols; where a parameter type cannot be spelled ([`symbols::mangle`]), the
    /// symbols are empty and the entry is the name, which the first build resolves.
    pub overloads: Vec<(String, Vec<(String, String)>)>,
}

/// A kernel file that includes PyTorch's headers, as a `torch-extension` recipe builds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TorchExt {
    /// The module's name: the one `PYBIND11_MODULE` names, else the file's stem.
    pub module: String,
    /// The sources: the files that bind the module, then the kernel file, then the files
    /// that define the functions the module binds that neither of those defines.
    pub sources: Vec<String>,
    /// The functions the bindings define (`m.def("name", ...)`).
    pub functions: Vec<String>,
    /// The files beside it (or up to two directories up, or in those directories' other
    /// subdirectories) that bind a module (`PYBIND11_MODULE`) or register operators
    /// (`TORCH_LIBRARY`); empty where none does.
    pub bindings: Vec<String>,
    /// Whether the bindings register operators (`TORCH_LIBRARY`), called as
    /// `torch.ops.NS.NAME` rather than as the module's functions.
    pub operators: bool,
    /// PyTorch's headers it includes, directly or through the repository's.
    pub headers: Vec<String>,
    /// What the recipe should say about its sources (a bound function no file defines, or
    /// one that several do).
    pub notes: Vec<String>,
}

/// Why a kernel file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// Nothing is at the path given.
    #[error("{} does not exist", .path.display())]
    Missing {
        /// The path given.
        path: PathBuf,
    },
    /// The file is not there, or not inside the repository.
    #[error("{} is not a file inside the repository {}", .path.display(), .root.display())]
    NotInRepo {
        /// The path given.
        path: PathBuf,
        /// The repository.
        root: PathBuf,
    },
    /// It is larger than init reads.
    #[error("{} is larger than the {} MiB repro init reads", .path.display(), MAX_SOURCE >> 20)]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// It cannot be read.
    #[error("cannot read {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It defines no kernel.
    #[error("{source_file} defines no __global__ kernel")]
    NoKernel {
        /// The file.
        source_file: String,
        /// The repository's files it includes (directly or not) that define kernels.
        included: Vec<String>,
    },
}

impl Diagnose for InitError {
    fn exit_code(&self) -> u8 {
        match self {
            InitError::Read { .. } => exit::IO,
            _ => exit::USAGE,
        }
    }
    fn hint(&self) -> Option<String> {
        match self {
            InitError::Missing { .. } => Some(
                "name a .cu file of this repository (relative to the current directory), e.g. `repro init --recipe kernels/k.cu`"
                    .into(),
            ),
            InitError::NotInRepo { .. } => Some(
                "name a .cu file of this repository, e.g. `repro init --recipe kernels/k.cu`"
                    .into(),
            ),
            InitError::Read { .. } => Some("check the file's permissions".into()),
            InitError::TooLarge { .. } => Some(
                "write its recipe by hand (see the recipe reference: kind, source, entries, target)"
                    .into(),
            ),
            InitError::NoKernel { included, .. } if !included.is_empty() => {
                const SHOWN: usize = 8;
                let more = included.len().saturating_sub(SHOWN);
                Some(format!(
                    "the kernels are in the files it includes: {}{}; name those (`repro init --recipe {}`)",
                    included[..included.len().min(SHOWN)].join(", "),
                    if more > 0 { format!(" and {more} more") } else { String::new() },
                    included[0]
                ))
            }
            InitError::NoKernel { .. } => {
                Some("name a file that defines a kernel (`__global__ void name(...)`)".into())
            }
        }
    }
}

/// A source file's text: without a UTF-8 byte-order mark (which would hide its first line's
/// `namespace` or `#include` from the scan; the compilers skip it), bytes that are not UTF-8
/// replaced.
fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(crate::foundation::fsutil::without_bom(bytes)).into_owned()
}

/// Removes comments (keeping line structure), so that a `__global__` in a comment is not a
/// kernel. String and character literals are kept whole (an include's path is one), and a
/// `//` or `/*` inside one starts no comment.
pub fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ ('"' | '\'') => {
                let end = literal_end(&b, i, q);
                out.extend(&b[i..end]);
                i = end;
            }
            '/' if b.get(i + 1) == Some(&'/') => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            '/' if b.get(i + 1) == Some(&'*') => {
                i += 2;
                while i < b.len() && !(b[i] == '*' && b.get(i + 1) == Some(&'/')) {
                    if b[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
                i += 2;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// Where the literal opened by the quote `q` at `b[at]` ends (one past its closing quote,
/// or the end of its line where it is not closed: an apostrophe in a `#error` text).
fn literal_end(b: &[char], at: usize, q: char) -> usize {
    let mut i = at + 1;
    while i < b.len() && b[i] != '\n' {
        match b[i] {
            '\\' => i += 2,
            c if c == q => return i + 1,
            _ => i += 1,
        }
    }
    i.min(b.len())
}

/// The kernels a source defines: (name, is a template), in order; [`kernels_with`] says
/// which lie inside a preprocessor condition. A kernel is the name
/// before the first `(` after `__global__` that is not an attribute's (`__launch_bounds__`,
/// `__attribute__`, `__declspec`, `alignas`), qualified by the namespaces around it
/// (`ns::inner`, as the cubin's demangled name and NVRTC's name expressions have it), unless
/// it has C linkage (`extern "C"`, or inside an `extern "C" { }` block).
pub fn kernels(src: &str) -> Vec<(String, bool)> {
    kernels_with(src)
        .into_iter()
        .map(|k| (k.name, k.template))
        .collect()
}

/// A kernel a source defines.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// Its name, qualified by its namespaces.
    pub name: String,
    /// Whether it is a template.
    pub template: bool,
    /// The innermost preprocessor condition around it that repro cannot tell holds under
    /// nvcc and NVRTC (`#ifdef ENABLE_CUDNN`), if any.
    pub condition: Option<String>,
    /// The parameter lists of its definitions, as written: more than one for an overloaded
    /// kernel.
    pub signatures: Vec<String>,
    /// Whether its overloads differ in being templates or in the condition around them.
    pub mixed: bool,
}

/// The kernels a source defines, in order (see [`kernels`]). One pass over the text: the
/// namespaces, the C-linkage blocks and the preprocessor conditions open at each
/// `__global__` are tracked as the scan goes, so a large or hostile file costs time in
/// proportion to its size; at most [`MAX_KERNELS`] occurrences are looked at.
pub fn kernels_with(src: &str) -> Vec<Found> {
    kernels_in(src, &Headers::new())
}

/// [`kernels_with`], where the source's `#include`s of repository headers bring in the
/// macros they define that open or close braces (`CUB_NAMESPACE_BEGIN` from a header):
/// a namespace such a macro opens names the kernels inside it.
pub fn kernels_in(src: &str, headers: &Headers) -> Vec<Found> {
    let text = strip_comments(src);
    let mut scan = Scan::new(&text, headers);
    let mut out: Vec<Found> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // `__global__`, and the macros that may stand for it (`#define KERNEL __global__`): each
    // word's next occurrence is kept, so the text is searched once per word.
    let mut words = vec!["__global__".to_string()];
    words.extend(marker_names(&text, headers));
    let mut next: Vec<Option<usize>> = words.iter().map(|w| text.find(w.as_str())).collect();
    let mut looked = 0;
    while let Some((i, start)) = next
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.map(|n| (i, n)))
        .min_by_key(|(_, n)| *n)
    {
        let word = &words[i];
        let from = start + word.len();
        for (j, n) in next.iter_mut().enumerate() {
            if n.is_some_and(|n| n < from) {
                *n = text[from..].find(words[j].as_str()).map(|at| from + at);
            }
        }
        looked += 1;
        if looked > MAX_KERNELS {
            break;
        }
        // A word that merely contains it (`my__global__x`) is not the keyword.
        let before = text[..start].chars().next_back();
        let after = text[from..].chars().next();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            || after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        scan.advance_to(start);
        // Under `#if 0` (or the `#else` of a condition that holds) the compiler never sees it.
        if scan.never() {
            continue;
        }
        // A macro counts where it is defined, as one standing for `__global__`.
        let marker = if i == 0 {
            None
        } else {
            match scan.brace_macros.get(word.as_str()) {
                Some((None, t)) if is_marker(t) => Some(t.clone()),
                _ => continue,
            }
        };
        // In a macro's definition (`#define KERNEL(n) __global__ void n(...)`) it names a
        // parameter, not a kernel; in a string (a host file's NVRTC source) it is text.
        if scan.in_directive() || scan.literal.is_some() {
            continue;
        }
        // A template header ends right before: `template <...> __global__` (or with
        // `static`/`inline` between), looking back over the current statement only, and
        // over a few kilobytes of it at most.
        let mut stmt_from = scan
            .stmt_start
            .min(start)
            .max(start.saturating_sub(STMT_WINDOW));
        while !text.is_char_boundary(stmt_from) {
            stmt_from += 1;
        }
        let stmt = &text[stmt_from..start];
        let is_template = stmt
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "template");
        let c_linkage = stmt.contains("extern \"C\"")
            || marker
                .as_deref()
                .is_some_and(|t| t.contains("extern \"C\""));
        // The name and its parameters come within a few kilobytes or not at all.
        let mut end = (from + NAME_WINDOW).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        // A declaration (`__global__ void k(int);`, defined in another file) builds nothing.
        let Some((name, params)) = name_after(&text[from..end]) else {
            continue;
        };
        let name = match scan.scope() {
            Scope::C => name,
            Scope::Namespaces(_) if c_linkage => name,
            Scope::Namespaces(ns) if ns.is_empty() => name,
            Scope::Namespaces(ns) => format!("{}::{name}", ns.join("::")),
        };
        let condition = scan.condition();
        if seen.insert(name.clone()) {
            out.push(Found {
                name,
                template: is_template,
                condition,
                signatures: vec![params],
                mixed: false,
            });
        } else if let Some(f) = out.iter_mut().find(|f| f.name == name) {
            // An overload (or a declaration repeated with its definition). One that is a
            // template where the first is not, or under another condition, makes the
            // overloads' symbols unknowable here.
            if !f.signatures.contains(&params) {
                f.signatures.push(params);
            }
            if f.template != is_template || f.condition != condition {
                f.mixed = true;
            }
        }
    }
    out
}

/// Whether a macro's text stands for `__global__` (`__global__`, `extern "C" __global__`,
/// `__global__ __launch_bounds__(256)`): it has the word and opens no brace.
fn is_marker(text: &str) -> bool {
    !text.contains(['{', '}'])
        && outside_strings(text)
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "__global__")
}

/// `text` without its string and character literals (`"extern \"C\" __global__"` is text,
/// not the keyword).
fn outside_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in text.chars() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                out.push(' ');
            }
            None => out.push(c),
        }
    }
    out
}

/// The names of the macros without parameters that a source or the repository headers it
/// includes define to stand for `__global__` ([`is_marker`]), at most [`MAX_MARKERS`].
fn marker_names(text: &str, headers: &Headers) -> Vec<String> {
    device_marks(text, headers)
        .into_iter()
        .filter(|(_, t)| is_marker(t))
        .map(|(n, _)| n)
        .take(MAX_MARKERS)
        .collect()
}

/// How many macros standing for `__global__` [`kernels_in`] looks for, at most.
const MAX_MARKERS: usize = 64;

/// How deeply nested braces name namespaces, at most.
const MAX_DEPTH: usize = 64;

/// How many `__global__`s [`kernels_with`] looks at, at most.
const MAX_KERNELS: usize = 10_000;

/// How far before `__global__` its statement's `template <...>` or `extern "C"` may start
/// (bytes).
const STMT_WINDOW: usize = 4096;

/// How far after `__global__` a kernel's body (or a declaration's `;`) must start (bytes;
/// attributes and parameters included). Past it, the last name seen with a `(` is taken.
const NAME_WINDOW: usize = 8192;

/// How long a preprocessor line joined from continued lines is kept (bytes): it is only
/// read for its condition.
const MAX_DIRECTIVE: usize = 4096;

/// Whether a preprocessor condition's branch is compiled under nvcc and NVRTC.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Known {
    /// It is (an include guard, `#if 1`, `__CUDACC__` tested as defined).
    Holds,
    /// It is not (`#if 0`, the `#else` of a branch that holds).
    Never,
    /// repro cannot tell (`#ifdef ENABLE_CUDNN`).
    Unknown,
}

/// The open braces of a source, innermost last: each the namespace names it adds, or None
/// for a C-linkage block.
type Braces = Vec<Option<Vec<String>>>;

/// Per open `#if`: how many braces were open at it; the braces open at the end of its first
/// branch (named ones, and how many deeper) once another branch began; whether that first
/// branch is never compiled.
type Branch = (usize, Option<(Braces, usize)>, bool);

/// The state of a comment-stripped source up to a point, advanced forward only: the braces
/// open (each a namespace's names, a C-linkage block, or anything else), where the current
/// statement starts, and the preprocessor conditions open.
struct Scan<'a> {
    text: &'a str,
    /// How far the text has been read (a byte offset).
    at: usize,
    /// Per open brace: the namespace names it adds, or None for a C-linkage block.
    open: Braces,
    /// Where the current statement starts (after the last `;`, `{` or `}`).
    stmt_start: usize,
    /// Inside a string or character literal: its quote, and whether a backslash came last.
    literal: Option<(char, bool)>,
    /// Where the current line starts.
    line_start: usize,
    /// Whether the current line continues a preprocessor directive (the one before ended
    /// with a backslash).
    continued: bool,
    /// Whether the current line is a preprocessor line (None until its first character
    /// that is not a space).
    directive_line: Option<bool>,
    /// Per open `#if`: how many braces were open at it, and the braces open at the end of
    /// its first branch once another branch began.
    branches: Vec<Branch>,
    /// Braces open past [`MAX_DEPTH`], counted only.
    deep_braces: usize,
    /// `#if`s open past [`MAX_CONDS`], counted only.
    deep_conds: usize,
    /// Per open preprocessor condition: the line that opened it, the branch now (as said),
    /// whether that branch is compiled, and whether an earlier branch was (None: unknown).
    conds: Vec<(String, String, Known, Option<bool>)>,
    /// A preprocessor line continued by backslashes, joined so far.
    pending: String,
    /// The macros defined so far.
    defines: Defines,
    /// The macros defined so far whose text opens or closes braces (`#define NS_BEGIN
    /// namespace lib {`, `#define NS(n) namespace n {`), by name: their parameters and text.
    brace_macros: BraceMacros,
    /// Every macro without parameters that marked a function for the device at some point
    /// of the text ([`is_device_mark`]), by name, with its text (expanded).
    marks: std::collections::BTreeMap<String, String>,
    /// The brace macros each repository header defines (by its `#include` as written), taken
    /// in where the source includes it.
    headers: &'a Headers,
}

/// Macros whose text opens or closes braces, by name: their parameters and text.
type BraceMacros = std::collections::HashMap<String, (Option<Vec<String>>, String)>;

/// The brace macros an `#include` brings in, by the include's path as written (`ns.h`, from
/// `#include "ns.h"` or `#include <ns.h>`): those of the header and of what it includes.
pub type Headers = std::collections::HashMap<String, BraceMacros>;

impl<'a> Scan<'a> {
    fn new(text: &'a str, headers: &'a Headers) -> Scan<'a> {
        Scan {
            text,
            at: 0,
            open: Vec::new(),
            stmt_start: 0,
            literal: None,
            line_start: 0,
            continued: false,
            directive_line: None,
            branches: Vec::new(),
            deep_braces: 0,
            deep_conds: 0,
            conds: Vec::new(),
            pending: String::new(),
            defines: Defines::default(),
            brace_macros: BraceMacros::new(),
            marks: std::collections::BTreeMap::new(),
            headers,
        }
    }

    /// Opens and closes the braces of a macro's text where a line uses it (a namespace a
    /// macro opens names the kernels inside it).
    fn expand(&mut self, text: &str) {
        let mut head = 0;
        for (i, c) in text.char_indices() {
            match c {
                '{' if self.open.len() >= MAX_DEPTH => self.deep_braces += 1,
                '{' => self.open.push(opened_by(&text[head..i])),
                '}' if self.deep_braces > 0 => self.deep_braces -= 1,
                '}' => {
                    self.open.pop();
                }
                _ => {}
            }
            if matches!(c, '{' | '}' | ';') {
                head = i + 1;
            }
        }
    }

    /// The text of a line that uses only macros that open or close braces: one (`NS_BEGIN`,
    /// `NS_BEGIN;`, `NS(lib)`, its parameters replaced by the arguments), or several without
    /// parameters (`NS_END NS_END`).
    fn brace_macro_use(&self, line: &str) -> Option<String> {
        let line = line.trim().trim_end_matches(';').trim_end();
        if let Some(text) = self.one_brace_macro_use(line) {
            return Some(text);
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() < 2 {
            return None;
        }
        words
            .iter()
            .map(|w| match self.brace_macros.get(*w) {
                Some((None, text)) if !is_device_mark(text) => Some(text.as_str()),
                _ => None,
            })
            .collect::<Option<Vec<&str>>>()
            .map(|texts| texts.join(" "))
    }

    /// [`Self::brace_macro_use`] of a line that is one use.
    fn one_brace_macro_use(&self, line: &str) -> Option<String> {
        let (name, rest) = leading_ident(line);
        let (params, text) = self.brace_macros.get(name)?;
        if params.is_none() && is_device_mark(text) {
            return None;
        }
        let rest = rest.trim();
        let Some(params) = params else {
            return rest.is_empty().then(|| text.clone());
        };
        let args = rest.strip_prefix('(')?.strip_suffix(')')?;
        let args: Vec<&str> = if args.trim().is_empty() {
            Vec::new()
        } else {
            args.split(',').map(str::trim).collect()
        };
        if args.len() != params.len() {
            return None;
        }
        // Each parameter, as a whole word, becomes its argument.
        let mut out = String::new();
        let mut word = String::new();
        for c in text.chars().chain(['\n']) {
            if c.is_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            match params.iter().position(|p| *p == word) {
                Some(i) => out.push_str(args[i]),
                None => out.push_str(&word),
            }
            word.clear();
            out.push(c);
        }
        out.pop();
        Some(out)
    }

    /// Reads the text up to `pos` (a byte offset at or after the last).
    fn advance_to(&mut self, pos: usize) {
        let text = self.text;
        for (off, c) in text[self.at..pos].char_indices() {
            let i = self.at + off;
            if c == '\n' {
                self.line(i);
                continue;
            }
            // A preprocessor line (an include, a condition, a macro's definition) opens no
            // brace and ends the statement before it.
            if self.directive_line.is_none() && !c.is_whitespace() {
                self.directive_line = Some(c == '#');
            }
            if self.directive_line == Some(true) {
                continue;
            }
            // A brace in a string or character literal (`printf("{")`) opens nothing.
            if let Some((q, escaped)) = self.literal {
                self.literal = match c {
                    _ if escaped => Some((q, false)),
                    '\\' => Some((q, true)),
                    '\n' => None,
                    _ if c == q => None,
                    _ => Some((q, false)),
                };
                continue;
            }
            match c {
                // A `'` after a letter or digit separates digits (`1'000`).
                '\'' if text[..i]
                    .chars()
                    .next_back()
                    .is_some_and(|p| p.is_ascii_alphanumeric()) => {}
                '"' | '\'' => self.literal = Some((c, false)),
                '{' => {
                    // Past a depth no real source reaches, braces are counted but name
                    // nothing (each kernel's name is built from the open ones).
                    if self.open.len() >= MAX_DEPTH {
                        self.deep_braces += 1;
                    } else {
                        self.open.push(opened_by(&text[self.stmt_start..i]));
                    }
                    self.stmt_start = i + 1;
                }
                '}' => {
                    if self.deep_braces > 0 {
                        self.deep_braces -= 1;
                    } else {
                        self.open.pop();
                    }
                    self.stmt_start = i + 1;
                }
                ';' => self.stmt_start = i + 1,
                _ => {}
            }
        }
        self.at = self.at.max(pos);
    }

    /// Takes the line that ends at `end` (a `\n`): a preprocessor directive opens, turns or
    /// closes a condition.
    fn line(&mut self, end: usize) {
        let raw = &self.text[self.line_start..end];
        let in_directive = self.continued || raw.trim_start().starts_with('#');
        self.continued = in_directive && raw.trim_end().ends_with('\\');
        // A directive continued over lines (`#if defined(A) && \` ...) is read whole, at its
        // last line.
        let l = if in_directive {
            let part = raw.trim_end().trim_end_matches('\\').trim();
            // A line past the bound keeps its start (the directive's word) and loses the rest.
            let room = MAX_DIRECTIVE.saturating_sub(self.pending.len() + 1);
            let mut cut = part.len().min(room);
            while !part.is_char_boundary(cut) {
                cut -= 1;
            }
            if cut > 0 {
                if !self.pending.is_empty() {
                    self.pending.push(' ');
                }
                self.pending.push_str(&part[..cut]);
            }
            if self.continued {
                None
            } else {
                directive(&std::mem::take(&mut self.pending))
            }
        } else {
            None
        };
        // A line that only uses a macro whose text opens or closes braces does so here.
        if !in_directive
            && !self.never()
            && let Some(text) = self.brace_macro_use(raw)
        {
            self.expand(&text);
            self.stmt_start = end + 1;
        }
        self.line_start = end + 1;
        // A literal does not go on past its line (an unclosed `'` in a `#error` text).
        self.literal = None;
        self.directive_line = self.continued.then_some(true);
        if in_directive {
            self.stmt_start = end + 1;
        }
        let Some(l) = l else { return };
        let word = l.split_whitespace().next().unwrap_or("");
        match word {
            "#if" | "#ifdef" | "#ifndef" if self.conds.len() >= MAX_CONDS => {
                self.deep_conds += 1;
            }
            "#endif" if self.deep_conds > 0 => self.deep_conds -= 1,
            "#elif" | "#elifdef" | "#elifndef" | "#else" if self.deep_conds > 0 => {}
            "#if" | "#ifdef" | "#ifndef" => {
                self.branches
                    .push((self.open.len() + self.deep_braces, None, false));
                // `#ifndef X` followed by `#define X`: an include guard, or a default for a
                // macro the recipe's defines may set; either way the branch is compiled.
                let next = self.text[end + 1..]
                    .lines()
                    .map(str::trim)
                    .find(|n| !n.is_empty())
                    .and_then(directive);
                let guard = guarded_name(&l).filter(|g| {
                    next.as_deref()
                        .is_some_and(|n| n.split_whitespace().take(2).eq(["#define", g]))
                });
                let known = if guard.is_some() {
                    Known::Holds
                } else {
                    holds(&l, &self.defines)
                };
                let taken = match known {
                    Known::Holds => Some(true),
                    Known::Never => Some(false),
                    Known::Unknown => None,
                };
                self.conds.push((l.clone(), l, known, taken));
            }
            "#elif" | "#elifdef" | "#elifndef" | "#else" => {
                // Whether the branch ending here is never compiled (for its braces).
                let never = self.never();
                if let Some((first, now, known, taken)) = self.conds.last_mut() {
                    *now = format!("{word} of {first}");
                    // A branch after one that was taken is not; after branches that were
                    // not, an `#else` is, and an `#elif` is what its own condition says.
                    let own = if word == "#else" {
                        Known::Holds
                    } else {
                        holds(&l, &self.defines)
                    };
                    *known = match *taken {
                        Some(true) => Known::Never,
                        Some(false) => own,
                        None => Known::Unknown,
                    };
                    *taken = match (*taken, *known) {
                        (Some(true), _) | (_, Known::Holds) => Some(true),
                        (Some(false), Known::Never) => Some(false),
                        _ => None,
                    };
                }
                // Each branch starts from the braces open at the `#if` (`#ifdef X\n
                // namespace a {\n#else\nnamespace b {\n#endif` opens one brace, not two);
                // the first branch's are the ones kept at the `#endif`.
                if let Some((depth, first, first_never)) = self.branches.last_mut() {
                    if first.is_none() {
                        *first = Some((self.open.clone(), self.deep_braces));
                        *first_never = never;
                    }
                    if *depth <= self.open.len() {
                        self.open.truncate(*depth);
                        self.deep_braces = 0;
                    } else {
                        self.deep_braces = *depth - self.open.len();
                    }
                }
            }
            "#define" | "#undef" if !self.never() => {
                // A definition inside `#ifndef X` of X itself is a default the recipe's
                // defines may override: not certain.
                let name = l.split_whitespace().nth(1).unwrap_or("");
                let name = name.split('(').next().unwrap_or(name);
                let certain = self.conds.iter().all(|c| c.2 == Known::Holds)
                    && !self.conds.iter().any(|c| guarded_name(&c.0) == Some(name));
                self.defines.take(&l, certain);
                self.take_brace_macro(&l);
            }
            _ if l.starts_with("#include") && !self.never() => self.take_header(&l),
            "#endif" => {
                self.conds.pop();
                // The braces of the first branch are kept, unless it is never compiled
                // (`#if 0` ... `#else namespace v2 {` ... `#endif`).
                if let Some((_, Some((first, deep)), first_never)) = self.branches.pop()
                    && !first_never
                {
                    self.open = first;
                    self.deep_braces = deep;
                }
            }
            _ => {}
        }
    }

    /// Takes `#define NAME text` or `#define NAME(params) text` where the text has a brace,
    /// and `#define NAME text` where the text uses only brace macros defined before it
    /// (`#define LIB_BEGIN OPEN_NS(lib)`), as what they give (any other definition, or
    /// `#undef NAME`, forgets NAME).
    fn take_brace_macro(&mut self, line: &str) {
        let rest = line
            .strip_prefix("#define")
            .or_else(|| line.strip_prefix("#undef"));
        let Some(rest) = rest.map(str::trim_start) else {
            return;
        };
        let (name, after) = leading_ident(rest);
        let old = self.brace_macros.remove(name);
        if line.starts_with("#undef") || self.brace_macros.len() >= MAX_DEFINES {
            return;
        }
        // A function-like macro has its `(` right after the name.
        let (params, text) = match after.strip_prefix('(') {
            Some(p) => match p.split_once(')') {
                Some((list, text)) => (
                    Some(
                        list.split(',')
                            .map(|x| x.trim().to_string())
                            .filter(|x| !x.is_empty())
                            .collect(),
                    ),
                    text,
                ),
                None => return,
            },
            None => (None, after),
        };
        let text = text.trim();
        // A macro made of marks (`#define KERNEL_LB GLOBAL __launch_bounds__(256)`), with
        // them replaced by their text.
        let expanded = params
            .is_none()
            .then(|| {
                text.split(' ')
                    .map(|w| match self.brace_macros.get(w) {
                        Some((None, t)) if is_device_mark(t) => t.as_str(),
                        _ => w,
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|t| is_device_mark(t));
        // Where a condition repro cannot decide has one branch define a mark and another
        // define it empty (`#else` / `#define KERNEL`, for a host compiler), the mark is kept.
        if expanded.is_none()
            && params.is_none()
            && self.conds.iter().any(|c| c.2 == Known::Unknown)
            && let Some((None, kept)) = old
            && is_device_mark(&kept)
        {
            self.brace_macros.insert(name.to_string(), (None, kept));
            return;
        }
        let text = if let Some(e) = expanded {
            e
        } else if text.contains(['{', '}']) {
            text.to_string()
        } else if params.is_none()
            && let Some(given) = self.brace_macro_use(text)
        {
            given
        } else {
            return;
        };
        if params.is_none() && is_device_mark(&text) && self.marks.len() < MAX_DEFINES {
            self.marks.insert(name.to_string(), text.clone());
        }
        self.brace_macros.insert(name.to_string(), (params, text));
    }

    /// Takes in the brace macros of the repository header an `#include` line names.
    fn take_header(&mut self, line: &str) {
        let Some((h, _)) = include_of(line) else {
            return;
        };
        for (name, def) in self.headers.get(&h).into_iter().flatten() {
            if self.brace_macros.len() < MAX_DEFINES || self.brace_macros.contains_key(name) {
                if let (None, t) = def
                    && is_device_mark(t)
                    && self.marks.len() < MAX_DEFINES
                {
                    self.marks.insert(name.clone(), t.clone());
                }
                self.brace_macros.insert(name.clone(), def.clone());
            }
        }
    }

    /// Whether the point read to lies in a preprocessor directive (its own line, or a line
    /// that continues it).
    fn in_directive(&self) -> bool {
        self.directive_line == Some(true)
    }

    /// What encloses the point read to.
    fn scope(&self) -> Scope {
        if self.open.iter().any(Option::is_none) {
            return Scope::C;
        }
        Scope::Namespaces(self.open.iter().flatten().flatten().cloned().collect())
    }

    /// The innermost preprocessor condition open at the point read to that is not known to
    /// hold when nvcc or NVRTC compiles the file, as written (`#ifdef ENABLE_CUDNN`; an
    /// `#else` or `#elif` branch as `#else of #if X`), without control characters (it is
    /// said in a recipe's comment). Known to hold: an include guard (`#ifndef X` followed by
    /// `#define X`), `#if 1`, and `__CUDACC__` tested as defined.
    fn condition(&self) -> Option<String> {
        if self.deep_conds > 0 {
            return Some(format!("a condition nested deeper than {MAX_CONDS}"));
        }
        self.conds
            .iter()
            .rev()
            .find(|(_, _, known, _)| *known == Known::Unknown)
            .map(|(_, now, _, _)| now.replace(|c: char| c.is_control(), "?"))
    }

    /// Whether the point read to lies in a branch the compiler never sees (`#if 0`).
    fn never(&self) -> bool {
        self.conds
            .iter()
            .any(|(_, _, known, _)| *known == Known::Never)
    }
}

/// What a brace whose statement is `head` opens: the names of a namespace (`namespace a`,
/// `namespace a::b`, `inline namespace v1`, with `[[...]]`, `__attribute__((...))` or
/// `__declspec(...)` before or after the name), nothing for anything else, or None for a
/// C-linkage block (`extern "C"`). An anonymous namespace names nothing: it has no name in a
/// source, nor in repro's reading of a symbol (`crate::foundation::symbols`).
fn opened_by(head: &str) -> Option<Vec<String>> {
    let head = head.trim();
    if head.split_whitespace().eq(["extern", "\"C\""]) {
        return None;
    }
    let rest = word(head, "inline").unwrap_or(head);
    let Some(rest) = word(rest, "namespace") else {
        return Some(Vec::new());
    };
    let mut name = String::new();
    let mut s = rest;
    while !s.is_empty() {
        if let Some(r) = s.strip_prefix("[[") {
            s = r.split_once("]]").map_or("", |(_, after)| after);
        } else if let Some(r) = ["__attribute__", "__declspec"]
            .iter()
            .find_map(|a| s.strip_prefix(a))
        {
            s = past_parens(r.trim_start());
        } else {
            let c = s.chars().next().unwrap_or(' ');
            name.push(c);
            s = &s[c.len_utf8()..];
        }
    }
    let mut names = Vec::new();
    for part in name.split("::") {
        let part = part.trim();
        let part = word(part, "inline").unwrap_or(part);
        let ident = !part.is_empty()
            && part.starts_with(|c: char| c.is_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_alphanumeric() || c == '_');
        if !ident {
            // Anonymous, or a shape repro does not know: named by nothing.
            return Some(Vec::new());
        }
        names.push(part.to_string());
    }
    Some(names)
}

/// The identifier characters `s` starts with, and the rest.
fn leading_ident(s: &str) -> (&str, &str) {
    s.split_at(
        s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len()),
    )
}

/// What follows the word `w` that `s` starts with (not a longer identifier's start), spaces
/// after it skipped.
fn word<'s>(s: &'s str, w: &str) -> Option<&'s str> {
    let rest = s.strip_prefix(w)?;
    (!rest.starts_with(|c: char| c.is_alphanumeric() || c == '_')).then(|| rest.trim_start())
}

/// What follows the balanced parentheses `s` starts with (all of `s` when they do not close;
/// `s` itself when it does not start with one).
fn past_parens(s: &str) -> &str {
    if !s.starts_with('(') {
        return s;
    }
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

/// A preprocessor line, with the space after its `#` taken out (`#  if X` -> `#if X`).
fn directive(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix('#')?;
    Some(format!("#{}", rest.trim_start()))
}

/// The macros a source defines before a point: by name, each with its value where it is a
/// number, and the names whose definition lies in a branch repro cannot decide (or that an
/// `#undef` there may remove).
#[derive(Default)]
struct Defines {
    defined: std::collections::HashMap<String, Option<i64>>,
    maybe: std::collections::HashSet<String>,
}

impl Defines {
    /// Takes `#define NAME ...` or `#undef NAME` (`certain`: outside any undecided branch).
    fn take(&mut self, line: &str, certain: bool) {
        let mut words = line.split_whitespace();
        let (Some(word), Some(name)) = (words.next(), words.next()) else {
            return;
        };
        // `#define F(x) ...` defines `F`.
        let name = name.split('(').next().unwrap_or(name).to_string();
        if self.defined.len() + self.maybe.len() > MAX_DEFINES {
            return;
        }
        match (word, certain) {
            (_, false) => {
                self.maybe.insert(name);
            }
            ("#define", true) => {
                let value = words.next().and_then(|v| v.trim().parse::<i64>().ok());
                let value = value.filter(|_| words.next().is_none());
                self.maybe.remove(&name);
                self.defined.insert(name, value);
            }
            ("#undef", true) => {
                self.maybe.remove(&name);
                self.defined.remove(&name);
            }
            _ => {}
        }
    }

    /// Whether `name` is defined where the scan is, as the recipe compiles the file (no
    /// defines of its own): `__CUDACC__` and `__cplusplus` are, other compiler macros of
    /// CUDA's (`__CUDA_ARCH__`, `__NVCC__`) depend on the pass or the compiler.
    fn is_defined(&self, name: &str) -> Known {
        if name == "__CUDACC__" || name == "__cplusplus" {
            Known::Holds
        } else if self.maybe.contains(name)
            || (name.starts_with("__CUDA") || name.starts_with("__NVCC"))
        {
            Known::Unknown
        } else if self.defined.contains_key(name) {
            Known::Holds
        } else {
            Known::Never
        }
    }
}

/// How deeply nested preprocessor conditions are tracked; deeper ones are counted, and a
/// kernel inside one is left out as conditional.
const MAX_CONDS: usize = 256;

/// The macro `#ifndef X` or `#if !defined(X)` tests, if `line` is one of those.
fn guarded_name(line: &str) -> Option<&str> {
    let mut w = line.split_whitespace();
    match w.next()? {
        "#ifndef" => w.next(),
        "#if" => {
            let rest = line.split_once("#if")?.1.trim();
            let rest = rest.strip_prefix('!')?.trim_start();
            let rest = word(rest, "defined")?;
            let name = rest.trim_matches(['(', ')', ' ']);
            (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
                .then_some(name)
        }
        _ => None,
    }
}

/// How many macro names [`Defines`] keeps, at most.
const MAX_DEFINES: usize = 10_000;

/// Whether the branch the condition `line` opens (`#if`, `#ifdef`, `#ifndef`; an `#elif` as
/// an `#if`) is compiled as the recipe compiles the file, under nvcc and NVRTC. Decided: a
/// number (`#if 0`), a macro's being defined (`#ifdef X`, `#if !defined(X)`: `__CUDACC__`,
/// or what the file itself defines), a macro the file defines as a number (`#if USE_X`).
/// A macro nobody defines makes `#ifndef X` hold and leaves `#ifdef X` undecided: the
/// recipe's `[build.defines]` may define it.
fn holds(line: &str, defs: &Defines) -> Known {
    let mut words = line.split_whitespace();
    let keyword = words.next().unwrap_or("");
    let expr = words.collect::<Vec<_>>().join(" ");
    // `defined(A) || defined(B)` (the CUDA-or-HIP guard) and `&&` of such parts, one
    // operator at a time and without parentheses around groups.
    if matches!(keyword, "#if" | "#elif") && !(expr.contains("||") && expr.contains("&&")) {
        for (op, any) in [("||", Known::Holds), ("&&", Known::Never)] {
            if !expr.contains(op) {
                continue;
            }
            let parts: Vec<Known> = expr
                .split(op)
                .map(|part| holds(&format!("#if {}", part.trim()), defs))
                .collect();
            let all = if any == Known::Holds {
                Known::Never
            } else {
                Known::Holds
            };
            return if parts.contains(&any) {
                any
            } else if parts.iter().all(|k| *k == all) {
                all
            } else {
                Known::Unknown
            };
        }
    }
    let (negated, term) = match keyword {
        "#ifdef" => (false, format!("defined {expr}")),
        "#ifndef" => (true, format!("defined {expr}")),
        "#if" | "#elif" => match expr.strip_prefix('!') {
            Some(t) => (true, t.trim().to_string()),
            None => (false, expr),
        },
        _ => return Known::Unknown,
    };
    let mut term = term.trim();
    while let Some(inner) = term.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
        term = inner.trim();
    }
    let ident = |t: &str| {
        t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let defined_name = word(term, "defined").map(|n| n.trim_matches(['(', ')', ' ']));
    let value = match defined_name {
        Some(name) if ident(name) => defs.is_defined(name),
        Some(_) => return Known::Unknown,
        None if term.parse::<i64>().is_ok() => {
            if term.parse::<i64>() == Ok(0) {
                Known::Never
            } else {
                Known::Holds
            }
        }
        None if ident(term) && defs.is_defined(term) == Known::Holds => {
            match defs.defined.get(term).copied().flatten() {
                Some(0) => Known::Never,
                Some(_) => Known::Holds,
                None => return Known::Unknown,
            }
        }
        None => return Known::Unknown,
    };
    match (value, negated) {
        (Known::Unknown, _) => Known::Unknown,
        (Known::Holds, false) => Known::Holds,
        (Known::Holds, true) => Known::Never,
        // A macro the file does not define may come from a header it includes or from the
        // recipe's defines: undecided either way.
        (Known::Never, _) if defined_name.is_some() => Known::Unknown,
        (Known::Never, true) => Known::Holds,
        (Known::Never, false) => Known::Never,
    }
}

/// What encloses the end of a (comment-stripped) source.
#[derive(Debug, PartialEq)]
enum Scope {
    /// An `extern "C" { }` block: names are not qualified.
    C,
    /// The named namespaces, outermost first (an inline one by its name, as it is mangled).
    Namespaces(Vec<String>),
}

/// The function name in `rest` (what follows `__global__`): the identifier before the last
/// `(...)` ahead of the body's `{`, attributes (`__launch_bounds__(256)`) and macros that
/// stand for them (`LAUNCH_BOUNDS(256)`) being before it. None for a declaration (a `;`
/// first) or where no name comes; where the body does not start within `rest`, the last name
/// seen with a `(`.
fn name_after(rest: &str) -> Option<(String, String)> {
    // Attributes before the name, and specifiers after the parameters (`throw()`,
    // `noexcept(true)`, a template's `requires(...)`).
    const ATTRIBUTES: [&str; 9] = [
        "__launch_bounds__",
        "__attribute__",
        "__declspec",
        "alignas",
        "__maxnreg__",
        "__cluster_dims__",
        "throw",
        "noexcept",
        "requires",
    ];
    let valid = |n: &&str| {
        n.split("::")
            .all(|p| p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
    };
    let mut last: Option<(&str, &str)> = None;
    let mut i = 0;
    while let Some(off) = rest[i..].find(['(', '{', ';']) {
        let at = i + off;
        match rest.as_bytes()[at] {
            b'{' => break,
            b';' => return None,
            _ => {}
        }
        let head = rest[..at].trim_end();
        // The name with the qualifiers of an out-of-line definition (`lib::k`).
        let ident_len: usize = head
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .map(char::len_utf8)
            .sum();
        let ident = head[head.len() - ident_len..].trim_start_matches(':');
        let after = past_parens(&rest[at..]);
        if !ident.is_empty() && !ATTRIBUTES.contains(&ident) {
            // The parameters: inside the parentheses (to the end where they do not close).
            let inside = &rest[at + 1..rest.len() - after.len()];
            last = Some((ident, inside.strip_suffix(')').unwrap_or(inside)));
        }
        i = rest.len() - after.len();
    }
    last.filter(|(n, _)| valid(n))
        .map(|(n, p)| (n.to_string(), p.trim().to_string()))
}

/// The `#include`s of a source: (path, is an angle include).
pub fn includes(src: &str) -> Vec<(String, bool)> {
    strip_comments(src).lines().filter_map(include_of).collect()
}

/// The header an `#include` line names: (path, is an angle include).
fn include_of(line: &str) -> Option<(String, bool)> {
    let l = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = l.strip_prefix("include")?.trim();
    if let Some(r) = rest.strip_prefix('<') {
        return Some((r.split('>').next()?.trim().to_string(), true));
    }
    let r = rest.strip_prefix('"')?;
    Some((r.split('"').next()?.to_string(), false))
}

/// The component an angle include names.
fn component_of(header: &str) -> Option<&'static str> {
    let h = header.to_ascii_lowercase();
    if h.starts_with("cublas") {
        Some("cublas")
    } else if h.starts_with("cudnn") {
        Some("cudnn")
    } else if h.starts_with("cutlass/") || h.starts_with("cute/") {
        Some("cutlass")
    } else if h.starts_with("nvtx3/") || h.starts_with("nvtoolsext") {
        Some("nvtx")
    } else if h == "cuda_profiler_api.h" {
        Some("profiler")
    } else if h.starts_with("curand") {
        Some("curand")
    } else if h == "nccl.h" || h == "nccl_net.h" {
        Some("nccl")
    } else {
        None
    }
}

/// The first function a source (its comments stripped) declares or defines for the host
/// alone, at namespace or class scope, with its line: one marked neither `__device__` nor
/// `__global__` (directly or through a macro of `device_macros`), such as `static P make();`
/// in a struct. NVRTC refuses the whole file over one ("host functions are not allowed in
/// JIT mode"); nvcc compiles it. Function bodies are not looked into.
fn host_function(text: &str, device_macros: &BTreeSet<String>) -> Option<(usize, String)> {
    // Per open brace: whether it is a scope (namespace, class, `extern "C"`) whose
    // statements are declarations, or a body (a function's, an initializer's).
    let mut scopes: Vec<bool> = Vec::new();
    // The class each open brace is the body of, if any (for its constructors).
    let mut classes: Vec<Option<String>> = Vec::new();
    let mut stmt = String::new();
    let mut stmt_line = 1;
    let mut line = 1;
    let mut literal: Option<char> = None;
    let mut escaped = false;
    let mut directive = false;
    let mut line_start = true;
    let mut last = ' ';
    let at_scope = |scopes: &Vec<bool>| scopes.iter().all(|s| *s);
    for c in text.chars() {
        let before = std::mem::replace(&mut last, c);
        if c == '\n' {
            line += 1;
            // A directive goes on over a line that ends with a backslash.
            if before != '\\' {
                directive = false;
            }
            line_start = true;
            literal = None;
            if at_scope(&scopes) {
                stmt.push('\n');
            }
            continue;
        }
        if line_start && !c.is_whitespace() {
            line_start = false;
            if c == '#' {
                directive = true;
            }
        }
        if directive {
            continue;
        }
        if let Some(q) = literal {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                literal = None;
            }
            continue;
        }
        match c {
            '"' => literal = Some('"'),
            // A `'` after a letter or digit separates digits (`1'000`).
            '\'' if !before.is_ascii_alphanumeric() => literal = Some('\''),
            '{' => {
                if at_scope(&scopes) {
                    let head = std::mem::take(&mut stmt);
                    let class = classes.last().cloned().flatten();
                    let is_function = declarator(&head, class.as_deref()).is_some();
                    if is_function
                        && let Some(name) = host_declaration(&head, class.as_deref(), device_macros)
                    {
                        return Some((line_of(&head, stmt_line, &name), name));
                    }
                    // A template's header may hold `=` (`template <int N = 4> struct V`).
                    let bare = after_template(head.trim()).unwrap_or(&head);
                    let words: Vec<&str> = bare
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .collect();
                    let class = words
                        .iter()
                        .any(|w| matches!(*w, "struct" | "class" | "union"));
                    let scope = !is_function
                        && !bare.contains('=')
                        && (class || words.iter().any(|w| matches!(*w, "namespace" | "extern")));
                    if !is_function
                        && bare.contains('=')
                        && namespace_scope(&classes)
                        && let Some(name) = host_variable(&head, device_macros)
                    {
                        return Some((line_of(&head, stmt_line, &name), name));
                    }
                    scopes.push(scope);
                    // A class's body (its name, or "" for an unnamed one), or None.
                    classes.push((scope && class).then(|| class_name(&head).unwrap_or_default()));
                } else {
                    scopes.push(false);
                    classes.push(None);
                }
                if scopes.len() > MAX_DEPTH * 4 {
                    return None;
                }
            }
            '}' => {
                scopes.pop();
                classes.pop();
                stmt.clear();
            }
            ';' if at_scope(&scopes) => {
                let decl = std::mem::take(&mut stmt);
                let class = classes.last().cloned().flatten();
                if let Some(name) = host_declaration(&decl, class.as_deref(), device_macros) {
                    return Some((line_of(&decl, stmt_line, &name), name));
                }
                if namespace_scope(&classes)
                    && let Some(name) = host_variable(&decl, device_macros)
                {
                    return Some((line_of(&decl, stmt_line, &name), name));
                }
            }
            _ if at_scope(&scopes) => {
                if stmt.trim().is_empty() {
                    stmt_line = line;
                }
                // A statement is judged by its start; a very long one is not a declaration
                // this needs to read whole.
                if stmt.len() < STMT_WINDOW {
                    stmt.push(c);
                }
            }
            _ => {}
        }
    }
    None
}

/// The first host function or variable NVRTC would see in a source or in the repository
/// headers it includes ([`host_function`] over what NVRTC compiles of each: [`nvrtc_view`]):
/// (the file, the line, the name).
fn host_code_for_nvrtc(
    source: &str,
    src: &str,
    headers: &Headers,
    included: &Included,
) -> Option<(String, usize, String)> {
    let first = std::iter::once((source, src, headers.clone())).chain(
        included
            .files
            .iter()
            .map(|(f, t)| (f.as_str(), t.as_str(), included.headers_of(f))),
    );
    for (file, text, headers) in first {
        let view = nvrtc_view(&strip_comments(text));
        if let Some((line, name)) = host_function(&view, &device_macros(&view, &headers)) {
            return Some((file.to_string(), line, name));
        }
    }
    None
}

/// `text` as NVRTC compiles it, as far as its conditions can be told: the lines of a branch
/// NVRTC never compiles are blanked (`#if 0`, `#ifndef __CUDACC_RTC__`, `#if
/// !defined(__CUDACC_RTC__)`, and the `#else` of `#ifdef __CUDACC_RTC__` or `#if 1`);
/// every other branch is kept. Lines keep their numbers.
fn nvrtc_view(text: &str) -> String {
    // Per open condition: whether the branch now is compiled (None: unknown), and whether
    // an earlier branch surely was.
    let mut conds: Vec<(Option<bool>, bool)> = Vec::new();
    let known = |cond: &str| -> Option<bool> {
        let c: String = cond.split_whitespace().collect();
        match c.as_str() {
            "0" => Some(false),
            "1" => Some(true),
            "defined(__CUDACC_RTC__)" | "defined__CUDACC_RTC__" => Some(true),
            "!defined(__CUDACC_RTC__)" | "!defined__CUDACC_RTC__" => Some(false),
            _ => None,
        }
    };
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let skipped = |conds: &Vec<(Option<bool>, bool)>| conds.iter().any(|c| c.0 == Some(false));
        let d = directive(line.trim());
        let word = d
            .as_deref()
            .and_then(|d| d.split_whitespace().next())
            .unwrap_or("");
        let rest = d
            .as_deref()
            .map(|d| d[word.len()..].trim().to_string())
            .unwrap_or_default();
        match word {
            "#if" => conds.push((known(&rest), known(&rest) == Some(true))),
            "#ifdef" => {
                let v = (rest == "__CUDACC_RTC__").then_some(true);
                conds.push((v, v == Some(true)));
            }
            "#ifndef" => {
                let v = (rest == "__CUDACC_RTC__").then_some(false);
                conds.push((v, false));
            }
            "#elif" => {
                if let Some(c) = conds.last_mut() {
                    let v = if c.1 { Some(false) } else { known(&rest) };
                    c.1 |= v == Some(true);
                    c.0 = v;
                }
            }
            "#else" => {
                if let Some(c) = conds.last_mut() {
                    c.0 = match c.0 {
                        _ if c.1 => Some(false),
                        Some(false) => Some(true),
                        _ => None,
                    };
                    c.1 |= c.0 == Some(true);
                }
            }
            "#endif" => {
                conds.pop();
            }
            _ => {}
        }
        if !skipped(&conds) || word == "#endif" || word == "#else" || word == "#elif" {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Whether the innermost open scope is a namespace's (or the file's), not a class's.
fn namespace_scope(classes: &[Option<String>]) -> bool {
    classes.last().is_none_or(Option::is_none)
}

/// What follows a statement's `template <...>` header (`s` itself without one; None where
/// the header does not close).
fn after_template(s: &str) -> Option<&str> {
    let Some(rest) = word(s, "template") else {
        return Some(s);
    };
    let rest = rest.trim_start();
    let mut depth = 0usize;
    for (i, ch) in rest.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(rest[i + 1..].trim_start());
                }
            }
            _ => {}
        }
    }
    None
}

/// The variable a namespace-scope declaration defines in host memory, if it does: one
/// without `__device__`, `__constant__` or `__managed__` that is not `const` (`float
/// table[4] = {...};`, `int counter;`). NVRTC refuses those; a `const` or `constexpr` one
/// it takes.
fn host_variable(stmt: &str, device_macros: &BTreeSet<String>) -> Option<String> {
    const NOT_VARIABLES: [&str; 20] = [
        "typedef",
        "using",
        "struct",
        "class",
        "union",
        "enum",
        "namespace",
        "template",
        "extern",
        "static_assert",
        "const",
        "constexpr",
        "__device__",
        "__constant__",
        "__shared__",
        "__managed__",
        "friend",
        "operator",
        "asm",
        "__asm__",
    ];
    if stmt.contains('(') {
        return None;
    }
    let whole = outside_strings(stmt);
    if whole
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| NOT_VARIABLES.contains(&w) || device_macros.contains(w))
    {
        return None;
    }
    let head = whole.split(['=', '[']).next()?;
    let words: Vec<&str> = head
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| !w.is_empty())
        .collect();
    let name = *words.last()?;
    (words.len() >= 2 && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
        .then(|| name.to_string())
}

/// The line of `name` in a statement that starts at line `first`.
fn line_of(stmt: &str, first: usize, name: &str) -> usize {
    let lead = stmt.len() - stmt.trim_start().len();
    let at = stmt.find(name).unwrap_or(lead).max(lead);
    first + stmt[lead..at].matches('\n').count()
}

/// The class a scope's head opens (`struct __align__(16) P` opens `P`).
fn class_name(head: &str) -> Option<String> {
    let mut words = head
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty());
    words.find(|w| matches!(*w, "struct" | "class" | "union"))?;
    words
        .find(|w| {
            !matches!(*w, "__align__" | "alignas" | "final")
                && !w.starts_with(|c: char| c.is_ascii_digit())
        })
        .map(str::to_string)
}

/// The name a statement declares a function by (the identifier before its parameter list),
/// if it declares one: `static P make()`, a constructor of `class` (the class whose body
/// the statement is in), `bool operator<(P) const`. A variable (`int x = f(1)`, `dim3
/// g(4)`), a type, a macro's use in capitals (`DEFINE_OP(add)`) and `static_assert(...)`
/// declare none.
fn declarator(stmt: &str, class: Option<&str>) -> Option<String> {
    const NOT_NAMES: [&str; 14] = [
        "__attribute__",
        "__declspec",
        "alignas",
        "__align__",
        "__launch_bounds__",
        "__maxnreg__",
        "__cluster_dims__",
        "decltype",
        "sizeof",
        "alignof",
        "static_assert",
        "asm",
        "__asm__",
        "typeof",
    ];
    let mut s = stmt.trim();
    // `public:` and the like.
    for access in ["public", "private", "protected"] {
        if let Some(rest) = word(s, access).and_then(|r| r.trim_start().strip_prefix(':')) {
            s = rest.trim_start();
        }
    }
    s = after_template(s)?;
    let first = leading_ident(s).0;
    if matches!(
        first,
        "typedef" | "using" | "namespace" | "static_assert" | "enum"
    ) {
        return None;
    }
    if s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == "operator")
    {
        return Some("operator".into());
    }
    // The first `(` that follows a name which is not an attribute's.
    let mut from = 0;
    while let Some(off) = s[from..].find('(') {
        let at = from + off;
        let head = s[..at].trim_end();
        let len: usize = head
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '~'))
            .map(char::len_utf8)
            .sum();
        let name = &head[head.len() - len..];
        if NOT_NAMES.contains(&name) {
            from = s.len() - past_parens(&s[at..]).len();
            continue;
        }
        // `int x = f(1)`: a variable; `(*fp)(int)`: a pointer to a function.
        if name.is_empty() || head.contains('=') {
            return None;
        }
        let args = s[at + 1..].trim_start();
        // `float scale(2.0f)`, `P p("x")`: a variable; `float (*fn)(float)`: a pointer to
        // a function.
        if args.starts_with(|c: char| {
            c.is_ascii_digit() || matches!(c, '"' | '\'' | '{' | '-' | '*' | '&' | '^')
        }) {
            return None;
        }
        // `const float scale(SCALE)`: a variable initialised from a macro's value.
        let inner = args.split(')').next().unwrap_or("").trim();
        if !inner.is_empty()
            && inner
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return None;
        }
        // A name alone: a constructor, or a macro's use when in capitals.
        let alone = head.len() == len;
        let constructor = class.is_some_and(|c| name.trim_start_matches('~') == c);
        if alone && !constructor && !name.chars().any(|c| c.is_lowercase()) {
            return None;
        }
        return Some(name.trim_start_matches(':').to_string());
    }
    None
}

/// The function a declaration declares for the host alone (see [`host_function`]).
fn host_declaration(
    stmt: &str,
    class: Option<&str>,
    device_macros: &BTreeSet<String>,
) -> Option<String> {
    let name = declarator(stmt, class)?;
    let device = stmt
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == "__device__" || w == "__global__" || device_macros.contains(w));
    // `= default` or `= delete` after the parameters (`operator=(const A&) = default`).
    let tail = stmt.trim().trim_end_matches(';');
    let tail: String = tail
        .rsplit_once(')')
        .map_or(tail, |(_, r)| r)
        .split_whitespace()
        .collect();
    let defaulted = tail.ends_with("=default") || tail.ends_with("=delete");
    (!device && !defaulted).then_some(name)
}

/// The macros without parameters a source defines, or takes in from the repository headers it
/// includes, whose text marks a function for the device (`#define HD __host__ __device__`).
fn device_macros(text: &str, headers: &Headers) -> BTreeSet<String> {
    device_marks(text, headers).into_keys().collect()
}

/// Every macro without parameters that marks a function for the device at some point of a
/// source (its comments stripped), with its text: one pass of [`Scan`], which joins
/// continued definitions, expands marks made of marks and takes in the headers' macros.
fn device_marks(text: &str, headers: &Headers) -> std::collections::BTreeMap<String, String> {
    // The last line is read at its end of line.
    let text = format!("{text}\n");
    let mut scan = Scan::new(&text, headers);
    scan.advance_to(text.len());
    scan.marks
}

/// Whether a macro's text marks a function for the device: it has `__device__` or
/// `__global__` and opens no brace.
fn is_device_mark(text: &str) -> bool {
    !text.contains(['{', '}'])
        && outside_strings(text)
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == "__global__" || w == "__device__")
}

/// Whether the source has host code: a `main`, a kernel launch, or a runtime API call.
fn has_host_code(src: &str) -> bool {
    let t = strip_comments(src);
    t.contains("<<<")
        || t.contains("int main")
        || [
            "cudaMalloc",
            "cudaMemcpy",
            "cudaFree",
            "cudaStream",
            "cudaDeviceSynchronize",
        ]
        .iter()
        .any(|f| t.contains(f))
}

/// Reads `file` (relative to `cwd`) inside the repository at `root`.
pub fn read_kernel_file(root: &Path, cwd: &Path, file: &Path) -> Result<KernelFile, InitError> {
    let abs = cwd.join(file);
    let not_in = || InitError::NotInRepo {
        path: file.to_path_buf(),
        root: root.to_path_buf(),
    };
    let canon = match abs.canonicalize() {
        Ok(c) => c,
        // A path inside the repository that names nothing is missing; one outside it is
        // outside, whether or not it exists.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && lexically_inside(root, &abs) => {
            return Err(InitError::Missing {
                path: file.to_path_buf(),
            });
        }
        Err(_) => return Err(not_in()),
    };
    let root_canon = root.canonicalize().map_err(|_| not_in())?;
    let rel = canon
        .strip_prefix(&root_canon)
        .map_err(|_| not_in())?
        .to_path_buf();
    if !canon.is_file() {
        return Err(not_in());
    }
    let bytes = crate::foundation::fsutil::read_bounded(&canon, MAX_SOURCE).map_err(|source| {
        if source.kind() == std::io::ErrorKind::InvalidData {
            InitError::TooLarge {
                path: file.to_path_buf(),
            }
        } else {
            InitError::Read {
                path: canon.clone(),
                source,
            }
        }
    })?;
    let src = text_of(&bytes);
    let source = rel.to_string_lossy().replace('\\', "/");
    // The repository's files are listed once, for every look-up, and only if an include
    // is not beside the file.
    let mut files = None;
    let included = included_files(&root_canon, &rel, &src, &mut files);
    let headers = included.headers_of(&source);
    let all = kernels_in(&src, &headers);
    if all.is_empty() {
        // Named as `--recipe` takes them: relative to the current directory.
        let here = cwd
            .canonicalize()
            .ok()
            .and_then(|c| c.strip_prefix(&root_canon).ok().map(Path::to_path_buf))
            .unwrap_or_default();
        return Err(InitError::NoKernel {
            included: included
                .files
                .iter()
                .filter(|(_, text)| !kernels(text).is_empty())
                .map(|(f, _)| relative_to(&here, f))
                .collect(),
            source_file: source,
        });
    }
    let incs = includes(&src);
    let dir = rel.parent().unwrap_or(Path::new(""));
    // A header beside it that is a link out of the repository (or under one): the build
    // reads only files another checkout has, so it will refuse it.
    let warnings: Vec<String> = incs
        .iter()
        .filter(|(h, angle)| !*angle && !h.starts_with('/'))
        .filter(|(h, _)| {
            let p = root_canon.join(dir).join(h);
            p.is_file()
                && p.canonicalize()
                    .is_ok_and(|c| !c.starts_with(&root_canon))
        })
        .map(|(h, _)| {
            format!(
                "{source} includes \"{h}\", which links outside the repository: the build will refuse it; copy the header into the repository"
            )
        })
        .collect();
    let (include_dirs, host) = resolve_includes(&root_canon, dir, &incs, &mut files);
    // A component included through the repository's own headers (llm.c's kernels include
    // NVTX through `cuda_common.h`) is needed as much as one included directly; one the
    // repository holds itself (a vendored `cutlass/`) is not.
    let through = included.outside.clone();
    let components: BTreeSet<String> = host
        .iter()
        .chain(&through)
        .filter_map(|h| component_of(h).map(str::to_string))
        .collect();
    let torch_headers: BTreeSet<String> = host
        .iter()
        .chain(&through)
        .filter(|h| torch_header(h))
        .cloned()
        .collect();
    let torch = (!torch_headers.is_empty())
        .then(|| torch_extension(&root_canon, &rel, &src, torch_headers.into_iter().collect()));
    // NVRTC stops reading a source at a 0xFF byte (a Latin-1 `ÿ` in a comment): the rest
    // of the file, its kernels included, would be missing from what it compiles.
    let ff_line = bytes
        .iter()
        .position(|b| *b == 0xFF)
        .map(|at| bytes[..at].iter().filter(|b| **b == b'\n').count() + 1);
    let (kind, why) = if let Some(t) = &torch {
        (
            "torch-extension",
            format!(
                "it includes PyTorch's headers (<{}>): repro compiles it against the Python environment's PyTorch",
                t.headers.join(">, <")
            ),
        )
    } else if !host.is_empty() {
        (
            "nvcc",
            format!(
                "it includes headers from outside the repository (<{}>): the host's or the CUDA toolkit's, which nvcc's toolchain provides and NVRTC's does not",
                host.join(">, <")
            ),
        )
    } else if !through.is_empty() {
        // The same headers, included by the repository's own headers: NVRTC reads those
        // and stops at theirs just the same.
        (
            "nvcc",
            format!(
                "the repository headers it includes include headers from outside the repository (<{}>): the host's or the CUDA toolkit's, which nvcc's toolchain provides and NVRTC's does not",
                through.iter().cloned().collect::<Vec<_>>().join(">, <")
            ),
        )
    } else if has_host_code(&src) {
        (
            "nvcc",
            "it has host code (a launch, main or runtime calls)".to_string(),
        )
    } else if let Some((file, line, name)) = host_code_for_nvrtc(&source, &src, &headers, &included)
    {
        let whose = if file == source {
            "it declares".to_string()
        } else {
            format!("the repository header it includes, {file}, declares")
        };
        (
            "nvcc",
            format!(
                "{whose} a host function or variable (`{}`, line {line}), which NVRTC refuses",
                crate::foundation::output::printable(&name)
            ),
        )
    } else if let Some(line) = ff_line {
        (
            "nvcc",
            format!("it holds a 0xFF byte (line {line}), where NVRTC stops reading a source"),
        )
    } else {
        (
            "nvrtc",
            "it needs no host headers: NVRTC compiles it in-process".to_string(),
        )
    };
    // An overloaded kernel is one name for several symbols: entries name each by its symbol.
    let stripped = strip_comments(&src);
    let (classes, blocked) = type_names(&stripped);
    // A kernel in an anonymous namespace has a symbol with a hash of the file in it.
    let anonymous = outside_strings(&stripped)
        .split("namespace")
        .skip(1)
        .any(|rest| rest.trim_start().starts_with('{'));
    let mut overloads = Vec::new();
    let mut kernels = Vec::new();
    // An overload set with a template in it is a kernel here (its other overloads have
    // symbols), named as written.
    for k in all
        .iter()
        .filter(|k| (!k.template || k.mixed) && k.condition.is_none())
    {
        if k.signatures.len() < 2 {
            kernels.push(k.name.clone());
            continue;
        }
        let symbols: Option<Vec<(String, String)>> = k
            .signatures
            .iter()
            .map(|p| {
                if k.mixed || anonymous {
                    return None;
                }
                crate::foundation::symbols::mangle(&k.name, p, &classes, &blocked)
                    .map(|m| (m, p.clone()))
            })
            .collect();
        match symbols {
            Some(s) => {
                kernels.extend(s.iter().map(|(m, _)| m.clone()));
                overloads.push((k.name.clone(), s));
            }
            None => {
                kernels.push(k.name.clone());
                overloads.push((k.name.clone(), Vec::new()));
            }
        }
    }
    Ok(KernelFile {
        source,
        kernels,
        templates: all
            .iter()
            .filter(|k| k.template && !k.mixed && k.condition.is_none())
            .map(|k| k.name.clone())
            .collect(),
        conditional: all
            .iter()
            .filter_map(|k| Some((k.name.clone(), k.condition.clone()?)))
            .collect(),
        kind,
        why,
        include_dirs,
        components: components.into_iter().collect(),
        more: src.matches("__global__").count() > MAX_KERNELS,
        torch,
        warnings,
        overloads,
    })
}

/// The type names of a source (comments stripped) that [`crate::foundation::symbols::mangle`]
/// may and may not spell: (the classes, structs and enums declared only at global scope,
/// outside any brace; the names declared anywhere else, and every typedef and alias). A
/// file with a macro that opens or closes a brace has scopes this cannot see: none of its
/// classes is spelled.
fn type_names(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let text = outside_strings(text);
    let mut global = BTreeSet::new();
    let mut blocked = BTreeSet::new();
    let mut depth = 0usize;
    let braces_in_macros = text.lines().any(|l| {
        l.trim_start()
            .strip_prefix('#')
            .is_some_and(|d| d.trim_start().starts_with("define") && d.contains(['{', '}']))
    });
    for part in text.split_inclusive(['{', '}', ';']) {
        let words: Vec<&str> = part
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        for (i, w) in words.iter().enumerate() {
            let named = match *w {
                "struct" | "class" | "union" | "enum" => words.get(i + 1).copied(),
                _ => None,
            };
            // `enum class E`: the name comes after `class`.
            if let Some(n) = named.filter(|n| !matches!(*n, "class" | "struct")) {
                if depth == 0 && !braces_in_macros {
                    global.insert(n.to_string());
                } else {
                    blocked.insert(n.to_string());
                }
            }
            if *w == "using"
                && let Some(n) = words.get(i + 1)
                && part.contains('=')
            {
                blocked.insert(n.to_string());
            }
        }
        if words.first() == Some(&"typedef")
            && let Some(n) = words.last()
        {
            blocked.insert(n.to_string());
        }
        if part.ends_with('{') {
            depth += 1;
        } else if part.ends_with('}') {
            depth = depth.saturating_sub(1);
        }
    }
    let classes = global.difference(&blocked).cloned().collect();
    (classes, blocked)
}

/// Whether an include is PyTorch's (or pybind11's and Python's, which its extensions use).
fn torch_header(h: &str) -> bool {
    ["torch/", "ATen/", "c10/", "caffe2/", "pybind11/"]
        .iter()
        .any(|p| h.starts_with(p))
        || h == "Python.h"
}

/// The body of a `PYBIND11_MODULE(name, var) { ... }` in a (comment-stripped) source, with
/// the module's variable.
struct PybindBlock<'a> {
    var: String,
    body: &'a str,
}

fn pybind_block(t: &str) -> Option<PybindBlock<'_>> {
    let at = t.find("PYBIND11_MODULE")?;
    let rest = &t[at + "PYBIND11_MODULE".len()..];
    let args_end = rest.find(')')?;
    let var = rest[..args_end].rsplit(',').next()?.trim().to_string();
    let open = args_end + rest[args_end..].find('{')?;
    let mut depth = 0usize;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(PybindBlock {
                        var,
                        body: &rest[open + 1..open + i],
                    });
                }
            }
            _ => {}
        }
    }
    Some(PybindBlock {
        var,
        body: &rest[open + 1..],
    })
}

/// How many files beside a kernel file are read for its PyTorch bindings, at most.
const MAX_BINDING_FILES: usize = 64;
/// How many files are read for the functions a binding declares but neither it nor the
/// kernel file defines, at most.
const MAX_DEFINITION_FILES: usize = 256;

/// Whether a path names a C++ or CUDA source (what a PyTorch extension compiles).
fn cxx_source(p: &Path) -> bool {
    p.extension()
        .is_some_and(|e| ["cpp", "cc", "cxx", "cu"].iter().any(|x| e == *x))
}

/// The C++ and CUDA files directly in `dir` (under `root`), sorted, at most `limit`.
fn cxx_files(root: &Path, dir: &Path, limit: usize) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| cxx_source(p) && p.is_file())
        .collect();
    names.sort();
    names.truncate(limit);
    names
}

/// The directories directly in `dir` (under `root`) that a walk of the repository enters
/// ([`walked`]), sorted, but `except`.
fn subdirs(root: &Path, dir: &Path, except: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_type().is_ok_and(|t| t.is_dir()) && walked(&e.file_name().to_string_lossy(), 1)
        })
        .map(|e| dir.join(e.file_name()))
        .filter(|d| Some(d.as_path()) != except)
        .collect();
    dirs.sort();
    dirs
}

/// A file's path under `root`, with `/`, and its text without comments; None where it
/// cannot be read.
fn read_stripped(root: &Path, p: &Path) -> Option<(String, String)> {
    let r = p
        .strip_prefix(root)
        .ok()?
        .to_string_lossy()
        .replace('\\', "/");
    let bytes = crate::foundation::fsutil::read_bounded(p, MAX_SOURCE).ok()?;
    Some((r, strip_comments(&text_of(&bytes))))
}

/// The functions a (comment-stripped) binding puts in its module: `m.def("name", ...)` inside
/// `PYBIND11_MODULE(name, m) { ... }`, with its variable, or through a macro of the file's
/// own that calls `m.def` (`#define BIND(func) m.def(STRINGFY(func), &func, ...)`, then
/// `BIND(name)`); not a class's methods (`py::class_<...>.def`), a submodule's, or
/// `TORCH_LIBRARY`'s operators.
fn bound_functions(t: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let Some(block) = pybind_block(t) else {
        return out;
    };
    let is_ident = |name: &str| {
        name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let add = |name: String, out: &mut Vec<String>| {
        if is_ident(&name) && !out.contains(&name) && out.len() < MAX_KERNELS {
            out.push(name);
        }
    };
    for part in block.body.split(&format!("{}.def(", block.var)).skip(1) {
        if let Some(rest) = part.trim_start().strip_prefix('"') {
            add(rest.chars().take_while(|c| *c != '"').collect(), &mut out);
        }
    }
    // Macros of one parameter whose body calls `VAR.def(`.
    let joined = t.replace("\\\r\n", " ").replace("\\\n", " ");
    let macros: Vec<String> = joined
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix('#')?.trim_start();
            let rest = rest.strip_prefix("define")?.trim_start();
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let after = &rest[name.len()..];
            (after.starts_with('(') && after.contains(&format!("{}.def(", block.var)))
                .then_some(name)
        })
        .collect();
    for mac in macros.iter().filter(|m| is_ident(m)) {
        let pat = format!("{mac}(");
        let mut from = 0;
        while let Some(at) = block.body[from..].find(&pat) {
            let at = from + at;
            from = at + pat.len();
            let before = block.body[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let arg: String = block.body[from..]
                .chars()
                .take_while(|c| *c != ')')
                .collect();
            add(arg.trim().to_string(), &mut out);
        }
    }
    out
}

/// Whether a (comment-stripped) text defines a function `name`: `name(...)` followed by its
/// body (`{`), past `const`, `noexcept` and `override`, rather than by `;`.
fn defines(t: &str, name: &str) -> bool {
    let pat = format!("{name}(");
    let mut from = 0;
    while let Some(at) = t[from..].find(&pat) {
        let at = from + at;
        from = at + pat.len();
        if t[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            continue;
        }
        // The parameters, balanced.
        let mut depth = 1usize;
        let mut end = None;
        for (i, c) in t[from..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(from + i + 1);
                        break;
                    }
                }
                ';' | '{' | '}' => break,
                _ => {}
            }
        }
        let Some(end) = end else { continue };
        let mut rest = t[end..].trim_start();
        for q in ["const", "noexcept", "override"] {
            rest = rest.strip_prefix(q).unwrap_or(rest).trim_start();
        }
        if rest.starts_with('{') {
            return true;
        }
    }
    false
}

/// A kernel file that includes PyTorch's headers as a `torch-extension`: the files that bind
/// it, looked for among the file itself and the C++ and CUDA files beside it, else up to two
/// directories up (`csrc/cuda/k.cu` bound by `csrc/k.cpp`) and in those directories' other
/// subdirectories (LeetCUDA's `kernels/flash-attn/pybind/flash_attn.cc` for
/// `kernels/flash-attn/mma/k.cu`), where a binding counts only if it binds a function the
/// kernel file defines; the module the binding names; the functions it defines; the files
/// that define the functions it binds that neither it nor the kernel file defines.
fn torch_extension(root: &Path, rel: &Path, src: &str, headers: Vec<String>) -> TorchExt {
    // Of a comment-stripped text: (defines the module, registers operators or their kernels).
    let binds = |t: &str| {
        (
            t.contains("PYBIND11_MODULE") || t.contains("PyInit_"),
            t.contains("TORCH_LIBRARY"),
        )
    };
    // Each file that binds: its path and its text without comments (stripped once).
    let has_module = |found: &[(String, String)]| found.iter().any(|(_, t)| binds(t).0);
    let source = rel.to_string_lossy().replace('\\', "/");
    let mut found: Vec<(String, String)> = Vec::new();
    let own = strip_comments(src);
    if let (true, _) | (_, true) = binds(&own) {
        found.push((source.clone(), own.clone()));
    }
    let binds_own = |t: &str| bound_functions(t).iter().any(|f| defines(&own, f));
    let mut dir = rel.parent().map(Path::to_path_buf);
    let mut came_from: Option<PathBuf> = None;
    let mut budget = MAX_BINDING_FILES;
    // Where the module's binding was found (the root of the search for definitions).
    let mut found_at: Option<PathBuf> = None;
    // Until a file that defines the module (a file of `TORCH_LIBRARY_IMPL`s alone does not).
    for level in 0..3 {
        if has_module(&found) {
            break;
        }
        let Some(d) = dir.take() else { break };
        // (directory, whether a binding there must bind one of the kernel file's functions)
        let mut places = vec![(d.clone(), level >= 2)];
        if level > 0 {
            places.extend(
                subdirs(root, &d, came_from.as_deref())
                    .into_iter()
                    .map(|s| (s, true)),
            );
        }
        for (place, must_be_own) in places {
            for p in cxx_files(root, &place, budget) {
                budget = budget.saturating_sub(1);
                let Some((r, text)) = read_stripped(root, &p) else {
                    continue;
                };
                if r == source || found.iter().any(|(f, _)| *f == r) {
                    continue;
                }
                let (module, operators) = binds(&text);
                if !(module || operators) || (must_be_own && !binds_own(&text)) {
                    continue;
                }
                if module && found_at.is_none() {
                    found_at = Some(d.clone());
                }
                found.push((r, text));
            }
        }
        came_from = Some(d.clone());
        dir = d.parent().map(Path::to_path_buf);
    }
    let mut module = None;
    let mut functions: Vec<String> = Vec::new();
    let mut operators = false;
    for (_, t) in &found {
        operators |= t.contains("TORCH_LIBRARY");
        let ident = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        // `PYBIND11_MODULE(name, m)`, or a module's own `PyObject* PyInit_name(void)`.
        let named = t
            .find("PYBIND11_MODULE")
            .map(|at| {
                let args = t[at + "PYBIND11_MODULE".len()..].trim_start();
                ident(args.strip_prefix('(').unwrap_or("").trim_start())
            })
            .or_else(|| {
                t.find("PyInit_")
                    .map(|at| ident(&t[at + "PyInit_".len()..]))
            });
        if let Some(name) = named
            && module.is_none()
            && !name.is_empty()
            && name != "TORCH_EXTENSION_NAME"
        {
            module = Some(name);
        }
        for name in bound_functions(t) {
            if !functions.contains(&name) {
                functions.push(name);
            }
        }
    }
    // The module's name where the binding leaves it to the build (`TORCH_EXTENSION_NAME`):
    // the kernel file's stem as a Python identifier.
    let module = module.unwrap_or_else(|| {
        let stem = rel
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut m: String = stem
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if !m.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            m.insert(0, '_');
        }
        m
    });
    // Without a file that defines the module, nothing names it: the recipe says so.
    let bindings: Vec<String> = if has_module(&found) {
        found.iter().map(|(f, _)| f.clone()).collect()
    } else {
        Vec::new()
    };
    let mut sources: Vec<String> = found.iter().map(|(f, _)| f.clone()).collect();
    if !sources.contains(&source) {
        sources.push(source.clone());
    }
    // The functions the module binds that neither its bindings nor the kernel file define
    // (LeetCUDA's binding declares those of several kernel files): the file that does, from
    // the directory the binding was found in down, the first by path (others named).
    let mut notes = Vec::new();
    let defined_here = |f: &String| defines(&own, f) || found.iter().any(|(_, t)| defines(t, f));
    let missing: Vec<&String> = functions.iter().filter(|f| !defined_here(f)).collect();
    if let (Some(top), false) = (&found_at, missing.is_empty()) {
        let files: Vec<(String, String)> = files_under(root, top)
            .into_iter()
            .map(|(_, r)| r)
            .filter(|r| cxx_source(Path::new(r)) && !sources.contains(r))
            .take(MAX_DEFINITION_FILES)
            .filter_map(|r| read_stripped(root, &root.join(r)))
            .collect();
        for f in missing {
            let by: Vec<&String> = files
                .iter()
                .filter(|(_, t)| defines(t, f))
                .map(|(r, _)| r)
                .collect();
            match by.as_slice() {
                [] => notes.push(format!(
                    "`{f}` is bound, but no file found defines it: add the one that does to sources"
                )),
                [first, rest @ ..] => {
                    if !sources.contains(first) {
                        sources.push((*first).clone());
                    }
                    if !rest.is_empty() {
                        let others: Vec<&str> = rest.iter().map(|r| r.as_str()).collect();
                        notes.push(format!(
                            "`{f}` is also defined in {}: sources takes {first}",
                            others.join(", ")
                        ));
                    }
                }
            }
        }
    }
    TorchExt {
        module,
        sources,
        functions,
        bindings,
        operators,
        headers,
        notes,
    }
}

/// Whether `path` is under `root` once `.` and `..` are resolved by name alone (for a path
/// that does not exist and so cannot be canonicalised).
fn lexically_inside(root: &Path, path: &Path) -> bool {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.starts_with(root) || root.canonicalize().is_ok_and(|r| out.starts_with(r))
}

/// Where each include comes from. A quoted include beside the including file needs nothing;
/// any other include (quoted, or in angle brackets as CMake's `include_directories` style
/// has it) that a repository file answers gets that file's directory (the shallowest match)
/// as an include directory; the rest come from outside the repository (the host's headers
/// or the CUDA toolkit's: `<cuda_fp16.h>`, `<mma.h>`), which NVRTC's wheel does not ship.
/// Returns the include directories and the outside headers.
fn resolve_includes(
    root: &Path,
    dir: &Path,
    incs: &[(String, bool)],
    files: &mut Option<RepoFiles>,
) -> (Vec<String>, Vec<String>) {
    let mut dirs = BTreeSet::new();
    let mut outside = Vec::new();
    for (h, angle) in incs {
        if !*angle && root.join(dir).join(h).is_file() {
            continue;
        }
        if h.contains("..") || h.starts_with('/') {
            outside.push(h.clone());
            continue;
        }
        let files = files.get_or_insert_with(|| RepoFiles::of(root));
        match files.find(h, dir) {
            Some(p) => {
                let base = p[..p.len() - h.len()].trim_end_matches('/');
                dirs.insert(if base.is_empty() {
                    ".".into()
                } else {
                    base.to_string()
                });
            }
            None => outside.push(h.clone()),
        }
    }
    // The build searches them in order: the nearest to the kernel first, so that where two
    // directories hold a header of one name, the one chosen for it is the one found.
    let mut dirs: Vec<String> = dirs.into_iter().collect();
    let shared = |d: &str| {
        Path::new(d)
            .components()
            .zip(dir.components())
            .take_while(|(a, b)| a == b)
            .count()
    };
    dirs.sort_by_key(|d| std::cmp::Reverse(shared(d)));
    (dirs, outside)
}

/// The repository's files that `src` (the file `rel`) includes, directly or through other
/// included files, with their text, in the order found (breadth first); and the includes of
/// those files that the repository does not answer (`cuda_runtime.h`, `nvtx3/...`). An include is
/// looked for beside the file that includes it, else as the repository's shallowest file
/// whose path ends with it (as [`resolve_includes`] finds include directories); at most
/// [`MAX_INCLUDED`] files are read, each bounded as the named file is, and
/// [`MAX_INCLUDED_BYTES`] in all.
fn included_files(root: &Path, rel: &Path, src: &str, files: &mut Option<RepoFiles>) -> Included {
    let mut seen = BTreeSet::from([rel.to_string_lossy().replace('\\', "/")]);
    let mut queue = std::collections::VecDeque::from([(rel.to_path_buf(), src.to_string())]);
    let mut out = Vec::new();
    let mut outside = BTreeSet::new();
    let mut edges = Vec::new();
    let mut read = 0;
    let done = |files, outside, edges| Included {
        files,
        outside,
        edges,
    };
    while let Some((path, text)) = queue.pop_front() {
        let dir = path.parent().unwrap_or(Path::new("")).to_path_buf();
        let from = path.to_string_lossy().replace('\\', "/");
        for (h, _) in includes(&text) {
            if seen.len() >= MAX_INCLUDED || h.starts_with('/') {
                continue;
            }
            // `../include/x.h` beside the file, where it stays inside the repository.
            let beside = if h.contains("..") {
                let joined = dir.join(&h).to_string_lossy().replace('\\', "/");
                match crate::foundation::recipe::normalize(&joined) {
                    Some(n) => PathBuf::from(n),
                    None => continue,
                }
            } else {
                dir.join(&h)
            };
            let found = if root.join(&beside).is_file() {
                Some(beside.to_string_lossy().replace('\\', "/"))
            } else {
                files
                    .get_or_insert_with(|| RepoFiles::of(root))
                    .find(&h, &dir)
                    .map(str::to_string)
            };
            let Some(found) = found else {
                outside.insert(h);
                continue;
            };
            edges.push((from.clone(), h, found.clone()));
            if !seen.insert(found.clone()) {
                continue;
            }
            let Ok(bytes) = crate::foundation::fsutil::read_bounded(&root.join(&found), MAX_SOURCE)
            else {
                continue;
            };
            read += bytes.len();
            if read > MAX_INCLUDED_BYTES {
                return done(out, outside, edges);
            }
            let text = text_of(&bytes);
            queue.push_back((PathBuf::from(&found), text.clone()));
            out.push((found, text));
        }
    }
    done(out, outside, edges)
}

/// What [`included_files`] found.
struct Included {
    /// The repository's files included, with their text, in the order found.
    files: Vec<(String, String)>,
    /// The includes the repository does not answer.
    outside: BTreeSet<String>,
    /// Each include the repository answers: (the including file, the include as written,
    /// the file found), paths relative to the repository's root.
    edges: Vec<(String, String, String)>,
}

impl Included {
    /// The brace macros each `#include` of `file` brings in (see [`Headers`]): each header
    /// is read once, with the macros of its own includes taken in where it includes them;
    /// an include cycle adds nothing.
    fn headers_of(&self, file: &str) -> Headers {
        let mut memo = std::collections::HashMap::new();
        self.headers_at(file, &mut memo, &mut BTreeSet::new())
    }

    fn headers_at(
        &self,
        file: &str,
        memo: &mut std::collections::HashMap<String, BraceMacros>,
        visiting: &mut BTreeSet<String>,
    ) -> Headers {
        let mut out = Headers::new();
        for (_, spelling, to) in self.edges.iter().filter(|e| e.0 == file) {
            let macros = self.macros_through(to, memo, visiting);
            out.insert(spelling.clone(), macros);
        }
        out
    }

    /// The brace macros defined once `file` has been included.
    fn macros_through(
        &self,
        file: &str,
        memo: &mut std::collections::HashMap<String, BraceMacros>,
        visiting: &mut BTreeSet<String>,
    ) -> BraceMacros {
        if let Some(m) = memo.get(file) {
            return m.clone();
        }
        if !visiting.insert(file.to_string()) {
            return BraceMacros::new();
        }
        let headers = self.headers_at(file, memo, visiting);
        let text = self.files.iter().find(|(f, _)| f == file).map(|(_, t)| t);
        let mut macros = text
            .map(|t| {
                let t = strip_comments(t) + "\n";
                let mut scan = Scan::new(&t, &headers);
                scan.advance_to(t.len());
                scan.brace_macros
            })
            .unwrap_or_default();
        // Bounded whatever the headers hold: each file's set is kept (memo) and cloned
        // into every file that includes it.
        if macros.len() > MAX_HEADER_MACROS {
            let mut names: Vec<String> = macros.keys().cloned().collect();
            names.sort();
            for n in &names[MAX_HEADER_MACROS..] {
                macros.remove(n);
            }
        }
        visiting.remove(file);
        memo.insert(file.to_string(), macros.clone());
        macros
    }
}

/// How many brace macros one header brings in, at most.
const MAX_HEADER_MACROS: usize = 1_000;

/// `file` (relative to the repository's root) as seen from `dir` (also relative to it).
fn relative_to(dir: &Path, file: &str) -> String {
    let mut up = dir.components().count();
    let mut rest = Path::new(file);
    for c in dir.components() {
        match rest.strip_prefix(c) {
            Ok(r) => {
                rest = r;
                up -= 1;
            }
            Err(_) => break,
        }
    }
    let mut out = "../".repeat(up);
    out.push_str(&rest.to_string_lossy());
    out
}

/// How many bytes [`included_files`] reads at most, over every file.
const MAX_INCLUDED_BYTES: usize = 64 << 20;

/// How many files [`included_files`] reads at most.
const MAX_INCLUDED: usize = 256;

/// The repository's files by file name, for finding what an include names.
struct RepoFiles {
    by_name: std::collections::HashMap<String, Vec<(usize, String)>>,
}

impl RepoFiles {
    fn of(root: &Path) -> RepoFiles {
        let mut by_name: std::collections::HashMap<String, Vec<(usize, String)>> =
            std::collections::HashMap::new();
        for (depth, p) in repository_files(root) {
            let name = p.rsplit('/').next().unwrap_or(&p).to_string();
            by_name.entry(name).or_default().push((depth, p));
        }
        RepoFiles { by_name }
    }

    /// The file whose path is `h` or ends with `/h` nearest to the directory `near` (the
    /// including file's, relative to the root): the one sharing the most leading directories
    /// with it (`kernels/hgemm/utils/utils.h` for a file under `kernels/hgemm/`, not
    /// `kernels/flash-attn/utils/utils.h`), then the shallowest, then the first by name.
    fn find(&self, h: &str, near: &Path) -> Option<&str> {
        let name = h.rsplit('/').next().unwrap_or(h);
        let suffix = format!("/{h}");
        let shared = |p: &str| {
            Path::new(p)
                .components()
                .zip(near.components())
                .take_while(|(a, b)| a == b)
                .count()
        };
        self.by_name
            .get(name)?
            .iter()
            .filter(|(_, p)| p == h || p.ends_with(&suffix))
            .min_by_key(|(depth, p)| (std::cmp::Reverse(shared(p)), *depth, p.as_str()))
            .map(|(_, p)| p.as_str())
    }
}

/// The repository's files, relative to `root`, with their depth: hidden directories,
/// `target` and `node_modules` left out, at most [`MAX_WALK`] entries 8 levels deep.
fn repository_files(root: &Path) -> Vec<(usize, String)> {
    files_under(root, Path::new(""))
}

/// Whether a walk of the repository takes an entry of this name at this depth below where
/// it started: not a hidden one (below the start), `target` or `node_modules`.
fn walked(name: &str, depth: usize) -> bool {
    !(name.starts_with('.') && depth > 0) && name != "target" && name != "node_modules"
}

/// [`repository_files`] of the directory `dir` (relative to `root`): its files, relative to
/// `root`, in the order of a walk sorted by name, with their depth below `dir`.
fn files_under(root: &Path, dir: &Path) -> Vec<(usize, String)> {
    walkdir::WalkDir::new(root.join(dir))
        .max_depth(8)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| walked(&e.file_name().to_string_lossy(), e.depth()))
        .take(MAX_WALK)
        .flatten()
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| {
            let rel = e.path().strip_prefix(root).ok()?;
            Some((e.depth(), rel.to_string_lossy().replace('\\', "/")))
        })
        .collect()
}

/// The text of a recipe for `k`, building for `target`.
pub fn recipe_text(k: &KernelFile, target: &str) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|s| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut t = String::from("schema = 1\n");
    t.push_str(&format!(
        "description = \"{}, written by repro init\"\n\n[build]\n",
        k.source.replace('"', "\\\"")
    ));
    t.push_str(&format!("# {} because {}\n", k.kind, k.why));
    t.push_str(&format!("kind = \"{}\"\n", k.kind));
    if let Some(x) = &k.torch {
        return torch_recipe_text(t, k, x, target, list);
    }
    t.push_str(&format!("source = \"{}\"\n", k.source.replace('"', "\\\"")));
    if !k.kernels.is_empty() {
        t.push_str(&format!("entries = [{}]\n", list(&k.kernels)));
    }
    for (name, symbols) in &k.overloads {
        if symbols.is_empty() {
            t.push_str(&format!(
                "# `{name}` is overloaded, and its symbols cannot be told from the source here (a parameter type repro does not spell, a template overload, an anonymous namespace, or overloads under different conditions): replace it in entries with the symbol of each overload (`repro build` lists them)\n"
            ));
        } else {
            t.push_str(&format!(
                "# `{name}` is overloaded: entries name each overload by its symbol:\n"
            ));
            for (m, p) in symbols {
                t.push_str(&format!(
                    "#   {m} is {name}({})\n",
                    crate::foundation::output::printable(
                        &p.split_whitespace().collect::<Vec<_>>().join(" ")
                    )
                ));
            }
        }
    }
    if k.more {
        t.push_str(&format!(
            "# the file has more than {MAX_KERNELS} `__global__`s: only the first {MAX_KERNELS} were read; add the rest by hand\n"
        ));
    }
    if !k.templates.is_empty() {
        t.push_str(&format!(
            "# template kernels (no symbol until instantiated): {}\n",
            k.templates.join(", ")
        ));
    }
    // Kernels compiled only where a condition holds, grouped by it, in source order.
    let mut conditions: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, cond) in &k.conditional {
        match conditions.iter_mut().find(|(c, _)| c == cond) {
            Some((_, names)) => names.push(name),
            None => conditions.push((cond, vec![name])),
        }
    }
    for (cond, names) in conditions {
        t.push_str(&format!(
            "# under `{cond}` (compiled only where it holds: add them to entries with the [build.defines] that make it so): {}\n",
            names.join(", ")
        ));
    }
    t.push_str(&format!("target = \"{target}\"\n"));
    let outputs = if k.kind == "nvrtc" {
        "[\"ptx\", \"cubin\"]"
    } else {
        "[\"cubin\"]"
    };
    t.push_str(&format!("outputs = {outputs}\n"));
    if !k.include_dirs.is_empty() {
        t.push_str(&format!("include-dirs = [{}]\n", list(&k.include_dirs)));
    }
    t
}

/// The rest of a `torch-extension` recipe (after its kind): module, sources, the functions
/// the bindings define as entries, the kernels in a comment.
fn torch_recipe_text(
    mut t: String,
    k: &KernelFile,
    x: &TorchExt,
    target: &str,
    list: impl Fn(&[String]) -> String,
) -> String {
    t.push_str(&format!("module = \"{}\"\n", x.module));
    t.push_str(&format!("sources = [{}]\n", list(&x.sources)));
    if x.bindings.is_empty() {
        t.push_str("# no file beside it defines the module (PYBIND11_MODULE, or its own PyInit_): add the one that does to sources\n");
    }
    for note in &x.notes {
        t.push_str(&format!("# {note}\n"));
    }
    if !x.functions.is_empty() {
        t.push_str(&format!("entries = [{}]\n", list(&x.functions)));
    }
    if x.operators {
        t.push_str("# operators registered with TORCH_LIBRARY are called as torch.ops.NAMESPACE.NAME, not as the module's functions\n");
    }
    let mut kernels = k.kernels.clone();
    kernels.extend(k.templates.iter().cloned());
    if !kernels.is_empty() {
        t.push_str(&format!("# its kernels: {}\n", kernels.join(", ")));
    }
    if !k.source.ends_with(".cu") {
        t.push_str("# PyTorch compiles only .cu sources with nvcc: a kernel in another file needs a .cu beside it that includes it\n");
    }
    t.push_str(&format!("targets = [\"{target}\"]\n"));
    if !k.include_dirs.is_empty() {
        t.push_str(&format!("include-dirs = [{}]\n", list(&k.include_dirs)));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host function anywhere a declaration may be (namespace, struct, after `public:`,
    /// a constructor, an operator, a template) sends a file to nvcc; device functions
    /// (directly, through a macro, defaulted members), variables, macro uses, attributes and
    /// anything inside a function body do not.
    #[test]
    fn host_functions_are_found_where_nvrtc_would_refuse_them() {
        let host = |src: &str| {
            let t = nvrtc_view(&strip_comments(src));
            host_function(&t, &device_macros(&t, &Headers::new())).map(|(l, n)| format!("{l}:{n}"))
        };
        for (src, want) in [
            ("struct P { int n; static P make(); };", "1:make"),
            ("namespace a {\nint helper(int x);\n}", "2:helper"),
            ("class C {\npublic:\n  C();\n};", "3:C"),
            (
                "struct S { bool operator<(const S& o) const; };",
                "1:operator",
            ),
            (
                "template <typename T>\nT twice(T x) { return x + x; }",
                "2:twice",
            ),
            ("__host__ void h();", "1:h"),
            (
                "inline int g() { return 1; }\n__global__ void k() {}",
                "1:g",
            ),
            ("struct __align__(16) S { float f() const; };", "1:f"),
            (
                "template <typename T, int N = 4> struct Vec {\n  Vec() {}\n};",
                "2:Vec",
            ),
            (
                "struct U { friend U operator+(U a, U b) { return a; } };",
                "1:operator",
            ),
            ("float g_table[4] = {1, 2, 3, 4};", "1:g_table"),
            ("namespace n {\nint counter;\n}", "2:counter"),
            (
                "#if defined(__CUDACC_RTC__)\nvoid host();\n#else\n#endif\n",
                "2:host",
            ),
        ] {
            assert_eq!(host(src).as_deref(), Some(want), "{src}");
        }
        for src in [
            "__global__ void k(float* x) { helper(x); int y(3); if (x) { go(); } }",
            "__device__ float f(float x);\n__host__ __device__ int g();",
            "#define HD __host__ __device__\nstruct V { HD float get() const { return 1.f; } };",
            "#define DEV __device__ \\\n  __forceinline__\nDEV float f();",
            "struct P { P() = default; int n; };",
            "__constant__ float c[4] = {1, 2, 3, 4};\nstatic_assert(sizeof(int) == 4, \"int\");",
            "__global__ void k(int* x) { x[0] = 1'000; }\n__device__ int g();",
            "DEFINE_KERNELS(float);\ntypedef void (*fn)(int);\nusing F = int(int);",
            "auto f = [](int x) { return x; };\nextern \"C\" {\n__global__ void k() {}\n}",
            "__device__ dim3 g(4);\nconst char* s = \"void host();\";",
            "#ifndef __CUDACC_RTC__\nvoid host();\n#endif\n__global__ void k() {}",
            "#if 0\nint host_helper(int);\n#else\n__device__ int h();\n#endif",
            "#ifdef __CUDACC_RTC__\n__device__ int h();\n#else\nint host_only();\n#endif",
            "struct A { __device__ A& operator=(const A&) = default; };",
            "struct F { float (*fn)(float); };\ntypedef int (*op)(int);",
            "const float scale(SCALE);\nconst int n = 4;\nconstexpr int m = 2;",
            "struct P { int n; float v[2]; };\n__constant__ P p;\nextern __device__ int e;",
        ] {
            assert_eq!(host(src), None, "{src}");
        }
    }

    /// A macro without parameters standing for `__global__` (alone, with `extern "C"` or
    /// with attributes) marks kernels where it is used after its definition, also from a
    /// repository header; a function-like one, an unrelated macro or a use before the
    /// definition marks nothing.
    #[test]
    fn kernels_declared_through_a_macro_for_global() {
        let names = |src: &str| kernels(src).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            names("#define KERNEL __global__\nKERNEL void a(float* x) { }"),
            ["a"]
        );
        assert_eq!(
            names(
                "#define K extern \"C\" __global__ __launch_bounds__(256)\nnamespace n {\nK void b() { }\n}"
            ),
            ["b"]
        );
        assert_eq!(
            names("KERNEL void a() { }\n#define KERNEL __global__\n"),
            Vec::<String>::new()
        );
        assert_eq!(
            names("#define KERNEL(n) __global__ void n()\nKERNEL(c) { }"),
            Vec::<String>::new()
        );
        assert_eq!(
            names("#define FAST __forceinline__\nFAST void d() { }"),
            Vec::<String>::new()
        );
        assert_eq!(
            names("#define KERNEL __global__\nKERNEL void e();\n"),
            Vec::<String>::new()
        );
        // Continued over lines, made of another marker, chosen for CUDA over HIP.
        assert_eq!(
            names("#define FAST \\\n  __global__ __launch_bounds__(256)\nFAST void g() { }"),
            ["g"]
        );
        assert_eq!(
            names(
                "#define GLOBAL __global__\n#define KERNEL_LB GLOBAL __launch_bounds__(256)\nKERNEL_LB void h() { }"
            ),
            ["h"]
        );
        assert_eq!(
            names(
                "#if defined(__CUDACC__) || defined(__HIPCC__)\n#define KERNEL __global__\n#else\n#define KERNEL\n#endif\nKERNEL void i() { }"
            ),
            ["i"]
        );
        // A string that holds the word is no marker.
        assert_eq!(
            names(
                "#define PREFIX \"extern \\\"C\\\" __global__ \"\nconst char* s = PREFIX \"void j() {}\";"
            ),
            Vec::<String>::new()
        );
        let mut headers = Headers::new();
        let mut m = BraceMacros::new();
        m.insert("GLOBAL".into(), (None, "__global__".into()));
        headers.insert("common.h".into(), m);
        let found: Vec<String> =
            kernels_in("#include \"common.h\"\nGLOBAL void f() { }\n", &headers)
                .into_iter()
                .map(|k| k.name)
                .collect();
        assert_eq!(found, ["f"]);
    }

    /// An overloaded kernel is found once, with each definition's parameters.
    #[test]
    fn overloads_keep_their_signatures() {
        let f =
            kernels_with("__global__ void o(float* x) { }\n__global__ void o(int* x, int n) { }\n");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].signatures, ["float* x", "int* x, int n"]);
    }

    #[test]
    fn kernels_are_found_with_attributes_templates_and_comments() {
        let src = r#"
// __global__ void in_comment() {}
/* __global__ void in_block() {} */
#include <cuda_runtime.h>
#include "common/util.h"
extern "C" __global__ void __launch_bounds__(256, 2) plain(float* x) {}
template <int N>
__global__ void templ(float* x) {}
__global__
void
split_lines(int n) {}
static __device__ int helper(int);
int main() { plain<<<1, 1>>>(nullptr); }
"#;
        assert_eq!(
            kernels(src),
            vec![
                ("plain".to_string(), false),
                ("templ".to_string(), true),
                ("split_lines".to_string(), false)
            ]
        );
        assert_eq!(
            includes(src),
            vec![
                ("cuda_runtime.h".to_string(), true),
                ("common/util.h".to_string(), false)
            ]
        );
        assert!(has_host_code(src));
        assert_eq!(component_of("cublas_v2.h"), Some("cublas"));
        assert_eq!(component_of("cute/tensor.hpp"), Some("cutlass"));
        assert_eq!(component_of("nvtx3/nvToolsExt.h"), Some("nvtx"));
        assert_eq!(component_of("nvToolsExt.h"), Some("nvtx"));
        assert_eq!(component_of("cuda_profiler_api.h"), Some("profiler"));
        assert_eq!(component_of("curand_kernel.h"), Some("curand"));
        assert_eq!(component_of("nccl.h"), Some("nccl"));
        assert_eq!(component_of("cuda_runtime.h"), None);
    }

    #[test]
    fn kernels_inside_a_preprocessor_condition_say_which() {
        let src = "#ifndef K_H\n#define K_H\n#ifdef __CUDACC__\n__global__ void always(float* x) {}\n#endif\n\
                   #ifdef ENABLE_CUDNN\n__global__ void with_cudnn(float* x) {}\n#if 1\n__global__ void nested(float* x) {}\n#endif\n\
                   #else\n__global__ void without(float* x) {}\n#endif // ENABLE_CUDNN\n\
                   #  if defined(__CUDACC__) && FOO > 2\n__global__ void foo(float* x) {}\n#elif BAR\n__global__ void bar(float* x) {}\n#endif\n\
                   #if defined(__CUDACC__)\ntemplate <int N> __global__ void t(float* x) {}\n#endif\n__global__ void last(float* x) {}\n#endif\n";
        let got: Vec<(String, Option<String>)> = kernels_with(src)
            .into_iter()
            .map(|k| (k.name, k.condition))
            .collect();
        let want = [
            ("always", None),
            ("with_cudnn", Some("#ifdef ENABLE_CUDNN")),
            ("nested", Some("#ifdef ENABLE_CUDNN")),
            ("without", Some("#else of #ifdef ENABLE_CUDNN")),
            ("foo", Some("#if defined(__CUDACC__) && FOO > 2")),
            ("bar", Some("#elif of #if defined(__CUDACC__) && FOO > 2")),
            ("t", None),
            ("last", None),
        ];
        let want: Vec<(String, Option<String>)> = want
            .iter()
            .map(|(n, c)| (n.to_string(), c.map(str::to_string)))
            .collect();
        assert_eq!(got, want);
        // The recipe lists the unconditional ones and says why the others are left out.
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("k.cuh"), src).unwrap();
        let k = read_kernel_file(d.path(), d.path(), Path::new("k.cuh")).unwrap();
        assert_eq!(
            (k.kernels.as_slice(), k.templates.as_slice()),
            (
                &["always".to_string(), "last".to_string()][..],
                &["t".to_string()][..]
            )
        );
        let text = recipe_text(&k, "sm_90");
        let r = crate::foundation::recipe::parse_detached("recipes/k.toml", &text).unwrap();
        assert_eq!(r.entries(), ["always", "last"]);
        assert!(
            text.contains("# under `#ifdef ENABLE_CUDNN` (compiled only where it holds: add them to entries with the [build.defines] that make it so): with_cudnn, nested\n"),
            "{text}"
        );
    }

    /// Files of a megabyte made of kernels, or of `__global__`s that name nothing, inside
    /// many namespaces and conditions: read in one pass (the look behind each kernel was
    /// the whole file before it, minutes for these), and at most [`MAX_KERNELS`] kernels
    /// looked at.
    #[test]
    fn a_huge_or_hostile_source_is_read_in_one_pass_and_bounded() {
        let one = "namespace n {\n#ifdef X\n__global__ void k0(int* p) {}\n#endif\n}\n";
        let many: String = (0..12_000)
            .map(|i| one.replace("k0", &format!("k{i}")))
            .collect();
        let found = kernels_with(&many);
        assert_eq!(found.len(), MAX_KERNELS);
        assert_eq!(found[0].name, "n::k0");
        assert_eq!(found[0].condition.as_deref(), Some("#ifdef X"));
        let nameless = "__global__ ".repeat(100_000);
        assert!(kernels_with(&nameless).is_empty());
        let unclosed = format!(
            "{}__global__ void late(int* p) {{}}",
            "{ namespace a ".repeat(70_000)
        );
        assert_eq!(kernels_with(&unclosed).len(), 1);
        // Deep conditions under many definitions, and `#else`s under deep braces: each
        // directive costs at most the tracked depth (a review timed minutes for these).
        let deep = format!(
            "{}{}__global__ void d(int* p) {{}}\n",
            "#if 1\n".repeat(50_000),
            "#define a\n".repeat(50_000)
        );
        let found = kernels_with(&deep);
        assert_eq!(
            found[0].condition.as_deref(),
            Some("a condition nested deeper than 256")
        );
        let braces = format!(
            "{}{}__global__ void e(int* p) {{}}\n",
            "{\n".repeat(40_000),
            "#if X\n#else\n#endif\n".repeat(20_000)
        );
        assert_eq!(kernels_with(&braces).len(), 1);
    }

    /// What a review found in real files' shapes: preprocessor lines before a namespace or a
    /// kernel, a host file's NVRTC source in a string, digit separators, braces opened in
    /// each branch of an `#if`, the `#if !defined` include guard.
    #[test]
    fn preprocessor_lines_strings_and_branches_do_not_confuse_the_names() {
        let src = r#"#if !defined(K_CUH)
#define K_CUH
#include <cuda_runtime.h>
#include "my_templates.cuh"
namespace foo {
__global__ void k(float* x) { if (x[0] > 1'000) { x[0] = 0; } }
}
#include "other.cuh"
__global__ void plain(float* x) {}
const char* nvrtc_src = "extern \"C\" __global__ void saxpy(float* a) {}";
#ifdef __cplusplus
extern "C" {
#endif
__global__ void c_kernel(float* x) {}
#ifdef __cplusplus
}
#endif
namespace ns {
__global__ void body(int* p) {
#if FOO
  if (p) {
#else
  if (!p) {
#endif
    p[0] = 1;
  }
}
}
__global__ void top(int* p) {}
#if 0
#error don't build this
#endif
namespace after_unclosed { __global__ void u(int* p) {} }
#endif
"#;
        let got: Vec<(String, bool, Option<String>)> = kernels_with(src)
            .into_iter()
            .map(|k| (k.name, k.template, k.condition))
            .collect();
        let want = [
            "foo::k",
            "plain",
            "c_kernel",
            "ns::body",
            "top",
            "after_unclosed::u",
        ]
        .map(|n| (n.to_string(), false, None));
        assert_eq!(got, want);
    }

    /// Shapes of real files the scanner misread before: a declaration taken for a kernel, a
    /// macro standing for `__launch_bounds__` taken for the name, attributes on a namespace
    /// dropping its name, a condition continued over lines, `#if 0` listed as a condition
    /// to satisfy, a parameter list longer than a kilobyte.
    #[test]
    fn declarations_macros_namespace_attributes_and_known_conditions_are_read() {
        let params: String = (0..80).map(|i| format!("float* argument_{i}, ")).collect();
        let long_condition: String = (0..600)
            .map(|i| format!("defined(A{i})"))
            .collect::<Vec<_>>()
            .join(" || ");
        let src = format!(
            r#"#define LB(n) __launch_bounds__(n)
__global__ void declared_only(float* x);
__global__ void LB(256) with_macro(float* x) {{}}
__global__ void __launch_bounds__(128) LAUNCH_MIN_BLOCKS(2) two(float* x) {{}}
namespace __attribute__((visibility("hidden"))) hidden {{ __global__ void h(int* p) {{}} }}
namespace after __attribute__ ((visibility ("default"))) {{ __global__ void a(int* p) {{}} }}
namespace [[deprecated("old")]] dep {{ __global__ void d(int* p) {{}} }}
namespace outer::inline v2 {{ __global__ void o(int* p) {{}} }}
namespace inlined {{ __global__ void i(int* p) {{}} }}
__global__ void long_params({params}int n) {{}}
#if defined(ENABLE_A) && \
    defined(ENABLE_B)
__global__ void continued(int* p) {{}}
#endif
#if 0
__global__ void disabled(int* p) {{}}
#else
__global__ void enabled(int* p) {{}}
#endif
#ifndef __CUDACC__
__global__ void host_only(int* p) {{}}
#elif 1
__global__ void elif_one(int* p) {{}}
#else
__global__ void never_either(int* p) {{}}
#endif
#if !defined(__CUDACC__)
__global__ void not_cuda(int* p) {{}}
#endif
#if 1
#elif FOO
__global__ void after_taken(int* p) {{}}
#endif
#ifndef NDEBUG
__global__ void debug_only(int* p) {{}}
#endif
#define PP_CU
#define ENABLE_X 1
#define ENABLE_Y 0
#ifdef PP_CU
__global__ void file_defined(int* p) {{}}
#endif
#if ENABLE_X
__global__ void x_on(int* p) {{}}
#endif
#if ENABLE_Y
__global__ void y_off(int* p) {{}}
#endif
#if !0
__global__ void not_zero(int* p) {{}}
#endif
#ifdef WITH_CUDNN
#define HAVE_CUDNN
#endif
#ifdef HAVE_CUDNN
__global__ void maybe_defined(int* p) {{}}
#endif
namespace lib {{ __global__ void ool(float* x); }}
__global__ void lib::ool(float* x) {{}}
#ifndef USE_TC
#define USE_TC 0
#endif
#if USE_TC
__global__ void tc_kernel(float* x) {{}}
#endif
#define  ALIGNED 1
#ifndef ALIGNED
__global__ void unaligned(float* x) {{}}
#else
__global__ void aligned(float* x) {{}}
#endif
__global__ void kthrow(float*) throw() {{}}
__global__ void knoex(float*) noexcept(true) {{}}
#if 0
namespace old_api {{
#else
namespace v2 {{
#endif
__global__ void versioned(float* x) {{}}
}}
#ifdef ENABLE_EXTRA
#if {long_condition}
#endif
__global__ void extra(float* x) {{}}
#endif
"#
        );
        let got: Vec<(String, Option<String>)> = kernels_with(&src)
            .into_iter()
            .map(|k| (k.name, k.condition))
            .collect();
        let want = [
            ("with_macro", None),
            ("two", None),
            ("hidden::h", None),
            ("after::a", None),
            ("dep::d", None),
            ("outer::v2::o", None),
            ("inlined::i", None),
            ("long_params", None),
            (
                "continued",
                Some("#if defined(ENABLE_A) && defined(ENABLE_B)"),
            ),
            ("enabled", None),
            ("elif_one", None),
            ("debug_only", Some("#ifndef NDEBUG")),
            ("file_defined", None),
            ("x_on", None),
            ("not_zero", None),
            ("maybe_defined", Some("#ifdef HAVE_CUDNN")),
            ("lib::ool", None),
            ("tc_kernel", Some("#if USE_TC")),
            ("aligned", None),
            ("kthrow", None),
            ("knoex", None),
            ("v2::versioned", None),
            ("extra", Some("#ifdef ENABLE_EXTRA")),
        ];
        let want: Vec<(String, Option<String>)> = want
            .iter()
            .map(|(n, c)| (n.to_string(), c.map(str::to_string)))
            .collect();
        assert_eq!(got, want);
        // A declaration before the definition does not hide it.
        let both = "__global__ void k(float* x);\nvoid host() {}\n__global__ void k(float* x) {}\n";
        assert_eq!(kernels(both), vec![("k".to_string(), false)]);
    }

    /// LeetCUDA's layout: kernels in `kernels/NAME/mma/` and `naive/`, one binding for all of
    /// them in `kernels/NAME/pybind/`, whose functions are put in the module by a macro of its
    /// own and defined in several kernel files.
    #[test]
    fn a_binding_in_a_sibling_directory_binds_the_kernels_it_names() {
        let d = tempfile::tempdir().unwrap();
        let w = |p: &str, t: &str| {
            let path = d.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        };
        let host = |name: &str| {
            format!(
                "#include <torch/types.h>\n__global__ void {name}_kernel(float* q) {{}}\nvoid {name}(torch::Tensor Q, int stages) {{\n  {name}_kernel<<<1, 1>>>(nullptr);\n}}\n"
            )
        };
        w(
            "kernels/fa/pybind/fa.cc",
            "#include <torch/extension.h>\n#define STRINGFY(str) #str\n#define BIND(func) \\\n  m.def(STRINGFY(func), &func, STRINGFY(func));\nvoid fa_naive(torch::Tensor Q);\nvoid fa_mma(torch::Tensor Q, int stages);\nvoid fa_gone(torch::Tensor Q);\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  BIND(fa_naive)\n  BIND(fa_mma)\n  BIND(fa_gone)\n}\n",
        );
        w("kernels/fa/mma/fa_mma.cu", &host("fa_mma"));
        w("kernels/fa/mma/fa_mma_bak.cu", &host("fa_mma"));
        w("kernels/fa/naive/fa_naive.cu", &host("fa_naive"));
        w("kernels/fa/mma/swizzle/fa_swz.cu", &host("fa_swz"));
        // Another kernel's binding, in another sibling: not taken.
        w(
            "kernels/fa/other/pybind.cc",
            "#include <torch/extension.h>\nvoid other(torch::Tensor Q);\nPYBIND11_MODULE(other_ext, m) { m.def(\"other\", &other); }\n",
        );
        let read = |f: &str| {
            read_kernel_file(d.path(), d.path(), Path::new(f))
                .unwrap()
                .torch
                .unwrap()
        };
        let mma = read("kernels/fa/mma/fa_mma.cu");
        assert_eq!(mma.bindings, vec!["kernels/fa/pybind/fa.cc".to_string()]);
        assert_eq!(mma.functions, ["fa_naive", "fa_mma", "fa_gone"]);
        assert_eq!(mma.module, "fa_mma");
        assert_eq!(
            mma.sources,
            [
                "kernels/fa/pybind/fa.cc",
                "kernels/fa/mma/fa_mma.cu",
                "kernels/fa/naive/fa_naive.cu"
            ]
        );
        assert_eq!(
            mma.notes,
            ["`fa_gone` is bound, but no file found defines it: add the one that does to sources"]
        );
        // From the other side: the first file by path that defines the function, the others named.
        let naive = read("kernels/fa/naive/fa_naive.cu");
        assert_eq!(
            naive.sources,
            [
                "kernels/fa/pybind/fa.cc",
                "kernels/fa/naive/fa_naive.cu",
                "kernels/fa/mma/fa_mma.cu"
            ]
        );
        assert!(
            naive.notes.iter().any(|n| n
                == "`fa_mma` is also defined in kernels/fa/mma/fa_mma_bak.cu: sources takes kernels/fa/mma/fa_mma.cu"),
            "{:?}",
            naive.notes
        );
        // A kernel the binding does not bind is not given it.
        let swz = read("kernels/fa/mma/swizzle/fa_swz.cu");
        assert!(swz.bindings.is_empty(), "{swz:?}");
        assert_eq!(swz.sources, ["kernels/fa/mma/swizzle/fa_swz.cu"]);
    }

    #[test]
    fn functions_are_told_defined_from_declared_and_called() {
        let t = "void a(int x);\nvoid b(int x) const {}\nint c(int (*f)(int)) noexcept { return a(1); }\nx.d(1) {}\n";
        assert!(!defines(t, "a"), "a declaration, and a call");
        assert!(defines(t, "b"));
        assert!(defines(t, "c"));
        assert!(!defines(t, "d"), "a member call");
        assert!(!defines("e(", "e"));
    }

    /// A kernel file of a PyTorch extension gets a `torch-extension` recipe with the files that
    /// bind it: beside it (flash-attention-minimal's `main.cpp`), or one directory up with
    /// the module defined by `PyInit_` and operators by `TORCH_LIBRARY`
    /// (pytorch/extension-cpp's layout).
    #[test]
    fn pytorch_extensions_get_a_torch_extension_recipe_with_their_bindings() {
        let d = tempfile::tempdir().unwrap();
        let w = |p: &str, t: &str| {
            let path = d.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        };
        w(
            "fa/flash.cu",
            "#include <torch/types.h>\n__global__ void forward_kernel(float* q) {}\ntorch::Tensor forward(torch::Tensor q) { return q; }\n",
        );
        w(
            "fa/main.cpp",
            "#include <torch/extension.h>\ntorch::Tensor forward(torch::Tensor q);\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def(\"forward\", torch::wrap_pybind_function(forward), \"forward\");\n}\n",
        );
        w("fa/other.cpp", "int unrelated() { return 0; }\n");
        w(
            "ext/csrc/cuda/muladd.cu",
            "#include <ATen/Operators.h>\n#include <torch/all.h>\nnamespace extension_cpp {\n__global__ void mul_kernel(float* a) {}\nTORCH_LIBRARY_IMPL(extension_cpp, CUDA, m) { m.impl(\"mymul\", &mymul_cuda); }\n}\n",
        );
        w(
            "ext/csrc/muladd.cpp",
            "#include <Python.h>\nextern \"C\" { PyObject* PyInit__C(void) { return nullptr; } }\nTORCH_LIBRARY(extension_cpp, m) { m.def(\"mymul(Tensor a, Tensor b) -> Tensor\"); }\n",
        );
        w(
            "solo/k.cu",
            "#include <torch/extension.h>\n__global__ void k(float* x) {}\n",
        );
        let read = |f: &str| read_kernel_file(d.path(), d.path(), Path::new(f)).unwrap();
        let fa = read("fa/flash.cu");
        assert_eq!(fa.kind, "torch-extension");
        let t = fa.torch.clone().unwrap();
        assert_eq!(
            (
                t.module.as_str(),
                t.sources.clone(),
                t.functions.clone(),
                t.operators
            ),
            (
                "flash",
                vec!["fa/main.cpp".to_string(), "fa/flash.cu".to_string()],
                vec!["forward".to_string()],
                false
            )
        );
        let ext = read("ext/csrc/cuda/muladd.cu").torch.unwrap();
        assert_eq!(
            (
                ext.module.as_str(),
                ext.sources.clone(),
                ext.functions.is_empty(),
                ext.operators
            ),
            (
                "_C",
                vec![
                    "ext/csrc/cuda/muladd.cu".to_string(),
                    "ext/csrc/muladd.cpp".to_string()
                ],
                true,
                true
            )
        );
        let solo = read("solo/k.cu");
        assert!(solo.torch.as_ref().unwrap().bindings.is_empty());
        // Every recipe written loads, as a torch-extension with those fields.
        for k in [&fa, &solo] {
            let text = recipe_text(k, "sm_90");
            let r = crate::foundation::recipe::parse_detached("recipes/x.toml", &text)
                .unwrap_or_else(|e| panic!("{e}: {text}"));
            assert!(
                matches!(r.build, crate::foundation::recipe::Build::TorchExtension(_)),
                "{text}"
            );
        }
        assert!(recipe_text(&solo, "sm_90").contains("# no file beside it defines the module"));
        // Only the module's own functions: not a class's methods, a submodule's functions
        // or TORCH_LIBRARY's operators; operators alone define no module.
        w(
            "cls/k.cu",
            "#include <torch/extension.h>\n__global__ void k(float* x) {}\n\
            TORCH_LIBRARY(myops, lib) { lib.def(\"mymul\", &mymul); }\n\
            PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {\n  mod.def(\"add\", &add);\n\
              py::class_<Runner>(mod, \"Runner\").def(\"run\", &Runner::run);\n\
              auto sub = mod.def_submodule(\"ops\");\n  sub.def(\"inner\", &inner);\n}\n",
        );
        assert_eq!(read("cls/k.cu").torch.unwrap().functions, ["add"]);
        w(
            "ops/k2.cu",
            "#include <torch/library.h>\n__global__ void k2(float* x) {}\n\
            TORCH_LIBRARY(myops, m) { m.def(\"mymul\", &mymul); }\n",
        );
        let ops = read("ops/k2.cu");
        assert!(ops.torch.as_ref().unwrap().functions.is_empty());
        assert!(recipe_text(&ops, "sm_90").contains("# no file beside it defines the module"));
    }

    #[test]
    fn kernels_are_named_with_their_namespaces_unless_they_have_c_linkage() {
        let src = r#"
namespace outer {
namespace inner { __global__ void a(float* x) {} }
struct S { void f() {} };
__global__ void b(float* x) { if (x) { x[0] = 1; } }
inline namespace v1 { template <int N> __global__ void t(float* x) {} }
extern "C" __global__ void c_named(float* x) {}
}
namespace x::y { __global__ void nested(int* p) {} }
namespace { __global__ void hidden(int* p) {} }
extern "C" {
namespace q { __global__ void in_c_block(int* p) {} }
}
using namespace std;
__global__ void top(int* p) { printf("}} // ' {"); char c = '}'; }
__global__ void after_literals(int* p) {}
#define KERNEL(n) __global__ void n(int* p) {}
#define LONG_KERNEL(n) \
    __global__ void n(int* p) {}
KERNEL(made)
__global__ void after_macros(int* p) {}
"#;
        assert_eq!(
            kernels(src),
            vec![
                ("outer::inner::a".to_string(), false),
                ("outer::b".to_string(), false),
                ("outer::v1::t".to_string(), true),
                ("c_named".to_string(), false),
                ("x::y::nested".to_string(), false),
                ("hidden".to_string(), false),
                ("in_c_block".to_string(), false),
                ("top".to_string(), false),
                ("after_literals".to_string(), false),
                ("after_macros".to_string(), false),
            ]
        );
    }

    #[test]
    fn namespaces_a_macro_opens_and_closes_name_the_kernels_inside() {
        let src = r#"
#define LIB_BEGIN namespace lib { inline namespace v3 {
#define LIB_END } }
#define NS(n) namespace n {
#define NS2(a, b) namespace a { namespace b {
#define END }
#define KERNEL(n) __global__ void n(int* p) {}
LIB_BEGIN
__global__ void in_lib(int* p) {}
NS(inner);
__global__ void in_inner(int* p) {}
END
LIB_END
NS2(x, y)
__global__ void in_xy(int* p) {}
END END
#define OPEN_LIB NS(made)
#define OPEN_TWO OPEN_LIB LIB_BEGIN
#define CLOSE_LIB END
OPEN_LIB
__global__ void in_made(int* p) {}
CLOSE_LIB
OPEN_TWO
__global__ void in_two(int* p) {}
LIB_END END
#undef NS
NS(gone)
__global__ void top(int* p) {}
#if 0
LIB_BEGIN
#endif
__global__ void still_top(int* p) {}
"#;
        assert_eq!(
            kernels(src),
            vec![
                ("lib::v3::in_lib".to_string(), false),
                ("lib::v3::inner::in_inner".to_string(), false),
                ("x::y::in_xy".to_string(), false),
                ("made::in_made".to_string(), false),
                ("made::lib::v3::in_two".to_string(), false),
                ("top".to_string(), false),
                ("still_top".to_string(), false),
            ]
        );
    }

    #[test]
    fn namespaces_a_header_macro_opens_name_the_kernels_where_it_is_included() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        for dir in ["include/lib/detail", "src"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        let write = |p: &str, t: &str| std::fs::write(root.join(p), t).unwrap();
        // Found as the repository's file (an include directory), through a header it
        // includes, and a cycle of two headers with guards.
        write(
            "include/lib/ns.h",
            "#pragma once\n#include \"detail/open.h\"\n// #define LIB_BEGIN namespace wrong {\n#define LIB_BEGIN \\\n  namespace lib {\n#define LIB_END }\n",
        );
        write(
            "include/lib/detail/open.h",
            "#ifndef OPEN_H\n#define OPEN_H\n#include \"../ns.h\"\n#define OPEN_NS(n) namespace n {\n#define CLOSE_NS }\n#endif\n",
        );
        write(
            "src/late.h",
            "#define LATE_BEGIN namespace late {\n#define LATE_END }\n",
        );
        write("src/never.h", "#define NEVER_BEGIN namespace never {\n");
        write(
            "src/k.cu",
            r#"#include "lib/ns.h"
#if 0
#include "never.h"
#endif
LIB_BEGIN
__global__ void k1(float* x) {}
OPEN_NS(inner)
__global__ void k2(float* x) {}
CLOSE_NS
LIB_END
NEVER_BEGIN
LATE_BEGIN
__global__ void top(float* x) {}
#include "late.h"
LATE_BEGIN
__global__ void in_late(float* x) {}
LATE_END
"#,
        );
        let k = read_kernel_file(root, root, Path::new("src/k.cu")).unwrap();
        assert_eq!(
            k.kernels,
            ["lib::k1", "lib::inner::k2", "top", "late::in_late"]
        );
        assert_eq!(k.include_dirs, ["include"]);
        // The same source alone knows none of them.
        let src = std::fs::read_to_string(root.join("src/k.cu")).unwrap();
        assert_eq!(kernels(&src)[0].0, "k1");
        // However many a header defines, one include brings in a bounded number.
        let many: String = (0..3 * MAX_HEADER_MACROS)
            .map(|i| format!("#define B{i} namespace n{i} {{\n"))
            .collect();
        let inc = Included {
            files: vec![("h.h".into(), many)],
            outside: BTreeSet::new(),
            edges: vec![("k.cu".into(), "h.h".into(), "h.h".into())],
        };
        assert_eq!(inc.headers_of("k.cu")["h.h"].len(), MAX_HEADER_MACROS);
    }

    /// A byte-order mark hides nothing: a first-line namespace (in the file or in a header
    /// it includes) still names the kernels, and a first-line host include still means nvcc.
    #[test]
    fn a_byte_order_mark_hides_no_first_line() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let bom = "\u{feff}";
        std::fs::write(
            root.join("ns.cu"),
            format!("{bom}namespace bomns {{\n__global__ void bk(float* x) {{}}\n}}\n"),
        )
        .unwrap();
        std::fs::write(
            root.join("h.h"),
            format!("{bom}#define Q_BEGIN namespace q {{\n#define Q_END }}\n"),
        )
        .unwrap();
        std::fs::write(
            root.join("viah.cu"),
            format!("{bom}#include \"h.h\"\nQ_BEGIN\n__global__ void hk(float* x) {{}}\nQ_END\n"),
        )
        .unwrap();
        std::fs::write(
            root.join("host.cu"),
            format!("{bom}#include <cstdio>\n__global__ void k(float* x) {{}}\n"),
        )
        .unwrap();
        let k = |f: &str| read_kernel_file(root, root, Path::new(f)).unwrap();
        assert_eq!(k("ns.cu").kernels, ["bomns::bk"]);
        assert_eq!(k("viah.cu").kernels, ["q::hk"]);
        assert_eq!(k("host.cu").kind, "nvcc");
    }

    /// A toolkit header included by a repository header needs nvcc as much as one the file
    /// includes itself: NVRTC cannot open it either way.
    #[test]
    fn a_host_header_through_a_repository_header_means_nvcc() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::write(root.join("h.cuh"), "#pragma once\n#include <cuda_fp16.h>\n").unwrap();
        std::fs::write(
            root.join("fp16.cu"),
            "#include \"h.cuh\"\n__global__ void k(__half* x) {}\n",
        )
        .unwrap();
        std::fs::write(root.join("plain.h"), "#define N 4\n").unwrap();
        std::fs::write(
            root.join("plain.cu"),
            "#include \"plain.h\"\n__global__ void k(float* x) {}\n",
        )
        .unwrap();
        let k = read_kernel_file(root, root, Path::new("fp16.cu")).unwrap();
        assert_eq!(k.kind, "nvcc", "{k:?}");
        assert!(k.why.contains("<cuda_fp16.h>"), "{k:?}");
        let k = read_kernel_file(root, root, Path::new("plain.cu")).unwrap();
        assert_eq!(k.kind, "nvrtc", "{k:?}");
    }

    #[test]
    fn files_are_classified_and_their_include_dirs_found() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("include/lib")).unwrap();
        std::fs::write(root.join("include/lib/util.h"), "").unwrap();
        std::fs::write(
            root.join("src/a.cu"),
            "#include <cfg.h>\n#include \"lib/util.h\"\n#include \"../src/a.cu\"\n__global__ void a(float* x) {}\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("third_party/cfg")).unwrap();
        std::fs::write(root.join("third_party/cfg/cfg.h"), "").unwrap();
        // Angle includes the repository answers (CMake's include_directories style) and
        // quoted ones found elsewhere in it: include directories, and NVRTC still.
        let k = read_kernel_file(root, root, Path::new("src/a.cu")).unwrap();
        assert_eq!(k.kind, "nvrtc", "{k:?}");
        assert_eq!(k.include_dirs, ["include", "third_party/cfg"]);
        assert_eq!(k.kernels, ["a"]);
        // Two headers of one name: the one nearest the including file (LeetCUDA has
        // kernels/flash-attn/utils/utils.h and kernels/hgemm/utils/utils.h).
        for dir in [
            "kernels/flash-attn/utils",
            "kernels/hgemm/utils",
            "kernels/hgemm/mma/basic",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("kernels/flash-attn/utils/utils.h"), "").unwrap();
        std::fs::write(root.join("kernels/hgemm/utils/utils.h"), "").unwrap();
        std::fs::write(
            root.join("kernels/hgemm/mma/basic/h.cu"),
            "#include \"utils.h\"\n__global__ void h(float* x) {}\n",
        )
        .unwrap();
        let k = read_kernel_file(root, root, Path::new("kernels/hgemm/mma/basic/h.cu")).unwrap();
        assert_eq!(k.include_dirs, ["kernels/hgemm/utils"]);
        // A header beside the kernel that links out of the repository is named at once.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("o.h"), "#define OUT 3\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("src/outl")).unwrap();
        std::fs::write(
            root.join("src/out.cu"),
            "#include \"outl/o.h\"\n__global__ void o(float* x) {}\n",
        )
        .unwrap();
        let k = read_kernel_file(root, root, Path::new("src/out.cu")).unwrap();
        assert_eq!(k.warnings.len(), 1, "{:?}", k.warnings);
        assert!(k.warnings[0].contains("\"outl/o.h\", which links outside the repository"));
        // Toolkit headers, angled or quoted, are not in NVRTC's wheel: nvcc.
        for inc in [
            "<cuda_fp16.h>",
            "\"cuda_bf16.h\"",
            "<mma.h>",
            "\"../../outside.h\"",
        ] {
            std::fs::write(
                root.join("src/t.cu"),
                format!("#include {inc}\n__global__ void t(float* x) {{}}\n"),
            )
            .unwrap();
            let k = read_kernel_file(root, root, Path::new("src/t.cu")).unwrap();
            assert_eq!(k.kind, "nvcc", "{inc}: {k:?}");
            let name = inc.trim_matches(|c| "<>\"".contains(c));
            assert!(k.why.contains(&format!("<{name}>")), "{}", k.why);
        }
        std::fs::write(
            root.join("src/b.cu"),
            "#include <cuda_runtime.h>\n#include <cublas_v2.h>\n__global__ void b() {}\n",
        )
        .unwrap();
        let k = read_kernel_file(root, &root.join("src"), Path::new("b.cu")).unwrap();
        assert_eq!(
            (k.kind, k.components.as_slice()),
            ("nvcc", &["cublas".to_string()][..])
        );
        assert!(
            k.why.contains("<cuda_runtime.h>, <cublas_v2.h>"),
            "{}",
            k.why
        );
        let text = recipe_text(&k, "sm_90");
        let r = crate::foundation::recipe::parse_detached("recipes/b.toml", &text).unwrap();
        assert_eq!(r.entries(), ["b"]);
        std::fs::write(
            root.join("src/none.cu"),
            "__device__ int f() { return 1; }\n",
        )
        .unwrap();
        assert!(matches!(
            read_kernel_file(root, root, Path::new("src/none.cu")),
            Err(InitError::NoKernel { ref included, .. }) if included.is_empty()
        ));
        // A file whose kernels are in the headers it includes (siboehm/SGEMM_CUDA's
        // runner.cu): the hint names them, found beside the includer or anywhere in the
        // repository, once each, through include cycles.
        std::fs::create_dir_all(root.join("src/kernels")).unwrap();
        std::fs::write(
            root.join("src/runner.cu"),
            "#include \"kernels.cuh\"\n#include <cuda_runtime.h>\nvoid run() {}\n",
        )
        .unwrap();
        std::fs::write(
            root.join("src/kernels.cuh"),
            "#include \"kernels/k1.cuh\"\n#include \"kernels/k2.cuh\"\n",
        )
        .unwrap();
        std::fs::write(
            root.join("src/kernels/k1.cuh"),
            "#include \"kernels.cuh\"\n__global__ void k1() {}\n",
        )
        .unwrap();
        std::fs::write(root.join("src/kernels/k2.cuh"), "__global__ void k2() {}\n").unwrap();
        let err = read_kernel_file(root, root, Path::new("src/runner.cu")).unwrap_err();
        let InitError::NoKernel { ref included, .. } = err else {
            panic!("{err:?}");
        };
        assert_eq!(included, &["src/kernels/k1.cuh", "src/kernels/k2.cuh"]);
        let hint = err.hint().unwrap();
        assert!(
            hint.contains("`repro init --recipe src/kernels/k1.cuh`"),
            "{hint}"
        );
        // A component included through the repository's own header (llm.c's kernels and
        // their `cuda_common.h`) is found.
        std::fs::write(
            root.join("src/common.h"),
            "#include <nvtx3/nvToolsExt.h>\n#include <cuda_runtime.h>\n",
        )
        .unwrap();
        std::fs::write(
            root.join("src/gelu.cuh"),
            "#include \"common.h\"\n__global__ void gelu(float* x) {}\n",
        )
        .unwrap();
        let k = read_kernel_file(root, root, Path::new("src/gelu.cuh")).unwrap();
        assert_eq!(k.components, ["nvtx"], "{k:?}");
        // A component the repository holds itself (a vendored CUTLASS) is not one to pin.
        std::fs::create_dir_all(root.join("third_party/cutlass/include/cutlass")).unwrap();
        std::fs::write(root.join("third_party/cutlass/include/cutlass/gemm.h"), "").unwrap();
        std::fs::write(
            root.join("src/tc.cu"),
            "#include <cutlass/gemm.h>\n#include \"common.h\"\n__global__ void tc(float* x) {}\n",
        )
        .unwrap();
        let k = read_kernel_file(root, root, Path::new("src/tc.cu")).unwrap();
        assert_eq!(k.components, ["nvtx"], "{k:?}");
        assert!(
            k.include_dirs
                .contains(&"third_party/cutlass/include".to_string()),
            "{k:?}"
        );
        // From a subdirectory, as `--recipe` takes paths: relative to it.
        std::fs::create_dir_all(root.join("docs")).unwrap();
        for (cwd, file, want) in [
            ("src", "runner.cu", ["kernels/k1.cuh", "kernels/k2.cuh"]),
            (
                "docs",
                "../src/runner.cu",
                ["../src/kernels/k1.cuh", "../src/kernels/k2.cuh"],
            ),
        ] {
            let err = read_kernel_file(root, &root.join(cwd), Path::new(file)).unwrap_err();
            let InitError::NoKernel { included, .. } = err else {
                panic!("{err:?}");
            };
            assert_eq!(included, want, "{cwd}");
        }
        assert!(matches!(
            read_kernel_file(root, root, Path::new("../etc/passwd")),
            Err(InitError::NotInRepo { .. })
        ));
    }
}
