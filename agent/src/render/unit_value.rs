//! Values written into systemd unit files and shell scripts: quoted so that systemd or the shell
//! reads back exactly the value, or refused with the reason.
//!
//! Most values are checked types already ([`crate::names`]); these functions make each renderer
//! safe on its own, whatever reaches it (an install path with a space, a label with a `%`).

use std::path::Path;

/// A value that cannot be written where it was meant to go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitValueError {
    #[error("{what} {value:?} is not UTF-8, which a unit file cannot hold")]
    NotUtf8 { what: &'static str, value: String },
    #[error("{what} {value:?} is not an absolute path, which systemd needs for a command")]
    NotAbsolute { what: &'static str, value: String },
    #[error("{what} {value:?} holds a NUL character, which a shell script cannot carry")]
    Nul { what: &'static str, value: String },
    #[error(
        "{what} {value:?} holds {c:?}, which systemd refuses in a command's path (quotes, backslashes and control characters)"
    )]
    UnsafeCommand {
        what: &'static str,
        value: String,
        c: char,
    },
}

/// Characters a command-line word may hold bare: systemd reads them literally (no quoting,
/// escape, specifier `%` or variable `$`).
fn bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || "/._-=,:+@".contains(c)
}

/// One word of an `ExecStart=`-style command line, read back by systemd as exactly `value`: bare
/// when every character is plain, else in double quotes with C escapes for `\`, `"` and control
/// characters (a newline is `\n`), `%` as `%%` (specifiers) and `$` as `$$` (variables). Use
/// [`exec_path`] for the command itself.
pub fn exec_word(value: &str) -> String {
    quoted(value, true)
}

/// [`exec_word`]; `$` doubled only in arguments (systemd expands variables there, not in the
/// command's path).
fn quoted(value: &str, argument: bool) -> String {
    if !value.is_empty() && value.chars().all(bare) {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if argument => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                for b in c.to_string().bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The command of an `ExecStart=` line: `path` quoted as an [`exec_word`] but for `$`, which
/// systemd takes literally in a command's path. Refused when it is not absolute or not UTF-8, or
/// holds what systemd refuses in a command's path however it is quoted (`"`, `'`, `\`, control
/// characters: "Executable name contains special characters").
pub fn exec_path(what: &'static str, path: &Path) -> Result<String, UnitValueError> {
    let Some(text) = path.to_str() else {
        return Err(UnitValueError::NotUtf8 {
            what,
            value: path.to_string_lossy().into_owned(),
        });
    };
    if !path.is_absolute() {
        return Err(UnitValueError::NotAbsolute {
            what,
            value: text.to_owned(),
        });
    }
    if let Some(c) = text.chars().find(|&c| c.is_control() || "\"'\\".contains(c)) {
        return Err(UnitValueError::UnsafeCommand {
            what,
            value: text.to_owned(),
            c,
        });
    }
    Ok(quoted(text, false))
}

/// Free text on one line of a unit (`Description=`): `%` as `%%`, and control characters, which
/// would end or continue the line, written as escapes (`\n`) — it is text for people, not a value
/// anything parses back. A trailing `\` (which would join the next line) is written `\x5c`.
pub fn setting_text(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '%' => out.push_str("%%"),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    if out.ends_with('\\') {
        out.pop();
        out.push_str("\\x5c");
    }
    out
}

/// One shell word, read back by `sh` and `bash` as exactly `value`: in single quotes, each `'`
/// written `'\''` (a newline stays literal inside the quotes); a NUL, which no shell word can
/// hold, is refused.
pub fn shell_word(what: &'static str, value: &str) -> Result<String, UnitValueError> {
    if value.contains('\0') {
        return Err(UnitValueError::Nul {
            what,
            value: value.to_owned(),
        });
    }
    Ok(format!("'{}'", value.replace('\'', r"'\''")))
}

/// Text on a `#` comment line of a script: control characters (a newline would start a command)
/// written as escapes.
pub fn comment_text(value: &str) -> String {
    value
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// The hostile values every renderer's tests write (here, in the renderers and in the guest test
/// `agent/tests/guest_unit_values.rs` with the real systemd): a space, `%` (a specifier), both
/// quotes, a newline, `$` (a variable), a backslash and a trailing one, `;`.
pub const HOSTILE: [&str; 9] = [
    "with space",
    "50%n",
    "say \"hi\"",
    "it's",
    "line\nExecStartPre=/bin/false",
    "$HOME and ${PATH}",
    "back\\slash",
    "ends\\",
    ";",
];

#[cfg(test)]
pub(crate) mod tests {
    use std::process::Command;

    use super::*;
    use rstest::rstest;

    pub use super::HOSTILE;

    /// systemd's reading of one quoted command-line word (systemd.syntax(7), "Quoting"; the
    /// specifier and variable doubling of systemd.service(5)), for the unit tests; the guest test
    /// `agent/tests/guest_unit_values.rs` checks the same words with the real systemd.
    pub fn read_exec_word(word: &str) -> String {
        read_word(word, true)
    }

    /// [`read_exec_word`] for the command itself (`$` is literal there).
    pub fn read_exec_path(word: &str) -> String {
        read_word(word, false)
    }

    fn read_word(word: &str, argument: bool) -> String {
        let Some(inner) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) else {
            return word.to_owned();
        };
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        out.push(u8::from_str_radix(&hex, 16).unwrap() as char);
                    }
                    Some(other) => out.push(other),
                    None => panic!("{word:?} ends in a lone backslash"),
                },
                '%' => {
                    assert_eq!(chars.next(), Some(c), "{word:?} has a single {c}");
                    out.push(c);
                }
                '$' if argument => {
                    assert_eq!(chars.next(), Some(c), "{word:?} has a single {c}");
                    out.push(c);
                }
                '"' => panic!("{word:?} has an unescaped quote inside"),
                c => out.push(c),
            }
        }
        out
    }

    /// The words of `unit`'s `ExecStart=` line (continuation lines joined), each read back as
    /// [`read_exec_path`] (the command) and [`read_exec_word`] (its arguments) do, for the
    /// renderers' unit tests.
    pub fn exec_start_words(unit: &str) -> Vec<String> {
        let start = unit
            .find("\nExecStart=")
            .expect("the unit has an ExecStart= line")
            + "\nExecStart=".len();
        let mut line = String::new();
        for part in unit[start..].split('\n') {
            match part.strip_suffix('\\') {
                Some(continued) => line.push_str(continued),
                None => {
                    line.push_str(part);
                    break;
                }
            }
        }
        let (mut raw, mut word, mut quoted, mut escaped) = (Vec::new(), String::new(), false, false);
        for c in line.chars() {
            if quoted {
                word.push(c);
                quoted = escaped || c != '"';
                escaped = !escaped && c == '\\';
            } else if c == ' ' {
                if !word.is_empty() {
                    raw.push(std::mem::take(&mut word));
                }
            } else {
                quoted = c == '"' && word.is_empty();
                word.push(c);
            }
        }
        if !word.is_empty() {
            raw.push(word);
        }
        raw.iter()
            .enumerate()
            .map(|(i, w)| {
                if i == 0 {
                    read_exec_path(w)
                } else {
                    read_exec_word(w)
                }
            })
            .collect()
    }

    #[test]
    fn exec_start_words_split_continued_lines_and_quoted_words() {
        let unit = "[Service]\nExecStart=/bin/x \\\n  \"a \\\" b%%\" \\\n  c\nRestart=no\n";
        assert_eq!(exec_start_words(unit), ["/bin/x", "a \" b%", "c"]);
    }

    #[rstest]
    fn hostile_exec_words_read_back_as_the_value_and_stay_one_word(
        #[values(0, 1, 2, 3, 4, 5, 6, 7, 8)] i: usize,
    ) {
        let value = HOSTILE[i];
        let word = exec_word(value);
        assert!(!word.contains('\n'), "{word:?}");
        assert!(!word.contains(' ') || word.starts_with('"'), "{word}");
        assert_eq!(read_exec_word(&word), value, "{word}");
    }

    #[test]
    fn plain_words_stay_bare_and_the_empty_word_is_quoted() {
        assert_eq!(exec_word("--node-labels=a=b,c=d"), "--node-labels=a=b,c=d");
        assert_eq!(
            exec_word("/usr/local/bin/unbounded-agent"),
            "/usr/local/bin/unbounded-agent"
        );
        assert_eq!(exec_word(""), "\"\"");
        assert_eq!(exec_word("a\u{1}"), "\"a\\x01\"");
    }

    /// What systemd 252 refuses in a command's path (`systemd-analyze verify`: "Executable name
    /// contains special characters") is refused here; a space, `%`, `$` and `;` are quoted.
    #[rstest]
    fn a_command_path_is_quoted_or_refused_as_systemd_takes_it(
        #[values(0, 1, 2, 3, 4, 5, 6, 7, 8)] i: usize,
    ) {
        let value = HOSTILE[i];
        let path = format!("/opt/{value}/agent");
        match exec_path("the agent", Path::new(&path)) {
            Ok(word) => {
                assert!(
                    !value.contains(['"', '\'', '\\', '\n']),
                    "{value:?} should be refused"
                );
                assert_eq!(read_exec_path(&word), path);
            }
            Err(err) => {
                assert!(
                    value.contains(['"', '\'', '\\', '\n']),
                    "{value:?} refused: {err}"
                );
                assert!(
                    err.to_string()
                        .contains("which systemd refuses in a command's path"),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn a_command_path_must_be_absolute_utf8() {
        assert_eq!(
            exec_path("the agent", Path::new("/opt/my tools/agent")).unwrap(),
            "\"/opt/my tools/agent\""
        );
        let relative = exec_path("the agent", Path::new("bin/agent")).unwrap_err();
        assert!(
            relative
                .to_string()
                .contains("the agent \"bin/agent\" is not an absolute path"),
            "{relative}"
        );
        use std::os::unix::ffi::OsStrExt;
        let bytes = std::ffi::OsStr::from_bytes(b"/opt/\xff/agent");
        let not_utf8 = exec_path("the agent", Path::new(bytes)).unwrap_err();
        assert!(matches!(not_utf8, UnitValueError::NotUtf8 { .. }), "{not_utf8}");
    }

    #[rstest]
    fn setting_text_stays_on_its_line_with_specifiers_doubled(#[values(0, 1, 2, 3, 4, 5, 6, 7, 8)] i: usize) {
        let text = setting_text(HOSTILE[i]);
        assert!(!text.contains('\n') && !text.ends_with('\\'), "{text:?}");
        assert_eq!(
            text.matches('%').count(),
            2 * HOSTILE[i].matches('%').count(),
            "{text}"
        );
    }

    /// The real `sh` reads each hostile word back as the value.
    #[rstest]
    fn hostile_shell_words_read_back_as_the_value_in_sh(#[values(0, 1, 2, 3, 4, 5, 6, 7, 8)] i: usize) {
        let value = HOSTILE[i];
        let script = format!("printf '%s' {}", shell_word("the value", value).unwrap());
        let out = crate::exec::run_stdout(Command::new("sh").args(["-c", &script]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, value, "{script}");
    }

    #[test]
    fn a_nul_cannot_be_a_shell_word_and_comments_stay_on_their_line() {
        let err = shell_word("the config path", "a\0b").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the config path \"a\\0b\" holds a NUL"),
            "{err}"
        );
        assert_eq!(comment_text("m1\nrm -rf /"), "m1\\nrm -rf /");
    }
}
