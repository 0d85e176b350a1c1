//! The project's own workflow (.github/workflows/ci.yml) as the rehearsal reads it: its jobs in
//! their needs' order with one job per matrix combination, every action it uses one the
//! rehearsal knows, and every expression in it one the rehearsal evaluates.

use std::path::{Path, PathBuf};

use ci_rehearsal::expression::{Context, substitute};
use ci_rehearsal::job_runner::KNOWN_ACTIONS;
use ci_rehearsal::rehearsal::plan;
use ci_rehearsal::workflow::{Env, StepAction, Workflow};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn workflow() -> Workflow {
    Workflow::read(&repo_root().join(".github/workflows/ci.yml")).unwrap()
}

#[test]
fn lint_and_archive_come_first_then_one_test_job_per_matrix_entry() {
    let workflow = workflow();
    let plans = plan(&workflow, &[], &[]).unwrap();
    let ids: Vec<&str> = plans.iter().map(|p| p.job.id.as_str()).collect();
    assert_eq!(ids[..2], ["lint", "archive"]);
    let tests: Vec<&str> = plans
        .iter()
        .filter(|p| p.job.id == "test")
        .map(|p| p.title.as_str())
        .collect();
    assert_eq!(tests.len(), workflow.job("test").unwrap().matrix.len());
    assert!(
        tests.len() >= 2 && tests.iter().all(|t| t.starts_with("test (")),
        "{tests:?}"
    );
    assert_eq!(workflow.job("test").unwrap().needs, ["archive"]);
}

#[test]
fn every_action_the_workflow_uses_is_one_the_rehearsal_knows() {
    for job in workflow().jobs {
        for step in job.steps {
            if let StepAction::Uses { action, .. } = &step.action {
                let name = action.split('@').next().unwrap();
                assert!(
                    KNOWN_ACTIONS.contains(&name),
                    "jobs.{}: `{action}` is not rehearsed",
                    job.id
                );
            }
        }
    }
}

#[test]
fn every_expression_in_every_job_evaluates() {
    let workflow = workflow();
    let root = repo_root();
    for plan in plan(&workflow, &[], &[]).unwrap() {
        let env = Env::new();
        let context = Context {
            workflow: &workflow.name,
            job_id: &plan.job.id,
            matrix: &plan.matrix,
            env: &env,
            workspace: &root,
            runner_temp: Path::new("/tmp"),
            sha: "0000",
        };
        for step in &plan.job.steps {
            let mut texts: Vec<&String> = step.env.values().collect();
            match &step.action {
                StepAction::Run { script, .. } => texts.push(script),
                StepAction::Uses { with, .. } => texts.extend(with.values()),
            }
            for text in texts {
                let value = substitute(text, &context)
                    .unwrap_or_else(|e| panic!("{} · {}: {e}", plan.title, step.title()));
                assert!(!value.contains("${{"), "{value}");
            }
        }
    }
}
