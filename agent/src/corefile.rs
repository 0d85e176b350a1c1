//! The Corefile's template language and checks: the built-in template or `CorefileTemplate`,
//! rendered with minijinja (strict undefined variables), and the checks every rendered Corefile
//! passes (docs/design.md §5). It knows no goal: validation checks a template with sample values,
//! `render::corefile` renders it with a goal's.

use std::net::{IpAddr, Ipv4Addr};

use minijinja::{Environment, UndefinedBehavior, syntax::SyntaxConfig};
use serde::Serialize;

/// The built-in Corefile template.
pub const BUILTIN_TEMPLATE: &str = include_str!("Corefile.j2");
/// The name the supervisor queries to check both listeners.
pub const HEALTH_NAME: &str = "health-check.localdns.local";
/// The port of the `ready` plugin on each listener.
pub const READY_PORT: u16 = 8181;
/// The DNS port of both listeners.
pub const DNS_PORT: u16 = 53;

/// A Corefile that could not be rendered, or that does not do what LocalDNS needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorefileError {
    #[error("Corefile template: {0}")]
    Template(String),
    #[error("rendered Corefile: {0}")]
    Syntax(String),
    #[error("rendered Corefile: server block `{keys}` has no `bind` (every server block must bind)")]
    NoBind { keys: String },
    #[error("rendered Corefile: no server block has `prometheus {address}` (the metrics address)")]
    NoPrometheus { address: String },
    #[error(
        "rendered Corefile: server block `{keys}` serves metrics on the wildcard address `{address}` \
         (name the metrics address, e.g. `prometheus {{{{ metrics_address }}}}`)"
    )]
    WildcardMetrics { keys: String, address: String },
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
}

impl TemplateContext {
    /// Example values, for checking a template before a host is known.
    fn sample() -> Self {
        TemplateContext {
            node_listener: "169.254.10.10".into(),
            cluster_listener: "169.254.10.11".into(),
            cluster_dns: "10.96.0.10".into(),
            upstreams: vec!["192.0.2.53".into()],
            metrics_address: "192.0.2.10:9253".into(),
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

/// Checks that a template parses and uses only known variables (validation time).
pub fn check_template(template: &str) -> Result<(), CorefileError> {
    render_template(template, &TemplateContext::sample()).map(|_| ())
}

/// The checks every rendered Corefile must pass: every server block binds, one
/// serves `prometheus` on the metrics address, and none on a wildcard address.
pub fn check(corefile: &str, metrics_address: &str) -> Result<(), CorefileError> {
    let blocks = server_blocks(corefile)?;
    for b in &blocks {
        if !b.directives.iter().any(|d| d[0] == "bind" && d.len() > 1) {
            return Err(CorefileError::NoBind {
                keys: b.keys.join(" "),
            });
        }
    }
    if !blocks.iter().any(|b| b.has_prometheus_on(metrics_address)) {
        return Err(CorefileError::NoPrometheus {
            address: metrics_address.to_owned(),
        });
    }
    for b in &blocks {
        let prometheus = b.directives.iter().filter(|d| d[0] == "prometheus");
        if let Some(address) = prometheus.filter_map(|d| d.get(1)).find(|a| is_wildcard(a)) {
            return Err(CorefileError::WildcardMetrics {
                keys: b.keys.join(" "),
                address: address.clone(),
            });
        }
    }
    Ok(())
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

/// Splits a Corefile into server blocks (snippets `(name) {…}` and top-level
/// `import` lines are skipped). Only what the checks need: words, braces and
/// `#` comments; quoted strings are not interpreted.
pub fn server_blocks(corefile: &str) -> Result<Vec<ServerBlock>, CorefileError> {
    let mut blocks = Vec::new();
    let mut depth = 0usize;
    let mut keys: Vec<String> = Vec::new();
    let mut current: Option<ServerBlock> = None;
    let mut is_snippet = false;
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
                        && !is_snippet
                    {
                        blocks.push(b);
                    }
                }
                word if depth == 0 => {
                    if line_start && word == "import" {
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
    Ok(blocks)
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

    #[test]
    fn a_block_without_bind_fails_the_check() {
        let text = ".:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\nexample.org:53 {\n whoami\n}\n";
        assert_eq!(
            check(text, "10.0.0.1:9253"),
            Err(CorefileError::NoBind {
                keys: "example.org:53".into()
            })
        );
    }

    #[test]
    fn prometheus_elsewhere_than_the_metrics_address_fails_the_check() {
        let text = ".:53 {\n bind 10.0.0.1\n prometheus :9153\n}\n";
        assert!(matches!(
            check(text, "10.0.0.1:9253"),
            Err(CorefileError::NoPrometheus { .. })
        ));
        assert_eq!(
            check(
                ".:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\n",
                "10.0.0.1:9253"
            ),
            Ok(())
        );
    }

    #[test]
    fn metrics_on_a_wildcard_address_fail_the_check_naming_the_block() {
        for wildcard in [":9153", "0.0.0.0:9253", "[::]:9253"] {
            let text = format!(
                ".:53 {{\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}}\nlab.example:53 {{\n bind 10.0.0.1\n prometheus {wildcard}\n}}\n"
            );
            assert_eq!(
                check(&text, "10.0.0.1:9253"),
                Err(CorefileError::WildcardMetrics {
                    keys: "lab.example:53".into(),
                    address: wildcard.into()
                }),
                "{wildcard}"
            );
        }
        // Another specific address, or none (CoreDNS's default is localhost), is no wildcard.
        let text = ".:53 {\n bind 10.0.0.1\n prometheus 10.0.0.1:9253\n}\nlab.example:53 {\n bind 10.0.0.1\n prometheus 10.0.0.2:9253\n}\nx:53 {\n bind 10.0.0.1\n prometheus\n}\n";
        assert_eq!(check(text, "10.0.0.1:9253"), Ok(()));
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
