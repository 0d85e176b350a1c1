//! Where a VM test's time goes: getting a node (a lab, a join or a resume), waiting for states (a
//! boot, a Node Ready, a wait's retries), and the rest — checking. The scenarios print it as one
//! line at their end ([`report_line`]); `harness bench suite` reads it back from nextest's JUnit
//! report ([`PhaseTimes::parse_last`]).
//!
//! The clock is one per process (nextest runs each test in a process of its own). Phases nest:
//! time counts for the outermost one, so a wait inside getting a node is getting a node.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A phase of a test other than checking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Bringing a lab and a joined node up: a real join or a resume from a checkpoint.
    GettingNode,
    /// Waiting for a state to be reached: a VM's boot, a Node Ready, a wait's retries.
    Waiting,
}

#[derive(Default)]
struct Clock {
    started: Option<Instant>,
    current: Option<Phase>,
    getting_node: Duration,
    waiting: Duration,
}

static CLOCK: Mutex<Clock> = Mutex::new(Clock {
    started: None,
    current: None,
    getting_node: Duration::ZERO,
    waiting: Duration::ZERO,
});

fn clock() -> std::sync::MutexGuard<'static, Clock> {
    CLOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts the test's clock (the first phase entered starts it too). Idempotent.
pub fn start() {
    clock().started.get_or_insert_with(Instant::now);
}

/// Counts the time until it is dropped for `phase`, unless an outer phase is counting already.
#[must_use = "the phase ends when this is dropped"]
pub struct InPhase {
    counting: Option<(Phase, Instant)>,
}

/// Enters `phase` until the returned guard is dropped (also across `.await`s).
pub fn enter(phase: Phase) -> InPhase {
    let mut clock = clock();
    clock.started.get_or_insert_with(Instant::now);
    if clock.current.is_some() {
        return InPhase { counting: None };
    }
    clock.current = Some(phase);
    InPhase {
        counting: Some((phase, Instant::now())),
    }
}

impl Drop for InPhase {
    fn drop(&mut self) {
        let Some((phase, since)) = self.counting.take() else {
            return;
        };
        let mut clock = clock();
        clock.current = None;
        match phase {
            Phase::GettingNode => clock.getting_node += since.elapsed(),
            Phase::Waiting => clock.waiting += since.elapsed(),
        }
    }
}

/// Runs `f` in `phase`.
pub fn in_phase<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    let _phase = enter(phase);
    f()
}

/// A test's time by phase, seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhaseTimes {
    pub getting_node: f64,
    pub waiting: f64,
    pub checking: f64,
}

/// What [`report_line`] starts with.
pub const REPORT_PREFIX: &str = "==> phases:";

impl PhaseTimes {
    /// The times so far (checking: the rest since the clock started).
    pub fn now() -> PhaseTimes {
        let clock = clock();
        let total = clock.started.map(|s| s.elapsed()).unwrap_or_default();
        let checking = total.saturating_sub(clock.getting_node + clock.waiting);
        PhaseTimes {
            getting_node: clock.getting_node.as_secs_f64(),
            waiting: clock.waiting.as_secs_f64(),
            checking: checking.as_secs_f64(),
        }
    }

    /// The line a test prints: `==> phases: getting a node 44.2 s, waiting 30.1 s, checking 20.0 s`.
    pub fn line(&self) -> String {
        format!(
            "{REPORT_PREFIX} getting a node {:.1} s, waiting {:.1} s, checking {:.1} s",
            self.getting_node, self.waiting, self.checking
        )
    }

    /// The last report line in a test's output, if it printed one.
    pub fn parse_last(output: &str) -> Option<PhaseTimes> {
        output.lines().rev().find_map(|line| {
            let rest = line.trim().strip_prefix(REPORT_PREFIX)?;
            let mut secs = rest.split(',').map(|part| {
                let part = part.trim().strip_suffix(" s")?;
                part.rsplit(' ').next()?.parse::<f64>().ok()
            });
            Some(PhaseTimes {
                getting_node: secs.next()??,
                waiting: secs.next()??,
                checking: secs.next()??,
            })
        })
    }
}

/// The report of this process's clock, as a test prints it at its end.
pub fn report_line() -> String {
    PhaseTimes::now().line()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_line_parses_back_and_the_last_one_counts() {
        let first = PhaseTimes {
            getting_node: 44.25,
            waiting: 3.0,
            checking: 120.5,
        };
        let second = PhaseTimes {
            getting_node: 1.0,
            waiting: 2.0,
            checking: 3.0,
        };
        let output = format!("==> x\n{}\nnoise\n  {}\n", first.line(), second.line());
        assert_eq!(PhaseTimes::parse_last(&output), Some(second));
        let parsed = PhaseTimes::parse_last(&first.line()).unwrap();
        assert!((parsed.getting_node - 44.2).abs() < 0.11 && parsed.checking == 120.5);
        assert_eq!(PhaseTimes::parse_last("==> phases: getting a node x s"), None);
        assert_eq!(PhaseTimes::parse_last("nothing"), None);
    }

    #[test]
    fn nested_phases_count_for_the_outermost_and_the_rest_is_checking() {
        // The clock is the process's (nextest runs this test in a process of its own).
        start();
        {
            let _node = enter(Phase::GettingNode);
            let _inner = enter(Phase::Waiting);
            std::thread::sleep(Duration::from_millis(300));
        }
        in_phase(Phase::Waiting, || std::thread::sleep(Duration::from_millis(20)));
        std::thread::sleep(Duration::from_millis(10));
        let times = PhaseTimes::now();
        assert!(times.getting_node >= 0.3, "{times:?}");
        // The wait inside getting the node (300 ms) is not counted as waiting.
        assert!(times.waiting >= 0.02 && times.waiting < 0.2, "{times:?}");
        assert!(times.checking >= 0.01, "{times:?}");
    }
}
