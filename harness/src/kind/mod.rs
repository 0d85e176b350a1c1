//! The lab's Kind cluster: the container engine its node containers run in (`engine`).

pub mod engine;

pub use engine::{Engine, EngineError, EngineKind};
