//! `vramfit-agent`: see the crate documentation and `agent/README.md`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use vramfit_agent::{app, cli::Args};
use vramfit_runtime::logging;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = logging::init(args.log_format) {
        eprintln!("error: cannot set up logging: {error}");
        return ExitCode::FAILURE;
    }
    // One thread is plenty for one node's labels; NVML runs on a blocking thread.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(app::run(args));
    // A GPU that hangs an NVML call holds a blocking thread: do not wait for it past SIGTERM.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
