//! Size expressions in recipes: `"ceil_div(n, 1024)"`, `"3 * n * 4"`, `"2 * m * n * k"`.
//!
//! A recipe gives launch sizes, byte counts and FLOP counts as small arithmetic expressions
//! over its parameters. This module parses them once (`Expr::parse`) and evaluates them
//! against a parameter set (`Expr::eval`). Integers stay exact `i64`s and every integer
//! operation is checked, so a size that would overflow is an error rather than a wrapped,
//! silently wrong launch. Users read this module's errors directly, so every message quotes
//! the expression and, for syntax errors, the column of the offending text.
//!
//! Arithmetic follows Python where the two could differ: `/` on integers stays an integer
//! when it divides exactly and is a float otherwise, `//` and `%` are floor division and
//! its remainder (so `-7 // 2 == -4` and `-7 % 3 == 2`), and `-2**2 == -4`. A float
//! operand makes the result a float, and a float that is infinite or NaN is an error:
//! no size is ever meant to be one. Nesting is limited to 64 levels.
//!
//! Grammar, loosest binding first:
//!
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '/' | '//' | '%') unary)*
//! unary   := ('-' | '+') unary | power
//! power   := primary ('**' unary)?          (right associative; `-2**2` is -4)
//! primary := number | name | name '(' args ')' | '(' expr ')'
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How deeply an expression may nest (parentheses, unary signs, operator chains). Parsing
/// and evaluation recurse, so this bound is what keeps hostile input from overflowing the
/// stack; real recipe expressions are a handful of levels deep.
const MAX_DEPTH: usize = 64;

/// The built-in functions by the name a user writes, sorted so errors can list them as is.
const FUNCTIONS: &[(&str, Func)] = &[
    ("abs", Func::Abs),
    ("ceil", Func::Ceil),
    ("ceil_div", Func::CeilDiv),
    ("div_up", Func::CeilDiv),
    ("floor", Func::Floor),
    ("log2", Func::Log2),
    ("max", Func::Max),
    ("min", Func::Min),
    ("round_up", Func::RoundUp),
    ("sqrt", Func::Sqrt),
];

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    text: String,
    root: Node,
    /// Where it was written (line, column, key), for evaluation errors.
    at: Option<(usize, usize, String)>,
}

/// A value: integers stay exact (i64); any float operand makes the result a float.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// An exact integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
}

/// Everything that can go wrong parsing or evaluating an expression.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExprError {
    /// Syntax error: message, the source text, and the 0-based char offset.
    #[error("in `{}` at column {}: {message}", window(.text, *.offset), .offset + 1)]
    Syntax {
        /// The expression as written.
        text: String,
        /// Where the problem is, in chars from the start of `text`.
        offset: usize,
        /// What is wrong there.
        message: String,
    },
    /// The expression uses a parameter the recipe does not define.
    #[error("in `{}`: unknown name `{name}`; {}", shorten(.text), known_hint(.known))]
    UnknownName {
        /// The expression as written.
        text: String,
        /// The name that is not a parameter.
        name: String,
        /// The parameters that are defined, sorted.
        known: Vec<String>,
    },
    /// Evaluation failed: division by zero, overflow, bad function arity, domain errors.
    #[error("in `{}`: {}", shorten(.text), shorten_to(.message, 400))]
    Eval {
        /// The expression as written.
        text: String,
        /// What went wrong, quoting the part of the expression responsible.
        message: String,
    },
    /// A value that must be a count (an element count, a grid size) is not one.
    #[error("`{what}` must be a non-negative whole number, but `{}` is {value}", shorten(.text))]
    NotACount {
        /// What the value is used for, e.g. `grid`.
        what: String,
        /// The expression that produced the value (its rendering when there is none).
        text: String,
        /// The offending value.
        value: String,
    },
}

/// How many characters of an expression a message quotes.
const SHOWN_CHARS: usize = 80;

/// An expression as quoted in a message: whole when short, else its start and its length
/// (a generated 200 KB expression must not flood the terminal).
fn shorten(text: &str) -> String {
    shorten_to(text, SHOWN_CHARS)
}

/// [`shorten`] with a given bound (messages quote parts of the expression, so get more room).
fn shorten_to(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        text.to_string()
    } else {
        let head: String = text.chars().take(max - 20).collect();
        format!("{head}… ({n} characters)")
    }
}

/// The part of a long expression around a column, for syntax errors.
fn window(text: &str, offset: usize) -> String {
    let n = text.chars().count();
    if n <= SHOWN_CHARS {
        return text.to_string();
    }
    let start = offset.saturating_sub(SHOWN_CHARS / 2);
    let part: String = text.chars().skip(start).take(SHOWN_CHARS).collect();
    format!(
        "{}{part}{}",
        if start > 0 { "…" } else { "" },
        if start + SHOWN_CHARS < n { "…" } else { "" }
    )
}

/// The tail of an unknown-name message: the parameters that do exist.
fn known_hint(known: &[String]) -> String {
    if known.is_empty() {
        "there are no parameters".to_string()
    } else {
        format!("parameters are: {}", known.join(", "))
    }
}

impl Value {
    /// The value as a float (integers convert, rounding beyond 2^53).
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
        }
    }

    /// The value as a non-negative integer (for counts, grid sizes), or an error naming `what`
    /// if it is negative, fractional or too large.
    ///
    /// A value knows nothing of the expression it came from, so the error quotes the value
    /// itself; `Expr::eval_count` quotes the expression instead.
    pub fn as_count(self, what: &str) -> Result<u64, ExprError> {
        // 2^64 is exact as an f64; every whole float below it fits in a u64.
        const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
        let count = match self {
            Value::Int(i) => u64::try_from(i).ok(),
            Value::Float(f) if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < TWO_POW_64 => {
                Some(f as u64)
            }
            Value::Float(_) => None,
        };
        count.ok_or_else(|| ExprError::NotACount {
            what: what.to_string(),
            text: self.to_string(),
            value: self.to_string(),
        })
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(i) => write!(f, "{i}"),
            // Debug is Rust's shortest round-tripping form and keeps the `.0` on whole
            // floats, so `2.0` is never mistaken for the integer `2` in a message.
            Value::Float(x) => write!(f, "{x:?}"),
        }
    }
}

impl Expr {
    /// Parses `text`, or says where and why it is not a valid expression.
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let parse = || {
            let mut parser = Parser::new(text)?;
            let root = parser.expr()?;
            match parser.tok.kind {
                Tok::End => Ok(Expr {
                    text: text.to_string(),
                    root,
                    at: None,
                }),
                Tok::RParen => Err(parser.error(parser.tok.start, "unmatched `)`")),
                _ => Err(parser.expected("an operator or end of input")),
            }
        };
        parse().map_err(|e| *e)
    }

    /// This expression, known to be written at `line`:`column` under the key `what` (so
    /// that an evaluation error names the place).
    pub fn at(mut self, line: usize, column: usize, what: &str) -> Self {
        self.at = Some((line, column, what.to_string()));
        self
    }

    /// An evaluation error of this expression, with the line, column and key where it was
    /// written when they are known: `17:8: [run] grid: in `ceil_div(n, 0)`: division by zero`.
    pub fn explain(&self, e: &ExprError) -> String {
        match &self.at {
            Some((line, column, what)) => format!("{line}:{column}: {what}: {e}"),
            None => e.to_string(),
        }
    }

    /// Where the expression was written: `LINE:COLUMN: KEY` (`12:9: [run] block`), or
    /// `fallback` where that is not known.
    pub fn place(&self, fallback: &str) -> String {
        match &self.at {
            Some((line, column, what)) => format!("{line}:{column}: {what}"),
            None => fallback.to_string(),
        }
    }

    /// The line and column the expression was written at, when known.
    pub fn line_column(&self) -> Option<(usize, usize)> {
        self.at.as_ref().map(|(line, column, _)| (*line, *column))
    }

    /// The expression exactly as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The parameter names the expression uses, sorted and deduplicated.
    pub fn names(&self) -> Vec<String> {
        let mut names = BTreeSet::new();
        collect_names(&self.root, &mut names);
        names.into_iter().map(str::to_string).collect()
    }

    /// Evaluates the expression with the given parameter values.
    pub fn eval(&self, params: &BTreeMap<String, Value>) -> Result<Value, ExprError> {
        // Unknown names are checked up front so that a misspelt parameter is reported as
        // such, not masked by whatever arithmetic error it would have led to.
        if let Some(name) = first_unknown(&self.root, params) {
            return Err(ExprError::UnknownName {
                text: self.text.clone(),
                name: name.to_string(),
                known: params.keys().cloned().collect(),
            });
        }
        Evaluator { expr: self, params }
            .eval(&self.root)
            .map_err(|e| *e)
    }

    /// Evaluates the expression as a count (see `Value::as_count`), quoting the expression
    /// rather than just its value when the result is not a count.
    pub fn eval_count(
        &self,
        params: &BTreeMap<String, Value>,
        what: &str,
    ) -> Result<u64, ExprError> {
        self.eval(params)?.as_count(what).map_err(|e| match e {
            ExprError::NotACount { what, value, .. } => ExprError::NotACount {
                what,
                text: self.text.clone(),
                value,
            },
            other => other,
        })
    }
}

/// Parses and evaluates in one step.
pub fn eval_str(text: &str, params: &BTreeMap<String, Value>) -> Result<Value, ExprError> {
    Expr::parse(text)?.eval(params)
}

// ---------------------------------------------------------------------------------------
// Syntax tree

/// One node of the syntax tree, with the char span of the source it came from so that
/// evaluation errors can quote the responsible part of the expression.
#[derive(Clone, Debug, PartialEq)]
struct Node {
    kind: Kind,
    start: usize,
    end: usize,
    /// Height of the subtree, bounded by `MAX_DEPTH`.
    depth: usize,
}

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Int(i64),
    Float(f64),
    Name(String),
    Neg(Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
    Call {
        func: Func,
        /// The name as written, so `div_up` errors say `div_up`.
        name: &'static str,
        args: Vec<Node>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Rem,
    Pow,
}

impl BinOp {
    fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::Rem => "%",
            BinOp::Pow => "**",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Func {
    Min,
    Max,
    CeilDiv,
    RoundUp,
    Sqrt,
    Log2,
    Abs,
    Floor,
    Ceil,
}

/// Adds the parameter names under `node` to `out`.
fn collect_names<'a>(node: &'a Node, out: &mut BTreeSet<&'a str>) {
    match &node.kind {
        Kind::Int(_) | Kind::Float(_) => {}
        Kind::Name(name) => {
            out.insert(name);
        }
        Kind::Neg(x) => collect_names(x, out),
        Kind::Binary(_, a, b) => {
            collect_names(a, out);
            collect_names(b, out);
        }
        Kind::Call { args, .. } => args.iter().for_each(|a| collect_names(a, out)),
    }
}

/// The first name, in source order, that `params` does not define.
fn first_unknown<'a>(node: &'a Node, params: &BTreeMap<String, Value>) -> Option<&'a str> {
    match &node.kind {
        Kind::Int(_) | Kind::Float(_) => None,
        Kind::Name(name) => (!params.contains_key(name)).then_some(name.as_str()),
        Kind::Neg(x) => first_unknown(x, params),
        Kind::Binary(_, a, b) => first_unknown(a, params).or_else(|| first_unknown(b, params)),
        Kind::Call { args, .. } => args.iter().find_map(|a| first_unknown(a, params)),
    }
}

/// Whether `node` is a number written out (possibly negated), so messages need not quote it
/// next to its own value.
fn is_literal(node: &Node) -> bool {
    match &node.kind {
        Kind::Int(_) | Kind::Float(_) => true,
        Kind::Neg(x) => is_literal(x),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------
// Lexing and parsing

/// Results inside the parser and evaluator. The error is boxed because both recurse once
/// per nesting level and every `Result` temporary in a frame is as large as its error; a
/// boxed error keeps frames small, which matters most in unoptimised builds.
type Res<T> = Result<T, Box<ExprError>>;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Ident(String),
    Plus,
    Minus,
    Star,
    StarStar,
    Slash,
    SlashSlash,
    Percent,
    LParen,
    RParen,
    Comma,
    End,
}

#[derive(Clone, Debug)]
struct Token {
    kind: Tok,
    start: usize,
    end: usize,
}

/// A recursive-descent parser that lexes one token ahead, so the first error in the text
/// is the one reported.
struct Parser<'a> {
    text: &'a str,
    chars: Vec<char>,
    /// The next char to lex.
    pos: usize,
    /// The current token.
    tok: Token,
    /// How many `unary` calls are active; bounds parser recursion.
    nesting: usize,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_continue(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Res<Self> {
        let mut parser = Parser {
            text,
            chars: text.chars().collect(),
            pos: 0,
            tok: Token {
                kind: Tok::End,
                start: 0,
                end: 0,
            },
            nesting: 0,
        };
        parser.advance()?;
        Ok(parser)
    }

    fn error(&self, offset: usize, message: impl Into<String>) -> Box<ExprError> {
        Box::new(ExprError::Syntax {
            text: self.text.to_string(),
            offset,
            message: message.into(),
        })
    }

    fn snippet(&self, start: usize, end: usize) -> String {
        self.chars[start..end].iter().collect()
    }

    fn peek_char(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    /// The current token as a message shows it.
    fn describe(&self) -> String {
        match self.tok.kind {
            Tok::End => "end of input".to_string(),
            _ => format!("`{}`", self.snippet(self.tok.start, self.tok.end)),
        }
    }

    // The error builders below are kept out of line: in unoptimised builds every
    // `format!` in a function enlarges its stack frame, and the parser's functions recurse
    // once per nesting level, so formatting inside them would multiply the stack needed.

    /// "expected {what}, found {the current token}", at the current token.
    #[cold]
    #[inline(never)]
    fn expected(&self, what: &str) -> Box<ExprError> {
        self.error(
            self.tok.start,
            format!("expected {what}, found {}", self.describe()),
        )
    }

    /// A `(` at `open` that the current token should have closed but does not.
    #[cold]
    #[inline(never)]
    fn unclosed(&self, open: usize) -> Box<ExprError> {
        self.expected(&format!("`)` to close the `(` at column {}", open + 1))
    }

    #[cold]
    #[inline(never)]
    fn unknown_function(&self, name: &str, start: usize) -> Box<ExprError> {
        let all: Vec<&str> = FUNCTIONS.iter().map(|(n, _)| *n).collect();
        self.error(
            start,
            format!(
                "unknown function `{name}`; functions are: {}",
                all.join(", ")
            ),
        )
    }

    /// Lexes the next token into `self.tok`.
    fn advance(&mut self) -> Res<()> {
        while self.peek_char(0).is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(c) = self.peek_char(0) else {
            self.tok = Token {
                kind: Tok::End,
                start,
                end: start,
            };
            return Ok(());
        };
        let next_is = |p: &Self, want: char| p.peek_char(1) == Some(want);
        let (kind, len) = match c {
            '0'..='9' => (self.number(start)?, 0),
            '.' if self.peek_char(1).is_some_and(|d| d.is_ascii_digit()) => {
                (self.number(start)?, 0)
            }
            c if is_ident_start(c) => {
                while self.peek_char(0).is_some_and(is_ident_continue) {
                    self.pos += 1;
                }
                (Tok::Ident(self.snippet(start, self.pos)), 0)
            }
            '*' if next_is(self, '*') => (Tok::StarStar, 2),
            '*' => (Tok::Star, 1),
            '/' if next_is(self, '/') => (Tok::SlashSlash, 2),
            '/' => (Tok::Slash, 1),
            '+' => (Tok::Plus, 1),
            '-' => (Tok::Minus, 1),
            '%' => (Tok::Percent, 1),
            '(' => (Tok::LParen, 1),
            ')' => (Tok::RParen, 1),
            ',' => (Tok::Comma, 1),
            '^' => return Err(self.error(start, "unexpected character `^` (use `**` for powers)")),
            // Control characters would garble a backtick-quoted message; show them escaped.
            c if c.is_control() => {
                return Err(self.error(start, format!("unexpected character {c:?}")));
            }
            c => return Err(self.error(start, format!("unexpected character `{c}`"))),
        };
        self.pos += len;
        self.tok = Token {
            kind,
            start,
            end: self.pos,
        };
        Ok(())
    }

    /// Consumes a run of digits and `_` separators that starts with a digit, returning the
    /// digits alone (empty when there is no digit here).
    fn digit_run(&mut self, hex: bool) -> String {
        let is_digit = |c: char| {
            if hex {
                c.is_ascii_hexdigit()
            } else {
                c.is_ascii_digit()
            }
        };
        if !self.peek_char(0).is_some_and(is_digit) {
            return String::new();
        }
        let mut digits = String::new();
        while let Some(c) = self.peek_char(0) {
            if is_digit(c) {
                digits.push(c);
            } else if c != '_' {
                break;
            }
            self.pos += 1;
        }
        digits
    }

    /// Lexes a number literal starting at `start`.
    fn number(&mut self, start: usize) -> Res<Tok> {
        let too_large = |p: &Self| {
            p.error(
                start,
                format!(
                    "integer `{}` is too large (the largest is {})",
                    p.snippet(start, p.pos),
                    i64::MAX
                ),
            )
        };
        if self.peek_char(0) == Some('0') && matches!(self.peek_char(1), Some('x' | 'X')) {
            self.pos += 2;
            // Hex digits may follow a separator directly (`0x_ff`), as in Rust.
            while self.peek_char(0) == Some('_') {
                self.pos += 1;
            }
            let digits = self.digit_run(true);
            if digits.is_empty() {
                return Err(self.error(start, "`0x` must be followed by hexadecimal digits"));
            }
            self.reject_glued(start)?;
            return i64::from_str_radix(&digits, 16)
                .map(Tok::Int)
                .map_err(|_| too_large(self));
        }

        let int_part = self.digit_run(false);
        let mut is_float = false;
        let mut frac_part = String::new();
        let mut exp_part = String::new();
        if self.peek_char(0) == Some('.') {
            self.pos += 1;
            is_float = true;
            frac_part = self.digit_run(false);
        }
        if matches!(self.peek_char(0), Some('e' | 'E')) {
            let digit_at = |ahead| self.peek_char(ahead).is_some_and(|c| c.is_ascii_digit());
            let signed = matches!(self.peek_char(1), Some('+' | '-'));
            // Only a complete exponent is consumed; `2e` is left for `reject_glued`.
            if digit_at(1) || (signed && digit_at(2)) {
                self.pos += 1;
                if signed {
                    if self.peek_char(0) == Some('-') {
                        exp_part.push('-');
                    }
                    self.pos += 1;
                }
                exp_part.push_str(&self.digit_run(false));
                is_float = true;
            }
        }
        self.reject_glued(start)?;

        if !is_float {
            return int_part
                .parse::<i64>()
                .map(Tok::Int)
                .map_err(|_| too_large(self));
        }
        let or_zero = |s: &str| {
            if s.is_empty() {
                "0".to_string()
            } else {
                s.to_string()
            }
        };
        let normalized = format!(
            "{}.{}e{}",
            or_zero(&int_part),
            or_zero(&frac_part),
            or_zero(&exp_part)
        );
        let literal = self.snippet(start, self.pos);
        match normalized.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Tok::Float(f)),
            Ok(_) => Err(self.error(start, format!("number `{literal}` is too large"))),
            Err(_) => Err(self.error(start, format!("`{literal}` is not a valid number"))),
        }
    }

    /// Rejects a name, digit or dot glued onto the number that starts at `start` (`2n`,
    /// `1.5.3`): almost always a missing `*` or a typo, never something to guess at.
    fn reject_glued(&self, start: usize) -> Res<()> {
        let Some(c) = self.peek_char(0) else {
            return Ok(());
        };
        let number = self.snippet(start, self.pos);
        if is_ident_continue(c) {
            let mut end = self.pos;
            while self.chars.get(end).copied().is_some_and(is_ident_continue) {
                end += 1;
            }
            let name = self.snippet(self.pos, end);
            return Err(self.error(
                self.pos,
                format!(
                    "unexpected `{name}` right after the number `{number}` \
                     (did you mean `{number} * {name}`?)"
                ),
            ));
        }
        if c == '.' {
            return Err(self.error(
                self.pos,
                format!("unexpected `.` right after the number `{number}`"),
            ));
        }
        Ok(())
    }

    /// Builds a node over `start..end`, refusing trees deeper than `MAX_DEPTH`.
    fn node(&self, kind: Kind, start: usize, end: usize, depth: usize) -> Res<Node> {
        if depth > MAX_DEPTH {
            return Err(self.too_deep(start));
        }
        Ok(Node {
            kind,
            start,
            end,
            depth,
        })
    }

    #[cold]
    #[inline(never)]
    fn too_deep(&self, offset: usize) -> Box<ExprError> {
        self.error(
            offset,
            format!(
                "expression is nested too deeply (more than {MAX_DEPTH} levels of parentheses, calls, signs or operators in one chain)"
            ),
        )
    }

    fn binary(&self, op: BinOp, lhs: Node, rhs: Node) -> Res<Node> {
        let (start, end) = (lhs.start, rhs.end);
        let depth = 1 + lhs.depth.max(rhs.depth);
        self.node(
            Kind::Binary(op, Box::new(lhs), Box::new(rhs)),
            start,
            end,
            depth,
        )
    }

    /// `expr := term (('+' | '-') term)*`
    fn expr(&mut self) -> Res<Node> {
        let mut lhs = self.term()?;
        loop {
            let op = match self.tok.kind {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => return Ok(lhs),
            };
            self.advance()?;
            let rhs = self.term()?;
            lhs = self.binary(op, lhs, rhs)?;
        }
    }

    /// `term := unary (('*' | '/' | '//' | '%') unary)*`
    fn term(&mut self) -> Res<Node> {
        let mut lhs = self.unary()?;
        loop {
            let op = match self.tok.kind {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                Tok::SlashSlash => BinOp::FloorDiv,
                Tok::Percent => BinOp::Rem,
                _ => return Ok(lhs),
            };
            self.advance()?;
            let rhs = self.unary()?;
            lhs = self.binary(op, lhs, rhs)?;
        }
    }

    /// `unary := ('-' | '+') unary | power`. Every nested expression passes through here,
    /// so this is where parser recursion is bounded.
    fn unary(&mut self) -> Res<Node> {
        if self.nesting >= MAX_DEPTH {
            return Err(self.too_deep(self.tok.start));
        }
        self.nesting += 1;
        let result = self.unary_inner();
        self.nesting -= 1;
        result
    }

    fn unary_inner(&mut self) -> Res<Node> {
        let start = self.tok.start;
        match self.tok.kind {
            Tok::Minus => {
                self.advance()?;
                let operand = self.unary()?;
                let (end, depth) = (operand.end, operand.depth + 1);
                self.node(Kind::Neg(Box::new(operand)), start, end, depth)
            }
            Tok::Plus => {
                self.advance()?;
                // Unary plus changes nothing; only the span grows so quotes include it.
                let mut operand = self.unary()?;
                operand.start = start;
                Ok(operand)
            }
            _ => self.power(),
        }
    }

    /// `power := primary ('**' unary)?`; the exponent goes through `unary` so that `**`
    /// is right associative and `2 ** -1` parses.
    fn power(&mut self) -> Res<Node> {
        let base = self.primary()?;
        if self.tok.kind != Tok::StarStar {
            return Ok(base);
        }
        self.advance()?;
        let exponent = self.unary()?;
        self.binary(BinOp::Pow, base, exponent)
    }

    /// `primary := number | name | name '(' args ')' | '(' expr ')'`
    fn primary(&mut self) -> Res<Node> {
        let (start, end) = (self.tok.start, self.tok.end);
        match std::mem::replace(&mut self.tok.kind, Tok::End) {
            Tok::Int(v) => {
                self.advance()?;
                self.node(Kind::Int(v), start, end, 1)
            }
            Tok::Float(v) => {
                self.advance()?;
                self.node(Kind::Float(v), start, end, 1)
            }
            Tok::Ident(name) => {
                self.advance()?;
                if self.tok.kind == Tok::LParen {
                    self.call(&name, start)
                } else {
                    self.node(Kind::Name(name), start, end, 1)
                }
            }
            Tok::LParen => {
                self.advance()?;
                let mut inner = self.expr()?;
                if self.tok.kind != Tok::RParen {
                    return Err(self.unclosed(start));
                }
                // The span takes in the parentheses so quotes show `(k - k)`, not `k - k`.
                inner.start = start;
                inner.end = self.tok.end;
                self.advance()?;
                Ok(inner)
            }
            other => {
                // Put the token back so the message can show it.
                self.tok.kind = other;
                Err(self.expected("an expression"))
            }
        }
    }

    /// Parses the arguments of a call to `name`, whose `(` is the current token.
    fn call(&mut self, name: &str, start: usize) -> Res<Node> {
        let Some(&(name, func)) = FUNCTIONS.iter().find(|(n, _)| *n == name) else {
            return Err(self.unknown_function(name, start));
        };
        self.advance()?;
        let mut args = Vec::new();
        if self.tok.kind != Tok::RParen {
            loop {
                args.push(self.expr()?);
                match self.tok.kind {
                    Tok::Comma => self.advance()?,
                    Tok::RParen => break,
                    _ => {
                        return Err(self.expected(&format!("`,` or `)` in the call to `{name}`")));
                    }
                }
            }
        }
        let end = self.tok.end;
        self.advance()?;
        let depth = 1 + args.iter().map(|a| a.depth).max().unwrap_or(0);
        self.node(Kind::Call { func, name, args }, start, end, depth)
    }
}

// ---------------------------------------------------------------------------------------
// Evaluation

/// Evaluates the nodes of one expression against one parameter set.
struct Evaluator<'a> {
    expr: &'a Expr,
    params: &'a BTreeMap<String, Value>,
}

/// Floor division and the matching remainder on integers (`b != 0`), as in Python, so that
/// `a == (a // b) * b + a % b` always holds. `None` on overflow (`i64::MIN // -1`).
fn floor_div_rem(a: i64, b: i64) -> Option<(i64, i64)> {
    let q = a.checked_div(b)?;
    let r = a.checked_rem(b)?;
    if r != 0 && ((r < 0) != (b < 0)) {
        Some((q.checked_sub(1)?, r + b))
    } else {
        Some((q, r))
    }
}

/// Ceiling division on integers (`b != 0`); `None` on overflow.
fn ceil_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    let r = a.checked_rem(b)?;
    if r != 0 && ((r > 0) == (b > 0)) {
        q.checked_add(1)
    } else {
        Some(q)
    }
}

/// Integer power with a non-negative exponent; `None` on overflow.
fn int_pow(base: i64, exp: i64) -> Option<i64> {
    match u32::try_from(exp) {
        Ok(e) => base.checked_pow(e),
        // Exponents beyond u32 only fit for bases whose powers stay small.
        Err(_) => match base {
            0 | 1 => Some(base),
            -1 => Some(if exp % 2 == 0 { 1 } else { -1 }),
            _ => None,
        },
    }
}

/// Converts a float that is already whole to an integer, if it is in range.
fn whole_to_int(f: f64) -> Option<i64> {
    // -2^63 and 2^63 are exact as f64; the valid range is the half-open interval between.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    (f.is_finite() && (-TWO_POW_63..TWO_POW_63).contains(&f)).then_some(f as i64)
}

impl Evaluator<'_> {
    fn snippet(&self, node: &Node) -> String {
        self.expr
            .text
            .chars()
            .skip(node.start)
            .take(node.end - node.start)
            .collect()
    }

    fn error(&self, message: impl Into<String>) -> Box<ExprError> {
        Box::new(ExprError::Eval {
            text: self.expr.text.clone(),
            message: message.into(),
        })
    }

    /// "got 2.5" for a written-out number, "`x` is 2.5" for anything else.
    fn value_phrase(&self, node: &Node, value: Value) -> String {
        if is_literal(node) {
            format!("got {value}")
        } else {
            format!("`{}` is {value}", self.snippet(node))
        }
    }

    fn overflow(&self, node: &Node, detail: String) -> Box<ExprError> {
        let sub = self.snippet(node);
        if sub == detail {
            self.error(format!("integer overflow in `{sub}`"))
        } else {
            self.error(format!(
                "integer overflow in `{sub}`: {detail} does not fit in 64 bits"
            ))
        }
    }

    fn division_by_zero(&self, divisor: &Node, value: Value) -> Box<ExprError> {
        if is_literal(divisor) {
            self.error("division by zero")
        } else {
            self.error(format!(
                "division by zero: `{}` is {value}",
                self.snippet(divisor)
            ))
        }
    }

    /// Floats are only ever used as sizes, where infinities and NaN are always mistakes.
    fn finite(&self, node: &Node, f: f64) -> Res<Value> {
        if f.is_finite() {
            Ok(Value::Float(f))
        } else {
            Err(self.error(format!(
                "`{}` is not a finite number (it is {})",
                self.snippet(node),
                Value::Float(f)
            )))
        }
    }

    /// Evaluates `node`. This recurses once per tree level, so the work of each operation
    /// lives in out-of-line helpers: that keeps this frame small even in unoptimised
    /// builds, where every local of a function takes its own stack slot.
    fn eval(&self, node: &Node) -> Res<Value> {
        match &node.kind {
            Kind::Int(i) => Ok(Value::Int(*i)),
            Kind::Float(f) => Ok(Value::Float(*f)),
            Kind::Name(name) => self.param(name),
            Kind::Neg(x) => {
                let v = self.eval(x)?;
                self.negate(node, v)
            }
            Kind::Binary(op, a, b) => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                self.binary(node, *op, (a, x), (b, y))
            }
            Kind::Call { func, name, args } => {
                self.check_arity(*func, name, args.len())?;
                let mut values = Vec::with_capacity(args.len());
                for arg in args {
                    values.push(self.eval(arg)?);
                }
                self.apply(node, (*func, name), args, &values)
            }
        }
    }

    #[inline(never)]
    fn param(&self, name: &str) -> Res<Value> {
        match self.params.get(name) {
            Some(v) => Ok(*v),
            // `Expr::eval` checks names first; this is only reached if that changes.
            None => Err(Box::new(ExprError::UnknownName {
                text: self.expr.text.clone(),
                name: name.to_string(),
                known: self.params.keys().cloned().collect(),
            })),
        }
    }

    #[inline(never)]
    fn negate(&self, node: &Node, v: Value) -> Res<Value> {
        match v {
            Value::Int(i) => i
                .checked_neg()
                .map(Value::Int)
                .ok_or_else(|| self.overflow(node, format!("-({i})"))),
            Value::Float(f) => Ok(Value::Float(-f)),
        }
    }

    #[inline(never)]
    fn binary(
        &self,
        node: &Node,
        op: BinOp,
        (lhs, x): (&Node, Value),
        (rhs, y): (&Node, Value),
    ) -> Res<Value> {
        let (a, b) = match (x, y) {
            (Value::Int(a), Value::Int(b)) => (a, b),
            _ => return self.float_binary(node, op, (lhs, x), (rhs, y)),
        };
        let overflow = || self.overflow(node, format!("{a} {} {b}", op.symbol()));
        if b == 0 && matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::Rem) {
            return Err(self.division_by_zero(rhs, y));
        }
        let result = match op {
            BinOp::Add => a.checked_add(b),
            BinOp::Sub => a.checked_sub(b),
            BinOp::Mul => a.checked_mul(b),
            BinOp::Div => match a.checked_rem(b) {
                // Exact quotients stay integers so sizes like `n / 2` remain counts.
                Some(0) => a.checked_div(b),
                Some(_) => return Ok(Value::Float(a as f64 / b as f64)),
                None => None,
            },
            BinOp::FloorDiv => floor_div_rem(a, b).map(|(q, _)| q),
            // `i64::MIN % -1` is 0 mathematically; only the division overflows.
            BinOp::Rem => Some(floor_div_rem(a, b).map_or(0, |(_, r)| r)),
            BinOp::Pow if b < 0 => {
                if a == 0 {
                    return Err(self.error(format!(
                        "division by zero: `{}` raises 0 to a negative power",
                        self.snippet(node)
                    )));
                }
                return self.finite(node, (a as f64).powf(b as f64));
            }
            BinOp::Pow => int_pow(a, b),
        };
        result.map(Value::Int).ok_or_else(overflow)
    }

    fn float_binary(
        &self,
        node: &Node,
        op: BinOp,
        (lhs, x): (&Node, Value),
        (rhs, y): (&Node, Value),
    ) -> Res<Value> {
        let (a, b) = (x.as_f64(), y.as_f64());
        if b == 0.0 && matches!(op, BinOp::Div | BinOp::FloorDiv) {
            return Err(self.division_by_zero(rhs, y));
        }
        let f = match op {
            BinOp::Add => a + b,
            BinOp::Sub => a - b,
            BinOp::Mul => a * b,
            BinOp::Div => a / b,
            BinOp::FloorDiv => (a / b).floor(),
            BinOp::Pow => a.powf(b),
            BinOp::Rem => {
                let (node, v) = if matches!(x, Value::Float(_)) {
                    (lhs, x)
                } else {
                    (rhs, y)
                };
                return Err(self.error(format!(
                    "`%` needs integers, but {}",
                    self.value_phrase(node, v)
                )));
            }
        };
        self.finite(node, f)
    }

    /// Checks the number of arguments before any of them is evaluated.
    #[inline(never)]
    fn check_arity(&self, func: Func, name: &str, n: usize) -> Res<()> {
        let (arity, at_least) = match func {
            Func::Min | Func::Max => (1, true),
            Func::CeilDiv | Func::RoundUp => (2, false),
            Func::Sqrt | Func::Log2 | Func::Abs | Func::Floor | Func::Ceil => (1, false),
        };
        if n < arity || (!at_least && n > arity) {
            let plural = if arity == 1 { "argument" } else { "arguments" };
            let bound = if at_least { "at least " } else { "" };
            return Err(self.error(format!(
                "`{name}` takes {bound}{arity} {plural}, but was given {n}"
            )));
        }
        Ok(())
    }

    /// Applies a function to its evaluated arguments; `check_arity` has passed.
    #[inline(never)]
    fn apply(
        &self,
        node: &Node,
        (func, name): (Func, &str),
        args: &[Node],
        values: &[Value],
    ) -> Res<Value> {
        let int_arg = |i: usize| match values[i] {
            Value::Int(v) => Ok(v),
            v => Err(self.error(format!(
                "`{name}` needs integers, but {} (use floor() or ceil() to make it one)",
                self.value_phrase(&args[i], v)
            ))),
        };
        let overflow = || self.overflow(node, self.snippet(node));
        match func {
            Func::Min | Func::Max => Ok(min_max(func == Func::Min, values)),
            Func::CeilDiv => {
                let (a, b) = (int_arg(0)?, int_arg(1)?);
                if b == 0 {
                    return Err(self.division_by_zero(&args[1], values[1]));
                }
                ceil_div(a, b).map(Value::Int).ok_or_else(overflow)
            }
            Func::RoundUp => {
                let (a, b) = (int_arg(0)?, int_arg(1)?);
                if b == 0 {
                    return Err(self.division_by_zero(&args[1], values[1]));
                }
                // Multiples of b and of |b| are the same numbers; with |b| the ceiling
                // quotient times the step is the smallest multiple at or above `a`.
                let step = b.checked_abs().ok_or_else(overflow)?;
                ceil_div(a, step)
                    .and_then(|q| q.checked_mul(step))
                    .map(Value::Int)
                    .ok_or_else(overflow)
            }
            Func::Sqrt => {
                let x = values[0].as_f64();
                if x < 0.0 {
                    return Err(self.error(format!(
                        "`{name}` needs a non-negative number, but {}",
                        self.value_phrase(&args[0], values[0])
                    )));
                }
                self.finite(node, x.sqrt())
            }
            Func::Log2 => match values[0] {
                // Powers of two stay exact, so `log2(n)` can size a loop or a shift.
                Value::Int(i) if i > 0 && i.count_ones() == 1 => {
                    Ok(Value::Int(i64::from(i.trailing_zeros())))
                }
                v if v.as_f64() > 0.0 => self.finite(node, v.as_f64().log2()),
                v => Err(self.error(format!(
                    "`{name}` needs a positive number, but {}",
                    self.value_phrase(&args[0], v)
                ))),
            },
            Func::Abs => match values[0] {
                Value::Int(i) => i.checked_abs().map(Value::Int).ok_or_else(overflow),
                Value::Float(f) => Ok(Value::Float(f.abs())),
            },
            Func::Floor | Func::Ceil => match values[0] {
                Value::Int(i) => Ok(Value::Int(i)),
                Value::Float(f) => {
                    let whole = if func == Func::Floor {
                        f.floor()
                    } else {
                        f.ceil()
                    };
                    whole_to_int(whole).map(Value::Int).ok_or_else(|| {
                        self.error(format!(
                            "`{}` does not fit in a 64-bit integer (it is {})",
                            self.snippet(node),
                            Value::Float(whole)
                        ))
                    })
                }
            },
        }
    }
}

/// `min` or `max` of the arguments: an integer when every one is, else a float.
fn min_max(pick_min: bool, values: &[Value]) -> Value {
    let ints: Option<Vec<i64>> = values
        .iter()
        .map(|v| match v {
            Value::Int(i) => Some(*i),
            Value::Float(_) => None,
        })
        .collect();
    match ints {
        Some(ints) => {
            let it = ints.into_iter();
            Value::Int(if pick_min { it.min() } else { it.max() }.unwrap_or(0))
        }
        None => {
            let it = values.iter().map(|v| v.as_f64());
            Value::Float(if pick_min {
                it.fold(f64::INFINITY, f64::min)
            } else {
                it.fold(f64::NEG_INFINITY, f64::max)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn params(pairs: &[(&str, Value)]) -> BTreeMap<String, Value> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn ints(pairs: &[(&str, i64)]) -> BTreeMap<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Value::Int(*v)))
            .collect()
    }

    fn ev(text: &str) -> Value {
        eval_str(text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn ev_with(text: &str, p: &BTreeMap<String, Value>) -> Value {
        eval_str(text, p).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn err(text: &str) -> String {
        err_with(text, &BTreeMap::new())
    }

    fn err_with(text: &str, p: &BTreeMap<String, Value>) -> String {
        match eval_str(text, p) {
            Ok(v) => panic!("{text} evaluated to {v}"),
            Err(e) => e.to_string(),
        }
    }

    use Value::{Float, Int};

    #[test]
    fn precedence() {
        assert_eq!(ev("1 + 2 * 3"), Int(7));
        assert_eq!(ev("(1 + 2) * 3"), Int(9));
        assert_eq!(ev("2 * 3 ** 2"), Int(18));
        assert_eq!(ev("-2 ** 2"), Int(-4));
        assert_eq!(ev("(-2) ** 2"), Int(4));
        assert_eq!(ev("2 ** -1"), Float(0.5));
        assert_eq!(ev("-3 * 2"), Int(-6));
        assert_eq!(ev("2 * -3"), Int(-6));
        assert_eq!(ev("1 - -1"), Int(2));
        assert_eq!(ev("--3"), Int(3));
        assert_eq!(ev("+3"), Int(3));
        assert_eq!(ev("-+-3"), Int(3));
        assert_eq!(ev("10 - 2 * 3 % 4"), Int(8));
        assert_eq!(ev("(64 + 8) * 64 * 2"), Int(9216));
    }

    #[test]
    fn associativity() {
        assert_eq!(ev("10 - 3 - 2"), Int(5));
        assert_eq!(ev("100 / 10 / 5"), Int(2));
        assert_eq!(ev("7 // 2 * 2"), Int(6));
        assert_eq!(ev("2 ** 3 ** 2"), Int(512));
        assert_eq!(ev("(2 ** 3) ** 2"), Int(64));
        assert_eq!(ev("100 % 7 % 3"), Int(2));
    }

    #[test]
    fn whitespace_anywhere() {
        assert_eq!(ev("  ceil_div ( 10 ,\t3 )\n"), Int(4));
        assert_eq!(ev("1+2*3"), Int(7));
        assert_eq!(ev("2**10"), Int(1024));
    }

    #[test]
    fn literals() {
        assert_eq!(ev("1_000_000"), Int(1_000_000));
        assert_eq!(ev("0xFF"), Int(255));
        assert_eq!(ev("0x_ff_ff"), Int(0xffff));
        assert_eq!(ev("0X10"), Int(16));
        assert_eq!(ev("9223372036854775807"), Int(i64::MAX));
        assert_eq!(ev("1.5"), Float(1.5));
        assert_eq!(ev("1e-3"), Float(1e-3));
        assert_eq!(ev("2.5e6"), Float(2.5e6));
        assert_eq!(ev("1E3"), Float(1000.0));
        assert_eq!(ev("1e+3"), Float(1000.0));
        assert_eq!(ev(".5"), Float(0.5));
        assert_eq!(ev("1."), Float(1.0));
        assert_eq!(ev("1_000.25"), Float(1000.25));
        assert_eq!(ev("007"), Int(7));
    }

    #[test]
    fn int_and_float_rules() {
        let p = ints(&[("n", 10)]);
        assert_eq!(ev_with("n / 2", &p), Int(5));
        assert_eq!(ev_with("n * 4", &p), Int(40));
        assert_eq!(ev("1 / 3"), Float(1.0 / 3.0));
        assert_eq!(ev("-6 / 3"), Int(-2));
        assert_eq!(ev("7 / 2"), Float(3.5));
        assert_eq!(ev("7.5 / 2.5"), Float(3.0));
        assert_eq!(ev("1 / 0.25"), Float(4.0));
        assert_eq!(ev("3 * 1.0"), Float(3.0));
        assert_eq!(ev("1 + 0.5"), Float(1.5));
        assert_eq!(ev("2.0 ** 3"), Float(8.0));
        assert_eq!(ev("7 // 2"), Int(3));
        assert_eq!(ev("-7 // 2"), Int(-4));
        assert_eq!(ev("7 // -2"), Int(-4));
        assert_eq!(ev("7 // 2.0"), Float(3.0));
        assert_eq!(ev("-7 % 3"), Int(2));
        assert_eq!(ev("7 % -3"), Int(-2));
        assert_eq!(ev("7 % 3"), Int(1));
        assert_eq!(ev("-9223372036854775807 - 1"), Int(i64::MIN));
        let m = params(&[("m", Int(i64::MIN))]);
        assert_eq!(ev_with("m % -1", &m), Int(0));
        assert_eq!(ev_with("m // 1", &m), Int(i64::MIN));
        assert_eq!(ev("0 ** 0"), Int(1));
        assert_eq!(ev("(-1) ** 9999999999"), Int(-1));
        assert_eq!(ev("(-1) ** 10000000000"), Int(1));
        assert_eq!(ev("1 ** 9999999999"), Int(1));
        let x = params(&[("x", Float(1.5))]);
        assert_eq!(ev_with("x * 2", &x), Float(3.0));
    }

    #[test]
    fn functions() {
        assert_eq!(ev("min(3, 1, 2)"), Int(1));
        assert_eq!(ev("max(3, 1, 2)"), Int(3));
        assert_eq!(ev("min(7)"), Int(7));
        assert_eq!(ev("min(1, 2.5)"), Float(1.0));
        assert_eq!(ev("max(1, 2.5)"), Float(2.5));
        assert_eq!(ev("ceil_div(1000, 1024)"), Int(1));
        assert_eq!(ev("ceil_div(1024, 1024)"), Int(1));
        assert_eq!(ev("ceil_div(1025, 1024)"), Int(2));
        assert_eq!(ev("ceil_div(0, 1024)"), Int(0));
        assert_eq!(ev("ceil_div(-7, 2)"), Int(-3));
        assert_eq!(ev("ceil_div(7, -2)"), Int(-3));
        assert_eq!(ev("ceil_div(-7, -2)"), Int(4));
        assert_eq!(ev("div_up(10, 3)"), Int(4));
        assert_eq!(ev("round_up(1000, 256)"), Int(1024));
        assert_eq!(ev("round_up(1024, 256)"), Int(1024));
        assert_eq!(ev("round_up(0, 256)"), Int(0));
        assert_eq!(ev("round_up(-5, 4)"), Int(-4));
        assert_eq!(ev("round_up(5, -4)"), Int(8));
        assert_eq!(ev("sqrt(16)"), Float(4.0));
        assert_eq!(ev("sqrt(2.25)"), Float(1.5));
        assert_eq!(ev("sqrt(0)"), Float(0.0));
        assert_eq!(ev("log2(1024)"), Int(10));
        assert_eq!(ev("log2(1)"), Int(0));
        assert_eq!(ev("log2(8.0)"), Float(3.0));
        assert_eq!(ev("log2(0.5)"), Float(-1.0));
        assert_eq!(ev("log2(10)"), Float(10f64.log2()));
        assert_eq!(ev("abs(-3)"), Int(3));
        assert_eq!(ev("abs(3)"), Int(3));
        assert_eq!(ev("abs(-2.5)"), Float(2.5));
        assert_eq!(ev("floor(2.7)"), Int(2));
        assert_eq!(ev("floor(-2.5)"), Int(-3));
        assert_eq!(ev("floor(5)"), Int(5));
        assert_eq!(ev("ceil(2.1)"), Int(3));
        assert_eq!(ev("ceil(-2.5)"), Int(-2));
        assert_eq!(ev("ceil(5)"), Int(5));
        // Nested calls and a parameter that shadows nothing.
        let p = ints(&[("n", 1 << 20), ("min", 3)]);
        assert_eq!(ev_with("ceil_div(n, 1024) * min", &p), Int(3072));
        assert_eq!(ev_with("max(min(n, 5), 2)", &p), Int(5));
    }

    #[test]
    fn recipe_examples() {
        let p = ints(&[("m", 128), ("n", 4096), ("k", 64)]);
        assert_eq!(ev_with("n", &p), Int(4096));
        assert_eq!(ev_with("ceil_div(n, 1024)", &p), Int(4));
        assert_eq!(ev_with("3 * n * 4", &p), Int(49152));
        assert_eq!(ev_with("2 * m * n * k", &p), Int(2 * 128 * 4096 * 64));
    }

    #[test]
    fn display_of_values() {
        assert_eq!(Int(42).to_string(), "42");
        assert_eq!(Int(-7).to_string(), "-7");
        assert_eq!(Float(1.0).to_string(), "1.0");
        assert_eq!(Float(0.1).to_string(), "0.1");
        assert_eq!(Float(1e30).to_string(), "1e30");
        assert_eq!(Float(2.5e6).to_string(), "2500000.0");
    }

    #[test]
    fn as_f64_and_as_count() {
        assert_eq!(Int(3).as_f64(), 3.0);
        assert_eq!(Float(2.5).as_f64(), 2.5);
        assert_eq!(Int(5).as_count("grid"), Ok(5));
        assert_eq!(Int(0).as_count("grid"), Ok(0));
        assert_eq!(Float(4.0).as_count("grid"), Ok(4));
        assert_eq!(Float(-0.0).as_count("grid"), Ok(0));
        let msg = |v: Value| v.as_count("grid").unwrap_err().to_string();
        assert_eq!(
            msg(Int(-1)),
            "`grid` must be a non-negative whole number, but `-1` is -1"
        );
        assert_eq!(
            msg(Float(2.5)),
            "`grid` must be a non-negative whole number, but `2.5` is 2.5"
        );
        assert_eq!(
            msg(Float(1e30)),
            "`grid` must be a non-negative whole number, but `1e30` is 1e30"
        );
        assert!(Float(f64::NAN).as_count("grid").is_err());
        assert!(Float(f64::INFINITY).as_count("grid").is_err());
        assert_eq!(
            Float(18_446_744_073_709_549_568.0).as_count("n"),
            Ok(18_446_744_073_709_549_568)
        );
        assert!(Float(18_446_744_073_709_551_616.0).as_count("n").is_err());
    }

    #[test]
    fn eval_count_quotes_the_expression() {
        let e = Expr::parse("n - 2048").unwrap();
        let p = ints(&[("n", 1024)]);
        let err = e.eval_count(&p, "grid").unwrap_err();
        assert_eq!(
            err,
            ExprError::NotACount {
                what: "grid".into(),
                text: "n - 2048".into(),
                value: "-1024".into(),
            }
        );
        assert_eq!(
            err.to_string(),
            "`grid` must be a non-negative whole number, but `n - 2048` is -1024"
        );
        assert_eq!(e.eval_count(&ints(&[("n", 4096)]), "grid"), Ok(2048));
        // Other errors pass through unchanged.
        assert!(matches!(
            e.eval_count(&BTreeMap::new(), "grid"),
            Err(ExprError::UnknownName { .. })
        ));
    }

    #[test]
    fn names_and_text() {
        let e = Expr::parse(" ceil_div(n, block) * n + k ").unwrap();
        assert_eq!(e.names(), vec!["block", "k", "n"]);
        assert_eq!(e.text(), " ceil_div(n, block) * n + k ");
        assert!(Expr::parse("1 + 2").unwrap().names().is_empty());
        assert_eq!(Expr::parse("min + -x").unwrap().names(), vec!["min", "x"]);
        assert_eq!(Expr::parse("_a1 ** b").unwrap().names(), vec!["_a1", "b"]);
    }

    #[test]
    fn parse_is_deterministic_and_clonable() {
        let a = Expr::parse("2 * m * n * k").unwrap();
        assert_eq!(a, Expr::parse("2 * m * n * k").unwrap());
        assert_eq!(a.clone(), a);
        assert_ne!(a, Expr::parse("2*m*n*k").unwrap());
    }

    #[test]
    fn syntax_errors() {
        let cases = [
            (
                "",
                "in `` at column 1: expected an expression, found end of input",
            ),
            (
                "   ",
                "in `   ` at column 4: expected an expression, found end of input",
            ),
            (
                "1 +",
                "in `1 +` at column 4: expected an expression, found end of input",
            ),
            (
                "n m",
                "in `n m` at column 3: expected an operator or end of input, found `m`",
            ),
            (
                "n 2.5",
                "in `n 2.5` at column 3: expected an operator or end of input, found `2.5`",
            ),
            ("n)", "in `n)` at column 2: unmatched `)`"),
            (
                "(n + 1",
                "in `(n + 1` at column 7: expected `)` to close the `(` at column 1, found end of input",
            ),
            (
                "2 * (n + 1 3",
                "in `2 * (n + 1 3` at column 12: expected `)` to close the `(` at column 5, found `3`",
            ),
            (
                "* 2",
                "in `* 2` at column 1: expected an expression, found `*`",
            ),
            (
                "2n",
                "in `2n` at column 2: unexpected `n` right after the number `2` (did you mean `2 * n`?)",
            ),
            (
                "4 * 2e",
                "in `4 * 2e` at column 6: unexpected `e` right after the number `2` (did you mean `2 * e`?)",
            ),
            // An exponent is taken only when digits follow (after a sign, if any).
            (
                "2e+ 3",
                "in `2e+ 3` at column 2: unexpected `e` right after the number `2` (did you mean `2 * e`?)",
            ),
            (
                "2ex5",
                "in `2ex5` at column 2: unexpected `ex5` right after the number `2` (did you mean `2 * ex5`?)",
            ),
            (
                "1.5.3",
                "in `1.5.3` at column 4: unexpected `.` right after the number `1.5`",
            ),
            (
                "0xfg",
                "in `0xfg` at column 4: unexpected `g` right after the number `0xf` (did you mean `0xf * g`?)",
            ),
            ("n $ 2", "in `n $ 2` at column 3: unexpected character `$`"),
            (
                "2 ^ 3",
                "in `2 ^ 3` at column 3: unexpected character `^` (use `**` for powers)",
            ),
            ("n . 2", "in `n . 2` at column 3: unexpected character `.`"),
            (
                "1 +\u{7}",
                "in `1 +\u{7}` at column 4: unexpected character '\\u{7}'",
            ),
            ("n × 2", "in `n × 2` at column 3: unexpected character `×`"),
            (
                "foo(1)",
                "in `foo(1)` at column 1: unknown function `foo`; functions are: \
                 abs, ceil, ceil_div, div_up, floor, log2, max, min, round_up, sqrt",
            ),
            (
                "n + 99999999999999999999",
                "in `n + 99999999999999999999` at column 5: integer `99999999999999999999` \
                 is too large (the largest is 9223372036854775807)",
            ),
            (
                "0x8000000000000000",
                "in `0x8000000000000000` at column 1: integer `0x8000000000000000` \
                 is too large (the largest is 9223372036854775807)",
            ),
            (
                "1e999",
                "in `1e999` at column 1: number `1e999` is too large",
            ),
            (
                "0x",
                "in `0x` at column 1: `0x` must be followed by hexadecimal digits",
            ),
            (
                "min(1 2)",
                "in `min(1 2)` at column 7: expected `,` or `)` in the call to `min`, found `2`",
            ),
            (
                "min(1,)",
                "in `min(1,)` at column 7: expected an expression, found `)`",
            ),
            (
                "max(1, 2",
                "in `max(1, 2` at column 9: expected `,` or `)` in the call to `max`, found end of input",
            ),
            (
                "()",
                "in `()` at column 2: expected an expression, found `)`",
            ),
        ];
        for (text, want) in cases {
            let got = Expr::parse(text).unwrap_err();
            assert!(matches!(got, ExprError::Syntax { .. }), "{text}: {got:?}");
            assert_eq!(got.to_string(), want, "{text}");
        }
    }

    #[test]
    fn syntax_error_fields() {
        assert_eq!(
            Expr::parse("n × m").unwrap_err(),
            ExprError::Syntax {
                text: "n × m".into(),
                offset: 2,
                message: "unexpected character `×`".into(),
            }
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let too_deep = "expression is nested too deeply (more than 64 levels of parentheses, calls, signs or operators in one chain)";
        let cases = [
            format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000)),
            format!("{}1", "-".repeat(100_000)),
            format!("{}1", "+".repeat(100_000)),
            vec!["1"; 100_000].join(" + "),
            vec!["2"; 100_000].join(" ** "),
            format!("{}1{}", "abs(".repeat(100_000), ")".repeat(100_000)),
        ];
        for text in &cases {
            match Expr::parse(text) {
                Err(ExprError::Syntax { message, .. }) => assert_eq!(message, too_deep),
                other => panic!("{}...: {other:?}", &text[..20]),
            }
        }
        // Reasonable depths are fine.
        let ok = format!("{}1{}", "(".repeat(60), ")".repeat(60));
        assert_eq!(ev(&ok), Int(1));
        assert_eq!(ev(&vec!["1"; 60].join(" + ")), Int(60));
        let ok = format!("{}-1{}", "abs(".repeat(60), ")".repeat(60));
        assert_eq!(ev(&ok), Int(1));
    }

    #[test]
    fn nesting_is_bounded_exactly_at_the_limit() {
        // The deepest of each shape that parses, and one more that does not: operator
        // chains are bounded by the tree's height, signs and parentheses by the parser's
        // recursion (the chain has one operand more than it has levels).
        type Shape = fn(usize) -> String;
        let shapes: [(Shape, usize); 4] = [
            (|k| vec!["1"; k].join(" + "), 64),
            (|k| vec!["1"; k].join(" ** "), 64),
            (|k| format!("{}1", "-".repeat(k)), 63),
            (|k| format!("{}1{}", "(".repeat(k), ")".repeat(k)), 63),
        ];
        for (shape, deepest) in shapes {
            assert!(Expr::parse(&shape(deepest)).is_ok(), "{}", shape(deepest));
            assert!(
                Expr::parse(&shape(deepest + 1)).is_err(),
                "{}",
                shape(deepest + 1)
            );
        }
        // A sign or a call over a chain is one level more of the tree: over the deepest
        // chain, none fits.
        let chain = |k: usize| vec!["1"; k].join(" + ");
        for wrap in [|c: &str| format!("-({c})"), |c: &str| format!("abs({c})")] {
            assert!(
                Expr::parse(&wrap(&chain(63))).is_ok(),
                "{}",
                wrap(&chain(63))
            );
            assert!(
                Expr::parse(&wrap(&chain(64))).is_err(),
                "{}",
                wrap(&chain(64))
            );
        }
        // Depth is nesting, not length: many shallow parts in a row are fine.
        assert_eq!(ev(&vec!["(-1)"; 60].join(" + ")), Int(-60));
    }

    #[test]
    fn syntax_errors_show_the_text_around_the_column() {
        let text: String = (0..200)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        // Short texts are shown whole.
        assert_eq!(window(&text[..80], 70), text[..80]);
        // Long ones: 80 characters from 40 before the column, marked where cut.
        assert_eq!(window(&text, 150), format!("…{}…", &text[110..190]));
        assert_eq!(window(&text, 10), format!("{}…", &text[..80]));
        assert_eq!(window(&text, 190), format!("…{}", &text[150..]));
    }

    #[test]
    fn long_expressions_are_quoted_by_their_start_and_length() {
        let text = "x".repeat(200);
        assert_eq!(shorten(&text[..80]), text[..80]);
        assert_eq!(shorten(&text), format!("{}… (200 characters)", &text[..60]));
        assert_eq!(
            shorten_to(&text, 100),
            format!("{}… (200 characters)", &text[..80])
        );
    }

    #[test]
    fn explain_places_an_error_where_it_was_written() {
        let e = Expr::parse("ceil_div(n, 0)").unwrap();
        let err = eval_str("ceil_div(n, 0)", &ints(&[("n", 4)])).unwrap_err();
        assert_eq!(e.explain(&err), err.to_string());
        let e = e.at(17, 8, "[run] grid");
        assert_eq!(e.explain(&err), format!("17:8: [run] grid: {err}"));
    }

    #[test]
    fn unknown_names() {
        let p = ints(&[("n", 1), ("k", 2)]);
        assert_eq!(
            err_with("m * n", &p),
            "in `m * n`: unknown name `m`; parameters are: k, n"
        );
        assert_eq!(
            eval_str("m * n", &p).unwrap_err(),
            ExprError::UnknownName {
                text: "m * n".into(),
                name: "m".into(),
                known: vec!["k".into(), "n".into()],
            }
        );
        assert_eq!(
            err("m"),
            "in `m`: unknown name `m`; there are no parameters"
        );
        // The first unknown name in source order, reported even where the arithmetic
        // would fail first.
        assert_eq!(
            err_with("n / 0 + b + a", &p),
            "in `n / 0 + b + a`: unknown name `b`; parameters are: k, n"
        );
    }

    #[test]
    fn eval_errors() {
        let p = params(&[
            ("n", Int(1 << 32)),
            ("k", Int(3)),
            ("x", Float(1.5)),
            ("big", Int(i64::MAX)),
            ("small", Int(i64::MIN)),
        ]);
        let cases = [
            ("n / 0", "in `n / 0`: division by zero"),
            ("n // 0", "in `n // 0`: division by zero"),
            ("n % 0", "in `n % 0`: division by zero"),
            ("x / 0", "in `x / 0`: division by zero"),
            ("x // 0.0", "in `x // 0.0`: division by zero"),
            (
                "n / (k - k)",
                "in `n / (k - k)`: division by zero: `(k - k)` is 0",
            ),
            (
                "1.0 / (x - x)",
                "in `1.0 / (x - x)`: division by zero: `(x - x)` is 0.0",
            ),
            (
                "ceil_div(n, k - 3)",
                "in `ceil_div(n, k - 3)`: division by zero: `k - 3` is 0",
            ),
            ("round_up(n, 0)", "in `round_up(n, 0)`: division by zero"),
            (
                "0 ** -1",
                "in `0 ** -1`: division by zero: `0 ** -1` raises 0 to a negative power",
            ),
            (
                "n * n",
                "in `n * n`: integer overflow in `n * n`: 4294967296 * 4294967296 does not fit in 64 bits",
            ),
            (
                "2 * (n * n) + 1",
                "in `2 * (n * n) + 1`: integer overflow in `(n * n)`: 4294967296 * 4294967296 does not fit in 64 bits",
            ),
            (
                "big + 1",
                "in `big + 1`: integer overflow in `big + 1`: 9223372036854775807 + 1 does not fit in 64 bits",
            ),
            (
                "small - 1",
                "in `small - 1`: integer overflow in `small - 1`: -9223372036854775808 - 1 does not fit in 64 bits",
            ),
            (
                "-small",
                "in `-small`: integer overflow in `-small`: -(-9223372036854775808) does not fit in 64 bits",
            ),
            (
                "small / -1",
                "in `small / -1`: integer overflow in `small / -1`: -9223372036854775808 / -1 does not fit in 64 bits",
            ),
            (
                "small // -1",
                "in `small // -1`: integer overflow in `small // -1`: -9223372036854775808 // -1 does not fit in 64 bits",
            ),
            ("2 ** 63", "in `2 ** 63`: integer overflow in `2 ** 63`"),
            (
                "2 ** 99999999999",
                "in `2 ** 99999999999`: integer overflow in `2 ** 99999999999`",
            ),
            (
                "abs(small)",
                "in `abs(small)`: integer overflow in `abs(small)`",
            ),
            (
                "ceil_div(small, -1)",
                "in `ceil_div(small, -1)`: integer overflow in `ceil_div(small, -1)`",
            ),
            (
                "round_up(big, 2)",
                "in `round_up(big, 2)`: integer overflow in `round_up(big, 2)`",
            ),
            (
                "round_up(1, small)",
                "in `round_up(1, small)`: integer overflow in `round_up(1, small)`",
            ),
            (
                "ceil_div(n)",
                "in `ceil_div(n)`: `ceil_div` takes 2 arguments, but was given 1",
            ),
            (
                "div_up(1, 2, 3)",
                "in `div_up(1, 2, 3)`: `div_up` takes 2 arguments, but was given 3",
            ),
            (
                "round_up()",
                "in `round_up()`: `round_up` takes 2 arguments, but was given 0",
            ),
            (
                "min()",
                "in `min()`: `min` takes at least 1 argument, but was given 0",
            ),
            (
                "max()",
                "in `max()`: `max` takes at least 1 argument, but was given 0",
            ),
            (
                "sqrt(1, 2)",
                "in `sqrt(1, 2)`: `sqrt` takes 1 argument, but was given 2",
            ),
            (
                "log2()",
                "in `log2()`: `log2` takes 1 argument, but was given 0",
            ),
            (
                "abs(1, 2)",
                "in `abs(1, 2)`: `abs` takes 1 argument, but was given 2",
            ),
            (
                "floor()",
                "in `floor()`: `floor` takes 1 argument, but was given 0",
            ),
            (
                "ceil()",
                "in `ceil()`: `ceil` takes 1 argument, but was given 0",
            ),
            (
                "ceil_div(n, 2.5)",
                "in `ceil_div(n, 2.5)`: `ceil_div` needs integers, but got 2.5 \
                 (use floor() or ceil() to make it one)",
            ),
            (
                "round_up(x, 4)",
                "in `round_up(x, 4)`: `round_up` needs integers, but `x` is 1.5 \
                 (use floor() or ceil() to make it one)",
            ),
            ("5 % 2.0", "in `5 % 2.0`: `%` needs integers, but got 2.0"),
            ("x % 2", "in `x % 2`: `%` needs integers, but `x` is 1.5"),
            (
                "sqrt(-1)",
                "in `sqrt(-1)`: `sqrt` needs a non-negative number, but got -1",
            ),
            (
                "sqrt(k - 4)",
                "in `sqrt(k - 4)`: `sqrt` needs a non-negative number, but `k - 4` is -1",
            ),
            (
                "log2(0)",
                "in `log2(0)`: `log2` needs a positive number, but got 0",
            ),
            (
                "log2(-x)",
                "in `log2(-x)`: `log2` needs a positive number, but `-x` is -1.5",
            ),
            (
                "1e308 * 10",
                "in `1e308 * 10`: `1e308 * 10` is not a finite number (it is inf)",
            ),
            (
                "(-8.0) ** 0.5",
                "in `(-8.0) ** 0.5`: `(-8.0) ** 0.5` is not a finite number (it is NaN)",
            ),
            (
                "floor(1e300)",
                "in `floor(1e300)`: `floor(1e300)` does not fit in a 64-bit integer (it is 1e300)",
            ),
            (
                "ceil(-1e19)",
                "in `ceil(-1e19)`: `ceil(-1e19)` does not fit in a 64-bit integer (it is -1e19)",
            ),
        ];
        for (text, want) in cases {
            let got = eval_str(text, &p).unwrap_err();
            assert!(matches!(got, ExprError::Eval { .. }), "{text}: {got:?}");
            assert_eq!(got.to_string(), want, "{text}");
        }
    }

    /// Small integer expression trees for checking the evaluator against i128 arithmetic.
    #[derive(Clone, Debug)]
    enum Tree {
        Lit(i64),
        Var(usize),
        Add(Box<Tree>, Box<Tree>),
        Sub(Box<Tree>, Box<Tree>),
        Mul(Box<Tree>, Box<Tree>),
    }

    const VARS: [&str; 3] = ["a", "b", "c"];

    impl Tree {
        /// Binding strength: higher binds tighter.
        fn prec(&self) -> u8 {
            match self {
                // Negative literals render parenthesised, so they bind like atoms too.
                Tree::Lit(_) | Tree::Var(_) => 3,
                Tree::Mul(..) => 2,
                Tree::Add(..) | Tree::Sub(..) => 1,
            }
        }

        /// Renders with only the parentheses the tree shape needs, so parsing has to get
        /// precedence and associativity right to reproduce it.
        fn render(&self, spaced: bool) -> String {
            let (op, a, b) = match self {
                Tree::Lit(v) if *v < 0 => return format!("({v})"),
                Tree::Lit(v) => return v.to_string(),
                Tree::Var(i) => return VARS[*i].to_string(),
                Tree::Add(a, b) => ("+", a, b),
                Tree::Sub(a, b) => ("-", a, b),
                Tree::Mul(a, b) => ("*", a, b),
            };
            let p = self.prec();
            let wrap = |t: &Tree, needs: bool| {
                if needs {
                    format!("({})", t.render(spaced))
                } else {
                    t.render(spaced)
                }
            };
            let (l, r) = (wrap(a, a.prec() < p), wrap(b, b.prec() <= p));
            if spaced {
                format!("{l} {op} {r}")
            } else {
                format!("{l}{op}{r}")
            }
        }

        /// The value in i128, or `None` if any intermediate result leaves the i64 range.
        fn reference(&self, vars: &[i64; 3]) -> Option<i128> {
            let fits = |v: i128| (i128::from(i64::MIN)..=i128::from(i64::MAX)).contains(&v);
            let v = match self {
                Tree::Lit(v) => i128::from(*v),
                Tree::Var(i) => i128::from(vars[*i]),
                Tree::Add(a, b) => a.reference(vars)? + b.reference(vars)?,
                Tree::Sub(a, b) => a.reference(vars)? - b.reference(vars)?,
                Tree::Mul(a, b) => a.reference(vars)? * b.reference(vars)?,
            };
            fits(v).then_some(v)
        }
    }

    fn int_value() -> impl Strategy<Value = i64> {
        prop_oneof![
            -20i64..20,
            prop::sample::select(vec![
                1i64 << 31,
                1 << 32,
                3_037_000_499,
                3_037_000_500,
                -3_037_000_500,
                i64::MAX,
                i64::MAX - 1,
                i64::MIN + 1,
            ]),
            (i64::MIN + 1)..=i64::MAX,
        ]
    }

    fn tree() -> impl Strategy<Value = Tree> {
        let leaf = prop_oneof![
            int_value().prop_map(Tree::Lit),
            (0usize..3).prop_map(Tree::Var)
        ];
        leaf.prop_recursive(5, 32, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| Tree::Add(a.into(), b.into())),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| Tree::Sub(a.into(), b.into())),
                (inner.clone(), inner).prop_map(|(a, b)| Tree::Mul(a.into(), b.into())),
            ]
        })
    }

    proptest! {
        #[test]
        fn integer_trees_match_i128(
            t in tree(),
            vars in prop::array::uniform3(prop_oneof![int_value(), Just(i64::MIN)]),
            spaced in any::<bool>(),
        ) {
            let text = t.render(spaced);
            let expr = Expr::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let p: BTreeMap<String, Value> = VARS
                .iter()
                .zip(vars)
                .map(|(k, v)| (k.to_string(), Value::Int(v)))
                .collect();
            match (t.reference(&vars), expr.eval(&p)) {
                (Some(want), Ok(got)) => prop_assert_eq!(got, Value::Int(want as i64)),
                (None, Err(ExprError::Eval { message, .. })) => {
                    prop_assert!(message.starts_with("integer overflow in `"), "{}", message);
                }
                (want, got) => prop_assert!(false, "{}: want {:?}, got {:?}", text, want, got),
            }
        }

        #[test]
        fn parse_never_panics_on_any_string(text in any::<String>()) {
            check_total(&text)?;
        }

        #[test]
        fn parse_never_panics_on_expression_like_strings(
            text in "[0-9a-z_xXeE.+\\-*/%(), \t×]{0,40}"
        ) {
            check_total(&text)?;
        }
    }

    /// Parsing (and, when that succeeds, evaluating) returns a value or an error with a
    /// position inside the text, whatever the input.
    fn check_total(text: &str) -> Result<(), TestCaseError> {
        match Expr::parse(text) {
            Ok(expr) => {
                prop_assert_eq!(expr.text(), text);
                let p = params(&[("a", Int(3)), ("b", Float(0.5)), ("x", Int(-2))]);
                let _ = expr.eval(&p);
                let _ = expr.names();
            }
            Err(ExprError::Syntax { offset, .. }) => {
                prop_assert!(offset <= text.chars().count());
            }
            Err(other) => prop_assert!(false, "parse gave a non-syntax error: {:?}", other),
        }
        Ok(())
    }
}
