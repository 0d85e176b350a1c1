//! A validation problem (`<JSON path>: <message>`) and the list of them.

use std::fmt;

/// One problem with the config, at a JSON path such as `LocalDNS.NodeListenerIP`
/// or `ContainerImages[1].SHA256`; the root is written `<root>`. Displayed on one
/// line: control characters of the path (from a key in the input) are escaped,
/// newlines in the message become blanks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str("<root>")?;
        }
        for c in self.path.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        write!(f, ": {}", self.message.replace('\n', " "))
    }
}

/// Every problem found in one run, in the order found; displayed one a line.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem::new(path, message));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Problem> {
        self.0.iter()
    }

    /// `Ok(value)` when nothing was found, else `Err(self)`.
    pub fn into_result<T>(self, value: T) -> Result<T, Problems> {
        if self.0.is_empty() { Ok(value) } else { Err(self) }
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// Joins a parent path and a field name: `LocalDNS` + `Enabled` → `LocalDNS.Enabled`.
pub fn field(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// Appends a list index: `ContainerImages` + 1 → `ContainerImages[1]`.
pub fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_with_control_characters_stays_on_one_line_escaped() {
        let p = Problems(vec![
            Problem::new("LocalDNS.a\nb", "unknown field"),
            Problem::new("\u{7f}", "unknown field"),
            Problem::new("", "not valid JSON: x\ny"),
        ]);
        assert_eq!(
            p.to_string(),
            "LocalDNS.a\\nb: unknown field\n\\u{7f}: unknown field\n<root>: not valid JSON: x y"
        );
    }
}
