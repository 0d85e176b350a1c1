//! What spec §6 says the host (a lab VM) holds for LocalDNS, read from the VM as it is: the
//! `localdns` link (`ip -j -d addr show`), the nft table (`nft -j list ...`), units and drop-ins
//! (`systemctl show`), the conntrack table (`conntrack -L`), and the check that none of it — nor
//! the machine's LocalDNS units and files — exists with LocalDNS off. Everything here is parsed
//! from the tools' own output; nothing is taken from the agent's renderer, so scenarios can hold
//! the agent to the spec rather than to itself.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail, ensure};
use harness::vm::Vm;
use serde_json::Value;

use crate::cluster::run_pod;
use crate::dns::{DnsPolicy, Nslookup, ResolvConf, Step, lookup_pod, parse_framed, step};
use crate::node::JoinedNode;

/// The dummy link holding the listener addresses.
pub const LINK: &str = "localdns";
/// The nft table's family and name.
pub const NFT_FAMILY: &str = "ip";
pub const NFT_TABLE: &str = "unbounded_localdns";
/// The comment on every NOTRACK rule.
pub const RULE_COMMENT: &str = "unbounded-localdns: skip conntrack";
/// The oneshot unit recreating link and table at boot, and its file.
pub const NETWORK_UNIT: &str = "unbounded-localdns-network.service";
pub const NETWORK_UNIT_FILE: &str = "/etc/systemd/system/unbounded-localdns-network.service";
/// The host directory holding the nft script.
pub const HOST_LOCALDNS_DIR: &str = "/etc/unbounded/localdns";
/// The machine's LocalDNS units.
pub const MACHINE_UNITS: [&str; 2] = ["localdns.service", "localdns.slice"];

/// The nspawn drop-in that makes the machine require the network unit.
pub fn nspawn_drop_in(machine: &str) -> String {
    format!("/etc/systemd/system/systemd-nspawn@{machine}.service.d/10-localdns.conf")
}

/// The machine's LocalDNS files, as paths on the host (under `/var/lib/machines/<m>`).
pub fn machine_files(machine: &str) -> Vec<String> {
    [
        "/etc/systemd/system/localdns.service",
        "/etc/systemd/system/localdns.slice",
        "/etc/systemd/system/multi-user.target.wants/localdns.service",
        "/etc/systemd/system/containerd.service.d/05-localdns.conf",
        "/etc/systemd/system/kubelet.service.d/05-localdns.conf",
        "/etc/unbounded/localdns",
    ]
    .iter()
    .map(|p| format!("/var/lib/machines/{machine}{p}"))
    .collect()
}

// ---- the link ----

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

// ---- the nft table ----

/// A table as `nft -j list table` reports it, each object as nft-like text without handles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NftTable {
    /// `<name>: type <type> hook <hook> priority <prio> policy <policy>`.
    pub chains: BTreeSet<String>,
    /// `<chain>: <expressions> comment "<comment>"`, e.g.
    /// `output: ip daddr 169.254.10.10 udp dport 53 notrack comment "..."`.
    pub rules: BTreeSet<String>,
    /// Anything else in the table (sets, maps, ...), as its JSON.
    pub other: BTreeSet<String>,
}

/// One expression of a rule as nft writes it; what this reader does not know stays JSON, so an
/// unexpected expression shows up as a difference instead of being dropped.
fn expression_text(expr: &Value) -> String {
    if let Some(m) = expr.get("match") {
        let payload = &m["left"]["payload"];
        if let (Some(proto), Some(field)) = (payload["protocol"].as_str(), payload["field"].as_str()) {
            let right = match &m["right"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return match m["op"].as_str() {
                Some("==") => format!("{proto} {field} {right}"),
                Some(op) => format!("{proto} {field} {op} {right}"),
                None => expr.to_string(),
            };
        }
    }
    match expr.as_object() {
        Some(obj) if obj.len() == 1 && obj.contains_key("notrack") => "notrack".into(),
        Some(obj) if obj.len() == 1 && obj.contains_key("counter") => "counter".into(),
        _ => expr.to_string(),
    }
}

/// Parses `nft -j list table <family> <name>` into the objects of that table.
pub fn parse_nft_table(json: &str, family: &str, name: &str) -> anyhow::Result<NftTable> {
    let doc: Value = serde_json::from_str(json).context("`nft -j` output is not JSON")?;
    let items = doc["nftables"]
        .as_array()
        .context("`nft -j` output without an `nftables` array")?;
    let ours = |obj: &Value| obj["family"].as_str() == Some(family) && obj["table"].as_str() == Some(name);
    let mut table = NftTable::default();
    for item in items {
        let Some((kind, obj)) = item.as_object().and_then(|o| o.iter().next()) else {
            bail!("an `nft -j` item that is not an object with one key: {item}");
        };
        match kind.as_str() {
            "metainfo" | "table" => {}
            "chain" if ours(obj) => {
                table.chains.insert(format!(
                    "{}: type {} hook {} priority {} policy {}",
                    obj["name"].as_str().unwrap_or("?"),
                    obj["type"].as_str().unwrap_or("-"),
                    obj["hook"].as_str().unwrap_or("-"),
                    obj["prio"],
                    obj["policy"].as_str().unwrap_or("-"),
                ));
            }
            "rule" if ours(obj) => {
                let exprs: Vec<String> = obj["expr"]
                    .as_array()
                    .context("a rule without `expr`")?
                    .iter()
                    .map(expression_text)
                    .collect();
                let comment = obj["comment"]
                    .as_str()
                    .map(|c| format!(" comment \"{c}\""))
                    .unwrap_or_default();
                table.rules.insert(format!(
                    "{}: {}{comment}",
                    obj["chain"].as_str().unwrap_or("?"),
                    exprs.join(" ")
                ));
            }
            _ => {
                let mut obj = obj.clone();
                if let Some(o) = obj.as_object_mut() {
                    o.remove("handle");
                }
                table.other.insert(format!("{kind} {obj}"));
            }
        }
    }
    Ok(table)
}

/// `family name` of every table in `nft -j list tables`.
pub fn parse_nft_tables(json: &str) -> anyhow::Result<BTreeSet<String>> {
    let doc: Value = serde_json::from_str(json).context("`nft -j` output is not JSON")?;
    let items = doc["nftables"]
        .as_array()
        .context("`nft -j` output without an `nftables` array")?;
    Ok(items
        .iter()
        .filter_map(|i| i.get("table"))
        .map(|t| {
            format!(
                "{} {}",
                t["family"].as_str().unwrap_or("?"),
                t["name"].as_str().unwrap_or("?")
            )
        })
        .collect())
}

/// Every nft table on the VM (`family name`). A failure to list is an error, never "none".
pub fn read_nft_tables(vm: &Vm) -> anyhow::Result<BTreeSet<String>> {
    parse_nft_tables(&vm.run("nft -j list tables")?)
}

/// The table `family name` on the VM, or `None` when `nft -j list tables` does not list it.
pub fn read_nft_table(vm: &Vm, family: &str, name: &str) -> anyhow::Result<Option<NftTable>> {
    if !read_nft_tables(vm)?.contains(&format!("{family} {name}")) {
        return Ok(None);
    }
    let json = vm.run(&format!("nft -j list table {family} {name}"))?;
    parse_nft_table(&json, family, name).map(Some)
}

// ---- units and files ----

/// `systemctl [--machine=<m>] show -p P1 -p P2 ... <unit>` as a map (absent units answer too,
/// with `LoadState=not-found`).
pub fn unit_properties(
    vm: &Vm,
    machine: Option<&str>,
    unit: &str,
    properties: &[&str],
) -> anyhow::Result<BTreeMap<String, String>> {
    let on = machine.map(|m| format!(" --machine={m}")).unwrap_or_default();
    let props: String = properties.iter().map(|p| format!(" -p {p}")).collect();
    let text = vm.run(&format!("systemctl{on} show{props} {unit}"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// The unit's `LoadState` (`loaded`, `not-found`, `masked`, ...).
pub fn load_state(vm: &Vm, machine: Option<&str>, unit: &str) -> anyhow::Result<String> {
    let props = unit_properties(vm, machine, unit, &["LoadState"])?;
    props
        .get("LoadState")
        .cloned()
        .with_context(|| format!("`systemctl show` printed no LoadState for {unit}: {props:?}"))
}

/// The properties that tell whether a unit exists.
const UNIT_PRESENCE: [&str; 4] = ["LoadState", "FragmentPath", "DropInPaths", "ActiveState"];

/// Whether `systemctl show` properties ([`UNIT_PRESENCE`]) describe a unit that exists: one
/// with a unit file or drop-ins, or running, or masked. A slice without any file still loads
/// (`LoadState=loaded`: systemd gives slices defaults), so the load state alone cannot tell.
/// `Some(properties)` for messages when it exists.
pub fn unit_presence(props: &BTreeMap<String, String>) -> Option<String> {
    let get = |k: &str| props.get(k).map(String::as_str).unwrap_or("");
    let exists = !get("FragmentPath").is_empty()
        || !get("DropInPaths").is_empty()
        || !matches!(get("ActiveState"), "inactive" | "")
        || !matches!(get("LoadState"), "not-found" | "loaded");
    exists.then(|| {
        UNIT_PRESENCE
            .iter()
            .map(|k| format!("{k}={}", get(k)))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// [`unit_presence`] of `unit` on the host or in `machine`.
pub fn unit_found(vm: &Vm, machine: Option<&str>, unit: &str) -> anyhow::Result<Option<String>> {
    Ok(unit_presence(&unit_properties(
        vm,
        machine,
        unit,
        &UNIT_PRESENCE,
    )?))
}

/// Which of `paths` exist on the VM (files, directories or links, dangling links included).
pub fn existing_paths(vm: &Vm, paths: &[String]) -> anyhow::Result<Vec<String>> {
    let quoted: Vec<String> = paths.iter().map(|p| format!("'{p}'")).collect();
    let out = vm.run(&format!(
        "for p in {}; do if [ -e \"$p\" ] || [ -L \"$p\" ]; then echo \"$p\"; fi; done",
        quoted.join(" ")
    ))?;
    Ok(out.lines().map(str::to_string).collect())
}

// ---- LocalDNS off ----

/// With LocalDNS off, none of its host state (link, nft table, network unit, nspawn drop-in,
/// `/etc/unbounded/localdns`) nor the machine's units and files exist. Each read is first shown
/// to see real things (the `lo` link, the machine's nspawn unit and kubelet, its unit directory),
/// so an absence cannot come from looking in the wrong place. The error lists every leftover.
pub fn ensure_localdns_absent(vm: &Vm, machine: &str) -> anyhow::Result<()> {
    // Controls: the same reads find what does exist.
    ensure!(
        read_link(vm, "lo")?.is_some(),
        "reading links with `ip -j -d addr show` did not even find `lo`"
    );
    let nspawn = format!("systemd-nspawn@{machine}.service");
    ensure!(
        unit_found(vm, None, &nspawn)?.is_some(),
        "the unit reader does not find host unit {nspawn}"
    );
    ensure!(
        unit_found(vm, Some(machine), "kubelet.service")?.is_some(),
        "the unit reader does not find kubelet.service in {machine}"
    );
    let unit_dir = format!("/var/lib/machines/{machine}/etc/systemd/system");
    ensure!(
        existing_paths(vm, std::slice::from_ref(&unit_dir))? == [unit_dir.clone()],
        "the machine's unit directory {unit_dir} does not exist"
    );

    let mut leftovers = Vec::new();
    if let Some(link) = read_link(vm, LINK)? {
        leftovers.push(format!("link {LINK}: {link:?}"));
    }
    let tables = read_nft_tables(vm)?;
    if tables.contains(&format!("{NFT_FAMILY} {NFT_TABLE}")) {
        leftovers.push(format!("nft table {NFT_FAMILY} {NFT_TABLE} (tables: {tables:?})"));
    }
    if let Some(found) = unit_found(vm, None, NETWORK_UNIT)? {
        leftovers.push(format!("host unit {NETWORK_UNIT} ({found})"));
    }
    for unit in MACHINE_UNITS {
        if let Some(found) = unit_found(vm, Some(machine), unit)? {
            leftovers.push(format!("unit {unit} in {machine} ({found})"));
        }
    }
    let mut paths = vec![
        NETWORK_UNIT_FILE.to_string(),
        format!("/etc/systemd/system/multi-user.target.wants/{NETWORK_UNIT}"),
        nspawn_drop_in(machine),
        HOST_LOCALDNS_DIR.to_string(),
    ];
    paths.extend(machine_files(machine));
    leftovers.extend(
        existing_paths(vm, &paths)?
            .into_iter()
            .map(|p| format!("file {p}")),
    );
    ensure!(
        leftovers.is_empty(),
        "with LocalDNS off these LocalDNS things exist:\n  {}",
        leftovers.join("\n  ")
    );
    eprintln!("==> LocalDNS off: no LocalDNS link, nft table, units or files on the host or in {machine}");
    Ok(())
}

/// A `ClusterFirst` pod on the node resolves `kubernetes.default.svc.cluster.local` through
/// `server`: its resolv.conf names only `server`, and busybox `nslookup` says `Server: <server>`
/// and answers the name.
pub fn ensure_cluster_first_pod_resolves_through(
    node: &JoinedNode,
    server: std::net::Ipv4Addr,
) -> anyhow::Result<()> {
    let pod = lookup_pod(
        "cluster-first-dns",
        &node.deployed.name,
        &node.artifacts.test_image_ref,
        DnsPolicy::ClusterFirst,
        &[
            Step::resolv_conf("resolv-conf"),
            Step::nslookup("kubernetes", "a", "kubernetes.default.svc.cluster.local."),
        ],
    )?;
    let log = node
        .block_on(run_pod(&node.client, "default", &pod, node.deadline(3)))
        .context("running a ClusterFirst pod with nslookup")?
        .log;
    let steps = parse_framed(&log)?;
    let resolv = ResolvConf::parse(step(&steps, "resolv-conf")?.ensure_success()?);
    ensure!(
        resolv.nameservers() == [server.to_string()],
        "the ClusterFirst pod's resolv.conf names {:?}, expected only {server}:\n{log}",
        resolv.nameservers()
    );
    let lookup = step(&steps, "kubernetes")?;
    let answer = Nslookup::parse(&lookup.output)?;
    ensure!(
        answer.server == Some(std::net::IpAddr::V4(server)),
        "the ClusterFirst pod's nslookup asked {:?}, expected {server}:\n{}",
        answer.server,
        lookup.output
    );
    ensure!(
        lookup.exit == 0
            && !answer
                .addresses_of("kubernetes.default.svc.cluster.local")
                .is_empty(),
        "the ClusterFirst pod's nslookup got no address for kubernetes.default.svc.cluster.local \
         (exit {}):\n{}",
        lookup.exit,
        lookup.output
    );
    eprintln!("==> a ClusterFirst pod resolved kubernetes.default.svc.cluster.local through {server}");
    Ok(())
}

// ---- conntrack ----

/// One direction of a conntrack entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuple {
    pub src: String,
    pub dst: String,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
}

impl Tuple {
    /// Whether this direction goes to or comes from `ip:port`.
    pub fn touches(&self, ip: &str, port: u16) -> bool {
        (self.dst == ip && self.dport == Some(port)) || (self.src == ip && self.sport == Some(port))
    }
}

/// One line of `conntrack -L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConntrackEntry {
    /// `tcp`, `udp`, `icmp`, ...
    pub protocol: String,
    pub original: Tuple,
    pub reply: Tuple,
    pub line: String,
}

impl ConntrackEntry {
    /// Whether either direction goes to or comes from `ip:port`.
    pub fn touches(&self, ip: &str, port: u16) -> bool {
        self.original.touches(ip, port) || self.reply.touches(ip, port)
    }
}

/// Parses `conntrack -L` output: per line the protocol, then the original and the reply tuple
/// (the first and second `src= dst= sport= dport=`). Lines without `src=` are skipped.
pub fn parse_conntrack(text: &str) -> Vec<ConntrackEntry> {
    let mut entries = Vec::new();
    for line in text.lines() {
        let mut tuples = [Tuple::default(), Tuple::default()];
        let mut seen = BTreeMap::<&str, usize>::new();
        for token in line.split_whitespace() {
            let Some((key, value)) = token.split_once('=') else {
                continue;
            };
            if !matches!(key, "src" | "dst" | "sport" | "dport") {
                continue;
            }
            let n = seen.entry(key).or_default();
            if let Some(t) = tuples.get_mut(*n) {
                match key {
                    "src" => t.src = value.to_string(),
                    "dst" => t.dst = value.to_string(),
                    "sport" => t.sport = value.parse().ok(),
                    _ => t.dport = value.parse().ok(),
                }
            }
            *n += 1;
        }
        if seen.contains_key("src") {
            let [original, reply] = tuples;
            entries.push(ConntrackEntry {
                protocol: line.split_whitespace().next().unwrap_or_default().to_string(),
                original,
                reply,
                line: line.to_string(),
            });
        }
    }
    entries
}

/// The VM's IPv4 conntrack table (`conntrack -L -f ipv4`; a failing `conntrack` is an error).
pub fn read_conntrack(vm: &Vm) -> anyhow::Result<Vec<ConntrackEntry>> {
    Ok(parse_conntrack(&vm.run("conntrack -L -f ipv4")?))
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

    #[test]
    fn a_unit_exists_with_a_file_drop_ins_a_running_state_or_a_mask_not_by_load_state_alone() {
        let props = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let bare_slice = props(&[
            ("LoadState", "loaded"),
            ("ActiveState", "inactive"),
            ("FragmentPath", ""),
        ]);
        assert_eq!(unit_presence(&bare_slice), None);
        let absent = props(&[("LoadState", "not-found"), ("ActiveState", "inactive")]);
        assert_eq!(unit_presence(&absent), None);
        for present in [
            props(&[
                ("LoadState", "loaded"),
                ("ActiveState", "inactive"),
                ("FragmentPath", "/etc/systemd/system/x.slice"),
            ]),
            props(&[("LoadState", "loaded"), ("ActiveState", "active")]),
            props(&[
                ("LoadState", "not-found"),
                ("ActiveState", "inactive"),
                ("DropInPaths", "/etc/systemd/system/x.service.d/a.conf"),
            ]),
            props(&[("LoadState", "masked"), ("ActiveState", "inactive")]),
        ] {
            assert!(unit_presence(&present).is_some(), "{present:?}");
        }
    }

    const TABLE: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}, {"table": {"family": "ip", "name": "unbounded_localdns", "handle": 7}}, {"chain": {"family": "ip", "table": "unbounded_localdns", "name": "prerouting", "handle": 1, "type": "filter", "hook": "prerouting", "prio": -300, "policy": "accept"}}, {"rule": {"family": "ip", "table": "unbounded_localdns", "chain": "prerouting", "handle": 3, "comment": "unbounded-localdns: skip conntrack", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "169.254.10.10"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 53}}, {"notrack": null}]}}, {"rule": {"family": "ip", "table": "unbounded_localdns", "chain": "prerouting", "handle": 4, "expr": [{"match": {"op": "!=", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 53}}, {"counter": {"packets": 3, "bytes": 9}}, {"accept": null}]}}, {"set": {"family": "ip", "name": "s", "table": "unbounded_localdns", "type": "ipv4_addr", "handle": 9}}]}"#;

    #[test]
    fn an_nft_table_reads_as_nft_like_text_without_handles() {
        let t = parse_nft_table(TABLE, "ip", "unbounded_localdns").unwrap();
        assert_eq!(
            t.chains,
            BTreeSet::from(["prerouting: type filter hook prerouting priority -300 policy accept".into()])
        );
        assert_eq!(
            t.rules,
            BTreeSet::from([
                "prerouting: ip daddr 169.254.10.10 udp dport 53 notrack comment \"unbounded-localdns: skip conntrack\""
                    .to_string(),
                "prerouting: tcp dport != 53 counter {\"accept\":null}".to_string(),
            ])
        );
        assert_eq!(t.other.len(), 1);
        assert!(t.other.iter().next().unwrap().starts_with("set "));
        assert!(!t.other.iter().next().unwrap().contains("handle"));
    }

    #[test]
    fn nft_tables_list_as_family_and_name() {
        let tables = parse_nft_tables(TABLE).unwrap();
        assert_eq!(tables, BTreeSet::from(["ip unbounded_localdns".to_string()]));
        assert!(parse_nft_tables("{}").is_err());
    }

    #[test]
    fn conntrack_lines_split_into_original_and_reply_tuples() {
        let text = "udp      17 28 src=10.244.0.5 dst=10.96.0.10 sport=40001 dport=53 src=10.96.0.10 dst=192.168.101.10 sport=53 dport=40001 mark=0 use=1\n\
                    tcp      6 117 TIME_WAIT src=169.254.10.10 dst=169.254.10.10 sport=5000 dport=8181 src=169.254.10.10 dst=169.254.10.10 sport=8181 dport=5000 [ASSURED] mark=0 use=1\n\
                    conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.\n";
        let entries = parse_conntrack(text);
        assert_eq!(entries.len(), 2);
        let dns = &entries[0];
        assert_eq!(dns.protocol, "udp");
        assert_eq!(dns.original.src, "10.244.0.5");
        assert_eq!(dns.original.dport, Some(53));
        assert_eq!(dns.reply.dst, "192.168.101.10");
        assert!(dns.touches("10.96.0.10", 53));
        assert!(!dns.touches("169.254.10.11", 53));
        assert!(entries[1].touches("169.254.10.10", 8181));
        assert!(!entries[1].touches("169.254.10.10", 53));
    }
}
