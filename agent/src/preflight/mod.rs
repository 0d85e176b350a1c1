//! Preflight: checks that this host can run the configured node, and the
//! report of docs/design.md §8 `{status, checks[{name,target,severity,message,ignored}], summary}`.
//!
//! A check is a function from the [`Context`] to its findings. To add one,
//! write it in its own file under `preflight/` and add one line to [`CHECKS`].

pub mod artifact;
pub mod conntrack;
pub mod listeners;
pub mod localdns_config;
pub mod localdns_upstreams;

use std::path::PathBuf;

use serde::Serialize;

use crate::validate::{Config, Problems};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Ok,
    Warning,
    Error,
}

impl Severity {
    /// The word the text report uses (the same as in JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One finding of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The check's name, e.g. `localdns-config`.
    pub name: String,
    /// What was checked (a file, an address, a config section).
    pub target: String,
    pub severity: Severity,
    pub message: String,
    /// The operator asked to ignore this check (`--ignore NAME`): it does not fail the run.
    pub ignored: bool,
}

impl Finding {
    pub fn new(
        name: &str,
        target: impl Into<String>,
        severity: Severity,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            name: name.to_owned(),
            target: target.into(),
            severity,
            message: message.into(),
            ignored: false,
        }
    }
}

/// What checks may look at. Checks read the host themselves (through `exec`).
pub struct Context {
    /// The config file, as given.
    pub config_path: PathBuf,
    /// The checked config, or every problem with it.
    pub config: Result<Config, Problems>,
}

impl Context {
    /// The config when it is valid (checks that need it report nothing otherwise:
    /// `localdns-config` already reports the problems).
    pub fn valid_config(&self) -> Option<&Config> {
        self.config.as_ref().ok()
    }

    /// Whether downloads come from the offline bundle (some checks are stricter then).
    pub fn offline(&self) -> bool {
        self.valid_config().is_some_and(|c| c.offline_source.is_some())
    }
}

/// A registered check.
pub struct Check {
    pub name: &'static str,
    pub run: fn(&Context) -> Vec<Finding>,
}

impl Check {
    pub const fn new(name: &'static str, run: fn(&Context) -> Vec<Finding>) -> Self {
        Check { name, run }
    }
}

/// Every check, in the order they run. Add a check with one line here.
pub const CHECKS: &[Check] = &[
    Check::new(localdns_config::NAME, localdns_config::run),
    Check::new(localdns_upstreams::NAME, localdns_upstreams::run),
    Check::new(artifact::NAME, artifact::run),
    Check::new(conntrack::NAME, conntrack::run),
    Check::new(listeners::NAME, listeners::run),
];

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The worst severity among findings that are not ignored.
    pub status: Severity,
    pub checks: Vec<Finding>,
    pub summary: String,
}

/// Runs `checks` and builds the report; names in `ignore` are marked ignored.
pub fn run(checks: &[Check], ctx: &Context, ignore: &[String]) -> Report {
    let mut findings = Vec::new();
    for check in checks {
        let mut found = (check.run)(ctx);
        if found.is_empty() {
            found.push(Finding::new(check.name, "", Severity::Ok, "nothing to check"));
        }
        for mut f in found {
            f.ignored = ignore.iter().any(|i| i == check.name);
            findings.push(f);
        }
    }
    Report::new(findings)
}

impl Report {
    pub fn new(checks: Vec<Finding>) -> Self {
        let count = |s: Severity| checks.iter().filter(|f| f.severity == s && !f.ignored).count();
        let ignored = checks
            .iter()
            .filter(|f| f.ignored && f.severity != Severity::Ok)
            .count();
        let status = checks
            .iter()
            .filter(|f| !f.ignored)
            .map(|f| f.severity)
            .max()
            .unwrap_or(Severity::Ok);
        let summary = format!(
            "{} checks: {} ok, {} warnings, {} errors, {} ignored",
            checks.len(),
            count(Severity::Ok),
            count(Severity::Warning),
            count(Severity::Error),
            ignored
        );
        Report {
            status,
            checks,
            summary,
        }
    }

    /// One line per finding, then the summary.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for f in &self.checks {
            let sev = f.severity.as_str();
            let ignored = if f.ignored { " (ignored)" } else { "" };
            let target = if f.target.is_empty() {
                String::new()
            } else {
                format!(" [{}]", f.target)
            };
            out.push_str(&format!("{sev:<7} {}{target}: {}{ignored}\n", f.name, f.message));
        }
        out.push_str(&format!("{}: {}\n", self.status.as_str(), self.summary));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(_: &Context) -> Vec<Finding> {
        vec![Finding::new("failing", "x", Severity::Error, "broken")]
    }

    fn warning(_: &Context) -> Vec<Finding> {
        vec![Finding::new("warning", "y", Severity::Warning, "odd")]
    }

    fn ctx() -> Context {
        Context {
            config_path: "c.json".into(),
            config: Err(Problems::default()),
        }
    }

    #[test]
    fn status_is_the_worst_finding_not_ignored() {
        let checks = [
            Check {
                name: "failing",
                run: failing,
            },
            Check {
                name: "warning",
                run: warning,
            },
        ];
        assert_eq!(run(&checks, &ctx(), &[]).status, Severity::Error);
        let report = run(&checks, &ctx(), &["failing".into()]);
        assert_eq!(report.status, Severity::Warning);
        assert!(report.checks[0].ignored);
        assert_eq!(report.summary, "2 checks: 0 ok, 1 warnings, 0 errors, 1 ignored");
    }

    #[test]
    fn json_report_has_the_documented_fields() {
        let report = run(
            &[Check {
                name: "failing",
                run: failing,
            }],
            &ctx(),
            &[],
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["status"], "error");
        assert_eq!(
            json["checks"][0],
            serde_json::json!({"name": "failing", "target": "x", "severity": "error", "message": "broken", "ignored": false})
        );
        assert!(json["summary"].is_string());
    }
}
