//! The heal queue: shards that must be rebuilt, kept in the drive's RocksDB so that no
//! restart forgets one.
//!
//! An entry names one shard of one object version and the drive that should hold it. A
//! drive's own shards (`drive` is this drive) are rebuilt here by the healer; entries for
//! other drives are hints, queued here because that drive could not be told (it was down
//! when a write missed it), and handed to it when it answers again. Each drive rebuilds
//! only its own shards, so no two drives ever rebuild the same one.
//!
//! Two kinds of keys share the column family:
//! - `e` drive NUL bucket NUL key: the entry (JSON). One per shard: queueing the same
//!   shard again merges into it (the newer version, the lower redundancy).
//! - `o` drive NUL deferred priority bucket NUL key: the order the healer takes entries
//!   in: not deferred first, then the fewest shards to spare (`redundancy`) first.
//!   An entry whose heal failed is deferred until the deferred ones are retried.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::PoisonError;

use rocksdb::{Direction, IteratorMode, WriteBatch};
use serde::{Deserialize, Serialize};

use super::meta::{Counts, MetaStore};
use oed_model::error::Result;
use oed_model::heal::{HealCause, HealEntry};
use oed_model::record::ObjectRecord;

/// The heal queue of a drive's store, as the layers above it use it
/// ([`crate::Store::heal_queue`]): entries in, the healer's next ones out, and counts.
#[derive(Clone, Copy)]
pub struct HealQueue<'a>(pub(crate) &'a MetaStore);

impl HealQueue<'_> {
    /// Queues `entries`, each merged into the one already queued for its shard (the newer
    /// version wins, and the lower redundancy); for each, whether it was new.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`] or [`oed_model::Error::Record`].
    pub fn queue(&self, entries: &[HealEntry]) -> Result<Vec<bool>> {
        self.0.queue_entries(entries)
    }

    /// Queues this drive's shard of `record` (a chunk failed its CRC32C, or the file is
    /// gone), and counts it as a checksum failure.
    ///
    /// # Errors
    /// As [`HealQueue::queue`]; it is counted either way.
    pub fn queue_corrupt(&self, record: &ObjectRecord, cause: HealCause) -> Result<()> {
        self.0.queue_corrupt(record, cause)
    }

    /// Up to `limit` entries for `drive` in the healer's order: not deferred before
    /// deferred (taken only when `deferred`), fewest to spare first.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`].
    pub fn next(&self, drive: &str, limit: usize, deferred: bool) -> Result<Vec<HealEntry>> {
        self.0.next_heals(drive, limit, deferred)
    }

    /// Removes `entry` once healed, unless a newer one was merged into it meanwhile;
    /// whether it was removed.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`].
    pub fn finish(&self, entry: &HealEntry) -> Result<bool> {
        self.0.finish_heal(entry)
    }

    /// Puts `entry` behind the others until the deferred ones are retried (its heal failed).
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`].
    pub fn defer(&self, entry: &HealEntry) -> Result<()> {
        self.0.defer_heal(entry)
    }

    /// Entries held for `drive` (hints when it is not this drive), up to `limit`.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`].
    pub fn entries_for(&self, drive: &str, limit: usize) -> Result<Vec<HealEntry>> {
        self.0.entries_for(drive, limit)
    }

    /// What the queue holds.
    #[must_use]
    pub fn status(&self) -> QueueCounts {
        self.0.queue_status()
    }

    /// Entries ever queued for this drive's own shards, by cause (since start).
    #[must_use]
    pub fn queued(&self) -> Vec<(HealCause, u64)> {
        self.0.heals_queued()
    }
}

fn entry_key(drive: &str, bucket: &str, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + drive.len() + bucket.len() + key.len());
    k.push(b'e');
    k.extend_from_slice(drive.as_bytes());
    k.push(0);
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(key.as_bytes());
    k
}

/// The key that orders `e` in the healer's queue.
fn order_key(e: &HealEntry, deferred: bool) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + e.drive.len() + e.bucket.len() + e.key.len());
    k.push(b'o');
    k.extend_from_slice(e.drive.as_bytes());
    k.push(0);
    k.push(u8::from(deferred));
    k.push(u8::try_from(e.redundancy).unwrap_or(u8::MAX));
    k.extend_from_slice(e.bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(e.key.as_bytes());
    k
}

/// The stored key of `e`'s entry.
fn entry_key_of(e: &HealEntry) -> Vec<u8> {
    entry_key(&e.drive, &e.bucket, &e.key)
}

/// The stored form of an entry: the entry and whether it is deferred.
#[derive(Serialize, Deserialize)]
struct QueuedEntry {
    #[serde(flatten)]
    entry: HealEntry,
    #[serde(default)]
    deferred: bool,
}

/// What the queue holds, by cause: this drive's own shards, and hints for other drives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounts {
    /// This drive's shards to rebuild, by cause label.
    pub local: BTreeMap<String, u64>,
    /// Their bytes, by cause label.
    pub local_bytes: BTreeMap<String, u64>,
    /// Entries held for other drives.
    pub hints: u64,
}

impl MetaStore {
    /// Counts the queue (at open) and moves entries of the earlier format (one per object,
    /// in the `heal` family) into it.
    pub(crate) fn open_queue(&self) -> Result<()> {
        let legacy: Vec<Box<[u8]>> = self
            .db
            .iterator_cf(self.cf(super::meta::HEAL_LEGACY), IteratorMode::Start)
            .map(|kv| kv.map(|(k, _)| k))
            .collect::<std::result::Result<_, _>>()
            .map_err(crate::meta_error)?;
        for k in &legacy {
            let Some((bucket, key)) = std::str::from_utf8(k).ok().and_then(|s| s.split_once('\0'))
            else {
                continue;
            };
            if let Some(rec) = self.object(bucket, key)? {
                let e = HealEntry::of(
                    &rec,
                    rec.shard_index,
                    HealCause::ReadCorrupt,
                    0,
                    &self.drive_id,
                );
                self.queue_entries(std::slice::from_ref(&e))?;
            }
            self.db
                .delete_cf(self.cf(super::meta::HEAL_LEGACY), k)
                .map_err(crate::meta_error)?;
        }
        let mut counts = Counts::default();
        for kv in self.db.iterator_cf(
            self.cf(super::meta::QUEUE),
            IteratorMode::From(b"e", Direction::Forward),
        ) {
            let (k, v) = kv.map_err(crate::meta_error)?;
            if !k.starts_with(b"e") {
                break;
            }
            if let Ok(s) = serde_json::from_slice::<QueuedEntry>(&v) {
                counts.add(&s.entry, &self.drive_id, 1);
            }
        }
        *self.queue_counts() = counts;
        Ok(())
    }

    fn queue_counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.heal_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `entries`, each merged into the one already queued for its shard: the newer
    /// version wins, and the lower redundancy. Returns, for each, whether it was new.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`] or [`oed_model::Error::Record`].
    pub fn queue_entries(&self, entries: &[HealEntry]) -> Result<Vec<bool>> {
        let mut counts = self.queue_counts();
        let mut batch = WriteBatch::default();
        let mut changes = Vec::new();
        let mut new = Vec::with_capacity(entries.len());
        for e in entries {
            let key = entry_key_of(e);
            let old: Option<QueuedEntry> = self
                .db
                .get_pinned_cf(self.cf(super::meta::QUEUE), &key)
                .map_err(crate::meta_error)?
                .and_then(|v| serde_json::from_slice(&v).ok());
            let mut merged = e.clone();
            // The shard of a version the new one keeps as noncurrent still needs heal,
            // under the key it is kept at now.
            if let Some(old) = old.as_ref().filter(|o| {
                (e.versioned || o.entry.versioned)
                    && o.entry.version_id < e.version_id
                    && !e.key.starts_with(oed_model::record::INTERNAL_PREFIX)
            }) {
                let kept = HealEntry {
                    key: oed_model::record::version_key(&e.key, old.entry.version_id),
                    ..old.entry.clone()
                };
                let kept_key = entry_key_of(&kept);
                let exists = self
                    .db
                    .get_pinned_cf(self.cf(super::meta::QUEUE), &kept_key)
                    .map_err(crate::meta_error)?
                    .is_some();
                if !exists {
                    self.put_fresh(&mut batch, &kept)?;
                    changes.push((kept, 1));
                }
            }
            if let Some(old) = &old {
                if old.entry.version_id > e.version_id {
                    merged = old.entry.clone();
                }
                merged.redundancy = old.entry.redundancy.min(e.redundancy);
                merged.attempts = 0;
                batch.delete_cf(
                    self.cf(super::meta::QUEUE),
                    order_key(&old.entry, old.deferred),
                );
                changes.push((old.entry.clone(), -1));
            }
            new.push(old.is_none());
            self.put_fresh(&mut batch, &merged)?;
            changes.push((merged, 1));
        }
        self.write(batch)?;
        for (e, sign) in &changes {
            counts.add(e, &self.drive_id, *sign);
        }
        for e in entries.iter().filter(|e| e.drive == self.drive_id) {
            counts.queued[e.cause.index()] += 1;
        }
        Ok(new)
    }

    /// Adds to `batch` entry `e`, not deferred, and its place in the healer's order.
    fn put_fresh(&self, batch: &mut WriteBatch, e: &HealEntry) -> Result<()> {
        batch.put_cf(
            self.cf(super::meta::QUEUE),
            entry_key_of(e),
            serde_json::to_vec(&QueuedEntry {
                entry: e.clone(),
                deferred: false,
            })?,
        );
        batch.put_cf(self.cf(super::meta::QUEUE), order_key(e, false), b"");
        Ok(())
    }

    /// Up to `limit` entries for `drive` in the healer's order: not deferred before
    /// deferred (only when `deferred` is true are those taken), fewest to spare first.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`].
    pub fn next_heals(&self, drive: &str, limit: usize, deferred: bool) -> Result<Vec<HealEntry>> {
        let mut objects = Vec::new();
        self.scan(b'o', drive, |rest, _| {
            // deferred, priority, bucket NUL key
            if objects.len() >= limit || (rest.first() == Some(&1) && !deferred) {
                return ControlFlow::Break(());
            }
            let obj = rest.get(2..).unwrap_or_default();
            if let Some(sep) = obj.iter().position(|&b| b == 0)
                && let (Ok(bucket), Ok(key)) = (
                    std::str::from_utf8(&obj[..sep]),
                    std::str::from_utf8(&obj[sep + 1..]),
                )
            {
                objects.push((bucket.to_owned(), key.to_owned()));
            }
            ControlFlow::Continue(())
        })?;
        let mut out = Vec::with_capacity(objects.len());
        for (bucket, key) in objects {
            if let Some(s) = self.stored_entry(drive, &bucket, &key)? {
                out.push(s.entry);
            }
        }
        Ok(out)
    }

    /// Calls `f` with the rest of the key (after `kind`, `drive` and NUL) and the value of
    /// each queue key of that kind for `drive`, in key order, until it breaks.
    fn scan(
        &self,
        kind: u8,
        drive: &str,
        mut f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<()> {
        let mut prefix = vec![kind];
        prefix.extend_from_slice(drive.as_bytes());
        prefix.push(0);
        for kv in self.db.iterator_cf(
            self.cf(super::meta::QUEUE),
            IteratorMode::From(&prefix, Direction::Forward),
        ) {
            let (k, v) = kv.map_err(crate::meta_error)?;
            if !k.starts_with(&prefix) || f(&k[prefix.len()..], &v).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn stored_entry(&self, drive: &str, bucket: &str, key: &str) -> Result<Option<QueuedEntry>> {
        Ok(self
            .db
            .get_pinned_cf(self.cf(super::meta::QUEUE), entry_key(drive, bucket, key))
            .map_err(crate::meta_error)?
            .and_then(|v| serde_json::from_slice(&v).ok()))
    }

    /// Removes `entry` from the queue, unless it was queued again for a newer version
    /// meanwhile. Returns whether it was removed.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`].
    pub fn finish_heal(&self, entry: &HealEntry) -> Result<bool> {
        let mut counts = self.queue_counts();
        let Some(s) = self.stored_entry(&entry.drive, &entry.bucket, &entry.key)? else {
            return Ok(false);
        };
        if s.entry.version_id > entry.version_id {
            return Ok(false);
        }
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(super::meta::QUEUE), entry_key_of(&s.entry));
        batch.delete_cf(self.cf(super::meta::QUEUE), order_key(&s.entry, s.deferred));
        self.write(batch)?;
        counts.add(&s.entry, &self.drive_id, -1);
        Ok(true)
    }

    /// Puts `entry` after the others until deferred entries are retried, one more
    /// attempt counted.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`] or [`oed_model::Error::Record`].
    pub fn defer_heal(&self, entry: &HealEntry) -> Result<()> {
        let _counts = self.queue_counts();
        let Some(mut s) = self.stored_entry(&entry.drive, &entry.bucket, &entry.key)? else {
            return Ok(());
        };
        let mut batch = WriteBatch::default();
        batch.delete_cf(self.cf(super::meta::QUEUE), order_key(&s.entry, s.deferred));
        s.entry.attempts += 1;
        s.deferred = true;
        batch.put_cf(self.cf(super::meta::QUEUE), order_key(&s.entry, true), b"");
        batch.put_cf(
            self.cf(super::meta::QUEUE),
            entry_key_of(&s.entry),
            serde_json::to_vec(&s)?,
        );
        self.write(batch)
    }

    /// Entries held for `drive` (hints when it is not this drive), up to `limit`.
    ///
    /// # Errors
    /// [`oed_model::Error::Meta`].
    pub fn entries_for(&self, drive: &str, limit: usize) -> Result<Vec<HealEntry>> {
        let mut out = Vec::new();
        self.scan(b'e', drive, |_, v| {
            if out.len() >= limit {
                return ControlFlow::Break(());
            }
            if let Ok(s) = serde_json::from_slice::<QueuedEntry>(v) {
                out.push(s.entry);
            }
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// What the queue holds.
    #[must_use]
    pub fn queue_status(&self) -> QueueCounts {
        let c = self.queue_counts();
        QueueCounts {
            local: HealCause::ALL
                .iter()
                .map(|cause| (cause.label().to_owned(), c.local[cause.index()]))
                .collect(),
            local_bytes: HealCause::ALL
                .iter()
                .map(|cause| (cause.label().to_owned(), c.local_bytes[cause.index()]))
                .collect(),
            hints: c.hints,
        }
    }

    /// Entries ever queued for this drive's own shards, by cause (since start).
    #[must_use]
    pub fn heals_queued(&self) -> Vec<(HealCause, u64)> {
        let c = self.queue_counts();
        HealCause::ALL
            .iter()
            .map(|cause| (*cause, c.queued[cause.index()]))
            .collect()
    }

    /// Entries in the queue: this drive's own shards and hints for others.
    #[must_use]
    pub fn heal_backlog(&self) -> u64 {
        let c = self.queue_counts();
        c.local.iter().sum::<u64>() + c.hints
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oed_model::config::Config;
    use oed_model::record::{VersionId, test_record};

    fn entry(key: &str, version: u128, redundancy: u16, drive: &str) -> HealEntry {
        let mut rec = test_record(key, version, 10_000);
        rec.drives = vec!["a".into(), "b".into(), drive.into()];
        HealEntry::of(&rec, 2, HealCause::DegradedWrite, redundancy, "self")
    }

    /// An entry of a version of its own takes the place of an older version's entry of
    /// the key, and that one is kept under the version key the older version is kept
    /// at now; `null` versions replace each other's entries as before.
    #[test]
    fn a_replaced_versions_entry_moves_to_its_version_key() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            drive_id: "self".into(),
            ..Config::default()
        };
        let meta = MetaStore::open(dir.path(), &config).unwrap();
        let versioned = |v| HealEntry {
            versioned: true,
            ..entry("k", v, 1, "other")
        };
        meta.queue_entries(&[entry("k", 1, 1, "other")]).unwrap();
        meta.queue_entries(&[entry("k", 2, 1, "other")]).unwrap();
        assert_eq!(meta.heal_backlog(), 1);
        meta.queue_entries(&[versioned(3)]).unwrap();
        meta.queue_entries(&[versioned(4)]).unwrap();
        let mut keys: Vec<_> = meta
            .entries_for("other", 10)
            .unwrap()
            .into_iter()
            .map(|e| (e.key, e.version_id.0))
            .collect();
        keys.sort();
        let kept = |v| oed_model::record::version_key("k", VersionId(v));
        let mut want = vec![("k".to_owned(), 4), (kept(2), 2), (kept(3), 3)];
        want.sort();
        assert_eq!(keys, want);
        assert_eq!(meta.heal_backlog(), 3);
    }

    #[test]
    fn entries_merge_per_shard_come_fewest_spare_first_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            drive_id: "self".into(),
            ..Config::default()
        };
        {
            let meta = MetaStore::open(dir.path(), &config).unwrap();
            let new = meta
                .queue_entries(&[
                    entry("x", 1, 1, "self"),
                    entry("y", 1, 0, "self"),
                    entry("z", 1, 1, "other"),
                ])
                .unwrap();
            assert_eq!(new, [true, true, true]);
            // The same shard again, newer and with less to spare: one entry, merged.
            assert_eq!(
                meta.queue_entries(&[entry("x", 2, 0, "self")]).unwrap(),
                [false]
            );
            assert_eq!(meta.heal_backlog(), 3);
            let next = meta.next_heals("self", 10, false).unwrap();
            assert_eq!(next.len(), 2);
            assert!(next.iter().all(|e| e.redundancy == 0));
            assert_eq!(next.iter().find(|e| e.key == "x").unwrap().version_id.0, 2);
            // An older heal does not remove the newer entry.
            assert!(!meta.finish_heal(&entry("x", 1, 0, "self")).unwrap());
            meta.defer_heal(&entry("y", 1, 0, "self")).unwrap();
            let keys: Vec<_> = meta
                .next_heals("self", 10, false)
                .unwrap()
                .into_iter()
                .map(|e| e.key)
                .collect();
            assert_eq!(keys, ["x"]);
            let keys: Vec<_> = meta
                .next_heals("self", 10, true)
                .unwrap()
                .into_iter()
                .map(|e| (e.key, e.attempts))
                .collect();
            assert_eq!(keys, [("x".to_owned(), 0), ("y".to_owned(), 1)]);
            assert_eq!(meta.entries_for("other", 10).unwrap().len(), 1);
            assert_eq!(meta.queue_status().hints, 1);
            assert!(meta.finish_heal(&entry("x", 2, 0, "self")).unwrap());
        }
        let meta = MetaStore::open(dir.path(), &config).unwrap();
        assert_eq!(meta.heal_backlog(), 2);
        assert_eq!(meta.queue_status().local["degraded_write"], 1);
    }
}
