//! The container engine Kind's node containers run in: Docker where it runs privileged
//! containers, Podman (with Debian's runc and the lab's own `containers.conf`) otherwise.
//!
//! Kind needs privileged containers. On a host whose bounding set lacks `CAP_SYS_RESOURCE`
//! Docker refuses them, and Podman's defaults fail too (its default ulimits are above the
//! host's hard limits, which only `CAP_SYS_RESOURCE` may raise; crun refuses hybrid cgroups).
//! Podman with runc and ulimits at the host's hard limits runs them: that configuration is
//! written to a lab-owned file ([`containers_conf_text`]) handed to Podman and Kind through
//! `CONTAINERS_CONF`, never to `/etc`.
//!
//! [`Engine::detect`] probes each engine with a privileged container of a tiny image it imports
//! (`lab.unbounded.local/engine-probe`, the host's busybox) and says which it took, or why none.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agent::exec::{CommandFailed, run};

/// The environment variable that forces an engine (`docker` or `podman`).
pub const ENGINE_ENV: &str = "LAB_CONTAINER_ENGINE";
/// The image every probe runs: the host's busybox, imported once per engine.
pub const PROBE_IMAGE: &str = "lab.unbounded.local/engine-probe:1";
/// Where the probe image's one program comes from (Debian's `busybox-static`).
const HOST_BUSYBOX: &str = "/bin/busybox";

/// Which engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Docker,
    Podman,
}

impl EngineKind {
    /// The engine's command (`docker`, `podman`), also Kind's provider name.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Docker => "docker",
            EngineKind::Podman => "podman",
        }
    }

    /// The variable that makes Kind put a cluster's nodes in another network than `kind`.
    pub fn network_env(self) -> &'static str {
        match self {
            EngineKind::Docker => "KIND_EXPERIMENTAL_DOCKER_NETWORK",
            EngineKind::Podman => "KIND_EXPERIMENTAL_PODMAN_NETWORK",
        }
    }

    fn parse(text: &str) -> Option<EngineKind> {
        match text {
            "docker" => Some(EngineKind::Docker),
            "podman" => Some(EngineKind::Podman),
            _ => None,
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why no engine can run Kind's node containers.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{ENGINE_ENV}={0:?} is neither docker nor podman")]
    BadChoice(String),
    #[error(
        "no container engine runs privileged containers here, which Kind's nodes need:\n{}\n\
         fix: start Docker (with privileged containers allowed) or install Podman and runc \
         (scripts/setup.sh does: apt-get install podman runc)",
        .0.iter().map(|(kind, why)| format!("  {kind}: {why}")).collect::<Vec<_>>().join("\n")
    )]
    NoneWorks(Vec<(EngineKind, String)>),
    #[error("{kind} was chosen by {ENGINE_ENV} but cannot run Kind's nodes: {why}")]
    ChosenFails { kind: EngineKind, why: String },
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// An engine that runs privileged containers, with the environment its CLI and Kind need.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Engine {
    pub kind: EngineKind,
    /// Podman: the lab's `containers.conf` (runc, ulimits); Docker: none.
    pub containers_conf: Option<PathBuf>,
}

impl Engine {
    /// The first engine that runs a privileged container here: the one `LAB_CONTAINER_ENGINE`
    /// names, else Docker, else Podman. Podman's configuration is written to
    /// `<conf_dir>/containers.conf` first (idempotently).
    pub fn detect(conf_dir: &Path) -> Result<Engine, EngineError> {
        let choice = std::env::var(ENGINE_ENV).ok().filter(|c| !c.is_empty());
        Engine::detect_among(choice.as_deref(), conf_dir)
    }

    /// [`Engine::detect`] with the choice given: `Some("docker" | "podman")` takes only that one.
    pub fn detect_among(choice: Option<&str>, conf_dir: &Path) -> Result<Engine, EngineError> {
        let forced = match choice {
            Some(text) => Some(EngineKind::parse(text).ok_or(EngineError::BadChoice(text.into()))?),
            None => None,
        };
        let candidates = match forced {
            Some(kind) => vec![kind],
            None => vec![EngineKind::Docker, EngineKind::Podman],
        };
        let mut refusals = Vec::new();
        for kind in candidates {
            let engine = Engine::configure(kind, conf_dir)?;
            match engine.probe() {
                Ok(()) => return Ok(engine),
                Err(why) if forced.is_some() => return Err(EngineError::ChosenFails { kind, why }),
                Err(why) => refusals.push((kind, why)),
            }
        }
        Err(EngineError::NoneWorks(refusals))
    }

    /// `kind` with its configuration written (Podman's `containers.conf`), not probed.
    pub fn configure(kind: EngineKind, conf_dir: &Path) -> Result<Engine, EngineError> {
        let containers_conf = match kind {
            EngineKind::Docker => None,
            EngineKind::Podman => Some(write_containers_conf(conf_dir, &HostLimits::read())?),
        };
        Ok(Engine {
            kind,
            containers_conf,
        })
    }

    /// The engine's CLI with its environment.
    pub fn command(&self) -> Command {
        let mut command = Command::new(self.kind.name());
        command.envs(self.env());
        command
    }

    /// What `kind` (and the engine's CLI) need in their environment: the provider, and Podman's
    /// `CONTAINERS_CONF`.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        let mut env = vec![("KIND_EXPERIMENTAL_PROVIDER".into(), self.kind.name().into())];
        if let Some(conf) = &self.containers_conf {
            env.push(("CONTAINERS_CONF".into(), conf.into()));
        }
        env
    }

    /// One line for the user: which engine, and how it is configured.
    pub fn describe(&self) -> String {
        match &self.containers_conf {
            None => format!("container engine: {} (privileged containers work)", self.kind),
            Some(conf) => format!(
                "container engine: {} with runc (CONTAINERS_CONF={}; privileged containers work)",
                self.kind,
                conf.display()
            ),
        }
    }

    /// Runs a privileged container of [`PROBE_IMAGE`] (imported first when missing); the
    /// reason, in one line, when the engine cannot.
    pub fn probe(&self) -> Result<(), String> {
        let version = run(self
            .command()
            .args(["version", "--format", "{{.Server.Version}}"]))
        .map_err(|e| first_line_of(&e))?;
        if version.stdout.is_empty() {
            return Err(format!("`{} version` names no server", self.kind));
        }
        self.ensure_probe_image().map_err(|e| first_line_of(&e))?;
        let out = run(self.command().args([
            "run",
            "--rm",
            "--privileged",
            "--network",
            "none",
            PROBE_IMAGE,
            "/bin/busybox",
            "echo",
            "privileged",
        ]))
        .map_err(|e| format!("a privileged container fails: {}", first_line_of(&e)))?;
        match String::from_utf8_lossy(&out.stdout).trim() {
            "privileged" => Ok(()),
            other => Err(format!(
                "a privileged container printed {other:?}, not \"privileged\""
            )),
        }
    }

    /// Imports [`PROBE_IMAGE`] from the host's busybox unless the engine has it.
    fn ensure_probe_image(&self) -> Result<(), CommandFailed> {
        let exists = self
            .command()
            .args(["image", "inspect", PROBE_IMAGE])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if exists {
            return Ok(());
        }
        let tarball = probe_rootfs_tarball().map_err(|source| CommandFailed::Spawn {
            command: format!("packing {HOST_BUSYBOX} as the probe image's rootfs"),
            source,
        })?;
        run(self
            .command()
            .args(["import", "--change", "CMD [\"/bin/busybox\", \"true\"]"])
            .arg(tarball.path())
            .arg(PROBE_IMAGE))?;
        Ok(())
    }
}

/// The host's hard limits the node containers' ulimits stay within: the engine's runtime may
/// lower a limit but, without `CAP_SYS_RESOURCE`, not raise it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLimits {
    /// The hard `RLIMIT_NOFILE` of this process.
    pub nofile: u64,
    /// The hard `RLIMIT_NPROC` of this process, at most the kernel's `pid_max` (a higher one is
    /// refused here too).
    pub nproc: u64,
}

impl HostLimits {
    /// This process's hard limits.
    pub fn read() -> HostLimits {
        use nix::sys::resource::{Resource, getrlimit};
        let hard = |r| getrlimit(r).map_or(1024, |(_, hard)| hard);
        let pid_max = fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(32768);
        HostLimits {
            nofile: hard(Resource::RLIMIT_NOFILE).min(1 << 20),
            nproc: hard(Resource::RLIMIT_NPROC).min(pid_max),
        }
    }
}

/// The lab's Podman configuration: runc (crun refuses hybrid cgroups) and ulimits at the host's
/// hard limits.
pub fn containers_conf_text(limits: &HostLimits) -> String {
    format!(
        "# Written by the lab's harness (harness::kind::engine): Podman for Kind's node containers.\n\
         [containers]\n\
         default_ulimits = [\"nofile={n}:{n}\", \"nproc={p}:{p}\"]\n\
         \n\
         [engine]\n\
         runtime = \"runc\"\n",
        n = limits.nofile,
        p = limits.nproc,
    )
}

/// Writes `<dir>/containers.conf` unless it already says the same; returns its path.
fn write_containers_conf(dir: &Path, limits: &HostLimits) -> Result<PathBuf, EngineError> {
    let path = dir.join("containers.conf");
    let text = containers_conf_text(limits);
    if fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(path);
    }
    fs::create_dir_all(dir).map_err(|source| EngineError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let tmp = dir.join("containers.conf.tmp");
    fs::write(&tmp, &text).map_err(|source| EngineError::Write {
        path: tmp.clone(),
        source,
    })?;
    fs::rename(&tmp, &path).map_err(|source| EngineError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// A tarball of the probe image's rootfs: `/bin/busybox` from the host.
fn probe_rootfs_tarball() -> std::io::Result<tempfile::NamedTempFile> {
    let file = tempfile::Builder::new()
        .prefix("engine-probe")
        .suffix(".tar")
        .tempfile()?;
    let mut builder = tar::Builder::new(file.reopen()?);
    builder.append_path_with_name(HOST_BUSYBOX, "bin/busybox")?;
    builder.into_inner()?.sync_all()?;
    Ok(file)
}

/// The first line of a failed command's stderr (or the error itself), for one-line reasons.
fn first_line_of(err: &CommandFailed) -> String {
    let line = err.stderr().lines().rev().find(|l| !l.trim().is_empty());
    match line {
        Some(line) => format!("`{}`: {}", err.command(), line.trim()),
        None => err.to_string().lines().next().unwrap_or_default().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_conf_takes_runc_and_the_hosts_hard_limits() {
        let text = containers_conf_text(&HostLimits {
            nofile: 20000,
            nproc: 32768,
        });
        let conf: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(conf["engine"]["runtime"].as_str(), Some("runc"));
        let ulimits: Vec<&str> = conf["containers"]["default_ulimits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(ulimits, ["nofile=20000:20000", "nproc=32768:32768"]);
    }

    #[test]
    fn host_limits_stay_within_pid_max_and_the_hard_limits() {
        let limits = HostLimits::read();
        let pid_max: u64 = fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(limits.nproc <= pid_max, "{limits:?}");
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert!(limits.nofile <= hard, "{limits:?}");
    }

    #[test]
    fn the_conf_is_written_once_and_kept_when_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let limits = HostLimits {
            nofile: 1024,
            nproc: 1000,
        };
        let path = write_containers_conf(dir.path(), &limits).unwrap();
        let before = fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write_containers_conf(dir.path(), &limits).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), before);
        assert_eq!(fs::read_to_string(&path).unwrap(), containers_conf_text(&limits));
    }

    #[test]
    fn a_docker_engine_needs_no_conf_and_tells_kind_its_provider() {
        let dir = tempfile::tempdir().unwrap();
        let docker = Engine::configure(EngineKind::Docker, dir.path()).unwrap();
        assert!(docker.containers_conf.is_none());
        assert_eq!(
            docker.env(),
            vec![(
                OsString::from("KIND_EXPERIMENTAL_PROVIDER"),
                OsString::from("docker")
            )]
        );
        let podman = Engine::configure(EngineKind::Podman, dir.path()).unwrap();
        assert_eq!(podman.containers_conf, Some(dir.path().join("containers.conf")));
        assert!(
            podman.describe().contains("podman with runc"),
            "{}",
            podman.describe()
        );
    }
}
