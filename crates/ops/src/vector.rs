//! Element-wise vector add of two objects of the same length and record format into a
//! third: `c[i] = a[i] + b[i]`, one of the example applications of the study OED comes
//! from. Integers wrap on overflow (as in most array libraries); floats add as IEEE-754
//! does (NaNs and infinities propagate).
//!
//! It saves no bytes: both inputs must meet somewhere, and in an erasure-coded store the
//! chunks of two objects lie on different drives, so the coordinator streams both and
//! writes the sum (see the daemon's `compute::vector`). It is here for the kernel.

use serde::{Deserialize, Serialize};

use crate::stats::Format;
use crate::{Error, Result};

/// What an `add` operation writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Add {
    /// The records of both objects (a fixed-width format).
    pub format: Format,
    /// The key of the second object, in the same bucket.
    pub with: String,
    /// The key of the sum written.
    pub target: String,
}

impl Add {
    /// Checks the format and the keys, for objects of `len` bytes.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for a text format, a length that is not whole records, or
    /// an empty or too long key.
    pub fn validate(&self, len: u64) -> Result<()> {
        if self.format.is_text() {
            return Err(Error::BadArgument(
                "add takes fixed-width numbers (u8 .. f64le), not text".into(),
            ));
        }
        let w = self.format.width() as u64;
        if !len.is_multiple_of(w) {
            return Err(Error::BadArgument(format!(
                "{len} bytes are not a whole number of {w}-byte records"
            )));
        }
        for (what, key) in [("with", &self.with), ("target", &self.target)] {
            if key.is_empty() || key.len() > 1024 {
                return Err(Error::BadArgument(format!(
                    "add: the {what} key must have 1 to 1024 bytes"
                )));
            }
        }
        Ok(())
    }
}

/// Appends `a + b`, record by record, to `out`; `a` and `b` are whole records of
/// `format`, of equal length.
///
/// # Errors
/// [`Error::BadArgument`] when they are not.
pub fn add(format: Format, a: &[u8], b: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let w = format.width();
    if a.len() != b.len() || !a.len().is_multiple_of(w) || format.is_text() {
        return Err(Error::BadArgument(format!(
            "add: {} and {} bytes are not equal runs of {w}-byte records",
            a.len(),
            b.len()
        )));
    }
    out.reserve(a.len());
    macro_rules! each {
        ($t:ty, $n:expr, $op:expr) => {{
            let (xs, _) = a.as_chunks::<$n>();
            let (ys, _) = b.as_chunks::<$n>();
            for (x, y) in xs.iter().zip(ys) {
                let s: $t = $op(<$t>::from_le_bytes(*x), <$t>::from_le_bytes(*y));
                out.extend_from_slice(&s.to_le_bytes());
            }
        }};
    }
    match format {
        Format::U8 => each!(u8, 1, u8::wrapping_add),
        Format::U16le => each!(u16, 2, u16::wrapping_add),
        Format::U32le => each!(u32, 4, u32::wrapping_add),
        Format::U64le => each!(u64, 8, u64::wrapping_add),
        Format::I32le => each!(i32, 4, i32::wrapping_add),
        Format::I64le => each!(i64, 8, i64::wrapping_add),
        Format::F32le => each!(f32, 4, |x: f32, y: f32| x + y),
        Format::F64le => each!(f64, 8, |x: f64, y: f64| x + y),
        Format::Text | Format::Csv => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_add_and_integers_wrap() {
        let a: Vec<u8> = [1.5f64, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let b: Vec<u8> = [0.25f64, 2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        add(Format::F64le, &a, &b, &mut out).unwrap();
        let sum: Vec<f64> = out
            .chunks(8)
            .map(|r| f64::from_le_bytes(r.try_into().unwrap()))
            .collect();
        assert_eq!(sum, [1.75, 0.0]);
        let mut out = Vec::new();
        add(Format::U8, &[250, 1], &[10, 2], &mut out).unwrap();
        assert_eq!(out, [4, 3]);
        let mut out = Vec::new();
        add(
            Format::I32le,
            &i32::MAX.to_le_bytes(),
            &1i32.to_le_bytes(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, i32::MIN.to_le_bytes());
        assert!(add(Format::U16le, &[1, 2], &[1], &mut out).is_err());
        let op = Add {
            format: Format::F64le,
            with: "b".into(),
            target: "c".into(),
        };
        assert!(op.validate(16).is_ok() && op.validate(12).is_err());
        let text = Add {
            format: Format::Csv,
            ..op
        };
        assert!(text.validate(16).is_err());
    }
}
