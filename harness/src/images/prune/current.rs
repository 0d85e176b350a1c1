//! The keys the current recipes give, per kind of cache entry: what `prune` keeps.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use crate::cache::{Cache, RecipeKey};
use crate::images::{ImageError, coredns, host, kind_node, kind_tool, kubernetes, oci, rootfs};
use crate::vm::state::{self, StateInfo, StateInputs};
use crate::vm::{Accel, BootImage, VmSpec};
use agent::error_chain::Chain;

/// The keys (hex) the current recipes give, per kind. A kind whose current key cannot be
/// computed holds the reason instead, and keeps all its entries.
#[derive(Clone, Debug, Default)]
pub struct CurrentKeys(BTreeMap<String, Result<BTreeSet<String>, String>>);

impl CurrentKeys {
    /// The current keys of every kind, as the image modules compute them now.
    ///
    /// `vm-state`: the saved states taken from the current host image with the current QEMU
    /// (the state `harness images build vm-state` takes, and those of other machine profiles,
    /// e.g. more memory, which differ from it only in their QEMU arguments). None when the
    /// current host image is not built (every saved state is then of an older image).
    pub fn of_recipes(cache: &Cache) -> CurrentKeys {
        let why = |e: ImageError| Chain(&e).to_string();
        let host = host::key().map_err(why);
        let rootfs = rootfs::key().map_err(why);
        let coredns = Ok(coredns::key());
        let kubernetes = Ok(kubernetes::key());
        let oci = oci::key().map_err(why);
        let kind_node = kind_node::key().map_err(why);
        let bundle = match (&coredns, &kubernetes, &rootfs, &oci, &kind_node) {
            (Ok(c), Ok(k), Ok(r), Ok(o), Ok(n)) => {
                Ok(bundle_key(&c.hex(), &k.hex(), &r.hex(), &o.hex(), &n.hex()))
            }
            _ => Err(
                "the key of one of its parts (coredns, kubernetes, rootfs, oci, kind-node) is unknown".into(),
            ),
        };
        let mut keys = CurrentKeys::default();
        for (kind, key) in [
            (host::KIND, host.clone()),
            (rootfs::KIND, rootfs),
            (coredns::KIND, coredns),
            (kubernetes::KIND, kubernetes),
            (oci::KIND, oci),
            (kind_tool::KIND, Ok(kind_tool::key())),
            (kind_node::KIND, kind_node::key().map_err(why)),
            (BUNDLE_KIND, bundle),
        ] {
            keys.0
                .insert(kind.to_string(), key.map(|k| BTreeSet::from([k.hex()])));
        }
        let states = match host {
            Ok(key) => current_states(cache, &key),
            Err(why) => Err(format!("the host image's key is unknown: {why}")),
        };
        keys.0.insert(state::KIND.to_string(), states);
        keys
    }

    /// Sets the current keys of `kind` (tests set their own).
    pub fn set(&mut self, kind: &str, keys: impl IntoIterator<Item = impl Into<String>>) -> &mut Self {
        self.0
            .insert(kind.to_string(), Ok(keys.into_iter().map(Into::into).collect()));
        self
    }

    /// Marks `kind`'s current key as unknown for `why`: its entries are all kept.
    pub fn set_unknown(&mut self, kind: &str, why: impl Into<String>) -> &mut Self {
        self.0.insert(kind.to_string(), Err(why.into()));
        self
    }

    /// The current keys of `kind` (`None`: not a kind of the cache).
    pub fn of(&self, kind: &str) -> Option<&Result<BTreeSet<String>, String>> {
        self.0.get(kind)
    }
}

/// The cache kind of the offline bundle (`crate::artifacts` builds it).
pub const BUNDLE_KIND: &str = "offline-bundle";

/// The offline bundle's key from its parts' keys (the entry directory names of the five entries
/// it links from): the one formula, used by `artifacts` to assemble the bundle and here to know it.
pub fn bundle_key(coredns: &str, kubernetes: &str, rootfs: &str, oci: &str, kind_node: &str) -> RecipeKey {
    RecipeKey::new(BUNDLE_KIND)
        .with("layout", "offline-bundle-2")
        .with("coredns", coredns)
        .with("kubernetes", kubernetes)
        .with("rootfs", rootfs)
        .with("oci", oci)
        .with("kind-node", kind_node)
}

/// The saved states valid for the current host image (see [`CurrentKeys::of_recipes`]).
fn current_states(cache: &Cache, host_key: &RecipeKey) -> Result<BTreeSet<String>, String> {
    let Some(dir) = cache.lookup(host::KIND, host_key) else {
        return Ok(BTreeSet::new());
    };
    let image = host::load(&dir).map_err(|e| Chain(&e).to_string())?;
    let spec = VmSpec::new("images", "build", BootImage::from(&image));
    let accel = Accel::from_env().map_err(|e| e.to_string())?;
    let inputs = StateInputs::for_spec(&spec, accel).map_err(|e| e.to_string())?;
    let mut keys = BTreeSet::from([inputs.key().hex()]);
    let Ok(entries) = fs::read_dir(cache.root().join(state::KIND)) else {
        return Ok(keys);
    };
    for entry in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let Ok(text) = fs::read_to_string(entry.join(state::INFO)) else {
            continue;
        };
        let Ok(info) = serde_json::from_str::<StateInfo>(&text) else {
            continue;
        };
        let name = entry
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name == info.key && inputs.differences(&info.inputs) == ["qemu-args"] {
            keys.insert(name);
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_keys_are_the_image_modules_keys() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path().to_path_buf()).unwrap();
        let current = CurrentKeys::of_recipes(&cache);
        let one = |kind: &str| current.of(kind).cloned().unwrap().unwrap();
        assert_eq!(one(host::KIND), BTreeSet::from([host::key().unwrap().hex()]));
        assert_eq!(one(rootfs::KIND), BTreeSet::from([rootfs::key().unwrap().hex()]));
        assert_eq!(one(coredns::KIND), BTreeSet::from([coredns::key().hex()]));
        assert_eq!(one(kubernetes::KIND), BTreeSet::from([kubernetes::key().hex()]));
        assert_eq!(one(oci::KIND), BTreeSet::from([oci::key().unwrap().hex()]));
        assert_eq!(one(kind_tool::KIND), BTreeSet::from([kind_tool::key().hex()]));
        assert_eq!(
            one(kind_node::KIND),
            BTreeSet::from([kind_node::key().unwrap().hex()])
        );
        assert_eq!(one(BUNDLE_KIND).len(), 1);
        assert_eq!(
            one(state::KIND),
            BTreeSet::new(),
            "no saved state is current while the current host image is not built"
        );
        assert!(current.of("tools").is_none());
    }
}
