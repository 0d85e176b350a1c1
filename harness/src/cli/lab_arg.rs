//! `--lab`, the same on every `harness` subcommand that works on a lab: which lab, by number
//! or name, default lab 0 (the one `harness lab up` keeps), also from `$LAB_NAME`.

use crate::addresses::{INTERACTIVE_LAB, MAX_LAB};
use anyhow::bail;

/// The `--lab` option; flatten it into a subcommand with `#[command(flatten)]`.
#[derive(clap::Args, Clone, Debug)]
pub struct LabArg {
    /// The lab: its number n or its name, `lab-<n>` as `harness lab list` shows it (a test's
    /// VMs may live in a lab of another name, e.g. `vmtest-3`); default 0, the lab
    /// `harness lab up` keeps.
    #[arg(long = "lab", env = "LAB_NAME", value_name = "LAB", default_value = "0", value_parser = parse)]
    pub lab: Lab,
}

/// A lab named on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lab {
    /// `n` or `lab-<n>`: the numbered lab `lab-<n>`.
    Number(u8),
    /// Any other name of a run directory under `$LAB_RUN_DIR` (labs the tests make).
    Name(String),
}

impl Lab {
    /// The lab's name: its namespace and run directory (`lab-<n>` for a number).
    pub fn name(&self) -> String {
        match self {
            Lab::Number(n) => format!("lab-{n}"),
            Lab::Name(name) => name.clone(),
        }
    }

    /// The lab's number, for the commands that start, stop or talk to a numbered lab.
    pub fn number(&self) -> anyhow::Result<u8> {
        match self {
            Lab::Number(n) => Ok(*n),
            Lab::Name(name) => bail!(
                "--lab {name}: this command works on the numbered labs only \
                 (0..={MAX_LAB} or lab-<n>; `harness lab list` shows them)"
            ),
        }
    }
}

impl LabArg {
    /// See [`Lab::name`].
    pub fn name(&self) -> String {
        self.lab.name()
    }

    /// See [`Lab::number`].
    pub fn number(&self) -> anyhow::Result<u8> {
        self.lab.number()
    }
}

fn parse(s: &str) -> Result<Lab, String> {
    let number = s.strip_prefix("lab-").unwrap_or(s);
    if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
        return match number.parse::<u8>() {
            Ok(n) if n <= MAX_LAB => Ok(Lab::Number(n)),
            _ => Err(format!("lab number {number} is out of range 0..={MAX_LAB}")),
        };
    }
    let valid = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid {
        Ok(Lab::Name(s.to_owned()))
    } else {
        Err(format!(
            "{s:?} is not a lab: give a number ({INTERACTIVE_LAB}..={MAX_LAB}) or a lab name \
             (letters, digits, `-`, `_`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        at: LabArg,
    }

    fn lab(args: &[&str]) -> Result<Lab, String> {
        Cli::try_parse_from(std::iter::once("harness").chain(args.iter().copied()))
            .map(|c| c.at.lab)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_number_and_its_name_are_the_same_lab() {
        assert_eq!(lab(&["--lab", "3"]), Ok(Lab::Number(3)));
        assert_eq!(lab(&["--lab", "lab-3"]), Ok(Lab::Number(3)));
        assert_eq!(Lab::Number(3).name(), "lab-3");
    }

    #[test]
    fn other_names_are_kept_for_the_vm_commands_but_refused_where_a_number_is_needed() {
        let other = lab(&["--lab", "vmtest-2"]).unwrap();
        assert_eq!(other, Lab::Name("vmtest-2".into()));
        assert_eq!(other.name(), "vmtest-2");
        let err = other.number().unwrap_err().to_string();
        assert!(
            err.contains("--lab vmtest-2") && err.contains("numbered labs"),
            "{err}"
        );
    }

    #[test]
    fn the_default_is_lab_0_also_from_lab_name() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let arg = cmd.get_arguments().find(|a| a.get_id() == "lab").unwrap();
        assert_eq!(arg.get_default_values(), ["0"]);
        assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some("LAB_NAME"));
    }

    #[test]
    fn bad_values_are_refused_naming_the_option() {
        for bad in ["155", "lab-999", "../x", "a b", ""] {
            let err = lab(&["--lab", bad]).unwrap_err();
            assert!(err.contains("--lab <LAB>"), "{bad:?}: {err}");
        }
    }
}
