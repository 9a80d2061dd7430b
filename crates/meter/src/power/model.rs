//! The power model for drives without a sensor:
//! `P = idle_watts + cpu_watts * cpu_busy + disk_watts * disk_busy
//!      + network_joules_per_byte * network bytes/s`,
//! with `cpu_busy` the host's busy share of all cores (0..1), `disk_busy` the share of time
//! the data disk had a request in flight (0..1) and network bytes counted both ways on
//! every interface but loopback. Parameters come from a [`Profile`]: the built-in ones
//! (`profiles/*.toml`, each number with its provenance) or a TOML file. [`Calibration`] fits
//! a profile's parameters to readings of a real source.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// What the host did over one sampler interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Activity {
    /// Length of the interval, seconds.
    pub seconds: f64,
    /// Busy share of all CPU cores, 0..1.
    pub cpu_busy: f64,
    /// Share of the interval the data disk was busy, 0..1.
    pub disk_busy: f64,
    /// Bytes per second received plus sent, loopback excluded.
    pub network_bytes_per_second: f64,
}

/// A device's power parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name, used in the `source` label (`model:<name>`).
    pub name: String,
    /// What device it describes.
    #[serde(default)]
    pub description: String,
    /// Draw with nothing to do, watts.
    pub idle_watts: f64,
    /// Added when every core is busy, watts.
    pub cpu_watts: f64,
    /// Added when the disk is busy all the time, watts.
    pub disk_watts: f64,
    /// Added per byte per second on the network (received or sent), joules per byte.
    pub network_joules_per_byte: f64,
}

const BUILT_IN: [(&str, &str); 4] = [
    ("arm-hdd", include_str!("../../profiles/arm-hdd.toml")),
    ("arm-ssd", include_str!("../../profiles/arm-ssd.toml")),
    ("oed-gen1", include_str!("../../profiles/oed-gen1.toml")),
    ("x86-server", include_str!("../../profiles/x86-server.toml")),
];

impl Profile {
    /// The names of the built-in profiles.
    #[must_use]
    pub fn built_in_names() -> Vec<&'static str> {
        BUILT_IN.iter().map(|(n, _)| *n).collect()
    }

    /// A built-in profile by name, or a TOML file when `name_or_path` contains a `/` or
    /// ends in `.toml`.
    ///
    /// # Errors
    /// [`Error::Profile`] naming the profile and what is wrong with it.
    pub fn load(name_or_path: &str) -> Result<Self> {
        let (origin, text) = if name_or_path.contains('/')
            || Path::new(name_or_path)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("toml"))
        {
            let text = std::fs::read_to_string(Path::new(name_or_path))
                .map_err(|e| Error::Profile(format!("{name_or_path}: {e}")))?;
            (name_or_path.to_owned(), text)
        } else {
            let (_, text) = BUILT_IN
                .iter()
                .find(|(n, _)| *n == name_or_path)
                .ok_or_else(|| {
                    Error::Profile(format!(
                        "no built-in profile {name_or_path:?}; there are {}",
                        Self::built_in_names().join(", ")
                    ))
                })?;
            (name_or_path.to_owned(), (*text).to_owned())
        };
        let profile: Self =
            toml::from_str(&text).map_err(|e| Error::Profile(format!("{origin}: {e}")))?;
        profile
            .validate()
            .map_err(|e| Error::Profile(format!("{origin}: {e}")))?;
        Ok(profile)
    }

    fn validate(&self) -> std::result::Result<(), String> {
        for (field, v) in [
            ("idle_watts", self.idle_watts),
            ("cpu_watts", self.cpu_watts),
            ("disk_watts", self.disk_watts),
            ("network_joules_per_byte", self.network_joules_per_byte),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{field} must be a finite number >= 0, not {v}"));
            }
        }
        if self.name.is_empty() {
            return Err("name must not be empty".into());
        }
        Ok(())
    }

    /// The profile as TOML, for `oedd meter calibrate` to print.
    #[must_use]
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

/// The model source.
#[derive(Debug)]
pub struct Model {
    profile: Profile,
}

impl Model {
    /// A model with `profile`'s parameters.
    #[must_use]
    pub fn new(profile: Profile) -> Self {
        Self { profile }
    }

    /// Its profile.
    #[must_use]
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Power for `a`, watts. Busy shares are clamped to 0..1 and a negative rate to 0, so
    /// a counter glitch cannot give a power below idle or an absurd one.
    #[must_use]
    pub fn watts(&self, a: &Activity) -> f64 {
        let p = &self.profile;
        p.idle_watts
            + p.cpu_watts * a.cpu_busy.clamp(0.0, 1.0)
            + p.disk_watts * a.disk_busy.clamp(0.0, 1.0)
            + p.network_joules_per_byte * a.network_bytes_per_second.max(0.0)
    }
}

/// Network rates are fitted in Gbit/s so every column has a similar scale.
const BYTES_PER_GBIT: f64 = 1.25e8;

/// Readings of a real source next to the activity of the same intervals, for fitting a
/// profile.
#[derive(Debug, Default)]
pub struct Calibration {
    rows: Vec<([f64; 4], f64)>,
}

/// A fitted profile and how well it fits.
#[derive(Debug, Clone)]
pub struct Fit {
    /// The profile with fitted parameters.
    pub profile: Profile,
    /// Root mean square error of the fit on the readings, watts.
    pub rmse_watts: f64,
    /// Readings used.
    pub samples: usize,
}

impl Calibration {
    /// Adds one interval.
    pub fn push(&mut self, a: &Activity, watts: f64) {
        if watts.is_finite() {
            let x = [
                1.0,
                a.cpu_busy.clamp(0.0, 1.0),
                a.disk_busy.clamp(0.0, 1.0),
                a.network_bytes_per_second.max(0.0) / BYTES_PER_GBIT,
            ];
            self.rows.push((x, watts));
        }
    }

    /// Readings so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no readings.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Least-squares fit of the four parameters, pulled weakly towards `base` so that an
    /// activity that never varied during calibration (say, no network traffic) keeps the
    /// base profile's coefficient instead of an arbitrary one. Negative coefficients are
    /// clamped to 0.
    ///
    /// # Errors
    /// [`Error::Profile`] with fewer than 3 readings.
    pub fn fit(&self, base: &Profile, name: &str) -> Result<Fit> {
        if self.rows.len() < 3 {
            return Err(Error::Profile(format!(
                "calibration needs at least 3 readings, it has {}",
                self.rows.len()
            )));
        }
        let prior = [
            base.idle_watts,
            base.cpu_watts,
            base.disk_watts,
            base.network_joules_per_byte * BYTES_PER_GBIT,
        ];
        let mut a = [[0.0f64; 4]; 4];
        let mut b = [0.0f64; 4];
        for (x, y) in &self.rows {
            for i in 0..4 {
                for j in 0..4 {
                    a[i][j] += x[i] * x[j];
                }
                b[i] += x[i] * y;
            }
        }
        // Ridge weight: tiny against the data (1e-6 per reading), on the coefficients
        // only; the intercept is left free.
        let lambda = 1e-6 * self.rows.len() as f64;
        for i in 1..4 {
            a[i][i] += lambda;
            b[i] += lambda * prior[i];
        }
        let beta =
            solve(a, b).ok_or_else(|| Error::Profile("the readings give no solution".into()))?;
        let beta = [
            beta[0],
            beta[1].max(0.0),
            beta[2].max(0.0),
            beta[3].max(0.0),
        ];
        let sse: f64 = self
            .rows
            .iter()
            .map(|(x, y)| {
                let p: f64 = x.iter().zip(beta).map(|(x, b)| x * b).sum();
                (y - p).powi(2)
            })
            .sum();
        Ok(Fit {
            profile: Profile {
                name: name.to_owned(),
                description: format!(
                    "{} calibrated on {} readings (base profile {})",
                    base.description,
                    self.rows.len(),
                    base.name
                ),
                idle_watts: beta[0].max(0.0),
                cpu_watts: beta[1],
                disk_watts: beta[2],
                network_joules_per_byte: beta[3] / BYTES_PER_GBIT,
            },
            rmse_watts: (sse / self.rows.len() as f64).sqrt(),
            samples: self.rows.len(),
        })
    }
}

/// Gaussian elimination with partial pivoting; `None` for a singular system.
fn solve(mut a: [[f64; 4]; 4], mut b: [f64; 4]) -> Option<[f64; 4]> {
    for col in 0..4 {
        let pivot = (col..4).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..4 {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *x -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; 4];
    for row in (0..4).rev() {
        let s: f64 = (row + 1..4).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile::load("arm-hdd").unwrap()
    }

    #[test]
    fn built_in_profiles_load_and_reproduce_their_anchors() {
        for name in Profile::built_in_names() {
            Profile::load(name).unwrap();
        }
        // The anchors in the files: the measured sequential-read draw of the study.
        let busy = Activity {
            seconds: 1.0,
            cpu_busy: 0.25,
            disk_busy: 1.0,
            network_bytes_per_second: 0.0,
        };
        let hdd = Model::new(profile()).watts(&busy);
        assert!((hdd - 13.65).abs() < 1e-9, "{hdd}");
        let ssd = Model::new(Profile::load("arm-ssd").unwrap()).watts(&busy);
        assert!((ssd - 8.66).abs() < 1e-9, "{ssd}");
        // The device study's ratio: the OED draws about 1/10 of a server node.
        let oed = Model::new(Profile::load("oed-gen1").unwrap()).watts(&Activity {
            seconds: 1.0,
            cpu_busy: 0.5,
            disk_busy: 1.0,
            network_bytes_per_second: 0.0,
        });
        let server = Model::new(Profile::load("x86-server").unwrap()).watts(&Activity {
            seconds: 1.0,
            cpu_busy: 0.3,
            disk_busy: 1.0,
            network_bytes_per_second: 0.0,
        });
        assert!((server / oed - 10.0).abs() < 1e-9, "{server} / {oed}");
    }

    #[test]
    fn model_arithmetic_and_clamping() {
        let m = Model::new(Profile {
            name: "t".into(),
            description: String::new(),
            idle_watts: 5.0,
            cpu_watts: 2.0,
            disk_watts: 3.0,
            network_joules_per_byte: 1e-8,
        });
        let a = Activity {
            seconds: 1.0,
            cpu_busy: 0.5,
            disk_busy: 0.25,
            network_bytes_per_second: 1e8,
        };
        assert!((m.watts(&a) - (5.0 + 1.0 + 0.75 + 1.0)).abs() < 1e-12);
        let wild = Activity {
            seconds: 1.0,
            cpu_busy: 7.0,
            disk_busy: -1.0,
            network_bytes_per_second: -5.0,
        };
        assert!((m.watts(&wild) - 7.0).abs() < 1e-12);
    }

    #[test]
    fn bad_profiles_are_refused_with_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            "name = \"x\"\nidle_watts = -1\ncpu_watts = 1\ndisk_watts = 1\nnetwork_joules_per_byte = 0\n",
        )
        .unwrap();
        let e = Profile::load(p.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("idle_watts"), "{e}");
        std::fs::write(&p, "name = \"x\"\nidle_watts = 1\n").unwrap();
        let e = Profile::load(p.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("missing field"), "{e}");
        let e = Profile::load("no-such").unwrap_err().to_string();
        assert!(e.contains("arm-hdd"), "{e}");
    }

    #[test]
    fn calibration_recovers_known_coefficients() {
        let truth = Model::new(Profile {
            name: "truth".into(),
            description: String::new(),
            idle_watts: 4.0,
            cpu_watts: 6.0,
            disk_watts: 2.5,
            network_joules_per_byte: 2e-8,
        });
        let mut cal = Calibration::default();
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..200 {
            let a = Activity {
                seconds: 1.0,
                cpu_busy: next(),
                disk_busy: next(),
                network_bytes_per_second: next() * 1.2e8,
            };
            cal.push(&a, truth.watts(&a) + (next() - 0.5) * 0.01);
        }
        let fit = cal.fit(&profile(), "fitted").unwrap();
        let p = &fit.profile;
        assert!((p.idle_watts - 4.0).abs() < 0.05, "{p:?}");
        assert!((p.cpu_watts - 6.0).abs() < 0.05, "{p:?}");
        assert!((p.disk_watts - 2.5).abs() < 0.05, "{p:?}");
        assert!((p.network_joules_per_byte - 2e-8).abs() < 1e-9, "{p:?}");
        assert!(fit.rmse_watts < 0.01, "{}", fit.rmse_watts);
        // The fitted profile round-trips through its TOML.
        let back: Profile = toml::from_str(&p.to_toml()).unwrap();
        assert_eq!(&back, p);
    }

    #[test]
    fn calibration_keeps_the_base_where_nothing_varied() {
        let base = profile();
        let mut cal = Calibration::default();
        for i in 0..50 {
            let cpu = f64::from(i) / 50.0;
            let a = Activity {
                seconds: 1.0,
                cpu_busy: cpu,
                disk_busy: 0.0,
                network_bytes_per_second: 0.0,
            };
            cal.push(&a, 3.0 + 8.0 * cpu);
        }
        let fit = cal.fit(&base, "f").unwrap();
        assert!(
            (fit.profile.cpu_watts - 8.0).abs() < 0.01,
            "{:?}",
            fit.profile
        );
        assert!(
            (fit.profile.idle_watts - 3.0).abs() < 0.01,
            "{:?}",
            fit.profile
        );
        assert!((fit.profile.disk_watts - base.disk_watts).abs() < 1e-6);
        assert!(Calibration::default().fit(&base, "f").is_err());
    }
}
