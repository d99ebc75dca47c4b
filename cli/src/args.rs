//! Command-line arguments.
use std::path::PathBuf;
use std::time::Duration;

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
    ///
    /// The manifest is checked as the API server checks it (`kubectl apply`): unknown fields,
    /// the CRD's bounds and its validation rules.
    #[command(
        after_help = "Exit status: 0 a class can run the job; 2 bad input (a file that \
cannot be read, parsed or admitted, an invalid spec, an unknown class); 3 the job is valid but \
no class can run it (the plan and each class's reason are still printed, in every -o format)."
    )]
    Plan(PlanArgs),
    /// List the node classes and their defaults.
    Classes(ClassesArgs),
    /// List the model presets and where their numbers come from.
    Presets,
    /// Read a model checkpoint's numbers.
    Model(ModelArgs),
    /// Print the CRDs (or write them into a folder).
    Crds(CrdsArgs),
    /// Run one job on several classes, baseline and optimized, and compare speed and cost
    /// per item (against the cluster in KUBECONFIG; `--dry-run` needs none).
    Compare(CompareArgs),
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
    /// Fill the model numbers the manifest leaves unset from a checkpoint: a Hugging Face
    /// model folder, its config.json, or a .gguf file (the manifest's own numbers win).
    #[arg(long, value_name = "PATH", conflicts_with = "hub")]
    pub model_from: Option<PathBuf>,
    #[command(flatten)]
    pub hub: HubArgs,
}

#[derive(Args, Debug)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Print the `model:` block of a manifest, read from a checkpoint, with the file and key
    /// each number comes from.
    Inspect(InspectArgs),
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A Hugging Face model folder (config.json, with the safetensors index or headers for
    /// the exact weight bytes), its config.json alone, or a .gguf file.
    #[arg(required_unless_present = "hub", conflicts_with = "hub")]
    pub path: Option<PathBuf>,
    #[command(flatten)]
    pub hub: HubArgs,
    /// The model's name for the runtime (`model.name`); else the folder's path, the GGUF
    /// file's name, or the Hub repository.
    #[arg(long)]
    pub name: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = ModelFormat::Yaml)]
    pub output: ModelFormat,
}

/// Reading a checkpoint from the Hugging Face Hub: network only when `--hub` is given.
#[derive(Args, Debug, Default)]
pub struct HubArgs {
    /// Read the checkpoint from the Hugging Face Hub (or a mirror): owner/name or
    /// owner/name@revision (a branch, tag or commit; main otherwise). Only config.json, the
    /// safetensors index and headers are fetched, never the weights.
    #[arg(long, value_name = "REPO[@REVISION]")]
    pub hub: Option<String>,
    /// The Hub or a mirror (`HF_ENDPOINT` otherwise, else https://huggingface.co).
    #[arg(long, value_name = "URL", requires = "hub")]
    pub hub_endpoint: Option<String>,
    /// A file holding a Hub token, for private and gated models (`HF_TOKEN` otherwise).
    #[arg(long, value_name = "FILE", requires = "hub")]
    pub hub_token_file: Option<PathBuf>,
    /// Seconds one file from the Hub may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub hub_timeout_seconds: u32,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelFormat {
    Yaml,
    Json,
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

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// InferenceJob manifest to compare on (YAML or JSON); `-` reads standard input.
    pub file: Option<PathBuf>,
    /// Node classes to compare, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "CLASS,...")]
    pub classes: Vec<String>,
    /// Comparison id (labels and job names); the job's metadata.name when unset.
    #[arg(long)]
    pub name: Option<String>,
    /// Namespace of the jobs; the manifest's, else the kubeconfig context's.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Runs per class and phase; the report gives the median and the spread.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Price of one GPU of a class in dollars per hour (repeatable); the plan's price otherwise.
    #[arg(long = "price", value_name = "CLASS=DOLLARS")]
    pub prices: Vec<String>,
    /// GpuNodeClass manifests that override or add to the built-in classes.
    #[arg(long = "node-classes", value_name = "FILE")]
    pub node_classes: Option<PathBuf>,
    /// Print the jobs the comparison would create; no cluster is needed.
    #[arg(long, conflicts_with = "delete")]
    pub dry_run: bool,
    /// Delete the comparison's jobs (by its label) and stop.
    #[arg(long)]
    pub delete: bool,
    /// Output format (with --dry-run: yaml prints the InferenceJob manifests).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Also write report.json, report.md and chart.svg into this folder (with --dry-run: the
    /// planned comparison, plan.txt and jobs.yaml).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// How long to follow the jobs before reporting what finished (e.g. 90m, 2h, 300s).
    #[arg(long, default_value = "2h", value_parser = parse_duration)]
    pub timeout: Duration,
    /// How often to look at the jobs.
    #[arg(long, default_value = "5s", value_parser = parse_duration, hide = true)]
    pub poll: Duration,
}

/// `90`, `90s`, `15m`, `2h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 300s, 15m or 2h"))?;
    let seconds = match unit {
        "s" => Some(value),
        "m" => value.checked_mul(60),
        "h" => value.checked_mul(3600),
        _ => None,
    }
    .filter(|s| *s > 0)
    .ok_or_else(|| format!("{text:?} is not a duration like 300s, 15m or 2h"))?;
    Ok(Duration::from_secs(seconds))
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_minutes_and_hours() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in ["", "0s", "2d", "h", "-5m", "1.5h", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
