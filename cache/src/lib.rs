//! vramfit-cache: a node-local cache of Hugging Face models. A model at a revision is listed
//! (`manifest`), its files are downloaded once into `<root>/models/<owner>--<name>/<revision>`
//! (`layout`), resumably and verified by size and hash before they are renamed into place
//! (`download`, `verify`), a record per model says how many bytes it holds, whether it is
//! complete, when it was last used and which namespaces may mount it (`store`), and the least
//! recently used models no running pod uses are evicted to keep the cache within its byte budget
//! (`budget`). `fetch_model` ties them together.
#![forbid(unsafe_code)]

mod body;
pub mod budget;
mod cadence;
pub mod download;
mod fetch;
pub mod layout;
pub mod manifest;
pub mod no_follow;
pub mod prune;
pub mod reverify;
pub mod store;
pub mod verify;

pub use body::BodyError;
pub use fetch::{CacheConfig, Credential, FetchError, Fetched, InUse, fetch_model};
