//! `host skill new`: a new skill's directory, in any guest language, from
//! the templates in `host/skill-build/templates/` (embedded at compile time).
//!
//! A scaffolded skill builds with `host skill build`, answers
//! `host skill call`, and carries a unit test in its language's usual
//! form. Its world imports only what it uses (`log`), so even the
//! toolchains that import every interface of their world (Python, JS)
//! produce a component importing `log` alone. Rust's world includes the
//! whole contract instead: the SDK's `generate!` maps every contract
//! interface onto its own bindings (wit-bindgen refuses a mapping the
//! world does not use), and a Rust build keeps only the imports the code
//! calls.
//!
//! Must not: build, run or check what it writes (the caller does), or
//! write anything when it refuses: every check runs before the first file.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::Language;

/// The skill contract, copied into every new skill's `wit/deps/`.
const CONTRACT: &str = include_str!("../../../wit/skill.wit");

/// Where a new skill's copy of the contract goes.
const CONTRACT_PATH: &str = "wit/deps/skillhost-skill/skill.wit";

/// The contract's streaming imports (world `streaming`), copied beside it
/// into a new async skill, whose README says how to stream.
const STREAMING: &str = include_str!("../../../wit/streaming.wit");

/// Where a new async skill's copy of the streaming imports goes.
const STREAMING_PATH: &str = "wit/deps/skillhost-skill/streaming.wit";

/// The longest name accepted: it becomes file, package and C identifier names.
pub const MAX_NAME_LEN: usize = 64;

/// Words a WIT world or package may not be named (`world record { … }` does
/// not parse), and crate names cargo refuses.
const RESERVED: &[&str] = &[
    "as",
    "async",
    "bool",
    "borrow",
    "char",
    "constructor",
    "enum",
    "export",
    "f32",
    "f64",
    "flags",
    "from",
    "func",
    "future",
    "import",
    "include",
    "interface",
    "list",
    "own",
    "package",
    "record",
    "resource",
    "result",
    "s16",
    "s32",
    "s64",
    "s8",
    "static",
    "stream",
    "string",
    "tuple",
    "type",
    "u16",
    "u32",
    "u64",
    "u8",
    "use",
    "variant",
    "with",
    "world",
    // Cargo's reserved crate names.
    "alloc",
    "core",
    "proc-macro",
    "std",
    "test",
];

/// One file of a template: where it goes in the new skill, and its text.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
}

macro_rules! template {
    ($($path:literal => $file:literal),* $(,)?) => {
        &[$(TemplateFile { path: $path, text: include_str!(concat!("../templates/", $file)) }),*]
    };
}

/// The files of each language's template (the contract and `.gitignore`
/// are added to every one).
fn template(language: Language) -> &'static [TemplateFile] {
    match language {
        Language::Rust => template![
            "Cargo.toml" => "rust/Cargo.toml.tmpl",
            "src/lib.rs" => "rust/lib.rs.tmpl",
            "wit/world.wit" => "rust/world.wit.tmpl",
            "README.md" => "rust/README.md.tmpl",
        ],
        Language::Python => template![
            "pyproject.toml" => "python/pyproject.toml.tmpl",
            "app.py" => "python/app.py.tmpl",
            "greet.py" => "python/greet.py.tmpl",
            "test_greet.py" => "python/test_greet.py.tmpl",
            "wit/world.wit" => "common/world.wit.tmpl",
            "README.md" => "python/README.md.tmpl",
        ],
        Language::JavaScript => template![
            "package.json" => "js/package.json.tmpl",
            "skill.js" => "js/skill.js.tmpl",
            "greet.js" => "js/greet.js.tmpl",
            "greet.test.js" => "js/greet.test.js.tmpl",
            "wit/world.wit" => "common/world.wit.tmpl",
            "README.md" => "js/README.md.tmpl",
        ],
        Language::C => template![
            "skill.c" => "c/skill.c.tmpl",
            "greet.c" => "c/greet.c.tmpl",
            "greet.h" => "c/greet.h.tmpl",
            "test/greet_test.c" => "c/greet_test.c.tmpl",
            "wit/world.wit" => "common/world.wit.tmpl",
            "README.md" => "c/README.md.tmpl",
        ],
        Language::Zig => template![
            "skill.zig" => "zig/skill.zig.tmpl",
            "greet.zig" => "zig/greet.zig.tmpl",
            "wit/world.wit" => "common/world.wit.tmpl",
            "README.md" => "zig/README.md.tmpl",
        ],
    }
}

/// The `.gitignore` every new skill gets.
const GITIGNORE: &str = include_str!("../templates/common/gitignore.tmpl");

/// The names `--lang` takes, in the order they are listed.
pub const LANGUAGE_NAMES: [(&str, Language); 5] = [
    ("rust", Language::Rust),
    ("python", Language::Python),
    ("js", Language::JavaScript),
    ("c", Language::C),
    ("zig", Language::Zig),
];

/// What to scaffold.
#[derive(Debug, Clone)]
pub struct ScaffoldOptions {
    /// The skill's id: kebab-case (see [`check_name`]).
    pub name: String,
    pub language: Language,
    /// The directory to create; it may exist if it is empty.
    pub dir: PathBuf,
    /// The Rust SDK (`sdk/` of a Skillhost checkout), which a Rust skill
    /// depends on by path. Required for Rust, unused otherwise.
    pub rust_sdk: Option<PathBuf>,
    /// An async skill (WASI 0.3): the world exports `run` as an `async
    /// func` and the code implements an `async fn`. Rust only.
    pub async_run: bool,
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaffoldReport {
    pub name: String,
    pub language: Language,
    pub dir: PathBuf,
    /// The files written, relative to `dir`, sorted.
    pub files: Vec<String>,
}

/// Why a skill was not scaffolded. Nothing was written in any case but
/// [`ScaffoldError::Io`].
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "`{name}` is not a valid skill name: {reason}; use lowercase letters, digits and single hyphens, each word starting with a letter, at most {MAX_NAME_LEN} characters (e.g. `word-count`)"
    )]
    BadName { name: String, reason: String },
    #[error("unknown language `{0}`; choose one of: {list}", list = language_list())]
    UnknownLanguage(String),
    #[error(
        "`{}` exists and is not empty; choose a new directory with --dir, or empty it (nothing was written)",
        dir.display()
    )]
    DirNotEmpty { dir: PathBuf },
    #[error("`{}` exists and is not a directory (nothing was written)", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error(
        "a Rust skill depends on the Rust SDK by path, and there is none at `{}`; pass --sdk DIR (the `sdk/` folder of a Skillhost checkout)",
        dir.display()
    )]
    NoRustSdk { dir: PathBuf },
    #[error(
        "--async scaffolds Rust skills only (wit-bindgen's async bindings); a {language} skill is synchronous here (nothing was written)"
    )]
    AsyncUnsupported { language: Language },
    #[error("writing `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ScaffoldError {
    /// Whether the machine, not the invocation, is at fault (exit code 3).
    pub fn is_environment(&self) -> bool {
        matches!(self, ScaffoldError::Io { .. })
    }
}

fn language_list() -> String {
    LANGUAGE_NAMES.map(|(name, _)| name).join(", ")
}

/// The language `--lang NAME` names: `rust`, `python`, `js`, `c`, `zig`
/// (also `javascript`, and any case).
pub fn language_named(name: &str) -> Result<Language, ScaffoldError> {
    let lower = name.to_ascii_lowercase();
    if lower == "javascript" {
        return Ok(Language::JavaScript);
    }
    LANGUAGE_NAMES
        .iter()
        .find(|(n, _)| *n == lower)
        .map(|(_, l)| *l)
        .ok_or_else(|| ScaffoldError::UnknownLanguage(name.to_string()))
}

/// Checks that `name` can be a skill's id, its WIT package and world, its
/// Cargo, npm and Python package, and (with `_` for `-`) a C identifier:
/// lowercase ASCII words of letters and digits, each starting with a
/// letter, joined by single hyphens.
pub fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let bad = |reason: &str| {
        Err(ScaffoldError::BadName {
            name: name.to_string(),
            reason: reason.to_string(),
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad(&format!("it has {} characters", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return bad(&format!("it contains {c:?}"));
    }
    for word in name.split('-') {
        match word.chars().next() {
            None => return bad("it has an empty word (a leading, trailing or double hyphen)"),
            Some(first) if !first.is_ascii_lowercase() => {
                return bad(&format!("the word `{word}` does not start with a letter"));
            }
            Some(_) => {}
        }
    }
    if RESERVED.contains(&name) {
        return bad("it is a reserved word of WIT or Cargo");
    }
    Ok(())
}

/// `word-count` → `Word Count`: the manifest's display name.
fn title(name: &str) -> String {
    name.split('-')
        .map(|word| {
            let mut chars = word.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Fills a template's placeholders.
fn render(text: &str, name: &str, sdk: &str) -> String {
    text.replace("{{name}}", name)
        .replace("{{snake}}", &name.replace('-', "_"))
        .replace("{{title}}", &title(name))
        .replace("{{sdk}}", sdk)
}

/// The edits that make the Rust template's skill async: the world exports
/// `run` as an `async func`, the code implements `async fn run` (its unit
/// tests drive it with `testing::block_on`), and the SDK is asked for its
/// async bindings. Each edit must apply (a test checks that each does).
const ASYNC_EDITS: &[(&str, &str, &str)] = &[
    (
        "wit/world.wit",
        "export run: func(",
        "export run: async func(",
    ),
    (
        "wit/world.wit",
        "/// Greets someone by name: a new skill,",
        "/// Greets someone by name: a new async (WASI 0.3) skill,",
    ),
    (
        "src/lib.rs",
        "    fn run(input: Input)",
        "    async fn run(input: Input)",
    ),
    (
        "src/lib.rs",
        "let out = Skill::run(Input {\n            name: \"Ada\".to_string(),\n        })",
        "let out = testing::block_on(Skill::run(Input {\n            name: \"Ada\".to_string(),\n        }))",
    ),
    (
        "src/lib.rs",
        "let err = Skill::run(Input {\n            name: String::new(),\n        })",
        "let err = testing::block_on(Skill::run(Input {\n            name: String::new(),\n        }))",
    ),
    (
        "Cargo.toml",
        "skillhost-sdk = { path = ",
        "skillhost-sdk = { features = [\"async\"], path = ",
    ),
    (
        "README.md",
        "A Skillhost skill in Rust: greets someone by name.",
        "A Skillhost skill in Rust, async (WASI 0.3: its world exports `run` as an \
         `async func`, and the host calls it on its concurrent engine): greets someone by \
         name.",
    ),
    (
        "README.md",
        "is not declared is denied in every call.\n",
        "is not declared is denied in every call.\n\n\
         ## Streaming a completion\n\n\
         To have a model's text reach people as it is generated (`host run`'s progress \
         line, `--events`, the run page), stream it: in `wit/world.wit` include \
         `skillhost:skill/streaming@0.1.0` instead of `base`, in `src/lib.rs` write \
         `skillhost_sdk::generate!(\"{{name}}\", streaming);`, then call \
         `skillhost_sdk::llm::complete_stream(&request)?` and read its deltas with \
         `.next().await` and the completion with `.finish().await?` (declare `llm` in the \
         manifest).\n",
    ),
];

/// `text` (the rendered file at `path`) with the [`ASYNC_EDITS`] for it
/// (`{{name}}` in an edit is the skill's name).
fn make_async(path: &str, mut text: String, name: &str) -> String {
    for (file, from, to) in ASYNC_EDITS {
        if *file == path {
            text = text.replacen(from, &to.replace("{{name}}", name), 1);
        }
    }
    text
}

/// Writes a new skill: checks the name, the directory (absent or empty) and,
/// for Rust, the SDK first, so that a refusal writes nothing.
pub fn scaffold(opts: &ScaffoldOptions) -> Result<ScaffoldReport, ScaffoldError> {
    check_name(&opts.name)?;
    if opts.async_run && opts.language != Language::Rust {
        return Err(ScaffoldError::AsyncUnsupported {
            language: opts.language,
        });
    }
    let dir = &opts.dir;
    if dir.exists() {
        if !dir.is_dir() {
            return Err(ScaffoldError::NotADirectory { dir: dir.clone() });
        }
        let mut entries = std::fs::read_dir(dir).map_err(|source| ScaffoldError::Io {
            path: dir.clone(),
            source,
        })?;
        if entries.next().is_some() {
            return Err(ScaffoldError::DirNotEmpty { dir: dir.clone() });
        }
    }
    let sdk = match opts.language {
        Language::Rust => {
            let sdk = opts.rust_sdk.clone().unwrap_or_default();
            if !sdk.join("Cargo.toml").is_file() {
                return Err(ScaffoldError::NoRustSdk { dir: sdk });
            }
            // Absolute, so the skill builds wherever it is moved on this
            // machine; TOML's basic strings need `\` and `"` escaped.
            let sdk = std::path::absolute(&sdk).unwrap_or(sdk);
            sdk.display()
                .to_string()
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
        }
        _ => String::new(),
    };

    let mut files: Vec<(&str, String)> = template(opts.language)
        .iter()
        .map(|f| {
            let text = render(f.text, &opts.name, &sdk);
            let text = if opts.async_run {
                make_async(f.path, text, &opts.name)
            } else {
                text
            };
            (f.path, text)
        })
        .collect();
    files.push((CONTRACT_PATH, CONTRACT.to_string()));
    if opts.async_run {
        files.push((STREAMING_PATH, STREAMING.to_string()));
    }
    files.push((".gitignore", GITIGNORE.to_string()));
    for (path, text) in &files {
        write(dir, path, text)?;
    }
    let mut written: Vec<String> = files.iter().map(|(p, _)| p.to_string()).collect();
    written.sort();
    Ok(ScaffoldReport {
        name: opts.name.clone(),
        language: opts.language,
        dir: dir.clone(),
        files: written,
    })
}

fn write(dir: &Path, path: &str, text: &str) -> Result<(), ScaffoldError> {
    let path = dir.join(path);
    let io = |source| ScaffoldError::Io {
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(&path, text).map_err(io)
}

impl fmt::Display for ScaffoldReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "created {} ({}) in {}",
            self.name,
            self.language,
            self.dir.display()
        )?;
        for file in &self.files {
            writeln!(f, "  {file}")?;
        }
        write!(
            f,
            "next: read {}, then `host skill build {}`",
            self.dir.join("README.md").display(),
            self.dir.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kebab_case_words_starting_with_letters() {
        for good in ["hello", "word-count", "a1-b2", "x"] {
            check_name(good).unwrap();
        }
        for bad in [
            "",
            "Hello",
            "word_count",
            "-x",
            "x-",
            "a--b",
            "1abc",
            "a-1b",
            "héllo",
            "a b",
            "record",
            "test",
            &"a".repeat(MAX_NAME_LEN + 1),
        ] {
            let err = check_name(bad).unwrap_err();
            assert!(
                matches!(err, ScaffoldError::BadName { .. }),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn an_unknown_language_lists_the_known_ones() {
        assert_eq!(language_named("JS").unwrap(), Language::JavaScript);
        assert_eq!(language_named("javascript").unwrap(), Language::JavaScript);
        let err = language_named("go").unwrap_err().to_string();
        assert!(
            err.contains("`go`") && err.contains("rust, python, js, c, zig"),
            "{err}"
        );
    }

    #[test]
    fn every_async_edit_applies_to_the_rust_template() {
        for (file, from, _) in ASYNC_EDITS {
            let template = template(Language::Rust)
                .iter()
                .find(|f| f.path == *file)
                .unwrap_or_else(|| panic!("no {file} in the Rust template"));
            let text = render(template.text, "word-count", "/sdk");
            assert_eq!(text.matches(from).count(), 1, "{file}: {from:?}");
        }
    }

    #[test]
    fn every_template_fills_every_placeholder() {
        for (_, language) in LANGUAGE_NAMES {
            for file in template(language) {
                let text = render(file.text, "word-count", "/sdk");
                assert!(!text.contains("{{"), "{}: {text}", file.path);
            }
        }
        assert_eq!(title("word-count"), "Word Count");
    }

    #[test]
    fn a_refusal_writes_nothing() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("taken");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let opts = |name: &str, dir: &Path| ScaffoldOptions {
            name: name.to_string(),
            language: Language::Python,
            dir: dir.to_path_buf(),
            rust_sdk: None,
            async_run: false,
        };
        let err = scaffold(&opts("hello", &dir)).unwrap_err();
        assert!(matches!(err, ScaffoldError::DirNotEmpty { .. }), "{err}");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);

        let fresh = root.path().join("fresh");
        let err = scaffold(&opts("Bad", &fresh)).unwrap_err();
        assert!(matches!(err, ScaffoldError::BadName { .. }), "{err}");
        let err = scaffold(&ScaffoldOptions {
            language: Language::Rust,
            rust_sdk: Some(root.path().join("no-sdk")),
            ..opts("hello", &fresh)
        })
        .unwrap_err();
        assert!(matches!(err, ScaffoldError::NoRustSdk { .. }), "{err}");
        let err = scaffold(&ScaffoldOptions {
            async_run: true,
            ..opts("hello", &fresh)
        })
        .unwrap_err();
        assert!(
            matches!(err, ScaffoldError::AsyncUnsupported { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("Rust skills only"), "{err}");
        assert!(!fresh.exists());
    }

    #[test]
    fn an_empty_directory_is_filled() {
        let root = tempfile::tempdir().unwrap();
        let report = scaffold(&ScaffoldOptions {
            name: "word-count".to_string(),
            language: Language::C,
            dir: root.path().to_path_buf(),
            rust_sdk: None,
            async_run: false,
        })
        .unwrap();
        assert!(report.files.contains(&"skill.c".to_string()));
        let skill = std::fs::read_to_string(root.path().join("skill.c")).unwrap();
        assert!(skill.contains("#include \"word_count.h\""));
        assert_eq!(
            std::fs::read_to_string(root.path().join(CONTRACT_PATH)).unwrap(),
            CONTRACT
        );
        assert_eq!(Language::detect(root.path()), Some(Language::C));
    }
}
