//! In-band authentication, DH-HMAC-CHAP (NVMe Base 2.x 8.3.5, TP 8006), sans-IO: the
//! secret format ([`secret`]), hash functions ([`hash`]), Diffie-Hellman groups
//! ([`dh`]), the messages ([`msg`]), and the two ends of the exchange as state
//! machines that take message bytes and return message bytes: [`ControllerAuth`]
//! (the target, one per queue) and [`HostAuth`] (the host, one per transaction).
//!
//! One transaction, on each queue after its Connect:
//!
//! 1. host → AUTH_Negotiate (Authentication Send): hash functions and DH groups.
//! 2. controller → DH-HMAC-CHAP_Challenge (Authentication Receive): the chosen hash
//!    and group, C1, S1 and the controller's DH value.
//! 3. host → DH-HMAC-CHAP_Reply: R1, its DH value and, for bidirectional
//!    authentication, C2 and S2.
//! 4. controller → DH-HMAC-CHAP_Success1 (with R2 when asked), or AUTH_Failure1.
//! 5. host → DH-HMAC-CHAP_Success2 after checking R2, or AUTH_Failure2.
//!
//! The responses, as the Linux kernel computes them (`drivers/nvme/{host,target}/auth.c`):
//! `R = HMAC(K', C' || S || T_ID || 00h || "HostHost" || NQNh || 00h || NQNc)` for the
//! host and with `"Controller" || NQNc || 00h || NQNh` for the controller, where `K'`
//! is the transformed secret ([`DhchapSecret::transformed`]) and, with a DH group,
//! `C' = HMAC(H(g^xy mod p), C)` (the augmented challenge); without one `C' = C`.
//!
//! Everything secret (keys, transformed keys, session keys, private exponents) is
//! zeroed when dropped; responses are compared in constant time.

#![forbid(unsafe_code)]

pub mod controller;
pub mod dh;
mod ffdhe;
pub mod hash;
pub mod host;
pub mod msg;
pub mod secret;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU32, Ordering};

use zeroize::Zeroizing;

pub use controller::{AuthPolicy, ControllerAuth, ReceiveError, ReceiveEvent, SendEvent};
pub use dh::{DhError, DhGroup, DhKeyPair};
pub use hash::HashId;
pub use host::{HostAuth, HostAuthError, HostKeys};
pub use msg::{FailureReason, Message};
pub use secret::{DhchapSecret, SecretError};

/// The largest message either side sends or accepts: a Reply with SHA-512 and an
/// ffdhe8192 value is 16 + 2 x 64 + 1024 bytes. Transfers up to twice the Linux host's
/// 4 KiB buffer are accepted; longer ones are refused before any allocation.
pub const MAX_TRANSFER_LEN: u32 = 8192;

/// Which end a response authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Host,
    Controller,
}

/// What a response is computed over.
struct ResponseInput<'a> {
    hash: HashId,
    /// The transformed secret of the authenticating side.
    key: &'a [u8],
    challenge: &'a [u8],
    /// The DH session key `g^xy mod p`, with a DH group.
    session: Option<&'a [u8]>,
    seqnum: u32,
    tid: u16,
    hostnqn: &'a str,
    subnqn: &'a str,
}

/// R1 (host) or R2 (controller), as in the module documentation.
fn response(side: Side, i: &ResponseInput<'_>) -> Zeroizing<Vec<u8>> {
    let augmented;
    let challenge: &[u8] = match i.session {
        Some(s) => {
            augmented = i.hash.hmac(&i.hash.digest(s), &[i.challenge]);
            &augmented
        }
        None => i.challenge,
    };
    let seq = i.seqnum.to_le_bytes();
    let tid = i.tid.to_le_bytes();
    let (label, first, second): (&[u8], &str, &str) = match side {
        Side::Host => (b"HostHost", i.hostnqn, i.subnqn),
        Side::Controller => (b"Controller", i.subnqn, i.hostnqn),
    };
    i.hash.hmac(
        i.key,
        &[
            challenge,
            &seq,
            &tid,
            &[0],
            label,
            first.as_bytes(),
            &[0],
            second.as_bytes(),
        ],
    )
}

/// The next sequence number: random start, then incremented, never 0 (0 means "no
/// controller authentication" in a Reply). Shared by every queue of the process, like
/// the Linux kernel's `nvme_auth_get_seqnum`.
fn next_seqnum() -> u32 {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    loop {
        let cur = SEQ.load(Ordering::Relaxed);
        let next = if cur == 0 {
            rand::random::<u32>()
        } else {
            cur.wrapping_add(1)
        };
        if next != 0
            && SEQ
                .compare_exchange(cur, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return next;
        }
    }
}

/// `n` random bytes (challenges).
fn random_bytes(n: usize) -> Zeroizing<Vec<u8>> {
    use rand::RngCore;
    let mut v = Zeroizing::new(vec![0u8; n]);
    rand::rngs::OsRng.fill_bytes(&mut v);
    v
}
