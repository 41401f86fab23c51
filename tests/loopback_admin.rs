//! Controller behaviour over loopback: keep-alive expiry, asynchronous events and the
//! Changed Namespace List, discovery with access control, SQ head reporting, the log
//! pages that describe the controller (LIDs 00h, 12h, 13h, SMART counts), CRTO.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid, DISCOVERY_NQN};
use nvmf_common::wire::admin::{self, aer_notice, aer_type};
use nvmf_common::wire::fabrics::reg;
use nvmf_common::wire::identify::{lpa, IdentifyController};
use nvmf_common::wire::log::{lid, subtype, trtype};
use nvmf_common::wire::status::{cmd_specific, generic, Sct};
use nvmf_common::wire::supported::{
    fis, lids, scope, FeaturesSupported, SupportedLogs, FEATURES_SUPPORTED_LEN, MI_CMD_EFFECTS_LEN,
    SUPPORTED_LOGS_LEN,
};
use nvmf_initiator::command;
use nvmf_initiator::discovery::discover;
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::DataDir;
use nvmf_target::backend::ram::RamBackend;
use nvmf_target::subsystem::Namespace;
use nvmf_tests::{config, connect, exec, hostnqn, raw_queue, start, Env, TEST_HOSTID};

fn admin_connect(env: &Env, kato_ms: u32) -> nvmf_initiator::queue::Queue {
    admin_connect_to(env, &env.nqn, kato_ms)
}

/// An enabled admin queue of a controller of subsystem `nqn` (NVM or discovery).
fn admin_connect_to(env: &Env, nqn: &Nqn, kato_ms: u32) -> nvmf_initiator::queue::Queue {
    let mut q = raw_queue(env, 0, 32);
    let buf = env.fabric.alloc(1024).unwrap_or_else(|e| panic!("{e}"));
    buf.write_at(
        0,
        &command::connect_data(TEST_HOSTID, Cntlid::DYNAMIC, nqn, &hostnqn()),
    );
    let c = exec(
        &mut q,
        command::connect(Qid(0), 31, kato_ms),
        Some(&buf),
        DataDir::ToCtrl,
    );
    assert!(c.status.is_success(), "connect: {}", c.status);
    let cc = u64::from(nvmf_common::wire::fabrics::Cc::enable_nvm().0);
    let c = exec(
        &mut q,
        command::property_set(reg::CC, cc),
        None,
        DataDir::None,
    );
    assert!(c.status.is_success());
    q
}

#[test]
fn keep_alive_expiry_tears_the_controller_down() {
    let env = start(&config(&["ram:16M"]));
    let mut q = admin_connect(&env, 300);
    // Keep Alive within the timeout keeps it up.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(100));
        let c = exec(&mut q, command::keep_alive(), None, DataDir::None);
        assert!(c.status.is_success());
    }
    // Silence for well over KATO: the target ends the association.
    std::thread::sleep(Duration::from_millis(900));
    let r = q.execute(
        command::keep_alive(),
        None,
        DataDir::None,
        Duration::from_secs(2),
    );
    assert!(r.is_err(), "the queue must be gone after keep-alive expiry");
    let subsys = env
        .target
        .target
        .find_subsystem(&env.nqn)
        .unwrap_or_else(|| panic!("subsystem"));
    let deadline = Instant::now() + Duration::from_secs(2);
    while !subsys.controllers().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        subsys.controllers().is_empty(),
        "controller still registered"
    );
}

#[test]
fn namespace_added_raises_event_and_changed_list() {
    let env = start(&config(&["ram:16M"]));
    let mut q = admin_connect(&env, 0);
    // Enable the Namespace Attribute Changed notice and arm one AER.
    let c = exec(
        &mut q,
        command::set_features(
            nvmf_common::wire::admin::fid::ASYNC_EVENT_CONFIG,
            Nsid(0),
            1 << 8,
            false,
        ),
        None,
        DataDir::None,
    );
    assert!(c.status.is_success());
    q.submit(command::async_event_request(), None, DataDir::None, 77)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    let subsys = env
        .target
        .target
        .find_subsystem(&env.nqn)
        .unwrap_or_else(|| panic!("subsystem"));
    let backend = Arc::new(RamBackend::new(8 << 20, 512).unwrap_or_else(|e| panic!("{e}")));
    subsys
        .add_namespace(Namespace::new(Nsid(5), backend, [5; 16], [6; 16]))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut got: Vec<Completion> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.is_empty() && Instant::now() < deadline {
        q.poll(&mut got).unwrap_or_else(|e| panic!("{e}"));
    }
    let aer = got
        .first()
        .unwrap_or_else(|| panic!("no asynchronous event"));
    assert_eq!(aer.tag, 77);
    assert!(aer.status.is_success());
    assert_eq!(aer.dw0 & 0x7, u32::from(aer_type::NOTICE));
    assert_eq!(
        (aer.dw0 >> 8) & 0xFF,
        u32::from(aer_notice::NS_ATTR_CHANGED)
    );
    assert_eq!((aer.dw0 >> 16) & 0xFF, u32::from(lid::CHANGED_NS));
    // The Changed Namespace List names nsid 5, then reads empty.
    let buf = env.fabric.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let sqe = command::get_log_page(lid::CHANGED_NS, Nsid(0), 4096, 0, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let c = exec(&mut q, sqe, Some(&buf), DataDir::FromCtrl);
    assert!(c.status.is_success());
    let mut first = [0u8; 8];
    buf.read_at(0, &mut first);
    assert_eq!(
        u32::from_le_bytes([first[0], first[1], first[2], first[3]]),
        5
    );
    assert_eq!(
        u32::from_le_bytes([first[4], first[5], first[6], first[7]]),
        0
    );
    let sqe = command::get_log_page(lid::CHANGED_NS, Nsid(0), 4096, 0, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let c = exec(&mut q, sqe, Some(&buf), DataDir::FromCtrl);
    assert!(c.status.is_success());
    buf.read_at(0, &mut first);
    assert_eq!(first, [0; 8]);
    // A fifth outstanding AER exceeds the limit of four.
    for t in 0..3 {
        q.submit(command::async_event_request(), None, DataDir::None, 100 + t)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    q.submit(command::async_event_request(), None, DataDir::None, 80)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    q.submit(command::async_event_request(), None, DataDir::None, 81)
        .unwrap_or_else(|e| panic!("{e}"));
    q.flush().unwrap_or_else(|e| panic!("{e}"));
    got.clear();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.is_empty() && Instant::now() < deadline {
        q.poll(&mut got).unwrap_or_else(|e| panic!("{e}"));
    }
    let over = got
        .first()
        .unwrap_or_else(|| panic!("no completion for the 5th AER"));
    assert_eq!(over.tag, 81);
    assert!(over.status.is(
        nvmf_common::wire::status::Sct::CommandSpecific,
        nvmf_common::wire::status::cmd_specific::ASYNC_EVENT_REQUEST_LIMIT_EXCEEDED
    ));
}

#[test]
fn discovery_lists_visible_subsystems() {
    let mut cfg = config(&["ram:16M"]);
    // A second subsystem that this host may not see.
    let mut hidden = cfg.subsystems[0].clone();
    hidden.nqn = Nqn::new("nqn.2024-01.io.nvmf-rs:hidden").unwrap_or_else(|e| panic!("{e}"));
    hidden.allow_any_host = false;
    hidden.allowed_hosts =
        vec![Nqn::new("nqn.2014-08.org.nvmexpress:uuid:other").unwrap_or_else(|e| panic!("{e}"))];
    for n in &mut hidden.namespaces {
        n.uuid = None;
        n.device_path = "ram:8M".into();
    }
    cfg.ports[0].subsystems.push(hidden.nqn.clone());
    cfg.subsystems.push(hidden);
    let env = start(&cfg);
    let entries = discover(
        env.fabric.clone(),
        &hostnqn(),
        TEST_HOSTID,
        Duration::from_secs(5),
    )
    .unwrap_or_else(|e| panic!("discover: {e}"));
    // As nvmet orders it: the current discovery subsystem first, then NVM subsystems.
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].subnqn, nvmf_common::types::DISCOVERY_NQN);
    assert_eq!(entries[0].subtype, subtype::CURRENT_DISCOVERY);
    assert_eq!(entries[1].subnqn, nvmf_tests::TEST_NQN);
    assert_eq!(entries[1].subtype, subtype::NVME);
    assert_eq!(entries[1].trtype, trtype::LOOP);
    assert_eq!(entries[1].portid, 1);
    assert_eq!(entries[1].cntlid, 0xFFFF);
}

#[test]
fn sq_head_advances_with_each_command() {
    let env = start(&config(&["ram:16M"]));
    let mut ctrl = connect(&env, 1, 8);
    let mut q = ctrl.take_io_queues().remove(0);
    let mut heads = Vec::new();
    for _ in 0..10 {
        let c = exec(&mut q, command::flush(Nsid(1)), None, DataDir::None);
        assert!(c.status.is_success());
        heads.push(c.sqhd);
    }
    // Queue of 8 entries (SQSIZE 7): the head wraps after 7.
    assert_eq!(heads, vec![2, 3, 4, 5, 6, 7, 0, 1, 2, 3]);
}

/// The log pages nvme-cli's `smart-log`, `fw-log` and `effects-log` read: a healthy
/// SMART page, the running version in firmware slot 1 (active), and Compare among the
/// supported I/O commands.
#[test]
fn smart_fw_slot_and_effects_pages() {
    use nvmf_common::wire::log::{
        effects, fw_afi, CmdEffectsLog, FwSlotLog, SmartLog, CMD_EFFECTS_LOG_LEN, FW_SLOT_LOG_LEN,
        SMART_LOG_LEN,
    };
    use nvmf_common::wire::nvm::opcode as io;
    let env = start(&config(&["ram:16M"]));
    let ctrl = connect(&env, 1, 32);
    let page = ctrl
        .get_log_page(lid::SMART, Nsid::BROADCAST, SMART_LOG_LEN, 0)
        .unwrap_or_else(|e| panic!("{e}"));
    let s = SmartLog::new_unchecked(&page[..]);
    assert_eq!((s.critical_warning(), s.avail_spare()), (0, 100));
    assert!(s.temperature() > 0);
    let page = ctrl
        .get_log_page(lid::FW_SLOT, Nsid::BROADCAST, FW_SLOT_LOG_LEN, 0)
        .unwrap_or_else(|e| panic!("{e}"));
    let f = FwSlotLog::new_unchecked(&page[..]);
    assert_eq!(f.afi(), fw_afi(1, 0));
    assert_eq!(f.frs_string(1), ctrl.id_ctrl().fr);
    assert!(!f.frs_string(1).is_empty());
    assert_eq!(f.frs(2), [0; 8]);
    let page = ctrl
        .get_log_page(lid::CMD_EFFECTS, Nsid::BROADCAST, CMD_EFFECTS_LOG_LEN, 0)
        .unwrap_or_else(|e| panic!("{e}"));
    let l = CmdEffectsLog::new_unchecked(&page[..]);
    // With the command scope (CSP) LPA bit 5 promises: I/O commands namespace scope,
    // Keep Alive controller scope, Identify both.
    let ns = scope::NAMESPACE;
    assert_eq!(l.iocs(io::COMPARE), effects::CSUPP | ns);
    assert_eq!(l.iocs(io::WRITE), effects::CSUPP | effects::LBCC | ns);
    assert_eq!(l.iocs(io::VERIFY), effects::CSUPP | ns);
    assert_eq!(l.iocs(io::COPY), effects::CSUPP | effects::LBCC | ns);
    assert_eq!(
        l.acs(admin::opcode::KEEP_ALIVE),
        effects::CSUPP | scope::CONTROLLER
    );
    assert_eq!(
        l.acs(admin::opcode::IDENTIFY),
        effects::CSUPP | ns | scope::CONTROLLER
    );
    assert_eq!(l.acs(admin::opcode::FW_COMMIT), 0);
}

/// Get Log Page of 4 bytes of `lid` for `nsid` on a raw admin queue.
fn log_status(env: &Env, q: &mut Queue, lid_v: u8, nsid: Nsid) -> Completion {
    let buf = env.fabric.alloc(4).unwrap_or_else(|e| panic!("{e}"));
    let sqe = command::get_log_page(lid_v, nsid, 4, 0, true).unwrap_or_else(|e| panic!("{e}"));
    exec(q, sqe, Some(&buf), DataDir::FromCtrl)
}

/// A whole log page `lid` (`len` bytes) read on a raw admin queue.
fn read_log(env: &Env, q: &mut Queue, lid_v: u8, nsid: Nsid, len: usize) -> Vec<u8> {
    let buf = env.fabric.alloc(len).unwrap_or_else(|e| panic!("{e}"));
    let sqe =
        command::get_log_page(lid_v, nsid, len as u64, 0, true).unwrap_or_else(|e| panic!("{e}"));
    let c = exec(q, sqe, Some(&buf), DataDir::FromCtrl);
    assert!(c.status.is_success(), "log page {lid_v:#04x}: {}", c.status);
    let mut out = vec![0u8; len];
    assert!(buf.read_at(0, &mut out));
    out
}

/// Every LID: served (success) exactly when LID 00h lists it, Invalid Log Page
/// otherwise.
fn assert_lids_match(env: &Env, q: &mut Queue, listed: &[u8]) {
    for l in 0..=u8::MAX {
        let c = log_status(env, q, l, Nsid::BROADCAST);
        if listed.contains(&l) {
            assert!(c.status.is_success(), "listed LID {l:#04x}: {}", c.status);
        } else {
            assert!(
                c.status.dnr
                    && c.status
                        .is(Sct::CommandSpecific, cmd_specific::INVALID_LOG_PAGE),
                "unlisted LID {l:#04x}: {}",
                c.status
            );
        }
    }
}

/// Supported Log Pages (LID 00h) lists exactly the log pages Get Log Page serves, per
/// controller kind; Identify Controller LPA says so (bit 5 on an I/O controller, which
/// also serves LIDs 12h and 13h), and a log page read with an index offset is refused.
#[test]
fn supported_log_pages_list_what_is_served() {
    let env = start(&config(&["ram:16M"]));
    let mut q = admin_connect(&env, 0);
    let page = read_log(
        &env,
        &mut q,
        lid::SUPPORTED_LOGS,
        Nsid(0),
        SUPPORTED_LOGS_LEN,
    );
    let l = SupportedLogs::new_unchecked(&page[..]);
    let nvm = vec![
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
    assert_eq!(l.supported_lids(), nvm);
    // No index offsets and no LID specific parameters: each entry is LSUPP alone.
    assert!(nvm.iter().all(|&x| l.lid(x) == lids::LSUPP));
    assert_lids_match(&env, &mut q, &nvm);
    let id = read_identify(&env, &mut q);
    assert_eq!(
        IdentifyController::new_unchecked(&id[..]).lpa(),
        lpa::SMART_PER_NS | lpa::CMD_EFFECTS | lpa::EXTENDED | lpa::MISC
    );
    // LID 13h: no NVMe-MI command through NVMe-MI Send/Receive.
    let mi = read_log(
        &env,
        &mut q,
        lid::MI_CMD_EFFECTS,
        Nsid(0),
        MI_CMD_EFFECTS_LEN,
    );
    assert!(mi.iter().all(|&b| b == 0));
    // Offset Type 1 (an index offset, cdw14 bit 23): no page supports one (IOS clear).
    let buf = env.fabric.alloc(4).unwrap_or_else(|e| panic!("{e}"));
    let mut sqe = command::get_log_page(lid::SMART, Nsid::BROADCAST, 4, 0, false)
        .unwrap_or_else(|e| panic!("{e}"));
    const OT: u8 = 1 << 7;
    sqe[58] |= OT;
    let c = exec(&mut q, sqe, Some(&buf), DataDir::FromCtrl);
    assert!(c.status.dnr && c.status.is(Sct::Generic, generic::INVALID_FIELD));

    // The discovery controller: LIDs 00h, 12h and 70h; LPA extended data only.
    let disc = Nqn::new(DISCOVERY_NQN).unwrap_or_else(|e| panic!("{e}"));
    let mut d = admin_connect_to(&env, &disc, 0);
    let page = read_log(
        &env,
        &mut d,
        lid::SUPPORTED_LOGS,
        Nsid(0),
        SUPPORTED_LOGS_LEN,
    );
    let listed = SupportedLogs::new_unchecked(&page[..]).supported_lids();
    assert_eq!(
        listed,
        vec![lid::SUPPORTED_LOGS, lid::FEATURES_SUPPORTED, lid::DISCOVERY]
    );
    assert_lids_match(&env, &mut d, &listed);
    let id = read_identify(&env, &mut d);
    assert_eq!(
        IdentifyController::new_unchecked(&id[..]).lpa(),
        lpa::EXTENDED
    );
}

fn read_identify(env: &Env, q: &mut Queue) -> Vec<u8> {
    let buf = env.fabric.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let c = exec(
        q,
        command::identify_controller(),
        Some(&buf),
        DataDir::FromCtrl,
    );
    assert!(c.status.is_success());
    let mut id = vec![0u8; 4096];
    assert!(buf.read_at(0, &mut id));
    id
}

/// Get Features (current) of `f`: NSID 1 (a namespace-scoped feature needs one, the
/// others ignore it); Host Identifier with its 16-byte buffer.
fn get_feature_status(env: &Env, q: &mut Queue, f: u8) -> Completion {
    if f == admin::fid::HOST_IDENTIFIER {
        let buf = env.fabric.alloc(16).unwrap_or_else(|e| panic!("{e}"));
        let sqe = command::get_features(f, Nsid(1), admin::sel::CURRENT, admin::HOST_ID_EXHID);
        return exec(q, sqe, Some(&buf), DataDir::FromCtrl);
    }
    let sqe = command::get_features(f, Nsid(1), admin::sel::CURRENT, 0);
    exec(q, sqe, None, DataDir::None)
}

/// Every FID: Get Features succeeds exactly when LID 12h lists it, Invalid Field
/// otherwise.
fn assert_fids_match(env: &Env, q: &mut Queue, listed: &[u8]) {
    for f in 0..=u8::MAX {
        let c = get_feature_status(env, q, f);
        if listed.contains(&f) {
            assert!(c.status.is_success(), "listed FID {f:#04x}: {}", c.status);
        } else {
            assert!(
                c.status.dnr && c.status.is(Sct::Generic, generic::INVALID_FIELD),
                "unlisted FID {f:#04x}: {}",
                c.status
            );
        }
    }
}

/// Feature Identifiers Supported and Effects (LID 12h) lists exactly the features Get
/// Features accepts, with their scope and no effects, per controller kind.
#[test]
fn feature_ids_supported_list_what_get_features_accepts() {
    use nvmf_common::wire::admin::fid;
    let env = start(&config(&["ram:16M"]));
    let mut q = admin_connect(&env, 0);
    let page = read_log(
        &env,
        &mut q,
        lid::FEATURES_SUPPORTED,
        Nsid(0),
        FEATURES_SUPPORTED_LEN,
    );
    let f = FeaturesSupported::new_unchecked(&page[..]);
    let listed = f.supported_fids();
    assert_eq!(
        listed,
        vec![
            fid::VOLATILE_WRITE_CACHE,
            fid::NUMBER_OF_QUEUES,
            fid::ASYNC_EVENT_CONFIG,
            fid::KEEP_ALIVE_TIMER,
            fid::HOST_IDENTIFIER,
            fid::RESERVATION_NOTIFICATION_MASK,
            fid::RESERVATION_PERSISTENCE,
        ]
    );
    for x in &listed {
        let want = if matches!(
            *x,
            fid::RESERVATION_NOTIFICATION_MASK | fid::RESERVATION_PERSISTENCE
        ) {
            scope::NAMESPACE
        } else {
            scope::CONTROLLER
        };
        assert_eq!(f.fid(*x), fis::FSUPP | want, "FID {x:#04x}");
    }
    assert_fids_match(&env, &mut q, &listed);

    let disc = Nqn::new(DISCOVERY_NQN).unwrap_or_else(|e| panic!("{e}"));
    let mut d = admin_connect_to(&env, &disc, 0);
    let page = read_log(
        &env,
        &mut d,
        lid::FEATURES_SUPPORTED,
        Nsid(0),
        FEATURES_SUPPORTED_LEN,
    );
    let f = FeaturesSupported::new_unchecked(&page[..]);
    let listed = f.supported_fids();
    assert_eq!(listed, vec![fid::ASYNC_EVENT_CONFIG, fid::KEEP_ALIVE_TIMER]);
    assert!(listed
        .iter()
        .all(|&x| f.fid(x) == fis::FSUPP | scope::CONTROLLER));
    assert_fids_match(&env, &mut d, &listed);
}

/// CAP.CRMS.CRWMS is set (CRIMS clear), so a host reads CRTO: a 4-byte Property Get at
/// 68h whose CRWMT equals CAP.TO; an 8-byte read of it is Invalid Field. VS stays 1.3.
#[test]
fn crto_by_property_get_with_cap_crwms() {
    use nvmf_common::wire::fabrics::{cap_crms, prop_size, Crto, PropertyGetCmd, NVME_VS_1_3};
    let env = start(&config(&["ram:16M"]));
    let ctrl = connect(&env, 1, 32);
    let cap = ctrl.cap();
    assert_eq!(cap.crms(), cap_crms::CRWMS);
    assert_eq!(ctrl.vs(), NVME_VS_1_3);
    let c = ctrl
        .admin_execute(command::property_get(reg::CRTO), None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.status.is_success(), "{}", c.status);
    let crto = Crto(c.dw0);
    assert_eq!(u32::from(crto.crwmt()), u32::from(cap.to()));
    assert_eq!(crto.crimt(), 0);
    let mut sqe = command::property_get(reg::CRTO);
    PropertyGetCmd::new_unchecked(&mut sqe[..]).set_attrib(prop_size::SIZE_8);
    let c = ctrl
        .admin_execute(sqe, None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.status.dnr && c.status.is(Sct::Generic, generic::INVALID_FIELD));
}

/// One I/O of `blocks` 512-byte blocks at `slba` on namespace `nsid`; its status.
fn rw(env: &Env, q: &mut Queue, write: bool, nsid: u32, slba: u64, blocks: u32) -> Completion {
    let buf = env
        .fabric
        .alloc(blocks as usize * 512)
        .unwrap_or_else(|e| panic!("{e}"));
    let (sqe, dir) = if write {
        (
            command::write(Nsid(nsid), slba, blocks, false),
            DataDir::ToCtrl,
        )
    } else {
        (
            command::read(Nsid(nsid), slba, blocks, false),
            DataDir::FromCtrl,
        )
    };
    exec(q, sqe.unwrap_or_else(|e| panic!("{e}")), Some(&buf), dir)
}

/// (Data Units Read, Data Units Written, Host Read Commands, Host Write Commands).
fn smart_counts(ctrl: &nvmf_initiator::controller::Controller, nsid: Nsid) -> [u128; 4] {
    use nvmf_common::wire::log::{SmartLog, SMART_LOG_LEN};
    let page = ctrl
        .get_log_page(lid::SMART, nsid, SMART_LOG_LEN, 0)
        .unwrap_or_else(|e| panic!("SMART of {nsid}: {e}"));
    let s = SmartLog::new_unchecked(&page[..]);
    [
        s.data_units_read(),
        s.data_units_written(),
        s.host_reads(),
        s.host_writes(),
    ]
}

/// SMART / Health counts are the namespaces' real ones: exactly the I/O done, data
/// units in thousands of 512-byte units rounded up; per namespace, and for NSID 0 and
/// FFFFFFFFh over the controller's namespaces.
#[test]
fn smart_counts_follow_the_io_done() {
    const KIB_128: u32 = 256; // blocks of 512 bytes
    const KIB_4: u32 = 8;
    let env = start(&config(&["ram:16M", "ram:16M"]));
    let mut ctrl = connect(&env, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    for n in [Nsid(1), Nsid(2), Nsid(0), Nsid::BROADCAST] {
        assert_eq!(smart_counts(&ctrl, n), [0; 4], "{n} before any I/O");
    }
    for i in 0..3 {
        assert!(rw(&env, &mut q, true, 1, u64::from(i * KIB_128), KIB_128)
            .status
            .is_success());
    }
    assert!(rw(&env, &mut q, false, 1, 0, KIB_4).status.is_success());
    assert!(rw(&env, &mut q, true, 2, 0, KIB_4).status.is_success());
    // ns 1: 393216 bytes written (768 units: 1), 4096 read (8 units: 1).
    assert_eq!(smart_counts(&ctrl, Nsid(1)), [1, 1, 1, 3]);
    assert_eq!(smart_counts(&ctrl, Nsid(2)), [0, 1, 0, 1]);
    // Both namespaces: 397312 bytes written (776 units: 1).
    assert_eq!(smart_counts(&ctrl, Nsid::BROADCAST), [1, 1, 1, 4]);
    assert_eq!(smart_counts(&ctrl, Nsid(0)), [1, 1, 1, 4]);
    // Two more: 655360 bytes written to ns 1, 1280 units: rounded up to 2.
    for i in 3..5 {
        assert!(rw(&env, &mut q, true, 1, u64::from(i * KIB_128), KIB_128)
            .status
            .is_success());
    }
    assert_eq!(smart_counts(&ctrl, Nsid(1)), [1, 2, 1, 5]);
    // A read past the end completes with an error: a command, no data.
    let end = 16 * 1024 * 1024 / 512;
    assert!(!rw(&env, &mut q, false, 1, end, KIB_4).status.is_success());
    assert_eq!(smart_counts(&ctrl, Nsid(1)), [1, 2, 2, 5]);
    assert_eq!(smart_counts(&ctrl, Nsid::BROADCAST), [1, 2, 2, 6]);
    // Admin commands and other I/O (Flush) are not reads or writes.
    assert!(exec(&mut q, command::flush(Nsid(1)), None, DataDir::None)
        .status
        .is_success());
    assert_eq!(smart_counts(&ctrl, Nsid(1)), [1, 2, 2, 5]);
    // An inactive NSID is Invalid Namespace.
    let e = ctrl
        .get_log_page(lid::SMART, Nsid(9), 512, 0)
        .err()
        .unwrap_or_else(|| panic!("SMART of an inactive namespace"));
    assert!(format!("{e}").contains("Invalid Namespace"), "{e}");
}
