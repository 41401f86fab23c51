//! The send side: PDUs encoded with the negotiated digests and data alignment.

use super::{data_digest, header_digest, pda_bytes, IcReqParams, IcRespParams, Negotiated, Role};
use crate::wire::cqe::CQE_LEN;
use crate::wire::sqe::SQE_LEN;
use crate::wire::tcp::{emit_header, flags, icreq, icresp, pdu_type, CapsuleCmd, CapsuleResp};
use crate::wire::tcp::{DataPdu, R2t, TermReq, CMD_HDR_LEN, DATA_HDR_LEN, DIGEST_LEN};
use crate::wire::tcp::{MAX_TERM_DATA, R2T_LEN, RSP_LEN, TERM_HDR_LEN};
use crate::wire::WireError;

/// Appends an ICReq PDU to `out`.
pub fn encode_icreq(p: &IcReqParams, out: &mut Vec<u8>) {
    out.extend_from_slice(&icreq(p.pfv, p.hpda, p.digest, p.maxr2t));
}

/// Appends an ICResp PDU to `out`.
pub fn encode_icresp(p: &IcRespParams, out: &mut Vec<u8>) {
    out.extend_from_slice(&icresp(p.pfv, p.cpda, p.digest, p.maxh2cdata));
}

/// Appends the termination request `role` sends (C2HTermReq from a controller,
/// H2CTermReq from a host) with the header of the offending PDU, cut to
/// [`MAX_TERM_DATA`] bytes. Termination requests never carry digests.
pub fn encode_term_req(role: Role, fes: u16, fei: u32, pdu_header: &[u8], out: &mut Vec<u8>) {
    let copy = pdu_header.get(..MAX_TERM_DATA).unwrap_or(pdu_header);
    let start = out.len();
    out.resize(start + TERM_HDR_LEN, 0);
    if let Some(hdr) = out.get_mut(start..) {
        emit_header(
            hdr,
            role.term_type(),
            0,
            TERM_HDR_LEN as u8,
            0,
            (TERM_HDR_LEN + copy.len()) as u32,
        );
        let mut t = TermReq::new_unchecked(hdr);
        t.set_fes(fes);
        t.set_fei(fei);
    }
    out.extend_from_slice(copy);
}

/// Encodes the PDUs of an initialized connection: header digests, PDO padding to the
/// peer's alignment, data digests, as negotiated. Each method appends one whole PDU to
/// `out` and returns its length; PDUs that travel the other way are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PduWriter {
    role: Role,
    header_digest: bool,
    data_digest: bool,
    align: usize,
    maxh2cdata: u32,
}

impl PduWriter {
    /// A writer for `role`'s end of a connection that negotiated `n`. A controller
    /// aligns C2H data to the host's HPDA, a host aligns H2C data to the controller's
    /// CPDA.
    pub fn new(role: Role, n: &Negotiated) -> Self {
        let pda = match role {
            Role::Controller => n.hpda,
            Role::Host => n.cpda,
        };
        PduWriter {
            role,
            header_digest: n.header_digest,
            data_digest: n.data_digest,
            align: pda_bytes(pda),
            maxh2cdata: n.maxh2cdata,
        }
    }

    /// The end of the connection this writer serves.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Appends a CapsuleCmd with `data` in the capsule (host only).
    pub fn capsule_cmd(
        &self,
        sqe: &[u8; SQE_LEN],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        self.expect(Role::Host)?;
        let mut hdr = [0u8; CMD_HDR_LEN];
        CapsuleCmd::new_unchecked(&mut hdr[..])
            .cmd_mut()
            .copy_from_slice(sqe);
        self.encode(pdu_type::CMD, 0, &mut hdr, data, out)
    }

    /// Appends a CapsuleResp (controller only).
    pub fn capsule_resp(&self, cqe: &[u8; CQE_LEN], out: &mut Vec<u8>) -> Result<usize, WireError> {
        self.expect(Role::Controller)?;
        let mut hdr = [0u8; RSP_LEN];
        CapsuleResp::new_unchecked(&mut hdr[..])
            .cqe_mut()
            .copy_from_slice(cqe);
        self.encode(pdu_type::RSP, 0, &mut hdr, &[], out)
    }

    /// Appends an H2CData PDU (host only); `data` must not exceed MAXH2CDATA.
    pub fn h2c_data(
        &self,
        cid: u16,
        ttag: u16,
        datao: u32,
        data: &[u8],
        last: bool,
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        let plen = self.h2c_data_head(cid, ttag, datao, data, last, out)?;
        Ok(self.data_and_trailer(plen, data, out))
    }

    /// Appends what precedes an H2CData PDU's data (header, header digest, padding to
    /// the controller's CPDA), so the data itself can be sent from where it lies,
    /// followed by [`PduWriter::data_trailer`]. Returns the whole PDU's length.
    pub fn h2c_data_head(
        &self,
        cid: u16,
        ttag: u16,
        datao: u32,
        data: &[u8],
        last: bool,
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        self.expect(Role::Host)?;
        if data.len() > self.maxh2cdata as usize {
            return Err(WireError::Invalid("H2CData longer than MAXH2CDATA"));
        }
        let fl = if last { flags::DATA_LAST } else { 0 };
        let mut hdr = data_header(cid, ttag, datao, data)?;
        self.encode_head(pdu_type::H2C_DATA, fl, &mut hdr, data.len(), out)
    }

    /// Appends a C2HData PDU (controller only). `success` (which needs `last`) tells
    /// the host no CapsuleResp follows.
    pub fn c2h_data(
        &self,
        cid: u16,
        datao: u32,
        data: &[u8],
        last: bool,
        success: bool,
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        let plen = self.c2h_data_head(cid, datao, data, last, success, out)?;
        Ok(self.data_and_trailer(plen, data, out))
    }

    /// Appends a data PDU's data and trailer after its head; returns `plen`.
    pub(super) fn data_and_trailer(&self, plen: usize, data: &[u8], out: &mut Vec<u8>) -> usize {
        out.extend_from_slice(data);
        self.data_trailer(data, out);
        plen
    }

    /// Appends what precedes a C2HData PDU's data (header, header digest, padding to
    /// the host's HPDA), so the data itself can be sent from where it lies, followed by
    /// [`PduWriter::data_trailer`]. Returns the whole PDU's length.
    pub fn c2h_data_head(
        &self,
        cid: u16,
        datao: u32,
        data: &[u8],
        last: bool,
        success: bool,
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        self.expect(Role::Controller)?;
        if success && !last {
            return Err(WireError::Invalid("C2HData SUCCESS needs LAST_PDU"));
        }
        if data.is_empty() {
            return Err(WireError::Invalid("C2HData without data"));
        }
        let fl = (if last { flags::DATA_LAST } else { 0 })
            | (if success { flags::DATA_SUCCESS } else { 0 });
        let mut hdr = data_header(cid, 0, datao, data)?;
        self.encode_head(pdu_type::C2H_DATA, fl, &mut hdr, data.len(), out)
    }

    /// Appends what follows a data PDU's data: its digest, when negotiated.
    pub fn data_trailer(&self, data: &[u8], out: &mut Vec<u8>) {
        if self.data_digest && !data.is_empty() {
            out.extend_from_slice(&data_digest(data).to_le_bytes());
        }
    }

    /// Appends an R2T (controller only).
    pub fn r2t(
        &self,
        cid: u16,
        ttag: u16,
        offset: u32,
        length: u32,
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        self.expect(Role::Controller)?;
        let mut hdr = [0u8; R2T_LEN];
        let mut r = R2t::new_unchecked(&mut hdr[..]);
        r.set_command_id(cid);
        r.set_ttag(ttag);
        r.set_r2t_offset(offset);
        r.set_r2t_length(length);
        self.encode(pdu_type::R2T, 0, &mut hdr, &[], out)
    }

    /// Appends the termination request of this side.
    pub fn term_req(&self, fes: u16, fei: u32, pdu_header: &[u8], out: &mut Vec<u8>) -> usize {
        let start = out.len();
        encode_term_req(self.role, fes, fei, pdu_header, out);
        out.len() - start
    }

    fn expect(&self, role: Role) -> Result<(), WireError> {
        if self.role == role {
            Ok(())
        } else {
            Err(WireError::Invalid("PDU type travels the other way"))
        }
    }

    /// Appends header, header digest, padding, data and data digest.
    // `encode` and `encode_head` are inlined into each PDU's method whatever the
    // crate's code-generation partition: every PDU on the data path goes through them.
    #[inline(always)]
    fn encode(
        &self,
        t: u8,
        fl: u8,
        hdr: &mut [u8],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        let plen = self.encode_head(t, fl, hdr, data.len(), out)?;
        out.extend_from_slice(data);
        self.data_trailer(data, out);
        Ok(plen)
    }

    /// Appends header, header digest and the padding before `data_len` bytes of data;
    /// returns the whole PDU's length. The one place a PDU's layout is computed.
    #[inline(always)]
    fn encode_head(
        &self,
        t: u8,
        fl: u8,
        hdr: &mut [u8],
        data_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, WireError> {
        let hlen = hdr.len();
        let full = hlen + if self.header_digest { DIGEST_LEN } else { 0 };
        let (pdo, plen) = if data_len == 0 {
            (0, full)
        } else {
            let pdo = full.div_ceil(self.align) * self.align;
            let ddgst = if self.data_digest { DIGEST_LEN } else { 0 };
            (pdo, pdo + data_len + ddgst)
        };
        let too_long = WireError::Invalid("PDU too long");
        let plen32 = u32::try_from(plen).map_err(|_| too_long)?;
        let pdo8 = u8::try_from(pdo).map_err(|_| too_long)?;
        let hlen8 = u8::try_from(hlen).map_err(|_| too_long)?;
        let mut fl = fl;
        if self.header_digest {
            fl |= flags::HDGST;
        }
        if self.data_digest && data_len > 0 {
            fl |= flags::DDGST;
        }
        emit_header(hdr, t, fl, hlen8, pdo8, plen32);
        out.reserve(plen);
        out.extend_from_slice(hdr);
        if self.header_digest {
            out.extend_from_slice(&header_digest(hdr).to_le_bytes());
        }
        if data_len > 0 {
            out.resize(out.len() + (pdo - full), 0);
        }
        Ok(plen)
    }
}

fn data_header(
    cid: u16,
    ttag: u16,
    datao: u32,
    data: &[u8],
) -> Result<[u8; DATA_HDR_LEN], WireError> {
    let datal = u32::try_from(data.len()).map_err(|_| WireError::Invalid("PDU too long"))?;
    let mut hdr = [0u8; DATA_HDR_LEN];
    let mut d = DataPdu::new_unchecked(&mut hdr[..]);
    d.set_command_id(cid);
    d.set_ttag(ttag);
    d.set_data_offset(datao);
    d.set_data_length(datal);
    Ok(hdr)
}
