//! Preflight check `localdns-upstreams`: the goal state resolves on this host —
//! upstreams are discoverable (docs/design.md §3) and a metrics address can be derived (docs/design.md §5).

use std::path::Path;

use super::{Context, Finding, Severity};
use crate::goal::{HostFacts, resolve};
use crate::names::Slot;

pub const NAME: &str = "localdns-upstreams";

pub fn run(ctx: &Context) -> Vec<Finding> {
    let Some(config) = ctx.valid_config() else {
        return Vec::new();
    };
    if config.local_dns.is_none() {
        return vec![Finding::new(NAME, "", Severity::Ok, "LocalDNS is disabled")];
    }
    let facts = match HostFacts::gather(Path::new("/"), config.node_name.as_str()) {
        Ok(f) => f,
        Err(e) => {
            return vec![Finding::new(
                NAME,
                "/etc/resolv.conf",
                Severity::Error,
                e.to_string(),
            )];
        }
    };
    vec![check(config, &facts)]
}

/// The finding for given facts (separate from the host reads, for tests).
pub fn check(config: &crate::validate::Config, facts: &HostFacts) -> Finding {
    let (severity, message) = match resolve(config, facts, Slot::Kube1) {
        Ok(goal) => match goal.local_dns {
            None => (Severity::Ok, "LocalDNS is disabled".to_owned()),
            Some(l) => {
                let ups: Vec<String> = l.upstreams.iter().map(ToString::to_string).collect();
                let message = format!("upstreams {}; metrics on {}", ups.join(", "), l.metrics_address);
                (Severity::Ok, message)
            }
        },
        Err(e) => (Severity::Error, e.to_string()),
    };
    Finding::new(NAME, "/etc/resolv.conf", severity, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::goal::OptionalFacts;
    use crate::validate::tests::base;

    /// The finding for the base config on a host with this resolv.conf.
    fn finding(resolv: &str) -> Finding {
        let config = crate::validate::parse_value(base()).unwrap();
        let facts = HostFacts {
            host_resolv_conf: resolv.into(),
            optional: OptionalFacts::default(),
        };
        check(&config, &facts)
    }

    #[test]
    fn discoverable_upstreams_are_ok_and_listed() {
        let f = finding("nameserver 10.0.0.3\nnameserver 10.0.0.2\n");
        assert_eq!(f.severity, Severity::Ok);
        assert_eq!(
            f.message,
            "upstreams 10.0.0.2, 10.0.0.3; metrics on 192.168.100.10:9253"
        );
    }

    #[test]
    fn an_unsupported_stub_is_an_error_with_the_reason() {
        let f = finding("nameserver 127.0.0.1\n");
        assert_eq!(f.severity, Severity::Error);
        assert!(
            f.message.contains("unsupported local caching stub"),
            "{}",
            f.message
        );
    }
}
