//! `ci-rehearse`: runs the PR CI workflow's jobs on this machine the way GitHub's runners would
//! (docs/ci.md, "Rehearsing PR CI"), prints each job's result and time, and exits non-zero when
//! any job did not pass.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{Context, bail};
use ci_rehearsal::cache_store::GITHUB_LIMIT_BYTES;
use ci_rehearsal::free_space;
use ci_rehearsal::rehearsal::{Options, all_passed, rehearse};
use clap::Parser;

/// Rehearses a GitHub Actions workflow here: each job in a fresh clone of the committed HEAD
/// with an empty HOME, only the tools its steps install, caches by the workflow's own keys.
#[derive(Debug, Parser)]
#[command(name = "ci-rehearse")]
struct Cli {
    /// The workflow to rehearse, in the repository the current directory is in.
    #[arg(long, default_value = ".github/workflows/ci.yml")]
    workflow: PathBuf,
    /// Where caches, the runner's directories, logs and artifacts are kept (default:
    /// ~/.cache/unbounded-rehearsal).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Only these jobs (ids, comma-separated) and the jobs they need.
    #[arg(long, value_delimiter = ',')]
    jobs: Vec<String>,
    /// Only matrix combinations with this value, e.g. `--matrix slug=daemon` (repeatable).
    #[arg(long, value_parser = key_value)]
    matrix: Vec<(String, String)>,
    /// Start with no caches, as the workflow's first run on GitHub does.
    #[arg(long)]
    empty_caches: bool,
    /// The cache store's limit in GiB (GitHub keeps 10 GiB per repository).
    #[arg(long, default_value_t = 10)]
    cache_limit_gib: u64,
    /// Refuse to start with less room than this (GiB) on the store's filesystem.
    #[arg(long, default_value_t = free_space::NEEDED_GIB)]
    min_free_gib: u64,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not KEY=VALUE"))?;
    Ok((key.to_string(), value.to_string()))
}

fn git(repo: &std::path::Path, args: &[&str]) -> anyhow::Result<String> {
    let output = agent::exec::run_stdout(Command::new("git").arg("-C").arg(repo).args(args))?;
    Ok(output.trim().to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("ci-rehearse: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<bool> {
    let cli = Cli::parse();
    let cwd = std::env::current_dir()?;
    let repo = PathBuf::from(git(&cwd, &["rev-parse", "--show-toplevel"]).context("finding the repository")?);
    let sha = git(&repo, &["rev-parse", "HEAD"])?;
    if !git(&repo, &["status", "--porcelain", "--untracked-files=no"])?.is_empty() {
        eprintln!("==> note: uncommitted changes are not rehearsed: the jobs check out HEAD ({sha})");
    }
    let workflow = repo.join(&cli.workflow);
    if !workflow.is_file() {
        bail!("no workflow at {}", workflow.display());
    }
    let store = match cli.store {
        Some(store) => store,
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .context("neither XDG_CACHE_HOME nor HOME is set: pass --store")?;
            cache.join("unbounded-rehearsal")
        }
    };
    if cli.empty_caches && store.join("caches").exists() {
        eprintln!(
            "==> removing the rehearsal's caches in {}",
            store.join("caches").display()
        );
        std::fs::remove_dir_all(store.join("caches")).context("removing the caches")?;
    }
    // An interrupted rehearsal's runner directories go first, so their room counts below.
    let _ = std::fs::remove_dir_all(store.join("runner"));
    free_space::ensure_room(&store, cli.min_free_gib)?;
    let reports = rehearse(&Options {
        workflow,
        repo,
        sha,
        store,
        jobs: cli.jobs,
        matrix: cli.matrix,
        cache_limit_bytes: cli
            .cache_limit_gib
            .saturating_mul(1024 * 1024 * 1024)
            .min(GITHUB_LIMIT_BYTES * 100),
        heartbeat: Duration::from_secs(300),
    })?;
    Ok(all_passed(&reports))
}
