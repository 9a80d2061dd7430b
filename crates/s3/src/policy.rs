//! Bucket policies over S3 (`PutBucketPolicy`, `GetBucketPolicy`, `DeleteBucketPolicy`,
//! `GetBucketPolicyStatus`): the subset that makes a bucket or keys of it readable by
//! anyone ([`oed_model::policy`]). A policy is an entry of the account table, kept and
//! spread as keys and grants are; [`crate::access::public`] reads it on each request.

use s3s::dto::{
    DeleteBucketPolicyOutput, GetBucketPolicyOutput, GetBucketPolicyStatusOutput, PolicyStatus,
    PutBucketPolicyOutput,
};
use s3s::{S3ErrorCode, S3Response, S3Result};

use oed_cluster::Cluster;
use oed_model::account::{AccountEntry, BucketPolicy};
use oed_model::policy::Policy;
use oed_model::record::VersionId;

use crate::{err, need_bucket};

/// Checks `text` and puts it in force in `bucket`.
///
/// # Errors
/// `MalformedPolicy` saying what is not valid or not supported; `NoSuchBucket`.
pub(crate) async fn put(
    cluster: &Cluster,
    bucket: &str,
    text: String,
) -> S3Result<S3Response<PutBucketPolicyOutput>> {
    need_bucket(cluster, bucket).await?;
    if let Err(e) = Policy::parse(bucket, &text) {
        return Err(err(S3ErrorCode::MalformedPolicy, e.0));
    }
    set(cluster, bucket, Some(text)).await?;
    tracing::info!(bucket, "bucket policy set");
    Ok(S3Response::new(PutBucketPolicyOutput {}))
}

/// The policy as it was put.
///
/// # Errors
/// `NoSuchBucketPolicy` when the bucket has none; `NoSuchBucket`.
pub(crate) async fn get(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<GetBucketPolicyOutput>> {
    need_bucket(cluster, bucket).await?;
    let text = cluster.accounts().policy_text(bucket).map(str::to_owned);
    match text {
        Some(policy) => Ok(S3Response::new(GetBucketPolicyOutput {
            policy: Some(policy),
        })),
        None => Err(none(bucket)),
    }
}

/// Whether the policy makes the bucket public (every policy OED takes does).
///
/// # Errors
/// `NoSuchBucketPolicy` when the bucket has none, as S3 answers; `NoSuchBucket`.
pub(crate) async fn status(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
    need_bucket(cluster, bucket).await?;
    let table = cluster.accounts();
    if table.policy_text(bucket).is_none() {
        return Err(none(bucket));
    }
    let is_public = table.policy(bucket).is_some_and(Policy::is_public);
    Ok(S3Response::new(GetBucketPolicyStatusOutput {
        policy_status: Some(PolicyStatus {
            is_public: Some(is_public),
        }),
    }))
}

/// Takes the policy away (nothing to do without one).
///
/// # Errors
/// `NoSuchBucket`; `ServiceUnavailable` when the change could not be stored.
pub(crate) async fn delete(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
    need_bucket(cluster, bucket).await?;
    // Also when this drive sees none: one put on another drive may not have reached it.
    set(cluster, bucket, None).await?;
    tracing::info!(bucket, "bucket policy deleted");
    Ok(S3Response::new(DeleteBucketPolicyOutput {}))
}

/// After a bucket is deleted: its policy goes with it (also when this drive sees none:
/// one put on another drive may not have reached it yet).
///
/// # Errors
/// `ServiceUnavailable` when the change could not be stored on this drive.
pub(crate) async fn bucket_deleted(cluster: &Cluster, bucket: &str) -> S3Result<()> {
    set(cluster, bucket, None).await
}

/// After a bucket is made: a policy of an earlier bucket of the name that is still in the
/// table (its deletion could not be stored) goes.
///
/// # Errors
/// `ServiceUnavailable` when the change could not be stored on this drive.
pub(crate) async fn bucket_made(cluster: &Cluster, bucket: &str) -> S3Result<()> {
    if cluster.accounts().policy_text(bucket).is_some() {
        set(cluster, bucket, None).await?;
    }
    Ok(())
}

fn none(bucket: &str) -> s3s::S3Error {
    err(
        S3ErrorCode::NoSuchBucketPolicy,
        format!("The bucket policy does not exist: bucket {bucket:?} has none"),
    )
}

async fn set(cluster: &Cluster, bucket: &str, policy: Option<String>) -> S3Result<()> {
    let entry = AccountEntry::Policy(BucketPolicy {
        bucket: bucket.to_owned(),
        policy,
        version: VersionId(0),
    });
    crate::access::change(cluster, entry, "policy").await
}
