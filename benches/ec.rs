//! Erasure-coding throughput with the method of the EPYC erasure-coding study: one thread,
//! inputs and outputs drawn at random from a pool of at least 1 GiB so they come from
//! memory rather than cache, encode counted as data + parity bytes, rebuild of one lost
//! data shard counted as the k shards read plus the one rebuilt. memcpy over the same pool
//! in the same run gives every figure a ratio (`benches/ec-report` prints the table).
//! Where ISA-L is installed (Debian's libisal-dev), its `ec_encode_data` runs on the same
//! pool in the same groups (`encode/isa-l`, `rebuild1/isa-l`), with its tables made
//! outside the timed loop.
//!
//! `cargo bench -p oed-benches --bench ec` (set `OED_BENCH_POOL_MIB` to shrink the pool).
//! The `stripe4+2/...` groups compare the coordinator's stripe copied into one buffer
//! with the same stripe coded and checksummed in the pieces it was received in.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main,
};
use oed_benches::Pool;
use oed_benches::isal::Isal;
use oed_ec::{Codec, Kernel};
use reed_solomon_erasure::galois_8::ReedSolomon;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

fn pool_bytes() -> usize {
    std::env::var("OED_BENCH_POOL_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(1024 * MIB, |m| m * MIB)
}

fn label(size: usize) -> String {
    if size >= MIB {
        format!("{}MiB", size / MIB)
    } else {
        format!("{}KiB", size / KIB)
    }
}

/// The baseline every group is compared with: one random shard copied to another.
fn bench_memcpy(g: &mut BenchmarkGroup<'_, WallTime>, pool: &mut Pool, size: usize) {
    g.throughput(Throughput::Bytes(size as u64));
    g.bench_function("memcpy", |b| {
        b.iter(|| pool.with_slots(1, 1, |i, o| o[0].copy_from_slice(black_box(i[0]))));
    });
}

/// The groups of one code profile and shard size: memcpy, every oed-ec kernel, and (where
/// asked) ISA-L and the reed-solomon-erasure crate on the same pool.
fn profile(
    c: &mut Criterion,
    isal: Option<&Isal>,
    (k, m, shard): (usize, usize, usize),
    with_isal: bool,
    with_reference: bool,
) {
    let mut pool = Pool::new(pool_bytes(), shard);
    let mut g = c.benchmark_group(format!("rs{k}+{m}/{}", label(shard)));
    bench_memcpy(&mut g, &mut pool, shard);
    for kernel in Kernel::available() {
        let codec = Codec::with_kernel(k, m, kernel).expect("profile");
        g.throughput(Throughput::Bytes(((k + m) * shard) as u64));
        g.bench_function(BenchmarkId::new("encode", kernel), |b| {
            b.iter(|| pool.with_slots(k, m, |d, p| codec.encode(d, p).expect("encode")));
        });
        let mut present = vec![true; k + m];
        present[0] = false;
        g.throughput(Throughput::Bytes(((k + 1) * shard) as u64));
        g.bench_function(BenchmarkId::new("rebuild1", kernel), |b| {
            b.iter(|| {
                pool.with_slots(0, k + m, |_, s| {
                    codec.reconstruct_data(s, &present).expect("rebuild");
                });
            });
        });
    }
    if let Some(isal) = isal.filter(|_| with_isal) {
        let encoder = isal.encoder(k, m);
        g.throughput(Throughput::Bytes(((k + m) * shard) as u64));
        g.bench_function(BenchmarkId::new("encode", "isa-l"), |b| {
            b.iter(|| pool.with_slots(k, m, |d, p| encoder.apply(d, p)));
        });
        let rebuilder = isal.rebuilder(k, m);
        g.throughput(Throughput::Bytes(((k + 1) * shard) as u64));
        g.bench_function(BenchmarkId::new("rebuild1", "isa-l"), |b| {
            b.iter(|| pool.with_slots(k, 1, |s, out| rebuilder.apply(s, out)));
        });
    }
    if with_reference {
        // The reed-solomon-erasure crate's pure-Rust path, for scale.
        let rs = ReedSolomon::new(k, m).expect("profile");
        g.throughput(Throughput::Bytes(((k + m) * shard) as u64));
        g.bench_function("encode/reference", |b| {
            b.iter(|| pool.with_slots(k, m, |d, p| rs.encode_sep(d, p).expect("encode")));
        });
    }
    g.finish();
}

fn erasure_coding(c: &mut Criterion) {
    let isal = Isal::load();
    if isal.is_none() {
        eprintln!("ISA-L is not installed (apt-get install libisal-dev): no ISA-L figures");
    }
    let isal = isal.as_ref();
    profile(c, isal, (10, 4, 4 * KIB), true, true);
    profile(c, isal, (10, 4, 4 * MIB), true, true);
    profile(c, isal, (4, 2, MIB), true, false);
    profile(c, isal, (8, 3, MIB), false, false);
}

fn checksums(c: &mut Criterion) {
    for size in [4 * KIB, MIB] {
        let mut pool = Pool::new(pool_bytes(), size);
        let mut g = c.benchmark_group(format!("crc32c/{}", label(size)));
        bench_memcpy(&mut g, &mut pool, size);
        g.bench_function("crc32c", |b| {
            b.iter(|| pool.with_slots(1, 0, |i, _| crc32c::crc32c(black_box(i[0]))));
        });
        g.finish();
    }
}

/// A PUT's stripe on the coordinator (4+2, 1 MiB chunks), from a body received in pieces
/// (drawn from the pool, as from memory): copied into one buffer per stripe, coded, and
/// each chunk's CRC32C taken, as the coordinator once did; against coded and checksummed in its
/// pieces where they are (`Codec::encode_pieces`, `frame_crc_pieces`). Throughput counts the
/// stripe's data bytes.
fn stripe_from_pieces(c: &mut Criterion) {
    let (k, m, chunk) = (4, 2, MIB);
    let codec = Codec::new(k, m).expect("profile");
    for piece in [64 * KIB, 16 * KIB] {
        let n = k * chunk / piece;
        let per_chunk = chunk / piece;
        let mut pool = Pool::new(pool_bytes(), piece);
        let mut g = c.benchmark_group(format!("stripe4+2/{}-pieces", label(piece)));
        g.throughput(Throughput::Bytes((k * chunk) as u64));
        let mut stripe = vec![0u8; k * chunk];
        let mut parity = vec![vec![0u8; chunk]; m];
        g.bench_function("copy,encode,crc", |b| {
            b.iter(|| {
                pool.with_slots(n, 0, |pieces, _| {
                    for (dst, p) in stripe.chunks_exact_mut(piece).zip(pieces) {
                        dst.copy_from_slice(p);
                    }
                    let d: Vec<&[u8]> = stripe.chunks_exact(chunk).collect();
                    let mut p: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                    codec.encode(&d, &mut p).expect("encode");
                    let crcs: u32 = d
                        .iter()
                        .copied()
                        .chain(parity.iter().map(Vec::as_slice))
                        .map(|c| oed_ec::frame_crc(1, c))
                        .fold(0, |a, c| a ^ c);
                    black_box(crcs)
                })
            });
        });
        g.bench_function("encode,crc in pieces", |b| {
            b.iter(|| {
                pool.with_slots(n, 0, |pieces, _| {
                    let d: Vec<&[&[u8]]> = pieces.chunks_exact(per_chunk).collect();
                    let mut p: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                    codec.encode_pieces(&d, &mut p).expect("encode");
                    let data: u32 = d
                        .iter()
                        .map(|c| oed_ec::frame_crc_pieces(1, c))
                        .fold(0, |a, c| a ^ c);
                    let parity: u32 = parity
                        .iter()
                        .map(|c| oed_ec::frame_crc(1, c))
                        .fold(0, |a, c| a ^ c);
                    black_box(data ^ parity)
                })
            });
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = erasure_coding, checksums, stripe_from_pieces
}
criterion_main!(benches);
