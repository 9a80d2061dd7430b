//! How `oedd bench` signs its uploads: in each of the ways S3 clients sign theirs, since
//! what a server spends on a PUT depends on it. Over plain HTTP, minio-go (behind `mc`,
//! warp and many applications) streams the body as `aws-chunked` chunks of 64 KiB, each
//! signed, with a signed CRC32C trailer on multipart parts; boto3 and the aws CLI send the SHA-256 of
//! the whole body in the request's signature; over HTTPS clients leave the payload
//! unsigned (the AWS SDKs stream it with an unsigned checksum trailer). minio-go 7.4
//! signs a single PUT's chunks without a trailer, and adds the trailer to the parts of a
//! multipart upload when its client is made with `TrailingHeaders`, as mc and warp make
//! theirs (`benches/minio-load -show-signing` prints what it sends). The bench does the
//! work those clients do, per request, in the same pass over the bytes: a chunk's
//! SHA-256 and its CRC32C are computed as it is framed, and the object's bytes are never
//! copied (the body is a list of frames: each chunk's header, a window of the object,
//! the framing after it).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use oed_model::sigv4::ChunkSigner;
use sha2::{Digest, Sha256};

/// The chunk size S3 clients stream with (minio-go and the AWS SDKs): 64 KiB.
pub const CHUNK: usize = 64 * 1024;

/// The trailer's header, as S3 clients name it.
const TRAILER: &str = "x-amz-checksum-crc32c";

/// How a PUT's body is signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signing {
    /// `UNSIGNED-PAYLOAD`: the signature covers the headers only (clients over HTTPS).
    Unsigned,
    /// The body's SHA-256 in `x-amz-content-sha256`, computed before sending (boto3 and
    /// the aws CLI over HTTP).
    Sha256,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: `aws-chunked`, every chunk signed.
    Streaming,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: every chunk signed, then a signed
    /// `x-amz-checksum-crc32c` trailer (minio-go's default over HTTP).
    StreamingCrc32c,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: `aws-chunked` chunks unsigned, then an
    /// `x-amz-checksum-crc32c` trailer (the AWS SDKs over HTTPS).
    UnsignedCrc32c,
}

impl Signing {
    /// Every mode, in the order the benchmarks report them.
    pub const ALL: [Signing; 5] = [
        Signing::StreamingCrc32c,
        Signing::Streaming,
        Signing::Sha256,
        Signing::Unsigned,
        Signing::UnsignedCrc32c,
    ];

    /// The name `--signing` takes and the results give.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Signing::Unsigned => "unsigned",
            Signing::Sha256 => "sha256",
            Signing::Streaming => "streaming",
            Signing::StreamingCrc32c => "streaming-crc32c",
            Signing::UnsignedCrc32c => "unsigned-crc32c",
        }
    }

    /// The mode named `name`.
    ///
    /// # Errors
    /// A message listing the names, for any other.
    pub fn from_name(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "--signing {name:?} is not one of {} (or auto)",
                    names.join(", ")
                )
            })
    }

    /// What a client of this mode sends as `x-amz-content-sha256` (for [`Signing::Sha256`],
    /// the body's hash stands there).
    #[must_use]
    pub fn payload(self) -> &'static str {
        match self {
            Signing::Unsigned => "UNSIGNED-PAYLOAD",
            Signing::Sha256 => "the body's SHA-256",
            Signing::Streaming => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            Signing::StreamingCrc32c => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
            Signing::UnsignedCrc32c => "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        }
    }

    /// Which clients send their uploads so, for the report.
    #[must_use]
    pub fn clients(self) -> &'static str {
        match self {
            Signing::Unsigned => "S3 clients over HTTPS",
            Signing::Sha256 => "boto3 and the aws CLI over HTTP",
            Signing::Streaming => "minio-go (mc, warp) over HTTP for a single PUT",
            Signing::StreamingCrc32c => {
                "minio-go over HTTP for multipart parts, with TrailingHeaders as mc and warp set it"
            }
            Signing::UnsignedCrc32c => "the AWS SDKs over HTTPS",
        }
    }

    /// The mode of `auto` for an endpoint of `scheme`: what the most common client
    /// sends there (minio-go's streaming signature over HTTP, an unsigned payload over
    /// HTTPS).
    #[must_use]
    pub fn auto(scheme: &str) -> Self {
        if scheme == "https" {
            Signing::Unsigned
        } else {
            Signing::StreamingCrc32c
        }
    }

    fn chunked(self) -> bool {
        matches!(
            self,
            Signing::Streaming | Signing::StreamingCrc32c | Signing::UnsignedCrc32c
        )
    }

    fn signs_chunks(self) -> bool {
        matches!(self, Signing::Streaming | Signing::StreamingCrc32c)
    }

    fn trailer(self) -> bool {
        matches!(self, Signing::StreamingCrc32c | Signing::UnsignedCrc32c)
    }
}

/// A request's body as frames sent in turn: windows of the object and the framing between
/// them, none of them copied.
#[derive(Debug, Default)]
pub struct Frames {
    frames: VecDeque<Bytes>,
    remaining: u64,
}

impl Frames {
    /// A body of these frames.
    #[must_use]
    pub fn new(frames: VecDeque<Bytes>) -> Self {
        let remaining = frames.iter().map(|f| f.len() as u64).sum();
        Self { frames, remaining }
    }

    /// A body of one piece.
    #[must_use]
    pub fn one(bytes: Bytes) -> Self {
        Self::new(VecDeque::from([bytes]))
    }

    /// Bytes still to send: the `Content-Length`.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.remaining
    }

    /// Whether nothing is left to send.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = self.frames.pop_front();
        if let Some(f) = &next {
            self.remaining -= f.len() as u64;
        }
        Poll::Ready(next.map(|f| Ok(Frame::data(f))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// An upload's headers beyond the signature's, and what its signature declares, before
/// the request is signed.
#[derive(Debug)]
pub struct Prepared {
    /// `x-amz-content-sha256`.
    pub payload: String,
    /// Headers to send and sign (lower-case names), `content-length` among them.
    pub headers: Vec<(String, String)>,
}

/// The digits of `n` in hex.
fn hex_len(n: usize) -> u64 {
    let mut digits = 1;
    let mut n = n >> 4;
    while n > 0 {
        digits += 1;
        n >>= 4;
    }
    digits
}

/// The bytes of `body` once encoded for `signing`.
fn encoded_len(signing: Signing, body: usize) -> u64 {
    if !signing.chunked() {
        return body as u64;
    }
    // Each chunk: its size in hex, the signature extension when signed, CRLF, the data,
    // CRLF; the last chunk is empty.
    let sig = if signing.signs_chunks() {
        ";chunk-signature=".len() as u64 + 64
    } else {
        0
    };
    let full = body / CHUNK;
    let rest = body % CHUNK;
    let mut n = full as u64 * (hex_len(CHUNK) + sig + 2 + CHUNK as u64 + 2);
    if rest > 0 {
        n += hex_len(rest) + sig + 2 + rest as u64 + 2;
    }
    n += 1 + sig + 2;
    if signing.trailer() {
        // `name:base64 of 4 bytes` CRLF, the trailer's signature line when signed.
        n += (TRAILER.len() + 1 + 8 + 2) as u64;
        if signing.signs_chunks() {
            n += ("x-amz-trailer-signature:".len() + 64 + 2) as u64;
        }
    }
    // The blank line that ends the body.
    n + 2
}

/// The headers and declared payload of an upload of `body` signed as `signing`. For
/// [`Signing::Sha256`] this hashes the whole body, as those clients do before sending.
#[must_use]
pub fn prepare(signing: Signing, body: &[u8]) -> Prepared {
    let length = encoded_len(signing, body.len());
    let mut headers = vec![("content-length".to_owned(), length.to_string())];
    if signing.chunked() {
        headers.push(("content-encoding".into(), "aws-chunked".into()));
        headers.push((
            "x-amz-decoded-content-length".into(),
            body.len().to_string(),
        ));
        if signing.trailer() {
            headers.push(("x-amz-trailer".into(), TRAILER.into()));
        }
    }
    let payload = match signing {
        Signing::Sha256 => hex::encode(Sha256::digest(body)),
        other => other.payload().to_owned(),
    };
    Prepared { payload, headers }
}

/// The frames of `body` encoded for `signing`, the chunks signed by `chunks` (the
/// signer of the request's signature; unused unless the chunks are signed). Their
/// length is the `content-length` [`prepare`] gave.
#[must_use]
pub fn frames(signing: Signing, body: &Bytes, chunks: &mut ChunkSigner) -> Frames {
    if !signing.chunked() {
        return Frames::one(body.clone());
    }
    let crlf = Bytes::from_static(b"\r\n");
    let mut out = VecDeque::with_capacity(3 * (body.len() / CHUNK + 1) + 1);
    let mut crc = 0u32;
    let mut line = String::with_capacity(96);
    let head = |line: &mut String, data: &[u8], chunks: &mut ChunkSigner| {
        line.clear();
        let _ = write!(line, "{:x}", data.len());
        if signing.signs_chunks() {
            let _ = write!(
                line,
                ";chunk-signature={}",
                chunks.chunk(&Sha256::digest(data))
            );
        }
        line.push_str("\r\n");
        Bytes::copy_from_slice(line.as_bytes())
    };
    let mut at = 0;
    while at < body.len() {
        let end = (at + CHUNK).min(body.len());
        let data = body.slice(at..end);
        if signing.trailer() {
            crc = crc32c::crc32c_append(crc, &data);
        }
        out.push_back(head(&mut line, &data, chunks));
        out.push_back(data);
        out.push_back(crlf.clone());
        at = end;
    }
    let mut tail = String::from_utf8_lossy(&head(&mut line, &[], chunks)).into_owned();
    if signing.trailer() {
        let value = base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes());
        let canonical = format!("{TRAILER}:{value}\n");
        let _ = write!(tail, "{TRAILER}:{value}\r\n");
        if signing.signs_chunks() {
            let _ = write!(
                tail,
                "x-amz-trailer-signature:{}\r\n",
                chunks.trailer(canonical.as_bytes())
            );
        }
    }
    tail.push_str("\r\n");
    out.push_back(Bytes::from(tail));
    Frames::new(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oed_model::sigv4::{Signer, ToSign, sign_streaming};

    fn signer() -> ChunkSigner {
        let s = Signer {
            access_key: "A",
            secret_key: "S",
            region: "us-east-1",
        };
        let req = ToSign {
            method: "PUT",
            host: "h",
            path: "/b/k",
            query: "",
            payload: "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            headers: &[],
        };
        sign_streaming(&s, &req, 0).1
    }

    fn joined(f: &Frames) -> Vec<u8> {
        f.frames.iter().flat_map(|b| b.iter().copied()).collect()
    }

    /// The body S3 would decode: every chunk's data in order, each chunk's size line
    /// as it says, the trailer's CRC32C that of the data; and the length said beforehand.
    #[test]
    fn every_mode_frames_what_prepare_declared_and_decodes_to_the_body() {
        let data: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i * 7 % 251) as u8).collect();
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            let body = Bytes::copy_from_slice(&data[..len]);
            for mode in Signing::ALL {
                let prepared = prepare(mode, &body);
                let frames = frames(mode, &body, &mut signer());
                let declared: u64 = prepared.headers[0].1.parse().unwrap();
                assert_eq!(frames.len(), declared, "{} of {len}", mode.name());
                let wire = joined(&frames);
                if !mode.chunked() {
                    assert_eq!(wire, body, "{}", mode.name());
                    continue;
                }
                // Decode as a server would.
                let (mut at, mut decoded) = (0, Vec::new());
                loop {
                    let eol = at + wire[at..].windows(2).position(|w| w == b"\r\n").unwrap();
                    let line = std::str::from_utf8(&wire[at..eol]).unwrap();
                    let (size, ext) = line.split_once(';').unwrap_or((line, ""));
                    assert_eq!(ext.is_empty(), !mode.signs_chunks(), "{line}");
                    let size = usize::from_str_radix(size, 16).unwrap();
                    at = eol + 2;
                    if size == 0 {
                        break;
                    }
                    decoded.extend_from_slice(&wire[at..at + size]);
                    assert_eq!(&wire[at + size..at + size + 2], b"\r\n");
                    at += size + 2;
                }
                assert_eq!(decoded, body, "{} of {len}", mode.name());
                let rest = std::str::from_utf8(&wire[at..]).unwrap();
                assert!(rest.ends_with("\r\n"), "{rest:?}");
                if mode.trailer() {
                    let want = base64::engine::general_purpose::STANDARD
                        .encode(crc32c::crc32c(&body).to_be_bytes());
                    assert!(
                        rest.starts_with(&format!("x-amz-checksum-crc32c:{want}\r\n")),
                        "{rest:?}"
                    );
                    assert_eq!(
                        rest.contains("x-amz-trailer-signature:"),
                        mode.signs_chunks()
                    );
                } else {
                    assert_eq!(rest, "\r\n");
                }
            }
        }
    }

    #[test]
    fn headers_name_the_encoding_and_the_payload() {
        let body = b"hello";
        let p = prepare(Signing::Sha256, body);
        assert_eq!(p.payload, hex::encode(Sha256::digest(body)));
        assert_eq!(p.headers.len(), 1);
        let p = prepare(Signing::StreamingCrc32c, body);
        assert_eq!(p.payload, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER");
        let names: Vec<&str> = p.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "content-length",
                "content-encoding",
                "x-amz-decoded-content-length",
                "x-amz-trailer"
            ]
        );
        for m in Signing::ALL {
            assert_eq!(Signing::from_name(m.name()), Ok(m));
        }
        assert!(Signing::from_name("chunked").is_err());
        assert_eq!(Signing::auto("http"), Signing::StreamingCrc32c);
        assert_eq!(Signing::auto("https"), Signing::Unsigned);
    }
}
