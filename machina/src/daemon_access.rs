//! What one machine's agent daemon may read, as Kubernetes objects: the ServiceAccount it runs as
//! (`unbounded-system/agent-<machine>`), a ClusterRole naming only its Machine, its
//! MachineConfiguration and its Node, and the binding between them; a Role in that namespace that
//! lets it request new tokens for itself only (the daemon renews its token), and its binding. What every daemon may do with
//! MachineOperations, and the admission policy that keeps it to its own, are static
//! (`deploy/rbac/agent-daemon.yaml`); docs/operations.md.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::core::ObjectMeta;

use super::Machine;

/// The namespace of the daemons' ServiceAccounts.
pub const NAMESPACE: &str = "unbounded-system";
/// The API group of the Machina kinds.
const GROUP: &str = "unbounded-cloud.io";

/// The ServiceAccount a machine's daemon runs as: `agent-<machine>`.
pub fn service_account_name(machine: &str) -> String {
    format!("agent-{machine}")
}

/// The objects that give one machine's daemon its own access.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonAccess {
    pub service_account: ServiceAccount,
    pub role: ClusterRole,
    pub binding: ClusterRoleBinding,
    /// `create` on `serviceaccounts/token` of its own ServiceAccount only.
    pub token_role: Role,
    pub token_binding: RoleBinding,
}

fn rule(group: &str, resource: &str, verbs: &[&str], names: &[String]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        resource_names: Some(names.to_vec()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        non_resource_urls: None,
    }
}

/// The access of `machine`'s daemon: get and watch its Machine and write its status, get its
/// MachineConfiguration (when it follows one) and any MachineConfigurationVersion (versions are
/// immutable profiles named `<configuration>-v<N>`), get and watch its Node (the Machine's
/// `spec.kubernetes.nodeRef`, else the Machine's name).
pub fn for_machine(machine: &Machine) -> DaemonAccess {
    let name = machine.metadata.name.clone().unwrap_or_default();
    let account = service_account_name(&name);
    let role_name = format!("unbounded-agent-daemon:{name}");
    let labels = Some(
        [
            (
                "app.kubernetes.io/managed-by".to_string(),
                "kubectl-unbounded".to_string(),
            ),
            ("unbounded-cloud.io/machine".to_string(), name.clone()),
        ]
        .into(),
    );
    let node = machine
        .spec
        .kubernetes
        .as_ref()
        .and_then(|k| k.node_ref.as_ref())
        .map_or_else(|| name.clone(), |r| r.name.clone());
    let mut rules = vec![
        rule(GROUP, "machines", &["get", "watch"], std::slice::from_ref(&name)),
        rule(
            GROUP,
            "machines/status",
            &["get", "patch", "update"],
            std::slice::from_ref(&name),
        ),
    ];
    if let Some(configuration) = &machine.spec.configuration_ref {
        rules.push(rule(
            GROUP,
            "machineconfigurations",
            &["get", "watch"],
            std::slice::from_ref(&configuration.name),
        ));
        let mut versions = rule(GROUP, "machineconfigurationversions", &["get"], &[]);
        versions.resource_names = None;
        rules.push(versions);
    }
    rules.push(rule("", "nodes", &["get", "watch"], &[node]));
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: account.clone(),
        namespace: Some(NAMESPACE.to_string()),
        api_group: None,
    };
    let namespaced = |name: &str| ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(NAMESPACE.to_string()),
        labels: labels.clone(),
        ..Default::default()
    };
    let token_role_name = format!("unbounded-agent-daemon-token:{name}");
    let token_role = Role {
        metadata: namespaced(&token_role_name),
        rules: Some(vec![rule(
            "",
            "serviceaccounts/token",
            &["create"],
            std::slice::from_ref(&account),
        )]),
    };
    let token_binding = RoleBinding {
        metadata: namespaced(&token_role_name),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: token_role_name.clone(),
        },
        subjects: Some(vec![subject.clone()]),
    };
    DaemonAccess {
        token_role,
        token_binding,
        service_account: ServiceAccount {
            metadata: ObjectMeta {
                name: Some(account.clone()),
                namespace: Some(NAMESPACE.to_string()),
                labels: labels.clone(),
                ..Default::default()
            },
            ..Default::default()
        },
        role: ClusterRole {
            metadata: ObjectMeta {
                name: Some(role_name.clone()),
                labels: labels.clone(),
                ..Default::default()
            },
            rules: Some(rules),
            aggregation_rule: None,
        },
        binding: ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(role_name.clone()),
                labels,
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: role_name,
            },
            subjects: Some(vec![subject]),
        },
    }
}

impl DaemonAccess {
    /// The five objects as one YAML stream (`kubectl apply -f -`), with `apiVersion` and `kind`.
    pub fn to_yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        fn doc<T: serde::Serialize + k8s_openapi::Resource>(
            object: &T,
        ) -> Result<String, serde_yaml_ng::Error> {
            let mut value = serde_json::to_value(object).expect("Kubernetes objects serialize");
            value["apiVersion"] = T::API_VERSION.into();
            value["kind"] = T::KIND.into();
            serde_yaml_ng::to_string(&value)
        }
        Ok([
            doc(&self.service_account)?,
            doc(&self.role)?,
            doc(&self.binding)?,
            doc(&self.token_role)?,
            doc(&self.token_binding)?,
        ]
        .join("---\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KubernetesSpec, LocalObjectReference, MachineConfigurationRef, MachineSpec};

    fn names(rules: &[PolicyRule], resource: &str) -> Option<Vec<String>> {
        rules
            .iter()
            .find(|r| r.resources.as_deref() == Some(&[resource.to_string()]))
            .unwrap_or_else(|| panic!("no rule for {resource}: {rules:?}"))
            .resource_names
            .clone()
    }

    #[test]
    fn the_role_names_only_this_machine_its_configuration_and_its_node() {
        let machine = Machine::new(
            "m1",
            MachineSpec {
                kubernetes: Some(KubernetesSpec {
                    node_ref: Some(LocalObjectReference {
                        name: "node-7".into(),
                    }),
                    ..Default::default()
                }),
                configuration_ref: Some(MachineConfigurationRef {
                    name: "edge".into(),
                    version: None,
                }),
                agent: None,
            },
        );
        let access = for_machine(&machine);
        assert_eq!(access.service_account.metadata.name.as_deref(), Some("agent-m1"));
        assert_eq!(
            access.service_account.metadata.namespace.as_deref(),
            Some(NAMESPACE)
        );
        let rules = access.role.rules.clone().unwrap();
        assert_eq!(names(&rules, "machines"), Some(vec!["m1".into()]));
        assert_eq!(names(&rules, "machines/status"), Some(vec!["m1".into()]));
        assert_eq!(names(&rules, "machineconfigurations"), Some(vec!["edge".into()]));
        assert_eq!(names(&rules, "nodes"), Some(vec!["node-7".into()]));
        assert!(
            rules.iter().all(|r| !r
                .verbs
                .iter()
                .any(|v| v == "create" || v == "delete" || v == "list")),
            "{rules:?}"
        );
        let subject = &access.binding.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (subject.kind.as_str(), subject.name.as_str()),
            ("ServiceAccount", "agent-m1")
        );
        assert_eq!(access.binding.role_ref.name, "unbounded-agent-daemon:m1");
        let token_rules = access.token_role.rules.clone().unwrap();
        assert_eq!(
            names(&token_rules, "serviceaccounts/token"),
            Some(vec!["agent-m1".into()])
        );
        assert_eq!(token_rules[0].verbs, ["create"]);
        assert_eq!(access.token_role.metadata.namespace.as_deref(), Some(NAMESPACE));
        assert_eq!(access.token_binding.role_ref.kind, "Role");
        assert_eq!(
            access.token_binding.subjects.as_ref().unwrap()[0].name,
            "agent-m1"
        );
    }

    #[test]
    fn without_a_node_ref_or_configuration_the_node_is_the_machines_name() {
        let access = for_machine(&Machine::new("m2", MachineSpec::default()));
        let rules = access.role.rules.unwrap();
        assert_eq!(names(&rules, "nodes"), Some(vec!["m2".into()]));
        assert!(
            !rules
                .iter()
                .any(|r| r.resources.as_deref() == Some(&["machineconfigurations".to_string()]))
        );
    }

    #[test]
    fn yaml_has_five_documents_with_kinds() {
        let yaml = for_machine(&Machine::new("m3", MachineSpec::default()))
            .to_yaml()
            .unwrap();
        let kinds: Vec<String> = yaml
            .split("---\n")
            .map(|doc| {
                serde_yaml_ng::from_str::<serde_json::Value>(doc).unwrap()["kind"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding"
            ]
        );
    }
}
