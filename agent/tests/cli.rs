//! The built `unbounded-agent` binary: `validate` exit codes, `render`
//! determinism and missing facts, `preflight` report formats.

use std::path::Path;
use std::process::{Command, Output};

static BIN: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("unbounded-agent"));

fn agent(args: &[&str]) -> Output {
    Command::new(&*BIN).args(args).output().unwrap()
}

fn case(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/render/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Writes a case's config and host resolv.conf into `dir`; returns their paths.
fn case_files(dir: &Path, name: &str) -> (String, String) {
    let c = case(name);
    let config = dir.join("config.json");
    let resolv = dir.join("resolv.conf");
    std::fs::write(&config, serde_json::to_string_pretty(&c["config"]).unwrap()).unwrap();
    std::fs::write(&resolv, c["host_resolv_conf"].as_str().unwrap()).unwrap();
    (config.display().to_string(), resolv.display().to_string())
}

/// Writes the `defaults` case's config with `patch` merged over it (JSON merge patch) to
/// `dir/config.json`; returns its path.
fn defaults_with(dir: &Path, patch: serde_json::Value) -> String {
    let mut c = case("defaults")["config"].clone();
    agent::config::merge_patch(&mut c, &patch);
    let path = dir.join("config.json");
    std::fs::write(&path, c.to_string()).unwrap();
    path.display().to_string()
}

/// `unbounded-agent render --config CONFIG --root ROOT --host-resolv-conf RESOLV`, then `extra`.
fn render(config: &str, root: &Path, resolv: &str, extra: &[&str]) -> Output {
    let root = root.to_str().unwrap();
    let mut args = vec![
        "render",
        "--config",
        config,
        "--root",
        root,
        "--host-resolv-conf",
        resolv,
    ];
    args.extend_from_slice(extra);
    agent(&args)
}

fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let ty = e.file_type().unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if ty.is_dir() {
                stack.push(e.path());
            } else if ty.is_symlink() {
                out.push((
                    rel,
                    std::fs::read_link(e.path())
                        .unwrap()
                        .display()
                        .to_string()
                        .into_bytes(),
                ));
            } else {
                out.push((rel, std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn validate_exits_0_for_a_valid_config() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = case_files(dir.path(), "defaults");
    let out = agent(&["validate", "--config", &config]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty());
}

#[test]
fn validate_exits_2_with_one_line_per_problem() {
    let dir = tempfile::tempdir().unwrap();
    let config = defaults_with(
        dir.path(),
        serde_json::json!({"LocalDNS": {"NodeListenerIP": "127.0.0.1", "MemoryLimitInMB": 0, "Typo": 1}}),
    );
    let out = agent(&["validate", "--config", &config]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "LocalDNS.Typo: unknown field",
            "LocalDNS.NodeListenerIP: 127.0.0.1 is a loopback address",
            "LocalDNS.MemoryLimitInMB: 0 must be greater than 0",
        ]
    );
}

#[test]
fn validate_output_json_gives_each_problem_its_path_and_message() {
    let dir = tempfile::tempdir().unwrap();
    let config = defaults_with(
        dir.path(),
        serde_json::json!({"LocalDNS": {"NodeListenerIP": "127.0.0.1"}}),
    );
    let out = agent(&["validate", "--config", &config, "--output", "json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["problems"][0]["path"], "LocalDNS.NodeListenerIP");
    assert_eq!(
        report["problems"][0]["message"],
        "127.0.0.1 is a loopback address"
    );

    let (valid, _) = case_files(dir.path(), "defaults");
    let out = agent(&["validate", "--config", &valid, "--output", "json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report, serde_json::json!({"valid": true, "problems": []}));
}

#[test]
fn validate_exits_2_naming_an_http_offline_source_that_start_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let config = defaults_with(
        dir.path(),
        serde_json::json!({"OfflineArtifacts": {"Source": "http://192.168.100.1:8080/bundle"}}),
    );
    let out = agent(&["validate", "--config", &config]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "OfflineArtifacts.Source: \"http://192.168.100.1:8080/bundle\" is not a local directory: \
             give an absolute path or a file:// URL (an offline bundle is read in place, never downloaded)"
        ]
    );
}

#[test]
fn validate_of_a_missing_file_fails_naming_it() {
    let out = agent(&["validate", "--config", "/nonexistent/config.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/config.json"));
}

#[test]
fn render_twice_gives_identical_trees_matching_the_expected_files() {
    let dir = tempfile::tempdir().unwrap();
    let (config, resolv) = case_files(dir.path(), "defaults");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for root in [&a, &b] {
        let out = render(&config, root, &resolv, &[]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let (sa, sb) = (snapshot(&a), snapshot(&b));
    assert_eq!(sa, sb);
    let corefile = std::fs::read(a.join("var/lib/machines/kube1/etc/unbounded/localdns/Corefile")).unwrap();
    let expected = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/render/defaults.expected/var/lib/machines/kube1/etc/unbounded/localdns/Corefile"),
    )
    .unwrap();
    assert_eq!(corefile, expected);
    let link = std::fs::read_link(
        a.join("var/lib/machines/kube1/etc/systemd/system/multi-user.target.wants/localdns.service"),
    )
    .unwrap();
    assert_eq!(link, Path::new("/etc/systemd/system/localdns.service"));
}

#[test]
fn render_for_kube2_writes_under_its_machine_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (config, resolv) = case_files(dir.path(), "defaults");
    let root = dir.path().join("root");
    let out = render(&config, &root, &resolv, &["--machine", "kube2"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        root.join("var/lib/machines/kube2/etc/unbounded/localdns/Corefile")
            .is_file()
    );
    assert!(!root.join("var/lib/machines/kube1").exists());
    assert!(
        root.join("etc/systemd/system/systemd-nspawn@kube2.service.d/10-localdns.conf")
            .is_file()
    );
}

#[test]
fn render_without_host_facts_reports_the_missing_fact_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (config, resolv) = case_files(dir.path(), "resolved-host");
    let root = dir.path().join("root");
    let out = render(&config, &root, &resolv, &[]);
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("host fact `resolvectl_domain` is missing"),
        "{stderr}"
    );
    assert!(!root.exists(), "nothing may be written on error");
}

#[test]
fn render_with_host_facts_takes_upstreams_from_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let (config, resolv) = case_files(dir.path(), "resolved-host");
    let facts = dir.path().join("facts.json");
    std::fs::write(&facts, case("resolved-host")["host_facts"].to_string()).unwrap();
    let root = dir.path().join("root");
    let out = render(
        &config,
        &root,
        &resolv,
        &["--host-facts", facts.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ups =
        std::fs::read_to_string(root.join("var/lib/machines/kube1/etc/unbounded/localdns/node-upstreams"))
            .unwrap();
    assert_eq!(ups, "192.168.100.1\n192.168.100.2\n");
}

#[test]
fn preflight_reports_json_with_the_localdns_config_check() {
    let dir = tempfile::tempdir().unwrap();
    // An offline bundle that does not exist: the artifact check fails at once instead of going online.
    let no_bundle = dir.path().join("no-bundle");
    let config = defaults_with(
        dir.path(),
        serde_json::json!({"OfflineArtifacts": {"Source": no_bundle.to_str().unwrap()}}),
    );
    let out = agent(&["preflight", "--config", &config, "--output", "json"]);
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let first = &report["checks"][0];
    assert_eq!(first["name"], "localdns-config");
    assert_eq!(first["severity"], "ok");
    for key in ["status", "checks", "summary"] {
        assert!(report.get(key).is_some(), "{key} missing: {report}");
    }
}

#[test]
fn preflight_fails_on_an_invalid_config_with_one_finding_per_problem() {
    let dir = tempfile::tempdir().unwrap();
    let config = defaults_with(
        dir.path(),
        serde_json::json!({"LocalDNS": {"CPULimitInMilliCores": 0, "MemoryLimitInMB": 0}}),
    );
    let out = agent(&["preflight", "--config", &config]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("error   localdns-config"))
            .count(),
        2,
        "{text}"
    );
    let ignored = agent(&["preflight", "--config", &config, "--ignore", "localdns-config"]);
    assert_eq!(ignored.status.code(), Some(0), "{ignored:?}");
}

#[test]
fn preflight_refuses_an_unknown_check_to_ignore_and_lists_the_valid_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = case_files(dir.path(), "defaults");
    let out = agent(&["preflight", "--config", &config, "--ignore", "localdns-conntrak"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'localdns-conntrak' for '--ignore <CHECK>'"),
        "{stderr}"
    );
    for check in agent::preflight::CHECKS {
        assert!(stderr.contains(check.name), "{} not listed: {stderr}", check.name);
    }
}
