//! One module per subcommand of `unbounded-agent`.

pub mod coredns;
pub mod crds;
pub mod daemon;
pub mod lifecycle;
pub mod localdns;
pub mod preflight;
pub mod render;
pub mod start;
pub mod validate;

#[cfg(test)]
mod help;
