//! The pure bisection search behind `repro bisect`: given `n` commits in history order
//! (index 0 known good, index `n - 1` known bad), it says which commit to evaluate next,
//! remembers every answer, and reports the first bad commit once the bracket closes.
//!
//! It knows nothing of git, builds or benchmarks: the caller maps commits to indices, runs
//! whatever evaluation it likes and feeds back [`Answer`]s. Answers are memoised, so a
//! resumed search never asks for a commit twice, and they are checked against each other:
//! a Good after a Bad means the property is not monotone and the bisection would be
//! meaningless, so [`Search::record`] refuses it instead of silently reporting a wrong
//! commit. Commits that cannot be evaluated answer [`Answer::Skip`]; the search steps
//! around them the way `git bisect skip` does and, when only skipped commits separate the
//! last good from the first bad, reports the whole range ([`Outcome::Untestable`]). No
//! sequence of calls panics: invalid ones return `Err` or are documented as ignored.

use std::collections::BTreeMap;

pub use crate::foundation::records::{Answer, Outcome};

/// What the caller should do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Evaluate this commit next.
    Test(usize),
    /// The search is over.
    Done(Outcome),
}

/// A bisection in progress over commits `0..n`: the memo of answers and the bracket they
/// imply.
#[derive(Clone, Debug)]
pub struct Search {
    /// Number of commits.
    n: usize,
    /// Every answer recorded, including the two ends.
    memo: BTreeMap<usize, Answer>,
    /// Largest index that answered Good. Cached rather than recomputed from `memo` because
    /// `record` keeps Goods below Bads, so it only ever grows.
    lo: usize,
    /// Smallest index that answered Bad; only ever shrinks, like `lo` only grows.
    hi: usize,
}

impl Search {
    /// A search over `n >= 2` commits; 0 is recorded Good and `n - 1` Bad (the caller has
    /// verified both ends). Errors for `n < 2`, where there is no pair of ends to bisect
    /// between.
    pub fn new(n: usize) -> Result<Search, SearchError> {
        if n < 2 {
            return Err(SearchError::TooFew { n });
        }
        let memo = BTreeMap::from([(0, Answer::Good), (n - 1, Answer::Bad)]);
        Ok(Search {
            n,
            memo,
            lo: 0,
            hi: n - 1,
        })
    }

    /// Records an answer for `index`. Recording the same answer again is a no-op, so a
    /// caller may replay a saved log freely. Errors, leaving the search unchanged, when
    /// `index` is out of range, when it already has a different answer, when index 0 is
    /// given anything but Good or `n - 1` anything but Bad, or when the answer contradicts
    /// monotonicity (a Good after a Bad), e.g. "commit 5 answered bad, but commit 7 after
    /// it answered good: the property is not monotone".
    pub fn record(&mut self, index: usize, answer: Answer) -> Result<(), SearchError> {
        if index >= self.n {
            return Err(SearchError::OutOfRange { index, n: self.n });
        }
        if let Some(&known) = self.memo.get(&index) {
            if known == answer {
                return Ok(());
            }
            // The ends land here too: they are in the memo from `new`.
            return Err(SearchError::Answered {
                index,
                known,
                answer,
            });
        }
        match answer {
            Answer::Good if index > self.hi => {
                return Err(SearchError::NotMonotone {
                    bad: self.hi,
                    good: index,
                });
            }
            Answer::Bad if index < self.lo => {
                return Err(SearchError::NotMonotone {
                    bad: index,
                    good: self.lo,
                });
            }
            Answer::Good => self.lo = self.lo.max(index),
            Answer::Bad => self.hi = self.hi.min(index),
            // A skip anywhere is consistent: it says nothing about the property.
            Answer::Skip => {}
        }
        self.memo.insert(index, answer);
        Ok(())
    }

    /// The known answer for `index`, if any (None for untested or out-of-range indices).
    pub fn answer(&self, index: usize) -> Option<Answer> {
        self.memo.get(&index).copied()
    }

    /// What to do next. The candidate is the midpoint of the bracket (last Good, first
    /// Bad); if it was skipped, the nearest untested commit inside the bracket, trying the
    /// later side first at equal distance (git bisect likewise moves away from skipped
    /// commits rather than giving up). When nothing testable is left inside the bracket the
    /// search is done: [`Outcome::FirstBad`] if the bracket is adjacent, else
    /// [`Outcome::Untestable`] over everything after the last Good up to the first Bad.
    /// Never returns an index that already has an answer, nor either end.
    pub fn next(&self) -> Next {
        let (lo, hi) = (self.lo, self.hi);
        if hi - lo < 2 {
            return Next::Done(Outcome::FirstBad { index: hi });
        }
        // Strictly inside since hi - lo >= 2. Every recorded commit strictly inside the
        // bracket is a Skip (Goods are <= lo and Bads >= hi), so "untested" below means
        // "not skipped" too.
        let mid = lo + (hi - lo) / 2;
        let later = self.memo.range(mid..hi).map(|(&i, _)| i);
        let after = first_gap(mid, later).filter(|&i| i < hi);
        let earlier = self.memo.range(lo + 1..mid).rev().map(|(&i, _)| i);
        let before = last_gap(mid - 1, earlier).filter(|&i| i > lo);
        // The alternating order mid, mid+1, mid-1, mid+2, ... reaches mid+d before mid-d,
        // so the later side wins ties.
        let pick = match (after, before) {
            (Some(a), Some(b)) => Some(if a - mid <= mid - b { a } else { b }),
            (a, b) => a.or(b),
        };
        match pick {
            Some(i) => Next::Test(i),
            None => Next::Done(Outcome::Untestable {
                first: lo + 1,
                last: hi,
            }),
        }
    }

    /// The current bracket: (last Good index, first Bad index).
    pub fn bracket(&self) -> (usize, usize) {
        (self.lo, self.hi)
    }

    /// Commits still possibly the first bad one (`hi - lo`); 1 once found.
    pub fn remaining(&self) -> usize {
        self.hi - self.lo
    }

    /// Estimated evaluations left: `ceil(log2(remaining))`, and 0 when the search is done
    /// (including when only skipped commits remain). Skips can make the real count higher.
    pub fn steps_left(&self) -> usize {
        if matches!(self.next(), Next::Done(_)) {
            return 0;
        }
        ceil_log2(self.remaining())
    }

    /// The commits that would be tested after the current [`Search::next`] one, depending on
    /// its answer: `(if_good, if_bad)`, each None when that answer would end the search (and
    /// both None when the search is already done). Lets a caller build both ahead while the
    /// current one is being measured.
    pub fn speculate(&self) -> (Option<usize>, Option<usize>) {
        let Next::Test(index) = self.next() else {
            return (None, None);
        };
        let after = |answer| {
            let mut hypothetical = self.clone();
            // Cannot fail (an untested commit strictly inside the bracket is consistent with
            // either answer), but an error would just mean "nothing to build ahead".
            hypothetical.record(index, answer).ok()?;
            match hypothetical.next() {
                Next::Test(i) => Some(i),
                Next::Done(_) => None,
            }
        };
        (after(Answer::Good), after(Answer::Bad))
    }
}

#[cfg(test)]
/// Runs a whole search over `n` commits, asking `oracle` for each commit `next()` names,
/// and returns the outcome and the number of oracle calls (the two ends are recorded by
/// [`Search::new`], not asked for nor counted). Errors for `n < 2`. An oracle that is not
/// monotone cannot make it fail, only mislead it: every commit asked for lies strictly
/// inside the bracket, where either answer is consistent. Always terminates: each call
/// answers a commit that had none, so there are at most `n - 2` calls.
pub fn run(
    n: usize,
    mut oracle: impl FnMut(usize) -> Answer,
) -> Result<(Outcome, usize), SearchError> {
    let mut search = Search::new(n)?;
    let mut calls = 0;
    loop {
        match search.next() {
            Next::Test(index) => {
                calls += 1;
                search.record(index, oracle(index))?;
            }
            Next::Done(outcome) => return Ok((outcome, calls)),
        }
    }
}

/// The first index >= `start` not in the ascending sequence `taken` (whose items are all
/// >= `start`); None only on overflow.
fn first_gap(start: usize, taken: impl Iterator<Item = usize>) -> Option<usize> {
    let mut candidate = start;
    for i in taken {
        if i != candidate {
            break;
        }
        candidate = candidate.checked_add(1)?;
    }
    Some(candidate)
}

/// The last index <= `start` not in the descending sequence `taken` (whose items are all
/// <= `start`); None when every index down to 0 is taken.
fn last_gap(start: usize, taken: impl Iterator<Item = usize>) -> Option<usize> {
    let mut candidate = start;
    for i in taken {
        if i != candidate {
            break;
        }
        candidate = candidate.checked_sub(1)?;
    }
    Some(candidate)
}

/// `ceil(log2(x))`, 0 for x <= 1.
fn ceil_log2(x: usize) -> usize {
    if x <= 1 {
        0
    } else {
        (usize::BITS - (x - 1).leading_zeros()) as usize
    }
}

/// The answer as the messages spell it (the same as its serialised form).
fn name(answer: Answer) -> &'static str {
    match answer {
        Answer::Good => "good",
        Answer::Bad => "bad",
        Answer::Skip => "skip",
    }
}

/// The error for a Bad at `bad` followed by a Good at `good > bad`.
/// An answer the search cannot take, or a range it cannot search.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// Fewer than two commits: no pair of ends.
    #[error("bisection needs at least 2 commits (a good and a bad end), got {n}")]
    TooFew {
        /// How many there are.
        n: usize,
    },
    /// An index past the range.
    #[error("commit {index} is out of range: the search covers commits 0..{n}")]
    OutOfRange {
        /// The index given.
        index: usize,
        /// The range's length.
        n: usize,
    },
    /// A commit answered twice, differently.
    #[error("commit {index} already answered {}, it cannot also answer {}", name(*.known), name(*.answer))]
    Answered {
        /// The commit.
        index: usize,
        /// Its first answer.
        known: Answer,
        /// The new one.
        answer: Answer,
    },
    /// A good commit after a bad one.
    #[error(
        "commit {bad} answered bad, but commit {good} after it answered good: the property is not monotone"
    )]
    NotMonotone {
        /// The earlier, bad commit.
        bad: usize,
        /// The later, good commit.
        good: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The step estimate the progress bar shows: exact values, not only a bound (the
    /// bound-only tests let `x - 1` become `x + 1` or `x / 1`).
    #[test]
    fn ceil_log2_is_exact() {
        let cases = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (8, 3),
            (9, 4),
            (1 << 20, 20),
            ((1 << 20) + 1, 21),
        ];
        for (x, want) in cases {
            assert_eq!(ceil_log2(x), want, "ceil_log2({x})");
        }
    }
    use proptest::prelude::*;

    /// A monotone oracle: Good below `f`, Bad from `f`, Skip where `skipped` says.
    fn oracle(f: usize, skipped: &[bool]) -> impl Fn(usize) -> Answer + '_ {
        move |i| {
            if skipped.get(i).copied().unwrap_or(false) {
                Answer::Skip
            } else if i < f {
                Answer::Good
            } else {
                Answer::Bad
            }
        }
    }

    /// The outcome worked out without searching: the tested neighbours of the transition.
    fn brute_force(f: usize, skipped: &[bool]) -> Outcome {
        let lo = (0..f).rev().find(|&i| !skipped[i]).unwrap_or(0);
        let hi = (f..skipped.len()).find(|&i| !skipped[i]).unwrap();
        if lo + 1 == hi {
            Outcome::FirstBad { index: hi }
        } else {
            Outcome::Untestable {
                first: lo + 1,
                last: hi,
            }
        }
    }

    /// A skip set over `n` commits (never the ends), each inner commit skipped with
    /// probability `p`, drawn from a splitmix64 stream so a proptest seed reproduces it.
    fn skips(n: usize, p: f64, seed: u64) -> Vec<bool> {
        let mut state = seed;
        (0..n)
            .map(|i| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let u = (z >> 11) as f64 / (1u64 << 53) as f64;
                i != 0 && i != n - 1 && u < p
            })
            .collect()
    }

    /// The most oracle calls over every first-bad position, with no skips.
    fn worst_case(n: usize) -> usize {
        (1..n)
            .map(|f| run(n, oracle(f, &[])).unwrap().1)
            .max()
            .unwrap()
    }

    #[test]
    fn two_commits_are_done_immediately() {
        let search = Search::new(2).unwrap();
        assert_eq!(search.next(), Next::Done(Outcome::FirstBad { index: 1 }));
        assert_eq!(search.steps_left(), 0);
        assert_eq!(search.speculate(), (None, None));
        let (outcome, calls) = run(2, |_| panic!("no commit should be asked")).unwrap();
        assert_eq!(outcome, Outcome::FirstBad { index: 1 });
        assert_eq!(calls, 0);
    }

    #[test]
    fn fewer_than_two_commits_is_an_error() {
        assert!(Search::new(0).is_err());
        assert!(Search::new(1).is_err());
        assert!(run(1, |_| Answer::Good).is_err());
    }

    #[test]
    fn finds_every_first_bad_in_linear_histories() {
        for n in 2..=64 {
            for f in 1..n {
                let (outcome, calls) = run(n, oracle(f, &[])).unwrap();
                assert_eq!(outcome, Outcome::FirstBad { index: f }, "n={n} f={f}");
                assert!(calls <= ceil_log2(n - 1) + 1, "n={n} f={f} calls={calls}");
            }
        }
    }

    #[test]
    fn skips_around_the_transition_give_the_range_git_would() {
        // Commits 4, 5 and 6 cannot be built and the first bad one is 5: git bisect says
        // "the first bad commit could be any of" 4, 5, 6, 7 (3 is good, 7 bad).
        let mut skipped = vec![false; 12];
        skipped[4..=6].fill(true);
        let (outcome, _) = run(12, oracle(5, &skipped)).unwrap();
        assert_eq!(outcome, Outcome::Untestable { first: 4, last: 7 });

        // The first bad commit itself skipped, its parent tested: 6 and 7 are candidates.
        let mut skipped = vec![false; 12];
        skipped[6] = true;
        let (outcome, _) = run(12, oracle(6, &skipped)).unwrap();
        assert_eq!(outcome, Outcome::Untestable { first: 6, last: 7 });

        // Skips just before a testable first bad commit: the parent is untestable, so
        // the culprit could be either.
        let mut skipped = vec![false; 12];
        skipped[5] = true;
        let (outcome, _) = run(12, oracle(6, &skipped)).unwrap();
        assert_eq!(outcome, Outcome::Untestable { first: 5, last: 6 });

        // Skips away from the transition change nothing.
        let mut skipped = vec![false; 12];
        skipped[1..=3].fill(true);
        skipped[9] = true;
        let (outcome, _) = run(12, oracle(6, &skipped)).unwrap();
        assert_eq!(outcome, Outcome::FirstBad { index: 6 });

        // Everything inside skipped: the whole history is the range.
        let mut skipped = vec![true; 8];
        skipped[0] = false;
        skipped[7] = false;
        let (outcome, calls) = run(8, oracle(3, &skipped)).unwrap();
        assert_eq!(outcome, Outcome::Untestable { first: 1, last: 7 });
        assert_eq!(calls, 6);
    }

    #[test]
    fn a_skipped_midpoint_moves_to_the_nearest_later_commit_first() {
        let mut search = Search::new(11).unwrap();
        assert_eq!(search.next(), Next::Test(5));
        search.record(5, Answer::Skip).unwrap();
        assert_eq!(search.next(), Next::Test(6));
        search.record(6, Answer::Skip).unwrap();
        assert_eq!(search.next(), Next::Test(4));
        search.record(4, Answer::Skip).unwrap();
        assert_eq!(search.next(), Next::Test(7));
        search.record(7, Answer::Skip).unwrap();
        search.record(8, Answer::Skip).unwrap();
        search.record(9, Answer::Skip).unwrap();
        // Later side exhausted: keep going down.
        assert_eq!(search.next(), Next::Test(3));
    }

    #[test]
    fn worst_case_evaluation_counts() {
        for (n, expected) in [(10, 4), (100, 7), (1000, 10)] {
            let worst = worst_case(n);
            eprintln!("n = {n}: at most {worst} evaluations (plus the two ends)");
            assert_eq!(worst, expected, "n = {n}");
            assert!(worst <= ceil_log2(n - 1) + 1);
        }
    }

    #[test]
    fn record_rejects_non_monotone_answers() {
        let mut search = Search::new(10).unwrap();
        search.record(5, Answer::Bad).unwrap();
        assert_eq!(
            search.record(7, Answer::Good).unwrap_err().to_string(),
            "commit 5 answered bad, but commit 7 after it answered good: \
             the property is not monotone"
        );
        search.record(2, Answer::Good).unwrap();
        assert_eq!(
            search.record(1, Answer::Bad).unwrap_err().to_string(),
            "commit 1 answered bad, but commit 2 after it answered good: \
             the property is not monotone"
        );
        // Errors leave the search as it was.
        assert_eq!(search.bracket(), (2, 5));
        assert_eq!(search.answer(7), None);
        assert_eq!(search.answer(1), None);
    }

    #[test]
    fn record_rejects_conflicts_ends_and_out_of_range() {
        let mut search = Search::new(10).unwrap();
        search.record(4, Answer::Skip).unwrap();
        search.record(4, Answer::Skip).unwrap();
        assert!(search.record(4, Answer::Good).is_err());
        assert_eq!(search.answer(4), Some(Answer::Skip));
        assert!(search.record(0, Answer::Bad).is_err());
        assert!(search.record(0, Answer::Skip).is_err());
        assert!(search.record(9, Answer::Good).is_err());
        assert!(search.record(0, Answer::Good).is_ok());
        assert!(search.record(9, Answer::Bad).is_ok());
        assert!(search.record(10, Answer::Good).is_err());
        assert!(search.record(usize::MAX, Answer::Skip).is_err());
        assert_eq!(search.answer(usize::MAX), None);
        assert_eq!(search.bracket(), (0, 9));
    }

    #[test]
    fn a_non_monotone_oracle_still_ends_on_an_adjacent_pair() {
        // `next` only asks inside the bracket, where either answer is consistent, so even a
        // flaky oracle cannot make `run` fail or loop: it ends on some Good/Bad boundary.
        let answer = |i: usize| {
            if i.is_multiple_of(3) {
                Answer::Bad
            } else {
                Answer::Good
            }
        };
        let (outcome, _) = run(50, answer).unwrap();
        let Outcome::FirstBad { index } = outcome else {
            panic!("no skips, so the bracket closes: {outcome:?}")
        };
        assert_eq!(answer(index), Answer::Bad);
        // Its parent is the good end or answered Good.
        assert!(index == 1 || answer(index - 1) == Answer::Good);
    }

    #[test]
    fn progress_counters() {
        let mut search = Search::new(101).unwrap();
        assert_eq!(search.remaining(), 100);
        assert_eq!(search.steps_left(), 7);
        search.record(50, Answer::Good).unwrap();
        assert_eq!(search.bracket(), (50, 100));
        assert_eq!(search.remaining(), 50);
        assert_eq!(search.steps_left(), 6);
        search.record(51, Answer::Bad).unwrap();
        assert_eq!(search.remaining(), 1);
        assert_eq!(search.steps_left(), 0);
        // Done with only skips left: nothing more to evaluate.
        let mut search = Search::new(4).unwrap();
        search.record(1, Answer::Skip).unwrap();
        search.record(2, Answer::Skip).unwrap();
        assert_eq!(search.remaining(), 3);
        assert_eq!(search.steps_left(), 0);
    }

    #[test]
    fn outcome_serialises_tagged() {
        let json = serde_json::to_string(&Outcome::Untestable { first: 3, last: 5 }).unwrap();
        assert_eq!(json, r#"{"kind":"untestable","first":3,"last":5}"#);
        let json = serde_json::to_string(&Outcome::FirstBad { index: 4 }).unwrap();
        assert_eq!(json, r#"{"kind":"first-bad","index":4}"#);
        assert_eq!(serde_json::to_string(&Answer::Skip).unwrap(), r#""skip""#);
    }

    /// Skip probabilities the properties draw from.
    const PROBABILITIES: [f64; 4] = [0.0, 0.1, 0.5, 0.9];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn run_matches_brute_force(
            (n, f) in (2usize..2000).prop_flat_map(|n| (Just(n), 1..n)),
            p in prop::sample::select(PROBABILITIES.to_vec()),
            seed in any::<u64>(),
        ) {
            let skipped = skips(n, p, seed);
            let (outcome, calls) = run(n, oracle(f, &skipped)).unwrap();
            prop_assert_eq!(outcome, brute_force(f, &skipped));
            prop_assert!(calls <= n - 2);
            if p == 0.0 {
                prop_assert!(calls <= ceil_log2(n - 1) + 1);
            }
        }

        #[test]
        fn resumed_search_never_asks_twice(
            (n, f) in (2usize..500).prop_flat_map(|n| (Just(n), 1..n)),
            p in prop::sample::select(PROBABILITIES.to_vec()),
            seed in any::<u64>(),
            keep in 0usize..64,
        ) {
            let skipped = skips(n, p, seed);
            let answer = oracle(f, &skipped);
            // First pass: a full search, remembering what it asked.
            let mut first = Search::new(n).unwrap();
            let mut asked = Vec::new();
            while let Next::Test(i) = first.next() {
                prop_assert!(i != 0 && i != n - 1);
                prop_assert_eq!(first.answer(i), None);
                asked.push(i);
                first.record(i, answer(i)).unwrap();
            }
            // Replaying every answer finishes at once, with the same outcome.
            let mut replay = Search::new(n).unwrap();
            for &i in asked.iter().rev() {
                replay.record(i, answer(i)).unwrap();
                replay.record(i, answer(i)).unwrap();
            }
            prop_assert_eq!(replay.next(), first.next());
            // Resuming from part of the log only asks for commits not yet answered.
            let mut resumed = Search::new(n).unwrap();
            for &i in asked.iter().take(keep) {
                resumed.record(i, answer(i)).unwrap();
            }
            let mut seen: std::collections::BTreeSet<usize> =
                asked.iter().take(keep).copied().collect();
            while let Next::Test(i) = resumed.next() {
                prop_assert!(i != 0 && i != n - 1);
                prop_assert!(seen.insert(i), "asked {} twice", i);
                resumed.record(i, answer(i)).unwrap();
            }
            prop_assert_eq!(resumed.next(), Next::Done(brute_force(f, &skipped)));
        }

        #[test]
        fn speculate_predicts_both_answers(
            (n, f) in (2usize..2000).prop_flat_map(|n| (Just(n), 1..n)),
            p in prop::sample::select(PROBABILITIES.to_vec()),
            seed in any::<u64>(),
            steps in 0usize..12,
        ) {
            let skipped = skips(n, p, seed);
            let answer = oracle(f, &skipped);
            let mut search = Search::new(n).unwrap();
            for _ in 0..steps {
                let Next::Test(i) = search.next() else { break };
                search.record(i, answer(i)).unwrap();
            }
            let (if_good, if_bad) = search.speculate();
            match search.next() {
                Next::Done(_) => prop_assert_eq!((if_good, if_bad), (None, None)),
                Next::Test(i) => {
                    for (hypothesis, predicted) in
                        [(Answer::Good, if_good), (Answer::Bad, if_bad)]
                    {
                        let mut after = search.clone();
                        after.record(i, hypothesis).unwrap();
                        match after.next() {
                            Next::Test(j) => prop_assert_eq!(Some(j), predicted),
                            Next::Done(_) => prop_assert_eq!(None, predicted),
                        }
                    }
                }
            }
        }

        #[test]
        fn arbitrary_calls_never_panic(
            n in 0usize..40,
            calls in prop::collection::vec(
                (0usize..45, prop::sample::select(vec![Answer::Good, Answer::Bad, Answer::Skip])),
                0..60,
            ),
        ) {
            let Ok(mut search) = Search::new(n) else {
                prop_assert!(n < 2);
                return Ok(());
            };
            for (index, answer) in calls {
                let before = search.clone();
                if search.record(index, answer).is_err() {
                    prop_assert_eq!(&search.memo, &before.memo);
                    prop_assert_eq!(search.bracket(), before.bracket());
                }
                let (lo, hi) = search.bracket();
                prop_assert!(lo < hi && hi < n);
                match search.next() {
                    Next::Test(i) => {
                        prop_assert!(lo < i && i < hi);
                        prop_assert_eq!(search.answer(i), None);
                    }
                    Next::Done(Outcome::FirstBad { index }) => prop_assert_eq!(index, lo + 1),
                    Next::Done(Outcome::Untestable { first, last }) => {
                        prop_assert_eq!((first, last), (lo + 1, hi));
                        prop_assert!((first..last).all(|i| search.answer(i) == Some(Answer::Skip)));
                    }
                }
                let _ = search.speculate();
                let _ = search.steps_left();
                let _ = search.remaining();
            }
        }
    }

    #[test]
    fn errors_name_the_commit_and_both_answers() {
        let mut s = Search::new(8).unwrap();
        s.record(3, Answer::Skip).unwrap();
        let said = |r: Result<(), SearchError>| r.unwrap_err().to_string();
        for (answer, word) in [(Answer::Good, "good"), (Answer::Bad, "bad")] {
            assert_eq!(
                said(s.record(3, answer)),
                format!("commit 3 already answered skip, it cannot also answer {word}")
            );
        }
        assert_eq!(
            said(s.record(0, Answer::Bad)),
            "commit 0 already answered good, it cannot also answer bad"
        );
        assert_eq!(
            said(s.record(7, Answer::Skip)),
            "commit 7 already answered bad, it cannot also answer skip"
        );
        assert_eq!(
            said(s.record(8, Answer::Good)),
            "commit 8 is out of range: the search covers commits 0..8"
        );
        // A refused answer leaves the search as it was.
        assert_eq!(s.answer(3), Some(Answer::Skip));
    }
}
