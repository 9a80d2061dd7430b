//! Tagging: an object version's tags (`PutObjectTagging`, `GetObjectTagging`,
//! `DeleteObjectTagging`, `x-amz-tagging` on writes) and a bucket's
//! (`PutBucketTagging`, `GetBucketTagging`, `DeleteBucketTagging`).
//!
//! An object's tags are part of its version's record: a write sets them, and a change
//! keeps the version (its id, data and `ETag`) and is made on the drives holding it
//! ([`oed_cluster::amend`]). A bucket's tags are a field of its settings entry in the
//! account table ([`oed_model::account::BucketSettings`]). S3's limits hold: at most 10
//! tags on an object and 50 on a bucket, keys of 1 to 128 characters and values of at
//! most 256, of letters, digits, spaces and `+ - = . _ : / @`, no key twice and none
//! starting with `aws:`.

use std::collections::BTreeMap;

use s3s::dto::{
    DeleteBucketTaggingOutput, DeleteObjectTaggingInput, DeleteObjectTaggingOutput,
    GetBucketTaggingOutput, GetObjectTaggingInput, GetObjectTaggingOutput, PutBucketTaggingOutput,
    PutObjectTaggingInput, PutObjectTaggingOutput, Tag, TaggingDirective,
};
use s3s::{S3ErrorCode, S3Response, S3Result};

use oed_cluster::Cluster;
use oed_model::drive::Change;
use oed_model::record::ObjectRecord;

use crate::{OrS3, err, need_bucket};

/// Most tags on an object version.
pub const MAX_OBJECT_TAGS: usize = 10;
/// Most tags on a bucket.
pub const MAX_BUCKET_TAGS: usize = 50;
/// Most characters of a tag's key.
pub const MAX_TAG_KEY: usize = 128;
/// Most characters of a tag's value.
pub const MAX_TAG_VALUE: usize = 256;

/// Tags as they are stored: by key.
pub type Tags = BTreeMap<String, String>;

/// Whether `c` may be in a tag's key or value: a letter, a digit, white space or one of
/// `+ - = . _ : / @`, as S3 allows.
fn allowed(c: char) -> bool {
    c.is_alphanumeric() || (c.is_whitespace() && !c.is_control()) || "+-=._:/@".contains(c)
}

fn invalid(message: String) -> s3s::S3Error {
    err(S3ErrorCode::InvalidTag, message)
}

/// Checks one tag against S3's rules.
///
/// # Errors
/// `InvalidTag`, saying which rule it breaks.
pub fn check_tag(key: &str, value: &str) -> S3Result<()> {
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_TAG_KEY {
        return Err(invalid(format!(
            "The TagKey you have provided is invalid: {chars} characters, where a key has 1 to {MAX_TAG_KEY}"
        )));
    }
    if value.chars().count() > MAX_TAG_VALUE {
        return Err(invalid(format!(
            "The TagValue you have provided is invalid: {} characters (key {key:?}), where a value has at most {MAX_TAG_VALUE}",
            value.chars().count()
        )));
    }
    if key.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("aws:")) {
        return Err(invalid(format!(
            "Your TagKey cannot be prefixed with aws: ({key:?}): those keys are reserved"
        )));
    }
    if let Some(c) = key.chars().chain(value.chars()).find(|&c| !allowed(c)) {
        return Err(invalid(format!(
            "The tag {key:?} has the character {c:?}: tags hold letters, digits, spaces and + - = . _ : / @"
        )));
    }
    Ok(())
}

/// Adds `key` = `value` to `tags`, checked.
fn add(tags: &mut Tags, key: String, value: String, most: usize) -> S3Result<()> {
    check_tag(&key, &value)?;
    if tags.contains_key(&key) {
        return Err(invalid(format!(
            "Cannot provide multiple Tags with the same key: {key:?}"
        )));
    }
    tags.insert(key, value);
    if tags.len() > most {
        return Err(invalid(format!(
            "Too many tags: at most {most} may be set here"
        )));
    }
    Ok(())
}

/// The tags of a `TagSet` document, checked; at most `most` of them.
///
/// # Errors
/// `InvalidTag` for a tag S3 would refuse, or too many; `MalformedXML` for a tag
/// without a key.
pub fn from_set(set: Vec<Tag>, most: usize) -> S3Result<Tags> {
    let mut tags = Tags::new();
    for t in set {
        let Some(key) = t.key else {
            return Err(err(
                S3ErrorCode::MalformedXML,
                "a Tag of the TagSet has no Key",
            ));
        };
        add(&mut tags, key, t.value.unwrap_or_default(), most)?;
    }
    Ok(tags)
}

/// The tags of an `x-amz-tagging` header: URL query parameters (`k1=v1&k2=v2`,
/// percent-encoded, `+` a space), checked.
///
/// # Errors
/// `InvalidArgument` for a header that is not such parameters or names a key twice;
/// `InvalidTag` for a tag S3 would refuse, or more than [`MAX_OBJECT_TAGS`].
pub fn from_header(header: &str) -> S3Result<Tags> {
    let bad = || {
        err(
            S3ErrorCode::InvalidArgument,
            "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates.",
        )
    };
    let mut tags = Tags::new();
    for pair in header.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| oed_model::uri::decode(&s.replace('+', " ")).ok_or_else(bad);
        let (k, v) = (decode(k)?, decode(v)?);
        if tags.contains_key(&k) {
            return Err(bad());
        }
        add(&mut tags, k, v, MAX_OBJECT_TAGS)?;
    }
    Ok(tags)
}

/// The tags a write sets from its `x-amz-tagging` header (none without one).
///
/// # Errors
/// As [`from_header`].
pub(crate) fn of_write(header: Option<&str>) -> S3Result<Tags> {
    header.map_or_else(|| Ok(Tags::new()), from_header)
}

/// The tags a copy gives its new object: the source's (`x-amz-tagging-directive` `COPY`,
/// the default) or its `x-amz-tagging` header's (`REPLACE`).
///
/// # Errors
/// `InvalidArgument` for another directive; as [`from_header`].
pub(crate) fn of_copy(
    directive: Option<&TaggingDirective>,
    header: Option<&str>,
    source: &ObjectRecord,
) -> S3Result<Tags> {
    match directive.map(TaggingDirective::as_str) {
        None | Some("COPY") => Ok(source.tags.clone()),
        Some("REPLACE") => of_write(header),
        Some(other) => Err(err(
            S3ErrorCode::InvalidArgument,
            format!("Unknown tagging directive {other:?}: it is COPY or REPLACE"),
        )),
    }
}

/// `x-amz-tagging-count` of a GET: none for a version without tags, as S3 answers.
pub(crate) fn count(record: &ObjectRecord) -> Option<i32> {
    (!record.tags.is_empty()).then(|| i32::try_from(record.tags.len()).unwrap_or(i32::MAX))
}

pub(crate) fn tag_set(tags: &Tags) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// `GetObjectTagging`: the tags of the current version, or of the one named.
///
/// # Errors
/// `NoSuchKey`, `NoSuchVersion`, `MethodNotAllowed` (a delete marker), `NoSuchBucket`.
pub(crate) async fn get_object(
    cluster: &Cluster,
    i: GetObjectTaggingInput,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let (rec, versioning) =
        crate::versioning::read(cluster, &i.bucket, &i.key, i.version_id.as_deref()).await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: tag_set(&rec.tags),
        version_id: crate::versioning::header(&rec, versioning),
    }))
}

/// `PutObjectTagging`: replaces the version's tags (the version stays as it is).
///
/// # Errors
/// `InvalidTag`, `MalformedXML`; as [`get_object`]; `ServiceUnavailable` when too few
/// of the version's drives answered.
pub(crate) async fn put_object(
    cluster: &Cluster,
    i: PutObjectTaggingInput,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let tags = from_set(i.tagging.tag_set, MAX_OBJECT_TAGS)?;
    let (rec, versioning) =
        crate::versioning::read(cluster, &i.bucket, &i.key, i.version_id.as_deref()).await?;
    cluster.amend(&rec, Change::Tags(tags)).await.or_s3()?;
    Ok(S3Response::new(PutObjectTaggingOutput {
        version_id: crate::versioning::header(&rec, versioning),
    }))
}

/// `DeleteObjectTagging`: removes the version's tags.
///
/// # Errors
/// As [`put_object`].
pub(crate) async fn delete_object(
    cluster: &Cluster,
    i: DeleteObjectTaggingInput,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let (rec, versioning) =
        crate::versioning::read(cluster, &i.bucket, &i.key, i.version_id.as_deref()).await?;
    if !rec.tags.is_empty() {
        cluster
            .amend(&rec, Change::Tags(Tags::new()))
            .await
            .or_s3()?;
    }
    Ok(S3Response::new(DeleteObjectTaggingOutput {
        version_id: crate::versioning::header(&rec, versioning),
    }))
}

/// `GetBucketTagging`.
///
/// # Errors
/// `NoSuchTagSet` for a bucket without tags; `NoSuchBucket`.
pub(crate) async fn get_bucket(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    need_bucket(cluster, bucket).await?;
    let tags = cluster
        .accounts()
        .settings(bucket)
        .map(|s| s.tags.clone())
        .unwrap_or_default();
    if tags.is_empty() {
        let mut e = err(
            S3ErrorCode::NoSuchTagSet,
            format!("The TagSet does not exist: bucket {bucket:?} has no tags"),
        );
        e.set_status_code(http::StatusCode::NOT_FOUND);
        return Err(e);
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: tag_set(&tags),
    }))
}

/// `PutBucketTagging`: replaces the bucket's tags.
///
/// # Errors
/// `InvalidTag`, `MalformedXML`, `NoSuchBucket`; `ServiceUnavailable` when the change
/// could not be stored.
pub(crate) async fn put_bucket(
    cluster: &Cluster,
    bucket: &str,
    set: Vec<Tag>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let tags = from_set(set, MAX_BUCKET_TAGS)?;
    need_bucket(cluster, bucket).await?;
    crate::versioning::change_settings(cluster, bucket, |s| s.tags = tags).await?;
    Ok(S3Response::new(PutBucketTaggingOutput {}))
}

/// `DeleteBucketTagging`.
///
/// # Errors
/// `NoSuchBucket`; `ServiceUnavailable` when the change could not be stored.
pub(crate) async fn delete_bucket(
    cluster: &Cluster,
    bucket: &str,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    need_bucket(cluster, bucket).await?;
    if cluster
        .accounts()
        .settings(bucket)
        .is_some_and(|s| !s.tags.is_empty())
    {
        crate::versioning::change_settings(cluster, bucket, |s| s.tags.clear()).await?;
    }
    Ok(S3Response::new(DeleteBucketTaggingOutput {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: S3Result<Tags>) -> String {
        r.unwrap_err().code().as_str().to_owned()
    }

    #[test]
    fn tags_keep_s3s_limits() {
        // A key whose fourth byte is inside a character is no `aws:` key (and no panic).
        assert!(check_tag("abcé", "v").is_ok());
        assert!(check_tag("AWS:x", "v").is_err());
        let k = "k".repeat(MAX_TAG_KEY);
        let v = "v".repeat(MAX_TAG_VALUE);
        check_tag(&k, &v).unwrap();
        check_tag("a b+c-d=e.f_g:h/i@j", "ünïcode 9").unwrap();
        check_tag("k", "").unwrap();
        for (key, value) in [
            ("", "v"),
            (&*format!("{k}k"), "v"),
            ("k", &*format!("{v}v")),
            ("aws:x", "v"),
            ("AWS:x", "v"),
            ("k&", "v"),
            ("k", "v?"),
            ("k", "<v>"),
        ] {
            let e = check_tag(key, value).unwrap_err();
            assert_eq!(e.code().as_str(), "InvalidTag", "{key:?}={value:?}");
        }
    }

    #[test]
    fn the_header_is_query_parameters_without_duplicates_and_at_most_ten() {
        let t = from_header("a=1&b%20c=d+e&empty=&bare").unwrap();
        assert_eq!(t["a"], "1");
        assert_eq!(t["b c"], "d e");
        assert_eq!(t["empty"], "");
        assert_eq!(t["bare"], "");
        assert!(from_header("").unwrap().is_empty());
        assert_eq!(code(from_header("a=1&a=2")), "InvalidArgument");
        assert_eq!(code(from_header("a=%FF")), "InvalidArgument");
        let ten: Vec<String> = (0..10).map(|i| format!("k{i}=v")).collect();
        assert_eq!(from_header(&ten.join("&")).unwrap().len(), 10);
        let eleven = format!("{}&k10=v", ten.join("&"));
        assert_eq!(code(from_header(&eleven)), "InvalidTag");
    }

    #[test]
    fn a_tag_set_names_each_key_once() {
        let tag = |k: Option<&str>, v: &str| Tag {
            key: k.map(str::to_owned),
            value: Some(v.to_owned()),
        };
        let t = from_set(vec![tag(Some("a"), "1"), tag(Some("b"), "2")], 10).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            code(from_set(vec![tag(Some("a"), "1"), tag(Some("a"), "2")], 10)),
            "InvalidTag"
        );
        assert_eq!(code(from_set(vec![tag(None, "1")], 10)), "MalformedXML");
        let fifty: Vec<Tag> = (0..51).map(|i| tag(Some(&format!("k{i}")), "v")).collect();
        assert_eq!(code(from_set(fifty.clone(), MAX_BUCKET_TAGS)), "InvalidTag");
        from_set(fifty[..50].to_vec(), MAX_BUCKET_TAGS).unwrap();
    }
}
