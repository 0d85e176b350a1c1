//! The accelerator choice: KVM only when it really works (a probe boot decides), TCG otherwise;
//! `LAB_ACCEL` forces either.

use std::fmt;

/// How QEMU runs the guest's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation (`-accel kvm -cpu host`).
    Kvm,
    /// Emulation (`-accel tcg,thread=single,tb-size=256 -cpu` [`TCG_CPU`]); every deadline is
    /// scaled up.
    ///
    /// `thread=single` runs the vCPUs round-robin on one host thread. Multi-threaded TCG lets
    /// one vCPU run a stale translation of kernel text that another vCPU is patching with
    /// `int3` (static keys), and Debian's kernel then dies at boot with
    /// `Oops: int3 ... RIP: sched_clock_cpu` (seen in CI, one boot in a few dozen). With
    /// two cores per host and up to two VMs at once, one thread per VM costs nothing.
    Tcg,
}

/// The guest CPU under TCG: QEMU's `max` model without `cx16` (the `cmpxchg16b` instruction).
///
/// QEMU 7.2 (Debian 12's) emulates `cmpxchg16b` in a helper that computes the guest's flags from
/// the condition-code state in memory, and its translator does not store that state before the
/// call; when the state there is stale, the helper leaves garbage in the guest's EFLAGS (later
/// QEMU releases compute the flags inline instead). Debian's kernel runs
/// `cmpxchg16b %gs:(%rsi)` in SLUB's per-CPU allocation fast path, and twice a lab VM died of it:
/// `traps: PANIC: double fault` in `__kmalloc_noprof`/`__kmalloc_cache_node_noprof` right after
/// the instruction, with `EFLAGS` the low half of `RAX` plus ZF (docs/troubleshooting.md, "A lab
/// VM's kernel dies of a double fault"). Without `cx16` the kernel takes its own emulation
/// (`this_cpu_cmpxchg16b_emu`, plain instructions with interrupts off) and never runs the
/// instruction; every program of the lab's images targets baseline x86-64, which has no
/// `cmpxchg16b` either.
pub const TCG_CPU: &str = "max,-cx16";

/// What `LAB_ACCEL` may say.
#[derive(Debug, thiserror::Error)]
#[error("LAB_ACCEL={0:?} is not understood: use `kvm` or `tcg` (or leave it unset to detect)")]
pub struct BadAccel(pub String);

impl Accel {
    /// `LAB_ACCEL` if set, else what the host supports (see [`Accel::detect_from`]).
    pub fn from_env() -> Result<Accel, BadAccel> {
        match std::env::var("LAB_ACCEL") {
            Ok(value) if !value.trim().is_empty() => Accel::parse(&value),
            _ => Ok(Accel::detect()),
        }
    }

    /// Parses `kvm` or `tcg` (any case).
    pub fn parse(value: &str) -> Result<Accel, BadAccel> {
        match value.trim().to_ascii_lowercase().as_str() {
            "kvm" => Ok(Accel::Kvm),
            "tcg" => Ok(Accel::Tcg),
            _ => Err(BadAccel(value.to_string())),
        }
    }

    /// Detects on this host: where `/dev/kvm` opens read-write, a probe boot decides
    /// ([`super::accel_probe`]: on nested hosts `/dev/kvm` can exist while KVM fails or hangs);
    /// TCG otherwise.
    pub fn detect() -> Accel {
        let kvm_device_opens = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        if kvm_device_opens {
            super::accel_probe::decide_with_kvm_device()
        } else {
            Accel::Tcg
        }
    }

    /// The QEMU arguments selecting this accelerator and CPU model.
    pub fn qemu_args(self) -> [&'static str; 4] {
        match self {
            Accel::Kvm => ["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => ["-accel", "tcg,thread=single,tb-size=256", "-cpu", TCG_CPU],
        }
    }
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_kvm_and_tcg_and_names_bad_values() {
        assert_eq!(Accel::parse("KVM").unwrap(), Accel::Kvm);
        assert_eq!(Accel::parse(" tcg ").unwrap(), Accel::Tcg);
        let err = Accel::parse("hvf").unwrap_err().to_string();
        assert!(err.contains("\"hvf\"") && err.contains("LAB_ACCEL"), "{err}");
    }

    #[test]
    fn tcg_uses_one_thread_a_bounded_translation_cache_and_cpu_max_without_cmpxchg16b() {
        assert_eq!(
            Accel::Tcg.qemu_args(),
            ["-accel", "tcg,thread=single,tb-size=256", "-cpu", "max,-cx16"]
        );
        assert_eq!(Accel::Kvm.qemu_args(), ["-accel", "kvm", "-cpu", "host"]);
    }
}
