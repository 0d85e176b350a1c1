//! `harness vm cp -r`: a directory into or out of a VM, as one tar archive over the guest
//! agent (or its data port), unpacked where `cp -r` would put it: the target becomes the copy,
//! or the copy goes inside a target directory that exists.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

use super::vm::{Place, agent, parse_place};
use crate::vm::{GuestAgent, shell};

/// Copies the directory `from` to `to` (one of them `NAME:/PATH` in a VM of lab `lab`).
pub fn copy_tree(from: &str, to: &str, lab: &str) -> anyhow::Result<ExitCode> {
    let scratch = tempfile::tempdir().context("a scratch directory for the archive")?;
    let archive = scratch.path().join("tree.tar");
    let guest_archive = format!("/run/harness-vm-cp-{}.tar", std::process::id());
    match (parse_place(from)?, parse_place(to)?) {
        (Place::Host(host), Place::Guest { vm, path }) => {
            if !host.is_dir() {
                bail!(
                    "{} is not a directory (without -r, cp copies one file)",
                    host.display()
                );
            }
            let (parent, name) = parent_and_name(&host)?;
            agent::exec::run(
                Command::new("tar")
                    .arg("-C")
                    .arg(parent)
                    .arg("-cf")
                    .arg(&archive)
                    .arg(name),
            )?;
            let agent = agent(&vm, Some(lab))?;
            agent.copy_in(&archive, &guest_archive, &|| None)?;
            let target = quoted(&path)?;
            guest(
                &agent,
                &format!(
                    "if [ -d {target} ]; then tar -C {target} -xf {guest_archive}; \
                     else mkdir -p {target} && tar -C {target} --strip-components=1 -xf {guest_archive}; fi; \
                     status=$?; rm -f {guest_archive}; exit $status"
                ),
            )?;
            eprintln!("copied {} to {vm}:{path}", host.display());
        }
        (Place::Guest { vm, path }, Place::Host(host)) => {
            let agent = agent(&vm, Some(lab))?;
            let (parent, name) = parent_and_name(Path::new(&path))?;
            let (parent, name) = (
                quoted(&parent.to_string_lossy())?,
                quoted(&name.to_string_lossy())?,
            );
            let source = quoted(&path)?;
            guest(
                &agent,
                &format!(
                    "[ -d {source} ] || {{ echo \"{path} is not a directory in the VM\" >&2; exit 3; }}; \
                     tar -C {parent} -cf {guest_archive} {name}"
                ),
            )?;
            let copied = agent.copy_out(&guest_archive, &archive, &|| None);
            let _ = guest(&agent, &format!("rm -f {guest_archive}"));
            copied?;
            let mut tar = Command::new("tar");
            if host.is_dir() {
                tar.arg("-C").arg(&host);
            } else {
                std::fs::create_dir_all(&host).with_context(|| format!("creating {}", host.display()))?;
                tar.arg("-C").arg(&host).arg("--strip-components=1");
            }
            agent::exec::run(tar.arg("-xf").arg(&archive))?;
            eprintln!("copied {vm}:{path} to {}", host.display());
        }
        (Place::Host(_), Place::Host(_)) => bail!("one of {from:?} and {to:?} must be a VM path NAME:/PATH"),
        (Place::Guest { .. }, Place::Guest { .. }) => {
            bail!("copying between two VMs is not supported: copy out, then in")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs a shell command in the guest; fails with its output unless it exits 0.
fn guest(agent: &GuestAgent, command: &str) -> anyhow::Result<()> {
    let argv = shell(command);
    let out = agent.exec(&argv, None, agent.deadlines().command, &|| None)?;
    crate::vm::guest::check(agent.vm(), &argv, out)?;
    Ok(())
}

fn parent_and_name(path: &Path) -> anyhow::Result<(&Path, &std::ffi::OsStr)> {
    let name = path
        .file_name()
        .with_context(|| format!("{} names no directory", path.display()))?;
    Ok((
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
        name,
    ))
}

/// `'path'` for the guest's shell; a path with a quote is refused.
fn quoted(path: &str) -> anyhow::Result<String> {
    if path.contains('\'') {
        bail!("{path:?} contains a quote");
    }
    Ok(format!("'{path}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_splits_into_its_parent_and_name() {
        let (parent, name) = parent_and_name(Path::new("/etc/systemd/network")).unwrap();
        assert_eq!(
            (parent, name.to_str().unwrap()),
            (Path::new("/etc/systemd"), "network")
        );
        let (parent, _) = parent_and_name(Path::new("relative")).unwrap();
        assert_eq!(parent, Path::new("."));
        assert!(parent_and_name(Path::new("/")).is_err());
        assert!(quoted("/a'b").is_err());
    }
}
