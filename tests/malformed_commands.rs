//! Malformed commands over NVMe/TCP, table-driven: each row of the [`cases!`] table is
//! one named test made of the queue (admin or I/O queue 1 of an enabled controller),
//! an SQE made by hand (every field, SGL1 included, is the row's choice, sent by the
//! scripted host [`nvmf_tests::raw_tcp`]), the bytes in the capsule and the exact
//! status (SCT, SC, and DNR set). [`run`] also checks that the blocks a refused write
//! names keep their old data, that the same queue goes on serving, and that a
//! well-behaved host is served afterwards. The reserved-opcode sweeps also run over
//! loopback (NVMe/RDMA), whose command path is a different poll group.
//! Cases already in `loopback_errors.rs` (an LBA range past the namespace, an unknown
//! namespace, a read SGL shorter than NLB x block size, a fused or PRP flush, a log
//! page larger than MDTS or at an offset past the log, an unknown log page) are not
//! repeated.

use nvmf_common::transport::tcp::HostConfig;
use nvmf_common::types::{Cntlid, Nsid};
use nvmf_common::wire::admin::{opcode as admin_op, set_identify};
use nvmf_common::wire::fabrics::reg;
use nvmf_common::wire::log::lid;
use nvmf_common::wire::nvm::opcode as nvm_op;
use nvmf_common::wire::sgl::{desc_type, subtype, SglDescriptor};
use nvmf_common::wire::sqe::{fuse, psdt, Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Sct};
use nvmf_initiator::command;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_initiator::transport::DataDir;
use nvmf_tests::raw_tcp::{
    no_data, pair, read_sqe, status_of, with_cid, with_sgl, write_sqe, RawTcp, Rx, BS,
};
use nvmf_tests::{assert_serves, config, start_tcp, TcpEnv};

use generic::{
    DATA_SGL_LENGTH_INVALID as LENGTH, INVALID_FIELD, INVALID_OPCODE, LBA_OUT_OF_RANGE,
    SGL_DESCRIPTOR_TYPE_INVALID as SGL_TYPE, SGL_OFFSET_INVALID,
};

fn env() -> TcpEnv {
    start_tcp(&config(&["ram:16M"]), TcpOptions::default())
}

// ---- the table's vocabulary -------------------------------------------------------

/// The queue a case's command goes on.
#[derive(Debug, Clone, Copy)]
enum On {
    Admin,
    Io,
}

/// One row of the table.
struct Case {
    on: On,
    sqe: fn() -> [u8; SQE_LEN],
    /// Bytes of in-capsule data sent with the SQE.
    data: usize,
    /// The generic status it must get, with DNR.
    sc: u8,
    /// Blocks (slba, nlb) written before the case whose data must survive it.
    unchanged: Option<(u64, u32)>,
}

fn case(on: On, sqe: fn() -> [u8; SQE_LEN], data: usize, sc: u8) -> Case {
    Case {
        on,
        sqe,
        data,
        sc,
        unchanged: None,
    }
}

impl Case {
    fn unchanged(mut self, slba: u64, nlb: u32) -> Case {
        self.unchanged = Some((slba, nlb));
        self
    }
}

/// The data a case's unchanged blocks hold before it runs.
fn old_data(slba: u64, nlb: u32) -> Vec<u8> {
    nvmf_tests::pattern(0xC0, slba, (nlb * BS) as usize)
}

/// A valid Get Log Page (SMART, 512 bytes) on the admin queue succeeds.
fn assert_admin_serves(admin: &mut RawTcp) {
    let cid = admin.next_cid();
    admin.cmd(&with_cid(log_sqe(lid::SMART, 127, 0, 512), cid), &[]);
    let mut got = 0;
    loop {
        match admin.recv() {
            Rx::C2H { data, success, .. } => {
                got += data.len();
                if success {
                    break;
                }
            }
            Rx::Resp(c) => {
                assert!(status_of(&c).is_success(), "{}", status_of(&c));
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, 512, "SMART log bytes");
}

/// Runs one row of the table against a fresh target.
fn run(c: Case) {
    let env = env();
    let (mut admin, mut io, _) = pair(&env, HostConfig::default());
    if let Some((slba, nlb)) = c.unchanged {
        let (st, _) = io.write_r2t(slba, &old_data(slba, nlb));
        assert!(st.is_success(), "writing the old data: {st}");
    }
    let q = match c.on {
        On::Admin => &mut admin,
        On::Io => &mut io,
    };
    let r = q.run((c.sqe)(), &vec![0x5A; c.data]);
    let st = status_of(&r);
    assert!(
        st.is(Sct::Generic, c.sc),
        "expected Generic/{:#x}, got {st}",
        c.sc
    );
    assert!(st.dnr, "DNR must be set for {st}");
    // Nothing was written, and both queues go on.
    if let Some((slba, nlb)) = c.unchanged {
        assert_eq!(
            io.read_back(slba, nlb),
            old_data(slba, nlb),
            "nothing written"
        );
    }
    let d = nvmf_tests::pattern(0xD0, 2000, 4096);
    assert!(io.write_icd(2000, &d).is_success());
    assert_eq!(io.read_back(2000, 8), d);
    assert_admin_serves(&mut admin);
    assert_serves(&env.fabric, &env.nqn, 100);
}

/// One `#[test]` per row: `name => case;`.
macro_rules! cases {
    ($($(#[$doc:meta])* $name:ident => $case:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                run($case);
            }
        )*
    };
}

// ---- builders -----------------------------------------------------------------------

/// An SGL descriptor with this type and sub type and zeroed fields.
fn raw_sgl(t: u8, st: u8) -> SglDescriptor {
    SglDescriptor::Other {
        desc_type: t,
        subtype: st,
    }
}

/// `sqe` with bytes 0..8 (address) and 8..12 (length) of SGL1 set to 0 and 4096.
fn sgl_fields_0_4096(mut sqe: [u8; SQE_LEN]) -> [u8; SQE_LEN] {
    let at = usize::from(nvmf_common::wire::sqe::offset::DPTR);
    sqe[at..at + 8].copy_from_slice(&0u64.to_le_bytes());
    sqe[at + 8..at + 12].copy_from_slice(&4096u32.to_le_bytes());
    sqe
}

/// A write of 8 blocks at LBA 0 with SGL1 `sgl`, its address and length 0 and 4096.
fn write_with(sgl: SglDescriptor) -> [u8; SQE_LEN] {
    sgl_fields_0_4096(write_sqe(0, 8, sgl))
}

/// A read of 8 blocks at LBA 0 with SGL1 `sgl`, its address and length 0 and 4096.
fn read_with(sgl: SglDescriptor) -> [u8; SQE_LEN] {
    sgl_fields_0_4096(read_sqe(0, 8, sgl))
}

/// A data block with an address (not an offset into the capsule).
fn data_block_with_address() -> SglDescriptor {
    SglDescriptor::DataBlock {
        addr: 0x1000,
        len: 4096,
        subtype: subtype::ADDRESS,
    }
}

fn with_psdt(mut sqe: [u8; SQE_LEN], p: u8) -> [u8; SQE_LEN] {
    Sqe::new_unchecked(&mut sqe[..]).set_psdt(p);
    sqe
}

fn fused(mut sqe: [u8; SQE_LEN], f: u8) -> [u8; SQE_LEN] {
    let mut q = Sqe::new_unchecked(&mut sqe[..]);
    let flags = q.flags();
    q.set_flags(flags | f);
    sqe
}

/// A one-block write at LBA 0 with 512 bytes in the capsule.
fn write_512_icd() -> [u8; SQE_LEN] {
    write_sqe(0, 1, SglDescriptor::in_capsule(0, 512))
}

fn identify_with_length(len: u32) -> [u8; SQE_LEN] {
    with_sgl(
        command::identify_controller(),
        SglDescriptor::transport(len),
    )
}

/// Get Log Page of `l` with a hand-set NUMD (0's based dwords) and offset.
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

// ---- the table ----------------------------------------------------------------------

cases! {
    // ---- SGLs and data lengths
    /// 4 KiB of data, the SGL says 4 KiB at offset 512.
    in_capsule_offset_plus_length_past_the_capsule =>
        case(
            On::Io,
            || write_sqe(0, 8, SglDescriptor::in_capsule(512, 4096)),
            4096,
            SGL_OFFSET_INVALID,
        )
        .unchanged(0, 8);
    /// 2 KiB of data, the SGL says 4 KiB at offset 0.
    in_capsule_length_past_the_data_in_the_capsule =>
        case(
            On::Io,
            || write_sqe(0, 8, SglDescriptor::in_capsule(0, 4096)),
            2048,
            SGL_OFFSET_INVALID,
        )
        .unchanged(0, 8);
    in_capsule_offset_wrapping_around_2_pow_64 =>
        case(
            On::Io,
            || write_sqe(0, 1, SglDescriptor::in_capsule(u64::MAX - 255, 512)),
            512,
            SGL_OFFSET_INVALID,
        )
        .unchanged(0, 1);
    in_capsule_offset_u64_max =>
        case(
            On::Io,
            || write_sqe(0, 1, SglDescriptor::in_capsule(u64::MAX, 512)),
            512,
            SGL_OFFSET_INVALID,
        )
        .unchanged(0, 1);
    /// One block to write, the SGL describes two.
    in_capsule_data_longer_than_the_write_needs =>
        case(On::Io, || write_sqe(0, 1, SglDescriptor::in_capsule(0, 1024)), 1024, LENGTH)
            .unchanged(0, 2);
    /// A flush carrying data it does not take.
    in_capsule_data_on_a_flush =>
        case(
            On::Io,
            || with_sgl(command::flush(Nsid(1)), SglDescriptor::in_capsule(0, 512)),
            512,
            LENGTH,
        );
    write_transport_sgl_of_2048_bytes_for_8_blocks =>
        case(On::Io, || write_sqe(0, 8, SglDescriptor::transport(2048)), 0, LENGTH).unchanged(0, 8);
    write_transport_sgl_of_8192_bytes_for_8_blocks =>
        case(On::Io, || write_sqe(0, 8, SglDescriptor::transport(8192)), 0, LENGTH).unchanged(0, 8);
    write_transport_sgl_of_4095_bytes_for_8_blocks =>
        case(On::Io, || write_sqe(0, 8, SglDescriptor::transport(4095)), 0, LENGTH).unchanged(0, 8);
    write_transport_sgl_of_1_byte_for_8_blocks =>
        case(On::Io, || write_sqe(0, 8, SglDescriptor::transport(1)), 0, LENGTH).unchanged(0, 8);
    write_in_capsule_data_shorter_than_8_blocks =>
        case(On::Io, || write_sqe(0, 8, SglDescriptor::in_capsule(0, 2048)), 2048, LENGTH)
            .unchanged(0, 8);
    write_without_data =>
        case(On::Io, || write_sqe(0, 8, SglDescriptor::transport(0)), 0, LENGTH).unchanged(0, 8);

    // ---- SGL types NVMe/TCP does not carry
    write_with_a_bit_bucket_sgl =>
        case(On::Io, || write_with(raw_sgl(desc_type::BIT_BUCKET, subtype::ADDRESS)), 0, SGL_TYPE)
            .unchanged(0, 8);
    read_with_a_bit_bucket_sgl =>
        case(On::Io, || read_with(raw_sgl(desc_type::BIT_BUCKET, subtype::ADDRESS)), 0, SGL_TYPE);
    write_with_a_segment_sgl =>
        case(On::Io, || write_with(raw_sgl(desc_type::SEGMENT, subtype::ADDRESS)), 0, SGL_TYPE)
            .unchanged(0, 8);
    read_with_a_segment_sgl =>
        case(On::Io, || read_with(raw_sgl(desc_type::SEGMENT, subtype::ADDRESS)), 0, SGL_TYPE);
    write_with_a_last_segment_sgl =>
        case(On::Io, || write_with(raw_sgl(desc_type::LAST_SEGMENT, subtype::OFFSET)), 0, SGL_TYPE)
            .unchanged(0, 8);
    read_with_a_last_segment_sgl =>
        case(On::Io, || read_with(raw_sgl(desc_type::LAST_SEGMENT, subtype::OFFSET)), 0, SGL_TYPE);
    write_with_a_vendor_specific_sgl =>
        case(
            On::Io,
            || write_with(raw_sgl(desc_type::VENDOR_SPECIFIC, subtype::ADDRESS)),
            0,
            SGL_TYPE,
        )
        .unchanged(0, 8);
    read_with_a_vendor_specific_sgl =>
        case(
            On::Io,
            || read_with(raw_sgl(desc_type::VENDOR_SPECIFIC, subtype::ADDRESS)),
            0,
            SGL_TYPE,
        );
    write_with_a_transport_data_block_of_address_subtype =>
        case(
            On::Io,
            || write_with(raw_sgl(desc_type::TRANSPORT_DATA_BLOCK, subtype::ADDRESS)),
            0,
            SGL_TYPE,
        )
        .unchanged(0, 8);
    read_with_a_transport_data_block_of_address_subtype =>
        case(
            On::Io,
            || read_with(raw_sgl(desc_type::TRANSPORT_DATA_BLOCK, subtype::ADDRESS)),
            0,
            SGL_TYPE,
        );
    write_with_a_reserved_sgl_type =>
        case(On::Io, || write_with(raw_sgl(0x7, 0x3)), 0, SGL_TYPE).unchanged(0, 8);
    read_with_a_reserved_sgl_type =>
        case(On::Io, || read_with(raw_sgl(0x7, 0x3)), 0, SGL_TYPE);
    write_with_a_keyed_sgl =>
        case(On::Io, || write_with(SglDescriptor::keyed(0x1000, 4096, 0x1234, false)), 0, SGL_TYPE)
            .unchanged(0, 8);
    read_with_a_keyed_sgl =>
        case(On::Io, || read_with(SglDescriptor::keyed(0x1000, 4096, 0x1234, false)), 0, SGL_TYPE);
    write_with_a_data_block_of_address_subtype =>
        case(On::Io, || write_with(data_block_with_address()), 0, SGL_TYPE).unchanged(0, 8);
    read_with_a_data_block_of_address_subtype =>
        case(On::Io, || read_with(data_block_with_address()), 0, SGL_TYPE);
    /// Read data must use a transport SGL: an in-capsule one names the host's data.
    read_with_an_in_capsule_sgl =>
        case(On::Io, || read_sqe(0, 1, SglDescriptor::in_capsule(0, 512)), 512, SGL_TYPE);

    // ---- PRPs and fused commands
    write_with_prp =>
        case(On::Io, || with_psdt(write_512_icd(), psdt::PRP), 512, INVALID_FIELD).unchanged(0, 1);
    /// PSDT 2: a metadata SGL segment.
    read_with_psdt_2 =>
        case(
            On::Io,
            || with_psdt(read_sqe(0, 1, SglDescriptor::transport(512)), psdt::SGL_MPTR_SGL),
            0,
            INVALID_FIELD,
        );
    read_with_reserved_psdt_3 =>
        case(
            On::Io,
            || with_psdt(read_sqe(0, 1, SglDescriptor::transport(512)), 3),
            0,
            INVALID_FIELD,
        );
    identify_with_prp =>
        case(On::Admin, || with_psdt(identify_with_length(4096), psdt::PRP), 0, INVALID_FIELD);
    write_fused_first =>
        case(On::Io, || fused(write_512_icd(), fuse::FIRST), 512, INVALID_FIELD).unchanged(0, 1);
    // A lone second half (Write, FUSE 10b) is Missing Fused Command: tests/fused.rs.
    write_fused_reserved_3 =>
        case(On::Io, || fused(write_512_icd(), 3), 512, INVALID_FIELD).unchanged(0, 1);
    keep_alive_fused_first =>
        case(On::Admin, || fused(no_data(command::keep_alive()), fuse::FIRST), 0, INVALID_FIELD);
    keep_alive_fused_second =>
        case(On::Admin, || fused(no_data(command::keep_alive()), fuse::SECOND), 0, INVALID_FIELD);
    keep_alive_fused_reserved_3 =>
        case(On::Admin, || fused(no_data(command::keep_alive()), 3), 0, INVALID_FIELD);

    // ---- Identify and Get Log Page
    identify_with_a_zero_length =>
        case(On::Admin, || identify_with_length(0), 0, LENGTH);
    identify_with_2048_bytes =>
        case(On::Admin, || identify_with_length(2048), 0, LENGTH);
    identify_with_4092_bytes =>
        case(On::Admin, || identify_with_length(4092), 0, LENGTH);
    identify_with_8192_bytes =>
        case(On::Admin, || identify_with_length(8192), 0, LENGTH);
    identify_with_an_unknown_cns =>
        case(
            On::Admin,
            || {
                let mut s = [0u8; SQE_LEN];
                {
                    let mut q = Sqe::new_unchecked(&mut s[..]);
                    q.set_opcode(admin_op::IDENTIFY);
                    set_identify(&mut q, 0x7E, 0, 0);
                }
                with_sgl(s, SglDescriptor::transport(4096))
            },
            0,
            INVALID_FIELD,
        );
    /// NUMD 0 is one dword; an SGL of zero bytes disagrees with it.
    get_log_page_numd_0_with_an_empty_sgl =>
        case(On::Admin, || log_sqe(lid::SMART, 0, 0, 0), 0, LENGTH);
    /// The largest NUMD (2^32 dwords): beyond MDTS.
    get_log_page_with_the_largest_numd =>
        case(On::Admin, || log_sqe(lid::SMART, u32::MAX, 0, 4096), 0, INVALID_FIELD);
    get_log_page_at_an_offset_not_a_dword_multiple =>
        case(On::Admin, || log_sqe(lid::SMART, 127, 2, 512), 0, INVALID_FIELD);
    get_log_page_at_offset_4096_past_the_log =>
        case(On::Admin, || log_sqe(lid::SMART, 127, 4096, 512), 0, INVALID_FIELD);
    get_log_page_at_offset_2_pow_32 =>
        case(On::Admin, || log_sqe(lid::SMART, 127, 1 << 32, 512), 0, INVALID_FIELD);
    get_log_page_at_the_largest_offset =>
        case(On::Admin, || log_sqe(lid::SMART, 127, u64::MAX - 3, 512), 0, INVALID_FIELD);

    // ---- LBA ranges that wrap, fabrics commands in the wrong place
    write_at_lba_u64_max =>
        case(
            On::Io,
            || write_sqe(u64::MAX, 8, SglDescriptor::in_capsule(0, 4096)),
            4096,
            LBA_OUT_OF_RANGE,
        );
    write_at_lba_u64_max_minus_3 =>
        case(
            On::Io,
            || write_sqe(u64::MAX - 3, 8, SglDescriptor::in_capsule(0, 4096)),
            4096,
            LBA_OUT_OF_RANGE,
        );
    read_at_lba_u64_max =>
        case(On::Io, || read_sqe(u64::MAX, 1, SglDescriptor::transport(512)), 0, LBA_OUT_OF_RANGE);
    property_get_on_an_io_queue =>
        case(On::Io, || no_data(command::property_get(reg::CSTS)), 0, INVALID_OPCODE);
    reserved_fabrics_command_type_on_the_admin_queue =>
        case(
            On::Admin,
            || {
                let mut s = command::property_get(reg::CSTS);
                s[4] = 0x7E;
                no_data(s)
            },
            0,
            INVALID_OPCODE,
        );
}

// ---- reserved opcode sweeps -----------------------------------------------------------

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
const IO_SUPPORTED: [u8; 13] = [
    nvm_op::FLUSH,
    nvm_op::VERIFY,
    nvm_op::COPY,
    nvm_op::WRITE,
    nvm_op::READ,
    nvm_op::COMPARE,
    nvm_op::WRITE_ZEROES,
    nvm_op::DATASET_MANAGEMENT,
    nvm_op::RESERVATION_REGISTER,
    nvm_op::RESERVATION_REPORT,
    nvm_op::RESERVATION_ACQUIRE,
    nvm_op::RESERVATION_RELEASE,
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
    let (mut admin, _io, _) = pair(&env, HostConfig::default());
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
    let (_a, mut io, _) = pair(&env, HostConfig::default());
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
