//! The account table's size in memory (`oed_model::account`; target: 10,000 keys and
//! 10,000 buckets in at most 4 MiB) and the cost of the rights check every S3 request of
//! a key makes. The heap is measured with a counting allocator: bytes held after the
//! table is built, minus before.
//!
//! `cargo bench -p oed-model --bench accounts`

// Figures for people, to two decimals.
#![allow(clippy::cast_precision_loss)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use oed_model::account::{
    AccessKey, AccountEntry, AccountKeys, AccountTable, BucketAccess, Right, Rights, new_key_id,
    new_secret,
};
use oed_model::record::VersionId;

struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, counting.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size().cast_signed(), Ordering::Relaxed);
        // SAFETY: as the caller promised.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size().cast_signed(), Ordering::Relaxed);
        // SAFETY: as the caller promised.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const KEYS: usize = 10_000;
const BUCKETS: usize = 10_000;

fn main() {
    let keys = AccountKeys::derive(b"a cluster secret for the benchmark");
    let ids: Vec<String> = (0..KEYS).map(|_| new_key_id()).collect();
    let entries: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            keys.sign(AccountEntry::Key(AccessKey {
                id: id.clone(),
                name: format!("application {i}"),
                secret: keys.seal(id, &new_secret()),
                created_ms: 1_795_000_000_000,
                deleted: false,
                version: VersionId::generate(),
            }))
        })
        .chain((0..BUCKETS).map(|b| {
            keys.sign(AccountEntry::Bucket(BucketAccess {
                bucket: format!("bucket-{b:05}"),
                grants: [(ids[b % KEYS].clone(), Rights::ALL)].into(),
                version: VersionId::generate(),
            }))
        }))
        .collect();
    let before = HELD.load(Ordering::Relaxed);
    let table = AccountTable::of(entries);
    let held = HELD.load(Ordering::Relaxed) - before;
    println!(
        "account table: {KEYS} keys, {BUCKETS} buckets (one grant each): {:.2} MiB on the heap",
        held as f64 / (1 << 20) as f64
    );
    let rounds = 1_000_000;
    let start = Instant::now();
    let mut allowed = 0;
    for i in 0..rounds {
        let t = black_box(&table);
        if t.rights(&ids[i % KEYS], &format!("bucket-{:05}", i % BUCKETS))
            .allow(Right::Read)
        {
            allowed += 1;
        }
    }
    let per = start.elapsed().as_nanos() as f64 / rounds as f64;
    println!(
        "rights check (a key's right in a bucket, the bucket name formatted too): {per:.0} ns ({allowed} allowed)"
    );
}
