//! What one event of the daemon's watches means for its loop (pure): a change ends the wait, a
//! bookmark does not, and an error event ends the watch but not the wait. An error event is
//! mostly 410 Gone: the version watched from is older than what the API server keeps (etcd is
//! compacted every few minutes, and an object's own version stays old while it does not change).
//! Looking again at once would read the same old version and fail the same way, a loop that
//! kept a TCG guest's CPU busy; so the daemon looks again when the watch's window ends.

use kube::api::WatchEvent;

/// What the wait does after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterEvent {
    /// Something changed (or the stream ended): look again now.
    Changed,
    /// A bookmark: keep waiting on this watch.
    Keep,
    /// The watch cannot go on (the reason): look again when the window ends.
    WaitOutWindow(String),
}

/// The decision for `event`.
pub fn after<K>(event: Option<&WatchEvent<K>>) -> AfterEvent {
    match event {
        Some(WatchEvent::Bookmark(_)) => AfterEvent::Keep,
        Some(WatchEvent::Error(e)) => {
            AfterEvent::WaitOutWindow(format!("{} ({} {})", e.message, e.code, e.reason))
        }
        Some(WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_)) | None => {
            AfterEvent::Changed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn a_gone_version_waits_out_the_window_a_change_ends_the_wait_a_bookmark_keeps_it() {
        // As the API server sends it when the version watched from was compacted away.
        let gone: WatchEvent<Node> = serde_json::from_value(serde_json::json!({
            "type": "ERROR",
            "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "too old resource version: 606 (3455)", "reason": "Expired", "code": 410}
        }))
        .unwrap();
        match after(Some(&gone)) {
            AfterEvent::WaitOutWindow(why) => assert!(why.contains("410") && why.contains("606"), "{why}"),
            other => panic!("a 410 must not end the wait: {other:?}"),
        }
        assert_eq!(
            after(Some(&WatchEvent::Modified(Node::default()))),
            AfterEvent::Changed
        );
        assert_eq!(
            after(Some(&WatchEvent::Deleted(Node::default()))),
            AfterEvent::Changed
        );
        assert_eq!(after::<Node>(None), AfterEvent::Changed);
        let bookmark: WatchEvent<Node> = serde_json::from_value(serde_json::json!({
            "type": "BOOKMARK",
            "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": "12"}}
        }))
        .unwrap();
        assert_eq!(after(Some(&bookmark)), AfterEvent::Keep);
    }
}
