//! SGL1 of a command capsule: where the host's data is, for both fabrics.
//!
//! Every fabric accepts an in-capsule data block (sub type OFFSET, within the data the
//! capsule carried). NVMe/TCP adds the transport data block (R2T/H2CData, C2HData);
//! NVMe/RDMA the keyed data block (RDMA READ/WRITE against the host's key). A
//! descriptor of length 0 describes no data.
//!
//! A descriptor type the fabric does not carry fails the command with SGL Descriptor
//! Type Invalid whether or not the command moves data, on both fabrics. Linux nvmet's
//! RDMA transport refuses such a descriptor on any command; its TCP transport and SPDK
//! look at the SGL only when the command has data. We refuse what either refuses.

use tracing::debug;

use nvmf_common::wire::sgl::{subtype, SglDescriptor};
use nvmf_common::wire::sqe::{self, Sqe, SQE_LEN};
use nvmf_common::wire::status::{generic, Status};

/// The byte of DPTR holding the SGL identifier (descriptor type and sub type).
const SGL_IDENTIFIER_BYTE: u16 = sqe::offset::DPTR + 15;
/// Bit of the descriptor type within the SGL identifier byte.
const SGL_DESC_TYPE_BIT: u8 = 4;

/// Which descriptors besides in-capsule data carry host data on a fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SglCarrier {
    /// NVMe/TCP: transport data blocks.
    TransportDataBlock,
    /// NVMe/RDMA: keyed data blocks.
    KeyedDataBlock,
}

/// Where the host's data is, per the command's SGL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostData {
    #[default]
    None,
    /// In the capsule, at `offset` from the start of its data.
    InCapsule { offset: usize, len: u32 },
    /// Moved by the transport's own PDUs (R2T/H2CData, C2HData).
    Transport { len: u32 },
    /// In host memory named by a key (RDMA READ / WRITE).
    Keyed {
        addr: u64,
        len: u32,
        key: u32,
        invalidate: bool,
    },
}

impl HostData {
    /// Bytes the descriptor describes.
    pub fn len(&self) -> u32 {
        match *self {
            HostData::None => 0,
            HostData::InCapsule { len, .. }
            | HostData::Transport { len }
            | HostData::Keyed { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// SGL Descriptor Type Invalid, located at the SGL identifier's type field.
pub fn sgl_type_invalid() -> Status {
    Status::generic_dnr(generic::SGL_DESCRIPTOR_TYPE_INVALID)
        .at(SGL_IDENTIFIER_BYTE, SGL_DESC_TYPE_BIT)
}

/// Decodes SGL1 of `sqe_bytes`, given the `icd_len` bytes of data the capsule carried.
pub fn decode(
    sqe_bytes: &[u8; SQE_LEN],
    icd_len: usize,
    carrier: SglCarrier,
) -> Result<HostData, Status> {
    let cmd = Sqe::new_unchecked(&sqe_bytes[..]);
    let desc = SglDescriptor::parse(cmd.dptr()).map_err(|_| sgl_type_invalid())?;
    match (desc, carrier) {
        (
            SglDescriptor::DataBlock {
                addr,
                len,
                subtype: st,
            },
            _,
        ) if st == subtype::OFFSET => {
            if len == 0 {
                return Ok(HostData::None);
            }
            match addr.checked_add(u64::from(len)) {
                Some(end) if end <= icd_len as u64 => Ok(HostData::InCapsule {
                    offset: addr as usize,
                    len,
                }),
                _ => {
                    debug!(
                        addr,
                        len, icd_len, "in-capsule SGL beyond the capsule's data"
                    );
                    Err(Status::generic_dnr(generic::SGL_OFFSET_INVALID).at(sqe::offset::DPTR, 0))
                }
            }
        }
        (SglDescriptor::TransportDataBlock { len }, SglCarrier::TransportDataBlock) => {
            Ok(if len == 0 {
                HostData::None
            } else {
                HostData::Transport { len }
            })
        }
        (
            SglDescriptor::KeyedDataBlock {
                addr,
                len,
                key,
                invalidate,
            },
            SglCarrier::KeyedDataBlock,
        ) => Ok(if len == 0 {
            HostData::None
        } else {
            HostData::Keyed {
                addr,
                len,
                key,
                invalidate,
            }
        }),
        (other, _) => {
            debug!(
                ?other,
                ?carrier,
                "SGL descriptor this fabric does not carry"
            );
            Err(sgl_type_invalid())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmf_common::wire::sgl::desc_type;
    use nvmf_common::wire::status::Sct;

    fn sqe_with(desc: SglDescriptor) -> [u8; SQE_LEN] {
        let mut s = [0u8; SQE_LEN];
        let mut cmd = Sqe::new_unchecked(&mut s[..]);
        desc.emit(cmd.dptr_mut()).unwrap();
        s
    }

    const TCP: SglCarrier = SglCarrier::TransportDataBlock;
    const RDMA: SglCarrier = SglCarrier::KeyedDataBlock;

    #[test]
    fn in_capsule_bounds_on_both_fabrics() {
        for carrier in [TCP, RDMA] {
            let icd = sqe_with(SglDescriptor::in_capsule(0, 4096));
            assert_eq!(
                decode(&icd, 4096, carrier).unwrap(),
                HostData::InCapsule {
                    offset: 0,
                    len: 4096
                }
            );
            let st = decode(&icd, 4095, carrier).unwrap_err();
            assert!(st.is(Sct::Generic, generic::SGL_OFFSET_INVALID));
            let wrap = sqe_with(SglDescriptor::DataBlock {
                addr: u64::MAX - 10,
                len: 4096,
                subtype: subtype::OFFSET,
            });
            let st = decode(&wrap, 8192, carrier).unwrap_err();
            assert!(st.is(Sct::Generic, generic::SGL_OFFSET_INVALID));
        }
    }

    #[test]
    fn transport_data_block_is_tcp_only() {
        let t = sqe_with(SglDescriptor::TransportDataBlock { len: 131072 });
        assert_eq!(
            decode(&t, 0, TCP).unwrap(),
            HostData::Transport { len: 131072 }
        );
        let none = sqe_with(SglDescriptor::TransportDataBlock { len: 0 });
        assert_eq!(decode(&none, 0, TCP).unwrap(), HostData::None);
        let st = decode(&t, 0, RDMA).unwrap_err();
        assert!(st.is(Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID));
        // Refused even without data (as Linux nvmet-rdma), on both fabrics.
        assert!(decode(&none, 0, RDMA).is_err());
    }

    #[test]
    fn keyed_data_block_is_rdma_only() {
        let k = sqe_with(SglDescriptor::keyed(0x1000, 4096, 0xABCD, true));
        assert_eq!(
            decode(&k, 0, RDMA).unwrap(),
            HostData::Keyed {
                addr: 0x1000,
                len: 4096,
                key: 0xABCD,
                invalidate: true
            }
        );
        let null = sqe_with(SglDescriptor::keyed(0, 0, 0, false));
        assert_eq!(decode(&null, 0, RDMA).unwrap(), HostData::None);
        let st = decode(&k, 0, TCP).unwrap_err();
        assert!(st.is(Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID));
        assert!(st.dnr);
        assert!(decode(&null, 0, TCP).is_err());
    }

    #[test]
    fn unusable_descriptors_on_both_fabrics() {
        for carrier in [TCP, RDMA] {
            for desc in [
                SglDescriptor::DataBlock {
                    addr: 0x1000,
                    len: 512,
                    subtype: subtype::ADDRESS,
                },
                SglDescriptor::Other {
                    desc_type: desc_type::SEGMENT,
                    subtype: 0,
                },
            ] {
                let st = decode(&sqe_with(desc), 8192, carrier).unwrap_err();
                assert!(
                    st.is(Sct::Generic, generic::SGL_DESCRIPTOR_TYPE_INVALID),
                    "{desc:?} on {carrier:?}: {st}"
                );
            }
        }
    }
}
