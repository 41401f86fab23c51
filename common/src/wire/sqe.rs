//! The 64-byte NVMe Submission Queue Entry (Linux `struct nvme_common_command`).
//!
//! ```text
//! 0      opcode        1  flags (FUSE 1:0, PSDT 7:6)   2..4  command identifier
//! 4..8   nsid (fabrics: byte 4 is FCTYPE)
//! 8..12  cdw2          12..16 cdw3      16..24 metadata pointer
//! 24..40 data pointer (PRP1/PRP2 or SGL1)
//! 40..64 cdw10..cdw15
//! ```

use super::{get_bytes, get_bytes_mut, get_u16, get_u32, get_u64, get_u8, set_u16, set_u32};
use super::{set_u64, set_u8, view};

/// The length of a submission queue entry.
pub const SQE_LEN: usize = 64;

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const CID: Range<usize> = 2..4;
    pub const NSID: Range<usize> = 4..8;
    pub const FCTYPE: usize = 4;
    pub const CDW2: Range<usize> = 8..12;
    pub const CDW3: Range<usize> = 12..16;
    pub const MPTR: Range<usize> = 16..24;
    pub const DPTR: Range<usize> = 24..40;
    pub const CDW10: Range<usize> = 40..44;
    pub const CDW11: Range<usize> = 44..48;
    pub const CDW12: Range<usize> = 48..52;
    pub const CDW13: Range<usize> = 52..56;
    pub const CDW14: Range<usize> = 56..60;
    pub const CDW15: Range<usize> = 60..64;
}

/// Byte offsets of the SQE fields, as `u16` for error locations
/// ([`crate::wire::status::Status::at`]).
pub mod offset {
    pub const OPCODE: u16 = 0;
    pub const FLAGS: u16 = 1;
    pub const CID: u16 = 2;
    pub const NSID: u16 = 4;
    pub const FCTYPE: u16 = 4;
    pub const CDW2: u16 = 8;
    pub const CDW3: u16 = 12;
    pub const MPTR: u16 = 16;
    pub const DPTR: u16 = 24;
    pub const CDW10: u16 = 40;
    pub const CDW11: u16 = 44;
    pub const CDW12: u16 = 48;
    pub const CDW13: u16 = 52;
    pub const CDW14: u16 = 56;
    pub const CDW15: u16 = 60;
}

/// PRP or SGL for Data Transfer (flags bits 7:6; Linux `NVME_CMD_SGL_*`).
pub mod psdt {
    /// PRPs are used for this transfer.
    pub const PRP: u8 = 0;
    /// SGLs; the metadata pointer is a contiguous buffer address.
    pub const SGL_MPTR_CONTIGUOUS: u8 = 1;
    /// SGLs; the metadata pointer is the address of an SGL segment.
    pub const SGL_MPTR_SGL: u8 = 2;
}

/// Fused Operation (flags bits 1:0; Linux `NVME_CMD_FUSE_*`).
pub mod fuse {
    pub const NORMAL: u8 = 0;
    pub const FIRST: u8 = 1;
    pub const SECOND: u8 = 2;
}

const FUSE_MASK: u8 = 0x03;
const PSDT_SHIFT: u8 = 6;
const PSDT_MASK: u8 = 0x03;

view!(
    /// A zero-copy view of a submission queue entry.
    Sqe,
    SQE_LEN
);

impl<T: AsRef<[u8]>> Sqe<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn opcode(&self) -> u8 {
        get_u8(self.b(), field::OPCODE)
    }
    pub fn flags(&self) -> u8 {
        get_u8(self.b(), field::FLAGS)
    }
    /// Fused operation, flags bits 1:0 (see [`fuse`]).
    pub fn fuse(&self) -> u8 {
        self.flags() & FUSE_MASK
    }
    /// PRP or SGL for data transfer, flags bits 7:6 (see [`psdt`]).
    pub fn psdt(&self) -> u8 {
        (self.flags() >> PSDT_SHIFT) & PSDT_MASK
    }
    /// Command identifier.
    pub fn cid(&self) -> u16 {
        get_u16(self.b(), field::CID)
    }
    pub fn nsid(&self) -> u32 {
        get_u32(self.b(), field::NSID)
    }
    /// Fabrics command type (byte 4; only meaningful when opcode is 0x7F).
    pub fn fctype(&self) -> u8 {
        get_u8(self.b(), field::FCTYPE)
    }
    pub fn cdw2(&self) -> u32 {
        get_u32(self.b(), field::CDW2)
    }
    pub fn cdw3(&self) -> u32 {
        get_u32(self.b(), field::CDW3)
    }
    /// Metadata pointer.
    pub fn mptr(&self) -> u64 {
        get_u64(self.b(), field::MPTR)
    }
    /// The 16-byte data pointer (PRP1/PRP2 or SGL1).
    pub fn dptr(&self) -> &[u8] {
        get_bytes(self.b(), field::DPTR)
    }
    /// PRP entry 1 (bytes 24..32).
    pub fn prp1(&self) -> u64 {
        get_u64(self.b(), 24..32)
    }
    /// PRP entry 2 (bytes 32..40).
    pub fn prp2(&self) -> u64 {
        get_u64(self.b(), 32..40)
    }
    pub fn cdw10(&self) -> u32 {
        get_u32(self.b(), field::CDW10)
    }
    pub fn cdw11(&self) -> u32 {
        get_u32(self.b(), field::CDW11)
    }
    pub fn cdw12(&self) -> u32 {
        get_u32(self.b(), field::CDW12)
    }
    pub fn cdw13(&self) -> u32 {
        get_u32(self.b(), field::CDW13)
    }
    pub fn cdw14(&self) -> u32 {
        get_u32(self.b(), field::CDW14)
    }
    pub fn cdw15(&self) -> u32 {
        get_u32(self.b(), field::CDW15)
    }
    /// Command dword `n` (0..=15); 0 for any other `n`.
    pub fn cdw(&self, n: usize) -> u32 {
        if n > 15 {
            return 0;
        }
        get_u32(self.b(), n * 4..n * 4 + 4)
    }
    /// True when PSDT selects SGLs (1 or 2).
    pub fn uses_sgl(&self) -> bool {
        self.psdt() != psdt::PRP
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Sqe<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_opcode(&mut self, v: u8) {
        set_u8(self.bm(), field::OPCODE, v)
    }
    pub fn set_flags(&mut self, v: u8) {
        set_u8(self.bm(), field::FLAGS, v)
    }
    /// Sets flags bits 1:0, keeping the others.
    pub fn set_fuse(&mut self, v: u8) {
        let f = (self.flags() & !FUSE_MASK) | (v & FUSE_MASK);
        self.set_flags(f)
    }
    /// Sets flags bits 7:6, keeping the others.
    pub fn set_psdt(&mut self, v: u8) {
        let f = (self.flags() & !(PSDT_MASK << PSDT_SHIFT)) | ((v & PSDT_MASK) << PSDT_SHIFT);
        self.set_flags(f)
    }
    pub fn set_cid(&mut self, v: u16) {
        set_u16(self.bm(), field::CID, v)
    }
    pub fn set_nsid(&mut self, v: u32) {
        set_u32(self.bm(), field::NSID, v)
    }
    pub fn set_fctype(&mut self, v: u8) {
        set_u8(self.bm(), field::FCTYPE, v)
    }
    pub fn set_cdw2(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW2, v)
    }
    pub fn set_cdw3(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW3, v)
    }
    pub fn set_mptr(&mut self, v: u64) {
        set_u64(self.bm(), field::MPTR, v)
    }
    /// The 16-byte data pointer, mutably (empty when the buffer is short).
    pub fn dptr_mut(&mut self) -> &mut [u8] {
        get_bytes_mut(self.bm(), field::DPTR)
    }
    pub fn set_prp1(&mut self, v: u64) {
        set_u64(self.bm(), 24..32, v)
    }
    pub fn set_prp2(&mut self, v: u64) {
        set_u64(self.bm(), 32..40, v)
    }
    pub fn set_cdw10(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW10, v)
    }
    pub fn set_cdw11(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW11, v)
    }
    pub fn set_cdw12(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW12, v)
    }
    pub fn set_cdw13(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW13, v)
    }
    pub fn set_cdw14(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW14, v)
    }
    pub fn set_cdw15(&mut self, v: u32) {
        set_u32(self.bm(), field::CDW15, v)
    }
    /// Sets command dword `n` (0..=15); no-op for any other `n`.
    pub fn set_cdw(&mut self, n: usize, v: u32) {
        if n <= 15 {
            set_u32(self.bm(), n * 4..n * 4 + 4, v)
        }
    }
    /// Zeroes the whole entry.
    pub fn clear(&mut self) {
        let b = self.bm();
        let n = b.len().min(SQE_LEN);
        b[..n].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    #[test]
    fn golden_bytes() {
        let mut s = Sqe::new_unchecked([0u8; SQE_LEN]);
        s.set_opcode(0x02);
        s.set_fuse(fuse::FIRST);
        s.set_psdt(psdt::SGL_MPTR_CONTIGUOUS);
        s.set_cid(0xBEEF);
        s.set_nsid(0x0102_0304);
        s.set_cdw2(0x1111_1111);
        s.set_cdw3(0x2222_2222);
        s.set_mptr(0x0807_0605_0403_0201);
        s.dptr_mut().copy_from_slice(&[0xAA; 16]);
        s.set_cdw10(0x0A0A_0A0A);
        s.set_cdw11(0x0B0B_0B0B);
        s.set_cdw12(0x0C0C_0C0C);
        s.set_cdw13(0x0D0D_0D0D);
        s.set_cdw14(0x0E0E_0E0E);
        s.set_cdw15(0x0F0F_0F0F);
        let raw = s.into_inner();
        let b = &raw;
        assert_eq!(b[0], 0x02);
        assert_eq!(b[1], 0x41);
        assert_eq!(&b[2..4], &[0xEF, 0xBE]);
        assert_eq!(&b[4..8], &[4, 3, 2, 1]);
        assert_eq!(&b[8..12], &[0x11; 4]);
        assert_eq!(&b[12..16], &[0x22; 4]);
        assert_eq!(&b[16..24], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[24..40], &[0xAA; 16]);
        for (i, v) in (0x0Au8..=0x0F).enumerate() {
            let o = offset::CDW10 as usize + 4 * i;
            assert_eq!(&b[o..o + 4], &[v; 4]);
        }
        let p = Sqe::new_checked(raw).unwrap();
        assert_eq!(p.fuse(), fuse::FIRST);
        assert_eq!(p.psdt(), psdt::SGL_MPTR_CONTIGUOUS);
        assert!(p.uses_sgl());
        assert_eq!(p.cid(), 0xBEEF);
        assert_eq!(p.nsid(), 0x0102_0304);
        assert_eq!(p.fctype(), 4);
        assert_eq!(p.mptr(), 0x0807_0605_0403_0201);
        assert_eq!(p.cdw(10), p.cdw10());
        assert_eq!(p.cdw15(), 0x0F0F_0F0F);
        assert_eq!(p.cdw(16), 0);
        assert_eq!(p.prp1(), 0xAAAA_AAAA_AAAA_AAAA);
    }

    #[test]
    fn flag_setters_keep_other_bits() {
        let mut s = Sqe::new_unchecked([0u8; SQE_LEN]);
        s.set_psdt(psdt::SGL_MPTR_SGL);
        s.set_fuse(fuse::SECOND);
        assert_eq!(s.flags(), 0x82);
        s.set_psdt(psdt::PRP);
        assert_eq!(s.flags(), 0x02);
        s.set_fctype(0x01);
        assert_eq!(s.nsid(), 1);
        s.clear();
        assert_eq!(s.as_bytes(), &[0u8; SQE_LEN]);
    }

    #[test]
    fn truncated_rejected_and_accessors_safe() {
        assert_eq!(
            Sqe::new_checked([0u8; 63]).err(),
            Some(WireError::Truncated { need: 64, have: 63 })
        );
        let mut s = Sqe::new_unchecked([0xFFu8; 10]);
        assert_eq!(s.cdw15(), 0);
        assert_eq!(s.dptr(), &[] as &[u8]);
        assert!(s.dptr_mut().is_empty());
        s.set_cdw10(5);
        assert_eq!(s.cid(), 0xFFFF);
    }
}
