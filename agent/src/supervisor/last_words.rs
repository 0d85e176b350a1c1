//! What a CoreDNS last wrote to its standard error: the reason it gives when it refuses a
//! Corefile (`plugin/cache: /etc/…/Corefile:4 - Error during parsing: …`). Every line is passed
//! on to the supervisor's own standard error, so the journal keeps it as before.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;

/// The last non-empty line of the CoreDNS processes it was given ([`LastWords::pass_on`]).
#[derive(Clone, Debug, Default)]
pub struct LastWords(Arc<Mutex<String>>);

impl LastWords {
    /// The last line seen, cleared.
    pub fn take(&self) -> String {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn keep(&self, line: &str) {
        let line = line.trim();
        if !line.is_empty() {
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = line.to_owned();
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
        let stderr = child.stderr.take().unwrap();
        words.clone().pass_on(stderr).await;
        child.wait().await.unwrap();
        assert_eq!(words.take(), "plugin/cache: bad");
        assert_eq!(words.take(), "");
    }
}
