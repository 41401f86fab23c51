//! NVM command set I/O commands: opcodes and SQE field helpers for Read / Write /
//! Compare / Write Zeroes / Verify / Dataset Management / Copy, the DSM range and the
//! Copy source range (descriptor format 0h).
//!
//! Read/Write (Linux `struct nvme_rw_command`): SLBA cdw10|cdw11<<32, NLB cdw12 15:0
//! (0-based), PRINFO cdw12 29:26, FUA bit 30, LR bit 31; DEAC cdw12 bit 25 (Write
//! Zeroes). Dataset Management (Linux `struct nvme_dsm_cmd`): NR cdw10 7:0 (0-based),
//! attributes cdw11.

use super::sqe::Sqe;
use super::{get_u16, get_u32, get_u64, set_u16, set_u32, set_u64, view};

/// NVM command set opcodes (Linux `enum nvme_opcode`).
pub mod opcode {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    pub const COMPARE: u8 = 0x05;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    pub const VERIFY: u8 = 0x0C;
    pub const RESERVATION_REGISTER: u8 = 0x0D;
    pub const RESERVATION_REPORT: u8 = 0x0E;
    pub const RESERVATION_ACQUIRE: u8 = 0x11;
    pub const RESERVATION_RELEASE: u8 = 0x15;
    pub const COPY: u8 = 0x19;
}

/// SQE byte offsets of the I/O command fields (for error locations).
pub mod offset {
    /// Starting LBA (cdw10..cdw11).
    pub const SLBA: u16 = 40;
    /// Number of logical blocks (cdw12 15:0).
    pub const NLB: u16 = 48;
    /// Control (cdw12 31:16: PRINFO, FUA, LR, DEAC).
    pub const CONTROL: u16 = 50;
    /// DSM number of ranges (cdw10 7:0).
    pub const DSM_NR: u16 = 40;
    /// DSM attributes (cdw11).
    pub const DSM_ATTRIBUTES: u16 = 44;
}

/// cdw12 bit fields of Read/Write/Compare/Write Zeroes/Verify
/// (Linux `NVME_RW_FUA`, `NVME_RW_LR`, `NVME_WZ_DEAC`, `NVME_RW_PRINFO_*`).
pub mod control {
    pub const NLB_MASK: u32 = 0xFFFF;
    pub const DEAC: u32 = 1 << 25;
    pub const PRINFO_SHIFT: u32 = 26;
    pub const PRINFO_MASK: u32 = 0xF;
    pub const FUA: u32 = 1 << 30;
    pub const LR: u32 = 1 << 31;
    /// PRINFO bit: check the reference tag.
    pub const PRINFO_PRCHK_REF: u8 = 1 << 0;
    /// PRINFO bit: check the application tag.
    pub const PRINFO_PRCHK_APP: u8 = 1 << 1;
    /// PRINFO bit: check the guard.
    pub const PRINFO_PRCHK_GUARD: u8 = 1 << 2;
    /// PRINFO bit: protection information action.
    pub const PRINFO_PRACT: u8 = 1 << 3;
}

/// Dataset Management attributes (cdw11; Linux `NVME_DSMGMT_IDR/IDW/AD`).
pub mod dsm_attr {
    /// Integral dataset for read.
    pub const IDR: u32 = 1 << 0;
    /// Integral dataset for write.
    pub const IDW: u32 = 1 << 1;
    /// Deallocate.
    pub const AD: u32 = 1 << 2;
}

/// The most ranges one Dataset Management command carries (NR is 8 bits, 0-based).
pub const DSM_MAX_RANGES: u32 = 256;

/// Starting LBA (cdw10 | cdw11 << 32).
pub fn rw_slba<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u64 {
    u64::from(sqe.cdw10()) | (u64::from(sqe.cdw11()) << 32)
}

/// Number of logical blocks as a count (the 0-based NLB field + 1, so 1..=65536).
pub fn rw_nlb<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u32 {
    (sqe.cdw12() & control::NLB_MASK) + 1
}

/// Force Unit Access (cdw12 bit 30).
pub fn rw_fua<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> bool {
    sqe.cdw12() & control::FUA != 0
}

/// Limited Retry (cdw12 bit 31).
pub fn rw_lr<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> bool {
    sqe.cdw12() & control::LR != 0
}

/// Protection information field (cdw12 29:26).
pub fn rw_prinfo<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    ((sqe.cdw12() >> control::PRINFO_SHIFT) & control::PRINFO_MASK) as u8
}

/// Deallocate (Write Zeroes cdw12 bit 25).
pub fn write_zeroes_deac<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> bool {
    sqe.cdw12() & control::DEAC != 0
}

/// Sets SLBA (cdw10/cdw11).
pub fn set_rw_slba<T: AsRef<[u8]> + AsMut<[u8]>>(sqe: &mut Sqe<T>, slba: u64) {
    sqe.set_cdw10(slba as u32);
    sqe.set_cdw11((slba >> 32) as u32);
}

/// Sets NLB from a block count (1..=65536; stores count - 1, keeping cdw12 31:16).
/// A count of 0 or over 65536 is clamped into range.
pub fn set_rw_nlb<T: AsRef<[u8]> + AsMut<[u8]>>(sqe: &mut Sqe<T>, count: u32) {
    let v = count.clamp(1, control::NLB_MASK + 1) - 1;
    let c = (sqe.cdw12() & !control::NLB_MASK) | v;
    sqe.set_cdw12(c);
}

/// Sets or clears a cdw12 control bit ([`control::FUA`], [`control::LR`], [`control::DEAC`]).
pub fn set_rw_control_bit<T: AsRef<[u8]> + AsMut<[u8]>>(sqe: &mut Sqe<T>, bit: u32, on: bool) {
    let c = sqe.cdw12();
    sqe.set_cdw12(if on { c | bit } else { c & !bit });
}

/// Sets PRINFO (cdw12 29:26).
pub fn set_rw_prinfo<T: AsRef<[u8]> + AsMut<[u8]>>(sqe: &mut Sqe<T>, prinfo: u8) {
    let m = control::PRINFO_MASK << control::PRINFO_SHIFT;
    let c = (sqe.cdw12() & !m) | ((u32::from(prinfo) << control::PRINFO_SHIFT) & m);
    sqe.set_cdw12(c);
}

/// Number of DSM ranges as a count (cdw10 7:0, 0-based, + 1 → 1..=256).
pub fn dsm_nr<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u32 {
    (sqe.cdw10() & 0xFF) + 1
}

/// DSM attributes (cdw11, see [`dsm_attr`]).
pub fn dsm_attributes<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u32 {
    sqe.cdw11()
}

/// Sets the DSM range count (1..=256, clamped; stores count - 1).
pub fn set_dsm_nr<T: AsRef<[u8]> + AsMut<[u8]>>(sqe: &mut Sqe<T>, count: u32) {
    let v = count.clamp(1, DSM_MAX_RANGES) - 1;
    sqe.set_cdw10((sqe.cdw10() & !0xFF) | v);
}

/// The length of one Dataset Management range (Linux `struct nvme_dsm_range`).
pub const DSM_RANGE_LEN: usize = 16;

mod field {
    use core::ops::Range;
    pub const CATTR: Range<usize> = 0..4;
    pub const NLB: Range<usize> = 4..8;
    pub const SLBA: Range<usize> = 8..16;
}

view!(
    /// A view of one Dataset Management range.
    DsmRange,
    DSM_RANGE_LEN
);

impl<T: AsRef<[u8]>> DsmRange<T> {
    /// Context attributes.
    pub fn cattr(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::CATTR)
    }
    /// Length in logical blocks (NOT 0-based).
    pub fn nlb(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::NLB)
    }
    /// Starting LBA.
    pub fn slba(&self) -> u64 {
        get_u64(self.buffer.as_ref(), field::SLBA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DsmRange<T> {
    pub fn set_cattr(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::CATTR, v)
    }
    pub fn set_nlb(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), field::NLB, v)
    }
    pub fn set_slba(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), field::SLBA, v)
    }
}

/// Copy: cdw12 fields (NR 7:0 is 0-based, DESFMT 11:8, FUA 30, LR 31).
pub mod copy {
    pub const NR_MASK: u32 = 0xFF;
    pub const DESFMT_SHIFT: u32 = 8;
    pub const DESFMT_MASK: u32 = 0xF;
    /// Source Range Entries Copy Descriptor Format 0h (32 bytes, 64-bit LBAs).
    pub const DESFMT_0: u8 = 0;
    /// Byte offset of cdw12's DESFMT in the SQE (error location).
    pub const DESFMT_OFFSET: u16 = 49;
    /// Byte offset of cdw10 (SDLBA) in the SQE.
    pub const SDLBA_OFFSET: u16 = 40;
    /// The most source ranges one command may carry (NR is 8 bits, 0-based).
    pub const MAX_RANGES: u32 = 256;
}

/// Copy: the Starting Destination LBA (cdw10..cdw11).
pub fn copy_sdlba<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u64 {
    u64::from(sqe.cdw10()) | (u64::from(sqe.cdw11()) << 32)
}

/// Copy: the number of source ranges (NR + 1).
pub fn copy_ranges<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u32 {
    (sqe.cdw12() & copy::NR_MASK) + 1
}

/// Copy: the descriptor format of the source ranges.
pub fn copy_desfmt<T: AsRef<[u8]>>(sqe: &Sqe<T>) -> u8 {
    ((sqe.cdw12() >> copy::DESFMT_SHIFT) & copy::DESFMT_MASK) as u8
}

/// Copy: sets SDLBA, the number of ranges (1..=256, stored 0-based) and DESFMT.
pub fn set_copy<T: AsRef<[u8]> + AsMut<[u8]>>(
    sqe: &mut Sqe<T>,
    sdlba: u64,
    ranges: u32,
    desfmt: u8,
) {
    sqe.set_cdw10(sdlba as u32);
    sqe.set_cdw11((sdlba >> 32) as u32);
    let nr = ranges.clamp(1, copy::MAX_RANGES) - 1;
    let keep = sqe.cdw12() & !(copy::NR_MASK | (copy::DESFMT_MASK << copy::DESFMT_SHIFT));
    sqe.set_cdw12(keep | nr | ((u32::from(desfmt) & copy::DESFMT_MASK) << copy::DESFMT_SHIFT));
}

/// The length of one Source Range Entry in Copy Descriptor Format 0h.
pub const COPY_RANGE_LEN: usize = 32;

mod copy_field {
    use core::ops::Range;
    pub const SLBA: Range<usize> = 8..16;
    pub const NLB: Range<usize> = 16..18;
}

view!(
    /// A view of one Copy source range in Descriptor Format 0h (Linux
    /// `struct nvme_copy_range`).
    CopyRange,
    COPY_RANGE_LEN
);

impl<T: AsRef<[u8]>> CopyRange<T> {
    /// Starting LBA.
    pub fn slba(&self) -> u64 {
        get_u64(self.buffer.as_ref(), copy_field::SLBA)
    }
    /// Number of logical blocks (NOT 0-based: the field + 1).
    pub fn nlb(&self) -> u32 {
        u32::from(get_u16(self.buffer.as_ref(), copy_field::NLB)) + 1
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CopyRange<T> {
    pub fn set_slba(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), copy_field::SLBA, v)
    }
    /// Sets the length (1..=65536 blocks; stored 0-based).
    pub fn set_nlb(&mut self, blocks: u32) {
        let v = blocks.clamp(1, 1 << 16) - 1;
        set_u16(self.buffer.as_mut(), copy_field::NLB, v as u16)
    }
}

/// Iterates the complete 16-byte ranges in `data` (at most `count`).
pub fn dsm_ranges(data: &[u8], count: usize) -> impl Iterator<Item = DsmRange<&[u8]>> {
    data.chunks_exact(DSM_RANGE_LEN)
        .take(count)
        .map(DsmRange::new_unchecked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::sqe::SQE_LEN;

    #[test]
    fn rw_fields() {
        let mut s = Sqe::new_unchecked([0u8; SQE_LEN]);
        s.set_opcode(opcode::WRITE);
        set_rw_slba(&mut s, 0x0000_0001_8000_0002);
        set_rw_nlb(&mut s, 8);
        set_rw_control_bit(&mut s, control::FUA, true);
        set_rw_prinfo(&mut s, control::PRINFO_PRACT | control::PRINFO_PRCHK_REF);
        let b = s.as_bytes();
        assert_eq!(&b[40..48], &[2, 0, 0, 0x80, 1, 0, 0, 0]);
        // NLB 7 (0-based), FUA bit 30, PRINFO 0x9 << 26 = 0x2400_0000.
        assert_eq!(&b[48..52], &[7, 0, 0, 0x64]);
        assert_eq!(rw_slba(&s), 0x0000_0001_8000_0002);
        assert_eq!(rw_nlb(&s), 8);
        assert!(rw_fua(&s) && !rw_lr(&s) && !write_zeroes_deac(&s));
        assert_eq!(rw_prinfo(&s), 0x9);
        set_rw_control_bit(&mut s, control::LR, true);
        set_rw_control_bit(&mut s, control::FUA, false);
        set_rw_control_bit(&mut s, control::DEAC, true);
        assert!(rw_lr(&s) && !rw_fua(&s) && write_zeroes_deac(&s));
        assert_eq!(s.cdw12(), 0x8000_0000 | 0x2400_0000 | 0x0200_0000 | 7);
        set_rw_nlb(&mut s, 65536);
        assert_eq!(rw_nlb(&s), 65536);
        assert_eq!(s.cdw12() & 0xFFFF, 0xFFFF);
        set_rw_nlb(&mut s, 0);
        assert_eq!(rw_nlb(&s), 1);
        assert_eq!(offset::CONTROL, 50);
    }

    #[test]
    fn dsm() {
        let mut s = Sqe::new_unchecked([0u8; SQE_LEN]);
        s.set_opcode(opcode::DATASET_MANAGEMENT);
        set_dsm_nr(&mut s, 256);
        s.set_cdw11(dsm_attr::AD);
        assert_eq!(s.as_bytes()[40], 0xFF);
        assert_eq!(dsm_nr(&s), 256);
        assert_eq!(dsm_attributes(&s), 4);
        let mut buf = [0u8; 2 * DSM_RANGE_LEN];
        let mut r = DsmRange::new_unchecked(&mut buf[16..]);
        r.set_cattr(0x0102_0304);
        r.set_nlb(16);
        r.set_slba(0x1122_3344_5566_7788);
        assert_eq!(
            &buf[16..],
            &[4, 3, 2, 1, 16, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        let v: Vec<_> = dsm_ranges(&buf, 5).collect();
        assert_eq!(v.len(), 2);
        assert_eq!((v[1].nlb(), v[1].slba()), (16, 0x1122_3344_5566_7788));
        assert!(DsmRange::new_checked(&buf[..15]).is_err());
    }
}
