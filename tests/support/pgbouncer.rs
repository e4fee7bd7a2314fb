//! A real PgBouncer for tests, in front of the tests' Postgres ([`crate::pg`]).
//!
//! Debian's `pgbouncer` (1.18 on Debian 12: no prepared statements across
//! transactions, the trap the store must not fall into) is started on a free
//! 127.0.0.1 port with a configuration of its own in a temporary directory:
//! `pool_mode = transaction` unless a test asks for another, every database
//! (`* =`) forwarded to the server the URL names, no authentication of its
//! clients (`auth_type = any`, the server's user forced), and no
//! `ignore_startup_parameters`, so a client that sends what it refuses is
//! refused as in production. No binary: the test fails, naming
//! `apt-get install -y pgbouncer`. Never a silent skip.
//!
//! As root (CI) it runs as the `postgres` system user (PgBouncer refuses
//! root). It is stopped when its [`Bouncer`] is dropped, and in any case by
//! a watchdog shell once this process exits, however it exits; its
//! directory is removed with it.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::free_port;

const INSTALL_HINT: &str = "PgBouncer was not found (pgbouncer on PATH or /usr/sbin/pgbouncer); \
     install it with `apt-get install -y pgbouncer`";

/// How long PgBouncer may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A URL's parts PgBouncer needs to reach the server.
struct Server {
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
}

impl Server {
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/…` (what [`crate::pg`] hands
    /// out).
    fn of(url: &str) -> Server {
        let rest = url
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("not a Postgres URL: {url}"));
        let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
        let (userinfo, hostport) = authority
            .rsplit_once('@')
            .unwrap_or(("postgres", authority));
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user.to_owned(), Some(password.to_owned())),
            None => (userinfo.to_owned(), None),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), port.parse().expect("a port")),
            None => (hostport.to_owned(), 5432),
        };
        Server {
            host,
            port,
            user,
            password,
        }
    }
}

/// How a [`Bouncer`] pools.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `transaction`, `session` or `statement`.
    pub pool_mode: &'static str,
    /// Server connections per database: fewer than the store's client
    /// connections, so that clients share them as in production.
    pub pool_size: u32,
    /// Startup parameters PgBouncer is told to ignore (none by default:
    /// a client that sends one is refused).
    pub ignore_startup_parameters: &'static str,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            pool_mode: "transaction",
            pool_size: 8,
            ignore_startup_parameters: "",
        }
    }
}

/// A PgBouncer this process started.
pub struct Bouncer {
    pub port: u16,
    base: PathBuf,
    child: Mutex<Option<Child>>,
    /// The watchdog's stdin: closing it (drop, or process exit) stops
    /// PgBouncer and removes `base`.
    watchdog: Mutex<Option<Child>>,
}

impl Bouncer {
    /// Starts PgBouncer configured by `config` in front of the server
    /// `server_url` points at (its database part is not used: every
    /// database is forwarded).
    pub fn start(server_url: &str, config: Config) -> Bouncer {
        let binary = find_binary().unwrap_or_else(|| panic!("{INSTALL_HINT}"));
        let server = Server::of(server_url);
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(crate::pg::postgres_user())
        } else {
            None
        };
        let base = tempfile::Builder::new()
            .prefix("skillhost-pgbouncer-")
            .tempdir()
            .expect("temp dir for PgBouncer")
            .keep();
        if let Some((uid, gid)) = run_as {
            crate::pg::chown(&base, uid, gid);
        }
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = free_port();
            let ini = base.join("pgbouncer.ini");
            std::fs::write(&ini, config_text(&server, port, config, &base))
                .expect("write pgbouncer.ini");
            if let Some((uid, gid)) = run_as {
                crate::pg::chown(&ini, uid, gid);
            }
            let log = std::fs::File::create(base.join("stderr.log")).expect("PgBouncer's log");
            let mut command = Command::new(&binary);
            command
                .arg(&ini)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .process_group(0);
            if let Some((uid, gid)) = run_as {
                command.uid(uid).gid(gid);
            }
            let child = command
                .spawn()
                .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
            let bouncer = Bouncer {
                port,
                base: base.clone(),
                watchdog: Mutex::new(Some(crate::watchdog(
                    &format!(
                        "cat >/dev/null; kill -TERM {pid} 2>/dev/null; sleep 1; \
                         kill -KILL {pid} 2>/dev/null; rm -rf {}",
                        base.display(),
                        pid = child.id()
                    ),
                    "PgBouncer",
                ))),
                child: Mutex::new(Some(child)),
            };
            match bouncer.wait_listening() {
                Ok(()) => return bouncer,
                Err(e) => {
                    last_error = e;
                    bouncer.stop_child();
                }
            }
        }
        panic!("could not start PgBouncer: {last_error}");
    }

    /// A URL for database `name` through this PgBouncer, with the option
    /// that tells the store it is there.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{name}?pgbouncer=true",
            self.port
        )
    }

    /// The same without the option: what a user who did not say so gives.
    pub fn url_without_option(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// PgBouncer's own log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("pgbouncer.log")).unwrap_or_default()
            + &std::fs::read_to_string(self.base.join("stderr.log")).unwrap_or_default()
    }

    fn wait_listening(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if let Some(child) = self.child.lock().unwrap().as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("PgBouncer exited ({status}):\n{}", self.log()));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "PgBouncer did not listen on 127.0.0.1:{} within {}s:\n{}",
                    self.port,
                    START_TIMEOUT.as_secs(),
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop_child(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        self.stop_child();
        if let Some(mut watchdog) = self.watchdog.lock().unwrap().take() {
            if let Some(mut stdin) = watchdog.stdin.take() {
                let _ = stdin.flush();
            }
            let _ = watchdog.wait();
        }
    }
}

fn config_text(server: &Server, port: u16, config: Config, base: &std::path::Path) -> String {
    let password = server
        .password
        .as_ref()
        .map(|p| format!(" password={p}"))
        .unwrap_or_default();
    format!(
        "[databases]\n\
         * = host={host} port={server_port} user={user}{password}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = any\n\
         pool_mode = {pool_mode}\n\
         max_client_conn = 2000\n\
         default_pool_size = {pool_size}\n\
         ignore_startup_parameters = {ignore}\n\
         logfile = {base}/pgbouncer.log\n\
         pidfile = {base}/pgbouncer.pid\n\
         log_connections = 0\n\
         log_disconnections = 0\n",
        host = server.host,
        server_port = server.port,
        user = server.user,
        base = base.display(),
        pool_mode = config.pool_mode,
        pool_size = config.pool_size,
        ignore = config.ignore_startup_parameters,
    )
}

fn find_binary() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("pgbouncer"))
        .find(|path| path.is_file())
}

/// A test's database reached through a PgBouncer in transaction pooling.
pub struct Pooled {
    /// Through the pooler, with `pgbouncer=true`: what the store is given.
    pub url: String,
    /// Straight to the server: for a test's own look at the database.
    pub direct: String,
}

/// The PgBouncer in transaction pooling every test of this binary shares,
/// in front of [`crate::pg`]'s server.
pub fn shared() -> &'static Bouncer {
    static SHARED: OnceLock<Bouncer> = OnceLock::new();
    SHARED.get_or_init(|| Bouncer::start(&crate::pg::server_url(), Config::default()))
}

/// A new, empty database for one test, reached through [`shared`].
pub async fn fresh_database() -> Pooled {
    let direct = crate::pg::fresh_database().await;
    let name = direct
        .rsplit_once('/')
        .map(|(_, name)| name.split('?').next().unwrap_or(name).to_owned())
        .expect("a database name");
    Pooled {
        url: shared().url(&name),
        direct,
    }
}
