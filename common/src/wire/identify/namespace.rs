//! Identify Namespace (CNS 00h; Linux `struct nvme_id_ns`): the field offsets, the
//! [`IdentifyNamespace`] view, LBA formats and the named values of its fields.

use crate::wire::{get_bytes, get_bytes_n, getters, set_padded, setters, view};

use super::IDENTIFY_LEN;

mod ns {
    use core::ops::Range;
    pub const NSZE: Range<usize> = 0..8;
    pub const NCAP: Range<usize> = 8..16;
    pub const NUSE: Range<usize> = 16..24;
    pub const NSFEAT: Range<usize> = 24..25;
    pub const NLBAF: Range<usize> = 25..26;
    pub const FLBAS: Range<usize> = 26..27;
    pub const MC: Range<usize> = 27..28;
    pub const DPC: Range<usize> = 28..29;
    pub const DPS: Range<usize> = 29..30;
    pub const NMIC: Range<usize> = 30..31;
    pub const RESCAP: Range<usize> = 31..32;
    pub const FPI: Range<usize> = 32..33;
    pub const DLFEAT: Range<usize> = 33..34;
    pub const NAWUN: Range<usize> = 34..36;
    pub const NAWUPF: Range<usize> = 36..38;
    pub const NACWU: Range<usize> = 38..40;
    pub const NABSN: Range<usize> = 40..42;
    pub const NABO: Range<usize> = 42..44;
    pub const NABSPF: Range<usize> = 44..46;
    pub const NOIOB: Range<usize> = 46..48;
    pub const NVMCAP: Range<usize> = 48..64;
    pub const NPWG: Range<usize> = 64..66;
    pub const NPWA: Range<usize> = 66..68;
    pub const NPDG: Range<usize> = 68..70;
    pub const NPDA: Range<usize> = 70..72;
    pub const NOWS: Range<usize> = 72..74;
    pub const MSSRL: Range<usize> = 74..76;
    pub const MCL: Range<usize> = 76..80;
    pub const MSRC: Range<usize> = 80..81;
    pub const NULBAF: Range<usize> = 81..82;
    pub const ANAGRPID: Range<usize> = 92..96;
    pub const NSATTR: Range<usize> = 99..100;
    pub const NVMSETID: Range<usize> = 100..102;
    pub const ENDGID: Range<usize> = 102..104;
    pub const NGUID: Range<usize> = 104..120;
    pub const EUI64: Range<usize> = 120..128;
    pub const LBAF: usize = 128;
    pub const VS: Range<usize> = 384..4096;
}

/// Number of LBA format slots in Identify Namespace.
pub const NUM_LBAF: usize = 64;
/// The length of one LBA format descriptor.
pub const LBAF_LEN: usize = 4;

/// One LBA format (Linux `struct nvme_lbaf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct LbaFormat {
    /// Metadata size per block, bytes.
    pub ms: u16,
    /// LBA data size, log2 bytes (9 = 512, 12 = 4096; 0 = format not available).
    pub ds: u8,
    /// Relative performance, bits 1:0 ([`rp`]).
    pub rp: u8,
}

impl LbaFormat {
    /// A format with `1 << ds` byte blocks and no metadata.
    pub const fn new(ds: u8) -> Self {
        LbaFormat { ms: 0, ds, rp: 0 }
    }
    pub const fn to_bytes(self) -> [u8; LBAF_LEN] {
        let ms = self.ms.to_le_bytes();
        [ms[0], ms[1], self.ds, self.rp & 0x3]
    }
    pub const fn from_bytes(b: [u8; LBAF_LEN]) -> Self {
        LbaFormat {
            ms: u16::from_le_bytes([b[0], b[1]]),
            ds: b[2],
            rp: b[3] & 0x3,
        }
    }
    /// The block size in bytes, if `ds` is a plausible value (9..=31).
    pub const fn block_size(self) -> Option<u32> {
        if self.ds >= 9 && self.ds < 32 {
            Some(1u32 << self.ds)
        } else {
            None
        }
    }
}

/// Relative performance values (Linux `NVME_LBAF_RP_*`).
pub mod rp {
    pub const BEST: u8 = 0;
    pub const BETTER: u8 = 1;
    pub const GOOD: u8 = 2;
    pub const DEGRADED: u8 = 3;
}

/// Namespace features (NSFEAT; Linux `NVME_NS_FEAT_*`).
pub mod nsfeat {
    /// Thin provisioning.
    pub const THIN: u8 = 1 << 0;
    /// NAWUN, NAWUPF, NACWU are defined (Linux `NVME_NS_FEAT_ATOMICS`).
    pub const ATOMICS: u8 = 1 << 1;
    /// Deallocated or unwritten logical block error.
    pub const DAE: u8 = 1 << 2;
    /// NGUID / EUI64 never reused.
    pub const UIDREUSE: u8 = 1 << 3;
    /// NPWG, NPWA, NPDG, NPDA, NOWS are defined (Linux `NVME_NS_FEAT_IO_OPT`).
    pub const OPTPERF: u8 = 1 << 4;
}

/// Formatted LBA size (FLBAS): index bits 3:0 (low) and 6:5 (high), bit 4 extended
/// metadata (Linux `NVME_NS_FLBAS_*`).
pub mod flbas {
    pub const LBA_MASK: u8 = 0x0F;
    pub const META_EXT: u8 = 1 << 4;
    pub const LBA_UMASK: u8 = 0x60;
    pub const LBA_USHIFT: u8 = 1;
}

/// The LBA format index FLBAS selects (Linux `nvme_lbaf_index`).
pub const fn flbas_index(v: u8) -> u8 {
    (v & flbas::LBA_MASK) | ((v & flbas::LBA_UMASK) >> flbas::LBA_USHIFT)
}

/// FLBAS for format `index` (0..64) and extended metadata flag.
pub const fn flbas_encode(index: u8, meta_ext: bool) -> u8 {
    let low = index & flbas::LBA_MASK;
    let high = (index << flbas::LBA_USHIFT) & flbas::LBA_UMASK;
    low | high | if meta_ext { flbas::META_EXT } else { 0 }
}

/// Metadata capabilities (MC; Linux `NVME_MC_*`).
pub mod mc {
    pub const EXTENDED_LBA: u8 = 1 << 0;
    pub const METADATA_PTR: u8 = 1 << 1;
}

/// End-to-end data protection capabilities (DPC; Linux `NVME_NS_DPC_*`).
pub mod dpc {
    pub const PI_TYPE1: u8 = 1 << 0;
    pub const PI_TYPE2: u8 = 1 << 1;
    pub const PI_TYPE3: u8 = 1 << 2;
    pub const PI_FIRST: u8 = 1 << 3;
    pub const PI_LAST: u8 = 1 << 4;
}

/// End-to-end data protection type settings (DPS; Linux `NVME_NS_DPS_*`).
pub mod dps {
    pub const PI_MASK: u8 = 0x7;
    pub const PI_TYPE1: u8 = 1;
    pub const PI_TYPE2: u8 = 2;
    pub const PI_TYPE3: u8 = 3;
    pub const PI_FIRST: u8 = 1 << 3;
}

/// Namespace multi-path I/O and sharing capabilities (NMIC).
pub mod nmic {
    pub const SHARED: u8 = 1 << 0;
}

/// Reservation capabilities (RESCAP; Linux `enum nvme_pr_capabilities`).
pub mod rescap {
    pub const PTPL: u8 = 1 << 0;
    pub const WRITE_EXCLUSIVE: u8 = 1 << 1;
    pub const EXCLUSIVE_ACCESS: u8 = 1 << 2;
    pub const WRITE_EXCLUSIVE_REG_ONLY: u8 = 1 << 3;
    pub const EXCLUSIVE_ACCESS_REG_ONLY: u8 = 1 << 4;
    pub const WRITE_EXCLUSIVE_ALL_REGS: u8 = 1 << 5;
    pub const EXCLUSIVE_ACCESS_ALL_REGS: u8 = 1 << 6;
    pub const IEKEY: u8 = 1 << 7;
}

/// Deallocate logical block features (DLFEAT).
pub mod dlfeat {
    /// Bits 2:0: what a read of a deallocated block returns.
    pub const READ_BEHAVIOR_MASK: u8 = 0x7;
    pub const READ_NOT_REPORTED: u8 = 0;
    /// 001b: deallocated blocks read as zeroes.
    pub const READ_ZEROES: u8 = 1;
    /// 010b: deallocated blocks read as all ones.
    pub const READ_ONES: u8 = 2;
    /// Write Zeroes supports the Deallocate bit.
    pub const WRITE_ZEROES_DEAC: u8 = 1 << 3;
    /// Guard field of deallocated blocks is the CRC of the data.
    pub const GUARD_CRC: u8 = 1 << 4;
}

/// Namespace attributes (NSATTR; Linux `NVME_NS_ATTR_RO`).
pub mod nsattr {
    pub const WRITE_PROTECTED: u8 = 1 << 0;
}

view!(
    /// A view of the Identify Namespace data structure (CNS 00h).
    IdentifyNamespace,
    IDENTIFY_LEN
);

impl<T: AsRef<[u8]>> IdentifyNamespace<T> {
    getters! {
        /// Namespace size, blocks.
        nsze: u64 = ns::NSZE,
        /// Namespace capacity, blocks.
        ncap: u64 = ns::NCAP,
        /// Namespace utilization, blocks.
        nuse: u64 = ns::NUSE,
        nsfeat: u8 = ns::NSFEAT,
        /// Number of LBA formats (0-based).
        nlbaf: u8 = ns::NLBAF,
        flbas: u8 = ns::FLBAS,
        mc: u8 = ns::MC,
        dpc: u8 = ns::DPC,
        dps: u8 = ns::DPS,
        nmic: u8 = ns::NMIC,
        rescap: u8 = ns::RESCAP,
        /// Format progress indicator.
        fpi: u8 = ns::FPI,
        dlfeat: u8 = ns::DLFEAT,
        nawun: u16 = ns::NAWUN,
        nawupf: u16 = ns::NAWUPF,
        nacwu: u16 = ns::NACWU,
        nabsn: u16 = ns::NABSN,
        nabo: u16 = ns::NABO,
        nabspf: u16 = ns::NABSPF,
        /// Optimal I/O boundary, blocks.
        noiob: u16 = ns::NOIOB,
        /// NVM capacity, bytes.
        nvmcap: u128 = ns::NVMCAP,
        /// Preferred write granularity (0-based blocks).
        npwg: u16 = ns::NPWG,
        npwa: u16 = ns::NPWA,
        /// Preferred deallocate granularity (0-based blocks).
        npdg: u16 = ns::NPDG,
        npda: u16 = ns::NPDA,
        /// Optimal write size (0-based blocks).
        nows: u16 = ns::NOWS,
        /// Maximum single source range length (Copy).
        mssrl: u16 = ns::MSSRL,
        /// Maximum copy length.
        mcl: u32 = ns::MCL,
        /// Maximum source range count (0-based).
        msrc: u8 = ns::MSRC,
        /// Number of unique capability LBA formats.
        nulbaf: u8 = ns::NULBAF,
        anagrpid: u32 = ns::ANAGRPID,
        nsattr: u8 = ns::NSATTR,
        nvmsetid: u16 = ns::NVMSETID,
        endgid: u16 = ns::ENDGID,
    }

    /// Namespace globally unique identifier.
    pub fn nguid(&self) -> [u8; 16] {
        get_bytes_n(self.buffer.as_ref(), ns::NGUID)
    }
    /// IEEE extended unique identifier.
    pub fn eui64(&self) -> [u8; 8] {
        get_bytes_n(self.buffer.as_ref(), ns::EUI64)
    }
    /// LBA format `i` (0..64; the default value otherwise).
    pub fn lbaf(&self, i: usize) -> LbaFormat {
        match lbaf_range(i) {
            Some(r) => LbaFormat::from_bytes(get_bytes_n(self.buffer.as_ref(), r)),
            None => LbaFormat::default(),
        }
    }
    /// The LBA format FLBAS selects.
    pub fn current_lbaf(&self) -> LbaFormat {
        self.lbaf(usize::from(flbas_index(self.flbas())))
    }
    /// The vendor specific area (bytes 384..4096).
    pub fn vs(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), ns::VS)
    }
}

fn lbaf_range(i: usize) -> Option<core::ops::Range<usize>> {
    (i < NUM_LBAF).then(|| {
        let o = ns::LBAF + i * LBAF_LEN;
        o..o + LBAF_LEN
    })
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IdentifyNamespace<T> {
    setters! {
        set_nsze: u64 = ns::NSZE,
        set_ncap: u64 = ns::NCAP,
        set_nuse: u64 = ns::NUSE,
        set_nsfeat: u8 = ns::NSFEAT,
        set_nlbaf: u8 = ns::NLBAF,
        set_flbas: u8 = ns::FLBAS,
        set_mc: u8 = ns::MC,
        set_dpc: u8 = ns::DPC,
        set_dps: u8 = ns::DPS,
        set_nmic: u8 = ns::NMIC,
        set_rescap: u8 = ns::RESCAP,
        set_fpi: u8 = ns::FPI,
        set_dlfeat: u8 = ns::DLFEAT,
        set_nawun: u16 = ns::NAWUN,
        set_nawupf: u16 = ns::NAWUPF,
        set_nacwu: u16 = ns::NACWU,
        set_nabsn: u16 = ns::NABSN,
        set_nabo: u16 = ns::NABO,
        set_nabspf: u16 = ns::NABSPF,
        set_noiob: u16 = ns::NOIOB,
        set_nvmcap: u128 = ns::NVMCAP,
        set_npwg: u16 = ns::NPWG,
        set_npwa: u16 = ns::NPWA,
        set_npdg: u16 = ns::NPDG,
        set_npda: u16 = ns::NPDA,
        set_nows: u16 = ns::NOWS,
        set_mssrl: u16 = ns::MSSRL,
        set_mcl: u32 = ns::MCL,
        set_msrc: u8 = ns::MSRC,
        set_nulbaf: u8 = ns::NULBAF,
        set_anagrpid: u32 = ns::ANAGRPID,
        set_nsattr: u8 = ns::NSATTR,
        set_nvmsetid: u16 = ns::NVMSETID,
        set_endgid: u16 = ns::ENDGID,
    }

    pub fn set_nguid(&mut self, v: [u8; 16]) {
        set_padded(self.buffer.as_mut(), ns::NGUID, &v, 0)
    }
    pub fn set_eui64(&mut self, v: [u8; 8]) {
        set_padded(self.buffer.as_mut(), ns::EUI64, &v, 0)
    }
    /// Sets LBA format `i` (0..64); no-op otherwise.
    pub fn set_lbaf(&mut self, i: usize, f: LbaFormat) {
        if let Some(r) = lbaf_range(i) {
            set_padded(self.buffer.as_mut(), r, &f.to_bytes(), 0)
        }
    }
}
