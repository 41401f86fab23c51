//! NVMe/RDMA transport binding: the RDMA-CM private data exchanged on connect
//! (Linux `include/linux/nvme-rdma.h`: `struct nvme_rdma_cm_req`,
//! `struct nvme_rdma_cm_rep`, `struct nvme_rdma_cm_rej`).

use super::{getters, setters, view};

/// The only private data record format defined.
pub const NVME_RDMA_CM_FMT_1_0: u16 = 0x0;

/// The length of the RDMA-CM connect request private data.
pub const CM_REQ_LEN: usize = 32;
/// The length of the RDMA-CM accept (reply) private data.
pub const CM_ACCEPT_LEN: usize = 32;
/// The length of the RDMA-CM reject private data.
pub const CM_REJECT_LEN: usize = 4;

/// The TCP port NVMe/RDMA targets listen on by default (Linux `NVME_RDMA_IP_PORT`).
pub const NVME_RDMA_IP_PORT: u16 = 4420;

mod req_field {
    use core::ops::Range;
    pub const RECFMT: Range<usize> = 0..2;
    pub const QID: Range<usize> = 2..4;
    pub const HRQSIZE: Range<usize> = 4..6;
    pub const HSQSIZE: Range<usize> = 6..8;
    pub const CNTLID: Range<usize> = 8..10;
}

view!(
    /// A view of the RDMA-CM connect request private data (host → controller).
    CmRequest,
    CM_REQ_LEN
);

impl<T: AsRef<[u8]>> CmRequest<T> {
    getters! {
        /// Record format ([`NVME_RDMA_CM_FMT_1_0`]).
        recfmt: u16 = req_field::RECFMT,
        /// Queue ID (0 = admin queue).
        qid: u16 = req_field::QID,
        /// Host receive queue size (1-based; the number of responses the host can take).
        hrqsize: u16 = req_field::HRQSIZE,
        /// Host send queue size (0-based, like the Connect command's SQSIZE).
        hsqsize: u16 = req_field::HSQSIZE,
        /// Controller ID (NVMe-oF 1.1; Linux `cntlid`).
        cntlid: u16 = req_field::CNTLID,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmRequest<T> {
    setters! {
        set_recfmt: u16 = req_field::RECFMT,
        set_qid: u16 = req_field::QID,
        set_hrqsize: u16 = req_field::HRQSIZE,
        set_hsqsize: u16 = req_field::HSQSIZE,
        set_cntlid: u16 = req_field::CNTLID,
    }
}

mod acc_field {
    use core::ops::Range;
    pub const RECFMT: Range<usize> = 0..2;
    pub const CRQSIZE: Range<usize> = 2..4;
}

view!(
    /// A view of the RDMA-CM accept private data (controller → host).
    CmAccept,
    CM_ACCEPT_LEN
);

impl<T: AsRef<[u8]>> CmAccept<T> {
    getters! {
        recfmt: u16 = acc_field::RECFMT,
        /// Controller receive queue size.
        crqsize: u16 = acc_field::CRQSIZE,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmAccept<T> {
    setters! {
        set_recfmt: u16 = acc_field::RECFMT,
        set_crqsize: u16 = acc_field::CRQSIZE,
    }
}

mod rej_field {
    use core::ops::Range;
    pub const RECFMT: Range<usize> = 0..2;
    pub const STS: Range<usize> = 2..4;
}

view!(
    /// A view of the RDMA-CM reject private data (controller → host).
    CmReject,
    CM_REJECT_LEN
);

impl<T: AsRef<[u8]>> CmReject<T> {
    getters! {
        recfmt: u16 = rej_field::RECFMT,
        /// Reject status ([`reject_status`]).
        sts: u16 = rej_field::STS,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmReject<T> {
    setters! {
        set_recfmt: u16 = rej_field::RECFMT,
        set_sts: u16 = rej_field::STS,
    }
}

/// RDMA-CM reject status values (Linux `enum nvme_rdma_cm_status`).
pub mod reject_status {
    /// Linux `NVME_RDMA_CM_INVALID_LEN`.
    pub const INVALID_PRIVATE_DATA_LENGTH: u16 = 0x01;
    pub const INVALID_RECFMT: u16 = 0x02;
    pub const INVALID_QID: u16 = 0x03;
    pub const INVALID_HSQSIZE: u16 = 0x04;
    pub const INVALID_HRQSIZE: u16 = 0x05;
    /// Linux `NVME_RDMA_CM_NO_RSC`.
    pub const NO_RESOURCES: u16 = 0x06;
    pub const INVALID_IRD: u16 = 0x07;
    pub const INVALID_ORD: u16 = 0x08;
    pub const INVALID_CNTLID: u16 = 0x09;
}

/// A human name for a reject status.
pub fn reject_status_name(sts: u16) -> &'static str {
    use reject_status as r;
    match sts {
        r::INVALID_PRIVATE_DATA_LENGTH => "invalid private data length",
        r::INVALID_RECFMT => "invalid record format",
        r::INVALID_QID => "invalid queue ID",
        r::INVALID_HSQSIZE => "invalid host SQ size",
        r::INVALID_HRQSIZE => "invalid host RQ size",
        r::NO_RESOURCES => "no resources",
        r::INVALID_IRD => "invalid IRD",
        r::INVALID_ORD => "invalid ORD",
        r::INVALID_CNTLID => "invalid controller ID",
        _ => "unrecognized reason",
    }
}

/// Builds a connect request's private data.
pub fn cm_request(qid: u16, hrqsize: u16, hsqsize: u16, cntlid: u16) -> [u8; CM_REQ_LEN] {
    let mut r = CmRequest::new_unchecked([0u8; CM_REQ_LEN]);
    r.set_recfmt(NVME_RDMA_CM_FMT_1_0);
    r.set_qid(qid);
    r.set_hrqsize(hrqsize);
    r.set_hsqsize(hsqsize);
    r.set_cntlid(cntlid);
    r.into_inner()
}

/// Builds an accept's private data.
pub fn cm_accept(crqsize: u16) -> [u8; CM_ACCEPT_LEN] {
    let mut a = CmAccept::new_unchecked([0u8; CM_ACCEPT_LEN]);
    a.set_recfmt(NVME_RDMA_CM_FMT_1_0);
    a.set_crqsize(crqsize);
    a.into_inner()
}

/// Builds a reject's private data.
pub fn cm_reject(sts: u16) -> [u8; CM_REJECT_LEN] {
    let mut j = CmReject::new_unchecked([0u8; CM_REJECT_LEN]);
    j.set_recfmt(NVME_RDMA_CM_FMT_1_0);
    j.set_sts(sts);
    j.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::WireError;

    #[test]
    fn request_golden() {
        let b = cm_request(1, 128, 127, 0xFFFF);
        assert_eq!(&b[..10], &[0, 0, 1, 0, 0x80, 0, 0x7F, 0, 0xFF, 0xFF]);
        assert!(b[10..].iter().all(|&x| x == 0));
        let r = CmRequest::new_checked(&b[..]).unwrap();
        assert_eq!(
            (r.recfmt(), r.qid(), r.hrqsize(), r.hsqsize(), r.cntlid()),
            (0, 1, 128, 127, 0xFFFF)
        );
        assert_eq!(
            CmRequest::new_checked(&b[..31]).err(),
            Some(WireError::Truncated { need: 32, have: 31 })
        );
        // A short private data (older hosts) still reads the fields it has.
        let r = CmRequest::new_unchecked(&b[..8]);
        assert_eq!((r.hsqsize(), r.cntlid()), (127, 0));
    }

    #[test]
    fn accept_and_reject_golden() {
        let a = cm_accept(32);
        assert_eq!(&a[..4], &[0, 0, 32, 0]);
        assert!(a[4..].iter().all(|&x| x == 0));
        assert_eq!(CmAccept::new_checked(&a[..]).unwrap().crqsize(), 32);
        let j = cm_reject(reject_status::INVALID_HSQSIZE);
        assert_eq!(j, [0, 0, 4, 0]);
        let v = CmReject::new_checked(&j[..]).unwrap();
        assert_eq!(reject_status_name(v.sts()), "invalid host SQ size");
        assert_eq!(reject_status_name(0x09), "invalid controller ID");
        assert_eq!(reject_status_name(0x77), "unrecognized reason");
        assert!(CmReject::new_checked(&j[..3]).is_err());
    }
}
