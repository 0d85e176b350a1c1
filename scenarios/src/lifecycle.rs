//! What the lifecycle scenarios share: running an agent operation on the node with its output,
//! the Node's `bootID`, a long-running pod that must survive, the order LocalDNS, containerd and
//! kubelet came up in inside the machine, and a listing of the host taken before `start` that a
//! `reset` must return the host to.

use std::time::Instant;

use anyhow::{Context, ensure};
use harness::vm::Vm;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};

use crate::cluster::test_pod;
use crate::host_listing::HostListing;
use crate::host_state::unit_properties;
use crate::node::JoinedNode;

/// Runs `unbounded-agent <args>` on the node; fails with its output unless it exits 0.
pub fn agent(node: &JoinedNode, args: &str) -> anyhow::Result<String> {
    let started = Instant::now();
    let command = format!("{} {args} 2>&1", node.deployed.guest_agent);
    eprintln!("==> unbounded-agent {args} ...");
    let out = node
        .vm
        .cmd(&command)
        .allow_failure()
        .timeout(node.deadline(harness::deploy::plan::START_COMMAND_DEADLINES))
        .run()?;
    let text = out.stdout_text();
    ensure!(
        matches!(out.status, harness::vm::ExitKind::Code(0)),
        "`unbounded-agent {args}` failed ({:?}):\n{text}",
        out.status
    );
    eprintln!(
        "==> unbounded-agent {args}: done in {:.1}s\n{}",
        started.elapsed().as_secs_f64(),
        text.lines().rev().take(3).collect::<Vec<_>>().join("\n")
    );
    Ok(text)
}

/// `unbounded-agent status --output json` on the node: it must exit 0 (installed, nothing under
/// way, LocalDNS serving on both listeners), name `operation` as the last one finished and
/// `slot` as the active machine. Returns the report.
pub fn ensure_status_after(
    node: &JoinedNode,
    operation: &str,
    slot: &str,
) -> anyhow::Result<serde_json::Value> {
    let text = agent(node, "status --output json")?;
    let status: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("`unbounded-agent status --output json` printed:\n{text}"))?;
    ensure!(
        status["problems"].as_array().is_some_and(|p| p.is_empty()),
        "status names problems: {}",
        status["problems"]
    );
    ensure!(
        status["install"]["slot"] == slot && status["install"]["stage"] == "complete",
        "status: {}",
        status["install"]
    );
    ensure!(
        status["install"]["lastOperation"]["kind"] == operation,
        "status's last operation is not {operation}: {}",
        status["install"]
    );
    let listeners = status["localDns"]["listeners"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        listeners.len() == 2
            && listeners
                .iter()
                .all(|l| l["readyError"].is_null() && l["dnsError"].is_null()),
        "status: LocalDNS is not serving on both listeners: {}",
        status["localDns"]
    );
    Ok(status)
}

/// How [`kill_agent_in_or_see_it_finish`] ended.
#[derive(Debug)]
pub enum Killed {
    /// Killed with SIGKILL in the step; what it had printed.
    At(String),
    /// The run ended by itself before the step showed; what it printed.
    FinishedFirst(String),
}

/// Starts `unbounded-agent <args>` in the background on the node, waits until `file` on the node
/// contains `marker` (the step the run must be in), then kills the agent with SIGKILL. Returns
/// what the killed run had printed.
pub fn kill_agent_in(node: &JoinedNode, args: &str, file: &str, marker: &str) -> anyhow::Result<String> {
    match kill_agent_in_or_see_it_finish(node, args, file, marker)? {
        Killed::At(printed) => Ok(printed),
        Killed::FinishedFirst(printed) => {
            anyhow::bail!("`unbounded-agent {args}` ended before {marker:?} showed in {file}:\n{printed}")
        }
    }
}

/// As [`kill_agent_in`], but a run that ends by itself before `marker` shows (a last step too
/// quick to catch) is [`Killed::FinishedFirst`], not an error.
pub fn kill_agent_in_or_see_it_finish(
    node: &JoinedNode,
    args: &str,
    file: &str,
    marker: &str,
) -> anyhow::Result<Killed> {
    kill_agent_in_any_or_see_it_finish(node, args, file, &[marker])
}

/// As [`kill_agent_in_or_see_it_finish`], killing it as soon as `file` contains any of `markers`
/// (a step or any later one: a step quicker than the polling is passed by, not waited for).
pub fn kill_agent_in_any_or_see_it_finish(
    node: &JoinedNode,
    args: &str,
    file: &str,
    markers: &[&str],
) -> anyhow::Result<Killed> {
    let log = "/var/log/unbounded-lab/killed-run.log";
    let agent = &node.deployed.guest_agent;
    node.vm
        .run(&format!("rm -f {log}; (setsid {agent} {args} >{log} 2>&1 &)"))?;
    let running = || -> anyhow::Result<bool> {
        let pids = node.vm.run_unchecked(&format!("pgrep -f '^{agent} {args}'"))?;
        Ok(!pids.stdout_text().trim().is_empty())
    };
    // 20 min under TCG: a repave re-run after a kill in `preparing` unpacks the rootfs and
    // installs everything again, and took over 10 min beside a second VM.
    let deadline = Instant::now() + node.deadline(10);
    loop {
        // Whether it still ran is read before the file, so a run that wrote the marker and then
        // ended is caught in the step, not taken for one that never reached it.
        let was_running = running()?;
        let seen = node
            .vm
            .run_unchecked(&format!("cat {file} 2>/dev/null"))?
            .stdout_text();
        if markers.iter().any(|m| seen.contains(m)) {
            break;
        }
        let printed = node.vm.run_unchecked(&format!("cat {log}"))?.stdout_text();
        if !was_running {
            eprintln!("==> `unbounded-agent {args}` ended before {markers:?} showed in {file}");
            return Ok(Killed::FinishedFirst(printed));
        }
        ensure!(
            Instant::now() < deadline,
            "`unbounded-agent {args}` never reached {markers:?} in {file}; it printed:\n{printed}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // Anchored, so the shell running pkill (whose command line holds the pattern) is spared.
    let killed = node
        .vm
        .run_unchecked(&format!("pkill -KILL -f '^{agent} {args}'"))?;
    if !killed.success() {
        // pkill matched nothing: the run ended by itself right after writing the marker.
        eprintln!("==> `unbounded-agent {args}` ended in {markers:?} before it could be killed");
        return Ok(Killed::FinishedFirst(node.vm.run(&format!("cat {log}"))?));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    ensure!(!running()?, "the agent survived SIGKILL");
    let printed = node.vm.run(&format!("cat {log}"))?;
    eprintln!(
        "==> killed `unbounded-agent {args}` at {markers:?}; it had printed:\n{}",
        printed.lines().rev().take(3).collect::<Vec<_>>().join("\n")
    );
    Ok(Killed::At(printed))
}

/// The Node's `status.nodeInfo.bootID` (kubelet reports the machine's boot id).
pub fn node_boot_id(node: &JoinedNode) -> anyhow::Result<String> {
    let name = &node.deployed.name;
    let n = node
        .block_on(Api::<Node>::all(node.client.clone()).get(name))
        .with_context(|| format!("reading Node {name}"))?;
    Ok(n.status
        .and_then(|s| s.node_info)
        .map(|i| i.boot_id)
        .unwrap_or_default())
}

/// Waits until the Node reports a `bootID` other than `old` (kubelet updates it after a restart).
pub fn wait_new_boot_id(node: &JoinedNode, old: &str) -> anyhow::Result<String> {
    let _waiting = harness::phase_clock::enter(harness::phase_clock::Phase::Waiting);
    let deadline = Instant::now() + node.deadline(3);
    loop {
        let now = node_boot_id(node)?;
        if !now.is_empty() && now != old {
            return Ok(now);
        }
        ensure!(
            Instant::now() < deadline,
            "the Node's bootID stayed {old:?} after the reboot"
        );
        std::thread::sleep(crate::cluster::API_POLL);
    }
}

/// What kubelet does with a sleeper whose container was stopped (by a reboot of its machine or of
/// the host): the pod's `restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// The pod ends (`Failed`).
    Never,
    /// kubelet tears its sandbox down and runs it again in a new one.
    Always,
}

impl RestartPolicy {
    /// The value of the pod's `spec.restartPolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "Never",
            Self::Always => "Always",
        }
    }
}

/// A pod that sleeps for an hour on the node, in `machine`; its container id tells whether it
/// survived. Its container's scope in the machine has the agent's stop timeout
/// ([`ensure_container_stop_is_bounded`]).
pub fn start_sleeper(
    node: &JoinedNode,
    machine: &str,
    name: &str,
    restart: RestartPolicy,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(node.client.clone(), "default");
    let mut pod = test_pod(
        name,
        &node.deployed.name,
        &node.artifacts.test_image_ref,
        &["sleep", "3600"],
    );
    if let Some(spec) = pod.spec.as_mut() {
        spec.restart_policy = Some(restart.as_str().into());
    }
    node.block_on(async {
        let _ = pods.delete(name, &DeleteParams::default()).await;
        pods.create(&PostParams::default(), &pod).await
    })
    .with_context(|| format!("creating pod {name}"))?;
    let deadline = Instant::now() + node.deadline(3);
    loop {
        if let Some(id) = running_container(node, name)? {
            eprintln!("==> pod {name} runs as {id}");
            ensure_container_stop_is_bounded(node, machine, &id)?;
            return Ok(id);
        }
        ensure!(Instant::now() < deadline, "pod {name} did not start running");
        std::thread::sleep(crate::cluster::API_POLL);
    }
}

/// What the machine's systemd stops, container `id`'s scope (`containerd://<id>`) among it, gets
/// SIGKILL within the agent's timeout (its manager drop-in's `DefaultTimeoutStopSec`), not
/// systemd's 90 s: the sleeper's `sleep` ignores SIGTERM, so every stop of the machine (a managed
/// reboot, a repave, the host's reboot) would otherwise wait 90 s for it, in its scope or, once
/// its scope is gone, in the shutdown's last "remaining processes" wait.
pub fn ensure_container_stop_is_bounded(node: &JoinedNode, machine: &str, id: &str) -> anyhow::Result<()> {
    let want = format!("{}s", agent::render::machine_stop::STOP_SECS);
    let drop_in = agent::render::machine_stop::DROP_IN;
    let scope = format!("cri-containerd-{}.scope", id.trim_start_matches("containerd://"));
    for (what, args) in [
        (
            "the machine's systemd",
            "show -P DefaultTimeoutStopUSec".to_owned(),
        ),
        (
            "the container's scope",
            format!("show -P TimeoutStopUSec {scope}"),
        ),
    ] {
        let (code, out) = node.machine_systemctl(machine, &args)?;
        ensure!(
            code == Some(0) && out.trim() == want,
            "{what} in {machine} should stop within {want} (agent drop-in {drop_in}); \
             `systemctl {args}` exited {code:?} with {:?}",
            out.trim()
        );
    }
    eprintln!("==> {scope} and the rest of {machine}: SIGKILL {want} after SIGTERM when the machine stops");
    Ok(())
}

/// The container id of a running, never restarted pod `name`; `None` otherwise.
pub fn running_container(node: &JoinedNode, name: &str) -> anyhow::Result<Option<String>> {
    let pods: Api<Pod> = Api::namespaced(node.client.clone(), "default");
    let pod = node
        .block_on(pods.get(name))
        .with_context(|| format!("reading pod {name}"))?;
    let status = pod.status.unwrap_or_default();
    let container = status.container_statuses.unwrap_or_default().into_iter().next();
    Ok(container.and_then(|c| {
        let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
        (running && c.restart_count == 0).then(|| c.container_id.unwrap_or_default())
    }))
}

/// The sleeper still runs the same container, never restarted.
pub fn ensure_sleeper_survived(node: &JoinedNode, name: &str, id: &str, after: &str) -> anyhow::Result<()> {
    let now = running_container(node, name)?;
    ensure!(
        now.as_deref() == Some(id),
        "pod {name} did not keep running {after}: container {now:?}, was {id}"
    );
    eprintln!("==> pod {name} kept running {after}");
    Ok(())
}

fn monotonic(vm: &Vm, machine: &str, unit: &str, property: &str) -> anyhow::Result<u64> {
    let props = unit_properties(vm, Some(machine), unit, &[property])?;
    props
        .get(property)
        .and_then(|v| v.parse().ok())
        .filter(|v| *v > 0)
        .with_context(|| format!("{unit} in {machine} has no {property}: {props:?}"))
}

/// In the machine's current boot, `localdns.service` became active (its READY=1) before
/// containerd's and kubelet's processes started (the units' monotonic timestamps).
pub fn ensure_localdns_ready_before_kubelet(vm: &Vm, machine: &str) -> anyhow::Result<()> {
    let ready = monotonic(vm, machine, "localdns.service", "ActiveEnterTimestampMonotonic")?;
    for unit in ["containerd.service", "kubelet.service"] {
        let started = monotonic(vm, machine, unit, "ExecMainStartTimestampMonotonic")?;
        ensure!(
            ready <= started,
            "{unit} started at {started} µs, before localdns.service was ready at {ready} µs"
        );
        eprintln!(
            "==> {unit} started {:.1}s after localdns.service was ready",
            (started - ready) as f64 / 1e6
        );
    }
    Ok(())
}

/// [`JoinedNode::run_case`] with the host's listing from before the deploy handed to `case` (to
/// compare with after a reset): the one its checkpoint holds, or, when the node joins for real
/// here, the one taken right before this deploy.
pub fn run_case_listing_the_host_first(
    node_config: &std::path::Path,
    case: impl FnOnce(&mut JoinedNode, &HostListing) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let fresh = std::cell::RefCell::new(None);
    let node = JoinedNode::resume_or_join_with(node_config, |lab| {
        crate::resume::prepare_host(lab)?;
        *fresh.borrow_mut() = Some(HostListing::take(&lab.vm)?);
        Ok(())
    })?;
    let before = match &node.checkpoint {
        Some(dir) => HostListing::load(&dir.join(harness::checkpoint::HOST_LISTING))?,
        None => fresh.take().context("no listing of the host before the deploy")?,
    };
    node.run(|node| case(node, &before))
}
