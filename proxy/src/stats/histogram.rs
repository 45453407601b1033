//! Histograms as Envoy keeps them: values (milliseconds, bytes) counted in
//! the log-linear bins of Envoy's `circllhist` (two significant decimal
//! digits: 0, 1.0, 1.1 … 9.9, 10, 11 … 99, 100, 110 …), so that bucket
//! counts, sums and quantiles computed from them are Envoy's to the digit.
//!
//! A value is recorded with one relaxed atomic add on its bin: no lock, and
//! no contention between workers (each worker records in its own stats, as
//! with counters). A decade's 90 bins are allocated at its first value, so
//! a histogram costs little until used. Admin merges the workers' bins into
//! a [`Snapshot`] when stats are listed.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bins per decade: mantissas 10..=99.
const PER_DECADE: usize = 90;
/// Decades of a `u64` (up to 1.8e19).
const DECADES: usize = 20;

/// A histogram written by one worker.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Values of 0.
    zero: AtomicU64,
    /// By decade (the value's exponent), its 90 bins once one is used.
    decades: [OnceLock<Box<[AtomicU64; PER_DECADE]>>; DECADES],
}

impl Histogram {
    /// Records `value` (`hist_insert_intscale(value, 0)` in Envoy).
    pub fn record(&self, value: u64) {
        if value == 0 {
            self.zero.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (exp, mantissa) = bin_of(value);
        let bins =
            self.decades[exp].get_or_init(|| Box::new(std::array::from_fn(|_| AtomicU64::new(0))));
        bins[mantissa - 10].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds this histogram's bins to `into`.
    pub fn add_to(&self, into: &mut Snapshot) {
        into.zero += self.zero.load(Ordering::Relaxed);
        for (exp, bins) in self.decades.iter().enumerate() {
            let Some(bins) = bins.get() else { continue };
            for (i, b) in bins.iter().enumerate() {
                let n = b.load(Ordering::Relaxed);
                if n > 0 {
                    *into.bins.entry((exp as i32, i as u8 + 10)).or_default() += n;
                }
            }
        }
    }

    /// This histogram's bins alone.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        self.add_to(&mut s);
        s
    }
}

/// The bin of a positive integer: its decimal exponent and its first two
/// digits (a single digit counts as tenths: 5 is 5.0, exponent 0).
fn bin_of(value: u64) -> (usize, usize) {
    let exp = value.ilog10() as usize;
    let mantissa = if exp == 0 {
        value * 10
    } else {
        value / 10u64.pow(exp as u32 - 1)
    };
    (exp, mantissa as usize)
}

/// `10^exp` as the C literal `1e<exp>` (what `circllhist`'s table holds).
fn pow10(exp: i32) -> f64 {
    format!("1e{exp}").parse().unwrap_or(f64::NAN)
}

/// A positive bin: (decimal exponent, mantissa 10..=99), ordered as values.
type Bin = (i32, u8);

/// A bin's lower bound and width.
fn bounds((exp, mantissa): Bin) -> (f64, f64) {
    let p = pow10(exp);
    ((f64::from(mantissa) / 10.0) * p, p / 10.0)
}

/// The bin a bucket bound falls in (`double_to_hist_bucket`); `None` for 0.
fn bin_of_bound(d: f64) -> Option<Bin> {
    if d == 0.0 || !d.is_finite() {
        return None;
    }
    let d = d.abs();
    let mut exp = d.log10().floor() as i32;
    let mut mantissa = ((d / pow10(exp)) * 10.0 + 1e-13).floor() as i64;
    if mantissa >= 100 {
        mantissa = 10;
        exp += 1;
    }
    Some((exp, mantissa.clamp(10, 99) as u8))
}

/// Envoy's quantiles (`supportedQuantiles`).
pub const QUANTILES: [f64; 10] = [0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 1.0];

/// The values of a histogram merged over workers.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Snapshot {
    zero: u64,
    bins: std::collections::BTreeMap<Bin, u64>,
}

impl Snapshot {
    /// How many values.
    pub fn count(&self) -> u64 {
        self.zero + self.bins.values().sum::<u64>()
    }

    /// The sum of the values as Envoy approximates it (`hist_approx_sum`):
    /// each bin's count times its error-minimising midpoint, bins ascending.
    pub fn sum(&self) -> f64 {
        let mut sum = 0.0;
        for (bin, n) in &self.bins {
            let (bottom, width) = bounds(*bin);
            let top = bottom + width;
            let midpoint = bottom + width * (bottom / (bottom + top));
            sum += midpoint * *n as f64;
        }
        sum
    }

    /// The values in bins at or below the one `bound` falls in
    /// (`hist_approx_count_below`): each bucket's cumulative count.
    pub fn count_below(&self, bound: f64) -> u64 {
        match bin_of_bound(bound) {
            None => self.zero,
            Some(top) => self.zero + self.bins.range(..=top).map(|(_, n)| n).sum::<u64>(),
        }
    }

    /// Envoy's quantiles (`hist_approx_quantile`, type 1), NaN when empty.
    pub fn quantiles(&self) -> [f64; 10] {
        let total = self.count() as f64;
        if total == 0.0 {
            return [f64::NAN; 10];
        }
        // (left, width, count) per bin with values, ascending.
        let mut bins: Vec<(f64, f64, u64)> = Vec::with_capacity(self.bins.len() + 1);
        if self.zero > 0 {
            bins.push((0.0, 0.0, self.zero));
        }
        bins.extend(self.bins.iter().map(|(b, n)| {
            let (left, width) = bounds(*b);
            (left, width, *n)
        }));
        let mut out = [0.0; 10];
        let mut i = 0;
        let (mut lower, mut upper) = (0.0, bins[0].2 as f64);
        for (q, slot) in QUANTILES.iter().zip(out.iter_mut()) {
            let qn = total * q;
            while i + 1 < bins.len() && upper < qn {
                i += 1;
                lower = upper;
                upper = lower + bins[i].2 as f64;
            }
            let (left, width, n) = bins[i];
            *slot = if width == 0.0 {
                left
            } else {
                let k = (qn - lower).ceil();
                let k = if k == 0.0 { 1.0 } else { k };
                left + k / (n as f64 + 1.0) * width
            };
        }
        out
    }
}

/// A number as C's `%.32g` (Envoy writes Prometheus sums so).
pub fn format_g32(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".into()
        } else if v > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let sci = format!("{v:.31e}");
    let Some((digits, exp)) = sci.split_once('e') else {
        return sci;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..32).contains(&exp) {
        let digits = trim_fraction(digits);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{digits}e{sign}{:02}", exp.abs());
    }
    let decimals = (31 - exp).max(0) as usize;
    trim_fraction(&format!("{v:.decimals$}")).to_string()
}

fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// A quantile as Envoy's `/stats` text writes it (shortest round trip; `nan`).
pub fn format_value(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(values: &[u64]) -> Snapshot {
        let h = Histogram::default();
        values.iter().for_each(|v| h.record(*v));
        h.snapshot()
    }

    #[test]
    fn bins_buckets_and_sums_as_envoy() {
        // Envoy 1.40 with upstream_rs_body_size values 5, 1005 and 0:
        // buckets 10/100/1000 count 2/2/3, the sum is 1052.6685525695427…
        let s = of(&[5, 1005, 0]);
        assert_eq!(s.count(), 3);
        let counts: Vec<u64> = [10.0, 100.0, 1000.0, 5000.0]
            .iter()
            .map(|b| s.count_below(*b))
            .collect();
        assert_eq!(counts, [2, 2, 3, 3]);
        assert_eq!(format_g32(s.sum()), "1052.6685525695427259051939472556");
        // A value at a bound is in its bucket; 0 is below any bound.
        let t = of(&[0, 0, 1]);
        assert_eq!((t.count_below(0.5), t.count_below(1.0)), (2, 3));
        assert_eq!(format_g32(t.sum()), "1.0476190476190476719153821250075");
        let q = t.quantiles();
        assert_eq!(q.map(format_value)[..4], ["0", "0", "0", "1.05"]);
        assert!(of(&[]).quantiles()[0].is_nan());
    }

    #[test]
    fn quantiles_interpolate_within_a_bin() {
        // Envoy: values 0, 0, 1, 1, 2, 2 give P50 1.0333333333333334 and
        // P75 2.033333333333333.
        let q = of(&[0, 0, 1, 1, 2, 2]).quantiles();
        assert_eq!(format_value(q[2]), "1.0333333333333334");
        assert_eq!(format_value(q[3]), "2.033333333333333");
        assert_eq!(format_value(q[9]), "2.066666666666667");
    }

    #[test]
    fn large_values_and_formats() {
        let s = of(&[123_456, 99, 10]);
        assert_eq!(s.count_below(100_000.0), 2);
        assert_eq!(s.count_below(120_000.0), 3);
        assert_eq!(format_g32(0.5), "0.5");
        assert_eq!(format_g32(3600000.0), "3600000");
        // As C prints it: the double nearest 1e40 is not 1e40.
        assert_eq!(format_g32(1e40), "1.0000000000000000303786028427004e+40");
        assert_eq!(format_g32(0.0000152587890625), "1.52587890625e-05");
    }
}
