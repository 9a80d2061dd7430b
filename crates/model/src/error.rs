//! The daemon's one error type, the typed [`ErrorCode`] that crosses the peer boundary,
//! and a drive's answer to an error: [`DriveError`], the JSON error body of the peer API
//! (`IntoResponse for DriveError`). Every public form of an error, the peer API's code
//! and S3's code and status, is one row of the one table, [`Error::public`]; the S3 front
//! end's `s3_error` reads it. Both log 5xx errors with their source chain and keep their
//! internals out of every body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

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
    NotFound(Missing),
    /// A newer version of the object is already stored here; this write changed nothing.
    #[error("a newer version of this object is already stored")]
    Superseded,
    /// The bucket still holds objects.
    #[error("bucket is not empty")]
    BucketNotEmpty,
    /// A conditional write's condition does not hold (S3's `If-None-Match: *` on a key
    /// that exists, `If-Match` with another `ETag`): the message says which.
    #[error("{0}")]
    PreconditionFailed(String),
    /// Conditional writes of one key raced and none was stored on enough drives: nothing
    /// changed; the client may try again.
    #[error("{0}")]
    ConditionConflict(String),
    /// A shard was placed by a cluster map of another epoch than this drive's.
    #[error(
        "cluster maps differ: this drive runs map epoch {mine}, the shard was placed by epoch {theirs}; give every drive the same map"
    )]
    StaleMap {
        /// This drive's epoch.
        mine: u64,
        /// The sender's.
        theirs: u64,
    },
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
    /// The client sent its body slower than the drive takes ([`oed_s3::RateFloor`]).
    #[error("{0}")]
    TooSlow(String),
    /// The body does not match the Content-MD5 the client sent.
    #[error("the body does not match its Content-MD5")]
    BadDigest,
    /// The body does not match the `x-amz-checksum-*` the client sent; the algorithm's
    /// name (`CRC32`, ...).
    #[error("The {0} you specified did not match the calculated checksum.")]
    ChecksumMismatch(&'static str),
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
    /// The metadata store (the store's RocksDB) failed; the source is its error.
    #[error("metadata store")]
    Meta(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A stored record could not be decoded.
    #[error("metadata record is corrupt")]
    Record(#[from] serde_json::Error),
    /// File or socket I/O failed.
    #[error("I/O")]
    Io(#[from] std::io::Error),
}

/// What a [`Error::NotFound`] did not find: callers match on it (the S3 front end picks
/// `NoSuchBucket`, `NoSuchKey` or `NoSuchUpload` by it), never on a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// A bucket.
    Bucket,
    /// An object (no version of the key at all).
    Object,
    /// The version of an object asked for (another version may exist).
    ObjectVersion,
    /// A multipart upload.
    Upload,
    /// A route of the drive's HTTP API.
    Route,
    /// An S3 route on a drive that serves no S3 (it has no S3 secret).
    S3Off,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Missing::Bucket => "bucket",
            Missing::Object => "object",
            Missing::ObjectVersion => "object version",
            Missing::Upload => "upload",
            Missing::Route => "route",
            Missing::S3Off => "route (S3 is off: no S3 secret)",
        })
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, as drives tell each other: the `code` of a peer API error body
/// (`{"code": "...", "message": "..."}`), serialised as its name. Both sides of the peer
/// boundary use this one enum, so the coordinator matches codes, never strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A malformed request (400).
    BadRequest,
    /// Not signed, or signed with the wrong key (401).
    Unauthenticated,
    /// Signed too long ago or too far ahead (403).
    RequestTimeTooSkewed,
    /// A body that is not the one signed (403).
    SignatureDoesNotMatch,
    /// No such bucket, object, version or route there (404).
    NotFound,
    /// A newer version of the object is stored there (409).
    Superseded,
    /// The bucket still has objects there (409).
    BucketNotEmpty,
    /// A conditional write's condition does not hold there (412).
    PreconditionFailed,
    /// Conditional writes of one key raced and none was stored on enough drives (409).
    /// Made by a coordinator for its client; no drive sends it.
    ConditionConflict,
    /// A shard placed by a cluster map of another epoch than the drive's (409).
    StaleMap,
    /// Larger than the drive takes (413).
    EntityTooLarge,
    /// The body ended or broke off early (400).
    IncompleteBody,
    /// A chunk or body failed its checksum (400).
    BadDigest,
    /// Not a valid shard file (400).
    InvalidShard,
    /// A stored shard failed its CRC32C; it is queued for heal there (500).
    CorruptShard,
    /// Storing it would eat into the free-space reserve (507).
    InsufficientStorage,
    /// Too few drives, or shutting down (503).
    ServiceUnavailable,
    /// Memory for data in flight stayed taken too long (503).
    SlowDown,
    /// Anything else that failed inside the drive; its log has the cause (500).
    InternalError,
    /// The drive could not be asked, or its answer could not be read: down, refused,
    /// timed out, cut off. Made by the asking side; no drive sends it.
    Unreachable,
    /// A code this build does not know (a newer drive's).
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The HTTP status a drive answers with.
    #[must_use]
    pub fn status(self) -> StatusCode {
        use ErrorCode as C;
        match self {
            C::BadRequest | C::IncompleteBody | C::BadDigest | C::InvalidShard => {
                StatusCode::BAD_REQUEST
            }
            C::Unauthenticated => StatusCode::UNAUTHORIZED,
            C::RequestTimeTooSkewed | C::SignatureDoesNotMatch => StatusCode::FORBIDDEN,
            C::NotFound => StatusCode::NOT_FOUND,
            C::Superseded | C::BucketNotEmpty | C::StaleMap | C::ConditionConflict => {
                StatusCode::CONFLICT
            }
            C::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            C::EntityTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            C::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
            C::ServiceUnavailable | C::SlowDown => StatusCode::SERVICE_UNAVAILABLE,
            C::CorruptShard | C::InternalError | C::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
            C::Unreachable => StatusCode::BAD_GATEWAY,
        }
    }

    /// Whether an answer with this code may say more than "internal error": the codes
    /// whose message helps the asker and gives nothing away.
    fn message_is_public(self) -> bool {
        !matches!(self, ErrorCode::InternalError | ErrorCode::Unknown)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// How S3 names an error: its code (`NoSuchKey`, ...) and HTTP status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct S3Code {
    /// The `Code` of S3's error body.
    pub code: &'static str,
    /// The HTTP status S3 answers it with.
    pub status: u16,
}

impl S3Code {
    const fn new(code: &'static str, status: u16) -> Self {
        Self { code, status }
    }

    /// Whether it is a failure of the server (5xx): its cause is logged and its body says
    /// only "internal error".
    #[must_use]
    pub fn is_internal(self) -> bool {
        self.status == 500
    }
}

impl Error {
    /// The public forms of this error, in one table: the peer API's code (which sets the
    /// status of a peer answer, [`ErrorCode::status`]) and S3's code and status. Every
    /// error a client or a drive sees is named here and nowhere else.
    #[must_use]
    pub fn public(&self) -> (ErrorCode, S3Code) {
        use ErrorCode as C;
        use oed_ec::Error as Ec;
        const INTERNAL: S3Code = S3Code::new("InternalError", 500);
        let s3 = S3Code::new;
        match self {
            Error::Config(_) => (C::InternalError, s3("InvalidArgument", 400)),
            Error::BadRequest(_) => (C::BadRequest, s3("InvalidArgument", 400)),
            Error::Unauthenticated(_) => (C::Unauthenticated, INTERNAL),
            Error::Expired(_) => (C::RequestTimeTooSkewed, INTERNAL),
            Error::NotFound(Missing::Bucket) => (C::NotFound, s3("NoSuchBucket", 404)),
            Error::NotFound(Missing::Upload) => (C::NotFound, s3("NoSuchUpload", 404)),
            Error::NotFound(_) => (C::NotFound, s3("NoSuchKey", 404)),
            Error::Superseded => (C::Superseded, INTERNAL),
            Error::BucketNotEmpty => (C::BucketNotEmpty, s3("BucketNotEmpty", 409)),
            Error::PreconditionFailed(_) => (C::PreconditionFailed, s3("PreconditionFailed", 412)),
            Error::ConditionConflict(_) => {
                (C::ConditionConflict, s3("ConditionalRequestConflict", 409))
            }
            Error::StaleMap { .. } => (C::StaleMap, INTERNAL),
            Error::TooLarge(_) => (C::EntityTooLarge, s3("EntityTooLarge", 400)),
            Error::InsufficientStorage { .. } => {
                (C::InsufficientStorage, s3("InsufficientStorage", 507))
            }
            Error::Shard(Ec::Io(e)) | Error::Io(e)
                if e.kind() == std::io::ErrorKind::StorageFull =>
            {
                (C::InsufficientStorage, s3("InsufficientStorage", 507))
            }
            Error::IncompleteBody { .. } | Error::BodyBroken(_) => {
                (C::IncompleteBody, s3("IncompleteBody", 400))
            }
            // S3 answers a payload-hash mismatch with 400; the body is not the one signed,
            // so OED refuses it as it refuses any other signature failure.
            Error::BodySignature { chunk: true } => {
                (C::SignatureDoesNotMatch, s3("SignatureDoesNotMatch", 403))
            }
            Error::BodySignature { chunk: false } => (
                C::SignatureDoesNotMatch,
                s3("XAmzContentSHA256Mismatch", 403),
            ),
            Error::TooSlow(_) => (C::IncompleteBody, s3("RequestTimeout", 400)),
            Error::BadDigest | Error::ChecksumMismatch(_) => (C::BadDigest, s3("BadDigest", 400)),
            Error::Unavailable(_) | Error::ShuttingDown => {
                (C::ServiceUnavailable, s3("ServiceUnavailable", 503))
            }
            Error::SlowDown(_) => (C::SlowDown, s3("SlowDown", 503)),
            Error::CorruptShard { .. } => (C::CorruptShard, INTERNAL),
            Error::Meta(_) | Error::Record(_) | Error::Io(_) | Error::Shard(Ec::Io(_)) => {
                (C::InternalError, INTERNAL)
            }
            Error::Shard(Ec::Truncated { .. }) => (C::IncompleteBody, INTERNAL),
            Error::Shard(Ec::CorruptChunk { .. }) => (C::BadDigest, INTERNAL),
            Error::Shard(_) => (C::InvalidShard, INTERNAL),
        }
    }

    /// The typed code of this error, as the peer API sends it.
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        self.public().0
    }

    /// How S3 names this error.
    #[must_use]
    pub fn s3_code(&self) -> S3Code {
        self.public().1
    }
}

/// An error as a drive reports it to whoever asked, this drive's coordinator or another
/// drive's: a typed code and a message fit to be read by the asker. Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct DriveError {
    /// What went wrong.
    pub code: ErrorCode,
    /// What the drive says about it.
    pub message: String,
}

impl DriveError {
    /// An error with `code` and `message`.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// The drive could not be asked, or its answer not read (see [`ErrorCode::Unreachable`]).
    #[must_use]
    pub fn unreachable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unreachable, message)
    }

    /// Whether it says the thing asked for is not there.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        self.code == ErrorCode::NotFound
    }
}

impl From<Error> for DriveError {
    /// The one place a drive's error takes its public form: a 5xx is logged here with its
    /// source chain, and an internal one leaves only "see the drive's log".
    fn from(e: Error) -> Self {
        let code = e.code();
        if code.status().is_server_error() {
            tracing::error!(error = %source_chain(&e), %code, "request failed");
        }
        let message = if code.message_is_public() {
            e.to_string()
        } else {
            "internal error; see the drive's log".to_owned()
        };
        Self { code, message }
    }
}

impl IntoResponse for DriveError {
    /// The peer API's error answer: the code's status and `{"code", "message"}`.
    fn into_response(self) -> Response {
        (self.code.status(), axum::Json(self)).into_response()
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        DriveError::from(self).into_response()
    }
}

/// A metric that cannot be made or registered is a configuration error of the drive.
impl From<oed_meter::Error> for Error {
    fn from(e: oed_meter::Error) -> Self {
        Error::Config(format!("metrics: {e}"))
    }
}

/// A metric that cannot be made or registered (a name taken twice).
impl From<prometheus::Error> for Error {
    fn from(e: prometheus::Error) -> Self {
        Error::Config(format!("metrics: {e}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The codes keep the names the peer API documents, in both directions, and a code
    /// from a newer drive reads as `Unknown` instead of failing the whole answer.
    #[test]
    fn codes_cross_the_wire_by_name() {
        for (code, name) in [
            (ErrorCode::NotFound, "NotFound"),
            (ErrorCode::Superseded, "Superseded"),
            (ErrorCode::InsufficientStorage, "InsufficientStorage"),
            (ErrorCode::CorruptShard, "CorruptShard"),
            (ErrorCode::StaleMap, "StaleMap"),
            (ErrorCode::RequestTimeTooSkewed, "RequestTimeTooSkewed"),
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), name);
            assert_eq!(
                serde_json::from_value::<ErrorCode>(name.into()).unwrap(),
                code
            );
        }
        let e: DriveError =
            serde_json::from_str(r#"{"code":"SomethingNew","message":"m"}"#).unwrap();
        assert_eq!(e.code, ErrorCode::Unknown);
    }

    #[test]
    fn internal_errors_keep_their_cause_out_of_the_answer() {
        let e = DriveError::from(Error::Io(std::io::Error::other("/secret/path")));
        assert_eq!(e.code, ErrorCode::InternalError);
        assert!(!e.message.contains("secret"), "{}", e.message);
        let full = DriveError::from(Error::Io(std::io::ErrorKind::StorageFull.into()));
        assert_eq!(full.code, ErrorCode::InsufficientStorage);
        let nf = DriveError::from(Error::NotFound(Missing::Bucket));
        assert_eq!(
            (nf.code, nf.message.as_str()),
            (ErrorCode::NotFound, "bucket not found")
        );
    }
}
