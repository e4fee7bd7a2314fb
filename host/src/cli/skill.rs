//! `host skill new|build|inspect|call`: writing a skill and working with one
//! skill component; and
//! `push|publish|pull|keygen|sign`, with registries (`skill/registry.rs`).

mod build;
mod new;
mod registry;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::common::{
    CliResult, CredentialArgs, Failure, Globals, current_dir, oci_failure, print_json,
    read_json_arg, shown, shown_lines, trust_policy,
};
use skillhost_runtime::{CallError, CallOptions, Capability, Grants, Limits, Runtime, Skill};

#[derive(Debug, Subcommand)]
pub enum SkillCommand {
    /// Write a new skill's directory in a language (rust, python, js, c, zig): world, code, unit test, README.
    New(new::NewArgs),
    /// Build a skill's source directory into a component.
    Build(build::BuildArgs),
    /// Show a component's manifest, imports, exports, WIT and JSON Schemas.
    Inspect(InspectArgs),
    /// Call a component's `run` once with a JSON input, like `extism call`.
    Call(CallArgs),
    /// Publish a component to an OCI registry; prints its digest.
    #[command(alias = "publish")]
    Push(registry::PushArgs),
    /// Pull a component from a registry into the registry cache (and --out FILE).
    Pull(registry::PullArgs),
    /// Make a signing key pair (PREFIX.key, PREFIX.pub).
    Keygen(registry::KeygenArgs),
    /// Sign a component in a registry (cosign's layout: the `sha256-DIGEST.sig` tag).
    Sign(registry::SignArgs),
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The component: a file (.wasm), or a registry reference (oci://REGISTRY/REPOSITORY:TAG), pulled into the registry cache.
    component: String,
    #[command(flatten)]
    credentials: CredentialArgs,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The component file (.wasm).
    component: PathBuf,
    /// The input: inline JSON, or @FILE.
    #[arg(long, value_name = "JSON|@FILE")]
    input: String,
    // Grant a capability: the help lists each capability's value, as its
    // module states it (`Capability::grant_flag_help`).
    #[arg(long = "grant", value_name = "CAP=VALUE", help = Capability::grant_flag_help())]
    grants: Vec<String>,
    /// Wall-clock limit for the call.
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    timeout_ms: u64,
    /// Linear memory limit.
    #[arg(long, value_name = "N", default_value_t = 256)]
    memory_mb: u64,
    /// Fuel (instruction budget); unlimited when absent.
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// The most `kv`, `http`, `sql` and `llm` calls the call may make.
    #[arg(long, value_name = "N", default_value_t = skillhost_runtime::limits::DEFAULT_MAX_HOST_CALLS)]
    max_host_calls: u32,
    /// The MiB those host calls' requests and answers may hold; as many as
    /// --memory-mb when absent.
    #[arg(long, value_name = "N")]
    host_call_mb: Option<u64>,
    /// Largest output accepted, as compact JSON bytes.
    #[arg(long, value_name = "N", default_value_t = 16 << 20)]
    max_output_bytes: u64,
    /// Print one JSON object with the output or the error, logs and usage.
    #[arg(long)]
    json: bool,
}

pub fn run(command: SkillCommand, globals: &Globals) -> CliResult {
    match command {
        SkillCommand::Build(args) => build::run(args, globals),
        SkillCommand::New(args) => new::run(args),
        SkillCommand::Inspect(args) => inspect(args, globals),
        SkillCommand::Call(args) => call(args, globals),
        SkillCommand::Push(args) => registry::push(args, globals),
        SkillCommand::Pull(args) => registry::pull(args, globals),
        SkillCommand::Keygen(args) => registry::keygen(args),
        SkillCommand::Sign(args) => registry::sign(args, globals),
    }
}

fn load(runtime: &Runtime, path: &std::path::Path) -> Result<Arc<Skill>, Failure> {
    runtime.load_file(path).map_err(Failure::bad_input)
}

/// The file `host skill inspect` reads: the argument when it is a file,
/// else the component it references, pulled into the registry cache (with
/// the host config's trust policy); and what the registry said of it.
fn inspected_file(
    args: &InspectArgs,
    globals: &Globals,
) -> Result<(PathBuf, Option<serde_json::Value>), Failure> {
    let as_path = PathBuf::from(&args.component);
    let is_reference = skillhost_oci::ComponentRef::is_registry_reference(&args.component);
    if !is_reference && (as_path.exists() || args.component.ends_with(".wasm")) {
        return Ok((as_path, None));
    }
    let reference = skillhost_oci::ComponentRef::parse(&args.component).map_err(|e| {
        if is_reference {
            oci_failure(e)
        } else {
            Failure::bad_input(format!(
                "no file `{}`, and it is not a registry reference either: {e}",
                args.component
            ))
        }
    })?;
    let resolver = globals.resolver(
        skillhost_oci::ResolveOptions::default(),
        args.credentials.credentials()?,
        &current_dir()?,
    )?;
    let policy = trust_policy(&resolver.connection().config, &[])?;
    let resolved = resolver.fetch(&reference, &policy).map_err(oci_failure)?;
    let registry = json!({
        "reference": resolved.reference.to_string(),
        "manifest_digest": resolved.digest,
        "annotations": resolved.annotations,
        "signed_by": resolved.signed_by,
    });
    Ok((resolved.path, Some(registry)))
}

fn inspect(args: InspectArgs, globals: &Globals) -> CliResult {
    let (file, registry) = inspected_file(&args, globals)?;
    let skill = load(&globals.runtime(None)?, &file)?;
    let interface = skill.interface().map_err(|e| {
        Failure::bad_input(format!("`{}`: cannot decode its WIT: {e}", args.component))
    })?;
    let metadata = metadata_json(skill.bytes());
    let m = &skill.manifest;
    let capabilities: Vec<String> = skill.capabilities.iter().map(|c| c.to_string()).collect();
    let undeclared: Vec<String> = skill
        .undeclared_imports()
        .iter()
        .map(|c| c.to_string())
        .collect();
    if args.json {
        return print_json(&json!({
            "name": m.id,
            "display_name": m.name,
            "version": m.version,
            "description": m.description,
            "digest": format!("sha256:{}", skill.digest),
            "size": skill.bytes().len(),
            "world": interface.world,
            "docs": interface.docs,
            "capabilities": capabilities,
            "declared_capabilities": m.capabilities,
            "imported_capabilities": skill.imported_capabilities.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            "denied_imports": undeclared,
            "retry": m.retry,
            "estimated_duration_ms": m.estimated_duration_ms,
            "abi": match skill.abi() {
                skillhost_runtime::Abi::Sync => "sync",
                skillhost_runtime::Abi::Async => "async",
            },
            "imports": skill.imports,
            "exports": skill.exports,
            "metadata": metadata,
            "registry": registry,
            "wit": interface.wit,
            "input_schema": interface.input_schema,
            "output_schema": interface.output_schema,
        }));
    }
    let list = |items: &[String]| {
        if items.is_empty() {
            "(none)".to_string()
        } else {
            items.join(", ")
        }
    };
    // The manifest, docs and metadata are the component's own words:
    // shown, never printed raw.
    println!(
        "skill         {} {} ({})",
        shown(&m.id),
        shown(&m.version),
        shown(&m.name)
    );
    println!("description   {}", shown(&m.description));
    println!(
        "file          {} ({} bytes)",
        file.display(),
        skill.bytes().len()
    );
    println!("digest        sha256:{}", skill.digest);
    if let Some(registry) = &registry {
        println!(
            "reference     {}",
            registry["reference"].as_str().unwrap_or("")
        );
        println!(
            "manifest      {}",
            registry["manifest_digest"].as_str().unwrap_or("")
        );
        if let Some(key) = registry["signed_by"].as_str() {
            println!("signed by     {}", shown(key));
        }
        if let Some(annotations) = registry["annotations"].as_object() {
            for (key, value) in annotations {
                println!(
                    "annotation    {}={}",
                    shown(key),
                    shown(value.as_str().unwrap_or(""))
                );
            }
        }
    }
    println!("world         {}", shown(&interface.world));
    if let Some(docs) = &interface.docs {
        let mut lines = docs.lines();
        println!("docs          {}", shown(lines.next().unwrap_or("")));
        for line in lines {
            println!("              {}", shown(line));
        }
    }
    println!(
        "capabilities  {} (declared; a scenario grants them)",
        list(&capabilities)
    );
    if !undeclared.is_empty() {
        println!(
            "denied        {} (imported, not declared: every call is refused with capability-not-granted)",
            undeclared.join(", ")
        );
    }
    println!(
        "retry         {} attempt(s), first backoff {} ms",
        m.retry.max_attempts, m.retry.initial_backoff_ms
    );
    println!("estimated     {} ms per call", m.estimated_duration_ms);
    println!("abi           {}", skill.abi().describe());
    println!("imports       {}", list(&skill.imports));
    println!("exports       {}", list(&skill.exports));
    if let Some(fields) = metadata.as_object() {
        for (key, value) in fields {
            if let Some(text) = value.as_str() {
                println!("{:<13} {}", shown(key), shown(text));
            }
        }
    }
    println!("\n--- WIT ---\n{}", shown_lines(interface.wit.trim_end()));
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    println!(
        "\n--- input schema ---\n{}",
        pretty(&interface.input_schema)
    );
    println!(
        "\n--- output schema ---\n{}",
        pretty(&interface.output_schema)
    );
    Ok(())
}

/// The standard wasm metadata sections (name, version, authors, …) that are present.
fn metadata_json(bytes: &[u8]) -> serde_json::Value {
    let Ok(wasm_metadata::Payload::Component { metadata, .. }) =
        wasm_metadata::Payload::from_binary(bytes)
    else {
        return json!({});
    };
    let mut out = serde_json::Map::new();
    let mut put = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            out.insert(key.to_string(), json!(value));
        }
    };
    put("component_name", metadata.name.clone());
    put("authors", metadata.authors.as_ref().map(|v| v.to_string()));
    put(
        "licenses",
        metadata.licenses.as_ref().map(|v| v.to_string()),
    );
    put("source", metadata.source.as_ref().map(|v| v.to_string()));
    put(
        "homepage",
        metadata.homepage.as_ref().map(|v| v.to_string()),
    );
    put(
        "revision",
        metadata.revision.as_ref().map(|v| v.to_string()),
    );
    put(
        "pkg_version",
        metadata.version.as_ref().map(|v| v.to_string()),
    );
    serde_json::Value::Object(out)
}

fn call(args: CallArgs, globals: &Globals) -> CliResult {
    let input = read_json_arg(&args.input)?;
    let mut grants = Grants::default();
    for spec in &args.grants {
        grants.add_spec(spec).map_err(Failure::bad_input)?;
    }
    let limits = Limits {
        timeout: Duration::from_millis(args.timeout_ms),
        memory_bytes: args.memory_mb.saturating_mul(1 << 20),
        fuel: args.fuel,
        max_output_bytes: args.max_output_bytes,
        max_host_calls: args.max_host_calls,
        host_call_bytes: args.host_call_mb.map(|mb| mb.saturating_mul(1 << 20)),
        ..Limits::default()
    };
    limits.validate().map_err(Failure::bad_input)?;
    let runtime = globals.runtime_here()?;
    // A provider the host's configuration lacks, or whose key is not set,
    // is the command line's mistake: said before the skill runs.
    if let Some(grant) = &grants.llm {
        runtime
            .backends()
            .llm
            .check(&grant.provider)
            .map_err(|problem| Failure::bad_input(format!("capability `llm`: {problem}")))?;
    }
    let skill = load(&runtime, &args.component)?;
    let options = CallOptions {
        limits,
        grants: Arc::new(grants),
        ..CallOptions::default()
    };
    let report = skill.call(&input, &options);
    if args.json {
        let (output, error) = match &report.result {
            Ok(output) => (output.clone(), serde_json::Value::Null),
            Err(e) => (serde_json::Value::Null, e.to_json()),
        };
        print_json(&json!({
            "skill": skill.name,
            "output": output,
            "error": error,
            "logs": report.logs,
            "logs_dropped": report.logs_dropped,
            "fuel_consumed": report.fuel_consumed,
            "memory_peak_bytes": report.memory_peak_bytes,
            "usage": report.usage.to_json(),
            "duration_us": report.duration.as_micros() as u64,
        }))?;
        return match report.result {
            Ok(_) => Ok(()),
            Err(e) => Err(Failure {
                code: exit_code(&e),
                message: String::new(),
            }),
        };
    }
    let name = shown(&skill.name);
    for line in &report.logs {
        eprintln!("[{name}] {:?}: {}", line.level, shown(&line.message));
    }
    if report.logs_dropped > 0 {
        eprintln!(
            "[{name}] {} more log line(s) dropped: the call's log budget of {} bytes was spent",
            report.logs_dropped, options.limits.max_log_bytes
        );
    }
    if !report.usage.is_zero() {
        let usage = report.usage;
        eprintln!(
            "[{name}] llm: {} tokens ({} in, {} out) in {} completion(s)",
            usage.total(),
            usage.input_tokens,
            usage.output_tokens,
            usage.calls
        );
    }
    match report.result {
        Ok(output) => print_json(&output),
        // The message is the skill's own words: one line, escaped (the
        // exit's `error:` line keeps the new lines of the host's own).
        Err(e) => Err(Failure {
            code: exit_code(&e),
            message: format!("[{}] {}", e.kind(), shown(&e.to_string())),
        }),
    }
}

/// Input that does not fit is the caller's mistake (2); anything else is the skill failing (1).
fn exit_code(error: &CallError) -> u8 {
    match error {
        CallError::InvalidInput { .. } => 2,
        _ => 1,
    }
}
