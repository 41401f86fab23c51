//! Authentication Send / Authentication Receive fabrics commands (NVMe Base 2.x,
//! 6.2 and 6.3; Linux `struct nvmf_auth_send_command` / `nvmf_auth_receive_command`).
//! Both carry the security protocol (SECP), its two specific fields (SPSP0, SPSP1)
//! and a length: the Transfer Length of the message sent, or the Allocation Length
//! of the buffer the controller's message is returned in.

use super::fabrics::FABRICS_OPCODE;
use super::sqe::{Sqe, SQE_LEN};
use super::{get_u32, get_u8, set_u32, set_u8, view};

/// SECP of DH-HMAC-CHAP (NVMe Base 2.x, Figure 602: "NVMe-oF In-band Authentication").
pub const SECP_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 for DH-HMAC-CHAP: the authentication protocol 01h.
pub const SPSP_DHCHAP: u8 = 0x01;

/// Byte offsets of the fields in the SQE (for error locations).
pub mod offset {
    /// SPSP0 (byte 41).
    pub const SPSP0: u16 = 41;
    /// SPSP1 (byte 42).
    pub const SPSP1: u16 = 42;
    /// SECP (byte 43).
    pub const SECP: u16 = 43;
    /// TL (Authentication Send) or AL (Authentication Receive), dword 11.
    pub const LEN: u16 = 44;
}

mod field {
    use core::ops::Range;
    pub const SPSP0: Range<usize> = 41..42;
    pub const SPSP1: Range<usize> = 42..43;
    pub const SECP: Range<usize> = 43..44;
    pub const LEN: Range<usize> = 44..48;
}

view!(
    /// A view of an Authentication Send or Authentication Receive SQE.
    AuthCmd,
    SQE_LEN
);

impl<T: AsRef<[u8]>> AuthCmd<T> {
    /// Security protocol.
    pub fn secp(&self) -> u8 {
        get_u8(self.buffer.as_ref(), field::SECP.start)
    }
    /// SP Specific 0.
    pub fn spsp0(&self) -> u8 {
        get_u8(self.buffer.as_ref(), field::SPSP0.start)
    }
    /// SP Specific 1.
    pub fn spsp1(&self) -> u8 {
        get_u8(self.buffer.as_ref(), field::SPSP1.start)
    }
    /// Transfer Length (Send) or Allocation Length (Receive), in bytes.
    pub fn len(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::LEN)
    }
    /// Whether the length field is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The same buffer seen as a generic SQE.
    pub fn as_sqe(&self) -> Sqe<&[u8]> {
        Sqe::new_unchecked(self.buffer.as_ref())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AuthCmd<T> {
    /// Fills a DH-HMAC-CHAP Authentication Send (`send`) or Receive command: opcode,
    /// fctype, cid, SECP/SPSP and the length. The data pointer is the caller's.
    pub fn set_dhchap(&mut self, send: bool, cid: u16, len: u32) {
        let fctype = if send {
            super::fabrics::fctype::AUTH_SEND
        } else {
            super::fabrics::fctype::AUTH_RECEIVE
        };
        {
            let mut s = Sqe::new_unchecked(self.buffer.as_mut());
            s.set_opcode(FABRICS_OPCODE);
            s.set_fctype(fctype);
            s.set_cid(cid);
        }
        let b = self.buffer.as_mut();
        set_u8(b, field::SECP.start, SECP_DHCHAP);
        set_u8(b, field::SPSP0.start, SPSP_DHCHAP);
        set_u8(b, field::SPSP1.start, SPSP_DHCHAP);
        set_u32(b, field::LEN, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_at_linux_offsets() {
        let mut b = [0u8; SQE_LEN];
        AuthCmd::new_unchecked(&mut b[..]).set_dhchap(true, 7, 72);
        assert_eq!(b[0], FABRICS_OPCODE);
        assert_eq!(b[4], super::super::fabrics::fctype::AUTH_SEND);
        assert_eq!(&b[41..44], &[1, 1, 0xE9]);
        assert_eq!(u32::from_le_bytes([b[44], b[45], b[46], b[47]]), 72);
        let v = AuthCmd::new_unchecked(&b[..]);
        assert_eq!((v.secp(), v.spsp0(), v.spsp1(), v.len()), (0xE9, 1, 1, 72));
        assert_eq!(v.as_sqe().cid(), 7);
    }
}
