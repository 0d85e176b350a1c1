//! Both LocalDNS listeners asked again and again while something happens on the node: a loop in
//! the VM (a transient unit, so it outlives the command that starts it) asks each listener the
//! health name with `dig`, as a stub resolver does (1 s per try, 2 tries), until it is told to
//! stop; every lookup that got no NOERROR is logged with its time.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use harness::vm::Vm;

use crate::dns::{CLUSTER_LISTENER, NODE_LISTENER};

const UNIT: &str = "scenario-listener-probe";
const DIR: &str = "/run/scenario-listener-probe";

/// A running probe loop.
pub struct ListenerProbe {
    started: Instant,
}

/// What the loop saw: how many lookups, and a line per one that failed.
#[derive(Debug)]
pub struct Probed {
    pub lookups: u64,
    pub failures: Vec<String>,
    pub took: Duration,
}

impl ListenerProbe {
    /// Starts the loop on `vm` and waits until its first round of lookups answered.
    pub fn start(vm: &Vm) -> anyhow::Result<ListenerProbe> {
        let health = agent::corefile::HEALTH_NAME;
        let script = format!(
            "n=0\n\
             while [ ! -e {DIR}/stop ]; do\n\
             \tfor l in {NODE_LISTENER} {CLUSTER_LISTENER}; do\n\
             \t\tn=$((n+1))\n\
             \t\tdig +time=1 +tries=2 @$l {health} +noall +comments 2>&1 | grep -q 'status: NOERROR' \
             || echo \"$(date +%T.%N) no answer from $l\" >> {DIR}/failures\n\
             \tdone\n\
             \techo $n > {DIR}/lookups.new && mv {DIR}/lookups.new {DIR}/lookups\n\
             done\n\
             echo done > {DIR}/finished\n"
        );
        vm.run(&format!(
            "systemctl stop {UNIT} 2>/dev/null; systemctl reset-failed {UNIT} 2>/dev/null; \
             rm -rf {DIR} && mkdir -p {DIR} && : > {DIR}/failures && cat > {DIR}/loop.sh <<'EOF'\n{script}EOF\n\
             systemd-run --quiet --unit={UNIT} sh {DIR}/loop.sh"
        ))?;
        let probe = ListenerProbe {
            started: Instant::now(),
        };
        probe.wait_for(vm, |lookups, _| lookups >= 2, "its first lookups")?;
        Ok(probe)
    }

    /// Stops the loop and returns what it saw.
    pub fn finish(self, vm: &Vm) -> anyhow::Result<Probed> {
        vm.run(&format!("touch {DIR}/stop"))?;
        self.wait_for(vm, |_, finished| finished, "the loop to stop")?;
        let lookups = read_lookups(vm)?;
        let failures = vm
            .run(&format!("cat {DIR}/failures"))?
            .lines()
            .map(str::to_string)
            .collect();
        vm.run(&format!("rm -rf {DIR}"))?;
        Ok(Probed {
            lookups,
            failures,
            took: self.started.elapsed(),
        })
    }

    fn wait_for(&self, vm: &Vm, done: impl Fn(u64, bool) -> bool, what: &str) -> anyhow::Result<()> {
        let _waiting = harness::phase_clock::enter(harness::phase_clock::Phase::Waiting);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let finished = vm.run_unchecked(&format!("test -e {DIR}/finished"))?.success();
            if done(read_lookups(vm)?, finished) {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "the listener probe ({UNIT} in the VM) did not reach {what} within 60 s: {}",
                vm.run_unchecked(&format!("systemctl status {UNIT} --no-pager; cat {DIR}/failures"))?
                    .stdout_text()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

fn read_lookups(vm: &Vm) -> anyhow::Result<u64> {
    let text = vm.run(&format!("cat {DIR}/lookups 2>/dev/null || echo 0"))?;
    text.trim()
        .parse()
        .with_context(|| format!("{DIR}/lookups holds {text:?}"))
}

impl Probed {
    /// Fails naming every lookup that got no answer, or when there were none.
    pub fn ensure_every_lookup_answered(&self, during: &str) -> anyhow::Result<()> {
        ensure!(self.lookups > 0, "no lookup was made during {during}");
        ensure!(
            self.failures.is_empty(),
            "{} of {} lookups of the listeners got no answer during {during}:\n{}",
            self.failures.len(),
            self.lookups,
            self.failures.join("\n")
        );
        Ok(())
    }
}
