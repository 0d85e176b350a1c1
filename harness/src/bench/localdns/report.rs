//! The figures of `harness bench localdns` ([`LocalDnsReport`], serialised for `--output json`)
//! and their text lines.

use agent::validate::{DEFAULT_CPU_LIMIT_MILLICORES, DEFAULT_MEMORY_LIMIT_MB};
use serde::Serialize;

use crate::bench::procfs::millicores;

/// What serves the node listener in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Setup {
    /// The supervisor's CoreDNS with our rendered Corefile, our `ip unbounded_localdns` table loaded.
    OursWithRules,
    /// The same, our table deleted.
    OursWithoutRules,
    /// The same CoreDNS binary started directly with a hand-written Corefile; no supervisor, no
    /// table of ours.
    Bare,
}

impl Setup {
    /// In the order the rounds take them.
    pub const ALL: [Setup; 3] = [Setup::OursWithRules, Setup::OursWithoutRules, Setup::Bare];

    pub fn label(self) -> &'static str {
        match self {
            Setup::OursWithRules => "ours, NOTRACK rules",
            Setup::OursWithoutRules => "ours, no rules",
            Setup::Bare => "bare CoreDNS",
        }
    }
}

/// One round's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Round {
    pub setup: Setup,
    /// Queries answered.
    pub queries: u64,
    /// The round's wall time.
    pub seconds: f64,
    pub queries_per_second: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// The most entries `conntrack -C` counted in the node namespace.
    pub max_conntrack: u64,
    /// Peak VmRSS of the serving CoreDNS.
    pub peak_rss_kib: u64,
    pub peak_rss_mib: f64,
    /// [`Round::peak_rss_mib`] in % of the agent's default `MemoryMax`.
    pub peak_rss_percent_of_limit: f64,
    /// utime+stime of the serving CoreDNS over the round.
    pub cpu_ticks: u64,
    pub cpu_millicores: f64,
    /// [`Round::cpu_millicores`] in % of the agent's default `CPUQuota`.
    pub cpu_percent_of_limit: f64,
}

impl Round {
    /// The figures of `queries` answered in `seconds`, with the sampled peaks and CPU ticks.
    pub fn new(setup: Setup, raw: RawRound, clk_tck: u64) -> Round {
        let mib = mib(raw.peak_rss_kib);
        let cpu = millicores(raw.cpu_ticks, clk_tck, raw.seconds);
        Round {
            setup,
            queries: raw.queries,
            seconds: raw.seconds,
            queries_per_second: raw.queries as f64 / raw.seconds,
            p50_us: raw.p50_us,
            p99_us: raw.p99_us,
            max_conntrack: raw.max_conntrack,
            peak_rss_kib: raw.peak_rss_kib,
            peak_rss_mib: mib,
            peak_rss_percent_of_limit: mib / f64::from(DEFAULT_MEMORY_LIMIT_MB) * 100.0,
            cpu_ticks: raw.cpu_ticks,
            cpu_millicores: cpu,
            cpu_percent_of_limit: cpu / f64::from(DEFAULT_CPU_LIMIT_MILLICORES) * 100.0,
        }
    }

    /// The round's line of the text output.
    pub fn line(&self) -> String {
        format!(
            "{:<19} {:>6.0} q/s  p50 {:>4} µs  p99 {:>5} µs  conntrack max {:>5}  \
             RSS max {:>5.1} MiB ({:>2.0}%)  CPU {:>4.0} m ({:>2.0}%)  ({} queries in {:.1} s)",
            self.setup.label(),
            self.queries_per_second,
            self.p50_us,
            self.p99_us,
            self.max_conntrack,
            self.peak_rss_mib,
            self.peak_rss_percent_of_limit,
            self.cpu_millicores,
            self.cpu_percent_of_limit,
            self.queries,
            self.seconds
        )
    }
}

/// What the load and the sampler measured in a round.
#[derive(Debug, Clone, Copy)]
pub struct RawRound {
    pub queries: u64,
    pub seconds: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_conntrack: u64,
    /// Peak VmRSS of the serving CoreDNS, KiB.
    pub peak_rss_kib: u64,
    /// utime+stime of the serving CoreDNS over the round, clock ticks.
    pub cpu_ticks: u64,
}

/// One setup over all its rounds.
#[derive(Debug, Clone, Serialize)]
pub struct SetupFigures {
    pub setup: Setup,
    pub queries: u64,
    pub seconds: f64,
    pub queries_per_second: f64,
    pub peak_rss_mib: f64,
    pub cpu_millicores: f64,
}

/// Throughput ratios over all rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Ratios {
    /// Ours with rules / ours without.
    pub with_rules_over_without_rules: f64,
    /// Ours with rules / bare CoreDNS.
    pub with_rules_over_bare: f64,
    /// Ours without rules / bare CoreDNS.
    pub without_rules_over_bare: f64,
}

/// The agent's default LocalDNS limits (`localdns.slice`, not applied in the benchmark).
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    pub memory_mib: u32,
    pub cpu_millicores: u32,
}

/// Everything `harness bench localdns` measured.
#[derive(Debug, Clone, Serialize)]
pub struct LocalDnsReport {
    pub seconds_per_round: u64,
    pub threads: usize,
    pub limits: Limits,
    /// In the order they ran.
    pub rounds: Vec<Round>,
    /// One per setup, in [`Setup::ALL`]'s order.
    pub setups: Vec<SetupFigures>,
    pub ratios: Ratios,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The first line of the text output.
pub fn header(seconds: u64, threads: usize) -> String {
    format!(
        "{threads} clients, {seconds} s per round; CoreDNS's RSS and CPU (millicores, m) in % of the agent's default \
         LocalDNS limits (localdns.slice, not applied here): MemoryMax {DEFAULT_MEMORY_LIMIT_MB} MiB, \
         CPUQuota {DEFAULT_CPU_LIMIT_MILLICORES} m"
    )
}

impl LocalDnsReport {
    /// The report of `rounds`: each setup's figures over its rounds, and the ratios.
    pub fn new(seconds: u64, threads: usize, rounds: Vec<Round>, clk_tck: u64) -> LocalDnsReport {
        let setups: Vec<SetupFigures> = Setup::ALL
            .into_iter()
            .map(|setup| {
                let of = || rounds.iter().filter(move |r| r.setup == setup);
                let queries = of().map(|r| r.queries).sum::<u64>();
                let seconds = of().map(|r| r.seconds).sum::<f64>();
                SetupFigures {
                    setup,
                    queries,
                    seconds,
                    queries_per_second: queries as f64 / seconds,
                    peak_rss_mib: mib(of().map(|r| r.peak_rss_kib).max().unwrap_or(0)),
                    cpu_millicores: millicores(of().map(|r| r.cpu_ticks).sum(), clk_tck, seconds),
                }
            })
            .collect();
        let qps = |setup: Setup| {
            setups
                .iter()
                .find(|s| s.setup == setup)
                .map_or(f64::NAN, |s| s.queries_per_second)
        };
        let ratios = Ratios {
            with_rules_over_without_rules: qps(Setup::OursWithRules) / qps(Setup::OursWithoutRules),
            with_rules_over_bare: qps(Setup::OursWithRules) / qps(Setup::Bare),
            without_rules_over_bare: qps(Setup::OursWithoutRules) / qps(Setup::Bare),
        };
        LocalDnsReport {
            seconds_per_round: seconds,
            threads,
            limits: Limits {
                memory_mib: DEFAULT_MEMORY_LIMIT_MB,
                cpu_millicores: DEFAULT_CPU_LIMIT_MILLICORES,
            },
            rounds,
            setups,
            ratios,
        }
    }

    /// The lines after the rounds': each setup over all rounds, then the ratios.
    pub fn summary_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .setups
            .iter()
            .map(|s| {
                format!(
                    "{:<19} {:>6.0} q/s over both rounds  RSS max {:>5.1} MiB  CPU {:>4.0} m",
                    s.setup.label(),
                    s.queries_per_second,
                    s.peak_rss_mib,
                    s.cpu_millicores
                )
            })
            .collect();
        let r = &self.ratios;
        lines.push(format!(
            "throughput ratio (ours with rules / ours without): {:.3}",
            r.with_rules_over_without_rules
        ));
        lines.push(format!(
            "throughput ratio (ours with rules / bare CoreDNS): {:.3}",
            r.with_rules_over_bare
        ));
        lines.push(format!(
            "throughput ratio (ours without rules / bare CoreDNS): {:.3}",
            r.without_rules_over_bare
        ));
        lines
    }

    /// The whole text output.
    pub fn text(&self) -> String {
        let mut lines = vec![header(self.seconds_per_round, self.threads)];
        lines.extend(self.rounds.iter().map(Round::line));
        lines.extend(self.summary_lines());
        lines.join("\n") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(queries: u64, conntrack: u64) -> RawRound {
        RawRound {
            queries,
            seconds: 2.0,
            p50_us: 100,
            p99_us: 400,
            max_conntrack: conntrack,
            peak_rss_kib: 20 * 1024,
            cpu_ticks: 100,
        }
    }

    #[test]
    fn setups_add_up_their_rounds_and_the_ratios_compare_throughputs() {
        let rounds = vec![
            Round::new(Setup::OursWithRules, raw(2000, 0), 100),
            Round::new(Setup::OursWithoutRules, raw(1000, 900), 100),
            Round::new(Setup::Bare, raw(1000, 900), 100),
            Round::new(Setup::OursWithRules, raw(2000, 0), 100),
            Round::new(Setup::OursWithoutRules, raw(3000, 900), 100),
            Round::new(Setup::Bare, raw(1000, 900), 100),
        ];
        let report = LocalDnsReport::new(2, 1, rounds, 100);
        assert_eq!(report.setups[0].queries_per_second, 1000.0);
        assert_eq!(report.setups[1].queries_per_second, 1000.0);
        assert_eq!(report.setups[2].queries_per_second, 500.0);
        assert_eq!(report.setups[0].cpu_millicores, 500.0);
        assert_eq!(report.ratios.with_rules_over_without_rules, 1.0);
        assert_eq!(report.ratios.with_rules_over_bare, 2.0);
        let text = report.text();
        assert!(text.starts_with("1 clients, 2 s per round;"), "{text}");
        assert!(
            text.contains("ours, NOTRACK rules   1000 q/s  p50  100 µs  p99   400 µs  conntrack max     0  RSS max  20.0 MiB (16%)  CPU  500 m (25%)  (2000 queries in 2.0 s)"),
            "{text}"
        );
        assert!(
            text.contains("throughput ratio (ours with rules / bare CoreDNS): 2.000"),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rounds"][2]["setup"], "bare");
        assert_eq!(json["ratios"]["without_rules_over_bare"], 2.0);
    }
}
