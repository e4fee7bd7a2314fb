//! The host's configuration file: where it is looked for and what it may
//! hold. It configures what a scenario must not choose for itself, today the
//! model providers the `llm` capability reaches:
//!
//! ```toml
//! [llm.providers.local]
//! kind = "openai"                          # chat completions: OpenAI, vLLM, llama.cpp, Ollama's /v1, LM Studio
//! base_url = "http://127.0.0.1:11434/v1"
//! api_key_env = "OLLAMA_API_KEY"           # optional: the key is read from the environment
//!
//! [llm.providers.claude]
//! kind = "anthropic"                       # the messages API
//! api_key_env = "ANTHROPIC_API_KEY"        # base_url defaults per kind
//! timeout_ms = 120000                      # optional: one request's longest wait
//! max_retries = 3                          # optional: retries of a 429 or 5xx (default 3)
//! ```
//!
//! **Where.** The first of these that exists is read, whole; files are never
//! merged, and the lookup stops at the first one found:
//!
//! 1. `skillhost.toml` in the scenario's directory (for commands without a
//!    scenario, `host skill call` and `host worker`, the current directory):
//!    the configuration that travels with a project;
//! 2. the file `$SKILLHOST_CONFIG` names, when it is set (a file it names
//!    that does not exist is an error: it was asked for);
//! 3. `$XDG_CONFIG_HOME/skillhost/config.toml`, else
//!    `~/.config/skillhost/config.toml`: the user's own.
//!
//! The same file holds `[registries]` and `[trust]`, which `skillhost-oci`
//! reads (the `host` binary hands it the file found here), so one file
//! configures a host whatever it reaches.
//!
//! No file at all is a configuration without providers. Every key is known:
//! an unknown one is an error naming the file, the line and the key. A
//! secret is never written in the file: `api_key_env` names the environment
//! variable holding it, read when the file is, and the key appears in no
//! error, log, journal entry or `Debug` output.
//!
//! This module reads files and the environment; it knows nothing of
//! scenarios beyond the directory it is given, and the providers themselves
//! (their kinds, defaults and checks) are the `llm` capability's
//! ([`crate::capabilities::llm::LlmProviders`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::capabilities::llm::LlmProviders;

/// The name of the configuration file looked for in a scenario's directory.
pub const PROJECT_CONFIG_FILE: &str = "skillhost.toml";
/// The environment variable naming a configuration file.
pub const CONFIG_ENV: &str = "SKILLHOST_CONFIG";

/// The host's configuration, as read from one file (or none).
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The providers of the `llm` capability: set it in
    /// `Backends::llm` (`RuntimeConfig::backends`).
    pub llm: Arc<LlmProviders>,
    /// Where the configuration was looked for, and which file was read.
    pub source: Arc<ConfigSource>,
}

/// Where the configuration was looked for, in order, and what was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSource {
    pub looked: Vec<Lookup>,
}

/// One place the configuration was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The file, or `None` for `$SKILLHOST_CONFIG` unset (or no home
    /// directory to look in).
    pub path: Option<PathBuf>,
    /// What this place is, for messages: `$SKILLHOST_CONFIG`, …
    pub what: &'static str,
    /// Whether this file was read (the last lookup, when one was).
    pub used: bool,
}

impl ConfigSource {
    /// The file that was read, if any.
    pub fn used(&self) -> Option<&Path> {
        self.looked
            .iter()
            .find(|l| l.used)
            .and_then(|l| l.path.as_deref())
    }

    /// A source for configuration given in code, not read from a file.
    pub fn none() -> ConfigSource {
        ConfigSource::default()
    }
}

impl fmt::Display for ConfigSource {
    /// `read /dir/skillhost.toml` or, when nothing was read, every place
    /// looked at and why it was passed over.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.looked.is_empty() {
            return f.write_str("no host configuration was loaded (the runtime was built in code)");
        }
        if let Some(used) = self.used() {
            return write!(f, "the host configuration is {}", used.display());
        }
        f.write_str("no host configuration file was found; looked for ")?;
        for (i, lookup) in self.looked.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match &lookup.path {
                Some(path) => write!(f, "{} ({}: not found)", path.display(), lookup.what)?,
                None => write!(f, "{} (not set)", lookup.what)?,
            }
        }
        Ok(())
    }
}

/// A configuration file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// 1-based, when the problem is at one place in the file.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    /// `host configuration `PATH`, line N: MESSAGE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host configuration `{}`", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The file as written. Every key is listed here; unknown ones are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    llm: LlmSection,
    /// `[registries]` and `[trust]`: how registries are reached and which
    /// keys a pulled component must be signed by. The same file holds them,
    /// but `skillhost-oci` reads and checks them (the `host` binary hands it
    /// the file this module found); they are accepted here unread.
    #[serde(default, rename = "registries")]
    _registries: Option<toml::Value>,
    #[serde(default, rename = "trust")]
    _trust: Option<toml::Value>,
    /// `[telemetry]`: where traces go (`skillhost-telemetry` reads and
    /// checks it).
    #[serde(default, rename = "telemetry")]
    _telemetry: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LlmSection {
    #[serde(default)]
    providers: BTreeMap<String, toml::Spanned<ProviderDecl>>,
}

/// One `[llm.providers.NAME]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderDecl {
    pub kind: String,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    pub timeout_ms: Option<u64>,
    pub max_retries: Option<u32>,
}

impl HostConfig {
    /// A configuration with no providers, read from nowhere.
    pub fn empty() -> HostConfig {
        let source = Arc::new(ConfigSource::none());
        HostConfig {
            llm: Arc::new(LlmProviders::empty(source.clone())),
            source,
        }
    }

    /// Finds and reads the configuration for a scenario in `dir` (or, for a
    /// command without one, the current directory), in the order the module
    /// documentation gives, from the process's environment.
    pub fn load(dir: &Path) -> Result<HostConfig, ConfigError> {
        let env = |name: &str| std::env::var(name).ok();
        HostConfig::load_with(dir, &env)
    }

    /// [`HostConfig::load`] with the environment read through `env`.
    pub fn load_with(
        dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HostConfig, ConfigError> {
        let mut looked = Vec::new();
        let project = dir.join(PROJECT_CONFIG_FILE);
        let found = is_file(&project)?;
        looked.push(Lookup {
            path: Some(project.clone()),
            what: "the scenario's directory",
            used: found,
        });
        if found {
            return HostConfig::read(&project, looked, env);
        }
        match env(CONFIG_ENV).filter(|v| !v.is_empty()) {
            Some(named) => {
                let path = PathBuf::from(named);
                if !is_file(&path)? {
                    return Err(ConfigError {
                        message: format!(
                            "${CONFIG_ENV} names this file, which does not exist; create it, \
                             or unset {CONFIG_ENV}"
                        ),
                        path,
                        line: None,
                    });
                }
                looked.push(Lookup {
                    path: Some(path.clone()),
                    what: "$SKILLHOST_CONFIG",
                    used: true,
                });
                return HostConfig::read(&path, looked, env);
            }
            None => looked.push(Lookup {
                path: None,
                what: "$SKILLHOST_CONFIG",
                used: false,
            }),
        }
        let user_dir = env("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".config")));
        let Some(user_dir) = user_dir else {
            looked.push(Lookup {
                path: None,
                what: "the user's configuration ($HOME)",
                used: false,
            });
            return Ok(HostConfig::from_source(looked));
        };
        let user = user_dir.join("skillhost").join("config.toml");
        let found = is_file(&user)?;
        looked.push(Lookup {
            path: Some(user.clone()),
            what: "the user's configuration",
            used: found,
        });
        if found {
            return HostConfig::read(&user, looked, env);
        }
        Ok(HostConfig::from_source(looked))
    }

    fn from_source(looked: Vec<Lookup>) -> HostConfig {
        let source = Arc::new(ConfigSource { looked });
        HostConfig {
            llm: Arc::new(LlmProviders::empty(source.clone())),
            source,
        }
    }

    fn read(
        path: &Path,
        looked: Vec<Lookup>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HostConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            line: None,
            message: format!("cannot read it: {e}"),
        })?;
        HostConfig::parse(&text, path, looked, env)
    }

    /// Parses a configuration file's `text`; `path` names it in errors.
    /// `looked` says where it was found (see [`ConfigSource`]).
    pub fn parse(
        text: &str,
        path: &Path,
        looked: Vec<Lookup>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<HostConfig, ConfigError> {
        let error = |line: Option<usize>, message: String| ConfigError {
            path: path.to_path_buf(),
            line,
            message,
        };
        let file: ConfigFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|span| line_of(text, span.start));
            error(line, e.message().trim_end().to_string())
        })?;
        let source = Arc::new(ConfigSource { looked });
        let mut providers = BTreeMap::new();
        for (name, decl) in file.llm.providers {
            let line = line_of(text, decl.span().start);
            let provider =
                crate::capabilities::llm::Provider::from_decl(&name, decl.into_inner(), env)
                    .map_err(|message| {
                        error(Some(line), format!("[llm.providers.{name}] {message}"))
                    })?;
            providers.insert(name, provider);
        }
        Ok(HostConfig {
            llm: Arc::new(LlmProviders::new(providers, source.clone())),
            source,
        })
    }
}

/// Whether `path` is a file; a path that exists but cannot be looked at is
/// an error, not a configuration passed over.
fn is_file(path: &Path) -> Result<bool, ConfigError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(true),
        Ok(_) => Err(ConfigError {
            path: path.to_path_buf(),
            line: None,
            message: "it is not a file".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(ConfigError {
            path: path.to_path_buf(),
            line: None,
            message: format!("cannot look at it: {e}"),
        }),
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn parse(text: &str) -> Result<HostConfig, ConfigError> {
        let env = env_of(&[("TEST_KEY", "sk-test-123")]);
        HostConfig::parse(text, Path::new("/cfg/skillhost.toml"), Vec::new(), &env)
    }

    #[test]
    fn the_first_file_found_is_read_whole() {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("project");
        let xdg = root.path().join("xdg");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(xdg.join("skillhost")).unwrap();
        let named = root.path().join("named.toml");
        std::fs::write(
            &named,
            "[llm.providers.named]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n",
        )
        .unwrap();
        std::fs::write(
            xdg.join("skillhost/config.toml"),
            "[llm.providers.user]\nkind = \"anthropic\"\n",
        )
        .unwrap();
        let xdg_text = xdg.display().to_string();
        let named_text = named.display().to_string();

        // Nothing in the project, no $SKILLHOST_CONFIG: the user's file.
        let env = env_of(&[("XDG_CONFIG_HOME", &xdg_text)]);
        let config = HostConfig::load_with(&project, &env).unwrap();
        assert!(config.llm.provider("user").is_some());
        assert_eq!(
            config.source.used(),
            Some(xdg.join("skillhost/config.toml").as_path())
        );
        // $SKILLHOST_CONFIG comes before it.
        let env = env_of(&[("XDG_CONFIG_HOME", &xdg_text), (CONFIG_ENV, &named_text)]);
        let config = HostConfig::load_with(&project, &env).unwrap();
        assert!(config.llm.provider("named").is_some());
        assert!(
            config.llm.provider("user").is_none(),
            "files are not merged"
        );
        // The project's file comes first.
        std::fs::write(
            project.join(PROJECT_CONFIG_FILE),
            "[llm.providers.project]\nkind = \"openai\"\n",
        )
        .unwrap();
        let config = HostConfig::load_with(&project, &env).unwrap();
        assert!(config.llm.provider("project").is_some());
        assert_eq!(config.source.looked.len(), 1);

        // A named file that does not exist is an error.
        let empty = root.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let env = env_of(&[(CONFIG_ENV, "/nonexistent/skillhost.toml")]);
        let error = HostConfig::load_with(&empty, &env).unwrap_err();
        assert!(
            error.to_string().contains("$SKILLHOST_CONFIG names"),
            "{error}"
        );

        // Nothing anywhere: no providers, and every place looked at is said.
        let env = env_of(&[("HOME", &root.path().join("home").display().to_string())]);
        let config = HostConfig::load_with(&empty, &env).unwrap();
        assert!(config.llm.is_empty());
        let said = config.source.to_string();
        assert!(said.contains("empty/skillhost.toml"), "{said}");
        assert!(said.contains("$SKILLHOST_CONFIG (not set)"), "{said}");
        assert!(
            said.contains("home/.config/skillhost/config.toml"),
            "{said}"
        );
    }

    #[test]
    fn a_provider_takes_its_defaults_and_its_key_from_the_environment() {
        let config = parse(
            "[llm.providers.claude]\nkind = \"anthropic\"\napi_key_env = \"TEST_KEY\"\n\n\
             [llm.providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:11434/v1/\"\n\
             timeout_ms = 5000\nmax_retries = 0\n",
        )
        .unwrap();
        let claude = config.llm.provider("claude").unwrap();
        assert_eq!(claude.base_url.as_str(), "https://api.anthropic.com/");
        assert_eq!(claude.max_retries, 3);
        assert!(!claude.api_key_missing());
        let local = config.llm.provider("local").unwrap();
        assert_eq!(local.base_url.as_str(), "http://127.0.0.1:11434/v1/");
        assert_eq!(local.timeout, Some(std::time::Duration::from_millis(5000)));
        assert_eq!(local.max_retries, 0);
        // The key is nowhere in what can be printed.
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-test-123"), "{shown}");
        assert!(shown.contains("TEST_KEY"), "{shown}");
    }

    #[test]
    fn the_registry_sections_of_the_same_file_are_left_to_the_registry() {
        let config = parse(
            "[llm.providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:8000/v1\"\n\n\
             [registries]\ninsecure = [\"reg.lan:5000\"]\n\n[trust]\nkeys = [\"a.pub\"]\n",
        )
        .unwrap();
        assert!(config.llm.provider("local").is_some());
        // An unknown section is still refused.
        let error = parse("[registry]\ninsecure = []\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown field `registry`"), "{error}");
    }

    #[test]
    fn every_bad_key_is_named_with_its_file_and_line() {
        for (text, says) in [
            (
                "[llm.providers.a]\nkind = \"openai\"\nmodel = \"x\"\n",
                "line 3",
            ),
            (
                "[llm.providers.a]\nkind = \"openai\"\nmodel = \"x\"\n",
                "unknown field `model`",
            ),
            ("[llm]\nprovider = 1\n", "unknown field `provider`"),
            (
                "[lm.providers.a]\nkind = \"openai\"\n",
                "unknown field `lm`",
            ),
            (
                "[llm.providers.a]\nbase_url = \"http://x\"\n",
                "missing field `kind`",
            ),
            (
                "[llm.providers.a]\nkind = \"gpt\"\n",
                "[llm.providers.a] kind `gpt`",
            ),
            (
                "[llm.providers.a]\nkind = \"openai\"\nbase_url = \"ftp://x\"\n",
                "base_url `ftp://x`",
            ),
            (
                "[llm.providers.a]\nkind = \"openai\"\nbase_url = \"http://user:pw@x/v1\"\n",
                "credentials",
            ),
            (
                "[llm.providers.a]\nkind = \"openai\"\napi_key_env = \"sk-live-abc\"\n",
                "api_key_env",
            ),
            (
                "[llm.providers.a]\nkind = \"openai\"\ntimeout_ms = 0\n",
                "timeout_ms",
            ),
            (
                "[llm.providers.a]\nkind = \"openai\"\nmax_retries = 99\n",
                "max_retries",
            ),
            (
                "[llm.providers.\"a b\"]\nkind = \"openai\"\n",
                "provider name",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(
                error.starts_with("host configuration `/cfg/skillhost.toml`"),
                "{error}"
            );
            assert!(error.contains(says), "{text}: {error}");
        }
        // A key written where its variable's name belongs is not echoed.
        let error = parse("[llm.providers.a]\nkind = \"openai\"\napi_key_env = \"sk-live-abc\"\n")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("sk-live-abc"), "{error}");
    }
}
