//! Controller behaviour over loopback: keep-alive expiry, asynchronous events and the
//! Changed Namespace List, discovery with access control, SQ head reporting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::admin::{aer_notice, aer_type};
use nvmf_common::wire::fabrics::reg;
use nvmf_common::wire::log::{lid, subtype, trtype};
use nvmf_initiator::command;
use nvmf_initiator::discovery::discover;
use nvmf_initiator::queue::Completion;
use nvmf_initiator::transport::DataDir;
use nvmf_target::backend::ram::RamBackend;
use nvmf_target::subsystem::Namespace;
use nvmf_tests::{config, connect, exec, hostnqn, raw_queue, start, Env, TEST_HOSTID};

fn admin_connect(env: &Env, kato_ms: u32) -> nvmf_initiator::queue::Queue {
    let mut q = raw_queue(env, 0, 32);
    let buf = env.fabric.alloc(1024).unwrap_or_else(|e| panic!("{e}"));
    buf.write_at(
        0,
        &command::connect_data(TEST_HOSTID, Cntlid::DYNAMIC, &env.nqn, &hostnqn()),
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
    assert_eq!(l.iocs(io::COMPARE), effects::CSUPP);
    assert_eq!(l.iocs(io::WRITE), effects::CSUPP | effects::LBCC);
}
