//! Checks that share one node: each runs in turn under its name; a failing one saves the node's
//! evidence under `$LAB_ARTIFACTS_DIR/<test>/<check>/` and the next one still runs; the case
//! fails naming every check that failed. `SCENARIO_CHECK=<part of a name>` runs only the checks
//! whose name holds it (one that matches none is an error listing the names).

use crate::node::JoinedNode;

/// Names part of the checks to run (all when unset or empty).
pub const ONLY_ENV: &str = "SCENARIO_CHECK";

/// The checks whose name holds `wanted` (all for `None`); none is an error naming the checks.
pub fn chosen(checks: &[Check], wanted: Option<&str>) -> anyhow::Result<Vec<Check>> {
    let Some(wanted) = wanted else {
        return Ok(checks.to_vec());
    };
    let picked: Vec<Check> = checks
        .iter()
        .filter(|(name, _)| name.contains(wanted.trim()))
        .copied()
        .collect();
    anyhow::ensure!(
        !picked.is_empty(),
        "{ONLY_ENV}={wanted:?} names none of this case's checks: {}",
        checks
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(picked)
}

/// A check: its name (a sentence, as a test's) and what it runs on the node.
pub type Check = (&'static str, fn(&mut JoinedNode) -> anyhow::Result<()>);

/// Runs `checks` in order on `node`; fails after the last one when any failed, naming each with
/// its error and evidence.
pub fn run_in_turn(node: &mut JoinedNode, checks: &[Check]) -> anyhow::Result<()> {
    let wanted = std::env::var(ONLY_ENV).ok().filter(|w| !w.trim().is_empty());
    let checks = chosen(checks, wanted.as_deref())?;
    let mut failed = Vec::new();
    for (name, check) in &checks {
        let started = std::time::Instant::now();
        eprintln!("==> check {name} ...");
        match check(node) {
            Ok(()) => eprintln!(
                "==> check {name}: passed in {:.1}s",
                started.elapsed().as_secs_f64()
            ),
            Err(err) => {
                let reason = format!("{err:#}");
                eprintln!("==> check {name}: FAILED: {reason}");
                let dir = node.collect_evidence_under(name, &reason);
                failed.push(format!("{name}: {reason} (evidence in {})", dir.display()));
            }
        }
    }
    anyhow::ensure!(
        failed.is_empty(),
        "{} of {} checks failed:\n{}",
        failed.len(),
        checks.len(),
        failed.join("\n")
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(_: &mut JoinedNode) -> anyhow::Result<()> {
        Ok(())
    }

    const CHECKS: [Check; 2] = [("the_link_is_up", passes), ("metrics_are_served", passes)];

    #[test]
    fn all_checks_run_unless_a_part_of_a_name_picks_some_and_a_name_matching_none_is_an_error() {
        let names = |picked: Vec<Check>| picked.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(
            names(chosen(&CHECKS, None).unwrap()),
            ["the_link_is_up", "metrics_are_served"]
        );
        assert_eq!(
            names(chosen(&CHECKS, Some("metrics")).unwrap()),
            ["metrics_are_served"]
        );
        let err = chosen(&CHECKS, Some("notrack")).unwrap_err().to_string();
        assert!(
            err.contains("SCENARIO_CHECK") && err.contains("the_link_is_up, metrics_are_served"),
            "{err}"
        );
    }
}
