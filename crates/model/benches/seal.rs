//! The cost of sealing a shard upload's body ([`oed_model::seal`]: Poly1305, with AVX-512
//! IFMA where the CPU has it), against the `poly1305` crate's and the other MACs it was
//! chosen from (BLAKE3 keyed, HMAC-SHA256, POLYVAL) and the CRC32C each
//! chunk already gets: bytes per second over a 256 KiB chunk (the default chunk size), fed
//! as one piece, from cache. Built for armv7 and aarch64 and run under qemu-user as well
//! (`docs/results.md`, "Shard upload seal").
//!
//! `cargo bench -p oed-model --bench seal`

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hmac::Mac as _;
use polyval::universal_hash::{KeyInit as _, UniversalHash as _};

const LEN: usize = 256 * 1024;

fn bench(c: &mut Criterion) {
    let data: Vec<u8> = (0..LEN).map(|i| (i as u8).wrapping_mul(31)).collect();
    let key = [7u8; 32];
    let mut g = c.benchmark_group("seal");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function("poly1305 (the seal)", |b| {
        b.iter(|| {
            let mut s = oed_model::seal::Seal::new(&key);
            s.update(black_box(&data));
            black_box(s.tag())
        });
    });
    g.bench_function("poly1305 crate", |b| {
        b.iter(|| {
            let mut m =
                <poly1305::Poly1305 as polyval::universal_hash::KeyInit>::new((&key).into());
            m.update_padded(black_box(&data));
            black_box(m.finalize())
        });
    });
    g.bench_function("blake3 keyed", |b| {
        b.iter(|| {
            let mut h = blake3::Hasher::new_keyed(&key);
            h.update(black_box(&data));
            black_box(h.finalize())
        });
    });
    g.bench_function("hmac-sha256", |b| {
        b.iter(|| {
            let mut m = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(&key).unwrap();
            m.update(black_box(&data));
            black_box(m.finalize().into_bytes())
        });
    });
    g.bench_function("polyval", |b| {
        b.iter(|| {
            let mut m = polyval::Polyval::new(&[7u8; 16].into());
            m.update_padded(black_box(&data));
            black_box(m.finalize())
        });
    });
    g.bench_function("crc32c (already paid)", |b| {
        b.iter(|| black_box(crc32c::crc32c(black_box(&data))));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
