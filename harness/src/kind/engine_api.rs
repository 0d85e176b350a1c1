//! The container engine's API (Docker's, which Podman serves too) through `bollard`: what the
//! harness reads from the engine — a Kind cluster's node containers with their state, and a
//! container's logs — for `harness lab status`, `harness lab logs` and a failed test's evidence.
//! Kind's own CLI creates and deletes clusters.
//!
//! Docker: its daemon's socket (`DOCKER_HOST` when it names a `unix://` socket, else
//! `/var/run/docker.sock`). Podman has no daemon: [`EngineApi::connect`] starts `podman system
//! service` on a socket of its own, with the lab's `CONTAINERS_CONF`, and stops it when the
//! [`EngineApi`] is dropped.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptionsBuilder, LogsOptionsBuilder};
use futures_util::StreamExt;

use super::engine::EngineKind;

/// The label Kind puts on every node container of a cluster (`=<cluster name>`).
pub const CLUSTER_LABEL: &str = "io.x-k8s.kind.cluster";
/// How long Podman's API service may take to open its socket.
const SERVICE_START: Duration = Duration::from_secs(15);
/// Seconds bollard waits for one answer.
const REQUEST_TIMEOUT_SECS: u64 = 60;

/// Why the engine's API could not be reached or did not answer.
#[derive(Debug, thiserror::Error)]
pub enum EngineApiError {
    #[error("starting `podman system service` on {socket}")]
    StartService {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`podman system service` did not open {socket} within {waited:?}{exited}; its output:\n{output}")]
    ServiceNotListening {
        socket: PathBuf,
        waited: Duration,
        exited: String,
        output: String,
    },
    #[error("a temporary directory for Podman's API socket")]
    TempDir(#[source] std::io::Error),
    #[error("connecting to the {engine} API at {socket}")]
    Connect {
        engine: &'static str,
        socket: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("the {engine} API: {what}")]
    Request {
        engine: &'static str,
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("a thread for the engine's API")]
    Runtime(#[source] std::io::Error),
}

/// A node container as the engine lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeContainer {
    /// Without the leading `/` the API gives names.
    pub name: String,
    /// The engine's word: `running`, `exited`, `created`, ...
    pub state: String,
    /// The engine's longer status (`Up 3 minutes`).
    pub status: String,
}

/// A connection to one engine's API (see the module docs).
pub struct EngineApi {
    engine: EngineKind,
    docker: Docker,
    /// Podman's API service and its socket's directory, for as long as this value lives.
    service: Option<(Child, tempfile::TempDir)>,
}

impl EngineApi {
    /// Connects to `engine`'s API; `env` is the environment the harness gives the engine's CLI
    /// (Podman's `CONTAINERS_CONF`).
    pub fn connect(engine: EngineKind, env: &[(OsString, OsString)]) -> Result<EngineApi, EngineApiError> {
        match engine {
            EngineKind::Docker => {
                let socket = std::env::var("DOCKER_HOST")
                    .ok()
                    .filter(|h| h.starts_with("unix://"))
                    .unwrap_or_else(|| "unix:///var/run/docker.sock".into());
                let docker =
                    Docker::connect_with_unix(&socket, REQUEST_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
                        .map_err(|source| EngineApiError::Connect {
                            engine: "docker",
                            socket,
                            source,
                        })?;
                Ok(EngineApi {
                    engine,
                    docker,
                    service: None,
                })
            }
            EngineKind::Podman => {
                let dir = tempfile::Builder::new()
                    .prefix("lab-podman-api-")
                    .tempdir()
                    .map_err(EngineApiError::TempDir)?;
                let socket = dir.path().join("podman.sock");
                let child = start_podman_service(&socket, env)?;
                let mut service = Some((child, dir));
                wait_for_socket(&socket, service.as_mut().map(|(c, _)| c))?;
                let address = format!("unix://{}", socket.display());
                let docker =
                    Docker::connect_with_unix(&address, REQUEST_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
                        .map_err(|source| EngineApiError::Connect {
                        engine: "podman",
                        socket: address,
                        source,
                    })?;
                Ok(EngineApi {
                    engine,
                    docker,
                    service,
                })
            }
        }
    }

    /// Every container (running or not) labelled as a node of Kind cluster `cluster`, by name.
    pub fn node_containers(&self, cluster: &str) -> Result<Vec<NodeContainer>, EngineApiError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{CLUSTER_LABEL}={cluster}")])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let listed = self
            .block_on(self.docker.list_containers(Some(options)))?
            .map_err(|source| {
                self.request(
                    format!("listing the containers of Kind cluster {cluster}"),
                    source,
                )
            })?;
        let mut nodes: Vec<NodeContainer> = listed
            .into_iter()
            .map(|c| NodeContainer {
                name: c
                    .names
                    .unwrap_or_default()
                    .first()
                    .map(|n| n.trim_start_matches('/').to_string())
                    .unwrap_or_default(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default().to_lowercase(),
                status: c.status.unwrap_or_default(),
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(nodes)
    }

    /// A container's whole log (stdout and stderr as the engine keeps them, with timestamps).
    pub fn logs(&self, container: &str) -> Result<String, EngineApiError> {
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .build();
        let docker = &self.docker;
        let collected = self.block_on(async {
            let mut stream = docker.logs(container, Some(options));
            let mut text = String::new();
            while let Some(item) = stream.next().await {
                text.push_str(&item?.to_string());
            }
            Ok::<_, bollard::errors::Error>(text)
        })?;
        collected.map_err(|source| self.request(format!("the logs of container {container}"), source))
    }

    /// The pid of the API service this connection started (Podman's), if any.
    pub fn service_pid(&self) -> Option<u32> {
        self.service.as_ref().map(|(child, _)| child.id())
    }

    fn request(&self, what: String, source: bollard::errors::Error) -> EngineApiError {
        EngineApiError::Request {
            engine: self.engine.name(),
            what,
            source,
        }
    }

    /// Runs `future` on a runtime of its own in a thread of its own, so callers need not be
    /// async and may already be inside a runtime.
    fn block_on<F: std::future::Future + Send>(&self, future: F) -> Result<F::Output, EngineApiError>
    where
        F::Output: Send,
    {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(EngineApiError::Runtime)?;
                    Ok(runtime.block_on(future))
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}

impl Drop for EngineApi {
    fn drop(&mut self) {
        if let Some((child, _dir)) = &mut self.service {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `podman system service --time=0 unix://<socket>` in the background, with `env`; its output
/// goes to `service.log` beside the socket.
fn start_podman_service(socket: &Path, env: &[(OsString, OsString)]) -> Result<Child, EngineApiError> {
    let log = std::fs::File::create(service_log(socket)).map_err(|source| EngineApiError::StartService {
        socket: socket.to_path_buf(),
        source,
    })?;
    Command::new("podman")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["system", "service", "--time=0"])
        .arg(format!("unix://{}", socket.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().map_err(|source| {
            EngineApiError::StartService {
                socket: socket.to_path_buf(),
                source,
            }
        })?))
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|source| EngineApiError::StartService {
            socket: socket.to_path_buf(),
            source,
        })
}

/// Waits until `socket` exists, or the service exits, or [`SERVICE_START`] passes.
fn wait_for_socket(socket: &Path, mut child: Option<&mut Child>) -> Result<(), EngineApiError> {
    let started = Instant::now();
    loop {
        if socket.exists() {
            return Ok(());
        }
        let exited = child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
            .map(|status| format!(" (it exited with {status})"));
        if exited.is_some() || started.elapsed() >= SERVICE_START {
            return Err(EngineApiError::ServiceNotListening {
                socket: socket.to_path_buf(),
                waited: started.elapsed(),
                exited: exited.unwrap_or_default(),
                output: std::fs::read_to_string(service_log(socket)).unwrap_or_default(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn service_log(socket: &Path) -> PathBuf {
    socket.with_file_name("service.log")
}
