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
//! 4. The inner JUnit and output are saved under `$LAB_ARTIFACTS_DIR/<test>/guest-tests/`;
//!    any inner failure, or no test at all, fails the run.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::exec::{self, CommandFailed};

use crate::evidence;
use crate::vm::{Vm, VmError};

/// The filterset selecting guest tests (the host's default filter is its negation).
pub const GUEST_FILTER: &str = "binary(/^guest_/)";
/// Where the guest mounts the repository (the 9p share with mount tag `lab`).
pub const GUEST_MOUNT: &str = "/mnt/lab";
/// Where the guest extracts the archive and keeps nextest's store.
const GUEST_WORK: &str = "/var/tmp/guest-tests";

#[derive(Debug, thiserror::Error)]
pub enum GuestTestsError {
    #[error("{what} is missing: {fix}")]
    Missing { what: String, fix: String },
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
        let repo = evidence::repo_root();
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
        let tests = GuestTests { repo, dir };
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
        format!(
            r#"set -eu
mountpoint -q {GUEST_MOUNT} || {{ echo "{GUEST_MOUNT} is not mounted: the VM needs the repository shared (VmSpec::share)" >&2; exit 90; }}
rm -rf {GUEST_WORK} && mkdir -p {GUEST_WORK}/extract
cat > {GUEST_WORK}/nextest.toml <<'EOF'
[store]
dir = "{GUEST_WORK}/store"
[profile.guest]
fail-fast = false
failure-output = "immediate-final"
slow-timeout = {{ period = "60s", terminate-after = 5 }}
[profile.guest.junit]
path = "junit.xml"
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
        std::mem::forget(tests); // its Drop would remove a directory that does not exist
    }
}
