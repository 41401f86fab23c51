//! The wire parsers on arbitrary bytes: the first byte picks the parser, the rest is
//! its input. Parsers must never panic; values that parse survive a round trip where
//! an encoder exists.

use nvmf_common::transport::tcp::{IcReqParams, IcRespParams};
use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::cqe::Cqe;
use nvmf_common::wire::fabrics::{ConnectCmd, ConnectData};
use nvmf_common::wire::identify::{parse_ns_id_descriptors, parse_ns_list};
use nvmf_common::wire::log::{parse_changed_ns_list, ErrorInfoEntry};
use nvmf_common::wire::rdma::{CmAccept, CmReject, CmRequest};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::status::Status;
use nvmf_common::wire::tcp::{DataPdu, Header, TermReq};

/// Runs one input.
pub fn run(input: &[u8]) {
    let Some((&which, data)) = input.split_first() else {
        return;
    };
    match which % 16 {
        0 => {
            if let Ok(d) = SglDescriptor::parse(data) {
                // What parses re-encodes to a descriptor that parses the same.
                let b = d.to_bytes();
                if let Ok(again) = SglDescriptor::parse(&b) {
                    if !matches!(d, SglDescriptor::Other { .. }) {
                        assert_eq!(again, d, "SGL round trip");
                    }
                }
            }
        }
        1 => {
            let _ = SglDescriptor::parse_list(data);
        }
        2 => {
            let _ = IcReqParams::parse(data);
            let _ = IcRespParams::parse(data);
        }
        3 => {
            if let Ok(n) = Nqn::from_wire(data) {
                assert!(!n.as_str().is_empty() && n.as_str().len() <= 223);
                let mut f = vec![0u8; 256];
                n.write_wire(&mut f);
                assert_eq!(Nqn::from_wire(&f).ok(), Some(n), "NQN round trip");
            }
        }
        4 => {
            let _ = parse_ns_list(data);
            let _ = parse_changed_ns_list(data);
        }
        5 => {
            let _ = parse_ns_id_descriptors(data);
        }
        6 => {
            if data.len() >= 2 {
                let v = u16::from_le_bytes([data[0], data[1]]) & 0x7FFF;
                let s = Status::from_field(v);
                assert_eq!(s.to_field(), v, "status round trip");
                let _ = s.name();
            }
        }
        7 => {
            if let Ok(c) = Cqe::new_checked(data) {
                let _ = (c.dw0(), c.dw1(), c.sqhd(), c.sqid(), c.cid(), c.status());
            }
        }
        8 => {
            if let Ok(c) = ConnectData::new_checked(data) {
                let _ = (c.hostid(), c.cntlid(), c.subsysnqn(), c.hostnqn());
                let _ = Nqn::from_wire(c.subsysnqn_field());
                let _ = Nqn::from_wire(c.hostnqn_field());
            }
            if let Ok(c) = ConnectCmd::new_checked(data) {
                let _ = (c.recfmt(), c.qid(), c.sqsize(), c.cattr(), c.kato());
            }
        }
        9 => {
            let _ =
                nvmf_initiator::controller::ControllerIdentity::parse(data, data.len() as u8 % 16);
        }
        10 => {
            let _ = nvmf_initiator::controller::NamespaceInfo::parse(Nsid(1), data);
        }
        11 => {
            let _ = nvmf_initiator::discovery::parse_discovery_log(data);
            let _ = nvmf_initiator::discovery::DiscoveryEntry::parse(data);
        }
        12 => {
            if let Ok(e) = ErrorInfoEntry::new_checked(data) {
                let _ = (e.error_count(), e.sqid(), e.status());
            }
        }
        13 => {
            if let Ok(r) = CmRequest::new_checked(data) {
                let _ = format!("{r:?}");
            }
            if let Ok(r) = CmAccept::new_checked(data) {
                let _ = format!("{r:?}");
            }
            if let Ok(r) = CmReject::new_checked(data) {
                let _ = r.sts();
            }
        }
        14 => {
            if let Ok(h) = Header::new_checked(data) {
                let _ = (h.pdu_type(), h.flags(), h.hlen(), h.pdo(), h.plen());
            }
            if let Ok(d) = DataPdu::new_checked(data) {
                let _ = (d.command_id(), d.ttag(), d.data_offset(), d.data_length());
            }
            if let Ok(t) = TermReq::new_checked(data) {
                let _ = format!("{t:?}");
            }
        }
        _ => {
            let _ = nvmf_common::wire::field_to_string(data);
            let _ = nvmf_common::wire::fabrics::nqn_str(data);
        }
    }
}
