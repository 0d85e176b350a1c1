//! `harness lab ...`: keep a lab with its control plane and one VM running for work by hand,
//! print its kubeconfig, stop it, list labs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::lab::{Lab, LabSpec, owner, signals};
use crate::netns;
use crate::vm::{BootImage, RunDir, Vm};
use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::lab_arg::LabArg;

/// The upstream name `harness lab up` adds to its lab's DNS (A: the bridge address), to try by hand.
const HAND_NAME: &str = "hello.lab.test";

#[derive(clap::Subcommand)]
pub enum Command {
    /// Start lab 0 (namespace `lab-0`, 192.168.100.0/24) with its Kubernetes cluster (a Kind
    /// cluster, `kind get clusters` lists it as `lab-0`) and one VM named after the node config;
    /// return once the node is Ready (or failed to join), leaving the lab running until
    /// `harness lab down` (with `--foreground`: until Ctrl-C).
    ///
    /// The VM boots from the cached host image, the cluster runs the cached Kubernetes
    /// binaries and Kind node image (`harness images build` first). The lab's upstream DNS
    /// server is 192.168.100.1:53, its artifact server http://192.168.100.1:8080, the API server
    /// https://192.168.100.3:6443 (the Kind node on the lab's bridge); the container engine is
    /// chosen and said on the first line; the address from the host and the admin kubeconfig's path are printed (`harness lab
    /// kubeconfig`); see docs/lab.md.
    Up {
        /// The node config (`node-configs/<name>.json`); the VM is named after its `name`
        /// (default: the file stem).
        #[arg(default_value = "node-configs/localdns.json")]
        node_config: PathBuf,
        /// Only the network and its services: no VM, and no control plane unless
        /// `--control-plane` is given too.
        #[arg(long)]
        no_vm: bool,
        /// Start the control plane even with `--no-vm`.
        #[arg(long, conflicts_with = "no_control_plane")]
        control_plane: bool,
        /// No Kubernetes control plane.
        #[arg(long)]
        no_control_plane: bool,
        /// Join the node for real even when a checkpoint of it exists (the scenarios save
        /// one per node config; `LAB_NO_CHECKPOINT=1` does the same).
        #[arg(long)]
        no_checkpoint: bool,
        /// Hold this terminal until Ctrl-C (or `harness lab down`), which tears the lab down,
        /// instead of returning once it runs.
        #[arg(long)]
        foreground: bool,
        /// Where a detached `lab up` tells the command that started it that the lab runs.
        #[arg(long, hide = true, requires = "foreground")]
        ready_file: Option<PathBuf>,
        #[command(flatten)]
        at: LabArg,
    },
    /// Stop the lab `harness lab up` keeps (from another terminal), leaving no process,
    /// namespace, link or overlay behind.
    Down {
        #[command(flatten)]
        at: LabArg,
        /// How long to wait for the owner to tear the lab down before killing it.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// List the labs on this machine: owner, VMs, whether they are stale.
    ///
    /// `--output json` prints a list of objects: `name`, `owner_pid`, `owner_alive`,
    /// `owner_command`, `stale` (why, or null) and `vms` (the running VMs' names).
    List {
        /// `text` (a line per lab) or `json`.
        #[arg(long, value_enum, default_value = "text")]
        output: super::output::Output,
    },
    /// The state of a running lab: each VM's Node (Ready?), machine slot, `localdns.service`
    /// and LocalDNS listeners (`/ready` on 169.254.10.10 and .11), and where the logs are.
    ///
    /// Exits 0 when the lab is healthy, 1 when something is wrong (named on stderr: a Node not
    /// Ready, a LocalDNS listener not ready, a stopped Kind node, ...; a node whose LocalDNS is
    /// off is judged by its Node). `--output json` prints one object (its shape is documented in
    /// docs/lab.md).
    Status {
        #[command(flatten)]
        at: LabArg,
        /// `text` (for people) or `json` (one object, shape in docs/lab.md).
        #[arg(long, value_enum, default_value = "text")]
        output: super::output::Output,
    },
    /// Collect everything a bug report needs from a running lab into one directory (each VM's
    /// journal, the machine's journal, `start`'s output, ruleset, addresses and links, the
    /// cluster's Nodes, Pods and Events, the control plane's logs) with an `index.txt`;
    /// prints the directory.
    Logs {
        #[command(flatten)]
        at: LabArg,
        /// Where to write (default `$LAB_ARTIFACTS_DIR/lab-logs/lab-<n>-<time>`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print the path of the running lab's admin kubeconfig, usable on the host as it is:
    /// `kubectl --kubeconfig "$(harness lab kubeconfig)" get nodes`.
    Kubeconfig {
        #[command(flatten)]
        at: LabArg,
    },
    /// Run the lab's kubectl (the control plane's version, from the image cache) with the
    /// running lab's admin kubeconfig: `harness lab kubectl -- get nodes -o wide`.
    Kubectl {
        #[command(flatten)]
        at: LabArg,
        /// kubectl's arguments (put them after `--`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Up {
            node_config,
            no_vm,
            foreground: false,
            at,
            ..
        } => {
            if !no_vm {
                // A bad node config is refused here, before anything starts.
                node_name(&node_config)?;
            }
            super::lab_detach::up_detached(at.number()?)
        }
        Command::Up {
            node_config,
            no_vm,
            control_plane,
            no_control_plane,
            no_checkpoint,
            foreground: true,
            ready_file,
            at,
        } => up(
            &node_config,
            no_vm,
            control_plane || !(no_vm || no_control_plane),
            !no_checkpoint && crate::checkpoint::enabled(),
            at.number()?,
            ready_file.as_deref(),
        ),
        Command::Down { at, timeout } => down(at.number()?, Duration::from_secs(timeout)),
        Command::List { output } => list(output),
        Command::Status { at, output } => super::lab_inspect::status(at.number()?, output),
        Command::Logs { at, out } => super::lab_inspect::logs(at.number()?, out),
        Command::Kubeconfig { at } => kubeconfig(at.number()?),
        Command::Kubectl { at, args } => super::lab_kubectl::run(at.number()?, &args),
    }
}

/// The VM name a node config asks for: its `name`, else the file stem.
fn node_name(path: &Path) -> anyhow::Result<String> {
    Ok(crate::node_config::NodeConfig::load(path)?.name().to_string())
}

fn up(
    node_config: &Path,
    no_vm: bool,
    control_plane: bool,
    checkpoint: bool,
    number: u8,
    ready_file: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let spec = lab_spec(control_plane, number);
    let stop = stop_hint(ready_file.is_some(), number);
    if checkpoint && control_plane && !no_vm {
        let started = Instant::now();
        if let Some(resumed) = resume_from_checkpoint(node_config, spec.clone())? {
            let (lab, vm) = (resumed.lab, resumed.vm);
            add_hand_name(&lab)?;
            eprintln!(
                "==> node {} resumed from its checkpoint in {:.1}s",
                vm.name(),
                started.elapsed().as_secs_f64()
            );
            print_lab_summary(&lab);
            eprintln!(
                "\n==> {}",
                crate::deploy::join::how_to(&lab, &vm, &resumed.deployed)
            );
            return keep_until_signal(lab, Some(vm), true, ready_file, &stop);
        }
    }
    let image = if no_vm {
        None
    } else {
        let name = node_name(node_config)?;
        let cache = crate::cache::Cache::open()?;
        let image = crate::images::host::require(&cache)?;
        Some((name, BootImage::from(&image)))
    };
    let started = Instant::now();
    if control_plane {
        eprintln!("==> starting the lab and its Kind cluster ...");
    }
    let lab = Lab::start(spec)?;
    add_hand_name(&lab)?;
    eprintln!(
        "==> lab {} up in {:.1}s",
        lab.name(),
        started.elapsed().as_secs_f64()
    );
    print_lab_summary(&lab);
    let vm = match image {
        None => None,
        Some((name, image)) => {
            let mut spec = lab.vm_spec(&name, image)?;
            let nic = lab.nics().pop().expect("vm_spec attached a NIC");
            // The cargo build output this harness was built in (`$CARGO_TARGET_DIR`, else the
            // directory holding this executable), read-only at /mnt/lab in the guest.
            spec.share = Some(crate::deploy::plan::target_dir()).filter(|dir| dir.is_dir());
            eprintln!("==> booting VM {name} at {} ({}) ...", nic.ip, nic.tap);
            Some(Vm::boot(spec)?)
        }
    };
    // The node: artifacts published, agent deployed and started, Node Ready (crate::deploy).
    let joined = match &vm {
        Some(vm) if lab.cluster().is_some() => {
            crate::deploy::join::join_and_report(&lab, vm, node_config, &stop)
        }
        _ => true,
    };
    keep_until_signal(lab, vm, joined, ready_file, &stop)
}

/// The lab's network, its upstream DNS and artifact server, and its Kind cluster: the same lines
/// for a lab started fresh and one resumed from a checkpoint.
fn print_lab_summary(lab: &Lab) {
    let addrs = lab.addrs();
    eprintln!(
        "==> lab {}: bridge {}/24, upstream DNS {}, artifacts {} (serving {})",
        lab.name(),
        addrs.bridge_ip(),
        addrs.dns(),
        addrs.http_url(),
        lab.http().root().display()
    );
    if let Some(cluster) = lab.cluster() {
        eprintln!(
            "==> Kind cluster ready: Kubernetes {} at {} (host {}), admin kubeconfig {}",
            cluster.kubernetes_version,
            cluster.api_server,
            cluster.host_api_server,
            cluster.admin_kubeconfig.display()
        );
    }
}

/// How to end the lab: `harness lab down` for a lab up that returned (its owner runs detached),
/// Ctrl-C for one held in the terminal (`--foreground`).
fn stop_hint(detached: bool, number: u8) -> String {
    if detached {
        format!("`harness lab down --lab {number}`")
    } else {
        "Ctrl-C here, or `harness lab down` from another terminal".to_string()
    }
}

/// One upstream name to try by hand (docs/quickstart.md): the lab's DNS answers nothing else.
fn add_hand_name(lab: &Lab) -> anyhow::Result<()> {
    lab.dns()
        .set_a(HAND_NAME, &[lab.addrs().bridge_ip()], 300)
        .context("adding the lab's example name")
}

/// Lab `number` as `harness lab up` runs it; another number than 0 (the tests' `--lab`) keeps
/// its logs apart from lab 0's.
fn lab_spec(control_plane: bool, number: u8) -> LabSpec {
    let mut spec = LabSpec {
        number: Some(number),
        control_plane,
        ..LabSpec::interactive()
    };
    if number != crate::addresses::INTERACTIVE_LAB {
        spec.log_dir = Some(crate::vm::evidence::test_dir(&format!("lab-up-{number}")).join("lab"));
    }
    spec
}

/// The node of `node_config` resumed from its checkpoint into the lab of `spec`, when one
/// exists for the node as things are now (agent binary, node config, images; see docs/lab.md,
/// "Joined-node checkpoints"); `None` (saying why) when there is none or QEMU cannot load it.
fn resume_from_checkpoint(
    node_config: &Path,
    spec: LabSpec,
) -> anyhow::Result<Option<crate::checkpoint::node::ResumedNode>> {
    use crate::checkpoint::node::{self as saved_node, NodeCheckpointError};
    let node = crate::node_config::NodeConfig::load(node_config)?;
    let cache = crate::cache::Cache::open()?;
    let inputs = saved_node::inputs(&cache, &node, node_config)?;
    let Some(saved) = crate::checkpoint::find(&cache, &inputs) else {
        eprintln!(
            "==> no checkpoint of node {} for this agent build, node config and images: joining for real (a scenario run saves one)",
            node.name()
        );
        return Ok(None);
    };
    eprintln!(
        "==> resuming node {} from checkpoint {} (saved {} s ago; `--no-checkpoint` joins for real) ...",
        node.name(),
        saved.dir.display(),
        saved.age().as_secs()
    );
    let share = Some(crate::deploy::plan::target_dir()).filter(|dir| dir.is_dir());
    match saved_node::resume(spec, &node, &cache, &saved, share) {
        Ok(resumed) => Ok(Some(resumed)),
        Err(err @ NodeCheckpointError::NotLoaded { .. }) => {
            eprintln!("==> warning: {err}; removing it and joining for real");
            saved.invalidate(&cache)?;
            Ok(None)
        }
        Err(err) => Err(err.into()),
    }
}

/// Prints how to reach the lab and its VM, the admin kubeconfig's path on stdout, tells a
/// detached `lab up` (through `ready_file`) that the lab runs, and keeps everything up until a
/// signal (Ctrl-C, `harness lab down`); then tears it down.
fn keep_until_signal(
    lab: Lab,
    vm: Option<Vm>,
    joined: bool,
    ready_file: Option<&Path>,
    stop_hint: &str,
) -> anyhow::Result<ExitCode> {
    let stop = signals::subscribe();
    print_how_to(&lab, vm.as_ref(), stop_hint);
    let kubeconfig = lab.cluster().map(|cluster| cluster.admin_kubeconfig.clone());
    if let Some(kubeconfig) = &kubeconfig {
        // The one line on stdout: the admin kubeconfig, for scripts.
        println!("{}", kubeconfig.display());
    }
    if let Some(path) = ready_file {
        super::lab_detach::tell_ready(path, joined, kubeconfig.as_deref())?;
    }
    let signal = stop.wait();
    eprintln!("==> signal {signal}: tearing down {}", lab.name());
    if let Some(vm) = vm {
        vm.shutdown()?;
    }
    lab.shutdown()?;
    eprintln!("==> lab down: no process, namespace, link or overlay left");
    Ok(if joined {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_how_to(lab: &Lab, vm: Option<&Vm>, stop_hint: &str) {
    let mut text = format!(
        "\nLab {} is running (owner pid {}).\n",
        lab.name(),
        std::process::id()
    );
    if let Some(vm) = vm {
        let name = vm.name();
        text += &format!(
            "  shell:     harness vm shell {name}            (leave with Ctrl-])\n\
             \x20 command:   harness vm exec {name} -- uname -a\n\
             \x20 copy:      harness vm cp ./file {name}:/root/file   |   harness vm cp {name}:/etc/os-release .\n\
             \x20 console:   {}\n",
            vm.run_dir().console().display()
        );
    }
    if let Some(cluster) = lab.cluster() {
        text += &format!(
            "  cluster:   Kubernetes {} at {} (VMs), {} (host); logs in {}\n\
             \x20 kubectl:   harness lab kubectl -- get nodes -o wide   (or KUBECONFIG={})\n\
             \x20 cluster DNS: ip netns exec {} dig @{} kubernetes.default.svc.cluster.local\n",
            cluster.kubernetes_version,
            cluster.api_server,
            cluster.host_api_server,
            cluster.log_dir.display(),
            cluster.admin_kubeconfig.display(),
            lab.name(),
            cluster.cluster_dns,
        );
    }
    text += &format!(
        "  in the lab: ip netns exec {} dig @{} {HAND_NAME}   (upstream DNS)\n\
         \x20 DNS/HTTP logs: {}\n\
         \x20 status:    harness lab status [--output json]   (Node, slot, localdns, listeners)\n\
         \x20 all logs:  harness lab logs                      (one directory for a bug report)\n\
         \x20 stop:      {}\n",
        lab.name(),
        lab.addrs().bridge_ip(),
        lab.log_dir().display(),
        stop_hint
    );
    eprintln!("{text}");
}

fn down(number: u8, timeout: Duration) -> anyhow::Result<ExitCode> {
    let name = format!("lab-{number}");
    let owner = owner::read_owner(&name);
    match owner {
        Some(o) if o.is_alive() => {
            eprintln!("==> asking process {} to tear {name} down ...", o.pid);
            kill(Pid::from_raw(o.pid), Signal::SIGTERM)
                .with_context(|| format!("signalling process {}", o.pid))?;
            let started = Instant::now();
            // The owner removes its owner file once the lab is gone, then exits.
            while o.is_alive() && owner::owner_file(&name).exists() && started.elapsed() < timeout {
                std::thread::sleep(Duration::from_millis(100));
            }
            if o.is_alive() && owner::owner_file(&name).exists() {
                eprintln!(
                    "==> process {} did not stop within {timeout:?}; killing it",
                    o.pid
                );
                let _ = kill(Pid::from_raw(o.pid), Signal::SIGKILL);
            }
        }
        _ if owner::known_labs().contains(&name) => eprintln!("==> {name} has no live owner; removing it"),
        _ => {
            eprintln!("==> {name} is not running");
        }
    }
    let mut problems = {
        let _lock = owner::lock()?;
        owner::destroy(&name)
    };
    let _ = std::fs::remove_file(super::lab_detach::log_path(number));
    if netns::exists(&name) {
        problems.push(format!("namespace {name} still exists"));
    }
    for dir in [owner::run_dir(&name), owner::state_dir(&name)] {
        if dir.exists() {
            problems.push(format!("{} still exists", dir.display()));
        }
    }
    if problems.is_empty() {
        eprintln!("==> {name} is down: no process, namespace, link or overlay left");
        Ok(ExitCode::SUCCESS)
    } else {
        bail!("{name} left things behind:\n  {}", problems.join("\n  "))
    }
}

/// One lab as `harness lab list` shows it.
#[derive(Debug, serde::Serialize)]
struct LabListing {
    name: String,
    owner_pid: Option<i32>,
    owner_alive: bool,
    owner_command: Option<String>,
    /// Why the lab is stale (the next lab to start sweeps it); `None`: it runs.
    stale: Option<String>,
    vms: Vec<String>,
}

fn list(output: super::output::Output) -> anyhow::Result<ExitCode> {
    let labs: Vec<LabListing> = owner::known_labs()
        .into_iter()
        .map(|name| {
            let owner = owner::read_owner(&name);
            let alive = owner.as_ref().is_some_and(|o| o.is_alive());
            let stale = match &owner {
                Some(_) if alive => None,
                Some(o) => Some(format!("owner {} is gone", o.pid)),
                None => Some("no owner file".to_string()),
            };
            let vms = std::fs::read_dir(owner::run_dir(&name).join("vms"))
                .map(|rd| {
                    rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .filter(|vm| RunDir::new(&name, vm).running_pid().is_some())
                        .collect()
                })
                .unwrap_or_default();
            LabListing {
                owner_pid: owner.as_ref().map(|o| o.pid),
                owner_alive: alive,
                owner_command: owner.as_ref().filter(|_| alive).map(|o| netns::cmdline(o.pid)),
                stale,
                vms,
                name,
            }
        })
        .collect();
    if output == super::output::Output::Json {
        println!("{}", serde_json::to_string_pretty(&labs)?);
        return Ok(ExitCode::SUCCESS);
    }
    if labs.is_empty() {
        println!("no labs");
    }
    for lab in labs {
        let state = match (&lab.stale, lab.owner_pid) {
            (None, Some(pid)) => format!("owner {pid} ({})", lab.owner_command.unwrap_or_default()),
            (Some(why), _) => format!("STALE: {why} (the next lab to start sweeps it)"),
            (None, None) => unreachable!("a lab without an owner is stale"),
        };
        println!(
            "{}: {state}; VMs: {}",
            lab.name,
            if lab.vms.is_empty() {
                "none".into()
            } else {
                lab.vms.join(", ")
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn kubeconfig(number: u8) -> anyhow::Result<ExitCode> {
    println!("{}", admin_kubeconfig_of(number)?.display());
    Ok(ExitCode::SUCCESS)
}

/// The admin kubeconfig of lab `number`, which must be running with its control plane.
pub(super) fn admin_kubeconfig_of(number: u8) -> anyhow::Result<PathBuf> {
    let name = format!("lab-{number}");
    if !owner::read_owner(&name).is_some_and(|o| o.is_alive()) {
        bail!("{name} is not running: start it with `harness lab up`");
    }
    let path = crate::lab::cluster::admin_kubeconfig(&owner::run_dir(&name));
    if !path.is_file() {
        bail!(
            "{name} runs without a control plane (or it is still starting): {} does not exist; \
             start the lab with `harness lab up` (without `--no-vm`/`--no-control-plane`)",
            path.display()
        );
    }
    Ok(path)
}
