//! `unbounded-localdns-supervisor`: runs CoreDNS inside the machine and reports its health to systemd.
//! Takes no arguments; settings come from the environment (docs/design.md §7,
//! `agent::supervisor`). The agent binary installed under this name runs the same entry point.

use std::process::ExitCode;

fn main() -> ExitCode {
    agent::machine::supervisor_entry::main()
}
