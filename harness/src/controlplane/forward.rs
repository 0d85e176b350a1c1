//! The API server on a host loopback port: a TCP forwarder from `127.0.0.1:<port>` (in the
//! host namespace) to the API server inside the lab namespace, run by a thread of this
//! process. The listener is bound before the thread enters the lab namespace (`setns`), so
//! it stays in the host namespace while every connection it opens is in the lab's.
//! Stopping joins the thread, so nothing of it is left in the namespace.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use super::error::{ControlPlaneError, io_err};
use crate::lab::netns;

/// The running forwarder; [`Forwarder::stop`] (or drop) stops it.
pub struct Forwarder {
    local: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Binds `127.0.0.1:preferred`, or any free port when that one is taken.
fn bind_loopback(preferred: u16) -> Result<TcpListener, ControlPlaneError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, preferred))
        .or_else(|err| {
            tracing::info!(%err, port = preferred, "the preferred API server port is taken; using a free one");
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        })
        .map_err(ControlPlaneError::Forwarder)
}

impl Forwarder {
    /// Forwards `127.0.0.1:preferred_port` (or a free port) to `target` inside `netns`.
    pub fn start(
        netns: &str,
        preferred_port: u16,
        target: SocketAddr,
    ) -> Result<Forwarder, ControlPlaneError> {
        let listener = bind_loopback(preferred_port)?;
        listener
            .set_nonblocking(true)
            .map_err(ControlPlaneError::Forwarder)?;
        let local = listener.local_addr().map_err(ControlPlaneError::Forwarder)?;
        let ns_path = netns::netns_path(netns);
        let ns_file = File::open(&ns_path).map_err(io_err("opening the network namespace", &ns_path))?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name(format!("{netns}-apiserver-forward"))
            .spawn(move || {
                if let Err(err) = nix::sched::setns(&ns_file, nix::sched::CloneFlags::CLONE_NEWNET) {
                    let _ = ready_tx.send(Err(format!("setns: {err}")));
                    return;
                }
                drop(ns_file);
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = ready_tx.send(Err(format!("a Tokio runtime: {err}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(err) => {
                            let _ = ready_tx.send(Err(format!("registering the listener: {err}")));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = accept_loop(listener, target) => {}
                    }
                });
                // Dropping the runtime drops every connection's task and closes its sockets.
            })
            .map_err(io_err("starting the forwarder thread for", &ns_path))?;
        let mut forwarder = Forwarder {
            local,
            stop: Some(stop_tx),
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(forwarder),
            Ok(Err(message)) => {
                forwarder.stop();
                Err(ControlPlaneError::Netns {
                    netns: netns.to_string(),
                    message,
                })
            }
            Err(_) => {
                forwarder.stop();
                Err(ControlPlaneError::Netns {
                    netns: netns.to_string(),
                    message: "the forwarder thread died while starting".into(),
                })
            }
        }
    }

    /// `127.0.0.1:<port>` in the host namespace.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops forwarding, closes every connection and joins the thread (idempotent).
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the API server forwarder thread panicked");
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, target: SocketAddr) {
    loop {
        let (mut inbound, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(%err, "API server forwarder: accept failed");
                continue;
            }
        };
        tokio::spawn(async move {
            match tokio::net::TcpStream::connect(target).await {
                Ok(mut outbound) => {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                Err(err) => tracing::debug!(%err, %from, %target, "API server forwarder: connect failed"),
            }
        });
    }
}
