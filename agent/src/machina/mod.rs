//! The Machina API as the agent uses it: the types and CRDs of the `machina` crate (re-exported
//! here), and [`convert`] between a Machine's or MachineConfiguration's agent settings and the
//! agent config.

pub use machina::*;

pub mod convert;

pub use convert::ConversionError;
