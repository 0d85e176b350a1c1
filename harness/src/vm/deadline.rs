//! Deadlines that scale with the accelerator, and `wait_until` for a VM ([`crate::wait`]).

use std::fmt::Display;
use std::time::Duration;

use super::accel::Accel;

/// How much longer everything takes under TCG than under KVM.
pub const TCG_FACTOR: u32 = 4;

/// Every deadline of a VM, scaled for its accelerator (and by `LAB_TIMEOUT_SCALE`, a
/// positive number, for slow machines). The KVM values are the base; TCG multiplies them
/// by [`TCG_FACTOR`]: boot 180 s, reboot 360 s, command 120 s, agent 60 s, power-off 120 s.
/// (An idle 2-core machine boots in ~20 s under TCG; a loaded one, with parallel builds and a
/// second VM, has been seen to take over 100 s. A reboot boots the whole node — its machine,
/// containerd and kubelet start with it — and a host reboot of a joined node ran past 180 s
/// beside a second VM and a build, so reboots get twice the boot's time.)
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Deadlines {
    /// QEMU start to `READY <boot_id>`.
    pub boot: Duration,
    /// A reboot or reset to the new `READY`.
    pub reboot: Duration,
    /// A guest command's default limit (override per command).
    pub command: Duration,
    /// Reaching the guest agent once the guest said it is ready.
    pub agent: Duration,
    /// Power-off request to QEMU's exit.
    pub power_off: Duration,
    /// One evidence command (journal, nft, ...), kept short.
    pub evidence: Duration,
}

impl Deadlines {
    /// The deadlines for `accel`, multiplied by `scale`.
    pub fn new(accel: Accel, scale: f64) -> Deadlines {
        let factor = match accel {
            Accel::Kvm => 1.0,
            Accel::Tcg => f64::from(TCG_FACTOR),
        } * scale;
        let s = |secs: u64| Duration::from_secs(secs).mul_f64(factor);
        Deadlines {
            boot: s(45),
            reboot: s(90),
            command: s(30),
            agent: s(15),
            power_off: s(30),
            evidence: s(5),
        }
    }

    /// The deadlines for `accel` scaled by `LAB_TIMEOUT_SCALE` (default 1).
    pub fn from_env(accel: Accel) -> Result<Deadlines, String> {
        let scale = match std::env::var("LAB_TIMEOUT_SCALE") {
            Ok(v) if !v.trim().is_empty() => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| format!("LAB_TIMEOUT_SCALE={v:?} is not a positive number"))?,
            _ => 1.0,
        };
        Ok(Deadlines::new(accel, scale))
    }
}

pub use crate::wait::{Attempt, WaitTimeout, retry};

/// [`crate::wait::wait_until`] for VM `vm`: the timeout names `VM <vm>`.
pub fn wait_until<T, E: From<WaitTimeout>>(
    vm: &str,
    timeout: Duration,
    what: impl Display,
    attempt: impl FnMut() -> Attempt<T, E>,
) -> Result<T, E> {
    crate::wait::wait_until(format!("VM {vm}"), timeout, what, attempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcg_deadlines_are_four_times_kvm_and_scale() {
        let kvm = Deadlines::new(Accel::Kvm, 1.0);
        let tcg = Deadlines::new(Accel::Tcg, 1.0);
        assert_eq!(tcg.boot, kvm.boot * TCG_FACTOR);
        assert_eq!(tcg.boot, Duration::from_secs(180));
        assert_eq!(Deadlines::new(Accel::Tcg, 0.5).reboot, tcg.reboot / 2);
    }
}
