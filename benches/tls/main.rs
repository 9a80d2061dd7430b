//! `oed-tls-bench`: the CPU one drive spends per GiB on TLS records, for each suite the
//! drive may choose (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305, all TLS 1.3), with the
//! same rustls and `ring` build as `oedd`. A client and a server connection run in
//! memory, in this one process: the client seals 64 KiB writes into records, the server
//! opens them. Printed: CPU-seconds per GiB for sealing plus opening (what a GiB costs
//! the two ends of one link together), measured with the process CPU clock.
//!
//!   oed-tls-bench [MIB]   (default 512; under qemu-user, 64 is plenty)
//!
//! The figures under qemu-user rank the suites for an ARM CPU (AES instructions or not);
//! they do not predict a board's speed.

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuite, ClientConnection, ServerConnection};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

const WRITE: usize = 64 * 1024;

fn cpu_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec.cast_unsigned(), t.tv_nsec.cast_unsigned() as u32)
}

/// A provider with `suite` only.
fn only(suite: CipherSuite) -> Arc<CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites.retain(|s| s.suite() == suite);
    Arc::new(p)
}

fn pair(suite: CipherSuite) -> anyhow::Result<(ClientConnection, ServerConnection)> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])?.self_signed(&key)?;
    let der = CertificateDer::from(cert.der().to_vec());
    let server = rustls::ServerConfig::builder_with_provider(only(suite))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der)?;
    let client = rustls::ClientConfig::builder_with_provider(only(suite))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut c = ClientConnection::new(Arc::new(client), ServerName::try_from("localhost")?)?;
    let mut s = ServerConnection::new(Arc::new(server))?;
    let mut wire = Vec::new();
    for _ in 0..16 {
        if !c.is_handshaking() && !s.is_handshaking() {
            return Ok((c, s));
        }
        wire.clear();
        c.write_tls(&mut wire)?;
        s.read_tls(&mut wire.as_slice())?;
        s.process_new_packets()?;
        wire.clear();
        s.write_tls(&mut wire)?;
        c.read_tls(&mut wire.as_slice())?;
        c.process_new_packets()?;
    }
    bail!("the handshake did not finish")
}

/// CPU-seconds per GiB to seal and open `mib` MiB with `suite`.
fn measure(suite: CipherSuite, mib: usize) -> anyhow::Result<f64> {
    let (mut c, mut s) = pair(suite)?;
    let data = vec![0x5a_u8; WRITE];
    let mut wire = Vec::with_capacity(2 * WRITE);
    let mut out = vec![0_u8; WRITE];
    let writes = mib * 1024 * 1024 / WRITE;
    let start = cpu_now();
    for _ in 0..writes {
        c.writer().write_all(&data)?;
        wire.clear();
        while c.wants_write() {
            c.write_tls(&mut wire)?;
        }
        let mut rd = wire.as_slice();
        let mut got = 0;
        while !rd.is_empty() {
            s.read_tls(&mut rd)?;
            s.process_new_packets()?;
            loop {
                match s.reader().read(&mut out) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if got != WRITE {
            bail!("the server opened {got} bytes of {WRITE}");
        }
    }
    let cpu = cpu_now().saturating_sub(start).as_secs_f64();
    let mib_sent = u32::try_from(writes * WRITE / (1024 * 1024))?;
    Ok(cpu * 1024.0 / f64::from(mib_sent))
}

fn main() -> anyhow::Result<()> {
    let mib: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().context("MIB must be a number of MiB")?,
        None => 512,
    };
    println!(
        "{} ({}), {mib} MiB per suite, TLS 1.3, 64 KiB writes: CPU-s per GiB sealed and opened",
        std::env::consts::ARCH,
        if cfg!(target_arch = "x86_64") {
            "native"
        } else {
            "as built"
        }
    );
    for suite in [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        println!("  {:<32} {:.3}", format!("{suite:?}"), measure(suite, mib)?);
    }
    Ok(())
}
