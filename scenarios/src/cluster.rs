//! The cluster side of a scenario, through the API server with the admin client: an ordinary
//! pod pinned to a node running to completion with its log (a Node becoming Ready is
//! `harness::deploy::ready`'s, re-exported here).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;

pub use harness::deploy::ready::{describe_conditions, node_is_ready, wait_node_ready};
use kube::api::{Api, DeleteParams, LogParams, PostParams};

/// How often the API server is asked again (it runs on this host: a question costs the VMs nothing).
pub const API_POLL: Duration = Duration::from_millis(500);

/// What a scenario pod is: an ordinary pod on the pod network (not `hostNetwork`), pinned to
/// `node` by `nodeName`, running `command` in `image` (`imagePullPolicy: Never`), once.
pub fn test_pod(name: &str, node: &str, image: &str, command: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/created-by".into(),
                "unbounded-scenarios".into(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            host_network: Some(false),
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "main".into(),
                image: Some(image.into()),
                image_pull_policy: Some("Never".into()),
                command: Some(command.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod that ran to completion: its final state and log.
#[derive(Debug, Clone)]
pub struct FinishedPod {
    pub pod: Pod,
    pub log: String,
}

impl FinishedPod {
    /// The pod's IP address (`status.podIP`).
    pub fn ip(&self) -> Option<&str> {
        self.pod.status.as_ref().and_then(|s| s.pod_ip.as_deref())
    }
}

/// The pod's phase and its containers' states, for errors.
pub fn describe_pod(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return "no status yet".into();
    };
    let mut text = format!("phase {}", status.phase.as_deref().unwrap_or("-"));
    for c in status.conditions.iter().flatten() {
        text += &format!(
            "; {}={}{}",
            c.type_,
            c.status,
            c.message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
    }
    for cs in status.container_statuses.iter().flatten() {
        let state = cs.state.as_ref();
        if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            text += &format!(
                "; container {} waiting: {} {}",
                cs.name,
                w.reason.as_deref().unwrap_or("-"),
                w.message.as_deref().unwrap_or("")
            );
        }
        if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            text += &format!(
                "; container {} terminated: exit {} {}",
                cs.name,
                t.exit_code,
                t.reason.as_deref().unwrap_or("")
            );
        }
    }
    text
}

/// Creates `pod` in `namespace` (retrying while the namespace's default ServiceAccount does
/// not exist yet), waits for it to succeed and returns it with its log (`kubectl logs`
/// through the API server). A failed pod is an error with its state and log.
///
/// The pod has run once every container has terminated ([`containers_outcome`]): the kubelet
/// reports the phase `Succeeded` only after it has also stopped the sandbox and torn down its
/// network, 5–6 s later under TCG, which nothing here needs to wait for.
pub async fn run_pod(
    client: &Client,
    namespace: &str,
    pod: &Pod,
    timeout: Duration,
) -> anyhow::Result<FinishedPod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let name = pod.metadata.name.clone().context("the pod has no name")?;
    let started = Instant::now();
    // A pod left over from an earlier attempt would be a different pod.
    let _ = pods.delete(&name, &DeleteParams::default()).await;
    loop {
        match pods.create(&PostParams::default(), pod).await {
            Ok(_) => break,
            Err(err) if started.elapsed() < timeout && is_retryable_create_error(&err) => {
                tokio::time::sleep(API_POLL).await
            }
            Err(err) => return Err(err).with_context(|| format!("creating pod {namespace}/{name}")),
        }
    }
    let mut last;
    loop {
        let current = pods
            .get(&name)
            .await
            .with_context(|| format!("reading pod {namespace}/{name}"))?;
        let phase = current
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        match (phase.as_str(), containers_outcome(&current)) {
            ("Failed", _) | (_, Some(false)) => {
                let log = pods
                    .logs(&name, &LogParams::default())
                    .await
                    .unwrap_or_else(|e| format!("(no log: {e})"));
                bail!(
                    "pod {namespace}/{name} failed: {}\n--- log ---\n{log}",
                    describe_pod(&current)
                );
            }
            ("Succeeded", _) | (_, Some(true)) => {
                let log = read_log(&pods, &name)
                    .await
                    .with_context(|| format!("reading the log of pod {namespace}/{name} (kubectl logs)"))?;
                return Ok(FinishedPod { pod: current, log });
            }
            _ => last = describe_pod(&current),
        }
        if started.elapsed() >= timeout {
            bail!(
                "pod {namespace}/{name} did not finish within {:.0?}; last: {last}",
                started.elapsed()
            );
        }
        tokio::time::sleep(API_POLL).await;
    }
}

/// Times the log of a finished pod is asked for before its error counts.
const LOG_ATTEMPTS: u32 = 4;

/// The log of finished pod `name`. The API server fetches it from the node's kubelet, a
/// connection that a loaded TCG guest can drop or answer late ("unexpected EOF", a 500): such a
/// failure is tried again, up to [`LOG_ATTEMPTS`] times, 2 s apart; the last error is returned.
async fn read_log(pods: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    let mut attempt = 1;
    loop {
        match pods.logs(name, &LogParams::default()).await {
            Ok(log) => return Ok(log),
            Err(err) if attempt < LOG_ATTEMPTS => {
                eprintln!(
                    "==> the log of pod {name}, attempt {attempt} of {LOG_ATTEMPTS}: {err}; asking again"
                );
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(err) => return Err(err).with_context(|| format!("after {LOG_ATTEMPTS} attempts")),
        }
    }
}

/// Whether every container of `pod` has terminated, and then whether all of them exited 0:
/// `None` while one has not (or the kubelet has not reported them all yet), and always for a pod
/// whose `restartPolicy` is not `Never` (a terminated container of it may yet be restarted).
pub fn containers_outcome(pod: &Pod) -> Option<bool> {
    let spec = pod.spec.as_ref()?;
    if spec.restart_policy.as_deref() != Some("Never") {
        return None;
    }
    let wanted = spec.containers.len();
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    if wanted == 0 || statuses.len() != wanted {
        return None;
    }
    let mut all_zero = true;
    for status in statuses {
        let terminated = status.state.as_ref()?.terminated.as_ref()?;
        all_zero &= terminated.exit_code == 0;
    }
    Some(all_zero)
}

/// Pod creation errors that go away by themselves right after the cluster starts.
fn is_retryable_create_error(err: &kube::Error) -> bool {
    let text = err.to_string();
    // The namespace's default ServiceAccount appears shortly after the controller-manager
    // starts; a pod deleted just before may still be terminating.
    text.contains("serviceaccount")
        || text.contains("service account")
        || text.contains("not found")
        || text.contains("already exists")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn with_states(containers: usize, states: Vec<ContainerState>) -> Pod {
        let mut pod = test_pod("p", "n", "i", &["true"]);
        let spec = pod.spec.as_mut().unwrap();
        spec.containers = vec![spec.containers[0].clone(); containers];
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(
                states
                    .into_iter()
                    .enumerate()
                    .map(|(i, state)| ContainerStatus {
                        name: format!("c{i}"),
                        state: Some(state),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        pod
    }

    fn exited(code: i32) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn running() -> ContainerState {
        ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_has_run_once_every_container_has_terminated() {
        assert_eq!(containers_outcome(&with_states(1, vec![exited(0)])), Some(true));
        assert_eq!(
            containers_outcome(&with_states(2, vec![exited(0), exited(3)])),
            Some(false)
        );
        assert_eq!(
            containers_outcome(&with_states(2, vec![exited(0), running()])),
            None
        );
        // The kubelet has reported one of two containers so far.
        assert_eq!(containers_outcome(&with_states(2, vec![exited(0)])), None);
        assert_eq!(containers_outcome(&test_pod("p", "n", "i", &["true"])), None);
    }

    #[test]
    fn the_test_pod_is_pinned_ordinary_and_never_pulls() {
        let pod = test_pod(
            "p",
            "localdns",
            "lab.local/test:1",
            &["/bin/busybox", "echo", "hi"],
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("localdns"));
        assert_eq!(spec.host_network, Some(false));
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("Never"));
        assert_eq!(c.image.as_deref(), Some("lab.local/test:1"));
        assert_eq!(c.command.as_ref().unwrap()[0], "/bin/busybox");
    }
}
