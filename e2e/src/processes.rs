//! The binaries under test as child processes: building or locating them, operator replicas
//! (killed on drop, logs kept), and the agent run once to label a node.
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};

use crate::{Suite, eventually, http_status, target_dir, workspace_root};

/// A free TCP port on 127.0.0.1 (free when asked; good enough for a test).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// How the suite builds the binaries: with the whole workspace's features, dev-dependencies
/// included (`--test e2e`), as `scripts/test.sh`'s `cargo test --workspace` and the README's
/// `cargo test --workspace --test e2e` resolve them, so the three share one build instead of
/// compiling the dependencies again with other features. The operator's test-only faults
/// (`fault-injection`, which some scenarios arm) come with it: this crate's dependency on
/// the operator turns the feature on (never a release build, which builds the operator alone).
pub const BUILD_ARGS: [&str; 6] = [
    "build",
    "--workspace",
    "--locked",
    "--bins",
    "--test",
    "e2e",
];

/// Paths of the binaries under test.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `vramfit-agent`.
    pub agent: PathBuf,
    /// `vramfit-operator`.
    pub operator: PathBuf,
    /// `vramfit-cache-agent`.
    pub cache_agent: PathBuf,
}

impl Binaries {
    /// `VRAMFIT_AGENT_BIN` / `VRAMFIT_OPERATOR_BIN` / `VRAMFIT_CACHE_AGENT_BIN` when set, otherwise builds them with
    /// [`BUILD_ARGS`] and uses `target/debug/`.
    pub fn locate() -> Result<Self> {
        let agent = std::env::var_os("VRAMFIT_AGENT_BIN").map(PathBuf::from);
        let operator = std::env::var_os("VRAMFIT_OPERATOR_BIN").map(PathBuf::from);
        let cache_agent = std::env::var_os("VRAMFIT_CACHE_AGENT_BIN").map(PathBuf::from);
        let root = workspace_root();
        let target = target_dir();
        if agent.is_none() || operator.is_none() || cache_agent.is_none() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            eprintln!(
                "e2e: building vramfit-agent, vramfit-operator and vramfit-cache-agent (cargo {})",
                BUILD_ARGS.join(" ")
            );
            let status = Command::new(cargo)
                .args(BUILD_ARGS)
                .current_dir(&root)
                .status()
                .context("running cargo build")?;
            if !status.success() {
                bail!("cargo {} failed ({status})", BUILD_ARGS.join(" "));
            }
        }
        let bins = Binaries {
            agent: agent.unwrap_or_else(|| target.join("debug").join("vramfit-agent")),
            operator: operator.unwrap_or_else(|| target.join("debug").join("vramfit-operator")),
            cache_agent: cache_agent
                .unwrap_or_else(|| target.join("debug").join("vramfit-cache-agent")),
        };
        for bin in [&bins.agent, &bins.operator, &bins.cache_agent] {
            if !bin.is_file() {
                bail!("binary {} does not exist", bin.display());
            }
        }
        Ok(bins)
    }
}

/// A child process (an operator replica) killed and reaped on drop; its stdout and stderr
/// go to a log file that failures point at.
#[derive(Debug)]
pub struct ChildProcess {
    /// What it is, for messages.
    pub name: String,
    /// Where its output goes.
    pub log: PathBuf,
    /// Its `--metrics-addr`.
    pub addr: String,
    child: Option<Child>,
    /// A cache root whose read-only `served/` mount is taken off once the process is killed
    /// (the cache agent's: [`ChildProcess::unserve_on_kill`]).
    served_root: Option<PathBuf>,
}

impl ChildProcess {
    /// Starts `program args…` with `env`, output appended to `log`.
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        addr: String,
    ) -> Result<Self> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let out = File::options().create(true).append(true).open(&log)?;
        let err = out.try_clone()?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Self {
            name: name.to_string(),
            log,
            addr,
            child: Some(child),
            served_root: None,
        })
    }

    /// Takes the read-only `served/` mount of cache root `root` off when this process is
    /// killed (or dropped), before anything removes the cache folder.
    pub fn unserve_on_kill(mut self, root: &Path) -> Self {
        self.served_root = Some(root.to_path_buf());
        self
    }

    /// `Err` with the log's tail when the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "{} exited ({status}); log tail:\n{}",
                self.name,
                self.log_tail(30)
            );
        }
        Ok(())
    }

    /// Waits up to 60 s until `GET <path>` at its address answers 200; fails at once, with
    /// the log's tail, if the process exits meanwhile.
    pub async fn wait_until_ok(&mut self, path: &str) -> Result<()> {
        let addr = self.addr.clone();
        eventually(
            &format!("{} {path} to answer 200", self.name),
            Duration::from_secs(60),
            || {
                let alive = self.check_alive();
                let addr = addr.clone();
                async move {
                    alive?;
                    let code = http_status(&addr, path).await?;
                    ensure!(code == 200, "{path} answered {code}");
                    Ok(())
                }
            },
        )
        .await
    }

    /// How it exited, once it has (`None` while it runs, or once killed).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Its log so far (empty when there is none yet).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Its process id, while it has not been killed.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills (SIGKILL) and reaps it; then takes off the `served/` mount it was given.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(root) = self.served_root.take()
            && let Err(error) = vramfit_cache_agent::serve_mount::unserve(&root)
        {
            eprintln!(
                "     {}: served/ under {} not unmounted: {error}",
                self.name,
                root.display()
            );
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Suite {
    /// Starts an operator replica; waits for `/readyz` 200 unless `wait_ready` is false.
    pub async fn start_operator(
        &mut self,
        replica: &str,
        extra: &[&str],
        wait_ready: bool,
    ) -> Result<()> {
        self.start_operator_with_env(replica, extra, &[], wait_ready)
            .await
    }

    /// [`Self::start_operator`] with more environment (a KUBECONFIG of its own, say).
    pub async fn start_operator_with_env(
        &mut self,
        replica: &str,
        extra: &[&str],
        extra_env: &[(&str, String)],
        wait_ready: bool,
    ) -> Result<()> {
        self.started += 1;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut args = vec![
            "--metrics-addr".to_string(),
            addr.clone(),
            "--log-format".into(),
            "text".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut env = extra_env.to_vec();
        env.extend([
            ("POD_NAME", replica.to_string()),
            ("POD_NAMESPACE", self.ns.clone()),
            (
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ]);
        let log = self
            .logs
            .join(format!("operator-{}-{replica}.log", self.started));
        let mut child =
            ChildProcess::spawn(replica, &self.bins.operator, &args, &env, log, addr.clone())?;
        if wait_ready {
            child.wait_until_ok("/readyz").await?;
        }
        self.operators.push(child);
        Ok(())
    }

    /// The flags of a leader-elected replica on the Lease `lease` in the test namespace.
    pub fn leader_flags(&self, lease: &str) -> Vec<String> {
        [
            "--leader-election",
            "--lease-name",
            lease,
            "--lease-namespace",
            &self.ns,
        ]
        .map(String::from)
        .to_vec()
    }

    /// Kills (SIGKILL) every operator the suite started.
    pub fn stop_operators(&mut self) {
        for mut op in self.operators.drain(..) {
            op.kill();
        }
    }

    /// Checks that the running operators are alive; starts one if there is none.
    pub async fn ensure_single_operator(&mut self) -> Result<()> {
        for op in &mut self.operators {
            op.check_alive()?;
        }
        if self.operators.is_empty() {
            self.start_operator("single", &[], true).await?;
        }
        Ok(())
    }

    /// The log of the operator started last (empty if there is none, or no log yet).
    pub fn last_operator_log(&self) -> String {
        self.operators
            .last()
            .map(ChildProcess::log_text)
            .unwrap_or_default()
    }

    /// The path of `agent/fixtures/<fixture>`, as an agent's `--fixture` argument.
    pub fn agent_fixture(&self, fixture: &str) -> String {
        self.root
            .join("agent/fixtures")
            .join(fixture)
            .display()
            .to_string()
    }

    /// `vramfit-agent --once --fixture agent/fixtures/<fixture> --node-name <node>`: the real
    /// agent labels the node from the fixture (server-side apply, field manager
    /// `vramfit-agent`).
    pub async fn label_with_agent(&self, fixture: &str, node: &str) -> Result<()> {
        let path = self.agent_fixture(fixture);
        self.label_with_agent_from(Path::new(&path), node).await
    }

    /// [`Self::label_with_agent`] with a fixture file anywhere.
    pub async fn label_with_agent_from(&self, fixture: &Path, node: &str) -> Result<()> {
        let bin = self.bins.agent.clone();
        let args = [
            "--once".to_string(),
            "--fixture".into(),
            fixture.display().to_string(),
            "--node-name".into(),
            node.to_string(),
        ];
        let output =
            tokio::task::spawn_blocking(move || Command::new(bin).args(args).output()).await??;
        ensure!(
            output.status.success(),
            "vramfit-agent --once --fixture {} --node-name {node} failed ({}): {}",
            fixture.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }
}
