//! Object operations: put, get (ranges), head, delete, multi-delete, copy; user metadata,
//! content type and conditional requests.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt;
use s3s::dto::{
    CopyObjectInput, CopyObjectOutput, CopyObjectResult, CopySource, DeleteObjectInput,
    DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, DeletedObject, ETagCondition,
    GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput, PutObjectInput,
    PutObjectOutput, StreamingBlob, Timestamp,
};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::error::s3_error;
use super::{OrS3, check_user_key, err, etag, need_bucket, timestamp};
use oed_cluster::Cluster;
use oed_cluster::write::{NewObject, Written};
use oed_model::error::Error;
use oed_model::record::{ObjectRecord, WriteCondition};

/// The response header that says a write was stored with fewer than `k + m` shards.
pub const DEGRADED_HEADER: &str = "x-oed-degraded";

/// The request's declared body length: Content-Length, or for an aws-chunked body its
/// decoded length. `s3s` puts the decoded length in Content-Length's place when the
/// request has one; an aws-chunked body may also come with `Transfer-Encoding: chunked`
/// and no Content-Length (botocore and the aws CLI send checksums that way over HTTPS),
/// and then `x-amz-decoded-content-length` is the length, as S3 takes it.
///
/// # Errors
/// `MissingContentLength` when neither gives a length, `InvalidArgument` for one that is
/// not a number.
pub fn body_length(len: Option<i64>, headers: &http::HeaderMap) -> S3Result<u64> {
    let decoded = || {
        let streaming = headers
            .get("x-amz-content-sha256")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("STREAMING-"));
        if !streaming {
            return None;
        }
        headers
            .get("x-amz-decoded-content-length")
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.parse::<i64>().map_err(|_| {
                    err(
                        S3ErrorCode::InvalidArgument,
                        format!("x-amz-decoded-content-length {v:?} is not a number of bytes"),
                    )
                })
            })
    };
    let len = len.map(Ok).or_else(decoded).transpose()?.ok_or_else(|| {
        err(
            S3ErrorCode::MissingContentLength,
            "the request needs a Content-Length",
        )
    })?;
    let len = u64::try_from(len)
        .map_err(|_| err(S3ErrorCode::InvalidArgument, "negative Content-Length"))?;
    if len > MAX_BODY {
        return Err(err(
            S3ErrorCode::EntityTooLarge,
            format!(
                "Your proposed upload exceeds the maximum allowed size: {len} bytes; one PUT or \
                 part takes at most {MAX_BODY} (5 GiB), a multipart upload up to 5 TiB"
            ),
        ));
    }
    Ok(len)
}

/// The largest body of one PUT or one part, as S3 states it: 5 GiB.
pub(crate) const MAX_BODY: u64 = 5 << 30;

/// The most user metadata an object may carry, as S3 states it: 2 KB, counted as the
/// UTF-8 bytes of every name (without `x-amz-meta-`) and value.
pub(crate) const MAX_USER_META: usize = 2048;

/// A Content-MD5 header sent empty is `InvalidDigest`, as S3 answers it (the parsed
/// input does not tell it from none).
pub(crate) fn empty_md5(headers: &http::HeaderMap) -> S3Result<()> {
    if headers
        .get("content-md5")
        .is_some_and(|v| v.as_bytes().trim_ascii().is_empty())
    {
        return Err(err(
            S3ErrorCode::InvalidDigest,
            "Content-MD5 is empty; send the base64 of the body's 16-byte MD5, or no header",
        ));
    }
    Ok(())
}

/// A Content-MD5 header, decoded.
pub(crate) fn content_md5(header: Option<&str>) -> S3Result<Option<[u8; 16]>> {
    header
        .map(|h| {
            base64::engine::general_purpose::STANDARD
                .decode(h.trim())
                .ok()
                .and_then(|d| <[u8; 16]>::try_from(d).ok())
                .ok_or_else(|| {
                    err(
                        S3ErrorCode::InvalidDigest,
                        "Content-MD5 is not the base64 of 16 bytes",
                    )
                })
        })
        .transpose()
}

/// User metadata with lower-cased names.
///
/// # Errors
/// `MetadataTooLarge` beyond [`MAX_USER_META`] bytes.
pub fn user_meta(meta: Option<s3s::dto::Metadata>) -> S3Result<BTreeMap<String, String>> {
    let meta: BTreeMap<String, String> = meta
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let size: usize = meta.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_USER_META {
        return Err(err(
            S3ErrorCode::MetadataTooLarge,
            format!(
                "Your metadata headers exceed the maximum allowed metadata size: {size} bytes of \
                 x-amz-meta-* names and values, at most {MAX_USER_META}"
            ),
        ));
    }
    Ok(meta)
}

/// The standard headers a PUT, a copy that replaces metadata, or a
/// `CreateMultipartUpload` stores with the object ([`ObjectRecord::headers`]). The
/// `aws-chunked` content coding describes the request's body, not the object: it is not
/// stored (S3 drops it too).
pub(crate) fn stored_headers(
    cache_control: Option<String>,
    disposition: Option<String>,
    encoding: Option<String>,
    language: Option<String>,
    expires: Option<&Timestamp>,
) -> BTreeMap<String, String> {
    let encoding = encoding
        .map(|e| {
            e.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .filter(|e| !e.is_empty());
    let expires = expires.and_then(|t| {
        let mut w = Vec::new();
        t.format(s3s::dto::TimestampFormat::HttpDate, &mut w).ok()?;
        String::from_utf8(w).ok()
    });
    [
        ("cache-control", cache_control),
        ("content-disposition", disposition),
        ("content-encoding", encoding),
        ("content-language", language),
        ("expires", expires),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k.to_owned(), v?)))
    .collect()
}

/// Sets the standard headers of a GET or HEAD answer from the record.
macro_rules! fill_headers {
    ($out:expr, $rec:expr) => {{
        let h = &$rec.headers;
        $out.cache_control = h.get("cache-control").cloned();
        $out.content_disposition = h.get("content-disposition").cloned();
        $out.content_encoding = h.get("content-encoding").cloned();
        $out.content_language = h.get("content-language").cloned();
        $out.expires = h
            .get("expires")
            .and_then(|e| Timestamp::parse(s3s::dto::TimestampFormat::HttpDate, e).ok());
    }};
}

/// A client's body as the write path takes it (an empty one when there is none), its
/// failures read into the daemon's errors: a frame of an aws-chunked body that fails its
/// signature, a body that fails its `x-amz-content-sha256`, or one that broke off.
pub(crate) fn body_stream(
    body: Option<StreamingBlob>,
    cluster: &Cluster,
) -> futures_util::stream::BoxStream<'static, Result<Bytes, Error>> {
    match body {
        Some(b) => super::RateFloor::new(
            b.map(|r| r.map_err(|e| body_error(&*e))),
            cluster.body_window,
            cluster.min_body_rate,
        )
        .boxed(),
        None => futures_util::stream::empty().boxed(),
    }
}

/// What a client's body failed with. `s3s` does not export its aws-chunked and payload
/// errors' types; their messages name them.
fn body_error(e: &(dyn std::error::Error + Send + Sync)) -> Error {
    let msg = e.to_string();
    if msg.contains("SignatureMismatch") {
        Error::BodySignature { chunk: true }
    } else if msg.contains("Sha256Mismatch") {
        Error::BodySignature { chunk: false }
    } else {
        Error::BodyBroken(msg)
    }
}

/// A copy's source as the write path takes it: a failure to read the source is the
/// cluster's, not the client's.
pub(crate) fn copy_body(
    body: oed_cluster::read::ObjectBody,
) -> impl futures_util::Stream<Item = Result<Bytes, Error>> + Unpin {
    body.map(|r| r.map_err(|e| Error::Unavailable(format!("reading the copy source: {e}"))))
}

pub(crate) async fn put(
    cluster: &Cluster,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let checksum = super::checksum::requested(
        &req.headers,
        req.input.checksum_algorithm.as_ref(),
        req.trailing_headers.as_ref(),
    )?;
    empty_md5(&req.headers)?;
    let (input, headers) = (req.input, req.headers);
    check_user_key(&input.key)?;
    need_bucket(cluster, &input.bucket).await?;
    let condition = write_condition(
        cluster,
        &input.bucket,
        &input.key,
        input.if_match.as_ref(),
        input.if_none_match.as_ref(),
    )
    .await?;
    let (retention, legal_hold) = super::objectlock::of_input!(cluster, input)?;
    let obj = NewObject {
        bucket: input.bucket,
        key: input.key,
        size: body_length(input.content_length, &headers)?,
        content_type: input.content_type,
        user_meta: user_meta(input.metadata)?,
        headers: stored_headers(
            input.cache_control,
            input.content_disposition,
            input.content_encoding,
            input.content_language,
            input.expires.as_ref(),
        ),
        content_md5: content_md5(input.content_md5.as_deref())?,
        checksum,
        condition,
        tags: super::tagging::of_write(input.tagging.as_deref())?,
        retention,
        legal_hold,
        ..Default::default()
    };
    let versioning = super::versioning::state(cluster, &obj.bucket);
    let obj = super::versioning::new_object(obj, versioning);
    let written = cluster
        .put_object(obj, body_stream(input.body, cluster))
        .await
        .or_s3()?;
    super::versioning::after_write(cluster, &written, versioning).await?;
    let mut out = PutObjectOutput {
        e_tag: Some(etag(&written.record.etag)),
        version_id: super::versioning::header(&written.record, versioning),
        expiration: super::lifecycle::expiration_header(
            cluster,
            &written.record,
            cluster.lifecycle_day_ms,
        ),
        ..Default::default()
    };
    super::checksum::fill_checksum!(out, written.record.checksum.as_ref(), typed);
    let mut resp = S3Response::new(out);
    mark_degraded(&mut resp.headers, &written);
    Ok(resp)
}

/// The condition of a conditional write (`PutObject`, `CompleteMultipartUpload`), checked
/// first against the key's current object (a write that fails it is refused before its
/// body moves), then by every drive as it commits, so that of two conditional writes that
/// race at most one is stored:
/// - `If-None-Match: *`: the key has no object, else `412 PreconditionFailed`; S3 takes
///   no other value on a write (`501 NotImplemented`).
/// - `If-Match: ETAG`: the key's object has that `ETag` (`*`: any), else `412`, or
///   `404 NoSuchKey` when there is none.
pub(crate) async fn write_condition(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<Option<WriteCondition>> {
    if if_match.is_none() && if_none_match.is_none() {
        return Ok(None);
    }
    if if_none_match.is_some_and(|c| !c.is_any()) {
        return Err(err(
            S3ErrorCode::NotImplemented,
            "If-None-Match on a write takes only *",
        ));
    }
    let (records, failed) = cluster.holders(bucket, key, &[]).await;
    let current = oed_cluster::newest_readable(&records);
    let m = usize::from(cluster.map().profile.m);
    if current.is_none() && failed > m {
        return Err(s3_error(Error::Unavailable(format!(
            "{failed} drives holding {key:?} did not answer"
        ))));
    }
    // A key whose current version is a delete marker has no object.
    if current.as_ref().is_some_and(|c| c.delete_marker) {
        if if_match.is_some() {
            return Err(err(
                S3ErrorCode::NoSuchKey,
                "If-Match: the key has no object (it was deleted)",
            ));
        }
        return Ok(Some(WriteCondition::Absent));
    }
    if if_none_match.is_some() {
        if current.is_some() {
            return Err(err(
                S3ErrorCode::PreconditionFailed,
                WriteCondition::Absent.failure(),
            ));
        }
        if if_match.is_none() {
            return Ok(Some(WriteCondition::Absent));
        }
    }
    let Some(cond) = if_match else {
        return Ok(None);
    };
    let Some(rec) = current else {
        // Versions are there but none on `k` drives: writes of the key are under way
        // (conditional ones that split the drives are being undone).
        return Err(if records.is_empty() {
            err(S3ErrorCode::NoSuchKey, "If-Match: the key has no object")
        } else {
            s3_error(Error::ConditionConflict(
                "If-Match: writes of this key are under way; try again".into(),
            ))
        });
    };
    if !etag_matches(cond, &rec) {
        return Err(err(
            S3ErrorCode::PreconditionFailed,
            format!("If-Match: the object's ETag is \"{}\"", rec.etag),
        ));
    }
    Ok(Some(WriteCondition::Current(rec.version_id)))
}

/// Says in a response header how many shards a degraded write is missing.
pub(crate) fn mark_degraded(headers: &mut http::HeaderMap, written: &Written) {
    if written.missing > 0 {
        headers.insert(
            DEGRADED_HEADER,
            http::HeaderValue::from(written.missing as u64),
        );
    }
}

fn seconds(ts: &Timestamp) -> i64 {
    time::OffsetDateTime::from(ts.clone()).unix_timestamp()
}

fn etag_matches(cond: &ETagCondition, rec: &ObjectRecord) -> bool {
    match cond.as_etag() {
        Some(e) => e.value() == rec.etag,
        None => cond.is_any(),
    }
}

/// Conditions on a read, in the order RFC 9110 gives them. HTTP dates have whole seconds.
/// A 304 or 412 answer carries the object's `ETag` and `Last-Modified`, as S3's do.
pub(crate) fn check_conditions(
    rec: &ObjectRecord,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
    not_modified: S3ErrorCode,
) -> S3Result<()> {
    let check = || -> S3Result<()> {
        let modified = super::s3_i64(rec.last_modified_ms / 1000);
        if let Some(c) = if_match {
            if !etag_matches(c, rec) {
                return Err(err(
                    S3ErrorCode::PreconditionFailed,
                    "If-Match did not match",
                ));
            }
        } else if let Some(t) = if_unmodified_since
            && modified > seconds(t)
        {
            return Err(err(
                S3ErrorCode::PreconditionFailed,
                "modified since If-Unmodified-Since",
            ));
        }
        if let Some(c) = if_none_match {
            if etag_matches(c, rec) {
                return Err(err(not_modified, "If-None-Match matched"));
            }
        } else if let Some(t) = if_modified_since
            && modified <= seconds(t)
        {
            return Err(err(not_modified, "not modified since If-Modified-Since"));
        }
        Ok(())
    };
    check().map_err(|mut e| {
        let mut h = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", rec.etag)) {
            h.insert(http::header::ETAG, v);
        }
        let mut w = Vec::new();
        if timestamp(rec.last_modified_ms)
            .format(s3s::dto::TimestampFormat::HttpDate, &mut w)
            .is_ok()
            && let Ok(v) = http::HeaderValue::from_bytes(&w)
        {
            h.insert(http::header::LAST_MODIFIED, v);
        }
        e.set_headers(h);
        e
    })
}

/// The bytes of part `n` (`partNumber`) of `rec`: of a multipart object, the part the
/// upload numbered `n`; of any other object, part 1 is the whole of it.
///
/// # Errors
/// `InvalidPartNumber` (416) for a part the object does not have.
pub fn part_range(rec: &ObjectRecord, n: i32) -> S3Result<std::ops::Range<u64>> {
    let unsatisfiable = || {
        err(
            S3ErrorCode::Custom("InvalidPartNumber".into()),
            format!(
                "the object has no part {n}: it has {} part(s)",
                rec.parts.len().max(1)
            ),
        )
    };
    if rec.parts.is_empty() {
        return if n == 1 {
            Ok(0..rec.object_size())
        } else {
            Err(unsatisfiable())
        };
    }
    let mut start: u64 = 0;
    for p in &rec.parts {
        if i64::from(p.number) == i64::from(n) {
            return Ok(start..start.saturating_add(p.size));
        }
        start = start.saturating_add(p.size);
    }
    Err(unsatisfiable())
}

/// `InvalidRange` (416) for a range that starts past the object's end, with the
/// `Content-Range: bytes */SIZE` HTTP asks for.
fn unsatisfiable(size: u64) -> S3Error {
    let mut e = err(
        S3ErrorCode::InvalidRange,
        format!("The requested range is not satisfiable: the object has {size} bytes"),
    );
    let mut h = http::HeaderMap::new();
    h.insert(
        http::header::CONTENT_RANGE,
        http::HeaderValue::from_str(&format!("bytes */{size}")).expect("ASCII digits"),
    );
    e.set_headers(h);
    e
}

/// What a GET or HEAD asks for.
pub struct Wanted {
    /// The bytes.
    bytes: std::ops::Range<u64>,
    /// The `Content-Range` to answer.
    content_range: Option<String>,
    /// Whether they are less than the object (a 206 answer, without the whole object's
    /// checksum): a `Range`, or a part of a multipart object.
    partial: bool,
}

/// The bytes a GET or HEAD asks for (a `Range`, a `partNumber`, or all).
///
/// # Errors
/// `InvalidRange` for a range past the object, `InvalidPartNumber` for a part it lacks.
pub fn wanted(
    rec: &ObjectRecord,
    range: Option<&s3s::dto::Range>,
    part: Option<i32>,
) -> S3Result<Wanted> {
    let size = rec.object_size();
    let (r, partial) = match (range, part) {
        (Some(_), Some(_)) => {
            return Err(err(
                S3ErrorCode::InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter",
            ));
        }
        (Some(r), None) => (r.check(size).map_err(|_| unsatisfiable(size))?, true),
        (None, Some(n)) => (part_range(rec, n)?, !rec.parts.is_empty()),
        (None, None) => (0..size, false),
    };
    // An empty part or object has no byte to name.
    let content_range =
        (partial && r.end > r.start).then(|| format!("bytes {}-{}/{size}", r.start, r.end - 1));
    Ok(Wanted {
        bytes: r,
        content_range,
        partial,
    })
}

/// `x-amz-mp-parts-count`: given, as S3 does, when a part was asked for.
fn parts_count(rec: &ObjectRecord, part: Option<i32>) -> Option<i32> {
    part.map(|_| super::s3_i32(rec.parts.len().max(1)))
}

pub(crate) async fn get(
    cluster: &Arc<Cluster>,
    input: GetObjectInput,
) -> S3Result<S3Response<GetObjectOutput>> {
    // The share of the coordinator's memory first, then the lookup: a GET that waits
    // for memory holds no connections to the drives meanwhile (docs/cluster.md).
    let share = cluster.take_read_share().await.or_s3()?;
    let (rec, versioning) = super::versioning::read(
        cluster,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
    )
    .await?;
    check_conditions(
        &rec,
        input.if_match.as_ref(),
        input.if_none_match.as_ref(),
        input.if_modified_since.as_ref(),
        input.if_unmodified_since.as_ref(),
        S3ErrorCode::NotModified,
    )?;
    let w = wanted(&rec, input.range.as_ref(), input.part_number)?;
    let len = w.bytes.end - w.bytes.start;
    let body = cluster
        .read_object_with(&rec, w.bytes, share)
        .await
        .or_s3()?;
    let mut resp = S3Response::new(GetObjectOutput {
        body: Some(StreamingBlob::wrap(body)),
        content_length: Some(super::s3_i64(len)),
        content_range: w.content_range,
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&rec.etag)),
        last_modified: Some(timestamp(rec.last_modified_ms)),
        content_type: rec.content_type.clone(),
        metadata: Some(rec.user_meta.clone().into_iter().collect()),
        parts_count: parts_count(&rec, input.part_number),
        version_id: super::versioning::header(&rec, versioning),
        tag_count: super::tagging::count(&rec),
        expiration: super::lifecycle::expiration_header(cluster, &rec, cluster.lifecycle_day_ms),
        ..Default::default()
    });
    (
        resp.output.object_lock_mode,
        resp.output.object_lock_retain_until_date,
        resp.output.object_lock_legal_hold_status,
    ) = super::objectlock::headers(&rec);
    fill_headers!(resp.output, rec);
    // `response-*` query parameters override what is stored (a presigned download's
    // file name, say).
    let o = &mut resp.output;
    o.cache_control = input.response_cache_control.or(o.cache_control.take());
    o.content_disposition = input
        .response_content_disposition
        .or(o.content_disposition.take());
    o.content_encoding = input
        .response_content_encoding
        .or(o.content_encoding.take());
    o.content_language = input
        .response_content_language
        .or(o.content_language.take());
    o.content_type = input.response_content_type.or(o.content_type.take());
    o.expires = input.response_expires.or(o.expires.take());
    if checksum_mode(input.checksum_mode.as_ref()) && !w.partial {
        super::checksum::fill_checksum!(resp.output, rec.checksum.as_ref(), typed);
    }
    if w.partial {
        resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
    }
    Ok(resp)
}

/// Whether `x-amz-checksum-mode: ENABLED` asks for the object's checksum. It is the whole
/// object's, so a range read does not get it.
fn checksum_mode(mode: Option<&s3s::dto::ChecksumMode>) -> bool {
    mode.is_some_and(|m| {
        m.as_str()
            .eq_ignore_ascii_case(s3s::dto::ChecksumMode::ENABLED)
    })
}

pub(crate) async fn head(
    cluster: &Cluster,
    input: HeadObjectInput,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let (rec, versioning) = super::versioning::read(
        cluster,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
    )
    .await?;
    check_conditions(
        &rec,
        input.if_match.as_ref(),
        input.if_none_match.as_ref(),
        input.if_modified_since.as_ref(),
        input.if_unmodified_since.as_ref(),
        S3ErrorCode::NotModified,
    )?;
    let w = wanted(&rec, input.range.as_ref(), input.part_number)?;
    let mut out = HeadObjectOutput {
        version_id: super::versioning::header(&rec, versioning),
        content_length: Some(super::s3_i64(w.bytes.end - w.bytes.start)),
        content_range: w.content_range,
        accept_ranges: Some("bytes".into()),
        e_tag: Some(etag(&rec.etag)),
        last_modified: Some(timestamp(rec.last_modified_ms)),
        content_type: rec.content_type.clone(),
        metadata: Some(rec.user_meta.clone().into_iter().collect()),
        parts_count: parts_count(&rec, input.part_number),
        expiration: super::lifecycle::expiration_header(cluster, &rec, cluster.lifecycle_day_ms),
        ..Default::default()
    };
    (
        out.object_lock_mode,
        out.object_lock_retain_until_date,
        out.object_lock_legal_hold_status,
    ) = super::objectlock::headers(&rec);
    fill_headers!(out, rec);
    if checksum_mode(input.checksum_mode.as_ref()) && !w.partial {
        super::checksum::fill_checksum!(out, rec.checksum.as_ref(), typed);
    }
    let mut resp = S3Response::new(out);
    if w.partial {
        resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
    }
    Ok(resp)
}

/// `DeleteObject`; `may_bypass`: the signer has the bucket's `owner` right, so that
/// `x-amz-bypass-governance-retention: true` lets it delete a version a `GOVERNANCE`
/// retention keeps.
pub(crate) async fn delete(
    cluster: &Cluster,
    input: DeleteObjectInput,
    may_bypass: bool,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let d = super::versioning::delete(
        cluster,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
        may_bypass && input.bypass_governance_retention == Some(true),
    )
    .await?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: d.delete_marker.then_some(true),
        version_id: d.version_id,
        ..Default::default()
    }))
}

/// `DeleteObjects`; `may_bypass` as for [`delete`].
pub(crate) async fn delete_many(
    cluster: &Cluster,
    input: DeleteObjectsInput,
    may_bypass: bool,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let bypass = may_bypass && input.bypass_governance_retention == Some(true);
    need_bucket(cluster, &input.bucket).await?;
    if input.delete.objects.len() > 1000 {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "at most 1000 keys per delete",
        ));
    }
    let quiet = input.delete.quiet.unwrap_or(false);
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for o in input.delete.objects {
        if let Some(written) = unwritable_in_xml(&o.key) {
            // Its answer could not name it: a client's XML parser would refuse the whole
            // answer (and botocore takes that for a 500 and deletes again). Such a key
            // is deleted by DeleteObject, whose answer does not carry it.
            errors.push(s3s::dto::Error {
                code: Some("InvalidArgument".to_owned()),
                key: Some(written),
                message: Some(
                    "the key holds a control character that XML cannot carry, so this \
                     answer could not name it; delete it with DeleteObject"
                        .to_owned(),
                ),
                version_id: None,
            });
            continue;
        }
        let version = o.version_id.clone();
        match super::versioning::delete(cluster, &input.bucket, &o.key, version.as_deref(), bypass)
            .await
        {
            Ok(_) if quiet => {}
            // Of a version named: that version; of a delete marker added: the marker.
            Ok(d) => deleted.push(DeletedObject {
                key: Some(o.key),
                delete_marker: d.delete_marker.then_some(true),
                delete_marker_version_id: if d.delete_marker {
                    d.version_id.clone()
                } else {
                    None
                },
                version_id: version,
            }),
            Err(e) => errors.push(s3s::dto::Error {
                code: Some(e.code().as_str().to_owned()),
                key: Some(o.key),
                message: e.message().map(str::to_owned),
                version_id: version,
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: Some(errors),
        ..Default::default()
    }))
}

/// `key` with each character XML 1.0 cannot carry (control characters other than tab,
/// line feed and carriage return; U+FFFE, U+FFFF) replaced by U+FFFD, if it has any.
#[must_use]
pub fn unwritable_in_xml(key: &str) -> Option<String> {
    let bad = |c: char| matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}');
    key.contains(bad).then(|| key.replace(bad, "\u{fffd}"))
}

/// The record of a copy source (its current version, or the one its `versionId` names),
/// checked against the `x-amz-copy-source-if-*` conditions (each failure is
/// `PreconditionFailed`).
pub(crate) async fn copy_source_record(
    cluster: &Cluster,
    src: &CopySource,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<ObjectRecord> {
    let (bucket, key, version) = copy_source(src)?;
    let rec = super::versioning::object(cluster, &bucket, &key, version.as_deref()).await?;
    check_conditions(
        &rec,
        if_match,
        if_none_match,
        if_modified_since,
        if_unmodified_since,
        S3ErrorCode::PreconditionFailed,
    )?;
    Ok(rec)
}

/// The bucket, key and version of a copy source.
fn copy_source(src: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match src {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(str::to_owned),
        )),
        _ => Err(err(
            S3ErrorCode::NotImplemented,
            "access points and outposts are not supported",
        )),
    }
}

pub(crate) async fn copy(
    cluster: &Arc<Cluster>,
    input: CopyObjectInput,
) -> S3Result<S3Response<CopyObjectOutput>> {
    check_user_key(&input.key)?;
    let src = copy_source_record(
        cluster,
        &input.copy_source,
        input.copy_source_if_match.as_ref(),
        input.copy_source_if_none_match.as_ref(),
        input.copy_source_if_modified_since.as_ref(),
        input.copy_source_if_unmodified_since.as_ref(),
    )
    .await?;
    need_bucket(cluster, &input.bucket).await?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == "REPLACE");
    // A version named in the source is copied onto its key to make it current again
    // (how S3 restores an earlier version).
    let named_version = copy_source(&input.copy_source)?.2.is_some();
    if !replace && !named_version && src.bucket == input.bucket && src.user_key() == input.key {
        return Err(err(
            S3ErrorCode::InvalidRequest,
            "copying an object onto itself must change its metadata (x-amz-metadata-directive: REPLACE)",
        ));
    }
    let tags = super::tagging::of_copy(
        input.tagging_directive.as_ref(),
        input.tagging.as_deref(),
        &src,
    )?;
    let (content_type, user, headers) = if replace {
        let headers = stored_headers(
            input.cache_control,
            input.content_disposition,
            input.content_encoding,
            input.content_language,
            input.expires.as_ref(),
        );
        (input.content_type, user_meta(input.metadata)?, headers)
    } else {
        (
            src.content_type.clone(),
            src.user_meta.clone(),
            src.headers.clone(),
        )
    };
    // A copy's lock is the request's (or the bucket's default), never the source's.
    let (retention, legal_hold) = super::objectlock::of_input!(cluster, input)?;
    let size = src.object_size();
    let body = cluster.read_for_copy(&src, 0..size).await.or_s3()?;
    let obj = NewObject {
        bucket: input.bucket,
        key: input.key,
        size,
        content_type,
        user_meta: user,
        headers,
        tags,
        retention,
        legal_hold,
        ..Default::default()
    };
    let versioning = super::versioning::state(cluster, &obj.bucket);
    let obj = super::versioning::new_object(obj, versioning);
    let written = cluster.put_object(obj, copy_body(body)).await.or_s3()?;
    super::versioning::after_write(cluster, &written, versioning).await?;
    let source_versioning = super::versioning::state(cluster, &src.bucket);
    let mut resp = S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(etag(&written.record.etag)),
            last_modified: Some(timestamp(written.record.last_modified_ms)),
            ..Default::default()
        }),
        version_id: super::versioning::header(&written.record, versioning),
        copy_source_version_id: super::versioning::header(&src, source_versioning),
        ..Default::default()
    });
    mark_degraded(&mut resp.headers, &written);
    Ok(resp)
}
