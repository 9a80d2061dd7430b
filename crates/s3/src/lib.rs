//! The S3 front end every drive serves. The `s3s` crate does the protocol: routing,
//! SigV4 (headers, presigned URLs, aws-chunked streaming bodies), XML in and out. This
//! module implements its [`S3`] trait with thin handlers that call the cluster: one file
//! per group of operations ([`bucket`], [`object`], [`list`], [`multipart`]), and
//! OED's own near-data operations on the S3 port ([`op`]). OED's
//! errors become S3 error codes in [`self::error::s3_error`].
//!
//! Keys beginning with U+0001 are the cluster's own (multipart uploads and their parts,
//! see [`multipart`]); clients cannot create them, and listings never show them.

mod access;
pub use access::KeyAuth;
mod acl;
pub mod bucket;
pub mod checksum;
pub mod chunked;
pub mod error;
pub mod lifecycle;
pub mod list;
mod locks;
pub mod multipart;
pub mod object;
mod objectlock;
pub mod op;
mod policy;
pub mod range;
mod rate;
#[cfg(test)]
mod stored_values;
pub mod tagging;
mod versioning;

pub use rate::RateFloor;

use std::sync::Arc;

use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, CompleteMultipartUploadInput,
    CompleteMultipartUploadOutput, CopyObjectInput, CopyObjectOutput, CreateBucketInput,
    CreateBucketOutput, CreateMultipartUploadInput, CreateMultipartUploadOutput, DeleteBucketInput,
    DeleteBucketOutput, DeleteBucketPolicyInput, DeleteBucketPolicyOutput, DeleteObjectInput,
    DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, GetBucketAclInput,
    GetBucketAclOutput, GetBucketLocationInput, GetBucketLocationOutput, GetBucketPolicyInput,
    GetBucketPolicyOutput, GetBucketPolicyStatusInput, GetBucketPolicyStatusOutput,
    GetBucketVersioningInput, GetBucketVersioningOutput, GetObjectAclInput, GetObjectAclOutput,
    GetObjectInput, GetObjectOutput, HeadBucketInput, HeadBucketOutput, HeadObjectInput,
    HeadObjectOutput, ListBucketsInput, ListBucketsOutput, ListMultipartUploadsInput,
    ListMultipartUploadsOutput, ListObjectVersionsInput, ListObjectVersionsOutput,
    ListObjectsInput, ListObjectsOutput, ListObjectsV2Input, ListObjectsV2Output, ListPartsInput,
    ListPartsOutput, PutBucketAclInput, PutBucketAclOutput, PutBucketPolicyInput,
    PutBucketPolicyOutput, PutBucketVersioningInput, PutBucketVersioningOutput, PutObjectAclInput,
    PutObjectAclOutput, PutObjectInput, PutObjectOutput, UploadPartCopyInput, UploadPartCopyOutput,
    UploadPartInput, UploadPartOutput,
};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use s3s::route::S3Route;

use oed_cluster::Cluster;
use oed_model::account::Right;
use oed_model::error::Error;
use oed_model::record::ObjectRecord;

pub(crate) use error::err;

pub use oed_model::record::{INTERNAL_PREFIX, USER_KEYS_START};

/// Where the S3 front end names the operation of the request it serves: the metered
/// middleware puts an empty one in the request's extensions, `s3s` carries it to the S3
/// layer, which fills it in once `s3s` has resolved the operation
/// (the access check, [`precheck`]), and the middleware reads it when the answer is ready.
#[derive(Clone, Debug, Default)]
pub struct OpName(Arc<std::sync::OnceLock<String>>);

impl OpName {
    /// Names the operation (the first name given stays).
    pub fn set(&self, name: &str) {
        let _ = self.0.set(name.to_owned());
    }

    /// The name given, if any.
    #[must_use]
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }
}

/// The S3 service of one drive.
#[derive(Clone, Debug)]
pub struct OedS3 {
    cluster: Arc<Cluster>,
    region: String,
    /// The bootstrap access key (`s3_access_key`): every right, everywhere.
    root: String,
}

impl OedS3 {
    /// The S3 service coordinating through `cluster`, answering as `region`.
    #[must_use]
    pub fn new(cluster: Arc<Cluster>, region: &str, root: &str) -> Self {
        Self {
            root: root.to_owned(),
            cluster,
            region: region.to_owned(),
        }
    }
}

/// The `s3s` service for `region`, with signatures checked against the bootstrap key
/// (`access_key`, `secret_key`: every right) and the account table's keys, and each
/// request's rights in its bucket ([`access`]).
#[must_use]
pub fn service(
    cluster: Arc<Cluster>,
    access_key: &str,
    secret_key: &str,
    region: &str,
) -> s3s::service::S3Service {
    let mut b =
        s3s::service::S3ServiceBuilder::new(OedS3::new(cluster.clone(), region, access_key));
    // No body read whole is read past XML_BODY_MAX (precheck refuses a longer one first).
    let mut config = s3s::config::S3Config::default();
    config.xml_max_body_size = XML_BODY_MAX;
    b.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        config,
    ))));
    b.set_auth(access::KeyAuth::new(
        cluster.clone(),
        access_key,
        secret_key,
    ));
    b.set_access(NameOperation {
        region: region.to_owned(),
        cluster: cluster.clone(),
        root: access_key.to_owned(),
    });
    let plain =
        s3s::service::S3ServiceBuilder::new(OedS3::new(cluster.clone(), region, access_key))
            .build();
    b.set_route(Routes {
        op: op::OpRoute::new(cluster.clone(), access_key),
        range: range::IgnoreRange::new(plain, region, cluster, access_key),
    });
    b.build()
}

/// OED's routes beside the S3 operations: near-data operations ([`op`]), and reads whose
/// `Range` is to be ignored ([`range`]).
struct Routes {
    op: op::OpRoute,
    range: range::IgnoreRange,
}

/// Which of [`Routes`] a request took, kept in its extensions between the match and the
/// call.
#[derive(Clone, Copy)]
struct TookRange;

#[async_trait::async_trait]
impl S3Route for Routes {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        extensions: &mut http::Extensions,
    ) -> bool {
        if self.op.is_match(method, uri, headers, extensions) {
            return true;
        }
        let unusable = range::unusable(method, uri, headers);
        if unusable {
            extensions.insert(TookRange);
        }
        unusable
    }

    async fn check_access(&self, req: &mut S3Request<s3s::Body>) -> S3Result<()> {
        if req.extensions.get::<TookRange>().is_some() {
            self.range.check_access(req).await
        } else {
            self.op.check_access(req).await
        }
    }

    async fn call(&self, mut req: S3Request<s3s::Body>) -> S3Result<S3Response<s3s::Body>> {
        if req.extensions.remove::<TookRange>().is_some() {
            self.range.call(req).await
        } else {
            self.op.call(req).await
        }
    }
}

/// The access check `s3s` runs once it has verified a request's signature and resolved
/// its operation: it names the operation for the request metrics ([`OpName`]), refuses
/// a request signed for another region (as S3 does: `AuthorizationHeaderMalformed`, or
/// `AuthorizationQueryParametersError` for a presigned URL), an ACL that grants more than
/// the owner ([`acl`]), and, unless the bucket's policy makes the request public
/// ([`access::public`]), anonymous requests and requests whose key lacks the right the
/// operation needs in its bucket ([`access::needs`]); after the request is parsed, a
/// copy's source bucket too.
struct NameOperation {
    region: String,
    cluster: Arc<Cluster>,
    root: String,
}

/// Whether a read's input (`GetObjectInput`, `HeadObjectInput`) asks for `response-*`
/// overrides of the answer's headers.
macro_rules! overrides {
    ($i:expr) => {
        $i.response_cache_control.is_some()
            || $i.response_content_disposition.is_some()
            || $i.response_content_encoding.is_some()
            || $i.response_content_language.is_some()
            || $i.response_content_type.is_some()
            || $i.response_expires.is_some()
    };
}

impl NameOperation {
    /// Refuses the request unless the signer has the right its operation needs in its
    /// bucket (`None`), or the bucket's policy makes it public ([`access::public`]: a
    /// listing is then to have its prefix checked once parsed, an unsigned read its
    /// `response-*` overrides refused).
    async fn allowed(
        &self,
        name: &str,
        who: &access::Who<'_>,
        bucket: &str,
        key: Option<&str>,
        by_version: bool,
    ) -> S3Result<Option<access::Public>> {
        let need = access::needs(name);
        let by_rights = match (who, need) {
            (access::Who::Root, _) | (access::Who::Key(_), access::Need::Nothing) => true,
            (access::Who::Key(id), access::Need::Right(right)) if !bucket.is_empty() => {
                self.cluster.accounts().rights(id, bucket).allow(right)
            }
            _ => false,
        };
        if by_rights {
            return Ok(None);
        }
        if !bucket.is_empty() {
            let public = access::public(&self.cluster, name, bucket, key, by_version).await?;
            if public != access::Public::No {
                return Ok(Some(public));
            }
        }
        match (who, need) {
            (access::Who::Anonymous, _) => {
                self.cluster.stats.count_denied(name);
                Err(access::anonymous_refused())
            }
            (_, access::Need::Right(right)) if !bucket.is_empty() => {
                access::require(&self.cluster, who, name, bucket, right).map(|()| None)
            }
            _ => access::refuse_unless_root(&self.cluster, who, name).map(|()| None),
        }
    }
}

#[async_trait::async_trait]
impl s3s::access::S3Access for NameOperation {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> S3Result<()> {
        let name = cx.s3_op().name().to_owned();
        if let Some(slot) = cx.extensions_mut().get::<OpName>() {
            slot.set(&name);
        }
        check_region(cx.headers(), cx.uri(), &self.region)?;
        let who = access::who(&self.root, cx.credentials());
        access::note_use(&self.cluster, &who);
        let (bucket, key) = match cx.s3_path() {
            s3s::path::S3Path::Root => (String::new(), None),
            s3s::path::S3Path::Bucket { bucket } => ((**bucket).to_owned(), None),
            s3s::path::S3Path::Object { bucket, key } => {
                ((**bucket).to_owned(), Some((**key).to_owned()))
            }
        };
        let anonymous = matches!(who, access::Who::Anonymous);
        let by_version = has_param(cx.uri().query(), "versionId");
        match self
            .allowed(&name, &who, &bucket, key.as_deref(), by_version)
            .await?
        {
            Some(access::Public::Yes) if anonymous => {
                cx.extensions_mut().insert(access::PublicRead);
            }
            Some(access::Public::ListIfPrefix) => {
                cx.extensions_mut().insert(access::PublicList);
            }
            _ => {}
        }
        // After the rights: a request that may not be made is refused as such first.
        if acl::sets_acl(&name)
            && let Some(e) = acl::refused(&name, cx.headers())
        {
            return Err(e);
        }
        Ok(())
    }

    async fn copy_object(&self, req: &mut S3Request<CopyObjectInput>) -> S3Result<()> {
        let who = access::who(&self.root, req.credentials.as_ref());
        access::require_source(&self.cluster, &who, "CopyObject", &req.input.copy_source)
    }

    async fn list_objects(&self, req: &mut S3Request<ListObjectsInput>) -> S3Result<()> {
        access::check_public_list(
            &self.cluster,
            &req.extensions,
            "ListObjects",
            &req.input.bucket,
            req.input.prefix.as_deref(),
        )
    }

    async fn list_objects_v2(&self, req: &mut S3Request<ListObjectsV2Input>) -> S3Result<()> {
        access::check_public_list(
            &self.cluster,
            &req.extensions,
            "ListObjectsV2",
            &req.input.bucket,
            req.input.prefix.as_deref(),
        )
    }

    async fn get_object(&self, req: &mut S3Request<GetObjectInput>) -> S3Result<()> {
        access::check_public_overrides(&req.extensions, overrides!(req.input))
    }

    async fn head_object(&self, req: &mut S3Request<HeadObjectInput>) -> S3Result<()> {
        access::check_public_overrides(&req.extensions, overrides!(req.input))
    }

    async fn upload_part_copy(&self, req: &mut S3Request<UploadPartCopyInput>) -> S3Result<()> {
        let who = access::who(&self.root, req.credentials.as_ref());
        access::require_source(
            &self.cluster,
            &who,
            "UploadPartCopy",
            &req.input.copy_source,
        )
    }
}

/// Refuses a request signed for another region than `expected`, as S3 does:
/// `AuthorizationHeaderMalformed`, or `AuthorizationQueryParametersError` for a presigned
/// URL.
///
/// # Errors
/// As above, for a request signed for another region.
pub fn check_region(headers: &http::HeaderMap, uri: &http::Uri, expected: &str) -> S3Result<()> {
    let Some((region, presigned)) = signed_region(headers, uri) else {
        return Ok(());
    };
    if region == expected {
        return Ok(());
    }
    Err(if presigned {
        err(
            S3ErrorCode::AuthorizationQueryParametersError,
            format!(
                "Error parsing the X-Amz-Credential parameter; the region '{region}' is wrong; expecting '{expected}'"
            ),
        )
    } else {
        err(
            S3ErrorCode::AuthorizationHeaderMalformed,
            format!(
                "The authorization header is malformed; the region '{region}' is wrong; expecting '{expected}'"
            ),
        )
    })
}

/// What S3 refuses before it looks at a request's signature, answered as S3 answers it:
/// a presigned URL whose expiry is out of range ([`presigned_expires`]) is
/// `AuthorizationQueryParametersError` (400), a request whose headers take more than
/// [`MAX_HEADER_SECTION`] bytes is `RequestHeaderSectionTooLarge` (400), and an XML body
/// that would be read whole is refused before a byte of it is read when it is over
/// [`XML_BODY_MAX`] or has no length ([`xml_body_refused`]). The peer API's routes pass.
///
/// Every S3 answer says `X-Content-Type-Options: nosniff`, and `Content-Security-Policy:
/// sandbox` unless it is a PDF, an image other than SVG, audio or video (which run no
/// script, and which browsers do not show in a sandbox): the web console is served from
/// the same origin (`/_oed/console/`), and an object a browser opens must not run as a
/// page of it.
pub async fn precheck(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if req.uri().path().starts_with("/_oed/") {
        return next.run(req).await;
    }
    if let Some(e) = presigned_expires(req.uri())
        .or_else(|| header_section_too_large(req.headers()))
        .or_else(|| xml_body_refused(req.method(), req.uri(), req.headers()))
    {
        return error::into_response(e);
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if !inert(h.get(http::header::CONTENT_TYPE)) {
        h.insert(
            http::header::CONTENT_SECURITY_POLICY,
            http::HeaderValue::from_static("sandbox"),
        );
    }
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    resp
}

/// Whether a body of `content_type` runs nothing in a browser: PDF, images but SVG,
/// audio, video.
fn inert(content_type: Option<&http::HeaderValue>) -> bool {
    let Some(t) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let t = t.trim_start();
    let is = |prefix: &str| {
        t.get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    is("application/pdf") || (is("image/") && !is("image/svg")) || is("audio/") || is("video/")
}

/// The largest request body read whole (an XML document: `DeleteObjects`,
/// `CompleteMultipartUpload`, a bucket's or an object's settings). The largest S3 allows
/// are far smaller (1,000 keys of at most 1,024 bytes, each character escaped; 10,000
/// parts of a few hundred bytes); object data is streamed and not bound by it.
pub const XML_BODY_MAX: usize = 8 << 20;

/// Sub-resources of an object's `PUT` whose body is an XML document read whole (any other
/// `PUT` of an object is its data).
const OBJECT_SETTINGS: &[&str] = &["acl", "legal-hold", "retention", "tagging"];

/// Sub-resources of a bucket's `PUT` whose body is an XML (or JSON) document read whole.
const SETTINGS: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "retention",
    "tagging",
    "versioning",
    "website",
];

/// The error for a request whose body is read whole (an XML document) when that body is
/// over [`XML_BODY_MAX`] (`MaxMessageLengthExceeded`, 400) or sent without a length
/// (`MissingContentLength`, 411, as S3 answers it), if it is. Object data (`PutObject`,
/// `UploadPart`, a browser's `POST` upload) and near-data requests are not such bodies.
/// Requests are path-style here (the service names no virtual host), so a path without
/// a key is a bucket's.
#[must_use]
pub fn xml_body_refused(
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
) -> Option<S3Error> {
    let any_of = |names: &[&str]| names.iter().any(|n| has_param(uri.query(), n));
    // `/b` and `/b/` name a bucket; `/b//` names key `/` in it.
    let bucket_only = uri
        .path()
        .strip_prefix('/')
        .unwrap_or(uri.path())
        .split_once('/')
        .is_none_or(|(_, key)| key.is_empty());
    let whole = if method == http::Method::POST {
        any_of(&["delete", "uploadId", "restore", "select"])
    } else if method == http::Method::PUT {
        if bucket_only {
            uri.query().is_none_or(str::is_empty) || any_of(SETTINGS)
        } else {
            any_of(OBJECT_SETTINGS)
        }
    } else {
        false
    };
    if !whole {
        return None;
    }
    let length = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match length {
        Some(n) if n > XML_BODY_MAX as u64 => Some(err(
            S3ErrorCode::MaxMessageLengthExceeded,
            format!(
                "Your request was too big: a body of {n} bytes, where this request's XML may \
                 take {XML_BODY_MAX}"
            ),
        )),
        None if headers.contains_key(http::header::TRANSFER_ENCODING) => Some(err(
            S3ErrorCode::MissingContentLength,
            "You must provide the Content-Length HTTP header.",
        )),
        Some(_) | None => None,
    }
}

/// The most bytes a request's headers may take (names, values, and `: ` and CRLF
/// each), as S3 states it for PUT: 8 KB.
pub const MAX_HEADER_SECTION: usize = 8 * 1024;

/// The error for headers larger than [`MAX_HEADER_SECTION`], if they are.
#[must_use]
pub fn header_section_too_large(headers: &http::HeaderMap) -> Option<S3Error> {
    let size: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    (size > MAX_HEADER_SECTION).then(|| {
        err(
            S3ErrorCode::RequestHeaderSectionTooLarge,
            format!(
                "Your request header section exceeds the maximum allowed size: {size} bytes, \
                 at most {MAX_HEADER_SECTION}"
            ),
        )
    })
}

/// The longest a presigned URL may stay valid: a week, as S3 allows for SigV4.
pub const PRESIGNED_MAX_SECONDS: u64 = 604_800;

/// The error for a presigned URL's expiry out of range, if it is: SigV4's
/// `X-Amz-Expires` over a week (or not a positive number), or a `SigV2` URL whose
/// `Expires` lies more than a week from now (`SigV2` states no limit; OED holds it to
/// `SigV4`'s, so that no URL handed out stays valid for years).
pub fn presigned_expires(uri: &http::Uri) -> Option<S3Error> {
    let query = uri.query()?;
    if !query.contains("X-Amz-Credential=") {
        return presigned_v2_expires(query, oed_model::record::now_ms() / 1000);
    }
    let v = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("X-Amz-Expires="))?;
    let why = match v.parse::<i64>() {
        Ok(1..=604_800) => return None,
        Ok(n) if n > 604_800 => {
            "X-Amz-Expires must be less than a week (in seconds) that is 604800"
        }
        Ok(n) if n < 0 => "X-Amz-Expires must be non-negative",
        Ok(_) => "X-Amz-Expires must be at least 1 second",
        Err(_) => "X-Amz-Expires should be a number",
    };
    Some(err(S3ErrorCode::AuthorizationQueryParametersError, why))
}

/// The error for a `SigV2` presigned URL (`AWSAccessKeyId`, `Signature` and `Expires` in
/// its query) that expires more than [`PRESIGNED_MAX_SECONDS`] after `now` (seconds
/// since the epoch), or whose `Expires` is not a number. One already expired is left to
/// the signature check, which refuses it as expired.
fn presigned_v2_expires(query: &str, now: u64) -> Option<S3Error> {
    let query = Some(query);
    if !has_param(query, "AWSAccessKeyId") || !has_param(query, "Signature") {
        return None;
    }
    let expires = param(query, "Expires")?;
    // A client's clock may run ahead of the drive's: the same allowance as S3's for a
    // request's time (15 minutes).
    let why = match expires.parse::<u64>() {
        Ok(t) if t <= now.saturating_add(PRESIGNED_MAX_SECONDS + 900) => return None,
        Ok(t) => format!(
            "Expires must be at most a week (604800 seconds) from now for a presigned URL; \
             it is {} seconds from now",
            t.saturating_sub(now)
        ),
        Err(_) => "Expires should be a number of seconds since the epoch".to_owned(),
    };
    Some(err(S3ErrorCode::AuthorizationQueryParametersError, why))
}

/// The value of query parameter `name`, percent-decoded (`+` is a space, as forms send).
pub(crate) fn param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| oed_model::uri::decode(&v.replace('+', " ")))?
    })
}

/// Whether `query` has the parameter `name` (with or without a value).
pub(crate) fn has_param(query: Option<&str>, name: &str) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv.split('=').next() == Some(name)))
}

/// The region a SigV4 request was signed for (its credential scope,
/// `KEY/DATE/REGION/s3/aws4_request`), and whether it came in the query (a presigned
/// URL).
fn signed_region(headers: &http::HeaderMap, uri: &http::Uri) -> Option<(String, bool)> {
    let scope_region = |scope: &str| scope.split('/').nth(2).map(str::to_owned);
    if let Some(auth) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let cred = auth.split("Credential=").nth(1)?;
        let cred = cred.split([',', ' ']).next()?;
        return scope_region(cred).map(|r| (r, false));
    }
    let query = uri.query()?;
    let cred = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("X-Amz-Credential="))?;
    // The scope's slashes come encoded; nothing else in it needs decoding.
    let cred = cred.replace("%2F", "/").replace("%2f", "/");
    scope_region(&cred).map(|r| (r, true))
}

/// `Result<T, Error>` to `S3Result<T>`.
pub(crate) trait OrS3<T> {
    fn or_s3(self) -> S3Result<T>;
}

impl<T> OrS3<T> for Result<T, Error> {
    fn or_s3(self) -> S3Result<T> {
        self.map_err(self::error::s3_error)
    }
}

/// Checks a client's key: S3's rules, and not one of the cluster's own.
///
/// # Errors
/// `KeyTooLongError` for a key over 1024 bytes, `InvalidArgument` for one the cluster keeps
/// for itself.
pub fn check_user_key(key: &str) -> S3Result<()> {
    if key.len() > oed_model::record::MAX_KEY {
        return Err(err(
            S3ErrorCode::KeyTooLongError,
            format!(
                "the key is {} bytes; at most {}",
                key.len(),
                oed_model::record::MAX_KEY
            ),
        ));
    }
    oed_model::record::check_key(key).or_s3()?;
    if key.starts_with(INTERNAL_PREFIX) {
        return Err(err(
            S3ErrorCode::InvalidArgument,
            "keys beginning with U+0001 are reserved",
        ));
    }
    Ok(())
}

/// A size or count as the `i64` S3's types hold (saturating).
pub(crate) fn s3_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A count as the `i32` S3's types hold (saturating).
pub(crate) fn s3_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A client's `i32` count as a `usize`, negative as 0.
pub(crate) fn from_s3_i32(n: i32) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// The response's timestamp for a time in milliseconds since the epoch.
/// Milliseconds since the epoch of a time a client sent; `None` before 1970.
pub(crate) fn millis(ts: &s3s::dto::Timestamp) -> Option<u64> {
    u64::try_from(time::OffsetDateTime::from(ts.clone()).unix_timestamp_nanos() / 1_000_000).ok()
}

pub(crate) fn timestamp(ms: u64) -> s3s::dto::Timestamp {
    // A time from a record is whatever a disk or a peer gave: one past the last that
    // S3's formats can write (the end of year 9999) is answered as that one, where it
    // would otherwise panic in the conversion and close the client's connection.
    s3s::dto::Timestamp::from(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.min(LAST_TIMESTAMP_MS)),
    )
}

/// 9999-12-31T23:59:59.999Z in milliseconds since the epoch: the last time S3's date
/// formats write.
const LAST_TIMESTAMP_MS: u64 = 253_402_300_799_999;

/// An `ETag` value as S3 sends it.
pub(crate) fn etag(value: &str) -> s3s::dto::ETag {
    s3s::dto::ETag::Strong(value.to_owned())
}

/// The current record, or `NoSuchKey`.
pub(crate) async fn record(cluster: &Cluster, bucket: &str, key: &str) -> S3Result<ObjectRecord> {
    check_user_key(key)?;
    if let Some(r) = cluster.head(bucket, key).await.or_s3()? {
        return Ok(r);
    }
    need_bucket(cluster, bucket).await?;
    Err(err(
        S3ErrorCode::NoSuchKey,
        format!("no object {key:?} in bucket {bucket:?}"),
    ))
}

/// Whether the bucket exists, as an S3 error when not.
pub(crate) async fn need_bucket(cluster: &Cluster, bucket: &str) -> S3Result<()> {
    if cluster.bucket_exists(bucket).await.or_s3()? {
        Ok(())
    } else {
        Err(err(
            S3ErrorCode::NoSuchBucket,
            format!("bucket {bucket:?} does not exist"),
        ))
    }
}

#[async_trait::async_trait]
impl S3 for OedS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let who = access::who(&self.root, req.credentials.as_ref());
        bucket::create(&self.cluster, &who, req.input).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        need_bucket(&self.cluster, &req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let who = access::who(&self.root, req.credentials.as_ref());
        bucket::list(&self.cluster, &who).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        bucket::delete(&self.cluster, &req.input.bucket).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        need_bucket(&self.cluster, &req.input.bucket).await?;
        // S3 names no constraint for us-east-1.
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint: (self.region != "us-east-1")
                .then(|| s3s::dto::BucketLocationConstraint::from(self.region.clone())),
        }))
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<s3s::dto::GetObjectTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectTaggingOutput>> {
        tagging::get_object(&self.cluster, req.input).await
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<s3s::dto::PutObjectTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectTaggingOutput>> {
        tagging::put_object(&self.cluster, req.input).await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<s3s::dto::DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteObjectTaggingOutput>> {
        tagging::delete_object(&self.cluster, req.input).await
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<s3s::dto::PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectLockConfigurationOutput>> {
        let i = req.input;
        objectlock::put_config(&self.cluster, &i.bucket, i.object_lock_configuration).await
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<s3s::dto::GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectLockConfigurationOutput>> {
        objectlock::get_config(&self.cluster, &req.input.bucket).await
    }

    async fn put_object_retention(
        &self,
        req: S3Request<s3s::dto::PutObjectRetentionInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectRetentionOutput>> {
        let who = access::who(&self.root, req.credentials.as_ref());
        let i = req.input;
        let bypass = i.bypass_governance_retention == Some(true)
            && access::has(&self.cluster, &who, &i.bucket, Right::Owner);
        objectlock::put_retention(
            &self.cluster,
            &i.bucket,
            &i.key,
            i.version_id.as_deref(),
            i.retention,
            bypass,
        )
        .await
    }

    async fn get_object_retention(
        &self,
        req: S3Request<s3s::dto::GetObjectRetentionInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectRetentionOutput>> {
        let i = req.input;
        objectlock::get_retention(&self.cluster, &i.bucket, &i.key, i.version_id.as_deref()).await
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<s3s::dto::PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectLegalHoldOutput>> {
        let i = req.input;
        objectlock::put_legal_hold(
            &self.cluster,
            &i.bucket,
            &i.key,
            i.version_id.as_deref(),
            i.legal_hold,
        )
        .await
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<s3s::dto::GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectLegalHoldOutput>> {
        let i = req.input;
        objectlock::get_legal_hold(&self.cluster, &i.bucket, &i.key, i.version_id.as_deref()).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<s3s::dto::GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketLifecycleConfigurationOutput>> {
        lifecycle::get(&self.cluster, &req.input.bucket).await
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<s3s::dto::PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<s3s::dto::PutBucketLifecycleConfigurationOutput>> {
        let i = req.input;
        lifecycle::put(&self.cluster, &i.bucket, i.lifecycle_configuration).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<s3s::dto::DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteBucketLifecycleOutput>> {
        lifecycle::delete(&self.cluster, &req.input.bucket).await
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<s3s::dto::GetBucketTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketTaggingOutput>> {
        tagging::get_bucket(&self.cluster, &req.input.bucket).await
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<s3s::dto::PutBucketTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::PutBucketTaggingOutput>> {
        let i = req.input;
        tagging::put_bucket(&self.cluster, &i.bucket, i.tagging.tag_set).await
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<s3s::dto::DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteBucketTaggingOutput>> {
        tagging::delete_bucket(&self.cluster, &req.input.bucket).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        versioning::get(&self.cluster, &req.input.bucket).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let input = req.input;
        versioning::put(&self.cluster, &input.bucket, input.versioning_configuration).await
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        policy::put(&self.cluster, &req.input.bucket, req.input.policy).await
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        policy::get(&self.cluster, &req.input.bucket).await
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        policy::status(&self.cluster, &req.input.bucket).await
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        policy::delete(&self.cluster, &req.input.bucket).await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        need_bucket(&self.cluster, &req.input.bucket).await?;
        Ok(S3Response::new(GetBucketAclOutput {
            grants: Some(acl::grants()),
            owner: Some(bucket::owner()),
        }))
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        need_bucket(&self.cluster, &req.input.bucket).await?;
        acl::put_document(req.input.access_control_policy.as_ref())?;
        Ok(S3Response::new(PutBucketAclOutput {}))
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let i = &req.input;
        versioning::object(&self.cluster, &i.bucket, &i.key, i.version_id.as_deref()).await?;
        Ok(S3Response::new(GetObjectAclOutput {
            grants: Some(acl::grants()),
            owner: Some(bucket::owner()),
            request_charged: None,
        }))
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let i = &req.input;
        versioning::object(&self.cluster, &i.bucket, &i.key, i.version_id.as_deref()).await?;
        acl::put_document(req.input.access_control_policy.as_ref())?;
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        object::put(&self.cluster, req).await
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        object::get(&self.cluster, req.input).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        object::head(&self.cluster, req.input).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<s3s::dto::GetObjectAttributesInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectAttributesOutput>> {
        checksum::attributes(&self.cluster, req.input).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let who = access::who(&self.root, req.credentials.as_ref());
        let bypass = access::has(&self.cluster, &who, &req.input.bucket, Right::Owner);
        object::delete(&self.cluster, req.input, bypass).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let who = access::who(&self.root, req.credentials.as_ref());
        let bypass = access::has(&self.cluster, &who, &req.input.bucket, Right::Owner);
        object::delete_many(&self.cluster, req.input, bypass).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        object::copy(&self.cluster, req.input).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        list::v1(&self.cluster, req.input).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        list::v2(&self.cluster, req.input).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        list::versions(&self.cluster, req.input).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        multipart::create(&self.cluster, req.input).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        multipart::upload_part(&self.cluster, req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        multipart::upload_part_copy(&self.cluster, req.input).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        multipart::complete(&self.cluster, req.input).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        multipart::abort(&self.cluster, req.input).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        multipart::list_parts(&self.cluster, req.input).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        multipart::list_uploads(&self.cluster, req.input).await
    }
}

#[cfg(test)]
mod tests {
    use s3s::dto::TimestampFormat;

    #[test]
    fn only_objects_that_run_nothing_are_shown_outside_a_sandbox() {
        let inert = |t: &'static str| super::inert(Some(&http::HeaderValue::from_static(t)));
        for t in [
            "application/pdf",
            "image/png",
            "IMAGE/JPEG",
            "video/mp4",
            "audio/ogg",
        ] {
            assert!(inert(t), "{t}");
        }
        for t in [
            "text/html",
            "image/svg+xml",
            "application/xhtml+xml",
            "text/xml",
            "",
        ] {
            assert!(!inert(t), "{t}");
        }
        assert!(!super::inert(None));
    }

    /// A time from a disk or a peer, however far it lies, is written in every format S3
    /// uses, not a panic.
    #[test]
    fn any_stored_time_is_written_in_every_format() {
        for ms in [
            0,
            1_700_000_000_000,
            super::LAST_TIMESTAMP_MS,
            u64::MAX / 2,
            u64::MAX,
        ] {
            let t = super::timestamp(ms);
            for f in [
                TimestampFormat::DateTime,
                TimestampFormat::HttpDate,
                TimestampFormat::EpochSeconds,
            ] {
                let mut out = Vec::new();
                t.format(f, &mut out).expect("formatted");
                assert!(!out.is_empty());
            }
        }
        let mut out = Vec::new();
        super::timestamp(u64::MAX)
            .format(TimestampFormat::DateTime, &mut out)
            .expect("formatted");
        assert_eq!(String::from_utf8_lossy(&out), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_sigv2_presigned_url_is_held_to_a_week() {
        let now = 1_800_000_000;
        let q = |expires: &str| format!("AWSAccessKeyId=oed&Signature=abc%3D&Expires={expires}");
        let week = super::PRESIGNED_MAX_SECONDS;
        assert!(super::presigned_v2_expires(&q(&(now + week).to_string()), now).is_none());
        // A client's clock a few minutes ahead.
        assert!(super::presigned_v2_expires(&q(&(now + week + 600).to_string()), now).is_none());
        assert!(super::presigned_v2_expires(&q(&(now - 10).to_string()), now).is_none());
        let e = super::presigned_v2_expires(&q(&(now + 10 * 365 * 86_400).to_string()), now)
            .expect("ten years refused");
        assert_eq!(e.code().as_str(), "AuthorizationQueryParametersError");
        assert_eq!(e.status_code().map(|s| s.as_u16()), Some(400));
        assert!(super::presigned_v2_expires(&q("soon"), now).is_some());
        // Not a SigV2 presigned URL: no opinion.
        assert!(super::presigned_v2_expires("Expires=99999999999", now).is_none());
    }

    #[test]
    fn an_xml_body_over_the_limit_or_without_a_length_is_refused_before_it_is_read() {
        let refused = |method: &str, uri: &str, headers: &[(&str, &str)]| {
            let mut h = http::HeaderMap::new();
            for (k, v) in headers {
                h.insert(
                    http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                    http::HeaderValue::from_str(v).expect("value"),
                );
            }
            let method = http::Method::from_bytes(method.as_bytes()).expect("method");
            super::xml_body_refused(&method, &uri.parse().expect("uri"), &h).map(|e| {
                (
                    e.code().as_str().to_owned(),
                    e.status_code().map(|s| s.as_u16()),
                )
            })
        };
        let big = (super::XML_BODY_MAX + 1).to_string();
        let big = [("content-length", big.as_str())];
        let chunked = [("transfer-encoding", "chunked")];
        let too_big = Some(("MaxMessageLengthExceeded".to_owned(), Some(400)));
        let no_length = Some(("MissingContentLength".to_owned(), Some(411)));
        assert_eq!(refused("POST", "/b?delete", &big), too_big);
        assert_eq!(refused("POST", "/b/k?uploadId=abc", &big), too_big);
        assert_eq!(refused("PUT", "/b/k?tagging", &big), too_big);
        assert_eq!(refused("PUT", "/b", &big), too_big);
        assert_eq!(refused("PUT", "/b/", &big), too_big);
        assert_eq!(refused("PUT", "/b?policy", &big), too_big);
        // Key `/` and keys named like a bucket's settings are object data.
        assert_eq!(refused("PUT", "/b//", &big), None);
        assert_eq!(refused("PUT", "/b///", &big), None);
        assert_eq!(refused("PUT", "/b/k?policy", &big), None);
        assert_eq!(refused("PUT", "/b/k?x-id=PutObject", &big), None);
        assert_eq!(refused("POST", "/b/k?uploads", &big), None);
        assert_eq!(refused("POST", "/b?delete=", &chunked), no_length);
        assert_eq!(
            refused("POST", "/b?delete", &[("content-length", "1000")]),
            None
        );
        // Object data streams, whatever its size.
        assert_eq!(refused("PUT", "/b/k", &big), None);
        assert_eq!(refused("PUT", "/b/k?partNumber=1&uploadId=abc", &big), None);
        assert_eq!(refused("PUT", "/b/k", &chunked), None);
        assert_eq!(refused("POST", "/b", &big), None);
        assert_eq!(refused("POST", "/b/k?oed-op=sha256", &big), None);
        assert_eq!(refused("GET", "/b?delete", &big), None);
    }
}
