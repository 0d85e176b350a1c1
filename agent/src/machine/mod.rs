//! The nspawn machine from the host: commands inside it ([`runner`]), starting and waiting for it
//! ([`machinectl`]), and the LocalDNS supervisor entry point the agent binary serves inside it
//! ([`supervisor_entry`]).

pub mod machinectl;
pub mod runner;
pub mod supervisor_entry;

pub use runner::MachineRunner;
