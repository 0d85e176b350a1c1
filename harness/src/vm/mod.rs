//! QEMU VMs for the lab: boot from the host image, drive over QMP and the guest agent, reboot,
//! reset, power off, detect crashes, clean up.
//!
//! # Public API (used by `lab`, `scenarios` and `harness vm ...`)
//!
//! ```no_run
//! use harness::vm::{BootImage, GuestAddress, Mac, Net, Vm, VmSpec};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cache = harness::cache::Cache::open()?;
//! let image = harness::images::host::require(&cache)?; // fails naming `harness images build`
//! let mut spec = VmSpec::new("lab-3", "localdns", BootImage::from(&image));
//! // Defaults: 2 vCPUs, 2048 MiB, user-mode networking (guest 10.0.2.15/24), no netns.
//! spec.net = Net::Tap {
//!     ifname: "labtap3-0".into(),
//!     mac: Mac::derive("lab-3", "localdns"),
//!     address: GuestAddress { ip: "192.168.103.10/24".into(), gateway: "192.168.103.1".into(), dns: "192.168.103.1".into() },
//! };
//! spec.netns = Some("lab-3".into());          // QEMU runs in /run/netns/lab-3 (setns before exec)
//! spec.share = None;                          // or Some(dir): 9p, mount tag `lab`, /mnt/lab in the guest
//! let mut vm = Vm::boot(spec)?;               // resumed from the image's saved state (or cold), ready
//! let stdout: String = vm.run("uname -r")?;   // non-zero exit => VmError::CommandFailed (status, stdout, stderr)
//! let out = vm.cmd("systemctl is-active x").allow_failure().timeout(std::time::Duration::from_secs(5)).run()?;
//! let _ = (out.status, out.stdout_text(), out.stderr_text(), out.success());
//! vm.copy_in("target/debug/unbounded-agent", "/usr/local/bin/unbounded-agent")?; // keeps mode, atomic
//! vm.copy_out("/var/log/syslog", "/tmp/syslog")?;
//! let old = vm.boot_id().to_string();
//! vm.reboot()?;                               // `systemctl reboot` inside; waits for a NEW boot id
//! vm.reset()?;                                // QMP system_reset; same
//! assert_ne!(vm.boot_id(), old);
//! let t = vm.deadlines().command;             // every deadline scales with the accelerator
//! vm.wait_until(t, "unit x to be active", || vm.run("systemctl is-active x"))?;
//! harness::vm::evidence::collect(&vm, "my_test", "asked for");  // also automatic when a test panics
//! vm.power_off()?;                            // systemctl poweroff (or ACPI button), waits for QEMU to exit
//! vm.shutdown()?;                             // or just drop: kills the group, checks, removes overlay
//! # Ok(()) }
//! ```
//!
//! * Start: by default a VM resumes from the image's saved guest state ([`state`]: the image
//!   booted once and saved, keyed by image, QEMU and machine; built on first use under the
//!   cache's lock) on its own overlay above the saved boot's disk, then gets the host's time,
//!   its address, resolver and MAC over the guest agent ([`resume`]); `vm.boot_mode()` says
//!   which. `LAB_COLD_BOOT=1` (or `spec.boot_mode = Some(BootMode::Cold)`, or any
//!   `extra_append` word) boots cold up to `READY <boot_id>`. A resumed VM keeps the saved
//!   boot's boot id and kernel command line until it reboots; a reboot comes up cold with its own.
//! * Errors are [`VmError`]: `Crashed` (QEMU exited unexpectedly: status, stderr, last console
//!   lines), `Timeout` (what was awaited, on which VM, for how long, last failure, console tail),
//!   `CommandFailed`, `Agent`, `Qmp`, `Spec`, `RunDir` (e.g. already running), `Overlay`, ...
//! * Other processes reach a running VM through its [`RunDir`] (layout in [`rundir`]) with
//!   [`GuestAgent`] (commands, files) and [`qmp::execute`].
//! * Accelerator: [`Accel::from_env`] (`LAB_ACCEL=kvm|tcg`, else KVM only if `/dev/kvm` opens and
//!   the CPU has vmx/svm). Deadlines: [`Deadlines`] (TCG ×4, `LAB_TIMEOUT_SCALE`).
//! * QEMU is forked from a process-lifetime thread with `PR_SET_PDEATHSIG=SIGKILL` and its own
//!   process group: it dies with the harness. `LAB_KEEP=1` (or `spec.keep`) keeps overlay and
//!   run directory after drop.

pub mod accel;
pub mod accel_probe;
pub mod bulk;
pub mod console;
pub mod deadline;
pub mod error;
pub mod evidence;
pub mod guest;
pub mod kernel_crash;
pub mod machine;
pub mod overlay;
pub mod process;
pub mod qemu;
pub mod qga;
pub mod qmp;
pub mod ready;
pub mod resume;
pub mod rundir;
pub mod spec;
pub mod state;
pub mod stream;

pub use accel::Accel;
pub use deadline::{Deadlines, WaitTimeout, wait_until};
pub use error::VmError;
pub use guest::{GuestAgent, shell};
pub use machine::{GuestCommand, Vm};
pub use qga::{ExitKind, GuestOutput};
pub use rundir::{RunDir, VmInfo};
pub use spec::{BootImage, BootMode, GuestAddress, Mac, Net, VmSpec};
pub use state::SavedState;
