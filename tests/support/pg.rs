//! Throwaway Postgres for tests.
//!
//! - `SKILLHOST_TEST_DATABASE_URL` set: tests create their databases on that
//!   server (the URL's user must be allowed to `CREATE DATABASE`).
//! - Otherwise one cluster per test binary is started from the system's
//!   PostgreSQL server binaries (`initdb` + `pg_ctl`, on a free 127.0.0.1
//!   port, in a temporary directory, trust auth, fsync off) and every test
//!   gets its own database in it.
//! - No binaries: the test fails, naming `apt-get install -y postgresql`.
//!   Never a silent skip.
//!
//! As root (CI), the server runs as the `postgres` system user (initdb
//! refuses root) via `runuser`. Clusters are stopped and their directory
//! removed by a small watchdog shell that waits for this process to exit
//! (EOF on a pipe), so nothing is left running even when a test panics or
//! the binary is killed.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use sqlx::{Connection, Executor, PgConnection};

use crate::free_port;

const INSTALL_HINT: &str = "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found \
    in `pg_config --bindir`, /usr/lib/postgresql/*/bin or PATH. Install them with \
    `apt-get install -y postgresql`, or set SKILLHOST_TEST_DATABASE_URL to a Postgres server \
    on which the tests may CREATE DATABASE.";

/// A Postgres cluster this process started.
pub struct Cluster {
    pub port: u16,
    base: PathBuf,
    bindir: PathBuf,
    /// uid/gid to run the server as (Some when we are root).
    run_as: Option<(u32, u32)>,
    /// The watchdog's stdin: closing it (drop, or process exit) stops the
    /// cluster and removes `base`.
    watchdog: Mutex<Option<Child>>,
}

impl Cluster {
    /// Starts a fresh cluster; panics with the install hint if there are no
    /// server binaries.
    pub fn start() -> Cluster {
        let bindir = find_bindir().unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(postgres_user())
        } else {
            None
        };
        let base = tempfile::Builder::new()
            .prefix("skillhost-pg-")
            .tempdir()
            .expect("temp dir for Postgres")
            .keep();
        if let Some((uid, gid)) = run_as {
            chown(&base, uid, gid);
        }
        let mut cluster = Cluster {
            port: 0,
            base,
            bindir,
            run_as,
            watchdog: Mutex::new(None),
        };
        cluster.spawn_watchdog();
        let data = cluster.data_dir();
        let out = cluster
            .command("initdb")
            .args(["-D"])
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "-N",
            ])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut last_error = String::new();
        for _ in 0..5 {
            cluster.port = free_port();
            match cluster.try_start() {
                Ok(()) => return cluster,
                Err(e) => last_error = e,
            }
        }
        panic!("could not start Postgres: {last_error}");
    }

    pub fn data_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    /// A URL for database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Starts the (stopped) server again on the same port.
    pub fn start_again(&self) {
        self.try_start()
            .unwrap_or_else(|e| panic!("could not restart Postgres: {e}"));
    }

    /// Stops the server with a fast shutdown (clients are disconnected,
    /// transactions rolled back).
    pub fn stop_fast(&self) {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "fast", "-w", "stop"])
            .output()
            .expect("run pg_ctl stop");
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn try_start(&self) -> Result<(), String> {
        let log = self.base.join("postgres.log");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c full_page_writes=off \
             -c max_connections=300 -c shared_buffers=32MB",
            self.port,
            self.base.display()
        );
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(&log)
            .args(["-o", &options, "-w", "-t", "60", "start"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl start failed: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            ))
        }
    }

    /// A command for one of the server binaries, as the postgres user when
    /// we are root.
    fn command(&self, binary: &str) -> Command {
        let path = self.bindir.join(binary);
        match self.run_as {
            Some((uid, gid)) => {
                let mut cmd = Command::new(&path);
                // Drop to the postgres user in the child only (std also
                // clears the supplementary groups when root sets a uid).
                cmd.uid(uid).gid(gid).env("HOME", &self.base);
                cmd
            }
            None => Command::new(path),
        }
    }

    fn spawn_watchdog(&self) {
        let pg_ctl = self.bindir.join("pg_ctl");
        let stop = match self.run_as {
            Some(_) => format!(
                "runuser -u postgres -- {} -D {} -m immediate -w stop",
                pg_ctl.display(),
                self.data_dir().display()
            ),
            None => format!(
                "{} -D {} -m immediate -w stop",
                pg_ctl.display(),
                self.data_dir().display()
            ),
        };
        let script = format!(
            "cat >/dev/null; {stop} >/dev/null 2>&1; rm -rf {}",
            self.base.display()
        );
        let child = crate::watchdog(&script, "Postgres");
        *self.watchdog.lock().unwrap() = Some(child);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.watchdog.lock().unwrap().take() {
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.flush();
            }
            let _ = child.wait();
        }
    }
}

/// The server tests share: `SKILLHOST_TEST_DATABASE_URL`, or this binary's
/// own cluster.
enum Shared {
    External(String),
    Cluster(Cluster),
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| match std::env::var("SKILLHOST_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => Shared::External(url),
        _ => Shared::Cluster(Cluster::start()),
    })
}

/// The URL of the server the tests share (its `postgres` database):
/// `SKILLHOST_TEST_DATABASE_URL`, or this binary's own cluster.
pub fn server_url() -> String {
    match shared() {
        Shared::External(url) => url.clone(),
        Shared::Cluster(cluster) => cluster.url("postgres"),
    }
}

/// A new, empty database for one test; returns its URL.
pub async fn fresh_database() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "skh_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    );
    let admin = server_url();
    create_database(&admin, &name).await;
    with_database(&admin, &name)
}

/// Creates database `name` on the server `admin_url` points at.
pub async fn create_database(admin_url: &str, name: &str) {
    let mut conn = PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test server: {e}"));
    conn.execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    conn.close().await.unwrap();
}

/// `url` with its database name replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{name}{query}", &base[..authority_end])
}

fn find_bindir() -> Option<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(dir) = std::env::var("SKILLHOST_TEST_PG_BINDIR") {
        return Some(PathBuf::from(dir)).filter(|d| has_server(d));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has_server(&dir) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).find(|dir| has_server(dir)))
}

pub(crate) fn postgres_user() -> (u32, u32) {
    let name = std::ffi::CString::new("postgres").unwrap();
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !entry.is_null(),
        "running as root, but there is no `postgres` user to run the server as \
         (initdb refuses root); `apt-get install -y postgresql` creates it"
    );
    unsafe { ((*entry).pw_uid, (*entry).pw_gid) }
}

pub(crate) fn chown(path: &Path, uid: u32, gid: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let rc = unsafe { libc::chown(c.as_ptr(), uid, gid) };
    assert_eq!(
        rc,
        0,
        "chown {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}
