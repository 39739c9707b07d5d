//! SVG charts of bench reports (plotters, SVG backend only: text is written as SVG `<text>`,
//! so no font files are read and none need be installed).
//!
//! - [`write_svg`]: one run. Several steps: x is the step's sending connections; the top
//!   panel shows inbound and outbound messages/s with each step marked passed or failed, the
//!   bottom one p50/p99/p99.9/max latency on a log scale with Azure's 1 s line; the last
//!   passing step is a dashed vertical line in both. One step: the same two panels over the
//!   run's seconds (`Report::timeline`).
//! - [`write_compare_svg`]: several runs (Switchyard and a peer): outbound messages/s and p99
//!   latency per step, one line per run, each run's last passing step ringed.
//!
//! # Layout
//! - here: the one-run chart ([`write_svg`]) and the colours;
//! - `panel`: the panels both charts are made of (lines, marks, legend column, axes);
//! - `compare`: the comparison chart ([`write_compare_svg`]).

mod compare;
mod panel;

pub use compare::write_compare_svg;

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use switchyard_capacity::format;
use switchyard_capacity::report::{Report, Step};

use crate::report::{describe, last_passing, result_line, scenario_heading};
use panel::{header, header_height, latency_panel, rate_panel, step_axis, x_range, Marks, Series};

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 860;
const FONT: &str = "sans-serif";

const INBOUND: RGBColor = RGBColor(31, 119, 180);
const OUTBOUND: RGBColor = RGBColor(0, 150, 136);
const P50: RGBColor = RGBColor(44, 160, 44);
const P99: RGBColor = RGBColor(255, 127, 14);
const P999: RGBColor = RGBColor(148, 103, 189);
const MAX: RGBColor = RGBColor(110, 110, 110);
const LIMIT: RGBColor = RGBColor(214, 39, 40);
const PASSED: RGBColor = RGBColor(0, 128, 0);
const FAILED: RGBColor = RGBColor(214, 39, 40);
const GRID: RGBColor = RGBColor(244, 244, 244);
const GRID_BOLD: RGBColor = RGBColor(215, 215, 215);
const TEXT: RGBColor = RGBColor(60, 60, 60);
const RUNS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn err<E: std::fmt::Display>(e: E) -> String {
    format!("chart: {e}")
}

/// `Echo on switchyard: 1,000 connections, 2,048-byte messages, json over websockets`.
fn title(report: &Report) -> String {
    let mut t = scenario_heading(&report.scenario);
    if !report.target.is_empty() {
        t.push_str(" on ");
        t.push_str(&report.target);
    }
    t.push_str(&format!(
        ": {} connections, {}-byte messages",
        format::count(report.connections),
        format::count(report.message_size as u64)
    ));
    match (report.protocol.is_empty(), report.transport.is_empty()) {
        (false, false) => t.push_str(&format!(", {} over {}", report.protocol, report.transport)),
        (false, true) => t.push_str(&format!(", {}", report.protocol)),
        (true, false) => t.push_str(&format!(", {}", report.transport)),
        (true, true) => {}
    }
    t
}

/// Writes one run's chart to `path` (see the module docs for what it shows).
pub fn write_svg(report: &Report, path: &Path) -> Result<(), String> {
    let (settings, more) = describe(report);
    let lines = vec![settings, more, result_line(report)];
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(header_height(lines.len()));
    header(&top, &title(report), &lines)?;
    let (upper, lower) = body.split_vertically((HEIGHT - header_height(lines.len())) / 2);

    if report.steps.len() >= 2 || (report.timeline.is_empty() && !report.steps.is_empty()) {
        steps_chart(report, &upper, &lower)?;
    } else if !report.timeline.is_empty() {
        timeline_chart(report, &upper, &lower)?;
    } else {
        body.draw(&Text::new(
            "This report has no steps and no per-second timeline to chart.",
            (24, 40),
            (FONT, 18).into_font().color(&TEXT),
        ))
        .map_err(err)?;
    }
    root.present().map_err(err)
}

fn steps_chart(report: &Report, upper: &Area<'_>, lower: &Area<'_>) -> Result<(), String> {
    let steps = &report.steps;
    let (xs, x_desc) = step_axis(steps);
    let range = x_range(xs.iter().copied());
    let points = |f: &dyn Fn(&Step) -> f64| -> Vec<(f64, f64)> {
        xs.iter().zip(steps).map(|(x, s)| (*x, f(s))).collect()
    };
    let outbound = points(&|s| s.outbound_per_s);
    let mut marks = Marks::default();
    for (p, s) in outbound.iter().zip(steps) {
        if s.passed {
            marks.passed.push(*p);
        } else {
            marks.failed.push(*p);
        }
    }
    if let Some(step) = last_passing(report) {
        let i = steps
            .iter()
            .position(|s| s.index == step.index)
            .unwrap_or(0);
        marks.last_passing = Some((
            xs[i],
            format!(
                "last passing: step {} ({} senders)",
                step.index,
                format::count(step.senders)
            ),
        ));
    }
    rate_panel(
        upper,
        "Throughput per step",
        x_desc,
        range.clone(),
        &[
            Series::new(
                "inbound (into the service)",
                INBOUND,
                points(&|s| s.inbound_per_s),
            )
            .band(),
            Series::new("outbound (delivered)", OUTBOUND, outbound.clone()),
        ],
        &marks,
    )?;
    let delivered: Vec<bool> = steps
        .iter()
        .map(|s| s.counts.received > 0 || s.latency.max_ms > 0.0)
        .collect();
    let lat = |f: &dyn Fn(&Step) -> f64| -> Vec<(f64, f64)> {
        xs.iter()
            .zip(steps)
            .zip(&delivered)
            .filter(|(_, d)| **d)
            .map(|((x, s), _)| (*x, f(s)))
            .collect()
    };
    latency_panel(
        lower,
        "Delivery latency per step",
        x_desc,
        range,
        &[
            Series::new("p50", P50, lat(&|s| s.latency.p50_ms)),
            Series::new("p99", P99, lat(&|s| s.latency.p99_ms)),
            Series::new("p99.9", P999, lat(&|s| s.latency.p999_ms)),
            Series::new("max", MAX, lat(&|s| s.latency.max_ms)),
        ],
        &marks,
    )
}

fn timeline_chart(report: &Report, upper: &Area<'_>, lower: &Area<'_>) -> Result<(), String> {
    let t = &report.timeline;
    let range = x_range(t.iter().map(|s| s.second as f64));
    let x_desc = "seconds since the first send";
    let rate = |f: &dyn Fn(&switchyard_capacity::report::Second) -> u64| -> Vec<(f64, f64)> {
        t.iter().map(|s| (s.second as f64, f(s) as f64)).collect()
    };
    rate_panel(
        upper,
        "Throughput per second",
        x_desc,
        range.clone(),
        &[
            Series::new("inbound (into the service)", INBOUND, rate(&|s| s.sent)).band(),
            Series::new("outbound (delivered)", OUTBOUND, rate(&|s| s.received)),
        ],
        &Marks::default(),
    )?;
    let lat = |f: &dyn Fn(&switchyard_capacity::report::Second) -> f64| -> Vec<(f64, f64)> {
        t.iter()
            .filter(|s| s.received > 0)
            .map(|s| (s.second as f64, f(s)))
            .collect()
    };
    latency_panel(
        lower,
        "Delivery latency per second (by intended send time)",
        x_desc,
        range,
        &[
            Series::new("p50", P50, lat(&|s| s.p50_ms)),
            Series::new("p99", P99, lat(&|s| s.p99_ms)),
            Series::new("max", MAX, lat(&|s| s.max_ms)),
        ],
        &Marks::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{multi_step, single_step};

    /// Writes a chart into a fresh temporary directory, reads it back and removes it.
    fn render_with(name: &str, write: impl FnOnce(&Path) -> Result<(), String>) -> String {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-bench-chart-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let written = write(&path);
        let svg = std::fs::read_to_string(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        written.unwrap();
        svg.unwrap()
    }

    fn render(report: &Report, name: &str) -> String {
        render_with(name, |path| write_svg(report, path))
    }

    /// The contents of the SVG's `<text>` elements, trimmed (entities left as written).
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..];
                Some(body[..body.find("</text>")?].trim().to_string())
            })
            .collect()
    }

    fn has_text(svg: &str, want: &str) -> bool {
        texts(svg).iter().any(|t| t.contains(want))
    }

    fn assert_svg(svg: &str) {
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    }

    #[test]
    fn multi_step_chart() {
        let svg = render(&multi_step(), "multi.svg");
        assert_svg(&svg);
        assert!(svg.contains(
            "Echo on switchyard: 1,000 connections, 2,048-byte messages, json over websockets"
        ));
        for text in [
            "Throughput per step",
            "Delivery latency per step",
            "sending connections",
            "messages/s",
            "latency (ms, log scale)",
            "inbound (into the service)",
            "outbound (delivered)",
            "p99.9",
            "1 s: Azure&apos;s limit",
            "last passing: step 3 (750 senders)",
            "step failed Azure&apos;s rule",
            "equals or exceeds Azure Unit1",
            // x tick labels are sending connections; y ticks of the log panel are decades.
            "1,000",
            "100",
        ] {
            assert!(has_text(&svg, text), "missing {text}");
        }
        let texts = texts(&svg);
        assert!(texts.iter().any(|t| t == "100"));
        assert!(texts.iter().any(|t| t == "750") || texts.iter().any(|t| t == "700"));
    }

    #[test]
    fn single_step_chart_uses_the_timeline() {
        let svg = render(&single_step(), "single.svg");
        assert_svg(&svg);
        assert!(svg.contains("Broadcast on switchyard"));
        assert!(svg.contains("messagepack over websockets"));
        assert!(svg.contains("Throughput per second"));
        assert!(svg.contains("seconds since the first send"));
        assert!(!svg.contains("last passing: step"));
    }

    #[test]
    fn failing_and_empty_reports_still_chart() {
        let mut failing = multi_step();
        for s in &mut failing.steps {
            s.passed = false;
            s.latency.max_ms = 0.0;
            s.latency.p50_ms = 0.0;
        }
        failing.last_passing_step = None;
        failing.azure_unit = None;
        let svg = render(&failing, "failing.svg");
        assert_svg(&svg);
        assert!(svg.contains("no step passed"));
        assert!(!texts(&svg)
            .iter()
            .any(|t| t == "step passed Azure&apos;s rule"));
        assert!(texts(&svg)
            .iter()
            .any(|t| t == "step failed Azure&apos;s rule"));

        let empty = Report::default();
        let svg = render(&empty, "empty.svg");
        assert_svg(&svg);
        assert!(svg.contains("no steps and no per-second timeline"));

        let err = write_svg(&empty, Path::new("/nonexistent-dir/x/chart.svg"));
        assert!(err.is_err());
    }

    #[test]
    fn compare_chart() {
        let ours = multi_step();
        let mut peer = multi_step();
        peer.target = "go-signalr".into();
        peer.last_passing_step = Some(2);
        for s in &mut peer.steps {
            s.outbound_per_s *= 0.8;
            s.latency.p99_ms *= 3.0;
        }
        let svg = render_with("compare.svg", |path| {
            write_compare_svg(&[&ours, &peer], path)
        });
        assert_svg(&svg);
        assert!(svg.contains("Echo: switchyard vs go-signalr"));
        assert!(svg.contains("go-signalr p99"));
        assert!(svg.contains("sending connections"));
        assert!(svg.contains("last passing step 3 (Unit1)"));
        assert!(write_compare_svg(&[], Path::new("unused.svg")).is_err());
    }
}
