//! The `localdns` link as `ip -j -d addr show` reports it: kind, flags, addresses.

use std::collections::BTreeSet;

use anyhow::{Context, bail};
use harness::vm::Vm;
use serde_json::Value;

/// A link as `ip -j -d addr show` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    /// `linkinfo.info_kind` (`dummy`, `bridge`, ...); `None` for links without one (`lo`, NICs).
    pub kind: Option<String>,
    /// The interface flags (`UP`, `NOARP`, ...).
    pub flags: Vec<String>,
    /// `inet` addresses as `a.b.c.d/len`.
    pub ipv4: BTreeSet<String>,
    /// `inet6` addresses as `addr/len scope <scope>`.
    pub ipv6: BTreeSet<String>,
}

impl Link {
    /// Administratively up (flag `UP`; a dummy's operstate stays `UNKNOWN`).
    pub fn is_up(&self) -> bool {
        self.flags.iter().any(|f| f == "UP")
    }
}

/// Parses the output of `ip -j -d addr show <name>` (a JSON array with one link).
pub fn parse_link(json: &str) -> anyhow::Result<Link> {
    let doc: Value = serde_json::from_str(json).context("`ip -j` output is not JSON")?;
    let [link] = doc.as_array().map(Vec::as_slice).unwrap_or_default() else {
        bail!("`ip -j -d addr show` did not list exactly one link: {json}");
    };
    let name = link["ifname"]
        .as_str()
        .context("a link without `ifname`")?
        .to_string();
    let kind = link["linkinfo"]["info_kind"].as_str().map(str::to_string);
    let flags = link["flags"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let mut ipv4 = BTreeSet::new();
    let mut ipv6 = BTreeSet::new();
    for addr in link["addr_info"].as_array().into_iter().flatten() {
        let local = addr["local"].as_str().context("an address without `local`")?;
        let len = addr["prefixlen"]
            .as_u64()
            .context("an address without `prefixlen`")?;
        match addr["family"].as_str() {
            Some("inet") => ipv4.insert(format!("{local}/{len}")),
            Some("inet6") => ipv6.insert(format!(
                "{local}/{len} scope {}",
                addr["scope"].as_str().unwrap_or("?")
            )),
            other => bail!("address {local} of unknown family {other:?}"),
        };
    }
    Ok(Link {
        name,
        kind,
        flags,
        ipv4,
        ipv6,
    })
}

/// The link `name` on the VM, or `None` when `ip` says it does not exist; any other failure
/// of `ip` is an error.
pub fn read_link(vm: &Vm, name: &str) -> anyhow::Result<Option<Link>> {
    let command = format!("ip -j -d addr show dev {name}");
    let out = vm.run_unchecked(&command)?;
    let stderr = out.stderr_text();
    if !out.success() {
        if stderr.contains("does not exist") {
            return Ok(None);
        }
        bail!("`{command}` failed ({}): {stderr}", out.status);
    }
    parse_link(&out.stdout_text()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMMY: &str = r#"[{"ifindex":5,"ifname":"localdns","flags":["BROADCAST","NOARP","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,"link_type":"ether","address":"aa:bb:cc:dd:ee:ff","broadcast":"ff:ff:ff:ff:ff:ff","promiscuity":0,"min_mtu":0,"max_mtu":0,"linkinfo":{"info_kind":"dummy"},"num_tx_queues":1,"num_rx_queues":1,"gso_max_size":65536,"gso_max_segs":65535,"addr_info":[{"family":"inet","local":"169.254.10.10","prefixlen":32,"scope":"global","label":"localdns","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet","local":"169.254.10.11","prefixlen":32,"scope":"global","label":"localdns","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::a8bb:ccff:fedd:eeff","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]}]"#;

    #[test]
    fn a_dummy_link_reads_with_kind_flags_and_addresses() {
        let link = parse_link(DUMMY).unwrap();
        assert_eq!(link.name, "localdns");
        assert_eq!(link.kind.as_deref(), Some("dummy"));
        assert!(link.is_up());
        assert_eq!(
            link.ipv4,
            BTreeSet::from(["169.254.10.10/32".into(), "169.254.10.11/32".into()])
        );
        assert_eq!(
            link.ipv6,
            BTreeSet::from(["fe80::a8bb:ccff:fedd:eeff/64 scope link".into()])
        );
    }

    #[test]
    fn a_link_without_linkinfo_has_no_kind_and_a_down_link_is_not_up() {
        let link =
            parse_link(r#"[{"ifname":"eth9","flags":["BROADCAST","MULTICAST"],"addr_info":[]}]"#).unwrap();
        assert_eq!(link.kind, None);
        assert!(!link.is_up());
        assert!(parse_link("[]").is_err());
    }
}
