//! Command-line arguments.
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Plan GPU inference jobs for every kind of GPU node, with no cluster.
#[derive(Parser, Debug)]
#[command(name = "vramfit", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show the plan vramfit would apply to an InferenceJob manifest on each node class.
    Plan(PlanArgs),
    /// List the node classes and their defaults.
    Classes(ClassesArgs),
    /// List the model presets and where their numbers come from.
    Presets,
    /// Print the CRDs (or write them into a folder).
    Crds(CrdsArgs),
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// InferenceJob manifest (YAML or JSON); `-` reads standard input.
    pub file: PathBuf,
    /// Plan for this class only, with the pod's env and arguments.
    #[arg(long, conflicts_with = "all")]
    pub class: Option<String>,
    /// Plan for every class (the default).
    #[arg(long)]
    pub all: bool,
    /// GpuNodeClass manifests that override or add to the built-in classes.
    #[arg(long = "node-classes", value_name = "FILE")]
    pub node_classes: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Args, Debug)]
pub struct ClassesArgs {
    /// GpuNodeClass manifests that override or add to the built-in classes.
    #[arg(long = "node-classes", value_name = "FILE")]
    pub node_classes: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Args, Debug)]
pub struct CrdsArgs {
    /// Write one file per CRD into this folder instead of printing.
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Yaml,
}
