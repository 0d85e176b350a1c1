//! One module per command group of `harness`.

pub mod bench;
pub mod bench_node;
pub mod bench_suite;
pub mod images;
pub mod lab;
pub mod lab_arg;
pub mod lab_inspect;
pub mod lab_kubectl;
pub mod vm;

#[cfg(test)]
mod help;
