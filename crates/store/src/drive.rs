//! This drive's store as a [`Drive`]: what the coordinator calls for its own shards, and
//! what the peer API's handlers call for other drives. Each method is the store's own
//! operation with the checks both kinds of caller need (a reversed stripe range, a list
//! of a bucket the drive does not have), and its errors in their public form. Records
//! leave without their file number ([`ObjectRecord::file`]): which file holds a shard is
//! this drive's own business, and a record another drive stores gets that drive's.

use std::ops::Range;

use bytes::Bytes;
use futures_util::StreamExt as _;

use super::Store;
use oed_model::account::{AccountDigest, SignedEntry};
use oed_model::drive::{
    Amendment, Drive, DriveError, DriveInfo, HealEntry, MAX_LIST, ObjectRef, OpAnswer, OpRequest,
    RecordPage, Relocation, Settlement, ShardRead, ShardStream, ShardUpload, Stored, check_batch,
};
use oed_model::error::{Error, Result};
use oed_model::record::{BucketRecord, ObjectRecord, VersionId};

impl Store {
    /// [`Drive::read_shard`] with this store's errors: the first chunk is read and checked
    /// before this returns.
    async fn start_read(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        stripes: Option<Range<u64>>,
    ) -> Result<ShardRead> {
        let (record, bytes) = self.shard(bucket, key, version)?;
        let count = record.layout()?.stripe_count(record.size);
        let asked = stripes.unwrap_or(0..count);
        let range = asked.start..asked.end.min(count);
        if range.start > range.end {
            return Err(Error::BadRequest(format!(
                "stripe range {}..{} is reversed or starts past the shard's {count} stripes",
                asked.start, asked.end
            )));
        }
        let version = record.version_id;
        let mut rx = self.read_stripes(record, bytes, range.start, range.end);
        self.traffic.shard_read(range.start);
        let first = match rx.recv().await {
            Some(Err(e)) => return Err(e),
            Some(Ok(b)) => Some(b),
            None => None,
        };
        let rest = futures_util::stream::unfold(rx, |mut rx| async move {
            let item = rx.recv().await?;
            Some((item.map_err(DriveError::from), rx))
        });
        let chunks: ShardStream = match first {
            Some(b) => {
                Box::pin(futures_util::stream::once(async { Ok::<Bytes, _>(b) }).chain(rest))
            }
            None => Box::pin(rest),
        };
        Ok(ShardRead {
            version,
            stripes: range,
            chunks,
        })
    }

    fn list_now(&self, bucket: &str, start: &str, limit: usize) -> Result<Vec<ObjectRecord>> {
        if self.meta.bucket(bucket)?.is_none() {
            return Err(Error::NotFound(oed_model::error::Missing::Bucket));
        }
        let mut records = self.meta.list_objects(bucket, start, limit.min(MAX_LIST))?;
        records.iter_mut().for_each(without_file);
        Ok(records)
    }

    fn info_now(&self) -> Result<DriveInfo> {
        let cap = self.capacity()?;
        let health = if cap.free_bytes < cap.reserve_bytes {
            "low-space"
        } else {
            "ok"
        };
        Ok(DriveInfo {
            drive_id: self.drive_id.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            capacity_bytes: cap.capacity_bytes,
            free_bytes: cap.free_bytes,
            reserve_bytes: cap.reserve_bytes,
            shard_count: self.meta.object_count(),
            heal_backlog: self.meta.heal_backlog(),
            auth_failures: 0,
            health: health.to_owned(),
            incarnation: self.identity.incarnation.clone(),
        })
    }
}

#[async_trait::async_trait]
impl Drive for Store {
    async fn put_shard(
        &self,
        record: &ObjectRecord,
        body: ShardUpload,
        tail: bool,
    ) -> Result<Stored, DriveError> {
        let mut stored = Store::put_shard(self, record.clone(), body, tail).await?;
        without_file(&mut stored.record);
        Ok(stored)
    }

    async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        stripes: Option<Range<u64>>,
    ) -> Result<ShardRead, DriveError> {
        Ok(self.start_read(bucket, key, version, stripes).await?)
    }

    async fn stat(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, DriveError> {
        let mut record = self.meta.object(bucket, key)?;
        record.iter_mut().for_each(without_file);
        Ok(record)
    }

    async fn delete_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(), DriveError> {
        Ok(Store::delete_object(self, bucket, key, version).await?)
    }

    async fn list_objects(
        &self,
        bucket: &str,
        start: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, DriveError> {
        Ok(self.list_now(bucket, start, limit)?)
    }

    async fn create_bucket(&self, name: &str) -> Result<BucketRecord, DriveError> {
        Ok(Store::create_bucket(self, name)?)
    }

    async fn delete_bucket(&self, name: &str) -> Result<(), DriveError> {
        Ok(self.meta.delete_bucket(name)?)
    }

    async fn buckets(&self) -> Result<Vec<BucketRecord>, DriveError> {
        Ok(self.meta.buckets()?)
    }

    async fn info(&self) -> Result<DriveInfo, DriveError> {
        Ok(self.info_now()?)
    }

    async fn run_op(&self, req: &OpRequest) -> Result<OpAnswer, DriveError> {
        Ok(Store::run_op(self, req).await?)
    }

    async fn queue_heals(&self, entries: &[HealEntry]) -> Result<usize, DriveError> {
        check_batch(entries.len())?;
        for e in entries {
            e.validate()?;
        }
        let (store, entries) = (self.clone(), entries.to_vec());
        Ok(blocking(move || store.queue_heals(&entries)).await?)
    }

    async fn versions(&self, objects: &[ObjectRef]) -> Result<Vec<Option<VersionId>>, DriveError> {
        check_batch(objects.len())?;
        let (store, objects) = (self.clone(), objects.to_vec());
        Ok(blocking(move || {
            objects
                .iter()
                .map(|o| Ok(store.meta.object(&o.bucket, &o.key)?.map(|r| r.version_id)))
                .collect::<Result<Vec<_>>>()
        })
        .await?)
    }

    async fn records_for(
        &self,
        drive: &str,
        after: Option<&ObjectRef>,
        limit: usize,
    ) -> Result<RecordPage, DriveError> {
        let after = after.map_or_else(Vec::new, |o| {
            oed_model::record::object_key(&o.bucket, &o.key)
        });
        let (store, drive) = (self.clone(), drive.to_owned());
        let limit = limit.clamp(1, MAX_LIST);
        Ok(blocking(move || {
            let (mut records, last) = store.meta.objects_after(&after, limit, |r| {
                r.drives.contains(&drive) || r.parts.iter().any(|p| p.drives.contains(&drive))
            })?;
            records.iter_mut().for_each(without_file);
            let next = last.and_then(|k| {
                let s = String::from_utf8(k).ok()?;
                let (bucket, key) = s.split_once('\0')?;
                Some(ObjectRef {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                })
            });
            Ok(RecordPage { records, next })
        })
        .await?)
    }

    async fn relocate(&self, moves: &[Relocation]) -> Result<Vec<bool>, DriveError> {
        self.each(moves, Store::relocate).await
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<Vec<bool>, DriveError> {
        self.each(settlements, Store::settle).await
    }

    async fn promote(&self, bucket: &str, key: &str) -> Result<Option<VersionId>, DriveError> {
        let (store, bucket, key) = (self.clone(), bucket.to_owned(), key.to_owned());
        Ok(blocking(move || store.promote(&bucket, &key)).await?)
    }

    async fn amend(&self, amendments: &[Amendment]) -> Result<Vec<bool>, DriveError> {
        self.each(amendments, Store::amend).await
    }

    async fn account_digest(&self) -> Result<AccountDigest, DriveError> {
        Ok(self.accounts().digest())
    }

    async fn account_entries(&self) -> Result<Vec<SignedEntry>, DriveError> {
        Ok(self.accounts().entries())
    }

    async fn keys_used(&self) -> Result<std::collections::HashMap<String, u64>, DriveError> {
        Ok(Store::keys_used(self))
    }

    async fn merge_accounts(&self, entries: &[SignedEntry]) -> Result<usize, DriveError> {
        check_batch(entries.len())?;
        let (store, entries) = (self.clone(), entries.to_vec());
        Ok(blocking(move || store.merge_accounts(entries).map(|taken| taken.len())).await?)
    }
}

impl Store {
    /// `f` applied to each of a batch of `items`, in order, on one blocking thread.
    async fn each<T, R>(
        &self,
        items: &[T],
        f: fn(&Store, &T) -> Result<R>,
    ) -> Result<Vec<R>, DriveError>
    where
        T: Clone + Send + 'static,
        R: Send + 'static,
    {
        check_batch(items.len())?;
        let (store, items) = (self.clone(), items.to_vec());
        Ok(blocking(move || items.iter().map(|i| f(&store, i)).collect()).await?)
    }
}

/// `record` as it leaves the store: without this drive's file number.
pub fn without_file(record: &mut ObjectRecord) {
    record.file = None;
}

/// Runs `f` (RocksDB reads and writes) on a blocking thread.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?
}
