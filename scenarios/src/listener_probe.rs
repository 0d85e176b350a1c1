//! Both LocalDNS listeners asked again and again while something happens on the node: a loop in
//! the VM (a transient unit, so it outlives the command that starts it) asks each listener the
//! health name with `dig` over UDP and over TCP, as a stub resolver does (1 s per try, 2 tries),
//! about every quarter second until it is told to stop; every lookup is logged with its time and
//! whether it got NOERROR. What clients felt is then read from the log: per listener and
//! protocol, the longest time between two answers (the gap), and the lookups left unanswered.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use harness::vm::Vm;

use crate::dns::{CLUSTER_LISTENER, NODE_LISTENER};

const UNIT: &str = "scenario-listener-probe";
const DIR: &str = "/run/scenario-listener-probe";

/// A running probe loop.
pub struct ListenerProbe {
    started: Instant,
}

/// What the loop saw: how many lookups, a line per one that failed, and every lookup.
#[derive(Debug)]
pub struct Probed {
    pub lookups: u64,
    pub failures: Vec<String>,
    pub took: Duration,
    pub log: Vec<Lookup>,
}

/// One lookup of the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// When it ended, milliseconds since the Unix epoch (the VM's clock).
    pub at_ms: u64,
    pub listener: String,
    /// `udp` or `tcp`.
    pub protocol: String,
    pub answered: bool,
}

/// The longest time one listener went unanswered over one protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    pub listener: String,
    pub protocol: String,
    pub longest: Duration,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1}s ({} over {})",
            self.longest.as_secs_f64(),
            self.listener,
            self.protocol
        )
    }
}

/// Parses the loop's log: `<ms> <listener> <udp|tcp> <ok|fail>` per line.
pub fn parse_log(text: &str) -> anyhow::Result<Vec<Lookup>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields[..] {
                [at, listener, protocol, result @ ("ok" | "fail")] => Ok(Lookup {
                    at_ms: at
                        .parse()
                        .with_context(|| format!("the probe log line {line:?}: its time"))?,
                    listener: listener.to_string(),
                    protocol: protocol.to_string(),
                    answered: result == "ok",
                }),
                _ => anyhow::bail!("the probe log line {line:?} is not `<ms> <listener> <protocol> ok|fail`"),
            }
        })
        .collect()
}

/// Per listener and protocol, the longest time between two answered lookups, a failed lookup's
/// end standing in for the answers it did not get (so a series that never got an answer counts
/// from its first lookup to its last); the longest first.
pub fn gaps(log: &[Lookup]) -> Vec<Gap> {
    let mut series: std::collections::BTreeMap<(&str, &str), Vec<&Lookup>> = Default::default();
    for lookup in log {
        series
            .entry((&lookup.listener, &lookup.protocol))
            .or_default()
            .push(lookup);
    }
    let mut gaps: Vec<Gap> = series
        .into_iter()
        .map(|((listener, protocol), mut lookups)| {
            lookups.sort_by_key(|l| l.at_ms);
            let mut longest = 0;
            let mut last_answer = lookups.first().map(|l| l.at_ms);
            for lookup in &lookups {
                if let Some(since) = last_answer {
                    longest = longest.max(lookup.at_ms.saturating_sub(since));
                }
                if lookup.answered {
                    last_answer = Some(lookup.at_ms);
                }
            }
            Gap {
                listener: listener.to_string(),
                protocol: protocol.to_string(),
                longest: Duration::from_millis(longest),
            }
        })
        .collect();
    gaps.sort_by_key(|g| std::cmp::Reverse(g.longest));
    gaps
}

impl ListenerProbe {
    /// Starts the loop on `vm` and waits until its first round of lookups answered.
    pub fn start(vm: &Vm) -> anyhow::Result<ListenerProbe> {
        let health = agent::corefile::HEALTH_NAME;
        let script = format!(
            "n=0\n\
             while [ ! -e {DIR}/stop ]; do\n\
             \tfor l in {NODE_LISTENER} {CLUSTER_LISTENER}; do\n\
             \t\tfor p in udp tcp; do\n\
             \t\t\tn=$((n+1))\n\
             \t\t\tif dig +$p +time=1 +tries=2 @$l {health} +noall +comments 2>&1 | grep -q 'status: NOERROR'; \
             then r=ok; else r=fail; echo \"$(date +%T.%N) no answer from $l over $p\" >> {DIR}/failures; fi\n\
             \t\t\techo \"$(date +%s%3N) $l $p $r\" >> {DIR}/log\n\
             \t\tdone\n\
             \tdone\n\
             \techo $n > {DIR}/lookups.new && mv {DIR}/lookups.new {DIR}/lookups\n\
             \tsleep 0.2\n\
             done\n\
             echo done > {DIR}/finished\n"
        );
        vm.run(&format!(
            "systemctl stop {UNIT} 2>/dev/null; systemctl reset-failed {UNIT} 2>/dev/null; \
             rm -rf {DIR} && mkdir -p {DIR} && : > {DIR}/failures && : > {DIR}/log && cat > {DIR}/loop.sh <<'EOF'\n{script}EOF\n\
             systemd-run --quiet --unit={UNIT} sh {DIR}/loop.sh"
        ))?;
        let probe = ListenerProbe {
            started: Instant::now(),
        };
        probe.wait_for(vm, |lookups, _| lookups >= 2, "its first lookups")?;
        Ok(probe)
    }

    /// Stops the loop and returns what it saw.
    pub fn finish(self, vm: &Vm) -> anyhow::Result<Probed> {
        vm.run(&format!("touch {DIR}/stop"))?;
        self.wait_for(vm, |_, finished| finished, "the loop to stop")?;
        let lookups = read_lookups(vm)?;
        let failures = vm
            .run(&format!("cat {DIR}/failures"))?
            .lines()
            .map(str::to_string)
            .collect();
        let log = parse_log(&vm.run(&format!("cat {DIR}/log"))?)?;
        vm.run(&format!("rm -rf {DIR}"))?;
        Ok(Probed {
            lookups,
            failures,
            took: self.started.elapsed(),
            log,
        })
    }

    fn wait_for(&self, vm: &Vm, done: impl Fn(u64, bool) -> bool, what: &str) -> anyhow::Result<()> {
        let _waiting = harness::phase_clock::enter(harness::phase_clock::Phase::Waiting);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let finished = vm.run_unchecked(&format!("test -e {DIR}/finished"))?.success();
            if done(read_lookups(vm)?, finished) {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "the listener probe ({UNIT} in the VM) did not reach {what} within 60 s: {}",
                vm.run_unchecked(&format!("systemctl status {UNIT} --no-pager; cat {DIR}/failures"))?
                    .stdout_text()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

fn read_lookups(vm: &Vm) -> anyhow::Result<u64> {
    let text = vm.run(&format!("cat {DIR}/lookups 2>/dev/null || echo 0"))?;
    text.trim()
        .parse()
        .with_context(|| format!("{DIR}/lookups holds {text:?}"))
}

impl Probed {
    /// The longest gap over every listener and protocol (`None` without lookups).
    pub fn worst_gap(&self) -> Option<Gap> {
        gaps(&self.log).into_iter().next()
    }

    /// One line for a scenario's output: lookups, the unanswered ones, the longest gap.
    pub fn figure(&self, during: &str) -> String {
        format!(
            "figure: {during}: {} lookups over UDP and TCP in {:.1}s, {} unanswered, longest gap {}",
            self.lookups,
            self.took.as_secs_f64(),
            self.failures.len(),
            self.worst_gap()
                .map_or_else(|| "none".to_string(), |g| g.to_string())
        )
    }

    /// Fails when any listener went unanswered over any protocol longer than `bound`.
    pub fn ensure_gaps_within(&self, bound: Duration, during: &str) -> anyhow::Result<()> {
        ensure!(self.lookups > 0, "no lookup was made during {during}");
        if let Some(gap) = self.worst_gap() {
            ensure!(
                gap.longest <= bound,
                "during {during} clients went unanswered {gap}, more than {bound:?}; the unanswered lookups:\n{}",
                self.failures.join("\n")
            );
        }
        Ok(())
    }

    /// Fails naming every lookup that got no answer, or when there were none.
    pub fn ensure_every_lookup_answered(&self, during: &str) -> anyhow::Result<()> {
        ensure!(self.lookups > 0, "no lookup was made during {during}");
        ensure!(
            self.failures.is_empty(),
            "{} of {} lookups of the listeners got no answer during {during}:\n{}",
            self.failures.len(),
            self.lookups,
            self.failures.join("\n")
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_is_the_longest_time_between_answers_per_listener_and_protocol() {
        let log = parse_log(
            "1000 169.254.10.10 udp ok\n\
             1000 169.254.10.10 tcp ok\n\
             1250 169.254.10.10 udp fail\n\
             1300 169.254.10.10 tcp ok\n\
             3250 169.254.10.10 udp fail\n\
             4000 169.254.10.10 udp ok\n\
             1000 169.254.10.11 udp fail\n\
             2500 169.254.10.11 udp fail\n",
        )
        .unwrap();
        let gaps = gaps(&log);
        assert_eq!(
            gaps[0],
            Gap {
                listener: "169.254.10.10".into(),
                protocol: "udp".into(),
                longest: Duration::from_millis(3000),
            }
        );
        // Never answered: from its first lookup to its last.
        assert_eq!(gaps[1].listener, "169.254.10.11");
        assert_eq!(gaps[1].longest, Duration::from_millis(1500));
        assert_eq!(gaps[2].longest, Duration::from_millis(300));
        assert!(parse_log("12 x udp maybe").is_err());
    }
}
