//! The executor of a [`DeployPlan`] on a VM: copy the agent and its config in, run `start`
//! under a deadline with its output kept in the guest and its progress lines shown as they come
//! ([`super::stream`]), and collect the evidence on failure.

use std::path::Path;
use std::time::{Duration, Instant};

use super::DeployedNode;
use super::error::{DeployError, StartFailed};
use super::evidence::{self, GUEST_LOG_DIR, GUEST_START_STDERR, GUEST_START_STDOUT};
use super::plan::{self, DeployPlan, GUEST_CONFIG};
use crate::vm::{ExitKind, Vm, VmError};

/// The shell line that runs `start` (`$@`) under coreutils' `timeout`, its stdout and stderr
/// going to files in the guest so they survive a deadline. Prints the guest's uptime at start.
pub fn start_script(limit: Duration) -> String {
    format!(
        "mkdir -p {GUEST_LOG_DIR} && cut -d' ' -f1 /proc/uptime && \
         exec timeout --kill-after=10 {secs} \"$@\" >{GUEST_START_STDOUT} 2>{GUEST_START_STDERR}",
        secs = limit.as_secs().max(1)
    )
}

/// Deploys `plan` onto `vm` with the agent binary at `agent` on the host; evidence of a failure
/// goes under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`.
pub fn deploy_plan(vm: &Vm, plan: DeployPlan, agent: &Path, test: &str) -> Result<DeployedNode, DeployError> {
    super::agent_binary::ensure_fresh(agent, &crate::repo::root())?;
    let node = plan.node_name.clone();
    let files = |plan: &DeployPlan| vec![("deployed-agent-config.json", plan.config_json.clone())];
    let vm_err = |doing: &str, source: VmError, plan: &DeployPlan| {
        let reason = format!("deploying node {node}: {doing}: {source}");
        let saved = files(plan);
        let saved: Vec<(&str, &str)> = saved.iter().map(|(f, t)| (*f, t.as_str())).collect();
        DeployError::Vm {
            node: node.clone(),
            doing: doing.to_string(),
            evidence: evidence::collect(vm, test, &reason, &saved),
            source: Box::new(source),
        }
    };
    let bin_dir = plan
        .guest_agent
        .rsplit_once('/')
        .map(|(dir, _)| dir.to_string())
        .unwrap_or_else(|| "/".into());
    let config_dir = GUEST_CONFIG.rsplit_once('/').map(|(d, _)| d).unwrap_or("/");
    vm.argv(vec![
        "mkdir".into(),
        "-p".into(),
        bin_dir,
        config_dir.into(),
        GUEST_LOG_DIR.into(),
    ])
    .run()
    .map_err(|e| vm_err("making the agent's directories", e, &plan))?;
    let copied = Instant::now();
    vm.copy_in(agent, &plan.guest_agent)
        .map_err(|e| vm_err(&format!("copying {} in", agent.display()), e, &plan))?;
    vm.write_file(GUEST_CONFIG, plan.config_json.as_bytes(), 0o600)
        .map_err(|e| vm_err(&format!("writing {GUEST_CONFIG}"), e, &plan))?;
    eprintln!(
        "==> node {node}: agent and config copied to VM {} in {:.1}s; running `{}` ...",
        vm.name(),
        copied.elapsed().as_secs_f64(),
        plan.start_argv().join(" ")
    );

    let limit = plan::start_deadline(vm.deadlines());
    let mut argv = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        start_script(limit),
        "sh".into(),
    ];
    argv.extend(plan.start_argv());
    // `start`'s progress lines, shown as they are written (a spinner on a terminal).
    let step = crate::progress::Step::start(format!("`start` on node {node}"));
    let out = crate::vm::stream::run_showing(
        vm.agent(),
        &argv,
        limit + Duration::from_secs(60),
        GUEST_START_STDOUT,
        &|line| step.line(line),
    )
    .map_err(|e| vm_err("running `start`", e, &plan))?;
    let took = step.finish();
    let read = |path: &str| {
        vm.read_file(path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("(could not read {path}: {e})"))
    };
    let (stdout, stderr) = (read(GUEST_START_STDOUT), read(GUEST_START_STDERR));
    let start_uptime = out.stdout_text().trim().parse::<f64>().ok();
    let timed_out = matches!(out.status, ExitKind::Code(124 | 137));
    if !out.success() || start_uptime.is_none() {
        let how = if timed_out {
            format!("timed out (limit {limit:?})")
        } else {
            format!("failed with {}{}", out.status, shell_stderr(&out.stderr_text()))
        };
        let command = plan.start_argv().join(" ");
        let reason = format!("node {node}: `{command}` {how}");
        let mut saved = files(&plan);
        saved.push(("start.stdout", stdout.clone()));
        saved.push(("start.stderr", stderr.clone()));
        let saved: Vec<(&str, &str)> = saved.iter().map(|(f, t)| (*f, t.as_str())).collect();
        return Err(DeployError::Start(Box::new(StartFailed {
            node,
            command,
            how,
            status: out.status,
            took,
            stdout,
            stderr,
            evidence: evidence::collect(vm, test, &reason, &saved),
        })));
    }
    eprintln!("==> node {node}: `start` finished in {:.1}s", took.as_secs_f64());
    Ok(DeployedNode {
        name: node,
        node_ip: plan.node_ip,
        pod_cidr: plan.pod_cidr.clone(),
        guest_agent: plan.guest_agent.clone(),
        config: plan.config,
        start_uptime: start_uptime.unwrap_or_default(),
        start_took: took,
        stdout,
        stderr,
    })
}

/// The wrapper shell's own complaint (e.g. `mkdir` failing), if any.
fn shell_stderr(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!(" ({})", stderr.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the start script on this host with `command` in place of the agent.
    fn run_script(limit: Duration, command: &[&str], dir: &Path) -> (std::process::Output, String, String) {
        // The output files live in the log directory: moving it moves them.
        assert!(
            GUEST_START_STDOUT.starts_with(GUEST_LOG_DIR) && GUEST_START_STDERR.starts_with(GUEST_LOG_DIR)
        );
        let script = start_script(limit).replace(GUEST_LOG_DIR, &dir.display().to_string());
        let out = agent::exec::run_unchecked(
            std::process::Command::new("/bin/sh")
                .args(["-c", &script, "sh"])
                .args(command),
        )
        .unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        (out, read("start.stdout"), read("start.stderr"))
    }

    #[test]
    fn start_script_keeps_stdout_and_stderr_apart_and_passes_the_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let (out, stdout, stderr) = run_script(
            Duration::from_secs(30),
            &["sh", "-c", "echo to-out; echo to-err >&2; exit 3"],
            dir.path(),
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!((stdout.as_str(), stderr.as_str()), ("to-out\n", "to-err\n"));
        // Its own stdout is the uptime at start.
        let uptime = String::from_utf8_lossy(&out.stdout);
        assert!(uptime.trim().parse::<f64>().is_ok(), "{uptime:?}");
    }

    #[test]
    fn start_script_stops_the_command_at_its_deadline_with_status_124() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let (out, _, _) = run_script(Duration::from_secs(1), &["sleep", "30"], dir.path());
        assert_eq!(out.status.code(), Some(124));
        assert!(started.elapsed() < Duration::from_secs(15));
    }
}
