//! NBD wire format: magics, option and command codes, flags, errors, and the
//! encoders/decoders of the fixed-size headers.
//!
//! Owned by `map`. Names and values follow the NBD protocol document (`doc/proto.md` of
//! the NetworkBlockDevice project) and Linux `include/uapi/linux/nbd.h`. Every integer
//! on the wire is big-endian. Only what this server speaks is here: the fixed newstyle
//! handshake, simple replies and structured replies (no extended headers, no TLS, no
//! metadata contexts).

/// "NBDMAGIC": first word of the newstyle handshake.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": the newstyle magic, and the prefix of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request (`NBD_REQUEST_MAGIC`).
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply (`NBD_SIMPLE_REPLY_MAGIC`).
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk (`NBD_STRUCTURED_REPLY_MAGIC`).
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flags the server sends.
pub mod handshake_flags {
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags sent after the server's handshake flags.
pub mod client_flags {
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    pub const NO_ZEROES: u32 = 1 << 1;
    /// Every flag this server understands.
    pub const KNOWN: u32 = FIXED_NEWSTYLE | NO_ZEROES;
}

/// Option codes (`NBD_OPT_*`).
pub mod opt {
    pub const EXPORT_NAME: u32 = 1;
    pub const ABORT: u32 = 2;
    pub const LIST: u32 = 3;
    pub const STARTTLS: u32 = 5;
    pub const INFO: u32 = 6;
    pub const GO: u32 = 7;
    pub const STRUCTURED_REPLY: u32 = 8;
    pub const LIST_META_CONTEXT: u32 = 9;
    pub const SET_META_CONTEXT: u32 = 10;
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (`NBD_REP_*`); errors have bit 31 set.
pub mod rep {
    pub const ACK: u32 = 1;
    pub const SERVER: u32 = 2;
    pub const INFO: u32 = 3;
    const ERR: u32 = 1 << 31;
    pub const ERR_UNSUP: u32 = ERR | 1;
    pub const ERR_POLICY: u32 = ERR | 2;
    pub const ERR_INVALID: u32 = ERR | 3;
    pub const ERR_UNKNOWN: u32 = ERR | 6;
    pub const ERR_TOO_BIG: u32 = ERR | 9;
}

/// Information types of `NBD_REP_INFO` (`NBD_INFO_*`).
pub mod info {
    pub const EXPORT: u16 = 0;
    pub const NAME: u16 = 1;
    pub const DESCRIPTION: u16 = 2;
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags (`NBD_FLAG_*`), sent with the export size.
pub mod tflags {
    pub const HAS_FLAGS: u16 = 1 << 0;
    pub const READ_ONLY: u16 = 1 << 1;
    pub const SEND_FLUSH: u16 = 1 << 2;
    pub const SEND_FUA: u16 = 1 << 3;
    pub const SEND_TRIM: u16 = 1 << 5;
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
}

/// Command types (`NBD_CMD_*`).
pub mod cmd {
    pub const READ: u16 = 0;
    pub const WRITE: u16 = 1;
    pub const DISC: u16 = 2;
    pub const FLUSH: u16 = 3;
    pub const TRIM: u16 = 4;
    pub const WRITE_ZEROES: u16 = 6;
}

/// Command flags (`NBD_CMD_FLAG_*`).
pub mod cmd_flags {
    pub const FUA: u16 = 1 << 0;
    pub const NO_HOLE: u16 = 1 << 1;
}

/// Structured reply chunk flags and types (`NBD_REPLY_FLAG_*`, `NBD_REPLY_TYPE_*`).
pub mod chunk {
    pub const FLAG_DONE: u16 = 1 << 0;
    pub const TYPE_NONE: u16 = 0;
    pub const TYPE_OFFSET_DATA: u16 = 1;
    pub const TYPE_ERROR: u16 = (1 << 15) | 1;
}

/// Error values carried in replies (the protocol fixes these numbers; they equal
/// Linux errno values).
pub mod errno {
    pub const EPERM: u32 = 1;
    pub const EIO: u32 = 5;
    pub const ENOMEM: u32 = 12;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const EOVERFLOW: u32 = 75;
    pub const ENOTSUP: u32 = 95;
    pub const ESHUTDOWN: u32 = 108;
}

/// Bytes of the server's first handshake message: NBDMAGIC, IHAVEOPT, flags.
pub const SERVER_GREETING_LEN: usize = 18;
/// Bytes of an option request header: IHAVEOPT, option, length.
pub const OPTION_HEADER_LEN: usize = 16;
/// Bytes of a transmission request.
pub const REQUEST_LEN: usize = 28;
/// Bytes of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Bytes of a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;
/// Zero padding after `NBD_OPT_EXPORT_NAME`'s reply unless NO_ZEROES was agreed.
pub const EXPORT_NAME_PADDING: usize = 124;

/// The server's greeting.
pub fn greeting() -> [u8; SERVER_GREETING_LEN] {
    let mut b = [0u8; SERVER_GREETING_LEN];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    let flags = handshake_flags::FIXED_NEWSTYLE | handshake_flags::NO_ZEROES;
    b[16..].copy_from_slice(&flags.to_be_bytes());
    b
}

/// An option request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub magic: u64,
    pub option: u32,
    pub length: u32,
}

impl OptionHeader {
    pub fn parse(b: &[u8; OPTION_HEADER_LEN]) -> OptionHeader {
        let (m, rest) = b.split_at(8);
        let (o, l) = rest.split_at(4);
        OptionHeader {
            magic: u64::from_be_bytes(m.try_into().unwrap_or_default()),
            option: u32::from_be_bytes(o.try_into().unwrap_or_default()),
            length: u32::from_be_bytes(l.try_into().unwrap_or_default()),
        }
    }
}

/// An option reply: header and `data`.
pub fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply_type.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// A transmission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub magic: u32,
    pub flags: u16,
    pub kind: u16,
    /// The client's opaque cookie ("handle"), echoed in the reply.
    pub handle: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    /// Decodes the first [`REQUEST_LEN`] bytes of `b`; `None` when `b` is shorter.
    pub fn parse(b: &[u8]) -> Option<Request> {
        let h = b.get(..REQUEST_LEN)?;
        let u16_at = |o: usize| h.get(o..o + 2).and_then(|s| s.try_into().ok());
        let u32_at = |o: usize| h.get(o..o + 4).and_then(|s| s.try_into().ok());
        let u64_at = |o: usize| h.get(o..o + 8).and_then(|s| s.try_into().ok());
        Some(Request {
            magic: u32::from_be_bytes(u32_at(0)?),
            flags: u16::from_be_bytes(u16_at(4)?),
            kind: u16::from_be_bytes(u16_at(6)?),
            handle: u64::from_be_bytes(u64_at(8)?),
            offset: u64::from_be_bytes(u64_at(16)?),
            length: u32::from_be_bytes(u32_at(24)?),
        })
    }

    /// Encodes the request (for clients and tests).
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..4].copy_from_slice(&self.magic.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.handle.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// True when the request is followed by `length` bytes of payload.
    pub fn has_payload(&self) -> bool {
        self.kind == cmd::WRITE
    }
}

/// Appends a simple reply header.
pub fn put_simple_reply(out: &mut Vec<u8>, error: u32, handle: u64) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
}

/// Appends a structured reply chunk header for a payload of `length` bytes.
pub fn put_chunk_header(out: &mut Vec<u8>, flags: u16, kind: u16, handle: u64, length: u32) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
}

/// Appends a final `NBD_REPLY_TYPE_ERROR` chunk carrying `error` and `message`.
pub fn put_error_chunk(out: &mut Vec<u8>, handle: u64, error: u32, message: &str) {
    let msg = message.as_bytes();
    let msg = msg
        .get(..msg.len().min(usize::from(u16::MAX)))
        .unwrap_or(msg);
    put_chunk_header(
        out,
        chunk::FLAG_DONE,
        chunk::TYPE_ERROR,
        handle,
        6 + msg.len() as u32,
    );
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
}

/// A human name for a command type, for logs.
pub fn cmd_name(kind: u16) -> &'static str {
    match kind {
        cmd::READ => "READ",
        cmd::WRITE => "WRITE",
        cmd::DISC => "DISC",
        cmd::FLUSH => "FLUSH",
        cmd::TRIM => "TRIM",
        cmd::WRITE_ZEROES => "WRITE_ZEROES",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_golden_bytes() {
        assert_eq!(
            greeting(),
            *b"NBDMAGICIHAVEOPT\x00\x03",
            "NBDMAGIC, IHAVEOPT, FIXED_NEWSTYLE|NO_ZEROES"
        );
    }

    #[test]
    fn request_golden_bytes() {
        let raw: [u8; REQUEST_LEN] = [
            0x25, 0x60, 0x95, 0x13, // magic
            0x00, 0x01, // flags: FUA
            0x00, 0x01, // type: WRITE
            1, 2, 3, 4, 5, 6, 7, 8, // handle
            0, 0, 0, 0, 0, 0, 0x10, 0x00, // offset 4096
            0, 0, 0x02, 0x00, // length 512
        ];
        let r = Request::parse(&raw).unwrap();
        assert_eq!(
            r,
            Request {
                magic: REQUEST_MAGIC,
                flags: cmd_flags::FUA,
                kind: cmd::WRITE,
                handle: 0x0102_0304_0506_0708,
                offset: 4096,
                length: 512,
            }
        );
        assert_eq!(r.encode(), raw);
        assert!(r.has_payload());
        assert!(Request::parse(&raw[..27]).is_none());
    }

    #[test]
    fn replies_golden_bytes() {
        let mut b = Vec::new();
        put_simple_reply(&mut b, errno::EIO, 7);
        assert_eq!(
            b,
            [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 7]
        );
        b.clear();
        put_error_chunk(&mut b, 9, errno::EINVAL, "no");
        assert_eq!(
            b,
            [
                0x66, 0x8e, 0x33, 0xef, 0, 1, 0x80, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 8, 0, 0, 0,
                22, 0, 2, b'n', b'o'
            ]
        );
        let r = option_reply(opt::GO, rep::ACK, &[]);
        assert_eq!(
            r,
            [0, 3, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 0]
        );
        let h = OptionHeader::parse(b"IHAVEOPT\x00\x00\x00\x07\x00\x00\x00\x04");
        assert_eq!((h.magic, h.option, h.length), (IHAVEOPT, opt::GO, 4));
    }
}
