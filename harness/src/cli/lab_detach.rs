//! `harness lab up` without `--foreground`: like `kind create cluster`, it returns once the lab
//! runs and its node is Ready (or failed to join), leaving the lab running until
//! `harness lab down`. It starts the same command again with `--foreground` in a session of its
//! own (so the terminal closing does not end it), shows that command's output as it is written
//! (kept in `$LAB_RUN_DIR/lab-<n>.up.log` until `lab down`), and returns when the lab says it runs. Ctrl-C before
//! that tears the half-started lab down.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::lab::{owner, signals};

/// What the held lab tells the command that started it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Ready {
    /// Whether the node joined (a lab without a VM or cluster counts as joined).
    pub joined: bool,
    pub kubeconfig: Option<PathBuf>,
    pub owner_pid: u32,
}

/// Where the held lab's output goes: beside its run directory, kept until `lab down`.
pub fn log_path(number: u8) -> PathBuf {
    owner::run_dir(&format!("lab-{number}")).with_extension("up.log")
}

/// Written by the held lab once it runs (atomically: the starter reads it whole or not at all).
pub fn tell_ready(path: &Path, joined: bool, kubeconfig: Option<&Path>) -> anyhow::Result<()> {
    let ready = Ready {
        joined,
        kubeconfig: kubeconfig.map(Path::to_path_buf),
        owner_pid: std::process::id(),
    };
    let partial = path.with_extension("partial");
    std::fs::write(&partial, serde_json::to_string(&ready)?)
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Starts `lab up --foreground` (this command's own arguments) detached and waits until it runs.
pub fn up_detached(number: u8) -> anyhow::Result<ExitCode> {
    let log = log_path(number);
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let ready_file = log.with_extension("ready");
    let _ = std::fs::remove_file(&ready_file);
    let output = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut command = Command::new(std::env::current_exe().context("finding this executable")?);
    command
        .args(std::env::args_os().skip(1))
        .arg("--foreground")
        .arg("--ready-file")
        .arg(&ready_file)
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output);
    // SAFETY: setsid() is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
    }
    let stop = signals::subscribe();
    let mut child = command
        .spawn()
        .context("starting `harness lab up --foreground`")?;
    let mut shown = std::fs::File::open(&log).with_context(|| format!("reading {}", log.display()))?;
    let mut stopping = false;
    loop {
        show_new_output(&mut shown)?;
        if let Ok(text) = std::fs::read_to_string(&ready_file) {
            let ready: Ready =
                serde_json::from_str(&text).with_context(|| format!("reading {}", ready_file.display()))?;
            let _ = std::fs::remove_file(&ready_file);
            if let Some(kubeconfig) = &ready.kubeconfig {
                println!("{}", kubeconfig.display());
            }
            eprintln!(
                "==> lab-{number} keeps running (owner pid {}; its output: {}); `harness lab down --lab {number}` ends it",
                ready.owner_pid,
                log.display()
            );
            return Ok(if ready.joined {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        if let Some(status) = child.try_wait()? {
            show_new_output(&mut shown)?;
            if stopping {
                eprintln!("==> lab up stopped before the lab ran");
                return Ok(ExitCode::from(130));
            }
            bail!(
                "`harness lab up` ended ({status}) before the lab ran; its output: {}",
                log.display()
            );
        }
        if let Some(signal) = stop.arrived() {
            eprintln!("==> signal {signal}: stopping the lab being started ...");
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            stopping = true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Copies what was appended to the log since the last call to stderr.
fn show_new_output(log: &mut std::fs::File) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    log.read_to_end(&mut bytes)?;
    if !bytes.is_empty() {
        std::io::stderr().write_all(&bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ready_file_carries_the_outcome_and_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lab-3.ready");
        tell_ready(&path, false, Some(Path::new("/run/kubeconfig"))).unwrap();
        let ready: Ready = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(!ready.joined);
        assert_eq!(ready.kubeconfig.as_deref(), Some(Path::new("/run/kubeconfig")));
        assert_eq!(ready.owner_pid, std::process::id());
    }
}
