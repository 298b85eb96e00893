//! The statistical decision of a performance bisection step, as a pure function.
//!
//! Each commit is measured in several separate processes; each process gives one median,
//! so samples are independent (samples inside one process are not). A candidate is
//! compared with the baseline (the good end) by the ratio of medians with a bootstrap
//! interval and by Mann-Whitney U together with Kolmogorov-Smirnov (p = the smaller). With
//! `m = 1 + threshold`, the change asked about: *bad* when p <= alpha and the whole
//! interval lies beyond m; *good* when the whole interval lies short of m; otherwise
//! *unknown*, and the caller measures more (a change close to the threshold may end
//! undecided). The threshold is judged on the interval, never on the point estimate, so a
//! change well below it (0.6 times it) is not named however often it is measured, and one
//! well above it (1.5 times) is found once the interval is narrower than the margin.

use crate::foundation::stats;

/// Which change counts as a regression.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Larger values (times) are bad.
    Slower,
    /// Smaller values (throughput) are bad.
    Faster,
}

/// The outcome of one comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Not worse by the threshold.
    Good,
    /// Worse by the threshold, significantly.
    Bad,
    /// Not enough evidence either way.
    Unknown,
}

/// A decision with its evidence.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Judgement {
    /// The decision.
    pub decision: Decision,
    /// median(candidate) / median(baseline).
    pub ratio: f64,
    /// Its bootstrap 95% interval.
    pub ratio_ci: (f64, f64),
    /// min(Mann-Whitney p, Kolmogorov-Smirnov p).
    pub p: f64,
}

/// Decides whether `cand` is worse than `base` by at least `threshold` in `direction`, on
/// the 95% interval of the ratio.
pub fn decide(
    base: &[f64],
    cand: &[f64],
    threshold: f64,
    direction: Direction,
    alpha: f64,
    seed: u64,
) -> Option<Judgement> {
    decide_at(base, cand, threshold, direction, alpha, 0.95, seed)
}

/// [`decide`] on the ratio's interval at confidence `level` (see [`Looks`]).
pub fn decide_at(
    base: &[f64],
    cand: &[f64],
    threshold: f64,
    direction: Direction,
    alpha: f64,
    level: f64,
    seed: u64,
) -> Option<Judgement> {
    let c = stats::compare_at(base, cand, alpha, threshold, level, seed)?;
    let (r, lo, hi) = match direction {
        Direction::Slower => (c.ratio, c.ratio_ci_low, c.ratio_ci_high),
        Direction::Faster => (1.0 / c.ratio, 1.0 / c.ratio_ci_high, 1.0 / c.ratio_ci_low),
    };
    let mid = 1.0 + threshold;
    let decision = if c.p <= alpha && lo > mid {
        Decision::Bad
    } else if hi < mid {
        Decision::Good
    } else {
        Decision::Unknown
    };
    Some(Judgement {
        decision,
        ratio: r,
        ratio_ci: (lo, hi),
        p: c.p,
    })
}

/// When a step looks at its samples, and at what confidence: the early stop of a bench
/// step.
///
/// The rule of old measured `first` processes and doubled while undecided, up to `max`: it
/// looked `L0 = 1 + log2(max / first)` times (3 for the defaults, 10 and 40), each time on a
/// 95% interval. A wrong decision needs one look whose interval misses the true ratio on
/// the wrong side (a false *bad* needs its low end above 1 + threshold while the truth is
/// not, a false *good* its high end below while the truth is beyond), so by the union bound
/// the old rule's error is at most `L0 x 2.5%` either way (7.5% for the defaults; less in
/// fact, as the looks share samples).
///
/// The early stop looks far more often: first after [`FIRST_LOOK`] processes (or `first`,
/// if fewer), then after every quarter more (at least one more process) up to `max`: about
/// 12 looks for the defaults. To keep the error the same, each look uses a wider interval,
/// so that the looks together spend what the old ones spent: a one-sided miss of at most
/// `L0 x 2.5% / L` a look (0.63% for the defaults: a 98.75% interval), and the union bound
/// is the old one's. The p-value condition of *bad* (p <= alpha) is kept at each look; it
/// only ever makes *bad* harder. A clear case (a change far from the threshold, with little
/// noise) is decided at the first look, on a few processes instead of `first`.
/// `decide::tests::the_early_stop_keeps_the_error_rates` checks it on synthetic samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Looks {
    /// The sample counts at which the step decides, ascending, the last being `max`.
    pub at: Vec<usize>,
    /// The confidence of the interval at each look.
    pub level: f64,
}

/// The first look of an early-stopping step, in processes.
pub const FIRST_LOOK: usize = 3;

impl Looks {
    /// The looks of a step that the old rule measured in `first`, doubled up to `max`.
    pub fn new(first: usize, max: usize) -> Looks {
        let first = first.max(1);
        let max = max.max(first);
        // The old rule's looks: first, 2 first, 4 first, ..., max.
        let mut old = 1usize;
        let mut n = first;
        while n < max {
            n = (n * 2).min(max);
            old += 1;
        }
        let mut at = vec![FIRST_LOOK.min(first)];
        while at[at.len() - 1] < max {
            let last = at[at.len() - 1];
            at.push((last + last.div_ceil(4)).max(last + 1).min(max));
        }
        let miss = old as f64 * 0.025 / at.len() as f64;
        Looks {
            at,
            level: 1.0 - 2.0 * miss,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn around(center: f64, spread: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed.max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                center * (1.0 + spread * ((x % 10_000) as f64 / 10_000.0 - 0.5))
            })
            .collect()
    }

    #[test]
    fn a_three_percent_slowdown_is_bad_at_two_percent_and_noise_is_good() {
        let base = around(100.0, 0.004, 10, 1);
        let slow = around(103.0, 0.004, 10, 2);
        let same = around(100.0, 0.004, 10, 3);
        assert_eq!(
            decide(&base, &slow, 0.02, Direction::Slower, 0.01, 7)
                .unwrap()
                .decision,
            Decision::Bad
        );
        assert_eq!(
            decide(&base, &same, 0.02, Direction::Slower, 0.01, 7)
                .unwrap()
                .decision,
            Decision::Good
        );
        // Faster is not a regression when slower is what is asked about, and vice versa.
        let fast = around(97.0, 0.004, 10, 4);
        assert_eq!(
            decide(&base, &fast, 0.02, Direction::Slower, 0.01, 7)
                .unwrap()
                .decision,
            Decision::Good
        );
        assert_eq!(
            decide(&base, &fast, 0.02, Direction::Faster, 0.01, 7)
                .unwrap()
                .decision,
            Decision::Bad
        );
    }

    #[test]
    fn too_few_noisy_samples_are_unknown() {
        let base = around(100.0, 0.2, 4, 1);
        let cand = around(102.0, 0.2, 4, 2);
        assert_eq!(
            decide(&base, &cand, 0.03, Direction::Slower, 0.01, 7)
                .unwrap()
                .decision,
            Decision::Unknown
        );
    }

    /// For throughput (`faster`) the ratio and its interval are inverted, the interval's
    /// ends swapping so that it still runs low to high around the ratio.
    #[test]
    fn the_faster_direction_inverts_the_interval_in_order() {
        let base = around(100.0, 0.004, 10, 1);
        for (cand, want) in [
            (around(97.0, 0.004, 10, 4), Decision::Bad),
            (around(99.9, 0.004, 10, 5), Decision::Good),
        ] {
            let c = stats::compare(&base, &cand, 0.01, 0.02, 7).unwrap();
            let f = decide(&base, &cand, 0.02, Direction::Faster, 0.01, 7).unwrap();
            assert_eq!(f.ratio, 1.0 / c.ratio);
            assert_eq!(f.ratio_ci, (1.0 / c.ratio_ci_high, 1.0 / c.ratio_ci_low));
            assert!(f.ratio_ci.0 <= f.ratio && f.ratio <= f.ratio_ci.1, "{f:?}");
            assert_eq!(f.p, c.p);
            assert_eq!(f.decision, want, "{f:?}");
            let s = decide(&base, &cand, 0.02, Direction::Slower, 0.01, 7).unwrap();
            assert_eq!(s.ratio, c.ratio);
            assert_eq!(s.ratio_ci, (c.ratio_ci_low, c.ratio_ci_high));
            assert_eq!(s.decision, Decision::Good);
        }
    }

    /// The decision turns on the threshold itself (1 + threshold) and on alpha.
    #[test]
    fn the_decision_turns_on_the_threshold_and_alpha() {
        let base = around(100.0, 0.002, 12, 1);
        // 2% slower: beyond a 1.3% threshold (1.5 times short of the change), short of a
        // 3.4% one (the change is 0.6 times it), and undecided at 2%.
        let cand = around(102.0, 0.002, 12, 2);
        let d = |t: f64, alpha: f64| decide(&base, &cand, t, Direction::Slower, alpha, 7).unwrap();
        assert_eq!(d(0.013, 0.01).decision, Decision::Bad);
        assert_eq!(d(0.034, 0.01).decision, Decision::Good);
        assert_eq!(d(0.02, 0.01).decision, Decision::Unknown);
        // With alpha 0 no p-value is small enough for bad; good is still out of reach.
        assert_eq!(d(0.013, 0.0).decision, Decision::Unknown);
        assert!(decide(&[], &cand, 0.03, Direction::Slower, 0.01, 7).is_none());
    }

    /// An interval that ends exactly on the threshold is neither beyond it (bad) nor short of
    /// it (good): with threshold 0.25, 125 / 100 is exactly 1 + threshold.
    #[test]
    fn an_interval_ending_on_the_midpoint_is_unknown() {
        let base = vec![100.0; 12];
        let cand = vec![125.0; 12];
        let j = decide(&base, &cand, 0.25, Direction::Slower, 0.01, 7).unwrap();
        assert_eq!(j.ratio_ci, (1.25, 1.25));
        assert!(j.p <= 0.01, "{j:?}");
        assert_eq!(j.decision, Decision::Unknown, "{j:?}");
        let j = decide(&cand, &base, 0.25, Direction::Faster, 0.01, 7).unwrap();
        assert_eq!(j.ratio_ci, (1.25, 1.25));
        assert_eq!(j.decision, Decision::Unknown, "{j:?}");
    }

    /// Normal samples (Box-Muller over xorshift), deterministic in `seed`.
    struct Normal(u64);
    impl Normal {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        fn next(&mut self, mean: f64, sd: f64) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            mean * (1.0 + sd * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos())
        }
    }

    /// One step judged sequentially at `looks` (sample counts) and `level`: its decision and
    /// the processes it took.
    fn sequential(
        base: &[f64],
        draw: &mut dyn FnMut() -> f64,
        looks: &[usize],
        level: f64,
        t: f64,
    ) -> (Decision, usize) {
        let mut cand = Vec::new();
        for &n in looks {
            while cand.len() < n {
                cand.push(draw());
            }
            let j = decide_at(base, &cand, t, Direction::Slower, 0.01, level, n as u64).unwrap();
            if j.decision != Decision::Unknown {
                return (j.decision, n);
            }
        }
        (Decision::Unknown, cand.len())
    }

    /// The looks of the early stop against the rule of old (10 processes, doubled to 40), on
    /// synthetic per-process medians with 0.5% noise (a small kernel's, between processes) at a 2% threshold: a true change of 0.6
    /// times the threshold and an A/A pair are named no more often than the old rule names
    /// them, a change of 1.5 times it is found as often, and clear cases take fewer processes.
    #[test]
    fn the_early_stop_keeps_the_error_rates() {
        let (t, sd, trials) = (0.02, 0.005, 60);
        let new = Looks::new(10, 40);
        assert_eq!(new.at.first(), Some(&FIRST_LOOK));
        assert_eq!(new.at.last(), Some(&40));
        assert!((new.level - (1.0 - 2.0 * 3.0 * 0.025 / new.at.len() as f64)).abs() < 1e-12);
        let old = [10, 20, 40];
        let mut rng = Normal(29);
        for (true_ratio, want_bad) in [(1.0, false), (1.0 + 0.6 * t, false), (1.0 + 1.5 * t, true)]
        {
            let (mut right, mut n_new, mut right_old, mut n_old) = (0, 0, 0, 0);
            for _ in 0..trials {
                let base: Vec<f64> = (0..10).map(|_| rng.next(100.0, sd)).collect();
                let mut draw = || rng.next(100.0 * true_ratio, sd);
                let (d, n) = sequential(&base, &mut draw, &new.at, new.level, t);
                right += usize::from((d == Decision::Bad) == want_bad);
                n_new += n;
                let mut draw = || rng.next(100.0 * true_ratio, sd);
                let (d, n) = sequential(&base, &mut draw, &old, 0.95, t);
                right_old += usize::from((d == Decision::Bad) == want_bad);
                n_old += n;
            }
            eprintln!(
                "ratio {true_ratio}: early stop right {right}/{trials} in {n_new} processes; old rule {right_old}/{trials} in {n_old}"
            );
            // Within sampling error of the old rule's rate (two standard errors of 60
            // trials near 95%: 6 trials), and never worse than its acceptance (19 of 20).
            assert!(
                right + 3 >= right_old,
                "{right} vs {right_old} at {true_ratio}"
            );
            assert!(
                right * 20 >= trials * 19,
                "{right} of {trials} at {true_ratio}"
            );
            // Clear cases stop early; a change near the threshold, where both rules often run
            // to the maximum, costs the wider intervals' price (at most a quarter more).
            if true_ratio == 1.0 + 0.6 * t {
                assert!(
                    n_new * 4 <= n_old * 5,
                    "{n_new} against {n_old} at {true_ratio}"
                );
            } else {
                assert!(
                    n_new < n_old,
                    "{n_new} processes against {n_old} at {true_ratio}"
                );
            }
        }
    }

    #[test]
    fn looks_start_small_grow_by_a_quarter_and_end_at_the_maximum() {
        let l = Looks::new(10, 40);
        assert_eq!(l.at, [3, 4, 5, 7, 9, 12, 15, 19, 24, 30, 38, 40]);
        // Fewer first processes than the first look: start there; one process is a look.
        assert_eq!(Looks::new(2, 2).at, [2]);
        assert_eq!(Looks::new(2, 4).at, [2, 3, 4]);
        assert!((Looks::new(2, 2).level - 0.95).abs() < 1e-12);
        // One look of old spread over three: a wider interval.
        assert!((Looks::new(2, 4).level - (1.0 - 2.0 * 2.0 * 0.025 / 3.0)).abs() < 1e-12);
    }
}
