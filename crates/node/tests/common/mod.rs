//! The shared test kit (`switchyard-testkit`), under the name these tests have always used.
#![allow(unused_imports)]

pub use switchyard_testkit::*;
