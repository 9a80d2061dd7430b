//! A drive and `oedd dev` stop when asked, at any moment after they say they are ready:
//! systemd sends SIGTERM as soon as a stop is asked for, and scripts kill a process as
//! soon as it prints its address.

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use oed_tests::{SECRET, oedd_command, spawn_until_line};
use rustix::process::{Pid, Signal, kill_process};

/// Points after the readiness line at which SIGTERM is sent: at once, then more and more
/// apart, to about 12 ms (a drive's stop task and signal set-up take microseconds).
fn delays(n: u64) -> impl Iterator<Item = Duration> {
    (0..n).map(|i| Duration::from_micros(i * i * 25))
}

fn sigterm(child: &Child) {
    let pid = Pid::from_raw(child.id().cast_signed()).expect("a child's pid is positive");
    kill_process(pid, Signal::TERM).expect("SIGTERM to the child");
}

/// Waits at most `within` for `child` to exit; kills it (SIGKILL) and returns `None`
/// when it does not.
fn exit_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Every pid alive as a child of `pid` (Linux: `/proc/PID/task/*/children`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_drive_sent_sigterm_right_after_it_listens_stops_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, delay) in delays(24).enumerate() {
        let mut cmd = oedd_command();
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--listen", "127.0.0.1:0", "--drive-id", "stopped"])
            .env("OED_CLUSTER_SECRET", SECRET)
            .env("OED_LOG", "error");
        let (mut child, addr) =
            spawn_until_line(&mut cmd, "oedd: listening on ", Duration::from_mins(1));
        assert!(addr.is_some(), "start {i}: the drive did not listen");
        std::thread::sleep(delay);
        sigterm(&child);
        // A clean stop drains and exits 0; the default action of SIGTERM (the signal
        // not watched yet) ends the process by the signal instead, and a signal lost on
        // its way leaves it running.
        let status = exit_within(&mut child, Duration::from_secs(20));
        assert!(
            status.is_some_and(|s| s.success()),
            "start {i}: SIGTERM {delay:?} after \"listening on\": {status:?}"
        );
    }
}

#[test]
fn oedd_dev_sent_sigterm_right_after_its_banner_stops_its_drives() {
    for (i, delay) in delays(8).enumerate() {
        let mut cmd = oedd_command();
        cmd.args(["dev", "--drives", "3", "--k", "2", "--m", "1", "--no-fsync"])
            .env("OED_LOG", "error");
        let (mut dev, line) =
            spawn_until_line(&mut cmd, "Ctrl-C stops the cluster", Duration::from_mins(2));
        assert!(
            line.is_some(),
            "start {i}: oedd dev did not start its drives"
        );
        let drives = children_of(dev.id());
        std::thread::sleep(delay);
        sigterm(&dev);
        let status = exit_within(&mut dev, Duration::from_secs(40));
        // Drives left behind are ended here, so that a failure does not leak them.
        let left: Vec<u32> = drives.iter().copied().filter(|&p| alive(p)).collect();
        for &p in &left {
            if let Some(pid) = Pid::from_raw(p.cast_signed()) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        assert_eq!(
            drives.len(),
            3,
            "start {i}: the drives of oedd dev: {drives:?}"
        );
        assert!(
            status.is_some_and(|s| s.success()),
            "start {i}: SIGTERM {delay:?} after the banner: {status:?}"
        );
        assert!(left.is_empty(), "start {i}: drives still running: {left:?}");
    }
}

#[test]
fn oedd_dev_sent_sigterm_while_its_drives_start_stops_them_all() {
    let mut cmd = oedd_command();
    cmd.args(["dev", "--drives", "3", "--k", "2", "--m", "1", "--no-fsync"])
        .env("OED_LOG", "error")
        .stdout(std::process::Stdio::null());
    let mut dev = cmd.spawn().expect("spawn oedd dev");
    // SIGTERM once the first drive runs, before oedd dev has said it is up; every drive
    // it starts is noted until it exits.
    let mut drives = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_mins(1);
    while drives.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        drives.extend(children_of(dev.id()));
    }
    sigterm(&dev);
    let deadline = Instant::now() + Duration::from_mins(1);
    let status = loop {
        drives.extend(children_of(dev.id()));
        match dev.try_wait() {
            Ok(Some(status)) => break Some(status),
            _ if Instant::now() >= deadline => {
                let _ = dev.kill();
                let _ = dev.wait();
                break None;
            }
            _ => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let left: Vec<u32> = drives.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        if let Some(pid) = Pid::from_raw(p.cast_signed()) {
            let _ = kill_process(pid, Signal::KILL);
        }
    }
    assert!(!drives.is_empty(), "oedd dev started no drive within 60 s");
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM while the drives start: {status:?}"
    );
    assert!(left.is_empty(), "drives still running: {left:?}");
}
