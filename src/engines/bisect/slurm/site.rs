//! What each Slurm job of a bisection is asked for, decided before any job is submitted:
//! its time limit (derived from the step's `--timeout`, or given and checked against it),
//! the site's own options (`--slurm-opt`, `[slurm] options` in `repro.toml`), the
//! environment it is given (an explicit export list), and what the submitting process
//! must not pass on when it runs inside an allocation itself.
//!
//! One rule makes a hang mean the same everywhere: the step's `--timeout` is enforced
//! inside the job, by the same code that enforces it on this machine, and the job's time
//! limit lies above every timeout the step can run into. A job that reaches its limit
//! anyway is an error to fix (a limit too tight), never a verdict and never retried.

use std::time::Duration;

use super::super::plan::{Plan, Question};

/// Time a job needs beyond its step's timeouts: starting repro, writing the tree, the
/// result file, and Slurm's own start-up.
pub const MARGIN: Duration = Duration::from_secs(60);

/// How many timeouts one step may run into, one after another: each build, each run of
/// the script, each benchmark process (a run split between processes by
/// `REPRO_TIMING_PROCESSES`, which the step inherits, is that many; a performance step
/// measures its baseline in the same job, so twice).
pub fn timeouts_per_step(plan: &Plan) -> u32 {
    match &plan.question {
        Question::Script(_) | Question::Build => 1,
        Question::Check => 2,
        Question::Bench(b) => {
            let split = u32::try_from(crate::engines::gpurun::processes_from_env()).unwrap_or(1);
            let processes = u32::try_from(b.max_attempts.max(1))
                .unwrap_or(u32::MAX)
                .saturating_mul(split);
            // Build and processes, for the commit and for its baseline.
            2u32.saturating_mul(processes.saturating_add(1))
        }
    }
}

/// The time limit repro asks for when none is given: every timeout the step can run into
/// plus [`MARGIN`], in whole minutes (Slurm's unit).
pub fn derived_limit(plan: &Plan) -> Duration {
    let need = plan
        .timeout
        .saturating_mul(timeouts_per_step(plan))
        .saturating_add(MARGIN);
    Duration::from_secs(need.as_secs().div_ceil(60).max(1) * 60)
}

/// The shortest time limit a job may be given: one step timeout plus [`MARGIN`]; below
/// that a hanging step would be killed by Slurm before its own timeout judged it.
pub fn shortest_limit(plan: &Plan) -> Duration {
    plan.timeout.saturating_add(MARGIN)
}

/// A time limit in Slurm's syntax as the job is given it (`--time=MINUTES`).
pub fn minutes_arg(limit: Duration) -> String {
    format!("--time={}", limit.as_secs().div_ceil(60).max(1))
}

/// A time limit Slurm would not accept.
#[derive(Debug, thiserror::Error)]
#[error("`{given}` is not a Slurm time limit")]
pub struct TimeError {
    /// What was given.
    pub given: String,
}

/// Parses a time limit in Slurm's syntax: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
/// `D-HH:MM:SS`; `UNLIMITED` and `INFINITE` give `None`.
pub fn parse_time(text: &str) -> Result<Option<Duration>, TimeError> {
    let err = || TimeError {
        given: text.to_string(),
    };
    let s = text.trim();
    if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinite") {
        return Ok(None);
    }
    let num = |p: &str| -> Result<u64, TimeError> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 9 {
            return Err(err());
        }
        p.parse().map_err(|_| err())
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(num(d)?), r),
        None => (None, s),
    };
    let parts: Vec<u64> = rest.split(':').map(num).collect::<Result<_, _>>()?;
    let secs = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(d), [h]) => d * 86400 + h * 3600,
        (Some(d), [h, m]) => d * 86400 + h * 3600 + m * 60,
        (Some(d), [h, m, s]) => d * 86400 + h * 3600 + m * 60 + s,
        _ => return Err(err()),
    };
    Ok(Some(Duration::from_secs(secs)))
}

/// The variables every job gets when present here: what repro, compilers, Python and CUDA
/// libraries read. Sites with `SLURM_EXPORT_ENV=NONE` pass nothing else, so the list is
/// explicit (`--export=NAME,...`) everywhere, and the same on every site.
pub const EXPORTED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "TZ",
    "TMPDIR",
    "TERM",
    "NO_COLOR",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CUDA_HOME",
    "CUDA_PATH",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "NIX_PATH",
    "NIX_SSL_CERT_FILE",
    "SSL_CERT_FILE",
];

/// The `--export=` list of a job: [`EXPORTED`] and every `REPRO_*` variable set here, and
/// the names the user adds (`[slurm] export`, `--slurm-export`), sorted, each once.
pub fn export_list(extra: &[String]) -> Vec<String> {
    let mut names: std::collections::BTreeSet<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| EXPORTED.contains(&k.as_str()) || k.starts_with("REPRO_"))
        .collect();
    names.extend(extra.iter().cloned());
    names.into_iter().collect()
}

/// The option's name: `--qos=high` → `qos`.
pub fn option_name(opt: &str) -> &str {
    let body = opt.trim_start_matches('-');
    body.split_once('=').map_or(body, |(n, _)| n)
}

/// Site options as given (the config's first, then the command line's), each name once:
/// the last occurrence wins, in the order of those last occurrences. Names in `overridden`
/// (given by a dedicated flag) are left out.
pub fn merge_options(site: &[String], overridden: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for o in site {
        let name = option_name(o);
        if overridden.contains(&name) {
            continue;
        }
        out.retain(|p| option_name(p) != name);
        out.push(o.clone());
    }
    out
}

/// Where a bisection's steps run on the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Each step is a job of its own (also when repro itself runs inside an allocation).
    Jobs {
        /// The allocation repro runs in, whose variables are not passed on.
        inside: Option<String>,
    },
    /// Each step is a job step of the allocation repro runs in (`--slurm-steps`).
    Steps {
        /// That allocation's job id.
        job: String,
    },
}

impl Placement {
    /// What the plan line and the record say.
    pub fn describe(&self) -> String {
        match self {
            Placement::Jobs { inside: None } => "each step a Slurm job of its own".into(),
            Placement::Jobs { inside: Some(j) } => format!(
                "each step a Slurm job of its own (repro runs inside job {j}, whose SLURM_* variables are not passed on)"
            ),
            Placement::Steps { job } => format!("each step a job step of allocation {job}"),
        }
    }
}

/// The allocation this process runs in (`SLURM_JOB_ID`), if any.
pub fn enclosing_job() -> Option<String> {
    std::env::var("SLURM_JOB_ID")
        .ok()
        .or_else(|| std::env::var("SLURM_JOBID").ok())
        .filter(|j| !j.is_empty())
}

/// The variables of an enclosing job that srun and sbatch would read as orders for a new
/// job (`SLURM_JOB_ID` makes srun a step of it; `SLURM_NTASKS`, `SLURM_MEM_PER_NODE`,
/// `SLURM_EXPORT_ENV`, `SBATCH_*` change what is asked for). `SLURM_CONF` names the
/// cluster and is kept.
pub fn inherited_job_vars() -> Vec<std::ffi::OsString> {
    std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| {
            let k = k.to_string_lossy();
            k != "SLURM_CONF"
                && ["SLURM_", "SBATCH_", "SRUN_", "SALLOC_"]
                    .iter()
                    .any(|p| k.starts_with(p))
        })
        .collect()
}

/// The GPUs a GRES asks for: `gpu:1`, `gpu:h100:2`, `gpu` (one); `None` for GRES other than
/// GPUs or one that does not parse (Slurm judges those).
pub fn gpus_asked(gres: &str) -> Option<(Option<String>, u64)> {
    gres.split(',').find_map(|g| {
        let mut parts = g.trim().split(':');
        if parts.next()? != "gpu" {
            return None;
        }
        let rest: Vec<&str> = parts.collect();
        match rest.as_slice() {
            [] => Some((None, 1)),
            [n] if n.parse::<u64>().is_ok() => Some((None, n.parse().ok()?)),
            [t] => Some((Some(t.to_string()), 1)),
            [t, n] => Some((Some(t.to_string()), n.parse().ok()?)),
            _ => None,
        }
    })
}

/// The GPUs an allocation holds, from `scontrol show job`'s `TRES=` (`gres/gpu=2`,
/// `gres/gpu:h100=2`): the total and the count per type.
pub fn gpus_held(scontrol: &str) -> (u64, Vec<(String, u64)>) {
    let tres = scontrol
        .split_whitespace()
        .find_map(|w| {
            w.strip_prefix("TRES=")
                .or_else(|| w.strip_prefix("AllocTRES="))
        })
        .unwrap_or("");
    let mut total = 0;
    let mut typed = Vec::new();
    for item in tres.split(',') {
        let Some((k, v)) = item.split_once('=') else {
            continue;
        };
        let Ok(n) = v.parse::<u64>() else { continue };
        match k.strip_prefix("gres/gpu") {
            Some("") => total = n,
            Some(t) => {
                if let Some(t) = t.strip_prefix(':') {
                    typed.push((t.to_string(), n));
                }
            }
            None => {}
        }
    }
    if total == 0 && typed.is_empty() {
        // Without gres/gpu in AccountingStorageTRES the allocation's GPUs show only as
        // the request it was granted: `TresPerNode=gres:gpu:1` (`gres/gpu:h100:2` in
        // newer releases), per node or per job.
        for w in scontrol.split_whitespace() {
            let Some(v) = w
                .strip_prefix("TresPerNode=")
                .or_else(|| w.strip_prefix("TresPerJob="))
            else {
                continue;
            };
            for item in v.split(',') {
                let g = item
                    .strip_prefix("gres:")
                    .or_else(|| item.strip_prefix("gres/"))
                    .unwrap_or(item);
                if let Some((kind, n)) = gpus_asked(&g.replace('=', ":")) {
                    total += n;
                    if let Some(k) = kind {
                        typed.push((k, n));
                    }
                }
            }
        }
    }
    (total, typed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_options_keep_the_last_of_each_name_and_yield_to_dedicated_flags() {
        let site: Vec<String> = ["--qos=low", "--partition=a", "--mem=1G", "--qos=high"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            merge_options(&site, &["partition"]),
            ["--mem=1G", "--qos=high"]
        );
        assert_eq!(option_name("--exclusive"), "exclusive");
        let list = export_list(&["HF_HOME".into(), "PATH".into()]);
        assert!(list.contains(&"HF_HOME".to_string()) && list.contains(&"PATH".to_string()));
        assert_eq!(list.iter().filter(|n| *n == "PATH").count(), 1);
    }

    #[test]
    fn gres_asked_and_held_are_read_in_slurms_forms() {
        assert_eq!(gpus_asked("gpu:1"), Some((None, 1)));
        assert_eq!(gpus_asked("gpu"), Some((None, 1)));
        assert_eq!(gpus_asked("gpu:h100:2"), Some((Some("h100".into()), 2)));
        assert_eq!(gpus_asked("gpu:h100"), Some((Some("h100".into()), 1)));
        assert_eq!(gpus_asked("shard:2"), None);
        assert_eq!(gpus_asked("shard:1,gpu:3"), Some((None, 3)));
        let held =
            "JobId=9 JobName=x TRES=cpu=2,mem=1G,node=1,billing=2,gres/gpu=2,gres/gpu:h100=2 Foo=1";
        assert_eq!(gpus_held(held), (2, vec![("h100".into(), 2)]));
        assert_eq!(gpus_held("JobId=9 TRES=cpu=1,mem=1G,node=1"), (0, vec![]));
        let granted = "JobId=9 TRES=cpu=1,node=1,billing=1 TresPerNode=gres:gpu:1";
        assert_eq!(gpus_held(granted), (1, vec![]));
        let typed = "JobId=9 TRES=cpu=1 TresPerNode=gres/gpu:h100=2";
        assert_eq!(gpus_held(typed), (2, vec![("h100".into(), 2)]));
    }

    #[test]
    fn slurm_time_limits_parse_in_every_form_slurm_takes() {
        let p = |s: &str| parse_time(s).unwrap().map(|d| d.as_secs());
        assert_eq!(p("30"), Some(1800));
        assert_eq!(p("1:30"), Some(90));
        assert_eq!(p("1:00:00"), Some(3600));
        assert_eq!(p("2-3"), Some(2 * 86400 + 3 * 3600));
        assert_eq!(p("2-3:04"), Some(2 * 86400 + 3 * 3600 + 240));
        assert_eq!(p("0-0:0:5"), Some(5));
        assert_eq!(p("UNLIMITED"), None);
        assert_eq!(p("infinite"), None);
        for bad in [
            "",
            "1h",
            "1:2:3:4",
            "-5",
            "1-",
            "1-2:3:4:5",
            "x:10",
            "99999999999",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_derived_limit_covers_every_timeout_of_a_step_in_whole_minutes() {
        let mut plan = Plan {
            recipe: None,
            paths: Vec::new(),
            offline: false,
            question: Question::Build,
            nix: false,
            timeout: Duration::from_secs(15),
            find_fixed: false,
            jobs: 1,
            keep_going: false,
            devices: vec![0],
            pins: Default::default(),
            python: None,
        };
        assert_eq!(derived_limit(&plan), Duration::from_secs(120));
        assert_eq!(minutes_arg(derived_limit(&plan)), "--time=2");
        plan.timeout = Duration::from_secs(600);
        assert_eq!(derived_limit(&plan), Duration::from_secs(660));
        plan.question = Question::Check;
        assert_eq!(derived_limit(&plan), Duration::from_secs(1260));
        assert_eq!(shortest_limit(&plan), Duration::from_secs(660));
        assert_eq!(minutes_arg(Duration::from_secs(61)), "--time=2");
    }
}
