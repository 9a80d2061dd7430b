//! `oedd op`: a near-data operation from a shell. It signs `POST /BUCKET/KEY?oed-op=` with
//! AWS Signature Version 4 (header form, payload hash included) using the credentials
//! S3 tools use (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`), sends it to any drive's S3
//! port, and returns the answer's JSON. `docs/near-data.md` describes operations and
//! answers.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};

use oed_model::error::{Error, Result};
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

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// A request to sign: its method, `host`, `path` (already encoded), canonical `query`
/// (encoded, sorted, `name=value` joined by `&`), and the payload hash it declares (the
/// body's hex SHA-256, or `UNSIGNED-PAYLOAD`).
#[derive(Clone, Copy, Debug)]
pub struct ToSign<'a> {
    /// `GET`, `PUT`, `POST`...
    pub method: &'a str,
    /// The `Host` header.
    pub host: &'a str,
    /// The path, encoded.
    pub path: &'a str,
    /// The canonical query string.
    pub query: &'a str,
    /// The declared payload hash.
    pub payload: &'a str,
}

/// The headers that sign `req` at `now` (seconds since the epoch), with SigV4 in header
/// form: `x-amz-date`, `x-amz-content-sha256` and `authorization`.
#[must_use]
pub fn sign(target: &Target, req: ToSign<'_>, now: u64) -> Vec<(String, String)> {
    let t = time::OffsetDateTime::from_unix_timestamp(i64::try_from(now).unwrap_or(0))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let date = format!("{:04}{:02}{:02}", t.year(), u8::from(t.month()), t.day());
    let stamp = format!("{date}T{:02}{:02}{:02}Z", t.hour(), t.minute(), t.second());
    let ToSign {
        method,
        host,
        path,
        query,
        payload,
    } = req;
    let canonical = format!(
        "{method}\n{path}\n{query}\nhost:{host}\nx-amz-content-sha256:{payload}\nx-amz-date:{stamp}\n\n\
         host;x-amz-content-sha256;x-amz-date\n{payload}"
    );
    let scope = format!("{date}/{}/s3/aws4_request", target.region);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{}", target.secret_key).as_bytes(), &date);
    for part in [target.region.as_str(), "s3", "aws4_request"] {
        key = hmac(&key, part);
    }
    let signature = hex(&hmac(&key, &to_sign));
    vec![
        ("x-amz-date".into(), stamp),
        ("x-amz-content-sha256".into(), payload.to_owned()),
        (
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, \
                 SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}",
                target.access_key
            ),
        ),
    ]
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
    let payload = hex(&Sha256::digest(&body));
    let to_sign = ToSign {
        method: "POST",
        host: &host,
        path: &path,
        query: "oed-op=",
        payload: &payload,
    };
    for (name, value) in sign(target, to_sign, now) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole signature is checked end to end against the verifier of `s3s` by
    /// `tests/s3/test_near_data.py`; here, the part that must not drift: the signing key
    /// chain (AWS's documented example). Encoding is `oed_model::uri`'s.
    #[test]
    fn the_signing_key_chain_follows_sigv4() {
        // From AWS's documentation: the signing key for 20150830/us-east-1/iam.
        let mut key = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830");
        for part in ["us-east-1", "iam", "aws4_request"] {
            key = hmac(&key, part);
        }
        assert_eq!(
            hex(&key),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
    }
}
