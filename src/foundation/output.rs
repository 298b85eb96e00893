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

/// Text from elsewhere (commit subjects, compiler logs, records) made safe for a terminal:
/// control characters other than tab are shown escaped, so they cannot move the cursor or
/// change colours.
pub fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
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

/// Text from a file someone else wrote, made safe for a terminal: control characters other
/// than newline and tab (escape sequences that could rewrite the screen or the title) are
/// shown as `\u{..}` escapes.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
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
