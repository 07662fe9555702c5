//! The `--svg` timeline: one row per algorithm, admitted and denied calls, window edges, a time axis.

use std::fmt::Write as _;

use super::report::{Scenario, seconds};
use super::runner::AlgorithmRun;

const WIDTH: f64 = 960.0;
/// Room for the row labels on the left.
const LEFT: f64 = 190.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 72.0;
const ROW: f64 = 58.0;
/// Admitted calls sit above a row's middle, denied below, so they never hide each other.
const LANE: f64 = 10.0;
/// Above this many windows in view the edges would blur into a grey wash: they are not drawn.
const MAX_EDGES: i128 = 120;
const ADMITTED: &str = "#1a9850";
const DENIED: &str = "#d73027";
const EDGE: &str = "#4575b4";

/// The time span drawn and how a time maps to an x coordinate.
struct Span {
    t0: i128,
    t1: i128,
    window: i128,
}

impl Span {
    fn x(&self, t: i128) -> f64 {
        LEFT + (t - self.t0) as f64 / (self.t1 - self.t0) as f64 * (WIDTH - LEFT - RIGHT)
    }
}

/// Draws the timeline of `outcomes` as a standalone SVG document.
pub fn timeline(scenario: &Scenario, outcomes: &[AlgorithmRun]) -> String {
    let window = i128::from(scenario.window.max(1));
    let times = outcomes.first().map_or(&[][..], |o| &o.decisions[..]);
    let first = times.first().map_or(0, |d| i128::from(d.0));
    let last = times.last().map_or(0, |d| i128::from(d.0));
    // Whole windows in view, so every edge near the traffic is on the page.
    let span = Span {
        t0: first.div_euclid(window) * window,
        t1: (last.div_euclid(window) + 1) * window,
        window,
    };
    let bottom = TOP + ROW * outcomes.len() as f64;
    let height = bottom + 52.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="13">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let w = seconds(window);
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}: limit {} per {w}, {} calls</text>"#,
        scenario.pattern,
        scenario.limit,
        times.len()
    );
    legend(&mut svg, scenario, &w);
    rows(&mut svg, outcomes, &w);
    edges(&mut svg, &span, bottom);
    for (row, o) in outcomes.iter().enumerate() {
        marks(&mut svg, o, TOP + ROW * row as f64 + ROW / 2.0, &span);
    }
    axis(&mut svg, span.t0, span.t1, bottom, &|t| span.x(t));
    svg.push_str("</svg>\n");
    svg
}

/// One shaded row per algorithm, labelled with its name and figures.
fn rows(svg: &mut String, outcomes: &[AlgorithmRun], w: &str) {
    for (row, o) in outcomes.iter().enumerate() {
        let top = TOP + ROW * row as f64;
        let mid = top + ROW / 2.0;
        let shade = if row % 2 == 0 { "#f4f4f4" } else { "#ffffff" };
        let _ = writeln!(
            svg,
            r#"<rect x="0" y="{top}" width="{WIDTH}" height="{ROW}" fill="{shade}"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{}" font-weight="bold">{}</text>"#,
            mid - 8.0,
            o.algorithm.name()
        );
        let _ = writeln!(
            svg,
            r##"<text x="10" y="{}" font-size="11" fill="#444">{} admitted, {} denied</text>"##,
            mid + 7.0,
            o.admitted,
            o.denied
        );
        let _ = writeln!(
            svg,
            r##"<text x="10" y="{}" font-size="11" fill="#444">at most {} in any {w}</text>"##,
            mid + 20.0,
            o.max_in_any_window
        );
    }
}

/// Dashed lines at the window edges, unless there are too many to read.
fn edges(svg: &mut String, span: &Span, bottom: f64) {
    let count = (span.t1 - span.t0) / span.window;
    if count > MAX_EDGES {
        return;
    }
    for k in 0..=count {
        let ex = span.x(span.t0 + k * span.window);
        let _ = writeln!(
            svg,
            r#"<line x1="{ex:.1}" y1="{}" x2="{ex:.1}" y2="{bottom}" stroke="{EDGE}" stroke-width="1.2" stroke-dasharray="5,4"/>"#,
            TOP - 6.0
        );
    }
}

/// A dot above the row's middle for each admitted call, a cross below it for each denied one.
fn marks(svg: &mut String, outcome: &AlgorithmRun, mid: f64, span: &Span) {
    for &(t, admitted) in &outcome.decisions {
        let cx = span.x(i128::from(t));
        if admitted {
            let _ = writeln!(
                svg,
                r#"<circle cx="{cx:.1}" cy="{}" r="4.5" fill="{ADMITTED}"/>"#,
                mid - LANE
            );
            continue;
        }
        let cy = mid + LANE;
        let (l, r, t, b) = (cx - 4.0, cx + 4.0, cy - 4.0, cy + 4.0);
        let _ = writeln!(
            svg,
            r#"<path d="M{l:.1},{t:.1}L{r:.1},{b:.1}M{l:.1},{b:.1}L{r:.1},{t:.1}" stroke="{DENIED}" stroke-width="2"/>"#
        );
    }
}

fn legend(svg: &mut String, scenario: &Scenario, w: &str) {
    let y = 48.0;
    let _ = writeln!(
        svg,
        r#"<circle cx="{}" cy="{}" r="4.5" fill="{ADMITTED}"/><text x="{}" y="{}">admitted</text>"#,
        LEFT + 5.0,
        y - 4.0,
        LEFT + 15.0,
        y
    );
    let dx = LEFT + 100.0;
    let _ = writeln!(
        svg,
        r#"<path d="M{},{}L{},{}M{},{}L{},{}" stroke="{DENIED}" stroke-width="2"/><text x="{}" y="{}">denied</text>"#,
        dx,
        y - 8.0,
        dx + 8.0,
        y,
        dx,
        y,
        dx + 8.0,
        y - 8.0,
        dx + 14.0,
        y
    );
    let ex = LEFT + 190.0;
    let _ = writeln!(
        svg,
        r##"<line x1="{ex}" y1="{}" x2="{ex}" y2="{}" stroke="{EDGE}" stroke-width="1.2" stroke-dasharray="5,4"/><text x="{}" y="{y}">window edge (every {w})</text><text x="{}" y="{y}" fill="#444">token bucket: burst {}, refill {} per {w}</text>"##,
        y - 12.0,
        y + 3.0,
        ex + 8.0,
        ex + 200.0,
        scenario.burst,
        scenario.limit
    );
}

/// The time axis under the rows, with ticks at a round step (1, 2 or 5 times a power of ten).
fn axis(svg: &mut String, t0: i128, t1: i128, bottom: f64, x: &impl Fn(i128) -> f64) {
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#000"/>"##,
        WIDTH - RIGHT
    );
    let span = (t1 - t0).max(1);
    let rough = span / 10;
    let mut step: i128 = 1;
    while step * 5 < rough {
        step *= 10;
    }
    let step = [step, step * 2, step * 5, step * 10]
        .into_iter()
        .find(|s| span / s <= 10)
        .unwrap_or(step * 10);
    let mut t = t0.div_euclid(step) * step;
    if t < t0 {
        t += step;
    }
    while t <= t1 {
        let tx = x(t);
        let _ = writeln!(
            svg,
            r##"<line x1="{tx:.1}" y1="{bottom}" x2="{tx:.1}" y2="{}" stroke="#000"/><text x="{tx:.1}" y="{}" text-anchor="middle">{}</text>"##,
            bottom + 5.0,
            bottom + 20.0,
            seconds(t)
        );
        t += step;
    }
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#444">time since the pattern's start (t = 0 is a window edge)</text>"##,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        bottom + 42.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::{TrafficPattern, runner};
    use sluice::clock::SECOND;

    /// The SVG is one well-formed document: balanced tags, one row label per algorithm, one
    /// mark per call and algorithm.
    #[test]
    fn svg_is_well_formed() {
        let arrivals = TrafficPattern::EdgeBurst.arrivals(5, 10 * SECOND).unwrap();
        let outcomes = runner::run(&arrivals, 5, 10 * SECOND, 5);
        let scenario = Scenario {
            pattern: "edge-burst".into(),
            limit: 5,
            window: 10 * SECOND,
            burst: 5,
        };
        let svg = timeline(&scenario, &outcomes);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches('<').count(), svg.matches('>').count());
        // Every element is self-closed or closed: <text> opens match </text> closes.
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
        for name in [
            "fixed_window",
            "sliding_window",
            "sliding_log",
            "token_bucket",
        ] {
            assert!(svg.contains(&format!(">{name}</text>")), "{name}");
        }
        // 4 algorithms × 10 calls, plus the two legend marks.
        let marks = svg.matches(r#"r="4.5""#).count() + svg.matches("stroke-width=\"2\"").count();
        assert_eq!(marks, 4 * 10 + 2);
        assert!(svg.contains("stroke-dasharray"), "window edges drawn");
    }
}
