//! What kubelet needs in the machine besides its configuration file: the unit, the bootstrap
//! kubeconfig (0600, holds the token), the cluster CA, and the defaults merged under
//! `Kubelet.Configuration` (systemd cgroups, webhook auth, containerd, the pod CIDR).

use serde_json::{Map, Value, json};

use super::HEADER;
use super::containerd::SOCKET;
use super::unit_value::exec_word;
use crate::goal::KubeletGoal;

pub const KUBELET_BINARY: &str = "/usr/local/bin/kubelet";
pub const KUBECTL_BINARY: &str = "/usr/local/bin/kubectl";
pub const KUBELET_UNIT: &str = "/etc/systemd/system/kubelet.service";
pub const BOOTSTRAP_KUBECONFIG: &str = "/etc/kubernetes/bootstrap-kubelet.conf";
/// Written by kubelet once its client certificate is issued.
pub const KUBECONFIG: &str = "/var/lib/kubelet/kubeconfig";
pub const CA_CERT: &str = "/etc/kubernetes/pki/apiserver-client-ca.crt";
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// The node's kubelet settings that reach the unit's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletFlags {
    pub node_name: String,
    /// `Kubelet.NodeIP` as written (comma-separated), if any.
    pub node_ip: Option<String>,
    /// `key=value`, sorted by key.
    pub labels: Vec<String>,
    pub register_with_taints: Vec<String>,
}

/// `kubelet.service`: the bootstrap kubeconfig, the rendered configuration, the node's name,
/// address, labels and taints, each argument quoted for systemd (`unit_value::exec_word`). Ordered after containerd (LocalDNS adds its own drop-in).
pub fn unit(flags: &KubeletFlags) -> String {
    let mut args = vec![
        format!("--config={}", super::paths::KUBELET_CONFIG),
        format!("--bootstrap-kubeconfig={BOOTSTRAP_KUBECONFIG}"),
        format!("--kubeconfig={KUBECONFIG}"),
        format!("--hostname-override={}", flags.node_name),
    ];
    if let Some(ip) = &flags.node_ip {
        args.push(format!("--node-ip={ip}"));
    }
    if !flags.labels.is_empty() {
        args.push(format!("--node-labels={}", flags.labels.join(",")));
    }
    if !flags.register_with_taints.is_empty() {
        args.push(format!(
            "--register-with-taints={}",
            flags.register_with_taints.join(",")
        ));
    }
    let exec = args
        .iter()
        .map(|a| format!(" \\\n  {}", exec_word(a)))
        .collect::<String>();
    format!(
        "{HEADER}[Unit]
Description=kubelet: the Kubernetes node agent
Wants=containerd.service
After=containerd.service
StartLimitIntervalSec=0

[Service]
ExecStart={KUBELET_BINARY}{exec}
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"
    )
}

/// The bootstrap kubeconfig: the API server, the CA file and the bootstrap token.
pub fn bootstrap_kubeconfig(api_server: &str, token: &str) -> String {
    let auth = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..kube::config::AuthInfo::default()
    };
    let yaml = super::kubeconfig::yaml(
        "default",
        api_server,
        super::kubeconfig::CaSource::File(CA_CERT),
        "kubelet-bootstrap",
        auth,
        "default",
    );
    format!("{HEADER}{yaml}")
}

/// The defaults this agent's nodes run with, under what the user wrote in
/// `Kubelet.Configuration` (the user's keys win; LocalDNS's `clusterDNS`/`resolvConf` win over both).
pub fn configuration_defaults(pod_cidr: &str) -> Map<String, Value> {
    let value = json!({
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": true},
            "x509": {"clientCAFile": CA_CERT}
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "systemd",
        "clusterDomain": CLUSTER_DOMAIN,
        "containerRuntimeEndpoint": SOCKET,
        "podCIDR": pod_cidr,
        "rotateCertificates": true,
        "failSwapOn": false
    });
    match value {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

/// Merges the defaults under the goal's configuration (keys the user set are kept).
pub fn with_defaults(kubelet: &KubeletGoal, pod_cidr: &str) -> KubeletGoal {
    let mut merged = configuration_defaults(pod_cidr);
    for (k, v) in &kubelet.configuration {
        merged.insert(k.clone(), v.clone());
    }
    KubeletGoal {
        configuration: merged,
        ..kubelet.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_names_the_node_and_its_labels_and_taints() {
        let text = unit(&KubeletFlags {
            node_name: "node1".into(),
            node_ip: Some("192.168.100.10".into()),
            labels: vec!["a=b".into(), "c=d".into()],
            register_with_taints: vec!["k=v:NoSchedule".into()],
        });
        assert!(text.contains("  --hostname-override=node1 \\\n"), "{text}");
        assert!(text.contains("  --node-labels=a=b,c=d \\\n"), "{text}");
        assert!(
            text.contains("  --register-with-taints=k=v:NoSchedule\n"),
            "{text}"
        );
    }

    /// Whatever reaches the unit (validation refuses these first), every argument reads back as
    /// written and the unit keeps its lines.
    #[rstest::rstest]
    fn hostile_flag_values_stay_one_argument_each(#[values(0, 1, 2, 3, 4, 5, 6, 7, 8)] i: usize) {
        use crate::render::unit_value::tests::{HOSTILE, exec_start_words};
        let value = HOSTILE[i];
        let flags = KubeletFlags {
            node_name: value.into(),
            node_ip: Some(value.into()),
            labels: vec![format!("a={value}")],
            register_with_taints: vec![format!("k={value}:NoSchedule")],
        };
        let text = unit(&flags);
        let plain = unit(&KubeletFlags {
            node_name: "n".into(),
            node_ip: Some("n".into()),
            labels: vec!["a=n".into()],
            register_with_taints: vec!["k=n:NoSchedule".into()],
        });
        assert_eq!(text.lines().count(), plain.lines().count(), "{text}");
        let words = exec_start_words(&text);
        assert_eq!(
            words[4..],
            [
                format!("--hostname-override={value}"),
                format!("--node-ip={value}"),
                format!("--node-labels=a={value}"),
                format!("--register-with-taints=k={value}:NoSchedule"),
            ],
            "{text}"
        );
    }

    #[test]
    fn what_the_user_set_wins_over_the_defaults() {
        let goal = KubeletGoal {
            cluster_dns: Vec::new(),
            resolv_conf: None,
            configuration: [("cgroupDriver".to_string(), Value::from("cgroupfs"))]
                .into_iter()
                .collect(),
        };
        let merged = with_defaults(&goal, "10.244.1.0/24");
        assert_eq!(merged.configuration["cgroupDriver"], "cgroupfs");
        assert_eq!(merged.configuration["clusterDomain"], "cluster.local");
        assert_eq!(merged.configuration["podCIDR"], "10.244.1.0/24");
    }
}
