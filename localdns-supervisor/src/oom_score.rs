//! The OOM killer's preference among the supervisor's CoreDNS processes: the idle warm standby is
//! the first the kernel kills when `localdns.slice` reaches its `MemoryMax` (`oom_score_adj` 1000),
//! so the serving CoreDNS keeps its cache; a standby that takes over is set back to the
//! supervisor's own value. Raising it needs no privilege, and lowering it back to a value the
//! supervisor holds is allowed too (the kernel refuses only values below the one a privileged
//! writer last set), so this works under `DynamicUser=` without `CAP_SYS_RESOURCE`.

use std::path::PathBuf;

/// The standby's value: the first to go.
pub const STANDBY: i32 = 1000;

fn path(pid: Option<u32>) -> PathBuf {
    match pid {
        Some(pid) => PathBuf::from(format!("/proc/{pid}/oom_score_adj")),
        None => PathBuf::from("/proc/self/oom_score_adj"),
    }
}

/// This process's `oom_score_adj`.
pub fn own() -> std::io::Result<i32> {
    read(None)
}

/// The `oom_score_adj` of `pid` (this process with `None`).
pub fn read(pid: Option<u32>) -> std::io::Result<i32> {
    let text = std::fs::read_to_string(path(pid))?;
    text.trim().parse().map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {text:?} is not a number: {e}", path(pid).display()),
        )
    })
}

/// Sets the `oom_score_adj` of `pid`.
pub fn set(pid: u32, value: i32) -> std::io::Result<()> {
    std::fs::write(path(Some(pid)), value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_raised_and_set_back_to_this_process_value() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let own = own().unwrap();
        set(pid, STANDBY).unwrap();
        assert_eq!(read(Some(pid)).unwrap(), STANDBY);
        set(pid, own).unwrap();
        assert_eq!(read(Some(pid)).unwrap(), own);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_gone_process_is_an_error() {
        assert!(set(u32::MAX - 1, STANDBY).is_err());
        assert!(read(Some(u32::MAX - 1)).is_err());
    }
}
