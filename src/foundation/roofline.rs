//! Roofline figures: a result's achieved bandwidth and FLOP/s against the peaks measured on
//! its device, and which of the two bounds it. Pure arithmetic over plain data; the
//! measurement of the peaks is `engines::roofline`.
//!
//! The classification is the roofline model's: a kernel whose arithmetic intensity (FLOPs
//! per byte of DRAM traffic) is below the device's ridge point (peak FLOP/s over peak
//! bandwidth) is memory-bound and judged by its bandwidth; above it, compute-bound and judged
//! by its FLOP/s. With only bytes (or only FLOPs) known, that figure alone is judged.

use serde::{Deserialize, Serialize};

/// The peaks one device reached in repro's calibration kernels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Peaks {
    /// DRAM bandwidth, GB/s (a streaming copy: bytes read plus bytes written).
    pub dram_gb_per_s: f64,
    /// FP32 throughput, TFLOP/s (independent FMA chains, 2 FLOPs each).
    pub fp32_tflops: f64,
}

/// What bounds a kernel in the roofline model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// Below the ridge point: bandwidth is the limit.
    Memory,
    /// Above the ridge point: arithmetic is the limit.
    Compute,
}

/// A result's place under its device's roofline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Roofline {
    /// Which roof applies.
    pub bound: Bound,
    /// Achieved over peak for that roof (0.91 = 91%).
    pub fraction: f64,
    /// The peaks the fraction is of.
    pub peaks: Peaks,
}

impl Roofline {
    /// Judges achieved GB/s and TFLOP/s (either may be unknown) against the peaks; `None`
    /// when neither is known or a peak is not a positive number.
    pub fn judge(gb_per_s: Option<f64>, tflops: Option<f64>, peaks: &Peaks) -> Option<Self> {
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if !ok(peaks.dram_gb_per_s) || !ok(peaks.fp32_tflops) {
            return None;
        }
        let memory = gb_per_s.filter(|v| v.is_finite() && *v >= 0.0);
        let compute = tflops.filter(|v| v.is_finite() && *v >= 0.0);
        let bound = match (memory, compute) {
            (None, None) => return None,
            (Some(_), None) => Bound::Memory,
            (None, Some(_)) => Bound::Compute,
            (Some(b), Some(f)) => {
                // Intensity (FLOP per byte) against the ridge point; a kernel that moves
                // no bytes is compute-bound.
                let ridge = peaks.fp32_tflops * 1e12 / (peaks.dram_gb_per_s * 1e9);
                if b > 0.0 && (f * 1e12) / (b * 1e9) < ridge {
                    Bound::Memory
                } else {
                    Bound::Compute
                }
            }
        };
        let fraction = match bound {
            Bound::Memory => memory? / peaks.dram_gb_per_s,
            Bound::Compute => compute? / peaks.fp32_tflops,
        };
        Some(Roofline {
            bound,
            fraction,
            peaks: peaks.clone(),
        })
    }

    /// One line: `memory-bound: 91% of measured peak DRAM bandwidth (3.9 of 4.3 TB/s)`.
    pub fn line(&self, gb_per_s: Option<f64>, tflops: Option<f64>) -> String {
        let pct = self.fraction * 100.0;
        match self.bound {
            Bound::Memory => {
                let (a, p, unit) =
                    scale_bandwidth(gb_per_s.unwrap_or(0.0), self.peaks.dram_gb_per_s);
                format!(
                    "memory-bound: {pct:.0}% of measured peak DRAM bandwidth ({a} of {p} {unit})"
                )
            }
            Bound::Compute => format!(
                "compute-bound: {pct:.0}% of measured peak FP32 throughput ({} of {} TFLOP/s)",
                sig(tflops.unwrap_or(0.0)),
                sig(self.peaks.fp32_tflops)
            ),
        }
    }
}

/// Both bandwidths in TB/s when the peak is at least 1 TB/s, else in GB/s.
fn scale_bandwidth(achieved: f64, peak: f64) -> (String, String, &'static str) {
    if peak >= 1000.0 {
        (sig(achieved / 1000.0), sig(peak / 1000.0), "TB/s")
    } else {
        (sig(achieved), sig(peak), "GB/s")
    }
}

/// One decimal below 100, whole numbers above.
fn sig(v: f64) -> String {
    if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> Peaks {
        Peaks {
            dram_gb_per_s: 4300.0,
            fp32_tflops: 60.0,
        }
    }

    #[test]
    fn a_copy_is_memory_bound() {
        let r = Roofline::judge(Some(3913.0), None, &h200()).unwrap();
        assert_eq!(r.bound, Bound::Memory);
        assert!((r.fraction - 0.91).abs() < 1e-9);
        assert_eq!(
            r.line(Some(3913.0), None),
            "memory-bound: 91% of measured peak DRAM bandwidth (3.9 of 4.3 TB/s)"
        );
    }

    /// The ridge point of these peaks is 60e12 / 4.3e12 = 13.95 FLOP per byte.
    #[test]
    fn intensity_against_the_ridge_point() {
        // A vector add: 1 FLOP per 12 bytes: memory-bound whatever its FLOP/s.
        let r = Roofline::judge(Some(2000.0), Some(2000.0 / 12.0 / 1000.0), &h200()).unwrap();
        assert_eq!(r.bound, Bound::Memory);
        // A GEMM at 30 TFLOP/s moving 100 GB/s: 300 FLOP per byte: compute-bound, 50%.
        let r = Roofline::judge(Some(100.0), Some(30.0), &h200()).unwrap();
        assert_eq!((r.bound, r.fraction), (Bound::Compute, 0.5));
        assert_eq!(
            r.line(Some(100.0), Some(30.0)),
            "compute-bound: 50% of measured peak FP32 throughput (30.0 of 60.0 TFLOP/s)"
        );
        // Just below and just above the ridge.
        let ridge = 60e12 / 4.3e12;
        let b = 1000.0;
        let below = Roofline::judge(Some(b), Some(b * 1e9 * ridge * 0.99 / 1e12), &h200());
        let above = Roofline::judge(Some(b), Some(b * 1e9 * ridge * 1.01 / 1e12), &h200());
        assert_eq!(below.unwrap().bound, Bound::Memory);
        assert_eq!(above.unwrap().bound, Bound::Compute);
        // No bytes moved at all: compute-bound.
        let r = Roofline::judge(Some(0.0), Some(1.0), &h200()).unwrap();
        assert_eq!(r.bound, Bound::Compute);
    }

    #[test]
    fn nothing_to_judge() {
        assert_eq!(Roofline::judge(None, None, &h200()), None);
        assert_eq!(Roofline::judge(Some(f64::NAN), None, &h200()), None);
        let bad = Peaks {
            dram_gb_per_s: 0.0,
            fp32_tflops: 60.0,
        };
        assert_eq!(Roofline::judge(Some(1.0), None, &bad), None);
        // A small device's bandwidth stays in GB/s.
        let small = Peaks {
            dram_gb_per_s: 300.0,
            fp32_tflops: 30.0,
        };
        let r = Roofline::judge(Some(150.0), None, &small).unwrap();
        assert_eq!(
            r.line(Some(150.0), None),
            "memory-bound: 50% of measured peak DRAM bandwidth (150 of 300 GB/s)"
        );
    }
}
