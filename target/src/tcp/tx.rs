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

/// Controller-to-host data queued from its pool buffer; `release` is the buffer to
/// return once this segment (the last one using it) is written.
pub struct PoolData {
    pub slice: DmaSlice,
    pub release: Option<PoolBuf>,
}

impl SendData for PoolData {
    fn bytes(&self) -> &[u8] {
        // SAFETY: the slice lies in a pool buffer whose backend read completed before
        // it was queued; the queue owns the buffer until the segment is written, and
        // nothing writes it meanwhile. The borrow ends with the `writev` that uses it
        // (the queue hands out iovecs tied to `&mut` of itself).
        let whole = unsafe { self.slice.buf.slice(self.slice.offset, self.slice.len) };
        whole.unwrap_or(&[])
    }
}

/// The pool buffers among written or dropped data, to go back to the pool.
pub fn released(data: Vec<PoolData>) -> impl Iterator<Item = PoolBuf> {
    data.into_iter().filter_map(|d| d.release)
}
