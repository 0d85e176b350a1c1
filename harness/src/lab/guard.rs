//! The [`Lab`] guard: claims a lab number, makes the namespace and bridge,
//! starts the services, attaches VMs, and on drop removes it all and checks
//! that nothing survived.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::dns::DnsControl;
use super::error::{LabError, io_err};
use super::http::HttpControl;
use super::owner::{self, Want};
use super::services::Services;
use super::{offline, signals};
use crate::addresses::{HTTP_PORT, LabAddrs, MAX_VMS, PREFIX_LEN};
use crate::netns;
use crate::vm::{BootImage, GuestAddress, Mac, Net, Vm, VmSpec};

/// What lab to start.
#[derive(Clone, Debug, Default)]
pub struct LabSpec {
    /// `Some(n)`: exactly lab `n` (fails if a live process owns it). `None`:
    /// `NEXTEST_TEST_GLOBAL_SLOT + 1` (1 outside nextest), or the next free number.
    pub number: Option<u8>,
    /// Where `dns-queries.log` and `http-requests.log` go; default: the lab's run directory
    /// (removed at teardown).
    pub log_dir: Option<PathBuf>,
    /// The directory served at the artifact server's `/`; default: `<run dir>/http`, empty.
    pub http_root: Option<PathBuf>,
    /// Run the lab's Kubernetes cluster, a Kind cluster (see [`super::cluster`]); `lab.cluster()`.
    pub control_plane: bool,
    /// Start the cluster from this saved Kind node (a checkpoint's, [`crate::kind::saved`])
    /// instead of a new cluster.
    pub control_plane_state: Option<PathBuf>,
}

impl LabSpec {
    /// A lab for test `test_name`: logs under `$LAB_ARTIFACTS_DIR/<test_name>/lab/`.
    pub fn for_test(test_name: &str) -> LabSpec {
        LabSpec {
            log_dir: Some(crate::vm::evidence::test_dir(test_name).join("lab")),
            ..LabSpec::default()
        }
    }

    /// Lab 0, the one `harness lab up` keeps running.
    pub fn interactive() -> LabSpec {
        LabSpec {
            number: Some(crate::addresses::INTERACTIVE_LAB),
            log_dir: Some(crate::vm::evidence::test_dir("lab-up").join("lab")),
            ..LabSpec::default()
        }
    }
}

/// The lab number a test prefers: its nextest slot + 1 (nextest gives
/// concurrently running tests distinct slots), 1 outside nextest.
fn preferred_number() -> u8 {
    std::env::var("NEXTEST_TEST_GLOBAL_SLOT")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .map(|slot| (slot % u32::from(crate::addresses::MAX_LAB)) as u8 + 1)
        .unwrap_or(1)
}

/// A VM's place in the lab: its tap (inside the lab's namespace), MAC and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmNic {
    /// The VM's index `k` in the lab (0 for the first).
    pub index: u8,
    /// The namespace QEMU must run in to open the tap.
    pub netns: String,
    pub tap: String,
    pub mac: Mac,
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Ipv4Addr,
    pub dns: Ipv4Addr,
}

impl VmNic {
    /// The VM runtime's network settings for this NIC.
    pub fn net(&self) -> Net {
        Net::Tap {
            ifname: self.tap.clone(),
            mac: self.mac,
            address: GuestAddress {
                ip: format!("{}/{}", self.ip, self.prefix_len),
                gateway: self.gateway.to_string(),
                dns: self.dns.to_string(),
            },
        }
    }

    /// Puts the VM on this NIC: tap networking, QEMU in the lab's namespace.
    pub fn apply(&self, spec: &mut VmSpec) {
        spec.net = self.net();
        spec.netns = Some(self.netns.clone());
    }
}

/// A running lab (see the module docs of [`crate::lab`]). Dropping it tears it down.
pub struct Lab {
    addrs: LabAddrs,
    run_dir: PathBuf,
    log_dir: PathBuf,
    dns: DnsControl,
    http: HttpControl,
    services: Option<Services>,
    cluster: Option<Box<dyn crate::controlplane::ControlPlane>>,
    nics: Mutex<Vec<VmNic>>,
    /// VMs cut off from the artifact server ([`offline`]).
    blocked: Mutex<BTreeSet<Ipv4Addr>>,
    swept: Vec<String>,
    down: bool,
}

fn open_log(dir: &Path, name: &str) -> Result<File, LabError> {
    let path = dir.join(name);
    File::options()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io_err("opening log", &path))
}

impl Lab {
    /// Sweeps stale labs, claims a lab number, makes namespace `lab-<n>` with
    /// bridge `labbr<n>` at `192.168.100.1/24`, and starts the upstream
    /// DNS server (`:53`) and the artifact server (`:8080`) on that address.
    pub fn start(spec: LabSpec) -> Result<Lab, LabError> {
        let started = Instant::now();
        let want = match spec.number {
            Some(n) if n > crate::addresses::MAX_LAB => return Err(LabError::BadNumber(n.into())),
            Some(n) => Want::Exactly(n),
            None => Want::Prefer(preferred_number()),
        };
        let cluster_images = spec.control_plane.then(super::cluster::images).transpose()?;
        let (addrs, swept) = owner::claim(want)?;
        let name = addrs.netns();
        signals::register(&name);
        let run_dir = owner::run_dir(&name);
        let mut lab = Lab {
            addrs,
            log_dir: spec.log_dir.unwrap_or_else(|| run_dir.clone()),
            http: HttpControl::new(
                spec.http_root.clone().unwrap_or_else(|| run_dir.join("http")),
                None,
            ),
            dns: DnsControl::new(None),
            run_dir,
            services: None,
            cluster: None,
            nics: Mutex::new(Vec::new()),
            blocked: Mutex::new(BTreeSet::new()),
            swept,
            down: false,
        };
        // From here on, a failure drops `lab`, which removes what was made.
        netns::create(&addrs)?;
        fs::create_dir_all(&lab.log_dir).map_err(io_err("creating lab log directory", &lab.log_dir))?;
        let http_root = lab.http.root().to_path_buf();
        fs::create_dir_all(&http_root).map_err(io_err("creating artifact root", &http_root))?;
        lab.dns = DnsControl::new(Some(open_log(&lab.log_dir, "dns-queries.log")?));
        lab.http = HttpControl::new(http_root, Some(open_log(&lab.log_dir, "http-requests.log")?));
        lab.services = Some(Services::start(&addrs, lab.dns.clone(), lab.http.clone())?);
        if let Some(images) = &cluster_images {
            lab.cluster = Some(super::cluster::start(
                images,
                &addrs,
                &lab.run_dir,
                &lab.log_dir,
                spec.control_plane_state.as_deref(),
            )?);
        }
        lab.record().write(&lab.run_dir)?;
        tracing::info!(lab = %name, took = ?started.elapsed(), swept = ?lab.swept, "lab up");
        Ok(lab)
    }

    /// What other processes learn of this lab from its `lab.json` ([`super::record`]).
    pub fn record(&self) -> super::record::LabRecord {
        super::record::LabRecord {
            name: self.name(),
            number: self.number(),
            log_dir: self.log_dir.clone(),
            cluster: self.cluster().map(|c| super::record::ClusterRecord {
                admin_kubeconfig: c.admin_kubeconfig.clone(),
                kubectl: c.kubectl.clone(),
                log_dir: c.log_dir.clone(),
                host_api_server: c.host_api_server.clone(),
                kubernetes_version: c.kubernetes_version.clone(),
                kind: self.cluster.as_deref().and_then(|plane| plane.kind_record()),
            }),
        }
    }

    /// The lab number `n`.
    pub fn number(&self) -> u8 {
        self.addrs.number()
    }

    /// The namespace name, `lab-<n>`.
    pub fn name(&self) -> String {
        self.addrs.netns()
    }

    /// Every name and address of this lab.
    pub fn addrs(&self) -> &LabAddrs {
        &self.addrs
    }

    /// `/run/unbounded-lab/lab-<n>`: short paths for sockets and pid files; removed at teardown.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Where the DNS and HTTP logs go.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// The stale labs swept when this one started.
    pub fn swept(&self) -> &[String] {
        &self.swept
    }

    /// The upstream DNS server's records, failure switch and query counts.
    pub fn dns(&self) -> &DnsControl {
        &self.dns
    }

    /// The artifact server's root and request log.
    pub fn http(&self) -> &HttpControl {
        &self.http
    }

    /// The cluster, when the lab was started with `LabSpec.control_plane`.
    pub fn cluster(&self) -> Option<&crate::controlplane::ClusterAccess> {
        self.cluster.as_deref().map(|c| c.access())
    }

    /// Stops the control plane, saving its state into `into` (a new directory: the Kind node,
    /// [`crate::kind::saved`]); what a
    /// checkpoint keeps. The lab has no cluster afterwards; fails naming what could not be
    /// stopped or saved.
    pub fn stop_control_plane_saving(&mut self, into: &Path) -> Result<(), LabError> {
        let Some(mut cluster) = self.cluster.take() else {
            return Err(LabError::ControlPlane(Box::new(
                crate::controlplane::ControlPlaneError::Netns {
                    netns: self.name(),
                    message: "the lab has no control plane to stop".into(),
                },
            )));
        };
        let problems = cluster.stop_saving(into);
        if !problems.is_empty() {
            return Err(LabError::Leftovers {
                lab: self.name(),
                problems,
            });
        }
        Ok(())
    }

    /// A command run inside the lab's namespace (`ip netns exec lab-<n> <program>`).
    pub fn command(&self, program: &str) -> Command {
        netns::command_in(&self.name(), program)
    }

    /// Makes the next VM's tap (attached to the bridge) and returns its NIC settings.
    pub fn attach_vm(&self) -> Result<VmNic, LabError> {
        let mut nics = self.nics.lock().unwrap_or_else(|e| e.into_inner());
        let index = u8::try_from(nics.len())
            .ok()
            .filter(|k| *k < MAX_VMS)
            .ok_or(LabError::TooManyVms {
                lab: self.name(),
                max: MAX_VMS,
            })?;
        let tap = netns::add_tap(&self.addrs, index)?;
        super::cluster::route_pod_cidr(&self.addrs, index)?;
        let nic = VmNic {
            index,
            netns: self.name(),
            tap,
            mac: Mac([0x52, 0x54, 0x00, 0x6c, self.addrs.number(), index]),
            ip: self.addrs.vm_ip(index).expect("index checked against MAX_VMS"),
            prefix_len: PREFIX_LEN,
            gateway: self.addrs.bridge_ip(),
            dns: self.addrs.bridge_ip(),
        };
        nics.push(nic.clone());
        Ok(nic)
    }

    /// A VM spec for VM `name` on a new tap of this lab (QEMU in the lab's namespace).
    pub fn vm_spec(&self, name: &str, image: BootImage) -> Result<VmSpec, LabError> {
        let nic = self.attach_vm()?;
        let mut spec = VmSpec::new(self.name(), name, image);
        nic.apply(&mut spec);
        Ok(spec)
    }

    /// Boots VM `name` from `image` on a new tap of this lab (see [`Vm::boot`]);
    /// change the spec first with [`Lab::vm_spec`] + [`Vm::boot`] when needed.
    pub fn add_vm(&self, name: &str, image: BootImage) -> Result<Vm, LabError> {
        Vm::boot(self.vm_spec(name, image)?).map_err(|e| LabError::Vm(Box::new(e)))
    }

    /// Cuts the VM at `ip` off from the artifact server: its TCP connects to `:8080` on the
    /// bridge address fail with "No route to host" (ICMP host-unreachable from an nft rule in
    /// the lab's namespace, see [`offline`]); the API server and DNS stay reachable. Idempotent;
    /// the rule goes with the lab.
    pub fn block_artifact_server(&self, ip: Ipv4Addr) -> Result<(), LabError> {
        self.change_blocked(|set| {
            set.insert(ip);
        })
    }

    /// Gives the VM at `ip` its route to the artifact server back (idempotent).
    pub fn unblock_artifact_server(&self, ip: Ipv4Addr) -> Result<(), LabError> {
        self.change_blocked(|set| {
            set.remove(&ip);
        })
    }

    /// The addresses cut off from the artifact server.
    pub fn artifact_server_blocked(&self) -> Vec<Ipv4Addr> {
        self.blocked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// The nft table of the block as `nft list` shows it, with its counter (empty without one).
    pub fn artifact_server_block_rules(&self) -> Result<String, LabError> {
        offline::list(&self.name())
    }

    fn change_blocked(&self, change: impl FnOnce(&mut BTreeSet<Ipv4Addr>)) -> Result<(), LabError> {
        let mut blocked = self.blocked.lock().unwrap_or_else(|e| e.into_inner());
        let mut wanted = blocked.clone();
        change(&mut wanted);
        let script = self.run_dir.join("artifact-server-block.nft");
        offline::apply(&self.name(), &script, &wanted, HTTP_PORT)?;
        *blocked = wanted;
        Ok(())
    }

    /// The VMs attached so far.
    pub fn nics(&self) -> Vec<VmNic> {
        self.nics.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Tears the lab down and checks that nothing is left: no process or
    /// thread in its namespace, no namespace, no bridge or tap, no run directory.
    pub fn shutdown(mut self) -> Result<(), LabError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), LabError> {
        if self.down {
            return Ok(());
        }
        self.down = true;
        let name = self.name();
        let mut problems = Vec::new();
        if let Some(mut cluster) = self.cluster.take() {
            problems.extend(cluster.stop());
        }
        if let Some(mut services) = self.services.take() {
            services.stop();
        }
        if let Some(inode) = netns::inode(&name) {
            for pid in netns::kill_all_in(inode, Duration::from_secs(5)) {
                problems.push(format!(
                    "process {pid} ({}) survived SIGKILL",
                    netns::cmdline(pid)
                ));
            }
            if let Err(err) = netns::delete(&name) {
                problems.push(format!("deleting namespace {name}: {err}"));
            }
            let tasks = netns::tasks_in(inode);
            if !tasks.is_empty() {
                problems.push(format!("threads still in the namespace: {}", tasks.join(", ")));
            }
        }
        if netns::exists(&name) {
            problems.push(format!("namespace {name} still exists"));
        }
        for link in self.root_links() {
            problems.push(format!("link {link} exists in the host namespace"));
        }
        let keep = std::env::var("LAB_KEEP").is_ok_and(|v| v == "1");
        if let Err(err) = owner::release(&name, keep) {
            problems.push(err.to_string());
        }
        signals::unregister(&name);
        if problems.is_empty() {
            tracing::info!(lab = %name, "lab down");
            Ok(())
        } else {
            Err(LabError::Leftovers { lab: name, problems })
        }
    }

    /// Links named like this lab's bridge or taps in the host's namespace (there should be none).
    fn root_links(&self) -> Vec<String> {
        let bridge = self.addrs.bridge();
        let tap_prefix = format!("labtap{}-", self.addrs.number());
        fs::read_dir("/sys/class/net")
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| *n == bridge || n.starts_with(&tap_prefix))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(err) = self.teardown() {
            eprintln!("{err}");
        }
    }
}
