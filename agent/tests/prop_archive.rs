//! Property tests of the archive extractors (`agent::artifact::archive` behind
//! `fetch_verify_install`, `agent::artifact::tree` behind `rootfs::install`): hostile gzip
//! tarballs built with the `tar` crate — symbolic and hard links, `..`, absolute names, device
//! nodes, FIFOs, duplicate members, truncated streams, oversize trees — never write outside the
//! destination (the whole temporary directory around it is compared before and after), are
//! refused with the error naming the member and the reason, and leave nothing installed.
//!
//! A failing case is kept in `prop_archive.proptest-regressions` beside this file and replayed
//! first by every run (`cargo nextest run -p agent --test prop_archive`); see `prop_support`.

mod prop_support;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use agent::artifact::source::{COREDNS, Expected, Location, Resolved};
use agent::artifact::tree::{TreeLimits, extract_tree};
use agent::artifact::{FetchOptions, Fetcher, checksum, fetch_verify_install, rootfs};
use flate2::Compression;
use flate2::write::GzEncoder;
use proptest::prelude::*;
use tar::{EntryType, Header};

/// Archives are unpacked on disk: fewer cases than the pure properties, same order of time.
fn cases() -> proptest::test_runner::Config {
    prop_support::config_with(prop_support::CASES / 4)
}

/// A name or link target; `Outside` is resolved to an absolute path into `<tmp>/outside`.
#[derive(Debug, Clone)]
enum Name {
    Relative(String),
    Outside(&'static str),
}

#[derive(Debug, Clone)]
enum Kind {
    File(Vec<u8>),
    Dir,
    Symlink(Name),
    HardLink(Name),
    Char,
    Block,
    Fifo,
}

#[derive(Debug, Clone)]
struct Member {
    name: Name,
    kind: Kind,
    mode: u32,
}

/// How the gzip stream reaches the extractor.
#[derive(Debug, Clone, Copy)]
enum Cut {
    Whole,
    /// The gzip file cut at this fraction (in thousandths).
    Gzip(u16),
    /// The tar stream cut at this fraction, then compressed whole.
    Tar(u16),
}

const PARTS: &[&str] = &["coredns", "etc", "a", "x", "..", ".", "passwd"];
const OUTSIDE: &[&str] = &["", "/secret", "/dir", "/dir/new", "/new"];

fn relative() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["", "./"]),
        prop::collection::vec(prop::sample::select(PARTS), 1..4),
        any::<bool>(),
    )
        .prop_map(|(prefix, parts, slash)| {
            format!("{prefix}{}{}", parts.join("/"), if slash { "/" } else { "" })
        })
}

fn name() -> impl Strategy<Value = Name> {
    prop_oneof![
        6 => relative().prop_map(Name::Relative),
        1 => prop::sample::select(OUTSIDE).prop_map(Name::Outside),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Kind::File),
        1 => prop::sample::select(vec![100usize, 600, 5000]).prop_map(|n| Kind::File(vec![b'z'; n])),
        2 => Just(Kind::Dir),
        2 => name().prop_map(Kind::Symlink),
        2 => name().prop_map(Kind::HardLink),
        1 => prop::sample::select(vec![Kind::Char, Kind::Block, Kind::Fifo]),
    ]
}

fn member() -> impl Strategy<Value = Member> {
    (
        name(),
        kind(),
        prop::sample::select(vec![0o644, 0o755, 0o4755, 0o600, 0o777]),
    )
        .prop_map(|(name, kind, mode)| {
            // A directory the test itself cannot enter would only test the cleanup of root.
            let mode = if matches!(kind, Kind::Dir) {
                mode | 0o700
            } else {
                mode
            };
            Member { name, kind, mode }
        })
}

fn cut() -> impl Strategy<Value = Cut> {
    prop_oneof![
        6 => Just(Cut::Whole),
        1 => (0u16..1000).prop_map(Cut::Gzip),
        1 => (0u16..1000).prop_map(Cut::Tar),
    ]
}

/// A temporary directory holding the archive, a directory that is not the destination
/// (`outside/` with a file and a directory), and the destination's parents.
struct Scene {
    tmp: tempfile::TempDir,
}

impl Scene {
    fn new() -> Scene {
        let tmp = tempfile::tempdir_in(scratch()).unwrap();
        fs::create_dir_all(tmp.path().join("outside/dir")).unwrap();
        fs::write(tmp.path().join("outside/secret"), "secret\n").unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        Scene { tmp }
    }

    fn root(&self) -> &Path {
        self.tmp.path()
    }

    fn resolve(&self, name: &Name) -> String {
        match name {
            Name::Relative(s) => s.clone(),
            Name::Outside(suffix) => format!("{}/outside{suffix}", self.root().display()),
        }
    }

    /// Writes the archive as `<tmp>/in/<file>`; returns its path.
    fn archive(&self, members: &[Member], cut: Cut, file: &str) -> PathBuf {
        let owner = fs::metadata(self.root()).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        for m in members {
            let (kind, data, link): (EntryType, &[u8], Option<&Name>) = match &m.kind {
                Kind::File(d) => (EntryType::Regular, d, None),
                Kind::Dir => (EntryType::Directory, b"", None),
                Kind::Symlink(t) => (EntryType::Symlink, b"", Some(t)),
                Kind::HardLink(t) => (EntryType::Link, b"", Some(t)),
                Kind::Char => (EntryType::Char, b"", None),
                Kind::Block => (EntryType::Block, b"", None),
                Kind::Fifo => (EntryType::Fifo, b"", None),
            };
            let mut h = Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(m.mode);
            h.set_uid(owner.uid().into());
            h.set_gid(owner.gid().into());
            h.set_mtime(1_700_000_000);
            // `set_path` refuses `..` and absolute names: write the raw fields.
            raw(&mut h.as_old_mut().name, &self.resolve(&m.name));
            if let Some(link) = link {
                raw(&mut h.as_old_mut().linkname, &self.resolve(link));
            }
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        let mut tar = b.into_inner().unwrap();
        if let Cut::Tar(at) = cut {
            tar.truncate(tar.len() * usize::from(at) / 1000);
        }
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&tar).unwrap();
        let mut gz = gz.finish().unwrap();
        if let Cut::Gzip(at) = cut {
            gz.truncate(gz.len() * usize::from(at) / 1000);
        }
        let dir = self.root().join("in");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file);
        fs::write(&path, gz).unwrap();
        path
    }
}

/// Where the scenes go: `/dev/shm` (memory) when there is one, as thousands of small trees
/// and synced files on this machine's disk take minutes; else the usual temporary directory.
fn scratch() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() && tempfile::tempdir_in(shm).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn raw(field: &mut [u8; 100], text: &str) {
    assert!(text.len() < field.len(), "{text:?} does not fit a tar header");
    field.fill(0);
    field[..text.len()].copy_from_slice(text.as_bytes());
}

/// What a path is, for comparing trees: kind, mode, owner, size, links, contents or target,
/// and the modification time of everything but directories (creating and removing an entry
/// in a directory changes its time without writing into it).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    kind: &'static str,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u64,
    mtime: Option<i64>,
    contents: Option<Vec<u8>>,
    target: Option<PathBuf>,
}

/// Every path below `root` (not following links), except those below `skip`.
fn snapshot(root: &Path, skip: Option<&Path>) -> BTreeMap<PathBuf, Seen> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if skip.is_some_and(|s| path.starts_with(s)) {
                continue;
            }
            let m = fs::symlink_metadata(&path).unwrap();
            let t = m.file_type();
            let kind = if t.is_dir() {
                "dir"
            } else if t.is_symlink() {
                "symlink"
            } else if t.is_file() {
                "file"
            } else {
                "other"
            };
            out.insert(
                path.strip_prefix(root).unwrap().to_path_buf(),
                Seen {
                    kind,
                    mode: m.permissions().mode(),
                    uid: m.uid(),
                    gid: m.gid(),
                    nlink: if t.is_dir() { 0 } else { m.nlink() },
                    mtime: (!t.is_dir()).then(|| m.mtime()),
                    contents: t.is_file().then(|| fs::read(&path).unwrap()),
                    target: t.is_symlink().then(|| fs::read_link(&path).unwrap()),
                },
            );
            if t.is_dir() {
                todo.push(path);
            }
        }
    }
    out
}

/// Asserts that nothing outside `dest` changed: no new, removed or altered path.
fn unchanged_outside(
    before: &BTreeMap<PathBuf, Seen>,
    root: &Path,
    dest: Option<&Path>,
) -> Result<(), TestCaseError> {
    let after = snapshot(root, dest);
    let dest_rel = dest.map(|d| d.strip_prefix(root).unwrap().to_path_buf());
    for (path, seen) in &after {
        // The destination's own parents may have been created for it.
        let a_parent = dest_rel
            .as_ref()
            .is_some_and(|d| d.starts_with(path) && seen.kind == "dir");
        if !a_parent {
            prop_assert_eq!(
                before.get(path),
                Some(seen),
                "{} is new or changed",
                path.display()
            );
        }
    }
    for path in before.keys() {
        prop_assert!(after.contains_key(path), "{} was removed", path.display());
    }
    Ok(())
}

/// The refusal a correct extractor must give for a member before unpacking it, if any.
fn static_refusal(name: &str, kind: &Kind, link: Option<&str>, tree: bool) -> Option<String> {
    if name.starts_with('/') {
        return Some("is an absolute path".into());
    }
    if name.split('/').any(|p| p == "..") {
        return Some("climbs out of the archive".into());
    }
    let device = match kind {
        Kind::Char => Some("a character device"),
        Kind::Block => Some("a block device"),
        Kind::Fifo => Some("a FIFO"),
        _ => None,
    };
    if tree {
        if let Some(d) = device {
            return Some(format!("is {d}"));
        }
        if let (Kind::HardLink(_), Some(l)) = (kind, link)
            && (l.starts_with('/') || l.split('/').any(|p| p == ".."))
        {
            return Some("points outside".into());
        }
    }
    None
}

/// The errors a correct tree extraction may end with (`None`: it may also succeed): the
/// first certain refusal (a name, type or limit), or an unpacking failure of a member before it
/// (a write through a symbolic link out of the tree, a link to nothing, a file over a directory).
fn tree_outcomes(scene: &Scene, members: &[Member], limits: TreeLimits) -> (Vec<(String, String)>, bool) {
    let mut allowed = Vec::new();
    let (mut count, mut bytes) = (0u64, 0u64);
    for m in members {
        let name = scene.resolve(&m.name);
        let link = match &m.kind {
            Kind::Symlink(t) | Kind::HardLink(t) => Some(scene.resolve(t)),
            _ => None,
        };
        if let Some(why) = static_refusal(&name, &m.kind, link.as_deref(), true) {
            allowed.push((name, why));
            return (allowed, false);
        }
        count += 1;
        bytes += match &m.kind {
            Kind::File(d) => d.len() as u64,
            _ => 0,
        };
        if count > limits.max_entries {
            allowed.push((String::new(), format!("more than {} members", limits.max_entries)));
            return (allowed, false);
        }
        if bytes > limits.max_total_bytes {
            allowed.push((
                String::new(),
                format!("more than {} bytes unpacked", limits.max_total_bytes),
            ));
            return (allowed, false);
        }
        allowed.push((name, "could not be unpacked".into()));
    }
    if members.is_empty() {
        allowed.push((String::new(), "it holds no member".into()));
        return (allowed, false);
    }
    (allowed, true)
}

/// Checks an extraction's result against [`tree_outcomes`].
fn check_tree_result<T: std::fmt::Debug>(
    result: &Result<T, String>,
    scene: &Scene,
    members: &[Member],
    limits: TreeLimits,
    cut: Cut,
) -> Result<(), TestCaseError> {
    let (allowed, may_succeed) = tree_outcomes(scene, members, limits);
    // A cut stream may end cleanly after its first members.
    let cut_after_first =
        !matches!(cut, Cut::Whole) && tree_outcomes(scene, &members[..members.len().min(1)], limits).1;
    match result {
        Ok(_) => prop_assert!(
            may_succeed || cut_after_first,
            "unpacked although it must be refused: {:?}",
            allowed.last()
        ),
        Err(e) => {
            let named = |(name, why): &(String, String)| {
                e.contains(why.as_str()) && (name.is_empty() || e.contains(&format!("{name:?}")))
            };
            let truncated = !matches!(cut, Cut::Whole)
                && (e.contains("not a readable gzip-compressed tar archive")
                    || e.contains("could not be unpacked")
                    || e.contains("holds no member"));
            prop_assert!(
                allowed.iter().any(named) || truncated,
                "error {:?} is none of the allowed {:?}",
                e,
                allowed
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn a_hostile_tree_never_writes_outside_its_destination_and_is_refused_for_the_right_reason(
        members in prop::collection::vec(member(), 0..8),
        cut in cut(),
        limits in prop_oneof![
            3 => Just(TreeLimits::default()),
            1 => (1u64..6, prop::sample::select(vec![0u64, 10, 100, 1000]))
                .prop_map(|(max_entries, max_total_bytes)| TreeLimits { max_total_bytes, max_entries }),
        ],
    ) {
        let scene = Scene::new();
        let archive = scene.archive(&members, cut, "rootfs.tar.gz");
        let dest = scene.root().join("a/b/dest");
        fs::create_dir(&dest).unwrap();
        let before = snapshot(scene.root(), Some(&dest));
        let result = extract_tree(&archive, &dest, limits);
        unchanged_outside(&before, scene.root(), Some(&dest))?;
        check_tree_result(&result, &scene, &members, limits, cut)?;
    }

    #[test]
    fn a_hostile_binary_tarball_is_refused_for_the_right_reason_and_installs_nothing(
        members in prop::collection::vec(member(), 0..4),
        one_good in any::<bool>(),
        cut in cut(),
    ) {
        // Often a well-formed single member first, so that the later checks are reached.
        let mut members = members;
        if one_good {
            members.insert(0, Member { name: Name::Relative("./coredns".into()), kind: Kind::File(b"ELF".to_vec()), mode: 0o755 });
        }
        let scene = Scene::new();
        let archive = scene.archive(&members, cut, "coredns.tgz");
        let dest = scene.root().join("a/b/usr/local/bin/coredns");
        let before = snapshot(scene.root(), None);
        let resolved = Resolved {
            location: Location::File(archive.clone()),
            version: "1.15.0".into(),
            arch: "amd64".into(),
            expected: Expected::Pinned(checksum::sha256_file(&archive).unwrap()),
            bundle: None,
        };
        let max_bytes = 4096;
        let fetcher = Fetcher::new(FetchOptions { attempts: 1, max_bytes, ..FetchOptions::default() });
        let result = fetch_verify_install(&COREDNS, &resolved, &dest, &fetcher, &|_: &Path| Ok(()));
        let want = single_member_outcome(&scene, &members, max_bytes);
        // A cut stream may end cleanly after its first member.
        let first_alone = single_member_outcome(&scene, &members[..members.len().min(1)], max_bytes);
        match (&result, &want) {
            (Ok(installed), want) => {
                let contents = fs::read(&dest).unwrap();
                let cut_after_first = !matches!(cut, Cut::Whole) && first_alone.as_ref() == Ok(&contents);
                prop_assert!(want.as_ref() == Ok(&contents) || cut_after_first, "installed {:?}, expected {:?}", contents, want);
                prop_assert_eq!(&installed.path, &dest);
                unchanged_outside(&before, scene.root(), Some(&dest))?;
            }
            (Err(e), want) => {
                unchanged_outside(&before, scene.root(), None)?;
                prop_assert!(!dest.exists());
                let e = e.to_string();
                let truncated = !matches!(cut, Cut::Whole)
                    && ["not a readable", "truncated", "could not be read", "holds no member", "not a gzip"]
                        .iter()
                        .any(|w| e.contains(w));
                let right = match want {
                    Err(why) => e.contains(why.as_str()),
                    Ok(_) => false,
                };
                prop_assert!(right || truncated, "error {:?}, expected {:?}", e, want);
            }
        }
    }
}

proptest! {
    // Each case installs a whole rootfs (download, tree, marker, renames): fewer cases.
    #![proptest_config(prop_support::config_with(prop_support::CASES / 10))]

    #[test]
    fn a_benign_tree_is_installed_as_written(
        files in prop::collection::btree_map(
            prop::collection::vec(prop::sample::select(vec!["etc", "usr", "bin", "lib", "x"]), 1..4),
            prop::collection::vec(any::<u8>(), 0..32),
            1..6,
        ),
    ) {
        // Regular files in distinct leaves (no file is another's directory), a symlink and a
        // hard link to the first of them.
        let mut files: Vec<(String, Vec<u8>)> = files.into_iter().map(|(p, d)| (p.join("/"), d)).collect();
        // `etc` as a file would leave no room for the rootfs marker (etc/unbounded/rootfs.sha256).
        let names = files_names(&files);
        files.retain(|(p, _)| !files_is_prefix(p, &names) && p != "etc");
        prop_assume!(!files.is_empty());
        let first = files[0].0.clone();
        let mut members: Vec<Member> = files
            .iter()
            .map(|(p, d)| Member { name: Name::Relative(format!("./{p}")), kind: Kind::File(d.clone()), mode: 0o644 })
            .collect();
        members.push(Member { name: Name::Relative("./link".into()), kind: Kind::Symlink(Name::Relative(first.clone())), mode: 0o777 });
        members.push(Member { name: Name::Relative("./hard".into()), kind: Kind::HardLink(Name::Relative(first.clone())), mode: 0o644 });
        let scene = Scene::new();
        let archive = scene.archive(&members, Cut::Whole, "rootfs.tar.gz");
        let resolved = Resolved {
            location: Location::File(archive.clone()),
            version: String::new(),
            arch: "amd64".into(),
            expected: Expected::Pinned(checksum::sha256_file(&archive).unwrap()),
            bundle: None,
        };
        let rootfs_path = scene.root().join("a/b/machines/kube1");
        let result = rootfs::install(&resolved, &rootfs_path, false, &Fetcher::new(FetchOptions::default()));
        prop_assert!(result.is_ok(), "{:?}", result);
        for (p, d) in &files {
            prop_assert_eq!(&fs::read(rootfs_path.join(p)).unwrap(), d);
        }
        prop_assert_eq!(fs::read_link(rootfs_path.join("link")).unwrap(), PathBuf::from(&first));
        prop_assert_eq!(fs::read(rootfs_path.join("hard")).unwrap(), files[0].1.clone());
    }

    #[test]
    fn a_hostile_rootfs_never_writes_outside_and_a_refused_one_installs_nothing(
        members in prop::collection::vec(member(), 0..8),
        cut in cut(),
    ) {
        let scene = Scene::new();
        let archive = scene.archive(&members, cut, "rootfs.tar.gz");
        let sha = checksum::sha256_file(&archive).unwrap();
        let rootfs_path = scene.root().join("a/b/machines/kube1");
        let before = snapshot(scene.root(), None);
        let resolved = Resolved {
            location: Location::File(archive),
            version: String::new(),
            arch: "amd64".into(),
            expected: Expected::Pinned(sha),
            bundle: None,
        };
        let result = rootfs::install(&resolved, &rootfs_path, false, &Fetcher::new(FetchOptions::default()));
        match &result {
            Ok(_) => {
                prop_assert!(matches!(rootfs::present(&rootfs_path), rootfs::Present::Ours(_)));
                unchanged_outside(&before, scene.root(), Some(&rootfs_path))?;
                let beside: Vec<_> = fs::read_dir(rootfs_path.parent().unwrap()).unwrap().collect();
                prop_assert_eq!(beside.len(), 1, "only the rootfs is left beside it");
            }
            Err(_) => unchanged_outside(&before, scene.root(), None)?,
        }
        let result = result.map_err(|e| e.to_string());
        // The marker's directories must be directories of the tree.
        let marker_dirs = ["etc", "etc/unbounded"];
        if let Err(e) = &result
            && e.contains("a rootfs needs it to be a directory")
        {
            prop_assert!(
                marker_dirs.iter().any(|d| e.contains(&format!("member {d:?} is"))
                    && members.iter().any(|m| normalised(&scene.resolve(&m.name)) == *d)),
                "{}", e
            );
            return Ok(());
        }
        check_tree_result(&result, &scene, &members, TreeLimits::default(), cut)?;
    }
}

/// A member name as the tree holds it: without `.` components and `/` in front or behind.
fn normalised(name: &str) -> String {
    let parts: Vec<String> = Path::new(name)
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    parts.join("/")
}

fn files_names(files: &[(String, Vec<u8>)]) -> Vec<String> {
    files.iter().map(|(p, _)| p.clone()).collect()
}

/// Whether `p` is the directory of another file.
fn files_is_prefix(p: &str, names: &[String]) -> bool {
    names.iter().any(|n| n.starts_with(&format!("{p}/")))
}

/// The single-member rule: exactly one regular file `coredns` (or `./coredns`) of at most
/// `max_bytes`. `Ok(contents)`, or the part of the error that says why.
fn single_member_outcome(scene: &Scene, members: &[Member], max_bytes: u64) -> Result<Vec<u8>, String> {
    let Some(first) = members.first() else {
        return Err("it holds no member".into());
    };
    let name = scene.resolve(&first.name);
    if let Some(why) = static_refusal(&name, &first.kind, None, false) {
        return Err(format!("member {name:?} {why}"));
    }
    if name != "coredns" && name != "./coredns" {
        return Err(format!("member {name:?} is not the single top-level file"));
    }
    let what = match &first.kind {
        Kind::File(d) if d.len() as u64 > max_bytes => {
            return Err(format!("member {name:?} is {} bytes", d.len()));
        }
        Kind::File(_) => None,
        Kind::Dir => Some("a directory"),
        Kind::Symlink(_) => Some("a symbolic link"),
        Kind::HardLink(_) => Some("a hard link"),
        Kind::Char => Some("a character device"),
        Kind::Block => Some("a block device"),
        Kind::Fifo => Some("a FIFO"),
    };
    if let Some(what) = what {
        return Err(format!("member {name:?} is {what}, not a regular file"));
    }
    if let Some(second) = members.get(1) {
        let other = scene.resolve(&second.name);
        return Err(format!("more than one member ({name:?} and {other:?})"));
    }
    match &first.kind {
        Kind::File(d) => Ok(d.clone()),
        _ => unreachable!(),
    }
}
