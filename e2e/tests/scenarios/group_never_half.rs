//! All or nothing: a group whose plan needs N nodes gets no pod while only N-1 nodes of its
//! class have room, and all N once one more node joins.
use std::time::Duration;

use anyhow::{Result, ensure};
use kube::ResourceExt as _;
use vramfit_e2e::{
    Suite, check_group, conditions_of, consistently, eventually, group_class, two_node_job,
};

/// A 2-node job with one node of its class: no pod for 10 s, and a False condition saying
/// why (no room in its class for the whole group); a second node added: the whole group of 2
/// is created.
pub async fn never_half(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let nodes = s.group_nodes("half").await?;
    let name = "e2e-group-half";
    let outcome = async {
        nodes.add(s, 4, 1).await?;
        s.apply_job(two_node_job(s, name)).await?;
        // The operator has seen the job: it says why it placed nothing.
        let job = eventually(
            &format!("job {name} to say why it has no pod"),
            Duration::from_secs(60),
            || async {
                let job = s.job(name).await?;
                let waiting = job.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.status == "False" && !c.message.is_empty())
                });
                ensure!(waiting, "conditions {:?}", conditions_of(&job));
                Ok(job)
            },
        )
        .await?;
        println!("     with one node: {:?}", conditions_of(&job));
        consistently(
            "no pod of a group with room on one node of two",
            Duration::from_secs(10),
            || async {
                let pods = s.pods_of(&job).await?;
                ensure!(
                    pods.is_empty(),
                    "pods {:?}",
                    pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
                );
                Ok(())
            },
        )
        .await?;
        // Why: the class (planned, not refused) has no room for the whole group.
        let job = s.job(name).await?;
        let class = group_class(4);
        ensure!(
            job.status.as_ref().is_some_and(|st| st.conditions.iter().any(|c| {
                c.status == "False"
                    && c.message.contains(&class)
                    && (c.message.contains("room") || c.message.contains("free"))
                    && !c.message.contains("does not fit")
            })),
            "job {name} should say in a False condition that {class} lacks room for its group: {:?}",
            conditions_of(&job)
        );

        nodes.add(s, 4, 1).await?;
        let attempt = s
            .job(name)
            .await?
            .status
            .map_or(0, |st| st.attempt_count)
            .max(1);
        let (job, pods) = s.wait_group(name, attempt).await?;
        check_group(&job, attempt, &pods, &s.sim_nodes().await?)?;
        s.check_group_objects(&job, attempt, &pods).await?;
        Ok(())
    }
    .await;
    s.delete_jobs(&[name.to_string()]).await?;
    nodes.remove_all(s).await?;
    outcome
}
