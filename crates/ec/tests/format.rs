//! The shard file format: round trips, and that damage of any kind is reported, never
//! served and never a panic.

mod common;

use common::{bytes, shard_files};
use oed_ec::format::{HEADER_LEN, ShardHeader};
use oed_ec::{Error, Layout, ShardReader};
use proptest::prelude::*;
use std::io::Cursor;

/// Reads every frame; returns the chunks or the first error.
fn read_all(file: &[u8]) -> Result<Vec<Vec<u8>>, Error> {
    let mut r = ShardReader::new(file)?;
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while r.read_chunk(&mut buf)?.is_some() {
        out.push(buf.clone());
    }
    Ok(out)
}

/// Reassembles the object from the data shard files.
fn reassemble(layout: Layout, files: &[Vec<u8>]) -> Vec<u8> {
    let chunks: Vec<Vec<Vec<u8>>> = files[..layout.k()]
        .iter()
        .map(|f| read_all(f).unwrap())
        .collect();
    let len = ShardReader::new(files[0].as_slice())
        .unwrap()
        .header()
        .object_len;
    let mut out = Vec::new();
    for s in 0..layout.stripe_count(len) {
        let stripe = layout.stripe(len, s).unwrap();
        for (i, c) in chunks.iter().enumerate() {
            out.extend_from_slice(&c[s as usize][..stripe.chunk_range(i).len()]);
        }
    }
    out
}

#[test]
fn objects_round_trip_through_shard_files() {
    let layout = Layout::new(4, 2, 4096).unwrap();
    for len in [0, 1, 3, 4, 4095, 4 * 4096, 4 * 4096 + 1, 3 * 4 * 4096 + 777] {
        let data = bytes(len, len as u64);
        let files = shard_files(layout, 42, &data);
        for (i, f) in files.iter().enumerate() {
            let h = ShardReader::new(f.as_slice()).unwrap().header().to_owned();
            assert_eq!((h.shard_index as usize, h.version_id), (i, 42));
            assert_eq!(f.len() as u64, h.file_len());
            assert_eq!(
                read_all(f).unwrap().len() as u64,
                layout.stripe_count(len as u64)
            );
        }
        assert_eq!(reassemble(layout, &files), data, "len {len}");
    }
}

#[test]
fn reader_names_the_bad_stripe_and_continues_past_it() {
    let layout = Layout::new(2, 1, 4096).unwrap();
    let data = bytes(5 * 2 * 4096, 1);
    let mut file = shard_files(layout, 1, &data).swap_remove(0);
    let h = ShardReader::new(file.as_slice())
        .unwrap()
        .header()
        .to_owned();
    file[h.frame_offset(3) as usize + 100] ^= 0x40;
    let mut r = ShardReader::new(file.as_slice()).unwrap();
    let mut buf = Vec::new();
    let mut seen = Vec::new();
    loop {
        match r.read_chunk(&mut buf) {
            Ok(Some(s)) => seen.push(Ok(s)),
            Ok(None) => break,
            Err(Error::CorruptChunk { stripe }) => seen.push(Err(stripe)),
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(seen, vec![Ok(0), Ok(1), Ok(2), Err(3), Ok(4)]);
}

#[test]
fn frames_swapped_within_a_file_are_detected() {
    let layout = Layout::new(1, 0, 4096).unwrap();
    let data = bytes(2 * 4096, 2);
    let mut file = shard_files(layout, 1, &data).swap_remove(0);
    let frame = 4096 + 4;
    let (a, b) = file[HEADER_LEN..].split_at_mut(frame);
    a.swap_with_slice(&mut b[..frame]);
    assert!(matches!(
        read_all(&file),
        Err(Error::CorruptChunk { stripe: 0 })
    ));
}

#[test]
fn seek_reads_one_stripe() {
    let layout = Layout::new(2, 1, 4096).unwrap();
    let data = bytes(4 * 2 * 4096 + 10, 3);
    let file = shard_files(layout, 1, &data).swap_remove(1);
    let mut r = ShardReader::new(Cursor::new(&file)).unwrap();
    r.seek_to_stripe(2).unwrap();
    let mut buf = Vec::new();
    assert_eq!(r.read_chunk(&mut buf).unwrap(), Some(2));
    let off = 2 * 2 * 4096 + 4096;
    assert_eq!(buf, data[off..off + 4096]);
    r.seek_to_stripe(4).unwrap();
    assert_eq!(r.read_chunk(&mut buf).unwrap(), Some(4));
    assert_eq!(buf.len(), 5);
    assert_eq!(r.read_chunk(&mut buf).unwrap(), None);
    assert!(r.seek_to_stripe(5).is_err());
}

#[test]
fn trailing_bytes_and_every_truncation_are_errors() {
    let layout = Layout::new(2, 1, 4096).unwrap();
    let file = shard_files(layout, 7, &bytes(2 * 4096 + 5, 4)).swap_remove(2);
    let mut longer = file.clone();
    longer.push(0);
    assert!(matches!(read_all(&longer), Err(Error::TrailingData)));
    for cut in 0..file.len() {
        let err = read_all(&file[..cut]).unwrap_err();
        assert!(
            matches!(err, Error::Truncated { .. }),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn header_errors_name_what_is_wrong() {
    let layout = Layout::new(3, 2, 4096).unwrap();
    let good = ShardHeader::new(5, 4, layout, 100).unwrap().encode();
    let mut b = good;
    b[0] = b'X';
    assert!(matches!(ShardHeader::decode(&b), Err(Error::BadMagic)));
    let mut b = good;
    b[8] = 2;
    assert!(matches!(
        ShardHeader::decode(&b),
        Err(Error::UnsupportedVersion { version: 2 })
    ));
    let mut b = good;
    b[30] ^= 1;
    assert!(matches!(
        ShardHeader::decode(&b),
        Err(Error::HeaderChecksum { .. })
    ));
    // A field out of range with a valid checksum still fails, naming the field.
    let mut b = good;
    b[16] = 9;
    let crc = crc32c::crc32c(&b[..60]);
    b[60..].copy_from_slice(&crc.to_le_bytes());
    let err = ShardHeader::decode(&b).unwrap_err();
    assert!(err.to_string().contains("shard_index"), "{err}");
}

fn any_layout() -> impl Strategy<Value = Layout> {
    (1usize..=12, 0usize..=4, 12u32..=14).prop_map(|(k, m, l)| Layout::new(k, m, 1 << l).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn header_round_trips(
        layout in any_layout(),
        id in any::<u128>(),
        idx in any::<prop::sample::Index>(),
        len in 0u64..1 << 50,
    ) {
        let h = ShardHeader::new(id, idx.index(layout.total()) as u16, layout, len).unwrap();
        prop_assert_eq!(ShardHeader::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn any_flipped_byte_is_detected(
        layout in any_layout(),
        len in 0usize..40_000,
        shard in any::<prop::sample::Index>(),
        pos in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let data = bytes(len, len as u64);
        let mut file = shard_files(layout, 9, &data).swap_remove(shard.index(layout.total()));
        let at = pos.index(file.len());
        file[at] ^= flip;
        let h = ShardReader::new(file.as_slice()).map(|r| r.header().to_owned());
        match read_all(&file) {
            Ok(_) => prop_assert!(false, "flip at {} of {} went unnoticed", at, file.len()),
            Err(Error::CorruptChunk { stripe }) => {
                let h = h.unwrap();
                prop_assert!(at >= h.frame_offset(stripe) as usize);
                prop_assert!(at < h.frame_offset(stripe + 1) as usize);
            }
            Err(e) => prop_assert!(at < HEADER_LEN, "{} at {}", e, at),
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        prop_assert!(read_all(&data).is_err());
        let mut with_magic = b"OEDSHARD\x01\x00".to_vec();
        with_magic.extend_from_slice(&data);
        prop_assert!(read_all(&with_magic).is_err());
    }

    #[test]
    fn headers_with_a_valid_checksum_but_random_fields_never_panic(
        mut raw in proptest::array::uniform32(any::<u8>()),
        tail in proptest::array::uniform32(any::<u8>()),
        body in proptest::collection::vec(any::<u8>(), 0..5000),
    ) {
        raw[..8].copy_from_slice(b"OEDSHARD");
        raw[8] = 1;
        raw[9] = 0;
        let mut b = [0u8; HEADER_LEN];
        b[..32].copy_from_slice(&raw);
        b[32..].copy_from_slice(&tail);
        let crc = crc32c::crc32c(&b[..60]);
        b[60..].copy_from_slice(&crc.to_le_bytes());
        let mut file = b.to_vec();
        file.extend_from_slice(&body);
        let _ = read_all(&file);
    }
}

/// Feeds a file to a `StreamVerifier` in pieces of `piece` bytes.
fn verify_stream(file: &[u8], piece: usize) -> Result<ShardHeader, Error> {
    let mut v = oed_ec::StreamVerifier::new();
    for p in file.chunks(piece.max(1)) {
        v.feed(p)?;
    }
    v.finish()
}

#[test]
fn stream_verifier_accepts_good_files_in_any_piece_size() {
    let layout = Layout::new(3, 2, 4096).unwrap();
    for len in [0, 5, 3 * 4096, 3 * 4096 * 2 + 17] {
        for file in shard_files(layout, 3, &bytes(len, 8)) {
            for piece in [1, 3, 64, 4100, 1 << 20] {
                let h = verify_stream(&file, piece).unwrap();
                assert_eq!(h.file_len(), file.len() as u64);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn stream_verifier_agrees_with_the_reader_on_damage(
        len in 0usize..30_000,
        pos in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut in any::<prop::sample::Index>(),
        piece in 1usize..9000,
    ) {
        let layout = Layout::new(2, 1, 4096).unwrap();
        let mut file = shard_files(layout, 4, &bytes(len, 1)).swap_remove(2);
        let at = pos.index(file.len());
        file[at] ^= flip;
        prop_assert!(verify_stream(&file, piece).is_err());
        file[at] ^= flip;
        let cut = cut.index(file.len());
        prop_assert!(verify_stream(&file[..cut], piece).is_err());
        let mut longer = file.clone();
        longer.push(1);
        prop_assert!(matches!(verify_stream(&longer, piece), Err(Error::TrailingData)));
    }
}

#[test]
fn read_chunk_with_takes_the_frame_from_its_filler_and_checks_what_it_fills() {
    let layout = Layout::new(2, 1, 4096).unwrap();
    let data = bytes(2 * 2 * 4096, 6);
    let file = shard_files(layout, 1, &data).swap_remove(0);
    // A filler that reads as a file-backed one would, in pieces of at most 1000 bytes.
    let pieces = |r: &mut &[u8], buf: &mut Vec<u8>, n: usize| -> std::io::Result<()> {
        assert!(buf.is_empty(), "a filler is given an empty buffer");
        while buf.len() < n {
            let take = (n - buf.len()).min(1000).min(r.len());
            if take == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&r[..take]);
            *r = &r[take..];
        }
        Ok(())
    };
    let mut r = ShardReader::new(file.as_slice()).unwrap();
    let mut buf = vec![9u8; 3];
    assert_eq!(r.read_chunk_with(&mut buf, pieces).unwrap(), Some(0));
    assert_eq!(buf, data[..4096]);

    // A filler that returns too few bytes is an error, not a short chunk.
    let short = |r: &mut &[u8], buf: &mut Vec<u8>, n: usize| -> std::io::Result<()> {
        buf.extend_from_slice(&r[..n - 1]);
        Ok(())
    };
    assert!(matches!(
        r.read_chunk_with(&mut buf, short),
        Err(Error::Io(_))
    ));

    // An input ending inside a frame is Truncated, whichever filler reads it.
    let cut = &file[..HEADER_LEN + 4096 + 4 + 100];
    let mut r = ShardReader::new(cut).unwrap();
    assert_eq!(r.read_chunk_with(&mut buf, pieces).unwrap(), Some(0));
    assert!(matches!(
        r.read_chunk_with(&mut buf, pieces),
        Err(Error::Truncated { stripe: 1 })
    ));
}
