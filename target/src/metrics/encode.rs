//! A [`Snapshot`] as OpenMetrics text, through `prometheus-client`'s encoder.
//!
//! Cells are summed over poll groups here (the `group` dimension has its own
//! families), so a series is one (subsystem, namespace, host, port) and the number of
//! series does not grow with the groups. Subsystem, host or port totals are a
//! `sum by (...)` away in PromQL.
//!
//! Ownership: none kept; [`encode`] formats the snapshot it is handed, on the
//! control-plane thread that asked.

use std::collections::BTreeMap;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry as PromRegistry;

use crate::config::QOS_KEYS;
use nvmf_common::wire::status::Sct;

use super::cell::{bucket_bound_seconds, ClassSnapshot, CLASSES, CLASS_NAMES, CLASS_READ};
use super::cell::{CLASS_OTHER, CLASS_WRITE, ERROR_OVERFLOW};
use super::snapshot::Snapshot;
use super::Event;

/// Every family's name starts with this (`nvmf_commands_total`...).
pub const PREFIX: &str = "nvmf";
/// The content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const NS_PER_SEC: f64 = 1e9;
/// Milliseconds per second (command ages are kept in ms).
const MS_PER_SEC: f64 = 1e3;

type Labels = Vec<(&'static str, String)>;

/// (subsystem, nsid, host, portid)
type SeriesKey = (String, u32, String, u16);

#[derive(Default)]
struct Series {
    classes: Vec<ClassSnapshot>,
    errors: BTreeMap<u16, u64>,
}

/// Encodes `snap` as OpenMetrics text (ending with `# EOF`).
pub fn encode(snap: Snapshot) -> Result<String, std::fmt::Error> {
    let mut reg = PromRegistry::with_prefix(PREFIX);
    reg.register_collector(Box::new(SnapshotCollector(snap)));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg)?;
    Ok(out)
}

#[derive(Debug)]
struct SnapshotCollector(Snapshot);

fn io_labels(k: &SeriesKey) -> Labels {
    vec![
        ("subsystem", k.0.clone()),
        ("nsid", k.1.to_string()),
        ("host", k.2.clone()),
        ("port", k.3.to_string()),
    ]
}

fn sct_name(sct: Sct) -> &'static str {
    match sct {
        Sct::Generic => "generic",
        Sct::CommandSpecific => "command_specific",
        Sct::MediaError => "media_error",
        Sct::PathRelated => "path_related",
        Sct::VendorSpecific => "vendor_specific",
        Sct::Reserved(_) => "reserved",
    }
}

fn counter(e: &mut MetricEncoder<'_>, labels: &Labels, v: u64) -> std::fmt::Result {
    e.encode_family(labels)?
        .encode_counter::<NoLabelSet, u64, u64>(&v, None)
}

fn counter_f(e: &mut MetricEncoder<'_>, labels: &Labels, v: f64) -> std::fmt::Result {
    e.encode_family(labels)?
        .encode_counter::<NoLabelSet, f64, f64>(&v, None)
}

fn gauge(e: &mut MetricEncoder<'_>, labels: &Labels, v: u64) -> std::fmt::Result {
    e.encode_family(labels)?.encode_gauge(&v)
}

fn gauge_f(e: &mut MetricEncoder<'_>, labels: &Labels, v: f64) -> std::fmt::Result {
    e.encode_family(labels)?.encode_gauge(&v)
}

/// Reads and writes that name no namespace never happen (a failed one is charged to
/// the namespace its NSID names): such always-zero series of nsid 0 are left out
/// rather than printed for every host.
fn unused(k: &SeriesKey, class: usize, c: &ClassSnapshot) -> bool {
    k.1 == 0 && class != CLASS_OTHER && c.commands == 0
}

/// Counters of [`GroupCounters`](crate::runtime::GroupCounters) that are gauges.
const GROUP_GAUGES: [&str; 6] = [
    "queues",
    "buffers_in_use",
    "recv_buffer_bytes",
    "srq_receives_posted",
    "oldest_command_ms",
    "longest_command_ms",
];
/// Group counters exported in seconds rather than as raw nanoseconds.
const GROUP_NANOS: [&str; 2] = ["busy_ns", "idle_ns"];

impl SnapshotCollector {
    fn series(&self) -> BTreeMap<SeriesKey, Series> {
        let mut m: BTreeMap<SeriesKey, Series> = BTreeMap::new();
        for c in &self.0.cells {
            let k = &c.key;
            let s = m
                .entry((k.subsystem.clone(), k.nsid, k.host.clone(), k.portid))
                .or_default();
            if s.classes.len() < c.classes.len() {
                s.classes.resize(c.classes.len(), ClassSnapshot::default());
            }
            for (a, b) in s.classes.iter_mut().zip(&c.classes) {
                a.add(b);
            }
            for (st, n) in &c.errors {
                *s.errors.entry(*st).or_insert(0) += n;
            }
        }
        m
    }

    fn encode_io(&self, enc: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let series = self.series();
        let mut e = enc.encode_descriptor(
            "commands",
            "Commands answered, by opcode class (read, write, other).",
            None,
            MetricType::Counter,
        )?;
        for (k, s) in &series {
            for (class, c) in s.classes.iter().enumerate().take(CLASSES) {
                if unused(k, class, c) {
                    continue;
                }
                let mut l = io_labels(k);
                l.push((
                    "opcode",
                    CLASS_NAMES.get(class).unwrap_or(&"other").to_string(),
                ));
                counter(&mut e, &l, c.commands)?;
            }
        }
        let mut e = enc.encode_descriptor(
            "data_bytes",
            "Data bytes moved by successful commands, by opcode class.",
            None,
            MetricType::Counter,
        )?;
        for (k, s) in &series {
            for (class, c) in s.classes.iter().enumerate().take(CLASSES) {
                if unused(k, class, c) {
                    continue;
                }
                let mut l = io_labels(k);
                l.push((
                    "opcode",
                    CLASS_NAMES.get(class).unwrap_or(&"other").to_string(),
                ));
                counter(&mut e, &l, c.bytes)?;
            }
        }
        let mut e = enc.encode_descriptor(
            "errors",
            "Commands answered with an error status, by status code type and code.",
            None,
            MetricType::Counter,
        )?;
        for (k, s) in &series {
            for (st, n) in &s.errors {
                let mut l = io_labels(k);
                if *st == ERROR_OVERFLOW {
                    l.push(("sct", "other".into()));
                    l.push(("sc", "other".into()));
                } else {
                    l.push(("sct", sct_name(Sct::from_bits((st >> 8) as u8)).into()));
                    l.push(("sc", format!("0x{:02x}", st & 0xff)));
                }
                counter(&mut e, &l, *n)?;
            }
        }
        for (class, name, help) in [
            (
                CLASS_READ,
                "read_latency_seconds",
                "Read latency, capsule to response.",
            ),
            (
                CLASS_WRITE,
                "write_latency_seconds",
                "Write latency, capsule to response.",
            ),
        ] {
            let mut e = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for (k, s) in &series {
                let Some(c) = s.classes.get(class).filter(|c| !unused(k, class, c)) else {
                    continue;
                };
                let buckets: Vec<(f64, u64)> = c
                    .buckets
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (bucket_bound_seconds(i), *n))
                    .collect();
                let count = c.buckets.iter().sum();
                e.encode_family(&io_labels(k))?
                    .encode_histogram::<NoLabelSet>(
                        c.latency_ns as f64 / NS_PER_SEC,
                        count,
                        &buckets,
                        None,
                    )?;
            }
        }
        Ok(())
    }

    fn encode_controllers(&self, enc: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        // (subsystem, host, port) -> (controllers, I/O queues)
        let mut m: BTreeMap<(String, String, u16), (u64, u64)> = BTreeMap::new();
        for c in &self.0.controllers {
            let e = m
                .entry((c.subsystem.clone(), c.host.clone(), c.portid))
                .or_default();
            e.0 += 1;
            e.1 += c.io_queues as u64;
        }
        let labels = |k: &(String, String, u16)| -> Labels {
            vec![
                ("subsystem", k.0.clone()),
                ("host", k.1.clone()),
                ("port", k.2.to_string()),
            ]
        };
        let mut e = enc.encode_descriptor(
            "connections",
            "Live controllers (associations).",
            None,
            MetricType::Gauge,
        )?;
        for (k, v) in &m {
            gauge(&mut e, &labels(k), v.0)?;
        }
        let mut e = enc.encode_descriptor(
            "io_queues",
            "Connected I/O queues.",
            None,
            MetricType::Gauge,
        )?;
        for (k, v) in &m {
            gauge(&mut e, &labels(k), v.1)?;
        }
        for (event, name, help) in [
            (
                Event::KeepAliveExpired,
                "keep_alive_expiries",
                "Controllers ended by an expired keep-alive timer.",
            ),
            (
                Event::AuthFailed,
                "auth_failures",
                "Failed DH-HMAC-CHAP authentications.",
            ),
        ] {
            let mut e = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (k, n) in self.0.events.iter().filter(|(k, _)| k.event == event) {
                let l = vec![
                    ("subsystem", k.subsystem.clone()),
                    ("host", k.host.clone()),
                    ("port", k.portid.to_string()),
                ];
                counter(&mut e, &l, *n)?;
            }
        }
        Ok(())
    }

    fn encode_groups(&self, enc: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(first) = self.0.groups.first() else {
            return Ok(());
        };
        for (name, _) in first.counters.fields() {
            let (family, ty, help) = if GROUP_NANOS.contains(&name) {
                let base = name.trim_end_matches("_ns");
                (
                    format!("poll_group_{base}_seconds"),
                    MetricType::Counter,
                    format!("Poll-group time {base} (seconds)."),
                )
            } else if GROUP_GAUGES.contains(&name) {
                (
                    format!("poll_group_{name}"),
                    MetricType::Gauge,
                    format!("Poll-group gauge {name}."),
                )
            } else {
                (
                    format!("poll_group_{name}"),
                    MetricType::Counter,
                    format!("Poll-group counter {name}."),
                )
            };
            let mut e = enc.encode_descriptor(&family, &help, None, ty)?;
            for g in &self.0.groups {
                let v = g
                    .counters
                    .fields()
                    .into_iter()
                    .find(|(n, _)| *n == name)
                    .map_or(0, |(_, v)| v);
                let l = vec![("group", g.name.clone())];
                if GROUP_NANOS.contains(&name) {
                    counter_f(&mut e, &l, v as f64 / NS_PER_SEC)?;
                } else if GROUP_GAUGES.contains(&name) {
                    gauge(&mut e, &l, v)?;
                } else {
                    counter(&mut e, &l, v)?;
                }
            }
        }
        self.encode_command_watch(enc)
    }

    /// Time per request state, the oldest command per queue, and the commands
    /// outstanding past the stuck bound now.
    fn encode_command_watch(&self, enc: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let mut e = enc.encode_descriptor(
            "command_state_seconds",
            "Time commands spent in each request state (waiting for a buffer, for host data, executing, sending).",
            None,
            MetricType::Histogram,
        )?;
        for g in &self.0.groups {
            for h in &g.states {
                let buckets: Vec<(f64, u64)> = h
                    .buckets
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (bucket_bound_seconds(i), *n))
                    .collect();
                let l = vec![("group", g.name.clone()), ("state", h.state.clone())];
                e.encode_family(&l)?.encode_histogram::<NoLabelSet>(
                    h.sum_ns as f64 / NS_PER_SEC,
                    h.buckets.iter().sum(),
                    &buckets,
                    None,
                )?;
            }
        }
        let mut e = enc.encode_descriptor(
            "queue_oldest_command_seconds",
            "Age of the oldest outstanding command of each queue that has one (AERs not counted).",
            None,
            MetricType::Gauge,
        )?;
        for g in &self.0.groups {
            for q in &g.watch.queues {
                let l = vec![
                    ("subsystem", q.subsystem.clone()),
                    ("host", q.host.clone()),
                    ("cntlid", q.cntlid.to_string()),
                    ("qid", q.qid.to_string()),
                    ("group", q.group.clone()),
                ];
                e.encode_family(&l)?
                    .encode_gauge(&(q.oldest_ms as f64 / MS_PER_SEC))?;
            }
        }
        let mut e = enc.encode_descriptor(
            "stuck_commands_outstanding",
            "Commands outstanding longer than transport.stuck_command_ms now.",
            None,
            MetricType::Gauge,
        )?;
        for g in &self.0.groups {
            gauge(
                &mut e,
                &vec![("group", g.name.clone())],
                g.watch.stuck.len() as u64,
            )?;
        }
        Ok(())
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> std::fmt::Result {
        self.encode_io(&mut enc)?;
        self.encode_controllers(&mut enc)?;
        self.encode_qos(&mut enc)?;
        self.encode_gateway_group(&mut enc)?;
        self.encode_groups(&mut enc)
    }
}

impl SnapshotCollector {
    /// Per-namespace QoS: limits, time and commands held, commands held now.
    fn encode_qos(&self, enc: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        if self.0.qos.is_empty() {
            return Ok(());
        }
        let ns_labels = |q: &super::snapshot::QosRow| -> Labels {
            vec![
                ("subsystem", q.subsystem.clone()),
                ("nsid", q.nsid.to_string()),
            ]
        };
        let mut e = enc.encode_descriptor(
            "namespace_qos_limit",
            "QoS limit of a namespace (per second; 0: unlimited).",
            None,
            MetricType::Gauge,
        )?;
        for q in &self.0.qos {
            for (key, v) in QOS_KEYS.iter().zip(q.stats.limits.as_array()) {
                let mut l = ns_labels(q);
                l.push(("limit", (*key).to_string()));
                gauge(&mut e, &l, v)?;
            }
        }
        let mut e = enc.encode_descriptor(
            "namespace_qos_throttled_seconds",
            "Time commands of the namespace spent held for its QoS limits, summed over commands.",
            None,
            MetricType::Counter,
        )?;
        for q in &self.0.qos {
            counter_f(
                &mut e,
                &ns_labels(q),
                q.stats.throttled_ns as f64 / NS_PER_SEC,
            )?;
        }
        let mut e = enc.encode_descriptor(
            "namespace_qos_throttled_commands",
            "Commands of the namespace held for its QoS limits.",
            None,
            MetricType::Counter,
        )?;
        for q in &self.0.qos {
            counter(&mut e, &ns_labels(q), q.stats.throttled_commands)?;
        }
        let mut e = enc.encode_descriptor(
            "namespace_qos_queued_commands",
            "Commands of the namespace held for its QoS limits now.",
            None,
            MetricType::Gauge,
        )?;
        for q in &self.0.qos {
            gauge(&mut e, &ns_labels(q), q.stats.queued)?;
        }
        Ok(())
    }
}

impl SnapshotCollector {
    /// The gateway group: membership, ANA groups owned, failovers and failbacks.
    fn encode_gateway_group(&self, enc: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(g) = &self.0.gateway_group else {
            return Ok(());
        };
        let who: Labels = vec![("group", g.group.clone()), ("gateway", g.gateway.clone())];
        let mut e = enc.encode_descriptor(
            "gateway_group_version",
            "The gateway group's configuration version in force on this gateway.",
            None,
            MetricType::Gauge,
        )?;
        gauge(&mut e, &who, g.version)?;
        let mut e = enc.encode_descriptor(
            "gateway_group_ana_owned",
            "1 where this gateway holds the ANA group's lease (reports it optimized).",
            None,
            MetricType::Gauge,
        )?;
        for (grpid, owned) in &g.ana_groups {
            let mut l = who.clone();
            l.push(("grpid", grpid.to_string()));
            gauge(&mut e, &l, u64::from(*owned))?;
        }
        let mut e = enc.encode_descriptor(
            "gateway_group_fenced",
            "1 when this gateway's RADOS client is fenced (it serves nothing of the group).",
            None,
            MetricType::Gauge,
        )?;
        gauge(&mut e, &who, u64::from(g.fenced))?;
        for (name, help, v) in [
            (
                "gateway_group_takeovers",
                "ANA groups this gateway took from a gateway that fell silent.",
                g.takeovers,
            ),
            (
                "gateway_group_failbacks",
                "ANA groups this gateway gave back to their home gateway.",
                g.releases,
            ),
            (
                "gateway_group_lease_losses",
                "ANA group leases this gateway lost.",
                g.losses,
            ),
        ] {
            let mut e = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            counter(&mut e, &who, v)?;
        }
        let mut e = enc.encode_descriptor(
            "gateway_group_last_takeover_silence_seconds",
            "How long the gateway whose ANA group this gateway last took had been silent.",
            None,
            MetricType::Gauge,
        )?;
        gauge_f(&mut e, &who, g.last_takeover_silent_ms as f64 / MS_PER_SEC)
    }
}
