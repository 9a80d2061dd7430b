//! The shard file format (specified byte by byte in `FORMAT.md`): a 64-byte header, then
//! one frame per stripe holding this shard's chunk and its CRC32C. The writer and reader
//! stream over `std::io` and hold one chunk at a time. The reader checks the header and
//! every chunk, says which stripe is bad, and never panics or allocates more than one
//! maximum-size chunk, whatever bytes it is given.

use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::error::{Error, Result};
use crate::layout::{Layout, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE};

/// First eight bytes of every shard file.
pub const MAGIC: [u8; 8] = *b"OEDSHARD";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Header length in bytes.
pub const HEADER_LEN: usize = 64;
/// Bytes of checksum after each chunk.
pub const CRC_LEN: usize = 4;

/// Which code produced the parity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CodeId {
    /// Systematic Reed-Solomon over GF(2^8), polynomial 0x11D, Vandermonde-derived matrix
    /// as in the `reed-solomon-erasure` crate ([`crate::Codec`]).
    ReedSolomonVandermonde,
}

impl CodeId {
    fn to_byte(self) -> u8 {
        match self {
            CodeId::ReedSolomonVandermonde => 1,
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(CodeId::ReedSolomonVandermonde),
            _ => None,
        }
    }
}

/// The header of a shard file: which object version, which shard, and how it was coded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardHeader {
    /// The object version this shard belongs to (an opaque 128-bit id).
    pub version_id: u128,
    /// Which shard of the stripe this file holds (`0..k` data, `k..k+m` parity).
    pub shard_index: u16,
    /// k, m and chunk size.
    pub layout: Layout,
    /// Length of the whole object in bytes.
    pub object_len: u64,
    /// The code that produced the parity.
    pub code: CodeId,
}

/// CRC32C of one frame: the chunk's bytes followed by the stripe number as 8 little-endian
/// bytes, so a frame copied to the wrong place in a file fails its check too. Hardware
/// CRC instructions are used where the CPU has them.
#[must_use]
pub fn frame_crc(stripe: u64, chunk: &[u8]) -> u32 {
    bind_stripe(crc32c::crc32c(chunk), stripe)
}

/// [`frame_crc`] of a chunk that is in pieces (in order), without joining them.
#[must_use]
pub fn frame_crc_pieces<P: AsRef<[u8]>>(stripe: u64, pieces: &[P]) -> u32 {
    let crc = pieces
        .iter()
        .fold(0, |crc, p| crc32c::crc32c_append(crc, p.as_ref()));
    bind_stripe(crc, stripe)
}

/// Appending `len` bytes to a CRC32C, as a linear map of the CRC: for any `B` of `len`
/// bytes, `crc32c(A ‖ B)` is `shift(crc32c(A)) ^ crc32c(B)`. Made once for a length that
/// recurs (a layout's whole chunk), it joins two CRCs with four table lookups where
/// `crc32c::crc32c_combine` squares a 32 x 32 bit matrix some twenty times.
pub struct Crc32cShift {
    len: usize,
    table: Box<[[u32; 256]; 4]>,
}

impl std::fmt::Debug for Crc32cShift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crc32cShift")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Crc32cShift {
    /// The shift by `len` bytes (32 joins of the slow kind, once).
    #[must_use]
    pub fn new(len: usize) -> Self {
        let basis: Vec<u32> = (0..32)
            .map(|bit| crc32c::crc32c_combine(1 << bit, 0, len))
            .collect();
        let mut table = Box::new([[0u32; 256]; 4]);
        for (byte, row) in table.iter_mut().enumerate() {
            for (v, entry) in row.iter_mut().enumerate() {
                *entry = (0..8)
                    .filter(|b| v >> b & 1 == 1)
                    .fold(0, |x, b| x ^ basis[8 * byte + b]);
            }
        }
        Self { len, table }
    }

    /// The bytes this shift appends.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it appends nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `crc32c(A ‖ B)` from `a = crc32c(A)` and `b = crc32c(B)`, `B` of [`Self::len`]
    /// bytes.
    #[must_use]
    pub fn join(&self, a: u32, b: u32) -> u32 {
        let t = &self.table;
        let [a0, a1, a2, a3] = a.to_le_bytes();
        t[0][a0 as usize] ^ t[1][a1 as usize] ^ t[2][a2 as usize] ^ t[3][a3 as usize] ^ b
    }
}

/// Completes a frame's CRC32C from the CRC32C of its chunk (for chunks checked in
/// pieces, as [`StreamVerifier`] does, or whose plain CRC32C is wanted too, as a write's
/// S3 checksum is).
#[must_use]
pub fn bind_stripe(chunk_crc: u32, stripe: u64) -> u32 {
    crc32c::crc32c_append(chunk_crc, &stripe.to_le_bytes())
}

impl ShardHeader {
    /// A header, checked like a decoded one.
    ///
    /// # Errors
    /// [`Error::InvalidHeader`] when `shard_index` is not below `k + m` or the file would be
    /// longer than 2^64 bytes.
    pub fn new(
        version_id: u128,
        shard_index: u16,
        layout: Layout,
        object_len: u64,
    ) -> Result<Self> {
        let h = Self {
            version_id,
            shard_index,
            layout,
            object_len,
            code: CodeId::ReedSolomonVandermonde,
        };
        h.check()?;
        Ok(h)
    }

    fn check(&self) -> Result<()> {
        if usize::from(self.shard_index) >= self.layout.total() {
            return Err(Error::InvalidHeader {
                field: "shard_index",
                reason: format!(
                    "{} is not below k + m = {}",
                    self.shard_index,
                    self.layout.total()
                ),
            });
        }
        if self.checked_file_len().is_none() {
            return Err(Error::InvalidHeader {
                field: "object_len",
                reason: format!(
                    "{} bytes makes the shard file longer than 2^64 bytes",
                    self.object_len
                ),
            });
        }
        Ok(())
    }

    /// The 64 header bytes.
    #[must_use]
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[10] = self.code.to_byte();
        b[11] = self.layout.chunk_size().trailing_zeros() as u8;
        b[12..14].copy_from_slice(&(self.layout.k() as u16).to_le_bytes());
        b[14..16].copy_from_slice(&(self.layout.m() as u16).to_le_bytes());
        b[16..18].copy_from_slice(&self.shard_index.to_le_bytes());
        b[24..32].copy_from_slice(&self.object_len.to_le_bytes());
        b[32..48].copy_from_slice(&self.version_id.to_le_bytes());
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and checks a header. Checks, in order: magic, version, checksum, then each
    /// field's range, so garbage is reported as "not a shard file" rather than as a field.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::HeaderChecksum`] or
    /// [`Error::InvalidHeader`] naming the field.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self> {
        if b[0..8] != MAGIC {
            return Err(Error::BadMagic);
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion { version });
        }
        let stored = u32::from_le_bytes([b[60], b[61], b[62], b[63]]);
        let computed = crc32c::crc32c(&b[..60]);
        if stored != computed {
            return Err(Error::HeaderChecksum { stored, computed });
        }
        let invalid = |field, reason: String| Error::InvalidHeader { field, reason };
        let code = CodeId::from_byte(b[10])
            .ok_or_else(|| invalid("code_id", format!("unknown code {}", b[10])))?;
        let log2 = b[11];
        if !(MIN_CHUNK_SIZE.trailing_zeros()..=MAX_CHUNK_SIZE.trailing_zeros())
            .contains(&log2.into())
        {
            return Err(invalid(
                "chunk_size_log2",
                format!("{log2} is out of range 12..=24"),
            ));
        }
        if b[18..24].iter().chain(&b[48..60]).any(|&x| x != 0) {
            return Err(invalid("reserved", "reserved bytes are not zero".into()));
        }
        let k = u16::from_le_bytes([b[12], b[13]]);
        let m = u16::from_le_bytes([b[14], b[15]]);
        let layout = Layout::new(k.into(), m.into(), 1 << log2)
            .map_err(|e| invalid("k/m", e.to_string()))?;
        let mut len = [0u8; 8];
        len.copy_from_slice(&b[24..32]);
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[32..48]);
        let h = Self {
            version_id: u128::from_le_bytes(id),
            shard_index: u16::from_le_bytes([b[16], b[17]]),
            layout,
            object_len: u64::from_le_bytes(len),
            code,
        };
        h.check()?;
        Ok(h)
    }

    /// Stripes (and so frames) in the file.
    #[must_use]
    pub fn stripe_count(&self) -> u64 {
        self.layout.stripe_count(self.object_len)
    }

    /// Length of this shard's chunk in stripe `stripe` (0 past the end).
    #[must_use]
    pub fn chunk_len(&self, stripe: u64) -> usize {
        self.layout
            .stripe(self.object_len, stripe)
            .map_or(0, |s| s.chunk_len)
    }

    /// File offset of the frame of stripe `stripe` (every earlier stripe is full).
    #[must_use]
    pub fn frame_offset(&self, stripe: u64) -> u64 {
        HEADER_LEN as u64 + stripe * (self.layout.chunk_size() + CRC_LEN) as u64
    }

    /// Length of the whole shard file.
    #[must_use]
    pub fn file_len(&self) -> u64 {
        self.checked_file_len().unwrap_or(u64::MAX)
    }

    fn checked_file_len(&self) -> Option<u64> {
        let stripes = self.stripe_count();
        let frame = (self.layout.chunk_size() + CRC_LEN) as u64;
        let Some(last) = stripes
            .checked_sub(1)
            .and_then(|s| self.layout.stripe(self.object_len, s))
        else {
            return Some(HEADER_LEN as u64);
        };
        (stripes - 1)
            .checked_mul(frame)?
            .checked_add((HEADER_LEN + last.chunk_len + CRC_LEN) as u64)
    }
}

/// Streams a shard file out: the header at creation, then one chunk per stripe.
///
/// Nothing is flushed or synced here: durability is the caller's (the store's durable
/// write function). A writer dropped before [`ShardWriter::finish`] leaves a short file,
/// which the reader reports as [`Error::Truncated`].
#[derive(Debug)]
pub struct ShardWriter<W: Write> {
    inner: W,
    header: ShardHeader,
    next: u64,
}

impl<W: Write> ShardWriter<W> {
    /// Writes the header.
    ///
    /// # Errors
    /// [`Error::Io`] from the writer.
    pub fn new(mut inner: W, header: ShardHeader) -> Result<Self> {
        inner.write_all(&header.encode())?;
        Ok(Self {
            inner,
            header,
            next: 0,
        })
    }

    /// Appends the chunk of the next stripe and its CRC32C.
    ///
    /// # Errors
    /// [`Error::ChunkLength`] or [`Error::StripeCount`] (nothing written), or [`Error::Io`].
    pub fn write_chunk(&mut self, chunk: &[u8]) -> Result<()> {
        let crc = frame_crc(self.next, chunk);
        self.write_chunk_with_crc(chunk, crc)
    }

    /// Like [`ShardWriter::write_chunk`] with a CRC the caller already computed and
    /// checked (the peer API verifies incoming frames and should not hash twice).
    ///
    /// # Errors
    /// As [`ShardWriter::write_chunk`]; the CRC is not checked again.
    pub fn write_chunk_with_crc(&mut self, chunk: &[u8], crc: u32) -> Result<()> {
        let stripes = self.header.stripe_count();
        if self.next >= stripes {
            return Err(Error::StripeCount {
                expected: stripes,
                written: self.next + 1,
            });
        }
        let expected = self.header.chunk_len(self.next);
        if chunk.len() != expected {
            return Err(Error::ChunkLength {
                stripe: self.next,
                expected,
                got: chunk.len(),
            });
        }
        self.inner.write_all(chunk)?;
        self.inner.write_all(&crc.to_le_bytes())?;
        self.next += 1;
        Ok(())
    }

    /// The header being written.
    #[must_use]
    pub fn header(&self) -> &ShardHeader {
        &self.header
    }

    /// Checks every stripe was written, flushes, and hands the writer back.
    ///
    /// # Errors
    /// [`Error::StripeCount`] when stripes are missing, or [`Error::Io`].
    pub fn finish(mut self) -> Result<W> {
        let stripes = self.header.stripe_count();
        if self.next != stripes {
            return Err(Error::StripeCount {
                expected: stripes,
                written: self.next,
            });
        }
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// Streams a shard file in, checking every chunk.
#[derive(Debug)]
pub struct ShardReader<R: Read> {
    inner: R,
    header: ShardHeader,
    next: u64,
}

impl<R: Read> ShardReader<R> {
    /// Reads and checks the header.
    ///
    /// # Errors
    /// [`Error::Truncated`] (stripe 0) when the input is shorter than a header, any header
    /// error of [`ShardHeader::decode`], or [`Error::Io`].
    pub fn new(mut inner: R) -> Result<Self> {
        let mut b = [0u8; HEADER_LEN];
        read_exact_or(&mut inner, &mut b, 0)?;
        let header = ShardHeader::decode(&b)?;
        Ok(Self {
            inner,
            header,
            next: 0,
        })
    }

    /// The checked header.
    #[must_use]
    pub fn header(&self) -> &ShardHeader {
        &self.header
    }

    /// The stripe whose frame the next call reads.
    #[must_use]
    pub fn next_stripe(&self) -> u64 {
        self.next
    }

    /// Reads the next frame into `buf` (resized to the chunk length) and returns its
    /// stripe number; `Ok(None)` after the last one, once the input is seen to end there.
    ///
    /// # Errors
    /// [`Error::CorruptChunk`] when the CRC32C does not match: the frame was consumed, so
    /// the next call reads the next stripe and a caller can rebuild just this one.
    /// [`Error::Truncated`] when the input ends inside a frame, [`Error::TrailingData`]
    /// when it goes on after the last one, [`Error::Io`] from the reader. `buf`'s contents
    /// are unspecified after an error.
    pub fn read_chunk(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>> {
        self.read_chunk_with(buf, read_zeroed)
    }

    /// [`ShardReader::read_chunk`] with the frame's bytes read by `fill`, which is given
    /// `buf` empty and must leave in it exactly the next `n` bytes of the reader (an
    /// [`io::ErrorKind::UnexpectedEof`] error when the input ends first). It is for a
    /// reader that can read into a vector's spare capacity: `read_chunk` zeroes the
    /// buffer first, and on a drive that zeroing costs as much as the read itself.
    ///
    /// # Errors
    /// As [`ShardReader::read_chunk`].
    pub fn read_chunk_with<F>(&mut self, buf: &mut Vec<u8>, fill: F) -> Result<Option<u64>>
    where
        F: FnOnce(&mut R, &mut Vec<u8>, usize) -> io::Result<()>,
    {
        let stripe = self.next;
        if stripe >= self.header.stripe_count() {
            let mut probe = [0u8; 1];
            return match read_retrying(&mut self.inner, &mut probe)? {
                0 => Ok(None),
                _ => Err(Error::TrailingData),
            };
        }
        // The whole frame in one read; the CRC is then cut off the end.
        let len = self.header.chunk_len(stripe);
        buf.clear();
        fill(&mut self.inner, buf, len + CRC_LEN).map_err(|e| read_error(e, stripe))?;
        if buf.len() != len + CRC_LEN {
            return Err(Error::Io(io::Error::other(format!(
                "a frame reader filled {} bytes where {} were asked for",
                buf.len(),
                len + CRC_LEN
            ))));
        }
        let mut crc = [0u8; CRC_LEN];
        crc.copy_from_slice(&buf[len..]);
        buf.truncate(len);
        self.next += 1;
        if u32::from_le_bytes(crc) != frame_crc(stripe, buf) {
            return Err(Error::CorruptChunk { stripe });
        }
        Ok(Some(stripe))
    }

    /// Hands the underlying reader back.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read + Seek> ShardReader<R> {
    /// Positions the reader at the frame of `stripe`, for ranged reads.
    ///
    /// # Errors
    /// [`Error::StripeCount`] when the stripe does not exist, or [`Error::Io`].
    pub fn seek_to_stripe(&mut self, stripe: u64) -> Result<()> {
        let stripes = self.header.stripe_count();
        if stripe >= stripes {
            return Err(Error::StripeCount {
                expected: stripes,
                written: stripe,
            });
        }
        self.inner
            .seek(SeekFrom::Start(self.header.frame_offset(stripe)))?;
        self.next = stripe;
        Ok(())
    }
}

/// Checks a shard file arriving in pieces of any size (a network body), without holding
/// more than the 64-byte header: feed every piece in order, then call
/// [`StreamVerifier::finish`]. The bytes themselves go wherever the caller writes them;
/// a caller commits them only after `finish` succeeds.
#[derive(Debug)]
pub struct StreamVerifier {
    header_buf: [u8; HEADER_LEN],
    header_have: usize,
    header: Option<ShardHeader>,
    stripe: u64,
    /// Chunk bytes of the current frame still to come.
    chunk_left: usize,
    crc: u32,
    stored_crc: [u8; CRC_LEN],
    crc_have: usize,
    /// Bytes accepted so far.
    seen: u64,
}

impl Default for StreamVerifier {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamVerifier {
    /// A verifier expecting a shard file from its first byte.
    #[must_use]
    pub fn new() -> Self {
        Self {
            header_buf: [0; HEADER_LEN],
            header_have: 0,
            header: None,
            stripe: 0,
            chunk_left: 0,
            crc: 0,
            stored_crc: [0; CRC_LEN],
            crc_have: 0,
            seen: 0,
        }
    }

    /// The header, once its 64 bytes have been fed and checked.
    #[must_use]
    pub fn header(&self) -> Option<&ShardHeader> {
        self.header.as_ref()
    }

    /// Bytes accepted so far.
    #[must_use]
    pub fn bytes_seen(&self) -> u64 {
        self.seen
    }

    /// Checks the next piece of the file.
    ///
    /// # Errors
    /// Any header error of [`ShardHeader::decode`]; [`Error::CorruptChunk`] for a frame
    /// whose CRC32C does not match; [`Error::TrailingData`] for bytes past the last frame.
    /// After an error the verifier is spent: the upload must be dropped.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let Some(header) = self.header else {
                let n = (HEADER_LEN - self.header_have).min(bytes.len());
                self.header_buf[self.header_have..self.header_have + n]
                    .copy_from_slice(&bytes[..n]);
                self.header_have += n;
                self.seen += n as u64;
                bytes = &bytes[n..];
                if self.header_have == HEADER_LEN {
                    let h = ShardHeader::decode(&self.header_buf)?;
                    self.header = Some(h);
                    self.start_frame();
                }
                continue;
            };
            if self.stripe >= header.stripe_count() {
                return Err(Error::TrailingData);
            }
            if self.chunk_left > 0 {
                let n = self.chunk_left.min(bytes.len());
                self.crc = crc32c::crc32c_append(self.crc, &bytes[..n]);
                self.chunk_left -= n;
                self.seen += n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = (CRC_LEN - self.crc_have).min(bytes.len());
            self.stored_crc[self.crc_have..self.crc_have + n].copy_from_slice(&bytes[..n]);
            self.crc_have += n;
            self.seen += n as u64;
            bytes = &bytes[n..];
            if self.crc_have == CRC_LEN {
                let want = bind_stripe(self.crc, self.stripe);
                if u32::from_le_bytes(self.stored_crc) != want {
                    return Err(Error::CorruptChunk {
                        stripe: self.stripe,
                    });
                }
                self.stripe += 1;
                self.start_frame();
            }
        }
        Ok(())
    }

    fn start_frame(&mut self) {
        if let Some(h) = &self.header {
            self.chunk_left = h.chunk_len(self.stripe);
        }
        self.crc = 0;
        self.crc_have = 0;
    }

    /// Checks the file was complete and returns its header.
    ///
    /// # Errors
    /// [`Error::Truncated`] naming the stripe whose frame is incomplete (stripe 0 when the
    /// header itself is).
    pub fn finish(self) -> Result<ShardHeader> {
        match self.header {
            Some(h) if self.stripe >= h.stripe_count() => Ok(h),
            Some(_) => Err(Error::Truncated {
                stripe: self.stripe,
            }),
            None => Err(Error::Truncated { stripe: 0 }),
        }
    }
}

fn read_retrying<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// The frame reader of [`ShardReader::read_chunk`]: replaces `buf`'s contents with the
/// next `n` bytes of `r`, zeroing the buffer first as safe Rust must.
///
/// # Errors
/// From `r`, [`io::ErrorKind::UnexpectedEof`] when it ends first.
pub fn read_zeroed<R: Read>(r: &mut R, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    buf.resize(n, 0);
    r.read_exact(buf)
}

fn read_exact_or<R: Read>(r: &mut R, buf: &mut [u8], stripe: u64) -> Result<()> {
    r.read_exact(buf).map_err(|e| read_error(e, stripe))
}

/// An input ending inside the frame of `stripe` is [`Error::Truncated`].
fn read_error(e: io::Error, stripe: u64) -> Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        Error::Truncated { stripe }
    } else {
        Error::Io(e)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_shift_joins_crcs_as_the_bytes_joined() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 131 % 251) as u8).collect();
        for len in [0, 1, 7, 4096, 65_536] {
            let shift = Crc32cShift::new(len);
            for cut in [0, 1, 1000, 70_000 - len] {
                let (a, b) = (&data[..cut], &data[cut..cut + len]);
                let joined = crc32c::crc32c(&data[..cut + len]);
                assert_eq!(
                    shift.join(crc32c::crc32c(a), crc32c::crc32c(b)),
                    joined,
                    "{len} {cut}"
                );
                assert_eq!(
                    crc32c::crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), len),
                    joined
                );
            }
        }
    }

    use super::*;

    fn header(len: u64) -> ShardHeader {
        ShardHeader::new(
            0x0123_4567_89AB_CDEF,
            1,
            Layout::new(3, 2, 4096).unwrap(),
            len,
        )
        .unwrap()
    }

    #[test]
    fn header_fields_land_where_format_md_says() {
        let b = header(12_345).encode();
        assert_eq!(&b[0..8], b"OEDSHARD");
        assert_eq!(b[8..10], [1, 0]);
        assert_eq!(b[10], 1);
        assert_eq!(b[11], 12);
        assert_eq!(b[12..18], [3, 0, 2, 0, 1, 0]);
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 12_345);
        assert_eq!(ShardHeader::decode(&b).unwrap(), header(12_345));
    }

    #[test]
    fn file_length_counts_header_frames_and_tail() {
        let h = header(3 * 4096 * 2 + 7);
        assert_eq!(h.stripe_count(), 3);
        assert_eq!(h.file_len(), 64 + 2 * (4096 + 4) + 3 + 4);
        assert_eq!(header(0).file_len(), 64);
    }

    #[test]
    fn impossible_lengths_are_rejected() {
        let l = Layout::new(1, 0, 4096).unwrap();
        assert!(ShardHeader::new(0, 0, l, u64::MAX).is_err());
        assert!(ShardHeader::new(0, 1, l, 10).is_err());
    }

    #[test]
    fn writer_refuses_wrong_chunks() {
        let mut w = ShardWriter::new(Vec::new(), header(10)).unwrap();
        assert!(matches!(
            w.write_chunk(&[0; 5]),
            Err(Error::ChunkLength {
                stripe: 0,
                expected: 4,
                got: 5
            })
        ));
        w.write_chunk(&[0; 4]).unwrap();
        assert!(matches!(
            w.write_chunk(&[0; 4]),
            Err(Error::StripeCount { .. })
        ));
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len() as u64, header(10).file_len());
        let w = ShardWriter::new(Vec::new(), header(10)).unwrap();
        assert!(matches!(
            w.finish(),
            Err(Error::StripeCount { written: 0, .. })
        ));
    }
}
