//! The supervisor's modules form layers: the run loop above reloads, the fallback and the standby,
//! all of them above `coredns` (one CoreDNS process and the outcome of a supervision), probes and
//! settings. Read from the sources by the workspace's `module-layers` test support.

#[test]
fn no_top_level_module_depends_on_one_that_depends_on_it() {
    let expected = [
        "run", "coredns", "settings", "probe", "standby", "reload", "fallback",
    ];
    // At run time: an archived test runs in another checkout (nextest remaps this variable).
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo and nextest set CARGO_MANIFEST_DIR");
    if let Err(problem) = module_layers::ensure_layered(crate_dir.as_ref(), &expected) {
        panic!("{problem}");
    }
}
