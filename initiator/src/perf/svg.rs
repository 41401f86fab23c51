//! `--latency-plot FILE.svg`: a plain hand-written SVG with two charts — the latency
//! histogram on a logarithmic time axis, and IOPS per 100 ms over the run.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::report::PerfReport;
use crate::error::Error;

const WIDTH: f64 = 900.0;
const PANEL_HEIGHT: f64 = 320.0;
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_RIGHT: f64 = 30.0;
const MARGIN_TOP: f64 = 40.0;
const MARGIN_BOTTOM: f64 = 50.0;
/// Histogram bins per factor of ten of latency.
const BINS_PER_DECADE: f64 = 10.0;
/// About this many steps on a y axis.
const Y_TICKS: u32 = 4;
const FONT: &str = "font-family=\"sans-serif\" font-size=\"12\"";
const BAR_COLOR: &str = "#4878a8";
const LINE_COLOR: &str = "#c05030";
const PERCENT: f64 = 100.0;

/// A latency in nanoseconds as a short label ("250ns", "10us", "1ms", "2s").
fn time_label(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{}s", trim(ns / 1e9))
    } else if ns >= 1e6 {
        format!("{}ms", trim(ns / 1e6))
    } else if ns >= 1e3 {
        format!("{}us", trim(ns / 1e3))
    } else {
        format!("{}ns", trim(ns))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// The smallest "nice" step (1, 2 or 5 times a power of ten) of at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// A y axis for data up to `max`: (axis maximum, tick step), the maximum a whole
/// number of nice steps (about [`Y_TICKS`] of them).
fn nice_axis(max: f64) -> (f64, f64) {
    let step = nice_step(max / f64::from(Y_TICKS));
    ((max / step).ceil().max(1.0) * step, step)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Panel {
    x0: f64,
    y0: f64,
    w: f64,
    h: f64,
}

impl Panel {
    fn at(index: u32) -> Panel {
        let top = f64::from(index) * PANEL_HEIGHT;
        Panel {
            x0: MARGIN_LEFT,
            y0: top + MARGIN_TOP,
            w: WIDTH - MARGIN_LEFT - MARGIN_RIGHT,
            h: PANEL_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM,
        }
    }

    fn frame(&self, s: &mut String, title: &str, xlabel: &str, ylabel: &str) {
        let (x0, y0, w, h) = (self.x0, self.y0, self.w, self.h);
        let _ = writeln!(
            s,
            "<rect x=\"{x0}\" y=\"{y0}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"#888\"/>"
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" {FONT} font-weight=\"bold\" text-anchor=\"middle\">{}</text>",
            x0 + w / 2.0,
            y0 - 14.0,
            escape(title)
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" {FONT} text-anchor=\"middle\">{}</text>",
            x0 + w / 2.0,
            y0 + h + 38.0,
            escape(xlabel)
        );
        let _ = writeln!(
            s,
            "<text x=\"16\" y=\"{}\" {FONT} text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>",
            y0 + h / 2.0,
            y0 + h / 2.0,
            escape(ylabel)
        );
    }

    fn y_ticks(&self, s: &mut String, (max, step): (f64, f64), fmt: impl Fn(f64) -> String) {
        let mut v = 0.0;
        while v <= max * (1.0 + f64::EPSILON) {
            let y = self.y0 + self.h - self.h * v / max;
            let _ = writeln!(
                s,
                "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/>",
                self.x0,
                self.x0 + self.w
            );
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" {FONT} text-anchor=\"end\">{}</text>",
                self.x0 - 6.0,
                y + 4.0,
                fmt(v)
            );
            v += step;
        }
    }

    fn x_tick(&self, s: &mut String, x: f64, label: &str) {
        let yb = self.y0 + self.h;
        let _ = writeln!(
            s,
            "<line x1=\"{x}\" y1=\"{yb}\" x2=\"{x}\" y2=\"{}\" stroke=\"#888\"/>",
            yb + 5.0
        );
        let _ = writeln!(
            s,
            "<text x=\"{x}\" y=\"{}\" {FONT} text-anchor=\"middle\">{}</text>",
            yb + 18.0,
            escape(label)
        );
    }
}

/// Log-spaced bins: (first bin index, counts).
fn log_bins(hist: &Histogram<u64>) -> (i64, Vec<u64>) {
    if hist.is_empty() {
        return (0, Vec::new());
    }
    let bin = |v: u64| ((v.max(1) as f64).log10() * BINS_PER_DECADE).floor() as i64;
    let lo = bin(hist.min());
    let hi = bin(hist.max());
    let n = usize::try_from(hi - lo + 1).unwrap_or(0);
    let mut counts = vec![0u64; n];
    for v in hist.iter_recorded() {
        let i = usize::try_from(bin(v.value_iterated_to()) - lo).unwrap_or(0);
        if let Some(c) = counts.get_mut(i) {
            *c += v.count_at_value();
        }
    }
    (lo, counts)
}

/// Renders the two charts.
pub fn render(hist: &Histogram<u64>, timeline: &[u64], bucket: Duration, title: &str) -> String {
    let mut s = String::new();
    let height = 2.0 * PANEL_HEIGHT;
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");

    // Latency histogram, log x.
    let p = Panel::at(0);
    p.frame(
        &mut s,
        &format!("{title}: latency ({} I/Os)", hist.len()),
        "latency (log scale)",
        "% of I/Os",
    );
    let (lo, counts) = log_bins(hist);
    let total = hist.len().max(1) as f64;
    let max_pct = counts
        .iter()
        .map(|&c| c as f64 / total * PERCENT)
        .fold(0.0f64, f64::max)
        .max(1.0);
    let axis = nice_axis(max_pct);
    let max_pct = axis.0;
    p.y_ticks(&mut s, axis, |v| format!("{}%", trim(v)));
    if !counts.is_empty() {
        // Whole decades around the data.
        let d0 = (lo as f64 / BINS_PER_DECADE).floor();
        let d1 = ((lo + counts.len() as i64) as f64 / BINS_PER_DECADE)
            .ceil()
            .max(d0 + 1.0);
        let span = (d1 - d0) * BINS_PER_DECADE;
        let bw = p.w / span;
        for (i, &c) in counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let x = p.x0 + ((lo + i as i64) as f64 - d0 * BINS_PER_DECADE) * bw;
            let hgt = c as f64 / total * PERCENT / max_pct * p.h;
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{hgt:.1}\" fill=\"{BAR_COLOR}\"/>",
                p.y0 + p.h - hgt,
                (bw - 1.0).max(1.0)
            );
        }
        let mut d = d0;
        while d <= d1 {
            let x = p.x0 + (d - d0) * BINS_PER_DECADE * bw;
            p.x_tick(&mut s, x, &time_label(10f64.powf(d)));
            d += 1.0;
        }
    }

    // IOPS over time.
    let p = Panel::at(1);
    let per_sec = 1.0 / bucket.as_secs_f64().max(f64::MIN_POSITIVE);
    p.frame(
        &mut s,
        &format!("{title}: IOPS over time"),
        "time (s)",
        "IOPS",
    );
    let iops: Vec<f64> = timeline.iter().map(|&c| c as f64 * per_sec).collect();
    let axis = nice_axis(iops.iter().copied().fold(0.0f64, f64::max).max(1.0));
    let max_iops = axis.0;
    p.y_ticks(&mut s, axis, |v| {
        if v >= 1e3 {
            format!("{}k", trim(v / 1e3))
        } else {
            trim(v)
        }
    });
    let n = iops.len().max(1) as f64;
    if !iops.is_empty() {
        let pts: Vec<String> = iops
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let x = p.x0 + (i as f64 + 0.5) / n * p.w;
                let y = p.y0 + p.h - v / max_iops * p.h;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{LINE_COLOR}\" stroke-width=\"1.5\" points=\"{}\"/>",
            pts.join(" ")
        );
    }
    let secs = n * bucket.as_secs_f64();
    const X_TICKS: f64 = 5.0;
    let step = nice_step(secs / X_TICKS);
    let mut t = 0.0;
    while t <= secs + f64::EPSILON {
        p.x_tick(&mut s, p.x0 + t / secs * p.w, &trim(t));
        t += step;
    }
    let _ = writeln!(s, "</svg>");
    s
}

/// Writes the plot of `report` to `path`.
pub fn write(report: &PerfReport, path: &Path) -> Result<(), Error> {
    let o = &report.options;
    let title = format!(
        "{} bs={} iodepth={} jobs={}",
        o.rw, o.bs, o.iodepth, o.numjobs
    );
    let bucket = super::job::TIMELINE_BUCKET;
    // The last bucket usually covers only the tail of the run: a partial one would
    // plot as a false drop in IOPS, so it is left out when under half full in time.
    let mut timeline: &[u64] = &report.timeline;
    let covered = report.elapsed.as_secs_f64() / bucket.as_secs_f64();
    if (timeline.len() as f64) - covered > 0.5 {
        timeline = timeline.split_last().map_or(timeline, |(_, rest)| rest);
    }
    let svg = render(&report.latency(), timeline, bucket, &title);
    std::fs::write(path, svg)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_charts() {
        let mut h = super::super::job::new_histogram().unwrap();
        for v in [800u64, 1_500, 20_000, 20_500, 3_000_000] {
            h.record(v).unwrap();
        }
        let svg = render(&h, &[10, 20, 15], Duration::from_millis(100), "a<b");
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a&lt;b: latency (5 I/Os)"));
        assert!(
            svg.contains(">1us<") && svg.contains(">10ms<"),
            "decade labels"
        );
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.matches(&format!("fill=\"{BAR_COLOR}\"")).count() >= 4);
        // Empty data still renders a valid document.
        let e = super::super::job::new_histogram().unwrap();
        let svg = render(&e, &[], Duration::from_millis(100), "empty");
        assert!(svg.contains("</svg>"));
        assert_eq!(time_label(1500.0), "1.5us");
        assert_eq!(time_label(2e9), "2s");
        assert_eq!(nice_step(0.26), 0.5);
        assert_eq!(nice_step(13.0), 20.0);
        assert_eq!(nice_axis(22.0), (30.0, 10.0));
        assert_eq!(nice_axis(19.0), (20.0, 5.0));
        assert_eq!(nice_axis(8000.0), (8000.0, 2000.0));
    }
}
