//! SHA-256 throughput: messages hashed one after the other (the `sha2` crate, with SHA-NI
//! or the `ARMv8` SHA-2 instructions where the CPU has them) against the same messages
//! through `oed_ops::sha256::digest_many` (16 in AVX-512 lanes where the CPU has it),
//! 1 to 16 messages of 64 KiB (the chunk aws-chunked uploads are signed in), from cache;
//! the bytes of all messages together per second.
//!
//! `cargo bench -p oed-benches --bench sha256`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use oed_ops::sha256::{LANES, digest_many};
use sha2::Digest as _;

const LEN: usize = 64 * 1024;

fn bench(c: &mut Criterion) {
    let inputs: Vec<Vec<u8>> = (0..LANES)
        .map(|l| {
            (0..LEN)
                .map(|i| (i as u8).wrapping_mul(31) ^ l as u8)
                .collect()
        })
        .collect();
    let mut g = c.benchmark_group("sha256");
    for n in [1, 4, 5, 6, 8, 12, 16] {
        let msgs: Vec<&[u8]> = inputs[..n].iter().map(Vec::as_slice).collect();
        g.throughput(Throughput::Bytes((n * LEN) as u64));
        g.bench_function(BenchmarkId::new("one by one", n), |b| {
            b.iter(|| {
                let d: Vec<[u8; 32]> = msgs
                    .iter()
                    .map(|m| sha2::Sha256::digest(m).into())
                    .collect();
                black_box(d)
            });
        });
        g.bench_function(BenchmarkId::new("digest_many", n), |b| {
            b.iter(|| black_box(digest_many(&msgs)));
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
