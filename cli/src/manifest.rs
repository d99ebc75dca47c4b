//! Reading InferenceJob and GpuNodeClass manifests from files.
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use vramfit_api::{GpuNodeClass, InferenceJob};
use vramfit_planner::{NodeClass, builtin_classes};

use crate::error::CliError;

/// Reads a file, or standard input for `-`.
fn read(path: &Path) -> Result<String, CliError> {
    let read_err = |source| CliError::Read {
        path: path.to_path_buf(),
        source,
    };
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(read_err)?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(read_err)
}

/// Every YAML document of a file as `T`, checking `apiVersion` and `kind` first so a wrong
/// object gets a clear message rather than a missing-field error.
fn documents<T: DeserializeOwned>(path: &Path, kind: &'static str) -> Result<Vec<T>, CliError> {
    let text = read(path)?;
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
        objects.push(serde_yaml::from_value(value).map_err(|e| parse_err(e.to_string()))?);
    }
    if objects.is_empty() {
        return Err(parse_err("the file holds no object".into()));
    }
    Ok(objects)
}

/// The one InferenceJob of a manifest file.
pub fn read_job(path: &Path) -> Result<InferenceJob, CliError> {
    let mut jobs: Vec<InferenceJob> = documents(path, "InferenceJob")?;
    if jobs.len() > 1 {
        return Err(CliError::Parse {
            path: path.to_path_buf(),
            kind: "InferenceJob",
            message: format!("expected one InferenceJob, found {}", jobs.len()),
        });
    }
    Ok(jobs.remove(0))
}

/// The built-in classes, overridden or extended by GpuNodeClass manifests.
pub fn classes(overrides: Option<&PathBuf>) -> Result<Vec<NodeClass>, CliError> {
    let mut classes = builtin_classes();
    let Some(path) = overrides else {
        return Ok(classes);
    };
    for object in documents::<GpuNodeClass>(path, "GpuNodeClass")? {
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
