//! [`PeerClient`] as a [`Drive`]: each operation one request of the peer API.

use std::fmt::Write as _;
use std::ops::Range;

use http::StatusCode;

use crate::PeerOp;
use crate::auth::{self};
use oed_model::account::{AccountDigest, SignedEntry};
use oed_model::drive::{
    Amendment, Drive, DriveError, DriveInfo, ErrorCode, HealEntry, ObjectRef, OpAnswer, OpRequest,
    RecordPage, Relocation, Settlement, ShardRead, ShardUpload, Stored,
};
use oed_model::record::{BucketRecord, ObjectRecord, VersionId};
use oed_model::uri::encode as q;

use super::wire::{PeerClient, check, chunk_body, key_query};

#[async_trait::async_trait]
impl Drive for PeerClient {
    async fn put_shard(
        &self,
        record: &ObjectRecord,
        body: ShardUpload,
        tail: bool,
    ) -> Result<Stored, DriveError> {
        let file_len = shard_file_len(record);
        let record = serde_json::to_string(record)
            .map_err(|e| DriveError::new(ErrorCode::BadRequest, e.to_string()))?;
        let mut query = format!("record={}", q(&record));
        if tail {
            query.push_str("&tail=true");
        }
        let body = match self.raw_upload(file_len) {
            Some(flag) => match super::raw::put_shard(self, &query, body, file_len).await? {
                super::raw::Sent::Answer(stored) => return *stored,
                super::raw::Sent::NotTaken(body) => {
                    tracing::info!(
                        drive = ?self.authority(),
                        "a drive takes no raw shard uploads (an earlier version): sending bodies"
                    );
                    flag.store(false, std::sync::atomic::Ordering::Relaxed);
                    body
                }
            },
            None => body,
        };
        let mut req = self.request(PeerOp::PutShard, &query, self.shard_digest());
        let seal = req.take_seal();
        let body = super::sealed::sealed(body, seal, file_len);
        let resp = req.stream_body(body).send().await?;
        check(resp).await?.json().await
    }

    async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        stripes: Option<Range<u64>>,
    ) -> Result<ShardRead, DriveError> {
        let mut query = key_query(bucket, key, version);
        if let Some(r) = &stripes {
            let _ = write!(query, "&from={}&to={}", r.start, r.end);
        }
        if !self.framed_reads() {
            return self.read_ordinary(&query).await;
        }
        let resp = super::frames::request(self, &query).await?;
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            super::frames::read(self, resp, bucket, key).await
        } else {
            chunk_body(resp)
        }
    }

    async fn stat(&self, bucket: &str, key: &str) -> Result<Option<ObjectRecord>, DriveError> {
        let query = key_query(bucket, key, None);
        match self.send(PeerOp::StatObject, &query).await {
            Ok(resp) => resp.json().await.map(Some),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn delete_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(), DriveError> {
        let query = key_query(bucket, key, version);
        self.send(PeerOp::DeleteObject, &query).await?;
        Ok(())
    }

    async fn list_objects(
        &self,
        bucket: &str,
        start: &str,
        limit: usize,
    ) -> Result<Vec<ObjectRecord>, DriveError> {
        let query = format!("bucket={}&start={}&limit={limit}", q(bucket), q(start));
        self.send(PeerOp::ListObjects, &query).await?.json().await
    }

    async fn create_bucket(&self, name: &str) -> Result<BucketRecord, DriveError> {
        let query = format!("bucket={}", q(name));
        self.send(PeerOp::CreateBucket, &query).await?.json().await
    }

    async fn delete_bucket(&self, name: &str) -> Result<(), DriveError> {
        let query = format!("bucket={}", q(name));
        self.send(PeerOp::DeleteBucket, &query).await?;
        Ok(())
    }

    async fn buckets(&self) -> Result<Vec<BucketRecord>, DriveError> {
        self.send(PeerOp::ListBuckets, "").await?.json().await
    }

    async fn info(&self) -> Result<DriveInfo, DriveError> {
        self.send(PeerOp::Info, "").await?.json().await
    }

    fn clock_offset_ms(&self) -> Option<i64> {
        PeerClient::clock_offset_ms(self)
    }

    async fn run_op(&self, req: &OpRequest) -> Result<OpAnswer, DriveError> {
        let body = serde_json::to_vec(req)
            .map_err(|e| DriveError::new(ErrorCode::BadRequest, e.to_string()))?;
        let digest = auth::body_digest(&body);
        let resp = self
            .request(PeerOp::RunOp, "", &digest)
            .body(body)
            .send()
            .await?;
        let bytes = check(resp).await?.bytes().await?;
        let mut answer: OpAnswer = serde_json::from_slice(&bytes).map_err(|e| {
            DriveError::unreachable(format!("the drive's answer could not be decoded: {e}"))
        })?;
        answer.wire_bytes = bytes.len() as u64;
        Ok(answer)
    }

    async fn queue_heals(&self, entries: &[HealEntry]) -> Result<usize, DriveError> {
        self.post_json(PeerOp::QueueHeals, "", entries).await
    }

    async fn versions(&self, objects: &[ObjectRef]) -> Result<Vec<Option<VersionId>>, DriveError> {
        self.post_json(PeerOp::Versions, "", objects).await
    }

    async fn records_for(
        &self,
        drive: &str,
        after: Option<&ObjectRef>,
        limit: usize,
    ) -> Result<RecordPage, DriveError> {
        let mut query = format!("drive={}&limit={limit}", q(drive));
        if let Some(a) = after {
            let _ = write!(query, "&bucket={}&key={}", q(&a.bucket), q(&a.key));
        }
        self.send(PeerOp::RecordsFor, &query).await?.json().await
    }

    async fn relocate(&self, moves: &[Relocation]) -> Result<Vec<bool>, DriveError> {
        oed_model::drive::check_batch(moves.len())?;
        self.post_json(PeerOp::Relocate, "", moves).await
    }

    async fn settle(&self, settlements: &[Settlement]) -> Result<Vec<bool>, DriveError> {
        oed_model::drive::check_batch(settlements.len())?;
        self.post_json(PeerOp::Settle, "", settlements).await
    }

    async fn promote(&self, bucket: &str, key: &str) -> Result<Option<VersionId>, DriveError> {
        let query = key_query(bucket, key, None);
        self.send(PeerOp::Promote, &query).await?.json().await
    }

    async fn amend(&self, amendments: &[Amendment]) -> Result<Vec<bool>, DriveError> {
        oed_model::drive::check_batch(amendments.len())?;
        self.post_json(PeerOp::Amend, "", amendments).await
    }

    async fn account_digest(&self) -> Result<AccountDigest, DriveError> {
        self.send(PeerOp::AccountDigest, "").await?.json().await
    }

    async fn account_entries(&self) -> Result<Vec<SignedEntry>, DriveError> {
        self.send(PeerOp::AccountEntries, "").await?.json().await
    }

    async fn merge_accounts(&self, entries: &[SignedEntry]) -> Result<usize, DriveError> {
        oed_model::drive::check_batch(entries.len())?;
        self.post_json(PeerOp::MergeAccounts, "", entries).await
    }

    async fn keys_used(&self) -> Result<std::collections::HashMap<String, u64>, DriveError> {
        self.send(PeerOp::KeysUsed, "").await?.json().await
    }
}

/// The length of the shard file `record` describes (0 when it describes none: the drive
/// refuses such an upload however it is sent).
fn shard_file_len(record: &ObjectRecord) -> u64 {
    record.shard_header().map_or(0, |h| h.file_len())
}
