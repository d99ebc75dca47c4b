//! A small world for the served-job rules: a job, its pods as a store would show them, the
//! nodes, its Service and PDB, and a clock. `decide` runs the pure decision; `carry_out`
//! does what the apply and status steps would (pods created as the API server returns them,
//! deleted pods gone, the status written).
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use vramfit_api::{GpuNodeClass, InferenceJob, InferenceJobSpec, ReplicaStatus, ServeSpec};
use vramfit_planner::resolve_job;

use crate::backoff::Backoff;
use crate::capacity::{Capacity, PodConstraints, build_inventory};
use crate::fixtures;
use crate::ownership::ObjectWrite;
use crate::pod::PodSeen;
use crate::replicas::decide::{ServedDecision, ServedObserved, next_served};
use crate::stores::gpu_usage::gpu_usage;

pub struct World {
    pub job: InferenceJob,
    pub pods: BTreeMap<String, Pod>,
    pub nodes: Vec<Arc<Node>>,
    /// GpuNodeClasses (prices).
    pub classes: Vec<Arc<DeserializeGuard<GpuNodeClass>>>,
    pub service: Option<Service>,
    pub pdb: Option<PodDisruptionBudget>,
    pub now: Time,
}

/// Mistral-7B on vLLM, context 8192 × batch 4, served with `serve`.
pub fn served_spec(serve: ServeSpec) -> InferenceJobSpec {
    let mut spec = fixtures::vllm_mistral_spec();
    spec.context_length = Some(8192);
    spec.batch_size = 4;
    spec.serve = Some(serve);
    spec
}

pub fn replicas(n: u32) -> ServeSpec {
    ServeSpec {
        replicas: n,
        ..ServeSpec::default()
    }
}

impl World {
    /// `spec` served on `nodes`, at t = 1,000,000 s.
    pub fn new(spec: InferenceJobSpec, nodes: Vec<Node>) -> Self {
        Self {
            job: fixtures::job("chat", spec),
            pods: BTreeMap::new(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            classes: Vec::new(),
            service: None,
            pdb: None,
            now: Time(Timestamp::from_second(1_000_000).unwrap()),
        }
    }

    /// One L40S×1 node (1.80 $/h) and one A10G×1 node (0.60 $/h): the L40S is the better
    /// class for the job (bfloat16; 8-bit on the A10G), the A10G the cheaper.
    pub fn two_classes(spec: InferenceJobSpec) -> Self {
        let mut world = Self::new(
            spec,
            vec![
                fixtures::gpu_node("l-1", "l40s", 1, 1),
                fixtures::gpu_node("a-1", "a10g", 1, 1),
            ],
        );
        world.classes = vec![
            fixtures::gpu_node_class_override("l40s-x1", 180),
            fixtures::gpu_node_class_override("a10g-x1", 60),
        ];
        world
    }

    pub fn decide(&self) -> ServedDecision {
        let input = resolve_job(&self.job.spec);
        let inventory = build_inventory(&self.nodes, &self.classes);
        let pods = |name: &str| match self.pods.get(name) {
            Some(pod) if crate::observe::controlled_by(pod, &self.job) => {
                PodSeen::Observed(Arc::new(pod.clone()))
            }
            Some(_) => PodSeen::Foreign,
            None => PodSeen::Absent,
        };
        let owned: Vec<String> = self
            .pods
            .values()
            .filter(|p| crate::observe::controlled_by(p, &self.job))
            .map(|p| p.name_any())
            .collect();
        let all: Vec<Arc<Pod>> = self.pods.values().cloned().map(Arc::new).collect();
        let usage = gpu_usage(&all);
        let constraints = PodConstraints::of_job(&self.job);
        let capacity = || Capacity::compute(&inventory, &usage, &[], &constraints, &|_| true);
        let serve = self.job.spec.serve.clone().expect("a served job");
        let backoff = Backoff::default();
        let observed = ServedObserved {
            job: &self.job,
            serve: &serve,
            input: &input,
            pods: &pods,
            owned: &owned,
            terminating: 0,
            inventory: &inventory,
            capacity: &capacity,
            service: self.service.as_ref(),
            pdb: self.pdb.as_ref(),
            now: self.now.clone(),
            backoff: &backoff,
            start_deadline: Duration::from_secs(900),
            schedule_deadline: Duration::from_secs(
                self.job
                    .spec
                    .schedule_deadline_seconds
                    .unwrap_or(vramfit_api::DEFAULT_SCHEDULE_DEADLINE_SECONDS)
                    .into(),
            ),
            unschedulable_requeue: Duration::from_secs(300),
            resync: Duration::from_secs(3600),
            model_cache: None,
        };
        next_served(&observed).expect("a decision")
    }

    /// Does what the writes of `decision` would do; returns it.
    pub fn carry_out(&mut self, decision: &ServedDecision) {
        for name in &decision.delete_pods {
            self.pods.remove(name);
        }
        for (pod, _) in &decision.create_pods {
            self.pods
                .insert(pod.name_any(), fixtures::created(pod.clone()));
        }
        for pod in &decision.apply_pods {
            let name = pod.name_any();
            if let Some(existing) = self.pods.get_mut(&name) {
                existing.metadata.labels = pod.metadata.labels.clone();
                existing.metadata.annotations = pod.metadata.annotations.clone();
            }
        }
        // A created object is the job's; a foreign one of that name stays (the API server
        // refuses the create).
        match &decision.service {
            ObjectWrite::Keep | ObjectWrite::Delete { .. } => {}
            ObjectWrite::Create(service)
            | ObjectWrite::Apply {
                object: service, ..
            } => {
                if self.service.as_ref().is_none_or(|s| {
                    crate::replicas::service::controlled_by(s.owner_references(), &self.job)
                }) {
                    self.service = Some((**service).clone());
                }
            }
        }
        match &decision.pdb {
            ObjectWrite::Keep => {}
            ObjectWrite::Create(pdb) | ObjectWrite::Apply { object: pdb, .. } => {
                if self.pdb.as_ref().is_none_or(|p| {
                    crate::replicas::service::controlled_by(p.owner_references(), &self.job)
                }) {
                    self.pdb = Some((**pdb).clone());
                }
            }
            ObjectWrite::Delete { .. } => self.pdb = None,
        }
        self.job.status = Some(decision.status.clone());
    }

    /// Decides and carries the decision out.
    pub fn step(&mut self) -> ServedDecision {
        let decision = self.decide();
        self.carry_out(&decision);
        decision
    }

    pub fn lines(&self) -> Vec<ReplicaStatus> {
        self.job
            .status
            .as_ref()
            .map(|s| s.replica_statuses.clone())
            .unwrap_or_default()
    }

    pub fn line(&self, slot: u32) -> ReplicaStatus {
        self.lines()
            .into_iter()
            .find(|l| l.slot == slot)
            .unwrap_or_else(|| panic!("no replica {slot}: {:?}", self.lines()))
    }

    /// The kubelet: pod `name` runs on its node (the class's first node), Ready or not.
    pub fn run(&mut self, name: &str, ready: bool) {
        let node = self.node_of(name);
        let pod = self.pods.remove(name).expect("the pod");
        let mut pod = fixtures::as_running(pod, &node);
        pod.status.get_or_insert_default().conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            last_transition_time: Some(self.now.clone()),
            ..PodCondition::default()
        }]);
        self.pods.insert(name.to_string(), pod);
    }

    /// The kubelet: pod `name` ended with `reason`, exit code and message.
    pub fn fail(&mut self, name: &str, reason: &str, code: i32, message: &str) {
        let node = self.node_of(name);
        let pod = self.pods.remove(name).expect("the pod");
        self.pods.insert(
            name.to_string(),
            fixtures::as_failed(pod, &node, reason, code, message),
        );
    }

    /// The kubelet: pod `name` refused at admission on its node with `reason`
    /// (`UnexpectedAdmissionError` when the device plugin's `Allocate` fails).
    pub fn refuse(&mut self, name: &str, reason: &str) {
        let node = self.node_of(name);
        let pod = self.pods.remove(name).expect("the pod");
        self.pods
            .insert(name.to_string(), fixtures::as_refused(pod, &node, reason));
    }

    /// Every replica pod runs Ready.
    pub fn all_ready(&mut self) {
        let names: Vec<String> = self.pods.keys().cloned().collect();
        for name in names {
            self.run(&name, true);
        }
    }

    pub fn later(&mut self, seconds: u64) {
        self.now = crate::backoff::add(&self.now, Duration::from_secs(seconds));
    }

    /// The node pod `name` is (or would be) bound to: its own, else a node of its class with
    /// a GPU no other pod holds (the scheduler's job).
    fn node_of(&self, name: &str) -> String {
        if let Some(node) = self.pods[name]
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
        {
            return node;
        }
        let class = self.pods[name].labels()["vramfit.io/node-class"].clone();
        let busy = |node: &str| {
            self.pods.values().any(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                    && !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Failed" | "Succeeded")
                    )
            })
        };
        self.nodes
            .iter()
            .filter(|n| {
                build_inventory(std::slice::from_ref(n), &[])
                    .class(&class)
                    .is_some()
            })
            .map(|n| n.name_any())
            .find(|n| !busy(n))
            .unwrap_or_else(|| panic!("no free node of {class} for {name}"))
    }

    pub fn condition(&self, type_: &str) -> (String, String, String) {
        let c = self
            .job
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_).cloned())
            .unwrap_or_else(|| panic!("no {type_} condition"));
        (c.status, c.reason, c.message)
    }

    /// The value of `--flag` in pod `name`'s args.
    pub fn flag(&self, name: &str, flag: &str) -> Option<String> {
        let args = self.pods[name].spec.as_ref()?.containers[0].args.clone()?;
        let at = args.iter().position(|a| a == flag)?;
        args.get(at + 1).cloned()
    }
}

/// The reasons of `decision`'s events, in order.
pub fn reasons(decision: &ServedDecision) -> Vec<&'static str> {
    decision.events.iter().map(|e| e.reason.as_str()).collect()
}
