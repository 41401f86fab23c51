//! Golden-byte and round-trip tests of the Identify structures.

use super::*;
use crate::wire::WireError;

#[test]
fn id_ctrl_golden() {
    let mut c = IdentifyController::new_unchecked(vec![0u8; IDENTIFY_LEN]);
    c.set_vid(0x1B36);
    c.set_ssvid(0x1AF4);
    c.set_sn("SN123");
    c.set_mn("Model é");
    c.set_fr("1.0-long-revision");
    c.set_rab(6);
    c.set_ieee([0x01, 0x02, 0x03]);
    c.set_cmic(cmic::MULTI_CTRL);
    c.set_mdts(5);
    c.set_cntlid(0x0102);
    c.set_ver(0x0002_0000);
    c.set_oaes(oaes::NS_ATTR | oaes::DISCOVERY_LOG_CHANGE);
    c.set_ctratt(ctratt::HOST_ID_128);
    c.set_rrls(0x0A0B);
    c.set_cntrltype(cntrltype::IO);
    c.set_fguid([0xAB; 16]);
    c.set_crdt1(1);
    c.set_crdt3(3);
    c.set_mec(0x55);
    c.set_oacs(oacs::FW);
    c.set_acl(3);
    c.set_aerl(3);
    c.set_frmw(frmw::SLOT1_RO | (1 << frmw::NUM_SLOTS_SHIFT));
    c.set_lpa(lpa::CMD_EFFECTS | lpa::EXTENDED);
    c.set_elpe(63);
    c.set_wctemp(0x0157);
    c.set_cctemp(0x0175);
    c.set_tnvmcap(1 << 40);
    c.set_kas(10);
    c.set_anatt(10);
    c.set_anacap(anacap::OPTIMIZED);
    c.set_anagrpmax(0x20);
    c.set_pels(7);
    c.set_domainid(9);
    c.set_megcap(0x77);
    c.set_sqes(entry_size::SQES_64);
    c.set_cqes(entry_size::CQES_16);
    c.set_maxcmd(128);
    c.set_nn(1024);
    c.set_oncs(oncs::DSM | oncs::WRITE_ZEROES | oncs::COPY);
    c.set_fuses(fuses::COMPARE_AND_WRITE);
    c.set_vwc(vwc::PRESENT | vwc::FLUSH_BROADCAST_SUPPORTED);
    c.set_awun(0x11);
    c.set_icsvscc(1);
    c.set_acwu(0x22);
    c.set_ocfs(0x33);
    c.set_sgls(sgls::SUPPORTED | sgls::KEYED | sgls::SGL_OFFSET);
    c.set_mnan(0x44);
    c.set_maxdna(0x66);
    c.set_maxcna(0x88);
    c.set_oaqd(0x99);
    c.set_subnqn("nqn.2024-01.io.example:sub");
    c.set_ioccsz(260);
    c.set_iorcsz(1);
    c.set_icdoff(0);
    c.set_fcatt(fcatt::STATIC_CONTROLLER_MODEL);
    c.set_msdbd(1);
    c.set_ofcs(1);
    c.set_dctype(dctype::DDC);
    {
        let mut p = c.psd_mut(0);
        p.set_max_power(2500);
        p.set_flags(ps_flags::NON_OP_STATE);
        p.set_entry_lat(10);
        p.set_exit_lat(20);
        p.set_active_work_scale(2);
    }
    c.psd_mut(31).set_max_power(7);
    assert!(c.psd_mut(32).as_bytes().is_empty());
    let b = c.as_bytes();
    assert_eq!(&b[0..4], &[0x36, 0x1B, 0xF4, 0x1A]);
    assert_eq!(&b[4..24], b"SN123               ");
    assert_eq!(&b[24..33], b"Model ?? ");
    assert_eq!(&b[64..72], b"1.0-long");
    assert_eq!(&b[72..80], &[6, 1, 2, 3, 2, 5, 0x02, 0x01]);
    assert_eq!(&b[80..84], &[0, 0, 2, 0]);
    assert_eq!(&b[92..96], &[0, 1, 0, 0x80]);
    assert_eq!(&b[96..102], &[1, 0, 0, 0, 0x0B, 0x0A]);
    assert_eq!(b[111], 1);
    assert_eq!(&b[112..128], &[0xAB; 16]);
    assert_eq!(&b[128..134], &[1, 0, 0, 0, 3, 0]);
    assert_eq!(b[255], 0x55);
    assert_eq!(&b[256..264], &[4, 0, 3, 3, 3, 6, 63, 0]);
    assert_eq!(&b[266..270], &[0x57, 0x01, 0x75, 0x01]);
    assert_eq!(&b[280..296], &(1u128 << 40).to_le_bytes());
    assert_eq!(&b[320..322], &[10, 0]);
    assert_eq!(&b[342..348], &[10, 1, 0x20, 0, 0, 0]);
    assert_eq!(&b[352..358], &[7, 0, 0, 0, 9, 0]);
    assert_eq!(b[368], 0x77);
    assert_eq!(&b[512..520], &[0x66, 0x44, 128, 0, 0, 4, 0, 0]);
    assert_eq!(&b[520..530], &[0x0C, 0x01, 1, 0, 0, 0x07, 0x11, 0, 0, 0]);
    assert_eq!(&b[530..536], &[1, 0, 0x22, 0, 0x33, 0]);
    assert_eq!(&b[536..544], &[0x05, 0x00, 0x10, 0x00, 0x44, 0, 0, 0]);
    assert_eq!(b[544], 0x66);
    assert_eq!(&b[560..568], &[0x88, 0, 0, 0, 0x99, 0, 0, 0]);
    assert_eq!(&b[768..772], b"nqn.");
    assert_eq!(b[768 + 26], 0);
    // Linux: ioccsz @1792, iorcsz @1796, icdoff @1800, ctrattr @1802, msdbd @1803,
    // dctype @1806.
    assert_eq!(
        &b[1792..1807],
        &[4, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 1]
    );
    assert_eq!(
        &b[2048..2060],
        &[0xC4, 0x09, 0, 2, 10, 0, 0, 0, 20, 0, 0, 0]
    );
    assert_eq!(b[2048 + 22], 2);
    assert_eq!(&b[2048 + 31 * 32..2048 + 31 * 32 + 2], &[7, 0]);

    let p = IdentifyController::new_checked(b).unwrap();
    assert_eq!(p.sn_string(), "SN123");
    assert_eq!(p.mn_string(), "Model ??");
    assert_eq!(p.fr_string(), "1.0-long");
    assert_eq!(p.subnqn_str(), Some("nqn.2024-01.io.example:sub"));
    assert_eq!(p.ieee(), [1, 2, 3]);
    assert_eq!(p.ioccsz(), 260);
    assert_eq!(p.dctype(), dctype::DDC);
    assert_eq!(p.psd(0).exit_lat(), 20);
    assert_eq!(p.psd(40).max_power(), 0);
    assert_eq!(p.tnvmcap(), 1 << 40);
    assert_eq!(p.vs().len(), 1024);
    assert_eq!(
        IdentifyController::new_checked(&b[..4095]).err(),
        Some(WireError::Truncated {
            need: 4096,
            have: 4095
        })
    );
}

#[test]
fn id_ns_golden() {
    let mut n = IdentifyNamespace::new_unchecked(vec![0u8; IDENTIFY_LEN]);
    n.set_nsze(0x1_0000_0000);
    n.set_ncap(0x1_0000_0000);
    n.set_nuse(0x10);
    n.set_nsfeat(nsfeat::THIN | nsfeat::OPTPERF);
    n.set_nlbaf(1);
    n.set_flbas(flbas_encode(1, false));
    n.set_mc(mc::EXTENDED_LBA);
    n.set_dpc(dpc::PI_TYPE1);
    n.set_nmic(nmic::SHARED);
    n.set_rescap(rescap::PTPL);
    n.set_dlfeat(dlfeat::READ_ZEROES | dlfeat::WRITE_ZEROES_DEAC);
    n.set_nawun(1);
    n.set_noiob(0x40);
    n.set_nvmcap(0x2000);
    n.set_npwg(7);
    n.set_nows(15);
    n.set_mssrl(0x100);
    n.set_mcl(0x1000);
    n.set_msrc(0x7F);
    n.set_anagrpid(1);
    n.set_nsattr(nsattr::WRITE_PROTECTED);
    n.set_nvmsetid(2);
    n.set_endgid(3);
    n.set_nguid([0x11; 16]);
    n.set_eui64([0x22; 8]);
    n.set_lbaf(0, LbaFormat::new(9));
    n.set_lbaf(
        1,
        LbaFormat {
            ms: 8,
            ds: 12,
            rp: rp::BETTER,
        },
    );
    n.set_lbaf(63, LbaFormat::new(16));
    n.set_lbaf(64, LbaFormat::new(17));
    let b = n.as_bytes();
    assert_eq!(&b[0..8], &[0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(&b[16..24], &[0x10, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&b[24..34], &[0x11, 1, 1, 1, 1, 0, 1, 1, 0, 0x09]);
    assert_eq!(&b[34..36], &[1, 0]);
    assert_eq!(&b[46..50], &[0x40, 0, 0x00, 0x20]);
    assert_eq!(&b[64..66], &[7, 0]);
    assert_eq!(&b[72..81], &[15, 0, 0, 1, 0, 0x10, 0, 0, 0x7F]);
    assert_eq!(&b[92..104], &[1, 0, 0, 0, 0, 0, 0, 1, 2, 0, 3, 0]);
    assert_eq!(&b[104..120], &[0x11; 16]);
    assert_eq!(&b[120..128], &[0x22; 8]);
    assert_eq!(&b[128..136], &[0, 0, 9, 0, 8, 0, 12, 1]);
    assert_eq!(&b[380..384], &[0, 0, 16, 0]);
    assert!(b[384..].iter().all(|&x| x == 0));
    let p = IdentifyNamespace::new_checked(b).unwrap();
    assert_eq!(p.current_lbaf().block_size(), Some(4096));
    assert_eq!(p.lbaf(0).block_size(), Some(512));
    assert_eq!(p.lbaf(2), LbaFormat::default());
    assert_eq!(p.lbaf(64), LbaFormat::default());
    assert_eq!(p.nsze(), 0x1_0000_0000);
    assert_eq!(p.nvmcap(), 0x2000);
    assert_eq!(p.eui64(), [0x22; 8]);
}

#[test]
fn flbas_index_math() {
    assert_eq!(flbas_index(0x10), 0);
    assert_eq!(flbas_index(0x0F), 15);
    assert_eq!(flbas_index(0x20), 16);
    assert_eq!(flbas_index(0x6F), 63);
    for i in 0..64u8 {
        assert_eq!(flbas_index(flbas_encode(i, true)), i);
        assert_ne!(flbas_encode(i, true) & flbas::META_EXT, 0);
    }
    assert_eq!(LbaFormat::from_bytes([0, 0, 0xFF, 0xFF]).rp, 3);
    assert_eq!(LbaFormat::new(0).block_size(), None);
}

#[test]
fn cs_specific_structs() {
    let mut c = IdentifyCtrlNvm::new_unchecked(vec![0u8; IDENTIFY_LEN]);
    c.set_vsl(1);
    c.set_wzsl(2);
    c.set_wusl(3);
    c.set_dmrl(4);
    c.set_dmrsl(0x0506_0708);
    c.set_dmsl(0x0A);
    assert_eq!(
        &c.as_bytes()[..16],
        &[1, 2, 3, 4, 8, 7, 6, 5, 0x0A, 0, 0, 0, 0, 0, 0, 0]
    );
    let mut n = IdentifyNsNvm::new_unchecked(vec![0u8; IDENTIFY_LEN]);
    n.set_lbstm(1);
    n.set_pic(2);
    n.set_elbaf(1, 0x80);
    assert_eq!(
        &n.as_bytes()[8..20],
        &[2, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0]
    );
    assert_eq!(n.elbaf(1), 0x80);
    assert_eq!(n.elbaf(64), 0);
    let mut i = IdentifyNsCsIndep::new_unchecked(vec![0u8; IDENTIFY_LEN]);
    i.set_nsfeat(1);
    i.set_nmic(1);
    i.set_anagrpid(0x0102);
    i.set_nsattr(1);
    i.set_nvmsetid(3);
    i.set_endgid(4);
    i.set_nstat(nstat::READY);
    assert_eq!(
        &i.as_bytes()[..16],
        &[1, 1, 0, 0, 2, 1, 0, 0, 1, 0, 3, 0, 4, 0, 1, 0]
    );
}

#[test]
fn ns_list() {
    let mut out = vec![0xFFu8; IDENTIFY_LEN];
    assert_eq!(write_active_ns_list(&mut out, [1u32, 2, 10].into_iter()), 3);
    assert_eq!(
        &out[..16],
        &[1, 0, 0, 0, 2, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0]
    );
    assert!(out[12..].iter().all(|&x| x == 0));
    assert_eq!(parse_ns_list(&out), vec![1, 2, 10]);
    assert_eq!(write_active_ns_list(&mut out, 1..=5000u32), NS_LIST_MAX);
    assert_eq!(parse_ns_list(&out).len(), NS_LIST_MAX);
    let mut small = [0u8; 6];
    assert_eq!(write_active_ns_list(&mut small, 1..=3u32), 1);
}

#[test]
fn ns_id_descriptors() {
    let descs = [
        NsIdDescriptor::Eui64([1; 8]),
        NsIdDescriptor::Nguid([2; 16]),
        NsIdDescriptor::Uuid([3; 16]),
        NsIdDescriptor::Csi(0),
    ];
    let mut out = vec![0xEEu8; IDENTIFY_LEN];
    let n = write_ns_id_descriptors(&mut out, &descs);
    assert_eq!(n, 12 + 20 + 20 + 5);
    assert_eq!(&out[0..4], &[1, 8, 0, 0]);
    assert_eq!(&out[4..12], &[1; 8]);
    assert_eq!(&out[12..16], &[2, 16, 0, 0]);
    assert_eq!(&out[32..36], &[3, 16, 0, 0]);
    assert_eq!(&out[52..57], &[4, 1, 0, 0, 0]);
    assert!(out[57..].iter().all(|&x| x == 0));
    assert_eq!(parse_ns_id_descriptors(&out), descs.to_vec());
    // Too small: only what fits.
    let mut tiny = [0u8; 20];
    assert_eq!(write_ns_id_descriptors(&mut tiny, &descs), 12);
    assert_eq!(parse_ns_id_descriptors(&tiny), vec![descs[0]]);
}

#[test]
fn ns_id_descriptor_parser_is_robust() {
    // Unknown type skipped, bad length skipped, truncated stops, no panic.
    let mut b = [0u8; 64];
    b[0..4].copy_from_slice(&[0x7, 2, 0, 0]);
    b[6..10].copy_from_slice(&[nidt::EUI64, 4, 0, 0]);
    b[14..18].copy_from_slice(&[nidt::CSI, 1, 0, 0]);
    b[18] = 2;
    b[19..23].copy_from_slice(&[nidt::NGUID, 16, 0, 0]);
    assert_eq!(
        parse_ns_id_descriptors(&b[..30]),
        vec![NsIdDescriptor::Csi(2)]
    );
    // The offset is where the kept descriptor's header starts, past the skipped ones.
    assert_eq!(
        parse_ns_id_descriptors_at(&b[..30]),
        vec![(14, NsIdDescriptor::Csi(2))]
    );
    assert_eq!(parse_ns_id_descriptors(&[]), vec![]);
    assert_eq!(parse_ns_id_descriptors(&[1, 0xFF, 0]), vec![]);
    for len in 0..b.len() {
        let _ = parse_ns_id_descriptors(&b[..len]);
    }
    let all = [0xFFu8; 300];
    let _ = parse_ns_id_descriptors(&all);
}
