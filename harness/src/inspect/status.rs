//! `harness lab status`: each VM of a running lab — QEMU, its Node's Ready condition (from the
//! lab's API server), the machine slot, `localdns.service` in the machine and the listeners'
//! `/ready` — and where the logs are. One guest command per VM ([`status_script`]), one
//! `kubectl get nodes` for the lab.
//!
//! The JSON shape (`--output json`, [`LabStatus`]; absent facts are `null`):
//!
//! ```json
//! {
//!   "lab": "lab-0", "number": 0,
//!   "owner": { "pid": 4242, "alive": true, "command": "harness lab up" },
//!   "kubernetes_version": "v1.35.4", "api_server": "https://127.0.0.1:41235",
//!   "kubeconfig": "/run/unbounded-lab/lab-0/kubeconfig",
//!   "kind": { "cluster": "lab-0", "nodes": [ { "container": "lab-0-control-plane", "state": "running" } ],
//!             "problem": null },
//!   "logs": { "lab": ".../lab-up/lab", "control_plane": ".../lab-up/lab/control-plane" },
//!   "vms": [{
//!     "name": "localdns", "qemu_pid": 4300, "console": "/run/unbounded-lab/lab-0/vms/localdns/console.log",
//!     "node": { "registered": true, "ready": true, "conditions": "Ready=True (KubeletReady: ...)" },
//!     "slot": "kube1", "localdns": "active",
//!     "listeners": [ { "address": "169.254.10.10", "ready": true, "detail": "200 OK" },
//!                    { "address": "169.254.10.11", "ready": true, "detail": "200 OK" } ],
//!     "start_output": "/var/log/unbounded-lab/",
//!     "problems": []
//!   }]
//! }
//! ```
//!
//! `problems` lists what could not be found out (guest agent silent, API server unreachable).
//! `kind` is `null` unless the lab's cluster is a Kind cluster; its nodes are the engine's
//! containers labelled with the cluster's name and their state.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Node;
use serde::Serialize;

use super::view::{LabView, VmView};
use crate::deploy::evidence::GUEST_LOG_DIR;
use crate::deploy::ready::{describe_conditions, node_is_ready};
use crate::lab::record::ClusterRecord;

/// The agent's install state in the VM (its `slot` names the machine).
pub use agent::paths::INSTALL_STATE;
/// The LocalDNS listeners (node, cluster) and their readiness port.
pub const LISTENERS: [&str; 2] = ["169.254.10.10", "169.254.10.11"];
pub use agent::corefile::READY_PORT;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LabStatus {
    pub lab: String,
    pub number: u8,
    pub owner: Option<OwnerStatus>,
    pub kubernetes_version: Option<String>,
    pub api_server: Option<String>,
    pub kubeconfig: Option<String>,
    pub kind: Option<KindStatus>,
    pub logs: LogPlaces,
    pub vms: Vec<VmStatus>,
}

/// A Kind cluster's node containers, as its engine lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KindStatus {
    pub cluster: String,
    pub nodes: Vec<KindNodeStatus>,
    /// Why the engine could not be asked.
    pub problem: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KindNodeStatus {
    pub container: String,
    /// The engine's word: `running`, `exited`, ...
    pub state: String,
}

/// The node containers of the Kind cluster `kind` names, as the engine's API lists them by Kind's
/// label ([`crate::kind::engine_api`]).
pub fn kind_status(kind: &crate::controlplane::KindRecord) -> KindStatus {
    let listed = kind_engine_api(kind).and_then(|api| {
        api.node_containers(&kind.name)
            .map_err(|e| agent::error_chain::Chain(&e).to_string())
    });
    let (nodes, problem) = match listed {
        Ok(nodes) => (
            nodes
                .into_iter()
                .map(|n| KindNodeStatus {
                    container: n.name,
                    state: n.state,
                })
                .collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(e)),
    };
    KindStatus {
        cluster: kind.name.clone(),
        nodes,
        problem,
    }
}

/// The API of the engine the lab's Kind cluster runs in (its record's `KIND_EXPERIMENTAL_PROVIDER`
/// and `CONTAINERS_CONF`).
pub fn kind_engine_api(
    kind: &crate::controlplane::KindRecord,
) -> Result<crate::kind::engine_api::EngineApi, String> {
    let provider = kind
        .env
        .iter()
        .find(|(k, _)| k == "KIND_EXPERIMENTAL_PROVIDER")
        .map(|(_, v)| v.as_str())
        .unwrap_or("docker");
    let engine = match provider {
        "podman" => crate::kind::EngineKind::Podman,
        _ => crate::kind::EngineKind::Docker,
    };
    let env: Vec<(std::ffi::OsString, std::ffi::OsString)> =
        kind.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    crate::kind::engine_api::EngineApi::connect(engine, &env)
        .map_err(|e| agent::error_chain::Chain(&e).to_string())
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OwnerStatus {
    pub pid: i32,
    pub alive: bool,
    pub command: String,
}

/// Where the lab's logs are on the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogPlaces {
    /// The lab's DNS and HTTP logs.
    pub lab: Option<String>,
    /// The cluster's on the host (`kind-create.log`).
    pub control_plane: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VmStatus {
    pub name: String,
    /// QEMU's pid while it runs.
    pub qemu_pid: Option<i32>,
    /// The serial console's log on the host.
    pub console: String,
    pub node: Option<NodeStatus>,
    /// `kube1` or `kube2`: the install state's slot, else the one running machine.
    pub slot: Option<String>,
    /// `systemctl is-active localdns.service` in the machine (`active`, `inactive`, ...).
    pub localdns: Option<String>,
    pub listeners: Vec<ListenerStatus>,
    /// Where `start`'s output is in the VM.
    pub start_output: String,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    pub registered: bool,
    pub ready: bool,
    pub conditions: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ListenerStatus {
    pub address: String,
    /// `GET /ready` answered 200 `OK`.
    pub ready: bool,
    /// The status code and body, or curl's error.
    pub detail: String,
}

/// The guest part of a VM's status, in sections `@@<name>@@` ([`parse_sections`]).
pub fn status_script() -> String {
    let mut script = format!(
        "m=$(sed -n 's/.*\"slot\"[^\"]*\"\\([a-z0-9]*\\)\".*/\\1/p' {INSTALL_STATE} 2>/dev/null | head -n 1); \
         [ -n \"$m\" ] || m=$(machinectl list --no-legend 2>/dev/null | awk '{{print $1; exit}}'); \
         echo @@install-state@@; cat {INSTALL_STATE} 2>&1; echo; \
         echo @@machines@@; machinectl list --no-legend 2>&1; \
         echo @@localdns@@; [ -n \"$m\" ] && systemctl --machine=\"$m\" is-active localdns.service 2>&1; "
    );
    for ip in LISTENERS {
        let _ = write!(
            script,
            "echo @@ready {ip}@@; curl -sS --noproxy '*' -m 5 -w '\\n%{{http_code}}' http://{ip}:{READY_PORT}/ready 2>&1; echo; "
        );
    }
    // A last section, so whatever the guest channel appends after the output (an exit status
    // line, say) never lands in the last listener's section.
    script + "echo @@end@@; true"
}

/// The sections of [`status_script`]'s output: name → text.
pub fn parse_sections(output: &str) -> BTreeMap<String, String> {
    let mut sections = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("@@").and_then(|l| l.strip_suffix("@@")) {
            if let Some((name, text)) = current.take() {
                sections.insert(name, text);
            }
            current = Some((name.to_string(), String::new()));
        } else if let Some((_, text)) = &mut current {
            text.push_str(line);
            text.push('\n');
        }
    }
    if let Some((name, text)) = current {
        sections.insert(name, text);
    }
    sections
}

/// The slot: the install state's `slot`, else the first running machine.
pub fn slot_of(sections: &BTreeMap<String, String>) -> Option<String> {
    let from_state = sections
        .get("install-state")
        .and_then(|t| serde_json::from_str::<serde_json::Value>(t.trim()).ok())
        .and_then(|v| v.get("slot")?.as_str().map(str::to_string));
    from_state.or_else(|| {
        sections
            .get("machines")?
            .lines()
            .find_map(|l| l.split_whitespace().next().map(str::to_string))
    })
}

/// A listener's `/ready` from curl's output (`<body>\n<code>`, or an error and code `000`).
pub fn listener_of(address: &str, text: &str) -> ListenerStatus {
    let trimmed = text.trim_end();
    let (body, code) = trimmed.rsplit_once('\n').unwrap_or(("", trimmed));
    let ready = code == "200" && body.trim() == "OK";
    let detail = if body.trim().is_empty() {
        code.to_string()
    } else {
        format!("{code} {}", body.trim())
    };
    ListenerStatus {
        address: address.to_string(),
        ready,
        detail,
    }
}

/// The VM's guest facts into `status` (slot, LocalDNS, listeners).
pub fn apply_guest(status: &mut VmStatus, output: &str) {
    let sections = parse_sections(output);
    status.slot = slot_of(&sections);
    status.localdns = sections
        .get("localdns")
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    status.listeners = LISTENERS
        .iter()
        .map(|ip| match sections.get(&format!("ready {ip}")) {
            Some(text) => listener_of(ip, text),
            None => ListenerStatus {
                address: ip.to_string(),
                ready: false,
                detail: "not asked".into(),
            },
        })
        .collect();
}

/// The Node named like the VM, from `kubectl get nodes -o json`'s items.
pub fn node_status(nodes: &[Node], name: &str) -> NodeStatus {
    match nodes.iter().find(|n| n.metadata.name.as_deref() == Some(name)) {
        Some(node) => NodeStatus {
            registered: true,
            ready: node_is_ready(node),
            conditions: describe_conditions(node),
        },
        None => NodeStatus {
            registered: false,
            ready: false,
            conditions: "the Node is not registered".into(),
        },
    }
}

/// Every Node of the cluster through the lab's kubectl.
pub fn list_nodes(cluster: &ClusterRecord) -> Result<Vec<Node>, String> {
    let out = agent::exec::run_stdout(
        std::process::Command::new(&cluster.kubectl)
            .arg("--kubeconfig")
            .arg(&cluster.admin_kubeconfig)
            .args(["--request-timeout=20s", "get", "nodes", "-o", "json"]),
    )
    .map_err(|e| e.to_string())?;
    parse_node_list(&out)
}

/// The items of `kubectl get nodes -o json`, whose `kind` is `List` (not `NodeList`).
pub fn parse_node_list(json: &str) -> Result<Vec<Node>, String> {
    #[derive(serde::Deserialize)]
    struct Items {
        items: Vec<Node>,
    }
    serde_json::from_str::<Items>(json)
        .map(|l| l.items)
        .map_err(|e| format!("parsing `kubectl get nodes -o json`: {e}"))
}

/// A VM's status without its guest and Node facts.
fn vm_base(vm: &VmView) -> VmStatus {
    VmStatus {
        name: vm.name.clone(),
        qemu_pid: vm.qemu_pid(),
        console: vm.run.console().display().to_string(),
        node: None,
        slot: None,
        localdns: None,
        listeners: Vec::new(),
        start_output: format!("{GUEST_LOG_DIR}/"),
        problems: Vec::new(),
    }
}

/// Asks every VM and the API server.
pub fn collect(view: &LabView) -> LabStatus {
    let cluster = view.record.as_ref().ok().and_then(|r| r.cluster.clone());
    let nodes = cluster.as_ref().map(list_nodes);
    let vms = view
        .vms
        .iter()
        .map(|vm| {
            let mut status = vm_base(vm);
            match &nodes {
                Some(Ok(nodes)) => status.node = Some(node_status(nodes, &vm.name)),
                Some(Err(err)) => status.problems.push(format!("asking the API server: {err}")),
                None => {}
            }
            if status.qemu_pid.is_none() {
                status.problems.push("QEMU is not running".into());
                return status;
            }
            let running = || vm.qemu_pid().is_some();
            let mut guest = crate::vm::evidence::Guest::new(&vm.agent, &running);
            match guest.run(&status_script()) {
                Ok(output) => apply_guest(&mut status, &output),
                Err(why) => status.problems.push(format!("asking the VM: {why}")),
            }
            status
        })
        .collect();
    LabStatus {
        lab: view.name.clone(),
        number: view.number,
        owner: view.owner.map(|(o, alive)| OwnerStatus {
            pid: o.pid,
            alive,
            command: crate::netns::cmdline(o.pid),
        }),
        kubernetes_version: cluster.as_ref().map(|c| c.kubernetes_version.clone()),
        api_server: cluster.as_ref().map(|c| c.host_api_server.clone()),
        kubeconfig: cluster.as_ref().map(|c| c.admin_kubeconfig.display().to_string()),
        kind: cluster.as_ref().and_then(|c| c.kind.as_ref()).map(kind_status),
        logs: LogPlaces {
            lab: view.record.as_ref().ok().map(|r| r.log_dir.display().to_string()),
            control_plane: cluster.as_ref().map(|c| c.log_dir.display().to_string()),
        },
        vms,
    }
}

fn or_unknown(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or("unknown")
}

/// The status as text for a person.
pub fn render_text(status: &LabStatus) -> String {
    let mut text = format!("{}: ", status.lab);
    match &status.owner {
        Some(o) if o.alive => {
            let _ = write!(text, "owner pid {} ({})", o.pid, o.command);
        }
        Some(o) => {
            let _ = write!(text, "STALE: owner pid {} is gone", o.pid);
        }
        None => text.push_str("no owner file"),
    }
    if let (Some(version), Some(api)) = (&status.kubernetes_version, &status.api_server) {
        let _ = write!(text, "; Kubernetes {version} at {api}");
    }
    text.push('\n');
    if let Some(kind) = &status.kind {
        let nodes: Vec<String> = kind
            .nodes
            .iter()
            .map(|n| format!("{} {}", n.container, n.state))
            .collect();
        let _ = match &kind.problem {
            Some(why) => writeln!(
                text,
                "  Kind cluster {}: the engine could not be asked: {why}",
                kind.cluster
            ),
            None if nodes.is_empty() => writeln!(text, "  Kind cluster {}: NO NODE CONTAINER", kind.cluster),
            None => writeln!(text, "  Kind cluster {}: {}", kind.cluster, nodes.join(", ")),
        };
    }
    if status.vms.is_empty() {
        text.push_str("  no VMs\n");
    }
    for vm in &status.vms {
        let qemu = match vm.qemu_pid {
            Some(pid) => format!("running (QEMU pid {pid})"),
            None => "NOT RUNNING".into(),
        };
        let node = match &vm.node {
            Some(n) if n.ready => "Ready".to_string(),
            Some(n) if n.registered => format!("NOT Ready: {}", n.conditions),
            Some(_) => "not registered".into(),
            None => "unknown (no cluster)".into(),
        };
        let listeners = if vm.listeners.is_empty() {
            "unknown".to_string()
        } else {
            vm.listeners
                .iter()
                .map(|l| {
                    let state = if l.ready { "ready" } else { "NOT ready" };
                    format!("{} {state} ({})", l.address, l.detail)
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            text,
            "  VM {}: {qemu}\n    Node:       {node}\n    slot:       {}\n    localdns:   {}\n    listeners:  {listeners}\n",
            vm.name,
            or_unknown(&vm.slot),
            or_unknown(&vm.localdns),
        );
        for problem in &vm.problems {
            let _ = writeln!(text, "    problem:    {problem}");
        }
    }
    text.push_str("  logs:\n");
    if let Some(dir) = &status.logs.lab {
        let _ = writeln!(text, "    lab DNS/HTTP:   {dir}");
    }
    if let Some(dir) = &status.logs.control_plane {
        let _ = writeln!(text, "    control plane:  {dir}");
    }
    for vm in &status.vms {
        let _ = writeln!(
            text,
            "    VM {}:  console {}; `start` output in {} in the VM",
            vm.name, vm.console, vm.start_output
        );
    }
    let _ = writeln!(
        text,
        "    all of it in one directory: harness lab logs --lab {}",
        status.number
    );
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const GUEST_OUTPUT: &str = "@@install-state@@\n{\n  \"schema\": 1,\n  \"slot\": \"kube1\",\n  \"stage\": \"complete\"\n}\n\
        @@machines@@\nkube1 container systemd-nspawn debian 12 -\n@@localdns@@\nactive\n\
        @@ready 169.254.10.10@@\nOK\n200\n@@ready 169.254.10.11@@\ncurl: (7) Failed to connect\n000\n";

    fn a_vm() -> VmStatus {
        VmStatus {
            name: "localdns".into(),
            qemu_pid: Some(4300),
            console: "/run/unbounded-lab/lab-0/vms/localdns/console.log".into(),
            node: Some(NodeStatus {
                registered: true,
                ready: true,
                conditions: "Ready=True (KubeletReady: kubelet is posting ready status)".into(),
            }),
            slot: None,
            localdns: None,
            listeners: Vec::new(),
            start_output: "/var/log/unbounded-lab/".into(),
            problems: Vec::new(),
        }
    }

    #[test]
    fn kubectls_node_list_of_kind_list_parses() {
        let json = r#"{"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "localdns"}}]}"#;
        let nodes = parse_node_list(json).unwrap();
        assert_eq!(nodes[0].metadata.name.as_deref(), Some("localdns"));
        assert!(parse_node_list("{}").unwrap_err().contains("parsing"));
    }

    #[test]
    fn text_after_the_last_listener_does_not_land_in_its_section() {
        let out = "@@ready 169.254.10.11@@\nOK\n200\n@@end@@\n--- exit status 0 ---\n";
        let sections = parse_sections(out);
        let l = listener_of("169.254.10.11", &sections["ready 169.254.10.11"]);
        assert!(l.ready, "{l:?}");
        assert!(status_script().trim_end().ends_with("echo @@end@@; true"));
    }

    #[test]
    fn the_guest_output_gives_slot_localdns_and_each_listener() {
        let mut vm = a_vm();
        apply_guest(&mut vm, GUEST_OUTPUT);
        assert_eq!(vm.slot.as_deref(), Some("kube1"));
        assert_eq!(vm.localdns.as_deref(), Some("active"));
        assert_eq!(
            vm.listeners,
            vec![
                ListenerStatus {
                    address: "169.254.10.10".into(),
                    ready: true,
                    detail: "200 OK".into()
                },
                ListenerStatus {
                    address: "169.254.10.11".into(),
                    ready: false,
                    detail: "000 curl: (7) Failed to connect".into()
                },
            ]
        );
    }

    #[test]
    fn without_an_install_state_the_running_machine_is_the_slot() {
        let sections = parse_sections(
            "@@install-state@@\ncat: /var/lib/unbounded/agent/install-state.json: No such file\n\
             @@machines@@\nkube2 container systemd-nspawn - - -\n",
        );
        assert_eq!(slot_of(&sections).as_deref(), Some("kube2"));
        assert_eq!(slot_of(&parse_sections("@@machines@@\n")), None);
        // A 200 with another body is not ready.
        assert!(!listener_of("169.254.10.10", "NOT\n200\n").ready);
    }

    #[test]
    fn the_status_script_runs_on_this_host_and_yields_every_section() {
        let out =
            agent::exec::run_unchecked(std::process::Command::new("/bin/sh").args(["-c", &status_script()]))
                .unwrap();
        assert!(out.status.success(), "{out:?}");
        let sections = parse_sections(&String::from_utf8_lossy(&out.stdout));
        let names: Vec<&str> = sections.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "end",
                "install-state",
                "localdns",
                "machines",
                "ready 169.254.10.10",
                "ready 169.254.10.11"
            ]
        );
    }

    #[test]
    fn a_missing_node_is_reported_as_not_registered() {
        let node = node_status(&[], "localdns");
        assert!(!node.registered && !node.ready, "{node:?}");
    }

    /// A lab with one joined node whose cluster listener does not answer.
    pub(crate) fn a_status() -> LabStatus {
        let mut vm = a_vm();
        apply_guest(&mut vm, GUEST_OUTPUT);
        LabStatus {
            lab: "lab-0".into(),
            number: 0,
            owner: Some(OwnerStatus {
                pid: 4242,
                alive: true,
                command: "harness lab up".into(),
            }),
            kubernetes_version: Some("v1.35.4".into()),
            api_server: Some("https://127.0.0.1:16443".into()),
            kubeconfig: Some("/run/unbounded-lab/lab-0/kubeconfig".into()),
            kind: Some(KindStatus {
                cluster: "lab-0".into(),
                nodes: vec![KindNodeStatus {
                    container: "lab-0-control-plane".into(),
                    state: "running".into(),
                }],
                problem: None,
            }),
            logs: LogPlaces {
                lab: Some("/t/lab-up/lab".into()),
                control_plane: Some("/t/lab-up/lab/control-plane".into()),
            },
            vms: vec![vm],
        }
    }

    #[test]
    fn the_json_shape_is_the_documented_one() {
        let json = serde_json::to_value(a_status()).unwrap();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&json),
            [
                "api_server",
                "kind",
                "kubeconfig",
                "kubernetes_version",
                "lab",
                "logs",
                "number",
                "owner",
                "vms"
            ]
        );
        assert_eq!(keys(&json["owner"]), ["alive", "command", "pid"]);
        assert_eq!(keys(&json["kind"]), ["cluster", "nodes", "problem"]);
        assert_eq!(json["kind"]["nodes"][0]["state"], "running");
        assert_eq!(keys(&json["logs"]), ["control_plane", "lab"]);
        let vm = &json["vms"][0];
        assert_eq!(
            keys(vm),
            [
                "console",
                "listeners",
                "localdns",
                "name",
                "node",
                "problems",
                "qemu_pid",
                "slot",
                "start_output"
            ]
        );
        assert_eq!(keys(&vm["node"]), ["conditions", "ready", "registered"]);
        assert_eq!(keys(&vm["listeners"][0]), ["address", "detail", "ready"]);
        assert_eq!(vm["slot"], "kube1");
        assert_eq!(vm["node"]["ready"], true);
        assert_eq!(vm["listeners"][1]["ready"], false);
        // The module docs show the same shape, key for key.
        let doc = include_str!("status.rs");
        let example: String = doc
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .skip_while(|l| l.trim() != "```json")
            .skip(1)
            .take_while(|l| l.trim() != "```")
            .collect::<Vec<_>>()
            .join("\n");
        let example: serde_json::Value = serde_json::from_str(&example).unwrap();
        assert_eq!(shape(&example), shape(&json));
    }

    /// The keys of every object, recursively (arrays by their first element).
    fn shape(value: &serde_json::Value) -> Vec<String> {
        let mut keys = Vec::new();
        let mut walk = vec![(String::new(), value)];
        while let Some((path, value)) = walk.pop() {
            match value {
                serde_json::Value::Object(map) => {
                    for (key, v) in map {
                        keys.push(format!("{path}.{key}"));
                        walk.push((format!("{path}.{key}"), v));
                    }
                }
                serde_json::Value::Array(items) => {
                    walk.extend(items.first().map(|v| (format!("{path}[]"), v)))
                }
                _ => {}
            }
        }
        keys.sort();
        keys
    }

    #[test]
    fn the_text_says_each_fact_and_where_the_logs_are() {
        let text = render_text(&a_status());
        for part in [
            "lab-0: owner pid 4242 (harness lab up); Kubernetes v1.35.4 at https://127.0.0.1:16443",
            "  VM localdns: running (QEMU pid 4300)",
            "  Kind cluster lab-0: lab-0-control-plane running",
            "    Node:       Ready",
            "    slot:       kube1",
            "    localdns:   active",
            "169.254.10.10 ready (200 OK), 169.254.10.11 NOT ready (000 curl: (7) Failed to connect)",
            "    control plane:  /t/lab-up/lab/control-plane",
            "`start` output in /var/log/unbounded-lab/ in the VM",
            "harness lab logs --lab 0",
        ] {
            assert!(text.contains(part), "{part:?} missing in:\n{text}");
        }
        let mut stopped = a_status();
        stopped.vms[0].qemu_pid = None;
        stopped.vms[0].problems.push("QEMU is not running".into());
        let text = render_text(&stopped);
        assert!(
            text.contains("VM localdns: NOT RUNNING") && text.contains("problem:    QEMU is not running"),
            "{text}"
        );
    }
}
