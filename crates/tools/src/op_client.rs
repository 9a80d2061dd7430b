//! `oedd op`: a near-data operation from a shell. It signs `POST /BUCKET/KEY?oed-op=` with
//! AWS Signature Version 4 (header form, payload hash included) using the credentials
//! S3 tools use (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), sends it to any drive's S3
//! port, and returns the answer's JSON. `docs/near-data.md` describes operations and
//! answers.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};

use oed_model::error::{Error, Result};
use oed_model::sigv4::Signer;
pub use oed_model::sigv4::ToSign;
use oed_model::uri::encode;

/// Where to send an operation and how to sign it.
#[derive(Clone, Debug)]
pub struct Target {
    /// The S3 endpoint, `http://host:port`.
    pub endpoint: String,
    /// The region to sign for.
    pub region: String,
    /// Access key id.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
}

/// The headers that sign `req` at `now` (seconds since the epoch), with SigV4 in header
/// form ([`oed_model::sigv4`]): `x-amz-date`, `x-amz-content-sha256` and `authorization`.
#[must_use]
pub fn sign(target: &Target, req: &ToSign<'_>, now: u64) -> Vec<(String, String)> {
    let signer = Signer {
        access_key: &target.access_key,
        secret_key: &target.secret_key,
        region: &target.region,
    };
    oed_model::sigv4::sign(&signer, req, now)
}

/// Runs `operation` (JSON) on `bucket`/`key` through `target`, over the bytes `range`
/// names (an HTTP `Range` value) when given; calls `waiting` with the time spent every
/// second until the answer comes. Returns the answer's body.
///
/// # Errors
/// [`Error::BadRequest`] for an endpoint that is not `http://host:port` or an operation
/// that is not JSON; [`Error::Unavailable`] when the drive cannot be reached; the S3
/// error the drive answered with, as [`Error::BadRequest`] naming its status.
pub async fn run(
    target: &Target,
    bucket: &str,
    key: &str,
    operation: &str,
    range: Option<&str>,
    mut waiting: impl FnMut(Duration),
) -> Result<String> {
    serde_json::from_str::<serde_json::Value>(operation)
        .map_err(|e| Error::BadRequest(format!("the operation is not JSON: {e}")))?;
    let uri: http::Uri = target
        .endpoint
        .parse()
        .map_err(|e| Error::BadRequest(format!("endpoint {:?}: {e}", target.endpoint)))?;
    let host = uri
        .authority()
        .filter(|_| uri.scheme_str() == Some("http"))
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "endpoint {:?} is not http://host:port",
                target.endpoint
            ))
        })?
        .to_string();
    let path = format!(
        "/{}/{}",
        encode(bucket),
        key.split('/').map(encode).collect::<Vec<_>>().join("/")
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let body = Bytes::from(operation.to_owned());
    let mut req = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://{host}{path}?oed-op="))
        .header(http::header::CONTENT_TYPE, "application/json");
    let payload = hex::encode(Sha256::digest(&body));
    let to_sign = ToSign {
        method: "POST",
        host: &host,
        path: &path,
        query: "oed-op=",
        payload: &payload,
        headers: &[],
    };
    for (name, value) in sign(target, &to_sign, now) {
        req = req.header(name, value);
    }
    if let Some(r) = range {
        req = req.header(http::header::RANGE, r);
    }
    let req = req
        .body(Full::new(body))
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let started = std::time::Instant::now();
    let call = async {
        let resp = client.request(req).await.map_err(|e| {
            Error::Unavailable(format!(
                "{}: {}",
                target.endpoint,
                oed_model::error::source_chain(&e)
            ))
        })?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| Error::Unavailable(format!("the answer broke off: {e}")))?
            .to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() {
            Ok(text)
        } else {
            Err(Error::BadRequest(format!("{status}: {text}")))
        }
    };
    tokio::pin!(call);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    loop {
        tokio::select! {
            answer = &mut call => return answer,
            _ = tick.tick() => waiting(started.elapsed()),
        }
    }
}
