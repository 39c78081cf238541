//! The `_stats` tree under CouchDB's Prometheus names (as its `couch_prometheus` converts
//! them), encoded by `prometheus`'s text encoder.

use crate::{Stat, Val};
use prometheus::proto::{
    Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary,
};
use prometheus::{Encoder, TextEncoder};

/// One of Settee's own series: `settee_…`, a counter or a gauge.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub help: String,
    pub counter: bool,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn counter(name: &str, help: &str, value: f64) -> Sample {
        Sample {
            name: name.into(),
            help: help.into(),
            counter: true,
            labels: Vec::new(),
            value,
        }
    }

    pub fn gauge(name: &str, help: &str, value: f64) -> Sample {
        Sample {
            counter: false,
            ..Sample::counter(name, help, value)
        }
    }

    pub fn with_label(mut self, name: &str, value: &str) -> Sample {
        self.labels.push((name.into(), value.into()));
        self
    }
}

#[derive(Default)]
struct Families(Vec<MetricFamily>);

impl Families {
    /// Adds `metric` to the family `name`, creating it (with its help and type) first.
    fn add(&mut self, name: &str, help: &str, kind: MetricType, metric: Metric) {
        let i = match self.0.iter().position(|f| f.name() == name) {
            Some(i) => i,
            None => {
                let mut f = MetricFamily::default();
                f.set_name(name.into());
                f.set_help(help.into());
                f.set_field_type(kind);
                self.0.push(f);
                self.0.len() - 1
            }
        };
        self.0[i].mut_metric().push(metric);
    }
}

fn labelled(labels: &[(&str, &str)]) -> Metric {
    let mut m = Metric::default();
    m.set_label(
        labels
            .iter()
            .map(|(k, v)| {
                let mut l = LabelPair::default();
                l.set_name(k.to_string());
                l.set_value(v.to_string());
                l
            })
            .collect(),
    );
    m
}

fn counter(labels: &[(&str, &str)], v: f64) -> Metric {
    let mut m = labelled(labels);
    let mut c = Counter::default();
    c.set_value(v);
    m.set_counter(c);
    m
}

fn gauge(labels: &[(&str, &str)], v: f64) -> Metric {
    let mut m = labelled(labels);
    let mut g = Gauge::default();
    g.set_value(v);
    m.set_gauge(g);
    m
}

/// Milliseconds as seconds, to the nanosecond (without binary fractions' noise digits).
fn seconds(ms: f64) -> f64 {
    (ms * 1e6).round() / 1e9
}

/// A histogram of milliseconds as a summary in seconds.
fn summary(h: &crate::Summary) -> Metric {
    let mut s = Summary::default();
    s.set_sample_count(h.n);
    s.set_sample_sum(seconds(h.mean * h.n as f64));
    s.set_quantile(
        h.percentiles
            .iter()
            .map(|&(p, v)| {
                let mut q = Quantile::default();
                q.set_quantile(if p == 999 { 0.999 } else { p as f64 / 100.0 });
                q.set_value(seconds(v));
                q
            })
            .collect(),
    );
    let mut m = Metric::default();
    m.set_summary(s);
    m
}

/// One statistic's samples (`all`: every statistic, for those CouchDB sums).
fn stat(f: &mut Families, s: &Stat, all: &[&Stat]) {
    let path: Vec<&str> = s.path.iter().map(String::as_str).collect();
    let value = |s: &Stat| match s.val {
        Val::Counter(v) => v as f64,
        Val::Gauge(v) => v as f64,
        Val::Histogram(_) => 0.0,
    };
    match path.as_slice() {
        ["couchdb", "httpd_request_methods", method] => f.add(
            "couchdb_httpd_request_methods",
            "number of HTTP requests by method",
            MetricType::COUNTER,
            counter(&[("method", method)], value(s)),
        ),
        ["couch_log", "level", level] => f.add(
            "couchdb_couch_log_requests_total",
            "number of logged messages",
            MetricType::COUNTER,
            counter(&[("level", level)], value(s)),
        ),
        // CouchDB's `couch_prometheus_util` shows the cache's lookups, hits and misses
        // together, not its hits.
        ["couchdb", "auth_cache_hits"] => {
            let misses = (all.iter())
                .find(|o| o.path == ["couchdb", "auth_cache_misses"])
                .map_or(0.0, |o| value(o));
            f.add(
                "couchdb_auth_cache_requests_total",
                "number of authentication cache requests",
                MetricType::COUNTER,
                counter(&[], value(s) + misses),
            )
        }
        ["couchdb", "httpd_status_codes", code] => f.add(
            "couchdb_httpd_status_codes",
            "number of HTTP responses by status code",
            MetricType::COUNTER,
            counter(&[("code", code)], value(s)),
        ),
        rest => {
            let rest = match rest {
                ["couchdb", rest @ ..] => rest,
                rest => rest,
            };
            let base = format!("couchdb_{}", rest.join("_"));
            match &s.val {
                Val::Counter(v) => {
                    let name = if base.ends_with("_total") {
                        base
                    } else {
                        format!("{base}_total")
                    };
                    f.add(&name, s.desc, MetricType::COUNTER, counter(&[], *v as f64))
                }
                Val::Gauge(v) => f.add(&base, s.desc, MetricType::GAUGE, gauge(&[], *v as f64)),
                Val::Histogram(h) => f.add(
                    &format!("{base}_seconds"),
                    s.desc,
                    MetricType::SUMMARY,
                    summary(h),
                ),
            }
        }
    }
}

pub(crate) fn render(stats: &[Stat], own: &[Sample]) -> String {
    let mut f = Families::default();
    let mut stats: Vec<&Stat> = stats.iter().collect();
    stats.sort_by(|a, b| a.path.cmp(&b.path));
    for s in &stats {
        stat(&mut f, s, &stats);
    }
    for s in own {
        let labels: Vec<(&str, &str)> = s
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (kind, metric) = if s.counter {
            (MetricType::COUNTER, counter(&labels, s.value))
        } else {
            (MetricType::GAUGE, gauge(&labels, s.value))
        };
        f.add(&s.name, &s.help, kind, metric);
    }
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&f.0, &mut out)
        .expect("every family has a name and a metric");
    String::from_utf8(out).expect("the encoder writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Live, Metrics};

    #[test]
    fn couchdb_names() {
        let m = Metrics::new();
        m.request("GET", 200, 3.0);
        m.document_writes.inc();
        m.auth_cache_hits.inc_by(2);
        m.auth_cache_misses.inc();
        let text = m.prometheus(
            Live {
                open_databases: 2,
                open_os_files: 9,
                ..Live::default()
            },
            &[Sample::gauge("settee_x", "an x", 1.5)],
        );
        for line in [
            "# TYPE couchdb_httpd_request_methods counter",
            "couchdb_httpd_request_methods{method=\"GET\"} 1",
            "couchdb_httpd_status_codes{code=\"200\"} 1",
            "# TYPE couchdb_document_writes_total counter",
            "couchdb_document_writes_total 1",
            "# TYPE couchdb_open_databases gauge",
            "couchdb_open_databases 2",
            "# TYPE couchdb_request_time_seconds summary",
            "couchdb_request_time_seconds_count 1",
            "couchdb_mango_query_time_seconds_count 0",
            "couchdb_couch_log_requests_total{level=\"notice\"} 0",
            "couchdb_couch_replicator_jobs_adds_total 0",
            "# HELP couchdb_auth_cache_requests_total number of authentication cache requests",
            "couchdb_auth_cache_requests_total 3",
            "# HELP couchdb_auth_cache_misses_total number of authentication cache misses",
            "couchdb_auth_cache_misses_total 1",
            "# TYPE couchdb_couch_replicator_jobs_running gauge",
            "settee_x 1.5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // 1% resolution.
        let p50 = text
            .lines()
            .find_map(|l| l.strip_prefix("couchdb_request_time_seconds{quantile=\"0.5\"} "))
            .unwrap();
        assert!(
            (p50.parse::<f64>().unwrap() - 0.003).abs() < 0.00005,
            "{p50}"
        );
    }
}
