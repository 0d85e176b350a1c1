//! [`Chain`]: an error and its causes on one line (`a: b: c`), as the binary prints an error.

use std::error::Error;
use std::fmt;

/// Displays an error followed by each of its causes, `: `-separated; a cause whose text the
/// message already holds is left out.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !shown.contains(&text) {
                shown.push_str(": ");
                shown.push_str(&text);
            }
            source = cause.source();
        }
        f.write_str(&shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading /x")]
    struct Reading(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("building: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn causes_follow_the_message_and_repeats_are_dropped() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        assert_eq!(Chain(&Reading(io())).to_string(), "reading /x: gone");
        assert_eq!(Chain(&Repeats(io())).to_string(), "building: gone");
    }
}
