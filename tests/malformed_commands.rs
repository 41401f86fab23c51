//! Malformed commands, one test per case, each asserting the exact status (SCT, SC,
//! DNR) and that a well-behaved host is served afterwards. The SQE bytes are made by
//! hand and sent over NVMe/TCP by a scripted host ([`nvmf_tests::raw_tcp`]), so every
//! field, including SGL1, is the test's choice; the reserved-opcode sweeps also run
//! over loopback (NVMe/RDMA), whose command path is a different poll group.
//! Cases already in `loopback_errors.rs` (an LBA range past the namespace, an unknown
//! namespace, a read SGL shorter than NLB x block size, a fused or PRP flush, a log
//! page larger than MDTS or at an offset past the log, an unknown log page) are not
//! repeated.

use nvmf_common::transport::tcp::HostConfig;
use nvmf_common::types::{Cntlid, Nsid};
use nvmf_common::wire::admin::{opcode as admin_op, set_identify};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::nvm::opcode as nvm_op;
use nvmf_common::wire::sgl::{desc_type, subtype, SglDescriptor};
use nvmf_common::wire::sqe::{fuse, psdt, Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Sct, Status};
use nvmf_initiator::command;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_initiator::transport::DataDir;
use nvmf_tests::raw_tcp::{status_of, with_sgl, RawTcp};
use nvmf_tests::{assert_serves, config, start_tcp, TcpEnv};

const BS: u32 = 512;

fn env() -> TcpEnv {
    start_tcp(&config(&["ram:16M"]), TcpOptions::default())
}

/// An enabled admin queue and I/O queue 1 of one controller.
fn pair(env: &TcpEnv) -> (RawTcp, RawTcp, Cntlid) {
    let mut admin = RawTcp::connect(env.addr, HostConfig::default());
    admin.init();
    let cntlid = admin.admin_up(&env.nqn);
    let c = admin.run(
        with_sgl(
            command::set_number_of_queues(2),
            SglDescriptor::transport(0),
        ),
        &[],
    );
    assert!(status_of(&c).is_success());
    let mut io = RawTcp::connect(env.addr, HostConfig::default());
    io.init();
    let c = io.io_connect(&env.nqn, cntlid, 1, 31);
    assert!(status_of(&c).is_success(), "{}", status_of(&c));
    (admin, io, cntlid)
}

#[track_caller]
fn assert_st(c: &[u8; 16], sct: Sct, sc: u8) -> Status {
    let st = status_of(c);
    assert!(st.is(sct, sc), "expected {sct:?}/{sc:#x}, got {st}");
    assert!(st.dnr, "DNR must be set for {st}");
    st
}

fn write_sqe(slba: u64, nlb: u32, sgl: SglDescriptor) -> [u8; SQE_LEN] {
    let s = command::write(Nsid(1), slba, nlb, false).unwrap_or_else(|e| panic!("{e}"));
    with_sgl(s, sgl)
}

fn read_sqe(slba: u64, nlb: u32, sgl: SglDescriptor) -> [u8; SQE_LEN] {
    let s = command::read(Nsid(1), slba, nlb, false).unwrap_or_else(|e| panic!("{e}"));
    with_sgl(s, sgl)
}

/// Reads `nlb` blocks at `slba` through C2HData; returns the data.
fn read_back(io: &mut RawTcp, slba: u64, nlb: u32) -> Vec<u8> {
    let cid = io.next_cid();
    let len = nlb * BS;
    let sqe =
        nvmf_tests::raw_tcp::with_cid(read_sqe(slba, nlb, SglDescriptor::transport(len)), cid);
    io.cmd(&sqe, &[]);
    let mut out = Vec::new();
    loop {
        match io.recv() {
            nvmf_tests::raw_tcp::Rx::C2H { data, success, .. } => {
                out.extend_from_slice(&data);
                if success {
                    return out;
                }
            }
            nvmf_tests::raw_tcp::Rx::Resp(c) => {
                assert!(status_of(&c).is_success(), "{}", status_of(&c));
                return out;
            }
            other => panic!("read: {other:?}"),
        }
    }
}

/// An SGL descriptor with this type and sub type and zeroed fields.
fn raw_sgl(t: u8, st: u8) -> SglDescriptor {
    SglDescriptor::Other {
        desc_type: t,
        subtype: st,
    }
}

/// Sets bytes 0..8 (address) and 8..12 (length) of SGL1 by hand.
fn set_sgl_fields(sqe: &mut [u8; SQE_LEN], addr: u64, len: u32) {
    let at = usize::from(nvmf_common::wire::sqe::offset::DPTR);
    if let Some(a) = sqe.get_mut(at..at + 8) {
        a.copy_from_slice(&addr.to_le_bytes());
    }
    if let Some(l) = sqe.get_mut(at + 8..at + 12) {
        l.copy_from_slice(&len.to_le_bytes());
    }
}

#[test]
fn in_capsule_offset_plus_length_past_the_capsule() {
    let env = env();
    let (_a, mut io, _) = pair(&env);
    // 4 KiB of data, the SGL says 4 KiB at offset 512.
    let c = io.run(
        write_sqe(0, 8, SglDescriptor::in_capsule(512, 4096)),
        &[0x5A; 4096],
    );
    assert_st(&c, Sct::Generic, generic::SGL_OFFSET_INVALID);
    assert_eq!(read_back(&mut io, 0, 8), vec![0u8; 4096], "nothing written");
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn in_capsule_offset_wrapping_around_2_pow_64() {
    let env = env();
    let (_a, mut io, _) = pair(&env);
    let c = io.run(
        write_sqe(0, 1, SglDescriptor::in_capsule(u64::MAX - 255, 512)),
        &[0x5A; 512],
    );
    assert_st(&c, Sct::Generic, generic::SGL_OFFSET_INVALID);
    let c = io.run(
        write_sqe(0, 1, SglDescriptor::in_capsule(u64::MAX, 512)),
        &[0x5A; 512],
    );
    assert_st(&c, Sct::Generic, generic::SGL_OFFSET_INVALID);
    assert_eq!(read_back(&mut io, 0, 1), vec![0u8; 512], "nothing written");
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn in_capsule_data_longer_than_the_command_needs() {
    let env = env();
    let (_a, mut io, _) = pair(&env);
    // One block to write, the SGL describes two.
    let c = io.run(
        write_sqe(0, 1, SglDescriptor::in_capsule(0, 1024)),
        &[0x11; 1024],
    );
    assert_st(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    // A flush carrying data it does not take.
    let c = io.run(
        with_sgl(command::flush(Nsid(1)), SglDescriptor::in_capsule(0, 512)),
        &[0x11; 512],
    );
    assert_st(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    assert_eq!(read_back(&mut io, 0, 2), vec![0u8; 1024], "nothing written");
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn write_length_disagrees_with_nlb_times_block_size() {
    let env = env();
    let (_a, mut io, _) = pair(&env);
    // Transport SGL (R2T path) shorter and longer than NLB x 512.
    for len in [2048, 8192, 4095, 1] {
        let c = io.run(write_sqe(0, 8, SglDescriptor::transport(len)), &[]);
        assert_st(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    }
    // In-capsule data shorter than NLB x 512.
    let c = io.run(
        write_sqe(0, 8, SglDescriptor::in_capsule(0, 2048)),
        &[0x22; 2048],
    );
    assert_st(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    // A write with no data at all.
    let c = io.run(write_sqe(0, 8, SglDescriptor::transport(0)), &[]);
    assert_st(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    assert_eq!(read_back(&mut io, 0, 8), vec![0u8; 4096], "nothing written");
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn sgl_types_tcp_does_not_carry() {
    let env = env();
    let (_a, mut io, _) = pair(&env);
    let cases = [
        raw_sgl(desc_type::BIT_BUCKET, subtype::ADDRESS),
        raw_sgl(desc_type::SEGMENT, subtype::ADDRESS),
        raw_sgl(desc_type::LAST_SEGMENT, subtype::OFFSET),
        raw_sgl(desc_type::VENDOR_SPECIFIC, subtype::ADDRESS),
        raw_sgl(desc_type::TRANSPORT_DATA_BLOCK, subtype::ADDRESS),
        raw_sgl(0x7, 0x3),
        SglDescriptor::keyed(0x1000, 4096, 0x1234, false),
        // A data block with an address (not an offset into the capsule).
        SglDescriptor::DataBlock {
            addr: 0x1000,
            len: 4096,
            subtype: subtype::ADDRESS,
        },
    ];
    for sgl in cases {
        let mut w = write_sqe(0, 8, sgl);
        set_sgl_fields(&mut w, 0, 4096);
        let c = io.run(w, &[]);
        let st = status_of(&c);
        assert!(
            st.is(Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID),
            "write with {sgl:?}: {st}"
        );
        assert!(st.dnr);
        let mut r = read_sqe(0, 8, sgl);
        set_sgl_fields(&mut r, 0, 4096);
        let c = io.run(r, &[]);
        assert_st(&c, Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID);
    }
    assert_eq!(read_back(&mut io, 0, 8), vec![0u8; 4096], "nothing written");
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn prp_instead_of_sgl() {
    let env = env();
    let (mut admin, mut io, _) = pair(&env);
    let mut w = write_sqe(0, 1, SglDescriptor::in_capsule(0, 512));
    Sqe::new_unchecked(&mut w[..]).set_psdt(psdt::PRP);
    let c = io.run(w, &[0x33; 512]);
    assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    // PSDT 2 (metadata SGL segment) and the reserved value 3.
    for p in [psdt::SGL_MPTR_SGL, 3] {
        let mut r = read_sqe(0, 1, SglDescriptor::transport(512));
        Sqe::new_unchecked(&mut r[..]).set_psdt(p);
        let c = io.run(r, &[]);
        assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    }
    let mut id = with_sgl(
        command::identify_controller(),
        SglDescriptor::transport(4096),
    );
    Sqe::new_unchecked(&mut id[..]).set_psdt(psdt::PRP);
    let c = admin.run(id, &[]);
    assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    assert_eq!(read_back(&mut io, 0, 1), vec![0u8; 512], "nothing written");
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn fused_commands() {
    let env = env();
    let (mut admin, mut io, _) = pair(&env);
    for f in [fuse::FIRST, fuse::SECOND, 3] {
        let mut w = write_sqe(0, 1, SglDescriptor::in_capsule(0, 512));
        {
            let mut q = Sqe::new_unchecked(&mut w[..]);
            let flags = q.flags();
            q.set_flags(flags | f);
        }
        let c = io.run(w, &[0x44; 512]);
        assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
        let mut k = with_sgl(command::keep_alive(), SglDescriptor::transport(0));
        {
            let mut q = Sqe::new_unchecked(&mut k[..]);
            let flags = q.flags();
            q.set_flags(flags | f);
        }
        let c = admin.run(k, &[]);
        assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    }
    assert_eq!(read_back(&mut io, 0, 1), vec![0u8; 512], "nothing written");
    assert_serves(&env.fabric, &env.nqn, 100);
}

/// Admin opcodes this controller implements (NVMe over Fabrics, no PCIe queues).
const ADMIN_SUPPORTED: [u8; 8] = [
    admin_op::GET_LOG_PAGE,
    admin_op::IDENTIFY,
    admin_op::ABORT,
    admin_op::SET_FEATURES,
    admin_op::GET_FEATURES,
    admin_op::ASYNC_EVENT_REQUEST,
    admin_op::KEEP_ALIVE,
    admin_op::FABRICS,
];

/// NVM I/O opcodes this controller implements.
const IO_SUPPORTED: [u8; 7] = [
    nvm_op::FLUSH,
    nvm_op::WRITE,
    nvm_op::READ,
    nvm_op::COMPARE,
    nvm_op::WRITE_ZEROES,
    nvm_op::DATASET_MANAGEMENT,
    admin_op::FABRICS,
];

fn bare(opcode: u8, nsid: u32) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    {
        let mut q = Sqe::new_unchecked(&mut s[..]);
        q.set_opcode(opcode);
        q.set_nsid(nsid);
    }
    with_sgl(s, SglDescriptor::transport(0))
}

#[test]
fn every_reserved_admin_opcode_over_tcp() {
    let env = env();
    let (mut admin, _io, _) = pair(&env);
    for op in (0..=u8::MAX).filter(|o| !ADMIN_SUPPORTED.contains(o)) {
        let c = admin.run(bare(op, 0), &[]);
        let st = status_of(&c);
        assert!(
            st.is(Sct::Generic, generic::INVALID_OPCODE) && st.dnr,
            "admin opcode {op:#04x}: {st}"
        );
    }
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn every_reserved_io_opcode_over_tcp() {
    let env = env();
    let (_a, mut io, _) = pair(&env);
    for op in (0..=u8::MAX).filter(|o| !IO_SUPPORTED.contains(o)) {
        let c = io.run(bare(op, 1), &[]);
        let st = status_of(&c);
        assert!(
            st.is(Sct::Generic, generic::INVALID_OPCODE) && st.dnr,
            "I/O opcode {op:#04x}: {st}"
        );
    }
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn every_reserved_opcode_over_loopback() {
    let env = nvmf_tests::start(&config(&["ram:16M"]));
    let mut ctrl = nvmf_tests::connect(&env, 1, 32);
    let mut io = ctrl.take_io_queues().remove(0);
    let mut admin = nvmf_tests::raw_queue(&env, 0, 32);
    // A second controller's admin queue, enabled by hand, for the admin sweep.
    let buf = env.fabric.alloc(1024).unwrap_or_else(|e| panic!("{e}"));
    assert!(buf.write_at(
        0,
        &command::connect_data(
            nvmf_tests::TEST_HOSTID,
            Cntlid::DYNAMIC,
            &env.nqn,
            &nvmf_tests::hostnqn()
        )
    ));
    let c = nvmf_tests::exec(
        &mut admin,
        command::connect(nvmf_common::types::Qid(0), 31, 0),
        Some(&buf),
        DataDir::ToCtrl,
    );
    assert!(c.status.is_success(), "{}", c.status);
    let c = nvmf_tests::exec(
        &mut admin,
        command::property_set(
            nvmf_common::wire::fabrics::reg::CC,
            nvmf_tests::raw_tcp::CC_ENABLE,
        ),
        None,
        DataDir::None,
    );
    assert!(c.status.is_success(), "{}", c.status);
    for op in (0..=u8::MAX).filter(|o| !ADMIN_SUPPORTED.contains(o)) {
        let mut s = command::keep_alive();
        Sqe::new_unchecked(&mut s[..]).set_opcode(op);
        let c = nvmf_tests::exec(&mut admin, s, None, DataDir::None);
        assert!(
            c.status.is(Sct::Generic, generic::INVALID_OPCODE) && c.status.dnr,
            "admin opcode {op:#04x}: {}",
            c.status
        );
    }
    for op in (0..=u8::MAX).filter(|o| !IO_SUPPORTED.contains(o)) {
        let mut s = command::flush(Nsid(1));
        Sqe::new_unchecked(&mut s[..]).set_opcode(op);
        let c = nvmf_tests::exec(&mut io, s, None, DataDir::None);
        assert!(
            c.status.is(Sct::Generic, generic::INVALID_OPCODE) && c.status.dnr,
            "I/O opcode {op:#04x}: {}",
            c.status
        );
    }
    drop(io);
    let mut again = nvmf_tests::connect(&env, 1, 32);
    nvmf_tests::write_read_verify(&mut again, 4096, 4, 16);
}

#[test]
fn identify_with_a_zero_or_oversized_length() {
    let env = env();
    let (mut admin, _io, _) = pair(&env);
    for len in [0, 2048, 4092, 8192] {
        let c = admin.run(
            with_sgl(
                command::identify_controller(),
                SglDescriptor::transport(len),
            ),
            &[],
        );
        assert_st(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    }
    // An unknown CNS.
    let mut s = [0u8; SQE_LEN];
    {
        let mut q = Sqe::new_unchecked(&mut s[..]);
        q.set_opcode(admin_op::IDENTIFY);
        set_identify(&mut q, 0x7E, 0, 0);
    }
    let c = admin.run(with_sgl(s, SglDescriptor::transport(4096)), &[]);
    assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    assert_serves(&env.fabric, &env.nqn, 100);
}

/// Get Log Page of `lid` with a hand-set NUMD (0's based dwords) and offset.
fn log_sqe(l: u8, numd: u32, offset: u64, sgl_len: u32) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    {
        let mut q = Sqe::new_unchecked(&mut s[..]);
        q.set_opcode(admin_op::GET_LOG_PAGE);
        q.set_cdw10(u32::from(l) | ((numd & 0xFFFF) << 16));
        q.set_cdw11(numd >> 16);
        q.set_cdw12(offset as u32);
        q.set_cdw13((offset >> 32) as u32);
    }
    with_sgl(s, SglDescriptor::transport(sgl_len))
}

#[test]
fn get_log_page_with_bad_lengths_and_offsets() {
    let env = env();
    let (mut admin, _io, _) = pair(&env);
    // NUMD 0 is one dword; an SGL of zero bytes disagrees with it.
    let c = admin.run(log_sqe(lid::SMART, 0, 0, 0), &[]);
    assert_st(&c, Sct::Generic, generic::DATA_SGL_LENGTH_INVALID);
    // The largest NUMD (2^32 dwords): beyond MDTS.
    let c = admin.run(log_sqe(lid::SMART, u32::MAX, 0, 4096), &[]);
    assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    // An offset that is not a dword multiple.
    let c = admin.run(log_sqe(lid::SMART, 127, 2, 512), &[]);
    assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    // Offsets past the log, up to the largest.
    for off in [4096, 1 << 32, u64::MAX - 3] {
        let c = admin.run(log_sqe(lid::SMART, 127, off, 512), &[]);
        assert_st(&c, Sct::Generic, generic::INVALID_FIELD);
    }
    // A valid one still works.
    let cid = admin.next_cid();
    admin.cmd(
        &nvmf_tests::raw_tcp::with_cid(log_sqe(lid::SMART, 127, 0, 512), cid),
        &[],
    );
    loop {
        match admin.recv() {
            nvmf_tests::raw_tcp::Rx::C2H { success: true, .. } => break,
            nvmf_tests::raw_tcp::Rx::C2H { .. } => {}
            nvmf_tests::raw_tcp::Rx::Resp(c) => {
                assert!(status_of(&c).is_success(), "{}", status_of(&c));
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn lba_ranges_that_wrap() {
    let env = env();
    let (_a, mut io, _) = pair(&env);
    for slba in [u64::MAX, u64::MAX - 3] {
        let c = io.run(
            write_sqe(slba, 8, SglDescriptor::in_capsule(0, 4096)),
            &[0x66; 4096],
        );
        assert_st(&c, Sct::Generic, generic::LBA_OUT_OF_RANGE);
    }
    let c = io.run(read_sqe(u64::MAX, 1, SglDescriptor::transport(512)), &[]);
    assert_st(&c, Sct::Generic, generic::LBA_OUT_OF_RANGE);
    assert_serves(&env.fabric, &env.nqn, 100);
}

#[test]
fn fabrics_commands_in_the_wrong_place() {
    let env = env();
    let (mut admin, mut io, _) = pair(&env);
    // Property Get on an I/O queue.
    let c = io.run(
        with_sgl(
            command::property_get(nvmf_common::wire::fabrics::reg::CSTS),
            SglDescriptor::transport(0),
        ),
        &[],
    );
    assert_st(&c, Sct::Generic, generic::INVALID_OPCODE);
    // A reserved fabrics command type on the admin queue.
    let mut s = command::property_get(nvmf_common::wire::fabrics::reg::CSTS);
    s[4] = 0x7E;
    let c = admin.run(with_sgl(s, SglDescriptor::transport(0)), &[]);
    assert_st(&c, Sct::Generic, generic::INVALID_OPCODE);
    assert_serves(&env.fabric, &env.nqn, 100);
}
