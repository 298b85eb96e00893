//! What a job cost and how it ended: from `sacct` where the cluster keeps accounting
//! (it remembers jobs for good), else from `scontrol show job` (which forgets a job
//! `MinJobAge` seconds after it ends, so repro asks as soon as the job is over).

use std::time::{Duration, Instant};

use crate::foundation::process::Cmd;
use crate::foundation::records::JobUsage;

/// Slurm's states of a job that has not ended yet.
pub const UNFINISHED: &[&str] = &[
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "STAGE_OUT",
    "RESIZING",
    "REQUEUED",
    "SUSPENDED",
];

/// A job as accounting or the controller reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct JobFacts {
    /// Its state, first word (`CANCELLED by 0` → `CANCELLED`).
    pub state: String,
    /// The usage, when the times are known.
    pub usage: Option<JobUsage>,
}

impl JobFacts {
    /// Whether the job has ended and its times are known.
    pub fn ended(&self) -> bool {
        self.usage.is_some() && !UNFINISHED.contains(&self.state.as_str())
    }
}

/// Asks `sacct`, then `scontrol`, about `job`, each command given what is left until
/// `deadline` (at least a second); `None` when neither knows it.
pub fn facts(job: &str, deadline: Instant) -> Option<JobFacts> {
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1))
    };
    prefer_ended(sacct(job, left()), || scontrol(job, left()))
}

/// Accounting's answer where it says the job ended, else the controller's where that
/// does, else the controller's (the more current) where it knows the job, else
/// accounting's. Accounting hears of a job from the controller, a few seconds late on a
/// busy cluster: a job the controller saw end, or requeue, can still be RUNNING there, or
/// not known at all; the controller forgets a job `MinJobAge` seconds after it ends.
pub fn prefer_ended(
    accounting: Option<JobFacts>,
    controller: impl FnOnce() -> Option<JobFacts>,
) -> Option<JobFacts> {
    if accounting.as_ref().is_some_and(JobFacts::ended) {
        return accounting;
    }
    controller().or(accounting)
}

fn sacct(job: &str, within: Duration) -> Option<JobFacts> {
    let out = Cmd::new("sacct")
        .args(["-n", "-P", "-X", "-j", job])
        .args(["-o", "JobID,State,Submit,Start,End,AllocTRES"])
        .timeout(within)
        .run()
        .ok()?;
    parse_sacct(job, &out.stdout_str())
}

fn scontrol(job: &str, within: Duration) -> Option<JobFacts> {
    let out = Cmd::new("scontrol")
        .args(["-o", "show", "job", job])
        .timeout(within)
        .run()
        .ok()?;
    parse_scontrol(job, &out.stdout_str())
}

/// Reads `sacct -n -P -X -o JobID,State,Submit,Start,End,AllocTRES`.
pub fn parse_sacct(job: &str, text: &str) -> Option<JobFacts> {
    let line = text.lines().find(|l| l.split('|').next() == Some(job))?;
    let f: Vec<&str> = line.split('|').collect();
    if f.len() < 6 {
        return None;
    }
    let state = f[1].split_whitespace().next().unwrap_or("").to_string();
    let gpus = super::site::gpus_held(&format!("TRES={}", f[5])).0;
    Some(JobFacts {
        usage: usage(job, &state, "sacct", f[2], f[3], f[4], gpus),
        state,
    })
}

/// Reads `scontrol -o show job`.
pub fn parse_scontrol(job: &str, text: &str) -> Option<JobFacts> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&format!("JobId={job}")))?;
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k).and_then(|w| w.strip_prefix('=')))
            .unwrap_or("")
    };
    let state = field("JobState").to_string();
    let gpus = super::site::gpus_held(line).0;
    Some(JobFacts {
        usage: usage(
            job,
            &state,
            "scontrol",
            field("SubmitTime"),
            field("StartTime"),
            field("EndTime"),
            gpus,
        ),
        state,
    })
}

fn usage(
    job: &str,
    state: &str,
    source: &str,
    submit: &str,
    start: &str,
    end: &str,
    gpus: u64,
) -> Option<JobUsage> {
    if UNFINISHED.contains(&state) {
        return None;
    }
    let (submit, end) = (seconds(submit)?, seconds(end)?);
    // A job cancelled while pending never started: it waited until it ended.
    let start = seconds(start).unwrap_or(end).clamp(submit, end);
    let run_s = (end - start) as f64;
    Some(JobUsage {
        id: job.to_string(),
        state: state.to_string(),
        source: source.to_string(),
        queue_wait_s: (start - submit) as f64,
        run_s,
        gpus,
        gpu_hours: gpus as f64 * run_s / 3600.0,
    })
}

/// Seconds since the epoch of Slurm's `YYYY-MM-DDTHH:MM:SS` (the cluster's local time:
/// only differences are used); `None` for `Unknown`, `None` or anything else.
pub fn seconds(t: &str) -> Option<i64> {
    let (date, time) = t.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let c: Vec<i64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, m, day], [hh, mm, ss]) = (d.as_slice(), c.as_slice()) else {
        return None;
    };
    if !(1..=12).contains(m) || !(1..=31).contains(day) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if *m <= 2 { y - 1 } else { *y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_times_count_seconds_across_days_and_years() {
        assert_eq!(seconds("1970-01-01T00:00:00"), Some(0));
        assert_eq!(seconds("2000-03-01T00:00:01"), Some(951_868_801));
        let a = seconds("2026-12-31T23:59:30").unwrap();
        let b = seconds("2027-01-01T00:00:15").unwrap();
        assert_eq!(b - a, 45);
        assert_eq!(seconds("Unknown"), None);
        assert_eq!(seconds("None"), None);
        assert_eq!(seconds("2026-13-01T00:00:00"), None);
    }

    #[test]
    fn usage_is_read_from_sacct_and_from_scontrol() {
        let sacct = "41|COMPLETED|2026-11-24T22:53:49|2026-11-24T22:53:52|2026-11-24T22:55:52|billing=1,cpu=1,gres/gpu=2,mem=64M,node=1\n";
        let f = parse_sacct("41", sacct).unwrap();
        assert_eq!(f.state, "COMPLETED");
        let u = f.usage.unwrap();
        assert_eq!((u.queue_wait_s, u.run_s, u.gpus), (3.0, 120.0, 2));
        assert!((u.gpu_hours - 2.0 * 120.0 / 3600.0).abs() < 1e-12);
        assert_eq!(u.source, "sacct");
        let cancelled = "7|CANCELLED by 0|2026-11-24T10:00:00|None|2026-11-24T10:00:09|cpu=1\n";
        let f = parse_sacct("7", cancelled).unwrap();
        assert_eq!(f.state, "CANCELLED");
        let u = f.usage.unwrap();
        assert_eq!(
            (u.queue_wait_s, u.run_s, u.gpus, u.gpu_hours),
            (9.0, 0.0, 0, 0.0)
        );
        assert_eq!(parse_sacct("8", sacct), None);
        let shown = "JobId=12 JobName=x JobState=TIMEOUT Reason=TimeLimit SubmitTime=2026-11-24T10:00:00 EligibleTime=2026-11-24T10:00:00 StartTime=2026-11-24T10:00:01 EndTime=2026-11-24T10:02:01 TRES=cpu=1,node=1 TresPerNode=gres:gpu:fake:1\n";
        let f = parse_scontrol("12", shown).unwrap();
        assert_eq!(f.state, "TIMEOUT");
        let u = f.usage.unwrap();
        assert_eq!((u.queue_wait_s, u.run_s, u.gpus), (1.0, 120.0, 1));
        assert_eq!(u.source, "scontrol");
        let running = shown.replace("TIMEOUT", "RUNNING");
        assert_eq!(parse_scontrol("12", &running).unwrap().usage, None);
        assert_eq!(parse_scontrol("1", shown), None);
    }

    #[test]
    fn an_ended_job_is_taken_from_whichever_source_has_seen_it_end() {
        let ended = |source: &str| JobFacts {
            state: "COMPLETED".into(),
            usage: Some(JobUsage {
                id: "5".into(),
                state: "COMPLETED".into(),
                source: source.into(),
                queue_wait_s: 1.0,
                run_s: 2.0,
                gpus: 1,
                gpu_hours: 2.0 / 3600.0,
            }),
        };
        let running = JobFacts {
            state: "RUNNING".into(),
            usage: None,
        };
        let source = |f: Option<JobFacts>| f.and_then(|f| f.usage).map(|u| u.source);
        // Accounting has seen it end: the controller is not asked.
        let asked = std::cell::Cell::new(false);
        let f = prefer_ended(Some(ended("sacct")), || {
            asked.set(true);
            Some(ended("scontrol"))
        });
        assert_eq!((source(f), asked.get()), (Some("sacct".into()), false));
        // Accounting lags (still running there, or not known yet): the controller's end.
        let f = prefer_ended(Some(running.clone()), || Some(ended("scontrol")));
        assert_eq!(source(f), Some("scontrol".into()));
        let f = prefer_ended(None, || Some(ended("scontrol")));
        assert_eq!(source(f), Some("scontrol".into()));
        // Neither has seen it end: the controller's state (more current: a job requeued
        // is PENDING there and may still be RUNNING in accounting), else accounting's
        // (the controller forgot the job).
        let pending = JobFacts {
            state: "PENDING".into(),
            usage: None,
        };
        let f = prefer_ended(Some(running.clone()), || Some(pending.clone())).unwrap();
        assert_eq!(f.state, "PENDING");
        let f = prefer_ended(Some(running.clone()), || None).unwrap();
        assert_eq!(f.state, "RUNNING");
        let f = prefer_ended(None, || Some(running.clone())).unwrap();
        assert!(!f.ended());
        assert_eq!(prefer_ended(None, || None), None);
    }
}
