//! vramfit-hub: a model's numbers from the Hugging Face Hub (or a mirror, or an air-gapped
//! proxy): `config.json`, `model.safetensors.index.json` and each safetensors file's header,
//! read with HTTP range requests (the first 8 bytes, then the header they announce), never the
//! weights. Every body is bounded, every file has a timeout, and a token never leaves the
//! endpoint's origin (the Hub redirects large files to its CDN). That GET, with the same token
//! rule, is public (`HubClient::get_following_redirects`) for the node's model cache, which
//! downloads whole files. `HubClient::read_commit` reads the commit a revision names (the
//! model info's `sha`), so that a branch is pinned once per job.
#![forbid(unsafe_code)]

mod client;
pub mod repo;
pub mod token_scope;

pub use client::{HubClient, HubConfig, HubError, HubModel, chain as error_chain, refusal};
pub use repo::{DEFAULT_ENDPOINT, DEFAULT_REVISION, RepoError, RepoRef, encode_segment, is_commit};
pub use token_scope::{BadRepoPattern, TokenScope};
