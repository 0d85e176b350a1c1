//! Preflight check `localdns-artifact`: the CoreDNS artifact can be had —
//! online its `.sha256` sidecar answers, offline the bundle holds the binary
//! and its sidecar — without downloading the binary itself.

use std::time::Duration;

use super::{Context, Finding, Severity};
use crate::artifact::coredns::{self, Request};
use crate::artifact::{FetchOptions, Fetcher};

pub const NAME: &str = "localdns-artifact";

/// Retries and timeouts of the probe: short, a preflight must answer quickly.
pub fn probe_options() -> FetchOptions {
    FetchOptions {
        attempts: 2,
        initial_backoff: Duration::from_millis(500),
        connect_timeout: Duration::from_secs(5),
        timeout: Duration::from_secs(15),
        ..FetchOptions::default()
    }
}

pub fn run(ctx: &Context) -> Vec<Finding> {
    let Some(config) = ctx.valid_config() else {
        return Vec::new();
    };
    if config.local_dns.is_none() {
        return vec![Finding::new(NAME, "", Severity::Ok, "LocalDNS is disabled")];
    }
    vec![check(&config.coredns_request(), &Fetcher::new(probe_options()))]
}

/// The finding for one request: ok naming what answered, or an error saying why not.
pub fn check(request: &Request, fetcher: &Fetcher) -> Finding {
    let mode = if request.offline_source.is_some() {
        "offline bundle"
    } else {
        "online"
    };
    match coredns::probe(request, fetcher) {
        Ok(resolved) => Finding::new(
            NAME,
            resolved.location.to_string(),
            Severity::Ok,
            format!(
                "CoreDNS {} is available ({mode}, sha256 sidecar present)",
                resolved.version
            ),
        ),
        Err(err) => {
            let target = request
                .resolve(crate::artifact::source::host_arch().unwrap_or("amd64"))
                .map(|r| r.location.to_string())
                .unwrap_or_else(|_| request.offline_source.clone().unwrap_or_default());
            Finding::new(
                NAME,
                target,
                Severity::Error,
                format!("CoreDNS artifact is not available ({mode}): {err}"),
            )
        }
    }
}
