//! The vramfit command line as a library: the binary's commands, and the class comparison
//! ([`compare`]) callable with a kube client (the e2e suite drives it this way).
#![forbid(unsafe_code)]

pub mod args;
pub mod checkpoint_source;
pub mod compare;
pub mod error;
pub mod manifest;
pub mod model_inspect;
pub mod nesting;
pub mod render;
mod render_group;
mod render_tuning;
pub mod validate;
