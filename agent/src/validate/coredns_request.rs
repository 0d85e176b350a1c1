//! What a validated config asks of the CoreDNS artifact: its download source, the offline bundle
//! and the plugins it must have ([`crate::artifact::coredns::Request`]).

use super::Config;
use crate::artifact::coredns::Request;
use crate::artifact::plugins;

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
            download: source.download(),
            offline_source: self.offline_source.clone(),
            required_plugins: plugins::required_plugins(&configured),
        }
    }
}
