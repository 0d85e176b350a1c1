//! `harness images prune` on a real cache directory (a tempdir as `$LAB_CACHE_DIR`): current
//! entries kept, old keys removed with their logs and locks, `--dry-run` removing nothing,
//! locked (in-progress) entries and VM overlays' backing files kept, unknown paths left alone,
//! and no prune while a lab runs. No VMs.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harness::cache::{Cache, RecipeKey};
use harness::images::prune::{self, CurrentKeys, InUse, KINDS, Verdict};
use harness::lab::owner::Owner;

/// A cache in a tempdir with `$LAB_RUN_DIR` and `$LAB_STATE_DIR` beside it.
struct Fixture {
    dir: tempfile::TempDir,
    cache: Cache,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path().join("cache")).unwrap();
        for sub in ["run", "state"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        Fixture { dir, cache }
    }

    /// A built entry of `kind` with a `size`-byte file, its log and its lock, as
    /// `Cache::get_or_build` leaves them; returns its key.
    fn entry(&self, kind: &str, recipe: &str, size: usize) -> String {
        let key = RecipeKey::new(recipe);
        self.cache
            .get_or_build(kind, &key, |out, log| {
                fs::write(out.join("data"), vec![7u8; size])?;
                fs::write(log, "built\n")?;
                Ok(())
            })
            .unwrap();
        key.hex()
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.cache.root().join(relative)
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Every known kind's current keys: `current` for the kinds it names, none for the others.
    fn current(current: &[(&str, &str)]) -> CurrentKeys {
        let mut keys = CurrentKeys::default();
        for kind in KINDS {
            keys.set(
                kind,
                current
                    .iter()
                    .filter(|(k, _)| *k == kind)
                    .map(|(_, key)| key.to_string()),
            );
        }
        keys
    }

    fn plan(&self, current: &CurrentKeys) -> prune::Plan {
        let in_use = InUse::scan(self.cache.root(), &self.state_dir());
        prune::plan(&self.cache, current, &in_use).unwrap()
    }

    /// Runs the real `harness` binary with this cache, run and state directories.
    fn harness(&self, args: &[&str]) -> Output {
        let output = Command::new(agent::test_binary!("harness"))
            .args(args)
            .env("LAB_CACHE_DIR", self.cache.root())
            .env("LAB_RUN_DIR", self.dir.path().join("run"))
            .env("LAB_STATE_DIR", self.state_dir())
            .output()
            .unwrap();
        eprintln!(
            "harness {args:?}: {}\nstdout:\n{}\nstderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

fn verdict<'a>(plan: &'a prune::Plan, name: &str) -> &'a Verdict {
    &plan
        .item(name)
        .unwrap_or_else(|| panic!("{name} is not in the plan: {:#?}", plan.items))
        .verdict
}

fn assert_kept(plan: &prune::Plan, name: &str, why_contains: &str) {
    match verdict(plan, name) {
        Verdict::Keep(why) if why.contains(why_contains) => {}
        other => panic!("expected {name} kept ({why_contains}), saw {other:?}"),
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn current_entries_are_kept_and_an_old_key_is_removed_with_its_log_and_lock() {
    let f = Fixture::new();
    let current = f.entry("host-image", "host-new", 100_000);
    let old = f.entry("host-image", "host-old", 300_000);
    let coredns = f.entry("coredns", "coredns-now", 10);
    let plan = f.plan(&Fixture::current(&[
        ("host-image", &current),
        ("coredns", &coredns),
    ]));

    assert_kept(&plan, &format!("host-image/{current}"), "current");
    assert_kept(&plan, &format!("coredns/{coredns}"), "current");
    match verdict(&plan, &format!("host-image/{old}")) {
        Verdict::Remove(why) => assert!(why.contains(&current), "the reason names the current key: {why}"),
        other => panic!("expected the old host image removed, saw {other:?}"),
    }
    assert_eq!(plan.removals().count(), 1, "{:#?}", plan.items);
    assert!(
        (300_000..400_000).contains(&plan.bytes_freed),
        "freeing the old 300 kB entry frees about that much, the plan says {}",
        plan.bytes_freed
    );

    let applied = prune::apply(&plan).unwrap();
    assert_eq!(applied.removed, [format!("host-image/{old}")]);
    assert_eq!(applied.bytes_freed, plan.bytes_freed);
    for gone in [old.clone(), format!("{old}.log"), format!("{old}.lock")] {
        assert!(
            !f.path(&format!("host-image/{gone}")).exists(),
            "{gone} is still there"
        );
    }
    for kept in [
        current.clone(),
        format!("{current}.log"),
        format!("{current}.lock"),
    ] {
        assert!(
            f.path(&format!("host-image/{kept}")).exists(),
            "{kept} was removed"
        );
    }
    assert!(f.path(&format!("coredns/{coredns}/data")).is_file());
    let leftovers: Vec<_> = fs::read_dir(f.path("host-image"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "hidden leftovers after the prune: {leftovers:?}"
    );
}

#[test]
fn dry_run_prints_what_would_go_and_removes_nothing_then_prune_removes_it() {
    let f = Fixture::new();
    let old = f.entry("machine-rootfs", "an-old-rootfs-recipe", 200_000);
    let dry = f.harness(&["images", "prune", "--dry-run"]);
    assert!(dry.status.success());
    let text = stdout(&dry);
    let line = text
        .lines()
        .find(|l| l.contains(&format!("machine-rootfs/{old}")))
        .unwrap_or_else(|| panic!("no line for the old entry in:\n{text}"));
    assert!(line.starts_with("would remove"), "{line}");
    assert!(line.contains("KiB"), "the line shows the size: {line}");
    assert!(text.contains("dry run: would remove 1 and free"), "{text}");
    assert!(
        f.path(&format!("machine-rootfs/{old}/data")).is_file(),
        "--dry-run removed the entry"
    );
    assert!(
        f.path(&format!("machine-rootfs/{old}.lock")).is_file(),
        "--dry-run removed the lock"
    );

    let real = f.harness(&["images", "prune"]);
    assert!(real.status.success());
    let text = stdout(&real);
    assert!(
        text.contains(&format!("remove        machine-rootfs/{old}")),
        "{text}"
    );
    assert!(text.contains("removed 1 and freed"), "{text}");
    assert!(!f.path(&format!("machine-rootfs/{old}")).exists());
}

#[test]
fn a_locked_entry_and_a_build_in_progress_are_kept_a_dead_partial_build_is_removed() {
    let f = Fixture::new();
    let locked = f.entry("kubernetes", "being-rebuilt", 10);
    let lock = File::create(f.path(&format!("kubernetes/{locked}.lock"))).unwrap();
    lock.lock().unwrap();

    let building = RecipeKey::new("in-progress").hex();
    let building_tmp = f.path(&format!("kubernetes/.tmp-{building}-4242"));
    fs::create_dir_all(&building_tmp).unwrap();
    fs::write(building_tmp.join("half"), "x").unwrap();
    let building_lock = File::create(f.path(&format!("kubernetes/{building}.lock"))).unwrap();
    building_lock.lock().unwrap();

    let dead = RecipeKey::new("died").hex();
    let dead_tmp = f.path(&format!("kubernetes/.tmp-{dead}-4243"));
    fs::create_dir_all(&dead_tmp).unwrap();
    fs::write(dead_tmp.join("half"), "x").unwrap();

    let plan = f.plan(&Fixture::current(&[]));
    assert_kept(&plan, &format!("kubernetes/{locked}"), "locked");
    assert_kept(
        &plan,
        &format!("kubernetes/.tmp-{building}-4242"),
        "a build in progress",
    );
    assert!(
        matches!(
            verdict(&plan, &format!("kubernetes/.tmp-{dead}-4243")),
            Verdict::Remove(_)
        ),
        "{:#?}",
        plan.items
    );
    let applied = prune::apply(&plan).unwrap();
    assert!(
        f.path(&format!("kubernetes/{locked}/data")).is_file(),
        "the locked entry was removed"
    );
    assert!(
        building_tmp.join("half").is_file(),
        "the build in progress was removed"
    );
    assert!(!dead_tmp.exists(), "the dead partial build is still there");
    assert_eq!(applied.removed, [format!("kubernetes/.tmp-{dead}-4243")]);

    drop(lock);
    let plan = f.plan(&Fixture::current(&[]));
    assert!(
        matches!(
            verdict(&plan, &format!("kubernetes/{locked}")),
            Verdict::Remove(_)
        ),
        "once its lock is free the old entry goes: {:#?}",
        plan.items
    );
}

#[test]
fn the_lock_taken_after_the_plan_is_respected() {
    let f = Fixture::new();
    let old = f.entry("oci-images", "old-images", 10);
    let plan = f.plan(&Fixture::current(&[]));
    assert!(matches!(
        verdict(&plan, &format!("oci-images/{old}")),
        Verdict::Remove(_)
    ));
    let lock = File::create(f.path(&format!("oci-images/{old}.lock"))).unwrap();
    lock.lock().unwrap();
    let applied = prune::apply(&plan).unwrap();
    assert!(applied.removed.is_empty(), "{applied:?}");
    assert_eq!(applied.skipped.len(), 1, "{applied:?}");
    assert!(f.path(&format!("oci-images/{old}/data")).is_file());
}

#[test]
fn an_unknown_directory_in_the_cache_is_left_alone_and_reported() {
    let f = Fixture::new();
    fs::create_dir_all(f.path("tools/bin")).unwrap();
    fs::write(f.path("tools/bin/actionlint"), "#!/bin/sh\n").unwrap();
    fs::create_dir_all(f.path("host-image/notes")).unwrap();
    fs::write(f.path("stray-file"), "x").unwrap();
    let old = f.entry("host-image", "old", 10);

    let plan = f.plan(&Fixture::current(&[]));
    for name in ["tools/", "host-image/notes", "stray-file"] {
        assert!(
            matches!(verdict(&plan, name), Verdict::LeftAlone(_)),
            "{name}: {:?}",
            verdict(&plan, name)
        );
    }
    let output = f.harness(&["images", "prune"]);
    assert!(output.status.success());
    let text = stdout(&output);
    for name in ["tools/", "host-image/notes", "stray-file"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("left alone") && l.contains(name)),
            "{name} is not reported as left alone in:\n{text}"
        );
    }
    assert!(f.path("tools/bin/actionlint").is_file());
    assert!(f.path("host-image/notes").is_dir());
    assert!(f.path("stray-file").is_file());
    assert!(
        !f.path(&format!("host-image/{old}")).exists(),
        "the old entry beside them is removed"
    );
}

#[test]
fn a_kind_whose_current_key_is_unknown_keeps_every_entry() {
    let f = Fixture::new();
    let entry = f.entry("vm-state", "some-state", 10);
    let mut current = Fixture::current(&[]);
    current.set_unknown("vm-state", "QEMU is not installed");
    let plan = f.plan(&current);
    assert_kept(&plan, &format!("vm-state/{entry}"), "QEMU is not installed");
}

/// `qemu-img create` (real): a qcow2 at `path`, backed by `base` when given.
fn qcow2(path: &Path, base: Option<&Path>) {
    let mut command = Command::new("qemu-img");
    command.args(["create", "-q", "-f", "qcow2"]);
    if let Some(base) = base {
        command.args(["-F", "qcow2", "-b"]).arg(base);
    }
    command.arg(path).arg("16M");
    agent::exec::run(&mut command).unwrap_or_else(|e| {
        panic!("{e}\nqemu-img is missing? `apt-get install qemu-utils` (scripts/setup.sh installs it)")
    });
}

#[test]
fn old_entries_backing_a_vm_overlay_or_a_kept_state_are_kept() {
    let f = Fixture::new();
    // host A <- overlay of a VM in $LAB_STATE_DIR; host B <- a current saved state's booted.qcow2.
    let host_a = f.entry("host-image", "host-a", 10);
    let host_b = f.entry("host-image", "host-b", 10);
    let host_c = f.entry("host-image", "host-c", 10);
    let state = f.entry("vm-state", "state-now", 10);
    for key in [&host_a, &host_b, &host_c] {
        qcow2(&f.path(&format!("host-image/{key}/disk.qcow2")), None);
    }
    let booted = f.path(&format!("vm-state/{state}/booted.qcow2"));
    qcow2(&booted, Some(&f.path(&format!("host-image/{host_b}/disk.qcow2"))));
    let overlay = f.state_dir().join("lab-9/node.qcow2");
    fs::create_dir_all(overlay.parent().unwrap()).unwrap();
    qcow2(
        &overlay,
        Some(&f.path(&format!("host-image/{host_a}/disk.qcow2"))),
    );

    let plan = f.plan(&Fixture::current(&[("vm-state", &state)]));
    assert_kept(
        &plan,
        &format!("host-image/{host_a}"),
        &overlay.display().to_string(),
    );
    assert_kept(
        &plan,
        &format!("host-image/{host_b}"),
        &booted.display().to_string(),
    );
    assert!(
        matches!(
            verdict(&plan, &format!("host-image/{host_c}")),
            Verdict::Remove(_)
        ),
        "the image nothing is backed by goes: {:#?}",
        plan.items
    );
}

#[test]
fn prune_refuses_while_a_lab_runs_and_names_it_but_dry_run_still_shows_the_plan() {
    let f = Fixture::new();
    let old = f.entry("coredns", "old-coredns", 10);
    let me = Owner::me();
    let lab = f.dir.path().join("run/lab-7");
    fs::create_dir_all(&lab).unwrap();
    fs::write(lab.join("owner.pid"), format!("{} {}\n", me.pid, me.start_time)).unwrap();

    let refused = f.harness(&["images", "prune"]);
    assert!(!refused.status.success(), "prune ran while lab-7 runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("lab-7") && stderr.contains("--dry-run"),
        "{stderr}"
    );
    assert!(
        f.path(&format!("coredns/{old}/data")).is_file(),
        "the refused prune removed something"
    );

    let dry = f.harness(&["images", "prune", "--dry-run"]);
    assert!(dry.status.success());
    let text = stdout(&dry);
    assert!(text.contains(&format!("would remove  coredns/{old}")), "{text}");
    assert!(
        text.contains("lab-7"),
        "the dry run says a real prune would refuse: {text}"
    );
}

#[test]
fn saved_states_of_the_current_host_image_are_current_in_any_machine_profile() {
    use harness::images::host;
    use harness::vm::state::{self, StateInfo, StateInputs};
    use harness::vm::{Accel, BootImage, VmSpec};

    let f = Fixture::new();
    // A host image entry at the current key: its image.json and small stand-in files (the real
    // image is 324 MB; only the files' identities enter a saved state's key).
    let host_dir = f.path(&format!("host-image/{}", host::key().unwrap().hex()));
    fs::create_dir_all(&host_dir).unwrap();
    for file in [
        "disk.qcow2",
        "vmlinuz",
        "initrd.img",
        "kernel-config",
        "packages.txt",
    ] {
        fs::write(host_dir.join(file), file).unwrap();
    }
    let image_json = serde_json::json!({
        "kind": "host-image", "key": "k", "suite": "trixie", "mirror": "m", "source_date_epoch": "0",
        "kernel_version": "6", "disk": "disk.qcow2", "disk_format": "qcow2", "root_device": "/dev/vda",
        "kernel": "vmlinuz", "initrd": "initrd.img", "kernel_config": "kernel-config",
        "packages": "packages.txt", "has_9p": true
    });
    fs::write(host_dir.join("image.json"), image_json.to_string()).unwrap();
    let image = host::load(&host_dir).unwrap();
    let spec = VmSpec::new("images", "build", BootImage::from(&image));
    let inputs = StateInputs::for_spec(&spec, Accel::from_env().unwrap()).unwrap();

    let saved = |inputs: &StateInputs| {
        let key = inputs.key().hex();
        let dir = f.path(&format!("vm-state/{key}"));
        fs::create_dir_all(&dir).unwrap();
        let info = StateInfo {
            key: key.clone(),
            inputs: inputs.clone(),
            base_disk: image.disk.clone(),
            boot_secs: 1.0,
            save_secs: 1.0,
            stream_bytes: 1,
            saved_at: 0,
        };
        fs::write(dir.join(state::INFO), serde_json::to_string(&info).unwrap()).unwrap();
        key
    };
    let default_profile = saved(&inputs);
    let mut more_memory = inputs.clone();
    more_memory.0.insert("qemu-args".into(), "... -m 4096 ...".into());
    let more_memory = saved(&more_memory);
    let mut older_image = inputs.clone();
    older_image
        .0
        .insert("disk".into(), "/old/disk.qcow2 size=1".into());
    let older_image = saved(&older_image);

    let current = CurrentKeys::of_recipes(&f.cache);
    let states = current.of(state::KIND).unwrap().as_ref().unwrap();
    assert!(states.contains(&default_profile), "{states:?}");
    assert!(states.contains(&more_memory), "{states:?}");
    assert!(
        !states.contains(&older_image),
        "a state of another image is not current: {states:?}"
    );
    let plan = prune::plan(&f.cache, &current, &InUse::new(f.cache.root())).unwrap();
    assert!(matches!(
        verdict(&plan, &format!("vm-state/{older_image}")),
        Verdict::Remove(_)
    ));
    assert_kept(&plan, &format!("vm-state/{more_memory}"), "current");
}
