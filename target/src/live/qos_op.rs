//! `set-qos`: a namespace's QoS limits, changed live (see [`crate::qos`]).

use crate::config::{Config, QosConfig, QOS_KEYS, QOS_MAX_BYTES_PER_SEC, QOS_MAX_IOS_PER_SEC};
use nvmf_common::types::{Nqn, Nsid};

use super::op::Op;
use super::refusal::Refusal;

/// The op's field names, in [`QOS_KEYS`] order.
const OP_FIELDS: [&str; 6] = ["rw_ios", "r_ios", "w_ios", "rw_bytes", "r_bytes", "w_bytes"];

/// Applies a [`Op::SetQos`] to `cfg`: limits given replace the namespace's, the others
/// stay.
pub(super) fn set_qos(cfg: &mut Config, op: &Op) -> Result<(), Refusal> {
    let Op::SetQos {
        nqn,
        nsid,
        rw_ios,
        r_ios,
        w_ios,
        rw_bytes,
        r_bytes,
        w_bytes,
    } = op
    else {
        return Ok(());
    };
    let given = [*rw_ios, *r_ios, *w_ios, *rw_bytes, *r_bytes, *w_bytes];
    if given.iter().all(Option::is_none) {
        return Err(Refusal::invalid(
            "rw_ios",
            "nothing to set: give at least one of --rw-ios, --r-ios, --w-ios, --rw-bytes, --r-bytes, --w-bytes (0 = unlimited)",
        ));
    }
    for (i, (field, v)) in OP_FIELDS.iter().zip(given).enumerate() {
        let max = if i < 3 {
            QOS_MAX_IOS_PER_SEC
        } else {
            QOS_MAX_BYTES_PER_SEC
        };
        if let Some(v) = v.filter(|v| *v > max) {
            return Err(Refusal::invalid(
                field,
                format!("{v} is out of range: must be 0 (unlimited) to {max}"),
            ));
        }
    }
    let key = Nqn::new(nqn.clone()).map_err(|e| Refusal::invalid("nqn", e))?;
    let Some(sub) = cfg.subsystems.iter_mut().find(|s| s.nqn == key) else {
        return Err(Refusal::not_found(format!("no subsystem {nqn}")));
    };
    let Some(ns) = sub.namespaces.iter_mut().find(|n| n.nsid == Nsid(*nsid)) else {
        return Err(Refusal::not_found(format!(
            "subsystem {nqn} has no namespace {nsid}"
        )));
    };
    let mut limits = ns.qos.as_array();
    for (l, v) in limits.iter_mut().zip(given) {
        if let Some(v) = v {
            *l = v;
        }
    }
    ns.qos = QosConfig::from_array(limits);
    Ok(())
}

/// `rw_ios_per_sec=1000, ...` or `unlimited`.
pub(super) fn describe(q: &QosConfig) -> String {
    let set: Vec<String> = QOS_KEYS
        .iter()
        .zip(q.as_array())
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if set.is_empty() {
        "unlimited".into()
    } else {
        set.join(", ")
    }
}
