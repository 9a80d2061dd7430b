//! Power sources and how one is chosen. A [`Source`] gives a [`Sample`] per sampler tick:
//! watts, and the joules of the interval when the source counts energy itself (hwmon
//! `energy*_input`, RAPL). Detection tries hwmon, then RAPL, then a configured external
//! command; when none works, the device model answers, labelled `modelled`. Every source
//! that is skipped leaves a reason for the log, so an operator can see why a sensor was
//! not used.

mod command;
mod hwmon;
pub mod model;
mod rapl;

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use command::Command;
pub use hwmon::Hwmon;
pub use model::{Activity, Model, Profile};
pub use rapl::Rapl;

use crate::{Result, Roots};

/// Whether a power figure was measured by a sensor or computed by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Read from a sensor or meter.
    Measured,
    /// Computed from activity counters and a device profile.
    Modelled,
}

impl Method {
    /// The label value: `measured` or `modelled`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Measured => "measured",
            Self::Modelled => "modelled",
        }
    }
}

/// One reading of a source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Average power since the previous reading (or instantaneous, for sources that only
    /// know that), watts.
    pub watts: f64,
    /// Energy since the previous reading, joules, when the source counts energy itself.
    pub joules: Option<f64>,
}

/// Which source to use (`power_source` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Choice {
    /// hwmon, then RAPL, then the command if one is configured, then the model.
    #[default]
    Auto,
    /// Only hwmon (the model if it fails).
    Hwmon,
    /// Only RAPL (the model if it fails).
    Rapl,
    /// Only the external command (the model if it fails).
    Command,
    /// The model, even if a sensor exists.
    Model,
    /// No power or energy metrics.
    None,
}

/// What detection needs to know.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Which source.
    pub choice: Choice,
    /// Restrict hwmon to the device whose `name` (or directory, `hwmon3`) is this.
    pub hwmon: Option<String>,
    /// A shell command that prints watts.
    pub command: Option<String>,
    /// How long the command may run.
    pub command_timeout: Duration,
    /// The profile the model uses.
    pub profile: Profile,
}

/// A power source.
#[derive(Debug)]
pub enum Source {
    /// A hwmon power or energy channel.
    Hwmon(Hwmon),
    /// RAPL package (or platform) energy through powercap.
    Rapl(Rapl),
    /// An external command.
    Command(Command),
    /// The device model.
    Model(Model),
}

impl Source {
    /// The `source` label: `hwmon:<name>`, `rapl`, `command`, `model:<profile>`.
    #[must_use]
    pub fn label(&self) -> String {
        match self {
            Self::Hwmon(h) => format!("hwmon:{}", h.name()),
            Self::Rapl(_) => "rapl".to_owned(),
            Self::Command(_) => "command".to_owned(),
            Self::Model(m) => format!("model:{}", m.profile().name),
        }
    }

    /// Measured or modelled.
    #[must_use]
    pub fn method(&self) -> Method {
        match self {
            Self::Model(_) => Method::Modelled,
            _ => Method::Measured,
        }
    }

    /// Reads the source. `activity` is what the host did since the previous tick (the
    /// model needs it; sensors ignore it). `Ok(None)` when there is nothing to report yet
    /// (the first reading of an energy counter, the model before two activity samples).
    ///
    /// # Errors
    /// The sensor could not be read or gave a value that is not a power; the caller
    /// counts it and adds no energy for the interval.
    pub fn sample(&mut self, now: Instant, activity: Option<&Activity>) -> Result<Option<Sample>> {
        match self {
            Self::Hwmon(h) => h.sample(now),
            Self::Rapl(r) => r.sample(now),
            Self::Command(c) => c.sample().map(Some),
            Self::Model(m) => Ok(activity.map(|a| Sample {
                watts: m.watts(a),
                joules: None,
            })),
        }
    }
}

/// Reads a sysfs file holding one non-negative integer.
///
/// # Errors
/// [`crate::Error::Io`] if it cannot be read, [`crate::Error::Parse`] if it holds
/// anything else.
pub(crate) fn read_u64(path: &std::path::Path) -> Result<u64> {
    let text = std::fs::read_to_string(path).map_err(|source| crate::Error::Io {
        path: path.to_owned(),
        source,
    })?;
    text.trim().parse().map_err(|_| {
        crate::Error::parse(
            path,
            format!("`{}` is not a non-negative integer", text.trim()),
        )
    })
}

/// Picks the source `config` asks for. Returns it with the reasons the sources tried
/// before it were skipped. `None` only for [`Choice::None`].
#[must_use]
pub fn detect(roots: &Roots, config: &SourceConfig) -> (Option<Source>, Vec<String>) {
    let mut skipped = Vec::new();
    let mut try_one = |choice: Choice| -> Option<Source> {
        let found = match choice {
            Choice::Hwmon => Hwmon::detect(roots, config.hwmon.as_deref()).map(|(h, passed)| {
                skipped.extend(passed.into_iter().map(|r| format!("hwmon: {r}")));
                Source::Hwmon(h)
            }),
            Choice::Rapl => Rapl::detect(roots).map(Source::Rapl),
            Choice::Command => match &config.command {
                Some(cmd) => Command::new(cmd, config.command_timeout).map(Source::Command),
                None => Err(crate::Error::Unavailable(
                    "no power_command is configured".into(),
                )),
            },
            _ => unreachable!("only sensors are tried here"),
        };
        match found {
            Ok(s) => Some(s),
            Err(e) => {
                skipped.push(format!("{}: {e}", format!("{choice:?}").to_lowercase()));
                None
            }
        }
    };
    let sensor = match config.choice {
        Choice::None => return (None, skipped),
        Choice::Model => None,
        Choice::Auto => {
            let mut order = vec![Choice::Hwmon, Choice::Rapl];
            if config.command.is_some() {
                order.push(Choice::Command);
            }
            order.into_iter().find_map(&mut try_one)
        }
        one => try_one(one),
    };
    let source = sensor.unwrap_or_else(|| Source::Model(Model::new(config.profile.clone())));
    (Some(source), skipped)
}
