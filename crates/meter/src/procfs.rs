//! Readers for the kernel's counters: `/proc/stat` (host CPU), `/proc/diskstats` (the
//! block device under the data directory), `/proc/self/{stat,io,fd}` (this process) and
//! `/proc/net/dev` (interfaces). Each reader parses one file into plain numbers; a file
//! that is missing or malformed is an [`Error`] naming the file, never a panic, so a
//! machine without some counter loses that counter and nothing else.

use std::path::{Path, PathBuf};

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

/// The temperature sensor of block device `device` (a disk or one of its partitions):
/// the `temp1_input` of the hwmon device the kernel made for that disk (the `drivetemp`
/// driver's for SATA disks, under the disk's SCSI device; the `NVMe` driver's, under the
/// controller), if there is one.
#[must_use]
pub fn temperature_file(roots: &Roots, device: &str) -> Option<PathBuf> {
    let mut disk = std::fs::canonicalize(roots.sys.join("class/block").join(device)).ok()?;
    if disk.join("partition").exists() {
        disk = disk.parent()?.to_owned();
    }
    let dev = disk.join("device");
    let mut dirs: Vec<PathBuf> = Vec::new();
    for parent in [dev.join("hwmon"), dev.clone()] {
        if let Ok(entries) = std::fs::read_dir(&parent) {
            dirs.extend(entries.filter_map(|e| {
                let e = e.ok()?;
                e.file_name()
                    .to_str()?
                    .starts_with("hwmon")
                    .then(|| e.path())
                    .filter(|p| p.is_dir())
            }));
        }
    }
    dirs.sort_by_key(|d| {
        let n = d.file_name().and_then(|n| n.to_str()).unwrap_or("");
        n.trim_start_matches("hwmon")
            .parse::<u32>()
            .unwrap_or(u32::MAX)
    });
    dirs.into_iter()
        .map(|d| d.join("temp1_input"))
        .find(|f| f.exists())
}

/// Degrees Celsius from a hwmon `temp*_input` file (millidegrees).
///
/// # Errors
/// [`Error::Io`] or [`Error::Parse`] naming the file.
pub fn read_temperature(file: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::Io {
        path: file.to_owned(),
        source: e,
    })?;
    let milli: f64 = text.trim().parse().map_err(|_| Error::Parse {
        path: file.to_owned(),
        what: format!("not a temperature: {:?}", text.trim()),
    })?;
    Ok(milli / 1000.0)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Roots) {
        let sys = tempfile::tempdir().expect("tempdir");
        let roots = Roots {
            sys: sys.path().to_owned(),
            proc: sys.path().join("proc"),
        };
        (sys, roots)
    }

    fn put(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn a_sata_disks_temperature_is_its_drivetemp_sensors() {
        let (sys, roots) = tree();
        let disk = sys
            .path()
            .join("devices/pci0/ata1/host0/target0/0:0:0:0/block/sda");
        put(&disk.join("sda1/partition"), "1\n");
        put(&disk.join("device/hwmon/hwmon10/temp1_input"), "39000\n");
        put(&disk.join("device/hwmon/hwmon2/temp1_input"), "41000\n");
        std::fs::create_dir_all(sys.path().join("class/block")).expect("mkdir");
        std::os::unix::fs::symlink(disk.join("sda1"), sys.path().join("class/block/sda1"))
            .expect("link");
        let file = temperature_file(&roots, "sda1").expect("a sensor");
        assert!(file.ends_with("hwmon2/temp1_input"), "{}", file.display());
        assert!((read_temperature(&file).expect("read") - 41.0).abs() < 1e-9);
        assert_eq!(temperature_file(&roots, "sdb"), None);
    }

    #[test]
    fn an_nvme_disks_temperature_is_its_controllers_sensors() {
        let (sys, roots) = tree();
        let ctrl = sys.path().join("devices/pci0/nvme/nvme0");
        put(&ctrl.join("hwmon3/temp1_input"), "38850\n");
        std::fs::create_dir_all(sys.path().join("devices/pci0/nvme/nvme0/nvme0n1")).expect("mkdir");
        std::os::unix::fs::symlink(&ctrl, ctrl.join("nvme0n1/device")).expect("link");
        std::fs::create_dir_all(sys.path().join("class/block")).expect("mkdir");
        std::os::unix::fs::symlink(ctrl.join("nvme0n1"), sys.path().join("class/block/nvme0n1"))
            .expect("link");
        let file = temperature_file(&roots, "nvme0n1").expect("a sensor");
        assert!((read_temperature(&file).expect("read") - 38.85).abs() < 1e-9);
        put(&file, "hot\n");
        assert!(read_temperature(&file).is_err());
    }
}
