//! What Skillhost shows its operators, outside the run store:
//!
//! - **Traces** over OTLP ([`trace`], [`export`]): a span per run, per node
//!   attempt, per host call that leaves the run and per wait at an
//!   approval node. A run's trace context is created with the run and kept
//!   with it (its provenance), so a run resumed after a crash, answered in
//!   another process or claimed by a worker stays in one trace. Spans are
//!   built whole when what they measure has ended, with the times the
//!   engine measured, and handed to a bounded queue: a full queue drops the
//!   span and counts it, so exporting never slows or fails a run.
//! - **Metrics** in Prometheus' text format ([`metrics`]).
//! - Where both are configured ([`config`]): the standard
//!   `OTEL_EXPORTER_OTLP_*`, `OTEL_SERVICE_NAME` and `OTEL_BSP_*`
//!   variables, or `[telemetry]` in the host's configuration file. Off
//!   unless configured; off, a span costs one atomic load.

pub mod config;
mod export;
pub mod metrics;
pub mod trace;

pub use config::{ConfigError, Protocol, TelemetryConfig, TracesConfig};
pub use opentelemetry::{KeyValue, StringValue};
pub use trace::{SpanKind, SpanOut, TraceContext, emit, enabled, parse_span_id, span_id_hex};

use std::sync::OnceLock;

static TRACES: OnceLock<export::Exporting> = OnceLock::new();

/// Starts exporting traces as `config` says (nothing when it configures
/// none). Once per process; a second call keeps the first configuration.
pub fn install(config: &TelemetryConfig) -> Result<(), ConfigError> {
    let Some(traces) = &config.traces else {
        return Ok(());
    };
    if TRACES.get().is_some() {
        return Ok(());
    }
    let exporting = export::Exporting::start(traces, &config.service_name)?;
    if TRACES.set(exporting).is_ok() {
        trace::ENABLED.store(true, std::sync::atomic::Ordering::Release);
    }
    Ok(())
}

/// Sends what is queued and stops exporting, waiting at most `timeout`
/// (a collector that does not answer costs the process no more than that
/// at exit). Returns the spans dropped over the process's life (a full
/// queue, a failed export, or still queued at the deadline), which the
/// caller reports.
pub fn shutdown(timeout: std::time::Duration) -> u64 {
    match TRACES.get() {
        Some(exporting) => {
            trace::ENABLED.store(false, std::sync::atomic::Ordering::Release);
            exporting.shutdown(timeout)
        }
        None => 0,
    }
}

/// Turns building and exporting spans off and on again, when traces are
/// exported at all (the benchmark compares the two in one process).
pub fn set_exporting(on: bool) {
    if TRACES.get().is_some() {
        trace::ENABLED.store(on, std::sync::atomic::Ordering::Release);
    }
}

/// Spans dropped so far (for the `skillhost_trace_spans_dropped_total`
/// metric).
pub fn spans_dropped() -> u64 {
    TRACES.get().map_or(0, export::Exporting::dropped)
}

/// The trace id (32 hex digits) of a run whose provenance keeps
/// `traceparent`.
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    TraceContext::parse(traceparent).map(|context| context.trace_id_hex())
}

/// The trace viewer's URL for `trace_id` (hex): the configuration's
/// `trace_url` template with `{trace_id}` replaced.
pub fn trace_link(template: &str, trace_id: &str) -> String {
    template.replace("{trace_id}", trace_id)
}
