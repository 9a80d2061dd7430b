//! `oed-meter`: per-drive power, energy, I/O and CPU metering for OED, as Prometheus
//! collectors registered on a [`prometheus::Registry`] the caller passes in. No HTTP: the
//! daemon serves the registry.
//!
//! A drive gets its power from the best source it has: a hwmon sensor, RAPL, an external
//! command, or, when none exists, a model of CPU, disk and network activity with a device
//! profile. Every power and energy series carries `source` and `method` (`measured` or
//! `modelled`) labels, so a model is never mistaken for a measurement.
//!
//! # Layout
//! - [`power`]: the sources, their detection order, the model, its profiles and the
//!   calibration fit.
//! - [`procfs`]: parsers for `/proc/stat`, `/proc/diskstats`, `/proc/self/*` and
//!   `/proc/net/dev`, and the data directory's block device.
//! - [`sampler`]: [`Meter`], one tick per period: reads the source and the kernel's
//!   counters, integrates energy, updates the metrics.
//! - [`history`]: the last hour of a drive's rates in memory, for the console.
//! - [`process`]: process metrics (CPU, memory, threads, file descriptors) read at scrape
//!   time.
//! - [`traffic`]: the daemon's own counters: requests by API, operation and code, bytes and
//!   latency by traffic class, request sizes, sequential vs random shard reads, erasure
//!   coding work.
//!
//! The kernel's file trees are found through [`Roots`], so tests run on fixture trees of
//! the same shape as `/sys` and `/proc`.

// Counters become f64 samples in Prometheus' format; values past 2^52 lose their last
// digits there whatever we do.
#![allow(clippy::cast_precision_loss)]

pub mod history;
pub mod power;
pub mod process;
pub mod procfs;
pub mod sampler;
pub mod traffic;

use std::path::{Path, PathBuf};

pub use sampler::{EnergyReader, Meter, MeterConfig, calibrate};

/// Milliseconds since the epoch, by the system clock (0 before 1970).
#[must_use]
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where `/sys` and `/proc` are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// The sysfs root, normally `/sys`.
    pub sys: PathBuf,
    /// The procfs root, normally `/proc`.
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self {
            sys: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
        }
    }
}

/// What went wrong reading a counter or a source.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file did not have the expected shape.
    #[error("{}: {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
    /// The data directory is on a file system with no block device.
    #[error("device {major}:{minor} is not in {}/dev/block (tmpfs, overlay or network file system?)", sysfs.display())]
    NoDevice {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
        /// The sysfs root searched.
        sysfs: PathBuf,
    },
    /// A power source is not present or not usable.
    #[error("{0}")]
    Unavailable(String),
    /// The external power command failed.
    #[error("power command: {0}")]
    Command(String),
    /// A device profile is missing or invalid.
    #[error("power profile: {0}")]
    Profile(String),
    /// A metric could not be registered (a name registered twice).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

impl Error {
    fn parse(path: &Path, what: impl Into<String>) -> Self {
        Self::Parse {
            path: path.to_owned(),
            what: what.into(),
        }
    }
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
