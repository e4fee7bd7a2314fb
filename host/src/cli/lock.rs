//! `host lock SCENARIO`: resolve every registry component of a scenario
//! now, pull it into the registry cache (under the trust policy), and write
//! the scenario's lock beside it (`NAME.lock` for `NAME.toml`). The
//! scenario is then checked with the new lock; if it does not pass, the old
//! lock (or none) is put back.

use clap::Args;
use serde_json::json;

use super::common::{
    CliResult, CredentialArgs, Failure, Globals, RegistryArgs, load_checked, oci_failure,
    print_json, progress, scenario_dir, trust_policy,
};
use skillhost_oci::{Lock, ResolveOptions, lock_path};
use skillhost_scenario::{self as scenario, ComponentSource};

#[derive(Debug, Args)]
pub struct LockArgs {
    /// The scenario file (or name).
    pub scenario: String,
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// Print the lock's entries as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn lock(args: LockArgs, globals: &Globals) -> CliResult {
    let path = scenario::resolve(&args.scenario).map_err(Failure::bad_input)?;
    let (parsed, _) = scenario::parse_file(&path).map_err(|report| {
        Failure::bad_input(format!(
            "scenario `{}` does not pass the checker:\n{report}",
            path.display()
        ))
    })?;
    let resolver = globals
        .resolver(
            ResolveOptions::default(),
            args.credentials.credentials()?,
            scenario_dir(&path),
        )?
        .with_progress(progress());
    let policy = trust_policy(&resolver.connection().config, &parsed.trust_keys)?;
    let mut entries = Vec::new();
    for (alias, skill) in &parsed.skills {
        let ComponentSource::Registry(text) = &skill.component else {
            continue;
        };
        let reference = skillhost_oci::ComponentRef::parse(text)
            .map_err(|e| Failure::bad_input(format!("skill `{alias}`: {e}")))?;
        let resolved = resolver.fetch(&reference, &policy).map_err(|e| {
            let mut failure = oci_failure(e);
            failure.message = format!("skill `{alias}`: {}", failure.message);
            failure
        })?;
        entries.push(resolved.lock_entry(alias, text));
    }
    let lock_file = lock_path(&parsed.path);
    if entries.is_empty() {
        return Err(Failure::bad_input(format!(
            "scenario `{}` has no registry components (`oci://…`) to lock; a scenario of \
             local files needs no lock",
            path.display()
        )));
    }
    let previous = Lock::read(&lock_file).map_err(oci_failure);
    let lock = Lock::new(entries);
    lock.write(&lock_file).map_err(oci_failure)?;
    // The scenario must load with what was locked (from the cache now).
    let checked = load_checked(
        &path,
        globals,
        RegistryArgs {
            locked: true,
            offline: true,
        },
    )?;
    if let Err((report, _)) = checked {
        match previous {
            Ok(Some(old)) => old.write(&lock_file).map_err(oci_failure)?,
            _ => {
                let _ = std::fs::remove_file(&lock_file);
            }
        }
        return Err(Failure::bad_input(format!(
            "scenario `{}` does not pass the checker with the components it names now; the \
             lock was not changed:\n{report}",
            path.display()
        )));
    }
    if args.json {
        return print_json(&json!({
            "lock": lock_file.display().to_string(),
            "components": lock.components.iter().map(|c| json!({
                "alias": c.alias,
                "reference": c.reference,
                "digest": c.digest,
                "layer": c.layer,
                "size": c.size,
            })).collect::<Vec<_>>(),
        }));
    }
    for c in &lock.components {
        println!(
            "{:<20} {} {} ({} bytes)",
            c.alias, c.reference, c.digest, c.size
        );
    }
    println!("wrote {}", lock_file.display());
    Ok(())
}
