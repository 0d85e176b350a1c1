//! What the VM tests share: the host image they boot and the lab name of VMs started without a
//! lab.

use harness::vm::BootImage;

/// The host image (`LAB_HOST_IMAGE_DIR` may name a built image directory to use instead of
/// the cache's current one), or a failure naming the command that builds it.
pub fn image() -> BootImage {
    if let Some(dir) = std::env::var_os("LAB_HOST_IMAGE_DIR") {
        let image = harness::images::host::load(std::path::Path::new(&dir))
            .unwrap_or_else(|e| panic!("{}", agent::error_chain::Chain(&e)));
        return BootImage::from(&image);
    }
    let cache = harness::cache::Cache::open().expect("opening the lab cache");
    let image = harness::images::host::require(&cache)
        .unwrap_or_else(|e| panic!("{}", agent::error_chain::Chain(&e)));
    BootImage::from(&image)
}

/// The lab name of VMs without a lab, from nextest's slot (or the pid outside nextest).
#[allow(dead_code)] // not every test binary boots a VM without a lab
pub fn vm_lab() -> String {
    match std::env::var("NEXTEST_TEST_GLOBAL_SLOT") {
        Ok(slot) => format!("vmtest-{slot}"),
        Err(_) => format!("vmtest-p{}", std::process::id()),
    }
}
