//! A path inside a machine root that cannot lead out of it. Each directory on the way is opened
//! from the root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: a symbolic link is
//! followed only while it stays inside (Debian's `bin -> usr/bin` is fine); an absolute one, or
//! one climbing out with `..`, is refused. Missing directories are made (0755) in the directory
//! just opened. The file is then reached through that open directory (`/proc/self/fd/<n>/<name>`),
//! so a directory swapped for a link afterwards is not followed either.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// A file's place inside a root, its directory held open.
#[derive(Debug)]
pub struct Beneath {
    dir: OwnedFd,
    name: OsString,
    shown: PathBuf,
    root: PathBuf,
    /// The directories made on the way, below `root`, outermost first.
    made: Vec<PathBuf>,
}

impl Beneath {
    /// The file reached through its open directory; valid while `self` lives. Reading, writing,
    /// renaming onto it or linking it there never resolves the directories again. It names this
    /// process's descriptor by pid (not `/proc/self`), so a program run on it — a script whose
    /// interpreter opens it again — reaches the same directory.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.dir.as_raw_fd()
        ))
        .join(&self.name)
    }

    /// Removes the directories [`beneath`] made on the way, innermost first, while they are empty
    /// (after a failed install: nothing of it stays).
    pub fn remove_made_dirs(&self) {
        for dir in self.made.iter().rev() {
            let inside = Path::new("/").join(dir);
            match existing_beneath(&self.root, &inside) {
                Ok(Some(found)) if std::fs::remove_dir(found.path()).is_ok() => {}
                _ => break,
            }
        }
    }

    /// The file as people know it (`<root>/<inside>`), for messages.
    pub fn shown(&self) -> &Path {
        &self.shown
    }
}

const DIRECTORY: OFlags = OFlags::DIRECTORY.union(OFlags::RDONLY).union(OFlags::CLOEXEC);

fn open_dir(root: &OwnedFd, dir: &Path) -> Result<OwnedFd, Errno> {
    if dir.as_os_str().is_empty() {
        return rustix::fs::openat(root, ".", DIRECTORY, Mode::empty());
    }
    rustix::fs::openat2(
        root,
        dir,
        DIRECTORY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Why `dir` (below `root`) could not be reached, in words.
fn refused(root: &Path, dir: &Path, errno: Errno) -> io::Error {
    let at = root.join(dir);
    let why = match errno {
        Errno::XDEV => format!(
            "a symbolic link on the way leads out of {} (absolute, or climbing out with ..): refused",
            root.display()
        ),
        Errno::LOOP => "too many symbolic links on the way".to_owned(),
        Errno::NOTDIR => "not a directory (or a link to something that is not one)".to_owned(),
        other => io::Error::from(other).to_string(),
    };
    io::Error::new(io::Error::from(errno).kind(), format!("{}: {why}", at.display()))
}

/// Opens the directory of `inside` (an absolute path as seen in the machine) below `root`,
/// making the missing ones, and names the file in it. Refused: a path with `..`, a path naming
/// no file, a link on the way leading out of `root`.
pub fn beneath(root: &Path, inside: &Path) -> io::Result<Beneath> {
    Ok(reach(root, inside, true)?.expect("missing directories are made"))
}

/// [`beneath`] without making anything (to remove a file): `None` when `root` or a directory on
/// the way is missing.
pub fn existing_beneath(root: &Path, inside: &Path) -> io::Result<Option<Beneath>> {
    reach(root, inside, false)
}

fn reach(root: &Path, inside: &Path, make: bool) -> io::Result<Option<Beneath>> {
    let mut parts = Vec::new();
    for c in inside.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => parts.push(p),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: a path inside the machine may not hold ..", inside.display()),
                ));
            }
        }
    }
    let Some(name) = parts.pop() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: names no file inside the machine", inside.display()),
        ));
    };
    let root_fd = match rustix::fs::open(root, DIRECTORY, Mode::empty()) {
        Err(Errno::NOENT) if !make => return Ok(None),
        other => other.map_err(|e| refused(root, Path::new(""), e))?,
    };
    let mut dir = PathBuf::new();
    let mut made = Vec::new();
    let mut fd = open_dir(&root_fd, &dir).map_err(|e| refused(root, &dir, e))?;
    for part in parts {
        dir.push(part);
        fd = match open_dir(&root_fd, &dir) {
            Err(Errno::NOENT) if !make => return Ok(None),
            Err(Errno::NOENT) => match rustix::fs::mkdirat(&fd, part, Mode::from_raw_mode(0o755)) {
                Ok(()) => {
                    made.push(dir.clone());
                    open_dir(&root_fd, &dir)
                }
                Err(Errno::EXIST) => open_dir(&root_fd, &dir),
                Err(e) => Err(e),
            },
            other => other,
        }
        .map_err(|e| refused(root, &dir, e))?;
    }
    Ok(Some(Beneath {
        dir: fd,
        name: name.to_owned(),
        shown: root.join(inside.strip_prefix("/").unwrap_or(inside)),
        root: root.to_owned(),
        made,
    }))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::files::{link_atomic, write_atomic};

    /// A root holding Debian's relative `bin -> usr/bin` and the two hostile links of the
    /// threat model: `etc/systemd -> <host>/etc/systemd` (absolute) and `var/lib -> /`.
    fn hostile_root() -> (tempfile::TempDir, tempfile::TempDir) {
        let root = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(host.path().join("etc/systemd")).unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("var")).unwrap();
        symlink("usr/bin", root.path().join("bin")).unwrap();
        symlink(host.path().join("etc/systemd"), root.path().join("etc/systemd")).unwrap();
        symlink("/", root.path().join("var/lib")).unwrap();
        symlink("../../..", root.path().join("usr/escape")).unwrap();
        (root, host)
    }

    fn tree(dir: &Path) -> Vec<PathBuf> {
        walk(dir, dir)
    }

    fn walk(base: &Path, dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(base).unwrap().to_path_buf());
            if path.symlink_metadata().unwrap().is_dir() {
                out.extend(walk(base, &path));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn links_leading_out_are_refused_naming_the_directory_and_nothing_is_written() {
        let (root, host) = hostile_root();
        let before = tree(host.path());
        for (inside, at) in [
            ("/etc/systemd/system/kubelet.service", "etc/systemd"),
            ("/var/lib/kubelet/config.yaml", "var/lib"),
            ("/usr/escape/x", "usr/escape"),
        ] {
            let err = beneath(root.path(), Path::new(inside)).unwrap_err();
            let text = err.to_string();
            assert!(
                text.starts_with(&format!(
                    "{}: a symbolic link on the way leads out of",
                    root.path().join(at).display()
                )),
                "{inside}: {text}"
            );
        }
        assert_eq!(tree(host.path()), before);
        assert!(!Path::new("/kubelet").exists());
    }

    #[test]
    fn links_that_stay_inside_are_followed_and_missing_directories_made() {
        let (root, _host) = hostile_root();
        let file = beneath(root.path(), Path::new("/bin/tool")).unwrap();
        write_atomic(&file.path(), b"x", 0o755).unwrap();
        assert_eq!(std::fs::read(root.path().join("usr/bin/tool")).unwrap(), b"x");
        assert_eq!(file.shown(), root.path().join("bin/tool"));
        let deep = beneath(root.path(), Path::new("/etc/unbounded/a/b/c.json")).unwrap();
        write_atomic(&deep.path(), b"{}", 0o600).unwrap();
        assert_eq!(
            std::fs::read(root.path().join("etc/unbounded/a/b/c.json")).unwrap(),
            b"{}"
        );
        let link = beneath(root.path(), Path::new("/etc/wants/x.service")).unwrap();
        link_atomic(&link.path(), Path::new("/lib/systemd/system/x.service")).unwrap();
        assert_eq!(
            std::fs::read_link(root.path().join("etc/wants/x.service")).unwrap(),
            Path::new("/lib/systemd/system/x.service")
        );
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_opening_is_not_followed() {
        let (root, host) = hostile_root();
        let file = beneath(root.path(), Path::new("/etc/unbounded/x")).unwrap();
        std::fs::rename(root.path().join("etc/unbounded"), root.path().join("etc/moved")).unwrap();
        symlink(host.path(), root.path().join("etc/unbounded")).unwrap();
        write_atomic(&file.path(), b"x", 0o644).unwrap();
        assert_eq!(std::fs::read(root.path().join("etc/moved/x")).unwrap(), b"x");
        assert!(!host.path().join("x").exists());
    }

    #[test]
    fn reaching_an_existing_file_makes_nothing_and_refuses_the_same_links() {
        let (root, host) = hostile_root();
        assert!(
            existing_beneath(root.path(), Path::new("/etc/none/x"))
                .unwrap()
                .is_none()
        );
        assert!(!root.path().join("etc/none").exists());
        std::fs::write(host.path().join("etc/systemd/kubelet.service"), "host").unwrap();
        let err = existing_beneath(root.path(), Path::new("/etc/systemd/kubelet.service")).unwrap_err();
        assert!(err.to_string().contains("leads out of"), "{err}");
        std::fs::write(root.path().join("usr/bin/x"), "x").unwrap();
        let found = existing_beneath(root.path(), Path::new("/bin/x"))
            .unwrap()
            .unwrap();
        std::fs::remove_file(found.path()).unwrap();
        assert!(!root.path().join("usr/bin/x").exists());
    }

    #[test]
    fn the_directories_made_on_the_way_can_be_removed_again() {
        let (root, _host) = hostile_root();
        std::fs::create_dir_all(root.path().join("usr/local")).unwrap();
        let file = beneath(root.path(), Path::new("/usr/local/bin/x/y")).unwrap();
        assert!(root.path().join("usr/local/bin/x").is_dir());
        file.remove_made_dirs();
        assert!(!root.path().join("usr/local/bin").exists());
        assert!(
            root.path().join("usr/local").is_dir(),
            "a directory that was there stays"
        );
    }

    /// A child process (here `sh`) reaches the file through the path, as the plugin check runs
    /// the CoreDNS candidate.
    #[test]
    fn a_child_process_reaches_the_file_through_the_path() {
        let (root, _host) = hostile_root();
        let file = beneath(root.path(), Path::new("/usr/bin/script")).unwrap();
        write_atomic(&file.path(), b"echo from-the-script\n", 0o755).unwrap();
        let out = crate::exec::run_stdout(std::process::Command::new("sh").arg(file.path())).unwrap();
        assert_eq!(out, "from-the-script\n");
    }

    #[test]
    fn dot_dot_and_empty_paths_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let err = beneath(root.path(), Path::new("/etc/../../x")).unwrap_err();
        assert!(err.to_string().contains("may not hold .."), "{err}");
        assert!(beneath(root.path(), Path::new("/")).is_err());
    }
}
