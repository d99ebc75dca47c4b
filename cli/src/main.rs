//! `vramfit`: plan InferenceJobs for GPU node classes without a cluster.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

use vramfit_cli::args::{Cli, Command};
use vramfit_cli::error::CliError;
use vramfit_cli::{compare, render};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vramfit: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let out = match cli.command {
        Command::Plan(args) => render::plan_command(&args)?,
        Command::Classes(args) => render::classes_command(&args)?,
        Command::Presets => render::presets_command(),
        Command::Crds(args) => render::crds_command(&args)?,
        // The only command that may talk to a cluster: it prints as it goes.
        Command::Compare(args) => return compare::compare_command(&args),
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}
