//! What the LocalDNS benchmarks need on this host — root, the tools they run, the CoreDNS
//! artifact and the supervisor binary — checked at once, every missing one named with how to get
//! it ([`require`]); and their lab ([`BenchLab`]), on a thread of its own ([`on_own_thread`]).

use std::path::{Path, PathBuf};

use super::error::{BenchError, Missing};
use crate::localdns_live::{BackHome, Lab, Listeners};

/// A program a benchmark runs, and the Debian package that has it.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    pub program: &'static str,
    pub package: &'static str,
}

pub const IP: Tool = Tool {
    program: "ip",
    package: "iproute2",
};
pub const NFT: Tool = Tool {
    program: "nft",
    package: "nftables",
};
pub const CONNTRACK: Tool = Tool {
    program: "conntrack",
    package: "conntrack",
};
pub const SS: Tool = Tool {
    program: "ss",
    package: "iproute2",
};

/// What a benchmark found on this host.
#[derive(Debug, Clone)]
pub struct Prerequisites {
    /// The real CoreDNS of the lab cache's artifact.
    pub coredns: PathBuf,
    /// `unbounded-localdns-supervisor`, beside this program.
    pub supervisor: PathBuf,
}

/// Checks everything `harness bench <bench>` needs; fails naming each thing missing and how to
/// get it.
pub fn require(bench: &'static str, tools: &[Tool]) -> Result<Prerequisites, BenchError> {
    let mut missing = Vec::new();
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        missing.push(Missing {
            what: "root".into(),
            fix: "it makes network namespaces and nftables tables: run it as root (`sudo -E`, which \
                  keeps CARGO_TARGET_DIR and the LAB_* settings)"
                .into(),
        });
    }
    for tool in tools {
        if on_path(tool.program).is_none() {
            missing.push(Missing {
                what: format!("`{}` on PATH", tool.program),
                fix: format!("install it (Debian's package {})", tool.package),
            });
        }
    }
    let coredns = match crate::cache::Cache::open() {
        Ok(cache) => match crate::images::coredns::require(&cache) {
            Ok(artifact) => Some(artifact.binary),
            Err(e) => {
                missing.push(Missing {
                    what: "the CoreDNS artifact (the benchmark runs the real CoreDNS)".into(),
                    fix: agent::error_chain::Chain(&e).to_string(),
                });
                None
            }
        },
        Err(e) => {
            missing.push(Missing {
                what: "the lab cache (where the CoreDNS artifact is)".into(),
                fix: agent::error_chain::Chain(&e).to_string(),
            });
            None
        }
    };
    let supervisor = match crate::localdns_live::supervisor_binary() {
        Ok(path) => Some(path),
        Err(e) => {
            missing.push(Missing {
                what: "the LocalDNS supervisor".into(),
                fix: e.to_string(),
            });
            None
        }
    };
    match (coredns, supervisor) {
        (Some(coredns), Some(supervisor)) if missing.is_empty() => Ok(Prerequisites { coredns, supervisor }),
        _ => Err(BenchError::Missing { bench, missing }),
    }
}

/// `program` in a directory of `$PATH`, if there.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A benchmark's lab on this host: the real CoreDNS from the lab cache, the listeners on `lo`
/// (this host's kernel may lack dummy links; the guest tests use the link), the calling thread in
/// the node namespace. `home` is declared first, so the thread goes back home before the lab's
/// namespaces go, on errors too.
pub struct BenchLab {
    pub home: BackHome,
    pub lab: Lab,
}

impl BenchLab {
    /// The lab with our table loaded (`NOTRACKReplies` on), not yet LocalDNS itself.
    pub fn build(found: &Prerequisites) -> Result<BenchLab, BenchError> {
        let home = BackHome::here()?;
        let lab = Lab::build(true, Listeners::Loopback, found.coredns.clone())?;
        lab.node.enter()?;
        Ok(BenchLab { home, lab })
    }
}

/// Runs `work` on a thread of its own: the thread that enters the lab's namespaces is never the
/// process's main thread, whose namespace `ip netns pids` goes by when a namespace is deleted
/// with its processes (this one must not be among them).
pub fn on_own_thread<T: Send>(work: impl FnOnce() -> Result<T, BenchError> + Send) -> Result<T, BenchError> {
    std::thread::scope(|s| {
        s.spawn(work)
            .join()
            .map_err(|_| BenchError::Panicked("benchmark"))?
    })
}
