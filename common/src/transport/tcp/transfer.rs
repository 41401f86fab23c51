//! Per-command data transfer state of NVMe/TCP for either role, and the rule for
//! receiving a data PDU straight into its command's buffer.
//!
//! The framer ([`super::PduReader`]) checks each PDU on its own. Whether an R2T,
//! H2CData or C2HData PDU is right for its command (the next data the command
//! expects, inside its length) depends on what the command transferred so far. That
//! state lives here, one value per outstanding command, kept in the driver's command
//! slot:
//!
//! * [`R2tWindows`] (controller): the R2Ts sent for a host-to-controller command and
//!   the H2CData each outstanding window still expects;
//! * [`HostTransfer`] (host): how far R2Ts asked for a write command's data and how
//!   far C2HData filled a read command's buffer.
//!
//! (Whether a data PDU's data goes straight into its command's buffer is the
//! connection's receive loop's decision: `super::receive`.)
//!
//! A PDU that breaks these rules is a [`TransferError`]: the connection ends with a
//! termination request carrying its Fatal Error Status and Information. Nothing here
//! does I/O or touches a buffer. The per-PDU methods are `#[inline]`: they run in the drivers'
//! crates, which are built without LTO.

use crate::wire::tcp::{offset, term_fes};

/// A data or R2T PDU that does not fit its command: the connection ends with a
/// termination request carrying `fes` and `fei`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferError {
    /// Fatal Error Status (`wire::tcp::term_fes`).
    pub fes: u16,
    /// Fatal Error Information: the offending field's byte offset in the header (0
    /// for Data Transfer Out of Range).
    pub fei: u32,
    /// What was wrong, for the log.
    pub reason: String,
}

impl TransferError {
    fn header_field(fei: u32, reason: String) -> Self {
        TransferError {
            fes: term_fes::INVALID_HEADER_FIELD,
            fei,
            reason,
        }
    }

    fn out_of_range(fei: u32, reason: String) -> Self {
        TransferError {
            fes: term_fes::DATA_OUT_OF_RANGE,
            fei,
            reason,
        }
    }
}

/// The controller's R2T state for one host-to-controller command: the next offset to
/// ask for, and the outstanding windows (at most the negotiated MAXR2T + 1, which the
/// caller passes as `limit`), each with the next offset its H2CData must carry.
#[derive(Debug, Default, Clone)]
pub struct R2tWindows {
    /// The next offset to ask for with an R2T.
    next_r2t: u32,
    /// Outstanding windows: (next expected offset, end).
    windows: Vec<(u32, u32)>,
}

impl R2tWindows {
    /// Ready for a new command (keeps the windows' allocation).
    #[inline]
    pub fn reset(&mut self) {
        self.next_r2t = 0;
        self.windows.clear();
    }

    /// The next R2T for a command of `len` bytes, as (offset, length) of at most
    /// `maxh2cdata` bytes, recorded as outstanding; None once `limit` windows are
    /// outstanding or every byte was asked for.
    #[inline]
    pub fn next_r2t(&mut self, len: u32, maxh2cdata: u32, limit: usize) -> Option<(u32, u32)> {
        if self.windows.len() >= limit || self.next_r2t >= len {
            return None;
        }
        let off = self.next_r2t;
        let l = (len - off).min(maxh2cdata.max(1));
        self.windows.push((off, off + l));
        self.next_r2t = off + l;
        Some((off, l))
    }

    /// Takes back the R2T [`next_r2t`](Self::next_r2t) just recorded (it could not
    /// be encoded).
    pub fn unsend(&mut self, r2t: (u32, u32)) {
        if self.windows.last() == Some(&(r2t.0, r2t.0 + r2t.1)) {
            self.windows.pop();
            self.next_r2t = r2t.0;
        }
    }

    /// The outstanding window that data at `datao..end` continues (starts at its next
    /// expected offset and ends within it).
    #[inline]
    fn window_of(&self, datao: u32, end: u32) -> Option<usize> {
        self.windows.iter().position(|w| w.0 == datao && end <= w.1)
    }

    /// Whether data at `datao..end` continues an outstanding window.
    #[inline]
    pub fn continues_window(&self, datao: u32, end: u32) -> bool {
        self.window_of(datao, end).is_some()
    }

    /// Checks H2CData of command `cid` at `datao` carrying `datal` bytes against the
    /// outstanding windows and moves its window on. The caller has checked that the
    /// PDU's TTAG names this command.
    #[inline]
    pub fn accept_h2c(&mut self, cid: u16, datao: u32, datal: u32) -> Result<(), TransferError> {
        if datal == 0 {
            return Err(TransferError::header_field(
                offset::DATA_LENGTH,
                format!("H2CData for command {cid:#x} without data"),
            ));
        }
        let end = datao.checked_add(datal);
        let Some((wi, end)) = end.and_then(|end| Some((self.window_of(datao, end)?, end))) else {
            return Err(TransferError::out_of_range(
                0,
                format!(
                    "H2CData for command {cid:#x} at offset {datao} length {datal} is not the next data of an R2T window (outstanding [offset, end): {:?})",
                    self.windows
                ),
            ));
        };
        if let Some(w) = self.windows.get_mut(wi) {
            w.0 = end;
            if w.0 >= w.1 {
                self.windows.remove(wi);
            }
        }
        Ok(())
    }

    /// No window is outstanding.
    #[inline]
    pub fn drained(&self) -> bool {
        self.windows.is_empty()
    }

    /// Every byte of a command of `len` bytes was asked for and received.
    #[inline]
    pub fn complete(&self, len: u32) -> bool {
        self.windows.is_empty() && self.next_r2t >= len
    }

    /// The state in words (a stuck command's report).
    pub fn describe(&self) -> String {
        let windows: Vec<String> = self
            .windows
            .iter()
            .map(|(next, end)| format!("[{next}, {end})"))
            .collect();
        format!(
            "H2CData expected for R2T windows {}; next R2T at offset {}",
            windows.join(", "),
            self.next_r2t
        )
    }
}

/// Which way a host command's data moves over NVMe/TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostData {
    /// No data.
    None,
    /// Host to controller, inside the command capsule (no R2T may ask for it).
    InCapsule,
    /// Host to controller, asked for by R2Ts.
    ByR2t,
    /// Controller to host, in C2HData PDUs.
    FromController,
}

/// The host's transfer state for one command of `len` data bytes.
#[derive(Debug, Clone, Copy)]
pub struct HostTransfer {
    data: HostData,
    len: u32,
    /// Write data asked for by R2Ts so far (the end of the last R2T).
    r2t_end: u32,
    /// Read data received so far (the end of the furthest C2HData PDU accepted).
    c2h_end: u32,
}

impl HostTransfer {
    #[inline]
    pub fn new(data: HostData, len: u32) -> Self {
        HostTransfer {
            data,
            len,
            r2t_end: 0,
            c2h_end: 0,
        }
    }

    /// The command's data length (SGL1).
    pub fn len(&self) -> u32 {
        self.len
    }

    /// The command moves no data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Which way the data moves.
    pub fn data(&self) -> HostData {
        self.data
    }

    /// The bytes moved so far in the direction that needs PDUs of its own (R2T'd
    /// write data, or read data), out of how many: (0, 0) when none do.
    #[inline]
    pub fn moved(&self) -> (u32, u32) {
        match self.data {
            HostData::ByR2t => (self.r2t_end, self.len),
            HostData::FromController => (self.c2h_end, self.len),
            HostData::None | HostData::InCapsule => (0, 0),
        }
    }

    /// Checks an R2T of command `cid` asking for `r2tl` bytes at `r2to` and records
    /// it. An R2T must ask for data the command has, after what was asked before.
    #[inline]
    pub fn accept_r2t(&mut self, cid: u16, r2to: u32, r2tl: u32) -> Result<(), TransferError> {
        if self.data != HostData::ByR2t {
            return Err(TransferError::header_field(
                offset::COMMAND_ID,
                format!("R2T for command id {cid}, which has no data to transfer by R2T"),
            ));
        }
        if r2tl == 0 {
            return Err(TransferError::header_field(
                offset::R2T_LENGTH,
                format!("R2T of 0 bytes for command id {cid}"),
            ));
        }
        if r2to < self.r2t_end {
            return Err(TransferError::header_field(
                offset::R2T_OFFSET,
                format!(
                    "R2T for command id {cid} at offset {r2to}, but {} bytes were already asked for",
                    self.r2t_end
                ),
            ));
        }
        let end = u64::from(r2to) + u64::from(r2tl);
        if end > u64::from(self.len) {
            return Err(TransferError::out_of_range(
                offset::R2T_LENGTH,
                format!(
                    "R2T for command id {cid} asks for bytes {r2to}..{end}, beyond its {} bytes of data",
                    self.len
                ),
            ));
        }
        // `end` is at most `len`, a u32.
        self.r2t_end = r2to + r2tl;
        Ok(())
    }

    /// Whether C2HData of `datal` bytes at `datao` fits this command (a read, and
    /// inside its length).
    #[inline]
    pub fn fits_c2h(&self, datao: u32, datal: usize) -> bool {
        self.data == HostData::FromController
            && (datao as usize)
                .checked_add(datal)
                .is_some_and(|end| end <= self.len as usize)
    }

    /// Checks that command `cid` reads data (for C2HData whatever its data).
    #[inline]
    pub fn expects_c2h(&self, cid: u16) -> Result<(), TransferError> {
        if self.data == HostData::FromController {
            Ok(())
        } else {
            Err(TransferError::header_field(
                offset::COMMAND_ID,
                format!("C2HData for command id {cid}, which reads no data"),
            ))
        }
    }

    /// Checks C2HData of command `cid` at `datao` carrying `datal` bytes and records
    /// it. C2HData may come in any order, each inside the command's length.
    #[inline]
    pub fn accept_c2h(&mut self, cid: u16, datao: u32, datal: usize) -> Result<(), TransferError> {
        self.expects_c2h(cid)?;
        let end = u64::from(datao) + datal as u64;
        if end > u64::from(self.len) {
            return Err(TransferError::out_of_range(
                0,
                format!(
                    "C2HData for command id {cid} at bytes {datao}..{end}, beyond its {}-byte buffer",
                    self.len
                ),
            ));
        }
        // `end` is at most `len`, a u32.
        self.c2h_end = self.c2h_end.max(u32::try_from(end).unwrap_or(u32::MAX));
        Ok(())
    }
}

#[cfg(test)]
#[path = "transfer_tests.rs"]
mod tests;
