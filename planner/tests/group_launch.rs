//! What each rank of a group runs (`group::launch::for_rank`), engine by engine, against
//! the flag tables of the pinned runtimes (`runtime_contract::FLAGS` for the leader's flags,
//! `group::contract` for the workers' programs and every env name) and the docs.
mod common;

use common::{job, plan};
use vramfit_api::group::{GroupEngine, GroupPlan};
use vramfit_api::pod_keys::group_pod_name;
use vramfit_api::{Plan, Runtime};
use vramfit_planner::group::contract::{self, Ranks};
use vramfit_planner::group::launch::{CommandLine, GROUP_ENV, RankAddress, RankLaunch, for_rank};
use vramfit_planner::runtime_contract::{self, FLAGS, Values};
use vramfit_planner::{JobInput, workload};

const DOC: &str = include_str!("../../docs/runtime-contracts.md");

const VLLM: &str = "{model: {preset: llama-3.1-8b-instruct}, runtime: vllm, image: x}";
const LLAMACPP: &str =
    "{model: {preset: llama-3.1-8b-instruct-q4_k_m}, runtime: llamacpp, image: x}";
const TUNING: &str = "{model: {preset: llama-3.1-8b-instruct}, runtime: transformers, image: x, tuning: {method: lora}}";

/// A plan of `job` on `class`, made a group of `nodes` pods of the class's GPUs by hand (the
/// planner's side is not what is tested here).
fn group_plan(job: &JobInput, class: &str, engine: GroupEngine, nodes: u32) -> Plan {
    let mut p = plan(job, class).expect("the job fits the class");
    p.gpu_count = common::class(class).gpus_per_node;
    let devices = nodes * p.gpu_count;
    p.group = Some(GroupPlan {
        nodes,
        engine,
        tensor_parallel_size: (engine == GroupEngine::VllmRay).then_some(p.gpu_count),
        pipeline_parallel_size: (engine == GroupEngine::VllmRay).then_some(nodes),
        tensor_split: if engine == GroupEngine::LlamaCppRpc {
            (0..devices)
                .map(|d| 33 / devices + u32::from(d < 33 % devices))
                .collect()
        } else {
            Vec::new()
        },
        layers_per_node: Vec::new(),
        port: match engine {
            GroupEngine::VllmRay => 6379,
            GroupEngine::LlamaCppRpc => 50052,
            GroupEngine::Torchrun => 29500,
        },
        why: "test".to_string(),
    });
    p
}

fn address(nodes: u32, rank: u32) -> RankAddress {
    RankAddress::of_batch_group("chat", "team-a", 3, nodes, rank)
}

fn launches(job: &JobInput, p: &Plan) -> Vec<RankLaunch> {
    (0..p.nodes())
        .map(|rank| for_rank(job, p, &address(p.nodes(), rank)))
        .collect()
}

fn env<'a>(launch: &'a RankLaunch, name: &str) -> Option<&'a str> {
    launch
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The leader's whole argument list (the plan's flags, then the group's) against the
/// runtime's flag table: pairs, each flag in the table once with a value it allows.
fn check_leader(runtime: Runtime, job: &JobInput, p: &Plan, leader: &RankLaunch) {
    let mut args = workload::runtime_args(job, p);
    args.extend(leader.args.iter().cloned());
    let flags = runtime_contract::flags_in(runtime, &args).unwrap_or_else(|why| panic!("{why}"));
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in flags {
        let c = runtime_contract::contract(runtime, name)
            .unwrap_or_else(|| panic!("{name} is not in the {runtime:?} flag table"));
        assert!(c.values.accepts(&value), "{name} {value}");
        assert!(!seen.contains(&name), "{name} twice");
        seen.push(name);
    }
    for f in FLAGS.iter().filter(|f| f.runtime == runtime && f.always) {
        assert!(seen.contains(&f.flag), "{} missing", f.flag);
    }
    // A leader whose command is a shell script gets the same list.
    assert_eq!(
        env(leader, "VRAMFIT_RUNTIME_ARGS"),
        Some(args.join(" ").as_str())
    );
}

/// Every env name of a launch is in the group's env table (or the LWS/vramfit names every
/// rank gets), for its engine and rank, once.
fn check_env(engine: GroupEngine, rank: u32, launch: &RankLaunch) {
    let mut names: Vec<&str> = launch.env.iter().map(|(k, _)| k.as_str()).collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count, "an env name twice: {:?}", launch.env);
    for name in names {
        let row = contract::group_env(name)
            .unwrap_or_else(|| panic!("{name} is not in the group env table"));
        assert!(
            row.engine.is_none_or(|e| e == engine),
            "{name} for {engine:?}"
        );
        assert!(
            row.ranks == Ranks::All || rank == 0,
            "{name} on rank {rank}"
        );
    }
    for name in GROUP_ENV {
        assert!(env(launch, name).is_some(), "{name} on rank {rank}");
    }
}

/// The flags of one program's words (after the program's own words) against the workers'
/// table.
fn check_worker_words(program: &str, words: &[&str]) {
    let mut i = 0;
    while i < words.len() {
        let (flag, inline) = match words[i].split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (words[i], None),
        };
        let row = contract::worker_flag(program, flag)
            .unwrap_or_else(|| panic!("{program} {flag} is not in the workers' table"));
        match row.values {
            None => assert!(inline.is_none(), "{flag} is a switch"),
            Some(values) => {
                let value = inline.unwrap_or_else(|| {
                    i += 1;
                    words.get(i).copied().unwrap_or_default()
                });
                assert!(values.accepts(value), "{program} {flag} {value}");
            }
        }
        i += 1;
    }
}

#[test]
fn a_plan_without_a_group_gets_nothing_and_a_group_of_one_only_the_env() {
    let j = job(VLLM);
    let single = plan(&j, "a10g-x1").unwrap();
    assert_eq!(for_rank(&j, &single, &address(1, 0)), RankLaunch::default());
    let one = group_plan(&j, "a10g-x1", GroupEngine::VllmRay, 1);
    let launch = for_rank(&j, &one, &address(1, 0));
    assert!(launch.command.is_none() && launch.args.is_empty());
    let names: Vec<&str> = launch.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, GROUP_ENV);
}

#[test]
fn addresses_name_every_rank_by_its_pod_and_the_group_service() {
    let a = address(3, 2);
    assert_eq!(a.leader_address, "chat-3-0.chat-3.team-a");
    assert_eq!(
        a.worker_addresses,
        ["chat-3-1.chat-3.team-a", "chat-3-2.chat-3.team-a"]
    );
    // Long job names: the pod names' own truncation and hash.
    let long = "a".repeat(70);
    let b = RankAddress::of_batch_group(&long, "ns", 1, 12, 0);
    assert_eq!(
        b.worker_addresses[10],
        format!(
            "{}.{}.ns",
            group_pod_name(&long, 1, 11),
            vramfit_api::pod_keys::group_name(&long, 1)
        )
    );
}

#[test]
fn every_rank_gets_the_leaderworkerset_names_and_vramfits() {
    let j = job(VLLM);
    let p = group_plan(&j, "h100-80gb-x8", GroupEngine::VllmRay, 4);
    for (rank, launch) in launches(&j, &p).iter().enumerate() {
        assert_eq!(
            env(launch, "LWS_LEADER_ADDRESS"),
            Some("chat-3-0.chat-3.team-a")
        );
        assert_eq!(
            env(launch, "VRAMFIT_LEADER_ADDRESS"),
            Some("chat-3-0.chat-3.team-a")
        );
        assert_eq!(env(launch, "LWS_GROUP_SIZE"), Some("4"));
        assert_eq!(env(launch, "VRAMFIT_GROUP_SIZE"), Some("4"));
        assert_eq!(
            env(launch, "LWS_WORKER_INDEX"),
            Some(rank.to_string().as_str())
        );
        assert_eq!(
            env(launch, "VRAMFIT_GROUP_RANK"),
            Some(rank.to_string().as_str())
        );
        assert_eq!(env(launch, "VRAMFIT_GROUP_PORT"), Some("6379"));
        assert_eq!(env(launch, "VRAMFIT_GROUP_ENGINE"), Some("vllmRay"));
    }
}

#[test]
fn vllm_leader_runs_pipeline_parallel_over_the_nodes_on_ray_and_workers_join_its_head() {
    let j = job(VLLM);
    for (class, nodes) in [("h100-80gb-x8", 2), ("a10g-x1", 4), ("v100-16gb-x4", 16)] {
        let p = group_plan(&j, class, GroupEngine::VllmRay, nodes);
        let all = launches(&j, &p);
        let leader = &all[0];
        assert!(leader.command.is_none());
        assert_eq!(
            leader.args,
            [
                "--pipeline-parallel-size",
                &nodes.to_string(),
                "--distributed-executor-backend",
                "ray"
            ]
        );
        // Tensor parallel stays the plan's: the GPUs of one node.
        let plan_args = workload::runtime_args(&j, &p);
        let tp = plan_args
            .iter()
            .position(|a| a == "--tensor-parallel-size")
            .unwrap();
        assert_eq!(plan_args[tp + 1], p.gpu_count.to_string());
        check_leader(Runtime::Vllm, &j, &p, leader);
        assert_eq!(env(leader, "RAY_ADDRESS"), Some("auto"));
        check_env(GroupEngine::VllmRay, 0, leader);
        for (rank, worker) in all.iter().enumerate().skip(1) {
            let command = worker.command.as_ref().expect("a worker's command");
            assert_eq!(command[..2], ["sh", "-c"]);
            assert_eq!(
                command[2],
                "until ray start --address=chat-3-0.chat-3.team-a:6379 --block; do echo 'waiting for the Ray head at 'chat-3-0.chat-3.team-a:6379; sleep 5; done"
            );
            check_worker_words(
                "ray start",
                &["--address=chat-3-0.chat-3.team-a:6379", "--block"],
            );
            assert!(worker.args.is_empty());
            assert!(env(worker, "RAY_ADDRESS").is_none());
            assert!(env(worker, "VRAMFIT_RUNTIME_ARGS").is_none());
            check_env(GroupEngine::VllmRay, rank as u32, worker);
        }
    }
}

#[test]
fn a_vllm_leader_without_a_command_runs_vllms_multi_node_script_then_serves_its_args() {
    let j = job(VLLM);
    let p = group_plan(&j, "h100-80gb-x8", GroupEngine::VllmRay, 3);
    let all = launches(&j, &p);
    let one_pod = CommandLine {
        command: None,
        args: ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
            .map(String::from)
            .to_vec(),
    };
    let leader = all[0].command_line(one_pod.clone());
    let command = leader.command.expect("the leader's command");
    assert_eq!(command[..2], ["sh", "-c"]);
    assert_eq!(command[3], "vllm-leader");
    let (script, serve) = command[2].split_once(" && ").unwrap();
    assert_eq!(serve, "exec vllm serve \"$@\"");
    let words: Vec<&str> = script.split(' ').collect();
    assert_eq!(
        words[..3],
        [
            "bash",
            "/vllm-workspace/examples/online_serving/multi-node-serving.sh",
            "leader"
        ]
    );
    assert_eq!(
        words[3..],
        [
            "--ray_port=6379",
            "--ray_cluster_size=3",
            "--ray_init_timeout=1800"
        ]
    );
    check_worker_words("multi-node-serving.sh leader", &words[3..]);
    // "$@": the one pod's args, then the group's flags.
    let mut args = one_pod.args.clone();
    args.extend(all[0].args.iter().cloned());
    assert_eq!(leader.args, args);

    // A job's own command wins; the args are the same.
    let own = CommandLine {
        command: Some(vec!["my-entrypoint".to_string()]),
        ..one_pod.clone()
    };
    let kept = all[0].command_line(own);
    assert_eq!(kept.command, Some(vec!["my-entrypoint".to_string()]));
    assert_eq!(kept.args, args);

    // A worker runs its own program, whatever the job's command and args.
    let worker = all[1].command_line(one_pod);
    assert_eq!(worker.command, all[1].command);
    assert!(worker.args.is_empty());

    // Engines without a leader command leave a command-less job to the image's entrypoint.
    let l = job(LLAMACPP);
    let rpc = group_plan(&l, "a10g-x1", GroupEngine::LlamaCppRpc, 2);
    let leader = launches(&l, &rpc)[0].command_line(CommandLine::default());
    assert_eq!(leader.command, None);
    assert!(leader.args.starts_with(&["--rpc".to_string()]));
}

#[test]
fn a_ranks_env_replaces_the_same_names_and_comes_last() {
    let j = job(VLLM);
    let p = group_plan(&j, "h100-80gb-x8", GroupEngine::VllmRay, 2);
    let leader = &launches(&j, &p)[0];
    let planned = vec![
        ("VRAMFIT_RUNTIME_ARGS".to_string(), "plan only".to_string()),
        ("RAY_ADDRESS".to_string(), "job's".to_string()),
        ("KEPT".to_string(), "1".to_string()),
    ];
    let env = leader.with_env(planned, |(k, _)| k.as_str(), |k, v| (k, v));
    assert_eq!(env[0], ("KEPT".to_string(), "1".to_string()));
    assert_eq!(env.len(), 1 + leader.env.len());
    assert_eq!(env[1..], leader.env[..]);
}

#[test]
fn llamacpp_leader_lists_every_worker_gpu_and_the_split_and_workers_serve_each_gpu() {
    let j = job(LLAMACPP);
    for (class, nodes) in [("a10g-x1", 2), ("a10g-x1", 4), ("v100-16gb-x4", 3)] {
        let p = group_plan(&j, class, GroupEngine::LlamaCppRpc, nodes);
        let g = p.gpu_count;
        let all = launches(&j, &p);
        let leader = &all[0];
        assert!(leader.command.is_none());
        let rpc = leader.args.iter().position(|a| a == "--rpc").unwrap();
        let endpoints: Vec<&str> = leader.args[rpc + 1].split(',').collect();
        assert_eq!(endpoints.len() as u32, (nodes - 1) * g, "{class} × {nodes}");
        for (i, endpoint) in endpoints.iter().enumerate() {
            let (worker, gpu) = (i as u32 / g + 1, i as u32 % g);
            assert_eq!(
                *endpoint,
                format!("chat-3-{worker}.chat-3.team-a:{}", 50052 + gpu)
            );
        }
        let split = leader
            .args
            .iter()
            .position(|a| a == "--tensor-split")
            .unwrap();
        let shares: Vec<u32> = leader.args[split + 1]
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(shares.len() as u32, nodes * g);
        assert_eq!(shares.iter().sum::<u32>(), 33);
        check_leader(Runtime::Llamacpp, &j, &p, leader);
        check_env(GroupEngine::LlamaCppRpc, 0, leader);
        for (rank, worker) in all.iter().enumerate().skip(1) {
            let command = worker.command.as_ref().expect("a worker's command");
            let servers: Vec<Vec<&str>> = if g == 1 {
                vec![command.iter().map(String::as_str).collect()]
            } else {
                assert_eq!(command[..2], ["sh", "-c"]);
                command[2]
                    .split(" & ")
                    .map(|s| s.trim_start_matches("exec ").split(' ').collect())
                    .collect()
            };
            assert_eq!(servers.len() as u32, g);
            let mut ports: Vec<u32> = Vec::new();
            for server in &servers {
                assert_eq!(server[0], "rpc-server");
                check_worker_words("rpc-server", &server[1..]);
                let port = server.iter().position(|w| *w == "--port").unwrap();
                ports.push(server[port + 1].parse().unwrap());
                assert_eq!(server.contains(&"--device"), g > 1);
            }
            ports.sort_unstable();
            assert_eq!(ports, (50052..50052 + g).collect::<Vec<_>>());
            check_env(GroupEngine::LlamaCppRpc, rank as u32, worker);
        }
    }
}

#[test]
fn llamacpp_gpu_zero_serves_in_the_foreground_on_the_group_port() {
    let j = job(LLAMACPP);
    let p = group_plan(&j, "v100-16gb-x4", GroupEngine::LlamaCppRpc, 2);
    let worker = for_rank(&j, &p, &address(2, 1));
    assert_eq!(
        worker.command.unwrap()[2],
        "rpc-server --host 0.0.0.0 --port 50053 --device CUDA1 & \
         rpc-server --host 0.0.0.0 --port 50054 --device CUDA2 & \
         rpc-server --host 0.0.0.0 --port 50055 --device CUDA3 & \
         exec rpc-server --host 0.0.0.0 --port 50052 --device CUDA0"
    );
    let one_gpu = group_plan(&j, "a10g-x1", GroupEngine::LlamaCppRpc, 2);
    assert_eq!(
        for_rank(&j, &one_gpu, &address(2, 1)).command.unwrap(),
        ["rpc-server", "--host", "0.0.0.0", "--port", "50052"]
    );
}

#[test]
fn llamacpp_split_past_llamas_device_limit_is_left_to_llamacpp() {
    let j = job(LLAMACPP);
    let p = group_plan(&j, "v100-16gb-x4", GroupEngine::LlamaCppRpc, 4);
    let leader = for_rank(&j, &p, &address(4, 0));
    assert!(leader.args.iter().any(|a| a == "--rpc"));
    assert!(
        !leader.args.iter().any(|a| a == "--tensor-split"),
        "16 devices"
    );
}

#[test]
fn torchrun_ranks_meet_at_the_leaders_c10d_rendezvous_through_pet_env() {
    let j = job(TUNING);
    let p = group_plan(&j, "a100-80gb-x8", GroupEngine::Torchrun, 2);
    for (rank, launch) in launches(&j, &p).iter().enumerate() {
        // The job's own `torchrun …` runs on every rank, unchanged.
        assert!(launch.command.is_none() && launch.args.is_empty());
        assert_eq!(env(launch, "PET_NNODES"), Some("2"));
        assert_eq!(
            env(launch, "PET_NODE_RANK"),
            Some(rank.to_string().as_str())
        );
        assert_eq!(
            env(launch, "PET_NPROC_PER_NODE"),
            Some(p.gpu_count.to_string().as_str())
        );
        assert_eq!(env(launch, "PET_RDZV_BACKEND"), Some("c10d"));
        assert_eq!(
            env(launch, "PET_RDZV_ENDPOINT"),
            Some("chat-3-0.chat-3.team-a:29500")
        );
        assert_eq!(env(launch, "PET_RDZV_ID"), Some("chat-3-0.chat-3.team-a"));
        let conf = if rank == 0 {
            "is_host=true,read_timeout=600"
        } else {
            "is_host=false,read_timeout=600"
        };
        assert_eq!(env(launch, "PET_RDZV_CONF"), Some(conf));
        assert_eq!(env(launch, "MASTER_ADDR"), Some("chat-3-0.chat-3.team-a"));
        assert_eq!(env(launch, "MASTER_PORT"), Some("29500"));
        assert!(env(launch, "VRAMFIT_RUNTIME_ARGS").is_none());
        check_env(GroupEngine::Torchrun, rank as u32, launch);
    }
}

#[test]
fn every_pet_name_is_a_torchrun_option() {
    // torchrun reads `PET_<dest.upper()>`: the option's dest with dashes as underscores.
    for row in contract::GROUP_ENV_TABLE
        .iter()
        .filter(|e| e.name.starts_with("PET_"))
    {
        let option = row.name["PET_".len()..].to_lowercase().replace('_', "-");
        assert!(
            row.read_by.contains(&format!("`--{option}`")),
            "{} reads --{option}",
            row.name
        );
    }
}

#[test]
fn the_docs_hold_the_group_tables_of_the_code() {
    for (name, table) in [
        ("group-workers", contract::render_worker_flags()),
        ("group-env", contract::render_env()),
    ] {
        let start = format!("<!-- {name}:start -->\n");
        let end = format!("<!-- {name}:end -->");
        let from = DOC
            .find(&start)
            .unwrap_or_else(|| panic!("{start} missing"))
            + start.len();
        let to = from + DOC[from..].find(&end).expect("end marker");
        assert_eq!(
            &DOC[from..to],
            table,
            "docs/runtime-contracts.md: the {name} table differs from planner/src/group/contract.rs"
        );
    }
}

#[test]
fn group_flag_values_are_checked() {
    assert!(Values::Endpoints.accepts("a-1.g.ns:50052,b.g.ns:50053"));
    assert!(!Values::Endpoints.accepts("a-1.g.ns"));
    assert!(!Values::Endpoints.accepts(""));
    assert!(Values::Shares(15).accepts("17,16"));
    assert!(!Values::Shares(2).accepts("1,1,1"));
    assert!(Values::Indexed("CUDA").accepts("CUDA7"));
    assert!(!Values::Indexed("CUDA").accepts("Vulkan0"));
}
