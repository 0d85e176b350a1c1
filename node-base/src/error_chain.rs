//! An error and its causes: the one formatter of error chains, for the agent, the harness and
//! the scenarios alike ([`chain`] on one line, [`Chain`] as a `Display`, [`parts`] for another
//! layout).

use std::error::Error;
use std::fmt;

/// The texts of `err` and of each of its causes, a cause left out when the text so far already
/// holds it (many errors repeat their source).
pub fn parts(err: &dyn Error) -> Vec<String> {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts
}

/// Displays an error followed by each of its causes, `: `-separated ([`parts`]).
pub struct Chain<'a>(pub &'a dyn Error);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&parts(self.0).join(": "))
    }
}

/// `err` and its causes on one line, `a: b: c` ([`Chain`] with newlines made spaces): for logs,
/// conditions and status lines.
pub fn chain(err: &dyn Error) -> String {
    Chain(err).to_string().replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct E {
        text: String,
        #[source]
        source: Option<Box<E>>,
    }

    fn e(text: &str, source: Option<E>) -> E {
        E {
            text: text.into(),
            source: source.map(Box::new),
        }
    }

    #[test]
    fn causes_are_joined_on_one_line_and_repeats_dropped() {
        let err = e(
            "installing CoreDNS",
            Some(e(
                "fetch x: timed out",
                Some(e("timed out", Some(e("os error\n110", None)))),
            )),
        );
        assert_eq!(
            chain(&err),
            "installing CoreDNS: fetch x: timed out: os error 110"
        );
    }

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
