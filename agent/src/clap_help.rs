//! A check for the command lines built with clap (`unbounded-agent`, `harness`): every argument
//! and every subcommand says what it is for, so `--help` never shows a bare flag.

/// Every argument and subcommand of `cmd` (and its subcommands, all the way down) without a
/// help text, each as its command path and name: `tool sub --flag`, `tool sub <ARG>`, `tool sub`.
pub fn undocumented(cmd: &clap::Command) -> Vec<String> {
    let mut cmd = cmd.clone();
    cmd.build();
    let mut missing = Vec::new();
    walk(&cmd, cmd.get_name(), &mut missing);
    missing
}

fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
    for arg in cmd.get_arguments() {
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            let name = match (arg.get_long(), arg.get_short()) {
                (Some(long), _) => format!("--{long}"),
                (None, Some(short)) => format!("-{short}"),
                (None, None) => format!("<{}>", arg.get_id()),
            };
            missing.push(format!("{path} {name}"));
        }
    }
    // clap's own `help` subcommand mirrors the real ones (without their texts): skip it, the
    // real ones are checked where they are.
    for sub in cmd.get_subcommands().filter(|sub| sub.get_name() != "help") {
        let sub_path = format!("{path} {}", sub.get_name());
        if sub.get_about().is_none() && sub.get_long_about().is_none() {
            missing.push(sub_path.clone());
        }
        walk(sub, &sub_path, missing);
    }
}

#[cfg(test)]
mod tests {
    use clap::{Arg, ArgAction, Command};

    use super::*;

    #[test]
    fn names_each_argument_and_subcommand_without_help_by_its_path() {
        let cmd = Command::new("tool")
            .arg(
                Arg::new("verbose")
                    .long("verbose")
                    .action(ArgAction::SetTrue)
                    .help("More output"),
            )
            .subcommand(
                Command::new("up")
                    .about("Start it")
                    .arg(Arg::new("lab").long("lab"))
                    .arg(Arg::new("file"))
                    .arg(Arg::new("quiet").short('q').action(ArgAction::SetTrue)),
            )
            .subcommand(Command::new("down").subcommand(Command::new("now").about("At once")));
        assert_eq!(
            undocumented(&cmd),
            ["tool up --lab", "tool up <file>", "tool up -q", "tool down"]
        );
    }

    #[test]
    fn a_fully_documented_command_has_nothing_missing() {
        let cmd = Command::new("tool").subcommand(
            Command::new("up")
                .about("Start it")
                .arg(Arg::new("lab").long("lab").help("Which lab")),
        );
        assert!(undocumented(&cmd).is_empty(), "{:?}", undocumented(&cmd));
    }
}
