//! Object lock: write once, read many. A bucket made with object lock
//! (`x-amz-bucket-object-lock-enabled: true`, or `PutObjectLockConfiguration` on a
//! versioned bucket) keeps versions that no key, the bootstrap key included, may delete
//! while they are locked: by a retention date (`GOVERNANCE` or `COMPLIANCE` mode) or a
//! legal hold. Writes still add versions (and delete markers): versioning is on and
//! stays on, so nothing locked is replaced.
//!
//! A version's retention and legal hold are set by its write (`x-amz-object-lock-*`
//! headers, else the bucket's default retention) and changed by `PutObjectRetention` and
//! `PutObjectLegalHold`, which keep the version ([`oed_cluster::amend`]). A `GOVERNANCE`
//! retention may be shortened or removed, and its version deleted, by a key with the
//! bucket's `owner` right that sends `x-amz-bypass-governance-retention: true`; a
//! `COMPLIANCE` retention only extended, and its version deleted by nobody before its
//! date. The bucket's configuration is a field of its settings entry
//! ([`oed_model::account::BucketSettings::object_lock`]).

use s3s::dto::{
    DefaultRetention as S3DefaultRetention, GetObjectLegalHoldOutput,
    GetObjectLockConfigurationOutput, GetObjectRetentionOutput, ObjectLockConfiguration,
    ObjectLockEnabled, ObjectLockLegalHold, ObjectLockLegalHoldStatus, ObjectLockMode,
    ObjectLockRetention, ObjectLockRetentionMode, ObjectLockRule, PutObjectLegalHoldOutput,
    PutObjectLockConfigurationOutput, PutObjectRetentionOutput, Timestamp,
};
use s3s::{S3Error, S3ErrorCode, S3Response, S3Result};

use oed_cluster::Cluster;
use oed_model::account::{DefaultRetention, ObjectLock, Versioning};
use oed_model::drive::Change;
use oed_model::record::{LockMode, ObjectRecord, Retention, now_ms};

use crate::locks::{date, denied, of_bucket};
use crate::{OrS3, err, need_bucket};

fn missing_config(bucket: &str) -> S3Error {
    err(
        S3ErrorCode::InvalidRequest,
        format!(
            "Bucket is missing Object Lock Configuration: bucket {bucket:?} was not made with object lock"
        ),
    )
}

fn mode_name(m: LockMode) -> &'static str {
    match m {
        LockMode::Governance => "GOVERNANCE",
        LockMode::Compliance => "COMPLIANCE",
    }
}

/// A mode as S3 names it; `code` for any other name.
fn mode(name: &str, code: S3ErrorCode) -> S3Result<LockMode> {
    match name {
        "GOVERNANCE" => Ok(LockMode::Governance),
        "COMPLIANCE" => Ok(LockMode::Compliance),
        other => Err(err(
            code,
            format!("object lock mode {other:?}: it is GOVERNANCE or COMPLIANCE"),
        )),
    }
}

/// A retention date from a client: in the future.
fn future(t: &Timestamp) -> S3Result<u64> {
    let ms = crate::millis(t).unwrap_or(0);
    if ms <= now_ms() {
        return Err(err(
            S3ErrorCode::InvalidArgument,
            "The retain until date must be in the future",
        ));
    }
    Ok(ms)
}

/// Makes `bucket`, just created with `x-amz-bucket-object-lock-enabled: true`, a bucket
/// with object lock: versioning enabled, no default retention.
///
/// # Errors
/// `ServiceUnavailable` when the change could not be stored.
pub(crate) async fn enable_on_create(cluster: &Cluster, bucket: &str) -> S3Result<()> {
    crate::versioning::change_settings(cluster, bucket, |s| {
        s.versioning = Versioning::Enabled;
        s.object_lock = Some(ObjectLock::default());
    })
    .await
}

/// `PutObjectLockConfiguration`: enables object lock on a bucket whose versioning is
/// enabled, and sets its default retention (none without a `Rule`).
///
/// # Errors
/// `MalformedXML` for a configuration S3 would not read; `InvalidArgument` for a period
/// that is not a positive integer; `InvalidBucketState` (409) when versioning is not
/// enabled; `NoSuchBucket`.
pub(crate) async fn put_config(
    cluster: &Cluster,
    bucket: &str,
    config: Option<ObjectLockConfiguration>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    need_bucket(cluster, bucket).await?;
    let Some(config) = config else {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "the request has no ObjectLockConfiguration",
        ));
    };
    if config
        .object_lock_enabled
        .as_ref()
        .map(ObjectLockEnabled::as_str)
        != Some("Enabled")
    {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "ObjectLockEnabled must be Enabled (object lock cannot be turned off)",
        ));
    }
    let default_retention = match config.rule {
        None => None,
        Some(ObjectLockRule {
            default_retention: None,
        }) => {
            return Err(err(
                S3ErrorCode::MalformedXML,
                "an object lock Rule holds a DefaultRetention",
            ));
        }
        Some(ObjectLockRule {
            default_retention: Some(d),
        }) => Some(default_retention(&d)?),
    };
    if crate::versioning::state(cluster, bucket) != Versioning::Enabled {
        let mut e = err(
            S3ErrorCode::InvalidBucketState,
            "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration",
        );
        e.set_status_code(http::StatusCode::CONFLICT);
        return Err(e);
    }
    crate::versioning::change_settings(cluster, bucket, |s| {
        s.object_lock = Some(ObjectLock { default_retention });
    })
    .await?;
    tracing::info!(bucket, ?default_retention, "bucket object lock set");
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

fn default_retention(d: &S3DefaultRetention) -> S3Result<DefaultRetention> {
    let Some(m) = &d.mode else {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "a DefaultRetention names a Mode (GOVERNANCE or COMPLIANCE)",
        ));
    };
    let mode = mode(m.as_str(), S3ErrorCode::MalformedXML)?;
    let positive = |n: i32| {
        u32::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            err(
                S3ErrorCode::InvalidArgument,
                format!("Default retention period must be a positive integer value, not {n}"),
            )
        })
    };
    let at_most = |n: u32, most: u32, unit: &str| {
        if n > most {
            Err(err(
                S3ErrorCode::InvalidArgument,
                format!("Default retention period too large: {n} {unit}, at most {most}"),
            ))
        } else {
            Ok(n)
        }
    };
    match (d.days, d.years) {
        (Some(days), None) => Ok(DefaultRetention {
            mode,
            days: Some(at_most(positive(days)?, 36_500, "days")?),
            years: None,
        }),
        (None, Some(years)) => Ok(DefaultRetention {
            mode,
            days: None,
            years: Some(at_most(positive(years)?, 100, "years")?),
        }),
        _ => Err(err(
            S3ErrorCode::MalformedXML,
            "a DefaultRetention names Days or Years, one of them",
        )),
    }
}

/// `GetObjectLockConfiguration`.
///
/// # Errors
/// `ObjectLockConfigurationNotFoundError` (404) for a bucket without object lock;
/// `NoSuchBucket`.
pub(crate) async fn get_config(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    need_bucket(cluster, bucket).await?;
    let Some(lock) = of_bucket(cluster, bucket) else {
        let mut e = err(
            S3ErrorCode::ObjectLockConfigurationNotFoundError,
            format!("Object Lock configuration does not exist for this bucket: {bucket:?}"),
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(e);
    };
    let int = |n: Option<u32>| n.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from_static(ObjectLockEnabled::ENABLED)),
            rule: lock.default_retention.map(|d| ObjectLockRule {
                default_retention: Some(S3DefaultRetention {
                    mode: Some(ObjectLockRetentionMode::from(mode_name(d.mode).to_owned())),
                    days: int(d.days),
                    years: int(d.years),
                }),
            }),
        }),
    }))
}

/// The retention and legal hold a write to `bucket` names in its headers
/// (`x-amz-object-lock-mode` with `x-amz-object-lock-retain-until-date`,
/// `x-amz-object-lock-legal-hold`). A version whose write names no retention gets the
/// bucket's default as it is written (`oed_cluster::write`).
///
/// # Errors
/// `InvalidRequest` for lock headers on a bucket without object lock;
/// `InvalidArgument` for a mode without a date or the reverse, a date not in the future,
/// or an unknown mode or status.
pub(crate) fn of_write(
    cluster: &Cluster,
    bucket: &str,
    mode_header: Option<&ObjectLockMode>,
    until: Option<&Timestamp>,
    hold: Option<&ObjectLockLegalHoldStatus>,
) -> S3Result<(Option<Retention>, bool)> {
    let lock = of_bucket(cluster, bucket);
    if lock.is_none() && (mode_header.is_some() || until.is_some() || hold.is_some()) {
        return Err(missing_config(bucket));
    }
    if lock.is_none() {
        return Ok((None, false));
    }
    let retention = match (mode_header, until) {
        (Some(m), Some(t)) => Some(Retention {
            mode: mode(m.as_str(), S3ErrorCode::InvalidArgument)?,
            until_ms: future(t)?,
        }),
        // The bucket's default, if any, is given as the version is written.
        (None, None) => None,
        _ => {
            return Err(err(
                S3ErrorCode::InvalidArgument,
                "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied",
            ));
        }
    };
    let hold = match hold.map(ObjectLockLegalHoldStatus::as_str) {
        None | Some("OFF") => false,
        Some("ON") => true,
        Some(other) => {
            return Err(err(
                S3ErrorCode::InvalidArgument,
                format!("x-amz-object-lock-legal-hold {other:?}: it is ON or OFF"),
            ));
        }
    };
    Ok((retention, hold))
}

/// [`of_write`] of a request's input that has S3's `object_lock_*` fields (`PutObject`,
/// `CreateMultipartUpload`, `CopyObject`).
macro_rules! of_input {
    ($cluster:expr, $input:expr) => {
        $crate::objectlock::of_write(
            $cluster,
            &$input.bucket,
            $input.object_lock_mode.as_ref(),
            $input.object_lock_retain_until_date.as_ref(),
            $input.object_lock_legal_hold_status.as_ref(),
        )
    };
}
pub(crate) use of_input;

/// What a GET or HEAD answers of `rec`'s lock: its mode, date and legal hold.
pub(crate) fn headers(
    rec: &ObjectRecord,
) -> (
    Option<ObjectLockMode>,
    Option<Timestamp>,
    Option<ObjectLockLegalHoldStatus>,
) {
    let hold = (rec.legal_hold || rec.legal_hold_changed.0 != 0).then(|| {
        ObjectLockLegalHoldStatus::from_static(if rec.legal_hold {
            ObjectLockLegalHoldStatus::ON
        } else {
            ObjectLockLegalHoldStatus::OFF
        })
    });
    (
        rec.retention
            .map(|r| ObjectLockMode::from(mode_name(r.mode).to_owned())),
        rec.retention.map(|r| crate::timestamp(r.until_ms)),
        hold,
    )
}

/// The version a retention or legal hold request names, in a bucket with object lock.
async fn version(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> S3Result<ObjectRecord> {
    need_bucket(cluster, bucket).await?;
    if of_bucket(cluster, bucket).is_none() {
        return Err(missing_config(bucket));
    }
    crate::versioning::object(cluster, bucket, key, version).await
}

/// `PutObjectRetention`: sets, extends, shortens or removes a version's retention. A
/// `COMPLIANCE` retention in force may only be extended (the same mode, a later date); a
/// `GOVERNANCE` one may be extended or made `COMPLIANCE`, and shortened or removed only
/// with `bypass`.
///
/// # Errors
/// `AccessDenied` for a change the lock in force does not allow; `InvalidRequest` on a
/// bucket without object lock; `MalformedXML`, `InvalidArgument`; `NoSuchKey`,
/// `NoSuchVersion`; `ServiceUnavailable`.
pub(crate) async fn put_retention(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    retention: Option<ObjectLockRetention>,
    bypass: bool,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let rec = version(cluster, bucket, key, version_id).await?;
    let Some(r) = retention else {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "the request has no Retention",
        ));
    };
    let new = match (r.mode, r.retain_until_date) {
        (Some(m), Some(t)) => Some(Retention {
            mode: mode(m.as_str(), S3ErrorCode::MalformedXML)?,
            until_ms: future(&t)?,
        }),
        (None, None) => None,
        _ => {
            return Err(err(
                S3ErrorCode::MalformedXML,
                "a Retention names both Mode and RetainUntilDate (or neither, to remove it)",
            ));
        }
    };
    if let Some(old) = rec.retention.filter(|o| o.until_ms > now_ms()) {
        let stricter = new.is_some_and(|n| {
            n.until_ms >= old.until_ms
                && (n.mode == LockMode::Compliance || old.mode == LockMode::Governance)
        });
        if !stricter {
            match old.mode {
                LockMode::Compliance => {
                    return Err(denied(format!(
                        "Access Denied: the version is retained in COMPLIANCE mode until {}; its retention can only be extended",
                        date(&rec)
                    )));
                }
                LockMode::Governance if !bypass => {
                    return Err(denied(format!(
                        "Access Denied: the version is retained in GOVERNANCE mode until {}; shortening or removing it takes x-amz-bypass-governance-retention: true and the bucket's owner right",
                        date(&rec)
                    )));
                }
                LockMode::Governance => {}
            }
        }
    }
    cluster.amend(&rec, Change::Retention(new)).await.or_s3()?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

/// `GetObjectRetention`.
///
/// # Errors
/// `NoSuchObjectLockConfiguration` (404) for a version without retention;
/// `InvalidRequest` on a bucket without object lock; `NoSuchKey`, `NoSuchVersion`.
pub(crate) async fn get_retention(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let rec = version(cluster, bucket, key, version_id).await?;
    let Some(r) = rec.retention else {
        let mut e = err(
            S3ErrorCode::NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration",
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(e);
    };
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from(mode_name(r.mode).to_owned())),
            retain_until_date: Some(crate::timestamp(r.until_ms)),
        }),
    }))
}

/// `PutObjectLegalHold`: puts a legal hold on a version or takes it off.
///
/// # Errors
/// `MalformedXML` for a status other than `ON` or `OFF`; `InvalidRequest` on a bucket
/// without object lock; `NoSuchKey`, `NoSuchVersion`; `ServiceUnavailable`.
pub(crate) async fn put_legal_hold(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    hold: Option<ObjectLockLegalHold>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let rec = version(cluster, bucket, key, version_id).await?;
    let on = match hold
        .and_then(|h| h.status)
        .as_ref()
        .map(ObjectLockLegalHoldStatus::as_str)
    {
        Some("ON") => true,
        Some("OFF") => false,
        other => {
            return Err(err(
                S3ErrorCode::MalformedXML,
                format!("legal hold Status {other:?}: it is ON or OFF"),
            ));
        }
    };
    cluster.amend(&rec, Change::LegalHold(on)).await.or_s3()?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

/// `GetObjectLegalHold`: `ON` or `OFF`.
///
/// # Errors
/// `InvalidRequest` on a bucket without object lock; `NoSuchKey`, `NoSuchVersion`.
pub(crate) async fn get_legal_hold(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let rec = version(cluster, bucket, key, version_id).await?;
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from_static(if rec.legal_hold {
                ObjectLockLegalHoldStatus::ON
            } else {
                ObjectLockLegalHoldStatus::OFF
            })),
        }),
    }))
}
