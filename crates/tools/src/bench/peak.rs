//! The theoretical peak of a run: what the links and disks could carry at best, as the
//! studies behind OED define it (the lower of the sum of links and the sum of disks), and
//! the tighter peak of OED's own data path, where a write crosses two links and stores
//! `(k+m)/k` of every byte. Every peak comes with its terms and their formulas, so a
//! report can print how it was reached.

use serde::Serialize;

/// What a peak is computed from. Rates are what the hardware does, not what OED does.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeakInputs {
    /// Drives in the cluster (`N`).
    pub drives: u32,
    /// Data shards per stripe.
    pub k: u32,
    /// Parity shards per stripe.
    pub m: u32,
    /// Drives the client sends its requests to (`G`, each a gateway for its requests).
    pub gateways: u32,
    /// Each drive's link, bits per second on the wire (both directions).
    pub drive_link_bit_s: Option<f64>,
    /// The client's link, bits per second on the wire.
    pub client_link_bit_s: Option<f64>,
    /// The links' MTU, bytes: with Ethernet's framing and TCP/IP headers it sets how much
    /// of a link's rate is payload.
    pub mtu: u32,
    /// Disks behind the drives (the lab's drives share one disk: 1).
    pub disks: u32,
    /// What each disk writes sequentially, MB/s (and reads, unless `disk_read_mb_s`).
    pub disk_mb_s: Option<f64>,
    /// What each disk reads sequentially, MB/s, where it differs from `disk_mb_s`.
    pub disk_read_mb_s: Option<f64>,
}

/// A phase's kind, for its peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Objects written.
    Write,
    /// Objects read whole.
    Read,
    /// A near-data operation over each object (the data is read where it lies).
    Op,
}

/// One bound of a peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Term {
    /// What bounds: `client link`, `drive links`, `disks`.
    pub name: &'static str,
    /// How the bound is computed, with the values put in.
    pub formula: String,
    /// The bound, object MB/s (10^6 bytes a second).
    pub mb_s: f64,
}

/// A peak: the least of its terms, `None` when no term could be computed (no rate
/// given).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Peak {
    /// The peak, object MB/s.
    pub mb_s: Option<f64>,
    /// Every bound, the binding one first.
    pub terms: Vec<Term>,
}

impl Peak {
    fn of(mut terms: Vec<Term>) -> Self {
        terms.sort_by(|a, b| a.mb_s.total_cmp(&b.mb_s));
        Self {
            mb_s: terms.first().map(|t| t.mb_s),
            terms,
        }
    }

    /// `achieved` (MB/s) as a percentage of the peak.
    #[must_use]
    pub fn percent(&self, achieved_mb_s: f64) -> Option<f64> {
        self.mb_s
            .filter(|p| *p > 0.0)
            .map(|p| 100.0 * achieved_mb_s / p)
    }
}

/// Bytes on the wire per Ethernet frame beyond the IP packet: preamble and start
/// delimiter 8, header 14, frame check 4, inter-frame gap 12.
pub const ETHERNET_FRAMING: u32 = 38;
/// IPv4 (20) and TCP (20, and 12 of timestamps) headers in every segment.
pub const TCP_IP_HEADERS: u32 = 52;

/// The TCP payload a link of `bit_s` carries with full-size frames of `mtu`, MB/s:
/// `bit_s / 8 x (mtu - 52) / (mtu + 38)` (1 Gbit/s, MTU 1500: 117.7 MB/s).
#[must_use]
pub fn goodput_mb_s(bit_s: f64, mtu: u32) -> f64 {
    let mtu = f64::from(mtu.max(TCP_IP_HEADERS + 1));
    bit_s / 8.0 * (mtu - f64::from(TCP_IP_HEADERS)) / (mtu + f64::from(ETHERNET_FRAMING)) / 1e6
}

fn f(x: f64) -> String {
    format!("{x:.1}")
}

impl PeakInputs {
    fn link(&self) -> Option<f64> {
        self.drive_link_bit_s.map(|b| goodput_mb_s(b, self.mtu))
    }

    /// The disks' bound on a phase that moves `share` of the object bytes through them,
    /// reading or writing.
    fn disks_term(&self, reads: bool, share: f64, how: &str) -> Option<Term> {
        let d = if reads {
            self.disk_read_mb_s.or(self.disk_mb_s)?
        } else {
            self.disk_mb_s?
        };
        let total = f64::from(self.disks) * d;
        Some(Term {
            name: "disks",
            formula: if (share - 1.0).abs() < f64::EPSILON {
                format!("{} disk(s) x {} MB/s = {}", self.disks, f(d), f(total))
            } else {
                format!(
                    "{} disk(s) x {} MB/s x {how} = {}",
                    self.disks,
                    f(d),
                    f(total * share)
                )
            },
            mb_s: total * share,
        })
    }

    fn client_term(&self) -> Option<Term> {
        let c = goodput_mb_s(self.client_link_bit_s?, self.mtu);
        Some(Term {
            name: "client link",
            formula: format!(
                "{} Mbit/s x ({} - {TCP_IP_HEADERS}) / ({} + {ETHERNET_FRAMING}) / 8 = {} MB/s of payload",
                self.client_link_bit_s.unwrap_or_default() / 1e6,
                self.mtu,
                self.mtu,
                f(c)
            ),
            mb_s: c,
        })
    }

    /// The busiest direction of the busiest drive link, as the share of the object bytes
    /// it carries, with a description; `None` for an operation (only results cross).
    ///
    /// With `N` drives, `G` gateways taking requests in turn and data placed evenly, each
    /// drive holds `1/N` of the data and `(k+m)/(k N)` of the shards written:
    /// - write, a gateway's incoming link: `1/G` from the client, plus the shards of other
    ///   gateways' objects, `(k+m)/(k N) x (1 - 1/G)`; a gateway's outgoing link: the
    ///   shards of its objects but its own, `(k+m)/k x (1 - 1/N) / G`; another drive's
    ///   incoming link: `(k+m)/(k N)`.
    /// - read (data shards only, as with every drive up): a gateway's outgoing link:
    ///   `1/G` to the client plus `(1/N)(1 - 1/G)` to other gateways; its incoming link
    ///   `(1 - 1/N)/G`; another drive's outgoing link `1/N`.
    #[must_use]
    pub fn link_load(&self, kind: Kind) -> Option<(f64, String)> {
        let n = f64::from(self.drives.max(1));
        let g = f64::from(self.gateways.clamp(1, self.drives.max(1)));
        let x = f64::from(self.k + self.m) / f64::from(self.k.max(1));
        let loads = match kind {
            Kind::Op => return None,
            Kind::Write => {
                let mut l = vec![
                    (
                        1.0 / g + x / n * (1.0 - 1.0 / g),
                        "a gateway's incoming link: 1/G + (k+m)/(k N) x (1 - 1/G)",
                    ),
                    (
                        x * (1.0 - 1.0 / n) / g,
                        "a gateway's outgoing link: (k+m)/k x (1 - 1/N) / G",
                    ),
                ];
                if g < n {
                    l.push((x / n, "another drive's incoming link: (k+m)/(k N)"));
                }
                l
            }
            Kind::Read => {
                let mut l = vec![
                    (
                        1.0 / g + (1.0 / n) * (1.0 - 1.0 / g),
                        "a gateway's outgoing link: 1/G + (1/N)(1 - 1/G)",
                    ),
                    (
                        (1.0 - 1.0 / n) / g,
                        "a gateway's incoming link: (1 - 1/N) / G",
                    ),
                ];
                if g < n {
                    l.push((1.0 / n, "another drive's outgoing link: 1/N"));
                }
                l
            }
        };
        loads
            .into_iter()
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(load, how)| (load, how.to_owned()))
    }

    /// The peak of OED's data path for `kind`: the least of the client's link, the
    /// drives' links (each carries [`Self::link_load`] of the object bytes at most) and
    /// the disks (a write stores `(k+m)/k` of every byte; a read and an operation read
    /// each byte once, from the data shards).
    #[must_use]
    pub fn oed(&self, kind: Kind) -> Peak {
        let mut terms = Vec::new();
        if kind != Kind::Op {
            terms.extend(self.client_term());
        }
        if let (Some(l), Some((load, how))) = (self.link(), self.link_load(kind)) {
            terms.push(Term {
                name: "drive links",
                formula: format!(
                    "{} MB/s per link / {load:.4}, the share of the object bytes on {how} (N = {}, G = {}, k = {}, m = {})",
                    f(l),
                    self.drives,
                    self.gateways.clamp(1, self.drives.max(1)),
                    self.k,
                    self.m
                ),
                mb_s: l / load,
            });
        }
        let share = match kind {
            Kind::Write => f64::from(self.k) / f64::from((self.k + self.m).max(1)),
            Kind::Read | Kind::Op => 1.0,
        };
        terms.extend(self.disks_term(kind != Kind::Write, share, "k/(k+m)"));
        Peak::of(terms)
    }

    /// The studies' theoretical peak performance: the lower of the sum of the drives'
    /// links and the sum of the disks, whatever the data path.
    #[must_use]
    pub fn tpp(&self) -> Peak {
        let mut terms = Vec::new();
        if let Some(l) = self.link() {
            terms.push(Term {
                name: "drive links",
                formula: format!(
                    "{} links x {} MB/s = {}",
                    self.drives,
                    f(l),
                    f(f64::from(self.drives) * l)
                ),
                mb_s: f64::from(self.drives) * l,
            });
        }
        terms.extend(self.disks_term(false, 1.0, ""));
        Peak::of(terms)
    }
}

/// A number and the unit after it (trimmed, lower case), as in `4MiB` or `1gbit`.
pub(super) fn number_and_unit(s: &str) -> Option<(f64, String)> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    Some((num.parse().ok()?, unit.trim().to_ascii_lowercase()))
}

/// A rate written as tc writes them: a number and `bit`, `kbit`, `mbit`, `gbit` (or
/// `k`, `m`, `g`, bits), decimal prefixes; bits per second.
///
/// # Errors
/// A message naming what is not understood.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let (v, unit) =
        number_and_unit(s).ok_or_else(|| format!("{s:?} is not a rate like 1gbit or 100mbit"))?;
    if unit.ends_with("bps") {
        return Err(format!(
            "{s:?}: tc reads bps as bytes a second; write the rate in bits: mbit, gbit"
        ));
    }
    let mult = match unit.trim_end_matches("/s") {
        "" | "bit" => 1.0,
        "k" | "kbit" => 1e3,
        "m" | "mbit" => 1e6,
        "g" | "gbit" => 1e9,
        _ => {
            return Err(format!(
                "{s:?}: unit {unit:?} is not bit, kbit, mbit or gbit"
            ));
        }
    };
    if v <= 0.0 || !v.is_finite() {
        return Err(format!("{s:?}: a rate must be above 0"));
    }
    Ok(v * mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(gateways: u32) -> PeakInputs {
        PeakInputs {
            drives: 6,
            k: 4,
            m: 2,
            gateways,
            drive_link_bit_s: Some(1e9),
            client_link_bit_s: Some(10e9),
            mtu: 1500,
            disks: 6,
            disk_mb_s: Some(200.0),
            disk_read_mb_s: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn goodput_counts_ethernet_framing_and_headers() {
        // 1e9 / 8 x 1448 / 1538 = 117,685,305 B/s.
        assert!(close(goodput_mb_s(1e9, 1500), 117.685_305_591_677_5));
        // 100 Mbit/s: 11.77 MB/s = 94.1 Mbit/s of payload.
        assert!(close(goodput_mb_s(1e8, 1500) * 8.0, 94.148_244_473_342));
        // Jumbo frames: 8948 / 9038.
        assert!(close(goodput_mb_s(1e9, 9000), 125.0 * 8948.0 / 9038.0));
    }

    #[test]
    fn the_write_peak_of_six_drives_4_2_at_one_gigabit() {
        // Every drive a gateway: the gateway's incoming link carries
        // 1/6 + 1.5/6 x 5/6 = 0.375 of the bytes; 117.685 / 0.375 = 313.83 MB/s.
        let p = lab(6).oed(Kind::Write);
        let links = p.terms.iter().find(|t| t.name == "drive links").unwrap();
        assert!(close(links.mb_s, 117.685_305_591_677_5 / 0.375));
        // Disks: 6 x 200 x 4/6 = 800; client 1176.9: the links bind.
        assert_eq!(p.terms[0].name, "drive links");
        assert!(close(p.mb_s.unwrap(), 313.827_481_577_806_7));
        assert!(
            p.terms
                .iter()
                .any(|t| t.name == "disks" && close(t.mb_s, 800.0))
        );
        // Written as the issue puts it: N L / (1 + (k+m)/k (1 - 1/N)).
        assert!(close(
            p.mb_s.unwrap(),
            6.0 * 117.685_305_591_677_5 / (1.0 + 1.5 * 5.0 / 6.0)
        ));
    }

    #[test]
    fn the_read_peak_and_one_gateway() {
        // Read, G = N = 6: a gateway's outgoing link carries 1/6 + 1/6 x 5/6 = 11/36.
        let p = lab(6).oed(Kind::Read);
        assert!(close(p.mb_s.unwrap(), 117.685_305_591_677_5 * 36.0 / 11.0));
        // One gateway: it carries every byte to the client (load 1) for a read, and for
        // a write sends on 1.5 x 5/6 = 1.25 of each byte, more than it takes in.
        let one = lab(1);
        assert!(close(
            one.oed(Kind::Read).mb_s.unwrap(),
            117.685_305_591_677_5
        ));
        let (load, how) = one.link_load(Kind::Write).unwrap();
        assert!(close(load, 1.25), "{load}");
        assert!(how.contains("outgoing"));
    }

    #[test]
    fn the_studies_tpp_and_missing_rates() {
        // The ARM cluster of the file-system study: min(4 x 124.1, 8 x 115) = 496.4.
        let study = PeakInputs {
            drives: 4,
            k: 1,
            m: 0,
            gateways: 4,
            drive_link_bit_s: None,
            client_link_bit_s: None,
            mtu: 1500,
            disks: 8,
            disk_mb_s: Some(115.0),
            disk_read_mb_s: None,
        };
        assert!(close(study.tpp().mb_s.unwrap(), 920.0));
        let t = lab(6).tpp();
        assert!(close(t.mb_s.unwrap(), 6.0 * 117.685_305_591_677_5));
        // Nothing known: no peak and no percentage.
        let none = PeakInputs {
            drive_link_bit_s: None,
            client_link_bit_s: None,
            disk_mb_s: None,
            ..lab(6)
        };
        assert_eq!(none.oed(Kind::Write).mb_s, None);
        assert_eq!(none.oed(Kind::Write).percent(100.0), None);
        // An operation has no link term: only its answers cross.
        let op = lab(6).oed(Kind::Op);
        assert_eq!(op.terms.len(), 1);
        assert!(close(op.mb_s.unwrap(), 1200.0));
        assert!(close(op.percent(600.0).unwrap(), 50.0));
        // Disks that read faster than they write: reads and operations use that.
        let fast_reads = PeakInputs {
            disk_read_mb_s: Some(300.0),
            ..lab(6)
        };
        assert!(close(fast_reads.oed(Kind::Op).mb_s.unwrap(), 1800.0));
        assert!(
            fast_reads
                .oed(Kind::Write)
                .terms
                .iter()
                .any(|t| t.name == "disks" && close(t.mb_s, 800.0))
        );
    }

    #[test]
    fn rates_read_as_tc_writes_them() {
        assert!(close(parse_rate("1gbit").unwrap(), 1e9));
        assert!(close(parse_rate("100mbit").unwrap(), 1e8));
        assert!(close(parse_rate("2.5G").unwrap(), 2.5e9));
        assert!(close(parse_rate("940mbit/s").unwrap(), 9.4e8));
        assert!(parse_rate("940mbps").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("1tbit").is_err());
        assert!(parse_rate("0gbit").is_err());
    }
}
