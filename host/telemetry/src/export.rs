//! The export queue: spans wait in a bounded channel for a thread of their
//! own that posts them in batches to the OTLP endpoint. The run's side only
//! ever `try_send`s: a full queue drops the span and counts it, and a
//! collector that is down or slow costs the runs nothing but those drops.
//! (The SDK's batch processor does the same but keeps its drop count to
//! itself; this one reports it.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::config::{ConfigError, TracesConfig};

enum Message {
    Span(Box<SpanData>),
    /// Export everything queued before this, then answer and stop.
    Shutdown(mpsc::Sender<()>),
}

pub(crate) struct Exporting {
    queue: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
    /// Spans in the channel, not yet taken by the export thread.
    queued: Arc<AtomicU64>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// The instrumentation scope every span names.
pub(crate) fn scope() -> InstrumentationScope {
    static SCOPE: OnceLock<InstrumentationScope> = OnceLock::new();
    SCOPE
        .get_or_init(|| {
            InstrumentationScope::builder("skillhost")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build()
        })
        .clone()
}

impl Exporting {
    /// Builds the exporter (checking what the configuration could not) and
    /// starts the export thread.
    pub(crate) fn start(config: &TracesConfig, service_name: &str) -> Result<Self, ConfigError> {
        let headers = config.headers.iter().cloned().collect();
        let timeout = config.timeout;
        let endpoint = config.endpoint.clone();
        // The exporter's blocking client runs a runtime of its own, which
        // must not be built (or dropped) on a tokio thread: build it on the
        // export thread, and hear from there whether it could be.
        let (built, built_rx) = mpsc::channel();
        let (queue, receiver) = mpsc::sync_channel(config.max_queue);
        let dropped = Arc::new(AtomicU64::new(0));
        let resource = Resource::builder()
            .with_service_name(service_name.to_string())
            .with_attributes([
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                KeyValue::new("service.instance.id", instance_id()),
                KeyValue::new("process.pid", i64::from(std::process::id())),
            ])
            .build();
        let (batch, delay) = (config.max_batch, config.delay);
        let queued = Arc::new(AtomicU64::new(0));
        let (thread_dropped, thread_queued) = (dropped.clone(), queued.clone());
        let thread = std::thread::Builder::new()
            .name("skillhost-otlp".into())
            .spawn(move || {
                let exporter = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_endpoint(endpoint)
                    .with_timeout(timeout)
                    .with_headers(headers)
                    .build();
                let mut exporter = match exporter {
                    Ok(exporter) => {
                        let _ = built.send(Ok(()));
                        exporter
                    }
                    Err(e) => {
                        let _ = built.send(Err(e.to_string()));
                        return;
                    }
                };
                exporter.set_resource(&resource);
                run(
                    exporter,
                    receiver,
                    batch,
                    delay,
                    &thread_dropped,
                    &thread_queued,
                );
            })
            .map_err(|e| ConfigError {
                source_name: "traces".into(),
                message: format!("cannot start the export thread: {e}"),
            })?;
        match built_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(message)) => {
                return Err(ConfigError {
                    source_name: config.endpoint.clone(),
                    message: format!("cannot build the OTLP exporter: {message}"),
                });
            }
            Err(_) => {
                return Err(ConfigError {
                    source_name: config.endpoint.clone(),
                    message: "the OTLP exporter's thread ended before it started".into(),
                });
            }
        }
        Ok(Exporting {
            queue,
            dropped,
            queued,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub(crate) fn send(&self, span: SpanData) {
        match self.queue.try_send(Message::Span(Box::new(span))) {
            Ok(()) => {
                self.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Exports what is queued, waiting `timeout` at most; the spans dropped
    /// over the process's life, those still queued at the deadline
    /// included.
    pub(crate) fn shutdown(&self, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let (done, done_rx) = mpsc::channel();
        // The queue may be full: wait for room until the deadline.
        let mut message = Message::Shutdown(done);
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return self.dropped() + self.queued.load(Ordering::Relaxed),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            // Still exporting at the deadline: what it has not sent is
            // lost with the process.
            return self.dropped() + self.queued.load(Ordering::Relaxed);
        }
        if let Ok(mut thread) = self.thread.lock()
            && let Some(thread) = thread.take()
        {
            let _ = thread.join();
        }
        self.dropped()
    }
}

/// The export thread: batches of at most `batch` spans, each sent when
/// full or when its first span has waited `delay`.
fn run(
    exporter: opentelemetry_otlp::SpanExporter,
    receiver: Receiver<Message>,
    batch: usize,
    delay: Duration,
    dropped: &AtomicU64,
    queued: &AtomicU64,
) {
    let mut spans: Vec<SpanData> = Vec::with_capacity(batch);
    let mut first_at: Option<Instant> = None;
    let export = |spans: &mut Vec<SpanData>| {
        if spans.is_empty() {
            return;
        }
        let count = spans.len() as u64;
        let result = futures_executor::block_on(exporter.export(std::mem::take(spans)));
        queued.fetch_sub(count, Ordering::Relaxed);
        if let Err(e) = result {
            dropped.fetch_add(count, Ordering::Relaxed);
            tracing::debug!("OTLP export of {count} span(s) failed: {e}");
        }
    };
    loop {
        let wait = match first_at {
            Some(at) => delay.saturating_sub(at.elapsed()),
            None => delay,
        };
        match receiver.recv_timeout(wait) {
            Ok(Message::Span(span)) => {
                first_at.get_or_insert_with(Instant::now);
                spans.push(*span);
                if spans.len() >= batch {
                    export(&mut spans);
                    first_at = None;
                }
            }
            Ok(Message::Shutdown(done)) => {
                // Whatever was queued before the shutdown is in `spans` by
                // now (the channel keeps order), in batches.
                while !spans.is_empty() {
                    let rest = spans.split_off(spans.len().min(batch));
                    export(&mut spans);
                    spans = rest;
                }
                let _ = done.send(());
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                export(&mut spans);
                first_at = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                export(&mut spans);
                return;
            }
        }
    }
}

/// This process's `service.instance.id`: random, so two processes on one
/// machine (a worker and the `host run` it took a run over from) differ.
fn instance_id() -> String {
    let context = crate::trace::TraceContext::new_root();
    context.trace_id_hex()
}
