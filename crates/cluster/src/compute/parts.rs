//! A new object written by parts, as the operations that write one do (`compress`,
//! `decompress`, `sort`, `add`): each part goes through the normal erasure-coded write as
//! it is ready, so one part is held at a time, and the object is then committed as the
//! multipart object of its parts. Parts written before a failure are deleted.

use bytes::Bytes;

use crate::Cluster;
use crate::write::{NewObject, multipart_etag, part_key};
use oed_model::error::{Error, Result};
use oed_model::record::{ObjectRecord, PartRef, VersionId};

/// The parts of a new object in `bucket`, written so far.
pub(super) struct NewParts<'a> {
    cluster: &'a Cluster,
    bucket: String,
    upload: String,
    parts: Vec<ObjectRecord>,
    bytes: u64,
}

/// What a committed object is: its `ETag`, parts and bytes.
pub(super) struct Committed {
    pub etag: String,
    pub parts: usize,
    pub bytes: u64,
}

impl<'a> NewParts<'a> {
    pub(super) fn new(cluster: &'a Cluster, bucket: &str) -> Self {
        Self {
            cluster,
            bucket: bucket.to_owned(),
            upload: VersionId::generate().to_string(),
            parts: Vec::new(),
            bytes: 0,
        }
    }

    /// Writes the next part, the concatenation of `pieces` (not joined here).
    pub(super) async fn push(&mut self, pieces: Vec<Bytes>) -> Result<()> {
        let number = i32::try_from(self.parts.len() + 1)
            .map_err(|_| Error::BadRequest("the object has too many parts".into()))?;
        let size: u64 = pieces.iter().map(|p| p.len() as u64).sum();
        let obj = NewObject {
            bucket: self.bucket.clone(),
            key: part_key(&self.upload, number),
            size,
            ..NewObject::default()
        };
        let body = futures_util::stream::iter(pieces.into_iter().map(Ok));
        let written = self.cluster.put_object(obj, body).await?;
        self.parts.push(written.record);
        self.bytes += size;
        Ok(())
    }

    /// Bytes written so far.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes the parts sent to their drives, parity included.
    pub(super) fn network_bytes(&self) -> u64 {
        let p = self.cluster.map().profile;
        let (k, m) = (u64::from(p.k), u64::from(p.m));
        self.bytes * (k + m) / k
    }

    /// When `written` (the work that pushed the parts) succeeded, commits `target` as the
    /// multipart object of the parts (an empty part when there are none); when it or the
    /// commit failed, deletes the parts and returns the error.
    pub(super) async fn finish(
        mut self,
        written: Result<()>,
        target: &str,
        content_type: &str,
    ) -> Result<Committed> {
        let committed = match written {
            Ok(()) => self.commit(target, content_type).await,
            Err(e) => Err(e),
        };
        if committed.is_err() {
            for p in &self.parts {
                self.cluster.delete_record(p).await;
            }
        }
        committed
    }

    async fn commit(&mut self, target: &str, content_type: &str) -> Result<Committed> {
        if self.parts.is_empty() {
            self.push(Vec::new()).await?;
        }
        let etags: Vec<&str> = self.parts.iter().map(|p| p.etag.as_str()).collect();
        let etag = multipart_etag(&etags);
        let refs: Vec<PartRef> = self
            .parts
            .iter()
            .enumerate()
            .map(|(n, p)| PartRef::of(n as u32 + 1, p))
            .collect();
        let obj = NewObject {
            bucket: self.bucket.clone(),
            key: target.to_owned(),
            content_type: Some(content_type.into()),
            parts: refs,
            etag: Some(etag.clone()),
            // In a bucket with versioning enabled, an output is a version of its own.
            versioned: self.cluster.accounts().versioning(&self.bucket)
                == oed_model::account::Versioning::Enabled,
            ..NewObject::default()
        };
        self.cluster
            .put_object(obj, futures_util::stream::empty())
            .await?;
        Ok(Committed {
            etag,
            parts: self.parts.len(),
            bytes: self.bytes,
        })
    }
}
