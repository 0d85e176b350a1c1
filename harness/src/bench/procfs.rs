//! A process's figures from `/proc`: CPU time (utime+stime, clock ticks), VmRSS and parent, and
//! the conversion of clock ticks to millicores.

use super::error::{BenchError, io_err};

/// Clock ticks per second, the unit of utime and stime in `/proc/<pid>/stat`.
pub fn clock_ticks() -> Result<u64, BenchError> {
    // SAFETY: sysconf reads a constant of the system; no memory of ours is involved.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks)
        .ok()
        .filter(|&t| t > 0)
        .ok_or(BenchError::ClockTicks(ticks))
}

/// `ticks` of CPU time over `seconds` of wall time, in thousandths of a CPU.
pub fn millicores(ticks: u64, clk_tck: u64, seconds: f64) -> f64 {
    ticks as f64 / clk_tck as f64 / seconds * 1000.0
}

fn unexpected(path: &str, why: impl Into<String>) -> BenchError {
    BenchError::Unexpected {
        source_of: path.to_owned(),
        why: why.into(),
    }
}

/// VmRSS of `pid`, KiB.
pub fn rss_kib(pid: u32) -> Result<u64, BenchError> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(io_err("reading", &path))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| unexpected(&path, "no VmRSS line"))
}

fn stat(pid: u32) -> Result<(String, String), BenchError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(io_err("reading", &path))?;
    Ok((path, text))
}

/// utime+stime of `pid`, clock ticks (`agent::supervisor::stuck::cpu_ticks_in_stat`).
pub fn cpu_ticks(pid: u32) -> Result<u64, BenchError> {
    let (path, text) = stat(pid)?;
    agent::supervisor::stuck::cpu_ticks_in_stat(&text)
        .ok_or_else(|| unexpected(&path, format!("no CPU times in {text:?}")))
}

/// The parent of `pid` (field 4 of `/proc/<pid>/stat`).
pub fn parent_pid(pid: u32) -> Result<u32, BenchError> {
    let (path, text) = stat(pid)?;
    // After the command name (which may hold spaces and parentheses): the state, then the parent.
    text.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        .ok_or_else(|| unexpected(&path, format!("no parent pid in {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_rss_and_a_parent() {
        let me = std::process::id();
        assert!(rss_kib(me).unwrap() > 0);
        cpu_ticks(me).unwrap();
        assert_eq!(parent_pid(me).unwrap(), std::os::unix::process::parent_id());
        assert!(clock_ticks().unwrap() > 0);
    }

    #[test]
    fn millicores_are_thousandths_of_a_cpu() {
        assert_eq!(millicores(50, 100, 1.0), 500.0);
        assert_eq!(millicores(300, 100, 30.0), 100.0);
    }
}
