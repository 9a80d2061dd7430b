//! MD5 throughput: one stream (the `md-5` crate) against streams hashed together by each
//! kernel of `oed_ops::md5::Lanes` this CPU runs, with 1 to the kernel's width of
//! streams: the bytes of all streams together per second, over 1 MiB per stream (a 4+2
//! stripe of 256 KiB chunks, the piece an upload hands over), from cache. A kernel given
//! fewer streams than its `min_streams()` hands them to the scalar lanes.
//!
//! `cargo bench -p oed-benches --bench md5`

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use oed_ops::md5::{INIT, Lanes, MAX_LANES};

const LEN: usize = 1024 * 1024;

fn bench(c: &mut Criterion) {
    let inputs: Vec<Vec<u8>> = (0..MAX_LANES)
        .map(|l| {
            (0..LEN)
                .map(|i| (i as u8).wrapping_mul(31) ^ l as u8)
                .collect()
        })
        .collect();
    let mut g = c.benchmark_group("md5");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function(BenchmarkId::new("md-5 crate", 1), |b| {
        b.iter(|| {
            let mut state = INIT;
            md5::block_api::compress(&mut state, inputs[0].as_chunks::<64>().0);
            black_box(state)
        });
    });
    for kernel in Lanes::ALL.into_iter().filter(|k| k.supported()) {
        for n in [1, 2, 3, 4, 6, 8, 12, 16] {
            if n > kernel.width() {
                continue;
            }
            let data: Vec<&[u8]> = inputs[..n].iter().map(Vec::as_slice).collect();
            g.throughput(Throughput::Bytes((n * LEN) as u64));
            g.bench_function(BenchmarkId::new(kernel.name(), n), |b| {
                b.iter(|| {
                    let mut states = [INIT; MAX_LANES];
                    kernel.compress(&mut states[..n], &data);
                    black_box(states)
                });
            });
        }
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
