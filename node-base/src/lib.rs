//! What every program of the node stands on, and nothing of LocalDNS or Kubernetes: the one
//! function that runs external commands ([`exec`]), atomic writes and writes that stay below a
//! root ([`files`]), the kernel's view of bound sockets ([`sockets`]), and the one formatter of
//! error chains ([`error_chain`]).

pub mod error_chain;
pub mod exec;
pub mod files;
pub mod sockets;
