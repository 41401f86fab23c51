//! The NVMe/TCP framer, both roles, on arbitrary byte streams fed in arbitrary
//! chunks. Input: one control byte (bit 0: controller or host reader; bits 1-2:
//! header and data digests asked for; bit 3: start with a valid ICReq / ICResp so the
//! fuzzer reaches post-initialization states at once; bits 4-7: chunk size seed),
//! then the stream. Invariants: `feed` never consumes more than it was given, never
//! panics, and a fatal error's termination request is a well-formed PDU that a fresh
//! reader of the other role accepts with the same FES and FEI. A second reader, whose
//! driver puts every data PDU's data elsewhere (`read_to_data` and `skip_data`, as the
//! target and host do), makes exactly the same of the stream: the same PDUs, the same
//! data digest errors (it digests the skipped bytes), the same fatal error.

use nvmf_common::transport::tcp::negotiate::{icreq_params, icresp_params};
use nvmf_common::transport::tcp::{
    encode_icreq, encode_icresp, ControllerConfig, FramerError, HostConfig, Pdu, PduReader,
};

/// The largest PDU data either reader accepts.
pub const MAX_DATA: u32 = 128 * 1024;

fn configs(ctl: u8) -> (ControllerConfig, HostConfig) {
    let hd = ctl & 0b010 != 0;
    let dd = ctl & 0b100 != 0;
    // The target's defaults (128 KiB H2CData, 16 KiB in-capsule data), so recorded
    // traffic parses.
    let c = ControllerConfig::default();
    let h = HostConfig {
        header_digest: hd,
        data_digest: dd,
        max_c2h_data: MAX_DATA,
        ..HostConfig::default()
    };
    (c, h)
}

/// Runs one input.
pub fn run(input: &[u8]) {
    let Some((&ctl, stream)) = input.split_first() else {
        return;
    };
    let controller = ctl & 1 == 0;
    let (ccfg, hcfg) = configs(ctl);
    let reader = if controller {
        PduReader::controller(ccfg)
    } else {
        PduReader::host(hcfg)
    };
    let Ok(mut reader) = reader else {
        return;
    };
    let mut skipper = if controller {
        PduReader::controller(ccfg)
    } else {
        PduReader::host(hcfg)
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let mut bytes = Vec::with_capacity(stream.len() + 128);
    if ctl & 0b1000 != 0 {
        if controller {
            encode_icreq(&icreq_params(&hcfg), &mut bytes);
        } else {
            // The ICResp a controller with `ccfg` answers this host's ICReq with.
            let req = icreq_params(&hcfg);
            if let Ok(n) = nvmf_common::transport::tcp::negotiate::accept_icreq(&ccfg, &req) {
                encode_icresp(&icresp_params(&n), &mut bytes);
            }
        }
    }
    bytes.extend_from_slice(stream);
    let chunk = usize::from(ctl >> 4) * 7 + 1;
    let mut at = 0;
    let mut fatal = None;
    let mut pdus = 0usize;
    let mut outcomes = Vec::new();
    while at < bytes.len() {
        let end = (at + chunk).min(bytes.len());
        let piece = &bytes[at..end];
        match reader.feed(piece) {
            Ok(n) => {
                assert!(n <= piece.len(), "consumed more than given");
                at += n;
                match reader.poll() {
                    Some(Ok(p)) => {
                        pdus += 1;
                        touch(&p);
                        outcomes.push(Outcome::of(Ok(p)));
                    }
                    Some(Err(e)) if e.is_fatal() => {
                        fatal = Some(e);
                        break;
                    }
                    Some(Err(e)) => {
                        pdus += 1;
                        outcomes.push(Outcome::of(Err(e)));
                    }
                    None => {
                        if n == 0 {
                            // Nothing consumed and nothing ready: must not happen.
                            panic!("reader made no progress");
                        }
                    }
                }
            }
            Err(e) => {
                assert!(e.is_fatal(), "feed returned a non-fatal error");
                fatal = Some(e);
                break;
            }
        }
    }
    let _ = pdus;
    if let Some(e) = fatal {
        outcomes.push(Outcome::Failed(e));
    }
    assert_eq!(
        skipping(&mut skipper, &bytes, chunk),
        outcomes,
        "skipping data changed what was read"
    );
    if let Some(e) = fatal {
        assert_eq!(reader.error(), Some(e));
        // Poisoned: every later call reports the same error.
        assert_eq!(reader.feed(&[0u8; 8]), Err(e));
        let mut term = Vec::new();
        let sent = reader.termination_request(&mut term);
        assert_eq!(sent, e.fes().is_some());
        if sent {
            check_term(controller, &term, e);
        }
    }
}

/// What a reader made of one PDU: its type and lengths (a skipping reader's data is
/// elsewhere, so not its bytes), a data digest error, or the fatal error.
#[derive(Debug, PartialEq)]
enum Outcome {
    Pdu {
        pdu_type: u8,
        data_len: usize,
        data_at: Option<(u16, u32)>,
    },
    Digest(FramerError),
    Failed(FramerError),
}

impl Outcome {
    fn of(r: Result<Pdu<'_>, FramerError>) -> Outcome {
        match r {
            Ok(p) => {
                let (data_len, data_at) = match &p {
                    Pdu::CapsuleCmd { data, .. } => (data.len(), None),
                    // DATAL: a skipping reader hands out only the data it held.
                    Pdu::H2CData {
                        cid, datao, datal, ..
                    }
                    | Pdu::C2HData {
                        cid, datao, datal, ..
                    } => (*datal as usize, Some((*cid, *datao))),
                    _ => (0, None),
                };
                Outcome::Pdu {
                    pdu_type: p.pdu_type(),
                    data_len,
                    data_at,
                }
            }
            Err(e) if e.is_fatal() => Outcome::Failed(e),
            Err(e) => Outcome::Digest(e),
        }
    }
}

/// Reads `bytes` in `chunk`-sized pieces the way the target and host drivers do: a
/// data PDU's data that is not whole in a piece is "placed elsewhere" and skipped.
fn skipping(reader: &mut PduReader, bytes: &[u8], chunk: usize) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let piece = &bytes[at..(at + chunk).min(bytes.len())];
        if let Some(d) = reader.data_in_progress() {
            let n = reader.skip_data(piece);
            assert!(
                n > 0 && n <= piece.len() && n <= d.len - d.received,
                "skip_data counted {n}"
            );
            at += n;
            if let Some(r) = reader.poll() {
                let o = Outcome::of(r);
                let end = matches!(o, Outcome::Failed(_));
                out.push(o);
                if end {
                    break;
                }
            }
            continue;
        }
        let (n, r) = reader.read_to_data(piece);
        assert!(n <= piece.len(), "consumed more than given");
        at += n;
        match r {
            Some(r) => {
                let o = Outcome::of(r);
                let end = matches!(o, Outcome::Failed(_));
                out.push(o);
                if end {
                    break;
                }
            }
            None if n == 0 => panic!("skipping reader made no progress"),
            None => {}
        }
    }
    out
}

/// The termination request parses, for the peer, as what was meant.
fn check_term(from_controller: bool, term: &[u8], e: FramerError) {
    let peer = if from_controller {
        PduReader::host(HostConfig::default())
    } else {
        PduReader::controller(ControllerConfig::default())
    };
    let Ok(mut peer) = peer else {
        panic!("default configs are valid");
    };
    let n = match peer.feed(term) {
        Ok(n) => n,
        Err(err) => panic!("our termination request is malformed: {err}"),
    };
    assert_eq!(n, term.len(), "termination request length");
    let want = (e.fes(), e.fei());
    match peer.poll() {
        Some(Ok(Pdu::C2HTermReq { fes, fei, data })) if from_controller => {
            assert_eq!((Some(fes), fei), want);
            assert!(data.len() <= nvmf_common::wire::tcp::MAX_TERM_DATA);
        }
        Some(Ok(Pdu::H2CTermReq { fes, fei, data })) if !from_controller => {
            assert_eq!((Some(fes), fei), want);
            assert!(data.len() <= nvmf_common::wire::tcp::MAX_TERM_DATA);
        }
        other => panic!("termination request read back as {other:?}"),
    }
}

/// Reads every field of a PDU (lengths must be consistent with the slices).
pub fn touch(p: &Pdu<'_>) {
    match p {
        Pdu::CapsuleCmd { data, .. } => {
            assert!(data.len() <= ControllerConfig::default().max_icd as usize)
        }
        Pdu::H2CData { data, datal, .. } | Pdu::C2HData { data, datal, .. } => {
            assert!(data.len() <= *datal as usize && *datal <= MAX_DATA)
        }
        _ => {}
    }
}
