//! Shared pieces of OED's benchmarks: a memory pool that inputs are drawn from at random,
//! as the erasure-coding throughput study did, so data comes from memory and not cache.

pub mod isal;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// A pool of equally sized buffers filled with random bytes, to draw benchmark inputs from.
pub struct Pool {
    slots: Vec<Vec<u8>>,
    rng: SmallRng,
}

impl Pool {
    /// At least `total` bytes in buffers of `slot` bytes (at least 32 buffers).
    #[must_use]
    pub fn new(total: usize, slot: usize) -> Self {
        let count = total.div_ceil(slot).max(32);
        let mut rng = SmallRng::seed_from_u64(0x0ED0_0ED0);
        let slots = (0..count)
            .map(|_| {
                let mut v = vec![0u8; slot];
                rng.fill_bytes(&mut v);
                v
            })
            .collect();
        Self { slots, rng }
    }

    /// `n` distinct slot indices picked at random.
    pub fn pick(&mut self, n: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let i = self.rng.gen_range(0..self.slots.len());
            if !out.contains(&i) {
                out.push(i);
            }
        }
        out
    }

    /// Picks `ins + outs` distinct slots; calls `f` with the first `ins` read-only and the
    /// rest writable.
    pub fn with_slots<T>(
        &mut self,
        ins: usize,
        outs: usize,
        f: impl FnOnce(&[&[u8]], &mut [&mut [u8]]) -> T,
    ) -> T {
        let idx = self.pick(ins + outs);
        let mut order: Vec<usize> = (0..idx.len()).collect();
        order.sort_unstable_by_key(|&p| idx[p]);
        // Walk the slots once in index order, splitting off each picked one.
        let mut picked: Vec<Option<&mut [u8]>> = (0..idx.len()).map(|_| None).collect();
        let mut rest: &mut [Vec<u8>] = &mut self.slots;
        let mut base = 0;
        for p in order {
            let (one, tail) = std::mem::take(&mut rest)[idx[p] - base..]
                .split_first_mut()
                .expect("picked index is in the pool");
            picked[p] = Some(one.as_mut_slice());
            rest = tail;
            base = idx[p] + 1;
        }
        let mut all: Vec<&mut [u8]> = picked.into_iter().flatten().collect();
        let (inputs, outputs) = all.split_at_mut(ins);
        let inputs: Vec<&[u8]> = inputs.iter().map(|s| &**s).collect();
        f(&inputs, outputs)
    }
}
