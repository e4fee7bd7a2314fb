//! A run's trace: the context kept with the run, and spans built whole.
//!
//! The engine knows when a run, a node attempt, a host call or a wait began
//! and ended only once it has ended, and a run's root span outlives every
//! process that works on it; so spans are not opened and closed here but
//! described when they end ([`SpanOut`]) with their own ids, their parent's
//! and their times, and [`emit`]ted. A run's root span has the id stored
//! with the run ([`TraceContext`], W3C `traceparent`), chosen when the run
//! is created: every process that works on the run parents its spans to
//! it, and the process that ends the run emits it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanId, Status, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

pub(crate) static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: when not, building one is wasted work, and
/// the engine builds none.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A span's place in its trace: the trace's id and the span's. Kept with a
/// run as the W3C `traceparent` of its root span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl TraceContext {
    /// A new trace's root.
    pub fn new_root() -> TraceContext {
        let ids = RandomIdGenerator::default();
        TraceContext {
            trace_id: ids.new_trace_id().to_bytes(),
            span_id: ids.new_span_id().to_bytes(),
        }
    }

    /// A new span in this one's trace (its child, when it names this one
    /// as its parent).
    pub fn child(&self) -> TraceContext {
        TraceContext {
            trace_id: self.trace_id,
            span_id: RandomIdGenerator::default().new_span_id().to_bytes(),
        }
    }

    /// Reads a W3C `traceparent` (`00-TRACE-SPAN-FLAGS`, lowercase hex);
    /// None for anything else, an all-zero id included.
    pub fn parse(traceparent: &str) -> Option<TraceContext> {
        let mut parts = traceparent.split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || version != "00" || flags.len() != 2 {
            return None;
        }
        let mut context = TraceContext {
            trace_id: [0; 16],
            span_id: [0; 8],
        };
        decode_hex(trace, &mut context.trace_id)?;
        decode_hex(span, &mut context.span_id)?;
        decode_hex(flags, &mut [0])?;
        if context.trace_id == [0; 16] || context.span_id == [0; 8] {
            return None;
        }
        Some(context)
    }

    /// The W3C `traceparent` naming this span (sampled).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id_hex(), hex(&self.span_id))
    }

    /// The trace's id as trace viewers show it: 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

/// A span's id as 16 lowercase hex digits (as a `traceparent` writes it).
pub fn span_id_hex(id: &[u8; 8]) -> String {
    hex(id)
}

/// Reads a span's id written by [`span_id_hex`]; None for anything else,
/// an all-zero id included.
pub fn parse_span_id(text: &str) -> Option<[u8; 8]> {
    let mut id = [0; 8];
    decode_hex(text, &mut id)?;
    (id != [0; 8]).then_some(id)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

fn decode_hex(text: &str, out: &mut [u8]) -> Option<()> {
    let text = text.as_bytes();
    if text.len() != out.len() * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (byte, pair) in out.iter_mut().zip(text.chunks(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(())
}

/// What a span measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// Work inside the host (a run, a node attempt, a wait).
    Internal,
    /// A call out of the host (`http`, `llm`).
    Client,
}

/// One span, described when it has ended.
#[derive(Debug, Clone)]
pub struct SpanOut {
    pub name: Cow<'static, str>,
    /// Its trace and its own id.
    pub context: TraceContext,
    /// The span it belongs under, in the same trace; None for a trace's
    /// root.
    pub parent: Option<[u8; 8]>,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl SpanOut {
    /// A span `name` in `context`'s trace under `parent`, from `start` to
    /// `end`, with no attributes yet.
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        context: TraceContext,
        parent: Option<[u8; 8]>,
        start: SystemTime,
        end: SystemTime,
    ) -> SpanOut {
        SpanOut {
            name: name.into(),
            context,
            parent,
            kind: SpanKind::Internal,
            start,
            end,
            attributes: Vec::with_capacity(8),
            error: None,
        }
    }

    pub fn attribute(mut self, attribute: KeyValue) -> SpanOut {
        self.attributes.push(attribute);
        self
    }

    pub(crate) fn into_data(mut self) -> SpanData {
        // What a skill or a scenario wrote (an error message, a node's id)
        // reaches the collector cut to a bound: a hostile one cannot make
        // the queue hold megabytes per span.
        for attribute in &mut self.attributes {
            if let opentelemetry::Value::String(text) = &attribute.value
                && text.as_str().len() > MAX_TEXT
            {
                attribute.value = opentelemetry::Value::from(cut(text.as_str()));
            }
        }
        if let Some(message) = &mut self.error
            && message.len() > MAX_TEXT
        {
            *message = cut(message);
        }
        if self.name.len() > MAX_TEXT {
            self.name = Cow::Owned(cut(&self.name));
        }
        let context = SpanContext::new(
            TraceId::from_bytes(self.context.trace_id),
            SpanId::from_bytes(self.context.span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        );
        SpanData {
            span_context: context,
            parent_span_id: self.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
            // Every span of a run but its own comes from a process the
            // parent's may not be: the parent is always treated as remote.
            parent_span_is_remote: self.parent.is_some(),
            span_kind: match self.kind {
                SpanKind::Internal => opentelemetry::trace::SpanKind::Internal,
                SpanKind::Client => opentelemetry::trace::SpanKind::Client,
            },
            name: self.name,
            start_time: self.start,
            end_time: self.end.max(self.start),
            attributes: self.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: match self.error {
                Some(message) => Status::error(message),
                None => Status::Unset,
            },
            instrumentation_scope: crate::export::scope(),
        }
    }
}

/// The longest text a span carries (a name, a string attribute, a status
/// message), in bytes.
pub const MAX_TEXT: usize = 1024;

/// `text` cut to [`MAX_TEXT`] bytes at a character boundary, saying so.
fn cut(text: &str) -> String {
    let mut end = MAX_TEXT - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Queues `span` for export, when traces are exported; a full queue drops
/// it (counted). Never blocks.
pub fn emit(span: SpanOut) {
    if let Some(exporting) = crate::TRACES.get() {
        exporting.send(span.into_data());
    }
}

#[cfg(test)]
mod tests {
    use super::TraceContext;

    #[test]
    fn a_traceparent_reads_back_as_written() {
        let root = TraceContext::new_root();
        let text = root.traceparent();
        assert_eq!(text.len(), 55);
        assert_eq!(TraceContext::parse(&text), Some(root));
        let child = root.child();
        assert_eq!(child.trace_id, root.trace_id);
        assert_ne!(child.span_id, root.span_id);
        let span = super::span_id_hex(&child.span_id);
        assert_eq!(super::parse_span_id(&span), Some(child.span_id));
        for bad in [
            "",
            "00f067aa0ba902b",
            "00F067AA0BA902B7",
            "+0f067aa0ba902b7",
            "0000000000000000",
        ] {
            assert_eq!(super::parse_span_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        use super::{MAX_TEXT, SpanOut};
        use opentelemetry::KeyValue;
        let long = "é".repeat(MAX_TEXT);
        let now = std::time::SystemTime::now();
        let mut span = SpanOut::new(long.clone(), TraceContext::new_root(), None, now, now)
            .attribute(KeyValue::new("skillhost.node", long.clone()))
            .attribute(KeyValue::new("skillhost.attempt", 1));
        span.error = Some(long.clone());
        let data = span.into_data();
        assert!(data.name.len() <= MAX_TEXT && data.name.ends_with("..."));
        let text = data.attributes[0].value.as_str();
        assert!(text.len() <= MAX_TEXT && text.ends_with("..."), "{text}");
        assert_eq!(data.attributes[1].value, opentelemetry::Value::I64(1));
        match data.status {
            opentelemetry::trace::Status::Error { description } => {
                assert!(description.len() <= MAX_TEXT);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn anything_but_a_version_00_traceparent_is_refused() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(TraceContext::parse(good).is_some());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e47é6-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }
}
