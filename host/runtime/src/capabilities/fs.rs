//! The `fs` capability: read-only access to one directory.
//!
//! Guest paths are relative, `/`-separated, and resolved inside the granted
//! root; absolute paths and `..` are refused, and a path that leaves the root
//! through a symlink is refused after resolution. Nothing is ever written.
//! Only regular files are read, and no read or listing takes more than the
//! call's memory limit: the host never blocks on a pipe or device, and never
//! holds more of a file than the guest could.
//!
//! Reads are not journaled: the granted directory ships with the scenario
//! (its path is resolved against the scenario file), so it is an input of the
//! run like the scenario itself, and journaling would copy whole files into
//! every step's record. The `fs` capability has no backend either: the
//! directory is the grant.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use wasmtime::component::Linker;

use super::bindings::skillhost::skill::fs::{self as wit, DirEntry, EntryKind};
use super::{
    Backends, Capability, GrantError, Grantable, Grants, GuestError, HasHostCall, HostCall,
    HostCapability, guest_error,
};
use crate::call::{CallOptions, CallState};

pub(crate) struct Fs;

/// One call's `fs`: the granted directory, if any, and how large a file the
/// call's memory can take.
pub(crate) struct FsCall {
    grant: Option<Arc<FsGrant>>,
    memory_limit: u64,
}

impl HostCapability for Fs {
    type Call = FsCall;

    fn grant_schema() -> Value {
        json!({
            "type": "string",
            "description": "Read-only directory, relative to the scenario file."
        })
    }

    fn new_call(options: &CallOptions, grants: &Grants, _backends: &Backends) -> FsCall {
        FsCall {
            grant: grants.fs.clone(),
            memory_limit: options.limits.memory_bytes,
        }
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, HasHostCall<FsCall>>(linker, |state| HostCall {
            cap: &mut state.capabilities.fs,
            scope: &mut state.scope,
        })
    }
}

impl Grantable for Fs {
    type Grant = FsGrant;

    const EXAMPLE: &'static str = "\"./data\"";
    const FLAG_VALUE: &'static str = "DIR";
    const NAMES_PATH: bool = true;

    fn path(grant: &FsGrant) -> Option<&Path> {
        Some(&grant.root)
    }

    fn parse_grant(value: &str) -> Result<FsGrant, GrantError> {
        FsGrant::parse(value)
    }
}

/// The directory a skill may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsGrant {
    /// Canonical path of the granted directory.
    pub root: PathBuf,
}

/// Directories no `fs` grant ever reaches, whatever the host allows: the
/// kernel's views of the host's processes (their environment, open files and
/// root directory), devices and system state.
pub const NEVER_GRANTED: [&str; 3] = ["/proc", "/sys", "/dev"];

impl FsGrant {
    /// Parses a grant: `value` must name an existing directory, which is
    /// canonicalised (symlinks followed). A directory that is, lies in, or
    /// holds one of [`NEVER_GRANTED`] is refused, as written and as resolved,
    /// so neither `/proc/self/root` nor `/` passes. Where a grant may point
    /// beyond that is the caller's policy: a scenario's grants are checked
    /// against its directory and the host's allowed roots by the checker.
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        if value.is_empty() {
            return Err(GrantError::new(
                "fs",
                "needs a directory, e.g. `fs=./corpus`",
            ));
        }
        if let Some(reason) = never_granted(Path::new(value)) {
            return Err(GrantError::new("fs", format!("`{value}` {reason}")));
        }
        let root = Path::new(value)
            .canonicalize()
            .map_err(|e| GrantError::new("fs", format!("cannot use directory `{value}`: {e}")))?;
        if let Some(reason) = never_granted(&root) {
            return Err(GrantError::new(
                "fs",
                format!("`{value}` resolves to `{}`, which {reason}", root.display()),
            ));
        }
        if !root.is_dir() {
            return Err(GrantError::new(
                "fs",
                format!("`{value}` is not a directory; grant the directory that holds the files"),
            ));
        }
        Ok(FsGrant { root })
    }

    /// Resolves a guest path inside the root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, GuestError> {
        let relative = Path::new(path);
        let mut full = self.root.clone();
        for component in relative.components() {
            match component {
                Component::Normal(part) => full.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(guest_error(
                        "invalid-path",
                        format!(
                            "`{path}`: `..` is not allowed; paths are relative to the granted directory"
                        ),
                    ));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(guest_error(
                        "invalid-path",
                        format!(
                            "`{path}`: absolute paths are not allowed; paths are relative to the granted directory"
                        ),
                    ));
                }
            }
        }
        let resolved = full.canonicalize().map_err(|e| io_error(path, e))?;
        if !resolved.starts_with(&self.root) {
            return Err(guest_error(
                "invalid-path",
                format!("`{path}` leads outside the granted directory"),
            ));
        }
        Ok(resolved)
    }
}

/// Why `path` may never be granted, if it may not: it is, lies in or holds
/// one of [`NEVER_GRANTED`]. Compared component by component on the path
/// with `.` and `..` resolved lexically, so `/tmp/../proc` is `/proc`.
pub fn never_granted(path: &Path) -> Option<String> {
    if !path.is_absolute() {
        return None;
    }
    let mut lexical = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    NEVER_GRANTED.iter().map(Path::new).find_map(|forbidden| {
        if lexical.starts_with(forbidden) || forbidden.starts_with(&lexical) {
            Some(format!(
                "is or holds one of {}, which are never granted: grant a directory of \
                 ordinary files",
                NEVER_GRANTED.join(", ")
            ))
        } else {
            None
        }
    })
}

/// What one entry of a listing costs the guest besides its name: the
/// canonical ABI's string pointer and length, the kind and the size.
const DIR_ENTRY_OVERHEAD: u64 = 24;

fn io_error(path: &str, e: std::io::Error) -> GuestError {
    let code = match e.kind() {
        ErrorKind::NotFound => "not-found",
        ErrorKind::PermissionDenied => "permission-denied",
        _ => "io-error",
    };
    guest_error(code, format!("`{path}`: {e}"))
}

impl HostCall<'_, FsCall> {
    fn granted(&mut self) -> Result<Arc<FsGrant>, GuestError> {
        match &self.cap.grant {
            Some(grant) => Ok(grant.clone()),
            None => Err(self.deny(Capability::Fs)),
        }
    }

    /// Reads a regular file, at most the call's memory limit of it.
    ///
    /// Only regular files: a FIFO would block the host until a writer came, a
    /// character device or a `/proc` file reports a length of 0 and can
    /// stream without end. The file is opened non-blocking (a FIFO swapped in
    /// after the check cannot hang the open), checked again through the open
    /// handle, and read through `Read::take`, so a file that grows, or lies
    /// about its size, still costs at most the limit.
    fn fs_read(&mut self, path: &str) -> Result<Vec<u8>, GuestError> {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;

        let grant = self.granted()?;
        let full = grant.resolve(path)?;
        let meta = std::fs::metadata(&full).map_err(|e| io_error(path, e))?;
        check_readable(path, &meta)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&full)
            .map_err(|e| io_error(path, e))?;
        let meta = file.metadata().map_err(|e| io_error(path, e))?;
        check_readable(path, &meta)?;
        // The bytes end up in the guest's memory, so a file larger than the
        // call may hold can only fail later, less clearly.
        let limit = self.cap.memory_limit;
        let too_large = |size: String| {
            guest_error(
                "too-large",
                format!("`{path}` is {size}, more than the call's memory limit of {limit} bytes"),
            )
        };
        if meta.len() > limit {
            return Err(too_large(format!("{} bytes", meta.len())));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(path, e))?;
        if bytes.len() as u64 > limit {
            return Err(too_large("longer than its reported length".into()));
        }
        Ok(bytes)
    }
}

/// Refuses what is not a regular file, naming what it is.
fn check_readable(path: &str, meta: &std::fs::Metadata) -> Result<(), GuestError> {
    use std::os::unix::fs::FileTypeExt as _;

    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    if kind.is_dir() {
        return Err(guest_error(
            "is-a-directory",
            format!("`{path}` is a directory; use list-dir"),
        ));
    }
    let what = if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(guest_error(
        "not-a-regular-file",
        format!("`{path}` is {what}; `fs` reads regular files only"),
    ))
}

impl wit::Host for HostCall<'_, FsCall> {
    fn read_file(&mut self, path: String) -> Result<Vec<u8>, GuestError> {
        self.fs_read(&path)
    }

    fn read_text(&mut self, path: String) -> Result<String, GuestError> {
        let bytes = self.fs_read(&path)?;
        String::from_utf8(bytes).map_err(|e| {
            guest_error(
                "invalid-utf8",
                format!(
                    "`{path}` is not UTF-8 text (at byte {}); use read-file",
                    e.utf8_error().valid_up_to()
                ),
            )
        })
    }

    fn list_dir(&mut self, path: String) -> Result<Vec<DirEntry>, GuestError> {
        let grant = self.granted()?;
        let full = grant.resolve(&path)?;
        let mut entries = Vec::new();
        // The listing ends up in the guest's memory too: a directory of
        // millions of entries must not grow the host past the call's limit.
        let limit = self.cap.memory_limit;
        let mut listed_bytes = 0u64;
        for entry in std::fs::read_dir(&full).map_err(|e| io_error(&path, e))? {
            let entry = entry.map_err(|e| io_error(&path, e))?;
            listed_bytes += entry.file_name().len() as u64 + DIR_ENTRY_OVERHEAD;
            if listed_bytes > limit {
                return Err(guest_error(
                    "too-large",
                    format!(
                        "the listing of `{path}` is more than the call's memory limit of {limit} bytes"
                    ),
                ));
            }
            let meta = entry.metadata().map_err(|e| io_error(&path, e))?;
            let kind = if meta.is_dir() {
                EntryKind::Directory
            } else {
                EntryKind::File
            };
            entries.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                kind,
                size: meta.len(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }
}
