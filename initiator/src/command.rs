//! Submission queue entry builders for the commands the host sends.
//!
//! Owned by the host library. Each builder returns a complete 64-byte SQE except the
//! command identifier (set by [`crate::queue::Queue`]) and the data pointer (filled by
//! the transport). All commands select SGLs for data transfer (PSDT = 01b), as every
//! NVMe over Fabrics command must. Field layouts come from `nvmf_common::wire`; this
//! module only decides values.

use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::admin::{self, cns, opcode as admin_op};
use nvmf_common::wire::fabrics::{
    fctype, prop_size, reg, ConnectCmd, ConnectData, DisconnectCmd, PropertyGetCmd, PropertySetCmd,
    CONNECT_DATA_LEN, NVMF_RECFMT_1_0,
};
use nvmf_common::wire::nvm::{
    self, control, copy, dsm_attr, opcode as nvm_op, CopyRange, DsmRange, COPY_RANGE_LEN,
};
use nvmf_common::wire::sqe::{fuse, psdt, Sqe, SQE_LEN};

use crate::error::Error;

/// A submission queue entry ready for [`crate::queue::Queue::submit`].
pub type SqeBytes = [u8; SQE_LEN];

/// The most logical blocks one Read/Write/Compare/Write Zeroes moves (NLB is 16 bits,
/// 0-based).
pub const MAX_NLB: u32 = control::NLB_MASK + 1;

/// Bytes per dword (Get Log Page counts dwords).
const DWORD: u64 = 4;
/// The largest Get Log Page transfer: NUMD is 32 bits, 0-based.
const MAX_LOG_DWORDS: u64 = 1 << 32;

/// The most ranges one Dataset Management command carries.
pub use nvm::DSM_MAX_RANGES;
/// Length of one Dataset Management range descriptor.
pub use nvm::DSM_RANGE_LEN;

/// An SQE with `opcode` and PSDT = SGL, everything else zero.
fn base(opcode: u8) -> Sqe<SqeBytes> {
    let mut s = Sqe::new_unchecked([0u8; SQE_LEN]);
    s.set_opcode(opcode);
    s.set_psdt(psdt::SGL_MPTR_CONTIGUOUS);
    s
}

/// A fabrics command header (opcode 0x7F, FCTYPE) with PSDT = SGL.
fn fabrics(fct: u8) -> SqeBytes {
    let mut c = ConnectCmd::new_unchecked([0u8; SQE_LEN]);
    c.set_header(fct, 0);
    c.as_sqe_mut().set_psdt(psdt::SGL_MPTR_CONTIGUOUS);
    c.into_inner()
}

// ---- Fabrics ----

/// DH-HMAC-CHAP Authentication Send (`send`, TL = `len`) or Receive (AL = `len`).
pub fn auth(send: bool, len: u32) -> SqeBytes {
    let mut s = fabrics(if send {
        fctype::AUTH_SEND
    } else {
        fctype::AUTH_RECEIVE
    });
    nvmf_common::wire::auth::AuthCmd::new_unchecked(&mut s[..]).set_dhchap(send, 0, len);
    s
}

/// Fabrics Connect for queue `qid`: `sqsize` is 0-based (entries - 1); `kato_ms` is
/// only meaningful on the admin queue (0 disables keep-alive). Record format 0.
pub fn connect(qid: Qid, sqsize: u16, kato_ms: u32) -> SqeBytes {
    let mut c = ConnectCmd::new_unchecked(fabrics(fctype::CONNECT));
    c.set_recfmt(NVMF_RECFMT_1_0);
    c.set_qid(qid.0);
    c.set_sqsize(sqsize);
    c.set_kato(kato_ms);
    c.into_inner()
}

/// The 1024-byte Connect data: host identifier, controller id ([`Cntlid::DYNAMIC`] on
/// the admin queue of a dynamic-model subsystem; the admin queue's CNTLID on I/O
/// queues), subsystem and host NQNs.
pub fn connect_data(
    hostid: [u8; 16],
    cntlid: Cntlid,
    subnqn: &Nqn,
    hostnqn: &Nqn,
) -> [u8; CONNECT_DATA_LEN] {
    let mut d = ConnectData::new_unchecked([0u8; CONNECT_DATA_LEN]);
    d.set_hostid(hostid);
    d.set_cntlid(cntlid.0);
    d.set_subsysnqn(subnqn.as_str());
    d.set_hostnqn(hostnqn.as_str());
    d.into_inner()
}

/// Property Get of the register at `offset` (8 bytes for CAP, 4 for the others).
pub fn property_get(offset: u32) -> SqeBytes {
    let mut c = PropertyGetCmd::new_unchecked(fabrics(fctype::PROPERTY_GET));
    c.set_attrib(prop_attrib(offset));
    c.set_offset(offset);
    c.into_inner()
}

/// Property Set of the register at `offset` to `value` (normally CC).
pub fn property_set(offset: u32, value: u64) -> SqeBytes {
    let mut c = PropertySetCmd::new_unchecked(fabrics(fctype::PROPERTY_SET));
    c.set_attrib(prop_attrib(offset));
    c.set_offset(offset);
    c.set_value(value);
    c.into_inner()
}

/// ATTRIB for a register: its width, 4 bytes for unknown offsets.
fn prop_attrib(offset: u32) -> u8 {
    const EIGHT_BYTES: usize = 8;
    if reg::size_of(offset) == Some(EIGHT_BYTES) {
        prop_size::SIZE_8
    } else {
        prop_size::SIZE_4
    }
}

/// Fabrics Disconnect (deletes the I/O queue it is sent on). Record format 0.
pub fn disconnect() -> SqeBytes {
    let mut c = DisconnectCmd::new_unchecked(fabrics(fctype::DISCONNECT));
    c.set_recfmt(NVMF_RECFMT_1_0);
    c.into_inner()
}

// ---- Admin ----

/// Identify with `cns`, namespace `nsid`, controller `cntid` and command set `csi`;
/// the data is always 4096 bytes.
pub fn identify(cns: u8, nsid: Nsid, cntid: u16, csi: u8) -> SqeBytes {
    let mut s = base(admin_op::IDENTIFY);
    s.set_nsid(nsid.0);
    admin::set_identify(&mut s, cns, cntid, csi);
    s.into_inner()
}

/// Identify Controller.
pub fn identify_controller() -> SqeBytes {
    identify(cns::CONTROLLER, Nsid::NONE, 0, admin::csi::NVM)
}

/// Identify Namespace `nsid`.
pub fn identify_namespace(nsid: Nsid) -> SqeBytes {
    identify(cns::NAMESPACE, nsid, 0, admin::csi::NVM)
}

/// Identify Active Namespace ID list: active NSIDs greater than `after`.
pub fn identify_active_ns_list(after: Nsid) -> SqeBytes {
    identify(cns::ACTIVE_NS_LIST, after, 0, admin::csi::NVM)
}

/// Identify Namespace Identification Descriptor list for `nsid`.
pub fn identify_ns_descriptors(nsid: Nsid) -> SqeBytes {
    identify(cns::NS_ID_DESCRIPTOR_LIST, nsid, 0, admin::csi::NVM)
}

/// Get Log Page `lid` for `nsid`: `len` bytes (a non-zero multiple of 4) at byte
/// `offset`; `rae` retains the asynchronous event.
pub fn get_log_page(
    lid: u8,
    nsid: Nsid,
    len: u64,
    offset: u64,
    rae: bool,
) -> Result<SqeBytes, Error> {
    if len == 0 || !len.is_multiple_of(DWORD) || len / DWORD > MAX_LOG_DWORDS {
        return Err(Error::InvalidArgument(format!(
            "log page length {len} must be a non-zero multiple of 4 up to 16 GiB"
        )));
    }
    if !offset.is_multiple_of(DWORD) {
        return Err(Error::InvalidArgument(format!(
            "log page offset {offset} must be a multiple of 4"
        )));
    }
    let dwords = len / DWORD;
    let mut s = base(admin_op::GET_LOG_PAGE);
    s.set_nsid(nsid.0);
    // `set_get_log_page` takes the count as u32 where 2^32 does not fit: encode the
    // 0-based NUMD by hand in that one case.
    match u32::try_from(dwords) {
        Ok(d) => admin::set_get_log_page(&mut s, lid, 0, rae, d, offset),
        Err(_) => {
            admin::set_get_log_page(&mut s, lid, 0, rae, u32::MAX, offset);
            // u32::MAX dwords encodes NUMD 0xFFFF_FFFE; one more gives 2^32 dwords.
            s.set_cdw10(s.cdw10() | 0xFFFF_0000);
            s.set_cdw11(s.cdw11() | 0x0000_FFFF);
        }
    }
    Ok(s.into_inner())
}

/// Set Features `fid` with dword 11 `value` (and `save` to persist it).
pub fn set_features(fid: u8, nsid: Nsid, value: u32, save: bool) -> SqeBytes {
    let mut s = base(admin_op::SET_FEATURES);
    s.set_nsid(nsid.0);
    s.set_cdw10(admin::set_features_cdw10(fid, save));
    s.set_cdw11(value);
    s.into_inner()
}

/// Get Features `fid` with select `sel` ([`admin::sel`]) and dword 11 `cdw11`.
pub fn get_features(fid: u8, nsid: Nsid, sel: u8, cdw11: u32) -> SqeBytes {
    let mut s = base(admin_op::GET_FEATURES);
    s.set_nsid(nsid.0);
    s.set_cdw10(admin::get_features_cdw10(fid, sel));
    s.set_cdw11(cdw11);
    s.into_inner()
}

/// Set Features Number of Queues: `count` I/O submission and completion queues
/// (1-based here; the command carries them 0-based).
pub fn set_number_of_queues(count: u16) -> SqeBytes {
    let n = count.max(1) - 1;
    set_features(
        admin::fid::NUMBER_OF_QUEUES,
        Nsid::NONE,
        admin::num_queues_encode(n, n),
        false,
    )
}

/// Keep Alive.
pub fn keep_alive() -> SqeBytes {
    base(admin_op::KEEP_ALIVE).into_inner()
}

/// Asynchronous Event Request.
pub fn async_event_request() -> SqeBytes {
    base(admin_op::ASYNC_EVENT_REQUEST).into_inner()
}

/// Abort command `cid` on submission queue `sqid`.
pub fn abort(sqid: Qid, cid: u16) -> SqeBytes {
    const CID_SHIFT: u32 = 16;
    let mut s = base(admin_op::ABORT);
    s.set_cdw10(u32::from(sqid.0) | (u32::from(cid) << CID_SHIFT));
    s.into_inner()
}

// ---- NVM I/O ----

/// Checks a block count for an NLB field (1..=65536).
fn check_nlb(nblocks: u32) -> Result<(), Error> {
    if nblocks == 0 || nblocks > MAX_NLB {
        return Err(Error::InvalidArgument(format!(
            "{nblocks} blocks: one command moves 1..={MAX_NLB}"
        )));
    }
    Ok(())
}

/// A Read/Write/Compare/Write Zeroes SQE: `nblocks` is a count (1..=65536), stored
/// 0-based.
fn rw(opcode: u8, nsid: Nsid, slba: u64, nblocks: u32, fua: bool) -> Result<SqeBytes, Error> {
    check_nlb(nblocks)?;
    let mut s = base(opcode);
    s.set_nsid(nsid.0);
    nvm::set_rw_slba(&mut s, slba);
    nvm::set_rw_nlb(&mut s, nblocks);
    nvm::set_rw_control_bit(&mut s, control::FUA, fua);
    Ok(s.into_inner())
}

/// Read `nblocks` blocks at `slba`.
pub fn read(nsid: Nsid, slba: u64, nblocks: u32, fua: bool) -> Result<SqeBytes, Error> {
    rw(nvm_op::READ, nsid, slba, nblocks, fua)
}

/// Write `nblocks` blocks at `slba`.
pub fn write(nsid: Nsid, slba: u64, nblocks: u32, fua: bool) -> Result<SqeBytes, Error> {
    rw(nvm_op::WRITE, nsid, slba, nblocks, fua)
}

/// Compare `nblocks` blocks at `slba` with the data sent.
pub fn compare(nsid: Nsid, slba: u64, nblocks: u32) -> Result<SqeBytes, Error> {
    rw(nvm_op::COMPARE, nsid, slba, nblocks, false)
}

/// A fused Compare and Write of `nblocks` at `slba`: the Compare (FUSE first) and
/// the Write (FUSE second), to be submitted back to back on one queue. Each carries
/// `nblocks` of data: what the blocks must hold, and what replaces it.
pub fn compare_and_write(
    nsid: Nsid,
    slba: u64,
    nblocks: u32,
) -> Result<(SqeBytes, SqeBytes), Error> {
    let mut first = rw(nvm_op::COMPARE, nsid, slba, nblocks, false)?;
    Sqe::new_unchecked(&mut first[..]).set_fuse(fuse::FIRST);
    let mut second = rw(nvm_op::WRITE, nsid, slba, nblocks, false)?;
    Sqe::new_unchecked(&mut second[..]).set_fuse(fuse::SECOND);
    Ok((first, second))
}

/// Write Zeroes `nblocks` at `slba`; `deac` lets the controller deallocate them.
pub fn write_zeroes(nsid: Nsid, slba: u64, nblocks: u32, deac: bool) -> Result<SqeBytes, Error> {
    let mut s = Sqe::new_unchecked(rw(nvm_op::WRITE_ZEROES, nsid, slba, nblocks, false)?);
    nvm::set_rw_control_bit(&mut s, control::DEAC, deac);
    Ok(s.into_inner())
}

/// Verify `nblocks` blocks at `slba` (no data moves).
pub fn verify(nsid: Nsid, slba: u64, nblocks: u32) -> Result<SqeBytes, Error> {
    rw(nvm_op::VERIFY, nsid, slba, nblocks, false)
}

/// Copy `nr_ranges` (1..=256) source ranges, sent as Descriptor Format 0h data
/// ([`copy_range_data`]), to `sdlba`.
pub fn copy(nsid: Nsid, sdlba: u64, nr_ranges: u32, fua: bool) -> Result<SqeBytes, Error> {
    if nr_ranges == 0 || nr_ranges > copy::MAX_RANGES {
        return Err(Error::InvalidArgument(format!(
            "{nr_ranges} ranges: Copy takes 1..={}",
            copy::MAX_RANGES
        )));
    }
    let mut s = base(nvm_op::COPY);
    s.set_nsid(nsid.0);
    nvm::set_copy(&mut s, sdlba, nr_ranges, copy::DESFMT_0);
    nvm::set_rw_control_bit(&mut s, control::FUA, fua);
    Ok(s.into_inner())
}

/// The data of a Copy command: one 32-byte Format 0h entry per `(slba, nblocks)`
/// source range (`nblocks` 1..=65536).
pub fn copy_range_data(ranges: &[(u64, u32)]) -> Vec<u8> {
    let mut out = vec![0u8; ranges.len() * COPY_RANGE_LEN];
    for (chunk, &(slba, nlb)) in out.chunks_exact_mut(COPY_RANGE_LEN).zip(ranges) {
        let mut r = CopyRange::new_unchecked(chunk);
        r.set_slba(slba);
        r.set_nlb(nlb);
    }
    out
}

// ---- Reservations (the data: keys, see `nvmf_common::wire::resv`) ----

fn resv(op: u8, nsid: Nsid, cdw10: u32) -> SqeBytes {
    let mut s = base(op);
    s.set_nsid(nsid.0);
    s.set_cdw10(cdw10);
    s.into_inner()
}

/// Reservation Register: `action` (register, unregister, replace), Ignore Existing
/// Key, CPTPL; 16 bytes of data (CRKEY, NRKEY).
pub fn resv_register(nsid: Nsid, action: u8, iekey: bool, cptpl: u8) -> SqeBytes {
    use nvmf_common::wire::resv::cdw10;
    let iek = if iekey { cdw10::IEKEY } else { 0 };
    resv(
        nvm_op::RESERVATION_REGISTER,
        nsid,
        u32::from(action) | iek | (u32::from(cptpl) << cdw10::CPTPL_SHIFT),
    )
}

/// Reservation Acquire of type `rtype` with `action`; 16 bytes of data (CRKEY, PRKEY).
pub fn resv_acquire(nsid: Nsid, action: u8, rtype: u8) -> SqeBytes {
    let shift = nvmf_common::wire::resv::cdw10::RTYPE_SHIFT;
    resv(
        nvm_op::RESERVATION_ACQUIRE,
        nsid,
        u32::from(action) | (u32::from(rtype) << shift),
    )
}

/// Reservation Release of type `rtype` with `action`; 8 bytes of data (CRKEY).
pub fn resv_release(nsid: Nsid, action: u8, rtype: u8) -> SqeBytes {
    let shift = nvmf_common::wire::resv::cdw10::RTYPE_SHIFT;
    resv(
        nvm_op::RESERVATION_RELEASE,
        nsid,
        u32::from(action) | (u32::from(rtype) << shift),
    )
}

/// Reservation Report of `len` bytes (a multiple of 4), extended data structure.
pub fn resv_report(nsid: Nsid, len: u32) -> SqeBytes {
    let mut s = Sqe::new_unchecked(resv(
        nvm_op::RESERVATION_REPORT,
        nsid,
        (len / 4).saturating_sub(1),
    ));
    s.set_cdw11(nvmf_common::wire::resv::REPORT_EDS);
    s.into_inner()
}

/// Flush the volatile write cache of `nsid` ([`Nsid::BROADCAST`] for all).
pub fn flush(nsid: Nsid) -> SqeBytes {
    let mut s = base(nvm_op::FLUSH);
    s.set_nsid(nsid.0);
    s.into_inner()
}

/// Dataset Management with `nr_ranges` (1..=256) range descriptors in the data and
/// attributes `attrs` ([`dsm_attr`]).
pub fn dataset_management(nsid: Nsid, nr_ranges: u32, attrs: u32) -> Result<SqeBytes, Error> {
    if nr_ranges == 0 || nr_ranges > DSM_MAX_RANGES {
        return Err(Error::InvalidArgument(format!(
            "{nr_ranges} ranges: Dataset Management takes 1..={DSM_MAX_RANGES}"
        )));
    }
    let mut s = base(nvm_op::DATASET_MANAGEMENT);
    s.set_nsid(nsid.0);
    nvm::set_dsm_nr(&mut s, nr_ranges);
    s.set_cdw11(attrs);
    Ok(s.into_inner())
}

/// Dataset Management with the Deallocate attribute.
pub fn deallocate(nsid: Nsid, nr_ranges: u32) -> Result<SqeBytes, Error> {
    dataset_management(nsid, nr_ranges, dsm_attr::AD)
}

/// The data of a Dataset Management command: one 16-byte descriptor per
/// `(slba, nblocks)` range (context attributes 0).
pub fn dsm_range_data(ranges: &[(u64, u32)]) -> Vec<u8> {
    let mut out = vec![0u8; ranges.len() * DSM_RANGE_LEN];
    for (chunk, &(slba, nlb)) in out.chunks_exact_mut(DSM_RANGE_LEN).zip(ranges) {
        let mut r = DsmRange::new_unchecked(chunk);
        r.set_slba(slba);
        r.set_nlb(nlb);
    }
    out
}

/// A human name for the command in `sqe`, for errors and logs.
pub fn name(sqe: &SqeBytes) -> &'static str {
    let s = Sqe::new_unchecked(&sqe[..]);
    if s.opcode() == admin_op::FABRICS {
        return match s.fctype() {
            fctype::CONNECT => "Connect",
            fctype::PROPERTY_GET => "Property Get",
            fctype::PROPERTY_SET => "Property Set",
            fctype::DISCONNECT => "Disconnect",
            _ => "Fabrics command",
        };
    }
    // Admin and NVM opcodes overlap; callers that care know which queue they used.
    admin_name(s.opcode())
}

/// A human name for an admin (or fabrics) command opcode.
pub fn admin_name(opcode: u8) -> &'static str {
    match opcode {
        admin_op::FABRICS => "Fabrics command",
        admin_op::IDENTIFY => "Identify",
        admin_op::GET_LOG_PAGE => "Get Log Page",
        admin_op::SET_FEATURES => "Set Features",
        admin_op::GET_FEATURES => "Get Features",
        admin_op::KEEP_ALIVE => "Keep Alive",
        admin_op::ASYNC_EVENT_REQUEST => "Asynchronous Event Request",
        admin_op::ABORT => "Abort",
        _ => "command",
    }
}

/// A human name for `opcode` sent on queue `qid` (admin opcodes on the admin queue,
/// NVM opcodes elsewhere; the fabrics opcode on either).
pub fn opcode_name(qid: Qid, opcode: u8) -> &'static str {
    if qid == Qid::ADMIN || opcode == admin_op::FABRICS {
        admin_name(opcode)
    } else {
        io_name(opcode)
    }
}

/// A human name for an NVM I/O command opcode.
pub fn io_name(opcode: u8) -> &'static str {
    match opcode {
        nvm_op::READ => "Read",
        nvm_op::WRITE => "Write",
        nvm_op::FLUSH => "Flush",
        nvm_op::COMPARE => "Compare",
        nvm_op::WRITE_ZEROES => "Write Zeroes",
        nvm_op::DATASET_MANAGEMENT => "Dataset Management",
        nvm_op::VERIFY => "Verify",
        nvm_op::COPY => "Copy",
        _ => "I/O command",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::wire::admin::{fid, log_lid, log_numd, log_offset, log_rae};
    use nvmf_common::wire::fabrics::{cattr, Cc, FABRICS_OPCODE};
    use nvmf_common::wire::log::lid;

    fn nqn(s: &str) -> Nqn {
        Nqn::new(s).unwrap()
    }

    #[test]
    fn connect_golden() {
        let b = connect(Qid(3), 127, 0);
        assert_eq!(b[0], FABRICS_OPCODE);
        assert_eq!(b[1], 0x40, "PSDT = SGL");
        assert_eq!(b[4], fctype::CONNECT);
        assert_eq!(&b[40..52], &[0, 0, 3, 0, 127, 0, 0, 0, 0, 0, 0, 0]);
        let c = ConnectCmd::new_checked(&b[..]).unwrap();
        assert_eq!((c.qid(), c.sqsize(), c.kato(), c.recfmt()), (3, 127, 0, 0));
        assert_eq!(c.cattr() & cattr::DISABLE_SQFLOW, 0);
        let a = connect(Qid::ADMIN, 31, 5000);
        assert_eq!(&a[48..52], &5000u32.to_le_bytes());
    }

    #[test]
    fn connect_data_golden() {
        let id: [u8; 16] = core::array::from_fn(|i| i as u8 + 1);
        let d = connect_data(id, Cntlid::DYNAMIC, &nqn("nqn.sub"), &nqn("nqn.host"));
        assert_eq!(&d[0..16], &id);
        assert_eq!(&d[16..18], &[0xFF, 0xFF]);
        assert_eq!(&d[256..264], b"nqn.sub\0");
        assert_eq!(&d[512..521], b"nqn.host\0");
        let v = ConnectData::new_checked(&d[..]).unwrap();
        assert_eq!(v.subsysnqn(), Some("nqn.sub"));
        assert_eq!(v.cntlid(), 0xFFFF);
        let d = connect_data(id, Cntlid(7), &nqn("nqn.sub"), &nqn("nqn.host"));
        assert_eq!(&d[16..18], &[7, 0]);
    }

    #[test]
    fn property_golden() {
        let g = property_get(reg::CAP);
        assert_eq!((g[0], g[1], g[4], g[40]), (0x7F, 0x40, 0x04, 1));
        assert_eq!(&g[44..48], &[0, 0, 0, 0]);
        let g = property_get(reg::CSTS);
        assert_eq!((g[40], g[44]), (0, 0x1C));
        let cc = Cc(0).with_en(true).with_iosqes(6).with_iocqes(4);
        let s = property_set(reg::CC, u64::from(cc.0));
        assert_eq!((s[4], s[40], s[44]), (0x00, 0, 0x14));
        // Linux: NVME_CC_ENABLE | NVME_CC_IOSQES | NVME_CC_IOCQES = 0x00460001.
        assert_eq!(&s[48..56], &[1, 0, 0x46, 0, 0, 0, 0, 0]);
        let d = disconnect();
        assert_eq!((d[0], d[4]), (0x7F, fctype::DISCONNECT));
    }

    #[test]
    fn admin_golden() {
        let i = identify(cns::CONTROLLER, Nsid::NONE, 0, 0);
        assert_eq!((i[0], i[1]), (0x06, 0x40));
        assert_eq!(&i[40..48], &[1, 0, 0, 0, 0, 0, 0, 0]);
        let i = identify_namespace(Nsid(5));
        assert_eq!(&i[4..8], &[5, 0, 0, 0]);
        assert_eq!(i[40], cns::NAMESPACE);
        let l = identify_active_ns_list(Nsid(0));
        assert_eq!(l[40], cns::ACTIVE_NS_LIST);

        let g = get_log_page(lid::DISCOVERY, Nsid::NONE, 1024, 4096, true).unwrap();
        let s = Sqe::new_unchecked(&g[..]);
        assert_eq!(s.opcode(), 0x02);
        assert_eq!(log_lid(&s), lid::DISCOVERY);
        assert_eq!(log_numd(&s), 256);
        assert_eq!(log_offset(&s), 4096);
        assert!(log_rae(&s));
        // NUMDL = 255 in cdw10 31:16.
        assert_eq!(&g[40..44], &[0x70, 0x80, 0xFF, 0x00]);
        assert!(get_log_page(lid::SMART, Nsid::NONE, 0, 0, false).is_err());
        assert!(get_log_page(lid::SMART, Nsid::NONE, 6, 0, false).is_err());
        assert!(get_log_page(lid::SMART, Nsid::NONE, 8, 2, false).is_err());
        let big = get_log_page(lid::SMART, Nsid::NONE, 1 << 34, 0, false).unwrap();
        let s = Sqe::new_unchecked(&big[..]);
        assert_eq!(admin::log_numd_raw(&s), u32::MAX);

        let f = set_number_of_queues(4);
        assert_eq!(f[0], 0x09);
        assert_eq!(f[40], fid::NUMBER_OF_QUEUES);
        assert_eq!(&f[44..48], &[3, 0, 3, 0]);
        let g = get_features(fid::KEEP_ALIVE_TIMER, Nsid::NONE, admin::sel::CURRENT, 0);
        assert_eq!((g[0], g[40], g[41]), (0x0A, 0x0F, 0));
        assert_eq!(keep_alive()[0], 0x18);
        assert_eq!(async_event_request()[0], 0x0C);
        let a = abort(Qid(2), 0x10);
        assert_eq!(&a[40..44], &[2, 0, 0x10, 0]);
    }

    #[test]
    fn nvm_golden() {
        let r = read(Nsid(1), 0x1_0000_0002, 8, false).unwrap();
        assert_eq!((r[0], r[1]), (0x02, 0x40));
        assert_eq!(&r[4..8], &[1, 0, 0, 0]);
        assert_eq!(&r[40..52], &[2, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0]);
        let w = write(Nsid(1), 0, 65536, true).unwrap();
        assert_eq!(w[0], 0x01);
        assert_eq!(&w[48..52], &[0xFF, 0xFF, 0, 0x40]);
        assert!(read(Nsid(1), 0, 0, false).is_err());
        assert!(write(Nsid(1), 0, 65537, false).is_err());
        let z = write_zeroes(Nsid(1), 10, 1, true).unwrap();
        assert_eq!(z[0], 0x08);
        assert_eq!(&z[48..52], &[0, 0, 0, 0x02]);
        let c = compare(Nsid(2), 3, 2).unwrap();
        assert_eq!((c[0], c[40], c[48]), (0x05, 3, 1));
        let f = flush(Nsid::BROADCAST);
        assert_eq!((f[0], &f[4..8]), (0x00, &[0xFF; 4][..]));
        let d = deallocate(Nsid(1), 256).unwrap();
        assert_eq!((d[0], d[40], d[44]), (0x09, 0xFF, 0x04));
        assert!(deallocate(Nsid(1), 0).is_err());
        assert!(deallocate(Nsid(1), 257).is_err());
        let data = dsm_range_data(&[(0x1122, 16), (5, 1)]);
        assert_eq!(data.len(), 32);
        assert_eq!(
            &data[0..16],
            &[0, 0, 0, 0, 16, 0, 0, 0, 0x22, 0x11, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(io_name(nvm_op::WRITE_ZEROES), "Write Zeroes");
        assert_eq!(name(&connect(Qid(0), 1, 0)), "Connect");
        assert_eq!(name(&keep_alive()), "Keep Alive");
    }
}
