//! `harness vm ...`: reach a VM of a running lab (`harness lab up`) by name — run a command,
//! copy files, attach a shell. The VM is found through its run directory
//! (`$LAB_RUN_DIR/<lab>/vms/<name>/`, see `crate::vm::rundir`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::vm::{Accel, Deadlines, ExitKind, GuestAgent, RunDir};
use anyhow::{Context, bail};

use super::lab_arg::LabArg;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Run a command in a VM, print its output as it runs and exit with its status.
    ///
    /// One argument runs through `/bin/sh -c` (pipes, globs); several run as they are. Its
    /// stdout and stderr come out together on stdout, line by line, every 2 s or so.
    /// Example: `harness vm exec localdns -- systemctl status unbounded-localdns-network`.
    Exec {
        /// The VM's name (e.g. `localdns`).
        name: String,
        #[command(flatten)]
        at: LabArg,
        /// Give up after this many seconds (default: the accelerator's command deadline).
        #[arg(long)]
        timeout: Option<u64>,
        /// The command.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Copy a file into or out of a VM: `cp PATH NAME:/PATH` or `cp NAME:/PATH PATH`.
    ///
    /// Copies in keep the file's permission bits and replace the target atomically. With `-r`, a
    /// directory: the target is created as its copy, or, when it is a directory already, the
    /// copy goes inside it (as `cp -r` does).
    Cp {
        /// Copy a directory and everything in it.
        #[arg(short = 'r', long)]
        recursive: bool,
        /// The source: a host path, or `NAME:/PATH` in VM `NAME`.
        from: String,
        /// The destination: a host path, or `NAME:/PATH` in VM `NAME`.
        to: String,
        #[command(flatten)]
        at: LabArg,
    },
    /// Attach this terminal to the VM's root shell on its virtconsole (hvc0).
    /// Leave with Ctrl-].
    Shell {
        /// The VM's name (e.g. `localdns`).
        name: String,
        #[command(flatten)]
        at: LabArg,
    },
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Exec {
            name,
            at,
            timeout,
            command,
        } => exec(&name, Some(&at.name()), timeout, command),
        Command::Cp {
            from,
            to,
            at,
            recursive: false,
        } => cp(&from, &to, Some(&at.name())),
        Command::Cp {
            from,
            to,
            at,
            recursive: true,
        } => super::vm_copy_tree::copy_tree(&from, &to, &at.name()),
        Command::Shell { name, at } => shell(&name, Some(&at.name())),
    }
}

/// The agent of a running VM, with deadlines for the accelerator it was booted with.
pub(super) fn agent(name: &str, lab: Option<&str>) -> anyhow::Result<GuestAgent> {
    let run = RunDir::find(name, lab)?;
    let accel = run
        .read_info()
        .ok()
        .and_then(|info| Accel::parse(&info.accel).ok())
        .unwrap_or(Accel::Tcg);
    let deadlines = Deadlines::from_env(accel).map_err(anyhow::Error::msg)?;
    Ok(GuestAgent::for_run_dir(name, &run, deadlines))
}

fn exec(
    name: &str,
    lab: Option<&str>,
    timeout: Option<u64>,
    command: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let agent = agent(name, lab)?;
    let argv = match command.as_slice() {
        [one] => crate::vm::shell(one),
        _ => command,
    };
    let limit = timeout
        .map(Duration::from_secs)
        .unwrap_or(agent.deadlines().command);
    // The command writes its output to a file in the guest, shown as it grows.
    let output = format!("/run/harness-vm-exec-{}.log", std::process::id());
    let mut wrapped: Vec<String> = ["/bin/sh", "-c", &format!("exec \"$@\" >{output} 2>&1"), "sh"]
        .map(String::from)
        .to_vec();
    wrapped.extend(argv.iter().cloned());
    let result = crate::vm::stream::run_showing(&agent, &wrapped, limit, &output, &|line| println!("{line}"));
    let _ = agent.exec(
        &crate::vm::shell(&format!("rm -f {output}")),
        None,
        agent.deadlines().command,
        &|| None,
    );
    match result {
        Ok(out) => Ok(ExitCode::from(exit_byte(out.status))),
        Err(crate::vm::VmError::Agent { source, .. })
            if matches!(*source, crate::vm::qga::QgaError::Timeout { .. }) =>
        {
            bail!(
                "{argv:?} in VM {name} was still running after {} s: give it longer with `--timeout SECONDS`",
                limit.as_secs()
            )
        }
        Err(err) => Err(err.into()),
    }
}

/// A guest status as this process's exit code: the code itself, or 128 + signal.
fn exit_byte(status: ExitKind) -> u8 {
    match status {
        ExitKind::Code(code) => u8::try_from(code).unwrap_or(1),
        ExitKind::Signal(sig) => u8::try_from(128 + sig).unwrap_or(1),
    }
}

/// A `cp` operand: a host path or `NAME:/guest/path`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Place {
    Host(PathBuf),
    Guest { vm: String, path: String },
}

pub(super) fn parse_place(text: &str) -> anyhow::Result<Place> {
    if let Some((vm, path)) = text.split_once(':') {
        let is_vm = !vm.is_empty()
            && vm
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if is_vm {
            if !path.starts_with('/') {
                bail!("{text:?}: the guest path after `{vm}:` must be absolute (e.g. {vm}:/root/file)");
            }
            return Ok(Place::Guest {
                vm: vm.to_string(),
                path: path.to_string(),
            });
        }
    }
    Ok(Place::Host(PathBuf::from(text)))
}

fn cp(from: &str, to: &str, lab: Option<&str>) -> anyhow::Result<ExitCode> {
    match (parse_place(from)?, parse_place(to)?) {
        (Place::Host(host), Place::Guest { vm, path }) => {
            agent(&vm, lab)?.copy_in(&host, &path, &|| None)?;
            eprintln!("copied {} to {vm}:{path}", host.display());
        }
        (Place::Guest { vm, path }, Place::Host(host)) => {
            let host = if host.is_dir() {
                host.join(
                    Path::new(&path)
                        .file_name()
                        .context("the guest path names no file")?,
                )
            } else {
                host
            };
            agent(&vm, lab)?.copy_out(&path, &host, &|| None)?;
            eprintln!("copied {vm}:{path} to {}", host.display());
        }
        (Place::Host(_), Place::Host(_)) => bail!("one of {from:?} and {to:?} must be a VM path NAME:/PATH"),
        (Place::Guest { .. }, Place::Guest { .. }) => {
            bail!("copying between two VMs is not supported: copy out, then in")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Puts the terminal in raw mode until dropped.
struct RawTerminal {
    saved: Option<nix::sys::termios::Termios>,
}

impl RawTerminal {
    fn enter() -> RawTerminal {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let Ok(saved) = tcgetattr(&stdin) else {
            return RawTerminal { saved: None };
        };
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        RawTerminal { saved: Some(saved) }
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, saved);
        }
    }
}

/// Ctrl-] ends the session, as in telnet.
const ESCAPE: u8 = 0x1d;

fn shell(name: &str, lab: Option<&str>) -> anyhow::Result<ExitCode> {
    let run = RunDir::find(name, lab)?;
    let socket = run.hvc0();
    let stream = UnixStream::connect(&socket).with_context(|| {
        format!(
            "connecting to {} (is another `harness vm shell {name}` attached?)",
            socket.display()
        )
    })?;
    eprintln!("connected to {name}'s console hvc0; leave with Ctrl-]\r");
    let mut to_vm = stream.try_clone()?;
    let mut from_vm = stream;
    let _raw = RawTerminal::enter();
    to_vm.write_all(b"\r")?;
    let saved = _raw.saved.clone();
    let vm_name = name.to_string();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut out = std::io::stdout();
        while let Ok(n) = from_vm.read(&mut buf) {
            if n == 0 || out.write_all(&buf[..n]).and_then(|_| out.flush()).is_err() {
                break;
            }
        }
        // The VM closed the console (powered off, killed): restore the terminal and leave;
        // the main thread is blocked reading stdin.
        if let Some(saved) = &saved {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, saved);
        }
        eprintln!("\nthe console of {vm_name} closed");
        std::process::exit(0);
    });
    let mut buf = [0u8; 1024];
    let mut stdin = std::io::stdin();
    loop {
        let n = stdin.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if let Some(pos) = buf[..n].iter().position(|b| *b == ESCAPE) {
            to_vm.write_all(&buf[..pos])?;
            break;
        }
        to_vm.write_all(&buf[..n])?;
    }
    drop(_raw);
    eprintln!("\ndisconnected from {name}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cp_operands_are_guest_paths_only_with_a_vm_name_and_absolute_path() {
        assert_eq!(
            parse_place("localdns:/etc/hosts").unwrap(),
            Place::Guest {
                vm: "localdns".into(),
                path: "/etc/hosts".into()
            }
        );
        assert_eq!(parse_place("./a:b/c").unwrap(), Place::Host("./a:b/c".into()));
        assert_eq!(parse_place("/tmp/x").unwrap(), Place::Host("/tmp/x".into()));
        let err = parse_place("localdns:etc/hosts").unwrap_err().to_string();
        assert!(err.contains("must be absolute"), "{err}");
    }

    #[test]
    fn guest_status_becomes_the_exit_code() {
        assert_eq!(exit_byte(ExitKind::Code(0)), 0);
        assert_eq!(exit_byte(ExitKind::Code(3)), 3);
        assert_eq!(exit_byte(ExitKind::Signal(9)), 137);
        assert_eq!(exit_byte(ExitKind::Code(300)), 1);
    }
}
