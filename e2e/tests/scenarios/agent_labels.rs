//! The real `vramfit-agent` labels the simulated nodes from its fixtures; every other
//! scenario places on those labels.
use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt as _;
use kube::api::Api;
use vramfit_e2e::{SIM_NODES, Suite};

/// The real agent labels each simulated node from its fixture (server-side apply, field
/// manager `vramfit-agent`).
pub async fn agent_labels_nodes(s: &mut Suite) -> Result<()> {
    let nodes: Api<Node> = Api::all(s.client.clone());
    for sim in SIM_NODES {
        let name = sim.name(&s.run);
        s.label_with_agent(sim.fixture, &name).await?;
        let node = nodes.get(&name).await?;
        sim.check_labels(node.labels())
            .with_context(|| format!("node {name} labelled from {}", sim.fixture))?;
        let managers: Vec<_> = node
            .managed_fields()
            .iter()
            .filter_map(|m| m.manager.clone())
            .collect();
        ensure!(
            managers.iter().any(|m| m == "vramfit-agent"),
            "node {name}: no managedFields entry of field manager vramfit-agent, saw {managers:?}"
        );
        println!(
            "     {name}: {} = {:?}",
            vramfit_api::labels::GPU_PRODUCT,
            node.labels().get(vramfit_api::labels::GPU_PRODUCT)
        );
    }
    Ok(())
}
