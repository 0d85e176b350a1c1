//! Deadlines that scale with the accelerator, and `wait_until`, whose error explains itself.

use std::fmt::Display;
use std::time::{Duration, Instant};

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

/// A wait that ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {waited:.1?} waiting for {what} on VM {vm}; last failure: {last_failure}")]
pub struct WaitTimeout {
    pub vm: String,
    pub what: String,
    pub waited: Duration,
    pub last_failure: String,
}

/// What one attempt of [`wait_until`] says.
pub enum Attempt<T, E> {
    /// Done with this value.
    Ready(T),
    /// Not yet, because of this (kept as "last failure").
    Retry(String),
    /// Stop waiting: nothing will change (e.g. QEMU exited).
    Abort(E),
}

/// Retries `attempt` until it is ready, aborts, or `timeout` runs out, sleeping with a small
/// backoff (50 ms up to 1 s) between attempts. The timeout error names what was awaited, on
/// which VM, for how long, and the last failure.
pub fn wait_until<T, E: From<WaitTimeout>>(
    vm: &str,
    timeout: Duration,
    what: impl Display,
    mut attempt: impl FnMut() -> Attempt<T, E>,
) -> Result<T, E> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(50);
    let mut last_failure: String;
    loop {
        match attempt() {
            Attempt::Ready(value) => return Ok(value),
            Attempt::Abort(err) => return Err(err),
            Attempt::Retry(why) => last_failure = why,
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(WaitTimeout {
                vm: vm.to_string(),
                what: what.to_string(),
                waited,
                last_failure,
            }
            .into());
        }
        std::thread::sleep(pause.min(timeout - waited));
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// `Attempt::Retry` from any displayable failure.
pub fn retry<T, E>(why: impl Display) -> Attempt<T, E> {
    Attempt::Retry(why.to_string())
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

    #[test]
    fn timeout_error_names_what_vm_how_long_and_last_failure() {
        let mut n = 0;
        let err = wait_until::<(), WaitTimeout>("node1", Duration::from_millis(120), "the agent", || {
            n += 1;
            retry(format!("attempt {n} refused"))
        })
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("the agent") && text.contains("node1"), "{text}");
        assert!(text.contains(&format!("attempt {n} refused")), "{text}");
        assert!(err.waited >= Duration::from_millis(120), "{text}");
    }

    #[test]
    fn abort_stops_at_once_and_ready_returns_the_value() {
        let err = wait_until::<(), WaitTimeout>("vm", Duration::from_secs(60), "x", || {
            Attempt::Abort(WaitTimeout {
                vm: "vm".into(),
                what: "gone".into(),
                waited: Duration::ZERO,
                last_failure: "qemu exited".into(),
            })
        })
        .unwrap_err();
        assert_eq!(err.last_failure, "qemu exited");
        let mut tries = 0;
        let value = wait_until::<_, WaitTimeout>("vm", Duration::from_secs(5), "x", || {
            tries += 1;
            if tries < 3 {
                retry("not yet")
            } else {
                Attempt::Ready(tries)
            }
        })
        .unwrap();
        assert_eq!(value, 3);
    }
}
