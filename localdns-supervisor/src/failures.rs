//! The rule that ends the supervisor: `threshold` failed health checks within `window` (10 in 600 s).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What one more failure means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Still fewer than the threshold within the window: keep going.
    Tolerate { failures_in_window: usize },
    /// The threshold is reached: give up.
    GiveUp { failures_in_window: usize },
}

/// Failures seen within a sliding time window. Passed checks do not clear it: only time does.
#[derive(Debug, Clone)]
pub struct FailureWindow {
    window: Duration,
    threshold: usize,
    failures: VecDeque<Instant>,
}

impl FailureWindow {
    /// AKS LocalDNS's rule: 10 failures within 600 s.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(600);
    pub const DEFAULT_THRESHOLD: usize = 10;

    pub fn new(window: Duration, threshold: usize) -> Self {
        FailureWindow {
            window,
            threshold: threshold.max(1),
            failures: VecDeque::new(),
        }
    }

    /// Records a failure at `now` and says whether to give up.
    pub fn record_failure(&mut self, now: Instant) -> Verdict {
        while let Some(&oldest) = self.failures.front() {
            if now.saturating_duration_since(oldest) >= self.window {
                self.failures.pop_front();
            } else {
                break;
            }
        }
        self.failures.push_back(now);
        let failures_in_window = self.failures.len();
        if failures_in_window >= self.threshold {
            Verdict::GiveUp { failures_in_window }
        } else {
            Verdict::Tolerate { failures_in_window }
        }
    }
}

impl Default for FailureWindow {
    fn default() -> Self {
        FailureWindow::new(Self::DEFAULT_WINDOW, Self::DEFAULT_THRESHOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_secs(12);

    #[test]
    fn tenth_failure_within_the_window_gives_up_and_not_before() {
        let start = Instant::now();
        let mut window = FailureWindow::default();
        for i in 0..9 {
            assert_eq!(
                window.record_failure(start + TICK * i),
                Verdict::Tolerate {
                    failures_in_window: i as usize + 1
                }
            );
        }
        assert_eq!(
            window.record_failure(start + TICK * 9),
            Verdict::GiveUp {
                failures_in_window: 10
            }
        );
    }

    #[test]
    fn failures_older_than_the_window_are_forgotten() {
        let start = Instant::now();
        let mut window = FailureWindow::default();
        // One failure every 67 s: the first has left the window when the tenth arrives (603 s).
        let spacing = Duration::from_secs(67);
        for i in 0..20 {
            let verdict = window.record_failure(start + spacing * i);
            assert!(
                matches!(verdict, Verdict::Tolerate { .. }),
                "failure {i}: {verdict:?}"
            );
        }
    }

    #[test]
    fn failures_exactly_one_window_apart_do_not_count_together() {
        let start = Instant::now();
        let mut window = FailureWindow::new(Duration::from_secs(10), 2);
        assert!(matches!(window.record_failure(start), Verdict::Tolerate { .. }));
        assert!(matches!(
            window.record_failure(start + Duration::from_secs(10)),
            Verdict::Tolerate { .. }
        ));
        assert!(matches!(
            window.record_failure(start + Duration::from_secs(19)),
            Verdict::GiveUp { .. }
        ));
    }

    #[test]
    fn passes_in_between_do_not_reset_the_count() {
        // The type only sees failures: a pass between them changes nothing, which is the rule.
        let start = Instant::now();
        let mut window = FailureWindow::new(Duration::from_secs(600), 3);
        window.record_failure(start);
        window.record_failure(start + TICK * 5);
        assert_eq!(
            window.record_failure(start + TICK * 10),
            Verdict::GiveUp {
                failures_in_window: 3
            }
        );
    }
}
