//! Joined-node checkpoints: a node joined once, saved, and resumed by every further test that
//! needs one — seconds of resume instead of minutes of join under TCG.
//!
//! A checkpoint lives in the lab cache as `<cache>/node-checkpoint/<key>/`:
//!
//! ```text
//! booted.qcow2    the joined VM's disk: its overlay, frozen (read-only), backed by the image's
//!                 saved VM state disk (crate::vm::state) — the middle layer of every VM resumed
//! state.zst       the joined VM's RAM and device state, paused right after the join
//! console.log     its console up to the save
//! control-plane/  the lab's Kind node at the save (crate::kind::saved): its /var, /etc/kubernetes,
//!                 Kind's files
//! checkpoint.json what the key was computed from ([`CheckpointInputs`]), the deployed node,
//!                 times
//! ```
//!
//! The key hashes everything the node is only valid with: the image's saved VM state key (image,
//! QEMU, machine shape), the agent binary's sha256, the node config's text, the published
//! artifacts' cache keys (which include the control plane's Kubernetes binaries and CoreDNS), the
//! CRDs, what was done to the VM before the deploy (`prepare`), and [`CHECKPOINT_VERSION`].
//! A VM resumes in any lab because every lab gives VM `k` the same address and MAC
//! ([`crate::addresses`]); the control plane starts from a fresh copy of the saved state, so
//! every test has its own cluster. Entries are written atomically by the cache (other processes
//! wait for a build of the same key), checked before use (inputs, files, the base disk), and a
//! stale or unloadable one is removed.

pub mod node;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::cache::{BuildError, Cache, CacheError};
use crate::deploy::DeployedNode;
use crate::vm::state::{self, SavedState, StateInfo, StateInputs};

/// The cache kind of checkpoints.
pub const KIND: &str = "node-checkpoint";
/// Bump when what a checkpoint holds, or how a node is joined or resumed, changes.
pub const CHECKPOINT_VERSION: &str = "node-checkpoint-3";
/// The control plane's saved state inside an entry.
pub const CONTROL_PLANE: &str = "control-plane";
/// The entry's description.
pub const INFO: &str = "checkpoint.json";
/// What the host held right before the deploy (files, units, links, tables, machines, mounts),
/// listed by whoever built the entry: what `reset` on a node resumed from it must return to.
pub const HOST_LISTING: &str = "host-before-deploy.txt";
/// `LAB_NO_CHECKPOINT=1`: every test joins its node for real.
pub const NO_CHECKPOINT_ENV: &str = "LAB_NO_CHECKPOINT";

/// Why a checkpoint cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("{what}: {why}")]
    Input { what: String, why: String },
    #[error("node checkpoint {dir} is stale or broken: {why}")]
    Stale { dir: PathBuf, why: String },
    #[error("node checkpoint {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether tests may resume joined nodes from checkpoints (`LAB_NO_CHECKPOINT` unset or not
/// `1`/`true`/`yes`).
pub fn enabled() -> bool {
    !std::env::var(NO_CHECKPOINT_ENV)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// Everything a checkpoint depends on, as readable `name -> value` pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInputs(pub StateInputs);

/// What [`CheckpointInputs::new`] is computed from.
pub struct NodeInputs<'a> {
    /// The key of the image's saved VM state the node's VM resumes from.
    pub vm_state_key: &'a str,
    /// The agent binary deployed.
    pub agent_binary: &'a Path,
    /// The node config file.
    pub node_config: &'a Path,
    /// [`crate::artifacts::published_key`].
    pub artifacts_key: &'a str,
    /// The CRDs the control plane installs.
    pub crd_dir: &'a Path,
    /// A name for what the test does to the VM before deploying (`""` for nothing).
    pub prepare: &'a str,
    /// What runs the cluster: [`kind_control_plane`] of the node image.
    pub control_plane: &'a str,
}

/// [`NodeInputs::control_plane`] of a Kind cluster of node image `image` (its reference), set up
/// as [`crate::kind::plane::setup_key`] says.
pub fn kind_control_plane(image: &str) -> String {
    format!("kind {image} setup {}", crate::kind::plane::setup_key())
}

impl CheckpointInputs {
    pub fn new(node: &NodeInputs<'_>) -> Result<CheckpointInputs, CheckpointError> {
        let mut map = BTreeMap::new();
        map.insert("checkpoint-version".into(), CHECKPOINT_VERSION.into());
        map.insert("vm-state".into(), node.vm_state_key.into());
        map.insert(
            "agent-sha256".into(),
            agent::artifact::checksum::sha256_file(node.agent_binary)
                .map_err(|e| input(node.agent_binary, e))?,
        );
        let config = fs::read_to_string(node.node_config).map_err(|e| input(node.node_config, e))?;
        map.insert("node-config".into(), config);
        map.insert("artifacts".into(), node.artifacts_key.into());
        map.insert("crds".into(), sha256_of_dir(node.crd_dir)?);
        map.insert("prepare".into(), node.prepare.into());
        map.insert("control-plane".into(), node.control_plane.into());
        Ok(CheckpointInputs(StateInputs(map)))
    }

    /// The cache key, hex.
    pub fn key(&self) -> String {
        self.0.key_of(KIND).hex()
    }
}

/// What `checkpoint.json` holds.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CheckpointInfo {
    pub key: String,
    pub inputs: StateInputs,
    /// The node as it was deployed (name, address, config, `start`'s output).
    pub deployed: DeployedNode,
    /// The disk the entry's `booted.qcow2` is an overlay of (the image's saved VM state).
    pub base_disk: PathBuf,
    /// Lab start to the Node Ready, when the node was joined.
    pub join_secs: f64,
    /// The VM's save (pause, migrate, disk copy).
    pub save_secs: f64,
    pub stream_bytes: u64,
    /// Unix time of the save.
    pub saved_at: u64,
}

/// A usable checkpoint: its files exist and its inputs match the current ones.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub dir: PathBuf,
    pub info: CheckpointInfo,
}

impl Checkpoint {
    /// Reads the entry at `dir` and checks it against `expected`.
    pub fn load(dir: &Path, expected: &CheckpointInputs) -> Result<Checkpoint, CheckpointError> {
        let stale = |why: String| CheckpointError::Stale {
            dir: dir.to_path_buf(),
            why,
        };
        let text = fs::read_to_string(dir.join(INFO)).map_err(|e| stale(format!("{INFO}: {e}")))?;
        let info: CheckpointInfo = serde_json::from_str(&text).map_err(|e| stale(format!("{INFO}: {e}")))?;
        let changed = expected.0.differences(&info.inputs);
        if !changed.is_empty() {
            return Err(stale(format!(
                "it was saved with other {} than there are now",
                changed.join(", ")
            )));
        }
        for file in [state::DISK, state::STREAM, HOST_LISTING] {
            let len = fs::metadata(dir.join(file)).map(|m| m.len()).unwrap_or(0);
            if len == 0 {
                return Err(stale(format!("{file} is missing or empty")));
            }
        }
        crate::kind::saved::SavedKindNode::load(&dir.join(CONTROL_PLANE))
            .map_err(|why| stale(format!("{CONTROL_PLANE}/: {why}")))?;
        if !info.base_disk.is_file() {
            return Err(stale(format!(
                "the disk it is an overlay of, {}, is gone",
                info.base_disk.display()
            )));
        }
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            info,
        })
    }

    /// The saved VM to resume ([`crate::vm::Vm::resume_from`]).
    pub fn saved_vm(&self) -> SavedState {
        SavedState {
            dir: self.dir.clone(),
            key: self.info.key.clone(),
            info: StateInfo {
                key: self.info.key.clone(),
                inputs: self.info.inputs.clone(),
                base_disk: self.info.base_disk.clone(),
                boot_secs: self.info.join_secs,
                save_secs: self.info.save_secs,
                stream_bytes: self.info.stream_bytes,
                saved_at: self.info.saved_at,
            },
        }
    }

    /// The control plane's saved state, for `LabSpec::control_plane_state`.
    pub fn control_plane(&self) -> PathBuf {
        self.dir.join(CONTROL_PLANE)
    }

    /// How old the checkpoint is.
    pub fn age(&self) -> Duration {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Duration::from_secs(now.saturating_sub(self.info.saved_at))
    }

    /// Removes this checkpoint (e.g. QEMU could not load it) so the next test builds it again.
    pub fn invalidate(&self, cache: &Cache) -> Result<(), CheckpointError> {
        remove_entry(cache, &self.dir)
    }
}

/// What a build hands back to be written into `checkpoint.json`.
pub struct Saved {
    pub deployed: DeployedNode,
    pub base_disk: PathBuf,
    pub join: Duration,
    pub save: Duration,
}

/// The checkpoint for `inputs`: found in the cache, or built now by `build`, which gets the
/// empty entry directory to fill (`booted.qcow2`, `state.zst`, `console.log`, `control-plane/`:
/// [`crate::vm::Vm::save_into`] and [`copy_tree`]; [`HOST_LISTING`]) and returns what it saved. Other processes
/// wanting the same key wait for the build. A stale entry is removed and built again once.
pub fn ensure(
    cache: &Cache,
    inputs: &CheckpointInputs,
    mut build: impl FnMut(&Path) -> Result<Saved, BuildError>,
) -> Result<Checkpoint, CheckpointError> {
    let key = inputs.0.key_of(KIND);
    prune(cache);
    let mut last = None;
    for _ in 0..2 {
        let dir = cache.get_or_build(KIND, &key, |out, _log| {
            let saved = build(out)?;
            let info = CheckpointInfo {
                key: key.hex(),
                inputs: inputs.0.clone(),
                deployed: saved.deployed,
                base_disk: saved.base_disk,
                join_secs: saved.join.as_secs_f64(),
                save_secs: saved.save.as_secs_f64(),
                stream_bytes: fs::metadata(out.join(state::STREAM))
                    .map(|m| m.len())
                    .unwrap_or(0),
                saved_at: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            };
            for file in [state::DISK, state::STREAM] {
                fs::set_permissions(out.join(file), fs::Permissions::from_mode(0o444))?;
            }
            fs::write(out.join(INFO), serde_json::to_string_pretty(&info)? + "\n")?;
            Ok(())
        })?;
        match Checkpoint::load(&dir, inputs) {
            Ok(checkpoint) => return Ok(checkpoint),
            Err(err) => {
                eprintln!("==> {err}: removing it");
                remove_entry(cache, &dir)?;
                last = Some(err);
            }
        }
    }
    Err(last.expect("the loop ran"))
}

/// The checkpoint for `inputs` when one exists and is usable (a stale one is removed); never
/// builds one.
pub fn find(cache: &Cache, inputs: &CheckpointInputs) -> Option<Checkpoint> {
    let dir = cache.lookup(KIND, &inputs.0.key_of(KIND))?;
    match Checkpoint::load(&dir, inputs) {
        Ok(checkpoint) => Some(checkpoint),
        Err(err) => {
            eprintln!("==> {err}: removing it");
            if let Err(err) = remove_entry(cache, &dir) {
                eprintln!("warning: {err}");
            }
            None
        }
    }
}

/// Removes checkpoints that can never be used again: their base disk (the image's saved VM
/// state) is gone, or a newer checkpoint of the same node on the same kind of cluster exists
/// (the older one's agent, config or artifacts are outdated). Best effort; prints what it removes.
pub fn prune(cache: &Cache) {
    let Ok(entries) = fs::read_dir(cache.root().join(KIND)) else {
        return;
    };
    let mut newest: BTreeMap<String, (u64, PathBuf)> = BTreeMap::new();
    let mut doomed = Vec::new();
    for dir in entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
    {
        let Ok(text) = fs::read_to_string(dir.join(INFO)) else {
            continue;
        };
        let Ok(info) = serde_json::from_str::<CheckpointInfo>(&text) else {
            continue;
        };
        if !info.base_disk.exists() {
            doomed.push((dir, format!("its base disk {} is gone", info.base_disk.display())));
            continue;
        }
        // One newest checkpoint per node, whatever its cluster's node image and setup.
        let node = info.deployed.name.clone();
        match newest.get(&node) {
            Some((at, _)) if *at >= info.saved_at => {
                doomed.push((dir, format!("a newer checkpoint of node {node} exists")));
            }
            _ => {
                if let Some((_, older)) = newest.insert(node.clone(), (info.saved_at, dir)) {
                    doomed.push((older, format!("a newer checkpoint of node {node} exists")));
                }
            }
        }
    }
    for (dir, why) in doomed {
        eprintln!("==> removing node checkpoint {}: {why}", dir.display());
        if let Err(err) = remove_entry(cache, &dir) {
            eprintln!("warning: {err}");
        }
    }
}

/// Removes an entry under the cache's lock for its key. VMs already running from it keep
/// their open files.
fn remove_entry(cache: &Cache, dir: &Path) -> Result<(), CheckpointError> {
    let key = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let lock_path = cache.lock_path(KIND, &key);
    let lock = fs::File::create(&lock_path).map_err(io(&lock_path))?;
    lock.lock().map_err(io(&lock_path))?;
    let doomed = cache
        .root()
        .join(KIND)
        .join(format!(".stale-{key}-{}", std::process::id()));
    match fs::rename(dir, &doomed) {
        Ok(()) => fs::remove_dir_all(&doomed).map_err(io(&doomed)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(dir)(e)),
    }
}

/// Copies the directory tree `from` to `to` (created; must not exist yet): regular files with
/// their modes, directories, symlinks as links. The control plane's state is small (tens of MB).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir(to)?;
    fs::set_permissions(to, fs::metadata(from)?.permissions())?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &target)?;
        } else {
            return Err(std::io::Error::other(format!(
                "{} is neither a file, a directory nor a symlink",
                entry.path().display()
            )));
        }
    }
    Ok(())
}

fn input(path: &Path, e: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Input {
        what: path.display().to_string(),
        why: e.to_string(),
    }
}

/// The sha256 over a directory's files (names and bytes, sorted by name; not recursive).
fn sha256_of_dir(dir: &Path) -> Result<String, CheckpointError> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| input(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut hasher = Sha256::new();
    for file in files {
        hasher.update(file.file_name().unwrap_or_default().as_encoded_bytes());
        hasher.update(fs::read(&file).map_err(|e| input(&file, e))?);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Files {
        tmp: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            let tmp = tempfile::tempdir().unwrap();
            fs::write(tmp.path().join("agent"), "agent v1").unwrap();
            fs::write(tmp.path().join("node.json"), "{\"name\": \"n\"}").unwrap();
            fs::create_dir(tmp.path().join("crd")).unwrap();
            fs::write(tmp.path().join("crd/machine.yaml"), "kind: CRD").unwrap();
            fs::write(tmp.path().join("base.qcow2"), "base").unwrap();
            Files { tmp }
        }
        fn path(&self, name: &str) -> PathBuf {
            self.tmp.path().join(name)
        }
        fn inputs(&self) -> CheckpointInputs {
            CheckpointInputs::new(&NodeInputs {
                vm_state_key: "vmstate",
                agent_binary: &self.path("agent"),
                node_config: &self.path("node.json"),
                artifacts_key: "artifacts",
                crd_dir: &self.path("crd"),
                prepare: "search lab.test",
                control_plane: "kind node-image setup 1",
            })
            .unwrap()
        }
    }

    fn deployed(name: &str) -> DeployedNode {
        DeployedNode {
            name: name.into(),
            node_ip: std::net::Ipv4Addr::new(192, 168, 100, 10),
            pod_cidr: "10.244.0.0/24".into(),
            guest_agent: "/usr/local/bin/unbounded-agent".into(),
            config: agent::config::RawConfig::default(),
            start_uptime: 12.5,
            start_took: Duration::from_secs(300),
            stdout: "done".into(),
            stderr: String::new(),
        }
    }

    /// Builds an entry the way a join would, with stand-in files (no VM here).
    fn fake_build(out: &Path, files: &Files, node: &str) -> Result<Saved, BuildError> {
        fs::write(out.join(state::DISK), "disk")?;
        fs::write(out.join(state::STREAM), "stream")?;
        crate::kind::saved::tests::fake_saved_node(&out.join(CONTROL_PLANE))?;
        fs::write(out.join(HOST_LISTING), "path /etc/os-release\n")?;
        Ok(Saved {
            deployed: deployed(node),
            base_disk: files.path("base.qcow2"),
            join: Duration::from_secs(400),
            save: Duration::from_secs(30),
        })
    }

    #[test]
    fn every_input_changes_the_key() {
        let files = Files::new();
        let key = files.inputs().key();
        assert_eq!(files.inputs().key(), key, "the same inputs give the same key");
        fs::write(files.path("agent"), "agent v2").unwrap();
        let agent = files.inputs().key();
        assert_ne!(agent, key, "a rebuilt agent");
        fs::write(files.path("node.json"), "{\"name\": \"m\"}").unwrap();
        let config = files.inputs().key();
        assert_ne!(config, agent, "another node config");
        fs::write(files.path("crd/machine.yaml"), "kind: CRD2").unwrap();
        assert_ne!(files.inputs().key(), config, "changed CRDs");
        let mut other = files.inputs();
        other.0.0.insert("prepare".into(), "nothing".into());
        assert_ne!(other.key(), files.inputs().key(), "another preparation");
        assert_eq!(
            other.0.differences(&files.inputs().0),
            vec!["prepare".to_string()]
        );
    }

    #[test]
    fn a_built_entry_is_found_again_and_a_changed_input_makes_another() {
        let files = Files::new();
        let cache = Cache::at(files.path("cache")).unwrap();
        let mut builds = 0;
        let first = ensure(&cache, &files.inputs(), |out| {
            builds += 1;
            fake_build(out, &files, "n")
        })
        .unwrap();
        assert_eq!(first.info.deployed.name, "n");
        assert_eq!(first.info.join_secs, 400.0);
        let mode = fs::metadata(first.dir.join(state::STREAM))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o444, "the saved stream is read-only");
        let again = ensure(&cache, &files.inputs(), |_| panic!("built twice")).unwrap();
        assert_eq!(again.dir, first.dir);
        assert_eq!(again.saved_vm().disk(), first.dir.join(state::DISK));
        fs::write(files.path("agent"), "agent v2").unwrap();
        let second = ensure(&cache, &files.inputs(), |out| {
            builds += 1;
            fake_build(out, &files, "n")
        })
        .unwrap();
        assert_ne!(second.dir, first.dir);
        assert_eq!(builds, 2);
    }

    #[test]
    fn a_checkpoint_with_other_inputs_missing_files_no_host_listing_or_no_base_disk_is_stale() {
        let files = Files::new();
        let cache = Cache::at(files.path("cache")).unwrap();
        let built = ensure(&cache, &files.inputs(), |out| fake_build(out, &files, "n")).unwrap();
        let mut other = files.inputs();
        other.0.0.insert("artifacts".into(), "newer".into());
        let err = Checkpoint::load(&built.dir, &other).unwrap_err().to_string();
        assert!(err.contains("artifacts"), "{err}");

        let var_tar = built.dir.join(CONTROL_PLANE).join(crate::kind::saved::VAR_TAR);
        fs::remove_file(&var_tar).unwrap();
        let err = Checkpoint::load(&built.dir, &files.inputs())
            .unwrap_err()
            .to_string();
        assert!(err.contains(crate::kind::saved::VAR_TAR), "{err}");
        fs::write(&var_tar, "tar").unwrap();

        let listing = fs::read(built.dir.join(HOST_LISTING)).unwrap();
        fs::remove_file(built.dir.join(HOST_LISTING)).unwrap();
        let err = Checkpoint::load(&built.dir, &files.inputs())
            .unwrap_err()
            .to_string();
        assert!(err.contains(HOST_LISTING), "{err}");
        fs::write(built.dir.join(HOST_LISTING), listing).unwrap();
        Checkpoint::load(&built.dir, &files.inputs()).expect("whole again");

        fs::remove_file(files.path("base.qcow2")).unwrap();
        let err = Checkpoint::load(&built.dir, &files.inputs())
            .unwrap_err()
            .to_string();
        assert!(err.contains("base.qcow2"), "{err}");
        prune(&cache);
        assert!(
            !built.dir.exists(),
            "prune removes a checkpoint whose base disk is gone"
        );
    }

    #[test]
    fn prune_keeps_the_newest_checkpoint_of_each_node() {
        let files = Files::new();
        let cache = Cache::at(files.path("cache")).unwrap();
        let old = ensure(&cache, &files.inputs(), |out| fake_build(out, &files, "n")).unwrap();
        let mut info = old.info.clone();
        info.saved_at -= 100;
        fs::write(old.dir.join(INFO), serde_json::to_string(&info).unwrap()).unwrap();
        fs::write(files.path("agent"), "agent v2").unwrap();
        let new = ensure(&cache, &files.inputs(), |out| fake_build(out, &files, "n")).unwrap();
        fs::write(files.path("node.json"), "{\"name\": \"other\"}").unwrap();
        let other = ensure(&cache, &files.inputs(), |out| fake_build(out, &files, "other")).unwrap();
        prune(&cache);
        assert!(!old.dir.exists(), "the older checkpoint of node n is removed");
        assert!(new.dir.exists() && other.dir.exists());
    }

    #[test]
    fn copy_tree_copies_files_modes_directories_and_links() {
        let tmp = tempfile::tempdir().unwrap();
        let from = tmp.path().join("from");
        fs::create_dir_all(from.join("pki")).unwrap();
        fs::write(from.join("pki/ca.key"), "key").unwrap();
        fs::set_permissions(from.join("pki/ca.key"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(from.join("Corefile"), "x").unwrap();
        std::os::unix::fs::symlink("Corefile", from.join("link")).unwrap();
        let to = tmp.path().join("to");
        copy_tree(&from, &to).unwrap();
        assert_eq!(fs::read_to_string(to.join("pki/ca.key")).unwrap(), "key");
        let mode = fs::metadata(to.join("pki/ca.key")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::read_link(to.join("link")).unwrap(), Path::new("Corefile"));
        assert!(copy_tree(&from, &to).is_err(), "an existing target is refused");
    }
}
