//! What a CoreDNS last wrote to its standard error: the reason it gives when it refuses a
//! Corefile (`plugin/cache: /etc/…/Corefile:4 - Error during parsing: …`). Every line is passed
//! on to the supervisor's own standard error, so the journal keeps it as before.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::task::JoinHandle;

/// How long [`LastWords::settle`] waits for the stream of a CoreDNS that exited to be read to its
/// end.
const SETTLE: Duration = Duration::from_secs(1);

/// The last non-empty line of the CoreDNS processes it was given ([`LastWords::follow`]).
#[derive(Clone, Debug, Default)]
pub struct LastWords {
    last: Arc<Mutex<String>>,
    /// The task reading the latest CoreDNS's stream.
    reader: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl LastWords {
    /// Reads `stderr` in a task of its own ([`LastWords::pass_on`]), the latest one followed.
    pub fn follow(&self, stderr: ChildStderr) {
        let task = tokio::spawn(self.clone().pass_on(stderr));
        *self.reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Waits (up to a second) until the stream of the CoreDNS followed last is read to its end:
    /// once it exited, what it said last before is then kept. The reader task runs beside the
    /// one that saw the exit, so without this the last line could still be in the pipe.
    pub async fn settle(&self) {
        let task = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(SETTLE, task).await;
        }
    }

    /// The last line seen, cleared.
    pub fn take(&self) -> String {
        std::mem::take(&mut *self.last.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn keep(&self, line: &str) {
        let line = line.trim();
        if !line.is_empty() {
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = line.to_owned();
        }
    }

    /// Copies `stderr` to the supervisor's, line by line, keeping the last line; until it closes.
    pub async fn pass_on(self, stderr: ChildStderr) {
        use std::io::Write as _;
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            self.keep(&line);
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_last_line_a_process_wrote_is_kept_until_taken() {
        let words = LastWords::default();
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", "echo first >&2; echo 'plugin/cache: bad' >&2; echo >&2"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        words.follow(child.stderr.take().unwrap());
        child.wait().await.unwrap();
        words.settle().await;
        assert_eq!(words.take(), "plugin/cache: bad");
        assert_eq!(words.take(), "");
    }
}
