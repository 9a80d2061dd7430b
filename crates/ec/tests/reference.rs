//! `oed-ec` against the `reed-solomon-erasure` crate, whose output is the reference: the
//! same parity for every profile, and exact reconstruction for every erasure pattern.

use oed_ec::{Codec, Error, Kernel};
use proptest::prelude::*;
use reed_solomon_erasure::galois_8::ReedSolomon;

fn random_shards(k: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed | 1;
    (0..k)
        .map(|_| {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 32) as u8
                })
                .collect()
        })
        .collect()
}

/// Our encoding of `data`, with a given kernel.
fn encode(codec: &Codec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut shards: Vec<Vec<u8>> = data.to_vec();
    shards.resize(codec.total(), vec![0xEE; len]);
    let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(Vec::as_mut_slice).collect();
    codec.encode_shards(&mut refs).expect("encode");
    shards
}

fn reference(k: usize, m: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut shards: Vec<Vec<u8>> = data.to_vec();
    shards.resize(k + m, vec![0; len]);
    // The reference refuses empty shards; their parity is empty too.
    if m > 0 && len > 0 {
        ReedSolomon::new(k, m).unwrap().encode(&mut shards).unwrap();
    }
    shards
}

/// All subsets of `0..n` with at most `max` members.
fn subsets(n: usize, max: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|s| s.count_ones() as usize <= max)
        .map(|s| (0..n).filter(|i| s & (1 << i) != 0).collect())
        .collect()
}

#[test]
fn every_kernel_encodes_like_the_reference_for_small_profiles() {
    for kernel in Kernel::available() {
        for k in 1..=8 {
            for m in 0..=4 {
                let codec = Codec::with_kernel(k, m, kernel).unwrap();
                for len in [0, 1, 7, 64, 100, 1000] {
                    let data = random_shards(k, len, (k * 31 + m * 7 + len) as u64);
                    assert_eq!(
                        encode(&codec, &data),
                        reference(k, m, &data),
                        "kernel {kernel} k={k} m={m} len={len}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_erasure_pattern_of_at_most_m_shards_reconstructs_exactly() {
    for kernel in Kernel::available() {
        for (k, m) in [
            (1, 1),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (6, 3),
            (4, 4),
            (8, 3),
        ] {
            let codec = Codec::with_kernel(k, m, kernel).unwrap();
            let shards = encode(&codec, &random_shards(k, 333, k as u64 * 101 + m as u64));
            for lost in subsets(k + m, m) {
                let mut damaged: Vec<Vec<u8>> = shards.clone();
                let mut present = vec![true; k + m];
                for &i in &lost {
                    damaged[i].fill(0x5A);
                    present[i] = false;
                }
                let mut refs: Vec<&mut [u8]> = damaged.iter_mut().map(Vec::as_mut_slice).collect();
                codec.reconstruct(&mut refs, &present).unwrap();
                assert_eq!(damaged, shards, "kernel {kernel} k={k} m={m} lost {lost:?}");
            }
        }
    }
}

#[test]
fn more_than_m_losses_are_refused_and_write_nothing() {
    let codec = Codec::new(4, 2).unwrap();
    let shards = encode(&codec, &random_shards(4, 50, 9));
    let mut damaged = shards.clone();
    let mut refs: Vec<&mut [u8]> = damaged.iter_mut().map(Vec::as_mut_slice).collect();
    let err = codec
        .reconstruct(&mut refs, &[false, false, true, false, true, true])
        .unwrap_err();
    assert!(matches!(
        err,
        Error::TooFewShards {
            available: 3,
            needed: 4
        }
    ));
    assert_eq!(damaged, shards);
}

#[test]
fn reconstruct_data_leaves_missing_parity_alone() {
    let codec = Codec::new(3, 2).unwrap();
    let shards = encode(&codec, &random_shards(3, 100, 5));
    let mut damaged = shards.clone();
    damaged[1].fill(0);
    damaged[4].fill(0);
    let mut refs: Vec<&mut [u8]> = damaged.iter_mut().map(Vec::as_mut_slice).collect();
    codec
        .reconstruct_data(&mut refs, &[true, false, true, true, false])
        .unwrap();
    assert_eq!(damaged[1], shards[1]);
    assert_eq!(damaged[4], vec![0; 100]);
}

#[test]
fn widest_profiles_match_the_reference() {
    for (k, m) in [(200, 56), (1, 255), (128, 128)] {
        let codec = Codec::new(k, m).unwrap();
        let data = random_shards(k, 40, 77);
        let ours = encode(&codec, &data);
        assert_eq!(ours, reference(k, m, &data), "k={k} m={m}");
        // Lose the first m shards (data when m <= k): the hardest decode matrix.
        let mut lost: Vec<Option<Vec<u8>>> = ours.iter().cloned().map(Some).collect();
        for s in lost.iter_mut().take(m) {
            *s = None;
        }
        codec.reconstruct_vecs(&mut lost).unwrap();
        let back: Vec<Vec<u8>> = lost.into_iter().map(Option::unwrap).collect();
        assert_eq!(back, ours, "k={k} m={m}");
    }
}

#[test]
fn verify_detects_any_changed_byte() {
    let codec = Codec::new(4, 2).unwrap();
    let mut shards = encode(&codec, &random_shards(4, 70_000, 3));
    let refs: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
    assert!(codec.verify(&refs).unwrap());
    for (s, pos) in [(0, 0), (3, 69_999), (4, 33_000), (5, 12)] {
        shards[s][pos] ^= 0x01;
        let refs: Vec<&[u8]> = shards.iter().map(Vec::as_slice).collect();
        assert!(!codec.verify(&refs).unwrap(), "shard {s} byte {pos}");
        shards[s][pos] ^= 0x01;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_profiles_lengths_and_losses_round_trip(
        k in 1usize..=16,
        m in 0usize..=6,
        len in 0usize..5000,
        seed in any::<u64>(),
        lose in proptest::collection::vec(any::<prop::sample::Index>(), 0..=6),
    ) {
        let codec = Codec::new(k, m).unwrap();
        let data = random_shards(k, len, seed);
        let shards = encode(&codec, &data);
        prop_assert_eq!(&shards, &reference(k, m, &data));
        let mut lost: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
        for i in lose.iter().take(m) {
            lost[i.index(k + m)] = None;
        }
        codec.reconstruct_vecs(&mut lost).unwrap();
        let back: Vec<Vec<u8>> = lost.into_iter().map(Option::unwrap).collect();
        prop_assert_eq!(back, shards);
    }
}

/// `data` cut at the offsets `cuts` picks (repeats and zero-length pieces included).
fn cut(data: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
    at.push(0);
    at.push(data.len());
    at.sort_unstable();
    at.windows(2).map(|w| data[w[0]..w[1]].to_vec()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Data shards in pieces cut anywhere code to the same parity, with every kernel,
    /// and their frame CRCs are the CRCs of the shards joined.
    #[test]
    fn shards_in_pieces_encode_like_shards_joined(
        k in 1usize..=10,
        m in 0usize..=4,
        len in 0usize..3000,
        seed in any::<u64>(),
        cuts in proptest::collection::vec(
            proptest::collection::vec(any::<prop::sample::Index>(), 0..12), 10),
    ) {
        let data = random_shards(k, len, seed);
        let pieces: Vec<Vec<Vec<u8>>> =
            data.iter().zip(&cuts).map(|(d, c)| cut(d, c)).collect();
        let refs: Vec<&[Vec<u8>]> = pieces.iter().map(Vec::as_slice).collect();
        for kernel in Kernel::available() {
            let codec = Codec::with_kernel(k, m, kernel).unwrap();
            let mut parity = vec![vec![0xEE_u8; len]; m];
            let mut out: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            codec.encode_pieces(&refs, &mut out).unwrap();
            prop_assert_eq!(&parity[..], &encode(&codec, &data)[k..], "{:?}", kernel);
        }
        for (d, p) in data.iter().zip(&pieces) {
            prop_assert_eq!(oed_ec::frame_crc_pieces(seed, p), oed_ec::frame_crc(seed, d));
        }
    }
}

#[test]
fn pieces_of_the_wrong_length_are_refused_and_write_nothing() {
    let codec = Codec::new(2, 1).unwrap();
    let a: &[&[u8]] = &[b"abc", b"d"];
    let b: &[&[u8]] = &[b"abc"];
    let mut parity = [0xEE_u8; 4];
    let got = codec.encode_pieces(&[a, b], &mut [&mut parity[..]]);
    assert!(
        matches!(
            got,
            Err(Error::ShardLength {
                index: 1,
                expected: 4,
                got: 3
            })
        ),
        "{got:?}"
    );
    assert_eq!(parity, [0xEE; 4]);
    let got = codec.encode_pieces(&[a], &mut [&mut parity[..]]);
    assert!(matches!(got, Err(Error::ShardCount { .. })), "{got:?}");
}
