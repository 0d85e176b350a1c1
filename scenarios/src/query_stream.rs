//! What clients feel while something happens on the node: a loop in the VM (a transient unit, so
//! it outlives the command that starts it) asks both LocalDNS listeners the health name over UDP
//! and over TCP, each lookup as a stub resolver makes it (1 s per try, two tries), one round about
//! every quarter second, and logs each lookup with its time and whether a reply came. It starts no
//! process (bash's `/dev/udp` and `/dev/tcp`, `$EPOCHREALTIME`, `read -t`), so it takes little of
//! the emulated CPU the recovery it watches runs on. Read from the log: per listener and protocol,
//! the longest time between two answers (the gap), and the lookups left unanswered.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use harness::vm::Vm;

use crate::dns::{CLUSTER_LISTENER, NODE_LISTENER};
use crate::recovery_wait::{tcp_dns_query, udp_dns_query};

const UNIT: &str = "scenario-query-stream";
const DIR: &str = "/run/scenario-query-stream";

/// A running query stream.
pub struct QueryStream {
    started: Instant,
}

/// One lookup of the stream.
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

/// What the stream saw.
#[derive(Debug)]
pub struct Streamed {
    pub log: Vec<Lookup>,
    pub took: Duration,
}

/// The guest bash script of the loop.
fn script() -> String {
    let health = agent::corefile::HEALTH_NAME;
    let (tcp, udp) = (tcp_dns_query(health), udp_dns_query(health));
    format!(
        r#"exec {{nap}}<> <(:)
ask() {{
	local fd reply ok
	{{ exec {{fd}}<>"/dev/$2/$1/53"; }} 2>/dev/null || return 1
	if [[ $2 == tcp ]]; then
		printf '{tcp}' >&"$fd" 2>/dev/null || {{ exec {{fd}}<&-; return 1; }}
		LC_ALL=C read -r -t 1 -N 2 -u "$fd" reply 2>/dev/null
	else
		printf '{udp}' >&"$fd" 2>/dev/null || {{ exec {{fd}}<&-; return 1; }}
		LC_ALL=C read -r -t 1 -N 1 -u "$fd" reply 2>/dev/null
	fi
	ok=$?
	exec {{fd}}<&-
	return $ok
}}
while [[ ! -e {DIR}/stop ]]; do
	for l in {NODE_LISTENER} {CLUSTER_LISTENER}; do
		for p in udp tcp; do
			if ask $l $p || ask $l $p; then r=ok; else r=fail; fi
			t=${{EPOCHREALTIME/./}}
			printf '%s %s %s %s\n' $((t / 1000)) $l $p $r >> {DIR}/log
		done
	done
	read -t 0.25 -u "$nap" _ || true
done
printf 'done\n' > {DIR}/finished
"#
    )
}

impl QueryStream {
    /// Starts the loop on `vm` and waits until it logged its first round.
    pub fn start(vm: &Vm) -> anyhow::Result<QueryStream> {
        vm.run(&format!(
            "systemctl stop {UNIT} 2>/dev/null; systemctl reset-failed {UNIT} 2>/dev/null; \
             rm -rf {DIR} && mkdir -p {DIR} && : > {DIR}/log && cat > {DIR}/loop.sh <<'EOF'\n{}EOF\n\
             systemd-run --quiet --unit={UNIT} bash {DIR}/loop.sh",
            script()
        ))?;
        let stream = QueryStream {
            started: Instant::now(),
        };
        stream.wait_for(vm, &format!("test $(wc -l < {DIR}/log) -ge 4"), "its first round")?;
        Ok(stream)
    }

    /// Stops the loop and returns its log.
    pub fn finish(self, vm: &Vm) -> anyhow::Result<Streamed> {
        vm.run(&format!("touch {DIR}/stop"))?;
        self.wait_for(vm, &format!("test -e {DIR}/finished"), "the loop to stop")?;
        let log = parse_log(&vm.run(&format!("cat {DIR}/log"))?)?;
        vm.run(&format!("rm -rf {DIR}"))?;
        Ok(Streamed {
            log,
            took: self.started.elapsed(),
        })
    }

    fn wait_for(&self, vm: &Vm, test: &str, what: &str) -> anyhow::Result<()> {
        let _waiting = harness::phase_clock::enter(harness::phase_clock::Phase::Waiting);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !vm.run_unchecked(test)?.success() {
            ensure!(
                Instant::now() < deadline,
                "the query stream ({UNIT} in the VM) did not reach {what} within 60 s: {}",
                vm.run_unchecked(&format!(
                    "systemctl status {UNIT} --no-pager; tail -n 8 {DIR}/log"
                ))?
                .stdout_text()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok(())
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
                        .with_context(|| format!("the stream's log line {line:?}: its time"))?,
                    listener: listener.to_string(),
                    protocol: protocol.to_string(),
                    answered: result == "ok",
                }),
                _ => anyhow::bail!(
                    "the stream's log line {line:?} is not `<ms> <listener> <protocol> ok|fail`"
                ),
            }
        })
        .collect()
}

/// Per listener and protocol, the longest time between two answered lookups (a lookup that got
/// none stands in for the answer it did not get, so a series never answered counts from its
/// first lookup to its last); the longest first.
pub fn gaps(log: &[Lookup]) -> Vec<Gap> {
    let mut series: BTreeMap<(&str, &str), Vec<&Lookup>> = BTreeMap::new();
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

impl Streamed {
    /// The longest gap over both listeners and protocols (`None` without lookups).
    pub fn worst_gap(&self) -> Option<Gap> {
        gaps(&self.log).into_iter().next()
    }

    /// The lookups that got no answer.
    pub fn unanswered(&self) -> usize {
        self.log.iter().filter(|l| !l.answered).count()
    }

    /// One line for a scenario's output: lookups, the unanswered ones, the longest gap.
    pub fn figure(&self, during: &str) -> String {
        format!(
            "figure: {during}: {} lookups over UDP and TCP in {:.1}s, {} unanswered, longest gap {}",
            self.log.len(),
            self.took.as_secs_f64(),
            self.unanswered(),
            self.worst_gap()
                .map_or_else(|| "none".to_string(), |g| g.to_string())
        )
    }

    /// Fails when there was no lookup, or when a listener went unanswered over a protocol longer
    /// than `bound`, naming the unanswered lookups.
    pub fn ensure_gaps_within(&self, bound: Duration, during: &str) -> anyhow::Result<()> {
        ensure!(!self.log.is_empty(), "no lookup was made during {during}");
        if let Some(gap) = self.worst_gap().filter(|g| g.longest > bound) {
            let unanswered: Vec<String> = self
                .log
                .iter()
                .filter(|l| !l.answered)
                .map(|l| format!("{} ms: {} over {}", l.at_ms, l.listener, l.protocol))
                .collect();
            anyhow::bail!(
                "during {during} clients went unanswered {gap}, more than {bound:?}; the unanswered lookups:\n{}",
                unanswered.join("\n")
            );
        }
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
        let streamed = Streamed {
            log,
            took: Duration::from_secs(4),
        };
        assert_eq!(streamed.unanswered(), 4);
        assert!(streamed.ensure_gaps_within(Duration::from_secs(3), "t").is_ok());
        let err = streamed
            .ensure_gaps_within(Duration::from_millis(2999), "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("3.0s (169.254.10.10 over udp)"), "{err}");
        assert!(parse_log("12 x udp maybe").is_err());
    }

    #[test]
    fn the_loop_starts_no_process_while_it_asks() {
        let script = script();
        for process in ["dig", "date", "sleep", "grep", "mv "] {
            assert!(!script.contains(process), "{process} in:\n{script}");
        }
        assert!(script.contains("/dev/$2/$1/53") && script.contains("EPOCHREALTIME"));
    }
}
