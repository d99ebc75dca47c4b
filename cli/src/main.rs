//! `vramfit`: plan InferenceJobs for GPU node classes without a cluster.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

use vramfit_cli::args::{Cli, Command, ModelCommand};
use vramfit_cli::error::{CliError, EXIT_BAD_INPUT, EXIT_NO_CLASS_CAN_RUN};
use vramfit_cli::{compare, model_inspect, render};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vramfit: error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let out = match cli.command {
        Command::Plan(args) => {
            let planned = render::plan_command(&args)?;
            print!("{}", planned.output);
            if planned.runnable {
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!(
                "vramfit: no class can run {}: each class says why",
                args.file.display()
            );
            return Ok(ExitCode::from(EXIT_NO_CLASS_CAN_RUN));
        }
        Command::Classes(args) => render::classes_command(&args)?,
        Command::Presets => render::presets_command(),
        Command::Model(args) => match &args.command {
            ModelCommand::Inspect(args) => model_inspect::inspect_command(args)?,
        },
        Command::Crds(args) => render::crds_command(&args)?,
        // The only command that may talk to a cluster: it prints as it goes.
        Command::Compare(args) => return compare::compare_command(&args),
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}
