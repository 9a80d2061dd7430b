//! Deleting objects and the sweeps that keep the shard files and the records in step:
//! orphans, files no record places, scrub of one shard, aged kept versions.

use std::ops::ControlFlow;
use std::path::Path;

use oed_model::error::{Error, Result};
use oed_model::record::{ObjectRecord, VersionId};

use crate::read::for_each_chunk;
use crate::{ShardBytes, Store, join_error};

impl Store {
    /// Deletes the object record and shard of `bucket`/`key`. With `version`, only when
    /// the stored version is not newer (a delete never removes a newer write).
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Superseded`], [`Error::Meta`].
    pub async fn delete_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<()> {
        // On a blocking thread, like a write's commit: a holder of a key's lock must never
        // wait for the blocking pool, which commits waiting for that lock may have filled.
        let (store, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        tokio::task::spawn_blocking(move || store.delete_now(&bucket, &key, version))
            .await
            .map_err(join_error)?
    }

    fn delete_now(&self, bucket: &str, key: &str, version: Option<VersionId>) -> Result<()> {
        let _guard = self.lock_for(bucket, key);
        let rec = self
            .meta
            .object(bucket, key)?
            .ok_or(Error::NotFound(oed_model::error::Missing::Object))?;
        if version.is_some_and(|v| self.supersedes(rec.version_id, v)) {
            return Err(Error::Superseded);
        }
        let kept = self.meta.kept(bucket, key)?;
        // A noncurrent version still kept for the settlement of the write that replaced
        // it shares its file with that entry: deleted, it is not to come back either.
        if let Some((user, v)) = oed_model::record::parse_version_key(key)
            && self
                .meta
                .kept(bucket, user)?
                .is_some_and(|k| k.record.version_id == v)
        {
            self.meta.drop_kept(bucket, user)?;
        }
        // Record first: a crash after it leaves an orphan file, never a dangling record.
        self.meta.delete_object(bucket, key)?;
        self.pool.release(&self.record_path(&rec));
        if let Some(k) = kept {
            self.release_kept(&k.record)?;
        }
        Ok(())
    }

    /// Removes shard files that no record points to (left by a crash between a file's
    /// creation and its record's commit, or between a record's deletion and its file's).
    /// Returns how many. Safe while the drive takes writes: a file being written whose
    /// record is not committed yet is left alone (`files::Placements`).
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Meta`].
    pub fn sweep_orphans(&self) -> Result<u64> {
        // From now until the end, every placement is remembered, as are those already in
        // flight: a file placed before the records are read below but recorded after
        // is one of those, and must stay.
        self.files.begin_sweep();
        let result = self.sweep_unplaced();
        self.files.end_sweep();
        result
    }

    fn sweep_unplaced(&self) -> Result<u64> {
        let mut wanted = std::collections::HashSet::new();
        self.meta.for_each_object(|r| {
            wanted.insert(self.record_path(&r));
        })?;
        let mut removed = 0;
        for a in std::fs::read_dir(&self.shards)? {
            for b in std::fs::read_dir(a?.path())? {
                for f in std::fs::read_dir(b?.path())? {
                    let path = f?.path();
                    if wanted.contains(&path) {
                        continue;
                    }
                    // Checked and removed under the lock: a placement of this path
                    // registers before its file appears, so it either protects the file
                    // or makes it after the removal.
                    let p = self.files.lock_placements();
                    if !p.protects(&path) {
                        match std::fs::remove_file(&path) {
                            Ok(()) => removed += 1,
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
            }
        }
        Ok(removed)
    }

    /// Reads every chunk of this drive's shard of `record` and checks its CRC32C, taking
    /// each chunk's bytes from `limit` first; returns the bytes read. A bad chunk or a
    /// missing file is logged and queued for heal (cause `scrub_corrupt`). The pages read
    /// are dropped from the page cache afterwards, so a scrub does not push out what
    /// clients read. Blocks.
    ///
    /// # Errors
    /// [`Error::CorruptShard`]; [`Error::NotFound`] when the version is no longer stored.
    pub fn scrub_shard(
        &self,
        record: &ObjectRecord,
        limit: &crate::limiter::Limiter,
    ) -> Result<u64> {
        let (rec, bytes) = self.shard(&record.bucket, &record.key, Some(record.version_id))?;
        let path = match &bytes {
            ShardBytes::File(p) => Some(p.path().to_owned()),
            ShardBytes::Inline(_) => None,
        };
        let stripes = rec.layout()?.stripe_count(rec.size);
        let mut read = 0u64;
        let r = for_each_chunk(bytes, 0, stripes, &mut |_, buf| {
            limit.take_blocking(buf.len() as u64);
            read += buf.len() as u64;
            ControlFlow::Continue(())
        });
        if let Some(p) = path
            && let Ok(f) = std::fs::File::open(p)
        {
            let _ = rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed);
        }
        match r {
            // Replaced or deleted while it was read.
            Err(Error::CorruptShard { .. }) if !self.still_stored(&rec) => {
                Err(Error::NotFound(oed_model::error::Missing::ObjectVersion))
            }
            Err(Error::CorruptShard { stripe }) => {
                tracing::error!(bucket = %rec.bucket, key = %rec.key, stripe, "scrub: stored shard is corrupt");
                if let Err(q) = self
                    .meta
                    .queue_corrupt(&rec, oed_model::heal::HealCause::ScrubCorrupt)
                {
                    tracing::warn!(error = %q, "heal queue");
                }
                Err(Error::CorruptShard { stripe })
            }
            Err(e) => Err(e),
            Ok(()) => Ok(read),
        }
    }

    /// Removes leftovers older than `grace`: files in `tmp/` (left by versions before
    /// numbered files), and shard files that no record points to and no upload writes. Returns how many of each.
    /// Younger ones may belong to writes in progress and stay. Blocks.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Meta`].
    pub fn sweep_aged(&self, grace: std::time::Duration) -> Result<(u64, u64)> {
        let old = |p: &Path| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > grace))
        };
        let mut temp = 0;
        for f in std::fs::read_dir(&self.tmp)? {
            let path = f?.path();
            if old(&path) && std::fs::remove_file(&path).is_ok() {
                temp += 1;
            }
        }
        // The first 8 bytes of each wanted file's name: a collision keeps an orphan,
        // never removes a shard.
        let mut wanted = std::collections::HashSet::new();
        self.meta.for_each_object(|r| {
            let p = self.record_path(&r);
            wanted.insert(name_prefix(&p));
        })?;
        let mut files = 0;
        for a in std::fs::read_dir(&self.shards)? {
            for b in std::fs::read_dir(a?.path())? {
                for f in std::fs::read_dir(b?.path())? {
                    let path = f?.path();
                    if wanted.contains(&name_prefix(&path)) || !old(&path) {
                        continue;
                    }
                    // An upload writing over a freed file keeps the file's old time until
                    // its first bytes land: placements are checked, under their lock.
                    let p = self.files.lock_placements();
                    if !p.protects(&path) && std::fs::remove_file(&path).is_ok() {
                        files += 1;
                    }
                }
            }
        }
        Ok((temp, files))
    }
}

/// The first 8 bytes of a shard file's name (hex of a hash).
fn name_prefix(p: &Path) -> u64 {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.get(..16))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or(0)
}
