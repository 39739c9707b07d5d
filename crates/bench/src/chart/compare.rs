//! The chart of several runs side by side.

use std::path::Path;

use plotters::prelude::*;
use switchyard_capacity::format;
use switchyard_capacity::report::{Report, Step};

use super::panel::{
    header, header_height, latency_panel, rate_panel, senders_axis, x_range, Marks, Series,
};
use super::{err, HEIGHT, RUNS, WIDTH};
use crate::report::{last_passing, run_labels, scenario_heading};

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
            format::count(r.connections),
            format::count(r.message_size as u64),
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
