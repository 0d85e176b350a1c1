//! `harness lab status` and `harness lab logs`: a running lab seen from another terminal
//! (see `crate::inspect`).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::inspect::{LabView, health, logs, status};
use anyhow::Context;

use super::output::Output;

/// Prints the lab's status; exits 0 when it is healthy, 1 when something is wrong (each thing
/// named on stderr, `crate::inspect::health`), and fails when the lab does not run.
pub fn status(number: u8, output: Output) -> anyhow::Result<ExitCode> {
    let view = LabView::open(number)?;
    let status = status::collect(&view);
    match output {
        Output::Text => print!("{}", status::render_text(&status)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&status)?),
    }
    let problems = health::problems(&status);
    if problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("{} is not healthy:", status.lab);
    for problem in &problems {
        eprintln!("  {problem}");
    }
    Ok(ExitCode::FAILURE)
}

/// Collects the lab's logs into `out` (default under `$LAB_ARTIFACTS_DIR/lab-logs/`) and prints
/// the directory on stdout.
pub fn logs(number: u8, out: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let view = LabView::open(number)?;
    let dir = out.unwrap_or_else(|| logs::default_dir(number));
    eprintln!(
        "==> collecting the logs of {} into {} ...",
        view.name,
        dir.display()
    );
    let dir = logs::collect(&view, &dir).with_context(|| format!("creating {}", dir.display()))?;
    let index = std::fs::read_to_string(dir.join(crate::vm::evidence::INDEX_FILE)).unwrap_or_default();
    eprint!("{index}");
    println!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}
