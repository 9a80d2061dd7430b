//! S3's additional checksums (`x-amz-checksum-crc32`, `-crc32c`, `-crc64nvme`, `-sha1`,
//! `-sha256`): read from a request's headers or announced for its aws-chunked trailer,
//! computed as the body streams and checked before the object is committed (a mismatch
//! is `BadDigest`, and nothing is stored), kept with the object, and returned on
//! `PutObject`, `UploadPart`, `CompleteMultipartUpload`, on GET and HEAD with
//! `x-amz-checksum-mode: ENABLED`, and by `GetObjectAttributes`. A multipart object's
//! checksum is `COMPOSITE` (the checksum of its parts' checksums, `-N`) or `FULL_OBJECT`
//! (CRCs only: combined from the parts' CRCs and sizes, without reading the data again).

use oed_ops::s3sum::{ALL, Algorithm};
use s3s::dto::{ChecksumAlgorithm, ChecksumType};
use s3s::{S3ErrorCode, S3Result};

use super::err;
use oed_cluster::write::{BodyChecksum, Expected};
use oed_model::record::{PartRef, StoredChecksum};

fn invalid(msg: impl Into<String>) -> s3s::S3Error {
    err(S3ErrorCode::InvalidRequest, msg)
}

/// The algorithm S3 names `a`.
///
/// # Errors
/// `InvalidRequest` for one S3 does not have.
pub(crate) fn algorithm(a: &ChecksumAlgorithm) -> S3Result<Algorithm> {
    Algorithm::parse(a.as_str()).ok_or_else(|| {
        invalid(format!(
            "Checksum algorithm {:?} is not one of CRC32, CRC32C, CRC64NVME, SHA1, SHA256",
            a.as_str()
        ))
    })
}

/// The checksum a request asks for on its body: the one `x-amz-checksum-*` header
/// (its value), or the one announced in `x-amz-trailer` (read from `trailers` once the
/// body has ended), or `named` alone (`x-amz-sdk-checksum-algorithm`: computed and
/// stored, nothing to check).
///
/// # Errors
/// `InvalidRequest` for more than one checksum header, a value that is not a digest of
/// the algorithm's length in base64, or a trailer that is not a checksum.
pub(crate) fn requested(
    headers: &http::HeaderMap,
    named: Option<&ChecksumAlgorithm>,
    trailers: Option<&s3s::TrailingHeaders>,
) -> S3Result<Option<BodyChecksum>> {
    let sent: Vec<(Algorithm, &http::HeaderValue)> = ALL
        .into_iter()
        .filter_map(|a| headers.get(a.header()).map(|v| (a, v)))
        .collect();
    if sent.len() > 1 {
        return Err(invalid(
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
        ));
    }
    let named = named.map(algorithm).transpose()?;
    if let Some((a, value)) = sent.first() {
        if named.is_some_and(|n| n != *a) {
            return Err(invalid(format!(
                "x-amz-sdk-checksum-algorithm names another algorithm than {}",
                a.header()
            )));
        }
        let digest = a
            .decode(value.to_str().unwrap_or_default())
            .map_err(|e| invalid(e.to_string()))?;
        return Ok(Some(BodyChecksum {
            algorithm: *a,
            expected: Expected::Value(digest),
        }));
    }
    if let Some(trailer) = headers.get("x-amz-trailer") {
        let name = trailer
            .to_str()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let a = ALL
            .into_iter()
            .find(|a| a.header() == name)
            .ok_or_else(|| invalid(format!("x-amz-trailer {name:?} is not a checksum")))?;
        let trailers = trailers
            .cloned()
            .ok_or_else(|| invalid("x-amz-trailer needs an aws-chunked body with a trailer"))?;
        let read = move || {
            trailers.read(|h| {
                h.get(a.header())
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            })?
        };
        return Ok(Some(BodyChecksum {
            algorithm: a,
            expected: Expected::Trailer(std::sync::Arc::new(read)),
        }));
    }
    Ok(named.map(|algorithm| BodyChecksum {
        algorithm,
        expected: Expected::Nothing,
    }))
}

/// The value of `c` for `a`'s field of an output, when `c` is of that algorithm.
pub(crate) fn value_for(c: Option<&StoredChecksum>, a: Algorithm) -> Option<String> {
    c.filter(|c| c.algorithm == a).map(|c| c.value.clone())
}

/// S3's name of `c`'s type.
pub(crate) fn checksum_type(c: &StoredChecksum) -> ChecksumType {
    ChecksumType::from_static(if c.full_object {
        ChecksumType::FULL_OBJECT
    } else {
        ChecksumType::COMPOSITE
    })
}

/// Sets the `checksum_*` fields of an output from a stored checksum (and `checksum_type`
/// where the output has one: `fill_checksum!(out, c, typed)`).
macro_rules! fill_checksum {
    ($out:expr, $c:expr) => {{
        use oed_ops::s3sum::Algorithm as A;
        let c: Option<&::oed_model::record::StoredChecksum> = $c;
        $out.checksum_crc32 = $crate::checksum::value_for(c, A::Crc32);
        $out.checksum_crc32c = $crate::checksum::value_for(c, A::Crc32c);
        $out.checksum_crc64nvme = $crate::checksum::value_for(c, A::Crc64nvme);
        $out.checksum_sha1 = $crate::checksum::value_for(c, A::Sha1);
        $out.checksum_sha256 = $crate::checksum::value_for(c, A::Sha256);
    }};
    ($out:expr, $c:expr, typed) => {{
        let c: Option<&::oed_model::record::StoredChecksum> = $c;
        $crate::checksum::fill_checksum!($out, c);
        $out.checksum_type = c.map($crate::checksum::checksum_type);
    }};
}
pub(crate) use fill_checksum;

/// What `CreateMultipartUpload` asked for: the algorithm and whether the object's checksum
/// is `FULL_OBJECT`, kept (with an empty value) on the upload's marker.
///
/// # Errors
/// `InvalidRequest` for a type without an algorithm, `FULL_OBJECT` with SHA, or
/// `COMPOSITE` with CRC64NVME (S3's rules).
pub(crate) fn for_upload(
    algorithm: Option<&ChecksumAlgorithm>,
    kind: Option<&ChecksumType>,
) -> S3Result<Option<StoredChecksum>> {
    let Some(a) = algorithm.map(self::algorithm).transpose()? else {
        if kind.is_some() {
            return Err(invalid(
                "x-amz-checksum-type needs x-amz-checksum-algorithm",
            ));
        }
        return Ok(None);
    };
    let full_object = match kind.map(ChecksumType::as_str) {
        None => a == Algorithm::Crc64nvme,
        Some(ChecksumType::FULL_OBJECT) => true,
        Some(ChecksumType::COMPOSITE) => false,
        Some(other) => return Err(invalid(format!("unknown x-amz-checksum-type {other:?}"))),
    };
    if full_object && !a.is_crc() {
        return Err(invalid(format!(
            "The FULL_OBJECT checksum type is not supported for {}; use a CRC",
            a.name()
        )));
    }
    if !full_object && a == Algorithm::Crc64nvme {
        return Err(invalid(
            "The COMPOSITE checksum type is not supported for CRC64NVME",
        ));
    }
    Ok(Some(StoredChecksum {
        algorithm: a,
        value: String::new(),
        full_object,
    }))
}

/// The checksum of a multipart object of `parts`, of the kind its upload asked for.
///
/// # Errors
/// `InvalidPart` when a part has no checksum of the upload's algorithm.
pub(crate) fn of_parts(upload: &StoredChecksum, parts: &[PartRef]) -> S3Result<StoredChecksum> {
    let a = upload.algorithm;
    let mut digests = Vec::with_capacity(parts.len());
    for p in parts {
        let c = p
            .checksum
            .as_ref()
            .filter(|c| c.algorithm == a)
            .ok_or_else(|| {
                err(
                    S3ErrorCode::InvalidPart,
                    format!("part {} has no {} checksum", p.number, a.name()),
                )
            })?;
        let d = a.decode(&c.value).map_err(|e| {
            tracing::error!(error = %e, "a part's stored checksum does not decode");
            crate::error::internal()
        })?;
        digests.push((d, p.size));
    }
    let value = if upload.full_object {
        let mut acc: Option<Vec<u8>> = None;
        for (d, size) in digests {
            acc = Some(match acc {
                None => d,
                Some(prev) => a.combine(&prev, &d, size).unwrap_or(d),
            });
        }
        oed_ops::s3sum::encode(&acc.unwrap_or_default())
    } else {
        a.composite(&digests.into_iter().map(|(d, _)| d).collect::<Vec<_>>())
    };
    Ok(StoredChecksum {
        algorithm: a,
        value,
        full_object: upload.full_object,
    })
}

/// The checksum the `checksum_*` fields of `$x` (`CompleteMultipartUpload`'s input, or a
/// completed part) carry for algorithm `$a`.
macro_rules! sent_checksum {
    ($a:expr, $x:expr) => {
        $crate::checksum::sent_value(
            $a,
            $x.checksum_crc32.as_ref(),
            $x.checksum_crc32c.as_ref(),
            $x.checksum_crc64nvme.as_ref(),
            $x.checksum_sha1.as_ref(),
            $x.checksum_sha256.as_ref(),
        )
    };
}
pub(crate) use sent_checksum;

/// The checksum a request's fields carry for `a` (`CompleteMultipartUpload`'s own, or a
/// completed part's).
pub(crate) fn sent_value(
    a: Algorithm,
    crc32: Option<&String>,
    crc32c: Option<&String>,
    crc64nvme: Option<&String>,
    sha1: Option<&String>,
    sha256: Option<&String>,
) -> Option<String> {
    match a {
        Algorithm::Crc32 => crc32,
        Algorithm::Crc32c => crc32c,
        Algorithm::Crc64nvme => crc64nvme,
        Algorithm::Sha1 => sha1,
        Algorithm::Sha256 => sha256,
    }
    .cloned()
}

/// Most parts one `GetObjectAttributes` answer lists.
const MAX_PARTS_LISTED: i32 = 1000;

/// `GetObjectAttributes`: the attributes asked for (`ETag`, `Checksum`, `ObjectParts`,
/// `StorageClass`, `ObjectSize`) of the current version. `ObjectParts` lists a multipart
/// object's parts with their sizes and checksums, `max-parts` at a time after
/// `part-number-marker`.
///
/// # Errors
/// `NoSuchKey`, `NoSuchBucket`; `InvalidArgument` for an attribute S3 does not have.
pub(crate) async fn attributes(
    cluster: &oed_cluster::Cluster,
    input: s3s::dto::GetObjectAttributesInput,
) -> S3Result<s3s::S3Response<s3s::dto::GetObjectAttributesOutput>> {
    use s3s::dto::{
        Checksum, GetObjectAttributesOutput, GetObjectAttributesParts, ObjectAttributes,
        ObjectPart, StorageClass,
    };
    let (rec, versioning) = super::versioning::read(
        cluster,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
    )
    .await?;
    let mut out = GetObjectAttributesOutput {
        last_modified: Some(super::timestamp(rec.last_modified_ms)),
        version_id: super::versioning::header(&rec, versioning),
        ..Default::default()
    };
    // One header, `x-amz-object-attributes: ETag,Checksum`, or several.
    let asked = input
        .object_attributes
        .iter()
        .flat_map(|a| a.as_str().split(',').map(str::trim).collect::<Vec<_>>());
    for a in asked {
        match a {
            ObjectAttributes::ETAG => out.e_tag = Some(super::etag(&rec.etag)),
            ObjectAttributes::OBJECT_SIZE => {
                out.object_size = Some(super::s3_i64(rec.object_size()));
            }
            ObjectAttributes::STORAGE_CLASS => {
                out.storage_class = Some(StorageClass::from_static(StorageClass::STANDARD));
            }
            ObjectAttributes::CHECKSUM => {
                if let Some(c) = &rec.checksum {
                    let mut sum = Checksum::default();
                    fill_checksum!(sum, Some(c), typed);
                    out.checksum = Some(sum);
                }
            }
            ObjectAttributes::OBJECT_PARTS => {
                if rec.parts.is_empty() {
                    continue;
                }
                let after = input.part_number_marker.unwrap_or(0);
                let max = input
                    .max_parts
                    .unwrap_or(MAX_PARTS_LISTED)
                    .clamp(0, MAX_PARTS_LISTED);
                let rest: Vec<&PartRef> = rec
                    .parts
                    .iter()
                    .filter(|p| i64::from(p.number) > i64::from(after))
                    .collect();
                let shown: Vec<ObjectPart> = rest
                    .iter()
                    .take(usize::try_from(max).unwrap_or(0))
                    .map(|p| {
                        let mut part = ObjectPart {
                            part_number: Some(super::s3_i32(p.number as usize)),
                            size: Some(super::s3_i64(p.size)),
                            ..Default::default()
                        };
                        fill_checksum!(part, p.checksum.as_ref());
                        part
                    })
                    .collect();
                let truncated = rest.len() > shown.len();
                out.object_parts = Some(GetObjectAttributesParts {
                    total_parts_count: Some(super::s3_i32(rec.parts.len())),
                    part_number_marker: Some(after),
                    next_part_number_marker: shown.last().and_then(|p| p.part_number),
                    max_parts: Some(max),
                    is_truncated: Some(truncated),
                    parts: Some(shown),
                });
            }
            other => {
                return Err(err(
                    S3ErrorCode::InvalidArgument,
                    format!("unknown object attribute {other:?}"),
                ));
            }
        }
    }
    Ok(s3s::S3Response::new(out))
}
