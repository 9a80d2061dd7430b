//! Multipart uploads. Each part is an erasure-coded object of its own under an internal
//! key, so parts are written exactly like objects and any drive can take any part. An
//! upload in progress is an empty internal object whose record keeps the content type
//! and metadata. Completing writes the object's record with the list of its parts (no
//! data is copied); reads then stream the parts in order.
//!
//! Internal keys (never shown to clients):
//! - `U+0001 "u/" key U+0001 upload-id`: an upload in progress;
//! - `U+0001 "p/" upload-id "/" part-number` (5 digits): a part.

use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CopyPartResult, CreateMultipartUploadInput,
    CreateMultipartUploadOutput, ListMultipartUploadsInput, ListMultipartUploadsOutput,
    ListPartsInput, ListPartsOutput, MultipartUpload, Part, UploadPartCopyInput,
    UploadPartCopyOutput, UploadPartInput, UploadPartOutput,
};
use s3s::{S3ErrorCode, S3Response, S3Result};

use super::object::{
    body_length, body_stream, content_md5, copy_body, copy_source_record, mark_degraded, user_meta,
};
use super::{OrS3, check_user_key, checksum, err, etag, need_bucket, timestamp};
use oed_cluster::Cluster;
use oed_cluster::list::walk;
use oed_cluster::write::{NewObject, multipart_etag, part_key, parts_prefix, upload_key};
use oed_model::record::{ObjectRecord, PartRef, VersionId};

/// S3's smallest part, except the last.
pub const MIN_PART_SIZE: u64 = 5 << 20;
/// S3's largest part number.
pub const MAX_PARTS: i32 = 10_000;

fn part_number(key: &str) -> Option<i32> {
    key.rsplit('/').next()?.parse().ok()
}

/// The record of upload `upload_id` of `key`, or `NoSuchUpload`.
async fn upload(
    cluster: &Cluster,
    bucket: &str,
    key: &str,
    upload_id: &str,
) -> S3Result<ObjectRecord> {
    check_user_key(key)?;
    if upload_id.parse::<VersionId>().is_ok()
        && let Some(r) = cluster
            .head(bucket, &upload_key(key, upload_id))
            .await
            .or_s3()?
    {
        return Ok(r);
    }
    need_bucket(cluster, bucket).await?;
    Err(err(
        S3ErrorCode::NoSuchUpload,
        format!("no upload {upload_id:?} of {key:?} in progress"),
    ))
}

/// Every part stored for an upload, by part number.
async fn stored_parts(
    cluster: &Cluster,
    bucket: &str,
    upload_id: &str,
) -> S3Result<Vec<ObjectRecord>> {
    let prefix = parts_prefix(upload_id);
    let page = walk(
        cluster,
        bucket,
        &prefix,
        None,
        None,
        super::from_s3_i32(MAX_PARTS),
        &prefix,
    )
    .await
    .or_s3()?;
    Ok(page.contents)
}

fn check_part_number(n: i32) -> S3Result<()> {
    if (1..=MAX_PARTS).contains(&n) {
        Ok(())
    } else {
        Err(err(
            S3ErrorCode::InvalidArgument,
            format!("part number {n}: parts are numbered 1 to {MAX_PARTS}"),
        ))
    }
}

pub(crate) async fn create(
    cluster: &Cluster,
    input: CreateMultipartUploadInput,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    check_user_key(&input.key)?;
    need_bucket(cluster, &input.bucket).await?;
    let upload_id = VersionId::generate().to_string();
    // The upload's checksum algorithm and type ride on its marker, with no value yet.
    let checksum = checksum::for_upload(
        input.checksum_algorithm.as_ref(),
        input.checksum_type.as_ref(),
    )?;
    let (retention, legal_hold) = crate::objectlock::of_input!(cluster, input)?;
    let obj = NewObject {
        bucket: input.bucket.clone(),
        key: upload_key(&input.key, &upload_id),
        retention,
        legal_hold,
        content_type: input.content_type,
        user_meta: user_meta(input.metadata)?,
        headers: super::object::stored_headers(
            input.cache_control,
            input.content_disposition,
            input.content_encoding,
            input.content_language,
            input.expires.as_ref(),
        ),
        parts_checksum: checksum.clone(),
        tags: crate::tagging::of_write(input.tagging.as_deref())?,
        ..Default::default()
    };
    cluster
        .put_object(obj, futures_util::stream::empty())
        .await
        .or_s3()?;
    let (abort_date, abort_rule_id) =
        crate::lifecycle::abort_headers(cluster, &input.bucket, &input.key);
    Ok(S3Response::new(CreateMultipartUploadOutput {
        abort_date,
        abort_rule_id,
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(upload_id),
        checksum_algorithm: checksum
            .as_ref()
            .map(|c| s3s::dto::ChecksumAlgorithm::from(c.algorithm.name().to_owned())),
        checksum_type: checksum.as_ref().map(checksum::checksum_type),
        ..Default::default()
    }))
}

pub(crate) async fn upload_part(
    cluster: &Cluster,
    req: s3s::S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let mut sum = checksum::requested(
        &req.headers,
        req.input.checksum_algorithm.as_ref(),
        req.trailing_headers.as_ref(),
    )?;
    super::object::empty_md5(&req.headers)?;
    let (input, headers) = (req.input, req.headers);
    check_part_number(input.part_number)?;
    let marker = upload(cluster, &input.bucket, &input.key, &input.upload_id).await?;
    // An upload with a checksum gets it on every part: checked when the part came with
    // one, computed here when it did not.
    if let Some(u) = &marker.checksum {
        match &sum {
            Some(s) if s.algorithm != u.algorithm => {
                return Err(err(
                    S3ErrorCode::InvalidRequest,
                    format!(
                        "the upload's checksum algorithm is {}, this part's {}",
                        u.algorithm.name(),
                        s.algorithm.name()
                    ),
                ));
            }
            Some(_) => {}
            None => {
                sum = Some(oed_cluster::write::BodyChecksum {
                    algorithm: u.algorithm,
                    expected: oed_cluster::write::Expected::Nothing,
                });
            }
        }
    }
    let obj = NewObject {
        parent: Some(input.key.clone()),
        bucket: input.bucket,
        key: part_key(&input.upload_id, input.part_number),
        size: body_length(input.content_length, &headers)?,
        content_md5: content_md5(input.content_md5.as_deref())?,
        checksum: sum,
        ..Default::default()
    };
    let written = cluster
        .put_object(obj, body_stream(input.body, cluster))
        .await
        .or_s3()?;
    let mut out = UploadPartOutput {
        e_tag: Some(etag(&written.record.etag)),
        ..Default::default()
    };
    checksum::fill_checksum!(out, written.record.checksum.as_ref());
    let mut resp = S3Response::new(out);
    mark_degraded(&mut resp.headers, &written);
    Ok(resp)
}

/// `bytes=first-last` of an object of `size` bytes.
///
/// # Errors
/// `InvalidArgument` for a range that is not of that form, `InvalidRange` for one past the object.
pub fn copy_range(r: &str, size: u64) -> S3Result<std::ops::Range<u64>> {
    let bad = || {
        err(
            S3ErrorCode::InvalidArgument,
            format!("x-amz-copy-source-range {r:?} is not bytes=first-last within the source"),
        )
    };
    let (a, b) = r
        .strip_prefix("bytes=")
        .and_then(|s| s.split_once('-'))
        .ok_or_else(bad)?;
    let (a, b): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a > b || b >= size {
        return Err(bad());
    }
    Ok(a..b + 1)
}

pub(crate) async fn upload_part_copy(
    cluster: &std::sync::Arc<Cluster>,
    input: UploadPartCopyInput,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    check_part_number(input.part_number)?;
    let marker = upload(cluster, &input.bucket, &input.key, &input.upload_id).await?;
    let src = copy_source_record(
        cluster,
        &input.copy_source,
        input.copy_source_if_match.as_ref(),
        input.copy_source_if_none_match.as_ref(),
        input.copy_source_if_modified_since.as_ref(),
        input.copy_source_if_unmodified_since.as_ref(),
    )
    .await?;
    let size = src.object_size();
    let range = match &input.copy_source_range {
        Some(r) => copy_range(r, size)?,
        None => 0..size,
    };
    let body = cluster.read_for_copy(&src, range.clone()).await.or_s3()?;
    let obj = NewObject {
        parent: Some(input.key.clone()),
        bucket: input.bucket,
        key: part_key(&input.upload_id, input.part_number),
        size: range.end - range.start,
        // The upload's checksum, computed over the copied bytes.
        checksum: marker
            .checksum
            .as_ref()
            .map(|u| oed_cluster::write::BodyChecksum {
                algorithm: u.algorithm,
                expected: oed_cluster::write::Expected::Nothing,
            }),
        ..Default::default()
    };
    let written = cluster.put_object(obj, copy_body(body)).await.or_s3()?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(etag(&written.record.etag)),
            last_modified: Some(timestamp(written.record.last_modified_ms)),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

/// The parts a completion names, checked against those stored: ascending numbers,
/// matching `ETag`s, every part but the last at least [`MIN_PART_SIZE`].
///
/// # Errors
/// `InvalidPart` or `InvalidPartOrder` for a part list that does not match, `EntityTooSmall`
/// for a part too small.
pub fn resolve_parts(
    asked: &[s3s::dto::CompletedPart],
    stored: &[ObjectRecord],
) -> S3Result<Vec<PartRef>> {
    let by_number: std::collections::HashMap<i32, &ObjectRecord> = stored
        .iter()
        .filter_map(|r| part_number(&r.key).map(|n| (n, r)))
        .collect();
    let mut parts = Vec::with_capacity(asked.len());
    let mut last = 0;
    for (i, p) in asked.iter().enumerate() {
        let n = p.part_number.unwrap_or(0);
        if n <= last {
            return Err(err(
                S3ErrorCode::InvalidPartOrder,
                "parts must be listed in ascending order of part number",
            ));
        }
        last = n;
        let rec = by_number.get(&n).ok_or_else(|| {
            err(
                S3ErrorCode::InvalidPart,
                format!("part {n} was not uploaded"),
            )
        })?;
        if let Some(e) = &p.e_tag
            && e.value() != rec.etag
        {
            return Err(err(
                S3ErrorCode::InvalidPart,
                format!(
                    "part {n}: ETag {:?} is not the stored {:?}",
                    e.value(),
                    rec.etag
                ),
            ));
        }
        if i + 1 < asked.len() && rec.size < MIN_PART_SIZE {
            return Err(err(
                S3ErrorCode::EntityTooSmall,
                format!(
                    "part {n} has {} bytes; every part but the last needs 5 MiB",
                    rec.size
                ),
            ));
        }
        if let Some(c) = &rec.checksum {
            let sent = checksum::sent_checksum!(c.algorithm, p);
            if sent.is_some_and(|s| s != c.value) {
                return Err(err(
                    S3ErrorCode::InvalidPart,
                    format!("part {n}: its {} is not the stored one", c.algorithm.name()),
                ));
            }
        }
        parts.push(PartRef::of(n.unsigned_abs(), rec));
    }
    let total = parts.iter().fold(0u64, |sum, p| sum.saturating_add(p.size));
    if total > oed_model::record::MAX_OBJECT_BYTES {
        return Err(err(
            S3ErrorCode::EntityTooLarge,
            format!("the parts add up to {total} bytes; an object takes at most 5 TiB"),
        ));
    }
    Ok(parts)
}

pub(crate) async fn complete(
    cluster: &Cluster,
    input: CompleteMultipartUploadInput,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let marker = match upload(cluster, &input.bucket, &input.key, &input.upload_id).await {
        Ok(m) => m,
        Err(e) if *e.code() == S3ErrorCode::NoSuchUpload => {
            return match completed_again(cluster, &input).await? {
                Some(done) => Ok(done),
                None => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let asked = input
        .multipart_upload
        .and_then(|m| m.parts)
        .unwrap_or_default();
    if asked.is_empty() {
        return Err(err(
            S3ErrorCode::MalformedXML,
            "CompleteMultipartUpload names no parts",
        ));
    }
    let condition = super::object::write_condition(
        cluster,
        &input.bucket,
        &input.key,
        input.if_match.as_ref(),
        input.if_none_match.as_ref(),
    )
    .await?;
    let stored = stored_parts(cluster, &input.bucket, &input.upload_id).await?;
    let parts = resolve_parts(&asked, &stored)?;
    let etags: Vec<&str> = parts.iter().map(|p| p.etag.as_str()).collect();
    let object_etag = multipart_etag(&etags);
    let object_checksum = match &marker.checksum {
        Some(u) => {
            let c = checksum::of_parts(u, &parts)?;
            let sent = checksum::sent_checksum!(c.algorithm, input);
            if sent.is_some_and(|s| s != c.value) {
                return Err(err(
                    S3ErrorCode::BadDigest,
                    format!(
                        "The {} you specified did not match the calculated checksum.",
                        c.algorithm.name()
                    ),
                ));
            }
            Some(c)
        }
        None => None,
    };
    let used: std::collections::HashSet<&str> = parts.iter().map(|p| p.key.as_str()).collect();
    let unused: Vec<ObjectRecord> = stored
        .iter()
        .filter(|r| !used.contains(r.key.as_str()))
        .cloned()
        .collect();
    let obj = NewObject {
        bucket: input.bucket.clone(),
        key: input.key.clone(),
        size: 0,
        content_type: marker.content_type.clone(),
        user_meta: marker.user_meta.clone(),
        headers: marker.headers.clone(),
        tags: marker.tags.clone(),
        retention: marker.retention,
        legal_hold: marker.legal_hold,
        parts,
        etag: Some(object_etag.clone()),
        parts_checksum: object_checksum,
        condition,
        ..Default::default()
    };
    let versioning = crate::versioning::state(cluster, &input.bucket);
    let obj = crate::versioning::new_object(obj, versioning);
    let written = cluster
        .complete_upload(obj, &marker, &unused)
        .await
        .or_s3()?;
    crate::versioning::after_write(cluster, &written, versioning).await?;
    let mut out = completed(&written.record);
    out.version_id = crate::versioning::header(&written.record, versioning);
    let mut resp = S3Response::new(out);
    mark_degraded(&mut resp.headers, &written);
    Ok(resp)
}

/// A completion sent again (its client lost the first answer): when the key's current
/// object is what this upload completed to, with the same parts and `ETag`s, the same
/// answer.
async fn completed_again(
    cluster: &Cluster,
    input: &CompleteMultipartUploadInput,
) -> S3Result<Option<S3Response<CompleteMultipartUploadOutput>>> {
    let Some(rec) = cluster.head(&input.bucket, &input.key).await.or_s3()? else {
        return Ok(None);
    };
    let prefix = parts_prefix(&input.upload_id);
    let asked = input
        .multipart_upload
        .as_ref()
        .and_then(|m| m.parts.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let same = !rec.parts.is_empty()
        && rec.parts.len() == asked.len()
        && rec.parts.iter().zip(asked).all(|(p, a)| {
            p.key.starts_with(&prefix)
                && a.part_number
                    .is_some_and(|n| i64::from(n) == i64::from(p.number))
                && a.e_tag.as_ref().is_none_or(|e| e.value() == p.etag)
        });
    if !same {
        return Ok(None);
    }
    Ok(Some(S3Response::new(completed(&rec))))
}

/// The answer to a completion: the object's name, `ETag` and checksum.
fn completed(rec: &ObjectRecord) -> CompleteMultipartUploadOutput {
    let mut out = CompleteMultipartUploadOutput {
        bucket: Some(rec.bucket.clone()),
        key: Some(rec.key.clone()),
        e_tag: Some(etag(&rec.etag)),
        location: Some(format!("/{}/{}", rec.bucket, rec.key)),
        ..Default::default()
    };
    checksum::fill_checksum!(out, rec.checksum.as_ref(), typed);
    out
}

pub(crate) async fn abort(
    cluster: &Cluster,
    input: AbortMultipartUploadInput,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let marker = upload(cluster, &input.bucket, &input.key, &input.upload_id).await?;
    for r in stored_parts(cluster, &input.bucket, &input.upload_id).await? {
        cluster.delete_record(&r).await;
    }
    cluster.delete_record(&marker).await;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(crate) async fn list_parts(
    cluster: &Cluster,
    input: ListPartsInput,
) -> S3Result<S3Response<ListPartsOutput>> {
    upload(cluster, &input.bucket, &input.key, &input.upload_id).await?;
    let max = super::from_s3_i32(input.max_parts.unwrap_or(1000).clamp(0, 1000));
    let after = input.part_number_marker.unwrap_or(0);
    let prefix = parts_prefix(&input.upload_id);
    let after_key = (after > 0).then(|| part_key(&input.upload_id, after));
    let page = walk(
        cluster,
        &input.bucket,
        &prefix,
        None,
        after_key.as_deref(),
        max,
        &prefix,
    )
    .await
    .or_s3()?;
    let parts: Vec<Part> = page
        .contents
        .iter()
        .filter_map(|r| {
            Some(Part {
                part_number: Some(part_number(&r.key)?),
                size: Some(super::s3_i64(r.size)),
                e_tag: Some(etag(&r.etag)),
                last_modified: Some(timestamp(r.last_modified_ms)),
                ..Default::default()
            })
        })
        .collect();
    let next = parts.last().and_then(|p| p.part_number);
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(input.upload_id),
        max_parts: Some(super::s3_i32(max)),
        is_truncated: Some(page.truncated),
        part_number_marker: input.part_number_marker,
        next_part_number_marker: if page.truncated { next } else { None },
        parts: Some(parts),
        owner: Some(super::bucket::owner()),
        ..Default::default()
    }))
}

pub(crate) async fn list_uploads(
    cluster: &Cluster,
    input: ListMultipartUploadsInput,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    need_bucket(cluster, &input.bucket).await?;
    let max = super::from_s3_i32(input.max_uploads.unwrap_or(1000).clamp(0, 1000));
    let user_prefix = input.prefix.clone().unwrap_or_default();
    let prefix = format!("\u{1}u/{user_prefix}");
    let after = input
        .key_marker
        .as_deref()
        .filter(|m| !m.is_empty())
        .map(|k| match input.upload_id_marker.as_deref() {
            Some(id) => upload_key(k, id),
            None => format!("\u{1}u/{k}\u{1}\u{10FFFF}"),
        });
    let page = walk(
        cluster,
        &input.bucket,
        &prefix,
        None,
        after.as_deref(),
        max,
        &prefix,
    )
    .await
    .or_s3()?;
    let uploads: Vec<MultipartUpload> = page
        .contents
        .iter()
        .filter_map(|r| {
            let rest = r.key.strip_prefix("\u{1}u/")?;
            let (key, id) = rest.rsplit_once('\u{1}')?;
            Some(MultipartUpload {
                key: Some(key.to_owned()),
                upload_id: Some(id.to_owned()),
                initiated: Some(timestamp(r.last_modified_ms)),
                owner: Some(super::bucket::owner()),
                ..Default::default()
            })
        })
        .collect();
    let last = uploads.last().cloned();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(input.bucket),
        prefix: input.prefix,
        key_marker: input.key_marker,
        upload_id_marker: input.upload_id_marker,
        max_uploads: Some(super::s3_i32(max)),
        is_truncated: Some(page.truncated),
        next_key_marker: page
            .truncated
            .then(|| last.as_ref().and_then(|u| u.key.clone()))
            .flatten(),
        next_upload_id_marker: page
            .truncated
            .then(|| last.as_ref().and_then(|u| u.upload_id.clone()))
            .flatten(),
        uploads: Some(uploads),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etag_follows_s3() {
        use md5::Digest as _;
        // Two parts whose MD5s are known: "a" and "b".
        let a = hex::encode(md5::Md5::digest(b"a"));
        let b = hex::encode(md5::Md5::digest(b"b"));
        let mut both = hex::decode(&a).unwrap();
        both.extend(hex::decode(&b).unwrap());
        let want = format!("{}-2", hex::encode(md5::Md5::digest(&both)));
        assert_eq!(multipart_etag(&[&a, &b]), want);
    }

    #[test]
    fn internal_keys_sort_and_parse() {
        let id = VersionId::generate().to_string();
        assert_eq!(part_number(&part_key(&id, 42)), Some(42));
        assert!(part_key(&id, 9) < part_key(&id, 10));
        assert!(upload_key("k", &id).as_str() < super::super::USER_KEYS_START);
        assert!(copy_range("bytes=0-9", 10).is_ok());
        assert!(copy_range("bytes=0-10", 10).is_err());
        assert!(copy_range("0-1", 10).is_err());
    }

    #[test]
    fn parts_past_5_tib_are_refused() {
        let big = |n: i32| {
            let mut r = oed_model::record::test_record(&part_key("u", n), 1, 5 << 30);
            r.etag = "e".into();
            r
        };
        let stored: Vec<ObjectRecord> = (1..=1025).map(big).collect();
        let asked = |n: i32| s3s::dto::CompletedPart {
            part_number: Some(n),
            ..Default::default()
        };
        let all: Vec<_> = (1..=1025).map(asked).collect();
        let e = resolve_parts(&all, &stored).unwrap_err();
        assert_eq!(*e.code(), S3ErrorCode::EntityTooLarge, "{e}");
        // 1024 parts of 5 GiB are 5 TiB exactly: taken.
        assert_eq!(resolve_parts(&all[..1024], &stored).unwrap().len(), 1024);
    }
}
