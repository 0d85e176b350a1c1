//! The node's life: one observe → plan → act core for `start`, `reboot`, `repave`, `apply` and
//! `reset` (docs/lifecycle.md).
//!
//! 1. **Observe** ([`observe`]): the install state ([`state`], schema 2, schema 1 migrated), the
//!    repave record ([`repave_state`]) and, for `apply`, how the given config differs from the
//!    applied one ([`change`]).
//! 2. **Plan** ([`plan::plan`]), pure and table-tested: the steps, or a refusal that changes
//!    nothing.
//! 3. **Act** ([`execute`]): each step recorded in the state (or the repave record) *before* it
//!    runs, so a killed run re-enters where it stopped.
//!
//! One agent process acts on a host at a time ([`lock`]). The library prints nothing: progress
//! goes through a [`progress::Progress`] sink. It creates no async runtime either, so an async
//! caller (the daemon) can drive it from a blocking task.

pub mod change;
pub mod error;
pub mod execute;
pub mod lock;
pub use crate::install_state::manifest;
pub mod node_reset;
pub mod observe;
pub mod plan;
pub use crate::progress;
pub mod reconfigure;
pub mod repave;
pub mod repave_state;
pub mod upstreams_refresh;
pub use crate::install_state as state;

use std::path::PathBuf;

pub use error::LifecycleError;
pub use plan::Operation;
pub use progress::Progress;

use crate::hostnet::ResetReport;
use crate::names::Slot;

/// What an operation is given.
#[derive(Debug, Clone)]
pub struct Options {
    /// The config to act with: required by `start` and `apply`; `repave` takes it for the target
    /// slot (default: the applied config); `reboot` and `reset` use none.
    pub config_path: Option<PathBuf>,
    /// Files are written below this directory (`/` on a real host).
    pub root: PathBuf,
    /// Preflight checks whose failures do not stop `start`.
    pub ignore_checks: Vec<String>,
    /// Multiplies every wait; `None`: detected ([`crate::start::node::Waits::given_or_detected`]).
    pub timeout_scale: Option<u32>,
    /// `reset --dry-run`: print the plan, change nothing.
    pub dry_run: bool,
}

impl Options {
    /// Options acting on this host (`/`) with `config_path`.
    pub fn on_host(config_path: Option<PathBuf>) -> Options {
        Options {
            config_path,
            root: PathBuf::from("/"),
            ignore_checks: Vec::new(),
            timeout_scale: None,
            dry_run: false,
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The steps ran; the node runs in `slot`.
    Done {
        operation: &'static str,
        slot: Slot,
        steps: Vec<&'static str>,
    },
    /// Nothing needed doing.
    Unchanged { operation: &'static str, slot: Slot },
    /// Reset removed everything (what it removed, and what was already absent).
    Reset(ResetReport),
    /// `reset --dry-run`: what a reset would remove.
    ResetPlan(Vec<String>),
}

/// Runs `op` on this host (below `options.root`), reporting progress to `progress`.
pub fn run(op: Operation, options: &Options, progress: &dyn Progress) -> Result<Outcome, LifecycleError> {
    let _lock = lock::take(&options.root, op.name())?;
    if op == Operation::Reset {
        return node_reset::run(&options.root, options.dry_run, progress);
    }
    let observed = observe::observe(op, options)?;
    let steps = plan::plan(&observed.planner, &observed.desired, op)?;
    let slot = observed.slot;
    if steps.is_empty() {
        progress.line(&format!(
            "{}: the node in machine {slot} already runs this config; nothing changed",
            op.name()
        ));
        return Ok(Outcome::Unchanged {
            operation: op.name(),
            slot,
        });
    }
    progress.line(&format!(
        "{}: steps {}",
        op.name(),
        steps.iter().map(|s| s.name()).collect::<Vec<_>>().join(" → ")
    ));
    let mut exec = execute::Executor::new(op, options, observed, progress);
    // Everything decided before anything changes: a config `start` cannot render (no pod CIDR,
    // a bad CA) is refused here, with nothing written.
    exec.render(slot)?;
    for step in &steps {
        exec.run_step(*step)?;
    }
    let only_ensured_running = steps == [plan::Step::EnsureRunning];
    let slot = exec.finish(!only_ensured_running)?;
    if only_ensured_running {
        return Ok(Outcome::Unchanged {
            operation: op.name(),
            slot,
        });
    }
    Ok(Outcome::Done {
        operation: op.name(),
        slot,
        steps: steps.iter().map(|s| s.name()).collect(),
    })
}
