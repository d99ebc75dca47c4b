//! Which models are read with the Hub token: a wanted model only when the token's scope
//! (`--hub-token-namespaces`, `--hub-token-repos`) allows its repository for one of the
//! namespaces that want it. The model is then mountable by the scope's namespaces that allow
//! its repository, and no others. Everything else is read anonymously.
use std::collections::BTreeSet;

use vramfit_api::model_cache::WantedModel;
use vramfit_cache::Credential;
use vramfit_cache::store::Access;
use vramfit_hub::{RepoRef, TokenScope};

/// The credential to fetch `wanted` with: `None` (anonymous) unless `token` is given and its
/// `scope` allows the repository for one of the namespaces that want it.
pub fn credential_for(
    scope: &TokenScope,
    token: Option<&str>,
    wanted: &WantedModel,
    repo: &RepoRef,
) -> Option<Credential> {
    let token = token?;
    if !wanted.namespaces.iter().any(|ns| scope.allows(ns, repo)) {
        return None;
    }
    Some(Credential {
        token: token.to_string(),
        namespaces: scope.namespaces_for(repo),
    })
}

/// Whether the token would be used for `wanted` (its file is read only then).
pub fn wants_token(scope: &TokenScope, wanted: &WantedModel, repo: &RepoRef) -> bool {
    wanted.namespaces.iter().any(|ns| scope.allows(ns, repo))
}

/// The namespaces that may still mount a model read with the token: those of its record that
/// the token's scope allows for its repository now (`allowed`, empty when there is no token).
/// `Some` with the narrowed access when it differs from the record's, `None` when nothing is
/// to change (a public model, or every reader still allowed). A scope narrowed since the
/// model was fetched (a namespace or repository removed from `--hub-token-namespaces` or
/// `--hub-token-repos`) takes those readers away at once.
pub fn readers_now(access: &Access, allowed: &BTreeSet<String>) -> Option<Access> {
    let Access::Namespaces(namespaces) = access else {
        return None;
    };
    let kept: BTreeSet<String> = namespaces.intersection(allowed).cloned().collect();
    (kept != *namespaces).then_some(Access::Namespaces(kept))
}

/// The namespaces a fetch with the token would add to a model's access (empty when it is
/// read anonymously).
pub fn token_namespaces(credential: Option<&Credential>) -> BTreeSet<String> {
    credential.map(|c| c.namespaces.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(repo: &str, namespaces: &[&str]) -> (WantedModel, RepoRef) {
        let model = WantedModel {
            repo: repo.to_string(),
            revision: "main".to_string(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            in_use: false,
        };
        let repo = RepoRef::new(repo, "main").unwrap();
        (model, repo)
    }

    fn scope() -> TokenScope {
        TokenScope::new(
            [
                "team-a".to_string(),
                "team-b".to_string(),
                "team-c".to_string(),
            ],
            ["org/*".to_string(), "other/one".to_string()],
        )
        .unwrap()
    }

    #[test]
    fn the_token_is_used_only_for_a_namespace_and_repository_it_serves() {
        let (model, repo) = wanted("org/private", &["team-z", "team-b"]);
        let credential = credential_for(&scope(), Some("hf_x"), &model, &repo).unwrap();
        assert_eq!(credential.token, "hf_x");
        // Every namespace of the scope that the repository's pattern allows, not only the
        // asking one: the token reads it the same for each.
        assert_eq!(
            credential.namespaces,
            BTreeSet::from(["team-a".into(), "team-b".into(), "team-c".into()])
        );
        assert!(wants_token(&scope(), &model, &repo));

        let (elsewhere, repo) = wanted("org/private", &["team-z"]);
        assert_eq!(
            credential_for(&scope(), Some("hf_x"), &elsewhere, &repo),
            None
        );
        assert!(!wants_token(&scope(), &elsewhere, &repo));

        let (unlisted, repo) = wanted("other/two", &["team-a"]);
        assert_eq!(
            credential_for(&scope(), Some("hf_x"), &unlisted, &repo),
            None
        );

        let (nobody, repo) = wanted("org/private", &[]);
        assert_eq!(credential_for(&scope(), Some("hf_x"), &nobody, &repo), None);
    }

    #[test]
    fn readers_no_longer_in_the_scope_are_dropped() {
        let set =
            |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| n.to_string()).collect() };
        let record = Access::Namespaces(set(&["team-a", "team-b"]));
        assert_eq!(
            readers_now(&record, &set(&["team-a", "team-b", "team-c"])),
            None
        );
        assert_eq!(
            readers_now(&record, &set(&["team-a"])),
            Some(Access::Namespaces(set(&["team-a"])))
        );
        // The repository left the scope, or the token is gone: nobody.
        assert_eq!(
            readers_now(&record, &BTreeSet::new()),
            Some(Access::Namespaces(BTreeSet::new()))
        );
        assert_eq!(readers_now(&Access::Public, &BTreeSet::new()), None);
        // The repository no longer matches `--hub-token-repos`: the scope gives none.
        let narrowed = TokenScope::new(
            ["team-a".to_string(), "team-b".to_string()],
            ["other/*".to_string()],
        )
        .unwrap();
        let repo = RepoRef::new("org/private", "main").unwrap();
        assert_eq!(
            readers_now(&record, &narrowed.namespaces_for(&repo)),
            Some(Access::Namespaces(BTreeSet::new()))
        );
    }

    #[test]
    fn without_a_token_or_a_scope_every_fetch_is_anonymous() {
        let (model, repo) = wanted("org/private", &["team-a"]);
        assert_eq!(credential_for(&scope(), None, &model, &repo), None);
        assert_eq!(
            credential_for(&TokenScope::default(), Some("hf_x"), &model, &repo),
            None
        );
        assert!(token_namespaces(None).is_empty());
    }
}
