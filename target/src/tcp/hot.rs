//! Which sockets a spinning poll group with many connections reads directly.
//!
//! With more than a couple of connections a group asks epoll which sockets have data
//! (one `epoll_wait(0)` per pass). When one or two I/O connections carry nearly all the
//! traffic (a busy tenant beside idle or throttled ones), that is a system call per pass
//! spent learning what is already known. The hot set keeps up to [`HOT_MAX`] I/O
//! connections that brought data in two epoll calls in a row (a connection with a
//! command now and then, such as a throttled tenant's, is not worth a `read` on every
//! pass); each pass reads them directly, and epoll
//! is asked only every [`EPOLL_EVERY`] passes, or on every pass while it keeps finding
//! data on connections outside the set (more busy connections than the set holds, so
//! they are served as before). A hot connection that brings nothing for
//! [`EMPTY_PASSES_MAX`] passes in a row leaves the set.
//!
//! Owned by the group's [`TcpTransport`](super::poll_group::TcpTransport); entries
//! name a connection by index and generation, so a reused index is never read for a
//! connection that ended.

/// Connections read directly at most (as many as a group reads directly in all when it
/// has few connections).
pub(super) const HOT_MAX: usize = 2;
/// A spinning group with hot connections asks epoll on every this many passes (bounds
/// the delay of a connection outside the set to a few microseconds of passes).
const EPOLL_EVERY: u32 = 16;
/// Direct reads in a row that found nothing before a connection leaves the set.
const EMPTY_PASSES_MAX: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HotConn {
    ci: u16,
    gen: u16,
    empty: u32,
}

/// The hot connections of one poll group and when to ask epoll.
#[derive(Debug, Default)]
pub(super) struct HotSet {
    conns: Vec<HotConn>,
    /// The last epoll pass found data on a connection outside the set.
    cold_busy: bool,
    passes: u32,
    /// Connections outside the set that brought data in the previous epoll call, and
    /// in this one.
    seen_before: Vec<(u16, u16)>,
    seen_now: Vec<(u16, u16)>,
}

impl HotSet {
    pub(super) fn len(&self) -> usize {
        self.conns.len()
    }

    /// Connection `i` of the set: its index and generation.
    pub(super) fn get(&self, i: usize) -> Option<(u16, u16)> {
        self.conns.get(i).map(|c| (c.ci, c.gen))
    }

    /// Records the direct read of entry `i`; an entry idle too long leaves (iterate
    /// from the last entry down: the last one takes a removed entry's place).
    pub(super) fn read(&mut self, i: usize, got_data: bool) {
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        if got_data {
            c.empty = 0;
        } else {
            c.empty += 1;
            if c.empty >= EMPTY_PASSES_MAX {
                self.conns.swap_remove(i);
            }
        }
    }

    /// Entry `i` ended: it leaves the set (same iteration rule as [`Self::read`]).
    pub(super) fn remove(&mut self, i: usize) {
        if i < self.conns.len() {
            self.conns.swap_remove(i);
        }
    }

    /// Whether this pass asks epoll (counts the pass).
    pub(super) fn epoll_due(&mut self) -> bool {
        self.passes = self.passes.wrapping_add(1);
        let due =
            self.conns.is_empty() || self.cold_busy || self.passes.is_multiple_of(EPOLL_EVERY);
        if due {
            self.cold_busy = false;
            std::mem::swap(&mut self.seen_before, &mut self.seen_now);
            self.seen_now.clear();
        }
        due
    }

    /// Epoll reported data that connection `ci` (generation `gen`) brought; an I/O
    /// queue's connection that brought data in the previous epoll call too joins the
    /// set while it has room. True when it joined.
    pub(super) fn epoll_data(&mut self, ci: u16, gen: u16, io_queue: bool) -> bool {
        if self.conns.iter().any(|c| c.ci == ci && c.gen == gen) {
            return false;
        }
        let again = self.seen_before.contains(&(ci, gen));
        if io_queue && again && self.conns.len() < HOT_MAX {
            self.conns.push(HotConn { ci, gen, empty: 0 });
            return true;
        }
        self.cold_busy = true;
        // Bounded: one entry per connection of the group that had data this call.
        if io_queue && !self.seen_now.contains(&(ci, gen)) {
            self.seen_now.push((ci, gen));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_connections_join_up_to_the_limit_and_others_keep_epoll_every_pass() {
        let mut h = HotSet::default();
        assert!(h.epoll_due(), "nothing hot: epoll every pass");
        h.epoll_data(0, 1, false);
        h.epoll_data(1, 1, true);
        h.epoll_data(2, 1, true);
        assert_eq!(h.len(), 0, "once is not enough");
        assert!(h.epoll_due());
        h.epoll_data(0, 1, false);
        assert_eq!(h.len(), 0, "an admin queue never joins");
        assert!(h.epoll_data(1, 1, true));
        assert!(h.epoll_data(2, 1, true));
        assert!(!h.epoll_data(1, 1, true), "already in");
        assert_eq!(h.len(), HOT_MAX);
        assert_eq!((h.get(0), h.get(1)), (Some((1, 1)), Some((2, 1))));
        // Data from the admin queue seen last pass: epoll again at once.
        assert!(h.epoll_due());
        h.epoll_data(3, 1, true);
        assert!(
            h.epoll_due(),
            "a busy connection outside the set keeps epoll on"
        );
        h.epoll_data(3, 1, true);
        assert_eq!(h.len(), HOT_MAX, "the set is full");
        assert!(h.epoll_due());
        // Nothing outside the set: epoll once every EPOLL_EVERY passes.
        let due = (0..EPOLL_EVERY * 4).filter(|_| h.epoll_due()).count();
        assert_eq!(due, 4);
    }

    #[test]
    fn a_connection_with_data_now_and_then_stays_out() {
        let mut h = HotSet::default();
        for call in 0..100 {
            assert!(h.epoll_due());
            if call % 2 == 0 {
                h.epoll_data(4, 1, true);
            }
        }
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn an_idle_connection_leaves_and_a_busy_one_stays() {
        let mut h = HotSet::default();
        for _ in 0..2 {
            assert!(h.epoll_due());
            h.epoll_data(5, 7, true);
            h.epoll_data(6, 7, true);
        }
        for pass in 0..EMPTY_PASSES_MAX {
            for i in (0..h.len()).rev() {
                let busy = h.get(i) == Some((6, 7)) || pass == EMPTY_PASSES_MAX / 2;
                h.read(i, busy);
            }
        }
        assert_eq!(h.len(), 2, "data half way reset the idle count");
        for _ in 0..EMPTY_PASSES_MAX {
            for i in (0..h.len()).rev() {
                let busy = h.get(i) == Some((6, 7));
                h.read(i, busy);
            }
        }
        assert_eq!((h.len(), h.get(0)), (1, Some((6, 7))));
        h.remove(0);
        assert_eq!(h.len(), 0);
        assert!(h.epoll_due());
    }
}
