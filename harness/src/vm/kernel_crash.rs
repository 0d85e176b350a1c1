//! The guest kernel's crash reports in a VM's console log (a panic, an oops, a `BUG:`), so a
//! failure caused by one says so: after the kernel reboots the VM (the agent sets
//! `kernel.panic_on_oops=1`), the last console lines are the new boot's and a test sees only
//! what the reboot broke (a guest agent that forgot its commands, a Node NotReady).

use std::path::Path;

use super::console::strip_escapes;

/// The markers of a kernel crash report's key lines.
const MARKERS: [&str; 5] = [
    "Kernel panic - not syncing",
    "PANIC:",
    "Oops:",
    "BUG:",
    "RIP: 0010:",
];

/// At most this many lines are reported (a crash report repeats its `RIP` line).
const MAX_LINES: usize = 12;

/// The crash reports' key lines in `text`, each with its line number (from 1), escapes removed.
pub fn key_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| MARKERS.iter().any(|m| line.contains(m)))
        .take(MAX_LINES)
        .map(|(i, line)| (i + 1, strip_escapes(line)))
        .collect()
}

/// A block for an error message or an evidence file naming the crash reports in the console log
/// at `path`, or `None` when it has none (or cannot be read).
pub fn report(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let lines = key_lines(&String::from_utf8_lossy(&bytes));
    if lines.is_empty() {
        return None;
    }
    let body: Vec<String> = lines.iter().map(|(n, l)| format!("    {n:>6}: {l}")).collect();
    Some(format!(
        "--- the guest kernel crashed: its report's key lines in {} ---\n{}",
        path.display(),
        body.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOUBLE_FAULT: &str = "[  205.632860] random: crng reseeded due to virtual machine fork
[  233.164695] traps: PANIC: double fault, error_code: 0x0
[  233.166547] Oops: double fault: 0000 [#1] PREEMPT SMP NOPTI
[  233.168137] RIP: 0010:__kmalloc_cache_node_noprof+0x11a/0x320
[  233.169048] RSP: 0018:ff3fdd04c093f9d0 EFLAGS: 44ba5e42
[  233.171909] RIP: 0033:0xd7bf4e
[  233.173396] Kernel panic - not syncing: Fatal exception in interrupt
[    0.000000] Linux version 6.12.117+deb13-amd64
";

    #[test]
    fn a_double_fault_is_reported_by_its_key_lines_and_their_numbers() {
        let lines = key_lines(DOUBLE_FAULT);
        let numbers: Vec<usize> = lines.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [2, 3, 4, 7], "{lines:?}");
        assert!(lines[2].1.contains("__kmalloc_cache_node_noprof"));

        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("console.log");
        std::fs::write(&log, DOUBLE_FAULT).unwrap();
        let text = report(&log).expect("a report");
        assert!(text.starts_with("--- the guest kernel crashed"), "{text}");
        assert!(
            text.contains("     7: [  233.173396] Kernel panic - not syncing"),
            "{text}"
        );
    }

    #[test]
    fn a_clean_boot_or_a_missing_log_reports_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("console.log");
        std::fs::write(&log, "[    1.0] Run /init as init process\nlab login:\n").unwrap();
        assert_eq!(report(&log), None);
        assert_eq!(report(&tmp.path().join("missing")), None);
    }

    #[test]
    fn a_crash_storm_is_cut_to_the_first_lines() {
        let storm = "[ 1.0] BUG: soft lockup\n".repeat(50);
        assert_eq!(key_lines(&storm).len(), MAX_LINES);
    }
}
