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

/// Decides whether `cand` is worse than `base` by at least `threshold` in `direction`.
pub fn decide(
    base: &[f64],
    cand: &[f64],
    threshold: f64,
    direction: Direction,
    alpha: f64,
    seed: u64,
) -> Option<Judgement> {
    let c = stats::compare(base, cand, alpha, threshold, seed)?;
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
}
