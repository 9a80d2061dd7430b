//! The one place OED's errors become S3 errors: the S3 code, status and message for each
//! [`Error`], with the internals of a 5xx kept in the drive's log.

use axum::http::StatusCode;
use s3s::{S3Error, S3ErrorCode};

use oed_model::error::{Error, Missing, source_chain};

/// The one place OED's errors become S3 errors. 5xx are logged with their source chain;
/// their bodies say only what a client can act on.
#[must_use]
#[allow(
    clippy::needless_pass_by_value,
    reason = "errors are handed over, as map_err does"
)]
pub fn s3_error(e: Error) -> S3Error {
    use S3ErrorCode as C;
    let msg = e.to_string();
    let (code, status) = match &e {
        Error::BadRequest(_) | Error::Config(_) => (C::InvalidArgument, None),
        Error::NotFound(Missing::Bucket) => (C::NoSuchBucket, None),
        Error::NotFound(Missing::Upload) => (C::NoSuchUpload, None),
        Error::NotFound(_) => (C::NoSuchKey, None),
        Error::BucketNotEmpty => (C::BucketNotEmpty, None),
        Error::TooLarge(_) => (C::EntityTooLarge, None),
        Error::IncompleteBody { .. } | Error::BodyBroken(_) => (C::IncompleteBody, None),
        Error::TooSlow(_) => (C::RequestTimeout, None),
        // S3 answers a payload-hash mismatch with 400; the body is not the one signed,
        // so OED refuses it as it refuses any other signature failure.
        Error::BodySignature { chunk: true } => (C::SignatureDoesNotMatch, None),
        Error::BodySignature { chunk: false } => (
            C::Custom("XAmzContentSHA256Mismatch".into()),
            Some(http::StatusCode::FORBIDDEN),
        ),
        Error::BadDigest | Error::ChecksumMismatch(_) => (C::BadDigest, None),
        Error::Unavailable(_) | Error::ShuttingDown => (C::ServiceUnavailable, None),
        Error::SlowDown(_) => (C::SlowDown, None),
        Error::InsufficientStorage { .. } => (
            C::Custom("InsufficientStorage".into()),
            Some(http::StatusCode::INSUFFICIENT_STORAGE),
        ),
        _ => {
            tracing::error!(error = %source_chain(&e), "S3 request failed");
            return S3Error::with_message(C::InternalError, "internal error; see the drive's log");
        }
    };
    let retry = matches!(code, C::SlowDown | C::ServiceUnavailable);
    let mut err = S3Error::with_message(code, msg);
    if let Some(s) = status {
        err.set_status_code(s);
    }
    if retry {
        // When to try again: a second is about how long a drive's shares take to turn
        // over, and what clients that honour Retry-After wait.
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
        err.set_headers(h);
    }
    err
}

/// An S3 request `s3s` could not turn into a call of ours (it already answers protocol
/// errors itself; this is what is left: a failure inside it). Logged; a bare 500.
#[must_use]
pub fn s3s_failure(e: &s3s::HttpError) -> StatusCode {
    tracing::error!(error = ?e, "S3 request failed before a handler ran");
    StatusCode::INTERNAL_SERVER_ERROR
}
