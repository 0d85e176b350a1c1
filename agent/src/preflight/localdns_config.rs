//! Preflight check `localdns-config`: the agent config is valid (every
//! problem one finding), and with LocalDNS enabled its settings are summarised.

use super::{Context, Finding, Severity};

pub const NAME: &str = "localdns-config";

pub fn run(ctx: &Context) -> Vec<Finding> {
    let target = ctx.config_path.display().to_string();
    match &ctx.config {
        Err(problems) if problems.is_empty() => {
            vec![Finding::new(
                NAME,
                target,
                Severity::Error,
                "the config could not be checked",
            )]
        }
        Err(problems) => problems
            .iter()
            .map(|p| Finding::new(NAME, &target, Severity::Error, p.to_string()))
            .collect(),
        Ok(c) => match &c.local_dns {
            None => vec![Finding::new(NAME, target, Severity::Ok, "LocalDNS is disabled")],
            Some(l) => vec![Finding::new(
                NAME,
                target,
                Severity::Ok,
                format!(
                    "LocalDNS enabled: node listener {}, cluster listener {}, cluster DNS {}",
                    l.node_listener, l.cluster_listener, c.cluster.cluster_dns
                ),
            )],
        },
    }
}
