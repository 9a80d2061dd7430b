//! Ranges as S3 and HTTP treat them: a `Range` header that cannot be used (bad syntax,
//! `bytes=5-1`, several ranges, another unit) is ignored and the whole object sent; only a
//! range that cannot be satisfied is `416 InvalidRange` (checked where the object is
//! read, [`super::object`]).
//!
//! `s3s` parses the header after it has checked the signature, and fails the request on
//! one it cannot parse. The header is usually signed, so it cannot be dropped before that
//! check. A GET or HEAD with an unusable `Range` is therefore taken as a custom route: the
//! signed service checks the signature (with the header in place) and the route's access
//! check does what [`super::NameOperation`] does; the route then hands the request,
//! without its `Range` and its signature, to a second service that checks none (it is
//! reached only from here).

use s3s::dto::Range;
use s3s::{Body, S3ErrorCode, S3Request, S3Response, S3Result};

use super::OpName;
use super::err;

/// Whether a request is a GET or HEAD of an object whose `Range` header `s3s` would
/// refuse (it reads none on other paths).
pub fn unusable(method: &http::Method, uri: &http::Uri, headers: &http::HeaderMap) -> bool {
    if method != http::Method::GET && method != http::Method::HEAD {
        return false;
    }
    if object_path(uri).is_none() || !only_get_object_params(uri) {
        return false;
    }
    headers.get_all(http::header::RANGE).iter().count() > 1
        || headers
            .get(http::header::RANGE)
            .is_some_and(|v| v.to_str().map_or(true, |s| Range::parse(s).is_err()))
}

/// The route for GETs and HEADs with an unusable `Range`: the request goes on, whole, to
/// `plain` (the S3 service without signature checks).
pub struct IgnoreRange {
    plain: s3s::service::S3Service,
    region: String,
    cluster: std::sync::Arc<oed_cluster::Cluster>,
    /// The bootstrap access key (`s3_access_key`).
    root: String,
}

/// The bucket and key of a path-style object path.
fn object_path(uri: &http::Uri) -> Option<(String, String)> {
    let path = oed_model::uri::decode(uri.path())?;
    match s3s::path::parse_path_style(&path).ok()? {
        s3s::path::S3Path::Object { bucket, key } => Some((bucket.into(), key.into())),
        _ => None,
    }
}

/// Whether every query parameter is one of `GetObject`'s (or a presigned URL's): a GET
/// of a sub-resource (`?acl`, `?tagging`, `?uploadId=`...) is another operation, which
/// reads no `Range` and is left to the S3 service.
fn only_get_object_params(uri: &http::Uri) -> bool {
    uri.query().unwrap_or("").split('&').all(|kv| {
        let name = kv.split('=').next().unwrap_or(kv);
        kv.is_empty()
            || is_signature_param(kv)
            || matches!(name, "versionId" | "partNumber" | "x-id")
            || name.starts_with("response-")
    })
}

impl IgnoreRange {
    /// The route, forwarding to `plain`, for a cluster answering as `region` whose
    /// bootstrap key is `root`.
    #[must_use]
    pub fn new(
        plain: s3s::service::S3Service,
        region: &str,
        cluster: std::sync::Arc<oed_cluster::Cluster>,
        root: &str,
    ) -> Self {
        Self {
            plain,
            region: region.to_owned(),
            cluster,
            root: root.to_owned(),
        }
    }

    /// Names the operation for the request metrics, and refuses what the signed service's
    /// access check refuses (another region; unless the bucket's policy makes the object
    /// public, anonymous requests and a key without the read right in the bucket).
    ///
    /// # Errors
    /// `AccessDenied` or `AuthorizationHeaderMalformed`, as the access check refuses.
    pub async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        let op = if req.method == http::Method::HEAD {
            "HeadObject"
        } else {
            "GetObject"
        };
        if let Some(slot) = req.extensions.get::<OpName>() {
            slot.set(op);
        }
        super::check_region(&req.headers, &req.uri, &self.region)?;
        let who = crate::access::who(&self.root, req.credentials.as_ref());
        crate::access::note_use(&self.cluster, &who);
        let (bucket, key) = object_path(&req.uri)
            .ok_or_else(|| err(S3ErrorCode::InvalidURI, "the request names no object"))?;
        let reads = matches!(who, crate::access::Who::Root)
            || matches!(who, crate::access::Who::Key(id)
                if self.cluster.accounts().rights(id, &bucket).read);
        if !reads
            && crate::access::public(
                &self.cluster,
                op,
                &bucket,
                Some(&key),
                super::has_param(req.uri.query(), "versionId"),
            )
            .await?
                == crate::access::Public::Yes
        {
            if matches!(who, crate::access::Who::Anonymous) && has_overrides(&req.uri) {
                return Err(crate::access::overrides_refused());
            }
            return Ok(());
        }
        crate::access::require(
            &self.cluster,
            &who,
            op,
            &bucket,
            oed_model::account::Right::Read,
        )
    }

    /// Answers the request as if it had no `Range`.
    ///
    /// # Errors
    /// What the S3 service answers.
    pub async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let mut headers = req.headers;
        headers.remove(http::header::RANGE);
        headers.remove(http::header::AUTHORIZATION);
        let mut parts = req.uri.into_parts();
        if let Some(pq) = &parts.path_and_query {
            let path = pq.path();
            let query: Vec<&str> = pq
                .query()
                .unwrap_or("")
                .split('&')
                .filter(|kv| !kv.is_empty() && !is_signature_param(kv))
                .collect();
            let pq = if query.is_empty() {
                path.to_owned()
            } else {
                format!("{path}?{}", query.join("&"))
            };
            parts.path_and_query = Some(
                pq.parse()
                    .map_err(|_| err(S3ErrorCode::InvalidURI, "the request's URI is not valid"))?,
            );
        }
        let uri = http::Uri::from_parts(parts)
            .map_err(|_| err(S3ErrorCode::InvalidURI, "the request's URI is not valid"))?;
        let mut inner = http::Request::new(Body::empty());
        *inner.method_mut() = req.method;
        *inner.uri_mut() = uri;
        *inner.headers_mut() = headers;
        *inner.extensions_mut() = req.extensions;
        let res = self.plain.call(inner).await.map_err(|e| {
            tracing::error!(error = ?e, "the read without its Range failed");
            crate::error::internal()
        })?;
        let (parts, body) = res.into_parts();
        let mut out = S3Response::new(body);
        out.status = Some(parts.status);
        out.headers = parts.headers;
        out.extensions = parts.extensions;
        Ok(out)
    }
}

/// Whether the query asks for `response-*` overrides (names decoded, as `s3s` reads them).
fn has_overrides(uri: &http::Uri) -> bool {
    uri.query().unwrap_or("").split('&').any(|kv| {
        let name = kv.split('=').next().unwrap_or(kv);
        oed_model::uri::decode(name)
            .unwrap_or_else(|| name.to_owned())
            .starts_with("response-")
    })
}

/// Whether a query parameter belongs to a presigned URL's signature (`SigV4`'s `X-Amz-*`,
/// `SigV2`'s `AWSAccessKeyId`, `Signature` and `Expires`).
fn is_signature_param(kv: &str) -> bool {
    let name = kv.split('=').next().unwrap_or(kv);
    name.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("x-amz-"))
        || matches!(name, "AWSAccessKeyId" | "Signature" | "Expires")
}
