//! Which jobs the operator's Hub token reads for: the rule lives in `vramfit-hub`
//! (`vramfit_hub::token_scope`), shared with the node cache agent.
pub use vramfit_hub::token_scope::{BadRepoPattern, TokenScope};
