//! The slim forms the watches parse: only what vramfit reads, the rest of the JSON skipped by
//! serde without being built.
//!
//! * [`SlimPod`]: a Pod as the two pod watches read it: metadata less its managed fields,
//!   `spec.nodeName`, each container's name and resources, and the status (env, args,
//!   volumes, affinity and managed fields are most of a pod). At 5,000 jobs the full `Pod`s
//!   were the largest share of the operator's memory and of its parsing time.
//!
//! Jobs have their own cached form, [`super::cached_job::CachedJob`].
use super::deflate::CompactText;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::{ListableResource, Metadata, NamespaceResourceScope, Resource};
use serde::{Deserialize, Deserializer, Serialize};

/// A Pod with only what vramfit reads (see the module documentation). Its labels and
/// annotations are kept apart from `metadata`: read them with [`SlimPod::label`],
/// [`SlimPod::annotation`] or [`SlimPod::to_pod`] (`ResourceExt::annotations` and `labels` of
/// a slim pod are always empty).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(from = "WirePod", into = "Pod")]
pub struct SlimPod {
    /// Metadata, without managed fields; its labels and annotations are kept as [`Pairs`].
    pub metadata: ObjectMeta,
    labels: Option<Pairs<String>>,
    /// Long values (the plan annotation, ~1 KiB of JSON) deflated: most of a pod's cached
    /// bytes otherwise.
    annotations: Option<Pairs<CompactText>>,
    /// The node and the containers' resources.
    pub spec: Option<SlimPodSpec>,
    /// The whole status.
    pub status: Option<PodStatus>,
}

/// A pod as the watch sends it, parsed slim.
#[derive(Deserialize)]
struct WirePod {
    #[serde(deserialize_with = "slim_metadata")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SlimPodSpec>,
    #[serde(default)]
    status: Option<PodStatus>,
}

impl From<WirePod> for SlimPod {
    fn from(wire: WirePod) -> Self {
        let mut metadata = wire.metadata;
        Self {
            labels: metadata.labels.take().map(Pairs::from),
            annotations: metadata.annotations.take().map(Pairs::compact),
            metadata,
            spec: wire.spec,
            status: wire.status,
        }
    }
}

impl From<SlimPod> for Pod {
    fn from(pod: SlimPod) -> Self {
        pod.to_pod()
    }
}

/// Key–value pairs (labels, annotations, resource quantities), sorted by key, in one boxed
/// slice: a `BTreeMap` allocates a node of 11 slots (over 0.5 KiB) for the two to five
/// entries a pod has, and the pod store holds four such maps per pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pairs<V>(Box<[(Box<str>, V)]>);

impl<V> From<BTreeMap<String, V>> for Pairs<V> {
    fn from(map: BTreeMap<String, V>) -> Self {
        Self(
            map.into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v))
                .collect(),
        )
    }
}

impl Pairs<CompactText> {
    /// Text pairs with long values deflated.
    pub fn compact(map: BTreeMap<String, String>) -> Self {
        Self(
            map.into_iter()
                .map(|(k, v)| (k.into_boxed_str(), CompactText::from(v)))
                .collect(),
        )
    }

    /// The pairs as a map of text again.
    pub fn to_text_map(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_text()))
            .collect()
    }
}

impl<V> Pairs<V> {
    /// The value of `key` (the pairs are sorted by key).
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .and_then(|index| self.0.get(index))
            .map(|(_, value)| value)
    }
}

impl<V: Clone> Pairs<V> {
    /// The pairs as a map again.
    pub fn to_map(&self) -> BTreeMap<String, V> {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }
}

/// The part of a pod's spec vramfit reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    /// The node it is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Containers: name and resources.
    #[serde(default)]
    pub containers: Vec<SlimContainer>,
    /// Init containers: name and resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<SlimContainer>,
}

/// A container's name and resources.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(from = "WireContainer", into = "WireContainer")]
pub struct SlimContainer {
    /// Its name.
    pub name: String,
    /// Limits.
    pub limits: Option<Pairs<Quantity>>,
    /// Requests.
    pub requests: Option<Pairs<Quantity>>,
}

/// A container as the watch sends it, parsed slim.
#[derive(Deserialize, Serialize)]
struct WireContainer {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resources: Option<ResourceRequirements>,
}

impl From<WireContainer> for SlimContainer {
    fn from(wire: WireContainer) -> Self {
        let resources = wire.resources.unwrap_or_default();
        Self {
            name: wire.name,
            limits: resources.limits.map(Pairs::from),
            requests: resources.requests.map(Pairs::from),
        }
    }
}

impl From<SlimContainer> for WireContainer {
    fn from(container: SlimContainer) -> Self {
        Self {
            resources: container.resources(),
            name: container.name,
        }
    }
}

impl SlimContainer {
    /// Its resources as the API types them (claims are not kept).
    pub fn resources(&self) -> Option<ResourceRequirements> {
        if self.limits.is_none() && self.requests.is_none() {
            return None;
        }
        Some(ResourceRequirements {
            limits: self.limits.as_ref().map(Pairs::to_map),
            requests: self.requests.as_ref().map(Pairs::to_map),
            ..ResourceRequirements::default()
        })
    }
}

/// The metadata fields vramfit reads (everything but managed fields and `selfLink`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    deletion_grace_period_seconds: Option<i64>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    finalizers: Option<Vec<String>>,
}

fn slim_metadata<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let meta = Meta::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: meta.name,
        generate_name: meta.generate_name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        labels: meta.labels,
        annotations: meta.annotations,
        owner_references: meta.owner_references,
        finalizers: meta.finalizers,
        ..ObjectMeta::default()
    })
}

impl Resource for SlimPod {
    const API_VERSION: &'static str = Pod::API_VERSION;
    const GROUP: &'static str = Pod::GROUP;
    const KIND: &'static str = Pod::KIND;
    const VERSION: &'static str = Pod::VERSION;
    const URL_PATH_SEGMENT: &'static str = Pod::URL_PATH_SEGMENT;
    type Scope = NamespaceResourceScope;
}

impl ListableResource for SlimPod {
    const LIST_KIND: &'static str = Pod::LIST_KIND;
}

impl Metadata for SlimPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl SlimPod {
    /// The slim form of a full pod (tests and benchmarks fill the stores with these).
    pub fn of(pod: &Pod) -> Self {
        let slim = |c: &Container| {
            SlimContainer::from(WireContainer {
                name: c.name.clone(),
                resources: c.resources.clone(),
            })
        };
        let mut metadata = ObjectMeta {
            managed_fields: None,
            ..pod.metadata.clone()
        };
        Self {
            labels: metadata.labels.take().map(Pairs::from),
            annotations: metadata.annotations.take().map(Pairs::compact),
            metadata,
            spec: pod.spec.as_ref().map(|spec| SlimPodSpec {
                node_name: spec.node_name.clone(),
                containers: spec.containers.iter().map(slim).collect(),
                init_containers: spec.init_containers.iter().flatten().map(slim).collect(),
            }),
            status: pod.status.clone(),
        }
    }

    /// Label `key`'s value, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    /// Annotation `key`'s value, if set (inflated when it was deflated).
    pub fn annotation(&self, key: &str) -> Option<String> {
        self.annotations
            .as_ref()?
            .get(key)
            .map(CompactText::to_text)
    }

    /// A `Pod` with what this one holds (what the pure functions of the operator read).
    pub fn to_pod(&self) -> Pod {
        let full = |c: &SlimContainer| Container {
            name: c.name.clone(),
            resources: c.resources(),
            ..Container::default()
        };
        Pod {
            metadata: ObjectMeta {
                labels: self.labels.as_ref().map(Pairs::to_map),
                annotations: self.annotations.as_ref().map(Pairs::to_text_map),
                ..self.metadata.clone()
            },
            spec: self.spec.as_ref().map(|spec| PodSpec {
                node_name: spec.node_name.clone(),
                containers: spec.containers.iter().map(full).collect(),
                init_containers: (!spec.init_containers.is_empty())
                    .then(|| spec.init_containers.iter().map(full).collect()),
                ..PodSpec::default()
            }),
            status: self.status.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    #[test]
    fn only_what_vramfit_reads_is_parsed() {
        let text = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "chat-1", "namespace": "team-a", "uid": "u", "resourceVersion": "7",
                "labels": {"vramfit.io/job": "chat"},
                "annotations": {"vramfit.io/spec-hash": "abc"},
                "ownerReferences": [{"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob",
                                     "name": "chat", "uid": "j", "controller": true}],
                "managedFields": [{"manager": "vramfit-operator", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {
                "nodeName": "gpu-1",
                "containers": [{"name": "inference", "image": "vllm",
                                "env": [{"name": "A", "value": "b"}],
                                "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
            "status": {"phase": "Running"},
        });
        let slim: SlimPod = serde_json::from_value(text.clone()).unwrap();
        assert_eq!(slim.metadata.managed_fields, None);
        // Labels and annotations are kept apart from the metadata: read through the slim
        // pod's own accessors (or `to_pod`), never `ResourceExt`.
        assert_eq!(
            slim.annotation("vramfit.io/spec-hash").as_deref(),
            Some("abc")
        );
        assert_eq!(slim.annotation("vramfit.io/cached-model"), None);
        assert_eq!(slim.label("vramfit.io/job"), Some("chat"));
        assert!(kube::ResourceExt::annotations(&slim).is_empty());
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(slim.metadata.owner_references.as_ref().unwrap()[0].uid, "j");
        let pod = slim.to_pod();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("gpu-1"));
        assert_eq!(spec.containers[0].env, None, "not parsed");
        assert_eq!(spec.tolerations, None, "not parsed");
        assert_eq!(crate::stores::gpu_resources::pod_gpu_request(&pod), 2);
        assert_eq!(
            pod.metadata.labels,
            Some([("vramfit.io/job".into(), "chat".into())].into())
        );
        assert_eq!(
            pod.metadata.annotations,
            Some([("vramfit.io/spec-hash".into(), "abc".into())].into())
        );
        // What a watch of slim pods would send again is the pod as read.
        let again: SlimPod = serde_json::from_value(serde_json::to_value(&slim).unwrap()).unwrap();
        assert_eq!(again, slim);
        let full: Pod = serde_json::from_value(text).unwrap();
        assert_eq!(SlimPod::of(&full), slim);
    }

    #[test]
    fn what_reconcile_reads_survives_the_slim_form() {
        let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        let class = fixtures::class("a10g", 4);
        let input = vramfit_planner::resolve_job(&job.spec).unwrap();
        let plan = vramfit_planner::plan_for_class(&input, &class, &Default::default()).unwrap();
        let pod = crate::pod::build::desired_pod(&job, &input, &plan, &class, 1).unwrap();
        let failed =
            fixtures::as_failed(fixtures::created(pod.clone()), "a-1", "OOMKilled", 137, "");
        // Through JSON, as the watch delivers it.
        let slim: SlimPod = serde_json::from_value(serde_json::to_value(&failed).unwrap()).unwrap();
        let seen = slim.to_pod();
        assert_eq!(
            crate::pod::outcome::classify(&seen),
            crate::pod::outcome::classify(&failed)
        );
        assert_eq!(crate::pod::build::recorded_plan(&seen), Some(plan));
        assert_eq!(
            crate::pod::build::recorded_spec_hash(&seen),
            crate::pod::build::recorded_spec_hash(&pod)
        );
        assert!(crate::pod::build::metadata_matches(&seen, &pod));
        assert_eq!(
            crate::stores::gpu_resources::pod_gpu_request(&seen),
            crate::stores::gpu_resources::pod_gpu_request(&pod)
        );
        assert_eq!(
            crate::stores::owning_job(&seen),
            crate::stores::owning_job(&pod)
        );
    }
}
