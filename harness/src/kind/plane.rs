//! [`KindControlPlane`]: a lab's cluster as a Kind cluster, behind the [`ControlPlane`] seam the
//! lab holds.
//!
//! Kind creates cluster `lab-<n>` in the lab's own engine network (`kind-lab-<n>`), or its node
//! is restored from a checkpoint ([`super::saved`]); the harness then gives the node a
//! second link on the lab's bridge, [`KIND_NODE_LAB_IP`] (`192.168.100.3/24`), the way the
//! system's own e2e wires VMs to Kind: the VMs reach the API server there (its certificate names
//! it), the lab namespace routes the service CIDR and the node's pod CIDR to it (kube-proxy's
//! rules in the node DNAT a VM's query to `10.96.0.10` to a CoreDNS pod), and the node routes
//! each VM's pod CIDR back through the bridge. The cluster's CoreDNS forwards other names to the
//! lab's upstream DNS. The lab's bootstrap token (its Secret and kubeadm's bootstrap RBAC), the
//! Machina CRDs and the agent daemon's RBAC and admission policy are applied once it answers.

use std::fs;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use agent::exec::{self, run};
use base64::Engine as _;

use super::cluster::{KindCluster, KindError};
use super::engine::Engine;
use crate::addresses::{API_SERVER_PORT, LabAddrs, MAX_VMS};
use crate::controlplane::access::ClusterAccess;
use crate::controlplane::bootstrap::{BootstrapToken, rbac_manifests, secret_manifest, to_yaml_stream};
use crate::controlplane::kubeconfig::{Credentials, KubeconfigSpec};
use crate::controlplane::{ControlPlane, ControlPlaneSpec};
use crate::images::kind_node::{KindNodeImage, NODE_POD_CIDR};
use crate::images::kind_tool::KindTool;
use crate::progress::Step;
use crate::wait::{Attempt, WaitTimeout, retry, wait_until};

/// The Kind node's address on the lab's bridge.
pub const KIND_NODE_LAB_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 100, 3);
/// The cluster DNS Service (`kube-dns`), kubeadm's tenth address of the service CIDR.
pub const CLUSTER_DNS_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// The lab VMs whose pod CIDRs the node routes (`10.244.<k>.0/24` via `192.168.100.<10+k>`).
const ROUTED_VMS: u8 = 8;
/// Bump when [`KindControlPlane::configure`] changes what a new cluster holds, or a Kind
/// checkpoint's node is saved in another state (its kube-proxy synced first): a checkpoint of a
/// Kind node ([`setup_key`]) holds the cluster as it was set up.
const SETUP_REVISION: &str = "kind-setup-3";

/// What a new lab cluster is made of besides its node image: the Kind configuration and the
/// revision of the harness's own setup (16 hex digits; part of a Kind checkpoint's key).
pub fn setup_key() -> String {
    let key = crate::cache::RecipeKey::new("kind-setup")
        .with("revision", SETUP_REVISION)
        .with("kind-config", lab_kind_config())
        .hex();
    key[..16].to_string()
}

/// What a Kind control plane is made from.
#[derive(Clone, Debug)]
pub struct KindParts {
    pub tool: KindTool,
    pub image: KindNodeImage,
}

/// A lab's Kind cluster (see the module docs).
pub struct KindControlPlane {
    access: ClusterAccess,
    cluster: Option<KindCluster>,
    /// The node image's reference in the engine (saved with the node).
    image: String,
}

/// The names of the veth pair joining the Kind node to the lab's bridge: `labkind<n>` in the
/// lab namespace, `kindlab<n>` until it is moved into the node and named `eth1` there.
fn veth_names(addrs: &LabAddrs) -> (String, String) {
    (
        format!("labkind{}", addrs.number()),
        format!("kindlab{}", addrs.number()),
    )
}

/// The Kind configuration of a lab: [`super::cluster::kind_config`] with the node's lab address
/// in the API server's certificate.
pub fn lab_kind_config() -> String {
    super::cluster::kind_config().replace(
        "  kind: ClusterConfiguration\n",
        &format!("  kind: ClusterConfiguration\n  apiServer:\n    certSANs: [\"{KIND_NODE_LAB_IP}\"]\n"),
    )
}

impl KindControlPlane {
    /// Creates the Kind cluster of the lab `spec.addrs` and wires it to the lab (module docs);
    /// with `restore`, the cluster is restored from the node saved there
    /// ([`super::saved`], a checkpoint's) instead, its objects and token the saved ones.
    pub fn start(
        spec: &ControlPlaneSpec,
        parts: &KindParts,
        restore: Option<&Path>,
    ) -> Result<KindControlPlane, KindError> {
        let started = Instant::now();
        let name = spec.addrs.netns();
        for dir in [&spec.state_dir, &spec.log_dir] {
            fs::create_dir_all(dir).map_err(|source| KindError::Write {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let engine = Engine::detect(&spec.state_dir).map_err(|e| KindError::Engine(Box::new(e)))?;
        crate::progress::say(&engine.describe());
        let (cluster, saved) = match restore {
            None => (
                KindCluster::create_with_config(
                    &name,
                    &engine,
                    &parts.tool,
                    &parts.image,
                    &spec.state_dir,
                    &lab_kind_config(),
                    &spec.log_dir.join("kind-create.log"),
                    super::cluster::create_timeout()?,
                )?,
                None,
            ),
            Some(saved) => {
                let step = Step::start(format!(
                    "Kind cluster {name}: restoring its node from {}",
                    saved.display()
                ));
                let (cluster, info) = KindCluster::restore(
                    &name,
                    &engine,
                    &parts.tool,
                    &parts.image,
                    &spec.state_dir,
                    saved,
                    spec.timeout,
                )?;
                step.finish();
                (cluster, Some(info))
            }
        };
        let mut plane = KindControlPlane {
            access: ClusterAccess {
                api_server: format!("https://{KIND_NODE_LAB_IP}:{API_SERVER_PORT}"),
                host_api_server: String::new(),
                ca_cert_pem: String::new(),
                bootstrap_token: String::new(),
                cluster_dns: CLUSTER_DNS_IP,
                admin_kubeconfig: spec.admin_kubeconfig.clone(),
                bootstrap_kubeconfig: spec.state_dir.join("bootstrap.kubeconfig"),
                pki_dir: spec.state_dir.clone(),
                kubernetes_version: spec.kubernetes_version.clone(),
                kubectl: spec.bin_dir.join("kubectl"),
                log_dir: spec.log_dir.clone(),
            },
            cluster: Some(cluster),
            image: parts.image.reference.clone(),
        };
        let step = Step::start(format!("Kind cluster {name}: joining it to the lab's bridge"));
        plane.wire(spec)?;
        plane.read_kubeconfig(spec)?;
        match saved {
            None => {
                step.message("the lab's bootstrap token, CRDs and RBAC; CoreDNS forwarding to the lab's DNS");
                let token = BootstrapToken::generate()
                    .map_err(|e| KindError::Kubeconfig(format!("generating a bootstrap token: {e}")))?;
                plane.write_bootstrap_kubeconfig(spec, &token.to_string())?;
                plane.configure(spec, &token)?;
                // A lab is up when its VMs can resolve: the CoreDNS pods answer on the ClusterIP.
                step.message("waiting for the cluster DNS to answer from the lab namespace");
                super::cluster_dns_probe::wait_answers_in(&spec.addrs.netns(), CLUSTER_DNS_IP, spec.timeout)
                    .map_err(|e| KindError::ClusterDns(Box::new(e)))?;
            }
            // The saved cluster's etcd holds the lab's objects and its CoreDNS's Corefile.
            Some(saved) => plane.write_bootstrap_kubeconfig(spec, &saved.bootstrap_token)?,
        }
        step.finish();
        tracing::info!(lab = %name, took = ?started.elapsed(), restored = restore.is_some(), "Kind cluster up");
        Ok(plane)
    }

    fn cluster(&self) -> &KindCluster {
        self.cluster
            .as_ref()
            .expect("a started Kind control plane has its cluster")
    }

    /// The veth to the lab's bridge and the routes both ways.
    fn wire(&self, spec: &ControlPlaneSpec) -> Result<(), KindError> {
        let addrs = &spec.addrs;
        let ns = addrs.netns();
        let pid = self.cluster().node_pid()?;
        let (lab_end, node_end) = veth_names(addrs);
        let ip = |args: &[&str]| run(Command::new("ip").args(args)).map(|_| ());
        // A pair left by an earlier run stopped between `add` and the moves.
        let _ = ip(&["link", "del", &lab_end]);
        let _ = ip(&["-n", &ns, "link", "del", &lab_end]);
        ip(&["link", "add", &lab_end, "type", "veth", "peer", "name", &node_end])?;
        ip(&["link", "set", &lab_end, "netns", &ns])?;
        ip(&[
            "-n",
            &ns,
            "link",
            "set",
            &lab_end,
            "master",
            &addrs.bridge(),
            "up",
        ])?;
        ip(&["link", "set", &node_end, "netns", &pid.to_string()])?;
        let in_node = |args: &[&str]| {
            run(Command::new("nsenter")
                .args(["-t", &pid.to_string(), "-n", "ip"])
                .args(args))
            .map(|_| ())
        };
        in_node(&["link", "set", &node_end, "name", "eth1"])?;
        in_node(&["addr", "add", &format!("{KIND_NODE_LAB_IP}/24"), "dev", "eth1"])?;
        in_node(&["link", "set", "eth1", "up"])?;
        for k in 0..ROUTED_VMS.min(MAX_VMS) {
            if let Some(vm) = addrs.vm_ip(k) {
                let cidr = crate::addresses::pod_cidr(k);
                in_node(&["route", "replace", &cidr, "via", &vm.to_string()])?;
            }
        }
        // The API server's address in the engine's network is the `kubernetes` Service's
        // endpoint: a VM's kube-proxy sends `10.96.0.1:443` there, through the node's lab link.
        let advertised = node_ipv4(&in_node_stdout(
            pid,
            &["-4", "-o", "addr", "show", "dev", "eth0"],
        )?)
        .ok_or_else(|| {
            KindError::Kubeconfig(format!("the Kind node (pid {pid}) has no IPv4 address on eth0"))
        })?;
        let via = KIND_NODE_LAB_IP.to_string();
        for cidr in [
            super::cluster::SERVICE_SUBNET,
            NODE_POD_CIDR,
            &format!("{advertised}/32"),
        ] {
            ip(&["-n", &ns, "route", "replace", cidr, "via", &via])?;
        }
        Ok(())
    }

    /// The admin kubeconfig Kind wrote, copied for the lab (and, naming the lab address, to
    /// `admin.conf` in the state directory); the host's API server address and the cluster's
    /// CA from it.
    fn read_kubeconfig(&mut self, spec: &ControlPlaneSpec) -> Result<(), KindError> {
        let kind_kubeconfig = self.cluster().kubeconfig.clone();
        let text = fs::read_to_string(&kind_kubeconfig).map_err(|source| KindError::Write {
            path: kind_kubeconfig.clone(),
            source,
        })?;
        write_file(&spec.admin_kubeconfig, &text)?;
        let config = kube::config::Kubeconfig::read_from(&kind_kubeconfig)
            .map_err(|e| KindError::Kubeconfig(format!("{}: {e}", kind_kubeconfig.display())))?;
        let cluster = config
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .ok_or_else(|| {
                KindError::Kubeconfig(format!("{} names no cluster", kind_kubeconfig.display()))
            })?;
        self.access.host_api_server = cluster.server.clone().unwrap_or_default();
        let ca = cluster
            .certificate_authority_data
            .as_deref()
            .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
            .and_then(|d| String::from_utf8(d).ok())
            .ok_or_else(|| KindError::Kubeconfig(format!("{} holds no CA", kind_kubeconfig.display())))?;
        self.access.ca_cert_pem = ca;
        // The same admin kubeconfig naming the API server's lab address, for clients in the lab
        // namespace (`pki_dir/admin.conf`).
        let in_lab = text.replace(&self.access.host_api_server, &self.access.api_server);
        write_file(&self.access.pki_dir.join("admin.conf"), &in_lab)?;
        Ok(())
    }

    /// The bootstrap kubeconfig holding `token`, naming the host's API server address.
    fn write_bootstrap_kubeconfig(&mut self, spec: &ControlPlaneSpec, token: &str) -> Result<(), KindError> {
        self.access.bootstrap_token = token.to_string();
        let bootstrap = KubeconfigSpec {
            cluster: spec.addrs.netns(),
            server: self.access.host_api_server.clone(),
            ca_pem: self.access.ca_cert_pem.clone(),
            user: "kubelet-bootstrap".into(),
            credentials: Credentials::Token(token.to_string()),
        };
        let yaml = bootstrap
            .to_yaml()
            .map_err(|e| KindError::Kubeconfig(format!("writing the bootstrap kubeconfig: {e}")))?;
        write_file(&self.access.bootstrap_kubeconfig, &yaml)
    }

    /// The lab's objects (bootstrap token, CRDs, RBAC) and CoreDNS's upstream in a new cluster.
    fn configure(&mut self, spec: &ControlPlaneSpec, token: &BootstrapToken) -> Result<(), KindError> {
        let mut docs = vec![secret_manifest(token)];
        docs.extend(rbac_manifests());
        let manifests = spec.state_dir.join("lab-objects.yaml");
        let yaml = to_yaml_stream(&docs).map_err(|e| KindError::Kubeconfig(format!("rendering: {e}")))?;
        write_file(&manifests, &yaml)?;
        let kubectl = |args: &[&str]| -> Result<String, String> {
            exec::run_stdout(self.access.kubectl().args(args)).map_err(|e| e.to_string())
        };
        let files: Vec<String> = [&manifests, &spec.crd_dir, &spec.rbac_dir]
            .iter()
            .flat_map(|f| ["-f".to_string(), f.display().to_string()])
            .collect();
        let mut apply = vec!["apply"];
        apply.extend(files.iter().map(String::as_str));
        wait_until::<_, WaitTimeout>(
            &spec.addrs.netns(),
            spec.timeout,
            "kubectl apply of the lab's objects",
            || match kubectl(&apply) {
                Ok(_) => Attempt::Ready(()),
                Err(e) => retry(e),
            },
        )
        .map_err(|e| KindError::Kubeconfig(e.to_string()))?;
        let crds = spec.crd_dir.display().to_string();
        let timeout = format!("--timeout={}s", spec.timeout.as_secs());
        kubectl(&["wait", "--for=condition=Established", "-f", &crds, &timeout])
            .map_err(KindError::Kubeconfig)?;

        // CoreDNS forwards what is not the cluster's to the lab's upstream DNS and logs every
        // query (a scenario reads which client asked). Its pods are started again, so none
        // answers with Kind's Corefile once this returns (the `reload` plugin would take the new
        // one only after the kubelet's next sync of the ConfigMap, a minute or more). One
        // replica: the lab's node has two cores to share with the VMs.
        let corefile = kubectl(&[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "coredns",
            "-o",
            "jsonpath={.data.Corefile}",
        ])
        .map_err(KindError::Kubeconfig)?;
        let upstream = spec.addrs.dns().ip().to_string();
        let patched = lab_corefile(&corefile, &upstream)?;
        patch_configmap(&kubectl, "coredns", "Corefile", &patched)?;
        kubectl(&[
            "-n",
            "kube-system",
            "scale",
            "deployment",
            "coredns",
            "--replicas=1",
        ])
        .map_err(KindError::Kubeconfig)?;
        kubectl(&["-n", "kube-system", "rollout", "restart", "deployment", "coredns"])
            .map_err(KindError::Kubeconfig)?;
        kubectl(&[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment",
            "coredns",
            &timeout,
        ])
        .map_err(KindError::Kubeconfig)?;

        // kube-proxy's kubeconfig names the API server at the node's lab address, which the VMs
        // reach (Kind writes the node container's name, known only in the engine's network).
        let kubeconfig = kubectl(&[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "kube-proxy",
            "-o",
            "jsonpath={.data.kubeconfig\\.conf}",
        ])
        .map_err(KindError::Kubeconfig)?;
        let patched = with_server(&kubeconfig, &self.access.api_server)?;
        patch_configmap(&kubectl, "kube-proxy", "kubeconfig.conf", &patched)?;
        Ok(())
    }
}

/// The cluster's Corefile with `forward . <upstream>` and the `log` plugin.
pub fn lab_corefile(corefile: &str, upstream: &str) -> Result<String, KindError> {
    let (forward, errors) = ("forward . /etc/resolv.conf", "    errors\n");
    if !corefile.contains(forward) || !corefile.contains(errors) {
        return Err(KindError::Kubeconfig(format!(
            "the cluster's Corefile has no `{forward}` or no `errors` line to put `log` after:\n{corefile}"
        )));
    }
    Ok(corefile
        .replace(forward, &format!("forward . {upstream}"))
        .replacen(errors, "    errors\n    log\n", 1))
}

/// A kubeconfig whose `server:` lines name `server`.
pub fn with_server(kubeconfig: &str, server: &str) -> Result<String, KindError> {
    let mut found = false;
    let lines: Vec<String> = kubeconfig
        .lines()
        .map(|line| match line.split_once("server:") {
            Some((indent, _)) if indent.trim().is_empty() => {
                found = true;
                format!("{indent}server: {server}")
            }
            _ => line.to_string(),
        })
        .collect();
    if !found {
        return Err(KindError::Kubeconfig(format!(
            "kube-proxy's kubeconfig names no server:\n{kubeconfig}"
        )));
    }
    Ok(lines.join("\n") + "\n")
}

/// Sets `key` of ConfigMap `kube-system/<name>` to `value`.
fn patch_configmap(
    kubectl: &dyn Fn(&[&str]) -> Result<String, String>,
    name: &str,
    key: &str,
    value: &str,
) -> Result<(), KindError> {
    let patch = serde_json::json!({ "data": { key: value } }).to_string();
    kubectl(&[
        "-n",
        "kube-system",
        "patch",
        "configmap",
        name,
        "--type",
        "merge",
        "-p",
        &patch,
    ])
    .map(drop)
    .map_err(KindError::Kubeconfig)
}

/// `ip <args>` in the network namespace of process `pid` (the Kind node); its output.
fn in_node_stdout(pid: u32, args: &[&str]) -> Result<String, KindError> {
    Ok(exec::run_stdout(
        Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-n", "ip"])
            .args(args),
    )?)
}

/// The first IPv4 address in `ip -4 -o addr show` output.
fn node_ipv4(text: &str) -> Option<Ipv4Addr> {
    text.split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|cidr| cidr.split('/').next())
        .and_then(|ip| ip.parse().ok())
}

fn write_file(path: &Path, text: &str) -> Result<(), KindError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|source| KindError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    fs::write(path, text).map_err(|source| KindError::Write {
        path: path.to_path_buf(),
        source,
    })
}

impl ControlPlane for KindControlPlane {
    fn access(&self) -> &ClusterAccess {
        &self.access
    }

    fn kind_record(&self) -> Option<crate::controlplane::KindRecord> {
        self.cluster.as_ref().map(KindCluster::record)
    }

    /// The Kind node saved ([`super::saved`]) with the lab's bootstrap token, then the cluster
    /// deleted.
    fn stop_saving(&mut self, into: &Path) -> Vec<String> {
        let Some(cluster) = &self.cluster else {
            return vec!["the Kind cluster is already gone".into()];
        };
        let saved = cluster.save_node(into, &self.image, &self.access.bootstrap_token);
        let mut problems = self.stop();
        if let Err(e) = saved {
            problems.insert(0, format!("saving the Kind node into {}: {e}", into.display()));
        }
        problems
    }

    fn stop(&mut self) -> Vec<String> {
        match self.cluster.take() {
            Some(cluster) => match cluster.delete() {
                Ok(()) => Vec::new(),
                Err(e) => vec![format!("Kind cluster {}: {e}", cluster.name)],
            },
            None => Vec::new(),
        }
    }
}

impl Drop for KindControlPlane {
    fn drop(&mut self) {
        for problem in self.stop() {
            tracing::warn!("{problem}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_labs_kind_config_names_the_nodes_lab_address_in_the_api_servers_certificate() {
        let config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&lab_kind_config()).unwrap();
        let patch: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(config["kubeadmConfigPatches"][1].as_str().unwrap()).unwrap();
        assert_eq!(patch["apiServer"]["certSANs"][0], "192.168.100.3");
        assert_eq!(
            patch["controllerManager"]["extraArgs"]["allocate-node-cidrs"],
            "false"
        );
    }

    #[test]
    fn the_labs_corefile_forwards_to_the_labs_dns_and_logs_queries() {
        let kinds = ".:53 {\n    errors\n    health\n    forward . /etc/resolv.conf {\n    }\n}\n";
        let ours = lab_corefile(kinds, "192.168.100.1").unwrap();
        assert_eq!(
            ours,
            ".:53 {\n    errors\n    log\n    health\n    forward . 192.168.100.1 {\n    }\n}\n"
        );
        let err = lab_corefile(".:53 {\n    forward . 1.1.1.1\n}\n", "192.168.100.1").unwrap_err();
        assert!(err.to_string().contains("forward . /etc/resolv.conf"), "{err}");
    }

    #[test]
    fn kube_proxys_kubeconfig_names_the_lab_address() {
        let kinds = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority: /x/ca.crt\n    server: https://lab-0-control-plane:6443\n  name: default\n";
        let ours = with_server(kinds, "https://192.168.100.3:6443").unwrap();
        assert!(
            ours.contains("    server: https://192.168.100.3:6443\n"),
            "{ours}"
        );
        assert!(!ours.contains("lab-0-control-plane"), "{ours}");
        assert!(with_server("apiVersion: v1\n", "https://x").is_err());
    }

    #[test]
    fn the_nodes_ipv4_is_read_from_ip_addr() {
        let text =
            "12: eth0    inet 10.89.0.2/24 brd 10.89.0.255 scope global eth0\\       valid_lft forever\n";
        assert_eq!(node_ipv4(text), Some(Ipv4Addr::new(10, 89, 0, 2)));
        assert_eq!(node_ipv4(""), None);
    }

    #[test]
    fn veth_names_fit_the_kernels_limit() {
        let addrs = LabAddrs::new(crate::addresses::MAX_LAB).unwrap();
        let (a, b) = veth_names(&addrs);
        assert!(a.len() <= 15 && b.len() <= 15, "{a} {b}");
    }
}
