//! Who may do what (`docs/access.md`): the secrets S3 requests are checked against (the
//! bootstrap key of the settings, then the keys of the account table) and the right each
//! operation needs in its bucket. Every check is a lookup in the table in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use s3s::auth::{Credentials, S3Auth, SecretKey};
use s3s::dto::CopySource;
use s3s::{S3ErrorCode, S3Result};

use oed_cluster::Cluster;
use oed_model::account::{AccountEntry, BucketAccess, Right, Rights};
use oed_model::record::VersionId;

use crate::{OrS3, err};

/// The secrets requests are checked against: the bootstrap key's, then the account
/// table's. The console checks a login with it too.
pub struct KeyAuth {
    pub(crate) cluster: Arc<Cluster>,
    /// The bootstrap key (`s3_access_key`) and its secret: every right, everywhere.
    pub(crate) root: String,
    pub(crate) root_secret: String,
}

impl std::fmt::Debug for KeyAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyAuth")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl KeyAuth {
    /// The secrets of `cluster`'s account table, and the bootstrap key `root` with
    /// `root_secret`.
    #[must_use]
    pub fn new(cluster: Arc<Cluster>, root: &str, root_secret: &str) -> Self {
        Self {
            cluster,
            root: root.to_owned(),
            root_secret: root_secret.to_owned(),
        }
    }

    /// Whether `access_key` is the bootstrap key, which may do everything, the cluster's
    /// administration included.
    #[must_use]
    pub fn is_root(&self, access_key: &str) -> bool {
        access_key == self.root
    }
}

#[async_trait::async_trait]
impl S3Auth for KeyAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if access_key == self.root {
            return Ok(SecretKey::from(self.root_secret.as_str()));
        }
        let table = self.cluster.accounts();
        let Some(key) = table.key(access_key) else {
            return Err(err(
                S3ErrorCode::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            ));
        };
        let keys = self
            .cluster
            .account_keys()
            .map_err(|e| err(S3ErrorCode::ServiceUnavailable, e.to_string()))?;
        if let Some(secret) = keys.open(&key.id, &key.secret) {
            return Ok(SecretKey::from(secret));
        }
        tracing::error!(key = %key.id, "an access key's secret does not open with this cluster's key");
        Err(err(
            S3ErrorCode::InternalError,
            "the access key's secret cannot be read on this drive",
        ))
    }
}

/// What an operation needs of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing in a bucket: `ListBuckets` lists what the key may see; `CreateBucket` is
    /// open to every key.
    Nothing,
    /// This right in the operation's bucket.
    Right(Right),
    /// Refused to every key but the bootstrap key: an operation this list does not name
    /// (none is let through by accident when `s3s` or OED serves a new one).
    Refused,
}

/// What operation `op` (as `s3s` names it) needs.
pub(crate) fn needs(op: &str) -> Need {
    match op {
        "ListBuckets" | "CreateBucket" => Need::Nothing,
        "GetObject"
        | "HeadObject"
        | "GetObjectAttributes"
        | "ListObjects"
        | "ListObjectsV2"
        | "ListObjectVersions"
        | "HeadBucket"
        | "GetBucketLocation"
        | "GetBucketVersioning"
        | "ListMultipartUploads"
        | "ListParts"
        | "GetObjectAcl"
        | "GetObjectTagging"
        | "GetObjectRetention"
        | "GetObjectLegalHold" => Need::Right(Right::Read),
        "PutObject"
        | "PostObject"
        | "DeleteObject"
        | "DeleteObjects"
        | "CopyObject"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "UploadPartCopy"
        | "CompleteMultipartUpload"
        | "AbortMultipartUpload"
        | "PutObjectAcl"
        | "PutObjectTagging"
        | "DeleteObjectTagging"
        | "PutObjectRetention"
        | "PutObjectLegalHold" => Need::Right(Right::Write),
        // The bucket's deletion and its settings.
        "DeleteBucket" | "PutObjectLockConfiguration" | "GetObjectLockConfiguration" => {
            Need::Right(Right::Owner)
        }
        s if s.starts_with("PutBucket")
            || s.starts_with("GetBucket")
            || s.starts_with("DeleteBucket") =>
        {
            Need::Right(Right::Owner)
        }
        _ => Need::Refused,
    }
}

/// The signer of a request: the bootstrap key, a key of the table, or nobody.
pub(crate) enum Who<'a> {
    Root,
    Key(&'a str),
    Anonymous,
}

/// Notes, for `oedd admin key info`, that the signer (a key of the table) was used: call
/// it once per request, after its signature is checked.
pub(crate) fn note_use(cluster: &Cluster, who: &Who<'_>) {
    if let Who::Key(id) = who {
        cluster.note_key_used(id);
    }
}

pub(crate) fn who<'a>(root: &str, credentials: Option<&'a Credentials>) -> Who<'a> {
    match credentials {
        None => Who::Anonymous,
        Some(c) if c.access_key == root => Who::Root,
        Some(c) => Who::Key(&c.access_key),
    }
}

/// Refuses unless the signer has `right` in `bucket`: `AccessDenied`, and nothing is done.
///
/// # Errors
/// As said.
pub(crate) fn require(
    cluster: &Cluster,
    who: &Who<'_>,
    op: &str,
    bucket: &str,
    right: Right,
) -> S3Result<()> {
    match who {
        Who::Root => Ok(()),
        Who::Anonymous => {
            cluster.stats.count_denied(op);
            Err(anonymous_refused())
        }
        Who::Key(id) => {
            if cluster.accounts().rights(id, bucket).allow(right) {
                Ok(())
            } else {
                cluster.stats.count_denied(op);
                Err(err(
                    S3ErrorCode::AccessDenied,
                    format!(
                        "Access Denied: the key has no {} right in bucket {bucket:?}",
                        name(right)
                    ),
                ))
            }
        }
    }
}

/// Whether the signer has `right` in `bucket` (nothing counted or answered: for what a
/// right adds to an operation the signer may do, such as bypassing a governance
/// retention).
pub(crate) fn has(cluster: &Cluster, who: &Who<'_>, bucket: &str, right: Right) -> bool {
    match who {
        Who::Root => true,
        Who::Anonymous => false,
        Who::Key(id) => cluster.accounts().rights(id, bucket).allow(right),
    }
}

/// What an anonymous request that no bucket policy lets through is answered.
pub(crate) fn anonymous_refused() -> s3s::S3Error {
    err(
        S3ErrorCode::AccessDenied,
        "Access Denied: an unsigned request reads only what a bucket policy makes public",
    )
}

/// What the policy of a bucket lets anyone do with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Public {
    /// Nothing: rights decide.
    No,
    /// The request.
    Yes,
    /// A listing, if its prefix (as `s3s` parses it: [`PublicList`]) is one the policy
    /// lists.
    ListIfPrefix,
}

/// Marks a listing let in by the bucket's policy, to be checked against its prefix once
/// `s3s` has parsed it (`S3Access::list_objects`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PublicList;

/// Marks a read let in by the bucket's policy alone, for an unsigned request (whose
/// `response-*` overrides S3 refuses: `S3Access::get_object`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PublicRead;

/// What the policy of `bucket` lets anyone do with `op` (as `s3s` names it) on `key`:
/// `GetObject` and `HeadObject` under `s3:GetObject`, `ListObjects` and `ListObjectsV2`
/// under `s3:ListBucket` (their prefix checked once parsed) and `HeadBucket` under an
/// `s3:ListBucket` without a prefix condition (`oed_model::policy`). A read of a key
/// that does not exist is let in only where the policy also lists the bucket: otherwise
/// it is refused as S3 refuses it (403, not 404: the policy does not tell who may not
/// list which keys exist). A read of a version by its id (`by_version`) is not public:
/// S3 needs `s3:GetObjectVersion` for it, which no policy OED takes grants, so deleted
/// and replaced versions stay private.
///
/// # Errors
/// When the object's record cannot be read.
pub(crate) async fn public(
    cluster: &Cluster,
    op: &str,
    bucket: &str,
    key: Option<&str>,
    by_version: bool,
) -> S3Result<Public> {
    let table = cluster.accounts();
    let Some(policy) = table.policy(bucket) else {
        return Ok(Public::No);
    };
    match op {
        "GetObject" | "HeadObject" if by_version => Ok(Public::No),
        "GetObject" | "HeadObject" => {
            let Some(key) = key.filter(|k| policy.allows_get(k)) else {
                return Ok(Public::No);
            };
            if policy.allows_list("") {
                return Ok(Public::Yes);
            }
            // A key whose current version is a delete marker does not exist.
            let exists = cluster
                .head(bucket, key)
                .await
                .or_s3()?
                .is_some_and(|r| !r.delete_marker);
            Ok(if exists { Public::Yes } else { Public::No })
        }
        "ListObjects" | "ListObjectsV2" if policy.lists() => Ok(Public::ListIfPrefix),
        "HeadBucket" if policy.allows_list("") => Ok(Public::Yes),
        _ => Ok(Public::No),
    }
}

/// Refuses a listing let in by the bucket's policy ([`PublicList`]) whose `prefix` the
/// policy does not list.
///
/// # Errors
/// `AccessDenied`.
pub(crate) fn check_public_list(
    cluster: &Cluster,
    extensions: &http::Extensions,
    op: &str,
    bucket: &str,
    prefix: Option<&str>,
) -> S3Result<()> {
    if extensions.get::<PublicList>().is_none() {
        return Ok(());
    }
    let allowed = cluster
        .accounts()
        .policy(bucket)
        .is_some_and(|p| p.allows_list(prefix.unwrap_or("")));
    if allowed {
        return Ok(());
    }
    cluster.stats.count_denied(op);
    Err(err(
        S3ErrorCode::AccessDenied,
        "Access Denied: the bucket's policy does not list this prefix",
    ))
}

/// Refuses an unsigned read let in by the bucket's policy ([`PublicRead`]) that asks for
/// `response-*` overrides, as S3 does.
///
/// # Errors
/// `InvalidRequest`.
pub(crate) fn check_public_overrides(extensions: &http::Extensions, any: bool) -> S3Result<()> {
    if any && extensions.get::<PublicRead>().is_some() {
        return Err(overrides_refused());
    }
    Ok(())
}

/// What S3 answers an unsigned read with `response-*` overrides.
pub(crate) fn overrides_refused() -> s3s::S3Error {
    err(
        S3ErrorCode::InvalidRequest,
        "Request specific response headers cannot be used for anonymous GET requests.",
    )
}

/// Refuses every key but the bootstrap key (an operation no right covers).
///
/// # Errors
/// `AccessDenied`.
pub(crate) fn refuse_unless_root(cluster: &Cluster, who: &Who<'_>, op: &str) -> S3Result<()> {
    if matches!(who, Who::Root) {
        return Ok(());
    }
    cluster.stats.count_denied(op);
    Err(err(
        S3ErrorCode::AccessDenied,
        format!("Access Denied: {op} is open to the bootstrap key only"),
    ))
}

fn name(right: Right) -> &'static str {
    match right {
        Right::Read => "read",
        Right::Write => "write",
        Right::Owner => "owner",
    }
}

/// The read right in a copy's source bucket.
///
/// # Errors
/// `AccessDenied` without it.
pub(crate) fn require_source(
    cluster: &Cluster,
    who: &Who<'_>,
    op: &str,
    src: &CopySource,
) -> S3Result<()> {
    match src {
        CopySource::Bucket { bucket, .. } => require(cluster, who, op, bucket, Right::Read),
        // Refused later as not supported; nothing is read.
        _ => Ok(()),
    }
}

/// Whether the signer may see `bucket` in `ListBuckets`: any right there.
pub(crate) fn may_see(cluster: &Cluster, who: &Who<'_>, bucket: &str) -> bool {
    match who {
        Who::Root => true,
        Who::Anonymous => false,
        Who::Key(id) => !cluster.accounts().rights(id, bucket).is_none(),
    }
}

/// After a key made a bucket: every right there for it. When another key holds rights
/// there already (it made the bucket at the same moment, and its grants were stored
/// first), the bucket is that key's: `BucketAlreadyExists`. The grants of an earlier
/// bucket of the name went with it ([`bucket_deleted`]).
///
/// # Errors
/// As said; `ServiceUnavailable` when the change could not be stored on this drive.
pub(crate) async fn new_bucket(cluster: &Cluster, who: &Who<'_>, bucket: &str) -> S3Result<()> {
    let Who::Key(id) = who else {
        // The bootstrap key has every right without a grant.
        return Ok(());
    };
    let table = cluster.accounts();
    let taken = table
        .bucket(bucket)
        .is_some_and(|b| b.grants.keys().any(|k| k != id && table.key(k).is_some()));
    if taken {
        return Err(err(
            S3ErrorCode::BucketAlreadyExists,
            format!("bucket {bucket:?} was made by another key"),
        ));
    }
    set_grants(cluster, bucket, [((*id).to_owned(), Rights::ALL)].into()).await
}

/// After a bucket is deleted: its grants go with it.
///
/// # Errors
/// `ServiceUnavailable` when the change could not be stored on this drive.
pub(crate) async fn bucket_deleted(cluster: &Cluster, bucket: &str) -> S3Result<()> {
    match cluster.accounts().bucket(bucket) {
        Some(b) if !b.grants.is_empty() => set_grants(cluster, bucket, BTreeMap::default()).await,
        _ => Ok(()),
    }
}

async fn set_grants(
    cluster: &Cluster,
    bucket: &str,
    grants: BTreeMap<String, Rights>,
) -> S3Result<()> {
    let entry = AccountEntry::Bucket(BucketAccess {
        bucket: bucket.to_owned(),
        grants,
        version: VersionId(0),
    });
    change(cluster, entry, "grants").await
}

/// Stores `entry` in the account table and spreads it (`Cluster::change_accounts`).
///
/// # Errors
/// `ServiceUnavailable`, naming `what` (the bucket's grants, its policy) was not stored.
pub(crate) async fn change(cluster: &Cluster, entry: AccountEntry, what: &str) -> S3Result<()> {
    cluster
        .change_accounts(vec![entry])
        .await
        .map(|_| ())
        .map_err(|e| {
            err(
                S3ErrorCode::ServiceUnavailable,
                format!("the bucket's {what} could not be stored: {e}"),
            )
        })
}
