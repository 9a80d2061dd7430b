//! Where OED's errors become S3 errors: [`s3_error`] gives each [`Error`] the S3 code and
//! status of its row in the one table of public errors (`Error::public` in `oed-model`),
//! with the internals of a 5xx kept in the drive's log. `Result<T, Error>` becomes an
//! `S3Result` with `.or_s3()` (the orphan rule keeps a `From` out: neither type is this
//! crate's). Errors S3 defines for its own protocol (a malformed header, a failed
//! precondition) have no `Error`: they are made where the request is read, with [`err`],
//! from S3's list of codes, each with S3's status for it (`s3s`' table, and
//! [`S3_CODES_S3S_LACKS`] for the few it does not name); no status is set by hand. An
//! `InternalError` never carries internal text ([`internal`]).

use axum::http::StatusCode;
use s3s::{S3Error, S3ErrorCode};

use oed_model::error::{Error, source_chain};

/// The one place OED's errors become S3 errors. 5xx are logged with their source chain;
/// their bodies say only what a client can act on.
#[must_use]
#[allow(
    clippy::needless_pass_by_value,
    reason = "errors are handed over, as map_err does"
)]
pub fn s3_error(e: Error) -> S3Error {
    let named = e.s3_code();
    if named.is_internal() {
        tracing::error!(error = %source_chain(&e), "S3 request failed");
        return internal();
    }
    let code = S3ErrorCode::from_bytes(named.code.as_bytes())
        .unwrap_or_else(|| S3ErrorCode::Custom(named.code.into()));
    let retry = matches!(
        code,
        S3ErrorCode::SlowDown | S3ErrorCode::ServiceUnavailable
    );
    let mut err = S3Error::with_message(code, e.to_string());
    if let Ok(status) = http::StatusCode::from_u16(named.status) {
        err.set_status_code(status);
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

/// Codes of S3's list that `s3s` does not name, with the status S3 answers them with.
pub const S3_CODES_S3S_LACKS: &[(&str, u16)] = &[("InvalidPartNumber", 416)];

/// An S3 error of S3's own protocol (a malformed header, a failed precondition) with a
/// message for the client, at the status S3 gives `code`; never `InternalError`, whose
/// body says nothing ([`internal`]).
pub(crate) fn err(code: S3ErrorCode, msg: impl Into<String>) -> S3Error {
    debug_assert!(
        code != S3ErrorCode::InternalError,
        "an internal error goes through error::internal"
    );
    let status = match &code {
        S3ErrorCode::Custom(name) => {
            let row = S3_CODES_S3S_LACKS.iter().find(|(n, _)| *n == &**name);
            debug_assert!(row.is_some(), "{name} is not in S3_CODES_S3S_LACKS");
            row.and_then(|&(_, s)| StatusCode::from_u16(s).ok())
        }
        _ => None,
    };
    let mut e = S3Error::with_message(code, msg.into());
    if let Some(s) = status {
        e.set_status_code(s);
    }
    e
}

/// An S3 error as an HTTP answer, for the middleware that answers before `s3s` runs (a
/// request refused on its headers or its transport). A body that cannot be written is
/// logged, and the answer is a bare 500.
#[must_use]
pub fn into_response(e: S3Error) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match e.to_http_response() {
        Ok(r) => r.map(axum::body::Body::new),
        Err(failure) => {
            tracing::error!(error = ?failure, "an S3 error's answer could not be written");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// The answer to a failure inside this drive, whose cause the caller has logged: S3's
/// `InternalError`, with no internal text in its body.
#[must_use]
pub fn internal() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::InternalError,
        "internal error; see the drive's log",
    )
}

/// S3 asked in the clear of a drive that takes S3 over TLS only: `403 AccessDenied`, as S3
/// refuses a request a bucket policy keeps to TLS.
#[must_use]
pub fn tls_required() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::AccessDenied,
        "This drive takes S3 requests over TLS only: use https://",
    )
}

/// An S3 request `s3s` could not turn into a call of ours (it already answers protocol
/// errors itself; this is what is left: a failure inside it). Logged; a bare 500.
#[must_use]
pub fn s3s_failure(e: &s3s::HttpError) -> StatusCode {
    tracing::error!(error = ?e, "S3 request failed before a handler ran");
    StatusCode::INTERNAL_SERVER_ERROR
}

#[cfg(test)]
mod tests {
    use super::*;
    use oed_model::error::Missing;

    fn named(e: Error) -> (String, u16, String) {
        let s = s3_error(e);
        let status = s.status_code().map_or(0, |c| c.as_u16());
        (
            s.code().as_str().to_owned(),
            status,
            s.message().unwrap_or_default().to_owned(),
        )
    }

    #[test]
    fn each_error_has_its_s3_code_and_status_from_the_one_table() {
        let cases = [
            (Error::NotFound(Missing::Bucket), "NoSuchBucket", 404),
            (Error::NotFound(Missing::Upload), "NoSuchUpload", 404),
            (Error::NotFound(Missing::Object), "NoSuchKey", 404),
            (
                Error::BodySignature { chunk: false },
                "XAmzContentSHA256Mismatch",
                403,
            ),
            (
                Error::BodySignature { chunk: true },
                "SignatureDoesNotMatch",
                403,
            ),
            (Error::TooSlow("slow".into()), "RequestTimeout", 400),
            (Error::SlowDown("busy".into()), "SlowDown", 503),
            (
                Error::InsufficientStorage {
                    free: 1,
                    reserve: 2,
                },
                "InsufficientStorage",
                507,
            ),
            (
                Error::Io(std::io::ErrorKind::StorageFull.into()),
                "InsufficientStorage",
                507,
            ),
        ];
        for (e, code, status) in cases {
            let (got, got_status, _) = named(e);
            assert_eq!((got.as_str(), got_status), (code, status));
        }
    }

    #[test]
    fn a_code_s3s_does_not_name_has_s3s_status_from_its_row() {
        let rec = oed_model::record::test_record("k", 1, 10);
        let e = crate::object::part_range(&rec, 2).expect_err("one part");
        assert_eq!(e.code().as_str(), "InvalidPartNumber");
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(416));
        let e = err(S3ErrorCode::InvalidRange, "past the end");
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(416), "s3s' row");
        let r = into_response(e);
        assert_eq!(r.status().as_u16(), 416);
    }

    #[test]
    fn an_internal_error_says_nothing_of_its_cause() {
        let e = Error::Io(std::io::Error::other("/var/lib/oed/shards/n/3 is gone"));
        let (code, status, message) = named(e);
        assert_eq!((code.as_str(), status), ("InternalError", 500));
        assert!(!message.contains("/var/lib"), "{message}");
        let (code, _, message) = named(Error::Superseded);
        assert_eq!(code, "InternalError");
        assert!(!message.contains("newer version"), "{message}");
    }
}
