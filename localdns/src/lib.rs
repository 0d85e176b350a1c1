//! LocalDNS's own language: the Corefile template (built-in and fallback), its rendering values
//! and the checks of a rendered Corefile ([`corefile`]), and the per-zone settings of each
//! listener ([`zones`]). Used by the agent (validation, rendering) and by the supervisor (the
//! serving Corefile's server blocks); it uses no other crate of the workspace.

pub mod corefile;
pub mod zones;
