//! Log pages that describe the controller itself: Supported Log Pages (LID 00h),
//! Feature Identifiers Supported and Effects (LID 12h), NVMe-MI Commands Supported and
//! Effects (LID 13h), and the SMART / Health Information log (LID 02h) with the
//! namespaces' real read and write counts.
//!
//! What LID 00h lists and what Get Log Page serves come from one table per controller
//! kind ([`NVM_LOGS`], [`DISCOVERY_LOGS`]), and what LID 12h lists and what Get
//! Features accepts from one feature table ([`FEATURES`]), so neither can claim a page
//! or a feature the controller refuses.

use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::fid;
use nvmf_common::wire::log::{lid, SmartLog, SMART_LOG_LEN};
use nvmf_common::wire::status::Status;
use nvmf_common::wire::supported::{
    fis, lids, scope, FeaturesSupported, SupportedLogs, FEATURES_SUPPORTED_LEN, MI_CMD_EFFECTS_LEN,
    SUPPORTED_LOGS_LEN,
};

use crate::controller::Controller;
use crate::target::Target;

/// The log pages an NVM (I/O) controller serves. No entry sets IOS: no log page here
/// takes an index offset (Get Log Page with OT set is refused, see `serve_log`).
pub(super) const NVM_LOGS: [u8; 10] = [
    lid::SUPPORTED_LOGS,
    lid::ERROR_INFO,
    lid::SMART,
    lid::FW_SLOT,
    lid::CHANGED_NS,
    lid::CMD_EFFECTS,
    lid::ANA,
    lid::FEATURES_SUPPORTED,
    lid::MI_CMD_EFFECTS,
    lid::RESERVATION_NOTIFICATION,
];

/// The log pages a discovery controller serves (SPDK's discovery set; nvmet's serves
/// only the discovery log). No extended discovery log entries, so LIDSP of 70h is 0.
pub(super) const DISCOVERY_LOGS: [u8; 3] =
    [lid::SUPPORTED_LOGS, lid::FEATURES_SUPPORTED, lid::DISCOVERY];

/// One feature Get Features and Set Features serve.
struct Feature {
    fid: u8,
    /// Its scope (FSP): what one Set Features changes.
    scope: u32,
    /// Served by a discovery controller too.
    discovery: bool,
}

/// Every feature this target serves. No Set Features here changes user data,
/// namespace capabilities or inventory, or controller capabilities (UDCC, NCC, NIC and
/// CCC clear), and none takes a UUID index (USS clear). Number of Queues, Keep Alive
/// Timer, Asynchronous Event Configuration, Volatile Write Cache and Host Identifier
/// belong to one controller; the reservation features to a namespace (nvmet and SPDK
/// report the same scopes).
const FEATURES: [Feature; 7] = [
    Feature {
        fid: fid::VOLATILE_WRITE_CACHE,
        scope: scope::CONTROLLER,
        discovery: false,
    },
    Feature {
        fid: fid::NUMBER_OF_QUEUES,
        scope: scope::CONTROLLER,
        discovery: false,
    },
    Feature {
        fid: fid::ASYNC_EVENT_CONFIG,
        scope: scope::CONTROLLER,
        discovery: true,
    },
    Feature {
        fid: fid::KEEP_ALIVE_TIMER,
        scope: scope::CONTROLLER,
        discovery: true,
    },
    // Get Features only: on fabrics Connect sets it (Set Features is a Command
    // Sequence Error, as in nvmet).
    Feature {
        fid: fid::HOST_IDENTIFIER,
        scope: scope::CONTROLLER,
        discovery: false,
    },
    Feature {
        fid: fid::RESERVATION_NOTIFICATION_MASK,
        scope: scope::NAMESPACE,
        discovery: false,
    },
    Feature {
        fid: fid::RESERVATION_PERSISTENCE,
        scope: scope::NAMESPACE,
        discovery: false,
    },
];

/// Whether `ctrl` serves log page `lid_v`.
pub(super) fn log_served(ctrl: &Controller, lid_v: u8) -> bool {
    if ctrl.subsys.is_discovery() {
        DISCOVERY_LOGS.contains(&lid_v)
    } else {
        NVM_LOGS.contains(&lid_v)
    }
}

/// Whether Get Features serves feature `f` on a (discovery or NVM) controller.
pub(super) fn feature_served(f: u8, discovery: bool) -> bool {
    FEATURES
        .iter()
        .any(|x| x.fid == f && (x.discovery || !discovery))
}

/// The Supported Log Pages log page (LID 00h) of `ctrl`.
pub(super) fn supported_logs(ctrl: &Controller) -> Vec<u8> {
    let mut page = vec![0u8; SUPPORTED_LOGS_LEN];
    let mut l = SupportedLogs::new_unchecked(&mut page[..]);
    let served: &[u8] = if ctrl.subsys.is_discovery() {
        &DISCOVERY_LOGS
    } else {
        &NVM_LOGS
    };
    for &id in served {
        l.set_lid(id, lids::LSUPP);
    }
    page
}

/// The Feature Identifiers Supported and Effects log page (LID 12h) of `ctrl`.
pub(super) fn features_supported(ctrl: &Controller) -> Vec<u8> {
    let discovery = ctrl.subsys.is_discovery();
    let mut page = vec![0u8; FEATURES_SUPPORTED_LEN];
    let mut f = FeaturesSupported::new_unchecked(&mut page[..]);
    for x in FEATURES.iter().filter(|x| x.discovery || !discovery) {
        f.set_fid(x.fid, fis::FSUPP | x.scope);
    }
    page
}

/// The NVMe-MI Commands Supported and Effects log page (LID 13h): all zero, no NVMe-MI
/// command is supported through NVMe-MI Send / Receive (SPDK serves it the same way,
/// for LPA bit 5).
pub(super) fn mi_cmd_effects() -> Vec<u8> {
    vec![0u8; MI_CMD_EFFECTS_LEN]
}

/// Bytes in one SMART data unit: a thousand 512-byte units.
const DATA_UNIT_BYTES: u128 = 512 * 1000;
/// Available spare and its threshold, percent; composite temperature, kelvins (27 C).
const AVAIL_SPARE_PCT: u8 = 100;
const SPARE_THRESH_PCT: u8 = 10;
const TEMPERATURE_K: u16 = 300;

/// The SMART / Health Information log page for `nsid` as `ctrl` asks for it: one
/// namespace (any NSID of an active namespace its host sees; LPA bit 0), or the
/// controller (0 or FFFFFFFFh): the namespaces its host sees.
///
/// Counts are each namespace's, over every host, port and poll group: nvmet reports
/// the block device's own counters (all its users, the target's and any other; zeros
/// for a file-backed namespace), SPDK reports an all-zero page. We report what the
/// target did on the namespace, for every backend. Host Read / Write Commands count
/// NVM Read and Write commands completed, successfully or not; Data Units count the
/// bytes of successful ones, in thousands of 512-byte units rounded up (summed over
/// the namespaces first, nvmet rounds each namespace up and adds). Compare and Verify
/// read blocks too, but the metrics count them among the "other" commands, so they are
/// not in Data Units Read or Host Read Commands.
pub(super) fn smart_log(ctrl: &Controller, target: &Target, nsid: u32) -> Result<Vec<u8>, Status> {
    let nsids = if nsid == 0 || nsid == Nsid::BROADCAST.0 {
        ctrl.active_nsids()
    } else {
        vec![super::find_ns(ctrl, nsid)?.nsid.0]
    };
    let t = target
        .metrics
        .io_totals(&ctrl.subsys.nqn.to_string(), &nsids);
    let mut page = vec![0u8; SMART_LOG_LEN];
    let mut s = SmartLog::new_unchecked(&mut page[..]);
    // A healthy device: all spare left, nothing used up, room temperature.
    s.set_avail_spare(AVAIL_SPARE_PCT);
    s.set_spare_thresh(SPARE_THRESH_PCT);
    s.set_temperature(TEMPERATURE_K);
    s.set_data_units_read(t.read_bytes.div_ceil(DATA_UNIT_BYTES));
    s.set_data_units_written(t.write_bytes.div_ceil(DATA_UNIT_BYTES));
    s.set_host_reads(t.read_commands);
    s.set_host_writes(t.write_commands);
    // The Error Information log's newest error count (nvmet reports the same).
    let errors = ctrl.errors().first().map_or(0, |e| e.error_count);
    s.set_num_err_log_entries(u128::from(errors));
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_no_duplicates_and_discovery_is_a_subset_of_features() {
        let mut l = NVM_LOGS.to_vec();
        l.sort_unstable();
        l.dedup();
        assert_eq!(l.len(), NVM_LOGS.len());
        let mut f: Vec<u8> = FEATURES.iter().map(|x| x.fid).collect();
        f.sort_unstable();
        f.dedup();
        assert_eq!(f.len(), FEATURES.len());
        assert!(feature_served(fid::KEEP_ALIVE_TIMER, true));
        assert!(!feature_served(fid::NUMBER_OF_QUEUES, true));
        assert!(feature_served(fid::NUMBER_OF_QUEUES, false));
        assert!(!feature_served(fid::ARBITRATION, false));
        assert!(FEATURES.iter().all(|x| x.scope & !fis::FSP_MASK == 0));
    }

    #[test]
    fn data_units_round_up() {
        assert_eq!(0u128.div_ceil(DATA_UNIT_BYTES), 0);
        assert_eq!(1u128.div_ceil(DATA_UNIT_BYTES), 1);
        assert_eq!(512_000u128.div_ceil(DATA_UNIT_BYTES), 1);
        assert_eq!(512_001u128.div_ceil(DATA_UNIT_BYTES), 2);
    }
}
