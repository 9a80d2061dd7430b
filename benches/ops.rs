//! Near-data kernels on one core: the bytes one call folds per second, over one 256 KiB
//! chunk (OED's default chunk size) from cache, as a drive folds each chunk it holds.
//! Targets on one x86 core: checksums and statistics at least 2 GB/s.
//!
//! `cargo bench -p oed-benches --bench ops`

// Bench data: small counts as floats.
#![allow(clippy::cast_precision_loss)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use oed_ops::checksum::{Blake3, Crc};
use oed_ops::stats::{Format, Stats};

const CHUNK: usize = 256 * 1024;

fn chunk() -> Vec<u8> {
    // Doubles spread over a wide range, so statistics see realistic values.
    (0..CHUNK / 8)
        .flat_map(|i| ((i as f64).sin() * 1e6).to_le_bytes())
        .collect()
}

fn kernels(c: &mut Criterion) {
    let data = chunk();
    let mut g = c.benchmark_group("ops");
    g.throughput(Throughput::Bytes(CHUNK as u64));
    g.bench_function("crc32c", |b| b.iter(|| Crc::Crc32c.of(black_box(&data))));
    g.bench_function("crc64nvme", |b| {
        b.iter(|| Crc::Crc64nvme.of(black_box(&data)));
    });
    let blake = Blake3::new(CHUNK as u64, 4 * CHUNK as u64).expect("a valid subtree size");
    g.bench_function("blake3-subtree", |b| {
        b.iter(|| blake.run(CHUNK as u64, black_box(&data)));
    });
    let text: Vec<u8> = (0..CHUNK)
        .map(|i| {
            if i % 97 == 96 {
                b'\n'
            } else {
                b"abcdefghij klmnop qrstuvw"[i % 25]
            }
        })
        .collect();
    for (name, regex, pattern) in [
        ("grep-literal", false, "needle"),
        ("grep-regex", true, r"err(or)? [0-9]+"),
    ] {
        let grep = oed_ops::grep::Grep {
            pattern: pattern.into(),
            regex,
            lines: 0,
        };
        let m = grep.matcher(2 * CHUNK as u64).expect("a valid pattern");
        g.bench_function(name, |b| {
            b.iter(|| m.run(CHUNK as u64, black_box(&text)));
        });
    }
    for (name, edges) in [("stats-f64", None), ("stats-f64-hist64", Some(64))] {
        let stats = Stats {
            format: Format::F64le,
            edges: edges
                .map(|n: usize| (0..=n).map(|i| -1e6 + 2e6 * i as f64 / n as f64).collect()),
        };
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut f = stats.fold(0);
                f.update(black_box(&data));
                f.finish()
            });
        });
    }
    g.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
