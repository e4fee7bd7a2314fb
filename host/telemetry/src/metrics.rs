//! The process's metrics in Prometheus' text format (`prometheus-client`):
//! what `host serve` and `host worker --metrics-addr` answer at `/metrics`.
//!
//! One set per process, installed by the faces that serve it
//! ([`install`]); until then every recording function is one atomic load
//! and returns, so `host run` and the engine's benchmarks pay nothing.
//! Names follow Prometheus' conventions: the `skillhost_` prefix, counters
//! ending in `_total`, base units (`_seconds`, `_bytes`) in the name.
//!
//! Scenario, node, provider and model names come from scenarios, which are
//! untrusted: a family takes at most [`MAX_LABEL_SETS`] distinct label sets,
//! and a new one past that is folded into [`OTHER`] (its untrusted values
//! replaced, its fixed ones such as a status kept) and counted in
//! `skillhost_metric_label_sets_folded_total{metric}`. A label value is cut
//! to [`MAX_LABEL_CHARS`] characters; the encoder escapes what the format
//! needs escaped. No label takes a run id.
//!
//! What is true across processes (the queue, the open waits) is not
//! counted here but read from the store at scrape time, by the face, and
//! handed to [`render`] as [`StoreGauges`].

use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The most distinct label sets a family takes before new ones are folded
/// into [`OTHER`].
pub const MAX_LABEL_SETS: usize = 200;

/// The label value an untrusted value past [`MAX_LABEL_SETS`] is folded into.
pub const OTHER: &str = "other";

/// The longest label value kept, in characters.
pub const MAX_LABEL_CHARS: usize = 128;

/// The node duration histogram's buckets, in seconds: a pure skill's
/// millisecond to a model-backed node's minutes.
const NODE_BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
];

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// Installs the process's metrics (once; a second call keeps the first).
/// The faces that answer `/metrics` call it at start.
pub fn install() {
    METRICS.get_or_init(Metrics::new);
}

/// Whether [`install`] was called: the engine builds nothing for metrics
/// otherwise.
pub fn installed() -> bool {
    METRICS.get().is_some()
}

/// A run began executing in this process (started, or resumed from a
/// checkpoint by a worker or a face).
pub fn run_started(scenario: &str) {
    if let Some(metrics) = METRICS.get() {
        metrics.run_started(scenario);
    }
}

/// A run's execution in this process ended with `status` (`completed`,
/// `failed`, `waiting`, `cancelled`).
pub fn run_finished(scenario: &str, status: &'static str) {
    if let Some(metrics) = METRICS.get() {
        metrics.run_finished(scenario, status);
    }
}

/// A node of `scenario` ran for `seconds`.
pub fn node_finished(scenario: &str, node: &str, seconds: f64) {
    if let Some(metrics) = METRICS.get() {
        metrics.node_finished(scenario, node, seconds);
    }
}

/// A worker took over a run whose lease another runner held and let
/// expire.
pub fn lease_taken_over() {
    if let Some(metrics) = METRICS.get() {
        metrics.lease_takeovers.inc();
    }
}

/// A node's `llm` completions used these tokens of `provider`'s `model`.
pub fn tokens_used(provider: &str, model: &str, input: u64, output: u64) {
    if let Some(metrics) = METRICS.get() {
        metrics.tokens_used(provider, model, input, output);
    }
}

/// A skill used `capability` without a grant.
pub fn capability_denied(capability: &str) {
    if let Some(metrics) = METRICS.get() {
        metrics.capability_denied(capability);
    }
}

/// Host calls' journal rows added `bytes` (their requests' and responses'
/// JSON) to the store.
pub fn journal_written(bytes: u64) {
    if let Some(metrics) = METRICS.get() {
        metrics.journal_bytes.inc_by(bytes);
    }
}

/// What the store says at scrape time, true across every process on it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreGauges {
    /// Runs waiting in the queue for a worker.
    pub queued: u64,
    /// How long the run queued longest ago has been queued, in seconds (0
    /// when none is).
    pub oldest_queued_age_seconds: f64,
    /// Runs waiting for an answer at an approval node.
    pub waiting: u64,
}

/// Which text format a scraper asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text` (what Prometheus asks for first).
    OpenMetrics,
    /// Prometheus' text format 0.0.4 (what anything else gets).
    Prometheus,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// it (with a quality above 0), else Prometheus' text.
    pub fn from_accept(accept: Option<&str>) -> Format {
        let asks_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let kind = parts.next().unwrap_or("");
                let refused = parts.any(|param| {
                    param
                        .strip_prefix("q=")
                        .and_then(|q| q.parse::<f32>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                kind.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        match asks_openmetrics {
            true => Format::OpenMetrics,
            false => Format::Prometheus,
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        }
    }
}

/// The process's metrics in `format`, with the store's gauges when the
/// face could read them (`None`: left out, and the face says why in its
/// log). Installs the metrics if nothing did.
pub fn render(format: Format, store: Option<StoreGauges>) -> String {
    METRICS.get_or_init(Metrics::new).render(format, store)
}

/// Every family, and the registry that encodes them.
pub struct Metrics {
    registry: Registry,
    runs_started: Capped<ScenarioLabels, Counter>,
    runs_finished: Capped<FinishedLabels, Counter>,
    node_duration: Capped<NodeLabels, Histogram, fn() -> Histogram>,
    lease_takeovers: Counter,
    tokens: Capped<TokenLabels, Counter>,
    capability_denials: Capped<CapabilityLabels, Counter>,
    journal_bytes: Counter,
    folded: Family<FoldedLabels, Counter>,
    /// Held while a scrape sets the store's gauges and encodes them.
    scraping: Mutex<()>,
    store: std::sync::Arc<ScrapeTime>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A set of its own (the process's is [`install`]ed; tests make theirs).
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let runs_started = Capped::new("skillhost_runs_started", Family::default());
        let runs_finished = Capped::new("skillhost_runs_finished", Family::default());
        let node_duration = Capped::new(
            "skillhost_node_duration_seconds",
            Family::new_with_constructor((|| Histogram::new(NODE_BUCKETS)) as fn() -> Histogram),
        );
        let tokens = Capped::new("skillhost_model_tokens", Family::default());
        let capability_denials = Capped::new("skillhost_capability_denials", Family::default());
        let lease_takeovers = Counter::default();
        let journal_bytes = Counter::default();
        let folded = Family::<FoldedLabels, Counter>::default();
        registry.register(
            "skillhost_runs_started",
            "Runs that began executing in this process (started, or resumed from a checkpoint), \
             by scenario",
            runs_started.family.clone(),
        );
        registry.register(
            "skillhost_runs_finished",
            "Runs whose execution in this process ended, by scenario and status (completed, \
             failed, waiting, cancelled)",
            runs_finished.family.clone(),
        );
        registry.register_with_unit(
            "skillhost_node_duration",
            "How long each node took, by scenario and node",
            Unit::Seconds,
            node_duration.family.clone(),
        );
        registry.register(
            "skillhost_lease_takeovers",
            "Runs a worker took over after the lease another runner held expired",
            lease_takeovers.clone(),
        );
        registry.register(
            "skillhost_model_tokens",
            "Tokens of `llm` completions, by provider, model and direction (input, output)",
            tokens.family.clone(),
        );
        registry.register(
            "skillhost_capability_denials",
            "Host calls refused because the node did not grant the capability, by capability",
            capability_denials.family.clone(),
        );
        registry.register_with_unit(
            "skillhost_journal",
            "What host calls' journal rows added to the store (their requests' and responses' \
             JSON)",
            Unit::Bytes,
            journal_bytes.clone(),
        );
        registry.register(
            "skillhost_metric_label_sets_folded",
            "Label sets folded into `other` because their metric had too many, by metric",
            folded.clone(),
        );
        let store = std::sync::Arc::new(ScrapeTime::default());
        registry.register_collector(Box::new(store.clone()));
        Metrics {
            registry,
            runs_started,
            runs_finished,
            node_duration,
            lease_takeovers,
            tokens,
            capability_denials,
            journal_bytes,
            folded,
            scraping: Mutex::new(()),
            store,
        }
    }

    pub fn run_started(&self, scenario: &str) {
        let labels = ScenarioLabels {
            scenario: label(scenario),
        };
        self.runs_started.with(&labels, &self.folded, |counter| {
            counter.inc();
        });
    }

    pub fn run_finished(&self, scenario: &str, status: &'static str) {
        let labels = FinishedLabels {
            scenario: label(scenario),
            status,
        };
        self.runs_finished.with(&labels, &self.folded, |counter| {
            counter.inc();
        });
    }

    pub fn node_finished(&self, scenario: &str, node: &str, seconds: f64) {
        let labels = NodeLabels {
            scenario: label(scenario),
            node: label(node),
        };
        self.node_duration.with(&labels, &self.folded, |histogram| {
            histogram.observe(seconds)
        });
    }

    pub fn tokens_used(&self, provider: &str, model: &str, input: u64, output: u64) {
        for (direction, tokens) in [("input", input), ("output", output)] {
            if tokens == 0 {
                continue;
            }
            let labels = TokenLabels {
                provider: label(provider),
                model: label(model),
                direction,
            };
            self.tokens.with(&labels, &self.folded, |counter| {
                counter.inc_by(tokens);
            });
        }
    }

    pub fn capability_denied(&self, capability: &str) {
        let labels = CapabilityLabels {
            capability: label(capability),
        };
        self.capability_denials
            .with(&labels, &self.folded, |counter| {
                counter.inc();
            });
    }

    pub fn lease_taken_over(&self) {
        self.lease_takeovers.inc();
    }

    pub fn journal_written(&self, bytes: u64) {
        self.journal_bytes.inc_by(bytes);
    }

    /// These metrics in `format`, with `store`'s gauges if given.
    pub fn render(&self, format: Format, store: Option<StoreGauges>) -> String {
        let _one_scrape = self.scraping.lock().unwrap_or_else(|e| e.into_inner());
        *self.store.gauges.lock().unwrap_or_else(|e| e.into_inner()) = store;
        let mut out = String::new();
        let encoded = match format {
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
            Format::Prometheus => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
        };
        if let Err(e) = encoded {
            // Writing to a String fails only if an encoder refuses a value;
            // say so in the answer rather than answer half of it silently.
            out.clear();
            let _ = writeln!(out, "# the metrics could not be encoded: {e}");
        }
        out
    }
}

/// A family that takes at most [`MAX_LABEL_SETS`] label sets.
struct Capped<S, M, C = fn() -> M> {
    name: &'static str,
    family: Family<S, M, C>,
    /// The label sets added (the folded ones aside), counted while one is
    /// added, so the count is never passed.
    added: Mutex<usize>,
}

impl<S, M, C> Capped<S, M, C>
where
    S: Fold + Clone + std::hash::Hash + Eq,
    C: prometheus_client::metrics::family::MetricConstructor<M>,
{
    fn new(name: &'static str, family: Family<S, M, C>) -> Self {
        Capped {
            name,
            family,
            added: Mutex::new(0),
        }
    }

    /// Applies `record` to the metric of `labels`, or of their folded set
    /// once the family is full (and counts the fold in `folded`).
    fn with(&self, labels: &S, folded: &Family<FoldedLabels, Counter>, record: impl FnOnce(&M)) {
        if let Some(metric) = self.family.get(labels) {
            record(&metric);
            return;
        }
        let mut added = self.added.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(metric) = self.family.get(labels) {
            drop(added);
            record(&metric);
            return;
        }
        if *added < MAX_LABEL_SETS {
            *added += 1;
            let metric = self.family.get_or_create(labels);
            drop(added);
            record(&metric);
            return;
        }
        drop(added);
        folded
            .get_or_create(&FoldedLabels { metric: self.name })
            .inc();
        record(&self.family.get_or_create(&labels.folded()));
    }
}

/// A label set with its untrusted values replaced by [`OTHER`].
trait Fold {
    fn folded(&self) -> Self;
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScenarioLabels {
    scenario: String,
}

impl Fold for ScenarioLabels {
    fn folded(&self) -> Self {
        ScenarioLabels {
            scenario: OTHER.into(),
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FinishedLabels {
    scenario: String,
    status: &'static str,
}

impl Fold for FinishedLabels {
    fn folded(&self) -> Self {
        FinishedLabels {
            scenario: OTHER.into(),
            status: self.status,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    scenario: String,
    node: String,
}

impl Fold for NodeLabels {
    fn folded(&self) -> Self {
        NodeLabels {
            scenario: OTHER.into(),
            node: OTHER.into(),
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    direction: &'static str,
}

impl Fold for TokenLabels {
    fn folded(&self) -> Self {
        TokenLabels {
            provider: OTHER.into(),
            model: OTHER.into(),
            direction: self.direction,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CapabilityLabels {
    capability: String,
}

impl Fold for CapabilityLabels {
    fn folded(&self) -> Self {
        CapabilityLabels {
            capability: OTHER.into(),
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FoldedLabels {
    metric: &'static str,
}

/// A label value: `value`, cut to [`MAX_LABEL_CHARS`] characters.
fn label(value: &str) -> String {
    match value.char_indices().nth(MAX_LABEL_CHARS) {
        Some((end, _)) => value[..end].to_owned(),
        None => value.to_owned(),
    }
}

/// What is encoded at scrape time: the store's gauges as the face read
/// them, and the spans the trace exporter dropped.
#[derive(Debug, Default)]
struct ScrapeTime {
    gauges: Mutex<Option<StoreGauges>>,
}

impl Collector for ScrapeTime {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let dropped = ConstCounter::new(crate::spans_dropped());
        dropped.encode(encoder.encode_descriptor(
            "skillhost_trace_spans_dropped",
            "Spans the trace exporter dropped (its queue full, an export failed, or still queued \
             at exit)",
            None,
            dropped.metric_type(),
        )?)?;
        let gauges = *self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        let Some(gauges) = gauges else {
            return Ok(());
        };
        let queued = ConstGauge::new(gauges.queued as i64);
        queued.encode(encoder.encode_descriptor(
            "skillhost_queue_depth",
            "Runs waiting in the queue for a worker (read from the store)",
            None,
            queued.metric_type(),
        )?)?;
        let age = ConstGauge::new(gauges.oldest_queued_age_seconds);
        age.encode(encoder.encode_descriptor(
            "skillhost_queue_oldest_age",
            "How long the run queued longest ago has waited (read from the store; 0 when none \
             is queued)",
            Some(&Unit::Seconds),
            age.metric_type(),
        )?)?;
        let waiting = ConstGauge::new(gauges.waiting as i64);
        waiting.encode(encoder.encode_descriptor(
            "skillhost_waits_open",
            "Runs waiting for an answer at an approval node (read from the store)",
            None,
            waiting.metric_type(),
        )?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The distinct label sets of `name`'s samples in `text`.
    fn series(text: &str, name: &str) -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.strip_prefix(name))
            .filter_map(|rest| rest.strip_prefix('{'))
            .map(|rest| {
                let labels = &rest[..rest.rfind('}').unwrap()];
                // A histogram's bucket bound is not the series' own label.
                labels.split(",le=").next().unwrap().to_string()
            })
            .collect()
    }

    #[test]
    fn names_units_and_labels_follow_prometheus_conventions() {
        let metrics = Metrics::new();
        metrics.run_started("research");
        metrics.run_finished("research", "completed");
        metrics.node_finished("research", "search", 0.002);
        metrics.tokens_used("local", "qwen", 10, 3);
        metrics.capability_denied("http");
        metrics.journal_written(120);
        metrics.lease_taken_over();
        let store = StoreGauges {
            queued: 2,
            oldest_queued_age_seconds: 1.5,
            waiting: 1,
        };
        let text = metrics.render(Format::Prometheus, Some(store));
        for sample in [
            "skillhost_runs_started_total{scenario=\"research\"} 1",
            "skillhost_runs_finished_total{scenario=\"research\",status=\"completed\"} 1",
            "skillhost_node_duration_seconds_count{scenario=\"research\",node=\"search\"} 1",
            "skillhost_node_duration_seconds_bucket{scenario=\"research\",node=\"search\",le=\"0.0025\"} 1",
            "skillhost_model_tokens_total{provider=\"local\",model=\"qwen\",direction=\"input\"} 10",
            "skillhost_model_tokens_total{provider=\"local\",model=\"qwen\",direction=\"output\"} 3",
            "skillhost_capability_denials_total{capability=\"http\"} 1",
            "skillhost_journal_bytes_total 120",
            "skillhost_lease_takeovers_total 1",
            "skillhost_trace_spans_dropped_total 0",
            "skillhost_queue_depth 2",
            "skillhost_queue_oldest_age_seconds 1.5",
            "skillhost_waits_open 1",
        ] {
            assert!(
                text.lines().any(|line| line == sample),
                "no `{sample}` in:\n{text}"
            );
        }
        let open = metrics.render(Format::OpenMetrics, None);
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(
            open.contains("# UNIT skillhost_node_duration_seconds seconds"),
            "{open}"
        );
        assert!(
            !open.contains("skillhost_queue_depth"),
            "no store, no gauges: {open}"
        );
    }

    #[test]
    fn label_sets_past_the_cap_fold_into_other_and_are_counted() {
        let metrics = Metrics::new();
        let flood = MAX_LABEL_SETS + 300;
        for i in 0..flood {
            metrics.node_finished("flood", &format!("node-{i}"), 0.01);
            metrics.run_finished(&format!("scenario-{i}"), "failed");
            metrics.run_finished(&format!("scenario-{i}"), "completed");
        }
        // Names seen before the cap still count as themselves.
        metrics.node_finished("flood", "node-0", 0.01);
        let text = metrics.render(Format::Prometheus, None);
        let nodes = series(&text, "skillhost_node_duration_seconds_count");
        assert_eq!(nodes.len(), MAX_LABEL_SETS + 1, "{nodes:?}");
        assert!(nodes.contains("scenario=\"other\",node=\"other\""));
        assert!(text.contains(
            "skillhost_node_duration_seconds_count{scenario=\"other\",node=\"other\"} 300\n"
        ));
        assert!(text.contains(
            "skillhost_node_duration_seconds_count{scenario=\"flood\",node=\"node-0\"} 2\n"
        ));
        assert!(text.contains(
            "skillhost_metric_label_sets_folded_total{metric=\"skillhost_node_duration_seconds\"} 300\n"
        ));
        // A fold keeps the status, a value the host chose.
        let finished = series(&text, "skillhost_runs_finished_total");
        assert!(finished.len() <= MAX_LABEL_SETS + 2, "{}", finished.len());
        assert!(finished.contains("scenario=\"other\",status=\"failed\""));
        assert!(finished.contains("scenario=\"other\",status=\"completed\""));
    }

    #[test]
    fn hostile_label_values_are_cut_and_escaped() {
        let metrics = Metrics::new();
        let long = "n".repeat(MAX_LABEL_CHARS * 4);
        metrics.node_finished("quote\"line\nback\\slash", &long, 0.5);
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let text = metrics.render(format, None);
            assert!(
                text.contains("scenario=\"quote\\\"line\\nback\\\\slash\""),
                "{text}"
            );
            let cut = format!("node=\"{}\"", "n".repeat(MAX_LABEL_CHARS));
            assert!(text.contains(&cut), "{text}");
            assert!(!text.contains(&format!("node=\"{}", "n".repeat(MAX_LABEL_CHARS + 1))));
            // One sample a line: nothing a name holds starts a line of its own.
            assert!(
                text.lines()
                    .all(|line| line.starts_with('#') || line.starts_with("skillhost_"))
            );
        }
    }

    #[test]
    fn the_scraper_chooses_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text;q=0")),
            Format::Prometheus
        );
    }

    #[test]
    fn recording_before_install_is_a_no_op() {
        // The process's set is not installed in this test binary unless a
        // test renders it; recording must not install it.
        if !installed() {
            node_finished("s", "n", 1.0);
            run_started("s");
            assert!(!installed());
        }
    }
}
