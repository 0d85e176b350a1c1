//! A guest command run with the new lines of a guest file shown as they are written: `start`
//! writes its progress (`start: ...` lines) to a file in the VM ([`super::evidence`]), and this
//! tails it over the same guest agent session that waits for the command (the agent's socket
//! takes one client at a time).

use std::time::{Duration, Instant};

use crate::vm::qga::{QgaError, Session};
use crate::vm::{GuestOutput, Vm, VmError};

/// How often the file is read again.
const POLL: Duration = Duration::from_secs(2);

/// The lines of a growing file, from the bytes appended to it.
#[derive(Debug, Default)]
pub struct LineTail {
    /// Bytes read so far (the next read starts there).
    pub offset: u64,
    partial: Vec<u8>,
}

impl LineTail {
    /// Takes the bytes appended since the last call; returns the lines they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.offset += bytes.len() as u64;
        self.partial.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            lines.push(String::from_utf8_lossy(&line[..end]).into_owned());
        }
        lines
    }

    /// The last line if it has no newline yet (at the end).
    pub fn rest(&mut self) -> Option<String> {
        let rest = std::mem::take(&mut self.partial);
        (!rest.is_empty()).then(|| String::from_utf8_lossy(&rest).into_owned())
    }

    /// The guest command that prints the file's bytes from [`LineTail::offset`] on.
    pub fn read_argv(&self, file: &str) -> Vec<String> {
        vec![
            "tail".into(),
            "-c".into(),
            format!("+{}", self.offset + 1),
            file.into(),
        ]
    }
}

/// Runs `argv` in `vm` (at most `timeout`), calling `show` with each line appended to the guest
/// file `file` while it runs; returns the command's output whatever its status.
pub fn run_showing(
    vm: &Vm,
    argv: &[String],
    timeout: Duration,
    file: &str,
    show: &dyn Fn(&str),
) -> Result<GuestOutput, VmError> {
    let agent_err = |source: QgaError| VmError::Agent {
        vm: vm.name().to_string(),
        source: Box::new(source),
    };
    let mut session = vm.agent().session(&|| None)?;
    let started = Instant::now();
    let pid = session.spawn(argv, None, true).map_err(agent_err)?;
    let mut tail = LineTail::default();
    loop {
        if let Some(out) = session.exec_status(pid).map_err(agent_err)? {
            show_new_lines(vm, &mut session, &mut tail, file, show)?;
            if let Some(rest) = tail.rest() {
                show(&rest);
            }
            return Ok(out);
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(agent_err(QgaError::Timeout {
                argv: argv.to_vec(),
                pid,
                waited,
            }));
        }
        show_new_lines(vm, &mut session, &mut tail, file, show)?;
        std::thread::sleep(POLL.min(timeout.saturating_sub(started.elapsed())));
    }
}

/// Reads what was appended to `file` since the last read and shows its complete lines.
fn show_new_lines(
    vm: &Vm,
    session: &mut Session,
    tail: &mut LineTail,
    file: &str,
    show: &dyn Fn(&str),
) -> Result<(), VmError> {
    let out = session
        .exec(&tail.read_argv(file), None, vm.deadlines().command)
        .map_err(|source| VmError::Agent {
            vm: vm.name().to_string(),
            source: Box::new(source),
        })?;
    // The file may not exist yet.
    if out.success() {
        for line in tail.feed(&out.stdout) {
            show(&line);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_out_whole_across_reads_and_the_offset_follows_the_bytes() {
        let mut tail = LineTail::default();
        assert_eq!(tail.read_argv("/f"), ["tail", "-c", "+1", "/f"]);
        assert_eq!(tail.feed(b"start: preflight\nstart: mach"), ["start: preflight"]);
        assert_eq!(tail.feed(b""), Vec::<String>::new());
        assert_eq!(tail.feed(b"ine kube1\n"), ["start: machine kube1"]);
        assert_eq!(tail.offset, 38);
        assert_eq!(tail.read_argv("/f")[2], "+39");
        tail.feed(b"done");
        assert_eq!(tail.rest().as_deref(), Some("done"));
        assert_eq!(tail.rest(), None);
    }

    #[test]
    fn the_read_command_returns_exactly_the_bytes_after_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("start.stdout");
        std::fs::write(&file, "one\ntwo\n").unwrap();
        let mut tail = LineTail::default();
        let read = |tail: &LineTail| {
            let argv = tail.read_argv(&file.display().to_string());
            agent::exec::run(std::process::Command::new(&argv[0]).args(&argv[1..]))
                .unwrap()
                .stdout
        };
        assert_eq!(tail.feed(&read(&tail)), ["one", "two"]);
        std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
        assert_eq!(tail.feed(&read(&tail)), ["three"]);
        assert!(read(&tail).is_empty());
    }
}
