//! MD5 throughput, one stream against streams hashed in lanes (`oed_ops::md5`):
//! the bytes of all lanes together per second, over 1 MiB per lane (a 4+2 stripe of 256
//! KiB chunks, the piece an upload hands over), from cache.
//!
//! `cargo bench -p oed-benches --bench md5`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use oed_ops::md5::{INIT, compress_lanes};

const LEN: usize = 1024 * 1024;

fn lanes<const N: usize>(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    inputs: &[Vec<u8>],
) {
    c.throughput(Throughput::Bytes((N * LEN) as u64));
    c.bench_function(BenchmarkId::new("lanes", N), |b| {
        b.iter(|| {
            let mut states = [INIT; N];
            compress_lanes(&mut states, std::array::from_fn(|l| &inputs[l][..]));
            black_box(states)
        });
    });
}

fn bench(c: &mut Criterion) {
    let inputs: Vec<Vec<u8>> = (0..4u8)
        .map(|l| (0..LEN).map(|i| (i as u8).wrapping_mul(31) ^ l).collect())
        .collect();
    let mut g = c.benchmark_group("md5");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function(BenchmarkId::new("md-5 crate, one stream", 1), |b| {
        b.iter(|| {
            let mut state = INIT;
            md5::block_api::compress(&mut state, inputs[0].as_chunks::<64>().0);
            black_box(state)
        });
    });
    lanes::<1>(&mut g, &inputs);
    lanes::<2>(&mut g, &inputs);
    lanes::<3>(&mut g, &inputs);
    lanes::<4>(&mut g, &inputs);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
