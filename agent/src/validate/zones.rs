//! Validation of a listener's zones (`LocalDNS.NodeListenerOverrides`,
//! `LocalDNS.ClusterListenerOverrides`; docs/configuration.md, "Zones").

use std::collections::BTreeMap;

use super::problems::{Problems, field};
use crate::config::ZoneOverrideConfig;
use crate::corefile::HEALTH_NAME;
use crate::zones::{
    ForwardDestination, ForwardPolicy, Listener, MAX_ZONES, Protocol, QueryLogging, ROOT, ServeStale, Zone,
    ZoneSettings,
};

/// Largest duration a zone accepts, in seconds (one day).
const MAX_SECONDS: i64 = 86_400;
/// Largest `MaxConcurrent`.
const MAX_CONCURRENT: i64 = 100_000;
/// Largest cache capacity.
const MAX_CAPACITY: i64 = 1_000_000;

/// Checks the zones of `listener` (`raw` is its overrides map; `None` → the root zone with the
/// defaults). The root zone is always there; the others are sorted by name after it.
pub fn check(
    raw: Option<&BTreeMap<String, ZoneOverrideConfig>>,
    listener: Listener,
    problems: &mut Problems,
) -> Option<Vec<Zone>> {
    let before = problems.0.len();
    let parent = field("LocalDNS", listener.field());
    let raw = raw.cloned().unwrap_or_default();
    let others = raw.keys().filter(|k| !is_root(k)).count();
    if others > MAX_ZONES {
        problems.push(
            parent.clone(),
            format!("{others} zones besides `.`; at most {MAX_ZONES}"),
        );
    }
    let mut root = None;
    let mut zones: BTreeMap<String, (String, ZoneSettings)> = BTreeMap::new();
    for (key, settings) in &raw {
        let path = field(&parent, key);
        let name = match zone_name(key) {
            Ok(name) => name,
            Err(why) => {
                problems.push(path, why);
                continue;
            }
        };
        let settings = zone_settings(settings, listener, &path, problems);
        if name == ROOT {
            if root.is_some() {
                problems.push(path, "names the root zone `.` a second time");
            }
            root = settings;
        } else if let Some((first, _)) = zones.get(&name) {
            problems.push(
                path,
                format!("names the zone {name:?} again (as {first:?} before)"),
            );
        } else if let Some(settings) = settings {
            zones.insert(name, (key.clone(), settings));
        }
    }
    if problems.0.len() > before {
        return None;
    }
    let mut all = vec![Zone {
        name: ROOT.to_string(),
        settings: root.unwrap_or_else(|| ZoneSettings::defaults(listener)),
    }];
    all.extend(
        zones
            .into_iter()
            .map(|(name, (_, settings))| Zone { name, settings }),
    );
    Some(all)
}

fn is_root(key: &str) -> bool {
    key == ROOT
}

/// A zone's name as the Corefile writes it: `.`, or a domain in lower case without the final dot.
fn zone_name(key: &str) -> Result<String, String> {
    if key == ROOT {
        return Ok(ROOT.to_string());
    }
    let name = key.strip_suffix('.').unwrap_or(key).to_ascii_lowercase();
    if name.is_empty() || name.len() > 253 {
        return Err("is not a zone: `.` or a domain of 1 to 253 characters".into());
    }
    for label in name.split('.') {
        let fine = !label.is_empty()
            && label.len() <= 63
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !fine {
            return Err(format!(
                "is not a zone: label {label:?} must be 1 to 63 letters, digits, `-` or `_`, not starting or ending with `-`"
            ));
        }
    }
    // A zone above it (`local`) is fine: CoreDNS picks the longest zone, so the health block
    // still answers the health name.
    if name == HEALTH_NAME || name.ends_with(&format!(".{HEALTH_NAME}")) {
        return Err(format!(
            "is or lies below {HEALTH_NAME}, the name the supervisor checks both listeners with"
        ));
    }
    Ok(name)
}

/// One zone's settings over the listener's defaults; `None` after a problem.
fn zone_settings(
    raw: &ZoneOverrideConfig,
    listener: Listener,
    path: &str,
    problems: &mut Problems,
) -> Option<ZoneSettings> {
    let before = problems.0.len();
    let mut s = ZoneSettings::defaults(listener);
    let mut p = Check { path, problems };
    p.choice(
        &raw.query_logging,
        "QueryLogging",
        QueryLogging::from_config,
        QueryLogging::CONFIG_VALUES,
        &mut s.query_logging,
    );
    p.choice(
        &raw.protocol,
        "Protocol",
        Protocol::from_config,
        Protocol::CONFIG_VALUES,
        &mut s.protocol,
    );
    p.choice(
        &raw.forward_destination,
        "ForwardDestination",
        ForwardDestination::from_config,
        ForwardDestination::CONFIG_VALUES,
        &mut s.forward_destination,
    );
    p.choice(
        &raw.forward_policy,
        "ForwardPolicy",
        ForwardPolicy::from_config,
        ForwardPolicy::CONFIG_VALUES,
        &mut s.forward_policy,
    );
    p.choice(
        &raw.serve_stale,
        "ServeStale",
        ServeStale::from_config,
        ServeStale::CONFIG_VALUES,
        &mut s.serve_stale,
    );
    p.number(
        raw.max_concurrent,
        "MaxConcurrent",
        1,
        MAX_CONCURRENT,
        &mut s.max_concurrent,
    );
    p.number(
        raw.cache_duration_in_seconds,
        "CacheDurationInSeconds",
        0,
        MAX_SECONDS,
        &mut s.cache_duration_seconds,
    );
    p.number(
        raw.cache_success_capacity,
        "CacheSuccessCapacity",
        1,
        MAX_CAPACITY,
        &mut s.cache_success_capacity,
    );
    p.number(
        raw.cache_denial_capacity,
        "CacheDenialCapacity",
        1,
        MAX_CAPACITY,
        &mut s.cache_denial_capacity,
    );
    p.number(
        raw.serve_stale_duration_in_seconds,
        "ServeStaleDurationInSeconds",
        1,
        MAX_SECONDS,
        &mut s.serve_stale_duration_seconds,
    );
    for (raw_ttl, name, target) in [
        (
            raw.cache_success_ttl_in_seconds,
            "CacheSuccessTTLInSeconds",
            &mut s.cache_success_ttl_seconds,
        ),
        (
            raw.cache_denial_ttl_in_seconds,
            "CacheDenialTTLInSeconds",
            &mut s.cache_denial_ttl_seconds,
        ),
    ] {
        let mut ttl = 0;
        if raw_ttl.is_some() && p.number(raw_ttl, name, 1, MAX_SECONDS, &mut ttl) {
            *target = Some(ttl);
        }
    }
    if problems.0.len() > before {
        return None;
    }
    if s.cache_duration_seconds == 0 {
        let cache_fields = [
            (raw.cache_success_capacity.is_some(), "CacheSuccessCapacity"),
            (
                raw.cache_success_ttl_in_seconds.is_some(),
                "CacheSuccessTTLInSeconds",
            ),
            (raw.cache_denial_capacity.is_some(), "CacheDenialCapacity"),
            (
                raw.cache_denial_ttl_in_seconds.is_some(),
                "CacheDenialTTLInSeconds",
            ),
            (raw.serve_stale.is_some(), "ServeStale"),
            (
                raw.serve_stale_duration_in_seconds.is_some(),
                "ServeStaleDurationInSeconds",
            ),
        ];
        for (_, name) in cache_fields.iter().filter(|(set, _)| *set) {
            problems.push(
                field(path, name),
                "has no effect: CacheDurationInSeconds 0 turns this zone's cache off",
            );
        }
    }
    (problems.0.len() == before).then_some(s)
}

/// Checks the fields of one zone, each problem at `<path>.<field>`.
struct Check<'a> {
    path: &'a str,
    problems: &'a mut Problems,
}

impl Check<'_> {
    /// A setting with a fixed set of values, spelled as the docs write them.
    fn choice<T>(
        &mut self,
        raw: &Option<String>,
        name: &str,
        parse: fn(&str) -> Option<T>,
        values: &[&str],
        target: &mut T,
    ) {
        let Some(s) = raw else { return };
        match parse(s) {
            Some(v) => *target = v,
            None => self.problems.push(
                field(self.path, name),
                format!("{s:?} is not one of {}", values.join(", ")),
            ),
        }
    }

    /// A whole number in `min..=max`; true when it was set and fine.
    fn number(&mut self, raw: Option<i64>, name: &str, min: i64, max: i64, target: &mut u32) -> bool {
        let Some(v) = raw else { return false };
        if (min..=max).contains(&v) {
            *target = v as u32;
            true
        } else {
            self.problems.push(
                field(self.path, name),
                format!("{v} is out of range ({min} to {max})"),
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(json: &str, listener: Listener) -> Result<Vec<Zone>, Vec<String>> {
        let raw: BTreeMap<String, ZoneOverrideConfig> = serde_json::from_str(json).unwrap();
        let mut problems = Problems::default();
        check(Some(&raw), listener, &mut problems)
            .ok_or_else(|| problems.0.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn no_overrides_leave_the_root_zone_with_the_defaults() {
        let mut problems = Problems::default();
        let zones = check(None, Listener::Cluster, &mut problems).unwrap();
        assert_eq!(zones, crate::zones::default_zones(Listener::Cluster));
    }

    #[test]
    fn a_zone_takes_what_it_sets_over_its_listeners_defaults_and_sorts_after_the_root() {
        let zones = zones(
            r#"{"Example.COM.": {"QueryLogging": "Log", "ForwardDestination": "ClusterDNS", "MaxConcurrent": 50},
                ".": {"Protocol": "PreferUDP", "CacheDurationInSeconds": 0, "ForwardPolicy": "Random"}}"#,
            Listener::Node,
        )
        .unwrap();
        assert_eq!(
            zones.iter().map(|z| z.name.as_str()).collect::<Vec<_>>(),
            [".", "example.com"]
        );
        let root = &zones[0].settings;
        assert_eq!(
            (root.protocol, root.forward_policy, root.cache_duration_seconds),
            (Protocol::PreferUdp, ForwardPolicy::Random, 0)
        );
        assert_eq!(root.forward_destination, ForwardDestination::Upstreams);
        let example = &zones[1].settings;
        assert_eq!(
            (
                example.query_logging,
                example.forward_destination,
                example.max_concurrent
            ),
            (QueryLogging::Log, ForwardDestination::ClusterDns, 50)
        );
        assert_eq!(
            example.cache_duration_seconds, 30,
            "unset fields keep the defaults"
        );
    }

    #[test]
    fn every_bad_field_is_named_with_its_zone() {
        let problems = zones(
            r#"{"example.com": {"Protocol": "udp", "MaxConcurrent": 0}, "b.example": {"CacheSuccessTTLInSeconds": 0},
                "bad..zone": {}, "-x.org": {},
                "health-check.localdns.local": {},
                ".": {"CacheDurationInSeconds": 0, "ServeStale": "Immediate"}}"#,
            Listener::Cluster,
        )
        .unwrap_err();
        let p = "LocalDNS.ClusterListenerOverrides";
        for want in [
            format!("{p}.example.com.Protocol: \"udp\" is not one of ForceTCP, PreferUDP"),
            format!("{p}.example.com.MaxConcurrent: 0 is out of range (1 to 100000)"),
            format!("{p}.b.example.CacheSuccessTTLInSeconds: 0 is out of range (1 to 86400)"),
            format!("{p}.bad..zone: is not a zone: label \"\""),
            format!("{p}.-x.org: is not a zone: label \"-x\""),
            format!("{p}.health-check.localdns.local: is or lies below health-check.localdns.local"),
            format!("{p}...ServeStale: has no effect: CacheDurationInSeconds 0"),
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(&want)),
                "no problem starting {want:?} in {problems:#?}"
            );
        }
    }

    #[test]
    fn a_ttl_past_the_caches_duration_and_a_zone_above_the_health_name_are_taken() {
        // CoreDNS's `success`/`denial` TTL overrides the `cache` duration for those answers.
        let zones = zones(
            r#"{"local": {"CacheSuccessTTLInSeconds": 600, "CacheDenialTTLInSeconds": 120}}"#,
            Listener::Node,
        )
        .unwrap();
        assert_eq!(zones[1].name, "local");
        assert_eq!(
            (
                zones[1].settings.cache_success_ttl_seconds,
                zones[1].settings.cache_denial_ttl_seconds
            ),
            (Some(600), Some(120))
        );
    }

    #[test]
    fn a_zone_named_twice_and_too_many_zones_are_refused() {
        let problems = zones(r#"{"example.com": {}, "EXAMPLE.com.": {}}"#, Listener::Node).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.contains("names the zone \"example.com\" again")),
            "{problems:?}"
        );
        let many: BTreeMap<String, ZoneOverrideConfig> = (0..=MAX_ZONES)
            .map(|i| (format!("z{i}.example"), ZoneOverrideConfig::default()))
            .collect();
        let mut problems = Problems::default();
        assert!(check(Some(&many), Listener::Node, &mut problems).is_none());
        assert!(
            problems.to_string().contains("33 zones besides `.`; at most 32"),
            "{problems}"
        );
    }
}
