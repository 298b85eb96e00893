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
/// the script, each benchmark process (a performance step measures its baseline in the
/// same job, so twice).
pub fn timeouts_per_step(plan: &Plan) -> u32 {
    match &plan.question {
        Question::Script(_) | Question::Build => 1,
        Question::Check => 2,
        Question::Bench(b) => {
            let processes = u32::try_from(b.max_attempts.max(1)).unwrap_or(u32::MAX);
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

#[cfg(test)]
mod tests {
    use super::*;

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
