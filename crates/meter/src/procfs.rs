//! Readers for the kernel's counters: `/proc/stat` (host CPU), `/proc/diskstats` (the
//! block device under the data directory), `/proc/self/{stat,io,fd}` (this process) and
//! `/proc/net/dev` (interfaces). Each reader parses one file into plain numbers; a file
//! that is missing or malformed is an [`Error`] naming the file, never a panic, so a
//! machine without some counter loses that counter and nothing else.

use std::path::Path;

use crate::{Error, Result, Roots};

/// Host CPU time in clock ticks, all cores together, from the first line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Ticks spent doing anything but idling or waiting for I/O.
    pub busy: u64,
    /// All ticks, busy or not.
    pub total: u64,
}

/// Reads host CPU time.
///
/// # Errors
/// [`Error::Parse`] if `/proc/stat` has no well-formed `cpu` line.
pub fn cpu_times(roots: &Roots) -> Result<CpuTimes> {
    let path = roots.proc.join("stat");
    let text = read(&path)?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| Error::parse(&path, "no aggregate `cpu` line"))?;
    let fields = numbers(&path, line.split_whitespace().skip(1))?;
    if fields.len() < 4 {
        return Err(Error::parse(
            &path,
            "the `cpu` line has fewer than 4 fields",
        ));
    }
    // user nice system idle iowait irq softirq steal guest guest_nice; guest time is
    // already counted in user and nice, so it is left out of the total.
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    Ok(CpuTimes {
        busy: total.saturating_sub(idle),
        total,
    })
}

/// Number of CPUs online, counted from the `cpuN` lines of `/proc/stat`.
///
/// # Errors
/// [`Error::Io`] if the file cannot be read.
pub fn cpu_count(roots: &Roots) -> Result<usize> {
    let text = read(&roots.proc.join("stat"))?;
    let n = text
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Ok(n.max(1))
}

/// Counters of one block device, from its line in `/proc/diskstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Reads completed.
    pub reads: u64,
    /// Bytes read (sectors are always 512 bytes in this file).
    pub read_bytes: u64,
    /// Milliseconds spent reading, summed over requests.
    pub read_ms: u64,
    /// Writes completed.
    pub writes: u64,
    /// Bytes written.
    pub written_bytes: u64,
    /// Milliseconds spent writing, summed over requests.
    pub write_ms: u64,
    /// Milliseconds the device had at least one request in flight (its busy time).
    pub io_ms: u64,
}

/// Reads the line of device `name` (as in `vda`, `sda1`, `nvme0n1p2`).
///
/// # Errors
/// [`Error::Parse`] if the device has no line or the line is malformed.
pub fn disk_stats(roots: &Roots, name: &str) -> Result<DiskStats> {
    let path = roots.proc.join("diskstats");
    let text = read(&path)?;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if it.nth(2) != Some(name) {
            continue;
        }
        let f = numbers(&path, it)?;
        if f.len() < 10 {
            return Err(Error::parse(
                &path,
                format!("the line of {name} is too short"),
            ));
        }
        return Ok(DiskStats {
            reads: f[0],
            read_bytes: f[2].saturating_mul(512),
            read_ms: f[3],
            writes: f[4],
            written_bytes: f[6].saturating_mul(512),
            write_ms: f[7],
            io_ms: f[9],
        });
    }
    Err(Error::parse(&path, format!("no line for device {name}")))
}

/// The block device holding `path`: its kernel name (`vda`, `sda1`), found from the
/// file system's `st_dev` through `/sys/dev/block/MAJOR:MINOR/uevent`.
///
/// # Errors
/// [`Error::Io`] if `path` cannot be stat'ed; [`Error::NoDevice`] for file systems with
/// no block device (tmpfs, overlay, NFS).
pub fn device_of(roots: &Roots, path: &Path) -> Result<String> {
    let st = rustix::fs::stat(path).map_err(|e| Error::Io {
        path: path.to_owned(),
        source: e.into(),
    })?;
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    device_name(roots, major, minor)
}

/// The kernel name of block device `major:minor`.
///
/// # Errors
/// [`Error::NoDevice`] when `/sys/dev/block` does not know the number (major 0 is an
/// anonymous device: tmpfs, overlay, NFS).
pub fn device_name(roots: &Roots, major: u32, minor: u32) -> Result<String> {
    let uevent = roots
        .sys
        .join("dev/block")
        .join(format!("{major}:{minor}"))
        .join("uevent");
    let text = std::fs::read_to_string(&uevent).map_err(|_| Error::NoDevice {
        major,
        minor,
        sysfs: roots.sys.clone(),
    })?;
    text.lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| Error::parse(&uevent, "no DEVNAME"))
}

/// What `/proc/self/stat`, `/proc/self/io` and `/proc/self/fd` say about this process.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Threads.
    pub threads: u64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Bytes this process caused to be read from storage (`read_bytes`), if known.
    pub storage_read_bytes: Option<u64>,
    /// Bytes this process caused to be written to storage (`write_bytes`), if known.
    pub storage_written_bytes: Option<u64>,
    /// Open file descriptors, if `/proc/self/fd` is readable.
    pub open_fds: Option<u64>,
}

/// Reads this process's counters from `{proc}/self`.
///
/// # Errors
/// [`Error::Parse`] if `stat` is malformed; `io` and `fd` are optional (some kernels
/// restrict them) and missing ones are `None`.
pub fn process_stats(roots: &Roots) -> Result<ProcessStats> {
    let path = roots.proc.join("self/stat");
    let text = read(&path)?;
    // The command name (field 2) is in parentheses and may hold spaces or parentheses;
    // every later field follows the last ')'.
    let rest = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or_else(|| Error::parse(&path, "no ')' after the command name"))?;
    // Fields from 3 (state) on; state is not a number, so skip it. Priority and nice may
    // be negative; they are not used and read as 0.
    let f = numbers(
        &path,
        rest.split_whitespace().skip(1).map(|s| {
            if s.starts_with('-') && s[1..].parse::<u64>().is_ok() {
                "0"
            } else {
                s
            }
        }),
    )?;
    // Index i here is field i + 4 of proc(5).
    if f.len() < 21 {
        return Err(Error::parse(&path, "fewer fields than proc(5) lists"));
    }
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as u64;
    let boot = boot_time(roots).unwrap_or(0) as f64;
    let io = std::fs::read_to_string(roots.proc.join("self/io")).ok();
    let io_field = |name: &str| {
        io.as_deref().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
        })
    };
    let open_fds = std::fs::read_dir(roots.proc.join("self/fd"))
        .ok()
        .map(|d| d.count() as u64);
    Ok(ProcessStats {
        cpu_seconds: (f[10] + f[11]) as f64 / ticks,
        threads: f[16],
        start_time_seconds: boot + f[18] as f64 / ticks,
        virtual_bytes: f[19],
        resident_bytes: f[20].saturating_mul(page),
        storage_read_bytes: io_field("read_bytes"),
        storage_written_bytes: io_field("write_bytes"),
        open_fds,
    })
}

fn boot_time(roots: &Roots) -> Option<u64> {
    let text = std::fs::read_to_string(roots.proc.join("stat")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Byte and packet counters of one network interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Interface name.
    pub interface: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
}

/// Reads every interface of this network namespace from `/proc/net/dev`.
///
/// # Errors
/// [`Error::Parse`] on a malformed line.
pub fn net_stats(roots: &Roots) -> Result<Vec<NetStats>> {
    let path = roots.proc.join("net/dev");
    let text = read(&path)?;
    let mut out = Vec::new();
    // Two header lines, then `name: rx_bytes rx_packets ... (8 rx fields) tx_bytes tx_packets ...`.
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            return Err(Error::parse(&path, "an interface line without ':'"));
        };
        let f = numbers(&path, rest.split_whitespace())?;
        if f.len() < 10 {
            return Err(Error::parse(
                &path,
                format!("the line of {} is too short", name.trim()),
            ));
        }
        out.push(NetStats {
            interface: name.trim().to_owned(),
            rx_bytes: f[0],
            rx_packets: f[1],
            tx_bytes: f[8],
            tx_packets: f[9],
        });
    }
    Ok(out)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

fn numbers<'a>(path: &Path, it: impl Iterator<Item = &'a str>) -> Result<Vec<u64>> {
    it.map(|s| {
        s.parse::<u64>()
            .map_err(|_| Error::parse(path, format!("`{s}` is not a counter")))
    })
    .collect()
}
