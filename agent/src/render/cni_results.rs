//! Before containerd starts in the machine: remove the CNI result cache files that an interrupted
//! write left empty, so a pod whose sandbox was being set up when the host went down can be torn
//! down and created again.
//!
//! containerd's CNI library caches each sandbox's network result in
//! `/var/lib/cni/results/<network>-<sandbox id>-<interface>` with a plain, non-atomic write, and
//! tearing the sandbox down reads it back first. A host that loses power (or panics) right after
//! that write leaves the file empty; every later `StopPodSandbox` then fails (`failed to get
//! network "unbounded-pods" cached result: ... unexpected end of JSON input`) and kubelet retries
//! it forever, so the pod never runs again. Without the file the teardown goes on with the network
//! config on disk, as for a sandbox that never had a result, and the pod gets a new sandbox.

use super::HEADER;

/// Where containerd's CNI library keeps its result cache in the machine.
pub const RESULTS_DIR: &str = "/var/lib/cni/results";
/// The script in the machine that removes the empty files (its only argument, the directory,
/// defaults to [`RESULTS_DIR`]).
pub const SCRIPT: &str = "/usr/local/libexec/unbounded-remove-empty-cni-results";
/// The containerd drop-in that runs [`SCRIPT`] before each start of containerd.
pub const DROP_IN: &str = "/etc/systemd/system/containerd.service.d/10-unbounded-cni-results.conf";

/// [`SCRIPT`]: removes every empty regular file directly in the directory (never a symlink, a
/// directory or a file with content), prints one line for each to the journal, exits 1 when one
/// could not be removed and 0 otherwise (also when the directory does not exist yet).
pub fn script() -> String {
    format!(
        "#!/bin/sh
{HEADER}# Removes the CNI result cache files an interrupted write left empty: kubelet could never tear
# their sandboxes down. Runs before containerd starts (containerd.service.d/10-unbounded-cni-results.conf).
set -u
dir=${{1:-{RESULTS_DIR}}}
[ -d \"$dir\" ] || exit 0
status=0
for f in \"$dir\"/*; do
    if [ -L \"$f\" ] || [ ! -f \"$f\" ] || [ -s \"$f\" ]; then
        continue
    fi
    if rm -f -- \"$f\"; then
        echo \"removed $f: an empty CNI result (an interrupted write); its sandbox can be torn down now\"
    else
        status=1
    fi
done
exit $status
"
    )
}

/// [`DROP_IN`]: [`SCRIPT`] as an `ExecStartPre=` of containerd whose failure does not keep
/// containerd from starting (`-`).
pub fn drop_in() -> String {
    format!("{HEADER}[Service]\nExecStartPre=-{SCRIPT}\n")
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    use super::*;

    /// Runs the script with the real `sh` on `dir`; its status and stdout.
    fn run_script(dir: &Path) -> (i32, String) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), script()).unwrap();
        let out = Command::new("sh").arg(file.path()).arg(dir).output().unwrap();
        assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    #[test]
    fn only_empty_regular_files_are_removed_and_each_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let empty = d.join("unbounded-pods-0123abcd-eth0");
        let full = d.join("unbounded-pods-4567ef01-eth0");
        std::fs::write(&empty, b"").unwrap();
        std::fs::write(&full, br#"{"kind":"cniCacheV1"}"#).unwrap();
        std::fs::create_dir(d.join("subdir")).unwrap();
        std::fs::write(d.join("subdir/empty"), b"").unwrap();
        std::os::unix::fs::symlink(d.join("subdir/empty"), d.join("link-to-empty")).unwrap();

        let (status, stdout) = run_script(d);

        assert_eq!(status, 0, "{stdout}");
        assert!(!empty.exists(), "the empty result is still there");
        assert!(full.exists() && d.join("subdir/empty").exists() && d.join("link-to-empty").exists());
        assert_eq!(
            stdout,
            format!(
                "removed {}: an empty CNI result (an interrupted write); its sandbox can be torn down now\n",
                empty.display()
            )
        );
        // Idempotent: nothing left to remove.
        assert_eq!(run_script(d), (0, String::new()));
    }

    #[test]
    fn a_missing_or_empty_directory_is_nothing_to_do() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(run_script(dir.path()), (0, String::new()));
        assert_eq!(run_script(&dir.path().join("absent")), (0, String::new()));
    }

    #[test]
    fn containerd_runs_the_script_before_it_starts_and_starts_even_when_it_fails() {
        let path = Path::new(DROP_IN);
        assert_eq!(
            path.parent().and_then(|d| d.to_str()),
            Some("/etc/systemd/system/containerd.service.d")
        );
        let text = drop_in();
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(body, ["[Service]", &format!("ExecStartPre=-{SCRIPT}")], "{text}");
        assert!(script().contains(&format!("dir=${{1:-{RESULTS_DIR}}}")));
    }
}
