use super::*;

#[test]
fn r2t_windows_ask_in_order_up_to_the_limit() {
    let mut w = R2tWindows::default();
    assert_eq!(w.next_r2t(10_000, 4096, 2), Some((0, 4096)));
    assert_eq!(w.next_r2t(10_000, 4096, 2), Some((4096, 4096)));
    assert_eq!(w.next_r2t(10_000, 4096, 2), None, "two windows outstanding");
    w.accept_h2c(1, 0, 1000).unwrap_or_else(|e| panic!("{e:?}"));
    w.accept_h2c(1, 1000, 3096)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(w.next_r2t(10_000, 4096, 2), Some((8192, 1808)));
    assert_eq!(w.next_r2t(10_000, 4096, 2), None, "all asked for");
    assert!(!w.complete(10_000));
    w.accept_h2c(1, 4096, 4096)
        .unwrap_or_else(|e| panic!("{e:?}"));
    w.accept_h2c(1, 8192, 1808)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(w.drained() && w.complete(10_000));
    w.reset();
    assert!(!w.complete(1));
}

#[test]
fn h2c_outside_a_window_is_out_of_range_and_empty_h2c_names_its_length() {
    let mut w = R2tWindows::default();
    assert_eq!(w.next_r2t(8192, 8192, 1), Some((0, 8192)));
    for (datao, datal) in [(512, 512), (0, 8193), (u32::MAX, 2), (8192, 1)] {
        let e = w.accept_h2c(7, datao, datal).err();
        assert_eq!(
            e.map(|e| (e.fes, e.fei)),
            Some((term_fes::DATA_OUT_OF_RANGE, 0))
        );
    }
    let e = w.accept_h2c(7, 0, 0).err();
    assert_eq!(
        e.map(|e| (e.fes, e.fei)),
        Some((term_fes::INVALID_HEADER_FIELD, offset::DATA_LENGTH))
    );
    // Nothing above moved the window.
    assert!(w.continues_window(0, 8192));
}

#[test]
fn an_r2t_that_was_not_sent_is_taken_back() {
    let mut w = R2tWindows::default();
    let r = w.next_r2t(100, 64, 4).unwrap_or((0, 0));
    w.unsend(r);
    assert_eq!(w.next_r2t(100, 64, 4), Some((0, 64)));
    assert!(w.describe().contains("[0, 64)"));
}

#[test]
fn host_r2t_checks_name_the_field() {
    let mut t = HostTransfer::new(HostData::ByR2t, 8192);
    t.accept_r2t(3, 0, 4096).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(t.moved(), (4096, 8192));
    let fail = |t: &mut HostTransfer, o, l| t.accept_r2t(3, o, l).err().map(|e| (e.fes, e.fei));
    assert_eq!(
        fail(&mut t, 0, 4096),
        Some((term_fes::INVALID_HEADER_FIELD, offset::R2T_OFFSET))
    );
    assert_eq!(
        fail(&mut t, 4096, 0),
        Some((term_fes::INVALID_HEADER_FIELD, offset::R2T_LENGTH))
    );
    assert_eq!(
        fail(&mut t, 4096, u32::MAX),
        Some((term_fes::DATA_OUT_OF_RANGE, offset::R2T_LENGTH))
    );
    t.accept_r2t(3, 4096, 4096)
        .unwrap_or_else(|e| panic!("{e:?}"));
    for data in [
        HostData::None,
        HostData::InCapsule,
        HostData::FromController,
    ] {
        let mut t = HostTransfer::new(data, 8192);
        assert_eq!(
            fail(&mut t, 0, 512),
            Some((term_fes::INVALID_HEADER_FIELD, offset::COMMAND_ID))
        );
    }
}

#[test]
fn host_c2h_checks_direction_and_length() {
    let mut t = HostTransfer::new(HostData::FromController, 4096);
    t.accept_c2h(1, 2048, 2048)
        .unwrap_or_else(|e| panic!("{e:?}"));
    t.accept_c2h(1, 0, 2048).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(t.moved(), (4096, 4096));
    assert!(t.fits_c2h(0, 4096) && !t.fits_c2h(1, 4096) && !t.fits_c2h(u32::MAX, 1));
    let e = t.accept_c2h(1, 4000, 97).err();
    assert_eq!(
        e.map(|e| (e.fes, e.fei)),
        Some((term_fes::DATA_OUT_OF_RANGE, 0))
    );
    let mut w = HostTransfer::new(HostData::ByR2t, 4096);
    assert!(!w.fits_c2h(0, 1));
    let e = w.accept_c2h(1, 0, 1).err();
    assert_eq!(
        e.map(|e| (e.fes, e.fei)),
        Some((term_fes::INVALID_HEADER_FIELD, offset::COMMAND_ID))
    );
}
