//! Every manifest in examples/ deserializes into an InferenceJob and passes the checks the
//! CRD's CEL rules make (min ≤ max GPUs, a GGUF model for llamacpp, a preset or numbers).
use std::path::Path;

use vramfit_api::{InferenceJob, Runtime};

#[test]
fn examples_are_valid_inference_jobs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let job: InferenceJob = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let spec = &job.spec;
            assert!(job.metadata.name.is_some(), "{}", path.display());
            assert!(spec.gpus.min <= spec.gpus.max, "{}", path.display());
            let m = &spec.model;
            assert!(
                m.preset.is_some()
                    || (m.parameters.is_some()
                        && m.layers.is_some()
                        && m.hidden_size.is_some()
                        && m.attention_heads.is_some()),
                "{}",
                path.display()
            );
            if spec.runtime == Runtime::Llamacpp {
                assert!(
                    m.preset.is_some() || m.gguf_file_bytes.is_some(),
                    "{}",
                    path.display()
                );
            }
            count += 1;
        }
    }
    assert!(count >= 5, "expected at least five examples, found {count}");
}
