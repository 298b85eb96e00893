//! A recipe's parameter points resolved into GPU jobs: grid and block from expressions,
//! buffers and scalars checked against their types and the buffer cap.

use super::*;

/// One parameter point of a recipe, resolved.
#[derive(Clone, Debug)]
pub struct Point {
    /// The parameter values.
    pub params: BTreeMap<String, ExprValue>,
    /// The job for the child.
    pub job: Job,
    /// Bytes moved per launch, if the recipe says.
    pub bytes: Option<f64>,
    /// FLOPs per launch, if the recipe says.
    pub flops: Option<f64>,
}

pub(super) fn dims(
    exprs: &[crate::foundation::expr::Expr],
    params: &BTreeMap<String, ExprValue>,
    what: &str,
) -> Result<[u32; 3], SpecError> {
    let mut d = [1u32; 3];
    for (i, e) in exprs.iter().enumerate() {
        let c = e
            .eval_count(params, what)
            .map_err(|err| SpecError::expr(e, &err))?;
        d[i] = u32::try_from(c).map_err(|_| SpecError::DimTooLarge {
            what: what.to_string(),
            expr: e.text().to_string(),
            value: c,
        })?;
    }
    Ok(d)
}

pub(super) fn launch(
    l: &Launch,
    params: &BTreeMap<String, ExprValue>,
    section: &str,
) -> Result<LaunchSpec, SpecError> {
    let grid = dims(&l.grid, params, &format!("[{section}] grid"))?;
    let block = dims(&l.block, params, &format!("[{section}] block"))?;
    let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
    if threads == 0 || threads > 1024 {
        return Err(SpecError::BlockThreads {
            section: section.to_string(),
            threads,
        });
    }
    if grid.contains(&0) {
        return Err(SpecError::ZeroGrid {
            section: section.to_string(),
            grid,
        });
    }
    let smem = l
        .shared_mem
        .eval_count(params, &format!("[{section}] shared-mem"))
        .map_err(|e| SpecError::expr(&l.shared_mem, &e))?;
    Ok(LaunchSpec {
        kernel: l.kernel.clone(),
        grid,
        block,
        shared_mem: u32::try_from(smem).map_err(|_| SpecError::SharedMem {
            section: section.to_string(),
            value: smem,
        })?,
    })
}

/// Default bound on the device memory one point's buffers may ask for: 256 GiB, beyond any
/// single GPU (`REPRO_MAX_BUFFER_BYTES` overrides). It catches a mistyped count before the
/// child tries to allocate it.
pub const DEFAULT_MAX_BUFFER_BYTES: u64 = 256 << 30;

pub(crate) fn max_buffer_bytes() -> Result<u64, crate::foundation::limits::LimitError> {
    crate::foundation::limits::from_env("REPRO_MAX_BUFFER_BYTES", DEFAULT_MAX_BUFFER_BYTES)
}

/// Checks that a scalar's value is representable in its type (no silent wrap or cast).
pub(super) fn scalar_fits(name: &str, dtype: DType, v: f64) -> Result<(), SpecError> {
    let (lo, hi) = match dtype {
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        DType::U32 => (0.0, f64::from(u32::MAX)),
        DType::I64 => (-(2f64.powi(63)), 2f64.powi(63) - 1.0),
        DType::U64 => (0.0, 2f64.powi(64) - 1.0),
        DType::U8 => (0.0, 255.0),
        _ => {
            return if v.is_nan() {
                Err(SpecError::ScalarNan {
                    name: name.to_string(),
                })
            } else {
                Ok(())
            };
        }
    };
    if v.is_finite() && v.fract() == 0.0 && v >= lo && v <= hi {
        Ok(())
    } else {
        Err(SpecError::ScalarRange {
            name: name.to_string(),
            value: v,
            dtype: format!("{dtype:?}").to_lowercase(),
        })
    }
}

/// Resolves a recipe's sections at every parameter point into jobs.
pub fn resolve(
    sections: &Sections,
    module: &Path,
    settings: &Settings,
    check_only: bool,
    time_on_failure: bool,
) -> Result<Vec<Point>, SpecError> {
    let r = Resolver::new(sections, module, settings, check_only, time_on_failure)?;
    crate::foundation::runspec::sweep_points(&sections.params)
        .map_err(|e| SpecError::Sweep(e.to_string()))?;
    crate::foundation::runspec::combinations(&sections.params)
        .into_iter()
        .map(|params| r.point(params))
        .collect()
}

/// Resolves a recipe's sections at the one parameter point `params` (a recorded result's,
/// to hold its launch and arguments against the recipe's), timed as `settings` say.
pub fn resolve_at(
    sections: &Sections,
    module: &Path,
    settings: &Settings,
    params: BTreeMap<String, ExprValue>,
) -> Result<Point, SpecError> {
    Resolver::new(sections, module, settings, false, false)?.point(params)
}

/// What resolving a recipe's points needs, once for all of them.
struct Resolver<'a> {
    sections: &'a Sections,
    run: &'a crate::foundation::runspec::Run,
    module: &'a Path,
    settings: &'a Settings,
    check_only: bool,
    time_on_failure: bool,
    /// The module's kernel symbols (empty where it cannot be read).
    symbols: Vec<String>,
    max_bytes: u64,
}

impl<'a> Resolver<'a> {
    fn new(
        sections: &'a Sections,
        module: &'a Path,
        settings: &'a Settings,
        check_only: bool,
        time_on_failure: bool,
    ) -> Result<Self, SpecError> {
        let run = sections.run.as_ref().ok_or(SpecError::NoRun)?;
        let symbols = std::fs::read(module)
            .map(|b| crate::foundation::symbols::module_symbols(&b))
            .unwrap_or_default();
        let max_bytes = max_buffer_bytes().map_err(|e| SpecError::Sweep(e.to_string()))?;
        Ok(Resolver {
            sections,
            run,
            module,
            settings,
            check_only,
            time_on_failure,
            symbols,
            max_bytes,
        })
    }

    /// Kernels are named as written in the source; a C++ kernel is launched by its mangled
    /// symbol, whatever its template arguments.
    fn symbol(&self, mut l: LaunchSpec) -> Result<LaunchSpec, SpecError> {
        if !self.symbols.is_empty() {
            l.kernel = crate::foundation::symbols::resolve(&l.kernel, &self.symbols)?.to_string();
        }
        Ok(l)
    }

    /// The point at `params`.
    fn point(&self, params: BTreeMap<String, ExprValue>) -> Result<Point, SpecError> {
        let (sections, run) = (self.sections, self.run);
        let mut args = Vec::new();
        let mut total: u64 = 0;
        for a in &run.args {
            args.push(match a {
                Arg::Buffer {
                    name,
                    dtype,
                    count,
                    init,
                    seed,
                    output,
                } => {
                    let n = count
                        .eval_count(&params, &format!("[run] args `{name}` count"))
                        .map_err(|e| SpecError::expr(count, &e))?;
                    let bytes = n
                        .checked_mul(dtype.size() as u64)
                        .and_then(|b| total.checked_add(b))
                        .filter(|t| *t <= self.max_bytes)
                        .ok_or_else(|| SpecError::Buffers {
                            name: name.clone(),
                            expr: count.text().to_string(),
                            count: n,
                            max: self.max_bytes,
                        })?;
                    total = bytes;
                    ArgSpec::Buffer {
                        name: name.clone(),
                        dtype: *dtype,
                        count: n,
                        init: init.clone(),
                        seed: *seed,
                        output: *output,
                    }
                }
                Arg::Scalar { name, dtype, value } => {
                    let v = value
                        .eval(&params)
                        .map_err(|e| SpecError::expr(value, &e))?
                        .as_f64();
                    scalar_fits(name, *dtype, v)?;
                    ArgSpec::Scalar {
                        name: name.clone(),
                        dtype: *dtype,
                        value: v,
                    }
                }
            });
        }
        let (reference, tolerances) = match &sections.check {
            Some(c) => {
                let mut tol = BTreeMap::new();
                for a in &run.args {
                    if let Arg::Buffer {
                        name, output: true, ..
                    } = a
                    {
                        tol.insert(
                            name.clone(),
                            c.per_output.get(name).copied().unwrap_or((c.atol, c.rtol)),
                        );
                    }
                }
                (
                    Some(self.symbol(launch(&c.launch, &params, "check")?)?),
                    tol,
                )
            }
            None => (None, BTreeMap::new()),
        };
        let eval = |e: &Option<crate::foundation::expr::Expr>| -> Result<Option<f64>, SpecError> {
            e.as_ref()
                .map(|e| {
                    e.eval(&params)
                        .map(|v| v.as_f64())
                        .map_err(|err| SpecError::expr(e, &err))
                })
                .transpose()
        };
        let job = Job {
            schema: crate::engines::gpurun::SCHEMA,
            device: self.settings.device,
            module: self.module.display().to_string(),
            kernel: self.symbol(launch(&run.launch, &params, "run")?)?,
            reference,
            args,
            tolerances,
            timing: (!self.check_only).then(|| timing(self.settings)),
            time_on_failure: self.time_on_failure,
        };
        Ok(Point {
            bytes: eval(&sections.work.bytes)?,
            flops: eval(&sections.work.flops)?,
            params,
            job,
        })
    }
}
