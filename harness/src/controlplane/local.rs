//! [`ProcessControlPlane`]: the Kubernetes components as processes in the lab namespace,
//! started in order, each only once the previous one is ready:
//!
//! 1. the PKI (`<state>/pki`: generated, or the one of a state restored from a checkpoint, whose
//!    etcd data is kept too), `10.96.0.10/32` on the namespace's `lo`;
//! 2. etcd on `127.0.0.1:2379` — ready when `GET /health` says `"health":"true"`;
//! 3. kube-apiserver on `:6443`, forwarded to `127.0.0.1:<16443+n>` on the host — ready when
//!    `kubectl get --raw /readyz` (through that forwarder) prints `ok`;
//! 4. the bootstrap token Secret, the bootstrap RBAC, the cluster DNS's RBAC, the `kube-dns` Service and the Machina
//!    CRDs applied (`kubectl apply`), then `kubectl wait --for=condition=Established`;
//! 5. kube-controller-manager and kube-scheduler — ready when each holds its leader Lease;
//! 6. CoreDNS (cluster DNS) at `10.96.0.10:53` — ready when its `ready` plugin answers 200.
//!
//! Stopping sends SIGTERM in the reverse order (SIGKILL after a grace period).

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::exec;

use super::access::ClusterAccess;
use super::bootstrap::to_yaml_stream;
use super::cluster_dns;
use super::error::{ControlPlaneError, io_err};
use super::flags::{self, CLUSTER_DNS_IP};
use super::forward::Forwarder;
use super::pki::{Pki, PkiSpec};
use super::plane::{ControlPlane, ControlPlaneSpec};
use super::process::Component;
use super::ready::{http_get_in, wait_for};
use crate::lab::addr::API_SERVER_PORT;

/// How long a component gets to stop after SIGTERM. Short: the cluster's state is thrown
/// away with the lab, and kube-apiserver with a kubelet attached waits out any grace given.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// The control plane as processes in the lab namespace (see the module docs).
pub struct ProcessControlPlane {
    access: ClusterAccess,
    /// PKI, etcd data, Corefile: what [`ControlPlane::stop_saving`] copies.
    state_dir: PathBuf,
    /// In start order.
    components: Vec<Component>,
    forwarder: Option<Forwarder>,
    stopped: bool,
    /// A line as each component comes up (spinner on a terminal), while starting.
    progress: Option<crate::progress::Step>,
}

impl ProcessControlPlane {
    /// Starts every component in order (see the module docs). On failure, what was started
    /// is stopped again, and the error names the component, the check and its log.
    pub fn start(spec: &ControlPlaneSpec) -> Result<ProcessControlPlane, ControlPlaneError> {
        let started = Instant::now();
        let ns = spec.addrs.netns();
        for dir in [&spec.state_dir, &spec.log_dir] {
            fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        // A state restored from a checkpoint (`crate::checkpoint`) keeps its PKI and etcd data:
        // the node saved with it holds certificates of this CA and is a member of that cluster.
        let pki_dir = spec.state_dir.join("pki");
        let pki = if pki_dir.exists() {
            Pki::open(&pki_dir)?
        } else {
            Pki::generate(&PkiSpec::for_lab(&spec.addrs), &pki_dir)?
        };
        let bin = |name: &str| spec.bin_dir.join(name);
        let bootstrap_kubeconfig = spec.state_dir.join("bootstrap.kubeconfig");
        let mut plane = ProcessControlPlane {
            access: ClusterAccess {
                api_server: spec.api_server(),
                host_api_server: String::new(),
                ca_cert_pem: fs::read_to_string(pki.ca_cert()).map_err(io_err("reading", pki.ca_cert()))?,
                bootstrap_token: pki.bootstrap_token.to_string(),
                cluster_dns: CLUSTER_DNS_IP,
                admin_kubeconfig: spec.admin_kubeconfig.clone(),
                bootstrap_kubeconfig: bootstrap_kubeconfig.clone(),
                pki_dir: pki.dir.clone(),
                kubernetes_version: spec.kubernetes_version.clone(),
                kubectl: bin("kubectl"),
                log_dir: spec.log_dir.clone(),
            },
            state_dir: spec.state_dir.clone(),
            components: Vec::new(),
            forwarder: None,
            stopped: false,
            progress: Some(crate::progress::Step::start(format!("control plane of {ns}"))),
        };

        // The cluster DNS address is local to the namespace; the VMs reach it through
        // their default gateway, the bridge.
        exec::run(Command::new("ip").args([
            "-n",
            &ns,
            "addr",
            "replace",
            &format!("{CLUSTER_DNS_IP}/32"),
            "dev",
            "lo",
        ]))?;

        // etcd
        let etcd_data = spec.state_dir.join("etcd");
        plane.spawn("etcd", &bin("etcd"), &flags::etcd(&etcd_data), spec)?;
        let etcd_client: SocketAddr = ([127, 0, 0, 1], 2379).into();
        plane.wait(
            "etcd",
            "GET http://127.0.0.1:2379/health",
            spec.timeout,
            || match http_get_in(&ns, etcd_client, "/health")? {
                (200, body) if body.contains("\"health\":\"true\"") => Ok(()),
                (status, body) => Err(format!("{status} {}", body.trim())),
            },
        )?;

        // kube-apiserver, and its forwarder to the host
        let bridge = spec.addrs.bridge_ip();
        plane.spawn(
            "kube-apiserver",
            &bin("kube-apiserver"),
            &flags::kube_apiserver(&pki, bridge),
            spec,
        )?;
        let forwarder = Forwarder::start(
            &ns,
            spec.preferred_host_port(),
            SocketAddr::from((bridge, API_SERVER_PORT)),
        )?;
        plane.access.host_api_server = format!("https://{}", forwarder.local_addr());
        plane.forwarder = Some(forwarder);
        pki.write_admin_kubeconfig_for(&plane.access.host_api_server, &spec.admin_kubeconfig)?;
        pki.write_kubeconfig_for(
            "bootstrap-kubelet.conf",
            &plane.access.host_api_server,
            &bootstrap_kubeconfig,
        )?;
        plane.wait(
            "kube-apiserver",
            "kubectl get --raw /readyz",
            spec.timeout,
            || {
                let out = plane.kubectl_stdout(&["get", "--raw", "/readyz"])?;
                if out.trim() == "ok" { Ok(()) } else { Err(out) }
            },
        )?;

        // The bootstrap objects, the kube-dns Service, the CRDs and the agent daemon's access.
        let kube_dns = spec.state_dir.join("kube-dns-service.yaml");
        let yaml = to_yaml_stream(&[cluster_dns::kube_dns_service(CLUSTER_DNS_IP)]).map_err(|e| {
            ControlPlaneError::Netns {
                netns: ns.clone(),
                message: format!("rendering the kube-dns Service: {e}"),
            }
        })?;
        fs::write(&kube_dns, yaml).map_err(io_err("writing", &kube_dns))?;
        let [secret, rbac] = pki.bootstrap_manifests();
        let mut apply: Vec<String> = vec!["apply".into()];
        let coredns_rbac = pki.coredns_rbac_manifest();
        for file in [
            &secret,
            &rbac,
            &coredns_rbac,
            &kube_dns,
            &spec.crd_dir,
            &spec.rbac_dir,
        ] {
            apply.push("-f".into());
            apply.push(file.display().to_string());
        }
        let apply: Vec<&str> = apply.iter().map(String::as_str).collect();
        // The API server creates kube-system right after it is ready: retry until it exists.
        plane.wait(
            "kube-apiserver",
            "kubectl apply (bootstrap, RBAC, CoreDNS RBAC, kube-dns, CRDs, agent daemon RBAC)",
            spec.timeout,
            || plane.kubectl_stdout(&apply),
        )?;
        let crds = spec.crd_dir.display().to_string();
        let wait_timeout = format!("--timeout={}s", spec.timeout.as_secs());
        plane
            .kubectl_stdout(&["wait", "--for=condition=Established", "-f", &crds, &wait_timeout])
            .map_err(|message| ControlPlaneError::NotReady {
                component: "kube-apiserver",
                check: format!("the CRDs in {crds} Established"),
                timeout: spec.timeout,
                last: message,
                log: format!("see {}", spec.log_dir.join("kube-apiserver.log").display()),
            })?;

        // kube-controller-manager and kube-scheduler
        plane.spawn(
            "kube-controller-manager",
            &bin("kube-controller-manager"),
            &flags::kube_controller_manager(&pki),
            spec,
        )?;
        plane.spawn(
            "kube-scheduler",
            &bin("kube-scheduler"),
            &flags::kube_scheduler(&pki),
            spec,
        )?;
        for component in ["kube-controller-manager", "kube-scheduler"] {
            let check = format!("Lease kube-system/{component} held");
            plane.wait(component, &check, spec.timeout, || {
                let holder = plane.kubectl_stdout(&[
                    "get",
                    "lease",
                    "-n",
                    "kube-system",
                    component,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ])?;
                if holder.trim().is_empty() {
                    Err("no holder yet".into())
                } else {
                    Ok(())
                }
            })?;
        }

        // Cluster DNS
        let corefile = spec.state_dir.join("Corefile");
        fs::write(
            &corefile,
            cluster_dns::corefile(CLUSTER_DNS_IP, spec.addrs.dns(), &pki.coredns_kubeconfig()),
        )
        .map_err(io_err("writing", &corefile))?;
        plane.spawn("coredns", &spec.coredns, &flags::coredns(&corefile), spec)?;
        let ready: SocketAddr = flags::COREDNS_READY.parse().expect("a socket address");
        plane.wait(
            "coredns",
            "GET http://127.0.0.1:8181/ready",
            spec.timeout,
            || match http_get_in(&ns, ready, "/ready")? {
                (200, _) => Ok(()),
                (status, body) => Err(format!("{status} {}", body.trim())),
            },
        )?;

        tracing::info!(lab = %ns, took = ?started.elapsed(), "control plane up");
        if let Some(step) = plane.progress.take() {
            step.finish();
        }
        Ok(plane)
    }

    fn spawn(
        &mut self,
        name: &'static str,
        program: &Path,
        args: &[String],
        spec: &ControlPlaneSpec,
    ) -> Result<(), ControlPlaneError> {
        let component = Component::start(name, program, args, &spec.addrs.netns(), &spec.log_dir)?;
        self.components.push(component);
        Ok(())
    }

    /// Waits until `check` passes while every started component runs.
    fn wait<T>(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl FnMut() -> Result<T, String>,
    ) -> Result<T, ControlPlaneError> {
        let component = self
            .components
            .iter()
            .find(|c| c.name() == name)
            .expect("waiting for a started component");
        let others: Vec<&Component> = self.components.iter().filter(|c| c.name() != name).collect();
        if let Some(step) = &self.progress {
            step.message(&format!("{name}: waiting for {what}"));
        }
        let value = wait_for(component, &others, what, timeout, check)?;
        if let Some(step) = &self.progress {
            step.line(&format!(
                "{name}: {what} ok at {:.1}s",
                step.elapsed().as_secs_f64()
            ));
        }
        Ok(value)
    }

    /// Runs the host's kubectl with the admin kubeconfig; its stdout, or its error as text.
    fn kubectl_stdout(&self, args: &[&str]) -> Result<String, String> {
        exec::run_stdout(self.access.kubectl().arg("--request-timeout=10s").args(args))
            .map_err(|e| e.to_string())
    }

    /// The components' log files.
    pub fn logs(&self) -> Vec<PathBuf> {
        self.components.iter().map(|c| c.log().to_path_buf()).collect()
    }
}

impl ControlPlane for ProcessControlPlane {
    fn access(&self) -> &ClusterAccess {
        &self.access
    }

    fn pids(&self) -> Vec<i32> {
        self.components.iter().map(Component::pid).collect()
    }

    /// Its state directory (PKI, etcd data, Corefile) copied into `into`.
    fn stop_saving(&mut self, into: &Path) -> Vec<String> {
        let problems = self.stop();
        if !problems.is_empty() {
            return problems;
        }
        let state = self.state_dir.clone();
        match crate::checkpoint::copy_tree(&state, into) {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!(
                "copying the control plane's state {}: {e}",
                state.display()
            )],
        }
    }

    fn stop(&mut self) -> Vec<String> {
        if self.stopped {
            return Vec::new();
        }
        self.stopped = true;
        let mut problems = Vec::new();
        if let Some(mut forwarder) = self.forwarder.take() {
            forwarder.stop();
        }
        for component in self.components.iter().rev() {
            problems.extend(component.stop(STOP_GRACE));
        }
        problems
    }
}

impl Drop for ProcessControlPlane {
    fn drop(&mut self) {
        for problem in self.stop() {
            tracing::warn!("stopping the control plane: {problem}");
        }
    }
}
