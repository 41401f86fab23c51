//! Namespace ID lists (Active / Allocated NS list) and namespace identification
//! descriptor lists: writing and parsing them.

use crate::wire::get_u32;

use super::IDENTIFY_LEN;

/// The most NSIDs one namespace list (4096 bytes) holds.
pub const NS_LIST_MAX: usize = IDENTIFY_LEN / 4;

/// Writes a namespace ID list (Active / Allocated NS list) into `out`: the NSIDs in
/// iterator order (the caller passes them ascending and greater than the command's
/// NSID), then zeros. Stops when `out` is full. Returns the number written.
pub fn write_active_ns_list(out: &mut [u8], nsids: impl Iterator<Item = u32>) -> usize {
    out.fill(0);
    let mut n = 0;
    for (slot, id) in out.chunks_exact_mut(4).zip(nsids) {
        slot.copy_from_slice(&id.to_le_bytes());
        n += 1;
    }
    n
}

/// Reads a namespace ID list: the NSIDs up to the first zero.
pub fn parse_ns_list(data: &[u8]) -> Vec<u32> {
    data.chunks_exact(4)
        .map(|c| get_u32(c, 0..4))
        .take_while(|&id| id != 0)
        .collect()
}

/// Namespace identifier types (Linux `NVME_NIDT_*`).
pub mod nidt {
    pub const EUI64: u8 = 0x01;
    pub const NGUID: u8 = 0x02;
    pub const UUID: u8 = 0x03;
    pub const CSI: u8 = 0x04;
}

/// Namespace identifier lengths (Linux `NVME_NIDT_*_LEN`).
pub mod nidl {
    pub const EUI64: u8 = 8;
    pub const NGUID: u8 = 16;
    pub const UUID: u8 = 16;
    pub const CSI: u8 = 1;
}

/// The header length of a namespace identification descriptor (nidt, nidl, 2 reserved).
pub const NS_ID_DESC_HEADER_LEN: usize = 4;

/// A namespace identification descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NsIdDescriptor {
    Eui64([u8; 8]),
    Nguid([u8; 16]),
    Uuid([u8; 16]),
    Csi(u8),
}

impl NsIdDescriptor {
    pub const fn nidt(&self) -> u8 {
        match self {
            NsIdDescriptor::Eui64(_) => nidt::EUI64,
            NsIdDescriptor::Nguid(_) => nidt::NGUID,
            NsIdDescriptor::Uuid(_) => nidt::UUID,
            NsIdDescriptor::Csi(_) => nidt::CSI,
        }
    }
    pub const fn nidl(&self) -> u8 {
        match self {
            NsIdDescriptor::Eui64(_) => nidl::EUI64,
            NsIdDescriptor::Nguid(_) => nidl::NGUID,
            NsIdDescriptor::Uuid(_) => nidl::UUID,
            NsIdDescriptor::Csi(_) => nidl::CSI,
        }
    }
    /// The identifier bytes.
    pub fn value(&self) -> &[u8] {
        match self {
            NsIdDescriptor::Eui64(v) => v,
            NsIdDescriptor::Nguid(v) | NsIdDescriptor::Uuid(v) => v,
            NsIdDescriptor::Csi(v) => core::slice::from_ref(v),
        }
    }
    /// Header plus value length on the wire.
    pub fn wire_len(&self) -> usize {
        NS_ID_DESC_HEADER_LEN + usize::from(self.nidl())
    }
}

/// Writes namespace identification descriptors into `out` (normally 4096 bytes),
/// zero-filling the rest so the list ends with a zero NIDT. Descriptors that do not
/// fit are dropped. Returns the number of bytes written.
pub fn write_ns_id_descriptors(out: &mut [u8], descs: &[NsIdDescriptor]) -> usize {
    out.fill(0);
    let mut o = 0;
    for d in descs {
        let end = o + d.wire_len();
        let Some(dst) = out.get_mut(o..end) else {
            break;
        };
        dst[0] = d.nidt();
        dst[1] = d.nidl();
        dst[NS_ID_DESC_HEADER_LEN..].copy_from_slice(d.value());
        o = end;
    }
    o
}

/// Parses namespace identification descriptors, stopping at a zero NIDT or at a
/// descriptor that runs past the end. Unknown types and known types with a wrong
/// length are skipped. Never panics.
pub fn parse_ns_id_descriptors(data: &[u8]) -> Vec<NsIdDescriptor> {
    parse_ns_id_descriptors_at(data)
        .into_iter()
        .map(|(_, d)| d)
        .collect()
}

/// [`parse_ns_id_descriptors`] with each descriptor's byte offset in `data` (where
/// its header starts; nvme-cli's `loc`).
pub fn parse_ns_id_descriptors_at(data: &[u8]) -> Vec<(usize, NsIdDescriptor)> {
    let mut v = Vec::new();
    let mut o = 0usize;
    while let Some(h) = data.get(o..o + NS_ID_DESC_HEADER_LEN) {
        let (t, l) = (h[0], usize::from(h[1]));
        if t == 0 {
            break;
        }
        let start = o + NS_ID_DESC_HEADER_LEN;
        let Some(val) = data.get(start..start + l) else {
            break;
        };
        let d = match (t, l) {
            (nidt::EUI64, 8) => <[u8; 8]>::try_from(val).ok().map(NsIdDescriptor::Eui64),
            (nidt::NGUID, 16) => <[u8; 16]>::try_from(val).ok().map(NsIdDescriptor::Nguid),
            (nidt::UUID, 16) => <[u8; 16]>::try_from(val).ok().map(NsIdDescriptor::Uuid),
            (nidt::CSI, 1) => val.first().copied().map(NsIdDescriptor::Csi),
            _ => None,
        };
        v.extend(d.map(|d| (o, d)));
        o = start + l;
    }
    v
}
