//! A Node becoming Ready, seen through the API server: the wait, and what its conditions say.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;

/// How often the API server is asked again (it runs on this host: a question costs the VMs
/// nothing, and a Node Ready is seen at most half a second late).
const POLL: Duration = Duration::from_millis(500);

/// A Node that did not become Ready in time.
#[derive(Debug, thiserror::Error)]
#[error("Node {node} was not Ready within {waited:.0?}; last: {last}")]
pub struct NotReady {
    pub node: String,
    pub waited: Duration,
    /// "the Node is not registered", its conditions, or the API server's last error.
    pub last: String,
}

/// The Node's conditions as `Type=Status (Reason: Message)`, separated by `; `.
pub fn describe_conditions(node: &Node) -> String {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.as_slice())
        .unwrap_or_default();
    if conditions.is_empty() {
        return "no conditions yet".into();
    }
    conditions
        .iter()
        .map(|c| {
            format!(
                "{}={} ({}: {})",
                c.type_,
                c.status,
                c.reason.as_deref().unwrap_or("-"),
                c.message.as_deref().unwrap_or("-")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether the Node's `Ready` condition is `True`.
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until Node `name` is registered and Ready; the error says whether it ever registered
/// and its last conditions.
pub async fn wait_node_ready(client: &Client, name: &str, timeout: Duration) -> Result<Node, NotReady> {
    wait_node_ready_showing(client, name, timeout, &|_| ()).await
}

/// [`wait_node_ready`] calling `show` with what the Node looks like each time that changes.
pub async fn wait_node_ready_showing(
    client: &Client,
    name: &str,
    timeout: Duration,
    show: &dyn Fn(&str),
) -> Result<Node, NotReady> {
    let _waiting = crate::phase_clock::enter(crate::phase_clock::Phase::Waiting);
    let nodes: Api<Node> = Api::all(client.clone());
    let started = Instant::now();
    let mut last = "the Node is not registered".to_string();
    show(&last);
    loop {
        let before = last.clone();
        match nodes.get_opt(name).await {
            Ok(Some(node)) if node_is_ready(&node) => return Ok(node),
            Ok(Some(node)) => last = format!("registered, not Ready: {}", describe_conditions(&node)),
            Ok(None) => {}
            Err(err) => last = format!("asking the API server: {err}"),
        }
        if last != before {
            show(&last);
        }
        if started.elapsed() >= timeout {
            return Err(NotReady {
                node: name.to_string(),
                waited: started.elapsed(),
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// When the Node's `Ready` condition last became `True` (the API server's clock, in seconds).
pub fn ready_since(node: &Node) -> Option<std::time::SystemTime> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| std::time::SystemTime::from(t.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};

    fn node_with(conditions: &[(&str, &str)]) -> Node {
        Node {
            status: Some(NodeStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| NodeCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_is_ready_only_when_its_ready_condition_is_true() {
        assert!(node_is_ready(&node_with(&[
            ("MemoryPressure", "False"),
            ("Ready", "True")
        ])));
        assert!(!node_is_ready(&node_with(&[("Ready", "False")])));
        assert!(!node_is_ready(&node_with(&[("Ready", "Unknown")])));
        assert!(!node_is_ready(&Node::default()));
        assert_eq!(describe_conditions(&Node::default()), "no conditions yet");
    }
}
