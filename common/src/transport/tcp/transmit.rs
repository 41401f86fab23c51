//! What either end sends for a command's data, decided once for both: the data PDUs
//! that carry it (H2CData answering an R2T, C2HData carrying read data), split at the
//! limit and flagged, each queued by reference to the command's buffer when its data
//! is large and copied otherwise; and the controller's R2Ts.
//!
//! The driver lends the buffer (the bytes, and a handle on them that the send queue
//! holds until they are written: [`SendData`]); everything about the PDUs is here.

use std::ops::Range;

use super::{PduWriter, R2tWindows, Role, SendData, SendQueue, ZERO_COPY_MIN};
use crate::wire::WireError;

/// One data PDU of a transfer: where its data lies in the command's data, and its
/// flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPiece {
    /// DATAO.
    pub datao: u32,
    /// DATAL.
    pub len: u32,
    /// LAST_PDU: the last PDU of the R2T's window (H2CData) or of the command's data
    /// (C2HData).
    pub last: bool,
    /// SUCCESS (C2HData only): the command completed successfully and no
    /// CapsuleResp follows.
    pub success: bool,
}

impl DataPiece {
    /// The piece's bytes in the command's data.
    #[inline]
    pub fn range(&self) -> Range<usize> {
        let start = self.datao as usize;
        start..start + self.len as usize
    }
}

/// The data PDUs that carry `len` bytes of a command's data from `start`, each at most
/// `max` bytes (the controller's MAXH2CDATA for H2CData, its own chunk size for
/// C2HData): LAST_PDU on the last, and SUCCESS there too when `success`.
#[inline]
pub fn data_pieces(
    start: u32,
    len: u32,
    max: u32,
    success: bool,
) -> impl Iterator<Item = DataPiece> + Clone {
    let max = max.max(1);
    // Never past the end of the 32-bit offset space (so no sum below overflows).
    let stop = start.saturating_add(len);
    let count = (stop - start).div_ceil(max);
    (0..count).map(move |i| {
        let datao = start + i * max;
        let len = (stop - datao).min(max);
        let last = datao + len == stop;
        DataPiece {
            datao,
            len,
            last,
            success: last && success,
        }
    })
}

impl<D: SendData> SendQueue<D> {
    /// Queues data PDU `p` of command `cid` carrying `data` (the bytes of
    /// `p.range()`): H2CData with the R2T's `ttag` from a host, C2HData from a
    /// controller. Data of at least [`ZERO_COPY_MIN`] bytes is queued by reference,
    /// as the segment `by_ref` gives (None: it cannot be, and the PDU is not queued);
    /// shorter data is copied.
    #[inline]
    pub fn push_data_pdu(
        &mut self,
        w: &PduWriter,
        cid: u16,
        ttag: u16,
        p: DataPiece,
        data: &[u8],
        by_ref: impl FnOnce() -> Option<D>,
    ) -> Result<(), WireError> {
        if data.len() != p.len as usize {
            return Err(WireError::Invalid("data PDU bytes differ from its length"));
        }
        self.before_data(data.len());
        if data.len() < ZERO_COPY_MIN {
            return w.data_pdu(cid, ttag, &p, data, true, &mut self.bytes);
        }
        let Some(seg) = by_ref() else {
            return Err(WireError::Invalid("data PDU outside its buffer"));
        };
        w.data_pdu(cid, ttag, &p, data, false, &mut self.bytes)?;
        self.push_data(seg);
        w.data_trailer(data, &mut self.bytes);
        Ok(())
    }
}

impl PduWriter {
    /// Appends data PDU `p` (H2CData from a host, C2HData from a controller): whole,
    /// or only its head, for its data to be sent from where it lies.
    #[inline]
    fn data_pdu(
        &self,
        cid: u16,
        ttag: u16,
        p: &DataPiece,
        data: &[u8],
        whole: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), WireError> {
        let plen = match self.role() {
            Role::Host => self.h2c_data_head(cid, ttag, p.datao, data, p.last, out)?,
            Role::Controller => self.c2h_data_head(cid, p.datao, data, p.last, p.success, out)?,
        };
        if whole {
            self.data_and_trailer(plen, data, out);
        }
        Ok(())
    }
}

impl R2tWindows {
    /// Appends the R2Ts for the next windows of command `cid` (`len` bytes; `ttag`
    /// names it in the H2CData) to `out`, each asking for at most `maxh2cdata` bytes,
    /// while fewer than `limit` are outstanding; returns how many.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn send_r2ts(
        &mut self,
        w: &PduWriter,
        cid: u16,
        ttag: u16,
        len: u32,
        maxh2cdata: u32,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> usize {
        let mut n = 0;
        while let Some(r2t) = self.next_r2t(len, maxh2cdata, limit) {
            if w.r2t(cid, ttag, r2t.0, r2t.1, out).is_err() {
                self.unsend(r2t);
                break;
            }
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::tcp::negotiate::Negotiated;
    use crate::transport::tcp::send_queue::tests::{drain_with, Owned};
    use crate::wire::cqe::CQE_LEN;
    use crate::wire::tcp::pdu_type::{C2H_DATA, RSP as CAPSULE_RESP};

    /// C2HData and deferred responses of many commands, some past the deferral cap,
    /// written in odd-sized writes, twice (interleaved, then deferred by the burst the
    /// first write showed): the stream is whole PDUs (type, PLEN), and each command's
    /// response follows its last data PDU.
    #[test]
    fn deferred_responses_keep_the_stream_whole() {
        for digests in [false, true] {
            let n = Negotiated {
                header_digest: digests,
                data_digest: digests,
                hpda: 0,
                cpda: 0,
                maxh2cdata: 131_072,
                maxr2t: 0,
            };
            let w = PduWriter::new(Role::Controller, &n);
            let mut q = SendQueue::<Owned>::default();
            // The first round teaches the queue its burst; the second defers.
            for _round in 0..2 {
                // 4 KiB reads (batched), 128 KiB reads in 32 KiB pieces (past the cap) and
                // short reads whose data is copied.
                let sizes = [
                    4096u32, 4096, 131_072, 512, 4096, 131_072, 131_072, 100, 4096,
                ];
                for (cid, &len) in sizes.iter().enumerate() {
                    let cid = cid as u16;
                    let data = vec![cid as u8; len as usize];
                    for p in data_pieces(0, len, 32_768, false) {
                        let piece = &data[p.range()];
                        q.push_data_pdu(&w, cid, 0, p, piece, || Some(Owned(piece.to_vec())))
                            .expect("queued");
                    }
                    let mut cqe = [0u8; CQE_LEN];
                    cqe[12..14].copy_from_slice(&cid.to_le_bytes());
                    w.capsule_resp(&cqe, q.deferred()).expect("response");
                }
                // Odd-sized writes: PDUs and segments cut anywhere.
                let (stream, _written) = drain_with(&mut q, 9_999);
                let mut off = 0;
                let mut last_data = std::collections::HashMap::new();
                let mut answered = Vec::new();
                while off < stream.len() {
                    let pdu = &stream[off..];
                    let plen = u32::from_le_bytes(pdu[4..8].try_into().expect("plen")) as usize;
                    match pdu[0] {
                        C2H_DATA => {
                            let cid = u16::from_le_bytes([pdu[8], pdu[9]]);
                            assert!(!answered.contains(&cid), "data of {cid} after its response");
                            last_data.insert(cid, off);
                        }
                        CAPSULE_RESP => {
                            let cid = u16::from_le_bytes([pdu[8 + 12], pdu[8 + 13]]);
                            assert!(
                                last_data.contains_key(&cid),
                                "response of {cid} before its data"
                            );
                            answered.push(cid);
                        }
                        t => panic!("PDU type {t:#x} at {off} (digests {digests})"),
                    }
                    off += plen;
                }
                assert_eq!(off, stream.len());
                let mut want: Vec<u16> = (0..sizes.len() as u16).collect();
                answered.sort_unstable();
                want.sort_unstable();
                assert_eq!(answered, want);
            }
        }
    }

    #[test]
    fn pieces_split_at_the_limit_and_flag_the_last() {
        let p: Vec<_> = data_pieces(4096, 10_000, 4096, true).collect();
        let want = [
            (4096, 4096, false),
            (8192, 4096, false),
            (12288, 1808, true),
        ];
        assert_eq!(p.len(), want.len());
        for (p, (o, l, last)) in p.iter().zip(want) {
            assert_eq!((p.datao, p.len, p.last, p.success), (o, l, last, last));
        }
        assert_eq!(data_pieces(0, 0, 4096, true).count(), 0);
        let one: Vec<_> = data_pieces(0, 5, 0, false).collect();
        assert_eq!(one.len(), 5, "a limit of 0 counts as 1");
        assert!(one.iter().all(|p| !p.success));
        assert_eq!(one[4].range(), 4..5);
        // At the end of the offset space: cut there, no overflow.
        let top: Vec<_> = data_pieces(u32::MAX - 5, 100, 4, false).collect();
        assert_eq!(top.iter().map(|p| p.len).sum::<u32>(), 5);
        assert!(top
            .last()
            .is_some_and(|p| p.last && p.datao + p.len == u32::MAX));
    }
}
