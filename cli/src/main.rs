//! `vramfit`: plan InferenceJobs for GPU node classes without a cluster.
#![forbid(unsafe_code)]

mod args;
mod error;
mod manifest;
mod render;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::error::CliError;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vramfit: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    let out = match cli.command {
        Command::Plan(args) => render::plan_command(&args)?,
        Command::Classes(args) => render::classes_command(&args)?,
        Command::Presets => render::presets_command(),
        Command::Crds(args) => render::crds_command(&args)?,
    };
    print!("{out}");
    Ok(())
}
