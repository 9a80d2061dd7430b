//! Stripe layout: every object byte maps to exactly one place in one data chunk, and the
//! spans of a range cover it exactly, in order.

use oed_ec::Layout;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn spans_cover_a_range_exactly(
        k in 1usize..=10,
        m in 0usize..=4,
        log2 in 12u32..=13,
        len in 0u64..200_000,
        a in any::<prop::sample::Index>(),
        b in any::<prop::sample::Index>(),
    ) {
        let layout = Layout::new(k, m, 1 << log2).unwrap();
        let (mut lo, mut hi) = (a.index(len as usize + 1) as u64, b.index(len as usize + 1) as u64);
        if lo > hi { std::mem::swap(&mut lo, &mut hi); }
        let mut pos = lo;
        for s in layout.spans(len, lo..hi) {
            prop_assert_eq!(s.object_offset, pos);
            prop_assert!(s.len > 0);
            let stripe = layout.stripe(len, s.stripe).unwrap();
            prop_assert!(s.chunk < k);
            prop_assert!(s.offset + s.len <= stripe.chunk_len);
            // The chunk position maps back to the same object offset.
            let back = stripe.object_offset + (s.chunk * stripe.chunk_len + s.offset) as u64;
            prop_assert_eq!(back, pos);
            prop_assert!(s.offset + s.len <= stripe.chunk_range(s.chunk).len());
            pos += s.len as u64;
        }
        prop_assert_eq!(pos, hi);
    }

    #[test]
    fn stripes_tile_the_object(k in 1usize..=16, len in 0u64..1_000_000) {
        let layout = Layout::new(k, 2, 4096).unwrap();
        let mut off = 0;
        let mut shard = 0;
        for s in 0..layout.stripe_count(len) {
            let st = layout.stripe(len, s).unwrap();
            prop_assert_eq!(st.object_offset, off);
            prop_assert!(st.data_len > 0);
            prop_assert!(st.chunk_len * k >= st.data_len);
            prop_assert!(st.chunk_len * k < st.data_len + k);
            off += st.data_len as u64;
            shard += st.chunk_len as u64;
        }
        prop_assert_eq!(off, len);
        prop_assert_eq!(shard, layout.shard_data_len(len));
    }
}

#[test]
fn ranges_past_the_end_are_clipped() {
    let layout = Layout::new(2, 1, 4096).unwrap();
    assert_eq!(
        layout.spans(100, 50..1000).map(|s| s.len).sum::<usize>(),
        50
    );
    assert_eq!(layout.spans(100, 200..300).count(), 0);
    assert_eq!(layout.spans(0, 0..10).count(), 0);
}
