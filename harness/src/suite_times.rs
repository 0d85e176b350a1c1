//! Where a test run's time went, from nextest's JUnit report (`--profile ci` writes
//! `<target dir>/nextest/ci/junit.xml`): each VM test's start and wall time, the `vm` group's two
//! lanes (`.config/nextest.toml`) busy and idle, and the run's span. `harness bench suite` prints
//! it (docs/perf.md, "Where the suite's time goes").

use std::path::Path;

use serde::Deserialize;

use crate::phase_clock::PhaseTimes;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The lanes of the `vm` test group (`max-threads` in `.config/nextest.toml`).
pub const VM_LANES: usize = 2;

/// Why a report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SuiteTimesError {
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a JUnit report nextest writes")]
    Parse {
        path: String,
        #[source]
        source: quick_xml::DeError,
    },
    #[error("{path}: test {test} has the timestamp {timestamp:?}, not an RFC 3339 time")]
    Timestamp {
        path: String,
        test: String,
        timestamp: String,
    },
}

#[derive(Debug, Deserialize)]
struct Testsuites {
    #[serde(rename = "testsuite", default)]
    suites: Vec<Testsuite>,
}

#[derive(Debug, Deserialize)]
struct Testsuite {
    #[serde(rename = "@name")]
    name: String,
    #[serde(rename = "testcase", default)]
    cases: Vec<Testcase>,
}

#[derive(Debug, Deserialize)]
struct Testcase {
    #[serde(rename = "@name")]
    name: String,
    #[serde(rename = "@timestamp", default)]
    timestamp: String,
    #[serde(rename = "@time", default)]
    time: f64,
    #[serde(default)]
    failure: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    /// The test's stderr (nextest stores passing tests' output with `store-success-output`).
    #[serde(rename = "system-err", default)]
    system_err: Option<String>,
}

/// One test of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct TestTime {
    /// nextest's binary id (`scenarios::lifecycle`, `harness::kind_cluster`, `agent`).
    pub binary: String,
    pub name: String,
    /// Seconds from the run's first test start.
    pub start: f64,
    /// Wall time, seconds.
    pub secs: f64,
    pub passed: bool,
    /// In the `vm` test group.
    pub vm: bool,
    /// Getting a node, waiting, checking: the last `==> phases:` line of its stderr
    /// ([`crate::phase_clock`]), when it printed one and the report stored it.
    pub phases: Option<PhaseTimes>,
}

/// A run's times.
#[derive(Clone, Debug, PartialEq)]
pub struct SuiteTimes {
    pub tests: Vec<TestTime>,
}

/// How the `vm` group's lanes were used.
#[derive(Clone, Debug, PartialEq)]
pub struct Lanes {
    /// First VM test start to last VM test end.
    pub span: f64,
    /// The VM tests' wall times added up.
    pub busy: f64,
    /// Lane-seconds with no VM test in them within the span (`lanes × span − busy`, where at
    /// most `lanes` tests count at once).
    pub idle: f64,
    /// Seconds at the end of the span with one lane busy and the other idle.
    pub tail_alone: f64,
}

/// Whether a test is in the `vm` group: the filters of `.config/nextest.toml` (every scenario
/// binary; the harness's `lab_guest_tests`, `controlplane*`, `kind_cluster` and `vm_*` binaries).
pub fn is_vm_test(binary: &str, name: &str) -> bool {
    let Some((package, bin)) = binary.split_once("::") else {
        return false;
    };
    match package {
        "scenarios" => true,
        "harness" => {
            (bin == "lab_guest_tests"
                && name == "agent_and_harness_guest_tests_pass_inside_one_lab_vm_on_debians_kernel")
                || bin.starts_with("controlplane")
                || bin == "kind_cluster"
                || bin.starts_with("vm_")
        }
        _ => false,
    }
}

impl SuiteTimes {
    /// Reads a JUnit report.
    pub fn read(path: &Path) -> Result<SuiteTimes, SuiteTimesError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SuiteTimesError::Read {
            path: shown.clone(),
            source,
        })?;
        SuiteTimes::parse(&text, &shown)
    }

    /// Parses a JUnit report's text (`path` only names it in errors).
    pub fn parse(text: &str, path: &str) -> Result<SuiteTimes, SuiteTimesError> {
        let report: Testsuites = quick_xml::de::from_str(text).map_err(|source| SuiteTimesError::Parse {
            path: path.to_string(),
            source,
        })?;
        let mut raw = Vec::new();
        for suite in report.suites {
            for case in suite.cases {
                let at = OffsetDateTime::parse(&case.timestamp, &Rfc3339).map_err(|_| {
                    SuiteTimesError::Timestamp {
                        path: path.to_string(),
                        test: format!("{} {}", suite.name, case.name),
                        timestamp: case.timestamp.clone(),
                    }
                })?;
                raw.push((suite.name.clone(), case, at));
            }
        }
        let first = raw.iter().map(|(_, _, at)| *at).min();
        let tests = raw
            .into_iter()
            .map(|(binary, case, at)| TestTime {
                vm: is_vm_test(&binary, &case.name),
                start: first.map_or(0.0, |f| (at - f).as_seconds_f64()),
                secs: case.time,
                passed: case.failure.is_none() && case.error.is_none(),
                phases: case.system_err.as_deref().and_then(PhaseTimes::parse_last),
                name: case.name,
                binary,
            })
            .collect();
        Ok(SuiteTimes { tests })
    }

    /// First test start to last test end, seconds.
    pub fn span(&self) -> f64 {
        self.tests.iter().map(|t| t.start + t.secs).fold(0.0, f64::max)
    }

    /// The VM tests, longest first.
    pub fn vm_tests(&self) -> Vec<&TestTime> {
        let mut vm: Vec<&TestTime> = self.tests.iter().filter(|t| t.vm).collect();
        vm.sort_by(|a, b| b.secs.total_cmp(&a.secs));
        vm
    }

    /// The VM tests' phases added up (those that printed them) and how many did.
    pub fn phases_total(&self) -> (PhaseTimes, usize) {
        let with: Vec<PhaseTimes> = self
            .tests
            .iter()
            .filter(|t| t.vm)
            .filter_map(|t| t.phases)
            .collect();
        let sum = |f: fn(&PhaseTimes) -> f64| with.iter().map(f).sum();
        let total = PhaseTimes {
            getting_node: sum(|p| p.getting_node),
            waiting: sum(|p| p.waiting),
            checking: sum(|p| p.checking),
        };
        (total, with.len())
    }

    /// How the `vm` group's `lanes` were used (see [`Lanes`]).
    pub fn lanes(&self, lanes: usize) -> Lanes {
        let vm: Vec<&TestTime> = self.tests.iter().filter(|t| t.vm).collect();
        if vm.is_empty() {
            return Lanes {
                span: 0.0,
                busy: 0.0,
                idle: 0.0,
                tail_alone: 0.0,
            };
        }
        // Sweep over start and end events; within each interval count the tests running.
        let mut events: Vec<(f64, i32)> = vm
            .iter()
            .flat_map(|t| [(t.start, 1), (t.start + t.secs, -1)])
            .collect();
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (begin, end) = (events[0].0, events[events.len() - 1].0);
        let (mut running, mut at, mut used) = (0i32, begin, 0.0);
        let mut alone_since: Option<f64> = None;
        for (time, delta) in events {
            used += (time - at) * f64::from(running.clamp(0, lanes as i32));
            at = time;
            let before = running;
            running += delta;
            if running == 1 && before != 1 {
                alone_since = Some(time);
            } else if running >= 2 {
                alone_since = None;
            }
        }
        let span = end - begin;
        Lanes {
            span,
            busy: vm.iter().map(|t| t.secs).sum(),
            idle: (lanes as f64 * span - used).max(0.0),
            tail_alone: alone_since.map_or(0.0, |since| end - since),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="4" failures="1">
  <testsuite name="agent" tests="1">
    <testcase name="unit" classname="agent" timestamp="2026-01-01T00:00:00.000+00:00" time="0.5"/>
  </testsuite>
  <testsuite name="scenarios::bootstrap" tests="2">
    <testcase name="join::a" classname="scenarios::bootstrap" timestamp="2026-01-01T00:00:01.000+00:00" time="100">
      <system-err>==&gt; resuming ...
==&gt; phases: getting a node 60.0 s, waiting 10.5 s, checking 29.5 s
</system-err>
    </testcase>
    <testcase name="join::b" classname="scenarios::bootstrap" timestamp="2026-01-01T00:00:01.000+00:00" time="40">
      <failure type="test failure">boom</failure>
    </testcase>
  </testsuite>
  <testsuite name="harness::kind_cluster" tests="1">
    <testcase name="kind" classname="harness::kind_cluster" timestamp="2026-01-01T00:00:41.000+00:00" time="20"/>
  </testsuite>
</testsuites>
"#;

    #[test]
    fn a_report_gives_each_tests_start_time_and_outcome() {
        let times = SuiteTimes::parse(REPORT, "junit.xml").unwrap();
        assert_eq!(times.tests.len(), 4);
        let b = times.tests.iter().find(|t| t.name == "join::b").unwrap();
        assert_eq!((b.start, b.secs, b.passed, b.vm), (1.0, 40.0, false, true));
        assert!(!times.tests[0].vm, "a unit test is not a VM test");
        let a = times.tests.iter().find(|t| t.name == "join::a").unwrap();
        let phases = a.phases.expect("join::a printed its phases");
        assert_eq!(
            (phases.getting_node, phases.waiting, phases.checking),
            (60.0, 10.5, 29.5)
        );
        assert_eq!(b.phases, None, "join::b printed none");
        let (total, with) = times.phases_total();
        assert_eq!((total.getting_node, with), (60.0, 1));
        assert_eq!(times.span(), 101.0);
        let names: Vec<&str> = times.vm_tests().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["join::a", "join::b", "kind"]);
    }

    #[test]
    fn the_lanes_idle_time_and_the_lone_tail_are_measured() {
        let times = SuiteTimes::parse(REPORT, "junit.xml").unwrap();
        // 1–41 s two tests; 41–61 s two (a and kind); 61–101 s a alone.
        let lanes = times.lanes(2);
        assert_eq!(lanes.span, 100.0);
        assert_eq!(lanes.busy, 160.0);
        assert_eq!(lanes.idle, 40.0);
        assert_eq!(lanes.tail_alone, 40.0);
    }

    #[test]
    fn the_vm_group_is_the_one_nextest_toml_names() {
        assert!(is_vm_test("scenarios::lifecycle", "x"));
        assert!(is_vm_test("harness::vm_lifecycle", "x"));
        assert!(is_vm_test("harness::controlplane_vm", "x"));
        assert!(is_vm_test("harness::kind_cluster", "x"));
        assert!(!is_vm_test("harness::kind_engine", "x"));
        assert!(!is_vm_test("scenarios", "tests::unit"));
        assert!(!is_vm_test("harness::lab_guest_tests", "another_test"));
    }

    #[test]
    fn a_bad_report_or_timestamp_is_named() {
        let err = SuiteTimes::parse("not xml <", "r.xml").unwrap_err().to_string();
        assert!(err.contains("r.xml"), "{err}");
        let bad = REPORT.replace("2026-01-01T00:00:41.000+00:00", "yesterday");
        let err = SuiteTimes::parse(&bad, "r.xml").unwrap_err().to_string();
        assert!(err.contains("yesterday") && err.contains("kind"), "{err}");
    }
}
