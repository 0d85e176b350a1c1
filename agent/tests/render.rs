//! Expected-output tests: each `tests/render/<case>.json` (config, host facts,
//! machine) is rendered and compared with `<case>.expected/` (every regular
//! file, as if it were `/`) and `<case>.listing` (every path with its mode,
//! every link with its target).
//!
//! Regenerate after an intended change, then review the diff:
//! `UPDATE_EXPECTED=1 cargo test -p agent --test render`

mod render_support;

use std::path::{Path, PathBuf};

use agent::render::Rendered;
use render_support::{check_expected_outputs, load_case};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render")
}

fn render_case(path: &Path) -> Rendered {
    agent::render::render(&load_case(path).goal).unwrap_or_else(|e| panic!("{}: render: {e}", path.display()))
}

#[test]
fn every_case_renders_exactly_its_expected_files() {
    check_expected_outputs(&cases_dir(), 6, "render", render_case);
}

#[test]
fn custom_limits_render_a_fractional_cpu_quota() {
    let r = render_case(&cases_dir().join("custom-listeners-limits.json"));
    let slice = r
        .file("/var/lib/machines/kube2/etc/systemd/system/localdns.slice")
        .expect("slice rendered");
    let text = String::from_utf8_lossy(&slice.contents);
    assert!(
        text.contains("\nCPUQuota=200.8%\n") && text.contains("\nMemoryMax=256M\n"),
        "{text}"
    );
}

#[test]
fn rendering_is_deterministic_byte_for_byte() {
    for case in ["defaults", "resolved-host", "custom-template"] {
        let path = cases_dir().join(format!("{case}.json"));
        assert_eq!(render_case(&path), render_case(&path), "{case}");
    }
}
