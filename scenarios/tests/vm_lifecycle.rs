//! A lab VM's life: it boots as the default node config (`node-configs/localdns.json`) asks,
//! answers commands, reaches the lab's services and powers off. One case, not one per node
//! config: nothing here depends on what the configs differ in (LocalDNS, offline artifacts); the
//! scenarios with a joined node take every config. Reboots (from inside and by QMP reset) are the
//! VM runtime's own test (`harness/tests/vm_lifecycle.rs`) and, of a joined node, the lifecycle
//! scenario's: each is ~1.5 min of TCG time, so they are not repeated here.

use std::net::Ipv4Addr;

use harness::vm::ExitKind;
use scenarios::LabNode;

#[test]
fn vm_boots_answers_commands_reaches_the_lab_and_powers_off() -> anyhow::Result<()> {
    LabNode::run_case(&scenarios::node_config("localdns.json"), lifecycle)
}

fn lifecycle(node: &mut LabNode) -> anyhow::Result<()> {
    let LabNode {
        vm,
        lab,
        node: config,
        ..
    } = node;
    assert_eq!(vm.name(), config.name());

    // Commands: stdout back, a non-zero exit is an error unless allowed.
    assert_eq!(
        vm.run("cat /proc/sys/kernel/random/boot_id")?.trim(),
        vm.boot_id()
    );
    assert!(
        vm.run("exit 3").is_err(),
        "a failing guest command must be an error"
    );
    let out = vm.cmd("echo out; echo err >&2; exit 3").allow_failure().run()?;
    assert_eq!(
        (out.status, out.stdout_text(), out.stderr_text()),
        (ExitKind::Code(3), "out\n".into(), "err\n".into())
    );

    // The guest has its lab address and uses the lab's DNS and artifact servers.
    let nic = &lab.nics()[0];
    let addrs = vm.run("ip -4 -o addr show")?;
    assert!(addrs.contains(&format!("{}/24", nic.ip)), "{addrs}");
    lab.dns()
        .set_a("probe.lab.test", &[Ipv4Addr::new(10, 1, 2, 3)], 5)?;
    assert!(vm.run("getent hosts probe.lab.test")?.starts_with("10.1.2.3"));
    assert!(
        lab.dns().query_count("probe.lab.test")? >= 1,
        "the guest did not ask the lab's DNS server"
    );
    let probe = lab.run_dir().join("probe.txt");
    std::fs::write(&probe, "served by the lab\n")?;
    lab.http().publish("/probe.txt", &probe)?;
    let url = format!("{}/probe.txt", lab.addrs().http_url());
    assert_eq!(vm.run(&format!("curl -sSf {url}"))?, "served by the lab\n");
    assert_eq!(lab.http().requests()[0].path, "/probe.txt");

    // Power off: QEMU exits cleanly.
    let status = vm.power_off()?;
    assert!(status.success(), "QEMU exited with {status} after power-off");
    assert!(!vm.is_running());
    Ok(())
}
