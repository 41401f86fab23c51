//! NVMe/TCP transport binding: the PDU headers (NVMe/TCP Transport Specification 1.0;
//! Linux `include/linux/nvme-tcp.h`).
//!
//! Every PDU starts with the 8-byte common header (CH), followed by the PDU specific
//! header (PSH), an optional header digest, optional padding up to the PDU data
//! offset, the PDU data and an optional data digest:
//!
//! ```text
//! 0 type   1 flags   2 hlen   3 pdo   4..8 plen (le32)          common header
//! 8..hlen  PDU specific header
//! [hlen..hlen+4 HDGST]  [PAD up to pdo]  [pdo..  DATA]  [DDGST]
//! ```
//!
//! The views here cover a PDU's header (CH + PSH, `hlen` bytes); digests, padding and
//! data are the framer's business (`crate::transport::tcp`). Field accessors are named
//! as in Linux (`command_id`, `data_offset`, `maxdata`, ...); the specification's names
//! (CCCID, DATAO, MAXH2CDATA, ...) are given in the docs.

use super::{get_bytes, get_bytes_mut, getters, setters, view};

/// The TCP port NVMe/TCP discovery controllers listen on (Linux `NVME_TCP_DISC_PORT`).
pub const NVME_TCP_DISC_PORT: u16 = 8009;
/// In-capsule data the admin queue accepts (Linux `NVME_TCP_ADMIN_CCSZ`, 8 KiB).
pub const NVME_TCP_ADMIN_CCSZ: usize = 8192;
/// The only PDU format version defined (Linux `NVME_TCP_PFV_1_0`).
pub const NVME_TCP_PFV_1_0: u16 = 0x0;

/// The length of the common header.
pub const HDR_LEN: usize = 8;
/// The length of an ICReq PDU (header only; no digests, no data).
pub const ICREQ_LEN: usize = 128;
/// The length of an ICResp PDU.
pub const ICRESP_LEN: usize = 128;
/// The header length of a CapsuleCmd PDU: common header + 64-byte SQE.
pub const CMD_HDR_LEN: usize = HDR_LEN + 64;
/// The header length of a CapsuleResp PDU: common header + 16-byte CQE.
pub const RSP_LEN: usize = HDR_LEN + 16;
/// The header length of an H2CData or C2HData PDU.
pub const DATA_HDR_LEN: usize = 24;
/// The header length of an R2T PDU.
pub const R2T_LEN: usize = 24;
/// The header length of an H2CTermReq or C2HTermReq PDU.
pub const TERM_HDR_LEN: usize = 24;
/// The length of a header or data digest (CRC32C; Linux `NVME_TCP_DIGEST_LENGTH`).
pub const DIGEST_LEN: usize = 4;
/// The most bytes of the offending PDU's header a termination request carries: the
/// largest PDU header (ICReq, 128 bytes).
pub const MAX_TERM_DATA: usize = ICREQ_LEN;
/// The longest termination request this side sends: header + [`MAX_TERM_DATA`]
/// (Linux `NVME_TCP_MAX_C2HTERM_PLEN`, 152).
pub const MAX_TERM_PLEN: usize = TERM_HDR_LEN + MAX_TERM_DATA;
/// The longest termination request accepted: SPDK and FreeBSD allow 152 bytes of
/// error data after the 24-byte header (`NVME_TCP_TERM_REQ_PDU_MAX_SIZE`, 176).
pub const MAX_TERM_PLEN_ACCEPTED: usize = TERM_HDR_LEN + 152;
/// The smallest MAXH2CDATA a controller may advertise (Linux `NVME_TCP_MIN_MAXH2CDATA`).
pub const MIN_MAXH2CDATA: u32 = 4096;
/// The largest HPDA / CPDA value (0's based dwords: 128-byte alignment).
pub const PDA_MAX: u8 = 31;

/// PDU types (Linux `enum nvme_tcp_pdu_type`). Even types travel host to controller,
/// odd types controller to host.
pub mod pdu_type {
    /// Initialize Connection Request.
    pub const ICREQ: u8 = 0x00;
    /// Initialize Connection Response.
    pub const ICRESP: u8 = 0x01;
    /// Host to Controller Terminate Connection Request.
    pub const H2C_TERM: u8 = 0x02;
    /// Controller to Host Terminate Connection Request.
    pub const C2H_TERM: u8 = 0x03;
    /// Command Capsule.
    pub const CMD: u8 = 0x04;
    /// Response Capsule.
    pub const RSP: u8 = 0x05;
    /// Host to Controller Data.
    pub const H2C_DATA: u8 = 0x06;
    /// Controller to Host Data.
    pub const C2H_DATA: u8 = 0x07;
    /// Ready to Transfer.
    pub const R2T: u8 = 0x09;
}

/// A human name for a PDU type.
pub fn pdu_type_name(t: u8) -> &'static str {
    match t {
        pdu_type::ICREQ => "ICReq",
        pdu_type::ICRESP => "ICResp",
        pdu_type::H2C_TERM => "H2CTermReq",
        pdu_type::C2H_TERM => "C2HTermReq",
        pdu_type::CMD => "CapsuleCmd",
        pdu_type::RSP => "CapsuleResp",
        pdu_type::H2C_DATA => "H2CData",
        pdu_type::C2H_DATA => "C2HData",
        pdu_type::R2T => "R2T",
        _ => "unknown",
    }
}

/// Common header flags (Linux `enum nvme_tcp_pdu_flags`).
pub mod flags {
    /// A header digest follows the PDU header (HDGSTF).
    pub const HDGST: u8 = 1 << 0;
    /// A data digest follows the PDU data (DDGSTF).
    pub const DDGST: u8 = 1 << 1;
    /// H2CData / C2HData: the last data PDU of the transfer (LAST_PDU).
    pub const DATA_LAST: u8 = 1 << 2;
    /// C2HData: the command completed successfully and no CapsuleResp follows
    /// (SUCCESS; only valid together with [`DATA_LAST`]).
    pub const DATA_SUCCESS: u8 = 1 << 3;
}

/// ICReq / ICResp `digest` bits (Linux `enum nvme_tcp_digest_option`).
pub mod digest {
    /// Header digests enabled (HDGST_ENABLE).
    pub const HDGST_ENABLE: u8 = 1 << 0;
    /// Data digests enabled (DDGST_ENABLE).
    pub const DDGST_ENABLE: u8 = 1 << 1;
}

/// Fatal Error Status values of a termination request (Linux
/// `enum nvme_tcp_fatal_error_status`).
pub mod term_fes {
    /// Invalid PDU Header Field; FEI is the byte offset of the field.
    pub const INVALID_HEADER_FIELD: u16 = 0x01;
    /// PDU Sequence Error.
    pub const PDU_SEQUENCE_ERROR: u16 = 0x02;
    /// Header Digest Error; FEI is the received header digest.
    pub const HEADER_DIGEST_ERROR: u16 = 0x03;
    /// Data Transfer Out Of Range.
    pub const DATA_OUT_OF_RANGE: u16 = 0x04;
    /// R2T Limit Exceeded; the specification's Data Transfer Limit Exceeded (Linux
    /// defines both names as 5).
    pub const R2T_LIMIT_EXCEEDED: u16 = 0x05;
    /// Data Transfer Limit Exceeded (the same value as [`R2T_LIMIT_EXCEEDED`]).
    pub const DATA_LIMIT_EXCEEDED: u16 = 0x05;
    /// Unsupported Parameter; FEI is the byte offset of the field.
    pub const UNSUPPORTED_PARAMETER: u16 = 0x06;
}

/// A human name for a Fatal Error Status.
pub fn term_fes_name(fes: u16) -> &'static str {
    match fes {
        term_fes::INVALID_HEADER_FIELD => "invalid PDU header field",
        term_fes::PDU_SEQUENCE_ERROR => "PDU sequence error",
        term_fes::HEADER_DIGEST_ERROR => "header digest error",
        term_fes::DATA_OUT_OF_RANGE => "data transfer out of range",
        term_fes::DATA_LIMIT_EXCEEDED => "data transfer limit exceeded",
        term_fes::UNSUPPORTED_PARAMETER => "unsupported parameter",
        _ => "unknown",
    }
}

/// Byte offsets of PDU header fields from the start of the PDU, as `u32` for the
/// Fatal Error Information of a termination request.
pub mod offset {
    pub const TYPE: u32 = 0;
    pub const FLAGS: u32 = 1;
    pub const HLEN: u32 = 2;
    pub const PDO: u32 = 3;
    pub const PLEN: u32 = 4;
    /// ICReq / ICResp PFV.
    pub const PFV: u32 = 8;
    /// ICReq HPDA.
    pub const HPDA: u32 = 10;
    /// ICResp CPDA.
    pub const CPDA: u32 = 10;
    /// ICReq / ICResp digest.
    pub const DIGEST: u32 = 11;
    /// ICReq MAXR2T.
    pub const MAXR2T: u32 = 12;
    /// ICResp MAXH2CDATA.
    pub const MAXDATA: u32 = 12;
    /// Termination request FES.
    pub const FES: u32 = 8;
    /// Termination request FEI.
    pub const FEI: u32 = 10;
    /// CapsuleCmd SQE.
    pub const CMD: u32 = 8;
    /// CapsuleResp CQE.
    pub const CQE: u32 = 8;
    /// H2CData / C2HData / R2T CCCID.
    pub const COMMAND_ID: u32 = 8;
    /// H2CData / C2HData / R2T TTAG.
    pub const TTAG: u32 = 10;
    /// H2CData / C2HData DATAO.
    pub const DATA_OFFSET: u32 = 12;
    /// H2CData / C2HData DATAL.
    pub const DATA_LENGTH: u32 = 16;
    /// R2T R2TO.
    pub const R2T_OFFSET: u32 = 12;
    /// R2T R2TL.
    pub const R2T_LENGTH: u32 = 16;
}

mod field {
    use core::ops::Range;
    pub const TYPE: Range<usize> = 0..1;
    pub const FLAGS: Range<usize> = 1..2;
    pub const HLEN: Range<usize> = 2..3;
    pub const PDO: Range<usize> = 3..4;
    pub const PLEN: Range<usize> = 4..8;
    pub const HDR: Range<usize> = 0..8;
}

mod ic_field {
    use core::ops::Range;
    pub const PFV: Range<usize> = 8..10;
    /// HPDA (ICReq) or CPDA (ICResp).
    pub const PDA: Range<usize> = 10..11;
    pub const DIGEST: Range<usize> = 11..12;
    /// MAXR2T (ICReq) or MAXH2CDATA (ICResp).
    pub const MAX: Range<usize> = 12..16;
}

mod term_field {
    use core::ops::Range;
    pub const FES: Range<usize> = 8..10;
    /// Bytes 13:10 per the specification, SPDK and FreeBSD. Linux's
    /// `struct nvme_tcp_term_pdu` is not packed and would put `fei` at 12; Linux only
    /// ever reads `fes` and never sends one, so the specification wins.
    pub const FEI: Range<usize> = 10..14;
}

mod capsule_field {
    use core::ops::Range;
    pub const SQE: Range<usize> = 8..72;
    pub const CQE: Range<usize> = 8..24;
}

mod data_field {
    use core::ops::Range;
    pub const COMMAND_ID: Range<usize> = 8..10;
    pub const TTAG: Range<usize> = 10..12;
    /// DATAO (data PDUs) or R2TO (R2T).
    pub const OFFSET: Range<usize> = 12..16;
    /// DATAL (data PDUs) or R2TL (R2T).
    pub const LENGTH: Range<usize> = 16..20;
}

view!(
    /// A view of the 8-byte common header (Linux `struct nvme_tcp_hdr`).
    Header,
    HDR_LEN
);

impl<T: AsRef<[u8]>> Header<T> {
    getters! {
        /// PDU type (Linux `type`; see [`pdu_type`]).
        pdu_type: u8 = field::TYPE,
        /// PDU specific flags (see [`flags`]).
        flags: u8 = field::FLAGS,
        /// PDU header length: common header + PDU specific header, without digest.
        hlen: u8 = field::HLEN,
        /// PDU data offset from the start of the PDU (0 when there is no data).
        pdo: u8 = field::PDO,
        /// Total PDU length in bytes, digests and padding included.
        plen: u32 = field::PLEN,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    setters! {
        set_pdu_type: u8 = field::TYPE,
        set_flags: u8 = field::FLAGS,
        set_hlen: u8 = field::HLEN,
        set_pdo: u8 = field::PDO,
        set_plen: u32 = field::PLEN,
    }
}

/// `header()` / `header_mut()` for the views that start with a common header.
macro_rules! with_header {
    ($name:ident) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// The common header.
            pub fn header(&self) -> Header<&[u8]> {
                Header::new_unchecked(get_bytes(self.buffer.as_ref(), field::HDR))
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The common header, mutably.
            pub fn header_mut(&mut self) -> Header<&mut [u8]> {
                Header::new_unchecked(get_bytes_mut(self.buffer.as_mut(), field::HDR))
            }
        }
    };
}

view!(
    /// A view of an ICReq PDU (Linux `struct nvme_tcp_icreq_pdu`).
    IcReq,
    ICREQ_LEN
);
with_header!(IcReq);

impl<T: AsRef<[u8]>> IcReq<T> {
    getters! {
        /// PDU format version ([`NVME_TCP_PFV_1_0`]).
        pfv: u16 = ic_field::PFV,
        /// Host PDU data alignment: 0's based dwords the host wants C2H data aligned to.
        hpda: u8 = ic_field::PDA,
        /// Digests the host asks for ([`digest`]).
        digest: u8 = ic_field::DIGEST,
        /// Maximum outstanding R2Ts per command the host supports (0's based).
        maxr2t: u32 = ic_field::MAX,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcReq<T> {
    setters! {
        set_pfv: u16 = ic_field::PFV,
        set_hpda: u8 = ic_field::PDA,
        set_digest: u8 = ic_field::DIGEST,
        set_maxr2t: u32 = ic_field::MAX,
    }
}

view!(
    /// A view of an ICResp PDU (Linux `struct nvme_tcp_icresp_pdu`).
    IcResp,
    ICRESP_LEN
);
with_header!(IcResp);

impl<T: AsRef<[u8]>> IcResp<T> {
    getters! {
        /// PDU format version ([`NVME_TCP_PFV_1_0`]).
        pfv: u16 = ic_field::PFV,
        /// Controller PDU data alignment: 0's based dwords the controller wants H2C
        /// data aligned to.
        cpda: u8 = ic_field::PDA,
        /// Digests enabled for the connection ([`digest`]).
        digest: u8 = ic_field::DIGEST,
        /// Maximum PDU data bytes per H2CData PDU (the specification's MAXH2CDATA).
        maxdata: u32 = ic_field::MAX,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcResp<T> {
    setters! {
        set_pfv: u16 = ic_field::PFV,
        set_cpda: u8 = ic_field::PDA,
        set_digest: u8 = ic_field::DIGEST,
        set_maxdata: u32 = ic_field::MAX,
    }
}

view!(
    /// A view of an H2CTermReq / C2HTermReq header (Linux `struct nvme_tcp_term_pdu`).
    /// The PDU data that follows holds the header of the PDU in error.
    TermReq,
    TERM_HDR_LEN
);
with_header!(TermReq);

impl<T: AsRef<[u8]>> TermReq<T> {
    getters! {
        /// Fatal error status ([`term_fes`]).
        fes: u16 = term_field::FES,
        /// Fatal error information (bytes 13:10; see [`term_fes`]).
        fei: u32 = term_field::FEI,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TermReq<T> {
    setters! {
        set_fes: u16 = term_field::FES,
        set_fei: u32 = term_field::FEI,
    }
}

view!(
    /// A view of a CapsuleCmd header (Linux `struct nvme_tcp_cmd_pdu`): common header
    /// and the 64-byte submission queue entry. In-capsule data follows at `pdo`.
    CapsuleCmd,
    CMD_HDR_LEN
);
with_header!(CapsuleCmd);

impl<T: AsRef<[u8]>> CapsuleCmd<T> {
    /// The submission queue entry (Linux `cmd`; view it with [`super::sqe::Sqe`]).
    pub fn cmd(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), capsule_field::SQE)
    }
}

impl<'a> CapsuleCmd<&'a [u8]> {
    /// The submission queue entry, borrowed for as long as the PDU's bytes; `None`
    /// when the buffer is too short to hold it.
    pub fn sqe(&self) -> Option<&'a [u8; super::sqe::SQE_LEN]> {
        let buffer: &'a [u8] = self.buffer;
        buffer.get(capsule_field::SQE)?.first_chunk()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CapsuleCmd<T> {
    /// The submission queue entry, mutably.
    pub fn cmd_mut(&mut self) -> &mut [u8] {
        get_bytes_mut(self.buffer.as_mut(), capsule_field::SQE)
    }
}

view!(
    /// A view of a CapsuleResp PDU (Linux `struct nvme_tcp_rsp_pdu`): common header
    /// and the 16-byte completion queue entry.
    CapsuleResp,
    RSP_LEN
);
with_header!(CapsuleResp);

impl<T: AsRef<[u8]>> CapsuleResp<T> {
    /// The completion queue entry (Linux `cqe`; view it with [`super::cqe::Cqe`]).
    pub fn cqe(&self) -> &[u8] {
        get_bytes(self.buffer.as_ref(), capsule_field::CQE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CapsuleResp<T> {
    /// The completion queue entry, mutably.
    pub fn cqe_mut(&mut self) -> &mut [u8] {
        get_bytes_mut(self.buffer.as_mut(), capsule_field::CQE)
    }
}

view!(
    /// A view of an H2CData / C2HData header (Linux `struct nvme_tcp_data_pdu`).
    DataPdu,
    DATA_HDR_LEN
);
with_header!(DataPdu);

impl<T: AsRef<[u8]>> DataPdu<T> {
    getters! {
        /// Command identifier of the command the data belongs to (CCCID).
        command_id: u16 = data_field::COMMAND_ID,
        /// Transfer tag from the R2T (H2CData); reserved in C2HData.
        ttag: u16 = data_field::TTAG,
        /// Offset of this PDU's data from the start of the command's data (DATAO).
        data_offset: u32 = data_field::OFFSET,
        /// Length of this PDU's data (DATAL).
        data_length: u32 = data_field::LENGTH,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataPdu<T> {
    setters! {
        set_command_id: u16 = data_field::COMMAND_ID,
        set_ttag: u16 = data_field::TTAG,
        set_data_offset: u32 = data_field::OFFSET,
        set_data_length: u32 = data_field::LENGTH,
    }
}

view!(
    /// A view of an R2T PDU (Linux `struct nvme_tcp_r2t_pdu`).
    R2t,
    R2T_LEN
);
with_header!(R2t);

impl<T: AsRef<[u8]>> R2t<T> {
    getters! {
        /// Command identifier of the command the transfer belongs to (CCCID).
        command_id: u16 = data_field::COMMAND_ID,
        /// Transfer tag the host echoes in its H2CData PDUs (TTAG).
        ttag: u16 = data_field::TTAG,
        /// Offset of the requested data from the start of the command's data (R2TO).
        r2t_offset: u32 = data_field::OFFSET,
        /// Length of the requested data (R2TL).
        r2t_length: u32 = data_field::LENGTH,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> R2t<T> {
    setters! {
        set_command_id: u16 = data_field::COMMAND_ID,
        set_ttag: u16 = data_field::TTAG,
        set_r2t_offset: u32 = data_field::OFFSET,
        set_r2t_length: u32 = data_field::LENGTH,
    }
}

/// Writes a common header into the first [`HDR_LEN`] bytes of `buf` (no-op when short).
pub fn emit_header(buf: &mut [u8], pdu_type: u8, flags: u8, hlen: u8, pdo: u8, plen: u32) {
    let mut h = Header::new_unchecked(buf);
    h.set_pdu_type(pdu_type);
    h.set_flags(flags);
    h.set_hlen(hlen);
    h.set_pdo(pdo);
    h.set_plen(plen);
}

const IC_HLEN: u8 = ICREQ_LEN as u8;
const IC_PLEN: u32 = ICREQ_LEN as u32;

/// Builds an ICReq PDU. ICReq never carries digests or data.
pub fn icreq(pfv: u16, hpda: u8, digest: u8, maxr2t: u32) -> [u8; ICREQ_LEN] {
    let mut r = IcReq::new_unchecked([0u8; ICREQ_LEN]);
    emit_header(r.as_bytes_mut(), pdu_type::ICREQ, 0, IC_HLEN, 0, IC_PLEN);
    r.set_pfv(pfv);
    r.set_hpda(hpda);
    r.set_digest(digest);
    r.set_maxr2t(maxr2t);
    r.into_inner()
}

/// Builds an ICResp PDU. ICResp never carries digests or data.
pub fn icresp(pfv: u16, cpda: u8, digest: u8, maxdata: u32) -> [u8; ICRESP_LEN] {
    let mut r = IcResp::new_unchecked([0u8; ICRESP_LEN]);
    emit_header(r.as_bytes_mut(), pdu_type::ICRESP, 0, IC_HLEN, 0, IC_PLEN);
    r.set_pfv(pfv);
    r.set_cpda(cpda);
    r.set_digest(digest);
    r.set_maxdata(maxdata);
    r.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    // Offsets and sizes checked against include/linux/nvme-tcp.h:
    // nvme_tcp_hdr {u8 type, flags, hlen, pdo; le32 plen} = 8 bytes;
    // icreq {hdr; le16 pfv; u8 hpda, digest; le32 maxr2t; u8 rsvd2[112]} = 128;
    // icresp {hdr; le16 pfv; u8 cpda, digest; le32 maxdata; u8 rsvd[112]} = 128;
    // cmd {hdr; nvme_command (64)} = 72; rsp {hdr; nvme_completion (16)} = 24;
    // r2t / data {hdr; u16 command_id, ttag; le32 offset, length; u8 rsvd[4]} = 24.

    #[test]
    fn constants_match_linux() {
        assert_eq!(
            (
                pdu_type::ICREQ,
                pdu_type::ICRESP,
                pdu_type::H2C_TERM,
                pdu_type::C2H_TERM
            ),
            (0, 1, 2, 3)
        );
        assert_eq!(
            (
                pdu_type::CMD,
                pdu_type::RSP,
                pdu_type::H2C_DATA,
                pdu_type::C2H_DATA
            ),
            (4, 5, 6, 7)
        );
        assert_eq!(pdu_type::R2T, 9);
        assert_eq!(
            (
                flags::HDGST,
                flags::DDGST,
                flags::DATA_LAST,
                flags::DATA_SUCCESS
            ),
            (1, 2, 4, 8)
        );
        assert_eq!((digest::HDGST_ENABLE, digest::DDGST_ENABLE), (1, 2));
        assert_eq!(
            [
                term_fes::INVALID_HEADER_FIELD,
                term_fes::PDU_SEQUENCE_ERROR,
                term_fes::HEADER_DIGEST_ERROR,
                term_fes::DATA_OUT_OF_RANGE,
                term_fes::R2T_LIMIT_EXCEEDED,
                term_fes::UNSUPPORTED_PARAMETER
            ],
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(term_fes::DATA_LIMIT_EXCEEDED, term_fes::R2T_LIMIT_EXCEEDED);
        assert_eq!(
            (CMD_HDR_LEN, RSP_LEN, DATA_HDR_LEN, R2T_LEN, TERM_HDR_LEN),
            (72, 24, 24, 24, 24)
        );
        assert_eq!((MAX_TERM_PLEN, MAX_TERM_PLEN_ACCEPTED), (152, 176));
        assert_eq!(term_fes_name(5), "data transfer limit exceeded");
        assert_eq!(term_fes_name(0), "unknown");
        assert_eq!(pdu_type_name(pdu_type::R2T), "R2T");
        assert_eq!(pdu_type_name(8), "unknown");
    }

    #[test]
    fn header_golden() {
        let mut b = [0u8; HDR_LEN];
        emit_header(&mut b, pdu_type::C2H_DATA, 0x0D, 24, 28, 0x0102_0304);
        assert_eq!(b, [0x07, 0x0D, 24, 28, 0x04, 0x03, 0x02, 0x01]);
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(
            (h.pdu_type(), h.flags(), h.hlen(), h.pdo(), h.plen()),
            (7, 0x0D, 24, 28, 0x0102_0304)
        );
        assert_eq!(
            Header::new_checked(&b[..7]).err(),
            Some(WireError::Truncated { need: 8, have: 7 })
        );
        // Getters on a short buffer read zeros rather than panic.
        assert_eq!(Header::new_unchecked(&b[..3]).plen(), 0);
    }

    #[test]
    fn icreq_golden() {
        let b = icreq(
            NVME_TCP_PFV_1_0,
            3,
            digest::HDGST_ENABLE | digest::DDGST_ENABLE,
            0x11223344,
        );
        assert_eq!(
            &b[..16],
            &[0x00, 0, 128, 0, 128, 0, 0, 0, 0, 0, 3, 3, 0x44, 0x33, 0x22, 0x11]
        );
        assert!(b[16..].iter().all(|&x| x == 0));
        let v = IcReq::new_checked(&b[..]).unwrap();
        assert_eq!(
            (v.pfv(), v.hpda(), v.digest(), v.maxr2t()),
            (0, 3, 3, 0x11223344)
        );
        assert_eq!(v.header().plen(), 128);
        assert!(IcReq::new_checked(&b[..127]).is_err());
    }

    #[test]
    fn icresp_golden() {
        let b = icresp(NVME_TCP_PFV_1_0, 0, digest::DDGST_ENABLE, 0x0040_0000);
        assert_eq!(
            &b[..16],
            &[0x01, 0, 128, 0, 128, 0, 0, 0, 0, 0, 0, 2, 0x00, 0x00, 0x40, 0x00]
        );
        assert!(b[16..].iter().all(|&x| x == 0));
        let v = IcResp::new_checked(&b[..]).unwrap();
        assert_eq!(
            (v.pfv(), v.cpda(), v.digest(), v.maxdata()),
            (0, 0, 2, 0x0040_0000)
        );
    }

    #[test]
    fn term_golden() {
        let mut b = [0u8; TERM_HDR_LEN];
        let mut t = TermReq::new_unchecked(&mut b[..]);
        emit_header(t.as_bytes_mut(), pdu_type::C2H_TERM, 0, 24, 0, 32);
        t.set_fes(term_fes::INVALID_HEADER_FIELD);
        t.set_fei(offset::HLEN);
        assert_eq!(t.header().pdu_type(), pdu_type::C2H_TERM);
        assert_eq!(
            b,
            [3, 0, 24, 0, 32, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let t = TermReq::new_checked(&b[..]).unwrap();
        assert_eq!((t.fes(), t.fei()), (1, 2));
    }

    #[test]
    fn capsule_golden() {
        let mut b = [0u8; CMD_HDR_LEN];
        let mut c = CapsuleCmd::new_unchecked(&mut b[..]);
        c.header_mut().set_pdu_type(pdu_type::CMD);
        c.header_mut().set_hlen(72);
        c.header_mut().set_plen(72);
        c.cmd_mut()[0] = 0x02;
        c.cmd_mut()[2..4].copy_from_slice(&0xBEEFu16.to_le_bytes());
        assert_eq!(&b[..12], &[4, 0, 72, 0, 72, 0, 0, 0, 0x02, 0, 0xEF, 0xBE]);
        let c = CapsuleCmd::new_checked(&b[..]).unwrap();
        assert_eq!(c.cmd().len(), 64);
        assert_eq!(c.header().hlen(), 72);

        let mut r = [0u8; RSP_LEN];
        let mut v = CapsuleResp::new_unchecked(&mut r[..]);
        v.header_mut().set_pdu_type(pdu_type::RSP);
        v.cqe_mut()[12] = 0x34;
        v.cqe_mut()[13] = 0x12;
        assert_eq!(r[0], 5);
        assert_eq!(&r[20..22], &[0x34, 0x12]);
        assert_eq!(CapsuleResp::new_unchecked(&r[..]).cqe().len(), 16);
        assert_eq!(CapsuleResp::new_unchecked(&r[..10]).cqe(), &[] as &[u8]);
    }

    #[test]
    fn data_and_r2t_golden() {
        let mut b = [0u8; DATA_HDR_LEN];
        let mut d = DataPdu::new_unchecked(&mut b[..]);
        emit_header(
            d.as_bytes_mut(),
            pdu_type::H2C_DATA,
            flags::DATA_LAST,
            24,
            24,
            24 + 512,
        );
        d.set_command_id(0x0102);
        d.set_ttag(0x0304);
        d.set_data_offset(0x0506_0708);
        d.set_data_length(512);
        assert_eq!(
            b,
            [
                6, 4, 24, 24, 0x18, 2, 0, 0, 0x02, 0x01, 0x04, 0x03, 0x08, 0x07, 0x06, 0x05, 0, 2,
                0, 0, 0, 0, 0, 0
            ]
        );
        let d = DataPdu::new_checked(&b[..]).unwrap();
        assert_eq!(
            (d.command_id(), d.ttag(), d.data_offset(), d.data_length()),
            (0x0102, 0x0304, 0x0506_0708, 512)
        );

        let mut b = [0u8; R2T_LEN];
        let mut r = R2t::new_unchecked(&mut b[..]);
        emit_header(r.as_bytes_mut(), pdu_type::R2T, 0, 24, 0, 24);
        r.set_command_id(7);
        r.set_ttag(9);
        r.set_r2t_offset(4096);
        r.set_r2t_length(8192);
        assert_eq!(
            b,
            [9, 0, 24, 0, 24, 0, 0, 0, 7, 0, 9, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0]
        );
        let r = R2t::new_checked(&b[..]).unwrap();
        assert_eq!(
            (r.command_id(), r.ttag(), r.r2t_offset(), r.r2t_length()),
            (7, 9, 4096, 8192)
        );
    }

    #[test]
    fn offsets_match_fields() {
        use core::ops::Range;
        let start = |r: Range<usize>| r.start as u32;
        assert_eq!(offset::PLEN, start(field::PLEN));
        assert_eq!(offset::HPDA, start(ic_field::PDA));
        assert_eq!(offset::MAXDATA, start(ic_field::MAX));
        assert_eq!(offset::FEI, start(term_field::FEI));
        assert_eq!(offset::DATA_LENGTH, start(data_field::LENGTH));
        assert_eq!(offset::R2T_OFFSET, start(data_field::OFFSET));
        assert_eq!(offset::CMD, start(capsule_field::SQE));
    }
}
