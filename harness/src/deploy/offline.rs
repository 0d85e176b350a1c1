//! A node config with `"offline": true` in the lab: the VM gets the offline bundle
//! (`LabArtifacts::offline_bundle_dir`) and no route to the artifact server, and the agent takes
//! every artifact from the bundle (`OfflineArtifacts.Source`).
//!
//! * Handing the bundle over: a VM booted with the bundle as its 9p share (what
//!   `scenarios::node::ClusterLab::boot` does) reads it in place, read-only, at
//!   [`SHARE_MOUNT`]; any other VM (e.g. `harness lab up`, whose share is the build output) gets a
//!   copy at [`COPIED_BUNDLE`] ([`hand_over`]).
//! * No route: [`Lab::block_artifact_server`] before the VM's first request; [`prove_no_route`]
//!   shows it from inside the VM (curl: "No route to host" on `:8080`, the nft counter moved)
//!   with a positive control (the lab's DNS server on the same address answers over TCP).
//! * Afterwards: [`ensure_no_requests`] (the artifact server logged nothing at all, and the
//!   reject rule counted no attempt since the probe) and
//!   [`control_after_unblock`] (with the route back, one request from the VM is logged: the
//!   log would have seen one).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::addresses::HTTP_PORT;
use crate::artifacts::LabArtifacts;
use crate::lab::{Lab, LabError};
use crate::vm::{Vm, VmError};

/// Where the guest mounts its 9p share (read-only).
pub const SHARE_MOUNT: &str = "/mnt/lab";
/// Where [`hand_over`] copies the bundle into a VM whose share is something else.
pub const COPIED_BUNDLE: &str = "/var/lib/unbounded-lab/offline-bundle";
/// The URL path [`prove_no_route`] and [`control_after_unblock`] ask for (a 404 when reached).
pub const PROBE_PATH: &str = "/offline-probe";
/// The name the positive control asks the lab's DNS server for (any answer will do).
const PROBE_NAME: &str = "offline-control.lab.test";

/// Why the offline setup or its checks failed.
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("VM {vm}: {doing}: {source}")]
    Vm {
        vm: String,
        doing: String,
        #[source]
        source: Box<VmError>,
    },
    #[error("cutting {ip} off from the artifact server: {source}")]
    Block {
        ip: Ipv4Addr,
        #[source]
        source: LabError,
    },
    #[error("reading the offline bundle {path}: {source}")]
    Bundle {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("VM {vm}: the offline bundle is not at {guest} (no manifest.json):\n{output}")]
    NotHandedOver {
        vm: String,
        guest: String,
        output: String,
    },
    #[error(
        "VM {vm} is not cut off from the artifact server (expected curl's exit status 7, \
         \"could not connect\", and the lab's reject rule counting it): {report}"
    )]
    StillRoutes { vm: String, report: String },
    #[error(
        "positive control failed: VM {vm} cannot reach the lab's DNS server over TCP on the \
         artifact server's address either, so the block proves nothing: {report}"
    )]
    NoControl { vm: String, report: String },
    #[error("the artifact server logged {} request(s) while the node was offline:\n{}", .requests.len(), .requests.join("\n"))]
    Requests { requests: Vec<String> },
    #[error(
        "the node tried the artifact server while offline: the lab's reject rule counted {now} \
         packet(s), {after_probe} right after the harness's own probe:\n{rules}"
    )]
    Attempts {
        after_probe: u64,
        now: u64,
        rules: String,
    },
    #[error("reading the lab's reject rule counter: {report}")]
    NoCounter { report: String },
    #[error(
        "positive control failed: with its route back, VM {vm}'s request did not show in the \
         artifact server's log: {report}"
    )]
    LogBlind { vm: String, report: String },
}

fn vm_err(vm: &Vm, doing: &str) -> impl FnOnce(VmError) -> OfflineError {
    let vm = vm.name().to_string();
    let doing = doing.to_string();
    move |source| OfflineError::Vm {
        vm,
        doing,
        source: Box::new(source),
    }
}

/// Whether `vm` was booted with `bundle` as its 9p share.
pub fn shares_bundle(vm: &Vm, bundle: &Path) -> bool {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    vm.spec()
        .share
        .as_deref()
        .is_some_and(|share| canonical(share) == canonical(bundle))
}

/// Where the bundle is inside `vm` (`OfflineArtifacts.Source`): the share when the VM shares
/// it, else the copy [`hand_over`] makes.
pub fn guest_bundle(vm: &Vm, artifacts: &LabArtifacts) -> &'static str {
    if shares_bundle(vm, artifacts.offline_bundle_dir()) {
        SHARE_MOUNT
    } else {
        COPIED_BUNDLE
    }
}

/// For a VM already cut off ([`cut_off`]): proves it from inside ([`prove_no_route`]) and hands
/// it the bundle ([`hand_over`]); returns the bundle's guest path and what the probe saw.
pub fn prove_and_hand_over(
    lab: &Lab,
    vm: &Vm,
    artifacts: &LabArtifacts,
) -> Result<(&'static str, NoRoute), OfflineError> {
    let seen = prove_no_route(lab, vm)?;
    eprintln!(
        "==> VM {} has no route to the artifact server: {}",
        vm.name(),
        seen.report
    );
    Ok((hand_over(vm, artifacts)?, seen))
}

/// Makes the bundle available in `vm` at [`guest_bundle`] (copying what is missing when the VM
/// does not share it) and checks the guest sees its `manifest.json`. Returns the guest path.
pub fn hand_over(vm: &Vm, artifacts: &LabArtifacts) -> Result<&'static str, OfflineError> {
    let guest = guest_bundle(vm, artifacts);
    if guest == COPIED_BUNDLE {
        copy_bundle(vm, artifacts.offline_bundle_dir())?;
    }
    let out = vm
        .run_unchecked(&format!(
            "ls -l {guest}/manifest.json && findmnt -n -o FSTYPE,OPTIONS --target {guest}"
        ))
        .map_err(vm_err(vm, "looking for the offline bundle"))?;
    if !out.success() {
        return Err(OfflineError::NotHandedOver {
            vm: vm.name().to_string(),
            guest: guest.to_string(),
            output: format!("{}{}", out.stdout_text(), out.stderr_text()),
        });
    }
    eprintln!(
        "==> offline bundle in VM {} at {guest}: {}",
        vm.name(),
        out.stdout_text().trim().replace('\n', "; ")
    );
    Ok(guest)
}

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Result<Vec<PathBuf>, OfflineError> {
    let mut files = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let path = dir.join(&relative);
        let entries = std::fs::read_dir(&path).map_err(|source| OfflineError::Bundle {
            path: path.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| OfflineError::Bundle {
                path: path.clone(),
                source,
            })?;
            let child = relative.join(entry.file_name());
            if entry.path().is_dir() {
                stack.push(child);
            } else {
                files.push(child);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Copies the bundle's files into [`COPIED_BUNDLE`], skipping those already there with the
/// same size (the bundle's files never change in place: a new build is a new cache entry).
fn copy_bundle(vm: &Vm, bundle: &Path) -> Result<(), OfflineError> {
    let have = vm
        .run(&format!(
            "mkdir -p {COPIED_BUNDLE} && cd {COPIED_BUNDLE} && find . -type f -printf '%P %s\\n'"
        ))
        .map_err(vm_err(vm, "listing the copied bundle"))?;
    let have: std::collections::BTreeSet<&str> = have.lines().collect();
    for relative in files_under(bundle)? {
        let host = bundle.join(&relative);
        let size = std::fs::metadata(&host)
            .map_err(|source| OfflineError::Bundle {
                path: host.clone(),
                source,
            })?
            .len();
        if have.contains(format!("{} {size}", relative.display()).as_str()) {
            continue;
        }
        let guest = format!("{COPIED_BUNDLE}/{}", relative.display());
        if let Some(parent) = Path::new(&guest).parent() {
            vm.run(&format!("mkdir -p {}", parent.display()))
                .map_err(vm_err(vm, "making the bundle's directories"))?;
        }
        vm.copy_in(&host, &guest)
            .map_err(vm_err(vm, &format!("copying {} into the VM", host.display())))?;
    }
    Ok(())
}

/// Cuts the VM at `ip` off from `lab`'s artifact server (idempotent; see
/// [`Lab::block_artifact_server`]).
pub fn cut_off(lab: &Lab, ip: Ipv4Addr) -> Result<(), OfflineError> {
    lab.block_artifact_server(ip)
        .map_err(|source| OfflineError::Block { ip, source })
}

/// What [`prove_no_route`] saw: a line for the output, and the reject rule's counter right after
/// the probe (the baseline of [`ensure_no_requests`]).
#[derive(Debug, Clone)]
pub struct NoRoute {
    pub report: String,
    pub rejected_after_probe: u64,
}

/// From inside `vm`: a connect to the artifact server fails (curl's exit 7, "No route to host"
/// as a rule) and the lab's reject rule's counter moved, while the lab's DNS server on the same
/// address answers over TCP (the positive control; the API server is elsewhere on a Kind lab).
pub fn prove_no_route(lab: &Lab, vm: &Vm) -> Result<NoRoute, OfflineError> {
    let bridge = lab.addrs().bridge_ip();
    let url = format!("http://{bridge}:{HTTP_PORT}{PROBE_PATH}");
    let command = format!("curl -v --max-time 30 -o /dev/null {url} 2>&1");
    let before =
        crate::lab::offline::rejected_packets(&lab.artifact_server_block_rules().unwrap_or_default());
    let out = vm
        .run_unchecked(&command)
        .map_err(vm_err(vm, "probing the artifact server"))?;
    let output = out.stdout_text();
    let rules = lab
        .artifact_server_block_rules()
        .unwrap_or_else(|e| format!("(nft list failed: {e})"));
    // curl's exit 7 is "could not connect"; its words vary ("No route to host", or only "Could
    // not connect to server" when curl lost the errno), so the reject rule's counter is the proof.
    let refused = out.status == crate::vm::ExitKind::Code(7);
    let after = crate::lab::offline::rejected_packets(&rules);
    let counted = matches!((before, after), (Some(b), Some(a)) if a > b);
    if !refused || !counted {
        return Err(OfflineError::StillRoutes {
            vm: vm.name().to_string(),
            report: format!(
                "`{command}` ended with {}:\n{output}\nnft rules in the lab:\n{rules}",
                out.status
            ),
        });
    }
    // The lab's DNS server on the same address, over TCP like the blocked HTTP: any answer
    // (a status line) shows the VM reaches that address.
    let control = format!("dig +tcp +time=10 +tries=2 @{bridge} {PROBE_NAME} +noall +comments 2>&1");
    let answer = vm
        .run_unchecked(&control)
        .map_err(vm_err(vm, "reaching the lab's DNS server"))?;
    let comments = answer.stdout_text();
    let status = comments
        .lines()
        .find_map(|l| l.split("status: ").nth(1))
        .map(|rest| rest.split(',').next().unwrap_or_default().trim().to_string());
    let Some(status) = status.filter(|_| answer.success()) else {
        return Err(OfflineError::NoControl {
            vm: vm.name().to_string(),
            report: format!("`{control}` ended with {}: {comments}", answer.status),
        });
    };
    let line = output
        .lines()
        .find(|l| l.contains("No route to host"))
        .or_else(|| output.lines().find(|l| l.contains("Failed to connect")))
        .unwrap_or_default()
        .trim()
        .to_string();
    Ok(NoRoute {
        report: format!(
            "{url}: {line}; DNS over TCP at {bridge}:53: {status}; {}",
            rules
                .lines()
                .find(|l| l.contains("reject"))
                .unwrap_or_default()
                .trim()
        ),
        rejected_after_probe: after.unwrap_or_default(),
    })
}

/// The artifact server logged no request at all (the node took everything from the bundle), and
/// the node did not even try: the lab's reject rule counted nothing since the probe of
/// [`prove_no_route`] (`rejected_after_probe`), as a refused connect never reaches the log.
pub fn ensure_no_requests(lab: &Lab, rejected_after_probe: u64) -> Result<(), OfflineError> {
    let rules = lab
        .artifact_server_block_rules()
        .map_err(|e| OfflineError::NoCounter {
            report: e.to_string(),
        })?;
    let now = crate::lab::offline::rejected_packets(&rules).ok_or_else(|| OfflineError::NoCounter {
        report: format!("no reject rule with a counter in:\n{rules}"),
    })?;
    if now != rejected_after_probe {
        return Err(OfflineError::Attempts {
            after_probe: rejected_after_probe,
            now,
            rules,
        });
    }
    let requests = lab.http().requests();
    if requests.is_empty() {
        return Ok(());
    }
    Err(OfflineError::Requests {
        requests: requests
            .iter()
            .map(|r| {
                format!(
                    "  {} {} {} {} from {}",
                    r.method, r.path, r.status, r.bytes, r.from
                )
            })
            .collect(),
    })
}

/// The positive control of [`ensure_no_requests`]: gives `vm` (at `ip`) its route back and
/// checks that one request from it now reaches the artifact server and shows in the log.
pub fn control_after_unblock(lab: &Lab, vm: &Vm, ip: Ipv4Addr) -> Result<(), OfflineError> {
    lab.unblock_artifact_server(ip)
        .map_err(|source| OfflineError::Block { ip, source })?;
    let url = format!("http://{}:{HTTP_PORT}{PROBE_PATH}", lab.addrs().bridge_ip());
    let command = format!("curl -sS --max-time 30 -o /dev/null -w '%{{http_code}}' {url}");
    let out = vm
        .run_unchecked(&command)
        .map_err(vm_err(vm, "reaching the artifact server again"))?;
    let requests = lab.http().requests();
    let seen = requests
        .iter()
        .any(|r| r.path == PROBE_PATH && r.from.ip() == std::net::IpAddr::V4(ip));
    if out.stdout_text() == "404" && seen {
        return Ok(());
    }
    let logged: Vec<String> = requests
        .iter()
        .map(|r| format!("  {} {} {} from {}", r.method, r.path, r.status, r.from))
        .collect();
    Err(OfflineError::LogBlind {
        vm: vm.name().to_string(),
        report: format!(
            "`{command}` ended with {}: {}{} (expected HTTP 404 for {url}); the log holds:\n{}",
            out.status,
            out.stdout_text(),
            out.stderr_text(),
            logged.join("\n")
        ),
    })
}
