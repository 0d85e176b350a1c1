//! Runs the lab's services (upstream DNS, artifact HTTP) in this process.
//!
//! Their sockets are bound by a thread that entered the lab's namespace
//! (`setns`), so they listen on the bridge address inside it; a dedicated
//! thread with its own Tokio runtime serves them, whatever runtime (if any)
//! the caller uses. Stopping joins that thread, which closes every socket, so
//! nothing of this process keeps the namespace alive afterwards.

use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use super::dns::DnsControl;
use super::error::LabError;
use super::{dns_server, http};
use crate::addresses::LabAddrs;
use crate::netns;

/// The running services; [`Services::stop`] (or drop) stops them.
pub struct Services {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

enum Kind {
    Udp,
    Tcp,
}

enum Bound {
    Udp(std::net::UdpSocket),
    Tcp(std::net::TcpListener),
}

fn bind_in(ns: &str, service: &'static str, addr: SocketAddr, kind: Kind) -> Result<Bound, LabError> {
    let bound = netns::in_netns(ns, move || match kind {
        Kind::Udp => {
            let socket = std::net::UdpSocket::bind(addr)?;
            socket.set_nonblocking(true)?;
            Ok(Bound::Udp(socket))
        }
        Kind::Tcp => {
            let listener = std::net::TcpListener::bind(addr)?;
            listener.set_nonblocking(true)?;
            Ok(Bound::Tcp(listener))
        }
    })?;
    bound.map_err(|source| LabError::Bind {
        service,
        addr,
        netns: ns.to_string(),
        source,
    })
}

impl Services {
    /// Binds the DNS server (UDP and TCP, on the upstream and the second upstream address) and the
    /// artifact server inside the
    /// lab's namespace and starts serving them.
    pub fn start(addrs: &LabAddrs, dns: DnsControl, http: http::HttpControl) -> Result<Services, LabError> {
        let ns = addrs.netns();
        let Bound::Udp(dns_udp) = bind_in(&ns, "DNS server (UDP)", addrs.dns(), Kind::Udp)? else {
            unreachable!("asked for UDP")
        };
        let Bound::Tcp(dns_tcp) = bind_in(&ns, "DNS server (TCP)", addrs.dns(), Kind::Tcp)? else {
            unreachable!("asked for TCP")
        };
        let Bound::Udp(second_udp) = bind_in(&ns, "second DNS server (UDP)", addrs.second_dns(), Kind::Udp)?
        else {
            unreachable!("asked for UDP")
        };
        let Bound::Tcp(second_tcp) = bind_in(&ns, "second DNS server (TCP)", addrs.second_dns(), Kind::Tcp)?
        else {
            unreachable!("asked for TCP")
        };
        let Bound::Tcp(http_tcp) = bind_in(&ns, "artifact HTTP server", addrs.http(), Kind::Tcp)? else {
            unreachable!("asked for TCP")
        };
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let thread = std::thread::Builder::new()
            .name(format!("{ns}-services"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = ready_tx.send(Err(format!("cannot build a Tokio runtime: {err}")));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let sockets = (|| {
                        Ok::<_, std::io::Error>((
                            [
                                tokio::net::UdpSocket::from_std(dns_udp)?,
                                tokio::net::UdpSocket::from_std(second_udp)?,
                            ],
                            [
                                tokio::net::TcpListener::from_std(dns_tcp)?,
                                tokio::net::TcpListener::from_std(second_tcp)?,
                            ],
                            tokio::net::TcpListener::from_std(http_tcp)?,
                        ))
                    })();
                    let (dns_udp, dns_tcp, http_tcp) = match sockets {
                        Ok(sockets) => sockets,
                        Err(err) => {
                            let _ = ready_tx.send(Err(format!("cannot register the sockets: {err}")));
                            return;
                        }
                    };
                    let mut tasks = vec![tokio::spawn(http::serve(http_tcp, http))];
                    for socket in dns_udp {
                        tasks.push(tokio::spawn(dns_server::serve_udp(socket, dns.clone())));
                    }
                    for listener in dns_tcp {
                        tasks.push(tokio::spawn(dns_server::serve_tcp(listener, dns.clone())));
                    }
                    let _ = ready_tx.send(Ok(()));
                    let _ = stop_rx.await;
                    for task in tasks {
                        task.abort();
                    }
                });
                // Dropping the runtime drops every task and closes every socket.
            })
            .map_err(|e| LabError::Services(format!("cannot start the service thread: {e}")))?;
        let mut services = Services {
            stop: Some(stop_tx),
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(services),
            Ok(Err(message)) => {
                services.stop();
                Err(LabError::Services(message))
            }
            Err(_) => {
                services.stop();
                Err(LabError::Services(
                    "the service thread died while starting".into(),
                ))
            }
        }
    }

    /// Stops serving and closes every socket (idempotent).
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the lab's service thread panicked");
        }
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        self.stop();
    }
}
