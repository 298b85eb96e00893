//! Recorded profiles: the recipe's checked launch run once under Nsight Compute (`ncu`),
//! its metrics read from `ncu --import REPORT --csv --page raw`, kept as a record keyed like
//! a result (build key, must-match fingerprint, parameters, ncu's version, the section set
//! and metrics asked for, the cache control), with the `.ncu-rep` file in the store.
//!
//! ncu is found as nvcc is: `REPRO_NCU`, the PATH, `CUDA_HOME`/`CUDA_PATH`, the CUDA
//! installs under /usr/local, and Nsight Compute's own installs under /opt/nvidia. Its
//! refusals are typed: no permission for the performance counters (`ERR_NVGPUCTRPERM`,
//! with how to allow it), a metric it does not know, a kernel it never saw.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::foundation::error::Diagnose;
use crate::foundation::exit;
use crate::foundation::process::{Cmd, ProcessError};
use crate::foundation::records::ProfileMetric;

/// The metrics recorded unless `--metrics` names others: speed of light of compute and
/// memory, DRAM throughput and bytes, duration, achieved occupancy, registers, and the warp
/// stall breakdown (cycles per issued instruction by reason).
pub const DEFAULT_METRICS: &[&str] = &[
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "dram__bytes.sum",
    "gpu__time_duration.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
];

/// How long ncu may take for one profile (replays make a launch many times slower).
pub const TIMEOUT: Duration = Duration::from_secs(600);

/// Why a profile could not be taken. Nothing is recorded for any of these.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// No ncu on this machine.
    #[error(
        "Nsight Compute (ncu) not found (searched REPRO_NCU, PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda*, /opt/nvidia/nsight-compute*)"
    )]
    NotFound,
    /// The user may not read the GPU's performance counters.
    #[error("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM)")]
    Permission,
    /// ncu does not know a metric.
    #[error("ncu does not know the metric `{metric}`")]
    UnknownMetric {
        /// The metric, as ncu named it.
        metric: String,
    },
    /// ncu does not know a section set.
    #[error("ncu does not know the section set `{set}`")]
    UnknownSet {
        /// The set.
        set: String,
    },
    /// ncu ran but profiled no launch of the kernel.
    #[error("ncu profiled no launch of kernel `{kernel}`")]
    NoLaunch {
        /// The kernel's symbol.
        kernel: String,
        /// ncu's last lines.
        tail: String,
    },
    /// The checked launch under ncu did not pass its check (or crashed).
    #[error("the profiled launch of `{kernel}` is {verdict}: {detail}")]
    Check {
        /// The kernel's symbol.
        kernel: String,
        /// `wrong` or `crash`.
        verdict: String,
        /// What the check or the child said.
        detail: String,
    },
    /// ncu failed otherwise, or printed what this reader cannot read.
    #[error("ncu failed: {detail}")]
    Failed {
        /// The command, how it ended, and its last lines.
        detail: String,
    },
}

impl Diagnose for ProfileError {
    fn exit_code(&self) -> u8 {
        match self {
            ProfileError::UnknownMetric { .. } | ProfileError::UnknownSet { .. } => exit::USAGE,
            ProfileError::NoLaunch { .. } | ProfileError::Check { .. } => exit::MISMATCH,
            _ => exit::ENVIRONMENT,
        }
    }
    fn hint(&self) -> Option<String> {
        Some(match self {
            ProfileError::NotFound => "install Nsight Compute (it comes with the CUDA toolkit) or set REPRO_NCU to the ncu executable".into(),
            ProfileError::Permission => "run as root, or allow every user to profile: write `options nvidia NVreg_RestrictProfilingToAdminUsers=0` to /etc/modprobe.d/nvidia-profiling.conf and reload the nvidia module (or reboot); in a container, start it with the SYS_ADMIN capability".into(),
            ProfileError::UnknownMetric { .. } => "`ncu --query-metrics` lists the metrics of this GPU".into(),
            ProfileError::UnknownSet { .. } => "`ncu --list-sets` lists the section sets".into(),
            ProfileError::NoLaunch { tail, .. } => format!("the launch failed or never happened; ncu said:\n{tail}"),
            ProfileError::Check { .. } => "`repro bench --check-only RECIPE` shows the check without the profiler".into(),
            ProfileError::Failed { .. } => return None,
        })
    }
}

/// Finds ncu.
pub fn find_ncu() -> Option<PathBuf> {
    let mut c: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("REPRO_NCU").filter(|v| !v.is_empty()) {
        // An explicit choice is the only candidate: a wrong one is an error, not a fallback.
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        c.extend(std::env::split_paths(&paths).map(|d| d.join("ncu")));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            c.push(PathBuf::from(root).join("bin/ncu"));
        }
    }
    c.push(PathBuf::from("/usr/local/cuda/bin/ncu"));
    let toolchain = crate::engines::toolchain::sorted_desc;
    c.extend(
        toolchain(Path::new("/usr/local"), "cuda-")
            .into_iter()
            .map(|d| d.join("bin/ncu")),
    );
    c.extend(
        toolchain(Path::new("/opt/nvidia"), "nsight-compute")
            .into_iter()
            .flat_map(|d| {
                let mut v = vec![d.join("ncu")];
                v.extend(toolchain(&d, "20").into_iter().map(|x| x.join("ncu")));
                v
            }),
    );
    c.into_iter().find(|p| p.is_file())
}

/// "Version 2025.3.0.0 (build ...)" → "2025.3.0.0".
pub fn parse_version(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Version "))
        .and_then(|v| v.split_whitespace().next())
        .map(str::to_string)
}

/// ncu's version, from `ncu --version`.
pub fn version(ncu: &Path) -> Result<String, ProfileError> {
    let out = Cmd::new(ncu)
        .arg("--version")
        .timeout(Duration::from_secs(60))
        .output()
        .map_err(failed)?;
    parse_version(&out.stdout_str()).ok_or_else(|| ProfileError::Failed {
        detail: format!(
            "`{} --version` printed no version: {}",
            ncu.display(),
            tail(&out.stdout_str())
        ),
    })
}

fn failed(e: ProcessError) -> ProfileError {
    ProfileError::Failed {
        detail: e.to_string(),
    }
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

/// What to profile and how.
#[derive(Clone, Debug)]
pub struct Request {
    /// ncu.
    pub ncu: PathBuf,
    /// The `repro` executable whose `gpu-job` runs the launch.
    pub repro: PathBuf,
    /// The job (one launch, checked), as `repro gpu-job` reads it on stdin.
    pub job: Vec<u8>,
    /// The kernel's symbol.
    pub kernel: String,
    /// `CUDA_VISIBLE_DEVICES` for the child, if one GPU is chosen.
    pub visible: Option<String>,
    /// `--set`.
    pub set: Option<String>,
    /// The metrics to read.
    pub metrics: Vec<String>,
    /// `--cache-control`: `all` (flush caches before each replay) or `none`.
    pub cache_control: String,
    /// Where ncu writes the report.
    pub report: PathBuf,
}

/// A refusal ncu printed, typed.
fn refusal(text: &str) -> Option<ProfileError> {
    if text.contains("ERR_NVGPUCTRPERM") {
        return Some(ProfileError::Permission);
    }
    for l in text.lines() {
        if let Some(rest) = l.split("Failed to find metric").nth(1) {
            let metric = rest
                .trim()
                .trim_start_matches("regex:")
                .trim_matches(|c: char| {
                    c == '^' || c == '$' || c == '.' || c.is_whitespace() || c == '"'
                });
            return Some(ProfileError::UnknownMetric {
                metric: metric.to_string(),
            });
        }
        if l.contains("==ERROR==")
            && l.contains("set")
            && l.contains("not")
            && let Some(set) = l.split('"').nth(1).or_else(|| l.split('\'').nth(1))
        {
            return Some(ProfileError::UnknownSet {
                set: set.to_string(),
            });
        }
    }
    None
}

/// Runs the launch under ncu (writing the report), then reads the metrics back from it.
pub fn profile(req: &Request) -> Result<BTreeMap<String, ProfileMetric>, ProfileError> {
    let mut cmd = Cmd::new(&req.ncu)
        .args([
            "--target-processes",
            "all",
            "--launch-count",
            "1",
            "--kernel-name",
        ])
        .arg(format!("regex:^{}$", regex_escape(&req.kernel)))
        .args([
            "--cache-control",
            &req.cache_control,
            "--force-overwrite",
            "--export",
        ])
        .arg(&req.report)
        .arg("--metrics")
        .arg(req.metrics.join(","));
    if let Some(set) = &req.set {
        cmd = cmd.args(["--set", set]);
    }
    cmd = cmd
        .arg(&req.repro)
        .arg("gpu-job")
        .stdin_bytes(req.job.clone())
        .timeout(TIMEOUT);
    if let Some(v) = &req.visible {
        cmd = cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    let out = cmd.output().map_err(failed)?;
    let all = format!("{}\n{}", out.stdout_str(), out.stderr_str());
    if let Some(e) = refusal(&all) {
        return Err(e);
    }
    // The child's report (one JSON line among ncu's): a launch that fails its check is not
    // profiled as if it had passed.
    let report = out
        .stdout_str()
        .lines()
        .find_map(|l| serde_json::from_str::<crate::engines::gpurun::Report>(l.trim()).ok());
    if let Some(r) = report {
        let (v, detail) = crate::engines::bench::verdict(&r);
        if v != crate::foundation::records::ResultVerdict::Ok {
            return Err(ProfileError::Check {
                kernel: req.kernel.clone(),
                verdict: v.word().to_string(),
                detail: detail.unwrap_or_default(),
            });
        }
    }
    if !out.status.success() || !req.report.is_file() {
        if all.contains("No kernels were profiled") || out.status.success() {
            return Err(ProfileError::NoLaunch {
                kernel: req.kernel.clone(),
                tail: tail(&all),
            });
        }
        return Err(ProfileError::Failed {
            detail: format!(
                "{} {}\n{}",
                cmd.display(),
                crate::foundation::process::describe_status(out.status),
                tail(&all)
            ),
        });
    }
    let import = Cmd::new(&req.ncu)
        .arg("--import")
        .arg(&req.report)
        // Base units (bytes per second, not "Tbyte/second"), so that records compare
        // metric by metric whatever prefix ncu would choose for each value.
        .args([
            "--csv",
            "--print-units",
            "base",
            "--page",
            "raw",
            "--metrics",
        ])
        .arg(req.metrics.join(","))
        .timeout(Duration::from_secs(120));
    let out = import.output().map_err(failed)?;
    let text = out.stdout_str();
    if let Some(e) = refusal(&format!("{text}\n{}", out.stderr_str())) {
        return Err(e);
    }
    let rows = parse_raw_csv(&text).map_err(|detail| ProfileError::Failed {
        detail: format!(
            "`{}` printed what is not ncu's raw CSV: {detail}",
            import.display()
        ),
    })?;
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| ProfileError::NoLaunch {
            kernel: req.kernel.clone(),
            tail: tail(&text),
        })?;
    for m in &req.metrics {
        if !row.contains_key(m) {
            return Err(ProfileError::UnknownMetric { metric: m.clone() });
        }
    }
    Ok(row)
}

/// A kernel symbol as an ncu regex, matched literally.
fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.^$|?*+()[]{}".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// The columns of ncu's raw page that describe the launch rather than measure it.
const LAUNCH_COLUMNS: &[&str] = &[
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
    "Kernel Time",
    "Section Name",
    "Function Name",
];

/// Why text is not ncu's raw CSV.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CsvError(String);

/// Splits one CSV line (ncu quotes every field; `""` is a quote inside one).
fn csv_fields(line: &str) -> Result<Vec<String>, CsvError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    if quoted {
        return Err(CsvError(format!("unterminated quote in `{line}`")));
    }
    out.push(cur);
    Ok(out)
}

/// Reads `ncu --csv --page raw`: a header row of column names, a row of units, then one
/// row per profiled launch; lines before the header (`==PROF==` messages) are skipped.
/// Numbers may carry thousands separators (`"1,234.5"`); a value that is not a number
/// (`"n/a"`) is kept as text.
pub fn parse_raw_csv(text: &str) -> Result<Vec<BTreeMap<String, ProfileMetric>>, CsvError> {
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("\"ID\""))
        .filter(|l| !l.trim().is_empty() && !l.starts_with("=="));
    let missing = |what: &str| CsvError(format!("no {what} row"));
    let header = csv_fields(lines.next().ok_or_else(|| missing("header (\"ID\",...)"))?)?;
    let units = csv_fields(lines.next().ok_or_else(|| missing("units"))?)?;
    if units.len() != header.len() {
        return Err(CsvError(format!(
            "{} units for {} columns",
            units.len(),
            header.len()
        )));
    }
    let mut rows = Vec::new();
    for (n, line) in lines.enumerate() {
        let values = csv_fields(line)?;
        if values.len() != header.len() {
            return Err(CsvError(format!(
                "row {} has {} fields for {} columns",
                n + 1,
                values.len(),
                header.len()
            )));
        }
        let mut row = BTreeMap::new();
        for ((name, unit), value) in header.iter().zip(&units).zip(values) {
            if LAUNCH_COLUMNS.contains(&name.as_str()) {
                continue;
            }
            let number = value
                .replace(',', "")
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite());
            row.insert(
                name.clone(),
                ProfileMetric {
                    value: number,
                    text: if number.is_none() { Some(value) } else { None },
                    unit: unit.clone(),
                },
            );
        }
        rows.push(row);
    }
    Ok(rows)
}

/// The experiment a bench result and a profile share: the same build, the same parameters,
/// the same GPU model. A result links to every profile of its experiment and back.
fn same_experiment(
    build_key: Option<&str>,
    params: &BTreeMap<String, serde_json::Value>,
    machine: &str,
    p: &crate::foundation::records::ProfileRecord,
) -> bool {
    build_key == Some(p.build_key.as_str()) && *params == p.params && machine == p.machine
}

/// The IDs of the profiles of a bench result's experiment, sorted.
pub fn profiles_of_result(
    store: &crate::foundation::store::Store,
    r: &crate::foundation::records::ResultRecord,
) -> Vec<String> {
    let mut out: Vec<String> = store
        .records(crate::foundation::records::PROFILES)
        .into_iter()
        .filter_map(|(id, _, v)| {
            let p = crate::foundation::records::ProfileRecord::from_json(&v.ok()?, &id).ok()?;
            same_experiment(r.build_key.as_deref(), &r.params, &r.machine, &p).then_some(id)
        })
        .collect();
    out.sort();
    out
}

/// The IDs of the bench results of a profile's experiment, sorted.
pub fn results_of_profile(
    store: &crate::foundation::store::Store,
    p: &crate::foundation::records::ProfileRecord,
) -> Vec<String> {
    let mut out: Vec<String> = store
        .records(crate::foundation::records::RESULTS)
        .into_iter()
        .filter_map(|(id, _, v)| {
            let mut v = v.ok()?;
            if let Some(o) = v.as_object_mut() {
                o.remove("id");
            }
            let r = crate::foundation::records::ResultRecord::from_json(&v, &id).ok()?;
            same_experiment(r.build_key.as_deref(), &r.params, &r.machine, p).then_some(id)
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape `ncu --import R --csv --page raw --metrics ...` prints.
    const RAW: &str = "==PROF== Connected\n\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"dram__bytes.sum.per_second\",\"gpu__time_duration.sum\",\"launch__registers_per_thread\",\"sm__throughput.avg.pct_of_peak_sustained_elapsed\"\n\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"byte/second\",\"nsecond\",\"register/thread\",\"%\"\n\"0\",\"4242\",\"repro\",\"127.0.0.1\",\"vector_add\",\"1\",\"7\",\"(256, 1, 1)\",\"(65536, 1, 1)\",\"0\",\"9.0\",\"4,301,755,321,321.5\",\"187,520\",\"16\",\"n/a\"\n";

    #[test]
    fn raw_csv_reads_numbers_units_and_text() {
        let rows = parse_raw_csv(RAW).unwrap();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert!(!r.contains_key("Kernel Name"));
        assert_eq!(
            r["dram__bytes.sum.per_second"].value,
            Some(4_301_755_321_321.5)
        );
        assert_eq!(r["dram__bytes.sum.per_second"].unit, "byte/second");
        assert_eq!(r["gpu__time_duration.sum"].value, Some(187_520.0));
        assert_eq!(
            r["sm__throughput.avg.pct_of_peak_sustained_elapsed"].value,
            None
        );
        assert_eq!(
            r["sm__throughput.avg.pct_of_peak_sustained_elapsed"]
                .text
                .as_deref(),
            Some("n/a")
        );
    }

    #[test]
    fn malformed_csv_is_an_error() {
        assert!(parse_raw_csv("").is_err());
        assert!(parse_raw_csv("\"ID\",\"a\"\n").is_err());
        assert!(parse_raw_csv("\"ID\",\"a\"\n\"\",\"%\"\n\"0\"\n").is_err());
        assert!(parse_raw_csv("\"ID\",\"a\"\n\"\",\"%\"\n\"0\",\"1\n").is_err());
        assert_eq!(csv_fields("\"a\"\"b\",c").unwrap(), ["a\"b", "c"]);
    }

    #[test]
    fn refusals_are_typed() {
        assert!(matches!(
            refusal(
                "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."
            ),
            Some(ProfileError::Permission)
        ));
        match refusal("==ERROR== Failed to find metric regex:^bogus__metric$") {
            Some(ProfileError::UnknownMetric { metric }) => assert_eq!(metric, "bogus__metric"),
            other => panic!("{other:?}"),
        }
        match refusal("==ERROR== Section set \"bogus\" was not found.") {
            Some(ProfileError::UnknownSet { set }) => assert_eq!(set, "bogus"),
            other => panic!("{other:?}"),
        }
        assert!(refusal("==PROF== Disconnected").is_none());
        assert_eq!(parse_version("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 3) (public-release)\n").as_deref(), Some("2025.3.1.0"));
        assert_eq!(regex_escape("_Z1kIiEvPT_"), "_Z1kIiEvPT_");
        assert_eq!(regex_escape("a.b"), "a\\.b");
    }
}
