//! What a validated config asks of the CoreDNS artifact: its download source, the offline bundle
//! and the plugins it must have ([`crate::artifact::coredns::Request`]).

use super::Config;
use crate::artifact::coredns::Request;
use crate::artifact::plugins;
use crate::config::DownloadSource;

impl Config {
    /// The CoreDNS request of this config (online source, offline bundle, required plugins).
    pub fn coredns_request(&self) -> Request {
        let source = &self.downloads.core_dns;
        let configured: Vec<String> = self
            .local_dns
            .iter()
            .flat_map(|l| l.required_plugins.iter().map(|p| p.as_str().to_string()))
            .collect();
        Request {
            download: DownloadSource {
                url: source.url.clone(),
                base_url: source.base_url.clone(),
                version: source.version.as_ref().map(|v| v.as_str().to_string()),
            },
            offline_source: self.offline_source.clone(),
            required_plugins: plugins::required_plugins(&configured),
        }
    }
}
