//! [`Collector`]: one directory of evidence with an `index.txt` saying what each file is and
//! which item could not be collected (a failure is written down and the rest goes on). Used by
//! the evidence of a failed test ([`super::collect_with`]) and by `harness lab logs`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::vm::GuestAgent;

/// The index's file name.
pub const INDEX_FILE: &str = "index.txt";

/// One file of the directory (or subdirectory, `a/b.txt`) and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub file: String,
    pub what: String,
    /// Why the item could not be collected (fully); `None` when it was.
    pub problem: Option<String>,
}

/// Collects files into a directory, keeping an index of them.
pub struct Collector {
    dir: PathBuf,
    title: String,
    entries: Vec<Entry>,
}

/// A VM reached through its guest agent; after one command gets no answer, the rest are not
/// tried (each would wait for the agent again) and say why.
pub struct Guest<'a> {
    pub agent: &'a GuestAgent,
    /// Whether QEMU still runs.
    pub running: &'a dyn Fn() -> bool,
    unreachable: Option<String>,
}

impl<'a> Guest<'a> {
    pub fn new(agent: &'a GuestAgent, running: &'a dyn Fn() -> bool) -> Guest<'a> {
        Guest {
            agent,
            running,
            unreachable: None,
        }
    }

    /// Runs `command` with the evidence deadlines: its stdout, stderr and status as text (any
    /// status is fine), or why it could not run.
    pub fn run(&mut self, command: &str) -> Result<String, String> {
        if let Some(why) = &self.unreachable {
            return Err(format!("not run: {why}"));
        }
        if !(self.running)() {
            self.unreachable = Some("QEMU is not running".into());
            return Err("not run: QEMU is not running".into());
        }
        let deadlines = self.agent.deadlines();
        let result = self
            .agent
            .session_within(deadlines.evidence, &|| None)
            .and_then(|mut session| {
                session
                    .exec(
                        &crate::vm::shell(command),
                        None,
                        deadlines.evidence * 3 + Duration::from_secs(1),
                    )
                    .map_err(|e| crate::vm::VmError::Agent {
                        vm: self.agent.vm().to_string(),
                        source: Box::new(e),
                    })
            });
        match result {
            Ok(out) => Ok(format!(
                "{}\n--- stderr ---\n{}\n--- {} ---\n",
                out.stdout_text(),
                out.stderr_text(),
                out.status
            )),
            Err(err) => {
                self.unreachable = Some(format!("the guest agent did not answer `{command}`"));
                Err(format!("failed: {err}"))
            }
        }
    }
}

impl Collector {
    /// Starts collecting into `dir` (made if missing); `title` heads the index.
    pub fn new(dir: &Path, title: &str) -> std::io::Result<Collector> {
        std::fs::create_dir_all(dir)?;
        Ok(Collector {
            dir: dir.to_path_buf(),
            title: title.to_string(),
            entries: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn record(&mut self, file: &str, what: &str, problem: Option<String>) {
        self.entries.push(Entry {
            file: file.to_string(),
            what: what.to_string(),
            problem,
        });
    }

    /// Writes `text` to `file`.
    pub fn text(&mut self, file: &str, what: &str, text: &str) {
        let problem = self.write(file, text).err();
        self.record(file, what, problem);
    }

    /// Writes `data` to `file`, creating its directory (`<vm>/console.log` before anything else
    /// of that VM).
    fn write(&self, file: &str, data: impl AsRef<[u8]>) -> Result<(), String> {
        let path = self.dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, data).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Writes the outcome of an item: its text, or the failure (written into `file` too, so the
    /// file says why it is empty).
    pub fn outcome(&mut self, file: &str, what: &str, outcome: Result<String, String>) {
        match outcome {
            Ok(text) => self.text(file, what, &text),
            Err(why) => {
                let problem = match self.write(file, format!("({why})\n")) {
                    Ok(()) => why,
                    Err(write) => format!("{why}; {write}"),
                };
                self.record(file, what, Some(problem));
            }
        }
    }

    /// Saves the output of `command` run in `guest` (the command line heads the file).
    pub fn guest(&mut self, guest: &mut Guest<'_>, file: &str, what: &str, command: &str) {
        let outcome = guest.run(command).map(|text| format!("$ {command}\n{text}"));
        let outcome = outcome.map_err(|why| format!("$ {command}: {why}"));
        self.outcome(file, what, outcome);
    }

    /// Copies the host file `from` to `file`.
    pub fn copy_file(&mut self, file: &str, what: &str, from: &Path) {
        let outcome = std::fs::read(from)
            .map_err(|e| format!("reading {}: {e}", from.display()))
            .and_then(|data| self.write(file, data));
        self.record(file, what, outcome.err());
    }

    /// Copies the host directory `from` (recursively) to the subdirectory `file`.
    pub fn copy_dir(&mut self, file: &str, what: &str, from: &Path) {
        let to = self.dir.join(file);
        // A test's lab logs already live in its evidence directory: nothing to copy.
        let same =
            |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
        if same(from, &to) {
            self.record(&format!("{file}/"), what, None);
            return;
        }
        let problem = copy_tree(from, &to).err();
        self.record(&format!("{file}/"), what, problem);
    }

    /// Writes the index and returns the directory.
    pub fn finish(self) -> PathBuf {
        let index = render_index(&self.title, &self.entries);
        if let Err(err) = std::fs::write(self.dir.join(INDEX_FILE), index) {
            eprintln!("error: writing {}: {err}", self.dir.join(INDEX_FILE).display());
        }
        self.dir
    }
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(from).map_err(|e| format!("reading {}: {e}", from.display()))?;
    std::fs::create_dir_all(to).map_err(|e| format!("creating {}: {e}", to.display()))?;
    let mut problems = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        let copied = if path.is_dir() {
            copy_tree(&path, &target)
        } else {
            std::fs::copy(&path, &target)
                .map(drop)
                .map_err(|e| format!("copying {}: {e}", path.display()))
        };
        problems.extend(copied.err());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The index: a title line, then one line per file (`<file>  <what>`), an item that could
/// not be collected marked `FAILED: <why>` on the line below it.
pub fn render_index(title: &str, entries: &[Entry]) -> String {
    let width = entries.iter().map(|e| e.file.len()).max().unwrap_or(0);
    let failed = entries.iter().filter(|e| e.problem.is_some()).count();
    let mut text = format!("# {title}\n# {} files, {failed} not collected\n", entries.len());
    for entry in entries {
        let _ = writeln!(text, "{:width$}  {}", entry.file, entry.what);
        if let Some(problem) = &entry.problem {
            let _ = writeln!(text, "{:width$}    FAILED: {problem}", "");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_file_is_copied_into_a_directory_not_made_yet() {
        let tmp = tempfile::tempdir().unwrap();
        let from = tmp.path().join("console.log");
        std::fs::write(&from, "boot\n").unwrap();
        let mut collector = Collector::new(&tmp.path().join("out"), "t").unwrap();
        collector.copy_file("localdns/console.log", "the console", &from);
        let dir = collector.finish();
        let index = std::fs::read_to_string(dir.join(INDEX_FILE)).unwrap();
        assert!(index.contains("# 1 files, 0 not collected"), "{index}");
        assert_eq!(
            std::fs::read_to_string(dir.join("localdns/console.log")).unwrap(),
            "boot\n"
        );
    }

    #[test]
    fn the_index_names_every_file_and_marks_what_failed_without_stopping_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("logs");
        std::fs::create_dir_all(source.join("control-plane")).unwrap();
        std::fs::write(source.join("dns-queries.log"), "q\n").unwrap();
        std::fs::write(source.join("control-plane/etcd.log"), "e\n").unwrap();
        let out = tmp.path().join("out");
        let mut collector = Collector::new(&out, "harness lab logs: lab-3").unwrap();
        collector.copy_file("console.log", "the serial console", &tmp.path().join("missing"));
        collector.outcome("nodes.txt", "the Nodes", Err("kubectl failed".into()));
        collector.text("vm/reason.txt", "why", "asked\n");
        collector.copy_dir("lab", "the lab's logs", &source);
        // Copying a directory onto itself leaves it as it is.
        collector.copy_dir("lab", "the lab's logs again", &out.join("lab"));
        let dir = collector.finish();
        let index = std::fs::read_to_string(dir.join(INDEX_FILE)).unwrap();
        let lines: Vec<&str> = index.lines().collect();
        assert_eq!(lines[0], "# harness lab logs: lab-3");
        assert_eq!(lines[1], "# 5 files, 2 not collected");
        assert!(
            lines[2].starts_with("console.log    the serial console"),
            "{index}"
        );
        assert!(
            lines[3].contains("FAILED: reading") && lines[3].contains("missing"),
            "{index}"
        );
        assert!(
            lines[4].starts_with("nodes.txt") && lines[5].ends_with("FAILED: kubectl failed"),
            "{index}"
        );
        assert!(
            lines[6].starts_with("vm/reason.txt") && lines[7].starts_with("lab/"),
            "{index}"
        );
        assert!(lines[8].starts_with("lab/") && lines.len() == 9, "{index}");
        // The failed item's file says why it is empty; the rest was collected.
        assert_eq!(
            std::fs::read_to_string(dir.join("nodes.txt")).unwrap(),
            "(kubectl failed)\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("vm/reason.txt")).unwrap(),
            "asked\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("lab/control-plane/etcd.log")).unwrap(),
            "e\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("lab/dns-queries.log")).unwrap(),
            "q\n"
        );
    }
}
