//! A pod's CNI result cache left empty by a host that went down (a stand-in for the power loss,
//! which a test cannot time), and the pod running again after the host's reboot: the agent's
//! containerd drop-in removes such files before containerd starts (`agent::render::cni_results`).

use std::time::Instant;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use crate::node::JoinedNode;

/// The directory of the CNI result cache as the host sees it for `machine`.
fn results_dir(machine: &str) -> String {
    format!(
        "/var/lib/machines/{machine}{}",
        agent::render::cni_results::RESULTS_DIR
    )
}

/// Empties every CNI result cache file of pod `name`'s sandboxes in `machine` (the files whose
/// cached CNI arguments name the pod), as a write interrupted by a power loss leaves them, and
/// syncs. Returns the files' paths in the machine; fails when the pod has none.
pub fn empty_cni_results_of(node: &JoinedNode, machine: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let dir = results_dir(machine);
    let listed = node.vm.run(&format!(
        "grep -l -F '[\"K8S_POD_NAME\",\"{name}\"]' {dir}/* 2>/dev/null || true"
    ))?;
    let files: Vec<String> = listed.lines().map(str::to_owned).collect();
    ensure!(
        !files.is_empty(),
        "pod {name} has no CNI result cache file in {dir}: {}",
        node.vm.run(&format!("ls -la {dir} 2>&1 || true"))?
    );
    let quoted: Vec<String> = files.iter().map(|f| format!("'{f}'")).collect();
    node.vm
        .run(&format!(
            "for f in {}; do : > \"$f\"; done; sync",
            quoted.join(" ")
        ))
        .context("emptying the pod's CNI result cache files")?;
    eprintln!("==> emptied the CNI results of pod {name}: {}", files.join(" "));
    Ok(files
        .iter()
        .map(|f| {
            f.trim_start_matches(&format!("/var/lib/machines/{machine}"))
                .to_owned()
        })
        .collect())
}

/// After the host's reboot: containerd's journal in `machine` names each of `emptied` as removed,
/// and pod `name` (restart policy `Always`) runs again in a container other than `old`. On a
/// timeout the error carries kubelet's last complaint about the pod's old sandbox.
pub fn ensure_ran_again_without_its_empty_cni_results(
    node: &JoinedNode,
    machine: &str,
    name: &str,
    old: &str,
    emptied: &[String],
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(node.client.clone(), "default");
    let deadline = Instant::now() + node.deadline(5);
    loop {
        let pod = node
            .block_on(pods.get(name))
            .with_context(|| format!("reading pod {name}"))?;
        let container = pod
            .status
            .unwrap_or_default()
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .next();
        let now = container.as_ref().and_then(|c| {
            let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
            running.then(|| c.container_id.clone().unwrap_or_default())
        });
        if let Some(id) = now.as_deref().filter(|id| !id.is_empty() && *id != old) {
            eprintln!("==> pod {name} runs again as {id} (was {old})");
            break;
        }
        if Instant::now() >= deadline {
            let complaint = node.vm.run(&format!(
                "journalctl -M {machine} -u kubelet --no-pager | grep -F KillPodSandbox | tail -n 1"
            ))?;
            anyhow::bail!(
                "pod {name} did not run again after the host's reboot (its CNI results had been \
                 emptied): container {now:?}, was {old}; kubelet's last KillPodSandbox error: {complaint}"
            );
        }
        std::thread::sleep(crate::cluster::API_POLL);
    }
    let journal = node.vm.run(&format!(
        "journalctl -M {machine} -u containerd --no-pager -o cat | grep -F 'an empty CNI result' || true"
    ))?;
    for file in emptied {
        ensure!(
            journal.contains(&format!("removed {file}:")),
            "containerd's journal in {machine} does not say {file} was removed:\n{journal}"
        );
    }
    Ok(())
}
