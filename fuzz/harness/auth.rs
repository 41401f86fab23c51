//! DH-HMAC-CHAP: the message parser and the controller's state machine, driven by a
//! genuine host and by arbitrary bytes. Input: one mode byte, then
//!
//! - mode even: bytes for [`Message::decode`] (and, as text, `DhchapSecret::from_str`).
//!   What decodes re-encodes to bytes that decode to the same message.
//! - mode odd: a script of operations on a controller/host pair (fixed keys; the null
//!   group and ffdhe2048 so that executions stay fast): send the genuine host's next
//!   message, a mutated one, or arbitrary bytes; receive with an arbitrary allocation
//!   length; restart; expire. Invariants: nothing panics; a receive returns exactly AL
//!   bytes; the controller becomes authenticated only right after a Reply carrying the
//!   genuine host's response R1 to the challenge it issued (or the host's Success2);
//!   once it must end, it never authenticates again.

use std::sync::Arc;

use nvmf_common::auth::msg::Message;
use nvmf_common::auth::{
    AuthPolicy, ControllerAuth, DhGroup, DhchapSecret, HashId, HostAuth, HostKeys, MAX_TRANSFER_LEN,
};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:fuzz-host";
const SUB: &str = "nqn.2024-01.io.nvmf-rs:fuzz";
/// Fixed secrets (in the interchange format, so the parser is exercised too).
const HOST_KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";

/// Runs one input.
pub fn run(input: &[u8]) {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        parse(rest);
    } else {
        script(mode, rest);
    }
}

fn parse(data: &[u8]) {
    if let Ok(m) = Message::decode(data) {
        let again = Message::decode(&m.encode());
        assert_eq!(again.as_ref().ok(), Some(&m), "message round trip");
    }
    let _ = String::from_utf8_lossy(data).parse::<DhchapSecret>();
}

fn script(mode: u8, ops: &[u8]) {
    let Ok(host_key) = HOST_KEY.parse::<DhchapSecret>() else {
        return;
    };
    let ctrl_key = DhchapSecret::from_bytes(Some(HashId::Sha384), &[7u8; 48]).ok();
    let bidi = mode & 2 != 0;
    let policy = Arc::new(AuthPolicy {
        host_key: host_key.clone(),
        ctrl_key: ctrl_key.clone(),
        hashes: HashId::ALL.to_vec(),
        groups: vec![DhGroup::Null, DhGroup::Ffdhe2048],
    });
    let keys = HostKeys {
        host_key,
        ctrl_key: if bidi { ctrl_key } else { None },
    };
    let mut c = ControllerAuth::new(HOST, SUB);
    let mut h = HostAuth::new(keys.clone(), HOST, SUB, 1);
    // The genuine host's next message, and the last genuine Reply sent.
    let mut next: Option<Vec<u8>> = Some(h.negotiate());
    let mut genuine_reply: Option<Vec<u8>> = None;
    let mut ended = false;
    let mut i = 0;
    let byte = |i: &mut usize| {
        let b = ops.get(*i).copied().unwrap_or(0);
        *i += 1;
        b
    };
    let mut steps = 0;
    while i < ops.len() && steps < 64 {
        steps += 1;
        let op = byte(&mut i) % 6;
        let before = c.is_authenticated();
        let sent: Option<Vec<u8>> = match op {
            0 => next.take(),
            1 => next.clone().map(|mut m| {
                let at = usize::from(byte(&mut i)) % m.len().max(1);
                if let Some(b) = m.get_mut(at) {
                    *b ^= byte(&mut i) | 1;
                }
                m
            }),
            2 => {
                let n = usize::from(byte(&mut i));
                let end = (i + n).min(ops.len());
                let m = ops.get(i..end).unwrap_or_default().to_vec();
                i = end;
                Some(m)
            }
            3 => {
                let al = (usize::from(byte(&mut i)) << 4) % (MAX_TRANSFER_LEN as usize + 1);
                if let Ok((out, _)) = c.on_receive(al) {
                    assert_eq!(out.len(), al, "Authentication Receive returns AL bytes");
                    // Feed the controller's message to the genuine host.
                    next = match out.get(1) {
                        Some(1) => h.on_challenge(&out).ok(),
                        Some(3) => h.on_success1(&out).ok().flatten(),
                        _ => None,
                    };
                    if next.as_ref().is_some_and(|m| m.get(1) == Some(&2)) {
                        genuine_reply = next.clone();
                    }
                }
                None
            }
            4 => {
                c.expire();
                None
            }
            _ => {
                h = HostAuth::new(keys.clone(), HOST, SUB, u16::from(byte(&mut i)));
                genuine_reply = None;
                Some(h.negotiate())
            }
        };
        if let Some(m) = &sent {
            c.on_send(m, Some(policy.clone()));
            if !before && c.is_authenticated() {
                // The host proved its key: the Reply carries the genuine host's R1 (the
                // rest is not covered by R1: a changed CVALID only strips the
                // controller's authentication, which the host then misses and refuses).
                let r1 = |b: &[u8]| match Message::decode(b) {
                    Ok(Message::Reply(r)) => Some(r.response),
                    _ => None,
                };
                let is_reply = genuine_reply
                    .as_ref()
                    .is_some_and(|g| r1(g).is_some() && r1(g) == r1(m));
                let is_success2 = m.get(1) == Some(&4) && genuine_reply.is_some();
                assert!(
                    is_reply || is_success2,
                    "authenticated by a message the host did not make"
                );
            }
        }
        ended |= c.must_end();
        if ended {
            assert!(
                !c.is_authenticated(),
                "authenticated after the exchange failed"
            );
        }
    }
}
