//! `host skill push|publish`, `pull`, `keygen` and `sign`: skill components
//! in OCI registries, through `skillhost-oci`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::super::common::{
    CliResult, CredentialArgs, Failure, Globals, check_output_path, connection, current_dir,
    oci_failure, print_json, progress, tokio_runtime, trust_policy,
};
use skillhost_oci::layout::{self, Artifact};
use skillhost_oci::{ComponentRef, PrivateKey, Registry, ResolveOptions};

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The component file (.wasm).
    pub component: PathBuf,
    /// Where to push it: REGISTRY/REPOSITORY:TAG (with or without oci://), e.g. 127.0.0.1:5000/skills/echo:0.1.0.
    pub reference: String,
    /// An annotation of the manifest, besides those from the component's metadata. Repeatable.
    #[arg(long = "annotation", value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// Sign what was pushed with this private key (see `host skill keygen`).
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST (with or without oci://).
    pub reference: String,
    /// Also write the component to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace the --out file if it exists.
    #[arg(long, requires = "out")]
    pub force: bool,
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Write PREFIX.key (private, mode 0600) and PREFIX.pub.
    #[arg(long, value_name = "PREFIX", default_value = "skillhost")]
    pub out: PathBuf,
    /// Replace existing key files.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The component to sign: REGISTRY/REPOSITORY:TAG or @sha256:DIGEST.
    pub reference: String,
    /// The private key (from `host skill keygen`).
    #[arg(long, value_name = "KEY")]
    pub key: PathBuf,
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn parse_reference(text: &str) -> Result<ComponentRef, Failure> {
    ComponentRef::parse(text).map_err(oci_failure)
}

pub fn push(args: PushArgs, globals: &Globals) -> CliResult {
    let reference = parse_reference(&args.reference)?;
    let key = args
        .sign
        .as_deref()
        .map(PrivateKey::load)
        .transpose()
        .map_err(oci_failure)?;
    let mut extra = BTreeMap::new();
    // The skill's own manifest fills what the metadata sections lack.
    let skill = globals
        .runtime(None)?
        .load_file(&args.component)
        .map_err(Failure::bad_input)?;
    let bytes = skill.bytes();
    let metadata = layout::annotations_from_metadata(bytes);
    let manifest = &skill.manifest;
    for (key, value) in [
        (layout::TITLE, &manifest.id),
        (layout::VERSION, &manifest.version),
        (layout::DESCRIPTION, &manifest.description),
    ] {
        if !metadata.contains_key(key) && !value.is_empty() {
            extra.insert(key.to_string(), value.clone());
        }
    }
    extra.extend(skillhost_oci::registry::annotations(&args.annotations).map_err(oci_failure)?);
    let artifact = Artifact::build(bytes, &layout::created_now(), &extra)
        .map_err(|e| Failure::bad_input(format!("`{}`: {e}", args.component.display())))?;
    let connection = connection(args.credentials.credentials()?, &current_dir()?)?;
    let registry = Registry::connect(&reference, &connection).map_err(oci_failure)?;
    let progress = progress();
    let rt = tokio_runtime()?;
    let (pushed, signature) = rt.block_on(async {
        let pushed = registry
            .push(&reference, &artifact, bytes, progress.as_ref())
            .await
            .map_err(oci_failure)?;
        let signature = match &key {
            Some(key) => Some(
                registry
                    .sign(&reference, &pushed.digest, key)
                    .await
                    .map_err(oci_failure)?,
            ),
            None => None,
        };
        Ok::<_, Failure>((pushed, signature))
    })?;
    if args.json {
        return print_json(&json!({
            "reference": reference.to_string(),
            "digest": pushed.digest,
            "size": bytes.len(),
            "layer": artifact.layer.digest,
            "annotations": pushed.manifest.annotations,
            "signature": signature,
        }));
    }
    println!("pushed {reference} ({} bytes)", bytes.len());
    if let Some(tag) = &signature {
        println!("signed {tag}");
    }
    println!("{}", pushed.digest);
    Ok(())
}

pub fn pull(args: PullArgs, globals: &Globals) -> CliResult {
    let reference = parse_reference(&args.reference)?;
    if let Some(out) = &args.out {
        check_output_path(out, args.force)?;
    }
    let resolver = globals
        .resolver(
            ResolveOptions::default(),
            args.credentials.credentials()?,
            &current_dir()?,
        )?
        .with_progress(progress());
    let policy = trust_policy(&resolver.connection().config, &[])?;
    let resolved = resolver.fetch(&reference, &policy).map_err(oci_failure)?;
    if let Some(out) = &args.out {
        copy_out(&resolved.path, out, args.force)?;
    }
    // Compiled now, so the first run that uses it loads it from the cache.
    let precompiled = super::build::precompile(&resolved.path, globals)?;
    if args.json {
        return print_json(&json!({
            "precompiled": precompiled,
            "reference": resolved.reference.to_string(),
            "digest": resolved.digest,
            "layer": resolved.layer,
            "size": resolved.size,
            "downloaded": resolved.downloaded,
            "path": resolved.path,
            "out": args.out,
            "signed_by": resolved.signed_by,
            "annotations": resolved.annotations,
        }));
    }
    println!("pulled {} ({} bytes)", resolved.reference, resolved.size);
    if let Some(key) = &resolved.signed_by {
        println!("signed by {key}");
    }
    println!(
        "file {}",
        args.out.as_deref().unwrap_or(&resolved.path).display()
    );
    println!("{}", resolved.digest);
    if let Some(p) = precompiled {
        println!("cache {}: runs load it from the host's cache", p.summary());
    }
    Ok(())
}

/// Copies the cached component to `out` through a temporary file in its
/// directory, streaming (a large component is never held in memory).
fn copy_out(from: &Path, out: &Path, force: bool) -> CliResult {
    check_output_path(out, force)?;
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let cannot = |e: &dyn std::fmt::Display| {
        Failure::environment(format!("cannot write `{}`: {e}", out.display()))
    };
    let mut file = tempfile::Builder::new()
        .prefix(".skillhost-out-")
        .tempfile_in(dir)
        .map_err(|e| cannot(&e))?;
    let mut source = std::fs::File::open(from).map_err(|e| cannot(&e))?;
    std::io::copy(&mut source, &mut file).map_err(|e| cannot(&e))?;
    file.flush().map_err(|e| cannot(&e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| cannot(&e))?;
    }
    let persisted = if force {
        file.persist(out)
    } else {
        file.persist_noclobber(out)
    };
    persisted.map_err(|e| cannot(&e.error))?;
    Ok(())
}

pub fn keygen(args: KeygenArgs) -> CliResult {
    let with = |ext: &str| {
        let mut name = args.out.clone().into_os_string();
        name.push(ext);
        PathBuf::from(name)
    };
    let (private, public) = (with(".key"), with(".pub"));
    let key = PrivateKey::generate();
    key.write(&private, &public, args.force)
        .map_err(oci_failure)?;
    println!(
        "private key {} (keep it secret; mode 0600)",
        private.display()
    );
    println!(
        "public key  {} (list it under [trust] keys)",
        public.display()
    );
    println!("fingerprint {}", key.fingerprint());
    Ok(())
}

pub fn sign(args: SignArgs, globals: &Globals) -> CliResult {
    let reference = parse_reference(&args.reference)?;
    let key = PrivateKey::load(&args.key).map_err(oci_failure)?;
    let resolver = globals.resolver(
        ResolveOptions::default(),
        args.credentials.credentials()?,
        &current_dir()?,
    )?;
    let (digest, tag) = resolver.sign(&reference, &key).map_err(oci_failure)?;
    if args.json {
        return print_json(&json!({
            "reference": reference.to_string(),
            "digest": digest,
            "signature": tag,
            "key": key.fingerprint(),
        }));
    }
    println!(
        "signed {} with key {}",
        reference.pinned(&digest),
        key.fingerprint()
    );
    println!("signature {tag}");
    Ok(())
}
