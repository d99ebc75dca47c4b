//! `vramfit-cache-agent`: see the crate documentation and docs/model-cache.md.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use vramfit_cache_agent::{app, cli::Args};
use vramfit_runtime::logging;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = logging::init(args.log_format) {
        eprintln!("error: cannot set up logging: {error}");
        return ExitCode::FAILURE;
    }
    if args.serve_read_only {
        return vramfit_cache_agent::serve_mount::run(&args.cache_root);
    }
    // Two threads: a file being hashed or downloaded never keeps /healthz from answering.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
