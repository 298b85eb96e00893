//! Terminal styling and plain-text tables.
//!
//! Colour only when the stream is a terminal and `NO_COLOR` is unset; everything else
//! (pipes, files, tests) gets plain text.

use std::io::IsTerminal;

/// Whether to emit ANSI colour on a stream.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    colour: bool,
}

impl Style {
    fn for_stream(is_terminal: bool) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            colour: is_terminal && !no_color,
        }
    }
    /// Styling for stdout.
    pub fn for_stdout() -> Self {
        Self::for_stream(std::io::stdout().is_terminal())
    }
    /// Styling for stderr.
    pub fn for_stderr() -> Self {
        Self::for_stream(std::io::stderr().is_terminal())
    }
    /// Whether colour is on.
    pub fn colour(&self) -> bool {
        self.colour
    }
    fn paint(&self, code: &str, s: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    /// Red and bold.
    pub fn error(&self, s: &str) -> String {
        self.paint("1;31", s)
    }
    /// Yellow.
    pub fn warn(&self, s: &str) -> String {
        self.paint("33", s)
    }
    /// Green.
    pub fn good(&self, s: &str) -> String {
        self.paint("32", s)
    }
    /// Cyan, for hints.
    pub fn hint(&self, s: &str) -> String {
        self.paint("36", s)
    }
    /// Dim, for secondary text.
    pub fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }
    /// Bold, for headings.
    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
}

/// Text from elsewhere (commit subjects, compiler logs, records) made safe for one line of
/// a terminal: [`terminal_safe`], with newlines escaped too.
pub fn printable(s: &str) -> String {
    terminal_safe(s, false).replace('\n', "\\n")
}

/// Whether `c` may reach a terminal or an SVG as it is: not a control character (C0, DEL
/// and C1, which holds the one-byte CSI), not a bidirectional override or isolate that
/// reorders what is shown, and not a non-character. Newline and tab are text.
fn is_plain(c: char) -> bool {
    if c == '\n' || c == '\t' {
        return true;
    }
    !(c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        || matches!(c, '\u{fffe}' | '\u{ffff}'))
}

/// Serialised JSON made safe for a terminal without changing what it means: characters that
/// are not [`is_plain`] can only stand inside its strings (serde_json escapes C0 controls
/// already, but not C1 or bidi controls), where a `\uXXXX` escape is the same character.
pub fn json_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_plain(c) || u32::from(c) > 0xffff {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        }
    }
    out
}

/// The colour sequences [`Style`] writes, the only escape sequences let through to a
/// terminal, and only when colour is on.
const OWN_SGR: &[&str] = &[
    "\x1b[0m",
    "\x1b[1m",
    "\x1b[2m",
    "\x1b[32m",
    "\x1b[33m",
    "\x1b[36m",
    "\x1b[1;31m",
];

/// The one escaping function for text on its way to a terminal: every character that is
/// not [`is_plain`] (OSC and CSI sequences, carriage returns, backspaces, bidi overrides)
/// is shown as a `\u{..}` escape. With `colour`, repro's own colour sequences pass.
/// [`sanitize`], [`printable`], the app's stdout and stderr writers and the SVG plots all
/// go through it.
pub fn terminal_safe(text: &str, colour: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if colour
            && c == '\x1b'
            && let Some(sgr) = OWN_SGR.iter().find(|s| rest.starts_with(**s))
        {
            out.push_str(sgr);
            rest = &rest[sgr.len()..];
            continue;
        }
        if is_plain(c) {
            out.push(c);
        } else {
            out.push_str(&c.escape_unicode().to_string());
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A left-aligned text table. Cells may carry colour codes; widths are measured on the
/// visible text, which callers pass separately.
#[derive(Default)]
pub struct Table {
    rows: Vec<Line>,
}

enum Line {
    Cells(Vec<(String, String)>),
    /// A line under the previous row, indented to its second column and not counted in
    /// the column widths (hints).
    Note(String),
}

impl Table {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a row of plain cells.
    pub fn row<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, cells: I) {
        self.rows.push(Line::Cells(
            cells
                .into_iter()
                .map(|c| {
                    let c = c.into();
                    (c.clone(), c)
                })
                .collect(),
        ));
    }
    /// Adds a row of (visible text, painted text) cells.
    pub fn styled_row(&mut self, cells: Vec<(String, String)>) {
        self.rows.push(Line::Cells(cells));
    }
    /// Adds an already painted note line under the last row.
    pub fn note(&mut self, painted: String) {
        self.rows.push(Line::Note(painted));
    }
    /// Renders with two spaces between columns and no trailing spaces.
    pub fn render(&self, indent: usize) -> String {
        let cells = |l: &'_ Line| match l {
            Line::Cells(c) => Some(c.clone()),
            Line::Note(_) => None,
        };
        let ncols = self
            .rows
            .iter()
            .filter_map(cells)
            .map(|c| c.len())
            .max()
            .unwrap_or(0);
        let mut widths = vec![0; ncols];
        for row in self.rows.iter().filter_map(cells) {
            for (i, (text, _)) in row.iter().enumerate() {
                widths[i] = widths[i].max(text.chars().count());
            }
        }
        let mut out = String::new();
        for line in &self.rows {
            let row = match line {
                Line::Cells(c) => c,
                Line::Note(painted) => {
                    let pad = indent + widths.first().map_or(0, |w| w + 2);
                    out.push_str(&format!("{}{painted}\n", " ".repeat(pad)));
                    continue;
                }
            };
            let mut line = " ".repeat(indent);
            for (i, (text, painted)) in row.iter().enumerate() {
                line.push_str(painted);
                if i + 1 < row.len() {
                    line.push_str(&" ".repeat(widths[i] - text.chars().count() + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Text from a file someone else wrote, made safe for a terminal: [`terminal_safe`]
/// without colour (newlines and tabs kept).
pub fn sanitize(text: &str) -> String {
    terminal_safe(text, false)
}

/// `text` cut to at most `max` characters, with `...` where it was cut: what a message
/// echoes of a long argument or a name from a file.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    }
}

/// A progress bar with a count and an ETA on stderr, for a step that can take more than a
/// second. It is hidden (every call on it does nothing) when `quiet` (`-q`, `--json`) or when
/// stderr is not a terminal, so logs and pipes get no control characters.
pub fn progress(quiet: bool, len: u64, unit: &str) -> indicatif::ProgressBar {
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {{msg}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{elapsed}}, ETA {{eta}})"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A progress bar over bytes (`12.3 MiB/45.6 MiB`), hidden as [`progress`] is.
pub fn progress_bytes(quiet: bool, len: u64, what: &str) -> indicatif::ProgressBar {
    if quiet || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} [{{bar:30}}] {{bytes}}/{{total_bytes}} ({{elapsed}}, ETA {{eta}})"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod sanitize_tests {
    #[test]
    fn escapes_terminal_controls_only() {
        assert_eq!(super::sanitize("a\tb\nc"), "a\tb\nc");
        assert_eq!(
            super::sanitize("\u{1b}]0;pwned\u{7}x"),
            "\\u{1b}]0;pwned\\u{7}x"
        );
    }
}
