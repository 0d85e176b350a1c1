//! The figures of `harness bench supervisor-idle` ([`SupervisorIdleReport`], serialised for
//! `--output json`) and their text lines.

use serde::Serialize;

use super::LOOK_EVERY;

/// One round: the supervisor idle for the round's seconds.
#[derive(Debug, Clone, Serialize)]
pub struct IdleRound {
    /// The hung-CoreDNS queue rule on (the default) or off (`LOCALDNS_STUCK_AFTER_MS=0`).
    pub queue_rule_on: bool,
    /// TCP and UDP sockets the node namespace lists in `/proc/net`.
    pub sockets_listed: usize,
    /// The supervisor's utime+stime over the round.
    pub cpu_ticks: u64,
    pub cpu_millicores: f64,
}

impl IdleRound {
    /// The round's line of the text output.
    pub fn line(&self, seconds: u64) -> String {
        format!(
            "queue rule {:<3}  {:>5} sockets listed  supervisor CPU {:>6.2} m  ({} ticks in {seconds} s)",
            if self.queue_rule_on { "on" } else { "off" },
            self.sockets_listed,
            self.cpu_millicores,
            self.cpu_ticks
        )
    }
}

/// One look at both listeners' queues, timed in this process.
#[derive(Debug, Clone, Serialize)]
pub struct Look {
    pub sockets_listed: usize,
    /// The mean of [`super::LOOKS`] looks.
    pub one_look_us: f64,
    /// What a look every [`LOOK_EVERY`] costs, in millicores.
    pub millicores_at_look_interval: f64,
}

impl Look {
    /// The look's line of the text output.
    pub fn line(&self) -> String {
        format!(
            "one look at both listeners' queues with {:>5} sockets listed: {:>7.1} µs (every {LOOK_EVERY:?}: {:.2} m)",
            self.sockets_listed, self.one_look_us, self.millicores_at_look_interval
        )
    }
}

/// Everything `harness bench supervisor-idle` measured.
#[derive(Debug, Clone, Serialize)]
pub struct SupervisorIdleReport {
    pub seconds_per_round: u64,
    /// The sockets asked for (`--sockets`).
    pub extra_sockets: usize,
    pub clock_ticks_per_second: u64,
    pub look_every_ms: u64,
    /// In the order they ran: rule on, off with few sockets, then on, off with more.
    pub rounds: Vec<IdleRound>,
    /// With few sockets, then with more.
    pub looks: Vec<Look>,
}

/// The first line of the text output.
pub fn header(seconds: u64) -> String {
    format!("the supervisor idle (its health checks only), {seconds} s a round; its CPU in millicores (m)")
}

impl SupervisorIdleReport {
    /// The lines after the rounds': one per look.
    pub fn look_lines(&self) -> Vec<String> {
        self.looks.iter().map(Look::line).collect()
    }

    /// The whole text output.
    pub fn text(&self) -> String {
        let mut lines = vec![header(self.seconds_per_round)];
        lines.extend(self.rounds.iter().map(|r| r.line(self.seconds_per_round)));
        lines.extend(self.look_lines());
        lines.join("\n") + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_a_line_per_round_and_per_look() {
        let report = SupervisorIdleReport {
            seconds_per_round: 30,
            extra_sockets: 2000,
            clock_ticks_per_second: 100,
            look_every_ms: 200,
            rounds: vec![IdleRound {
                queue_rule_on: true,
                sockets_listed: 12,
                cpu_ticks: 7,
                cpu_millicores: 2.33,
            }],
            looks: vec![Look {
                sockets_listed: 12,
                one_look_us: 149.04,
                millicores_at_look_interval: 0.746,
            }],
        };
        assert_eq!(
            report.text(),
            "the supervisor idle (its health checks only), 30 s a round; its CPU in millicores (m)\n\
             queue rule on      12 sockets listed  supervisor CPU   2.33 m  (7 ticks in 30 s)\n\
             one look at both listeners' queues with    12 sockets listed:   149.0 µs (every 200ms: 0.75 m)\n"
        );
    }
}
