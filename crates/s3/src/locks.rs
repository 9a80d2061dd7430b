//! What object lock forbids, for the modules that delete versions and for the object
//! lock operations (`objectlock`): whether a bucket has object lock, and whether a
//! version may be deleted now.

use s3s::{S3Error, S3ErrorCode, S3Result};

use oed_cluster::Cluster;
use oed_model::account::ObjectLock;
use oed_model::record::{LockMode, ObjectRecord, now_ms};

use crate::err;

/// The bucket's object lock configuration, when object lock is enabled.
pub(crate) fn of_bucket(cluster: &Cluster, bucket: &str) -> Option<ObjectLock> {
    cluster
        .accounts()
        .settings(bucket)
        .and_then(|s| s.object_lock.clone())
}

/// `AccessDenied`, saying `message`.
pub(crate) fn denied(message: String) -> S3Error {
    err(S3ErrorCode::AccessDenied, message)
}

/// Refuses the deletion of `rec` for good while object lock keeps it: a legal hold, a
/// `COMPLIANCE` date not reached, or a `GOVERNANCE` one unless `bypass` (the request
/// says `x-amz-bypass-governance-retention: true` and its key has the bucket's `owner`
/// right).
///
/// # Errors
/// `AccessDenied` (403), saying what holds the version.
pub(crate) fn check_delete(rec: &ObjectRecord, bypass: bool) -> S3Result<()> {
    let what = format!("version {} of {:?}", rec.s3_version_id(), rec.user_key());
    match rec.locked(now_ms()) {
        None => Ok(()),
        Some(None) => Err(denied(format!(
            "Access Denied because object protected by object lock: {what} is under a legal hold"
        ))),
        Some(Some(LockMode::Compliance)) => Err(denied(format!(
            "Access Denied because object protected by object lock: {what} is retained in COMPLIANCE mode until {}; nobody may delete it before then",
            date(rec)
        ))),
        Some(Some(LockMode::Governance)) if bypass => Ok(()),
        Some(Some(LockMode::Governance)) => Err(denied(format!(
            "Access Denied because object protected by object lock: {what} is retained in GOVERNANCE mode until {}; a key with the bucket's owner right may delete it with x-amz-bypass-governance-retention: true",
            date(rec)
        ))),
    }
}

pub(crate) fn date(rec: &ObjectRecord) -> String {
    rec.retention
        .and_then(|r| {
            let t =
                time::OffsetDateTime::from_unix_timestamp(i64::try_from(r.until_ms / 1000).ok()?)
                    .ok()?;
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
