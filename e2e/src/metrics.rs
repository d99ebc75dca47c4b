//! What the benchmark (`operator-scale`) measures: the API server's request counters, a
//! process's memory and CPU, and quantiles.
use std::collections::BTreeMap;

/// `apiserver_request_total` summed by (verb, group, resource, subresource), over every
/// response code, scope and version: what an API server's `/metrics` says it was asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestTotals(pub BTreeMap<RequestKey, f64>);

/// A request kind of `apiserver_request_total`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// `POST`, `PUT`, `PATCH`, `APPLY` (a server-side apply), `DELETE`, `DELETECOLLECTION`,
    /// `GET`, `LIST`, `WATCH`…
    pub verb: String,
    /// API group (`""` for the core group).
    pub group: String,
    /// `pods`, `inferencejobs`, `events`…
    pub resource: String,
    /// `status`, `binding`… (`""` for the object itself).
    pub subresource: String,
}

/// The verbs that write.
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

impl RequestTotals {
    /// Reads the `apiserver_request_total` samples of a Prometheus text exposition.
    pub fn parse(text: &str) -> Self {
        Self::parse_metric(text, "apiserver_request_total")
    }

    /// Reads the samples of `metric` (a counter with the labels of `apiserver_request_total`,
    /// e.g. `apiserver_request_duration_seconds_sum`).
    pub fn parse_metric(text: &str, metric: &str) -> Self {
        let prefix = format!("{metric}{{");
        let mut totals = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(prefix.as_str()) else {
                continue;
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let labels = prometheus_labels(labels);
            let get = |name: &str| labels.get(name).cloned().unwrap_or_default();
            let key = RequestKey {
                verb: get("verb"),
                group: get("group"),
                resource: get("resource"),
                subresource: get("subresource"),
            };
            *totals.entry(key).or_insert(0.0) += value;
        }
        Self(totals)
    }

    /// What was asked between `before` and `self` (counters only grow; a key missing before
    /// counts from zero).
    pub fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(key, after)| {
                    let was = before.0.get(key).copied().unwrap_or(0.0);
                    (key.clone(), (after - was).max(0.0))
                })
                .filter(|(_, delta)| *delta > 0.0)
                .collect(),
        )
    }

    /// Requests with one of `verbs` on `resource` (any group) and `subresource`.
    pub fn count(&self, verbs: &[&str], resource: &str, subresource: &str) -> u64 {
        self.sum(verbs, resource, subresource).round() as u64
    }

    /// The sum over requests with one of `verbs` on `resource` and `subresource`, unrounded
    /// (seconds, for a duration sum).
    pub fn sum(&self, verbs: &[&str], resource: &str, subresource: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| {
                verbs.contains(&k.verb.as_str())
                    && k.resource == resource
                    && k.subresource == subresource
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// Every write (any resource).
    pub fn writes(&self) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| WRITE_VERBS.contains(&k.verb.as_str()))
            .map(|(_, v)| *v)
            .sum::<f64>()
            .round() as u64
    }
}

/// `a="x",b="y"` → {a: x, b: y} (values unescaped).
fn prometheus_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        value.push(match escaped {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    labels
}

/// The value of a counter or gauge `name` (no labels) in a Prometheus text exposition.
pub fn prometheus_value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let (metric, value) = line.split_once(' ')?;
        (metric == name).then(|| value.trim().parse().ok())?
    })
}

/// A field of `/proc/<pid>/status` in KiB (`VmHWM`, `VmRSS`), on Linux.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat` (Linux, 100 ticks
/// per second).
pub fn proc_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15 of the line: 11 and 12 (from 0) after the name.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// The `p` quantile (0..=1) of sorted `values` (nearest rank); `None` when empty.
pub fn quantile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_totals_are_summed_by_kind_and_diffed() {
        let before = RequestTotals::parse(
            "# HELP apiserver_request_total x\n\
             apiserver_request_total{code=\"201\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 10\n\
             apiserver_request_total{code=\"409\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"pods\",scope=\"resource\",subresource=\"\",verb=\"POST\",version=\"v1\"} 2\n\
             apiserver_request_total{code=\"200\",group=\"vramfit.io\",resource=\"inferencejobs\",subresource=\"status\",verb=\"APPLY\",version=\"v1alpha1\"} 3\n\
             apiserver_request_duration_seconds_count{verb=\"POST\"} 99\n",
        );
        assert_eq!(before.count(&["POST"], "pods", ""), 12);
        assert_eq!(before.count(&WRITE_VERBS, "inferencejobs", "status"), 3);
        assert_eq!(before.count(&WRITE_VERBS, "inferencejobs", ""), 0);
        let after = RequestTotals::parse(
            "apiserver_request_total{code=\"201\",group=\"\",resource=\"pods\",subresource=\"\",verb=\"POST\",version=\"v1\"} 15\n\
             apiserver_request_total{code=\"409\",group=\"\",resource=\"pods\",subresource=\"\",verb=\"POST\",version=\"v1\"} 2\n\
             apiserver_request_total{code=\"200\",group=\"vramfit.io\",resource=\"inferencejobs\",subresource=\"status\",verb=\"APPLY\",version=\"v1alpha1\"} 3\n\
             apiserver_request_total{code=\"201\",group=\"\",resource=\"pods\",subresource=\"binding\",verb=\"POST\",version=\"v1\"} 4\n\
             apiserver_request_total{code=\"200\",group=\"\",resource=\"pods\",subresource=\"\",verb=\"LIST\",version=\"v1\"} 7\n",
        );
        let delta = after.since(&before);
        assert_eq!(delta.count(&["POST"], "pods", ""), 5);
        assert_eq!(delta.count(&["POST"], "pods", "binding"), 4);
        assert_eq!(delta.count(&WRITE_VERBS, "inferencejobs", "status"), 0);
        assert_eq!(delta.writes(), 9, "LIST is not a write");
    }
    #[test]
    fn prometheus_labels_unescape_values() {
        let labels = prometheus_labels(r#"a="x",b="say \"hi\"",c="""#);
        assert_eq!(labels["a"], "x");
        assert_eq!(labels["b"], "say \"hi\"");
        assert_eq!(labels["c"], "");
        let text = "vramfit_reconcile_duration_seconds_count 42\nvramfit_x{a=\"b\"} 1\n";
        assert_eq!(
            prometheus_value(text, "vramfit_reconcile_duration_seconds_count"),
            Some(42.0)
        );
        assert_eq!(prometheus_value(text, "vramfit_x"), None);
    }
    #[test]
    fn quantiles_use_the_nearest_rank() {
        let values: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&values, 0.5), Some(50));
        assert_eq!(quantile(&values, 0.99), Some(99));
        assert_eq!(quantile(&values, 1.0), Some(100));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }
    #[test]
    fn proc_status_fields_are_read_in_kib() {
        let pid = std::process::id();
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(proc_status_kib(pid, "VmHWM").unwrap_or(0) > 0);
            assert!(proc_status_kib(pid, "VmRSS").unwrap_or(0) > 0);
        }
        assert_eq!(proc_status_kib(pid, "NoSuchField"), None);
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(proc_cpu_seconds(pid).is_some());
        }
    }
}
