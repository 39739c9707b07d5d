//! Shared vocabulary for every Switchyard crate. No I/O.
//!
//! # Layout
//! - [`clock`]: wall-clock time in the units the protocols use.
//! - [`names`]: validated hub, group, user and connection names.
//! - [`protocol`]: hub protocol names and the per-protocol [`Payloads`] of one message.
//! - [`close`]: why a connection ended, as data with stable codes.
//! - [`message`]: sends and commands between nodes, and the channels that address them.
//! - [`size`]: byte sizes written for people (`64KiB`, `1MB`), for settings and flags.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod clock;
pub mod close;
pub mod message;
pub mod names;
pub mod protocol;
pub mod size;

pub use close::CloseReason;
pub use message::{user_group_key, Channel, Message, Target, UserGroupEntry, UserGroupKey};
pub use names::{ConnectionId, GroupName, HubName, NameError, UserId};
pub use protocol::{Payloads, Protocol};
