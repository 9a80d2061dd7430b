//! Feeds arbitrary bytes to the shard file reader: it must return errors, never panic,
//! hang or allocate beyond one maximum-size chunk. Also seeks to every stripe it can.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use oed_ec::ShardReader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = ShardReader::new(Cursor::new(data)) else {
        return;
    };
    let stripes = reader.header().stripe_count();
    let mut buf = Vec::new();
    // Bounded: one call per frame, then one more to see the end.
    for _ in 0..=stripes.min(1 << 20) {
        match reader.read_chunk(&mut buf) {
            Ok(Some(_)) | Err(oed_ec::Error::CorruptChunk { .. }) => {}
            Ok(None) | Err(_) => break,
        }
    }
    for s in [0, stripes / 2, stripes.saturating_sub(1), stripes] {
        if reader.seek_to_stripe(s).is_ok() {
            let _ = reader.read_chunk(&mut buf);
        }
    }
});
