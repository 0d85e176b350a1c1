//! Our nft table through the `nft` command: read it as a model, replace it atomically, delete it.

use std::io::Write;
use std::process::Command;

use crate::exec::{self, CommandFailed};

use super::model::{self, ModelError, NftModel};
use super::{TABLE_FAMILY, TABLE_NAME};

/// Something went wrong talking to nftables.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("could not list nftables tables")]
    List(#[source] CommandFailed),
    #[error("could not read table {TABLE_FAMILY} {TABLE_NAME}")]
    Read(#[source] CommandFailed),
    #[error("nft printed something unexpected")]
    Parse(#[from] ModelError),
    #[error("nft refused the LocalDNS ruleset")]
    Apply(#[source] CommandFailed),
    #[error("could not delete table {TABLE_FAMILY} {TABLE_NAME}")]
    Delete(#[source] CommandFailed),
    #[error("could not write a temporary nft script")]
    TempFile(#[source] std::io::Error),
}

fn nft() -> Command {
    Command::new("nft")
}

/// Whether our table exists. A failure to list tables is an error, never "absent".
pub fn table_exists() -> Result<bool, NftError> {
    let out = exec::run_stdout(nft().args(["-j", "list", "tables"])).map_err(NftError::List)?;
    Ok(model::tables_include_ours(&out)?)
}

/// Reads our table; `None` when it does not exist.
pub fn read_table() -> Result<Option<NftModel>, NftError> {
    if !table_exists()? {
        return Ok(None);
    }
    let out = exec::run_stdout(nft().args(["-j", "list", "table", TABLE_FAMILY, TABLE_NAME]))
        .map_err(NftError::Read)?;
    Ok(Some(model::from_nft_json(&out)?))
}

/// The rendered script wrapped so that `nft -f` replaces our table in one transaction:
/// declare it (so the delete cannot fail on a fresh host), delete it, then add it again.
pub fn replacing_script(script: &str) -> String {
    format!("table {TABLE_FAMILY} {TABLE_NAME}\ndelete table {TABLE_FAMILY} {TABLE_NAME}\n{script}")
}

fn run_script(args: &[&str], script: &str) -> Result<(), NftError> {
    let mut file = tempfile::Builder::new()
        .prefix("unbounded-localdns-")
        .suffix(".nft")
        .tempfile()
        .map_err(NftError::TempFile)?;
    file.write_all(script.as_bytes()).map_err(NftError::TempFile)?;
    file.flush().map_err(NftError::TempFile)?;
    exec::run(nft().args(args).arg("-f").arg(file.path())).map_err(NftError::Apply)?;
    Ok(())
}

/// Replaces our table with the rendered script, atomically (one `nft -f` transaction).
pub fn replace_table(script: &str) -> Result<(), NftError> {
    run_script(&[], &replacing_script(script))
}

/// Asks nft whether `script` would apply, changing nothing (`nft --check`).
pub fn check_script(script: &str) -> Result<(), NftError> {
    run_script(&["--check"], script)
}

/// Deletes our table. `Ok(false)` when it was already absent.
pub fn delete_table() -> Result<bool, NftError> {
    if !table_exists()? {
        return Ok(false);
    }
    exec::run(nft().args(["delete", "table", TABLE_FAMILY, TABLE_NAME])).map_err(NftError::Delete)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_script_declares_and_deletes_before_the_rendered_text() {
        let text = replacing_script("table ip unbounded_localdns {\n}\n");
        assert!(text.starts_with(
            "table ip unbounded_localdns\ndelete table ip unbounded_localdns\ntable ip unbounded_localdns {"
        ));
    }
}
