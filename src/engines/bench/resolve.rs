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
            place: e.place(what),
            expr: e.text().to_string(),
            value: c,
        })?;
    }
    Ok(d)
}

/// Where the first of `exprs` was written (`12:9: [run] block`), and, when `section` takes
/// it from another section (`[check]` runs with `[run]`'s block unless it gives its own),
/// which section that is.
fn place_of(exprs: &[crate::foundation::expr::Expr], section: &str, key: &str) -> String {
    let fallback = format!("[{section}] {key}");
    let place = exprs
        .first()
        .map_or(fallback.clone(), |e| e.place(&fallback));
    if place.ends_with(&fallback) {
        place
    } else {
        format!("{place} (which [{section}] takes)")
    }
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
            place: place_of(&l.block, section, "block"),
            threads,
        });
    }
    if grid.contains(&0) {
        return Err(SpecError::ZeroGrid {
            place: place_of(&l.grid, section, "grid"),
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
            place: place_of(std::slice::from_ref(&l.shared_mem), section, "shared-mem"),
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

/// Checks that a scalar's value is representable in its type (no silent wrap, cast or
/// overflow to infinity); `place` says where it was written.
pub(super) fn scalar_fits(place: &str, dtype: DType, v: f64) -> Result<(), SpecError> {
    // A float scalar may be infinite as computed; a finite one beyond f32's range would
    // become infinity.
    let fits = (v.is_infinite() && matches!(dtype, DType::F32 | DType::F64)) || dtype.holds(v);
    if fits {
        Ok(())
    } else if v.is_nan() {
        Err(SpecError::ScalarNan {
            place: place.to_string(),
        })
    } else {
        Err(SpecError::ScalarRange {
            place: place.to_string(),
            value: crate::foundation::runspec::show_number(v),
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
                            place: count.place(&format!("[run] args `{name}` count")),
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
                    scalar_fits(
                        &value.place(&format!("[run] args `{name}` value")),
                        *dtype,
                        v,
                    )?;
                    ArgSpec::Scalar {
                        name: name.clone(),
                        dtype: *dtype,
                        value: v,
                    }
                }
            });
        }
        // [run]'s launch first: a mistake in it, which [check] may inherit, is [run]'s.
        let kernel = self.symbol(launch(&run.launch, &params, "run")?)?;
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
        let eval = |e: &Option<crate::foundation::expr::Expr>,
                    key: &str|
         -> Result<Option<f64>, SpecError> {
            e.as_ref()
                .map(|e| {
                    let v = e
                        .eval(&params)
                        .map(|v| v.as_f64())
                        .map_err(|err| SpecError::expr(e, &err))?;
                    if v.is_finite() && v >= 0.0 {
                        Ok(v)
                    } else {
                        Err(SpecError::Work {
                            place: e.place(key),
                            value: crate::foundation::runspec::show_number(v),
                        })
                    }
                })
                .transpose()
        };
        let job = Job {
            schema: crate::engines::gpurun::SCHEMA,
            device: self.settings.device,
            module: self.module.display().to_string(),
            kernel,
            reference,
            args,
            tolerances,
            timing: (!self.check_only).then(|| timing(self.settings)),
            time_on_failure: self.time_on_failure,
        };
        Ok(Point {
            bytes: eval(&sections.work.bytes, "[work] bytes")?,
            flops: eval(&sections.work.flops, "[work] flops")?,
            params,
            job,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a point's values break is said where it was written (line, column and key), and
    /// [run]'s launch is judged before [check] takes it over; a value no type of the
    /// argument can hold, and negative work, are refused rather than coerced.
    #[test]
    fn a_points_mistakes_are_named_where_they_are_written() {
        let recipe = |run: &str, extra: &str| {
            format!(
                "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\", \"r\"]\ntarget = \"sm_90\"\n[params]\nn = 4\n[run]\nkernel = \"k\"\n{run}\nargs = [\n  {{ name = \"c\", buffer = \"f32\", count = \"n\", output = true }},\n  {{ name = \"x\", scalar = \"f32\", value = \"n\" }},\n]\n{extra}"
            )
        };
        let err = |text: &str| resolved(text).map(|_| ()).unwrap_err().to_string();
        let check = "[check]\nkernel = \"r\"\n";
        for (run, extra, want) in [
            (
                "grid = 1\nblock = 0",
                check,
                "12:9: [run] block has 0 threads; a block holds 1 to 1024",
            ),
            (
                "grid = \"n - 4\"\nblock = 1",
                check,
                "11:8: [run] grid [0, 1, 1] has a zero dimension",
            ),
            (
                "grid = \"n * 2**40\"\nblock = 1",
                "",
                "11:8: [run] grid `n * 2**40` is 4398046511104, too large",
            ),
            (
                "grid = 1\nblock = 1\nshared-mem = \"2**40\"",
                "",
                "13:14: [run] shared-mem 1099511627776 is too large",
            ),
            (
                "grid = 1\nblock = 1",
                "[work]\nbytes = \"-n\"\n",
                "18:9: [work] bytes is -4: work is a count",
            ),
        ] {
            let e = err(&recipe(run, extra));
            assert!(e.contains(want), "{e}\n{run}");
        }
        let e =
            err(&recipe("grid = 1\nblock = 1", "").replace("value = \"n\"", "value = \"1e300\""));
        assert!(
            e.contains("[run] args[1] (x) `value`: 1e300 does not fit a f32"),
            "{e}"
        );
        // [check] takes [run]'s block unless it gives its own: its own is [check]'s.
        let e = err(&recipe(
            "grid = 1\nblock = 1",
            "[check]\nkernel = \"r\"\nblock = 4096\n",
        ));
        assert!(e.contains("[check] block has 4096 threads"), "{e}");
        assert!(
            resolved(&recipe(
                "grid = 1\nblock = 1",
                "[work]\nbytes = \"4 * n\"\n"
            ))
            .is_ok()
        );
    }

    fn resolved(text: &str) -> Result<Vec<Point>, SpecError> {
        let r = crate::foundation::recipe::parse_detached("recipes/m.toml", text).unwrap();
        resolve(
            &r.sections,
            Path::new("/nonexistent"),
            &Settings::once(0),
            true,
            false,
        )
    }
}
