//! An OTLP/HTTP trace receiver that decodes what the host sends with the
//! official protobuf definitions (PyPI `opentelemetry-proto`, run by
//! `otlp_receiver.py` beside this file), and reads back the spans it got.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli::KilledOnDrop;

/// A receiver on a free port of 127.0.0.1, stopped when dropped.
pub struct OtlpReceiver {
    _process: KilledOnDrop,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// Starts one that accepts every export.
    pub fn start() -> OtlpReceiver {
        Self::start_failing(0)
    }

    /// Starts one that answers the first `failures` exports with 503, as a
    /// collector that is down would.
    pub fn start_failing(failures: u32) -> OtlpReceiver {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("spans.jsonl");
        let script = crate::repo_root().join("tests/support/otlp_receiver.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(&out)
            .args(["--fail", &failures.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start python3 tests/support/otlp_receiver.py (needs opentelemetry-proto)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "the OTLP receiver did not start (is opentelemetry-proto installed?): {line:?}"
                )
            });
        OtlpReceiver {
            _process: KilledOnDrop::new(child),
            port,
            out,
            _dir: dir,
        }
    }

    /// Its base endpoint, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far, in the order received.
    pub fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a span as JSON"))
            .collect()
    }

    /// The spans received once `done` holds of them; panics after 30 s
    /// naming `what`.
    pub fn wait_for(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the receiver never got {what}; it has: {:#?}",
                spans.iter().map(|s| &s["name"]).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The spans named `name`.
pub fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

/// The one span named `name`; panics if there is not exactly one.
pub fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "spans named {name:?}: {found:#?}");
    found[0]
}
