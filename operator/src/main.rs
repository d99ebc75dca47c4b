//! `vramfit-operator`: see the crate documentation and `operator/README.md`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use vramfit_operator::{app, cli::Args};
use vramfit_runtime::logging;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(error) = logging::init(args.log_format) {
        eprintln!("error: cannot set up logging: {error}");
        return ExitCode::FAILURE;
    }
    let mut builder = if args.worker_threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(usize::from(args.worker_threads));
        builder
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(app::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "vramfit-operator stopped");
            ExitCode::FAILURE
        }
    }
}
