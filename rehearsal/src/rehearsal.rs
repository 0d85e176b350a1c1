//! The whole rehearsal: the workflow's jobs in the order their `needs` allow, each matrix
//! combination a job of its own, one job at a time; a job whose need failed is skipped; then
//! each job's result and time and the cache store's size against GitHub's limit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::artifact_store::ArtifactStore;
use crate::cache_store::{CacheStore, GITHUB_LIMIT_BYTES, human};
use crate::expression::{Context, substitute};
use crate::job_runner::{JobOutcome, JobPlan, JobReport, Runner, Slot, clock};
use crate::step_tools::MachineTools;
use crate::workflow::{Env, Workflow};

/// What to rehearse and where.
#[derive(Clone, Debug)]
pub struct Options {
    pub workflow: PathBuf,
    /// The repository whose committed `HEAD` each job checks out.
    pub repo: PathBuf,
    pub sha: String,
    /// Everything the rehearsal keeps: caches, the runner's slot, each run's logs and artifacts.
    pub store: PathBuf,
    /// Only these jobs (by id), with every job they need; all when empty.
    pub jobs: Vec<String>,
    /// Only matrix combinations with these values (`key=value`).
    pub matrix: Vec<(String, String)>,
    /// The cache store's limit (GitHub's: 10 GiB per repository).
    pub cache_limit_bytes: u64,
    pub heartbeat: Duration,
}

/// Why a rehearsal cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RehearsalError {
    #[error(transparent)]
    Workflow(#[from] crate::workflow::WorkflowError),
    #[error(transparent)]
    Cache(#[from] crate::cache_store::CacheStoreError),
    #[error("{0}")]
    Plan(String),
}

/// The jobs to run, in an order their needs allow, each with its matrix combination.
pub fn plan(
    workflow: &Workflow,
    only: &[String],
    matrix_filter: &[(String, String)],
) -> Result<Vec<JobPlan>, RehearsalError> {
    for id in only {
        if workflow.job(id).is_none() {
            let known: Vec<&str> = workflow.jobs.iter().map(|j| j.id.as_str()).collect();
            return Err(RehearsalError::Plan(format!(
                "no job `{id}` in the workflow (it has {})",
                known.join(", ")
            )));
        }
    }
    let mut wanted: Vec<String> = if only.is_empty() {
        workflow.jobs.iter().map(|j| j.id.clone()).collect()
    } else {
        only.to_vec()
    };
    let mut i = 0;
    while i < wanted.len() {
        let job = workflow.job(&wanted[i]).expect("checked above");
        for need in &job.needs {
            if !wanted.contains(need) {
                wanted.push(need.clone());
            }
        }
        i += 1;
    }
    let mut ordered: Vec<String> = Vec::new();
    while ordered.len() < wanted.len() {
        let next = workflow
            .jobs
            .iter()
            .find(|j| {
                wanted.contains(&j.id)
                    && !ordered.contains(&j.id)
                    && j.needs.iter().all(|n| ordered.contains(n))
            })
            .ok_or_else(|| RehearsalError::Plan("the jobs' needs form a cycle".into()))?;
        ordered.push(next.id.clone());
    }
    let mut plans = Vec::new();
    for id in ordered {
        let job = workflow.job(&id).expect("planned from the workflow");
        let combos = if job.matrix.is_empty() {
            vec![Env::new()]
        } else {
            job.matrix.clone()
        };
        for matrix in combos {
            if !job.matrix.is_empty() && !matrix_filter.iter().all(|(k, v)| matrix.get(k) == Some(v)) {
                continue;
            }
            let title = match &job.name {
                Some(name) => title_of(workflow, &job.id, name, &matrix)?,
                None => job.id.clone(),
            };
            plans.push(JobPlan {
                job: job.clone(),
                matrix,
                title,
            });
        }
    }
    Ok(plans)
}

fn title_of(workflow: &Workflow, id: &str, name: &str, matrix: &Env) -> Result<String, RehearsalError> {
    let env = Env::new();
    let context = Context {
        workflow: &workflow.name,
        job_id: id,
        matrix,
        env: &env,
        workspace: Path::new("/nonexistent"),
        runner_temp: Path::new("/nonexistent"),
        sha: "",
    };
    substitute(name, &context).map_err(|e| RehearsalError::Plan(format!("jobs.{id}.name: {e}")))
}

/// Runs the rehearsal: every planned job, one at a time; the reports in order.
pub fn rehearse(options: &Options) -> Result<Vec<JobReport>, RehearsalError> {
    let workflow = Workflow::read(&options.workflow)?;
    let plans = plan(&workflow, &options.jobs, &options.matrix)?;
    let run_dir = options.store.join("runs").join(run_name());
    let caches = CacheStore::open(&options.store.join("caches"), options.cache_limit_bytes)?;
    let artifacts = ArtifactStore::at(&run_dir.join("artifacts"));
    let tools = MachineTools::find();
    let runner_dir = options.store.join("runner");
    let runner = Runner {
        workflow: &workflow,
        repo: options.repo.clone(),
        sha: options.sha.clone(),
        slot: Slot {
            home: runner_dir.join("home"),
            workspace: runner_dir.join("work").join(repo_name(&options.repo)),
            temp: runner_dir.join("temp"),
        },
        caches: &caches,
        artifacts: &artifacts,
        tools: &tools,
        logs: run_dir.join("logs"),
        heartbeat: options.heartbeat,
    };
    println!(
        "==> [{}] rehearsing {} at {} ({} jobs); logs and artifacts in {}",
        clock(),
        options.workflow.display(),
        &options.sha[..options.sha.len().min(12)],
        plans.len(),
        run_dir.display()
    );
    let mut reports: Vec<JobReport> = Vec::new();
    for (index, plan) in plans.iter().enumerate() {
        let failed_need = plan.job.needs.iter().find(|need| {
            reports
                .iter()
                .zip(&plans)
                .any(|(report, p)| &p.job.id == *need && report.outcome != JobOutcome::Passed)
        });
        let report = match failed_need {
            Some(need) => JobReport {
                title: plan.title.clone(),
                outcome: JobOutcome::Skipped {
                    why: format!("it needs `{need}`, which did not pass"),
                },
                secs: 0.0,
                logs: run_dir.join("logs"),
            },
            None => {
                println!(
                    "==> [{}] job {}/{}: {}",
                    clock(),
                    index + 1,
                    plans.len(),
                    plan.title
                );
                runner.run_job(plan, index + 1)
            }
        };
        println!("==> [{}] {}: {}", clock(), report.title, describe(&report));
        reports.push(report);
    }
    print_summary(&reports, &caches, options.cache_limit_bytes);
    Ok(reports)
}

fn describe(report: &JobReport) -> String {
    match &report.outcome {
        JobOutcome::Passed => format!("passed in {}", minutes(report.secs)),
        JobOutcome::Failed { step, why } => format!(
            "FAILED at step `{step}` after {}: {why} (logs: {})",
            minutes(report.secs),
            report.logs.display()
        ),
        JobOutcome::Skipped { why } => format!("skipped: {why}"),
    }
}

fn print_summary(reports: &[JobReport], caches: &CacheStore, limit: u64) {
    println!("\n| job | result | time |\n|---|---|---|");
    for report in reports {
        let result = match &report.outcome {
            JobOutcome::Passed => "passed".to_string(),
            JobOutcome::Failed { step, .. } => format!("FAILED at `{step}`"),
            JobOutcome::Skipped { .. } => "skipped".to_string(),
        };
        println!("| {} | {result} | {} |", report.title, minutes(report.secs));
    }
    let total: f64 = reports.iter().map(|r| r.secs).sum();
    println!("| all jobs, one at a time | | {} |", minutes(total));
    println!(
        "\ncaches ({} of {} allowed; GitHub's limit is {}):",
        human(caches.total_bytes()),
        human(limit),
        human(GITHUB_LIMIT_BYTES)
    );
    for entry in caches.entries() {
        println!("  {}  {}", human(entry.bytes), entry.key);
    }
}

fn minutes(secs: f64) -> String {
    format!("{}:{:02}", secs as u64 / 60, secs as u64 % 60)
}

fn run_name() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("run-{secs}")
}

fn repo_name(repo: &Path) -> String {
    repo.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repo".into())
}

/// Whether every job passed.
pub fn all_passed(reports: &[JobReport]) -> bool {
    reports.iter().all(|r| r.outcome == JobOutcome::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow() -> Workflow {
        Workflow::parse(
            Path::new("ci.yml"),
            "jobs:\n  lint:\n    steps: [{run: x}]\n  archive:\n    steps: [{run: x}]\n  test:\n    name: test (${{ matrix.slug }})\n    needs: archive\n    strategy: {matrix: {include: [{slug: a}, {slug: b}]}}\n    steps: [{run: x}]\n",
        )
        .unwrap()
    }

    #[test]
    fn jobs_come_in_the_order_their_needs_allow_with_one_per_matrix_combination() {
        let titles: Vec<String> = plan(&workflow(), &[], &[])
            .unwrap()
            .into_iter()
            .map(|p| p.title)
            .collect();
        assert_eq!(titles, ["lint", "archive", "test (a)", "test (b)"]);
    }

    #[test]
    fn a_chosen_job_brings_what_it_needs_and_the_matrix_filter_narrows() {
        let filter = [("slug".to_string(), "b".to_string())];
        let titles: Vec<String> = plan(&workflow(), &["test".into()], &filter)
            .unwrap()
            .into_iter()
            .map(|p| p.title)
            .collect();
        assert_eq!(titles, ["archive", "test (b)"]);
        let err = plan(&workflow(), &["nope".into()], &[]).unwrap_err().to_string();
        assert!(
            err.contains("no job `nope`") && err.contains("lint, archive, test"),
            "{err}"
        );
    }
}
