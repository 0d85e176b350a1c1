//! A guest command run with the new lines of a guest file shown as they are written: `start`
//! writes its progress (`start: ...` lines) to a file in the VM (`crate::deploy::evidence`), and
//! `harness vm exec` its command's output; this tails the file over the same guest agent session
//! that waits for the command (the agent's socket takes one client at a time).

use std::time::{Duration, Instant};

use crate::vm::qga::{QgaError, Session};
use crate::vm::{GuestAgent, GuestOutput, VmError};

/// How often the command's status is asked (one guest agent call: the command's end is seen at
/// most this late).
const STATUS_EVERY: Duration = Duration::from_millis(500);
/// How often the file is read again (three guest agent calls: open, read, close).
const READ_EVERY: Duration = Duration::from_secs(2);

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
}

/// Runs `argv` through `agent` (at most `timeout`), calling `show` with each line appended to
/// the guest file `file` while it runs; returns the command's output whatever its status.
pub fn run_showing(
    agent: &GuestAgent,
    argv: &[String],
    timeout: Duration,
    file: &str,
    show: &dyn Fn(&str),
) -> Result<GuestOutput, VmError> {
    let agent_err = |source: QgaError| VmError::Agent {
        vm: agent.vm().to_string(),
        source: Box::new(source),
    };
    let mut session = agent.session(&|| None)?;
    let started = Instant::now();
    let pid = session.spawn(argv, None, true).map_err(agent_err)?;
    let mut tail = LineTail::default();
    let mut read_at = started;
    loop {
        if let Some(out) = session.exec_status(pid).map_err(agent_err)? {
            show_new_lines(agent, &mut session, &mut tail, file, show)?;
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
        if read_at.elapsed() >= READ_EVERY {
            show_new_lines(agent, &mut session, &mut tail, file, show)?;
            read_at = Instant::now();
        }
        std::thread::sleep(STATUS_EVERY.min(timeout.saturating_sub(started.elapsed())));
    }
}

/// Reads what was appended to `file` since the last read and shows its complete lines. The
/// guest agent reads the file itself: a `tail` every poll would start a process in the guest,
/// under TCG a few tenths of a second of the emulated CPU `start` itself is using.
fn show_new_lines(
    agent: &GuestAgent,
    session: &mut Session,
    tail: &mut LineTail,
    file: &str,
    show: &dyn Fn(&str),
) -> Result<(), VmError> {
    match session.read_file_from(file, tail.offset) {
        Ok(bytes) => {
            for line in tail.feed(&bytes) {
                show(&line);
            }
            Ok(())
        }
        // The command has not written the file yet.
        Err(err) if err.is_open_refused() => Ok(()),
        Err(source) => Err(VmError::Agent {
            vm: agent.vm().to_string(),
            source: Box::new(source),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_out_whole_across_reads_and_the_offset_follows_the_bytes() {
        let mut tail = LineTail::default();
        assert_eq!(tail.feed(b"start: preflight\nstart: mach"), ["start: preflight"]);
        assert_eq!(tail.feed(b""), Vec::<String>::new());
        assert_eq!(tail.feed(b"ine kube1\n"), ["start: machine kube1"]);
        assert_eq!(tail.offset, 38);
        tail.feed(b"done");
        assert_eq!(tail.rest().as_deref(), Some("done"));
        assert_eq!(tail.rest(), None);
    }
}
