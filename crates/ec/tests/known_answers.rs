//! Known-answer vectors: the exact bytes of shard files, committed in `vectors/`. A change
//! to the code, the matrix, the layout or the format that alters stored bytes fails here
//! (which breaks every drive's existing data, so it must be a new format version).
//! Regenerate only on purpose: `OED_BLESS=1 cargo test -p oed-ec --test known_answers`.

mod common;

use common::{bytes, shard_files};
use oed_ec::Layout;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

const CASES: &[(usize, usize, u32, usize)] = &[
    (1, 0, 4096, 0),
    (1, 1, 4096, 5000),
    (2, 1, 4096, 10),
    (4, 2, 4096, 3 * 4 * 4096 + 123),
    (10, 4, 4096, 100_000),
    (8, 3, 8192, 70_001),
    (17, 5, 4096, 9_999),
];

fn hex(data: &[u8]) -> String {
    data.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn render() -> String {
    let mut out = String::from("# k m chunk_size object_len shard sha256(shard file)\n");
    for &(k, m, chunk, len) in CASES {
        let layout = Layout::new(k, m, chunk).unwrap();
        let files = shard_files(
            layout,
            0x00ED_0000_0000_0000_0000_0000_0000_0001,
            &bytes(len, 0x00C0_FFEE),
        );
        for (i, f) in files.iter().enumerate() {
            let digest = hex(&Sha256::digest(f));
            let _ = writeln!(out, "{k} {m} {chunk} {len} {i} {digest}");
        }
    }
    out
}

fn hex_dump(data: &[u8]) -> String {
    data.chunks(32).map(|c| hex(c) + "\n").collect()
}

#[test]
fn shard_files_are_byte_identical_to_the_committed_vectors() {
    // The crate's directory as cargo gives it when it runs the test, not as it was when the
    // test was compiled: a build directory shared by two checkouts of the same commit can
    // run a binary compiled in the other one, which may be gone.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(
            || std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            std::path::PathBuf::from,
        )
        .join("tests/vectors");
    let digests = render();
    // One small case in full, so a reader of FORMAT.md can check every byte by hand.
    let layout = Layout::new(2, 1, 4096).unwrap();
    let small = shard_files(layout, 1, b"hello, drive");
    let full: String = small.iter().map(|f| hex_dump(f) + "--\n").collect();
    if std::env::var_os("OED_BLESS").is_some() {
        std::fs::write(dir.join("shards.sha256"), &digests).unwrap();
        std::fs::write(dir.join("hello-2+1.hex"), &full).unwrap();
    }
    let want = std::fs::read_to_string(dir.join("shards.sha256")).unwrap();
    assert_eq!(digests, want, "shard bytes changed; see the module docs");
    let want = std::fs::read_to_string(dir.join("hello-2+1.hex")).unwrap();
    assert_eq!(full, want, "shard bytes changed; see the module docs");
}
