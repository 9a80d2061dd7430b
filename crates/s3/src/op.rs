//! `POST /BUCKET/KEY?oed-op`: a near-data operation on an object, and `POST
//! /BUCKET?oed-op&prefix=P` on every object whose key starts with `P`, through the S3
//! port and signed like any S3 request (SigV4 with headers or presigned), so any S3
//! signer can call it: `curl --aws-sigv4`, botocore, the SDKs. The body is the operation
//! as JSON, for example `{"op": "stats", "format": "f64le"}`; the answer is JSON,
//! `{"result": {...}, "cost": {...}}` (`docs/near-data.md`). Errors are S3 errors.
//!
//! `s3s` has no such operation; it hands the request to this custom route once it has
//! checked the signature.

use std::sync::Arc;

use oed_ops::op::Op;
use s3s::route::S3Route;
use s3s::{Body, S3ErrorCode, S3Request, S3Response, S3Result};

use super::OpName;
use super::{OrS3, err, has_param, need_bucket, param};
use crate::access;
use oed_cluster::Cluster;
use oed_model::account::Right;
use oed_model::uri::decode as percent_decode;

/// The query parameter that names a near-data operation.
pub const OP_PARAM: &str = "oed-op";

/// Largest operation request body.
const MAX_OP_BODY: usize = 64 * 1024;

/// Most objects one operation over a prefix takes.
pub const MAX_OBJECTS: usize = 10_000;

/// `Range: bytes=A-B` (or `bytes=A-`, `bytes=-N`), as on GET: the operation covers those
/// bytes of the object only.
fn asked_range(headers: &http::HeaderMap) -> S3Result<Option<s3s::dto::Range>> {
    headers
        .get(http::header::RANGE)
        .map(|v| {
            let text = v.to_str().unwrap_or_default();
            s3s::dto::Range::parse(text).map_err(|_| {
                err(
                    S3ErrorCode::InvalidRange,
                    format!("Range {text:?} is not bytes=FIRST-LAST, bytes=FIRST- or bytes=-N"),
                )
            })
        })
        .transpose()
}

/// The object bytes `range` names in `rec`'s object.
fn window(
    range: Option<&s3s::dto::Range>,
    rec: &oed_model::record::ObjectRecord,
) -> S3Result<Option<std::ops::Range<u64>>> {
    let size = rec.object_size();
    range
        .map(|r| {
            r.check(size).map_err(|_| {
                err(
                    S3ErrorCode::InvalidRange,
                    format!("the Range is not within the object's {size} bytes"),
                )
            })
        })
        .transpose()
}

/// The keys an operation that writes names (`target`, and `with` for add): user keys,
/// and none of them the object's own (or, for add, the target not its other operand).
fn check_targets(op: &Op, key: &str) -> S3Result<()> {
    let (name, target, with) = match op {
        Op::Compress(c) => ("compress", &c.target, None),
        Op::Sort(s) => ("sort", &s.target, None),
        Op::Decompress(d) => ("decompress", &d.target, None),
        Op::Add(a) => ("add", &a.target, Some(&a.with)),
        _ => return Ok(()),
    };
    super::check_user_key(target)?;
    if let Some(w) = with {
        super::check_user_key(w)?;
    }
    if target == key || with == Some(target) {
        return Err(err(
            S3ErrorCode::InvalidArgument,
            format!("{name}: the target must be another key than the object's (and its operands')"),
        ));
    }
    Ok(())
}

/// Whether `op` writes objects (its `target`): then it needs the write right in the
/// bucket, besides the read right every operation needs.
fn writes(op: &Op) -> bool {
    matches!(
        op,
        Op::Compress(_) | Op::Sort(_) | Op::Decompress(_) | Op::Add(_)
    )
}

/// The bucket a request's path names, if it names one.
fn op_bucket(uri: &http::Uri) -> Option<String> {
    let path = percent_decode(uri.path())?;
    match s3s::path::parse_path_style(&path).ok()? {
        s3s::path::S3Path::Object { bucket, .. } | s3s::path::S3Path::Bucket { bucket } => {
            Some(bucket.into())
        }
        s3s::path::S3Path::Root => None,
    }
}

/// The route `s3s` hands `POST ...?oed-op` to.
#[derive(Debug)]
pub struct OpRoute {
    cluster: Arc<Cluster>,
    /// The bootstrap access key (`s3_access_key`).
    root: String,
}

impl OpRoute {
    /// The route, running operations through `cluster`; `root` is the bootstrap key.
    #[must_use]
    pub fn new(cluster: Arc<Cluster>, root: &str) -> Self {
        Self {
            cluster,
            root: root.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl S3Route for OpRoute {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        _headers: &http::HeaderMap,
        _extensions: &mut http::Extensions,
    ) -> bool {
        method == http::Method::POST && has_param(uri.query(), OP_PARAM)
    }

    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        if let Some(slot) = req.extensions.get::<OpName>() {
            slot.set("OedOp");
        }
        let who = access::who(&self.root, req.credentials.as_ref());
        if matches!(who, access::Who::Anonymous) {
            self.cluster.stats.count_denied("OedOp");
            return Err(err(
                S3ErrorCode::AccessDenied,
                "Access Denied: near-data operations need a signed request",
            ));
        }
        access::note_use(&self.cluster, &who);
        // Every operation reads; one that writes needs more once its body is read.
        match op_bucket(&req.uri) {
            Some(bucket) => access::require(&self.cluster, &who, "OedOp", &bucket, Right::Read),
            None => access::refuse_unless_root(&self.cluster, &who, "OedOp"),
        }
    }

    async fn call(&self, mut req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let path = percent_decode(req.uri.path())
            .ok_or_else(|| err(S3ErrorCode::InvalidURI, "the path is not UTF-8"))?;
        let (bucket, key) = match s3s::path::parse_path_style(&path) {
            Ok(s3s::path::S3Path::Object { bucket, key }) => (bucket, Some(key)),
            Ok(s3s::path::S3Path::Bucket { bucket }) => (bucket, None),
            _ => {
                return Err(err(
                    S3ErrorCode::InvalidRequest,
                    "oed-op runs on an object (POST /BUCKET/KEY?oed-op) or on the objects of \
                     a prefix (POST /BUCKET?oed-op&prefix=P)",
                ));
            }
        };
        let body = req
            .input
            .store_all_limited(MAX_OP_BODY)
            .await
            .map_err(|e| {
                err(
                    S3ErrorCode::InvalidRequest,
                    format!("the operation must be JSON of at most {MAX_OP_BODY} bytes: {e}"),
                )
            })?;
        let op: Op = serde_json::from_slice(&body).map_err(|e| {
            err(
                S3ErrorCode::InvalidArgument,
                format!("the operation is not one OED knows: {e}"),
            )
        })?;
        if writes(&op) {
            let who = access::who(&self.root, req.credentials.as_ref());
            access::require(&self.cluster, &who, "OedOp", &bucket, Right::Write)?;
        }
        let range = asked_range(&req.headers)?;
        if range.is_some() && key.is_none() {
            return Err(err(
                S3ErrorCode::InvalidRequest,
                "a Range applies to an operation on one object, not on a prefix",
            ));
        }
        let outcome = if let Some(key) = key {
            check_targets(&op, &key)?;
            // An object's current version, or the one `versionId` names.
            let version = param(req.uri.query(), "versionId");
            let rec =
                crate::versioning::object(&self.cluster, &bucket, &key, version.as_deref()).await?;
            let w = window(range.as_ref(), &rec)?;
            self.cluster.run_op_range(&rec, op, w).await.or_s3()?
        } else if let Op::Compress(_) = op {
            return Err(err(
                S3ErrorCode::InvalidRequest,
                "compress runs on one object (POST /BUCKET/KEY?oed-op), not on a prefix",
            ));
        } else {
            need_bucket(&self.cluster, &bucket).await?;
            let prefix = param(req.uri.query(), "prefix").unwrap_or_default();
            let page = oed_cluster::list::walk(
                &self.cluster,
                &bucket,
                &prefix,
                None,
                None,
                MAX_OBJECTS,
                super::USER_KEYS_START,
            )
            .await
            .or_s3()?;
            if page.truncated {
                return Err(err(
                    S3ErrorCode::InvalidRequest,
                    format!(
                        "more than {MAX_OBJECTS} objects start with {prefix:?}: narrow the prefix"
                    ),
                ));
            }
            self.cluster.run_op_many(&page.contents, op).await.or_s3()?
        };
        let json = outcome.to_json().map_err(|e| {
            tracing::error!(error = %e, "a near-data answer does not encode as JSON");
            crate::error::internal()
        })?;
        let mut resp = S3Response::new(Body::from(bytes::Bytes::from(json)));
        resp.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_and_paths_are_read_as_sent() {
        assert!(has_param(Some("oed-op"), OP_PARAM));
        assert!(has_param(Some("x=1&oed-op="), OP_PARAM));
        assert!(!has_param(Some("oed-opx=1"), OP_PARAM));
        assert!(!has_param(None, OP_PARAM));
        assert_eq!(
            param(Some("oed-op&prefix=logs%2F2026+a"), "prefix").as_deref(),
            Some("logs/2026 a")
        );
        assert_eq!(param(Some("oed-op"), "prefix"), None);
    }
}
