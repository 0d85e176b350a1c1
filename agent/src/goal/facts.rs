//! What the goal state needs to know about the host, as plain data.
//!
//! Nothing in `goal` reads the host: callers fill [`HostFacts`] — from the
//! real host with [`HostFacts::gather`], from a `--host-facts` JSON file, or
//! in tests — and a fact that a branch needs but that is absent is an error
//! naming it.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// Facts about the host that upstream discovery and the metrics address use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// Text of the host's `/etc/resolv.conf`.
    pub host_resolv_conf: String,
    pub optional: OptionalFacts,
}

/// The facts only some branches need; this is also the `--host-facts` JSON file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionalFacts {
    /// Text of systemd-resolved's `/run/systemd/resolve/resolv.conf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_resolv_conf: Option<String>,
    /// Output of `resolvectl domain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolvectl_domain: Option<String>,
    /// IPv4 addresses assigned to the host's interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_addresses: Option<Vec<Ipv4Addr>>,
    /// IPv4 addresses the node name resolves to (`getent ahostsv4 <node name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name_addresses: Option<Vec<Ipv4Addr>>,
    /// The source address of the default route (`ip -4 route get`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_route_address: Option<Ipv4Addr>,
}

/// A host read that failed while gathering facts.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Command(#[from] crate::exec::CommandFailed),
    #[error("cannot parse the output of `{command}`: {message}")]
    Parse { command: String, message: String },
}

impl HostFacts {
    /// Reads every fact from the running host (root under `root`, normally `/`).
    /// Facts that do not apply (no systemd-resolved, no default route) stay `None`.
    pub fn gather(root: &Path, node_name: &str) -> Result<HostFacts, GatherError> {
        let read = |p: &str| -> Result<Option<String>, GatherError> {
            let path = root.join(p.trim_start_matches('/'));
            match std::fs::read_to_string(&path) {
                Ok(s) => Ok(Some(s)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(source) => Err(GatherError::Read {
                    path: path.display().to_string(),
                    source,
                }),
            }
        };
        let host_resolv_conf = read("/etc/resolv.conf")?.ok_or_else(|| GatherError::Read {
            path: root.join("etc/resolv.conf").display().to_string(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        let resolved_resolv_conf = read("/run/systemd/resolve/resolv.conf")?;
        // Only asked when resolved is around; if it does not answer, the fact stays
        // missing and upstream discovery says so should it need it.
        let resolvectl_domain = match resolved_resolv_conf {
            Some(_) => crate::exec::run(Command::new("resolvectl").arg("domain"))
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned()),
            None => None,
        };
        let addr_json = crate::exec::run_stdout(Command::new("ip").args(["-j", "-4", "addr", "show"]))?;
        let local_addresses = Some(parse_ip_addr_json(&addr_json)?);
        let route =
            crate::exec::run_unchecked(Command::new("ip").args(["-j", "-4", "route", "get", "192.0.2.1"]))?;
        let default_route_address = if route.status.success() {
            parse_route_get_json(&String::from_utf8_lossy(&route.stdout))?
        } else {
            None
        };
        let lookup = crate::exec::run_unchecked(Command::new("getent").args(["ahostsv4", node_name]))?;
        let node_name_addresses = Some(if lookup.status.success() {
            parse_getent(&String::from_utf8_lossy(&lookup.stdout))
        } else {
            Vec::new()
        });
        Ok(HostFacts {
            host_resolv_conf,
            optional: OptionalFacts {
                resolved_resolv_conf,
                resolvectl_domain,
                local_addresses,
                node_name_addresses,
                default_route_address,
            },
        })
    }
}

fn parse_error(command: &str, message: impl ToString) -> GatherError {
    GatherError::Parse {
        command: command.to_owned(),
        message: message.to_string(),
    }
}

/// Addresses from `ip -j -4 addr show`.
pub fn parse_ip_addr_json(text: &str) -> Result<Vec<Ipv4Addr>, GatherError> {
    let cmd = "ip -j -4 addr show";
    let links: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| parse_error(cmd, e))?;
    let mut out = Vec::new();
    for link in links {
        for info in link["addr_info"].as_array().into_iter().flatten() {
            if let Some(ip) = info["local"].as_str().and_then(|s| s.parse().ok()) {
                out.push(ip);
            }
        }
    }
    Ok(out)
}

/// The `prefsrc` of `ip -j -4 route get <addr>`.
pub fn parse_route_get_json(text: &str) -> Result<Option<Ipv4Addr>, GatherError> {
    let cmd = "ip -j -4 route get";
    let routes: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| parse_error(cmd, e))?;
    Ok(routes
        .first()
        .and_then(|r| r["prefsrc"].as_str())
        .and_then(|s| s.parse().ok()))
}

/// Distinct IPv4 addresses from `getent ahostsv4` output, in order.
pub fn parse_getent(text: &str) -> Vec<Ipv4Addr> {
    let mut out: Vec<Ipv4Addr> = Vec::new();
    for ip in text
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
    {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addr_json_yields_every_local_address() {
        let text = r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1"}]},
                       {"ifname":"ens2","addr_info":[{"family":"inet","local":"192.168.101.10"}]}]"#;
        let got = parse_ip_addr_json(text).unwrap();
        assert_eq!(
            got,
            [Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(192, 168, 101, 10)]
        );
    }

    #[test]
    fn route_get_json_yields_the_preferred_source() {
        let text =
            r#"[{"dst":"192.0.2.1","gateway":"10.0.0.1","dev":"ens2","prefsrc":"10.0.0.5","flags":[]}]"#;
        assert_eq!(
            parse_route_get_json(text).unwrap(),
            Some(Ipv4Addr::new(10, 0, 0, 5))
        );
    }

    #[test]
    fn getent_output_is_deduplicated() {
        let text = "10.0.0.5      STREAM node1\n10.0.0.5      DGRAM  \n10.0.0.6      RAW    \n";
        assert_eq!(
            parse_getent(text),
            [Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::new(10, 0, 0, 6)]
        );
    }

    #[test]
    fn host_facts_file_refuses_unknown_fields() {
        let err = serde_json::from_str::<OptionalFacts>(r#"{"local_addrs": []}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `local_addrs`"), "{err}");
    }
}
