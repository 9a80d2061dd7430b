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
    for (name, edges, quantiles) in [
        ("stats-f64", None, false),
        ("stats-f64-hist64", Some(64), false),
        ("stats-f64-quantiles", None, true),
    ] {
        let stats = Stats {
            edges: edges
                .map(|n: usize| (0..=n).map(|i| -1e6 + 2e6 * i as f64 / n as f64).collect()),
            quantiles: quantiles.then(|| vec![0.5, 0.99]),
            ..Stats::new(Format::F64le)
        };
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut f = stats.fold(0);
                f.update(black_box(&data));
                f.finish()
            });
        });
    }
    // Text numbers: a CSV of readings, its third column.
    let csv: Vec<u8> = (0..)
        .flat_map(|i: u64| {
            format!("{i},sensor-{},{:.4}\n", i % 17, (i as f64).sin() * 1e3).into_bytes()
        })
        .take(CHUNK)
        .collect();
    let stats = Stats {
        column: Some(oed_ops::stats::Column::Index(2)),
        ..Stats::new(Format::Csv)
    };
    let plan = oed_ops::op::Plan::new(
        oed_ops::op::Op::Stats(stats),
        4 * CHUNK as u64,
        CHUNK as u64,
    )
    .expect("a valid operation");
    g.bench_function("stats-csv-column", |b| {
        b.iter(|| plan.run(CHUNK as u64, black_box(&csv)));
    });
    // Compression, of text (the same CSV) as it compresses in practice.
    for (name, codec, level) in [
        ("zstd-1", oed_ops::compress::Codec::Zstd, Some(1)),
        ("zstd-3", oed_ops::compress::Codec::Zstd, Some(3)),
        ("lz4", oed_ops::compress::Codec::Lz4, None),
    ] {
        let c = oed_ops::compress::Compress { codec, level };
        g.bench_function(name, |b| b.iter(|| c.sizes(black_box(&csv))));
    }
    let dedup = oed_ops::dedup::Dedup { average: 8192 };
    g.bench_function("dedup-8k", |b| b.iter(|| dedup.run(black_box(&data))));
    g.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
