//! The 16-byte NVMe Completion Queue Entry (Linux `struct nvme_completion`).
//!
//! ```text
//! 0..4   dw0 (command specific result)   4..8 dw1 (result, upper half for u64)
//! 8..10  sq head pointer   10..12 sq identifier
//! 12..14 command identifier
//! 14..16 status: bit 0 phase tag, bits 15:1 status field
//! ```

use super::status::Status;
use super::{get_u16, get_u32, get_u64, set_u16, set_u32, set_u64, view};

/// The length of a completion queue entry.
pub const CQE_LEN: usize = 16;

mod field {
    use core::ops::Range;
    pub const DW0: Range<usize> = 0..4;
    pub const DW1: Range<usize> = 4..8;
    pub const RESULT: Range<usize> = 0..8;
    pub const SQHD: Range<usize> = 8..10;
    pub const SQID: Range<usize> = 10..12;
    pub const CID: Range<usize> = 12..14;
    pub const STATUS: Range<usize> = 14..16;
}

const PHASE_BIT: u16 = 1;
const STATUS_SHIFT: u16 = 1;

view!(
    /// A zero-copy view of a completion queue entry.
    Cqe,
    CQE_LEN
);

impl<T: AsRef<[u8]>> Cqe<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Dword 0: the command specific result.
    pub fn dw0(&self) -> u32 {
        get_u32(self.b(), field::DW0)
    }
    pub fn dw1(&self) -> u32 {
        get_u32(self.b(), field::DW1)
    }
    /// Dwords 0 and 1 as one 64-bit result (`dw0 | dw1 << 32`; Property Get).
    pub fn result_u64(&self) -> u64 {
        get_u64(self.b(), field::RESULT)
    }
    /// Submission queue head pointer.
    pub fn sqhd(&self) -> u16 {
        get_u16(self.b(), field::SQHD)
    }
    /// Submission queue identifier.
    pub fn sqid(&self) -> u16 {
        get_u16(self.b(), field::SQID)
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        get_u16(self.b(), field::CID)
    }
    /// The raw little-endian 16 bits at byte 14 (phase tag in bit 0).
    pub fn status_raw(&self) -> u16 {
        get_u16(self.b(), field::STATUS)
    }
    /// Phase tag.
    pub fn phase(&self) -> bool {
        self.status_raw() & PHASE_BIT != 0
    }
    /// The status field (bits 15:1 of the word at byte 14).
    pub fn status(&self) -> Status {
        Status::from_field(self.status_raw() >> STATUS_SHIFT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_dw0(&mut self, v: u32) {
        set_u32(self.bm(), field::DW0, v)
    }
    pub fn set_dw1(&mut self, v: u32) {
        set_u32(self.bm(), field::DW1, v)
    }
    /// Sets dwords 0 and 1 from one 64-bit result.
    pub fn set_result_u64(&mut self, v: u64) {
        set_u64(self.bm(), field::RESULT, v)
    }
    pub fn set_sqhd(&mut self, v: u16) {
        set_u16(self.bm(), field::SQHD, v)
    }
    pub fn set_sqid(&mut self, v: u16) {
        set_u16(self.bm(), field::SQID, v)
    }
    pub fn set_cid(&mut self, v: u16) {
        set_u16(self.bm(), field::CID, v)
    }
    pub fn set_status_raw(&mut self, v: u16) {
        set_u16(self.bm(), field::STATUS, v)
    }
    /// Sets the phase tag, keeping the status field.
    pub fn set_phase(&mut self, p: bool) {
        let v = (self.status_raw() & !PHASE_BIT) | u16::from(p);
        self.set_status_raw(v)
    }
    /// Sets the status field, keeping the phase tag.
    pub fn set_status(&mut self, s: Status) {
        let v = (self.status_raw() & PHASE_BIT) | (s.to_field() << STATUS_SHIFT);
        self.set_status_raw(v)
    }
    /// Zeroes the whole entry.
    pub fn clear(&mut self) {
        let b = self.bm();
        let n = b.len().min(CQE_LEN);
        b[..n].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::status::{cmd_specific, generic, Sct};
    use crate::wire::WireError;

    #[test]
    fn golden_bytes() {
        let mut c = Cqe::new_unchecked([0u8; CQE_LEN]);
        c.set_dw0(0x0403_0201);
        c.set_dw1(0x0807_0605);
        c.set_sqhd(0x1234);
        c.set_sqid(7);
        c.set_cid(0xBEEF);
        c.set_phase(true);
        // Linux: NVME_SC_CONNECT_INVALID_PARAM | NVME_SC_DNR = 0x4182, shifted left by 1.
        c.set_status(Status::cmd_specific_dnr(
            cmd_specific::CONNECT_INVALID_PARAMETERS,
        ));
        assert_eq!(
            c.as_bytes(),
            &[1, 2, 3, 4, 5, 6, 7, 8, 0x34, 0x12, 7, 0, 0xEF, 0xBE, 0x05, 0x83]
        );
        assert!(c.phase());
        let s = c.status();
        assert!(s.dnr);
        assert!(s.is(
            Sct::CommandSpecific,
            cmd_specific::CONNECT_INVALID_PARAMETERS
        ));
        assert_eq!(c.result_u64(), 0x0807_0605_0403_0201);
        assert_eq!(c.sqhd(), 0x1234);
        assert_eq!(c.sqid(), 7);
        assert_eq!(c.cid(), 0xBEEF);
        // Status setter keeps phase; phase setter keeps status.
        c.set_status(Status::SUCCESS);
        assert_eq!(c.status_raw(), 1);
        c.set_status(Status::generic_dnr(generic::INVALID_FIELD));
        c.set_phase(false);
        assert_eq!(c.status_raw(), 0x4002 << 1);
        c.set_result_u64(u64::MAX);
        assert_eq!((c.dw0(), c.dw1()), (u32::MAX, u32::MAX));
        c.clear();
        assert_eq!(c.as_bytes(), &[0u8; CQE_LEN]);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Cqe::new_checked(&[0u8; 15][..]).err(),
            Some(WireError::Truncated { need: 16, have: 15 })
        );
        let c = Cqe::new_unchecked(&[0xFFu8; 4][..]);
        assert_eq!(c.dw0(), u32::MAX);
        assert_eq!(c.cid(), 0);
        assert!(!c.phase());
    }
}
