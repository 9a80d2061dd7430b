//! AWS Signature Version 4 in header form, as an S3 client signs a request: `oedd op`
//! signs its operations with it, and the console the requests a page makes through it
//! with the key the page logged in with.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::uri::encode;

/// Who signs, and for which region.
#[derive(Clone, Copy, Debug)]
pub struct Signer<'a> {
    /// Access key id.
    pub access_key: &'a str,
    /// Secret access key.
    pub secret_key: &'a str,
    /// The region signed for.
    pub region: &'a str,
}

/// A request to sign: its method, `host`, `path` (already encoded), canonical `query`
/// ([`canonical_query`]), the payload hash it declares (the body's hex SHA-256, or
/// `UNSIGNED-PAYLOAD`), and other headers to sign (lower-case names), beside `host`,
/// `x-amz-content-sha256` and `x-amz-date`.
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
    /// More headers to sign, names in lower case.
    pub headers: &'a [(String, String)],
}

/// The query `pairs` (decoded names and values) as SigV4 signs them and as the request
/// should send them: each encoded, sorted, `name=value` joined by `&`.
#[must_use]
pub fn canonical_query(pairs: &[(String, String)]) -> String {
    let mut encoded: Vec<(String, String)> =
        pairs.iter().map(|(k, v)| (encode(k), encode(v))).collect();
    encoded.sort();
    let mut out = String::new();
    for (i, (k, v)) in encoded.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        let _ = write!(out, "{k}={v}");
    }
    out
}

fn hmac(key: &[u8], data: &str) -> ring::hmac::Tag {
    ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key),
        data.as_bytes(),
    )
}

/// `YYYYMMDD` and `YYYYMMDDTHHMMSSZ` of `now` (seconds since the epoch, UTC).
fn stamps(now: u64) -> (String, String) {
    let (year, month, day) = crate::record::civil_date(i64::try_from(now / 86_400).unwrap_or(0));
    let secs = now % 86_400;
    let date = format!("{year:04}{month:02}{day:02}");
    let stamp = format!(
        "{date}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    );
    (date, stamp)
}

/// The headers that sign `req` at `now` (seconds since the epoch): `x-amz-date`,
/// `x-amz-content-sha256` and `authorization`.
#[must_use]
pub fn sign(signer: &Signer<'_>, req: &ToSign<'_>, now: u64) -> Vec<(String, String)> {
    let (date, stamp) = stamps(now);
    // Each header once, its values in the order sent joined by commas, each trimmed
    // and its runs of spaces made one (SigV4's canonical headers).
    let mut headers: std::collections::BTreeMap<&str, Vec<String>> = [
        ("host", req.host),
        ("x-amz-content-sha256", req.payload),
        ("x-amz-date", stamp.as_str()),
    ]
    .into_iter()
    .map(|(n, v)| (n, vec![v.to_owned()]))
    .collect();
    for (name, value) in req.headers {
        headers
            .entry(name.as_str())
            .or_default()
            .push(value.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    let mut canonical = format!("{}\n{}\n{}\n", req.method, req.path, req.query);
    for (name, values) in &headers {
        let _ = writeln!(canonical, "{name}:{}", values.join(","));
    }
    let signed: Vec<&str> = headers.keys().copied().collect();
    let signed = signed.join(";");
    let _ = write!(canonical, "\n{signed}\n{}", req.payload);
    let scope = format!("{date}/{}/s3/aws4_request", signer.region);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{}", signer.secret_key).as_bytes(), &date);
    for part in [signer.region, "s3", "aws4_request"] {
        key = hmac(key.as_ref(), part);
    }
    let signature = hex::encode(hmac(key.as_ref(), &to_sign));
    vec![
        ("x-amz-date".into(), stamp),
        ("x-amz-content-sha256".into(), req.payload.to_owned()),
        (
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
                signer.access_key
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signing_key_chain_follows_sigv4() {
        // AWS's documented example of a signing key (the IAM signature examples).
        let mut key = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830");
        for part in ["us-east-1", "iam", "aws4_request"] {
            key = hmac(key.as_ref(), part);
        }
        assert_eq!(
            hex::encode(key.as_ref()),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
    }

    #[test]
    fn a_get_is_signed_as_aws_signs_it() {
        // AWS's S3 example "GET Object" (Signature Version 4, header form), with its
        // Range header signed.
        let signer = Signer {
            access_key: "AKIAIOSFODNN7EXAMPLE",
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
        };
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let headers = [("range".to_owned(), "bytes=0-9".to_owned())];
        let out = sign(
            &signer,
            &ToSign {
                method: "GET",
                host: "examplebucket.s3.amazonaws.com",
                path: "/test.txt",
                query: "",
                payload: empty,
                headers: &headers,
            },
            1_369_353_600,
        );
        assert_eq!(out[0].1, "20130524T000000Z");
        assert!(out[2].1.ends_with(
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        ));
    }

    #[test]
    fn repeated_headers_are_one_line_and_spaces_fold() {
        let signer = Signer {
            access_key: "A",
            secret_key: "S",
            region: "us-east-1",
        };
        let sign_with = |headers: &[(String, String)]| {
            sign(
                &signer,
                &ToSign {
                    method: "PUT",
                    host: "h",
                    path: "/b/k",
                    query: "",
                    payload: "UNSIGNED-PAYLOAD",
                    headers,
                },
                0,
            )[2]
            .1
            .clone()
        };
        let two = [
            ("x-amz-meta-a".to_owned(), " one   two ".to_owned()),
            ("x-amz-meta-a".to_owned(), "three".to_owned()),
        ];
        let one = [("x-amz-meta-a".to_owned(), "one two,three".to_owned())];
        assert_eq!(sign_with(&two), sign_with(&one));
        assert!(
            sign_with(&one)
                .contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-meta-a,")
        );
    }

    #[test]
    fn a_query_is_encoded_and_sorted() {
        let pairs = [
            ("prefix".to_owned(), "a/b c".to_owned()),
            ("list-type".to_owned(), "2".to_owned()),
            ("uploads".to_owned(), String::new()),
        ];
        assert_eq!(
            canonical_query(&pairs),
            "list-type=2&prefix=a%2Fb%20c&uploads="
        );
    }

    #[test]
    fn dates_are_civil_dates() {
        assert_eq!(stamps(0).1, "19700101T000000Z");
        assert_eq!(stamps(951_782_400).0, "20000229");
        assert_eq!(stamps(1_795_910_399).1, "20261128T235959Z");
    }
}
