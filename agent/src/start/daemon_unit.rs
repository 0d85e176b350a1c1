//! Stage `installing-daemon`: the agent daemon as a host unit — its kubeconfig (the config's API
//! server and CA; the token read from a file), its token, and `unbounded-agent-daemon.service`,
//! enabled and running. A config without a `Daemon` section has no daemon: one installed earlier
//! is removed. Idempotent: an unchanged daemon keeps running untouched; the token on the host is
//! replaced only by a newer one (the daemon renews its own, and an older config token must not
//! undo that).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::StartError;
use crate::exec;
use crate::files::{under, write_atomic};
use crate::paths::{
    DAEMON_DIR, DAEMON_KUBECONFIG, DAEMON_TOKEN, DAEMON_UNIT, DAEMON_UNIT_NAME, DAEMON_UNIT_WANTS_LINK,
};
use crate::render::unit_value::{self, UnitValueError};
use crate::service_account_token as token;
use crate::validate::{Config, Daemon};

/// The unit running `agent daemon` for `machine`; `agent` and `machine` quoted for systemd
/// (`render::unit_value`), an agent path that is not absolute UTF-8 refused.
pub fn unit(agent: &Path, machine: &str) -> Result<String, UnitValueError> {
    let agent = unit_value::exec_path("the agent binary", agent)?;
    let (description, machine) = (unit_value::setting_text(machine), unit_value::exec_word(machine));
    Ok(format!(
        "# Written by unbounded-agent: the agent daemon acts on this host's Machine (docs/operations.md).\n\
         [Unit]\n\
         Description=unbounded-agent daemon for Machine {description}\n\
         After=network.target\n\
         \n\
         [Service]\n\
         Type=exec\n\
         ExecStart={agent} daemon --machine {machine} --kubeconfig {DAEMON_KUBECONFIG}\n\
         Environment=RUST_LOG=info\n\
         Restart=on-failure\n\
         RestartSec=10\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    ))
}

/// The daemon's kubeconfig: `api_server` with the cluster CA (base64 PEM, as in the config), the
/// user's token read from `token_file` ([`DAEMON_TOKEN`] on a node; re-read by the client when
/// the daemon renews it).
pub fn kubeconfig(api_server: &str, ca_base64: &str, token_file: &str) -> String {
    let auth = kube::config::AuthInfo {
        token_file: Some(token_file.to_owned()),
        ..kube::config::AuthInfo::default()
    };
    let yaml = crate::render::kubeconfig::yaml(
        "cluster",
        api_server,
        crate::render::kubeconfig::CaSource::Data(ca_base64),
        "daemon",
        auth,
        "daemon",
    );
    format!("# Written by unbounded-agent: the agent daemon's kubeconfig.\n{yaml}")
}

/// Whether the token on the host gives way to the config's `wanted`: it is missing, unreadable,
/// not a token of the same account, or issued earlier.
pub fn token_outdated(on_host: Option<&str>, wanted: &Daemon) -> bool {
    let Some(text) = on_host else { return true };
    match token::claims(text) {
        Ok(c) => c.subject != wanted.claims.subject || c.issued_at < wanted.claims.issued_at,
        Err(_) => true,
    }
}

/// What [`converge`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DaemonChanges {
    /// Host paths written or removed.
    pub paths: Vec<PathBuf>,
    /// The unit was (re)started, stopped, enabled or disabled.
    pub unit: Vec<String>,
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StartError + 'a {
    move |source| StartError::Io {
        action,
        path: path.into(),
        source,
    }
}

/// Writes `contents` at `local` below `root` unless it is there with that mode already.
fn write_if_changed(
    root: &Path,
    local: &str,
    contents: &[u8],
    mode: u32,
    changes: &mut DaemonChanges,
) -> Result<(), StartError> {
    use std::os::unix::fs::PermissionsExt;
    let path = under(root, Path::new(local));
    let same = std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode)
        && std::fs::read(&path).is_ok_and(|c| c == contents);
    if !same {
        write_atomic(&path, contents, mode).map_err(io("write", &path))?;
        changes.paths.push(PathBuf::from(local));
    }
    Ok(())
}

/// `root` is this running host (systemd is PID 1 there): units are reloaded and started.
pub fn live(root: &Path) -> bool {
    root == Path::new("/") && Path::new("/run/systemd/system").is_dir()
}

fn systemctl(args: &[&str]) -> Result<(), StartError> {
    exec::run(Command::new("systemctl").args(args))?;
    Ok(())
}

/// Brings the daemon to what `config` says, below `root`; `agent` is the binary the unit runs.
pub fn converge(root: &Path, config: &Config, agent: &Path) -> Result<DaemonChanges, StartError> {
    let Some(daemon) = &config.daemon else {
        return remove(root);
    };
    let mut changes = DaemonChanges::default();
    write_if_changed(
        root,
        DAEMON_KUBECONFIG,
        kubeconfig(
            &config.kubelet.api_server,
            &config.cluster.ca_cert_base64,
            DAEMON_TOKEN,
        )
        .as_bytes(),
        0o600,
        &mut changes,
    )?;
    let token_path = under(root, Path::new(DAEMON_TOKEN));
    let on_host = std::fs::read_to_string(&token_path).ok();
    if token_outdated(on_host.as_deref(), daemon) {
        // No trailing newline: the client sends the file's bytes as the bearer token.
        write_atomic(&token_path, daemon.token.as_bytes(), 0o600).map_err(io("write", &token_path))?;
        changes.paths.push(DAEMON_TOKEN.into());
    }
    let unit_text = unit(agent, config.machine_name.as_str())?;
    let unit_changed = {
        let before = changes.paths.len();
        write_if_changed(root, DAEMON_UNIT, unit_text.as_bytes(), 0o644, &mut changes)?;
        changes.paths.len() > before
    };
    if !live(root) {
        return Ok(changes);
    }
    if unit_changed {
        systemctl(&["daemon-reload"])?;
    }
    if !Path::new(DAEMON_UNIT_WANTS_LINK).exists() {
        systemctl(&["enable", DAEMON_UNIT_NAME])?;
        changes.unit.push("enabled".into());
    }
    if !changes.paths.is_empty() {
        systemctl(&["restart", DAEMON_UNIT_NAME])?;
        changes.unit.push("restarted".into());
    } else if !is_active()? {
        systemctl(&["start", DAEMON_UNIT_NAME])?;
        changes.unit.push("started".into());
    }
    Ok(changes)
}

fn is_active() -> Result<bool, StartError> {
    let out = exec::run_unchecked(Command::new("systemctl").args(["is-active", DAEMON_UNIT_NAME]))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim() == "active")
}

/// This process runs inside the daemon's unit (an `AgentReset` the daemon carries out): stopping
/// the unit would end the reset half-way, so the unit is left to end with the daemon.
pub fn running_inside_unit() -> bool {
    std::fs::read_to_string("/proc/self/cgroup")
        .is_ok_and(|c| c.lines().any(|l| l.ends_with(&format!("/{DAEMON_UNIT_NAME}"))))
}

/// The daemon's files on the host, below `root` (what [`remove`] and `reset` delete).
pub fn host_paths(root: &Path) -> Vec<PathBuf> {
    [DAEMON_UNIT_WANTS_LINK, DAEMON_UNIT, DAEMON_DIR]
        .iter()
        .map(|p| under(root, Path::new(p)))
        .collect()
}

/// Stops and disables the unit (unless this process runs in it) and removes the daemon's files.
pub fn remove(root: &Path) -> Result<DaemonChanges, StartError> {
    let mut changes = DaemonChanges::default();
    let installed = host_paths(root).iter().any(|p| p.symlink_metadata().is_ok());
    if !installed {
        return Ok(changes);
    }
    if live(root) {
        if running_inside_unit() {
            systemctl(&["disable", DAEMON_UNIT_NAME])?;
            changes.unit.push("disabled (it ends with this daemon)".into());
        } else {
            systemctl(&["disable", "--now", DAEMON_UNIT_NAME])?;
            changes.unit.push("stopped and disabled".into());
        }
    }
    for (path, local) in host_paths(root)
        .iter()
        .zip([DAEMON_UNIT_WANTS_LINK, DAEMON_UNIT, DAEMON_DIR])
    {
        match path.symlink_metadata() {
            Err(_) => {}
            Ok(m) if m.is_dir() => {
                std::fs::remove_dir_all(path).map_err(io("remove", path))?;
                changes.paths.push(local.into());
            }
            Ok(_) => {
                std::fs::remove_file(path).map_err(io("remove", path))?;
                changes.paths.push(local.into());
            }
        }
    }
    if live(root) {
        systemctl(&["daemon-reload"])?;
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_account_token::tests::jwt;
    use std::os::unix::fs::PermissionsExt;

    fn daemon(iat: i64) -> Daemon {
        let t = jwt(serde_json::json!({
            "sub": "system:serviceaccount:unbounded-system:agent-node1", "iat": iat, "exp": iat + 3600
        }));
        Daemon {
            claims: token::claims(&t).unwrap(),
            token: t,
        }
    }

    #[test]
    fn the_unit_runs_the_daemon_for_its_machine_with_its_kubeconfig() {
        let u = unit(Path::new("/usr/local/bin/unbounded-agent"), "m1").unwrap();
        assert!(u.contains(
            "ExecStart=/usr/local/bin/unbounded-agent daemon --machine m1 --kubeconfig /etc/unbounded/agent/daemon/kubeconfig\n"
        ));
        assert!(u.contains("Restart=on-failure\n") && u.contains("WantedBy=multi-user.target\n"));
    }

    /// An agent installed under a path with a space, `%`, `$` or `;`, and a machine name with any
    /// hostile value (validation refuses those first), read back as written; a path systemd
    /// refuses for a command (quotes, backslashes, a newline) is refused naming it.
    #[rstest::rstest]
    fn hostile_agent_paths_and_machine_names_read_back_as_written(
        #[values(0, 1, 2, 3, 4, 5, 6, 7, 8)] i: usize,
    ) {
        use crate::render::unit_value::tests::{HOSTILE, exec_start_words};
        let value = HOSTILE[i];
        let agent = PathBuf::from(format!("/opt/{value}/unbounded-agent"));
        let plain = Path::new("/usr/local/bin/unbounded-agent");
        let u = match unit(&agent, value) {
            Ok(u) => u,
            Err(err) => {
                assert!(value.contains(['"', '\'', '\\', '\n']), "{value:?}: {err}");
                unit(plain, value).unwrap()
            }
        };
        assert_eq!(
            u.lines().count(),
            unit(Path::new("/a"), "m").unwrap().lines().count(),
            "{u}"
        );
        let words = exec_start_words(&u);
        assert_eq!(
            words[1..],
            ["daemon", "--machine", value, "--kubeconfig", DAEMON_KUBECONFIG],
            "{u}"
        );
        assert!(
            words[0] == agent.to_str().unwrap() || words[0] == plain.to_str().unwrap(),
            "{u}"
        );
        let description = u.lines().find(|l| l.starts_with("Description=")).unwrap();
        assert!(!description.ends_with('\\'), "{description}");
    }

    #[test]
    fn an_agent_path_that_is_not_absolute_is_refused() {
        let err = unit(Path::new("unbounded-agent"), "m1").unwrap_err();
        assert!(err.to_string().contains("not an absolute path"), "{err}");
    }

    #[test]
    fn the_kubeconfig_reads_its_token_from_the_file_the_daemon_renews() {
        let text = kubeconfig("https://192.168.100.1:6443", "Q0E=", DAEMON_TOKEN);
        let parsed: kube::config::Kubeconfig = serde_yaml_ng::from_str(&text).unwrap();
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some(DAEMON_TOKEN));
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://192.168.100.1:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
        assert_eq!(parsed.current_context.as_deref(), Some("daemon"));
    }

    #[test]
    fn only_a_newer_token_replaces_the_one_on_the_host() {
        let host = daemon(2_000);
        assert!(token_outdated(None, &daemon(1_000)));
        assert!(token_outdated(Some("garbage"), &daemon(1_000)));
        assert!(!token_outdated(Some(&host.token), &daemon(1_000)));
        assert!(!token_outdated(Some(&host.token), &daemon(2_000)));
        assert!(token_outdated(Some(&host.token), &daemon(3_000)));
        let other = jwt(serde_json::json!({
            "sub": "system:serviceaccount:unbounded-system:agent-m2", "iat": 9_000, "exp": 9_999
        }));
        assert!(token_outdated(Some(&other), &daemon(1_000)));
    }

    #[test]
    fn files_are_written_once_with_private_modes_and_removed_entirely() {
        let root = tempfile::tempdir().unwrap();
        let mut config =
            crate::validate::validate(&crate::validate::load_value(crate::validate::tests::base()).unwrap())
                .unwrap();
        config.daemon = Some(daemon(1_000));
        let agent = Path::new("/usr/local/bin/unbounded-agent");
        let first = converge(root.path(), &config, agent).unwrap();
        assert_eq!(first.paths.len(), 3, "{first:?}");
        let token_file = root.path().join(DAEMON_TOKEN.trim_start_matches('/'));
        assert_eq!(
            std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            converge(root.path(), &config, agent).unwrap(),
            DaemonChanges::default()
        );
        // A renewed token (issued later) survives a converge with the config's older one.
        let renewed = daemon(5_000).token;
        std::fs::write(&token_file, &renewed).unwrap();
        assert!(converge(root.path(), &config, agent).unwrap().paths.is_empty());
        assert_eq!(std::fs::read_to_string(&token_file).unwrap(), renewed);
        // No `Daemon` section: everything of the daemon's goes.
        config.daemon = None;
        let removed = converge(root.path(), &config, agent).unwrap();
        assert_eq!(
            removed.paths,
            [PathBuf::from(DAEMON_UNIT), PathBuf::from(DAEMON_DIR)]
        );
        assert!(
            host_paths(root.path())
                .iter()
                .all(|p| p.symlink_metadata().is_err())
        );
        assert_eq!(remove(root.path()).unwrap(), DaemonChanges::default());
    }
}
