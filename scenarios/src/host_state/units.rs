//! Units and drop-ins as `systemctl show` reports them (on the host or in a machine), and
//! which paths exist on the VM.

use std::collections::BTreeMap;

use anyhow::Context;
use harness::vm::Vm;

/// `systemctl [--machine=<m>] show -p P1 -p P2 ... <unit>` as a map (absent units answer too,
/// with `LoadState=not-found`).
pub fn unit_properties(
    vm: &Vm,
    machine: Option<&str>,
    unit: &str,
    properties: &[&str],
) -> anyhow::Result<BTreeMap<String, String>> {
    let on = machine.map(|m| format!(" --machine={m}")).unwrap_or_default();
    let props: String = properties.iter().map(|p| format!(" -p {p}")).collect();
    let text = vm.run(&format!("systemctl{on} show{props} {unit}"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// The unit's `LoadState` (`loaded`, `not-found`, `masked`, ...).
pub fn load_state(vm: &Vm, machine: Option<&str>, unit: &str) -> anyhow::Result<String> {
    let props = unit_properties(vm, machine, unit, &["LoadState"])?;
    props
        .get("LoadState")
        .cloned()
        .with_context(|| format!("`systemctl show` printed no LoadState for {unit}: {props:?}"))
}

/// The properties that tell whether a unit exists.
const UNIT_PRESENCE: [&str; 4] = ["LoadState", "FragmentPath", "DropInPaths", "ActiveState"];

/// Whether `systemctl show` properties ([`UNIT_PRESENCE`]) describe a unit that exists: one
/// with a unit file or drop-ins, or running, or masked. A slice without any file still loads
/// (`LoadState=loaded`: systemd gives slices defaults), so the load state alone cannot tell.
/// `Some(properties)` for messages when it exists.
pub fn unit_presence(props: &BTreeMap<String, String>) -> Option<String> {
    let get = |k: &str| props.get(k).map(String::as_str).unwrap_or("");
    let exists = !get("FragmentPath").is_empty()
        || !get("DropInPaths").is_empty()
        || !matches!(get("ActiveState"), "inactive" | "")
        || !matches!(get("LoadState"), "not-found" | "loaded");
    exists.then(|| {
        UNIT_PRESENCE
            .iter()
            .map(|k| format!("{k}={}", get(k)))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// [`unit_presence`] of `unit` on the host or in `machine`.
pub fn unit_found(vm: &Vm, machine: Option<&str>, unit: &str) -> anyhow::Result<Option<String>> {
    Ok(unit_presence(&unit_properties(
        vm,
        machine,
        unit,
        &UNIT_PRESENCE,
    )?))
}

/// Which of `paths` exist on the VM (files, directories or links, dangling links included).
pub fn existing_paths(vm: &Vm, paths: &[String]) -> anyhow::Result<Vec<String>> {
    let quoted: Vec<String> = paths.iter().map(|p| format!("'{p}'")).collect();
    let out = vm.run(&format!(
        "for p in {}; do if [ -e \"$p\" ] || [ -L \"$p\" ]; then echo \"$p\"; fi; done",
        quoted.join(" ")
    ))?;
    Ok(out.lines().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_exists_with_a_file_drop_ins_a_running_state_or_a_mask_not_by_load_state_alone() {
        let props = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let bare_slice = props(&[
            ("LoadState", "loaded"),
            ("ActiveState", "inactive"),
            ("FragmentPath", ""),
        ]);
        assert_eq!(unit_presence(&bare_slice), None);
        let absent = props(&[("LoadState", "not-found"), ("ActiveState", "inactive")]);
        assert_eq!(unit_presence(&absent), None);
        for present in [
            props(&[
                ("LoadState", "loaded"),
                ("ActiveState", "inactive"),
                ("FragmentPath", "/etc/systemd/system/x.slice"),
            ]),
            props(&[("LoadState", "loaded"), ("ActiveState", "active")]),
            props(&[
                ("LoadState", "not-found"),
                ("ActiveState", "inactive"),
                ("DropInPaths", "/etc/systemd/system/x.service.d/a.conf"),
            ]),
            props(&[("LoadState", "masked"), ("ActiveState", "inactive")]),
        ] {
            assert!(unit_presence(&present).is_some(), "{present:?}");
        }
    }
}
