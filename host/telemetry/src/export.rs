//! The export queue: spans wait in a bounded buffer for a thread of their
//! own that posts them in batches to the OTLP endpoint. The run's side
//! only pushes under a short lock: a full queue drops the span and counts
//! it, and a collector that is down or slow costs the runs nothing but
//! those drops. (The SDK's batch processor does much the same, but wakes
//! its thread through a channel per span and keeps its drop count to
//! itself; this one wakes it once a batch and reports the count.)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::config::{ConfigError, TracesConfig};

/// The spans waiting for export, and whether the process is ending.
struct Queue {
    spans: Mutex<Pending>,
    /// Rung when a batch is full or the process ends: the export thread
    /// otherwise wakes once per delay, not once per span (a wake per span
    /// cost the run more than building it).
    ready: Condvar,
    /// Rung by the export thread when it has sent everything after a
    /// shutdown.
    drained: Condvar,
}

#[derive(Default)]
struct Pending {
    spans: Vec<SpanData>,
    /// Set by [`Exporting::shutdown`]: send what is left and stop.
    ending: bool,
    /// Set by the export thread once it has.
    ended: bool,
    /// Spans the export thread has taken and not yet sent (or failed to):
    /// lost too if the process ends before it has.
    in_flight: usize,
}

pub(crate) struct Exporting {
    queue: Arc<Queue>,
    max_queue: usize,
    max_batch: usize,
    dropped: Arc<AtomicU64>,
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
        let queue = Arc::new(Queue {
            spans: Mutex::new(Pending::default()),
            ready: Condvar::new(),
            drained: Condvar::new(),
        });
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
        let (thread_queue, thread_dropped) = (queue.clone(), dropped.clone());
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
                run(&exporter, &thread_queue, batch, delay, &thread_dropped);
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
            max_queue: config.max_queue,
            max_batch: config.max_batch,
            dropped,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `span`, or drops it (counted) when the queue is full or the
    /// process is ending. Never waits for the export.
    pub(crate) fn send(&self, span: SpanData) {
        let Ok(mut pending) = self.queue.spans.lock() else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if pending.spans.len() >= self.max_queue || pending.ending {
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.spans.push(span);
        let full = pending.spans.len() == self.max_batch;
        drop(pending);
        if full {
            self.queue.ready.notify_one();
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
        let Ok(mut pending) = self.queue.spans.lock() else {
            return self.dropped();
        };
        pending.ending = true;
        self.queue.ready.notify_one();
        while !pending.ended {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Still exporting at the deadline: what it has not sent,
                // queued or in the batch it waits on, is lost with the
                // process.
                let unsent = (pending.spans.len() + pending.in_flight) as u64;
                return self.dropped() + unsent;
            }
            pending = match self.queue.drained.wait_timeout(pending, left) {
                Ok((pending, _)) => pending,
                Err(_) => return self.dropped(),
            };
        }
        drop(pending);
        if let Ok(mut thread) = self.thread.lock()
            && let Some(thread) = thread.take()
        {
            let _ = thread.join();
        }
        self.dropped()
    }
}

/// The export thread: takes what is queued when a batch is full, when
/// `delay` has passed, or when the process ends, and posts it in batches
/// of at most `batch` spans.
fn run(
    exporter: &opentelemetry_otlp::SpanExporter,
    queue: &Queue,
    batch: usize,
    delay: Duration,
    dropped: &AtomicU64,
) {
    let export = |mut spans: Vec<SpanData>| {
        while !spans.is_empty() {
            let rest = spans.split_off(spans.len().min(batch));
            let count = spans.len();
            let result = futures_executor::block_on(exporter.export(spans));
            if let Err(e) = result {
                dropped.fetch_add(count as u64, Ordering::Relaxed);
                tracing::debug!("OTLP export of {count} span(s) failed: {e}");
            }
            // Sent or counted as dropped: no longer in flight.
            if let Ok(mut pending) = queue.spans.lock() {
                pending.in_flight = pending.in_flight.saturating_sub(count);
            }
            spans = rest;
        }
    };
    loop {
        let (spans, ending) = {
            let Ok(mut pending) = queue.spans.lock() else {
                return;
            };
            if pending.spans.len() < batch && !pending.ending {
                pending = match queue.ready.wait_timeout(pending, delay) {
                    Ok((pending, _)) => pending,
                    Err(_) => return,
                };
            }
            pending.in_flight = pending.spans.len();
            (
                std::mem::replace(&mut pending.spans, Vec::with_capacity(batch)),
                pending.ending,
            )
        };
        export(spans);
        if ending {
            // Spans queued after the shutdown was asked for are refused
            // (`send`), so this was the last of them.
            if let Ok(mut pending) = queue.spans.lock() {
                pending.ended = true;
            }
            queue.drained.notify_all();
            return;
        }
    }
}

/// This process's `service.instance.id`: random, so two processes on one
/// machine (a worker and the `host run` it took a run over from) differ.
fn instance_id() -> String {
    let context = crate::trace::TraceContext::new_root();
    context.trace_id_hex()
}
