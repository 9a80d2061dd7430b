//! The `oedd` binary as an operator meets it first: version and help.

use std::process::Command;

#[test]
fn version_names_the_erasure_coding_kernel_this_cpu_runs() {
    let out = Command::new(oed_tests::oedd())
        .arg("version")
        .output()
        .expect("run oedd");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.starts_with("oedd "), "{text}");
    let kernel = oed_ec::Kernel::detect().name();
    assert!(text.contains(&format!("kernel: {kernel}")), "{text}");
}

#[test]
fn unknown_subcommand_fails_with_usage() {
    let out = Command::new(oed_tests::oedd())
        .arg("frobnicate")
        .output()
        .expect("run oedd");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Usage"), "{err}");
}

/// `oedd dev` finds ports free, releases them and lets each drive bind its own: another
/// process can take one in between. The cluster then starts again on other ports.
#[test]
fn oedd_dev_starts_again_on_other_ports_when_a_drive_cannot_bind() {
    use oed_tools::dev::{DevCluster, free_ports};
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_port = taken.local_addr().expect("addr").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = dev_options(dir.path(), 0);
    // First a drive's metrics port is taken, then its S3 port; the third attempt is free.
    let mut attempts = 0;
    let cluster = DevCluster::start_on(&opts, |n| {
        attempts += 1;
        let mut ports = free_ports(n)?;
        match attempts {
            1 => ports[opts.drives + 1] = taken_port,
            2 => ports[0] = taken_port,
            _ => {}
        }
        Ok(ports)
    })
    .expect("the cluster starts on its third attempt");
    assert_eq!(attempts, 3);
    let taken_suffix = format!(":{taken_port}");
    for url in cluster.endpoints.iter().chain(&cluster.metrics) {
        assert!(!url.contains(&taken_suffix), "{url}");
        let addr = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .expect("host:port");
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
    // The map the drives run names the ports they listen on.
    let map = std::fs::read_to_string(dir.path().join("cluster.toml")).expect("map");
    assert!(!map.contains(&taken_suffix), "{map}");
    drop(cluster);

    // A port taken on every attempt ends the start with the drive named.
    let err = DevCluster::start_on(&opts, |n| {
        let mut ports = free_ports(n)?;
        ports[0] = taken_port;
        Ok(ports)
    })
    .err()
    .expect("no attempt can start drive-1");
    let said = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ");
    assert!(
        said.contains("drive-1 exited before it listened, 3 times"),
        "{said}"
    );
}

/// `oedd dev --spares N` starts N drives outside the map, listening, and prints the one
/// line that adds them.
#[test]
fn oedd_dev_starts_spares_outside_the_map_and_prints_how_to_add_them() {
    use oed_tools::dev::DevCluster;
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = dev_options(dir.path(), 1);
    let cluster = DevCluster::start(&opts).expect("the cluster starts");
    assert_eq!(cluster.spares.len(), 1);
    let spare = &cluster.spares[0];
    assert!(spare.starts_with("drive-4=127.0.0.1:"), "{spare}");
    let banner = cluster.banner();
    let line = banner
        .lines()
        .find(|l| l.starts_with("oedd admin --map "))
        .expect("an add line");
    assert!(line.ends_with(&format!(" add {spare}")), "{line}");
    assert!(line.contains("--secret-file "), "{line}");
    assert!(banner.starts_with("oedd dev: 3 drives"), "{banner}");
    let map = std::fs::read_to_string(dir.path().join("cluster.toml")).expect("map");
    assert!(!map.contains("drive-4"), "{map}");
    let addr = spare.trim_start_matches("drive-4=");
    std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
}

/// `oedd dev`'s options for three drives, EC 2+1, in `dir`, with `spares`.
fn dev_options(dir: &std::path::Path, spares: usize) -> oed_tools::dev::DevOptions {
    oed_tools::dev::DevOptions {
        drives: 3,
        k: 2,
        m: 1,
        chunk_size: 64 * 1024,
        dir: Some(dir.to_path_buf()),
        fsync: false,
        oedd: oed_tests::oedd(),
        tls: false,
        clear_peers: false,
        spares,
    }
}
