//! Connection management (listen, accept and reject with private data) and memory
//! registration.

use super::kit::*;

// ---------------------------------------------------------------------------------
// Connection management.

/// The passive side sees the connect's private data, the active side the accept's;
/// `pre_post` runs once on each new QP; both QPs are live and distinct.
pub fn cm_accept_exchanges_private_data(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let (a_send, a_recv, b_send, b_recv) = (cq(f)?, cq(f)?, cq(f)?, cq(f)?);
    let b_init = qp_init(&pb, &b_send, &b_recv);
    let slot = Arc::new(parking_lot::Mutex::new(None));
    let slot2 = Arc::clone(&slot);
    let Attempt {
        connected,
        accepted,
        listener,
        addr,
    } = attempt(
        f,
        qp_init(&pa, &a_send, &a_recv),
        b"hello from host",
        Box::new(move |req| {
            ensure!(
                carries(req.private_data(), b"hello from host"),
                "the request carries {:?}",
                req.private_data()
            );
            let mut pre_posted = 0;
            let qp = req
                .accept(b_init, b"welcome", b"", &mut |_| {
                    pre_posted += 1;
                    Ok(())
                })
                .map_err(|e| format!("accept: {e}"))?;
            ensure!(pre_posted == 1, "accept ran pre_post {pre_posted} times");
            *slot2.lock() = Some(qp);
            Ok(())
        }),
    );
    accepted?;
    let (qp, reply) = connected.map_err(|e| format!("connect: {e}"))?;
    ensure!(carries(&reply, b"welcome"), "the accept carries {reply:?}");
    ensure!(
        listener.local_addr() == addr,
        "listener.local_addr() is {:?}, not {addr:?}",
        listener.local_addr()
    );
    let sqp = slot.lock().take().ok_or("accept left no QP")?;
    ensure!(
        qp.qp_num() != sqp.qp_num(),
        "both QPs have number {}",
        qp.qp_num()
    );
    ensure!(!qp.is_dead(), "the active QP is dead after connect");
    ensure!(!sqp.is_dead(), "the passive QP is dead after accept");
    // pre_post on the active side runs once, before the connection is established.
    let mut pre_posted = 0;
    let (c_send, c_recv) = (cq(f)?, cq(f)?);
    let addr2 = f.addr();
    let l2 = f
        .device
        .listen(&addr2)
        .map_err(|e| format!("listen: {e}"))?;
    let (b2_send, b2_recv) = (cq(f)?, cq(f)?);
    let b2_init = qp_init(&pb, &b2_send, &b2_recv);
    let timeout = f.timeout;
    let l3 = Arc::clone(&l2);
    let server = thread::spawn(move || -> Result<Arc<dyn QueuePair>, String> {
        let req = l3.next_request(timeout).ok_or("no request")?;
        req.accept(b2_init, b"", b"", &mut |_| Ok(()))
            .map_err(|e| format!("accept: {e}"))
    });
    let c = f.device.connect(
        &addr2,
        qp_init(&pa, &c_send, &c_recv),
        b"",
        &mut |_| {
            pre_posted += 1;
            Ok(())
        },
        f.timeout,
    );
    let s = server
        .join()
        .unwrap_or_else(|_| Err("accepting thread panicked".into()));
    let _c = c.map_err(|e| format!("second connect: {e}"))?;
    let _s = s?;
    ensure!(pre_posted == 1, "connect ran pre_post {pre_posted} times");
    Ok(())
}

/// A rejected connect fails with the reject's private data.
pub fn cm_reject_returns_private_data(f: &Fabric) -> Outcome {
    let pa = pd(f)?;
    let (s, r) = (cq(f)?, cq(f)?);
    let Attempt {
        connected,
        accepted,
        ..
    } = attempt(
        f,
        qp_init(&pa, &s, &r),
        b"x",
        Box::new(|req| {
            req.reject(&[0xde, 0xad]);
            Ok(())
        }),
    );
    accepted?;
    match connected {
        Err(VerbsError::Rejected(data)) if carries(&data, &[0xde, 0xad]) => Ok(()),
        Err(e) => Err(format!("expected Rejected([de, ad]), got {e:?}")),
        Ok(_) => Err("the connect succeeded".into()),
    }
}

/// When accept's `pre_post` fails, accept returns that error and the peer is rejected
/// with the reject data.
pub fn cm_failed_accept_rejects_with_reject_data(f: &Fabric) -> Outcome {
    let (pa, pb) = (pd(f)?, pd(f)?);
    let (s, r, bs, br) = (cq(f)?, cq(f)?, cq(f)?, cq(f)?);
    let b_init = qp_init(&pb, &bs, &br);
    let Attempt {
        connected,
        accepted,
        ..
    } = attempt(
        f,
        qp_init(&pa, &s, &r),
        b"hi",
        Box::new(move |req| {
            let r = req.accept(b_init, b"welcome", b"no resources", &mut |_| {
                Err(VerbsError::Provider("receives could not be posted".into()))
            });
            match r {
                Err(VerbsError::Provider(_)) => Ok(()),
                Err(e) => Err(format!("accept returned {e:?}, not pre_post's error")),
                Ok(_) => Err("accept succeeded although pre_post failed".into()),
            }
        }),
    );
    accepted?;
    match connected {
        Err(VerbsError::Rejected(data)) if carries(&data, b"no resources") => Ok(()),
        Err(e) => Err(format!("expected Rejected(\"no resources\"), got {e:?}")),
        Ok(_) => Err("the connect succeeded".into()),
    }
}

/// A request dropped unanswered refuses the connection.
pub fn cm_dropped_request_is_refused(f: &Fabric) -> Outcome {
    let pa = pd(f)?;
    let (s, r) = (cq(f)?, cq(f)?);
    let Attempt {
        connected,
        accepted,
        ..
    } = attempt(
        f,
        qp_init(&pa, &s, &r),
        b"",
        Box::new(|req| {
            drop(req);
            Ok(())
        }),
    );
    accepted?;
    match connected {
        Err(VerbsError::ConnectionRefused) => Ok(()),
        other => Err(format!(
            "expected ConnectionRefused, got {:?}",
            other.map(|_| "a connection")
        )),
    }
}

/// Connecting where nobody listens fails with `NoListener`.
pub fn cm_connect_without_listener_fails(f: &Fabric) -> Outcome {
    let pa = pd(f)?;
    let (s, r) = (cq(f)?, cq(f)?);
    let addr = f.addr();
    let got = f
        .device
        .connect(&addr, qp_init(&pa, &s, &r), b"", &mut |_| Ok(()), f.timeout);
    match got {
        Err(VerbsError::NoListener(_)) => Ok(()),
        other => Err(format!(
            "connect({addr}) with no listener: expected NoListener, got {:?}",
            other.map(|_| "a connection")
        )),
    }
}

// ---------------------------------------------------------------------------------
// Memory registration.

/// Regions have distinct keys, their buffer's address and length, and `REMOTE_WRITE`
/// without `LOCAL_WRITE` is refused (as `ibv_reg_mr` does).
pub fn registration_keys_and_rights(f: &Fabric) -> Outcome {
    let pd = pd(f)?;
    let mut lkeys = std::collections::HashSet::new();
    let mut rkeys = std::collections::HashSet::new();
    let mut mrs = Vec::new();
    for _ in 0..32 {
        let mr = reg(
            &pd,
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )?;
        ensure!(
            lkeys.insert(mr.lkey()),
            "lkey {:#x} issued twice",
            mr.lkey()
        );
        ensure!(
            rkeys.insert(mr.rkey()),
            "rkey {:#x} issued twice",
            mr.rkey()
        );
        ensure!(mr.len() == 4096, "len() is {}", mr.len());
        ensure!(
            mr.addr() == mr.buffer().addr(),
            "addr() {:#x} is not the buffer's {:#x}",
            mr.addr(),
            mr.buffer().addr()
        );
        mrs.push(mr);
    }
    let buf = DmaBuffer::new(4096).ok_or("allocating")?;
    match pd.register(Arc::new(buf), Access::REMOTE_WRITE) {
        Err(VerbsError::InvalidArgument(_)) => Ok(()),
        Err(e) => Err(format!(
            "REMOTE_WRITE alone: expected InvalidArgument, got {e}"
        )),
        Ok(_) => Err("REMOTE_WRITE without LOCAL_WRITE was registered".into()),
    }
}
