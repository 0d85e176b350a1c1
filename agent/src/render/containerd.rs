//! containerd's config in the machine (`/etc/containerd/config.toml`, containerd 1.7, config
//! version 2): the CRI plugin with the systemd cgroup driver, Debian's CNI plugin directory and
//! the pause image imported from `ContainerImages` as the sandbox image.

use super::HEADER;

/// Where Debian's `containernetworking-plugins` installs the CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// Where the CNI network config lives.
pub const CNI_CONF_DIR: &str = "/etc/cni/net.d";
/// containerd's socket, as kubelet's `containerRuntimeEndpoint` names it.
pub const SOCKET: &str = "unix:///run/containerd/containerd.sock";

/// The TOML file. `sandbox_image` is the pause image's ref; without one containerd keeps its own
/// default (which it would have to pull).
pub fn config_toml(sandbox_image: Option<&str>) -> String {
    let sandbox = sandbox_image
        .map(|r| format!("  sandbox_image = {}\n", toml_string(r)))
        .unwrap_or_default();
    format!(
        "{HEADER}version = 2

[plugins.\"io.containerd.grpc.v1.cri\"]
{sandbox}  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true

[plugins.\"io.containerd.grpc.v1.cri\".containerd]
  default_runtime_name = \"runc\"

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]
  runtime_type = \"io.containerd.runc.v2\"

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins.\"io.containerd.grpc.v1.cri\".cni]
  bin_dir = \"{CNI_BIN_DIR}\"
  conf_dir = \"{CNI_CONF_DIR}\"
"
    )
}

/// A TOML basic string: quotes and backslashes escaped (refs are already single-line).
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_image_is_the_pause_ref_and_cni_uses_debians_plugin_dir() {
        let text = config_toml(Some("registry.k8s.io/pause:3.10"));
        assert!(
            text.contains("  sandbox_image = \"registry.k8s.io/pause:3.10\"\n"),
            "{text}"
        );
        assert!(text.contains("  bin_dir = \"/usr/lib/cni\"\n"), "{text}");
        assert!(text.contains("  SystemdCgroup = true\n"), "{text}");
        assert!(!config_toml(None).contains("sandbox_image"));
    }
}
