//! Passthru logic against the fake controller: Identify overrides, the admin allowed
//! list (refused commands never reach the device; passed ones arrive and return
//! unchanged), log fix-ups and namespace enumeration.

use crate::config::{PassthruAdminClass, PassthruConfig};
use nvmf_common::wire::admin::{self, cns, csi, fid, opcode, sel};
use nvmf_common::wire::identify::{
    cmic, ctratt, entry_size, nmic, oacs, oncs, parse_ns_id_descriptors, sgls, IdentifyController,
    IdentifyNamespace, IdentifyNsCsIndep, NsIdDescriptor, IDENTIFY_LEN,
};
use nvmf_common::wire::log::{effects, lid, CmdEffectsLog, CMD_EFFECTS_LOG_LEN};
use nvmf_common::wire::nvm::opcode as io;
use nvmf_common::wire::sqe::{self, fuse, Sqe, SQE_LEN};
use nvmf_common::wire::status::{cmd_specific, generic, media, Sct, Status};
use nvmf_common::wire::supported::{fis, lids, scope, FeaturesSupported, SupportedLogs};

use super::fake::{self, Canned, FakeController};
use super::*;

const SUBNQN: &str = "nqn.2024-01.io.nvmf-rs:ssd0";
const CNTLID: u16 = 7;

fn fabric() -> FabricFields {
    FabricFields {
        cntlid: CNTLID,
        subnqn: SUBNQN.to_string(),
        max_io_size: 1 << 20,
        max_queue_size: 128,
        in_capsule_data_size: 8192,
        keyed_sgls: false,
        msdbd: 1,
        static_model: false,
        aerl: 3,
        acl: 3,
        kas: 1,
    }
}

fn cfg() -> PassthruConfig {
    PassthruConfig::new("/dev/nvme0")
}

fn cmd(op: u8) -> Sqe<[u8; SQE_LEN]> {
    let mut s = Sqe::new_unchecked([0u8; SQE_LEN]);
    s.set_opcode(op);
    // What the fabric fills in: a command id and an SGL, which the device never sees.
    s.set_cid(0x1234);
    s.set_psdt(sqe::psdt::SGL_MPTR_CONTIGUOUS);
    s
}

fn run(
    dev: &FakeController,
    cfg: &PassthruConfig,
    c: &Sqe<[u8; SQE_LEN]>,
    data: DataBuf<'_>,
) -> AdminOutcome {
    let fab = fabric();
    let ctx = AdminCtx {
        dev,
        cfg,
        fabric: &fab,
    };
    execute_admin(&ctx, c, data)
}

fn completed(o: AdminOutcome) -> DeviceCompletion {
    match o {
        AdminOutcome::Complete { completion, .. } => completion,
        AdminOutcome::Emulate => panic!("emulated, not completed"),
    }
}

/// Runs Identify `cns` for `nsid` (CSI `csi`) and returns the completion and page.
fn identify(
    dev: &FakeController,
    cfg: &PassthruConfig,
    cns_v: u8,
    nsid: u32,
) -> (DeviceCompletion, Vec<u8>) {
    let mut c = cmd(opcode::IDENTIFY);
    admin::set_identify(&mut c, cns_v, 0, csi::NVM);
    c.set_nsid(nsid);
    let mut page = vec![0u8; IDENTIFY_LEN];
    let done = completed(run(dev, cfg, &c, DataBuf::FromDevice(&mut page)));
    (done, page)
}

fn get_log(lid_v: u8, len: u32, offset: u64) -> Sqe<[u8; SQE_LEN]> {
    let mut c = cmd(opcode::GET_LOG_PAGE);
    admin::set_get_log_page(&mut c, lid_v, 0, false, len / 4, offset);
    c
}

fn features(op: u8, f: u8) -> Sqe<[u8; SQE_LEN]> {
    let mut c = cmd(op);
    c.set_cdw10(if op == opcode::SET_FEATURES {
        admin::set_features_cdw10(f, false)
    } else {
        admin::get_features_cdw10(f, sel::CURRENT)
    });
    c
}

#[test]
fn identify_controller_is_the_devices_with_fabric_fields_ours() {
    let dev = FakeController::new(&[1, 2]);
    let (done, page) = identify(&dev, &cfg(), cns::CONTROLLER, 0);
    assert_eq!(done, DeviceCompletion::success(0));
    let id = IdentifyController::new_checked(&page[..]).unwrap();
    // The drive as it is.
    assert_eq!(id.mn_string(), fake::FAKE_MODEL);
    assert_eq!(id.sn_string(), fake::FAKE_SERIAL);
    assert_eq!(id.fr_string(), fake::FAKE_FIRMWARE);
    assert_eq!((id.vid(), id.ssvid()), (0x1B36, 0x1AF4));
    assert_eq!(id.ver(), fake::FAKE_VERSION);
    assert_eq!(id.nn(), 2);
    assert_eq!(id.oncs(), oncs::COMPARE | oncs::DSM | oncs::WRITE_ZEROES);
    // The fabric controller's.
    assert_eq!(id.cntlid(), CNTLID);
    assert_eq!(id.subnqn_str(), Some(SUBNQN));
    assert_eq!(id.mdts(), 8, "1 MiB caps the device's 2 MiB");
    assert_eq!((id.kas(), id.aerl(), id.acl()), (1, 3, 3));
    assert_eq!(id.sqes(), entry_size::SQES_64);
    assert_eq!(id.cqes(), entry_size::CQES_16);
    assert_eq!(id.maxcmd(), 128);
    assert_eq!(id.fuses(), 0);
    assert_eq!(id.sgls(), sgls::SUPPORTED | sgls::SGL_OFFSET);
    assert_eq!(
        (id.ioccsz(), id.iorcsz(), id.icdoff()),
        ((64 + 8192) / 16, 1, 0)
    );
    assert_eq!((id.fcatt(), id.msdbd()), (0, 1));
    assert_eq!(id.cmic(), cmic::MULTI_PORT | cmic::MULTI_CTRL);
    assert_eq!(
        (id.anacap(), id.anatt(), id.anagrpmax(), id.nanagrpid()),
        (0, 0, 0, 0)
    );
    assert_eq!(id.oaes(), 0);
    assert_eq!(
        id.ctratt(),
        ctratt::NVM_SETS | ctratt::HOST_ID_128 | ctratt::TBKAS
    );
    assert_eq!((id.hmpre(), id.hmmin()), (0, 0));
    // Nothing refused by default is announced.
    assert_eq!(id.oacs(), 0);
    assert_eq!(id.sanicap(), 0);
    // The device got the host's Identify (and nothing else).
    let got = dev.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].sqe[0], opcode::IDENTIFY);
    assert_eq!(got[0].data_out_len, IDENTIFY_LEN);
}

#[test]
fn identify_controller_announces_allowed_classes() {
    let dev = FakeController::new(&[1]);
    let mut c = cfg();
    c.allow_admin = vec![PassthruAdminClass::Firmware, PassthruAdminClass::Sanitize];
    let (_, page) = identify(&dev, &c, cns::CONTROLLER, 0);
    let id = IdentifyController::new_checked(&page[..]).unwrap();
    // Doorbell buffer config never passes, whatever the device has.
    assert_eq!(id.oacs(), oacs::FW);
    assert_eq!(id.sanicap(), 0b111);
}

#[test]
fn identify_namespace_drops_metadata_and_reservations() {
    let dev = FakeController::new(&[1]);
    let (done, page) = identify(&dev, &cfg(), cns::NAMESPACE, 1);
    assert!(done.status.is_success());
    let id = IdentifyNamespace::new_checked(&page[..]).unwrap();
    assert_eq!(id.nsze(), 16 << 20);
    assert_eq!(id.lbaf(0).ds, 9);
    assert_eq!(
        id.lbaf(1),
        Default::default(),
        "the 8-byte metadata format is gone"
    );
    assert_eq!((id.mc(), id.dpc(), id.dps()), (0, 0, 0));
    assert_eq!(id.nmic(), nmic::SHARED);
    assert_eq!((id.rescap(), id.anagrpid()), (0, 0));
    assert_eq!(id.nguid(), [1; 16]);
    assert_eq!(id.eui64(), [0xE1; 8]);
    // An inactive NSID stays all zeroes.
    let (done, page) = identify(&dev, &cfg(), cns::NAMESPACE, 4);
    assert!(done.status.is_success());
    assert!(page.iter().all(|&b| b == 0));
}

#[test]
fn clear_ids_zeroes_identifiers_and_keeps_only_the_csi_descriptor() {
    let dev = FakeController::new(&[3]);
    let mut c = cfg();
    let (_, list) = identify(&dev, &c, cns::NS_ID_DESCRIPTOR_LIST, 3);
    assert_eq!(
        parse_ns_id_descriptors(&list).len(),
        4,
        "unchanged without clear_ids"
    );
    c.clear_ids = true;
    let (_, page) = identify(&dev, &c, cns::NAMESPACE, 3);
    let id = IdentifyNamespace::new_checked(&page[..]).unwrap();
    assert_eq!((id.nguid(), id.eui64()), ([0; 16], [0; 8]));
    let (done, list) = identify(&dev, &c, cns::NS_ID_DESCRIPTOR_LIST, 3);
    assert!(done.status.is_success());
    assert_eq!(
        parse_ns_id_descriptors(&list),
        [NsIdDescriptor::Csi(csi::NVM)]
    );
}

#[test]
fn identify_cs_independent_namespace_is_shared() {
    let dev = FakeController::new(&[1]);
    let mut page = vec![0u8; IDENTIFY_LEN];
    {
        let mut id = IdentifyNsCsIndep::new_unchecked(&mut page[..]);
        id.set_rescap(0xFF);
        id.set_anagrpid(5);
        id.set_nsattr(1);
    }
    dev.answer(
        opcode::IDENTIFY,
        Canned {
            completion: DeviceCompletion::success(0),
            data: page,
        },
    );
    let (done, page) = identify(&dev, &cfg(), cns::CS_INDEPENDENT_NAMESPACE, 1);
    assert!(done.status.is_success());
    let id = IdentifyNsCsIndep::new_checked(&page[..]).unwrap();
    assert_eq!(
        (id.nmic(), id.rescap(), id.anagrpid()),
        (nmic::SHARED, 0, 0)
    );
    assert_eq!(id.nsattr(), 1, "the rest is the device's");
}

/// Every command the allowed list refuses by default, with its exact status.
fn refused_by_default() -> Vec<(&'static str, Sqe<[u8; SQE_LEN]>, Status)> {
    let bad_op = Status::generic_dnr(generic::INVALID_OPCODE);
    let bad_feature = Status::generic_dnr(generic::INVALID_FIELD);
    let bad_log = Status::cmd_specific_dnr(cmd_specific::INVALID_LOG_PAGE);
    let mut v = Vec::new();
    for (name, op) in [
        ("Create I/O SQ", opcode::CREATE_SQ),
        ("Delete I/O CQ", opcode::DELETE_CQ),
        ("Doorbell Buffer Config", opcode::DOORBELL_BUFFER_CONFIG),
        ("Virtualization Management", opcode::VIRTUALIZATION_MGMT),
        ("NVMe-MI Send", opcode::NVME_MI_SEND),
        ("Get LBA Status", opcode::GET_LBA_STATUS),
        ("Namespace Management", opcode::NS_MGMT),
        ("Namespace Attachment", opcode::NS_ATTACH),
        ("Format NVM", opcode::FORMAT_NVM),
        ("Firmware Commit", opcode::FW_COMMIT),
        ("Firmware Image Download", opcode::FW_DOWNLOAD),
        ("Sanitize", opcode::SANITIZE),
        ("Security Send", opcode::SECURITY_SEND),
        ("Security Receive", opcode::SECURITY_RECEIVE),
        ("Device Self-test", opcode::DEVICE_SELF_TEST),
        ("Directive Send", opcode::DIRECTIVE_SEND),
        ("Directive Receive", opcode::DIRECTIVE_RECEIVE),
        ("vendor C0h", opcode::VENDOR_START),
        ("vendor FFh", 0xFF),
        ("unassigned 30h", 0x30),
    ] {
        v.push((name, cmd(op), bad_op));
    }
    for f in [
        fid::INTERRUPT_COALESCING,
        fid::INTERRUPT_VECTOR_CONFIG,
        fid::HOST_MEMORY_BUFFER,
        fid::SOFTWARE_PROGRESS_MARKER,
        fid::RESERVATION_NOTIFICATION_MASK,
        fid::RESERVATION_PERSISTENCE,
        fid::NS_WRITE_PROTECTION,
        0xC1,
    ] {
        v.push((
            "Set Features",
            features(opcode::SET_FEATURES, f),
            bad_feature,
        ));
        v.push((
            "Get Features",
            features(opcode::GET_FEATURES, f),
            bad_feature,
        ));
    }
    for l in [lid::ANA, lid::RESERVATION_NOTIFICATION, lid::DISCOVERY] {
        v.push(("Get Log Page", get_log(l, 4096, 0), bad_log));
    }
    let mut id = cmd(opcode::IDENTIFY);
    admin::set_identify(&mut id, cns::CS_NAMESPACE, 0, csi::NVM);
    v.push(("Identify CNS 05h CSI NVM", id, bad_feature));
    let mut fused = cmd(opcode::GET_LOG_PAGE);
    fused.set_fuse(fuse::FIRST);
    v.push(("fused admin", fused, bad_feature));
    v
}

#[test]
fn refused_commands_never_reach_the_device() {
    let dev = FakeController::new(&[1]);
    for (name, c, want) in refused_by_default() {
        let mut buf = vec![0u8; 4096];
        let data = if admin_moves_from_device(c.opcode()) {
            DataBuf::FromDevice(&mut buf)
        } else {
            DataBuf::None
        };
        let got = completed(run(&dev, &cfg(), &c, data));
        assert!(got.status.is(want.sct, want.sc), "{name}: {:?}", got.status);
        assert!(got.status.dnr, "{name}: DNR");
        assert_eq!((got.dw0, got.dw1), (0, 0), "{name}");
        assert!(dev.received().is_empty(), "{name} reached the device");
    }
}

fn admin_moves_from_device(op: u8) -> bool {
    super::device::opcode_moves_from_device(op)
}

#[test]
fn refusal_statuses_point_at_the_field() {
    let c = cfg();
    let loc = |s: Sqe<[u8; SQE_LEN]>| match route_admin(&s, &c) {
        AdminRoute::Refuse(st) => st.location.map(|l| (l.byte, l.bit)),
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(loc(cmd(opcode::FORMAT_NVM)), Some((0, 0)));
    assert_eq!(
        loc(features(opcode::SET_FEATURES, fid::HOST_MEMORY_BUFFER)),
        Some((40, 0))
    );
    assert_eq!(loc(get_log(lid::ANA, 4096, 0)), Some((40, 0)));
    let mut f = cmd(opcode::IDENTIFY);
    f.set_fuse(fuse::SECOND);
    assert_eq!(loc(f), Some((1, 0)));
    let mut id = cmd(opcode::IDENTIFY);
    admin::set_identify(&mut id, cns::CS_NAMESPACE, 0, csi::NVM);
    assert_eq!(loc(id), Some((47, 0)));
}

#[test]
fn allowed_classes_pass_unchanged_and_ask_for_a_rescan() {
    let dev = FakeController::new(&[1]);
    let mut c = cfg();
    c.allow_admin = PassthruAdminClass::ALL.to_vec();
    let answer = DeviceCompletion {
        status: Status::cmd_specific_dnr(cmd_specific::INVALID_FORMAT),
        dw0: 0xDEAD_BEEF,
        dw1: 0x0102_0304,
    };
    dev.answer(
        opcode::FORMAT_NVM,
        Canned {
            completion: answer,
            data: Vec::new(),
        },
    );
    let mut f = cmd(opcode::FORMAT_NVM);
    f.set_nsid(1);
    f.set_cdw10(0x0000_0201);
    f.set_cdw2(0x5555);
    let out = run(&dev, &c, &f, DataBuf::None);
    assert_eq!(
        out,
        AdminOutcome::Complete {
            completion: answer,
            rescan: true
        }
    );
    let got = dev.received();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].sqe,
        f.into_inner(),
        "the command arrives as the host sent it"
    );
    // Firmware download carries its image.
    let mut dl = cmd(opcode::FW_DOWNLOAD);
    dl.set_cdw10(1);
    let image = [0x5Au8; 8];
    let out = run(&dev, &c, &dl, DataBuf::ToDevice(&image));
    assert!(completed(out).status.is_success());
    assert_eq!(dev.received()[1].data_in, image);
    // A vendor command passes too, with a rescan (unknown effects).
    let out = run(&dev, &c, &cmd(0xC4), DataBuf::None);
    assert!(matches!(out, AdminOutcome::Complete { rescan: true, .. }));
}

#[test]
fn allowed_classes_move_exactly_what_their_fields_say() {
    let dev = FakeController::new(&[1]);
    let mut c = cfg();
    c.allow_admin = PassthruAdminClass::ALL.to_vec();
    let wrong = |o: AdminOutcome| {
        let s = completed(o).status;
        s.is(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID) && s.dnr
    };
    // Firmware Image Download of NUMD 1 (8 bytes) with 12 bytes: refused.
    let mut dl = cmd(opcode::FW_DOWNLOAD);
    dl.set_cdw10(1);
    assert!(wrong(run(&dev, &c, &dl, DataBuf::ToDevice(&[0; 12]))));
    // Security Receive of AL 16 into a 4 KiB buffer: refused.
    let mut rx = cmd(opcode::SECURITY_RECEIVE);
    rx.set_cdw11(16);
    let mut big = vec![0u8; 4096];
    assert!(wrong(run(&dev, &c, &rx, DataBuf::FromDevice(&mut big))));
    // Namespace Management create without its 4 KiB structure: refused.
    let create = cmd(opcode::NS_MGMT);
    assert!(wrong(run(&dev, &c, &create, DataBuf::ToDevice(&[0; 512]))));
    assert!(dev.received().is_empty());
    // Namespace delete (SEL 1h) and Format move nothing, whatever the host sent.
    let mut delete = cmd(opcode::NS_MGMT);
    delete.set_cdw10(1);
    delete.set_nsid(1);
    assert!(
        completed(run(&dev, &c, &delete, DataBuf::ToDevice(&[0; 64])))
            .status
            .is_success()
    );
    let format = cmd(opcode::FORMAT_NVM);
    assert!(completed(run(&dev, &c, &format, DataBuf::None))
        .status
        .is_success());
    let got = dev.received();
    assert_eq!(got.len(), 2);
    assert!(got
        .iter()
        .all(|r| r.data_in.is_empty() && r.data_out_len == 0));
    // Security Receive with a buffer of exactly AL bytes reaches the device.
    let mut exact = vec![0u8; 16];
    assert!(
        completed(run(&dev, &c, &rx, DataBuf::FromDevice(&mut exact)))
            .status
            .is_success()
    );
    assert_eq!(dev.received()[2].data_out_len, 16);
}

#[test]
fn passed_commands_return_status_and_result_unchanged() {
    let dev = FakeController::new(&[1]);
    // A SMART log read the device fails with a media error and a result.
    let answer = DeviceCompletion {
        status: Status::media_retryable(media::UNRECOVERED_READ_ERROR),
        dw0: 7,
        dw1: 9,
    };
    dev.answer(
        opcode::GET_LOG_PAGE,
        Canned {
            completion: answer,
            data: vec![0xAB; 512],
        },
    );
    let mut smart = get_log(lid::SMART, 512, 0);
    smart.set_nsid(0xFFFF_FFFF);
    let mut buf = vec![0u8; 512];
    let got = completed(run(&dev, &cfg(), &smart, DataBuf::FromDevice(&mut buf)));
    assert_eq!(got, answer);
    assert_eq!(buf, vec![0xAB; 512]);
    assert_eq!(dev.received()[0].sqe, smart.into_inner());
    // Get Features Arbitration: dword 0 from the device.
    dev.answer(
        opcode::GET_FEATURES,
        Canned {
            completion: DeviceCompletion::success(0x0303_0102),
            data: Vec::new(),
        },
    );
    let arb = features(opcode::GET_FEATURES, fid::ARBITRATION);
    let got = completed(run(&dev, &cfg(), &arb, DataBuf::None));
    assert_eq!(got, DeviceCompletion::success(0x0303_0102));
    // Set Features Volatile Write Cache reaches the device as sent.
    let mut vwc = features(opcode::SET_FEATURES, fid::VOLATILE_WRITE_CACHE);
    vwc.set_cdw11(1);
    assert!(completed(run(&dev, &cfg(), &vwc, DataBuf::None))
        .status
        .is_success());
    let sent = dev.received();
    assert_eq!(sent.last().map(|r| r.sqe), Some(vwc.into_inner()));
    assert_eq!(
        dev.received_opcodes(),
        [
            opcode::GET_LOG_PAGE,
            opcode::GET_FEATURES,
            opcode::SET_FEATURES
        ]
    );
}

#[test]
fn device_gets_buffers_of_the_commands_real_size() {
    let dev = FakeController::new(&[1]);
    // A log read whose buffer is not NUMD dwords is refused before the device.
    let mut short = vec![0u8; 100];
    let got = completed(run(
        &dev,
        &cfg(),
        &get_log(lid::SMART, 512, 0),
        DataBuf::FromDevice(&mut short),
    ));
    assert!(
        got.status
            .is(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID)
            && got.status.dnr
    );
    assert!(dev.received().is_empty());
    // Get Features Timestamp: the device gets 8 bytes whatever the host offered.
    let mut big = vec![0u8; 4096];
    let ts = features(opcode::GET_FEATURES, fid::TIMESTAMP);
    assert!(
        completed(run(&dev, &cfg(), &ts, DataBuf::FromDevice(&mut big)))
            .status
            .is_success()
    );
    assert_eq!(dev.received()[0].data_out_len, 8);
    // Set Features Timestamp with less than 8 bytes: refused.
    let set = features(opcode::SET_FEATURES, fid::TIMESTAMP);
    let got = completed(run(&dev, &cfg(), &set, DataBuf::ToDevice(&[1, 2])));
    assert!(got
        .status
        .is(Sct::Generic, generic::DATA_SGL_LENGTH_INVALID));
    assert_eq!(dev.received().len(), 1);
    // Identify into a short host buffer: the device still writes a whole page.
    let mut c = cmd(opcode::IDENTIFY);
    admin::set_identify(&mut c, cns::ACTIVE_NS_LIST, 0, 0);
    let mut small = vec![0u8; 16];
    assert!(
        completed(run(&dev, &cfg(), &c, DataBuf::FromDevice(&mut small)))
            .status
            .is_success()
    );
    assert_eq!(dev.received()[1].data_out_len, IDENTIFY_LEN);
    assert_eq!(&small[..4], &1u32.to_le_bytes());
}

#[test]
fn target_answers_its_own_commands() {
    let dev = FakeController::new(&[1]);
    for c in [
        cmd(opcode::KEEP_ALIVE),
        cmd(opcode::ASYNC_EVENT_REQUEST),
        cmd(opcode::ABORT),
        cmd(opcode::FABRICS),
        features(opcode::SET_FEATURES, fid::NUMBER_OF_QUEUES),
        features(opcode::GET_FEATURES, fid::KEEP_ALIVE_TIMER),
        features(opcode::SET_FEATURES, fid::ASYNC_EVENT_CONFIG),
        features(opcode::GET_FEATURES, fid::HOST_IDENTIFIER),
        get_log(lid::CHANGED_NS, 4096, 0),
    ] {
        assert_eq!(
            run(&dev, &cfg(), &c, DataBuf::None),
            AdminOutcome::Emulate,
            "{:#x}",
            c.opcode()
        );
    }
    assert!(dev.received().is_empty());
}

#[test]
fn effects_log_lists_only_what_passes() {
    let dev = FakeController::new(&[1]);
    let mut page = vec![0u8; CMD_EFFECTS_LOG_LEN];
    {
        let mut l = CmdEffectsLog::new_unchecked(&mut page[..]);
        for op in 0..=u8::MAX {
            l.set_acs(op, effects::CSUPP | effects::NIC);
            l.set_iocs(op, effects::CSUPP | effects::LBCC);
        }
    }
    dev.answer(
        opcode::GET_LOG_PAGE,
        Canned {
            completion: DeviceCompletion::success(0),
            data: page,
        },
    );
    let mut c = cfg();
    c.allow_admin = vec![PassthruAdminClass::Format];
    let mut buf = vec![0u8; CMD_EFFECTS_LOG_LEN];
    let got = completed(run(
        &dev,
        &c,
        &get_log(lid::CMD_EFFECTS, 4096, 0),
        DataBuf::FromDevice(&mut buf),
    ));
    assert!(got.status.is_success());
    let l = CmdEffectsLog::new_checked(&buf[..]).unwrap();
    assert_eq!(
        l.acs(opcode::FORMAT_NVM),
        effects::CSUPP | effects::NIC,
        "allowed: the device's"
    );
    for refused in [
        opcode::SANITIZE,
        opcode::FW_COMMIT,
        opcode::CREATE_SQ,
        opcode::VENDOR_START,
        opcode::FABRICS,
    ] {
        assert_eq!(l.acs(refused), 0, "{refused:#x}");
    }
    assert_eq!(
        l.acs(opcode::KEEP_ALIVE),
        effects::CSUPP | scope::CONTROLLER
    );
    assert_ne!(l.acs(opcode::IDENTIFY) & effects::CSUPP, 0);
    assert_eq!(l.iocs(io::RESERVATION_ACQUIRE), 0);
    assert_eq!(l.iocs(io::WRITE), effects::CSUPP | effects::LBCC);
    // A window of the page (the I/O half, from byte 1024) gets the same rules.
    let mut half = vec![0u8; 1024];
    let got = completed(run(
        &dev,
        &c,
        &get_log(lid::CMD_EFFECTS, 1024, 1024 + 48),
        DataBuf::FromDevice(&mut half),
    ));
    assert!(got.status.is_success());
    // The fake ignores the offset: its bytes from 0 land at byte 1072 of the page,
    // where I/O opcode 0Ch starts; opcode 0Dh (Reservation Register) is cleared.
    let at =
        |op: u8| u32::from_le_bytes(half[(usize::from(op) - 12) * 4..][..4].try_into().unwrap());
    assert_eq!(at(io::RESERVATION_REGISTER), 0);
    assert_eq!(at(0x0C), effects::CSUPP | effects::NIC);
}

#[test]
fn supported_pages_match_what_is_served() {
    let dev = FakeController::new(&[1]);
    let all = [0x01u8, 0, 0, 0].repeat(256);
    dev.answer(
        opcode::GET_LOG_PAGE,
        Canned {
            completion: DeviceCompletion::success(0),
            data: all,
        },
    );
    let mut buf = vec![0u8; 1024];
    completed(run(
        &dev,
        &cfg(),
        &get_log(lid::SUPPORTED_LOGS, 1024, 0),
        DataBuf::FromDevice(&mut buf),
    ));
    let logs = SupportedLogs::new_checked(&buf[..]).unwrap();
    assert!(logs.supported(lid::SMART) && logs.supported(lid::CHANGED_NS));
    for l in [lid::ANA, lid::RESERVATION_NOTIFICATION, lid::DISCOVERY] {
        assert_eq!(logs.lid(l), 0, "{l:#x}");
    }
    assert_eq!(logs.lid(lid::CMD_EFFECTS) & lids::LSUPP, lids::LSUPP);
    let mut buf = vec![0u8; 1024];
    completed(run(
        &dev,
        &cfg(),
        &get_log(lid::FEATURES_SUPPORTED, 1024, 0),
        DataBuf::FromDevice(&mut buf),
    ));
    let f = FeaturesSupported::new_checked(&buf[..]).unwrap();
    assert!(f.supported(fid::ARBITRATION) && f.supported(fid::HOST_BEHAVIOR));
    assert_eq!(f.fid(fid::NUMBER_OF_QUEUES), fis::FSUPP | scope::CONTROLLER);
    for refused in [
        fid::HOST_MEMORY_BUFFER,
        fid::RESERVATION_PERSISTENCE,
        0xC0,
        0xFF,
    ] {
        assert_eq!(f.fid(refused), 0, "{refused:#x}");
    }
}

#[test]
fn host_behavior_must_match_the_devices() {
    let dev = FakeController::new(&[1]);
    let mut current = vec![0u8; 512];
    current[0] = 1; // ACRE
    dev.answer(
        opcode::GET_FEATURES,
        Canned {
            completion: DeviceCompletion::success(0),
            data: current.clone(),
        },
    );
    let set = features(opcode::SET_FEATURES, fid::HOST_BEHAVIOR);
    let got = completed(run(&dev, &cfg(), &set, DataBuf::ToDevice(&current)));
    assert_eq!(got, DeviceCompletion::success(0));
    // Only the Get reached the device: nothing was set on it.
    assert_eq!(dev.received_opcodes(), [opcode::GET_FEATURES]);
    let other = vec![0u8; 512];
    let got = completed(run(&dev, &cfg(), &set, DataBuf::ToDevice(&other)));
    assert!(got.status.is(Sct::Generic, generic::INTERNAL_ERROR) && got.status.dnr);
    assert_eq!(
        dev.received_opcodes(),
        [opcode::GET_FEATURES, opcode::GET_FEATURES]
    );
}

#[test]
fn a_passthru_subsystem_is_refused_at_start_until_served() {
    let mut s = crate::config::SubsystemConfig::new(nvmf_common::types::Nqn::new(SUBNQN).unwrap());
    s.passthru = Some(cfg());
    match crate::target::build_subsystem(&s) {
        Ok(_) => panic!("a passthru subsystem was built"),
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains(SUBNQN) && e.contains("/dev/nvme0"), "{e}");
        }
    }
}
