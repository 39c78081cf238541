//! A concurrent histogram over `hdrhistogram`, summarised as CouchDB's `_stats` shows one.
//!
//! Recording takes one uncontended lock: each thread records into one of [`SHARDS`]
//! histograms, chosen once per thread, so request threads do not serialise on a single
//! lock. Reading merges the shards.

use hdrhistogram::Histogram as Hdr;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 8;

/// Values are recorded as integers of `1 / scale` units (µs for a histogram of
/// milliseconds), 2 significant digits (1% error), up to `MAX_UNITS`.
const MAX_UNITS: u64 = 1 << 40;

fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

pub struct Histogram {
    shards: Vec<Mutex<Hdr<u64>>>,
    /// Recorded units per reported unit.
    scale: f64,
}

/// The statistics of everything recorded so far, in reported units.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub n: u64,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub geometric_mean: f64,
    pub harmonic_mean: f64,
    pub median: f64,
    pub variance: f64,
    pub standard_deviation: f64,
    pub skewness: f64,
    pub kurtosis: f64,
    /// CouchDB's percentiles: 50, 75, 90, 95, 99 and 999 (99.9).
    pub percentiles: Vec<(u32, f64)>,
    /// Up to ten equal-width bins from `min` to `max`: (upper bound, count).
    pub bins: Vec<(f64, u64)>,
}

impl Histogram {
    /// A histogram whose values have a resolution of `1 / scale`.
    pub fn new(scale: f64) -> Histogram {
        let shards = (0..SHARDS)
            .map(|_| Mutex::new(Hdr::new_with_bounds(1, MAX_UNITS, 2).expect("valid bounds")))
            .collect();
        Histogram { shards, scale }
    }

    pub fn record(&self, value: f64) {
        let units = (value * self.scale).round().clamp(0.0, MAX_UNITS as f64) as u64;
        let mut h = self.shards[shard_index()]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        h.saturating_record(units);
    }

    fn merged(&self) -> Hdr<u64> {
        let mut all = Hdr::new_with_bounds(1, MAX_UNITS, 2).expect("valid bounds");
        for s in &self.shards {
            let h = s.lock().unwrap_or_else(|p| p.into_inner());
            all.add(&*h).expect("same bounds");
        }
        all
    }

    pub fn summary(&self) -> Summary {
        let h = self.merged();
        let n = h.len();
        if n == 0 {
            return Summary {
                percentiles: PERCENTILES.iter().map(|&(p, _)| (p, 0.0)).collect(),
                bins: vec![(0.0, 0)],
                ..Summary::default()
            };
        }
        let s = self.scale;
        // (value, count) pairs at the histogram's resolution.
        let values: Vec<(f64, u64)> = h
            .iter_recorded()
            .map(|v| {
                (
                    h.highest_equivalent(v.value_iterated_to()) as f64 / s,
                    v.count_at_value(),
                )
            })
            .collect();
        let nf = n as f64;
        let mean = h.mean() / s;
        let moment = |k: i32| {
            values
                .iter()
                .map(|&(v, c)| c as f64 * (v - mean).powi(k))
                .sum::<f64>()
                / nf
        };
        let (m2, m3, m4) = (moment(2), moment(3), moment(4));
        let any_zero = values.iter().any(|&(v, _)| v <= 0.0);
        let geometric_mean = if any_zero {
            0.0
        } else {
            (values.iter().map(|&(v, c)| c as f64 * v.ln()).sum::<f64>() / nf).exp()
        };
        let harmonic_mean = if any_zero {
            0.0
        } else {
            nf / values.iter().map(|&(v, c)| c as f64 / v).sum::<f64>()
        };
        let variance = if n > 1 { m2 * nf / (nf - 1.0) } else { 0.0 };
        let (skewness, kurtosis) = if m2 > 0.0 {
            (m3 / m2.powf(1.5), m4 / (m2 * m2) - 3.0)
        } else {
            (0.0, 0.0)
        };
        let at = |q: f64| h.value_at_quantile(q) as f64 / s;
        let (min, max) = (h.min() as f64 / s, h.max() as f64 / s);
        Summary {
            n,
            min,
            max,
            mean,
            geometric_mean,
            harmonic_mean,
            median: at(0.5),
            variance,
            standard_deviation: variance.sqrt(),
            skewness,
            kurtosis,
            percentiles: PERCENTILES.iter().map(|&(p, q)| (p, at(q))).collect(),
            bins: bins(&values, min, max),
        }
    }
}

const PERCENTILES: [(u32, f64); 6] = [
    (50, 0.5),
    (75, 0.75),
    (90, 0.9),
    (95, 0.95),
    (99, 0.99),
    (999, 0.999),
];

fn bins(values: &[(f64, u64)], min: f64, max: f64) -> Vec<(f64, u64)> {
    const BINS: usize = 10;
    if max <= min {
        return vec![(max, values.iter().map(|v| v.1).sum())];
    }
    let width = (max - min) / BINS as f64;
    let mut out: Vec<(f64, u64)> = (1..=BINS).map(|i| (min + width * i as f64, 0)).collect();
    for &(v, c) in values {
        let i = (((v - min) / width).ceil() as usize).clamp(1, BINS) - 1;
        out[i].1 += c;
    }
    out
}

/// A number as `_stats` shows it: integral values without a fraction.
fn num(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        json!(v as i64)
    } else {
        json!((v * 1000.0).round() / 1000.0)
    }
}

impl Summary {
    /// The `value` of a histogram in `_stats`, in CouchDB's member order.
    pub fn to_json(&self) -> Value {
        json!({
            "min": num(self.min),
            "max": num(self.max),
            "arithmetic_mean": num(self.mean),
            "geometric_mean": num(self.geometric_mean),
            "harmonic_mean": num(self.harmonic_mean),
            "median": num(self.median),
            "variance": num(self.variance),
            "standard_deviation": num(self.standard_deviation),
            "skewness": num(self.skewness),
            "kurtosis": num(self.kurtosis),
            "percentile": self.percentiles.iter().map(|&(p, v)| json!([p, num(v)])).collect::<Vec<_>>(),
            "histogram": self.bins.iter().map(|&(b, c)| json!([num(b), c])).collect::<Vec<_>>(),
            "n": self.n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_all_zero() {
        let s = Histogram::new(1.0).summary();
        assert_eq!(s.n, 0);
        assert_eq!(s.to_json()["histogram"], json!([[0, 0]]));
        assert_eq!(s.to_json()["percentile"][5], json!([999, 0]));
    }

    #[test]
    fn statistics_of_known_values() {
        let h = Histogram::new(1.0);
        for v in [1.0, 2.0, 3.0, 4.0] {
            h.record(v);
        }
        let s = h.summary();
        assert_eq!((s.n, s.min, s.max, s.mean), (4, 1.0, 4.0, 2.5));
        assert!((s.variance - 5.0 / 3.0).abs() < 1e-9);
        assert!((s.geometric_mean - 24f64.powf(0.25)).abs() < 1e-9);
        assert!((s.harmonic_mean - 4.0 / (1.0 + 0.5 + 1.0 / 3.0 + 0.25)).abs() < 1e-9);
        assert!(s.skewness.abs() < 1e-9);
        assert_eq!(s.bins.iter().map(|b| b.1).sum::<u64>(), 4);
        assert_eq!(s.percentiles[0], (50, 2.0));
    }

    #[test]
    fn threads_record_into_one_histogram() {
        let h = std::sync::Arc::new(Histogram::new(1000.0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || (0..100).for_each(|_| h.record(1.5)))
            })
            .collect();
        handles.into_iter().for_each(|t| t.join().unwrap());
        let s = h.summary();
        assert_eq!(s.n, 400);
        assert!((s.median - 1.5).abs() < 0.02);
    }
}
