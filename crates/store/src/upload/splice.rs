//! A shard upload received from a connection of its own ([`RawUpload`]): the peer API's
//! `PUT shard` upgraded to a raw byte stream (`docs/peer-api.md`, "Raw uploads").
//!
//! Over plain TCP on Linux the bytes are not read into the daemon at all: `splice` moves
//! them from the socket into a pipe (the socket's pages, referenced, not copied) and from
//! the pipe into the shard file (the one copy, into the page cache), in batches of about
//! [`super::WRITE_BATCH`] bytes on a blocking thread. Each batch is then checked where it
//! now lies, over the file's pages mapped read-only: every frame's CRC32C, as an upload
//! read through a buffer is checked, and nothing is committed before the whole file has
//! passed. So a received byte costs one copy instead of two (socket to buffer, buffer to
//! page cache), and the check reads the bytes that are stored rather than a copy of
//! them. The shard's 64-byte header is read the ordinary way first, so a wrong upload is
//! refused before any of its data is written.
//!
//! A file written with `O_DIRECT` (`direct_io`) is read from the connection into its
//! aligned buffer instead ([`super::direct`]); anything else (TLS, a shard small enough to
//! be kept in RocksDB, another system) reads the connection as any body
//! ([`RawUpload::stream`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::{BodyCheck, UploadFile};
use oed_model::error::{Error, Result};
use oed_model::record::RecordTail;
use oed_model::seal::Seal;

/// The connection an upgraded upload arrives on.
pub enum RawConn {
    /// Plain TCP: its bytes can be spliced.
    Tcp(TcpStream),
    /// Anything else hyper upgraded (a TLS stream): read as it comes.
    Other(TokioIo<hyper::upgrade::Upgraded>),
}

impl AsyncRead for RawConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RawConn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            RawConn::Other(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for RawConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            RawConn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            RawConn::Other(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RawConn::Tcp(s) => Pin::new(s).poll_flush(cx),
            RawConn::Other(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            RawConn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            RawConn::Other(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// An upload's bytes on a connection of their own: those hyper had already read past the
/// request's head, then the connection's, up to the sender's shutdown of its side, or on
/// a kept connection ([`RawUpload::kept`]) up to the end of its frame.
///
/// Read as a body ([`AsyncRead`]) it gives the shard file, then the record tail, then
/// its end.
pub struct RawUpload {
    prefix: Bytes,
    conn: RawConn,
    received: u64,
    frame: Option<Frame>,
}

/// Where the upload on a kept connection ends: after the shard file (`file_left` more
/// bytes), a 4-byte big-endian length and that many bytes of tail (`docs/peer-api.md`,
/// "Raw uploads"). Bytes after the file where no tail is due, or more than a tail may
/// be, are read as the connection's would be, and the upload refused for them.
#[derive(Debug)]
struct Frame {
    file_left: u64,
    tail: TailFrame,
}

#[derive(Debug)]
enum TailFrame {
    /// The tail's length: `got` of its 4 bytes read so far.
    Len { bytes: [u8; 4], got: usize },
    /// This many bytes of tail to come.
    Bytes(u64),
    /// The upload is all read: the connection's next bytes are the next request's.
    Done,
}

impl RawUpload {
    /// The upload on `conn`, `prefix` having been read from it already; it ends when the
    /// sender shuts down its side.
    #[must_use]
    pub fn new(prefix: Bytes, conn: RawConn) -> Self {
        Self {
            prefix,
            conn,
            received: 0,
            frame: None,
        }
    }

    /// The upload on a connection the sender keeps: a shard file of `file_len` bytes,
    /// then the length of what follows it (4 bytes, big-endian: the record tail's, 0
    /// without one) and that.
    #[must_use]
    pub fn kept(prefix: Bytes, conn: RawConn, file_len: u64) -> Self {
        Self {
            frame: Some(Frame {
                file_left: file_len,
                tail: TailFrame::Len {
                    bytes: [0; 4],
                    got: 0,
                },
            }),
            ..Self::new(prefix, conn)
        }
    }

    /// Bytes received of it so far (for the traffic counters).
    #[must_use]
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The connection, to answer on once the upload is stored or refused.
    pub fn conn(&mut self) -> &mut RawConn {
        &mut self.conn
    }

    /// On a kept connection, whether the upload was read to the end of its frame and
    /// nothing past it: the connection can carry the next request.
    #[must_use]
    pub fn read_whole(&self) -> bool {
        self.prefix.is_empty()
            && self
                .frame
                .as_ref()
                .is_some_and(|f| f.file_left == 0 && matches!(f.tail, TailFrame::Done))
    }

    /// The connection, once the upload is over.
    #[must_use]
    pub fn into_conn(self) -> RawConn {
        self.conn
    }

    /// The rest of the upload as a body.
    pub(super) fn stream(&mut self) -> impl Stream<Item = io::Result<Bytes>> + Unpin + '_ {
        tokio_util::io::ReaderStream::with_capacity(self, oed_model::config::READ_BUFFER_MAX)
    }
}

/// Reads into `buf`, at most `limit` bytes, from `prefix` first, then `conn`; returns
/// how many (0: the connection ended).
fn poll_raw(
    prefix: &mut Bytes,
    conn: &mut RawConn,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
    limit: usize,
) -> Poll<io::Result<usize>> {
    let limit = limit.min(buf.remaining());
    if !prefix.is_empty() {
        let n = limit.min(prefix.len());
        buf.put_slice(&prefix.split_to(n));
        return Poll::Ready(Ok(n));
    }
    if limit == buf.remaining() {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(conn).poll_read(cx, buf))?;
        return Poll::Ready(Ok(buf.filled().len() - before));
    }
    // Only the end of a frame is read short of the buffer.
    let mut part = ReadBuf::new(buf.initialize_unfilled_to(limit));
    std::task::ready!(Pin::new(conn).poll_read(cx, &mut part))?;
    let n = part.filled().len();
    buf.advance(n);
    Poll::Ready(Ok(n))
}

impl AsyncRead for RawUpload {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let (prefix, conn) = (&mut this.prefix, &mut this.conn);
        // How much of the upload may still be read: all that comes without a frame; on
        // a kept connection the file's rest, then the tail's once its length is read.
        let left = loop {
            let Some(frame) = &mut this.frame else {
                break None;
            };
            if frame.file_left > 0 {
                break Some(&mut frame.file_left);
            }
            match &mut frame.tail {
                TailFrame::Done => return Poll::Ready(Ok(())),
                TailFrame::Bytes(left) => break Some(left),
                TailFrame::Len { bytes, got } => {
                    let mut len = ReadBuf::new(&mut bytes[*got..]);
                    let n = std::task::ready!(poll_raw(prefix, conn, cx, &mut len, 4))?;
                    this.received += n as u64;
                    if n == 0 {
                        // The connection ended before the tail: the upload is short.
                        return Poll::Ready(Ok(()));
                    }
                    *got += n;
                    if *got == 4 {
                        frame.tail = match u32::from_be_bytes(*bytes) {
                            0 => TailFrame::Done,
                            len => TailFrame::Bytes(len.into()),
                        };
                    }
                }
            }
        };
        let limit = left
            .as_deref()
            .map_or(usize::MAX, |l| usize::try_from(*l).unwrap_or(usize::MAX));
        let n = std::task::ready!(poll_raw(prefix, conn, cx, buf, limit))?;
        this.received += n as u64;
        if let Some(left) = left {
            *left -= n as u64;
        }
        if let Some(frame) = &mut this.frame
            && matches!(frame.tail, TailFrame::Bytes(0))
        {
            frame.tail = TailFrame::Done;
        }
        Poll::Ready(Ok(()))
    }
}

/// Whether `file`'s upload on `conn` is spliced: plain TCP on Linux, written through the
/// page cache.
pub(super) fn takes(file: &UploadFile, conn: &RawUpload) -> bool {
    cfg!(target_os = "linux") && !file.want_direct && matches!(conn.conn, RawConn::Tcp(_))
}

fn broken(e: &io::Error) -> Error {
    Error::BodyBroken(e.to_string())
}

/// Receives a whole shard file from `conn` into `file` (see the module docs), checking it
/// as [`super::Upload::receive`] does: the header must be `expected`, every frame's CRC32C
/// must match, and the file must end after its last frame, where the record tail
/// follows when `with_tail` is set, then the tag of `seal` when there is one. Returns the
/// tail.
#[cfg(target_os = "linux")]
pub(super) async fn receive(
    file: &mut Box<UploadFile>,
    up: &mut RawUpload,
    expected: &oed_ec::ShardHeader,
    with_tail: bool,
    fsync: bool,
    seal: Option<Seal>,
) -> Result<Option<RecordTail>> {
    let file_len = expected.file_len();
    let limit = super::after_file_limit(with_tail, seal.is_some());
    let mut verifier = BodyCheck::new(seal);
    let tail = read_head(file, up, &mut verifier, expected, limit).await?;
    let mut pos = verifier.bytes_seen();
    if verifier.header().is_some() && pos < file_len {
        pos = splice_body(file, up, &mut verifier, file_len, fsync).await?;
    }
    after_file(up, verifier, tail, pos == file_len, limit, with_tail).await
}

/// The end of a raw upload received into its file: the bytes after the file (the tail
/// and the tag, or nothing; `tail` those read already), at most `limit` of them where the
/// file came `whole`, then the checks of [`super::end_of_upload`].
pub(super) async fn after_file(
    up: &mut RawUpload,
    check: BodyCheck,
    mut tail: Vec<u8>,
    whole: bool,
    limit: usize,
    with_tail: bool,
) -> Result<Option<RecordTail>> {
    let mut rest = Vec::new();
    (&mut *up)
        .take((limit.saturating_sub(tail.len()) + 1) as u64)
        .read_to_end(&mut rest)
        .await
        .map_err(|e| broken(&e))?;
    tail.extend_from_slice(&rest);
    if whole && tail.len() > limit {
        return Err(Error::Shard(oed_ec::Error::TrailingData));
    }
    super::end_of_upload(check, with_tail, &tail)
}

/// Reads the shard's header the ordinary way (the prefix, then what the header still
/// lacks), checks it against `expected` and hands it to `file`; returns the bytes read
/// past the file's end (the start of its tail, when the file is only a header; at most
/// `limit`).
pub(super) async fn read_head(
    file: &mut UploadFile,
    up: &mut RawUpload,
    verifier: &mut BodyCheck,
    expected: &oed_ec::ShardHeader,
    limit: usize,
) -> Result<Vec<u8>> {
    let file_len = expected.file_len();
    let want = oed_ec::format::HEADER_LEN.min(file_len as usize);
    let mut head = BytesMut::new();
    // The header, and all that hyper read past the request's head: what is spliced comes
    // straight from the socket.
    while head.len() < want || !up.prefix.is_empty() {
        let mut more = vec![0u8; (want.saturating_sub(head.len())).max(up.prefix.len())];
        let n = up.read(&mut more).await.map_err(|e| broken(&e))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&more[..n]);
    }
    let mut head = head.freeze();
    let mut tail = Vec::new();
    if head.len() as u64 > file_len {
        let extra = head.split_off(file_len as usize);
        if extra.len() > limit {
            return Err(Error::Shard(oed_ec::Error::TrailingData));
        }
        tail.extend_from_slice(&extra);
    }
    verifier.feed(&head)?;
    if verifier.header().is_some_and(|h| h != expected) {
        return Err(super::header_mismatch());
    }
    if !head.is_empty() {
        file.push(head);
    }
    Ok(tail)
}

/// Splices the rest of the file, up to `file_len` bytes in all, from the connection into
/// `file`, checking each batch with `verifier`; returns how far the file came (short of
/// `file_len` when the connection ended first).
#[cfg(target_os = "linux")]
async fn splice_body(
    file: &mut Box<UploadFile>,
    up: &mut RawUpload,
    verifier: &mut BodyCheck,
    file_len: u64,
    fsync: bool,
) -> Result<u64> {
    let RawConn::Tcp(sock) = &up.conn else {
        unreachable!("only TCP connections are spliced (`takes`)")
    };
    let mut pos = verifier.bytes_seen();
    let pipe = Pipe::new().map_err(Error::Io)?;
    let batch = super::WRITE_BATCH.min(pipe.capacity);
    let mut in_pipe = 0usize;
    // The socket wakes its reader once a batch's worth is waiting, not at every segment
    // (set back to one byte when this ends, for what the connection reads next).
    let mut low = LowWater::new(sock);
    loop {
        if in_pipe >= batch || (pos == file_len && in_pipe > 0) {
            drain_pipe(file, verifier, &pipe, in_pipe, fsync).await?;
            in_pipe = 0;
        }
        if pos == file_len {
            break;
        }
        let want = (file_len - pos).min((pipe.capacity - in_pipe) as u64) as usize;
        let got = match sock.try_io(tokio::io::Interest::READABLE, || pipe.fill(sock, want)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if in_pipe == 0 {
                    low.set(want.min(batch));
                    sock.readable().await.map_err(|e| broken(&e))?;
                    continue;
                }
                // The pipe may be out of room with bytes still in the socket, whose
                // readiness was just cleared: empty the pipe, then ask once more before
                // waiting.
                drain_pipe(file, verifier, &pipe, in_pipe, fsync).await?;
                in_pipe = 0;
                match pipe.fill(sock, want) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        low.set(want.min(batch));
                        sock.readable().await.map_err(|e| broken(&e))?;
                        continue;
                    }
                    Err(e) => return Err(broken(&e)),
                }
            }
            Err(e) => return Err(broken(&e)),
        };
        if got == 0 {
            // The body ended early: what came is checked, and the check says where.
            if in_pipe > 0 {
                drain_pipe(file, verifier, &pipe, in_pipe, fsync).await?;
            }
            break;
        }
        in_pipe += got;
        pos += got as u64;
        // Moved from the socket without a read.
        up.received += got as u64;
        if let Some(f) = &mut up.frame {
            f.file_left = f.file_left.saturating_sub(got as u64);
        }
    }
    Ok(pos)
}

#[cfg(not(target_os = "linux"))]
pub(super) async fn receive(
    _file: &mut Box<UploadFile>,
    _up: &mut RawUpload,
    _expected: &oed_ec::ShardHeader,
    _with_tail: bool,
    _fsync: bool,
    _seal: Option<Seal>,
) -> Result<Option<RecordTail>> {
    unreachable!("only Linux splices (`takes`)")
}

/// Moves the `n` bytes in `pipe` to the end of the upload's file and checks them there,
/// on one trip to a blocking thread (the file is opened, and its pending bytes written,
/// at the first). With `fsync`, their writeback starts at once, as a batch's does.
#[cfg(target_os = "linux")]
async fn drain_pipe(
    file: &mut UploadFile,
    verifier: &mut BodyCheck,
    pipe: &Pipe,
    n: usize,
    fsync: bool,
) -> Result<()> {
    use std::os::fd::AsRawFd;
    let mut temp = std::mem::take(file);
    let mut check = std::mem::take(verifier);
    let from = std::sync::Arc::clone(&pipe.read);
    let (temp, check, result) = tokio::task::spawn_blocking(move || {
        let result = (|| -> Result<()> {
            let start = temp.len;
            let f = temp.write_pending().map_err(Error::Io)?;
            let mut left = n;
            while left > 0 {
                match splice(from.as_raw_fd(), f.as_raw_fd(), left) {
                    Ok(0) => {
                        return Err(Error::Io(io::Error::other(
                            "the pipe ran dry before the batch was in the file",
                        )));
                    }
                    Ok(moved) => left -= moved,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::Io(e)),
                }
            }
            let f = temp.file.as_ref().expect("opened above");
            check_mapped(f, start, n, &mut check)?;
            if fsync {
                super::start_writeback(f);
            }
            Ok(())
        })();
        temp.len += n as u64;
        (temp, check, result)
    })
    .await
    .map_err(crate::join_error)?;
    *file = temp;
    *verifier = check;
    result
}

/// Feeds `n` bytes of `file` from `start` to `verifier`, read over its pages mapped
/// read-only (already in the page cache: they were just written).
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "mmap has no safe wrapper in std")]
fn check_mapped(
    file: &std::fs::File,
    start: u64,
    n: usize,
    verifier: &mut BodyCheck,
) -> Result<()> {
    use std::os::fd::AsRawFd;
    if n == 0 {
        return Ok(());
    }
    // SAFETY: sysconf reads no memory of ours.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let at = start / page * page;
    let skip = (start - at) as usize;
    let len = skip + n;
    let offset = libc::off64_t::try_from(at).map_err(|_| Error::Io(io::Error::other("offset")))?;
    // SAFETY: a new read-only shared mapping of `len` bytes of an open file, at a
    // page-aligned offset; the kernel chooses where. Only this upload writes the file,
    // and not while it is mapped, so the bytes do not change under the slice below.
    let p = unsafe {
        libc::mmap64(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            offset,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::Io(io::Error::last_os_error()));
    }
    // SAFETY: the mapping is `len` bytes from `p`, the file is at least `start + n`
    // long (the batch was just written), and the slice ends before the unmapping.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(skip), n) };
    let checked = verifier.feed(bytes);
    // SAFETY: unmaps exactly the mapping made above, which nothing refers to any more.
    unsafe {
        libc::munmap(p, len);
    }
    checked
}

/// One `splice` call moving at most `len` bytes from `from` to `to`, without blocking on
/// a pipe.
#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "splice has no safe wrapper in std")]
fn splice(from: std::os::fd::RawFd, to: std::os::fd::RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: both descriptors are open for the call; null offsets mean each file's own
    // position; the call reads and writes no memory of ours.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Bytes a spliced upload waits for before its socket wakes it. Woken at every segment
/// that arrives, a drive behind a link slower than its disk spends more than half again
/// the CPU per shard of a single stream, and switches more than twice as often
/// (`docs/results.md`, "Raw uploads").
#[cfg(target_os = "linux")]
const LOW_WATER: usize = 256 * 1024;

/// The socket's receive low-water mark (`SO_RCVLOWAT`) while an upload is spliced: the
/// kernel reports it readable once that many bytes wait (or the peer closed). Set to at
/// most what the upload still sends, so a wait always ends; one byte again when dropped.
#[cfg(target_os = "linux")]
struct LowWater<'a> {
    sock: &'a TcpStream,
    now: usize,
}

#[cfg(target_os = "linux")]
impl<'a> LowWater<'a> {
    fn new(sock: &'a TcpStream) -> Self {
        Self { sock, now: 1 }
    }

    /// Waits are for `bytes` (at least one, at most [`LOW_WATER`]) from now on. A
    /// socket that refuses keeps waking at every segment, as before.
    fn set(&mut self, bytes: usize) {
        let bytes = bytes.clamp(1, LOW_WATER);
        if bytes != self.now && set_rcvlowat(self.sock, bytes).is_ok() {
            self.now = bytes;
        }
    }
}

#[cfg(target_os = "linux")]
impl Drop for LowWater<'_> {
    fn drop(&mut self) {
        if self.now != 1 {
            let _ = set_rcvlowat(self.sock, 1);
        }
    }
}

#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "setsockopt has no safe wrapper in std")]
fn set_rcvlowat(sock: &TcpStream, bytes: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is open for the call, and the option's value is a c_int
    // read from the pointer and length given.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The pipe an upload's bytes pass through, as large as the system lets it be made (up
/// to 1 MiB): both ends non-blocking.
#[cfg(target_os = "linux")]
struct Pipe {
    /// Shared with the blocking thread that empties it into the file.
    read: std::sync::Arc<std::os::fd::OwnedFd>,
    write: std::os::fd::OwnedFd,
    /// Bytes it holds at most.
    capacity: usize,
}

#[cfg(target_os = "linux")]
impl Pipe {
    #[expect(unsafe_code, reason = "pipe2 and fcntl have no safe wrapper in std")]
    fn new() -> io::Result<Self> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just opened by pipe2 and are owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // A larger pipe takes a batch in fewer calls; refused past the system's limit
        // (/proc/sys/fs/pipe-max-size) for unprivileged users, which leaves the default.
        // SAFETY: fcntl on a descriptor owned above; no memory of ours is involved.
        let capacity = unsafe {
            libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
            libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ)
        };
        let capacity = usize::try_from(capacity).map_err(|_| io::Error::last_os_error())?;
        Ok(Self {
            read: std::sync::Arc::new(read),
            write,
            capacity,
        })
    }

    /// Moves at most `len` bytes waiting in `sock` into the pipe: `WouldBlock` when the
    /// socket has none, or the pipe no room.
    fn fill(&self, sock: &TcpStream, len: usize) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        loop {
            match splice(sock.as_raw_fd(), self.write.as_raw_fd(), len) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// An upload on a kept connection reads as its file and its tail, then ends where the
    /// sender's next request begins, however the frame's pieces arrive: part of the file
    /// already read by hyper, the tail's length split across writes.
    #[tokio::test]
    async fn a_kept_upload_ends_at_its_frame() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut sender = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        sender.set_nodelay(true).unwrap();
        let (conn, _) = listener.accept().await.unwrap();
        let send = tokio::spawn(async move {
            for piece in [&b"3456789"[..], &[0, 0], &[0], &[3], b"abc", b"NEXT"] {
                sender.write_all(piece).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            sender
        });
        let mut up = RawUpload::kept(Bytes::from_static(b"012"), RawConn::Tcp(conn), 10);
        let mut body = Vec::new();
        up.read_to_end(&mut body).await.unwrap();
        assert_eq!(body, b"0123456789abc");
        assert!(up.read_whole());
        assert_eq!(up.received(), 17, "file, length and tail");
        let _sender = send.await.unwrap();
        let mut next = [0u8; 4];
        up.into_conn().read_exact(&mut next).await.unwrap();
        assert_eq!(&next, b"NEXT");
    }

    #[cfg(target_os = "linux")]
    #[expect(unsafe_code, reason = "getsockopt has no safe wrapper in std")]
    fn rcvlowat(sock: &TcpStream) -> usize {
        use std::os::fd::AsRawFd;
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the descriptor is open; the kernel writes a c_int and its length.
        let r = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                std::ptr::from_mut(&mut value).cast(),
                std::ptr::from_mut(&mut len),
            )
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        usize::try_from(value).unwrap()
    }

    /// The low-water mark is what a wait asks for, never more than [`LOW_WATER`] nor less
    /// than a byte, and one byte again once the upload is done with the socket.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_low_water_mark_is_set_for_waits_and_put_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _sender = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (conn, _) = listener.accept().await.unwrap();
        assert_eq!(rcvlowat(&conn), 1);
        {
            let mut low = LowWater::new(&conn);
            low.set(100_000);
            assert_eq!(rcvlowat(&conn), 100_000);
            low.set(1 << 30);
            assert_eq!(rcvlowat(&conn), LOW_WATER);
            low.set(0);
            assert_eq!(rcvlowat(&conn), 1);
            low.set(5000);
        }
        assert_eq!(rcvlowat(&conn), 1, "put back when the upload is done");
    }
}
