//! Reading InferenceJob and GpuNodeClass manifests from files.
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use vramfit_api::{GpuNodeClass, InferenceJob, ModelSpec};
use vramfit_planner::{NodeClass, builtin_classes};

use crate::error::CliError;
use crate::{nesting, validate};

/// The largest manifest read: the API server's limit for one request body (3 MiB), so that a
/// huge file is refused before it is parsed.
pub const MAX_MANIFEST_BYTES: u64 = 3 * 1024 * 1024;

/// Reads a file, or standard input for `-`, up to [`MAX_MANIFEST_BYTES`].
fn read(path: &Path) -> Result<String, CliError> {
    let read_err = |source| CliError::Read {
        path: path.to_path_buf(),
        source,
    };
    let source: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).map_err(read_err)?)
    };
    let mut bytes = Vec::new();
    source
        .take(MAX_MANIFEST_BYTES.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if u64::try_from(bytes.len()).map_or(true, |n| n > MAX_MANIFEST_BYTES) {
        return Err(CliError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text ({e})"),
        ))
    })
}

/// Every YAML document of a file as `K`, admitted as the API server would admit it
/// (`apiVersion` and `kind` first, then the CRD's schema and rules).
fn documents<K>(
    path: &Path,
    kind: &'static str,
    prepare: &dyn Fn(&mut serde_json::Value),
) -> Result<Vec<K>, CliError>
where
    K: DeserializeOwned + kube::CustomResourceExt,
{
    let text = read(path)?;
    nesting::check(&text).map_err(|deep| CliError::TooDeep {
        path: path.to_path_buf(),
        line: deep.line,
    })?;
    let parse_err = |message: String| CliError::Parse {
        path: path.to_path_buf(),
        kind,
        message,
    };
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value =
            serde_yaml::Value::deserialize(document).map_err(|e| parse_err(e.to_string()))?;
        if value.is_null() {
            continue; // an empty document between `---` separators
        }
        let found_kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("<none>");
        let api_version = value
            .get("apiVersion")
            .and_then(|k| k.as_str())
            .unwrap_or("<none>");
        if found_kind != kind || api_version != "vramfit.io/v1alpha1" {
            return Err(parse_err(format!(
                "expected apiVersion vramfit.io/v1alpha1 and kind {kind}, found {api_version} {found_kind}"
            )));
        }
        let mut object: serde_json::Value =
            serde_json::to_value(&value).map_err(|e| parse_err(e.to_string()))?;
        prepare(&mut object);
        let problems = validate::admit::<K>(&mut object);
        if !problems.is_empty() {
            return Err(CliError::Refused {
                path: path.to_path_buf(),
                kind,
                problems,
            });
        }
        objects.push(serde_json::from_value(object).map_err(|e| parse_err(e.to_string()))?);
    }
    if objects.is_empty() {
        return Err(parse_err("the file holds no object".into()));
    }
    Ok(objects)
}

/// The one InferenceJob of a manifest file.
pub fn read_job(path: &Path) -> Result<InferenceJob, CliError> {
    read_job_filled(path, None)
}

/// The one InferenceJob of a manifest file, with the `model:` fields it leaves unset taken
/// from `read` (a checkpoint's numbers) before it is admitted: the filled job is what the
/// API server must take, so a checkpoint's number past a schema bound is refused as a typed
/// one would be.
pub fn read_job_filled(path: &Path, read: Option<&ModelSpec>) -> Result<InferenceJob, CliError> {
    let mut jobs = read_jobs(path, read)?;
    if jobs.len() > 1 {
        return Err(CliError::Parse {
            path: path.to_path_buf(),
            kind: "InferenceJob",
            message: format!("expected one InferenceJob, found {}", jobs.len()),
        });
    }
    Ok(jobs.remove(0))
}

/// Every InferenceJob of a manifest file, each filled from `read` as [`read_job_filled`]
/// fills its one.
fn read_jobs(path: &Path, read: Option<&ModelSpec>) -> Result<Vec<InferenceJob>, CliError> {
    let fill = |object: &mut serde_json::Value| {
        if let Some(read) = read {
            fill_model(object, read);
        }
    };
    documents(path, "InferenceJob", &fill)
}

/// The job `vramfit plan` plans, and the fine-tuning jobs beside it in its file.
#[derive(Clone, Debug)]
pub struct JobFile {
    /// The job planned.
    pub job: InferenceJob,
    /// Fine-tuning jobs (`spec.tuning`) whose adapters the served job lists (`serve.adapters`).
    pub tuning_jobs: Vec<InferenceJob>,
}

/// The one InferenceJob of a manifest file, or a served job with `serve.adapters` and the
/// fine-tuning jobs that write its adapters (every other document of the file, each with
/// `spec.tuning`), filled from `read` as [`read_job_filled`] fills one.
pub fn read_job_file(path: &Path, read: Option<&ModelSpec>) -> Result<JobFile, CliError> {
    let jobs = read_jobs(path, read)?;
    let count = jobs.len();
    let (tuning_jobs, mut others): (Vec<InferenceJob>, Vec<InferenceJob>) =
        jobs.into_iter().partition(|j| j.spec.tuning.is_some());
    if count == 1 {
        let job = others.pop().or_else(|| tuning_jobs.first().cloned());
        if let Some(job) = job {
            return Ok(JobFile {
                job,
                tuning_jobs: Vec::new(),
            });
        }
    }
    let with_adapters = |j: &InferenceJob| {
        j.spec
            .serve
            .as_ref()
            .is_some_and(|s| !s.adapters.is_empty())
    };
    match others.pop() {
        Some(job) if others.is_empty() && with_adapters(&job) => Ok(JobFile { job, tuning_jobs }),
        _ => Err(CliError::Parse {
            path: path.to_path_buf(),
            kind: "InferenceJob",
            message: format!(
                "expected one InferenceJob, found {count} (beside a served job with serve.adapters, a file may hold the fine-tuning jobs that write its adapters)"
            ),
        }),
    }
}

/// The built-in classes, overridden or extended by GpuNodeClass manifests.
pub fn classes(overrides: Option<&PathBuf>) -> Result<Vec<NodeClass>, CliError> {
    let mut classes = builtin_classes();
    let Some(path) = overrides else {
        return Ok(classes);
    };
    for object in documents::<GpuNodeClass>(path, "GpuNodeClass", &|_| {})? {
        let name = object.metadata.name.clone().unwrap_or_default();
        let invalid = |message| CliError::InvalidSpec {
            path: path.clone(),
            message,
        };
        if name.is_empty() {
            return Err(invalid("a GpuNodeClass needs metadata.name".into()));
        }
        match classes.iter_mut().find(|c| c.name == name) {
            Some(class) => class.apply_overrides(&object.spec),
            None => classes.push(
                NodeClass::from_definition(&name, &object.spec)
                    .map_err(|why| invalid(why.to_string()))?,
            ),
        }
    }
    Ok(classes)
}

/// Sets each field of `read` that `spec.model` of `object` leaves unset (explicit numbers win,
/// field by field). A manifest whose `spec` or `spec.model` is not an object is left as it
/// is, for admission to refuse.
fn fill_model(object: &mut serde_json::Value, read: &ModelSpec) {
    let Some(spec) = object
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    let model = spec
        .entry("model")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let (Some(model), Ok(serde_json::Value::Object(read))) =
        (model.as_object_mut(), serde_json::to_value(read))
    else {
        return;
    };
    for (field, value) in read {
        match model.get(&field) {
            Some(explicit) if !explicit.is_null() => {}
            _ => {
                model.insert(field, value);
            }
        }
    }
}
