//! DH-HMAC-CHAP messages (NVMe Base 2.x, 8.3.5.5; Linux `struct nvmf_auth_dhchap_*`):
//! decoding with a precise failure reason for every malformed field, and encoding.
//!
//! Every message starts with AUTH_TYPE, AUTH_ID, two reserved bytes and the
//! transaction identifier T_ID. A buffer may hold more than the message (an
//! Authentication Receive returns the whole allocation, zero-filled); the bytes after
//! the lengths the message declares are ignored, as the Linux target and SPDK do.

use super::hash::HashId;

/// AUTH_TYPE: common authentication messages (Negotiate, Failure1/2).
pub const AUTH_TYPE_COMMON: u8 = 0x00;
/// AUTH_TYPE: DH-HMAC-CHAP messages.
pub const AUTH_TYPE_DHCHAP: u8 = 0x01;

/// AUTH_ID values.
pub mod auth_id {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xF0;
    pub const FAILURE1: u8 = 0xF1;
}

/// AUTHID of the DH-HMAC-CHAP protocol descriptor in a Negotiate.
pub const PROTOCOL_DHCHAP: u8 = 0x01;
/// Reason Code of every failure message: "authentication failure".
pub const RESCODE_FAILED: u8 = 0x01;

/// Negotiate header (before the descriptors).
pub const NEGOTIATE_HDR_LEN: usize = 8;
/// One protocol descriptor in a Negotiate.
pub const DESCRIPTOR_LEN: usize = 64;
/// Offset in a descriptor's ID list where the DH group identifiers start.
const DH_IDS_AT: usize = 30;
/// Room for identifiers of each kind in a descriptor.
const MAX_IDS: usize = 30;
/// Challenge, Reply and Success1 header length (before the variable fields).
pub const HDR16_LEN: usize = 16;
/// Success2 length.
pub const SUCCESS2_LEN: usize = 16;
/// Failure1 / Failure2 length.
pub const FAILURE_LEN: usize = 8;

/// Reason Code Explanation of a failure (NVMe Base 2.x, Figure 622).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FailureReason {
    /// Authentication failed (a response did not verify).
    Failed = 0x01,
    /// Authentication protocol not usable.
    NotUsable = 0x02,
    /// Secure channel concatenation mismatch.
    ConcatMismatch = 0x03,
    /// Hash function not usable.
    HashUnusable = 0x04,
    /// DH group not usable.
    DhGroupUnusable = 0x05,
    /// Incorrect payload.
    IncorrectPayload = 0x06,
    /// Incorrect protocol message.
    IncorrectMessage = 0x07,
}

impl FailureReason {
    /// The reason for wire value `v` (unknown values read as [`FailureReason::Failed`]).
    pub fn from_u8(v: u8) -> FailureReason {
        match v {
            0x02 => FailureReason::NotUsable,
            0x03 => FailureReason::ConcatMismatch,
            0x04 => FailureReason::HashUnusable,
            0x05 => FailureReason::DhGroupUnusable,
            0x06 => FailureReason::IncorrectPayload,
            0x07 => FailureReason::IncorrectMessage,
            _ => FailureReason::Failed,
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailureReason::Failed => "authentication failed",
            FailureReason::NotUsable => "authentication protocol not usable",
            FailureReason::ConcatMismatch => "secure channel concatenation mismatch",
            FailureReason::HashUnusable => "no usable hash function",
            FailureReason::DhGroupUnusable => "no usable DH group",
            FailureReason::IncorrectPayload => "incorrect payload",
            FailureReason::IncorrectMessage => "incorrect protocol message",
        })
    }
}

/// AUTH_NegotiateData.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiate {
    pub tid: u16,
    /// Secure channel concatenation (SC_C); 0: none.
    pub sc_c: u8,
    /// Hash identifiers offered (HashIDList), unknown ones included.
    pub hashes: Vec<u8>,
    /// DH group identifiers offered (DHgIDList), unknown ones included.
    pub dhgroups: Vec<u8>,
}

/// DH-HMAC-CHAP_Challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub tid: u16,
    pub hash: u8,
    pub dhgid: u8,
    pub seqnum: u32,
    /// C1, HL bytes.
    pub challenge: Vec<u8>,
    /// The controller's DH value (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub tid: u16,
    /// R1, HL bytes.
    pub response: Vec<u8>,
    /// C2 when the host asks the controller to authenticate itself (CVALID).
    pub challenge: Option<Vec<u8>>,
    /// S2; 0 when no controller authentication is asked.
    pub seqnum: u32,
    /// The host's DH value (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Success1 {
    pub tid: u16,
    /// HL.
    pub hl: u8,
    /// R2 when RVALID.
    pub response: Option<Vec<u8>>,
}

/// A failure message (Failure1 from the controller, Failure2 from the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    pub tid: u16,
    pub rescode: u8,
    pub reason: FailureReason,
}

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Negotiate(Negotiate),
    Challenge(Challenge),
    Reply(Reply),
    Success1(Success1),
    Success2 { tid: u16 },
    Failure1(Failure),
    Failure2(Failure),
}

/// Why a buffer is not a message: the failure reason to report and what was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    pub reason: FailureReason,
    pub what: &'static str,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.what, self.reason)
    }
}

fn payload(what: &'static str) -> DecodeError {
    DecodeError {
        reason: FailureReason::IncorrectPayload,
        what,
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[x, y]) => u16::from_le_bytes([x, y]),
        _ => 0,
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[a, b1, c, d]) => u32::from_le_bytes([a, b1, c, d]),
        _ => 0,
    }
}

fn byte(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

/// The bytes `at..at+len` of `b`, or an Incorrect Payload error naming `what`.
fn take<'a>(
    b: &'a [u8],
    at: usize,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8], DecodeError> {
    at.checked_add(len)
        .and_then(|end| b.get(at..end))
        .ok_or(payload(what))
}

impl Message {
    /// The transaction identifier.
    pub fn tid(&self) -> u16 {
        match self {
            Message::Negotiate(m) => m.tid,
            Message::Challenge(m) => m.tid,
            Message::Reply(m) => m.tid,
            Message::Success1(m) => m.tid,
            Message::Success2 { tid } => *tid,
            Message::Failure1(m) | Message::Failure2(m) => m.tid,
        }
    }

    /// The message's name in the specification.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate(_) => "AUTH_Negotiate",
            Message::Challenge(_) => "DH-HMAC-CHAP_Challenge",
            Message::Reply(_) => "DH-HMAC-CHAP_Reply",
            Message::Success1(_) => "DH-HMAC-CHAP_Success1",
            Message::Success2 { .. } => "DH-HMAC-CHAP_Success2",
            Message::Failure1(_) => "AUTH_Failure1",
            Message::Failure2(_) => "AUTH_Failure2",
        }
    }

    /// Decodes the message at the start of `b`.
    pub fn decode(b: &[u8]) -> Result<Message, DecodeError> {
        if b.len() < FAILURE_LEN {
            return Err(payload("message shorter than its header"));
        }
        let (ty, id, tid) = (byte(b, 0), byte(b, 1), u16_at(b, 4));
        match (ty, id) {
            (AUTH_TYPE_COMMON, auth_id::NEGOTIATE) => decode_negotiate(b, tid),
            (AUTH_TYPE_COMMON, auth_id::FAILURE1 | auth_id::FAILURE2) => {
                let f = Failure {
                    tid,
                    rescode: byte(b, 6),
                    reason: FailureReason::from_u8(byte(b, 7)),
                };
                Ok(if id == auth_id::FAILURE1 {
                    Message::Failure1(f)
                } else {
                    Message::Failure2(f)
                })
            }
            (AUTH_TYPE_DHCHAP, auth_id::CHALLENGE) => decode_challenge(b, tid),
            (AUTH_TYPE_DHCHAP, auth_id::REPLY) => decode_reply(b, tid),
            (AUTH_TYPE_DHCHAP, auth_id::SUCCESS1) => decode_success1(b, tid),
            (AUTH_TYPE_DHCHAP, auth_id::SUCCESS2) => {
                take(b, 0, SUCCESS2_LEN, "Success2 shorter than 16 bytes")?;
                Ok(Message::Success2 { tid })
            }
            _ => Err(DecodeError {
                reason: FailureReason::IncorrectMessage,
                what: "unknown AUTH_TYPE / AUTH_ID",
            }),
        }
    }

    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Negotiate(m) => {
                let mut b = header(
                    NEGOTIATE_HDR_LEN + DESCRIPTOR_LEN,
                    AUTH_TYPE_COMMON,
                    auth_id::NEGOTIATE,
                    m.tid,
                );
                let hashes = &m.hashes[..m.hashes.len().min(MAX_IDS)];
                let groups = &m.dhgroups[..m.dhgroups.len().min(MAX_IDS)];
                put(&mut b, 6, &[m.sc_c, 1]);
                let d = NEGOTIATE_HDR_LEN;
                put(
                    &mut b,
                    d,
                    &[PROTOCOL_DHCHAP, 0, hashes.len() as u8, groups.len() as u8],
                );
                put(&mut b, d + 4, hashes);
                put(&mut b, d + 4 + DH_IDS_AT, groups);
                b
            }
            Message::Challenge(m) => {
                let mut b = header(
                    HDR16_LEN + m.challenge.len() + m.dh_value.len(),
                    AUTH_TYPE_DHCHAP,
                    auth_id::CHALLENGE,
                    m.tid,
                );
                put(&mut b, 6, &[m.challenge.len() as u8, 0, m.hash, m.dhgid]);
                put(&mut b, 10, &(m.dh_value.len() as u16).to_le_bytes());
                put(&mut b, 12, &m.seqnum.to_le_bytes());
                put(&mut b, HDR16_LEN, &m.challenge);
                put(&mut b, HDR16_LEN + m.challenge.len(), &m.dh_value);
                b
            }
            Message::Reply(m) => {
                let hl = m.response.len();
                let mut b = header(
                    HDR16_LEN + 2 * hl + m.dh_value.len(),
                    AUTH_TYPE_DHCHAP,
                    auth_id::REPLY,
                    m.tid,
                );
                put(
                    &mut b,
                    6,
                    &[hl as u8, 0, u8::from(m.challenge.is_some()), 0],
                );
                put(&mut b, 10, &(m.dh_value.len() as u16).to_le_bytes());
                put(&mut b, 12, &m.seqnum.to_le_bytes());
                put(&mut b, HDR16_LEN, &m.response);
                if let Some(c) = &m.challenge {
                    put(&mut b, HDR16_LEN + hl, c);
                }
                put(&mut b, HDR16_LEN + 2 * hl, &m.dh_value);
                b
            }
            Message::Success1(m) => {
                let rlen = m.response.as_ref().map_or(0, Vec::len);
                let mut b = header(HDR16_LEN + rlen, AUTH_TYPE_DHCHAP, auth_id::SUCCESS1, m.tid);
                put(&mut b, 6, &[m.hl, 0, u8::from(m.response.is_some())]);
                if let Some(r) = &m.response {
                    put(&mut b, HDR16_LEN, r);
                }
                b
            }
            Message::Success2 { tid } => {
                header(SUCCESS2_LEN, AUTH_TYPE_DHCHAP, auth_id::SUCCESS2, *tid)
            }
            Message::Failure1(f) | Message::Failure2(f) => {
                let id = if matches!(self, Message::Failure1(_)) {
                    auth_id::FAILURE1
                } else {
                    auth_id::FAILURE2
                };
                let mut b = header(FAILURE_LEN, AUTH_TYPE_COMMON, id, f.tid);
                put(&mut b, 6, &[f.rescode, f.reason as u8]);
                b
            }
        }
    }
}

fn header(len: usize, ty: u8, id: u8, tid: u16) -> Vec<u8> {
    let mut b = vec![0u8; len];
    put(&mut b, 0, &[ty, id]);
    put(&mut b, 4, &tid.to_le_bytes());
    b
}

/// Copies `src` into `b` at `at`, as far as `b` reaches.
fn put(b: &mut [u8], at: usize, src: &[u8]) {
    if let Some(dst) = b.get_mut(at..) {
        let n = dst.len().min(src.len());
        if let (Some(d), Some(s)) = (dst.get_mut(..n), src.get(..n)) {
            d.copy_from_slice(s);
        }
    }
}

fn decode_negotiate(b: &[u8], tid: u16) -> Result<Message, DecodeError> {
    let (sc_c, napd) = (byte(b, 6), byte(b, 7));
    if napd == 0 {
        return Err(DecodeError {
            reason: FailureReason::NotUsable,
            what: "Negotiate offers no protocol (NAPD 0)",
        });
    }
    let d = take(
        b,
        NEGOTIATE_HDR_LEN,
        DESCRIPTOR_LEN * usize::from(napd),
        "Negotiate shorter than its descriptors",
    )?;
    // Use the DH-HMAC-CHAP descriptor; any other protocol is unknown here.
    let desc = d
        .chunks_exact(DESCRIPTOR_LEN)
        .find(|c| c.first() == Some(&PROTOCOL_DHCHAP))
        .ok_or(DecodeError {
            reason: FailureReason::NotUsable,
            what: "Negotiate offers no DH-HMAC-CHAP descriptor",
        })?;
    let (halen, dhlen) = (usize::from(byte(desc, 2)), usize::from(byte(desc, 3)));
    if halen > MAX_IDS || dhlen > MAX_IDS {
        return Err(payload("Negotiate ID list longer than 30"));
    }
    let hashes = take(desc, 4, halen, "hash list")?.to_vec();
    let dhgroups = take(desc, 4 + DH_IDS_AT, dhlen, "DH group list")?.to_vec();
    Ok(Message::Negotiate(Negotiate {
        tid,
        sc_c,
        hashes,
        dhgroups,
    }))
}

fn decode_challenge(b: &[u8], tid: u16) -> Result<Message, DecodeError> {
    take(b, 0, HDR16_LEN, "Challenge shorter than 16 bytes")?;
    let hl = usize::from(byte(b, 6));
    let (hash, dhgid, dhvlen, seqnum) = (
        byte(b, 8),
        byte(b, 9),
        usize::from(u16_at(b, 10)),
        u32_at(b, 12),
    );
    if let Some(h) = HashId::from_id(hash) {
        if h.digest_len() != hl {
            return Err(DecodeError {
                reason: FailureReason::HashUnusable,
                what: "Challenge HL does not match its hash function",
            });
        }
    }
    let challenge = take(b, HDR16_LEN, hl, "Challenge shorter than HL")?.to_vec();
    let dh_value = take(b, HDR16_LEN + hl, dhvlen, "Challenge shorter than DHVLEN")?.to_vec();
    Ok(Message::Challenge(Challenge {
        tid,
        hash,
        dhgid,
        seqnum,
        challenge,
        dh_value,
    }))
}

fn decode_reply(b: &[u8], tid: u16) -> Result<Message, DecodeError> {
    take(b, 0, HDR16_LEN, "Reply shorter than 16 bytes")?;
    let hl = usize::from(byte(b, 6));
    let (cvalid, dhvlen, seqnum) = (byte(b, 8), usize::from(u16_at(b, 10)), u32_at(b, 12));
    let response = take(b, HDR16_LEN, hl, "Reply shorter than HL")?.to_vec();
    let c2 = take(b, HDR16_LEN + hl, hl, "Reply shorter than 2 x HL")?;
    let dh_value = take(b, HDR16_LEN + 2 * hl, dhvlen, "Reply shorter than DHVLEN")?.to_vec();
    Ok(Message::Reply(Reply {
        tid,
        response,
        challenge: (cvalid & 1 != 0).then(|| c2.to_vec()),
        seqnum,
        dh_value,
    }))
}

fn decode_success1(b: &[u8], tid: u16) -> Result<Message, DecodeError> {
    take(b, 0, HDR16_LEN, "Success1 shorter than 16 bytes")?;
    let hl = byte(b, 6);
    let rvalid = byte(b, 8) & 1 != 0;
    let response = if rvalid {
        Some(take(b, HDR16_LEN, usize::from(hl), "Success1 shorter than HL")?.to_vec())
    } else {
        None
    };
    Ok(Message::Success1(Success1 { tid, hl, response }))
}
