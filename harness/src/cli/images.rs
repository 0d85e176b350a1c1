//! `harness images ...`: build the cached images and artifacts, list what is cached, prune old ones.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::cache::Cache;
use crate::images::prune::{self, CurrentKeys, InUse, Verdict};
use crate::images::{coredns, host, kind_node, kind_tool, kubernetes, oci, rootfs};
use crate::lab::owner;
use crate::progress;
use crate::vm::{Accel, BootImage, BootMode, RunDir, VmSpec};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Build every image and artifact the lab needs (each once; cached ones are kept).
    ///
    /// The VM host image (qcow2, kernel, initrd), the nspawn machine rootfs
    /// tarball, the CoreDNS release artifact, the Kubernetes binaries with etcd
    /// (a cold build compiles Kubernetes from source: docs/perf.md, "CI budget"), the pause and
    /// test container images (OCI archives), the `kind` CLI and the Kind node image, in the
    /// cache at $LAB_CACHE_DIR (default ~/.cache/unbounded-lab).
    Build {
        /// Build only these (default: all).
        #[arg(value_enum)]
        only: Vec<Image>,
    },
    /// List the cached images and artifacts: kind, key, size, path.
    ///
    /// `--output json` prints a list of objects: `kind`, `key`, `path`, `bytes`.
    List {
        /// `text` (a table) or `json`.
        #[arg(long, value_enum, default_value = "text")]
        output: super::output::Output,
    },
    /// Remove the cached entries the current recipes no longer give (old keys), with their
    /// logs and locks, and partial builds left by processes that are gone.
    ///
    /// Kept: the current entries, an entry whose lock is held (being built), an entry a
    /// process has open or a VM overlay (in $LAB_STATE_DIR) or a kept entry is backed by.
    /// Left alone and reported: anything the cache does not know. Refuses while a lab runs
    /// (`harness lab list`), except with --dry-run.
    Prune {
        /// Print what would be removed and freed; remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Build (or find) the CoreDNS release artifact and print its paths.
    Coredns,
    /// Build (or find) the Kubernetes binaries and etcd and print their paths.
    Kubernetes,
}

/// One buildable thing of `harness images build`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Image {
    /// The VM host image.
    Host,
    /// The nspawn machine rootfs tarball.
    Rootfs,
    /// The CoreDNS release artifact.
    Coredns,
    /// The pause and test container images (OCI archives).
    Oci,
    /// The Kubernetes control plane and node binaries and etcd.
    Kubernetes,
    /// The `kind` CLI and its base image's files.
    Kind,
    /// The Kind node image (Debian, Kind's base files, Kubernetes, the control plane's images).
    KindNode,
    /// The host image booted once and saved: every VM resumes from it (`LAB_COLD_BOOT=1` skips it).
    VmState,
}

impl Image {
    const ALL: [Image; 8] = [
        Image::Host,
        Image::Rootfs,
        Image::Coredns,
        Image::Oci,
        Image::Kubernetes,
        Image::Kind,
        Image::KindNode,
        Image::VmState,
    ];

    /// Builds (or finds) the image; returns where it is.
    fn build(self, cache: &Cache) -> anyhow::Result<PathBuf> {
        Ok(match self {
            Image::Host => host::build(cache)?.dir,
            Image::Rootfs => rootfs::build(cache)?.dir,
            Image::Coredns => coredns::build(cache)?.dir,
            Image::Oci => oci::build(cache)?.dir,
            Image::Kubernetes => kubernetes::build(cache)?.dir,
            Image::Kind => kind_tool::build(cache)?.dir,
            Image::KindNode => kind_node::build(cache)?.dir,
            Image::VmState => {
                let image = host::build(cache)?;
                let spec = VmSpec::new("images", "build", BootImage::from(&image));
                if spec.effective_boot_mode() == BootMode::Cold {
                    return Ok(PathBuf::from("(not taken: LAB_COLD_BOOT is set)"));
                }
                crate::vm::Vm::ensure_saved_state(cache, &spec, Accel::from_env()?)?.dir
            }
        })
    }
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let cache = Cache::open()?;
    match cmd {
        Command::Build { only } => build(&cache, if only.is_empty() { &Image::ALL } else { &only }),
        Command::List { output } => list(&cache, output),
        Command::Prune { dry_run } => prune(&cache, dry_run),
        Command::Coredns => print_coredns(&cache),
        Command::Kubernetes => print_kubernetes(&cache),
    }
}

/// The images in the order they are built: the Debian images (mmdebstrap: downloads, dpkg and
/// compression, mostly one core) in one lane beside the Go builds and container images (every
/// core they get, at the lowest priority) in another, then the Kind node image (made of the Go
/// builds) and the saved VM state, which boots the host image. Each lane keeps the order `images`
/// gives.
fn lanes(images: &[Image]) -> [Vec<Image>; 3] {
    let mut lanes: [Vec<Image>; 3] = Default::default();
    for &image in images {
        let lane = match image {
            Image::Host | Image::Rootfs => 0,
            Image::Coredns | Image::Oci | Image::Kubernetes | Image::Kind => 1,
            Image::VmState | Image::KindNode => 2,
        };
        if !lanes[lane].contains(&image) {
            lanes[lane].push(image);
        }
    }
    lanes
}

/// Builds `images` one after the other; returns those that failed.
fn build_in_turn(cache: &Cache, images: &[Image]) -> Vec<Image> {
    let mut failed = Vec::new();
    for &image in images {
        let one = Instant::now();
        match image.build(cache) {
            Ok(path) => progress::say(&format!(
                "{image:?}: ready after {:.1}s at {}",
                one.elapsed().as_secs_f64(),
                path.display()
            )),
            Err(err) => {
                progress::say(&format!(
                    "{image:?}: FAILED after {:.1}s: {err:#}",
                    one.elapsed().as_secs_f64()
                ));
                failed.push(image);
            }
        }
    }
    failed
}

fn build(cache: &Cache, images: &[Image]) -> anyhow::Result<ExitCode> {
    eprintln!("cache: {}", cache.root().display());
    let started = Instant::now();
    let [debian, go, last] = lanes(images);
    let mut failed = std::thread::scope(|scope| {
        let beside = scope.spawn(|| build_in_turn(cache, &debian));
        let mut failed = build_in_turn(cache, &go);
        failed.extend(beside.join().unwrap_or_else(|_| debian.clone()));
        failed
    });
    failed.extend(build_in_turn(cache, &last));
    eprintln!("total {:.1}s", started.elapsed().as_secs_f64());
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        anyhow::bail!("could not build {failed:?}")
    }
}

fn print_coredns(cache: &Cache) -> anyhow::Result<ExitCode> {
    let a = coredns::build(cache)?;
    println!("version         {}", a.version);
    println!("tarball         {}", a.tarball.display());
    println!("tarball sha256  {}", a.tarball_sha256);
    println!(
        "release root    {} (serve it; its address is BaseURL)",
        a.release_root.display()
    );
    println!("offline bundle  {}", a.offline_bundle.display());
    println!("binary          {}", a.binary.display());
    println!("binary sha256   {}", a.binary_sha256);
    let plugins: Vec<String> = coredns::Recipe::pinned()?
        .plugins
        .iter()
        .map(ToString::to_string)
        .collect();
    println!("plugins         {}", plugins.join(" "));
    println!(
        "cluster DNS     {} (kubernetes as well)",
        a.cluster_binary.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn print_kubernetes(cache: &Cache) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let a = kubernetes::build(cache)?;
    println!("version         v{} (etcd v{})", a.version, a.etcd_version);
    println!("binaries        {}", a.bin_dir.display());
    println!(
        "release root    {} (serve it; its address is Downloads.Kubernetes.BaseURL)",
        a.release_root.display()
    );
    println!("offline bundle  {}", a.offline_bundle.display());
    eprintln!("ready after {:.1}s", started.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

fn list(cache: &Cache, output: super::output::Output) -> anyhow::Result<ExitCode> {
    let entries = cache.list()?;
    if output == super::output::Output::Json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        println!(
            "nothing cached in {}: run `harness images build`",
            cache.root().display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let width = entries.iter().map(|e| e.kind.len()).max().unwrap_or(4).max(4);
    println!("{:width$}  {:16}  {:>9}  PATH", "KIND", "KEY", "SIZE");
    for entry in entries {
        println!(
            "{:width$}  {:16}  {:>9}  {}",
            entry.kind,
            entry.key,
            human_size(entry.bytes),
            entry.path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn prune(cache: &Cache, dry_run: bool) -> anyhow::Result<ExitCode> {
    let running = running_labs();
    if !running.is_empty() && !dry_run {
        anyhow::bail!(
            "not pruning {}: {} running ({}); a running lab serves and boots from cache entries. \
             Stop it first (`harness lab down` for lab 0; `harness lab list` shows the labs), \
             or see what would go with `harness images prune --dry-run`",
            cache.root().display(),
            if running.len() == 1 {
                "a lab is"
            } else {
                "labs are"
            },
            running.join("; ")
        );
    }
    let current = CurrentKeys::of_recipes(cache);
    let in_use = InUse::scan(cache.root(), &RunDir::state_root());
    let plan = prune::plan(cache, &current, &in_use)?;
    println!("cache: {}", cache.root().display());
    let width = plan.items.iter().map(|i| i.name.len()).max().unwrap_or(0);
    for item in &plan.items {
        let (action, why) = match &item.verdict {
            Verdict::Remove(why) if dry_run => ("would remove", why),
            Verdict::Remove(why) => ("remove", why),
            Verdict::Keep(why) => ("keep", why),
            Verdict::LeftAlone(why) => ("left alone", why),
        };
        println!(
            "{action:12}  {:width$}  {:>9}  {why}",
            item.name,
            human_size(item.bytes)
        );
    }
    let count = plan.removals().count();
    if dry_run {
        println!(
            "dry run: would remove {count} and free {} (nothing removed){}",
            human_size(plan.bytes_freed),
            if running.is_empty() {
                String::new()
            } else {
                format!(
                    "; a real prune refuses until the running labs stop: {}",
                    running.join("; ")
                )
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let applied = prune::apply(&plan)?;
    for (name, why) in &applied.skipped {
        println!("skipped       {name}: {why}");
    }
    println!(
        "removed {} and freed {}",
        applied.removed.len(),
        human_size(applied.bytes_freed)
    );
    Ok(ExitCode::SUCCESS)
}

/// The labs whose owner process is alive, as `lab-<n> (owner <pid>)`.
fn running_labs() -> Vec<String> {
    owner::known_labs()
        .into_iter()
        .filter_map(|name| {
            let owner = owner::read_owner(&name).filter(|o| o.is_alive())?;
            Some(format!("{name} (owner pid {})", owner.pid))
        })
        .collect()
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_images_build_beside_the_go_builds_and_the_saved_vm_state_last() {
        assert_eq!(
            lanes(&Image::ALL),
            [
                vec![Image::Host, Image::Rootfs],
                vec![Image::Coredns, Image::Oci, Image::Kubernetes, Image::Kind],
                vec![Image::KindNode, Image::VmState],
            ]
        );
        assert_eq!(
            lanes(&[
                Image::VmState,
                Image::Kubernetes,
                Image::Rootfs,
                Image::Kubernetes
            ]),
            [vec![Image::Rootfs], vec![Image::Kubernetes], vec![Image::VmState]]
        );
    }

    #[test]
    fn human_size_picks_a_readable_unit() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }
}
