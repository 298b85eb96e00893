//! What a compiler's log says, line by line: which lines are errors, which are warnings.
//!
//! A failed build's one-line reason (a bisection step's, a build's) is its first *error*
//! line, never a warning that happens to come first (`warning #20012-D: ...`) and never a
//! line that merely mentions the word (`variable "error" was declared but never
//! referenced`). The formats read are those of the tools a CUDA build runs: the EDG front
//! end of nvcc and NVRTC (`k.cu(12): error: ...`, `warning #177-D: ...`), GCC and Clang
//! (`k.cu:1:10: fatal error: ...`), the CUDA tool chain's own (`ptxas error   : ...`,
//! `nvlink fatal   : ...`, `nvcc fatal   : ...`) and the linker (`undefined reference to`).
//! The whole log is always kept; this only picks the line to show first.

/// How serious a diagnostic line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The build cannot succeed (`error`, `fatal error`, `catastrophic error`, `fatal`).
    Error,
    /// A warning.
    Warning,
    /// A note, remark or informational line.
    Note,
}

/// The CUDA tools that start their lines with their own name and a severity word.
const TOOLS: &[&str] = &[
    "ptxas",
    "nvlink",
    "nvcc",
    "fatbinary",
    "cicc",
    "cudafe++",
    "nvrtc",
    "nvdisasm",
];

/// Severity words after a location (`file(3): `, `file:3:4: `) or at the start of a line,
/// in the spellings the tools use.
const MARKERS: &[(&str, Severity)] = &[
    ("catastrophic error", Severity::Error),
    ("fatal error", Severity::Error),
    ("error:", Severity::Error),
    ("error #", Severity::Error),
    ("error ", Severity::Error),
    ("warning:", Severity::Warning),
    ("warning #", Severity::Warning),
    ("remark:", Severity::Note),
    ("remark #", Severity::Note),
    ("Remark:", Severity::Note),
    ("note:", Severity::Note),
    ("info:", Severity::Note),
];

/// The severity of one log line, or `None` for a line that is not a diagnostic (a source
/// line the compiler echoes, a caret, a summary).
pub fn severity(line: &str) -> Option<Severity> {
    let t = line.trim_start();
    if let Some((tool, rest)) = t.split_once(char::is_whitespace)
        && TOOLS.contains(&tool)
    {
        let word = rest
            .trim_start()
            .split(|c: char| c.is_whitespace() || c == ':')
            .next()
            .unwrap_or("");
        match word {
            "error" | "fatal" => return Some(Severity::Error),
            "warning" => return Some(Severity::Warning),
            "info" | "note" => return Some(Severity::Note),
            _ => {}
        }
    }
    if t.contains("undefined reference to") || t.contains("ld: cannot find") {
        return Some(Severity::Error);
    }
    // The earliest severity word that stands where a diagnostic puts it wins: after the
    // location, so that quoted text later in a warning cannot make it an error.
    MARKERS
        .iter()
        .filter_map(|(m, s)| marker_at(t, m).map(|at| (at, *s)))
        .min_by_key(|(at, _)| *at)
        .map(|(_, s)| s)
}

/// Where `marker` first stands as a diagnostic's severity in `line`: at its start or right
/// after `": "`.
fn marker_at(line: &str, marker: &str) -> Option<usize> {
    if line.starts_with(marker) {
        return Some(0);
    }
    line.match_indices(marker)
        .map(|(at, _)| at)
        .find(|at| line[..*at].ends_with(": "))
}

/// The first error line of a log, trimmed.
pub fn first_error(log: &str) -> Option<&str> {
    log.lines()
        .find(|l| severity(l) == Some(Severity::Error))
        .map(str::trim)
}

/// A failed build's reason in one line: its first error line; else its last line (where
/// repro puts its own conclusion, such as a missing entry point or how the compiler ended);
/// else a plain sentence.
pub fn reason(log: &str) -> String {
    first_error(log)
        .or_else(|| log.lines().map(str::trim).rfind(|l| !l.is_empty()))
        .unwrap_or("the build failed")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nvcc 13.0's own words for a file with a warning before its error (w.cu), kept as
    /// the compiler printed them.
    const NVCC_LOG: &str = r#"w.cu(1): warning #20012-D: __host__ annotation is ignored on a non-virtual function("S") that is explicitly defaulted on its first declaration
  struct S { __attribute__((host)) S() = default; };
                            ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

w.cu(2): warning #177-D: variable "error" was declared but never referenced
  __attribute__((global)) void k(float *a) { int error = 0; a[0] = undefined_x; }
                                                 ^

w.cu(2): error: identifier "undefined_x" is undefined
  __attribute__((global)) void k(float *a) { int error = 0; a[0] = undefined_x; }
                                                                   ^

1 error detected in the compilation of "w.cu".
nvcc -cubin -arch=sm_90 -o out.cubin w.cu exited with code 1"#;

    #[test]
    fn the_reason_is_the_first_error_not_the_first_warning() {
        assert_eq!(
            first_error(NVCC_LOG),
            Some(r#"w.cu(2): error: identifier "undefined_x" is undefined"#)
        );
        assert_eq!(
            reason(NVCC_LOG),
            r#"w.cu(2): error: identifier "undefined_x" is undefined"#
        );
    }

    #[test]
    fn each_tool_format() {
        for (line, want) in [
            (
                "ptxas error   : Entry function '_Z1kPf' uses too much shared data (0x1d4c0 bytes, 0xc000 max)",
                Some(Severity::Error),
            ),
            (
                "ptxas fatal   : Unresolved extern function '_Z3exti'",
                Some(Severity::Error),
            ),
            (
                "ptxas warning : Registers are spilled to local memory",
                Some(Severity::Warning),
            ),
            (
                "ptxas info    : Used 8 registers, 360 bytes cmem[0]",
                Some(Severity::Note),
            ),
            (
                "nvcc fatal   : Unsupported gpu architecture 'compute_20'",
                Some(Severity::Error),
            ),
            (
                "nvlink error   : Undefined reference to '_Z3extv' in 'a.o'",
                Some(Severity::Error),
            ),
            (
                "f.cu:1:10: fatal error: nothere.h: No such file or directory",
                Some(Severity::Error),
            ),
            (
                "k.cu(4): catastrophic error: cannot open source file \"x.h\"",
                Some(Severity::Error),
            ),
            (
                "k.cu(4): error #20: identifier \"x\" is undefined",
                Some(Severity::Error),
            ),
            (
                "/usr/bin/ld: main.o: in function `main': undefined reference to `run'",
                Some(Severity::Error),
            ),
            (
                "collect2: error: ld returned 1 exit status",
                Some(Severity::Error),
            ),
            ("error: invalid value for -arch", Some(Severity::Error)),
            (
                "k.cu(2): warning #177-D: variable \"x: error: y\" was declared",
                Some(Severity::Warning),
            ),
            (
                "k.cu:3:5: warning: unused variable 'error' [-Wunused-variable]",
                Some(Severity::Warning),
            ),
            ("k.cu:3:5: note: declared here", Some(Severity::Note)),
            ("1 error detected in the compilation of \"w.cu\".", None),
            ("  int error = 0;", None),
            ("compilation terminated.", None),
        ] {
            assert_eq!(severity(line), want, "{line}");
        }
    }

    #[test]
    fn without_an_error_line_the_last_line_speaks() {
        let log = "k.cu(3): warning #177-D: variable \"x\" was declared but never referenced\nthe artifact has no entry point `k` (it has: none found)";
        assert_eq!(first_error(log), None);
        assert_eq!(
            reason(log),
            "the artifact has no entry point `k` (it has: none found)"
        );
        assert_eq!(reason("\n  \n"), "the build failed");
    }
}
