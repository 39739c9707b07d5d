//! Azure SignalR Service's published per-unit figures, as data.
//!
//! Source: Microsoft's "Performance guide for Azure SignalR Service",
//! <https://learn.microsoft.com/azure/azure-signalr/signalr-concept-performance> (the same page is
//! served at <https://docs.azure.cn/en-us/azure-signalr/signalr-concept-performance>). The page has
//! had two sets of tables, both encoded here as [`Guide`]s:
//!
//! - [`CURRENT`]: what both sites serve now — columns Unit1, Unit2, Unit10, Unit50, Unit100 and the
//!   Premium_P2 sizes Unit200, Unit500, Unit1000 (send to connection: Unit20 instead of Unit10).
//!   Read from the page's source, `articles/azure-signalr/signalr-concept-performance.md` in
//!   github.com/MicrosoftDocs/azure-docs at commit 030fd2e5a5d240cbf3946aab8bf7567d9bc3cba7; both
//!   live sites carry this revision's wording ("unit 50 or larger").
//! - [`SEVEN_UNIT`]: the earlier revision with the seven Standard columns Unit1, Unit2, Unit5,
//!   Unit10, Unit20, Unit50, Unit100. Read from MicrosoftDocs/azure-docs at commit
//!   f6db10cdb2bbca470269faebeb42682c916ce7bc and cross-checked, number for number, against the
//!   docs.azure.cn source (github.com/qixwang/mc-docs.zh-cn, commit
//!   8f9d1fcf51f3378372d3afe223fd03ce0204db4f) and the Swedish translation
//!   (MicrosoftDocs/azure-docs.sv-se, commit dc8497bf848d89a2cdb8aad9625902eea8d61eaa).
//!
//! Every figure was measured with WebSocket clients, 2,048-byte messages, one message per second
//! per sending connection, and counts as reached while 99 % of messages arrive within 1 second.
//! Connections are 1,000 per unit throughout. The guide publishes no connection-rate figure.
//!
//! Bandwidths are kept as printed, in the guide's units: its arithmetic (2 messages/s × 2,048 B =
//! "4 KBps"; 1,000 × 2,048 B = "2 MBps") makes 1 KB = 1,024 bytes and 1 MB = 1,000 KB. A few printed
//! bandwidths disagree with messages × 2 KB (see [`Row::inbound_kb_per_s`]); the planner therefore
//! works from the message rates, which are consistent.

use serde::Serialize;

/// The message size every published figure was measured with, in bytes.
pub const MESSAGE_SIZE: u64 = 2_048;
/// The send interval of every sending connection in the published runs, in milliseconds.
pub const SEND_INTERVAL_MS: u64 = 1_000;
/// Messages smaller than this cost about as much as a message of this size (the guide's note on
/// `messageSize` in its bandwidth formulas).
pub const MIN_COUNTED_SIZE: u64 = 1_024;
/// Client connections per unit (every table: Unit N holds N × 1,000).
pub const CONNECTIONS_PER_UNIT: u64 = 1_000;
/// Bytes in the guide's "KB".
pub const KB: u64 = 1_024;
/// Bytes in the guide's "MB" (1,000 of its KB).
pub const MB: u64 = 1_000 * KB;
/// Groups with fewer members than this are "small groups". The guide benchmarks small groups of 10
/// and big groups of connections / 10 (100 and more); its note on routing cost speaks of "small
/// groups (group size <20)", which is where this line is drawn.
pub const SMALL_GROUP_LIMIT: u64 = 20;

/// The guide's use cases, one table each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuideScenario {
    Echo,
    Broadcast,
    SmallGroup,
    BigGroup,
    SendToConnection,
    RestBroadcast,
    RestSendToUser,
}

impl GuideScenario {
    pub const ALL: [GuideScenario; 7] = [
        GuideScenario::Echo,
        GuideScenario::Broadcast,
        GuideScenario::SmallGroup,
        GuideScenario::BigGroup,
        GuideScenario::SendToConnection,
        GuideScenario::RestBroadcast,
        GuideScenario::RestSendToUser,
    ];

    /// Kebab-case name, as serialised.
    pub fn name(self) -> &'static str {
        match self {
            GuideScenario::Echo => "echo",
            GuideScenario::Broadcast => "broadcast",
            GuideScenario::SmallGroup => "small-group",
            GuideScenario::BigGroup => "big-group",
            GuideScenario::SendToConnection => "send-to-connection",
            GuideScenario::RestBroadcast => "rest-broadcast",
            GuideScenario::RestSendToUser => "rest-send-to-user",
        }
    }

    /// The guide's own heading for the table.
    pub fn title(self) -> &'static str {
        match self {
            GuideScenario::Echo => "Echo",
            GuideScenario::Broadcast => "Broadcast",
            GuideScenario::SmallGroup => "Send to small group",
            GuideScenario::BigGroup => "Send to big group",
            GuideScenario::SendToConnection => "Send to connection",
            GuideScenario::RestBroadcast => "Broadcast through REST API",
            GuideScenario::RestSendToUser => "Send to user through REST API",
        }
    }

    /// Whether the table's inbound rate is a ceiling that was reached. For broadcast, big groups
    /// and REST broadcast it is not: those runs send a fixed trickle (2 or 20 messages/s at every
    /// size) and the limit reached is outbound. Their inbound ceiling is taken from
    /// [`GuideScenario::inbound_ceiling`] instead.
    pub fn inbound_is_limit(self) -> bool {
        self.inbound_ceiling() == self
    }

    /// The table whose inbound rate caps this scenario's inbound traffic: its own where that rate
    /// is a measured ceiling; echo's (the guide's "maximum inbound bandwidth") for broadcast and
    /// big groups; REST send to user's (the REST API's inbound ceiling) for REST broadcast.
    pub fn inbound_ceiling(self) -> GuideScenario {
        match self {
            GuideScenario::Broadcast | GuideScenario::BigGroup => GuideScenario::Echo,
            GuideScenario::RestBroadcast => GuideScenario::RestSendToUser,
            other => other,
        }
    }
}

/// One column of a table: what one unit size carried in one use case.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Row {
    /// 1, 2, 5, … 1000.
    pub unit: u32,
    pub connections: u64,
    pub inbound_per_s: u64,
    pub outbound_per_s: u64,
    /// As printed, in the guide's KB/s (1 KB = 1,024 bytes; "2 MBps" is 2,000 here). Printed
    /// values that disagree with `inbound_per_s` × 2 KB: [`SEVEN_UNIT`] big group Unit1 (80, for
    /// 40) and Unit10 (20, for 40), REST send to user Unit50 (10,000, for 20,000).
    pub inbound_kb_per_s: u64,
    /// As printed, in the guide's KB/s. Disagrees with `outbound_per_s` × 2 KB in [`SEVEN_UNIT`]
    /// big group Unit1 (8,000, for 4,000) and REST send to user Unit50 (10,000, for 20,000).
    pub outbound_kb_per_s: u64,
    /// Members per group (group tables).
    pub group_size: Option<u64>,
    /// Groups (group tables).
    pub groups: Option<u64>,
}

impl Row {
    /// Inbound bytes per second the row stands for: its message rate × the 2,048-byte test size.
    pub fn inbound_bytes_per_s(&self) -> f64 {
        self.inbound_per_s as f64 * MESSAGE_SIZE as f64
    }

    /// Outbound bytes per second the row stands for: its message rate × the 2,048-byte test size.
    pub fn outbound_bytes_per_s(&self) -> f64 {
        self.outbound_per_s as f64 * MESSAGE_SIZE as f64
    }
}

/// One use case's table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Table {
    pub scenario: GuideScenario,
    pub rows: &'static [Row],
}

impl Table {
    pub fn row(&self, unit: u32) -> Option<&'static Row> {
        self.rows.iter().find(|row| row.unit == unit)
    }
}

/// One revision of the guide's tables.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Guide {
    /// `current` or `seven-unit`.
    pub name: &'static str,
    pub description: &'static str,
    pub url: &'static str,
    /// Every unit size with a column in some table, ascending.
    pub units: &'static [u32],
    /// Sizes that need the Premium_P2 tier (above 100 units).
    pub premium_from: Option<u32>,
    pub tables: &'static [Table],
}

impl Guide {
    pub fn table(&self, scenario: GuideScenario) -> &'static Table {
        self.tables
            .iter()
            .find(|table| table.scenario == scenario)
            .expect("every guide has a table for every scenario")
    }

    /// `Unit10`, or `Unit200 (Premium_P2)`.
    pub fn unit_label(&self, unit: u32) -> String {
        match self.premium_from {
            Some(from) if unit >= from => format!("Unit{unit} (Premium_P2)"),
            _ => format!("Unit{unit}"),
        }
    }
}

/// The guides by name.
pub const GUIDES: [&Guide; 2] = [&CURRENT, &SEVEN_UNIT];

/// The guide named `name` (`current` or `seven-unit`).
pub fn by_name(name: &str) -> Option<&'static Guide> {
    GUIDES.iter().copied().find(|guide| guide.name == name)
}

pub const URL: &str = "https://learn.microsoft.com/azure/azure-signalr/signalr-concept-performance";

/// A table row where every figure is a multiple of the unit count.
const fn row(unit: u32, inbound: u64, outbound: u64, inbound_kb: u64, outbound_kb: u64) -> Row {
    Row {
        unit,
        connections: unit as u64 * CONNECTIONS_PER_UNIT,
        inbound_per_s: inbound,
        outbound_per_s: outbound,
        inbound_kb_per_s: inbound_kb,
        outbound_kb_per_s: outbound_kb,
        group_size: None,
        groups: None,
    }
}

const fn group_row(
    unit: u32,
    group_size: u64,
    groups: u64,
    inbound: u64,
    outbound: u64,
    inbound_kb: u64,
    outbound_kb: u64,
) -> Row {
    Row {
        group_size: Some(group_size),
        groups: Some(groups),
        ..row(unit, inbound, outbound, inbound_kb, outbound_kb)
    }
}

// ---------------------------------------------------------------------------------------------
// The current revision. https://learn.microsoft.com/azure/azure-signalr/signalr-concept-performance
// (source: github.com/MicrosoftDocs/azure-docs, articles/azure-signalr/signalr-concept-performance.md
// at 030fd2e5a5d240cbf3946aab8bf7567d9bc3cba7).
// ---------------------------------------------------------------------------------------------

/// The guide as served now (Standard units 1–100 and Premium_P2 units 200–1000).
pub const CURRENT: Guide = Guide {
    name: "current",
    description: "Azure SignalR Service performance guide, current revision \
                  (Unit1, 2, 10, 50, 100; Premium_P2 Unit200, 500, 1000)",
    url: URL,
    units: &[1, 2, 10, 20, 50, 100, 200, 500, 1000],
    premium_from: Some(200),
    tables: &[
        Table {
            scenario: GuideScenario::Echo,
            rows: &[
                row(1, 1_000, 1_000, 2 * 1_000, 2 * 1_000),
                row(2, 2_000, 2_000, 4 * 1_000, 4 * 1_000),
                row(10, 10_000, 10_000, 20 * 1_000, 20 * 1_000),
                row(50, 50_000, 50_000, 100 * 1_000, 100 * 1_000),
                row(100, 100_000, 100_000, 200 * 1_000, 200 * 1_000),
                row(200, 200_000, 200_000, 400 * 1_000, 400 * 1_000),
                row(500, 500_000, 500_000, 1_000 * 1_000, 1_000 * 1_000),
                row(1000, 1_000_000, 1_000_000, 2_000 * 1_000, 2_000 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::Broadcast,
            rows: &[
                row(1, 2, 2_000, 4, 4 * 1_000),
                row(2, 2, 4_000, 4, 8 * 1_000),
                row(10, 2, 20_000, 4, 40 * 1_000),
                row(50, 2, 100_000, 4, 200 * 1_000),
                row(100, 2, 200_000, 4, 400 * 1_000),
                row(200, 2, 400_000, 4, 800 * 1_000),
                row(500, 2, 1_000_000, 4, 2_000 * 1_000),
                row(1000, 2, 2_000_000, 4, 4_000 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::SmallGroup,
            rows: &[
                group_row(1, 10, 100, 200, 2_000, 400, 4 * 1_000),
                group_row(2, 10, 200, 400, 4_000, 800, 8 * 1_000),
                group_row(10, 10, 1_000, 2_000, 20_000, 4 * 1_000, 40 * 1_000),
                group_row(50, 10, 5_000, 10_000, 100_000, 20 * 1_000, 200 * 1_000),
                group_row(100, 10, 10_000, 10_000, 100_000, 20 * 1_000, 200 * 1_000),
                group_row(200, 10, 20_000, 20_000, 200_000, 40 * 1_000, 400 * 1_000),
                group_row(500, 10, 50_000, 50_000, 500_000, 100 * 1_000, 1_000 * 1_000),
                group_row(
                    1000,
                    10,
                    100_000,
                    100_000,
                    1_000_000,
                    200 * 1_000,
                    2_000 * 1_000,
                ),
            ],
        },
        Table {
            scenario: GuideScenario::BigGroup,
            // Member counts as printed; from Unit10 on they are not connections / 10 (the page
            // seems to have kept the earlier revision's Unit1…Unit100 column of member counts).
            rows: &[
                group_row(1, 100, 10, 20, 2_000, 40, 4 * 1_000),
                group_row(2, 200, 10, 20, 4_000, 40, 8 * 1_000),
                group_row(10, 500, 10, 20, 20_000, 40, 40 * 1_000),
                group_row(50, 1_000, 10, 20, 100_000, 40, 200 * 1_000),
                group_row(100, 2_000, 10, 20, 200_000, 40, 400 * 1_000),
                group_row(200, 5_000, 10, 20, 400_000, 40, 800 * 1_000),
                group_row(500, 10_000, 10, 20, 1_000_000, 40, 2_000 * 1_000),
                group_row(1000, 20_000, 10, 20, 2_000_000, 40, 4_000 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::SendToConnection,
            // This table has a Unit20 column and no Unit10 column.
            rows: &[
                row(1, 1_000, 1_000, 2 * 1_000, 2 * 1_000),
                row(2, 2_000, 2_000, 4 * 1_000, 4 * 1_000),
                row(20, 20_000, 20_000, 40 * 1_000, 40 * 1_000),
                row(50, 20_000, 20_000, 40 * 1_000, 40 * 1_000),
                row(100, 20_000, 20_000, 40 * 1_000, 40 * 1_000),
                row(200, 40_000, 40_000, 80 * 1_000, 80 * 1_000),
                row(500, 100_000, 100_000, 200 * 1_000, 200 * 1_000),
                row(1000, 200_000, 200_000, 400 * 1_000, 400 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::RestBroadcast,
            rows: &[
                row(1, 2, 2_000, 4, 4 * 1_000),
                row(2, 2, 4_000, 4, 8 * 1_000),
                row(10, 2, 20_000, 4, 40 * 1_000),
                row(50, 2, 100_000, 4, 200 * 1_000),
                row(100, 2, 200_000, 4, 400 * 1_000),
                row(200, 2, 400_000, 4, 800 * 1_000),
                row(500, 2, 1_000_000, 4, 2_000 * 1_000),
                row(1000, 2, 2_000_000, 4, 4_000 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::RestSendToUser,
            rows: &[
                row(1, 200, 200, 400, 400),
                row(2, 400, 400, 800, 800),
                row(10, 2_000, 2_000, 4 * 1_000, 4 * 1_000),
                row(50, 10_000, 10_000, 20 * 1_000, 20 * 1_000),
                row(100, 20_000, 20_000, 40 * 1_000, 40 * 1_000),
                row(200, 40_000, 40_000, 80 * 1_000, 80 * 1_000),
                row(500, 100_000, 100_000, 200 * 1_000, 200 * 1_000),
                row(1000, 200_000, 200_000, 400 * 1_000, 400 * 1_000),
            ],
        },
    ],
};

// ---------------------------------------------------------------------------------------------
// The earlier revision with seven Standard units. Same URL, earlier revision (source:
// github.com/MicrosoftDocs/azure-docs at f6db10cdb2bbca470269faebeb42682c916ce7bc; identical
// figures in the docs.azure.cn source, github.com/qixwang/mc-docs.zh-cn at
// 8f9d1fcf51f3378372d3afe223fd03ce0204db4f, and MicrosoftDocs/azure-docs.sv-se at
// dc8497bf848d89a2cdb8aad9625902eea8d61eaa).
// ---------------------------------------------------------------------------------------------

/// The guide's earlier revision: Standard Unit1, 2, 5, 10, 20, 50, 100.
pub const SEVEN_UNIT: Guide = Guide {
    name: "seven-unit",
    description: "Azure SignalR Service performance guide, earlier revision \
                  (Standard Unit1, 2, 5, 10, 20, 50, 100)",
    url: URL,
    units: &[1, 2, 5, 10, 20, 50, 100],
    premium_from: None,
    tables: &[
        Table {
            scenario: GuideScenario::Echo,
            rows: &[
                row(1, 1_000, 1_000, 2 * 1_000, 2 * 1_000),
                row(2, 2_000, 2_000, 4 * 1_000, 4 * 1_000),
                row(5, 5_000, 5_000, 10 * 1_000, 10 * 1_000),
                row(10, 10_000, 10_000, 20 * 1_000, 20 * 1_000),
                row(20, 20_000, 20_000, 40 * 1_000, 40 * 1_000),
                row(50, 50_000, 50_000, 100 * 1_000, 100 * 1_000),
                row(100, 100_000, 100_000, 200 * 1_000, 200 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::Broadcast,
            rows: &[
                row(1, 2, 2_000, 4, 4 * 1_000),
                row(2, 2, 4_000, 4, 8 * 1_000),
                row(5, 2, 10_000, 4, 20 * 1_000),
                row(10, 2, 20_000, 4, 40 * 1_000),
                row(20, 2, 40_000, 4, 80 * 1_000),
                row(50, 2, 100_000, 4, 200 * 1_000),
                row(100, 2, 200_000, 4, 400 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::SmallGroup,
            rows: &[
                group_row(1, 10, 100, 200, 2_000, 400, 4 * 1_000),
                group_row(2, 10, 200, 400, 4_000, 800, 8 * 1_000),
                group_row(5, 10, 500, 1_000, 10_000, 2 * 1_000, 20 * 1_000),
                group_row(10, 10, 1_000, 2_500, 25_000, 5 * 1_000, 50 * 1_000),
                group_row(20, 10, 2_000, 4_000, 40_000, 8 * 1_000, 80 * 1_000),
                group_row(50, 10, 5_000, 7_000, 70_000, 14 * 1_000, 140 * 1_000),
                group_row(100, 10, 10_000, 7_000, 70_000, 14 * 1_000, 140 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::BigGroup,
            // Printed bandwidths kept as printed: Unit1 "80 KBps" / "8 MBps" and Unit10 "20 KBps"
            // disagree with 20 and 2,000 messages/s of 2 KB.
            rows: &[
                group_row(1, 100, 10, 20, 2_000, 80, 8 * 1_000),
                group_row(2, 200, 10, 20, 4_000, 40, 8 * 1_000),
                group_row(5, 500, 10, 20, 10_000, 40, 20 * 1_000),
                group_row(10, 1_000, 10, 20, 20_000, 20, 40 * 1_000),
                group_row(20, 2_000, 10, 20, 40_000, 40, 80 * 1_000),
                group_row(50, 5_000, 10, 20, 100_000, 40, 200 * 1_000),
                group_row(100, 10_000, 10, 20, 200_000, 40, 400 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::SendToConnection,
            rows: &[
                row(1, 1_000, 1_000, 2 * 1_000, 2 * 1_000),
                row(2, 2_000, 2_000, 4 * 1_000, 4 * 1_000),
                row(5, 5_000, 5_000, 10 * 1_000, 10 * 1_000),
                row(10, 8_000, 8_000, 16 * 1_000, 16 * 1_000),
                row(20, 9_000, 9_000, 18 * 1_000, 18 * 1_000),
                row(50, 20_000, 20_000, 40 * 1_000, 40 * 1_000),
                row(100, 20_000, 20_000, 40 * 1_000, 40 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::RestBroadcast,
            rows: &[
                row(1, 2, 2_000, 4, 4 * 1_000),
                row(2, 2, 4_000, 4, 8 * 1_000),
                row(5, 2, 10_000, 4, 20 * 1_000),
                row(10, 2, 20_000, 4, 40 * 1_000),
                row(20, 2, 40_000, 4, 80 * 1_000),
                row(50, 2, 100_000, 4, 200 * 1_000),
                row(100, 2, 200_000, 4, 400 * 1_000),
            ],
        },
        Table {
            scenario: GuideScenario::RestSendToUser,
            // Unit50 is printed as "10 MBps" both ways; 10,000 messages/s of 2 KB is 20 MBps.
            rows: &[
                row(1, 300, 300, 600, 600),
                row(2, 600, 600, 1_200, 1_200),
                row(5, 900, 900, 1_800, 1_800),
                row(10, 1_300, 1_300, 2_600, 2_600),
                row(20, 2_000, 2_000, 4 * 1_000, 4 * 1_000),
                row(50, 10_000, 10_000, 10 * 1_000, 10 * 1_000),
                row(100, 18_000, 18_000, 36 * 1_000, 36 * 1_000),
            ],
        },
    ],
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Printed bandwidths that disagree with messages × 2 KB, as (guide, scenario, unit).
    const MISPRINTS: [(&str, GuideScenario, u32); 3] = [
        ("seven-unit", GuideScenario::BigGroup, 1),
        ("seven-unit", GuideScenario::BigGroup, 10),
        ("seven-unit", GuideScenario::RestSendToUser, 50),
    ];

    #[test]
    fn every_table_has_every_scenario_and_sorted_known_units() {
        for guide in GUIDES {
            assert_eq!(guide.tables.len(), GuideScenario::ALL.len());
            for scenario in GuideScenario::ALL {
                let table = guide.table(scenario);
                assert!(!table.rows.is_empty());
                let units: Vec<u32> = table.rows.iter().map(|r| r.unit).collect();
                assert!(units.windows(2).all(|w| w[0] < w[1]), "{units:?}");
                for unit in units {
                    assert!(guide.units.contains(&unit), "{} {unit}", guide.name);
                }
            }
            assert!(guide.units.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn connections_are_a_thousand_per_unit() {
        for guide in GUIDES {
            for table in guide.tables {
                for row in table.rows {
                    assert_eq!(row.connections, row.unit as u64 * 1_000);
                }
            }
        }
    }

    #[test]
    fn printed_bandwidth_is_messages_times_2kb_except_known_misprints() {
        for guide in GUIDES {
            for table in guide.tables {
                for row in table.rows {
                    if MISPRINTS.contains(&(guide.name, table.scenario, row.unit)) {
                        continue;
                    }
                    assert_eq!(
                        row.inbound_kb_per_s * KB,
                        row.inbound_per_s * MESSAGE_SIZE,
                        "{} {:?} Unit{}",
                        guide.name,
                        table.scenario,
                        row.unit
                    );
                    assert_eq!(
                        row.outbound_kb_per_s * KB,
                        row.outbound_per_s * MESSAGE_SIZE
                    );
                }
            }
        }
    }

    #[test]
    fn fan_out_of_the_published_runs() {
        for guide in GUIDES {
            for row in guide.table(GuideScenario::Echo).rows {
                assert_eq!(row.inbound_per_s, row.outbound_per_s);
                assert_eq!(row.inbound_per_s, row.connections);
            }
            for scenario in [GuideScenario::Broadcast, GuideScenario::RestBroadcast] {
                for row in guide.table(scenario).rows {
                    assert_eq!(row.outbound_per_s, row.inbound_per_s * row.connections);
                }
            }
            for row in guide.table(GuideScenario::SmallGroup).rows {
                assert_eq!(row.group_size, Some(10));
                assert_eq!(row.outbound_per_s, row.inbound_per_s * 10);
                assert_eq!(row.groups.unwrap() * 10, row.connections);
            }
            for row in guide.table(GuideScenario::BigGroup).rows {
                assert_eq!(row.groups, Some(10));
                assert_eq!(row.outbound_per_s, row.inbound_per_s * row.connections / 10);
            }
            for scenario in [
                GuideScenario::SendToConnection,
                GuideScenario::RestSendToUser,
            ] {
                for row in guide.table(scenario).rows {
                    assert_eq!(row.inbound_per_s, row.outbound_per_s);
                }
            }
        }
    }

    #[test]
    fn known_unit100_figures() {
        let at = |guide: &Guide, scenario, unit| *guide.table(scenario).row(unit).unwrap();
        for guide in GUIDES {
            assert_eq!(at(guide, GuideScenario::Echo, 100).connections, 100_000);
            assert_eq!(at(guide, GuideScenario::Echo, 100).inbound_per_s, 100_000);
            assert_eq!(
                at(guide, GuideScenario::Broadcast, 100).outbound_per_s,
                200_000
            );
            assert_eq!(
                at(guide, GuideScenario::SendToConnection, 100).outbound_per_s,
                20_000
            );
        }
        let small = at(&CURRENT, GuideScenario::SmallGroup, 100);
        assert_eq!(
            (small.inbound_per_s, small.outbound_per_s),
            (10_000, 100_000)
        );
        let small = at(&SEVEN_UNIT, GuideScenario::SmallGroup, 100);
        assert_eq!((small.inbound_per_s, small.outbound_per_s), (7_000, 70_000));
        assert_eq!(
            at(&CURRENT, GuideScenario::RestSendToUser, 100).inbound_per_s,
            20_000
        );
        assert_eq!(
            at(&SEVEN_UNIT, GuideScenario::RestSendToUser, 100).inbound_per_s,
            18_000
        );
    }

    #[test]
    fn names_and_labels() {
        assert_eq!(by_name("current"), Some(&CURRENT));
        assert_eq!(by_name("seven-unit"), Some(&SEVEN_UNIT));
        assert_eq!(by_name("x"), None);
        assert_eq!(CURRENT.unit_label(100), "Unit100");
        assert_eq!(CURRENT.unit_label(200), "Unit200 (Premium_P2)");
        assert_eq!(SEVEN_UNIT.unit_label(100), "Unit100");
        assert!(GuideScenario::Echo.inbound_is_limit());
        assert!(!GuideScenario::Broadcast.inbound_is_limit());
        assert_eq!(
            GuideScenario::RestBroadcast.inbound_ceiling(),
            GuideScenario::RestSendToUser
        );
    }
}
