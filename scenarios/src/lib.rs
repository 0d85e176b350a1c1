//! Shared plumbing of the end-to-end scenarios: node configs and lab set-up.
