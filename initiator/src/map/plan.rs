//! From an NBD request to NVMe commands: validation and splitting.
//!
//! Owned by `map`. Pure logic, no I/O. [`check`] validates a transmission request
//! against the namespace (alignment to the logical block size, range, length limit,
//! known command) and returns the NBD error to reply with when it is refused. A
//! [`Plan`] then yields the request's NVMe commands ([`Piece`]s) one by one:
//! READ → Read, WRITE → Write (FUA → the FUA bit), FLUSH → Flush, TRIM → Dataset
//! Management with the Deallocate attribute (FUA → a trailing Flush), WRITE_ZEROES →
//! Write Zeroes (DEAC unless NBD_CMD_FLAG_NO_HOLE; FUA → the FUA bit). Data commands
//! are split at `chunk_blocks` (MDTS), Write Zeroes at 65536 blocks (NLB), Dataset
//! Management ranges at 2^32 - 1 blocks.

use super::proto::{cmd, cmd_flags, errno, Request};
use crate::command::MAX_NLB;

/// Most blocks one Dataset Management range describes (its NLB is 32 bits).
pub const MAX_DSM_RANGE_BLOCKS: u64 = u32::MAX as u64;

/// What the plan needs to know about the namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub block_size: u32,
    /// Namespace size in blocks.
    pub nsze: u64,
    /// Most blocks one Read or Write carries (MDTS and the data buffer size).
    pub chunk_blocks: u32,
    /// The largest request payload accepted.
    pub max_payload: u32,
}

/// The operation of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write { fua: bool },
    Flush,
    Trim { fua: bool },
    WriteZeroes { deac: bool, fua: bool },
}

/// One NVMe command of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Read `nblocks` at `lba` into the request's data at `offset`.
    Read {
        lba: u64,
        nblocks: u32,
        offset: usize,
    },
    /// Write `nblocks` at `lba` from the request's data at `offset`.
    Write {
        lba: u64,
        nblocks: u32,
        offset: usize,
        fua: bool,
    },
    Flush,
    Deallocate {
        lba: u64,
        nblocks: u32,
    },
    WriteZeroes {
        lba: u64,
        nblocks: u32,
        deac: bool,
        fua: bool,
    },
}

/// Validates `r`; `Ok(None)` for NBD_CMD_DISC (no reply), `Err(errno)` to refuse.
pub fn check(r: &Request, g: &Geometry) -> Result<Option<Op>, u32> {
    let fua = r.flags & cmd_flags::FUA != 0;
    let op = match r.kind {
        cmd::DISC => return Ok(None),
        cmd::FLUSH => return Ok(Some(Op::Flush)),
        cmd::READ => Op::Read,
        cmd::WRITE => Op::Write { fua },
        cmd::TRIM => Op::Trim { fua },
        cmd::WRITE_ZEROES => Op::WriteZeroes {
            deac: r.flags & cmd_flags::NO_HOLE == 0,
            fua,
        },
        _ => return Err(errno::EINVAL),
    };
    if matches!(op, Op::Read | Op::Write { .. }) && r.length > g.max_payload {
        return Err(errno::EOVERFLOW);
    }
    let bs = u64::from(g.block_size.max(1));
    if !r.offset.is_multiple_of(bs) || !u64::from(r.length).is_multiple_of(bs) {
        return Err(errno::EINVAL);
    }
    let end = r.offset.checked_add(u64::from(r.length));
    if end.is_none_or(|e| e > g.nsze.saturating_mul(bs)) {
        return Err(if matches!(op, Op::Write { .. } | Op::WriteZeroes { .. }) {
            errno::ENOSPC
        } else {
            errno::EINVAL
        });
    }
    Ok(Some(op))
}

/// The NVMe commands of one validated request, in order.
#[derive(Debug, Clone)]
pub struct Plan {
    op: Op,
    block_size: u64,
    chunk_blocks: u64,
    start_lba: u64,
    next_lba: u64,
    end_lba: u64,
    /// Flush planned (for FLUSH, and after a TRIM with FUA) and not yet issued.
    flush_pending: bool,
}

impl Plan {
    pub fn new(op: Op, r: &Request, g: &Geometry) -> Plan {
        let bs = u64::from(g.block_size.max(1));
        let start = r.offset / bs;
        Plan {
            op,
            block_size: bs,
            chunk_blocks: u64::from(g.chunk_blocks.max(1)),
            start_lba: start,
            next_lba: start,
            end_lba: start + u64::from(r.length) / bs,
            flush_pending: matches!(op, Op::Flush | Op::Trim { fua: true }),
        }
    }

    pub fn op(&self) -> Op {
        self.op
    }

    /// The next command, `None` when every command was handed out.
    pub fn next_piece(&mut self) -> Option<Piece> {
        let left = self.end_lba - self.next_lba;
        let lba = self.next_lba;
        let offset = ((lba - self.start_lba) * self.block_size) as usize;
        let take = |limit: u64| left.min(limit) as u32;
        let piece = match self.op {
            _ if left == 0 => {
                if self.flush_pending {
                    self.flush_pending = false;
                    return Some(Piece::Flush);
                }
                return None;
            }
            Op::Flush => return None,
            Op::Read => Piece::Read {
                lba,
                nblocks: take(self.chunk_blocks),
                offset,
            },
            Op::Write { fua } => Piece::Write {
                lba,
                nblocks: take(self.chunk_blocks),
                offset,
                fua,
            },
            Op::Trim { .. } => Piece::Deallocate {
                lba,
                nblocks: take(MAX_DSM_RANGE_BLOCKS),
            },
            Op::WriteZeroes { deac, fua } => Piece::WriteZeroes {
                lba,
                nblocks: take(u64::from(MAX_NLB)),
                deac,
                fua,
            },
        };
        let n = match piece {
            Piece::Read { nblocks, .. }
            | Piece::Write { nblocks, .. }
            | Piece::Deallocate { nblocks, .. }
            | Piece::WriteZeroes { nblocks, .. } => u64::from(nblocks),
            Piece::Flush => 0,
        };
        self.next_lba += n;
        Some(piece)
    }

    /// Hands out nothing more (after an error: the rest of the request is not sent).
    pub fn abandon(&mut self) {
        self.next_lba = self.end_lba;
        self.flush_pending = false;
    }

    /// True once [`Plan::next_piece`] has nothing more.
    pub fn is_done(&self) -> bool {
        self.next_lba == self.end_lba && !self.flush_pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::proto::REQUEST_MAGIC;

    const G: Geometry = Geometry {
        block_size: 512,
        nsze: 1 << 30,
        chunk_blocks: 256,
        max_payload: 32 << 20,
    };

    fn req(kind: u16, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            magic: REQUEST_MAGIC,
            flags,
            kind,
            handle: 1,
            offset,
            length,
        }
    }

    fn pieces(r: &Request) -> Vec<Piece> {
        let op = check(r, &G).unwrap().unwrap();
        let mut p = Plan::new(op, r, &G);
        let mut v = Vec::new();
        while let Some(x) = p.next_piece() {
            v.push(x);
        }
        assert!(p.is_done());
        v
    }

    #[test]
    fn validation() {
        let size = G.nsze * 512;
        assert_eq!(check(&req(cmd::DISC, 0, 0, 0), &G), Ok(None));
        assert_eq!(check(&req(99, 0, 0, 0), &G), Err(errno::EINVAL));
        assert_eq!(check(&req(cmd::READ, 0, 1, 512), &G), Err(errno::EINVAL));
        assert_eq!(check(&req(cmd::READ, 0, 0, 100), &G), Err(errno::EINVAL));
        assert_eq!(check(&req(cmd::READ, 0, size, 512), &G), Err(errno::EINVAL));
        assert_eq!(
            check(&req(cmd::WRITE, 0, size - 512, 1024), &G),
            Err(errno::ENOSPC)
        );
        assert_eq!(
            check(&req(cmd::READ, 0, u64::MAX - 511, 512), &G),
            Err(errno::EINVAL)
        );
        assert_eq!(
            check(&req(cmd::READ, 0, 0, (32 << 20) + 512), &G),
            Err(errno::EOVERFLOW)
        );
        // TRIM and WRITE_ZEROES carry no payload: no length limit.
        assert!(check(&req(cmd::TRIM, 0, 0, u32::MAX - 511), &G).is_ok());
        assert_eq!(
            check(&req(cmd::WRITE_ZEROES, cmd_flags::NO_HOLE, 0, 512), &G),
            Ok(Some(Op::WriteZeroes {
                deac: false,
                fua: false
            }))
        );
    }

    #[test]
    fn splitting() {
        // 300 blocks at 8: 256 + 44 (chunk_blocks 256).
        assert_eq!(
            pieces(&req(cmd::READ, 0, 8 * 512, 300 * 512)),
            [
                Piece::Read {
                    lba: 8,
                    nblocks: 256,
                    offset: 0
                },
                Piece::Read {
                    lba: 264,
                    nblocks: 44,
                    offset: 256 * 512
                }
            ]
        );
        assert_eq!(
            pieces(&req(cmd::WRITE, cmd_flags::FUA, 0, 512)),
            [Piece::Write {
                lba: 0,
                nblocks: 1,
                offset: 0,
                fua: true
            }]
        );
        assert_eq!(pieces(&req(cmd::FLUSH, 0, 0, 0)), [Piece::Flush]);
        // 65536 + 4 blocks of zeroes: two commands.
        let wz = pieces(&req(cmd::WRITE_ZEROES, cmd_flags::FUA, 0, (65540) * 512));
        assert_eq!(wz.len(), 2);
        assert_eq!(
            wz[1],
            Piece::WriteZeroes {
                lba: 65536,
                nblocks: 4,
                deac: true,
                fua: true
            }
        );
        assert_eq!(
            pieces(&req(cmd::TRIM, cmd_flags::FUA, 1024, 4096)),
            [Piece::Deallocate { lba: 2, nblocks: 8 }, Piece::Flush]
        );
        assert_eq!(pieces(&req(cmd::READ, 0, 0, 0)), []);
    }
}
