//! Two operator replicas with leader election: one writer, and failover when it dies.
use std::time::Duration;

use anyhow::{Result, anyhow, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use vramfit_e2e::{
    PREFIX, Suite, consistently, eventually, exactly_one_pod, expect_eq, http_status,
    one_live_pod_per_job,
};

/// Two replicas with --leader-election: one holds the Lease, jobs get exactly one pod, and
/// the other takes over when the leader dies.
pub async fn leader_election(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    let lease_name = format!("{PREFIX}{}", s.run);
    let flags = s.leader_flags(&lease_name);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    s.start_operator("replica-a", &flags, false).await?;
    s.start_operator("replica-b", &flags, false).await?;
    let leases: Api<Lease> = Api::namespaced(s.client.clone(), &s.ns);
    let holder = |leases: Api<Lease>, name: String| async move {
        let lease = leases
            .get_opt(&name)
            .await?
            .ok_or_else(|| anyhow!("Lease {name} does not exist"))?;
        lease
            .spec
            .and_then(|sp| sp.holder_identity)
            .filter(|h| !h.is_empty())
            .ok_or_else(|| anyhow!("Lease {name} has no holderIdentity"))
    };
    let leader = eventually(
        "a replica to hold the Lease",
        Duration::from_secs(60),
        || {
            let (l, n) = (leases.clone(), lease_name.clone());
            async move {
                let h = holder(l, n).await?;
                ensure!(
                    h == "replica-a" || h == "replica-b",
                    "holderIdentity {h:?} is neither replica"
                );
                Ok(h)
            }
        },
    )
    .await?;
    // Only the Lease holder is ready (operator/src/health.rs: with leader election, /readyz
    // is 200 only while the lease is held), so only it writes.
    let addrs: Vec<(String, String)> = s
        .operators
        .iter()
        .map(|o| (o.name.clone(), o.addr.clone()))
        .collect();
    eventually(
        "only the leader's /readyz to answer 200",
        Duration::from_secs(60),
        || {
            let (addrs, leader) = (addrs.clone(), leader.clone());
            async move {
                let mut codes = vec![];
                for (name, addr) in &addrs {
                    let code = http_status(addr, "/readyz").await.ok();
                    codes.push((name.clone(), code));
                }
                let ready: Vec<_> = codes
                    .iter()
                    .filter(|(_, c)| *c == Some(200))
                    .map(|(n, _)| n.clone())
                    .collect();
                ensure!(
                    ready == vec![leader.clone()],
                    "leader {leader}, /readyz codes {codes:?}"
                );
                println!("     /readyz: {codes:?} (leader {leader})");
                Ok(())
            }
        },
    )
    .await?;
    for op in &mut s.operators {
        op.check_alive()?;
    }
    let name = "e2e-leader";
    s.apply_job(s.own_job(name, 3)).await?;
    let (job, _) = s.wait_pod(name, 1).await?;
    consistently(
        "exactly one pod for the job with two replicas",
        Duration::from_secs(8),
        || async {
            exactly_one_pod(&s.pods_of(&job).await?)?;
            expect_eq(
                "Lease holder",
                holder(leases.clone(), lease_name.clone()).await?,
                leader.clone(),
            )
        },
    )
    .await?;

    // Failover.
    let index = s
        .operators
        .iter()
        .position(|o| o.name == leader)
        .ok_or_else(|| anyhow!("leader process not found"))?;
    // A job arrives just before the leader dies: whoever places it, it gets one pod.
    let in_flight = "e2e-during-failover";
    s.apply_job(s.own_job(in_flight, 3)).await?;
    let mut dead = s.operators.remove(index);
    dead.kill();
    let other = if leader == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    let survivor_addr = s
        .operators
        .iter()
        .find(|o| o.name == other)
        .map(|o| o.addr.clone())
        .ok_or_else(|| anyhow!("{other} process not found"))?;
    eventually(
        &format!("{other} to take the Lease after {leader} died"),
        Duration::from_secs(90),
        || {
            let (l, n, addr) = (leases.clone(), lease_name.clone(), survivor_addr.clone());
            async move {
                let h = holder(l, n).await?;
                ensure!(h == other, "holderIdentity {h:?}");
                let code = http_status(&addr, "/readyz").await?;
                ensure!(
                    code == 200,
                    "{other} holds the Lease but /readyz answers {code}"
                );
                Ok(())
            }
        },
    )
    .await?;
    let name = "e2e-failover";
    s.apply_job(s.own_job(name, 3)).await?;
    let (job, _) = s.wait_pod(name, 1).await?;
    let (in_flight_job, _) = s.wait_pod(in_flight, 1).await?;
    consistently(
        "exactly one pod for each job after failover",
        Duration::from_secs(5),
        || async {
            exactly_one_pod(&s.pods_of(&job).await?)?;
            exactly_one_pod(&s.pods_of(&in_flight_job).await?)?;
            one_live_pod_per_job(s).await
        },
    )
    .await?;
    // The survivor converged as it was: never restarted.
    for op in &mut s.operators {
        op.check_alive()?;
    }
    let deleted = s
        .delete_jobs(&[
            "e2e-leader".to_string(),
            in_flight.to_string(),
            name.to_string(),
        ])
        .await;
    s.stop_operators();
    deleted
}
