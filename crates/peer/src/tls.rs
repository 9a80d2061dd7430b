//! TLS for the drive's S3 and peer listener, and for its client of other drives
//! (`docs/drive.md`, "TLS").
//!
//! The listener serves the certificate chain and key of two PEM files, read again on
//! SIGHUP: connections already open keep the session they have, new ones get the new
//! certificate, and files that do not load leave the old one in place. The peer client
//! trusts only the cluster's CA (a PEM file of one or more certificates), never the
//! system's roots: a drive is whoever holds a certificate the cluster CA signed for its
//! address.
//!
//! The crypto is `ring`'s. The drive chooses the suite by its CPU, whatever the client
//! prefers: AES-GCM where the CPU has AES instructions, ChaCha20-Poly1305 where it has
//! none (armv7 boards, some aarch64 ones), since AES in software costs several times the
//! CPU per byte there.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use oed_model::error::{Error, Result};

/// The crypto provider every TLS endpoint of the drive uses, its suites in the drive's
/// order of preference: `ring`'s own (AES-256-GCM, AES-128-GCM, ChaCha20-Poly1305) where
/// the CPU has AES instructions, ChaCha20-Poly1305 first where it has none (see
/// [`has_aes`]). With AES instructions AES-GCM costs about a third of ChaCha20-Poly1305's
/// CPU per byte (`oed-tls-bench`; `docs/results.md`, "TLS").
#[must_use]
pub fn provider() -> Arc<CryptoProvider> {
    use rustls::CipherSuite as C;
    let mut p = rustls::crypto::ring::default_provider();
    if !has_aes() {
        // Stable: the ChaCha20 suites go first, the others keep their order.
        p.cipher_suites.sort_by_key(|s| {
            !matches!(
                s.suite(),
                C::TLS13_CHACHA20_POLY1305_SHA256
                    | C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
                    | C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
            )
        });
    }
    Arc::new(p)
}

/// Whether this CPU encrypts AES-GCM in hardware (AES and carry-less multiply).
#[must_use]
pub fn has_aes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The suite names the listener offers, in its order of preference (for the logs and
/// `oedd --version`-like reports).
#[must_use]
pub fn suite_order() -> Vec<String> {
    provider()
        .cipher_suites
        .iter()
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}

/// The certificates of a PEM file named by setting `setting`: at least one.
fn certificates(setting: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect)
        .map_err(|e| Error::Config(format!("{setting} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "{setting} {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// A certificate chain and key, from PEM files.
fn certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey> {
    let chain = certificates("tls_cert_file", cert)?;
    let der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| Error::Config(format!("tls_key_file {}: {e}", key.display())))?;
    CertifiedKey::from_der(chain, der, &provider()).map_err(|e| {
        Error::Config(format!(
            "tls_key_file {} does not go with tls_cert_file {}: {e}",
            key.display(),
            cert.display()
        ))
    })
}

/// The certificate the listener serves now; swapped whole on reload.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.0
                .read()
                .map_or_else(|p| p.into_inner().clone(), |g| g.clone()),
        )
    }
}

/// The listener's TLS: its certificate files, the certificate loaded from them, and the
/// acceptor that serves it.
pub struct ServerTls {
    cert: PathBuf,
    key: PathBuf,
    current: Arc<Current>,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads the chain in `cert` and the key in `key` (PEM).
    ///
    /// # Errors
    /// [`Error::Config`] naming the file that does not load, or a key that does not go
    /// with the certificate.
    pub fn load(cert: &Path, key: &Path) -> Result<Self> {
        let current = Arc::new(Current(RwLock::new(Arc::new(certified_key(cert, key)?))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(current.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        // The drive picks the suite by its own CPU (see `provider`), not by the client's
        // order: most clients put AES-256 first, and without AES instructions any AES
        // costs several times ChaCha20.
        config.ignore_client_order = true;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            current,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads the files again; new connections get what they hold. Connections already
    /// open are not touched.
    ///
    /// # Errors
    /// As [`ServerTls::load`]; the certificate served stays the old one.
    pub fn reload(&self) -> Result<()> {
        let fresh = Arc::new(certified_key(&self.cert, &self.key)?);
        match self.current.0.write() {
            Ok(mut g) => *g = fresh,
            Err(p) => *p.into_inner() = fresh,
        }
        Ok(())
    }

    /// The acceptor to run handshakes with.
    #[must_use]
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.acceptor.clone()
    }
}

/// The TLS client configuration of a drive's peer client: it trusts the certificates in
/// `ca` (PEM) and nothing else. With no `ca`, it trusts nothing, so `https://` drives
/// cannot be reached (plain `http://` ones can).
///
/// # Errors
/// [`Error::Config`] for a CA file that does not load or holds no certificate.
pub fn client_config(ca: Option<&Path>) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = ca {
        for c in certificates("tls_ca_file", ca)? {
            roots
                .add(c)
                .map_err(|e| Error::Config(format!("tls_ca_file {}: {e}", ca.display())))?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// A TLS stream whose reads fill the caller's buffer with as many records as have
/// arrived. A read of a TLS stream gives at most one record's plaintext (16 KiB), so hyper
/// would hand a body on in 16 KiB frames, each costing the write path its per-frame work;
/// in plain HTTP a read takes what the socket has, up to the 64 KiB buffer. Writes go
/// through as they are.
pub struct Coalesce<T> {
    inner: T,
    /// An error met after some bytes were read; given at the next read.
    pending: Option<std::io::Error>,
}

impl<T> Coalesce<T> {
    /// Reads of `inner`, coalesced.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Coalesce<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        if let Some(e) = self.pending.take() {
            return Poll::Ready(Err(e));
        }
        let start = buf.filled().len();
        while buf.remaining() > 0 {
            let before = buf.filled().len();
            match std::pin::Pin::new(&mut self.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) if buf.filled().len() == before => break, // end of stream
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) if buf.filled().len() == start => return Poll::Ready(Err(e)),
                Poll::Ready(Err(e)) => {
                    self.pending = Some(e);
                    break;
                }
                Poll::Pending if buf.filled().len() == start => return Poll::Pending,
                Poll::Pending => break,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Coalesce<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A boxed error, as hyper's client takes from a connector.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a drive's TLS handshake with another drive may take.
const PEER_HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// The peer client's connector: `http://` drives in the clear, `https://` ones over TLS,
/// verified with the client configuration it was made with, and read through
/// [`Coalesce`].
#[derive(Clone)]
pub struct PeerConnector {
    tcp: hyper_util::client::legacy::connect::HttpConnector,
    tls: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for PeerConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerConnector").finish_non_exhaustive()
    }
}

impl PeerConnector {
    /// Connects with `tcp` (which must not insist on `http://`), and verifies TLS drives
    /// with `tls`.
    #[must_use]
    pub fn new(
        tcp: hyper_util::client::legacy::connect::HttpConnector,
        tls: rustls::ClientConfig,
    ) -> Self {
        Self {
            tcp,
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        }
    }
}

impl tower_service::Service<http::Uri> for PeerConnector {
    type Response = hyper_util::rt::TokioIo<PeerStream>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = std::result::Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let tls = (uri.scheme() == Some(&http::uri::Scheme::HTTPS)).then(|| {
            let host = uri.host().unwrap_or_default();
            (
                self.tls.clone(),
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
            )
        });
        let connecting = self.tcp.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let Some((connector, host)) = tls else {
                return Ok(hyper_util::rt::TokioIo::new(PeerStream::Plain(tcp)));
            };
            let name = rustls_pki_types::ServerName::try_from(host)?;
            let stream = tokio::time::timeout(PEER_HANDSHAKE, connector.connect(name, tcp))
                .await
                .map_err(|_| "the TLS handshake with the drive timed out")??;
            Ok(hyper_util::rt::TokioIo::new(PeerStream::Tls(Box::new(
                Coalesce::new(stream),
            ))))
        })
    }
}

/// A connection to another drive, in the clear or over TLS.
pub enum PeerStream {
    /// `http://`.
    Plain(tokio::net::TcpStream),
    /// `https://`.
    Tls(Box<Coalesce<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>>),
}

impl hyper_util::client::legacy::connect::Connection for PeerStream {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

impl tokio::io::AsyncRead for PeerStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            PeerStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for PeerStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            PeerStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            PeerStream::Plain(s) => std::pin::Pin::new(s).poll_write_vectored(cx, bufs),
            PeerStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            PeerStream::Plain(s) => s.is_write_vectored(),
            PeerStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            PeerStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            PeerStream::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            PeerStream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A throwaway PKI for a cluster on one machine (`oedd dev --tls`): a CA, and one
/// certificate per drive for `127.0.0.1` and `localhost`, all written as PEM files.
#[derive(Debug)]
pub struct DevPki {
    /// The CA's certificate: what clients trust (`AWS_CA_BUNDLE`, boto3's `verify`).
    pub ca: PathBuf,
    /// Each drive's certificate and key files, in the order asked for.
    pub drives: Vec<(PathBuf, PathBuf)>,
}

impl DevPki {
    /// Makes the CA and a certificate for each of `ids` under `dir`, keys readable by
    /// the owner only.
    ///
    /// # Errors
    /// [`Error::Config`] if a certificate cannot be made; [`Error::Io`] if a file cannot
    /// be written.
    pub fn create(dir: &Path, ids: &[String]) -> Result<Self> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let bad = |e: rcgen::Error| Error::Config(format!("cannot make a test certificate: {e}"));
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate().map_err(bad)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(bad)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "OED dev cluster CA (throwaway)");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = params.self_signed(&ca_key).map_err(bad)?;
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, ca_cert.pem())?;
        let mut drives = Vec::with_capacity(ids.len());
        for id in ids {
            let key = KeyPair::generate().map_err(bad)?;
            let mut p =
                CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                    .map_err(bad)?;
            p.distinguished_name.push(DnType::CommonName, id.as_str());
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(bad)?;
            let (cert_file, key_file) =
                (dir.join(format!("{id}.pem")), dir.join(format!("{id}.key")));
            std::fs::write(&cert_file, cert.pem())?;
            write_private(&key_file, key.serialize_pem().as_bytes())?;
            drives.push((cert_file, key_file));
        }
        Ok(Self { ca, drives })
    }
}

/// Writes a file only its owner may read.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dev_pki_loads_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let pki = DevPki::create(dir.path(), &["d1".into(), "d2".into()]).unwrap();
        let (cert, key) = &pki.drives[0];
        let tls = ServerTls::load(cert, key).unwrap();
        client_config(Some(&pki.ca)).unwrap();
        // A key of another drive does not go with this certificate; the old one stays.
        std::fs::copy(&pki.drives[1].1, key).unwrap();
        let e = tls.reload().unwrap_err().to_string();
        assert!(e.contains("does not go with"), "{e}");
        std::fs::copy(&pki.drives[1].0, cert).unwrap();
        tls.reload().unwrap();
        assert!(client_config(Some(cert)).is_ok());
        std::fs::write(cert, "not PEM").unwrap();
        assert!(ServerTls::load(cert, key).is_err());
    }
}
