//! `vramfit-agent`: see the crate documentation and `agent/README.md`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use vramfit_agent::{app, cli::Args};
use vramfit_telemetry as telemetry;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = telemetry::init(args.log_format) {
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
    match runtime.block_on(app::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
