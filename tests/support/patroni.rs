//! A Postgres failover harness for tests: Debian's etcd, Patroni and HAProxy
//! on loopback ports (issue 34's item 1, its first part).
//!
//! [`Ha::start`] brings up one etcd member, `nodes` Postgres instances
//! managed by Patroni (synchronous replication: `synchronous_mode`, so a
//! commit the primary acknowledged is on a replica too; or asynchronous,
//! [`Ha::start_asynchronous`], with [`Ha::pause_replication`] to make a
//! failover lose commits), and HAProxy
//! routing one port to whichever instance Patroni's REST API says is the
//! primary (`OPTIONS /primary`, checked every 500 ms, sessions to a node
//! marked down shut). [`Ha::kill_primary`] SIGKILLs the primary's Patroni
//! and its postmaster; [`Ha::wait_primary`] waits, bounded, for a replica
//! to be promoted; [`Ha::restart`] starts a killed node's Patroni again,
//! which rejoins as a replica (`pg_rewind`).
//!
//! Everything listens on 127.0.0.1, in one temporary directory. As root
//! (CI) Patroni, and so Postgres, run as the `postgres` user. Every process
//! is stopped, and the directory removed, when the [`Ha`] is dropped, and in
//! any case by a watchdog shell when this process exits: it kills the
//! processes this harness started (their ids are in `pids`) and each
//! instance's postmaster (from its `postmaster.pid`; Postgres runs in a
//! session of its own). Every wait is bounded. No binaries: the test fails,
//! naming the packages.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::free_port;

const INSTALL_HINT: &str = "the failover harness needs etcd, Patroni and HAProxy: \
     apt-get install -y --no-install-recommends etcd-server patroni haproxy";

/// How long a start or a promotion may take.
const WAIT_FOR: Duration = Duration::from_secs(90);

/// One Patroni-managed instance.
struct Node {
    name: String,
    pg_port: u16,
    rest_port: u16,
    config: PathBuf,
    data: PathBuf,
    patroni: Option<Child>,
}

/// etcd, Patroni-managed instances and HAProxy in front of them.
pub struct Ha {
    base: PathBuf,
    /// HAProxy's port: always the primary.
    pub port: u16,
    etcd: Option<Child>,
    haproxy: Option<Child>,
    nodes: Vec<Node>,
    run_as: Option<(u32, u32)>,
    watchdog: Mutex<Option<Child>>,
}

fn find(binary: &str, dirs: &[&str]) -> PathBuf {
    dirs.iter()
        .map(|dir| Path::new(dir).join(binary))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{binary} not found; {INSTALL_HINT}"))
}

fn pg_bindir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("pg_ctl").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dir)| dir)
        .unwrap_or_else(|| panic!("no PostgreSQL server binaries; apt-get install -y postgresql"))
}

impl Ha {
    /// Starts etcd, `nodes` instances under Patroni and HAProxy, and waits
    /// until a primary answers through HAProxy.
    pub fn start(nodes: usize) -> Ha {
        Ha::start_with(nodes, true)
    }

    /// [`start`](Self::start) with asynchronous replication: the primary
    /// acknowledges a commit before any replica has it, and Patroni promotes
    /// a replica that lags by up to `maximum_lag_on_failover`, so a failover
    /// may lose the last commits ([`pause_replication`](Self::pause_replication)
    /// makes sure it does).
    ///
    /// That lag is 64 MiB here, not Patroni's 1 MiB: while replication is
    /// paused the primary goes on writing, and after a checkpoint the first
    /// change to each page logs the whole page, so a few commits can pass
    /// 1 MiB on a busy machine. Patroni then rightly promotes nobody (the
    /// cluster waits for the old primary), which is not the failover the
    /// test is about (docs/workers.md).
    pub fn start_asynchronous(nodes: usize) -> Ha {
        Ha::start_with(nodes, false)
    }

    fn start_with(nodes: usize, synchronous: bool) -> Ha {
        let etcd_bin = find("etcd", &["/usr/bin", "/usr/local/bin"]);
        let patroni_bin = find("patroni", &["/usr/bin", "/usr/local/bin"]);
        let haproxy_bin = find("haproxy", &["/usr/sbin", "/usr/bin", "/usr/local/sbin"]);
        let run_as = if unsafe { libc::geteuid() } == 0 {
            Some(crate::pg::postgres_user())
        } else {
            None
        };
        let base = tempfile::Builder::new()
            .prefix("skillhost-ha-")
            .tempdir()
            .expect("temp dir for the failover harness")
            .keep();
        if let Some((uid, gid)) = run_as {
            crate::pg::chown(&base, uid, gid);
        }
        let mut ha = Ha {
            port: free_port(),
            base: base.clone(),
            etcd: None,
            haproxy: None,
            nodes: Vec::new(),
            run_as,
            watchdog: Mutex::new(None),
        };
        ha.spawn_watchdog();

        // etcd: one member.
        let client = free_port();
        let peer = free_port();
        let etcd_dir = base.join("etcd");
        let etcd = ha.spawn(
            Command::new(&etcd_bin)
                .args(["--name", "e0", "--data-dir"])
                .arg(&etcd_dir)
                .args([
                    "--listen-client-urls",
                    &format!("http://127.0.0.1:{client}"),
                    "--advertise-client-urls",
                    &format!("http://127.0.0.1:{client}"),
                    "--listen-peer-urls",
                    &format!("http://127.0.0.1:{peer}"),
                    "--initial-advertise-peer-urls",
                    &format!("http://127.0.0.1:{peer}"),
                    "--initial-cluster",
                    &format!("e0=http://127.0.0.1:{peer}"),
                    "--initial-cluster-state",
                    "new",
                ]),
            "etcd",
        );
        ha.etcd = Some(etcd);
        ha.wait(
            |_| http_status(client, "GET", "/health") == Some(200),
            "etcd to answer",
        );

        // Patroni, one per instance.
        let bindir = pg_bindir();
        for i in 0..nodes {
            let name = format!("pg{i}");
            let node = Node {
                pg_port: free_port(),
                rest_port: free_port(),
                config: base.join(format!("{name}.yml")),
                data: base.join(&name),
                name,
                patroni: None,
            };
            let config = patroni_config(&node, &base, &bindir, client, synchronous);
            std::fs::write(&node.config, config).expect("write a Patroni configuration");
            if let Some((uid, gid)) = run_as {
                crate::pg::chown(&node.config, uid, gid);
            }
            ha.nodes.push(node);
        }
        // The first bootstraps the cluster alone; the others then join it as
        // replicas (no race for the initialize key).
        ha.start_patroni(0, &patroni_bin);
        ha.wait(
            |ha| http_status(ha.nodes[0].rest_port, "GET", "/primary") == Some(200),
            "the first instance to bootstrap",
        );
        for i in 1..nodes {
            ha.start_patroni(i, &patroni_bin);
        }

        // HAProxy: the primary, by Patroni's health check.
        let mut servers = String::new();
        for node in &ha.nodes {
            servers.push_str(&format!(
                "    server {} 127.0.0.1:{} maxconn 500 check port {}\n",
                node.name, node.pg_port, node.rest_port
            ));
        }
        let haproxy_config = base.join("haproxy.cfg");
        std::fs::write(
            &haproxy_config,
            format!(
                "global\n    maxconn 2000\n\
                 defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 30m\n\
                 \x20   timeout server 30m\n    timeout check 1s\n\
                 listen primary\n    bind 127.0.0.1:{port}\n\
                 \x20   option httpchk OPTIONS /primary\n    http-check expect status 200\n\
                 \x20   default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions\n\
                 {servers}",
                port = ha.port
            ),
        )
        .expect("write haproxy.cfg");
        let haproxy = ha.spawn(
            Command::new(&haproxy_bin)
                .arg("-f")
                .arg(&haproxy_config)
                .arg("-db"),
            "haproxy",
        );
        ha.haproxy = Some(haproxy);
        ha.wait_primary();
        ha
    }

    /// A URL for database `name` through HAProxy (the primary).
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates database `name` through HAProxy, trying again for up to 30 s
    /// while HAProxy settles on the primary.
    pub async fn create_database(&self, name: &str) {
        use sqlx::{Connection, Executor};
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let created = match sqlx::PgConnection::connect(&self.url("postgres")).await {
                Ok(mut conn) => {
                    let done = conn
                        .execute(format!("CREATE DATABASE {name}").as_str())
                        .await;
                    let _ = conn.close().await;
                    done.map(|_| ())
                }
                Err(e) => Err(e),
            };
            match created {
                Ok(()) => return,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("not yet through HAProxy: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no database `{name}` through HAProxy: {e}\n{}", self.logs()),
            }
        }
    }

    /// The primary's write-ahead log position in bytes, through HAProxy
    /// (`None` while no primary answers): how much the primary wrote
    /// between two calls.
    pub async fn wal_position(&self) -> Option<u64> {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .ok()?;
        let position: Option<i64> =
            sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
                .fetch_one(&mut conn)
                .await
                .ok();
        let _ = conn.close().await;
        position.and_then(|p| u64::try_from(p).ok())
    }

    /// The index of the node Patroni's REST API names primary, if any.
    pub fn primary(&self) -> Option<usize> {
        self.nodes
            .iter()
            .position(|node| http_status(node.rest_port, "GET", "/primary") == Some(200))
    }

    /// Waits (bounded) until a node is primary and a connection through
    /// HAProxy reaches a server that is not in recovery; returns the node.
    pub fn wait_primary(&self) -> usize {
        let mut found = None;
        self.wait(
            |ha| {
                found = ha.primary();
                found.is_some() && ha.primary_answers()
            },
            "a primary behind HAProxy",
        );
        found.expect("a primary")
    }

    /// Waits (bounded) until a node is the primary's synchronous standby
    /// (Patroni's `GET /sync`): only it may be promoted without losing a
    /// commit the primary acknowledged, so Patroni promotes no other.
    pub fn wait_sync_standby(&self) {
        self.wait(
            |ha| {
                ha.nodes
                    .iter()
                    .any(|node| http_status(node.rest_port, "GET", "/sync") == Some(200))
            },
            "a synchronous standby",
        );
    }

    /// Stops (SIGSTOP) the primary's WAL senders, waiting (bounded) until
    /// one streams: from now on nothing the primary commits reaches a
    /// replica (stopped on the sending side, so nothing waits in a socket
    /// either). Returns their ids for [`kill_paused`](Self::kill_paused).
    pub fn pause_replication(&self) -> Vec<i32> {
        let primary = self.primary().expect("a primary");
        // A replica still being created streams from a WAL sender too (its
        // base backup's): paused then, it would never finish, and could
        // never be promoted. So first every replica runs.
        self.wait_replicas_running();
        let mut senders = Vec::new();
        self.wait(
            |ha| {
                senders = postmaster_pid(&ha.nodes[primary].data)
                    .map(|pid| children_titled(pid, "walsender"))
                    .unwrap_or_default();
                !senders.is_empty()
            },
            "the primary's WAL sender",
        );
        for &pid in &senders {
            unsafe {
                libc::kill(pid, libc::SIGSTOP);
            }
        }
        senders
    }

    /// Waits (bounded) until every node but the primary is a replica that
    /// runs: Patroni's `/cluster` says `running` or `streaming` for it, not
    /// `creating replica` (its base backup) or `starting`.
    pub fn wait_replicas_running(&self) {
        let replicas = self.nodes.len().saturating_sub(1);
        self.wait(
            |ha| {
                let Ok(cluster) = serde_json::from_str::<serde_json::Value>(&ha.cluster()) else {
                    return false;
                };
                let running = cluster["members"].as_array().map_or(0, |members| {
                    members
                        .iter()
                        .filter(|m| {
                            matches!(m["role"].as_str(), Some("replica" | "sync_standby"))
                                && matches!(m["state"].as_str(), Some("running" | "streaming"))
                        })
                        .count()
                });
                running >= replicas
            },
            "every replica running",
        );
    }

    /// SIGKILLs the WAL senders [`pause_replication`](Self::pause_replication)
    /// stopped (after [`kill_primary`](Self::kill_primary): its machine died).
    pub fn kill_paused(&self, paused: &[i32]) {
        for &pid in paused {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }

    /// SIGKILLs the primary's Patroni and its postmaster; returns its index.
    pub fn kill_primary(&mut self) -> usize {
        let primary = self.primary().expect("a primary to kill");
        let node = &mut self.nodes[primary];
        if let Some(mut patroni) = node.patroni.take() {
            let _ = patroni.kill();
            let _ = patroni.wait();
        }
        if let Some(pid) = postmaster_pid(&node.data) {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        primary
    }

    /// Starts node `i`'s Patroni again (after [`kill_primary`](Self::kill_primary)).
    pub fn restart(&mut self, i: usize) {
        let patroni_bin = find("patroni", &["/usr/bin", "/usr/local/bin"]);
        self.start_patroni(i, &patroni_bin);
    }

    /// The harness's logs (for failure messages).
    /// Patroni's view of the cluster (`GET /cluster` of the first node that
    /// answers: each member's role, state and lag), for failure messages.
    pub fn cluster(&self) -> String {
        self.nodes
            .iter()
            .find_map(|node| http(node.rest_port, "GET", "/cluster"))
            .map_or_else(|| "no node answers".to_string(), |(_, body)| body)
    }

    pub fn logs(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(&self.base)
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let body = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: String = body
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                text.push_str(&format!("--- {}\n{tail}\n", path.display()));
            }
        }
        text
    }

    /// A Postgres server answers through HAProxy (an SSLRequest is
    /// answered `N` or `S`).
    fn primary_answers(&self) -> bool {
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut stream) = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1))
        else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let request = [0u8, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        let mut answer = [0u8; 1];
        stream.write_all(&request).is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && matches!(answer[0], b'N' | b'S')
    }

    fn start_patroni(&mut self, i: usize, patroni_bin: &Path) {
        let mut command = Command::new(patroni_bin);
        command.arg(&self.nodes[i].config);
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid).env("HOME", &self.base);
        }
        let what = format!("patroni-{}", self.nodes[i].name);
        let child = self.spawn(&mut command, &what);
        self.nodes[i].patroni = Some(child);
    }

    /// Spawns `command` in a process group of its own, its output to
    /// `base/WHAT.log`, and records its id for the watchdog.
    fn spawn(&self, command: &mut Command, what: &str) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join(format!("{what}.log")))
            .expect("a log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}; {INSTALL_HINT}"));
        let mut pids = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("pids"))
            .expect("the pid list");
        writeln!(pids, "{}", child.id()).unwrap();
        child
    }

    fn wait(&self, mut done: impl FnMut(&Ha) -> bool, what: &str) {
        let deadline = Instant::now() + WAIT_FOR;
        while !done(self) {
            if Instant::now() > deadline {
                panic!(
                    "timed out after {}s waiting for {what}; Patroni's view: {}\n{}",
                    WAIT_FOR.as_secs(),
                    self.cluster(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn spawn_watchdog(&self) {
        let base = self.base.display();
        let script = format!(
            "cat >/dev/null; \
             for p in $(cat {base}/pids 2>/dev/null); do kill -KILL $p 2>/dev/null; done; \
             for f in {base}/pg*/postmaster.pid; do \
               [ -f \"$f\" ] && kill -KILL $(head -n 1 \"$f\") 2>/dev/null; done; \
             sleep 1; rm -rf {base}"
        );
        *self.watchdog.lock().unwrap() = Some(crate::watchdog(&script, "failover harness"));
    }
}

impl Drop for Ha {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut patroni) = node.patroni.take() {
                let _ = patroni.kill();
                let _ = patroni.wait();
            }
        }
        for child in [self.haproxy.take(), self.etcd.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.lock().unwrap().take() {
            if let Some(mut stdin) = watchdog.stdin.take() {
                let _ = stdin.flush();
            }
            let _ = watchdog.wait();
        }
    }
}

fn patroni_config(
    node: &Node,
    base: &Path,
    bindir: &Path,
    etcd_port: u16,
    synchronous: bool,
) -> String {
    format!(
        "scope: skillhost\n\
         namespace: /skillhost/\n\
         name: {name}\n\
         log:\n  level: INFO\n\
         restapi:\n  listen: 127.0.0.1:{rest}\n  connect_address: 127.0.0.1:{rest}\n\
         etcd3:\n  hosts: 127.0.0.1:{etcd_port}\n\
         bootstrap:\n\
         \x20 dcs:\n\
         \x20   ttl: 10\n    loop_wait: 1\n    retry_timeout: 3\n\
         \x20   maximum_lag_on_failover: {max_lag}\n\
         \x20   synchronous_mode: {synchronous}\n\
         \x20   postgresql:\n\
         \x20     use_pg_rewind: true\n\
         \x20     parameters:\n\
         \x20       max_connections: 300\n\
         \x20       wal_level: replica\n\
         \x20       hot_standby: 'on'\n\
         \x20       wal_log_hints: 'on'\n\
         \x20       max_wal_senders: 10\n\
         \x20       max_replication_slots: 10\n\
         \x20 initdb:\n  - encoding: UTF8\n  - locale: C\n  - auth: trust\n\
         \x20 pg_hba:\n\
         \x20 - host all all 127.0.0.1/32 trust\n\
         \x20 - host replication all 127.0.0.1/32 trust\n\
         \x20 - local all all trust\n\
         postgresql:\n\
         \x20 listen: 127.0.0.1:{pg}\n\
         \x20 connect_address: 127.0.0.1:{pg}\n\
         \x20 data_dir: {data}\n\
         \x20 bin_dir: {bindir}\n\
         \x20 pgpass: {base}/{name}.pgpass\n\
         \x20 authentication:\n\
         \x20   replication:\n      username: replicator\n      password: replicator\n\
         \x20   superuser:\n      username: postgres\n      password: postgres\n\
         \x20   rewind:\n      username: postgres\n      password: postgres\n\
         \x20 parameters:\n\
         \x20   unix_socket_directories: {base}\n\
         \x20   shared_buffers: 32MB\n",
        name = node.name,
        rest = node.rest_port,
        pg = node.pg_port,
        data = node.data.display(),
        bindir = bindir.display(),
        base = base.display(),
        max_lag = if synchronous { 1 << 20 } else { 64 << 20 },
    )
}

/// The postmaster's pid from `data/postmaster.pid`.
fn postmaster_pid(data: &Path) -> Option<i32> {
    std::fs::read_to_string(data.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The children of `parent` whose process title holds `title`.
fn children_titled(parent: i32, title: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // pid (comm) state ppid …: the comm may hold spaces and parentheses.
            let ppid: i32 = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (ppid == parent && String::from_utf8_lossy(&cmdline).contains(title)).then_some(pid)
        })
        .collect()
}

/// The status of `METHOD path` on 127.0.0.1:`port` (None: no answer within
/// a second).
fn http_status(port: u16, method: &str, path: &str) -> Option<u16> {
    http(port, method, path).map(|(status, _)| status)
}

/// An HTTP/1.1 request to Patroni's REST API on `port`: the status and
/// the body of its answer (at most 64 KiB), or `None` if it did not answer
/// within a second.
fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    // Read the whole (small) answer, so the server's write is not cut off.
    let mut answer = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_string();
    Some((status, body))
}
