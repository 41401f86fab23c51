//! NVMe SGL descriptors (16 bytes; Linux `struct nvme_sgl_desc`,
//! `struct nvme_keyed_sgl_desc`).
//!
//! Byte 15 is the SGL identifier: descriptor type in bits 7:4, sub type in bits 3:0.
//!
//! ```text
//! data block / segment:  0..8 address   8..12 length (le32)      12..15 reserved
//! keyed data block:      0..8 address   8..11 length (le24)      11..15 key (le32)
//! transport data block:  0..8 reserved  8..12 length (le32)      12..15 reserved
//! ```

use super::{check_len, get_u24, get_u32, get_u64, get_u8, set_u24, set_u32, set_u64};
use super::{set_u8, view, WireError};

/// The length of one SGL descriptor.
pub const SGL_DESC_LEN: usize = 16;

/// The largest length a keyed data block descriptor can carry (24 bits).
pub const KEYED_MAX_LEN: u32 = 0x00FF_FFFF;

/// SGL descriptor types (bits 7:4 of byte 15; Linux `NVME_SGL_FMT_DATA_DESC`,
/// `NVME_SGL_FMT_SEG_DESC`, `NVME_SGL_FMT_LAST_SEG_DESC`, `NVME_KEY_SGL_FMT_DATA_DESC`,
/// `NVME_TRANSPORT_SGL_DATA_DESC`).
pub mod desc_type {
    pub const DATA_BLOCK: u8 = 0x0;
    pub const BIT_BUCKET: u8 = 0x1;
    pub const SEGMENT: u8 = 0x2;
    pub const LAST_SEGMENT: u8 = 0x3;
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
    pub const VENDOR_SPECIFIC: u8 = 0xF;
}

/// SGL descriptor sub types (bits 3:0 of byte 15; Linux `NVME_SGL_FMT_ADDRESS`,
/// `NVME_SGL_FMT_OFFSET`, `NVME_SGL_FMT_TRANSPORT_A`, `NVME_SGL_FMT_INVALIDATE`).
pub mod subtype {
    pub const ADDRESS: u8 = 0x0;
    pub const OFFSET: u8 = 0x1;
    pub const TRANSPORT_SPECIFIC: u8 = 0xA;
    pub const INVALIDATE_KEY: u8 = 0xF;
}

mod field {
    use core::ops::Range;
    pub const ADDR: Range<usize> = 0..8;
    pub const LENGTH: Range<usize> = 8..12;
    pub const KEYED_LENGTH: Range<usize> = 8..11;
    pub const KEY: Range<usize> = 11..15;
    pub const ID: usize = 15;
}

const TYPE_SHIFT: u8 = 4;
const SUBTYPE_MASK: u8 = 0x0F;

/// The SGL identifier byte for a descriptor type and sub type.
pub const fn sgl_id(desc_type: u8, subtype: u8) -> u8 {
    (desc_type << TYPE_SHIFT) | (subtype & SUBTYPE_MASK)
}

view!(
    /// A zero-copy view of one SGL descriptor.
    Sgl,
    SGL_DESC_LEN
);

impl<T: AsRef<[u8]>> Sgl<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Address (data block, segment, keyed data block), or offset for sub type OFFSET.
    pub fn addr(&self) -> u64 {
        get_u64(self.b(), field::ADDR)
    }
    /// 32-bit length (unkeyed descriptors).
    pub fn length(&self) -> u32 {
        get_u32(self.b(), field::LENGTH)
    }
    /// 24-bit length (keyed data block).
    pub fn keyed_length(&self) -> u32 {
        get_u24(self.b(), field::KEYED_LENGTH)
    }
    /// Key (keyed data block).
    pub fn key(&self) -> u32 {
        get_u32(self.b(), field::KEY)
    }
    /// SGL identifier byte (type << 4 | sub type).
    pub fn id(&self) -> u8 {
        get_u8(self.b(), field::ID)
    }
    pub fn desc_type(&self) -> u8 {
        self.id() >> TYPE_SHIFT
    }
    pub fn subtype(&self) -> u8 {
        self.id() & SUBTYPE_MASK
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Sgl<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_addr(&mut self, v: u64) {
        set_u64(self.bm(), field::ADDR, v)
    }
    pub fn set_length(&mut self, v: u32) {
        set_u32(self.bm(), field::LENGTH, v)
    }
    /// Sets the 24-bit length (the top 8 bits of `v` are dropped).
    pub fn set_keyed_length(&mut self, v: u32) {
        set_u24(self.bm(), field::KEYED_LENGTH, v)
    }
    pub fn set_key(&mut self, v: u32) {
        set_u32(self.bm(), field::KEY, v)
    }
    pub fn set_id(&mut self, v: u8) {
        set_u8(self.bm(), field::ID, v)
    }
    pub fn set_type(&mut self, desc_type: u8, subtype: u8) {
        self.set_id(sgl_id(desc_type, subtype))
    }
}

/// An SGL descriptor as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SglDescriptor {
    /// Data block; `subtype` is [`subtype::ADDRESS`] or [`subtype::OFFSET`]
    /// (in-capsule data: `addr` is the offset into the capsule's data).
    DataBlock { addr: u64, len: u32, subtype: u8 },
    /// Keyed data block (RDMA): 24-bit length; `invalidate` is sub type
    /// [`subtype::INVALIDATE_KEY`] (host asks the target to invalidate `key`).
    KeyedDataBlock {
        addr: u64,
        len: u32,
        key: u32,
        invalidate: bool,
    },
    /// Transport data block (NVMe/TCP), sub type [`subtype::TRANSPORT_SPECIFIC`].
    TransportDataBlock { len: u32 },
    /// Anything else (bit bucket, segments, a keyed data block with an unknown sub
    /// type, ...); read the rest through [`Sgl`].
    Other { desc_type: u8, subtype: u8 },
}

impl SglDescriptor {
    /// Parses the first 16 bytes of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let s = Sgl::new_checked(bytes)?;
        let (t, st) = (s.desc_type(), s.subtype());
        Ok(match (t, st) {
            (desc_type::DATA_BLOCK, _) => SglDescriptor::DataBlock {
                addr: s.addr(),
                len: s.length(),
                subtype: st,
            },
            (desc_type::KEYED_DATA_BLOCK, subtype::ADDRESS | subtype::INVALIDATE_KEY) => {
                SglDescriptor::KeyedDataBlock {
                    addr: s.addr(),
                    len: s.keyed_length(),
                    key: s.key(),
                    invalidate: st == subtype::INVALIDATE_KEY,
                }
            }
            (desc_type::TRANSPORT_DATA_BLOCK, subtype::TRANSPORT_SPECIFIC) => {
                SglDescriptor::TransportDataBlock { len: s.length() }
            }
            _ => SglDescriptor::Other {
                desc_type: t,
                subtype: st,
            },
        })
    }

    /// Writes the descriptor into the first 16 bytes of `out` (reserved bytes zeroed).
    /// `Invalid` when a keyed length does not fit in 24 bits.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), WireError> {
        check_len(out, SGL_DESC_LEN)?;
        let mut s = Sgl::new_unchecked(&mut out[..SGL_DESC_LEN]);
        s.as_bytes_mut().fill(0);
        match *self {
            SglDescriptor::DataBlock { addr, len, subtype } => {
                s.set_addr(addr);
                s.set_length(len);
                s.set_type(desc_type::DATA_BLOCK, subtype);
            }
            SglDescriptor::KeyedDataBlock {
                addr,
                len,
                key,
                invalidate,
            } => {
                if len > KEYED_MAX_LEN {
                    return Err(WireError::Invalid("keyed SGL length exceeds 24 bits"));
                }
                s.set_addr(addr);
                s.set_keyed_length(len);
                s.set_key(key);
                let st = if invalidate {
                    subtype::INVALIDATE_KEY
                } else {
                    subtype::ADDRESS
                };
                s.set_type(desc_type::KEYED_DATA_BLOCK, st);
            }
            SglDescriptor::TransportDataBlock { len } => {
                s.set_length(len);
                s.set_type(desc_type::TRANSPORT_DATA_BLOCK, subtype::TRANSPORT_SPECIFIC);
            }
            SglDescriptor::Other { desc_type, subtype } => {
                s.set_type(desc_type, subtype);
            }
        }
        Ok(())
    }

    /// The 16 bytes of the descriptor (`Other` keeps only its identifier byte;
    /// an over-long keyed length is truncated to 24 bits).
    pub fn to_bytes(&self) -> [u8; SGL_DESC_LEN] {
        let mut b = [0u8; SGL_DESC_LEN];
        if self.emit(&mut b).is_err() {
            if let SglDescriptor::KeyedDataBlock {
                addr,
                len,
                key,
                invalidate,
            } = *self
            {
                // Only a too-long keyed length can fail with a 16-byte buffer.
                let _ =
                    SglDescriptor::keyed(addr, len & KEYED_MAX_LEN, key, invalidate).emit(&mut b);
            }
        }
        b
    }

    /// An in-capsule data block: data at `offset` into the capsule's data area.
    pub const fn in_capsule(offset: u64, len: u32) -> Self {
        SglDescriptor::DataBlock {
            addr: offset,
            len,
            subtype: subtype::OFFSET,
        }
    }

    /// A keyed data block (remote memory: address, 24-bit length, rkey).
    pub const fn keyed(addr: u64, len: u32, key: u32, invalidate: bool) -> Self {
        SglDescriptor::KeyedDataBlock {
            addr,
            len,
            key,
            invalidate,
        }
    }

    /// A transport data block (NVMe/TCP, data follows in H2C/C2H PDUs).
    pub const fn transport(len: u32) -> Self {
        SglDescriptor::TransportDataBlock { len }
    }

    /// The descriptor type (bits 7:4 of the identifier).
    pub const fn desc_type(&self) -> u8 {
        match self {
            SglDescriptor::DataBlock { .. } => desc_type::DATA_BLOCK,
            SglDescriptor::KeyedDataBlock { .. } => desc_type::KEYED_DATA_BLOCK,
            SglDescriptor::TransportDataBlock { .. } => desc_type::TRANSPORT_DATA_BLOCK,
            SglDescriptor::Other { desc_type, .. } => *desc_type,
        }
    }

    /// The data length described, when the descriptor describes data.
    pub const fn data_len(&self) -> Option<u32> {
        match self {
            SglDescriptor::DataBlock { len, .. }
            | SglDescriptor::KeyedDataBlock { len, .. }
            | SglDescriptor::TransportDataBlock { len } => Some(*len),
            SglDescriptor::Other { .. } => None,
        }
    }

    /// Parses a list of descriptors (e.g. an SGL segment). `Invalid` when the length
    /// is not a multiple of 16.
    pub fn parse_list(bytes: &[u8]) -> Result<Vec<Self>, WireError> {
        let chunks = bytes.chunks_exact(SGL_DESC_LEN);
        if !chunks.remainder().is_empty() {
            return Err(WireError::Invalid(
                "SGL segment length not a multiple of 16",
            ));
        }
        chunks.map(Self::parse).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_golden_bytes() {
        let d = SglDescriptor::keyed(0x1122_3344_5566_7788, 0x0A_0B0C, 0xDEAD_BEEF, true);
        let mut b = [0xFFu8; 16];
        d.emit(&mut b).unwrap();
        assert_eq!(
            b,
            [
                0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // addr
                0x0C, 0x0B, 0x0A, // length (24-bit)
                0xEF, 0xBE, 0xAD, 0xDE, // key
                0x4F, // keyed data block, invalidate key
            ]
        );
        assert_eq!(SglDescriptor::parse(&b).unwrap(), d);
        let d2 = SglDescriptor::keyed(1, 2, 3, false);
        assert_eq!(d2.to_bytes()[15], 0x40);
        assert_eq!(SglDescriptor::parse(&d2.to_bytes()).unwrap(), d2);
        let v = Sgl::new_checked(&b[..]).unwrap();
        assert_eq!(v.keyed_length(), 0x0A_0B0C);
        assert_eq!(v.key(), 0xDEAD_BEEF);
    }

    #[test]
    fn keyed_length_over_24_bits() {
        let d = SglDescriptor::keyed(0, 0x0100_0000, 0, false);
        assert_eq!(
            d.emit(&mut [0u8; 16]),
            Err(WireError::Invalid("keyed SGL length exceeds 24 bits"))
        );
        assert_eq!(&d.to_bytes()[8..11], &[0, 0, 0]);
    }

    #[test]
    fn in_capsule_and_data_block() {
        let d = SglDescriptor::in_capsule(0, 4096);
        let b = d.to_bytes();
        // Linux nvme-rdma inline: type = NVME_SGL_FMT_DATA_DESC << 4 | NVME_SGL_FMT_OFFSET.
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0x01]);
        assert_eq!(SglDescriptor::parse(&b).unwrap(), d);
        let a = SglDescriptor::DataBlock {
            addr: 0x1000,
            len: 0x1_0000,
            subtype: subtype::ADDRESS,
        };
        let b = a.to_bytes();
        assert_eq!(&b[..12], &[0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(b[15], 0x00);
        assert_eq!(SglDescriptor::parse(&b).unwrap(), a);
        assert_eq!(a.data_len(), Some(0x1_0000));
    }

    #[test]
    fn transport_data_block() {
        let d = SglDescriptor::transport(8192);
        let b = d.to_bytes();
        // Linux nvme-tcp: NVME_TRANSPORT_SGL_DATA_DESC << 4 | NVME_SGL_FMT_TRANSPORT_A.
        assert_eq!(b[15], 0x5A);
        assert_eq!(&b[8..12], &[0, 0x20, 0, 0]);
        assert_eq!(SglDescriptor::parse(&b).unwrap(), d);
    }

    #[test]
    fn other_types() {
        for (t, st) in [
            (desc_type::BIT_BUCKET, 0),
            (desc_type::SEGMENT, subtype::ADDRESS),
            (desc_type::LAST_SEGMENT, subtype::OFFSET),
            (desc_type::KEYED_DATA_BLOCK, subtype::OFFSET),
            (desc_type::TRANSPORT_DATA_BLOCK, subtype::ADDRESS),
            (desc_type::VENDOR_SPECIFIC, 3),
        ] {
            let mut b = [0u8; 16];
            b[15] = sgl_id(t, st);
            let d = SglDescriptor::parse(&b).unwrap();
            assert_eq!(
                d,
                SglDescriptor::Other {
                    desc_type: t,
                    subtype: st
                }
            );
            assert_eq!(d.to_bytes(), b);
            assert_eq!(d.data_len(), None);
            assert_eq!(d.desc_type(), t);
        }
        let mut seg = Sgl::new_unchecked([0u8; 16]);
        seg.set_addr(0xABCD);
        seg.set_length(48);
        seg.set_type(desc_type::LAST_SEGMENT, subtype::ADDRESS);
        assert_eq!(seg.as_bytes()[15], 0x30);
        assert_eq!((seg.addr(), seg.length()), (0xABCD, 48));
    }

    #[test]
    fn truncated_and_lists() {
        assert_eq!(
            SglDescriptor::parse(&[0u8; 15]),
            Err(WireError::Truncated { need: 16, have: 15 })
        );
        assert!(SglDescriptor::in_capsule(0, 1).emit(&mut [0u8; 8]).is_err());
        assert!(SglDescriptor::parse_list(&[0u8; 17]).is_err());
        let mut l = [0u8; 32];
        SglDescriptor::keyed(1, 2, 3, false)
            .emit(&mut l[..16])
            .unwrap();
        SglDescriptor::keyed(4, 5, 6, true)
            .emit(&mut l[16..])
            .unwrap();
        let v = SglDescriptor::parse_list(&l).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1], SglDescriptor::keyed(4, 5, 6, true));
        let s = Sgl::new_unchecked(&[0u8; 3][..]);
        assert_eq!((s.addr(), s.key(), s.id()), (0, 0, 0));
    }
}
