//! [`LabView`]: a running lab as another process finds it — its owner file, `lab.json` and the
//! run directories of its VMs.

use std::path::PathBuf;

use crate::lab::owner::{self, Owner};
use crate::lab::record::LabRecord;
use crate::vm::{Accel, Deadlines, GuestAgent, RunDir};

/// A lab found on disk.
pub struct LabView {
    /// `lab-<n>`.
    pub name: String,
    pub number: u8,
    /// `$LAB_RUN_DIR/lab-<n>`.
    pub run_dir: PathBuf,
    /// The owner file's process, if any, and whether it is alive.
    pub owner: Option<(Owner, bool)>,
    /// `lab.json`, or why it could not be read (a lab still starting has none).
    pub record: Result<LabRecord, String>,
    /// Its VMs with a QEMU pid file, sorted by name.
    pub vms: Vec<VmView>,
}

/// A VM of a running lab.
pub struct VmView {
    pub name: String,
    pub run: RunDir,
    pub agent: GuestAgent,
}

impl VmView {
    /// The VM `name` of lab `lab`, reached through its run directory with the deadlines of the
    /// accelerator it was booted with.
    pub fn new(lab: &str, name: &str) -> VmView {
        let run = RunDir::new(lab, name);
        let accel = run
            .read_info()
            .ok()
            .and_then(|info| Accel::parse(&info.accel).ok())
            .unwrap_or(Accel::Tcg);
        let deadlines = Deadlines::from_env(accel).unwrap_or_else(|_| Deadlines::new(accel, 1.0));
        let agent = GuestAgent::for_run_dir(name, &run, deadlines);
        VmView {
            name: name.to_string(),
            run,
            agent,
        }
    }

    /// QEMU's pid while it runs.
    pub fn qemu_pid(&self) -> Option<i32> {
        self.run.running_pid()
    }
}

/// Why a lab cannot be looked at.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error(
        "lab-{number} is not running (no {}): start one with `harness lab up`, or see `harness lab list`",
        .run_dir.display()
    )]
    NotRunning { number: u8, run_dir: PathBuf },
}

impl LabView {
    /// Lab `number` as found under `$LAB_RUN_DIR`.
    pub fn open(number: u8) -> Result<LabView, ViewError> {
        let name = format!("lab-{number}");
        let run_dir = owner::run_dir(&name);
        if !run_dir.is_dir() {
            return Err(ViewError::NotRunning { number, run_dir });
        }
        let owner = owner::read_owner(&name).map(|o| (o, o.is_alive()));
        let record = LabRecord::read(&run_dir).map_err(|e| e.to_string());
        let mut names: Vec<String> = std::fs::read_dir(run_dir.join("vms"))
            .map(|rd| {
                rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|vm| RunDir::new(&name, vm).pid_file().is_file())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let vms = names.iter().map(|vm| VmView::new(&name, vm)).collect();
        Ok(LabView {
            name,
            number,
            run_dir,
            owner,
            record,
            vms,
        })
    }
}
