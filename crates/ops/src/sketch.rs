//! Quantiles with a stated relative error: DDSketch (Masson, Rim and Lee, VLDB 2019).
//!
//! A value `x > 0` goes to bucket `ceil(log_γ x)` with `γ = (1 + α) / (1 - α)`; every
//! value of a bucket lies within a relative `α` of the bucket's representative
//! `2γ^i / (γ + 1)`, so a quantile read from the buckets is within `α` of a value of the
//! data at that rank: `|q̂ - q| <= α |q|`. Negative values have buckets of their own
//! (by `|x|`), values too close to zero to have a bucket are counted as zero.
//!
//! Merging adds bucket counts, so it is exact, associative and commutative: the merged
//! sketch of runs is the sketch of the whole, bit for bit, whatever the order (unlike
//! t-digest, whose merge depends on it). The buckets are bounded ([`MAX_BUCKETS`] per
//! sign); past that, the buckets of the smallest magnitudes are folded into the lowest
//! kept one, as the paper does. That fold is also order-free: the kept buckets are
//! always the [`MAX_BUCKETS`] highest keys of all the values seen, so a merge of folded
//! sketches equals the fold of the whole. Only quantiles that land in a folded bucket
//! lose the guarantee, and the answer says whether any did.

// Bucket keys are logarithms: they fit an i32 by far, and counts become ranks as floats.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_precision_loss,
    clippy::cast_sign_loss
)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Most buckets kept per sign. With the default accuracy (1%), 2048 buckets span a ratio
/// of about 10^35 between the smallest and the largest magnitude kept exactly.
pub const MAX_BUCKETS: usize = 2048;
/// The relative accuracy when the request names none.
pub const DEFAULT_ACCURACY: f64 = 0.01;
/// Most quantiles one request may ask for.
pub const MAX_QUANTILES: usize = 100;

/// Magnitudes below this count as zero (they have no bucket).
const MIN_INDEXABLE: f64 = 1e-300;

/// A DDSketch: bucket counts by key, per sign.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sketch {
    /// Values counted as zero.
    #[serde(default)]
    pub zero: u64,
    /// Counts of positive values by bucket key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", with = "pairs")]
    pub positive: BTreeMap<i32, u64>,
    /// Counts of negative values by the bucket key of their magnitude.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", with = "pairs")]
    pub negative: BTreeMap<i32, u64>,
    /// Whether buckets were folded to keep within [`MAX_BUCKETS`].
    #[serde(default)]
    pub folded: bool,
}

/// Buckets as `[key, count]` pairs: JSON object keys are strings, which a partial
/// inside a tagged enum would not read back as numbers.
mod pairs {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<i32, u64>, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<(i32, u64)> = m.iter().map(|(&k, &n)| (k, n)).collect();
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<i32, u64>, D::Error> {
        Ok(Vec::<(i32, u64)>::deserialize(d)?.into_iter().collect())
    }
}

/// The bucket mapping for one relative accuracy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mapping {
    accuracy: f64,
    gamma: f64,
    inv_ln_gamma: f64,
}

/// One quantile of the answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantile {
    /// The rank asked for, in `[0, 1]`.
    pub q: f64,
    /// The value at that rank, within `accuracy` relative.
    pub value: f64,
}

/// The quantiles of an answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// The relative error bound of every value: `|value - exact| <= accuracy * |exact|`.
    pub accuracy: f64,
    /// Whether the bound holds for all of them (false when the data's magnitudes span
    /// more buckets than the sketch keeps, and a quantile fell among the folded ones).
    pub guaranteed: bool,
    /// The quantiles, in the order asked.
    pub values: Vec<Quantile>,
}

impl Mapping {
    /// The mapping for `accuracy` (relative), which must be in `[0.0001, 0.1]`.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for an accuracy out of range.
    pub fn new(accuracy: f64) -> Result<Self> {
        if !(1e-4..=0.1).contains(&accuracy) {
            return Err(Error::BadArgument(format!(
                "quantile accuracy must be between 0.0001 and 0.1 (relative), got {accuracy}"
            )));
        }
        let gamma = (1.0 + accuracy) / (1.0 - accuracy);
        Ok(Self {
            accuracy,
            gamma,
            inv_ln_gamma: 1.0 / gamma.ln(),
        })
    }

    fn key(&self, magnitude: f64) -> i32 {
        // Saturates for infinities, which then sit in the outermost bucket.
        (magnitude.ln() * self.inv_ln_gamma).ceil() as i32
    }

    fn value(&self, key: i32) -> f64 {
        2.0 * self.gamma.powi(key) / (self.gamma + 1.0)
    }

    /// Adds a (non-NaN) value.
    pub fn add(&self, s: &mut Sketch, v: f64) {
        if v > MIN_INDEXABLE {
            *s.positive.entry(self.key(v)).or_insert(0) += 1;
        } else if v < -MIN_INDEXABLE {
            *s.negative.entry(self.key(-v)).or_insert(0) += 1;
        } else {
            s.zero += 1;
        }
    }

    /// Adds (non-NaN) values, then keeps the buckets within bounds. The keys of a batch
    /// are counted in a dense array first when they span few buckets (they do, for most
    /// data), so that the map is touched once per bucket rather than once per value.
    pub fn add_all(&self, s: &mut Sketch, values: &[f64]) {
        for batch in values.chunks(1024) {
            let mut keys = [0i32; 1024];
            let (mut lo, mut hi, mut n) = (i32::MAX, i32::MIN, 0);
            for &v in batch {
                if v > MIN_INDEXABLE {
                    let k = self.key(v);
                    keys[n] = k;
                    n += 1;
                    lo = lo.min(k);
                    hi = hi.max(k);
                } else {
                    self.add(s, v);
                }
            }
            let keys = &keys[..n];
            if n > 0 && i64::from(hi) - i64::from(lo) < 4096 {
                let mut dense = [0u32; 4096];
                for &k in keys {
                    dense[(k - lo) as usize] += 1;
                }
                for (i, &c) in dense[..=(hi - lo) as usize].iter().enumerate() {
                    if c > 0 {
                        *s.positive.entry(lo + i as i32).or_insert(0) += u64::from(c);
                    }
                }
            } else {
                for &k in keys {
                    *s.positive.entry(k).or_insert(0) += 1;
                }
            }
        }
        bound(s);
    }

    /// The quantiles `qs` of the values in `s`, clamped to the exact `min` and `max`.
    #[must_use]
    pub fn quantiles(&self, s: &Sketch, qs: &[f64], min: f64, max: f64) -> Quantiles {
        let count = s.zero + s.positive.values().sum::<u64>() + s.negative.values().sum::<u64>();
        let mut guaranteed = true;
        let values = qs
            .iter()
            .map(|&q| {
                let rank = (q * (count.saturating_sub(1)) as f64).floor() as u64;
                let (value, exact) = self.at_rank(s, rank);
                guaranteed &= exact;
                Quantile {
                    q,
                    value: value.clamp(min, max),
                }
            })
            .collect();
        Quantiles {
            accuracy: self.accuracy,
            guaranteed,
            values,
        }
    }

    /// The value of rank `rank` (0-based, ascending), and whether its bucket was kept
    /// exactly (not folded).
    fn at_rank(&self, s: &Sketch, rank: u64) -> (f64, bool) {
        let mut seen = 0u64;
        // Ascending values: negatives from the largest magnitude down, zeros, positives.
        let lowest_negative = s.negative.keys().next().copied();
        for (&k, &n) in s.negative.iter().rev() {
            seen += n;
            if rank < seen {
                return (-self.value(k), !(s.folded && Some(k) == lowest_negative));
            }
        }
        seen += s.zero;
        if rank < seen {
            return (0.0, true);
        }
        let lowest_positive = s.positive.keys().next().copied();
        for (&k, &n) in &s.positive {
            seen += n;
            if rank < seen {
                return (self.value(k), !(s.folded && Some(k) == lowest_positive));
            }
        }
        (f64::NAN, true)
    }
}

/// Adds `right`'s counts to `left` and keeps the buckets within bounds.
pub fn merge(left: &mut Sketch, right: Sketch) {
    left.zero += right.zero;
    left.folded |= right.folded;
    for (k, n) in right.positive {
        *left.positive.entry(k).or_insert(0) += n;
    }
    for (k, n) in right.negative {
        *left.negative.entry(k).or_insert(0) += n;
    }
    bound(left);
}

/// Folds the buckets of the smallest magnitudes into the lowest kept one, per sign.
fn bound(s: &mut Sketch) {
    for store in [&mut s.positive, &mut s.negative] {
        if store.len() <= MAX_BUCKETS {
            continue;
        }
        s.folded = true;
        let cut = *store
            .keys()
            .nth(store.len() - MAX_BUCKETS)
            .expect("more keys than kept");
        let kept = store.split_off(&cut);
        let low: u64 = store.values().sum();
        *store = kept;
        *store.entry(cut).or_insert(0) += low;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn exact(sorted: &[f64], q: f64) -> f64 {
        sorted[(q * (sorted.len() - 1) as f64).floor() as usize]
    }

    #[test]
    fn quantiles_are_within_the_accuracy() {
        let m = Mapping::new(0.01).unwrap();
        let mut values: Vec<f64> = (0..100_000)
            .map(|i| ((f64::from(i) * 0.618_033_988_7).fract() - 0.3) * 1e4)
            .collect();
        let mut s = Sketch::default();
        m.add_all(&mut s, &values);
        values.sort_by(f64::total_cmp);
        let qs = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 1.0];
        let got = m.quantiles(&s, &qs, values[0], values[values.len() - 1]);
        assert!(got.guaranteed);
        for (want_q, got) in qs.iter().zip(&got.values) {
            let want = exact(&values, *want_q);
            assert!(
                (got.value - want).abs() <= 0.01 * want.abs() + 1e-9,
                "q {want_q}: {} vs {want}",
                got.value
            );
        }
    }

    /// A sketch survives the trip to the coordinator inside a tagged partial.
    #[test]
    fn sketches_cross_the_network_whole() {
        let m = Mapping::new(0.02).unwrap();
        let mut s = Sketch::default();
        m.add_all(&mut s, &[-264.0, -0.5, 0.0, 3.0, 1e6]);
        let stats = crate::stats::Stats {
            quantiles: Some(vec![0.5]),
            ..crate::stats::Stats::new(crate::stats::Format::F64le)
        };
        let mut p = stats.empty();
        p.sketch = Some(s);
        let partial = crate::op::Partial::Stats(p);
        let json = serde_json::to_string(&partial).unwrap();
        let back: crate::op::Partial = serde_json::from_str(&json).unwrap();
        assert_eq!(back, partial);
    }

    #[test]
    fn bad_accuracy_is_refused() {
        for a in [0.0, 0.5, -0.01, f64::NAN] {
            assert!(Mapping::new(a).is_err(), "{a}");
        }
    }

    #[test]
    fn folding_keeps_the_largest_magnitudes_in_any_order() {
        let m = Mapping::new(0.1).unwrap();
        // Magnitudes spanning far more buckets than are kept.
        let values: Vec<f64> = (0..6000).map(|i| 1.2f64.powi(i - 3000)).collect();
        let mut whole = Sketch::default();
        m.add_all(&mut whole, &values);
        assert!(whole.folded && whole.positive.len() == MAX_BUCKETS);
        let (a, b) = values.split_at(3333);
        let (mut x, mut y) = (Sketch::default(), Sketch::default());
        m.add_all(&mut x, b);
        m.add_all(&mut y, a);
        merge(&mut x, y);
        assert_eq!(x, whole);
        let top = m.quantiles(&whole, &[1.0], 0.0, f64::MAX);
        assert!(top.guaranteed);
        let bottom = m.quantiles(&whole, &[0.0], 0.0, f64::MAX);
        assert!(!bottom.guaranteed);
    }

    proptest! {
        /// Sketches of runs merged in any order equal the sketch of the whole, and every
        /// quantile is within the accuracy of the exact one.
        #[test]
        fn merges_are_exact_and_quantiles_bounded(values in prop::collection::vec(-1e9f64..1e9, 1..3000), cuts in prop::collection::vec(0usize..3000, 0..5), acc in 0.001f64..0.05) {
            let m = Mapping::new(acc).unwrap();
            let mut whole = Sketch::default();
            m.add_all(&mut whole, &values);
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < values.len()).collect();
            bounds.extend([0, values.len()]);
            bounds.sort_unstable();
            bounds.dedup();
            let mut merged = Sketch::default();
            for r in bounds.windows(2).rev() {
                let mut part = Sketch::default();
                m.add_all(&mut part, &values[r[0]..r[1]]);
                merge(&mut merged, part);
            }
            prop_assert_eq!(&merged, &whole);
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let qs = [0.0, 0.1, 0.5, 0.77, 1.0];
            let got = m.quantiles(&merged, &qs, sorted[0], sorted[sorted.len() - 1]);
            for (q, g) in qs.iter().zip(&got.values) {
                let want = exact(&sorted, *q);
                prop_assert!((g.value - want).abs() <= acc * want.abs() * (1.0 + 1e-9) + 1e-290, "q {} got {} want {}", q, g.value, want);
            }
        }
    }
}
