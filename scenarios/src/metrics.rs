//! Prometheus metrics as a scenario reads them: fetched with `curl` from inside the lab's
//! network namespace (outside the VM, so a scrape proves the address is reachable from the
//! network), and parsed from the text exposition format into samples that can be summed.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{Context, bail};
use harness::lab::Lab;

/// One sample: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, or "" when the sample has no such label (as Prometheus treats it).
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map(String::as_str).unwrap_or("")
    }
}

/// Every sample of one scrape, in the order the endpoint wrote them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// Parses the Prometheus text exposition format (version 0.0.4). Comment lines (`# HELP`,
    /// `# TYPE`) and blank lines are skipped; a line that is not a sample is an error naming
    /// its number and text.
    pub fn parse(text: &str) -> anyhow::Result<Metrics> {
        let samples = text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
            .map(|(i, line)| {
                parse_sample(line.trim()).with_context(|| format!("metrics line {}: {line:?}", i + 1))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Metrics { samples })
    }

    /// The samples of metric `name`.
    pub fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// Whether the scrape holds at least one sample of `name`.
    pub fn has(&self, name: &str) -> bool {
        self.samples(name).next().is_some()
    }

    /// The sum of `name` over every label set (0 when absent: a labelled counter appears only
    /// after its first increment).
    pub fn sum(&self, name: &str) -> f64 {
        // `+ 0.0`: an empty float sum is -0.
        self.samples(name).map(|s| s.value).sum::<f64>() + 0.0
    }

    /// The sum of `name` over the label sets `keep` accepts.
    pub fn sum_where(&self, name: &str, keep: impl Fn(&Sample) -> bool) -> f64 {
        self.samples(name)
            .filter(|s| keep(s))
            .map(|s| s.value)
            .sum::<f64>()
            + 0.0
    }

    /// The samples of `name`, one a line, for messages.
    pub fn describe(&self, name: &str) -> String {
        let lines: Vec<String> = self
            .samples(name)
            .map(|s| format!("{}{:?} {}", s.name, s.labels, s.value))
            .collect();
        if lines.is_empty() {
            format!("(no {name} samples)")
        } else {
            lines.join("\n")
        }
    }
}

/// `name{k="v",...} value [timestamp]`.
fn parse_sample(line: &str) -> anyhow::Result<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .context("a sample has a name followed by `{` or a blank and a value")?;
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        bail!("{name:?} is not a metric name");
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after_brace)?;
        labels = parsed;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().context("a sample has a value")?;
    let value = parse_value(value)?;
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .with_context(|| format!("timestamp {ts:?} is not an integer"))?;
    }
    if let Some(extra) = fields.next() {
        bail!("unexpected {extra:?} after the value and timestamp");
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The label pairs after `{` up to the closing `}`; returns them and the text after `}`.
fn parse_labels(mut text: &str) -> anyhow::Result<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(after) = text.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = text.find('=').context("a label has `=`")?;
        let key = text[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("{key:?} is not a label name");
        }
        let quoted = text[eq + 1..]
            .trim_start()
            .strip_prefix('"')
            .with_context(|| format!("label {key} has no quoted value"))?;
        let mut value = String::new();
        let mut chars = quoted.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => bail!("label {key}'s value ends in `\\`"),
                },
                Some((_, c)) => value.push(c),
                None => bail!("label {key}'s value has no closing quote"),
            }
        };
        labels.insert(key.to_string(), value);
        text = &quoted[end + 1..];
    }
}

/// A sample value: a float, `+Inf`, `-Inf` or `NaN`.
fn parse_value(text: &str) -> anyhow::Result<f64> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text
            .parse::<f64>()
            .with_context(|| format!("value {text:?} is not a number")),
    }
}

/// `GET http://<addr>/metrics` with `curl` run inside the lab's network namespace
/// (`ip netns exec lab-<n> curl ...`), i.e. from the lab network outside the VM. Any proxy
/// from the environment is ignored; a refused connection, a timeout or an HTTP error status
/// is an error carrying curl's output.
pub fn fetch_from_lab(lab: &Lab, addr: SocketAddr) -> anyhow::Result<String> {
    let url = format!("http://{addr}/metrics");
    let mut curl = lab.command("curl");
    // Retried: right after a node is resumed from its checkpoint, the supervisor may take the
    // CoreDNS that slept through the clock jump for hung and hand over to its standby (~2 s),
    // and a scrape in between gets an empty reply (curl's exit 52).
    curl.args([
        "--silent",
        "--show-error",
        "--fail",
        "--noproxy",
        "*",
        "--max-time",
        "20",
        "--retry",
        "4",
        "--retry-delay",
        "3",
        "--retry-all-errors",
        &url,
    ]);
    agent::exec::run_stdout(&mut curl)
        .with_context(|| format!("fetching {url} from the lab's namespace {}", lab.name()))
}

/// [`fetch_from_lab`] and [`Metrics::parse`].
pub fn scrape_from_lab(lab: &Lab, addr: SocketAddr) -> anyhow::Result<Metrics> {
    let text = fetch_from_lab(lab, addr)?;
    Metrics::parse(&text).with_context(|| format!("parsing the metrics of http://{addr}/metrics"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COREDNS: &str = r#"# HELP coredns_build_info A metric with a constant '1' value labeled by version, revision, and goversion from which CoreDNS was built.
# TYPE coredns_build_info gauge
coredns_build_info{goversion="go1.24.1",revision="",version="1.12.1"} 1
# HELP coredns_cache_hits_total The count of cache hits.
# TYPE coredns_cache_hits_total counter
coredns_cache_hits_total{server="dns://169.254.10.10:53",type="success",view="",zones="."} 3
coredns_cache_hits_total{server="dns://169.254.10.11:53",type="success",view="",zones="."} 7
coredns_cache_hits_total{server="dns://169.254.10.11:53",type="denial",view="",zones="."} 2
process_start_time_seconds 1.76441e+09
go_gc_duration_seconds{quantile="1"} NaN
coredns_dns_request_duration_seconds_bucket{le="+Inf",server="dns://:53"} 12 1700000000000
"#;

    #[test]
    fn coredns_metrics_parse_into_samples_with_labels() {
        let m = Metrics::parse(COREDNS).unwrap();
        assert_eq!(m.samples.len(), 7);
        let info = m.samples("coredns_build_info").next().unwrap();
        assert_eq!(info.label("version"), "1.12.1");
        assert_eq!(info.label("revision"), "");
        assert_eq!(info.value, 1.0);
        assert_eq!(
            m.samples("process_start_time_seconds").next().unwrap().value,
            1.76441e9
        );
        let bucket = m
            .samples("coredns_dns_request_duration_seconds_bucket")
            .next()
            .unwrap();
        assert_eq!(bucket.label("le"), "+Inf");
        assert!(m.samples("go_gc_duration_seconds").next().unwrap().value.is_nan());
    }

    #[test]
    fn sums_add_every_label_set_or_only_the_chosen_ones() {
        let m = Metrics::parse(COREDNS).unwrap();
        assert_eq!(m.sum("coredns_cache_hits_total"), 12.0);
        let cluster = m.sum_where("coredns_cache_hits_total", |s| {
            s.label("server").contains("169.254.10.11")
        });
        assert_eq!(cluster, 9.0);
        assert_eq!(m.sum("coredns_cache_misses_total"), 0.0);
        assert!(!m.has("coredns_cache_misses_total"));
    }

    #[test]
    fn label_values_keep_escaped_quotes_commas_and_braces() {
        let m = Metrics::parse(r#"x{a="1,\"2\"}",b="c\\d\ne"} 5"#).unwrap();
        let s = &m.samples[0];
        assert_eq!(s.label("a"), r#"1,"2"}"#);
        assert_eq!(s.label("b"), "c\\d\ne");
        assert_eq!(s.value, 5.0);
    }

    #[test]
    fn a_line_that_is_not_a_sample_is_an_error_naming_its_line() {
        for bad in [
            "x{a=\"1\" 5",
            "x 5 6 7",
            "x{a=1} 5",
            "x notanumber",
            "x",
            "bad-name 1",
        ] {
            let err = Metrics::parse(&format!("# ok\nfine 1\n{bad}\n")).unwrap_err();
            let text = format!("{err:#}");
            assert!(text.contains("metrics line 3"), "{bad}: {text}");
        }
    }
}
