//! One job of the workflow run as a runner runs it: a fresh clone of the commit, an empty HOME
//! and temp directory, its steps in order with their `if:` conditions and the job's timeout,
//! the `uses:` steps it knows done locally, and its caches saved at the end.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::artifact_store::{ArtifactStore, IfNoFiles};
use crate::cache_store::{CacheStore, Restored, human};
use crate::expression::{Context, condition_holds, substitute};
use crate::step_tools::MachineTools;
use crate::workflow::{Env, Job, Step, StepAction, Workflow};

/// The `uses:` actions the rehearsal does itself.
pub const KNOWN_ACTIONS: [&str; 6] = [
    "actions/checkout",
    "dtolnay/rust-toolchain",
    "actions/setup-go",
    "actions/cache",
    "actions/upload-artifact",
    "actions/download-artifact",
];

/// A job with one matrix combination.
#[derive(Clone, Debug)]
pub struct JobPlan {
    pub job: Job,
    pub matrix: Env,
    /// The job's name as the runner shows it (`name:` with the matrix filled in).
    pub title: String,
}

/// How a job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    Passed,
    Failed { step: String, why: String },
    Skipped { why: String },
}

/// A job's outcome and wall time.
#[derive(Clone, Debug)]
pub struct JobReport {
    pub title: String,
    pub outcome: JobOutcome,
    pub secs: f64,
    /// Where its step logs are.
    pub logs: PathBuf,
}

/// The fixed places a job runs in, emptied before each job: every job sees the same paths, as
/// every runner of a container job sees `/github/home` and its workspace.
#[derive(Clone, Debug)]
pub struct Slot {
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub temp: PathBuf,
}

/// What every job of a rehearsal shares.
pub struct Runner<'a> {
    pub workflow: &'a Workflow,
    /// The repository rehearsed and the commit its jobs check out.
    pub repo: PathBuf,
    pub sha: String,
    pub slot: Slot,
    pub caches: &'a CacheStore,
    pub artifacts: &'a ArtifactStore,
    pub tools: &'a MachineTools,
    /// Where each job's logs go (`<logs>/<job>/`).
    pub logs: PathBuf,
    /// How often a long step says it is still running.
    pub heartbeat: Duration,
}

/// A cache step's save at the end of the job.
struct PendingSave {
    key: String,
    paths: Vec<PathBuf>,
}

/// The environment passed through from this machine: how it reaches the package registries.
fn passes_through(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_PROXY")
        || upper.contains("CA_BUNDLE")
        || upper.contains("CA_CERTS")
        || upper.contains("CAINFO")
        || upper.starts_with("SSL_CERT")
        || upper == "LANG"
        || upper == "TERM"
}

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Runner<'_> {
    /// Runs `plan`; `index` numbers its log directory.
    pub fn run_job(&self, plan: &JobPlan, index: usize) -> JobReport {
        let started = Instant::now();
        let logs = self.logs.join(format!("{index:02}-{}", file_name(&plan.title)));
        let outcome = match self.steps_of(plan, &logs, started) {
            Ok(()) => JobOutcome::Passed,
            Err((step, why)) => JobOutcome::Failed { step, why },
        };
        JobReport {
            title: plan.title.clone(),
            outcome,
            secs: started.elapsed().as_secs_f64(),
            logs,
        }
    }

    fn steps_of(&self, plan: &JobPlan, logs: &Path, started: Instant) -> Result<(), (String, String)> {
        let setup = |why: String| ("set up job".to_string(), why);
        for dir in [&self.slot.home, &self.slot.temp, &self.slot.workspace] {
            if dir.exists() {
                std::fs::remove_dir_all(dir)
                    .map_err(|e| setup(format!("emptying {}: {e}", dir.display())))?;
            }
        }
        for dir in [&self.slot.home, &self.slot.temp, &self.slot.workspace, logs] {
            std::fs::create_dir_all(dir).map_err(|e| setup(format!("creating {}: {e}", dir.display())))?;
        }
        let job = &plan.job;
        let deadline = job.timeout_minutes.map(|m| Duration::from_secs(m * 60));
        let has_go_step = job
            .steps
            .iter()
            .any(|s| uses_action(s) == Some("actions/setup-go"));
        let mut path_dirs: Vec<PathBuf> = Vec::new();
        let mut failed: Option<(String, String)> = None;
        let mut saves: Vec<PendingSave> = Vec::new();
        for (number, step) in job.steps.iter().enumerate() {
            let title = step.title();
            let runs = condition_holds(step.condition.as_deref(), failed.is_some())
                .map_err(|e| (title.clone(), e.to_string()))?;
            if !runs {
                println!(
                    "    - {title}: skipped (if: {})",
                    step.condition.as_deref().unwrap_or("success()")
                );
                continue;
            }
            let step_started = Instant::now();
            println!(
                "==> [{}] {} · step {}/{}: {title}",
                clock(),
                plan.title,
                number + 1,
                job.steps.len()
            );
            let log = logs.join(format!("{:02}-{}.log", number + 1, file_name(&title)));
            let env = self
                .step_env(plan, step, &path_dirs)
                .map_err(|why| (title.clone(), why))?;
            let context = self.context(plan, &env);
            let result = match &step.action {
                StepAction::Run { script, shell } => {
                    let remaining = deadline.map(|d| d.saturating_sub(started.elapsed()));
                    self.run_script(
                        script,
                        shell.as_deref(),
                        &env,
                        &context,
                        &log,
                        remaining,
                        !has_go_step,
                        number,
                    )
                }
                StepAction::Uses { action, with } => {
                    let with = with
                        .iter()
                        .map(|(k, v)| substitute(v, &context).map(|v| (k.clone(), v)))
                        .collect::<Result<Env, _>>()
                        .map_err(|e| e.to_string());
                    with.and_then(|with| self.run_action(action, &with, &mut path_dirs, &mut saves))
                }
            };
            match result {
                Ok(()) => println!("    passed in {}", seconds(step_started.elapsed())),
                Err(why) => {
                    println!("    FAILED in {}: {why}", seconds(step_started.elapsed()));
                    if log.is_file() {
                        print_tail(&log, 25);
                        println!("    (whole log: {})", log.display());
                    }
                    failed.get_or_insert((title, why));
                }
            }
        }
        if failed.is_none() {
            for save in saves.into_iter().rev() {
                match self.caches.save(&save.key, &save.paths) {
                    Ok((Some(bytes), evicted)) => {
                        println!("    cache saved: {} ({})", save.key, human(bytes));
                        for entry in evicted {
                            println!(
                                "    cache evicted beyond the limit: {} ({})",
                                entry.key,
                                human(entry.bytes)
                            );
                        }
                    }
                    Ok((None, _)) => println!(
                        "    cache not saved: {} (already there, or no path exists)",
                        save.key
                    ),
                    Err(e) => failed = Some(("post cache".into(), e.to_string())),
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// The step's environment: the runner's own, then the workflow's, the job's and the step's.
    fn step_env(&self, plan: &JobPlan, step: &Step, path_dirs: &[PathBuf]) -> Result<Env, String> {
        let mut env: Env = std::env::vars()
            .filter(|(name, _)| passes_through(name))
            .collect();
        let mut path: Vec<String> = path_dirs.iter().rev().map(|d| d.display().to_string()).collect();
        path.push(SYSTEM_PATH.to_string());
        for (name, value) in [
            ("PATH", path.join(":")),
            ("HOME", self.slot.home.display().to_string()),
            ("CI", "true".into()),
            ("GITHUB_ACTIONS", "true".into()),
            ("GITHUB_JOB", plan.job.id.clone()),
            ("GITHUB_SHA", self.sha.clone()),
            ("GITHUB_WORKSPACE", self.slot.workspace.display().to_string()),
            ("RUNNER_OS", "Linux".into()),
            ("RUNNER_TEMP", self.slot.temp.display().to_string()),
            ("RUSTUP_HOME", self.tools.rustup_home.display().to_string()),
        ] {
            env.insert(name.to_string(), value);
        }
        for layer in [&self.workflow.env, &plan.job.env, &step.env] {
            for (name, value) in layer {
                let value =
                    substitute(value, &self.context(plan, &env)).map_err(|e| format!("env {name}: {e}"))?;
                env.insert(name.clone(), value);
            }
        }
        Ok(env)
    }

    fn context<'c>(&'c self, plan: &'c JobPlan, env: &'c Env) -> Context<'c> {
        Context {
            workflow: &self.workflow.name,
            job_id: &plan.job.id,
            matrix: &plan.matrix,
            env,
            workspace: &self.slot.workspace,
            runner_temp: &self.slot.temp,
            sha: &self.sha,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_script(
        &self,
        script: &str,
        shell: Option<&str>,
        env: &Env,
        context: &Context,
        log: &Path,
        remaining: Option<Duration>,
        hide_go: bool,
        number: usize,
    ) -> Result<(), String> {
        let script = substitute(script, context).map_err(|e| e.to_string())?;
        let shell = shell.or(self.workflow.default_shell.as_deref()).unwrap_or("bash");
        if shell != "bash" {
            return Err(format!("shell `{shell}` is not one the rehearsal runs (bash)"));
        }
        let file = self.slot.temp.join(format!("step-{}.sh", number + 1));
        std::fs::write(&file, &script).map_err(|e| format!("writing {}: {e}", file.display()))?;
        let output = File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let errors = output.try_clone().map_err(|e| e.to_string())?;
        let bash = ["bash", "--noprofile", "--norc", "-eo", "pipefail"];
        let mut command = match self.tools.go_root.as_ref().filter(|_| hide_go) {
            // No Go step: this machine's Go is hidden under an empty read-only tmpfs, in a mount
            // namespace of the step's own.
            Some(go_root) => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                    .arg("mount -t tmpfs -o ro,size=4k,mode=0555 rehearsal-no-go \"$0\" && exec \"$@\"")
                    .arg(go_root)
                    .args(bash);
                c
            }
            None => {
                let mut c = Command::new(bash[0]);
                c.args(&bash[1..]);
                c
            }
        };
        command
            .arg(&file)
            .current_dir(&self.slot.workspace)
            .env_clear()
            .envs(env)
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            .process_group(0);
        let mut child = command.spawn().map_err(|e| format!("starting bash: {e}"))?;
        let started = Instant::now();
        let mut said = Instant::now();
        loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("bash {status}"))
                };
            }
            if remaining.is_some_and(|r| started.elapsed() >= r) {
                // SAFETY: killpg on the child's own process group, which it leads.
                unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) };
                let _ = child.wait();
                return Err("the job's timeout-minutes ran out (its processes killed)".into());
            }
            if said.elapsed() >= self.heartbeat {
                said = Instant::now();
                let last = last_line(log).unwrap_or_default();
                println!(
                    "    ... running for {}; last line: {last}",
                    seconds(started.elapsed())
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn run_action(
        &self,
        action: &str,
        with: &Env,
        path_dirs: &mut Vec<PathBuf>,
        saves: &mut Vec<PendingSave>,
    ) -> Result<(), String> {
        let name = action.split('@').next().unwrap_or(action);
        match name {
            "actions/checkout" => self.checkout(),
            "dtolnay/rust-toolchain" => {
                let components: Vec<String> = with
                    .get("components")
                    .map(|c| {
                        c.split(',')
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty())
                            .collect()
                    })
                    .unwrap_or_default();
                let bin = self
                    .tools
                    .install_rust(&self.slot.home, &components)
                    .map_err(|e| e.to_string())?;
                path_dirs.push(bin);
                Ok(())
            }
            "actions/setup-go" => {
                let (bin, note) = self
                    .tools
                    .install_go(with.get("go-version").map(String::as_str))
                    .map_err(|e| e.to_string())?;
                if let Some(note) = note {
                    println!("    note: {note}");
                }
                path_dirs.push(bin);
                Ok(())
            }
            "actions/cache" => {
                let key = with.get("key").ok_or("actions/cache without a key")?.clone();
                let restore_keys: Vec<String> = lines(with.get("restore-keys"));
                let paths: Vec<PathBuf> = lines(with.get("path"))
                    .iter()
                    .map(|p| self.expand_home(p))
                    .collect();
                match self
                    .caches
                    .restore(&key, &restore_keys)
                    .map_err(|e| e.to_string())?
                {
                    Restored::Exact { key, bytes } => println!("    cache hit: {key} ({})", human(bytes)),
                    Restored::Partial { key: found, bytes } => {
                        println!(
                            "    cache restored from {found} ({}); saved as {key} at the end",
                            human(bytes)
                        );
                        saves.push(PendingSave { key, paths });
                    }
                    Restored::Miss => {
                        println!("    cache miss: {key}; saved at the end");
                        saves.push(PendingSave { key, paths });
                    }
                }
                Ok(())
            }
            "actions/upload-artifact" => {
                let artifact = with.get("name").map(String::as_str).unwrap_or("artifact");
                let paths: Vec<PathBuf> = lines(with.get("path"))
                    .iter()
                    .map(|p| self.slot.workspace.join(p))
                    .collect();
                let if_no_files = IfNoFiles::parse(with.get("if-no-files-found").map(String::as_str));
                let bytes = self
                    .artifacts
                    .upload(artifact, &paths, if_no_files)
                    .map_err(|e| e.to_string())?;
                println!(
                    "    artifact {artifact}: {} at {}",
                    human(bytes),
                    self.artifacts.path_of(artifact).display()
                );
                Ok(())
            }
            "actions/download-artifact" => {
                let artifact = with.get("name").ok_or("download-artifact without a name")?;
                let into = with
                    .get("path")
                    .map_or(self.slot.workspace.clone(), |p| self.slot.workspace.join(p));
                let bytes = self
                    .artifacts
                    .download(artifact, &into)
                    .map_err(|e| e.to_string())?;
                println!(
                    "    artifact {artifact}: {} into {}",
                    human(bytes),
                    into.display()
                );
                Ok(())
            }
            other => Err(format!("the rehearsal does not know the action `{other}`")),
        }
    }

    /// A fresh clone of the commit: every file gets the time of the checkout, as on a runner.
    fn checkout(&self) -> Result<(), String> {
        let workspace = &self.slot.workspace;
        let mut clone = Command::new("git");
        clone
            .args(["clone", "--quiet", "--no-hardlinks"])
            .arg(&self.repo)
            .arg(workspace);
        agent::exec::run(&mut clone).map_err(|e| e.to_string())?;
        let mut checkout = Command::new("git");
        checkout
            .arg("-C")
            .arg(workspace)
            .args(["checkout", "--quiet", "--detach", &self.sha]);
        agent::exec::run(&mut checkout).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn expand_home(&self, path: &str) -> PathBuf {
        match path.strip_prefix("~/") {
            Some(rest) => self.slot.home.join(rest),
            None => self.slot.workspace.join(path),
        }
    }
}

/// The `uses:` action of a step without its `@ref`.
fn uses_action(step: &Step) -> Option<&str> {
    match &step.action {
        StepAction::Uses { action, .. } => action.split('@').next(),
        StepAction::Run { .. } => None,
    }
}

/// The non-empty lines of a multi-line input.
fn lines(value: Option<&String>) -> Vec<String> {
    value
        .map(|v| {
            v.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `text` as a file name: letters, digits and dashes.
pub fn file_name(text: &str) -> String {
    let name: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let name = name
        .split('-')
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    name.chars().take(60).collect()
}

fn last_line(log: &Path) -> Option<String> {
    let file = File::open(log).ok()?;
    BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|l| !l.trim().is_empty())
        .last()
}

fn print_tail(log: &Path, count: usize) {
    let Ok(file) = File::open(log) else { return };
    let lines: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    for line in &lines[lines.len().saturating_sub(count)..] {
        println!("    | {line}");
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.0} s", duration.as_secs_f64())
}

/// The wall clock as `HH:MM:SS` (UTC).
pub fn clock() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{:02}:{:02}:{:02}", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_become_file_names() {
        assert_eq!(
            file_name("test (localdns join, reboots, wiring)"),
            "test-localdns-join-reboots-wiring"
        );
    }

    #[test]
    fn only_the_ways_to_the_registries_pass_through() {
        assert!(
            passes_through("HTTPS_PROXY")
                && passes_through("SSL_CERT_FILE")
                && passes_through("CURL_CA_BUNDLE")
        );
        assert!(!passes_through("PATH") && !passes_through("CARGO_TARGET_DIR") && !passes_through("GOPATH"));
    }
}
