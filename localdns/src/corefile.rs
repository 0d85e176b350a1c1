//! The Corefile's template language and checks: the built-in template or `CorefileTemplate`,
//! rendered with minijinja (strict undefined variables), and the checks every rendered Corefile
//! passes (docs/design.md §5). It knows no goal: validation checks a template with sample values,
//! `render::corefile` renders it with a goal's.

use std::net::{IpAddr, Ipv4Addr};

use minijinja::{Environment, UndefinedBehavior, syntax::SyntaxConfig};
use serde::Serialize;

use crate::zones::{Listener, ZoneBlock, default_zones};

/// The built-in Corefile template.
pub const BUILTIN_TEMPLATE: &str = include_str!("Corefile.j2");
/// The fallback's template: what the supervisor serves when CoreDNS refuses the Corefile (both
/// listeners forwarding, nothing else; docs/localdns.md, "The fallback").
pub const FALLBACK_TEMPLATE: &str = include_str!("Corefile.fallback.j2");
/// The name the supervisor queries to check both listeners.
pub const HEALTH_NAME: &str = "health-check.localdns.local";
/// The port of the `ready` plugin on each listener.
pub const READY_PORT: u16 = 8181;
/// The DNS port of both listeners.
pub const DNS_PORT: u16 = 53;
/// Where CoreDNS serves its own metrics (the Corefile's `prometheus`; `{{ metrics_address }}` in a
/// template): on loopback, where the supervisor fetches them to serve at the node's metrics
/// address beside its own series (`MetricsAddress` is never loopback, so the two never meet).
pub const COREDNS_METRICS_ADDRESS: &str = "127.0.0.1:9254";

/// A Corefile that could not be rendered, or that does not do what LocalDNS needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorefileError {
    #[error("Corefile template: {0}")]
    Template(String),
    #[error("rendered Corefile: {0}")]
    Syntax(String),
    #[error("rendered Corefile: server block `{keys}` has no `bind` (every server block must bind)")]
    NoBind { keys: String },
    #[error(
        "rendered Corefile: no server block has `prometheus {address}` (where the supervisor reads CoreDNS's \
         metrics; e.g. `prometheus {{{{ metrics_address }}}}`)"
    )]
    NoPrometheus { address: String },
    #[error(
        "rendered Corefile: server block `{keys}` serves metrics on the wildcard address `{address}` \
         (name the metrics address, e.g. `prometheus {{{{ metrics_address }}}}`)"
    )]
    WildcardMetrics { keys: String, address: String },
    #[error(
        "rendered Corefile: `{keys}` binds `{address}`, which is not a LocalDNS listener ({listeners}): \
         LocalDNS answers on its listeners only (anything else could make the node an open resolver)"
    )]
    BindElsewhere {
        keys: String,
        address: String,
        listeners: String,
    },
    #[error(
        "rendered Corefile: no server block has `ready {address}` (the supervisor's readiness probe of \
         that listener; e.g. `ready {{{{ node_listener }}}}:{{{{ ready_port }}}}`)"
    )]
    NoReady { address: String },
    #[error(
        "rendered Corefile: no server block for `{name}` binds both listeners (the supervisor's DNS \
         probe; keep the built-in template's `{{{{ health_name }}}}:53` block)"
    )]
    NoHealthZone { name: String },
    #[error(
        "rendered Corefile: `import {target}` names no snippet of the Corefile (imports of files are refused)"
    )]
    ImportUnknown { target: String },
}

/// The variables a Corefile template can use (documented in docs/configuration.md).
#[derive(Debug, Clone, Serialize)]
pub struct TemplateContext {
    pub node_listener: String,
    pub cluster_listener: String,
    pub cluster_dns: String,
    pub upstreams: Vec<String>,
    pub metrics_address: String,
    pub health_name: &'static str,
    pub ready_port: u16,
    pub coredns_version: String,
    pub required_plugins: Vec<String>,
    /// The node listener's zones (`NodeListenerOverrides`), the root zone first.
    pub node_zones: Vec<ZoneBlock>,
    /// The cluster listener's zones (`ClusterListenerOverrides`), the root zone first.
    pub cluster_zones: Vec<ZoneBlock>,
}

impl TemplateContext {
    /// Example values, for checking a template before a host is known.
    fn sample() -> Self {
        let (upstreams, cluster_dns) = (vec!["192.0.2.53".to_string()], "10.96.0.10");
        let zones = |listener| {
            default_zones(listener)
                .iter()
                .map(|z| z.block(&upstreams, cluster_dns))
                .collect()
        };
        TemplateContext {
            node_zones: zones(Listener::Node),
            cluster_zones: zones(Listener::Cluster),
            node_listener: "169.254.10.10".into(),
            cluster_listener: "169.254.10.11".into(),
            cluster_dns: cluster_dns.into(),
            upstreams: upstreams.clone(),
            metrics_address: COREDNS_METRICS_ADDRESS.into(),
            health_name: HEALTH_NAME,
            ready_port: READY_PORT,
            coredns_version: "0.0.0".into(),
            required_plugins: vec!["bind".into()],
        }
    }
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_syntax(
        SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
            .expect("default delimiters are valid"),
    );
    // A template that loops forever must fail, not hang the agent.
    env.set_fuel(Some(1_000_000));
    env
}

/// Renders `template` with the values of `ctx`.
pub fn render_template(template: &str, ctx: &TemplateContext) -> Result<String, CorefileError> {
    let env = environment();
    let message = |e: minijinja::Error| {
        let line = e
            .line()
            .map(|l| format!(" (template line {l})"))
            .unwrap_or_default();
        let detail = e.detail().map(|d| format!(": {d}")).unwrap_or_default();
        CorefileError::Template(format!("{}{detail}{line}", e.kind()))
    };
    let tmpl = env.template_from_str(template).map_err(message)?;
    tmpl.render(minijinja::Value::from(minijinja::value::Serde(ctx)))
        .map_err(message)
}

/// Checks that a template parses, uses only known variables and, rendered with example values,
/// passes [`check`] (validation time).
pub fn check_template(template: &str) -> Result<(), CorefileError> {
    let sample = TemplateContext::sample();
    check(&render_template(template, &sample)?, &sample)
}

/// [`check_template`] with the config's own zones in place of the sample's: a template that reads
/// a zone's `cache` must also render for a zone whose cache is off.
pub fn check_template_with_zones(
    template: &str,
    node_zones: &[crate::zones::Zone],
    cluster_zones: &[crate::zones::Zone],
) -> Result<(), CorefileError> {
    let mut sample = TemplateContext::sample();
    let blocks = |zones: &[crate::zones::Zone]| {
        zones
            .iter()
            .map(|z| z.block(&sample.upstreams, &sample.cluster_dns))
            .collect::<Vec<_>>()
    };
    let (node, cluster) = (blocks(node_zones), blocks(cluster_zones));
    sample.node_zones = node;
    sample.cluster_zones = cluster;
    check(&render_template(template, &sample)?, &sample)
}

/// The checks every rendered Corefile must pass (docs/configuration.md, "The Corefile"): every
/// server block binds, and only the listeners of `ctx` (snippets too); one serves `prometheus` on
/// the metrics address and none on a wildcard address; `ready` runs on both listeners; a block
/// for the health name binds both; `import` names only snippets of the Corefile.
pub fn check(corefile: &str, ctx: &TemplateContext) -> Result<(), CorefileError> {
    let parsed = parse(corefile)?;
    let blocks = &parsed.servers;
    for b in blocks {
        if !b.directives.iter().any(|d| d[0] == "bind" && d.len() > 1) {
            return Err(CorefileError::NoBind {
                keys: b.keys.join(" "),
            });
        }
    }
    let listeners = [ctx.node_listener.as_str(), ctx.cluster_listener.as_str()];
    for b in blocks.iter().chain(&parsed.snippets) {
        for d in b.directives.iter().filter(|d| d[0] == "bind") {
            if let Some(address) = d[1..].iter().find(|a| !listeners.contains(&a.as_str())) {
                return Err(CorefileError::BindElsewhere {
                    keys: b.keys.join(" "),
                    address: address.clone(),
                    listeners: listeners.join(", "),
                });
            }
        }
        for d in b.directives.iter().filter(|d| d[0] == "import") {
            let target = d[1..].join(" ");
            if !parsed
                .snippets
                .iter()
                .any(|s| s.keys.join(" ") == format!("({target})"))
            {
                return Err(CorefileError::ImportUnknown { target });
            }
        }
    }
    if !blocks.iter().any(|b| b.has_prometheus_on(&ctx.metrics_address)) {
        return Err(CorefileError::NoPrometheus {
            address: ctx.metrics_address.clone(),
        });
    }
    for b in blocks {
        let prometheus = b.directives.iter().filter(|d| d[0] == "prometheus");
        if let Some(address) = prometheus.filter_map(|d| d.get(1)).find(|a| is_wildcard(a)) {
            return Err(CorefileError::WildcardMetrics {
                keys: b.keys.join(" "),
                address: address.clone(),
            });
        }
    }
    for listener in listeners {
        let address = format!("{listener}:{}", ctx.ready_port);
        let ready = |b: &ServerBlock| {
            b.directives
                .iter()
                .any(|d| d[0] == "ready" && d.get(1) == Some(&address))
        };
        if !blocks.iter().any(ready) {
            return Err(CorefileError::NoReady { address });
        }
    }
    let health = |b: &&ServerBlock| {
        b.keys.iter().any(|k| zone_of(k) == ctx.health_name)
            && listeners
                .iter()
                .all(|l| b.binds().iter().any(|bound| bound.to_string() == *l))
    };
    if !blocks.iter().any(|b| health(&b)) {
        return Err(CorefileError::NoHealthZone {
            name: ctx.health_name.to_owned(),
        });
    }
    Ok(())
}

/// A server key's zone: without a `dns://` scheme, a port and a trailing dot.
fn zone_of(key: &str) -> &str {
    let key = key.strip_prefix("dns://").unwrap_or(key);
    let key = key.rsplit_once(':').map_or(key, |(zone, _)| zone);
    key.strip_suffix('.').filter(|z| !z.is_empty()).unwrap_or(key)
}

/// One server block: its keys (`.:53`) and its top-level directives, each as words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBlock {
    pub keys: Vec<String>,
    pub directives: Vec<Vec<String>>,
}

impl ServerBlock {
    pub fn has_prometheus_on(&self, address: &str) -> bool {
        self.directives
            .iter()
            .any(|d| d[0] == "prometheus" && d.get(1).map(String::as_str) == Some(address))
    }

    /// The addresses of its `bind` directives.
    pub fn binds(&self) -> Vec<Ipv4Addr> {
        self.directives
            .iter()
            .filter(|d| d[0] == "bind")
            .flat_map(|d| d[1..].iter().filter_map(|w| w.parse().ok()))
            .collect()
    }
}

/// A Corefile's server blocks and snippets (`(name) {…}`); a top-level `import` becomes a
/// snippet-less block of its own (`import` keys), so [`check`] sees what it imports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub servers: Vec<ServerBlock>,
    pub snippets: Vec<ServerBlock>,
}

/// Splits a Corefile into server blocks (snippets `(name) {…}` and top-level
/// `import` lines are skipped). Only what the checks need: words, braces and
/// `#` comments; quoted strings are not interpreted.
pub fn server_blocks(corefile: &str) -> Result<Vec<ServerBlock>, CorefileError> {
    Ok(parse(corefile)?.servers)
}

/// [`server_blocks`] with the snippets, and each top-level `import` as a directive of a block
/// keyed `import` among the snippets (so its target is checked like any other).
pub fn parse(corefile: &str) -> Result<Parsed, CorefileError> {
    let mut blocks = Vec::new();
    let mut snippets = Vec::new();
    let mut depth = 0usize;
    let mut keys: Vec<String> = Vec::new();
    let mut current: Option<ServerBlock> = None;
    let mut is_snippet = false;
    let mut top_level_imports: Vec<Vec<String>> = Vec::new();
    for (n, line) in corefile.lines().enumerate() {
        let code = strip_comment(line);
        let mut words = Vec::new();
        let mut line_start = true;
        for token in tokens(code) {
            match token {
                "{" => {
                    if depth == 0 {
                        if keys.is_empty() {
                            return Err(CorefileError::Syntax(format!(
                                "line {}: `{{` without server keys",
                                n + 1
                            )));
                        }
                        is_snippet = keys[0].starts_with('(');
                        current = Some(ServerBlock {
                            keys: std::mem::take(&mut keys),
                            directives: Vec::new(),
                        });
                    } else if depth == 1
                        && let (Some(b), false) = (current.as_mut(), words.is_empty())
                    {
                        b.directives.push(std::mem::take(&mut words));
                    }
                    depth += 1;
                }
                "}" => {
                    if depth == 0 {
                        return Err(CorefileError::Syntax(format!(
                            "line {}: `}}` without a block",
                            n + 1
                        )));
                    }
                    depth -= 1;
                    if depth == 0
                        && let Some(b) = current.take()
                    {
                        if is_snippet {
                            snippets.push(b)
                        } else {
                            blocks.push(b)
                        }
                    }
                }
                word if depth == 0 => {
                    if line_start && word == "import" {
                        let target: Vec<String> = tokens(code).skip(1).map(str::to_owned).collect();
                        let mut directive = vec!["import".to_owned()];
                        directive.extend(target);
                        top_level_imports.push(directive);
                        break;
                    }
                    keys.push(word.to_owned());
                }
                word if depth == 1 => words.push(word.to_owned()),
                _ => {}
            }
            line_start = false;
        }
        if depth == 1
            && !words.is_empty()
            && let Some(b) = current.as_mut()
        {
            b.directives.push(words);
        }
    }
    if depth != 0 || !keys.is_empty() {
        return Err(CorefileError::Syntax(
            "unbalanced braces or server keys without a block".into(),
        ));
    }
    if !top_level_imports.is_empty() {
        // Not a snippet anyone can import: its key names no snippet.
        snippets.push(ServerBlock {
            keys: vec!["import".into()],
            directives: top_level_imports,
        });
    }
    Ok(Parsed {
        servers: blocks,
        snippets,
    })
}

/// Whether a listen address (`host:port`) names every address: an empty host
/// (`:9153`), `0.0.0.0` or `[::]`.
fn is_wildcard(address: &str) -> bool {
    let host = match address.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => address.rsplit_once(':').map_or(address, |(host, _)| host),
    };
    host.is_empty() || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified())
}

fn strip_comment(line: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_space {
            return &line[..i];
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// Words, with `{` and `}` as tokens of their own even when glued to a word.
fn tokens(code: &str) -> impl Iterator<Item = &str> {
    code.split_whitespace().flat_map(|w| {
        let mut parts = Vec::new();
        let mut rest = w;
        while let Some(i) = rest.find(['{', '}']) {
            if i > 0 {
                parts.push(&rest[..i]);
            }
            parts.push(&rest[i..i + 1]);
            rest = &rest[i + 1..];
        }
        if !rest.is_empty() {
            parts.push(rest);
        }
        parts
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_blocks_are_split_with_their_directives() {
        let text = "(snip) {\n  log\n}\nimport snip\nexample.org:53 {  # comment\n bind 10.0.0.1\n forward . 1.1.1.1 {\n  force_tcp\n }\n}\n.:53{\nbind 10.0.0.2\n}\n";
        let blocks = server_blocks(text).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].keys, ["example.org:53"]);
        assert_eq!(
            blocks[0].directives,
            [vec!["bind", "10.0.0.1"], vec!["forward", ".", "1.1.1.1"]]
        );
        assert_eq!(blocks[1].binds(), [Ipv4Addr::new(10, 0, 0, 2)]);
    }

    #[test]
    fn unbalanced_braces_are_a_syntax_error() {
        assert!(matches!(
            server_blocks(".:53 {\n bind 1.2.3.4\n"),
            Err(CorefileError::Syntax(_))
        ));
        assert!(matches!(server_blocks("}\n"), Err(CorefileError::Syntax(_))));
    }

    /// Listeners 10.0.0.1 and 10.0.0.2, metrics on 10.0.0.1:9253.
    fn ctx() -> TemplateContext {
        TemplateContext {
            node_listener: "10.0.0.1".into(),
            cluster_listener: "10.0.0.2".into(),
            metrics_address: "10.0.0.1:9253".into(),
            ..TemplateContext::sample()
        }
    }

    /// `text` with what every checked Corefile needs besides: `ready` on both listeners and the
    /// health zone on both.
    fn with_rest(text: &str) -> String {
        format!(
            "{text}health-check.localdns.local:53 {{\n bind 10.0.0.1 10.0.0.2\n whoami\n}}\n\
             .:53 {{\n bind 10.0.0.2\n ready 10.0.0.2:8181\n}}\n\
             lab.example:53 {{\n bind 10.0.0.1\n ready 10.0.0.1:8181\n}}\n"
        )
    }

    #[test]
    fn a_block_without_bind_fails_the_check() {
        let text =
            with_rest(".:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\nexample.org:53 {\n whoami\n}\n");
        assert_eq!(
            check(&text, &ctx()),
            Err(CorefileError::NoBind {
                keys: "example.org:53".into()
            })
        );
    }

    #[test]
    fn prometheus_elsewhere_than_the_metrics_address_fails_the_check() {
        let text = with_rest(".:53 {\n bind 10.0.0.1\n prometheus :9153\n}\n");
        assert!(matches!(
            check(&text, &ctx()),
            Err(CorefileError::NoPrometheus { .. })
        ));
        let text = with_rest(".:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\n");
        assert_eq!(check(&text, &ctx()), Ok(()));
    }

    #[test]
    fn metrics_on_a_wildcard_address_fail_the_check_naming_the_block() {
        for wildcard in [":9153", "0.0.0.0:9253", "[::]:9253"] {
            let text = with_rest(&format!(
                ".:53 {{\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}}\nx.example:53 {{\n bind 10.0.0.1\n prometheus {wildcard}\n}}\n"
            ));
            assert_eq!(
                check(&text, &ctx()),
                Err(CorefileError::WildcardMetrics {
                    keys: "x.example:53".into(),
                    address: wildcard.into()
                }),
                "{wildcard}"
            );
        }
        // Another specific address, or none (CoreDNS's default is localhost), is no wildcard.
        let text = with_rest(
            ".:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\nx.example:53 {\n bind 10.0.0.1\n prometheus 10.0.0.2:9253\n}\nx:53 {\n bind 10.0.0.1\n prometheus\n}\n",
        );
        assert_eq!(check(&text, &ctx()), Ok(()));
    }

    #[test]
    fn a_bind_to_anything_but_the_listeners_fails_naming_the_block_and_the_address() {
        for (text, keys, address) in [
            (
                ".:53 {\n bind 0.0.0.0\n prometheus 10.0.0.1:9253\n}\n",
                ".:53",
                "0.0.0.0",
            ),
            (
                ".:53 {\n bind 10.0.0.1 192.168.100.10\n prometheus 10.0.0.1:9253\n}\n",
                ".:53",
                "192.168.100.10",
            ),
            (
                ".:53 {\n bind eth0\n prometheus 10.0.0.1:9253\n}\n",
                ".:53",
                "eth0",
            ),
            // A snippet's bind counts where it is imported.
            (
                "(open) {\n bind 0.0.0.0\n}\n.:53 {\n bind 10.0.0.1\n import open\n prometheus 10.0.0.1:9253\n}\n",
                "(open)",
                "0.0.0.0",
            ),
        ] {
            let e = check(&with_rest(text), &ctx()).unwrap_err();
            assert_eq!(
                e,
                CorefileError::BindElsewhere {
                    keys: keys.into(),
                    address: address.into(),
                    listeners: "10.0.0.1, 10.0.0.2".into()
                },
                "{text}"
            );
            assert!(e.to_string().contains("open resolver"), "{e}");
        }
    }

    #[test]
    fn without_ready_on_a_listener_or_the_health_zone_the_check_fails() {
        let metrics = ".:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\n";
        let health = "health-check.localdns.local:53 {\n bind 10.0.0.1 10.0.0.2\n}\n";
        let no_cluster_ready =
            format!("{metrics}{health}x:53 {{\n bind 10.0.0.1\n ready 10.0.0.1:8181\n}}\n");
        assert_eq!(
            check(&no_cluster_ready, &ctx()),
            Err(CorefileError::NoReady {
                address: "10.0.0.2:8181".into()
            })
        );
        let ready = "x:53 {\n bind 10.0.0.1 10.0.0.2\n ready 10.0.0.1:8181\n ready 10.0.0.2:8181\n}\n";
        let health_on_one = format!("{metrics}{ready}health-check.localdns.local. {{\n bind 10.0.0.1\n}}\n");
        assert_eq!(
            check(&health_on_one, &ctx()),
            Err(CorefileError::NoHealthZone {
                name: HEALTH_NAME.into()
            })
        );
        assert_eq!(check(&format!("{metrics}{ready}{health}"), &ctx()), Ok(()));
        let dotted = format!(
            "{metrics}{ready}dns://health-check.localdns.local.:53 {{\n bind 10.0.0.2 10.0.0.1\n}}\n"
        );
        assert_eq!(check(&dotted, &ctx()), Ok(()));
    }

    #[test]
    fn an_import_of_anything_but_a_snippet_is_refused() {
        for text in [
            ".:53 {\n bind 10.0.0.1\n import /etc/coredns/extra.conf\n prometheus 10.0.0.1:9253\n}\n",
            "import /etc/coredns/*.conf\n.:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\n",
        ] {
            assert!(
                matches!(
                    check(&with_rest(text), &ctx()),
                    Err(CorefileError::ImportUnknown { .. })
                ),
                "{text}"
            );
        }
        let snippet =
            "(common) {\n errors\n}\n.:53 {\n bind 10.0.0.1\n import common\n prometheus 10.0.0.1:9253\n}\n";
        assert_eq!(check(&with_rest(snippet), &ctx()), Ok(()));
    }

    #[test]
    fn validation_refuses_a_template_that_would_open_the_resolver_or_blind_the_supervisor() {
        let open = BUILTIN_TEMPLATE.replace("bind {{ listener }}\n    forward", "bind 0.0.0.0\n    forward");
        assert!(
            matches!(check_template(&open), Err(CorefileError::BindElsewhere { .. })),
            "{open}"
        );
        let no_health = BUILTIN_TEMPLATE.replace("{{ health_name }}:53", "other.example:53");
        assert!(matches!(
            check_template(&no_health),
            Err(CorefileError::NoHealthZone { .. })
        ));
    }

    #[test]
    fn unknown_variables_and_bad_syntax_are_template_errors() {
        let e = check_template(".:53 {\n bind {{ node_listner }}\n}\n").unwrap_err();
        assert!(
            matches!(e, CorefileError::Template(ref m) if m.contains("undefined") && m.contains("line 2")),
            "{e}"
        );
        let e = check_template(".:53 {\n bind {{ node_listener \n}\n").unwrap_err();
        assert!(matches!(e, CorefileError::Template(_)), "{e}");
        assert_eq!(check_template(BUILTIN_TEMPLATE), Ok(()));
        assert_eq!(check_template(FALLBACK_TEMPLATE), Ok(()));
    }

    #[test]
    fn a_template_that_never_ends_runs_out_of_fuel() {
        let e = check_template(
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        )
        .unwrap_err();
        assert!(matches!(e, CorefileError::Template(_)), "{e}");
    }
}
