//! Where `vramfit model inspect` and `vramfit plan --model-from/--hub` read a checkpoint: a
//! local Hugging Face folder, a `config.json` alone, a `.gguf` file, or (only when asked with
//! `--hub`) the Hugging Face Hub or the mirror `HF_ENDPOINT` names.
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use vramfit_hub::{DEFAULT_ENDPOINT, HubClient, HubConfig, RepoRef};
use vramfit_models::limits::{self, Limit};
use vramfit_models::source::{FileSource, Range, SourceError, SourceErrorKind, read_checkpoint};
use vramfit_models::{Checkpoint, gguf, hf, safetensors};

use crate::args::HubArgs;
use crate::error::CliError;

/// A checkpoint and the model name it suggests for the runtime, with where that came from.
pub struct ReadCheckpoint {
    pub checkpoint: Checkpoint,
    pub name: Option<(String, String)>,
    /// What was read, for the output's first line.
    pub location: String,
}

/// Reads the checkpoint at `path` or on the Hub; `None` when neither is given.
pub fn read(path: Option<&Path>, hub: &HubArgs) -> Result<Option<ReadCheckpoint>, CliError> {
    match (path, &hub.hub) {
        (Some(path), None) => read_local(path).map(Some),
        (None, Some(repo)) => read_hub(repo, hub).map(Some),
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(CliError::Usage(
            "give a local checkpoint or --hub, not both".into(),
        )),
    }
}

/// A file's error (which names the file) with the file's folder in front.
fn file_error(path: &Path, e: impl std::fmt::Display) -> CliError {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(folder) => CliError::Model(format!("{}/{e}", folder.display())),
        None => CliError::Model(e.to_string()),
    }
}

/// A folder, a `config.json`, or a GGUF file.
pub fn read_local(path: &Path) -> Result<ReadCheckpoint, CliError> {
    let meta = std::fs::metadata(path).map_err(|source| CliError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let shown = path.display().to_string();
    if meta.is_dir() {
        let folder = Folder(path.to_path_buf());
        let checkpoint = runtime()?
            .block_on(read_checkpoint(&folder))
            .map_err(|e| CliError::Model(e.to_string()))?;
        return Ok(ReadCheckpoint {
            checkpoint,
            name: Some((
                shown.clone(),
                "the folder inspected (the runtime needs it at this path)".into(),
            )),
            location: shown,
        });
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| shown.clone());
    let mut file = File::open(path).map_err(|source| CliError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut magic = [0u8; 4];
    let is_gguf = file.read_exact(&mut magic).is_ok() && &magic == b"GGUF";
    file.seek(SeekFrom::Start(0))
        .map_err(|source| CliError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if is_gguf || file_name.ends_with(".gguf") {
        let checkpoint = gguf::read(BufReader::new(file), &file_name, Some(meta.len()))
            .map_err(|e| file_error(path, e))?;
        return Ok(ReadCheckpoint {
            checkpoint,
            name: Some((file_name, "the GGUF file's name".into())),
            location: shown,
        });
    }
    if meta.len() > limits::CONFIG_JSON.value {
        return Err(CliError::Model(format!(
            "{shown}: {} bytes, more than the {} vramfit reads of a config.json (a .gguf file must end in .gguf or start with GGUF)",
            meta.len(),
            limits::CONFIG_JSON
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| CliError::Model(format!("{shown}: not a UTF-8 config.json: {e}")))?;
    let checkpoint = hf::read_config(&text, &file_name).map_err(|e| file_error(path, e))?;
    Ok(ReadCheckpoint {
        checkpoint,
        name: None,
        location: shown,
    })
}

/// The Hub: an explicit `--hub`, the endpoint from `--hub-endpoint` or `HF_ENDPOINT`, the token
/// from `--hub-token-file` or `HF_TOKEN`.
fn read_hub(repo: &str, args: &HubArgs) -> Result<ReadCheckpoint, CliError> {
    let repo = RepoRef::parse(repo).map_err(|e| CliError::Usage(e.to_string()))?;
    let endpoint = args
        .hub_endpoint
        .clone()
        .or_else(|| std::env::var("HF_ENDPOINT").ok().filter(|e| !e.is_empty()))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let token = match &args.hub_token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|source| CliError::Read {
                    path: path.clone(),
                    source,
                })?
                .trim()
                .to_string(),
        ),
        None => std::env::var("HF_TOKEN").ok(),
    }
    .filter(|t| !t.is_empty());
    let client = HubClient::new(HubConfig {
        endpoint,
        token,
        timeout: Duration::from_secs(args.hub_timeout_seconds.into()),
        ..HubConfig::default()
    })
    .map_err(|e| CliError::Usage(e.to_string()))?;
    let checkpoint = runtime()?
        .block_on(client.read_checkpoint(&repo))
        .map_err(|e| CliError::Model(e.to_string()))?;
    Ok(ReadCheckpoint {
        checkpoint,
        name: Some((repo.repo().to_string(), "the Hub repository".into())),
        location: format!("{repo} ({})", client.endpoint()),
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start the async runtime: {e}")))
}

/// A local Hugging Face model folder.
struct Folder(PathBuf);

impl Folder {
    fn path(&self, name: &str) -> Result<PathBuf, SourceError> {
        if !safetensors::is_plain_file_name(name) {
            return Err(self.error(name, SourceErrorKind::Invalid, "not a plain file name"));
        }
        Ok(self.0.join(name))
    }

    fn error(&self, name: &str, kind: SourceErrorKind, why: impl std::fmt::Display) -> SourceError {
        SourceError {
            kind,
            message: format!("{}: {name}: {why}", self.0.display()),
        }
    }

    fn open(&self, name: &str) -> Result<Option<(File, u64)>, SourceError> {
        let path = self.path(name)?;
        match File::open(&path).and_then(|f| Ok((f.metadata()?.len(), f))) {
            Ok((len, file)) => Ok(Some((file, len))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error(name, SourceErrorKind::Unavailable, e)),
        }
    }
}

impl FileSource for Folder {
    fn describe(&self) -> String {
        self.0.display().to_string()
    }

    async fn read_file(&self, name: &str, limit: Limit) -> Result<Option<Vec<u8>>, SourceError> {
        let Some((file, len)) = self.open(name)? else {
            return Ok(None);
        };
        if len > limit.value {
            return Err(self.error(
                name,
                SourceErrorKind::TooLarge,
                format!("{len} bytes, more than the {limit} vramfit reads"),
            ));
        }
        let mut bytes = Vec::new();
        file.take(limit.value + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.error(name, SourceErrorKind::Unavailable, e))?;
        Ok(Some(bytes))
    }

    async fn read_range(
        &self,
        name: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Range>, SourceError> {
        let Some((mut file, file_len)) = self.open(name)? else {
            return Ok(None);
        };
        let io = |e: std::io::Error| self.error(name, SourceErrorKind::Unavailable, e);
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut bytes = Vec::new();
        file.take(len).read_to_end(&mut bytes).map_err(io)?;
        Ok(Some(Range {
            bytes,
            file_len: Some(file_len),
        }))
    }
}
