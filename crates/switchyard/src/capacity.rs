//! `switchyard capacity`: what a load needs by Azure SignalR Service's performance guide, and
//! whether what `switchyard-bench` measured covers it.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use switchyard_capacity::format;
use switchyard_capacity::guide::{self, Guide};
use switchyard_capacity::plan::{self, Comparison, Load, LoadPlan, Measured, Plan};
use switchyard_capacity::report::Report;
use switchyard_capacity::scenario::Scenario;
use switchyard_capacity::spec::{self, LoadSpec};

pub const LONG_ABOUT: &str = "\
Plan capacity with Azure SignalR Service's performance guide, and check it against benchmarks.

Describe one load with --scenario and the flags after it, and any number of further loads with \
--load; all loads run at the same time. For each load and for their total it prints inbound and \
outbound messages per second and bandwidth, and the smallest Azure unit whose published figures \
carry it. With --report (switchyard-bench --summary-json files) it compares the loads with what \
the last passing step of a report of the same scenario measured.";

pub const AFTER_LONG_HELP: &str = "\
Load specs (--load): comma-separated key=value pairs with the flags' names and meanings:
  scenario, connections, senders, message-size, send-interval, group-size, groups
  e.g. --load scenario=broadcast,connections=5000,senders=2,message-size=1KB,send-interval=500ms

Scenarios: echo, broadcast, send-to-group, send-to-connection, rest-broadcast, rest-send-to-user.

Formulas (learn.microsoft.com/azure/azure-signalr/signalr-concept-performance):
  inbound/s  = senders / send interval
  outbound/s = inbound/s x fan-out: 1 for echo, send-to-connection and rest-send-to-user;
               every connection for broadcast and rest-broadcast; the group size for send-to-group
  bandwidth  = messages/s x message size; messages under 1 KB count as 1 KB
  billed     = outbound/s x 2 KB pieces per message
A unit carries a load when its connections, inbound and outbound bandwidth (the guide's message
rates at its 2 KB test size) fit; a mix of loads adds up each load's share of its own scenario's
figures. Groups under 20 members use the small-group figures, larger ones the big-group figures.
Bandwidths use the guide's units (as switchyard-bench prints them): KBps and MBps, with 1 KB =
1,024 bytes and 1 MB = 1,000 KB.

Reports: a load is compared with the report of its scenario (and group class) whose last passing
step gives it the most headroom; the shares of several loads add up. Headroom = measured /
needed for the tightest of connections, inbound and outbound bandwidth.

Exit status: 0 when every load is covered by a report (or no --report was given), 1 when a load
is not covered or no report measured its scenario, 2 on usage errors.";

/// `switchyard capacity` flags (the command's help texts are [`LONG_ABOUT`] and
/// [`AFTER_LONG_HELP`], attached where the command is declared).
#[derive(Args)]
pub struct CapacityArgs {
    /// Scenario of a load given with flags: echo, broadcast, send-to-group, send-to-connection,
    /// rest-broadcast, rest-send-to-user.
    #[arg(long, value_parser = spec::parse_scenario, requires = "connections")]
    scenario: Option<Scenario>,
    /// Client connections the load holds.
    #[arg(long, value_name = "N", requires = "scenario", value_parser = count("--connections"))]
    connections: Option<u64>,
    /// Connections (REST callers for REST scenarios) each sending one message per interval
    /// [default: every connection; required for broadcasts].
    #[arg(long, value_name = "N", requires = "scenario", value_parser = count("--senders"))]
    senders: Option<u64>,
    /// Payload size: bytes, or 2KB, 1.5KiB, 1MB (1 KB = 1,024 bytes) [default: 2KB].
    #[arg(long, value_name = "SIZE", requires = "scenario", value_parser = spec::parse_size)]
    message_size: Option<u64>,
    /// Time between two messages of one sender: 1s, 500ms, 0.5s, 2m [default: 1s].
    #[arg(long, value_name = "DURATION", requires = "scenario", value_parser = spec::parse_interval_ms)]
    send_interval: Option<f64>,
    /// Members per group (send-to-group).
    #[arg(long, value_name = "N", requires = "scenario", value_parser = count("--group-size"))]
    group_size: Option<u64>,
    /// Number of groups (send-to-group); without --group-size, groups have connections / N
    /// members.
    #[arg(long, value_name = "N", requires = "scenario", value_parser = count("--groups"))]
    groups: Option<u64>,
    /// A further load as key=value pairs (see below); repeatable.
    #[arg(long = "load", value_name = "SPEC", value_parser = LoadSpec::parse)]
    loads: Vec<LoadSpec>,
    /// Connections held in all, when loads share connections [default: the sum of the loads'].
    #[arg(long, value_name = "N", value_parser = count("--total-connections"))]
    total_connections: Option<u64>,
    /// A switchyard-bench report (--summary-json) to compare with; repeatable.
    #[arg(long = "report", value_name = "FILE")]
    reports: Vec<PathBuf>,
    /// Revision of the guide's tables: current (Unit1, 2, 10, 50, 100 and Premium_P2 200, 500,
    /// 1000) or seven-unit (the earlier Unit1, 2, 5, 10, 20, 50, 100).
    #[arg(long, value_name = "REVISION", default_value = "current", value_parser = ["current", "seven-unit"])]
    guide: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn count(what: &'static str) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync {
    move |text| spec::parse_count(what, text)
}

/// One report as read.
struct ReadReport {
    path: PathBuf,
    report: Report,
    measured: Measured,
    azure_unit: Option<String>,
}

/// A load's best comparison.
#[derive(Serialize)]
struct LoadCheck {
    /// 1-based load number.
    load: usize,
    /// The report compared with (none read of this scenario: not covered).
    report: Option<String>,
    #[serde(flatten)]
    comparison: Option<Comparison>,
}

#[derive(Serialize)]
struct Verdict {
    /// Σ of the loads' shares of their reports' capacity (none if a load has no report).
    share: Option<f64>,
    headroom: Option<f64>,
    covered: bool,
}

pub fn run(args: CapacityArgs) -> Result<ExitCode, String> {
    let guide: &Guide = guide::by_name(&args.guide).ok_or("unknown guide revision")?;
    let loads = loads(&args)?;
    let plan = plan::plan(guide, &loads, args.total_connections);
    let reports = args
        .reports
        .iter()
        .map(|path| read_report(guide, path))
        .collect::<Result<Vec<_>, _>>()?;
    let checks: Vec<LoadCheck> = loads
        .iter()
        .enumerate()
        .map(|(i, load)| check(i + 1, load, &reports))
        .collect();
    let verdict = (!reports.is_empty()).then(|| {
        let share = checks
            .iter()
            .map(|c| c.comparison.as_ref().map(|c| c.share))
            .sum::<Option<f64>>();
        Verdict {
            share,
            headroom: share.map(plan::headroom),
            covered: share.is_some_and(|s| s <= 1.0),
        }
    });
    let text = if args.json {
        json(guide, &plan, &reports, &checks, verdict.as_ref())
    } else {
        text(guide, &plan, &reports, &checks, verdict.as_ref())
    };
    print!("{text}");
    Ok(match verdict {
        Some(Verdict { covered: false, .. }) => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    })
}

fn loads(args: &CapacityArgs) -> Result<Vec<Load>, String> {
    let mut specs = Vec::new();
    if args.scenario.is_some() {
        specs.push(LoadSpec {
            scenario: args.scenario,
            connections: args.connections,
            senders: args.senders,
            message_size: args.message_size,
            send_interval_ms: args.send_interval,
            group_size: args.group_size,
            groups: args.groups,
        });
    }
    specs.extend(args.loads.iter().cloned());
    if specs.is_empty() {
        return Err(
            "describe a load: --scenario S --connections N […], or --load scenario=S,connections=N[,…] \
             (see switchyard capacity --help)"
                .into(),
        );
    }
    specs.iter().map(LoadSpec::build).collect()
}

fn read_report(guide: &Guide, path: &PathBuf) -> Result<ReadReport, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read report {}: {e}", path.display()))?;
    let report: Report = serde_json::from_str(&text)
        .map_err(|e| format!("cannot parse report {}: {e}", path.display()))?;
    Ok(ReadReport {
        path: path.clone(),
        measured: Measured::of(&report),
        azure_unit: plan::azure_unit_in(guide, &report),
        report,
    })
}

/// The matching report that leaves `load` the most headroom.
fn check(number: usize, load: &Load, reports: &[ReadReport]) -> LoadCheck {
    let best = reports
        .iter()
        .filter(|r| plan::matches(load, &r.report))
        .map(|r| (r, plan::compare(load, &r.measured)))
        .min_by(|a, b| a.1.share.total_cmp(&b.1.share));
    LoadCheck {
        load: number,
        report: best.as_ref().map(|(r, _)| r.path.display().to_string()),
        comparison: best.map(|(_, c)| c),
    }
}

// ---------------------------------------------------------------------------------------------
// Text
// ---------------------------------------------------------------------------------------------

fn text(
    guide: &Guide,
    plan: &Plan,
    reports: &[ReadReport],
    checks: &[LoadCheck],
    verdict: Option<&Verdict>,
) -> String {
    let mut out = String::new();
    plan_lines(&mut out, guide, plan);
    if reports.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nmeasured (last passing step):");
    for r in reports {
        report_lines(&mut out, r);
    }
    for (check, lp) in checks.iter().zip(&plan.loads) {
        check_line(&mut out, check, lp);
    }
    if let Some(v) = verdict {
        let _ = match (v.share, v.covered) {
            (Some(share), covered) => writeln!(
                out,
                "  total: needs {} of the measured capacity, headroom {}: {}",
                percent(share),
                times(plan::headroom(share)),
                if covered { "enough" } else { "not enough" }
            ),
            (None, _) => writeln!(
                out,
                "  total: not covered (a load's scenario was not measured)"
            ),
        };
    }
    out
}

/// The guide's header, each load and the total.
fn plan_lines(out: &mut String, guide: &Guide, plan: &Plan) {
    let _ = writeln!(out, "{}", guide.description);
    let _ = writeln!(out, "{}", guide.url);
    let _ = writeln!(
        out,
        "Messages under 1 KB count as 1 KB; 1 KB = 1,024 bytes, 1 MB = 1,000 KB (the guide's units)."
    );
    for (i, lp) in plan.loads.iter().enumerate() {
        let _ = writeln!(out, "\nload {}: {}", i + 1, describe(lp));
        traffic_lines(out, &lp.traffic);
        let _ = writeln!(
            out,
            "  {:<9} {} ({} figures)",
            "Azure",
            unit(guide, lp.azure_unit),
            lp.guide_scenario.title().to_lowercase()
        );
    }
    let total = &plan.total;
    let _ = writeln!(
        out,
        "\ntotal: {} load{}, {} connections",
        plan.loads.len(),
        if plan.loads.len() == 1 { "" } else { "s" },
        format::count(total.connections)
    );
    traffic_lines(out, &total.traffic);
    let _ = writeln!(out, "  {:<9} {}", "Azure", unit(guide, total.azure_unit));
}

/// What one report measured in its last passing step.
fn report_lines(out: &mut String, r: &ReadReport) {
    let m = &r.measured;
    let _ = writeln!(
        out,
        "  {}: {} on {} ({}, {}, {}), {} B messages",
        r.path.display(),
        m.scenario,
        m.target,
        m.mode,
        m.transport,
        m.protocol,
        format::count(m.message_size)
    );
    let _ = match m.step {
        Some(step) => writeln!(
            out,
            "    step {step}: {} connections, {} in/s, {} out/s, p99 {} ms; reaches {}",
            format::count(m.connections),
            format::number(m.inbound_per_s),
            format::number(m.outbound_per_s),
            m.p99_ms.map_or(format::NONE.into(), format::number),
            r.azure_unit.as_deref().unwrap_or("no Azure unit")
        ),
        None => writeln!(out, "    no step passed"),
    };
}

/// One load against its best report.
fn check_line(out: &mut String, check: &LoadCheck, lp: &LoadPlan) {
    let load = &lp.load;
    let _ = match (&check.report, &check.comparison) {
        (Some(path), Some(c)) => writeln!(
            out,
            "  load {} ({}) vs {path}: needs {} of connections, {} of inbound, {} of \
             outbound; headroom {}: {}",
            check.load,
            load.scenario.name(),
            percent(c.connections_share),
            percent(c.inbound_share),
            percent(c.outbound_share),
            times(c.headroom),
            if c.enough { "enough" } else { "not enough" }
        ),
        _ => writeln!(
            out,
            "  load {} ({}): no report of {}{}: not covered",
            check.load,
            load.scenario.name(),
            lp.guide_scenario.title().to_lowercase(),
            match load.group_size {
                Some(size) => format!(" (groups of {size})"),
                None => String::new(),
            }
        ),
    };
}

fn describe(lp: &LoadPlan) -> String {
    let load = &lp.load;
    let mut text = format!(
        "{}, {} connections, {} {} every {}, {} B messages",
        load.scenario.name(),
        format::count(load.connections),
        format::count(load.senders),
        match (load.scenario.is_rest(), load.senders) {
            (true, 1) => "REST caller",
            (true, _) => "REST callers",
            (false, 1) => "sender",
            (false, _) => "senders",
        },
        interval(load.send_interval_ms),
        format::count(load.message_size),
    );
    if let Some(size) = load.group_size {
        let _ = write!(text, ", groups of {}", format::count(size));
    }
    if lp.counted_message_size != load.message_size {
        let _ = write!(
            text,
            " (counted as {} B)",
            format::count(lp.counted_message_size)
        );
    }
    text
}

fn traffic_lines(out: &mut String, t: &plan::Traffic) {
    let _ = writeln!(
        out,
        "  {:<9} {:>10} msg/s {:>11}",
        "inbound",
        format::number(t.inbound_per_s),
        format::bandwidth(t.inbound_bytes_per_s)
    );
    let _ = writeln!(
        out,
        "  {:<9} {:>10} msg/s {:>11}   ({} billed msg/s)",
        "outbound",
        format::number(t.outbound_per_s),
        format::bandwidth(t.outbound_bytes_per_s),
        format::number(t.billed_outbound_per_s)
    );
}

fn unit(guide: &Guide, unit: Option<u32>) -> String {
    match unit {
        Some(unit) => guide.unit_label(unit),
        None => format!(
            "none: more than the largest published unit (Unit{})",
            guide.units.last().copied().unwrap_or(0)
        ),
    }
}

fn interval(ms: f64) -> String {
    if ms >= 1_000.0 {
        format!("{} s", format::number(ms / 1_000.0))
    } else {
        format!("{} ms", format::number(ms))
    }
}

fn percent(share: f64) -> String {
    if share.is_finite() {
        format!("{}%", format::number(share * 100.0))
    } else {
        "all (nothing measured)".into()
    }
}

fn times(headroom: f64) -> String {
    if headroom.is_finite() {
        format!("{headroom:.2}x")
    } else {
        "unlimited".into()
    }
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

fn json(
    guide: &Guide,
    plan: &Plan,
    reports: &[ReadReport],
    checks: &[LoadCheck],
    verdict: Option<&Verdict>,
) -> String {
    let label = |unit: Option<u32>| unit.map(|u| guide.unit_label(u));
    let loads: Vec<serde_json::Value> = plan
        .loads
        .iter()
        .map(|lp| {
            let mut value = serde_json::to_value(lp).unwrap_or_default();
            value["azure_unit"] = serde_json::json!(label(lp.azure_unit));
            value
        })
        .collect();
    let mut total = serde_json::to_value(&plan.total).unwrap_or_default();
    total["azure_unit"] = serde_json::json!(label(plan.total.azure_unit));
    let reports: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "path": r.path.display().to_string(),
                "measured": r.measured,
                "azure_unit": r.azure_unit,
            })
        })
        .collect();
    let value = serde_json::json!({
        "guide": {"name": guide.name, "description": guide.description, "url": guide.url},
        "loads": loads,
        "total": total,
        "reports": reports,
        "comparisons": if reports.is_empty() { serde_json::Value::Null } else { serde_json::json!(checks) },
        "covered": verdict.map(|v| v.covered),
        "verdict": verdict,
    });
    format!(
        "{}\n",
        serde_json::to_string_pretty(&value).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(format::count(0), "0");
        assert_eq!(format::count(999), "999");
        assert_eq!(format::count(1_000), "1,000");
        assert_eq!(format::count(1_234_567), "1,234,567");
        assert_eq!(format::number(0.2), "0.2");
        assert_eq!(format::number(2.0), "2");
        assert_eq!(format::number(12_345.6), "12,346");
        // One bandwidth unit with switchyard-bench: the guide's KBps and MBps.
        assert_eq!(format::bandwidth(4.0 * 1_024.0), "4 KBps");
        assert_eq!(format::bandwidth(20_480_000.0), "20 MBps");
        assert_eq!(format::bandwidth(1_228_800.0), "1.2 MBps");
        assert_eq!(format::bandwidth(100.0), "100 Bps");
        assert_eq!(interval(500.0), "500 ms");
        assert_eq!(interval(1_500.0), "1.5 s");
        assert_eq!(percent(0.5), "50%");
        assert_eq!(times(2.0), "2.00x");
        assert_eq!(times(f64::INFINITY), "unlimited");
    }
}
