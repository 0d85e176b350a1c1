//! Tests that need Debian's kernel (dummy links, netfilter modules), built on
//! the host and run inside one lab VM by one host-side test.
//!
//! Convention: a test is a *guest test* when it lives in a test binary named
//! `guest_*`, i.e. a file `<crate>/tests/guest_*.rs` (e.g.
//! `agent/tests/guest_hostnet.rs`): [`GUEST_FILTER`]. (Binaries, not test
//! names, so a host test that happens to be called `guest_...` is not lost.)
//! On the host, `.config/nextest.toml`'s `default-filter` excludes exactly
//! these, so they are filtered out, never skipped from inside.
//!
//! How they run ([`GuestTests::build`] then [`GuestTests::run`]):
//! 1. `cargo nextest archive --workspace -E 'package(<pkg>) & binary(/^guest_/)'` on the host writes
//!    `<repo>/target/guest-tests/<pid>/tests.tar.zst` (the same build as the host
//!    test run, so nothing is rebuilt), and `cargo-nextest` is copied next to it.
//! 2. The VM is booted with the repository shared read-only over 9p
//!    ([`GuestTests::share`], `/mnt/lab` in the guest).
//! 3. In the guest: `cargo-nextest nextest run --archive-file ... --workspace-remap
//!    /mnt/lab -E '<GUEST_FILTER>'` with a profile writing JUnit; glibc is fine
//!    (host bookworm, guest trixie).
//! 4. The inner JUnit (with every test's output, passed ones too: their figures are evidence) and
//!    the run's output are saved under `$LAB_ARTIFACTS_DIR/<test>/guest-tests/`; any inner
//!    failure, or no test at all, fails the run.
//!
//! Files the guest tests need that are not in the archive (e.g. the real CoreDNS from the lab
//! cache) are added with [`GuestTests::add_file`]: staged beside the archive, copied to the
//! guest's local disk before the run, and named to the tests by an environment variable.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::exec::{self, CommandFailed};

use crate::vm::evidence;
use crate::vm::{Vm, VmError};

/// The filterset selecting guest tests (the host's default filter is its negation).
pub const GUEST_FILTER: &str = "binary(/^guest_/)";
/// Where the guest mounts the repository (the 9p share with mount tag `lab`).
pub use crate::deploy::offline::SHARE_MOUNT as GUEST_MOUNT;
/// Where the guest extracts the archive and keeps nextest's store.
const GUEST_WORK: &str = "/var/tmp/guest-tests";

#[derive(Debug, thiserror::Error)]
pub enum GuestTestsError {
    #[error("{what} is missing: {fix}")]
    Missing { what: String, fix: String },
    #[error("bad extra file for the guest tests: {0}")]
    BadFile(String),
    #[error("building the guest test archive: {0}")]
    Archive(#[source] CommandFailed),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("running the guest tests in VM {vm}: {source}")]
    Vm {
        vm: String,
        #[source]
        source: Box<VmError>,
    },
    #[error(
        "guest tests failed in VM {vm} ({failed} of {total} failed, {status}); \
         report in {report}\n--- last lines of the inner run ---\n{tail}"
    )]
    Failed {
        vm: String,
        failed: usize,
        total: usize,
        status: String,
        report: PathBuf,
        tail: String,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> GuestTestsError + use<> {
    let path = path.to_path_buf();
    move |source| GuestTestsError::Io { what, path, source }
}

/// The outcome of a guest run that passed.
#[derive(Clone, Debug)]
pub struct GuestReport {
    /// Test cases in the inner JUnit report.
    pub total: usize,
    /// Where the inner JUnit, stdout and stderr were saved.
    pub dir: PathBuf,
    /// The inner run's stdout and stderr.
    pub output: String,
    pub took: Duration,
}

/// A built archive of test binaries and the `cargo-nextest` that runs it.
#[derive(Debug)]
pub struct GuestTests {
    repo: PathBuf,
    dir: PathBuf,
    /// Extra files: (file name under `files/`, environment variable naming its guest path).
    files: Vec<(String, String)>,
}

/// A file name for [`GuestTests::add_file`]: one plain path component.
fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// An environment variable name for [`GuestTests::add_file`].
fn valid_env_name(name: &str) -> bool {
    name.bytes()
        .next()
        .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// `cargo-nextest` on PATH (or in `~/.cargo/bin`).
fn find_nextest() -> Result<PathBuf, GuestTestsError> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join(".cargo/bin"));
    }
    dirs.into_iter()
        .map(|d| d.join("cargo-nextest"))
        .find(|p| p.is_file())
        .ok_or_else(|| GuestTestsError::Missing {
            what: "cargo-nextest".into(),
            fix: "run `scripts/setup.sh` (it installs the pinned version)".into(),
        })
}

/// Counts `<testcase` and `<failure`/`<error` elements of a JUnit report.
pub fn junit_counts(junit: &str) -> (usize, usize) {
    let total = junit.matches("<testcase").count();
    let failed = junit.matches("<failure").count() + junit.matches("<error").count();
    (total, failed)
}

impl GuestTests {
    /// Archives the guest test binaries of `packages` (built with the
    /// workspace's features, as `cargo nextest run --workspace` builds them).
    pub fn build(packages: &[&str]) -> Result<GuestTests, GuestTestsError> {
        let repo = crate::repo::root();
        let nextest = find_nextest()?;
        let dir = repo
            .join("target/guest-tests")
            .join(std::process::id().to_string());
        fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        let packages_filter = packages
            .iter()
            .map(|p| format!("package({p})"))
            .collect::<Vec<_>>()
            .join(" | ");
        let filter = format!("({packages_filter}) & {GUEST_FILTER}");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let started = Instant::now();
        // From here on, dropping `tests` (also on an error) removes the directory.
        let tests = GuestTests {
            repo,
            dir,
            files: Vec::new(),
        };
        let (repo, dir) = (&tests.repo, &tests.dir);
        exec::run(
            Command::new(cargo)
                .current_dir(repo)
                .args([
                    "nextest",
                    "archive",
                    "--workspace",
                    "-E",
                    &filter,
                    "--archive-file",
                ])
                .arg(dir.join("tests.tar.zst")),
        )
        .map_err(GuestTestsError::Archive)?;
        fs::copy(&nextest, dir.join("cargo-nextest")).map_err(io("copying", &nextest))?;
        eprintln!(
            "==> guest test archive of {} built in {:.1}s",
            packages.join(", "),
            started.elapsed().as_secs_f64()
        );
        Ok(tests)
    }

    /// Makes the host file `host` available to the guest tests at the returned guest path (on the
    /// guest's local disk), which the inner run finds in the environment variable `env`.
    /// `name` is a plain file name; `host` is hard-linked (or copied) beside the archive.
    pub fn add_file(&mut self, host: &Path, name: &str, env: &str) -> Result<String, GuestTestsError> {
        if !valid_file_name(name) {
            return Err(GuestTestsError::BadFile(format!(
                "file name {name:?} must be one path component of letters, digits, `.`, `_` or `-`"
            )));
        }
        if !valid_env_name(env) {
            return Err(GuestTestsError::BadFile(format!(
                "environment variable {env:?} must be upper case letters, digits and `_`"
            )));
        }
        if self.files.iter().any(|(n, e)| n == name || e == env) {
            return Err(GuestTestsError::BadFile(format!(
                "{name} or {env} was already added"
            )));
        }
        if !host.is_file() {
            return Err(GuestTestsError::Missing {
                what: host.display().to_string(),
                fix: format!("it is the guest tests' {env}; build it first"),
            });
        }
        let staged_dir = self.dir.join("files");
        fs::create_dir_all(&staged_dir).map_err(io("creating", &staged_dir))?;
        let staged = staged_dir.join(name);
        if fs::hard_link(host, &staged).is_err() {
            fs::copy(host, &staged).map_err(io("copying", host))?;
        }
        self.files.push((name.to_owned(), env.to_owned()));
        Ok(format!("{GUEST_WORK}/files/{name}"))
    }

    /// The directory to share with the VM (`VmSpec::share`): the repository root.
    pub fn share(&self) -> &Path {
        &self.repo
    }

    fn guest_path(&self, file: &str) -> String {
        let relative = self
            .dir
            .strip_prefix(&self.repo)
            .expect("archive dir is under the repo");
        format!("{GUEST_MOUNT}/{}/{file}", relative.display())
    }

    /// The shell script run in the guest.
    pub fn guest_script(&self, filter: &str) -> String {
        // Names were checked by `add_file`: nothing here needs quoting.
        let files: String = self
            .files
            .iter()
            .map(|(name, env)| {
                format!(
                    "cp {staged} {GUEST_WORK}/files/{name}\nexport {env}={GUEST_WORK}/files/{name}\n",
                    staged = self.guest_path(&format!("files/{name}"))
                )
            })
            .collect();
        format!(
            r#"set -eu
mountpoint -q {GUEST_MOUNT} || {{ echo "{GUEST_MOUNT} is not mounted: the VM needs the repository shared (VmSpec::share)" >&2; exit 90; }}
rm -rf {GUEST_WORK} && mkdir -p {GUEST_WORK}/extract {GUEST_WORK}/files
{files}cat > {GUEST_WORK}/nextest.toml <<'EOF'
[store]
dir = "{GUEST_WORK}/store"
[profile.guest]
fail-fast = false
failure-output = "immediate-final"
slow-timeout = {{ period = "60s", terminate-after = 5 }}
[[profile.guest.overrides]]
# Unpacks the machine rootfs and boots an nspawn machine: about 4 min under TCG.
filter = "binary(guest_start_machine)"
slow-timeout = {{ period = "60s", terminate-after = 15 }}
[profile.guest.junit]
path = "junit.xml"
store-success-output = true
EOF
exec {nextest} nextest run --archive-file {archive} --workspace-remap {GUEST_MOUNT} \
  --extract-to {GUEST_WORK}/extract --config-file {GUEST_WORK}/nextest.toml --profile guest \
  --ignore-default-filter -E '{filter}' --color never
"#,
            nextest = self.guest_path("cargo-nextest"),
            archive = self.guest_path("tests.tar.zst"),
        )
    }

    /// Runs the guest tests (those matching [`GUEST_FILTER`]) in `vm`, which must
    /// have been booted with [`GuestTests::share`]; saves the inner report under
    /// `$LAB_ARTIFACTS_DIR/<test>/guest-tests/` and fails on any inner failure.
    pub fn run(&self, vm: &Vm, test: &str, timeout: Duration) -> Result<GuestReport, GuestTestsError> {
        self.run_filtered(vm, test, GUEST_FILTER, timeout)
    }

    /// [`GuestTests::run`] with another filterset.
    pub fn run_filtered(
        &self,
        vm: &Vm,
        test: &str,
        filter: &str,
        timeout: Duration,
    ) -> Result<GuestReport, GuestTestsError> {
        let vm_err = |source: VmError| GuestTestsError::Vm {
            vm: vm.name().to_string(),
            source: Box::new(source),
        };
        let report_dir = evidence::test_dir(test).join("guest-tests");
        fs::create_dir_all(&report_dir).map_err(io("creating", &report_dir))?;
        let started = Instant::now();
        let out = vm
            .argv(vec!["/bin/sh".into(), "-c".into(), self.guest_script(filter)])
            .allow_failure()
            .timeout(timeout)
            .run()
            .map_err(vm_err)?;
        let took = started.elapsed();
        let output = format!("{}{}", out.stdout_text(), out.stderr_text());
        let write = |name: &str, text: &str| {
            let path = report_dir.join(name);
            fs::write(&path, text).map_err(io("writing", &path))
        };
        write("stdout.txt", &out.stdout_text())?;
        write("stderr.txt", &out.stderr_text())?;
        let junit_path = report_dir.join("junit.xml");
        let junit = match vm.copy_out(&format!("{GUEST_WORK}/store/guest/junit.xml"), &junit_path) {
            Ok(()) => fs::read_to_string(&junit_path).map_err(io("reading", &junit_path))?,
            Err(err) => {
                write("junit.xml.error", &format!("{err}\n"))?;
                String::new()
            }
        };
        let (total, failed) = junit_counts(&junit);
        eprintln!(
            "==> guest tests in VM {}: {total} run, {failed} failed, {:.1}s; report in {}",
            vm.name(),
            took.as_secs_f64(),
            report_dir.display()
        );
        if !out.success() || failed > 0 || total == 0 {
            let lines: Vec<&str> = output.lines().collect();
            return Err(GuestTestsError::Failed {
                vm: vm.name().to_string(),
                failed,
                total,
                status: out.status.to_string(),
                report: report_dir,
                tail: lines[lines.len().saturating_sub(40)..].join("\n"),
            });
        }
        Ok(GuestReport {
            total,
            dir: report_dir,
            output,
            took,
        })
    }
}

impl Drop for GuestTests {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_counts_cases_and_failures() {
        let junit = r#"<testsuites><testsuite><testcase name="a"/><testcase name="b"><failure/></testcase></testsuite></testsuites>"#;
        assert_eq!(junit_counts(junit), (2, 1));
        assert_eq!(junit_counts(""), (0, 0));
    }

    #[test]
    fn script_runs_the_archive_from_the_share_with_the_guest_filter() {
        let tests = GuestTests {
            repo: PathBuf::from("/work/repo"),
            dir: PathBuf::from("/work/repo/target/guest-tests/42"),
            files: vec![("coredns".into(), "LOCALDNS_TEST_COREDNS".into())],
        };
        let script = tests.guest_script(GUEST_FILTER);
        assert!(
            script.contains("/mnt/lab/target/guest-tests/42/cargo-nextest nextest run"),
            "{script}"
        );
        assert!(
            script.contains("--archive-file /mnt/lab/target/guest-tests/42/tests.tar.zst"),
            "{script}"
        );
        assert!(script.contains("--workspace-remap /mnt/lab"), "{script}");
        assert!(script.contains(&format!("-E '{GUEST_FILTER}'")), "{script}");
        assert!(
            script.contains(
                "cp /mnt/lab/target/guest-tests/42/files/coredns /var/tmp/guest-tests/files/coredns\n\
                 export LOCALDNS_TEST_COREDNS=/var/tmp/guest-tests/files/coredns\n"
            ),
            "{script}"
        );
        std::mem::forget(tests); // its Drop would remove a directory that does not exist
    }

    #[test]
    fn add_file_refuses_paths_and_bad_variable_names_and_stages_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("coredns");
        fs::write(&host, "binary").unwrap();
        let mut tests = GuestTests {
            repo: dir.path().to_path_buf(),
            dir: dir.path().join("archive"),
            files: Vec::new(),
        };
        for (name, env) in [
            ("../x", "OK"),
            ("a/b", "OK"),
            ("", "OK"),
            ("ok", "lower"),
            ("ok", "1X"),
        ] {
            let err = tests.add_file(&host, name, env).unwrap_err();
            assert!(matches!(err, GuestTestsError::BadFile(_)), "{name} {env}: {err}");
        }
        assert!(!tests.dir.exists(), "a refused file staged something");
        let missing = tests
            .add_file(&dir.path().join("absent"), "absent", "ABSENT")
            .unwrap_err();
        assert!(missing.to_string().contains("absent is missing"), "{missing}");
        let guest = tests.add_file(&host, "coredns", "LOCALDNS_TEST_COREDNS").unwrap();
        assert_eq!(guest, "/var/tmp/guest-tests/files/coredns");
        assert_eq!(
            fs::read_to_string(tests.dir.join("files/coredns")).unwrap(),
            "binary"
        );
        assert!(matches!(
            tests.add_file(&host, "coredns", "OTHER").unwrap_err(),
            GuestTestsError::BadFile(_)
        ));
    }
}
