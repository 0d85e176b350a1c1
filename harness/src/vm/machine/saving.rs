//! Saving a running [`Vm`]: pause it and write its state (QMP `stop` + `migrate` to
//! `exec:zstd`: QEMU 7.2 has no `file:` migration) — the image's saved state
//! ([`crate::vm::state`], taken by booting the image once) and a joined node's checkpoint
//! ([`crate::checkpoint`], a running VM saved with its disk).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Vm;
use crate::cache::Cache;
use crate::progress::Step;
use crate::vm::accel::Accel;
use crate::vm::deadline::{Attempt, WaitTimeout};
use crate::vm::error::VmError;
use crate::vm::overlay;
use crate::vm::qmp;
use crate::vm::resume;
use crate::vm::spec::VmSpec;
use crate::vm::state::{self, CONSOLE, DISK, STREAM, SavedState, StateError, StateInputs, template_spec};

impl Vm {
    /// Saves this running VM into `dir` and stops it: the 9p share unmounted (QEMU cannot
    /// migrate while it is mounted), the guest paused and its state written to
    /// `dir/`[`state::STREAM`], its disk (this VM's overlay) copied to `dir/`[`state::DISK`] and
    /// its console log to `dir/`[`state::CONSOLE`]. Returns how long the save took.
    pub fn save_into(mut self, dir: &Path) -> Result<Duration, VmError> {
        let started = Instant::now();
        let name = self.spec.name.clone();
        let io_err = |what: String| {
            let vm = name.clone();
            move |source| VmError::Io { vm, what, source }
        };
        self.cmd("if mountpoint -q /mnt/lab; then umount /mnt/lab; fi; sync")
            .run()?;
        let stream = dir.join(state::STREAM);
        let quoted = stream.display().to_string();
        if quoted.contains('\'') {
            return Err(io_err(format!("saving into {}", dir.display()))(
                std::io::Error::other("the path contains a quote"),
            ));
        }
        self.save(&format!("exec:zstd -q -1 -c > '{quoted}'"))?;
        std::fs::copy(self.run.overlay(), dir.join(state::DISK))
            .map_err(io_err(format!("copying the disk into {}", dir.display())))?;
        let _ = std::fs::copy(self.run.console(), dir.join(state::CONSOLE));
        self.shutdown()?;
        Ok(started.elapsed())
    }

    /// Pauses the guest and saves its state to the migration `uri` (e.g. `exec:zstd -c > f`),
    /// then quits QEMU. Used to take a saved state ([`super::state`]).
    pub(crate) fn save(&mut self, uri: &str) -> Result<(), VmError> {
        self.qmp(&qmp::qmp::stop {})?;
        self.qmp(&resume::migrate(uri))?;
        crate::vm::deadline::wait_until(
            self.name(),
            self.deadlines.boot,
            "the migration to finish",
            || {
                if let Some(err) = self.crashed("saving the guest state") {
                    return Attempt::Abort(err);
                }
                match qmp::execute(&self.run.qmp(), &resume::QueryMigrate {}, self.deadlines.agent) {
                    Ok(info) if info["status"] == "completed" => Attempt::Ready(()),
                    Ok(info) if info["status"] == "failed" || info["status"] == "cancelled" => {
                        Attempt::Abort(VmError::Io {
                            vm: self.name().to_string(),
                            what: format!("saving the guest state to {uri}"),
                            source: std::io::Error::other(format!("migration {info}")),
                        })
                    }
                    Ok(info) => Attempt::Retry(format!("migration status {}", info["status"])),
                    Err(err) => Attempt::Retry(err.to_string()),
                }
            },
        )
        .map_err(|e| self.with_console(e))?;
        self.exit_expected = true;
        let _ = qmp::execute(&self.run.qmp(), &qmp::qmp::quit {}, self.deadlines.agent);
        self.process.wait_exit(self.deadlines.power_off).ok_or_else(|| {
            self.timeout(WaitTimeout {
                subject: format!("VM {}", self.name()),
                what: "QEMU to quit after saving".into(),
                waited: self.deadlines.power_off,
                last_failure: "QEMU is still running".into(),
            })
        })?;
        Ok(())
    }

    /// The image's saved state for `spec` under `accel`: found in the cache, or built now by
    /// booting the image once (shown as progress; other processes wait for the same build).
    pub fn ensure_saved_state(cache: &Cache, spec: &VmSpec, accel: Accel) -> Result<SavedState, StateError> {
        let inputs = StateInputs::for_spec(spec, accel)?;
        let key = inputs.key().hex();
        state::prune(cache);
        state::ensure_with(cache, spec, &inputs, |out, log| {
            Ok(take_template_state(spec, accel, &key, out, log)?)
        })
    }
}

/// Boots the image once into `out`, waits for readiness, lets it settle, and saves it.
fn take_template_state(
    spec: &VmSpec,
    accel: Accel,
    key: &str,
    out: &Path,
    log: &Path,
) -> Result<(Duration, Duration), VmError> {
    let step = Step::start(format!("saved VM state {key}: booting the image once ({accel})"));
    let mut template = template_spec(spec, &format!("vmstate-{key}"));
    template.accel = Some(accel);
    let name = template.name.clone();
    let io_err = |what: String| {
        let vm = name.clone();
        move |source| VmError::Io { vm, what, source }
    };
    let disk = out.join(DISK);
    overlay::create(&spec.image.disk, &disk).map_err(|source| VmError::Overlay {
        vm: name.clone(),
        source,
    })?;
    let share = out.join("share");
    fs::create_dir_all(&share).map_err(io_err(format!("creating {}", share.display())))?;
    let started = Instant::now();
    let mut vm = Vm::boot_template(template, &disk, &share)?;
    let boot = started.elapsed();
    step.message(&format!(
        "booted in {:.1}s; letting it settle",
        boot.as_secs_f64()
    ));
    // Let the boot finish its jobs (so every clone does not redo them), then drop what must
    // not be in the state: the 9p mount (QEMU refuses to migrate while it is mounted).
    let settle = vm
        .cmd("timeout 60 systemctl is-system-running --wait; umount /mnt/lab 2>/dev/null; sync; true")
        .timeout(vm.deadlines().boot)
        .run()?;
    std::fs::write(log, settle.stdout_text()).map_err(io_err(format!("writing {}", log.display())))?;
    step.message("saving (stop + migrate)");
    let stream = out.join(STREAM);
    let quoted = state::shell_quote(&stream)
        .map_err(|why| io_err(format!("saving into {}", out.display()))(std::io::Error::other(why)))?;
    let started = Instant::now();
    vm.save(&format!("exec:zstd -q -1 -c > {quoted}"))?;
    let save = started.elapsed();
    let _ = fs::copy(vm.run_dir().console(), out.join(CONSOLE));
    vm.shutdown()?;
    fs::remove_dir(&share).map_err(io_err(format!("removing {}", share.display())))?;
    for file in [&disk, &stream] {
        fs::set_permissions(file, fs::Permissions::from_mode(0o444))
            .map_err(io_err(format!("making {} read-only", file.display())))?;
    }
    let size = fs::metadata(&stream)
        .map_err(io_err(format!("reading {}", stream.display())))?
        .len();
    step.message(&format!("saved {} MB in {:.1}s", size >> 20, save.as_secs_f64()));
    step.finish();
    Ok((boot, save))
}
