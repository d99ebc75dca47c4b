//! Peak memory and CPU time of reading the worst model folders the limits accept: writes each
//! folder, then reads it in a child process of its own and prints the child's peak resident
//! memory (`VmHWM`), which counts every file's bytes as read, the parse, and the program.
//!
//! ```console
//! cargo run --release -p vramfit-cli --example read_peak_memory [-- FOLDER [--keep]]
//! ```
//!
//! FOLDER (a temporary folder by default) gets one sub-folder per case, up to ~130 MiB each,
//! each removed once read unless `--keep` is given (then `vramfit model inspect FOLDER/CASE`
//! reads them too). Linux only (`/proc/self`).
// An example program: a panic is its error report.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use vramfit_cli::checkpoint_source::read_local;
use vramfit_models::limits;

const CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../models/testdata/configs/meta-llama/Llama-3.2-1B-Instruct/config.json"
);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, folder] = args.as_slice()
        && flag == "--read"
    {
        return read_and_report(Path::new(folder));
    }
    let keep = args.iter().any(|a| a == "--keep");
    let root = match args.get(1).filter(|a| *a != "--keep") {
        Some(folder) => PathBuf::from(folder),
        None => std::env::temp_dir().join(format!("vramfit-peak-{}", std::process::id())),
    };
    println!(
        "{:<78} {:>10} {:>9}  result",
        "case (each at the limits vramfit accepts)", "peak RSS", "CPU time"
    );
    for (name, write) in CASES {
        let folder = root.join(name.split(':').next().unwrap_or("case"));
        let _ = std::fs::remove_dir_all(&folder);
        std::fs::create_dir_all(&folder).unwrap();
        write(&folder);
        let out = Command::new(std::env::current_exe().unwrap())
            .arg("--read")
            .arg(&folder)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stdout);
        let (peak, rest) = report.trim().split_once(' ').unwrap_or(("?", ""));
        let (ms, result) = rest.split_once(' ').unwrap_or(("?", ""));
        println!("{name:<78} {peak:>6} MiB {ms:>6} ms  {result}");
        if !keep {
            std::fs::remove_dir_all(&folder).unwrap();
        }
    }
    if !keep {
        let _ = std::fs::remove_dir(&root);
    }
}

type Case = (&'static str, fn(&Path));

const CASES: &[Case] = &[
    (
        "config-strings: config.json of 1 MiB, a list of 1-character strings",
        |dir| config_with(dir, |n| list(n, 4, |_| "\"a\"".into())),
    ),
    (
        "config-numbers: config.json of 1 MiB, a list of numbers",
        |dir| config_with(dir, |n| list(n, 2, |_| "0".into())),
    ),
    (
        "config-keys: config.json of 1 MiB, an object of 100,000 keys",
        |dir| config_with(dir, |n| object(n, 10)),
    ),
    (
        "header-tensors: model.safetensors, a 32 MiB header of 500,000 tensors",
        |dir| {
            config(dir);
            let names: Vec<String> = (0..limits::SAFETENSORS_TENSORS.value).map(name).collect();
            safetensors_file(&dir.join("model.safetensors"), &names);
        },
    ),
    (
        "header-metadata: model.safetensors, a 32 MiB header of __metadata__, 1 tensor",
        |dir| {
            config(dir);
            safetensors_file(&dir.join("model.safetensors"), &[name(0)]);
        },
    ),
    (
        "index-and-headers: a 32 MiB index of 1,000,000 tensors, 2 headers of 32 MiB",
        |dir| {
            config(dir);
            let per_shard = limits::SAFETENSORS_TENSORS.value;
            let total = limits::SAFETENSORS_INDEX_TENSORS.value;
            let shards = total.div_ceil(per_shard);
            let shard = |i: u64| format!("s{i}.safetensors");
            let map: Vec<(String, String)> = (0..total)
                .map(|t| (name(t), shard(t / per_shard)))
                .collect();
            index_file(dir, &map);
            for s in 0..shards {
                let names: Vec<String> = (s * per_shard..((s + 1) * per_shard).min(total))
                    .map(name)
                    .collect();
                safetensors_file(&dir.join(shard(s)), &names);
            }
        },
    ),
    (
        "many-shards: 511 shards (the request bound), headers of 180 KiB, 122 MiB read",
        |dir| {
            config(dir);
            let shards = (limits::READ_REQUESTS.value - 2) / 2;
            let per_shard = 1_900;
            let shard = |i: u64| format!("s{i}.safetensors");
            let map: Vec<(String, String)> = (0..shards * per_shard)
                .map(|t| (name(t), shard(t / per_shard)))
                .collect();
            index_file(dir, &map);
            for s in 0..shards {
                let names: Vec<String> = (s * per_shard..(s + 1) * per_shard).map(name).collect();
                safetensors_file_sized(&dir.join(shard(s)), &names, 180 * 1024);
            }
        },
    ),
    (
        "over-budget: 4 shards with 32 MiB headers (past the 128 MiB a read takes)",
        |dir| {
            config(dir);
            let shard = |i: u64| format!("s{i}.safetensors");
            let map: Vec<(String, String)> = (0..4).map(|t| (name(t), shard(t))).collect();
            index_file(dir, &map);
            for (tensor, file) in &map {
                safetensors_file(&dir.join(file), std::slice::from_ref(tensor));
            }
        },
    ),
    (
        "too-many-shards: an index naming 4096 shards (past the request bound)",
        |dir| {
            config(dir);
            let map: Vec<(String, String)> = (0..limits::SAFETENSORS_SHARDS.value)
                .map(|t| (name(t), format!("model-{t:05}.safetensors")))
                .collect();
            index_file(dir, &map);
        },
    ),
];

/// A short unique tensor name (base 36).
fn name(mut i: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = vec![b't'];
    loop {
        out.push(digits[(i % 36) as usize]);
        i /= 36;
        if i == 0 {
            break;
        }
    }
    String::from_utf8(out).unwrap()
}

fn config(dir: &Path) {
    std::fs::copy(CONFIG, dir.join("config.json")).unwrap();
}

/// The published config with an extra key of `room` bytes that `filler` writes, filling the
/// file to the bound.
fn config_with(dir: &Path, filler: fn(usize) -> String) {
    let text = std::fs::read_to_string(CONFIG).unwrap();
    let head = text.trim_end().trim_end_matches('}');
    let room = limits::CONFIG_JSON.value as usize - head.len() - 20;
    let config = format!("{head}, \"padding\": {}}}", filler(room));
    assert!(config.len() as u64 <= limits::CONFIG_JSON.value);
    std::fs::write(dir.join("config.json"), config).unwrap();
}

/// A JSON list of items of `size` bytes (comma included), `room` bytes long at most.
fn list(room: usize, size: usize, item: fn(usize) -> String) -> String {
    let items: Vec<String> = (0..(room - 2) / size).map(item).collect();
    format!("[{}]", items.join(","))
}

/// A JSON object of distinct keys with the value 0, `room` bytes long at most.
fn object(room: usize, size: usize) -> String {
    let items: Vec<String> = (0..(room - 2) / size)
        .map(|i| format!("\"{}\":0", name(i as u64)))
        .collect();
    format!("{{{}}}", items.join(","))
}

fn index_file(dir: &Path, map: &[(String, String)]) {
    let mut text = String::from(r#"{"metadata":{"total_size":1},"weight_map":{"#);
    for (i, (tensor, shard)) in map.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(r#""{tensor}":"{shard}""#));
    }
    text.push_str("}}");
    pad_to(
        &mut text,
        limits::SAFETENSORS_INDEX.value as usize,
        "padding",
    );
    std::fs::write(dir.join("model.safetensors.index.json"), text).unwrap();
}

/// Closes `text` (an object missing its last `}`) with a key whose string value fills it to
/// `size` bytes, where there is room.
fn pad_to(text: &mut String, size: usize, key: &str) {
    text.pop();
    let room = size.saturating_sub(text.len() + key.len() + 8);
    text.push_str(&format!(",\"{key}\":\"{}\"}}", "x".repeat(room)));
}

/// A safetensors file of one-byte U8 tensors, its header filled to the bound with
/// `__metadata__`.
fn safetensors_file(path: &Path, names: &[String]) {
    safetensors_file_sized(path, names, limits::SAFETENSORS_HEADER.value as usize);
}

fn safetensors_file_sized(path: &Path, names: &[String], header_size: usize) {
    let mut header = String::from("{");
    for (i, name) in names.iter().enumerate() {
        header.push_str(&format!(
            r#""{name}":{{"dtype":"U8","shape":[],"data_offsets":[{i},{}]}},"#,
            i + 1
        ));
    }
    let open = r#""__metadata__":{"pad":""#;
    let room = header_size.saturating_sub(header.len() + open.len() + 3);
    header.push_str(open);
    header.push_str(&"x".repeat(room));
    header.push_str("\"}}");
    assert!(header.len() <= limits::SAFETENSORS_HEADER.value as usize);
    let mut file = File::create(path).unwrap();
    file.write_all(&(header.len() as u64).to_le_bytes())
        .unwrap();
    file.write_all(header.as_bytes()).unwrap();
    file.write_all(&vec![0u8; names.len()]).unwrap();
}

/// The child: reads the folder, prints `peak-MiB milliseconds result`.
fn read_and_report(folder: &Path) {
    let started = cpu_ms();
    let result = read_local(folder);
    let ms = cpu_ms() - started;
    let summary = match &result {
        Ok(read) => match &read.checkpoint.weights {
            Some(w) => format!(
                "{} tensors, {} bytes ({})",
                w.tensors, w.bytes.value, w.bytes.from
            ),
            None if read.checkpoint.notes.is_empty() => "config.json only".to_string(),
            None => format!("no weights: {}", read.checkpoint.notes.join("; ")),
        },
        Err(e) => format!("refused: {e}"),
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    println!("{:.1} {ms} {summary}", peak_kib as f64 / 1024.0);
}

/// CPU time this process has used (user and system), in milliseconds: a shared machine's
/// wall-clock time would count other processes.
fn cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Clock ticks are 1/100 s on Linux.
    (ticks(11) + ticks(12)) * 10
}
