//! Scenario `resumed_node`: the checks that read a joined LocalDNS node run in turn on one node
//! resumed from its checkpoint per node config with LocalDNS on, instead of one resume each —
//! the checkpoint's (the resumed node is a node of the new lab's cluster), `notrack` (the host's
//! link, table and untracked listener DNS), `metrics` (CoreDNS's endpoint on the node IP only,
//! counting cache hits), `network_repair` (the link and table deleted by hand come back by the
//! daemon's next pass), `dns_wiring` (machine and pods resolve through the listeners their DNS
//! policy names; it ends with a machine restart), `zone_settings` (a zone's settings changed
//! through the Machine are applied by a reload, nothing restarted) and `corefile_fallback` (a
//! Corefile CoreDNS refuses, applied through the Machine, leaves the Corefile before serving, and
//! at a restart the fallback, names resolving; the built-in template again, the full Corefile
//! serves). Each check is a
//! module here; a failing one names itself, saves the node's evidence under
//! `$LAB_ARTIFACTS_DIR/<test>/<check>/` and the next still runs (`scenarios::checks`).

mod checkpoint;
mod corefile_fallback;
mod dns_wiring;
mod metrics;
mod network_repair;
mod notrack;
mod zone_settings;

use scenarios::checks::{Check, run_in_turn};
use scenarios::node::JoinedNode;

/// In this order: the checkpoint's first (its clock and Lease are read right after the resume),
/// `network_repair` after `notrack` and `metrics` (it takes the node's network away and waits for
/// the daemon to bring it back), then `dns_wiring` (it checks that `start` was the last operation,
/// and ends with a machine restart), then the two that apply configs through the daemon:
/// `zone_settings`, and `corefile_fallback` last (it leaves the node on the built-in template set
/// explicitly).
const CHECKS: [Check; 7] = [
    (
        "a_node_resumed_from_its_checkpoint_is_a_working_node_of_the_new_labs_cluster",
        checkpoint::a_node_resumed_from_its_checkpoint_is_a_working_node_of_the_new_labs_cluster,
    ),
    (
        "the_host_holds_exactly_the_designed_link_and_table_and_listener_dns_is_never_tracked",
        notrack::the_host_holds_exactly_the_designed_link_and_table_and_listener_dns_is_never_tracked,
    ),
    (
        "coredns_metrics_are_served_on_the_node_ip_only_and_count_pod_cache_hits",
        metrics::coredns_metrics_are_served_on_the_node_ip_only_and_count_pod_cache_hits,
    ),
    (
        "a_link_and_table_removed_by_hand_are_restored_by_the_daemon",
        network_repair::a_link_and_table_removed_by_hand_are_restored_by_the_daemon,
    ),
    (
        "machine_and_pods_resolve_through_the_listeners_their_dns_policy_names",
        dns_wiring::machine_and_pods_resolve_through_the_listeners_their_dns_policy_names,
    ),
    (
        "zone_settings_set_through_the_machine_apply_in_place_by_a_reload",
        zone_settings::zone_settings_set_through_the_machine_apply_in_place_by_a_reload,
    ),
    (
        "a_corefile_coredns_refuses_leaves_names_resolving_through_the_fallback",
        corefile_fallback::a_corefile_coredns_refuses_leaves_names_resolving_through_the_fallback,
    ),
];

/// One case per node config with LocalDNS on:
/// `checkpoint_notrack_metrics_and_dns_wiring_hold_on_one_resumed_node::<config>`.
mod checkpoint_notrack_metrics_and_dns_wiring_hold_on_one_resumed_node {
    use scenarios::node_config_case;
    scenarios::for_every_localdns_node_config!(
        node_config_case,
        scenarios::node::JoinedNode::run_case,
        super::every_check
    );
}

fn every_check(node: &mut JoinedNode) -> anyhow::Result<()> {
    run_in_turn(node, &CHECKS)
}
