//! `host cache list|prune`: the compiled-component cache
//! (`skillhost_runtime::cache`) with the compiled functions any compile
//! reuses (`skillhost_runtime::cache::functions`), and the registry cache
//! (`skillhost_oci::cache`), their entries with size, age and the component
//! they came from, and removing old ones. Each cache's module owns what an
//! entry is and how it is removed safely; this one prints.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::common::{CliResult, Failure, Globals, duration_arg, oci_failure, print_json};
use skillhost_oci::cache::{EntryKind as RegistryKind, RegistryEntry};
use skillhost_runtime::cache::{CompiledEntry, EntryKind as CompiledKind};

#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// List the compiled components, the compiled functions they share, and the registry cache: size, age, what each came from.
    List(ListArgs),
    /// Remove entries unused for a while (default 30d), or all; never one being written.
    Prune(PruneArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Remove compiled components not loaded for this long, packs of compiled functions no compile used for this long, and registry blobs stored this long ago (30d, 12h, 90m).
    #[arg(long, value_name = "DURATION", value_parser = duration_arg, default_value = "30d")]
    older_than: Duration,
    /// Remove every entry, whatever its age (a file being written is still left alone).
    #[arg(long)]
    all: bool,
    /// Say what would be removed, and remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(command: CacheCommand, globals: &Globals) -> CliResult {
    match command {
        CacheCommand::List(args) => list(args, globals),
        CacheCommand::Prune(args) => prune(args, globals),
    }
}

/// Both caches' entries, read now.
struct Listing {
    compiled_dir: Option<PathBuf>,
    compiled: Vec<CompiledEntry>,
    registry_dir: PathBuf,
    registry: Vec<RegistryEntry>,
    registry_cache: skillhost_oci::Cache,
}

fn read(globals: &Globals) -> Result<Listing, Failure> {
    let compiled_dir = globals
        .cache_dir
        .clone()
        .or_else(skillhost_runtime::default_cache_dir);
    // The directories of this host's engines (the synchronous one and the
    // async one), to tell their entries from those of other host builds
    // (which it never loads).
    let runtime = globals.runtime(None)?;
    let compiled = match &compiled_dir {
        Some(dir) => {
            skillhost_runtime::cache::entries(dir, &runtime.cache_dirs()).map_err(|e| {
                Failure::environment(format!(
                    "reading the component cache `{}`: {e}",
                    dir.display()
                ))
            })?
        }
        None => Vec::new(),
    };
    let registry_cache = globals.registry_cache()?;
    let registry = registry_cache.entries().map_err(oci_failure)?;
    Ok(Listing {
        compiled_dir,
        compiled,
        registry_dir: registry_cache.root().to_path_buf(),
        registry,
        registry_cache,
    })
}

impl Listing {
    /// The registry reference a compiled component was pulled as, if the
    /// registry cache still names it.
    fn pulled_as(&self, entry: &CompiledEntry) -> Option<&str> {
        let digest = format!("sha256:{}", entry.component.as_deref()?);
        self.registry
            .iter()
            .find(|r| r.kind == RegistryKind::Blob && r.digest.as_deref() == Some(&digest))
            .and_then(|r| r.role.as_deref())
            .and_then(|role| role.strip_prefix("component of "))
    }

    fn compiled_json(&self, entry: &CompiledEntry, now: SystemTime) -> Value {
        if entry.kind == CompiledKind::Functions {
            return json!({
                "path": entry.path,
                "kind": "functions",
                "functions": entry.functions,
                "current": entry.current,
                "size": entry.size,
                "age_seconds": entry.age(now).as_secs(),
            });
        }
        json!({
            "path": entry.path,
            "kind": match entry.kind {
                CompiledKind::Compiled => "compiled",
                _ => "partial",
            },
            "component": entry.component.as_ref().map(|d| format!("sha256:{d}")),
            "origin": entry.origin,
            "reference": self.pulled_as(entry),
            "current": entry.current,
            "size": entry.size,
            "age_seconds": entry.age(now).as_secs(),
        })
    }
}

fn registry_json(entry: &RegistryEntry, now: SystemTime) -> Value {
    json!({
        "path": entry.path,
        "kind": entry.kind,
        "digest": entry.digest,
        "role": entry.role,
        "size": entry.size,
        "age_seconds": entry.age(now).as_secs(),
    })
}

/// Whether a compiled-cache entry is a pack of functions (or a pack being
/// written), listed apart from the compiled components.
fn is_functions(entry: &CompiledEntry) -> bool {
    entry.kind == CompiledKind::Functions
        || entry.path.parent().and_then(|p| p.file_name())
            == Some(skillhost_runtime::cache::functions::FUNCTIONS_DIR.as_ref())
}

fn list(args: ListArgs, globals: &Globals) -> CliResult {
    let listing = read(globals)?;
    let now = SystemTime::now();
    let (functions, compiled): (Vec<&CompiledEntry>, Vec<&CompiledEntry>) =
        listing.compiled.iter().partition(|e| is_functions(e));
    let count = functions.iter().filter_map(|e| e.functions).sum::<u64>();
    if args.json {
        return print_json(&json!({
            "compiled": {
                "dir": listing.compiled_dir,
                "size": compiled.iter().map(|e| e.size).sum::<u64>(),
                "entries": compiled.iter().map(|e| listing.compiled_json(e, now)).collect::<Vec<_>>(),
            },
            "functions": {
                "size": functions.iter().map(|e| e.size).sum::<u64>(),
                "functions": count,
                "entries": functions.iter().map(|e| listing.compiled_json(e, now)).collect::<Vec<_>>(),
            },
            "registry": {
                "dir": listing.registry_dir,
                "size": listing.registry.iter().map(|e| e.size).sum::<u64>(),
                "entries": listing.registry.iter().map(|e| registry_json(e, now)).collect::<Vec<_>>(),
            },
        }));
    }
    match &listing.compiled_dir {
        Some(dir) => println!(
            "compiled components in {}: {} entries, {}",
            dir.display(),
            compiled.len(),
            size(compiled.iter().map(|e| e.size).sum())
        ),
        None => println!("compiled components: no cache directory (set SKILLHOST_CACHE_DIR)"),
    }
    for entry in &compiled {
        println!(
            "  {:>9}  {:>6}  {}",
            size(entry.size),
            age(entry.age(now)),
            describe_compiled(&listing, entry)
        );
    }
    println!(
        "compiled functions, reused by every compile: {count} in {} packs, {}",
        functions.len(),
        size(functions.iter().map(|e| e.size).sum())
    );
    for entry in &functions {
        println!(
            "  {:>9}  {:>6}  {}",
            size(entry.size),
            age(entry.age(now)),
            describe_compiled(&listing, entry)
        );
    }
    println!(
        "registry cache in {}: {} entries, {}",
        listing.registry_dir.display(),
        listing.registry.len(),
        size(listing.registry.iter().map(|e| e.size).sum())
    );
    for entry in &listing.registry {
        println!(
            "  {:>9}  {:>6}  {}",
            size(entry.size),
            age(entry.age(now)),
            describe_registry(entry)
        );
    }
    Ok(())
}

fn describe_compiled(listing: &Listing, entry: &CompiledEntry) -> String {
    if entry.kind == CompiledKind::Partial {
        return format!(
            "being written (or left by a crash): {}",
            entry.path.display()
        );
    }
    if entry.kind == CompiledKind::Functions {
        let mut text = match entry.functions {
            Some(n) => format!("{n} functions  {}", entry.path.display()),
            None => format!("(unreadable header)  {}", entry.path.display()),
        };
        if !entry.current {
            text += "  [another host build's: never used by this one]";
        }
        return text;
    }
    let component = entry
        .component
        .as_deref()
        .map(|d| format!("sha256:{}", &d[..d.len().min(12)]))
        .unwrap_or_else(|| "(unreadable header)".to_string());
    let mut text = component;
    if let Some(origin) = &entry.origin {
        text += &format!("  from {origin}");
    }
    if let Some(reference) = listing.pulled_as(entry) {
        text += &format!("  ({reference})");
    }
    if !entry.current {
        text += "  [another host build's: never loaded by this one]";
    }
    text
}

fn describe_registry(entry: &RegistryEntry) -> String {
    match entry.kind {
        RegistryKind::Partial => {
            format!(
                "being written (or left by a crash): {}",
                entry.path.display()
            )
        }
        RegistryKind::Tag => format!(
            "tag {} -> {}",
            entry.role.as_deref().unwrap_or("(unreadable)"),
            entry.digest.as_deref().unwrap_or("?")
        ),
        RegistryKind::Blob => {
            let digest = entry.digest.as_deref().unwrap_or("?");
            let short = &digest[..digest.len().min(19)];
            match &entry.role {
                Some(role) => format!("{short}  {role}"),
                None => format!("{short}  (no tag recorded here names it)"),
            }
        }
    }
}

fn prune(args: PruneArgs, globals: &Globals) -> CliResult {
    let listing = read(globals)?;
    let now = SystemTime::now();
    let mut removed = Vec::new();
    let mut freed = 0u64;
    for entry in &listing.compiled {
        if entry.prunable(now, args.older_than, args.all) {
            if !args.dry_run {
                entry.remove().map_err(|e| {
                    Failure::environment(format!("removing `{}`: {e}", entry.path.display()))
                })?;
            }
            freed += entry.size;
            let mut value = listing.compiled_json(entry, now);
            value["cache"] = json!(if is_functions(entry) {
                "functions"
            } else {
                "compiled"
            });
            removed.push(value);
        }
    }
    let mut removed_blobs = Vec::new();
    for entry in &listing.registry {
        if entry.prunable(now, args.older_than, args.all) {
            if !args.dry_run {
                entry.remove().map_err(|e| {
                    Failure::environment(format!("removing `{}`: {e}", entry.path.display()))
                })?;
            }
            freed += entry.size;
            if let Some(digest) = &entry.digest {
                removed_blobs.push(digest.clone());
            }
            let mut value = registry_json(entry, now);
            value["cache"] = json!("registry");
            removed.push(value);
        }
    }
    // A tag whose manifest went cannot be served any more: it goes too.
    let dangling = listing
        .registry_cache
        .prune_dangling_tags(&removed_blobs, args.dry_run)
        .map_err(oci_failure)?;
    for entry in &dangling {
        if !removed.iter().any(|r| r["path"] == json!(entry.path)) {
            freed += entry.size;
            let mut value = registry_json(entry, now);
            value["cache"] = json!("registry");
            removed.push(value);
        }
    }
    let kept = listing.compiled.len() + listing.registry.len() - removed.len();
    if args.json {
        return print_json(&json!({
            "dry_run": args.dry_run,
            "removed": removed,
            "freed": freed,
            "kept": kept,
        }));
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for entry in &removed {
        println!(
            "{verb} {} ({})",
            entry["path"].as_str().unwrap_or("?"),
            size(entry["size"].as_u64().unwrap_or(0))
        );
    }
    println!(
        "{verb} {} entries, {}; {kept} kept",
        removed.len(),
        size(freed)
    );
    Ok(())
}

/// `57.3 MB`, `812 KB`, `90 B`.
fn size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)];
    for (unit, scale) in UNITS {
        if bytes >= scale {
            return format!("{:.1} {unit}", bytes as f64 / scale as f64);
        }
    }
    format!("{bytes} B")
}

/// `3d`, `5h`, `12m`, `40s`.
fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86_400 => format!("{}d", s / 86_400),
        s if s >= 3_600 => format!("{}h", s / 3_600),
        s if s >= 60 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
