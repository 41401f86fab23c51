//! One command's data transfer over NVMe/TCP, both ends: the controller's
//! [`R2tWindows`] against the host's [`HostTransfer`] for a write, the host's
//! [`HostTransfer`] against C2HData for a read, driven by arbitrary splits,
//! reorderings, drops and corruptions of the PDUs between them. (Where a data PDU's
//! bytes go, the framer's buffer or the command's, is the connection's receive loop:
//! `tcp_pair` drives that.)
//!
//! Input: 5 setup bytes (direction, command length, MAXH2CDATA, R2T limit), then one
//! byte per step choosing what the wire does next.
//!
//! Invariants: honest PDUs in any order the protocol allows are always accepted;
//! every byte of the command's data lands at its offset exactly once, and the
//! command completes only when every byte has landed; a PDU the receiver accepts
//! never puts a byte outside the command or twice; a PDU it refuses is refused with
//! the Fatal Error Status and Information the rules call for, and nothing it carried
//! lands (the connection then ends: the run stops).

use nvmf_common::transport::tcp::{HostData, HostTransfer, R2tWindows, TransferError};
use nvmf_common::wire::tcp::{offset, term_fes};

use super::input::Input;

/// The largest command the harness moves (bytes of data).
const MAX_LEN: u32 = 1 << 20;
/// The command id the PDUs carry.
const CID: u16 = 7;

/// Which bytes of the command's data landed, and how often.
struct Landed(Vec<u8>);

impl Landed {
    fn new(len: u32) -> Self {
        Landed(vec![0; len as usize])
    }

    /// Lands `len` bytes at `at`; the receiver accepted them, so they must lie
    /// inside the command and, for a write, not have landed before.
    fn land(&mut self, at: u32, len: u32, once: bool) {
        let (start, end) = (at as usize, at as usize + len as usize);
        let size = self.0.len();
        let Some(bytes) = self.0.get_mut(start..end) else {
            panic!("accepted data {start}..{end} outside a {size}-byte command");
        };
        for b in bytes {
            *b = b.saturating_add(1);
            assert!(!once || *b == 1, "a byte of {start}..{end} landed twice");
        }
    }

    fn all_once(&self) -> bool {
        self.0.iter().all(|&b| b == 1)
    }
}

/// Runs one input.
pub fn run(input: &[u8]) {
    let mut inp = Input(input);
    let dir = inp.byte();
    let len = (u32::from(inp.u16()) * 61 + 1).min(MAX_LEN);
    let maxh2c = u32::from(inp.byte()) * 509 + 1;
    let limit = usize::from(inp.byte() & 3) + 1;
    if dir & 1 == 0 {
        write(&mut inp, len, maxh2c, limit);
    } else {
        read(&mut inp, len);
    }
}

/// What the wire does to a PDU in flight.
fn corrupt(b: u8, at: u32, len: u32) -> (u32, u32) {
    match b >> 5 {
        0 => (at.wrapping_add(u32::from(b & 31)), len),
        1 => (at, len.wrapping_add(u32::from(b & 31))),
        2 => (at.wrapping_sub(u32::from(b & 31) + 1), len),
        3 => (at, 0),
        4 => (u32::MAX - u32::from(b & 31), len),
        _ => (at, len.saturating_sub(u32::from(b & 31) + 1)),
    }
}

/// A write: the controller asks with R2Ts, the host answers with H2CData.
fn write(inp: &mut Input<'_>, len: u32, maxh2c: u32, limit: usize) {
    let mut ctrl = R2tWindows::default();
    let mut host = HostTransfer::new(HostData::ByR2t, len);
    let mut landed = Landed::new(len);
    // R2Ts sent, not yet answered by the host; per window, its next H2CData.
    let mut r2ts: Vec<(u32, u32)> = Vec::new();
    let mut windows: Vec<(u32, u32)> = Vec::new();
    while let Some(r) = ctrl.next_r2t(len, maxh2c, limit) {
        r2ts.push(r);
    }
    while !inp.done() {
        let op = inp.byte();
        let pick = usize::from(inp.byte());
        match op & 3 {
            // The host reads an R2T (the oldest, as TCP delivers them in order).
            0 if !r2ts.is_empty() => {
                let (mut at, mut l) = r2ts.remove(0);
                let honest = op & 0x80 == 0;
                if !honest {
                    (at, l) = corrupt(inp.byte(), at, l);
                }
                let asked = host.moved().0;
                match host.accept_r2t(CID, at, l) {
                    // A changed R2T the host took: the two ends no longer agree.
                    Ok(()) if !honest => return,
                    Ok(()) => windows.push((at, at + l)),
                    Err(e) => {
                        assert!(!honest, "an honest R2T {at}+{l} refused: {e:?}");
                        check_r2t_refusal(&e, at, l, asked);
                        return;
                    }
                }
            }
            // The host sends the next H2CData of a window, at most MAXH2CDATA.
            1 | 2 if !windows.is_empty() => {
                let wi = pick % windows.len();
                let (next, end) = windows[wi];
                let want = u32::from(inp.u16()) + 1;
                let l = want.min(end - next).min(maxh2c);
                let honest = op & 0x80 == 0;
                let (at, dl) = if honest {
                    (next, l)
                } else {
                    corrupt(inp.byte(), next, l)
                };
                match ctrl.accept_h2c(CID, at, dl) {
                    Ok(()) => {
                        landed.land(at, dl, true);
                        if honest {
                            windows[wi].0 += l;
                            if windows[wi].0 == end {
                                windows.remove(wi);
                            }
                        } else {
                            // Accepted though changed: it must have been a valid next
                            // piece of some window; the host's view no longer matches.
                            return;
                        }
                        if ctrl.drained() {
                            while let Some(r) = ctrl.next_r2t(len, maxh2c, limit) {
                                r2ts.push(r);
                            }
                        }
                    }
                    Err(e) => {
                        assert!(!honest, "honest H2CData {at}+{dl} refused: {e:?}");
                        check_h2c_refusal(&e, dl);
                        return;
                    }
                }
            }
            // The controller refills its windows as an R2T slot frees.
            _ => {
                while let Some(r) = ctrl.next_r2t(len, maxh2c, limit) {
                    r2ts.push(r);
                }
            }
        }
    }
    // Whatever the order, the command is complete exactly when every byte landed.
    assert_eq!(
        ctrl.complete(len),
        landed.all_once(),
        "complete {} but landed once {}",
        ctrl.complete(len),
        landed.all_once()
    );
}

/// The refusal an R2T of `l` bytes at `at` gets after `asked` bytes were asked for.
fn check_r2t_refusal(e: &TransferError, at: u32, l: u32, asked: u32) {
    let want = if l == 0 {
        (term_fes::INVALID_HEADER_FIELD, offset::R2T_LENGTH)
    } else if at < asked {
        (term_fes::INVALID_HEADER_FIELD, offset::R2T_OFFSET)
    } else {
        (term_fes::DATA_OUT_OF_RANGE, offset::R2T_LENGTH)
    };
    assert_eq!((e.fes, e.fei), want, "R2T {at}+{l}: {e:?}");
}

fn check_h2c_refusal(e: &TransferError, dl: u32) {
    let want = if dl == 0 {
        (term_fes::INVALID_HEADER_FIELD, offset::DATA_LENGTH)
    } else {
        (term_fes::DATA_OUT_OF_RANGE, 0)
    };
    assert_eq!((e.fes, e.fei), want, "{e:?}");
}

/// A read: the controller sends C2HData pieces in the order the input picks.
fn read(inp: &mut Input<'_>, len: u32) {
    let mut host = HostTransfer::new(HostData::FromController, len);
    let mut landed = Landed::new(len);
    // The pieces the controller sends: the data cut where the input says.
    let mut pieces = Vec::new();
    let mut at = 0u32;
    while at < len {
        let l = (u32::from(inp.u16()) * 13 + 1).min(len - at);
        pieces.push((at, l));
        at += l;
    }
    while !pieces.is_empty() && !inp.done() {
        let op = inp.byte();
        let (pa, pl) = pieces.remove(usize::from(op & 0x7F) % pieces.len());
        let honest = op & 0x80 == 0;
        let (a, l) = if honest {
            (pa, pl)
        } else {
            corrupt(inp.byte(), pa, pl)
        };
        let fits = host.fits_c2h(a, l as usize);
        match host.accept_c2h(CID, a, l as usize) {
            Ok(()) => {
                assert!(fits, "accepted C2HData {a}+{l} that does not fit");
                landed.land(a, l, honest);
                if !honest {
                    return;
                }
            }
            Err(e) => {
                assert!(!honest && !fits, "C2HData {a}+{l} refused: {e:?}");
                assert_eq!((e.fes, e.fei), (term_fes::DATA_OUT_OF_RANGE, 0), "{e:?}");
                return;
            }
        }
    }
    if pieces.is_empty() {
        assert!(landed.all_once(), "every read byte once");
        assert_eq!(host.moved(), (len, len));
    }
}
