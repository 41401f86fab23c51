//! The receive loop of an NVMe/TCP connection, either end: received bytes in, events
//! out, and the data of large data PDUs straight into the buffers of their commands.
//!
//! The driver owns the socket and lends two things through [`Receiver`]: the place a
//! data PDU's data belongs (a slice of its command's buffer, when the PDU is one the
//! handler will accept) and the handling of each [`Event`]. The connection decides
//! everything else, the same way on both ends:
//!
//! * bytes already read ([`Connection::receive`]): a PDU that lies whole in them is
//!   handled where it is; once a data PDU's header is in and its data is not, the data
//!   is copied from the read bytes into the command's buffer, not into the framer's;
//! * the next socket read: when at least [`DIRECT_MIN`] bytes of a data PDU's data
//!   are missing, the driver reads them straight into the command's buffer
//!   ([`Connection::wants_in_place`], [`Connection::placed`]), one copy fewer per
//!   byte; otherwise it reads at most [`Connection::read_len`] bytes into its own
//!   buffer (after a large PDU received in place, little: the next PDU's header,
//!   so that its data goes in place too).
//!
//! Once a PDU's data started to go into its command's buffer, all the rest of it goes
//! there; the handler gets in [`Pdu::H2CData`] / [`Pdu::C2HData`] `data` only the
//! bytes the framer held before, and DATAL for the whole.

use super::{Connection, DataProgress, Event};

/// A socket read goes straight into a command's buffer when at least this much of
/// the data PDU's data is missing (less: one ordinary read takes it with what
/// follows).
pub const DIRECT_MIN: usize = 16 * 1024;

/// Bytes read into the receive buffer after a large data PDU received in place: the
/// next PDUs' headers, not the next PDU's data (which then goes in place too).
pub const SMALL_RX: usize = 256;

/// What the driver lends the receive loop.
pub trait Receiver {
    /// What handling an event may fail with (the connection then ends).
    type Error;

    /// The missing data of data PDU `d` (its data bytes `d.received..d.len`, which
    /// belong at [`DataProgress::missing_at`] of its command's data), as
    /// [`DataProgress::missing`] bytes of the command's buffer, when the PDU is one
    /// [`on_event`](Receiver::on_event) will accept: it names a command waiting for
    /// exactly that data, which has not failed. Anything else answers `None`: the PDU
    /// goes through the framer's buffer and the handler reports what is wrong. The
    /// answer for a PDU must not change between calls (nothing the loop does in
    /// between changes the command).
    fn destination(&mut self, d: &DataProgress) -> Option<&mut [u8]>;

    /// Handles one event of the connection.
    fn on_event(&mut self, event: Event<'_>) -> Result<(), Self::Error>;

    /// Whether handling an event ended the driver's use of the connection (the rest of
    /// the input is then dropped).
    fn stopped(&mut self) -> bool {
        false
    }
}

impl Connection {
    /// Runs every PDU `input` completes, handing each event to `rx`, and puts the
    /// data of a data PDU that `input` does not hold whole into its command's buffer
    /// (see the module documentation). Stops at the first handler error, or when `rx`
    /// stopped. (Empty `input`: as [`receive_placed`](Connection::receive_placed).)
    // Inlined into each driver's read loop, as the loop it replaces was.
    #[inline(always)]
    pub fn receive<R: Receiver>(&mut self, mut input: &[u8], rx: &mut R) -> Result<(), R::Error> {
        if input.is_empty() {
            return self.receive_placed(rx);
        }
        // A data PDU whose data is being collected: one left from the last call, or
        // one whose header `read_to_data` stopped after (asked only then: most PDUs
        // lie whole in `input`).
        let mut progress = self.data_in_progress();
        loop {
            let (used, out) = match progress {
                Some(d) => match self.place_from(&d, input, rx) {
                    Some(n) => (n, self.read(&[], |ev| rx.on_event(ev)).1),
                    // Not for a command's buffer: the ordinary path reports it.
                    None => self.read(input, |ev| rx.on_event(ev)),
                },
                None => self.read_to_data(input, |ev| rx.on_event(ev)),
            };
            input = input.get(used..).unwrap_or(&[]);
            let handled = out.is_some();
            if let Some(r) = out {
                r?;
            }
            if rx.stopped() || input.is_empty() || (!handled && used == 0) {
                return Ok(());
            }
            progress = if handled {
                None
            } else {
                self.data_in_progress()
            };
        }
    }

    /// After a socket read into a command's buffer ([`placed`](Connection::placed)):
    /// hands the PDU whose data that completed to `rx`, if it did (nothing to place,
    /// no lookup).
    #[inline]
    pub fn receive_placed<R: Receiver>(&mut self, rx: &mut R) -> Result<(), R::Error> {
        self.read(&[], |ev| rx.on_event(ev)).1.unwrap_or(Ok(()))
    }

    /// Copies the start of `input` into the destination of data PDU `d`; how many
    /// bytes, or None when its data does not go in place.
    #[inline]
    fn place_from<R: Receiver>(
        &mut self,
        d: &DataProgress,
        input: &[u8],
        rx: &mut R,
    ) -> Option<usize> {
        if d.missing() == 0 {
            return None;
        }
        let to = rx.destination(d)?;
        let n = to.len().min(input.len());
        let (to, from) = (to.get_mut(..n)?, input.get(..n)?);
        to.copy_from_slice(from);
        self.placed(to);
        Some(n)
    }

    /// The data PDU whose missing data the next socket read should take straight into
    /// its command's buffer ([`Receiver::destination`]): when at least `min` of its
    /// bytes are missing, or its data already started to go there.
    #[inline]
    pub fn wants_in_place(&self, min: usize) -> Option<DataProgress> {
        let d = self.data_in_progress()?;
        let missing = d.missing();
        (missing > 0 && (missing >= min || d.placing)).then_some(d)
    }

    /// Counts `bytes`, the next data bytes of the PDU being read, which the driver put
    /// into its command's buffer. [`receive_placed`](Connection::receive_placed) then
    /// hands the PDU out once it is complete (a data digest, if any, still comes
    /// through [`receive`](Connection::receive)).
    #[inline]
    pub fn placed(&mut self, bytes: &[u8]) {
        self.skip_data(bytes);
    }

    /// How much the next read into the driver's buffer of `cap` bytes should take.
    #[inline]
    pub fn read_len(&self, cap: usize) -> usize {
        match self.reader.last_data_placed() {
            Some(len) if len >= DIRECT_MIN => SMALL_RX.min(cap),
            _ => cap,
        }
    }
}

#[cfg(test)]
#[path = "receive_tests.rs"]
mod tests;
