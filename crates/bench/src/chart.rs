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

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use switchyard_capacity::report::{Report, Step};

use crate::report::{
    describe, fmt_count, fmt_number, last_passing, result_line, run_labels, scenario_heading,
};

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

/// One line of a panel.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    /// Drawn as a wide translucent band, so a line on top of it leaves it visible.
    band: bool,
}

impl Series {
    fn new(label: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            color,
            points: points
                .into_iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
            band: false,
        }
    }

    fn band(self) -> Self {
        Series { band: true, ..self }
    }
}

/// What a panel marks besides its lines.
#[derive(Default)]
struct Marks {
    /// Points of steps that passed / failed Azure's rule.
    passed: Vec<(f64, f64)>,
    failed: Vec<(f64, f64)>,
    /// x of the last passing step, and its legend text.
    last_passing: Option<(f64, String)>,
    /// Rings around points (a run's last passing step in a comparison).
    rings: Vec<((f64, f64), RGBColor)>,
}

/// The x axis: its values per step and its name.
fn step_axis(steps: &[Step]) -> (Vec<f64>, &'static str) {
    let senders: Vec<f64> = steps.iter().map(|s| s.senders as f64).collect();
    if senders_axis(&[steps]) {
        (senders, "sending connections")
    } else {
        (steps.iter().map(|s| s.index as f64).collect(), "step")
    }
}

/// Whether sending connections can be the x axis of all these step lists: positive and
/// rising within each.
fn senders_axis(runs: &[&[Step]]) -> bool {
    runs.iter().all(|steps| {
        steps.iter().all(|s| s.senders > 0) && steps.windows(2).all(|w| w[0].senders < w[1].senders)
    })
}

fn x_range(xs: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = xs
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    if hi - lo < 1e-9 {
        let pad = (lo.abs() * 0.1).max(1.0);
        return (lo - pad).max(0.0)..hi + pad;
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad).max(0.0)..hi + pad
}

fn header(area: &Area<'_>, title: &str, lines: &[String]) -> Result<(), String> {
    area.draw(&Text::new(
        title.to_string(),
        (24, 14),
        (FONT, 26, FontStyle::Bold).into_font().color(&BLACK),
    ))
    .map_err(err)?;
    for (i, line) in lines.iter().enumerate() {
        area.draw(&Text::new(
            line.clone(),
            (24, 50 + 21 * i as i32),
            (FONT, 16).into_font().color(&TEXT),
        ))
        .map_err(err)?;
    }
    Ok(())
}

fn header_height(lines: usize) -> u32 {
    60 + 21 * lines as u32
}

/// Width of the legend column to the right of each panel.
const LEGEND_WIDTH: u32 = 270;

/// How a legend entry is drawn.
enum Glyph {
    Line(RGBColor),
    /// A wide translucent line (drawn under another that may cover it).
    Band(RGBColor),
    Dashed(RGBColor),
    Dot(RGBColor),
    Cross(RGBColor),
    Ring(RGBColor),
}

/// Draws the legend in its own column, so it never hides a line.
fn legend(area: &Area<'_>, entries: &[(Glyph, String)]) -> Result<(), String> {
    let top = 52;
    for (i, (glyph, label)) in entries.iter().enumerate() {
        let y = top + 24 * i as i32;
        let (x0, x1) = (8, 36);
        match glyph {
            Glyph::Line(c) => {
                area.draw(&PathElement::new(vec![(x0, y), (x1, y)], c.stroke_width(2)))
            }
            Glyph::Band(c) => area.draw(&PathElement::new(
                vec![(x0, y), (x1, y)],
                c.mix(BAND_ALPHA).stroke_width(BAND_WIDTH),
            )),
            Glyph::Dashed(c) => area
                .draw(&PathElement::new(
                    vec![(x0, y), (x0 + 11, y)],
                    c.stroke_width(2),
                ))
                .and_then(|_| {
                    area.draw(&PathElement::new(
                        vec![(x0 + 17, y), (x1, y)],
                        c.stroke_width(2),
                    ))
                }),
            Glyph::Dot(c) => area.draw(&Circle::new(((x0 + x1) / 2, y), 5, c.filled())),
            Glyph::Cross(c) => area.draw(&Cross::new(((x0 + x1) / 2, y), 5, c.stroke_width(3))),
            Glyph::Ring(c) => area.draw(&Circle::new(((x0 + x1) / 2, y), 8, c.stroke_width(2))),
        }
        .map_err(err)?;
        area.draw(&Text::new(
            label.clone(),
            (x1 + 8, y),
            (FONT, 14)
                .into_font()
                .color(&TEXT)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
    }
    Ok(())
}

const BAND_ALPHA: f64 = 0.35;
const BAND_WIDTH: u32 = 7;

/// Legend entries of a panel's lines and marks, in drawing order.
fn entries(series: &[Series], marks: &Marks) -> Vec<(Glyph, String)> {
    let mut out: Vec<(Glyph, String)> = series
        .iter()
        .map(|s| {
            let glyph = if s.band {
                Glyph::Band(s.color)
            } else {
                Glyph::Line(s.color)
            };
            (glyph, s.label.clone())
        })
        .collect();
    if !marks.passed.is_empty() {
        out.push((Glyph::Dot(PASSED), "step passed Azure's rule".into()));
    }
    if !marks.failed.is_empty() {
        out.push((Glyph::Cross(FAILED), "step failed Azure's rule".into()));
    }
    if let Some((_, label)) = &marks.last_passing {
        out.push((Glyph::Dashed(PASSED), label.clone()));
    }
    if !marks.rings.is_empty() {
        out.push((Glyph::Ring(TEXT), "last passing step".into()));
    }
    out
}

/// Splits a panel into the plot and the legend column.
fn plot_and_legend<'a>(area: &Area<'a>) -> (Area<'a>, Area<'a>) {
    let (w, _) = area.dim_in_pixel();
    area.split_horizontally(w.saturating_sub(LEGEND_WIDTH))
}

/// Linear panel from 0 (messages/s).
fn rate_panel(
    area: &Area<'_>,
    caption: &str,
    x_desc: &str,
    x: std::ops::Range<f64>,
    series: &[Series],
    marks: &Marks,
) -> Result<(), String> {
    let (plot, side) = plot_and_legend(area);
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y_max = if top > 0.0 { top * 1.12 } else { 1.0 };
    let mut chart = ChartBuilder::on(&plot)
        .caption(caption, (FONT, 19).into_font().color(&BLACK))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(86)
        .build_cartesian_2d(x.clone(), 0f64..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("messages/s")
        .x_label_formatter(&|v| fmt_number(*v))
        .y_label_formatter(&|v| fmt_number(*v))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    draw_lines(&mut chart, series)?;
    draw_marks(&mut chart, marks, (0.0, y_max))?;
    legend(&side, &entries(series, marks))
}

/// Log-scale panel of latencies (ms) with the 1 s line.
fn latency_panel(
    area: &Area<'_>,
    caption: &str,
    x_desc: &str,
    x: std::ops::Range<f64>,
    series: &[Series],
    marks: &Marks,
) -> Result<(), String> {
    let (plot, side) = plot_and_legend(area);
    let values = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|v| *v > 0.0)
    };
    let lowest = values().fold(f64::INFINITY, f64::min);
    let highest = values().fold(0.0f64, f64::max);
    let y_lo = if lowest.is_finite() {
        10f64.powf((lowest * 0.8).max(0.001).log10().floor())
    } else {
        0.1
    };
    let y_hi = 10f64.powf((highest.max(1000.0) * 1.5).log10().ceil());
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            // Zero means "nothing measured" here; a log axis has no place for it.
            points: s.points.iter().copied().filter(|&(_, y)| y > 0.0).collect(),
            label: s.label.clone(),
            ..*s
        })
        .collect();
    let mut chart = ChartBuilder::on(&plot)
        .caption(caption, (FONT, 19).into_font().color(&BLACK))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(86)
        .build_cartesian_2d(x.clone(), (y_lo..y_hi).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("latency (ms, log scale)")
        .x_label_formatter(&|v| fmt_number(*v))
        .y_label_formatter(&|v| fmt_number(*v))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(DashedLineSeries::new(
            vec![(x.start, 1000.0), (x.end, 1000.0)],
            10,
            6,
            LIMIT.stroke_width(2),
        ))
        .map_err(err)?;
    draw_lines(&mut chart, &series)?;
    let marks = Marks {
        passed: Vec::new(),
        failed: Vec::new(),
        last_passing: marks.last_passing.clone(),
        rings: marks
            .rings
            .iter()
            .copied()
            .filter(|&((_, y), _)| y > 0.0)
            .collect(),
    };
    draw_marks(&mut chart, &marks, (y_lo, y_hi))?;
    let mut legend_entries = vec![(Glyph::Dashed(LIMIT), "1 s: Azure's limit".to_string())];
    legend_entries.extend(entries(&series, &marks));
    legend(&side, &legend_entries)
}

fn draw_lines<'a, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    series: &[Series],
) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let line = if s.band {
            LineSeries::new(
                s.points.iter().copied(),
                s.color.mix(BAND_ALPHA).stroke_width(BAND_WIDTH),
            )
        } else {
            LineSeries::new(s.points.iter().copied(), s.color.stroke_width(2))
                .point_size(if s.points.len() > 60 { 0 } else { 3 })
        };
        chart.draw_series(line).map_err(err)?;
    }
    Ok(())
}

fn draw_marks<'a, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    marks: &Marks,
    (y_lo, y_hi): (f64, f64),
) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(
            marks
                .passed
                .iter()
                .map(|&p| Circle::new(p, 6, PASSED.filled())),
        )
        .map_err(err)?;
    chart
        .draw_series(
            marks
                .failed
                .iter()
                .map(|&p| Cross::new(p, 7, FAILED.stroke_width(3))),
        )
        .map_err(err)?;
    chart
        .draw_series(
            marks
                .rings
                .iter()
                .map(|&(p, c)| Circle::new(p, 10, c.stroke_width(2))),
        )
        .map_err(err)?;
    if let Some((x, _)) = &marks.last_passing {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(*x, y_lo), (*x, y_hi)],
                8,
                5,
                PASSED.stroke_width(2),
            ))
            .map_err(err)?;
    }
    Ok(())
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
        fmt_count(report.connections),
        fmt_count(report.message_size as u64)
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
                fmt_count(step.senders)
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

/// Writes a chart comparing runs (one colour per run): outbound messages/s per step on top,
/// p99 latency per step below, each run's last passing step ringed. Runs without steps are
/// named in the header but have nothing to plot.
pub fn write_compare_svg(reports: &[&Report], path: &Path) -> Result<(), String> {
    if reports.is_empty() {
        return Err("chart: no reports to compare".into());
    }
    let labels = run_labels(reports);
    let runs: Vec<&[Step]> = reports.iter().map(|r| r.steps.as_slice()).collect();
    let by_senders = senders_axis(&runs);
    let x_desc = if by_senders {
        "sending connections"
    } else {
        "step"
    };
    let x_of = |s: &Step| {
        if by_senders {
            s.senders as f64
        } else {
            s.index as f64
        }
    };
    let range = x_range(runs.iter().flat_map(|steps| steps.iter().map(x_of)));

    let mut lines = Vec::new();
    for (r, label) in reports.iter().zip(&labels) {
        let outcome = match (last_passing(r), &r.azure_unit) {
            (Some(s), Some(unit)) => format!("last passing step {} ({unit})", s.index),
            (Some(s), None) => format!("last passing step {}", s.index),
            (None, _) if r.steps.is_empty() => "no steps".to_string(),
            (None, _) => "no step passed".to_string(),
        };
        lines.push(format!(
            "{label}: {} mode, {} + {}, {} connections, {}-byte messages; {outcome}",
            if r.mode.is_empty() { "-" } else { &r.mode },
            if r.transport.is_empty() {
                "-"
            } else {
                &r.transport
            },
            if r.protocol.is_empty() {
                "-"
            } else {
                &r.protocol
            },
            fmt_count(r.connections),
            fmt_count(r.message_size as u64),
        ));
    }
    let heading = scenario_heading(&reports[0].scenario);
    let title = format!("{heading}: {}", labels.join(" vs "));

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let head = header_height(lines.len());
    let (top, body) = root.split_vertically(head);
    header(&top, &title, &lines)?;
    let (upper, lower) = body.split_vertically((HEIGHT - head) / 2);

    let mut throughput = Vec::new();
    let mut p99 = Vec::new();
    let mut rate_marks = Marks::default();
    let mut latency_marks = Marks::default();
    for (i, (r, label)) in reports.iter().zip(&labels).enumerate() {
        let color = RUNS[i % RUNS.len()];
        throughput.push(Series::new(
            label.clone(),
            color,
            r.steps
                .iter()
                .map(|s| (x_of(s), s.outbound_per_s))
                .collect(),
        ));
        p99.push(Series::new(
            format!("{label} p99"),
            color,
            r.steps
                .iter()
                .filter(|s| s.counts.received > 0 || s.latency.max_ms > 0.0)
                .map(|s| (x_of(s), s.latency.p99_ms))
                .collect(),
        ));
        if let Some(s) = last_passing(r) {
            rate_marks.rings.push(((x_of(s), s.outbound_per_s), color));
            latency_marks
                .rings
                .push(((x_of(s), s.latency.p99_ms), color));
        }
    }
    rate_panel(
        &upper,
        "Outbound messages/s per step (ringed: last passing step)",
        x_desc,
        range.clone(),
        &throughput,
        &rate_marks,
    )?;
    latency_panel(
        &lower,
        "p99 delivery latency per step",
        x_desc,
        range,
        &p99,
        &latency_marks,
    )?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{multi_step, single_step};

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
