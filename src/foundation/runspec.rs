//! The run, check and work sections of a recipe: how to launch a kernel with no Python and
//! no PyTorch, how to check it against a reference kernel, and how much work it does.
//!
//! ```toml
//! [params]                    # one value, or several (a sweep)
//! n = [1048576, 16777216]
//!
//! [run]
//! kernel = "vector_add"
//! grid = "ceil_div(n, 1024)"  # one expression, or a list of up to three
//! block = 256
//! shared-mem = 0              # dynamic shared memory in bytes
//! args = [
//!   { name = "a", buffer = "f32", count = "n", init = "normal" },
//!   { name = "b", buffer = "f32", count = "n", init = "uniform", low = -1, high = 1 },
//!   { name = "c", buffer = "f32", count = "n", output = true },
//!   { name = "n", scalar = "i32", value = "n" },
//! ]
//!
//! [check]
//! kernel = "vector_add_ref"
//! grid = "ceil_div(n, 256)"
//! atol = 0.0
//! rtol = 0.0
//!
//! [work]
//! bytes = "3 * n * 4"
//! flops = "n"
//! ```
//! Parsing keeps spans so errors name the file, line, column and key; resolution against
//! concrete parameter values turns expressions into numbers and names the offending text.

pub mod call;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::foundation::expr::{Expr, Value};

/// Element types of buffers and scalars.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// f32.
    F32,
    /// f64.
    F64,
    /// i32.
    I32,
    /// u32.
    U32,
    /// i64.
    I64,
    /// u64.
    U64,
    /// u8.
    U8,
}

impl DType {
    /// Whether an element of this type holds `v` as it is: an integer type a whole number
    /// in its range, a float type a finite number within its range.
    pub fn holds(self, v: f64) -> bool {
        let int = |lo: f64, hi: f64| v.fract() == 0.0 && v >= lo && v <= hi;
        match self {
            DType::U8 => int(0.0, 255.0),
            DType::I32 => int(f64::from(i32::MIN), f64::from(i32::MAX)),
            DType::U32 => int(0.0, f64::from(u32::MAX)),
            DType::I64 => int(-(2f64.powi(63)), 2f64.powi(63) - 1.0),
            DType::U64 => int(0.0, 2f64.powi(64) - 1.0),
            DType::F16 => v.abs() <= 65504.0,
            DType::Bf16 | DType::F32 => v.abs() <= f64::from(f32::MAX),
            DType::F64 => v.is_finite(),
        }
    }

    /// Parses a dtype name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "f16" => DType::F16,
            "bf16" => DType::Bf16,
            "f32" => DType::F32,
            "f64" => DType::F64,
            "i32" => DType::I32,
            "u32" => DType::U32,
            "i64" => DType::I64,
            "u64" => DType::U64,
            "u8" => DType::U8,
            _ => return None,
        })
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }
    /// Whether it is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::Bf16 | DType::F32 | DType::F64)
    }
}

/// How a buffer is filled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Init {
    /// All zeros.
    Zeros,
    /// Every element the same value.
    Constant {
        /// The value.
        value: f64,
    },
    /// 0, 1, 2, ...
    Iota,
    /// Uniform in [low, high).
    Uniform {
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// Normal with mean and standard deviation.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
    },
}

/// One kernel argument, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A device buffer.
    Buffer {
        /// Its name.
        name: String,
        /// Element type.
        dtype: DType,
        /// Element count.
        count: Expr,
        /// How it is filled; for outputs, `None` means poisoned before every run.
        init: Option<Init>,
        /// Seed of its random fill.
        seed: u64,
        /// Whether it is an output that the check compares.
        output: bool,
    },
    /// A scalar passed by value.
    Scalar {
        /// Its name.
        name: String,
        /// Its type.
        dtype: DType,
        /// Its value.
        value: Expr,
    },
}

impl Arg {
    /// The argument's name.
    pub fn name(&self) -> &str {
        match self {
            Arg::Buffer { name, .. } | Arg::Scalar { name, .. } => name,
        }
    }
}

/// A launch configuration as expressions.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// The kernel entry point.
    pub kernel: String,
    /// Grid dimensions (1 to 3).
    pub grid: Vec<Expr>,
    /// Block dimensions (1 to 3).
    pub block: Vec<Expr>,
    /// Dynamic shared memory in bytes.
    pub shared_mem: Expr,
}

/// `[run]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// How to launch the kernel under test.
    pub launch: Launch,
    /// Its arguments, in order.
    pub args: Vec<Arg>,
}

/// `[check]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// How to launch the reference (grid, block and shared memory default to `[run]`'s).
    pub launch: Launch,
    /// Default absolute tolerance.
    pub atol: f64,
    /// Default relative tolerance.
    pub rtol: f64,
    /// Per-output tolerances: name → (atol, rtol).
    pub per_output: BTreeMap<String, (f64, f64)>,
}

/// `[work]`: how much work one launch does, for throughput.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Work {
    /// Bytes moved (read plus write).
    pub bytes: Option<Expr>,
    /// Floating-point operations.
    pub flops: Option<Expr>,
}

/// The run-related sections of a recipe.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Sections {
    /// `[params]`: each parameter's values.
    pub params: BTreeMap<String, Vec<Value>>,
    /// `[run]`.
    pub run: Option<Run>,
    /// `[check]`.
    pub check: Option<Check>,
    /// `[work]`.
    pub work: Work,
    /// `[run] function`: a Python callable and its reference, instead of a kernel.
    pub call: Option<call::Call>,
}

/// The first of `kernel`, `grid`, `block`, `shared-mem` that is given, in that order.
fn first_kernel_part(given: [bool; 4]) -> Option<&'static str> {
    ["kernel", "grid", "block", "shared-mem"]
        .into_iter()
        .zip(given)
        .find_map(|(k, g)| g.then_some(k))
}

impl RawRun {
    /// The first kernel-only key given (`kernel`, `grid`, `block`, `shared-mem`), if any.
    pub(crate) fn kernel_parts(&self) -> Option<&'static str> {
        first_kernel_part([
            self.kernel.is_some(),
            self.grid.is_some(),
            self.block.is_some(),
            self.shared_mem.is_some(),
        ])
    }
    /// The arguments.
    pub(crate) fn into_args(self) -> Vec<Spanned<RawArg>> {
        self.args
    }
}

impl RawCheck {
    /// The first kernel-only key given (`kernel`, `grid`, `block`, `shared-mem`), if any.
    pub(crate) fn kernel_parts(&self) -> Option<&'static str> {
        first_kernel_part([
            self.kernel.is_some(),
            self.grid.is_some(),
            self.block.is_some(),
            self.shared_mem.is_some(),
        ])
    }
}

/// A TOML value that is an expression: a string, or a number.
#[derive(Deserialize, Clone)]
#[serde(transparent)]
pub struct RawExpr(pub Spanned<toml::Value>);

/// One or up to three expressions.
#[derive(Deserialize, Clone)]
#[serde(transparent)]
pub struct RawDims(pub Spanned<toml::Value>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawRun {
    kernel: Option<Spanned<String>>,
    grid: Option<RawDims>,
    block: Option<RawDims>,
    shared_mem: Option<RawExpr>,
    #[serde(default)]
    args: Vec<Spanned<RawArg>>,
    /// A Python callable instead of a kernel (see [`call`]).
    pub(crate) function: Option<Spanned<String>>,
    /// Where a Python call's tensors live: "cuda" (default) or "cpu".
    pub(crate) device: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawArg {
    pub(crate) name: Spanned<String>,
    pub(crate) buffer: Option<Spanned<String>>,
    /// A tensor of a Python call (with `shape`).
    pub(crate) tensor: Option<Spanned<String>>,
    /// A tensor's shape: a list of expressions.
    pub(crate) shape: Option<Spanned<toml::Value>>,
    pub(crate) scalar: Option<Spanned<String>>,
    pub(crate) count: Option<RawExpr>,
    pub(crate) value: Option<RawExpr>,
    pub(crate) init: Option<Spanned<String>>,
    pub(crate) seed: Option<u64>,
    pub(crate) low: Option<f64>,
    pub(crate) high: Option<f64>,
    pub(crate) mean: Option<f64>,
    pub(crate) std: Option<f64>,
    pub(crate) output: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawCheck {
    kernel: Option<Spanned<String>>,
    /// The reference callable of a Python call.
    pub(crate) function: Option<Spanned<String>>,
    pub(crate) grid: Option<RawDims>,
    pub(crate) block: Option<RawDims>,
    pub(crate) shared_mem: Option<RawExpr>,
    pub(crate) atol: Option<f64>,
    pub(crate) rtol: Option<f64>,
    #[serde(default)]
    pub(crate) tolerance: BTreeMap<Spanned<String>, RawTolerance>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTolerance {
    pub(crate) atol: Option<f64>,
    pub(crate) rtol: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawWork {
    bytes: Option<RawExpr>,
    flops: Option<RawExpr>,
}

/// The raw sections, as deserialized with spans.
pub struct Raw {
    /// `[params]`.
    pub params: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
    /// `[run]`.
    pub run: Option<Spanned<RawRun>>,
    /// `[check]`.
    pub check: Option<Spanned<RawCheck>>,
    /// `[work]`.
    pub work: Option<Spanned<RawWork>>,
}

/// A validation error: the span to point at, the message, an optional hint.
pub type Problem = (Option<std::ops::Range<usize>>, String, Option<String>);

/// Default bound on the points of a sweep (the product of the lengths of the `[params]`
/// lists); `REPRO_MAX_SWEEP_POINTS` overrides it.
pub const DEFAULT_MAX_SWEEP_POINTS: u64 = 10_000;

/// The bound on sweep points in force.
pub fn max_sweep_points() -> Result<u64, crate::foundation::limits::LimitError> {
    crate::foundation::limits::from_env("REPRO_MAX_SWEEP_POINTS", DEFAULT_MAX_SWEEP_POINTS)
}

/// The number of points of a sweep, or an error when it exceeds [`max_sweep_points`].
pub fn sweep_points(params: &BTreeMap<String, Vec<Value>>) -> Result<u64, ParamError> {
    let max = max_sweep_points()?;
    let mut n: u64 = 1;
    for v in params.values() {
        n = n.saturating_mul(v.len() as u64);
    }
    if n > max {
        return Err(ParamError::TooManyPoints { points: n, max });
    }
    Ok(n)
}

/// Why a sweep or a `--param` override cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ParamError {
    /// `REPRO_MAX_SWEEP_POINTS` is not a number.
    #[error(transparent)]
    Limit(#[from] crate::foundation::limits::LimitError),
    /// The sweep has more points than allowed.
    #[error("the parameters ([params] and any --param) make a sweep of {} points, more than the {max} allowed (REPRO_MAX_SWEEP_POINTS)", if *.points == u64::MAX { "over 2^64".to_string() } else { .points.to_string() })]
    TooManyPoints {
        /// The number of points (`u64::MAX` when it overflows).
        points: u64,
        /// The bound.
        max: u64,
    },
    /// An override without `=`.
    #[error("--param `{text}`: expected NAME=VALUE")]
    NoValue {
        /// The override.
        text: String,
    },
    /// An override of a parameter the recipe lacks.
    #[error("--param `{name}`: not a parameter of this recipe (parameters: {})", .known.join(", "))]
    Unknown {
        /// The name given.
        name: String,
        /// The recipe's parameters.
        known: Vec<String>,
    },
    /// A value with a word where a number belongs.
    #[error("--param `{text}`: `{word}` is not a number")]
    Word {
        /// The override.
        text: String,
        /// The word.
        word: String,
    },
    /// A value that is not an expression.
    #[error("--param `{text}`: {error}")]
    Value {
        /// The override.
        text: String,
        /// Why.
        error: crate::foundation::expr::ExprError,
    },
}

impl crate::foundation::error::Diagnose for ParamError {
    fn exit_code(&self) -> u8 {
        crate::foundation::exit::USAGE
    }
    fn hint(&self) -> Option<String> {
        match self {
            ParamError::Limit(l) => l.hint(),
            ParamError::Word { .. } => Some(
                "a value is a number or an expression of numbers and functions (`--param n=2**20,3*2**10`); it cannot name a parameter".into(),
            ),
            _ => None,
        }
    }
}

/// Default tolerances when `[check]` gives none: exact for integers is implied by 0.
pub const DEFAULT_ATOL: f64 = 1e-5;
/// See [`DEFAULT_ATOL`].
pub const DEFAULT_RTOL: f64 = 1e-5;

pub(crate) fn expr(
    raw: &RawExpr,
    what: &str,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Expr, Problem> {
    let span = raw.0.span();
    // A boolean would read as a name (`true`) and be refused as an unknown parameter.
    let text = match raw.0.get_ref() {
        toml::Value::Boolean(_) => None,
        v => crate::foundation::spans::scalar(v),
    }
    .ok_or_else(|| {
        (
            Some(span.clone()),
            format!(
                "`{what}` must be an expression (a string or a number), not {}",
                raw.0.get_ref().type_str()
            ),
            Some("for example \"ceil_div(n, 256)\" or 128".to_string()),
        )
    })?;
    let (line, column) = crate::foundation::spans::locate(src, Some(span.clone()));
    let e = Expr::parse(&text)
        .map_err(|e| (Some(span.clone()), format!("`{what}`: {e}"), None))?
        .at(line, column, what);
    for name in e.names() {
        if !params.contains_key(&name) {
            let known: Vec<&String> = params.keys().collect();
            let hint = if known.is_empty() {
                "declare it under [params]".to_string()
            } else {
                format!(
                    "parameters are: {}",
                    known
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err((
                Some(span),
                format!("`{what}` uses `{name}`, which is not a parameter"),
                Some(hint),
            ));
        }
    }
    Ok(e)
}

fn dims(
    raw: &RawDims,
    what: &str,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Vec<Expr>, Problem> {
    let span = raw.0.span();
    let items: Vec<RawExpr> = match raw.0.get_ref() {
        toml::Value::Array(a) => a
            .iter()
            .map(|v| RawExpr(Spanned::new(span.clone(), v.clone())))
            .collect(),
        v => vec![RawExpr(Spanned::new(span.clone(), v.clone()))],
    };
    if items.is_empty() || items.len() > 3 {
        return Err((
            Some(span),
            format!("`{what}` takes one to three dimensions"),
            None,
        ));
    }
    items.iter().map(|i| expr(i, what, params, src)).collect()
}

/// Validates the raw sections against the build's entry points.
/// `src` is the recipe's text, for the line and column that evaluation errors name.
pub fn validate(raw: Raw, entries: &[String], src: &str) -> Result<Sections, Problem> {
    let params = validate_params(raw.params)?;
    let call_run = raw
        .run
        .as_ref()
        .is_some_and(|r| r.get_ref().function.is_some());
    if call_run {
        let run = raw.run.expect("checked above");
        let call = call::validate(run, raw.check, &params, src)?;
        return Ok(Sections {
            work: validate_work(raw.work, &params, src)?,
            params,
            run: None,
            check: None,
            call: Some(call),
        });
    }
    let run = match raw.run {
        None => None,
        Some(r) => Some(validate_run(r, entries, &params, src)?),
    };
    let check = match (raw.check, &run) {
        (None, _) => None,
        (Some(c), None) => {
            return Err((Some(c.span()), "[check] needs a [run] section".into(), None));
        }
        (Some(c), Some(run)) => Some(validate_check(c, run, entries, &params, src)?),
    };
    Ok(Sections {
        work: validate_work(raw.work, &params, src)?,
        params,
        run,
        check,
        call: None,
    })
}

/// `[params]`: numbers or lists of numbers, within the sweep limit.
fn validate_params(
    raw: Option<Spanned<BTreeMap<String, Spanned<toml::Value>>>>,
) -> Result<BTreeMap<String, Vec<Value>>, Problem> {
    let mut params = BTreeMap::new();
    if let Some(p) = raw {
        let p_span = p.span();
        for (name, v) in p.into_inner() {
            let span = v.span();
            // Expressions name parameters by identifiers; any other name could never be used.
            let ident = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ident {
                return Err((
                    Some(span),
                    format!(
                        "[params] `{}` is not a name an expression can use",
                        crate::foundation::output::printable(&name)
                    ),
                    Some("name a parameter with letters, digits and `_`, not starting with a digit (`seq_len`)".into()),
                ));
            }
            let list = match v.into_inner() {
                toml::Value::Array(a) => a,
                other => vec![other],
            };
            let mut values = Vec::new();
            for item in list {
                values.push(match item {
                    toml::Value::Integer(i) => Value::Int(i),
                    toml::Value::Float(f) => Value::Float(f),
                    _ => {
                        return Err((
                            Some(span),
                            format!("[params] `{name}` must be a number or a list of numbers"),
                            None,
                        ));
                    }
                });
            }
            if values.is_empty() {
                return Err((Some(span), format!("[params] `{name}` has no values"), None));
            }
            params.insert(name, values);
        }
        sweep_points(&params).map_err(|e| {
            (
                Some(p_span.clone()),
                e.to_string(),
                Some("split the sweep, or narrow it with --param NAME=V1,V2".into()),
            )
        })?;
    }
    Ok(params)
}

/// A `[run]` or `[check]` `kernel` must be one of the build's entries.
fn entry(entries: &[String], k: &Spanned<String>, section: &str) -> Result<String, Problem> {
    if entries.contains(k.get_ref()) {
        Ok(k.get_ref().clone())
    } else {
        Err((
            Some(k.span()),
            format!(
                "[{section}] `kernel`: `{}` is not one of the build's entries",
                k.get_ref()
            ),
            Some(if entries.is_empty() {
                "a compile-only recipe (no `entries`) runs nothing: name the kernel in [build] `entries`".to_string()
            } else {
                format!("entries: {}", entries.join(", "))
            }),
        ))
    }
}

/// A required key of a kernel's `[run]` or `[check]`.
fn required<'a, T>(
    v: &'a Option<T>,
    key: &str,
    span: &std::ops::Range<usize>,
) -> Result<&'a T, Problem> {
    v.as_ref().ok_or_else(|| {
        (
            Some(span.clone()),
            format!("{key} is missing"),
            Some("a kernel's [run] names `kernel`, `grid` and `block`; a Python call's names `function`".into()),
        )
    })
}

/// A kernel's `[run]`: its launch and its arguments.
fn validate_run(
    r: Spanned<RawRun>,
    entries: &[String],
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Run, Problem> {
    let span = r.span();
    let r = r.into_inner();
    if r.device.is_some() {
        return Err((
            Some(span),
            "[run] `device` is for a Python call (`function`), not a kernel".into(),
            Some("a kernel runs on the GPU that --device names".into()),
        ));
    }
    let launch = Launch {
        kernel: entry(
            entries,
            required(&r.kernel, "[run] `kernel`", &span)?,
            "run",
        )?,
        grid: dims(
            required(&r.grid, "[run] `grid`", &span)?,
            "[run] grid",
            params,
            src,
        )?,
        block: dims(
            required(&r.block, "[run] `block`", &span)?,
            "[run] block",
            params,
            src,
        )?,
        shared_mem: match &r.shared_mem {
            Some(e) => expr(e, "[run] shared-mem", params, src)?,
            None => Expr::parse("0").expect("a literal parses"),
        },
    };
    let mut args = Vec::new();
    for (i, a) in r.args.into_iter().enumerate() {
        let span = a.span();
        let a = a.into_inner();
        let name = a.name.get_ref().clone();
        if args.iter().any(|x: &Arg| x.name() == name) {
            return Err((
                Some(a.name.span()),
                format!("[run] args: `{name}` is used twice"),
                None,
            ));
        }
        if a.tensor.is_some() || a.shape.is_some() {
            return Err((
                Some(span),
                format!(
                    "[run] args[{i}] ({name}): `tensor` and `shape` are for a Python call (`function`); a kernel takes `buffer` and `count`"
                ),
                None,
            ));
        }
        let arg = match (&a.buffer, &a.scalar) {
            (Some(t), None) => buffer_arg(i, &a, t, span, params, src)?,
            (None, Some(t)) => scalar_arg(i, &a, t, span, params, src)?,
            _ => {
                return Err((
                    Some(span),
                    format!(
                        "[run] args[{i}] ({name}): say either `buffer = TYPE` or `scalar = TYPE`"
                    ),
                    None,
                ));
            }
        };
        args.push(arg);
    }
    Ok(Run { launch, args })
}

/// The element type an argument names (`buffer = "f32"`), or the problem at its span.
fn arg_type(t: &Spanned<String>, what: &str, hint: Option<&str>) -> Result<DType, Problem> {
    DType::parse(t.get_ref()).ok_or_else(|| {
        (
            Some(t.span()),
            format!("{what}: unknown type `{}`", t.get_ref()),
            hint.map(str::to_string),
        )
    })
}

/// A `buffer = TYPE` argument of a kernel.
fn buffer_arg(
    i: usize,
    a: &RawArg,
    t: &Spanned<String>,
    span: std::ops::Range<usize>,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Arg, Problem> {
    let name = a.name.get_ref().clone();
    let what = |k: &str| format!("[run] args[{i}] ({name}) `{k}`");
    let dtype = arg_type(
        t,
        &what("buffer"),
        Some("types: f16, bf16, f32, f64, i32, u32, i64, u64, u8"),
    )?;
    let count = a.count.as_ref().ok_or_else(|| {
        (
            Some(span.clone()),
            format!("{} is missing", what("count")),
            None,
        )
    })?;
    if a.value.is_some() {
        return Err((
            Some(span.clone()),
            format!("{}: a buffer takes `count`, not `value`", what("value")),
            None,
        ));
    }
    let init = init_of(a, dtype, &span, &what)?;
    let output = a.output.unwrap_or(false);
    if !output && init.is_none() {
        return Err((
            Some(span.clone()),
            format!("{}: an input buffer needs an `init`", what("init")),
            Some("e.g. init = \"normal\", or output = true".into()),
        ));
    }
    // A fixed seed per argument (its position) unless given: reruns see the same data.
    let seed = a.seed.unwrap_or(1000 + i as u64);
    let arg = Arg::Buffer {
        name: name.clone(),
        dtype,
        count: expr(count, &what("count"), params, src)?,
        init,
        seed,
        output,
    };
    Ok(arg)
}

/// A number as a message shows it: in full where that is short, else with an exponent
/// (`1e300`, not three hundred digits).
pub fn show_number(v: f64) -> String {
    if v.is_finite() && v != 0.0 && (v.abs() >= 1e16 || v.abs() < 1e-6) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// How an argument is filled (`init` with its `low`/`high`/`mean`/`std`), for kernel buffers
/// and Python tensors alike. A key the fill does not take (`low` on `normal`) and a value
/// the buffer's type cannot hold (`mean = 300` for `u8`) are refused, not coerced.
pub(crate) fn init_of(
    a: &RawArg,
    dtype: DType,
    span: &std::ops::Range<usize>,
    what: &dyn Fn(&str) -> String,
) -> Result<Option<Init>, Problem> {
    let kind = a.init.as_ref().map(|s| s.get_ref().as_str());
    let takes: &[&str] = match kind {
        None | Some("zeros" | "iota") => &[],
        Some("constant") => &["mean"],
        Some("uniform") => &["low", "high"],
        Some("normal") => &["mean", "std"],
        Some(_) => &["low", "high", "mean", "std"],
    };
    let given = [
        ("low", a.low),
        ("high", a.high),
        ("mean", a.mean),
        ("std", a.std),
    ];
    if let Some((key, _)) = given
        .iter()
        .find(|(k, v)| v.is_some() && !takes.contains(k))
    {
        let message = match kind {
            None => format!(
                "{}: `{key}` goes with an `init`, and there is none",
                what(key)
            ),
            Some(k) => format!("{}: init `{k}` takes no `{key}`", what(key)),
        };
        return Err((
            Some(span.clone()),
            message,
            Some("inits: zeros, constant (with mean = VALUE), iota, uniform (low, high), normal (mean, std)".into()),
        ));
    }
    let holds = |v: f64| dtype.holds(v);
    let out_of_type = |key: &str, v: f64| {
        (
            Some(span.clone()),
            format!(
                "{}: {} does not fit a {} element",
                what(key),
                show_number(v),
                format!("{dtype:?}").to_lowercase()
            ),
            None,
        )
    };
    Ok(match kind {
        None => None,
        Some("zeros") => Some(Init::Zeros),
        Some("iota") => Some(Init::Iota),
        Some("constant") => {
            let value = a.mean.unwrap_or(0.0);
            if !holds(value) {
                return Err(out_of_type("mean", value));
            }
            Some(Init::Constant { value })
        }
        Some("uniform") => {
            let (low, high) = (a.low.unwrap_or(0.0), a.high.unwrap_or(1.0));
            if !(low.is_finite() && high.is_finite() && low <= high) {
                return Err((
                    Some(span.clone()),
                    format!(
                        "{}: `low` {low} must not exceed `high` {high}, and both must be finite",
                        what("init")
                    ),
                    None,
                ));
            }
            // Integers are drawn from [low, high): the bounds themselves must fit.
            for (key, v) in [("low", low), ("high", high)] {
                let fits = holds(v.floor()) || (key == "high" && holds(v.floor() - 1.0));
                if !fits {
                    return Err(out_of_type(key, v));
                }
            }
            Some(Init::Uniform { low, high })
        }
        Some("normal") => {
            let (mean, std) = (a.mean.unwrap_or(0.0), a.std.unwrap_or(1.0));
            if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
                return Err((
                    Some(span.clone()),
                    format!(
                        "{}: `std` {std} must be finite and not negative, `mean` {mean} finite",
                        what("init")
                    ),
                    None,
                ));
            }
            Some(Init::Normal { mean, std })
        }
        Some(other) => {
            let s = a.init.as_ref().expect("matched Some").span();
            return Err((Some(s), format!("{}: unknown init `{other}`", what("init")), Some("inits: zeros, constant (with mean = VALUE), iota, uniform (low, high), normal (mean, std)".into())));
        }
    })
}

/// A `scalar = TYPE` argument of a kernel.
fn scalar_arg(
    i: usize,
    a: &RawArg,
    t: &Spanned<String>,
    span: std::ops::Range<usize>,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Arg, Problem> {
    let name = a.name.get_ref().clone();
    let what = |k: &str| format!("[run] args[{i}] ({name}) `{k}`");
    let dtype = arg_type(t, &what("scalar"), None)?;
    if dtype == DType::F16 || dtype == DType::Bf16 {
        return Err((
            Some(t.span()),
            format!(
                "{}: half-precision scalars are not supported",
                what("scalar")
            ),
            Some("pass f32 and convert in the kernel".into()),
        ));
    }
    let value = a.value.as_ref().ok_or_else(|| {
        (
            Some(span.clone()),
            format!("{} is missing", what("value")),
            None,
        )
    })?;
    if a.count.is_some()
        || a.init.is_some()
        || a.output.is_some()
        || [a.low, a.high, a.mean, a.std].iter().any(Option::is_some)
    {
        return Err((
            Some(span.clone()),
            format!("[run] args[{i}] ({name}): a scalar takes only `value`"),
            None,
        ));
    }
    Ok(Arg::Scalar {
        name: name.clone(),
        dtype,
        value: expr(value, &what("value"), params, src)?,
    })
}

/// A kernel's `[check]`: the reference kernel and the tolerances of the outputs.
fn validate_check(
    c: Spanned<RawCheck>,
    run: &Run,
    entries: &[String],
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Check, Problem> {
    let span = c.span();
    let c = c.into_inner();
    if c.function.is_some() {
        return Err((
            Some(span),
            "[check] `function` is for a Python call: [run] names a kernel, so [check] names a `kernel`".into(),
            None,
        ));
    }
    let tolerances = [("atol", c.atol), ("rtol", c.rtol)].into_iter().chain(
        c.tolerance
            .values()
            .flat_map(|t| [("atol", t.atol), ("rtol", t.rtol)]),
    );
    for (key, v) in tolerances {
        if let Some(v) = v
            && !(v.is_finite() && v >= 0.0)
        {
            return Err((
                Some(span),
                format!("[check] `{key}` is {v}; a tolerance is a finite number, 0 or more"),
                None,
            ));
        }
    }
    let outputs: Vec<&str> = run
        .args
        .iter()
        .filter_map(|a| match a {
            Arg::Buffer {
                name, output: true, ..
            } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    if outputs.is_empty() {
        return Err((
            Some(span),
            "[check] has nothing to compare: no argument is `output = true`".into(),
            None,
        ));
    }
    let mut per_output = BTreeMap::new();
    for (name, t) in c.tolerance {
        if !outputs.contains(&name.get_ref().as_str()) {
            return Err((
                Some(name.span()),
                format!("[check] tolerance: `{}` is not an output", name.get_ref()),
                Some(format!("outputs: {}", outputs.join(", "))),
            ));
        }
        per_output.insert(
            name.into_inner(),
            (
                t.atol.unwrap_or(c.atol.unwrap_or(DEFAULT_ATOL)),
                t.rtol.unwrap_or(c.rtol.unwrap_or(DEFAULT_RTOL)),
            ),
        );
    }
    Ok(Check {
        launch: Launch {
            kernel: entry(
                entries,
                required(&c.kernel, "[check] `kernel`", &span)?,
                "check",
            )?,
            grid: match &c.grid {
                Some(g) => dims(g, "[check] grid", params, src)?,
                None => run.launch.grid.clone(),
            },
            block: match &c.block {
                Some(b) => dims(b, "[check] block", params, src)?,
                None => run.launch.block.clone(),
            },
            shared_mem: match &c.shared_mem {
                Some(e) => expr(e, "[check] shared-mem", params, src)?,
                None => run.launch.shared_mem.clone(),
            },
        },
        atol: c.atol.unwrap_or(DEFAULT_ATOL),
        rtol: c.rtol.unwrap_or(DEFAULT_RTOL),
        per_output,
    })
}

/// `[work]`: bytes and flops of one launch.
fn validate_work(
    raw: Option<Spanned<RawWork>>,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Work, Problem> {
    Ok(match raw {
        None => Work::default(),
        Some(w) => {
            let w = w.into_inner();
            Work {
                bytes: w
                    .bytes
                    .as_ref()
                    .map(|e| expr(e, "[work] bytes", params, src))
                    .transpose()?,
                flops: w
                    .flops
                    .as_ref()
                    .map(|e| expr(e, "[work] flops", params, src))
                    .transpose()?,
            }
        }
    })
}

/// Every combination of parameter values (the sweep), in order.
pub fn combinations(params: &BTreeMap<String, Vec<Value>>) -> Vec<BTreeMap<String, Value>> {
    let mut out = vec![BTreeMap::new()];
    for (name, values) in params {
        let mut next = Vec::new();
        for combo in &out {
            for v in values {
                let mut c = combo.clone();
                c.insert(name.clone(), *v);
                next.push(c);
            }
        }
        out = next;
    }
    out
}

/// The values of `--param K=V[,V...]`: split at the commas outside parentheses, so that a
/// value may call a function of several arguments (`ceil_div(1000, 3)`). Unbalanced
/// parentheses leave the rest as one value, which the expression's parser then refuses.
fn top_level_items(v: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (i, c) in v.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&v[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&v[from..]);
    items
}

/// Applies `--param K=V[,V...]` overrides.
pub fn override_params(
    params: &mut BTreeMap<String, Vec<Value>>,
    overrides: &[String],
) -> Result<(), ParamError> {
    for o in overrides {
        // What a message echoes of the override: at most 200 characters of it.
        let shown = || crate::foundation::output::clip(o, 200);
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| ParamError::NoValue { text: shown() })?;
        if !params.contains_key(k) {
            return Err(ParamError::Unknown {
                name: crate::foundation::output::clip(k, 200),
                known: params.keys().cloned().collect(),
            });
        }
        let mut values = Vec::new();
        for item in top_level_items(v) {
            let item = item.trim();
            let e = crate::foundation::expr::eval_str(item, &BTreeMap::new()).map_err(|error| {
                match error {
                    // A value names no parameter: `n=abc` is a word where a number belongs.
                    crate::foundation::expr::ExprError::UnknownName { name, .. } => {
                        ParamError::Word {
                            text: shown(),
                            word: crate::foundation::output::clip(&name, 200),
                        }
                    }
                    error => ParamError::Value {
                        text: shown(),
                        error,
                    },
                }
            })?;
            values.push(e);
        }
        params.insert(k.to_string(), values);
    }
    sweep_points(params)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message echoes at most 200 characters of a `--param` (an argument of 120 KB was
    /// echoed whole), and a sweep too large says the overrides count.
    #[test]
    fn param_errors_echo_a_bounded_part_of_the_argument() {
        let mut params: BTreeMap<String, Vec<Value>> =
            [("n".to_string(), vec![Value::Int(1)])].into();
        let long = format!("n=({}", "1+".repeat(60_000));
        for bad in [
            long.clone(),
            long.replace('=', "-"),
            format!("{}=1", "x".repeat(60_000)),
        ] {
            let e = override_params(&mut params, &[bad])
                .unwrap_err()
                .to_string();
            assert!(e.len() < 1000 && e.contains("..."), "{} bytes", e.len());
        }
        let wide = (0..200)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut two: BTreeMap<String, Vec<Value>> = [
            ("n".to_string(), vec![Value::Int(1)]),
            ("m".to_string(), vec![Value::Int(1)]),
        ]
        .into();
        let e = override_params(&mut two, &[format!("n={wide}"), format!("m={wide}")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("[params] and any --param"), "{e}");
    }
}
