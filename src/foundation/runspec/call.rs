//! A `[run]` section that calls a Python function instead of launching a kernel: the
//! function (`module.function`, the extension's or any importable callable), its tensors
//! described like kernel buffers (a type, a shape of expressions, an init), the device they
//! live on, and in `[check]` a reference callable with tolerances.
//!
//! ```toml
//! [params]
//! s = [128, 256]
//!
//! [run]
//! function = "attn_ext.attention"
//! device = "cuda"               # or "cpu"; default "cuda"
//! args = [
//!   { name = "q", tensor = "f32", shape = [2, 8, "s", 64], init = "normal" },
//!   { name = "k", tensor = "f32", shape = [2, 8, "s", 64], init = "normal" },
//!   { name = "v", tensor = "f32", shape = [2, 8, "s", 64], init = "normal" },
//! ]
//!
//! [check]
//! function = "torch.nn.functional.scaled_dot_product_attention"
//! atol = 1e-4
//! rtol = 1e-4
//! ```
//! The function's return value (a tensor, or a tuple of tensors) is compared with the
//! reference's; a function that returns `None` is compared through its `output = true`
//! tensors, which each call gets fresh.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::foundation::expr::{Expr, Value};
use crate::foundation::runspec::{
    DEFAULT_ATOL, DEFAULT_RTOL, DType, Init, Problem, RawArg, RawCheck, RawExpr, RawRun, expr,
    init_of,
};

/// Where a Python call's tensors live and how it is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallDevice {
    /// The CUDA device that `--device` names: CUDA events, L2 flushed.
    Cuda,
    /// The CPU: wall clock (`time.perf_counter_ns`), caches flushed by a write.
    Cpu,
}

impl CallDevice {
    /// Its name in recipes and records.
    pub fn name(self) -> &'static str {
        match self {
            CallDevice::Cuda => "cuda",
            CallDevice::Cpu => "cpu",
        }
    }
}

/// One argument of a Python call, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum CallArg {
    /// A tensor.
    Tensor {
        /// Its name.
        name: String,
        /// Element type.
        dtype: DType,
        /// Its shape, one expression a dimension.
        shape: Vec<Expr>,
        /// How it is filled; `None` for an output (NaN or zeros, fresh for each call).
        init: Option<Init>,
        /// Seed of its random fill.
        seed: u64,
        /// Whether it is an output the check compares (when the function returns `None`).
        output: bool,
    },
    /// A Python number.
    Scalar {
        /// Its name.
        name: String,
        /// Integer or float.
        dtype: DType,
        /// Its value.
        value: Expr,
    },
}

impl CallArg {
    /// The argument's name.
    pub fn name(&self) -> &str {
        match self {
            CallArg::Tensor { name, .. } | CallArg::Scalar { name, .. } => name,
        }
    }
}

/// The reference a Python call is checked against.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// `module.function`.
    pub function: String,
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

/// `[run] function = ...`.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// `module.function`.
    pub function: String,
    /// Where the tensors live.
    pub device: CallDevice,
    /// The arguments, in order.
    pub args: Vec<CallArg>,
    /// `[check] function`, if any.
    pub reference: Option<Reference>,
}

/// The most dimensions a tensor may have.
pub const MAX_DIMS: usize = 8;

/// Whether `s` is a dotted Python name with a module part: `pkg.mod.function`.
pub fn is_callable_path(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    s.len() <= 200
        && parts.len() >= 2
        && parts.iter().all(|p| {
            let mut c = p.chars();
            c.next()
                .is_some_and(|f| f == '_' || f.is_ascii_alphabetic())
                && c.all(|ch| ch == '_' || ch.is_ascii_alphanumeric())
        })
}

fn callable(v: &Spanned<String>, key: &str) -> Result<String, Problem> {
    if is_callable_path(v.get_ref()) {
        return Ok(v.get_ref().clone());
    }
    Err((
        Some(v.span()),
        format!(
            "{key}: `{}` is not `module.function` (dotted Python names)",
            crate::foundation::output::printable(v.get_ref())
        ),
        Some("for example \"attn_ext.attention\" or \"torch.nn.functional.scaled_dot_product_attention\"".into()),
    ))
}

/// Validates a `[run]` that names a `function`, and its `[check]`.
pub fn validate(
    run: Spanned<RawRun>,
    check: Option<Spanned<RawCheck>>,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Call, Problem> {
    let span = run.span();
    let r = run.into_inner();
    let parts = r.kernel_parts();
    if let Some(key) = parts {
        return Err((
            Some(span),
            format!(
                "[run] `{key}` is for a kernel; a Python call (`function`) takes `function`, `device` and `args`"
            ),
            None,
        ));
    }
    let function = callable(r.function.as_ref().expect("a call run"), "[run] `function`")?;
    let device = match r.device.as_ref().map(|d| (d.get_ref().as_str(), d.span())) {
        None | Some(("cuda", _)) => CallDevice::Cuda,
        Some(("cpu", _)) => CallDevice::Cpu,
        Some((other, s)) => {
            return Err((
                Some(s),
                format!(
                    "[run] `device`: `{}` is neither \"cuda\" nor \"cpu\"",
                    crate::foundation::output::printable(other)
                ),
                None,
            ));
        }
    };
    let mut args: Vec<CallArg> = Vec::new();
    for (i, a) in r.into_args().into_iter().enumerate() {
        let span = a.span();
        let a = a.into_inner();
        let name = a.name.get_ref().clone();
        if args.iter().any(|x| x.name() == name) {
            return Err((
                Some(a.name.span()),
                format!("[run] args: `{name}` is used twice"),
                None,
            ));
        }
        args.push(call_arg(i, &a, span, params, src)?);
    }
    let reference = match check {
        None => None,
        Some(c) => Some(reference(c, &args)?),
    };
    Ok(Call {
        function,
        device,
        args,
        reference,
    })
}

fn call_arg(
    i: usize,
    a: &RawArg,
    span: Range<usize>,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<CallArg, Problem> {
    let name = a.name.get_ref().clone();
    let what = |k: &str| format!("[run] args[{i}] ({name}) `{k}`");
    if a.buffer.is_some() || a.count.is_some() {
        return Err((
            Some(span),
            format!(
                "[run] args[{i}] ({name}): a Python call takes `tensor` and `shape`, not `buffer` and `count`"
            ),
            None,
        ));
    }
    let dtype_of = |t: &Spanned<String>, key: &str| {
        DType::parse(t.get_ref()).ok_or_else(|| {
            (
                Some(t.span()),
                format!(
                    "{}: unknown type `{}`",
                    what(key),
                    crate::foundation::output::printable(t.get_ref())
                ),
                Some("types: f16, bf16, f32, f64, i32, u32, i64, u64, u8".into()),
            )
        })
    };
    match (&a.tensor, &a.scalar) {
        (Some(t), None) => {
            let dtype = dtype_of(t, "tensor")?;
            let shape = shape(a, &span, &what, params, src)?;
            if a.value.is_some() {
                return Err((
                    Some(span),
                    format!("{}: a tensor takes `shape`, not `value`", what("value")),
                    None,
                ));
            }
            let init = init_of(a, dtype, &span, &what)?;
            let output = a.output.unwrap_or(false);
            if !output && init.is_none() {
                return Err((
                    Some(span),
                    format!("{}: an input tensor needs an `init`", what("init")),
                    Some("e.g. init = \"normal\", or output = true".into()),
                ));
            }
            Ok(CallArg::Tensor {
                name,
                dtype,
                shape,
                init,
                seed: a.seed.unwrap_or(1000 + i as u64),
                output,
            })
        }
        (None, Some(t)) => {
            let dtype = dtype_of(t, "scalar")?;
            let value = a.value.as_ref().ok_or_else(|| {
                (
                    Some(span.clone()),
                    format!("{} is missing", what("value")),
                    None,
                )
            })?;
            if a.shape.is_some() || a.init.is_some() || a.output.is_some() {
                return Err((
                    Some(span),
                    format!("[run] args[{i}] ({name}): a scalar takes only `value`"),
                    None,
                ));
            }
            Ok(CallArg::Scalar {
                name: name.clone(),
                dtype,
                value: expr(value, &what("value"), params, src)?,
            })
        }
        _ => Err((
            Some(span),
            format!(
                "[run] args[{i}] ({name}): say either `tensor = TYPE` (with `shape`) or `scalar = TYPE`"
            ),
            None,
        )),
    }
}

fn shape(
    a: &RawArg,
    span: &Range<usize>,
    what: &dyn Fn(&str) -> String,
    params: &BTreeMap<String, Vec<Value>>,
    src: &str,
) -> Result<Vec<Expr>, Problem> {
    let raw = a.shape.as_ref().ok_or_else(|| {
        (
            Some(span.clone()),
            format!("{} is missing", what("shape")),
            Some("e.g. shape = [2, 8, \"s\", 64]".into()),
        )
    })?;
    let s = raw.span();
    let items: Vec<toml::Value> = match raw.get_ref() {
        toml::Value::Array(items) => items.clone(),
        v => vec![v.clone()],
    };
    if items.is_empty() || items.len() > MAX_DIMS {
        return Err((
            Some(s),
            format!("{} takes one to {MAX_DIMS} dimensions", what("shape")),
            None,
        ));
    }
    items
        .into_iter()
        .map(|v| {
            expr(
                &RawExpr(Spanned::new(s.clone(), v)),
                &what("shape"),
                params,
                src,
            )
        })
        .collect()
}

fn reference(c: Spanned<RawCheck>, args: &[CallArg]) -> Result<Reference, Problem> {
    let span = c.span();
    let c = c.into_inner();
    if let Some(key) = c.kernel_parts() {
        return Err((
            Some(span),
            format!(
                "[check] `{key}` is for a kernel; a Python call's [check] names a reference `function`"
            ),
            None,
        ));
    }
    let Some(function) = &c.function else {
        return Err((
            Some(span),
            "[check] `function` is missing: the reference callable".into(),
            Some("e.g. function = \"torch.nn.functional.scaled_dot_product_attention\"".into()),
        ));
    };
    let function = callable(function, "[check] `function`")?;
    for (key, v) in [("atol", c.atol), ("rtol", c.rtol)] {
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
    if !c.tolerance.is_empty() {
        return Err((
            Some(span),
            "[check] per-output tolerances are for kernels; a Python call takes `atol` and `rtol`"
                .into(),
            None,
        ));
    }
    let _ = args;
    Ok(Reference {
        function,
        atol: c.atol.unwrap_or(DEFAULT_ATOL),
        rtol: c.rtol.unwrap_or(DEFAULT_RTOL),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callable_paths_are_dotted_python_names() {
        for ok in [
            "m.f",
            "torch.nn.functional.scaled_dot_product_attention",
            "_a.b1",
        ] {
            assert!(is_callable_path(ok), "{ok}");
        }
        for bad in ["f", "m.", ".f", "m.f()", "m f.g", "m.1f", "os.system;x", ""] {
            assert!(!is_callable_path(bad), "{bad}");
        }
    }
}
