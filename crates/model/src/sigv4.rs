//! AWS Signature Version 4 in header form, as an S3 client signs a request: `oedd op`
//! signs its operations with it, the console the requests a page makes through it with
//! the key the page logged in with, and `oedd bench` its uploads, also in the streaming
//! form S3 clients use over plain HTTP (`aws-chunked` bodies whose every chunk is signed,
//! with or without a signed trailer: [`ChunkSigner`]).

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
    sign_streaming(signer, req, now).0
}

/// The hex SHA-256 of no bytes.
const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Signs the chunks of an `aws-chunked` body after its request's signature (the seed),
/// as S3 clients do for `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` and
/// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: each chunk's signature covers the
/// previous one and the chunk's SHA-256, so the chunks must be signed in order, the empty
/// last chunk included, and the trailer (if any) after it.
#[derive(Clone)]
pub struct ChunkSigner {
    key: ring::hmac::Key,
    /// `x-amz-date`'s stamp, then the scope, each followed by a newline.
    stamp_scope: String,
    previous: String,
}

impl std::fmt::Debug for ChunkSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSigner")
            .field("previous", &self.previous)
            .finish_non_exhaustive()
    }
}

impl ChunkSigner {
    /// The signer of the chunks after a request signed `seed` with `key` at `stamp`
    /// (`x-amz-date`) in `scope` (`DATE/REGION/SERVICE/aws4_request`).
    #[must_use]
    pub fn after(key: ring::hmac::Key, stamp: &str, scope: &str, seed: &str) -> Self {
        Self {
            key,
            stamp_scope: format!("{stamp}\n{scope}\n"),
            previous: seed.to_owned(),
        }
    }

    /// The signature of the next chunk, whose SHA-256 is `sha256` (of no bytes for the
    /// last chunk); it becomes the previous signature of the one after.
    pub fn chunk(&mut self, sha256: &[u8]) -> &str {
        let to_sign = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}{}\n{EMPTY_SHA256}\n{}",
            self.stamp_scope,
            self.previous,
            hex::encode(sha256)
        );
        self.previous = hex::encode(ring::hmac::sign(&self.key, to_sign.as_bytes()));
        &self.previous
    }

    /// The signature of the trailer after the last chunk: `canonical` is its headers as
    /// `name:value\n` lines, names in lower case and sorted, without the signature's own.
    pub fn trailer(&mut self, canonical: &[u8]) -> &str {
        let to_sign = format!(
            "AWS4-HMAC-SHA256-TRAILER\n{}{}\n{}",
            self.stamp_scope,
            self.previous,
            hex::encode(Sha256::digest(canonical))
        );
        self.previous = hex::encode(ring::hmac::sign(&self.key, to_sign.as_bytes()));
        &self.previous
    }
}

/// SigV4's canonical request: the method, the encoded path, the canonical query, each
/// signed header as `name:values` (names in lower case, in the order of `signed`; values
/// trimmed, their runs of spaces made one, joined by commas), the signed headers' names
/// (`signed`, joined by `;`) and the declared payload hash.
#[must_use]
pub fn canonical_request<'a>(
    method: &str,
    path: &str,
    query: &str,
    headers: impl IntoIterator<Item = (&'a str, String)>,
    signed: &str,
    payload: &str,
) -> String {
    let mut canonical = format!("{method}\n{path}\n{query}\n");
    for (name, values) in headers {
        let _ = writeln!(canonical, "{name}:{values}");
    }
    let _ = write!(canonical, "\n{signed}\n{payload}");
    canonical
}

/// One header's values as SigV4 signs them: each trimmed, its runs of whitespace made
/// one space, joined by commas.
#[must_use]
pub fn header_values<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    values
        .into_iter()
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(",")
}

/// The key that signs requests of `date` (`YYYYMMDD`) for `region` and `service` with
/// `secret`: `AWS4` and the secret, then HMAC-SHA256 over the date, the region, the
/// service and `aws4_request` in turn.
#[must_use]
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> ring::hmac::Key {
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date);
    for part in [region, service, "aws4_request"] {
        key = hmac(key.as_ref(), part);
    }
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_ref())
}

/// The signature (hex) of the canonical request `canonical` made at `stamp`
/// (`x-amz-date`) in `scope`, with `key` ([`signing_key`]).
#[must_use]
pub fn signature(key: &ring::hmac::Key, stamp: &str, scope: &str, canonical: &str) -> String {
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    hex::encode(ring::hmac::sign(key, to_sign.as_bytes()))
}

/// As [`sign`], and the signer of the body's chunks that follow that signature (for a
/// `req.payload` of `STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`).
#[must_use]
pub fn sign_streaming(
    signer: &Signer<'_>,
    req: &ToSign<'_>,
    now: u64,
) -> (Vec<(String, String)>, ChunkSigner) {
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
            .push(header_values([value.as_str()]));
    }
    let signed: Vec<&str> = headers.keys().copied().collect();
    let signed = signed.join(";");
    let canonical = canonical_request(
        req.method,
        req.path,
        req.query,
        headers.iter().map(|(n, v)| (*n, v.join(","))),
        &signed,
        req.payload,
    );
    let scope = format!("{date}/{}/s3/aws4_request", signer.region);
    let key = signing_key(signer.secret_key, &date, signer.region, "s3");
    let signature = signature(&key, &stamp, &scope, &canonical);
    let chunks = ChunkSigner::after(key, &stamp, &scope, &signature);
    let headers = vec![
        ("x-amz-date".into(), stamp),
        ("x-amz-content-sha256".into(), req.payload.to_owned()),
        (
            "authorization".into(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
                signer.access_key
            ),
        ),
    ];
    (headers, chunks)
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

    /// AWS's S3 examples of a chunked upload ("Transferring payload in multiple chunks",
    /// and the same with a trailing checksum): 64 KiB and 1 KiB of `a`, then the empty
    /// chunk (and the CRC32C trailer).
    #[test]
    fn chunks_and_trailers_are_signed_as_aws_signs_them() {
        let signer = Signer {
            access_key: "AKIAIOSFODNN7EXAMPLE",
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            region: "us-east-1",
        };
        let sha = |n: usize| Sha256::digest(vec![b'a'; n]).to_vec();
        let headers = [
            ("content-encoding".to_owned(), "aws-chunked".to_owned()),
            ("content-length".to_owned(), "66824".to_owned()),
            (
                "x-amz-decoded-content-length".to_owned(),
                "66560".to_owned(),
            ),
            (
                "x-amz-storage-class".to_owned(),
                "REDUCED_REDUNDANCY".to_owned(),
            ),
        ];
        let req = ToSign {
            method: "PUT",
            host: "s3.amazonaws.com",
            path: "/examplebucket/chunkObject.txt",
            query: "",
            payload: "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            headers: &headers,
        };
        let (out, mut chunks) = sign_streaming(&signer, &req, 1_369_353_600);
        assert!(out[2].1.ends_with(
            "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
        ));
        assert_eq!(
            chunks.chunk(&sha(65_536)),
            "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
        );
        assert_eq!(
            chunks.chunk(&sha(1024)),
            "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"
        );
        assert_eq!(
            chunks.chunk(&sha(0)),
            "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"
        );
        // With the trailer, from the seed AWS's example gives.
        let mut chunks = ChunkSigner {
            previous: "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e".into(),
            ..chunks
        };
        for want in [
            "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
            "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
            "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
        ]
        .into_iter()
        .zip([65_536, 1024, 0])
        .map(|(w, n)| (w, sha(n)))
        {
            assert_eq!(chunks.chunk(&want.1), want.0);
        }
        assert_eq!(
            chunks.trailer(b"x-amz-checksum-crc32c:sOO8/Q==\n"),
            "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"
        );
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
