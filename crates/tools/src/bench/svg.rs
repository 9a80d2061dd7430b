//! A run drawn as an SVG: object throughput (MiB/s, left axis) and the drives' power
//! (watts, right axis) over time, each phase shaded and named, so a run can be looked at
//! rather than read. Plain SVG 1.1, no scripts or fonts beyond a generic family.

use std::fmt::Write as _;

use super::peak::Kind;
use super::report::{PhaseResult, Run, Sample, human_bytes, kind_name};

const W: f64 = 900.0;
const H: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 70.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

/// A round axis maximum at or above `v` (1, 2 or 5 times a power of ten).
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|m| *m >= v)
        .unwrap_or(10.0 * p)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn polyline(points: &[(f64, f64)], colour: &str) -> String {
    let mut d = String::new();
    for (x, y) in points {
        let _ = write!(d, "{x:.1},{y:.1} ");
    }
    format!(
        "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n",
        d.trim_end()
    )
}

/// A shaded, named band over each phase's time.
fn bands(phases: &[PhaseResult], x: &dyn Fn(f64) -> f64, ph: f64) -> String {
    let mut s = String::new();
    for p in phases {
        let fill = match p.phase {
            Kind::Write => "#fde7d4",
            Kind::Read => "#dcecf8",
            Kind::Op => "#e3f3dc",
        };
        let (x0, x1) = (x(p.start_s), x(p.end_s));
        let _ = writeln!(
            s,
            "<rect x=\"{x0:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{ph}\" fill=\"{fill}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">{} {}</text>",
            (x1 - x0).max(1.0),
            f64::midpoint(x0, x1),
            TOP + 14.0,
            kind_name(p.phase),
            p.rep,
        );
    }
    s
}

/// The plot of `run`'s timeline.
#[must_use]
pub fn plot(run: &Run) -> String {
    let samples: &[Sample] = &run.timeline;
    let t_end = samples
        .last()
        .map_or(1.0, |s| s.t)
        .max(run.phases.last().map_or(1.0, |p| p.end_s));
    let mib_max = nice_max(samples.iter().map(|s| s.mib_s).fold(0.0, f64::max));
    let watts: Vec<f64> = samples.iter().filter_map(|s| s.watts).collect();
    let w_max = nice_max(watts.iter().copied().fold(0.0, f64::max));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |t: f64| LEFT + pw * t / t_end;
    let y = |v: f64, max: f64| TOP + ph * (1.0 - v / max);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n"
    );
    s.push_str(&bands(&run.phases, &x, ph));
    // Axes, grid and ticks.
    for k in 0..=5 {
        let f = f64::from(k) / 5.0;
        let yy = TOP + ph * (1.0 - f);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#1f5fa8\">{}</text>",
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            mib_max * f
        );
        if !watts.is_empty() {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#c0502a\">{}</text>",
                LEFT + pw + 6.0,
                yy + 4.0,
                w_max * f
            );
        }
        let tt = t_end * f;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{tt:.0}</text>",
            x(tt),
            TOP + ph + 18.0
        );
    }
    let _ = writeln!(
        s,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#333\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">seconds</text>\n\
         <text x=\"16\" y=\"{:.1}\" fill=\"#1f5fa8\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">object MiB/s</text>",
        LEFT + pw / 2.0,
        H - 20.0,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
    );
    let energy = run.energy_source.as_deref().unwrap_or("none");
    if !watts.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#c0502a\" transform=\"rotate(90 {:.1} {:.1})\" text-anchor=\"middle\">drives' power, W ({energy})</text>",
            W - 16.0,
            TOP + ph / 2.0,
            W - 16.0,
            TOP + ph / 2.0,
        );
    }
    let title = format!(
        "{}: {} objects of {}, {} clients, {} endpoint(s), energy {energy}",
        run.tool,
        run.objects,
        human_bytes(run.object_bytes),
        run.clients,
        run.endpoints.len()
    );
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"28\" font-size=\"14\">{}</text>",
        escape(&title)
    );
    // Each sample holds the rates over the interval before it: drawn at its middle.
    let mid = |i: usize| f64::midpoint(if i == 0 { 0.0 } else { samples[i - 1].t }, samples[i].t);
    let thr: Vec<(f64, f64)> = samples
        .iter()
        .enumerate()
        .map(|(i, p)| (x(mid(i)), y(p.mib_s, mib_max)))
        .collect();
    s.push_str(&polyline(&thr, "#1f5fa8"));
    let pow: Vec<(f64, f64)> = samples
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.watts.map(|w| (x(mid(i)), y(w, w_max))))
        .collect();
    if !pow.is_empty() {
        s.push_str(&polyline(&pow, "#c0502a"));
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maxima_are_round() {
        assert!((nice_max(0.0) - 1.0).abs() < 1e-12);
        assert!((nice_max(3.2) - 5.0).abs() < 1e-12);
        assert!((nice_max(117.0) - 200.0).abs() < 1e-9);
        assert!((nice_max(500.0) - 500.0).abs() < 1e-9);
        assert!((nice_max(501.0) - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn phases_are_bands_over_their_own_time() {
        use crate::bench::peak::{Peak, PeakInputs};
        use crate::bench::report::Measured;
        let none = Peak {
            mb_s: None,
            terms: vec![],
        };
        let phase = |kind, start_s, end_s| PhaseResult {
            start_s,
            end_s,
            ..PhaseResult::new(kind, 1, Measured::default(), &none, &none, (None, None))
        };
        let run = Run {
            tool: "t".into(),
            started: String::new(),
            endpoints: vec![],
            bucket: "b".into(),
            object_bytes: 1 << 20,
            objects: 1,
            duration_s: None,
            clients: 1,
            signing: "unsigned".into(),
            reps: 1,
            operation: None,
            peak_inputs: PeakInputs {
                drives: 1,
                k: 1,
                m: 0,
                gateways: 1,
                drive_link_bit_s: None,
                client_link_bit_s: None,
                mtu: 1500,
                disks: 1,
                disk_mb_s: None,
                disk_read_mb_s: None,
            },
            peaks: vec![],
            tpp: none.clone(),
            energy_source: None,
            meters: vec![],
            between_phases: None,
            environment: None,
            phases: vec![phase(Kind::Write, 0.0, 7.5), phase(Kind::Op, 7.5, 10.0)],
            summary: vec![],
            timeline: vec![],
        };
        let svg = plot(&run);
        // 760 px of plot for 10 s: the write band is 570 px wide, the op band 190 px
        // from x = 640.
        assert!(
            svg.contains("<rect x=\"70.0\" y=\"50\" width=\"570.0\""),
            "{svg}"
        );
        assert!(
            svg.contains("<rect x=\"640.0\" y=\"50\" width=\"190.0\""),
            "{svg}"
        );
        assert!(svg.contains(">op 1</text>"));
        // No power line without meters.
        assert!(!svg.contains("#c0502a\" stroke-width"));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
