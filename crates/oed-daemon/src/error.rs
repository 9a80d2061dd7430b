//! The daemon's one error type, and the one place errors become HTTP responses
//! (`IntoResponse`): a status, a stable `code` and a message that says what was wrong.
//! 5xx errors are logged with their source chain; their internals never reach a body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Errors of the drive daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is wrong; the message names the field and the fix.
    #[error("configuration: {0}")]
    Config(String),
    /// A request was malformed; the message says how.
    #[error("{0}")]
    BadRequest(String),
    /// A peer request was not signed, or signed with the wrong key.
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// A peer request was signed, but too long ago or too far in the future.
    #[error("request timestamp outside the allowed clock skew of {0} s")]
    Expired(u64),
    /// The thing asked for does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A newer version of the object is already stored here; this write changed nothing.
    #[error("a newer version of this object is already stored")]
    Superseded,
    /// The bucket still holds objects.
    #[error("bucket is not empty")]
    BucketNotEmpty,
    /// The upload is larger than allowed.
    #[error("body too large: at most {0} bytes")]
    TooLarge(u64),
    /// Writing would eat into the free-space reserve.
    #[error("insufficient storage: {free} bytes free, {reserve} kept in reserve")]
    InsufficientStorage {
        /// Bytes free on the data file system.
        free: u64,
        /// The configured reserve.
        reserve: u64,
    },
    /// The request body ended before its declared length.
    #[error("the body ended after {got} of its declared {expected} bytes")]
    IncompleteBody {
        /// Bytes received.
        got: u64,
        /// Bytes declared.
        expected: u64,
    },
    /// The body is not the one the client signed: a frame of an aws-chunked body fails
    /// its signature (`chunk: true`), or the body fails the SHA-256 in
    /// `x-amz-content-sha256`.
    #[error("the body does not match what was signed")]
    BodySignature {
        /// Whether a chunk signature failed (else the payload hash).
        chunk: bool,
    },
    /// The request body broke off (the client or peer went away, or sent bad framing).
    #[error("the request body broke off: {0}")]
    BodyBroken(String),
    /// The body does not match the Content-MD5 the client sent.
    #[error("the body does not match its Content-MD5")]
    BadDigest,
    /// Too few drives answered to do what was asked; the message says how many.
    #[error("not enough drives available: {0}")]
    Unavailable(String),
    /// The drive's memory for data in flight stayed taken for too long; the client should
    /// retry later.
    #[error("{0}")]
    SlowDown(String),
    /// The drive is shutting down and takes no new requests.
    #[error("the drive is shutting down")]
    ShuttingDown,
    /// A shard stored on this drive failed its CRC32C check: it is queued for heal and
    /// its bytes are not served.
    #[error("stored shard is corrupt in stripe {stripe}")]
    CorruptShard {
        /// The stripe whose chunk is bad.
        stripe: u64,
    },
    /// A shard upload failed its checks.
    #[error("shard: {0}")]
    Shard(#[from] oed_ec::Error),
    /// The metadata store failed.
    #[error("metadata store")]
    Meta(#[from] rocksdb::Error),
    /// A stored record could not be decoded.
    #[error("metadata record is corrupt")]
    Record(#[from] serde_json::Error),
    /// File or socket I/O failed.
    #[error("I/O")]
    Io(#[from] std::io::Error),
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP status and stable error code.
    #[must_use]
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        use oed_ec::Error as Ec;
        match self {
            Error::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            Error::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "Unauthenticated"),
            Error::Expired(_) => (StatusCode::FORBIDDEN, "RequestTimeTooSkewed"),
            Error::NotFound(_) => (StatusCode::NOT_FOUND, "NotFound"),
            Error::ShuttingDown | Error::Unavailable(_) => {
                (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable")
            }
            Error::SlowDown(_) => (StatusCode::SERVICE_UNAVAILABLE, "SlowDown"),
            Error::Superseded => (StatusCode::CONFLICT, "Superseded"),
            Error::BucketNotEmpty => (StatusCode::CONFLICT, "BucketNotEmpty"),
            Error::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "EntityTooLarge"),
            Error::InsufficientStorage { .. } => {
                (StatusCode::INSUFFICIENT_STORAGE, "InsufficientStorage")
            }
            Error::CorruptShard { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "CorruptShard"),
            Error::Shard(Ec::Io(e)) | Error::Io(e)
                if e.kind() == std::io::ErrorKind::StorageFull =>
            {
                (StatusCode::INSUFFICIENT_STORAGE, "InsufficientStorage")
            }
            Error::Config(_)
            | Error::Meta(_)
            | Error::Record(_)
            | Error::Io(_)
            | Error::Shard(Ec::Io(_)) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            Error::BodySignature { .. } => (StatusCode::FORBIDDEN, "SignatureDoesNotMatch"),
            Error::Shard(Ec::Truncated { .. })
            | Error::IncompleteBody { .. }
            | Error::BodyBroken(_) => (StatusCode::BAD_REQUEST, "IncompleteBody"),
            Error::Shard(Ec::CorruptChunk { .. }) | Error::BadDigest => {
                (StatusCode::BAD_REQUEST, "BadDigest")
            }
            Error::Shard(_) => (StatusCode::BAD_REQUEST, "InvalidShard"),
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = if status.is_server_error() {
            let chain = source_chain(&self);
            tracing::error!(error = %chain, code, "request failed");
            match code {
                "InsufficientStorage" | "CorruptShard" | "ServiceUnavailable" | "SlowDown" => {
                    self.to_string()
                }
                _ => "internal error; see the drive's log".to_owned(),
            }
        } else {
            self.to_string()
        };
        error_response(status, code, &message)
    }
}

/// An error and its sources, as one line: `top: cause: root cause`.
#[must_use]
pub fn source_chain(e: &dyn std::error::Error) -> String {
    let mut chain = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        src = s.source();
    }
    chain
}

/// The JSON error body every peer API error has: `{"code": "...", "message": "..."}`.
#[must_use]
pub fn error_response(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({ "code": code, "message": message });
    (status, axum::Json(body)).into_response()
}
