//! A replica's `weights` status, read back from its pod (pure): where the weights came from
//! (the pod's `vramfit.io/weights-source` annotation, written when it was created; a pod
//! without one fetched them itself), the cached model it mounts, and how long the load took —
//! the container's start to the pod's Ready condition.
use k8s_openapi::api::core::v1::Pod;
use vramfit_api::model_cache::{POD_MODEL_ANNOTATION, ReplicaWeights, WeightsSource};

use super::{WEIGHTS_NOTE_ANNOTATION, WEIGHTS_SOURCE_ANNOTATION};

/// The source an annotation value names.
pub fn parse_source(text: &str) -> Option<WeightsSource> {
    match text {
        "CacheHit" => Some(WeightsSource::CacheHit),
        "FetchedByNode" => Some(WeightsSource::FetchedByNode),
        "FetchedByPod" => Some(WeightsSource::FetchedByPod),
        _ => None,
    }
}

/// The weights of the replica whose pod is `pod`.
pub fn of_pod(pod: &Pod) -> ReplicaWeights {
    let annotations = pod.metadata.annotations.as_ref();
    let source = annotations
        .and_then(|a| a.get(WEIGHTS_SOURCE_ANNOTATION))
        .and_then(|s| parse_source(s))
        .unwrap_or(WeightsSource::FetchedByPod);
    let model = annotations
        .and_then(|a| a.get(POD_MODEL_ANNOTATION))
        .filter(|_| source != WeightsSource::FetchedByPod)
        .cloned();
    let message = annotations
        .and_then(|a| a.get(WEIGHTS_NOTE_ANNOTATION))
        .filter(|_| source == WeightsSource::FetchedByPod)
        .cloned();
    ReplicaWeights {
        source,
        model,
        load_seconds: load_seconds(pod),
        message,
    }
}

/// [`of_pod`] for a pod made with the cache on (it carries the source annotation); `None`
/// for a pod made without it.
pub fn of_marked_pod(pod: &Pod) -> Option<ReplicaWeights> {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(WEIGHTS_SOURCE_ANNOTATION))
        .then(|| of_pod(pod))
}

/// Seconds from the first container's start to the pod's Ready condition, once Ready.
pub fn load_seconds(pod: &Pod) -> Option<u32> {
    let status = pod.status.as_ref()?;
    let started = status
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()?;
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()?;
    let seconds = ready.0.duration_since(started.0).as_secs();
    u32::try_from(seconds.max(0)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStatus, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn the_source_survives_in_the_pod_and_the_load_time_is_start_to_ready() {
        let mut pod = Pod::default();
        assert_eq!(
            of_pod(&pod).source,
            WeightsSource::FetchedByPod,
            "no annotation: the pod fetched"
        );
        pod.metadata.annotations = Some(BTreeMap::from([
            (
                WEIGHTS_SOURCE_ANNOTATION.to_string(),
                "CacheHit".to_string(),
            ),
            (POD_MODEL_ANNOTATION.to_string(), "o/m@main".to_string()),
        ]));
        pod.status = Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(at(100)),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let weights = of_pod(&pod);
        assert_eq!(weights.source, WeightsSource::CacheHit);
        assert_eq!(weights.model.as_deref(), Some("o/m@main"));
        assert_eq!(weights.load_seconds, None, "not Ready yet");
        pod.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(at(142)),
            ..Default::default()
        }]);
        assert_eq!(of_pod(&pod).load_seconds, Some(42));
    }

    #[test]
    fn why_a_pod_fetches_its_model_itself_is_read_back_from_it() {
        let mut pod = Pod::default();
        crate::model_cache::mount::mark_source(&mut pod, WeightsSource::FetchedByPod);
        crate::model_cache::mount::mark_note(
            &mut pod,
            &format!("held elsewhere {}", "é".repeat(300)),
        );
        let weights = of_pod(&pod);
        assert_eq!(weights.source, WeightsSource::FetchedByPod);
        let message = weights.message.unwrap();
        assert!(
            message.starts_with("held elsewhere ") && message.len() <= 512,
            "{message}"
        );
        crate::model_cache::mount::mark_source(&mut pod, WeightsSource::CacheHit);
        assert_eq!(
            of_pod(&pod).message,
            None,
            "a note only explains a pod's own fetch"
        );
    }
}
