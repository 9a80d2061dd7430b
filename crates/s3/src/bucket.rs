//! Bucket operations: create, list, delete. Every drive keeps every bucket's record.

use s3s::dto::{
    Bucket, CreateBucketInput, CreateBucketOutput, DeleteBucketOutput, ListBucketsOutput, Owner,
};
use s3s::{S3ErrorCode, S3Response, S3Result};

use super::{OrS3, err, timestamp};
use crate::access::{self, Who};
use oed_cluster::Cluster;

/// The owner every bucket and object shows: the cluster has one account.
pub(crate) fn owner() -> Owner {
    Owner {
        display_name: Some("oed".into()),
        id: Some("oed".into()),
    }
}

/// Makes the bucket; the key that made it gets every right there (`access::new_bucket`),
/// and no policy of an earlier bucket of the name is left (`policy::bucket_made`).
pub(crate) async fn create(
    cluster: &Cluster,
    who: &Who<'_>,
    input: CreateBucketInput,
) -> S3Result<S3Response<CreateBucketOutput>> {
    if cluster.bucket_exists(&input.bucket).await.or_s3()? {
        return Err(err(
            S3ErrorCode::BucketAlreadyOwnedByYou,
            format!("bucket {:?} already exists", input.bucket),
        ));
    }
    cluster.create_bucket(&input.bucket).await.or_s3()?;
    crate::policy::bucket_made(cluster, &input.bucket).await?;
    crate::versioning::reset(cluster, &input.bucket).await?;
    if input.object_lock_enabled_for_bucket == Some(true) {
        crate::objectlock::enable_on_create(cluster, &input.bucket).await?;
    }
    access::new_bucket(cluster, who, &input.bucket).await?;
    Ok(S3Response::new(CreateBucketOutput {
        location: Some(format!("/{}", input.bucket)),
    }))
}

/// The buckets the signer has any right in.
pub(crate) async fn list(
    cluster: &Cluster,
    who: &Who<'_>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    let buckets = cluster
        .buckets()
        .await
        .or_s3()?
        .into_iter()
        .filter(|b| access::may_see(cluster, who, &b.name))
        .map(|b| Bucket {
            name: Some(b.name),
            creation_date: Some(timestamp(b.created_ms)),
            bucket_region: None,
        })
        .collect();
    Ok(S3Response::new(ListBucketsOutput {
        buckets: Some(buckets),
        owner: Some(owner()),
        ..Default::default()
    }))
}

pub(crate) async fn delete(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<DeleteBucketOutput>> {
    cluster.delete_bucket(bucket).await.or_s3()?;
    crate::policy::bucket_deleted(cluster, bucket).await?;
    crate::versioning::reset(cluster, bucket).await?;
    access::bucket_deleted(cluster, bucket).await?;
    Ok(S3Response::new(DeleteBucketOutput {}))
}
