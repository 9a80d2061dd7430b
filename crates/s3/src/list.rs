//! Listing: `ListObjects` v1 and v2 (prefix, delimiter, max-keys, markers, continuation
//! tokens, start-after, `encoding-type=url`) and `ListObjectVersions` (key and version
//! markers), all over the cluster's merged listing.

use base64::Engine as _;
use s3s::dto::{
    CommonPrefix, DeleteMarkerEntry, EncodingType, ListObjectVersionsInput,
    ListObjectVersionsOutput, ListObjectsInput, ListObjectsOutput, ListObjectsV2Input,
    ListObjectsV2Output, Object, ObjectStorageClass, ObjectVersion, ObjectVersionStorageClass,
};
use s3s::{S3ErrorCode, S3Response, S3Result};

use super::{OrS3, USER_KEYS_START, bucket::owner, err, etag, need_bucket, timestamp};
use oed_cluster::Cluster;
use oed_cluster::list::{Page, walk};
use oed_cluster::versions::{After, VersionName, walk_versions};
use oed_model::record::ObjectRecord;
// Percent-encodes like S3 does for `encoding-type=url`.
use oed_model::uri::encode_path as url_encode;

/// What a listing's text fields go through: `encoding-type=url` or nothing.
pub(crate) struct Encoder(bool);

impl Encoder {
    pub(crate) fn new(t: Option<&EncodingType>) -> S3Result<Self> {
        match t.map(EncodingType::as_str) {
            None => Ok(Self(false)),
            Some("url") => Ok(Self(true)),
            Some(other) => Err(err(
                S3ErrorCode::InvalidArgument,
                format!("encoding-type {other:?}: only \"url\" is supported"),
            )),
        }
    }

    fn enc(&self, s: &str) -> String {
        if self.0 { url_encode(s) } else { s.to_owned() }
    }

    fn opt(&self, s: Option<&str>) -> Option<String> {
        s.map(|s| self.enc(s))
    }
}

fn max_keys(m: Option<i32>) -> S3Result<usize> {
    match m {
        None => Ok(1000),
        Some(n) if n < 0 => Err(err(S3ErrorCode::InvalidArgument, "max-keys is negative")),
        Some(n) => Ok(super::from_s3_i32(n).min(1000)),
    }
}

pub(crate) fn object(rec: &ObjectRecord, e: &Encoder, with_owner: bool) -> Object {
    Object {
        key: Some(e.enc(&rec.key)),
        size: Some(super::s3_i64(rec.object_size())),
        e_tag: Some(etag(&rec.etag)),
        last_modified: Some(timestamp(rec.last_modified_ms)),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        owner: with_owner.then(owner),
        ..Default::default()
    }
}

fn prefixes(p: &[String], e: &Encoder) -> Vec<CommonPrefix> {
    p.iter()
        .map(|p| CommonPrefix {
            prefix: Some(e.enc(p)),
        })
        .collect()
}

/// What every listing of clients' keys starts with: the bucket checked, the encoder,
/// `max-keys` and the prefix read, and the first page walked.
async fn user_page(
    cluster: &Cluster,
    bucket: &str,
    encoding: Option<&EncodingType>,
    max: Option<i32>,
    prefix: Option<&str>,
    delimiter: Option<&str>,
    after: Option<&str>,
) -> S3Result<(Encoder, usize, String, Page)> {
    need_bucket(cluster, bucket).await?;
    let e = Encoder::new(encoding)?;
    let max = max_keys(max)?;
    let prefix = prefix.unwrap_or_default().to_owned();
    let after = after.filter(|a| !a.is_empty());
    let page = walk(
        cluster,
        bucket,
        &prefix,
        delimiter,
        after,
        max,
        USER_KEYS_START,
    )
    .await
    .or_s3()?;
    Ok((e, max, prefix, page))
}

pub(crate) async fn v1(
    cluster: &Cluster,
    input: ListObjectsInput,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let (e, max, prefix, page) = user_page(
        cluster,
        &input.bucket,
        input.encoding_type.as_ref(),
        input.max_keys,
        input.prefix.as_deref(),
        input.delimiter.as_deref(),
        input.marker.as_deref(),
    )
    .await?;
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(input.bucket),
        prefix: Some(e.enc(&prefix)),
        marker: Some(e.opt(input.marker.as_deref()).unwrap_or_default()),
        max_keys: Some(super::s3_i32(max)),
        is_truncated: Some(page.truncated),
        // An empty delimiter is none (S3's rule): no NextMarker then either.
        next_marker: if page.truncated && input.delimiter.as_deref().is_some_and(|d| !d.is_empty())
        {
            e.opt(page.last.as_deref())
        } else {
            None
        },
        contents: Some(page.contents.iter().map(|r| object(r, &e, true)).collect()),
        common_prefixes: Some(prefixes(&page.prefixes, &e)),
        delimiter: e.opt(input.delimiter.as_deref()),
        encoding_type: input.encoding_type,
        request_charged: None,
    }))
}

fn encode_token(s: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

fn decode_token(t: &str) -> S3Result<String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            err(
                S3ErrorCode::InvalidArgument,
                "the continuation token is not one this cluster gave",
            )
        })
}

pub(crate) async fn v2(
    cluster: &Cluster,
    input: ListObjectsV2Input,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let token = input
        .continuation_token
        .as_deref()
        .map(decode_token)
        .transpose()?;
    let (e, max, prefix, page) = user_page(
        cluster,
        &input.bucket,
        input.encoding_type.as_ref(),
        input.max_keys,
        input.prefix.as_deref(),
        input.delimiter.as_deref(),
        token.as_deref().or(input.start_after.as_deref()),
    )
    .await?;
    let with_owner = input.fetch_owner.unwrap_or(false);
    let key_count = page.contents.len() + page.prefixes.len();
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(e.enc(&prefix)),
        max_keys: Some(super::s3_i32(max)),
        key_count: Some(super::s3_i32(key_count)),
        continuation_token: input.continuation_token,
        is_truncated: Some(page.truncated),
        next_continuation_token: if page.truncated {
            page.last.as_deref().map(encode_token)
        } else {
            None
        },
        contents: Some(
            page.contents
                .iter()
                .map(|r| object(r, &e, with_owner))
                .collect(),
        ),
        common_prefixes: Some(prefixes(&page.prefixes, &e)),
        delimiter: e.opt(input.delimiter.as_deref()),
        encoding_type: input.encoding_type,
        start_after: e.opt(input.start_after.as_deref()),
        request_charged: None,
    }))
}

pub(crate) async fn versions(
    cluster: &Cluster,
    input: ListObjectVersionsInput,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    need_bucket(cluster, &input.bucket).await?;
    let e = Encoder::new(input.encoding_type.as_ref())?;
    let max = max_keys(input.max_keys)?;
    let prefix = input.prefix.clone().unwrap_or_default();
    let key_marker = input.key_marker.as_deref().filter(|k| !k.is_empty());
    let version_marker = input.version_id_marker.as_deref().filter(|v| !v.is_empty());
    let after = resume_after(cluster, &input.bucket, key_marker, version_marker).await?;
    let page = walk_versions(
        cluster,
        &input.bucket,
        &prefix,
        input.delimiter.as_deref(),
        after.as_ref(),
        max,
    )
    .await
    .or_s3()?;
    let mut versions = Vec::new();
    let mut markers = Vec::new();
    for v in &page.versions {
        let r = &v.record;
        let key = Some(e.enc(r.user_key()));
        if r.delete_marker {
            markers.push(DeleteMarkerEntry {
                key,
                version_id: Some(r.s3_version_id()),
                is_latest: Some(v.latest),
                last_modified: Some(timestamp(r.last_modified_ms)),
                owner: Some(owner()),
            });
        } else {
            versions.push(ObjectVersion {
                key,
                version_id: Some(r.s3_version_id()),
                is_latest: Some(v.latest),
                size: Some(super::s3_i64(r.object_size())),
                e_tag: Some(etag(&r.etag)),
                last_modified: Some(timestamp(r.last_modified_ms)),
                owner: Some(owner()),
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            });
        }
    }
    // The next page resumes after the last entry: a version (its key and id) or a
    // common prefix (its key alone).
    let (next_key, next_version) = match (&page.last, page.truncated) {
        (Some((key, version)), true) => {
            let id = version.and_then(|v| {
                page.versions
                    .iter()
                    .rev()
                    .find(|x| x.record.version_id == v && x.record.user_key() == key)
                    .map(|x| x.record.s3_version_id())
            });
            (Some(e.enc(key)), id)
        }
        _ => (None, None),
    };
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: Some(e.enc(&prefix)),
        key_marker: Some(e.opt(key_marker).unwrap_or_default()),
        version_id_marker: Some(version_marker.unwrap_or_default().to_owned()),
        max_keys: Some(super::s3_i32(max)),
        is_truncated: Some(page.truncated),
        next_key_marker: next_key,
        next_version_id_marker: next_version,
        versions: Some(versions),
        delete_markers: Some(markers),
        common_prefixes: Some(prefixes(&page.prefixes, &e)),
        delimiter: e.opt(input.delimiter.as_deref()),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

/// Where a version listing resumes: after the key marker's versions up to the version
/// marker (all of them without one).
///
/// # Errors
/// `InvalidArgument` for a version marker without a key marker, or one malformed.
async fn resume_after(
    cluster: &Cluster,
    bucket: &str,
    key_marker: Option<&str>,
    version_marker: Option<&str>,
) -> S3Result<Option<After>> {
    Ok(match (key_marker, version_marker) {
        (None, Some(_)) => {
            return Err(err(
                S3ErrorCode::InvalidArgument,
                "A version-id marker cannot be specified without a key marker.",
            ));
        }
        (None, None) => None,
        (Some(k), None) => Some(After {
            key: k.to_owned(),
            version: None,
        }),
        (Some(k), Some(v)) => {
            let version = match crate::versioning::parse(v)? {
                VersionName::Id(id) => Some(id),
                // The `null` version sits among the others by its time.
                VersionName::Null => cluster
                    .version(bucket, k, VersionName::Null)
                    .await
                    .or_s3()?
                    .map(|f| f.record.version_id),
            };
            Some(After {
                key: k.to_owned(),
                version,
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encoding_keeps_slashes_and_unreserved() {
        assert_eq!(url_encode("a b/ü+%"), "a%20b/%C3%BC%2B%25");
        assert_eq!(decode_token(&encode_token("x/ü")).unwrap(), "x/ü");
        assert!(decode_token("***").is_err());
    }
}
