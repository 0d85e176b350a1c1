//! The supervisor's metrics endpoint: `GET /metrics` on the metrics address
//! (`LOCALDNS_METRICS_ADDRESS`) answers CoreDNS's own series, fetched from its `prometheus`
//! endpoint on loopback (`LOCALDNS_COREDNS_METRICS_ADDRESS`), followed by the supervisor's
//! ([`super::tally`]). One endpoint per node, which answers while CoreDNS is down too (then with
//! the supervisor's series alone and `localdns_supervisor_coredns_metrics_up 0`). Bound with
//! `SO_REUSEPORT`, so a restart's bridge supervisor serves beside it; a bind that fails is tried
//! again every few seconds.

use std::convert::Infallible;
use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket};

use super::Settings;
use super::tally::{SharedTally, Snapshot, upstreams_in};

/// How long CoreDNS's endpoint may take to answer a scrape.
const COREDNS_TIMEOUT: Duration = Duration::from_secs(2);
/// The most of CoreDNS's series that is read (a few hundred lines in practice).
const COREDNS_BODY_LIMIT: usize = 8 << 20;
/// The pause before a failed bind is tried again.
const BIND_RETRY: Duration = Duration::from_secs(5);
/// The pause after a failed accept.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// The text format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the endpoint from a task of its own, when the settings name a metrics address.
pub fn spawn(settings: &Settings, tally: SharedTally) {
    let Some(address) = settings.metrics_address else {
        return;
    };
    let settings = settings.clone();
    tokio::spawn(async move {
        let listener = loop {
            match bind(address) {
                Ok(listener) => break listener,
                Err(err) => {
                    tracing::warn!(%err, %address, "cannot serve metrics; trying again in {BIND_RETRY:?}");
                    tokio::time::sleep(BIND_RETRY).await;
                }
            }
        };
        tracing::info!(%address, coredns = ?settings.coredns_metrics_address, "serving metrics");
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // Out of descriptors, say: not a loop that takes the supervisor's thread.
                    tracing::debug!(%err, "accepting a metrics connection");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            };
            let (settings, tally) = (settings.clone(), tally.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let (settings, tally) = (settings.clone(), tally.clone());
                    async move { Ok::<_, Infallible>(answer(request, &settings, &tally).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

fn bind(address: SocketAddrV4) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(SocketAddr::V4(address))?;
    socket.listen(64)
}

async fn answer(
    request: Request<Incoming>,
    settings: &Settings,
    tally: &SharedTally,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET || request.uri().path() != "/metrics" {
        let mut response = Response::new(Full::new(Bytes::from_static(b"only GET /metrics here\n")));
        *response.status_mut() = StatusCode::NOT_FOUND;
        return response;
    }
    let coredns = match settings.coredns_metrics_address {
        Some(at) => match coredns_series(at).await {
            Ok(text) => Some(text),
            Err(err) => {
                tracing::debug!(%err, "CoreDNS's metrics did not answer");
                None
            }
        },
        None => None,
    };
    let tally = tally.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let corefile = std::fs::read_to_string(&tally.serving).unwrap_or_default();
    let snapshot = Snapshot {
        upstreams: upstreams_in(
            &corefile,
            [
                ("node", settings.node_listener),
                ("cluster", settings.cluster_listener),
            ],
        ),
        fallback: settings.fallback_corefile.as_ref() == Some(&tally.serving),
        degraded: super::notify::degraded().is_some(),
        coredns_metrics_up: coredns.is_some(),
        tally,
    };
    let mut body = coredns.unwrap_or_default();
    if !body.is_empty() && !body.ends_with('\n') {
        body.push('\n');
    }
    body.push_str(&snapshot.to_text());
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(TEXT_FORMAT),
    );
    response
}

/// CoreDNS's own series from its endpoint at `at`.
async fn coredns_series(at: SocketAddrV4) -> Result<String, String> {
    let body = tokio::time::timeout(
        COREDNS_TIMEOUT,
        super::probe::get_ok(at, "/metrics", COREDNS_BODY_LIMIT),
    )
    .await
    .map_err(|_| format!("no answer within {COREDNS_TIMEOUT:?}"))??;
    Ok(String::from_utf8_lossy(&body).into_owned())
}
