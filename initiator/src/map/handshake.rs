//! The NBD fixed newstyle handshake, server side.
//!
//! Owned by `map`. [`negotiate`] runs on a blocking stream right after `accept`: the
//! greeting, the client flags, then the option haggling (`NBD_OPT_EXPORT_NAME`,
//! `NBD_OPT_INFO`, `NBD_OPT_GO`, `NBD_OPT_LIST`, `NBD_OPT_ABORT`,
//! `NBD_OPT_STRUCTURED_REPLY`; metadata context requests get an empty answer; every
//! other option `NBD_REP_ERR_UNSUP`) until the client enters transmission or leaves.
//! One export is served: under its configured name and as the default export `""`.

use std::io::{self, Read, Write};

use super::proto::{self, client_flags, info, opt, rep, OptionHeader, OPTION_HEADER_LEN};

/// Longest option payload read whole; longer ones are discarded with
/// `NBD_REP_ERR_TOO_BIG` (the protocol caps names and descriptions at 4096 bytes).
pub const MAX_OPTION_LEN: u32 = 64 * 1024;

/// What the handshake tells a client about the export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub name: String,
    pub description: String,
    /// Bytes.
    pub size: u64,
    /// The namespace's logical block size: the minimum request alignment.
    pub min_block: u32,
    pub preferred_block: u32,
    /// The largest payload of one request.
    pub max_payload: u32,
    /// Transmission flags ([`proto::tflags`]).
    pub flags: u16,
}

impl Export {
    fn serves(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.name.as_bytes()
    }

    fn block_size_info(&self) -> Vec<u8> {
        let mut b = info::BLOCK_SIZE.to_be_bytes().to_vec();
        b.extend_from_slice(&self.min_block.to_be_bytes());
        b.extend_from_slice(&self.preferred_block.to_be_bytes());
        b.extend_from_slice(&self.max_payload.to_be_bytes());
        b
    }

    fn export_info(&self) -> Vec<u8> {
        let mut b = info::EXPORT.to_be_bytes().to_vec();
        b.extend_from_slice(&self.size.to_be_bytes());
        b.extend_from_slice(&self.flags.to_be_bytes());
        b
    }
}

/// How a handshake ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The client entered transmission.
    Transmission { structured: bool },
    /// The client aborted, or asked for an export that does not exist.
    Closed,
}

/// Runs the handshake on `s`. An `Err` is an I/O error or a protocol violation (the
/// caller drops the connection).
pub fn negotiate<S: Read + Write>(s: &mut S, export: &Export) -> io::Result<Outcome> {
    s.write_all(&proto::greeting())?;
    s.flush()?;
    let mut cf = [0u8; 4];
    s.read_exact(&mut cf)?;
    let cflags = u32::from_be_bytes(cf);
    if cflags & !client_flags::KNOWN != 0 {
        return Err(invalid(format!("unknown client flags {cflags:#x}")));
    }
    if cflags & client_flags::FIXED_NEWSTYLE == 0 {
        return Err(invalid("client does not speak fixed newstyle".into()));
    }
    let no_zeroes = cflags & client_flags::NO_ZEROES != 0;
    let mut structured = false;
    loop {
        let mut hb = [0u8; OPTION_HEADER_LEN];
        s.read_exact(&mut hb)?;
        let h = OptionHeader::parse(&hb);
        if h.magic != proto::IHAVEOPT {
            return Err(invalid(format!("option magic {:#x}", h.magic)));
        }
        if h.length > MAX_OPTION_LEN {
            if h.option == opt::EXPORT_NAME {
                return Err(invalid("export name too long".into()));
            }
            io::copy(
                &mut Read::by_ref(s).take(u64::from(h.length)),
                &mut io::sink(),
            )?;
            reply(s, h.option, rep::ERR_TOO_BIG, b"option data too long")?;
            continue;
        }
        let mut data = vec![0u8; h.length as usize];
        s.read_exact(&mut data)?;
        match h.option {
            opt::EXPORT_NAME => {
                if !export.serves(&data) {
                    // This option has no error reply: the protocol says to close.
                    return Ok(Outcome::Closed);
                }
                let mut b = export.size.to_be_bytes().to_vec();
                b.extend_from_slice(&export.flags.to_be_bytes());
                if !no_zeroes {
                    b.extend_from_slice(&[0u8; proto::EXPORT_NAME_PADDING]);
                }
                s.write_all(&b)?;
                s.flush()?;
                return Ok(Outcome::Transmission { structured });
            }
            opt::ABORT => {
                // The client may already have gone; a failed ACK does not matter.
                let _ = reply(s, h.option, rep::ACK, &[]);
                return Ok(Outcome::Closed);
            }
            opt::LIST => {
                if !data.is_empty() {
                    reply(s, h.option, rep::ERR_INVALID, b"LIST takes no data")?;
                    continue;
                }
                let mut b = (export.name.len() as u32).to_be_bytes().to_vec();
                b.extend_from_slice(export.name.as_bytes());
                b.extend_from_slice(export.description.as_bytes());
                reply(s, h.option, rep::SERVER, &b)?;
                reply(s, h.option, rep::ACK, &[])?;
            }
            opt::INFO | opt::GO => {
                let Some((name, infos)) = parse_info_request(&data) else {
                    reply(s, h.option, rep::ERR_INVALID, b"malformed INFO/GO request")?;
                    continue;
                };
                if !export.serves(name) {
                    reply(s, h.option, rep::ERR_UNKNOWN, b"no such export")?;
                    continue;
                }
                for i in infos {
                    let mut b = i.to_be_bytes().to_vec();
                    match i {
                        info::NAME => b.extend_from_slice(export.name.as_bytes()),
                        info::DESCRIPTION => b.extend_from_slice(export.description.as_bytes()),
                        // EXPORT and BLOCK_SIZE are always sent below; others are unknown.
                        _ => continue,
                    }
                    reply(s, h.option, rep::INFO, &b)?;
                }
                reply(s, h.option, rep::INFO, &export.block_size_info())?;
                reply(s, h.option, rep::INFO, &export.export_info())?;
                reply(s, h.option, rep::ACK, &[])?;
                if h.option == opt::GO {
                    return Ok(Outcome::Transmission { structured });
                }
            }
            opt::STRUCTURED_REPLY => {
                if !data.is_empty() {
                    reply(s, h.option, rep::ERR_INVALID, b"takes no data")?;
                    continue;
                }
                structured = true;
                reply(s, h.option, rep::ACK, &[])?;
            }
            opt::SET_META_CONTEXT if !structured => {
                reply(
                    s,
                    h.option,
                    rep::ERR_INVALID,
                    b"negotiate structured replies first",
                )?;
            }
            opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => {
                // No metadata contexts: an empty list.
                reply(s, h.option, rep::ACK, &[])?;
            }
            _ => {
                reply(s, h.option, rep::ERR_UNSUP, b"option not supported")?;
            }
        }
    }
}

/// `(name, requested info types)` of an `NBD_OPT_INFO`/`NBD_OPT_GO` payload.
fn parse_info_request(d: &[u8]) -> Option<(&[u8], Vec<u16>)> {
    let name_len = u32::from_be_bytes(d.get(..4)?.try_into().ok()?) as usize;
    let name_end = 4usize.checked_add(name_len)?;
    let name = d.get(4..name_end)?;
    let n = u16::from_be_bytes(d.get(name_end..name_end + 2)?.try_into().ok()?) as usize;
    let list = d.get(name_end + 2..)?;
    if list.len() != n * 2 {
        return None;
    }
    let infos = list
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    Some((name, infos))
}

fn reply<S: Write>(s: &mut S, option: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    s.write_all(&proto::option_reply(option, kind, data))?;
    s.flush()
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::tflags;
    use std::io::Cursor;

    /// A scripted client: reads from `input`, records what the server writes.
    struct Script {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
    }
    impl Read for Script {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.input.read(b)
        }
    }
    impl Write for Script {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.output.write(b)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn export() -> Export {
        Export {
            name: "disk".into(),
            description: "test".into(),
            size: 1 << 20,
            min_block: 512,
            preferred_block: 4096,
            max_payload: 1 << 25,
            flags: tflags::HAS_FLAGS | tflags::SEND_FLUSH,
        }
    }

    fn option(code: u32, data: &[u8]) -> Vec<u8> {
        let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        b
    }

    fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    fn run(cflags: u32, opts: &[Vec<u8>]) -> (io::Result<Outcome>, Vec<u8>) {
        let mut input = cflags.to_be_bytes().to_vec();
        for o in opts {
            input.extend_from_slice(o);
        }
        let mut s = Script {
            input: Cursor::new(input),
            output: Vec::new(),
        };
        let r = negotiate(&mut s, &export());
        (r, s.output)
    }

    /// Splits the server's output after the greeting into option replies.
    fn replies(out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut v = Vec::new();
        let mut rest = &out[proto::SERVER_GREETING_LEN..];
        while rest.len() >= 20 {
            assert_eq!(&rest[..8], &proto::REPLY_MAGIC.to_be_bytes());
            let o = u32::from_be_bytes(rest[8..12].try_into().unwrap());
            let t = u32::from_be_bytes(rest[12..16].try_into().unwrap());
            let l = u32::from_be_bytes(rest[16..20].try_into().unwrap()) as usize;
            v.push((o, t, rest[20..20 + l].to_vec()));
            rest = &rest[20 + l..];
        }
        assert!(rest.is_empty(), "trailing bytes {rest:?}");
        v
    }

    #[test]
    fn go_with_structured_replies() {
        let (r, out) = run(
            client_flags::KNOWN,
            &[
                option(opt::STRUCTURED_REPLY, &[]),
                option(opt::GO, &go_data("disk", &[info::NAME, info::BLOCK_SIZE])),
            ],
        );
        assert_eq!(r.unwrap(), Outcome::Transmission { structured: true });
        let rs = replies(&out);
        assert_eq!(rs[0], (opt::STRUCTURED_REPLY, rep::ACK, vec![]));
        assert_eq!(rs[1], (opt::GO, rep::INFO, b"\x00\x01disk".to_vec()));
        assert_eq!(
            rs[2].2,
            [0, 3, 0, 0, 2, 0, 0, 0, 0x10, 0, 2, 0, 0, 0],
            "BLOCK_SIZE min 512, preferred 4096, max 32 MiB"
        );
        assert_eq!(
            rs[3].2,
            [0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x05],
            "EXPORT: size 1 MiB, flags"
        );
        assert_eq!(rs[4], (opt::GO, rep::ACK, vec![]));
    }

    #[test]
    fn list_info_unknown_and_abort() {
        let (r, out) = run(
            client_flags::FIXED_NEWSTYLE,
            &[
                option(opt::LIST, &[]),
                option(opt::INFO, &go_data("other", &[])),
                option(opt::INFO, &go_data("", &[])),
                option(opt::GO, b"\x00\x00\x00\x09x"),
                option(opt::SET_META_CONTEXT, &[]),
                option(opt::STARTTLS, &[]),
                option(opt::ABORT, &[]),
            ],
        );
        assert_eq!(r.unwrap(), Outcome::Closed);
        let rs = replies(&out);
        let kinds: Vec<(u32, u32)> = rs.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            kinds,
            [
                (opt::LIST, rep::SERVER),
                (opt::LIST, rep::ACK),
                (opt::INFO, rep::ERR_UNKNOWN),
                (opt::INFO, rep::INFO),
                (opt::INFO, rep::INFO),
                (opt::INFO, rep::ACK),
                (opt::GO, rep::ERR_INVALID),
                (opt::SET_META_CONTEXT, rep::ERR_INVALID),
                (opt::STARTTLS, rep::ERR_UNSUP),
                (opt::ABORT, rep::ACK),
            ]
        );
        assert_eq!(rs[0].2, b"\x00\x00\x00\x04disktest");
    }

    #[test]
    fn export_name_with_and_without_zeroes() {
        let (r, out) = run(
            client_flags::FIXED_NEWSTYLE,
            &[option(opt::EXPORT_NAME, b"disk")],
        );
        assert_eq!(r.unwrap(), Outcome::Transmission { structured: false });
        assert_eq!(out.len(), proto::SERVER_GREETING_LEN + 10 + 124);
        let (r, out) = run(client_flags::KNOWN, &[option(opt::EXPORT_NAME, b"")]);
        assert_eq!(r.unwrap(), Outcome::Transmission { structured: false });
        assert_eq!(&out[18..], &[0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x05]);
        let (r, _) = run(client_flags::KNOWN, &[option(opt::EXPORT_NAME, b"nope")]);
        assert_eq!(r.unwrap(), Outcome::Closed);
    }

    #[test]
    fn protocol_violations_end_the_handshake() {
        assert!(run(0, &[]).0.is_err(), "not fixed newstyle");
        assert!(run(0x80, &[]).0.is_err(), "unknown client flag");
        let mut bad = option(opt::LIST, &[]);
        bad[0] = b'X';
        assert!(run(client_flags::KNOWN, &[bad]).0.is_err(), "bad magic");
        assert!(run(client_flags::KNOWN, &[]).0.is_err(), "EOF");
        // A too-long option is discarded and answered; the handshake goes on.
        let big = vec![0u8; MAX_OPTION_LEN as usize + 1];
        let (r, out) = run(
            client_flags::KNOWN,
            &[option(opt::INFO, &big), option(opt::ABORT, &[])],
        );
        assert_eq!(r.unwrap(), Outcome::Closed);
        assert_eq!(replies(&out)[0].1, rep::ERR_TOO_BIG);
    }
}
