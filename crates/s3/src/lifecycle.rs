//! A bucket's lifecycle configuration: `PutBucketLifecycleConfiguration`,
//! `GetBucketLifecycleConfiguration`, `DeleteBucketLifecycle`, checked as S3 checks it,
//! and the `x-amz-expiration` header of objects a rule will expire.
//!
//! The rules are a field of the bucket's settings entry in the account table
//! ([`oed_model::account::BucketSettings::lifecycle`], [`oed_model::lifecycle`]); every
//! drive applies them to the versions it holds in the background (`oed_repair::lifecycle`).
//! Transitions to other storage classes are refused (`InvalidStorageClass`): OED keeps
//! one storage class.

use std::collections::{BTreeMap, HashSet};

use s3s::dto::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, DeleteBucketLifecycleOutput,
    ExpirationStatus, GetBucketLifecycleConfigurationOutput, LifecycleExpiration, LifecycleRule,
    LifecycleRuleAndOperator, LifecycleRuleFilter, NoncurrentVersionExpiration,
    PutBucketLifecycleConfigurationOutput, Tag,
};
use s3s::{S3Error, S3ErrorCode, S3Response, S3Result};

use oed_cluster::Cluster;
use oed_model::lifecycle::{
    Clock, DAY_MS, Expiration, Filter, FilterForm, Lifecycle, MAX_ID_CHARS, MAX_NEWER_VERSIONS,
    MAX_RULES, NoncurrentExpiration, Rule, Subject,
};
use oed_model::record::ObjectRecord;

use crate::tagging::{MAX_OBJECT_TAGS, from_set, tag_set};
use crate::{err, need_bucket};

fn invalid(message: impl Into<String>) -> S3Error {
    err(S3ErrorCode::InvalidArgument, message.into())
}

fn malformed(message: impl Into<String>) -> S3Error {
    err(S3ErrorCode::MalformedXML, message.into())
}

/// A count of days from a rule: a positive integer.
fn days(n: i32, what: &str) -> S3Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|d| *d > 0)
        .ok_or_else(|| invalid(format!("'{what}' must be a positive integer, not {n}")))
}

fn size(n: i64, what: &str) -> S3Result<u64> {
    u64::try_from(n).map_err(|_| invalid(format!("{what} must not be negative, not {n}")))
}

/// The rule's filter, from its `Filter` or its own `Prefix` (exactly one of them).
fn filter(rule: &mut LifecycleRule) -> S3Result<Filter> {
    let (f, own_prefix) = (rule.filter.take(), rule.prefix.take());
    let Some(f) = f else {
        let Some(prefix) = own_prefix else {
            return Err(malformed(
                "a lifecycle Rule names neither a Filter nor a Prefix: give one (an empty Filter applies to every object)",
            ));
        };
        return Ok(Filter {
            form: FilterForm::RulePrefix,
            prefix,
            ..Filter::default()
        });
    };
    if own_prefix.is_some() {
        return Err(malformed(
            "a lifecycle Rule names both a Prefix and a Filter: give one",
        ));
    }
    let given = [
        f.prefix.is_some(),
        f.tag.is_some(),
        f.and.is_some(),
        f.object_size_greater_than.is_some(),
        f.object_size_less_than.is_some(),
    ];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(malformed(
            "a lifecycle Filter holds one of Prefix, Tag, ObjectSizeGreaterThan, ObjectSizeLessThan or And; combine conditions with And",
        ));
    }
    let mut out = Filter::default();
    if let Some(p) = f.prefix {
        out.form = FilterForm::Prefix;
        out.prefix = p;
    } else if let Some(t) = f.tag {
        out.form = FilterForm::Tag;
        out.tags = from_set(vec![t], 1)?;
    } else if let Some(n) = f.object_size_greater_than {
        out.form = FilterForm::SizeGreaterThan;
        out.size_greater_than = Some(size(n, "ObjectSizeGreaterThan")?);
    } else if let Some(n) = f.object_size_less_than {
        out.form = FilterForm::SizeLessThan;
        out.size_less_than = Some(size(n, "ObjectSizeLessThan")?);
    } else if let Some(and) = f.and {
        out.form = FilterForm::And;
        out.prefix = and.prefix.unwrap_or_default();
        out.tags = from_set(and.tags.unwrap_or_default(), MAX_OBJECT_TAGS)?;
        out.size_greater_than = and
            .object_size_greater_than
            .map(|n| size(n, "ObjectSizeGreaterThan"))
            .transpose()?;
        out.size_less_than = and
            .object_size_less_than
            .map(|n| size(n, "ObjectSizeLessThan"))
            .transpose()?;
    }
    if let (Some(gt), Some(lt)) = (out.size_greater_than, out.size_less_than)
        && gt >= lt
    {
        return Err(invalid(format!(
            "ObjectSizeGreaterThan ({gt}) must be less than ObjectSizeLessThan ({lt})"
        )));
    }
    Ok(out)
}

/// A date of a rule: midnight UTC, as milliseconds since the epoch.
fn midnight(date: &s3s::dto::Timestamp) -> S3Result<u64> {
    let ms = crate::millis(date).ok_or_else(|| invalid("'Date' must be after 1970"))?;
    if ms % DAY_MS != 0 {
        return Err(invalid(
            "'Date' must be at midnight GMT (an ISO 8601 date such as 2027-01-01T00:00:00Z)",
        ));
    }
    Ok(ms)
}

/// A rule's `Expiration`, checked against S3's rules (and its filter's).
fn expiration(e: &LifecycleExpiration, filter: &Filter) -> S3Result<Expiration> {
    let marker = e.expired_object_delete_marker;
    if marker.is_some() && (e.days.is_some() || e.date.is_some()) {
        return Err(invalid(
            "ExpiredObjectDeleteMarker cannot be specified with Days or Date in a Lifecycle Expiration Policy",
        ));
    }
    if e.days.is_some() && e.date.is_some() {
        return Err(invalid(
            "a lifecycle Expiration names Days or Date, not both",
        ));
    }
    if marker == Some(true)
        && (!filter.tags.is_empty()
            || filter.size_greater_than.is_some()
            || filter.size_less_than.is_some())
    {
        return Err(invalid(
            "ExpiredObjectDeleteMarker cannot be specified with a tag or size filter: a delete marker has neither",
        ));
    }
    let out = Expiration {
        days: e.days.map(|d| days(d, "Days")).transpose()?,
        date_ms: e.date.as_ref().map(midnight).transpose()?,
        expired_object_delete_marker: marker,
    };
    if out.days.is_none() && out.date_ms.is_none() && marker.is_none() {
        return Err(malformed(
            "a lifecycle Expiration names Days, Date or ExpiredObjectDeleteMarker",
        ));
    }
    Ok(out)
}

/// A rule's `NoncurrentVersionExpiration`, checked.
fn noncurrent(n: &NoncurrentVersionExpiration) -> S3Result<NoncurrentExpiration> {
    let Some(d) = n.noncurrent_days else {
        return Err(invalid(
            "NoncurrentVersionExpiration needs NoncurrentDays (a positive integer)",
        ));
    };
    let newer_versions = n
        .newer_noncurrent_versions
        .map(|v| {
            u32::try_from(v)
                .ok()
                .filter(|v| (1..=MAX_NEWER_VERSIONS).contains(v))
                .ok_or_else(|| {
                    invalid(format!(
                        "NewerNoncurrentVersions is 1 to {MAX_NEWER_VERSIONS}, not {v}"
                    ))
                })
        })
        .transpose()?;
    Ok(NoncurrentExpiration {
        days: days(d, "NoncurrentDays")?,
        newer_versions,
    })
}

/// One rule of a configuration, checked.
fn rule(mut r: LifecycleRule, make_id: &mut impl FnMut() -> String) -> S3Result<Rule> {
    if r.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || r.noncurrent_version_transitions
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        return Err(err(
            S3ErrorCode::InvalidStorageClass,
            "OED keeps one storage class (STANDARD): lifecycle transitions (Transition, NoncurrentVersionTransition) are not supported",
        ));
    }
    let id = match r.id.take() {
        Some(id) if id.chars().count() > MAX_ID_CHARS => {
            return Err(invalid(format!(
                "a lifecycle rule's ID is at most {MAX_ID_CHARS} characters long"
            )));
        }
        Some(id) if !id.is_empty() => id,
        _ => make_id(),
    };
    let enabled = match r.status.as_str() {
        "Enabled" => true,
        "Disabled" => false,
        other => {
            return Err(malformed(format!(
                "lifecycle rule {id:?}: Status {other:?}; it is Enabled or Disabled"
            )));
        }
    };
    let filter = filter(&mut r)?;
    let expiration = r
        .expiration
        .as_ref()
        .map(|e| expiration(e, &filter))
        .transpose()?;
    let noncurrent = r
        .noncurrent_version_expiration
        .as_ref()
        .map(noncurrent)
        .transpose()?;
    let abort_uploads_after_days = r
        .abort_incomplete_multipart_upload
        .map(|a| {
            let d = a.days_after_initiation.ok_or_else(|| {
                malformed("AbortIncompleteMultipartUpload needs DaysAfterInitiation")
            })?;
            days(d, "DaysAfterInitiation")
        })
        .transpose()?;
    if abort_uploads_after_days.is_some()
        && (!filter.tags.is_empty()
            || filter.size_greater_than.is_some()
            || filter.size_less_than.is_some())
    {
        return Err(err(
            S3ErrorCode::InvalidRequest,
            "AbortIncompleteMultipartUpload cannot be specified with a tag or size filter: an upload in progress has neither",
        ));
    }
    if expiration.is_none() && noncurrent.is_none() && abort_uploads_after_days.is_none() {
        return Err(invalid(format!(
            "lifecycle rule {id:?} names no action: give Expiration, NoncurrentVersionExpiration or AbortIncompleteMultipartUpload"
        )));
    }
    Ok(Rule {
        id,
        enabled,
        filter,
        expiration,
        noncurrent,
        abort_uploads_after_days,
    })
}

/// A configuration as a client sent it, checked: S3's limits and rules, the ids unique
/// (made for rules that have none).
///
/// # Errors
/// `MalformedXML`, `InvalidArgument`, `InvalidRequest` or `InvalidStorageClass`, saying
/// what was wrong.
pub fn parse(
    config: BucketLifecycleConfiguration,
    mut make_id: impl FnMut() -> String,
) -> S3Result<Lifecycle> {
    if config.rules.is_empty() {
        return Err(malformed(
            "a lifecycle configuration holds at least one Rule",
        ));
    }
    if config.rules.len() > MAX_RULES {
        return Err(invalid(format!(
            "a lifecycle configuration holds at most {MAX_RULES} rules, not {}",
            config.rules.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut rules = Vec::with_capacity(config.rules.len());
    for r in config.rules {
        let r = rule(r, &mut make_id)?;
        if !seen.insert(r.id.clone()) {
            return Err(invalid(format!(
                "Rule ID must be unique: {:?} names two rules",
                r.id
            )));
        }
        rules.push(r);
    }
    Ok(Lifecycle { rules })
}

fn tags_of(tags: &BTreeMap<String, String>) -> Option<Vec<Tag>> {
    (!tags.is_empty()).then(|| tag_set(tags))
}

fn bytes(n: Option<u64>) -> Option<i64> {
    n.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

/// A rule as S3 answers it: its filter in the form it was given.
fn answer(r: &Rule) -> LifecycleRule {
    let f = &r.filter;
    let (filter, prefix) = match f.form {
        FilterForm::RulePrefix => (None, Some(f.prefix.clone())),
        FilterForm::Empty => (Some(LifecycleRuleFilter::default()), None),
        FilterForm::Prefix => (
            Some(LifecycleRuleFilter {
                prefix: Some(f.prefix.clone()),
                ..LifecycleRuleFilter::default()
            }),
            None,
        ),
        FilterForm::Tag => (
            Some(LifecycleRuleFilter {
                tag: tag_set(&f.tags).into_iter().next(),
                ..LifecycleRuleFilter::default()
            }),
            None,
        ),
        FilterForm::SizeGreaterThan => (
            Some(LifecycleRuleFilter {
                object_size_greater_than: bytes(f.size_greater_than),
                ..LifecycleRuleFilter::default()
            }),
            None,
        ),
        FilterForm::SizeLessThan => (
            Some(LifecycleRuleFilter {
                object_size_less_than: bytes(f.size_less_than),
                ..LifecycleRuleFilter::default()
            }),
            None,
        ),
        FilterForm::And => (
            Some(LifecycleRuleFilter {
                and: Some(LifecycleRuleAndOperator {
                    prefix: (!f.prefix.is_empty()).then(|| f.prefix.clone()),
                    tags: tags_of(&f.tags),
                    object_size_greater_than: bytes(f.size_greater_than),
                    object_size_less_than: bytes(f.size_less_than),
                }),
                ..LifecycleRuleFilter::default()
            }),
            None,
        ),
    };
    let int = |d: u32| i32::try_from(d).unwrap_or(i32::MAX);
    LifecycleRule {
        id: Some(r.id.clone()),
        status: ExpirationStatus::from_static(if r.enabled {
            ExpirationStatus::ENABLED
        } else {
            ExpirationStatus::DISABLED
        }),
        filter,
        prefix,
        expiration: r.expiration.as_ref().map(|e| LifecycleExpiration {
            days: e.days.map(int),
            date: e.date_ms.map(crate::timestamp),
            expired_object_delete_marker: e.expired_object_delete_marker,
        }),
        noncurrent_version_expiration: r.noncurrent.as_ref().map(|n| NoncurrentVersionExpiration {
            noncurrent_days: Some(int(n.days)),
            newer_noncurrent_versions: n.newer_versions.map(int),
        }),
        abort_incomplete_multipart_upload: r.abort_uploads_after_days.map(|d| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(int(d)),
            }
        }),
        noncurrent_version_transitions: None,
        transitions: None,
    }
}

/// `PutBucketLifecycleConfiguration`: replaces the bucket's rules.
///
/// # Errors
/// As [`parse`]; `NoSuchBucket`; `ServiceUnavailable` when the change could not be stored.
pub(crate) async fn put(
    cluster: &Cluster,
    bucket: &str,
    config: Option<BucketLifecycleConfiguration>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    need_bucket(cluster, bucket).await?;
    let Some(config) = config else {
        return Err(malformed("the request has no LifecycleConfiguration"));
    };
    let lifecycle = parse(config, || cluster.new_version_id().to_string())?;
    let rules = lifecycle.rules.len();
    crate::versioning::change_settings(cluster, bucket, |s| s.lifecycle = Some(lifecycle)).await?;
    tracing::info!(bucket, rules, "bucket lifecycle set");
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

/// `GetBucketLifecycleConfiguration`.
///
/// # Errors
/// `NoSuchLifecycleConfiguration` (404) when the bucket has none; `NoSuchBucket`.
pub(crate) async fn get(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    need_bucket(cluster, bucket).await?;
    let Some(lc) = cluster
        .accounts()
        .settings(bucket)
        .and_then(|s| s.lifecycle.clone())
    else {
        let mut e = err(
            S3ErrorCode::NoSuchLifecycleConfiguration,
            format!("The lifecycle configuration does not exist: bucket {bucket:?} has none"),
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(e);
    };
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(lc.rules.iter().map(answer).collect()),
        transition_default_minimum_object_size: None,
    }))
}

/// `DeleteBucketLifecycle`: the bucket keeps no rules (none to delete is no error).
///
/// # Errors
/// `NoSuchBucket`; `ServiceUnavailable` when the change could not be stored.
pub(crate) async fn delete(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    need_bucket(cluster, bucket).await?;
    if cluster
        .accounts()
        .settings(bucket)
        .is_some_and(|s| s.lifecycle.is_some())
    {
        crate::versioning::change_settings(cluster, bucket, |s| s.lifecycle = None).await?;
    }
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}

/// The `x-amz-expiration` header of a current version a rule of its bucket will expire:
/// `expiry-date="<HTTP date>", rule-id="<id>"`, as S3 answers PUT, GET and HEAD.
pub(crate) fn expiration_header(
    cluster: &Cluster,
    record: &ObjectRecord,
    day_ms: u64,
) -> Option<String> {
    // Only a current version expires by `Expiration`.
    if record.delete_marker || record.key != record.user_key() {
        return None;
    }
    let accounts = cluster.accounts();
    let lc = accounts.settings(&record.bucket)?.lifecycle.as_ref()?;
    let subject = Subject {
        key: record.user_key(),
        size: record.object_size(),
        tags: &record.tags,
    };
    let clock = Clock { now_ms: 0, day_ms };
    let (due, id) = lc.current_expiry(subject, record.last_modified_ms, clock)?;
    let date = httpdate(due)?;
    Some(format!("expiry-date=\"{date}\", rule-id=\"{id}\""))
}

/// When an upload of `key` to `bucket` started now will be aborted by a rule, and by
/// which: `CreateMultipartUpload`'s `x-amz-abort-date` and `x-amz-abort-rule-id`.
pub(crate) fn abort_headers(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
) -> (Option<s3s::dto::Timestamp>, Option<String>) {
    let accounts = cluster.accounts();
    let Some(lc) = accounts.settings(bucket).and_then(|s| s.lifecycle.as_ref()) else {
        return (None, None);
    };
    let clock = Clock {
        now_ms: 0,
        day_ms: cluster.lifecycle_day_ms,
    };
    match lc.abort_rule(key, oed_model::record::now_ms(), clock) {
        Some((due, id)) => (Some(crate::timestamp(due)), Some(id.to_owned())),
        None => (None, None),
    }
}

/// An HTTP date (RFC 7231's IMF-fixdate) of `ms` since the epoch.
fn httpdate(ms: u64) -> Option<String> {
    let secs = i64::try_from(ms / 1000).ok()?;
    let t = time::OffsetDateTime::from_unix_timestamp(secs).ok()?;
    let (weekday, month) = (t.weekday().to_string(), t.month().to_string());
    Some(format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        weekday.get(..3)?,
        t.day(),
        month.get(..3)?,
        t.year(),
        t.hour(),
        t.minute(),
        t.second()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> LifecycleRule {
        LifecycleRule {
            id: Some("r".into()),
            status: ExpirationStatus::from_static(ExpirationStatus::ENABLED),
            filter: Some(LifecycleRuleFilter {
                prefix: Some("logs/".into()),
                ..LifecycleRuleFilter::default()
            }),
            expiration: Some(LifecycleExpiration {
                days: Some(3),
                ..LifecycleExpiration::default()
            }),
            abort_incomplete_multipart_upload: None,
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            prefix: None,
            transitions: None,
        }
    }

    fn one(r: LifecycleRule) -> S3Result<Lifecycle> {
        parse(BucketLifecycleConfiguration { rules: vec![r] }, || {
            "made".into()
        })
    }

    fn code(r: S3Result<Lifecycle>) -> String {
        r.err()
            .map(|e| e.code().as_str().to_owned())
            .unwrap_or_default()
    }

    #[test]
    fn a_rule_reads_and_answers_back_as_given() {
        let lc = one(base()).expect("valid");
        assert_eq!(lc.rules[0].filter.prefix, "logs/");
        assert_eq!(
            lc.rules[0].expiration.as_ref().and_then(|e| e.days),
            Some(3)
        );
        let back = answer(&lc.rules[0]);
        assert_eq!(back.filter, base().filter);
        assert_eq!(back.expiration, base().expiration);
        let mut legacy = base();
        legacy.filter = None;
        legacy.prefix = Some("a/".into());
        legacy.id = None;
        let lc = one(legacy).expect("valid");
        assert_eq!(lc.rules[0].id, "made");
        let back = answer(&lc.rules[0]);
        assert_eq!((back.prefix.as_deref(), back.filter), (Some("a/"), None));
    }

    #[test]
    fn what_s3_refuses_is_refused_with_its_code() {
        let mut r = base();
        r.status = ExpirationStatus::from_static("enabled");
        assert_eq!(code(one(r)), "MalformedXML");
        let mut r = base();
        r.expiration = Some(LifecycleExpiration {
            days: Some(0),
            ..LifecycleExpiration::default()
        });
        assert_eq!(code(one(r)), "InvalidArgument");
        let mut r = base();
        r.expiration = Some(LifecycleExpiration {
            days: Some(1),
            expired_object_delete_marker: Some(true),
            ..LifecycleExpiration::default()
        });
        assert_eq!(code(one(r)), "InvalidArgument");
        let mut r = base();
        r.id = Some("x".repeat(256));
        assert_eq!(code(one(r)), "InvalidArgument");
        let mut r = base();
        r.prefix = Some(String::new());
        assert_eq!(code(one(r)), "MalformedXML");
        let mut r = base();
        r.filter = None;
        assert_eq!(code(one(r)), "MalformedXML");
        let mut r = base();
        r.expiration = None;
        assert_eq!(code(one(r)), "InvalidArgument");
        let mut r = base();
        r.transitions = Some(vec![s3s::dto::Transition::default()]);
        assert_eq!(code(one(r)), "InvalidStorageClass");
        let mut r = base();
        r.filter = Some(LifecycleRuleFilter {
            tag: Some(Tag {
                key: Some("a".into()),
                value: Some("b".into()),
            }),
            ..LifecycleRuleFilter::default()
        });
        r.abort_incomplete_multipart_upload = Some(AbortIncompleteMultipartUpload {
            days_after_initiation: Some(1),
        });
        assert_eq!(code(one(r)), "InvalidRequest");
        let mut r = base();
        r.noncurrent_version_expiration = Some(NoncurrentVersionExpiration {
            noncurrent_days: Some(1),
            newer_noncurrent_versions: Some(101),
        });
        assert_eq!(code(one(r)), "InvalidArgument");
        let two = BucketLifecycleConfiguration {
            rules: vec![base(), base()],
        };
        assert_eq!(code(parse(two, String::new)), "InvalidArgument");
        let mut r = base();
        r.expiration = Some(LifecycleExpiration {
            date: Some(crate::timestamp(DAY_MS * 20_000 + 1000)),
            ..LifecycleExpiration::default()
        });
        assert_eq!(code(one(r)), "InvalidArgument");
    }

    #[test]
    fn http_dates_are_imf_fixdates() {
        assert_eq!(
            httpdate(1_356_220_800_000).as_deref(),
            Some("Sun, 23 Dec 2012 00:00:00 GMT")
        );
    }
}
