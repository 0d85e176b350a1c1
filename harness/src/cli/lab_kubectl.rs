//! `harness lab kubectl ARGS...`: the lab's own kubectl (built with its control plane, same
//! version) run with the running lab's admin kubeconfig, so a fresh machine needs no kubectl.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use anyhow::Context;

/// Replaces this process with `kubectl --kubeconfig <lab's admin kubeconfig> ARGS...`
/// (stdin, stdout and the exit status are kubectl's, so `kubectl run -it` works too).
pub fn run(number: u8, args: &[OsString]) -> anyhow::Result<ExitCode> {
    let kubeconfig = super::lab::admin_kubeconfig_of(number)?;
    let cache = crate::cache::Cache::open()?;
    let kubectl = crate::images::kubernetes::require(&cache)?.binary("kubectl");
    let err = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(args)
        .exec();
    Err(err).with_context(|| format!("running {}", kubectl.display()))
}
