//! Which jobs a Hub token reads for: only the namespaces an admin lists
//! (`--hub-token-namespaces`: the operator's chart value `operator.hub.tokenNamespaces`, the
//! node cache agent's `modelCache.hub.tokenNamespaces`), and there only the repositories that
//! match `--hub-token-repos` (every repository when none is given). Every other read is
//! anonymous, so a job creator elsewhere can neither read a private or gated repository's
//! numbers into their job's status, nor have a node download it for them, nor learn which
//! private repositories exist.
use std::collections::BTreeSet;

use crate::RepoRef;

/// The namespaces and repositories the token is used for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenScope {
    namespaces: BTreeSet<String>,
    repos: Vec<RepoPattern>,
}

/// `owner/name` exactly, or `owner/*`: every repository of one owner.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RepoPattern {
    Exact(String),
    Owner(String),
}

/// A `--hub-token-repos` entry that is neither `owner/name` nor `owner/*`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--hub-token-repos: {0:?} is neither owner/name nor owner/*")]
pub struct BadRepoPattern(pub String);

impl TokenScope {
    /// The token for jobs in `namespaces`, for the repositories matching `repos` (all when
    /// empty). No namespace: the token is never used.
    pub fn new(
        namespaces: impl IntoIterator<Item = String>,
        repos: impl IntoIterator<Item = String>,
    ) -> Result<TokenScope, BadRepoPattern> {
        let repos = repos
            .into_iter()
            .map(|text| {
                let pattern = match text.strip_suffix("/*") {
                    Some(owner) if !owner.contains('/') => {
                        RepoRef::new(owner, "main").map(|_| RepoPattern::Owner(owner.into()))
                    }
                    Some(_) => return Err(BadRepoPattern(text)),
                    None => RepoRef::new(&text, "main").map(|_| RepoPattern::Exact(text.clone())),
                };
                pattern.map_err(|_| BadRepoPattern(text))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TokenScope {
            namespaces: namespaces.into_iter().filter(|n| !n.is_empty()).collect(),
            repos,
        })
    }

    /// Whether a job in `namespace` reads `repo` with the token.
    pub fn allows(&self, namespace: &str, repo: &RepoRef) -> bool {
        self.namespaces.contains(namespace)
            && (self.repos.is_empty()
                || self.repos.iter().any(|pattern| match pattern {
                    RepoPattern::Exact(name) => name == repo.repo(),
                    RepoPattern::Owner(owner) => {
                        repo.repo().split_once('/').is_some_and(|(o, _)| o == owner)
                    }
                }))
    }

    /// No namespace listed: every read is anonymous.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// The listed namespaces whose jobs read `repo` with the token (sorted).
    pub fn namespaces_for(&self, repo: &RepoRef) -> BTreeSet<String> {
        self.namespaces
            .iter()
            .filter(|namespace| self.allows(namespace, repo))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(name: &str) -> RepoRef {
        RepoRef::new(name, "main").unwrap()
    }

    #[test]
    fn the_token_reads_only_for_listed_namespaces_and_matching_repositories() {
        let everything = TokenScope::new(["team-a".to_string()], []).unwrap();
        assert!(everything.allows("team-a", &repo("org/private")));
        assert!(!everything.allows("team-b", &repo("org/private")));
        let some = TokenScope::new(
            ["team-a".to_string(), "team-b".to_string()],
            ["org/*".to_string(), "other/one".to_string()],
        )
        .unwrap();
        assert!(some.allows("team-b", &repo("org/x")));
        assert!(some.allows("team-a", &repo("other/one")));
        assert!(!some.allows("team-a", &repo("other/two")));
        assert!(!some.allows("team-a", &repo("organisation/x")));
        assert!(!some.allows("team-a", &repo("gpt2")));
        assert!(TokenScope::default().is_empty());
        assert!(!TokenScope::default().allows("team-a", &repo("org/x")));
        assert_eq!(
            TokenScope::new(["a".to_string()], ["org/x/*".to_string()]),
            Err(BadRepoPattern("org/x/*".into()))
        );
    }

    #[test]
    fn the_namespaces_for_a_repository_are_those_the_token_reads_it_for() {
        let scope = TokenScope::new(
            ["team-a".to_string(), "team-b".to_string(), String::new()],
            ["org/*".to_string()],
        )
        .unwrap();
        assert_eq!(
            scope.namespaces_for(&repo("org/x")),
            BTreeSet::from(["team-a".to_string(), "team-b".to_string()])
        );
        assert!(scope.namespaces_for(&repo("other/x")).is_empty());
        assert!(
            TokenScope::default()
                .namespaces_for(&repo("org/x"))
                .is_empty()
        );
    }
}
