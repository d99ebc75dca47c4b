//! Watching a list of namespaces as one watch (`--watch-namespaces`).
//!
//! An install that holds Roles only in some namespaces cannot list InferenceJobs or their pods
//! cluster-wide, so with `--watch-namespaces` those two watches run once per namespace
//! (`Api::namespaced`), and the namespaces of each kind fill one store. But kube's store
//! [`Writer`](kube::runtime::reflector::store::Writer) takes a watcher's
//! `Init … InitDone` as a relist of the *whole* store: on `InitDone` it replaces everything it
//! held with the objects listed since `Init`. Merged as they come, one namespace's relist
//! (after `410 Expired`, say) would wipe every other namespace's objects from the store.
//!
//! [`merge_namespaces`] merges the per-namespace streams into one stream with one store's
//! semantics ([`NamespaceMerge`] is the state machine):
//!
//! * **First list.** Each namespace's first list is held, with what its watch says after it
//!   while the others still list (or a relist of it, which starts it over). Once every
//!   namespace has listed: one `Init`, an `InitApply` per object of every namespace, one
//!   `InitDone` — the store's readiness, and what [`crate::stores::relist`] waits for.
//! * **Afterwards**, a namespace's relist becomes an `Apply` per listed object as it comes and,
//!   at that namespace's `InitDone`, a `Delete` for each object of that namespace the store
//!   holds but the relist did not list (the object as the store holds it, so the pod trigger
//!   still knows the job that owned a pod). The names each namespace has in the store are
//!   tracked for that; the store itself compares by name and namespace only. No other
//!   namespace's objects are touched, and nothing waits for the relist to finish: the store
//!   changes object by object, as it does for watch events.
//! * `Apply`, `Delete` and errors pass as they are.
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::Hash;
use std::str::FromStr;

use futures::{Stream, StreamExt, future, stream};
use kube::api::Api;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tracing::warn;

use super::watch_retry::with_backoff;

/// The namespaces the InferenceJob and job-pod watches cover: every namespace (the default),
/// or those of `--watch-namespaces` (at least one, each a DNS-1123 label, no repeats).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchNamespaces(Vec<String>);

impl WatchNamespaces {
    /// Every namespace.
    pub fn all() -> Self {
        Self::default()
    }

    /// The listed namespaces, or `None` for every namespace.
    pub fn listed(&self) -> Option<&[String]> {
        (!self.0.is_empty()).then_some(self.0.as_slice())
    }

    /// Reads `a,b,c` (blanks around names are ignored; empty means every namespace).
    pub fn parse(value: &str) -> Result<Self, String> {
        if value.trim().is_empty() {
            return Ok(Self::all());
        }
        let mut namespaces: Vec<String> = Vec::new();
        for name in value.split(',').map(str::trim) {
            if let Some(problem) = dns1123_label_problem(name) {
                return Err(format!(
                    "namespace {name:?} is not a valid namespace name: {problem} \
                     (a DNS-1123 label: at most 63 lowercase letters, digits and '-', \
                     starting and ending with a letter or digit); give a comma-separated \
                     list such as team-a,team-b, or nothing for every namespace"
                ));
            }
            if !namespaces.iter().any(|seen| seen == name) {
                namespaces.push(name.to_string());
            }
        }
        Ok(Self(namespaces))
    }
}

impl FromStr for WatchNamespaces {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::parse(value)
    }
}

impl fmt::Display for WatchNamespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.listed() {
            None => f.write_str("all namespaces"),
            Some(names) => f.write_str(&names.join(",")),
        }
    }
}

/// Why `name` is not a DNS-1123 label, if it is not.
fn dns1123_label_problem(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Some("it is empty");
    }
    if bytes.len() > 63 {
        return Some("it is longer than 63 characters");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    {
        return Some("it holds a character other than a-z, 0-9 and '-'");
    }
    if bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
        return Some("it starts or ends with '-'");
    }
    None
}

/// The watch `watch` (named so in logs) of each of `namespaces`, each with its own retries
/// ([`with_backoff`]), merged by [`merge_namespaces`] for the store `store` reads. A watch
/// error is logged with its namespace and dropped here: it means nothing to the store, and
/// passed on it would let a consumer's backoff (the Controller's) pause every namespace for
/// one that fails, such as one whose RoleBinding is missing.
pub fn watch_namespaces<K>(
    client: &Client,
    namespaces: &[String],
    config: &watcher::Config,
    store: Store<K>,
    watch: &'static str,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let watches = namespaces
        .iter()
        .map(|namespace| {
            let name = namespace.clone();
            let events = with_backoff(
                watch,
                watcher::watcher(
                    Api::<K>::namespaced(client.clone(), namespace),
                    config.clone(),
                ),
            )
            .filter(move |event| {
                if let Err(error) = event {
                    warn!(watch, namespace = %name, %error, "watch failed; retrying");
                }
                future::ready(event.is_ok())
            });
            (namespace.clone(), events)
        })
        .collect();
    merge_namespaces(watches, store)
}

/// Merges one watch stream per namespace (`(namespace, events)`) into one with the semantics
/// of a single store (see the module docs). `store` must be the store the merged stream
/// fills: a namespace's relist reads from it the objects to delete.
pub fn merge_namespaces<K, S>(
    watches: Vec<(String, S)>,
    store: Store<K>,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    let mut merge = NamespaceMerge::new(watches.iter().map(|(ns, _)| ns.clone()).collect());
    let tagged = watches
        .into_iter()
        .enumerate()
        .map(|(index, (_, events))| events.map(move |event| (index, event)).boxed());
    stream::select_all(tagged).flat_map(move |(index, event)| {
        let out: Vec<watcher::Result<watcher::Event<K>>> = match event {
            Ok(event) => merge
                .on_event(index, event, &store)
                .into_iter()
                .map(Ok)
                .collect(),
            Err(error) => vec![Err(error)],
        };
        stream::iter(out)
    })
}

/// The merge of per-namespace watch events into one store's events (see the module docs).
pub struct NamespaceMerge<K> {
    namespaces: Vec<String>,
    /// Until every namespace has listed once: per namespace, its objects by name and whether
    /// its list is complete.
    first_list: Option<Vec<FirstList<K>>>,
    /// After the first list: per namespace, the names of its objects in the store.
    known: Vec<HashSet<String>>,
    /// During a namespace's relist: the names it has listed so far.
    relisting: Vec<Option<HashSet<String>>>,
}

struct FirstList<K> {
    complete: bool,
    objects: HashMap<String, K>,
}

impl<K> NamespaceMerge<K>
where
    K: Lookup + Clone,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    /// A merge of the watches of `namespaces` (index `i` in [`Self::on_event`] is
    /// `namespaces[i]`).
    pub fn new(namespaces: Vec<String>) -> Self {
        let count = namespaces.len();
        Self {
            first_list: Some(
                (0..count)
                    .map(|_| FirstList {
                        complete: false,
                        objects: HashMap::new(),
                    })
                    .collect(),
            ),
            known: vec![HashSet::new(); count],
            relisting: vec![None; count],
            namespaces,
        }
    }

    /// Takes one event of namespace `index`'s watch; returns the events for the store, which
    /// `store` reads (it holds every event returned before).
    pub fn on_event(
        &mut self,
        index: usize,
        event: watcher::Event<K>,
        store: &Store<K>,
    ) -> Vec<watcher::Event<K>> {
        match &mut self.first_list {
            Some(lists) => {
                let Some(list) = lists.get_mut(index) else {
                    return Vec::new();
                };
                match event {
                    watcher::Event::Init => {
                        list.complete = false;
                        list.objects.clear();
                    }
                    watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                        list.objects.insert(name_of(&object), object);
                    }
                    watcher::Event::Delete(object) => {
                        list.objects.remove(&name_of(&object));
                    }
                    watcher::Event::InitDone => list.complete = true,
                }
                if lists.iter().all(|list| list.complete) {
                    self.first_list_complete()
                } else {
                    Vec::new()
                }
            }
            None => self.after_first_list(index, event, store),
        }
    }

    /// The one `Init … InitDone` of every namespace's first list.
    fn first_list_complete(&mut self) -> Vec<watcher::Event<K>> {
        let lists = self.first_list.take().unwrap_or_default();
        let count: usize = lists.iter().map(|list| list.objects.len()).sum();
        let mut out = Vec::with_capacity(count + 2);
        out.push(watcher::Event::Init);
        for (known, list) in self.known.iter_mut().zip(lists) {
            *known = list.objects.keys().cloned().collect();
            out.extend(list.objects.into_values().map(watcher::Event::InitApply));
        }
        out.push(watcher::Event::InitDone);
        out
    }

    fn after_first_list(
        &mut self,
        index: usize,
        event: watcher::Event<K>,
        store: &Store<K>,
    ) -> Vec<watcher::Event<K>> {
        let (Some(known), Some(relisting), Some(namespace)) = (
            self.known.get_mut(index),
            self.relisting.get_mut(index),
            self.namespaces.get(index),
        ) else {
            return Vec::new();
        };
        match event {
            watcher::Event::Init => {
                *relisting = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                let name = name_of(&object);
                known.insert(name.clone());
                relisting.get_or_insert_default().insert(name);
                vec![watcher::Event::Apply(object)]
            }
            watcher::Event::InitDone => {
                let listed = relisting.take().unwrap_or_default();
                let gone: Vec<String> = known.difference(&listed).cloned().collect();
                *known = listed;
                gone.into_iter()
                    .filter_map(|name| store.get(&ObjectRef::new(&name).within(namespace)))
                    .map(|object| watcher::Event::Delete(object.as_ref().clone()))
                    .collect()
            }
            watcher::Event::Apply(object) => {
                known.insert(name_of(&object));
                vec![watcher::Event::Apply(object)]
            }
            watcher::Event::Delete(object) => {
                known.remove(&name_of(&object));
                vec![watcher::Event::Delete(object)]
            }
        }
    }
}

fn name_of<K: Lookup>(object: &K) -> String {
    object
        .name()
        .map(|name| name.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::stores::JobRef;
    use crate::stores::relist::ChangedPodOwners;
    use crate::stores::slim::SlimPod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::ResourceExt;
    use kube::runtime::reflector;
    use kube::runtime::reflector::store::Writer;

    const A: usize = 0;
    const B: usize = 1;

    /// Pod `name` of `namespace`, owned by job `job`, at resource version `version`.
    fn pod(namespace: &str, name: &str, version: &str) -> SlimPod {
        let mut pod = fixtures::running_pod(name, "a-1");
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.resource_version = Some(version.into());
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "vramfit.io/v1alpha1".into(),
            kind: "InferenceJob".into(),
            name: format!("job-{name}"),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        SlimPod::of(&pod)
    }

    /// A merge of `team-a` and `team-b` and the store it fills.
    fn merge() -> (NamespaceMerge<SlimPod>, Writer<SlimPod>) {
        let (_, writer) = reflector::store::<SlimPod>();
        (
            NamespaceMerge::new(vec!["team-a".into(), "team-b".into()]),
            writer,
        )
    }

    /// Feeds `(namespace, event)`s through the merge into the store; returns what the merge
    /// emitted, as short strings (`Init`, `InitApply team-a/x@1`, `Delete …`).
    fn feed(
        merge: &mut NamespaceMerge<SlimPod>,
        writer: &mut Writer<SlimPod>,
        events: Vec<(usize, watcher::Event<SlimPod>)>,
    ) -> Vec<String> {
        let store = writer.as_reader();
        let mut emitted = Vec::new();
        for (index, event) in events {
            for out in merge.on_event(index, event, &store) {
                writer.apply_watcher_event(&out);
                emitted.push(describe(&out));
            }
        }
        emitted
    }

    fn describe(event: &watcher::Event<SlimPod>) -> String {
        let object = |kind: &str, pod: &SlimPod| {
            format!(
                "{kind} {}/{}@{}",
                pod.metadata.namespace.as_deref().unwrap_or_default(),
                pod.name_any(),
                pod.metadata.resource_version.as_deref().unwrap_or_default()
            )
        };
        match event {
            watcher::Event::Init => "Init".into(),
            watcher::Event::InitDone => "InitDone".into(),
            watcher::Event::InitApply(pod) => object("InitApply", pod),
            watcher::Event::Apply(pod) => object("Apply", pod),
            watcher::Event::Delete(pod) => object("Delete", pod),
        }
    }

    /// The store's objects as `namespace/name@version`, sorted.
    fn contents(store: &Store<SlimPod>) -> Vec<String> {
        let mut objects: Vec<String> = store
            .state()
            .iter()
            .map(|pod| {
                format!(
                    "{}/{}@{}",
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.name_any(),
                    pod.metadata.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect();
        objects.sort();
        objects
    }

    fn list(index: usize, pods: Vec<SlimPod>) -> Vec<(usize, watcher::Event<SlimPod>)> {
        let mut events = vec![(index, watcher::Event::Init)];
        events.extend(
            pods.into_iter()
                .map(|pod| (index, watcher::Event::InitApply(pod))),
        );
        events.push((index, watcher::Event::InitDone));
        events
    }

    /// Both namespaces listed: a-1, a-2 in team-a, b-1 in team-b.
    fn listed() -> (NamespaceMerge<SlimPod>, Writer<SlimPod>) {
        let (mut merge, mut writer) = merge();
        let mut events = list(
            A,
            vec![pod("team-a", "a-1", "1"), pod("team-a", "a-2", "2")],
        );
        events.extend(list(B, vec![pod("team-b", "b-1", "3")]));
        feed(&mut merge, &mut writer, events);
        (merge, writer)
    }

    #[test]
    fn the_first_list_is_one_init_of_every_namespace_once_all_have_listed() {
        let (mut merge, mut writer) = merge();
        let store = writer.as_reader();
        let emitted = feed(
            &mut merge,
            &mut writer,
            list(A, vec![pod("team-a", "a-1", "1")]),
        );
        assert!(emitted.is_empty(), "team-b has not listed yet: {emitted:?}");
        assert!(store.state().is_empty());
        let mut emitted = feed(
            &mut merge,
            &mut writer,
            list(B, vec![pod("team-b", "b-1", "2")]),
        );
        emitted[1..3].sort();
        assert_eq!(
            emitted,
            [
                "Init",
                "InitApply team-a/a-1@1",
                "InitApply team-b/b-1@2",
                "InitDone"
            ]
        );
        assert_eq!(contents(&store), ["team-a/a-1@1", "team-b/b-1@2"]);
        // The store is ready (what the operator's readiness waits for).
        assert!(
            futures::FutureExt::now_or_never(store.wait_until_ready()).is_some(),
            "the store is ready once every namespace has listed"
        );
    }

    #[test]
    fn what_a_listed_namespace_sees_while_another_lists_goes_into_the_first_list() {
        let (mut merge, mut writer) = merge();
        let store = writer.as_reader();
        let mut events = list(
            A,
            vec![pod("team-a", "a-1", "1"), pod("team-a", "a-2", "2")],
        );
        events.extend([
            (A, watcher::Event::Apply(pod("team-a", "a-1", "5"))),
            (A, watcher::Event::Delete(pod("team-a", "a-2", "6"))),
            (A, watcher::Event::Apply(pod("team-a", "a-3", "7"))),
        ]);
        // team-a lists again (its watch expired) before team-b is done: only its new list counts.
        events.extend(list(
            A,
            vec![pod("team-a", "a-3", "8"), pod("team-a", "a-4", "9")],
        ));
        events.extend(list(B, vec![]));
        feed(&mut merge, &mut writer, events);
        assert_eq!(contents(&store), ["team-a/a-3@8", "team-a/a-4@9"]);
    }

    /// The case the merge exists for: a relist of team-a keeps team-b's objects and deletes
    /// the team-a object the relist no longer lists.
    #[test]
    fn a_relist_of_one_namespace_keeps_the_others_and_deletes_what_it_no_longer_lists() {
        let (mut merge, mut writer) = listed();
        let store = writer.as_reader();
        let mut owners = ChangedPodOwners::default();
        let relist = list(
            A,
            vec![pod("team-a", "a-1", "10"), pod("team-a", "a-3", "11")],
        );
        let mut emitted = Vec::new();
        let mut triggered: Vec<JobRef> = Vec::new();
        for (index, event) in relist {
            for out in merge.on_event(index, event, &store) {
                writer.apply_watcher_event(&out);
                triggered.extend(
                    owners
                        .observe(&out, &store)
                        .into_iter()
                        .map(|change| change.owner.job),
                );
                emitted.push(describe(&out));
                // team-b's object is never gone, not even for a moment.
                assert!(
                    contents(&store).contains(&"team-b/b-1@3".to_string()),
                    "after {}: {:?}",
                    describe(&out),
                    contents(&store)
                );
            }
        }
        assert_eq!(
            emitted,
            [
                "Apply team-a/a-1@10",
                "Apply team-a/a-3@11",
                // The object as the store held it: with its owner.
                "Delete team-a/a-2@2",
            ]
        );
        assert_eq!(
            contents(&store),
            ["team-a/a-1@10", "team-a/a-3@11", "team-b/b-1@3"]
        );
        let mut jobs: Vec<String> = triggered.into_iter().map(|job| job.name).collect();
        jobs.sort();
        assert_eq!(
            jobs,
            ["job-a-1", "job-a-2", "job-a-3"],
            "each changed or deleted pod's job is reconciled, once the store shows the change"
        );

        // A later relist of team-b that lists nothing deletes b-1 and only b-1.
        let emitted = feed(&mut merge, &mut writer, list(B, vec![]));
        assert_eq!(emitted, ["Delete team-b/b-1@3"]);
        assert_eq!(contents(&store), ["team-a/a-1@10", "team-a/a-3@11"]);
    }

    #[test]
    fn watch_events_pass_and_a_deleted_object_is_not_deleted_again_by_a_relist() {
        let (mut merge, mut writer) = listed();
        let store = writer.as_reader();
        let emitted = feed(
            &mut merge,
            &mut writer,
            vec![
                (A, watcher::Event::Apply(pod("team-a", "a-5", "20"))),
                (A, watcher::Event::Delete(pod("team-a", "a-1", "21"))),
                (B, watcher::Event::Apply(pod("team-b", "b-1", "22"))),
            ],
        );
        assert_eq!(
            emitted,
            [
                "Apply team-a/a-5@20",
                "Delete team-a/a-1@21",
                "Apply team-b/b-1@22"
            ]
        );
        let emitted = feed(
            &mut merge,
            &mut writer,
            list(
                A,
                vec![pod("team-a", "a-2", "2"), pod("team-a", "a-5", "20")],
            ),
        );
        assert_eq!(emitted, ["Apply team-a/a-2@2", "Apply team-a/a-5@20"]);
        assert_eq!(
            contents(&store),
            ["team-a/a-2@2", "team-a/a-5@20", "team-b/b-1@22"]
        );
    }

    #[test]
    fn an_interrupted_relist_deletes_only_once_a_relist_completes() {
        let (mut merge, mut writer) = listed();
        let store = writer.as_reader();
        let mut events = vec![
            (A, watcher::Event::Init),
            (A, watcher::Event::InitApply(pod("team-a", "a-3", "30"))),
            // The relist failed half way; the watcher starts it over.
            (A, watcher::Event::Init),
        ];
        events.extend(
            list(A, vec![pod("team-a", "a-2", "31")])[1..]
                .iter()
                .cloned(),
        );
        let mut emitted = feed(&mut merge, &mut writer, events);
        emitted[2..].sort();
        assert_eq!(
            emitted,
            [
                "Apply team-a/a-3@30",
                "Apply team-a/a-2@31",
                "Delete team-a/a-1@1",
                "Delete team-a/a-3@30"
            ]
        );
        assert_eq!(contents(&store), ["team-a/a-2@31", "team-b/b-1@3"]);
    }

    #[test]
    fn a_delete_needs_only_the_name_and_namespace_to_leave_the_store() {
        let (mut merge, mut writer) = listed();
        let store = writer.as_reader();
        let mut bare = SlimPod::default();
        bare.metadata.name = Some("a-2".into());
        bare.metadata.namespace = Some("team-a".into());
        feed(
            &mut merge,
            &mut writer,
            vec![(A, watcher::Event::Delete(bare))],
        );
        assert_eq!(contents(&store), ["team-a/a-1@1", "team-b/b-1@3"]);
    }

    #[tokio::test]
    async fn merged_streams_fill_one_store_and_pass_errors() {
        use kube::core::Status;
        let (store, writer) = reflector::store::<SlimPod>();
        let expired = || {
            let mut status = Status::failure("too old resource version", "Expired");
            status.code = 410;
            Err(watcher::Error::WatchError(Box::new(status)))
        };
        let team_a = stream::iter(
            list(A, vec![pod("team-a", "a-1", "1")])
                .into_iter()
                .map(|(_, event)| Ok(event))
                .chain([expired()])
                .chain(
                    list(A, vec![pod("team-a", "a-2", "2")])
                        .into_iter()
                        .map(|(_, event)| Ok(event)),
                ),
        );
        let team_b = stream::iter(
            list(B, vec![pod("team-b", "b-1", "3")])
                .into_iter()
                .map(|(_, event)| Ok(event)),
        );
        let merged = merge_namespaces(
            vec![
                ("team-a".to_string(), team_a.boxed()),
                ("team-b".to_string(), team_b.boxed()),
            ],
            store.clone(),
        );
        let items: Vec<_> = reflector::reflector(writer, merged).collect().await;
        let errors = items.iter().filter(|item| item.is_err()).count();
        let init_dones = items
            .iter()
            .filter(|item| matches!(item, Ok(watcher::Event::InitDone)))
            .count();
        assert_eq!((errors, init_dones), (1, 1), "{items:?}");
        assert_eq!(contents(&store), ["team-a/a-2@2", "team-b/b-1@3"]);
    }

    #[test]
    fn watched_namespaces_are_read_from_a_comma_separated_list() {
        assert_eq!(WatchNamespaces::parse("").unwrap(), WatchNamespaces::all());
        assert_eq!(WatchNamespaces::parse(" ").unwrap().listed(), None);
        let parsed = WatchNamespaces::parse("team-a, team-b,team-a,0x").unwrap();
        assert_eq!(
            parsed.listed(),
            Some(&["team-a".to_string(), "team-b".into(), "0x".into()][..])
        );
        assert_eq!(parsed.to_string(), "team-a,team-b,0x");
        assert_eq!(WatchNamespaces::all().to_string(), "all namespaces");
        for (bad, why) in [
            ("Team-A", "a character other than"),
            ("team_a", "a character other than"),
            ("team.a", "a character other than"),
            ("-team", "starts or ends with '-'"),
            ("team-", "starts or ends with '-'"),
            ("team-a,,team-b", "it is empty"),
            ("team-a,", "it is empty"),
        ] {
            let error = WatchNamespaces::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
            assert!(error.contains("DNS-1123"), "{bad}: {error}");
        }
        let long = "a".repeat(64);
        assert!(
            WatchNamespaces::parse(&long)
                .unwrap_err()
                .contains("longer than 63")
        );
        assert!(WatchNamespaces::parse(&"a".repeat(63)).is_ok());
    }
}
