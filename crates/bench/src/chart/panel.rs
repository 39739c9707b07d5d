//! The panels a chart is made of: lines ([`Series`]) and what is marked besides them
//! ([`Marks`]) in a plot with its legend in a column of its own, the axes, and the header.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use switchyard_capacity::format;
use switchyard_capacity::report::Step;

use super::{err, Area, FAILED, FONT, GRID, GRID_BOLD, LIMIT, PASSED, TEXT};

/// One line of a panel.
pub(super) struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    /// Drawn as a wide translucent band, so a line on top of it leaves it visible.
    band: bool,
}

impl Series {
    pub(super) fn new(label: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Self {
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

    pub(super) fn band(self) -> Self {
        Series { band: true, ..self }
    }
}

/// What a panel marks besides its lines.
#[derive(Default)]
pub(super) struct Marks {
    /// Points of steps that passed / failed Azure's rule.
    pub(super) passed: Vec<(f64, f64)>,
    pub(super) failed: Vec<(f64, f64)>,
    /// x of the last passing step, and its legend text.
    pub(super) last_passing: Option<(f64, String)>,
    /// Rings around points (a run's last passing step in a comparison).
    pub(super) rings: Vec<((f64, f64), RGBColor)>,
}

/// The x axis: its values per step and its name.
pub(super) fn step_axis(steps: &[Step]) -> (Vec<f64>, &'static str) {
    let senders: Vec<f64> = steps.iter().map(|s| s.senders as f64).collect();
    if senders_axis(&[steps]) {
        (senders, "sending connections")
    } else {
        (steps.iter().map(|s| s.index as f64).collect(), "step")
    }
}

/// Whether sending connections can be the x axis of all these step lists: positive and
/// rising within each.
pub(super) fn senders_axis(runs: &[&[Step]]) -> bool {
    runs.iter().all(|steps| {
        steps.iter().all(|s| s.senders > 0) && steps.windows(2).all(|w| w[0].senders < w[1].senders)
    })
}

pub(super) fn x_range(xs: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
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

pub(super) fn header(area: &Area<'_>, title: &str, lines: &[String]) -> Result<(), String> {
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

pub(super) fn header_height(lines: usize) -> u32 {
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
pub(super) fn rate_panel(
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
        .x_label_formatter(&|v| format::number(*v))
        .y_label_formatter(&|v| format::number(*v))
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
pub(super) fn latency_panel(
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
        .x_label_formatter(&|v| format::number(*v))
        .y_label_formatter(&|v| format::number(*v))
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
