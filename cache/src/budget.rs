//! Which cached models to evict so that a new one fits the node's byte budget: least recently
//! used first, never one a running pod uses. Pure: the caller says what is cached and in use.

/// A cached model as the budget sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedModel {
    /// `owner/name@revision`.
    pub key: String,
    /// Bytes on disk.
    pub bytes: u64,
    /// Last use, seconds since the Unix epoch.
    pub last_used: u64,
    /// A running pod mounts it: never evicted.
    pub in_use: bool,
}

/// Why a model cannot fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoRoom {
    /// Larger than the whole budget.
    #[error("the model needs {needed} bytes, more than the cache's whole budget of {budget} bytes")]
    LargerThanBudget {
        /// Bytes the model needs.
        needed: u64,
        /// The budget.
        budget: u64,
    },
    /// Models in use hold too much of the budget.
    #[error(
        "the model needs {needed} bytes; of the {budget}-byte budget, {in_use} bytes are held by models running pods use (never evicted) and at most {freeable} could be freed"
    )]
    HeldInUse {
        /// Bytes the model needs.
        needed: u64,
        /// The budget.
        budget: u64,
        /// Bytes held by models in use.
        in_use: u64,
        /// Bytes evicting every other model would leave free.
        freeable: u64,
    },
}

/// The models to evict, least recently used first, so that `needed` more bytes fit within
/// `budget` beside the others; empty when they fit already. `cached` must not hold the model
/// being fetched (its own bytes are part of `needed`).
pub fn choose_victims(
    cached: &[CachedModel],
    budget: u64,
    needed: u64,
) -> Result<Vec<String>, NoRoom> {
    if needed > budget {
        return Err(NoRoom::LargerThanBudget { needed, budget });
    }
    let mut used: u64 = cached.iter().fold(0, |s, m| s.saturating_add(m.bytes));
    // The cache may be over its budget already (a smaller budget set since): what is freed
    // counts only once the total is back under it.
    let mut free = budget.saturating_sub(used);
    if free >= needed {
        return Ok(Vec::new());
    }
    let mut candidates: Vec<&CachedModel> = cached.iter().filter(|m| !m.in_use).collect();
    // Oldest first; the key breaks ties so that the choice never depends on listing order.
    candidates.sort_by(|a, b| a.last_used.cmp(&b.last_used).then(a.key.cmp(&b.key)));
    let mut victims = Vec::new();
    for model in candidates {
        if free >= needed {
            break;
        }
        used = used.saturating_sub(model.bytes);
        free = budget.saturating_sub(used);
        victims.push(model.key.clone());
    }
    if free >= needed {
        return Ok(victims);
    }
    let in_use = cached
        .iter()
        .filter(|m| m.in_use)
        .fold(0u64, |s, m| s.saturating_add(m.bytes));
    Err(NoRoom::HeldInUse {
        needed,
        budget,
        in_use,
        freeable: free,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(key: &str, bytes: u64, last_used: u64, in_use: bool) -> CachedModel {
        CachedModel {
            key: key.into(),
            bytes,
            last_used,
            in_use,
        }
    }

    #[test]
    fn nothing_is_evicted_while_the_model_fits() {
        let cached = [model("a", 40, 1, false), model("b", 40, 2, false)];
        assert_eq!(choose_victims(&cached, 100, 20), Ok(vec![]));
    }

    #[test]
    fn the_least_recently_used_model_not_in_use_goes_first() {
        // "old" is the oldest but in use; "mid" is the oldest evictable one, and freeing it is
        // enough, so "new" stays.
        let cached = [
            model("new", 30, 30, false),
            model("old", 30, 10, true),
            model("mid", 30, 20, false),
        ];
        assert_eq!(
            choose_victims(&cached, 100, 30),
            Ok(vec!["mid".to_string()])
        );
        assert_eq!(
            choose_victims(&cached, 100, 60),
            Ok(vec!["mid".to_string(), "new".to_string()])
        );
    }

    #[test]
    fn models_in_use_are_never_evicted_even_when_nothing_else_frees_enough() {
        let cached = [model("busy", 60, 1, true), model("idle", 20, 2, false)];
        assert_eq!(
            choose_victims(&cached, 100, 50),
            Err(NoRoom::HeldInUse {
                needed: 50,
                budget: 100,
                in_use: 60,
                freeable: 40,
            })
        );
        assert_eq!(
            choose_victims(&[], 100, 101),
            Err(NoRoom::LargerThanBudget {
                needed: 101,
                budget: 100
            })
        );
    }

    #[test]
    fn a_cache_over_its_budget_evicts_until_the_new_model_fits_under_it() {
        // 150 bytes held under a budget of 100: evicting "a" (50) leaves 100 used, no room
        // yet; evicting "b" too leaves 50, room for 50.
        let cached = [
            model("a", 50, 1, false),
            model("b", 50, 2, false),
            model("c", 50, 3, false),
        ];
        assert_eq!(
            choose_victims(&cached, 100, 50),
            Ok(vec!["a".to_string(), "b".to_string()])
        );
    }

    #[test]
    fn ties_on_last_use_are_broken_by_key() {
        let cached = [model("b", 50, 5, false), model("a", 50, 5, false)];
        assert_eq!(choose_victims(&cached, 100, 50), Ok(vec!["a".to_string()]));
    }
}
