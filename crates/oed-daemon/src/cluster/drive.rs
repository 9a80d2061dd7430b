//! One drive as the coordinator sees it: this drive's own store, called directly, or
//! another drive's peer API. Both answer the same calls with the same errors, so the
//! write and read paths never ask which one they talk to.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::error::Error;
use crate::peer::client::{PeerClient, PeerError};
use crate::store::Store;
use crate::store::record::{BucketRecord, ObjectRecord, PartRef, VersionId};

/// Bytes of a shard read, chunk after chunk.
pub type ShardStream = Pin<Box<dyn Stream<Item = Result<Bytes, DriveError>> + Send>>;

/// What a drive said no with, or why it could not be asked.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DriveError {
    /// No such object, version or bucket there.
    #[error("not found")]
    NotFound,
    /// A newer version of the object is stored there.
    #[error("a newer version is stored")]
    Superseded,
    /// The bucket still has objects there.
    #[error("bucket not empty")]
    BucketNotEmpty,
    /// The drive is within its free-space reserve.
    #[error("insufficient storage")]
    Full,
    /// Anything else: down, timed out, a corrupt shard, a refused request.
    #[error("{0}")]
    Failed(String),
}

impl From<Error> for DriveError {
    fn from(e: Error) -> Self {
        match e {
            Error::NotFound(_) => DriveError::NotFound,
            Error::Superseded => DriveError::Superseded,
            Error::BucketNotEmpty => DriveError::BucketNotEmpty,
            Error::InsufficientStorage { .. } => DriveError::Full,
            other => DriveError::Failed(other.to_string()),
        }
    }
}

impl From<PeerError> for DriveError {
    fn from(e: PeerError) -> Self {
        match e.code() {
            Some("NotFound") => DriveError::NotFound,
            Some("Superseded") => DriveError::Superseded,
            Some("BucketNotEmpty") => DriveError::BucketNotEmpty,
            Some("InsufficientStorage") => DriveError::Full,
            // The chain says more than the top line (connection refused, reset...).
            _ => DriveError::Failed(crate::error::source_chain(&e)),
        }
    }
}

/// A drive of the cluster.
#[derive(Clone, Debug)]
pub enum DriveHandle {
    /// This drive: its store, without HTTP.
    Local(Arc<Store>),
    /// Another drive, through its peer API.
    Remote(PeerClient),
}

impl DriveHandle {
    /// Stores a shard whose file (followed by a JSON record tail) comes from `body`.
    /// Returns the parts of the version it replaced there, if that was a multipart object.
    ///
    /// # Errors
    /// [`DriveError`]; nothing is stored then.
    pub async fn put_shard<S>(
        &self,
        record: &ObjectRecord,
        body: S,
    ) -> Result<Vec<PartRef>, DriveError>
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + Unpin + 'static,
    {
        let stored = match self {
            DriveHandle::Local(store) => store.put_shard(record.clone(), body, true).await?,
            DriveHandle::Remote(c) => c.put_shard_with_tail(record, body).await?,
        };
        Ok(stored.replaced_parts)
    }

    /// Reads stripes `from..to` of the shard of `bucket`/`key` at `version`.
    ///
    /// # Errors
    /// [`DriveError`] when the read cannot start; later failures arrive in the stream.
    pub async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        version: VersionId,
        from: u64,
        to: u64,
    ) -> Result<ShardStream, DriveError> {
        match self {
            DriveHandle::Local(store) => {
                let (record, bytes) = store.shard(bucket, key, Some(version))?;
                let rx = store.read_stripes(record, bytes, from, to);
                let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                    let item = rx.recv().await?;
                    Some((item.map_err(DriveError::from), rx))
                });
                Ok(Box::pin(stream))
            }
            DriveHandle::Remote(c) => {
                let resp = c
                    .get_shard(bucket, key, Some(version), Some((from, to)))
                    .await?;
                Ok(Box::pin(resp.bytes_stream().map(|r| {
                    r.map_err(|e| {
                        DriveError::Failed(format!(
                            "shard read broken: {}",
                            crate::error::source_chain(&e)
                        ))
                    })
                })))
            }
        }
    }

    /// The record of `bucket`/`key` held there, if any.
    ///
    /// # Errors
    /// [`DriveError::Failed`] when the drive cannot answer.
    pub async fn stat(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, DriveError> {
        let r = match self {
            DriveHandle::Local(store) => store
                .meta()
                .object(bucket, key)
                .map_err(DriveError::from)?
                .ok_or(DriveError::NotFound),
            DriveHandle::Remote(c) => c.stat(bucket, key).await.map_err(DriveError::from),
        };
        match r {
            Ok(rec) => Ok(Some(rec)),
            Err(DriveError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes the record and shard of `bucket`/`key` if its version is not newer than
    /// `version`.
    ///
    /// # Errors
    /// [`DriveError`].
    pub async fn delete(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(), DriveError> {
        match self {
            DriveHandle::Local(store) => Ok(store.delete_object(bucket, key, version).await?),
            DriveHandle::Remote(c) => Ok(c.delete(bucket, key, version).await?),
        }
    }

    /// Up to `limit` records of `bucket` from `start` on, in key order.
    ///
    /// # Errors
    /// [`DriveError`].
    pub async fn list(
        &self,
        bucket: &str,
        start: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, DriveError> {
        match self {
            DriveHandle::Local(store) => {
                if store.meta().bucket(bucket)?.is_none() {
                    return Err(DriveError::NotFound);
                }
                Ok(store.meta().list_objects(bucket, start, limit)?)
            }
            DriveHandle::Remote(c) => Ok(c.list(bucket, start, limit).await?),
        }
    }

    /// Creates (or keeps) a bucket record.
    ///
    /// # Errors
    /// [`DriveError`].
    pub async fn create_bucket(&self, name: &str) -> Result<(), DriveError> {
        match self {
            DriveHandle::Local(store) => {
                store.create_bucket(name)?;
            }
            DriveHandle::Remote(c) => {
                c.create_bucket(name).await?;
            }
        }
        Ok(())
    }

    /// Deletes a bucket record that has no objects there.
    ///
    /// # Errors
    /// [`DriveError`].
    pub async fn delete_bucket(&self, name: &str) -> Result<(), DriveError> {
        match self {
            DriveHandle::Local(store) => Ok(store.meta().delete_bucket(name)?),
            DriveHandle::Remote(c) => Ok(c.delete_bucket(name).await?),
        }
    }

    /// Every bucket record there.
    ///
    /// # Errors
    /// [`DriveError`].
    pub async fn buckets(&self) -> Result<Vec<BucketRecord>, DriveError> {
        match self {
            DriveHandle::Local(store) => Ok(store.meta().buckets()?),
            DriveHandle::Remote(c) => Ok(c.buckets().await?),
        }
    }
}
