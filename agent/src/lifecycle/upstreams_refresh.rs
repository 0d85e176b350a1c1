//! `unbounded-agent localdns upstreams refresh`: the node listener's upstreams taken live. The
//! host's resolvers are discovered again (as `start` does: docs/configuration.md, "Upstreams")
//! for the active slot's applied config; when they changed, the machine's Corefile, fallback
//! Corefile and `node-upstreams` are rendered again and rewritten (CoreDNS reads its Corefile at
//! every start and reload), the change is logged old → new, and with `--reload` a running
//! `localdns.service` is reloaded (nothing else restarts). Run at boot
//! by the network unit (before the machine starts) and whenever the host's resolv.conf changes by
//! `unbounded-localdns-upstreams.path`. Changes nothing when the upstreams did not change, when
//! LocalDNS is off, while the node is not finished or an operation or repave is under way (those
//! discover the upstreams themselves), or when discovery fails (the upstreams before stay: an
//! error says why, and the unit tries again). `node-upstreams` is written last, so the files
//! name the new upstreams only once all of them do; a reload that did not happen or was refused
//! is remembered ([`RELOAD_PENDING`]) and done again by the next run.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::lock::{self, LockError};
use crate::artifact::checksum::sha256_bytes;
use crate::files::under;
use crate::goal::GoalError;
use crate::goal::facts::{GatherError, HostFacts};
use crate::install_state::{self, Stage, StateError};
use crate::machine::machinectl;
use crate::machine::runner::MachineRunner;
use crate::names::Slot;
use crate::paths;
use crate::progress::Progress;
use crate::render::RenderError;

/// On the host (a tmpfs: a boot starts CoreDNS afresh): the machine's files name upstreams its
/// CoreDNS has not taken yet.
pub const RELOAD_PENDING: &str = "/run/unbounded/localdns-reload-pending";

/// How long a refresh waits for another agent to let go of the host lock.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Why the upstreams could not be refreshed (nothing was changed).
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot read the repave record: {0}")]
    RepaveState(#[from] super::repave_state::RepaveStateError),
    #[error("cannot read the applied config {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the applied config {path} is invalid:\n{problems}")]
    InvalidConfig { path: PathBuf, problems: String },
    #[error("cannot read the host facts: {0}")]
    Facts(#[from] GatherError),
    #[error("cannot discover the upstreams (the ones before stay): {0}")]
    Goal(#[from] GoalError),
    #[error("cannot render the LocalDNS files: {0}")]
    Render(#[from] RenderError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the upstreams are written, but reloading localdns.service in {slot} failed: {source}")]
    Reload {
        slot: Slot,
        #[source]
        source: crate::exec::CommandFailed,
    },
    #[error("the upstreams are written, but localdns.service in {slot} did not take them: {status}")]
    ReloadRefused { slot: Slot, status: String },
}

/// What a refresh found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// Nothing to do now, and why (no node, LocalDNS off, an operation under way).
    Skipped(String),
    /// The upstreams are those the files name already.
    Unchanged { upstreams: Vec<Ipv4Addr> },
    /// The files now name `after` (they named `before`); `reloaded` when `localdns.service` was.
    Changed {
        before: Vec<Ipv4Addr>,
        after: Vec<Ipv4Addr>,
        reloaded: bool,
    },
}

/// Addresses as a log line writes them: `192.168.100.1 192.168.100.2`, or `(none)`.
fn listed(ips: &[Ipv4Addr]) -> String {
    if ips.is_empty() {
        "(none)".into()
    } else {
        ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
    }
}

/// Refreshes the upstreams of the node installed below `root` (`/` on a real host); with
/// `reload`, reloads `localdns.service` when they changed and the machine runs.
pub fn refresh(root: &Path, reload: bool, p: &dyn Progress) -> Result<Refreshed, RefreshError> {
    // At boot the daemon's host network check may hold the lock for a moment.
    let _lock = lock::take_within(root, "localdns upstreams refresh", LOCK_WAIT)?;
    let skipped = |why: &str| {
        p.line(&format!("LocalDNS upstreams: nothing to do: {why}"));
        Ok(Refreshed::Skipped(why.to_owned()))
    };
    let state_path = under(root, Path::new(paths::INSTALL_STATE));
    let Some(mut state) = install_state::load(&state_path)? else {
        return skipped("no node is installed");
    };
    if state.stage != Stage::Complete {
        return skipped("the node's install is not finished (its `start` discovers them)");
    }
    if let Some(op) = &state.operation {
        return skipped(&format!("`{}` is under way (it discovers them)", op.kind));
    }
    if super::repave_state::load(&under(root, Path::new(super::repave_state::PATH)))?.is_some() {
        return skipped("a repave is under way (it discovers them)");
    }
    let slot = state.slot;
    let config_path = under(root, Path::new(&paths::applied_config(slot)));
    let text = std::fs::read_to_string(&config_path).map_err(|source| RefreshError::ReadConfig {
        path: config_path.clone(),
        source,
    })?;
    let config = crate::validate::parse(&text).map_err(|problems| RefreshError::InvalidConfig {
        path: config_path.clone(),
        problems: problems.to_string(),
    })?;
    if config.local_dns.is_none() {
        return skipped("LocalDNS is off");
    }
    let facts = HostFacts::gather(root, config.node_name.as_str())?;
    let goal = crate::goal::resolve(&config, &facts, slot)?;
    let l = goal
        .local_dns
        .as_ref()
        .expect("LocalDNS is on in the config, so in its goal");

    let rootfs = slot.rootfs();
    let at = |inside: &str| under(root, &rootfs.join(inside.trim_start_matches('/')));
    let before: Vec<Ipv4Addr> = std::fs::read_to_string(at(paths::NODE_UPSTREAMS))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect();
    let pending = under(root, Path::new(RELOAD_PENDING));
    if before == l.upstreams {
        if reload && pending.exists() {
            p.line(&format!(
                "LocalDNS upstreams of {slot}: {} (written before; not taken by CoreDNS yet)",
                listed(&before)
            ));
            let reloaded = reload_localdns(root, slot, &pending, p)?;
            return Ok(Refreshed::Changed {
                before: before.clone(),
                after: before,
                reloaded,
            });
        }
        p.line(&format!(
            "LocalDNS upstreams of {slot}: {} (no change)",
            listed(&before)
        ));
        return Ok(Refreshed::Unchanged { upstreams: before });
    }

    // What the upstreams are written into: the files `start` rendered from them, `node-upstreams`
    // last.
    let rendered = crate::render::render(&goal)?;
    let files: Vec<(&str, String)> = [paths::COREFILE, paths::FALLBACK_COREFILE, paths::NODE_UPSTREAMS]
        .into_iter()
        .filter_map(|inside| {
            let host_path = rootfs.join(inside.trim_start_matches('/'));
            rendered
                .files
                .iter()
                .find(|f| f.path == host_path)
                .map(|f| (inside, String::from_utf8_lossy(&f.contents).into_owned()))
        })
        .collect();
    if reload {
        // Before the files change: a run cut short after them still reloads next time.
        crate::files::write_atomic(&pending, b"", 0o644).map_err(|source| RefreshError::Write {
            path: pending.clone(),
            source,
        })?;
    }
    for (inside, text) in &files {
        let path = at(inside);
        crate::files::write_atomic(&path, text.as_bytes(), 0o644).map_err(|source| RefreshError::Write {
            path: path.clone(),
            source,
        })?;
        // The manifest holds what the agent wrote: so does the next `apply`'s comparison.
        let host_path = rootfs.join(inside.trim_start_matches('/'));
        if let Some(entries) = state.manifest.slots.get_mut(&slot)
            && let Some(entry) = entries.iter_mut().find(|e| e.path == host_path)
        {
            entry.sha256 = Some(sha256_bytes(text.as_bytes()));
        }
    }
    install_state::save(&state_path, &state)?;
    p.line(&format!(
        "LocalDNS upstreams of {slot}: {} → {}",
        listed(&before),
        listed(&l.upstreams)
    ));
    let reloaded = if reload {
        reload_localdns(root, slot, &pending, p)?
    } else {
        false
    };
    Ok(Refreshed::Changed {
        before,
        after: l.upstreams.clone(),
        reloaded,
    })
}

/// Reloads a running `localdns.service` in `slot` and reads its status: a reload its new CoreDNS
/// refused is an error (the unit tries again). `pending` goes once CoreDNS took the files, or when
/// the machine is not running (its next start reads them). Below another root than `/` (tests)
/// there is no machine: nothing to reload.
fn reload_localdns(root: &Path, slot: Slot, pending: &Path, p: &dyn Progress) -> Result<bool, RefreshError> {
    let done = |reloaded| {
        let _ = std::fs::remove_file(pending);
        Ok(reloaded)
    };
    if root != Path::new("/") {
        return done(false);
    }
    if !machinectl::is_running(slot.as_str()).unwrap_or(false) {
        p.line(&format!(
            "machine {slot} is not running: its next start reads the new upstreams"
        ));
        return done(false);
    }
    let unit = crate::supervisor::restart_bridge::SERVICE_UNIT;
    let runner = MachineRunner::new(slot.as_str());
    runner
        .run(&["systemctl", "try-reload-or-restart", unit])
        .map_err(|source| RefreshError::Reload { slot, source })?;
    let status = runner
        .status_text(unit)
        .map_err(|source| RefreshError::Reload { slot, source })?;
    if status.starts_with(crate::supervisor::notify::DEGRADED_PREFIX) {
        return Err(RefreshError::ReloadRefused { slot, status });
    }
    p.line(&format!("reloaded localdns.service in {slot}: {status}"));
    done(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet() -> impl Progress {
        crate::progress::quiet()
    }

    /// A node installed below a temporary root: install state, applied config, the machine's
    /// LocalDNS files as `start` wrote them for `upstream`, and the host's resolv.conf.
    fn node(upstream: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let config = crate::validate::tests::base().to_string();
        let slot = Slot::Kube1;
        let write = |path: &Path, text: &str| {
            let at = under(root.path(), path);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        };
        write(Path::new(&paths::applied_config(slot)), &config);
        write(Path::new("/etc/resolv.conf"), &format!("nameserver {upstream}\n"));
        let parsed = crate::validate::parse(&config).unwrap();
        let facts = HostFacts::gather(root.path(), parsed.node_name.as_str()).unwrap();
        let goal = crate::goal::resolve(&parsed, &facts, slot).unwrap();
        let rendered = crate::render::render(&goal).unwrap();
        for f in rendered
            .files
            .iter()
            .filter(|f| f.path.starts_with(slot.rootfs()))
        {
            write(&f.path, &String::from_utf8_lossy(&f.contents));
        }
        let state = install_state::InstallState::new(slot, install_state::Stage::Complete, "abc");
        install_state::save(&under(root.path(), Path::new(paths::INSTALL_STATE)), &state).unwrap();
        root
    }

    fn machine_file(root: &Path, inside: &str) -> String {
        std::fs::read_to_string(under(
            root,
            &Slot::Kube1.rootfs().join(inside.trim_start_matches('/')),
        ))
        .unwrap()
    }

    #[test]
    fn a_moved_resolver_rewrites_the_corefiles_and_node_upstreams_and_a_second_run_changes_nothing() {
        let root = node("192.0.2.1");
        assert_eq!(
            refresh(root.path(), false, &quiet()).unwrap(),
            Refreshed::Unchanged {
                upstreams: vec!["192.0.2.1".parse().unwrap()]
            }
        );
        std::fs::write(
            root.path().join("etc/resolv.conf"),
            "nameserver 192.0.2.2\nnameserver 192.0.2.3\n",
        )
        .unwrap();
        let outcome = refresh(root.path(), true, &quiet()).unwrap();
        assert_eq!(
            outcome,
            Refreshed::Changed {
                before: vec!["192.0.2.1".parse().unwrap()],
                after: vec!["192.0.2.2".parse().unwrap(), "192.0.2.3".parse().unwrap()],
                reloaded: false,
            }
        );
        assert_eq!(
            machine_file(root.path(), paths::NODE_UPSTREAMS),
            "192.0.2.2\n192.0.2.3\n"
        );
        let corefile = machine_file(root.path(), paths::COREFILE);
        assert!(corefile.contains("forward . 192.0.2.2 192.0.2.3 {"), "{corefile}");
        let fallback = machine_file(root.path(), paths::FALLBACK_COREFILE);
        assert!(fallback.contains("forward . 192.0.2.2 192.0.2.3 {"), "{fallback}");
        // Run again: nothing to change.
        assert!(matches!(
            refresh(root.path(), false, &quiet()).unwrap(),
            Refreshed::Unchanged { .. }
        ));
    }

    #[test]
    fn a_resolver_without_usable_servers_is_an_error_and_keeps_the_upstreams_before() {
        let root = node("192.0.2.1");
        std::fs::write(root.path().join("etc/resolv.conf"), "nameserver ::1\n").unwrap();
        let err = refresh(root.path(), false, &quiet()).unwrap_err();
        assert!(err.to_string().contains("the ones before stay"), "{err}");
        assert_eq!(machine_file(root.path(), paths::NODE_UPSTREAMS), "192.0.2.1\n");
    }

    #[test]
    fn no_install_and_an_operation_under_way_change_nothing() {
        let root = tempfile::tempdir().unwrap();
        assert!(matches!(
            refresh(root.path(), false, &quiet()),
            Ok(Refreshed::Skipped(why)) if why == "no node is installed"
        ));
        let root = node("192.0.2.1");
        let path = under(root.path(), Path::new(paths::INSTALL_STATE));
        let mut state = install_state::load(&path).unwrap().unwrap();
        state.operation = Some(install_state::OperationRecord {
            kind: "apply".into(),
            step: "reconfigure".into(),
            config_sha256: "abc".into(),
        });
        install_state::save(&path, &state).unwrap();
        std::fs::write(root.path().join("etc/resolv.conf"), "nameserver 192.0.2.9\n").unwrap();
        assert!(matches!(
            refresh(root.path(), false, &quiet()),
            Ok(Refreshed::Skipped(why)) if why.contains("`apply` is under way")
        ));
        assert_eq!(machine_file(root.path(), paths::NODE_UPSTREAMS), "192.0.2.1\n");
        // Unfinished: its `start` discovers them.
        state.operation = None;
        state.stage = install_state::Stage::StartingNode;
        install_state::save(&path, &state).unwrap();
        assert!(matches!(
            refresh(root.path(), false, &quiet()),
            Ok(Refreshed::Skipped(_))
        ));
        assert_eq!(machine_file(root.path(), paths::NODE_UPSTREAMS), "192.0.2.1\n");
    }

    #[test]
    fn a_reload_that_did_not_happen_is_done_by_the_next_run() {
        let root = node("192.0.2.1");
        let pending = under(root.path(), Path::new(RELOAD_PENDING));
        std::fs::create_dir_all(pending.parent().unwrap()).unwrap();
        std::fs::write(&pending, "").unwrap();
        // The files name the upstreams already; the mark says CoreDNS has not taken them.
        let outcome = refresh(root.path(), true, &quiet()).unwrap();
        assert!(
            matches!(outcome, Refreshed::Changed { ref before, ref after, .. } if before == after),
            "{outcome:?}"
        );
        assert!(!pending.exists(), "the mark stays after the reload");
        assert!(matches!(
            refresh(root.path(), true, &quiet()).unwrap(),
            Refreshed::Unchanged { .. }
        ));
    }

    #[test]
    fn only_new_upstreams_rewrite_the_files() {
        let root = node("192.0.2.1");
        let corefile = under(
            root.path(),
            &Slot::Kube1.rootfs().join(paths::COREFILE.trim_start_matches('/')),
        );
        std::fs::write(&corefile, "# an older agent's Corefile\n").unwrap();
        assert!(matches!(
            refresh(root.path(), false, &quiet()).unwrap(),
            Refreshed::Unchanged { .. }
        ));
        assert_eq!(
            std::fs::read_to_string(&corefile).unwrap(),
            "# an older agent's Corefile\n"
        );
    }
}
