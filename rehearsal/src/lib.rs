//! Rehearses a GitHub Actions workflow (the project's PR CI) on this machine the way a runner
//! runs it: each job in its own fresh clone and empty HOME, only the tools its steps install,
//! caches kept by the workflow's own keys, artifacts passed between jobs as files.

pub mod artifact_store;
pub mod cache_store;
pub mod expression;
pub mod free_space;
pub mod hash_files;
pub mod job_runner;
pub mod rehearsal;
pub mod step_tools;
pub mod workflow;
