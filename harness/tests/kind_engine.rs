//! The Kind cluster's container engine, probed for real: the engine `Engine::detect` takes runs a
//! privileged container (on a host where Docker cannot, Podman with the lab's runc configuration),
//! and one that cannot is refused with the engine's own reason.

use std::fs;

use harness::kind::engine::{Engine, EngineError, EngineKind, PROBE_IMAGE};

#[test]
fn the_detected_engine_runs_a_privileged_container_and_says_which_it_is() {
    let conf = tempfile::tempdir().unwrap();
    let engine = Engine::detect_among(None, conf.path()).unwrap_or_else(|e| panic!("{e}"));
    engine
        .probe()
        .unwrap_or_else(|why| panic!("{}: {why}", engine.kind));
    let line = engine.describe();
    assert!(
        line.starts_with(&format!("container engine: {}", engine.kind)),
        "{line}"
    );
    let out = engine
        .command()
        .args(["image", "inspect", PROBE_IMAGE])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the probe image is in {}: {out:?}",
        engine.kind
    );
    if engine.kind == EngineKind::Podman {
        let conf_file = engine.containers_conf.as_ref().unwrap();
        let text = fs::read_to_string(conf_file).unwrap();
        assert!(text.contains("runtime = \"runc\""), "{text}");
    }
}

#[test]
fn podman_chosen_by_name_runs_privileged_containers_with_the_labs_conf() {
    let conf = tempfile::tempdir().unwrap();
    let engine = Engine::detect_among(Some("podman"), conf.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(engine.kind, EngineKind::Podman);
    assert_eq!(engine.containers_conf, Some(conf.path().join("containers.conf")));
}

#[test]
fn an_engine_that_cannot_run_a_privileged_container_is_refused_with_its_reason() {
    // Stand-in for an engine that refuses privileged containers: Podman told to use a runtime
    // that does not exist fails the same probe, on any host.
    let conf = tempfile::tempdir().unwrap();
    let mut engine = Engine::configure(EngineKind::Podman, conf.path()).unwrap();
    let bad = conf.path().join("bad.conf");
    fs::write(&bad, "[engine]\nruntime = \"no-such-runtime\"\n").unwrap();
    engine.containers_conf = Some(bad);
    let why = engine.probe().unwrap_err();
    assert!(why.contains("no-such-runtime"), "{why}");
}

#[test]
fn an_unknown_engine_name_is_refused_naming_the_variable() {
    let conf = tempfile::tempdir().unwrap();
    let err = Engine::detect_among(Some("lxc"), conf.path()).unwrap_err();
    assert!(matches!(err, EngineError::BadChoice(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "LAB_CONTAINER_ENGINE=\"lxc\" is neither docker nor podman"
    );
}
