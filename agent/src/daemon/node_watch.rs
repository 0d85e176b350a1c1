//! Deleting the Node repaves it: the decision, from what the daemon saw of its Node. The Node must
//! have been seen (so a node that has not registered yet is never repaved), be gone now, and the
//! Machine's configuration must use `updateStrategy: OnDelete` (the default, also without a
//! configuration). After a repave the Node must be seen again before the next one, so a repave
//! that failed is not retried in a loop.

use crate::machina::{Machine, MachineConfiguration, UpdateStrategyType};

/// What the daemon remembers of its Node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeMemory {
    /// The Node was there since the daemon started or since its last repave.
    pub seen: bool,
}

/// The Node's name: the Machine's `spec.kubernetes.nodeRef`, else the Machine's name.
pub fn node_name(machine: &Machine) -> String {
    machine
        .spec
        .kubernetes
        .as_ref()
        .and_then(|k| k.node_ref.as_ref())
        .map(|r| r.name.clone())
        .unwrap_or_else(|| machine.metadata.name.clone().unwrap_or_default())
}

/// The configuration's update strategy; `OnDelete` without a configuration or a strategy.
pub fn strategy(configuration: Option<&MachineConfiguration>) -> UpdateStrategyType {
    configuration
        .and_then(|c| c.spec.update_strategy.as_ref())
        .map(|s| s.type_)
        .unwrap_or_default()
}

/// Records whether the Node exists now; `true` when the daemon is to repave.
pub fn observe(memory: &mut NodeMemory, node_exists: bool, strategy: UpdateStrategyType) -> bool {
    if node_exists {
        memory.seen = true;
        return false;
    }
    if memory.seen && strategy == UpdateStrategyType::OnDelete {
        memory.seen = false;
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machina::{
        KubernetesSpec, LocalObjectReference, MachineConfigurationSpec, MachineSpec, UpdateStrategy,
    };

    #[test]
    fn a_node_seen_then_deleted_is_repaved_once() {
        let mut memory = NodeMemory::default();
        assert!(
            !observe(&mut memory, false, UpdateStrategyType::OnDelete),
            "never seen: not yet registered"
        );
        assert!(!observe(&mut memory, true, UpdateStrategyType::OnDelete));
        assert!(
            observe(&mut memory, false, UpdateStrategyType::OnDelete),
            "seen, then gone"
        );
        assert!(
            !observe(&mut memory, false, UpdateStrategyType::OnDelete),
            "not again until seen again"
        );
        assert!(!observe(&mut memory, true, UpdateStrategyType::OnDelete));
        assert!(observe(&mut memory, false, UpdateStrategyType::OnDelete));
    }

    #[test]
    fn rolling_update_never_repaves_on_deletion() {
        let mut memory = NodeMemory { seen: true };
        assert!(!observe(&mut memory, false, UpdateStrategyType::RollingUpdate));
    }

    #[test]
    fn node_name_and_strategy_defaults() {
        let mut machine = Machine::new("m1", MachineSpec::default());
        assert_eq!(node_name(&machine), "m1");
        machine.spec.kubernetes = Some(KubernetesSpec {
            node_ref: Some(LocalObjectReference { name: "n7".into() }),
            ..Default::default()
        });
        assert_eq!(node_name(&machine), "n7");
        assert_eq!(strategy(None), UpdateStrategyType::OnDelete);
        let mut configuration = MachineConfiguration::new("edge", MachineConfigurationSpec::default());
        assert_eq!(strategy(Some(&configuration)), UpdateStrategyType::OnDelete);
        configuration.spec.update_strategy = Some(UpdateStrategy {
            type_: UpdateStrategyType::RollingUpdate,
            max_unavailable: None,
        });
        assert_eq!(strategy(Some(&configuration)), UpdateStrategyType::RollingUpdate);
    }
}
