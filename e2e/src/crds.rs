//! The project's CRDs on the cluster under test: installed from `crds/*.yaml` (server-side
//! apply) until Established, and removed again when the run installed them.
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt as _};

use crate::{MANAGER, eventually, read_yaml_documents};

/// The CRDs a run applied: all of them, and those that were not installed before (which
/// the run removes at its end).
#[derive(Debug, Default)]
pub struct AppliedCrds {
    pub all: Vec<String>,
    pub installed_by_us: Vec<String>,
}

/// Server-side applies every CRD in `root/crds/` and waits until each is Established.
/// `on_new` hears each name the run is the first to install, before it is created (so that
/// cleanup knows of it even if the run stops half-way).
pub async fn install(
    client: &Client,
    root: &Path,
    mut on_new: impl FnMut(&str),
) -> Result<AppliedCrds> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut applied = AppliedCrds::default();
    for entry in std::fs::read_dir(root.join("crds"))? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        for doc in read_yaml_documents(&path)? {
            let crd: CustomResourceDefinition = serde_json::from_value(doc)
                .with_context(|| format!("{} is not a CRD", path.display()))?;
            let name = crd.name_any();
            if crds.get_opt(&name).await?.is_none() {
                on_new(&name);
                applied.installed_by_us.push(name.clone());
            }
            crds.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&crd),
            )
            .await
            .with_context(|| format!("applying CRD {name}"))?;
            applied.all.push(name);
        }
    }
    for name in &applied.all {
        eventually(
            &format!("CRD {name} to be Established"),
            Duration::from_secs(60),
            || async {
                let conditions = crds
                    .get(name)
                    .await?
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default();
                ensure!(
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True"),
                    "conditions {:?}",
                    conditions
                        .iter()
                        .map(|c| (&c.type_, &c.status))
                        .collect::<Vec<_>>()
                );
                Ok(())
            },
        )
        .await?;
    }
    Ok(applied)
}

/// Deletes the CRDs `names` and waits until they are gone (the API server first removes
/// their objects): a next run must not find them Terminating. Problems are appended.
pub async fn remove(client: &Client, names: &[String], problems: &mut Vec<String>) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in names {
        if let Err(e) = crds.delete(crd, &DeleteParams::default()).await
            && !is_not_found(&e)
        {
            problems.push(format!("CRD {crd}: {e}"));
        }
    }
    let gone = eventually(
        "the run's CRDs to be gone",
        Duration::from_secs(60),
        || async {
            let mut left = vec![];
            for crd in names {
                if crds.get_opt(crd).await?.is_some() {
                    left.push(crd.clone());
                }
            }
            ensure!(left.is_empty(), "{left:?} still there");
            Ok(())
        },
    )
    .await;
    if let Err(e) = gone {
        problems.push(format!("{e:#}"));
    }
}

/// A 404 from the API server.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}
