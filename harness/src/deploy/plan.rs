//! What deploying a node means, decided before the VM is touched: the agent config (from the
//! node config and the lab's values, checked by the agent's validator), the guest paths, the
//! `start` command line and its deadline.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::config::RawConfig;

use crate::node_config::{LabValues, NodeConfig, NodeConfigError};
use crate::vm::Deadlines;

/// Where the harness puts the agent config in the VM.
pub const GUEST_CONFIG: &str = agent::paths::OPERATOR_CONFIG;
/// The agent's `HostPrefix` when the config does not set one.
pub const DEFAULT_HOST_PREFIX: &str = "/usr/local";
/// The agent binary's name (in `$CARGO_TARGET_DIR/debug/` and `<HostPrefix>/bin/`).
pub const AGENT_BINARY: &str = "unbounded-agent";
/// `start`'s deadline in multiples of the VM's command deadline (30 s under KVM, 120 s under
/// TCG): 5 min under KVM, 20 min under TCG. `start` downloads and verifies ~200 MB, unpacks a
/// rootfs, boots the machine and starts containerd and kubelet; under TCG on a loaded 2-core
/// machine each of these takes minutes.
pub const START_COMMAND_DEADLINES: u32 = 10;

/// Everything decided about one deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployPlan {
    /// The Kubernetes node name (the node config's name).
    pub node_name: String,
    pub node_ip: Ipv4Addr,
    pub pod_cidr: String,
    /// The agent config, validated.
    pub config: RawConfig,
    /// [`DeployPlan::config`] as the file written to [`GUEST_CONFIG`].
    pub config_json: String,
    /// `<HostPrefix>/bin/unbounded-agent` in the VM.
    pub guest_agent: String,
}

impl DeployPlan {
    /// The plan for `node` with the lab's `values` (node IP and pod CIDR included).
    pub fn new(node: &NodeConfig, values: &LabValues) -> Result<DeployPlan, NodeConfigError> {
        let config = node.agent_config(values)?;
        let config_json =
            serde_json::to_string_pretty(&config).expect("a RawConfig always serialises") + "\n";
        let prefix = config.host_prefix.as_deref().unwrap_or(DEFAULT_HOST_PREFIX);
        let guest_agent = format!("{}/bin/{AGENT_BINARY}", prefix.trim_end_matches('/'));
        Ok(DeployPlan {
            node_name: node.name().to_string(),
            node_ip: values.node_ip,
            pod_cidr: values.pod_cidr.clone(),
            config,
            config_json,
            guest_agent,
        })
    }

    /// `<HostPrefix>/bin/unbounded-agent start --config /etc/unbounded/agent/config.json`.
    pub fn start_argv(&self) -> Vec<String> {
        vec![
            self.guest_agent.clone(),
            "start".into(),
            "--config".into(),
            GUEST_CONFIG.into(),
        ]
    }

    /// `<HostPrefix>/bin/unbounded-agent validate --config ...`: the copied binary agrees.
    pub fn validate_argv(&self) -> Vec<String> {
        vec![
            self.guest_agent.clone(),
            "validate".into(),
            "--config".into(),
            GUEST_CONFIG.into(),
        ]
    }
}

/// How long `start` may take on a VM with these deadlines.
pub fn start_deadline(deadlines: &Deadlines) -> Duration {
    deadlines.command * START_COMMAND_DEADLINES
}

/// The cargo target directory: `$CARGO_TARGET_DIR`, else the one holding the running executable
/// (a test binary lives in `<target>/debug/deps/`), else `<repo>/target`.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1) {
            if dir.file_name().is_some_and(|n| n == "debug")
                && let Some(target) = dir.parent()
            {
                return target.to_path_buf();
            }
        }
    }
    crate::repo::root().join("target")
}

/// The agent binary cargo built: `<target>/debug/unbounded-agent`.
pub fn host_agent_binary(target: &Path) -> PathBuf {
    target.join("debug").join(AGENT_BINARY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_config::tests::{lab_values, node_configs};

    #[test]
    fn localdns_plan_runs_start_with_the_config_under_etc_unbounded() {
        let node = NodeConfig::load(&node_configs().join("localdns.json")).unwrap();
        let plan = DeployPlan::new(&node, &lab_values()).unwrap();
        assert_eq!(plan.guest_agent, "/usr/local/bin/unbounded-agent");
        assert_eq!(
            plan.start_argv().join(" "),
            "/usr/local/bin/unbounded-agent start --config /etc/unbounded/agent/config.json"
        );
        assert_eq!(plan.node_name, "localdns");
        assert_eq!(plan.pod_cidr, "10.244.0.0/24");
        // The file the VM gets is exactly the validated config.
        let written: RawConfig = serde_json::from_str(&plan.config_json).unwrap();
        assert_eq!(written, plan.config);
        let validated = agent::validate::parse(&plan.config_json).unwrap();
        // `start` finds the pod CIDR where it looks for it.
        assert_eq!(agent::start::plan::pod_cidr(&validated).unwrap(), "10.244.0.0/24");
    }

    #[test]
    fn host_prefix_of_the_node_config_moves_the_agent_binary() {
        let node = NodeConfig {
            name: Some("n1".into()),
            agent_config: Some(serde_json::json!({"HostPrefix": "/opt/unbounded/"})),
            ..Default::default()
        };
        let plan = DeployPlan::new(&node, &lab_values()).unwrap();
        assert_eq!(plan.guest_agent, "/opt/unbounded/bin/unbounded-agent");
        assert_eq!(plan.start_argv()[0], plan.guest_agent);
    }

    #[test]
    fn start_deadline_is_twenty_minutes_under_tcg_and_five_under_kvm() {
        use crate::vm::Accel;
        assert_eq!(
            start_deadline(&Deadlines::new(Accel::Tcg, 1.0)),
            Duration::from_secs(20 * 60)
        );
        assert_eq!(
            start_deadline(&Deadlines::new(Accel::Kvm, 1.0)),
            Duration::from_secs(5 * 60)
        );
    }

    #[test]
    fn the_agent_binary_is_in_the_debug_directory_of_the_target() {
        assert_eq!(
            host_agent_binary(Path::new("/t")),
            Path::new("/t/debug/unbounded-agent")
        );
        assert!(target_dir().is_absolute() || target_dir().starts_with("target"));
    }
}
