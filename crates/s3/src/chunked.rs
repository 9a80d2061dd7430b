//! Uploads signed chunk by chunk (`aws-chunked` bodies with
//! `x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD`, or `...-TRAILER` with a
//! signed trailer: what minio-go, and so mc and warp, send over plain HTTP), checked here
//! before `s3s` sees them, so that their chunks can be hashed together.
//!
//! Each chunk's signature covers the signature before it and the chunk's SHA-256. Only the
//! signatures chain; the hashes do not depend on each other, so the chunks of a batch (up
//! to [`oed_ops::sha256::LANES`] of them, at most [`BATCH_BYTES`]) are hashed in SIMD
//! lanes at once ([`oed_ops::sha256::digest_pieces`], in the pieces they were received
//! in, not copied), then their signatures are checked in order, and only then are their
//! bytes passed on. `s3s` hashes and checks each chunk alone, as it comes.
//!
//! [`take_over`] checks the request's own signature (the seed) as `s3s` would. When it
//! matches, the request goes on with its body decoded and checked here, signed again with
//! the same key for what it now is: `UNSIGNED-PAYLOAD` with the decoded length, or, with a
//! trailer, `STREAMING-UNSIGNED-PAYLOAD-TRAILER` (the chunks framed again without
//! signatures, the trailer checked here and passed on for its checksum). `s3s` then
//! checks that signature, the date and the key's rights as for any request. A request
//! this does not take (another form of signature, a seed it does not reproduce, an
//! unknown key) goes on untouched, and `s3s` answers it as before.
//!
//! A batch takes only chunks already arriving (a slow upload's bytes are not held back
//! waiting for more) and stops taking chunks once it holds [`BATCH_BYTES`]. A chunk that
//! fails its signature fails the body with `SignatureMismatch` before any byte of its
//! batch is passed on, so nothing of the upload is stored.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use bytes::{Buf, Bytes};
use futures_util::stream::{self, BoxStream};
use futures_util::{FutureExt as _, StreamExt};
use http::header::{AUTHORIZATION, CONTENT_LENGTH, HeaderValue, TRANSFER_ENCODING};
use s3s::auth::S3Auth as _;

use crate::access::KeyAuth;
use oed_model::sigv4::{
    ChunkSigner, canonical_query, canonical_request, header_values, signature, signing_key,
};

/// Chunks signed, no trailer.
const SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
/// Chunks signed, then a signed trailer.
const SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
/// What a request with a trailer is passed on as.
const UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// The most bytes of a chunk's header line (its size and signature), as `s3s` allows.
const MAX_META: usize = 1024;

/// The most bytes of the trailer, as `s3s` allows.
const MAX_TRAILER: usize = 16 * 1024;

/// A batch takes no more chunks once it holds this many bytes (16 chunks of 64 KiB, the
/// size S3 clients sign in), nor more than [`oed_ops::sha256::LANES`] chunks. One chunk
/// larger than this is a batch of its own, held whole as `s3s` holds it.
pub const BATCH_BYTES: usize = 1 << 20;

/// What [`take_over`] needs: the keys' secrets and the region signatures must name.
pub struct Streaming {
    keys: KeyAuth,
    region: String,
}

impl std::fmt::Debug for Streaming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Streaming {
    /// For the secrets of `keys` (those [`crate::service`] checks signatures with),
    /// signing for `region`.
    #[must_use]
    pub fn new(keys: KeyAuth, region: &str) -> Arc<Self> {
        Arc::new(Self {
            keys,
            region: region.to_owned(),
        })
    }
}

/// The middleware: a `PUT` whose body is signed chunk by chunk goes on decoded and
/// checked here (the module's text); every other request goes on as it came.
pub async fn take_over(State(s): State<Arc<Streaming>>, req: Request, next: Next) -> Response {
    let signed = req.method() == http::Method::PUT
        && !req.uri().path().starts_with("/_oed/")
        && req
            .headers()
            .get("x-amz-content-sha256")
            .is_some_and(|v| v == SIGNED || v == SIGNED_TRAILER);
    if !signed {
        return next.run(req).await;
    }
    // The parts, not the request: its body is not `Sync`, and this future must be `Send`.
    let plan = s.prepare(req.method(), req.uri(), req.headers()).await;
    let req = match plan {
        Some(plan) => plan.apply(req),
        None => req,
    };
    next.run(req).await
}

/// The parts of a SigV4 `Authorization` header.
#[derive(Debug, PartialEq, Eq)]
struct Authorization<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: &'a str,
    signature: &'a str,
}

/// `AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE/aws4_request,
/// SignedHeaders=a;b, Signature=HEX`, or `None` for anything else.
fn authorization(v: &str) -> Option<Authorization<'_>> {
    let rest = v.strip_prefix("AWS4-HMAC-SHA256 ")?;
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in rest.split(',').map(str::trim) {
        let (slot, value) = if let Some(c) = part.strip_prefix("Credential=") {
            (&mut credential, c)
        } else if let Some(h) = part.strip_prefix("SignedHeaders=") {
            (&mut signed_headers, h)
        } else if let Some(s) = part.strip_prefix("Signature=") {
            (&mut signature, s)
        } else {
            return None;
        };
        // Each part once: a header that names one twice is left to `s3s`.
        if slot.replace(value).is_some() {
            return None;
        }
    }
    let mut c = credential?.split('/');
    let (access_key, date, region, service) = (c.next()?, c.next()?, c.next()?, c.next()?);
    if c.next()? != "aws4_request" || c.next().is_some() {
        return None;
    }
    Some(Authorization {
        access_key,
        date,
        region,
        service,
        signed_headers: signed_headers?,
        signature: signature?,
    })
}

/// SigV4's canonical request of a request with these parts, signing the headers named in
/// `signed` (as the client listed them) and declaring `payload`; `None` when a signed
/// header is missing or not text, or the query is not percent-encoded UTF-8.
fn canonical(
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    signed: &str,
    payload: &str,
) -> Option<String> {
    let mut pairs = Vec::new();
    for kv in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
    {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        pairs.push((oed_model::uri::decode(k)?, oed_model::uri::decode(v)?));
    }
    let mut values = Vec::new();
    for name in signed.split(';') {
        let texts: Vec<&str> = headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().ok())
            .collect::<Option<_>>()?;
        if texts.is_empty() {
            return None;
        }
        values.push((name, header_values(texts)));
    }
    Some(canonical_request(
        method.as_str(),
        uri.path(),
        &canonical_query(&pairs),
        values,
        signed,
        payload,
    ))
}

/// Whether two signatures are the same, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    a.ct_eq(b).into()
}

/// What [`take_over`] does to a request whose seed signature it reproduced.
struct Plan {
    trailer: bool,
    decoded_len: u64,
    /// The headers it goes on with, signed again.
    headers: http::HeaderMap,
    signer: ChunkSigner,
}

impl Streaming {
    /// The plan for a request of these parts, or `None` when it is to go on untouched
    /// (the module's text).
    async fn prepare(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        h: &http::HeaderMap,
    ) -> Option<Plan> {
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
        let payload = text("x-amz-content-sha256")?;
        let trailer = payload == SIGNED_TRAILER;
        let auth = authorization(text(AUTHORIZATION.as_str())?)?;
        let stamp = text("x-amz-date")?;
        if auth.service != "s3"
            || auth.region != self.region
            || !stamp.starts_with(auth.date)
            || (trailer && h.get("x-amz-trailer").is_none())
            || h.get_all(AUTHORIZATION).iter().count() != 1
        {
            return None;
        }
        let decoded_len: u64 = text("x-amz-decoded-content-length")?.parse().ok()?;
        let secret = self.keys.get_secret_key(auth.access_key).await.ok()?;
        let key = signing_key(secret.expose(), auth.date, auth.region, auth.service);
        let scope = format!(
            "{}/{}/{}/aws4_request",
            auth.date, auth.region, auth.service
        );
        let seed = signature(
            &key,
            stamp,
            &scope,
            &canonical(method, uri, h, auth.signed_headers, payload)?,
        );
        if !same(seed.as_bytes(), auth.signature.as_bytes()) {
            tracing::debug!(
                key = auth.access_key,
                "aws-chunked upload left to s3s: its seed signature is not reproduced here"
            );
            return None;
        }
        // The request as it goes on: what its body now is, signed again with the same key.
        let passed = if trailer {
            UNSIGNED_TRAILER
        } else {
            "UNSIGNED-PAYLOAD"
        };
        let mut headers = h.clone();
        headers.insert("x-amz-content-sha256", HeaderValue::from_static(passed));
        if !trailer {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(decoded_len));
            headers.remove(TRANSFER_ENCODING);
        }
        let again = signature(
            &key,
            stamp,
            &scope,
            &canonical(method, uri, &headers, auth.signed_headers, passed)?,
        );
        let authorization = HeaderValue::from_str(&format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={}, Signature={again}",
            auth.access_key, auth.signed_headers
        ))
        .ok()?;
        headers.insert(AUTHORIZATION, authorization);
        tracing::debug!(
            key = auth.access_key,
            trailer,
            "aws-chunked upload checked here, its chunks in batches"
        );
        Some(Plan {
            trailer,
            decoded_len,
            headers,
            signer: ChunkSigner::after(key, stamp, &scope, &seed),
        })
    }
}

impl Plan {
    fn apply(self, req: Request) -> Request {
        let (mut parts, body) = req.into_parts();
        parts.headers = self.headers;
        let body = decode(
            body.into_data_stream()
                .map(|r| r.map_err(|e| e.to_string()))
                .boxed(),
            self.signer,
            self.decoded_len,
            self.trailer,
        );
        Request::from_parts(parts, Body::from_stream(body))
    }
}

/// Why an aws-chunked body was refused. The message names the kind as `s3s` names its
/// own (`SignatureMismatch`, `FormatError`, `Incomplete`), which the write path reads
/// (`object::body_error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkError(String);

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "aws-chunked: {}", self.0)
    }
}

impl std::error::Error for ChunkError {}

fn format_error(what: &str) -> ChunkError {
    ChunkError(format!("FormatError: {what}"))
}

fn incomplete() -> ChunkError {
    ChunkError("Incomplete: the body ended before its last chunk".into())
}

/// The body's bytes as they are checked: each batch of chunks once its signatures match,
/// then (with a trailer) the chunks framed again without signatures and the trailer.
pub fn decode(
    body: BoxStream<'static, Result<Bytes, String>>,
    signer: ChunkSigner,
    decoded_len: u64,
    trailer: bool,
) -> impl futures_util::Stream<Item = Result<Bytes, ChunkError>> + Send + 'static {
    let decoder = Decoder {
        body,
        rest: Bytes::new(),
        signer,
        remaining: decoded_len,
        trailer,
        done: false,
    };
    stream::unfold(decoder, |mut d| async move {
        match d.batch().await {
            Ok(Some(out)) => Some((Ok(out), d)),
            Ok(None) => None,
            Err(e) => {
                d.done = true;
                Some((Err(e), d))
            }
        }
    })
    .flat_map(|r| match r {
        Ok(out) => stream::iter(out.into_iter().map(Ok)).left_stream(),
        Err(e) => stream::iter([Err(e)]).right_stream(),
    })
}

struct Decoder {
    body: BoxStream<'static, Result<Bytes, String>>,
    /// Received bytes not yet taken.
    rest: Bytes,
    signer: ChunkSigner,
    /// Decoded bytes still to come.
    remaining: u64,
    trailer: bool,
    done: bool,
}

impl Decoder {
    /// The next piece of the body into `rest`; `false` at its end.
    async fn more(&mut self) -> Result<bool, ChunkError> {
        let next = self.body.next().await;
        self.took(next)
    }

    /// Whether more of the body is at hand without waiting: what `rest` holds, or a
    /// piece the body has ready (taken into `rest`).
    fn at_hand(&mut self) -> Result<bool, ChunkError> {
        if !self.rest.is_empty() {
            return Ok(true);
        }
        match self.body.next().now_or_never() {
            None => Ok(false),
            Some(next) => self.took(next),
        }
    }

    fn took(&mut self, next: Option<Result<Bytes, String>>) -> Result<bool, ChunkError> {
        match next {
            None => Ok(false),
            Some(Ok(b)) => {
                self.rest = b;
                Ok(true)
            }
            Some(Err(e)) => Err(ChunkError(format!("Underlying: {e}"))),
        }
    }

    /// A chunk's header line without its CRLF.
    async fn line(&mut self) -> Result<Vec<u8>, ChunkError> {
        let mut line = Vec::new();
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.rest) {
                line.extend_from_slice(&self.rest[..=i]);
                self.rest.advance(i + 1);
                break;
            }
            line.extend_from_slice(&self.rest);
            self.rest.clear();
            if line.len() > MAX_META {
                break;
            }
            if !self.more().await? {
                return Err(incomplete());
            }
        }
        if line.len() > MAX_META {
            return Err(ChunkError(format!(
                "ChunkMetaTooLarge: a chunk's header line is over {MAX_META} bytes"
            )));
        }
        line.strip_suffix(b"\r\n")
            .map(<[u8]>::to_vec)
            .ok_or_else(|| format_error("a chunk's header line does not end in CRLF"))
    }

    /// `n` bytes of data, then the CRLF after them (not after the empty last chunk), in
    /// the pieces they were received in (not copied).
    async fn data(&mut self, n: usize) -> Result<Vec<Bytes>, ChunkError> {
        let mut pieces: Vec<Bytes> = Vec::new();
        if n == 0 {
            return Ok(pieces);
        }
        let mut need = n;
        while need > 0 {
            if self.rest.is_empty() && !self.more().await? {
                return Err(incomplete());
            }
            let take = need.min(self.rest.len());
            pieces.push(self.rest.split_to(take));
            need -= take;
        }
        for &b in b"\r\n" {
            if self.rest.is_empty() && !self.more().await? {
                return Err(incomplete());
            }
            if self.rest[0] != b {
                return Err(format_error("a chunk's data is not followed by CRLF"));
            }
            self.rest.advance(1);
        }
        Ok(pieces)
    }

    /// Everything after the last chunk's header line, to the body's end.
    async fn tail(&mut self) -> Result<Vec<u8>, ChunkError> {
        let mut tail = self.rest.to_vec();
        self.rest.clear();
        while tail.len() <= MAX_TRAILER && self.more().await? {
            tail.extend_from_slice(&self.rest);
            self.rest.clear();
        }
        if tail.len() > MAX_TRAILER {
            return Err(ChunkError(format!(
                "TrailersTooLarge: the trailer is over {MAX_TRAILER} bytes"
            )));
        }
        Ok(tail)
    }

    /// The next batch of checked bytes to pass on; `None` after the last.
    async fn batch(&mut self) -> Result<Option<Vec<Bytes>>, ChunkError> {
        if self.done {
            return Ok(None);
        }
        let mut chunks: Vec<Vec<Bytes>> = Vec::new();
        let mut signatures: Vec<[u8; 64]> = Vec::new();
        let mut bytes = 0;
        let mut last = false;
        while chunks.len() < oed_ops::sha256::LANES && bytes < BATCH_BYTES {
            let (size, sig) = meta(&self.line().await?)?;
            if size as u64 > self.remaining {
                return Err(format_error(
                    "the chunks hold more bytes than x-amz-decoded-content-length",
                ));
            }
            let data = self.data(size).await?;
            self.remaining -= size as u64;
            bytes += size;
            chunks.push(data);
            signatures.push(sig);
            if size == 0 {
                last = true;
                break;
            }
            // A batch takes only chunks already arriving: bytes of a slow upload are
            // not held back waiting for more (its rate is measured as they pass on).
            if !self.at_hand()? {
                break;
            }
        }
        let pieces: Vec<Vec<&[u8]>> = chunks
            .iter()
            .map(|c| c.iter().map(Bytes::as_ref).collect())
            .collect();
        let refs: Vec<&[&[u8]]> = pieces.iter().map(Vec::as_slice).collect();
        for (digest, sig) in oed_ops::sha256::digest_pieces(&refs)
            .iter()
            .zip(&signatures)
        {
            if !same(self.signer.chunk(digest).as_bytes(), sig) {
                return Err(ChunkError(
                    "SignatureMismatch: a chunk's signature does not match its bytes".into(),
                ));
            }
        }
        let mut out = Vec::with_capacity(chunks.iter().map(|c| c.len() + 2).sum::<usize>() + 1);
        if last {
            chunks.pop();
            if self.remaining != 0 {
                return Err(format_error(
                    "the chunks hold fewer bytes than x-amz-decoded-content-length",
                ));
            }
        }
        for c in chunks {
            if self.trailer {
                let len: usize = c.iter().map(Bytes::len).sum();
                out.push(Bytes::from(format!("{len:x}\r\n")));
                out.extend(c);
                out.push(Bytes::from_static(b"\r\n"));
            } else {
                out.extend(c);
            }
        }
        if last {
            self.done = true;
            let tail = self.tail().await?;
            if self.trailer {
                out.push(Bytes::from(self.trailer_checked(&tail)?));
            } else if !(tail.is_empty() || tail == b"\r\n") {
                return Err(format_error("bytes follow the last chunk"));
            }
        }
        Ok(Some(out))
    }

    /// The trailer `tail` checked against its signature, framed again as the last chunk
    /// of an unsigned body with its lines (the signature's own left out).
    fn trailer_checked(&mut self, tail: &[u8]) -> Result<Vec<u8>, ChunkError> {
        let mut entries: Vec<(String, String)> = Vec::new();
        let mut provided = None;
        for line in tail.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let line = std::str::from_utf8(line)
                .map_err(|_| format_error("a trailer line is not UTF-8"))?;
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format_error("a trailer line has no ':'"))?;
            let (name, value) = (name.to_ascii_lowercase(), value.trim().to_owned());
            if name == "x-amz-trailer-signature" {
                provided = Some(value);
            } else {
                entries.push((name, value));
            }
        }
        // By name, in the order sent where one repeats, as `s3s` and the clients sort.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut canonical = String::new();
        for (n, v) in &entries {
            let _ = writeln!(canonical, "{n}:{v}");
        }
        let provided =
            provided.ok_or_else(|| format_error("the trailer has no x-amz-trailer-signature"))?;
        if !same(
            self.signer.trailer(canonical.as_bytes()).as_bytes(),
            provided.as_bytes(),
        ) {
            return Err(ChunkError(
                "SignatureMismatch: the trailer's signature does not match it".into(),
            ));
        }
        let mut framed = String::from("0\r\n");
        for (n, v) in &entries {
            let _ = write!(framed, "{n}:{v}\r\n");
        }
        framed.push_str("\r\n");
        Ok(framed.into_bytes())
    }
}

/// A chunk's header line: its size (hex) and `;chunk-signature=` with 64 hex digits.
fn meta(line: &[u8]) -> Result<(usize, [u8; 64]), ChunkError> {
    let bad = || format_error("a chunk's header line is not SIZE;chunk-signature=SIGNATURE");
    let line = std::str::from_utf8(line).map_err(|_| bad())?;
    let (size, sig) = line.split_once(";chunk-signature=").ok_or_else(bad)?;
    if size.is_empty() || size.len() > 8 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let size = usize::from_str_radix(size, 16).map_err(|_| bad())?;
    let sig: [u8; 64] = sig.as_bytes().try_into().map_err(|_| bad())?;
    Ok((size, sig))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oed_model::sigv4::{Signer, ToSign, sign_streaming};

    const SIGNER: Signer<'static> = Signer {
        access_key: "AKIDEXAMPLE",
        secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        region: "us-east-1",
    };

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// A body of `chunk`-byte chunks signed by `chunks`, with a CRC32C trailer when
    /// `trailer`.
    fn body(mut chunks: ChunkSigner, bytes: &[u8], chunk: usize, trailer: bool) -> Vec<u8> {
        use sha2::Digest as _;
        let mut out = Vec::new();
        for c in bytes.chunks(chunk).chain([&[][..]]) {
            let sig = chunks.chunk(&sha2::Sha256::digest(c)).to_owned();
            out.extend_from_slice(format!("{:x};chunk-signature={sig}\r\n", c.len()).as_bytes());
            if !c.is_empty() {
                out.extend_from_slice(c);
                out.extend_from_slice(b"\r\n");
            }
        }
        if trailer {
            let canonical = "x-amz-checksum-crc32c:AAAAAA==\n";
            let sig = chunks.trailer(canonical.as_bytes()).to_owned();
            out.extend_from_slice(
                format!("x-amz-checksum-crc32c:AAAAAA==\r\nx-amz-trailer-signature:{sig}\r\n\r\n")
                    .as_bytes(),
            );
        } else {
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    fn signer() -> ChunkSigner {
        let req = ToSign {
            method: "PUT",
            host: "127.0.0.1",
            path: "/b/k",
            query: "",
            payload: SIGNED,
            headers: &[],
        };
        sign_streaming(&SIGNER, &req, 1_700_000_000).1
    }

    /// The body fed in `piece`-byte pieces, decoded.
    async fn run(
        raw: Vec<u8>,
        piece: usize,
        len: u64,
        trailer: bool,
    ) -> Result<Vec<u8>, ChunkError> {
        let pieces: Vec<Result<Bytes, String>> = raw
            .chunks(piece)
            .map(|p| Ok(Bytes::copy_from_slice(p)))
            .collect();
        let mut s = std::pin::pin!(decode(stream::iter(pieces).boxed(), signer(), len, trailer));
        let mut out = Vec::new();
        while let Some(b) = s.next().await {
            out.extend_from_slice(&b?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn signed_chunks_come_out_as_sent_whatever_the_pieces() {
        for (len, chunk) in [
            (0, 65_536),
            (1, 65_536),
            (1_000_000, 65_536),
            (300_000, 8192),
        ] {
            let bytes = data(len);
            for piece in [1, 7, 4096, 65_536 + 90, 1 << 22] {
                let raw = body(signer(), &bytes, chunk, false);
                let out = run(raw, piece, len as u64, false).await;
                assert_eq!(
                    out.as_deref(),
                    Ok(&bytes[..]),
                    "{len} in {chunk}, pieces {piece}"
                );
            }
        }
    }

    #[tokio::test]
    async fn with_a_trailer_the_body_is_framed_again_unsigned() {
        let bytes = data(200_000);
        let raw = body(signer(), &bytes, 65_536, true);
        let out = run(raw, 10_000, 200_000, true).await.expect("checked");
        let mut want = Vec::new();
        for c in bytes.chunks(65_536) {
            want.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            want.extend_from_slice(c);
            want.extend_from_slice(b"\r\n");
        }
        want.extend_from_slice(b"0\r\nx-amz-checksum-crc32c:AAAAAA==\r\n\r\n");
        assert_eq!(out, want);
    }

    #[tokio::test]
    async fn a_changed_byte_or_signature_fails_before_its_batch_is_passed_on() {
        let bytes = data(40 * 65_536);
        let raw = body(signer(), &bytes, 65_536, false);
        // A byte of chunk 20 (the second batch): the first batch's bytes pass, none after.
        let mut changed = raw.clone();
        let at = 20 * (65_536 + 90) + 88 + 100; // each chunk: 88 bytes of header line, CRLF after
        changed[at] ^= 1;
        let pieces: Vec<Result<Bytes, String>> = vec![Ok(Bytes::from(changed))];
        let mut s = std::pin::pin!(decode(
            stream::iter(pieces).boxed(),
            signer(),
            40 * 65_536,
            false
        ));
        let mut passed = 0;
        let mut failed = None;
        while let Some(b) = s.next().await {
            match b {
                Ok(b) => passed += b.len(),
                Err(e) => failed = Some(e),
            }
        }
        assert_eq!(passed, 16 * 65_536, "only the first batch");
        assert!(
            failed
                .expect("refused")
                .to_string()
                .contains("SignatureMismatch")
        );
        // A signature's digit.
        let mut changed = raw.clone();
        let first = raw.iter().position(|&b| b == b'=').expect("a signature") + 1;
        changed[first] = if changed[first] == b'0' { b'1' } else { b'0' };
        let e = run(changed, 4096, 40 * 65_536, false)
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("SignatureMismatch"), "{e}");
        // The trailer's value.
        let mut raw = body(signer(), &bytes[..1000], 65_536, true);
        let value = raw
            .windows(8)
            .position(|w| w == b"AAAAAA==")
            .expect("the trailer");
        raw[value + 5] = b'B';
        let e = run(raw, 4096, 1000, true).await.expect_err("refused");
        assert!(e.to_string().contains("SignatureMismatch"), "{e}");
    }

    #[tokio::test]
    async fn broken_bodies_are_refused_with_what_was_wrong() {
        let bytes = data(100_000);
        let raw = body(signer(), &bytes, 65_536, false);
        for (name, raw, len, want) in [
            ("cut short", raw[..70_000].to_vec(), 100_000, "Incomplete"),
            ("declared longer", raw.clone(), 100_001, "fewer bytes"),
            ("declared shorter", raw.clone(), 99_999, "more bytes"),
            (
                "no signature",
                b"10\r\n0123456789abcdef\r\n".to_vec(),
                16,
                "FormatError",
            ),
            ("a line too long", vec![b'1'; 5000], 16, "ChunkMetaTooLarge"),
            (
                "bytes after the end",
                [raw.clone(), b"junk".to_vec()].concat(),
                100_000,
                "follow",
            ),
        ] {
            let e = run(raw, 1000, len, false).await.expect_err(name);
            assert!(e.to_string().contains(want), "{name}: {e}");
        }
    }

    #[test]
    fn authorization_headers_are_read_as_sigv4_writes_them() {
        let a = authorization(
            "AWS4-HMAC-SHA256 Credential=AK/20250101/us-east-1/s3/aws4_request, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=abc",
        )
        .expect("parsed");
        assert_eq!(
            a,
            Authorization {
                access_key: "AK",
                date: "20250101",
                region: "us-east-1",
                service: "s3",
                signed_headers: "host;x-amz-content-sha256;x-amz-date",
                signature: "abc",
            }
        );
        for bad in [
            "AWS4-HMAC-SHA256 Credential=AK/20250101/us-east-1/s3, SignedHeaders=host, Signature=a",
            "AWS4-HMAC-SHA256 Credential=AK/20250101/us-east-1/s3/aws4_request, Signature=a",
            "AWS AK:sig",
        ] {
            assert_eq!(authorization(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_canonical_request_is_the_one_the_client_signed() {
        // A request signed by OED's own client signer: its signature is reproduced.
        let req = ToSign {
            method: "PUT",
            host: "127.0.0.1:9000",
            path: "/bucket/a%20key",
            query: "partNumber=1&uploadId=x%2By",
            payload: SIGNED,
            headers: &[("x-amz-decoded-content-length".into(), "5".into())],
        };
        let (signed, _) = sign_streaming(&SIGNER, &req, 1_700_000_000);
        let mut headers = http::HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("127.0.0.1:9000"));
        headers.insert(
            "x-amz-decoded-content-length",
            HeaderValue::from_static("5"),
        );
        for (n, v) in &signed {
            headers.insert(
                http::header::HeaderName::from_bytes(n.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        let auth = authorization(headers[AUTHORIZATION].to_str().expect("text")).expect("parsed");
        let uri: http::Uri = "/bucket/a%20key?uploadId=x%2By&partNumber=1"
            .parse()
            .expect("uri");
        let c = canonical(
            &http::Method::PUT,
            &uri,
            &headers,
            auth.signed_headers,
            SIGNED,
        )
        .expect("canonical");
        let key = signing_key(SIGNER.secret_key, auth.date, auth.region, "s3");
        let scope = format!("{}/{}/s3/aws4_request", auth.date, auth.region);
        let stamp = headers["x-amz-date"].to_str().expect("text");
        assert_eq!(signature(&key, stamp, &scope, &c), auth.signature);
    }
}
