//! RAPL energy counters through powercap (`/sys/class/powercap/intel-rapl:N`, also used by
//! AMD). The top-level zones are the packages; their sub-zones (`intel-rapl:0:0`) are parts
//! of them and the `intel-rapl-mmio` zones repeat them, so only top-level zones are summed.
//! A `psys` zone, where present, covers the whole platform and is used alone. Counters wrap
//! at `max_energy_range_uj`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::Sample;
use crate::{Error, Result, Roots};

#[derive(Debug)]
struct Zone {
    energy: PathBuf,
    max_range: u64,
    last: Option<u64>,
}

/// The RAPL zones summed into one figure.
#[derive(Debug)]
pub struct Rapl {
    zones: Vec<Zone>,
    last: Option<Instant>,
}

impl Rapl {
    /// Finds the top-level zones and checks each can be read.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when there is no zone, or a zone cannot be read (the
    /// counters are root-only since Linux 5.10).
    pub fn detect(roots: &Roots) -> Result<Self> {
        let class = roots.sys.join("class/powercap");
        let entries = std::fs::read_dir(&class)
            .map_err(|e| Error::Unavailable(format!("{}: {e}", class.display())))?;
        let mut tops: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                let rest = n.strip_prefix("intel-rapl:")?;
                (!rest.contains(':')).then(|| (n.clone(), e.path()))
            })
            .collect();
        tops.sort();
        if tops.is_empty() {
            return Err(Error::Unavailable("no intel-rapl zones in powercap".into()));
        }
        let named = |p: &Path| std::fs::read_to_string(p.join("name")).map(|s| s.trim().to_owned());
        if let Some(psys) = tops
            .iter()
            .find(|(_, p)| named(p).is_ok_and(|n| n == "psys"))
        {
            tops = vec![psys.clone()];
        }
        let mut zones = Vec::new();
        for (name, dir) in tops {
            let energy = dir.join("energy_uj");
            let max_range = super::read_u64(&dir.join("max_energy_range_uj"))
                .map_err(|e| Error::Unavailable(format!("{name}: {e}")))?;
            if max_range == 0 {
                return Err(Error::Unavailable(format!(
                    "{name}: max_energy_range_uj is 0"
                )));
            }
            super::read_u64(&energy).map_err(|e| Error::Unavailable(format!("{name}: {e}")))?;
            zones.push(Zone {
                energy,
                max_range,
                last: None,
            });
        }
        Ok(Self { zones, last: None })
    }

    pub(super) fn sample(&mut self, now: Instant) -> Result<Option<Sample>> {
        let mut joules = 0.0;
        let mut complete = true;
        for zone in &mut self.zones {
            let value = super::read_u64(&zone.energy)?;
            if value > zone.max_range {
                return Err(Error::parse(
                    &zone.energy,
                    format!("{value} exceeds max_energy_range_uj"),
                ));
            }
            match zone.last.replace(value) {
                Some(before) => {
                    joules += wrapping_delta(before, value, zone.max_range) as f64 / 1e6;
                }
                None => complete = false,
            }
        }
        let then = self.last.replace(now);
        let secs = then.map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        if !complete || secs <= 0.0 {
            return Ok(None);
        }
        Ok(Some(Sample {
            watts: joules / secs,
            joules: Some(joules),
        }))
    }
}

/// Microjoules between two readings of a counter that wraps from `max_range` to 0.
#[must_use]
pub fn wrapping_delta(before: u64, now: u64, max_range: u64) -> u64 {
    if now >= before {
        now - before
    } else {
        max_range - before + now
    }
}
