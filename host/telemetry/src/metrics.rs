//! Metrics in Prometheus' text format: see the helper's task (to be written).
