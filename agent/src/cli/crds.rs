//! `unbounded-agent crds`: prints the Machina CRDs as multi-document YAML, or writes one file per
//! CRD into a directory (`--out deploy/crd` regenerates the checked-in files).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::machina::crds;

#[derive(clap::Args)]
pub struct Args {
    /// Write `<plural>.<group>.yaml` per CRD into this directory (created when missing) instead of
    /// printing them. Files whose text is already right are left untouched.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(dir) = args.out else {
        print!("{}", crds::multi_document()?);
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for file in crds::files()? {
        let path = dir.join(&file.file_name);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(file.text.as_str()) {
            println!("unchanged {}", path.display());
            continue;
        }
        std::fs::write(&path, &file.text).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
