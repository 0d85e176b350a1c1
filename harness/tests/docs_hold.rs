//! The docs hold against the code: every `harness`, `unbounded-agent` and `kubectl-unbounded`
//! (`kubectl unbounded`) command line in README.md and docs/ parses with the real command-line
//! definitions (clap's `try_parse_from`), every repository path they name in code exists, every
//! relative link resolves, and no doc or source comment carries a run's date, a session, an issue
//! number or a commit hash (history stays in git), nor does a function or module name say "the
//! spec". Reads files only: no root, no VM.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use clap::Parser as _;
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use regex::Regex;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// README.md and every Markdown file under docs/.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// Where a piece of a doc was found, for the failure message.
struct Found {
    file: String,
    line: usize,
    text: String,
}

/// What a Markdown file holds in code: shell lines of its code blocks (not json, yaml or text
/// blocks; a line ending in `\` joined with the next) and its inline code spans; and the
/// destinations of its links.
struct DocCode {
    shell_lines: Vec<Found>,
    spans: Vec<Found>,
    links: Vec<Found>,
}

fn read_doc(path: &Path) -> DocCode {
    let text = std::fs::read_to_string(path).unwrap();
    let file = path.strip_prefix(repo()).unwrap().display().to_string();
    let line_of = |offset: usize| text[..offset].lines().count().max(1);
    let mut doc = DocCode {
        shell_lines: Vec::new(),
        spans: Vec::new(),
        links: Vec::new(),
    };
    let mut in_shell_block: Option<usize> = None;
    for (event, range) in Parser::new(&text).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match &kind {
                    CodeBlockKind::Fenced(info) => info.split_whitespace().next().unwrap_or(""),
                    CodeBlockKind::Indented => "",
                };
                if !["json", "yaml", "text", "toml"].contains(&lang) {
                    in_shell_block = Some(line_of(range.start) + 1);
                }
            }
            Event::End(TagEnd::CodeBlock) => in_shell_block = None,
            Event::Text(block) if in_shell_block.is_some() => {
                let first = in_shell_block.unwrap();
                let mut pending = String::new();
                let mut start = first;
                for (i, line) in block.lines().enumerate() {
                    if pending.is_empty() {
                        start = first + i;
                    }
                    if let Some(head) = line.strip_suffix('\\') {
                        pending.push_str(head);
                        pending.push(' ');
                        continue;
                    }
                    pending.push_str(line);
                    doc.shell_lines.push(Found {
                        file: file.clone(),
                        line: start,
                        text: std::mem::take(&mut pending),
                    });
                }
            }
            Event::Code(code) => doc.spans.push(Found {
                file: file.clone(),
                line: line_of(range.start),
                text: code.to_string(),
            }),
            Event::Start(Tag::Link { dest_url, .. }) => doc.links.push(Found {
                file: file.clone(),
                line: line_of(range.start),
                text: dest_url.to_string(),
            }),
            _ => {}
        }
    }
    doc
}

/// `text` up to a `#` that starts a shell comment (after whitespace, outside quotes).
fn without_comment(text: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (i, c) in text.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => return &text[..i],
            _ => {}
        }
        previous = c;
    }
    text
}

/// The simple commands of a shell line: split at `;`, `&&`, `||`, `|`, `&`, `$(`, `(`, `)`,
/// `{`, `}` outside quotes.
fn simple_commands(text: &str) -> Vec<String> {
    let (mut single, mut double) = (false, false);
    let mut parts = vec![String::new()];
    for c in text.chars() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            ';' | '&' | '|' | '(' | ')' | '{' | '}' if !single && !double => {
                parts.push(String::new());
                continue;
            }
            '$' if !single => {
                // `$(`: the `(` splits; a lone `$` stays.
            }
            _ => {}
        }
        parts.last_mut().unwrap().push(c);
    }
    parts
        .into_iter()
        .map(|p| p.trim().trim_end_matches('$').trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The docs' placeholders, as the values a reader would type.
fn with_placeholders_filled(text: &str) -> String {
    let mut text = text.replace(['[', ']'], "");
    for (placeholder, value) in [
        ("<node config>", "node-configs/localdns.json"),
        ("<node-config>", "node-configs/localdns.json"),
        ("<file>", "node-configs/localdns.json"),
        ("<config>", "/etc/unbounded/agent.json"),
        ("<n>", "3"),
        ("<N>", "3"),
        ("<vm>", "localdns"),
        ("<machine>", "m1"),
        ("<m>", "m1"),
        ("<command>", "validate"),
        ("<VM>", "192.168.100.10"),
    ] {
        text = text.replace(placeholder, value);
    }
    // Any other `<name>` stands for a word.
    static OTHER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"<[A-Za-z][A-Za-z0-9 _-]*>").unwrap());
    let text = OTHER.replace_all(&text, "word");
    static WORDS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\bN\b|\bNODE_CONFIG\b|\.\.\.|…").unwrap());
    WORDS
        .replace_all(&text, |c: &regex::Captures| match &c[0] {
            "N" => "3",
            "NODE_CONFIG" => "node-configs/localdns.json",
            _ => "",
        })
        .into_owned()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Program {
    Harness,
    Agent,
    KubectlPlugin,
}

/// The program and its arguments when `words` run one of ours: after `sudo`, `env`, `time` and
/// `VAR=value` words; by any path to the binary; `kubectl unbounded ...`; `cargo run -p <ours>
/// -- ...` (the harness has no cargo examples: its benchmarks are `harness bench` commands).
fn our_command(words: &[String]) -> Option<(Program, Vec<String>)> {
    static ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Z_][A-Z0-9_]*=").unwrap());
    let mut rest = words;
    while let Some(first) = rest.first() {
        if ["sudo", "env", "time", "exec", "$"].contains(&first.as_str()) || ASSIGNMENT.is_match(first) {
            rest = &rest[1..];
            // `sudo -E`, `env -i`: their options, not the program.
            while rest.first().is_some_and(|w| w.starts_with('-')) {
                rest = &rest[1..];
            }
        } else {
            break;
        }
    }
    let rest = &without_redirections(rest)[..];
    let first = rest.first()?;
    let program = |name: &str| match name {
        "harness" => Some(Program::Harness),
        "unbounded-agent" => Some(Program::Agent),
        "kubectl-unbounded" => Some(Program::KubectlPlugin),
        _ => None,
    };
    let base = first.rsplit('/').next().unwrap_or(first);
    if let Some(p) = program(base) {
        return Some((p, rest[1..].to_vec()));
    }
    if base == "kubectl" && rest.get(1).is_some_and(|w| w == "unbounded") {
        return Some((Program::KubectlPlugin, rest[2..].to_vec()));
    }
    if base == "cargo" && rest.get(1).is_some_and(|w| w == "run") {
        let package = rest
            .windows(2)
            .find(|w| ["-p", "--package", "--bin"].contains(&w[0].as_str()))
            .and_then(|w| program(&w[1]))?;
        let args = rest.iter().skip_while(|w| *w != "--").skip(1).cloned().collect();
        return Some((package, args));
    }
    None
}

/// `words` without shell redirections (`2>&1`, `> file`, `2>/dev/null`).
fn without_redirections(words: &[String]) -> Vec<String> {
    static REDIRECTION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\d?(>>?|<)(&\d)?").unwrap());
    let mut kept = Vec::new();
    let mut skip_next = false;
    for word in words {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if let Some(m) = REDIRECTION.find(word) {
            skip_next = m.as_str() == word.as_str() && !word.contains('&');
            continue;
        }
        kept.push(word.clone());
    }
    kept
}

/// Parses `args` with the program's real command-line definition.
fn parses(program: Program, args: &[String]) -> Result<(), clap::Error> {
    let argv = std::iter::once("program".to_string()).chain(args.iter().cloned());
    let result = match program {
        Program::Harness => harness::cli::Cli::try_parse_from(argv).map(|_| ()),
        Program::Agent => agent::cli::Cli::try_parse_from(argv).map(|_| ()),
        Program::KubectlPlugin => agent::manual_bootstrap::cli::Cli::try_parse_from(argv).map(|_| ()),
    };
    match result {
        Ok(()) => Ok(()),
        // `--help` and `--version` are command lines that work.
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A command named in prose (an inline code span such as `unbounded-agent start`) names a real
/// command: it parses, or lacks only the arguments a full command line would give.
fn names_a_command(result: &Result<(), clap::Error>) -> bool {
    use clap::error::ErrorKind::*;
    match result {
        Ok(()) => true,
        Err(e) => matches!(
            e.kind(),
            MissingRequiredArgument | MissingSubcommand | DisplayHelpOnMissingArgumentOrSubcommand
        ),
    }
}

fn first_line(e: &clap::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// The command lines of ours in `found`, each with its program and arguments.
fn command_lines(found: &Found) -> Vec<(Program, Vec<String>, String)> {
    let filled = with_placeholders_filled(without_comment(&found.text));
    simple_commands(&filled)
        .into_iter()
        .filter_map(|command| {
            let words = shlex::split(&command)?;
            our_command(&words).map(|(p, args)| (p, args, command))
        })
        .collect()
}

#[test]
fn every_command_line_in_the_docs_parses_with_the_real_cli() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for path in markdown_files() {
        let doc = read_doc(&path);
        let lines = doc.shell_lines.iter().map(|f| (f, true));
        for (found, whole) in lines.chain(doc.spans.iter().map(|f| (f, false))) {
            for (program, args, command) in command_lines(found) {
                checked += 1;
                let result = parses(program, &args);
                let holds = if whole {
                    result.is_ok()
                } else {
                    names_a_command(&result)
                };
                if !holds {
                    let why = result.err().map(|e| first_line(&e)).unwrap_or_default();
                    wrong.push(format!("{}:{}: `{}`: {why}", found.file, found.line, command));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} command lines found in the docs: is the reader broken?"
    );
    assert!(
        wrong.is_empty(),
        "{} of {checked} command lines in the docs do not parse:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The repository's top-level entries a path in code may start with.
const TOP: &[&str] = &[
    "agent/",
    "machina/",
    "node-base/",
    "localdns/",
    "localdns-supervisor/",
    "module-layers/",
    "rehearsal/",
    "harness/",
    "scenarios/",
    "docs/",
    "scripts/",
    "node-configs/",
    "images/",
    "deploy/",
    ".ci/",
    ".config/",
    ".github/",
];

/// The repository paths a piece of code names: words starting with a top-level directory and
/// going deeper than one name without a dot (`deploy/coredns` is a Deployment), without a
/// trailing `:line`, `::item` or punctuation; none with a placeholder or a glob.
fn repository_paths(code: &str) -> Vec<String> {
    code.split(|c: char| c.is_whitespace() || "`'\"(),;=".contains(c))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .filter(|w| !w.contains(['<', '*', '{', '$', '…']) && !w.contains("..."))
        .map(|w| {
            let w = w.split("::").next().unwrap();
            let w = w.split(':').next().unwrap();
            w.trim_end_matches(['.', ',', ':']).to_string()
        })
        .filter(|w| w.ends_with('/') || w.matches('/').count() > 1 || w.contains('.'))
        .collect()
}

#[test]
fn every_repository_path_and_relative_link_in_the_docs_exists() {
    let root = repo();
    let mut checked = 0;
    let mut missing = Vec::new();
    for path in markdown_files() {
        let doc = read_doc(&path);
        for found in doc.shell_lines.iter().chain(&doc.spans) {
            for named in repository_paths(&found.text) {
                checked += 1;
                if !root.join(&named).exists() {
                    missing.push(format!("{}:{}: {named}", found.file, found.line));
                }
            }
        }
        for link in &doc.links {
            let target = link.text.split('#').next().unwrap();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            if !path.parent().unwrap().join(target).exists() {
                missing.push(format!("{}:{}: link to {target}", link.file, link.line));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths and links found in the docs: is the reader broken?"
    );
    assert!(
        missing.is_empty(),
        "{} of {checked} paths and links in the docs name nothing in the repository:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// The words of a lab notebook: a date, a session, an issue number, a commit (named, or a bare
/// 40-digit hash; a SHA-256 has 64).
fn process_words() -> Regex {
    Regex::new(
        r"(?i)\b20\d\d-[01]\d-[0-3]\d\b|\bsessions? \d|\bissues? #?\d|(^|[\s(])#\d{2,}([\s),:;]|$)|\bcommit [0-9a-f]{7,40}\b|\b[0-9a-f]{40}\b",
    )
    .unwrap()
}

/// The comment lines (`//`, `#` after the start of a line) of a source file, or all of a doc.
fn prose_lines(path: &Path, text: &str) -> Vec<(usize, String)> {
    let is_doc = path.extension().is_some_and(|e| e == "md");
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            is_doc || t.starts_with("//") || t.starts_with('#') || l.contains(" // ")
        })
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect()
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            if !["target", ".git", "node_modules"].contains(&name.as_str()) {
                sources(&path, out);
            }
        } else if ["rs", "sh", "toml", "md", "env", "yml"]
            .iter()
            .any(|e| path.extension().is_some_and(|x| x == *e))
            || name == "run"
        {
            out.push(path);
        }
    }
}

#[test]
fn no_doc_or_comment_carries_a_date_session_issue_number_or_commit_nor_a_name_the_spec() {
    let words = process_words();
    let spec_names = Regex::new(r"\b(fn|mod) \w*the_spec\w*").unwrap();
    let mut files = Vec::new();
    sources(&repo(), &mut files);
    files.sort();
    let this_file = Path::new(file!()).file_name().unwrap();
    let mut found = Vec::new();
    for path in &files {
        if path.file_name() == Some(this_file)
            || path.ends_with("Cargo.lock")
            // The day a version was pinned, with what the module proxy listed then: part of
            // the recipe's cache key, so it changes with the next pin (a new key rebuilds the
            // image), not before.
            || path.file_name().is_some_and(|n| n == "recipe.env")
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (i, code) in text.lines().enumerate() {
            if let Some(m) = spec_names.find(code) {
                found.push(format!(
                    "{}:{}: a test name that cites the spec: {:?}",
                    path.strip_prefix(repo()).unwrap().display(),
                    i + 1,
                    m.as_str()
                ));
            }
        }
        for (line, prose) in prose_lines(path, &text) {
            if let Some(m) = words.find(&prose) {
                found.push(format!(
                    "{}:{line}: {:?} in: {}",
                    path.strip_prefix(repo()).unwrap().display(),
                    m.as_str(),
                    prose.trim()
                ));
            }
        }
    }
    assert!(
        files.len() > 100,
        "only {} files read: is the walk broken?",
        files.len()
    );
    assert!(
        found.is_empty(),
        "history belongs in git, not in docs or comments ({} lines):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_readers_find_commands_paths_and_process_words() {
    let line = Found {
        file: "x".into(),
        line: 1,
        text:
            "sudo LAB=1 ./target/debug/harness lab status --lab <n>; kubectl unbounded machine --help  # note"
                .into(),
    };
    let commands = command_lines(&line);
    assert_eq!(
        commands.len(),
        2,
        "{:?}",
        commands.iter().map(|c| &c.2).collect::<Vec<_>>()
    );
    assert_eq!(commands[0].0, Program::Harness);
    assert_eq!(commands[0].1, ["lab", "status", "--lab", "3"]);
    assert_eq!(commands[1].0, Program::KubectlPlugin);
    assert!(parses(Program::Harness, &commands[0].1).is_ok());
    assert!(parses(Program::Harness, &["lab".into(), "nope".into()]).is_err());
    assert!(parses(Program::Agent, &["validate".into(), "--bogus".into()]).is_err());
    let cargo = shlex::split("cargo run -q -p harness -- bench suite").unwrap();
    assert_eq!(our_command(&cargo).unwrap().1, ["bench", "suite"]);
    let sudo = shlex::split("sudo -E harness lab list").unwrap();
    assert_eq!(our_command(&sudo).unwrap().1, ["lab", "list"]);
    assert_eq!(
        repository_paths("see `harness/src/wait.rs:12` and agent/tests/cli.rs::a_test."),
        ["harness/src/wait.rs", "agent/tests/cli.rs"]
    );
    let words = process_words();
    for bad in [
        "measured 2026-12-03",
        "in session 12",
        "see issue #49",
        "(#51)",
        "commit abc1234",
        "landed in 0123456789abcdef0123456789abcdef01234567",
    ] {
        assert!(words.is_match(bad), "{bad}");
    }
    for fine in [
        "10.96.0.10",
        "a session of its own",
        "port 8080",
        "sha256 abc1234",
        "sha256 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        assert!(!words.is_match(fine), "{fine}");
    }
}
