//! The console's S3 requests: a page sends `METHOD /_oed/console/api/s3/PATH?QUERY`
//! with its session cookie; the drive signs `METHOD /PATH?QUERY` with the session's key
//! (SigV4, `UNSIGNED-PAYLOAD`) and hands it to its own S3 service, with the checks the
//! listener makes of any S3 request first, so every S3 rule and every right of the key
//! applies exactly as to a client. Only the headers S3 reads are passed on (never the
//! cookie); the answer comes back as S3 gave it.
//!
//! An object's key may also come as the query parameter [`KEY_PARAM`]
//! (`api/s3/BUCKET?oed-key=KEY&...`): a browser resolves `.` and `..` segments of a
//! path before it sends it, so a key such as `../b/k` must not be in one.

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::{self, HeaderName};

use oed_model::sigv4::{Signer, ToSign, canonical_query, sign};
use oed_model::uri::{decode, encode};

use crate::{Active, ApiError, Console};

/// Where the S3 paths start.
pub const PREFIX: &str = "/_oed/console/api/s3";

/// The query parameter that carries an object's key.
pub const KEY_PARAM: &str = "oed-key";

/// Headers passed on besides `x-amz-*` ones.
const PASSED: [HeaderName; 13] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CONTENT_DISPOSITION,
    header::CONTENT_LANGUAGE,
    header::CACHE_CONTROL,
    header::EXPIRES,
    header::RANGE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
    HeaderName::from_static("content-md5"),
];

/// `x-amz-*` headers a page may not set: the signature's own.
const SIGNATURE: [&str; 4] = [
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
    "x-amz-decoded-content-length",
];

/// Query parameters a page may not send: those of a presigned URL (SigV4 and V2),
/// which S3 would check instead of the session's signature.
const PRESIGNED: [&str; 8] = [
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-signature",
    "x-amz-date",
    "x-amz-security-token",
    "awsaccesskeyid",
    "signature",
    "x-amz-signedheaders",
];

/// The S3 path and canonical query of a console request for `uri`: the path as given
/// (its bucket one segment), or a bucket's path and [`KEY_PARAM`].
///
/// # Errors
/// [`ApiError`] 400 when a part is not percent-encoded UTF-8, the bucket segment holds
/// a `/`, the query carries a presigned URL's signature, or [`KEY_PARAM`] is empty,
/// repeated or not after a bucket alone.
pub fn target(uri: &http::Uri) -> Result<(String, String), ApiError> {
    let rest = uri.path().strip_prefix(PREFIX).unwrap_or("");
    let bad = || ApiError::bad_request("the path is not percent-encoded UTF-8");
    let segments = rest
        .split('/')
        .skip(1)
        .map(decode)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)?;
    if segments.first().is_some_and(|b| b.contains('/')) {
        return Err(ApiError::bad_request("a bucket's name has no '/'"));
    }
    let mut pairs = Vec::new();
    let mut key = None;
    for part in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let (k, v) = (decode(k).ok_or_else(bad)?, decode(v).ok_or_else(bad)?);
        if PRESIGNED.contains(&k.to_ascii_lowercase().as_str()) {
            return Err(ApiError::bad_request(format!(
                "{k} belongs to a presigned URL: the console signs its requests itself"
            )));
        }
        if k != KEY_PARAM {
            pairs.push((k, v));
        } else if key.replace(v).is_some() {
            return Err(ApiError::bad_request(format!("{KEY_PARAM} is given twice")));
        }
    }
    let mut path: Vec<String> = segments.iter().map(|s| encode(s)).collect();
    if let Some(k) = key {
        let bucket_alone = path.len() == 1 || (path.len() == 2 && path[1].is_empty());
        if k.is_empty() || path.first().is_none_or(String::is_empty) || !bucket_alone {
            return Err(ApiError::bad_request(format!(
                "{KEY_PARAM} names a key, after the path of a bucket: api/s3/BUCKET?{KEY_PARAM}=KEY"
            )));
        }
        path.truncate(1);
        path.extend(k.split('/').map(encode));
    }
    Ok((format!("/{}", path.join("/")), canonical_query(&pairs)))
}

/// Sends `req` to S3 as `active`'s key.
pub async fn forward(console: &Console, active: &Active, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let (path, query) = match target(&parts.uri) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        });
    if form {
        // S3 would take a browser form's own policy and signature instead of the
        // session's.
        return ApiError::bad_request(
            "a browser form upload (multipart/form-data) is not sent through the console",
        )
        .into_response();
    }
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost")
        .to_owned();
    let mut out = http::HeaderMap::new();
    let mut signed = Vec::new();
    for (name, value) in &parts.headers {
        let n = name.as_str();
        if n.starts_with("x-amz-") && !SIGNATURE.contains(&n) {
            let Ok(v) = value.to_str() else {
                return ApiError::bad_request(format!("header {n} is not text")).into_response();
            };
            signed.push((n.to_owned(), v.to_owned()));
            out.append(name.clone(), value.clone());
        } else if PASSED.contains(name) {
            out.append(name.clone(), value.clone());
        }
    }
    let signer = Signer {
        access_key: &active.key_id,
        secret_key: &active.secret,
        region: &console.region,
    };
    let to_sign = ToSign {
        method: parts.method.as_str(),
        host: &host,
        path: &path,
        query: &query,
        payload: "UNSIGNED-PAYLOAD",
        headers: &signed,
    };
    let now = oed_meter::wall_ms() / 1000;
    for (name, value) in sign(&signer, &to_sign, now) {
        if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(name),
            http::HeaderValue::try_from(value),
        ) {
            out.insert(n, v);
        }
    }
    if let Ok(v) = http::HeaderValue::try_from(host) {
        out.insert(header::HOST, v);
    }
    let uri = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    let mut builder = http::Request::builder().method(parts.method).uri(uri);
    if let Some(h) = builder.headers_mut() {
        *h = out;
    }
    // The extensions carry what the listener set for this request (where the S3 layer
    // names the operation for the metrics).
    if let Some(e) = builder.extensions_mut() {
        *e = parts.extensions;
    }
    let inner = match builder.body(s3s::Body::http_body_unsync(body)) {
        Ok(r) => r,
        Err(e) => return ApiError::bad_request(e.to_string()).into_response(),
    };
    if let Some(e) = oed_s3::header_section_too_large(inner.headers())
        .or_else(|| oed_s3::xml_body_refused(inner.method(), inner.uri(), inner.headers()))
    {
        return oed_s3::error::into_response(e);
    }
    match console.s3.call(inner).await {
        Ok(resp) => resp.map(Body::new),
        Err(e) => oed_s3::error::s3s_failure(&e).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_path_becomes_the_s3_path_encoded_once() {
        let uri: http::Uri =
            "/_oed/console/api/s3/b/dir/a%20b%2Bc?prefix=x%2Fy&list-type=2&uploads"
                .parse()
                .expect("uri");
        let (path, query) = target(&uri).expect("target");
        assert_eq!(path, "/b/dir/a%20b%2Bc");
        assert_eq!(query, "list-type=2&prefix=x%2Fy&uploads=");
        let root: http::Uri = "/_oed/console/api/s3/".parse().expect("uri");
        assert_eq!(target(&root).expect("root").0, "/");
        let bad: http::Uri = "/_oed/console/api/s3/b/%FF".parse().expect("uri");
        assert!(target(&bad).is_err());
    }

    #[test]
    fn a_key_in_the_query_keeps_its_dot_segments() {
        let uri: http::Uri = "/_oed/console/api/s3/b?oed-key=..%2Fother%2Fk&uploads"
            .parse()
            .expect("uri");
        let (path, query) = target(&uri).expect("target");
        assert_eq!(path, "/b/../other/k");
        assert_eq!(query, "uploads=");
        for bad in [
            "/_oed/console/api/s3/?oed-key=k",
            "/_oed/console/api/s3/b/k?oed-key=k",
            "/_oed/console/api/s3/b?oed-key=",
            "/_oed/console/api/s3/b?oed-key=a&oed-key=b",
            "/_oed/console/api/s3/a%2Fb?oed-key=k",
            "/_oed/console/api/s3/a%2Fb",
            "/_oed/console/api/s3/b/k?X-Amz-Signature=00",
            "/_oed/console/api/s3/b/k?AWSAccessKeyId=A&Signature=s",
        ] {
            assert!(target(&bad.parse().expect("uri")).is_err(), "{bad}");
        }
    }
}
