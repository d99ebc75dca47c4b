//! An API server stand-in for controller tests (kube-rs controller-rs style): a
//! `tower_test` mock behind a real `kube::Client`, and an [`ApiServerVerifier`] that asserts
//! each request the reconcile makes, in order (method, path with the field manager, body) and
//! answers it.
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use kube::client::Body;
use kube::{Client, Resource};
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};
use vramfit_api::InferenceJob;

use crate::context::Context;
use crate::fixtures::NAMESPACE;
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::stores::{StoreWriters, Stores};

/// Query string of every server-side apply.
pub const APPLY_QUERY: &str = "?&force=true&fieldManager=vramfit-operator";

/// Asserts and answers the requests of one reconcile.
pub struct ApiServerVerifier {
    handle: Handle<Request<Body>, Response<Body>>,
}

/// A context whose client talks to the verifier, with empty writable stores.
pub fn test_context() -> (Arc<Context>, ApiServerVerifier, StoreWriters) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (stores, writers) = Stores::writable();
    let ctx = Context::new(
        client,
        Arc::new(Metrics::new()),
        stores,
        Settings::default(),
        None,
    );
    (Arc::new(ctx), ApiServerVerifier { handle }, writers)
}

/// [`test_context`] with served jobs' caches whose writers the test holds.
pub fn test_context_with_serving() -> (
    Arc<Context>,
    ApiServerVerifier,
    StoreWriters,
    crate::serving_state::ServingWriters,
) {
    test_context_with_settings(Settings::default())
}

/// [`test_context_with_serving`] with `settings` (the model cache on, say).
pub fn test_context_with_settings(
    settings: Settings,
) -> (
    Arc<Context>,
    ApiServerVerifier,
    StoreWriters,
    crate::serving_state::ServingWriters,
) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (stores, writers) = Stores::writable();
    let (serving, serving_writers) = crate::serving_state::ServingState::writable();
    let ctx = Context::new(client, Arc::new(Metrics::new()), stores, settings, None)
        .with_serving(serving);
    (
        Arc::new(ctx),
        ApiServerVerifier { handle },
        writers,
        serving_writers,
    )
}

pub fn respond(send: SendResponse<Response<Body>>, status: u16, body: &Value) {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    match Response::builder().status(status).body(Body::from(bytes)) {
        Ok(response) => send.send_response(response),
        Err(error) => panic!("building a response: {error}"),
    }
}

/// The resourceVersion the API server gives `job` after a write (numbers in tests).
pub fn next_resource_version(job: &InferenceJob) -> String {
    let current: u64 = job
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (current + 1).to_string()
}

impl ApiServerVerifier {
    pub(crate) async fn next(&mut self) -> (Request<Body>, SendResponse<Response<Body>>) {
        match tokio::time::timeout(Duration::from_secs(5), self.handle.next_request()).await {
            Ok(Some(pair)) => pair,
            Ok(None) => panic!("the client went away before the expected request"),
            Err(_) => panic!("no request within 5 s"),
        }
    }

    pub(crate) async fn body(request: Request<Body>) -> Value {
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }

    /// Expects the server-side apply of pod `name`; answers with the pod, created. Returns the
    /// applied body.
    pub async fn pod_apply(&mut self, name: &str) -> Value {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH, "{}", request.uri());
        assert_eq!(
            request.uri().to_string(),
            format!("/api/v1/namespaces/{NAMESPACE}/pods/{name}{APPLY_QUERY}")
        );
        assert_eq!(
            request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some("application/apply-patch+yaml")
        );
        Self::answer_pod(request, send, name, 200).await
    }

    /// Expects the creation of pod `name` (a new attempt's); answers with the pod, created.
    /// Returns the posted body.
    pub async fn pod_create(&mut self, name: &str) -> Value {
        let (request, send) = self.create_request().await;
        Self::answer_pod(request, send, name, 201).await
    }

    /// Checks a pod body for `name` and answers `code` with it, created; returns the body.
    async fn answer_pod(
        request: Request<Body>,
        send: SendResponse<Response<Body>>,
        name: &str,
        code: u16,
    ) -> Value {
        let body = Self::body(request).await;
        assert_eq!(body["apiVersion"], "v1");
        assert_eq!(body["kind"], "Pod");
        assert_eq!(body["metadata"]["name"], name);
        let mut created = body.clone();
        created["metadata"]["uid"] = json!(crate::fixtures::uid(name));
        created["status"] = json!({ "phase": "Pending" });
        respond(send, code, &created);
        body
    }

    async fn create_request(&mut self) -> (Request<Body>, SendResponse<Response<Body>>) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::POST, "{}", request.uri());
        assert_eq!(
            request.uri().to_string(),
            format!("/api/v1/namespaces/{NAMESPACE}/pods?&fieldManager=vramfit-operator")
        );
        (request, send)
    }

    /// Expects the creation of pod `name`; refuses it with `code` and `message`, as the API
    /// server does for an exceeded quota, a pod-security violation, or a name taken (409).
    pub async fn pod_create_rejected(&mut self, name: &str, code: u16, message: &str) {
        let (request, send) = self.create_request().await;
        let body = Self::body(request).await;
        assert_eq!(body["metadata"]["name"], name);
        let reason = if code == 409 {
            "AlreadyExists"
        } else {
            "Forbidden"
        };
        respond(
            send,
            code,
            &json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "message": message, "reason": reason, "code": code }),
        );
    }

    /// Expects a read of pod `name`; answers with `pod`.
    pub async fn pod_get(&mut self, name: &str, pod: &Value) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::GET);
        assert_eq!(
            request.uri().path(),
            format!("/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        );
        respond(send, 200, pod);
    }

    /// Expects the deletion of pod `name`.
    pub async fn pod_delete(&mut self, name: &str) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::DELETE);
        assert_eq!(
            request.uri().path(),
            format!("/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        );
        respond(
            send,
            200,
            &json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name, "namespace": NAMESPACE } }),
        );
    }

    /// Expects the uncached read of object `name` at `collection` (answered with the object of
    /// [`Self::object_uid`], its fields already the apply's), then the server-side apply onto
    /// it; answers with the object. Returns the applied body.
    pub async fn object_apply(&mut self, collection: &str, name: &str) -> Value {
        let live = json!({ "metadata": { "name": name, "namespace": NAMESPACE,
            "uid": Self::object_uid(name), "managedFields": [managed_entry("Apply")] } });
        self.object_get(collection, name, &live).await;
        self.object_apply_only(collection, name).await
    }

    /// [`Self::object_apply`] onto an object the job created and never applied onto: the read
    /// shows the create's `Update` entry, which a merge patch (guarded by the uid) turns into
    /// the apply's before the apply. Returns the applied body.
    pub async fn object_apply_after_create(&mut self, collection: &str, name: &str) -> Value {
        let uid = Self::object_uid(name);
        let mut created = managed_entry("Update");
        created["fieldsV1"] = json!({ "f:spec": { "f:ports": {} } });
        let foreign = json!({ "manager": "kubectl", "operation": "Update", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:metadata": {} } });
        let live = json!({ "metadata": { "name": name, "namespace": NAMESPACE, "uid": uid,
            "managedFields": [created, foreign] } });
        self.object_get(collection, name, &live).await;
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH, "{}", request.uri());
        assert_eq!(
            request.headers()["content-type"],
            "application/merge-patch+json"
        );
        assert_eq!(request.uri().path(), format!("{collection}/{name}"));
        let patch = Self::body(request).await;
        let mut applied = managed_entry("Apply");
        applied["fieldsV1"] = json!({ "f:spec": { "f:ports": {} } });
        assert_eq!(
            patch,
            json!({ "metadata": { "uid": uid, "managedFields": [foreign, applied] } }),
            "the create's entry becomes the apply's; the others stay"
        );
        respond(send, 200, &live);
        self.object_apply_only(collection, name).await
    }

    /// Expects the server-side apply of object `name` at `collection` alone; answers with the
    /// object. Returns the applied body.
    pub async fn object_apply_only(&mut self, collection: &str, name: &str) -> Value {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH, "{}", request.uri());
        assert_eq!(
            request.uri().to_string(),
            format!("{collection}/{name}{APPLY_QUERY}")
        );
        let body = Self::body(request).await;
        assert_eq!(body["metadata"]["name"], name);
        respond(send, 200, &body);
        body
    }

    /// The uid the stand-in gives an object it creates (a Service or PDB named `name`).
    pub fn object_uid(name: &str) -> String {
        format!("object-uid-{name}")
    }

    async fn object_create_request(
        &mut self,
        collection: &str,
        name: &str,
    ) -> (Value, SendResponse<Response<Body>>) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::POST, "{}", request.uri());
        assert_eq!(
            request.uri().to_string(),
            format!("{collection}?&fieldManager=vramfit-operator")
        );
        let body = Self::body(request).await;
        assert_eq!(body["metadata"]["name"], name);
        (body, send)
    }

    /// Expects the creation (a plain create, never an apply) of object `name` at `collection`,
    /// answered with it, created with [`Self::object_uid`]: one write. Returns the posted body.
    pub async fn object_create(&mut self, collection: &str, name: &str) -> Value {
        let (body, send) = self.object_create_request(collection, name).await;
        let mut created = body.clone();
        created["metadata"]["uid"] = json!(Self::object_uid(name));
        respond(send, 201, &created);
        body
    }

    /// Expects the creation of object `name` at `collection`; answers 409 AlreadyExists, as
    /// the API server does when any object holds the name. Returns the posted body.
    pub async fn object_create_exists(&mut self, collection: &str, name: &str) -> Value {
        let (body, send) = self.object_create_request(collection, name).await;
        respond(
            send,
            409,
            &json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "message": format!("\"{name}\" already exists"),
                     "reason": "AlreadyExists", "code": 409 }),
        );
        body
    }

    /// Expects the creation of object `name` at `collection`; refuses it with `code` and
    /// `message`.
    pub async fn object_create_rejected(
        &mut self,
        collection: &str,
        name: &str,
        code: u16,
        message: &str,
    ) {
        let (_, send) = self.object_create_request(collection, name).await;
        respond(
            send,
            code,
            &json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "message": message, "reason": "InternalError", "code": code }),
        );
    }

    /// Expects an (uncached) read of object `name` at `collection`; answers with `object`.
    pub async fn object_get(&mut self, collection: &str, name: &str, object: &Value) {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::GET, "{}", request.uri());
        assert_eq!(request.uri().path(), format!("{collection}/{name}"));
        respond(send, 200, object);
    }

    /// Expects the deletion of object `name` at `collection`; returns the request's body
    /// (its preconditions).
    pub async fn object_delete(&mut self, collection: &str, name: &str) -> Value {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::DELETE, "{}", request.uri());
        assert_eq!(request.uri().path(), format!("{collection}/{name}"));
        let body = Self::body(request).await;
        respond(
            send,
            200,
            &json!({ "kind": "Status", "apiVersion": "v1", "status": "Success" }),
        );
        body
    }

    /// Expects the server-side apply of `job`'s status; answers with the job carrying it.
    /// Returns the applied body.
    pub async fn status_apply(&mut self, job: &InferenceJob) -> Value {
        let name = job.meta().name.clone().unwrap_or_default();
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH, "{}", request.uri());
        assert_eq!(
            request.uri().to_string(),
            format!(
                "/apis/vramfit.io/v1alpha1/namespaces/{NAMESPACE}/inferencejobs/{name}/status{APPLY_QUERY}"
            )
        );
        let body = Self::body(request).await;
        assert_eq!(body["apiVersion"], "vramfit.io/v1alpha1");
        assert_eq!(body["kind"], "InferenceJob");
        assert_eq!(
            body.as_object().map(|o| o.len()),
            Some(3),
            "apiVersion, kind and status only: {body}"
        );
        let mut answer = serde_json::to_value(job).unwrap_or(Value::Null);
        answer["status"] = body["status"].clone();
        answer["metadata"]["resourceVersion"] = json!(next_resource_version(job));
        respond(send, 200, &answer);
        body
    }

    /// Expects a JSON merge patch of a job's status (malformed jobs); returns its body.
    pub async fn status_merge(&mut self, name: &str) -> Value {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::PATCH);
        assert_eq!(
            request.uri().to_string(),
            format!(
                "/apis/vramfit.io/v1alpha1/namespaces/{NAMESPACE}/inferencejobs/{name}/status?&fieldManager=vramfit-operator"
            )
        );
        assert_eq!(
            request
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some("application/merge-patch+json")
        );
        let body = Self::body(request).await;
        respond(
            send,
            200,
            &json!({ "apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob",
                     "metadata": { "name": name, "namespace": NAMESPACE }, "status": body["status"] }),
        );
        body
    }

    /// Expects an event with `reason` on the job `name`; returns its body.
    pub async fn event(&mut self, name: &str, reason: &str) -> Value {
        let (request, send) = self.next().await;
        assert_eq!(request.method(), Method::POST, "{}", request.uri());
        assert_eq!(
            request.uri().path(),
            format!("/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
        );
        let body = Self::body(request).await;
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["regarding"]["name"], name);
        assert_eq!(body["regarding"]["kind"], "InferenceJob");
        assert_eq!(body["reportingController"], "vramfit-operator");
        respond(send, 201, &body);
        body
    }

    /// Expects events with these reasons, in order.
    pub async fn events(&mut self, name: &str, reasons: &[&str]) -> Vec<Value> {
        let mut bodies = Vec::new();
        for reason in reasons {
            bodies.push(self.event(name, reason).await);
        }
        bodies
    }

    /// Asserts that no further request comes.
    pub async fn no_more_requests(&mut self) {
        if let Ok(Some((request, _))) =
            tokio::time::timeout(Duration::from_millis(200), self.handle.next_request()).await
        {
            panic!("unexpected request: {} {}", request.method(), request.uri());
        }
    }
}

/// A managed-fields entry of the operator's field manager.
fn managed_entry(operation: &str) -> Value {
    json!({ "manager": "vramfit-operator", "operation": operation,
            "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {} })
}
