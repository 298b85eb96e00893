//! What a build's kernels cost against what the recipe allows: the occupancy of the
//! recipe's `[run]` launch on every target of the resource report, and the budgets of
//! `[build.limits]` (registers, shared memory, spills, minimum occupancy). A kernel over
//! budget makes the build fail, naming the kernel, the target, the figure and the limit.

use std::collections::BTreeMap;

use crate::foundation::cubin::{KernelResources, ResourceReport, TargetResources};
use crate::foundation::expr::Value;
use crate::foundation::occupancy::{self, Demand, LaunchOccupancy};
use crate::foundation::recipe::{Limits, Recipe};

/// One launch shape of the `[run]` kernel: parameters, threads per block, dynamic shared
/// memory.
struct Shape {
    params: String,
    threads: u64,
    dynamic: u64,
}

/// The distinct launch shapes of the recipe's `[run]` over its sweep. Points whose
/// expressions cannot be evaluated are left out (bench reports those).
fn shapes(recipe: &Recipe) -> Vec<Shape> {
    let Some(run) = &recipe.sections.run else {
        return Vec::new();
    };
    let mut out: Vec<Shape> = Vec::new();
    for point in crate::foundation::runspec::combinations(&recipe.sections.params) {
        let threads: Option<u64> = run
            .launch
            .block
            .iter()
            .map(|e| e.eval_count(&point, "block").ok())
            .product();
        let dynamic = run.launch.shared_mem.eval_count(&point, "shared-mem").ok();
        let (Some(threads), Some(dynamic)) = (threads, dynamic) else {
            continue;
        };
        if !out
            .iter()
            .any(|s| s.threads == threads && s.dynamic == dynamic)
        {
            out.push(Shape {
                params: params_text(&point),
                threads,
                dynamic,
            });
        }
    }
    out
}

fn params_text(point: &BTreeMap<String, Value>) -> String {
    point
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `[run]` kernel of a target, if the recipe has a launch and the cubin the kernel.
fn run_kernel<'a>(recipe: &Recipe, t: &'a TargetResources) -> Option<&'a KernelResources> {
    let entry = &recipe.sections.run.as_ref()?.launch.kernel;
    let names: Vec<String> = t.kernels.iter().map(|k| k.name.clone()).collect();
    let name = crate::foundation::symbols::resolve(entry, &names).ok()?;
    t.kernels.iter().find(|k| k.name == name)
}

/// Adds the occupancy of the recipe's launch to a report, per target and launch shape.
pub fn add_occupancy(recipe: &Recipe, report: &mut ResourceReport) {
    report.occupancy.clear();
    let shapes = shapes(recipe);
    for t in &report.targets {
        let Some(k) = run_kernel(recipe, t) else {
            continue;
        };
        // A target the table does not know has no occupancy; displays say so.
        let Some(limits) = occupancy::limits(&t.arch) else {
            continue;
        };
        for s in &shapes {
            let demand = Demand {
                registers: k.registers,
                // The driver's figure: the system reserve, when ptxas mapped it into the
                // section, is added back once per block by the calculator.
                static_smem: k.own_shared_bytes(),
                dynamic_smem: s.dynamic,
                threads: s.threads,
                barriers: k.barriers,
            };
            report.occupancy.push(LaunchOccupancy {
                kernel: k.name.clone(),
                params: s.params.clone(),
                occupancy: occupancy::occupancy(&t.arch, &limits, demand),
            });
        }
    }
}

/// The budgets a report breaks, one message each: `kernel `k` on sm_89: 72 registers per
/// thread, over max-registers = 64`.
pub fn violations(recipe: &Recipe, report: &ResourceReport) -> Vec<String> {
    let l = &recipe.limits;
    if l.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if report.targets.is_empty() {
        out.push(
            "[build.limits] is set but the build made no cubin to check it against (add \"cubin\" to `outputs`)"
                .to_string(),
        );
    }
    out.extend(
        report
            .problems
            .iter()
            .map(|p| format!("cannot check [build.limits]: {p}")),
    );
    let dynamic = shapes(recipe).iter().map(|s| s.dynamic).max().unwrap_or(0);
    for t in &report.targets {
        let run = run_kernel(recipe, t).map(|k| k.name.clone());
        for k in &t.kernels {
            let extra = if run.as_deref() == Some(k.name.as_str()) {
                dynamic
            } else {
                0
            };
            kernel_violations(l, t, k, extra, &mut out);
        }
        if let Some(min) = l.min_occupancy_for(&t.arch) {
            if occupancy::limits(&t.arch).is_none() {
                out.push(format!(
                    "{}: no occupancy table for {} (known: {}), so min-occupancy cannot be checked",
                    t.output,
                    t.arch,
                    occupancy::known().join(", ")
                ));
            }
            let judged: Vec<_> = report
                .occupancy
                .iter()
                .filter(|o| o.occupancy.arch == t.arch)
                .collect();
            if judged.is_empty() && occupancy::limits(&t.arch).is_some() {
                out.push(format!(
                    "{}: min-occupancy on {} needs the recipe's [run] launch of a kernel of this cubin",
                    t.output, t.arch
                ));
            }
            for o in judged {
                if o.occupancy.occupancy + 1e-9 < min {
                    out.push(format!(
                        "kernel `{}` on {}: occupancy {:.1}% ({} of {} warps per SM, limited by {}{}), under min-occupancy = {min}",
                        source_name(&o.kernel),
                        t.arch,
                        o.occupancy.occupancy * 100.0,
                        o.occupancy.warps_per_sm,
                        o.occupancy.max_warps_per_sm,
                        o.occupancy.limited_by.iter().map(|l| l.word()).collect::<Vec<_>>().join(" and "),
                        if o.params.is_empty() { String::new() } else { format!("; at {}", o.params) },
                    ));
                }
            }
        }
    }
    out
}

fn source_name(symbol: &str) -> String {
    crate::foundation::symbols::source_name(symbol).unwrap_or_else(|| symbol.to_string())
}

fn kernel_violations(
    l: &Limits,
    t: &TargetResources,
    k: &KernelResources,
    dynamic: u64,
    out: &mut Vec<String>,
) {
    let at = format!("kernel `{}` on {}", k.source_name(), t.arch);
    if let Some(max) = l.max_registers
        && k.registers > max
    {
        out.push(format!(
            "{at}: {} registers per thread, over max-registers = {max}",
            k.registers
        ));
    }
    if let Some(max) = l.max_shared_bytes {
        // The kernel's own bytes: the system reserve some targets map into the section is
        // not the kernel's, and counting it would judge sm_90 stricter than sm_89.
        let own = k.own_shared_bytes();
        let total = own + dynamic;
        if total > max {
            let how = if dynamic > 0 {
                format!("{own} static + {dynamic} dynamic")
            } else {
                "static".to_string()
            };
            out.push(format!(
                "{at}: {total} bytes of shared memory per block ({how}), over max-shared-bytes = {max}"
            ));
        }
    }
    if let Some(max) = l.spills {
        match (k.spill_store_bytes, k.spill_load_bytes) {
            (Some(s), Some(ld)) if s + ld > max => out.push(format!(
                "{at}: {s} bytes of spill stores and {ld} bytes of spill loads, over spills = {max}"
            )),
            (Some(_), Some(_)) => {}
            _ => out.push(format!(
                "{at}: spills cannot be counted ({} bytes of stack, and the cubin marks no spill instructions), so spills = {max} cannot be checked",
                k.stack_bytes
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe(limits: &str, block: &str, shared: &str) -> Recipe {
        let text = format!(
            "schema = 1\n[build]\nkind = \"nvrtc\"\nsource = \"k.cu\"\nentries = [\"k\"]\ntarget = \"sm_89\"\n{limits}\n[params]\nn = [1, 2]\n[run]\nkernel = \"k\"\ngrid = 1\nblock = {block}\nshared-mem = {shared}\nargs = []\n"
        );
        crate::foundation::recipe::parse_detached("recipes/k.toml", &text).unwrap()
    }

    fn report(arch: &str, registers: u32, shared: u64, spills: Option<u64>) -> ResourceReport {
        ResourceReport {
            targets: vec![TargetResources {
                output: "cubin".into(),
                arch: arch.into(),
                kernels: vec![KernelResources {
                    name: "k".into(),
                    registers,
                    shared_bytes: shared,
                    spill_store_bytes: spills,
                    spill_load_bytes: spills,
                    ..KernelResources::default()
                }],
                ..TargetResources::default()
            }],
            ..ResourceReport::default()
        }
    }

    #[test]
    fn each_budget_names_kernel_target_figure_and_limit() {
        let r = recipe(
            "[build.limits]\nmax-registers = 64\nmax-shared-bytes = 49152\nspills = 0\nmin-occupancy = { sm_89 = 0.5 }",
            "\"128 * n\"",
            "1024",
        );
        let mut rep = report("sm_89", 72, 48 * 1024, Some(8));
        add_occupancy(&r, &mut rep);
        // Two shapes: 128 and 256 threads.
        assert_eq!(rep.occupancy.len(), 2);
        let v = violations(&r, &rep);
        assert_eq!(v.len(), 5, "{v:#?}");
        assert_eq!(
            v[0],
            "kernel `k` on sm_89: 72 registers per thread, over max-registers = 64"
        );
        assert_eq!(
            v[1],
            "kernel `k` on sm_89: 50176 bytes of shared memory per block (49152 static + 1024 dynamic), over max-shared-bytes = 49152"
        );
        assert_eq!(
            v[2],
            "kernel `k` on sm_89: 8 bytes of spill stores and 8 bytes of spill loads, over spills = 0"
        );
        assert!(v[3].starts_with("kernel `k` on sm_89: occupancy 0.0% (0 of 48 warps per SM, limited by shared memory; at n=1), under min-occupancy = 0.5"), "{}", v[3]);
        // Within budget: nothing.
        let r = recipe(
            "[build.limits]\nmax-registers = 72\nspills = 0\nmin-occupancy = 0.25",
            "256",
            "0",
        );
        let mut rep = report("sm_89", 72, 0, Some(0));
        add_occupancy(&r, &mut rep);
        assert_eq!(rep.occupancy[0].occupancy.blocks_per_sm, 3);
        assert!(violations(&r, &rep).is_empty());
        // Unknown spills cannot pass spills = 0.
        let rep = report("sm_89", 72, 0, None);
        assert!(violations(&r, &rep)[0].contains("cannot be checked"));
    }

    /// A section that holds the system's reserve (sm_90 on) is judged and occupied by the
    /// kernel's own bytes: the same kernel gives the same shared-memory figures on sm_89
    /// (no reserve in the section) and sm_90 (1024 bytes of it).
    #[test]
    fn the_reserve_in_a_section_is_not_the_kernels() {
        let r = recipe("[build.limits]\nmax-shared-bytes = 8192", "256", "0");
        let mut with = report("sm_90", 22, 9216, Some(0));
        with.targets[0].kernels[0].reserved_shared_bytes = 1024;
        let mut without = report("sm_90", 22, 8192, Some(0));
        add_occupancy(&r, &mut with);
        add_occupancy(&r, &mut without);
        assert_eq!(with.occupancy, without.occupancy);
        // 8192 + 1024 reserve = 9216 per block: 233472 / 9216 = 25 blocks, 8 by warps.
        assert_eq!(with.occupancy[0].occupancy.smem_per_block, 9216);
        assert!(violations(&r, &with).is_empty());
        let tight = recipe("[build.limits]\nmax-shared-bytes = 8191", "256", "0");
        assert_eq!(
            violations(&tight, &with),
            [
                "kernel `k` on sm_90: 8192 bytes of shared memory per block (static), over max-shared-bytes = 8191"
            ]
        );
    }

    #[test]
    fn unknown_architectures_and_missing_cubins_are_said() {
        let r = recipe(
            "[build.limits]\nmax-registers = 64\nmin-occupancy = 0.5",
            "256",
            "0",
        );
        let mut rep = report("sm_61", 32, 0, Some(0));
        add_occupancy(&r, &mut rep);
        assert!(rep.occupancy.is_empty());
        let v = violations(&r, &rep);
        assert_eq!(
            v,
            [
                "cubin: no occupancy table for sm_61 (known: sm_70, sm_72, sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_100, sm_103, sm_110, sm_120, sm_121), so min-occupancy cannot be checked"
            ]
        );
        rep.problems.push("fatbin: malformed".into());
        assert!(violations(&r, &rep)[0].starts_with("cannot check [build.limits]: fatbin"));
        let v = violations(&r, &ResourceReport::default());
        assert!(v[0].contains("made no cubin"), "{v:?}");
        let none = recipe("", "256", "0");
        assert!(violations(&none, &ResourceReport::default()).is_empty());
    }
}
