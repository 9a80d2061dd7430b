//! hwmon power sensors (`/sys/class/hwmon/hwmonN`), as `INA2xx` current monitors on ARM
//! boards and ACPI power meters expose them: `energy*_input` (microjoules, a counter) is
//! preferred over `power*_input` / `power*_average` (microwatts) because a counter does
//! not miss what happens between two readings.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::Sample;
use crate::{Error, Result, Roots};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    EnergyMicrojoules,
    PowerMicrowatts,
}

/// One hwmon channel.
#[derive(Debug)]
pub struct Hwmon {
    name: String,
    file: PathBuf,
    kind: Kind,
    last: Option<(u64, Instant)>,
}

impl Hwmon {
    /// Finds the first hwmon device (in `hwmonN` order) with a readable power or energy
    /// channel; `only` restricts the search to the device with that `name` or directory.
    /// Returns it with the reasons the devices before it were passed over.
    ///
    /// # Errors
    /// [`Error::Unavailable`] with the reason each device was passed over.
    pub fn detect(roots: &Roots, only: Option<&str>) -> Result<(Self, Vec<String>)> {
        let class = roots.sys.join("class/hwmon");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&class)
            .map_err(|e| Error::Unavailable(format!("{}: {e}", class.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        dirs.sort_by_key(|d| natural_key(d));
        let mut reasons = Vec::new();
        for dir in dirs {
            let dir_name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = std::fs::read_to_string(dir.join("name"))
                .map_or_else(|_| dir_name.clone(), |n| n.trim().to_owned());
            if only.is_some_and(|o| o != name && o != dir_name) {
                continue;
            }
            match channel(&dir) {
                Ok((file, kind)) => {
                    let found = Self {
                        name,
                        file,
                        kind,
                        last: None,
                    };
                    return Ok((found, reasons));
                }
                Err(e) => reasons.push(format!("{dir_name} ({name}): {e}")),
            }
        }
        if reasons.is_empty() {
            reasons.push(match only {
                Some(o) => format!("no hwmon device is named {o}"),
                None => "no hwmon devices".to_owned(),
            });
        }
        Err(Error::Unavailable(reasons.join("; ")))
    }

    /// The device's `name`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn sample(&mut self, now: Instant) -> Result<Option<Sample>> {
        let value = super::read_u64(&self.file)?;
        match self.kind {
            Kind::PowerMicrowatts => Ok(Some(Sample {
                watts: value as f64 / 1e6,
                joules: None,
            })),
            Kind::EnergyMicrojoules => {
                let prev = self.last.replace((value, now));
                let Some((before, then)) = prev else {
                    return Ok(None);
                };
                let secs = now.duration_since(then).as_secs_f64();
                if value < before {
                    // hwmon energy counters are 64-bit; going backwards means the driver
                    // was reloaded. The interval is lost rather than guessed.
                    return Err(Error::Unavailable(format!(
                        "{} went backwards ({before} -> {value}); counter reset",
                        self.file.display()
                    )));
                }
                if secs <= 0.0 {
                    return Ok(None);
                }
                let joules = (value - before) as f64 / 1e6;
                Ok(Some(Sample {
                    watts: joules / secs,
                    joules: Some(joules),
                }))
            }
        }
    }
}

/// The lowest-numbered energy channel, else power input, else power average, that reads
/// as a number.
fn channel(dir: &Path) -> Result<(PathBuf, Kind)> {
    let mut files: Vec<(u8, u32, PathBuf, Kind)> = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Unavailable(e.to_string()))?;
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let parsed = [
            ("energy", "_input", 0, Kind::EnergyMicrojoules),
            ("power", "_input", 1, Kind::PowerMicrowatts),
            ("power", "_average", 2, Kind::PowerMicrowatts),
        ]
        .into_iter()
        .find_map(|(pre, suf, rank, kind)| {
            let n: u32 = file.strip_prefix(pre)?.strip_suffix(suf)?.parse().ok()?;
            Some((rank, n, kind))
        });
        if let Some((rank, n, kind)) = parsed {
            files.push((rank, n, e.path(), kind));
        }
    }
    files.sort_by_key(|f| (f.0, f.1));
    let mut last_err = "no power*_input, power*_average or energy*_input file".to_owned();
    for (_, _, path, kind) in files {
        match super::read_u64(&path) {
            Ok(_) => return Ok((path, kind)),
            Err(e) => last_err = e.to_string(),
        }
    }
    Err(Error::Unavailable(last_err))
}

/// `hwmon10` after `hwmon9`.
fn natural_key(p: &Path) -> (String, u64) {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit());
    let n = digits.parse().unwrap_or(u64::MAX);
    (name[..name.len() - digits.len()].to_owned(), n)
}
