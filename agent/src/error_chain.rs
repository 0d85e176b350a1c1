//! An error and its causes on one line: the one formatter of the agent's error chains.

/// `err` and its sources, `a: b: c`; a cause whose text an earlier part already holds is
/// dropped (many errors repeat their source), newlines become spaces.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ").replace('\n', " ")
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
}
