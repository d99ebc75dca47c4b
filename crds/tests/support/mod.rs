//! What the CRD tests share.
use kube::CustomResourceExt;
use serde_json::Value;

/// The generated CRD's `openAPIV3Schema` as it stands, the schema its CEL rules are compiled
/// against.
pub fn crd_schema<T: CustomResourceExt>() -> Value {
    let crd = T::crd();
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .expect("generated CRD has a schema");
    serde_json::to_value(schema).expect("schema serializes")
}
