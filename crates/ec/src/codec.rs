//! The systematic Reed-Solomon code: the encoding matrix, encode, verify and reconstruct.
//!
//! The matrix is the `reed-solomon-erasure` crate's: a `(k+m) x k` Vandermonde matrix
//! (entry `(r, c) = r^c`) multiplied by the inverse of its top `k x k` square, so the top
//! rows are the identity (data shards are stored as they are) and any `k` rows are
//! invertible. Reconstruction uses the first `k` shards present and computes only the
//! shards that are missing; what that takes (the rows used, the shards made, their
//! coefficients: the inverse of that selection, times the encoding rows of missing
//! parity) is worked out once per erasure pattern and cached, so a rebuild allocates
//! nothing and runs the kernel at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::kernel::Kernel;
pub use crate::limits::MAX_SHARDS;
use crate::matrix::Matrix;

/// Rebuild plans kept per codec; the cache is emptied when it grows past this.
const DECODE_CACHE_LIMIT: usize = 256;

/// Set of shard indices (one bit each).
type ShardSet = [u64; 4];

/// The key of a rebuild plan: the shards present, and how many shards from the first
/// are wanted (`k`: data only; `k + m`: all).
type PlanKey = (ShardSet, usize);

/// What rebuilding one erasure pattern takes, worked out once: the `k` shards read, the
/// shards made, and for each made one its row of coefficients over those read.
#[derive(Debug)]
struct Plan {
    used: Vec<usize>,
    wanted: Vec<usize>,
    coeffs: Vec<u8>,
}

/// Shards a stripe may have for a rebuild to pass them to the kernel from the stack;
/// wider codes collect them in a vector.
const STACK_SHARDS: usize = 32;

/// A Reed-Solomon code with `k` data and `m` parity shards.
///
/// Shards of one stripe all have the same length (any length, including 0). The codec is
/// `Send + Sync`; share it with an `Arc` and call it from many threads.
#[derive(Debug)]
pub struct Codec {
    k: usize,
    m: usize,
    kernel: Kernel,
    matrix: Matrix,
    /// Rows k..k+m of `matrix`, flattened: the coefficients every encode uses.
    parity_rows: Vec<u8>,
    /// Rebuild plans, per erasure pattern.
    cache: Mutex<HashMap<PlanKey, Arc<Plan>>>,
}

impl Codec {
    /// A codec with `k >= 1` data shards, `m >= 0` parity shards, `k + m <= 256`, using the
    /// fastest kernel this CPU has.
    ///
    /// # Errors
    /// [`Error::InvalidProfile`] when the bounds above are not met.
    pub fn new(k: usize, m: usize) -> Result<Self> {
        Self::with_kernel(k, m, Kernel::detect())
    }

    /// Like [`Codec::new`] with a chosen kernel (benchmarks and tests compare kernels).
    ///
    /// # Errors
    /// [`Error::InvalidProfile`] for bad `k`/`m`; [`Error::KernelUnsupported`] when this
    /// CPU cannot run `kernel`.
    pub fn with_kernel(k: usize, m: usize, kernel: Kernel) -> Result<Self> {
        if k == 0 {
            return Err(Error::InvalidProfile {
                k,
                m,
                reason: "k must be at least 1",
            });
        }
        if k + m > MAX_SHARDS {
            return Err(Error::InvalidProfile {
                k,
                m,
                reason: "k + m must be at most 256",
            });
        }
        if !kernel.is_supported() {
            return Err(Error::KernelUnsupported { kernel });
        }
        let vandermonde = Matrix::vandermonde(k + m, k);
        let top = vandermonde
            .select_rows(0..k)
            .invert()
            .expect("the top square of a Vandermonde matrix with distinct points is invertible");
        let matrix = vandermonde.mul(&top);
        let parity_rows = (k..k + m).flat_map(|r| matrix.row(r).to_vec()).collect();
        Ok(Self {
            k,
            m,
            kernel,
            matrix,
            parity_rows,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// Data shards per stripe.
    #[must_use]
    pub fn k(&self) -> usize {
        self.k
    }

    /// Parity shards per stripe.
    #[must_use]
    pub fn m(&self) -> usize {
        self.m
    }

    /// All shards per stripe, `k + m`.
    #[must_use]
    pub fn total(&self) -> usize {
        self.k + self.m
    }

    /// The kernel doing the byte work.
    #[must_use]
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Coefficient `(row, col)` of the `(k+m) x k` encoding matrix.
    #[must_use]
    pub fn matrix_entry(&self, row: usize, col: usize) -> u8 {
        self.matrix.get(row, col)
    }

    /// Computes the `m` parity shards of the `k` data shards.
    ///
    /// # Errors
    /// [`Error::ShardCount`] or [`Error::ShardLength`] when the shapes are wrong; nothing is
    /// written then.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<()> {
        check_count(self.k, data.len())?;
        check_count(self.m, parity.len())?;
        let len = data[0].len();
        check_lengths(len, data.iter().map(|s| s.len()))?;
        check_lengths(len, parity.iter().map(|s| s.len()))?;
        if self.m > 0 {
            self.kernel.mul_rows(&self.parity_rows, data, parity);
        }
        Ok(())
    }

    /// [`Codec::encode`] for data shards that each arrive in pieces (a received body's
    /// buffers, as they came), so that nobody has to copy them into one buffer per shard
    /// first. The code works byte column by byte column, so the kernel runs once per
    /// stretch over which no data shard moves on to its next piece, and the parity is the
    /// same as [`Codec::encode`]'s over the shards joined. Pieces may be empty; few and
    /// large pieces code at the kernel's full speed.
    ///
    /// # Errors
    /// [`Error::ShardCount`] or [`Error::ShardLength`] (a data shard's pieces adding up to
    /// another length than the parity shards) when the shapes are wrong; nothing is
    /// written then.
    pub fn encode_pieces<P: AsRef<[u8]>>(
        &self,
        data: &[&[P]],
        parity: &mut [&mut [u8]],
    ) -> Result<()> {
        check_count(self.k, data.len())?;
        check_count(self.m, parity.len())?;
        let Some(len) = parity.first().map(|p| p.len()) else {
            return Ok(());
        };
        check_lengths(len, parity.iter().map(|s| s.len()))?;
        check_lengths(
            len,
            data.iter()
                .map(|d| d.iter().map(|p| p.as_ref().len()).sum()),
        )?;
        // For each data shard: its piece being coded and the offset in it.
        let mut at = vec![(0usize, 0usize); self.k];
        let mut rows: Vec<&[u8]> = Vec::with_capacity(self.k);
        let mut done = 0;
        while done < len {
            // The next stretch over which no data shard moves to another piece.
            let mut run = len - done;
            for (pieces, (i, off)) in data.iter().zip(at.iter_mut()) {
                while pieces[*i].as_ref().len() == *off {
                    *i += 1;
                    *off = 0;
                }
                run = run.min(pieces[*i].as_ref().len() - *off);
            }
            rows.clear();
            for (pieces, (i, off)) in data.iter().zip(at.iter_mut()) {
                rows.push(&pieces[*i].as_ref()[*off..*off + run]);
                *off += run;
            }
            let mut out: Vec<&mut [u8]> = parity
                .iter_mut()
                .map(|p| &mut p[done..done + run])
                .collect();
            self.kernel.mul_rows(&self.parity_rows, &rows, &mut out);
            done += run;
        }
        Ok(())
    }

    /// [`Codec::encode`] on one slice of `k + m` shards: data first, parity after.
    ///
    /// # Errors
    /// As [`Codec::encode`].
    pub fn encode_shards(&self, shards: &mut [&mut [u8]]) -> Result<()> {
        check_count(self.total(), shards.len())?;
        let (data, parity) = shards.split_at_mut(self.k);
        let data: Vec<&[u8]> = data.iter().map(|s| &**s).collect();
        self.encode(&data, parity)
    }

    /// Whether the parity shards match the data shards.
    ///
    /// # Errors
    /// [`Error::ShardCount`] or [`Error::ShardLength`] when the shapes are wrong.
    pub fn verify(&self, shards: &[&[u8]]) -> Result<bool> {
        check_count(self.total(), shards.len())?;
        let len = shards[0].len();
        check_lengths(len, shards.iter().map(|s| s.len()))?;
        // Recompute in pieces so verifying a large stripe needs little memory.
        let piece = crate::kernel::PIECE;
        let mut buf = vec![0u8; piece.min(len) * self.m];
        let mut start = 0;
        while start < len {
            let end = (start + piece).min(len);
            let data: Vec<&[u8]> = shards[..self.k].iter().map(|s| &s[start..end]).collect();
            let mut outs: Vec<&mut [u8]> = buf.chunks_mut(end - start).take(self.m).collect();
            self.encode(&data, &mut outs)?;
            let same = outs
                .iter()
                .zip(&shards[self.k..])
                .all(|(o, s)| **o == s[start..end]);
            if !same {
                return Ok(false);
            }
            start = end;
        }
        Ok(true)
    }

    /// Rebuilds every shard whose `present` flag is false, in place.
    ///
    /// Buffers of missing shards must already have the stripe's length; their contents are
    /// overwritten. Present shards are only read.
    ///
    /// # Errors
    /// [`Error::ShardCount`], [`Error::ShardLength`], or [`Error::TooFewShards`] when fewer
    /// than `k` are present; no buffer is written then.
    pub fn reconstruct(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<()> {
        self.rebuild(shards, present, self.total())
    }

    /// Rebuilds only the missing data shards (the read path needs no parity).
    ///
    /// # Errors
    /// As [`Codec::reconstruct`].
    pub fn reconstruct_data(&self, shards: &mut [&mut [u8]], present: &[bool]) -> Result<()> {
        self.rebuild(shards, present, self.k)
    }

    /// Rebuilds the `None` entries of `shards` as new vectors (the convenience form the
    /// `reed-solomon-erasure` crate offers).
    ///
    /// # Errors
    /// As [`Codec::reconstruct`]; also [`Error::ShardLength`] when present shards differ.
    pub fn reconstruct_vecs(&self, shards: &mut [Option<Vec<u8>>]) -> Result<()> {
        check_count(self.total(), shards.len())?;
        let present: Vec<bool> = shards.iter().map(Option::is_some).collect();
        let len = shards.iter().flatten().map(Vec::len).next().unwrap_or(0);
        let count = present.iter().filter(|&&p| p).count();
        if count < self.k {
            return Err(Error::TooFewShards {
                available: count,
                needed: self.k,
            });
        }
        check_lengths(len, shards.iter().flatten().map(Vec::len))?;
        for s in shards.iter_mut().filter(|s| s.is_none()) {
            *s = Some(vec![0; len]);
        }
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().flatten().map(Vec::as_mut_slice).collect();
        self.reconstruct(&mut refs, &present)
    }

    fn rebuild(&self, shards: &mut [&mut [u8]], present: &[bool], limit: usize) -> Result<()> {
        check_count(self.total(), shards.len())?;
        check_count(self.total(), present.len())?;
        let len = shards[0].len();
        check_lengths(len, shards.iter().map(|s| s.len()))?;
        // Nothing missing: nothing to work out (at least k shards are there then).
        if present[..limit].iter().all(|p| *p) {
            return Ok(());
        }
        let plan = self.plan(present, limit)?;
        if plan.wanted.is_empty() {
            return Ok(());
        }
        if self.total() <= STACK_SHARDS {
            let mut inputs: [&[u8]; STACK_SHARDS] = [&[]; STACK_SHARDS];
            let mut outputs: [&mut [u8]; STACK_SHARDS] = Default::default();
            let (n, w) = gather(shards, &plan, &mut inputs, &mut outputs);
            self.kernel
                .mul_rows(&plan.coeffs, &inputs[..n], &mut outputs[..w]);
        } else {
            let mut inputs: Vec<&[u8]> = vec![&[]; self.k];
            let mut outputs: Vec<&mut [u8]> =
                (0..plan.wanted.len()).map(|_| Default::default()).collect();
            let (n, w) = gather(shards, &plan, &mut inputs, &mut outputs);
            self.kernel
                .mul_rows(&plan.coeffs, &inputs[..n], &mut outputs[..w]);
        }
        Ok(())
    }

    /// The plan of rebuilding the shards below `limit` that are not `present`, from the
    /// cache.
    fn plan(&self, present: &[bool], limit: usize) -> Result<Arc<Plan>> {
        let mut key: ShardSet = [0; 4];
        for (i, _) in present.iter().enumerate().filter(|(_, p)| **p) {
            key[i / 64] |= 1 << (i % 64);
        }
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = cache.get(&(key, limit)) {
            return Ok(Arc::clone(p));
        }
        let used: Vec<usize> = (0..self.total())
            .filter(|&i| present[i])
            .take(self.k)
            .collect();
        if used.len() < self.k {
            return Err(Error::TooFewShards {
                available: used.len(),
                needed: self.k,
            });
        }
        let wanted: Vec<usize> = (0..limit).filter(|&i| !present[i]).collect();
        let decode = self
            .matrix
            .select_rows(used.iter().copied())
            .invert()
            .expect("any k rows of the encoding matrix are invertible");
        // Row i of `decode` maps the used shards to data shard i; a parity shard's row is
        // its encoding row times `decode`.
        let mut coeffs = Vec::with_capacity(wanted.len() * self.k);
        for &w in &wanted {
            if w < self.k {
                coeffs.extend_from_slice(decode.row(w));
            } else {
                let row = self.matrix.select_rows([w]).mul(&decode);
                coeffs.extend_from_slice(row.row(0));
            }
        }
        let plan = Arc::new(Plan {
            used,
            wanted,
            coeffs,
        });
        if cache.len() >= DECODE_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert((key, limit), Arc::clone(&plan));
        Ok(plan)
    }

    #[cfg(test)]
    pub(crate) fn cached_decode_matrices(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }
}

/// Puts the shards `plan` reads into `inputs` and those it makes into `outputs`, in its
/// order; how many of each.
fn gather<'a>(
    shards: &'a mut [&mut [u8]],
    plan: &Plan,
    inputs: &mut [&'a [u8]],
    outputs: &mut [&'a mut [u8]],
) -> (usize, usize) {
    let (mut n, mut w) = (0, 0);
    for (i, shard) in shards.iter_mut().enumerate() {
        if plan.used.get(n) == Some(&i) {
            inputs[n] = &**shard;
            n += 1;
        } else if plan.wanted.get(w) == Some(&i) {
            outputs[w] = &mut **shard;
            w += 1;
        }
    }
    (n, w)
}

fn check_count(expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(Error::ShardCount { expected, got })
    }
}

fn check_lengths(expected: usize, lens: impl Iterator<Item = usize>) -> Result<()> {
    for (index, got) in lens.enumerate() {
        if got != expected {
            return Err(Error::ShardLength {
                index,
                expected,
                got,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_bounds_are_enforced() {
        assert!(matches!(
            Codec::new(0, 2),
            Err(Error::InvalidProfile { .. })
        ));
        assert!(matches!(
            Codec::new(200, 57),
            Err(Error::InvalidProfile { .. })
        ));
        assert!(Codec::new(256, 0).is_ok());
        assert!(Codec::new(1, 255).is_ok());
    }

    #[test]
    fn data_rows_are_the_identity() {
        let c = Codec::new(5, 3).unwrap();
        for r in 0..5 {
            for col in 0..5 {
                assert_eq!(c.matrix_entry(r, col), u8::from(r == col));
            }
        }
    }

    #[test]
    fn decode_matrices_are_cached_per_pattern() {
        let c = Codec::new(4, 2).unwrap();
        let mut shards: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 64]).collect();
        {
            let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(Vec::as_mut_slice).collect();
            c.encode_shards(&mut refs).unwrap();
        }
        for _ in 0..3 {
            let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(Vec::as_mut_slice).collect();
            c.reconstruct(&mut refs, &[false, true, true, true, true, true])
                .unwrap();
        }
        assert_eq!(c.cached_decode_matrices(), 1);
        let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(Vec::as_mut_slice).collect();
        c.reconstruct(&mut refs, &[true, false, true, true, true, true])
            .unwrap();
        assert_eq!(c.cached_decode_matrices(), 2);
        // The same shards present, the data alone wanted: another plan (it makes fewer
        // shards); nothing missing below k: none at all.
        let lost_parity = [true, false, true, true, true, false];
        c.reconstruct_data(&mut refs, &lost_parity).unwrap();
        assert_eq!(c.cached_decode_matrices(), 3);
        c.reconstruct(&mut refs, &lost_parity).unwrap();
        assert_eq!(c.cached_decode_matrices(), 4);
        c.reconstruct_data(&mut refs, &[true, true, true, true, false, false])
            .unwrap();
        assert_eq!(c.cached_decode_matrices(), 4);
    }

    #[test]
    fn shape_errors_write_nothing() {
        let c = Codec::new(2, 1).unwrap();
        let mut a = vec![1u8; 4];
        let mut b = vec![2u8; 5];
        let mut p = vec![7u8; 4];
        let mut refs: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut p];
        assert!(matches!(
            c.encode_shards(&mut refs),
            Err(Error::ShardLength { index: 1, .. })
        ));
        assert_eq!(p, vec![7u8; 4]);
        let mut refs: Vec<&mut [u8]> = vec![&mut a, &mut p];
        assert!(matches!(
            c.reconstruct(&mut refs, &[true, true]),
            Err(Error::ShardCount {
                expected: 3,
                got: 2
            })
        ));
    }
}
