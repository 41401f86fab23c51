//! Handling what the connection hands out (CapsuleResp, C2HData, R2T, data digest
//! errors, the controller's termination request) on the queue state: completions, data copied into command buffers, H2CData
//! answers to R2Ts, and the fatal errors a misbehaving controller causes.

use tracing::warn;

use nvmf_common::transport::tcp::{data_pieces, DataProgress, Event, FramerError, Pdu, Receiver};
use nvmf_common::wire::cqe::{Cqe, CQE_LEN};
use nvmf_common::wire::status::Status;
use nvmf_common::wire::tcp::{flags, offset, pdu_type, pdu_type_name, term_fes};

use super::{describe_term, Cmd, Conn, Fatal, WriteData, DATA_DIGEST_STATUS};

impl Conn {
    /// What the connection made of one PDU.
    fn handle_event(&mut self, ev: Event<'_>) -> Result<(), Fatal> {
        match ev {
            Event::Pdu(pdu) => self.on_pdu(pdu),
            Event::DataDigest {
                error:
                    e @ FramerError::DataDigest {
                        pdu_type: pdu_type::C2H_DATA,
                        cid,
                        ..
                    },
                header,
            } => self.on_data_digest_error(cid, &e, header),
            Event::DataDigest { error, .. } => Err(Fatal::quiet(format!(
                "invalid PDU from the controller: {error}"
            ))),
            Event::PeerTerminated { fes, fei } => Err(Fatal::quiet(describe_term(fes, fei))),
            Event::Failed { error, send } => {
                self.tx.bytes.extend_from_slice(send);
                Err(Fatal::flushed(format!(
                    "invalid PDU from the controller: {error}"
                )))
            }
            // The connection is initialized once, at connect.
            Event::Established { .. } => Err(Fatal::new(
                "a second connection initialization".into(),
                term_fes::PDU_SEQUENCE_ERROR,
                0,
            )),
        }
    }

    fn slot(&mut self, cid: u16) -> Option<&mut Cmd> {
        self.slots
            .get_mut(usize::from(cid))
            .and_then(Option::as_mut)
    }

    fn complete(&mut self, cid: u16, status: Status) {
        let mut c = Cqe::new_unchecked([0u8; CQE_LEN]);
        c.set_cid(cid);
        c.set_sqid(self.qid.0);
        c.set_status(status);
        self.cqes.push(c.into_inner());
        if let Some(s) = self.slots.get_mut(usize::from(cid)) {
            *s = None;
        }
    }

    fn on_pdu(&mut self, pdu: Pdu<'_>) -> Result<(), Fatal> {
        match pdu {
            Pdu::CapsuleResp { cqe } => {
                self.on_resp(cqe);
                Ok(())
            }
            Pdu::C2HData {
                cid,
                datao,
                datal,
                success,
                data,
                ..
            } => self.on_c2h_data(cid, datao, datal as usize, success, data),
            Pdu::R2T {
                cid,
                ttag,
                offset,
                length,
            } => self.on_r2t(cid, ttag, offset, length),
            // Termination requests arrive as `Event::PeerTerminated`.
            other => Err(Fatal::new(
                format!(
                    "unexpected {} PDU from the controller",
                    pdu_type_name(other.pdu_type())
                ),
                term_fes::PDU_SEQUENCE_ERROR,
                0,
            )),
        }
    }

    fn on_resp(&mut self, cqe: [u8; CQE_LEN]) {
        let mut cqe = cqe;
        let cid = Cqe::new_unchecked(&cqe[..]).cid();
        // An unknown cid goes up as is: the queue layer reports it.
        if let Some(s) = self.slots.get_mut(usize::from(cid)) {
            if let Some(cmd) = s.take() {
                if let Some(st) = cmd.failed {
                    let mut c = Cqe::new_unchecked(&mut cqe[..]);
                    c.set_status(st);
                }
            }
        }
        self.cqes.push(cqe);
    }

    /// C2HData of `datal` bytes at `datao`; `data` is what the framer holds of them
    /// (all unless the rest was received in place, see `destination`).
    fn on_c2h_data(
        &mut self,
        cid: u16,
        datao: u32,
        datal: usize,
        success: bool,
        data: &[u8],
    ) -> Result<(), Fatal> {
        let Some(cmd) = self.slot(cid) else {
            return Err(Fatal::new(
                format!(
                    "C2HData for command id {cid}, which is not outstanding (unknown command id)"
                ),
                term_fes::INVALID_HEADER_FIELD,
                offset::COMMAND_ID,
            ));
        };
        cmd.xfer
            .accept_c2h(cid, datao, datal)
            .map_err(Fatal::transfer)?;
        let Some(buf) = &cmd.buf else {
            return Err(Fatal::quiet(format!(
                "C2HData for command id {cid}, whose buffer is gone"
            )));
        };
        if cmd.failed.is_none() && !buf.write_at(datao as usize, data) {
            return Err(Fatal::quiet(format!(
                "C2HData for command id {cid}: cannot copy {} bytes at {datao} into its buffer",
                data.len()
            )));
        }
        if success {
            let st = cmd.failed.unwrap_or(Status::SUCCESS);
            self.complete(cid, st);
        }
        Ok(())
    }

    /// A C2HData PDU failed its data digest: its data is dropped and the command
    /// fails with Data Transfer Error (now if the PDU said SUCCESS, else with the
    /// CapsuleResp that follows).
    fn on_data_digest_error(
        &mut self,
        cid: u16,
        e: &FramerError,
        header: &[u8],
    ) -> Result<(), Fatal> {
        let fl = header.get(offset::FLAGS as usize).copied().unwrap_or(0);
        let qid = self.qid;
        let Some(cmd) = self.slot(cid) else {
            return Err(Fatal::new(
                format!("C2HData for command id {cid}, which is not outstanding (unknown command id), with {e}"),
                term_fes::INVALID_HEADER_FIELD,
                offset::COMMAND_ID,
            ));
        };
        cmd.xfer.expects_c2h(cid).map_err(Fatal::transfer)?;
        warn!(%qid, cid, "{e}: the command fails with Data Transfer Error");
        cmd.failed = Some(DATA_DIGEST_STATUS);
        if fl & flags::DATA_SUCCESS != 0 {
            self.complete(cid, DATA_DIGEST_STATUS);
        }
        Ok(())
    }

    fn on_r2t(&mut self, cid: u16, ttag: u16, r2to: u32, r2tl: u32) -> Result<(), Fatal> {
        let maxh2cdata = self.maxh2cdata.max(1);
        let Some(cmd) = self
            .slots
            .get_mut(usize::from(cid))
            .and_then(Option::as_mut)
        else {
            return Err(Fatal::new(
                format!("R2T for command id {cid}, which is not outstanding (unknown command id)"),
                term_fes::INVALID_HEADER_FIELD,
                offset::COMMAND_ID,
            ));
        };
        cmd.xfer
            .accept_r2t(cid, r2to, r2tl)
            .map_err(Fatal::transfer)?;
        let Some(buf) = cmd.buf.clone() else {
            return Err(Fatal::quiet(format!(
                "R2T for command id {cid}, whose buffer is gone"
            )));
        };
        // SAFETY: the caller does not write a write command's buffer until the command
        // completes, and nothing else writes it (TCP has no DMA); the borrow ends with
        // the copies into H2CData PDUs below.
        let whole = unsafe { buf.buf.slice(buf.offset, buf.len) }.unwrap_or(&[]);
        for p in data_pieces(r2to, r2tl, maxh2cdata, false) {
            let Some(piece) = whole.get(p.range()) else {
                return Err(Fatal::quiet(format!(
                    "R2T for command id {cid}: cannot read bytes {:?} of its buffer",
                    p.range()
                )));
            };
            // Large data is sent from the command's buffer, not copied.
            let by_ref = || {
                Some(WriteData {
                    buf: buf.buf.clone(),
                    offset: buf.offset + p.range().start,
                    len: piece.len(),
                })
            };
            self.tx
                .push_data_pdu(&self.writer, cid, ttag, p, piece, by_ref)
                .map_err(|e| Fatal::quiet(format!("encoding H2CData: {e}")))?;
        }
        let pos = self.tx_position();
        if let Some(c) = self.slot(cid) {
            c.tx_end = pos;
        }
        Ok(())
    }
}

impl Receiver for Conn {
    type Error = Fatal;

    /// Where the rest of the C2HData PDU `d` goes when it is put straight into its
    /// command's buffer: when the PDU fits a read command that has not failed
    /// (anything else takes the ordinary path, which reports what is wrong).
    #[inline]
    fn destination(&mut self, d: &DataProgress) -> Option<&mut [u8]> {
        let cmd = self.slots.get(usize::from(d.cid))?.as_ref()?;
        if !cmd.xfer.fits_c2h(d.datao, d.len) || cmd.failed.is_some() {
            return None;
        }
        let buf = cmd.buf.as_ref()?;
        if (d.datao as usize).checked_add(d.len)? > buf.len {
            return None;
        }
        // SAFETY: a read command's buffer belongs to the transport until the command
        // completes: the caller does not touch it and nothing else writes it (TCP has
        // no DMA). The range lies inside the buffer (checked above and by
        // `slice_mut`), and the borrow ends with the copy or socket read into it.
        unsafe { buf.buf.slice_mut(buf.offset + d.missing_at(), d.missing()) }
    }

    #[inline]
    fn on_event(&mut self, ev: Event<'_>) -> Result<(), Fatal> {
        self.handle_event(ev)
    }
}
