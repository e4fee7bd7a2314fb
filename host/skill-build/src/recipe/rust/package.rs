//! What cargo knows about a skill crate: identity, metadata for the
//! component, and where its workspace is. Read with `cargo metadata`, so
//! workspace inheritance (`edition.workspace = true`…) is resolved by cargo
//! itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::BuildError;
use crate::componentize::ComponentMetadata;

/// A skill crate as cargo sees it.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    pub authors: Vec<String>,
    pub license: Option<String>,
    pub repository: Option<String>,
    pub homepage: Option<String>,
    pub manifest_path: PathBuf,
    pub workspace_root: PathBuf,
    pub target_directory: PathBuf,
    /// `[package.metadata.skillhost] wasi = true`: the skill needs WASI
    /// (std's stderr, clocks, random, env) and is built for `wasm32-wasip1`.
    pub wasi: bool,
}

/// A crate's identity is what its component says about itself.
impl From<&Package> for ComponentMetadata {
    fn from(p: &Package) -> Self {
        ComponentMetadata {
            name: p.name.clone(),
            version: p.version.clone(),
            description: p.description.clone(),
            authors: p.authors.clone(),
            license: p.license.clone(),
            repository: p.repository.clone(),
            homepage: p.homepage.clone(),
        }
    }
}

#[derive(Deserialize)]
struct Metadata {
    packages: Vec<MetaPackage>,
    workspace_root: PathBuf,
    target_directory: PathBuf,
}

#[derive(Deserialize)]
struct MetaPackage {
    name: String,
    version: String,
    description: Option<String>,
    #[serde(default)]
    authors: Vec<String>,
    license: Option<String>,
    repository: Option<String>,
    homepage: Option<String>,
    manifest_path: PathBuf,
    targets: Vec<MetaTarget>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct MetaTarget {
    kind: Vec<String>,
}

/// Reads the package whose manifest is `manifest` (which must exist) with
/// `cargo`.
pub fn read(mut cargo: Command, manifest: &Path) -> Result<Package, BuildError> {
    let output = cargo
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(manifest)
        .output()
        .map_err(|source| BuildError::Spawn {
            program: format!("{:?}", cargo.get_program()),
            source,
        })?;
    if !output.status.success() {
        return Err(BuildError::CargoMetadata {
            manifest: manifest.to_path_buf(),
            stderr_tail: crate::tail(&String::from_utf8_lossy(&output.stderr), 10),
        });
    }
    let metadata: Metadata =
        serde_json::from_slice(&output.stdout).map_err(|e| BuildError::CargoMetadata {
            manifest: manifest.to_path_buf(),
            stderr_tail: format!("unexpected `cargo metadata` output: {e}"),
        })?;
    let wanted = manifest.canonicalize().map_err(|source| BuildError::Io {
        path: manifest.to_path_buf(),
        source,
    })?;
    let package = metadata
        .packages
        .into_iter()
        .find(|p| p.manifest_path.canonicalize().ok().as_deref() == Some(wanted.as_path()))
        .ok_or_else(|| BuildError::NoPackage {
            manifest: manifest.to_path_buf(),
        })?;
    let is_cdylib = package
        .targets
        .iter()
        .any(|t| t.kind.iter().any(|k| k == "cdylib"));
    if !is_cdylib {
        return Err(BuildError::NotCdylib {
            package: package.name,
            manifest: manifest.to_path_buf(),
        });
    }
    let non_empty = |s: Option<String>| s.filter(|s| !s.trim().is_empty());
    let wasi = match package
        .metadata
        .as_ref()
        .and_then(|m| m.get("skillhost"))
        .and_then(|m| m.get("wasi"))
    {
        None => false,
        Some(serde_json::Value::Bool(wasi)) => *wasi,
        Some(other) => {
            return Err(BuildError::CargoMetadata {
                manifest: manifest.to_path_buf(),
                stderr_tail: format!(
                    "`[package.metadata.skillhost] wasi = {other}` must be true or false"
                ),
            });
        }
    };
    Ok(Package {
        name: package.name,
        version: package.version,
        description: non_empty(package.description),
        authors: package.authors,
        license: non_empty(package.license),
        repository: non_empty(package.repository),
        homepage: non_empty(package.homepage),
        manifest_path: package.manifest_path,
        workspace_root: metadata.workspace_root,
        target_directory: metadata.target_directory,
        wasi,
    })
}

/// A `cargo` that can run `cargo metadata`: the one in `PATH` (rustup's
/// proxy, usually), else Debian's.
pub fn metadata_cargo() -> Command {
    let in_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("cargo").is_file()));
    if in_path || !Path::new("/usr/bin/cargo").exists() {
        Command::new("cargo")
    } else {
        Command::new("/usr/bin/cargo")
    }
}
