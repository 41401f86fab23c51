//! NVMe over Fabrics commands (Connect, Property Get/Set, Disconnect), the Connect
//! data, and the controller properties (registers) reached through Property Get/Set.
//!
//! Fabrics commands are SQEs with opcode [`FABRICS_OPCODE`] and the command type
//! ([`fctype`]) in byte 4. Layouts follow Linux `struct nvmf_connect_command`,
//! `struct nvmf_connect_data`, `struct nvmf_property_{get,set}_command`,
//! `struct nvmf_disconnect_command`.

use super::sqe::{Sqe, SQE_LEN};
use super::{get_bytes, get_bytes_n, get_u16, get_u32, get_u64, get_u8, set_padded, set_u16};
use super::{set_u32, set_u64, set_u8, view};

/// The opcode of every fabrics command (Linux `nvme_fabrics_command`).
pub const FABRICS_OPCODE: u8 = 0x7F;

/// Fabrics command types (Linux `enum nvmf_fabrics_opcode`).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECEIVE: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;
}

/// The only Connect / Disconnect record format defined (NVMe-oF 1.0).
pub const NVMF_RECFMT_1_0: u16 = 0;

/// Connect command field offsets in the SQE (for error locations).
pub mod connect_offset {
    pub const RECFMT: u16 = 40;
    pub const QID: u16 = 42;
    pub const SQSIZE: u16 = 44;
    pub const CATTR: u16 = 46;
    pub const KATO: u16 = 48;
}

/// Connect data field offsets (for error locations with IATTR set).
pub mod connect_data_offset {
    pub const HOSTID: u16 = 0;
    pub const CNTLID: u16 = 16;
    pub const SUBSYSNQN: u16 = 256;
    pub const HOSTNQN: u16 = 512;
}

/// Connect attributes (CATTR, byte 46).
pub mod cattr {
    /// Bits 1:0: priority class of the I/O queue.
    pub const PRIORITY_CLASS_MASK: u8 = 0x03;
    /// SQ flow control disable (bit 2; Linux `NVME_CONNECT_DISABLE_SQFLOW`).
    pub const DISABLE_SQFLOW: u8 = 1 << 2;
    /// Incapable of Disconnect (bit 3, NVMe 2.0 fabrics).
    pub const INCAPABLE_OF_DISCONNECT: u8 = 1 << 3;
}

/// The controller ID that asks for a dynamic controller (Linux `NVME_CNTLID_DYNAMIC`).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// The controller ID that asks for any available controller of a static-model
/// subsystem.
pub const CNTLID_ANY_STATIC: u16 = 0xFFFE;

mod connect_field {
    use core::ops::Range;
    pub const RECFMT: Range<usize> = 40..42;
    pub const QID: Range<usize> = 42..44;
    pub const SQSIZE: Range<usize> = 44..46;
    pub const CATTR: usize = 46;
    pub const KATO: Range<usize> = 48..52;
}

mod prop_field {
    use core::ops::Range;
    pub const ATTRIB: usize = 40;
    pub const OFFSET: Range<usize> = 44..48;
    pub const VALUE: Range<usize> = 48..56;
}

/// Property Get/Set field offsets in the SQE (for error locations).
pub mod prop_offset {
    pub const ATTRIB: u16 = 40;
    pub const OFFSET: u16 = 44;
    pub const VALUE: u16 = 48;
}

/// Property attribute size (ATTRIB bits 2:0).
pub mod prop_size {
    /// A 4-byte property.
    pub const SIZE_4: u8 = 0;
    /// An 8-byte property.
    pub const SIZE_8: u8 = 1;
    /// The mask of the size bits in ATTRIB.
    pub const MASK: u8 = 0x07;
}

/// The access width in bytes for an ATTRIB value, or `None` if reserved.
pub const fn prop_size_bytes(attrib: u8) -> Option<usize> {
    match attrib & prop_size::MASK {
        prop_size::SIZE_4 => Some(4),
        prop_size::SIZE_8 => Some(8),
        _ => None,
    }
}

/// Defines the `as_sqe` helpers shared by all fabrics command views.
macro_rules! sqe_access {
    ($name:ident) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// The same buffer seen as a generic SQE (opcode, cid, fctype, dptr, ...).
            pub fn as_sqe(&self) -> Sqe<&[u8]> {
                Sqe::new_unchecked(self.buffer.as_ref())
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The same buffer seen as a mutable generic SQE.
            pub fn as_sqe_mut(&mut self) -> Sqe<&mut [u8]> {
                Sqe::new_unchecked(self.buffer.as_mut())
            }
            /// Sets the opcode to [`FABRICS_OPCODE`] and the command type.
            pub fn set_header(&mut self, fctype: u8, cid: u16) {
                let mut s = self.as_sqe_mut();
                s.set_opcode(FABRICS_OPCODE);
                s.set_fctype(fctype);
                s.set_cid(cid);
            }
        }
    };
}

view!(
    /// A view of a Connect command SQE.
    ConnectCmd,
    SQE_LEN
);
sqe_access!(ConnectCmd);

impl<T: AsRef<[u8]>> ConnectCmd<T> {
    /// Record format.
    pub fn recfmt(&self) -> u16 {
        get_u16(self.buffer.as_ref(), connect_field::RECFMT)
    }
    /// Queue ID (0 = admin queue).
    pub fn qid(&self) -> u16 {
        get_u16(self.buffer.as_ref(), connect_field::QID)
    }
    /// Submission queue size (0-based).
    pub fn sqsize(&self) -> u16 {
        get_u16(self.buffer.as_ref(), connect_field::SQSIZE)
    }
    /// Connect attributes.
    pub fn cattr(&self) -> u8 {
        get_u8(self.buffer.as_ref(), connect_field::CATTR)
    }
    /// Keep alive timeout in milliseconds (admin queue only).
    pub fn kato(&self) -> u32 {
        get_u32(self.buffer.as_ref(), connect_field::KATO)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ConnectCmd<T> {
    pub fn set_recfmt(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), connect_field::RECFMT, v)
    }
    pub fn set_qid(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), connect_field::QID, v)
    }
    pub fn set_sqsize(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), connect_field::SQSIZE, v)
    }
    pub fn set_cattr(&mut self, v: u8) {
        set_u8(self.buffer.as_mut(), connect_field::CATTR, v)
    }
    pub fn set_kato(&mut self, v: u32) {
        set_u32(self.buffer.as_mut(), connect_field::KATO, v)
    }
}

/// The length of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// The length of each NQN field in the Connect data.
pub const NQN_FIELD_LEN: usize = 256;

mod data_field {
    use core::ops::Range;
    pub const HOSTID: Range<usize> = 0..16;
    pub const CNTLID: Range<usize> = 16..18;
    pub const SUBSYSNQN: Range<usize> = 256..512;
    pub const HOSTNQN: Range<usize> = 512..768;
}

view!(
    /// A view of the 1024-byte Connect data.
    ConnectData,
    CONNECT_DATA_LEN
);

impl<T: AsRef<[u8]>> ConnectData<T> {
    /// Host identifier (a UUID).
    pub fn hostid(&self) -> [u8; 16] {
        get_bytes_n(self.buffer.as_ref(), data_field::HOSTID)
    }
    /// Controller ID requested ([`CNTLID_DYNAMIC`] for a dynamic controller).
    pub fn cntlid(&self) -> u16 {
        get_u16(self.buffer.as_ref(), data_field::CNTLID)
    }
    /// The raw 256-byte subsystem NQN field.
    pub fn subsysnqn_field(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), data_field::SUBSYSNQN)
    }
    /// The raw 256-byte host NQN field.
    pub fn hostnqn_field(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), data_field::HOSTNQN)
    }
    /// The subsystem NQN up to its NUL terminator (`None` if not UTF-8).
    pub fn subsysnqn(&self) -> Option<&str> {
        nqn_str(self.subsysnqn_field())
    }
    /// The host NQN up to its NUL terminator (`None` if not UTF-8).
    pub fn hostnqn(&self) -> Option<&str> {
        nqn_str(self.hostnqn_field())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ConnectData<T> {
    pub fn set_hostid(&mut self, v: [u8; 16]) {
        set_padded(self.buffer.as_mut(), data_field::HOSTID, &v, 0)
    }
    pub fn set_cntlid(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), data_field::CNTLID, v)
    }
    /// Sets the subsystem NQN, NUL-padded (truncated to 255 bytes to keep a NUL).
    pub fn set_subsysnqn(&mut self, nqn: &str) {
        set_nqn(self.buffer.as_mut(), data_field::SUBSYSNQN, nqn)
    }
    /// Sets the host NQN, NUL-padded (truncated to 255 bytes to keep a NUL).
    pub fn set_hostnqn(&mut self, nqn: &str) {
        set_nqn(self.buffer.as_mut(), data_field::HOSTNQN, nqn)
    }
}

/// An NQN field up to its first NUL, as UTF-8.
pub fn nqn_str(field: &[u8]) -> Option<&str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    core::str::from_utf8(&field[..end]).ok()
}

fn set_nqn(buf: &mut [u8], r: core::ops::Range<usize>, nqn: &str) {
    let b = nqn.as_bytes();
    let n = b.len().min(r.len().saturating_sub(1));
    set_padded(buf, r, &b[..n], 0)
}

/// The bit of Connect response dword 0 (Invalid Parameter) that says the bad field
/// is in the Connect data rather than the SQE (IATTR, bit 16).
pub const CONNECT_IATTR_DATA: u32 = 1 << 16;

/// Completion dword 0 for a Connect that failed with Connect Invalid Parameters:
/// IPO (byte offset of the bad field) in bits 15:0, IATTR bit 16 when it is in the
/// Connect data (Linux `IPO_IATTR_CONNECT_DATA` / `IPO_IATTR_CONNECT_SQE`).
pub const fn connect_invalid_param_dw0(in_data: bool, offset: u16) -> u32 {
    let iattr = if in_data { CONNECT_IATTR_DATA } else { 0 };
    iattr | offset as u32
}

/// Completion dword 0 of a successful Connect: the controller ID in bits 15:0
/// (AUTHREQ bits 17:16 left zero).
pub const fn connect_success_dw0(cntlid: u16) -> u32 {
    cntlid as u32
}

/// Connect response dword 0 AUTHREQ bits (NVMe-oF 1.1, TP 8006).
pub mod authreq {
    /// DH-HMAC-CHAP authentication required (bit 17 of dw0).
    pub const ATR: u32 = 1 << 17;
    /// Secure channel concatenation required (bit 18 of dw0).
    pub const ASCR: u32 = 1 << 18;
}

view!(
    /// A view of a Property Get command SQE.
    PropertyGetCmd,
    SQE_LEN
);
sqe_access!(PropertyGetCmd);

view!(
    /// A view of a Property Set command SQE.
    PropertySetCmd,
    SQE_LEN
);
sqe_access!(PropertySetCmd);

macro_rules! prop_common {
    ($name:ident) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// Attributes: bits 2:0 the size ([`prop_size`]).
            pub fn attrib(&self) -> u8 {
                get_u8(self.buffer.as_ref(), prop_field::ATTRIB)
            }
            /// The access width in bytes (`None` for a reserved size).
            pub fn size_bytes(&self) -> Option<usize> {
                prop_size_bytes(self.attrib())
            }
            /// The property offset ([`reg`]).
            pub fn offset(&self) -> u32 {
                get_u32(self.buffer.as_ref(), prop_field::OFFSET)
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            pub fn set_attrib(&mut self, v: u8) {
                set_u8(self.buffer.as_mut(), prop_field::ATTRIB, v)
            }
            pub fn set_offset(&mut self, v: u32) {
                set_u32(self.buffer.as_mut(), prop_field::OFFSET, v)
            }
        }
    };
}
prop_common!(PropertyGetCmd);
prop_common!(PropertySetCmd);

impl<T: AsRef<[u8]>> PropertySetCmd<T> {
    /// The value to write (only the low 4 bytes for a 4-byte property).
    pub fn value(&self) -> u64 {
        get_u64(self.buffer.as_ref(), prop_field::VALUE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PropertySetCmd<T> {
    pub fn set_value(&mut self, v: u64) {
        set_u64(self.buffer.as_mut(), prop_field::VALUE, v)
    }
}

view!(
    /// A view of a Disconnect command SQE.
    DisconnectCmd,
    SQE_LEN
);
sqe_access!(DisconnectCmd);

impl<T: AsRef<[u8]>> DisconnectCmd<T> {
    pub fn recfmt(&self) -> u16 {
        get_u16(self.buffer.as_ref(), connect_field::RECFMT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DisconnectCmd<T> {
    pub fn set_recfmt(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), connect_field::RECFMT, v)
    }
}

/// Controller property offsets (Linux `NVME_REG_*`).
pub mod reg {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version.
    pub const VS: u32 = 0x08;
    /// Interrupt Mask Set (not used over fabrics).
    pub const INTMS: u32 = 0x0C;
    /// Interrupt Mask Clear (not used over fabrics).
    pub const INTMC: u32 = 0x10;
    /// Controller Configuration.
    pub const CC: u32 = 0x14;
    /// Controller Status.
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset.
    pub const NSSR: u32 = 0x20;
    /// Admin Queue Attributes (PCIe only).
    pub const AQA: u32 = 0x24;
    /// Admin SQ Base Address (PCIe only, 8 bytes).
    pub const ASQ: u32 = 0x28;
    /// Admin CQ Base Address (PCIe only, 8 bytes).
    pub const ACQ: u32 = 0x30;
    /// Controller Ready Timeouts (NVMe 2.0; read when CAP.CRMS.CRWMS is set).
    pub const CRTO: u32 = 0x68;

    /// The size in bytes of the property at `offset`, if it is one defined here.
    pub const fn size_of(offset: u32) -> Option<usize> {
        match offset {
            CAP | ASQ | ACQ => Some(8),
            VS | INTMS | INTMC | CC | CSTS | NSSR | AQA | CRTO => Some(4),
            _ => None,
        }
    }
}

/// The NSSR value that resets the NVM subsystem ("NVMe" in ASCII).
pub const NSSR_RESET: u32 = 0x4E56_4D65;

/// Builds a version value (VS register, Identify Controller VER).
pub const fn vs(major: u16, minor: u8, tertiary: u8) -> u32 {
    ((major as u32) << 16) | ((minor as u32) << 8) | tertiary as u32
}
pub const NVME_VS_1_3: u32 = vs(1, 3, 0);
pub const NVME_VS_1_4: u32 = vs(1, 4, 0);
pub const NVME_VS_2_0: u32 = vs(2, 0, 0);

/// Major / minor / tertiary of a version value.
pub const fn vs_parts(v: u32) -> (u16, u8, u8) {
    ((v >> 16) as u16, (v >> 8) as u8, v as u8)
}

const fn bits64(v: u64, lo: u32, width: u32) -> u64 {
    (v >> lo) & ((1u64 << width) - 1)
}
const fn put64(v: u64, lo: u32, width: u32, x: u64) -> u64 {
    let m = ((1u64 << width) - 1) << lo;
    (v & !m) | ((x << lo) & m)
}
const fn bits32(v: u32, lo: u32, width: u32) -> u32 {
    (v >> lo) & ((1u32 << width) - 1)
}
const fn put32(v: u32, lo: u32, width: u32, x: u32) -> u32 {
    let m = ((1u32 << width) - 1) << lo;
    (v & !m) | ((x << lo) & m)
}

/// Defines a getter and a `with_` builder for a bit field of a register newtype.
macro_rules! regfield {
    ($get:ident, $with:ident, u64, bool, $lo:expr, $w:expr) => {
        #[doc = concat!("Bit ", stringify!($lo), ".")]
        pub const fn $get(self) -> bool {
            bits64(self.0, $lo, $w) != 0
        }
        pub const fn $with(self, v: bool) -> Self {
            Self(put64(self.0, $lo, $w, v as u64))
        }
    };
    ($get:ident, $with:ident, u32, bool, $lo:expr, $w:expr) => {
        #[doc = concat!("Bit ", stringify!($lo), ".")]
        pub const fn $get(self) -> bool {
            bits32(self.0, $lo, $w) != 0
        }
        pub const fn $with(self, v: bool) -> Self {
            Self(put32(self.0, $lo, $w, v as u32))
        }
    };
    ($get:ident, $with:ident, u64, $ty:ty, $lo:expr, $w:expr) => {
        #[doc = concat!("Bits ", stringify!($lo), " (width ", stringify!($w), ").")]
        pub const fn $get(self) -> $ty {
            bits64(self.0, $lo, $w) as $ty
        }
        pub const fn $with(self, v: $ty) -> Self {
            Self(put64(self.0, $lo, $w, v as u64))
        }
    };
    ($get:ident, $with:ident, u32, $ty:ty, $lo:expr, $w:expr) => {
        #[doc = concat!("Bits ", stringify!($lo), " (width ", stringify!($w), ").")]
        pub const fn $get(self) -> $ty {
            bits32(self.0, $lo, $w) as $ty
        }
        pub const fn $with(self, v: $ty) -> Self {
            Self(put32(self.0, $lo, $w, v as u32))
        }
    };
}

/// Controller Capabilities (CAP, 8 bytes at offset 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Cap(pub u64);

impl Cap {
    regfield!(mqes, with_mqes, u64, u16, 0, 16);
    regfield!(cqr, with_cqr, u64, bool, 16, 1);
    regfield!(ams, with_ams, u64, u8, 17, 2);
    regfield!(to, with_to, u64, u8, 24, 8);
    regfield!(dstrd, with_dstrd, u64, u8, 32, 4);
    regfield!(nssrs, with_nssrs, u64, bool, 36, 1);
    regfield!(css, with_css, u64, u8, 37, 8);
    regfield!(bps, with_bps, u64, bool, 45, 1);
    regfield!(cps, with_cps, u64, u8, 46, 2);
    regfield!(mpsmin, with_mpsmin, u64, u8, 48, 4);
    regfield!(mpsmax, with_mpsmax, u64, u8, 52, 4);
    regfield!(pmrs, with_pmrs, u64, bool, 56, 1);
    regfield!(cmbs, with_cmbs, u64, bool, 57, 1);
    regfield!(nsss, with_nsss, u64, bool, 58, 1);
    regfield!(crms, with_crms, u64, u8, 59, 2);
}

/// CAP.CRMS bits (controller ready modes supported; Linux `NVME_CAP_CRMS_*` are these
/// shifted to CAP bits 59 and 60).
pub mod cap_crms {
    /// Controller Ready With Media Support: CRTO.CRWMT is valid (the host reads CRTO).
    pub const CRWMS: u8 = 1 << 0;
    /// Controller Ready Independent of Media Support: CC.CRIME may be set.
    pub const CRIMS: u8 = 1 << 1;
}

/// Controller Ready Timeouts (CRTO, 4 bytes at offset 0x68), both in 500 ms units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Crto(pub u32);

impl Crto {
    // CRWMT: how long CSTS.RDY may take after CC.EN is set (with media ready).
    regfield!(crwmt, with_crwmt, u32, u16, 0, 16);
    // CRIMT: the same when CC.CRIME is set (ready before the media is).
    regfield!(crimt, with_crimt, u32, u16, 16, 16);
}

/// CAP.CSS bits (command sets supported; Linux `NVME_CAP_CSS_*`).
pub mod cap_css {
    /// NVM command set.
    pub const NVM: u8 = 1 << 0;
    /// One or more I/O command sets (CC.CSS = 110b allowed).
    pub const CSI: u8 = 1 << 6;
    /// Only the admin command set (no I/O command set).
    pub const NO_IO: u8 = 1 << 7;
}

/// CAP.AMS / CC.AMS arbitration mechanisms.
pub mod ams {
    /// Round robin (always supported; CC.AMS value 0).
    pub const ROUND_ROBIN: u8 = 0;
    /// Weighted round robin with urgent priority class (CC.AMS value 1, CAP.AMS bit 0).
    pub const WRRU: u8 = 1;
    /// Vendor specific (CC.AMS value 7, CAP.AMS bit 1).
    pub const VENDOR: u8 = 7;
}

/// Controller Configuration (CC, 4 bytes at offset 0x14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Cc(pub u32);

impl Cc {
    regfield!(en, with_en, u32, bool, 0, 1);
    regfield!(css, with_css, u32, u8, 4, 3);
    regfield!(mps, with_mps, u32, u8, 7, 4);
    regfield!(ams, with_ams, u32, u8, 11, 3);
    regfield!(shn, with_shn, u32, u8, 14, 2);
    regfield!(iosqes, with_iosqes, u32, u8, 16, 4);
    regfield!(iocqes, with_iocqes, u32, u8, 20, 4);
    regfield!(crime, with_crime, u32, bool, 24, 1);

    /// What a host writes to enable an NVM controller over fabrics: CC.EN, the NVM
    /// command set, and the fabrics' fixed entry sizes (IOSQES 6: 64-byte SQEs,
    /// IOCQES 4: 16-byte CQEs).
    pub fn enable_nvm() -> Cc {
        Cc(0)
            .with_en(true)
            .with_css(cc_css::NVM)
            .with_iosqes(IOSQES_NVMF)
            .with_iocqes(IOCQES_NVMF)
    }
}

/// CC.IOSQES over fabrics: log2 of the 64-byte submission queue entry.
pub const IOSQES_NVMF: u8 = SQE_LEN.trailing_zeros() as u8;
/// CC.IOCQES over fabrics: log2 of the 16-byte completion queue entry.
pub const IOCQES_NVMF: u8 = crate::wire::cqe::CQE_LEN.trailing_zeros() as u8;

/// CC.CSS values (I/O command set selected; Linux `NVME_CC_CSS_*`).
pub mod cc_css {
    pub const NVM: u8 = 0;
    /// All I/O command sets CAP.CSS reports (use Identify I/O Command Set).
    pub const CSI: u8 = 6;
    /// Admin command set only.
    pub const ADMIN_ONLY: u8 = 7;
}

/// CC.SHN shutdown notification values.
pub mod shn {
    pub const NONE: u8 = 0;
    pub const NORMAL: u8 = 1;
    pub const ABRUPT: u8 = 2;
}

/// Controller Status (CSTS, 4 bytes at offset 0x1C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Csts(pub u32);

impl Csts {
    regfield!(rdy, with_rdy, u32, bool, 0, 1);
    regfield!(cfs, with_cfs, u32, bool, 1, 1);
    regfield!(shst, with_shst, u32, u8, 2, 2);
    regfield!(nssro, with_nssro, u32, bool, 4, 1);
    regfield!(pp, with_pp, u32, bool, 5, 1);
    regfield!(st, with_st, u32, bool, 6, 1);
}

/// CSTS.SHST shutdown status values.
pub mod shst {
    pub const NORMAL: u8 = 0;
    pub const OCCURRING: u8 = 1;
    pub const COMPLETE: u8 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    #[test]
    fn cc_enable_nvm_is_what_linux_writes() {
        // Linux: NVME_CC_ENABLE | NVME_CC_CSS_NVM | NVME_CC_IOSQES | NVME_CC_IOCQES.
        assert_eq!(Cc::enable_nvm().0, 0x0046_0001);
    }

    #[test]
    fn connect_cmd_golden() {
        let mut c = ConnectCmd::new_unchecked([0u8; SQE_LEN]);
        c.set_header(fctype::CONNECT, 0x0A0B);
        c.set_recfmt(NVMF_RECFMT_1_0);
        c.set_qid(3);
        c.set_sqsize(127);
        c.set_cattr(cattr::DISABLE_SQFLOW);
        c.set_kato(120_000);
        let b = c.as_bytes();
        assert_eq!(&b[0..5], &[0x7F, 0, 0x0B, 0x0A, 0x01]);
        assert_eq!(
            &b[40..52],
            &[0, 0, 3, 0, 127, 0, 4, 0, 0xC0, 0xD4, 0x01, 0x00]
        );
        let p = ConnectCmd::new_checked(b).unwrap();
        assert_eq!(p.as_sqe().fctype(), fctype::CONNECT);
        assert_eq!(
            (p.qid(), p.sqsize(), p.kato(), p.cattr()),
            (3, 127, 120_000, 4)
        );
        assert_eq!(connect_offset::KATO, 48);
        assert!(ConnectCmd::new_checked(&b[..63]).is_err());
    }

    #[test]
    fn connect_data_golden() {
        let mut d = ConnectData::new_unchecked(vec![0xEEu8; CONNECT_DATA_LEN]);
        d.as_bytes_mut().fill(0);
        let hostid: [u8; 16] = core::array::from_fn(|i| i as u8);
        d.set_hostid(hostid);
        d.set_cntlid(CNTLID_DYNAMIC);
        d.set_subsysnqn("nqn.2014-08.org.nvmexpress.discovery");
        d.set_hostnqn("nqn.host");
        let b = d.as_bytes();
        assert_eq!(&b[0..16], &hostid);
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert_eq!(&b[256..260], b"nqn.");
        assert_eq!(b[256 + 36], 0);
        assert_eq!(&b[512..520], b"nqn.host");
        assert!(b[520..768].iter().all(|&x| x == 0));
        let p = ConnectData::new_checked(b).unwrap();
        assert_eq!(p.hostid(), hostid);
        assert_eq!(p.subsysnqn(), Some("nqn.2014-08.org.nvmexpress.discovery"));
        assert_eq!(p.hostnqn(), Some("nqn.host"));
        assert_eq!(p.subsysnqn_field().len(), NQN_FIELD_LEN);
        // An over-long NQN is truncated but keeps its NUL.
        let long = "x".repeat(300);
        d.set_hostnqn(&long);
        assert_eq!(d.hostnqn().map(str::len), Some(255));
        assert_eq!(
            ConnectData::new_checked(&[0u8; 1023][..]).err(),
            Some(WireError::Truncated {
                need: 1024,
                have: 1023
            })
        );
    }

    #[test]
    fn invalid_param_dw0_matches_linux() {
        // IPO_IATTR_CONNECT_DATA(cntlid) = 1 << 16 | 16
        assert_eq!(
            connect_invalid_param_dw0(true, connect_data_offset::CNTLID),
            0x0001_0010
        );
        assert_eq!(
            connect_invalid_param_dw0(true, connect_data_offset::HOSTNQN),
            0x0001_0200
        );
        // IPO_IATTR_CONNECT_SQE(qid) = 42
        assert_eq!(connect_invalid_param_dw0(false, connect_offset::QID), 42);
        assert_eq!(connect_success_dw0(7), 7);
    }

    #[test]
    fn property_cmds_golden() {
        let mut s = PropertySetCmd::new_unchecked([0u8; SQE_LEN]);
        s.set_header(fctype::PROPERTY_SET, 1);
        s.set_attrib(prop_size::SIZE_4);
        s.set_offset(reg::CC);
        s.set_value(0x0046_0001);
        let b = s.into_inner();
        assert_eq!(b[4], 0x00);
        assert_eq!(b[40], 0);
        assert_eq!(&b[44..48], &[0x14, 0, 0, 0]);
        assert_eq!(&b[48..56], &[1, 0, 0x46, 0, 0, 0, 0, 0]);
        let mut g = PropertyGetCmd::new_unchecked([0u8; SQE_LEN]);
        g.set_header(fctype::PROPERTY_GET, 2);
        g.set_attrib(prop_size::SIZE_8);
        g.set_offset(reg::CAP);
        assert_eq!(g.as_bytes()[4], 0x04);
        assert_eq!(g.as_bytes()[40], 1);
        assert_eq!(g.size_bytes(), Some(8));
        assert_eq!(prop_size_bytes(2), None);
        assert_eq!(reg::size_of(reg::CAP), Some(8));
        assert_eq!(reg::size_of(reg::CSTS), Some(4));
        assert_eq!(reg::size_of(0x1000), None);
        let mut d = DisconnectCmd::new_unchecked([0u8; SQE_LEN]);
        d.set_header(fctype::DISCONNECT, 3);
        d.set_recfmt(0x1234);
        assert_eq!(&d.as_bytes()[40..42], &[0x34, 0x12]);
        assert_eq!(d.as_bytes()[4], 0x08);
    }

    #[test]
    fn registers() {
        let cap = Cap::default()
            .with_mqes(1023)
            .with_cqr(true)
            .with_to(30)
            .with_css(cap_css::NVM)
            .with_mpsmax(4);
        // Linux NVME_CAP_MQES = cap & 0xffff, NVME_CAP_TIMEOUT = (cap >> 24) & 0xff,
        // NVME_CAP_CSS = (cap >> 37) & 0xff, NVME_CAP_MPSMAX = (cap >> 52) & 0xf.
        assert_eq!(cap.0, 1023 | 1 << 16 | 30 << 24 | 1 << 37 | 4 << 52);
        assert_eq!(
            (cap.mqes(), cap.cqr(), cap.to(), cap.css()),
            (1023, true, 30, 1)
        );
        assert_eq!(cap.with_dstrd(0xF).dstrd(), 0xF);
        assert!(cap.with_nssrs(true).nssrs());
        assert_eq!(cap.with_mpsmin(0x1F).mpsmin(), 0xF); // masked
        assert_eq!(cap.with_ams(3).0 >> 17 & 3, 3);
        // Linux NVME_CAP_CRMS_CRWMS = 1 << 59, NVME_CAP_CRMS_CRIMS = 1 << 60;
        // NVME_CRTO_CRWMT = crto & 0xffff, NVME_CRTO_CRIMT = crto >> 16.
        assert_eq!(Cap(0).with_crms(cap_crms::CRWMS).0, 1 << 59);
        assert_eq!(Cap(0).with_crms(cap_crms::CRIMS).0, 1 << 60);
        let crto = Crto(0).with_crwmt(15).with_crimt(0x1234);
        assert_eq!(crto.0, 0x1234_000F);
        assert_eq!((crto.crwmt(), crto.crimt()), (15, 0x1234));
        assert_eq!(reg::size_of(reg::CRTO), Some(4));
        let cc = Cc(0x0046_0001);
        assert!(cc.en());
        assert_eq!((cc.iosqes(), cc.iocqes(), cc.css(), cc.mps()), (6, 4, 0, 0));
        let cc = cc.with_shn(shn::NORMAL).with_en(false).with_ams(ams::WRRU);
        assert_eq!(cc.0, 0x0046_4800);
        assert_eq!(cc.shn(), shn::NORMAL);
        let csts = Csts(0)
            .with_rdy(true)
            .with_shst(shst::COMPLETE)
            .with_cfs(true);
        assert_eq!(csts.0, 0b1011);
        assert!(!csts.nssro() && !csts.pp());
        assert_eq!(csts.with_pp(true).0, 0b10_1011);
        assert_eq!(NVME_VS_1_3, 0x0001_0300);
        assert_eq!(NVME_VS_1_4, 0x0001_0400);
        assert_eq!(NVME_VS_2_0, 0x0002_0000);
        assert_eq!(vs_parts(vs(1, 2, 3)), (1, 2, 3));
    }
}
