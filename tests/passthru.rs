//! Passthru subsystems over NVMe/TCP (issue 28, item 1) against a fake device behind
//! the same [`NvmeController`] trait a real `/dev/nvmeX` implements: the host sees
//! the device's Identify data with the fabric fields ours, its namespaces, and its
//! I/O answers (status and result dwords) unchanged; admin commands the allowed list
//! refuses never reach the device; the target keeps Keep Alive and AERs itself.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::admin::opcode as admin_op;
use nvmf_common::wire::identify::{IdentifyController, IdentifyNamespace};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::sqe::Sqe;
use nvmf_common::wire::status::{generic, Sct, Status};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::queue::{Completion, Queue};
use nvmf_initiator::transport::DataDir;
use nvmf_target::passthru::device::{DeviceCompletion, NvmeController};
use nvmf_target::passthru::fake::{
    Canned, FakeController, FAKE_BLOCKS, FAKE_CNTLID, FAKE_FIRMWARE, FAKE_MODEL, FAKE_SERIAL,
};
use nvmf_target::passthru::fake_io::{ZONE_APPEND, ZONE_BLOCKS};
use nvmf_target::passthru::serve::provide_device;
use nvmf_tests::ops_support::{connect_as, free_port, start_live, LiveTarget};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:passthru";
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A vendor specific I/O opcode without data (80h and up are vendor specific).
const VENDOR_IO: u8 = 0x80;
/// Zone Management Send (ZNS), and its Reset Zone action (CDW13 ZSA 04h).
const ZONE_MGMT_SEND: u8 = 0x79;
const ZSA_RESET: u32 = 0x04;

fn sub() -> Nqn {
    Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"))
}

/// A target exporting `dev` as a passthru subsystem at `device_path`.
fn serve(device_path: &str, dev: Arc<FakeController>) -> LiveTarget {
    provide_device(Path::new(device_path), dev as Arc<dyn NvmeController>);
    let port = free_port();
    start_live(
        &format!(
            "ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{port}\", subsystems: [{SUB}] }}
subsystems:
  - nqn: {SUB}
    allow_any_host: true
    passthru:
      device_path: {device_path}
"
        ),
        None,
    )
}

struct Host {
    ctrl: Controller,
    q: Queue,
}

impl Host {
    fn connect(t: &LiveTarget) -> Host {
        let mut ctrl =
            connect_as(&t.fabric(1), 1, &sub(), 1, 5000).unwrap_or_else(|e| panic!("{e}"));
        let q = ctrl
            .take_io_queues()
            .pop()
            .unwrap_or_else(|| panic!("no I/O queue"));
        Host { ctrl, q }
    }

    /// An I/O command with a buffer of `data.len()` bytes (`dir` decides which way).
    fn io(&mut self, sqe: [u8; 64], data: &mut [u8], dir: DataDir) -> Completion {
        let buf = (!data.is_empty()).then(|| {
            let b = self
                .ctrl
                .alloc(data.len())
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(b.write_at(0, data));
            b
        });
        let c = self
            .q
            .execute(sqe, buf.as_ref(), dir, IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"));
        if let Some(b) = &buf {
            assert!(b.read_at(0, data));
        }
        c
    }

    /// An admin command reading `len` bytes.
    fn admin_read(&self, sqe: [u8; 64], len: usize) -> (Completion, Vec<u8>) {
        let buf = self.ctrl.alloc(len).unwrap_or_else(|e| panic!("{e}"));
        let c = self
            .ctrl
            .admin_execute(sqe, Some(&buf), DataDir::FromCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = vec![0u8; len];
        assert!(buf.read_at(0, &mut out));
        (c, out)
    }
}

fn rw(op: u8, nsid: u32, slba: u64, nblocks: u32) -> [u8; 64] {
    let mut s = Sqe::new_unchecked(
        command::read(Nsid(nsid), slba, nblocks, false).unwrap_or_else(|e| panic!("{e}")),
    );
    s.set_opcode(op);
    s.into_inner()
}

#[test]
fn the_host_sees_the_device_with_the_fabric_fields_ours() {
    let dev = Arc::new(FakeController::new(&[1, 2]));
    let t = serve("/dev/nvme-fake-identify", dev.clone());
    let h = Host::connect(&t);
    let id = IdentifyController::new_checked(h.ctrl.identify_controller_raw())
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(id.mn_string(), FAKE_MODEL);
    assert_eq!(id.sn_string(), FAKE_SERIAL);
    assert_eq!(id.fr_string(), FAKE_FIRMWARE);
    // The fabric's controller id and NQN, not the device's.
    assert_eq!(id.cntlid(), h.ctrl.cntlid().0);
    assert_ne!(id.cntlid(), FAKE_CNTLID);
    assert_eq!(nvmf_common::wire::field_to_string(id.subnqn()), SUB);
    // CAP.CSS reports I/O command sets (zoned, key-value namespaces), so the host
    // may enable the controller with CC.CSS = 110b.
    let css = (h.ctrl.cap().0 >> 37) & 0xFF;
    assert_eq!(css, 0b0100_0001, "CAP.CSS {css:#x}");
    // VS agrees with Identify VER: the device's (1.4).
    assert_eq!(h.ctrl.vs(), id.ver());
    assert_eq!(h.ctrl.vs(), nvmf_target::passthru::fake::FAKE_VERSION);
    // The device's namespaces, with its Identify Namespace.
    let (c, list) = h.admin_read(command::identify_active_ns_list(Nsid(0)), 4096);
    assert!(c.status.is_success(), "{}", c.status);
    assert_eq!(&list[..12], &[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
    let ns = h
        .ctrl
        .identify_namespace(Nsid(2))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        IdentifyNamespace::new_unchecked(&ns[..]).nsze(),
        FAKE_BLOCKS
    );
    // Identify went to the device; Connect, Property Get and Keep Alive did not.
    let ops = dev.received_opcodes();
    assert!(ops.iter().all(|&o| o == admin_op::IDENTIFY), "{ops:x?}");
}

#[test]
fn io_reaches_the_device_as_formed_and_its_answers_come_back_unchanged() {
    let dev = Arc::new(FakeController::new(&[1]));
    let t = serve("/dev/nvme-fake-io", dev.clone());
    let mut h = Host::connect(&t);
    // Write 8 blocks, read them back.
    let mut data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let c = h.io(rw(0x01, 1, 100, 8), &mut data.clone(), DataDir::ToCtrl);
    assert!(c.status.is_success(), "write: {}", c.status);
    let mut back = vec![0u8; 4096];
    let c = h.io(rw(0x02, 1, 100, 8), &mut back, DataDir::FromCtrl);
    assert!(c.status.is_success(), "read: {}", c.status);
    assert_eq!(back, data);
    // Zone Append: the LBA written comes back in dwords 0 and 1, as the device gave it.
    let zone = ZONE_BLOCKS;
    for expected in [zone, zone + 1] {
        data.truncate(512);
        let c = h.io(rw(ZONE_APPEND, 1, zone, 1), &mut data, DataDir::ToCtrl);
        assert!(c.status.is_success(), "zone append: {}", c.status);
        assert_eq!((c.dw0, c.dw1), (expected as u32, (expected >> 32) as u32));
    }
    // A vendor command the target knows nothing of reaches the device, and its
    // error status (DNR, media error 81h) and result dword come back unchanged.
    let answer = Status::from_field(0x4281);
    dev.io.answer(
        VENDOR_IO,
        DeviceCompletion {
            status: answer,
            dw0: 0xC0FF_EE00,
            dw1: 7,
        },
    );
    let mut vendor = Sqe::new_unchecked(rw(0x00, 1, 0, 1));
    vendor.set_opcode(VENDOR_IO);
    vendor.set_cdw13(0xABCD);
    let c = h.io(vendor.into_inner(), &mut [], DataDir::None);
    assert_eq!(c.status, answer);
    assert_eq!((c.dw0, c.dw1), (0xC0FF_EE00, 7));
    let got = dev.io.received();
    let last = got
        .last()
        .unwrap_or_else(|| panic!("nothing reached the device"));
    let last = Sqe::new_unchecked(*last);
    assert_eq!(
        (last.opcode(), last.nsid(), last.cdw13()),
        (VENDOR_IO, 1, 0xABCD)
    );
    // A host-to-controller opcode may carry no data (Zone Management Send resetting
    // a zone): it reaches the device.
    let mut reset = Sqe::new_unchecked(rw(0x00, 1, ZONE_BLOCKS, 1));
    reset.set_opcode(ZONE_MGMT_SEND);
    reset.set_cdw13(ZSA_RESET);
    let c = h.io(reset.into_inner(), &mut [], DataDir::None);
    assert!(c.status.is_success(), "zone reset: {}", c.status);
    let got = dev.io.received();
    assert_eq!(got.last().map(|s| s[0]), Some(ZONE_MGMT_SEND));
    // A bidirectional opcode (11b) cannot be described by one buffer: refused here.
    let before = dev.io.received().len();
    let mut bidi = Sqe::new_unchecked(rw(0x00, 1, 0, 1));
    bidi.set_opcode(0x83);
    let c = h.io(bidi.into_inner(), &mut [0u8; 512], DataDir::ToCtrl);
    assert!(
        c.status.is(Sct::Generic, generic::INVALID_OPCODE) && c.status.dnr,
        "{}",
        c.status
    );
    assert_eq!(dev.io.received().len(), before);
    // An NSID the device does not have is the target's Invalid Namespace.
    let c = h.io(rw(0x02, 9, 0, 8), &mut [0u8; 4096], DataDir::FromCtrl);
    assert!(
        c.status.is(Sct::Generic, generic::INVALID_NAMESPACE),
        "{}",
        c.status
    );
}

#[test]
fn admin_commands_follow_the_allowed_list() {
    let dev = Arc::new(FakeController::new(&[1]));
    let t = serve("/dev/nvme-fake-admin", dev.clone());
    let h = Host::connect(&t);
    dev.clear_received();
    // SMART / Health from the device, data and all.
    let smart: Vec<u8> = (0..512u32).map(|i| (i % 251) as u8).collect();
    dev.answer(
        admin_op::GET_LOG_PAGE,
        Canned {
            completion: DeviceCompletion::success(0),
            data: smart.clone(),
        },
    );
    let sqe = command::get_log_page(lid::SMART, Nsid::BROADCAST, 512, 0, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let (c, got) = h.admin_read(sqe, 512);
    assert!(c.status.is_success(), "{}", c.status);
    assert_eq!(got, smart);
    assert_eq!(dev.received_opcodes(), [admin_op::GET_LOG_PAGE]);
    // Format NVM is not allowed by default: refused with DNR, the device never sees it.
    let mut format = Sqe::new_unchecked(rw(0x00, 1, 0, 1));
    format.set_opcode(admin_op::FORMAT_NVM);
    format.set_cdw10(0);
    format.set_cdw11(0);
    format.set_cdw12(0);
    let c = h
        .ctrl
        .admin_execute(format.into_inner(), None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!c.status.is_success() && c.status.dnr, "{}", c.status);
    // Keep Alive is the target's.
    let c = h
        .ctrl
        .admin_execute(command::keep_alive(), None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.status.is_success(), "{}", c.status);
    assert_eq!(dev.received_opcodes(), [admin_op::GET_LOG_PAGE]);
    // A device error status on an admin command comes back unchanged.
    let busy = Status::from_field(0x0102); // generic, Invalid Field... as the device says
    dev.answer(
        admin_op::GET_LOG_PAGE,
        Canned {
            completion: DeviceCompletion {
                status: busy,
                dw0: 0x55,
                dw1: 0,
            },
            data: Vec::new(),
        },
    );
    let sqe = command::get_log_page(lid::SMART, Nsid::BROADCAST, 512, 0, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let (c, _) = h.admin_read(sqe, 512);
    assert_eq!((c.status, c.dw0), (busy, 0x55));
}

#[test]
fn a_device_that_goes_away_takes_its_namespaces_and_the_target_survives() {
    let dev = Arc::new(FakeController::new(&[1, 2]));
    let t = serve("/dev/nvme-fake-gone", dev.clone());
    let mut h = Host::connect(&t);
    let mut data = vec![0x5Au8; 4096];
    let c = h.io(rw(0x01, 1, 0, 8), &mut data, DataDir::ToCtrl);
    assert!(c.status.is_success(), "{}", c.status);
    dev.unplug();
    // In flight when the node vanishes: a path error the host may retry elsewhere.
    let c = h.io(rw(0x02, 1, 0, 8), &mut data, DataDir::FromCtrl);
    assert!(
        c.status.is(
            Sct::PathRelated,
            nvmf_common::wire::status::path::INTERNAL_PATH_ERROR
        ) && !c.status.dnr,
        "{}",
        c.status
    );
    // The control path finds the device gone and removes its namespaces: the host is
    // told (Namespace Attribute Changed) and its I/O is Invalid Namespace from then on.
    let ev = nvmf_tests::ops_support::wait_aer(&h.ctrl);
    assert_eq!(
        ev & 0xFF07,
        u32::from(nvmf_common::wire::admin::aer_notice::NS_ATTR_CHANGED) << 8
            | u32::from(nvmf_common::wire::admin::aer_type::NOTICE),
        "event {ev:#x}"
    );
    let c = h.io(rw(0x02, 2, 0, 8), &mut data, DataDir::FromCtrl);
    assert!(
        c.status.is(Sct::Generic, generic::INVALID_NAMESPACE),
        "{}",
        c.status
    );
    // The target goes on: a new host's Connect and Property Gets are the target's;
    // its Identify Controller reaches the gone device and fails with a path error.
    match connect_as(&t.fabric(1), 2, &sub(), 1, 5000) {
        Ok(_) => panic!("Identify of a gone device succeeded"),
        Err(e) => assert!(e.to_string().contains("Identify"), "{e}"),
    }
    let c = h
        .ctrl
        .admin_execute(command::keep_alive(), None, DataDir::None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.status.is_success(), "{}", c.status);
}

#[test]
fn a_reload_keeps_the_device_namespaces_and_refuses_a_device_change() {
    let dev = Arc::new(FakeController::new(&[1, 2]));
    let t = serve("/dev/nvme-fake-reload", dev.clone());
    let running = t.live.running();
    // The host list changes: applied, the device's namespaces stay.
    let mut hosts = running.clone();
    hosts.subsystems[0].allow_any_host = false;
    hosts.subsystems[0].allowed_hosts = vec![nvmf_tests::ops_support::host(1).0];
    let changes = t
        .live
        .apply(hosts.clone())
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(
        changes.iter().any(|c| c.contains("allowed hosts")),
        "{changes:?}"
    );
    let s = t
        .target
        .subsystem_by_name(SUB)
        .unwrap_or_else(|| panic!("subsystem gone"));
    assert_eq!(s.active_nsids(), [1, 2]);
    let h = Host::connect(&t);
    assert_eq!(
        h.ctrl.identify_namespace(Nsid(1)).map(|v| v.len()).ok(),
        Some(4096)
    );
    // Another device, or other passthru options: refused by name, nothing changes.
    let mut other = hosts.clone();
    if let Some(p) = other.subsystems[0].passthru.as_mut() {
        p.clear_ids = true;
    }
    let e = t
        .live
        .apply(other)
        .expect_err("a passthru change was applied");
    assert!(
        format!("{e:?}").contains("passthru device and options cannot change"),
        "{e:?}"
    );
    assert_eq!(s.active_nsids(), [1, 2]);
}

#[test]
fn ctl_adds_a_passthru_subsystem_and_refuses_namespaces_in_it() {
    use nvmf_target::live::Op;
    provide_device(
        Path::new("/dev/nvme-fake-ctl"),
        Arc::new(FakeController::new(&[3])) as Arc<dyn NvmeController>,
    );
    let t = serve("/dev/nvme-fake-other", Arc::new(FakeController::new(&[1])));
    const ADDED: &str = "nqn.2024-01.io.nvmf-rs:passthru-added";
    t.live
        .execute(&Op::AddSubsystem {
            nqn: ADDED.into(),
            allow_any_host: true,
            serial: None,
            model: None,
            passthru_device: Some("/dev/nvme-fake-ctl".into()),
            clear_ids: true,
        })
        .unwrap_or_else(|e| panic!("{e:?}"));
    let s = t
        .target
        .subsystem_by_name(ADDED)
        .unwrap_or_else(|| panic!("not added"));
    assert!(s.passthru().is_some_and(|p| p.cfg.clear_ids));
    assert_eq!(s.active_nsids(), [3]);
    // Its namespaces are the device's: adding one is refused, nothing changes.
    let e = t
        .live
        .execute(&Op::add_ns(ADDED, Some(1), "ram:4M"))
        .expect_err("a namespace was added to a passthru subsystem");
    assert!(format!("{e:?}").contains("passthru"), "{e:?}");
    assert_eq!(s.active_nsids(), [3]);
    // clear_ids without a device is refused by name.
    let e = t
        .live
        .execute(&Op::AddSubsystem {
            nqn: "nqn.2024-01.io.nvmf-rs:no-device".into(),
            allow_any_host: true,
            serial: None,
            model: None,
            passthru_device: None,
            clear_ids: true,
        })
        .expect_err("clear_ids without a device");
    assert!(format!("{e:?}").contains("clear_ids"), "{e:?}");
}
