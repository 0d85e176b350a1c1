//! `agent::test_binary!("name")`: where an integration test finds one of the workspace's binaries.
//!
//! Cargo's `CARGO_BIN_EXE_<name>` is a path fixed when the test is compiled; a nextest archive
//! unpacked elsewhere (PR CI's test jobs, another runner) no longer has the binary there, and
//! nextest names its new place at run time in `NEXTEST_BIN_EXE_<name>`. The macro prefers that.

/// The path of binary `$name` of this workspace, for an integration test (see the module docs).
#[macro_export]
macro_rules! test_binary {
    ($name:literal) => {
        ::std::env::var_os(concat!("NEXTEST_BIN_EXE_", $name))
            .map(::std::path::PathBuf::from)
            .unwrap_or_else(|| ::std::path::PathBuf::from(env!(concat!("CARGO_BIN_EXE_", $name))))
    };
}
