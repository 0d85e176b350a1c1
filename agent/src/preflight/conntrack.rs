//! Preflight check `localdns-conntrack` (docs/design.md §8): nftables can NOTRACK at raw priority.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::Command;

use crate::exec::{self, CommandFailed};

use super::{Context, Finding, Severity};

pub const NAME: &str = "localdns-conntrack";

/// The message of a failed dry run, as docs/design.md §8 words it.
pub const REQUIRED: &str = "nftables raw-priority notrack support is required";

/// A table we never create for real: `nft --check` only parses and validates it in the kernel.
pub fn dry_run_script(listener: Ipv4Addr) -> String {
    format!(
        "table ip unbounded_localdns_preflight {{\n\
         \tchain output {{\n\
         \t\ttype filter hook output priority raw; policy accept;\n\
         \t\tip daddr {listener} udp dport 53 notrack comment \"unbounded-localdns: preflight\"\n\
         \t}}\n\
         }}\n"
    )
}

pub fn run(ctx: &Context) -> Vec<Finding> {
    let Some(config) = ctx.valid_config() else {
        return Vec::new();
    };
    let Some(l) = &config.local_dns else {
        return vec![Finding::new(
            NAME,
            "nftables",
            Severity::Ok,
            "LocalDNS is disabled",
        )];
    };
    vec![check_with("nft", l.node_listener.addr(), ctx.offline())]
}

/// The check with the `nft` program given (tests pass a stand-in for the failure nft cannot produce).
pub fn check_with(nft: &str, listener: Ipv4Addr, offline: bool) -> Finding {
    let target = "nftables";
    let script = dry_run_script(listener);
    let mut file = match tempfile::Builder::new()
        .prefix("unbounded-preflight-")
        .suffix(".nft")
        .tempfile()
    {
        Ok(f) => f,
        Err(err) => {
            return Finding::new(
                NAME,
                target,
                Severity::Error,
                format!("cannot write a dry-run script: {err}"),
            );
        }
    };
    if let Err(err) = file.write_all(script.as_bytes()).and_then(|()| file.flush()) {
        return Finding::new(
            NAME,
            target,
            Severity::Error,
            format!("cannot write a dry-run script: {err}"),
        );
    }
    match exec::run(Command::new(nft).arg("--check").arg("-f").arg(file.path())) {
        Ok(_) => Finding::new(
            NAME,
            target,
            Severity::Ok,
            "nft accepts a raw-priority output chain with a notrack rule",
        ),
        // LocalDNS's host network is nftables rules: without `nft`, start would fail there later.
        Err(CommandFailed::Spawn { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Finding::new(
                NAME,
                target,
                Severity::Error,
                format!(
                    "`{nft}` is not installed: {REQUIRED} (install the `nftables` package{})",
                    if offline {
                        ", from the offline bundle's mirror"
                    } else {
                        ""
                    }
                ),
            )
        }
        Err(err) => Finding::new(
            NAME,
            target,
            Severity::Error,
            format!("{REQUIRED}: {}", err.stderr().trim()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);

    #[test]
    fn real_nft_accepts_the_dry_run() {
        let finding = check_with("nft", NODE, false);
        assert_eq!(
            finding.severity,
            Severity::Ok,
            "{finding:?} (needs `nft` from the nftables package)"
        );
    }

    #[test]
    fn missing_nft_is_an_error_online_and_offline() {
        let online = check_with("/nonexistent/nft", NODE, false);
        let offline = check_with("/nonexistent/nft", NODE, true);
        assert_eq!(online.severity, Severity::Error);
        assert_eq!(offline.severity, Severity::Error);
        assert!(offline.message.contains(REQUIRED), "{}", offline.message);
    }

    #[test]
    fn nft_refusing_the_dry_run_is_an_error_with_its_words() {
        // Stand-in: a kernel without raw-priority notrack cannot be produced here, so a script plays
        // an `nft` that refuses the dry run the way nft does.
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("nft");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'Error: Could not process rule: No such file or directory' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let finding = check_with(fake.to_str().unwrap(), NODE, false);
        assert_eq!(finding.severity, Severity::Error);
        assert!(finding.message.starts_with(REQUIRED), "{}", finding.message);
        assert!(
            finding.message.contains("Could not process rule"),
            "{}",
            finding.message
        );
    }

    #[test]
    fn dry_run_changes_nothing() {
        check_with("nft", NODE, false);
        let tables = exec::run_stdout(Command::new("nft").args(["list", "tables"])).unwrap();
        assert!(!tables.contains("unbounded_localdns_preflight"), "{tables}");
    }
}
