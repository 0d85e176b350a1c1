//! A listing of what a host holds that `start` could add and `reset` must remove, taken from a
//! lab VM: compared before `start` and after `reset`, and saved with a joined node's checkpoint.

use std::collections::BTreeSet;

use anyhow::{Context, ensure};
use harness::vm::Vm;

/// What a host holds that `start` could add and `reset` must remove: the files under `/etc` and
/// `/var/lib` (without the ones systemd and the package manager keep changing on their own),
/// unit files, links, nft tables, machines and mounts (but the lab's own share).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostListing {
    pub items: BTreeSet<String>,
}

/// Paths that change on an idle host by themselves (journal, timers, random seed, apt, dhcp).
const LISTING_NOISE: &[&str] = &[
    "/var/lib/systemd",
    "/var/lib/apt",
    "/var/lib/dpkg",
    "/var/lib/dhcp",
    "/var/lib/private",
    "/etc/ld.so.cache",
];

impl HostListing {
    pub fn take(vm: &Vm) -> anyhow::Result<HostListing> {
        let prune: String = LISTING_NOISE
            .iter()
            .map(|p| format!(" -path {p} -prune -o"))
            .collect();
        // Each part on its own, checked: a failing one (systemd busy right after a resume) is an
        // error with its stderr, never a listing with a part missing. The manager settles first.
        vm.run_unchecked("systemctl is-system-running --wait")
            .context("waiting for the host's systemd to settle")?;
        let parts = [
            format!("find /etc /var/lib -xdev{prune} -print | sed 's/^/path /'"),
            "systemctl list-unit-files --no-legend --no-pager | awk '{print \"unit \" $1}'".into(),
            "ip -o link show | awk -F': ' '{print \"link \" $2}' | cut -d@ -f1".into(),
            "nft list tables | sed 's/^/nft /'".into(),
            "machinectl list --no-legend --no-pager | awk '{print \"machine \" $1}'".into(),
            "findmnt -rn -o TARGET | sed 's/^/mount /'".into(),
        ];
        let mut text = String::new();
        for part in &parts {
            let argv = ["bash", "-o", "pipefail", "-c", part].map(str::to_string);
            text += &vm
                .argv(argv.to_vec())
                .run()
                .with_context(|| format!("listing the host: {part}"))?
                .stdout_text();
        }
        // The lab's 9p share is the lab's, mounted on demand or at boot (a resumed VM may not
        // have it yet, a rebooted one has): never the agent's.
        let lab_share = format!("mount {}", harness::deploy::offline::SHARE_MOUNT);
        let items: BTreeSet<String> = text
            .lines()
            .filter(|item| *item != lab_share)
            .map(str::to_string)
            .collect();
        // Positive controls: the listing sees real things of each kind.
        for must in [
            "path /etc/os-release",
            "unit systemd-nspawn@.service",
            "link lo",
            "mount /",
        ] {
            ensure!(items.contains(must), "the host listing lacks {must:?}");
        }
        Ok(HostListing { items })
    }

    /// Writes the listing, one item a line.
    pub fn save(&self, path: &std::path::Path) -> anyhow::Result<()> {
        let text: String = self.items.iter().map(|item| format!("{item}\n")).collect();
        std::fs::write(path, text).with_context(|| format!("writing the host listing {}", path.display()))
    }

    /// Reads a listing [`HostListing::save`] wrote.
    pub fn load(path: &std::path::Path) -> anyhow::Result<HostListing> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the host listing {}", path.display()))?;
        let items: BTreeSet<String> = text.lines().map(str::to_string).collect();
        ensure!(
            items.contains("path /etc/os-release"),
            "{} is not a host listing (no `path /etc/os-release`)",
            path.display()
        );
        Ok(HostListing { items })
    }

    /// The listing without the items the lab's deploy adds before `start` (the config it writes
    /// for the agent: the operator's file, which `reset` keeps).
    pub fn without_the_deployed_config(mut self) -> HostListing {
        let config = harness::deploy::plan::GUEST_CONFIG;
        let mut deployed = vec![format!("path {config}")];
        let mut dir = std::path::Path::new(config).parent();
        while let Some(d) = dir.filter(|d| *d != std::path::Path::new("/etc")) {
            deployed.push(format!("path {}", d.display()));
            dir = d.parent();
        }
        for item in deployed {
            self.items.remove(&item);
        }
        self
    }

    /// The listing without what lies inside the machines' rootfs (logs, pods, containerd's state:
    /// another run's are other files) and without pods' veth links (random names): the host as
    /// the agent shapes it, to compare two joined nodes.
    pub fn outside_the_machines(mut self) -> HostListing {
        self.items.retain(|item| {
            let inside = item
                .strip_prefix("path /var/lib/machines/")
                .is_some_and(|rest| rest.contains('/'));
            !inside && !item.starts_with("link veth")
        });
        self
    }

    /// Fails naming every item added or removed since `before`.
    pub fn ensure_same_as(&self, before: &HostListing, when: &str) -> anyhow::Result<()> {
        let added: Vec<&String> = self.items.difference(&before.items).collect();
        let removed: Vec<&String> = before.items.difference(&self.items).collect();
        ensure!(
            added.is_empty() && removed.is_empty(),
            "{when}, the host differs from before `start`:\nadded: {added:#?}\nremoved: {removed:#?}"
        );
        eprintln!(
            "==> {when}: the host listing ({} items) equals the one before `start`",
            self.items.len()
        );
        Ok(())
    }
}
