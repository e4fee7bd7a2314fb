//! Loading what a command acts on: a scenario, checked, with its registry
//! components resolved through `skillhost-oci` (the lock, the trust
//! policy, `--locked`, `--offline`) and the checker's report on failure;
//! a server's several scenarios, each set aside with why when it cannot
//! run; a claimed run's scenario for a worker; a run by id.

use std::path::{Path, PathBuf};

use serde_json::Value;

use skillhost_oci::{Lock, ResolveOptions, Resolver, TrustPolicy};
use skillhost_runtime::Runtime;
use skillhost_scenario::{self as scenario, CheckReport, LoadedScenario, Scenario};
use skillhost_store::{History, RunRow};

use super::{
    Failure, Globals, RegistryArgs, oci_failure, print_json, shown, shown_lines, store_error,
    trust_policy,
};

/// The directory a scenario file is in: where its `skillhost.toml` is
/// looked for.
pub fn scenario_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The run `id`; one that does not exist is a bad input (exit 2).
pub async fn fetch_run(store: &History, id: &str) -> Result<RunRow, Failure> {
    store.run(id).await.map_err(store_error)?.ok_or_else(|| {
        Failure::bad_input(format!(
            "run `{id}` does not exist in {}; list runs with `host runs list`",
            store.url_for_display()
        ))
    })
}

/// Parses, checks and loads the scenario at `path`, its registry
/// components resolved as `registry` says: the checker's report on failure,
/// and whether that failure is the environment's (an unreachable registry,
/// a component missing from the cache offline).
pub fn load_checked(
    path: &Path,
    globals: &Globals,
    registry: RegistryArgs,
) -> Result<Result<LoadedScenario, (CheckReport, bool)>, Failure> {
    let runtime = globals.runtime(Some(scenario_dir(path)))?;
    Ok(load_with_registry(path, &runtime, globals, registry))
}

/// [`load_checked`] on a runtime the caller made (a worker's, shared by
/// every run it claims).
pub fn load_with_registry(
    path: &Path,
    runtime: &Runtime,
    globals: &Globals,
    registry: RegistryArgs,
) -> Result<LoadedScenario, (CheckReport, bool)> {
    let components = ScenarioComponents {
        globals,
        options: registry.options(),
        state: std::cell::RefCell::new(None),
        environment: std::cell::Cell::new(false),
    };
    scenario::load_with(path, runtime, &components)
        .map_err(|report| (report, components.environment.get()))
}

/// The scenario loader's view of the registry: each `oci://` component
/// through [`Resolver::resolve`], with the scenario's lock and the trust
/// policy of the host config and the scenario. Made on the first registry
/// component, so a scenario of local files opens no cache.
struct ScenarioComponents<'a> {
    globals: &'a Globals,
    options: ResolveOptions,
    /// Made on the first registry component; a failure to make it is
    /// reported once, in full, and named by the later components.
    state: std::cell::RefCell<Option<Result<Resolving, ()>>>,
    /// Whether a failure so far was the environment's.
    environment: std::cell::Cell<bool>,
}

struct Resolving {
    resolver: Resolver,
    lock: Option<Lock>,
    policy: TrustPolicy,
}

impl ScenarioComponents<'_> {
    fn start(&self, scenario: &Scenario) -> Result<Resolving, Failure> {
        let resolver = self
            .globals
            .resolver(self.options, None, scenario_dir(&scenario.path))?;
        let lock_path = skillhost_oci::lock_path(&scenario.path);
        let lock = Lock::read(&lock_path).map_err(oci_failure)?;
        if self.options.locked && lock.is_none() {
            return Err(Failure::bad_input(format!(
                "--locked, and the scenario has no lock `{}`; write it with `host lock {}`",
                lock_path.display(),
                scenario.path.display()
            )));
        }
        let policy = trust_policy(&resolver.connection().config, &scenario.trust_keys)?;
        Ok(Resolving {
            resolver,
            lock,
            policy,
        })
    }
}

impl scenario::ComponentResolver for ScenarioComponents<'_> {
    fn resolve(
        &self,
        scenario: &Scenario,
        alias: &str,
        reference: &str,
    ) -> Result<PathBuf, String> {
        let mut state = self.state.borrow_mut();
        if state.is_none() {
            match self.start(scenario) {
                Ok(started) => *state = Some(Ok(started)),
                Err(failure) => {
                    *state = Some(Err(()));
                    self.environment.set(failure.code == 3);
                    return Err(failure.message);
                }
            }
        }
        let Some(Ok(resolving)) = state.as_ref() else {
            return Err(format!(
                "skill `{alias}` (`{reference}`) is not resolved: see the first registry error"
            ));
        };
        match resolving.resolver.resolve(
            alias,
            reference,
            resolving.lock.as_ref(),
            &resolving.policy,
        ) {
            Ok(resolved) => {
                if resolved.downloaded > 0 {
                    eprintln!(
                        "pulled {} ({} bytes)",
                        shown(&resolved.reference.to_string()),
                        resolved.downloaded
                    );
                }
                Ok(resolved.path)
            }
            Err(e) => {
                if e.is_environment() {
                    self.environment.set(true);
                }
                Err(format!("skill `{alias}`: {e}"))
            }
        }
    }
}

/// Finds, parses, checks and loads a scenario; a check failure is exit 2,
/// a registry that cannot be reached (or, offline, a component that is not
/// in the cache) exit 3. With `json`, a check failure also prints the
/// diagnostics on stdout as `host check --json` does.
pub fn load_scenario(
    name: &str,
    globals: &Globals,
    registry: RegistryArgs,
    json: bool,
) -> Result<LoadedScenario, Failure> {
    let path = scenario::resolve(name).map_err(Failure::bad_input)?;
    let loaded = match load_checked(&path, globals, registry)? {
        Ok(loaded) => loaded,
        Err((report, true)) => {
            if json {
                print_json(&report.to_json())?;
            }
            return Err(Failure::environment(format!(
                "scenario `{}`: a registry component cannot be had:\n{report}",
                path.display()
            )));
        }
        Err((report, false)) => return Err(check_failure(&path, report, json)?),
    };
    for warning in &loaded.warnings {
        eprintln!("warning: {}", shown(&warning.to_string()));
    }
    Ok(loaded)
}

/// [`load_scenario`] of the scenario `run` was started from, its file
/// written back first from the text the run keeps when it is missing (a
/// composed scenario's; `skillhost_engine::restore_scenario_file`).
pub fn load_run_scenario(
    run: &RunRow,
    globals: &Globals,
    registry: RegistryArgs,
    json: bool,
) -> Result<LoadedScenario, Failure> {
    skillhost_engine::restore_scenario_file(run).map_err(Failure::environment)?;
    load_scenario(&run.scenario_path, globals, registry, json)
}

/// The failure of a scenario that does not pass the checker (exit 2); with
/// `json`, the diagnostics go to stdout.
fn check_failure(path: &Path, report: CheckReport, json: bool) -> Result<Failure, Failure> {
    if json {
        print_json(&report.to_json())?;
        return Ok(Failure::bad_input(format!(
            "scenario `{}` does not pass the checker ({} error(s), on stdout)",
            path.display(),
            report.errors.len()
        )));
    }
    Ok(Failure::bad_input(format!(
        "scenario `{}` does not pass the checker:\n{report}",
        path.display()
    )))
}

/// A scenario a server was given that cannot run on this host, and why.
pub struct NotLoaded {
    /// Its `[scenario] name` when the file parses, else its directory's
    /// name (for a `scenario.toml`) or its file's stem.
    pub name: String,
    pub path: PathBuf,
    /// What `host run` would have said: the loader's or checker's report.
    pub reason: String,
}

/// Loads and checks each of `files` as `host run` does, for a server that
/// offers several: one that does not load or does not pass the checker (a
/// TOML error, a cycle, a grant outside its directory, an `llm` provider
/// the host is not configured for, a registry component not to be had) is
/// set aside with why, and said on stderr, instead of refusing them all.
/// Two scenarios of the same name, loaded or not, are refused: which one
/// a name starts would be a guess.
pub fn load_each(
    files: &[PathBuf],
    globals: &Globals,
    registry: RegistryArgs,
) -> Result<(Vec<std::sync::Arc<LoadedScenario>>, Vec<NotLoaded>), Failure> {
    let mut loaded: Vec<std::sync::Arc<LoadedScenario>> = Vec::new();
    let mut unavailable: Vec<NotLoaded> = Vec::new();
    let mut names: Vec<(String, PathBuf)> = Vec::new();
    for path in files {
        let name = match load_scenario(&path.display().to_string(), globals, registry, false) {
            Ok(scenario) => {
                let name = scenario.scenario.name.clone();
                loaded.push(std::sync::Arc::new(scenario));
                name
            }
            Err(failure) => {
                let name = name_of(path);
                eprintln!(
                    "warning: scenario `{}` ({}) is unavailable: {}",
                    shown(&name),
                    path.display(),
                    shown_lines(&failure.message)
                );
                unavailable.push(NotLoaded {
                    name: name.clone(),
                    path: path.clone(),
                    reason: failure.message,
                });
                name
            }
        };
        if let Some((_, other)) = names.iter().find(|(n, _)| *n == name) {
            return Err(Failure::bad_input(format!(
                "two scenarios are named `{}`: {} and {}; give only one of them",
                shown(&name),
                other.display(),
                path.display()
            )));
        }
        names.push((name, path.clone()));
    }
    Ok((loaded, unavailable))
}

/// The name a scenario that does not load is listed by: its own when its
/// file parses, else its directory's (a `scenario.toml`) or its file's.
fn name_of(path: &Path) -> String {
    if let Ok((scenario, _)) = skillhost_scenario::parse_file(path) {
        return scenario.name;
    }
    let stem = if path.file_name().is_some_and(|f| f == "scenario.toml") {
        path.parent().and_then(|dir| dir.file_name())
    } else {
        path.file_stem()
    };
    stem.map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
}

/// Fills in `[input]`'s defaults and checks the run input against it, as
/// the engine will, so that input which does not fit is refused (exit 2)
/// before a database is opened or created.
pub fn checked_input(loaded: &LoadedScenario, mut input: Value) -> Result<Value, Failure> {
    let scenario = &*loaded.scenario;
    scenario.apply_input_defaults(&mut input);
    scenario.validate_input(&input).map_err(|message| {
        Failure::bad_input(format!(
            "scenario `{}`: the run input does not fit [input]: {message}; see the [input] \
             section of {} for the fields, their types and which are required",
            scenario.name,
            scenario.path.display()
        ))
    })?;
    Ok(input)
}

/// Loads a claimed run's scenario with its `oci://` components resolved as
/// `host run` resolves them (the scenario's lock and trust policy, the
/// registry cache, `--locked`, `--offline`). The engine then refuses a run
/// whose components are not the ones it was started with.
pub fn scenario_loader(
    globals: Globals,
    registry: RegistryArgs,
) -> skillhost_engine::worker::ScenarioLoader {
    skillhost_engine::worker::ScenarioLoader::new(move |path, runtime| {
        load_with_registry(path, runtime, &globals, registry)
            .map_err(|(report, _)| report.to_string())
    })
}
