//! Shared by the property tests (`agent/tests/prop_*.rs`): how many cases a run tries and
//! where a failing case is kept.
//!
//! A failing case is written, shrunk, to `agent/tests/<test file>.proptest-regressions` (next to
//! the test, committed). Every run replays the kept cases first, before the random ones, so a
//! kept case is replayed by running the test as usual, e.g.
//! `cargo nextest run -p agent --test prop_config`. `PROPTEST_CASES=20000` tries more random
//! cases.

#![allow(dead_code)]

use proptest::test_runner::{Config, FileFailurePersistence};

/// Random cases per property and run, unless `PROPTEST_CASES` says otherwise.
pub const CASES: u32 = 2000;

/// The configuration of every property: [`CASES`] cases (or `PROPTEST_CASES`), failures
/// kept in `<test file>.proptest-regressions` beside the test.
pub fn config() -> Config {
    config_with(CASES)
}

/// [`config`] for a property that costs more per case (it unpacks archives on disk, say):
/// `cases` unless `PROPTEST_CASES` is set.
pub fn config_with(cases: u32) -> Config {
    let from_env = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok());
    Config {
        cases: from_env.unwrap_or(cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}
