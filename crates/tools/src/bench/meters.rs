//! The drives' energy meters as the benchmark reads them: `oed_energy_joules_total` (with
//! its `method` label, `measured` or `modelled`, and its `source`), the time of the
//! meter's tick it counts up to (`oed_energy_timestamp_seconds`), and the drive's name
//! from `oed_drive_info`, parsed from a `/metrics` page in Prometheus' text format.

use serde::Serialize;

/// One reading of one drive's meter.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reading {
    /// The drive's id (`oed_drive_info`'s `drive` label), when the page has it.
    pub drive: Option<String>,
    /// Energy since the drive started, joules.
    pub joules: f64,
    /// When the drive's meter counted `joules` (its last tick), seconds since the Unix
    /// epoch; `None` from a drive that does not say (before this was exported), or whose
    /// meter has not ticked yet.
    pub at: Option<f64>,
    /// `measured` or `modelled`.
    pub method: String,
    /// Where the figure comes from: `hwmon:ina226`, `rapl`, `model:oed-gen1`...
    pub source: String,
}

/// A sample's labels, names and values unescaped.
type Labels = Vec<(String, String)>;

/// The labels of a sample line (`name{a="x",b="y"} value`), unescaped, and its value.
fn sample(line: &str) -> Option<(&str, Labels, f64)> {
    let (head, value) = line.trim().rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let Some((name, rest)) = head.split_once('{') else {
        return Some((head, Vec::new(), value));
    };
    let body = rest.strip_suffix('}')?;
    let mut labels = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if chars.next() != Some('"') {
            return None;
        }
        let mut val = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => val.push('\n'),
                    c => val.push(c),
                },
                '"' => break,
                c => val.push(c),
            }
        }
        labels.push((key.trim().to_owned(), val));
    }
    Some((name, labels, value))
}

/// The energy reading in a `/metrics` page, `None` when the drive meters no energy
/// (`power_source = "none"`, or not an OED drive).
#[must_use]
pub fn parse(page: &str) -> Option<Reading> {
    let mut energy = None;
    let mut drive = None;
    let mut at = None;
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match name {
            "oed_energy_joules_total" => {
                energy = Some(Reading {
                    drive: None,
                    joules: value,
                    at: None,
                    method: label("method").unwrap_or_else(|| "unknown".into()),
                    source: label("source").unwrap_or_else(|| "unknown".into()),
                });
            }
            "oed_energy_timestamp_seconds" if value > 0.0 => at = Some(value),
            "oed_drive_info" => drive = label("drive"),
            _ => {}
        }
    }
    energy.map(|e| Reading { drive, at, ..e })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drive_page_gives_its_energy_and_name() {
        let page = "# HELP oed_energy_joules_total Energy.\n\
            # TYPE oed_energy_joules_total counter\n\
            oed_energy_joules_total{method=\"modelled\",source=\"model:oed-gen1\"} 1234.5\n\
            oed_drive_info{cluster=\"dev\",drive=\"drive-3\",version=\"0.1.0\"} 1\n\
            oed_energy_timestamp_seconds{method=\"modelled\",source=\"model:oed-gen1\"} 1796000000.25\n\
            oed_power_watts{method=\"modelled\",source=\"model:oed-gen1\"} 9.7\n";
        let r = parse(page).unwrap();
        assert_eq!(r.drive.as_deref(), Some("drive-3"));
        assert_eq!(r.at, Some(1_796_000_000.25));
        assert!((r.joules - 1234.5).abs() < 1e-9);
        assert_eq!(r.method, "modelled");
        assert_eq!(r.source, "model:oed-gen1");
    }

    #[test]
    fn escaped_labels_and_pages_without_energy() {
        let page =
            "oed_energy_joules_total{source=\"command:a \\\"b\\\", c\",method=\"measured\"} 2e3\n";
        let r = parse(page).unwrap();
        assert_eq!(r.source, "command:a \"b\", c");
        assert_eq!(r.method, "measured");
        assert!((r.joules - 2000.0).abs() < 1e-9);
        assert_eq!(r.drive, None);
        assert_eq!(r.at, None);
        // A meter that has not ticked yet says 0: no time.
        let r = parse("oed_energy_joules_total 0\noed_energy_timestamp_seconds 0\n").unwrap();
        assert_eq!(r.at, None);
        assert_eq!(parse("process_cpu_seconds_total 3\n"), None);
        assert_eq!(parse("oed_energy_joules_total{method=\"x\" 3\n"), None);
    }
}
