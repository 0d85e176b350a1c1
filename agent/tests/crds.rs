//! The Machina CRDs: the checked-in `deploy/crd/` files are what the types generate, the `crds`
//! command prints and writes them, and each CRD has the shape the agent and `kubectl` rely on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent::machina::crds::{self, REGENERATE_COMMAND};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrBool,
};

fn crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crd")
}

fn agent_bin() -> Command {
    Command::new(agent::test_binary!("unbounded-agent"))
}

#[test]
fn checked_in_crds_match_the_generated_ones() {
    let update = std::env::var_os("UPDATE_CRDS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for file in crds::files().unwrap() {
        let path = crd_dir().join(&file.file_name);
        if update {
            std::fs::create_dir_all(crd_dir()).unwrap();
            std::fs::write(&path, &file.text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) if text == file.text => {}
            Ok(_) => stale.push(format!("{} differs from what the types generate", path.display())),
            Err(err) => stale.push(format!("{}: {err}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "deploy/crd/ is stale:\n  {}\nregenerate with `{REGENERATE_COMMAND}` (or `UPDATE_CRDS=1 cargo test -p agent --test crds`) and review the diff",
        stale.join("\n  ")
    );
}

#[test]
fn deploy_crd_holds_only_generated_files() {
    let generated: BTreeSet<String> = crds::files().unwrap().into_iter().map(|f| f.file_name).collect();
    let present: BTreeSet<String> = std::fs::read_dir(crd_dir())
        .unwrap_or_else(|err| {
            panic!(
                "{}: {err}; create it with `{REGENERATE_COMMAND}`",
                crd_dir().display()
            )
        })
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let stray: Vec<_> = present.difference(&generated).collect();
    assert!(
        stray.is_empty(),
        "deploy/crd/ holds files no type generates (delete them): {stray:?}"
    );
}

#[test]
fn crds_command_prints_every_crd_as_a_yaml_document() {
    let output = agent::exec::run(agent_bin().arg("crds")).unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let printed: Vec<CustomResourceDefinition> = serde_yaml_ng::Deserializer::from_str(&stdout)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let names: Vec<_> = printed
        .iter()
        .map(|crd| crd.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "machines.unbounded-cloud.io",
            "machineconfigurations.unbounded-cloud.io",
            "machineconfigurationversions.unbounded-cloud.io",
            "machineoperations.unbounded-cloud.io",
        ]
    );
    assert_eq!(printed, crds::all());
}

#[test]
fn crds_command_writes_one_file_per_crd_and_leaves_right_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crd");
    let first = agent::exec::run_stdout(agent_bin().arg("crds").arg("--out").arg(&out)).unwrap();
    assert_eq!(
        first.lines().filter(|l| l.starts_with("wrote ")).count(),
        4,
        "{first}"
    );
    for file in crds::files().unwrap() {
        assert_eq!(
            std::fs::read_to_string(out.join(&file.file_name)).unwrap(),
            file.text
        );
    }
    let second = agent::exec::run_stdout(agent_bin().arg("crds").arg("--out").arg(&out)).unwrap();
    assert_eq!(
        second.lines().filter(|l| l.starts_with("unchanged ")).count(),
        4,
        "{second}"
    );
}

fn crd(kind: &str) -> CustomResourceDefinition {
    crds::all()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

fn schema(kind: &str) -> JSONSchemaProps {
    let crd = crd(kind);
    let version = &crd.spec.versions[0];
    version
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .clone()
        .unwrap()
}

/// The schema at `path` (property names) below `schema`.
fn at<'a>(schema: &'a JSONSchemaProps, path: &[&str]) -> &'a JSONSchemaProps {
    path.iter().fold(schema, |node, name| {
        node.properties
            .as_ref()
            .and_then(|p| p.get(*name))
            .unwrap_or_else(|| panic!("no property {name} in {path:?}"))
    })
}

fn property_names(schema: &JSONSchemaProps) -> BTreeSet<&str> {
    schema
        .properties
        .iter()
        .flat_map(|p| p.keys().map(String::as_str))
        .collect()
}

#[test]
fn every_crd_is_cluster_scoped_v1alpha3_with_a_status_subresource() {
    for crd in crds::all() {
        let name = crd.metadata.name.clone().unwrap();
        assert_eq!(crd.spec.group, "unbounded-cloud.io", "{name}");
        assert_eq!(crd.spec.scope, "Cluster", "{name}");
        assert_eq!(crd.spec.versions.len(), 1, "{name}");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha3", "{name}");
        assert!(version.served && version.storage, "{name}");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name}: no status subresource"
        );
    }
}

#[test]
fn machine_and_operation_print_their_phase() {
    for kind in ["Machine", "MachineOperation"] {
        let crd = crd(kind);
        let columns = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        assert!(
            columns
                .iter()
                .any(|c| c.name == "Phase" && c.json_path == ".status.phase" && c.type_ == "string"),
            "{kind}: no Phase column: {columns:?}"
        );
    }
}

#[test]
fn machine_schema_has_local_dns_with_the_config_fields_in_camel_case() {
    let schema = schema("Machine");
    let local_dns = at(&schema, &["spec", "agent", "localDNS"]);
    assert_eq!(
        property_names(local_dns),
        BTreeSet::from([
            "enabled",
            "nodeListenerIP",
            "clusterListenerIP",
            "metricsAddress",
            "cpuLimitInMilliCores",
            "memoryLimitInMB",
            "requiredPlugins",
            "corefileTemplate",
            "notrackReplies",
            "nodeListenerOverrides",
            "clusterListenerOverrides",
        ])
    );
    for listener in ["nodeListenerOverrides", "clusterListenerOverrides"] {
        let zone = match at(local_dns, &[listener]).additional_properties.as_ref() {
            Some(JSONSchemaPropsOrBool::Schema(zone)) => zone,
            other => panic!("{listener}: a map's values need a schema, not {other:?}"),
        };
        assert_eq!(
            property_names(zone),
            BTreeSet::from([
                "queryLogging",
                "protocol",
                "forwardDestination",
                "forwardPolicy",
                "maxConcurrent",
                "cacheDurationInSeconds",
                "cacheSuccessCapacity",
                "cacheSuccessTTLInSeconds",
                "cacheDenialCapacity",
                "cacheDenialTTLInSeconds",
                "serveStale",
                "serveStaleDurationInSeconds",
            ]),
            "{listener}"
        );
    }
    assert_eq!(
        at(local_dns, &["cpuLimitInMilliCores"]).type_.as_deref(),
        Some("integer")
    );
    assert_eq!(at(local_dns, &["enabled"]).type_.as_deref(), Some("boolean"));
    let core_dns = at(&schema, &["spec", "agent", "downloads", "coreDNS"]);
    assert_eq!(
        property_names(core_dns),
        BTreeSet::from(["url", "baseURL", "version", "sha256", "allowHTTP"])
    );
}

#[test]
fn machine_phase_and_operation_kind_are_enumerated() {
    let enum_values = |schema: &JSONSchemaProps| -> Vec<String> {
        schema
            .enum_
            .iter()
            .flatten()
            .filter_map(|v| v.0.as_str().map(str::to_owned))
            .collect()
    };
    let phase = enum_values(at(&schema("Machine"), &["status", "phase"]));
    assert_eq!(
        phase,
        [
            "Pending",
            "Rebooting",
            "Provisioning",
            "Joining",
            "Ready",
            "Failed"
        ]
    );
    let kinds = enum_values(at(&schema("MachineOperation"), &["spec", "operationKind"]));
    assert!(
        kinds.contains(&"NodeReboot".to_owned()) && kinds.contains(&"AgentReset".to_owned()),
        "{kinds:?}"
    );
}

#[test]
fn configuration_template_carries_the_agent_section_too() {
    for kind in ["MachineConfiguration", "MachineConfigurationVersion"] {
        let schema = schema(kind);
        let local_dns = at(&schema, &["spec", "template", "agent", "localDNS"]);
        assert!(property_names(local_dns).contains("nodeListenerIP"), "{kind}");
    }
}
