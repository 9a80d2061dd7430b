//! Versioning (`PutBucketVersioning`, `GetBucketVersioning`) and what it changes in the
//! object operations: the version a GET, HEAD, DELETE or copy names (`versionId`),
//! delete markers, and the `null` version of writes while versioning is suspended. A
//! bucket's versioning state is an entry of the account table
//! ([`oed_model::account::BucketSettings`]), kept and spread as its grants are; how
//! versions are stored is in `oed_cluster::versions`.

use s3s::dto::{
    BucketVersioningStatus, GetBucketVersioningOutput, PutBucketVersioningOutput,
    VersioningConfiguration,
};
use s3s::{S3Error, S3ErrorCode, S3Response, S3Result};

use oed_cluster::Cluster;
use oed_cluster::versions::VersionName;
use oed_cluster::write::{NewObject, Written};
use oed_model::account::{AccountEntry, BucketSettings, Versioning};
use oed_model::record::{ObjectRecord, VersionId};

use crate::{OrS3, check_user_key, err, need_bucket};

/// The versioning state of `bucket`.
pub(crate) fn state(cluster: &Cluster, bucket: &str) -> Versioning {
    cluster.accounts().versioning(bucket)
}

/// Sets the bucket's versioning: `Enabled` or `Suspended` (a bucket never returns to
/// unversioned, as in S3).
///
/// # Errors
/// `MalformedXML` without a status; `NotImplemented` for MFA delete; `NoSuchBucket`.
pub(crate) async fn put(
    cluster: &Cluster,
    bucket: &str,
    config: VersioningConfiguration,
) -> S3Result<S3Response<PutBucketVersioningOutput>> {
    need_bucket(cluster, bucket).await?;
    if config
        .mfa_delete
        .as_ref()
        .is_some_and(|m| m.as_str() == "Enabled")
    {
        return Err(err(
            S3ErrorCode::NotImplemented,
            "MFA delete is not supported",
        ));
    }
    let versioning = match config.status.as_ref().map(BucketVersioningStatus::as_str) {
        Some("Enabled") => Versioning::Enabled,
        Some("Suspended") => Versioning::Suspended,
        Some(other) => {
            return Err(err(
                S3ErrorCode::MalformedXML,
                format!("versioning Status {other:?}: it is Enabled or Suspended"),
            ));
        }
        None => {
            return Err(err(
                S3ErrorCode::MalformedXML,
                "the versioning configuration names no Status (Enabled or Suspended)",
            ));
        }
    };
    if versioning == Versioning::Suspended && crate::locks::of_bucket(cluster, bucket).is_some() {
        let mut e = err(
            S3ErrorCode::InvalidBucketState,
            "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed",
        );
        e.set_status_code(http::StatusCode::CONFLICT);
        return Err(e);
    }
    set(cluster, bucket, versioning).await?;
    tracing::info!(bucket, ?versioning, "bucket versioning set");
    Ok(S3Response::new(PutBucketVersioningOutput {}))
}

/// The bucket's versioning: no status when it was never enabled.
///
/// # Errors
/// `NoSuchBucket`.
pub(crate) async fn get(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    need_bucket(cluster, bucket).await?;
    let status = match state(cluster, bucket) {
        Versioning::Unversioned => None,
        Versioning::Enabled => Some(BucketVersioningStatus::from_static(
            BucketVersioningStatus::ENABLED,
        )),
        Versioning::Suspended => Some(BucketVersioningStatus::from_static(
            BucketVersioningStatus::SUSPENDED,
        )),
    };
    Ok(S3Response::new(GetBucketVersioningOutput {
        status,
        ..Default::default()
    }))
}

async fn set(cluster: &Cluster, bucket: &str, versioning: Versioning) -> S3Result<()> {
    change_settings(cluster, bucket, |s| s.versioning = versioning).await
}

/// Changes the bucket's settings entry (made with the defaults when it has none) by `f`.
///
/// # Errors
/// `ServiceUnavailable` when the change could not be stored on this drive.
pub(crate) async fn change_settings(
    cluster: &Cluster,
    bucket: &str,
    f: impl FnOnce(&mut BucketSettings),
) -> S3Result<()> {
    let mut settings = cluster
        .accounts()
        .settings(bucket)
        .cloned()
        .unwrap_or_else(|| BucketSettings {
            bucket: bucket.to_owned(),
            ..BucketSettings::default()
        });
    f(&mut settings);
    settings.version = VersionId(0);
    crate::access::change(cluster, AccountEntry::Settings(settings), "settings").await
}

/// After a bucket is deleted, or made anew: settings of an earlier bucket of the name go.
///
/// # Errors
/// `ServiceUnavailable` when the change could not be stored on this drive.
pub(crate) async fn reset(cluster: &Cluster, bucket: &str) -> S3Result<()> {
    let Some(s) = cluster.accounts().settings(bucket).cloned() else {
        return Ok(());
    };
    let defaults = BucketSettings {
        bucket: bucket.to_owned(),
        version: s.version,
        ..BucketSettings::default()
    };
    if s != defaults {
        change_settings(cluster, bucket, |s| {
            *s = BucketSettings {
                bucket: bucket.to_owned(),
                ..BucketSettings::default()
            };
        })
        .await?;
    }
    Ok(())
}

/// The version id header's value for `record` in a bucket of `versioning`: none in a
/// bucket that never had versioning (as S3 answers).
pub(crate) fn header(record: &ObjectRecord, versioning: Versioning) -> Option<String> {
    (record.versioned || versioning.configured()).then(|| record.s3_version_id())
}

/// Reads a `versionId` as clients send it.
///
/// # Errors
/// `InvalidArgument` for one that is neither `null` nor an id this cluster gives.
pub(crate) fn parse(version: &str) -> S3Result<VersionName> {
    version.parse().map_err(|_| {
        err(
            S3ErrorCode::InvalidArgument,
            format!("Invalid version id specified: {version:?}"),
        )
    })
}

/// The headers a delete marker is answered with: `x-amz-delete-marker: true` and its id.
fn marker_error(mut e: S3Error, marker: &ObjectRecord) -> S3Error {
    let mut h = http::HeaderMap::new();
    h.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&marker.s3_version_id()) {
        h.insert("x-amz-version-id", v);
    }
    e.set_headers(h);
    e
}

/// The version a read names: the current one (`version` `None`), or the one of that id.
/// A current delete marker reads as `NoSuchKey`; a delete marker named by its id as
/// `MethodNotAllowed` (both with `x-amz-delete-marker: true`), as S3 answers.
///
/// # Errors
/// `NoSuchKey`, `NoSuchVersion`, `MethodNotAllowed`, `InvalidArgument`, `NoSuchBucket`.
pub(crate) async fn object(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> S3Result<ObjectRecord> {
    check_user_key(key)?;
    let Some(version) = version else {
        let rec = crate::record(cluster, bucket, key).await?;
        if rec.delete_marker {
            return Err(marker_error(
                err(
                    S3ErrorCode::NoSuchKey,
                    format!(
                        "no object {key:?} in bucket {bucket:?}: it was deleted (its current version is a delete marker)"
                    ),
                ),
                &rec,
            ));
        }
        return Ok(rec);
    };
    let name = parse(version)?;
    let Some(found) = cluster.version(bucket, key, name).await.or_s3()? else {
        need_bucket(cluster, bucket).await?;
        return Err(err(
            S3ErrorCode::NoSuchVersion,
            format!("The specified version does not exist: {key:?} has no version {version:?}"),
        ));
    };
    if found.record.delete_marker {
        let mut e = err(
            S3ErrorCode::MethodNotAllowed,
            format!("version {version:?} of {key:?} is a delete marker: it has no data"),
        );
        e.set_status_code(http::StatusCode::METHOD_NOT_ALLOWED);
        return Err(marker_error(e, &found.record));
    }
    Ok(found.record)
}

/// [`object`], with the bucket's versioning state (for the version id header).
///
/// # Errors
/// As [`object`].
pub(crate) async fn read(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> S3Result<(ObjectRecord, Versioning)> {
    let rec = object(cluster, bucket, key, version).await?;
    Ok((rec, state(cluster, bucket)))
}

/// What a new version is in a bucket of `versioning`: one of its own when it is
/// enabled, else the `null` one.
pub(crate) fn new_object(obj: NewObject, versioning: Versioning) -> NewObject {
    NewObject {
        versioned: versioning == Versioning::Enabled,
        ..obj
    }
}

/// After a write of the `null` version while versioning is suspended: the `null` version
/// it replaces is gone, also when it was not the current one (S3 keeps one `null`
/// version per key). A current one was replaced by the drives as they committed.
///
/// # Errors
/// `ServiceUnavailable` when the versions cannot be listed.
pub(crate) async fn after_write(
    cluster: &Cluster,
    written: &Written,
    versioning: Versioning,
) -> S3Result<()> {
    if versioning != Versioning::Suspended {
        return Ok(());
    }
    cluster.drop_replaced_nulls(&written.record).await.or_s3()
}

/// What a delete did: the version it removed or the delete marker it added, and whether
/// that is a delete marker.
pub(crate) struct Deleted {
    /// `x-amz-version-id`, when there is one to name.
    pub version_id: Option<String>,
    /// `x-amz-delete-marker`.
    pub delete_marker: bool,
}

/// A client's delete of `bucket`/`key`: with `version`, that version goes for good (the
/// newest of the rest becomes current when it was the current one) unless object lock
/// keeps it (`bypass`: see [`crate::locks::check_delete`]); without, in a
/// bucket with versioning a delete marker becomes the current version (the `null` one
/// while versioning is suspended), and in one without the object goes. Deleting what
/// does not exist succeeds.
///
/// # Errors
/// `InvalidArgument` for a malformed version id; `AccessDenied` for a locked version;
/// `NoSuchBucket`; `ServiceUnavailable`.
pub(crate) async fn delete(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version: Option<&str>,
    bypass: bool,
) -> S3Result<Deleted> {
    check_user_key(key)?;
    if let Some(version) = version {
        let name = parse(version)?;
        let found = cluster.version(bucket, key, name).await.or_s3()?;
        if let Some(found) = &found {
            crate::locks::check_delete(&found.record, bypass)?;
            cluster.delete_version(found).await.or_s3()?;
        } else {
            need_bucket(cluster, bucket).await?;
        }
        return Ok(Deleted {
            version_id: Some(version.to_owned()),
            delete_marker: found.is_some_and(|f| f.record.delete_marker),
        });
    }
    let versioning = state(cluster, bucket);
    if !versioning.configured() {
        match cluster.head(bucket, key).await.or_s3()? {
            Some(rec) => {
                // A version's own lock holds whatever the bucket's settings say now.
                crate::locks::check_delete(&rec, bypass)?;
                cluster.delete_record(&rec).await;
            }
            None => need_bucket(cluster, bucket).await?,
        }
        return Ok(Deleted {
            version_id: None,
            delete_marker: false,
        });
    }
    need_bucket(cluster, bucket).await?;
    let marker = new_object(
        NewObject {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            delete_marker: true,
            ..Default::default()
        },
        versioning,
    );
    let written = cluster
        .put_object(marker, futures_util::stream::empty())
        .await
        .or_s3()?;
    after_write(cluster, &written, versioning).await?;
    Ok(Deleted {
        version_id: Some(written.record.s3_version_id()),
        delete_marker: true,
    })
}
