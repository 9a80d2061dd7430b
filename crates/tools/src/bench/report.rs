//! What a benchmark run reports, and the arithmetic behind it: throughput, latency
//! percentiles, energy per phase (joules from the drives' counters, watts, J/GiB, EDP),
//! the share of the peak, a summary over repetitions, and the table people read. The
//! JSON field names here are a contract (`docs/bench.md`): scripts read them.

use std::fmt::Write as _;

use serde::Serialize;

use super::meters::Reading;
use super::peak::{Kind, Peak, PeakInputs};

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;

/// The nearest-rank percentile `p` (0 < p <= 100) of `sorted` (ascending): the least
/// value with at least `p`% of the values at or below it; 0 for no values.
#[must_use]
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a rank among at most billions of requests"
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Latency percentiles, milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The slowest.
    pub max: f64,
}

impl Latency {
    /// The percentiles of `ms` (any order).
    #[must_use]
    pub fn of(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        Self {
            p50: percentile(&ms, 50.0),
            p90: percentile(&ms, 90.0),
            p99: percentile(&ms, 99.0),
            max: ms.last().copied().unwrap_or(0.0),
        }
    }
}

/// One drive's energy over a phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DriveEnergy {
    /// The drive's id, or its metrics URL when the page does not name it.
    pub drive: String,
    /// Joules over the phase; `None` when it cannot be known (`unknown` says why).
    pub joules: Option<f64>,
    /// Why `joules` is not known: a reading missing, no tick after an edge, the counter
    /// gone back (the drive restarted), or a counter that did not move.
    pub unknown: Option<String>,
    /// `measured` or `modelled`.
    pub method: Option<String>,
    /// The meter's source (`model:oed-gen1`, `hwmon:ina226`...).
    pub source: Option<String>,
    /// Whether both ends were interpolated between the meter's ticks around them (a
    /// drive that marks its ticks); `false`: the counter's difference, good to a meter
    /// period of power at each end.
    pub interpolated: bool,
}

/// The energy of a phase, from the drives' `oed_energy_joules_total` around its start
/// and end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Energy {
    /// Joules of the drives that gave a figure, together.
    pub joules: f64,
    /// Average power, watts: `joules / seconds`.
    pub watts: f64,
    /// Joules per GiB of object data moved: `joules / (bytes / 2^30)`.
    pub j_per_gib: Option<f64>,
    /// Energy-delay product, joule-seconds: `joules x seconds`.
    pub edp: f64,
    /// `measured` when every drive measured its power, else `modelled` (at least one
    /// drive's figure is an estimate).
    pub source: String,
    /// Whether every drive gave a figure; when not, `joules` is a lower bound.
    pub complete: bool,
    /// Each drive.
    pub drives: Vec<DriveEnergy>,
}

/// The drives' meters around one edge of a phase (its start or its end): read just
/// before it, and once more after each meter's next tick.
#[derive(Clone, Debug, Default)]
pub struct Edge {
    /// The moment, seconds since the Unix epoch.
    pub at: f64,
    /// Each meter's reading taken just before `at` (`None`: it did not answer).
    pub before: Vec<Option<Reading>>,
    /// Each meter's first reading of a tick after `at` (`None`: none came in time, or
    /// the meter does not mark its ticks).
    pub after: Vec<Option<Reading>>,
}

/// Drive `i`'s counter at `edge.at`, or why it cannot be known. Between the tick before
/// and the tick after, the counter is interpolated in time: the meter counts each
/// interval at one power, so this is the figure it would have counted at that moment.
/// Whether it was interpolated comes with it.
fn counter_at(edge: &Edge, i: usize, which: &str) -> Result<(f64, bool), String> {
    let before = edge.before.get(i).and_then(Option::as_ref);
    let after = edge.after.get(i).and_then(Option::as_ref);
    let Some(b) = before else {
        return Err(format!(
            "its /metrics did not answer with an OED meter's energy at the phase's {which}"
        ));
    };
    match (b.at, after.and_then(|a| a.at.map(|t| (t, a.joules)))) {
        (None, _) => Ok((b.joules, false)),
        // A tick at the edge or just past it (read a moment after, or a clock a little
        // ahead): the counter there.
        (Some(t0), _) if t0 >= edge.at => Ok((b.joules, true)),
        (Some(t0), Some((t1, j1))) if t1 > t0 => {
            let share = ((edge.at - t0) / (t1 - t0)).clamp(0.0, 1.0);
            Ok((b.joules + (j1 - b.joules) * share, true))
        }
        (Some(_), _) => Err(format!(
            "its meter did not tick within {} s after the phase's {which}",
            AFTER_EDGE.as_secs()
        )),
    }
}

/// How long the benchmark waits for each meter's next tick after a phase's edge.
pub const AFTER_EDGE: std::time::Duration = std::time::Duration::from_secs(5);

/// The energy over the phase between `start` and `end` (the readings in the order of
/// `names`, the meters' URLs), which lasted `seconds` and moved `bytes` (`None` when no
/// drive gave a figure), and why the drives without a figure have none (`None` when
/// every drive has one).
#[must_use]
pub fn energy(
    names: &[String],
    start: &Edge,
    end: &Edge,
    seconds: f64,
    bytes: u64,
) -> (Option<Energy>, Option<String>) {
    let drives: Vec<DriveEnergy> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let known = [&end.before, &start.before, &end.after]
                .into_iter()
                .find_map(|r| r.get(i).and_then(Option::as_ref));
            let figure = counter_at(start, i, "start").and_then(|(a, ia)| {
                let (b, ib) = counter_at(end, i, "end")?;
                if b > a {
                    Ok((b - a, ia && ib))
                } else if b < a {
                    Err("its counter went back: the drive restarted during the phase".into())
                } else if ia && ib {
                    Err("its meter counted no energy over the phase (failed readings)".into())
                } else {
                    Err(
                        "its counter did not move over the phase, which was shorter than \
                         its meter period (the drive does not mark its meter's ticks)"
                            .into(),
                    )
                }
            });
            let drive = known
                .and_then(|r| r.drive.clone())
                .unwrap_or_else(|| name.clone());
            let (joules, unknown, interpolated) = match figure {
                Ok((j, interpolated)) => (Some(j), None, interpolated),
                Err(why) => (None, Some(why), false),
            };
            DriveEnergy {
                drive,
                joules,
                unknown,
                method: known.map(|r| r.method.clone()),
                source: known.map(|r| r.source.clone()),
                interpolated,
            }
        })
        .collect();
    if drives.iter().all(|d| d.joules.is_none()) {
        return (None, Some(unknown_reason(&drives)));
    }
    let joules: f64 = drives.iter().filter_map(|d| d.joules).sum();
    let measured = drives
        .iter()
        .all(|d| d.method.as_deref() == Some("measured"));
    #[allow(clippy::cast_precision_loss, reason = "bytes to GiB")]
    let gib = bytes as f64 / GIB;
    let complete = drives.iter().all(|d| d.joules.is_some());
    let why = (!complete).then(|| unknown_reason(&drives));
    (
        Some(Energy {
            joules,
            watts: if seconds > 0.0 { joules / seconds } else { 0.0 },
            j_per_gib: (gib > 0.0).then(|| joules / gib),
            edp: joules * seconds,
            source: if measured { "measured" } else { "modelled" }.to_owned(),
            complete,
            drives,
        }),
        why,
    )
}

/// Why the drives without a figure have none, one clause per drive.
fn unknown_reason(drives: &[DriveEnergy]) -> String {
    if drives.is_empty() {
        return "no drive meters were given (--metrics)".into();
    }
    drives
        .iter()
        .filter_map(|d| d.unknown.as_ref().map(|u| format!("{}: {u}", d.drive)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// What one phase of one repetition did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseResult {
    /// `write`, `read` or `op`.
    pub phase: Kind,
    /// The repetition, from 1.
    pub rep: u32,
    /// Wall time from the first request to the last answer, seconds.
    pub seconds: f64,
    /// Object bytes moved (written, read, or operated on) by requests that succeeded.
    pub bytes: u64,
    /// Requests that succeeded.
    pub objects: u64,
    /// Requests that failed (an error status, a broken or short body, a timeout).
    pub errors: u64,
    /// The first few errors, as the client saw them.
    pub first_errors: Vec<String>,
    /// MiB/s (2^20 bytes a second).
    pub mib_s: f64,
    /// MB/s (10^6 bytes a second), the unit of the peak.
    pub mb_s: f64,
    /// Requests that succeeded, a second.
    pub objects_s: f64,
    /// Request latency, request sent to the end of the answer, ms.
    pub latency_ms: Latency,
    /// Time to the first byte of the answer (its status line), ms; reads only.
    pub ttfb_ms: Option<Latency>,
    /// The peak of OED's data path for this phase, MB/s.
    pub peak_mb_s: Option<f64>,
    /// `mb_s` as a percentage of `peak_mb_s`.
    pub pct_peak: Option<f64>,
    /// The studies' theoretical peak (least of the sums of links and of disks), MB/s.
    pub tpp_mb_s: Option<f64>,
    /// `mb_s` as a percentage of `tpp_mb_s`.
    pub pct_tpp: Option<f64>,
    /// Energy of the drives over the phase, joules (`None` when it cannot be known:
    /// `energy_unknown` says why).
    pub joules: Option<f64>,
    /// Why the phase's energy is not known, or (with `energy.complete` false) why some
    /// drives' is not, in which case `joules` is a lower bound.
    pub energy_unknown: Option<String>,
    /// Average power of the drives, watts.
    pub watts: Option<f64>,
    /// Joules per GiB moved.
    pub j_per_gib: Option<f64>,
    /// Energy-delay product, J*s.
    pub edp: Option<f64>,
    /// `measured` or `modelled` (any drive modelled makes the phase modelled).
    pub energy_source: Option<String>,
    /// The energy of each drive, and whether all gave one.
    pub energy: Option<Energy>,
    /// CPU time of the benchmark process over the phase, seconds.
    pub client_cpu_seconds: f64,
    /// The benchmark's CPU seconds per GiB moved: its own cost (1.0 is 1 GiB/s per core).
    pub client_cpu_s_per_gib: Option<f64>,
    /// When the phase started and ended, seconds since the run started (as the
    /// timeline's `t`).
    pub start_s: f64,
    /// When it ended.
    pub end_s: f64,
}

/// What a phase measured, before the arithmetic.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Wall time, seconds.
    pub seconds: f64,
    /// Object bytes moved by requests that succeeded.
    pub bytes: u64,
    /// Requests that succeeded.
    pub objects: u64,
    /// Requests that failed.
    pub errors: u64,
    /// The first errors.
    pub first_errors: Vec<String>,
    /// Latency of each request, ms.
    pub latency_ms: Vec<f64>,
    /// Time to first byte of each read, ms.
    pub ttfb_ms: Vec<f64>,
    /// The benchmark's CPU seconds over the phase.
    pub client_cpu_seconds: f64,
}

impl PhaseResult {
    /// The figures of `m`, a `kind` phase of repetition `rep`, against `peak` and the
    /// studies' `tpp`, with `energy`.
    #[must_use]
    #[allow(clippy::cast_precision_loss, reason = "byte counts to rates")]
    pub fn new(
        kind: Kind,
        rep: u32,
        m: Measured,
        peak: &Peak,
        tpp: &Peak,
        (energy, energy_unknown): (Option<Energy>, Option<String>),
    ) -> Self {
        let secs = m.seconds.max(f64::MIN_POSITIVE);
        let mb_s = m.bytes as f64 / secs / 1e6;
        let gib = m.bytes as f64 / GIB;
        Self {
            phase: kind,
            rep,
            seconds: m.seconds,
            bytes: m.bytes,
            objects: m.objects,
            errors: m.errors,
            first_errors: m.first_errors,
            mib_s: m.bytes as f64 / secs / MIB,
            mb_s,
            objects_s: m.objects as f64 / secs,
            latency_ms: Latency::of(m.latency_ms),
            ttfb_ms: (kind == Kind::Read).then(|| Latency::of(m.ttfb_ms)),
            peak_mb_s: peak.mb_s,
            pct_peak: peak.percent(mb_s),
            tpp_mb_s: tpp.mb_s,
            pct_tpp: tpp.percent(mb_s),
            joules: energy.as_ref().map(|e| e.joules),
            energy_unknown,
            watts: energy.as_ref().map(|e| e.watts),
            j_per_gib: energy.as_ref().and_then(|e| e.j_per_gib),
            edp: energy.as_ref().map(|e| e.edp),
            energy_source: energy.as_ref().map(|e| e.source.clone()),
            energy,
            client_cpu_seconds: m.client_cpu_seconds,
            client_cpu_s_per_gib: (gib > 0.0).then(|| m.client_cpu_seconds / gib),
            start_s: 0.0,
            end_s: m.seconds,
        }
    }
}

impl PhaseResult {
    /// The table's line on energy that is not known, when some is not.
    fn energy_note(&self) -> Option<String> {
        let why = self.energy_unknown.as_ref()?;
        Some(if self.joules.is_none() {
            format!("energy unknown: {why}")
        } else {
            format!("energy of some drives unknown (J is at least the others'): {why}")
        })
    }
}

/// Mean, least, greatest and sample standard deviation of a figure over repetitions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Least.
    pub min: f64,
    /// Greatest.
    pub max: f64,
    /// Sample standard deviation (0 for one value).
    pub stdev: f64,
}

impl Spread {
    /// The spread of `values`; `None` for none.
    #[must_use]
    #[allow(clippy::cast_precision_loss, reason = "a count of repetitions")]
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = if values.len() > 1 {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
        } else {
            0.0
        };
        Some(Self {
            mean,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            stdev: var.sqrt(),
        })
    }
}

/// A phase over all repetitions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// The phase.
    pub phase: Kind,
    /// Repetitions.
    pub reps: usize,
    /// MiB/s.
    pub mib_s: Option<Spread>,
    /// % of the OED data-path peak.
    pub pct_peak: Option<Spread>,
    /// Joules.
    pub joules: Option<Spread>,
    /// J/GiB.
    pub j_per_gib: Option<Spread>,
    /// EDP, J*s.
    pub edp: Option<Spread>,
    /// Failed requests, all repetitions.
    pub errors: u64,
}

/// The summary of each phase in `results`, in the order phases first appear.
#[must_use]
pub fn summarise(results: &[PhaseResult]) -> Vec<Summary> {
    let mut kinds: Vec<Kind> = Vec::new();
    for r in results {
        if !kinds.contains(&r.phase) {
            kinds.push(r.phase);
        }
    }
    kinds
        .into_iter()
        .map(|k| {
            let of: Vec<&PhaseResult> = results.iter().filter(|r| r.phase == k).collect();
            let spread = |f: &dyn Fn(&PhaseResult) -> Option<f64>| -> Option<Spread> {
                let v: Vec<f64> = of.iter().filter_map(|r| f(r)).collect();
                if v.len() == of.len() {
                    Spread::of(&v)
                } else {
                    None
                }
            };
            Summary {
                phase: k,
                reps: of.len(),
                mib_s: spread(&|r| Some(r.mib_s)),
                pct_peak: spread(&|r| r.pct_peak),
                joules: spread(&|r| r.joules),
                j_per_gib: spread(&|r| r.j_per_gib),
                edp: spread(&|r| r.edp),
                errors: of.iter().map(|r| r.errors).sum(),
            }
        })
        .collect()
}

/// One point of the run's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the run started, at the end of the interval the rates cover (from
    /// the previous point, or the start).
    pub t: f64,
    /// The phase running when the point was taken (`write`, `read`, `op`), or `None`
    /// between phases.
    pub phase: Option<Kind>,
    /// The repetition.
    pub rep: u32,
    /// Object MiB/s since the previous sample.
    pub mib_s: f64,
    /// The drives' power since the previous sample, watts (from their energy counters).
    pub watts: Option<f64>,
}

/// The peak of one kind of phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhasePeak {
    /// The phase.
    pub phase: Kind,
    /// Its peak.
    #[serde(flatten)]
    pub peak: Peak,
}

/// A whole run: what was asked, the peaks, each phase of each repetition, the summary and
/// the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// `oedd bench` and the version.
    pub tool: String,
    /// When the run started, RFC 3339, UTC.
    pub started: String,
    /// The S3 endpoints, used in turn.
    pub endpoints: Vec<String>,
    /// The bucket.
    pub bucket: String,
    /// Bytes in each object.
    pub object_bytes: u64,
    /// Objects per phase (with `duration_s`, those a phase reads when no write comes
    /// before it).
    pub objects: u64,
    /// Each phase's length when phases are time-based (`--duration`), seconds.
    pub duration_s: Option<f64>,
    /// Requests in flight.
    pub clients: usize,
    /// How uploads were signed (`--signing`: `streaming-crc32c`, `streaming`, `sha256`,
    /// `unsigned`, `unsigned-crc32c`).
    pub signing: String,
    /// Repetitions.
    pub reps: u32,
    /// The near-data operation of an `op` phase.
    pub operation: Option<serde_json::Value>,
    /// What the peaks were computed from.
    pub peak_inputs: PeakInputs,
    /// The OED data-path peak of each phase kind run.
    pub peaks: Vec<PhasePeak>,
    /// The studies' theoretical peak.
    pub tpp: Peak,
    /// `measured`, `modelled` (any drive modelled in any phase), or `None` without meters.
    pub energy_source: Option<String>,
    /// The drives' metrics pages read for energy.
    pub meters: Vec<String>,
    /// The command run between phases.
    pub between_phases: Option<String>,
    /// What the environment emulated and what it could not (the lab writes it), as
    /// given.
    pub environment: Option<serde_json::Value>,
    /// Every phase of every repetition.
    pub phases: Vec<PhaseResult>,
    /// Each phase over the repetitions.
    pub summary: Vec<Summary>,
    /// Throughput and power over the run.
    pub timeline: Vec<Sample>,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

/// `b` in KiB, MiB or GiB, for people.
pub(crate) fn human_bytes(b: u64) -> String {
    #[allow(clippy::cast_precision_loss, reason = "display")]
    let b = b as f64;
    if b >= GIB {
        format!("{:.2} GiB", b / GIB)
    } else if b >= MIB {
        format!("{:.2} MiB", b / MIB)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

impl Run {
    /// The report for people: the run, its peaks with their formulas, where the energy
    /// figures come from, a line per phase and repetition, and the summary.
    #[must_use]
    pub fn table(&self) -> String {
        let mut s = String::new();
        self.preamble(&mut s);
        self.rows(&mut s);
        s
    }

    /// The run, where its energy comes from, the environment and the peaks.
    fn preamble(&self, s: &mut String) {
        let per_phase = self.duration_s.map_or_else(
            || {
                format!(
                    "{} objects of {} ({}) per phase",
                    self.objects,
                    human_bytes(self.object_bytes),
                    human_bytes(self.object_bytes * self.objects)
                )
            },
            |d| {
                format!(
                    "objects of {} for {d} s a phase",
                    human_bytes(self.object_bytes)
                )
            },
        );
        let _ = writeln!(
            s,
            "{}: {} endpoint(s), {per_phase}, {} clients, {} repetition(s)",
            self.tool,
            self.endpoints.len(),
            self.clients,
            self.reps
        );
        if let Ok(signing) = super::Signing::from_name(&self.signing) {
            let _ = writeln!(
                s,
                "uploads signed {} ({}), as {} send them",
                signing.name(),
                signing.payload(),
                signing.clients()
            );
        }
        match self.energy_source.as_deref() {
            Some("modelled") => {
                let sources: std::collections::BTreeSet<String> = self
                    .phases
                    .iter()
                    .filter_map(|p| p.energy.as_ref())
                    .flat_map(|e| e.drives.iter())
                    .filter(|d| d.method.as_deref() == Some("modelled"))
                    .filter_map(|d| d.source.clone())
                    .collect();
                let _ = writeln!(
                    s,
                    "ENERGY IS MODELLED: at least one drive has no power sensor and estimates its power ({}); an estimate, not a measurement",
                    sources.into_iter().collect::<Vec<_>>().join(", ")
                );
            }
            Some(src) => {
                let _ = writeln!(s, "energy: {src} by every drive's meter");
            }
            None => {
                let _ = writeln!(
                    s,
                    "energy: not known (no OED meters given with --metrics, or none answered)"
                );
            }
        }
        if let Some(env) = &self.environment {
            for key in ["emulated", "not_emulated"] {
                if let Some(list) = env.get(key).and_then(|v| v.as_array()) {
                    let items: Vec<&str> = list.iter().filter_map(|v| v.as_str()).collect();
                    let _ = writeln!(s, "{}: {}", key.replace('_', " "), items.join("; "));
                }
            }
        }
        for PhasePeak { phase, peak } in &self.peaks {
            let _ = writeln!(
                s,
                "peak of OED's data path, {}: {} MB/s",
                kind_name(*phase),
                opt(peak.mb_s, 1)
            );
            for t in &peak.terms {
                let _ = writeln!(s, "    {}: {}", t.name, t.formula);
            }
        }
        let _ = writeln!(
            s,
            "the studies' theoretical peak (least of the sums of links and disks): {} MB/s",
            opt(self.tpp.mb_s, 1)
        );
        for t in &self.tpp.terms {
            let _ = writeln!(s, "    {}: {}", t.name, t.formula);
        }
        if self.peaks.iter().all(|p| p.peak.mb_s.is_none()) {
            let _ = writeln!(
                s,
                "    (no rates given: --drive-link, --client-link and --disk-mb-s set them)"
            );
        }
    }

    /// Each phase over the repetitions, when there are several.
    fn summary_rows(&self, s: &mut String) {
        if self.reps > 1 {
            let _ = writeln!(
                s,
                "\nover {} repetitions (mean, min-max, stdev):",
                self.reps
            );
            for sm in &self.summary {
                let show = |name: &str, v: &Option<Spread>, d: usize| -> String {
                    v.as_ref().map_or_else(String::new, |v| {
                        format!(
                            "  {name} {:.d$} ({:.d$}-{:.d$}, sd {:.d$})",
                            v.mean, v.min, v.max, v.stdev
                        )
                    })
                };
                let _ = writeln!(
                    s,
                    "{:<6}{}{}{}{}  errors {}",
                    kind_name(sm.phase),
                    show("MiB/s", &sm.mib_s, 1),
                    show("%peak", &sm.pct_peak, 1),
                    show("J/GiB", &sm.j_per_gib, 1),
                    show("EDP", &sm.edp, 0),
                    sm.errors
                );
            }
        }
    }

    /// A line per phase and repetition, the summary and the client's cost.
    fn rows(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "\n{:<6}{:>4}{:>9}{:>9}{:>8}{:>8}{:>8}{:>8}{:>9}{:>9}{:>7}{:>7}{:>7}{:>9}{:>7}{:>8}{:>11}",
            "phase",
            "rep",
            "MiB/s",
            "MB/s",
            "obj/s",
            "p50ms",
            "p90ms",
            "p99ms",
            "maxms",
            "ttfb50",
            "errors",
            "%peak",
            "%TPP",
            "J",
            "W",
            "J/GiB",
            "EDP J*s"
        );
        for p in &self.phases {
            let joules = match (&p.energy, p.joules) {
                (Some(e), Some(j)) if !e.complete => format!(">{j:.0}"),
                (_, Some(j)) => format!("{j:.0}"),
                (_, None) => "unknown".to_owned(),
            };
            let _ = writeln!(
                s,
                "{:<6}{:>4}{:>9.1}{:>9.1}{:>8.1}{:>8.1}{:>8.1}{:>8.1}{:>9.1}{:>9}{:>7}{:>7}{:>7}{:>9}{:>7}{:>8}{:>11}",
                kind_name(p.phase),
                p.rep,
                p.mib_s,
                p.mb_s,
                p.objects_s,
                p.latency_ms.p50,
                p.latency_ms.p90,
                p.latency_ms.p99,
                p.latency_ms.max,
                opt(p.ttfb_ms.as_ref().map(|t| t.p50), 1),
                p.errors,
                opt(p.pct_peak, 1),
                opt(p.pct_tpp, 1),
                joules,
                opt(p.watts, 1),
                opt(p.j_per_gib, 1),
                opt(p.edp, 0),
            );
            for e in &p.first_errors {
                let _ = writeln!(s, "    error: {e}");
            }
            if let Some(note) = p.energy_note() {
                let _ = writeln!(s, "    {note}");
            }
        }
        self.summary_rows(s);
        if self.phases.iter().any(|p| {
            p.seconds < 10.0
                && p.energy.as_ref().is_some_and(|e| {
                    e.drives
                        .iter()
                        .any(|d| d.joules.is_some() && !d.interpolated)
                })
        }) {
            let _ = writeln!(
                s,
                "\nnote: phases under 10 s on drives that do not mark their meter's ticks: each end of such a drive's energy is off by up to one meter period of its power (docs/bench.md)"
            );
        }
        let cpu: Vec<String> = self
            .phases
            .iter()
            .filter_map(|p| {
                p.client_cpu_s_per_gib
                    .map(|c| format!("{} {c:.2}", kind_name(p.phase)))
            })
            .collect();
        if !cpu.is_empty() {
            let _ = writeln!(
                s,
                "\nthis client's CPU-s per GiB: {} (1.0 = 1 GiB/s per core)",
                cpu.join(", ")
            );
        }
    }
}

/// A phase's name as the JSON writes it.
#[must_use]
pub fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Write => "write",
        Kind::Read => "read",
        Kind::Op => "op",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::unnecessary_wraps, reason = "a reading as the meters give it")]
    fn reading(j: f64, method: &str) -> Option<Reading> {
        Some(Reading {
            drive: Some("d".into()),
            joules: j,
            at: None,
            method: method.into(),
            source: format!("{method}-source"),
        })
    }

    /// A reading of a meter that marks its ticks: `j` joules counted at `at`.
    #[allow(clippy::unnecessary_wraps, reason = "a reading as the meters give it")]
    fn tick(j: f64, at: f64) -> Option<Reading> {
        Some(Reading {
            at: Some(at),
            ..reading(j, "modelled").unwrap()
        })
    }

    /// An edge at `at` with readings before it and none after (drives that do not mark
    /// their ticks).
    fn plain(at: f64, before: Vec<Option<Reading>>) -> Edge {
        Edge {
            at,
            after: vec![None; before.len()],
            before,
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        // 1..=10: p50 is the 5th value, p90 the 9th, p99 the 10th.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert!((percentile(&v, 50.0) - 5.0).abs() < 1e-12);
        assert!((percentile(&v, 90.0) - 9.0).abs() < 1e-12);
        assert!((percentile(&v, 99.0) - 10.0).abs() < 1e-12);
        // 200 values 1..=200: p99 is rank 198.
        let w: Vec<f64> = (1..=200).map(f64::from).collect();
        assert!((percentile(&w, 99.0) - 198.0).abs() < 1e-12);
        assert!((percentile(&[7.0], 50.0) - 7.0).abs() < 1e-12);
        assert!(percentile(&[], 50.0).abs() < 1e-12);
        let l = Latency::of(vec![3.0, 1.0, 2.0, 4.0]);
        assert_eq!((l.p50, l.p90, l.p99, l.max), (2.0, 4.0, 4.0, 4.0));
    }

    #[test]
    fn energy_per_gib_and_edp_worked_by_hand() {
        // Two drives: 100 J and 140 J over 8 s moving 2 GiB: 240 J, 30 W, 120 J/GiB,
        // EDP 240 x 8 = 1920 J*s.
        let names = vec!["a".to_owned(), "b".to_owned()];
        let (e, why) = energy(
            &names,
            &plain(
                0.0,
                vec![reading(1000.0, "measured"), reading(50.0, "measured")],
            ),
            &plain(
                8.0,
                vec![reading(1100.0, "measured"), reading(190.0, "measured")],
            ),
            8.0,
            2 << 30,
        );
        let e = e.unwrap();
        assert_eq!(why, None);
        assert!((e.joules - 240.0).abs() < 1e-9);
        assert!((e.watts - 30.0).abs() < 1e-9);
        assert!((e.j_per_gib.unwrap() - 120.0).abs() < 1e-9);
        assert!((e.edp - 1920.0).abs() < 1e-9);
        assert_eq!(e.source, "measured");
        assert!(e.complete);
        assert!(!e.drives[0].interpolated);
    }

    /// A phase of 0.4 s inside one meter period of 1 s: each end lies between two ticks,
    /// and the counter is interpolated there. Ticks at 10.0 (100 J) and 11.0 (110 J):
    /// 10 W. The phase from 10.2 to 10.6 used 4 J, not the 0 the counter's difference
    /// gives.
    #[test]
    fn a_phase_shorter_than_a_meter_period_gets_its_share_of_the_ticks() {
        let names = vec!["a".to_owned()];
        let start = Edge {
            at: 10.2,
            before: vec![tick(100.0, 10.0)],
            after: vec![tick(110.0, 11.0)],
        };
        let end = Edge {
            at: 10.6,
            before: vec![tick(100.0, 10.0)],
            after: vec![tick(110.0, 11.0)],
        };
        let (e, why) = energy(&names, &start, &end, 0.4, 1 << 30);
        let e = e.unwrap();
        assert_eq!(why, None);
        assert!((e.joules - 4.0).abs() < 1e-9, "{}", e.joules);
        assert!((e.watts - 10.0).abs() < 1e-9);
        assert!(e.drives[0].interpolated);
        // The same ends without tick marks: the counter did not move, so unknown, and
        // said why; never 0.
        let (e, why) = energy(
            &names,
            &plain(10.2, vec![reading(100.0, "modelled")]),
            &plain(10.6, vec![reading(100.0, "modelled")]),
            0.4,
            1 << 30,
        );
        assert_eq!(e, None);
        assert!(why.unwrap().contains("did not move"));
    }

    #[test]
    fn ends_a_tick_apart_and_clocks_slightly_off() {
        let names = vec!["a".to_owned()];
        // The start between ticks 1 and 2 (10 W), the end between ticks 3 and 4 (20 W):
        // 0.5 s x 10 W + (tick 2 to 3: 15 J) + 0.25 s x 20 W = 25 J.
        let start = Edge {
            at: 1.5,
            before: vec![tick(10.0, 1.0)],
            after: vec![tick(20.0, 2.0)],
        };
        let end = Edge {
            at: 3.25,
            before: vec![tick(35.0, 3.0)],
            after: vec![tick(55.0, 4.0)],
        };
        let (e, _) = energy(&names, &start, &end, 1.75, 0);
        assert!((e.unwrap().joules - 25.0).abs() < 1e-9);
        // A drive's clock ahead of the benchmark's: its tick "before" is after the edge;
        // the edge then counts from that tick, not before it.
        let ahead = Edge {
            at: 0.9,
            before: vec![tick(10.0, 1.0)],
            after: vec![tick(20.0, 2.0)],
        };
        let (e, _) = energy(&names, &ahead, &end, 2.35, 0);
        assert!((e.unwrap().joules - 30.0).abs() < 1e-9);
        // No tick after the end within the wait: unknown, with the reason.
        let stuck = Edge {
            at: 3.25,
            before: vec![tick(35.0, 3.0)],
            after: vec![None],
        };
        let (e, why) = energy(&names, &start, &stuck, 1.75, 0);
        assert_eq!(e, None);
        assert!(why.unwrap().contains("did not tick"), "reason");
    }

    #[test]
    fn one_modelled_drive_makes_the_phase_modelled_and_gaps_are_said() {
        let names = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let (e, why) = energy(
            &names,
            &plain(
                0.0,
                vec![
                    reading(10.0, "measured"),
                    reading(10.0, "modelled"),
                    reading(500.0, "measured"),
                ],
            ),
            // c restarted: its counter went back, so it has no figure.
            &plain(
                1.0,
                vec![
                    reading(20.0, "measured"),
                    reading(15.0, "modelled"),
                    reading(3.0, "measured"),
                ],
            ),
            1.0,
            0,
        );
        let e = e.unwrap();
        assert_eq!(e.source, "modelled");
        assert!(!e.complete);
        assert!((e.joules - 15.0).abs() < 1e-9);
        assert_eq!(e.j_per_gib, None);
        assert_eq!(e.drives[2].joules, None);
        assert!(why.unwrap().contains("went back"));
        // No meter answered: no energy, and why.
        let (e, why) = energy(
            &names[..1],
            &plain(0.0, vec![None]),
            &plain(1.0, vec![None]),
            1.0,
            1,
        );
        assert_eq!(e, None);
        assert!(
            why.unwrap()
                .contains("did not answer with an OED meter's energy")
        );
        // No meters at all.
        let (e, why) = energy(&[], &Edge::default(), &Edge::default(), 1.0, 1);
        assert_eq!(e, None);
        assert!(why.unwrap().contains("--metrics"));
    }

    #[test]
    fn a_phase_against_its_peak_and_the_summary() {
        let peak = Peak {
            mb_s: Some(200.0),
            terms: vec![],
        };
        let tpp = Peak {
            mb_s: Some(400.0),
            terms: vec![],
        };
        let m = |secs: f64| Measured {
            seconds: secs,
            bytes: 1_000_000_000,
            objects: 250,
            latency_ms: vec![1.0, 2.0],
            client_cpu_seconds: 0.5,
            ..Measured::default()
        };
        // 1e9 bytes in 10 s: 100 MB/s = 95.37 MiB/s, 50% of 200, 25% of 400.
        let a = PhaseResult::new(Kind::Write, 1, m(10.0), &peak, &tpp, (None, None));
        assert!((a.mb_s - 100.0).abs() < 1e-9);
        assert!((a.mib_s - 95.367_431_640_625).abs() < 1e-9);
        assert!((a.pct_peak.unwrap() - 50.0).abs() < 1e-9);
        assert!((a.pct_tpp.unwrap() - 25.0).abs() < 1e-9);
        assert!((a.objects_s - 25.0).abs() < 1e-9);
        assert!(a.ttfb_ms.is_none());
        // 0.5 CPU-s for 0.931 GiB.
        assert!((a.client_cpu_s_per_gib.unwrap() - 0.536_870_912).abs() < 1e-9);
        let b = PhaseResult::new(Kind::Write, 2, m(5.0), &peak, &tpp, (None, None));
        let s = summarise(&[a, b]);
        assert_eq!(s.len(), 1);
        let pct = s[0].pct_peak.as_ref().unwrap();
        // 50% and 100%: mean 75, sample stdev 35.36.
        assert!((pct.mean - 75.0).abs() < 1e-9);
        assert!((pct.stdev - 35.355_339_059_327_38).abs() < 1e-9);
        assert_eq!(s[0].joules, None);
    }
}
