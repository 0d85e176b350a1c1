//! The last lines of a log file (the serial console, QEMU's stderr) for error messages.

use std::path::Path;

/// The last `n` lines of the file at `path` (empty when it cannot be read), with terminal
/// escape sequences and control characters other than tab removed.
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(bytes) = std::fs::read(path) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| strip_escapes(l))
        .collect()
}

/// Removes ANSI escape sequences (`ESC [ ... final`) and control characters but tab.
pub fn strip_escapes(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            match chars.peek() {
                // CSI: parameters and intermediates, then one final byte in '@'..='~'.
                Some('[') => {
                    chars.next();
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: up to BEL or ESC \.
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\x07' || (c == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    out
}

/// [`tail`] as one indented block, or `(empty)`.
pub fn tail_block(path: &Path, n: usize) -> String {
    let lines = tail(path, n);
    if lines.is_empty() {
        return format!("    ({} is empty or missing)", path.display());
    }
    lines
        .iter()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_without_control_characters() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("console.log");
        std::fs::write(&log, "one\ntwo\r\n\x1b[0mthree\n").unwrap();
        assert_eq!(tail(&log, 2), ["two", "three"]);
        assert_eq!(
            strip_escapes("[\x1b[0;32m  OK  \x1b[0m] Started\x1b[K x"),
            "[  OK  ] Started x"
        );
        assert_eq!(strip_escapes("a\x1b]104\x07b\x1b]0;t\x1b\\c"), "abc");
        assert_eq!(tail(&log, 10).len(), 3);
        assert!(tail_block(&tmp.path().join("none"), 3).contains("empty or missing"));
    }
}
