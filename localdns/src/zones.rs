//! The zones of a LocalDNS listener (`NodeListenerOverrides`, `ClusterListenerOverrides`): each
//! zone's checked settings, the listener's defaults, and the block a Corefile template renders
//! for each (`node_zones`, `cluster_zones`; docs/configuration.md, "Zones").

use serde::Serialize;

/// The root zone, which every listener serves.
pub const ROOT: &str = ".";
/// Most zones a listener may have besides the root zone (keeps the Corefile small).
pub const MAX_ZONES: usize = 32;

/// Which listener a zone belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    Node,
    Cluster,
}

impl Listener {
    /// The config field that holds the listener's zones.
    pub fn field(self) -> &'static str {
        match self {
            Listener::Node => "NodeListenerOverrides",
            Listener::Cluster => "ClusterListenerOverrides",
        }
    }
}

/// Declares a setting with a fixed set of values: its config spelling and its Corefile spelling.
macro_rules! choice {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $config:literal => $corefile:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every value as the config spells it, for error messages.
            pub const CONFIG_VALUES: &'static [&'static str] = &[$($config),+];

            /// The value the config spells `s` (exactly, as the docs write it).
            pub fn from_config(s: &str) -> Option<Self> {
                match s {
                    $($config => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// How the Corefile spells it.
            pub fn corefile(self) -> &'static str {
                match self { $($name::$variant => $corefile),+ }
            }
        }
    };
}

choice!(
    /// `QueryLogging`: `Log` adds CoreDNS's `log` plugin (a line per query) beside `errors`.
    QueryLogging { Error = "Error" => "errors", Log = "Log" => "log" }
);
choice!(
    /// `Protocol`: how CoreDNS asks the zone's servers.
    Protocol { ForceTcp = "ForceTCP" => "force_tcp", PreferUdp = "PreferUDP" => "prefer_udp" }
);
choice!(
    /// `ForwardDestination`: the node's upstream resolvers or the cluster's DNS service.
    ForwardDestination { Upstreams = "Upstreams" => "upstreams", ClusterDns = "ClusterDNS" => "cluster_dns" }
);
choice!(
    /// `ForwardPolicy`: the order in which the zone's servers are asked.
    ForwardPolicy {
        Sequential = "Sequential" => "sequential",
        RoundRobin = "RoundRobin" => "round_robin",
        Random = "Random" => "random",
    }
);
choice!(
    /// `ServeStale`: whether expired answers are served, and whether they are checked first.
    ServeStale { Verify = "Verify" => "verify", Immediate = "Immediate" => "immediate", Disable = "Disable" => "" }
);

/// One zone's settings, every field decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSettings {
    pub query_logging: QueryLogging,
    pub protocol: Protocol,
    pub forward_destination: ForwardDestination,
    pub forward_policy: ForwardPolicy,
    pub max_concurrent: u32,
    /// 0: no cache.
    pub cache_duration_seconds: u32,
    pub cache_success_capacity: u32,
    pub cache_success_ttl_seconds: Option<u32>,
    pub cache_denial_capacity: u32,
    pub cache_denial_ttl_seconds: Option<u32>,
    pub serve_stale: ServeStale,
    pub serve_stale_duration_seconds: u32,
}

impl ZoneSettings {
    /// What a zone of `listener` has when nothing is set: the built-in Corefile's values, each
    /// listener forwarding where it always did (node → upstreams, cluster → cluster DNS).
    pub fn defaults(listener: Listener) -> Self {
        ZoneSettings {
            query_logging: QueryLogging::Error,
            protocol: Protocol::ForceTcp,
            forward_destination: match listener {
                Listener::Node => ForwardDestination::Upstreams,
                Listener::Cluster => ForwardDestination::ClusterDns,
            },
            forward_policy: ForwardPolicy::Sequential,
            max_concurrent: 1000,
            cache_duration_seconds: 30,
            cache_success_capacity: 9984,
            cache_success_ttl_seconds: None,
            cache_denial_capacity: 9984,
            cache_denial_ttl_seconds: None,
            serve_stale: ServeStale::Verify,
            serve_stale_duration_seconds: 3600,
        }
    }
}

/// A zone of a listener: its name (`.` or a lower-case domain without the final dot) and settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub name: String,
    pub settings: ZoneSettings,
}

/// The zones of a listener when nothing is set: the root zone with the defaults.
pub fn default_zones(listener: Listener) -> Vec<Zone> {
    vec![Zone {
        name: ROOT.to_string(),
        settings: ZoneSettings::defaults(listener),
    }]
}

/// What a Corefile template gets for one zone (`{% for zone in node_zones %}`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ZoneBlock {
    /// The server block's zone: `.` or a domain.
    pub name: String,
    /// `true`: the block has `log` beside `errors`.
    pub log: bool,
    /// The servers `forward . …` asks.
    pub forward_to: Vec<String>,
    /// `force_tcp` or `prefer_udp`.
    pub protocol: &'static str,
    /// `sequential`, `round_robin` or `random`.
    pub policy: &'static str,
    pub max_concurrent: u32,
    /// `None`: no `cache` plugin.
    pub cache: Option<CacheBlock>,
}

/// The `cache` plugin's values of a zone.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CacheBlock {
    pub ttl: u32,
    /// `CAPACITY [TTL]` of `success`.
    pub success: String,
    /// `CAPACITY [TTL]` of `denial`.
    pub denial: String,
    /// `DURATION MODE` of `serve_stale` (`3600s verify`); `None`: no serving stale.
    pub serve_stale: Option<String>,
}

impl Zone {
    /// The zone's block, its forward destination resolved to `upstreams` or `cluster_dns`.
    pub fn block(&self, upstreams: &[String], cluster_dns: &str) -> ZoneBlock {
        let s = &self.settings;
        let capacity_and_ttl = |capacity: u32, ttl: Option<u32>| match ttl {
            Some(ttl) => format!("{capacity} {ttl}"),
            None => capacity.to_string(),
        };
        ZoneBlock {
            name: self.name.clone(),
            log: s.query_logging == QueryLogging::Log,
            forward_to: match s.forward_destination {
                ForwardDestination::Upstreams => upstreams.to_vec(),
                ForwardDestination::ClusterDns => vec![cluster_dns.to_string()],
            },
            protocol: s.protocol.corefile(),
            policy: s.forward_policy.corefile(),
            max_concurrent: s.max_concurrent,
            cache: (s.cache_duration_seconds > 0).then(|| CacheBlock {
                ttl: s.cache_duration_seconds,
                success: capacity_and_ttl(s.cache_success_capacity, s.cache_success_ttl_seconds),
                denial: capacity_and_ttl(s.cache_denial_capacity, s.cache_denial_ttl_seconds),
                serve_stale: (s.serve_stale != ServeStale::Disable)
                    .then(|| format!("{}s {}", s.serve_stale_duration_seconds, s.serve_stale.corefile())),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_root_zone_is_the_built_in_corefiles_block() {
        let zone = &default_zones(Listener::Node)[0];
        let block = zone.block(&["192.0.2.53".into()], "10.96.0.10");
        assert_eq!(block.name, ".");
        assert_eq!(block.forward_to, ["192.0.2.53"]);
        assert_eq!(
            (block.protocol, block.policy, block.max_concurrent),
            ("force_tcp", "sequential", 1000)
        );
        let cache = block.cache.expect("the default zone caches");
        assert_eq!(
            (cache.ttl, cache.success.as_str(), cache.denial.as_str()),
            (30, "9984", "9984")
        );
        assert_eq!(cache.serve_stale.as_deref(), Some("3600s verify"));
        let cluster = &default_zones(Listener::Cluster)[0];
        assert_eq!(
            cluster.block(&["192.0.2.53".into()], "10.96.0.10").forward_to,
            ["10.96.0.10"]
        );
    }

    #[test]
    fn choices_read_only_their_documented_spelling() {
        assert_eq!(Protocol::from_config("PreferUDP"), Some(Protocol::PreferUdp));
        assert_eq!(Protocol::from_config("preferudp"), None);
        assert_eq!(
            ForwardPolicy::from_config("RoundRobin").map(ForwardPolicy::corefile),
            Some("round_robin")
        );
        assert_eq!(ServeStale::CONFIG_VALUES, ["Verify", "Immediate", "Disable"]);
    }

    #[test]
    fn a_zone_without_cache_or_stale_answers_says_so_in_its_block() {
        let mut zone = default_zones(Listener::Node).remove(0);
        zone.settings.serve_stale = ServeStale::Disable;
        zone.settings.cache_success_ttl_seconds = Some(60);
        let cache = zone.block(&[], "10.96.0.10").cache.unwrap();
        assert_eq!((cache.success.as_str(), cache.serve_stale), ("9984 60", None));
        zone.settings.cache_duration_seconds = 0;
        assert_eq!(zone.block(&[], "10.96.0.10").cache, None);
    }
}
