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
    /// Joules over the phase; `None` when a reading is missing or the counter went back
    /// (the drive restarted).
    pub joules: Option<f64>,
    /// `measured` or `modelled`.
    pub method: Option<String>,
    /// The meter's source (`model:oed-gen1`, `hwmon:ina226`...).
    pub source: Option<String>,
}

/// The energy of a phase, from the drives' `oed_energy_joules_total` at its start and end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Energy {
    /// Joules of the drives that answered at both ends, together.
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

/// The energy between readings `start` and `end` (one per meter, in the same order,
/// `None` where the meter did not answer) over `seconds` that moved `bytes`; `None` when
/// no drive gave a figure.
#[must_use]
pub fn energy(
    names: &[String],
    start: &[Option<Reading>],
    end: &[Option<Reading>],
    seconds: f64,
    bytes: u64,
) -> Option<Energy> {
    let drives: Vec<DriveEnergy> = names
        .iter()
        .zip(start.iter().zip(end))
        .map(|(name, (a, b))| {
            let known = b.as_ref().or(a.as_ref());
            DriveEnergy {
                drive: known
                    .and_then(|r| r.drive.clone())
                    .unwrap_or_else(|| name.clone()),
                joules: match (a, b) {
                    (Some(a), Some(b)) if b.joules >= a.joules => Some(b.joules - a.joules),
                    _ => None,
                },
                method: known.map(|r| r.method.clone()),
                source: known.map(|r| r.source.clone()),
            }
        })
        .collect();
    if drives.iter().all(|d| d.joules.is_none()) {
        return None;
    }
    let joules: f64 = drives.iter().filter_map(|d| d.joules).sum();
    let measured = drives
        .iter()
        .all(|d| d.method.as_deref() == Some("measured"));
    #[allow(clippy::cast_precision_loss, reason = "bytes to GiB")]
    let gib = bytes as f64 / GIB;
    Some(Energy {
        joules,
        watts: if seconds > 0.0 { joules / seconds } else { 0.0 },
        j_per_gib: (gib > 0.0).then(|| joules / gib),
        edp: joules * seconds,
        source: if measured { "measured" } else { "modelled" }.to_owned(),
        complete: drives.iter().all(|d| d.joules.is_some()),
        drives,
    })
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
    /// Energy of the drives over the phase, joules (`None` with no meters).
    pub joules: Option<f64>,
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
        energy: Option<Energy>,
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
    /// Objects per phase.
    pub objects: u64,
    /// Requests in flight.
    pub clients: usize,
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
        let _ = writeln!(
            s,
            "{}: {} endpoint(s), {} objects of {} ({}) per phase, {} clients, {} repetition(s)",
            self.tool,
            self.endpoints.len(),
            self.objects,
            human_bytes(self.object_bytes),
            human_bytes(self.object_bytes * self.objects),
            self.clients,
            self.reps
        );
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
                opt(p.joules, 0),
                opt(p.watts, 1),
                opt(p.j_per_gib, 1),
                opt(p.edp, 0),
            );
            for e in &p.first_errors {
                let _ = writeln!(s, "    error: {e}");
            }
        }
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
        if self
            .phases
            .iter()
            .any(|p| p.energy.is_some() && p.seconds < 10.0)
        {
            let _ = writeln!(
                s,
                "\nnote: phases under 10 s: each end of a phase's energy is off by up to one meter period of the drives' power (docs/bench.md)"
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
            method: method.into(),
            source: format!("{method}-source"),
        })
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
        let e = energy(
            &names,
            &[reading(1000.0, "measured"), reading(50.0, "measured")],
            &[reading(1100.0, "measured"), reading(190.0, "measured")],
            8.0,
            2 << 30,
        )
        .unwrap();
        assert!((e.joules - 240.0).abs() < 1e-9);
        assert!((e.watts - 30.0).abs() < 1e-9);
        assert!((e.j_per_gib.unwrap() - 120.0).abs() < 1e-9);
        assert!((e.edp - 1920.0).abs() < 1e-9);
        assert_eq!(e.source, "measured");
        assert!(e.complete);
    }

    #[test]
    fn one_modelled_drive_makes_the_phase_modelled_and_gaps_are_said() {
        let names = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let e = energy(
            &names,
            &[
                reading(10.0, "measured"),
                reading(10.0, "modelled"),
                reading(500.0, "measured"),
            ],
            // c restarted: its counter went back, so it has no figure.
            &[
                reading(20.0, "measured"),
                reading(15.0, "modelled"),
                reading(3.0, "measured"),
            ],
            1.0,
            0,
        )
        .unwrap();
        assert_eq!(e.source, "modelled");
        assert!(!e.complete);
        assert!((e.joules - 15.0).abs() < 1e-9);
        assert_eq!(e.j_per_gib, None);
        assert_eq!(e.drives[2].joules, None);
        // No meter at all: no energy.
        assert_eq!(energy(&names[..1], &[None], &[None], 1.0, 1), None);
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
        let a = PhaseResult::new(Kind::Write, 1, m(10.0), &peak, &tpp, None);
        assert!((a.mb_s - 100.0).abs() < 1e-9);
        assert!((a.mib_s - 95.367_431_640_625).abs() < 1e-9);
        assert!((a.pct_peak.unwrap() - 50.0).abs() < 1e-9);
        assert!((a.pct_tpp.unwrap() - 25.0).abs() < 1e-9);
        assert!((a.objects_s - 25.0).abs() < 1e-9);
        assert!(a.ttfb_ms.is_none());
        // 0.5 CPU-s for 0.931 GiB.
        assert!((a.client_cpu_s_per_gib.unwrap() - 0.536_870_912).abs() < 1e-9);
        let b = PhaseResult::new(Kind::Write, 2, m(5.0), &peak, &tpp, None);
        let s = summarise(&[a, b]);
        assert_eq!(s.len(), 1);
        let pct = s[0].pct_peak.as_ref().unwrap();
        // 50% and 100%: mean 75, sample stdev 35.36.
        assert!((pct.mean - 75.0).abs() < 1e-9);
        assert!((pct.stdev - 35.355_339_059_327_38).abs() < 1e-9);
        assert_eq!(s[0].joules, None);
    }
}
