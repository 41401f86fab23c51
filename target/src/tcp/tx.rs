//! A connection's send queue ([`SendQueue`], shared with the host): PDU bytes and, for
//! large controller-to-host data, references into the pool buffer the backend read
//! into ([`PoolData`]), written together with one `writev`. The pool buffer belongs
//! to the queue until its last byte is written; then it goes back to the pool.

use nvmf_common::transport::tcp::{SendData, SendQueue};

use crate::backend::DmaSlice;
use crate::runtime::PoolBuf;

pub use nvmf_common::transport::tcp::ZERO_COPY_MIN;

/// The send queue of one connection.
pub type TxQueue = SendQueue<PoolData>;

/// Controller-to-host data queued by reference into a pool buffer.
pub enum PoolData {
    /// The last piece queued from `buf`: its bytes `at..at + len`. The queue owns the
    /// buffer, which goes back to the pool once this piece is written; the buffer's own
    /// reference keeps the arena, so this piece counts no other.
    Last { buf: PoolBuf, at: usize, len: usize },
    /// A piece before the last of the same buffer (written before it): a counted
    /// reference of its own into the arena.
    Before(DmaSlice),
}

impl PoolData {
    /// The piece `at..at + len` of `buf`, which it takes along; `buf` back when the
    /// piece does not lie inside it.
    pub fn last(buf: PoolBuf, at: usize, len: usize) -> Result<Self, PoolBuf> {
        match at.checked_add(len) {
            Some(end) if end <= buf.slice.len => Ok(PoolData::Last { buf, at, len }),
            _ => Err(buf),
        }
    }
}

impl SendData for PoolData {
    fn bytes(&self) -> &[u8] {
        let (arena, at, len) = match self {
            PoolData::Last { buf, at, len } => (&buf.slice.buf, buf.slice.offset + at, *len),
            PoolData::Before(s) => (&s.buf, s.offset, s.len),
        };
        // SAFETY: the piece lies in a pool buffer whose backend read completed before
        // it was queued; the queue owns the buffer until the segment is written, and
        // nothing writes it meanwhile. The borrow ends with the `writev` that uses it
        // (the queue hands out iovecs tied to `&mut` of itself).
        let whole = unsafe { arena.slice(at, len) };
        whole.unwrap_or(&[])
    }
}

/// The pool buffers among written or dropped data, to go back to the pool.
pub fn released(data: Vec<PoolData>) -> impl Iterator<Item = PoolBuf> {
    data.into_iter().filter_map(|d| match d {
        PoolData::Last { buf, .. } => Some(buf),
        PoolData::Before(_) => None,
    })
}
