//! Readiness and shutdown notices to the service manager (systemd's `Type=notify`).
//!
//! When `NOTIFY_SOCKET` names a datagram socket, `oedd serve` sends `READY=1` once its
//! listeners are bound and its store is open, and `STOPPING=1` when it begins to shut
//! down, so `systemctl start` returns only when the drive answers and a rolling upgrade
//! can wait for each drive in turn. Without `NOTIFY_SOCKET` (a shell, `oedd dev`, a
//! test) nothing is sent. The protocol is one datagram of `KEY=VALUE` lines to a Unix
//! socket path, or to an abstract name when it starts with `@` (`sd_notify(3)`).

use std::os::unix::net::UnixDatagram;

/// Sends `state` (for example `"READY=1"`) to the socket `NOTIFY_SOCKET` names.
/// Returns whether it was sent; `Ok(false)` when the variable is unset.
///
/// # Errors
/// When the socket cannot be reached: the service manager then waits for a notice that
/// will not come, so the caller should say so.
pub fn notify(state: &str) -> std::io::Result<bool> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(path) if !path.is_empty() => {
            send_to(path.to_string_lossy().as_ref(), state)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Sends `state` to the notify socket at `path` (`@name` for an abstract socket).
///
/// # Errors
/// When the socket cannot be created or the datagram not sent.
pub fn send_to(path: &str, state: &str) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    if let Some(name) = path.strip_prefix('@') {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            socket.send_to_addr(state.as_bytes(), &addr)?;
            return Ok(());
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        {
            let _ = name;
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "abstract notify sockets exist only on Linux",
            ));
        }
    }
    socket.send_to(state.as_bytes(), path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_reaches_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        send_to(path.to_str().unwrap(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_notice_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("oed-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        send_to(&format!("@{name}"), "STOPPING=1").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn a_missing_socket_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(send_to(dir.path().join("none").to_str().unwrap(), "READY=1").is_err());
    }
}
