//! Saved guest state, "boot once, resume many": the image is booted once to `READY`, paused
//! and saved (QMP `stop` + `migrate` to `exec:zstd`: QEMU 7.2 has no `file:` migration), and
//! every VM then starts with `-incoming` from that state on its own overlay.
//!
//! A state lives in the lab cache as `<cache>/vm-state/<key>/`:
//!
//! ```text
//! booted.qcow2   the disk the guest booted with: an overlay of the image's disk, frozen
//!                (read-only) — the middle layer under every resumed VM's own overlay
//! state.zst      the migration stream (RAM and device state), zstd-compressed
//! state.json     what the key was computed from ([`StateInputs`]), sizes and timings
//! console.log    the serial console of the saved boot (a resumed VM's log starts with it)
//! ```
//!
//! The key hashes everything the state is only valid with ([`StateInputs`]): the image's disk,
//! kernel and initrd (path, size, mtime, inode) and its `image.json`, QEMU's version and binary,
//! its firmware files, and the QEMU arguments that shape the machine (machine type,
//! accelerator, CPU, memory, devices, kernel command line) with names and paths left out.
//! Anything that changes gives a new key, so a new state is built (once, under the cache's
//! lock); an entry whose recorded inputs do not match is stale: removed and rebuilt, never used.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::accel::Accel;
use super::qemu;
use super::spec::{BootMode, Net, VmSpec};
use crate::cache::{BuildError, Cache, CacheError, RecipeKey};

/// The cache kind of saved states.
pub const KIND: &str = "vm-state";
/// Bump when the way a state is taken or resumed changes.
const STATE_VERSION: &str = "vm-state-1";
/// The files of an entry.
pub const DISK: &str = "booted.qcow2";
pub const STREAM: &str = "state.zst";
pub const INFO: &str = "state.json";
pub const CONSOLE: &str = "console.log";

/// Why a saved state cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("{what}: {why}")]
    Input { what: String, why: String },
    #[error("saved VM state {dir} is stale or broken: {why}")]
    Stale { dir: PathBuf, why: String },
    #[error("saved VM state {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Everything a saved state depends on, as readable `name -> value` pairs: hashed into the
/// key and recorded in `state.json`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateInputs(pub BTreeMap<String, String>);

impl StateInputs {
    /// The inputs of `spec`'s saved state under `accel`, from the files as they are now.
    pub fn for_spec(spec: &VmSpec, accel: Accel) -> Result<StateInputs, StateError> {
        let (version, binary, firmware) = qemu_identity()?;
        let mut inputs = StateInputs::from_parts(spec, accel, &version, &binary, &firmware)?;
        let image_json = spec.image.disk.parent().map(|d| d.join("image.json"));
        if let Some(path) = image_json.filter(|p| p.is_file()) {
            let text = fs::read_to_string(&path).map_err(|e| input(&path, e))?;
            inputs.0.insert("image.json".into(), text);
        }
        Ok(inputs)
    }

    /// The inputs from explicit QEMU facts (tests vary them).
    pub fn from_parts(
        spec: &VmSpec,
        accel: Accel,
        qemu_version: &str,
        qemu_binary: &str,
        firmware: &str,
    ) -> Result<StateInputs, StateError> {
        let mut map = BTreeMap::new();
        map.insert("state-version".into(), STATE_VERSION.into());
        map.insert("qemu-version".into(), qemu_version.into());
        map.insert("qemu-binary".into(), qemu_binary.into());
        map.insert("firmware".into(), firmware.into());
        map.insert("disk".into(), fingerprint(&spec.image.disk)?);
        map.insert("kernel".into(), fingerprint(&spec.image.kernel)?);
        map.insert("initrd".into(), fingerprint(&spec.image.initrd)?);
        map.insert(
            "qemu-args".into(),
            qemu::profile_args(&template_spec(spec, "vmstate"), accel),
        );
        Ok(StateInputs(map))
    }

    /// The cache key.
    pub fn key(&self) -> RecipeKey {
        self.key_of(KIND)
    }

    /// The key of these inputs for cache kind `kind` (a checkpoint's inputs are kept the same way).
    pub fn key_of(&self, kind: &str) -> RecipeKey {
        self.0
            .iter()
            .fold(RecipeKey::new(kind), |key, (name, value)| key.with(name, value))
    }

    /// The names whose values differ from `other`'s (or exist in only one).
    pub fn differences(&self, other: &StateInputs) -> Vec<String> {
        let mut names: Vec<String> = self.0.keys().chain(other.0.keys()).cloned().collect();
        names.sort();
        names.dedup();
        names.retain(|n| self.0.get(n) != other.0.get(n));
        names
    }
}

/// What `state.json` holds.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct StateInfo {
    pub key: String,
    pub inputs: StateInputs,
    /// The base disk the middle layer is an overlay of.
    pub base_disk: PathBuf,
    /// QEMU start to `READY` of the saved boot.
    pub boot_secs: f64,
    /// `stop` to the end of the migration.
    pub save_secs: f64,
    pub stream_bytes: u64,
    /// Unix time of the save.
    pub saved_at: u64,
}

/// A usable saved state (its files exist and its inputs match the current ones).
#[derive(Clone, Debug)]
pub struct SavedState {
    pub dir: PathBuf,
    pub key: String,
    pub info: StateInfo,
}

impl SavedState {
    /// The read-only middle layer a resumed VM's overlay is backed by.
    pub fn disk(&self) -> PathBuf {
        self.dir.join(DISK)
    }
    /// The migration stream.
    pub fn stream(&self) -> PathBuf {
        self.dir.join(STREAM)
    }
    /// The saved boot's console log.
    pub fn console(&self) -> PathBuf {
        self.dir.join(CONSOLE)
    }

    /// The `-incoming` URI that loads this state.
    pub fn incoming_uri(&self) -> Result<String, StateError> {
        // QEMU 7.2 waits forever on an empty stream: when zstd fails, QEMU gets bytes that are
        // not a migration stream, fails the load and exits.
        let stream = shell_quote(&self.stream()).map_err(|why| self.stale(why))?;
        Ok(format!(
            "exec:zstd -q -d -c {stream} || echo not-a-migration-stream"
        ))
    }

    /// Reads the entry at `dir` and checks it against `expected`: its files are there, its
    /// recorded inputs are the expected ones.
    pub fn load(dir: &Path, expected: &StateInputs) -> Result<SavedState, StateError> {
        let stale = |why: String| StateError::Stale {
            dir: dir.to_path_buf(),
            why,
        };
        let text = fs::read_to_string(dir.join(INFO)).map_err(|e| stale(format!("{INFO}: {e}")))?;
        let info: StateInfo = serde_json::from_str(&text).map_err(|e| stale(format!("{INFO}: {e}")))?;
        let changed = expected.differences(&info.inputs);
        if !changed.is_empty() {
            return Err(stale(format!(
                "it was saved with other {} than the VM has now",
                changed.join(", ")
            )));
        }
        for file in [DISK, STREAM] {
            let len = fs::metadata(dir.join(file)).map(|m| m.len()).unwrap_or(0);
            if len == 0 {
                return Err(stale(format!("{file} is missing or empty")));
            }
        }
        Ok(SavedState {
            dir: dir.to_path_buf(),
            key: info.key.clone(),
            info,
        })
    }

    fn stale(&self, why: String) -> StateError {
        StateError::Stale {
            dir: self.dir.clone(),
            why,
        }
    }
}

/// Removes the saved states whose base disk is gone (their image was rebuilt or removed):
/// none of them can be used again. Best effort.
pub fn prune(cache: &Cache) {
    let Ok(entries) = fs::read_dir(cache.root().join(KIND)) else {
        return;
    };
    for dir in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let Ok(text) = fs::read_to_string(dir.join(INFO)) else {
            continue;
        };
        let Ok(info) = serde_json::from_str::<StateInfo>(&text) else {
            continue;
        };
        if !info.base_disk.exists() {
            eprintln!(
                "==> removing saved VM state {}: its image {} is gone",
                dir.display(),
                info.base_disk.display()
            );
            if let Err(err) = invalidate(cache, &dir) {
                eprintln!("warning: {err}");
            }
        }
    }
}

/// [`Vm::ensure_saved_state`](super::Vm::ensure_saved_state) with given inputs and a given way to produce an entry's files (`booted.qcow2`,
/// `state.zst`, `console.log`; `take` returns the boot and save durations). `state.json` is
/// written here. A stale entry is removed and built again once.
pub fn ensure_with(
    cache: &Cache,
    spec: &VmSpec,
    inputs: &StateInputs,
    take: impl Fn(&Path, &Path) -> Result<(Duration, Duration), BuildError>,
) -> Result<SavedState, StateError> {
    let key = inputs.key();
    let mut last = None;
    for _ in 0..2 {
        let dir = cache.get_or_build(KIND, &key, |out, log| {
            let (boot, save) = take(out, log)?;
            let info = StateInfo {
                key: key.hex(),
                inputs: inputs.clone(),
                base_disk: fs::canonicalize(&spec.image.disk).unwrap_or_else(|_| spec.image.disk.clone()),
                boot_secs: boot.as_secs_f64(),
                save_secs: save.as_secs_f64(),
                stream_bytes: fs::metadata(out.join(STREAM)).map(|m| m.len()).unwrap_or(0),
                saved_at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            };
            fs::write(out.join(INFO), serde_json::to_string_pretty(&info)? + "\n")?;
            Ok(())
        })?;
        match SavedState::load(&dir, inputs) {
            Ok(state) => return Ok(state),
            Err(err) => {
                eprintln!("==> {err}: removing it and saving a new one");
                invalidate(cache, &dir)?;
                last = Some(err);
            }
        }
    }
    Err(last.expect("the loop ran"))
}

/// Removes a state entry (under the cache's lock for its key) so that it is built again.
/// VMs already running from it keep their open files.
pub fn invalidate(cache: &Cache, dir: &Path) -> Result<(), StateError> {
    let io = |source| StateError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let key = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let kind_dir = cache.root().join(KIND);
    let lock = fs::File::create(kind_dir.join(format!("{key}.lock"))).map_err(io)?;
    lock.lock().map_err(io)?;
    let doomed = kind_dir.join(format!(".stale-{key}-{}", std::process::id()));
    match fs::rename(dir, &doomed) {
        Ok(()) => fs::remove_dir_all(&doomed).map_err(io),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// The spec of the boot a state is taken from: `spec`'s image, memory, CPUs and accelerator,
/// nothing else of it (no share, the template's network, no extra kernel arguments).
pub fn template_spec(spec: &VmSpec, lab: &str) -> VmSpec {
    let mut template = VmSpec::new(lab, "template", spec.image.clone());
    template.memory_mib = spec.memory_mib;
    template.cpus = spec.cpus;
    template.accel = spec.accel;
    template.net = Net::User;
    template.boot_mode = Some(BootMode::Cold);
    template
}

/// `'path'` for `/bin/sh`; paths with a quote are refused.
pub(crate) fn shell_quote(path: &Path) -> Result<String, String> {
    let text = path.display().to_string();
    if text.contains('\'') {
        return Err(format!("path {text} contains a quote"));
    }
    Ok(format!("'{text}'"))
}

fn input(path: &Path, e: impl std::fmt::Display) -> StateError {
    StateError::Input {
        what: path.display().to_string(),
        why: e.to_string(),
    }
}

/// A file's identity: its path, size and mtime (whole seconds). Inside the lab cache the path is
/// relative to the cache's root and outside it canonical, so a cache restored under another root
/// (CI restores `~/.cache/unbounded-lab` into each job) keeps its saved states; tar keeps mtimes
/// to the second. A rebuilt file gets a new identity, an unchanged or restored one keeps it. Inode
/// and device are left out: a restored file never has the old ones.
pub fn fingerprint(path: &Path) -> Result<String, StateError> {
    fingerprint_under(path, crate::cache::configured_root().ok().as_deref())
}

/// [`fingerprint`] with the lab cache at `cache_root`.
pub fn fingerprint_under(path: &Path, cache_root: Option<&Path>) -> Result<String, StateError> {
    let meta = fs::metadata(path).map_err(|e| input(path, e))?;
    let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let root = cache_root.map(|root| fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()));
    let shown = match root.as_deref().and_then(|root| canonical.strip_prefix(root).ok()) {
        Some(relative) => format!("<lab cache>/{}", relative.display()),
        None => canonical.display().to_string(),
    };
    Ok(format!("{shown} size={} mtime={}", meta.len(), meta.mtime()))
}

/// QEMU's version line, its binary's fingerprint, and the fingerprints of its firmware
/// directories (BIOS and option ROMs are part of the saved machine). Computed once.
fn qemu_identity() -> Result<(String, String, String), StateError> {
    static IDENTITY: OnceLock<Result<(String, String, String), String>> = OnceLock::new();
    IDENTITY
        .get_or_init(|| {
            let version = agent::exec::run_stdout(Command::new(qemu::QEMU).arg("--version"))
                .map_err(|e| e.to_string())?;
            let version = version.lines().next().unwrap_or_default().to_string();
            let binary = which(qemu::QEMU).ok_or_else(|| format!("{} is not on PATH", qemu::QEMU))?;
            let binary = fingerprint(&binary).map_err(|e| e.to_string())?;
            let mut firmware = Vec::new();
            for dir in ["/usr/share/qemu", "/usr/share/seabios"] {
                let Ok(entries) = fs::read_dir(dir) else { continue };
                let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
                files.sort();
                for file in files.iter().filter(|f| f.is_file()) {
                    let meta = fs::metadata(file).map_err(|e| e.to_string())?;
                    firmware.push(format!("{} {} {}", file.display(), meta.len(), meta.mtime()));
                }
            }
            Ok((version, binary, firmware.join("\n")))
        })
        .clone()
        .map_err(|why| StateError::Input {
            what: format!("identifying QEMU ({})", qemu::QEMU),
            why,
        })
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    fn file_at(dir: &Path, relative: &str, bytes: &[u8], mtime: SystemTime) -> PathBuf {
        let path = dir.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        path
    }

    #[test]
    fn a_file_restored_under_another_cache_root_keeps_its_identity() {
        let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let built = file_at(first.path(), "host-image/abc/disk.qcow2", b"disk", mtime);
        let restored = file_at(second.path(), "host-image/abc/disk.qcow2", b"disk", mtime);
        let before = fingerprint_under(&built, Some(first.path())).unwrap();
        let after = fingerprint_under(&restored, Some(second.path())).unwrap();
        assert_eq!(before, after);
        assert!(
            before.starts_with("<lab cache>/host-image/abc/disk.qcow2 "),
            "{before}"
        );
    }

    #[test]
    fn a_rebuilt_file_or_one_outside_the_cache_has_another_identity() {
        let (cache, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let path = file_at(cache.path(), "kernel/k/vmlinuz", b"kernel", mtime);
        let before = fingerprint_under(&path, Some(cache.path())).unwrap();
        file_at(
            cache.path(),
            "kernel/k/vmlinuz",
            b"kernel",
            mtime + Duration::from_secs(5),
        );
        assert_ne!(
            before,
            fingerprint_under(&path, Some(cache.path())).unwrap(),
            "a new mtime"
        );
        file_at(cache.path(), "kernel/k/vmlinuz", b"kernel, longer", mtime);
        assert_ne!(
            before,
            fingerprint_under(&path, Some(cache.path())).unwrap(),
            "a new size"
        );
        let outside = fingerprint_under(&path, Some(elsewhere.path())).unwrap();
        assert!(
            outside.starts_with(&fs::canonicalize(&path).unwrap().display().to_string()),
            "{outside}"
        );
    }
}
