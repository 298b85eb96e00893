//! Running a bisection: evaluate the ends, then ask the pure search which commit to test
//! next until it is done, handing each step to an [`Executor`].
//!
//! The driver here decides what to evaluate and what the answers mean; it does not know
//! where a step runs (this machine, a GPU of several, a cluster job). Every evaluation goes
//! through the store: builds by build key, measurements as result records, and each step's
//! answer under a step key (the question, the commit's tree, the baseline), so re-running
//! or widening a bisection, or resuming one that was interrupted, re-evaluates nothing it
//! already knows, and commits whose inputs did not change share work.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{Oid, Repository};

use super::decide::{self, Decision};
use super::executor::{Executor, StepRequest};
use super::search::{Answer, Next, Outcome, Search};
use crate::foundation::git::{self, CommitFiles};
use crate::foundation::store::Store;

pub use super::plan::{
    BenchQuestion, BisectError, Event, Plan, Question, Recheck, RecipeSource, SAMPLES, STEPS, Step,
    StepError,
};

/// The whole result.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    /// The search's outcome.
    pub outcome: Outcome,
    /// The commits in the range, oldest first.
    pub commits: usize,
    /// Evaluated steps, in history order.
    pub steps: Vec<Step>,
    /// Evaluations that were not answered from the store.
    pub evaluated: usize,
    /// Bench: the culprit re-checked against its parent.
    pub recheck: Option<Recheck>,
}

/// Checks `--paths` against both ends before any step runs: a pathspec that cannot be
/// parsed, one that selects no file at an end, or an element that matches nothing at
/// either end (a typo) is an error naming it.
fn check_paths(repo: &Repository, paths: &[String], commits: &[Oid]) -> Result<(), BisectError> {
    let hint = "pathspecs follow git's rules, relative to the repository root: `kernels/`, `src/*.cu`, `:(exclude)data/`".to_string();
    let bad = |message: String| BisectError::Input {
        message,
        hint: hint.clone(),
    };
    let spec =
        git2::Pathspec::new(paths.iter()).map_err(|e| bad(format!("--paths: {}", e.message())))?;
    let ends = [commits[0], *commits.last().expect("two ends")];
    let mut used = vec![false; paths.len()];
    for end in ends {
        let files = CommitFiles::new(repo, end).map_err(|e| BisectError::Fatal {
            commit: git::short(end),
            source: e.into(),
        })?;
        let entries = files.all_entries();
        if !entries
            .iter()
            .any(|e| spec.matches_path(Path::new(&e.path), git2::PathspecFlags::DEFAULT))
        {
            return Err(bad(format!(
                "--paths {} matches no file at commit {}",
                paths.join(" "),
                git::short(end)
            )));
        }
        for (i, p) in paths.iter().enumerate() {
            if used[i] || p.starts_with(":(exclude)") || p.starts_with(":!") || p.starts_with(":^")
            {
                used[i] = true;
                continue;
            }
            let one = git2::Pathspec::new([p.as_str()])
                .map_err(|e| bad(format!("--paths `{p}`: {}", e.message())))?;
            used[i] = entries
                .iter()
                .any(|e| one.matches_path(Path::new(&e.path), git2::PathspecFlags::DEFAULT));
        }
    }
    if let Some(i) = used.iter().position(|u| !u) {
        return Err(bad(format!(
            "--paths `{}` matches no file at either end ({} or {})",
            paths[i],
            git::short(ends[0]),
            git::short(ends[1])
        )));
    }
    Ok(())
}

/// Chooses up to `k` commits strictly inside the bracket that split it evenly, skipping
/// commits already answered.
fn multisection_points(search: &Search, k: usize) -> Vec<usize> {
    let (lo, hi) = search.bracket();
    let free: Vec<usize> = (lo + 1..hi)
        .filter(|i| search.answer(*i).is_none())
        .collect();
    if free.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<usize> = (1..=k)
        .map(|j| {
            let target = lo + (hi - lo) * j / (k + 1);
            *free
                .iter()
                .min_by_key(|i| i.abs_diff(target))
                .expect("non-empty")
        })
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

/// What every executor's bisection checks first: stale scratch space is cleaned, and
/// `--paths` must select files at both ends.
pub fn prepare(
    repo: &Repository,
    store: &Store,
    plan: &Plan,
    commits: &[Oid],
) -> Result<(), BisectError> {
    store.clean_stale_scratch();
    if !plan.paths.is_empty() {
        check_paths(repo, &plan.paths, commits)?;
    }
    Ok(())
}

/// Evaluates several steps at once, one per slot, and returns their results in order.
fn run_round(
    executor: &dyn Executor,
    requests: &[StepRequest],
    events: &(dyn Fn(Event<'_>) + Sync),
) -> Vec<Result<Step, BisectError>> {
    if requests.len() == 1 {
        return vec![executor.run(&requests[0], events)];
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = requests
            .iter()
            .map(|req| scope.spawn(move || executor.run(req, events)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BisectError::Inconsistent("a worker panicked".into())))
            })
            .collect()
    })
}

/// The search itself, over any executor: the ends (at once when the executor has two
/// workers), then midpoints (several at once: a multisection), then for a performance
/// bisection the culprit re-checked against its parent on one device.
pub fn drive(
    executor: &dyn Executor,
    plan: &Plan,
    commits: &[Oid],
    events: &(dyn Fn(Event<'_>) + Sync),
) -> Result<Report, BisectError> {
    let n = commits.len();
    if n < 2 {
        return Err(BisectError::Inconsistent(format!(
            "bisection needs at least 2 commits (a good and a bad end), got {n}"
        )));
    }
    // Bench steps are judged against the good end, measured where each step runs.
    let bench = matches!(plan.question, Question::Bench(_));
    let mut d = Drive {
        executor,
        plan,
        commits,
        events,
        steps: BTreeMap::new(),
        evaluated: 0,
        good_end: bench.then_some((0, commits[0])),
    };
    d.ends()?;
    let mut search = Search::new(n).map_err(|e| BisectError::Inconsistent(e.to_string()))?;
    let width = executor.width().max(1);
    loop {
        match search.next() {
            Next::Done(outcome) => {
                let recheck = match (&outcome, &plan.question) {
                    (Outcome::FirstBad { index }, Question::Bench(b)) => {
                        recheck(executor, b, commits, *index, &d.steps, events)?
                    }
                    _ => None,
                };
                return Ok(Report {
                    outcome,
                    commits: n,
                    steps: d.steps.into_values().collect(),
                    evaluated: d.evaluated,
                    recheck,
                });
            }
            Next::Test(_) if width > 1 => d.multisection(&mut search, width)?,
            Next::Test(i) => d.one_step(&mut search, i)?,
        }
    }
}

/// The state of one search: what it runs on, and the steps taken so far.
struct Drive<'a> {
    executor: &'a dyn Executor,
    plan: &'a Plan,
    commits: &'a [Oid],
    events: &'a (dyn Fn(Event<'_>) + Sync),
    steps: BTreeMap<usize, Step>,
    evaluated: usize,
    /// The good end, the baseline of bench steps.
    good_end: Option<(usize, Oid)>,
}

impl Drive<'_> {
    fn progress(&self, m: &str) {
        (self.events)(Event::Status(m));
    }

    /// In search terms the older end answers Good and the newer Bad; --find fixed flips the
    /// raw answers so that the first "bad" commit is the first fixed one.
    fn flip(&self, a: Answer) -> Answer {
        match (self.plan.find_fixed, a) {
            (true, Answer::Good) => Answer::Bad,
            (true, Answer::Bad) => Answer::Good,
            (_, a) => a,
        }
    }

    fn keep(&mut self, i: usize, s: Step) {
        self.evaluated += usize::from(!s.cached);
        self.steps.insert(i, s);
    }

    /// Records a step of the search proper.
    fn record(&mut self, search: &mut Search, i: usize, s: Step) -> Result<(), BisectError> {
        search
            .record(i, self.flip(s.verdict))
            .map_err(|e| BisectError::Inconsistent(e.to_string()))?;
        self.keep(i, s);
        Ok(())
    }

    /// The ends first: the good end must be good and the bad end bad, or the search means
    /// nothing. With two workers both are evaluated at once (the bad end's worker measures
    /// its own baseline of the good end).
    fn ends(&mut self) -> Result<(), BisectError> {
        let (executor, commits, n) = (self.executor, self.commits, self.commits.len());
        let (older_state, newer_state) = if self.plan.find_fixed {
            ("bad", "good")
        } else {
            ("good", "bad")
        };
        let ends = [
            (0, Answer::Good, older_state, None),
            (n - 1, Answer::Bad, newer_state, self.good_end),
        ];
        if executor.width().max(1) >= 2 {
            self.progress(&format!(
                "checking the {older_state} end {} and the {newer_state} end {}",
                executor.label(commits[0]),
                executor.label(commits[n - 1])
            ));
            let requests: Vec<StepRequest> = ends
                .iter()
                .enumerate()
                .map(|(slot, &(i, _, _, baseline))| StepRequest {
                    index: i,
                    commit: commits[i],
                    slot,
                    baseline,
                })
                .collect();
            let mut results = run_round(executor, &requests, self.events).into_iter();
            // The older end's answer comes first: a bad end measured against a broken good
            // end fails for the good end's reason.
            for (i, expected, which, _) in ends {
                let s = results.next().expect("one result per end")?;
                self.evaluated += usize::from(!s.cached);
                self.check_end(i, expected, which, &s)?;
                self.steps.insert(i, s);
            }
            return Ok(());
        }
        for (i, expected, which, baseline) in ends {
            self.progress(&format!(
                "checking the {which} end {}",
                executor.label(commits[i])
            ));
            let s = executor.run(
                &StepRequest {
                    index: i,
                    commit: commits[i],
                    slot: 0,
                    baseline,
                },
                self.events,
            )?;
            self.evaluated += usize::from(!s.cached);
            self.check_end(i, expected, which, &s)?;
            self.steps.insert(i, s);
        }
        Ok(())
    }

    fn check_end(
        &self,
        i: usize,
        expected: Answer,
        which: &'static str,
        s: &Step,
    ) -> Result<(), BisectError> {
        if self.flip(s.verdict) == expected {
            return Ok(());
        }
        let expected_word = if which == "good" { "good" } else { "bad" };
        Err(BisectError::BadEnd {
            which,
            commit: self.executor.label(self.commits[i]),
            expected: expected_word,
            detail: format!(
                "it is {}{}",
                s.verdict,
                s.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            ),
        })
    }

    /// Multisection: several commits of the bracket at once, one per worker.
    fn multisection(&mut self, search: &mut Search, width: usize) -> Result<(), BisectError> {
        let (executor, commits) = (self.executor, self.commits);
        let (lo, hi) = search.bracket();
        let points = multisection_points(search, width);
        self.progress(&format!(
            "testing {} ({} commits left, about {} rounds)",
            points
                .iter()
                .map(|p| executor.label(commits[*p]))
                .collect::<Vec<_>>()
                .join(", "),
            hi - lo - 1,
            search.steps_left().div_ceil(width.ilog2().max(1) as usize)
        ));
        let requests: Vec<StepRequest> = points
            .iter()
            .enumerate()
            .map(|(slot, &p)| StepRequest {
                index: p,
                commit: commits[p],
                slot,
                baseline: self.good_end,
            })
            .collect();
        let results = run_round(executor, &requests, self.events);
        for (req, r) in requests.iter().zip(results) {
            let s = keep_going(self.plan, executor, req, r)?;
            self.record(search, s.index, s)?;
        }
        Ok(())
    }

    /// One midpoint. While it is evaluated, the executor may prepare both possible next
    /// midpoints (builds, while a GPU measures).
    fn one_step(&mut self, search: &mut Search, i: usize) -> Result<(), BisectError> {
        let (executor, commits, events) = (self.executor, self.commits, self.events);
        let (lo, hi) = search.bracket();
        self.progress(&format!(
            "testing {} ({} commits left, about {} steps)",
            executor.label(commits[i]),
            hi - lo - 1,
            search.steps_left()
        ));
        let req = StepRequest {
            index: i,
            commit: commits[i],
            slot: 0,
            baseline: self.good_end,
        };
        let s = std::thread::scope(|scope| {
            let (if_good, if_bad) = search.speculate();
            for j in [if_good, if_bad].into_iter().flatten() {
                let oid = commits[j];
                scope.spawn(move || {
                    crate::foundation::process::lower_this_threads_priority();
                    executor.prefetch(oid)
                });
            }
            executor.run(&req, events)
        });
        let s = keep_going(self.plan, executor, &req, s)?;
        self.record(search, i, s)
    }
}

/// With `--keep-going`, a step that failed for reasons outside the commit becomes a skip.
fn keep_going(
    plan: &Plan,
    executor: &dyn Executor,
    req: &StepRequest,
    result: Result<Step, BisectError>,
) -> Result<Step, BisectError> {
    match result {
        Err(BisectError::Fatal { commit, source }) if plan.keep_going => Ok(Step {
            verdict: Answer::Skip,
            detail: Some(format!(
                "cannot evaluate {commit}: {}",
                crate::foundation::error::chain_text(&source)
            )),
            ..Step::new(req.index, req.commit, executor.subject(req.commit))
        }),
        other => other,
    }
}

/// The culprit compared with its parent directly, not only with the good end: a slow
/// drift over many commits would otherwise be blamed on one of them. Samples taken at one
/// place are compared as they are (place by place); otherwise the executor measures the pair
/// on one device.
fn recheck(
    executor: &dyn Executor,
    b: &BenchQuestion,
    commits: &[Oid],
    index: usize,
    steps: &BTreeMap<usize, Step>,
    events: &(dyn Fn(Event<'_>) + Sync),
) -> Result<Option<Recheck>, BisectError> {
    let (Some(parent), Some(culprit)) = (steps.get(&(index - 1)), steps.get(&index)) else {
        return Ok(None);
    };
    let verdict = |ratio: f64, ci: (f64, f64), p: f64, confirmed: bool| Recheck {
        culprit: commits[index].to_string(),
        parent: commits[index - 1].to_string(),
        ratio,
        ratio_ci: [ci.0, ci.1],
        p,
        confirmed,
    };
    // Samples of the same place on both sides: each place decides, and the culprit is
    // confirmed when every one finds it worse.
    let judged: Vec<decide::Judgement> = parent
        .by_place
        .iter()
        .filter_map(|(place, p)| Some((p, culprit.by_place.get(place)?)))
        .filter(|(p, c)| p.len() >= 2 && c.len() >= 2)
        .filter_map(|(p, c)| decide::decide(p, c, b.threshold, b.direction, 0.01, 11))
        .collect();
    // A step stops measuring once its own verdict is certain (a few processes, for a clear
    // change), which may be too few for the pair to show its difference significantly:
    // then the pair is measured anew (the samples already stored are used again), unless
    // every place's judgement is already bad.
    let enough = parent
        .by_place
        .iter()
        .filter_map(|(place, p)| Some((p, culprit.by_place.get(place)?)))
        .all(|(p, c)| p.len().min(c.len()) >= b.first_attempts);
    let conclusive = enough || judged.iter().all(|j| j.decision == Decision::Bad);
    if !judged.is_empty() && conclusive {
        let k = judged.len() as f64;
        let ratio = (judged.iter().map(|j| j.ratio.ln()).sum::<f64>() / k).exp();
        let lo = judged
            .iter()
            .map(|j| j.ratio_ci.0)
            .fold(f64::INFINITY, f64::min);
        let hi = judged
            .iter()
            .map(|j| j.ratio_ci.1)
            .fold(f64::NEG_INFINITY, f64::max);
        let p = judged.iter().map(|j| j.p).fold(0.0, f64::max);
        let confirmed = judged.iter().all(|j| j.decision == Decision::Bad);
        return Ok(Some(verdict(ratio, (lo, hi), p, confirmed)));
    }
    events(Event::Status(&format!(
        "re-checking {} against its parent {} on one device",
        executor.label(commits[index]),
        executor.label(commits[index - 1])
    )));
    let quiet = |e: Event<'_>| {
        if let Event::Status(m) = e {
            events(Event::Status(m));
        }
    };
    let s = executor.run(
        &StepRequest {
            index,
            commit: commits[index],
            slot: 0,
            baseline: Some((index - 1, commits[index - 1])),
        },
        &quiet,
    )?;
    Ok(match (s.ratio, s.p) {
        (Some((r, lo, hi)), Some(p)) => Some(verdict(r, (lo, hi), p, s.verdict == Answer::Bad)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    //! The driver over a fake executor: no git, no store, no processes.
    use super::super::decide::Direction;
    use super::*;
    use crate::foundation::records::Settings;
    use std::sync::Mutex;
    use std::time::Duration;

    type Answering = Box<dyn Fn(&StepRequest) -> Result<&'static str, BisectError> + Sync>;
    type Placing = Box<dyn Fn(&StepRequest) -> Option<String> + Sync>;

    /// Answers each commit by its index through `answer`, remembering every request.
    struct Fake {
        width: usize,
        answer: Answering,
        placement: Placing,
        seen: Mutex<Vec<StepRequest>>,
    }

    impl Fake {
        fn new(
            width: usize,
            answer: impl Fn(&StepRequest) -> Result<&'static str, BisectError> + Sync + 'static,
        ) -> Self {
            Fake {
                width,
                answer: Box::new(answer),
                placement: Box::new(|_| None),
                seen: Mutex::new(Vec::new()),
            }
        }
        fn seen(&self) -> Vec<StepRequest> {
            self.seen.lock().unwrap().clone()
        }
    }

    impl Executor for Fake {
        fn width(&self) -> usize {
            self.width
        }
        fn run(
            &self,
            req: &StepRequest,
            _events: &(dyn Fn(Event<'_>) + Sync),
        ) -> Result<Step, BisectError> {
            self.seen.lock().unwrap().push(*req);
            let verdict = (self.answer)(req)?;
            let mut s = Step::new(req.index, req.commit, format!("commit {}", req.index));
            s.verdict = answer_of(verdict);
            s.placement = (self.placement)(req);
            if matches!(verdict, "good" | "bad") {
                s.samples = vec![1.0, 1.0, 1.0];
                if let Some(p) = &s.placement {
                    s.by_place.insert(p.clone(), s.samples.clone());
                }
                s.ratio = Some((1.0, 1.0, 1.0));
                s.p = Some(0.5);
            }
            Ok(s)
        }
        fn subject(&self, _commit: Oid) -> String {
            "a subject".into()
        }
    }

    /// The answer a test's word stands for.
    fn answer_of(word: &str) -> Answer {
        match word {
            "good" => Answer::Good,
            "bad" => Answer::Bad,
            _ => Answer::Skip,
        }
    }

    fn commits(n: usize) -> Vec<Oid> {
        (0..n)
            .map(|i| {
                let mut b = [0u8; 20];
                b[..8].copy_from_slice(&(i as u64 + 1).to_be_bytes());
                Oid::from_bytes(&b).unwrap()
            })
            .collect()
    }

    fn plan(question: Question) -> Plan {
        Plan {
            recipe: None,
            paths: Vec::new(),
            offline: false,
            question,
            nix: false,
            timeout: Duration::from_secs(1),
            find_fixed: false,
            jobs: 1,
            keep_going: false,
            devices: vec![0],
            pins: Default::default(),
            python: None,
        }
    }

    fn script() -> Plan {
        plan(Question::Script("true".into()))
    }

    fn bench() -> Plan {
        plan(Question::Bench(BenchQuestion {
            threshold: 0.05,
            direction: Direction::Slower,
            command: None,
            params: Vec::new(),
            settings: Settings {
                mode: crate::foundation::records::Mode::Cold,
                max_noise: 0.005,
                min_samples: 10,
                max_samples: 100,
                min_time_ms: 1.0,
                budget_ms: 10.0,
                warmup_ms: 1.0,
                device: 0,
            },
            first_attempts: 3,
            max_attempts: 6,
        }))
    }

    fn first_bad(r: &Report) -> usize {
        match r.outcome {
            Outcome::FirstBad { index } => index,
            ref o => panic!("expected a first bad commit, got {o:?}"),
        }
    }

    #[test]
    fn finds_the_first_bad_commit_at_every_width_evaluating_each_commit_once() {
        for width in [1, 2, 3, 4, 8] {
            for culprit in 1..40 {
                let fake = Fake::new(width, move |r| {
                    Ok(if r.index >= culprit { "bad" } else { "good" })
                });
                let r = drive(&fake, &script(), &commits(40), &|_| {}).unwrap();
                assert_eq!(first_bad(&r), culprit, "width {width}");
                let seen = fake.seen();
                let mut idx: Vec<usize> = seen.iter().map(|r| r.index).collect();
                idx.sort_unstable();
                idx.dedup();
                assert_eq!(
                    idx.len(),
                    seen.len(),
                    "a commit was evaluated twice: {seen:?}"
                );
                assert_eq!(r.evaluated, seen.len());
                // Never more workers at once than the executor has, on distinct slots.
                assert!(seen.iter().all(|r| r.slot < width));
            }
        }
    }

    #[test]
    fn two_workers_evaluate_both_ends_in_one_round() {
        let mut fake = Fake::new(2, |r| Ok(if r.index >= 5 { "bad" } else { "good" }));
        fake.placement = Box::new(|_| Some("GPU 0".into()));
        drive(&fake, &bench(), &commits(10), &|_| {}).unwrap();
        let mut seen = fake.seen();
        seen[..2].sort_by_key(|r| r.index);
        assert_eq!((seen[0].index, seen[0].slot), (0, 0));
        assert_eq!((seen[1].index, seen[1].slot), (9, 1));
        let c = commits(10);
        // The good end is the baseline of every other bench step, measured where it runs.
        assert_eq!(seen[0].baseline, None);
        assert!(seen[1..].iter().all(|r| r.baseline == Some((0, c[0]))));
    }

    #[test]
    fn a_flaky_commit_is_an_inconsistency_not_a_verdict() {
        // Commit 7 is bad, but 8 after it answers good: the property is not monotone.
        let fake = Fake::new(1, |r| {
            Ok(match r.index {
                0..=6 => "good",
                8 => "good",
                _ => "bad",
            })
        });
        let c = commits(12);
        // Steer the search through both: whatever order it takes, it must either never
        // meet the contradiction or report it.
        match drive(&fake, &script(), &c, &|_| {}) {
            Err(BisectError::Inconsistent(m)) => assert!(m.contains("not monotone"), "{m}"),
            Ok(r) => {
                let seen: Vec<usize> = fake.seen().iter().map(|r| r.index).collect();
                assert!(
                    !(seen.contains(&7) && seen.contains(&8)),
                    "met both and said nothing: {r:?}"
                );
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }

    #[test]
    fn a_run_of_untestable_commits_gives_the_range() {
        let fake = Fake::new(1, |r| {
            Ok(match r.index {
                0..=3 => "good",
                4..=7 => "skip",
                _ => "bad",
            })
        });
        let r = drive(&fake, &script(), &commits(12), &|_| {}).unwrap();
        assert_eq!(r.outcome, Outcome::Untestable { first: 4, last: 8 });
    }

    #[test]
    fn skips_at_the_ends_are_named() {
        for (end, which) in [(0usize, "good"), (9, "bad")] {
            for width in [1, 2] {
                let fake = Fake::new(width, move |r| {
                    Ok(if r.index == end {
                        "skip"
                    } else if r.index >= 5 {
                        "bad"
                    } else {
                        "good"
                    })
                });
                match drive(&fake, &script(), &commits(10), &|_| {}) {
                    Err(BisectError::BadEnd { which: w, .. }) => assert_eq!(w, which),
                    other => panic!("expected a bad {which} end, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn find_fixed_flips_the_answers() {
        let mut p = script();
        p.find_fixed = true;
        for width in [1, 3] {
            // Broken (bad) up to 5, fixed (good) from 6 on.
            let fake = Fake::new(width, |r| Ok(if r.index >= 6 { "good" } else { "bad" }));
            let r = drive(&fake, &p, &commits(20), &|_| {}).unwrap();
            assert_eq!(first_bad(&r), 6);
        }
        // Without --find fixed the same history has a good end that is bad.
        let fake = Fake::new(1, |r| Ok(if r.index >= 6 { "good" } else { "bad" }));
        assert!(matches!(
            drive(&fake, &script(), &commits(20), &|_| {}),
            Err(BisectError::BadEnd { which: "good", .. })
        ));
    }

    #[test]
    fn keep_going_turns_a_fatal_step_into_a_skip() {
        let answer = |r: &StepRequest| {
            if r.index == 10 {
                return Err(BisectError::Fatal {
                    commit: "x".into(),
                    source: StepError::Io(std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        "the disk is full",
                    )),
                });
            }
            Ok(if r.index >= 13 { "bad" } else { "good" })
        };
        let fake = Fake::new(1, answer);
        assert!(matches!(
            drive(&fake, &script(), &commits(21), &|_| {}),
            Err(BisectError::Fatal { .. })
        ));
        let mut p = script();
        p.keep_going = true;
        for width in [3, 1] {
            let fake = Fake::new(width, answer);
            let r = drive(&fake, &p, &commits(21), &|_| {}).unwrap();
            assert_eq!(first_bad(&r), 13, "width {width}");
        }
        let fake = Fake::new(1, answer);
        let r = drive(&fake, &p, &commits(21), &|_| {}).unwrap();
        let s = r.steps.iter().find(|s| s.index == 10).unwrap();
        assert_eq!(s.verdict, Answer::Skip);
        assert_eq!(s.subject, "a subject");
        assert!(s.detail.as_deref().unwrap().contains("the disk is full"));
    }

    #[test]
    fn the_recheck_compares_samples_from_one_place_only() {
        // Same place: compared directly, no extra step.
        let mut fake = Fake::new(1, |r| Ok(if r.index >= 4 { "bad" } else { "good" }));
        fake.placement = Box::new(|_| Some("GPU 0".into()));
        let r = drive(&fake, &bench(), &commits(8), &|_| {}).unwrap();
        assert_eq!(first_bad(&r), 4);
        let n = fake.seen().len();
        assert_eq!(n, r.evaluated);
        // Different places (two GPUs, or cluster jobs): the pair is measured again on one.
        let mut fake = Fake::new(2, |r| Ok(if r.index >= 4 { "bad" } else { "good" }));
        fake.placement = Box::new(|r| Some(format!("GPU {}", r.slot)));
        let r = drive(&fake, &bench(), &commits(8), &|_| {}).unwrap();
        let c = commits(8);
        let last = *fake.seen().last().unwrap();
        let culprit = first_bad(&r);
        if r.steps
            .iter()
            .find(|s| s.index == culprit - 1)
            .unwrap()
            .placement
            != r.steps
                .iter()
                .find(|s| s.index == culprit)
                .unwrap()
                .placement
        {
            assert_eq!(last.index, culprit);
            assert_eq!(last.baseline, Some((culprit - 1, c[culprit - 1])));
            assert!(r.recheck.is_some());
        }
    }

    /// An executor over a step log shared between runs: logged commits answer from the
    /// log (cached, the oracle not asked), others are evaluated and logged; with
    /// `fail_after`, the run dies (a fatal error) at that many fresh evaluations, leaving
    /// the log half-written.
    struct Logged<'a> {
        log: &'a Mutex<BTreeMap<usize, &'static str>>,
        culprit: usize,
        fresh: Mutex<Vec<usize>>,
        fail_after: Option<usize>,
    }

    impl Executor for Logged<'_> {
        fn width(&self) -> usize {
            1
        }
        fn run(
            &self,
            req: &StepRequest,
            _events: &(dyn Fn(Event<'_>) + Sync),
        ) -> Result<Step, BisectError> {
            let mut s = Step::new(req.index, req.commit, format!("commit {}", req.index));
            if let Some(v) = self.log.lock().unwrap().get(&req.index) {
                s.verdict = answer_of(v);
                s.cached = true;
                return Ok(s);
            }
            let mut fresh = self.fresh.lock().unwrap();
            if self.fail_after == Some(fresh.len()) {
                return Err(BisectError::Fatal {
                    commit: format!("commit {}", req.index),
                    source: StepError::Io(std::io::Error::other("killed")),
                });
            }
            fresh.push(req.index);
            let v = if req.index >= self.culprit {
                "bad"
            } else {
                "good"
            };
            self.log.lock().unwrap().insert(req.index, v);
            s.verdict = answer_of(v);
            Ok(s)
        }
    }

    #[test]
    fn a_run_resumed_from_a_half_written_log_asks_nothing_twice() {
        let c = commits(64);
        for culprit in [1, 17, 40, 63] {
            // Uninterrupted, for reference.
            let log = Mutex::new(BTreeMap::new());
            let whole = Logged {
                log: &log,
                culprit,
                fresh: Mutex::new(Vec::new()),
                fail_after: None,
            };
            let reference = drive(&whole, &script(), &c, &|_| {}).unwrap();
            let all = whole.fresh.into_inner().unwrap();
            for cut in 0..all.len() {
                let log = Mutex::new(BTreeMap::new());
                let first = Logged {
                    log: &log,
                    culprit,
                    fresh: Mutex::new(Vec::new()),
                    fail_after: Some(cut),
                };
                assert!(matches!(
                    drive(&first, &script(), &c, &|_| {}),
                    Err(BisectError::Fatal { .. })
                ));
                let before = first.fresh.into_inner().unwrap();
                assert_eq!(before.len(), cut);
                let second = Logged {
                    log: &log,
                    culprit,
                    fresh: Mutex::new(Vec::new()),
                    fail_after: None,
                };
                let r = drive(&second, &script(), &c, &|_| {}).unwrap();
                let after = second.fresh.into_inner().unwrap();
                assert_eq!(
                    r.outcome, reference.outcome,
                    "culprit {culprit}, cut at {cut}"
                );
                assert_eq!(first_bad(&r), culprit);
                // Nothing the first run answered is evaluated again, and only what the
                // second run evaluated counts as evaluated.
                assert!(
                    after.iter().all(|i| !before.contains(i)),
                    "{before:?} then {after:?}"
                );
                assert_eq!(r.evaluated, after.len());
                assert_eq!(before.len() + after.len(), all.len());
                assert_eq!(
                    r.steps.iter().filter(|s| s.cached).count(),
                    r.steps.len() - after.len()
                );
            }
        }
    }
}
