//! A small workflow rehearsed end to end in a throwaway repository, with the real git, bash,
//! tar and this machine's Rust and Go: jobs in their needs' order, matrix jobs, caches saved
//! and restored into a new empty HOME, an artifact passed between jobs, Go hidden from a job
//! without a Go step, a failing job failing the rehearsal and skipping what needs it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ci_rehearsal::job_runner::{JobOutcome, JobReport};
use ci_rehearsal::rehearsal::{Options, all_passed, rehearse};

const WORKFLOW: &str = r#"
name: small
defaults:
  run:
    shell: bash
env:
  GREETING: hello
jobs:
  build:
    steps:
      - uses: actions/checkout@v4
      - uses: dtolnay/rust-toolchain@stable
        with:
          components: rustfmt
      - uses: actions/cache@v4
        with:
          path: ~/data
          key: data-${{ runner.os }}-${{ hashFiles('input.txt') }}
          restore-keys: data-${{ runner.os }}-
      - name: no tool from this machine's HOME, Go hidden, Rust from the step
        run: |
          ! command -v go
          ! test -e /usr/local/go/bin/go
          ! command -v cargo-nextest
          cargo --version
          test "$HOME" != /root
      - name: use or fill the cache
        run: |
          if [ -f ~/data/x ]; then echo restored > cache-state; else echo empty > cache-state; fi
          mkdir -p ~/data && echo "$GREETING" > ~/data/x
          cp cache-state out.txt
      - uses: actions/upload-artifact@v4
        with:
          name: out
          path: out.txt
          if-no-files-found: error
  test:
    name: test (${{ matrix.slug }})
    needs: build
    strategy:
      matrix:
        include:
          - slug: a
          - slug: b
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-go@v5
        with:
          go-version: "1"
      - uses: actions/download-artifact@v4
        with:
          name: out
      - env:
          SLUG: ${{ matrix.slug }}
        run: |
          go version
          test -x /usr/local/go/bin/go
          test -f out.txt
          test ! -e ~/data
          echo "$SLUG" >> "$RUNNER_TEMP/seen"
  broken:
    steps:
      - run: exit 3
      - name: after a failure
        if: failure()
        run: echo cleaning up
  after-broken:
    needs: broken
    steps:
      - run: echo never
"#;

fn git(repo: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

fn repository() -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("small");
    std::fs::create_dir_all(repo.join(".github/workflows")).unwrap();
    std::fs::write(repo.join(".github/workflows/ci.yml"), WORKFLOW).unwrap();
    std::fs::write(repo.join("input.txt"), "v1").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "small",
        ],
    );
    let sha = String::from_utf8(
        Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    (dir, repo, sha)
}

fn outcome<'a>(reports: &'a [JobReport], title: &str) -> &'a JobOutcome {
    &reports
        .iter()
        .find(|r| r.title == title)
        .unwrap_or_else(|| panic!("no job {title}: {reports:?}"))
        .outcome
}

fn artifact(store: &Path) -> String {
    let runs: Vec<PathBuf> = std::fs::read_dir(store.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let newest = runs.iter().max().unwrap();
    std::fs::read_to_string(newest.join("artifacts/out/out.txt"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn a_small_workflow_runs_as_a_runner_would_and_its_cache_serves_the_second_rehearsal() {
    let (dir, repo, sha) = repository();
    let store = dir.path().join("store");
    let options = Options {
        workflow: repo.join(".github/workflows/ci.yml"),
        repo,
        sha,
        store: store.clone(),
        jobs: vec!["test".into()],
        matrix: Vec::new(),
        cache_limit_bytes: 1 << 30,
        heartbeat: Duration::from_secs(300),
    };
    let first = rehearse(&options).unwrap();
    let titles: Vec<&str> = first.iter().map(|r| r.title.as_str()).collect();
    assert_eq!(titles, ["build", "test (a)", "test (b)"]);
    assert!(all_passed(&first), "{first:#?}");
    assert_eq!(artifact(&store), "empty");
    let seen = std::fs::read_to_string(store.join("runner/temp/seen")).unwrap();
    assert_eq!(seen, "b\n", "each job starts with an empty temp directory");

    // Second rehearsal: the cache the build job saved comes back into its new, empty HOME.
    let second = rehearse(&options).unwrap();
    assert!(all_passed(&second), "{second:#?}");
    assert_eq!(artifact(&store), "restored");

    let failing = rehearse(&Options {
        jobs: vec!["after-broken".into()],
        ..options
    })
    .unwrap();
    assert!(!all_passed(&failing));
    assert!(
        matches!(outcome(&failing, "broken"), JobOutcome::Failed { step, why } if step == "Run exit 3" && why.contains("exit status: 3")),
        "{failing:#?}"
    );
    assert!(
        matches!(outcome(&failing, "after-broken"), JobOutcome::Skipped { why } if why.contains("`broken`"))
    );
}
