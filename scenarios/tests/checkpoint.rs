//! Scenario `checkpoint`: `harness lab up` resumes a node from its joined-node checkpoint
//! (docs/lab.md, "Joined-node checkpoints") and says so, and `harness lab down` takes it all away.
//! What a resumed node is (its clock, address, Lease, DNS, link and table) is checked with the
//! other read checks on one resumed node (`scenarios/tests/resumed_node/checkpoint.rs`).

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

/// How long `harness lab up` gets to resume the node and say the lab runs (TCG, a loaded host).
const LAB_UP_DEADLINE: Duration = Duration::from_secs(600);
/// How long `lab up` may take to return after its lab ran.
const RETURN_DEADLINE: Duration = Duration::from_secs(60);

/// `harness lab up` resumes a node from its checkpoint when one exists for its key, says so,
/// and the Node is Ready in the lab it keeps; `harness lab down` then takes it all away.
#[test]
fn harness_lab_up_resumes_the_node_from_its_checkpoint_and_says_so() -> anyhow::Result<()> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let node_config = harness::repo::root().join("node-configs").join("localdns.json");
    let cache = harness::cache::Cache::open()?;
    let saved = scenarios::resume::ensure_checkpoint(&cache, &node_config)?;
    let binary = harness::deploy::plan::target_dir().join("debug").join("harness");
    ensure!(
        binary.is_file(),
        "the harness binary {} is missing: build it with `cargo build -p harness` (scripts/test.sh does)",
        binary.display()
    );
    // A lab number of its own: 100 + the nextest slot (scenarios use slot + 1).
    let slot: u8 = std::env::var("NEXTEST_TEST_GLOBAL_SLOT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let lab = (100 + slot).to_string();
    let mut up = Command::new(&binary)
        .args(["lab", "up", "--lab", &lab])
        .arg(&node_config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stderr = up.stderr.take().context("lab up's stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("    lab up: {line}");
            seen += &line;
            seen += "\n";
            if line.contains("is running") {
                let _ = tx.send(Ok(seen.clone()));
            }
        }
        let _ = tx.send(Err(seen));
    });
    let seen = match rx.recv_timeout(LAB_UP_DEADLINE) {
        Ok(Ok(seen)) => seen,
        Ok(Err(seen)) => {
            let _ = up.wait();
            anyhow::bail!("`harness lab up --lab {lab}` ended before its lab ran:\n{seen}")
        }
        Err(_) => {
            let _ = up.kill();
            anyhow::bail!(
                "`harness lab up --lab {lab}` did not report a running lab within {LAB_UP_DEADLINE:?}"
            )
        }
    };
    let result = (|| -> anyhow::Result<()> {
        ensure!(
            seen.contains(&format!("from checkpoint {}", saved.dir.display()))
                && seen.contains("resumed from its checkpoint"),
            "`harness lab up` did not say it resumed the node from {}:\n{seen}",
            saved.dir.display()
        );
        ensure!(
            !seen.contains("joining for real"),
            "`harness lab up` joined for real:\n{seen}"
        );
        // A resumed node is described as fully as a joined one: the lab, its cluster, the node.
        for said in [
            ": bridge ",
            "Kind cluster ready: Kubernetes",
            &format!("Node {} is Ready (LocalDNS on", saved.info.deployed.name),
            "machinectl shell kube1",
        ] {
            ensure!(
                seen.contains(said),
                "`harness lab up` resumed without saying {said:?}:\n{seen}"
            );
        }
        // `lab up` returns on its own once the lab runs (like `kind create cluster`), exit 0,
        // and the lab stays up after it.
        let returned = Instant::now() + RETURN_DEADLINE;
        let status = loop {
            if let Some(status) = up.try_wait()? {
                break status;
            }
            ensure!(
                Instant::now() < returned,
                "`harness lab up` still holds the terminal {RETURN_DEADLINE:?} after its lab ran"
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        ensure!(status.success(), "`harness lab up` returned {status}:\n{seen}");
        let ready = agent::exec::run_stdout(Command::new(&binary).args([
            "lab",
            "kubectl",
            "--lab",
            &lab,
            "--",
            "get",
            "node",
            &saved.info.deployed.name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]))?;
        ensure!(
            ready.trim() == "True",
            "Node {} is not Ready in lab {lab}: {ready:?}",
            saved.info.deployed.name
        );
        Ok(())
    })();
    let down = agent::exec::run(Command::new(&binary).args(["lab", "down", "--lab", &lab]));
    if result.is_err() {
        let _ = up.kill();
    }
    let _ = up.wait();
    result?;
    down?;
    Ok(())
}
